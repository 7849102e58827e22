//! Constraint inputs (JSON Schema, regex, Lark, GBNF) from hostile bytes: compiling gives a
//! constraint or an `EngineError::Constraint` (never a panic, a hang or another error),
//! and a compiled one walks a few tokens: every mask allows at least one token, and a
//! token it allows commits. The first byte picks the kind (and the walk's token choices);
//! the rest is the text (lossy UTF-8). Replayed by crates/engine/tests/constraint_corpus.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rwkv_engine::{Constraint, ConstraintCompiler, ConstraintSpec, EngineError, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest).into_owned();
    let spec = match sel % 4 {
        0 => match serde_json::from_str(&text) {
            Ok(v) => ConstraintSpec::JsonSchema(v),
            Err(_) => return,
        },
        1 => ConstraintSpec::Regex(text),
        2 => ConstraintSpec::Lark(text),
        _ => ConstraintSpec::Gbnf(text),
    };
    let tok = Tokenizer::world().expect("bundled vocabulary");
    let comp = ConstraintCompiler::shared(&tok, 65536).expect("World vocabulary");
    let mut c = match Constraint::compile(&comp, &spec) {
        Ok(c) => c,
        Err(EngineError::Constraint { what, .. }) => {
            assert!(!what.is_empty());
            return;
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
            break; // the grammar engine's own limits (fuel) are errors, not panics
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
});
