// `matmul_coop` with a LoRA term (`COOP_LORA`): `B h` as extra k-steps of the tile loop,
// the f16 `B` blocks read 8 halves at a time.

@group(0) @binding(7) var<storage, read> lora4: array<vec4<u32>>; // B blocks, f16

const COOP_LORA: bool = true;

fn lora_w8(i: u32) -> vec4<u32> { return lora4[i]; }
