#!/usr/bin/env bash
# Where a server step's time goes, on the GPU machine without llama.cpp: `rwkv batch` (the engine alone)
# at B = 8, 32 and 128 on a synthetic 2.9B Q4_K_M-like file, with a burst of B 40-token prompts beside
# one prompt of their tokens, then `rwkv serve` driven by scripts/serve_bench.py at 8, 32 and 128
# streams with the sums of /metrics (step, forward, sampling, cache, busy, queue, TTFT, spills,
# batch size) before and after each. BIN holds the release `rwkv`. Usage: BIN=.gpu bash scripts/gpu-server-probe.sh
xz -dkf .gpu/rwkv.xz && chmod +x .gpu/rwkv; export BIN=.gpu; source scripts/gpu-env.sh >/dev/null 2>&1; export WGPU_BACKEND=vulkan
M=/tmp/m; mkdir -p $M; f=$M/2.9b-Q4_K.gguf
[ -f $f ] || .gpu/rwkv synth --layers 32 --embd 2560 --type Q4_K --out $f --seed 1 >/dev/null
.gpu/rwkv batch -m $f --batch 8,32,128 --chunk 1152 --steps 30 --prompt 40 2>&1 | grep -E 'read back|prompts of'
.gpu/rwkv serve -m $f --port 18080 --parallel 128 --max-queue 4096 --prefill-chunk 1024 > /tmp/serve.log 2>&1 &
pid=$!
for i in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.5; done
for n in 8 32 128; do
  curl -s http://127.0.0.1:18080/metrics | grep -E '(step|forward|sample)_seconds_sum|(cache|busy)_seconds_total|(queue|ttft)_seconds_(sum|count)|cache_spills |batch_size_(sum|count)' | sed "s/^/before $n: /"
  python3 scripts/serve_bench.py streams --url http://127.0.0.1:18080 --streams $n
  curl -s http://127.0.0.1:18080/metrics | grep -E '(step|forward|sample)_seconds_sum|(cache|busy)_seconds_total|(queue|ttft)_seconds_(sum|count)|cache_spills |batch_size_(sum|count)' | sed "s/^/after $n: /"
done
kill -INT $pid; wait $pid
