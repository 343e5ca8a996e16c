#include "xt_proj.h"
#include "xt_test.h"
XT_TEST(placeholder) { XT_CHECK(1); }
XT_TEST_MAIN(XT_ENTRY(placeholder))
