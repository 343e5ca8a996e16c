/* Exposure settings (issue 11): the protocol presets, the coupled setting of tube current, pulse
 * width and mAs, and the collimator/grid transmission of a frame's render grid. The preset values
 * are typical of interventional systems, not Philips' own (which are not published): notes §1.5 and
 * §3.12 give the ranges they are taken from ([U] there); docs/imaging.md "Exposure" lists them. */
#include <math.h>
#include <string.h>

#include "xt_exposure.h"

#define MA_MIN 0.1
#define MA_MAX 1500.0 /* angiography tubes deliver up to ~1000-1250 mA in short pulses */

typedef struct preset {
  const char *name;
  double fps, kv, ma, pulse_ms, al_mm, cu_mm, target_ngy, temporal_alpha;
  int grid, drc;
} preset;

/* fps, kV, mA, ms, filter Al + Cu, requested detector dose per frame, recursive filter weight */
static const preset presets[XT_PROTOCOL_COUNT] = {
    {"custom", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"fluoro_low", 7.5, 70, 10, 5, 1.0, 0.9, 20, 0.3, 1, 1},
    {"fluoro_normal", 15, 70, 15, 5, 1.0, 0.4, 40, 0.4, 1, 1},
    {"fluoro_high", 15, 75, 30, 6, 1.0, 0.2, 80, 0.5, 1, 1},
    {"cine_15", 15, 75, 100, 6, 1.0, 0.1, 150, 1.0, 1, 1},
    {"cine_30", 30, 75, 100, 6, 1.0, 0.1, 150, 1.0, 1, 1},
    /* DSA: low kV near iodine's K-edge, no copper, long pulses at a few frames per second */
    {"dsa", 3, 70, 200, 50, 1.0, 0.0, 2000, 1.0, 1, 1},
};

const char *xt_protocol_name(int id) { return id >= 0 && id < XT_PROTOCOL_COUNT ? presets[id].name : NULL; }

int xt_protocol_find(const char *name) {
  for (int i = 0; name && i < XT_PROTOCOL_COUNT; i++)
    if (strcmp(presets[i].name, name) == 0) return i;
  return -1;
}

double xt_protocol_fps(int id) { return id > 0 && id < XT_PROTOCOL_COUNT ? presets[id].fps : 0; }

double xt_exposure_ma(const xt_chain_params *p) { return p->mas * 1000.0 / p->pulse_ms; }

int xt_protocol_apply(xt_chain_params *p, int id, xt_msg *msg) {
  if (id < 0 || id >= XT_PROTOCOL_COUNT) return xt_fail(msg, XT_ERANGE, "chain.protocol: %d is not a protocol", id);
  if (id == XT_PROTOCOL_CUSTOM) {
    p->protocol = 0;
    return 0;
  }
  const preset *r = &presets[id];
  xt_chain_params n = *p;
  n.kv = r->kv;
  n.pulse_ms = r->pulse_ms;
  n.mas = r->ma * r->pulse_ms / 1000.0;
  n.filter_al_mm = r->al_mm;
  n.filter_cu_mm = r->cu_mm;
  n.grid = r->grid;
  n.drc = r->drc;
  n.drc_target_ngy = r->target_ngy;
  n.temporal_alpha = r->temporal_alpha;
  n.protocol = id;
  n.dsa = id == XT_PROTOCOL_DSA;
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
