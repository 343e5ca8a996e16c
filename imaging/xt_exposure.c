/* Exposure settings (issue 11): applying a protocol (a row of imaging/protocols.tsv, read by
 * xt_protocols.c; docs/protocols.md says which values are published and which assumed), the coupled
 * setting of tube current, pulse width and mAs, and the collimator/grid transmission of a frame's
 * render grid. */
#include <math.h>
#include <string.h>

#include "xt_exposure.h"

#define MA_MIN 0.1
#define MA_MAX 1500.0 /* angiography tubes deliver up to ~1000-1250 mA in short pulses */

double xt_exposure_ma(const xt_chain_params *p) { return p->mas * 1000.0 / p->pulse_ms; }

int xt_protocol_apply(xt_chain_params *p, int id, xt_msg *msg) {
  const xt_protocol *r = xt_protocol_at(id);
  if (!r) return xt_fail(msg, XT_ERANGE, "chain.protocol: %d is not a protocol", id);
  if (id == XT_PROTOCOL_CUSTOM) {
    p->protocol = 0;
    return 0;
  }
  xt_chain_params n = *p;
  n.kv = r->kv;
  n.pulse_ms = r->pulse_ms;
  n.mas = r->ma * r->pulse_ms / 1000.0;
  n.filter_al_mm = r->filter_al_mm;
  n.filter_cu_mm = r->filter_cu_mm;
  n.grid = 1;
  n.drc = 1;
  n.drc_target_ngy = r->detector_ngy;
  n.temporal_alpha = r->temporal_alpha;
  n.protocol = id;
  n.dsa = r->kind == XT_PROTOCOL_KIND_DSA;
  /* display: the subtracted image with zero difference mid-grey and iodine dark; else the defaults */
  n.window = n.dsa ? 1.0 : xt_chain_param_find("window")->def;
  n.level = n.dsa ? 0.0 : xt_chain_param_find("level")->def;
  n.edge_gain = n.dsa ? 0.0 : xt_chain_param_find("edge_gain")->def;
  int rc = xt_chain_params_validate(&n, msg);
  if (!rc) *p = n;
  return rc;
}

int xt_exposure_set(xt_chain_params *p, const char *name, double v, xt_msg *msg) {
  if (name && !strcmp(name, "ma")) {
    if (!isfinite(v) || v < MA_MIN || v > MA_MAX)
      return xt_fail(msg, XT_ERANGE, "chain.ma: %g outside [%g, %g]", v, MA_MIN, MA_MAX);
    return xt_chain_param_set(p, "mas", v * p->pulse_ms / 1000.0, msg);
  }
  if (name && !strcmp(name, "protocol")) {
    if (!isfinite(v) || v != floor(v)) return xt_fail(msg, XT_ERANGE, "chain.protocol: %g is not a protocol", v);
    return xt_protocol_apply(p, (int)v, msg);
  }
  if (name && !strcmp(name, "pulse_ms")) { /* the tube current stays: mAs follows the pulse */
    const double ma = xt_exposure_ma(p);
    xt_chain_params n = *p;
    int rc = xt_chain_param_set(&n, "pulse_ms", v, msg);
    if (rc || (rc = xt_chain_param_set(&n, "mas", ma * n.pulse_ms / 1000.0, msg))) return rc;
    *p = n;
    return 0;
  }
  return xt_chain_param_set(p, name, v, msg);
}

static double clamp01(double x) { return x < 0 ? 0 : (x > 1 ? 1 : x); }

void xt_collim_make(const xt_chain_params *p, int cols, int rows, xt_collim *k) {
  k->u0 = (float)(p->shutter[0] * cols);
  k->u1 = (float)((1.0 - p->shutter[1]) * cols);
  k->v0 = (float)(p->shutter[2] * rows);
  k->v1 = (float)((1.0 - p->shutter[3]) * rows);
  k->wl = (float)(p->wedge[0] * cols);
  k->wr = (float)((1.0 - p->wedge[1]) * cols);
  k->wedge_t = (float)p->wedge_t;
  k->grid_tp = p->grid ? (float)p->grid_tp : 1.f;
}

double xt_collim_open_fraction(const xt_chain_params *p) {
  const double u0 = p->shutter[0], u1 = 1.0 - p->shutter[1], v0 = p->shutter[2], v1 = 1.0 - p->shutter[3];
  if (!(u1 > u0) || !(v1 > v0)) return 0;
  /* along u: the open interval [u0, u1] split into wedged and free parts */
  const double wl = clamp01(p->wedge[0]), wr = 1.0 - clamp01(p->wedge[1]);
  double wedged = 0;
  wedged += fmax(0.0, fmin(u1, wl) - u0);                  /* under the left wedge */
  wedged += fmax(0.0, u1 - fmax(u0, fmax(wr, wl)));        /* under the right wedge, not counted twice */
  const double open_u = (u1 - u0) - wedged + wedged * p->wedge_t;
  return open_u * (v1 - v0);
}
