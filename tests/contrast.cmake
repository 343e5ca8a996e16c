# The contrast agent (issue 26, point 2; docs/contrast.md).
#   test_contrast           iodine against NIST's table, the bolus model against closed forms and
#                           quadrature, a region's iodine against the static scene (channels, line
#                           integrals, chain, DSA) on the CPU (label cpu)
#   test_contrast_cuda      the CUDA projector's iodine against the CPU reference (label gpu; 77 without a device)
#   test_server_contrast    injections over REST, every frame judged by the server's timestamps, and
#                           the session log's replay of them bit for bit (cpu;server)
if(TARGET xt_acq)
  xt_add_test(test_contrast SOURCES test_contrast.c LIBS xt_acq ${M_LIB} LABELS cpu)
  if(TARGET xt_loaders) # the contrast mask read from a file
    target_link_libraries(test_contrast PRIVATE xt_loaders)
    target_compile_definitions(test_contrast PRIVATE XT_TEST_HAVE_LOADERS)
  endif()
  if(XT_HAVE_CUDA)
    xt_add_test(test_contrast_cuda SOURCES test_contrast_cuda.c LIBS xt_acq ${M_LIB} LABELS gpu)
  endif()
endif()
if(TARGET xtwin-server AND TARGET xtwin AND EXISTS /usr/bin/python3)
  add_test(NAME test_server_contrast
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/server/test_contrast.py --server $<TARGET_FILE:xtwin-server>
      --xtwin $<TARGET_FILE:xtwin>)
  set_tests_properties(test_server_contrast PROPERTIES TIMEOUT 300 LABELS "cpu;server" SKIP_RETURN_CODE 77)
endif()
