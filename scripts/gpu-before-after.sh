#!/usr/bin/env bash
# Before / after a change, on the GPU machine, on the same files in one command: `rwkv
# bench` of two builds — $BIN/rwkv-before (the commit before the change) and $BIN/rwkv —
# alternating, ROUNDS rounds per file, so drift of the machine hits both alike. Prints
# prefill 512 and decode tok/s of every run and the quality verdict with its greedy hash
# (a behaviour-preserving change keeps the hash), then the medians side by side; JSON of
# every run in $R/ab/ (gpu-peers.sh packs it into results.tgz).
#
#   BIN=.gpu bash scripts/gpu-before-after.sh FILE.gguf...
#
# gpu-peers.sh runs it on the files it benchmarked against llama.cpp when
# $BIN/rwkv-before exists. BIN holds COMMIT and COMMIT_BEFORE (optional).
set -uo pipefail
BIN=${BIN:-.gpu}
R=${R:-/tmp/lc/results}
ROUNDS=${ROUNDS:-2}
mkdir -p "$R/ab"
A=$(cat "$BIN/COMMIT_BEFORE" 2>/dev/null || echo before)
B=$(cat "$BIN/COMMIT" 2>/dev/null || echo after)
for f in "$@"; do
  tag=$(basename "$f" .gguf)
  for i in $(seq 1 "$ROUNDS"); do
    for side in before after; do
      exe=$BIN/rwkv; commit=$B
      [ "$side" = before ] && { exe=$BIN/rwkv-before; commit=$A; }
      json=$R/ab/$tag-$side-$i.json
      [ -f "$json" ] && continue # resumable on a warm machine
      timeout 240 "$exe" bench --model "$f" --title "$tag $side" --commit "$commit" \
        --chunk 512 --prefill 512 --gen 128 --repeat 10 --load-repeat 1 --json "$json" \
        > /dev/null 2>&1 || echo "$tag $side round $i: bench failed"
    done
  done
done
python3 - "$R/ab" "$A" "$B" <<'PY'
import glob, json, os, statistics, sys
d, a, b = sys.argv[1:]
runs = {}
for p in sorted(glob.glob(os.path.join(d, "*.json"))):
    tag, side, _ = os.path.basename(p)[:-5].rsplit("-", 2)
    r = json.load(open(p))
    q = r.get("quality") or {}
    runs.setdefault(tag, {}).setdefault(side, []).append(
        (r["prefill_tok_s"].get("512", 0), r["decode_tok_s"], q.get("pass"), q.get("greedy_hash")))
print(f"{'file':<22} {'side':<7} {'prefill 512 (runs)':<28} {'decode tok/s (runs)':<24} quality / greedy hash")
for tag, sides in runs.items():
    for side, label in (("before", a), ("after", b)):
        rs = sides.get(side, [])
        if not rs:
            continue
        pf = " / ".join(f"{x[0]:,.0f}" for x in rs)
        dc = " / ".join(f"{x[1]:.1f}" for x in rs)
        qs = sorted({f"{'PASS' if x[2] else 'FAIL'} {x[3]}" for x in rs})
        print(f"{tag:<22} {label:<7} {pf:<28} {dc:<24} {', '.join(qs)}")
    if "before" in sides and "after" in sides:
        m = lambda side, k: statistics.median(x[k] for x in sides[side])
        print(f"{tag:<22} ratio   prefill {m('after', 0) / m('before', 0):.3f}x, decode "
              f"{m('after', 1) / m('before', 1):.3f}x; hashes "
              f"{'equal' if {x[3] for x in sides['before']} == {x[3] for x in sides['after']} else 'DIFFER'}")
PY
