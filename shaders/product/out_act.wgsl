// The product writes into the activations (`act`, seen as f32s: the portable tiles).

fn y_load(i: u32) -> f32 { return act[i]; }
fn y_store(i: u32, v: f32) { act[i] = v; }
