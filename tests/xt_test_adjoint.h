/* The scene of the adjoint's tests (test_adjoint.c, test_adjoint_cuda.c): a dense model of random
 * float mu on a rotated, anisotropic grid with a placement, and poses all round it. */
#ifndef XT_TEST_ADJOINT_H
#define XT_TEST_ADJOINT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "xt_adjoint.h"
#include "xt_proj.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline double urand(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* A 24 x 20 x 16 dense model of random float mu with a rotated, scaled grid and a placement. */
static inline xt_model *make_model(void) {
  xt_volume *v = NULL;
  xt_model *m = NULL;
  double sp[3] = {6.0, 7.0, 8.0};
  if (xt_volume_create(24, 20, 16, sp, XT_VOXEL_F32, &v, NULL)) return NULL;
  float *f = v->data;
  for (size_t i = 0; i < xt_volume_voxels(v); i++) f[i] = (float)(0.02 * urand());
  /* a rotation of 20 deg about z in the grid's map, and a placement shifted and turned about x */
  double c = cos(0.35), s = sin(0.35);
  xt_affine r = {{{c, -s, 0}, {s, c, 0}, {0, 0, 1}}, {3, -5, 2}};
  v->index_to_model = xt_aff_compose(&r, &v->index_to_model);
  if (xt_model_from_volume(v, "adj", &m, NULL)) return NULL;
  double cx = cos(0.2), sx = sin(0.2);
  xt_affine pl = {{{1, 0, 0}, {0, cx, -sx}, {0, sx, cx}}, {-7, 4, 11}};
  m->placement = pl;
  return m;
}

static inline void make_geoms(xt_geometry *g, int n) {
  xt_detector_mode mode = xt_mode_custom("adj", 24, 18, 12.0, 13.0, 810, 1195);
  for (int f = 0; f < n; f++) {
    xt_pose p = xt_pose_default(&mode);
    p.primary_deg = -70 + 37.3 * f;
    p.secondary_deg = 25 - 11.1 * f;
    p.detector_rot_deg = 5.5 * f - 3;
    p.table_mm = xt_v3(4.0 - f, 2.5 * f, -3.0 + f);
    xt_geom_compute(&p, &mode, &g[f], NULL);
  }
}

static inline double *grid_of(const xt_model *m) {
  const xt_volume *v = xt_model_volume(m);
  size_t nv = xt_volume_voxels(v);
  double *x = malloc(nv * sizeof *x);
  for (size_t i = 0; x && i < nv; i++) x[i] = (double)((const float *)v->data)[i];
  return x;
}

#endif /* XT_TEST_ADJOINT_H */
