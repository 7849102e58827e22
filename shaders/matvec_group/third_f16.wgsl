// A group's second buffer (source 2): F16 matrices (an adapter's `A`) at binding 8, read
// by `mv_row3`. The F16 step of matvec/f16.wgsl under its own names, on `wb4`.

@group(0) @binding(8) var<storage, read> wb4: array<vec4<u32>>; // the second buffer's matrices, F16

const MV_STEP3: u32 = 8u;

fn h4_3(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn mv_step3(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let q = wb4[(rb >> 4u) + g];
    let a0 = h4_3(q.x, q.y);
    let a1 = h4_3(q.z, q.w);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 2u * g;
            out[j] = dot(a0, act[x]) + dot(a1, act[x + 1u]);
        }
    }
    return out;
}
