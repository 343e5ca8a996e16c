#!/usr/bin/env bash
# session 19 call 3: the dense working set with the trim to the blocks' content: tests, memcheck, benches r g h
set -u
cd "$(dirname "$0")/.."
rm -rf .device/bin; tar xJf .device/fin.txz -C .device || exit 1
export LD_LIBRARY_PATH=$PWD/.device/lib
D=.device/bin
nvidia-smi -L; cat .device/COMMIT; date -u
for tr in dense tree; do
  printf "test_nvdb_cuda %s: " $tr; XT_NVDB_TRAVERSAL=$tr timeout 120 $D/test_nvdb_cuda > $OUT/nvdb-$tr.log 2>&1; echo "rc $? $(tail -1 $OUT/nvdb-$tr.log)"
  grep -E "FAIL|check failed|error" $OUT/nvdb-$tr.log | head -8
done
printf "test_chain_cuda dense: "; XT_NVDB_TRAVERSAL=dense timeout 90 $D/test_chain_cuda > $OUT/chain-dense.log 2>&1; echo "rc $? $(tail -1 $OUT/chain-dense.log)"
grep -E "FAIL|check failed" $OUT/chain-dense.log | head -5
printf "test_cuda: "; timeout 90 $D/test_cuda 2>&1 | tail -1
for tr in dense dense-each; do
  XT_NVDB_TRAVERSAL=$tr XT_CUDA_TEST_QUICK=1 XT_TEST_NOFORK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    $D/test_nvdb_cuda > /tmp/mem-nvdb.log 2>&1
  echo "memcheck test_nvdb_cuda $tr rc $?"; grep -E "ERROR SUMMARY|passed" /tmp/mem-nvdb.log | tail -2
done
date -u
XT_BENCH_NVDB_TRAVERSALS="dense tree" timeout 150 $D/xtwin-bench --scenes r --no-variants \
  --real-ct .device/data/cranium.raw > $OUT/bench-r.log 2>&1
echo "bench r rc $?"; grep -A30 '^SUMMARY' $OUT/bench-r.log | grep -E "nanovdb|dense float|\(r\)"
grep -E "nanovdb|dense float" $OUT/bench-r.log | grep -v "^\(r\)" | head -20
date -u
XT_BENCH_NVDB_TRAVERSALS="dense" timeout 300 $D/xtwin-bench --scenes gh --no-variants > $OUT/bench-gh.log 2>&1
echo "bench gh rc $?"; grep -A40 '^SUMMARY' $OUT/bench-gh.log | grep -E "nanovdb|dense float|\((g|h)\)"
date -u
