// `matmul_coop` with k split into KSPLIT slices: each slice's raw tile goes to the scratch
// at binding 6, summed by `matmul_reduce`.

@group(0) @binding(6) var<storage, read_write> part: array<f32>; // [KSPLIT][T][N]

fn y_part(i: u32, v: f32) { part[i] = v; }
