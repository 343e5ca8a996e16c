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
  # Debian 12's CMake 3.25.1 FindCUDAToolkit sets a property on CUDA::nvToolsExt even when the
  # toolkit has no libnvToolsExt (CUDA 13 dropped it), and configuring fails. CMake fixed it
  # upstream by testing for the target first; the development machines carry that one-line fix,
  # and the build stage applies the same.
  m=/usr/share/cmake-3.25/Modules/FindCUDAToolkit.cmake
  if [ -f "$m" ] && grep -q '^    if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)' "$m"; then
    sed -i 's/^    if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)/    if(TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)/' "$m"
    echo "build-stage: patched $m (CUDA::nvToolsExt tested before use, as upstream CMake does)"
  fi
  cuda=(-DXT_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "-DCMAKE_CUDA_ARCHITECTURES=${XT_CUDA_ARCHS:-90}")
  echo "build-stage: CUDA $(/usr/local/cuda/bin/nvcc --version | tail -n 1)"
else
  echo "build-stage: no CUDA toolkit given: CPU backend only"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}"
ninja -C "$build" xtwin xtwin-server xtwin-health
bash docker/runtime-tree.sh "$build" "$rootfs"
