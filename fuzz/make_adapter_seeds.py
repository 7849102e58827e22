#!/usr/bin/env python3
"""Seeds of the `adapters` fuzz target (fuzz/fuzz_targets/adapters.rs): a tiny LoRA for a
base of C 16, F 32, 2 layers (rank 2, every attention and FFN matrix) as RWKV-PEFT .pth
(bf16) and .safetensors (F32, lora_alpha 4) and as a llama.cpp GGUF adapter (F16, with
Q8_0 where a row holds a whole 32-block), and a state-tuning file (2 layers × 2 heads × 8×8)
as .pth and .safetensors. Small on purpose (a few KB each), so the fuzzer mutates headers.

usage: python fuzz/make_adapter_seeds.py --gguf-py /path/to/llama.cpp/gguf-py
       (needs torch, numpy, safetensors from PyPI; writes fuzz/seeds/adapters/)
Then: bash scripts/fuzz.sh 1000000 adapters
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
C, F, L, R, H, N = 16, 32, 2, 2, 2, 8
TARGETS = [("att.receptance", "time_mix_receptance", C, C), ("att.key", "time_mix_key", C, C),
           ("att.value", "time_mix_value", C, C), ("att.output", "time_mix_output", C, C),
           ("ffn.key", "channel_mix_key", F, C), ("ffn.value", "channel_mix_value", C, F)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-py", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf
    import torch
    from gguf.quants import quantize
    from safetensors.numpy import save_file
    out = os.path.join(HERE, "seeds", "adapters")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(5)
    lora = {}
    for i in range(L):
        for t, _, n_out, n_in in TARGETS:
            lora[f"blocks.{i}.{t}.lora_A"] = (rng.integers(-8, 9, (R, n_in)) / 8).astype(np.float32)
            lora[f"blocks.{i}.{t}.lora_B"] = (rng.integers(-8, 9, (n_out, R)) / 8).astype(np.float32)
    torch.save({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in lora.items()}, os.path.join(out, "lora.pth"))
    save_file(lora, os.path.join(out, "lora.safetensors"), metadata={"lora_alpha": "4"})
    w = gguf.GGUFWriter(os.path.join(out, "lora.gguf"), arch="rwkv7")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 4.0)
    for i in range(L):
        for t, g, _, _ in TARGETS:
            for fac, suf in (("A", "lora_a"), ("B", "lora_b")):
                data = lora[f"blocks.{i}.{t}.lora_{fac}"]
                qt = gguf.GGMLQuantizationType.Q8_0 if data.shape[1] % 32 == 0 else gguf.GGMLQuantizationType.F16
                w.add_tensor(f"blk.{i}.{g}.weight.{suf}", quantize(data, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    st = {f"blocks.{i}.att.time_state": (rng.integers(-16, 17, (H, N, N)) / 16).astype(np.float32) for i in range(L)}
    torch.save({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in st.items()}, os.path.join(out, "state.pth"))
    save_file(st, os.path.join(out, "state.safetensors"))
    for f in sorted(os.listdir(out)):
        print(f, os.path.getsize(os.path.join(out, f)))


if __name__ == "__main__":
    main()
