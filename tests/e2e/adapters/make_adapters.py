#!/usr/bin/env python3
"""Test adapters for the bundled demo model (rwkv7-demo-6x256: 6 layers, C 256, 4 heads x 64,
FFN 1024), used by the app's end-to-end test (scripts/e2e.sh) and its command tests
(src-tauri/tests/adapters.rs). Seeded, standard library only, so the files are the same on
every machine; the outputs are committed next to this script.

  demo-lora-r4.safetensors   RWKV-PEFT LoRA, rank 4, alpha 8 (default scale 2) on all six block
                             matrices of every layer: blocks.N.att.{receptance,key,value,output}
                             and blocks.N.ffn.{key,value}, lora_A [r, in], lora_B [out, r], F16,
                             alpha in the SafeTensors __metadata__ (`lora_alpha`).
  demo-lora-att-r2.safetensors  a second LoRA: rank 2, attention matrices only, no alpha (scale 1).
  demo-state.safetensors     RWKV-PEFT state tuning: blocks.N.att.time_state [H, N, N] = [4, 64, 64]
                             per layer, F16.

Sizes: A ~ N(0, 1/in) and B ~ N(0, SIGMA_B^2) give delta entries of std about
sqrt(r) * SIGMA_B / sqrt(in): 0.006 at r = 4, in = 256, times the default scale 2 about half
the spread of the demo model's own weights there (0.02-0.06), so greedy text visibly changes.

usage: python3 tests/e2e/adapters/make_adapters.py [OUT_DIR]   (default: this folder)
"""
import json
import math
import os
import random
import struct
import sys

L, C, H, N, F = 6, 256, 4, 64, 1024
SIGMA_B = 0.05
SIGMA_STATE = 0.3
ATT = ["receptance", "key", "value", "output"]
# (name within a block, n_out, n_in) of every matrix a LoRA may adapt (BlinkDL names).
TARGETS = [(f"att.{m}", C, C) for m in ATT] + [("ffn.key", F, C), ("ffn.value", C, F)]


def normal(rng, n, sigma):
    return [rng.gauss(0.0, sigma) for _ in range(n)]


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, shape, float values) stored as F16, in the given order."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, shape, vals in tensors:
        blob = struct.pack("<%de" % len(vals), *vals)
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def lora(seed, rank, targets):
    rng = random.Random(seed)
    out = []
    for layer in range(L):
        for name, n_out, n_in in targets:
            base = f"blocks.{layer}.{name}"
            out.append((base + ".lora_A", [rank, n_in], normal(rng, rank * n_in, 1 / math.sqrt(n_in))))
            out.append((base + ".lora_B", [n_out, rank], normal(rng, n_out * rank, SIGMA_B)))
    return out


def state(seed):
    rng = random.Random(seed)
    return [(f"blocks.{layer}.att.time_state", [H, N, N], normal(rng, H * N * N, SIGMA_STATE)) for layer in range(L)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "demo-lora-r4.safetensors"), lora(12, 4, TARGETS), {"lora_alpha": 8})
    write_safetensors(os.path.join(out, "demo-lora-att-r2.safetensors"), lora(34, 2, TARGETS[:4]))
    write_safetensors(os.path.join(out, "demo-state.safetensors"), state(56))


if __name__ == "__main__":
    main()
