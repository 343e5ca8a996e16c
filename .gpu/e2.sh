#!/usr/bin/env bash
# session 19 call 2: issue 29's (g) and (h) under tree / dense / dense-each
set -u
cd "$(dirname "$0")/.."
[ -x .device/bin/xtwin-bench ] || { rm -rf .device/bin; tar xJf .device/fin.txz -C .device || exit 1; }
export LD_LIBRARY_PATH=$PWD/.device/lib
D=.device/bin
nvidia-smi -L; cat .device/COMMIT; date -u
XT_BENCH_NVDB_TRAVERSALS="tree dense dense-each" timeout 560 $D/xtwin-bench --scenes gh --no-variants > $OUT/bench-gh.log 2>&1
echo "bench gh rc $?"; grep -A40 '^SUMMARY' $OUT/bench-gh.log | grep -E "nanovdb|dense float|\((g|h)\)"
date -u
