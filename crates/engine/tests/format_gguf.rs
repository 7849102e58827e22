//! GGUF reader: the fixtures against their manifests (written by gguf-py, a peer reader),
//! synthetic files with every metadata type, and every kind of bad input → an error
//! naming the file, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use proptest::prelude::*;
use rwkv_engine::format::{gguf, MetaValue};
use rwkv_engine::{DType, EngineError, ModelFile};
use serde_json::Value as Json;
use support::*;

/// Checks a fixture GGUF against its `*.gguf.json` (made by gguf-py from the same file).
fn check_against_manifest(gguf_name: &str) {
    let path = fixtures().join(gguf_name);
    let manifest: Json = serde_json::from_slice(
        &std::fs::read(fixtures().join(format!("{gguf_name}.json"))).unwrap(),
    )
    .unwrap();
    let file = ModelFile::open(&path).unwrap();
    let parsed = gguf::parse(&path, file.bytes()).unwrap();
    assert_eq!(
        parsed.version as u64,
        manifest["gguf_version"].as_u64().unwrap()
    );
    assert_eq!(parsed.alignment, manifest["alignment"].as_u64().unwrap());
    assert_eq!(
        parsed.data_offset as u64,
        manifest["data_offset"].as_u64().unwrap()
    );
    assert_eq!(file.file_len() as u64, manifest["size"].as_u64().unwrap());

    let tensors = manifest["tensors"].as_array().unwrap();
    assert_eq!(
        tensors.len() as u64,
        manifest["n_tensors"].as_u64().unwrap()
    );
    assert_eq!(file.tensors().len(), tensors.len());
    for (t, m) in file.tensors().iter().zip(tensors) {
        assert_eq!(t.name, m["name"].as_str().unwrap(), "tensor order differs");
        assert_eq!(t.dtype.name(), m["type"].as_str().unwrap(), "{}", t.name);
        let ne: Vec<usize> = m["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let rev: Vec<usize> = ne.iter().rev().copied().collect();
        assert_eq!(t.shape, rev, "{}: shape must be ne reversed", t.name);
        assert_eq!(t.offset as u64, m["offset"].as_u64().unwrap(), "{}", t.name);
        assert_eq!(t.len as u64, m["n_bytes"].as_u64().unwrap(), "{}", t.name);
        let v = file.tensor(&t.name).unwrap();
        assert_eq!(v.bytes.len(), t.len);
    }

    // Metadata: every scalar equal; arrays by length and first/last elements. (serde_json
    // sorts the manifest's keys, so look each one up.)
    let meta = manifest["metadata"].as_object().unwrap();
    assert_eq!(file.metadata().len(), meta.len());
    assert_eq!(
        file.metadata()[0].0,
        "general.architecture",
        "gguf-py writes it first"
    );
    for (k, mv) in meta {
        let v = file
            .meta(k)
            .unwrap_or_else(|| panic!("metadata `{k}` missing"));
        let ty = mv["type"].as_array().unwrap();
        match (ty[0].as_str().unwrap(), v) {
            ("STRING", MetaValue::String(s)) => assert_eq!(s, mv["value"].as_str().unwrap(), "{k}"),
            ("UINT32", MetaValue::U32(x)) => {
                assert_eq!(*x as u64, mv["value"].as_u64().unwrap(), "{k}")
            }
            ("FLOAT32", MetaValue::F32(x)) => {
                assert_eq!(*x as f64, mv["value"].as_f64().unwrap(), "{k}")
            }
            ("ARRAY", MetaValue::Array(items)) => {
                assert_eq!(items.len() as u64, mv["len"].as_u64().unwrap(), "{k}");
                let cmp = |item: &MetaValue, j: &Json| match item {
                    MetaValue::String(s) => assert_eq!(s, j.as_str().unwrap(), "{k}"),
                    MetaValue::I32(x) => assert_eq!(*x as i64, j.as_i64().unwrap(), "{k}"),
                    other => panic!("{k}: unexpected element {other:?}"),
                };
                let first = mv["first"].as_array().unwrap();
                let last = mv["last"].as_array().unwrap();
                // The element type as gguf-py names it (second entry of `type`).
                let want = match ty[1].as_str().unwrap() {
                    "STRING" => 8,
                    "INT32" => 5,
                    other => panic!("{k}: unexpected element type {other}"),
                };
                assert_eq!(items.elem_type(), want, "{k}");
                for (item, j) in items.iter().zip(first) {
                    cmp(&item, j);
                }
                for (item, j) in items.iter().skip(items.len() - last.len()).zip(last) {
                    cmp(&item, j);
                }
            }
            (t, v) => panic!("{k}: manifest type {t} vs parsed {v:?}"),
        }
    }
}

#[test]
fn tiny_q8_0_matches_manifest() {
    check_against_manifest("rwkv7-tiny-Q8_0.gguf");
}

#[test]
fn small_q4_k_m_matches_manifest() {
    check_against_manifest("rwkv7-small-Q4_K_M.gguf");
}

#[test]
fn tokens_array_is_a_string_array() {
    let file = ModelFile::open(fixtures().join("rwkv7-tiny-Q8_0.gguf")).unwrap();
    let Some(MetaValue::Array(tokens)) = file.meta("tokenizer.ggml.tokens") else {
        panic!("no tokens array");
    };
    assert_eq!(tokens.len(), 65536);
    // The World vocabulary's escaped spelling (fixtures README): token 1 is byte 0x00.
    assert_eq!(
        tokens.get(1).as_ref().and_then(MetaValue::as_str),
        Some("\\x00")
    );
    assert_eq!(
        file.meta("general.architecture").and_then(|v| v.as_str()),
        Some("rwkv7")
    );
}

/// A synthetic file with every metadata value type, nested arrays, v2 and v3, and a
/// non-default alignment: everything written comes back.
#[test]
fn synthetic_roundtrip_all_value_types() {
    let nested = arr(vec![arr(vec![arr(vec![arr(vec![MetaValue::U8(7)])])])]);
    let kv = vec![
        ("general.alignment", MetaValue::U32(64)),
        ("u8", MetaValue::U8(250)),
        ("i8", MetaValue::I8(-5)),
        ("u16", MetaValue::U16(65000)),
        ("i16", MetaValue::I16(-30000)),
        ("u32", MetaValue::U32(4_000_000_000)),
        ("i32", MetaValue::I32(-2_000_000_000)),
        ("f32", MetaValue::F32(1.5)),
        ("u64", MetaValue::U64(u64::MAX)),
        ("i64", MetaValue::I64(i64::MIN)),
        ("f64", MetaValue::F64(-0.25)),
        ("bool", MetaValue::Bool(true)),
        ("str", MetaValue::String("héllo \n world".into())),
        ("empty", MetaValue::String(String::new())),
        (
            "strs",
            arr(vec![
                MetaValue::String("a".into()),
                MetaValue::String("bc".into()),
            ]),
        ),
        ("nested4", nested),
    ];
    for version in [2u32, 3] {
        let mut g = Gguf::new();
        g.version = version;
        g.alignment = 64;
        for (k, v) in &kv {
            g = g.kv(k, v.clone());
        }
        g = g
            .tensor(GgufTensor::f32("a", &[3]))
            .tensor(GgufTensor::f32("m", &[4, 2]))
            .tensor(GgufTensor {
                name: "q".into(),
                ne: vec![64, 2],
                ty: 8,
                data: vec![0; 2 * 2 * 34],
            });
        let (bytes, abs) = g.build();
        let p = gguf::parse(Path::new("mem.gguf"), &bytes).unwrap();
        assert_eq!(p.version, version);
        assert_eq!(p.alignment, 64);
        assert_eq!(p.data_offset % 64, 0);
        let got: Vec<(&str, &MetaValue)> =
            p.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let want: Vec<(&str, &MetaValue)> = kv.iter().map(|(k, v)| (*k, v)).collect();
        assert_eq!(got, want);
        assert_eq!(p.tensors.len(), 3);
        assert_eq!(p.tensors[0].shape, vec![3]);
        assert_eq!(p.tensors[1].shape, vec![2, 4], "shape is ne reversed");
        assert_eq!(p.tensors[2].dtype, DType::Q8_0);
        assert_eq!(p.tensors[2].len, 136);
        for (t, a) in p.tensors.iter().zip(abs) {
            assert_eq!(t.offset, a);
            assert_eq!(t.offset % 64, 0);
        }
        assert_eq!(
            &bytes[p.tensors[1].offset..][..8],
            &[0, 0, 0, 0, 0, 0, 128, 63]
        );
    }
}

/// A small valid file for the corruption tests.
fn small() -> Gguf {
    Gguf::new()
        .kv("general.architecture", MetaValue::String("rwkv7".into()))
        .kv("tokens", arr(vec![MetaValue::String("x".into()); 4]))
        .tensor(GgufTensor::f32("t0", &[8]))
        .tensor(GgufTensor::f32("t1", &[4, 2]))
}

fn parse_err(bytes: &[u8]) -> EngineError {
    let path = Path::new("bad.gguf");
    let e = gguf::parse(path, bytes).expect_err("parse must fail");
    assert_eq!(err_path(&e), Some(path), "error must name the file: {e}");
    e
}

/// Header prefix up to and including the counts: magic, version, n_tensors, n_kv.
fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

#[test]
fn wrong_magic_and_versions() {
    let mut b = small().bytes();
    b[3] = b'X';
    assert_malformed(&parse_err(&b), Path::new("bad.gguf"), "magic");
    for (v, needle) in [
        (1u32, "version 1"),
        (4, "version 4"),
        (0x0300_0000, "big-endian"),
        (0, "version 0"),
    ] {
        let mut b = small().bytes();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert_malformed(&parse_err(&b), Path::new("bad.gguf"), needle);
    }
}

#[test]
fn absurd_counts_and_lengths() {
    let p = Path::new("bad.gguf");
    assert_malformed(&parse_err(&header(3, 1 << 40, 0)), p, "tensor count");
    assert_malformed(&parse_err(&header(3, 0, 1 << 40)), p, "metadata count");
    // Counts under the caps but more than the file can hold.
    assert_malformed(&parse_err(&header(3, 60000, 0)), p, "cannot fit");
    assert_malformed(&parse_err(&header(3, 0, 1000)), p, "cannot fit");

    // A key claiming 2^60 bytes.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&(1u64 << 60).to_le_bytes());
    b.extend_from_slice(&[0; 64]);
    assert_malformed(&parse_err(&b), p, "limit");
    // A key longer than what remains.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&100u64.to_le_bytes());
    b.extend_from_slice(b"abc");
    b.extend_from_slice(&[0; 16]);
    assert_malformed(&parse_err(&b), p, "truncated");

    // An array claiming 2^62 elements, and 1000 u64s in 100 bytes.
    for (et, n) in [(0u32, 1u64 << 62), (10, 1000)] {
        let mut b = header(3, 0, 1);
        put_str(&mut b, "arr");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&et.to_le_bytes());
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(&[0; 100]);
        assert_malformed(&parse_err(&b), p, "cannot fit");
    }

    // Arrays nested 5 deep.
    let mut b = header(3, 0, 1);
    put_str(&mut b, "deep");
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..5 {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.extend_from_slice(&[0; 64]);
    assert_malformed(&parse_err(&b), p, "nested");

    // Unknown value type, unknown element type, bool byte 2, duplicate key.
    let one = |ty: u32, payload: &[u8]| {
        let mut b = header(3, 0, 1);
        put_str(&mut b, "k");
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(payload);
        b.extend_from_slice(&[0; 32]);
        b
    };
    assert_malformed(
        &parse_err(&one(13, &[])),
        p,
        "unknown metadata value type 13",
    );
    assert_malformed(
        &parse_err(&one(9, &77u32.to_le_bytes())),
        p,
        "unknown array element type 77",
    );
    assert_malformed(&parse_err(&one(7, &[2])), p, "bool");
    let dup = Gguf::new()
        .kv("k", MetaValue::U8(1))
        .kv("k", MetaValue::U8(2))
        .bytes();
    assert_malformed(&parse_err(&dup), p, "appears twice");
    let bad_key = Gguf::new().kv("k\u{fffd}", MetaValue::U8(1)).bytes();
    let mut b = bad_key.clone();
    let at = find(&b, "k\u{fffd}".as_bytes()).unwrap();
    b[at + 1] = 0xff; // invalid UTF-8 in a key
    assert_malformed(&parse_err(&b), p, "UTF-8");
}

#[test]
fn bad_tensor_infos() {
    let p = Path::new("bad.gguf");
    let with = |t: GgufTensor| Gguf::new().tensor(t).bytes();
    let mut t = GgufTensor::f32("t", &[2, 2, 2, 2]);
    t.ne.push(1); // 5 dims
    t.data.clear();
    assert_malformed(&parse_err(&with(t)), p, "5 dimensions");
    let t = GgufTensor {
        name: "z".into(),
        ne: vec![4, 0],
        ty: 0,
        data: vec![],
    };
    assert_malformed(&parse_err(&with(t)), p, "dimension of 0");
    let t = GgufTensor {
        name: "big".into(),
        ne: vec![1 << 32, 1 << 32, 1 << 32],
        ty: 0,
        data: vec![],
    };
    assert_malformed(&parse_err(&with(t)), p, "overflows");
    // Rows of Q8_0 must be whole blocks of 32.
    let t = GgufTensor {
        name: "q".into(),
        ne: vec![33, 1],
        ty: 8,
        data: vec![0; 68],
    };
    assert_malformed(&parse_err(&with(t)), p, "block");
    // A size past the end of the file: 2^40 f32 elements.
    let t = GgufTensor {
        name: "huge".into(),
        ne: vec![1 << 20, 1 << 20],
        ty: 0,
        data: vec![],
    };
    let e = parse_err(&with(t));
    assert_malformed(&e, p, "past the end");
    assert!(e.to_string().contains("huge"), "{e}");

    // An offset past the end, and a misaligned offset (patch the u64 after the type).
    let g = small();
    for (off, needle) in [
        (1u64 << 40, "past the end"),
        (4, "not a multiple of the alignment"),
    ] {
        let mut b = g.bytes();
        let at = gguf_tensor_info_at(&b, "t1") + 4 + 2 * 8 + 4;
        b[at..at + 8].copy_from_slice(&off.to_le_bytes());
        let e = parse_err(&b);
        assert_malformed(&e, p, needle);
        assert!(e.to_string().contains("t1"), "{e}");
    }
    // Alignment that is not a power of two, or zero.
    for a in [0u32, 3, 48] {
        let b = Gguf::new()
            .kv("general.alignment", MetaValue::U32(a))
            .bytes();
        assert_malformed(&parse_err(&b), p, "power of two");
    }
}

#[test]
fn unknown_tensor_type_names_tensor_and_id() {
    let t = GgufTensor {
        name: "blk.0.weird".into(),
        ne: vec![32],
        ty: 99,
        data: vec![0; 32],
    };
    let b = Gguf::new().tensor(t).bytes();
    match parse_err(&b) {
        EngineError::UnsupportedType { tensor, dtype, .. } => {
            assert_eq!(tensor, "blk.0.weird");
            assert!(dtype.contains("99"), "{dtype}");
        }
        e => panic!("expected UnsupportedType, got {e:?}"),
    }
    // A ggml type that exists but the engine does not read (IQ2_XXS = 16).
    let t = GgufTensor {
        name: "iq".into(),
        ne: vec![256],
        ty: 16,
        data: vec![0; 66],
    };
    assert!(matches!(
        parse_err(&Gguf::new().tensor(t).bytes()),
        EngineError::UnsupportedType { .. }
    ));
}

/// The real Q8_0 fixture cut at many points (inside the magic, the counts, a key, the
/// 65536-token array, the tensor infos, the padding and the tensor data): every cut is a
/// `Malformed` error naming the file.
#[test]
fn truncated_fixture_at_many_points() {
    let bytes = std::fs::read(fixtures().join("rwkv7-tiny-Q8_0.gguf")).unwrap();
    let data_offset = gguf::parse(Path::new("x"), &bytes).unwrap().data_offset;
    let tokens_at = find(&bytes, b"tokenizer.ggml.tokens").unwrap();
    let infos_at = gguf_tensor_info_at(&bytes, "output.weight");
    let cuts = [
        1,
        3,
        4,
        7,
        8,
        15,
        23,
        24,
        30,
        60,
        tokens_at,
        tokens_at + 40,
        tokens_at + 300_000,
        infos_at - 5,
        infos_at + 2,
        infos_at + 30,
        data_offset - 1,
        data_offset,
        data_offset + 1000,
        bytes.len() - 1,
    ];
    for cut in cuts {
        let name = format!("cut-{cut}.gguf");
        let e = ModelFile::from_bytes(&name, &bytes[..cut]).expect_err("truncated file must fail");
        assert!(
            matches!(e, EngineError::Malformed { .. }),
            "cut {cut}: {e:?}"
        );
        assert_eq!(err_path(&e), Some(Path::new(&name)), "cut {cut}: {e}");
    }
}

#[test]
fn empty_file_directory_and_missing_file() {
    let dir = scratch("gguf-empty");
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = ModelFile::open(&empty).unwrap_err();
    assert_malformed(&e, &empty, "empty");
    let e = ModelFile::open(&dir).unwrap_err();
    assert!(matches!(e, EngineError::Io { .. }), "{e:?}");
    assert_eq!(err_path(&e), Some(dir.as_path()));
    assert!(e.to_string().contains("directory"), "{e}");
    let missing = dir.join("nope.gguf");
    let e = ModelFile::open(&missing).unwrap_err();
    assert!(
        matches!(e, EngineError::Io { .. }) && err_path(&e) == Some(missing.as_path()),
        "{e:?}"
    );
    // A real file cut short on disk, through open().
    let cut = dir.join("cut.gguf");
    let bytes = std::fs::read(fixtures().join("rwkv7-tiny-Q8_0.gguf")).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_malformed(&ModelFile::open(&cut).unwrap_err(), &cut, "past the end");
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Random byte edits in a small valid file: parse returns Ok or an error naming the
    /// file, never panics; what it returns lies inside the file.
    #[test]
    fn random_corruption_never_panics(edits in proptest::collection::vec((0usize..400, any::<u8>()), 1..8), cut in 0usize..400) {
        let mut b = small().bytes();
        for (at, v) in edits {
            let n = b.len();
            b[at % n] = v;
        }
        let n = b.len();
        b.truncate(n - cut.min(n));
        match gguf::parse(Path::new("fuzz.gguf"), &b) {
            Ok(p) => {
                for t in &p.tensors {
                    prop_assert!(t.offset + t.len <= b.len());
                }
            }
            Err(e) => prop_assert_eq!(err_path(&e), Some(Path::new("fuzz.gguf"))),
        }
    }
}
