/* The GPU side of issue 30 (Python in process), label gpu:
 *  - the voxel operator's adjoint on the GPU (adjoint_voxel.cu) against the CPU's (xt_adjoint.c,
 *    itself checked against the reference projector by test_adjoint): the forward equal, the
 *    transpose's sums equal up to their order, the dot-product test <A x, y> = <x, A^T y> on the device;
 *  - the batch into device memory behind the DLPack export (xt_proj_render_batch_device): equal to
 *    the host batch of the same projector, frames where they belong, nothing written past the end. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "xt_phantom.h"

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

XT_TEST(batch_into_device_memory) {
  xt_proj_options opt = {.backend = XT_BACKEND_CUDA};
  xt_proj *p = NULL;
  xt_model *m = NULL;
  xt_msg msg = {{0}};
  const int dims[3] = {96, 96, 96};
  XT_REQUIRE_MSG(xt_proj_create(&opt, &p, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(xt_phantom_head_model(dims, 2.0, XT_VOXEL_U8, &m, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(xt_proj_add_model(p, m, &msg) == 0, "%s", msg.text);
  /* 150 frames of 512^2 (1 MiB each) are three launches of the batch kernel: chunks of
   * XT_CUDA_BATCH_CHUNK_BYTES (64 MiB), 64 + 64 + 22 frames, the last one short */
  enum { N = 150 };
  const xt_detector_mode *mode = xt_mode_find("fd20-512");
  XT_REQUIRE(mode);
  xt_geometry *g = malloc(sizeof *g * N);
  const size_t fpx = (size_t)mode->rows * mode->cols, bytes = fpx * N * sizeof(float);
  float *host = malloc(bytes), *back = malloc(bytes + sizeof(float));
  XT_REQUIRE(g && host && back);
  for (int i = 0; i < N; i++) {
    xt_pose pose = xt_pose_default(mode);
    pose.primary_deg = -180 + 2.4 * i;
    pose.secondary_deg = -40 + 0.5 * i;
    XT_REQUIRE(xt_geom_compute(&pose, mode, &g[i], &msg) == 0);
  }
  XT_REQUIRE_MSG(xt_proj_render_batch(p, g, N, host, &msg) == 0, "%s", msg.text);
  float *d = NULL;
  XT_REQUIRE(cudaMalloc((void **)&d, bytes + sizeof(float)) == cudaSuccess);
  const float sentinel = -12345.0f;
  XT_REQUIRE(cudaMemcpy(d + fpx * N, &sentinel, sizeof sentinel, cudaMemcpyHostToDevice) == cudaSuccess);
  int rc = xt_proj_render_batch_device(p, g, N, d, &msg);
  XT_CHECK_MSG(rc == 0, "%s", msg.text);
  XT_CHECK(cudaMemcpy(back, d, bytes + sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  XT_CHECK(memcmp(host, back, bytes) == 0); /* the same kernels and descriptors: the same bits */
  XT_CHECK(back[fpx * N] == sentinel);
  double mx = 0;
  for (size_t k = 0; k < fpx * N; k++) mx = fmax(mx, host[k]);
  XT_CHECK(mx > 1.0); /* the frames hold the head */
  xt_msg m2 = {{0}};
  XT_CHECK(xt_proj_render_batch_device(p, g, 0, NULL, &m2) == 0);
  free(g), free(host), free(back);
  xt_proj_destroy(p);
  xt_model_free(m);
}

XT_TEST_MAIN_CUDA(XT_ENTRY(cuda_forward_is_the_cpu_forward) XT_ENTRY(cuda_dot_product_test)
                      XT_ENTRY(batch_into_device_memory))
