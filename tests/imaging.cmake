# The imaging chain (issue 10): spectra, channels, polychromatic detection, detector, processing.
if(TARGET xt_imaging)
  xt_add_test(test_spectrum SOURCES test_spectrum.c LIBS xt_imaging LABELS cpu)
endif()
xt_add_test(test_channels SOURCES test_channels.c LIBS xt_proj xt_models LABELS cpu)
xt_add_test(test_chain SOURCES test_chain.c LIBS xt_imaging LABELS cpu)
