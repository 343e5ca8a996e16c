/* The contrast agent's kinetics (issue 26, docs/contrast.md): injections into regions, and the
 * iodine concentration each region holds at a time, by a gamma-variate bolus model.
 *
 * A region is a label of a label volume (xt_material_table.contrast). An injection puts agent of
 * iodine concentration C_a (mg I/mL) into its region at a constant rate r (mL/s) for T = V / r
 * seconds from t0 (its time of acceptance plus its delay). The region's blood carries it past with
 * flow F (mL/s); its transit is a gamma variate of shape alpha and scale beta after an arrival time
 * t_a, normalised to unit area:
 *
 *   h(t) = t^alpha e^(-t/beta) / (beta^(alpha+1) Gamma(alpha+1)),  t > 0  (0 before)
 *
 * and the concentration is the injected iodine flux convolved with it, over the flow:
 *
 *   c(t) = (C_a r / F) [H(t - t0 - t_a) - H(t - t0 - t_a - T)],  H(t) = P(alpha + 1, t / beta)
 *
 * (H the transit's distribution function, P the regularised lower incomplete gamma function), so
 * that the iodine that passes, F times the integral of c, is the injected C_a r T (Stewart-Hamilton),
 * and a short bolus of volume V gives c = (C_a V / F) h(t - t0 - t_a). Injections add; a region's
 * concentration is capped at the agent's own (more agent than blood flow cannot be diluted). Pure
 * functions of time: the caller's clock (the server's device clock, virtual or real). */
#ifndef XT_CONTRAST_H
#define XT_CONTRAST_H

#include <stdint.h>

#include "xt_err.h"

/* The bolus model's defaults [U] (docs/contrast.md). */
#define XT_CONTRAST_AGENT_MG_ML 350.0 /* iohexol 350 */
#define XT_CONTRAST_ALPHA 3.0
#define XT_CONTRAST_BETA_S 0.35
#define XT_CONTRAST_ARRIVAL_S 0.5
#define XT_CONTRAST_FLOW_ML_S 83.0 /* a cardiac output of 5 L/min */

typedef struct xt_bolus {
  double flow_ml_s; /* F */
  double arrival_s; /* t_a */
  double alpha, beta_s;
} xt_bolus;

typedef struct xt_injection {
  int region;
  double rate_ml_s, volume_ml, agent_mg_ml;
  int64_t t0_ns;   /* the injector starts (acceptance + delay), on the caller's clock */
  int64_t stop_ns; /* stopped early at this time (INT64_MAX: runs its volume) */
} xt_injection;

/* The gamma variate's density h (1/s) and distribution H at t seconds (0 for t <= 0). */
double xt_gv_pdf(double t, double alpha, double beta);
double xt_gv_cdf(double t, double alpha, double beta);
/* The regularised lower incomplete gamma function P(a, x), a > 0, x >= 0. */
double xt_gamma_p(double a, double x);

/* The injection's duration in s as injected (stopped early: up to the stop). */
double xt_injection_duration_s(const xt_injection *in);
/* mg I/mL the injection gives its region (bolus b) at time t_ns, uncapped. */
double xt_injection_conc(const xt_injection *in, const xt_bolus *b, int64_t t_ns);
/* mg I/mL region `region` holds at t_ns: the sum of the injections into it among inj[0..n), capped
 * at the strongest agent among them. The server's latch and `xtwin replay` both take it from here,
 * so a replayed frame holds the same double. */
double xt_region_conc(const xt_injection *inj, int n, int region, const xt_bolus *b, int64_t t_ns);
/* The bolus model of a region [U] (docs/contrast.md): the thorax's coronaries carry about 5 % of the
 * cardiac output (4 mL/s), every other region the whole of it (83 mL/s). */
xt_bolus xt_bolus_default(const char *region);
/* Checks a bolus model's parameters: one line naming the bad one (XT_EINVAL). */
int xt_bolus_check(const xt_bolus *b, const char *region, xt_msg *msg);

#endif /* XT_CONTRAST_H */
