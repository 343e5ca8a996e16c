/* Stage "blur" on the GPU (twin of stage_blur_cpu.c): the separable Gaussian PSF, a rows pass and a
 * columns pass, edges replicated, the same weights and summation order as the CPU. Both passes in
 * one kernel: a block stages its tile of the input with the halo in shared memory, runs the rows
 * pass over the tile's rows and the halo rows into shared memory and the columns pass from there,
 * so the intermediate plane never reaches memory (the halo rows' rows pass is done twice, by the
 * two blocks that share them: a few FMAs). Each output is the same sums in the same order as the
 * two separate passes. */
#include "xt_stage_cudaM.h"

#define BLUR_TW 32 /* a block's output tile, columns x rows (its threads) */
#define BLUR_TH 8
#define BLUR_IW (BLUR_TW + 2 * XT_BLUR_MAX_R)
#define BLUR_IH (BLUR_TH + 2 * XT_BLUR_MAX_R)

/* Thread mapping: a block is a BLUR_TW x BLUR_TH output tile (blockIdx.x, .y), thread (x, y) its
 * pixel. In: in, the kernels bu (along columns u, within a row) and bv (along rows v). Out: out. */
__global__ void __launch_bounds__(BLUR_TW *BLUR_TH)
    k_blurM(const __grid_constant__ xt_blur_kernel bu, const __grid_constant__ xt_blur_kernel bv, int cols, int rows,
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

int xt_stage_blurM_cuda(const xt_chain_frame_const *fc, const float *in, float *out, cudaStream_t st, xt_msg *msg) {
  if (fc->bu.r > XT_BLUR_MAX_R || fc->bv.r > XT_BLUR_MAX_R || fc->bu.r < 0 || fc->bv.r < 0)
    return xt_fail(msg, XT_EINTERNAL, "chain: blur radius %d, %d", fc->bu.r, fc->bv.r);
  const dim3 grid((unsigned)((fc->cols + BLUR_TW - 1) / BLUR_TW), (unsigned)((fc->rows + BLUR_TH - 1) / BLUR_TH));
  k_blurM<<<grid, dim3(BLUR_TW, BLUR_TH), 0, st>>>(fc->bu, fc->bv, fc->cols, fc->rows, in, out);
  XT_SCK(cudaGetLastError());
  return 0;
}
/* Stage "readout" on the GPU (twin of stage_readout_cpu.c): one thread per output pixel; binning,
 * lag, panel maps, electronic noise, defects, ADC (xt_readout_pixel). When the frame is processed it
 * also makes the processing's first pass for its pixel where that pass is per pixel (every pixel but
 * the defective ones: correction, log, temporal filter; stage_process_cpu.c's pass 1 with the same
 * functions), while the code, gain, offset and flat are in registers: one pass over the output grid
 * fewer, and ~15 bytes a pixel not read again. The defective pixels, whose value interpolates their
 * neighbours' codes, wait for the whole raw frame (stage_process.cu, k_process_defects). */

/* Thread mapping: one thread per output pixel (linear index). In: D (render grid), the tables' flat1,
 * the panel maps.
 * Out: raw, FA; lag (XT_LAG_TERMS planes of the output grid) read and written; Y (the processing's
 * temporal state; NULL: not processed) read and written at non-defective pixels. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_readoutM(const __grid_constant__ xt_chain_frame_const fc, const xt_chain_tables *tab,
                                                            const float *gain, const float *offset,
                                                            const unsigned char *defect, const float *D, float *lag,
                                                            uint16_t *raw,
                                                            float *FA, float *Y) {
  const unsigned oplane = (unsigned)fc.ocols * (unsigned)fc.orows;
  const unsigned o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= oplane) return;
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const int b = fc.ro.bin;
  const float flat1 = __ldg(&tab->flat1);
  float x = 0.f, f = 0.f;
  for (int dy = 0; dy < b; dy++)
    for (int dx = 0; dx < b; dx++) {
      const size_t i = (size_t)(r * b + dy) * fc.cols + (c * b + dx);
      x += D[i];
      f += xt_flat_expect(&fc.cam, fc.mas, flat1, fc.coll.grid_tp, c * b + dx, r * b + dy);
    }
  float l[XT_LAG_TERMS];
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) l[k] = lag[(size_t)oplane * k + o];
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)o, XT_RNG_READ);
  const float gn = gain[o], of = offset[o];
  const unsigned char dc = defect[o];
  const uint16_t code = xt_readout_pixel(&fc.ro, x * fc.ro.adu_per_kev, l, gn, of, dc, &g);
  raw[o] = code;
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) lag[(size_t)oplane * k + o] = l[k];
  const float fa = f * fc.ro.adu_per_kev;
  FA[o] = fa;
  if (Y && dc == XT_DEFECT_NONE)
    Y[o] = xt_process_temporal(&fc.pc, xt_process_log(xt_process_correct((float)code, gn, of), fa), Y[o]);
}

int xt_stage_readoutM_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *gain,
                          const float *offset, const unsigned char *defect, const float *D, float *lag, uint16_t *raw,
                          float *FA, float *Y, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->ocols * fc->orows;
  k_readoutM<<<(unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK), XT_STAGE_BLOCK, 0, st>>>(*fc, d_tab, gain, offset,
                                                                                               defect, D, lag, raw, FA, Y);
  XT_SCK(cudaGetLastError());
  return 0;
}
