// The O(vocab) part of a sampled draw on the GPU, so that a decode step reads back a few KB
// instead of the row's logits (the host then draws from the candidates: sampler/gpu.rs).
// Per output row r (one workgroup), over its logits after the adjustments (adjust_logits):
//   M = the largest logit and its lowest index (a NaN never wins: argmax_reduce.wgsl);
//   p = exp(l − M); eligible: p ≥ lo (min-p's floor, or the smallest f32 above 0);
//   S = Σ eligible p (f32, a tree), n = their count, and for the floors τ_j = 2^(−8 − 4j)
//   (j < NF: the CPU draw's first floors, sampler/draw.rs) the
//   count and mass of the eligible p ≥ τ_j;
//   the floor: the highest τ_j whose tokens hold the k best (count ≥ k, when 0 < k < n)
//   or the nucleus (mass ≥ top_p · S); its tokens written as (id, logit bits), in any order.
// out[r] = [M bits, argmax, S bits, n, τ bits (0: no floor holds them), candidates found,
//           0, 0] then up to `cap` (id, l) pairs. The floor's test takes p ≥ τ (1 − 2^−12):
// the host recomputes p (its own exp) and keeps p ≥ τ, so a token at the floor's edge is
// never missing for want of a last bit.

struct Params {
    vocab: u32,
    cap: u32,   // candidate pairs a row
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> opts: array<u32>;             // [R, 4]: lo, k, top_p bits, 0
@group(0) @binding(3) var<storage, read> logits: array<f32>;           // [R, vocab]
@group(0) @binding(4) var<storage, read_write> out: array<u32>;        // [R, 8 + 2 cap]

const NF: u32 = 5u; // floors 2^-8 … 2^-24
const NV: u32 = 12u; // reduced values: S, n, NF masses, NF counts (12 KB of workgroup memory)

var<workgroup> red: array<array<f32, WG>, NV>;
var<workgroup> found: atomic<u32>;

fn floor_at(j: u32) -> f32 {
    return exp2(-8.0 - 4.0 * f32(j));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = linear_wg(wid, nwg);
    if (r >= d.n_rows) {
        return; // uniform for the whole workgroup
    }
    let base = r * p.vocab;
    let ob = r * (8u + 2u * p.cap);
    // 1. The largest logit, lowest index on ties (argmax_reduce.wgsl).
    if (li == 0u) {
        atomicStore(&found, 0u); // ordered before step 4 by row_argmax's barriers
    }
    let best = row_argmax(base, p.vocab, li);
    let m = best.v;
    let lo = bitcast<f32>(opts[4u * r]);
    let top_k = opts[4u * r + 1u];
    let top_p = bitcast<f32>(opts[4u * r + 2u]);
    // ±inf (or a row of NaN): the host decides from M alone.
    if (m == bitcast<f32>(0xff800000u) || m == bitcast<f32>(0x7f800000u)) {
        if (li == 0u) {
            out[ob] = bitcast<u32>(m);
            out[ob + 1u] = best.i;
            out[ob + 2u] = 0u;
            out[ob + 3u] = 0u;
            out[ob + 4u] = 0u;
            out[ob + 5u] = 0u;
        }
        return;
    }
    // 2. The sum, the count, and the floors' counts and masses.
    var acc: array<f32, NV>;
    for (var j = 0u; j < NV; j++) {
        acc[j] = 0.0;
    }
    var fl: array<f32, NF>;
    for (var j = 0u; j < NF; j++) {
        fl[j] = floor_at(j);
    }
    for (var k = li; k < p.vocab; k += WG) {
        let q = exp(logits[base + k] - m);
        if (q >= lo) {
            acc[0] += q;
            acc[1] += 1.0;
            for (var j = 0u; j < NF; j++) {
                if (q >= fl[j]) {
                    acc[2u + j] += q;
                    acc[2u + NF + j] += 1.0;
                }
            }
        }
    }
    for (var j = 0u; j < NV; j++) {
        red[j][li] = acc[j];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            for (var j = 0u; j < NV; j++) {
                red[j][li] += red[j][li + s];
            }
        }
        workgroupBarrier();
    }
    let sum = red[0][0];
    let n = red[1][0];
    // 3. The highest floor whose tokens hold the k best or the nucleus (counts are exact in
    // f32 up to 2^24 tokens).
    var tau = 0.0;
    for (var j = 0u; j < NF; j++) {
        let need_k = top_k > 0u && f32(top_k) < n;
        let holds = select(red[2u + j][0] >= top_p * sum, red[2u + NF + j][0] >= f32(top_k), need_k);
        if (holds) {
            tau = max(floor_at(j), lo);
            break;
        }
    }
    // 4. Its tokens, in any order (the host ranks them).
    if (tau > 0.0) {
        let t = tau * (1.0 - exp2(-12.0));
        for (var k = li; k < p.vocab; k += WG) {
            let x = logits[base + k];
            if (exp(x - m) >= t) {
                let at = atomicAdd(&found, 1u);
                if (at < p.cap) {
                    out[ob + 8u + 2u * at] = k;
                    out[ob + 9u + 2u * at] = bitcast<u32>(x);
                }
            }
        }
    }
    workgroupBarrier();
    if (li == 0u) {
        out[ob] = bitcast<u32>(m);
        out[ob + 1u] = best.i;
        out[ob + 2u] = bitcast<u32>(sum);
        out[ob + 3u] = u32(n);
        out[ob + 4u] = bitcast<u32>(tau);
        out[ob + 5u] = atomicLoad(&found);
    }
}
