# The imaging chain's benchmark (issue 10): xtwin-chain-bench. Needs the CUDA backend for its GPU
# scenes (its CPU scene runs anywhere it builds).
if(XT_HAVE_CUDA AND TARGET xt_imaging AND TARGET xt_bench)
  add_executable(xtwin-chain-bench ${CMAKE_CURRENT_LIST_DIR}/xt_chain_bench.c)
  target_link_libraries(xtwin-chain-bench PRIVATE xt_acq xt_imaging xt_bench xt_warnings)
endif()
# The CPU backend's chain (issue 10's CPU target): builds with or without CUDA.
if(TARGET xt_imaging)
  add_executable(xtwin-chain-cpu-bench ${CMAKE_CURRENT_LIST_DIR}/xt_chain_cpu_bench.c)
  target_link_libraries(xtwin-chain-cpu-bench PRIVATE xt_imaging xt_bench_phantoms xt_warnings)
endif()
# Instruments (issue 26): what ten long instruments add to a chain frame of the thorax, and shape
# updates every frame. CUDA by default; --backend cpu runs it anywhere it builds.
if(TARGET xt_imaging AND TARGET xt_acq)
  add_executable(xtwin-instr-bench ${CMAKE_CURRENT_LIST_DIR}/xt_instr_bench.c)
  target_link_libraries(xtwin-instr-bench PRIVATE xt_acq xt_imaging xt_proj xt_models xt_warnings ${M_LIB})
endif()
