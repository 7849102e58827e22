// `matmul_coop` over the whole of k: no slices to write (`emit` never calls it).

fn y_part(i: u32, v: f32) {}
