#!/usr/bin/env bash
# RWKV Studio: install what is missing on a fresh Debian/Ubuntu machine (idempotent).
#   bash scripts/setup.sh          system packages, npm packages, Rust crates
# Needs: a Rust toolchain (rustup) and Node.js 20+ with npm.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  libwebkit2gtk-4.1-dev librsvg2-dev libayatana-appindicator3-dev libxdo-dev libssl-dev
  mesa-vulkan-drivers xvfb webkit2gtk-driver pkg-config build-essential
)

sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_ apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "setup: system packages present"
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup: npm not found; install Node.js 20 or newer" >&2; exit 1; }

# npm packages, exactly as locked (skipped when node_modules is newer than the lock file).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  echo "setup: node_modules up to date"
fi

cargo fetch --locked
echo "setup: done"
