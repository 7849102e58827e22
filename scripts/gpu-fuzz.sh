#!/usr/bin/env bash
# A fuzz target's executions spread over the GPU machine's CPU cores (libFuzzer -jobs /
# -workers), for a target too slow for 1M executions on a 2-core machine (`constraint`
# compiles a grammar and walks its masks over a 65,536-token vocabulary: ≈ 45 a second
# there). Every job starts from the carried corpus (its loading counts as executions and
# is not cut by SECONDS: a large corpus needs the extra minutes of the outer timeout) and
# runs RUNS / jobs executions.
# Carry `.gpu`: `<target>-fuzz.xz` (`cargo fuzz build -O <target>` at the commit in
# .gpu/COMMIT, stripped, xz) and `<target>-corpus.tar.xz` (`tar -C fuzz/corpus -cJf …
# <target>`: the working corpus, a fraction of fuzz/corpus's size).
# usage on the device: bash scripts/gpu-fuzz.sh TARGET [RUNS] [SECONDS]
# $OUT gets <target>-fuzz.txt (each job's final stats and their sum), <target>-corpus.tar.xz
# (the corpus after the run: unpack it into fuzz/corpus/<target> and merge it into
# fuzz/corpus-min/<target> with `-merge=1`, as scripts/fuzz.sh does) and any crash input.
set -u
t=${1:?target}; runs=${2:-1000000}; secs=${3:-420}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
root=$(pwd); w=/tmp/fuzz-$t; mkdir -p "$w/corpus"
xz -dc ".gpu/$t-fuzz.xz" > "$w/fuzz-$t" && chmod +x "$w/fuzz-$t"
[ -f ".gpu/$t-corpus.tar.xz" ] && tar -C "$w" -xJf ".gpu/$t-corpus.tar.xz" && cp -r "$w/$t"/. "$w/corpus/"
cp fuzz/seeds/"$t"/* "$w/corpus/" 2>/dev/null || true
jobs=$(( $(nproc) - 2 )); per=$(( runs / jobs + 1 ))
echo "$t at $(cat .gpu/COMMIT 2>/dev/null): $jobs jobs × $per runs, at most ${secs}s; $(ls "$w/corpus" | wc -l) inputs to start" | tee "$OUT/$t-fuzz.txt"
cd "$w"
timeout $((secs + 240)) "./fuzz-$t" corpus -jobs="$jobs" -workers="$jobs" -runs="$per" -max_total_time="$secs" \
  -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$OUT/$t-" \
  > main.log 2>&1
echo "exit $?" >> "$OUT/$t-fuzz.txt"
grep -h "stat::number_of_executed_units" fuzz-*.log | awk '{s += $2; n++} END {print n " jobs, " s " executions"}' | tee -a "$OUT/$t-fuzz.txt"
grep -h -E "ERROR|panicked|deadly signal" fuzz-*.log | head -20 >> "$OUT/$t-fuzz.txt"
tail -3 fuzz-0.log >> "$OUT/$t-fuzz.txt"
tar -cJf "$OUT/$t-corpus.tar.xz" corpus
cd "$root"
