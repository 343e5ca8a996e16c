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
 * some lane of nearly every warp needs. In the all-double form every try costs FP64 divisions and a
 * square root a pixel: long dependent chains that stalled the latency-bound kernel. So the inline
 * draw (draw_first) is all float: the set-up and the quick step (xt_ptrsf, xt_ptrs_quickf) and the
 * full test on the float set-up (xt_ptrs_tf_of_f, xt_ptrs_test_f), each decided within a proven
 * error bound of its boundary, which leaves a try undecided at 0.06 % of pixels at 1000 quanta,
 * 0.16 % at 1e4, 1.4 % at 1e6. A pixel whose try is undecided, or whose quanta lie below or near 10
 * (the inversion) or past 2^22, resumes the draw at that try in double (draw_resume, the generator
 * at the try's draws): the same tries on the same numbers, so the same count as xt_detect_draw
 * (tests/test_chain_cuda.c compares the two paths bit for bit at 1 to 2.4e7 quanta). The lanes
 * resume after the warp's other lanes are done: only warps holding such a pixel pay for the double
 * path, and the resumed test is the double one alone (xt_ptrs_test_double, the same answers): 64
 * registers, 8 blocks of 128 an SM (32 warps). Until round 6 every try took FP64 divisions, and a
 * block gathered its deferred pixels in shared memory for its first lanes to resume after a barrier
 * (72 registers, 7 blocks): 50.5 us a frame at (a); now 41.5 (H200, 2026-11-23). */

/* The generator's block `blk` of the quanta stream: words 2 it, 2 it + 1 of try it are block it / 2's
 * words 0, 1 (it even) or 2, 3 (odd), what xt_rng_u32 returns, without its dynamic selection. */
static __device__ __forceinline__ xt_u32x4 try_words(const xt_rng *g, unsigned blk) {
  const xt_u32x4 c = {{g->pixel, g->flo, g->fhi, (g->stream << 16) | (blk & 0xFFFFu)}};
  return xt_philox4x32_10(c, g->k0, g->k1);
}

/* The inline draw: returns the energy, or 0 with *defer the try to resume. */
static __device__ __forceinline__ float draw_first(float s, float q, xt_rng *g, int *defer) {
  if (!(s > 0.f) || !(q > 0.f))
    return 0.f;
  xt_ptrsf pf;
  if (!xt_ptrsf_init(&pf, s, q) || pf.lam < 10.001f) { /* below or near 10 (inversion), or past the float range */
    *defer = 0;
    return 0.f;
  }
  xt_ptrs_tf tf;
  xt_ptrs_tf_of_f(&pf, &tf);
  const double e = (double)q / (double)s; /* xt_detect_energy's factor, its division off the tries' path */
  xt_u32x4 w = {{0, 0, 0, 0}};
  for (int it = 0; it < XT_PTRS_MAX_TRIES; it++) {
    if (!(it & 1))
      w = try_words(g, (unsigned)it >> 1);
    const uint32_t ju = (it & 1) ? w.v[2] : w.v[0], jv = (it & 1) ? w.v[3] : w.v[1];
    float k;
    const int r = xt_ptrs_quickf(&pf, ju, jv, &k);
    if (r > 0)
      return (float)((double)k * e);
    if (r == -2) {
      *defer = it;
      return 0.f;
    }
    if (r < 0) { /* us and V as (2 m + 1) 2^-33: one rounding, as (float) of the double */
      const float us = __ull2float_rn(2ull * ((ju >> 31) ? ~ju : ju) + 1ull) * 0x1p-33f;
      const float V = __ull2float_rn(2ull * jv + 1ull) * 0x1p-33f;
      const int f = xt_ptrs_test_f(&tf, V, us, k, ((k - pf.li) + 1.f - pf.lf) - pf.llo, 1.f);
      if (f > 0)
        return (float)((double)k * e);
      if (f < 0) {
        *defer = it;
        return 0.f;
      }
    }
  }
  return xt_detect_energy(floor(xt_detect_quanta(s, q) + 0.5), s, q);
}

#define DETECT_SUMS_BLOCK 128   /* k_detect<true>'s block (k_detect<false> keeps XT_STAGE_BLOCK) */
#define DETECT_SUMS_MIN_BLOCKS 8 /* its blocks an SM: 64 registers a thread, 32 warps */

/* The deferred draw of pixel i: PTRS in double resumed at try it0, the generator seeked to the
 * try's draws (what xt_detect_draw computes for the pixel, bit for bit). A generator of its own:
 * the inline one's fields would stay live through the draw. */
static __device__ __forceinline__ float draw_resume(const xt_chain_frame_const &fc, unsigned i, int it0, float s,
                                                   float q) {
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, i, XT_RNG_QUANTA);
  xt_rng_seek(&g, 2u * (unsigned)it0);
  const double lam = xt_detect_quanta(s, q);
  const double K = lam < 10.0 ? xt_rng_poisson(&g, lam) /* it0 = 0 */ : xt_ptrs_from_t(&g, lam, it0, 0);
  return xt_detect_energy(K, s, q);
}

/* Thread mapping: a grid-stride loop over the render pixels (linear index), so that each block
 * copies the tables (5 KB) into shared memory once for many pixels; SUMS: one pixel a thread, one
 * pass a block (no tables to amortise; a lane's deferred draw resumed at its end). In: A (nch
 * channel planes; SUMS: the 2 planes of the spectral sums), the tables. Out: X, and S when
 * non-NULL. The flat field is not stored: the readout evaluates it (xt_stage_flat_adu). (The
 * minimum of 0 blocks for k_detect<false> is "none given": its code is the same as without one.) */
template <bool SUMS>
__global__ void __launch_bounds__(SUMS ? DETECT_SUMS_BLOCK : XT_STAGE_BLOCK, SUMS ? DETECT_SUMS_MIN_BLOCKS : 0)
    k_detect(const xt_chain_tables *tab, const __grid_constant__ xt_chain_frame_const fc, const float *A, float *X,
             float *S) {
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
  const unsigned plane = (unsigned)fc.cols * (unsigned)fc.rows; /* < 2^31: chain_cuda.cu checks */
  for (unsigned base = blockIdx.x * blockDim.x; base < plane; base += gridDim.x * blockDim.x) {
    const unsigned i = base + threadIdx.x;
    float s = 0.f, q = 0.f, G = 0.f, tc = 0.f;
    int defer = -1, row = 0, col = 0;
    if (i < plane) { /* what depends on the frame's constants alone */
      xt_stage_rc(i, fc.cols, &row, &col);
      G = xt_pixel_geometry(&fc.cam, col, row, fc.mas);
      tc = xt_collim_t(&fc.coll, col, row); /* shutters, wedges, grid (issue 11) */
    }
    if (SUMS) /* a programmatic dependant of k_channels (xt_stage_launch): its sums from here on */
      xt_stage_wait_prior();
    if (i < plane) {
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
        X[i] = defer < 0 ? x : draw_resume(fc, i, defer, s, q); /* SUMS: resumed once the warp's other lanes are done */
      } else {
        X[i] = s;
      }
    }
    if (SUMS)
      break; /* one pass a block (the launch covers the plane) */
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
  /* one pass a block: no tables to amortise. A programmatic dependant of the projector's k_channels:
   * its blocks start as k_channels ends and make the pixel's geometry and collimation before they
   * wait for its sums (the tables it reads before the wait are written only by copies queued before
   * k_channels) */
  XT_SCK(xt_stage_launch(k_detect<true>, dim3((unsigned)((n + DETECT_SUMS_BLOCK - 1) / DETECT_SUMS_BLOCK)),
                         dim3(DETECT_SUMS_BLOCK), st, d_tab, *fc, P, X, S));
  return 0;
}
