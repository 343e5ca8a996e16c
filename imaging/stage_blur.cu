/* Stage "blur" on the GPU (twin of stage_blur_cpu.c): the separable Gaussian PSF, a rows pass and a
 * columns pass, edges replicated, the same weights and summation order as the CPU. Both passes in
 * one kernel: a block stages its tile of the input with the halo in shared memory, runs the rows
 * pass over the tile's rows and the halo rows into shared memory and the columns pass from there,
 * so the intermediate plane never reaches memory (the halo rows' rows pass is done twice, by the
 * two blocks that share them: a few FMAs). Each output is the same sums in the same order as the
 * two separate passes. */
#include "xt_stage_cuda.h"

#define BLUR_TW 32 /* a block's output tile, columns x rows (its threads) */
#define BLUR_TH 8
#define BLUR_IW (BLUR_TW + 2 * XT_BLUR_MAX_R)
#define BLUR_IH (BLUR_TH + 2 * XT_BLUR_MAX_R)

/* Thread mapping: a block is a BLUR_TW x BLUR_TH output tile (blockIdx.x, .y), thread (x, y) its
 * pixel. In: in, the kernels bu (along columns u, within a row) and bv (along rows v). Out: out. */
__global__ void __launch_bounds__(BLUR_TW *BLUR_TH)
    k_blur(const __grid_constant__ xt_blur_kernel bu, const __grid_constant__ xt_blur_kernel bv, int cols, int rows,
           const float *in, float *out) {
  __shared__ float s_in[BLUR_IH][BLUR_IW]; /* input rows clamp(r0 - rv + ly), columns clamp(c0 - ru + lx) */
  __shared__ float s_t[BLUR_IH][BLUR_TW];  /* the rows pass of those rows at the tile's columns */
  const int ru = bu.r, rv = bv.r, iw = BLUR_TW + 2 * ru, ih = BLUR_TH + 2 * rv;
  const int c0 = blockIdx.x * BLUR_TW, r0 = blockIdx.y * BLUR_TH;
  const int tid = threadIdx.y * BLUR_TW + threadIdx.x;
  for (int k = tid; k < ih * iw; k += BLUR_TW * BLUR_TH) {
    const int ly = k / iw, lx = k - ly * iw;
    int y = r0 - rv + ly, x = c0 - ru + lx;
    y = y < 0 ? 0 : (y >= rows ? rows - 1 : y);
    x = x < 0 ? 0 : (x >= cols ? cols - 1 : x);
    s_in[ly][lx] = __ldg(in + (size_t)y * cols + x);
  }
  __syncthreads();
  for (int k = tid; k < ih * BLUR_TW; k += BLUR_TW * BLUR_TH) {
    const int ly = k / BLUR_TW, lx = k - ly * BLUR_TW;
    float s = 0.f;
    for (int j = -ru; j <= ru; j++)
      s += bu.w[j + ru] * s_in[ly][lx + ru + j];
    s_t[ly][lx] = s;
  }
  __syncthreads();
  const int c = c0 + threadIdx.x, r = r0 + threadIdx.y;
  if (c >= cols || r >= rows)
    return;
  float s = 0.f;
  for (int j = -rv; j <= rv; j++)
    s += bv.w[j + rv] * s_t[threadIdx.y + rv + j][threadIdx.x];
  out[(size_t)r * cols + c] = s;
}

int xt_stage_blur_cuda(const xt_chain_frame_const *fc, const float *in, float *out, cudaStream_t st, xt_msg *msg) {
  if (fc->bu.r > XT_BLUR_MAX_R || fc->bv.r > XT_BLUR_MAX_R || fc->bu.r < 0 || fc->bv.r < 0)
    return xt_fail(msg, XT_EINTERNAL, "chain: blur radius %d, %d", fc->bu.r, fc->bv.r);
  const dim3 grid((unsigned)((fc->cols + BLUR_TW - 1) / BLUR_TW), (unsigned)((fc->rows + BLUR_TH - 1) / BLUR_TH));
  k_blur<<<grid, dim3(BLUR_TW, BLUR_TH), 0, st>>>(fc->bu, fc->bv, fc->cols, fc->rows, in, out);
  XT_SCK(cudaGetLastError());
  return 0;
}
