// The epilogue of a matrix product (matmul, matvec, matmul_coop, matmul_reduce): scale,
// bias, then the activation, of output row r of this workgroup's product. (The matrix ×
// vector kernel of a product with a LoRA term adds `Σ_j B[r, j] h[t, j]` — `lora_sum` of
// matvec/lora.wgsl — to its raw sum before it; the tensor-core tiles add it as extra
// k-steps; the portable tiles leave it to a product of its own.)

fn finish(v: f32, r: u32) -> f32 {
    let p = &g.seg[gs];
    var y = v * p.scale;
    if (p.bias_off != 0xffffffffu) {
        y += vecs[p.bias_off + p.row0 + r];
    }
    return activation(y, p.act);
}
