/* Dose-rate control's arithmetic (xt_drc.h states the loop), written once as XT_HOSTDEV code for
 * the host loop (xt_drc.c: the server, the CPU backend) and the device-resident loop step of the
 * CUDA pipeline (chain_cuda.cu's k_drc_step), so both move along the same curve by the same steps:
 * the curve, its inverse, the conversion of the measuring field's code sum to a detector dose, one
 * step of the loop and the exposure of a curve position (kV in the generator's 1 kV steps).
 *
 * The field sum is an exact integer (a uint64 of 14-bit codes), so the measurement is the same
 * double on both sides; the step's logs may differ in the last bit between the host's libm and the
 * device's, which moves s by ~1e-15 (tests/test_dose_cuda.c bounds it). */
#ifndef XT_DRC_MATH_H
#define XT_DRC_MATH_H

#include <math.h>
#include <stdint.h>

#include "xt_vec.h"

#define XT_DRC_NODES 8      /* the default curve's nodes */
#define XT_DRC_MAX_NODES 16 /* a dose control curve's most nodes (imaging/dose_curves.tsv) */
#define XT_DRC_KV_EXP 3.0  /* the loop's model of the signal's kV dependence at fixed mAs */
#define XT_DRC_GAIN 0.6    /* fraction of the log error corrected per frame */
#define XT_DRC_SETTLE_BAND 0.1 /* relative error counted as settled */

enum {
  XT_DRC_ON = 1u,           /* the loop set this frame's exposure */
  XT_DRC_SETTLED = 2u,      /* the last measurement was within 10 % of the target */
  XT_DRC_CLAMP_HIGH = 4u,   /* at the curve's end (kV at drc_kv_max) and asking for more */
  XT_DRC_CLAMP_LOW = 8u,    /* at the curve's start and asking for less */
  XT_DRC_RATE_LIMITED = 16u /* the last step was cut to drc_max_step */
};

/* The loop's state (in every frame header: api/xt_stream.h drc_*). */
typedef struct xt_drc {
  double s;            /* curve position of the next frame */
  double measured_ngy; /* the last measurement: detector air kerma per frame in the measuring field */
  double target_ngy;
  uint32_t flags;
  uint64_t frames;     /* frames measured since the reset */
} xt_drc;

/* A dose control curve: n nodes of (kV, mA, ms), each segment changing one factor (imaging/
 * dose_curves.tsv; the protocol names it). A node's kV <= 0 stands for the chain's drc_kv_max. Plain
 * arrays, so that the curve travels by value to the device step. */
typedef struct xt_drc_nodes {
  int n;
  double kv[XT_DRC_MAX_NODES], ma[XT_DRC_MAX_NODES], ms[XT_DRC_MAX_NODES];
} xt_drc_nodes;

/* What the step needs of the parameters (constant within a run): the target, the curve's top kV,
 * the rate limit, and the protocol's curve. */
typedef struct xt_drc_law {
  double target_ngy, kv_max, max_step;
  xt_drc_nodes curve;
} xt_drc_law;

/* What the measurement needs: the panel's conversion and the pixel (flat_per_ugy comes with the
 * frame's spectrum: xt_chain_info.flat_kev_per_mm2_ugy). */
typedef struct xt_drc_meter {
  double offset_adu;
  double adu_per_kev; /* the readout's gain of a render pixel's charge: adu_per_kev / xt_mode_native_mean */
  double bin2;        /* binning^2 render pixels per output pixel */
  double pixel_mm2;   /* a render pixel's area */
  double tp;                            /* the grid's primary transmission (1 out) */
} xt_drc_meter;

/* The measuring field: the middle third of the output grid each way. */
static XT_INLINE XT_HOSTDEV void xt_drc_field_box(int ocols, int orows, int *c0, int *c1, int *r0, int *r1) {
  *c0 = ocols / 3;
  *c1 = ocols - ocols / 3;
  *r0 = orows / 3;
  *r1 = orows - orows / 3;
}

/* Multiplication without FMA contraction on the device, so both sides round alike. */
static XT_INLINE XT_HOSTDEV double xt_drc_mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/* Detector air kerma (nGy, in front of the grid) of a field whose n codes sum to `sum`. */
static XT_INLINE XT_HOSTDEV double xt_drc_ngy(uint64_t sum, uint64_t n, const xt_drc_meter *m, double flat_per_ugy) {
  if (n == 0 || !(flat_per_ugy > 0)) return 0;
  const double dn = (double)n;
  const double mean = ((double)sum - xt_drc_mul(dn, m->offset_adu)) / dn;
  const double kev = mean / xt_drc_mul(m->adu_per_kev, m->bin2);
  const double ngy = kev / xt_drc_mul(xt_drc_mul(m->pixel_mm2, flat_per_ugy), m->tp) * 1e3;
  return ngy > 0 ? ngy : 0;
}

/* The curve's nodes (imaging/dose_curves.tsv, a protocol's curve; xt_drc.h's table is "default").
 * Node i's kV, mA and ms; a kV <= 0 stands for kv_max, and every kV is capped at it. */
static XT_INLINE XT_HOSTDEV void xt_drc_node_on(const xt_drc_nodes *c, int i, double kv_max, double *kv, double *ma,
                                                double *ms) {
  const double k = c->kv[i];
  *kv = k <= 0 ? kv_max : fmin(k, kv_max);
  *ma = c->ma[i];
  *ms = c->ms[i];
}

/* The curve at s: kV (continuous), mA, ms, linear between nodes; kV capped at kv_max. */
static XT_INLINE XT_HOSTDEV void xt_drc_curve_on(const xt_drc_nodes *c, double s, double kv_max, double *kv, double *ma,
                                                 double *ms) {
  const int n = c->n;
  if (s < 0) s = 0;
  if (s > n - 1) s = n - 1;
  int i = (int)s;
  if (i >= n - 1) i = n - 2;
  const double f = s - i;
  double k0, a0, m0, k1, a1, m1;
  xt_drc_node_on(c, i, kv_max, &k0, &a0, &m0);
  xt_drc_node_on(c, i + 1, kv_max, &k1, &a1, &m1);
  *kv = k0 + f * (k1 - k0);
  *ma = a0 + f * (a1 - a0);
  *ms = m0 + f * (m1 - m0);
}

/* ln of the loop's output model mAs x kV^KV_EXP at s: increasing in s. */
static XT_INLINE XT_HOSTDEV double xt_drc_log_output_on(const xt_drc_nodes *c, double s, double kv_max) {
  double kv, ma, ms;
  xt_drc_curve_on(c, s, kv_max, &kv, &ma, &ms);
  return log(ma * ms * 1e-3) + XT_DRC_KV_EXP * log(kv);
}

/* The s in [0, end] with log_output(s) = y (clamped to the ends), in closed form: the curve changes
 * one factor per segment (dose_curves.tsv is checked for it), so the segment is found by comparing the
 * output mAs kV^3 = e^y with the nodes' (no logs), and s inside it solves for that one factor - a
 * few transcendentals instead of a bisection's hundred, which matters on the device, where one
 * thread runs the step between two frames. */
static XT_INLINE XT_HOSTDEV double xt_drc_solve_on(const xt_drc_nodes *c, double y, double kv_max) {
  const double Y = exp(y);
  double k0, a0, m0, k1, a1, m1;
  xt_drc_node_on(c, 0, kv_max, &k0, &a0, &m0);
  if (!(Y > a0 * m0 * 1e-3 * k0 * k0 * k0)) return 0;
  for (int i = 0; i < c->n - 1; i++) {
    xt_drc_node_on(c, i + 1, kv_max, &k1, &a1, &m1);
    if (Y < a1 * m1 * 1e-3 * k1 * k1 * k1) {
      double f;
      if (k1 != k0) f = (cbrt(Y / (a0 * m0 * 1e-3)) - k0) / (k1 - k0);
      else if (a1 != a0) f = (Y / (k0 * k0 * k0 * m0 * 1e-3) - a0) / (a1 - a0);
      else f = (Y / (k0 * k0 * k0 * a0 * 1e-3) - m0) / (m1 - m0);
      return i + (f < 0 ? 0 : (f > 1 ? 1 : f));
    }
    k0 = k1;
    a0 = a1;
    m0 = m1;
  }
  return c->n - 1;
}

/* The exposure of curve position s: the generator sets kV in 1 kV steps, so kV is the curve's
 * rounded to a whole kV and the mAs takes up the remainder, mAs = mA ms (kV / kV_set)^KV_EXP (at
 * most ±2.5 % at 60 kV): the loop's output model stays continuous in s. */
static XT_INLINE XT_HOSTDEV void xt_drc_exposure_on(const xt_drc_nodes *c, double s, double kv_max, double *kv,
                                                    double *pulse_ms, double *mas) {
  double k, ma, ms;
  xt_drc_curve_on(c, s, kv_max, &k, &ma, &ms);
  double kq = floor(k + 0.5);
  if (kq > kv_max) kq = floor(kv_max); /* kv_max itself may be fractional */
  const double r = k / kq;
  *kv = kq;
  *pulse_ms = ms;
  *mas = ma * ms * 1e-3 * (r * r * r);
}

/* One step from a measurement of a frame exposed at (kv, mas): the next s and the flags. */
static XT_INLINE XT_HOSTDEV void xt_drc_step(xt_drc *d, const xt_drc_law *law, double kv, double mas, double measured_ngy) {
  const double end = law->curve.n - 1, lim = log(law->max_step);
  d->target_ngy = law->target_ngy;
  d->measured_ngy = measured_ngy;
  d->frames++;
  /* no signal: as far up as the rate limit allows */
  const double e = measured_ngy > 0 ? log(law->target_ngy / measured_ngy) : INFINITY;
  double step = XT_DRC_GAIN * e;
  uint32_t f = XT_DRC_ON;
  if (fabs(e) <= log(1.0 + XT_DRC_SETTLE_BAND)) f |= XT_DRC_SETTLED;
  if (step > lim || step < -lim) {
    step = step > 0 ? lim : -lim;
    f |= XT_DRC_RATE_LIMITED;
  }
  /* the step is taken from the exposure the frame had, which the loop set itself */
  const double s = xt_drc_solve_on(&law->curve, log(mas) + XT_DRC_KV_EXP * log(kv) + step, law->kv_max);
  if (s >= end && e > 0) f |= XT_DRC_CLAMP_HIGH;
  if (s <= 0 && e < 0) f |= XT_DRC_CLAMP_LOW;
  d->s = s;
  d->flags = f;
}

#ifndef __CUDACC__
/* The default curve (dose_curves.tsv "default", xt_drc.h's table) for host code that names no
 * protocol: the kv_max-only forms below are the *_on forms on it. */
const xt_drc_nodes *xt_drc_nodes_default(void);
static inline void xt_drc_curve(double s, double kv_max, double *kv, double *ma, double *ms) {
  xt_drc_curve_on(xt_drc_nodes_default(), s, kv_max, kv, ma, ms);
}
static inline double xt_drc_log_output(double s, double kv_max) {
  return xt_drc_log_output_on(xt_drc_nodes_default(), s, kv_max);
}
static inline double xt_drc_solve(double y, double kv_max) { return xt_drc_solve_on(xt_drc_nodes_default(), y, kv_max); }
static inline void xt_drc_exposure(double s, double kv_max, double *kv, double *pulse_ms, double *mas) {
  xt_drc_exposure_on(xt_drc_nodes_default(), s, kv_max, kv, pulse_ms, mas);
}
#endif

#endif /* XT_DRC_MATH_H */
