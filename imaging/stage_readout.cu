/* Stage "readout" on the GPU (twin of stage_readout_cpu.c): one thread per output pixel; binning,
 * lag, panel maps, electronic noise, defects, ADC (xt_readout_pixel). */
#include "xt_stage_cuda.h"

/* Thread mapping: one thread per output pixel (linear index). In: D, F (render grid), the panel maps.
 * Out: raw, FA; lag (XT_LAG_TERMS planes of the output grid) read and written. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_readout(const __grid_constant__ xt_chain_frame_const fc, const float *gain,
                                                            const float *offset, const unsigned char *defect,
                                                            const float *D, const float *F, float *lag, uint16_t *raw,
                                                            float *FA) {
  const unsigned oplane = (unsigned)fc.ocols * (unsigned)fc.orows;
  const unsigned o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= oplane) return;
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const int b = fc.ro.bin;
  float x = 0.f, f = 0.f;
  for (int dy = 0; dy < b; dy++)
    for (int dx = 0; dx < b; dx++) {
      const size_t i = (size_t)(r * b + dy) * fc.cols + (c * b + dx);
      x += D[i];
      f += F[i];
    }
  float l[XT_LAG_TERMS];
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) l[k] = lag[(size_t)oplane * k + o];
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)o, XT_RNG_READ);
  raw[o] = xt_readout_pixel(&fc.ro, x * fc.ro.adu_per_kev, l, gain[o], offset[o], defect[o], &g);
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) lag[(size_t)oplane * k + o] = l[k];
  FA[o] = f * fc.ro.adu_per_kev;
}

int xt_stage_readout_cuda(const xt_chain_frame_const *fc, const float *gain, const float *offset,
                          const unsigned char *defect, const float *D, const float *F, float *lag, uint16_t *raw,
                          float *FA, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->ocols * fc->orows;
  k_readout<<<(unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK), XT_STAGE_BLOCK, 0, st>>>(*fc, gain, offset, defect,
                                                                                               D, F, lag, raw, FA);
  XT_SCK(cudaGetLastError());
  return 0;
}
