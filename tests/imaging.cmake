# The imaging chain (issue 10): spectra, channels, polychromatic detection, detector, processing.
if(TARGET xt_imaging)
  xt_add_test(test_spectrum SOURCES test_spectrum.c LIBS xt_imaging LABELS cpu)
endif()
xt_add_test(test_channels SOURCES test_channels.c LIBS xt_proj xt_models LABELS cpu)
xt_add_test(test_chain SOURCES test_chain.c LIBS xt_imaging LABELS cpu)
# Seconds of both cores (noise spectra, edges): alone, so the timing tests of other areas keep their cores.
set_tests_properties(test_chain PROPERTIES RUN_SERIAL TRUE)
# Exposure, dose, dose-rate control (issue 11).
xt_add_test(test_dose SOURCES test_dose.c LIBS xt_imaging LABELS cpu)
if(XT_HAVE_CUDA)
  xt_add_test(test_chain_cuda SOURCES test_chain_cuda.c LIBS xt_imaging LABELS gpu)
  set_tests_properties(test_chain_cuda PROPERTIES ENVIRONMENT "XT_TEST_TIMEOUT=300")
  if(TARGET xt_nvdb_build) # NanoVDB grids in the mixed scenes
    target_link_libraries(test_chain_cuda PRIVATE xt_nvdb_build)
    target_compile_definitions(test_chain_cuda PRIVATE XT_TEST_NVDB=1)
  endif()
  # Issue 11 on the device: collimator and grid, DSA, the dose-rate loop, scatter against the CPU.
  xt_add_test(test_dose_cuda SOURCES test_dose_cuda.c LIBS xt_imaging LABELS gpu)
endif()
