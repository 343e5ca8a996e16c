# Volume loaders and HU conversion (models/xt_load*.c, models/xt_hu.c).
find_path(XT_NIFTI_INCLUDE_DIR nifti2_io.h PATH_SUFFIXES nifti)
find_library(XT_NIFTI2_LIB nifti2)
find_library(XT_ZNZ_LIB znz)
pkg_check_modules(XT_ZLIB REQUIRED IMPORTED_TARGET zlib)

# The test writes NIfTI-2 through libnifti2 and compresses with zlib itself.
xt_add_test(test_loaders SOURCES test_loaders.c
  LIBS xt_loaders ${XT_NIFTI2_LIB} ${XT_ZNZ_LIB} PkgConfig::XT_ZLIB ${M_LIB} LABELS cpu)
target_include_directories(test_loaders PRIVATE ${XT_NIFTI_INCLUDE_DIR})
target_compile_definitions(test_loaders PRIVATE XT_FUZZ_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/loaders")

# libFuzzer target: clang only (-fsanitize=fuzzer). Not part of ctest; run it by hand:
#   build/tests/fuzz_loaders -max_total_time=60 tests/fuzz/loaders
# The loader sources are compiled into the fuzzer itself so that they carry libFuzzer's coverage
# instrumentation (a prebuilt xt_loaders would leave the fuzzer blind).
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(XT_FUZZ_LOADER_SOURCES "")
  foreach(f xt_load.c xt_load_nifti.c xt_load_nrrd.c xt_load_mha.c xt_load_dicom.c xt_dicom_gdcm.cpp xt_hu.c)
    list(APPEND XT_FUZZ_LOADER_SOURCES ${PROJECT_SOURCE_DIR}/models/${f})
  endforeach()
  add_executable(fuzz_loaders fuzz/fuzz_loaders.c ${XT_FUZZ_LOADER_SOURCES})
  target_compile_options(fuzz_loaders PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_loaders PRIVATE -fsanitize=fuzzer,address,undefined)
  target_include_directories(fuzz_loaders PRIVATE ${PROJECT_SOURCE_DIR}/models ${NIFTI_INCLUDE_DIR} ${TEEM_INCLUDE_DIR})
  target_include_directories(fuzz_loaders SYSTEM PRIVATE ${GDCM_INCLUDE_DIR})
  target_link_libraries(fuzz_loaders PRIVATE xt_models ${NIFTI2_LIB} ${ZNZ_LIB} ${TEEM_LIB} PkgConfig::XT_ZLIB ${M_LIB}
    ${GDCM_MSFF_LIB} ${GDCM_DSED_LIB} ${GDCM_Common_LIB} ${GDCM_DICT_LIB} ${GDCM_IOD_LIB} xt_warnings)
endif()

# Real data (issue 14): DICOM series written by the test with pydicom and pydicom's own CT test
# files, NIfTI traps, HU sanity, compared against the same volume written as MetaImage/NIfTI by
# the test (tests/test_dicom.py, Debian's python3 + numpy + pydicom; skipped, exit 77, when pydicom
# is missing). xt_load_dump prints what xt_model_load made of a path.
pkg_check_modules(XT_JANSSON_T REQUIRED IMPORTED_TARGET jansson)
add_executable(xt_load_dump xt_load_dump.c)
target_link_libraries(xt_load_dump PRIVATE xt_loaders xt_output PkgConfig::XT_JANSSON_T xt_warnings)
xt_add_test(test_real_data SOURCES test_real_data.c LIBS xt_cli xt_loaders xt_models xt_scene ${M_LIB} LABELS cpu)
if(TARGET xtwin AND EXISTS /usr/bin/python3)
  if(TARGET xtwin-server)
    set(XT_DICOM_SERVER $<TARGET_FILE:xtwin-server>)
  else()
    set(XT_DICOM_SERVER -)
  endif()
  add_test(NAME test_dicom
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_dicom.py $<TARGET_FILE:xtwin> $<TARGET_FILE:xt_load_dump>
            ${XT_DICOM_SERVER} ${CMAKE_CURRENT_BINARY_DIR}/dicom_scratch)
  # RUN_SERIAL: it renders and starts a server; the stream tests beside it judge pacing.
  set_tests_properties(test_dicom PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endif()
