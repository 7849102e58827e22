// The argmax of each output row's logits, for greedy decoding without reading the logits
// back: out[r] = (i, bits of l[i]) where l[i] is the largest value of row r's logits, the
// lowest such index on ties (argmax_reduce.wgsl: one workgroup a row). A NaN never wins;
// a row of NaN only gives (0xffffffff, −inf).

struct Params {
    vocab: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> logits: array<f32>;           // [R, vocab]
@group(0) @binding(3) var<storage, read_write> out: array<vec2<u32>>;  // [R]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = linear_wg(wid, nwg);
    if (r >= d.n_rows) {
        return; // uniform for the whole workgroup
    }
    let best = row_argmax(r * p.vocab, p.vocab, li);
    if (li == 0u) {
        out[r] = vec2<u32>(best.i, bitcast<u32>(best.v));
    }
}
