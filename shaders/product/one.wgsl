// The table of products of a kernel that computes one (every product kernel but a
// `matmul_group`'s, product/group.wgsl): binding 1 holds its `Params`, entry 0 of a table
// of one, so that the kernels read `p = &g.seg[gs]` whichever table they are built with
// (a constant index: the same loads as a plain `Params` uniform).

struct One {
    seg: array<Params, 1>,
}

@group(0) @binding(1) var<uniform> g: One; // [1] this product's Params

const gs: u32 = 0u;
