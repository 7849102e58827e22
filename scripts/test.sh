#!/usr/bin/env bash
# Runs every test of RWKV Studio: format and lint checks, the engine's tests on a real
# Vulkan device (Mesa's lavapipe when there is no GPU), the CLI's, the Python package's
# (wheel + pytest), and — when the app is present — the frontend checks and the
# end-to-end test of the real desktop app.
# Installs what is missing first (Debian/Ubuntu). Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- system packages -------------------------------------------------------------------
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in mesa-vulkan-drivers libvulkan1 python3 python3-numpy; do have_pkg "$p" || need+=("$p"); done
# The Python package's tests run in a venv (Debian's python3 needs python3-venv for that).
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then need+=(python3-venv); fi
if [ -f package.json ]; then
  for p in libwebkit2gtk-4.1-dev librsvg2-dev libayatana-appindicator3-dev libxdo-dev libssl-dev \
           xvfb xauth webkit2gtk-driver; do
    have_pkg "$p" || need+=("$p")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  say "apt-get install ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# --- GPU for tests: lavapipe through Vulkan --------------------------------------------
export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "${XDG_RUNTIME_DIR}" ]; then
  export XDG_RUNTIME_DIR=$(mktemp -d /tmp/rwkv-xdg.XXXXXX)
  RWKV_XDG_MADE=$XDG_RUNTIME_DIR
fi
chmod 700 "$XDG_RUNTIME_DIR" 2>/dev/null || true
# Scratch files of the tests (std::env::temp_dir) go to a folder of this run, removed at exit,
# so repeated runs do not pile up models and corpora in /tmp.
RWKV_TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rwkv-tests.XXXXXX")
export TMPDIR=$RWKV_TEST_TMP
trap 'rm -rf "$RWKV_TEST_TMP" ${RWKV_XDG_MADE:+"$RWKV_XDG_MADE"}' EXIT
export RUST_BACKTRACE=1

# --- Disk: a cold run writes ≈ 12 GB (the builds, the venv, the tests' models); a test
# that then fails with "No space left on device" is the machine's, which this line tells.
disk_free() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
tgt=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$tgt"
say "disk: $(disk_free "$tgt") GiB free for the builds ($tgt), $(disk_free "$RWKV_TEST_TMP") GiB for the tests' scratch"
if [ "$(df -Pk "$tgt" | awk 'NR == 2 { print ($4 < 12 * 1048576) }')" = 1 ]; then
  echo "warning: under 12 GiB free where the builds go; a cold run may run out of disk" >&2
fi
export CARGO_TERM_COLOR=never

# --- Rust ------------------------------------------------------------------------------
say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

# --- Supply chain (deny.toml; docs/reliability.md) -------------------------------------
# cargo-deny: licences, bans and sources (crates.io only) from Cargo.lock alone.
if ! cargo deny --version 2>/dev/null | grep -q '^cargo-deny 0\.20\.2$'; then
  say "cargo install cargo-deny 0.20.2"
  env -u CARGO_TARGET_DIR cargo install cargo-deny --version 0.20.2 --locked
fi
say "cargo deny check licenses bans sources"
cargo deny --locked check licenses bans sources
# Advisories need the RustSec database, a git repository that cargo-deny clones from its
# host: not a package registry, so where only the registries can be reached (this
# project's machines and CI) the fetch fails. Then a copy fetched earlier is checked
# against offline, saying its date, and with no copy the check is skipped, saying why.
adb=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs
timeout 120 cargo deny fetch db >/dev/null 2>&1 && fresh=1 || fresh=0
adb_repo=$(find "$adb" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -1)
if [ -n "$adb_repo" ] && [ -d "$adb_repo/.git" ]; then
  adb_date=$(git -C "$adb_repo" log -1 --format=%cs 2>/dev/null || echo unknown)
  say "cargo deny check advisories ($( [ $fresh = 1 ] && echo fetched now || echo "offline: no fetch"), database of $adb_date)"
  cargo deny --locked --offline check advisories
else
  say "cargo deny check advisories: SKIPPED (the RustSec database cannot be fetched from here and no earlier copy is in $adb)"
fi
# npm audit of what the app ships (not the build tools). The registry's audit endpoint is a
# POST that some networks refuse: a refused audit is skipped, saying so; a report with any
# vulnerability fails.
if [ -f package-lock.json ]; then
  say "npm audit --omit=dev"
  audit=$(npm audit --omit=dev --json 2>/dev/null || true)
  verdict=$(printf '%s' "$audit" | python3 -c '
import json, sys
try:
    v = json.load(sys.stdin).get("metadata", {}).get("vulnerabilities")
except ValueError:
    v = None
print("refused" if v is None else "clean" if v.get("total", 0) == 0 else "vulnerable")')
  case $verdict in
    clean) echo "npm audit: no known vulnerability in the runtime dependencies" ;;
    vulnerable) npm audit --omit=dev; exit 1 ;;
    *) echo "npm audit: SKIPPED (the registry's audit endpoint did not answer here)" ;;
  esac
fi
say "cargo test (engine, CLI$( [ -d src-tauri ] && echo ', app commands'))"
# Release: the GPU tests run the same shaders faster on lavapipe and share the build
# with the app binary of the end-to-end test.
# This includes the short versions of the reliability tests (docs/reliability.md): SIGKILL
# crash runs of the app's command layer (8 kills) and of `rwkv state save` (6), a 30-turn
# soak (descriptors, GPU bytes and the live heap flat), GPU faults (a lost device, a pass too
# large, a real driver out-of-memory under RLIMIT_DATA), hostile input, and the fuzz corpora
# replayed; the full runs take RWKV_CRASH_KILLS=60 / RWKV_SOAK_TURNS=500.
#
# Every test binary runs under scripts/test_deadline.py (cargo's target runner): a test still
# running after RWKV_TEST_TIMEOUT seconds (default 600) stops its binary, named, status 124.
# RWKV_SUBGROUPS=1: the subgroup kernels run on lavapipe too, where models default to the
# workgroup-memory kernels (the driver keeps memory per subgroup shuffle: issue 26); the
# Python and end-to-end steps below run that default, so both paths are covered by model
# tests. tests/generation_memory.rs runs the default itself.
RWKV_SUBGROUPS=${RWKV_SUBGROUPS:-1} cargo test --workspace --release --locked \
  --config "target.'cfg(unix)'.runner = ['python3', '$root/scripts/test_deadline.py']"

# --- Python package --------------------------------------------------------------------
# python/: the abi3 wheel built by maturin (sharing the release build above), installed
# into a venv with the pinned tools of python/requirements.txt, tested by pytest against
# the fixtures and against the CLI built above.
say "Python package: wheel + pytest"
py_venv=${RWKV_PY_VENV:-$HOME/.cache/rwkv-studio/python-venv}
[ -x "$py_venv/bin/python" ] || python3 -m venv "$py_venv"
"$py_venv/bin/python" -m pip install -q -r python/requirements.txt
rm -f .whl/rwkv_studio-*.whl
"$py_venv/bin/maturin" build --release --locked -m python/Cargo.toml -o .whl \
  -i "$py_venv/bin/python"
"$py_venv/bin/python" -m pip install -q --force-reinstall --no-deps .whl/rwkv_studio-*.whl
RWKV_CLI="${CARGO_TARGET_DIR:-$root/target}/release/rwkv" \
  "$py_venv/bin/python" -m pytest -q -p no:cacheprovider \
  --timeout "${RWKV_PY_TEST_TIMEOUT:-300}" --timeout-method thread python/tests

# --- Frontend and the real app ---------------------------------------------------------
if [ -f package.json ]; then
  say "npm ci"
  npm ci --no-audit --no-fund
  say "npm run check"
  npm run check
  say "npm test"
  npm test
  if [ -f scripts/e2e.sh ] && [ "${RWKV_E2E:-1}" = 1 ]; then
    # The real app (release build, sharing the dependencies built above) driven through
    # tauri-driver + WebKitWebDriver under Xvfb; screenshots in artifacts/screenshots/.
    say "end-to-end test of the desktop app"
    bash scripts/e2e.sh
  elif [ -f scripts/e2e.sh ]; then
    say "end-to-end test of the desktop app: SKIPPED (RWKV_E2E=0)"
  fi
  # The packages a person installs (scripts/package.sh: .deb, wheel, CLI tarball), built
  # from this checkout and tested as installed: apt-get install, the installed app's smoke
  # steps, apt-get remove, the wheel in a fresh venv (scripts/package_test.sh).
  if [ "${RWKV_PACKAGE:-1}" = 1 ]; then
    say "packages: build"
    MATURIN="$py_venv/bin/maturin" bash scripts/package.sh
    say "packages: install and test as a user"
    bash scripts/package_test.sh
  else
    say "packages: SKIPPED (RWKV_PACKAGE=0)"
  fi
fi
say "all tests passed in $((SECONDS / 60)) min $((SECONDS % 60)) s ($(disk_free "$tgt") GiB free now)"
