//! Crafted hostile files for `hostile_input.rs` and `hostile_rss.rs`: GGUF headers that
//! ask for much more memory than they take on disk, zips that claim more entries than
//! they hold, pickles that grow the unpickler, LoRA files with factors their base cannot
//! have. Built byte by byte here, so every case says exactly what it is.
#![allow(dead_code)]

use std::io::Write;

use rwkv_engine::format::{gguf, MetaValue};
use rwkv_engine::{LoraRanks, Rwkv7Config};

use super::support::{put_str, Gguf, GgufTensor};

/// The limits the `gguf` fuzz target parses with besides the defaults
/// (`fuzz/fuzz_targets/gguf.rs`), small enough that a seed of a few KiB passes them.
pub const FUZZ_GGUF_LIMITS: gguf::Limits = gguf::Limits {
    meta_elements: 4096,
    meta_bytes: 64 << 10,
};

/// The `adapters` fuzz target's base shape (`fuzz/make_adapter_seeds.py`): C 16, F 32,
/// 2 layers, head size 8.
pub fn fuzz_base_config() -> Rwkv7Config {
    Rwkv7Config {
        n_layer: 2,
        n_embd: 16,
        head_size: 8,
        n_head: 2,
        ffn_dim: 32,
        vocab_size: 8,
        lora: LoraRanks {
            decay_w: 4,
            iclr_a: 4,
            value_v: 4,
            gate_g: 4,
        },
    }
}

/// A GGUF v3 prefix with no tensors and `n_kv` key/value pairs to follow.
pub fn gguf_prefix(n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

/// `b` padded to the default alignment of 32, so a header without tensors ends where its
/// (empty) data section starts.
fn padded(mut b: Vec<u8>) -> Vec<u8> {
    b.resize(b.len().next_multiple_of(32), 0);
    b
}

/// A GGUF whose one key holds a U8 array of `n` elements (`i % 251`): n bytes of array,
/// the shape of the issue's reproduction.
pub fn gguf_u8_array(key: &str, n: usize) -> Vec<u8> {
    let mut b = gguf_prefix(1);
    put_str(&mut b, key);
    b.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    b.extend_from_slice(&0u32.to_le_bytes()); // of UINT8
    b.extend_from_slice(&(n as u64).to_le_bytes());
    b.extend((0..n).map(|i| (i % 251) as u8));
    padded(b)
}

/// A GGUF whose one key holds a string array.
pub fn gguf_string_array(key: &str, items: &[String]) -> Vec<u8> {
    let mut b = gguf_prefix(1);
    put_str(&mut b, key);
    b.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    b.extend_from_slice(&8u32.to_le_bytes()); // of STRING
    b.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for s in items {
        put_str(&mut b, s);
    }
    padded(b)
}

/// A GGUF with `n` empty nested arrays under one key (12 bytes each in the file).
pub fn gguf_nested_arrays(key: &str, n: usize) -> Vec<u8> {
    let mut b = gguf_prefix(1);
    put_str(&mut b, key);
    b.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    b.extend_from_slice(&9u32.to_le_bytes()); // of ARRAY
    b.extend_from_slice(&(n as u64).to_le_bytes());
    for _ in 0..n {
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
    }
    padded(b)
}

/// A zip (behind a local-header magic, so `ModelFile` takes it for a `.pth`) whose end
/// record claims `entries` entries in an empty directory — a zip64 end record and
/// locator when `zip64` (the only way to claim more than 65,534).
pub fn zip_claiming_entries(entries: u64, zip64: bool) -> Vec<u8> {
    let mut b = b"PK\x03\x04".to_vec();
    b.extend_from_slice(&[0; 26]);
    let cd = b.len() as u64;
    if zip64 {
        let rec = b.len() as u64;
        b.extend_from_slice(b"PK\x06\x06");
        b.extend_from_slice(&44u64.to_le_bytes()); // size of the rest of the record
        b.extend_from_slice(&45u16.to_le_bytes()); // version made by
        b.extend_from_slice(&45u16.to_le_bytes()); // version needed
        b.extend_from_slice(&0u32.to_le_bytes()); // this disk
        b.extend_from_slice(&0u32.to_le_bytes()); // disk of the directory
        b.extend_from_slice(&entries.to_le_bytes()); // entries on this disk
        b.extend_from_slice(&entries.to_le_bytes()); // entries in all
        b.extend_from_slice(&0u64.to_le_bytes()); // directory size
        b.extend_from_slice(&cd.to_le_bytes()); // directory offset
        b.extend_from_slice(b"PK\x06\x07");
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&rec.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
    }
    let (n16, off32) = if zip64 {
        (u16::MAX, u32::MAX)
    } else {
        (entries as u16, cd as u32)
    };
    b.extend_from_slice(b"PK\x05\x06");
    b.extend_from_slice(&[0; 4]); // disks
    b.extend_from_slice(&n16.to_le_bytes());
    b.extend_from_slice(&n16.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // directory size
    b.extend_from_slice(&off32.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes()); // comment length
    b
}

/// A SafeTensors file of `n` one-value F32 tensors `t0`, `t1`, …: a header of ≈ 70 bytes
/// a tensor, the largest header per byte of file.
pub fn safetensors_many(n: usize) -> Vec<u8> {
    let mut h = String::from("{");
    for i in 0..n {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(
            r#""t{i}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}"#,
            4 * i,
            4 * i + 4
        ));
    }
    h.push('}');
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(h.as_bytes());
    b.resize(b.len() + 4 * n, 0);
    b
}

/// `op` repeated `n` times.
pub fn repeat_op(op: &[u8], n: usize) -> Vec<u8> {
    op.repeat(n)
}

/// A STORED zip holding `archive/data.pkl` = `pkl` (what torch.save writes, minus the
/// storages).
pub fn zip_with_pickle(pkl: &[u8]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(pkl.len() > u32::MAX as usize);
    w.start_file("archive/data.pkl", o).unwrap();
    w.write_all(pkl).unwrap();
    w.finish().unwrap().into_inner()
}

/// A pickle of `n` `None`s, each popped again (`N0`: two bytes, one 32-byte value each,
/// the stack stays empty) in a zip: the unpickler's arena growth.
pub fn pth_many_values(n: usize) -> Vec<u8> {
    let mut pkl = vec![0x80, 2];
    pkl.extend(repeat_op(b"N0", n));
    pkl.push(b'.');
    zip_with_pickle(&pkl)
}

/// A llama.cpp-style GGUF LoRA adapter with one pair `blk.0.time_mix_key` of ggml type
/// `ty` (`ne` = `[n_in, rank]` and `[rank, n_out]`), its data `data_a` / `data_b`.
pub fn gguf_lora(
    ty: u32,
    ne_a: [u64; 2],
    ne_b: [u64; 2],
    data_a: Vec<u8>,
    data_b: Vec<u8>,
) -> Vec<u8> {
    Gguf::new()
        .kv("general.architecture", MetaValue::String("rwkv7".into()))
        .kv("general.type", MetaValue::String("adapter".into()))
        .kv("adapter.type", MetaValue::String("lora".into()))
        .kv("adapter.lora.alpha", MetaValue::F32(8.0))
        .tensor(GgufTensor {
            name: "blk.0.time_mix_key.weight.lora_a".into(),
            ne: ne_a.to_vec(),
            ty,
            data: data_a,
        })
        .tensor(GgufTensor {
            name: "blk.0.time_mix_key.weight.lora_b".into(),
            ne: ne_b.to_vec(),
            ty,
            data: data_b,
        })
        .bytes()
}

/// Q8_0 blocks (34 bytes: f16 scale, 32 × i8) for `n` values, every value NaN-free but
/// the first block's scale NaN when `nan`: a reader that decodes such a factor reports
/// the NaN; one that checks shapes first never sees it.
pub fn q8_0_blocks(n: usize, nan: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(n / 32 * 34);
    for i in 0..n / 32 {
        let scale: u16 = if nan && i == 0 { 0x7e00 } else { 0x2c00 }; // NaN / 1/16
        b.extend_from_slice(&scale.to_le_bytes());
        b.extend((0..32).map(|j| ((j % 7) as i8 - 3) as u8));
    }
    b
}

/// A Q8_0 GGUF LoRA for a `width`-wide square matrix of rank `rank` (NaN in A's first block
/// when `nan`).
pub fn gguf_lora_q8(width: u64, rank: u64, nan: bool) -> Vec<u8> {
    let n = (width * rank) as usize;
    gguf_lora(
        8,
        [width, rank],
        [rank, width],
        q8_0_blocks(n, nan),
        q8_0_blocks(n, false),
    )
}

/// One small crafted case: fuzz target, file name, what its refusal says, the bytes.
pub type Case = (&'static str, &'static str, &'static str, Vec<u8>);

/// The small crafted cases: each under 64 KiB (the fuzzers' `-max_len`), each refused by
/// the reader its target runs (`gguf` with [`FUZZ_GGUF_LIMITS`], `adapters` against
/// [`fuzz_base_config`]) with an error holding the needle.
pub fn small_crafted_cases() -> Vec<Case> {
    let pk = |ops: &[u8]| {
        let mut pkl = vec![0x80, 2];
        pkl.extend_from_slice(ops);
        pkl.push(b'.');
        zip_with_pickle(&pkl)
    };
    vec![
        (
            "gguf",
            "hostile-u8-array.gguf",
            "budget",
            gguf_u8_array("a", 4097),
        ),
        (
            "gguf",
            "hostile-empty-strings.gguf",
            "budget",
            gguf_string_array("s", &vec![String::new(); 3000]),
        ),
        (
            "gguf",
            "hostile-nested-arrays.gguf",
            "budget",
            gguf_nested_arrays("n", 3000),
        ),
        ("gguf", "hostile-many-keys.gguf", "budget", {
            let mut g = Gguf::new();
            for i in 0..1100 {
                g = g.kv(&format!("k{i}"), MetaValue::U8(1));
            }
            g.bytes()
        }),
        (
            "safetensors_pth",
            "hostile-zip-entries.pth",
            "entries",
            zip_claiming_entries(1 << 40, true),
        ),
        (
            "safetensors_pth",
            "hostile-zip-entries16.pth",
            "entries",
            zip_claiming_entries(65_534, false),
        ),
        (
            "safetensors_pth",
            "hostile-pickle-marks.pth",
            "MARK",
            pk(&repeat_op(b"(", 300)),
        ),
        (
            "adapters",
            "hostile-lora-wide.gguf",
            "the model's is 16×16",
            gguf_lora_q8(64, 32, true),
        ),
        (
            "adapters",
            "hostile-lora-rank.gguf",
            "exceeds min",
            gguf_lora_q8(32, 64, false),
        ),
        ("adapters", "hostile-lora-q4_0.gguf", "Q4_0", {
            // Q4_0 (18 bytes per 32 values) decodes to 7× its bytes: refused by its type.
            let blocks = vec![0u8; 32 * 18];
            gguf_lora(2, [32, 32], [32, 32], blocks.clone(), blocks)
        }),
    ]
}
