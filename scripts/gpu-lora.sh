#!/usr/bin/env bash
# Run-time LoRA cost on the GPU machine (issue 12): the 2.9B Q4_K_M synthetic model with and
# without a seeded rank-64 LoRA on every attention and channel-mix matrix (`rwkv synth-lora`),
# twice each, the adapter's load time, and a decode / prefill profile of both.
# BIN holds the stripped `rwkv` (release) and COMMIT; results as JSON in $OUT.
# Usage on the device: BIN=.gpu bash scripts/gpu-lora.sh   (carry .gl and $BIN)
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
C=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown); echo "commit $C"
M=/tmp/m; mkdir -p $M
"$BIN/rwkv" synth --layers 32 --embd 2560 --type Q4_K --out $M/q4.gguf --seed 1 > /dev/null
"$BIN/rwkv" synth-lora -m $M/q4.gguf --rank 64 --out $M/l64.safetensors --seed 1
B="--commit $C --model $M/q4.gguf --chunk 512 --prefill 512 --gen 64 --repeat 5 --load-repeat 1"
for i in 1 2; do
  timeout 150 "$BIN/rwkv" bench $B --title base --json $OUT/base$i.json 2>&1 | grep -E "^(prefill|decode|quality)"
  timeout 150 "$BIN/rwkv" bench $B --title lora64 --lora $M/l64.safetensors --json $OUT/lora$i.json 2>&1 | grep -E "^(prefill|decode|quality)"
done
for L in "" "--lora $M/l64.safetensors"; do for T in 512 1; do
  echo "== T=$T $L"; timeout 100 "$BIN/rwkv" profile --model $M/q4.gguf --chunk 512 $L --tokens $T 2>&1 | sed -n '/^GPU profile/,/^$/p' | head -16
done; done
python3 - <<'PY'
import json, os
o = os.environ.get("OUT", "/tmp/out")
b = [json.load(open(f"{o}/base{i}.json")) for i in (1, 2)]
l = [json.load(open(f"{o}/lora{i}.json")) for i in (1, 2)]
pb, pl = (max(x["prefill_tok_s"]["512"] for x in r) for r in (b, l))
db, dl = (max(x["decode_tok_s"] for x in r) for r in (b, l))
print(f"prefill512 base {pb:.0f} lora {pl:.0f} ratio {pl/pb:.3f}; decode base {db:.1f} lora {dl:.1f} ratio {dl/db:.3f}")
print("lora_load_ms", l[0]["figures"].get("lora_load_ms"), "GPU MiB", b[0]["gpu_mem_mib"], l[0]["gpu_mem_mib"])
PY
