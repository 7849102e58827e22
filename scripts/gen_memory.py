#!/usr/bin/env python3
"""RSS of a long generation, early and late (issue 26): the CLI (`rwkv generate`, its RSS
sampled from /proc while it writes) and the Python package (`Model.generate(stream=True)`,
its own RSS at piece EARLY and at the end). Prints one JSON line per run.

usage: gen_memory.py cli RWKV MODEL TOKENS EARLY
       gen_memory.py python MODEL TOKENS EARLY

A piece of a stream is one token's text (several when a character spans tokens), so the
Python reading at piece EARLY is at ≈ EARLY tokens. The CLI prints text, not token counts:
its early reading is when EARLY / TOKENS of its final output had been written (random
models' tokens have about the same length throughout), its late one the largest after that.
"""

import json
import os
import subprocess
import sys
import threading
import time


def rss_kib(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cli(rwkv, model, tokens, early):
    p = subprocess.Popen(
        [rwkv, "generate", "--model", model, "--prompt", "Once upon a time", "-n", str(tokens),
         "--temp", "1", "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    samples = []  # (bytes written so far, RSS KiB)
    written = [0]

    def read():
        while True:
            b = p.stdout.read(256)
            if not b:
                break
            written[0] += len(b)

    t = threading.Thread(target=read)
    t.start()
    while p.poll() is None:
        try:
            samples.append((written[0], rss_kib(p.pid)))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    t.join()
    err = p.stderr.read().decode()
    total = written[0]
    target = total * early / tokens
    early_rss = next((r for w, r in samples if w >= target), samples[-1][1])
    # The largest reading from then on (the process tears down before it exits).
    late_rss = max(r for w, r in samples if w >= target) if samples else 0
    return {"what": "cli", "tokens": tokens, "early": early, "rss_early_mib": early_rss / 1024,
            "rss_late_mib": late_rss / 1024, "growth_pct": 100 * (late_rss / early_rss - 1),
            "stats": err.strip().splitlines()[-1] if err.strip() else ""}


def python(model, tokens, early):
    import rwkv_studio
    m = rwkv_studio.Model(model)
    s = m.generate("Once upon a time", tokens, seed=1, stream=True)
    n = 0
    early_rss = None
    for _ in s:
        n += 1
        if n == early:
            early_rss = rss_kib()
    late_rss = rss_kib()
    return {"what": "python", "tokens": s.stats["generated_tokens"], "pieces": n, "early": early,
            "rss_early_mib": early_rss / 1024, "rss_late_mib": late_rss / 1024,
            "growth_pct": 100 * (late_rss / early_rss - 1),
            "decode_tok_s": s.stats["decode_tok_s"]}


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "cli" and len(a) == 5:
        r = cli(a[1], a[2], int(a[3]), int(a[4]))
    elif a and a[0] == "python" and len(a) == 4:
        r = python(a[1], int(a[2]), int(a[3]))
    else:
        sys.exit(__doc__)
    print(json.dumps(r))
