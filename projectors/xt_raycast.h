/* Ray set-up and exact voxel traversal, shared by the CPU reference and the CUDA kernels.
 *
 * A world ray x(s) = S + s w (|w| = 1, s in mm) is mapped into the volume's "cell" space, where
 * voxel (i,j,k) fills [i, i+1) x [j, j+1) x [k, k+1) (index space shifted by +0.5). The map is
 * affine, so the cell-space ray is o + s q with the same parameter s: segment lengths in s are
 * millimetres whatever the spacing or direction cosines. Cells are half-open, so a ray lying
 * exactly on a plane between two voxels belongs to the voxel on the + side, and a ray on the
 * volume's + faces misses it. */
#ifndef XT_RAYCAST_H
#define XT_RAYCAST_H

#include "xt_geom.h"
#include "xt_model.h"
#include "xt_vec.h"

/* World -> cell space of a model whose voxels are placed by index_to_model, with index `first`
 * at cell 0 (voxel models: 0; NanoVDB grids: their domain's first voxel). Returns 0 if the map
 * is singular. */
static inline int xt_world_to_cell_of(const xt_model *m, const xt_affine *index_to_model, const int first[3],
                                      const xt_pose *pose, xt_affine *out) {
  xt_affine p2w = xt_geom_patient_to_world(pose);
  xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  xt_affine i2w = xt_aff_compose(&m2w, index_to_model);
  xt_affine w2i;
  if (!xt_aff_invert(&i2w, &w2i)) return 0;
  for (int a = 0; a < 3; a++) w2i.t[a] += 0.5 - (double)first[a];
  *out = w2i;
  return 1;
}

/* World -> cell space for one voxel model under a pose. Returns 0 if the map is singular. */
static inline int xt_world_to_cell(const xt_model *m, const xt_pose *pose, xt_affine *out) {
  static const int zero[3] = {0, 0, 0};
  return xt_world_to_cell_of(m, &xt_model_volume(m)->index_to_model, zero, pose, out);
}

/* Clips the cell-space ray o + s q, s in [0, smax], against the box [0, n). Returns 0 on a miss,
 * else the entry and exit parameters, and the axis whose face the ray enters through (*ain; -1:
 * it starts inside, s0 = 0) and leaves through (*aout; -1: it ends inside, s1 = smax), which the
 * voxel walk of the adjoint needs (xt_voxel_walk.h). Axes with q = 0 need o inside [0, n)
 * (half-open). inv_out (NULL: not wanted): 1.0 / q[a] of each axis with q[a] != 0 (the others
 * untouched), the value a set-up after the clip would compute again (FP64 divisions, per ray). */
static XT_INLINE XT_HOSTDEV int xt_clip_box_inv_axes_f64(const double o[3], const double q[3], const int n[3],
                                                         double smax, double *s0, double *s1, int *ain, int *aout,
                                                         double *inv_out) {
  double lo = 0.0, hi = smax;
  int alo = -1, ahi = -1;
  for (int a = 0; a < 3; a++) {
    if (q[a] == 0.0) {
      if (!(o[a] >= 0.0 && o[a] < (double)n[a])) return 0;
      continue;
    }
    double inv = 1.0 / q[a];
    if (inv_out) inv_out[a] = inv;
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

static XT_INLINE XT_HOSTDEV int xt_clip_box_axes_f64(const double o[3], const double q[3], const int n[3], double smax,
                                                     double *s0, double *s1, int *ain, int *aout) {
  return xt_clip_box_inv_axes_f64(o, q, n, smax, s0, s1, ain, aout, NULL);
}

/* The same clip where the axes are not needed (the projectors). */
static XT_INLINE XT_HOSTDEV int xt_clip_box_f64(const double o[3], const double q[3], const int n[3], double smax,
                                                double *s0, double *s1) {
  int ain, aout;
  return xt_clip_box_axes_f64(o, q, n, smax, s0, s1, &ain, &aout);
}

/* The same, with inv_out (xt_clip_box_inv_axes_f64). */
static XT_INLINE XT_HOSTDEV int xt_clip_box_inv_f64(const double o[3], const double q[3], const int n[3], double smax,
                                                    double *s0, double *s1, double inv_out[3]) {
  int ain, aout;
  return xt_clip_box_inv_axes_f64(o, q, n, smax, s0, s1, &ain, &aout, inv_out);
}

#endif /* XT_RAYCAST_H */
