// The row sums of the 8-token kernels (shaders/matvec/q4_k_wide_step.wgsl,
// q4_k_q8_wide_step.wgsl) where a row's LANES lanes fit a subgroup or take the workgroup
// tree: the row sum of shaders/matvec/row_sum_sg.wgsl or row_sum_wg.wgsl, four times
// (row 0 tokens 0–3, 4–7; row 1 tokens 0–3, 4–7). (wide_sum_sg32.wgsl: rows wider than a
// subgroup.)

fn wide_sum(v: array<vec4<f32>, 4>, li: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(row_sum(v[0], li, 4u), row_sum(v[1], li, 4u),
                               row_sum(v[2], li, 4u), row_sum(v[3], li, 4u));
}
