#!/usr/bin/env bash
# Same-machine A/B of an engine knob on the GPU machine: `rwkv bench` on seeded synthetic
# models (`rwkv synth`: 2.9B and 0.1B shapes, Q4_K and F16) with and without the
# environment assignment in $AB (e.g. AB="RWKV_WKV=seq"), alternating twice, and a prefill
# profile of each model without it. BIN holds the stripped release `rwkv` and COMMIT.
# Usage on the device: AB="RWKV_WKV=seq" BIN=.gpu bash scripts/gpu-ab.sh "2.9b:Q4_K 0.1b:F16"
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
AB=${AB:?AB must hold an environment assignment, e.g. RWKV_WKV=seq}
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
C=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown); echo "commit $C, B = $AB"
M=/tmp/m; mkdir -p $M
for spec in ${1:-"2.9b:Q4_K 0.1b:F16"}; do
  shape=${spec%%:*}; type=${spec##*:}
  case $shape in 2.9b) dims="--layers 32 --embd 2560";; 0.1b) dims="--layers 12 --embd 768";; *) echo "shape $shape?"; exit 2;; esac
  f=$M/$shape-$type.gguf
  [ -f "$f" ] || "$BIN/rwkv" synth $dims --type "$type" --out "$f" --seed 1 > /dev/null
  B="--commit $C --model $f --chunk 512 --prefill 512 --gen 64 --repeat 3 --load-repeat 1"
  for i in 1 2; do
    timeout 120 "$BIN/rwkv" bench $B --title "$shape-$type A" --json "$OUT/$shape-$type-A$i.json" 2>&1 | grep -E "^(prefill|decode|quality)" | sed "s/^/A $shape-$type: /"
    timeout 120 env "$AB" "$BIN/rwkv" bench $B --title "$shape-$type B" --json "$OUT/$shape-$type-B$i.json" 2>&1 | grep -E "^(prefill|decode|quality)" | sed "s/^/B $shape-$type: /"
  done
  echo "== profile $shape-$type T=512 (A)"
  timeout 100 "$BIN/rwkv" profile --model "$f" --chunk 512 --tokens 512 2>&1 | sed -n '/^GPU profile/,/^$/p' | head -24
done
