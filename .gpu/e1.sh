#!/usr/bin/env bash
# session 19 call 1: issue 29's dense working set on a GPU: tests, memcheck, the real CT bench; session 18's tree as one binary
set -u
cd "$(dirname "$0")/.."
rm -rf .device/bin; tar xJf .device/fin.txz -C .device || exit 1
export LD_LIBRARY_PATH=$PWD/.device/lib
D=.device/bin
nvidia-smi -L; cat .device/COMMIT; date -u
for tr in dense dense-each tree; do
  printf "test_nvdb_cuda %s: " $tr; XT_NVDB_TRAVERSAL=$tr timeout 120 $D/test_nvdb_cuda > $OUT/nvdb-$tr.log 2>&1; echo "rc $? $(tail -1 $OUT/nvdb-$tr.log)"
  grep -E "FAIL|check failed|error" $OUT/nvdb-$tr.log | head -8
done
date -u
XT_BENCH_NVDB_TRAVERSALS="tree dense dense-each" timeout 150 $D/xtwin-bench --scenes r --no-variants \
  --real-ct .device/data/cranium.raw > $OUT/bench-r.log 2>&1
echo "bench r rc $?"; grep -A30 '^SUMMARY' $OUT/bench-r.log | grep -E "nanovdb|dense float|\(r\)"
date -u
printf "test_chain_cuda dense: "; XT_NVDB_TRAVERSAL=dense timeout 90 $D/test_chain_cuda > $OUT/chain-dense.log 2>&1; echo "rc $? $(tail -1 $OUT/chain-dense.log)"
grep -E "FAIL|check failed" $OUT/chain-dense.log | head -5
for t in test_cuda test_instr_cuda test_contrast_cuda test_chain_cuda; do
  printf "%s: " $t; timeout 90 $D/$t 2>&1 | grep -E "FAIL|passed|check failed" | tail -3 | tr '\n' ' '; echo
done
date -u
XT_NVDB_TRAVERSAL=dense-each XT_CUDA_TEST_QUICK=1 XT_TEST_NOFORK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $D/test_nvdb_cuda > /tmp/mem-nvdb.log 2>&1
echo "memcheck test_nvdb_cuda dense-each rc $?"; grep -E "ERROR SUMMARY|passed" /tmp/mem-nvdb.log | tail -2
date -u
timeout 60 $D/xtwin-instr-bench --frames 100 2>&1 | grep -E "^  thorax|added|path"
date -u
