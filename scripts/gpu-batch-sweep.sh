#!/usr/bin/env bash
# Same-machine sweep of engine knobs on batched decode steps (a server's steps of B
# sequences): for each setting, `rwkv batch` (serving tuning, logits read back) over the
# sizes, settings alternating twice, then a profile of a step at each of PROFILE's sizes
# under each setting. The model: `rwkv synth` 2.9B Q4_K with the low-rank shapes of the
# 2.9B release. BIN holds the stripped release `rwkv` and COMMIT.
# Usage on the device: BIN=.gpu SIZES=8,16,32,64,128 PROFILE=32 \
#   bash scripts/gpu-batch-sweep.sh "RWKV_COOP_TILE=128x128" "RWKV_COOP_TILE=32x128" ...
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SIZES=${SIZES:-8,16,32,64,128}; PROFILE=${PROFILE:-32}; ROUNDS=${ROUNDS:-2}
[ $# -ge 1 ] || { echo "usage: gpu-batch-sweep.sh SETTING [SETTING ...]"; exit 2; }
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
C=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown); echo "commit $C, sizes $SIZES"
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K-lora.gguf
[ -f "$f" ] || "$BIN/rwkv" synth --layers 32 --embd 2560 --lora 96,96,64,320 --type Q4_K --out "$f" --seed 1 > /dev/null
for rep in $(seq 1 "$ROUNDS"); do
  for s in "$@"; do
    echo "== batch $s (run $rep)"
    timeout 150 env $s "$BIN/rwkv" batch -m "$f" --batch "$SIZES" --steps 20 --chunk 1152 2>&1 | grep 'logits read back'
  done
done
for s in "$@"; do
  echo "== profile $s"
  timeout 150 env $s "$BIN/rwkv" batch -m "$f" --batch "$PROFILE" --steps 3 --chunk 1152 --profile 2>&1 \
    | grep -v 'tok/s' | grep -v '^CPU' | awk '/^profile/ {n=0} {n++; if (n <= 16) print}'
done
