// 8-bit x for the one-token Q4_K / Q6_K products, as shaders/matvec/q4_k_q8_x.wgsl
// makes it and bit for bit the same (d = max|x| / 127 per run of 32, the values as packed
// int8, d · Σ q), but one vec4 of x a thread: the 8 threads of a run are consecutive
// invocations of one subgroup (subgroups of at least 8: `prologue_file`), so the run's
// max|x| and Σ q are three shuffles each, every thread's load is in flight at once, and
// each thread writes one word. (The tree prologue gives a run to one thread: 8 dependent
// vec4 loads, then the 8 packs, with 80 of 256 threads busy at depth 2,560: the timing
// variant without any prologue took a 2.9B Q4_K decode token from 3.25 to 2.72 ms on an
// H200, benchmarks.md.) Q8K (the deepest product's depth, a multiple of 256) sizes the
// arrays; the loop's trip count is uniform and a run never straddles its end.
// The quantizer itself, `q8_put`, and the arrays: shaders/matvec/q8_put_sg.wgsl (shared
// with the prologue that makes x as a LayerNorm + token shift first, q8_x_ln.wgsl).

fn mv_prologue(x0: u32, k: u32, li: u32) {
    let n4 = k / 4u;
    for (var i0 = 0u; i0 < n4; i0 += 256u) {
        let i = i0 + li;
        let live = i < n4;
        var a = vec4<f32>(0.0);
        if (live) {
            a = act[x0 + i];
        }
        q8_put(a, i, live, li);
    }
    workgroupBarrier();
}
