#!/usr/bin/env bash
# End-to-end test of the real desktop app: build it (`tauri build --no-bundle`), start
# tauri-driver + WebKitWebDriver under Xvfb, drive the app with tests/e2e/app.e2e.mjs, and
# keep a screenshot of every view in artifacts/screenshots/ (copied to docs/screenshots/).
#
#   bash scripts/e2e.sh                    release build (if needed), then the test
#   E2E_DEBUG=1 bash scripts/e2e.sh        debug build instead
#   E2E_SKIP_BUILD=1 bash scripts/e2e.sh   reuse the built binary
#
# Release by default: scripts/test.sh runs `cargo test --workspace --release` first, so the
# release build of the app reuses every compiled dependency (wgpu, naga, webkit2gtk, …) and
# costs only the app crates, where a debug build would compile them all again (6-8 min on
# 2 cores). Alone on a cold machine, E2E_DEBUG=1 is faster (6-8 min against 16-19); the GPU
# work the test waits on runs at the same speed in both (dependencies are optimised in
# debug builds too).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# `--features e2e`: the app answers its file dialogs from RWKV_STUDIO_E2E_* (WebDriver
# cannot drive GTK dialogs); builds without it, released ones included, have no such hooks.
if [ "${E2E_DEBUG:-0}" = 1 ]; then PROFILE=debug; BUILD_FLAGS=(--debug --no-bundle --features e2e); else PROFILE=release; BUILD_FLAGS=(--no-bundle --features e2e); fi
APP=$CARGO_TARGET_DIR/$PROFILE/rwkv-studio
SHOTS=$ROOT/artifacts/screenshots

if [ "${E2E_SKIP_BUILD:-0}" != 1 ] || [ ! -x "$APP" ]; then
  [ -d node_modules ] || npm ci --no-audit --no-fund
  npx tauri build "${BUILD_FLAGS[@]}"
fi
[ -x "$APP" ] || { echo "e2e: $APP was not built" >&2; exit 1; }

if ! command -v tauri-driver >/dev/null; then
  cargo install tauri-driver --version 2.1.0 --locked
fi
NATIVE_DRIVER=$(command -v WebKitWebDriver || true)
[ -n "$NATIVE_DRIVER" ] || { echo "e2e: WebKitWebDriver missing (apt-get install webkit2gtk-driver)" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -m 700 "$WORK/runtime" "$WORK/data" "$WORK/saved"
# A damaged stored chat (as a hand edit would leave it): the app must start, set it aside
# and name it (docs/reliability.md).
mkdir -p "$WORK/data/chats"
printf '{"id": "00ff", "title": "half' > "$WORK/data/chats/00ff.json"
# Files the native dialogs would return (WebDriver cannot drive GTK dialogs).
head -c 1000000 assets/models/rwkv7-demo-6x256-Q4_K_M.gguf > "$WORK/broken.gguf"
cat > "$WORK/letter.txt" <<'TXT'
My dear Sister, I write to you from the deck of the Prospect, three days out of Liverpool. The sea has been kind to us, and the captain, a grave and courteous man, tells me that we shall reach the Azores within the week if the wind holds. I think of you and of our mother every evening, when the sun goes down behind the great grey waves, and I pray that you are both in good health.
TXT

export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
export XDG_RUNTIME_DIR=$WORK/runtime
export RWKV_STUDIO_DATA_DIR=$WORK/data
export RWKV_STUDIO_E2E_OPEN_MODEL=$WORK/broken.gguf
export RWKV_STUDIO_E2E_OPEN_TEXT=$WORK/letter.txt
# Test adapters for the demo model (tests/e2e/adapters/make_adapters.py).
export RWKV_STUDIO_E2E_OPEN_LORA=$ROOT/tests/e2e/adapters/demo-lora-r4.safetensors
export RWKV_STUDIO_E2E_OPEN_INIT_STATE=$ROOT/tests/e2e/adapters/demo-state.safetensors
export RWKV_STUDIO_E2E_SAVE_DIR=$WORK/saved
# The Library step: the user catalog (written by the test, naming its local server) and
# the library folder live in the test's own XDG folders; the server serves the demo model.
export XDG_CONFIG_HOME=$WORK/config XDG_DATA_HOME=$WORK/xdg-data
export E2E_USER_CATALOG=$XDG_CONFIG_HOME/rwkv-studio/catalog.json
export E2E_LIBRARY=$XDG_DATA_HOME/rwkv-studio/models
export E2E_DOWNLOAD_FILE=$ROOT/assets/models/rwkv7-demo-6x256-Q4_K_M.gguf
export E2E_APP=$APP E2E_SCREENSHOTS=$SHOTS
# (Not WEBKIT_DISABLE_COMPOSITING_MODE: with it, WebKitWebDriver's screenshots hang.)

rm -rf "$SHOTS"
mkdir -p "$SHOTS"
set +e
xvfb-run -a -s "-screen 0 1440x900x24" bash -c '
  tauri-driver --port 4444 --native-port 4445 --native-driver "'"$NATIVE_DRIVER"'" > "'"$WORK"'/driver.log" 2>&1 &
  driver=$!
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/4444) 2>/dev/null && break; sleep 0.2; done
  timeout -k 10 "${E2E_TIMEOUT:-1200}" node tests/e2e/app.e2e.mjs
  rc=$?
  kill $driver 2>/dev/null
  wait $driver 2>/dev/null
  exit $rc
'
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "e2e: failed; tauri-driver log:" >&2
  tail -50 "$WORK/driver.log" >&2 || true
fi
mkdir -p docs/screenshots
cp "$SHOTS"/[0-9]-*.png "$SHOTS"/[0-9][0-9]-*.png docs/screenshots/ 2>/dev/null || true
echo "e2e: screenshots in $SHOTS (copied to docs/screenshots/)"
exit $rc
