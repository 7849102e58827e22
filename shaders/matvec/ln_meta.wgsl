// The token metadata for a product that opens the next block without saving a shift
// state of its own (`LnEnd::NextOnly`: matvec/ln_none.wgsl, then matvec/ln_next.wgsl).

@group(0) @binding(9) var<storage, read> tmeta: array<u32>; // token metadata
