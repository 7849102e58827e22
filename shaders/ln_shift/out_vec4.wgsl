// The writes of `ln_shift` 4 channels a thread: vec4 loads of x, stores of the mixes (a
// thread's vec4s i of [q, q1), stepping by the workgroup). `st` = (mean, rstd) of rows
// rt (the token) and ro (the previous one), vec4 indices.

// vecs[i .. i + 4].
fn vec_at(i: u32) -> vec4<f32> {
    return vec4<f32>(vecs[i], vecs[i + 1u], vecs[i + 2u], vecs[i + 3u]);
}

fn write_mixes(t: u32, q: u32, q1: u32, rt: u32, ro: u32, st: vec4<f32>, first: bool,
               sb: u32) {
    let ot = (p.out_off + t * p.c) / 4u;
    let os = p.out_stride / 4u;
    for (var i = q; i < q1; i += WG) {
        let ch = 4u * i;
        let wt = vec_at(p.ln_off + ch);
        let bs = vec_at(p.ln_off + p.c + ch);
        let xn = (act[rt + i] - st.x) * st.z * wt + bs;
        let xo = (act[ro + i] - st.y) * st.w * wt + bs;
        var prev: vec4<f32>;
        if (first) {
            let si = sb + ch;
            prev = vec4<f32>(state[si], state[si + 1u], state[si + 2u], state[si + 3u]);
            state[si] = xo.x;
            state[si + 1u] = xo.y;
            state[si + 2u] = xo.z;
            state[si + 3u] = xo.w;
        } else {
            prev = xo;
        }
        let dx = prev - xn;
        for (var m = 0u; m < p.n_mix; m++) {
            act[ot + m * os + i] = xn + dx * vec_at(p.mix_off + m * p.c + ch);
        }
    }
}
