/* The imaging chain's per-pixel mathematics, written once for the CPU stages (stage_*_cpu.c) and
 * the CUDA kernels (stage_*.cu): the counter-based generator (Philox4x32-10), the Poisson and
 * normal samplers built on it, and each stage's per-pixel function. Everything here is static
 * inline XT_HOSTDEV on float/double scalars, so both backends evaluate the same formulas in the
 * same order (they still differ in the last bits of expf/logf; docs/imaging.md states the bar).
 *
 * Random numbers are a pure function of (run seed, frame number, pixel, stream, draw): the same
 * seed and poses give bit-identical frames on one backend whatever the scheduling, and any frame
 * can be regenerated alone. */
#ifndef XT_CHAIN_MATH_H
#define XT_CHAIN_MATH_H

#include <math.h>
#include <stdint.h>

#include "xt_chain.h"    /* xt_panel_fault */
#include "xt_spectral.h" /* xt_exp2, xt_spectral_sum: shared with the fused projector path */
#include "xt_vec.h"

/* ------------------------------------------------------------------------------------------ */
/* Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",      */
/* SC'11; the constants and round function of Random123 and cuRAND)                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct xt_u32x4 {
  uint32_t v[4];
} xt_u32x4;

/* On the GPU the two halves as two 32-bit multiplies (IMAD.HI, IMAD), as Random123's CUDA path
 * does, rather than trusting the compiler to narrow a 64-bit product: the same bits. */
static XT_INLINE XT_HOSTDEV void xt_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
#ifdef __CUDA_ARCH__
  *hi = __umulhi(a, b);
  *lo = a * b;
#else
  const uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
#endif
}

static XT_INLINE XT_HOSTDEV xt_u32x4 xt_philox4x32_10(xt_u32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    xt_mulhilo32(0xD2511F53u, ctr.v[0], &hi0, &lo0);
    xt_mulhilo32(0xCD9E8D57u, ctr.v[2], &hi1, &lo1);
    xt_u32x4 n;
    n.v[0] = hi1 ^ ctr.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ ctr.v[3] ^ k1;
    n.v[3] = lo0;
    ctr = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/* The streams of draws a pixel makes, kept apart in the counter's last word. */
enum { XT_RNG_QUANTA = 1, XT_RNG_READ = 2, XT_RNG_PANEL = 3, XT_RNG_STALE = 4 };

/* A pixel's generator for one frame: counter (pixel, frame lo, frame hi, stream << 16 | block). */
typedef struct xt_rng {
  uint32_t k0, k1, pixel, flo, fhi, stream, block;
  uint32_t b0, b1, b2, b3; /* the block's four words, named (no dynamic index: registers on the GPU) */
  int used;
} xt_rng;

static XT_INLINE XT_HOSTDEV void xt_rng_init(xt_rng *g, uint64_t seed, uint64_t frame, uint32_t pixel, uint32_t stream) {
  g->k0 = (uint32_t)seed;
  g->k1 = (uint32_t)(seed >> 32);
  g->pixel = pixel;
  g->flo = (uint32_t)frame;
  g->fhi = (uint32_t)(frame >> 32);
  g->stream = stream;
  g->block = 0;
  g->used = 4;
}

static XT_INLINE XT_HOSTDEV uint32_t xt_rng_u32(xt_rng *g) {
  if (g->used == 4) {
    xt_u32x4 c = {{g->pixel, g->flo, g->fhi, (g->stream << 16) | (g->block & 0xFFFFu)}};
    const xt_u32x4 r = xt_philox4x32_10(c, g->k0, g->k1);
    g->b0 = r.v[0];
    g->b1 = r.v[1];
    g->b2 = r.v[2];
    g->b3 = r.v[3];
    g->block++;
    g->used = 0;
  }
  const int i = g->used++;
  return i == 0 ? g->b0 : (i == 1 ? g->b1 : (i == 2 ? g->b2 : g->b3));
}

/* Uniform in (0, 1): never 0 or 1, so logs are finite. */
static XT_INLINE XT_HOSTDEV double xt_rng_uniform(xt_rng *g) { return ((double)xt_rng_u32(g) + 0.5) * (1.0 / 4294967296.0); }

/* Standard normal (Box-Muller, the cosine branch). On the GPU cospi, whose argument needs no
 * range reduction (cos's large-argument path would put a stack frame in every kernel using it). */
static XT_INLINE XT_HOSTDEV double xt_rng_normal(xt_rng *g) {
  const double u1 = xt_rng_uniform(g), u2 = xt_rng_uniform(g);
#ifdef __CUDA_ARCH__
  return sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
#else
  return sqrt(-2.0 * log(u1)) * cos(2.0 * XT_PI * u2);
#endif
}

/* Float logarithm and cosine: the GPU's MUFU-based intrinsics (__logf: absolute error <= 2^-21.41
 * on [0.5, 2], 3 ulp elsewhere; __cosf: absolute error <= 2^-21.41 on [-pi, pi]), the C library's
 * on the host. Used only where that error is stated harmless (xt_rng_normalf) or bounded and
 * checked (xt_ptrs_test). */
static XT_INLINE XT_HOSTDEV float xt_logf_fast(float x) {
#ifdef __CUDA_ARCH__
  return __logf(x);
#else
  return logf(x);
#endif
}

/* Standard normal in float (Box-Muller, the cosine branch) from two u32 draws: the readout's
 * electronic noise, where the double xt_rng_normal cost a double log and cospi per pixel. Each
 * uniform keeps the word's top 23 bits, (j + 1/2) 2^-23, exact in float and never 0 or 1: |z| <=
 * sqrt(2 ln 2^24) = 5.77 (the normal's mass beyond is 8e-9: a pixel in 120 frames of 1024^2, for a
 * noise of a few ADU). u2 - 1/2 is exact too and lies in (-1/2, 1/2), so the cosine's argument stays
 * in [-pi, pi] where __cosf's error is stated; cos(2 pi u2) = -cos(2 pi (u2 - 1/2)). The
 * intrinsics' absolute errors (<= 2^-21.4) move z by < 1e-3 at worst (near u1 = 1, where
 * -2 ln u1 -> 0 and its square root amplifies) and ~1e-6 typically: below a thousandth of the
 * noise's rms, far under the ADC's 1-ADU step. Host and device differ in those last bits, so noisy
 * raw frames agree statistically between backends (docs/imaging.md), bit for bit on one. */
static XT_INLINE XT_HOSTDEV float xt_rng_normalf(xt_rng *g) {
  const float u1 = ((float)(xt_rng_u32(g) >> 9) + 0.5f) * 0x1p-23f;
  const float h = ((float)(xt_rng_u32(g) >> 9) + 0.5f) * 0x1p-23f - 0.5f;
#ifdef __CUDA_ARCH__
  const float c = __cosf(6.28318530717958648f * h);
#else
  const float c = cosf(6.28318530717958648f * h);
#endif
  return -sqrtf(-2.f * xt_logf_fast(u1)) * c;
}

/* ln(k!) for whole k >= 0: a table below 10, Stirling's series above (the terms to 1/k^7 leave an
 * error below 1e-12 there). Cheaper than lgamma, whose branches every warp would otherwise run: the
 * PTRS test below needs it for some lane of nearly every warp. */
static XT_INLINE XT_HOSTDEV double xt_log_factorial(double k) {
  if (k < 10.0) {
    const double t[10] = {0.0, 0.0, 0.69314718055994531, 1.791759469228055, 3.1780538303479458, 4.7874917427820458,
                          6.5792512120101012, 8.5251613610654147, 10.604602902745251, 12.801827480081469};
    const int i = (int)k;
    return i == 0 ? t[0] : i == 1 ? t[1] : i == 2 ? t[2] : i == 3 ? t[3] : i == 4 ? t[4] : i == 5 ? t[5] : i == 6 ? t[6]
           : i == 7 ? t[7] : i == 8 ? t[8] : t[9];
  }
  const double n = k + 1.0, r = 1.0 / n, r2 = r * r;
  const double series = r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 / 1680)));
  return (n - 0.5) * log(n) - n + 0.91893853320467274 + series; /* 0.918... = ln(2 pi) / 2 */
}

/* Poisson(lam): inversion by sequential search below 10; above, Hormann's PTRS transformed
 * rejection ("The transformed rejection method for generating Poisson random variables", Insurance:
 * Mathematics and Economics 12, 1993), as numpy uses it. Returns a double (counts up to 2^53).
 *
 * PTRS in pieces, so that the GPU can split it (stage_detect.cu): try `it` takes the generator's
 * u32 draws 2 it and 2 it + 1 (xt_rng_seek reaches them); its quick step settles ~3/4 of tries
 * with a few operations; most of the rest need the full test, four logarithms in double. */
typedef struct xt_ptrs {
  double lam, slam, b, a, vr;
} xt_ptrs;

static XT_INLINE XT_HOSTDEV void xt_ptrs_init(xt_ptrs *p, double lam) {
  p->lam = lam;
  p->slam = sqrt(lam);
  p->b = 0.931 + 2.53 * p->slam;
  p->a = -0.059 + 0.02483 * p->b;
  p->vr = 0.9277 - 3.6224 / (p->b - 2.0);
}

/* One try's quick step on its uniforms (U in (-0.5, 0.5), V): 1 accepted (*k), 0 rejected, -1 the
 * full test (xt_ptrs_test) decides. */
static XT_INLINE XT_HOSTDEV int xt_ptrs_quick(const xt_ptrs *p, double U, double V, double *k, double *us) {
  *us = 0.5 - fabs(U);
  *k = floor((2.0 * p->a / *us + p->b) * U + p->lam + 0.43);
  if (*us >= 0.07 && V <= p->vr) return 1;
  if (*k < 0 || (*us < 0.013 && V > *us)) return 0;
  return -1;
}

/* The quick step decided in float, for the GPU's inline draw (stage_detect.cu), where the double
 * step's FP64 division per try and the set-up's division and square root are long dependent chains.
 * It works on the try's two u32 draws ju, jv (U = (ju + 1/2) 2^-32 - 1/2, V = (jv + 1/2) 2^-32,
 * both exact in double) and answers what xt_ptrs_quick answers, or "undecided" (the double step
 * decides). Exact parts: us = 1/2 - |U| = (m + 1/2) 2^-32 with m = ju or ~ju (U >= 0 iff ju >=
 * 2^31), so us >= 0.07 iff m >= XT_PTRS_M07, us < 0.013 iff m < XT_PTRS_M013 (the least m whose us
 * passes the double comparison; tests/test_chain.c checks both sides) and V > us iff jv > m.
 * Decided within a bound: k = floor(x), x = (2a/us + b) U + lam + 0.43, and V <= vr.
 *
 * The bound. lam = S^2/Q is carried as li + lf + llo: lhi = fl(S S / Q) (S S = ph + pl exactly,
 * pl by fmaf), llo = fl((fl(ph - lhi Q) + pl) / Q), li = floor(lhi), lf = lhi - li (exact); so
 * |lhi + llo - S^2/Q| <= 2^-44 lam. Relative errors in units of u = 2^-24, every operation correctly
 * rounded (IEEE float /, sqrtf, fmaf; no fast-math): sqrtf(lhi) 1.5 u; b = 0.931 + 2.53 sqrt(lam)
 * 4.5 u; a = 0.02483 b - 0.059 (the subtraction amplifies by at most 1.37, at b = 8.93) 10.3 u;
 * us and |U| from the word and an fmaf 2 u each; so T = (2a/us + b) |U| 17.3 u (a's 10.3, us's 2,
 * the division, the sum, |U|'s 2, the product). z = +-T + 0.43 + llo + lf adds 3 u (T + 2), and the
 * double x itself is within 2^-50 (T + lam + 2) of the exact value. Altogether |z - (x - li)| <=
 * 2^-19.6 (T + 1) + 2^-43 lam; eps = 2^-18 (T + 1) + 2^-40 lam has a margin of 3 or more. Where
 * floor(z - eps) = floor(z + eps), floor(x) = li + that floor; elsewhere (~2 eps of the tries:
 * 0.03 % at 1000 quanta, 0.07 % at 1e4, 0.7 % at 1e6) the double step decides. vr = 0.9277 -
 * 3.6224 / (b - 2) is within 7.1 u (b - 2 amplifies b's error by at most 1.29; the quotient is below
 * 0.53) and V within 2 u, so |V - vr|'s float error is below 2^-21: eps_v = 2^-19. tests/test_chain.c measures the
 * set-up's errors against these figures and compares the step with xt_ptrs_quick over many millions
 * of tries and near every boundary, and shows that a bound 64 times smaller fails. Past lam = 2^22
 * (li must stay exact with room) or for S^2 below float's normal range xt_ptrsf_init declines. */
#define XT_PTRS_M07 300647711u /* the least m with (m + 1/2) 2^-32 >= 0.07 in double */
#define XT_PTRS_M013 55834575u /* the least m with (m + 1/2) 2^-32 >= 0.013 */

typedef struct xt_ptrsf {
  float li, lf, llo; /* lam = li + lf + llo: li whole, lf in [0, 1) */
  float lam;         /* lhi = li + lf, for the bound */
  float a2, b, vr;   /* 2a, b, vr */
} xt_ptrsf;

/* 1, or 0 where the float step cannot be used (the double PTRS then draws the count). */
static XT_INLINE XT_HOSTDEV int xt_ptrsf_init(xt_ptrsf *p, float S, float Q) {
  const float ph = S * S, pl = fmaf(S, S, -ph);
  if (!(ph >= 0x1p-100f) || !(Q >= 0x1p-100f)) return 0;
  const float lhi = ph / Q;
  if (!(lhi < 4194304.f) || !(lhi >= 1.f)) return 0;
  p->llo = (fmaf(-lhi, Q, ph) + pl) / Q;
  p->li = floorf(lhi);
  p->lf = lhi - p->li;
  p->lam = lhi;
  p->b = 0.931f + 2.53f * sqrtf(lhi);
  p->a2 = 2.f * (-0.059f + 0.02483f * p->b);
  p->vr = 0.9277f - 3.6224f / (p->b - 2.f);
  return 1;
}

/* The try on draws (ju, jv): 1 accepted (*k, whole, in float), 0 rejected, -1 the full test
 * decides (*k), -2 undecided in float (xt_ptrs_quick decides). bscale scales the bounds: 1 but in
 * the test that shows a smaller bound fails. */
static XT_INLINE XT_HOSTDEV int xt_ptrs_quickf_b(const xt_ptrsf *p, uint32_t ju, uint32_t jv, float bscale, float *k) {
  const int pos = (int)(ju >> 31);
  const uint32_t m = pos ? ~ju : ju;
  if (m < XT_PTRS_M013 && jv > m) return 0; /* us < 0.013 and V > us */
  const float us = fmaf((float)m, 0x1p-32f, 0x1p-33f);
  const float au = fmaf((float)(0x7FFFFFFFu - m), 0x1p-32f, 0x1p-33f); /* |U| = 1/2 - us */
  const float T = (p->a2 / us + p->b) * au;
  const float z = ((pos ? T : -T) + 0.43f + p->llo) + p->lf;
  const float eps = bscale * (0x1p-18f * (T + 1.f) + 0x1p-40f * p->lam);
  const float f = floorf(z - eps);
  if (f != floorf(z + eps)) return -2;
  *k = p->li + f; /* exact: a decided k has T < 2^18 (else eps >= 1), so |f| < 2^19; li < 2^22 */
  if (m >= XT_PTRS_M07) { /* us >= 0.07: V <= vr accepts */
    const float V = fmaf((float)jv, 0x1p-32f, 0x1p-33f), ev = bscale * 0x1p-19f;
    if (V < p->vr - ev) return 1;
    if (!(V > p->vr + ev)) return -2;
  }
  return *k < 0 ? 0 : -1;
}

static XT_INLINE XT_HOSTDEV int xt_ptrs_quickf(const xt_ptrsf *p, uint32_t ju, uint32_t jv, float *k) {
  return xt_ptrs_quickf_b(p, ju, jv, 1.f, k);
}

/* The full test, log V + log(1/alpha) - log(a/us^2 + b) <= -lam + k log lam - log k!, decided
 * exactly as in double but mostly in float. Its right side cancels (terms ~k log k, result ~1), so
 * for k >= 10 it is rearranged first: with n = k + 1, d = n - lam, x = d / lam and L = log1p(x),
 * Stirling's ln k! = (n - 1/2) ln n - n + ln(2 pi)/2 + s(n) (xt_log_factorial's series) gives
 *   -lam + k ln lam - ln k! = L - lam h(x) - ln(n)/2 - ln(2 pi)/2 - s(n),  h = (1 + x) L - x >= 0,
 * every term of moderate size (lam h ~ d^2 / 2 lam). (k < 10, a tail reached at small lam only:
 * the plain form, whose terms are then small, with ln k! from the table.) Error bound: each float
 * term's absolute error is at most 2^-21 of its magnitude plus 2^-21.4 (the conversions' 2^-24,
 * the intrinsics' 3 ulp or 2^-21.41, log1pf's ulp); lam h's at most 2^-21 (lam h + |d|), as
 * lam (1 + x) |L| <= lam h + |d|; the seven-term sum adds 7 x 2^-24 of their sum. So
 * eps = 2^-18 (sum of |terms| + |d| + 2) bounds the float difference's error with a margin of 4
 * or more (the double form's own error, ~1e-16 of k log k, is far below). Outside +-eps the float
 * sign is the double test's answer; inside it (0.03-0.25 % of tests at 10-5000 quanta, 1 % at 1e5) the
 * double test runs. So the counts, and the frames, are those of the all-double test, bit for bit,
 * on both backends (tests/test_chain.c checks it against lgamma). n < 2^24 keeps n exact. */
static XT_INLINE XT_HOSTDEV double xt_ptrs_invalpha(const xt_ptrs *p) { return 1.1239 + 1.1328 / (p->b - 3.4); }

/* The full test's float inputs, once a pixel: lam, a, b and ln(1/alpha). */
typedef struct xt_ptrs_tf {
  float lam, a, b, t1;
} xt_ptrs_tf;

static XT_INLINE XT_HOSTDEV void xt_ptrs_tf_of(const xt_ptrs *p, xt_ptrs_tf *t) {
  t->lam = (float)p->lam;
  t->a = (float)p->a;
  t->b = (float)p->b;
  t->t1 = xt_logf_fast((float)xt_ptrs_invalpha(p));
}

/* The same from the float set-up (stage_detect.cu's inline draw, no FP64 at all): lam within 1 u
 * as before, but a and b within 10.3 u and 4.5 u (xt_ptrsf's figures) and 1/alpha = 1.1239 +
 * 1.1328 / (b - 3.4) within 3.7 u (b - 3.4 amplifies b's error at most 1.61 times; the quotient is
 * below 0.21 of 1/alpha > 1.12). t2's error stays within its figure above (its magnitude is at
 * least ln b > 2.1, so the figure allows 2^-19.4, against 12 u = 2^-20.4); t1's exceeds its figure
 * by at most 2.8 u = 2^-22.5, a 45th of eps (>= 2^-17), within the margin. d comes from the
 * lam = li + lf + llo pair, (k - li + 1 - lf) - llo: two roundings, and 2^-43 lam from lam's
 * error, far below its terms' figures. tests/test_chain.c checks this form against lgamma too. */
static XT_INLINE XT_HOSTDEV void xt_ptrs_tf_of_f(const xt_ptrsf *p, xt_ptrs_tf *t) {
  t->lam = p->lam;
  t->a = 0.5f * p->a2;
  t->b = p->b;
  t->t1 = xt_logf_fast(1.1239f + 1.1328f / (p->b - 3.4f));
}

/* The float part on the try's V, us and count k (0 <= k < 16777215, whole: exact in float) and d =
 * k + 1 - lam: 1 accepted, 0 rejected, -1 undecided (the double test decides). bscale scales the
 * bound: 1 but in the test that shows a smaller bound fails. */
static XT_INLINE XT_HOSTDEV int xt_ptrs_test_f(const xt_ptrs_tf *t, float V, float us, float k, float d, float bscale) {
  const float t0 = xt_logf_fast(V), t2 = xt_logf_fast(t->a / (us * us) + t->b);
  float rhs, mag;
  if (k >= 10.f) {
    const float n = k + 1.f;
    const float x = d / t->lam, L = log1pf(x), lh = t->lam * ((1.f + x) * L - x);
    const float r = 1.f / n, r2 = r * r;
    const float s = r * (1.f / 12 - r2 * (1.f / 360 - r2 * (1.f / 1260 - r2 / 1680)));
    const float t3 = 0.5f * xt_logf_fast(n);
    rhs = L - lh - t3 - 0.918938533f - s;
    mag = fabsf(L) + lh + t3 + 1.f + fabsf(d);
  } else {
    const float kl = k * xt_logf_fast(t->lam), lf = (float)xt_log_factorial((double)k);
    rhs = -t->lam + kl - lf;
    mag = t->lam + kl + lf;
  }
  const float diff = (t0 + t->t1 - t2) - rhs;
  const float eps = bscale * 0x1p-18f * (fabsf(t0) + fabsf(t->t1) + fabsf(t2) + mag + 2.f);
  if (diff < -eps) return 1;
  if (diff > eps) return 0;
  return -1;
}

static XT_INLINE XT_HOSTDEV int xt_ptrs_test_float(const xt_ptrs *p, double V, double us, double k) {
  if (!(k < 16777215.0)) return -1;
  xt_ptrs_tf t;
  xt_ptrs_tf_of(p, &t);
  return xt_ptrs_test_f(&t, (float)V, (float)us, (float)k, (float)(k + 1.0 - p->lam), 1.f);
}

/* The test in double alone: the same answer as xt_ptrs_test (whose float part answers only where it
 * agrees), for code that would rather not hold both (stage_detect.cu's resumed draws). */
static XT_INLINE XT_HOSTDEV int xt_ptrs_test_double(const xt_ptrs *p, double V, double us, double k) {
  const double invalpha = xt_ptrs_invalpha(p);
  return log(V) + log(invalpha) - log(p->a / (us * us) + p->b) <= -p->lam + k * log(p->lam) - xt_log_factorial(k);
}

static XT_INLINE XT_HOSTDEV int xt_ptrs_test(const xt_ptrs *p, double V, double us, double k) {
  const int f = xt_ptrs_test_float(p, V, us, k);
  if (f >= 0) return f;
  return xt_ptrs_test_double(p, V, us, k);
}

#define XT_PTRS_MAX_TRIES 1000

/* PTRS from try `it0` on (lam >= 10; the generator at u32 draw 2 it0); float_first 0: the full test
 * in double alone (the same counts). */
static XT_INLINE XT_HOSTDEV double xt_ptrs_from_t(xt_rng *g, double lam, int it0, int float_first) {
  xt_ptrs p;
  xt_ptrs_init(&p, lam);
  for (int it = it0; it < XT_PTRS_MAX_TRIES; it++) {
    const double U = xt_rng_uniform(g) - 0.5, V = xt_rng_uniform(g);
    double k, us;
    const int r = xt_ptrs_quick(&p, U, V, &k, &us);
    if (r > 0) return k;
    if (r == 0) continue;
    if (float_first ? xt_ptrs_test(&p, V, us, k) : xt_ptrs_test_double(&p, V, us, k)) return k;
  }
  return floor(lam + 0.5); /* not reached in practice (acceptance ~ 0.9 per try) */
}

static XT_INLINE XT_HOSTDEV double xt_ptrs_from(xt_rng *g, double lam, int it0) {
  return xt_ptrs_from_t(g, lam, it0, 1);
}

static XT_INLINE XT_HOSTDEV double xt_rng_poisson(xt_rng *g, double lam) {
  if (!(lam > 0)) return 0.0;
  if (lam < 10.0) {
    const double u = xt_rng_uniform(g);
    double p = exp(-lam), f = p, k = 0;
    while (u > f && k < 200) {
      k += 1;
      p *= lam / k;
      f += p;
    }
    return k;
  }
  return xt_ptrs_from(g, lam, 0);
}

/* Positions the generator at its n-th u32 draw (counted from 0), as if n had been taken. */
static XT_INLINE XT_HOSTDEV void xt_rng_seek(xt_rng *g, uint32_t n) {
  g->block = n / 4;
  g->used = 4;
  for (uint32_t i = 0; i < n % 4; i++) (void)xt_rng_u32(g);
}

/* ------------------------------------------------------------------------------------------ */
/* Stage tables and per-frame constants                                                       */
/* ------------------------------------------------------------------------------------------ */

#define XT_CHAIN_MAX_BINS XT_SPECTRAL_MAX_BINS
#define XT_CHAIN_MAX_CH 8 /* = XT_MAX_CHANNELS: mr's rows are xt_spectral_sum's w rows */
typedef char xt_chain_ch_is_max_channels_[XT_CHAIN_MAX_CH == XT_MAX_CHANNELS ? 1 : -1];

/* Built on the host from the spectrum, the detector and the channel set (xt_chain.c). */
typedef struct xt_chain_tables {
  int nbins, nch;
  float wa, wb; /* the spectrum's water curve ln(F/P) = wa t + wb t^2, t mm (scatter, issue 11); the two
                 * words also keep mr's rows 16-byte aligned: two 128-bit shared loads per bin on the GPU */
  float mr[XT_CHAIN_MAX_BINS][XT_CHAIN_MAX_CH]; /* (mu/rho)_c(E_b) x log2(e), cm^2/g; 0 past nch */
  float k1[XT_CHAIN_MAX_BINS]; /* fluence x eta x E: keV absorbed per mm^2 per mAs at 1 m, per bin */
  float k2[XT_CHAIN_MAX_BINS]; /* fluence x eta x E^2: its second moment, keV^2 */
  float flat1;                 /* sum of k1: the unattenuated signal */
  float flat2;                 /* sum of k2 */
  float pad_[2];               /* a multiple of 16 bytes: every slot of an array of tables (the cache's
                                * device slots) keeps mr's rows 16-byte aligned for 128-bit loads */
} xt_chain_tables;
typedef char xt_chain_tables_size_is_16n_[sizeof(xt_chain_tables) % 16 == 0 ? 1 : -1];

/* The render grid of one frame: pixel (col, row) lies at det0 + col pu u + row pv v. */
typedef struct xt_chain_cam {
  float src[3], det0[3], u[3], v[3], d[3]; /* d: the detector normal (the beam direction) */
  float pu, pv;
} xt_chain_cam;

/* Photons' geometry at a pixel, per unit of the spectrum's fluence (mm^2 mAs at 1 m): mAs x the pixel
 * area seen from the source, (1000 / r)^2 x cos(theta) x pu pv - inverse square and obliquity. */
static XT_INLINE XT_HOSTDEV float xt_pixel_geometry(const xt_chain_cam *c, int col, int row, float mas) {
  const float a = (float)col * c->pu, b = (float)row * c->pv;
  const float x = c->det0[0] + a * c->u[0] + b * c->v[0] - c->src[0];
  const float y = c->det0[1] + a * c->u[1] + b * c->v[1] - c->src[1];
  const float z = c->det0[2] + a * c->u[2] + b * c->v[2] - c->src[2];
  const float r2 = x * x + y * y + z * z;
  const float cosine = (x * c->d[0] + y * c->d[1] + z * c->d[2]) / sqrtf(r2);
  return mas * c->pu * c->pv * cosine * (1.0e6f / r2);
}

/* The flat field an ideal panel's render pixel collects (keV): the unattenuated signal flat1 (the
 * frame's tables) at the pixel's geometry, with the grid in (the panel is calibrated with it). A
 * deterministic function of the pixel, so the readout evaluates it where it needs it rather than
 * the detect stage storing a plane (4 bytes a render pixel written and read again). */
static XT_INLINE XT_HOSTDEV float xt_flat_expect(const xt_chain_cam *c, float mas, float flat1, float grid_tp, int col,
                                                 int row) {
  return xt_pixel_geometry(c, col, row, mas) * flat1 * grid_tp;
}

/* ------------------------------------------------------------------------------------------ */
/* Stage: polychromatic detection and quanta (stage_detect*)                                  */
/* ------------------------------------------------------------------------------------------ */

/* The expected absorbed energy S (keV) and its second moment Q (keV^2) at a pixel with areal
 * densities A[c] (g/cm^2) and geometry factor G: S = G sum_b k1_b exp(-sum_c (mu/rho)_bc A_c) (the
 * table holds (mu/rho) log2(e), so the exponential is one 2^x), Q likewise with k2. Q is what an
 * energy-integrating panel's variance is (each absorbed quantum adds E). */
static XT_INLINE XT_HOSTDEV void xt_detect_expect(const xt_chain_tables *t, const float *A, float G, float *S, float *Q) {
  float s, q;
  xt_spectral_sum(&t->mr[0][0], t->k1, t->k2, t->nbins, A, &s, &q);
  *S = G * s;
  *Q = G * q;
}

/* The absorbed energy of one exposure: quanta drawn as Poisson counts. An energy-integrating
 * detector's signal is a compound Poisson sum of the quanta's energies, mean S and variance Q; it
 * is drawn as K ~ Poisson(S^2 / Q) effective quanta of Q / S keV each, which has exactly that mean
 * and variance (the Swank factor of the absorbed spectrum folded in). */
static XT_INLINE XT_HOSTDEV double xt_detect_quanta(float S, float Q) { return (double)S * (double)S / (double)Q; }
static XT_INLINE XT_HOSTDEV float xt_detect_energy(double K, float S, float Q) { return (float)(K * ((double)Q / (double)S)); }

static XT_INLINE XT_HOSTDEV float xt_detect_draw(float S, float Q, xt_rng *g) {
  if (!(S > 0.f) || !(Q > 0.f)) return 0.f;
  return xt_detect_energy(xt_rng_poisson(g, xt_detect_quanta(S, Q)), S, Q);
}

/* ------------------------------------------------------------------------------------------ */
/* Stage: readout (stage_readout*)                                                            */
/* ------------------------------------------------------------------------------------------ */

#define XT_LAG_TERMS 3

enum { XT_DEFECT_NONE = 0, XT_DEFECT_DEAD = 1, XT_DEFECT_HOT = 2, XT_DEFECT_LINE = 3 };


/* Output pixel (r, c) (linear index o): its calibrated gain, offset and defect code become what the
 * faulty panel has now (xt_panel_fault, xt_chain.h). */
static XT_INLINE XT_HOSTDEV void xt_panel_fault_pixel(const xt_panel_fault *f, int r, int c, uint32_t o, float *gain,
                                                      float *offset, int *defect) {
  if (!f->on) return;
  *gain *= f->gain_scale;
  if (f->stale_offset_adu > 0.f || f->stale_gain > 0.f) {
    xt_rng g;
    xt_rng_init(&g, f->stale_seed, 0, o, XT_RNG_STALE);
    *offset += f->stale_offset_adu * xt_rng_normalf(&g);
    *gain *= 1.f + f->stale_gain * xt_rng_normalf(&g);
  }
  const float dc = (float)(c - f->cl_col), dr = (float)(r - f->cl_row);
  if ((c >= f->col0 && c < f->col0 + f->ncols) || (r >= f->row0 && r < f->row0 + f->nrows) ||
      (f->cl_r >= 0.f && dc * dc + dr * dr <= f->cl_r * f->cl_r))
    *defect = XT_DEFECT_DEAD;
}

typedef struct xt_readout_const {
  int bin;              /* 1, or 2: 2x2 charge binning */
  float adu_per_kev;    /* gain of a render pixel's charge: the native pixel's adu_per_kev / n (xt_mode_native_mean) */
  float e_noise_adu;    /* electronic noise, rms ADU of an output code: a read's / sqrt(n) (0: off) */
  float adc_max;        /* 2^bits - 1 */
  float lag_b0;         /* the prompt fraction, 1 - sum of the terms' fractions */
  float lag_a[XT_LAG_TERMS], lag_b[XT_LAG_TERMS]; /* term k releases b_k a_k^j of a frame's charge j frames later */
  int lag_on;
  xt_panel_fault fault; /* the panel's faults since calibration (xt_chain_set_panel_fault) */
} xt_readout_const;

/* One output pixel: x = collected charge in ADU (binned sum); lag[] its trap states (updated);
 * gain/offset the panel's maps; defect its code; g its readout generator. Returns the ADC code. */
static XT_INLINE XT_HOSTDEV uint16_t xt_readout_pixel(const xt_readout_const *r, float x, float *lag, float gain,
                                                      float offset, int defect, xt_rng *g) {
  float y = x;
  if (r->lag_on) {
    /* multi-exponential impulse response: a fraction of each frame's charge is trapped and
     * released over the following frames (Siewerdsen & Jaffray 1999): h[0] = b0, h[j] = sum_k
     * b_k a_k^j; charge is conserved (sum_j h[j] = 1) */
    y = r->lag_b0 * x;
    for (int k = 0; k < XT_LAG_TERMS; k++) {
      y += lag[k];
      lag[k] = r->lag_a[k] * (lag[k] + r->lag_b[k] * x);
    }
  }
  float v = offset + gain * y;
  if (r->e_noise_adu > 0.f) v += r->e_noise_adu * xt_rng_normalf(g);
  if (defect == XT_DEFECT_DEAD || defect == XT_DEFECT_LINE) v = offset;
  else if (defect == XT_DEFECT_HOT) v = r->adc_max;
  v = floorf(v + 0.5f);
  v = v < 0.f ? 0.f : (v > r->adc_max ? r->adc_max : v);
  return (uint16_t)v;
}

/* ------------------------------------------------------------------------------------------ */
/* Stage: processing for presentation (stage_process*)                                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct xt_process_const {
  float window, level; /* in attenuation units (ln(flat / signal)); window 0: automatic (wl below) */
  float alpha;         /* recursive filter: y = alpha x + (1 - alpha) y_prev; 1 = off */
  float edge_gain;     /* unsharp mask: e = y + edge_gain (y - mean3x3(y)) */
  float out_max;       /* 4095: 12 bits stored */
  int first;           /* 1: the temporal state starts from this frame */
  const float *dsa_mask; /* DSA (issue 11): the mask frame's log image, subtracted before edge and window; NULL off */
  const float *wl;       /* automatic window (window 0): the frame's window and level, which the histogram's pick
                          * wrote (device memory on the GPU); NULL: window and level above */
} xt_process_const;

/* Offset/gain-corrected signal (ADU of an ideal panel) of a raw code. */
static XT_INLINE XT_HOSTDEV float xt_process_correct(float raw, float gain, float offset) {
  return (raw - offset) / gain;
}

/* Attenuation: ln(flat / signal), signal floored at 1 ADU (dark and saturated pixels stay finite). */
static XT_INLINE XT_HOSTDEV float xt_process_log(float corrected, float flat) {
  const float s = corrected > 1.f ? corrected : 1.f;
  return logf(flat / s);
}

/* The recursive temporal filter's step: the state after a frame of attenuation L. */
static XT_INLINE XT_HOSTDEV float xt_process_temporal(const xt_process_const *p, float L, float prev) {
  return p->first ? L : p->alpha * L + (1.f - p->alpha) * prev;
}

/* Window and level onto 0..out_max, high attenuation dark (as fluoroscopy displays: vessels and
 * bone dark on a bright field). */
static XT_INLINE XT_HOSTDEV uint16_t xt_process_window_wl(float window, float level, float out_max, float e) {
  float x = (level + 0.5f * window - e) / window;
  x = x < 0.f ? 0.f : (x > 1.f ? 1.f : x);
  return (uint16_t)floorf(x * out_max + 0.5f);
}
/* With the fixed window only (the automatic one's is read once per thread: xt_process_window_wl). */
static XT_INLINE XT_HOSTDEV uint16_t xt_process_window(const xt_process_const *p, float e) {
  return xt_process_window_wl(p->window, p->level, p->out_max, e);
}

/* The automatic window (issue 27; the default, `window` 0): fluoroscopy sets window and level per
 * frame from the image's histogram, so that neither the patient's densest part nor the open beam
 * beside it is clipped. A histogram of the frame's attenuation (Y, the log image after the
 * recursive filter, minus the DSA mask when subtracting) over the pixels that are not in the defect
 * map and lie in the collimator's open field (xt_auto_counts, xt_chain_internal.h), XT_AUTO_BINS bins of XT_AUTO_BIN_W from XT_AUTO_LO
 * (the ends collect what lies beyond); its XT_AUTO_Q and 1 - XT_AUTO_Q quantiles, interpolated
 * linearly within their bins, a and b; the window [a - m, b + m], m = XT_AUTO_MARGIN (b - a), and at
 * least XT_AUTO_MIN_W wide about its centre (an empty or uniform field would otherwise stretch its
 * noise over the 12 bits). Integer counts and the same float arithmetic on the CPU and the GPU,
 * so both pick the same window from the same counts; a value on a bin's edge may fall either side
 * on the two, moving a quantile by at most a bin's width over the bin's count. */
#define XT_AUTO_BINS 8192
#define XT_AUTO_LO (-12.f)
#define XT_AUTO_BIN_W (1.f / 256.f) /* -12 .. 20 */
#define XT_AUTO_Q 0.005f
#define XT_AUTO_MARGIN 0.02f
#define XT_AUTO_MIN_W 0.5f

static XT_INLINE XT_HOSTDEV int xt_auto_bin(float y) {
  const float t = (y - XT_AUTO_LO) * (1.f / XT_AUTO_BIN_W);
  if (!(t >= 0.f)) return 0; /* below, or NaN */
  return t >= (float)(XT_AUTO_BINS - 1) ? XT_AUTO_BINS - 1 : (int)t;
}

/* The rank of quantile q of n counted pixels (a count below it). */
static XT_INLINE XT_HOSTDEV float xt_auto_rank(unsigned n, float q) { return q * (float)n; }

/* Whether rank t lies in a bin holding nb counts with `below` before it (exactly one bin, for
 * 0 <= t < n: the same integer's float ends one bin and starts the next). */
static XT_INLINE XT_HOSTDEV int xt_auto_in(unsigned below, unsigned nb, float t) {
  return (float)below <= t && t < (float)(below + nb);
}

/* The value at rank t, in bin b holding nb counts of which `below` lie in bins before it. */
static XT_INLINE XT_HOSTDEV float xt_auto_value(int b, unsigned below, unsigned nb, float t) {
  const float f = nb ? (t - (float)below) / (float)nb : 0.f;
  return XT_AUTO_LO + ((float)b + (f < 0.f ? 0.f : (f > 1.f ? 1.f : f))) * XT_AUTO_BIN_W;
}

/* Window and level from the two quantiles a <= b (none counted: a = b = 0). */
static XT_INLINE XT_HOSTDEV void xt_auto_wl(float a, float b, float *window, float *level) {
  float w = (b - a) * (1.f + 2.f * XT_AUTO_MARGIN);
  *level = 0.5f * (a + b);
  *window = w > XT_AUTO_MIN_W ? w : XT_AUTO_MIN_W;
}

#endif /* XT_CHAIN_MATH_H */
