/* Stage "process" on the GPU (twin of stage_process_cpu.c): correction, defect interpolation, log
 * and the recursive filter (pass 1: k_readout at the non-defective pixels, stage_readout.cu;
 * k_process_out at the others, from the whole raw frame), edge enhancement and window/level
 * (pass 2, k_process_out); with the automatic window (`window` 0) between them its histogram
 * (k_auto_hist) and pick (k_auto_pick), which writes the frame's window and level to device memory
 * for k_process_out (xt_chain_math.h states the rule; stage_process_cpu.c is the twin). */
#include "xt_stage_cuda.h"

/* Relaxed (morally strong) device-scope accesses of the temporal state Y in k_process_out: a
 * block stores the defective pixels of its tile while the blocks beside it load their halos, which
 * may hold those pixels; the halo's loaded value is replaced by the block's own computation, but
 * plain accesses would be a data race. */
static __device__ __forceinline__ float y_load(const float *p) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
static __device__ __forceinline__ void y_store(float *p, float v) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

/* A defective output pixel o at (r, c) and what its interpolation needs of its 4-neighbours that no
 * frame changes (their indices, defect codes and gain/offset maps: loaded before k_process_out
 * waits for k_readout), then per frame (defect_y) their codes. */
typedef struct defect_nb {
  unsigned o, i[4];
  int r, c;
  bool in[4];
  unsigned char dk[4];
  float gk[4], ok[4];
} defect_nb;

static __device__ __forceinline__ void defect_maps(const xt_chain_frame_const &fc, const float *gain,
                                                   const float *offset, const unsigned char *defect, unsigned o,
                                                   defect_nb *n) {
  n->o = o;
  xt_stage_rc(o, fc.ocols, &n->r, &n->c);
  const int nr[4] = {n->r, n->r, n->r - 1, n->r + 1}, nc[4] = {n->c - 1, n->c + 1, n->c, n->c};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    n->in[k] = nr[k] >= 0 && nr[k] < fc.orows && nc[k] >= 0 && nc[k] < fc.ocols;
    n->i[k] = n->in[k] ? (unsigned)nr[k] * (unsigned)fc.ocols + (unsigned)nc[k] : o;
    n->dk[k] = __ldg(defect + n->i[k]);
    n->gk[k] = __ldg(gain + n->i[k]);
    n->ok[k] = __ldg(offset + n->i[k]);
  }
}

/* The state after this frame of the defective pixel n, whose state before it is yp: the mean of
 * its non-defective 4-neighbours' attenuation (stage_process_cpu.c), the flat field as the readout
 * evaluates it (xt_stage_flat_adu: the same value). The 4 codes are loaded at once (whether or not
 * they are used), plain loads: k_readout wrote them, and this kernel may have started before it
 * ended (programmatic launch). */
static __device__ __forceinline__ float defect_y(const xt_chain_frame_const &fc, float flat1, const uint16_t *raw,
                                                 const defect_nb &n, float yp) {
  uint16_t rk[4];
#pragma unroll
  for (int k = 0; k < 4; k++) rk[k] = raw[n.i[k]];
  const int nr[4] = {n.r, n.r, n.r - 1, n.r + 1}, nc[4] = {n.c - 1, n.c + 1, n.c, n.c};
  float s = 0.f;
  int m = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (!n.in[k] || n.dk[k] != XT_DEFECT_NONE) continue;
    const float v = xt_process_log(xt_process_correct((float)rk[k], n.gk[k], n.ok[k]), xt_stage_flat_adu(fc, flat1, nr[k], nc[k]));
    if (v == v) { /* as the CPU twin: a NaN attenuation is left out */
      s += v;
      m++;
    }
  }
  return xt_process_temporal(&fc.pc, m ? s / (float)m : 0.f, yp);
}

/* The automatic window's histogram of Y (minus the DSA mask) over the counted pixels: a block's
 * counts in shared memory (integer atomics: the counts, not their order, are the result), added
 * to the global histogram's non-zero bins. The defect map is static (read before the wait); Y is
 * k_readout's (after it). */
#define AUTO_HIST_THREADS 256
#define AUTO_HIST_MAX_BLOCKS 264 /* 2 per SM of a 132-SM Hopper: the shared histogram is 32 KB */
__global__ void __launch_bounds__(AUTO_HIST_THREADS) k_auto_hist(const __grid_constant__ xt_chain_frame_const fc,
                                                                 const unsigned char *defect, const float *Y,
                                                                 uint32_t *hist) {
  __shared__ uint32_t s_h[XT_AUTO_BINS];
  for (int b = threadIdx.x; b < XT_AUTO_BINS; b += AUTO_HIST_THREADS) s_h[b] = 0;
  __syncthreads();
  const unsigned n = (unsigned)fc.ocols * (unsigned)fc.orows;
  const float *M = fc.pc.dsa_mask;
  xt_stage_wait_prior(); /* Y: k_readout's */
  for (unsigned i = blockIdx.x * AUTO_HIST_THREADS + threadIdx.x; i < n; i += gridDim.x * AUTO_HIST_THREADS) {
    int r, c;
    xt_stage_rc(i, fc.ocols, &r, &c);
    if (!xt_auto_counts(&fc.coll, fc.ro.bin, __ldg(defect + i), r, c)) continue;
    atomicAdd(&s_h[xt_auto_bin(M ? Y[i] - M[i] : Y[i])], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < XT_AUTO_BINS; b += AUTO_HIST_THREADS)
    if (s_h[b]) atomicAdd(hist + b, s_h[b]);
}

/* The pick: one block, AUTO_PICK_PER bins a thread; their counts' exclusive prefix by a scan in
 * shared memory; the thread whose bins hold a quantile's rank walks them as the CPU twin's loop
 * does (the same bin, the same arithmetic); thread 0 writes window and level. The histogram is
 * zeroed for the next frame as it is read (allocated zeroed: no memset per frame). */
#define AUTO_PICK_THREADS 1024
#define AUTO_PICK_PER (XT_AUTO_BINS / AUTO_PICK_THREADS)
__global__ void __launch_bounds__(AUTO_PICK_THREADS) k_auto_pick(uint32_t *hist, float *wl) {
  __shared__ unsigned s_sum[AUTO_PICK_THREADS];
  __shared__ float s_q[2];
  const int t = threadIdx.x;
  if (t < 2) s_q[t] = 0.f;
  xt_stage_wait_prior(); /* hist: k_auto_hist's */
  unsigned h[AUTO_PICK_PER], own = 0;
#pragma unroll
  for (int k = 0; k < AUTO_PICK_PER; k++) {
    h[k] = hist[t * AUTO_PICK_PER + k];
    own += h[k];
  }
#pragma unroll
  for (int k = 0; k < AUTO_PICK_PER; k++) hist[t * AUTO_PICK_PER + k] = 0u;
  s_sum[t] = own;
  __syncthreads();
  for (int off = 1; off < AUTO_PICK_THREADS; off <<= 1) { /* inclusive scan (Hillis-Steele) */
    const unsigned v = t >= off ? s_sum[t - off] : 0u;
    __syncthreads();
    s_sum[t] += v;
    __syncthreads();
  }
  const unsigned n = s_sum[AUTO_PICK_THREADS - 1], before = s_sum[t] - own;
  const float rank[2] = {xt_auto_rank(n, XT_AUTO_Q), xt_auto_rank(n, 1.f - XT_AUTO_Q)};
#pragma unroll
  for (int q = 0; q < 2; q++) {
    if (!xt_auto_in(before, own, rank[q])) continue;
    unsigned below = before;
    for (int k = 0; k < AUTO_PICK_PER; k++) {
      if (xt_auto_in(below, h[k], rank[q])) {
        s_q[q] = xt_auto_value(t * AUTO_PICK_PER + k, below, h[k], rank[q]);
        break;
      }
      below += h[k];
    }
  }
  __syncthreads();
  if (t == 0) xt_auto_wl(s_q[0], s_q[1], &wl[0], &wl[1]);
}

#define POUT_TW XT_POUT_TW /* k_process_out's tile, columns x rows (xt_stage_cuda.h: the host lists by it) */
#define POUT_TH XT_POUT_TH
#define POUT_BY 8 /* its threads: POUT_TW x POUT_BY, each POUT_TH / POUT_BY rows */
#define POUT_CELLS ((POUT_TH + 2) * (POUT_TW + 2))
#define POUT_THREADS (POUT_TW * POUT_BY)

/* Candidate k (0..2) of the staged rows (or columns) that hold output row r of the tile at r0 (n
 * rows in all): its own, the replicated halo row above row 0, the one below the last row. Returns
 * whether it holds it; *l the staged index. */
static __device__ __forceinline__ bool cell_of(int k, int r, int r0, int n, int lim, int *l) {
  const int own = r - r0 + 1;
  *l = k == 0 ? own : (k == 1 ? 0 : own + 1);
  return k == 0 ? own >= 0 && own < lim : (k == 1 ? r == 0 && r0 == 0 : r == n - 1 && own + 1 < lim);
}

/* Thread mapping: a block is a POUT_TW x POUT_TH tile of the output grid; thread (x, y) makes the
 * tile's rows y, y + POUT_BY, ... at column x. The tile and a 1-pixel halo of Y (minus the DSA mask)
 * are staged in shared memory, edges replicated, every load issued before the first is used, one
 * wave of blocks at 1024^2 (an output pixel a thread and 3x3 global loads each took 8.9 us,
 * latency-bound in waves; 7.0 us, H200). In: Y, fc.pc.dsa_mask; the defective pixels of the tile and
 * its halo (bl[boff[b] .. boff[b + 1]), block b = blockIdx.y * gridDim.x + blockIdx.x; the host
 * builds the lists when the maps are uploaded; boff NULL: none), raw, the maps, and Yd, their state
 * before this frame (k_readout copied it). Out: proc; Y at the tile's defective pixels.
 *
 * The defective pixels are pass 1 of the processing at the pixels k_readout leaves: the mean of
 * their neighbours' attenuation needs the whole raw frame. Each block computes the ones its tile
 * and halo hold (a halo's pixel is computed by up to 4 blocks, the same value) and only the tile's
 * owner stores it, so no block reads a state another block writes but through y_load, whose value
 * it then replaces. This was a kernel of its own over a list of the pixels (k_process_defects,
 * 6.9 us a frame at 1024^2 beside k_process_out's 7.0, H200 ncu: latency only); folded, 11.6 us
 * (the defect blocks' dependent loads: list, maps, codes) and one launch fewer. The sums are the CPU
 * twin's, in its order. */
__global__ void __launch_bounds__(POUT_THREADS) k_process_out(const __grid_constant__ xt_chain_frame_const fc,
                                                              const xt_chain_tables *tab, const float *gain,
                                                              const float *offset, const unsigned char *defect,
                                                              const uint32_t *boff, const uint32_t *bl,
                                                              const uint16_t *raw, const float *Yd, float *Y,
                                                              uint16_t *proc) {
  __shared__ float s_y[POUT_TH + 2][POUT_TW + 2];
  const int ocols = fc.ocols, orows = fc.orows;
  const int c0 = blockIdx.x * POUT_TW, r0 = blockIdx.y * POUT_TH;
  const int tid = threadIdx.y * POUT_TW + threadIdx.x;
  const float *M = fc.pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
  /* what no frame writes first, before the wait: the block's defective pixels and, for the first
   * POUT_THREADS of them (one a thread), their neighbours' maps */
  unsigned j0 = 0, nj = 0;
  if (boff) {
    const unsigned b = blockIdx.y * gridDim.x + blockIdx.x;
    j0 = __ldg(boff + b);
    nj = __ldg(boff + b + 1) - j0;
  }
  defect_nb dn;
  if ((unsigned)tid < nj) defect_maps(fc, gain, offset, defect, __ldg(bl + j0 + tid), &dn);
  xt_stage_wait_prior(); /* Y, Yd, raw: k_readout's */
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
      v[p] = M ? y_load(Y + i) - M[i] : y_load(Y + i);
    }
  }
  float dv = 0.f;
  if ((unsigned)tid < nj) dv = defect_y(fc, tab->flat1, raw, dn, Yd[dn.o]); /* its loads issued with the staging's */
#pragma unroll
  for (int p = 0; p < PASSES; p++) {
    const int k = tid + p * POUT_THREADS;
    if (k < POUT_CELLS) (&s_y[0][0])[k] = v[p];
  }
  __syncthreads();
  if (nj) { /* block-uniform */
    for (unsigned j = tid; j < nj; j += POUT_THREADS) {
      if (j >= POUT_THREADS) { /* past the first POUT_THREADS: one at a time */
        defect_maps(fc, gain, offset, defect, __ldg(bl + j0 + j), &dn);
        dv = defect_y(fc, tab->flat1, raw, dn, Yd[dn.o]);
      }
      const float e = M ? dv - M[dn.o] : dv;
#pragma unroll
      for (int a = 0; a < 3; a++) {
        int ly, lx;
        if (!cell_of(a, dn.r, r0, orows, POUT_TH + 2, &ly)) continue;
#pragma unroll
        for (int q = 0; q < 3; q++)
          if (cell_of(q, dn.c, c0, ocols, POUT_TW + 2, &lx)) s_y[ly][lx] = e;
      }
      if (dn.r >= r0 && dn.r < r0 + POUT_TH && dn.c >= c0 && dn.c < c0 + POUT_TW) y_store(Y + dn.o, dv);
    }
    __syncthreads();
  }
  const int c = c0 + threadIdx.x;
  if (c >= ocols) return;
  const float *wl = fc.pc.wl; /* the automatic window: k_auto_pick's (after the wait) */
  const float W = wl ? wl[0] : fc.pc.window, L = wl ? wl[1] : fc.pc.level;
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
    proc[(size_t)r * ocols + c] = xt_process_window_wl(W, L, fc.pc.out_max, e);
  }
}

int xt_stage_process_cuda(const xt_chain_frame_const *fc, const xt_chain_tables *d_tab, const float *gain,
                          const float *offset, const unsigned char *defect, const uint32_t *boff, const uint32_t *bl,
                          const uint16_t *raw, const float *Yd, float *Y, uint16_t *proc, uint32_t *hist,
                          cudaStream_t st, xt_msg *msg) {
  if (fc->pc.wl) { /* the automatic window */
    const unsigned n = (unsigned)fc->ocols * (unsigned)fc->orows;
    unsigned blocks = (n + AUTO_HIST_THREADS * 8 - 1) / (AUTO_HIST_THREADS * 8);
    blocks = blocks < 1 ? 1 : (blocks > AUTO_HIST_MAX_BLOCKS ? AUTO_HIST_MAX_BLOCKS : blocks);
    XT_SCK(xt_stage_launch(k_auto_hist, dim3(blocks), dim3(AUTO_HIST_THREADS), st, *fc, defect, (const float *)Y, hist));
    XT_SCK(xt_stage_launch(k_auto_pick, dim3(1), dim3(AUTO_PICK_THREADS), st, hist, (float *)fc->pc.wl));
  }
  const dim3 grid((unsigned)((fc->ocols + POUT_TW - 1) / POUT_TW), (unsigned)((fc->orows + POUT_TH - 1) / POUT_TH));
  XT_SCK(xt_stage_launch(k_process_out, grid, dim3(POUT_TW, POUT_BY), st, *fc, d_tab, gain, offset, defect, boff, bl, raw,
                         Yd, Y, proc));
  return 0;
}
