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
# End to end through the real binaries: nvdb-convert, render, xtwin-server (label cpu).
if(TARGET xtwin AND TARGET xtwin-server AND XT_PYTHON3)
  add_test(NAME test_nvdb_e2e COMMAND ${XT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_nvdb_e2e.py
    $<TARGET_FILE:xtwin> $<TARGET_FILE:xtwin-server> ${CMAKE_CURRENT_BINARY_DIR}/nvdb_e2e_scratch)
  set_tests_properties(test_nvdb_e2e PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77)
endif()
