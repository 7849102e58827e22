#!/usr/bin/env bash
# Same-machine A/B of an engine knob on batched decode steps (a server's steps of B
# sequences) on the GPU machine: `rwkv batch --check` under each setting, then `rwkv batch`
# (serving tuning, logits read back) alternating the settings twice, a profile of a step of
# 8 under each, and the Q4_K rows of `rwkv kernels` at T = 1 and 8 under each. The model:
# `rwkv synth` 2.9B Q4_K with the low-rank shapes of the 2.9B release. BIN holds the
# stripped release `rwkv` and COMMIT.
# Usage on the device: BIN=.gpu bash scripts/gpu-batch-ab.sh "RWKV_MV_Q8=0" "RWKV_MV_Q8=1" [sizes]
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
A=${1:?first setting, e.g. RWKV_MV_Q8=0}; B=${2:?second setting}; SIZES=${3:-1,2,4,8}
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
C=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown); echo "commit $C, A = $A, B = $B"
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K-lora.gguf
[ -f "$f" ] || "$BIN/rwkv" synth --layers 32 --embd 2560 --lora 96,96,64,320 --type Q4_K --out "$f" --seed 1 > /dev/null
for s in "$A" "$B"; do
  echo "== check $s"
  timeout 120 env $s "$BIN/rwkv" batch --check -m "$f" --batch 2,5,8,9 --chunk 1152 2>&1 | grep '^B ='
done
for rep in 1 2; do
  for s in "$A" "$B"; do
    echo "== batch $s (run $rep)"
    timeout 120 env $s "$BIN/rwkv" batch -m "$f" --batch "$SIZES" --steps 30 --chunk 1152 2>&1 | grep 'logits read back'
  done
done
for s in "$A" "$B"; do
  echo "== profile 8 tokens $s"
  timeout 100 env $s "$BIN/rwkv" profile -m "$f" --tokens 8 2>&1 | sed -n '/^GPU profile/,/^$/p' | head -16
done
for s in "$A" "$B"; do
  echo "== kernels $s"
  timeout 200 env $s "$BIN/rwkv" kernels --repeats 5 2>&1 | grep -E 'Q4_K .* (1|8) '
done
