#!/usr/bin/env bash
# Our server beside llama.cpp's on the SAME 2.9B Q4_K_M GGUF, on a GPU machine, driven by
# the same load generator (scripts/serve_bench.py): aggregate decode and TTFT at 1, 8, 32
# and 128 concurrent streams, turn-10 TTFT of a 10-turn chat (alone, 32 conversations
# interleaved on 4 slots, after an edit), and llama-batched-bench. Resumable: run it again
# (while the machine is warm) until it prints ALL DONE. REPEAT=N adds N rounds at each of
# REPEAT_STREAMS (default 8,128) concurrent streams, ours then llama-server's, each server
# fresh. From the repo root:
#
#   BIN=.gpu bash scripts/gpu-server.sh
#
# BIN holds rwkv (release CLI), COMMIT, llama-cpp-bench/ (copy of ../shared/anchor/...).
# Results: $OUT/server/*.jsonl and logs, as $OUT/server.tgz.
set -uo pipefail
BIN=${BIN:-.gpu}
OUT=${OUT:-./out}
DEADLINE=${DEADLINE:-570}
REPEAT_STREAMS=${REPEAT_STREAMS:-8,128}
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
mkdir -p "$OUT"
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
LCB=$(cd "$BIN/llama-cpp-bench" && pwd)
# make_rwkv7_gguf.py imports gguf-py from the llama.cpp source beside it.
[ -d "$LCB/llama.cpp" ] || tar -C "$LCB" -xJf "$LCB/llama.cpp.tar.xz"
export LC_W=/tmp/lc
R=$LC_W/results/server
mkdir -p "$R"
finish() { tar -C "$LC_W/results" -czf "$OUT/server.tgz" server 2>/dev/null; }
trap finish EXIT
Q=$LC_W/models/rwkv7-2.9b-Q4_K_M.gguf
S=$(cd "$(dirname "$0")" && pwd)/serve_bench.py

# 1. llama.cpp with its server and batched bench; the 2.9B F16 model, quantized (no llama-bench).
mkdir -p $LC_W && touch $LC_W/bench-2.9b-F16.done $LC_W/bench-2.9b-Q4_K_M.done
if [ ! -f $LC_W/quant-2.9b.done ]; then
  stamp "llama.cpp build + model"
  LC_TARGETS="llama-quantize llama-server llama-batched-bench llama-bench" OUT=$LC_W/out \
    bash "$LCB/driver.sh" $(( $(left) - 10 )) "2.9b" > "$R/driver.log" 2>&1
  tail -3 "$R/driver.log"
  [ -f $LC_W/quant-2.9b.done ] || { stamp "RUN AGAIN (build or quantize unfinished)"; exit 3; }
fi
LB=$LC_W/build/bin

wait_up() { # url
  for _ in $(seq 1 240); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}
# stage NAME CMD...: runs once (marker), output to $R/NAME.jsonl
stage() {
  local name=$1; shift
  [ -f "$R/$name.done" ] && return 0
  [ "$(left)" -lt 60 ] && { stamp "RUN AGAIN (no time for $name)"; exit 3; }
  stamp "$name"
  "$@" > "$R/$name.jsonl" 2> "$R/$name.err" && touch "$R/$name.done"
  cat "$R/$name.jsonl"
}
ours() { # parallel, then serve_bench args
  local par=$1; shift
  "$BIN/rwkv" serve -m "$Q" --port 18080 --parallel "$par" --max-queue 4096 --prefill-chunk 1024 \
    > "$R/ours-serve-$par.log" 2>&1 &
  local pid=$!
  wait_up http://127.0.0.1:18080 || { echo "ours did not start" >&2; kill $pid; return 1; }
  python3 "$S" "$@" --url http://127.0.0.1:18080; local rc=$?
  kill -INT $pid; wait $pid
  return $rc
}
theirs() { # parallel, ctx, then serve_bench args
  local par=$1 ctx=$2; shift 2
  "$LB/llama-server" -m "$Q" -ngl 99 --parallel "$par" -c "$ctx" -b 2048 -ub 512 \
    --host 127.0.0.1 --port 18081 > "$R/llama-server-$par.log" 2>&1 &
  local pid=$!
  wait_up http://127.0.0.1:18081 || { echo "llama-server did not start" >&2; tail -20 "$R/llama-server-$par.log" >&2; kill $pid; return 1; }
  python3 "$S" "$@" --url http://127.0.0.1:18081; local rc=$?
  kill $pid; wait $pid
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"
cat "$BIN/COMMIT" > "$R/commit.txt" 2>/dev/null
stage ours-batch "$BIN/rwkv" batch -m "$Q" --batch 1,8,16,32,64,96 --chunk 1152
stage ours-streams ours 128 streams --streams 1,8,32,128
stage llama-streams theirs 128 65536 streams --streams 1,8,32,128
stage ours-turns ours 4 turns
stage llama-turns theirs 4 65536 turns
stage llama-batched-bench "$LB/llama-batched-bench" -m "$Q" -ngl 99 -c 65536 -b 2048 -ub 512 \
  -npp 128 -ntg 128 -npl 1,8,32,128
# REPEAT=N: N more rounds at each of REPEAT_STREAMS, ours then llama-server's, each on a
# fresh server (where two figures are close, the spread between runs decides).
repeat_rounds() {
  for i in $(seq 1 "$1"); do
    for n in ${REPEAT_STREAMS//,/ }; do
      ours 128 streams --streams "$n" | sed "s/^/ours round $i: /"
      theirs 128 65536 streams --streams "$n" | sed "s/^/llama round $i: /"
    done
  done
}
[ "${REPEAT:-0}" -gt 0 ] && stage repeat-rounds repeat_rounds "$REPEAT"
stamp "ALL DONE"
