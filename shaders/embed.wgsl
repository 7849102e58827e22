// Embedding gather: act[y_off + t*C ..] = decode(row t) for each token t of the pass. The
// rows are the tokens' embedding rows, encoded, which the host put in the pass's metadata
// buffer at byte p.rows_off, p.row_bytes apart (the embedding itself stays in host memory:
// model/host_embedding.rs).

struct Params {
    c: u32,          // C
    rows_off: u32,   // byte offset of the first token's row in `w`
    row_bytes: u32,  // bytes from one row to the next (a multiple of 4)
    y_off: u32,      // act offset of the output [T, C]
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;          // the pass's metadata
@group(0) @binding(3) var<storage, read_write> act: array<f32>;  // activations

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let chunks = p.c / 32u;
    let i = linear_id(gid, nwg, 64u);
    if (i >= d.n_tokens * chunks) {
        return;
    }
    let t = i / chunks;
    let c = i % chunks;
    decode32(p.rows_off + t * p.row_bytes, c);
    let base = p.y_off + t * p.c + c * 32u;
    for (var l = 0u; l < 32u; l++) {
        act[base + l] = dq[l];
    }
}
