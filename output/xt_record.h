/* The record-based encoders: every format that says what a frame is (the stream header, the JSON
 * sidecar, the dataset's frame JSON, later DICOM) reads it from acq/'s frame record through one
 * set of fields, worked out once here, so no two formats can state a frame differently: the pose
 * as eight numbers, P in both pixel conventions, the delivered pixel pitch, the exposure's tube
 * current and flags, the chain parameters' hash, the spectrum, the dose and the loop's state.
 *
 *   xt_frame_fields.c   the fields of a record (xt_frame_fields_of)
 *   xt_stream_header.c  the frame stream's binary header (api/xt_stream.h)
 *   xt_sidecar.c        `xtwin render`'s JSON sidecar (docs/cli.md)
 *   xt_geometry_json.c  POST /v1/render's geometry (its X-Xtwin-Geometry header, api/rest.md)
 *
 * The dataset's frame JSON (dataset/xt_dataset_encode.c) states the same fields of its frame's
 * record (pose, detector, P in both conventions, the chain's parameters and frame number) beside
 * what a dataset frame is beyond one exposure (perturbations, labels, landmarks), with the shared
 * JSON builder (xt_json_build.h); its key names and number forms are those of the datasets
 * already written (docs/dataset.md). */
#ifndef XT_RECORD_H
#define XT_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xt_acq.h"
#include "xt_coverage.h"
#include "xt_stream.h"

struct json_t;
struct xt_jb;

/* ---- the fields of a frame record ----------------------------------------------------------- */

typedef struct xt_frame_fields {
  /* identity and time (CLOCK_MONOTONIC ns) */
  uint64_t counter, pose_seq;
  uint64_t t_pose_ns, t_sched_ns, t_exposure_ns, period_ns; /* the pixels' ready time is the delivery's */
  int plane, timing;        /* XT_STREAM_PLANE_*, XT_STREAM_TIMING_* (docs/biplane.md) */
  uint64_t cycle, t_cycle_ns; /* the pulse cycle and its start */
  /* geometry */
  double pose[8];           /* primary, secondary, detector rotation (deg), SOD, SID, table x, y, z (mm) */
  double P[3][4];           /* pixel-centre convention (docs/geometry.md) */
  double P_edge[3][4];      /* pixel-edge convention (DeepDRR, DiffDRR) */
  double principal[2];      /* (col, row) of the central beam, pixel-centre convention */
  double principal_edge[2]; /* the same, pixel-edge */
  const char *mode;         /* the detector mode's name */
  double out_pitch_mm[2];   /* the delivered pixels' pitch (u, v): the chain's binning included */
  /* the readout (issue 24): the panel, the centred region of it read out, how many native pixels
   * make a delivered one, the zoom field; with the chain's 2x2 binning the delivered matrix is
   * half the render grid's, and P_out is P for it (P itself is the render grid's: line integrals) */
  const char *detector;     /* the panel (scene/detectors.tsv) */
  int panel[2];             /* its native cols, rows */
  double panel_pitch_mm;
  int roi[4];               /* col0, row0, cols, rows: native pixels of the panel */
  double binning;           /* native pixels per delivered pixel along a side: the mode's x the chain's */
  int matrix[2];            /* the delivered cols, rows */
  double P_out[3][4];       /* P of the delivered matrix, pixel-centre convention */
  double field_cm;          /* the zoom field's nominal diagonal; 0: the mode is not a field */
  double dose_ratio;        /* the field's requested detector dose relative to the largest field */
  double readout_ms;        /* the panel's readout time in this mode */
  /* the exposure: chain frames only (zeros, prm NULL, otherwise) */
  int chain;
  const xt_chain_params *prm; /* every parameter as exposed (points into the record) */
  uint64_t params_hash;       /* FNV-1a of every parameter's value in the chain's table order */
  double ma;                  /* tube current (xt_exposure_ma) */
  const char *protocol_name;
  uint32_t chain_flags;       /* XT_STREAM_CHAIN_* */
  double window, level;       /* the window and level the processed frame had (automatic: this frame's) */
  uint32_t saturated_px;      /* raw pixels at the ADC's full scale (2^adc_bits - 1): the panel saturated */
  uint32_t exposure_flags;    /* XT_STREAM_EXPOSURE_* */
  double grid_tp;             /* the grid's primary transmission, 0 with the grid out */
  int out_rows, out_cols;     /* the chain's output frame (binned) */
  double chain_ms;            /* the chain's time for the frame */
  /* the spectrum and the panel (xt_chain_info) */
  double mean_energy_kev, hvl_mm_al, kerma_ugy_per_mas, absorbed_fraction;
  int nbins;
  const char *channels;
  /* dose: this frame's, and the run's totals after it */
  double k_irp_mgy, kap_gycm2, d_irp_mm, field_cm2;
  uint64_t dose_frames;
  double k_irp_total_mgy, kap_total_gycm2;
  /* the dose-rate loop after this frame: with the loop on only */
  int drc;
  double drc_measured_ngy, drc_target_ngy, drc_curve_s;
  uint32_t drc_flags;
  /* motion (issue 26): the record's (xt_acq_motion); motion_flags XT_STREAM_MOTION_* */
  xt_acq_motion motion;
  uint32_t motion_flags;
} xt_frame_fields;

/* The fields of fr; pointers in ff point into fr (or static strings) and live as long as it. */
void xt_frame_fields_of(const xt_acq_frame *fr, xt_frame_fields *ff);

/* {"detector", "panel": [cols, rows], "panel_pitch_mm", "roi_origin": [col, row], "roi_size": [cols,
 * rows], "binning", "matrix": [cols, rows], "P": P_out, "field_cm", "dose_ratio", "readout_ms"}: the
 * readout as every JSON that states a frame gives it. */
struct json_t *xt_readout_json(struct xt_jb *b, const xt_frame_fields *ff);

/* ---- the stream header ---------------------------------------------------------------------- */

/* What only the delivery knows: which image of the record the message carries, and how. */
typedef struct xt_stream_delivery {
  int kind;           /* XT_STREAM_KIND_* (MONO with the chain off) */
  int rows, cols;     /* the pixels that follow */
  int pixel_format;   /* XT_STREAM_PIX_* */
  size_t payload;     /* their bytes */
  uint32_t flags;     /* XT_STREAM_FLAG_* */
  uint64_t t_done_ns; /* pixels ready (after any conversion the front end did) */
} xt_stream_delivery;

/* The whole header (version XT_STREAM_VERSION) but t_sent_ns and frames_dropped, which the sender
 * writes per client as the frame goes out. */
void xt_stream_header_encode(const xt_frame_fields *ff, const xt_stream_delivery *d, xt_stream_header *h);

/* ---- POST /v1/render's geometry ------------------------------------------------------------ */

/* {"mode", "rows", "cols", "pitch_mm", "pose", "P", "source_mm", "detector_center_mm",
 * "pixel_format"}; g is the record's geometry (the detector's size, source and centre). NULL when
 * out of memory or a value is not finite. */
struct json_t *xt_render_geometry_json(const xt_frame_fields *ff, const xt_geometry *g, const char *pixel_format);

/* ---- the JSON sidecar ----------------------------------------------------------------------- */

/* Whether the model landed on the detector in this frame (sidecar "coverage"). */
typedef struct xt_sidecar_coverage {
  xt_cover_status status;     /* from the frame: missed (nothing attenuated), clipped (edge pixels
                                 attenuated) or inside */
  xt_coverage box;            /* the model's projected bounding box (xt_model_coverage) */
  size_t pixels_nonzero;      /* pixels with a line integral > 0 */
  size_t edge_pixels_nonzero; /* of those, pixels in the first/last row or column */
} xt_sidecar_coverage;

/* What the sidecar says beyond the record: the front end's files, the model as loaded, the run. */
typedef struct xt_sidecar_info {
  const xt_acq_frame *frame; /* the record: pose, geometry, exposure, dose, the loop, the times */
  const xt_model *model;     /* the scene's main model */
  const char *model_source;  /* "phantom" or the volume file's path */
  const char *convert;       /* volume conversion ("mu", "hu", ...); NULL for phantoms */
  const char *place;         /* "center" or "native" */
  struct json_t *load;       /* the loader's report (borrowed); NULL: no "load" object */
  const char *backend;
  int threads;
  const char *npy_file, *png_file;  /* names of the sibling files (no directory) */
  const char *raw_file, *proc_file; /* the chain's (with the chain on) */
  double lineint_min, lineint_max;
  const char *version;
  const xt_sidecar_coverage *coverage; /* NULL: no "coverage" object */
  /* further models of the scene (render --add), rendered together with `model` */
  const xt_model *const *added;
  const char *const *added_sources;
  int nadded;
  /* contrast (issue 26): each region's iodine the frame was rendered with; 0: no "contrast" object */
  int niodine;
  const char *const *iodine_regions;
  const double *iodine_mg_ml;
} xt_sidecar_info;

/* Writes the sidecar (pretty-printed JSON, doubles round-trippable) to f. */
int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg);

#endif /* XT_RECORD_H */
