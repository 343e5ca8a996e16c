/* Stage "readout" on the GPU (twin of stage_readout_cpu.c): one thread per output pixel; binning,
 * lag, panel maps, electronic noise, defects, ADC (xt_readout_pixel). When the frame is processed it
 * also makes the processing's first pass for its pixel where that pass is per pixel (every pixel but
 * the defective ones: correction, log, temporal filter; stage_process_cpu.c's pass 1 with the same
 * functions), while the code, gain, offset and flat are in registers: one pass over the output grid
 * fewer, and ~15 bytes a pixel not read again. The defective pixels, whose value interpolates their
 * neighbours' codes, wait for the whole raw frame (stage_process.cu, k_process_out): their state
 * before the frame is copied aside (Yd) for it. The flat
 * field is evaluated where it is needed (xt_stage_flat_adu, here and there), never stored.
 *
 * Tried and dropped (2026-11-23, H200): the readout as the blur kernel's epilogue (one kernel, D in
 * registers, its inputs prefetched before the blur; 40 registers): 30.3 us at 1024^2 against 12.2 +
 * 18.0 for the two kernels, no gain (chain 0.2896 vs 0.2899 ms), so the two simpler kernels stay. */
#include "xt_stage_cuda.h"

/* Thread mapping: one thread per output pixel (linear index). In: D (render grid), the tables' flat1,
 * the panel maps. Out: raw; lag (XT_LAG_TERMS planes of the output grid) read and written; Y (the
 * processing's temporal state; NULL: not processed) read and written at non-defective pixels, read and copied to Yd at the defective ones. With the lag
 * off its planes are neither read nor written (xt_readout_pixel leaves them as they are), nor Y
 * read on the filter's first frame (xt_process_temporal does not use it). */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_readout(const __grid_constant__ xt_chain_frame_const fc, const xt_chain_tables *tab,
                                                            const float *gain, const float *offset,
                                                            const unsigned char *defect, const float *D, float *lag,
                                                            uint16_t *raw, float *Y, float *Yd, uint32_t *nsat) {
  const unsigned oplane = (unsigned)fc.ocols * (unsigned)fc.orows;
  const unsigned o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= oplane) return;
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const float gn = __ldg(gain + o), of = __ldg(offset + o);
  const unsigned char dc = __ldg(defect + o);
  xt_stage_wait_prior(); /* D: k_blur's */
  const int b = fc.ro.bin;
  float x = 0.f;
  for (int dy = 0; dy < b; dy++)
    for (int dx = 0; dx < b; dx++)
      x += D[(size_t)(r * b + dy) * fc.cols + (c * b + dx)];
  const bool lag_on = fc.ro.lag_on;
  float l[XT_LAG_TERMS];
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) l[k] = lag_on ? lag[(size_t)oplane * k + o] : 0.f;
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)o, XT_RNG_READ);
  /* the panel as it is now (its faults since calibration); the processing below keeps the maps */
  float gt = gn, ot = of;
  int dt = dc;
  xt_panel_fault_pixel(&fc.ro.fault, r, c, o, &gt, &ot, &dt);
  const uint16_t code = xt_readout_pixel(&fc.ro, x * fc.ro.adu_per_kev, l, gt, ot, dt, &g);
  raw[o] = code;
  /* the panel's saturated pixels, a warp's at once: an atomic only from a warp that has any. Counted
   * here so that the header's count needs no pass over the frame on the host (0.5 ms at FD20 full) */
  const unsigned live = __activemask();
  const unsigned sat = __ballot_sync(live, (float)code >= fc.ro.adc_max);
  if (sat && (threadIdx.x & 31u) == (unsigned)(__ffs(live) - 1)) atomicAdd(nsat, (uint32_t)__popc(sat));
  if (lag_on)
#pragma unroll
    for (int k = 0; k < XT_LAG_TERMS; k++) lag[(size_t)oplane * k + o] = l[k];
  if (!Y) return;
  const float yp = fc.pc.first ? 0.f : Y[o];
  if (dc == XT_DEFECT_NONE) {
    const float fa = xt_stage_flat_adu(fc, tab->flat1, r, c);
    Y[o] = xt_process_temporal(&fc.pc, xt_process_log(xt_process_correct((float)code, gn, of), fa), yp);
  } else
    Yd[o] = yp;
}

int xt_stage_readout_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *gain,
                          const float *offset, const unsigned char *defect, const float *D, float *lag, uint16_t *raw,
                          float *Y, float *Yd, uint32_t *nsat, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->ocols * fc->orows;
  XT_SCK(xt_stage_launch(k_readout, dim3((unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK)), dim3(XT_STAGE_BLOCK), st,
                         *fc, d_tab, gain, offset, defect, D, lag, raw, Y, Yd, nsat));
  return 0;
}
