#!/usr/bin/env bash
# The Dockerfile, stage by stage, without a container engine (none runs on the development and
# CI machines): the base from Debian packages (make-base.sh), the build stage in a chroot of a
# copy of it (the sources copied in as `COPY . /src` would, build-stage.sh run as the RUN line
# does), and the runtime stage's tree (/rootfs of the build stage) checked by
# tests/docker/test_runtime_tree.sh --tree. Not part of scripts/test: it downloads ~150 Debian
# packages and builds from scratch (3-7 minutes on two cores, CPU only); run it after changing the
# Dockerfile, build-stage.sh, runtime-tree.sh or the package list. Needs root and Debian's mirror.
#   docker/emulate-build.sh [WORK_DIR]        (default build-docker; the base is reused)
#   XT_EMULATE_CUDA=/usr/local/cuda docker/emulate-build.sh   (bind-mounts a toolkit, as
#                                              --build-context cuda=/usr/local/cuda would copy it)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build-docker}
[ "$(id -u)" -eq 0 ] || { echo "emulate-build: run as root" >&2; exit 1; }
t0=$(date +%s)
bash docker/make-base.sh "$work/base"

# Build stage: FROM base; COPY --from=cuda; COPY . /src; RUN build-stage.sh
stage=$work/build-stage
if [ -d "$stage" ]; then
  for m in usr/local/cuda dev/pts dev sys proc; do umount -l "$stage/$m" 2>/dev/null || true; done
  rm -rf "$stage"
fi
cp -a "$work/base" "$stage"
mkdir -p "$stage/usr/local/cuda" "$stage/src"
# The build context: what git knows of (tracked and untracked-not-ignored), as .dockerignore keeps.
git ls-files -co --exclude-standard -z | grep -zv -E '^(build|out/|\.device|tests/browser/node_modules)' |
  xargs -0 cp --parents -t "$stage/src"
cp /etc/resolv.conf "$stage/etc/resolv.conf"
cleanup() { for m in usr/local/cuda dev/pts dev sys proc; do umount -l "$stage/$m" 2>/dev/null || true; done; }
trap cleanup EXIT
mount -t proc proc "$stage/proc"
mount --rbind /sys "$stage/sys"
mount --rbind /dev "$stage/dev"
if [ -n "${XT_EMULATE_CUDA:-}" ]; then
  mount --bind "$XT_EMULATE_CUDA" "$stage/usr/local/cuda"
else
  echo "built without CUDA: docker build --build-context cuda=/usr/local/cuda adds it" >"$stage/usr/local/cuda/NO-CUDA"
fi
chroot "$stage" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  XT_CUDA_ARCHS="${XT_CUDA_ARCHS:-90}" bash /src/docker/build-stage.sh /src /build /rootfs
cleanup
trap - EXIT

# Runtime stage: FROM scratch; COPY --from=build /rootfs/ /  -> the tree, tested.
cuda_flag=
[ -n "${XT_EMULATE_CUDA:-}" ] && cuda_flag=--cuda
bash tests/docker/test_runtime_tree.sh --tree "$stage/rootfs" $cuda_flag
echo "emulate-build: passed in $(( $(date +%s) - t0 )) s; runtime tree $(du -sh "$stage/rootfs" | cut -f1)," \
  "base $(du -sh "$work/base" | cut -f1)"
