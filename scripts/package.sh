#!/usr/bin/env bash
# Builds what a person installs, into dist/ (offline, from the checkout):
#   rwkv-studio_<version>_amd64.deb      the app (Tauri's deb bundler: desktop entry, icons,
#                                        the demo model as a resource) with the `rwkv` CLI
#                                        installed beside it as /usr/bin/rwkv
#   rwkv_studio-<version>-cp39-abi3-manylinux_*.whl   the Python package (maturin, abi3)
#   rwkv-<version>-linux-x86_64.tar.gz   the CLI alone (binary, licences, README)
#   SHA256SUMS                           of the three
# Usage: bash scripts/package.sh   (CARGO_TARGET_DIR is honoured; maturin from the test venv
# or PATH). scripts/package_test.sh installs and tests them as a user would.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$VERSION" ] || { echo "package: no workspace version in Cargo.toml" >&2; exit 1; }
# One version: the app takes the workspace's (tauri.conf.json names none), the wheel too
# (maturin, from python/Cargo.toml); package.json (not shipped) must agree.
npm_version=$(python3 -c 'import json; print(json.load(open("package.json"))["version"])')
[ "$npm_version" = "$VERSION" ] || { echo "package: package.json says $npm_version, Cargo.toml $VERSION" >&2; exit 1; }
say() { printf '\n== package: %s (%s)\n' "$*" "$(date +%T)"; }
rm -rf dist && mkdir -p dist

say "rwkv CLI (release)"
# The workspace's release test build (what scripts/test.sh builds, the `rwkv` binary
# included): building the CLI alone would resolve its dependencies' features differently
# and compile them all again.
cargo test --workspace --release --locked --no-run
CLI=$CARGO_TARGET_DIR/release/rwkv
"$CLI" --version

say "app .deb (tauri build --bundles deb)"
[ -d node_modules ] || npm ci --no-audit --no-fund
# The CLI's path depends on the target dir, so it joins the deb's files here, not in
# tauri.conf.json (which holds the rest: depends, recommends, section, resources).
deb_cfg=$(mktemp --suffix .json)
trap 'rm -f "$deb_cfg"' EXIT
python3 -c 'import json, sys; print(json.dumps({"bundle": {"linux": {"deb": {"files": {"/usr/bin/rwkv": sys.argv[1]}}}}}))' \
  "$CLI" > "$deb_cfg"
rm -rf "$CARGO_TARGET_DIR/release/bundle/deb"
npx tauri build --bundles deb --config "$deb_cfg"
built=("$CARGO_TARGET_DIR"/release/bundle/deb/*.deb)
[ ${#built[@]} = 1 ] && [ -f "${built[0]}" ] || { echo "package: expected one .deb, got ${built[*]}" >&2; exit 1; }
cp "${built[0]}" "dist/rwkv-studio_${VERSION}_amd64.deb"
dpkg-deb --info "dist/rwkv-studio_${VERSION}_amd64.deb" | sed -n '/Package:/,/Description:/p'

say "Python wheel (maturin, abi3)"
maturin=${MATURIN:-$(command -v maturin || echo "$HOME/.cache/rwkv-studio/python-venv/bin/maturin")}
py=$(dirname "$maturin")/python
[ -x "$py" ] || py=python3
"$maturin" build --release --locked -m python/Cargo.toml -o dist -i "$py"

say "CLI tarball"
stage=$(mktemp -d)
name=rwkv-${VERSION}-linux-x86_64
mkdir -p "$stage/$name"
cp "$CLI" LICENSE-MIT LICENSE-APACHE "$stage/$name/"
cat > "$stage/$name/README.txt" <<TXT
rwkv ${VERSION} ($("$CLI" --version)) — RWKV-7 on any GPU (Vulkan), the RWKV Studio engine from the
command line. Needs the Vulkan loader (Debian/Ubuntu: libvulkan1) and a Vulkan driver.
  ./rwkv generate --model MODEL.gguf --prompt "Hello" -n 64
  ./rwkv serve --model MODEL.gguf          # OpenAI-compatible server on 127.0.0.1:8080
  ./rwkv pull NAME                         # a model from the catalog
  ./rwkv --help
TXT
tar -czf "dist/$name.tar.gz" -C "$stage" "$name"
rm -rf "$stage"

(cd dist && sha256sum -- * > SHA256SUMS)
say "dist/"
ls -l dist
cat dist/SHA256SUMS
