"""The Python side of the Python-vs-Rust overhead check (scripts/py-bench.sh).

Times through `rwkv_studio` exactly the work `rwkv pybench` times through the Rust API:
`embed` of the texts of a file (one per line, last-token pooling) and the `[T, V]` logits
of the first T tokens of a prompt file, from the zero state. Prints JSON:
per-call ms (median, min, all) of each.

    python python/bench/bench.py --model M.gguf --texts texts.txt --prompt prompt.txt
"""

import argparse
import json
import statistics
import time

import rwkv_studio


def summary(ms):
    return {"median": statistics.median(ms), "min": min(ms), "all": ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--texts", required=True, help="texts to embed, one per line")
    ap.add_argument("--prompt", required=True, help="text whose first --tokens tokens get logits")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--chunk", type=int, default=256)
    a = ap.parse_args()

    with open(a.texts, encoding="utf-8") as f:
        texts = [line for line in f.read().split("\n") if line]
    model = rwkv_studio.Model(a.model, adapter=a.adapter, chunk=a.chunk)
    with open(a.prompt, encoding="utf-8") as f:
        ids = model.tokenize(f.read())
    if len(ids) < a.tokens:
        raise SystemExit(f"{a.prompt}: {len(ids)} tokens, fewer than --tokens {a.tokens}")
    ids = ids[: a.tokens]

    embed_ms, logits_ms = [], []
    for i in range(a.warmup + a.repeat):
        t = time.perf_counter()
        e = model.embed(texts)
        ms = (time.perf_counter() - t) * 1e3
        assert e.shape[0] == len(texts)
        if i >= a.warmup:
            embed_ms.append(ms)
        del e
    for i in range(a.warmup + a.repeat):
        t = time.perf_counter()
        lg = model.logits(ids)
        ms = (time.perf_counter() - t) * 1e3
        assert lg.shape == (len(ids), model.info["vocab"])
        if i >= a.warmup:
            logits_ms.append(ms)
        del lg
    info = model.info
    print(json.dumps({
        "side": "python",
        "model": info["path"],
        "adapter": info["adapter"],
        "texts": len(texts),
        "dim": info["embd"],
        "tokens": len(ids),
        "vocab": info["vocab"],
        "embed_ms": summary(embed_ms),
        "logits_ms": summary(logits_ms),
    }))


if __name__ == "__main__":
    main()
