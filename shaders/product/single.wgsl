// A single product (`matmul_coop`, `matmul_reduce` without GROUP): workgroup x and
// reduce elements are its own, the k slices the KSPLIT specialisation, W and the slices
// at offset 0 of their bindings. (product/group.wgsl: the same functions for a group.)

fn enter(x: u32) -> u32 { return x; }
fn enter_elems(i: u32, t_count: u32) -> u32 { return i; }
fn slices() -> u32 { return KSPLIT; }
fn part_base() -> u32 { return 0u; }
fn w_base() -> u32 { return 0u; }
