/* Stage "blur" on the GPU (twin of stage_blur_cpu.c): the separable Gaussian PSF, a rows pass and a
 * columns pass, edges replicated, the same weights and summation order as the CPU. */
#include "xt_stage_cuda.h"

/* Thread mapping: one thread per pixel (linear index). In: in. Out: out = in (*) w along columns u
 * (AXIS 0, within a row) or along rows v (AXIS 1, within a column). */
template <int AXIS>
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_blur(const __grid_constant__ xt_blur_kernel k, int cols, int rows,
                                                         const float *in, float *out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (unsigned)cols * (unsigned)rows) return;
  int r, c;
  xt_stage_rc(i, cols, &r, &c);
  float s = 0.f;
  for (int j = -k.r; j <= k.r; j++) {
    if (AXIS == 0) {
      int x = c + j;
      x = x < 0 ? 0 : (x >= cols ? cols - 1 : x);
      s += k.w[j + k.r] * __ldg(in + (size_t)r * cols + x);
    } else {
      int y = r + j;
      y = y < 0 ? 0 : (y >= rows ? rows - 1 : y);
      s += k.w[j + k.r] * __ldg(in + (size_t)y * cols + c);
    }
  }
  out[i] = s;
}

int xt_stage_blur_cuda(const xt_chain_frame_const *fc, const float *in, float *tmp, float *out, cudaStream_t st,
                       xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  const unsigned blocks = (unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK);
  k_blur<0><<<blocks, XT_STAGE_BLOCK, 0, st>>>(fc->bu, fc->cols, fc->rows, in, tmp);
  XT_SCK(cudaGetLastError());
  k_blur<1><<<blocks, XT_STAGE_BLOCK, 0, st>>>(fc->bv, fc->cols, fc->rows, tmp, out);
  XT_SCK(cudaGetLastError());
  return 0;
}
