//! PyTorch `.pth` reader: a `.pth` in torch.save's exact format, made from the tiny
//! SafeTensors by `tests/data/make_pth.py` (stdlib only: CI has python3 but no torch),
//! maps to exactly the same weights; hand-assembled pickles and zips cover every error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rwkv_engine::format::{pth, FileFormat};
use rwkv_engine::{DType, EngineError, ModelFile, Rwkv7Weights};
use support::*;

/// Makes `<scratch>/rwkv7-tiny-<dtype>.pth` once per test run; `None` (with a loud message)
/// only when python3 is not installed.
fn tiny_pth(dtype: &'static str) -> Option<PathBuf> {
    static BF16: OnceLock<Option<PathBuf>> = OnceLock::new();
    static F16: OnceLock<Option<PathBuf>> = OnceLock::new();
    let cell = if dtype == "bf16" { &BF16 } else { &F16 };
    cell.get_or_init(|| {
        let dir = scratch(&format!("pth-{dtype}"));
        let out = dir.join(format!("rwkv7-tiny-{dtype}.pth"));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/make_pth.py");
        let st = fixtures().join("rwkv7-tiny.safetensors");
        match Command::new("python3").arg(script).arg(&st).arg(&out).args(["--dtype", dtype]).output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("\n!!!!! SKIPPED: python3 is not installed, so the tiny .pth cannot be made !!!!!\n");
                None
            }
            Err(e) => panic!("running make_pth.py: {e}"),
            Ok(o) => {
                assert!(o.status.success(), "make_pth.py failed: {}", String::from_utf8_lossy(&o.stderr));
                Some(out)
            }
        }
    })
    .clone()
}

/// The .pth (bf16, as BlinkDL releases; and f16) maps to exactly the SafeTensors (f16)
/// weights: the fixture's values are exactly representable in both, so any difference is
/// a reader or mapping bug.
#[test]
fn pth_maps_to_the_same_weights_as_safetensors_exactly() {
    let sf = ModelFile::open(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    let s = Rwkv7Weights::from_file(&sf).unwrap();
    for (dtype, dt) in [("bf16", DType::BF16), ("f16", DType::F16)] {
        let Some(path) = tiny_pth(dtype) else { return };
        let pf = ModelFile::open(&path).unwrap();
        assert_eq!(pf.format(), FileFormat::Pth);
        assert_eq!(pf.tensors().len(), sf.tensors().len());
        for t in pf.tensors() {
            let u = &sf.tensors()[sf.tensors().iter().position(|u| u.name == t.name).unwrap()];
            assert_eq!((&t.shape, t.dtype), (&u.shape, dt), "{}", t.name);
            assert_eq!(
                t.offset % 64,
                0,
                "{}: torch aligns storages to 64 bytes",
                t.name
            );
            assert_eq!(
                decode_float(t.dtype, pf.tensor(&t.name).unwrap().bytes),
                decode_float(u.dtype, sf.tensor(&u.name).unwrap().bytes),
                "{}",
                t.name
            );
        }
        // And through the typed mapping (to_f32 = quant::dequantize).
        let p = Rwkv7Weights::from_file(&pf).unwrap();
        assert_eq!(p.config, s.config);
        assert_eq!(
            p.emb.to_f32_out_in().unwrap(),
            s.emb.to_f32_out_in().unwrap()
        );
        assert_eq!(
            p.head.to_f32_out_in().unwrap(),
            s.head.to_f32_out_in().unwrap()
        );
        for (pb, sb) in p.blocks.iter().zip(&s.blocks) {
            assert_eq!(pb.att.w1.layout, sb.att.w1.layout);
            assert_eq!(pb.att.w1.to_f32().unwrap(), sb.att.w1.to_f32().unwrap());
            assert_eq!(
                pb.att.g2.to_f32_out_in().unwrap(),
                sb.att.g2.to_f32_out_in().unwrap()
            );
            assert_eq!(pb.att.r_k.to_f32().unwrap(), sb.att.r_k.to_f32().unwrap());
            assert_eq!(pb.att.x_a.to_f32().unwrap(), sb.att.x_a.to_f32().unwrap());
            assert_eq!(
                pb.ffn.value.to_f32().unwrap(),
                sb.ffn.value.to_f32().unwrap()
            );
            assert_eq!(pb.att.v2.is_some(), sb.att.v2.is_some());
        }
    }
}

#[test]
fn truncated_pth_at_many_points() {
    let Some(path) = tiny_pth("bf16") else { return };
    let bytes = std::fs::read(path).unwrap();
    for cut in [
        4,
        30,
        100,
        6000,
        7000,
        1_000_000,
        bytes.len() - 5000,
        bytes.len() - 22,
        bytes.len() - 1,
    ] {
        let name = format!("cut-{cut}.pth");
        let e = ModelFile::from_bytes(&name, &bytes[..cut]).expect_err("truncated .pth must fail");
        assert!(
            matches!(e, EngineError::Malformed { .. }),
            "cut {cut}: {e:?}"
        );
        assert_eq!(err_path(&e), Some(Path::new(&name)));
    }
}

// ---- hand-made pickles and zips --------------------------------------------------------

/// A tiny pickle assembler (opcodes as in CPython's pickle.py).
#[derive(Default)]
struct Pk(Vec<u8>);

impl Pk {
    fn op(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn proto(self) -> Self {
        self.op(b"\x80\x02")
    }
    fn global(self, m: &str, n: &str) -> Self {
        self.op(format!("c{m}\n{n}\n").as_bytes())
    }
    fn s(mut self, s: &str) -> Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(mut self, v: i64) -> Self {
        if (0..256).contains(&v) {
            self.0.extend_from_slice(&[b'K', v as u8]);
        } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
            self.0.push(b'J');
            self.0.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.0.extend_from_slice(&[0x8a, 8]);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }
    fn ints(self, v: &[i64]) -> Self {
        let mut p = self.op(b"(");
        for &x in v {
            p = p.int(x);
        }
        p.op(b"t")
    }
    /// `name: _rebuild_tensor_v2(('storage', torch.<cls>, key, 'cpu', numel), offset, shape, stride, False, OrderedDict())`
    #[allow(clippy::too_many_arguments)]
    fn tensor(
        self,
        name: &str,
        cls: &str,
        key: &str,
        numel: i64,
        offset: i64,
        shape: &[i64],
        stride: &[i64],
    ) -> Self {
        self.s(name)
            .global("torch._utils", "_rebuild_tensor_v2")
            .op(b"((")
            .s("storage")
            .global("torch", cls)
            .s(key)
            .s("cpu")
            .int(numel)
            .op(b"tQ")
            .int(offset)
            .ints(shape)
            .ints(stride)
            .op(b"\x89")
            .global("collections", "OrderedDict")
            .op(b")Rt")
            .op(b"R")
    }
    /// OrderedDict() and a MARK for the items (close with `end`).
    fn dict_start(self) -> Self {
        self.proto().global("collections", "OrderedDict").op(b")R(")
    }
    fn end(self) -> Vec<u8> {
        self.op(b"u.").0
    }
}

/// A zip of STORED records under `archive/`.
fn zip_of(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in records {
        w.start_file(format!("archive/{name}"), opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn pth_err(bytes: &[u8]) -> EngineError {
    let p = Path::new("bad.pth");
    let e = pth::parse(p, bytes).expect_err("must fail");
    assert_eq!(err_path(&e), Some(p), "{e}");
    e
}

#[test]
fn shared_storage_offsets_parameters_and_state_dict_metadata() {
    // Two views of one storage (offsets 0 and 4), a Parameter, and a state_dict-style
    // `_metadata` attribute set by BUILD; memo use as CPython writes it.
    let pkl = Pk::default()
        .dict_start()
        .tensor("a", "FloatStorage", "0", 10, 0, &[2, 2], &[2, 1])
        .tensor("b", "FloatStorage", "0", 10, 4, &[1, 1, 6], &[6, 6, 1])
        .s("p")
        .global("torch._utils", "_rebuild_parameter")
        .op(b"(")
        .global("torch._utils", "_rebuild_tensor_v2")
        .op(b"((")
        .s("storage")
        .global("torch", "HalfStorage")
        .s("1")
        .s("cpu")
        .int(3)
        .op(b"tQ")
        .int(0)
        .ints(&[3])
        .ints(&[1])
        .op(b"\x89")
        .global("collections", "OrderedDict")
        .op(b")RtR\x88")
        .global("collections", "OrderedDict")
        .op(b")RtR")
        .op(b"u")
        .op(b"}q\x07(X\x09\x00\x00\x00_metadata}u")
        .op(b"b.")
        .0;
    let data0 = f32s(&[0., 1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    let bytes = zip_of(&[
        ("data.pkl", &pkl),
        ("byteorder", b"little"),
        ("data/0", &data0),
        ("data/1", &[0u8; 6]),
        ("version", b"3\n"),
    ]);
    let ts = pth::parse(Path::new("ok.pth"), &bytes).unwrap();
    assert_eq!(ts.len(), 3);
    let (a, b, p) = (&ts[0], &ts[1], &ts[2]);
    assert_eq!(
        (a.name.as_str(), a.dtype, a.shape.clone(), a.len),
        ("a", DType::F32, vec![2, 2], 16)
    );
    assert_eq!(&bytes[a.offset..a.offset + a.len], &data0[..16]);
    assert_eq!((b.shape.clone(), b.len), (vec![1, 1, 6], 24));
    assert_eq!(
        &bytes[b.offset..b.offset + b.len],
        &data0[16..40],
        "storage offset 4 elements = 16 bytes"
    );
    assert_eq!((p.name.as_str(), p.dtype, p.len), ("p", DType::F16, 6));
}

#[test]
fn pickle_errors() {
    let p = Path::new("bad.pth");
    let ok_tensor = |d: Pk| d.tensor("t", "FloatStorage", "0", 4, 0, &[4], &[1]);
    let with = |pkl: Vec<u8>| zip_of(&[("data.pkl", &pkl), ("data/0", &[0u8; 16])]);

    let pkl = Pk::default()
        .proto()
        .global("os", "system")
        .s("rm -rf /")
        .op(b"\x85R.")
        .0;
    assert_malformed(&pth_err(&with(pkl)), p, "global `os.system`");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "0", 4, 0, &[2, 2], &[1, 2])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "not contiguous");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "0", 4, 2, &[4], &[1])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "outside storage");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "0", 400, 0, &[4], &[1])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "fewer than its 400 elements");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "7", 4, 0, &[4], &[1])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "`archive/data/7` is missing");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "../0", 4, 0, &[4], &[1])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "not a plain record name");

    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "0", 4, -1, &[4], &[1])
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "negative");

    let pkl = Pk::default()
        .dict_start()
        .tensor(
            "t",
            "FloatStorage",
            "0",
            1 << 62,
            0,
            &[1 << 31, 1 << 31, 1 << 31],
            &[1 << 62, 1 << 31, 1],
        )
        .end();
    assert_malformed(&pth_err(&with(pkl)), p, "overflows");

    let pkl = Pk::default().dict_start().s("epoch").int(3).end();
    assert_malformed(
        &pth_err(&with(pkl)),
        p,
        "tensor `epoch`: value is a int, not a tensor",
    );

    let pkl = ok_tensor(Pk::default().dict_start()).0; // no SETITEMS, no STOP
    assert_malformed(&pth_err(&with(pkl)), p, "without STOP");

    let pkl = Pk::default().proto().op(b"h\x05.").0;
    assert_malformed(&pth_err(&with(pkl)), p, "never stored");

    let pkl = Pk::default().proto().op(b"\x8c\x05ab").0;
    assert_malformed(&pth_err(&with(pkl)), p, "past the end of the pickle");

    let pkl = Pk::default().proto().op(b"I1\n.").0; // protocol-0 INT: not what torch writes
    assert_malformed(&pth_err(&with(pkl)), p, "opcode 0x49");

    let pkl = Pk::default().proto().op(b"t.").0;
    assert_malformed(&pth_err(&with(pkl)), p, "no MARK");

    let pkl = Pk::default().proto().ints(&[1, 2]).op(b".").0;
    assert_malformed(&pth_err(&with(pkl)), p, "not a dict of tensors");

    // A storage type the engine does not read, named by tensor.
    let pkl = Pk::default()
        .dict_start()
        .tensor("blocks.0.att.w0", "DoubleStorage", "0", 2, 0, &[2], &[1])
        .end();
    match pth_err(&with(pkl)) {
        EngineError::UnsupportedType { tensor, dtype, .. } => {
            assert_eq!(
                (tensor.as_str(), dtype.as_str()),
                ("blocks.0.att.w0", "torch.DoubleStorage")
            )
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn zip_errors() {
    let p = Path::new("bad.pth");
    let pkl = Pk::default()
        .dict_start()
        .tensor("t", "FloatStorage", "0", 4, 0, &[4], &[1])
        .end();
    // No data.pkl.
    assert_malformed(
        &pth_err(&zip_of(&[("data/0", &[0u8; 16])])),
        p,
        "no `data.pkl`",
    );
    // Big-endian files.
    let b = zip_of(&[
        ("data.pkl", &pkl),
        ("byteorder", b"big"),
        ("data/0", &[0u8; 16]),
    ]);
    assert_malformed(&pth_err(&b), p, "byteorder");
    // A compressed (method 8) entry: patch local and central headers of a STORED zip.
    let mut b = zip_of(&[("data.pkl", &pkl), ("data/0", &[0u8; 16])]);
    for sig in [&b"PK\x03\x04"[..], &b"PK\x01\x02"[..]] {
        let mut from = 0;
        while let Some(at) = find(&b[from..], sig) {
            let at = from + at;
            let field = if sig[2] == 3 { at + 8 } else { at + 10 };
            b[field] = 8;
            from = at + 4;
        }
    }
    assert_malformed(&pth_err(&b), p, "compressed");
    // Not a zip at all behind the magic.
    assert_malformed(&pth_err(b"PK\x03\x04garbage"), p, "zip");
    // Through ModelFile: an empty .pth-named file and a directory.
    let dir = scratch("pth-empty");
    let empty = dir.join("e.pth");
    std::fs::write(&empty, b"").unwrap();
    assert_malformed(&ModelFile::open(&empty).unwrap_err(), &empty, "empty");
    assert!(matches!(
        ModelFile::open(&dir).unwrap_err(),
        EngineError::Io { .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Files written by real `torch.save` (torch 2.11.0, CPU; 2-3 KB each, committed in
/// `tests/data/torch/`), with the values torch itself printed to JSON: bf16, f16 and f32
/// tensors, a `[1, 1, 8]` tensor, two tensors sharing one storage (one at storage offset
/// 4), a 0-d scalar, an `nn.Module.state_dict()` (OrderedDict with `_metadata`, set by
/// BUILD) and an `nn.Parameter` (`_rebuild_parameter`).
#[test]
fn reads_files_written_by_real_torch_save() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch"));
    for (stem, dtypes) in [
        (
            "torch_saved",
            &[
                ("a.bf16", DType::BF16),
                ("b.f16", DType::F16),
                ("c.f32", DType::F32),
            ][..],
        ),
        (
            "torch_state_dict",
            &[("weight", DType::BF16), ("bias", DType::BF16)][..],
        ),
    ] {
        let file = ModelFile::open(dir.join(format!("{stem}.pth"))).unwrap();
        let want: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{stem}.json"))).unwrap())
                .unwrap();
        let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
        let mut keys: Vec<&str> = want.keys().map(String::as_str).collect();
        let mut sorted_names = names.clone();
        sorted_names.sort();
        keys.sort();
        assert_eq!(sorted_names, keys, "{stem}");
        for (name, values) in &want {
            let v = file.tensor(name).unwrap();
            let got = decode_float(v.dtype, v.bytes);
            let expect: Vec<f32> = values
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(got, expect, "{stem}: {name}");
        }
        for (name, dt) in dtypes {
            assert_eq!(file.tensor(name).unwrap().dtype, *dt, "{stem}: {name}");
        }
    }
    let file = ModelFile::open(dir.join("torch_saved.pth")).unwrap();
    let shape = |n: &str| file.tensor(n).unwrap().shape.to_vec();
    assert_eq!(shape("b.f16"), vec![1, 1, 8]);
    assert_eq!(shape("scalar"), Vec::<usize>::new());
    let base = file.tensor("view.base").unwrap().bytes.as_ptr() as usize;
    let off = file.tensor("view.off").unwrap().bytes.as_ptr() as usize;
    assert_eq!(
        off - base,
        16,
        "view.off starts 4 f32 into view.base's storage"
    );

    let file = ModelFile::open(dir.join("torch_param.pth")).unwrap();
    let p = file.tensor("p").unwrap();
    assert_eq!(
        (p.dtype, p.shape, decode_float(p.dtype, p.bytes)),
        (DType::F16, &[2usize][..], vec![1.0, 1.0])
    );
}
