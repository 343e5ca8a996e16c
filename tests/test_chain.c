/* The imaging chain on the CPU against independent facts: Philox's published known-answer vectors,
 * the Poisson sampler's moments, exp(-L) for one energy (label head, and with Gaussian mixtures),
 * flat-field noise variance against the compound-Poisson closed form and its 1/dose scaling, the noise power spectrum against the
 * configured MTF^2, a slanted edge's measured MTF against the configured one, the lag impulse
 * response, 2x2 binning, processing, and bit-identical replay. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_chain.h"
#include "xt_chain_internal.h"
#include "xt_phantom.h"
#include "xt_test.h"
#include "xt_test_chain.h"
#include "xt_test_gmm.h"

/* Random123's kat_vectors for philox4x32-10 (counter, key, expected). */
XT_TEST(philox_matches_random123_known_answers) {
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    xt_u32x4 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
    const xt_u32x4 r = xt_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
    for (int k = 0; k < 4; k++) XT_CHECK_MSG(r.v[k] == kat[i].out[k], "vector %zu word %d: %08x", i, k, r.v[k]);
  }
}

/* ln k! of the sampler's acceptance test against libm's lgamma (an independent implementation). */
XT_TEST(log_factorial_matches_lgamma) {
  for (double k = 0; k < 3e6; k += k < 200 ? 1 : floor(k * 0.013)) {
    const double want = lgamma(k + 1.0);
    XT_CHECK_MSG(fabs(xt_log_factorial(k) - want) <= 1e-13 * want + 1e-12, "k %g: %.17g vs %.17g", k,
                 xt_log_factorial(k), want);
  }
}

/* Mean and variance of 200000 draws within 5 standard errors (each estimate's own error). */
XT_TEST(poisson_sampler_has_poisson_moments) {
  const double lams[] = {0.3, 3.0, 9.99, 10.0, 47.5, 5000.0, 2.5e6};
  const int n = 200000;
  for (size_t l = 0; l < sizeof lams / sizeof lams[0]; l++) {
    const double lam = lams[l];
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
      xt_rng g;
      xt_rng_init(&g, 77, (uint64_t)l, (uint32_t)i, XT_RNG_QUANTA);
      const double k = xt_rng_poisson(&g, lam);
      XT_REQUIRE(k >= 0 && k == floor(k));
      s += k;
      s2 += k * k;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    XT_CHECK_MSG(fabs(mean - lam) <= 5 * sqrt(lam / n), "lambda %g: mean %g", lam, mean);
    /* var of the sample variance ~ (2 lam^2 + lam) / n */
    XT_CHECK_MSG(fabs(var - lam) <= 5 * sqrt((2 * lam * lam + lam) / n), "lambda %g: variance %g", lam, var);
  }
}

/* PTRS's full test (float first, double where the float is undecided; and the double alone, as the
 * GPU's resumed draws take it) against the test written directly in double with lgamma: the same
 * answer for every try that reaches it, over many tries at quanta from 10 to 2.5e6, except where the
 * oracle's own two sides are within 1e-9 (its rounding). */
XT_TEST(ptrs_full_test_matches_double_lgamma) {
  const double lams[] = {10.0, 12.7, 47.5, 300.0, 5000.0, 2.5e6};
  long tested = 0;
  for (size_t l = 0; l < sizeof lams / sizeof lams[0]; l++) {
    xt_ptrs p;
    xt_ptrs_init(&p, lams[l]);
    xt_rng g;
    xt_rng_init(&g, 5, (uint64_t)l, 0, XT_RNG_QUANTA);
    for (int i = 0; i < 400000; i++) {
      const double U = xt_rng_uniform(&g) - 0.5, V = xt_rng_uniform(&g);
      double k, us;
      if (xt_ptrs_quick(&p, U, V, &k, &us) != -1) continue;
      const double ia = 1.1239 + 1.1328 / (p.b - 3.4);
      const double lhs = log(V) + log(ia) - log(p.a / (us * us) + p.b);
      const double rhs = -p.lam + k * log(p.lam) - lgamma(k + 1.0);
      if (fabs(lhs - rhs) < 1e-9) continue;
      tested++;
      XT_CHECK_MSG(xt_ptrs_test(&p, V, us, k) == (lhs <= rhs), "lambda %g k %g: %g vs %g", lams[l], k, lhs, rhs);
      XT_CHECK_MSG(xt_ptrs_test_double(&p, V, us, k) == (lhs <= rhs), "double alone, lambda %g k %g", lams[l], k);
    }
  }
  XT_CHECK(tested > 100000);
}

/* A random pixel (S, Q): quanta log-uniform in 10..4e6 of 20-100 keV each; its PTRS set-ups in
 * double (*p) and float (*pf). Returns the double quanta, or -that where the float set-up declines. */
static double quickf_pixel(xt_rng *g, xt_ptrs *p, xt_ptrsf *pf) {
  const double lam0 = 10.0 * pow(4e5, xt_rng_uniform(g)), E = 20.0 + 80.0 * xt_rng_uniform(g);
  const float S = (float)(lam0 * E), Q = (float)((double)S * E);
  const double lam = xt_detect_quanta(S, Q);
  xt_ptrs_init(p, lam);
  return xt_ptrsf_init(pf, S, Q) ? lam : -lam;
}

/* One try, float step (bound scaled by bscale) against the double step: 1 they differ, 0 they
 * agree, -1 the float step is undecided. */
static int quickf_vs_double(const xt_ptrsf *pf, const xt_ptrs *p, uint32_t ju, uint32_t jv, float bscale) {
  float kf = -1e30f;
  double kd, us;
  const int rf = xt_ptrs_quickf_b(pf, ju, jv, bscale, &kf);
  if (rf == -2) return -1;
  const double U = ((double)ju + 0.5) * (1.0 / 4294967296.0) - 0.5, V = ((double)jv + 0.5) * (1.0 / 4294967296.0);
  const int rd = xt_ptrs_quick(p, U, V, &kd, &us);
  return rf != rd || (rd != 0 && (double)kf != kd);
}

/* Counts of a set of tries. */
typedef struct quickf_tally {
  long tries, undecided, wrong;
} quickf_tally;

static void quickf_count(quickf_tally *t, const xt_ptrsf *pf, const xt_ptrs *p, uint32_t ju, uint32_t jv,
                         float bscale) {
  const int r = quickf_vs_double(pf, p, ju, jv, bscale);
  t->tries++;
  t->undecided += r < 0;
  t->wrong += r > 0;
}

/* Tries built at the float step's boundaries, at quanta log-uniform in 10..4e6, under a bound scaled
 * by bscale: k's fractional part near 0 (x increases with ju: a bisection finds the words where
 * floor(x) steps), us at 0.07 and 0.013 (the thresholds' words and their neighbours), V at vr. */
static quickf_tally quickf_near_boundaries(float bscale, int pixels) {
  quickf_tally t = {0, 0, 0};
  xt_rng g;
  xt_rng_init(&g, 11, 0, 0, XT_RNG_QUANTA);
  for (int i = 0; i < pixels; i++) {
    xt_ptrs p;
    xt_ptrsf pf;
    if (quickf_pixel(&g, &p, &pf) < 0) continue;
    /* floor(x)'s steps: bisect between two words whose floors differ */
    uint32_t lo = xt_rng_u32(&g), hi = xt_rng_u32(&g);
    if (lo > hi) {
      const uint32_t w = lo;
      lo = hi;
      hi = w;
    }
    const uint32_t jv = xt_rng_u32(&g) >> 4; /* mostly below vr: the accepting branch needs k */
    double klo, khi, us;
    (void)xt_ptrs_quick(&p, ((double)lo + 0.5) / 4294967296.0 - 0.5, 0.5, &klo, &us);
    (void)xt_ptrs_quick(&p, ((double)hi + 0.5) / 4294967296.0 - 0.5, 0.5, &khi, &us);
    if (klo != khi) {
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        double km;
        (void)xt_ptrs_quick(&p, ((double)mid + 0.5) / 4294967296.0 - 0.5, 0.5, &km, &us);
        if (km == klo) lo = mid;
        else hi = mid;
      }
      for (int d = -3; d <= 3; d++) quickf_count(&t, &pf, &p, hi + (uint32_t)d, jv, bscale);
    }
    /* us at its thresholds, U of either sign */
    const uint32_t ms[2] = {XT_PTRS_M07, XT_PTRS_M013};
    for (int j = 0; j < 2; j++)
      for (int d = -2; d <= 2; d++) {
        const uint32_t m = ms[j] + (uint32_t)d, v = xt_rng_u32(&g);
        quickf_count(&t, &pf, &p, m, v, bscale);
        quickf_count(&t, &pf, &p, ~m, v, bscale);
        quickf_count(&t, &pf, &p, m, m + 1, bscale); /* V just above us */
        quickf_count(&t, &pf, &p, ~m, m, bscale);    /* V = us */
      }
    /* V at vr: the words around vr 2^32 - 1/2, with us >= 0.07 */
    const uint32_t jr = (uint32_t)floor(p.vr * 4294967296.0 - 0.5);
    for (int d = -2; d <= 2; d++) {
      const uint32_t ju = (uint32_t)(0x40000000u + (xt_rng_u32(&g) >> 1)); /* us in [0.25, 0.5) or so */
      quickf_count(&t, &pf, &p, ju, jr + (uint32_t)d, bscale);
    }
  }
  return t;
}

/* The float quick step (xt_ptrs_quickf) against the double one: the thresholds' words exact, the
 * float set-up within the error figures its bound assumes, and every decided try the same answer
 * and count over 6 million random tries and near every boundary; a bound 64 times smaller gets
 * some wrong (so this test can see a bound too small). */
XT_TEST(ptrs_float_quick_step_matches_double) {
  const double u = 0x1p-24;
  XT_CHECK(((double)XT_PTRS_M07 + 0.5) / 4294967296.0 >= 0.07 && ((double)XT_PTRS_M07 - 0.5) / 4294967296.0 < 0.07);
  XT_CHECK(((double)XT_PTRS_M013 + 0.5) / 4294967296.0 >= 0.013 && ((double)XT_PTRS_M013 - 0.5) / 4294967296.0 < 0.013);
  xt_rng g;
  xt_rng_init(&g, 12, 0, 0, XT_RNG_QUANTA);
  quickf_tally t = {0, 0, 0};
  double eb = 0, ea = 0, evr = 0, elam = 0;
  for (int i = 0; i < 200000; i++) {
    xt_ptrs p;
    xt_ptrsf pf;
    const double lam = quickf_pixel(&g, &p, &pf);
    if (lam < 0) {
      XT_CHECK_MSG(-lam >= 4194303.0, "lambda %g declined", -lam);
      continue;
    }
    eb = fmax(eb, fabs(pf.b - p.b) / p.b / u);
    ea = fmax(ea, fabs(0.5 * pf.a2 - p.a) / p.a / u);
    evr = fmax(evr, fabs(pf.vr - p.vr) / u);
    elam = fmax(elam, fabs(((double)pf.li + pf.lf + pf.llo) - lam) / lam / 0x1p-44);
    for (int j = 0; j < 30; j++) quickf_count(&t, &pf, &p, xt_rng_u32(&g), xt_rng_u32(&g), 1.f);
  }
  XT_CHECK_MSG(eb <= 4.5 && ea <= 10.3 && evr <= 7.1 && elam <= 1.0,
               "set-up errors b %g u, a %g u, vr %g u, lam %g 2^-44", eb, ea, evr, elam);
  XT_CHECK_MSG(t.wrong == 0 && t.tries == 6000000 && t.undecided < t.tries / 200,
               "random: %ld wrong, %ld undecided of %ld", t.wrong, t.undecided, t.tries);
  const quickf_tally nb = quickf_near_boundaries(1.f, 100000);
  XT_CHECK_MSG(nb.wrong == 0 && nb.tries > 3000000 && nb.undecided < nb.tries,
               "near boundaries: %ld wrong, %ld undecided of %ld", nb.wrong, nb.undecided, nb.tries);
  const quickf_tally small = quickf_near_boundaries(1.f / 64, 100000);
  XT_CHECK_MSG(small.wrong > 0, "a bound 64 times smaller: %ld wrong of %ld", small.wrong, small.tries);
}

/* The full test on the float set-up (xt_ptrs_tf_of_f, as the GPU's inline draw takes it) against
 * the test written in double with lgamma, at pixels (S, Q) of 10 to 4e6 quanta: the same answer
 * wherever the float one decides and the oracle's sides are 1e-9 apart or more; a bound 64 times
* smaller gets some wrong (the real errors lie far inside eps on the host, whose logf is the C
 * library's: at 1/64 of the bound 3 of 480,000 go wrong, at 1/256 11). */
static long full_test_f_wrong(float bscale, long *tested) {
  long wrong = 0;
  xt_rng g;
  xt_rng_init(&g, 13, 0, 0, XT_RNG_QUANTA);
  *tested = 0;
  for (int i = 0; i < 20000; i++) {
    xt_ptrs p;
    xt_ptrsf pf;
    if (quickf_pixel(&g, &p, &pf) < 0) continue;
    xt_ptrs_tf tf;
    xt_ptrs_tf_of_f(&pf, &tf);
    for (int j = 0; j < 100; j++) {
      const uint32_t ju = xt_rng_u32(&g), jv = xt_rng_u32(&g);
      float k;
      if (xt_ptrs_quickf(&pf, ju, jv, &k) != -1) continue;
      const double us = ((double)((ju >> 31) ? ~ju : ju) + 0.5) / 4294967296.0, V = ((double)jv + 0.5) / 4294967296.0;
      const double ia = 1.1239 + 1.1328 / (p.b - 3.4);
      const double lhs = log(V) + log(ia) - log(p.a / (us * us) + p.b);
      const double rhs = -p.lam + (double)k * log(p.lam) - lgamma((double)k + 1.0);
      if (fabs(lhs - rhs) < 1e-9) continue;
      const int f = xt_ptrs_test_f(&tf, (float)V, (float)us, k, ((k - pf.li) + 1.f - pf.lf) - pf.llo, bscale);
      if (f < 0) continue;
      ++*tested;
      wrong += f != (lhs <= rhs);
    }
  }
  return wrong;
}

XT_TEST(ptrs_full_test_on_float_set_up_matches_double_lgamma) {
  long tested, small_tested;
  XT_CHECK(full_test_f_wrong(1.f, &tested) == 0);
  XT_CHECK_MSG(tested > 200000, "%ld tests", tested);
  XT_CHECK(full_test_f_wrong(1.f / 256, &small_tested) > 0);
}

/* The readout's float normal: mean 0, variance 1, fourth moment 3 (200000 draws, 5 standard errors)
 * and symmetric tails: P(|z| > 3) = 0.0026998. */
XT_TEST(float_normal_has_normal_moments) {
  const int n = 200000;
  double s = 0, s2 = 0, s4 = 0, t3 = 0;
  for (int i = 0; i < n; i++) {
    xt_rng g;
    xt_rng_init(&g, 9, 1, (uint32_t)i, XT_RNG_READ);
    const double z = xt_rng_normalf(&g);
    s += z;
    s2 += z * z;
    s4 += z * z * z * z;
    t3 += fabs(z) > 3.0;
  }
  XT_CHECK_MSG(fabs(s / n) <= 5 * sqrt(1.0 / n), "mean %g", s / n);
  XT_CHECK_MSG(fabs(s2 / n - 1) <= 5 * sqrt(2.0 / n), "variance %g", s2 / n);
  XT_CHECK_MSG(fabs(s4 / n - 3) <= 5 * sqrt(96.0 / n), "fourth moment %g", s4 / n);
  XT_CHECK_MSG(fabs(t3 / n - 0.0026998) <= 5 * sqrt(0.0027 / n), "P(|z| > 3) %g", t3 / n);
}

/* An empty scene (a flat field) or the head, on a CPU projector. */
static xt_proj *cpu_proj_with(xt_model *m) { return xt_tc_proj(XT_BACKEND_CPU, 2, &m, m ? 1 : 0); }

static xt_geometry geom(const char *mode, double primary, double detrot) {
  return xt_tc_geom(mode, primary, 0, detrot);
}

/* A quiet panel: no fixed pattern, defects, lag or electronic noise. */
static xt_chain_params quiet(void) { return xt_tc_quiet(); }

/* One energy: the detected signal over the flat field is exp(-L), L the mono line integral of the
 * same scene at that energy (the label table's 60 keV), to float rounding: the label head alone,
 * and with Gaussian mixtures (labelled and not) in the scene too - the chain through every
 * channel rule the CPU has. */
static void one_energy(int with_mixtures) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL, *mix[2] = {NULL, NULL};
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj *p = cpu_proj_with(head);
  XT_REQUIRE(p);
  if (with_mixtures) {
    srand(5);
    mix[0] = labelled_mixture(150, 1, 60, 3, 15, -25);
    mix[1] = labelled_mixture(150, 0, 60, 3, 15, 25);
    XT_REQUIRE(mix[0] && mix[1] && xt_proj_add_model(p, mix[0], NULL) == 0 && xt_proj_add_model(p, mix[1], NULL) == 0);
  }
  xt_chain *c = NULL;
  xt_chain_params prm = quiet();
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  /* one bin at exactly 60 keV */
  xt_chain_tables *t = &c->tc->tab[c->slot]; /* the cached slot of the parameters' tables, overridden */
  double mr[XT_MAX_CHANNELS];
  XT_REQUIRE(xt_chanset_mass_atten(&c->cs, 60.0, mr, NULL) == 0);
  t->nbins = 1;
  for (int ch = 0; ch < XT_MAX_CHANNELS; ch++) t->mr[0][ch] = (float)(mr[ch] * 1.4426950408889634); /* log2(e) */
  t->k1[0] = 1000.f;
  t->k2[0] = 60000.f;
  t->flat1 = 1000.f;
  xt_geometry g = geom("fd20-128", 30, 0);
  const size_t np = (size_t)g.mode.rows * g.mode.cols;
  float *L = malloc(np * sizeof *L), *S = malloc(np * sizeof *S);
  XT_REQUIRE(L && S);
  XT_REQUIRE(xt_proj_render(p, &g, L, NULL) == 0);
  prm.quantum_noise = 0;
  c->prm = prm;
  xt_chain_out out = {0};
  out.expected = S;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  double worst = 0, lmax = 0;
  xt_chain_frame_const fc;
  xt_chain_frame_const_make(c, &g, 0, &fc);
  for (int r = 0; r < g.mode.rows; r++)
    for (int col = 0; col < g.mode.cols; col++) {
      const size_t i = (size_t)r * g.mode.cols + col;
      /* over the flat field's expectation, same pixel */
      const double tr = S[i] / xt_flat_expect(&fc.cam, fc.mas, t->flat1, fc.coll.grid_tp, col, r);
      worst = fmax(worst, fabs(tr - exp(-(double)L[i])) / exp(-(double)L[i]));
      lmax = fmax(lmax, L[i]);
    }
  XT_CHECK(lmax > 2);
  XT_CHECK_MSG(worst <= 2e-5, "mixtures %d: worst relative |S/F - exp(-L)| = %g", with_mixtures, worst);
  free(L);
  free(S);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  xt_model_free(head);
  xt_model_free(mix[0]);
  xt_model_free(mix[1]);
}

XT_TEST(one_energy_transmission_is_exp_minus_line_integral) {
  one_energy(0);
  one_energy(1);
}

/* Relative noise r = signal / expected - 1 over a central square of a flat field. */
static void flat_noise(double mas, int frames, const char *mode, double psf, double *var_meas, double *var_pred,
                       double *nps, int nf) {
  xt_proj *p = cpu_proj_with(NULL);
  xt_chain_params prm = quiet();
  prm.mas = mas;
  prm.psf_mm = psf;
  xt_chain *c = NULL;
  if (!p || xt_chain_create(&prm, p, &c, NULL)) {
    *var_meas = *var_pred = NAN;
    return;
  }
  xt_geometry g = geom(mode, 0, 0);
  const int cols = g.mode.cols, rows = g.mode.rows, n0 = cols / 4, n = cols / 2;
  float *S = malloc(sizeof(float) * cols * rows), *D = malloc(sizeof(float) * cols * rows);
  double sv = 0, sp = 0, cnt = 0;
  xt_chain_frame_const fc;
  xt_chain_frame_const_make(c, &g, 0, &fc);
  double w2u = 0, w2v = 0;
  for (int j = 0; j <= 2 * fc.bu.r; j++) w2u += (double)fc.bu.w[j] * fc.bu.w[j];
  for (int j = 0; j <= 2 * fc.bv.r; j++) w2v += (double)fc.bv.w[j] * fc.bv.w[j];
  if (nps)
    for (int k = 0; k < nf; k++) nps[k] = 0;
  for (int f = 0; f < frames; f++) {
    xt_chain_out out = {0};
    out.expected = S;
    out.signal = D;
    if (xt_chain_frame(c, &g, (uint64_t)f, &out, NULL)) break;
    for (int r = n0; r < n0 + n; r++) {
      double re[512];
      for (int col = n0; col < n0 + n; col++) {
        const size_t i = (size_t)r * cols + col;
        const double x = D[i] / S[i] - 1.0;
        re[col - n0] = x;
        sv += x * x;
        /* compound Poisson: var(signal) = Q = S^2 flat2 / (G flat1^2) = S flat2 / flat1 */
        sp += (double)c->tab->flat2 / c->tab->flat1 / S[i] * w2u * w2v;
        cnt++;
      }
      /* the row's periodogram at the first nf frequencies k / n cycles per pixel, Hann-windowed
       * (the rectangular window's side lobes would leak the low frequencies' power into the high) */
      double w2 = 0;
      for (int x = 0; x < n; x++) w2 += pow(0.5 - 0.5 * cos(2 * XT_PI * x / n), 2);
      for (int k = 0; nps && k < nf; k++) {
        double a = 0, b = 0;
        for (int x = 0; x < n; x++) {
          const double h = 0.5 - 0.5 * cos(2 * XT_PI * x / n);
          a += h * re[x] * cos(2 * XT_PI * k * x / n);
          b += h * re[x] * sin(2 * XT_PI * k * x / n);
        }
        nps[k] += (a * a + b * b) / w2;
      }
    }
  }
  if (nps)
    for (int k = 0; k < nf; k++) nps[k] /= frames * n; /* rows x frames periodograms */
  *var_meas = sv / cnt;
  *var_pred = sp / cnt;
  free(S);
  free(D);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
}

/* Flat-field relative variance: the compound-Poisson closed form (Q / S^2 times the blur's
 * sum of squared weights) within 5 %, and 1/dose: four times the mAs, a quarter of the variance. */
XT_TEST(flat_field_variance_scales_as_one_over_dose) {
  double v1, p1, v4, p4;
  flat_noise(0.002, 1, "fd20-256", 0.5, &v1, &p1, NULL, 0);
  flat_noise(0.008, 1, "fd20-256", 0.5, &v4, &p4, NULL, 0);
  XT_CHECK_MSG(fabs(v1 / p1 - 1) <= 0.05, "variance %g, closed form %g", v1, p1);
  XT_CHECK_MSG(fabs(v4 / p4 - 1) <= 0.05, "variance %g, closed form %g", v4, p4);
  XT_CHECK_MSG(fabs((v1 / v4) / 4.0 - 1) <= 0.05, "variance ratio %g for 4x the dose", v1 / v4);
}

/* |K(f)| of the sampled, normalised Gaussian kernel: the configured MTF. */
static double kernel_mtf(const xt_blur_kernel *k, double f) {
  double s = 0;
  for (int j = -k->r; j <= k->r; j++) s += k->w[j + k->r] * cos(2 * XT_PI * f * j);
  return fabs(s);
}

/* NPS along rows, relative: var_white x sum(w_v^2) x |K_u(f)|^2 (the columns' blur only scales it),
 * in bands of 8 frequencies up to 0.49 cycles per pixel, within 8 % (each band averages 8 bins x 128
 * rows x 8 frames of Hann-windowed periodograms, adjacent bins half correlated: ~1.5 % standard
 * error; with 2 frames the last band, where MTF^2 is 2e-4, came out 10 % low). */
XT_TEST(noise_power_spectrum_follows_mtf_squared) {
  enum { NF = 64 };
  double nps[NF], vm, vp;
  flat_noise(0.004, 8, "fd20-256", 1.2, &vm, &vp, nps, NF);
  xt_geometry g = geom("fd20-256", 0, 0);
  xt_blur_kernel ku, kv;
  xt_blur_kernel_make(1.2 / g.mode.pitch_u_mm, &ku);
  xt_blur_kernel_make(1.2 / g.mode.pitch_v_mm, &kv);
  XT_REQUIRE(ku.r >= 2);
  double w2u = 0, w2v = 0;
  for (int j = 0; j <= 2 * ku.r; j++) w2u += (double)ku.w[j] * ku.w[j];
  for (int j = 0; j <= 2 * kv.r; j++) w2v += (double)kv.w[j] * kv.w[j];
  const double white = vp / (w2u * w2v); /* relative variance before the blur */
  for (int b = 1; b < NF / 8; b++) {
    double m = 0, e = 0;
    for (int k = b * 8; k < b * 8 + 8; k++) {
      m += nps[k];
      e += white * w2v * pow(kernel_mtf(&ku, k / 128.0), 2);
    }
    XT_CHECK_MSG(fabs(m / e - 1) <= 0.08, "band %d (f %.3f..%.3f): NPS %g, white x MTF^2 %g", b, b * 8 / 128.0,
                 (b * 8 + 7) / 128.0, m / 8, e / 8);
  }
}

/* The slanted-edge method (IEC 62220-1): a 2 mm titanium half-plane's edge, the detector turned
 * 4 degrees, noise off; rows give the edge line, pixels binned at 1/8 pixel across it make the ESF,
 * its derivative the LSF, whose DFT must be the configured MTF |K(f)| within 0.02 up to 0.4 cycles
 * per pixel. */
XT_TEST(edge_phantom_mtf_matches_the_configured_one) {
  const double sp[3] = {1.0, 2.0, 1.0};
  xt_volume *v = NULL;
  xt_model *m = NULL;
  XT_REQUIRE(xt_volume_create(300, 1, 300, sp, XT_VOXEL_U8, &v, NULL) == 0);
  v->materials = malloc(sizeof *v->materials);
  XT_REQUIRE(v->materials && xt_materials_default(60, v->materials, NULL) == 0);
  uint8_t *lab = v->data;
  for (int z = 0; z < 300; z++)
    for (int x = 0; x < 300; x++) lab[(size_t)z * 300 + x] = x >= 150 ? XT_MAT_METAL : XT_MAT_AIR;
  XT_REQUIRE(xt_model_from_volume(v, "edge", &m, NULL) == 0);
  xt_proj *p = cpu_proj_with(m);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  prm.quantum_noise = 0;
  prm.psf_mm = 0.8;
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_geometry g = geom("fd20-256", 0, 4.0);
  const int cols = g.mode.cols, rows = g.mode.rows;
  float *D = malloc(sizeof(float) * cols * rows);
  XT_REQUIRE(D);
  xt_chain_out out = {0};
  out.signal = D;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  /* per row of a central band, the edge at the centroid of |d/dx| */
  const int r0 = rows / 2 - 48, r1 = rows / 2 + 48;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  for (int r = r0; r < r1; r++) {
    double w = 0, wx = 0;
    for (int col = 1; col < cols; col++) {
      const double d = fabs((double)D[(size_t)r * cols + col] - D[(size_t)r * cols + col - 1]);
      w += d;
      wx += d * (col - 0.5);
    }
    const double xe = wx / w;
    sx += r;
    sy += xe;
    sxx += (double)r * r;
    sxy += r * xe;
    n++;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icpt = (sy - slope * sx) / n;
  XT_CHECK(fabs(atan(slope)) > 0.03 && fabs(atan(slope)) < 0.12); /* ~4 degrees */
  /* ESF at 1/8 pixel across the edge, within +-12 pixels */
  enum { OS = 8, HALF = 12 * OS, NB = 2 * HALF };
  double esf[NB] = {0}, cnt[NB] = {0};
  const double cs = cos(atan(slope));
  for (int r = r0; r < r1; r++)
    for (int col = 0; col < cols; col++) {
      const double d = (col - (icpt + slope * r)) * cs;
      const int bin = (int)floor(d * OS) + HALF;
      if (bin < 0 || bin >= NB) continue;
      esf[bin] += D[(size_t)r * cols + col];
      cnt[bin] += 1;
    }
  for (int b = 0; b < NB; b++) {
    XT_REQUIRE(cnt[b] > 0);
    esf[b] /= cnt[b];
  }
  double lsf[NB - 1];
  for (int b = 0; b < NB - 1; b++) lsf[b] = esf[b + 1] - esf[b];
  xt_blur_kernel ku;
  xt_blur_kernel_make(prm.psf_mm / g.mode.pitch_u_mm, &ku);
  double a0 = 0;
  for (int b = 0; b < NB - 1; b++) a0 += lsf[b];
  for (int k = 1; k <= 8; k++) {
    const double f = 0.05 * k; /* cycles per pixel */
    double a = 0, s = 0;
    for (int b = 0; b < NB - 1; b++) {
      const double x = (b + 1 - HALF) / (double)OS;
      a += lsf[b] * cos(2 * XT_PI * f * x);
      s += lsf[b] * sin(2 * XT_PI * f * x);
    }
    /* the 1/8-pixel bins average: sinc(f/8) */
    const double meas = sqrt(a * a + s * s) / fabs(a0) / (sin(XT_PI * f / OS) / (XT_PI * f / OS));
    /* the rotated detector samples the edge along u and v: the blur across the edge is K_u at cos(4 deg)
     * mixed with K_v; both kernels are equal here (square pixels) */
    XT_CHECK_MSG(fabs(meas - kernel_mtf(&ku, f)) <= 0.02, "f %.2f: measured MTF %.4f, configured %.4f", f, meas,
                 kernel_mtf(&ku, f));
  }
  free(D);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  xt_model_free(m);
}

/* Lag: after a long steady exposure stops, the n-th frame keeps sum_k f_k a_k^(n-1) of the signal
 * (the configured fractions and decays), to the ADC's rounding. */
XT_TEST(lag_decays_as_configured) {
  xt_proj *p = cpu_proj_with(NULL);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  prm.lag = 1;
  prm.quantum_noise = 0;
  prm.psf_mm = 0;
  xt_geometry g = geom("fd20-128", 0, 0);
  /* the centre pixel at about 10000 ADU */
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_chain_frame_const fc;
  xt_chain_frame_const_make(c, &g, 0, &fc);
  const int i = 64 * 128 + 64;
  /* fd20-128's code is the mean of its 15 x 15 native pixels': adu_per_kev / 225 of its charge */
  const double per_mas = xt_pixel_geometry(&fc.cam, 64, 64, 1.0f) * c->tab->flat1 * prm.adu_per_kev / 225.0;
  prm.mas = 10000.0 / per_mas;
  const double on = prm.mas;
  XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
  uint16_t raw[128 * 128];
  xt_chain_out out = {0};
  out.raw = raw;
  for (int f = 0; f < 200; f++) XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)f, &out, NULL) == 0);
  const double x_on = raw[i] - prm.offset_adu;
  XT_CHECK_NEAR(x_on, 10000, 1.0); /* steady state: charge conserved */
  prm.mas = 1e-5;
  XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
  const double x_off = 10000.0 * 1e-5 / on;
  /* the response to x = 10000 until frame 0 and x_off after, by superposition of the impulse
   * response h[0] = 1 - sum f_k, h[j] = sum_k f_k (1 - a_k) a_k^(j-1) (term k's fraction f_k spread
   * geometrically over the following frames) */
  for (int n = 1; n <= 4; n++) {
    XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)(200 + n), &out, NULL) == 0);
    double want = 0;
    for (int j = 0; j < 5000; j++) {
      double h = j == 0 ? 1.0 : 0.0;
      for (int k = 0; k < 3; k++)
        h += j == 0 ? -prm.lag_frac[k] : prm.lag_frac[k] * (1 - prm.lag_decay[k]) * pow(prm.lag_decay[k], j - 1);
      want += h * (n - j >= 1 ? x_off : 10000.0);
    }
    XT_CHECK_MSG(fabs(raw[i] - prm.offset_adu - want) <= 1.0, "frame %d after: %g ADU, expected %g", n,
                 raw[i] - prm.offset_adu, want);
  }
  XT_CHECK(raw[i] - prm.offset_adu > 20); /* the 4th frame still lags ~0.3 % */
  xt_chain_destroy(c);
  xt_proj_destroy(p);
}

/* 2x2 binning sums the four pixels' charge before one read: raw = offset + gain x (sum of the
 * unbinned signals), to the ADC's rounding; the gain of fd20-128's render pixel is adu_per_kev / 225
 * (its code the mean of 15 x 15 native pixels'). */
XT_TEST(binning_sums_charge) {
  xt_proj *p = cpu_proj_with(NULL);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  prm.quantum_noise = 0;
  prm.mas = 0.04; /* ~1800 ADU a render pixel in air, ~7300 a bin */
  xt_chain *c1 = NULL, *c2 = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c1, NULL) == 0);
  prm.binning = 2;
  XT_REQUIRE(xt_chain_create(&prm, p, &c2, NULL) == 0);
  xt_geometry g = geom("fd20-128", 0, 0);
  float D[128 * 128];
  uint16_t raw2[64 * 64];
  xt_chain_out o1 = {0}, o2 = {0};
  o1.signal = D;
  o2.raw = raw2;
  XT_REQUIRE(xt_chain_frame(c1, &g, 0, &o1, NULL) == 0 && xt_chain_frame(c2, &g, 0, &o2, NULL) == 0);
  int cols, rows;
  xt_chain_out_size(c2, &g, &cols, &rows);
  XT_CHECK(cols == 64 && rows == 64);
  for (int r = 0; r < 64; r += 7)
    for (int c = 0; c < 64; c += 5) {
      double s = 0;
      for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) s += D[(2 * r + dy) * 128 + 2 * c + dx];
      XT_CHECK_NEAR(raw2[r * 64 + c], floor(prm.offset_adu + s * prm.adu_per_kev / 225.0 + 0.5), 1.0);
    }
  xt_chain_destroy(c1);
  xt_chain_destroy(c2);
  xt_proj_destroy(p);
}

/* A resampled mode's pixel is the mean of the native pixels' codes it covers (docs/imaging.md §4).
 * n typed from scene/detector_modes.tsv (1920 native pixels to 256: 7.5 x 7.5; native and 2x2 binned
 * modes 1). On a flat field at fd20-256, no blur, over the central quarter: noise off, the code above
 * the offset is the render pixel's absorbed energy S x adu_per_kev / n to the ADC's rounding;
 * electronic noise alone, the codes' variance about that is sigma^2 / n (the mean of n reads) plus
 * the rounding's 1/12; quanta alone, (adu_per_kev / n)^2 Q + 1/12 with Q = S flat2 / flat1 (the
 * compound Poisson variance of the render pixel's own quanta) - each within 5 % (16384 pixels: a
 * variance's standard error 1.1 %). */
XT_TEST(resampled_mode_reads_the_mean_of_its_native_pixels) {
  static const struct {
    const char *mode;
    double n;
  } modes[] = {{"fd20", 1},      {"fd20-bin2", 1},           {"fd20-48", 1},  {"fd20-42", 1},  {"fd20-27", 1},
               {"fd20-15", 1},   {"fd20-1024", 1.875 * 1.875}, {"fd20-512", 3.75 * 3.75}, {"fd20-256", 56.25},
               {"fd20-128", 225}, {"fd15-256", 7 * 7},          {"fd15-39", 1},  {"thesis", 1}};
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    const xt_detector_mode *md = xt_mode_find(modes[k].mode);
    XT_REQUIRE(md);
    XT_CHECK_MSG(xt_mode_native_mean(md) == modes[k].n, "%s: %g native pixels, want %g", modes[k].mode,
                 xt_mode_native_mean(md), modes[k].n);
  }
  const xt_detector_mode custom = xt_mode_custom("custom", 64, 64, 1.5, 1.5, 810, 1195);
  XT_CHECK(xt_mode_native_mean(&custom) == 1);

  xt_proj *p = cpu_proj_with(NULL);
  XT_REQUIRE(p);
  const xt_geometry g = geom("fd20-256", 0, 0);
  const double n = 56.25;
  enum { W = 256, N = W * W };
  static float S[N];
  static uint16_t raw[N];
  for (int k = 0; k < 3; k++) {
    xt_chain_params prm = quiet();
    prm.psf_mm = 0;
    prm.mas = 0.05;
    prm.quantum_noise = k == 2;
    prm.e_noise_adu = k == 1 ? 40 : 0;
    xt_chain *c = NULL;
    XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
    xt_chain_out out = {0};
    out.raw = raw;
    out.expected = S;
    XT_REQUIRE(xt_chain_frame(c, &g, 1, &out, NULL) == 0);
    const double gain = prm.adu_per_kev / n, q_per_s = (double)c->tab->flat2 / c->tab->flat1;
    double worst = 0, lo = 1e30, sv = 0, sp = 0;
    int cnt = 0;
    for (int r = W / 4; r < 3 * W / 4; r++)
      for (int col = W / 4; col < 3 * W / 4; col++) {
        const size_t i = (size_t)r * W + col;
        const double want = prm.offset_adu + S[i] * gain, d = raw[i] - want;
        XT_REQUIRE(raw[i] < 16383);
        lo = fmin(lo, S[i] * gain);
        worst = fmax(worst, fabs(d));
        sv += d * d;
        sp += (k == 1 ? 40.0 * 40.0 / n : k == 2 ? gain * gain * S[i] * q_per_s : 0) + 1.0 / 12;
        cnt++;
      }
    if (k == 0) XT_CHECK_MSG(worst <= 0.5 + 1e-3 && lo > 300, "noise off: |code - S adu / n| up to %g (codes from %g)", worst, lo);
    else XT_CHECK_MSG(fabs(sv / sp - 1) <= 0.05, "%s: variance %g, the mean of n reads' %g", k == 1 ? "electronic" : "quanta",
                      sv / cnt, sp / cnt);
    xt_chain_destroy(c);
  }
  xt_proj_destroy(p);
}

/* The panel's faults since calibration (xt_chain_set_panel_fault; the server's fault injection) act in
 * the readout only: none set (or on = 0) leaves the frames bit for bit; dead columns, rows and a
 * cluster read the offset and, unknown to the processing's defect map, are not interpolated; a gain
 * drift scales the signal above the offset (and shifts the processed frame, mostly one way); a stale calibration leaves a fixed pattern in the
 * processed frame, the same in every frame whatever the noise. */
XT_TEST(panel_faults_act_in_the_readout_only) {
  xt_proj *p = cpu_proj_with(NULL);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  prm.quantum_noise = 0;
  prm.mas = 0.2; /* ~9000 ADU above the offset in air */
  prm.level = 1.0;
  prm.window = 4.0;
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128", 0, 0);
  enum { N = 128 * 128 };
  static uint16_t raw0[N], proc0[N], raw[N], proc[N];
  xt_chain_out o0 = {0}, o = {0};
  o0.raw = raw0;
  o0.proc = proc0;
  o.raw = raw;
  o.proc = proc;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &o0, NULL) == 0);
  xt_panel_fault f;
  memset(&f, 0, sizeof f);
  f.col0 = 3; /* set but off: nothing happens */
  f.ncols = 1;
  xt_chain_set_panel_fault(c, &f);
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &o, NULL) == 0);
  XT_CHECK(!memcmp(raw, raw0, sizeof raw) && !memcmp(proc, proc0, sizeof proc));
  /* dead: column 7, rows 3 and 4, the pixels within 2 of (40, 50) */
  memset(&f, 0, sizeof f);
  f.on = 1;
  f.gain_scale = 1.f;
  f.col0 = 7;
  f.ncols = 1;
  f.row0 = 3;
  f.nrows = 2;
  f.cl_col = 40;
  f.cl_row = 50;
  f.cl_r = 2.f;
  xt_chain_set_panel_fault(c, &f);
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &o, NULL) == 0);
  int ndead = 0, bad = 0;
  for (int i = 0; i < N; i++) {
    const int r = i / 128, col = i % 128;
    const int dead = col == 7 || r == 3 || r == 4 || (col - 40) * (col - 40) + (r - 50) * (r - 50) <= 4;
    ndead += dead;
    if (dead ? raw[i] != (uint16_t)floor(prm.offset_adu + 0.5) || proc[i] == proc0[i] || raw0[i] <= raw[i]
             : raw[i] != raw0[i])
      bad++;
  }
  XT_CHECK(ndead == 128 + 2 * 128 - 2 + 13 && bad == 0);
  /* gain drift +10 %: the signal above the offset, to the ADC's rounding; the processing (calibrated
   * with the old gain) sees 10 % more signal: a lower attenuation everywhere, the frame shifted */
  memset(&f, 0, sizeof f);
  f.on = 1;
  f.gain_scale = 1.1f;
  f.cl_r = -1.f;
  xt_chain_set_panel_fault(c, &f);
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &o, NULL) == 0);
  int up = 0, down = 0;
  for (int i = 0; i < N; i++) {
    if (i % 97 == 0) XT_CHECK_NEAR(raw[i] - prm.offset_adu, 1.1 * (raw0[i] - prm.offset_adu), 1.0);
    up += proc[i] > proc0[i];
    down += proc[i] < proc0[i];
  }
  XT_CHECK_MSG(up + down > N / 2 && (up > 9 * down || down > 9 * up), "up %d down %d", up, down); /* mostly one way */
  /* a stale calibration, with noise on: the processed frames' difference from the calibrated panel's
   * is a fixed pattern (frames 1 and 2 alike), not noise */
  prm.quantum_noise = 1;
  prm.e_noise_adu = 2;
  XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
  static float d[2][N];
  for (int k = 0; k < 2; k++) {
    xt_chain_set_panel_fault(c, NULL);
    XT_REQUIRE(xt_chain_frame(c, &g, 1 + k, &o0, NULL) == 0);
    memset(&f, 0, sizeof f);
    f.on = 1;
    f.gain_scale = 1.f;
    f.cl_r = -1.f;
    f.stale_offset_adu = 40.f;
    f.stale_gain = 0.03f;
    f.stale_seed = 99;
    xt_chain_set_panel_fault(c, &f);
    XT_REQUIRE(xt_chain_frame(c, &g, 1 + k, &o, NULL) == 0);
    for (int i = 0; i < N; i++) d[k][i] = (float)raw[i] - (float)raw0[i];
  }
  double s01 = 0, s00 = 0, s11 = 0;
  for (int i = 0; i < N; i++) {
    s01 += (double)d[0][i] * d[1][i];
    s00 += (double)d[0][i] * d[0][i];
    s11 += (double)d[1][i] * d[1][i];
  }
  XT_CHECK(s00 / N > 100.0); /* rms > 10 ADU: the 40 ADU offset drift and the 3 % gain drift */
  XT_CHECK(s01 / sqrt(s00 * s11) > 0.99);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
}

/* Saturation, defects and the processed frame's window on a flat field: air is attenuation 0, so
 * each processed pixel is round(clamp((level + window/2) / window) x 4095); dead and hot pixels in
 * the raw frame are interpolated away in the processed one. */
XT_TEST(readout_defects_saturation_and_window) {
  xt_proj *p = cpu_proj_with(NULL);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  prm.quantum_noise = 0;
  prm.defect_fraction = 0.01;
  prm.defect_lines = 2;
  prm.level = 1.0;
  prm.window = 4.0;
  prm.edge_gain = 0.7;
  prm.mas = 0.2; /* ~9000 ADU above the offset */
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128", 0, 0);
  uint16_t raw[128 * 128], proc[128 * 128];
  xt_chain_out out = {0};
  out.raw = raw;
  out.proc = proc;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  int dead = 0, hot = 0, lines = 0;
  const uint16_t want = (uint16_t)floor(0.75 * 4095 + 0.5);
  for (int i = 0; i < 128 * 128; i++) {
    const int d = c->maps.defect[i];
    if (d == XT_DEFECT_DEAD || d == XT_DEFECT_LINE) {
      XT_CHECK(raw[i] == (uint16_t)floor(c->maps.offset[i] + 0.5));
      dead += d == XT_DEFECT_DEAD;
      lines += d == XT_DEFECT_LINE;
    }
    if (d == XT_DEFECT_HOT) {
      XT_CHECK(raw[i] == 16383);
      hot++;
    }
    /* flat: 0 attenuation everywhere (a few counts of the ADC's rounding), defects interpolated */
    XT_CHECK_MSG(abs((int)proc[i] - (int)want) <= 3, "pixel %d (defect %d): %d vs %d", i, d, proc[i], want);
  }
  XT_CHECK(dead > 20 && hot > 20 && lines == 2 * 128);
  /* saturation: 1000x the exposure clips at the 14-bit maximum */
  prm.mas = 200.0;
  XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
  XT_REQUIRE(xt_chain_frame(c, &g, 1, &out, NULL) == 0);
  XT_CHECK(raw[64 * 128 + 64] == 16383);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
}

/* The automatic window (issue 27, the default: window 0) against the frame's own attenuation,
 * computed here from the noise-free expected signal and the flat field (ln(F / S) per pixel, no
 * blur, no noise, no edge enhancement or recursive filter, so the processed image is that
 * attenuation to the ADC's rounding): its 0.5 % and 99.5 % points a, b by sorting, the window the
 * chain reports [a - m, b + m] (m = 2 % of b - a) within 0.03 of them (the histogram's bins are
 * 1/256 wide; the ADC's rounding), and the processed codes of the pixels at a and b at the
 * window's ends less the margin (4095 x 1.02 / 1.04 and 4095 x 0.02 / 1.04), at most 0.5 % of the
 * frame (+ 0.2 %) black or white. Fails with a fixed window (the parameters' level would be
 * reported) or one from other quantiles. */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

XT_TEST(automatic_window_spans_the_frames_quantiles) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj *p = cpu_proj_with(head);
  XT_REQUIRE(p);
  xt_chain_params prm = quiet();
  XT_CHECK(prm.window == 0); /* the default */
  prm.quantum_noise = 0;
  prm.psf_mm = 0;
  prm.edge_gain = 0;
  prm.temporal_alpha = 1;
  prm.mas = 0.25; /* air ~11400 ADU above the offset at fd20-128 */
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128", 30, 0);
  const int n = 128 * 128;
  static uint16_t raw[128 * 128], proc[128 * 128];
  static float S[128 * 128];
  static double A[128 * 128], As[128 * 128];
  xt_chain_out out = {raw, proc, S, NULL, 0};
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  xt_chain_frame_const fc;
  xt_chain_frame_const_make(c, &g, 0, &fc);
  for (int r = 0; r < 128; r++)
    for (int col = 0; col < 128; col++) {
      const int i = r * 128 + col;
      A[i] = log(xt_flat_expect(&fc.cam, fc.mas, c->tab->flat1, fc.coll.grid_tp, col, r) / S[i]);
      As[i] = A[i];
    }
  qsort(As, (size_t)n, sizeof *As, cmp_double);
  const double a = As[(int)(0.005 * n)], b = As[(int)(0.995 * n)], m = 0.02;
  XT_CHECK_MSG(b - a > 2, "the head's attenuation spans %g .. %g", a, b);
  double w, l;
  xt_chain_window_last(c, &w, &l);
  const double wa = l - 0.5 * w / (1 + 2 * m), wb = l + 0.5 * w / (1 + 2 * m);
  XT_CHECK_MSG(fabs(wa - a) < 0.03 && fabs(wb - b) < 0.03, "window %g level %g: quantiles %g %g, want %g %g", w, l, wa,
               wb, a, b);
  int black = 0, white = 0, na = 0, nb = 0;
  double ca = 0, cb = 0;
  for (int i = 0; i < n; i++) {
    black += proc[i] == 0;
    white += proc[i] == 4095;
    if (fabs(A[i] - a) < 0.01) ca += proc[i], na++;
    if (fabs(A[i] - b) < 0.01) cb += proc[i], nb++;
  }
  XT_REQUIRE(na > 0 && nb > 0);
  ca /= na;
  cb /= nb;
  XT_CHECK_MSG(fabs(ca - 4095 * (1 + m) / (1 + 2 * m)) < 25 && fabs(cb - 4095 * m / (1 + 2 * m)) < 25,
               "the 0.5 %% point at code %.1f (%d px), the 99.5 %% point at %.1f (%d px)", ca, na, cb, nb);
  XT_CHECK_MSG(black <= 0.007 * n && white <= 0.007 * n, "%d black, %d white of %d", black, white, n);
  /* an explicit window is honoured and reported */
  prm.window = 6;
  prm.level = 3;
  XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
  XT_REQUIRE(xt_chain_frame(c, &g, 1, &out, NULL) == 0);
  xt_chain_window_last(c, &w, &l);
  XT_CHECK(w == 6 && l == 3);
  for (int i = 0; i < n; i += 97) {
    const double x = fmin(1, fmax(0, (3 + 3 - A[i]) / 6)) * 4095;
    XT_CHECK_MSG(fabs(proc[i] - x) < 3, "fixed window: pixel %d code %d, want %.1f", i, proc[i], x);
  }
  prm.window = 0.005; /* neither automatic nor a window */
  XT_CHECK(xt_chain_set_params(c, &prm, NULL) != 0);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  xt_model_free(head);
}

/* A thorax-like frame (the built-in thorax, issue 26: spine and heart attenuate beyond 6 at
 * 80 kV, which the old fixed window 6 / level 3 clipped black: 17 % of the server's first frame),
 * every other parameter the default (noise, defects, lag, recursive filter, edge enhancement), at
 * fd20-256: under 1 % black and under 1 % white, and an image (> 500 grey levels); with the fixed
 * window the same frame is > 5 % black (the test sees the difference). */
XT_TEST(automatic_window_shows_a_thorax_neither_black_nor_white) {
  xt_model *th = NULL;
  XT_REQUIRE(xt_phantom_thorax_model(4.0, &th, NULL) == 0);
  xt_proj *p = cpu_proj_with(th);
  XT_REQUIRE(p);
  xt_chain_params prm = xt_chain_params_default();
  xt_chain *c = NULL;
  XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
  xt_geometry g = geom("fd20-256", 0, 0);
  const int n = 256 * 256;
  static uint16_t raw[256 * 256], proc[256 * 256];
  static int seen[4096];
  xt_chain_out out = {raw, proc, NULL, NULL, 0};
  for (int fixed = 0; fixed < 2; fixed++) {
    if (fixed) {
      prm.window = 6;
      prm.level = 3;
      XT_REQUIRE(xt_chain_set_params(c, &prm, NULL) == 0);
    }
    for (int f = 0; f < 3; f++) XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)(10 * fixed + f), &out, NULL) == 0);
    int black = 0, white = 0, levels = 0;
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < n; i++) {
      black += proc[i] == 0;
      white += proc[i] == 4095;
      levels += !seen[proc[i]]++;
    }
    double w, l;
    xt_chain_window_last(c, &w, &l);
    printf("# thorax, %s window %.3f level %.3f: %.2f %% black, %.2f %% white, %d levels\n", fixed ? "fixed" : "automatic",
           w, l, 100.0 * black / n, 100.0 * white / n, levels);
    if (!fixed)
      XT_CHECK_MSG(black < 0.01 * n && white < 0.01 * n && levels > 500, "%d black, %d white, %d levels", black, white,
                   levels);
    else
      XT_CHECK_MSG(black > 0.05 * n, "the fixed window's black: %d of %d", black, n);
  }
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  xt_model_free(th);
}

/* Replay: the same seed and poses give bit-identical raw and processed frames; another seed not. */
/* The CPU chain's default projection (the fast march, cpu_exact 0) against the float64 reference
 * (cpu_exact 1), noise-free (no quanta, no electronic noise; lag and processing on), label and dense
 * heads over several frames. Bound: the channels agree to 1e-5 rel L2 / 1e-4 of the max (measured
 * ~5e-8, tests/test_channels.c), which moves exp(-sum mu A) by at most that times the optical depth
 * (< 10 here): expected signals within 1e-5 relative per pixel; raw codes within 1 ADU and processed
 * within 2 (a float rounding tie of the ADC or the window moves a code by one, as on the GPU bar). */
XT_TEST(fast_chain_matches_the_exact_chain_noise_free) {
  const int dim[3] = {57, 64, 49};
  for (int type = 0; type < 2; type++) {
    xt_model *head = NULL;
    XT_REQUIRE(xt_phantom_head_model(dim, 3.0, type ? XT_VOXEL_F32 : XT_VOXEL_U8, &head, NULL) == 0);
    xt_proj *p = cpu_proj_with(head);
    XT_REQUIRE(p);
    xt_chain *c[2] = {NULL, NULL};
    for (int e = 0; e < 2; e++) {
      xt_chain_params prm = xt_chain_params_default();
      prm.quantum_noise = 0;
      prm.e_noise_adu = 0;
      prm.cpu_exact = e;
      XT_REQUIRE(xt_chain_create(&prm, p, &c[e], NULL) == 0);
    }
    static uint16_t raw[2][128 * 128], proc[2][128 * 128];
    static float ex[2][128 * 128];
    for (int f = 0; f < 4; f++) {
      xt_geometry g = geom("fd20-128", -70.0 + 47.0 * f, 9.0 * (f % 3 - 1));
      for (int e = 0; e < 2; e++) {
        xt_chain_out out = {raw[e], proc[e], ex[e], NULL, 0};
        XT_REQUIRE(xt_chain_frame(c[e], &g, (uint64_t)f, &out, NULL) == 0);
      }
      double rel = 0, dmin = 1e30, dmax = 0;
      int draw = 0, dproc = 0;
      for (int i = 0; i < 128 * 128; i++) {
        rel = fmax(rel, fabs((double)ex[0][i] - ex[1][i]) / ex[1][i]);
        dmin = fmin(dmin, ex[1][i]);
        dmax = fmax(dmax, ex[1][i]);
        draw = abs(raw[0][i] - raw[1][i]) > draw ? abs(raw[0][i] - raw[1][i]) : draw;
        dproc = abs(proc[0][i] - proc[1][i]) > dproc ? abs(proc[0][i] - proc[1][i]) : dproc;
      }
      XT_CHECK_MSG(rel <= 1e-5, "type %d frame %d: expected signals differ by %g relative", type, f, rel);
      XT_CHECK_MSG(draw <= 1 && dproc <= 2, "type %d frame %d: raw codes differ by %d, processed by %d", type, f, draw,
                   dproc);
      XT_CHECK(dmin > 0 && dmin < 0.2 * dmax); /* the head attenuates: not a flat field */
    }
    xt_chain_destroy(c[0]);
    xt_chain_destroy(c[1]);
    xt_proj_destroy(p);
    xt_model_free(head);
  }
}

/* On the CPU chain's default projection, the fast march (cpu_exact 0). */
XT_TEST(replay_is_bit_identical) {
  const int dim[3] = {48, 48, 48};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 4.0, XT_VOXEL_F32, &head, NULL) == 0);
  xt_proj *p = cpu_proj_with(head);
  XT_REQUIRE(p);
  static uint16_t a[3][128 * 128], b[3][128 * 128], pa[3][128 * 128], pb[128 * 128];
  for (int run = 0; run < 3; run++) {
    xt_chain_params prm = xt_chain_params_default();
    prm.seed = run == 2 ? 99 : 7;
    xt_chain *c = NULL;
    XT_REQUIRE(xt_chain_create(&prm, p, &c, NULL) == 0);
    for (int f = 0; f < 3; f++) {
      xt_geometry g = geom("fd20-128", 10.0 * f, 0);
      xt_chain_out out = {0};
      out.raw = run == 1 ? b[f] : a[f];
      out.proc = run == 1 ? pb : pa[f];
      if (run == 2) out.raw = b[f]; /* compared against run 0 below */
      XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)f, &out, NULL) == 0);
      if (run == 1) {
        XT_CHECK(memcmp(a[f], b[f], sizeof a[f]) == 0);
        XT_CHECK(memcmp(pa[f], pb, sizeof pb) == 0);
      }
    }
    if (run == 2) XT_CHECK(memcmp(a[2], b[2], sizeof a[2]) != 0);
    xt_chain_destroy(c);
  }
  xt_proj_destroy(p);
  xt_model_free(head);
}

XT_TEST(parameters_are_checked_by_name) {
  xt_chain_params p = xt_chain_params_default();
  xt_msg msg;
  XT_CHECK(xt_chain_param_set(&p, "kv", 200, &msg) == XT_ERANGE && strstr(msg.text, "chain.kv"));
  XT_CHECK(xt_chain_param_set(&p, "binning", 1.5, &msg) == XT_ERANGE && strstr(msg.text, "whole"));
  XT_CHECK(xt_chain_param_set(&p, "nonsense", 1, &msg) == XT_EINVAL && strstr(msg.text, "nonsense"));
  XT_CHECK(xt_chain_param_set(&p, "mas", 0.5, &msg) == 0 && p.mas == 0.5);
  p.lag_frac[0] = p.lag_frac[1] = p.lag_frac[2] = 0.4;
  XT_CHECK(xt_chain_params_validate(&p, &msg) == XT_ERANGE && strstr(msg.text, "lag"));
  /* every default obeys its own range */
  xt_chain_params d = xt_chain_params_default();
  XT_CHECK(xt_chain_params_validate(&d, &msg) == 0);
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    XT_CHECK(xt_chain_param_get(&d, in) == in->def);
  }
}

XT_TEST_MAIN(XT_ENTRY(philox_matches_random123_known_answers) XT_ENTRY(log_factorial_matches_lgamma)
                 XT_ENTRY(poisson_sampler_has_poisson_moments) XT_ENTRY(ptrs_full_test_matches_double_lgamma)
                 XT_ENTRY(ptrs_float_quick_step_matches_double)
                 XT_ENTRY(ptrs_full_test_on_float_set_up_matches_double_lgamma)
                 XT_ENTRY(float_normal_has_normal_moments)
                 XT_ENTRY(one_energy_transmission_is_exp_minus_line_integral)
                     XT_ENTRY(flat_field_variance_scales_as_one_over_dose)
                         XT_ENTRY(noise_power_spectrum_follows_mtf_squared)
                             XT_ENTRY(edge_phantom_mtf_matches_the_configured_one) XT_ENTRY(lag_decays_as_configured)
                                 XT_ENTRY(binning_sums_charge)
                                 XT_ENTRY(resampled_mode_reads_the_mean_of_its_native_pixels)
                                 XT_ENTRY(readout_defects_saturation_and_window)
                                     XT_ENTRY(panel_faults_act_in_the_readout_only)
                                     XT_ENTRY(fast_chain_matches_the_exact_chain_noise_free)
                                     XT_ENTRY(replay_is_bit_identical) XT_ENTRY(parameters_are_checked_by_name)
                                         XT_ENTRY(automatic_window_spans_the_frames_quantiles)
                                             XT_ENTRY(automatic_window_shows_a_thorax_neither_black_nor_white))
