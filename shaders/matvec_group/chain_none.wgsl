// A group without chained segments (matvec_group/chain.wgsl): no h sets; these keep the
// call sites valid.
fn chain_consumer(sg: Seg) -> bool { return false; }

fn chain_reset(wgx: u32, li: u32) {}

fn chain_publish(sg: Seg, r: u32, v: f32) {}

fn chain_rows(sg: Seg, wi: u32, li: u32) {}

fn chain_done(sg: Seg, li: u32) {}
