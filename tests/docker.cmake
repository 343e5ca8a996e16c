# The container image's runtime stage as a file tree (no container engine runs on the CI machine):
# docker/runtime-tree.sh builds the tree the Dockerfile's `FROM scratch` stage holds, and the
# server is started from it in a chroot (tests/docker/test_runtime_tree.sh, a few seconds; 77 =
# skipped when not root). Not in sanitizer builds: the image is never built with ASan, and ASan
# binaries need more than the image has.
if(TARGET xtwin-server AND TARGET xtwin-health AND TARGET xtwin AND NOT XT_SANITIZE)
  set(XT_RT_ARGS ${CMAKE_BINARY_DIR})
  if(XT_HAVE_CUDA)
    list(APPEND XT_RT_ARGS --cuda)
  endif()
  add_test(NAME test_runtime_tree COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/docker/test_runtime_tree.sh ${XT_RT_ARGS})
  set_tests_properties(test_runtime_tree PROPERTIES TIMEOUT 300 LABELS "cpu;server;docker" SKIP_RETURN_CODE 77)
endif()
