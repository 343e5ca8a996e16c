#!/usr/bin/env bash
# The NanoVDB kind's GPU traversals side by side (issue 29), on the GPU machine: the tree march
# (the default), the brick pool (XT_NVDB_TRAVERSAL=bricks, projectors/xt_nvdb_bricks.h) and its
# other loop shapes bricks2 .. bricks8 (projectors/xt_nvdb_bricks_flat.inc), all in one run:
#   0. the SASS of k_nvdb_bricks per variant (cuobjdump, when the machine has it; no GPU time):
#      $OUT/sass-<kernel>.txt, and each loop's instruction count (backward branches);
#   1. test_nvdb_cuda under each (every brick march must pass the same bounds against the CPU
#      reference; channel launches keep the tree kernel), and compute-sanitizer memcheck of the
#      brick runs (quick mode);
#   2. xtwin-bench's NanoVDB scenes (g) CT-like torso, (h) whole-body torso, (r) the real head CT
#      (a second (r) table: the index form, nvdb-convert's default for mu), in one process with the
#      NanoVDB models timed under each traversal (XT_BENCH_NVDB_TRAVERSALS): the SUMMARY rows give
#      ms/frame per model and traversal and the ratio to dense, the tables the steps and the error
#      against the double-precision CPU reference.
# NVDB_TRAVERSALS="tree bricks3" bench/nvdb_traversal.sh limits the run to those traversals.
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
TRS=${NVDB_TRAVERSALS:-tree bricks bricks2 bricks3 bricks4 bricks5 bricks6 bricks7 bricks8}
if command -v cuobjdump >/dev/null; then
  echo "== SASS of k_nvdb_bricks (mu launches; template <OUT, TR>: OUT 0 mu, TR 1..8 = bricks, bricks2..8) and the dense k_render"
  sass=$(mktemp) # the whole binary's SASS: too large to bring back
  cuobjdump --dump-sass $D/test_nvdb_cuda >"$sass" 2>&1
  # per kernel: the instructions, and every loop (a branch back to a label) with its length
  awk -v out="$OUT" '
    /Function : / { fn = $3; keep = fn ~ /k_nvdb_bricksILi0E|k_render/; n = 0; delete lab; if (keep) print "--", fn; next }
    !keep { next }
    { print > (out "/sass-" fn ".txt") }
    /^\.L_x_[0-9]+:/ { sub(":", "", $1); lab[$1] = n; next }
    /\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]*\*\/ / { n++ }
    /BRA / && match($0, /\.L_x_[0-9]+/) { l = substr($0, RSTART, RLENGTH); if (l in lab) printf "   loop: %d instructions (from %s)%s\n", n - lab[l], l, ($0 ~ /@/ ? " conditional" : "") }
  ' "$sass"
  rm -f "$sass"
fi
for tr in $TRS; do
  echo "== test_nvdb_cuda, XT_NVDB_TRAVERSAL=$tr"
  XT_NVDB_TRAVERSAL=$tr $D/test_nvdb_cuda >"$OUT/test_nvdb_cuda-$tr.log" 2>&1
  echo "rc $?: $(grep -c '^ok' "$OUT/test_nvdb_cuda-$tr.log") ok; $(tail -1 "$OUT/test_nvdb_cuda-$tr.log")"
  grep -E '^FAIL|check failed|requirement failed' "$OUT/test_nvdb_cuda-$tr.log" | head -10
  echo "[${SECONDS}s]"
done
# one process: the scenes are built once, each NanoVDB model timed under every traversal in turn
# (XT_BENCH_NVDB_TRAVERSALS; a row per model and traversal, the traversal in brackets)
echo "== xtwin-bench --scenes ghr --no-variants, XT_BENCH_NVDB_TRAVERSALS=\"$TRS\""
XT_BENCH_NVDB_TRAVERSALS="$TRS" $D/xtwin-bench --scenes ghr --no-variants "${ct[@]}" >"$OUT/bench-traversals.log" 2>&1
echo "rc $?"
sed -n '/^SUMMARY/,$p' "$OUT/bench-traversals.log"
echo "[${SECONDS}s]"
if command -v compute-sanitizer >/dev/null; then
  for tr in $TRS; do
    [ "$tr" = tree ] && continue
    XT_NVDB_TRAVERSAL=$tr XT_CUDA_TEST_QUICK=1 XT_TEST_NOFORK=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
      $D/test_nvdb_cuda >"$OUT/memcheck-$tr.log" 2>&1
    echo "memcheck ($tr): rc $?; $(grep -h 'ERROR SUMMARY' "$OUT/memcheck-$tr.log" | sort -u | tr '\n' ' ')"
  done
fi
echo "elapsed ${SECONDS}s"
