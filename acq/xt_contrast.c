/* The contrast agent's kinetics (xt_contrast.h): the gamma-variate transit and the concentration an
 * injection of constant rate gives its region. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "xt_contrast.h"

/* P(a, x) by its power series, x < a + 1: x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a+1)...(a+n)). */
static double gamma_p_series(double a, double x) {
  double term = 1.0, sum = 1.0;
  for (int n = 1; n < 1000; n++) {
    term *= x / (a + n);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum * exp(a * log(x) - x - lgamma(a + 1.0));
}

/* Q(a, x) = 1 - P by its continued fraction (modified Lentz), x >= a + 1. */
static double gamma_q_cf(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 1000; i++) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (fabs(del - 1.0) < 1e-16) break;
  }
  return h * exp(a * log(x) - x - lgamma(a));
}

double xt_gamma_p(double a, double x) {
  if (!(x > 0.0)) return 0.0;
  if (x < a + 1.0) return gamma_p_series(a, x);
  return 1.0 - gamma_q_cf(a, x);
}

double xt_gv_pdf(double t, double alpha, double beta) {
  if (!(t > 0.0)) return 0.0;
  return exp(alpha * log(t / beta) - t / beta - lgamma(alpha + 1.0)) / beta;
}

double xt_gv_cdf(double t, double alpha, double beta) { return t > 0.0 ? xt_gamma_p(alpha + 1.0, t / beta) : 0.0; }

double xt_injection_duration_s(const xt_injection *in) {
  if (!(in->rate_ml_s > 0.0)) return 0.0;
  double T = in->volume_ml / in->rate_ml_s;
  if (in->stop_ns != INT64_MAX) {
    const double ran = (double)(in->stop_ns - in->t0_ns) * 1e-9;
    if (ran < T) T = ran > 0.0 ? ran : 0.0;
  }
  return T;
}

double xt_injection_conc(const xt_injection *in, const xt_bolus *b, int64_t t_ns) {
  const double T = xt_injection_duration_s(in);
  if (!(T > 0.0)) return 0.0;
  /* the difference of two exposure-clock times first, in integers: a run's clock is large */
  const double t = (double)(t_ns - in->t0_ns) * 1e-9 - b->arrival_s;
  if (!(t > 0.0)) return 0.0;
  const double k = in->agent_mg_ml * in->rate_ml_s / b->flow_ml_s;
  /* H(t) - H(t - T) as Q(t - T) - Q(t) once both are in the tail: no cancellation near 1 */
  const double a = b->alpha + 1.0, x1 = t / b->beta_s, x0 = (t - T) / b->beta_s;
  if (x0 > 0.0 && x0 >= a + 1.0) return k * (gamma_q_cf(a, x0) - gamma_q_cf(a, x1));
  return k * (xt_gamma_p(a, x1) - xt_gamma_p(a, x0 > 0.0 ? x0 : 0.0));
}

xt_bolus xt_bolus_default(const char *region) {
  xt_bolus b = {XT_CONTRAST_FLOW_ML_S, XT_CONTRAST_ARRIVAL_S, XT_CONTRAST_ALPHA, XT_CONTRAST_BETA_S};
  if (region && !strcmp(region, "coronary")) b.flow_ml_s = 4.0;
  return b;
}

double xt_region_conc(const xt_injection *inj, int n, int region, const xt_bolus *b, int64_t t_ns) {
  double sum = 0.0, cap = 0.0;
  for (int k = 0; k < n; k++) {
    if (inj[k].region != region) continue;
    sum += xt_injection_conc(&inj[k], b, t_ns);
    if (inj[k].agent_mg_ml > cap) cap = inj[k].agent_mg_ml;
  }
  return sum < cap ? sum : cap;
}

int xt_bolus_check(const xt_bolus *b, const char *region, xt_msg *msg) {
  if (!(b->flow_ml_s > 0.0 && b->flow_ml_s <= 1e4))
    return xt_fail(msg, XT_EINVAL, "contrast: region %s: flow_ml_s %g outside (0, 10000]", region, b->flow_ml_s);
  if (!(b->arrival_s >= 0.0 && b->arrival_s <= 600.0))
    return xt_fail(msg, XT_EINVAL, "contrast: region %s: arrival_s %g outside [0, 600]", region, b->arrival_s);
  if (!(b->alpha >= 0.0 && b->alpha <= 50.0))
    return xt_fail(msg, XT_EINVAL, "contrast: region %s: alpha %g outside [0, 50]", region, b->alpha);
  if (!(b->beta_s >= 0.01 && b->beta_s <= 60.0))
    return xt_fail(msg, XT_EINVAL, "contrast: region %s: beta_s %g outside [0.01, 60]", region, b->beta_s);
  return 0;
}
