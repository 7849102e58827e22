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

// Integers below 2^23 as f32 minus `bias`, without a conversion instruction (those run
// at a quarter of the FMA rate or less on many GPUs, and a matrix × vector step converts
// every weight): v as the mantissa of 2^23, then one subtraction, exact.
fn u2f4(v: vec4<u32>, bias: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - (8388608.0 + bias);
}

// A word's four bytes, each masked by `mask`, in vec4 lanes.
fn bytes4(q: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(mask);
}

// Four signed bytes of a word as f32 (the sign bit flipped: b + 128 unsigned).
fn i8x4(q: u32) -> vec4<f32> {
    return u2f4(bytes4(q ^ 0x80808080u, 0xffu), 128.0);
}

// The low nibbles of a word's four bytes as f32.
fn nib4(q: u32) -> vec4<f32> {
    return u2f4(bytes4(q, 0xfu), 0.0);
}
