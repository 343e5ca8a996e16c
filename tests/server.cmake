# xtwin-server tests: real clients over loopback against the real binary, each test on its own
# ephemeral ports. REST through libcurl (C), the stream through Debian's python3-websockets
# (/usr/bin/python3, not whatever python3 is first on PATH). Skipped when the server is not built.
if(TARGET xtwin-server)
  pkg_check_modules(CURL_T IMPORTED_TARGET libcurl)
  if(CURL_T_FOUND)
    xt_add_test(test_server_rest SOURCES server/test_server_rest.c LIBS xt_server_core PkgConfig::CURL_T LABELS "cpu;server")
    target_compile_definitions(test_server_rest PRIVATE XT_SERVER_BIN="$<TARGET_FILE:xtwin-server>"
      XT_API_DIR="${CMAKE_SOURCE_DIR}/api")
    add_dependencies(test_server_rest xtwin-server)
  else()
    message(WARNING "test_server_rest skipped: libcurl4-openssl-dev not found")
  endif()
  set(XT_PY3 /usr/bin/python3)
  if(EXISTS ${XT_PY3})
    add_test(NAME test_server_stream
      COMMAND ${XT_PY3} ${CMAKE_CURRENT_SOURCE_DIR}/server/test_stream.py --server $<TARGET_FILE:xtwin-server>)
    # 77: python3-websockets missing -> skipped, not failed.
    set_tests_properties(test_server_stream PROPERTIES TIMEOUT 600 LABELS "cpu;server" SKIP_RETURN_CODE 77)
  endif()
endif()
