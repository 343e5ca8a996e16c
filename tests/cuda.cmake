# GPU tests of the CUDA projector (issue 3). Label "gpu": CI (no GPU) runs `ctest -LE gpu`; on a
# machine without a device the test prints SKIP and passes.
if(XT_HAVE_CUDA AND TARGET xt_bench)
  xt_add_test(test_cuda SOURCES test_cuda.c LIBS xt_proj xt_models xt_bench LABELS gpu)
  set_tests_properties(test_cuda PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=300")
endif()
