#!/usr/bin/env bash
# test_install: `cmake --install BUILD --prefix P` puts xtwin, xtwin-server (and xtwin-health where
# it was built) in P/bin, the Python client in P/lib/python3.X/dist-packages, the console's files in
# P/share/xtwin/console; each works from there, outside the source tree: `xtwin modes`, the
# server's --version, `import xtwin` by Debian's python3 with only that folder on its path, the
# installed console identical to the one the server serves (GET / = index.html).
# Usage: test_install.sh BUILD_DIR PREFIX
set -euo pipefail
build=$1 prefix=$2
# Debian's python3 reads <prefix>/lib/python3.X/dist-packages (X its minor version)
py=lib/$(/usr/bin/python3 -c 'import sys; print("python3.%d" % sys.version_info[1])')/dist-packages
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1 || { cat "$prefix.log"; fail "cmake --install"; }
for f in bin/xtwin bin/xtwin-server $py/xtwin/__init__.py $py/xtwin_dataset.py \
  share/xtwin/console/index.html share/xtwin/console/console.js share/xtwin/console/console.css \
  share/doc/xtwin/api/openapi.yaml share/doc/xtwin/examples/python/sweep.py; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
if [ -e "$build/docker/xtwin-health" ]; then [ -x "$prefix/bin/xtwin-health" ] || fail "bin/xtwin-health not installed"; fi
cd "$prefix"  # away from the source and build trees
PATH="$prefix/bin:/usr/bin:/bin" xtwin modes | grep -q '^fd20-256 ' || fail "installed xtwin modes"
PATH="$prefix/bin:/usr/bin:/bin" xtwin-server --version | grep -q '^xtwin-server ' || fail "installed xtwin-server --version"
PYTHONPATH="$prefix/$py" /usr/bin/python3 -c \
  'import xtwin, sys; assert xtwin.__file__.startswith(sys.argv[1]), xtwin.__file__; print("xtwin client from", xtwin.__file__)' \
  "$prefix/$py" || fail "import xtwin from the installed folder"
# The installed server serves the same console as the installed files.
ports="$prefix/ports.json"
"$prefix/bin/xtwin-server" --backend cpu --rest-port 0 --ws-port 0 --ports-file "$ports" --phantom-dim 32 --phantom-spacing 6 \
  --mode fd20-128 --fps 1 --no-autostart >"$prefix/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do [ -s "$ports" ] && break; sleep 0.1; done
[ -s "$ports" ] || { cat "$prefix/server.log"; fail "installed server did not start"; }
rest=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rest"])' "$ports")
curl -sf "http://127.0.0.1:$rest/" -o "$prefix/served.html" || fail "GET /"
cmp -s "$prefix/served.html" "$prefix/share/xtwin/console/index.html" || fail "the served console differs from the installed index.html"
head -1 "$prefix/server.log" | grep -q "^xtwin console: http://127.0.0.1:$rest/" || fail "the server's first line is not the console URL: $(head -1 "$prefix/server.log")"
echo "test_install: passed ($(cd "$prefix" && find . -type f | wc -l) files installed)"
