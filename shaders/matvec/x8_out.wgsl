// The epilogue of a one-token product that hands its output on as 8-bit x (`Q8Handoff::
// Writes`: the channel-mix key, whose ReLU² the value reads, after the LayerNorm prologue
// of matvec/q8_x_ln.wgsl and its quantizer, matvec/q8_put_sg.wgsl). The workgroup's MVR ·
// ROWS rows (a multiple of 32, from a multiple of 32) are whole runs of 32: their values,
// kept by `mv_row_out`, are quantized by `q8_run` as the consumer's own prologue would
// have quantized them (the same bits), and written at act u32 index p.x8 — the p.n / 4
// words of int8 values, then (d, d · Σ q) of each run as f32 pairs at p.x8 + p.n / 4 —
// where the consumer's step reads them (matvec/x8_in.wgsl). The f32 rows are written as
// usual. Spares the consumer's every workgroup the quantization of the whole x (2.9B: 320
// workgroups of the value each reading 40 KB).

@group(0) @binding(15) var<storage, read_write> act_u: array<u32>; // `act` as u32

const X8_ROWS: u32 = MVR * ROWS;

var<workgroup> x8_y: array<f32, X8_ROWS>;

fn mv_row_out(rl: u32, v: f32) {
    x8_y[rl] = v;
}

fn mv_epilogue(wg: u32, li: u32) {
    workgroupBarrier(); // every row's value kept
    let p = &g.seg[gs];
    let r0 = wg * X8_ROWS;
    let live = li < X8_ROWS / 4u && r0 + 4u * li < p.n;
    var a = vec4<f32>(0.0);
    if (live) {
        let i = 4u * li;
        a = vec4<f32>(x8_y[i], x8_y[i + 1u], x8_y[i + 2u], x8_y[i + 3u]);
    }
    let q = q8_run(a); // every invocation: shuffles within runs of 8
    if (live) {
        act_u[p.x8 + r0 / 4u + li] = q.v;
        if ((li & 7u) == 0u) {
            let o = p.x8 + p.n / 4u + 2u * ((r0 + 4u * li) / 32u);
            y_store(o, q.d);
            y_store(o + 1u, q.dsq);
        }
    }
}
