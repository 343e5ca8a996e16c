/* Stage "process" on the GPU (twin of stage_process_cpu.c): correction, defect interpolation, log
 * and the recursive filter (pass 1: k_readout at the non-defective pixels, stage_readout.cu;
 * k_process_defects at the others), edge enhancement and window/level (pass 2, k_process_out). */
#include "xt_stage_cuda.h"

/* Thread mapping: one thread per listed defective output pixel (the list: their indices, ascending,
 * built when the maps are uploaded; a full-grid launch had 99.9 % of its threads exit at once: 9.2 us
 * a frame at 1024^2 for ~1,250 pixels, 6.7 us now, H200). Every load a thread needs is issued at once after the list's
 * (the neighbours' codes and maps whether or not they are used): one memory round trip, not three.
 * In: raw, the panel maps, flat1. Out: Y (state) at the listed pixels: the mean of their
 * non-defective 4-neighbours' attenuation (stage_process_cpu.c), the flat field as the readout
 * evaluates it (xt_stage_flat_adu: the same value). */
__global__ void __launch_bounds__(XT_STAGE_BLOCK) k_process_defects(const __grid_constant__ xt_chain_frame_const fc,
                                                                    const xt_chain_tables *tab, const float *gain,
                                                                    const float *offset, const unsigned char *defect,
                                                                    const uint32_t *list, unsigned n,
                                                                    const uint16_t *raw, float *Y) {
  const unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const unsigned o = __ldg(list + j);
  int r, c;
  xt_stage_rc(o, fc.ocols, &r, &c);
  const int nr[4] = {r, r, r - 1, r + 1}, nc[4] = {c - 1, c + 1, c, c};
  bool in[4];
  unsigned char dk[4];
  uint16_t rk[4];
  float gk[4], ok[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    in[k] = nr[k] >= 0 && nr[k] < fc.orows && nc[k] >= 0 && nc[k] < fc.ocols;
    const unsigned i = in[k] ? (unsigned)nr[k] * (unsigned)fc.ocols + (unsigned)nc[k] : o;
    dk[k] = __ldg(defect + i);
    rk[k] = __ldg(raw + i);
    gk[k] = __ldg(gain + i);
    ok[k] = __ldg(offset + i);
  }
  const float yp = Y[o], flat1 = __ldg(&tab->flat1);
  float s = 0.f;
  int m = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (!in[k] || dk[k] != XT_DEFECT_NONE) continue;
    const float v = xt_process_log(xt_process_correct((float)rk[k], gk[k], ok[k]), xt_stage_flat_adu(fc, flat1, nr[k], nc[k]));
    if (v == v) { /* as the CPU twin: a NaN attenuation is left out */
      s += v;
      m++;
    }
  }
  Y[o] = xt_process_temporal(&fc.pc, m ? s / (float)m : 0.f, yp);
}

#define POUT_TW 32 /* k_process_out's tile, columns x rows */
#define POUT_TH 32
#define POUT_BY 8 /* its threads: POUT_TW x POUT_BY, each POUT_TH / POUT_BY rows */
#define POUT_CELLS ((POUT_TH + 2) * (POUT_TW + 2))
#define POUT_THREADS (POUT_TW * POUT_BY)

/* Thread mapping: a block is a POUT_TW x POUT_TH tile of the output grid; thread (x, y) makes the
 * tile's rows y, y + POUT_BY, ... at column x. The tile and a 1-pixel halo of Y (minus the DSA mask)
 * are staged in shared memory, edges replicated, every load issued before the first is used, one
 * wave of blocks at 1024^2 (an output pixel a thread and 3x3 global loads each, as before, took 8.9 us,
 * latency-bound in waves; 7.0 us now, H200). In: Y, fc.pc.dsa_mask. Out: proc. The sums are the CPU twin's, in its order. */
__global__ void __launch_bounds__(POUT_THREADS) k_process_out(const __grid_constant__ xt_chain_frame_const fc,
                                                              const float *Y, uint16_t *proc) {
  __shared__ float s_y[POUT_TH + 2][POUT_TW + 2];
  const int ocols = fc.ocols, orows = fc.orows;
  const int c0 = blockIdx.x * POUT_TW, r0 = blockIdx.y * POUT_TH;
  const int tid = threadIdx.y * POUT_TW + threadIdx.x;
  const float *M = fc.pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
  constexpr int PASSES = (POUT_CELLS + POUT_THREADS - 1) / POUT_THREADS;
  float v[PASSES];
#pragma unroll
  for (int p = 0; p < PASSES; p++) {
    const int k = tid + p * POUT_THREADS;
    v[p] = 0.f;
    if (k < POUT_CELLS) {
      const int ly = k / (POUT_TW + 2), lx = k - ly * (POUT_TW + 2);
      int y = r0 - 1 + ly, x = c0 - 1 + lx;
      y = y < 0 ? 0 : (y >= orows ? orows - 1 : y);
      x = x < 0 ? 0 : (x >= ocols ? ocols - 1 : x);
      const size_t i = (size_t)y * ocols + x;
      v[p] = M ? Y[i] - M[i] : Y[i];
    }
  }
#pragma unroll
  for (int p = 0; p < PASSES; p++) {
    const int k = tid + p * POUT_THREADS;
    if (k < POUT_CELLS) (&s_y[0][0])[k] = v[p];
  }
  __syncthreads();
  const int c = c0 + threadIdx.x;
  if (c >= ocols) return;
#pragma unroll
  for (int ry = 0; ry < POUT_TH / POUT_BY; ry++) {
    const int ly = threadIdx.y + ry * POUT_BY, r = r0 + ly;
    if (r >= orows) break;
    float s = 0.f;
#pragma unroll
    for (int dy = 0; dy < 3; dy++)
#pragma unroll
      for (int dx = 0; dx < 3; dx++)
        s += s_y[ly + dy][threadIdx.x + dx];
    const float y0 = s_y[ly + 1][threadIdx.x + 1];
    const float e = y0 + fc.pc.edge_gain * (y0 - s * (1.f / 9.f));
    proc[(size_t)r * ocols + c] = xt_process_window(&fc.pc, e);
  }
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
  k_process_out<<<grid, dim3(POUT_TW, POUT_BY), 0, st>>>(*fc, Y, proc);
  XT_SCK(cudaGetLastError());
  return 0;
}
