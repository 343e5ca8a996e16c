/* Stage "process" on the GPU (twin of stage_process_cpu.c): correction, defect interpolation, log
 * and the recursive filter (pass 1: the blur and readout kernel at the non-defective pixels,
 * stage_blur.cu; k_process_defects at the others), edge enhancement and window/level (pass 2,
 * k_process_out). */
#include "xt_stage_cuda.h"

/* Attenuation of output pixel (r, c); NAN for a defective one. The flat field as the readout
 * evaluates it (xt_stage_flat_adu: the same value). */
static __device__ __forceinline__ float atten(const xt_chain_frame_const &fc, float flat1, const float *gain,
                                              const float *offset, const unsigned char *defect, const uint16_t *raw,
                                              int r, int c) {
  const size_t o = (size_t)r * fc.ocols + c;
  if (defect[o] != XT_DEFECT_NONE) return NAN;
  return xt_process_log(xt_process_correct((float)raw[o], gain[o], offset[o]), xt_stage_flat_adu(fc, flat1, r, c));
}

/* Thread mapping: one thread per listed defective output pixel (the list: their indices, ascending,
 * built when the maps are uploaded; a full-grid launch had 99.9 % of its threads exit at once: 9.1 us
 * a frame at 1024^2 for ~1,200 pixels). In: raw, the panel maps, flat1. Out: Y (state) at the listed
 * pixels: the mean of their non-defective 4-neighbours' attenuation (stage_process_cpu.c). */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_process_defects(const __grid_constant__ xt_chain_frame_const fc,
                                                                    const xt_chain_tables *tab, const float *gain,
                                                                    const float *offset, const unsigned char *defect,
                                                                    const uint32_t *list, unsigned n,
                                                                    const uint16_t *raw, float *Y) {
  const unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const unsigned o = list[j];
  const float flat1 = __ldg(&tab->flat1);
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const int nr[4] = {r, r, r - 1, r + 1}, nc[4] = {c - 1, c + 1, c, c};
  float s = 0.f;
  int m = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (nr[k] < 0 || nr[k] >= fc.orows || nc[k] < 0 || nc[k] >= fc.ocols) continue;
    const float v = atten(fc, flat1, gain, offset, defect, raw, nr[k], nc[k]);
    if (v == v) {
      s += v;
      m++;
    }
  }
  Y[o] = xt_process_temporal(&fc.pc, m ? s / (float)m : 0.f, Y[o]);
}

#define POUT_TW 32 /* k_process_out's tile, columns x rows (its threads) */
#define POUT_TH 8

/* Thread mapping: a block is a POUT_TW x POUT_TH tile of the output grid, thread (x, y) its pixel;
 * the tile and a 1-pixel halo of Y (minus the DSA mask) staged in shared memory, edges replicated.
 * In: Y, fc.pc.dsa_mask. Out: proc. The sums are the CPU twin's, in its order. */
__global__ void __launch_bounds__(POUT_TW *POUT_TH) k_process_out(const __grid_constant__ xt_chain_frame_const fc,
                                                                  const float *Y, uint16_t *proc) {
  __shared__ float s_y[POUT_TH + 2][POUT_TW + 2];
  const int ocols = fc.ocols, orows = fc.orows;
  const int c0 = blockIdx.x * POUT_TW, r0 = blockIdx.y * POUT_TH;
  const int tid = threadIdx.y * POUT_TW + threadIdx.x;
  const float *M = fc.pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
  for (int k = tid; k < (POUT_TH + 2) * (POUT_TW + 2); k += POUT_TW * POUT_TH) {
    const int ly = k / (POUT_TW + 2), lx = k - ly * (POUT_TW + 2);
    int y = r0 - 1 + ly, x = c0 - 1 + lx;
    y = y < 0 ? 0 : (y >= orows ? orows - 1 : y);
    x = x < 0 ? 0 : (x >= ocols ? ocols - 1 : x);
    const size_t i = (size_t)y * ocols + x;
    s_y[ly][lx] = M ? Y[i] - M[i] : Y[i];
  }
  __syncthreads();
  const int c = c0 + threadIdx.x, r = r0 + threadIdx.y;
  if (c >= ocols || r >= orows) return;
  float s = 0.f;
#pragma unroll
  for (int dy = 0; dy < 3; dy++)
#pragma unroll
    for (int dx = 0; dx < 3; dx++)
      s += s_y[threadIdx.y + dy][threadIdx.x + dx];
  const float y0 = s_y[threadIdx.y + 1][threadIdx.x + 1];
  const float e = y0 + fc.pc.edge_gain * (y0 - s * (1.f / 9.f));
  proc[(size_t)r * ocols + c] = xt_process_window(&fc.pc, e);
}

int xt_stage_process_cuda(const xt_chain_frame_const *fc, const xt_chain_tables *d_tab, const float *gain,
                          const float *offset, const unsigned char *defect, const uint32_t *list, unsigned n,
                          const uint16_t *raw, float *Y, uint16_t *proc, cudaStream_t st, xt_msg *msg) {
  if (n) {
    k_process_defects<<<(n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK, XT_STAGE_BLOCK, 0, st>>>(*fc, d_tab, gain, offset,
                                                                                            defect, list, n, raw, Y);
    XT_SCK(cudaGetLastError());
  }
  const dim3 grid((unsigned)((fc->ocols + POUT_TW - 1) / POUT_TW), (unsigned)((fc->orows + POUT_TH - 1) / POUT_TH));
  k_process_out<<<grid, dim3(POUT_TW, POUT_TH), 0, st>>>(*fc, Y, proc);
  XT_SCK(cudaGetLastError());
  return 0;
}
