# alloc.cmake: allocation-failure injection (tests/test_alloc_fail.c). Label cpu.
# malloc, calloc, realloc, free, strdup and aligned_alloc are wrapped at link time for this executable only, so
# that calls from the test and from our static libraries (xt_scene, xt_models, xt_loaders) go
# through the test's __wrap_* functions; shared libraries (libnifti2, Teem, zlib, xraylib) keep
# the real allocator, except jansson, which the test hands the wrapped one. Needs GNU ld or lld (--wrap).
find_path(XT_NIFTI_INCLUDE_DIR nifti1.h PATH_SUFFIXES nifti)
if(NOT TARGET PkgConfig::XT_ZLIB)
  pkg_check_modules(XT_ZLIB REQUIRED IMPORTED_TARGET zlib)
endif()
pkg_check_modules(XT_JANSSON REQUIRED IMPORTED_TARGET jansson)

xt_add_test(test_alloc_fail SOURCES test_alloc_fail.c
  LIBS xt_proj xt_loaders PkgConfig::XT_ZLIB PkgConfig::XT_JANSSON ${M_LIB} LABELS cpu)
target_include_directories(test_alloc_fail PRIVATE ${XT_NIFTI_INCLUDE_DIR})
target_link_options(test_alloc_fail PRIVATE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup,--wrap=aligned_alloc")
# The NanoVDB cases load the converter's files of the fuzz corpus (and the brick pool, xt_proj, is built from one).
target_compile_definitions(test_alloc_fail PRIVATE XT_FUZZ_NVDB_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/nvdb")
# No builtin malloc & co. in the test itself, so that GCC neither elides nor folds its direct calls.
target_compile_options(test_alloc_fail PRIVATE -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc
  -fno-builtin-free -fno-builtin-strdup -fno-builtin-aligned_alloc)
