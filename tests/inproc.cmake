# xtwin in process (issue 30): the Python module xtwin._core (pymod/) with Debian's /usr/bin/python3,
# from the build tree (PYTHONPATH=<build>/python). Under ASan the module needs the sanitizer's
# runtime loaded first into an uninstrumented python (LD_PRELOAD), and CPython's own allocations
# at exit are not leaks of ours (detect_leaks=0; the C operators' leaks are test_adjoint's to find).
# 77 = skipped (numpy or torch missing).
if(NOT TARGET xt_pymod)
  return()
endif()
set(_xt_py_env "PYTHONDONTWRITEBYTECODE=1" "PYTHONPATH=${XT_PYMOD_DIR}" "OMP_NUM_THREADS=1")
if(XT_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE _xt_asan
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND _xt_py_env "LD_PRELOAD=${_xt_asan}" "ASAN_OPTIONS=detect_leaks=0")
endif()
add_test(NAME test_inproc
  COMMAND ${XT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_inproc.py --xtwin $<TARGET_FILE:xtwin>)
add_test(NAME test_inproc_torch COMMAND ${XT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_inproc_torch.py)
set_tests_properties(test_inproc test_inproc_torch PROPERTIES TIMEOUT 300 LABELS "cpu;python" SKIP_RETURN_CODE 77
  ENVIRONMENT "${_xt_py_env}")
# The GPU path (ctest label gpu; scripts/gpu-check runs it on the GPU machine): DLPack capsules of
# device memory read by a consumer of our own, and the CUDA adjoint's dot-product test. Only in CUDA
# builds (never sanitized), so that test_gpu_skip, which runs it without this environment, can load
# the module.
if(XT_HAVE_CUDA AND NOT XT_SANITIZE)
add_test(NAME test_inproc_cuda
  COMMAND ${XT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_inproc_cuda.py --python ${XT_PYMOD_DIR})
set_tests_properties(test_inproc_cuda PROPERTIES TIMEOUT 300 LABELS "gpu;python" SKIP_RETURN_CODE 77
  ENVIRONMENT "${_xt_py_env}")
endif()
# The examples run as users run them (the registration must find the pose within 0.5 deg and 0.5 mm);
# not under ASan, where they would only repeat test_inproc_torch's calls at ten times the cost.
if(NOT XT_SANITIZE)
  add_test(NAME test_inproc_examples COMMAND sh -c
    "\"$1\" \"$2/inproc_registration.py\" --steps 110 --threads 2 && \"$1\" \"$2/inproc_dataloader.py\" --batches 2 --batch 4 --workers 1"
    sh ${XT_PYTHON} ${CMAKE_SOURCE_DIR}/api/python/examples)
  set_tests_properties(test_inproc_examples PROPERTIES TIMEOUT 300 LABELS "cpu;python" SKIP_RETURN_CODE 77
    ENVIRONMENT "${_xt_py_env}")
endif()
