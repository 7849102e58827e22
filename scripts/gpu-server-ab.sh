#!/usr/bin/env bash
# Same-machine A/B of engine knobs on the server (no llama.cpp): a synthetic 2.9B Q4_K_M-like
# file, `rwkv batch` (the engine alone) under each setting, then `rwkv serve` under each
# setting in turn, twice, driven by scripts/serve_bench.py at STREAMS concurrent streams
# (aggregate decode tok/s, TTFT) with the step / forward / sampling sums of /metrics.
# BIN holds the release `rwkv`.
# Usage on the device: BIN=.gpu STREAMS=8,32,128 bash scripts/gpu-server-ab.sh "A=..." "B=..."
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STREAMS=${STREAMS:-8,32,128}; ROUNDS=${ROUNDS:-2}
[ $# -ge 1 ] || { echo "usage: gpu-server-ab.sh SETTING [SETTING ...]"; exit 2; }
source scripts/gpu-env.sh >/dev/null 2>&1; export WGPU_BACKEND=vulkan
echo "commit $(cat "$BIN/COMMIT" 2>/dev/null | tr '\n' ' ')"
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K.gguf
[ -f $f ] || "$BIN/rwkv" synth --layers 32 --embd 2560 --type Q4_K --out $f --seed 1 >/dev/null
for s in "$@"; do
  echo "== batch $s"
  timeout 150 env $s "$BIN/rwkv" batch -m $f --batch 8,32,128 --chunk 1152 --steps 20 2>&1 | grep 'read back'
done
for rep in $(seq 1 "$ROUNDS"); do
  for s in "$@"; do
    echo "== serve $s (run $rep)"
    env $s "$BIN/rwkv" serve -m $f --port 18080 --parallel 128 --max-queue 4096 --prefill-chunk 1024 > /tmp/serve.log 2>&1 &
    pid=$!
    for i in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.5; done
    timeout 200 python3 scripts/serve_bench.py streams --url http://127.0.0.1:18080 --streams "$STREAMS"
    curl -s http://127.0.0.1:18080/metrics | grep -E '^rwkv_((step|forward|sample)_seconds_(sum|count)|(cache|busy)_seconds_total|cache_spills )'
    kill -INT $pid; wait $pid
  done
done
