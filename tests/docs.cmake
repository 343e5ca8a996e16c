# test_docs (tests/docs/run_docs.py): the shell examples of README.md and docs/ marked runnable,
# run as written on the CPU with the sample data tests/docs/make_sample.py writes; it also makes
# the console's screenshot (docs/console.md) in its working folder. Not under ASan: what it checks
# is the text of the documentation, which the sanitizers cannot make any truer, and the examples'
# renders cost minutes there (every program it runs is tested under ASan by its own suite).
if(TARGET xtwin AND TARGET xtwin-server AND NOT XT_SANITIZE)
  add_test(NAME test_docs
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs/run_docs.py --build ${CMAKE_BINARY_DIR}
      --source ${PROJECT_SOURCE_DIR} --out ${CMAKE_CURRENT_BINARY_DIR}/docs-run)
  # serial: it drives Chromium (the console's screenshot), like test_console_browser
  set_tests_properties(test_docs PROPERTIES TIMEOUT 600 LABELS "cpu;docs" RUN_SERIAL TRUE)
endif()
