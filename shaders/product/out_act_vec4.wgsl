// The product writes into the activations, seen as vec4s (matvec, matmul_coop): scalar
// access to the outputs.

fn y_load(i: u32) -> f32 { return act[i >> 2u][i & 3u]; }
fn y_store(i: u32, v: f32) { act[i >> 2u][i & 3u] = v; }
