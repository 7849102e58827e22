// Byte access into the weight buffer `w: array<u32>` (little endian), for encodings whose
// blocks are not 4-byte aligned (Q8_0: 34 bytes, Q6_K: 210 bytes).

fn rd_u8(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// Two bytes at an even offset.
fn rd_u16(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}

// Four bytes at any offset (buffers are padded, so the word after the last exists).
fn rd_u32(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = w[b >> 2u];
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (w[(b >> 2u) + 1u] << (32u - s));
}

fn rd_f16(b: u32) -> f32 {
    return unpack2x16float(rd_u16(b)).x;
}

fn sext8(x: u32) -> f32 {
    return f32(bitcast<i32>(x << 24u) >> 24u);
}

// Decoded weights of one 32-element chunk, filled by `decode32`.
var<private> dq: array<f32, 32>;

// Eight decoded weights (elements k .. k+8 of a row), filled by `dec8`.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// Four signed bytes of a word as f32.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(
        f32(bitcast<i32>(q << 24u) >> 24u),
        f32(bitcast<i32>(q << 16u) >> 24u),
        f32(bitcast<i32>(q << 8u) >> 24u),
        f32(bitcast<i32>(q) >> 24u),
    );
}

// The low nibbles of a word's four bytes as f32.
fn nib4(q: u32) -> vec4<f32> {
    return vec4<f32>(f32(q & 0xfu), f32((q >> 8u) & 0xfu), f32((q >> 16u) & 0xfu), f32((q >> 24u) & 0xfu));
}
