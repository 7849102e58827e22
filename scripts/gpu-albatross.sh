#!/usr/bin/env bash
# BlinkDL's Albatross beside us on the same weights, on the GPU machine: one random 2.9B
# model (`rwkv synth`, seed 1) as F16 SafeTensors with BlinkDL's names, which Albatross
# loads as its .pth (scripts/reference/albatross_bench.py) and we load as it is; decode at
# batch 1, prefill 512, batched decode at B = 32 and 128 for both; then our Q4_K GGUF of
# the same seed (`rwkv batch`, the server's quantization) with the fused decode WKV staged,
# per-row and off for steps of more than 8 sequences (RWKV_WKV_STAGED, RWKV_WKV_FUSED_LEN;
# with profiles).
#
#   BIN=.gpu bash scripts/gpu-albatross.sh
#
# BIN holds rwkv.xz (release CLI), COMMIT and albatross/ (BlinkDL/Albatross's reference/
# and LICENSE, its commit in albatross/COMMIT). Output: $OUT/albatross.txt, $OUT/*.json.
set -uo pipefail
BIN=${BIN:-.gpu}
OUT=${OUT:-./out}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
xz -dkf "$BIN/rwkv.xz" && chmod +x "$BIN/rwkv"
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh" >/dev/null 2>&1
export WGPU_BACKEND=vulkan
"$BIN/rwkv" adapters | head -3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
M=/tmp/m; mkdir -p $M
F16=$M/rwkv7-2.9b-synth-s1.safetensors; Q4=$M/rwkv7-2.9b-synth-s1-Q4_K.gguf
stamp "synth"
"$BIN/rwkv" synth --layers 32 --embd 2560 --out $F16 --seed 1 >/dev/null
"$BIN/rwkv" synth --layers 32 --embd 2560 --type Q4_K --out $Q4 --seed 1 >/dev/null
sha256sum $F16 | cut -c1-16
# Albatross's CUDA extension builds (CPU) while our runs time the GPU.
(cd "$BIN/albatross" && python3 -c "import reference.rwkv7" > /tmp/albatross-build.log 2>&1) &
build=$!

stamp "ours, F16 SafeTensors: batch 1 / 32 / 128"
"$BIN/rwkv" batch -m $F16 --batch 1,32,128 --chunk 1152 --steps 40 2>&1 | grep -E 'read back'
stamp "ours, F16 SafeTensors: prefill 512, decode"
"$BIN/rwkv" bench -m $F16 --prefill 512 --gen 128 --repeat 10 --no-quality --load-repeat 1 \
  --fields 2 --json "$OUT/ours-f16-bench.json" 2>&1 | grep -iE 'prefill|decode' | head -8
stamp "ours, Q4_K GGUF: the fused decode WKV staged / per-row / off, batch 1 / 32 / 128 (and profiles)"
for round in 1 2; do
  for k in "8 1" "8 0" "0 1"; do
    set -- $k
    RWKV_WKV_FUSED_LEN=$1 RWKV_WKV_STAGED=$2 "$BIN/rwkv" batch -m $Q4 --batch 1,32,128 --chunk 1152 \
      --steps 30 2>&1 | grep -E 'greedy' | sed "s/^/FUSED_LEN=$1 STAGED=$2 /"
  done
done
for k in "8 1" "8 0" "0 1"; do
  set -- $k
  RWKV_WKV_FUSED_LEN=$1 RWKV_WKV_STAGED=$2 "$BIN/rwkv" batch -m $Q4 --batch 1,32,128 --chunk 1152 \
    --steps 5 --profile 2>&1 | grep -E 'wkv|matmul_reduce|ln_shift|GPU profile' \
    | sed "s/^/profile FUSED_LEN=$1 STAGED=$2 /" | head -30
done

wait $build; tail -2 /tmp/albatross-build.log
stamp "Albatross, the same F16 weights"
PYTHONUNBUFFERED=1 python3 scripts/reference/albatross_bench.py --albatross "$BIN/albatross" \
  --model $F16 --json "$OUT/albatross.json" 2>&1 | tail -40
stamp "done"
