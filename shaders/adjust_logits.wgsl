// The greedy draw's bans and penalties applied to the logits in place, before `argmax`:
// entry e = (index row · vocab + token, delta) makes logits[index] −= delta (a ban: delta
// = +inf, so the logit becomes −inf). The deltas come from the CPU sampler (presence +
// occurrence · frequency, computed there in f32), so `l − delta` is the very subtraction
// the CPU sampler makes. Entries name distinct elements; the first u32 of `adj` is their
// count, the entries follow as (u32, f32 bits) pairs.

struct Params {
    vocab: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> adj: array<u32>;              // [1 + 2 E]
@group(0) @binding(3) var<storage, read_write> logits: array<f32>;     // [R, vocab]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = linear_id(gid, nwg, 256u);
    if (e >= adj[0]) {
        return;
    }
    let at = adj[1u + 2u * e];
    if (at >= d.n_rows * p.vocab) {
        return; // not a row of this pass
    }
    logits[at] = logits[at] - bitcast<f32>(adj[2u + 2u * e]);
}
