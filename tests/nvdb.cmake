# The NanoVDB kind (issue 9). test_nvdb: loader, converter and the CPU reference (label cpu).
# test_nvdb_cuda: the CUDA kind against the CPU reference (label gpu; SKIP without a device).
if(TARGET xt_loaders AND TARGET xt_nvdb_build)
  xt_add_test(test_nvdb SOURCES test_nvdb.c LIBS xt_proj xt_loaders xt_nvdb_build ${M_LIB} LABELS cpu)
  set_tests_properties(test_nvdb PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=300")
endif()
if(XT_HAVE_CUDA AND TARGET xt_nvdb_build)
  xt_add_test(test_nvdb_cuda SOURCES test_nvdb_cuda.c LIBS xt_proj xt_nvdb_build ${M_LIB} LABELS gpu)
  set_tests_properties(test_nvdb_cuda PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=300")
endif()
