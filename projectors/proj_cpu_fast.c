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
#include <stdlib.h>
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
 * returned, the axis advanced (or stopped at its count), the voxel moved. */
#define XT_FAST_STEP(t)                                                                           \
  do {                                                                                            \
    if (tx <= ty && tx <= tz) {                                                                   \
      t = tx;                                                                                     \
      lin += dx;                                                                                  \
      ix += sx;                                                                                   \
      tx = --cx ? tx + ddx : INFINITY;                                                            \
    } else if (ty <= tz) {                                                                        \
      t = ty;                                                                                     \
      lin += dy;                                                                                  \
      iy += sy;                                                                                   \
      ty = --cy ? ty + ddy : INFINITY;                                                            \
    } else {                                                                                      \
      t = tz;                                                                                     \
      lin += dz;                                                                                  \
      iz += sz;                                                                                   \
      tz = --cz ? tz + ddz : INFINITY;                                                            \
    }                                                                                             \
  } while (0)

#define XT_FAST_LOCALS(mr)                                                                        \
  double tx = (mr).next[0], ty = (mr).next[1], tz = (mr).next[2];                                 \
  const double ddx = (mr).dt[0], ddy = (mr).dt[1], ddz = (mr).dt[2];                              \
  const ptrdiff_t dx = (mr).dlin[0], dy = (mr).dlin[1], dz = (mr).dlin[2];                        \
  const int sx = dx > 0 ? 1 : -1, sy = dy > 0 ? 1 : -1, sz = dz > 0 ? 1 : -1;                     \
  int cx = (mr).count[0], cy = (mr).count[1], cz = (mr).count[2];                                 \
  int ix = (mr).idx[0], iy = (mr).idx[1], iz = (mr).idx[2];                                       \
  ptrdiff_t lin = (mr).lin;                                                                       \
  int total = cx + cy + cz

/* Inside a uniform block: the crossings up to the block's exit taken at once. The exit is the
 * first crossing of a block face: per axis, the face's plane is m more crossings after its next
 * one (when the axis still has that many); the other axes take their crossings before it. Counts,
 * crossings and the voxel are updated as the steps would have; returns the exit's parameter, or
 * INFINITY when the ray ends inside the block (then every remaining crossing is in it). */
static double block_exit(const int nbits, double t[3], const double dt[3], int cnt[3], int idx[3], const int stp[3],
                         const ptrdiff_t dl[3], ptrdiff_t *lin, int *total) {
  int m[3], best = -1;
  double texit = INFINITY;
  for (int a = 0; a < 3; a++) {
    m[a] = -1;
    if (!cnt[a]) continue;
    const int b = idx[a] >> nbits;
    /* the plane of the axis's next crossing, and the block's face ahead */
    const int p = idx[a] + (stp[a] > 0), face = stp[a] > 0 ? (b + 1) << nbits : b << nbits;
    m[a] = stp[a] > 0 ? face - p : p - face;
    if (cnt[a] <= m[a]) continue; /* the ray ends before this face */
    const double te = t[a] + m[a] * dt[a];
    if (te < texit) {
      texit = te;
      best = a;
    }
  }
  if (best < 0) {
    *total = 0;
    return INFINITY;
  }
  for (int a = 0; a < 3; a++) {
    int k;
    if (a == best) k = m[a] + 1;
    else if (!cnt[a] || !(t[a] < texit)) k = 0;
    else {
      k = (int)((texit - t[a]) / dt[a]) + 1;
      const int lim = m[a] < 0 ? 0 : (m[a] < cnt[a] ? m[a] : cnt[a]); /* stays in the block */
      if (k > lim) k = lim;
    }
    if (!k) continue;
    cnt[a] -= k;
    *total -= k;
    idx[a] += k * stp[a];
    *lin += k * dl[a];
    t[a] = cnt[a] ? t[a] + k * dt[a] : INFINITY;
  }
  return texit;
}

/* Labels: path length per label over the ray, in runs; then the label's weights. Uniform blocks
 * (the table) are crossed in one go. */
static void march_labels(const uint8_t *lab, const xt_voxel_chan_cpu *cc, const march *mr, double s0, double s1,
                         double *acc) {
  XT_FAST_LOCALS(*mr);
  const int nbx = cc->nb[0], nby = cc->nb[1], sh = XT_FAST_BLOCK_SHIFT;
  const uint16_t *blk = nbx ? cc->block : NULL;
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
    if (blk && blk[(ix >> sh) + nbx * ((iy >> sh) + (ptrdiff_t)nby * (iz >> sh))] != XT_FAST_MIXED) {
      double t[3] = {tx, ty, tz}, dt[3] = {ddx, ddy, ddz};
      int cnt[3] = {cx, cy, cz}, idx[3] = {ix, iy, iz};
      const int stp[3] = {sx, sy, sz};
      const ptrdiff_t dl[3] = {dx, dy, dz};
      const double te = block_exit(sh, t, dt, cnt, idx, stp, dl, &lin, &total);
      if (te == INFINITY) break;
      tx = t[0], ty = t[1], tz = t[2];
      cx = cnt[0], cy = cnt[1], cz = cnt[2];
      ix = idx[0], iy = idx[1], iz = idx[2];
      const unsigned l = lab[lin];
      if (l != cur) XT_FAST_FLUSH(l, te);
      continue;
    }
    double t;
    XT_FAST_STEP(t);
    total--;
    const unsigned l = lab[lin];
    if (l != cur) XT_FAST_FLUSH(l, t);
  }
  XT_FAST_FLUSH(cur, s1);
#undef XT_FAST_FLUSH
  for (int k = 0; k < nused; k++) {
    const float *w = cc->ch.w[used[k]];
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
  const xt_volume *v = m->volume;
  xt_vec3 oc = xt_aff_apply(&st->w2c, a), qc = xt_aff_apply_dir(&st->w2c, w);
  double o[3] = {oc.x, oc.y, oc.z}, q[3] = {qc.x, qc.y, qc.z}, s0, s1;
  if (!xt_clip_box_f64(o, q, v->dim, len, &s0, &s1)) return;
  march mr;
  march_setup(v->dim, o, q, s0, s1, &mr);
  const xt_voxel_chan_cpu *cc = chan;
  if (v->type == XT_VOXEL_U8) march_labels((const uint8_t *)v->data, cc, &mr, s0, s1, acc);
  else march_dense((const float *)v->data, &cc->ch, &mr, s0, s1, acc);
}

int xt_voxel_chan_cpu_new(const xt_model *m, xt_voxel_chan_cpu **out, xt_msg *msg) {
  const xt_volume *v = m->volume;
  const int labels = v && v->type == XT_VOXEL_U8 && v->data;
  int nb[3] = {0, 0, 0};
  size_t nblk = 0;
  if (labels) {
    nblk = 1;
    for (int a = 0; a < 3; a++) {
      nb[a] = ((v->dim[a] - 1) >> XT_FAST_BLOCK_SHIFT) + 1;
      nblk *= (size_t)nb[a];
    }
  }
  xt_voxel_chan_cpu *cc = malloc(sizeof *cc + nblk * sizeof cc->block[0]);
  if (!cc) return xt_fail(msg, XT_ENOMEM, "cpu projector: model %s: out of memory for its channel map", m->name);
  memset(cc, 0, sizeof *cc);
  if (labels) {
    const uint8_t *lab = v->data;
    const int *n = v->dim;
    memcpy(cc->nb, nb, sizeof nb);
    /* first touch: the block's first voxel; then any other label makes it mixed */
    uint8_t *touched = calloc(nblk, 1);
    if (!touched) {
      free(cc);
      return xt_fail(msg, XT_ENOMEM, "cpu projector: model %s: out of memory for its channel map", m->name);
    }
    for (int z = 0; z < n[2]; z++)
      for (int y = 0; y < n[1]; y++) {
        const uint8_t *row = lab + ((size_t)z * n[1] + y) * n[0];
        const size_t b0 = ((size_t)(z >> XT_FAST_BLOCK_SHIFT) * nb[1] + (y >> XT_FAST_BLOCK_SHIFT)) * nb[0];
        for (int x = 0; x < n[0]; x++) {
          const size_t b = b0 + (x >> XT_FAST_BLOCK_SHIFT);
          if (!touched[b]) {
            touched[b] = 1;
            cc->block[b] = row[x];
          } else if (cc->block[b] != row[x]) {
            cc->block[b] = XT_FAST_MIXED;
          }
        }
      }
    free(touched);
  }
  *out = cc;
  return 0;
}
