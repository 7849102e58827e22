// Token shift with lerp: for each mix m, out_m[t] = x[t] + (prev - x[t]) * mix_m, where
// prev is x[t-1] of the same sequence, or the saved shift state for a sequence's first
// token in this pass (RWKV_x070: `xx = x_prev - x; xr = x + xx * x_r`, …).

struct Params {
    c: u32,
    n_mix: u32,       // 6 for time mix (r, w, k, v, a, g), 1 for channel mix (k)
    mix_off: u32,     // vec offset of the mixes [n_mix, C]
    x_off: u32,       // act offset of x [T, C] (the LayerNorm output)
    out_off: u32,     // act offset of out_0; out_m at out_off + m * out_stride
    out_stride: u32,
    state_off: u32,   // offset of this shift vector inside a state slot
    slot_len: u32,    // f32 elements of one state slot
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;        // mixes
@group(0) @binding(3) var<storage, read> tmeta: array<u32>;       // token metadata
@group(0) @binding(4) var<storage, read> state: array<f32>;      // [slots, slot_len]
@group(0) @binding(5) var<storage, read_write> act: array<f32>;  // activations

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, 64u);
    if (i >= d.n_tokens * p.c) {
        return;
    }
    let t = i / p.c;
    let c = i % p.c;
    let x = act[p.x_off + i];
    var prev: f32;
    if (tmeta[d.off_tok_pos + t] == 0u) {
        let b = tmeta[d.off_tok_seq + t];
        let slot = tmeta[d.off_seqs + 4u * b + 2u];
        prev = state[slot * p.slot_len + p.state_off + c];
    } else {
        prev = act[p.x_off + i - p.c];
    }
    let dx = prev - x;
    for (var m = 0u; m < p.n_mix; m++) {
        act[p.out_off + m * p.out_stride + i] = x + dx * vecs[p.mix_off + m * p.c + c];
    }
}
