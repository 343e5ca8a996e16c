/* Voxel models (dense float mu, uint8 labels + table) on the CPU reference: exact
 * Amanatides-Woo / Siddon traversal in double precision.
 *
 * Every segment length is the difference of two plane-crossing parameters computed directly from
 * the ray origin (never accumulated), so a ray's line integral carries only rounding error of the
 * order of 1e-15 relative per segment, far below float32. The CUDA kernel (proj_voxel.cu) repeats
 * the ray set-up operation for operation, so the per-frame map must stay xt_world_to_cell's. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "xt_proj_kind.h"
#include "xt_raycast.h"

/* The traversal of the cell-space ray o + s q, s in [s0, s1], through volume v. Without a channel
 * map it adds the integral of mu into acc[0]; with one, each voxel's segment feeds the channels
 * (xt_channels.h): labels by their weights, dense voxels by their HU class. */
static inline void traverse(const xt_volume *v, const float *lut, const double o[3], const double q[3], double s0,
                            double s1, const xt_voxel_chan *ch, double *acc) {
  const int *n = v->dim;
  const float *fdata = v->type == XT_VOXEL_F32 ? (const float *)v->data : NULL;
  const uint8_t *ldata = v->type == XT_VOXEL_U8 ? (const uint8_t *)v->data : NULL;
  const ptrdiff_t stride[3] = {1, (ptrdiff_t)n[0], (ptrdiff_t)n[0] * n[1]};
  int idx[3], step[3];
  double inv[3], snext[3];
  for (int a = 0; a < 3; a++) {
    double p = o[a] + s0 * q[a];
    int i = (int)floor(p);
    /* The entry point lies on the box surface; rounding may put it a hair outside. */
    if (i < 0) i = 0;
    if (i > n[a] - 1) i = n[a] - 1;
    idx[a] = i;
    if (q[a] > 0) {
      step[a] = 1;
      inv[a] = 1.0 / q[a];
      snext[a] = ((double)(i + 1) - o[a]) * inv[a];
    } else if (q[a] < 0) {
      step[a] = -1;
      inv[a] = 1.0 / q[a];
      snext[a] = ((double)i - o[a]) * inv[a];
    } else {
      step[a] = 0;
      inv[a] = 0;
      snext[a] = INFINITY;
    }
  }
  ptrdiff_t lin = idx[0] + stride[1] * idx[1] + stride[2] * idx[2];
  double s = s0;
  for (;;) {
    int a = snext[0] <= snext[1] ? (snext[0] <= snext[2] ? 0 : 2) : (snext[1] <= snext[2] ? 1 : 2);
    double se = snext[a] < s1 ? snext[a] : s1;
    if (se > s) {
      const double seg = se - s;
      if (!ch) {
        acc[0] += seg * (fdata ? (double)fdata[lin] : (double)lut[ldata[lin]]);
      } else if (ldata) {
        const float *w = ch->w[ldata[lin]];
        for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += seg * (double)w[c];
      } else {
        const float mu = fdata[lin];
        const int k = xt_voxel_chan_class(ch, mu);
        for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += seg * (double)mu * (double)ch->cw[k][c];
      }
      s = se;
    }
    if (s >= s1) break;
    idx[a] += step[a];
    if (idx[a] < 0 || idx[a] >= n[a]) break;
    lin += step[a] * stride[a];
    snext[a] = ((double)(idx[a] + (step[a] > 0)) - o[a]) * inv[a];
  }
}

/* Per frame: the world -> cell map (xt_voxel_state, shared with the fast march). */
typedef xt_voxel_state voxel_state;

_Static_assert(sizeof(voxel_state) <= XT_CPU_KIND_STATE, "voxel state fits the kind state");

static int voxel_check(const xt_model *m, xt_msg *msg) {
  const xt_volume *v = xt_model_volume(m);
  const int labels = m->kind == XT_MODEL_LABELS;
  if (!v || !v->data || (labels && (!v->materials || v->type != XT_VOXEL_U8)) || (!labels && v->type != XT_VOXEL_F32))
    return xt_fail(msg, XT_EINVAL, "cpu projector: model %s: no voxel data of its kind", m->name);
  return 0;
}

static int voxel_frame(const xt_model *m, const xt_pose *pose, void *state) {
  voxel_state *st = state;
  const xt_volume *v = xt_model_volume(m);
  st->lut = v && v->materials ? v->materials->mu : NULL;
  return xt_world_to_cell(m, pose, &st->w2c);
}

static void voxel_walk(const xt_model *m, const void *state, const xt_voxel_chan *ch, xt_vec3 a, xt_vec3 w, double len,
                       double *acc) {
  const voxel_state *st = state;
  xt_vec3 oc = xt_aff_apply(&st->w2c, a), qc = xt_aff_apply_dir(&st->w2c, w);
  double o[3] = {oc.x, oc.y, oc.z}, q[3] = {qc.x, qc.y, qc.z}, s0, s1;
  const xt_volume *v = xt_model_volume(m);
  if (!xt_clip_box_f64(o, q, v->dim, len, &s0, &s1)) return;
  traverse(v, st->lut, o, q, s0, s1, ch, acc);
}

static double voxel_ray(const xt_model *m, const void *state, xt_vec3 a, xt_vec3 w, double len) {
  double acc = 0.0;
  voxel_walk(m, state, NULL, a, w, len, &acc);
  return acc;
}

static int voxel_chan_build(const xt_model *m, const xt_chanset *cs, void **chan, xt_msg *msg) {
  xt_voxel_chan *ch = malloc(sizeof *ch);
  if (!ch) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
  int rc = xt_voxel_chan_build(cs, m, ch, msg);
  if (rc) {
    free(ch);
    return rc;
  }
  *chan = ch;
  return 0;
}

static void voxel_ray_channels(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w, double len,
                               double *acc) {
  voxel_walk(m, state, chan, a, w, len, acc);
}

static void labels_iodine(const xt_iodine_tab *io, void *state, void *chan) {
  if (state) ((voxel_state *)state)->lut = io->mu;
  xt_voxel_chan *ch = chan;
  if (ch && io->ci >= 0)
    for (int l = 0; l < 256; l++) ch->w[l][io->ci] = io->col[l];
}

const xt_cpu_kind xt_cpu_kind_dense = {XT_MODEL_DENSE, voxel_check, voxel_frame, voxel_ray, voxel_chan_build,
                                       voxel_ray_channels, xt_voxel_ray_channels_fast, NULL, NULL, NULL, NULL};
const xt_cpu_kind xt_cpu_kind_labels = {XT_MODEL_LABELS, voxel_check, voxel_frame, voxel_ray, voxel_chan_build,
                                        voxel_ray_channels, xt_voxel_ray_channels_fast, NULL, NULL, NULL, labels_iodine};
