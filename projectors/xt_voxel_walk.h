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

#include "xt_raycast.h"
#include "xt_vec.h"

/* Per-axis state in scalars, never arrays indexed by the axis chosen at run time: on the GPU such an
 * index would put the state in local memory. */
typedef struct xt_vwalk {
  int n0, n1, n2;
  ptrdiff_t st1, st2;
  int i0, i1, i2, d0, d1, d2; /* voxel index, step */
  double o0, o1, o2, v0, v1, v2, x0, x1, x2; /* origin, 1 / direction, next crossing parameter */
  ptrdiff_t lin;
  double s, s1;
  int done;
} xt_vwalk;

/* One axis of the reference's set-up: entry cell clamped into [0, n), step, 1/q, next crossing. */
static XT_INLINE XT_HOSTDEV void xt_vwalk_axis(double o, double q, double s0, int n, int *idx, int *step, double *inv,
                                               double *snext) {
  double p = o + s0 * q;
  int i = (int)floor(p);
  /* The entry point lies on the box surface; rounding may put it a hair outside. */
  if (i < 0) i = 0;
  if (i > n - 1) i = n - 1;
  *idx = i;
  if (q > 0) {
    *step = 1;
    *inv = 1.0 / q;
    *snext = ((double)(i + 1) - o) * *inv;
  } else if (q < 0) {
    *step = -1;
    *inv = 1.0 / q;
    *snext = ((double)i - o) * *inv;
  } else {
    *step = 0;
    *inv = 0;
    *snext = INFINITY;
  }
}

static XT_INLINE XT_HOSTDEV void xt_vwalk_init(xt_vwalk *w, const int n[3], const double o[3], const double q[3],
                                               double s0, double s1) {
  w->n0 = n[0], w->n1 = n[1], w->n2 = n[2];
  w->st1 = (ptrdiff_t)n[0];
  w->st2 = (ptrdiff_t)n[0] * n[1];
  w->o0 = o[0], w->o1 = o[1], w->o2 = o[2];
  xt_vwalk_axis(o[0], q[0], s0, n[0], &w->i0, &w->d0, &w->v0, &w->x0);
  xt_vwalk_axis(o[1], q[1], s0, n[1], &w->i1, &w->d1, &w->v1, &w->x1);
  xt_vwalk_axis(o[2], q[2], s0, n[2], &w->i2, &w->d2, &w->v2, &w->x2);
  w->lin = w->i0 + w->st1 * w->i1 + w->st2 * w->i2;
  w->s = s0;
  w->s1 = s1;
  w->done = 0;
}

/* The next voxel: *lin its index, *seg its segment length (mm; may be 0 where planes cross at one
 * point, as in the reference, which then adds nothing), *sx the parameter where the ray leaves it
 * and *cross through what: the axis (0..2) of the plane into the next voxel; 3 + axis: the volume's
 * face of that axis; -1: the walk's end s1 (the clip's exit face, or the ray's end). 0 once done. */
static XT_INLINE XT_HOSTDEV int xt_vwalk_next(xt_vwalk *w, ptrdiff_t *lin, double *seg, int *cross, double *sx) {
  if (w->done) return 0;
  const int a = w->x0 <= w->x1 ? (w->x0 <= w->x2 ? 0 : 2) : (w->x1 <= w->x2 ? 1 : 2);
  const double sn = a == 0 ? w->x0 : (a == 1 ? w->x1 : w->x2);
  const double se = sn < w->s1 ? sn : w->s1;
  double sg = 0.0;
  *lin = w->lin;
  if (se > w->s) {
    sg = se - w->s;
    w->s = se;
  }
  *seg = sg;
  *sx = w->s;
  if (w->s >= w->s1) {
    w->done = 1;
    *cross = -1;
    return 1;
  }
  int i, n, d;
  if (a == 0) i = (w->i0 += w->d0), n = w->n0, d = w->d0;
  else if (a == 1) i = (w->i1 += w->d1), n = w->n1, d = w->d1;
  else i = (w->i2 += w->d2), n = w->n2, d = w->d2;
  if (i < 0 || i >= n) {
    w->done = 1;
    *cross = 3 + a;
    return 1;
  }
  if (a == 0) w->lin += d, w->x0 = ((double)(i + (d > 0)) - w->o0) * w->v0;
  else if (a == 1) w->lin += d * w->st1, w->x1 = ((double)(i + (d > 0)) - w->o1) * w->v1;
  else w->lin += d * w->st2, w->x2 = ((double)(i + (d > 0)) - w->o2) * w->v2;
  *cross = a;
  return 1;
}

#endif /* XT_VOXEL_WALK_H */
