// The products of a `matmul_group` (GROUP = 1; `matmul_coop`, `matmul_reduce`): binding 1
// holds their table (mirrored by `Group` in crates/engine/src/ops/matmul/group.rs), and
// `enter` (a workgroup's x) or `enter_elems` (a reduce element) sets `gs` to the one it
// serves; every `p` of the kernel is `&g.seg[gs]`. (A private copy of the product's
// Params held all of it in registers: the grouped r, k, v tiles ran at one workgroup per
// SM, H100.)

struct Group {
    nseg: u32,
    _g0: u32,
    _g1: u32,
    _g2: u32,
    wg0: array<vec4<u32>, 2>, // first workgroup x of each product
    seg: array<Params, 8>,
}

@group(0) @binding(1) var<uniform> g: Group; // [8] the products' Params

var<private> gs: u32;

fn enter(x: u32) -> u32 {
    var s = 0u;
    for (var i = 1u; i < g.nseg; i++) {
        if (x >= g.wg0[i >> 2u][i & 3u]) {
            s = i;
        }
    }
    gs = s;
    return x - g.wg0[s >> 2u][s & 3u];
}

fn enter_elems(i: u32, t_count: u32) -> u32 {
    var r = i;
    for (var s = 0u; s < g.nseg; s++) {
        let e = t_count * g.seg[s].n;
        if (r < e) {
            gs = s;
            return r;
        }
        r -= e;
    }
    return 0xffffffffu; // past every product
}

fn slices() -> u32 { return g.seg[gs].ksplit; }
fn part_base() -> u32 { return g.seg[gs].part_off; }
fn w_base() -> u32 { return g.seg[gs].w_off; }
