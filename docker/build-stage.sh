#!/usr/bin/env bash
# The Dockerfile's build stage (docker/emulate-build.sh runs it the same way in a chroot):
# installs the build packages from Debian, builds xtwin-server, xtwin and xtwin-health (Release;
# CUDA when /usr/local/cuda/bin/nvcc is there) and assembles the runtime tree.
#   docker/build-stage.sh SRC BUILD_DIR ROOTFS
set -euo pipefail
src=$1 build=$2 rootfs=$3
cd "$src"
bash scripts/install-deps --build-only
cuda=(-DXT_WITH_CUDA=OFF)
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=(-DXT_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "-DCMAKE_CUDA_ARCHITECTURES=${XT_CUDA_ARCHS:-90}")
  echo "build-stage: CUDA $(/usr/local/cuda/bin/nvcc --version | tail -n 1)"
else
  echo "build-stage: no CUDA toolkit given: CPU backend only"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}"
ninja -C "$build" xtwin xtwin-server xtwin-health
bash docker/runtime-tree.sh "$build" "$rootfs"
