/* Stage "blur" on the GPU (twin of stage_blur_cpu.c): the separable Gaussian PSF, a rows pass and a
 * columns pass, edges replicated, the same weights and summation order as the CPU. Both passes in
 * one kernel: a block stages its tile of the input with the halo in shared memory, runs the rows
 * pass over the tile's rows and the halo rows into shared memory and the columns pass from there,
 * so the intermediate plane never reaches memory (the halo rows' rows pass is done twice, by the
 * two blocks that share them: a few FMAs). Each output is the same sums in the same order as the
 * two separate passes.
 *
 * A block makes a 32 x 64 tile on 512 threads (each thread 4 rows) and issues all of its staging
 * loads before the first is stored: at 1024^2 the 512 blocks are one wave, each one memory round
 * trip and two barriers (ncu, H200, in the chain at (a): 12.2 us with tiles of 32 x 8, a thread a
 * pixel, a staging loop a load at a time, the halo rows 1.5x the tile's loads at radius 2; 9.0 us
 * with 32 x 32 tiles on 256 threads). The staged
 * columns are a fixed window, c0 - XT_BLUR_MAX_R .. c0 + 32 + XT_BLUR_MAX_R, of which only the ones
 * the radius needs are loaded: a constant divisor for the cell's row, the same 32-byte sectors.
 * Measured beside it, all bit-identical to the 32 x 8 kernel at 9 sizes x 81 radius pairs (back to
 * back, 1024^2 radius 2 / 2480 x 1920 radius 3, us): 32 x 8 tiles 14.3 / 67.2; 32 x 32
 * 10.3 / 40.2; 16 rows 11.5 / 46.7; 64 rows 10.4 / 37.2; 32 rows on 512 threads 10.2 / 41.4; 64
 * rows on 512 threads (this) 9.6 / 37.1. */
#include "xt_stage_cuda.h"

#define BLUR_TW 32 /* a block's output tile, columns x rows */
#define BLUR_TH 64
#define BLUR_BY 16 /* its threads: BLUR_TW x BLUR_BY, each BLUR_TH / BLUR_BY rows */
#define BLUR_THREADS (BLUR_TW * BLUR_BY)
#define BLUR_IW (BLUR_TW + 2 * XT_BLUR_MAX_R)
#define BLUR_IH (BLUR_TH + 2 * XT_BLUR_MAX_R)

/* Thread mapping: a block is a BLUR_TW x BLUR_TH output tile (blockIdx.x, .y); thread (x, y) makes
 * its column x at rows y, y + BLUR_BY, ... In: in, the kernels bu (along columns u, within a row)
 * and bv (along rows v). Out: out. */
__global__ void __launch_bounds__(BLUR_THREADS)
    k_blur(const __grid_constant__ xt_blur_kernel bu, const __grid_constant__ xt_blur_kernel bv, int cols, int rows,
           const float *in, float *out) {
  __shared__ float s_in[BLUR_IH][BLUR_IW]; /* input rows clamp(r0 - rv + ly), columns clamp(c0 - MAX_R + lx) */
  __shared__ float s_t[BLUR_IH][BLUR_TW];  /* the rows pass of those rows at the tile's columns */
  const int ru = bu.r, rv = bv.r, ih = BLUR_TH + 2 * rv;
  const int c0 = blockIdx.x * BLUR_TW, r0 = blockIdx.y * BLUR_TH;
  const int tid = threadIdx.y * BLUR_TW + threadIdx.x;
  xt_stage_wait_prior(); /* in: k_detect's */
  constexpr int LP = (BLUR_IH * BLUR_IW + BLUR_THREADS - 1) / BLUR_THREADS;
  float v[LP];
#pragma unroll
  for (int p = 0; p < LP; p++) {
    const int k = tid + p * BLUR_THREADS, ly = k / BLUR_IW, lx = k - ly * BLUR_IW;
    v[p] = 0.f;
    if (ly < ih && lx >= XT_BLUR_MAX_R - ru && lx < XT_BLUR_MAX_R + BLUR_TW + ru) {
      int y = r0 - rv + ly, x = c0 - XT_BLUR_MAX_R + lx;
      y = y < 0 ? 0 : (y >= rows ? rows - 1 : y);
      x = x < 0 ? 0 : (x >= cols ? cols - 1 : x);
      v[p] = in[(size_t)y * cols + x];
    }
  }
#pragma unroll
  for (int p = 0; p < LP; p++) {
    const int k = tid + p * BLUR_THREADS;
    if (k < BLUR_IH * BLUR_IW) (&s_in[0][0])[k] = v[p];
  }
  __syncthreads();
  constexpr int TP = BLUR_IH * BLUR_TW / BLUR_THREADS;
#pragma unroll
  for (int p = 0; p < TP; p++) {
    const int ly = threadIdx.y + p * BLUR_BY;
    if (ly >= ih) break;
    float s = 0.f;
    for (int j = -ru; j <= ru; j++)
      s += bu.w[j + ru] * s_in[ly][threadIdx.x + XT_BLUR_MAX_R + j];
    s_t[ly][threadIdx.x] = s;
  }
  __syncthreads();
  const int c = c0 + threadIdx.x;
  if (c >= cols) return;
#pragma unroll
  for (int q = 0; q < BLUR_TH / BLUR_BY; q++) {
    const int ly = threadIdx.y + q * BLUR_BY, r = r0 + ly;
    if (r >= rows) break;
    float s = 0.f;
    for (int j = -rv; j <= rv; j++)
      s += bv.w[j + rv] * s_t[ly + rv + j][threadIdx.x];
    out[(size_t)r * cols + c] = s;
  }
}

int xt_stage_blur_cuda(const xt_chain_frame_const *fc, const float *in, float *out, cudaStream_t st, xt_msg *msg) {
  if (fc->bu.r > XT_BLUR_MAX_R || fc->bv.r > XT_BLUR_MAX_R || fc->bu.r < 0 || fc->bv.r < 0)
    return xt_fail(msg, XT_EINTERNAL, "chain: blur radius %d, %d", fc->bu.r, fc->bv.r);
  const dim3 grid((unsigned)((fc->cols + BLUR_TW - 1) / BLUR_TW), (unsigned)((fc->rows + BLUR_TH - 1) / BLUR_TH));
  XT_SCK(xt_stage_launch(k_blur, grid, dim3(BLUR_TW, BLUR_BY), st, fc->bu, fc->bv, fc->cols, fc->rows, in, out));
  return 0;
}
