# Instruments (issue 26): the tube closed forms, the pixel-area integral, sums of parts, shapes.
#   test_instr       the CPU reference on instruments against closed forms (label cpu)
#   test_instr_cuda  the CUDA kind against the CPU reference (label gpu; exits 77 without a device)
xt_add_test(test_instr SOURCES test_instr.c LIBS xt_proj xt_models ${M_LIB} LABELS cpu)
if(XT_HAVE_CUDA)
  xt_add_test(test_instr_cuda SOURCES test_instr_cuda.c LIBS xt_proj xt_models ${M_LIB} LABELS gpu)
endif()
