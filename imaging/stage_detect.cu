/* Stage "detect" on the GPU (twin of stage_detect_cpu.c): the polychromatic integral and the
 * quanta, per render pixel. The tables (energy bins x channels) are read from shared memory,
 * loaded once per block.
 *
 * Work per pixel at 8 channels and 71 bins: per bin 8 FMAs (sum_c (mu/rho)_bc A_c), one 2^x
 * (MUFU), 2 FMAs (S and Q), and the bin's table row: two 128-bit shared loads (mr) and two
 * 32-bit ones (k1, k2) - ~11 ALU instructions and 4 shared loads per bin, ~800 + ~280 per pixel.
 * Each bin's 8-FMA sum is a dependent chain. A thread therefore takes NPIX pixels (XT_DETECT_PIXELS,
 * 1, 2 or 4): every table row loaded once serves NPIX pixels (shared loads / NPIX) and the NPIX
 * chains are independent, so the scheduler has NPIX-fold instruction-level parallelism. Each
 * pixel's arithmetic is xt_detect_expect's, operation for operation (xt_chain_math.h), so the
 * result does not depend on NPIX. Memory per frame at 1024^2: the 8 channel planes read (32 MiB),
 * X and F written (8 MiB). */
#include <stdlib.h>

#include "xt_stage_cuda.h"

/* Thread mapping: a grid-stride loop over groups of NPIX x blockDim pixels (linear index); thread t
 * of a block takes pixels base + t + k blockDim, k < NPIX (each of the NPIX loads coalesced), so
 * that each block copies the tables (5 KB) into shared memory once for many pixels. In: A (nch
 * planes), the tables. Out: X, F, and S when non-NULL. */
template <int NPIX>
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
  const size_t group = (size_t)NPIX * blockDim.x;
  for (size_t base = (size_t)blockIdx.x * group; base < plane; base += (size_t)gridDim.x * group) {
    float a[NPIX][XT_CHAIN_MAX_CH];
    size_t idx[NPIX];
#pragma unroll
    for (int k = 0; k < NPIX; k++) {
      idx[k] = base + threadIdx.x + (size_t)k * blockDim.x;
      const bool in = idx[k] < plane;
#pragma unroll
      for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
        a[k][c] = in && c < t.nch ? A[plane * c + idx[k]] : 0.f;
    }
    /* xt_detect_expect for NPIX pixels at once: the same operations per pixel, in the same order */
    float s[NPIX], q[NPIX];
#pragma unroll
    for (int k = 0; k < NPIX; k++)
      s[k] = q[k] = 0.f;
    for (int b = 0; b < t.nbins; b++) {
      float mr[XT_CHAIN_MAX_CH];
#pragma unroll
      for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
        mr[c] = t.mr[b][c];
      const float k1 = t.k1[b], k2 = t.k2[b];
#pragma unroll
      for (int k = 0; k < NPIX; k++) {
        float mu = 0.f;
#pragma unroll
        for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
          mu += mr[c] * a[k][c];
        const float tr = xt_exp2(-mu);
        s[k] += k1 * tr;
        q[k] += k2 * tr;
      }
    }
#pragma unroll
    for (int k = 0; k < NPIX; k++) {
      const size_t i = idx[k];
      if (i >= plane)
        continue;
      const int row = (int)(i / fc.cols), col = (int)(i % fc.cols);
      const float G = xt_pixel_geometry(&fc.cam, col, row, fc.mas);
      const float sk = G * s[k], qk = G * q[k];
      if (S)
        S[i] = sk;
      F[i] = G * t.flat1;
      if (fc.noise) {
        xt_rng g;
        xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)i, XT_RNG_QUANTA);
        X[i] = xt_detect_draw(sk, qk, &g);
      } else {
        X[i] = sk;
      }
    }
  }
}

/* Pixels per thread: XT_DETECT_PIXELS (1, 2 or 4) when set, for measurements; else 2. */
static int detect_pixels(void) {
  static int n = 0;
  if (!n) {
    const char *e = getenv("XT_DETECT_PIXELS");
    const int v = e ? atoi(e) : 0;
    n = v == 1 || v == 2 || v == 4 ? v : 2;
  }
  return n;
}

int xt_stage_detect_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                         float *F, float *S, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  const int np = detect_pixels();
  size_t blocks = (n + (size_t)np * XT_STAGE_BLOCK - 1) / ((size_t)np * XT_STAGE_BLOCK);
  if (blocks > XT_DETECT_MAX_BLOCKS)
    blocks = XT_DETECT_MAX_BLOCKS;
  if (np == 1)
    k_detect<1><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  else if (np == 2)
    k_detect<2><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  else
    k_detect<4><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, F, S);
  XT_SCK(cudaGetLastError());
  return 0;
}
