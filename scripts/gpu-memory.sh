#!/usr/bin/env bash
# A long generation's memory on the GPU machine (issue 26): RSS after 2,000 and after 20,000
# generated tokens of a random 0.1B Q4_K model (12 × 768) in the CLI and in the Python
# package (scripts/gen_memory.py). BIN holds the `rwkv` CLI, the wheel (*.whl) and COMMIT.
# Usage on the device: BIN=.gpu bash scripts/gpu-memory.sh   (carry .gl and $BIN)
set -u
BIN=${BIN:-.gpu}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/gpu-env.sh >/dev/null; export WGPU_BACKEND=vulkan
echo "commit $(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)"
M=/tmp/m; mkdir -p $M
"$BIN/rwkv" synth --layers 12 --embd 768 --type Q4_K --out $M/m.gguf --seed 1 > /dev/null
N=${TOKENS:-20000}; E=${EARLY:-2000}
python3 scripts/gen_memory.py cli "$BIN/rwkv" $M/m.gguf $N $E | tee $OUT/memory-cli.json
python3 -m venv --system-site-packages /tmp/venv >/dev/null && /tmp/venv/bin/pip install -q --no-deps --no-index "$BIN"/*.whl
/tmp/venv/bin/python scripts/gen_memory.py python $M/m.gguf $N $E | tee $OUT/memory-python.json
