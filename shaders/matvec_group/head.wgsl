// The segments' table, bindings and epilogue shared by the group kernels
// (`shaders/matvec_group.wgsl`, and `shaders/matvec_group/wide.wgsl` for 2–8 tokens on Q4_K).

struct Seg {
    k: u32,
    n: u32,
    row_bytes: u32,
    w_off: u32,
    x_off: u32,
    x_stride: u32,
    y_off: u32,
    y_stride: u32,
    act: u32,
    bias_off: u32,
    wg0: u32,
    src: u32,   // 0: buffer 1, first encoding; 1: buffer 1, second; 2: buffer 2 (F16)
    scale: f32, // as `Params` of product/params.wgsl: raw-sum scale and the LoRA term
    lora_rank: u32,
    lora_h: u32,
    lora_stride: u32,
    lora_b: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

struct Params {
    nseg: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
    seg: array<Seg, 8>,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;               // the group's matrices
@group(0) @binding(3) var<storage, read> vecs: array<f32>;            // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>; // activations
@group(0) @binding(5) var<storage, read> w4: array<vec4<u32>>;        // the same weights

// The segment workgroup `wgx` computes: the last whose first workgroup is at or before it.
fn seg_of(wgx: u32) -> u32 {
    var si = 0u;
    for (var i = 1u; i < p.nseg; i++) {
        if (wgx >= p.seg[i].wg0) {
            si = i;
        }
    }
    return si;
}

fn finish(v: f32, r: u32, sg: Seg) -> f32 {
    var y = v * sg.scale;
    if (sg.bias_off != 0xffffffffu) {
        y += vecs[sg.bias_off + r];
    }
    return activation(y, sg.act);
}
