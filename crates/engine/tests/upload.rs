#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! The streamed upload (`gpu_weights` module doc) cut into tiny waves — every tensor split
//! into many pieces, pieces spread over threads, staging buffers reused many times and the
//! coordinator waiting on the GPU — puts the same bytes on the GPU as the default load.
//!
//! This compares the engine with itself on purpose: the default load is checked against
//! peers in `peers.rs`; what is under test here is that the way bytes are cut up and
//! scheduled changes nothing, so the logits must be equal bit for bit (same kernels, same
//! weights, same order of operations — any difference is a misplaced byte).

mod support;

use std::path::Path;
use std::time::Instant;

use rwkv_engine::{
    Engine, LoadOptions, LoadProgress, ModelFile, Rows, Rwkv7Weights, SeqInput, UploadOptions, Want,
};
use rwkv_synth::{self as synth, SynthOptions, SynthType};
use support::*;

/// Waves of 4 KiB, two of them in flight, pieces of 1 KiB: the fixtures' tensors (up to
/// 8.9 MB) go through thousands of waves; 3 workers on any machine.
fn tiny_waves() -> LoadOptions {
    LoadOptions {
        upload: UploadOptions {
            wave_bytes: 4096,
            in_flight_bytes: 8192,
            piece_bytes: 1024,
            threads: 3,
        },
        ..Default::default()
    }
}

/// Loads `path` with `opts`, recording the upload progress reports.
fn load(path: &Path, opts: &LoadOptions) -> (Engine, Vec<(usize, usize, u64, u64)>) {
    let file = ModelFile::open(path).unwrap();
    let weights = Rwkv7Weights::from_file(&file).unwrap();
    let mut seen = Vec::new();
    let eng = Engine::from_weights(
        gpu(),
        &file,
        &weights,
        opts,
        &mut |p| {
            if let LoadProgress::Upload {
                tensors_done,
                tensors_total,
                bytes_done,
                bytes_total,
            } = p
            {
                seen.push((tensors_done, tensors_total, bytes_done, bytes_total));
            }
        },
        Instant::now(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (eng, seen)
}

/// Logits at every position of `tokens` from the zero state.
fn logits(eng: &mut Engine, tokens: &[u32]) -> Vec<f32> {
    let st = eng.new_state().unwrap();
    let out = eng
        .forward(
            &[SeqInput {
                state: st,
                tokens,
                rows: Rows::All,
            }],
            Want {
                logits: true,
                embeddings: false,
            },
            None,
        )
        .unwrap();
    out.logits[0].clone()
}

fn check(path: &Path, tokens: &[u32]) {
    let name = path.display();
    let (mut normal, _) = load(path, &LoadOptions::default());
    let (mut tiny, seen) = load(path, &tiny_waves());
    assert_eq!(normal.info().gpu_weight_bytes, tiny.info().gpu_weight_bytes);
    assert_eq!(normal.info().gpu_types, tiny.info().gpu_types);

    // Progress: one report per tensor, in order, ending with every tensor and byte.
    let &(_, tensors_total, _, bytes_total) = seen.last().expect("no upload progress");
    assert_eq!(seen.len(), tensors_total, "{name}: one report per tensor");
    for (i, w) in seen.windows(2).enumerate() {
        assert!(
            w[1].0 == w[0].0 + 1 && w[1].2 > w[0].2,
            "{name}: report {i}: {w:?}"
        );
    }
    assert_eq!(seen.last().unwrap().0, tensors_total);
    assert_eq!(seen.last().unwrap().2, bytes_total);
    assert!(
        bytes_total >= normal.info().gpu_weight_bytes,
        "{name}: {bytes_total} bytes"
    );

    let a = logits(&mut normal, tokens);
    let b = logits(&mut tiny, tokens);
    assert_eq!(a.len(), b.len());
    let differ = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert_eq!(differ, 0, "{name}: {differ} of {} logits differ", a.len());
}

#[test]
fn tiny_waves_equal_the_default_load_on_every_fixture() {
    let r = Reference::load("tiny");
    let tokens = &r.tokens[..8];
    // F16 SafeTensors with `[in, out]` LoRA matrices (transposed on the CPU), Q8_0 GGUF,
    // K-quants (Q4_K, Q6_K) GGUF.
    for file in [
        "rwkv7-tiny.safetensors",
        "rwkv7-tiny-Q8_0.gguf",
        "rwkv7-small-Q4_K_M.gguf",
    ] {
        check(&fixtures().join(file), tokens);
    }
}

#[test]
fn tiny_waves_equal_the_default_load_when_decoding_to_f16() {
    // Rows of 128 values are not whole Q4_K blocks: the Q4_K_M recipe falls back to Q5_0,
    // which the kernels do not read, so the upload decodes those tensors to F16 piece by
    // piece (rows of 256 bytes out).
    let dir = scratch("upload-q5_0");
    let path = dir.join("q5_0.gguf");
    let opts = SynthOptions {
        dtype: SynthType::Q4KM,
        seed: 3,
        ..SynthOptions::new(2, 128)
    };
    synth::write(&opts, &path).unwrap();
    let file = ModelFile::open(&path).unwrap();
    let types: Vec<_> = file.tensors().iter().map(|t| t.dtype).collect();
    assert!(
        types.contains(&rwkv_engine::DType::Q5_0),
        "the synthetic model holds no Q5_0: {types:?}"
    );
    check(&path, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let _ = std::fs::remove_dir_all(&dir);
}
