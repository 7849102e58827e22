// Gathers the token rows that feed the head / embeddings: dst[i] = src[rows[i]].

struct Params {
    c: u32,
    src_off: u32,  // act offset of src [T, C]
    dst_off: u32,  // act offset of dst [R, C]
    _p0: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> tmeta: array<u32>;       // rows at off_rows
@group(0) @binding(3) var<storage, read_write> act: array<f32>;  // activations

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, 64u);
    if (i >= d.n_rows * p.c) {
        return;
    }
    let r = i / p.c;
    let c = i % p.c;
    act[p.dst_off + i] = act[p.src_off + tmeta[d.off_rows + r] * p.c + c];
}
