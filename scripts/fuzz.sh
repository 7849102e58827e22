#!/usr/bin/env bash
# Runs the cargo-fuzz targets one after the other (one fuzzing process at a time), each for a
# number of executions, from the committed seeds (fuzz/seeds/<target>/, made by
# fuzz/make_seeds.py), the working corpus and the committed, minimized regression corpus
# fuzz/corpus-min/<target>/ (which holds the crafted hostile files of issue 33,
# `hostile-*`, written by crates/engine/tests/hostile_input.rs), then merges what found new
# paths into corpus-min (replayed by `cargo test`: crates/engine/tests/fuzz_corpora.rs,
# adapters_fuzz_corpus.rs, src-tauri/tests/store_corpus.rs,
# crates/server/tests/request_corpus.rs, crates/engine/tests/constraint_corpus.rs).
# A target with a libFuzzer dictionary (fuzz/dicts/<target>.dict: the JSON fields of
# server_request) is run with it.
# Every target runs with -rss_limit_mb=2048: an input that makes a reader allocate far
# more than its size (the GGUF metadata amplification of issue 33) is a finding.
#
# usage: bash scripts/fuzz.sh [RUNS] [TARGET…]
#   RUNS     executions per target (default 1000000)
#   TARGET   default: state_file npy store adapters server_request constraint (the others: gguf
#            safetensors_pth tokenizer tokenizer_vocab, whose seeds come from fuzz/make_seeds.py into fuzz/corpus/)
# Needs cargo-fuzz (`cargo install cargo-fuzz`); RUSTC_BOOTSTRAP=1 lets stable rustc take
# the sanitizer flags. Logs: fuzz/logs/<target>.log (gitignored).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
runs=${1:-1000000}
shift || true
targets=${*:-state_file npy store adapters server_request constraint}
export RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$PWD/target
mkdir -p logs artifacts
for t in $targets; do
  mkdir -p "corpus/$t" "corpus-min/$t"
  [ -d "seeds/$t" ] && cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
  cargo fuzz build -O "$t" >/dev/null
  bin=$(ls target/*/release/"$t" | head -1)
  dict=(); [ -f "dicts/$t.dict" ] && dict=(-dict="dicts/$t.dict")
  echo "== $t: $runs runs ($(date +%T))"
  "$bin" "corpus/$t" "corpus-min/$t" -runs="$runs" -print_final_stats=1 -max_len=65536 "${dict[@]}" \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="artifacts/$t-" >"logs/$t.log" 2>&1 || {
      echo "!! $t failed: see fuzz/logs/$t.log and fuzz/artifacts/"; tail -30 "logs/$t.log"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|cov:" \
    "logs/$t.log" | tail -4
  "$bin" -merge=1 "corpus-min/$t" "corpus/$t" >"logs/$t.merge.log" 2>&1
  echo "   corpus-min/$t: $(ls "corpus-min/$t" | wc -l) files, $(du -sh "corpus-min/$t" | cut -f1)"
done
