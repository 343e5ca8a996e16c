# Server benchmark: a libwebsockets stream client (C, so it runs on machines without Python
# packages) and bench/server/run_bench.sh, which drives xtwin-server with it. Results:
# docs/BENCHMARKS.md (server section) and docs/server.md.
if(TARGET xtwin-server)
  pkg_check_modules(LWS_BENCH REQUIRED IMPORTED_TARGET libwebsockets)
  add_executable(bench_server_client ${CMAKE_CURRENT_SOURCE_DIR}/server/bench_client.c)
  target_include_directories(bench_server_client PRIVATE ${CMAKE_SOURCE_DIR}/api)
  target_link_libraries(bench_server_client PRIVATE PkgConfig::LWS_BENCH Threads::Threads ${M_LIB} xt_warnings)
  # Stream compression (api/stream.md, "Compression"): zstd 1 and 3 and LZ4 on real frames.
  pkg_check_modules(ZSTD_BENCH IMPORTED_TARGET libzstd)
  pkg_check_modules(LZ4_BENCH IMPORTED_TARGET liblz4)
  if(ZSTD_BENCH_FOUND AND LZ4_BENCH_FOUND)
    add_executable(bench_codec ${CMAKE_CURRENT_SOURCE_DIR}/server/codec_bench.c)
    target_link_libraries(bench_codec PRIVATE PkgConfig::ZSTD_BENCH PkgConfig::LZ4_BENCH xt_warnings)
  endif()
endif()
