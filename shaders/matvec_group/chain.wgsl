// A one-token group whose later segments read what earlier ones make in the same dispatch
// (the low-rank chains of a decode step: the first products w1, a1, g1, v1 beside r, k, v,
// and the second products w2, a2, g2, v2 after them, which read the first products'
// outputs h; ops/matvec_group/chain.rs). A producer segment (`hp` not NONE) publishes each
// row's output, after its epilogue, in the h sets (`hs`, binding 9) with an atomic store,
// and each producer workgroup, its rows published, fences (device scope) and counts
// itself done at `hcount`. A consumer segment (`hc` not NONE: F16 rows, x = the h its
// producer `hseg` publishes at hc) waits — one invocation polling the count until all
// `hwgs` producer workgroups are done, so that waiting workgroups do not flood the memory
// system the producers and r, k, v need — then gathers its k values of h into workgroup
// memory (an atomic load each, polled again should one still be empty) and computes CR
// rounds of ROWS rows a workgroup as `matvec` does, x read from workgroup memory. The
// producers are the group's first segments and the consumers its last. A value still
// empty after `hspin` polls is made by the invocation itself (`h_self`: the producer's
// row, its epilogue, the same math), so a scheduler that starts the consumers first costs
// time, never a hang.
//
// As in matvec/lora_hprod.wgsl: an empty slot is H_EMPTY (a NaN bit pattern arithmetic
// never makes; a made value with those bits is stored as the quiet NaN). Each dispatch
// publishes into its own set and workgroup 0 empties the next dispatch's (`hreset`,
// `hreset_len` slots, the last of them its count, set to 0): that set's previous run ended
// before this dispatch began and its next run begins after this one ends.

@group(0) @binding(9) var<storage, read_write> hs: array<atomic<u32>>;

const H_EMPTY: u32 = 0xffffffffu;
const H_NONE: u32 = 0xffffffffu;

var<workgroup> hw: array<f32, 512>; // a consumer's x

fn chain_consumer(sg: Seg) -> bool {
    return sg.hc != H_NONE;
}

// Workgroup 0 empties the next dispatch's set.
fn chain_reset(wgx: u32, li: u32) {
    if (wgx == 0u) {
        let n = p.hreset_len - 1u;
        for (var i = li; i < n; i += 256u) {
            atomicStore(&hs[p.hreset + i], H_EMPTY);
        }
        if (li == 0u) {
            atomicStore(&hs[p.hreset + n], 0u);
        }
    }
}

// The end of a producer workgroup: its rows published, it counts itself done.
fn chain_done(sg: Seg, li: u32) {
    if (sg.hp != H_NONE) {
        storageBarrier();
        if (li == 0u) {
            atomicAdd(&hs[p.hcount], 1u);
        }
    }
}

// After row r's epilogue: a producer publishes its value.
fn chain_publish(sg: Seg, r: u32, v: f32) {
    if (sg.hp != H_NONE) {
        var bits = bitcast<u32>(v);
        if (bits == H_EMPTY) {
            bits = 0x7fc00000u;
        }
        atomicStore(&hs[sg.hp + r], bits);
    }
}

// Row j of producer segment `ps` with its epilogue, by one invocation (the dispatch's one
// token): every lane's share of the row in turn, as its workgroups compute it.
fn h_self(ps: Seg, j: u32) -> f32 {
    let xb = mv_xb(ps.x_off, ps.x_stride, 0u);
    let rb = ps.w_off + j * ps.row_bytes;
    var s = 0.0;
    for (var lane = 0u; lane < LANES; lane++) {
        if (ps.src == 2u) {
            s += mv_row3(rb, ps.k, lane, xb, 1u).x;
        } else if (ps.src == 1u) {
            s += mv_row2(rb, ps.k, lane, xb, 1u).x;
        } else {
            s += mv_row(rb, ps.k, lane, xb, 1u).x;
        }
    }
    return finish(s, j, ps);
}

fn h_get(sg: Seg, j: u32) -> f32 {
    var v = atomicLoad(&hs[sg.hc + j]);
    for (var n = 0u; v == H_EMPTY && n < p.hspin; n++) {
        v = atomicLoad(&hs[sg.hc + j]);
    }
    if (v == H_EMPTY) {
        return h_self(p.seg[sg.hseg], j);
    }
    return bitcast<f32>(v);
}

// An F16 row's lane share against x in `hw`: steps of 8 weights, one 16-byte load each,
// from the group's buffer (`w4`) or the second one (`wb4`: source 2).
fn hw_row(src: u32, rb: u32, k: u32, lane: u32) -> f32 {
    var s = 0.0;
    for (var g = lane; g < k / 8u; g += LANES) {
        var q: vec4<u32>;
        if (src == 2u) {
            q = wb4_at((rb >> 4u) + g);
        } else {
            q = w4[(rb >> 4u) + g];
        }
        let x0 = vec4<f32>(hw[8u * g], hw[8u * g + 1u], hw[8u * g + 2u], hw[8u * g + 3u]);
        let x1 = vec4<f32>(hw[8u * g + 4u], hw[8u * g + 5u], hw[8u * g + 6u], hw[8u * g + 7u]);
        s += dot(vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y)), x0)
            + dot(vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w)), x1);
    }
    return s;
}

// Consumer workgroup `wi` of segment `sg`: rows [wi · CR · ROWS, (wi + 1) · CR · ROWS).
fn chain_rows(sg: Seg, wi: u32, li: u32) {
    if (li == 0u) {
        var done = atomicLoad(&hs[p.hcount]);
        for (var n = 0u; done < p.hwgs && n < p.hspin; n++) {
            done = atomicLoad(&hs[p.hcount]);
        }
    }
    storageBarrier(); // the producers' values, once they all counted themselves done
    for (var j = li; j < sg.k; j += 256u) {
        hw[j] = h_get(sg, j);
    }
    workgroupBarrier();
    let lane = li % LANES;
    for (var rr = 0u; rr < CR; rr++) {
        let r = (wi * CR + rr) * ROWS + li / LANES;
        var acc = vec4<f32>(0.0);
        if (r < sg.n) {
            acc.x = hw_row(sg.src, sg.w_off + r * sg.row_bytes, sg.k, lane);
        }
        let sum = row_sum(acc, li, 1u);
        if (lane == 0u && r < sg.n) {
            y_store(sg.y_off + r, finish(sum.x, r, sg));
        }
        workgroupBarrier(); // the row sums' workgroup memory is reused
    }
}
