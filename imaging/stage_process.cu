/* Stage "process" on the GPU (twin of stage_process_cpu.c): correction, defect interpolation, log
 * and the recursive filter (pass 1: k_readout at the non-defective pixels, stage_readout.cu;
 * k_process_defects at the others), edge enhancement and window/level (pass 2). */
#include "xt_stage_cuda.h"

/* Attenuation of output pixel (r, c); NAN for a defective one. */
static __device__ __forceinline__ float atten(const xt_chain_frame_const &fc, const float *gain, const float *offset,
                                              const unsigned char *defect, const uint16_t *raw, const float *FA, int r,
                                              int c) {
  const size_t o = (size_t)r * fc.ocols + c;
  if (defect[o] != XT_DEFECT_NONE) return NAN;
  return xt_process_log(xt_process_correct((float)raw[o], gain[o], offset[o]), FA[o]);
}

/* Thread mapping: one thread per output pixel; only the defective ones work (the others' pass 1 ran
 * in k_readout). In: raw, FA, the panel maps. Out: Y (state) at the defective pixels: the mean of
 * their non-defective 4-neighbours' attenuation (stage_process_cpu.c). */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_process_defects(const __grid_constant__ xt_chain_frame_const fc,
                                                                    const float *gain, const float *offset,
                                                                    const unsigned char *defect, const uint16_t *raw,
                                                                    const float *FA, float *Y) {
  const unsigned o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (unsigned)fc.ocols * (unsigned)fc.orows || defect[o] == XT_DEFECT_NONE) return;
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const int nr[4] = {r, r, r - 1, r + 1}, nc[4] = {c - 1, c + 1, c, c};
  float s = 0.f;
  int n = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (nr[k] < 0 || nr[k] >= fc.orows || nc[k] < 0 || nc[k] >= fc.ocols) continue;
    const float v = atten(fc, gain, offset, defect, raw, FA, nr[k], nc[k]);
    if (v == v) {
      s += v;
      n++;
    }
  }
  Y[o] = xt_process_temporal(&fc.pc, n ? s / (float)n : 0.f, Y[o]);
}

/* Thread mapping: one thread per output pixel. In: Y. Out: proc. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_process_out(const __grid_constant__ xt_chain_frame_const fc, const float *Y,
                                                                uint16_t *proc) {
  const unsigned o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (unsigned)fc.ocols * (unsigned)fc.orows) return;
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const float *M = fc.pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
  float s = 0.f;
  for (int dy = -1; dy <= 1; dy++)
    for (int dx = -1; dx <= 1; dx++) {
      int y = r + dy, x = c + dx;
      y = y < 0 ? 0 : (y >= fc.orows ? fc.orows - 1 : y);
      x = x < 0 ? 0 : (x >= fc.ocols ? fc.ocols - 1 : x);
      const size_t i = (size_t)y * fc.ocols + x;
      s += M ? Y[i] - M[i] : Y[i];
    }
  const float y0 = M ? Y[o] - M[o] : Y[o];
  const float e = y0 + fc.pc.edge_gain * (y0 - s * (1.f / 9.f));
  proc[o] = xt_process_window(&fc.pc, e);
}

int xt_stage_process_cuda(const xt_chain_frame_const *fc, const float *gain, const float *offset,
                          const unsigned char *defect, const uint16_t *raw, const float *FA, float *Y, uint16_t *proc,
                          cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->ocols * fc->orows;
  const unsigned blocks = (unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK);
  k_process_defects<<<blocks, XT_STAGE_BLOCK, 0, st>>>(*fc, gain, offset, defect, raw, FA, Y);
  XT_SCK(cudaGetLastError());
  k_process_out<<<blocks, XT_STAGE_BLOCK, 0, st>>>(*fc, Y, proc);
  XT_SCK(cudaGetLastError());
  return 0;
}
