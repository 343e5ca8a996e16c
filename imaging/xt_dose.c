/* Dose bookkeeping per frame and per run: the formulas of xt_dose.h. */
#include <math.h>

#include "xt_dose.h"
#include "xt_exposure.h"

int xt_dose_frame(const xt_chain_params *p, double kerma_ugy_per_mas, const xt_geometry *g, xt_dose *out, xt_msg *msg) {
  const double d = g->pose.sod_mm - p->irp_mm;
  if (!(d > 10.0)) return xt_fail(msg, XT_ERANGE, "dose: the reference point (%g mm from the focal spot) lies behind it", d);
  if (!(kerma_ugy_per_mas >= 0) || !(p->mas >= 0)) return xt_fail(msg, XT_EINVAL, "dose: no spectrum kerma");
  const double w = g->mode.cols * g->mode.pitch_u_mm, h = g->mode.rows * g->mode.pitch_v_mm; /* mm at the detector */
  const double scale = d / g->pose.sid_mm;
  out->d_irp_mm = d;
  out->field_cm2 = xt_collim_open_fraction(p) * w * h * scale * scale * 0.01;
  out->k_irp_mgy = p->mas * kerma_ugy_per_mas * (1000.0 / d) * (1000.0 / d) * 1e-3;
  out->kap_gycm2 = out->k_irp_mgy * 1e-3 * out->field_cm2;
  return 0;
}

void xt_dose_add(xt_dose_totals *t, const xt_dose *d) {
  t->frames++;
  t->k_irp_mgy += d->k_irp_mgy;
  t->kap_gycm2 += d->kap_gycm2;
}
