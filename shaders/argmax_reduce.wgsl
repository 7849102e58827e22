// A row's largest logit and its lowest index, found by one workgroup (WG invocations): a
// strided scan per invocation, then a tree in workgroup memory. A NaN never wins; a row of
// NaN gives (−inf, 0xffffffff). The CPU sampler's argmax makes the same choice
// (`sampler::argmax`, after NaN → −inf). Shared by argmax.wgsl and candidates.wgsl, whose
// `logits` binding it reads.

const WG: u32 = 256u;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

struct RowMax {
    v: f32,
    i: u32,
}

// Whether (v, i) beats (w, j): a larger value, or the same value at a lower index.
// Comparisons with NaN are false, so a NaN never beats anything.
fn beats(v: f32, i: u32, w: f32, j: u32) -> bool {
    return v > w || (v == w && i < j);
}

// The largest of logits[base .. base + vocab) and its index. Every invocation of the
// workgroup calls it (it holds barriers) and gets the same answer.
fn row_argmax(base: u32, vocab: u32, li: u32) -> RowMax {
    var v = bitcast<f32>(0xff800000u); // −inf
    var i = 0xffffffffu;
    for (var k = li; k < vocab; k += WG) {
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
    return RowMax(best_v[0], best_i[0]);
}
