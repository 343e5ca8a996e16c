# gmm.cmake: tests of the Gaussian-mixture kind (issue 8). Label cpu, except test_gmm_cuda (gpu).
#   test_gmm_proj   the CPU reference on mixtures against closed forms and quadrature
xt_add_test(test_gmm_proj SOURCES test_gmm_proj.c LIBS xt_proj xt_models ${M_LIB} LABELS cpu)
#   test_gmm        the kind and its files: layout, round trips, JSON, rejections, BVH, fuzz seeds
if(NOT TARGET PkgConfig::XT_ZLIB)
  pkg_check_modules(XT_ZLIB REQUIRED IMPORTED_TARGET zlib)
endif()
xt_add_test(test_gmm SOURCES test_gmm.c LIBS xt_loaders xt_models PkgConfig::XT_ZLIB ${M_LIB} LABELS cpu)
target_compile_definitions(test_gmm PRIVATE XT_FUZZ_GMM_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/gmm")
#   test_gmm_cuda   the CUDA kind against the reference (label gpu: scripts/gpu-check runs it)
if(XT_HAVE_CUDA)
  xt_add_test(test_gmm_cuda SOURCES test_gmm_cuda.c LIBS xt_fit xt_proj xt_models ${M_LIB} LABELS gpu)
  target_include_directories(test_gmm_cuda PRIVATE ${PROJECT_SOURCE_DIR}/fit)
  set_tests_properties(test_gmm_cuda PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=600")
endif()
#   test_gmm_footprint  the CUDA kind's math (xt_gmm_footprint.h) on the host: no GPU needed, so
#                       label cpu, but it needs nvcc to build (C++ and CUDA vector types)
if(XT_HAVE_CUDA)
  xt_add_test(test_gmm_footprint SOURCES test_gmm_footprint.cu LIBS xt_proj xt_models ${M_LIB} LABELS cpu)
  target_compile_options(test_gmm_footprint PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XT_WERROR}>>:-Werror=all-warnings>)
  if(CMAKE_CUDA_ARCHITECTURES STREQUAL "75" OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
    set_property(TARGET test_gmm_footprint PROPERTY CUDA_ARCHITECTURES 90)
  endif()
endif()
#   test_gmm_fit    the fitter: gradient vs finite differences, index -> model frame, head fits
xt_add_test(test_gmm_fit SOURCES test_gmm_fit.c LIBS xt_fit xt_proj xt_models ${M_LIB} LABELS cpu)
target_include_directories(test_gmm_fit PRIVATE ${PROJECT_SOURCE_DIR}/fit)
#   test_gmm_py     the R2-Gaussian importer (tools/r2gaussian_import.py) and xtwin gmm-fit end
#                   to end (Debian's python3 + numpy; skipped, exit 77, without numpy)
if(TARGET xtwin)
  find_program(XT_GMM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT XT_GMM_PYTHON3)
    find_program(XT_GMM_PYTHON3 python3)
  endif()
  if(XT_GMM_PYTHON3)
    add_test(NAME test_gmm_py
      COMMAND ${XT_GMM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_gmm_py.py $<TARGET_FILE:xtwin>
              ${PROJECT_SOURCE_DIR}/tools/r2gaussian_import.py ${CMAKE_CURRENT_BINARY_DIR}/gmm_scratch)
    set_tests_properties(test_gmm_py PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77)
  endif()
endif()
#   fuzz_models     the libFuzzer target of these readers and of NanoVDB's: tests/nvdb.cmake
