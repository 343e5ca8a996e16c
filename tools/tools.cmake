# tools.cmake: the xtwin command-line program and its output writers.
#
# xt_cli   static library of the CLI's output files (through output/'s encoders: NPY, PNG, the
#          JSON sidecar), the all-or-nothing output set and the option-table parser; the tests
#          link it too.
# xtwin    the program. Optional parts, each detected rather than required:
#            xt_loaders (models/xt_load*.c)  -> XT_HAVE_LOADERS: `render --volume`
#            xt_bench   (bench/, added after tools/, so linked from a deferred call at the end of
#                        the top-level directory)  -> XT_HAVE_BENCH: `xtwin bench`
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)

add_library(xt_cli STATIC xt_out.c xt_opt.c)
target_include_directories(xt_cli PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(xt_cli PUBLIC xt_output xt_output_record xt_models xt_scene PkgConfig::JANSSON ${M_LIB}
  PRIVATE xt_warnings)

add_executable(xtwin xtwin.c xt_render_cmd.c xt_gmm_fit_cmd.c xt_replay_cmd.c xt_store_cmd.c)
# gmm-fit: the fitter (fit/) and the benchmark's head phantom (bench/, built with or without CUDA)
target_link_libraries(xtwin PRIVATE xt_cli xt_dicom xt_acq xt_imaging xt_fit xt_bench_phantoms xt_proj xt_models xt_scene ${M_LIB}
  xt_warnings)
target_compile_definitions(xtwin PRIVATE XT_VERSION="${PROJECT_VERSION}")

option(XT_CLI_LOADERS "Link xtwin with xt_loaders (render --volume) when that target exists" ON)
if(TARGET xt_loaders AND XT_CLI_LOADERS)
  target_link_libraries(xtwin PRIVATE xt_loaders)
  target_compile_definitions(xtwin PRIVATE XT_HAVE_LOADERS)
  message(STATUS "xtwin: volume loading ON")
else()
  message(STATUS "xtwin: volume loading OFF (no xt_loaders target)")
endif()

# `xtwin nvdb-convert` (tools/xt_nvdb_cmd.c): needs the loaders and NanoVDB's builder (C++).
if(TARGET xt_loaders AND TARGET xt_nvdb_build AND XT_CLI_LOADERS)
  target_sources(xtwin PRIVATE xt_nvdb_cmd.c)
  target_link_libraries(xtwin PRIVATE xt_nvdb_build)
  target_compile_definitions(xtwin PRIVATE XT_HAVE_NVDB_CONVERT)
endif()

# Runs after every subdirectory of the top level has been processed, so bench/ is known.
function(xt__tools_link_bench)
  if(TARGET xt_bench)
    get_target_property(_type xt_bench TYPE)
    if(_type MATCHES "LIBRARY$")
      target_link_libraries(xtwin PRIVATE xt_bench)
      target_include_directories(xtwin PRIVATE ${CMAKE_SOURCE_DIR}/bench)
      target_compile_definitions(xtwin PRIVATE XT_HAVE_BENCH)
      message(STATUS "xtwin: bench ON")
      return()
    endif()
  endif()
  message(STATUS "xtwin: bench OFF (no xt_bench library target)")
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL xt__tools_link_bench)

# `xtwin refak` (issue 24): the IFU's reference air kerma set-up and its measurement through the
# acquisition layer, a library so that tests/test_refak.c measures with the same code.
add_library(xt_refak STATIC xt_refak.c)
target_include_directories(xt_refak PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(xt_refak PUBLIC xt_acq xt_imaging xt_proj xt_models xt_scene ${M_LIB} PRIVATE xt_warnings)
target_sources(xtwin PRIVATE xt_refak_cmd.c)
target_link_libraries(xtwin PRIVATE xt_refak)

# `xtwin dataset`: the front end (options, messages, exit codes) over dataset/'s xt_dataset.
target_sources(xtwin PRIVATE xt_dataset_cmd.c)
target_link_libraries(xtwin PRIVATE xt_dataset)
