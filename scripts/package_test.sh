#!/usr/bin/env bash
# Tests the packages in dist/ (scripts/package.sh) the way a person uses them:
#   1. `apt-get install ./dist/rwkv-studio_*.deb` (pulls its declared dependencies);
#   2. `rwkv --version` from the installed CLI names the workspace version and a commit;
#   3. the INSTALLED app, started by the command of its desktop entry, under Xvfb through
#      tauri-driver: the end-to-end test's smoke steps (the bundled model loads on first
#      start, a chat replies), with the user's data under a fresh XDG_DATA_HOME;
#   4. nothing written next to the binary; `apt-get remove` removes the app and leaves
#      the user's data dir as it was (every file's SHA-256 compared);
#   5. a fresh venv: `pip install --only-binary :all: dist/rwkv_studio-*.whl` (no
#      compiler), the README's three lines of Python run, `pip show` reports the version
#      `rwkv --version` printed.
# Prints the package sizes and the install and first-reply times (benchmarks, not asserted).
# Needs root or sudo (apt-get), xvfb-run, tauri-driver and WebKitWebDriver (scripts/test.sh
# installs them). Usage: bash scripts/package_test.sh   (after bash scripts/package.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
say() { printf '\n== package test: %s (%s)\n' "$*" "$(date +%T)"; }
fail() { echo "package test: FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
DEB=$ROOT/dist/rwkv-studio_${VERSION}_amd64.deb
WHL=$(ls "$ROOT"/dist/rwkv_studio-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
TGZ=$ROOT/dist/rwkv-${VERSION}-linux-x86_64.tar.gz
for f in "$DEB" "$WHL" "$TGZ" "$ROOT/dist/SHA256SUMS"; do
  [ -n "$f" ] && [ -f "$f" ] || fail "missing $f (run scripts/package.sh)"
done
(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "dist/SHA256SUMS does not match the files"
PKG=$(dpkg-deb --field "$DEB" Package)

WORK=$(mktemp -d)
installed=0
cleanup() {
  if [ $installed = 1 ]; then as_root apt-get remove -y -qq "$PKG" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

say "apt-get install ./$(basename "$DEB")"
if dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q "install ok installed"; then
  as_root apt-get remove -y -qq "$PKG" >/dev/null
fi
t_install=$(now)
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$DEB"
installed=1
t_installed=$(now)
dpkg -L "$PKG" | grep -E '^/usr/(bin|share/applications)/' || true

say "rwkv --version (installed CLI)"
[ "$(command -v rwkv)" = /usr/bin/rwkv ] || fail "rwkv on PATH is $(command -v rwkv || echo nothing), not /usr/bin/rwkv"
cli_version=$(/usr/bin/rwkv --version)
echo "$cli_version"
[[ $cli_version =~ ^rwkv\ ${VERSION//./\\.}\ \(commit\ [0-9a-f]{12}\)$ ]] || fail "rwkv --version: '$cli_version'"

say "the installed app from its desktop entry, smoke steps (E2E_SMOKE=1)"
desktop=$(dpkg -L "$PKG" | grep -E '^/usr/share/applications/.*\.desktop$' | head -1)
[ -n "$desktop" ] || fail "the package has no desktop entry"
exec_cmd=$(sed -n 's/^Exec=//p' "$desktop" | head -1 | sed 's/ %[fFuU]//g')
app=$(command -v "$exec_cmd" || true)
[ -n "$app" ] || fail "the desktop entry's command '$exec_cmd' is not on PATH"
echo "desktop entry $desktop: Exec=$exec_cmd → $app"
demo=$(dpkg -L "$PKG" | grep -E '/models/rwkv7-demo-[^/]*\.gguf$' | head -1)
[ -n "$demo" ] || fail "the package has no bundled demo model"
res_dir=$(dirname "$(dirname "$demo")")   # the app's resources (a name with a space)
before_res=$(find "$res_dir" | sort)
driver=$(command -v tauri-driver || echo "$HOME/.cargo/bin/tauri-driver")
[ -x "$driver" ] || fail "tauri-driver missing (bash scripts/e2e.sh installs it)"
native=$(command -v WebKitWebDriver || true)
[ -n "$native" ] || fail "WebKitWebDriver missing (apt-get install webkit2gtk-driver)"
mkdir -m 700 "$WORK/runtime"
mkdir -p "$WORK/home/.local/share" "$WORK/home/.config" "$WORK/home/.cache"
export HOME_FOR_APP=$WORK/home
(
  export HOME=$WORK/home XDG_DATA_HOME=$WORK/home/.local/share XDG_CONFIG_HOME=$WORK/home/.config \
    XDG_CACHE_HOME=$WORK/home/.cache XDG_RUNTIME_DIR=$WORK/runtime
  export WGPU_BACKEND=${WGPU_BACKEND:-vulkan} E2E_APP=$app E2E_SMOKE=1 E2E_SCREENSHOTS=$WORK/shots
  unset RWKV_STUDIO_DATA_DIR RWKV_STUDIO_MODEL
  cd "$ROOT"
  xvfb-run -a -s "-screen 0 1440x900x24" bash -c '
    "'"$driver"'" --port 4454 --native-port 4455 --native-driver "'"$native"'" > "'"$WORK"'/driver.log" 2>&1 &
    d=$!
    for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/4454) 2>/dev/null && break; sleep 0.2; done
    E2E_DRIVER=http://127.0.0.1:4454 timeout -k 10 "${E2E_TIMEOUT:-900}" node tests/e2e/app.e2e.mjs
    rc=$?
    kill $d 2>/dev/null; wait $d 2>/dev/null
    exit $rc
  ' | tee "$WORK/smoke.log"
) || { tail -30 "$WORK/driver.log" >&2 || true; fail "the installed app's smoke steps"; }
first_reply=$(sed -n 's/^\[ *\([0-9.]*\) s\] reply stats.*/\1/p' "$WORK/smoke.log" | head -1)

say "where the app wrote"
data=$WORK/home/.local/share
[ -n "$(find "$data" -path '*/chats/*.json' -type f)" ] || fail "no chat stored under XDG_DATA_HOME ($data)"
find "$data" -maxdepth 2 | sed "s|$WORK/home|~|"
[ "$(find "$res_dir" | sort)" = "$before_res" ] || fail "the app wrote next to its binary, in $res_dir"
data_before=$(cd "$data" && find . -type f -print0 | sort -z | xargs -0 sha256sum)

say "apt-get remove $PKG"
as_root apt-get remove -y -qq "$PKG"
installed=0
[ ! -e /usr/bin/rwkv ] && ! command -v "$exec_cmd" >/dev/null || fail "files left after apt-get remove"
data_after=$(cd "$data" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
[ "$data_before" = "$data_after" ] || fail "apt-get remove changed the user's data dir"
echo "the user's data dir is as it was ($(echo "$data_after" | wc -l) files)"

say "the wheel in a fresh venv"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --only-binary :all: "$WHL"
# The README's Python lines, as a reader copies them (the block after "pip install").
python3 - "$ROOT/README.md" > "$WORK/readme.py" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r"pip install dist/rwkv_studio-\*\.whl.*?```python\n(.*?)```", text, re.S)
if not m:
    sys.exit("README: no ```python block after the wheel's pip install line")
print(m.group(1))
PY
echo "--- README's Python:"; cat "$WORK/readme.py"
out=$(cd "$ROOT" && "$WORK/venv/bin/python" "$WORK/readme.py")
echo "--- output: $out"
[ -n "$(echo "$out" | tr -d '[:space:]')" ] || fail "the README's Python printed nothing"
pip_version=$("$WORK/venv/bin/python" -m pip show rwkv-studio | sed -n 's/^Version: //p')
py_version=$("$WORK/venv/bin/python" -c 'import rwkv_studio; print(rwkv_studio.__version__, rwkv_studio.__commit__)')
echo "pip show: $pip_version; rwkv_studio: $py_version; rwkv --version: $cli_version"
[ "$pip_version" = "$VERSION" ] || fail "pip show says $pip_version, rwkv --version $VERSION"
[ "$py_version" = "$VERSION $(echo "$cli_version" | sed 's/.*commit \([0-9a-f]*\))/\1/')" ] \
  || fail "rwkv_studio.__version__ / __commit__ '$py_version' differ from '$cli_version'"

say "sizes and times (benchmark figures)"
size() { du -k "$1" | cut -f1 | awk '{printf "%.1f MB", $1/1024}'; }
inst_kb=$(dpkg-deb --field "$DEB" Installed-Size)
echo ".deb $(size "$DEB") (installed $((inst_kb / 1024)) MB); wheel $(size "$WHL"); CLI tarball $(size "$TGZ")"
echo "apt-get install: $(secs "$t_install" "$t_installed") s; app start to first chat reply: ${first_reply:-?} s (lavapipe here)"
echo "package test: all checks passed"
