/* Stage "detect" on the GPU (twin of stage_detect_cpu.c): one thread per render pixel, in two
 * forms. k_detect<false> integrates the spectrum over the channel planes (the tables, energy bins x
 * channels, read from shared memory, loaded once per block). k_detect<true> finishes the fused
 * path, where the projector already evaluated the same integral (xt_spectral_sum) in its march's
 * epilogue and left its two sums: geometry, collimation, scatter and the quanta's draw, its few
 * undecided tries finished after the block's pass (below, "The split draw"), with the same result
 * bit for bit. */
#include "xt_stage_cuda.h"

/* The split draw. Poisson counts above 10 come from PTRS (xt_chain_math.h): its quick step settles
 * ~3/4 of tries (0.86 vr: 0.67 at 100 quanta, 0.76 at 1000); the others take the full test, which
 * some lane of nearly every warp needs. That test is decided in float (xt_ptrs_test_float: four
 * MUFU logarithms and a log1pf, with a proven error bound) except for the few tries (~0.1 %) within
 * the bound of the boundary, which need it in double: a double path every warp would pay for inline.
 * So k_detect<true> makes the quick steps and the float tests inline; a pixel whose try stays
 * undecided is set aside (pixel, try, S, Q) in the block's shared list, and after the block's pass
 * its first lanes resume PTRS at those tries side by side (draw_resume), each generator seeked to its
 * try's draws: the same tries on the same numbers, so the same count as xt_detect_draw
 * (tests/test_chain_cuda.c compares the two paths bit for bit). The double test then costs one
 * warp of the few blocks that hold such a pixel (~0.1 % of the tests: a few hundred pixels at 1024^2)
 * while other blocks keep the GPU busy; a second kernel over a global list of them (k_draw_rest, up
 * to 7bab0f7) left the GPU nearly idle for 7.4 us a frame. The resumption's registers (72; 64 spill)
 * cost occupancy: blocks of 128, 7 an SM (28 warps, against 32 of 62-register blocks of 256 before);
 * k_detect<true> takes 50.4 us as before, and the 7.4 us are gone (H200, 2026-11-23). Returns the
 * energy, or 0 with *defer the try to resume. */
static __device__ __forceinline__ float draw_first(float s, float q, xt_rng *g, int *defer) {
  if (!(s > 0.f) || !(q > 0.f))
    return 0.f;
  xt_ptrsf pf;
  if (!xt_ptrsf_init(&pf, s, q) || pf.lam < 10.001f) { /* lam near or below 10, or out of the float set-up's range */
    const double n = xt_detect_quanta(s, q);
    if (n < 10.0)
      return xt_detect_energy(xt_rng_poisson(g, n), s, q);
    *defer = 0;
    return 0.f;
  }
  xt_ptrs_tf tf;
  xt_ptrs_tf_of_f(&pf, &tf);
  for (int it = 0; it < XT_PTRS_MAX_TRIES; it++) {
    const uint32_t ju = xt_rng_u32(g), jv = xt_rng_u32(g);
    float k;
    const int r = xt_ptrs_quickf(&pf, ju, jv, &k);
    if (r > 0)
      return xt_detect_energy(k, s, q);
    if (r == -2) {
      *defer = it;
      return 0.f;
    }
    if (r < 0) { /* us and V as (2 m + 1) 2^-33: one rounding, as (float) of the double */
      const float us = __ull2float_rn(2ull * ((ju >> 31) ? ~ju : ju) + 1ull) * 0x1p-33f;
      const float V = __ull2float_rn(2ull * jv + 1ull) * 0x1p-33f;
      const int f = xt_ptrs_test_f(&tf, V, us, k, ((k - pf.li) + 1.f - pf.lf) - pf.llo, 1.f);
      if (f > 0)
        return xt_detect_energy(k, s, q);
      if (f < 0) {
        *defer = it;
        return 0.f;
      }
    }
  }
  return xt_detect_energy(floor(xt_detect_quanta(s, q) + 0.5), s, q);
}

#define DETECT_SUMS_BLOCK 128   /* k_detect<true>'s block (k_detect<false> keeps XT_STAGE_BLOCK) */
#define DETECT_SUMS_MIN_BLOCKS 7 /* its blocks an SM: 72 registers a thread */

/* A pixel whose draw is resumed after the block's pass. */
typedef struct draw_rest {
  uint32_t i; /* pixel */
  int it;     /* the PTRS try to resume */
  float s, q; /* its expected signal and second moment */
} draw_rest;

/* The deferred draw e: PTRS resumed at its try, the generator seeked to the try's draws (what
 * xt_detect_draw computes for the pixel, bit for bit). */
static __device__ __forceinline__ float draw_resume(const xt_chain_frame_const &fc, const draw_rest &e) {
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, e.i, XT_RNG_QUANTA);
  xt_rng_seek(&g, 2u * (unsigned)e.it);
  return xt_detect_energy(xt_ptrs_from(&g, xt_detect_quanta(e.s, e.q), e.it), e.s, e.q);
}

/* Thread mapping: a grid-stride loop over the render pixels (linear index), so that each block
 * copies the tables (5 KB) into shared memory once for many pixels; SUMS: one pixel a thread, one
 * pass a block (no tables to amortise; the pass's barriers gather its deferred draws). In: A (nch
 * channel planes; SUMS: the 2 planes of the spectral sums), the tables. Out: X, and S when
 * non-NULL. The flat field is not stored: the readout evaluates it (xt_stage_flat_adu). (The
 * minimum of 0 blocks for k_detect<false> is "none given": its code is the same as without one.) */
template <bool SUMS>
__global__ void __launch_bounds__(SUMS ? DETECT_SUMS_BLOCK : XT_STAGE_BLOCK, SUMS ? DETECT_SUMS_MIN_BLOCKS : 0)
    k_detect(const xt_chain_tables *tab, const __grid_constant__ xt_chain_frame_const fc, const float *A, float *X,
             float *S) {
  __shared__ xt_chain_tables t;
  __shared__ draw_rest s_rest[SUMS ? DETECT_SUMS_BLOCK : 1]; /* the pass's deferred draws */
  __shared__ unsigned s_n;
  if (!SUMS) {
    const int words = (int)(sizeof t / 4);
    const unsigned *src = (const unsigned *)tab;
    unsigned *dst = (unsigned *)&t;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
      dst[i] = __ldg(src + i);
    __syncthreads();
  }
  const float flat1 = __ldg(&tab->flat1), flat2 = __ldg(&tab->flat2);
  const unsigned plane = (unsigned)fc.cols * (unsigned)fc.rows; /* < 2^31: chain_cuda.cu checks */
  for (unsigned base = blockIdx.x * blockDim.x; base < plane; base += gridDim.x * blockDim.x) {
    const unsigned i = base + threadIdx.x;
    float s = 0.f, q = 0.f;
    int defer = -1;
    if (i < plane) {
      int row, col;
      xt_stage_rc(i, fc.cols, &row, &col);
      const float G = xt_pixel_geometry(&fc.cam, col, row, fc.mas);
      if (SUMS) {
        s = G * A[i]; /* xt_detect_expect's last step */
        q = G * A[plane + i];
      } else {
        float a[XT_CHAIN_MAX_CH];
#pragma unroll
        for (int c = 0; c < XT_CHAIN_MAX_CH; c++)
          a[c] = c < t.nch ? A[(size_t)plane * c + i] : 0.f;
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
      if (fc.noise) {
        xt_rng g;
        xt_rng_init(&g, fc.seed, fc.frame, i, XT_RNG_QUANTA);
        const float x = SUMS ? draw_first(s, q, &g, &defer) : xt_detect_draw(s, q, &g);
        if (defer < 0)
          X[i] = x;
      } else {
        X[i] = s;
      }
    }
    if (SUMS && fc.noise) { /* the pass's deferred draws, gathered, then resumed side by side by the first lanes */
      if (threadIdx.x == 0)
        s_n = 0;
      __syncthreads();
      if (defer >= 0) {
        const draw_rest e = {i, defer, s, q};
        s_rest[atomicAdd(&s_n, 1u)] = e;
      }
      __syncthreads();
      const unsigned m = s_n; /* the same for every thread */
      if (threadIdx.x < m) {
        const draw_rest e = s_rest[threadIdx.x];
        X[e.i] = draw_resume(fc, e);
      }
    }
    if (SUMS)
      break; /* one pass a block (the launch covers the plane): nothing is carried past the resumed draws */
  }
}

int xt_stage_detect_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                         float *S, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  size_t blocks = (n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK;
  if (blocks > XT_DETECT_MAX_BLOCKS)
    blocks = XT_DETECT_MAX_BLOCKS;
  k_detect<false><<<(unsigned)blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, X, S);
  XT_SCK(cudaGetLastError());
  return 0;
}

int xt_stage_detect_sums_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *P, float *X,
                              float *S, cudaStream_t st, xt_msg *msg) {
  const size_t n = (size_t)fc->cols * fc->rows;
  /* one pass a block: no tables to amortise */
  k_detect<true><<<(unsigned)((n + DETECT_SUMS_BLOCK - 1) / DETECT_SUMS_BLOCK), DETECT_SUMS_BLOCK, 0, st>>>(d_tab, *fc, P, X,
                                                                                                        S);
  XT_SCK(cudaGetLastError());
  return 0;
}
