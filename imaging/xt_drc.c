/* Dose-rate control on the host: xt_drc.h's loop over the shared arithmetic of xt_drc_math.h (the
 * server's loop, the CPU backend's, and the host twin of the device-resident step), along the dose
 * control curve of the parameters' protocol (imaging/dose_curves.tsv). */
#include <math.h>

#include "xt_drc.h"
#include "xt_exposure.h"

xt_drc_law xt_drc_law_of(const xt_chain_params *p) {
  xt_drc_law l = {p->drc_target_ngy, p->drc_kv_max, p->drc_max_step, *xt_protocol_curve(p->protocol)};
  return l;
}

xt_drc_meter xt_drc_meter_of(const xt_chain_params *p, const xt_detector_mode *mode) {
  /* the readout's gain of a render pixel's charge (xt_chain_frame_const_make) */
  xt_drc_meter m = {p->offset_adu, p->adu_per_kev / xt_mode_native_mean(mode), (double)(p->binning * p->binning),
                    mode->pitch_u_mm * mode->pitch_v_mm, p->grid ? p->grid_tp : 1.0};
  return m;
}

void xt_drc_reset(xt_drc *d, const xt_chain_params *p) {
  d->s = xt_drc_solve_on(xt_protocol_curve(p->protocol), log(p->mas) + XT_DRC_KV_EXP * log(p->kv), p->drc_kv_max);
  d->measured_ngy = 0;
  d->target_ngy = p->drc_target_ngy;
  d->flags = 0;
  d->frames = 0;
}

void xt_drc_apply(const xt_drc *d, xt_chain_params *p) {
  xt_drc_exposure_on(xt_protocol_curve(p->protocol), d->s, p->drc_kv_max, &p->kv, &p->pulse_ms, &p->mas);
}

void xt_drc_field_sum(const uint16_t *raw, int ocols, int orows, uint64_t *sum, uint64_t *n) {
  int c0, c1, r0, r1;
  xt_drc_field_box(ocols, orows, &c0, &c1, &r0, &r1);
  uint64_t s = 0;
  for (int r = r0; r < r1; r++)
    for (int c = c0; c < c1; c++) s += raw[(size_t)r * ocols + c];
  *sum = s;
  *n = (uint64_t)(c1 - c0) * (uint64_t)(r1 - r0);
}

double xt_drc_measure_sum(uint64_t sum, uint64_t n, const xt_chain_params *p, const xt_chain_info *ci,
                          const xt_detector_mode *mode) {
  const xt_drc_meter m = xt_drc_meter_of(p, mode);
  return xt_drc_ngy(sum, n, &m, ci->flat_kev_per_mm2_ugy);
}

double xt_drc_measure(const uint16_t *raw, int ocols, int orows, const xt_chain_params *p, const xt_chain_info *ci,
                      const xt_detector_mode *mode) {
  uint64_t sum, n;
  xt_drc_field_sum(raw, ocols, orows, &sum, &n);
  return xt_drc_measure_sum(sum, n, p, ci, mode);
}

void xt_drc_update(xt_drc *d, const xt_chain_params *p, double measured_ngy) {
  const xt_drc_law law = xt_drc_law_of(p);
  xt_drc_step(d, &law, p->kv, p->mas, measured_ngy);
}
