/* Dose-rate control: the curve, the measurement and the loop of xt_drc.h. */
#include <math.h>

#include "xt_drc.h"

#define KV_EXP 3.0  /* the loop's model of the signal's kV dependence at fixed mAs */
#define GAIN 0.6    /* fraction of the log error corrected per frame */
#define SETTLED 0.1 /* relative error counted as settled */

static const double node_kv[XT_DRC_NODES] = {60, 70, 70, 80, 80, 90, 90, 0 /* drc_kv_max */};
static const double node_ma[XT_DRC_NODES] = {10, 10, 10, 10, 100, 100, 400, 400};
static const double node_ms[XT_DRC_NODES] = {3, 3, 8, 8, 8, 8, 8, 8};

static void curve(double s, double kv_max, double *kv, double *ma, double *ms) {
  if (s < 0) s = 0;
  if (s > XT_DRC_NODES - 1) s = XT_DRC_NODES - 1;
  int i = (int)s;
  if (i >= XT_DRC_NODES - 1) i = XT_DRC_NODES - 2;
  const double f = s - i;
  const double k0 = i == XT_DRC_NODES - 1 ? kv_max : fmin(node_kv[i], kv_max);
  const double k1 = i + 1 == XT_DRC_NODES - 1 ? kv_max : fmin(node_kv[i + 1], kv_max);
  *kv = k0 + f * (k1 - k0);
  *ma = node_ma[i] + f * (node_ma[i + 1] - node_ma[i]);
  *ms = node_ms[i] + f * (node_ms[i + 1] - node_ms[i]);
}

/* ln of the loop's output model mAs x kV^KV_EXP at s: increasing in s. */
static double log_output(double s, double kv_max) {
  double kv, ma, ms;
  curve(s, kv_max, &kv, &ma, &ms);
  return log(ma * ms * 1e-3) + KV_EXP * log(kv);
}

/* The s in [0, end] with log_output(s) = y (clamped to the ends). */
static double solve(double y, double kv_max) {
  double lo = 0, hi = XT_DRC_NODES - 1;
  if (y <= log_output(lo, kv_max)) return lo;
  if (y >= log_output(hi, kv_max)) return hi;
  for (int it = 0; it < 60; it++) {
    const double mid = 0.5 * (lo + hi);
    if (log_output(mid, kv_max) < y) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

void xt_drc_reset(xt_drc *d, const xt_chain_params *p) {
  d->s = solve(log(p->mas) + KV_EXP * log(p->kv), p->drc_kv_max);
  d->measured_ngy = 0;
  d->target_ngy = p->drc_target_ngy;
  d->flags = 0;
  d->frames = 0;
}

void xt_drc_apply(const xt_drc *d, xt_chain_params *p) {
  double kv, ma, ms;
  curve(d->s, p->drc_kv_max, &kv, &ma, &ms);
  p->kv = kv;
  p->pulse_ms = ms;
  p->mas = ma * ms * 1e-3;
}

double xt_drc_measure(const uint16_t *raw, int ocols, int orows, const xt_chain_params *p, const xt_chain_info *ci,
                      double pixel_mm2) {
  const int c0 = ocols / 3, c1 = ocols - ocols / 3, r0 = orows / 3, r1 = orows - orows / 3;
  double sum = 0;
  long n = 0;
  for (int r = r0; r < r1; r++)
    for (int c = c0; c < c1; c++, n++) sum += (double)raw[(size_t)r * ocols + c] - p->offset_adu;
  if (n == 0 || !(ci->flat_kev_per_mm2_ugy > 0)) return 0;
  /* keV per render pixel: an output pixel sums binning^2 of them */
  const double kev = sum / n / (p->adu_per_kev * p->binning * p->binning);
  const double tp = p->grid ? p->grid_tp : 1.0;
  const double ngy = kev / (pixel_mm2 * ci->flat_kev_per_mm2_ugy * tp) * 1e3;
  return ngy > 0 ? ngy : 0;
}

void xt_drc_update(xt_drc *d, const xt_chain_params *p, double measured_ngy) {
  const double end = XT_DRC_NODES - 1, lim = log(p->drc_max_step);
  d->target_ngy = p->drc_target_ngy;
  d->measured_ngy = measured_ngy;
  d->frames++;
  /* no signal: as far up as the rate limit allows */
  double e = measured_ngy > 0 ? log(p->drc_target_ngy / measured_ngy) : INFINITY;
  double step = GAIN * e;
  uint32_t f = XT_DRC_ON;
  if (fabs(e) <= log(1.0 + SETTLED)) f |= XT_DRC_SETTLED;
  if (step > lim || step < -lim) {
    step = step > 0 ? lim : -lim;
    f |= XT_DRC_RATE_LIMITED;
  }
  /* the step is taken from the exposure the frame had (p), which the loop set itself */
  const double s = solve(log(p->mas) + KV_EXP * log(p->kv) + step, p->drc_kv_max);
  if (s >= end && e > 0) f |= XT_DRC_CLAMP_HIGH;
  if (s <= 0 && e < 0) f |= XT_DRC_CLAMP_LOW;
  d->s = s;
  d->flags = f;
}
