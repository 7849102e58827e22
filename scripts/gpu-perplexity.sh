#!/usr/bin/env bash
# `rwkv perplexity` on the GPU machine: do the GPU's own kernels (tensor-core prefill
# tiles, subgroup one-token kernels, 8-bit x with the hardware's dot4I8Packed) lose
# anything? On the held-out text (benchmarks/perplexity/lincoln-1861-1862.txt):
#   - the demo Q4_K_M (assets/models): every chunk through the prefill path (its rows kept
#     as the base), then through the one-token path with 8-bit x (the default) and with
#     f32 x (RWKV_MV_Q8=0), each scored against that base;
#   - a seeded synthetic 2.9B Q4_K (`rwkv synth`, random weights: its perplexity means
#     nothing, the KL divergence between its paths does), 2 chunks the same way.
# BIN holds the stripped release `rwkv` and COMMIT. Usage on the device:
#   BIN=.gpu bash scripts/gpu-perplexity.sh
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
C=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown); echo "commit $C"
T=benchmarks/perplexity/lincoln-1861-1862.txt
W=/tmp/ppl; mkdir -p $W
run() { # name, environment assignment (or -), model, extra args…
  local name=$1 env=$2 model=$3; shift 3
  [ "$env" = - ] && env=RWKV_PPL_RUN=1
  echo "== $name"
  timeout 300 env "$env" "$BIN/rwkv" perplexity --model "$model" --json "$OUT/ppl-$name.json" "$@" 2>&1 \
    | grep -E "chunks of|PPL =|KLD|Same top|RMS"
}
demo=assets/models/rwkv7-demo-6x256-Q4_K_M.gguf
run demo-q4km-prefill - $demo --text $T --kl-divergence-base $W/demo.kld
run demo-q4km-decode-q8x - $demo --kl-divergence $W/demo.kld --decode
run demo-q4km-decode-f32x RWKV_MV_Q8=0 $demo --kl-divergence $W/demo.kld --decode
big=/tmp/m/2.9b-Q4_K.gguf; mkdir -p /tmp/m
[ -f $big ] || "$BIN/rwkv" synth --layers 32 --embd 2560 --type Q4_K --out $big --seed 1 > /dev/null
run 2.9b-q4k-prefill - $big --text $T --chunks 2 --kl-divergence-base $W/big.kld
run 2.9b-q4k-decode-q8x - $big --kl-divergence $W/big.kld --decode --chunks 2
run 2.9b-q4k-decode-f32x RWKV_MV_Q8=0 $big --kl-divergence $W/big.kld --decode --chunks 2
