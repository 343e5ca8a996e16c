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

# The readers of the model files that are not volumes (.nvdb, .xgmm, .gmm, .gmm.json) under bad input.
# fuzz_models: libFuzzer target (clang only; scripts/long-fuzz fuzz_models). Their sources and the
# CPU reference are compiled into the fuzzer itself so that they carry its coverage instrumentation.
# test_fuzz_models: the seed corpora tests/fuzz/nvdb and tests/fuzz/gmm through the same code.
if(TARGET xt_loaders)
  xt_add_test(test_fuzz_models SOURCES test_fuzz_models.c fuzz/fuzz_models.c LIBS xt_proj xt_loaders ${M_LIB}
    LABELS cpu)
  target_include_directories(test_fuzz_models PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
  target_compile_definitions(test_fuzz_models PRIVATE XT_FUZZ_NO_ENTRY
    XT_FUZZ_NVDB_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/nvdb"
    XT_FUZZ_GMM_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/gmm")
endif()
if(TARGET xt_loaders AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(XT_FUZZ_MODEL_SOURCES "")
  foreach(f models/xt_model_load.c models/xt_nvdb.c models/xt_gmm.c models/xt_gmm_io.c models/xt_gmm_json.c
            projectors/xt_proj.c projectors/proj_cpu.c projectors/proj_cpu_voxel.c projectors/proj_cpu_gmm.c
            projectors/proj_cpu_nvdb.c projectors/xt_channels.c)
    list(APPEND XT_FUZZ_MODEL_SOURCES ${PROJECT_SOURCE_DIR}/${f})
  endforeach()
  add_executable(fuzz_models fuzz/fuzz_models.c ${XT_FUZZ_MODEL_SOURCES})
  target_compile_options(fuzz_models PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_models PRIVATE -fsanitize=fuzzer,address,undefined)
  target_include_directories(fuzz_models PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fuzz ${PROJECT_SOURCE_DIR}/projectors)
  target_link_libraries(fuzz_models PRIVATE xt_loaders xt_models xt_scene Threads::Threads ${M_LIB} xt_warnings)
endif()

# A CT's background and the real head CT of Debian's invesalius-examples (issue 29; label cpu).
# scripts/real-ct extracts it into the build folder; without the package the binary runs its
# synthetic test and exits 77 (skipped). real_ct_gmm_fit fits the CT at half resolution: ~8 s,
# ~40 s under ASan (the 300 s per test is for a loaded CI machine).
if(TARGET xt_loaders AND TARGET xt_nvdb_build)
  xt_add_test(test_real_ct SOURCES test_real_ct.c LIBS xt_fit xt_proj xt_loaders xt_nvdb_build ${M_LIB} LABELS cpu)
  set_tests_properties(test_real_ct PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT
    "XT_REAL_CT_SCRIPT=${PROJECT_SOURCE_DIR}/scripts/real-ct;XT_REAL_CT_DIR=${CMAKE_CURRENT_BINARY_DIR}/real_ct;XT_TEST_TIMEOUT=300")
endif()
