# gmm.cmake: tests of the Gaussian-mixture kind (issue 8). Label cpu, except test_gmm_cuda (gpu).
#   test_gmm_proj   the CPU reference on mixtures against closed forms and quadrature
xt_add_test(test_gmm_proj SOURCES test_gmm_proj.c LIBS xt_proj xt_models ${M_LIB} LABELS cpu)
#   test_gmm        the kind and its files: layout, round trips, JSON, rejections, BVH, fuzz seeds
if(NOT TARGET PkgConfig::XT_ZLIB)
  pkg_check_modules(XT_ZLIB REQUIRED IMPORTED_TARGET zlib)
endif()
xt_add_test(test_gmm SOURCES test_gmm.c LIBS xt_loaders xt_models PkgConfig::XT_ZLIB ${M_LIB} LABELS cpu)
target_compile_definitions(test_gmm PRIVATE XT_FUZZ_GMM_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/gmm")
