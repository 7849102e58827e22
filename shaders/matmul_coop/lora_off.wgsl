// `matmul_coop` without a LoRA term.

const COOP_LORA: bool = false;

fn lora_w8(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
