# `cmake --install` into a temporary prefix, and the installed programs and client used from there
# (tests/test_install.sh): what a user who installs gets, without the source tree.
if(TARGET xtwin AND TARGET xtwin-server)
  add_test(NAME test_install
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install-prefix)
  set_tests_properties(test_install PROPERTIES TIMEOUT 120 LABELS "cpu;install")
endif()
