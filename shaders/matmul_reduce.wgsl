// Second half of a k-split `matmul_coop`: y[t, row0 + n] (+)= act(Σ_s part[s][t][n] +
// bias) for every token and row. `Params`, `p` and `finish`: product/. GROUP = 1: the
// products of a `matmul_group` one after another (`enter_elems` finds an element's
// product and sets `gs`, product/group.wgsl).

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(2) var<storage, read> part: array<f32>;       // [KSPLIT][T][N]
@group(0) @binding(3) var<storage, read> vecs: array<f32>;       // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<f32>;  // activations

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t_count = d.n_tokens;
    let i = enter_elems(linear_id(gid, nwg, 256u), t_count);
    let p = &g.seg[gs];
    if (i >= t_count * p.n) {
        return;
    }
    let t = i / p.n;
    let n = i % p.n;
    var v = 0.0;
    let nks = slices();
    for (var s = 0u; s < nks; s++) {
        v += part[part_base() + (s * t_count + t) * p.n + n];
    }
    let idx = p.y_off + t * p.y_stride + p.row0 + n;
    if (p.accumulate == 2u) {
        v = finish(v + act[idx], n);
    } else {
        v = finish(v, n);
        if (p.accumulate == 1u) {
            v += act[idx];
        }
    }
    act[idx] = v;
}
