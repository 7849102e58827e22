//! SafeTensors reader: the tiny fixture against its manifest (written by make_model.py),
//! and bad inputs → an error naming the file, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use proptest::prelude::*;
use rwkv_engine::format::{safetensors, FileFormat, MetaValue};
use rwkv_engine::{DType, EngineError, ModelFile};
use serde_json::Value as Json;
use support::*;

#[test]
fn tiny_fixture_matches_manifest() {
    let path = fixtures().join("rwkv7-tiny.safetensors");
    let file = ModelFile::open(&path).unwrap();
    assert_eq!(file.format(), FileFormat::SafeTensors);
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(fixtures().join("rwkv7-tiny.json")).unwrap())
            .unwrap();
    let shapes = manifest["tensors"].as_object().unwrap();
    assert_eq!(file.tensors().len(), shapes.len());
    // The header length as the file states it: data starts right after it.
    let bytes = std::fs::read(&path).unwrap();
    let data_start = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut end = data_start;
    for t in file.tensors() {
        let want: Vec<usize> = shapes[&t.name]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, want, "{}", t.name);
        assert_eq!(t.dtype, DType::F16);
        assert_eq!(
            t.offset, end,
            "{}: tensors are contiguous and sorted by offset",
            t.name
        );
        assert_eq!(t.len, 2 * want.iter().product::<usize>());
        end += t.len;
    }
    assert_eq!(end, bytes.len());
    assert_eq!(
        file.metadata(),
        &[("format".to_string(), MetaValue::String("pt".into()))]
    );
    // Spot-check one value against an independent decode of the raw file bytes.
    let t = file.tensor("ln_out.weight").unwrap();
    let start = bytes.len() - 256;
    assert_eq!(t.bytes, &bytes[start..]);
}

fn st(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    b
}

fn parse_err(bytes: &[u8]) -> EngineError {
    let path = Path::new("bad.safetensors");
    let e = safetensors::parse(path, bytes).expect_err("must fail");
    assert_eq!(err_path(&e), Some(path), "{e}");
    e
}

#[test]
fn synthetic_ok() {
    let h = r#"{"__metadata__":{"b":"2","a":"1"},"x":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}  "#;
    let (t, m) = safetensors::parse(Path::new("ok"), &st(h, &[0; 8])).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(
        (
            t[0].name.as_str(),
            t[0].dtype,
            t[0].shape.clone(),
            t[0].offset,
            t[0].len
        ),
        ("x", DType::BF16, vec![2, 1], 8 + h.len(), 4)
    );
    assert_eq!(
        (t[1].name.as_str(), t[1].shape.len(), t[1].len),
        ("y", 0, 4)
    );
    assert_eq!(m[0], ("a".to_string(), MetaValue::String("1".into())));
    assert_eq!(m[1].0, "b");
}

#[test]
fn bad_headers() {
    let p = Path::new("bad.safetensors");
    assert_malformed(&parse_err(b"\x01\x02"), p, "fewer than the 8-byte");
    // Header length past the end / absurd.
    let mut b = (1u64 << 62).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert_malformed(&parse_err(&b), p, "past the end");
    let mut b = 100u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert_malformed(&parse_err(&b), p, "past the end");
    // Not JSON / not an object.
    assert_malformed(&parse_err(&st("GGUX", &[])), p, "not a SafeTensors file");
    assert_malformed(&parse_err(&st("{\"x\":", &[])), p, "JSON");
    // Offsets past the end of the data, overlapping, or disagreeing with the shape.
    let one = |dt: &str, shape: &str, off: &str, data: usize| {
        st(
            &format!(r#"{{"x":{{"dtype":"{dt}","shape":{shape},"data_offsets":{off}}}}}"#),
            &vec![0; data],
        )
    };
    assert_malformed(
        &parse_err(&one("F16", "[4]", "[0,8]", 4)),
        p,
        "8 bytes of tensor data but 4",
    );
    assert_malformed(&parse_err(&one("F16", "[4]", "[0,6]", 6)), p, "JSON");
    assert_malformed(&parse_err(&one("F16", "[4]", "[2,10]", 10)), p, "JSON");
    assert_malformed(
        &parse_err(&one("F16", "[4, 18446744073709551615]", "[0,8]", 8)),
        p,
        "JSON",
    );
    // Offsets near u64::MAX: the safetensors crate's own end check would overflow.
    // Sixteen U8 tensors of 2^60 bytes (less 5 for the last) end at 2^64 - 5.
    let big = 1u64 << 60;
    let entries: Vec<String> = (0..16u64)
        .map(|i| {
            let end = if i == 15 { u64::MAX - 4 } else { (i + 1) * big };
            format!(
                r#""t{i:02}":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{end}]}}"#,
                end - i * big,
                i * big
            )
        })
        .collect();
    let h = format!("{{{}}}", entries.join(","));
    assert_malformed(&parse_err(&st(&h, &[0; 16])), p, "tensor data");
    // Unsupported dtype names the tensor.
    match parse_err(&one("I32", "[2]", "[0,8]", 8)) {
        EngineError::UnsupportedType { tensor, dtype, .. } => {
            assert_eq!((tensor.as_str(), dtype.as_str()), ("x", "I32"))
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn truncated_fixture_at_many_points() {
    let bytes = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    for cut in [
        1,
        7,
        8,
        9,
        100,
        6000,
        6103,
        6104,
        6105,
        100_000,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        let name = format!("cut-{cut}.safetensors");
        let e = ModelFile::from_bytes(&name, &bytes[..cut]).expect_err("truncated file must fail");
        assert!(
            matches!(e, EngineError::Malformed { .. }),
            "cut {cut}: {e:?}"
        );
        assert_eq!(err_path(&e), Some(Path::new(&name)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    #[test]
    fn random_corruption_never_panics(edits in proptest::collection::vec((0usize..200, any::<u8>()), 1..6)) {
        let h = r#"{"__metadata__":{"format":"pt"},"x":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
        let mut b = st(h, &[1; 12]);
        for (at, v) in edits {
            let n = b.len();
            b[at % n] = v;
        }
        match safetensors::parse(Path::new("f"), &b) {
            Ok((ts, _)) => for t in ts { prop_assert!(t.offset + t.len <= b.len()); },
            Err(e) => prop_assert_eq!(err_path(&e), Some(Path::new("f"))),
        }
    }
}
