//! The instrument leaves an op's dispatches out while it times it, and only then.

#![cfg(test)]

use crate::api::{Rows, SeqInput, Want};
use crate::ops::testing::{fixture, gpu};
use crate::{Engine, LoadOptions};

fn last_logits(eng: &mut Engine, toks: &[u32]) -> Vec<f32> {
    let st = eng.new_state().unwrap();
    let out = eng
        .forward(
            &[SeqInput {
                state: st,
                tokens: toks,
                rows: Rows::Last,
            }],
            Want {
                logits: true,
                embeddings: false,
            },
            None,
        )
        .unwrap();
    eng.free_state(st).unwrap();
    out.logits[0].clone()
}

/// Every op a decode token dispatches gets a row, with the profile's dispatch count; a
/// left-out op changes the logits (the instrument removes its dispatches), and after the
/// run the engine's logits are its own again.
#[test]
fn every_decode_op_timed_and_the_engine_restored() {
    let path = fixture("rwkv7-tiny-Q8_0.gguf");
    let mut eng = Engine::load_on(gpu(), &path, &LoadOptions::default()).unwrap();
    let prompt = [1u32, 2, 3];
    let before = last_logits(&mut eng, &prompt[..1]);
    let st = eng.new_state().unwrap();
    let prof = eng.profile(st, &prompt[..1]).unwrap();
    eng.free_state(st).unwrap();
    let w = eng.decode_wall_costs(&prompt, 4, 1).unwrap();
    assert!(w.token_us > 0.0);
    // Without a dispatch the step is the host's part alone, cheaper than the whole one.
    assert!(
        w.host_us > 0.0 && w.host_us < w.token_us,
        "host {} µs, token {} µs",
        w.host_us,
        w.token_us
    );
    assert_eq!(w.ops.len(), prof.by_op.len(), "{:?}", w.ops);
    for t in &prof.by_op {
        let row = w.ops.iter().find(|o| o.op == t.name);
        let row = row.unwrap_or_else(|| panic!("{} has no row", t.name));
        assert_eq!(row.dispatches, t.dispatches, "{}", t.name);
    }
    assert_eq!(last_logits(&mut eng, &prompt[..1]), before);
    // Left out, the output product changes the logits; set back, they are the same.
    let old = eng.set_timing_skip(vec!["att.output".to_string()]);
    assert!(old.is_empty());
    assert_ne!(last_logits(&mut eng, &prompt[..1]), before);
    eng.set_timing_skip(Vec::new());
    assert_eq!(last_logits(&mut eng, &prompt[..1]), before);
    assert!(eng.decode_wall_costs(&prompt, 1, 1).is_err());
}
