#!/usr/bin/env bash
# llama.cpp (CUDA) and RWKV Studio on the SAME GGUF files, in one command on a GPU machine:
# builds llama.cpp from ../shared/anchor/llama-cpp-bench (its driver.sh: CUDA build in the
# background, random RWKV-7 F16 GGUFs written meanwhile, llama-quantize Q4_K_M,
# llama-bench -p 512 -n 128 -r 20), then runs `rwkv bench` on each of those files with
# llama.cpp's medians as its peer, and prints the ratios. Run from the repo root:
#
#   BIN=.gpu bash scripts/gpu-peers.sh "2.9b 0.1b"
#
# ALBATROSS=1 adds BlinkDL's Albatross on the same F16 files (BIN/albatross: its reference/).
#
# BIN must hold: rwkv (this repo's CLI, release build), COMMIT (optional), rwkv-before and
# COMMIT_BEFORE (optional: a before / after run on the same files, gpu-before-after.sh) and
# llama-cpp-bench/ (a copy of ../shared/anchor/llama-cpp-bench); .gl/*.deb hold the
# Vulkan/GL loaders (see the device README). While llama.cpp builds, the kernel
# microbenchmark runs (`rwkv kernels`). Results in $OUT: rwkv-<file>.json (with
# peer["llama.cpp"]), runs/ (benchmarks/runs JSON), kernels.json, llama.cpp's summary.md.
set -uo pipefail
BIN=${BIN:-.gpu}
OUT=${OUT:-./out}
SHAPES=${1:-"2.9b 0.1b"}
DEADLINE=${DEADLINE:-560}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
COMMIT=$(cat "$BIN/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
LCB=$(cd "$BIN/llama-cpp-bench" && pwd)
# make_rwkv7_gguf.py imports gguf-py from the llama.cpp source beside it.
[ -d "$LCB/llama.cpp" ] || tar -C "$LCB" -xJf "$LCB/llama.cpp.tar.xz"
export LC_W=/tmp/lc
# Results gather in R (kept while the machine stays warm; a later call resumes) and come
# back as one archive, $OUT/results.tgz (the device returns few files).
R=$LC_W/results
mkdir -p "$R/runs"

# 1. llama.cpp: configure + start the build in the background, generate the F16 models.
stamp "llama.cpp driver (build in background)"
OUT=$LC_W/out bash "$LCB/driver.sh" 30 "$SHAPES" > "$R/driver1.log" 2>&1
# 2. our kernel microbenchmark while it builds (the build uses the CPUs, not the GPU).
stamp "rwkv kernels"
[ -f "$R/kernels.json" ] || "$BIN/rwkv" kernels ${KERNEL_ARGS:-} --json "$R/kernels.json" 2>&1 | tee "$R/kernels.txt"
# 3. finish llama.cpp: wait for the build, quantize, llama-bench every file.
stamp "llama.cpp driver (quantize + llama-bench)"
OUT=$LC_W/out bash "$LCB/driver.sh" $(( DEADLINE - ($(date +%s) - T0) - 120 )) "$SHAPES" > "$R/driver2.log" 2>&1
tail -5 "$R/driver2.log"
cp "$LC_W/out/summary.md" "$R/llama-summary.md" 2>/dev/null

# llama.cpp's figures for one file as peer JSON: medians of llama-bench -r 20, load from its
# progress lines ("starting" -> "warmup prompt run"), the file's SHA-256 prefix.
peer_json() { # tag file sha
  python3 - "$LC_W/logs/bench_$1.json" "$LC_W/logs/bench_$1.err" "$3" <<'PY'
import json, re, statistics, sys
runs = json.load(open(sys.argv[1]))
out = {"prefill_tok_s": {}, "file_sha256": sys.argv[3], "program": "llama-bench (CUDA)"}
for r in runs:
    med = statistics.median(r["samples_ts"])
    if r["n_prompt"]:
        out["prefill_tok_s"][str(r["n_prompt"])] = med
    else:
        out["decode_tok_s"] = med
t = {}
for line in open(sys.argv[2]):
    m = re.match(r"\[\s*([\d.]+)s", line)
    if m and "starting" in line and "start" not in t:
        t["start"] = float(m.group(1))
    if m and "warmup" in line and "warm" not in t:
        t["warm"] = float(m.group(1))
if len(t) == 2:
    out["load_ms"] = 1000 * (t["warm"] - t["start"])
print(json.dumps({"llama.cpp": out}))
PY
}

summary=()
for s in $SHAPES; do
  for q in Q4_K_M F16; do
    tag=$s-$q
    f=$LC_W/models/rwkv7-$s-$q.gguf
    [ -f "$f" ] && [ -s "$LC_W/logs/bench_$tag.json" ] || { stamp "no llama.cpp result for $tag"; continue; }
    summary+=("$tag")
    # Resumable: a later call on the same (warm) machine skips what is done.
    [ -f "$R/rwkv-$tag.json" ] && continue
    if [ $(( DEADLINE - ($(date +%s) - T0) )) -lt 70 ]; then stamp "no time left for $tag: RUN AGAIN"; continue; fi
    sha=$(sha256sum "$f" | cut -c1-16)
    peer_json "$tag" "$f" "$sha" > "$R/peer-$tag.json" || continue
    stamp "rwkv bench $tag ($sha)"
    timeout 300 "$BIN/rwkv" bench --model "$f" --title "same file as llama.cpp: $tag" \
      --change "${CHANGE:-}" --chunk 512 --prefill 212,512 --gen 128 --repeat 10 --load-repeat 2 \
      --first-run --file-sha256 "$sha" --peer "$R/peer-$tag.json" --commit "$COMMIT" \
      --json "$R/rwkv-$tag.json" --runs-dir "$R/runs" 2>&1 | grep -v "^\["
  done
done

# BlinkDL's Albatross on the same F16 files (ALBATROSS=1; BIN/albatross holds its reference/):
# each F16 GGUF converted to BlinkDL's SafeTensors (`rwkv merge` with no adapter), which
# Albatross loads as its .pth (scripts/reference/albatross_bench.py: decode at batch 1,
# prefill 512, batched decode at B = 32 and 128), and our batched decode on the GGUF itself.
if [ "${ALBATROSS:-0}" = 1 ] && [ -d "$BIN/albatross/reference" ]; then
  for s in $SHAPES; do
    f=$LC_W/models/rwkv7-$s-F16.gguf
    [ -f "$f" ] && [ ! -f "$R/albatross-$s.json" ] || continue
    if [ $(( DEADLINE - ($(date +%s) - T0) )) -lt 90 ]; then stamp "no time left for Albatross $s: RUN AGAIN"; continue; fi
    stamp "Albatross and rwkv batch on $s F16"
    "$BIN/rwkv" merge --base "$f" --out /tmp/albatross-$s.safetensors > /dev/null
    "$BIN/rwkv" batch -m "$f" --batch 1,32,128 --chunk 1152 --steps 40 2>&1 | grep greedy \
      | tee "$R/rwkv-batch-$s-F16.txt"
    PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/reference/albatross_bench.py" --albatross "$BIN/albatross" \
      --model /tmp/albatross-$s.safetensors --json "$R/albatross-$s.json" > "$R/albatross-$s.log" 2>&1 \
      || tail -5 "$R/albatross-$s.log"
    rm -f /tmp/albatross-$s.safetensors
  done
fi

# Before / after a change on the same files (scripts/gpu-before-after.sh), when BIN has the
# build from before it.
if [ -x "$BIN/rwkv-before" ]; then
  stamp "before / after on the same files"
  files=(); for t in "${summary[@]}"; do files+=("$LC_W/models/rwkv7-$t.gguf"); done
  BIN=$BIN R=$R bash "$(dirname "$0")/gpu-before-after.sh" "${files[@]}"
fi

stamp "summary (RWKV Studio / llama.cpp, same file)"
python3 - "$R" "${summary[@]}" <<'PY'
import json, sys, os
out = sys.argv[1]
print(f"{'file':<14} {'metric':<14} {'ours':>10} {'llama.cpp':>10} {'ratio':>7}")
for s in sys.argv[2:]:
    try: r = json.load(open(os.path.join(out, f"rwkv-{s}.json")))
    except Exception: continue
    p = r.get("peer", {}).get("llama.cpp", {})
    rows = [("load ms", r["load_ms"], p.get("load_ms"), True),
            ("prefill 512", r["prefill_tok_s"].get("512"), p.get("prefill_tok_s", {}).get("512"), False),
            ("decode tok/s", r["decode_tok_s"], p.get("decode_tok_s"), False)]
    for name, ours, theirs, lower in rows:
        ratio = "" if not (ours and theirs) else f"{(theirs/ours if lower else ours/theirs):.2f}x"
        print(f"{s:<14} {name:<14} {ours or 0:>10.1f} {theirs or 0:>10.1f} {ratio:>7}")
    q = r.get("quality") or {}
    ready = (r.get("figures", {}).get("gpu_mem_ready_mib") or {}).get("median", 0)
    print(f"{s:<14} first-run load {r.get('load_first_run_ms') or 0:>10.1f} ms; GPU {ready:.0f} MiB ready, "
          f"{r.get('gpu_mem_mib', 0):.0f} after the run, for a {r['model']['file_bytes'] / 2**20:.0f} MiB file; "
          f"quality {'PASS' if q.get('pass') else 'FAIL'}")
    # Albatross on the same F16 weights (ALBATROSS=1): its median beside ours.
    shape = s.rsplit("-", 1)[0]
    if not s.endswith("F16") or not os.path.exists(os.path.join(out, f"albatross-{shape}.json")):
        continue
    a = json.load(open(os.path.join(out, f"albatross-{shape}.json")))
    ours_b = {}
    for line in open(os.path.join(out, f"rwkv-batch-{shape}-F16.txt")):
        f = line.split()
        ours_b[f[2].rstrip(":")] = float(f[7])
    rows = [("decode tok/s", r["decode_tok_s"], a["decode"]),
            ("prefill 512", r["prefill_tok_s"].get("512"), a["prefill_512"])]
    rows += [(f"batch {b}", ours_b.get(b), a["batch"].get(b)) for b in ("32", "128")]
    for name, ours, theirs in rows:
        if ours and theirs:
            print(f"{s:<14} {name:<14} {ours:>10.1f} {theirs['median_tok_s']:>10.1f} "
                  f"{ours / theirs['median_tok_s']:>6.2f}x  (Albatross median; p10 {theirs['p10_tok_s']:.1f})")
PY

tar -C "$R" -czf "$OUT/results.tgz" .
cp "$R/kernels.txt" "$OUT/" 2>/dev/null
