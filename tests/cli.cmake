# cli.cmake: tests of the xtwin program (tools/). Label cpu.
#   test_cli        the writers, the output set and the option parser, in C (tests/test_cli.c)
#   test_cli_e2e    the real binary end to end (tests/test_cli.py, Debian's python3 + numpy);
#                   skipped (exit 77) when numpy is missing
if(TARGET xtwin)
  xt_add_test(test_cli SOURCES test_cli.c LIBS xt_cli LABELS cpu)

  find_program(XT_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT XT_PYTHON3)
    find_program(XT_PYTHON3 python3)
  endif()
  if(XT_PYTHON3)
    add_test(NAME test_cli_e2e
      COMMAND ${XT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR}/tools/xt_render_cmd.c ${CMAKE_CURRENT_BINARY_DIR}/cli_scratch)
    set_tests_properties(test_cli_e2e PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77)
  else()
    message(STATUS "xtwin: python3 not found, test_cli_e2e not registered")
  endif()
endif()
