// Embedding gather: act[y_off + t*C ..] = decode(emb row tokens[t]) for the tokens whose
// id falls in this chunk of rows [row0, row0 + n_rows) (the embedding is split in row
// chunks so that no binding exceeds the device's limit).

struct Params {
    c: u32,          // C
    row0: u32,       // first token id held by this chunk
    n_rows: u32,     // token ids in this chunk
    row_bytes: u32,  // bytes of one encoded row
    y_off: u32,      // act offset of the output [T, C]
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [n_rows, C] encoded
@group(0) @binding(3) var<storage, read> tmeta: array<u32>;       // token ids at [0, T)
@group(0) @binding(4) var<storage, read_write> act: array<f32>;  // activations

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let chunks = p.c / 32u;
    let i = linear_id(gid, nwg, 64u);
    if (i >= d.n_tokens * chunks) {
        return;
    }
    let t = i / chunks;
    let c = i % chunks;
    let tok = tmeta[t];
    if (tok < p.row0 || tok >= p.row0 + p.n_rows) {
        return;
    }
    decode32((tok - p.row0) * p.row_bytes, c);
    let base = p.y_off + t * p.c + c * 32u;
    for (var l = 0u; l < 32u; l++) {
        act[base + l] = dq[l];
    }
}
