// Saves each sequence's last LayerNorm output as its token-shift state (a separate
// dispatch: the token-shift op of the same pass still reads the old state).

struct Params {
    c: u32,
    x_off: u32,      // act offset of x [T, C]
    state_off: u32,  // offset of the shift vector inside a slot
    slot_len: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> tmeta: array<u32>;        // token metadata
@group(0) @binding(3) var<storage, read> act: array<f32>;         // activations
@group(0) @binding(4) var<storage, read_write> state: array<f32>; // [slots, slot_len]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, 64u);
    if (i >= d.n_seqs * p.c) {
        return;
    }
    let b = i / p.c;
    let c = i % p.c;
    let start = tmeta[d.off_seqs + 4u * b];
    let len = tmeta[d.off_seqs + 4u * b + 1u];
    let slot = tmeta[d.off_seqs + 4u * b + 2u];
    if (len == 0u) {
        return;
    }
    state[slot * p.slot_len + p.state_off + c] = act[p.x_off + (start + len - 1u) * p.c + c];
}
