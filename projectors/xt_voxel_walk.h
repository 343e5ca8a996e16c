/* The voxel traversal of the CPU reference (proj_cpu_voxel.c, `traverse`) as an iterator, for the
 * operators that must visit exactly the voxels and segment lengths the projector integrates: its
 * transpose (back-projection) and its derivative in the pose (xt_adjoint.c, adjoint_voxel.cu).
 *
 * The arithmetic is the reference's, operation for operation (entry cell, the plane-crossing
 * parameters recomputed from the ray origin, the axis picked on ties, the half-open cells), so a
 * ray's segments here are bit for bit the projector's; test_adjoint checks the forward built on
 * it against xt_ref_render_f64 for equality. XT_HOSTDEV: the CUDA adjoint walks the same way. */
#ifndef XT_VOXEL_WALK_H
#define XT_VOXEL_WALK_H

#include <math.h>
#include <stddef.h>

#include "xt_vec.h"

typedef struct xt_vwalk {
  int n[3];
  ptrdiff_t stride[3];
  int idx[3], step[3];
  double o[3], inv[3], snext[3];
  ptrdiff_t lin;
  double s, s1;
  int done;
} xt_vwalk;

/* Clip of the cell-space ray o + s q, s in [0, smax], against [0, n): xt_clip_box_f64's arithmetic,
 * plus the axis whose face the ray enters through (-1: it starts inside, s0 = 0) and leaves
 * through (-1: it ends inside, s1 = smax). */
static XT_INLINE XT_HOSTDEV int xt_vwalk_clip(const double o[3], const double q[3], const int n[3], double smax,
                                              double *s0, double *s1, int *ain, int *aout) {
  double lo = 0.0, hi = smax;
  int alo = -1, ahi = -1;
  for (int a = 0; a < 3; a++) {
    if (q[a] == 0.0) {
      if (!(o[a] >= 0.0 && o[a] < (double)n[a])) return 0;
      continue;
    }
    double inv = 1.0 / q[a];
    double t0 = (0.0 - o[a]) * inv, t1 = ((double)n[a] - o[a]) * inv;
    if (t0 > t1) {
      double t = t0;
      t0 = t1;
      t1 = t;
    }
    if (t0 > lo) {
      lo = t0;
      alo = a;
    }
    if (t1 < hi) {
      hi = t1;
      ahi = a;
    }
  }
  if (!(hi > lo)) return 0;
  *s0 = lo;
  *s1 = hi;
  *ain = alo;
  *aout = ahi;
  return 1;
}

static XT_INLINE XT_HOSTDEV void xt_vwalk_init(xt_vwalk *w, const int n[3], const double o[3], const double q[3],
                                               double s0, double s1) {
  for (int a = 0; a < 3; a++) w->n[a] = n[a];
  w->stride[0] = 1;
  w->stride[1] = (ptrdiff_t)n[0];
  w->stride[2] = (ptrdiff_t)n[0] * n[1];
  for (int a = 0; a < 3; a++) {
    w->o[a] = o[a];
    double p = o[a] + s0 * q[a];
    int i = (int)floor(p);
    if (i < 0) i = 0;
    if (i > n[a] - 1) i = n[a] - 1;
    w->idx[a] = i;
    if (q[a] > 0) {
      w->step[a] = 1;
      w->inv[a] = 1.0 / q[a];
      w->snext[a] = ((double)(i + 1) - o[a]) * w->inv[a];
    } else if (q[a] < 0) {
      w->step[a] = -1;
      w->inv[a] = 1.0 / q[a];
      w->snext[a] = ((double)i - o[a]) * w->inv[a];
    } else {
      w->step[a] = 0;
      w->inv[a] = 0;
      w->snext[a] = INFINITY;
    }
  }
  w->lin = w->idx[0] + w->stride[1] * w->idx[1] + w->stride[2] * w->idx[2];
  w->s = s0;
  w->s1 = s1;
  w->done = 0;
}

/* The next voxel: *lin its index, *seg its segment length (mm; may be 0 where planes cross at one
 * point, as in the reference, which then adds nothing), *sx the parameter where the ray leaves it
 * and *cross through what: the axis (0..2) of the plane into the next voxel; 3 + axis: the volume's
 * face of that axis; -1: the walk's end s1 (the clip's exit face, or the ray's end). 0 once done. */
static XT_INLINE XT_HOSTDEV int xt_vwalk_next(xt_vwalk *w, ptrdiff_t *lin, double *seg, int *cross, double *sx) {
  while (!w->done) {
    const double *sn = w->snext;
    int a = sn[0] <= sn[1] ? (sn[0] <= sn[2] ? 0 : 2) : (sn[1] <= sn[2] ? 1 : 2);
    double se = sn[a] < w->s1 ? sn[a] : w->s1;
    double sg = 0.0;
    const ptrdiff_t here = w->lin;
    if (se > w->s) {
      sg = se - w->s;
      w->s = se;
    }
    *lin = here;
    *seg = sg;
    *sx = w->s;
    if (w->s >= w->s1) {
      w->done = 1;
      *cross = -1;
      return 1;
    }
    w->idx[a] += w->step[a];
    if (w->idx[a] < 0 || w->idx[a] >= w->n[a]) {
      w->done = 1;
      *cross = 3 + a;
      return 1;
    }
    w->lin += w->step[a] * w->stride[a];
    w->snext[a] = ((double)(w->idx[a] + (w->step[a] > 0)) - w->o[a]) * w->inv[a];
    *cross = a;
    return 1;
  }
  return 0;
}

#endif /* XT_VOXEL_WALK_H */
