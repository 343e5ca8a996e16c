# output.cmake: the output layer's encoders (output/): tests/test_output.c (pixels; libpng to read back) and
# tests/test_record.c (the record-based encoders agree with the record and with each other).
pkg_check_modules(XT_PNG_T REQUIRED IMPORTED_TARGET libpng)
xt_add_test(test_output SOURCES test_output.c LIBS xt_output PkgConfig::XT_PNG_T LABELS cpu)
xt_add_test(test_record SOURCES test_record.c LIBS xt_output_record xt_acq xt_proj xt_models xt_imaging xt_scene ${M_LIB} LABELS cpu)
