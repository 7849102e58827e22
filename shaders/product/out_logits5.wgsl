// The product writes into a separate output buffer: the logits, at binding 5 (the
// portable tiles).

@group(0) @binding(5) var<storage, read_write> out: array<f32>; // [R, vocab] logits

fn y_load(i: u32) -> f32 { return out[i]; }
fn y_store(i: u32, v: f32) { out[i] = v; }
