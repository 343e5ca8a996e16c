/* Does a model land on the detector? The projected bounding box of a model for one geometry,
 * so that a frame where the model misses the detector or is cut at its edge is reported (CLI
 * warning, sidecar "coverage", the server's model report) instead of rendering silently.
 *
 * The box is conservative: the eight corners of the model's bounds (model -> patient -> world)
 * projected through P, so "clipped" means the box crosses the detector's edge, which the shadow
 * itself may not (the CLI refines it with the rendered frame's edge pixels). */
#ifndef XT_COVERAGE_H
#define XT_COVERAGE_H

#include "xt_geom.h"
#include "xt_model.h"

typedef enum xt_cover_status { XT_COVER_INSIDE = 0, XT_COVER_CLIPPED = 1, XT_COVER_MISSED = 2 } xt_cover_status;

typedef struct xt_coverage {
  xt_cover_status status;
  double bbox[4];     /* col_min, row_min, col_max, row_max of the projected box, pixel-centre
                         coordinates (the detector spans -0.5 .. cols-0.5, -0.5 .. rows-0.5) */
  double on_detector; /* fraction of the box's area on the detector, 0..1 */
  int behind;         /* corners at or behind the source plane (0..8) */
} xt_coverage;

int xt_model_coverage(const xt_model *m, const xt_geometry *g, xt_coverage *c, xt_msg *msg);
/* "inside", "clipped", "missed" */
const char *xt_cover_name(xt_cover_status s);

#endif /* XT_COVERAGE_H */
