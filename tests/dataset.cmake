# dataset.cmake: tests of `xtwin dataset` (dataset/, its front end tools/xt_dataset_cmd.c, docs/dataset.md).
#   test_dataset          building blocks against exact oracles, CPU backend (label cpu)
#   test_dataset_cuda     the same frames through the CUDA projector (label gpu)
#   test_dataset_biplane  plane B ("plane_b"): bad fields, P against the lateral closed form, the shared
#                         table, identical planes at one pose, reproducible frames (CPU, label cpu)
#   test_dataset_e2e      the real binary: outputs, determinism, sharding, resume after SIGKILL,
#                         bad input, full disk, unwritable output (tests/test_dataset.py)
#   test_dataset_chain    the imaging chain's raw/processed frames: == `xtwin render --chain` of the
#                         frame's metadata, byte-identical over splits with noise on, bad chain
#                         keys (tests/test_dataset_chain.py)
#   test_dataset_reader   api/python/xtwin_dataset.py against shards written by Python's tarfile
#                         and by xtwin (tests/test_dataset_reader.py)
#   test_dataset_slurm    a real single-node Slurm cluster runs a 4-task array (skips, exit 77,
#                         where Slurm cannot start; tests/test_dataset_slurm.py)
#   test_dataset_owner    never overwriting what it did not write: a user's files at our names,
#                         symbolic links, our own datasets resumed and written by tasks at once,
#                         nothing outside --out (tests/test_dataset_owner.py)
if(TARGET xt_dataset)
  xt_add_test(test_dataset SOURCES test_dataset.c LIBS xt_dataset LABELS cpu)
  xt_add_test(test_dataset_biplane SOURCES test_dataset_biplane.c LIBS xt_dataset LABELS cpu)
  if(XT_HAVE_CUDA)
    xt_add_test(test_dataset_cuda SOURCES test_dataset.c LIBS xt_dataset LABELS gpu)
    target_compile_definitions(test_dataset_cuda PRIVATE XT_DS_TEST_CUDA)
  endif()

  find_program(XT_DS_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(XT_DS_PYTHON3)
    add_test(NAME test_dataset_e2e
      COMMAND ${XT_DS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dataset.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dataset_scratch)
    add_test(NAME test_dataset_chain
      COMMAND ${XT_DS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dataset_chain.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dataset_chain_scratch)
    add_test(NAME test_dataset_reader
      COMMAND ${XT_DS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dataset_reader.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dataset_reader_scratch)
    add_test(NAME test_dataset_slurm
      COMMAND ${XT_DS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dataset_slurm.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dataset_slurm_scratch)
    add_test(NAME test_dataset_owner
      COMMAND ${XT_DS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dataset_owner.py $<TARGET_FILE:xtwin>
              ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dataset_owner_scratch)
    set_tests_properties(test_dataset_e2e test_dataset_chain test_dataset_reader test_dataset_slurm test_dataset_owner
      PROPERTIES TIMEOUT 600 LABELS cpu SKIP_RETURN_CODE 77)
  endif()
endif()
