// No LoRA term (every product of a graph with no active adapter).

struct LoraPre {
    b: u32,
}

fn lora_pre(b: u32, h: u32, rank: u32, r: u32, j0: u32) -> LoraPre { return LoraPre(0u); }

fn lora_sum(pre: LoraPre, b: u32, h: u32, rank: u32, r: u32, j0: u32, dj: u32) -> f32 {
    return 0.0;
}

fn hp_wgs() -> u32 { return 0u; }
fn h_produce(j: u32, li: u32, x0: u32) {}
fn hp_enter(x0: u32) {}
