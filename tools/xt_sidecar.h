/* The JSON sidecar written next to every rendered frame: everything needed to interpret the
 * .npy and .png without xtwin (units, pose, detector, the full projection geometry, the model,
 * the intensity scaling). The field list is in docs/cli.md. */
#ifndef XT_SIDECAR_H
#define XT_SIDECAR_H

#include <stdio.h>

#include "xt_coverage.h"
#include "xt_geom.h"
#include "xt_model.h"

/* The imaging chain's part of a sidecar (render --chain): every parameter that shaped the frames,
 * by the chain's parameter table (imaging/xt_chain.h), and what they work out to. */
typedef struct xt_sidecar_param {
  const char *name;
  double value;
  const char *unit;
} xt_sidecar_param;

typedef struct xt_sidecar_chain {
  int nparams;
  const xt_sidecar_param *params;
  unsigned long long frame; /* the run's frame number (keys the noise) */
  double mean_energy_kev, hvl_mm_al, kerma_ugy_per_mas_1m, absorbed_fraction;
  int nbins;
  const char *channels;
  const char *raw_file, *proc_file;
  int out_rows, out_cols, adc_bits;
  double chain_ms;
  /* issue 11: the frame's dose, the run's totals, the dose-rate loop after this frame */
  const char *protocol_name;
  double ma;
  double k_irp_mgy, kap_gycm2, d_irp_mm, field_cm2;
  unsigned long long run_frames;
  double k_irp_total_mgy, kap_total_gycm2;
  int drc; /* the loop on: the four below */
  double drc_measured_ngy, drc_target_ngy, drc_curve_s;
  unsigned drc_flags;
} xt_sidecar_chain;

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
  const xt_sidecar_chain *chain; /* NULL: no chain ran */
  /* further models of the scene (render --add), rendered together with `model` */
  const xt_model *const *added;
  const char *const *added_sources;
  int nadded;
} xt_sidecar_info;

/* Writes the sidecar (pretty-printed JSON, doubles round-trippable) to f. */
int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg);

#endif /* XT_SIDECAR_H */
