#!/usr/bin/env bash
# A quick look at batched decode steps after a kernel change, on the GPU machine: a 2.9B
# Q4_K model (`rwkv synth`, seed 1, the 2.9B release's low-rank shapes), `rwkv batch --check`
# (each batched step's logits against each sequence alone), `rwkv batch` steps of 1, 8, 32
# and 128 twice, profiles of steps of 1, 8 and 128 sequences, then `rwkv serve` at 8, 32 and
# 128 streams twice (scripts/serve_bench.py). BIN holds rwkv.xz and COMMIT.
#   BIN=.gpu bash scripts/gpu-step-check.sh
set -uo pipefail
BIN=${BIN:-.gpu}; OUT=${OUT:-./out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
xz -dkf "$BIN/rwkv.xz" && chmod +x "$BIN/rwkv"
source "$(dirname "$0")/gpu-env.sh" >/dev/null 2>&1; export WGPU_BACKEND=vulkan
echo "commit $(cat "$BIN/COMMIT" 2>/dev/null)"; "$BIN/rwkv" adapters | head -1
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K-lora.gguf
"$BIN/rwkv" synth --layers 32 --embd 2560 --lora 96,96,64,320 --type Q4_K --out "$f" --seed 1 > /dev/null
stamp check
timeout 120 "$BIN/rwkv" batch --check -m "$f" --batch 2,5,8,9,33 --chunk 1152 2>&1 | grep '^B ='
for rep in 1 2; do
  stamp "batch (run $rep)"
  timeout 120 "$BIN/rwkv" batch -m "$f" --batch 1,8,32,128 --steps 30 --chunk 1152 2>&1 | grep 'read back'
done
stamp "profiles of steps of 1, 8 and 128"
timeout 150 "$BIN/rwkv" batch -m "$f" --batch 1,8,128 --steps 3 --chunk 1152 --profile 2>&1 \
  | grep -E 'GPU profile|ln_shift|wkv_fused|matmul_reduce|att\.|ffn\.|head'
for rep in 1 2; do
  stamp "serve (run $rep)"
  "$BIN/rwkv" serve -m $f --port 18080 --parallel 128 --max-queue 4096 --prefill-chunk 1024 > /tmp/serve.log 2>&1 &
  pid=$!
  for i in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.5; done
  timeout 200 python3 scripts/serve_bench.py streams --url http://127.0.0.1:18080 --streams 8,32,128 \
    || tail -20 /tmp/serve.log
  kill -INT $pid; wait $pid
done
stamp done
