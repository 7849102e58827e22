//! Hostile files (issue 33, part A): every reader bounds what a file can make it allocate,
//! and refuses past the bound with an error naming the file and what was over — never an
//! abort. Each case is crafted here (`hostile/mod.rs`); the small ones are also committed
//! to the fuzzers' corpus (`fuzz/corpus-min/<target>/hostile-*`, written by
//! `write_fuzz_corpus` below). Outputs: `hostile_outputs.rs`; peak memory on the large
//! cases: `hostile_rss.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use rwkv_engine::format::{gguf, pth, MetaArray, MetaValue};
use rwkv_engine::{EngineError, LoraAdapter, LoraBase, ModelFile, Rwkv7Weights};
use support::*;

mod hostile;
use hostile::*;

// ---- GGUF metadata ----------------------------------------------------------------------

/// A U8 array one element over the default element budget (4 MiB on disk): refused with
/// the key and the limit named. Before the budget this parsed, into 32 bytes per element
/// (128 MiB for a 4 MiB file; the 150 MB file reached 4.8 GB).
#[test]
fn gguf_array_over_the_element_budget_is_refused() {
    let n = gguf::MAX_META_ELEMENTS as usize + 1;
    let bytes = gguf_u8_array("evil.bytes", n);
    let e = gguf::parse(Path::new("evil.gguf"), &bytes).unwrap_err();
    assert_malformed(&e, Path::new("evil.gguf"), "`evil.bytes`");
    assert!(e.to_string().contains("budget"), "{e}");
    assert!(
        e.to_string().contains(&gguf::MAX_META_ELEMENTS.to_string()),
        "{e}"
    );
    // Through ModelFile too (what `rwkv inspect` and the app open).
    let e = ModelFile::from_bytes("evil.gguf", &bytes).unwrap_err();
    assert_malformed(&e, Path::new("evil.gguf"), "budget");
}

/// Under the budget, arrays come back packed: one byte per U8 element, four per I32.
#[test]
fn gguf_numeric_arrays_are_packed() {
    let n = 1 << 20;
    let bytes = gguf_u8_array("many", n);
    let p = gguf::parse(Path::new("ok.gguf"), &bytes).unwrap();
    match &p.metadata[..] {
        [(k, MetaValue::Array(MetaArray::U8(v)))] => {
            assert_eq!((k.as_str(), v.len()), ("many", n));
            // Reserved exactly, not grown by doubling.
            assert_eq!(v.capacity(), n);
            assert_eq!(v[n - 1], ((n - 1) % 251) as u8);
        }
        other => panic!("{:?}", other.iter().map(|(k, _)| k).collect::<Vec<_>>()),
    }
}

/// The byte budget counts what strings cost in memory (their bytes plus a 24-byte
/// header), so many empty strings — 8 bytes each in the file — hit it too; so do nested
/// arrays and the key/value entries themselves. Small limits keep the files small.
#[test]
fn gguf_byte_budget_counts_strings_nested_arrays_and_keys() {
    let p = Path::new("b.gguf");
    let limits = gguf::Limits {
        meta_elements: 1 << 20,
        meta_bytes: 64 << 10,
    };
    // 4096 empty strings: 32 KiB in the file, 96 KiB once decoded (24 B each).
    let strs = gguf_string_array("empty.strings", &vec![String::new(); 4096]);
    let e = gguf::parse_with(p, &strs, &limits).unwrap_err();
    assert_malformed(&e, p, "`empty.strings`");
    assert!(e.to_string().contains("65536 decoded bytes"), "{e}");
    // The same file under the default limits parses.
    assert!(gguf::parse(p, &strs).is_ok());

    // 4096 empty nested arrays: 12 bytes each in the file, a 32-byte header each in memory.
    let mut b = gguf_prefix(1);
    put_str(&mut b, "nested");
    b.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    b.extend_from_slice(&9u32.to_le_bytes()); // of ARRAY
    b.extend_from_slice(&4096u64.to_le_bytes());
    for _ in 0..4096 {
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
    }
    assert_malformed(
        &gguf::parse_with(p, &b, &limits).unwrap_err(),
        p,
        "`nested`",
    );

    // 2048 keys of U8 values: each key/value entry costs its slot and its string.
    let mut g = Gguf::new();
    for i in 0..2048 {
        g = g.kv(&format!("k{i}"), MetaValue::U8(1));
    }
    let e = gguf::parse_with(p, &g.bytes(), &limits).unwrap_err();
    assert_malformed(&e, p, "metadata key #");
    // The element budget alone: 100 U32s against a limit of 64.
    let small = gguf::Limits {
        meta_elements: 64,
        meta_bytes: 1 << 20,
    };
    let g = Gguf::new().kv("u32s", arr(vec![MetaValue::U32(7); 100]));
    assert_malformed(
        &gguf::parse_with(p, &g.bytes(), &small).unwrap_err(),
        p,
        "`u32s`",
    );
}

/// What every metadata user reads still comes through a budgeted, packed parse: the
/// fixture's vocabulary (65,536 strings and types), its architecture and sizes.
#[test]
fn gguf_fixture_metadata_users_still_work() {
    let file = ModelFile::open(fixtures().join("rwkv7-tiny-Q8_0.gguf")).unwrap();
    let tokens = file
        .meta("tokenizer.ggml.tokens")
        .and_then(MetaValue::as_array)
        .and_then(MetaArray::as_strings)
        .unwrap();
    assert_eq!(tokens.len(), 65536);
    let types = file
        .meta("tokenizer.ggml.token_type")
        .and_then(MetaValue::as_array)
        .unwrap();
    assert!(matches!(types, MetaArray::I32(_)), "{types:?}");
    let tok = rwkv_engine::Tokenizer::from_gguf(&file).unwrap().unwrap();
    assert_eq!(tok.vocab_size(), 65536);
    let w = rwkv_engine::Rwkv7Weights::from_file(&file).unwrap();
    assert_eq!((w.config.n_layer, w.config.n_embd), (2, 128));
}

// ---- .pth: zip directory and pickle -------------------------------------------------------

/// A zip whose end record claims 65,534 entries in a 100-byte file: refused from the
/// count, before any directory entry is parsed (the `zip` crate reserved one entry
/// record per claimed file first, up to the central directory's offset).
#[test]
fn pth_zip_entry_count_is_read_first() {
    let p = Path::new("many.pth");
    for (entries, zip64) in [
        (65_534u64, false),
        (1 << 40, true),
        (pth::MAX_ENTRIES as u64 + 1, true),
    ] {
        let b = zip_claiming_entries(entries, zip64);
        let e = pth::parse(p, &b).unwrap_err();
        assert_malformed(&e, p, "entries");
        assert!(e.to_string().contains(&entries.to_string()), "{e}");
    }
}

/// Pickles that grow the machine without bound: values (`N` then `POP`, so only the arena
/// grows), the stack (`DUP` of one value), marks, the memo (`MEMOIZE` of one value). Each is refused at its
/// cap, naming it, instead of taking ≈ 70× the pickle's size.
#[test]
fn pth_pickle_growth_is_capped() {
    let p = Path::new("pkl.pth");
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("values", repeat_op(b"N0", pth::MAX_VALUES + 1), "values"),
        (
            "stack",
            [&b"N"[..], &repeat_op(b"2", pth::MAX_STACK)].concat(),
            "stack",
        ),
        ("marks", repeat_op(b"(", pth::MAX_MARKS + 1), "MARK"),
        (
            "memo",
            [&b"N"[..], &repeat_op(b"\x94", pth::MAX_MEMO + 1)].concat(),
            "memo",
        ),
    ];
    for (what, ops, needle) in cases {
        let mut pkl = vec![0x80, 2];
        pkl.extend_from_slice(&ops);
        pkl.push(b'.');
        let e = pth::parse(p, &zip_with_pickle(&pkl)).unwrap_err();
        assert_malformed(&e, p, needle);
        assert!(e.to_string().contains("limit"), "{what}: {e}");
    }
}

/// Container items (APPEND of a memoized value into one list) have their own cap: they
/// take no new values and no stack.
#[test]
fn pth_container_items_are_capped() {
    let p = Path::new("items.pth");
    // ]  q0  then (h0 a)×n: append the list to itself n times.
    let mut pkl = vec![0x80, 2, b']', b'q', 0];
    pkl.extend(repeat_op(b"h\x00a", pth::MAX_ITEMS + 1));
    pkl.push(b'.');
    let e = pth::parse(p, &zip_with_pickle(&pkl)).unwrap_err();
    assert_malformed(&e, p, "items");
}

/// A `data.pkl` over the pickle size cap is refused by its size alone.
#[test]
fn pth_pickle_over_the_size_cap_is_refused() {
    let p = Path::new("big.pth");
    let pkl = vec![b'N'; pth::MAX_PICKLE as usize + 1];
    let e = pth::parse(p, &zip_with_pickle(&pkl)).unwrap_err();
    assert_malformed(&e, p, &format!("limit {}", pth::MAX_PICKLE));
}

/// The real torch.save files still read through the new zip reader and the capped machine.
#[test]
fn pth_real_torch_files_still_read() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch"));
    for (stem, n) in [
        ("torch_saved", 6),
        ("torch_state_dict", 2),
        ("torch_param", 1),
    ] {
        let f = ModelFile::open(dir.join(format!("{stem}.pth"))).unwrap();
        assert_eq!(f.tensors().len(), n, "{stem}");
    }
}

// ---- LoRA adapters -------------------------------------------------------------------

/// The tiny fixture model's shapes (C 128, F 512, 2 layers) and file size.
fn tiny_base() -> (rwkv_engine::Rwkv7Config, u64) {
    let path = fixtures().join("rwkv7-tiny-Q8_0.gguf");
    let f = ModelFile::open(&path).unwrap();
    (
        Rwkv7Weights::from_file(&f).unwrap().config,
        f.file_len() as u64,
    )
}

#[track_caller]
fn assert_adapter(e: &EngineError, name: &str, needles: &[&str]) {
    match e {
        EngineError::Adapter { name: n, what } => {
            assert_eq!(n, name, "{e}");
            for needle in needles {
                assert!(what.contains(needle), "{what:?} lacks {needle:?}");
            }
        }
        other => panic!("expected an Adapter error for {name}, got {other:?}"),
    }
}

/// Factors for a 256-wide matrix given to a 128-wide model: refused from the shapes
/// before anything is decoded. The file's first block is a NaN, so a reader that decodes
/// first (`from_bytes`, without a base — and every reader before this check existed)
/// reports the NaN instead: the error says which came first.
#[test]
fn lora_factors_are_checked_against_the_base_before_decoding() {
    let (cfg, model_bytes) = tiny_base();
    let base = LoraBase::new(&cfg, model_bytes);
    let bytes = gguf_lora_q8(256, 32, true);
    let e = LoraAdapter::from_bytes_for("wide.gguf", &bytes, &base).unwrap_err();
    assert_adapter(&e, "wide.gguf", &["blocks.0.att.key", "256×256", "128×128"]);
    let e = LoraAdapter::from_bytes("wide.gguf", &bytes).unwrap_err();
    assert_adapter(&e, "wide.gguf", &["non-finite"]);
    // A layer the model lacks: also before decoding.
    let mut b = bytes.clone();
    patch(
        &mut b,
        b"blk.0.time_mix_key.weight.lora_a",
        b"blk.9.time_mix_key.weight.lora_a",
    );
    patch(
        &mut b,
        b"blk.0.time_mix_key.weight.lora_b",
        b"blk.9.time_mix_key.weight.lora_b",
    );
    let e = LoraAdapter::from_bytes_for("deep.gguf", &b, &base).unwrap_err();
    assert_adapter(&e, "deep.gguf", &["layer 9", "2 layers"]);
    // The same shapes without the NaN, on a base of their size, read.
    let ok = gguf_lora_q8(128, 32, false);
    let a = LoraAdapter::from_bytes_for("ok.gguf", &ok, &base).unwrap();
    assert_eq!((a.matrices.len(), a.rank()), (1, 32));
}

/// A rank above min(n_in, n_out) and a 4-bit factor type are refused with or without a
/// base: both only make factors larger than what they adapt, or decode to 7× their size.
#[test]
fn lora_rank_and_factor_type_are_bounded() {
    let e = LoraAdapter::from_bytes("rank.gguf", &gguf_lora_q8(32, 64, false)).unwrap_err();
    assert_adapter(&e, "rank.gguf", &["rank 64 exceeds min(n_in, n_out) = 32"]);
    let blocks = vec![0u8; 32 * 18];
    let q4 = gguf_lora(2, [32, 32], [32, 32], blocks.clone(), blocks);
    let e = LoraAdapter::from_bytes("q4.gguf", &q4).unwrap_err();
    assert_adapter(&e, "q4.gguf", &["Q4_0", "F32, F16, BF16 or Q8_0"]);
}

/// Factors whose f32 take more than the base model's file size + 128 MiB are refused
/// before decoding: 2 × 2080 × 8192 values (136 MB of f32, 36 MB of Q8_0 on disk) beside
/// a base of 0 bytes.
#[test]
fn lora_decoded_size_is_budgeted_beside_the_base() {
    let mut cfg = tiny_base().0;
    cfg.n_embd = 8192;
    let base = LoraBase::new(&cfg, 0);
    let bytes = gguf_lora_q8(8192, 2080, true);
    let e = LoraAdapter::from_bytes_for("big.gguf", &bytes, &base).unwrap_err();
    assert_adapter(&e, "big.gguf", &["136314880 bytes", "134217728 allowed"]);
}

/// A zip written in the `zip` crate's large-file mode (zip64 extra fields in the local
/// headers, which shift the data) reads through the new directory reader; the central
/// directory's zip64 fields and end record are `format::pth::zipdir`'s unit test.
#[test]
fn pth_zip64_archives_read() {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    w.start_file("archive/data.pkl", o).unwrap();
    w.write_all(b"\x80\x02}q\x00.").unwrap(); // an empty dict
    w.start_file("archive/data/0", o).unwrap();
    w.write_all(&[0; 16]).unwrap();
    let b = w.finish().unwrap().into_inner();
    assert_eq!(pth::parse(Path::new("z64.pth"), &b).unwrap().len(), 0);
}

/// Writes the small crafted cases into the fuzzers' committed regression corpus
/// (`fuzz/corpus-min/<target>/hostile-*`; `scripts/fuzz.sh` fuzzes from it and
/// `fuzz_corpora.rs` replays it):
/// `cargo test --release -p rwkv-engine --test hostile_input -- --ignored write_fuzz_corpus`.
#[test]
#[ignore = "writes the committed fuzz corpus"]
fn write_fuzz_corpus() {
    let root = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/corpus-min"
    ));
    for (target, name, _, bytes) in small_crafted_cases() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// The small crafted cases all fail, for the reason they were made for, with an error
/// naming the file (what the fuzz targets check of every error too); each fits the
/// fuzzers' `-max_len` of 64 KiB.
#[test]
fn small_crafted_cases_are_refused() {
    for (target, name, needle, bytes) in small_crafted_cases() {
        assert!(bytes.len() <= 65536, "{name}: {} bytes", bytes.len());
        let e = match target {
            "gguf" => gguf::parse_with(Path::new(name), &bytes, &FUZZ_GGUF_LIMITS)
                .err()
                .map(|e| e.to_string()),
            "adapters" => {
                let cfg = fuzz_base_config();
                LoraAdapter::from_bytes_for(name, &bytes, &LoraBase::new(&cfg, 0))
                    .err()
                    .map(|e| e.to_string())
            }
            _ => ModelFile::from_bytes(name, &bytes)
                .err()
                .map(|e| e.to_string()),
        };
        let e = e.unwrap_or_else(|| panic!("{target}/{name} was accepted"));
        assert!(
            e.contains(name) && e.contains(needle),
            "{target}/{name}: {e}"
        );
    }
}
