// The LoRA term of the matrix × vector kernel (`matvec`, LORA_PARTS = 1) with h in parts:
// in a decode step the dispatch that produced x also computed h = s · A x, each of its
// workgroups the part of its own channels (`wkv_fused` a head's, `ln_shift` a slice's),
// h[t, j] = Σ_p parts[t, p, j] (P = p.lora_parts parts, part stride R = p.lora_rank,
// token stride p.lora_stride). A thread sums ≤ 16 parts of one column (256 / R threads a
// column): `lp_load` starts the first token's loads before the main loop, `lp_sum` adds
// them after it into `hs`, where `lora_sum` reads h. B as in LORA_ON (f16 pairs).

@group(0) @binding(7) var<storage, read> lora: array<u32>; // B blocks of the active LoRAs
var<workgroup> hs: array<f32, 512>;     // h of ≤ 4 tokens, R ≤ 128 columns each
var<workgroup> lp_red: array<f32, 256>;

// This thread's ≤ 16 parts of token t: column j = li / Q, parts q, q + Q, … (Q = 256 / R).
fn lp_load(t: u32, li: u32) -> array<f32, 16> {
    var v: array<f32, 16>;
    let r = p.lora_rank;
    let qn = 256u / r;
    let j = li / qn;
    let np = p.lora_parts;
    if (j < r) {
        let base = p.lora_h + t * p.lora_stride + j;
        for (var i = 0u; i < 16u; i++) {
            let pp = li % qn + i * qn;
            let idx = base + min(pp, np - 1u) * r;
            v[i] = select(0.0, act[idx >> 2u][idx & 3u], pp < np);
        }
    }
    return v;
}

// h of the workgroup's token `slot` from every thread's loaded parts.
fn lp_reduce(v: array<f32, 16>, slot: u32, li: u32) {
    var s = 0.0;
    for (var i = 0u; i < 16u; i++) {
        s += v[i];
    }
    lp_red[li] = s;
    workgroupBarrier();
    let r = p.lora_rank;
    let qn = 256u / r;
    if (li < r) {
        var h = 0.0;
        for (var q = 0u; q < qn; q++) {
            h += lp_red[li * qn + q];
        }
        hs[128u * slot + li] = h;
    }
    workgroupBarrier();
}

// h of the workgroup's nt tokens into `hs` (the first from `first`). Every invocation
// calls it, in uniform control flow.
fn lp_sum(first: array<f32, 16>, t0: u32, nt: u32, li: u32) {
    lp_reduce(first, 0u, li);
    for (var j = 1u; j < nt; j++) {
        lp_reduce(lp_load(t0 + j, li), j, li);
    }
}

fn lora_hrow(t0: u32, j: u32) -> u32 {
    return 128u * j;
}

fn lora_sum(b: u32, h: u32, rank: u32, r: u32, j0: u32, dj: u32) -> f32 {
    var s = 0.0;
    let row = b + r * rank;
    for (var j = 2u * j0; j < rank; j += 2u * dj) {
        let bb = unpack2x16float(lora[(row + j) >> 1u]);
        s += bb.x * hs[h + j] + bb.y * hs[h + j + 1u];
    }
    return s;
}
