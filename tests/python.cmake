# The Python client (api/python/xtwin) against the real server, with Debian's /usr/bin/python3
# (python3-numpy, python3-websockets; 77 = skipped when one is missing).
if(TARGET xtwin-server AND EXISTS /usr/bin/python3)
  add_test(NAME test_python_client
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_client.py --server $<TARGET_FILE:xtwin-server>)
  set_tests_properties(test_python_client PROPERTIES TIMEOUT 300 LABELS "cpu;server;python" SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()

# The test harness for control-software teams (xtwin.testing, a pytest plugin): the example tests
# of an imaginary control application (api/python/examples/test_control_app.py) run through it,
# one of them checking that its assertions fail when they must. Needs python3-pytest (77 without).
if(TARGET xtwin-server AND EXISTS /usr/bin/python3)
  add_test(NAME test_python_harness
    COMMAND sh -c "/usr/bin/python3 -c 'import pytest' 2>/dev/null || { echo 'SKIP: python3-pytest missing'; exit 77; }; exec /usr/bin/python3 -m pytest -q -p no:cacheprovider -p xtwin.testing --xtwin-server \"$1\" \"$2\"" sh
      $<TARGET_FILE:xtwin-server> ${CMAKE_SOURCE_DIR}/api/python/examples/test_control_app.py)
  set_tests_properties(test_python_harness PROPERTIES TIMEOUT 300 LABELS "cpu;server;python" SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;PYTHONPATH=${CMAKE_SOURCE_DIR}/api/python")
endif()
