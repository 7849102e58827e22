#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! Draws prepared on the GPU (`Engine::generate_sampled`: bans and penalties subtracted
//! there, the candidates found there, the host drawing among them) pick the tokens the
//! host's draw from the whole logits picks with the same seeded sampler.

mod support;

use rwkv_engine::sampler::{Sampler, SamplerOptions};
use rwkv_engine::CancelToken;
use support::*;

/// `n` tokens after `prompt` with `opts`: (GPU-prepared tokens, its GPU draw count),
/// host tokens.
fn both(
    file: &str,
    opts: &SamplerOptions,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, usize, Vec<u32>) {
    let mut eng = engine(file);
    let vocab = eng.config().vocab_size;
    let cancel = CancelToken::new();
    let mut gpu_toks = Vec::new();
    let st = eng.new_state().unwrap();
    let mut s = Sampler::new(opts.clone(), vocab).unwrap();
    let stats = eng
        .generate_sampled(st, prompt, n, &mut s, &cancel, &mut |t| {
            gpu_toks.push(t);
            true
        })
        .unwrap();
    eng.free_state(st).unwrap();
    let mut host_toks = Vec::new();
    let st = eng.new_state().unwrap();
    let mut s = Sampler::new(opts.clone(), vocab).unwrap();
    let mut draw = |l: &mut [f32]| {
        let t = s.try_sample(l)?;
        s.accept(t);
        Ok(t)
    };
    eng.generate(st, prompt, n, &mut draw, &cancel, &mut |t| {
        host_toks.push(t);
        true
    })
    .unwrap();
    eng.free_state(st).unwrap();
    (gpu_toks, stats.gpu_draws, host_toks)
}

/// The chat default, top-k with a temperature, min-p with top-p, and greedy with bans and
/// penalties, on the tiny model's random weights: the same tokens either way, drawn from
/// the GPU's candidates (but for the first, from the prompt's logits).
#[test]
fn gpu_prepared_draws_pick_the_host_draws_tokens() {
    let prompt = [33u32, 1000, 7, 4242, 12];
    let n = 24;
    let file = "rwkv7-tiny-Q8_0.gguf";
    let (plain, _, _) = both(file, &SamplerOptions::greedy(), &prompt, n);
    let cases = [
        SamplerOptions {
            seed: Some(1),
            ..SamplerOptions::default()
        },
        SamplerOptions {
            seed: Some(2),
            top_k: 5,
            top_p: 1.0,
            temperature: 0.8,
            ..SamplerOptions::default()
        },
        SamplerOptions {
            seed: Some(3),
            min_p: 0.05,
            top_p: 0.9,
            temperature: 1.3,
            ..SamplerOptions::default()
        },
        // Bans that hold the greedy draw off plain greedy's second and third tokens.
        SamplerOptions {
            banned_tokens: vec![plain[1], plain[2]],
            presence_penalty: 2.0,
            frequency_penalty: 1.0,
            ..SamplerOptions::greedy()
        },
    ];
    for (i, opts) in cases.iter().enumerate() {
        let (gpu, gpu_draws, host) = both(file, opts, &prompt, n);
        assert_eq!(gpu.len(), n, "case {i}");
        assert_eq!(gpu, host, "case {i}: {opts:?}");
        // The chat default's nucleus and a greedy draw are always among the candidates;
        // a top-k or a wide nucleus on this random model's flat logits sometimes lies
        // under the kernel's lowest floor (or past its room) and is drawn from the logits
        // read back, with the same tokens all the same.
        if i == 0 || i == 3 {
            assert_eq!(
                gpu_draws,
                n - 1,
                "case {i}: draws from the GPU's candidates"
            );
        } else {
            assert!(gpu_draws > 0, "case {i}: no draw from the GPU's candidates");
        }
    }
    // The bans reached the GPU: the banned run leaves plain greedy at its second token.
    let (banned, _, _) = both(file, &cases[3], &prompt, n);
    assert_eq!(banned[0], plain[0]);
    assert_ne!(banned[1], plain[1]);
}

/// A repetition penalty (it divides) and a draw from every token (no top-k, no top-p)
/// read the logits back: no GPU draws, the same tokens.
#[test]
fn draws_the_gpu_cannot_prepare_read_the_logits() {
    let prompt = [33u32, 1000, 7];
    for opts in [
        SamplerOptions {
            seed: Some(4),
            repetition_penalty: 1.3,
            ..SamplerOptions::default()
        },
        SamplerOptions {
            seed: Some(5),
            top_p: 1.0,
            ..SamplerOptions::default()
        },
    ] {
        let (gpu, gpu_draws, host) = both("rwkv7-tiny-Q8_0.gguf", &opts, &prompt, 12);
        assert_eq!(gpu, host);
        assert_eq!(gpu_draws, 0);
    }
}

/// A decode loop whose read-backs poll for the steps' results, sleeping through most of
/// each step first (`RWKV_SPIN_WAIT_US`, `gpu::pacing`: the default on a GPU, off on
/// lavapipe), and that submits each step whole (`RWKV_SPLIT_SUBMIT=0`), draws the tokens
/// of one that blocks and submits each step's opening apart (the defaults here), greedy
/// and sampled, and times its steps.
#[test]
fn a_polling_paced_decode_loop_draws_the_same_tokens() {
    use rwkv_engine::gpu::{AdapterChoice, GpuContext, Tuning};
    use rwkv_engine::{Engine, LoadOptions};
    use std::sync::Arc;
    let tuning = Tuning {
        spin_wait_us: Some(200_000),
        split_submit: 0,
        ..Tuning::from_env()
    };
    let polling = Arc::new(GpuContext::with_tuning(&AdapterChoice::Auto, tuning).unwrap());
    let path = fixtures().join("rwkv7-tiny-Q8_0.gguf");
    let mut spin = Engine::load_on(polling, &path, &LoadOptions::default()).unwrap();
    let mut block = engine("rwkv7-tiny-Q8_0.gguf");
    assert!(block.gpu().tuning.split_submit > 0);
    let prompt = [33u32, 1000, 7, 4242, 12];
    let n = 24;
    let cancel = CancelToken::new();
    for opts in [
        SamplerOptions::greedy(),
        SamplerOptions {
            seed: Some(5),
            ..SamplerOptions::default()
        },
    ] {
        let run = |eng: &mut Engine| {
            let vocab = eng.config().vocab_size;
            let st = eng.new_state().unwrap();
            let mut s = Sampler::new(opts.clone(), vocab).unwrap();
            let mut toks = Vec::new();
            let stats = eng
                .generate_sampled(st, &prompt, n, &mut s, &cancel, &mut |t| {
                    toks.push(t);
                    true
                })
                .unwrap();
            eng.free_state(st).unwrap();
            (toks, stats)
        };
        let (a, sa) = run(&mut spin);
        let (b, _) = run(&mut block);
        assert_eq!(a.len(), n);
        assert_eq!(a, b, "{opts:?}");
        assert!(
            sa.decode_read_ms > 0.0 && sa.decode_submit_ms > 0.0,
            "{sa:?}"
        );
        assert!(
            sa.decode_read_ms + sa.decode_submit_ms + sa.decode_write_ms <= sa.decode_ms + 1e-6
        );
    }
}
