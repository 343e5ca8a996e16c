# The projector benchmark (issue 3): library xt_bench (linked into `xtwin bench` by the CLI when
# this target exists) and the standalone xtwin-bench. Needs the CUDA backend.
if(XT_HAVE_CUDA)
  add_library(xt_bench STATIC ${CMAKE_CURRENT_LIST_DIR}/xt_bench.c ${CMAKE_CURRENT_LIST_DIR}/xt_bench_gmm.c
    ${CMAKE_CURRENT_LIST_DIR}/xt_bench_nvdb.c)
  target_include_directories(xt_bench PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(xt_bench PUBLIC xt_bench_phantoms xt_fit xt_proj xt_models xt_scene xt_nvdb_build PRIVATE xt_warnings)
  target_compile_definitions(xt_bench PRIVATE XT_BENCH_HAVE_FIT)
  set_target_properties(xt_bench PROPERTIES POSITION_INDEPENDENT_CODE ON)
  add_executable(xtwin-bench ${CMAKE_CURRENT_LIST_DIR}/xt_bench_main.c)
  target_link_libraries(xtwin-bench PRIVATE xt_bench xt_warnings)
endif()
# The host's device-to-host bandwidth, alone and from every GPU at once (issue 12's two-GPU
# scaling is bound by it when frames are rendered faster than they can be copied out).
if(XT_HAVE_CUDA)
  add_executable(xtwin-d2h-probe ${CMAKE_CURRENT_LIST_DIR}/xt_d2h_probe.c)
  target_link_libraries(xtwin-d2h-probe PRIVATE CUDA::cudart_static Threads::Threads xt_warnings)
endif()
