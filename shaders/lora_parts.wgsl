// The LoRA term of the matrix × vector kernel (`matvec`, LORA_PARTS = 1) with h in parts:
// in a decode step the dispatch that produced x also computed h = s · A x, each of its
// workgroups the part of its own channels (`wkv_fused` a head's, `ln_shift` a slice's),
// h[t, j] = Σ_p parts[t, p, j] (P = p.lora_parts parts, part stride R = p.lora_rank,
// token stride p.lora_stride, P · R ≤ 4096): `lp_load` starts the first token's loads
// before the main loop (coalesced, ≤ 16 a thread), `lp_sum` adds them after it through
// workgroup memory into `hs`, where `lora_sum` reads h. B as in LORA_ON (f16 pairs).

@group(0) @binding(7) var<storage, read> lora: array<u32>; // B blocks of the active LoRAs
var<workgroup> hs: array<f32, 512>;      // h of ≤ 4 tokens, R ≤ 128 columns each
var<workgroup> lp_all: array<f32, 4096>; // one token's parts, P · R ≤ 4096

// Token t's parts [P, R], read as one contiguous run: element li + 256 i by thread li
// (≤ 16 a thread; past the run, the last element again, not used).
fn lp_load(t: u32, li: u32) -> array<f32, 16> {
    var v: array<f32, 16>;
    let n = p.lora_parts * p.lora_rank;
    let base = p.lora_h + t * p.lora_stride;
    for (var i = 0u; i < 16u; i++) {
        let idx = base + min(li + 256u * i, n - 1u);
        v[i] = act[idx >> 2u][idx & 3u];
    }
    return v;
}

// h of the workgroup's token `slot` from every thread's loaded parts.
fn lp_reduce(v: array<f32, 16>, slot: u32, li: u32) {
    let r = p.lora_rank;
    let n = p.lora_parts * r;
    for (var i = 0u; i < 16u; i++) {
        let e = li + 256u * i;
        if (e < n) {
            lp_all[e] = v[i];
        }
    }
    workgroupBarrier();
    if (li < r) {
        var h = 0.0;
        for (var q = 0u; q < p.lora_parts; q++) {
            h += lp_all[q * r + li];
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
