// The writes of `ln_shift` one channel a thread (the channels of vec4s [q, q1) of a
// workgroup, stepping by it), for Mesa's llvmpipe: there the 4-channel writes
// (out_vec4.wgsl) kept ≈ 1.4 KB an invocation that never came back (Mesa 22.3.6, the
// driver's heap +1.4 MB a token on a 2-layer model: `generation_memory.rs`). The same
// values as out_vec4.wgsl's, element by element. `st` = (mean, rstd) of rows rt and ro.

fn write_mixes(t: u32, q: u32, q1: u32, rt: u32, ro: u32, st: vec4<f32>, first: bool,
               sb: u32) {
    let ot = p.out_off + t * p.c;
    let lane = q % WG; // this thread's place in the workgroup
    for (var ch = 4u * (q - lane) + lane; ch < 4u * q1; ch += WG) {
        let wt = vecs[p.ln_off + ch];
        let bs = vecs[p.ln_off + p.c + ch];
        let xn = (act[rt + ch / 4u][ch % 4u] - st.x) * st.z * wt + bs;
        let xo = (act[ro + ch / 4u][ch % 4u] - st.y) * st.w * wt + bs;
        var prev: f32;
        if (first) {
            prev = state[sb + ch];
            state[sb + ch] = xo;
        } else {
            prev = xo;
        }
        let dx = prev - xn;
        for (var m = 0u; m < p.n_mix; m++) {
            let o = ot + m * p.out_stride + ch;
            act[o / 4u][o % 4u] = xn + dx * vecs[p.mix_off + m * p.c + ch];
        }
    }
}
