/* The JSON sidecar written next to every rendered frame: everything needed to interpret the
 * .npy and .png without xtwin (units, pose, detector, the full projection geometry, the model,
 * the intensity scaling). The field list is in docs/cli.md. */
#ifndef XT_SIDECAR_H
#define XT_SIDECAR_H

#include <stdio.h>

#include "xt_geom.h"
#include "xt_model.h"

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
  /* further models of the scene (render --add), rendered together with `model` */
  const xt_model *const *added;
  const char *const *added_sources;
  int nadded;
} xt_sidecar_info;

/* Writes the sidecar (pretty-printed JSON, doubles round-trippable) to f. */
int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg);

#endif /* XT_SIDECAR_H */
