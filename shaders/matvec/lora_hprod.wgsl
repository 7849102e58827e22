// The LoRA term of a one-token matrix × vector product whose first product is made in the
// same dispatch (`HPROD = 1`): `y = act(W x + B h + bias)` with `h = s · A x`, one adapter.
// Workgroups [0, hp_wgs) each make one column j of h (256 lanes over A's row j, summed in
// workgroup memory) and publish it in `hs` (binding 9) with an atomic store; the others
// compute W's rows as `matvec` does and, in the epilogue, poll the h values their lanes
// need. `W x` does not depend on h, so the dispatch that made h before (a dependent
// dispatch of its own a token: ≈ 4.7 µs on an H100) is gone: by the time a row's epilogue
// runs, the first workgroups — dispatched first — have long published their columns.
//
// `hs` holds one set of R values a product (`hp_set`); an empty value is H_EMPTY (a NaN
// bit pattern arithmetic never makes; a made value with those bits is stored as the quiet
// NaN). The sets start empty, and workgroup 0 of each such product empties the set of
// the next one in the pass (`hp_reset`): that one's previous run is over (a dispatch
// boundary lies between), and it starts after this one ends, so it never reads a stale
// value. A lane that polls `hp_spin` times without seeing its value computes it itself
// (`h_self`, same math): scheduling that starts W's rows first costs time, never a hang.
//
// Bindings: 7 the B blocks (as `lora.wgsl`), 8 A `[r, K]` f16, 9 the h sets; the
// product's fields in matvec/params_hprod.wgsl.

@group(0) @binding(7) var<storage, read> lora: array<u32>;
@group(0) @binding(8) var<storage, read> ha4: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read_write> hs: array<atomic<u32>>;

const H_EMPTY: u32 = 0xffffffffu;

var<workgroup> hp_red: array<f32, 256>;
// The first token's x (vec4 index), for `h_self`.
var<private> hp_x: u32;

fn hp_h4(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

// Lanes `lane, lane + n, …` of A's row j against x (8 values a step).
fn hp_dot(j: u32, x0: u32, lane: u32, n: u32) -> f32 {
    let p = &g.seg[gs];
    var s = 0.0;
    if (j < p.hp_rows) {
        let steps = p.k / 8u;
        let rb = j * steps;
        for (var g = lane; g < steps; g += n) {
            let q = ha4[rb + g];
            s += dot(hp_h4(q.x, q.y), act[x0 + 2u * g]) + dot(hp_h4(q.z, q.w), act[x0 + 2u * g + 1u]);
        }
    }
    return s;
}

fn hp_wgs() -> u32 {
    return g.seg[gs].hp_wgs;
}

fn hp_enter(x0: u32) {
    hp_x = x0;
}

// Workgroup j of the producers: h[j] = s · A[j] · x (0 past A's rows).
fn h_produce(j: u32, li: u32, x0: u32) {
    let p = &g.seg[gs];
    if (j == 0u) {
        for (var i = li; i < p.hp_wgs; i += 256u) {
            atomicStore(&hs[p.hp_reset + i], H_EMPTY);
        }
    }
    hp_red[li] = hp_dot(j, x0, li, 256u);
    workgroupBarrier();
    for (var o = 128u; o > 0u; o >>= 1u) {
        if (li < o) {
            hp_red[li] += hp_red[li + o];
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        var bits = bitcast<u32>(hp_red[0] * p.hp_scale);
        if (bits == H_EMPTY) {
            bits = 0x7fc00000u;
        }
        atomicStore(&hs[p.hp_set + j], bits);
    }
}

fn h_self(j: u32) -> f32 {
    return hp_dot(j, hp_x, 0u, 1u) * g.seg[gs].hp_scale;
}

fn h_get(j: u32) -> f32 {
    let p = &g.seg[gs];
    var v = atomicLoad(&hs[p.hp_set + j]);
    for (var n = 0u; v == H_EMPTY && n < p.hp_spin; n++) {
        v = atomicLoad(&hs[p.hp_set + j]);
    }
    if (v == H_EMPTY) {
        return h_self(j);
    }
    return bitcast<f32>(v);
}

// B's first pair of this lane, loaded ahead of the row (h is not made yet).
struct LoraPre {
    b: u32,
}

fn lora_pre(b: u32, h: u32, rank: u32, r: u32, j0: u32) -> LoraPre {
    var q = LoraPre(0u);
    let j = 2u * j0;
    if (j < rank) {
        q.b = lora[(b + r * rank + j) >> 1u];
    }
    return q;
}

fn lora_sum(pre: LoraPre, b: u32, h: u32, rank: u32, r: u32, j0: u32, dj: u32) -> f32 {
    var s = 0.0;
    if (2u * j0 < rank) {
        let bb = unpack2x16float(pre.b);
        s = bb.x * h_get(2u * j0) + bb.y * h_get(2u * j0 + 1u);
    }
    let row = b + r * rank;
    for (var j = 2u * (j0 + dj); j < rank; j += 2u * dj) {
        let bb = unpack2x16float(lora[(row + j) >> 1u]);
        s += bb.x * h_get(j) + bb.y * h_get(j + 1u);
    }
    return s;
}
