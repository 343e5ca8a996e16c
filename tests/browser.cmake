# The browser console in a real browser: Debian's chromium driven by playwright-core (Node.js),
# against the real xtwin-server (tests/browser/console_test.mjs). Exit 77 = skipped, with the reason
# printed (no chromium, no playwright-core in tests/browser/node_modules, no node).
if(TARGET xtwin-server)
  find_program(XT_NODE NAMES node nodejs)
  if(XT_NODE)
    add_test(NAME test_console_browser
      COMMAND ${XT_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/browser/console_test.mjs --server $<TARGET_FILE:xtwin-server>
        --out ${CMAKE_CURRENT_BINARY_DIR}/browser)
  else()
    add_test(NAME test_console_browser
      COMMAND sh -c "echo 'test_console_browser SKIPPED: node (Debian package nodejs) not installed'; exit 77")
  endif()
  # Alone: Chromium (several processes, WebGL in software) would load the two-core CI machine under
  # the server's timing tests running beside it.
  set_tests_properties(test_console_browser PROPERTIES TIMEOUT 300 LABELS "cpu;server;browser" SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE)
endif()
