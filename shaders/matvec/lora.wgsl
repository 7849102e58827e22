// The LoRA term of the matrix × vector kernels (`LORA = 1`): the active adapters' stacked
// `B` `[N, R]` f16 blocks at binding 7 (as pairs), `h` `[T, R]` in the activations (seen
// as vec4s, written by an earlier dispatch); `lora_sum` adds the column pairs
// `2 j0, 2 (j0 + dj), …` below `rank` of row `r` (offsets in halves; `b`, `h` and `rank`
// even; the lanes of a row read consecutive pairs), the first from what `lora_pre` loaded
// ahead of the row. (`lora_hprod.wgsl`: the same term with `h` made in the same dispatch.)

@group(0) @binding(7) var<storage, read> lora: array<u32>; // B blocks of the active LoRAs

// The first column pair of this lane (2 j0) of row r of B and of h, loaded raw and not used
// until `lora_sum`: issued before the row's weights, their latency hides behind the row.
struct LoraPre {
    b: u32,
    h: vec4<f32>,
}

fn lora_pre(b: u32, h: u32, rank: u32, r: u32, j0: u32) -> LoraPre {
    var q = LoraPre(0u, vec4<f32>(0.0));
    let j = 2u * j0;
    if (j < rank) {
        q.b = lora[(b + r * rank + j) >> 1u];
        q.h = act[(h + j) >> 2u];
    }
    return q;
}

fn lora_sum(pre: LoraPre, b: u32, h: u32, rank: u32, r: u32, j0: u32, dj: u32) -> f32 {
    var s = 0.0;
    if (2u * j0 < rank) {
        let bb = unpack2x16float(pre.b);
        let o = (h + 2u * j0) & 3u;
        s = bb.x * pre.h[o] + bb.y * pre.h[o + 1u];
    }
    let row = b + r * rank;
    for (var j = 2u * (j0 + dj); j < rank; j += 2u * dj) {
        let bb = unpack2x16float(lora[(row + j) >> 1u]);
        let hv = act[(h + j) >> 2u];
        let o = (h + j) & 3u;
        s += bb.x * hv[o] + bb.y * hv[o + 1u];
    }
    return s;
}

// No first product in this dispatch.
fn hp_wgs() -> u32 { return 0u; }
fn h_produce(j: u32, li: u32, x0: u32) {}
fn hp_enter(x0: u32) {}
