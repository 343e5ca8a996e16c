# Golden outputs of every front end that makes a frame (issue 23, point 6): `xtwin render --chain`
# frames and sidecars, a small `xtwin dataset`, and an `xtwin-server` lockstep stream capture,
# re-recorded with this build's binaries and compared byte for byte with tests/golden/<backend>/
# (tests/golden/README.md: what each golden is, how it was recorded, what is masked and why).
# Debian's /usr/bin/python3, standard library only. test_golden_cuda exits 77 (skipped) while
# tests/golden/cuda/ is absent or no CUDA device is usable.
if(TARGET xtwin AND TARGET xtwin-server AND EXISTS /usr/bin/python3)
  foreach(backend cpu cuda)
    add_test(NAME test_golden_${backend}
      COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/golden/compare.py --backend ${backend}
        --xtwin $<TARGET_FILE:xtwin> --server $<TARGET_FILE:xtwin-server>)
  endforeach()
  set_tests_properties(test_golden_cpu PROPERTIES TIMEOUT 300 LABELS "cpu;golden")
  set_tests_properties(test_golden_cuda PROPERTIES TIMEOUT 600 LABELS "gpu;golden" SKIP_RETURN_CODE 77)
endif()
