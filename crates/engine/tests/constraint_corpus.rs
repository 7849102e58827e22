//! The `constraint` fuzz target's seeds and minimized corpus (`fuzz/seeds/constraint/`,
//! `fuzz/corpus-min/constraint/`) replayed as an ordinary test with the target's checks
//! (`fuzz/fuzz_targets/constraint.rs`): each input compiles or is an
//! `EngineError::Constraint`, and a compiled one walks a few tokens, every mask allowing
//! one at least. Seeds named `*-bad*` must be refused; the others must compile.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code
use std::path::Path;

use rwkv_engine::{Constraint, ConstraintCompiler, ConstraintSpec, EngineError, Tokenizer};

fn inputs() -> Vec<(String, Vec<u8>, bool)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for (dir, seed) in [("seeds", true), ("corpus-min", false)] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(dir).join("constraint")) else {
            continue;
        };
        for e in rd {
            let p = e.expect("dir entry").path();
            out.push((
                p.display().to_string(),
                std::fs::read(&p).expect("corpus file"),
                seed,
            ));
        }
    }
    out.sort();
    assert!(out.iter().any(|i| i.2), "no seeds in fuzz/seeds/constraint");
    out
}

/// The target's body: `Some(true)` compiled and walked, `Some(false)` refused with a
/// constraint error, `None` not a constraint input (a schema that is not JSON).
fn check(data: &[u8]) -> Option<bool> {
    let (&sel, rest) = data.split_first()?;
    let text = String::from_utf8_lossy(rest).into_owned();
    let spec = match sel % 4 {
        0 => ConstraintSpec::JsonSchema(serde_json::from_str(&text).ok()?),
        1 => ConstraintSpec::Regex(text),
        2 => ConstraintSpec::Lark(text),
        _ => ConstraintSpec::Gbnf(text),
    };
    let tok = Tokenizer::world().unwrap();
    let comp = ConstraintCompiler::shared(&tok, 65536).unwrap();
    let mut c = match Constraint::compile(&comp, &spec) {
        Ok(c) => c,
        Err(EngineError::Constraint { what, .. }) => {
            assert!(!what.is_empty());
            return Some(false);
        }
        Err(e) => panic!("not a constraint error: {e}"),
    };
    let mut logits = vec![0.0f32; 65536];
    for step in 0..6usize {
        if c.is_finished() {
            break;
        }
        logits.fill(0.0);
        if c.apply(&mut logits).is_err() {
            break;
        }
        let allowed: Vec<u32> = (0..65536u32)
            .filter(|&t| logits[t as usize] == 0.0)
            .collect();
        assert!(
            !allowed.is_empty(),
            "an unfinished constraint allows nothing"
        );
        let pick = allowed[(usize::from(sel) * 31 + step * 7) % allowed.len()];
        c.commit(pick).expect("an allowed token commits");
    }
    Some(true)
}

#[test]
fn constraint_corpus_replays() {
    for (name, input, seed) in inputs() {
        let r = check(&input);
        if seed {
            let bad = name.contains("-bad");
            assert_eq!(r, Some(!bad), "{name}");
        }
    }
}
