/* The voxel operator's adjoint on the GPU (adjoint_voxel.cu) against the CPU's (xt_adjoint.c, itself
 * checked against the reference projector by test_adjoint): the forward equal, the transpose's sums
 * equal up to their order, and the dot-product test <A x, y> = <x, A^T y> on the device. Label gpu. */
#include <string.h>

#include "xt_test.h"
#include "xt_test_adjoint.h"
#include "xt_test_cuda.h"

XT_TEST(cuda_forward_is_the_cpu_forward) {
  xt_model *m = make_model();
  XT_REQUIRE(m);
  xt_adj_grid grid;
  XT_REQUIRE(xt_adj_grid_of_model(m, &grid, NULL) == 0);
  xt_geometry g[4];
  make_geoms(g, 4);
  const size_t px = 4 * (size_t)g[0].mode.rows * g[0].mode.cols;
  double *x = grid_of(m), *cpu = malloc(px * sizeof *cpu), *gpu = malloc(px * sizeof *gpu);
  XT_REQUIRE(x && cpu && gpu);
  xt_msg msg = {{0}};
  XT_REQUIRE(xt_adj_forward(&grid, x, g, 4, cpu, 1, &msg) == 0);
  XT_REQUIRE_MSG(xt_adj_forward_cuda(&grid, x, g, 4, gpu, 0, &msg) == 0, "%s", msg.text);
  size_t differ = 0;
  double worst = 0, mx = 0;
  for (size_t k = 0; k < px; k++) {
    differ += memcmp(&cpu[k], &gpu[k], sizeof(double)) != 0;
    worst = fmax(worst, fabs(cpu[k] - gpu[k]));
    mx = fmax(mx, fabs(cpu[k]));
  }
  printf("  %zu of %zu line integrals differ in any bit; largest difference %.3g (of %.3g)\n", differ, px, worst, mx);
  XT_CHECK(worst <= 1e-12 * mx);
  free(x), free(cpu), free(gpu);
  xt_model_free(m);
}

XT_TEST(cuda_dot_product_test) {
  xt_model *m = make_model();
  XT_REQUIRE(m);
  xt_adj_grid grid;
  XT_REQUIRE(xt_adj_grid_of_model(m, &grid, NULL) == 0);
  xt_geometry g[3];
  make_geoms(g, 3);
  const size_t px = 3 * (size_t)g[0].mode.rows * g[0].mode.cols, nv = 24 * 20 * 16;
  double *x = malloc(nv * sizeof *x), *y = malloc(px * sizeof *y), *ax = malloc(px * sizeof *ax);
  double *aty = malloc(nv * sizeof *aty), *aty_cpu = malloc(nv * sizeof *aty_cpu);
  XT_REQUIRE(x && y && ax && aty && aty_cpu);
  for (size_t i = 0; i < nv; i++) x[i] = urand() - 0.3;
  for (size_t i = 0; i < px; i++) y[i] = urand() - 0.5;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_adj_forward_cuda(&grid, x, g, 3, ax, 0, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(xt_adj_back_cuda(&grid, g, 3, y, aty, 0, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_adj_back(&grid, g, 3, y, aty_cpu, 1, &msg) == 0);
  double lhs = 0, rhs = 0, d = 0, mx = 0;
  for (size_t i = 0; i < px; i++) lhs += ax[i] * y[i];
  for (size_t i = 0; i < nv; i++) {
    rhs += x[i] * aty[i];
    d = fmax(d, fabs(aty[i] - aty_cpu[i]));
    mx = fmax(mx, fabs(aty_cpu[i]));
  }
  printf("  GPU: <Ax,y> = %.17g  <x,A^T y> = %.17g; A^T y vs the CPU's: %.3g of %.3g\n", lhs, rhs, d, mx);
  XT_CHECK(fabs(lhs - rhs) <= 1e-6 * fabs(lhs));
  XT_CHECK(d <= 1e-12 * mx);
  free(x), free(y), free(ax), free(aty), free(aty_cpu);
  xt_model_free(m);
}

XT_TEST_MAIN_CUDA(XT_ENTRY(cuda_forward_is_the_cpu_forward) XT_ENTRY(cuda_dot_product_test))
