#!/usr/bin/env bash
# session 13 GPU call 1: the runs the last session left (main 6b5086b + gpu-check python part)
set -u
mkdir -p .device && tar xzf .device/lite.tgz -C .device
export LD_LIBRARY_PATH=$PWD/.device/lib
D=.device/bin
nvidia-smi -L
for t in test_instr_cuda test_cuda test_adjoint_cuda test_chain_cuda; do
  echo "== $t"; timeout 120 $D/$t > $OUT/$t.log 2>&1; echo "rc $? $(tail -1 $OUT/$t.log)"
  grep -E '^FAIL|failed' $OUT/$t.log | head -5
done
XT_CUDA_TEST_QUICK=1 XT_TEST_NOFORK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $D/test_instr_cuda > $OUT/memcheck-instr.log 2>&1; echo "memcheck instr rc $?"
echo "== nvdb_traversal"; timeout 240 bench/nvdb_traversal.sh 2>&1 | tail -60
echo "== instr bench"; timeout 60 $D/xtwin-instr-bench 2>&1 | tail -15
