// The argmax of each output row's logits, for greedy decoding without reading the logits
// back: out[r] = (i, bits of l[i]) where l[i] is the largest value of row r's logits, the
// lowest such index on ties. A NaN never wins; a row of NaN only gives (0xffffffff, −inf).
// The same choice as the CPU sampler's argmax (`sampler::argmax`, after NaN → −inf).
// One workgroup a row: a strided scan per invocation, then a tree in workgroup memory.

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

const WG: u32 = 256u;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

// Whether (v, i) beats (w, j): a larger value, or the same value at a lower index.
// Comparisons with NaN are false, so a NaN never beats anything.
fn beats(v: f32, i: u32, w: f32, j: u32) -> bool {
    return v > w || (v == w && i < j);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = linear_wg(wid, nwg);
    if (r >= d.n_rows) {
        return; // uniform for the whole workgroup
    }
    let base = r * p.vocab;
    var v = bitcast<f32>(0xff800000u); // −inf
    var i = 0xffffffffu;
    for (var k = li; k < p.vocab; k += WG) {
        let x = logits[base + k];
        if (beats(x, k, v, i)) {
            v = x;
            i = k;
        }
    }
    best_v[li] = v;
    best_i[li] = i;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s && beats(best_v[li + s], best_i[li + s], best_v[li], best_i[li])) {
            best_v[li] = best_v[li + s];
            best_i[li] = best_i[li + s];
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        out[r] = vec2<u32>(best_i[0], bitcast<u32>(best_v[0]));
    }
}
