/* Helpers the imaging-chain tests share (test_chain, test_chain_cuda, test_dose, test_dose_cuda):
 * a projector holding some models, a geometry at a pose, and a quiet panel. Header-only, static. */
#ifndef XT_TEST_CHAIN_H
#define XT_TEST_CHAIN_H

#include "xt_chain.h"
#include "xt_geom.h"
#include "xt_proj.h"

/* A projector of backend b (threads 0 = all cores) holding the n models ms (n may be 0: a flat
 * field); NULL when it cannot be made. */
static inline xt_proj *xt_tc_proj(xt_backend b, int threads, xt_model *const *ms, int n) {
  xt_proj *p = NULL;
  xt_proj_options po = {b, threads, 0};
  if (xt_proj_create(&po, &p, NULL)) return NULL;
  for (int i = 0; i < n; i++)
    if (xt_proj_add_model(p, ms[i], NULL)) {
      xt_proj_destroy(p);
      return NULL;
    }
  return p;
}

/* The geometry of detector mode *md at the default pose turned to these angles (degrees). */
static inline xt_geometry xt_tc_geom_of(const xt_detector_mode *md, double primary, double secondary, double detrot) {
  xt_geometry g;
  xt_pose pose = xt_pose_default(md);
  pose.primary_deg = primary;
  pose.secondary_deg = secondary;
  pose.detector_rot_deg = detrot;
  xt_geom_compute(&pose, md, &g, NULL);
  return g;
}

/* The same for the named mode. */
static inline xt_geometry xt_tc_geom(const char *mode, double primary, double secondary, double detrot) {
  return xt_tc_geom_of(xt_mode_find(mode), primary, secondary, detrot);
}

/* A quiet panel: the default chain without fixed pattern, defects, lag or electronic noise. */
static inline xt_chain_params xt_tc_quiet(void) {
  xt_chain_params p = xt_chain_params_default();
  p.e_noise_adu = 0;
  p.offset_fpn_adu = 0;
  p.gain_fpn = 0;
  p.defect_fraction = 0;
  p.defect_lines = 0;
  p.lag = 0;
  return p;
}

#endif /* XT_TEST_CHAIN_H */
