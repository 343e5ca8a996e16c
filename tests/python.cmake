# The Python client (api/python/xtwin) against the real server, with Debian's /usr/bin/python3
# (python3-numpy, python3-websockets; 77 = skipped when one is missing).
if(TARGET xtwin-server AND EXISTS /usr/bin/python3)
  add_test(NAME test_python_client
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_client.py --server $<TARGET_FILE:xtwin-server>)
  set_tests_properties(test_python_client PROPERTIES TIMEOUT 300 LABELS "cpu;server;python" SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
