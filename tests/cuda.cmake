# GPU tests of the CUDA projector (issue 3). Label "gpu": CI (no GPU) runs `ctest -LE gpu`; on a
# machine without a usable device every gpu test exits 77 (tests/xt_test_cuda.h), a skip.
if(XT_HAVE_CUDA AND TARGET xt_bench)
  xt_add_test(test_cuda SOURCES test_cuda.c LIBS xt_proj xt_models xt_bench LABELS gpu)
  set_tests_properties(test_cuda PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=300")
endif()

# test_gpu_skip (label cpu): runs every gpu test with no device visible and checks that each skips
# alike: exit 77 and one line "SKIP <binary>: no usable CUDA device ..." (tests/test_gpu_skip.py).
find_program(XT_GPU_SKIP_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(XT_HAVE_CUDA AND XT_GPU_SKIP_PYTHON3)
  add_test(NAME test_gpu_skip
    COMMAND ${XT_GPU_SKIP_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_skip.py ${CMAKE_CTEST_COMMAND}
            ${CMAKE_BINARY_DIR})
  set_tests_properties(test_gpu_skip PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77)
endif()
