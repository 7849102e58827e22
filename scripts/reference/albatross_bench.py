"""BlinkDL's Albatross (fp16 reference path: `reference/rwkv7.py`, its CUDA WKV kernel,
cuBLAS products) timed on a model file of ours, for the peer figures of benchmarks.md.

Runs on the GPU machine (PyTorch with CUDA, nvcc and ninja for Albatross's extension).
The model is a SafeTensors file with BlinkDL's names (what `rwkv synth --out X.safetensors`
writes, F16): it becomes the `.pth` Albatross loads, so both engines run the same weights.

Figures, each the median and the 10th percentile (Albatross's own `benchmark.py` reports
the 10th percentile) of per-call GPU-synchronised wall times, tokens per second:
  decode      batch 1, one token a call (`forward(token, state)`), after a warm-up
  prefill     one call of `--prefill` tokens from a fresh state (`forward(tokens, None)`)
  batch B     B sequences one token a call (`forward_batch([[t]] * B, state)`)
Tokens come from a seeded generator; the next token is the argmax of the logits (on the
GPU, outside the timed call, as Albatross's "forward" figure leaves the sampler out).

Usage: python3 albatross_bench.py --albatross DIR --model M.safetensors [--json OUT]
"""

import argparse
import json
import os
import sys
import time


def percentile(xs, q):
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[i]


def rates(times, tokens):
    """{median, p10} tokens/s from per-call seconds (p10 of the times = the fast end)."""
    return {
        "median_tok_s": tokens / percentile(times, 50),
        "p10_tok_s": tokens / percentile(times, 10),
        "samples": len(times),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--albatross", required=True, help="Albatross checkout (holds reference/)")
    ap.add_argument("--model", required=True, help="SafeTensors with BlinkDL names")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--batch", default="32,128")
    ap.add_argument("--steps", type=int, default=64, help="timed decode calls")
    ap.add_argument("--repeat", type=int, default=10, help="timed prefill calls")
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    from safetensors.torch import load_file

    t0 = time.perf_counter()
    z = load_file(a.model)
    pth = "/tmp/albatross-model"
    torch.save(z, pth + ".pth")
    n_layer = 1 + max(int(k.split(".")[1]) for k in z if k.startswith("blocks."))
    n_embd = z["emb.weight"].shape[1]
    vocab = z["emb.weight"].shape[0]
    del z
    convert_s = time.perf_counter() - t0

    sys.path.insert(0, a.albatross)
    from types import SimpleNamespace

    t0 = time.perf_counter()
    from reference.rwkv7 import RWKV_x070  # compiles the CUDA WKV extension

    build_s = time.perf_counter() - t0
    args = SimpleNamespace(
        vocab_size=vocab, head_size=64, n_layer=n_layer, n_embd=n_embd, MODEL_NAME=pth
    )
    t0 = time.perf_counter()
    model = RWKV_x070(args)
    load_s = time.perf_counter() - t0

    g = torch.Generator().manual_seed(1)
    rand_tokens = lambda n: torch.randint(0, vocab, (n,), generator=g).tolist()
    sync = torch.cuda.synchronize

    def timed(fn):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        return time.perf_counter() - t, out

    # Decode, batch 1.
    logits, state = model.forward(rand_tokens(16), None)
    tok = int(torch.argmax(logits))
    times = []
    for i in range(16 + a.steps):
        dt, (logits, state) = timed(lambda: model.forward(tok, state))
        tok = int(torch.argmax(logits))
        if i >= 16:
            times.append(dt)
    decode = rates(times, 1)

    # Prefill from a fresh state.
    prompt = rand_tokens(a.prefill)
    times = []
    for i in range(3 + a.repeat):
        dt, _ = timed(lambda: model.forward(prompt, None))
        if i >= 3:
            times.append(dt)
    prefill = rates(times, a.prefill)

    # Batched decode, as Albatross's benchmark.py sets up its states.
    batched = {}
    for b in [int(x) for x in a.batch.split(",") if x]:
        torch.cuda.empty_cache()
        st = []
        for _ in range(n_layer):
            st.append(torch.zeros((b, n_embd), dtype=torch.half, device="cuda"))
            st.append(
                torch.zeros((b, n_embd // 64, 64, 64), dtype=torch.float, device="cuda")
            )
            st.append(torch.zeros((b, n_embd), dtype=torch.half, device="cuda"))
        out, st = model.forward_batch([rand_tokens(4) for _ in range(b)], st)
        times = []
        for i in range(8 + a.steps):
            toks = [[int(t)] for t in torch.argmax(out, dim=-1).tolist()]
            dt, (out, st) = timed(lambda: model.forward_batch(toks, st))
            if i >= 8:
                times.append(dt)
        batched[str(b)] = rates(times, b)
        batched[str(b)]["ms_per_step"] = 1e3 * percentile(times, 50)
        del st, out

    report = {
        "engine": "Albatross reference/rwkv7.py (fp16, CUDA WKV, cuBLAS)",
        "albatross_commit": open(os.path.join(a.albatross, "COMMIT")).read().strip()
        if os.path.exists(os.path.join(a.albatross, "COMMIT"))
        else None,
        "model": os.path.basename(a.model),
        "n_layer": n_layer,
        "n_embd": n_embd,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "convert_s": convert_s,
        "extension_build_s": build_s,
        "load_s": load_s,
        "decode": decode,
        f"prefill_{a.prefill}": prefill,
        "batch": batched,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
