/* Model kinds on the CPU reference projector: what proj_cpu.c needs to integrate a ray through a
 * model of one kind. Each kind's file (proj_cpu_voxel.c, ...) defines one table; proj_cpu.c picks
 * it by the model's kind and never looks at a payload itself. Internal to projectors/. */
#ifndef XT_PROJ_KIND_H
#define XT_PROJ_KIND_H

#include "xt_channels.h"
#include "xt_geom.h"
#include "xt_model.h"

/* Bytes of per-frame state a kind may keep for one model (its world->model map and whatever it
 * derives from the pose once per frame rather than per ray). */
#define XT_CPU_KIND_STATE 512

typedef struct xt_cpu_kind {
  const struct xt_model_kind_ops *kind; /* the model kind this table renders (XT_MODEL_DENSE, ...) */
  /* At add_model: the payload is present and usable; msg names the model. */
  int (*check)(const xt_model *m, xt_msg *msg);
  /* Once per frame: fills `state` for the pose (table translation and placement included).
   * Returns 0 when no ray can hit the model this frame (a singular map), else 1. */
  int (*frame)(const xt_model *m, const xt_pose *pose, void *state);
  /* Integral of mu along the world ray a + s w, s in [0, len] mm, |w| = 1; double precision. */
  double (*ray)(const xt_model *m, const void *state, xt_vec3 a, xt_vec3 w, double len);
  /* Material channels (xt_channels.h); NULL when the kind has none yet. chan_build makes the map of
   * the model onto the set cs (*chan, malloc'd, freed by the caller with free()); ray_channels adds
   * the ray's areal densities (g/cm^2, double) into acc[0..XT_MAX_CHANNELS). */
  int (*chan_build)(const xt_model *m, const xt_chanset *cs, void **chan, xt_msg *msg);
  void (*ray_channels)(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w, double len,
                       double *acc);
  /* Optional: the same channels by a faster march (proj_cpu_fast.c), within the float bars of
   * docs/projector.md ("The fast CPU path") rather than exact; NULL: ray_channels serves both. */
  void (*ray_channels_fast)(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w, double len,
                            double *acc);
  /* Optional, for kinds whose shape changes during a run (instruments): the projector renders its
   * own copy of the model (own: made at add_model, freed with xt_model_free at destroy), and
   * xt_proj_set_shape replaces the copy's centreline (reshape; no allocation). */
  int (*own)(const xt_model *m, xt_model **copy, xt_msg *msg);
  int (*reshape)(xt_model *own, const double *pts, int n, xt_msg *msg);
  /* Optional: frames take the kind's pixel-area integral of pixel (col, row) of g instead of the
   * ray through its centre: the line integral added to acc[0] (chan NULL) or the channels to
   * acc[0..XT_MAX_CHANNELS). xt_ref_segment and `ray` stay one ray. */
  void (*pixel)(const xt_model *m, const void *state, const void *chan, const xt_geometry *g, int col, int row,
                double *acc);
  /* Optional (label volumes; issue 26, contrast): the projector's iodine for this model: its mono
   * table into a frame's state (chan NULL), or its iodine column into the channel map (state NULL). */
  void (*iodine)(const xt_iodine_tab *io, void *state, void *chan);
} xt_cpu_kind;

/* The voxel kinds' per-frame state: the world -> cell map (proj_cpu_voxel.c, proj_cpu_fast.c). */
typedef struct xt_voxel_state {
  xt_affine w2c;
  const float *lut; /* labels: the mono table (the model's, or the projector's with iodine) */
} xt_voxel_state;

/* The fast channel march of voxel models (proj_cpu_fast.c): same arguments as ray_channels. */
void xt_voxel_ray_channels_fast(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w,
                                double len, double *acc);

extern const xt_cpu_kind xt_cpu_kind_dense;  /* proj_cpu_voxel.c */
extern const xt_cpu_kind xt_cpu_kind_labels; /* proj_cpu_voxel.c */
extern const xt_cpu_kind xt_cpu_kind_gmm;    /* proj_cpu_gmm.c */
extern const xt_cpu_kind xt_cpu_kind_nvdb;   /* proj_cpu_nvdb.c */
extern const xt_cpu_kind xt_cpu_kind_instr;  /* proj_cpu_instr.c */

#endif /* XT_PROJ_KIND_H */
