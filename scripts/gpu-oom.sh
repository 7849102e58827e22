#!/usr/bin/env bash
# A real out-of-memory from an NVIDIA driver (docs/reliability.md, part 3): a second
# process holds most of the GPU's memory while `rwkv` loads a model that no longer fits.
# Expected: `rwkv` exits with status 1 and "model does not fit the device: … ran out of
# memory allocating …" — no panic, no crash, no hang. A load that succeeds anyway means
# the driver (or wgpu's allocator) placed the weights in system memory instead: the
# script says so. Run from the repo root on the GPU machine, with binaries built elsewhere:
#
#   cargo build --release --locked -p rwkv-cli && \
#   cargo build --release --locked -p rwkv-engine --example gpu_hold && \
#   mkdir -p .gpu && cp "$CARGO_TARGET_DIR"/release/rwkv "$CARGO_TARGET_DIR"/release/examples/gpu_hold .gpu/
#   BIN=.gpu bash scripts/gpu-oom.sh            (on the device: carry .gpu and .gl)
#
# FREE_MIB (default 2048): GPU memory left free beside the holder; the model needs more.
set -uo pipefail
BIN=${BIN:-.gpu}
OUT=${OUT:-./out}
FREE_MIB=${FREE_MIB:-2048}
mkdir -p "$OUT"
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "GPU memory: ${total} MiB, ${used} MiB in use before"

# 24 × 2048, F16: ≈ 3 GiB of weights, more than FREE_MIB.
model=/tmp/rwkv-oom-24x2048.gguf
[ -f "$model" ] || "$BIN/rwkv" synth --layers 24 --embd 2048 --type F16 --out "$model" || exit 1

hold=$(( total - used - FREE_MIB ))
fifo=$(mktemp -u); mkfifo "$fifo"
"$BIN/gpu_hold" "$hold" <"$fifo" >"$OUT/hold.log" 2>&1 &
holder=$!
exec 3>"$fifo"   # the holder keeps its memory until this closes
for _ in $(seq 1 120); do grep -q holding "$OUT/hold.log" && break; sleep 1; done
cat "$OUT/hold.log"
nvidia-smi --query-gpu=memory.used --format=csv,noheader

echo "== rwkv generate with ${FREE_MIB} MiB free"
timeout 600 "$BIN/rwkv" generate --model "$model" --prompt "The sea" -n 4 --temp 0 \
  >"$OUT/oom.out" 2>"$OUT/oom.err"
rc=$?
cat "$OUT/oom.err"
echo "exit status: $rc"
exec 3>&-
wait "$holder"
rm -f "$fifo"

if [ "$rc" = 1 ] && grep -q "ran out of memory allocating" "$OUT/oom.err" && ! grep -q panicked "$OUT/oom.err"; then
  echo "RESULT: driver out-of-memory reported as an error (status 1), as on lavapipe"
elif [ "$rc" = 0 ]; then
  echo "RESULT: the load succeeded with ${FREE_MIB} MiB free: the weights went to system memory (no out-of-memory raised)"
else
  echo "RESULT: UNEXPECTED (status $rc): see above"
  exit 1
fi
