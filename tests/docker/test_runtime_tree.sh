#!/usr/bin/env bash
# The container image's runtime stage, tested without a container engine (none runs on the
# development and CI machines): docker/runtime-tree.sh assembles the very tree the Dockerfile's
# runtime stage copies into `FROM scratch`, and the server is started from it in a chroot as the
# image's non-root user, with /proc, /sys and /dev mounted as a container would have them (in a
# private mount namespace, gone when the test ends). Checks:
#   - the tree holds only the three binaries, the libraries they load, the loader and a few /etc
#     files: no shell, no package manager, nothing else;
#   - every binary starts from the tree alone (all its libraries are in it);
#   - no libcuda/libcudart in the tree; with CUDA built, the server carries the CUDA runtime
#     statically (it names libcuda.so.1, which it loads from the host's driver at run time);
#   - xtwin-server runs as uid 10001 from the tree, serves the console and /v1/health; the
#     image's probe, xtwin-health, reads the token from the server's config file and passes,
#     fails without the token, and passes over TLS;
#   - SIGTERM stops it with exit status 0.
# Usage: tests/docker/test_runtime_tree.sh BUILD_DIR [--cuda]   (assembles the tree from a build)
#        tests/docker/test_runtime_tree.sh --tree DIR [--cuda]    (a tree made elsewhere, e.g. by
#                                                                  docker/emulate-build.sh)
# Exit 77 (skipped) when not root or when chroot/mount namespaces are not permitted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
args=("$@")
given_tree=
if [ "${1:-}" = "--tree" ]; then
  given_tree=$(cd "$2" && pwd)
  shift 2
else
  build=$(cd "$1" && pwd)
  shift
fi
cuda=${1:-}

skip() { echo "test_runtime_tree SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for chroot and mounts (the CI machine runs as root)"
command -v unshare >/dev/null && command -v chroot >/dev/null || skip "unshare/chroot missing (util-linux, coreutils)"
unshare --mount true 2>/dev/null || skip "mount namespaces not permitted here"
command -v curl >/dev/null || skip "curl missing"

# Everything below runs in a private mount namespace: the mounts vanish with it.
if [ -z "${XT_IN_NS:-}" ]; then
  exec env XT_IN_NS=1 unshare --mount --propagation private bash "$0" "${args[@]}"
fi

work=$(mktemp -d /tmp/xtwin-rt-test-XXXXXX)
tree=${given_tree:-$work/rootfs}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for m in dev sys proc; do umount -l "$tree/$m" 2>/dev/null || true; done
  rm -f "$tree"/etc/xtwin/{config.json,empty.json,key.pem,cert.pem} "$tree"/tmp/*.json
  [ -n "$given_tree" ] || rm -rf "$tree"
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
ok() { echo "  ok: $*"; }
bad() { echo "  FAIL: $*"; fails=$((fails + 1)); }

[ -n "$given_tree" ] || bash "$root/docker/runtime-tree.sh" "$build" "$tree"

# ---- what is in the tree ----------------------------------------------------------------------
unexpected=$(cd "$tree" && find . -mindepth 1 \( -type f -o -type l \) | sed 's|^\./||' | grep -Ev \
  '^(usr/local/bin/(xtwin|xtwin-server|xtwin-health)|usr/lib/[^/]+/lib[^/]+\.so[.0-9]*|usr/lib/lib[^/]+\.so[.0-9]*|usr/lib64/ld-linux-x86-64\.so\.2|lib|lib64|etc/(passwd|group|nsswitch\.conf|hosts))$' || true)
[ -z "$unexpected" ] && ok "only binaries, their libraries, the loader and /etc basics ($(find "$tree" -type f | wc -l) files)" ||
  bad "unexpected files in the tree: $unexpected"
for f in bin/sh usr/bin/sh usr/bin/apt usr/bin/dpkg; do
  [ ! -e "$tree/$f" ] || bad "$f is in the runtime tree"
done
if [ -n "$(find "$tree" -name 'libcuda.so*' -o -name 'libcudart*')" ]; then bad "a CUDA library is in the tree"; else
  ok "no libcuda or libcudart in the tree (the driver comes from the host)"; fi
if [ "$cuda" = "--cuda" ]; then
  if grep -q 'NEEDED.*cudart' <<<"$(readelf -d "$tree/usr/local/bin/xtwin-server")"; then
    bad "xtwin-server needs a shared libcudart"
  elif grep -qa 'libcuda.so.1' "$tree/usr/local/bin/xtwin-server"; then
    ok "CUDA build: the CUDA runtime is in xtwin-server (static; it loads the host's libcuda.so.1)"
  else bad "CUDA build, but xtwin-server does not carry the CUDA runtime"; fi
fi

# ---- start from the tree ----------------------------------------------------------------------
mkdir -p "$tree/proc" "$tree/sys" "$tree/dev"
mount -t proc proc "$tree/proc"
mount --rbind /sys "$tree/sys"
mount --rbind /dev "$tree/dev"
in_tree() { chroot --userspec=10001:10001 "$tree" "$@"; }

for b in xtwin-server xtwin xtwin-health; do
  if in_tree "/usr/local/bin/$b" --help >/dev/null 2>&1; then ok "$b starts from the tree alone"; else
    bad "$b does not start from the tree: $(in_tree "/usr/local/bin/$b" --help 2>&1 | head -n 2)"; fi
done

token=tree-$RANDOM$RANDOM
printf '{"token": "%s"}\n' "$token" >"$tree/etc/xtwin/config.json"
printf '{}\n' >"$tree/etc/xtwin/empty.json"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tree/etc/xtwin/key.pem" -out "$tree/etc/xtwin/cert.pem" \
  -days 2 -subj /CN=localhost >/dev/null 2>&1
chown 10001:10001 "$tree"/etc/xtwin/*.pem

start() { # name, server args... -> sets port
  local name=$1
  shift
  rm -f "$tree/tmp/$name.json"
  chroot --userspec=10001:10001 "$tree" /usr/local/bin/xtwin-server --bind 127.0.0.1 --rest-port 0 --ws-port 0 --ports-file "/tmp/$name.json" \
    --backend cpu --threads 2 --phantom-dim 64 --phantom-spacing 4 --mode fd20-128 --fps 5 "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  pid=$!
  for _ in $(seq 1 600); do
    [ -s "$tree/tmp/$name.json" ] && break
    kill -0 "$pid" 2>/dev/null || { bad "$name: server exited at start: $(tail -n 5 "$work/$name.log")"; return 1; }
    sleep 0.05
  done
  port=$(sed -nE 's/.*"rest": *([0-9]+).*/\1/p' "$tree/tmp/$name.json")
  [ -n "$port" ] || { bad "$name: no ports file"; return 1; }
}

if start plain --config /etc/xtwin/config.json; then
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [ "$uid" = 10001 ] && ok "the server runs as uid 10001 (xtwin)" || bad "the server runs as uid $uid"
  if in_tree /usr/local/bin/xtwin-health --config /etc/xtwin/config.json "http://127.0.0.1:$port/v1/health"; then
    ok "xtwin-health passes, with the token from the server's config file"
  else bad "xtwin-health fails against a healthy server"; fi
  if msg=$(in_tree /usr/local/bin/xtwin-health --config /etc/xtwin/empty.json "http://127.0.0.1:$port/v1/health" 2>&1); then
    bad "xtwin-health passes without the token"
  else
    grep -q "HTTP 401" <<<"$msg" && ok "xtwin-health fails without the token: $msg" || bad "unexpected: $msg"
  fi
  page=$(curl -s -w '\n%{http_code} %{content_type}' "http://127.0.0.1:$port/")
  # (here-strings, not echo | grep -q: with pipefail, grep leaving early can fail the echo)
  grep -q '^200 text/html' <<<"$(tail -n 1 <<<"$page")" && grep -q 'console.js' <<<"$page" &&
    ok "the console is served by the binary alone (GET / -> 200 text/html)" || bad "GET / from the tree: $(echo "$page" | tail -n 1)"
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/info")
  [ "$code" = 200 ] && ok "GET /v1/info with the token: 200" || bad "GET /v1/info with the token: $code"
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] && ok "SIGTERM: exit status 0" || bad "SIGTERM: exit status $rc ($(tail -n 3 "$work/plain.log"))"
fi

if start tls --tls-cert /etc/xtwin/cert.pem --tls-key /etc/xtwin/key.pem; then
  if in_tree /usr/local/bin/xtwin-health --config /etc/xtwin/empty.json "https://127.0.0.1:$port/v1/health"; then
    ok "xtwin-health passes over TLS"
  else bad "xtwin-health fails over TLS"; fi
  kill -TERM "$pid"
  wait "$pid" || true
fi

[ "$fails" -eq 0 ] && echo "test_runtime_tree: passed" || echo "test_runtime_tree: $fails failed"
[ "$fails" -eq 0 ]
