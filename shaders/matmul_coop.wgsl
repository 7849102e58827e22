// Matrix × matrix on cooperative matrices (tensor cores): y[t, row0 + n] (+)=
// act(Σ_k W[n, k] x[t, k] + bias) for BM tokens × BN rows per workgroup (spec consts).
// Each subgroup of 32 owns a WM × 32 block (WM = 32 or 64 tokens: 2 or 4 × 2 16×16×16 f16
// products accumulated in f32); BM / WM × BN / 32 subgroups. Per step of 32 in k the
// workgroup decodes W's BN × 32 block (`dec8`) and converts x's BM × 32 block into f16
// tiles in workgroup memory (array<f16>: the element type the NVIDIA driver compiles
// coopLoad from), double-buffered, one barrier per step. x and the weights (F16, W16 = 1:
// 16-byte loads through `w4`; Q4_K: its block words, `raw8`) go through registers: with
// PF2 = 1 (F16 weights in 128-token tiles; `RWKV_COOP_PF2=0|1` forces it for A/B runs)
// step s stores step s + 1's tile, loaded during
// step s - 1, issues step s + 2's loads and then its products, so each load has a whole
// step in flight; with PF2 = 0 step s loads step s + 1, issues its products, then
// converts / decodes into the other buffer, so the decode overlaps the tensor cores
// (H100: PF2 for quantized weights or small tiles was 3–4 % slower, for F16 at 2.9B
// 13 % faster). The epilogue goes
// through a per-subgroup f32 tile. With KSPLIT > 1, workgroup x = tile · KSPLIT + part:
// each of KSPLIT workgroups sums one slice of k and writes its raw tile to `part`
// ([KSPLIT][T][N]); the `matmul_reduce` dispatch adds the slices and applies the
// epilogue. With a LoRA term (COOP_LORA), the last k slice then runs lora_rank / 32 more
// steps (a loop of their own, so the main loop is the plain kernel's) with h ([T, R] in
// `act` at lora_h, stride lora_stride) in place of x and the f16 `B` block ([N, R] at
// lora_b halves, `lora_w8`) in place of W: the raw sum is W x + B h before the epilogue.
// `Params`, `p` and `finish`: product/; `act` seen as vec4s; needs subgroups of exactly
// 32. GROUP = 1 (`matmul_group`): up to 8 products of one weight buffer in one dispatch,
// `p` taken from the group's table by `enter` (workgroup x → its product's own x;
// product/group.wgsl), each with its own k slices (`slices`), W offset (`w_base`) and
// scratch offset. The variant's pieces: matmul_coop/ (LoRA term, k-split output, the
// prefetch pair of encodings without one of their own). BT = 1: the W tile transposed
// in workgroup memory (`put_b`, `load_b`); ROT = 1: each row tile takes its slice's k
// steps from a start of its own (`kst`).

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(2) var<storage, read> w: array<u32>;               // [N, K] encoded
@group(0) @binding(3) var<storage, read> vecs: array<f32>;            // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>; // activations
@group(0) @binding(5) var<storage, read> w4: array<vec4<u32>>;        // the same W (F16)

const BK: u32 = 32u;
const LD: u32 = 40u;                   // tile row stride in halves (80 bytes)
const SGN: u32 = BN / 32u;             // subgroups across rows
const NSG: u32 = (BM / WM) * SGN;      // subgroups
const THREADS: u32 = 32u * NSG;
const APT: u32 = BM * BK / THREADS;    // x values each thread converts per step
const BPT: u32 = BN * BK / THREADS;    // weights each thread decodes per step
const XV: u32 = APT / 4u;              // x vec4s each thread loads per step
const WV: u32 = BPT / 8u;              // 16-byte F16 weight loads (or dec8 calls) per step
const SA: u32 = BM * LD;
const SB: u32 = BN * LD;

var<workgroup> sa: array<f16, 2u * SA>; // x tiles [2][BM][LD]
var<workgroup> sb: array<f16, 2u * SB>; // W tiles [2][BN][LD] (column-major B = W^T)
var<workgroup> sc: array<f32, 256u * NSG>; // one 16 × 16 result per subgroup

// With BT = 1 the W tile lies transposed in `sb`, [2][BK][LDB] (B row-major, read by
// coopLoadT), instead of [2][BN][LD] (B column-major, read by coopLoad): the same
// halves, so the same products bit for bit. It fits `sb` for BN ≥ 32.
const LDB: u32 = BN + 8u;
const SBT: u32 = BK * LDB;

// Stores the f16 of v as W's element (row nl, column kl) of the tile in buffer buf.
fn put_b(buf: u32, nl: u32, kl: u32, v: f32) {
    if (BT == 1u) {
        sb[buf * SBT + kl * LDB + nl] = f16(v);
    } else {
        sb[buf * SB + nl * LD + kl] = f16(v);
    }
}

// The B fragment of W's rows n.. (16 of them) at column h of the tile in buffer buf.
fn load_b(buf: u32, n: u32, h: u32) -> coop_mat16x16<f16, B> {
    if (BT == 1u) {
        return coopLoadT<coop_mat16x16<f16, B>>(&sb[buf * SBT + h * LDB + n], LDB);
    }
    return coopLoad<coop_mat16x16<f16, B>>(&sb[buf * SB + n * LD + h], LD);
}

// The k step a workgroup takes at its s-th step of the slice [s0, s0 + n): with ROT = 1
// the slice's steps from the step `rot` on, wrapping around (rot < n; every
// s - s0 < n + 2), else in order.
fn kst(s: u32, s0: u32, n: u32, rot: u32) -> u32 {
    if (ROT == 0u) {
        return s;
    }
    let j = s - s0 + rot;
    return s0 + select(j, j - n, j >= n);
}


// Writes the 16 × 16 result a subgroup left in `sc` at tokens tm.., rows tn.. (raw into
// slice ks of `part` when k is split). Each of the 8 rounds covers two tokens' 16 rows
// with consecutive lanes on consecutive rows: `sc` read without bank conflicts, `y`
// written as two 64-byte runs (a lane taking 8 rows of one token read `sc` 8-way
// conflicted and wrote 16 tokens' rows a round: the epilogue was ≈ 20 % of a 2560-row
// product, H100).
fn emit(sg: u32, lane: u32, tm: u32, tn: u32, t_count: u32, ks: u32) {
    let p = &g.seg[gs];
    for (var u = 0u; u < 8u; u++) {
        let e = u * 32u + lane;
        let t = tm + e / 16u;
        let n = tn + e % 16u;
        if (KSPLIT > 1u) {
            if (t < t_count && n < p.n) {
                y_part(part_base() + (ks * t_count + t) * p.n + n, sc[sg * 256u + e]);
            }
            continue;
        }
        if (t < t_count && n < p.n) {
            let idx = p.y_off + t * p.y_stride + p.row0 + n;
            var v: f32;
            if (p.accumulate == 2u) {
                v = finish(sc[sg * 256u + e] + y_load(idx), n);
            } else {
                v = finish(sc[sg * 256u + e], n);
                if (p.accumulate == 1u) {
                    v += y_load(idx);
                }
            }
            y_store(idx, v);
        }
    }
}

// This thread's part of a step, in coalesced runs: x vec4 e = u · THREADS + li of the
// BM × BK block is token e / 8, values 4 · (e % 8).. (eight lanes read a token's 128 bytes),
// and 16-byte weight piece e is row e / 4, weights 8 · (e % 4).. (four lanes read a row's 64
// bytes). (Lanes each reading a run of one token or row, 64 or 32 bytes apart, put every
// load instruction on half-used 32-byte sectors; H100, 10240 × 2560 at T = 512: skipping
// x's loads cut that kernel's time by 36 %, skipping W's by 31 %.) A thread's tokens, rows
// and columns are fixed for the whole product, so `Lanes` holds its offsets and each step
// adds k and constants only: computing each load's index per load cost 11–12 % of 2.9B F16
// prefill, so this loop is issue-bound enough to count it.
struct Lanes {
    xb: u32,  // act vec4 of this thread's first token at k = 0 (x_off + t x_stride + 4 c) / 4
    xs: u32,  // act vec4s from one of its tokens to the next (THREADS / 8 tokens on)
    t: u32,   // its first token (of the tile's BM)
    n: u32,   // its first row of W (of the product's)
    kc: u32,  // its weights' column 8 · (li % 4)
}

const XT: u32 = THREADS / 8u; // tokens between a thread's x vec4s
const WR: u32 = THREADS / 4u; // rows between a thread's weight pieces

fn lanes_of(li: u32, m0: u32, n0: u32) -> Lanes {
    let p = &g.seg[gs];
    let t = m0 + li / 8u;
    return Lanes((p.x_off + t * p.x_stride + 4u * (li % 8u)) >> 2u,
                 (XT * p.x_stride) >> 2u, t, n0 + li / 4u, 8u * (li % 4u));
}

fn load_x(k0: u32, ln: Lanes, t_count: u32, xr: ptr<function, array<vec4<f32>, XV>>) {
    let base = ln.xb + (k0 >> 2u);
    for (var u = 0u; u < XV; u++) {
        var v = vec4<f32>(0.0);
        if (ln.t + u * XT < t_count) {
            v = act[base + u * ln.xs];
        }
        (*xr)[u] = v;
    }
}

fn store_x(buf: u32, li: u32, xr: ptr<function, array<vec4<f32>, XV>>) {
    let ao = buf * SA + (li / 8u) * LD + 4u * (li % 8u);
    for (var u = 0u; u < XV; u++) {
        let o = ao + u * (XT * LD);
        let v = (*xr)[u];
        sa[o] = f16(v.x);
        sa[o + 1u] = f16(v.y);
        sa[o + 2u] = f16(v.z);
        sa[o + 3u] = f16(v.w);
    }
}

// The weights of the step at k0 into registers: eight halves per 16-byte load (F16,
// W16 = 1) or the encoding's `raw8` words (Q4_K; a no-op for the others).
fn load_w(k0: u32, ln: Lanes, wr: ptr<function, array<vec4<u32>, WV>>,
          rr: ptr<function, array<R8, WV>>) {
    let p = &g.seg[gs];
    let k = k0 + ln.kc;
    for (var u = 0u; u < WV; u++) {
        // Rows past the matrix read row n - 1: the tile's columns past n only feed
        // outputs past n, which `emit` never writes (no zeroing needed).
        let n = min(ln.n + u * WR, p.n - 1u);
        if (W16 == 1u) {
            (*wr)[u] = w4[(w_base() + n * p.row_bytes + k * 2u) >> 4u];
        } else {
            (*rr)[u] = raw8(w_base() + n * p.row_bytes, k);
        }
    }
}

// Stores the weights of the step at k0 as f16 (the loaded halves, or `cvt8` of the
// loaded words).
fn store_w(buf: u32, k0: u32, li: u32, ln: Lanes, wr: ptr<function, array<vec4<u32>, WV>>,
           rr: ptr<function, array<R8, WV>>) {
    for (var u = 0u; u < WV; u++) {
        let nl = li / 4u + u * WR;
        var q = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (W16 == 1u) {
            let h = (*wr)[u];
            q = W8(vec4<f32>(unpack2x16float(h.x), unpack2x16float(h.y)),
                   vec4<f32>(unpack2x16float(h.z), unpack2x16float(h.w)));
        } else {
            q = cvt8((*rr)[u], k0 + ln.kc);
        }
        put_b(buf, nl, ln.kc, q.a.x);
        put_b(buf, nl, ln.kc + 1u, q.a.y);
        put_b(buf, nl, ln.kc + 2u, q.a.z);
        put_b(buf, nl, ln.kc + 3u, q.a.w);
        put_b(buf, nl, ln.kc + 4u, q.b.x);
        put_b(buf, nl, ln.kc + 5u, q.b.y);
        put_b(buf, nl, ln.kc + 6u, q.b.z);
        put_b(buf, nl, ln.kc + 7u, q.b.w);
    }
}

// Columns j0.. of h (x's place) and of the B block (W's place) as f16 tiles in buffer 0,
// read in the same coalesced runs as x and W.
fn store_lora(j0: u32, li: u32, m0: u32, n0: u32, t_count: u32) {
    let p = &g.seg[gs];
    for (var u = 0u; u < XV; u++) {
        let e = u * THREADS + li;
        let t = m0 + e / 8u;
        var v = vec4<f32>(0.0);
        if (t < t_count) {
            v = act[(p.lora_h + t * p.lora_stride + j0 + 4u * (e % 8u)) >> 2u];
        }
        let ao = (e / 8u) * LD + 4u * (e % 8u);
        sa[ao] = f16(v.x);
        sa[ao + 1u] = f16(v.y);
        sa[ao + 2u] = f16(v.z);
        sa[ao + 3u] = f16(v.w);
    }
    for (var u = 0u; u < WV; u++) {
        let e = u * THREADS + li;
        let n = min(n0 + e / 4u, p.n - 1u);
        let h = lora_w8((p.lora_b + n * p.lora_rank + j0 + 8u * (e % 4u)) >> 3u);
        let nl = e / 4u;
        let kl = 8u * (e % 4u);
        let a = unpack2x16float(h.x);
        let b = unpack2x16float(h.y);
        let c = unpack2x16float(h.z);
        let f = unpack2x16float(h.w);
        put_b(0u, nl, kl, a.x);
        put_b(0u, nl, kl + 1u, a.y);
        put_b(0u, nl, kl + 2u, b.x);
        put_b(0u, nl, kl + 3u, b.y);
        put_b(0u, nl, kl + 4u, c.x);
        put_b(0u, nl, kl + 5u, c.y);
        put_b(0u, nl, kl + 6u, f.x);
        put_b(0u, nl, kl + 7u, f.y);
    }
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let wx = enter(wid.x);
    let p = &g.seg[gs];
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let m0 = wid.y * BM;
    let nks = slices();
    let n0 = (wx / nks) * BN;
    let ks = wx % nks;
    let sg = li / 32u;
    let lane = li % 32u;
    let wm0 = (sg / SGN) * WM;
    let wn0 = (sg % SGN) * 32u;
    // acc<i><j>: tokens wm0 + 16 i, rows wn0 + 16 j (i ≥ 2 only when WM = 64).
    var acc00: coop_mat16x16<f32, C>;
    var acc01: coop_mat16x16<f32, C>;
    var acc10: coop_mat16x16<f32, C>;
    var acc11: coop_mat16x16<f32, C>;
    var acc20: coop_mat16x16<f32, C>;
    var acc21: coop_mat16x16<f32, C>;
    var acc30: coop_mat16x16<f32, C>;
    var acc31: coop_mat16x16<f32, C>;
    let steps = p.k / BK;
    // With a LoRA term the last slice also runs its rank / 32 steps, each a load round trip
    // and two barriers (about two pipelined steps): the slices share main steps so that
    // every slice's total is about the same.
    // (At most half a slice, so every slice keeps main steps to load.)
    let extra = min(select(0u, 2u * p.lora_rank / BK, COOP_LORA && nks > 1u), steps / nks / 2u);
    let s0 = min(ks * (steps + extra) / nks, steps);
    let s1 = min((ks + 1u) * (steps + extra) / nks, steps);
    // Both views of the weights stay in the layout whichever one the encoding reads.
    _ = arrayLength(&w);
    _ = arrayLength(&w4);
    let ln = lanes_of(li, m0, n0);
    // ROT = 1: the row tiles start their slice at different steps (7 apart, wrapping), so
    // that the workgroups of a token tile do not all read the same block of x at once.
    let nsl = s1 - s0;
    let rot = select(0u, ((n0 / BN) * 7u) % max(nsl, 1u), ROT == 1u);
    var xr: array<vec4<f32>, XV>;
    var wr: array<vec4<u32>, WV>;
    var rr: array<R8, WV>;
    load_x(kst(s0, s0, nsl, rot) * BK, ln, t_count, &xr);
    load_w(kst(s0, s0, nsl, rot) * BK, ln, &wr, &rr);
    store_x(s0 & 1u, li, &xr);
    store_w(s0 & 1u, kst(s0, s0, nsl, rot) * BK, li, ln, &wr, &rr);
    if (PF2 == 1u && s0 + 1u < s1) {
        load_x(kst(s0 + 1u, s0, nsl, rot) * BK, ln, t_count, &xr);
        load_w(kst(s0 + 1u, s0, nsl, rot) * BK, ln, &wr, &rr);
    }
    workgroupBarrier();
    for (var s = s0; s < s1; s++) {
        let buf = s & 1u;
        if (PF2 == 1u) {
            // Step s + 1's tile (loaded during step s - 1) into the buffer step s - 1
            // read, which its barrier freed; then step s + 2's loads, in flight for a
            // whole step.
            if (s + 1u < s1) {
                store_x(buf ^ 1u, li, &xr);
                store_w(buf ^ 1u, kst(s + 1u, s0, nsl, rot) * BK, li, ln, &wr, &rr);
            }
            if (s + 2u < s1) {
                load_x(kst(s + 2u, s0, nsl, rot) * BK, ln, t_count, &xr);
                load_w(kst(s + 2u, s0, nsl, rot) * BK, ln, &wr, &rr);
            }
        } else if (s + 1u < s1) {
            load_x(kst(s + 1u, s0, nsl, rot) * BK, ln, t_count, &xr);
            load_w(kst(s + 1u, s0, nsl, rot) * BK, ln, &wr, &rr);
        }
        let ab = buf * SA + wm0 * LD;
        for (var h = 0u; h < BK; h += 16u) {
            let b0 = load_b(buf, wn0, h);
            let b1 = load_b(buf, wn0 + 16u, h);
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + h], LD);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 16u * LD + h], LD);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            if (WM == 64u) {
                let a2 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 32u * LD + h], LD);
                let a3 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 48u * LD + h], LD);
                acc20 = coopMultiplyAdd(a2, b0, acc20);
                acc21 = coopMultiplyAdd(a2, b1, acc21);
                acc30 = coopMultiplyAdd(a3, b0, acc30);
                acc31 = coopMultiplyAdd(a3, b1, acc31);
            }
        }
        // PF2 = 0: step s + 1's tile converted / decoded after the products are issued
        // (into the buffer step s - 1 read, before that step's barrier).
        if (PF2 == 0u && s + 1u < s1) {
            store_x(buf ^ 1u, li, &xr);
            store_w(buf ^ 1u, kst(s + 1u, s0, nsl, rot) * BK, li, ln, &wr, &rr);
        }
        workgroupBarrier();
    }
    // The LoRA term's steps (the main loop's last barrier freed buffer 0).
    // (`select`, not `&&`: the products need uniform control flow.)
    let lora_cols = select(0u, p.lora_rank, COOP_LORA && ks == nks - 1u);
    for (var j0 = 0u; j0 < lora_cols; j0 += BK) {
        store_lora(j0, li, m0, n0, t_count);
        workgroupBarrier();
        let ab = wm0 * LD;
        for (var h = 0u; h < BK; h += 16u) {
            let b0 = load_b(0u, wn0, h);
            let b1 = load_b(0u, wn0 + 16u, h);
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + h], LD);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 16u * LD + h], LD);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            if (WM == 64u) {
                let a2 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 32u * LD + h], LD);
                let a3 = coopLoadT<coop_mat16x16<f16, A>>(&sa[ab + 48u * LD + h], LD);
                acc20 = coopMultiplyAdd(a2, b0, acc20);
                acc21 = coopMultiplyAdd(a2, b1, acc21);
                acc30 = coopMultiplyAdd(a3, b0, acc30);
                acc31 = coopMultiplyAdd(a3, b1, acc31);
            }
        }
        workgroupBarrier();
    }
    // One block per accumulator: WGSL has no arrays of cooperative matrices.
    let tm = m0 + wm0;
    let tn = n0 + wn0;
    coopStoreT(acc00, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm, tn, t_count, ks);
    workgroupBarrier();
    coopStoreT(acc01, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm, tn + 16u, t_count, ks);
    workgroupBarrier();
    coopStoreT(acc10, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm + 16u, tn, t_count, ks);
    workgroupBarrier();
    coopStoreT(acc11, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm + 16u, tn + 16u, t_count, ks);
    workgroupBarrier();
    if (WM == 64u) {
        coopStoreT(acc20, &sc[sg * 256u], 16u);
        workgroupBarrier();
        emit(sg, lane, tm + 32u, tn, t_count, ks);
        workgroupBarrier();
        coopStoreT(acc21, &sc[sg * 256u], 16u);
        workgroupBarrier();
        emit(sg, lane, tm + 32u, tn + 16u, t_count, ks);
        workgroupBarrier();
        coopStoreT(acc30, &sc[sg * 256u], 16u);
        workgroupBarrier();
        emit(sg, lane, tm + 48u, tn, t_count, ks);
        workgroupBarrier();
        coopStoreT(acc31, &sc[sg * 256u], 16u);
        workgroupBarrier();
        emit(sg, lane, tm + 48u, tn + 16u, t_count, ks);
        workgroupBarrier();
    }
}
