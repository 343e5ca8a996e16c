/* Stage "detect" on the GPU (twin of stage_detect_cpu.c): one thread per render pixel, in two
 * forms. k_detect<false> integrates the spectrum over the channel planes (the tables, energy bins x
 * channels, read from shared memory, loaded once per block). k_detect<true> finishes the fused
 * path, where the projector already evaluated the same integral (xt_spectral_sum) in its march's
 * epilogue and left its two sums: geometry, collimation, scatter and the quanta's draw. */
#include "xt_stage_cuda.h"

/* Thread mapping: a grid-stride loop over the render pixels (linear index), so that each block
 * copies the tables (5 KB) into shared memory once for many pixels. In: A (nch channel planes; SUMS:
 * the 2 planes of the spectral sums), the tables. Out: X, F, and S when non-NULL. */
template <bool SUMS>
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_detect(const xt_chain_tables *tab, const __grid_constant__ xt_chain_frame_const fc, const float *A, float *X,
             float *F, float *S) {
  __shared__ xt_chain_tables t;
  if (!SUMS) {
    const int words = (int)(sizeof t / 4);
    const unsigned *src = (const unsigned *)tab;
    unsigned *dst = (unsigned *)&t;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
      dst[i] = __ldg(src + i);
    __syncthreads();
  }
  const float flat1 = __ldg(&tab->flat1), flat2 = __ldg(&tab->flat2);
  const size_t plane = (size_t)fc.cols * fc.rows;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (size_t)gridDim.x * blockDim.x) {
    const int row = (int)(i / fc.cols), col = (int)(i % fc.cols);
    const float G = xt_pixel_geometry(&fc.cam, col, row, fc.mas);
    float s, q;
    if (SUMS) {
      s = G * A[i]; /* xt_detect_expect's last step */
      q = G * A[plane + i];
    } else {
      float a[XT_CHAIN_MAX_CH];
#pragma unroll
      for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
        a[c] = c < t.nch ? A[plane * c + i] : 0.f;
      xt_detect_expect(&t, a, G, &s, &q);
    }
    const float tc = xt_collim_t(&fc.coll, col, row); /* shutters, wedges, grid (issue 11) */
    s *= tc;
    q *= tc;
    if (fc.sc.field) { /* scatter (issue 11): its quanta at the primary's mean energy per quantum */
      const float sc = xt_scatter_at(&fc.sc, col, row);
      s += sc;
      q += sc * (flat2 / flat1);
    }
    if (S)
      S[i] = s;
    F[i] = G * flat1 * fc.coll.grid_tp; /* the flat field is calibrated with the grid in */
    if (fc.noise) {
      xt_rng g;
      xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)i, XT_RNG_QUANTA);
      X[i] = xt_detect_draw(s, q, &g);
    } else {
      X[i] = s;
    }
  }
}

static int launch(bool sums, const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                  float *F, float *S, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  size_t blocks = (n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK;
  if (blocks > XT_DETECT_MAX_BLOCKS)
    blocks = XT_DETECT_MAX_BLOCKS;
  if (sums)
    k_detect<true><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  else
    k_detect<false><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  XT_SCK(cudaGetLastError());
  return 0;
}

int xt_stage_detect_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                         float *F, float *S, cudaStream_t st, xt_msg *msg) {
  return launch(false, d_tab, fc, A, X, F, S, st, msg);
}

int xt_stage_detect_sums_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *P, float *X,
                              float *F, float *S, cudaStream_t st, xt_msg *msg) {
  return launch(true, d_tab, fc, P, X, F, S, st, msg);
}
