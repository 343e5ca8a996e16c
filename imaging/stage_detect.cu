/* Stage "detect" on the GPU (twin of stage_detect_cpu.c): one thread per render
 * pixel. The tables (energy bins x channels) are read from shared memory,
 * loaded once per block. */
#include "xt_stage_cuda.h"

/* Thread mapping: a grid-stride loop over the render pixels (linear index), so
 * that each block copies the tables (5 KB) into shared memory once for many
 * pixels. In: A (nch planes), the tables. Out: X, F, and S when non-NULL. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_detect(const xt_chain_tables *tab, const __grid_constant__ xt_chain_frame_const fc, const float *A, float *X,
             float *F, float *S) {
  __shared__ xt_chain_tables t;
  {
    const int words = (int)(sizeof t / 4);
    const unsigned *src = (const unsigned *)tab;
    unsigned *dst = (unsigned *)&t;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
      dst[i] = __ldg(src + i);
  }
  __syncthreads();
  const size_t plane = (size_t)fc.cols * fc.rows;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (size_t)gridDim.x * blockDim.x) {
    const int row = (int)(i / fc.cols), col = (int)(i % fc.cols);
    float a[XT_CHAIN_MAX_CH];
#pragma unroll
    for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
      a[c] = c < t.nch ? A[plane * c + i] : 0.f;
    const float G = xt_pixel_geometry(&fc.cam, col, row, fc.mas);
    float s, q;
    xt_detect_expect(&t, a, G, &s, &q);
    const float tc = xt_collim_t(&fc.coll, col, row); /* shutters, wedges, grid (issue 11) */
    s *= tc;
    q *= tc;
    if (fc.sc.field) { /* scatter (issue 11): its quanta at the primary's mean energy per quantum */
      const float sc = xt_scatter_at(&fc.sc, col, row);
      s += sc;
      q += sc * (t.flat2 / t.flat1);
    }
    if (S)
      S[i] = s;
    F[i] = G * t.flat1 * fc.coll.grid_tp; /* the flat field is calibrated with the grid in */
    if (fc.noise) {
      xt_rng g;
      xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)i, XT_RNG_QUANTA);
      X[i] = xt_detect_draw(s, q, &g);
    } else {
      X[i] = s;
    }
  }
}

int xt_stage_detect_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                         float *F, float *S, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  size_t blocks = (n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK;
  if (blocks > XT_DETECT_MAX_BLOCKS)
    blocks = XT_DETECT_MAX_BLOCKS;
  k_detect<<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  XT_SCK(cudaGetLastError());
  return 0;
}
