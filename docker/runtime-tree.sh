#!/usr/bin/env bash
# Assembles the runtime image's whole file tree from a build: xtwin-server, xtwin and
# xtwin-health in /usr/local/bin, every shared library they load (ldd's closure, plus libgcc_s,
# which glibc loads itself for thread unwinding) at its Debian path, the dynamic loader, merged-usr
# links, a non-root user (xtwin, 10001), /tmp, and the volume folders /data (models) and
# /etc/xtwin (config, TLS key and certificate). Nothing else: no shell, no package manager.
#
#   docker/runtime-tree.sh BUILD_DIR DEST
#
# The Dockerfile's build stage runs this into /rootfs and its runtime stage is `FROM scratch` +
# `COPY --from=build /rootfs /`, so the image holds exactly this tree; tests/docker checks the same
# tree by starting the server from it in a chroot. The CUDA runtime is linked statically
# (CUDA::cudart_static) and loads the driver (libcuda.so.1) at run time: in a container that comes
# from the host through the NVIDIA container toolkit, so the tree must not carry a libcuda or a
# libcudart of its own (checked here).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR DEST" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
dest=$2
bins=("$build/server/xtwin-server" "$build/tools/xtwin" "$build/docker/xtwin-health")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "runtime-tree: $b is not built" >&2; exit 1; }
done
if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  echo "runtime-tree: $dest exists and is not empty" >&2
  exit 1
fi
multi=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

mkdir -p "$dest"/usr/local/bin "$dest/usr/lib/$multi" "$dest"/etc/xtwin "$dest"/data "$dest"/tmp
chmod 1777 "$dest/tmp"
# Debian 12 is merged-usr: /lib and /lib64 are links into /usr.
ln -s usr/lib "$dest/lib"
ln -s usr/lib64 "$dest/lib64"

for b in "${bins[@]}"; do
  install -m 0755 "$b" "$dest/usr/local/bin/"
  strip --strip-unneeded "$dest/usr/local/bin/$(basename "$b")" 2>/dev/null || true
done

# The shared libraries: ldd's closure of every binary. Each goes to its path under /usr (the
# loader's default search path finds it there; no ld.so.cache in the image).
libs=$( (for b in "${bins[@]}"; do ldd "$b"; done) | awk '
  /not found/ { print "MISSING " $1; next }
  $2 == "=>" && $3 ~ /^\// { print $3 }
  $1 ~ /^\// { print $1 }' | sort -u)
if grep -q '^MISSING' <<<"$libs"; then
  echo "runtime-tree: unresolved libraries: $(echo "$libs" | grep '^MISSING' | tr '\n' ' ')" >&2
  exit 1
fi
gcc_s=$(readlink -f "$(gcc -print-file-name=libgcc_s.so.1 2>/dev/null)" 2>/dev/null || true)
[ -f "$gcc_s" ] || gcc_s=$(ls /usr/lib/"$multi"/libgcc_s.so.1 /lib/"$multi"/libgcc_s.so.1 2>/dev/null | head -n 1)
libs=$(printf '%s\n%s\n' "$libs" "$gcc_s" | sort -u)
for l in $libs; do
  case "$(basename "$l")" in
    libcuda.so* | libcudart.so* | libnvidia*)
      echo "runtime-tree: $l would be in the image; the CUDA runtime must be static and the driver the host's" >&2
      exit 1 ;;
  esac
  # /lib/x86_64-linux-gnu/x -> /usr/lib/x86_64-linux-gnu/x; /lib64/ld-linux... -> /usr/lib64/...
  canon=$l
  case "$canon" in /lib/* | /lib64/*) canon=/usr$canon ;; esac
  mkdir -p "$dest$(dirname "$canon")"
  cp -L "$l" "$dest$canon"
done

# The user the server runs as, and name service from files only.
cat >"$dest/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
xtwin:x:10001:10001:xtwin-server:/data:/usr/sbin/nologin
EOF
cat >"$dest/etc/group" <<'EOF'
root:x:0:
xtwin:x:10001:
EOF
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dest/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$dest/etc/hosts"
chown 10001:10001 "$dest/data" 2>/dev/null || true
chmod 0755 "$dest/data" "$dest/etc/xtwin"
echo "runtime-tree: $(find "$dest" -type f | wc -l) files, $(du -sh "$dest" | cut -f1) in $dest"
