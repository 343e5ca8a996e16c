#!/usr/bin/env bash
# The NanoVDB kind's two GPU traversals side by side (issue 29), on the GPU machine: the tree march
# (the default) and the brick pool (XT_NVDB_TRAVERSAL=bricks, projectors/xt_nvdb_bricks.h).
#   1. test_nvdb_cuda under each (the bricks one must pass the same bounds against the CPU reference;
#      channel launches keep the tree kernel), and compute-sanitizer memcheck of the bricks run;
#   2. xtwin-bench's NanoVDB scenes (g) CT-like torso, (h) whole-body torso, (r) the real head CT
#      (a second (r) table: the index form, nvdb-convert's default for mu), under each: the SUMMARY rows give ms/frame per model, the tables the steps and the error
#      against the double-precision CPU reference.
# Uses the carried binaries of scripts/device-pack (which also packs the real CT when the
# invesalius-examples package is installed here):
#   device tool: carry [".device/pack.tgz"], command
#     "tar xzf .device/pack.tgz -C .device && bench/nvdb_traversal.sh"
# Logs go to $OUT (the device tool's folder) or ./nvdb-traversal-out.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/nvdb-traversal-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=.device/bin
[ -x $D/test_nvdb_cuda ] && [ -x $D/xtwin-bench ] || { echo "nvdb_traversal: no carried binaries (scripts/device-pack)" >&2; exit 2; }
ct=()
[ -s .device/data/cranium.raw ] && ct=(--real-ct .device/data/cranium.raw)
nvidia-smi -L | tee "$OUT/gpu.txt"
echo "commit $(cat .device/COMMIT 2>/dev/null)"
for tr in tree bricks; do
  echo "== test_nvdb_cuda, XT_NVDB_TRAVERSAL=$tr"
  XT_NVDB_TRAVERSAL=$tr $D/test_nvdb_cuda >"$OUT/test_nvdb_cuda-$tr.log" 2>&1
  echo "rc $?: $(grep -c '^ok' "$OUT/test_nvdb_cuda-$tr.log") ok; $(tail -1 "$OUT/test_nvdb_cuda-$tr.log")"
  grep -E '^FAIL|check failed|requirement failed' "$OUT/test_nvdb_cuda-$tr.log" | head -10
done
if command -v compute-sanitizer >/dev/null; then
  XT_NVDB_TRAVERSAL=bricks XT_CUDA_TEST_QUICK=1 XT_TEST_NOFORK=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    $D/test_nvdb_cuda >"$OUT/memcheck-bricks.log" 2>&1
  echo "memcheck (bricks): rc $?; $(grep -h 'ERROR SUMMARY' "$OUT/memcheck-bricks.log" | sort -u | tr '\n' ' ')"
fi
for tr in tree bricks; do
  echo "== xtwin-bench --scenes ghr --no-variants, XT_NVDB_TRAVERSAL=$tr"
  XT_NVDB_TRAVERSAL=$tr $D/xtwin-bench --scenes ghr --no-variants "${ct[@]}" >"$OUT/bench-$tr.log" 2>&1
  echo "rc $?"
  sed -n '/^SUMMARY/,$p' "$OUT/bench-$tr.log"
done
