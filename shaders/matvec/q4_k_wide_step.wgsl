// The shared body of the 8-token Q4_K kernels (`shaders/matvec/q4_k_wide.wgsl` for one
// product, `shaders/matvec_group/wide.wgsl` for a group): up to 8 tokens × two rows a lane
// group. A lane's step g is that of shaders/matvec/q4_k.wgsl (two words of nibbles of a
// sub-block pair: 16 values), the lanes of a row on consecutive steps; the x loads of a
// token serve both rows. Needs LANES, `w`, `act`, `q4k_pair` (shaders/decode/q4_k.wgsl), `nib4`
// and `wide_sum` (shaders/matvec/wide_sum_*.wgsl).

// One step of one row: the 16 nibbles as floats (low: sub-block 2p, high: 2p + 1) and
// the sub-blocks' d·scale and dmin·min.
struct Q4Step {
    lo0: vec4<f32>,
    lo1: vec4<f32>,
    hi0: vec4<f32>,
    hi1: vec4<f32>,
    dsc: vec2<f32>,
    dmn: vec2<f32>,
}

fn q4_step(rb: u32, g: u32) -> Q4Step {
    let st = q4k_pair(rb, g);
    return Q4Step(nib4(st.q.x), nib4(st.q.y), nib4(st.q.x >> 4u), nib4(st.q.y >> 4u),
                  st.dm.x * vec2<f32>(st.s0.x, st.s1.x), st.dm.y * vec2<f32>(st.s0.y, st.s1.y));
}

// Σ over the step's 16 values of W·x for one token: x's low-sub-block vec4s xl0, xl1 and
// high ones xh0, xh1, with their sums sx (low, high) shared by every row.
fn q4_dot(q: Q4Step, xl0: vec4<f32>, xl1: vec4<f32>, xh0: vec4<f32>, xh1: vec4<f32>,
          sx: vec2<f32>) -> f32 {
    let lo = dot(q.lo0, xl0) + dot(q.lo1, xl1);
    let hi = dot(q.hi0, xh0) + dot(q.hi1, xh1);
    return q.dsc.x * lo + q.dsc.y * hi - dot(q.dmn, sx);
}

// Σ_k W[r, k] x[t, k] for rows at byte offsets rb0 and rb1 (depth k) and the nt ≤ 8
// tokens of x from vec4 x0 (stride xs vec4s), summed over the LANES lanes of each row:
// [row 0 tokens 0–3, row 0 tokens 4–7, row 1 tokens 0–3, row 1 tokens 4–7]. Every lane
// of the workgroup calls it (the row sums may use workgroup barriers).
fn q4_wide_rows(rb0: u32, rb1: u32, k: u32, x0: u32, xs: u32, nt: u32, lane: u32,
                li: u32) -> array<vec4<f32>, 4> {
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0);
    var b1 = vec4<f32>(0.0);
    let one = vec4<f32>(1.0);
    let steps = k / 16u;
    for (var s = lane; s < steps; s += LANES) {
        let u = q4_step(rb0, s);
        let v = q4_step(rb1, s);
        let xo = 64u * (s >> 4u) + 16u * ((s & 15u) >> 2u) + 2u * (s & 3u);
        for (var j = 0u; j < 8u; j++) {
            if (j < nt) {
                let x = x0 + j * xs + xo;
                let xl0 = act[x];
                let xl1 = act[x + 1u];
                let xh0 = act[x + 8u];
                let xh1 = act[x + 9u];
                let sx = vec2<f32>(dot(xl0 + xl1, one), dot(xh0 + xh1, one));
                let yu = q4_dot(u, xl0, xl1, xh0, xh1, sx);
                let yv = q4_dot(v, xl0, xl1, xh0, xh1, sx);
                if (j < 4u) {
                    a0[j] += yu;
                    b0[j] += yv;
                } else {
                    a1[j - 4u] += yu;
                    b1[j - 4u] += yv;
                }
            }
        }
    }
    return wide_sum(array<vec4<f32>, 4>(a0, a1, b0, b1), li);
}
