// The LoRA term of `matvec` (LORA = 2) when h is a fixed-point accumulator (`shaders/
// lora_out.wgsl`): h [T, rank, 2] i32 pairs (hi, lo) in the activations at `h` (a
// multiple of 4, row stride even), h_j = f32(hi) · 2⁻⁸ + f32(lo) · 2⁻²⁴; B [N, rank] f16
// at binding 7 as in `LORA_ON`. Adds the column pairs 2 j0, 2 (j0 + dj), … below rank.
@group(0) @binding(7) var<storage, read> lora: array<u32>; // B blocks of the active LoRAs
fn lora_sum(b: u32, h: u32, rank: u32, r: u32, j0: u32, dj: u32) -> f32 {
    var s = 0.0;
    let row = b + r * rank;
    for (var j = 2u * j0; j < rank; j += 2u * dj) {
        let bb = unpack2x16float(lora[(row + j) >> 1u]);
        let q = vec4<f32>(bitcast<vec4<i32>>(act[(h + 2u * j) >> 2u]));
        let hv = q.xz * (1.0 / 256.0) + q.yw * (1.0 / 16777216.0);
        s += bb.x * hv.x + bb.y * hv.y;
    }
    return s;
}
