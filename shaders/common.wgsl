// Shared by every shader: the per-call dimensions and small math helpers.

// Per-call dimensions (one uniform for the whole forward pass) and the static offsets
// of the token metadata inside `tmeta` (u32 elements).
struct Dims {
    n_tokens: u32,     // T: tokens in this pass, all sequences concatenated
    n_seqs: u32,       // B: sequences in this pass
    n_rows: u32,       // R: rows gathered for the head / embeddings
    t_cap: u32,        // capacity in tokens of every activation region
    off_tok_seq: u32,  // tmeta[off_tok_seq + t] = batch index of token t's sequence
    off_tok_pos: u32,  // tmeta[off_tok_pos + t] = position of token t in its sequence (this pass)
    off_seqs: u32,     // tmeta[off_seqs + 4b ..] = (start token, length, state slot, 0)
    off_rows: u32,     // tmeta[off_rows + i] = token row gathered as output row i
    max_len: u32,      // L: tokens of the longest sequence of this pass
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// tanh that stays finite for large |x| (exp(2x) overflows past x ≈ 44).
fn tanh_safe(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// The epilogue of a matrix product: 0 none, 1 tanh, 2 sigmoid, 3 relu² (channel mix).
fn activation(y: f32, act: u32) -> f32 {
    switch act {
        case 1u: { return tanh_safe(y); }
        case 2u: { return sigmoid(y); }
        case 3u: { let q = max(y, 0.0); return q * q; }
        default: { return y; }
    }
}

// Linear invocation index over a 2D grid of 1D workgroups (the host splits large counts
// over y because a dimension holds at most 65535 workgroups).
fn linear_id(gid: vec3<u32>, nwg: vec3<u32>, wg_size: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg_size;
}

fn linear_wg(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}
