/* The JSON sidecar written next to every rendered frame: everything needed to interpret the
 * .npy and .png without xtwin (units, pose, detector, the full projection geometry, the model,
 * the intensity scaling). The field list is in docs/cli.md. */
#ifndef XT_SIDECAR_H
#define XT_SIDECAR_H

#include <stdio.h>

#include "xt_coverage.h"
#include "xt_geom.h"
#include "xt_model.h"

/* Whether the model landed on the detector in this frame (sidecar "coverage"). */
typedef struct xt_sidecar_coverage {
  xt_cover_status status;     /* from the frame: missed (nothing attenuated), clipped (edge pixels
                                 attenuated) or inside */
  xt_coverage box;            /* the model's projected bounding box (xt_model_coverage) */
  size_t pixels_nonzero;      /* pixels with a line integral > 0 */
  size_t edge_pixels_nonzero; /* of those, pixels in the first/last row or column */
} xt_sidecar_coverage;

typedef struct xt_sidecar_info {
  const xt_geometry *geom;
  const xt_model *model;
  const char *model_source; /* "phantom" or the volume file's path */
  const char *convert;      /* volume conversion ("mu", "hu", ...); NULL for phantoms */
  const char *place;        /* "center" or "native" */
  const char *backend;
  int threads;
  const char *npy_file, *png_file; /* names of the sibling files (no directory) */
  double lineint_min, lineint_max;
  double render_ms;
  const char *version;
  const xt_sidecar_coverage *coverage; /* NULL: no "coverage" object */
} xt_sidecar_info;

/* Writes the sidecar (pretty-printed JSON, doubles round-trippable) to f. */
int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg);

/* The projection matrix in the pixel-edge convention of DeepDRR and DiffDRR (pixel (c, r) covers
 * [c, c+1) x [r, r+1), its centre at (c + 0.5, r + 0.5), principal point (cols/2, rows/2) for a
 * centred detector) and back: P_edge = T P with T = [[1,0,0.5],[0,1,0.5],[0,0,1]]. w (the third
 * row) is unchanged, so both keep w = depth along the central beam. docs/geometry.md. */
void xt_P_to_pixel_edge(const double P[3][4], double out[3][4]);
void xt_P_from_pixel_edge(const double P_edge[3][4], double out[3][4]);

#endif /* XT_SIDECAR_H */
