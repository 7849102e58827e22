// A dispatch that produces a LoRA-adapted product's input x also computing the parts of
// that product's h = s · A x (LORA_PARTS = 1, decode): each workgroup the part of the
// channels it produced, which the product's matrix × vector kernel sums
// (shaders/lora_parts.wgsl). `p.lp` says where; A [rank, C] f16 at binding 6.

struct LoraParts {
    rank: u32,   // rows of A
    width: u32,  // parts' stride (the site's h width, ≥ rank; columns past rank get 0)
    off: u32,    // act offset of the parts [T, P, width]
    scale: f32,  // the adapter's scale s
}

@group(0) @binding(6) var<storage, read> la: array<vec4<u32>>;

// Eight halves of A (16-byte unit i).
fn la8(i: u32) -> vec4<u32> {
    return la[i];
}
