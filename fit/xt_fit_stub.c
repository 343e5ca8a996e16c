/* The CUDA engine's stand-in where the build has no CUDA (fit/CMakeLists.txt picks this file or
 * fit_cuda.cu): the fitter then runs on the CPU. */
#include "xt_fit_internal.h"

int xt__fit_cuda_engine(const xt_fit_problem *pb, xt_fit_engine **out, xt_msg *msg) {
  (void)pb;
  *out = NULL;
  return xt_fail(msg, XT_ENODEV, "gmm-fit: this build has no CUDA engine");
}
