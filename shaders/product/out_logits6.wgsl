// The product writes into a separate output buffer: the logits, at binding 6 (matvec,
// matmul_coop: binding 5 is their second view of the weights).

@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [R, vocab] logits

fn y_load(i: u32) -> f32 { return out[i]; }
fn y_store(i: u32, v: f32) { out[i] = v; }
