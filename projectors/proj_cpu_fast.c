/* The fast CPU path for material channels of voxel models (dense mu and labels): the projection
 * stage of the CPU imaging chain (imaging/xt_chain.c), where the exact reference
 * (proj_cpu_voxel.c) costs ~4x the whole rest of the chain. The reference stays the oracle of the
 * GPU kernels; this march is tested against it (tests/test_channels.c, docs/projector.md "The fast
 * CPU path").
 *
 * Same ray set-up as the reference (the world -> cell map, the box clip in double), then a DDA
 * that does less per voxel step:
 *  - each axis's next crossing is advanced by one addition (the reference recomputes it from the
 *    voxel index), in double, so its drift after n steps is ~n ulps: far below the float bars;
 *  - the planes each axis crosses before the exit are counted once per ray, operation for
 *    operation as the reference decides them, and an axis stops at its count: the march is a
 *    counted loop that never leaves the volume, whatever the rounding of the crossings;
 *  - label volumes: a voxel step costs a label load and a compare: runs of one label are summed as
 *    one length (the difference of the run's two crossings), path length per label, and only at
 *    the end of the ray multiplied by the label's channel weights (the reference does 8
 *    multiply-adds per voxel);
 *  - dense volumes: the optical depth of each HU class, weighted into the channels at the end.
 * Deterministic per ray, so frames replay bit-identically whatever the threads. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "xt_proj_kind.h"
#include "xt_raycast.h"

/* The march of the cell-space ray o + s q, s in [s0, s1], through the volume. */
typedef struct march {
  int idx[3];        /* entry voxel */
  ptrdiff_t lin;     /* its linear index */
  ptrdiff_t dlin[3]; /* linear step per axis (signed) */
  double next[3];    /* first crossing per axis (absolute s; INFINITY when the axis crosses none) */
  double dt[3];      /* s between crossings per axis */
  int count[3];      /* planes crossed per axis before s1 */
} march;

/* The planes the reference (proj_cpu_voxel.c traverse) crosses along axis a, from voxel i: it
 * crosses plane j iff ((j - o) / q) < s1, computed as it computes it, and it leaves the box at the
 * last voxel. The estimate from the exit coordinate is off by at most one plane (it is within
 * rounding of the true exit), so settle it on the reference's own values. */
static int planes_crossed(double o, double q, double inv, int i, int n, double s1) {
  const double e = o + s1 * q;
  int np;
  if (q > 0) {
    int last = (int)ceil(e) - 1;
    if (last > n - 1) last = n - 1;
    np = last - i;
    if (np > 0 && ((double)(i + np) - o) * inv >= s1) np--;
    else if (i + np < n - 1 && ((double)(i + np + 1) - o) * inv < s1) np++;
  } else {
    int last = (int)floor(e);
    if (last < 0) last = 0;
    np = i - last;
    if (np > 0 && ((double)(i - np + 1) - o) * inv >= s1) np--;
    else if (i - np > 0 && ((double)(i - np) - o) * inv < s1) np++;
  }
  return np < 0 ? 0 : np;
}

static void march_setup(const int n[3], const double o[3], const double q[3], double s0, double s1, march *mr) {
  const ptrdiff_t stride[3] = {1, (ptrdiff_t)n[0], (ptrdiff_t)n[0] * n[1]};
  mr->lin = 0;
  for (int a = 0; a < 3; a++) {
    int i = (int)floor(o[a] + s0 * q[a]);
    /* The entry point lies on the box surface; rounding may put it a hair outside. */
    if (i < 0) i = 0;
    if (i > n[a] - 1) i = n[a] - 1;
    mr->idx[a] = i;
    mr->lin += stride[a] * i;
    mr->count[a] = 0;
    mr->next[a] = INFINITY;
    mr->dt[a] = 0;
    mr->dlin[a] = 0;
    if (q[a] == 0) continue;
    const double inv = 1.0 / q[a];
    mr->count[a] = planes_crossed(o[a], q[a], inv, i, n[a], s1);
    if (!mr->count[a]) continue;
    mr->next[a] = ((double)(q[a] > 0 ? i + 1 : i) - o[a]) * inv;
    mr->dt[a] = fabs(inv);
    mr->dlin[a] = q[a] > 0 ? stride[a] : -stride[a];
  }
}

/* One step: the axis of the nearest crossing (ties to x, then y, as the reference), its crossing
 * returned, the axis advanced (or stopped at its count), the linear index moved. */
#define XT_FAST_STEP(t)                                                                           \
  do {                                                                                            \
    if (tx <= ty && tx <= tz) {                                                                   \
      t = tx;                                                                                     \
      lin += dx;                                                                                  \
      tx = --cx ? tx + ddx : INFINITY;                                                            \
    } else if (ty <= tz) {                                                                        \
      t = ty;                                                                                     \
      lin += dy;                                                                                  \
      ty = --cy ? ty + ddy : INFINITY;                                                            \
    } else {                                                                                      \
      t = tz;                                                                                     \
      lin += dz;                                                                                  \
      tz = --cz ? tz + ddz : INFINITY;                                                            \
    }                                                                                             \
  } while (0)

#define XT_FAST_LOCALS(mr)                                                                        \
  double tx = (mr).next[0], ty = (mr).next[1], tz = (mr).next[2];                                 \
  const double ddx = (mr).dt[0], ddy = (mr).dt[1], ddz = (mr).dt[2];                              \
  const ptrdiff_t dx = (mr).dlin[0], dy = (mr).dlin[1], dz = (mr).dlin[2];                        \
  int cx = (mr).count[0], cy = (mr).count[1], cz = (mr).count[2];                                 \
  ptrdiff_t lin = (mr).lin;                                                                       \
  int total = cx + cy + cz

/* Labels: path length per label over the ray, in runs; then the label's weights. */
static void march_labels(const uint8_t *lab, const xt_voxel_chan *ch, const march *mr, double s0, double s1,
                         double *acc) {
  XT_FAST_LOCALS(*mr);
  double len[256];
  uint8_t seen[256], used[256];
  int nused = 0;
  memset(seen, 0, sizeof seen);
  unsigned cur = lab[lin];
  double run0 = s0;
#define XT_FAST_FLUSH(l, t)                                                                       \
  do {                                                                                            \
    if (!seen[cur]) {                                                                             \
      seen[cur] = 1;                                                                              \
      used[nused++] = (uint8_t)cur;                                                               \
      len[cur] = 0;                                                                               \
    }                                                                                             \
    len[cur] += (t) - run0;                                                                       \
    run0 = (t);                                                                                   \
    cur = (l);                                                                                    \
  } while (0)
  while (total > 0) {
    double t;
    XT_FAST_STEP(t);
    total--;
    const unsigned l = lab[lin];
    if (l != cur) XT_FAST_FLUSH(l, t);
  }
  XT_FAST_FLUSH(cur, s1);
#undef XT_FAST_FLUSH
  for (int k = 0; k < nused; k++) {
    const float *w = ch->w[used[k]];
    const double L = len[used[k]];
    for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += L * (double)w[c];
  }
}

/* Dense: optical depth per HU class, then each class's channel weights. */
static void march_dense(const float *mu, const xt_voxel_chan *ch, const march *mr, double s0, double s1,
                        double *acc) {
  XT_FAST_LOCALS(*mr);
  const float thr0 = ch->thr[0], thr1 = ch->thr[1];
  double d0 = 0, d1 = 0, d2 = 0, s = s0;
  float m = mu[lin];
  while (total-- > 0) {
    double t;
    XT_FAST_STEP(t);
    const double x = (t - s) * (double)m;
    d0 += m < thr0 ? x : 0.0;
    d1 += (m >= thr0 && m < thr1) ? x : 0.0;
    d2 += m >= thr1 ? x : 0.0;
    s = t;
    m = mu[lin];
  }
  const double x = (s1 - s) * (double)m;
  d0 += m < thr0 ? x : 0.0;
  d1 += (m >= thr0 && m < thr1) ? x : 0.0;
  d2 += m >= thr1 ? x : 0.0;
  for (int c = 0; c < XT_MAX_CHANNELS; c++)
    acc[c] += d0 * (double)ch->cw[0][c] + d1 * (double)ch->cw[1][c] + d2 * (double)ch->cw[2][c];
}

void xt_voxel_ray_channels_fast(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w,
                                double len, double *acc) {
  const xt_voxel_state *st = state;
  const xt_volume *v = xt_model_volume(m);
  xt_vec3 oc = xt_aff_apply(&st->w2c, a), qc = xt_aff_apply_dir(&st->w2c, w);
  double o[3] = {oc.x, oc.y, oc.z}, q[3] = {qc.x, qc.y, qc.z}, s0, s1;
  if (!xt_clip_box_f64(o, q, v->dim, len, &s0, &s1)) return;
  march mr;
  march_setup(v->dim, o, q, s0, s1, &mr);
  if (v->type == XT_VOXEL_U8) march_labels((const uint8_t *)v->data, chan, &mr, s0, s1, acc);
  else march_dense((const float *)v->data, chan, &mr, s0, s1, acc);
}

