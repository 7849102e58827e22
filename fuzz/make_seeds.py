#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (stdlib only): a complete mini RWKV-7 (2 layers, C=16, head size 8, vocab 8, FFN 32, ranks 4) as a GGUF with llama.cpp's names,
as SafeTensors with BlinkDL's names, and as a .pth (via tests/data/make_pth.py), so the
fuzzer starts from inputs that get through the readers *and* the mapping.

usage: fuzz/make_seeds.py   (writes fuzz/corpus/{gguf,safetensors_pth}/, gitignored)

Then (cargo install cargo-fuzz; RUSTC_BOOTSTRAP=1 lets stable rustc take -Zsanitizer):
  RUSTC_BOOTSTRAP=1 cargo fuzz run gguf -- -max_total_time=600
  RUSTC_BOOTSTRAP=1 cargo fuzz run safetensors_pth -- -max_total_time=600
"""
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
L, C, N, V, F, R = 2, 16, 8, 8, 32, 4


def f16(n, seed):
    return struct.pack("<%de" % n, *[((i * 7 + seed) % 13 - 6) / 8 for i in range(n)])


def f32(n, seed):
    return struct.pack("<%df" % n, *[((i * 5 + seed) % 11 - 5) / 8 for i in range(n)])


def gguf():
    kv = [("general.architecture", 8, "rwkv7"), ("rwkv7.embedding_length", 4, C), ("rwkv7.block_count", 4, L),
          ("rwkv7.wkv.head_size", 4, N), ("rwkv7.feed_forward_length", 4, F),
          ("rwkv7.attention.decay_lora_rank", 4, R), ("rwkv7.attention.iclr_lora_rank", 4, R),
          ("rwkv7.attention.value_residual_mix_lora_rank", 4, R), ("rwkv7.attention.gate_lora_rank", 4, R)]
    t = [("token_embd.weight", [C, V], 1), ("token_embd_norm.weight", [C], 0), ("token_embd_norm.bias", [C], 0),
         ("output_norm.weight", [C], 0), ("output_norm.bias", [C], 0), ("output.weight", [C, V], 1)]
    for i in range(L):
        b = f"blk.{i}."
        t += [(b + n, [C], 0) for n in ("attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_norm_2.bias",
                                        "time_mix_w0.weight", "time_mix_a0.weight", "time_mix_v0.weight",
                                        "time_mix_k_k.weight", "time_mix_k_a.weight", "time_mix_r_k.weight",
                                        "time_mix_ln.weight", "time_mix_ln.bias", "channel_mix_lerp_k.weight")]
        t += [(b + "time_mix_lerp_fused.weight", [C, 1, 1, 6], 0)]
        for x in "wavg":
            t += [(b + f"time_mix_{x}1.weight", [C, R], 1), (b + f"time_mix_{x}2.weight", [R, C], 1)]
        t += [(b + f"time_mix_{m}.weight", [C, C], 1) for m in ("receptance", "key", "value", "output")]
        t += [(b + "channel_mix_key.weight", [C, F], 1), (b + "channel_mix_value.weight", [F, C], 1)]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(t), len(kv)))
    for k, ty, v in kv:
        out += struct.pack("<Q", len(k)) + k.encode() + struct.pack("<I", ty)
        out += struct.pack("<Q", len(v)) + v.encode() if ty == 8 else struct.pack("<I", v)
    rel, blobs = 0, []
    for i, (name, ne, ty) in enumerate(t):
        n = 1
        for d in ne:
            n *= d
        data = f16(n, i) if ty == 1 else f32(n, i)
        out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
        out += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", ty, rel)
        blobs.append((rel, data))
        rel += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    base = len(out)
    for r, data in blobs:
        out += b"\0" * (base + r - len(out)) + data
    return bytes(out)


def safetensors():
    t = [("emb.weight", [V, C]), ("blocks.0.ln0.weight", [C]), ("blocks.0.ln0.bias", [C]),
         ("ln_out.weight", [C]), ("ln_out.bias", [C]), ("head.weight", [V, C])]
    for i in range(L):
        b = f"blocks.{i}."
        t += [(b + n, [C]) for n in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "att.ln_x.weight", "att.ln_x.bias")]
        t += [(b + "att." + n, [1, 1, C]) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0", "k_k", "k_a")]
        t += [(b + "att.r_k", [C // N, N]), (b + "ffn.x_k", [1, 1, C])]
        for x in "wavg":
            t += [(b + f"att.{x}1", [C, R]), (b + f"att.{x}2", [R, C])]
        t += [(b + f"att.{m}.weight", [C, C]) for m in ("receptance", "key", "value", "output")]
        t += [(b + "ffn.key.weight", [F, C]), (b + "ffn.value.weight", [C, F])]
    header, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for i, (name, shape) in enumerate(t):
        n = 1
        for d in shape:
            n *= d
        blob = f16(n, i)
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + len(blob)]}
        data += blob
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


def main():
    gdir = os.path.join(HERE, "corpus", "gguf")
    sdir = os.path.join(HERE, "corpus", "safetensors_pth")
    os.makedirs(gdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    with open(os.path.join(gdir, "mini-rwkv7.gguf"), "wb") as fh:
        fh.write(gguf())
    st = os.path.join(sdir, "mini-rwkv7.safetensors")
    with open(st, "wb") as fh:
        fh.write(safetensors())
    make_pth = os.path.join(HERE, "..", "crates", "engine", "tests", "data", "make_pth.py")
    for dt in ("bf16", "f32"):
        subprocess.run([sys.executable, make_pth, st, os.path.join(sdir, f"mini-rwkv7-{dt}.pth"), "--dtype", dt],
                       check=True)
    for d in (gdir, sdir):
        for f in sorted(os.listdir(d)):
            print(os.path.join(d, f), os.path.getsize(os.path.join(d, f)))


if __name__ == "__main__":
    main()
