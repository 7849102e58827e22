#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! What a server needs from the engine: batch-invariant passes (a sequence's logits are
//! the same bits alone and beside others, however its prompt is chunked) and the prefix
//! cache's host tier (states spilled from GPU slots to memory, resumed exactly, with the
//! logits kept for a whole-prompt hit).

mod support;

use rwkv_engine::{
    Engine, LoadOptions, PrefixCache, Rows, SeqInput, StateId, Want, MAX_SPILLS_IN_FLIGHT,
};
use support::*;

const WANT: Want = Want {
    logits: true,
    embeddings: false,
};

/// Greedy continuation of `prompt` for `n` tokens, alone: the prompt in chunks of
/// `chunk`, then one token a pass. Returns every step's logits.
fn alone(eng: &mut Engine, prompt: &[u32], chunk: usize, n: usize) -> Vec<Vec<f32>> {
    let st = eng.new_state().unwrap();
    let mut out = Vec::new();
    let mut last = Vec::new();
    for (i, c) in prompt.chunks(chunk).enumerate() {
        let rows = if (i + 1) * chunk >= prompt.len() {
            Rows::Last
        } else {
            Rows::None
        };
        let o = eng
            .forward(
                &[SeqInput {
                    state: st,
                    tokens: c,
                    rows,
                }],
                WANT,
                None,
            )
            .unwrap();
        last = o.logits.into_iter().next().unwrap();
    }
    for _ in 0..n {
        let t = argmax(&last);
        out.push(std::mem::take(&mut last));
        let o = eng
            .forward(
                &[SeqInput {
                    state: st,
                    tokens: &[t],
                    rows: Rows::Last,
                }],
                WANT,
                None,
            )
            .unwrap();
        last = o.logits.into_iter().next().unwrap();
    }
    out.push(last);
    eng.free_state(st).unwrap();
    out
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// The same continuation as [`alone`], with 5 other sequences decoding in every pass and
/// the prompt fed in other chunks.
fn among_others(eng: &mut Engine, prompt: &[u32], others: &[Vec<u32>], n: usize) -> Vec<Vec<f32>> {
    let st = eng.new_state().unwrap();
    let os: Vec<StateId> = others.iter().map(|_| eng.new_state().unwrap()).collect();
    let mut next: Vec<u32> = others.iter().map(|o| o[0]).collect();
    let mut out = Vec::new();
    let mut last = Vec::new();
    let mut fed = 0;
    let mut k = 0;
    while fed < prompt.len() || out.len() < n + 1 {
        let mine: Vec<u32> = if fed < prompt.len() {
            let c = (3 + k % 5).min(prompt.len() - fed);
            prompt[fed..fed + c].to_vec()
        } else {
            vec![argmax(&last)]
        };
        let rows = if fed + mine.len() >= prompt.len() {
            Rows::Last
        } else {
            Rows::None
        };
        let other_toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let mut inputs: Vec<SeqInput> = os
            .iter()
            .zip(&other_toks)
            .take(1 + k % os.len())
            .map(|(&state, t)| SeqInput {
                state,
                tokens: t,
                rows: Rows::Last,
            })
            .collect();
        let me = inputs.len() / 2;
        inputs.insert(
            me,
            SeqInput {
                state: st,
                tokens: &mine,
                rows,
            },
        );
        let o = eng.forward(&inputs, WANT, None).unwrap();
        for (j, l) in o.logits.iter().enumerate() {
            if j != me && j - usize::from(j > me) < next.len() {
                next[j - usize::from(j > me)] = argmax(l);
            }
        }
        let l = o.logits[me].clone();
        if fed >= prompt.len() {
            out.push(std::mem::take(&mut last));
        }
        fed += if fed < prompt.len() { mine.len() } else { 0 };
        if !l.is_empty() {
            last = l;
        }
        k += 1;
    }
    out.push(last);
    eng.free_state(st).unwrap();
    for s in os {
        eng.free_state(s).unwrap();
    }
    out.truncate(n + 1);
    out
}

#[test]
fn batch_invariant_passes_give_the_same_bits_alone_and_in_a_batch() {
    let opts = LoadOptions {
        batch_invariant: true,
        ..Default::default()
    };
    let mut eng = engine_with("rwkv7-demo-6x256-Q4_K_M.gguf", &opts);
    let tok = eng.tokenizer().clone();
    let prompt = tok.encode("It was a dark and stormy night, and the ship");
    let others: Vec<Vec<u32>> = ["The", "Once", "In", "She", "We"]
        .iter()
        .map(|s| tok.encode(s))
        .collect();
    let a = alone(&mut eng, &prompt, 64, 6);
    let b = among_others(&mut eng, &prompt, &others, 6);
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y,
            "step {i}: logits differ (max |Δ| {})",
            max_abs(x, y)
        );
    }
}

#[test]
fn prefix_cache_spills_to_host_memory_and_resumes_exactly() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let state_bytes = 4 * eng.state_len() as u64;
    let vocab = eng.config().vocab_size;
    // Room on the GPU for one entry; the others move to host memory.
    let mut cache =
        PrefixCache::with_gpu_budget(1 << 30, state_bytes + 4 * vocab as u64 + 4096, 64);
    let texts = ["One morning in May", "The sea was calm", "A letter came"];
    let mut want = Vec::new();
    for t in texts {
        let ids = tok.encode(t);
        let st = eng.prefill(&ids).unwrap();
        let logits: std::sync::Arc<[f32]> = vec![1.5f32; vocab].into();
        assert!(cache.store(&mut eng, &ids, st, Some(logits)).unwrap());
        want.push((ids, eng.read_state_vec(st).unwrap()));
        eng.free_state(st).unwrap();
    }
    let s = cache.stats();
    assert_eq!((s.entries, s.host_entries, s.spills), (3, 2, 2), "{s:?}");
    assert!(cache.gpu_bytes() <= state_bytes + 4 * vocab as u64 + 4096);
    for (ids, state) in &want {
        // The whole prompt: its state and the logits kept with it.
        let r = cache.resume(&mut eng, ids).unwrap().unwrap();
        assert_eq!(r.depth, ids.len());
        assert_eq!(r.logits.as_deref().map(|l| l[7]), Some(1.5));
        assert_eq!(&eng.read_state_vec(r.state).unwrap(), state);
        eng.free_state(r.state).unwrap();
        // A longer prompt resumes from it and feeds the rest.
        let mut longer = ids.clone();
        longer.extend(tok.encode(" again"));
        let r = cache.resume(&mut eng, &longer).unwrap().unwrap();
        assert_eq!((r.depth, r.logits.is_none()), (ids.len(), true));
        eng.free_state(r.state).unwrap();
    }
    // An entry without logits is not a whole-prompt hit: the caller must feed ≥ 1 token.
    let ids = tok.encode("Nothing at all was kept in the end");
    assert!(ids.len() > 3);
    let st = eng.prefill(&ids).unwrap();
    assert!(cache.store(&mut eng, &ids[..2], st, None).unwrap());
    assert!(cache.store(&mut eng, &ids, st, None).unwrap());
    let r = cache.resume(&mut eng, &ids).unwrap().unwrap();
    assert_eq!(r.depth, 2, "the deepest usable entry is the shorter one");
    eng.free_state(r.state).unwrap();
    eng.free_state(st).unwrap();
    assert!(cache
        .resume(&mut eng, &tok.encode("Unseen"))
        .unwrap()
        .is_none());
    cache.release(&mut eng).unwrap();
    assert_eq!(eng.live_states(), 0);
}

/// Spills run behind the GPU's queue: each store past the GPU share starts the copy of the
/// least recently used entry and frees its slot, which the new entry's fork takes at once
/// (the copy must still read the old state). Twelve stores put more spills in flight than
/// the cache lets wait ([`MAX_SPILLS_IN_FLIGHT`]); every entry resumes to its exact state.
#[test]
fn spills_in_flight_keep_their_state_when_the_slot_is_reused() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let state_bytes = 4 * eng.state_len() as u64;
    let mut cache = PrefixCache::with_gpu_budget(1 << 30, state_bytes + 4096, 64);
    let mut want = Vec::new();
    let n = MAX_SPILLS_IN_FLIGHT + 4;
    for i in 0..n {
        let ids = tok.encode(&format!("Letter number {i} came in the morning"));
        let st = eng.prefill(&ids).unwrap();
        assert!(cache.store(&mut eng, &ids, st, None).unwrap());
        want.push((ids, eng.read_state_vec(st).unwrap()));
        eng.free_state(st).unwrap();
    }
    let s = cache.stats();
    assert_eq!(
        (s.entries, s.host_entries, s.spills),
        (n, n - 1, n as u64 - 1),
        "{s:?}"
    );
    for (ids, state) in &want {
        let mut longer = ids.clone();
        longer.push(11);
        let r = cache.resume(&mut eng, &longer).unwrap().unwrap();
        assert_eq!(r.depth, ids.len());
        assert_eq!(&eng.read_state_vec(r.state).unwrap(), state);
        eng.free_state(r.state).unwrap();
    }
    assert_eq!(cache.stats().evictions, 0);
    cache.release(&mut eng).unwrap();
    assert_eq!(eng.live_states(), 0);
}

/// `forward_greedy` against `forward` on forks of the same states: a step of six sequences
/// (four decoding one token, a 5-token prompt piece with its last row, one piece without
/// rows), three of them asking for their logits, two greedy ones with a ban / penalties
/// that move their draw. The argmax of each row is the CPU argmax of `forward`'s logits
/// after the adjustments (with its value), the full logits are the same bits, the states
/// advance alike, and a token past the vocabulary is refused.
#[test]
fn greedy_steps_read_back_the_argmax_and_the_asked_logits() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let texts = [
        "The sea",
        "Once upon",
        "In the",
        "She said",
        "We",
        "A long time",
    ];
    let bases: Vec<StateId> = texts
        .iter()
        .map(|t| eng.prefill(&tok.encode(t)).unwrap())
        .collect();
    let pieces: Vec<Vec<u32>> = vec![
        vec![11],
        vec![300],
        tok.encode(" and then there was"),
        vec![4000],
        tok.encode(" of it"),
        vec![42],
    ];
    let rows = [
        Rows::Last,
        Rows::Last,
        Rows::Last,
        Rows::Last,
        Rows::None,
        Rows::Last,
    ];
    let full = [false, true, true, false, true, false];
    let fork = |eng: &mut Engine| -> Vec<StateId> {
        bases.iter().map(|&b| eng.fork_state(b).unwrap()).collect()
    };
    let (a, b) = (fork(&mut eng), fork(&mut eng));
    let inputs = |states: &[StateId]| -> Vec<SeqInput> {
        (0..6)
            .map(|i| SeqInput {
                state: states[i],
                tokens: &pieces[i],
                rows: rows[i],
            })
            .collect()
    };
    let plain = eng.forward(&inputs(&a), WANT, None).unwrap();
    // Sequence 5 bans its own argmax; sequence 3 penalises it away.
    let t5 = argmax(&plain.logits[5]);
    let t3 = argmax(&plain.logits[3]);
    let adj5 = [(t5, f32::INFINITY)];
    let adj3 = [(t3, 1e4f32), (17, 0.5)];
    let choice: Vec<Option<&[(u32, f32)]>> = (0..6)
        .map(|i| match (full[i], i) {
            (true, _) => None,
            (false, 5) => Some(&adj5[..]),
            (false, 3) => Some(&adj3[..]),
            (false, _) => Some(&[][..]),
        })
        .collect();
    let greedy = eng.forward_greedy(&inputs(&b), &choice, None).unwrap();
    for i in 0..6 {
        let l = &plain.logits[i];
        match rows[i] {
            Rows::None => assert!(greedy.argmax[i].is_empty(), "sequence {i}"),
            _ => {
                let mut adjusted = l.clone();
                for &(t, d) in choice[i].unwrap_or(&[]) {
                    adjusted[t as usize] -= d;
                }
                let t = argmax(&adjusted);
                assert_eq!(
                    greedy.argmax[i],
                    vec![(t, adjusted[t as usize])],
                    "sequence {i}"
                );
            }
        }
        match full[i] {
            true => assert!(&greedy.logits[i] == l, "sequence {i}: logits differ"),
            false => assert!(greedy.logits[i].is_empty(), "sequence {i}"),
        }
        assert_eq!(
            eng.read_state_vec(a[i]).unwrap(),
            eng.read_state_vec(b[i]).unwrap(),
            "sequence {i}: states"
        );
    }
    assert_ne!(greedy.argmax[5][0].0, t5, "the ban moved the draw");
    assert_ne!(greedy.argmax[3][0].0, t3, "the penalty moved the draw");
    assert!(eng.forward_greedy(&inputs(&b), &choice[..2], None).is_err());
    let bad = [(70_000u32, 1.0f32)];
    let mut with_bad = choice.clone();
    with_bad[0] = Some(&bad[..]);
    assert!(eng.forward_greedy(&inputs(&b), &with_bad, None).is_err());
    for s in a.into_iter().chain(b).chain(bases) {
        eng.free_state(s).unwrap();
    }
}

/// A server's decode steps where every sequence takes its argmax run the commands recorded
/// while the GPU ran the step before (the graph's spare step): five steps of three
/// sequences, each feeding its last argmax, draw what `forward`'s logits on forks of the
/// same states draw, and the states advance alike — also after a step of another shape
/// (two sequences) between them, whose spare must not serve the three.
#[test]
fn repeated_greedy_steps_reuse_their_recorded_commands() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let bases: Vec<StateId> = ["The sea", "Once upon", "In the"]
        .iter()
        .map(|t| eng.prefill(&tok.encode(t)).unwrap())
        .collect();
    let a: Vec<StateId> = bases.iter().map(|&b| eng.fork_state(b).unwrap()).collect();
    let b: Vec<StateId> = bases.iter().map(|&b| eng.fork_state(b).unwrap()).collect();
    let mut next = [11u32, 300, 4000];
    for step in 0..6 {
        // Step 3 runs two of the three sequences.
        let n = if step == 3 { 2 } else { 3 };
        let pieces: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let inputs = |states: &[StateId]| -> Vec<SeqInput> {
            (0..n)
                .map(|i| SeqInput {
                    state: states[i],
                    tokens: &pieces[i],
                    rows: Rows::Last,
                })
                .collect()
        };
        let plain = eng.forward(&inputs(&a), WANT, None).unwrap();
        let choice: Vec<Option<&[(u32, f32)]>> = vec![Some(&[][..]); n];
        let greedy = eng.forward_greedy(&inputs(&b), &choice, None).unwrap();
        for (i, next) in next.iter_mut().enumerate().take(n) {
            let t = argmax(&plain.logits[i]);
            assert_eq!(
                greedy.argmax[i],
                vec![(t, plain.logits[i][t as usize])],
                "step {step}, sequence {i}"
            );
            assert!(greedy.logits[i].is_empty());
            *next = t;
        }
    }
    for i in 0..3 {
        assert_eq!(
            eng.read_state_vec(a[i]).unwrap(),
            eng.read_state_vec(b[i]).unwrap(),
            "sequence {i}: states"
        );
    }
    for s in a.into_iter().chain(b).chain(bases) {
        eng.free_state(s).unwrap();
    }
}

/// `profile_seqs` times one step of several sequences (a server's decode step and a prompt
/// piece) with the forward pass's checks: every dispatch timed, the tokens counted, the
/// states fed as `forward` feeds them; a state given twice, a token past the vocabulary
/// and a sequence without tokens are refused before anything runs.
#[test]
fn a_profiled_step_checks_its_inputs_and_feeds_the_states() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let prompt = tok.encode("The sea was calm");
    let (a, b) = (eng.prefill(&prompt).unwrap(), eng.prefill(&prompt).unwrap());
    let (pa, pb) = (eng.fork_state(a).unwrap(), eng.fork_state(b).unwrap());
    let piece = tok.encode(" and the ship");
    let report = eng.profile_seqs(&[(pa, &[11]), (pb, &piece)]).unwrap();
    assert_eq!(report.tokens, 1 + piece.len());
    assert!(!report.dispatches.is_empty());
    assert!(report.gpu_ns > 0.0);
    let step = [
        SeqInput {
            state: a,
            tokens: &[11],
            rows: Rows::None,
        },
        SeqInput {
            state: b,
            tokens: &piece,
            rows: Rows::None,
        },
    ];
    eng.forward(&step, WANT, None).unwrap();
    for (x, y) in [(a, pa), (b, pb)] {
        assert_eq!(
            eng.read_state_vec(x).unwrap(),
            eng.read_state_vec(y).unwrap()
        );
    }
    let vocab = eng.config().vocab_size as u32;
    for bad in [
        vec![(pa, &[11u32][..]), (pa, &[12u32][..])],
        vec![(pa, &[vocab][..])],
        vec![(pa, &[][..])],
    ] {
        let before = eng.read_state_vec(pa).unwrap();
        let e = eng.profile_seqs(&bad).unwrap_err().to_string();
        assert!(
            e.contains("twice") || e.contains("vocabulary") || e.contains("no tokens"),
            "{e}"
        );
        assert_eq!(eng.read_state_vec(pa).unwrap(), before, "{e}: state moved");
    }
    for s in [a, b, pa, pb] {
        eng.free_state(s).unwrap();
    }
}

/// A decode step of more than 8 sequences (one token each) runs the fused WKV
/// (`wkv_fused`, one dispatch a layer); a step with a longer sequence in it runs the
/// chunked scan (`wkv_prep`, `wkv`, `wkv_out`). The one-token sequences' logits and states
/// agree between the two within rounding.
#[test]
fn decode_steps_of_any_batch_run_the_fused_wkv() {
    let mut eng = engine("rwkv7-demo-6x256-Q4_K_M.gguf");
    let tok = eng.tokenizer().clone();
    let base = eng.prefill(&tok.encode("The sea was calm")).unwrap();
    let n = 12;
    let toks: Vec<[u32; 1]> = (0..n).map(|i| [100 + 7 * i as u32]).collect();
    let long = tok.encode(" and the ship sailed on into the dark and quiet night");
    assert!(long.len() > 8, "{}", long.len());
    let ops = |eng: &mut Engine, with_long: bool| -> Vec<String> {
        let states: Vec<StateId> = (0..=n).map(|_| eng.fork_state(base).unwrap()).collect();
        let mut seqs: Vec<(StateId, &[u32])> = (0..n).map(|i| (states[i], &toks[i][..])).collect();
        if with_long {
            seqs.push((states[n], &long));
        }
        let report = eng.profile_seqs(&seqs).unwrap();
        for s in states {
            eng.free_state(s).unwrap();
        }
        report.dispatches.into_iter().map(|d| d.op).collect()
    };
    let decode = ops(&mut eng, false);
    assert!(decode.iter().any(|o| o == "wkv_fused"), "{decode:?}");
    assert!(
        !decode.iter().any(|o| o == "wkv" || o == "wkv_prep"),
        "{decode:?}"
    );
    let mixed = ops(&mut eng, true);
    assert!(mixed.iter().any(|o| o == "wkv") && mixed.iter().any(|o| o == "wkv_out"));
    assert!(!mixed.iter().any(|o| o == "wkv_fused"), "{mixed:?}");

    // The same one-token steps through both kernels.
    let step = |eng: &mut Engine, with_long: bool| -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let states: Vec<StateId> = (0..=n).map(|_| eng.fork_state(base).unwrap()).collect();
        let mut inputs: Vec<SeqInput> = (0..n)
            .map(|i| SeqInput {
                state: states[i],
                tokens: &toks[i],
                rows: Rows::Last,
            })
            .collect();
        if with_long {
            inputs.push(SeqInput {
                state: states[n],
                tokens: &long,
                rows: Rows::Last,
            });
        }
        let out = eng.forward(&inputs, WANT, None).unwrap();
        let st = (0..n)
            .map(|i| eng.read_state_vec(states[i]).unwrap())
            .collect();
        for s in states {
            eng.free_state(s).unwrap();
        }
        (out.logits[..n].to_vec(), st)
    };
    let (fused, fused_states) = step(&mut eng, false);
    let (scan, scan_states) = step(&mut eng, true);
    for i in 0..n {
        let d = max_abs(&fused[i], &scan[i]);
        assert!(d < 2e-3, "sequence {i}: logits differ by {d}");
        let d = max_abs(&fused_states[i], &scan_states[i]);
        assert!(d < 1e-3, "sequence {i}: states differ by {d}");
    }
}
