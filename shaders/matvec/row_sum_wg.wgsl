// Sum over the LANES lanes of a row: a tree in workgroup memory (no subgroups;
// `RowSum::Tree`).

var<workgroup> red: array<vec4<f32>, 256>;

fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    red[li] = v;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if ((li % LANES) < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    return red[li];
}
