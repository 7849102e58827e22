#!/usr/bin/env python3
"""Greedy reference for the demo model, from BlinkDL's `rwkv` package on the GGUF's
dequantized weights (the weights our engine runs).

1. gguf-py dequantizes every tensor of the GGUF and maps it back to BlinkDL names and
   shapes (the mapping of ../shared/fixtures/tools/check_gguf.py).
2. The weights are saved as a float32 .pth; the `rwkv` package (RWKV_x070, 'cpu fp32')
   tokenizes the prompt with its TRIE_TOKENIZER and continues it greedily.
3. Prints JSON: prompt, prompt_tokens, tokens (greedy), gaps (top-1 minus top-2 logit
   at each step, so a test can tell a near-tie from a real difference), text.

Needs torch, numpy, gguf, rwkv (the GPU machine has torch; the others travel as wheels).
usage: demo_greedy.py MODEL.gguf "PROMPT" N OUT.json
"""
import json
import os
import sys

import numpy as np

os.environ["RWKV_V7_ON"] = "1"
os.environ.setdefault("RWKV_JIT_ON", "0")
os.environ.setdefault("RWKV_CUDA_ON", "0")

LERP = ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"]
SIMPLE = {
    "token_embd.weight": "emb.weight", "output.weight": "head.weight",
    "token_embd_norm.weight": "blocks.0.ln0.weight", "token_embd_norm.bias": "blocks.0.ln0.bias",
    "output_norm.weight": "ln_out.weight", "output_norm.bias": "ln_out.bias",
}
BLK = {
    "attn_norm.weight": "ln1.weight", "attn_norm.bias": "ln1.bias",
    "attn_norm_2.weight": "ln2.weight", "attn_norm_2.bias": "ln2.bias",
    "time_mix_k_k.weight": "att.k_k", "time_mix_k_a.weight": "att.k_a", "time_mix_r_k.weight": "att.r_k",
    "time_mix_receptance.weight": "att.receptance.weight", "time_mix_key.weight": "att.key.weight",
    "time_mix_value.weight": "att.value.weight", "time_mix_output.weight": "att.output.weight",
    "time_mix_ln.weight": "att.ln_x.weight", "time_mix_ln.bias": "att.ln_x.bias",
    "channel_mix_lerp_k.weight": "ffn.x_k", "channel_mix_key.weight": "ffn.key.weight",
    "channel_mix_value.weight": "ffn.value.weight",
}
for x in "wavg":
    for n in "012":
        if not (x == "g" and n == "0"):
            BLK[f"time_mix_{x}{n}.weight"] = f"att.{x}{n}"


def to_blinkdl(name, arr):
    if name in SIMPLE:
        return [(SIMPLE[name], arr)]
    _, n, rest = name.split(".", 2)
    p = f"blocks.{n}."
    if rest == "time_mix_lerp_fused.weight":
        a = arr.reshape(6, -1)
        return [(p + "att." + LERP[i], a[i].reshape(1, 1, -1)) for i in range(6)]
    b = BLK[rest]
    if b.split(".")[-1] in ("w1", "a1", "v1", "g1", "w2", "a2", "v2", "g2"):
        arr = arr.T
    elif b.endswith(("w0", "a0", "v0", "k_k", "k_a", "ffn.x_k")):
        arr = arr.reshape(1, 1, -1)
    elif b.endswith("r_k"):
        arr = arr.reshape(-1, 64)
    return [(p + b, arr)]


def main():
    gguf_path, prompt, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    import gguf
    from gguf.quants import dequantize
    import torch

    r = gguf.GGUFReader(gguf_path)
    sd = {}
    for t in r.tensors:
        qt = gguf.GGMLQuantizationType(t.tensor_type)
        arr = dequantize(t.data, qt).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        for k, v in to_blinkdl(t.name, arr):
            sd[k] = torch.from_numpy(np.ascontiguousarray(v))
    base = "/tmp/demo-deq"
    torch.save(sd, base + ".pth")
    from rwkv.model import RWKV
    from rwkv.rwkv_tokenizer import TRIE_TOKENIZER

    here = os.path.dirname(__import__("rwkv").__file__)
    tok = TRIE_TOKENIZER(os.path.join(here, "rwkv_vocab_v20230424.txt"))
    model = RWKV(model=base, strategy="cpu fp32")
    ids = tok.encode(prompt)
    logits, state = model.forward(ids, None)
    toks, gaps = [], []
    for _ in range(n):
        l = logits.float()
        top2 = torch.topk(l, 2)
        t = int(top2.indices[0])
        toks.append(t)
        gaps.append(float(top2.values[0] - top2.values[1]))
        logits, state = model.forward([t], state)
    res = {
        "model": os.path.basename(gguf_path),
        "impl": "rwkv pip package RWKV_x070, strategy 'cpu fp32', on the GGUF's dequantized weights (gguf-py)",
        "prompt": prompt,
        "prompt_tokens": ids,
        "tokens": toks,
        "gaps": gaps,
        "text": tok.decode(toks),
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
