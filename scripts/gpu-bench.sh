#!/usr/bin/env bash
# Benchmarks RWKV Studio's engine beside web-rwkv on a GPU machine, same shapes, same
# command. Run from the repo root on the GPU machine, with the binaries built elsewhere:
#
#   BIN=.gpu bash scripts/gpu-bench.sh "demo 0.1b 2.9b"
#
# BIN must hold: rwkv (this repo's CLI, release), anchor-bench (../shared/anchor/
# web-rwkv-bench built with `cargo build --release`), gen_model.py (from the same
# folder); .gl/*.deb hold the Vulkan/GL loaders (see the device README). Results: one
# line per figure on stdout, JSON per run in $OUT (default ./out), and a final table of
# ours / web-rwkv ratios.
set -uo pipefail
BIN=${BIN:-.gpu}
OUT=${OUT:-./out}
SHAPES=${1:-"demo 0.1b 2.9b"}
GEN=${GEN:-128}
REPEAT=${REPEAT:-3}
M=/tmp/models
mkdir -p "$OUT" "$M"
T0=$(date +%s)
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }

# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
COMMIT=$(cat "$BIN/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)

# web-rwkv's figures from its log, as JSON for `rwkv bench --peer`.
peer_json() {
  python3 - "$1" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
out = {"prefill_tok_s": {}}
m = re.search(r"load_ms\(parse\+build\+runtime\)=([\d.]+)", t)
if m: out["load_ms"] = float(m.group(1))
for m in re.finditer(r"PREFILL .*?chunk=(\d+) len=(\d+) .*?tok_s_mean=([\d.]+)", t):
    k = m.group(2)
    out["prefill_tok_s"][k] = max(out["prefill_tok_s"].get(k, 0), float(m.group(3)))
g = re.findall(r"GEN .*?tok_s_mean=([\d.]+)", t)
if g: out["decode_tok_s"] = max(float(x) for x in g)
print(json.dumps({"web-rwkv": out}))
PY
}

summary=()
for s in $SHAPES; do
  case $s in
    demo) f=assets/models/rwkv7-demo-6x256-Q4_K_M.gguf; L=6; E=256;;
    tiny) L=2; E=128;;
    0.1b) L=12; E=768;;
    1.5b) L=24; E=2048;;
    2.9b) L=32; E=2560;;
    2.9b-q4k) L=32; E=2560; f=$M/rwkv7-rand-2.9b-q4k.gguf;;
    0.1b-q4k) L=12; E=768; f=$M/rwkv7-rand-0.1b-q4k.gguf;;
    1.5b-q4k) L=24; E=2048; f=$M/rwkv7-rand-1.5b-q4k.gguf;;
    *) echo "unknown shape $s"; continue;;
  esac
  if [[ "$s" == *-q4k ]]; then
    # Our own synthetic Q4_K_M GGUF (llama.cpp layout); web-rwkv runs its 4-bit NF4
    # on the F16 SafeTensors of the same shape.
    [ -f "$f" ] || { stamp "synth $s"; "$BIN/rwkv" synth --layers $L --embd $E --type Q4_K --out "$f" --seed 1 >/dev/null; }
    st=$M/rwkv7-rand-${s%-q4k}.st
    [ -f "$st" ] || { stamp "generate ${s%-q4k}"; python3 "$BIN/gen_model.py" "$st" $L $E 65536 >/dev/null; }
    stamp "web-rwkv $s (nf4)"
    timeout 240 "$BIN/anchor-bench" "$st" --quant nf4 --chunks 512 --prefill 212,512 --gen $GEN \
      --repeat $REPEAT --warmup-gen 16 > "$OUT/web-rwkv-$s.log" 2>&1
    grep -E "LOAD|PREFILL|GEN" "$OUT/web-rwkv-$s.log"
    peer_json "$OUT/web-rwkv-$s.log" > "$OUT/peer-$s.json"
  elif [ "$s" != demo ]; then
    f=$M/rwkv7-rand-$s.st
    [ -f "$f" ] || { stamp "generate $s"; python3 "$BIN/gen_model.py" "$f" $L $E 65536 >/dev/null; }
  fi
  peer=""
  [ -f "$OUT/peer-$s.json" ] && peer="--peer $OUT/peer-$s.json"
  if [ "$s" != demo ] && [[ "$s" != *-q4k ]]; then
    stamp "web-rwkv $s"
    timeout 240 "$BIN/anchor-bench" "$f" --quant none --chunks 512 --prefill 212,512 --gen $GEN \
      --repeat $REPEAT --warmup-gen 16 > "$OUT/web-rwkv-$s.log" 2>&1
    grep -E "LOAD|PREFILL|GEN" "$OUT/web-rwkv-$s.log"
    peer_json "$OUT/web-rwkv-$s.log" > "$OUT/peer-$s.json"; peer="--peer $OUT/peer-$s.json"
  fi
  stamp "rwkv bench $s"
  timeout 300 "$BIN/rwkv" bench --model "$f" --title "gpu-bench $s" --change "${CHANGE:-baseline}" \
    --chunk 512 --prefill 212,512 --gen $GEN --repeat $REPEAT --load-repeat 2 $peer \
    --commit "$COMMIT" --json "$OUT/rwkv-$s.json" --runs-dir "$OUT/runs" ${QUALITY_FLAG:-} 2>&1 | grep -v "^\[" 
  summary+=("$s")
done

stamp "summary (ours / web-rwkv)"
python3 - "$OUT" "${summary[@]}" <<'PY'
import json, sys, os
out = sys.argv[1]
print(f"{'shape':<6} {'metric':<16} {'ours':>10} {'web-rwkv':>10} {'ratio':>7}")
for s in sys.argv[2:]:
    try: r = json.load(open(os.path.join(out, f"rwkv-{s}.json")))
    except Exception: continue
    p = r.get("peer", {}).get("web-rwkv", {})
    rows = [("load ms", r["load_ms"], p.get("load_ms"), True),
            ("prefill 212", r["prefill_tok_s"].get("212"), p.get("prefill_tok_s", {}).get("212"), False),
            ("prefill 512", r["prefill_tok_s"].get("512"), p.get("prefill_tok_s", {}).get("512"), False),
            ("decode tok/s", r["decode_tok_s"], p.get("decode_tok_s"), False)]
    for name, ours, theirs, lower in rows:
        ratio = "" if not (ours and theirs) else f"{(theirs/ours if lower else ours/theirs):.2f}x"
        print(f"{s:<6} {name:<16} {ours or 0:>10.1f} {theirs or 0:>10.1f} {ratio:>7}")
    q = r.get("quality") or {}
    print(f"{s:<6} quality          {'PASS' if q.get('pass') else ('FAIL' if q else 'n/a')} max|Δ| {q.get('max_abs', 0):.2e}")
PY
