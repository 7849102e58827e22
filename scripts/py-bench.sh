#!/usr/bin/env bash
# The Python package against the Rust API on the same work, on this machine's GPU:
# `embed` of 1,000 short texts and the logits of a 512-token prompt, timed by
# python/bench/bench.py (through rwkv_studio) and by `rwkv pybench` (through the Rust API)
# on the same model and the same files, alternating, and the ratio python / rust of the
# median per-call time (target: within 5 %).
#
# Needs: the abi3 wheel in .whl/ (build: `maturin build --release -m python/Cargo.toml
# -o .whl`), the CLI in $BIN (`cargo build --release -p rwkv-cli`, copy
# target/release/rwkv), python3 with numpy. No network: the wheel is installed offline into
# a scratch folder. Usage: BIN=.gpu bash scripts/py-bench.sh [MODEL] [ROUNDS]
# (REPEAT timed calls per run, default 10; N_TEXTS texts, default 1000; PYTHON, default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.gpu}
MODEL=${1:-assets/models/rwkv7-demo-6x256-Q4_K_M.gguf}
ROUNDS=${2:-3}
REPEAT=${REPEAT:-10}
N_TEXTS=${N_TEXTS:-1000}
PY=${PYTHON:-python3}
work=$(mktemp -d /tmp/rwkv-py-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

whl=$(ls -t .whl/rwkv_studio-*.whl 2>/dev/null | head -1 || true)
[ -n "$whl" ] || { echo "no wheel in .whl/ (maturin build --release -m python/Cargo.toml -o .whl)" >&2; exit 1; }
[ -x "$BIN/rwkv" ] || { echo "no CLI at $BIN/rwkv" >&2; exit 1; }
"$PY" -m pip install -q --no-index --no-deps --target "$work/site" "$whl"
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"

# The same inputs for both: 1,000 short texts, a prompt of well over 512 tokens.
"$PY" - "$work" "$N_TEXTS" <<'PYEOF'
import sys
w, n = sys.argv[1], int(sys.argv[2])
words = "river stone lantern harbour quiet signal orchard copper winter meadow".split()
with open(f"{w}/texts.txt", "w") as f:
    for i in range(n):
        f.write(f"Note {i}: the {words[i % 10]} near the {words[(i * 7) % 10]} at {i % 24} o'clock.\n")
with open(f"{w}/prompt.txt", "w") as f:
    f.write(" ".join(f"{words[i % 10]} {i}" for i in range(600)))
PYEOF

args=(--model "$MODEL" --texts "$work/texts.txt" --prompt "$work/prompt.txt" --tokens 512 --repeat "$REPEAT")
for r in $(seq 1 "$ROUNDS"); do
  "$BIN/rwkv" pybench "${args[@]}" > "$work/rust.$r.json"
  "$PY" python/bench/bench.py "${args[@]}" > "$work/python.$r.json"
  echo "round $r done" >&2
done

"$PY" - "$work" "$ROUNDS" <<'PYEOF'
import json, sys
w, rounds = sys.argv[1], int(sys.argv[2])
runs = {s: [json.load(open(f"{w}/{s}.{r}.json")) for r in range(1, rounds + 1)] for s in ("rust", "python")}
out = {"model": runs["rust"][0]["model"], "adapter": runs["rust"][0]["adapter"],
       "texts": runs["rust"][0]["texts"], "tokens": runs["rust"][0]["tokens"]}
ok = True
for k in ("embed_ms", "logits_ms"):
    # Best median over the rounds on each side: the least disturbed measurement.
    rust = min(r[k]["median"] for r in runs["rust"])
    py = min(r[k]["median"] for r in runs["python"])
    ratio = py / rust
    ok &= ratio <= 1.05
    out[k] = {"rust": round(rust, 3), "python": round(py, 3), "ratio": round(ratio, 4),
              "rust_medians": [r[k]["median"] for r in runs["rust"]],
              "python_medians": [r[k]["median"] for r in runs["python"]]}
out["within_5_percent"] = ok
print(json.dumps(out, indent=1))
PYEOF
