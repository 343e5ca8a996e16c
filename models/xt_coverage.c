/* The projected bounding box of a model on the detector (see xt_coverage.h). */
#include <math.h>
#include <string.h>

#include "xt_coverage.h"

const char *xt_cover_name(xt_cover_status s) {
  switch (s) {
  case XT_COVER_INSIDE: return "inside";
  case XT_COVER_CLIPPED: return "clipped";
  case XT_COVER_MISSED: return "missed";
  }
  return "?";
}

int xt_model_coverage(const xt_model *m, const xt_geometry *g, xt_coverage *c, xt_msg *msg) {
  xt_vec3 lo, hi;
  int rc = xt_model_bounds(m, &lo, &hi, msg);
  if (rc) return rc;
  memset(c, 0, sizeof *c);
  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  double cmin = INFINITY, rmin = INFINITY, cmax = -INFINITY, rmax = -INFINITY;
  for (int k = 0; k < 8; k++) {
    xt_vec3 p = xt_v3((k & 1) ? hi.x : lo.x, (k & 2) ? hi.y : lo.y, (k & 4) ? hi.z : lo.z);
    double col, row;
    if (!xt_geom_project(g, xt_aff_apply(&m2w, p), &col, &row)) {
      c->behind++;
      continue;
    }
    cmin = fmin(cmin, col), cmax = fmax(cmax, col), rmin = fmin(rmin, row), rmax = fmax(rmax, row);
  }
  double W = g->mode.cols, H = g->mode.rows;
  if (c->behind == 8) { /* the whole box behind the source */
    c->status = XT_COVER_MISSED;
    c->bbox[0] = c->bbox[1] = c->bbox[2] = c->bbox[3] = NAN;
    return 0;
  }
  c->bbox[0] = cmin, c->bbox[1] = rmin, c->bbox[2] = cmax, c->bbox[3] = rmax;
  if (c->behind) { /* the box reaches behind the source: its projection is unbounded */
    c->status = XT_COVER_CLIPPED;
    c->on_detector = NAN;
    return 0;
  }
  double ow = fmin(cmax, W - 0.5) - fmax(cmin, -0.5), oh = fmin(rmax, H - 0.5) - fmax(rmin, -0.5);
  double area = (cmax - cmin) * (rmax - rmin);
  if (ow <= 0 || oh <= 0) {
    c->status = XT_COVER_MISSED;
    c->on_detector = 0;
  } else {
    c->on_detector = area > 0 ? fmin(1.0, ow * oh / area) : 1.0;
    int in = cmin >= -0.5 && rmin >= -0.5 && cmax <= W - 0.5 && rmax <= H - 0.5;
    c->status = in ? XT_COVER_INSIDE : XT_COVER_CLIPPED;
  }
  return 0;
}
