#!/usr/bin/env bash
# Starts RWKV Studio on the bundled demo model, installing what is missing first
# (Debian/Ubuntu: system packages, npm packages, Rust crates). Usage: bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! vulkaninfo --summary >/dev/null 2>&1 && [ -z "${WGPU_BACKEND:-}" ]; then
  export WGPU_BACKEND=vulkan # Mesa's lavapipe when there is no GPU driver
fi
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR=$(mktemp -d /tmp/rwkv-studio-xdg.XXXXXX)
  chmod 700 "$XDG_RUNTIME_DIR"
fi
exec npm run dev
