// A LoRA first product folded into the dispatch that produces its input (decode; the
// channel-mix LayerNorm `ln_shift` for the channel-mix key, `wkv_fused` for the attention
// output), so that it needs no dispatch of its own:
//   h[t, j] = scale · Σ_c A[j, c] v[t, c]        (j < rank, c < k; A [rank, k] f16)
// Each workgroup writes the parts of the channels it produced, 64 at a time,
//   parts[t, c / 64, j] = Σ over those 64 channels c' of A[j, c'] v[t, c'],
// then counts itself done on the site's counter. The last of the `total` workgroups sums
// the parts into h and sets the counter back to 0 for the next dispatch. The storage
// barriers around the count are device-scope release / acquire fences: every part is
// written before the last workgroup reads it (no workgroup waits on another, so no
// forward-progress guarantee between workgroups is needed).
// The includer defines WG (its workgroup size), `p.lf` (a `Fold`) and `lf_store`.

@group(0) @binding(6) var<storage, read> lf_a: array<vec4<u32>>;          // A [rank, k] f16
@group(0) @binding(7) var<storage, read_write> lf_parts: array<f32>;      // [T, k / 64, rank]
@group(0) @binding(8) var<storage, read_write> lf_count: array<atomic<u32>>;

var<workgroup> lf_v: array<f32, 256>;   // the workgroup's values, ≤ 4 × 64 channels
var<workgroup> lf_red: array<f32, 512>; // [rank ≤ 128][4]
var<workgroup> lf_last: u32;

// Keeps value i of the workgroup's channels for `lf_parts_write`.
fn lf_keep(i: u32, v: f32) {
    lf_v[i] = v;
}

fn lf_dot8(w: vec4<u32>, o: u32) -> f32 {
    return dot(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
               vec4<f32>(lf_v[o], lf_v[o + 1u], lf_v[o + 2u], lf_v[o + 3u]))
         + dot(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)),
               vec4<f32>(lf_v[o + 4u], lf_v[o + 5u], lf_v[o + 6u], lf_v[o + 7u]));
}

// Token t's parts of channels c0 .. c0 + 64 nq, their values in lf_v[0 .. 64 nq] (written
// before a workgroup barrier). Every invocation calls it.
fn lf_parts_write(li: u32, t: u32, c0: u32, nq: u32) {
    let f = p.lf;
    let per = f.k / 64u;
    for (var e = li; e < f.rank * nq; e += WG) {
        let j = e / nq;
        let q = e % nq;
        let base = (j * f.k + c0 + 64u * q) >> 3u;
        var acc = 0.0;
        for (var u = 0u; u < 8u; u++) {
            acc += lf_dot8(lf_a[base + u], 64u * q + 8u * u);
        }
        lf_parts[(t * per + c0 / 64u + q) * f.rank + j] = acc;
    }
}

// After this workgroup's parts: count it done; the last of `total` sums every token's
// parts into h. Every invocation calls it, in uniform control flow.
fn lf_finish(li: u32, total: u32) {
    storageBarrier();
    if (li == 0u) {
        lf_last = u32(atomicAdd(&lf_count[p.lf.count], 1u) == total - 1u);
    }
    storageBarrier();
    if (workgroupUniformLoad(&lf_last) == 1u) {
        let f = p.lf;
        let per = f.k / 64u;
        for (var t = 0u; t < d.n_tokens; t++) {
            for (var e = li; e < f.rank * 4u; e += WG) {
                let j = e >> 2u;
                var s = 0.0;
                for (var q = e & 3u; q < per; q += 4u) {
                    s += lf_parts[(t * per + q) * f.rank + j];
                }
                lf_red[e] = s;
            }
            workgroupBarrier();
            for (var j = li; j < f.rank; j += WG) {
                let s = (lf_red[4u * j] + lf_red[4u * j + 1u]) + (lf_red[4u * j + 2u] + lf_red[4u * j + 3u]);
                lf_store(f.h_off + t * f.h_stride + j, f.scale * s);
            }
            workgroupBarrier();
        }
        if (li == 0u) {
            atomicStore(&lf_count[f.count], 0u);
        }
    }
}
