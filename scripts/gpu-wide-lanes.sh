#!/usr/bin/env bash
# The 8-token Q4_K kernels with f32 x (a server's batched steps of 2–8 sequences) by lanes a
# row, on the GPU machine: the engine's op tests of those kernels (the release test binary
# `.gpu/ops-tests`, rows wider than a subgroup summed by shuffles then workgroup memory),
# `rwkv kernels` at T = 8 with every Q4_K product on the 8-token kernel (RWKV_MV_WIDE_ALL=1)
# for 32 / 64 / 128 / 256 lanes (RWKV_MV_WIDE_LANES), then `rwkv batch --check` and
# `rwkv batch` steps of 2–8 on a 2.9B Q4_K model (`rwkv synth`, the 2.9B release's
# low-rank shapes) under the settings in $SETTINGS, alternating, with a profile of a step
# of 8 under each. BIN holds rwkv.xz and COMMIT.
#   BIN=.gpu bash scripts/gpu-wide-lanes.sh
set -uo pipefail
BIN=${BIN:-.gpu}; OUT=${OUT:-./out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
xz -dkf "$BIN/rwkv.xz" && chmod +x "$BIN/rwkv"
source "$(dirname "$0")/gpu-env.sh" >/dev/null 2>&1; export WGPU_BACKEND=vulkan
echo "commit $(cat "$BIN/COMMIT" 2>/dev/null)"; "$BIN/rwkv" adapters | head -2
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K-lora.gguf
"$BIN/rwkv" synth --layers 32 --embd 2560 --lora 96,96,64,320 --type Q4_K --out "$f" --seed 1 > /dev/null &
synth=$!
if [ -f "$BIN/ops-tests.xz" ]; then
  stamp "op tests"
  xz -dkf "$BIN/ops-tests.xz" && chmod +x "$BIN/ops-tests"
  timeout 240 "$BIN/ops-tests" --test-threads 4 q4k matvec_group wkv_fused 2>&1 | grep -E '^test |test result' | tail -30
fi
for L in 32 64 128 256; do
  stamp "kernels, every Q4_K product on the 8-token kernel, $L lanes"
  timeout 120 env RWKV_MV_WIDE_ALL=1 RWKV_MV_WIDE_LANES=$L "$BIN/rwkv" kernels --dtypes Q4_K --repeats 7 2>&1 | grep -E '^matvec .* 8 '
done
wait $synth
SETTINGS=${SETTINGS:-"RWKV_MV_WIDE_LANES=32 RWKV_MV_WIDE_LANES=64 RWKV_MV_WIDE_LANES=128 RWKV_MV_WIDE_ALL=1,RWKV_MV_WIDE_LANES=128"}
for s in $SETTINGS; do
  stamp "check ${s//,/ }"
  timeout 120 env ${s//,/ } "$BIN/rwkv" batch --check -m "$f" --batch 2,5,8 --chunk 1152 2>&1 | grep '^B ='
done
for rep in 1 2; do
  for s in $SETTINGS; do
    stamp "batch ${s//,/ } (run $rep)"
    timeout 120 env ${s//,/ } "$BIN/rwkv" batch -m "$f" --batch 2,4,8 --steps 30 --chunk 1152 2>&1 | grep 'logits read back'
  done
done
for s in $SETTINGS; do
  stamp "profile 8 tokens ${s//,/ }"
  timeout 100 env ${s//,/ } "$BIN/rwkv" profile -m "$f" --tokens 8 2>&1 | sed -n '/^GPU profile/,/^$/p' | head -16
done
stamp done
