# output.cmake: the output layer's encoders (output/), tests/test_output.c; libpng to read back.
pkg_check_modules(XT_PNG_T REQUIRED IMPORTED_TARGET libpng)
xt_add_test(test_output SOURCES test_output.c LIBS xt_output PkgConfig::XT_PNG_T LABELS cpu)
