// What both fused decode WKV kernels share (`shaders/wkv_fused.wgsl`, rows computing
// their columns' values themselves; `shaders/wkv_fused_staged.wgsl`, each token's
// per-channel values once a workgroup): the parameters, bindings and sizes, and the
// sequence's rows of S (its metadata: `seq_meta`, shaders/seq_meta.wgsl).

struct Params {
    c: u32,
    layer0: u32,
    r_off: u32,
    w_off: u32,       // raw decay (before the exp(-DECAY_SCALE σ(·)))
    k_off: u32,       // raw k
    v_off: u32,       // raw v
    a_off: u32,       // σ(a0 + lora)
    g_off: u32,
    vmix_off: u32,    // σ(v0 + lora) (unused in layer 0)
    vfirst_off: u32,  // v of layer 0 (written in layer 0)
    o_off: u32,       // out [T, C]
    kkw_off: u32,     // vec offsets: k_k, k_a, r_k [C], ln_x weight (bias at + C)
    ka_off: u32,
    rk_off: u32,
    lnx_off: u32,
    state_off: u32,   // offset of this layer's S [H, N, N] inside a slot
    slot_len: u32,
    eps: f32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> tmeta: array<u32>;              // sequences
@group(0) @binding(3) var<storage, read_write> state: array<vec4<f32>>;  // [slots, slot_len]
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>;    // activations
@group(0) @binding(5) var<storage, read> vecs: array<vec4<f32>>;         // layer vectors

const HV: u32 = HEAD_SIZE / 4u; // vec4s of a row of S
const NV: u32 = HV / TPR;
const WG: u32 = HEAD_SIZE * TPR;

fn act1(i: u32) -> f32 {
    return act[i >> 2u][i & 3u];
}

fn vec1(i: u32) -> f32 {
    return vecs[i >> 2u][i & 3u];
}

// The vec4 index of column q of row i of head h's S in `slot`. Thread q of a row holds the
// row's vec4 columns q, q + TPR, q + 2 TPR, …: a warp's load of them reads whole 64-byte
// runs of TPR columns (columns q · NV + j would read 16 bytes every 64).
fn row_base(slot: u32, h: u32, i: u32, q: u32) -> u32 {
    return ((slot * p.slot_len + p.state_off) >> 2u) + (h * HEAD_SIZE + i) * HV + q;
}

fn load_row(sb: u32) -> array<vec4<f32>, NV> {
    var s: array<vec4<f32>, NV>;
    for (var j = 0u; j < NV; j++) {
        s[j] = state[sb + j * TPR];
    }
    return s;
}

fn store_row(sb: u32, s: array<vec4<f32>, NV>) {
    for (var j = 0u; j < NV; j++) {
        state[sb + j * TPR] = s[j];
    }
}
