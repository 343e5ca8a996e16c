/* Shared by the NanoVDB tests (test_nvdb.c on the CPU, test_nvdb_cuda.c on the GPU): sparse random
 * volumes (balls of material in background, so that the grids have empty leaves, nodes and root
 * regions), and their NanoVDB twins made by the converter (models/xt_nvdb_build.h). */
#ifndef XT_TEST_NVDB_H
#define XT_TEST_NVDB_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_model.h"
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"

static double tn_urand(double lo, double hi) { return lo + (hi - lo) * ((double)rand() / RAND_MAX); }

/* A random rotation and a shift of up to 20 mm. */
static void tn_random_placement(xt_model *m) {
  xt_affine rz = xt_aff_rot(2, tn_urand(-XT_PI, XT_PI)), ry = xt_aff_rot(1, tn_urand(-XT_PI, XT_PI)),
            rx = xt_aff_rot(0, tn_urand(-XT_PI, XT_PI));
  xt_affine r1 = xt_aff_compose(&ry, &rz);
  m->placement = xt_aff_compose(&rx, &r1);
  for (int a = 0; a < 3; a++) m->placement.t[a] = tn_urand(-20, 20);
}

/* dims lo..hi per axis, anisotropic spacing, a rotated and shifted placement; `bg` fills the
 * volume (mu, or label 0 whose mu is bg), 3..8 balls of other values (some touching the faces). */
static int tn_long_axis = -1; /* >= 0: that axis gets 260..420 voxels (upper-node and root regions) */

static xt_model *tn_sparse_model(int labels, int lo, int hi, double bg) {
  int n[3];
  double sp[3];
  for (int a = 0; a < 3; a++) {
    n[a] = a == tn_long_axis ? 260 + rand() % 161 : lo + rand() % (hi - lo + 1);
    sp[a] = a == tn_long_axis ? tn_urand(0.2, 0.5) : tn_urand(0.4, 1.6);
  }
  xt_volume *v;
  if (xt_volume_create(n[0], n[1], n[2], sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL)) return NULL;
  int k = 2 + rand() % 12;
  if (labels) {
    v->materials = calloc(1, sizeof *v->materials);
    if (!v->materials) return NULL;
    v->materials->count = k;
    v->materials->energy_kev = 60;
    v->materials->mu[0] = (float)bg;
    for (int i = 1; i < k; i++) {
      v->materials->mu[i] = (float)tn_urand(0.001, 0.2);
      snprintf(v->materials->name[i], XT_MATERIAL_NAME_MAX, "m%d", i);
    }
  }
  const size_t nv = xt_volume_voxels(v);
  float *f = labels ? NULL : (float *)v->data;
  uint8_t *u = labels ? (uint8_t *)v->data : NULL;
  if (f)
    for (size_t i = 0; i < nv; i++) f[i] = (float)bg;
  const int balls = 3 + rand() % 6;
  for (int b = 0; b < balls; b++) {
    double c[3], r = tn_urand(2, 0.35 * (tn_long_axis >= 0 ? hi : (n[0] + n[1] + n[2]) / 3.0));
    for (int a = 0; a < 3; a++) c[a] = tn_urand(0, n[a]);
    if (tn_long_axis >= 0) { /* content below 128 and across 256 along the long axis, none between:
                                rays cross an empty upper-node slot (128^3) from face to face */
      r = tn_urand(7, 14);
      c[tn_long_axis] = b % 2 ? tn_urand(0, 110) : 256.0 + r - tn_urand(0, 1);
    }
    const float mu = (float)tn_urand(0.0, 0.1);
    const int lab = 1 + rand() % (k - 1);
    const int noisy = rand() % 2;
    for (int z = 0; z < n[2]; z++)
      for (int y = 0; y < n[1]; y++)
        for (int x = 0; x < n[0]; x++) {
          double dx = x - c[0], dy = y - c[1], dz = z - c[2];
          if (dx * dx + dy * dy + dz * dz > r * r) continue;
          size_t i = (size_t)x + (size_t)n[0] * ((size_t)y + (size_t)n[1] * (size_t)z);
          if (u) u[i] = (uint8_t)(noisy ? rand() % k : lab);
          else f[i] = noisy ? (float)tn_urand(0.0, 0.1) : mu;
        }
  }
  xt_model *m;
  if (xt_model_from_volume(v, labels ? "sparse-labels" : "sparse-dense", &m, NULL)) return NULL;
  tn_random_placement(m);
  return m;
}

/* A volume with its content well inside the box (two balls and a lone voxel), so that a content
 * hull (bricks7) clips every side, and with `tile` a constant block in a corner (the hull must take
 * the grid's tiles too): mu (bg 0 or not) or labels (label 0's mu bg); a random placement. */
static inline xt_model *tn_inner_model(int labels, double bg, int tile) {
  const int n[3] = {30 + rand() % 20, 30 + rand() % 20, 30 + rand() % 20};
  const double sp[3] = {0.8, 1.1, 0.9};
  xt_volume *v;
  if (xt_volume_create(n[0], n[1], n[2], sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL)) return NULL;
  if (labels) {
    if (!(v->materials = calloc(1, sizeof *v->materials))) return NULL;
    v->materials->count = 3;
    v->materials->energy_kev = 60;
    v->materials->mu[0] = (float)bg;
    v->materials->mu[1] = 0.02f;
    v->materials->mu[2] = 0.15f;
    snprintf(v->materials->name[1], XT_MATERIAL_NAME_MAX, "m1");
    snprintf(v->materials->name[2], XT_MATERIAL_NAME_MAX, "m2");
  }
  float *f = labels ? NULL : (float *)v->data;
  uint8_t *u = labels ? (uint8_t *)v->data : NULL;
  const size_t nv = xt_volume_voxels(v);
  for (size_t i = 0; i < nv; i++) {
    if (f) f[i] = (float)bg;
    else u[i] = 0;
  }
  for (int b = 0; b < 3; b++) {
    double c[3];
    const double r = b < 2 ? tn_urand(3, 7) : 0.4; /* the third: one voxel */
    for (int a = 0; a < 3; a++) c[a] = b < 2 ? tn_urand(9, n[a] - 9) : (double)(4 + rand() % (n[a] - 8));
    for (int z = 0; z < n[2]; z++)
      for (int y = 0; y < n[1]; y++)
        for (int x = 0; x < n[0]; x++) {
          const double dx = x - c[0], dy = y - c[1], dz = z - c[2];
          if (dx * dx + dy * dy + dz * dz > r * r) continue;
          const size_t i = (size_t)x + (size_t)n[0] * ((size_t)y + (size_t)n[1] * (size_t)z);
          if (u) u[i] = (uint8_t)(1 + b % 2);
          else f[i] = (float)tn_urand(0.01, 0.1);
        }
  }
  if (tile) /* the first 8^3 block, one value: a tile of the grid, extreme along -x, -y, -z, -x-y-z */
    for (int z = 0; z < 8; z++)
      for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) {
          const size_t i = (size_t)x + (size_t)n[0] * ((size_t)y + (size_t)n[1] * (size_t)z);
          if (u) u[i] = 2;
          else f[i] = 0.05f;
        }
  xt_model *m;
  if (xt_model_from_volume(v, labels ? "inner-labels" : "inner-dense", &m, NULL)) return NULL;
  tn_random_placement(m);
  return m;
}


/* Gives a label model of tn_sparse_model the default material table (at 60 keV, so that it has
 * material channels), its labels taken modulo the table's 8 entries (label 0 = air). */
static inline int tn_default_materials(xt_model *vm) {
  xt_volume *v = xt_model_volume(vm);
  if (xt_materials_default(60.0, v->materials, NULL)) return -1;
  uint8_t *u = (uint8_t *)v->data;
  for (size_t i = 0; i < xt_volume_voxels(v); i++) u[i] = (uint8_t)(u[i] % XT_MAT_DEFAULT_COUNT);
  return 0;
}

/* The converter's grid of a voxel model, with the model's name and placement. */
static xt_model *tn_nvdb_of(const xt_model *vm, int quant, double bg, double tol, xt_msg *msg) {
  xt_nvdb_build_options o = {quant, bg, tol, 1e-3, NULL};
  uint32_t *w = NULL;
  uint64_t bytes = 0;
  if (xt_nvdb_build(xt_model_volume(vm), &o, &w, &bytes, msg)) return NULL;
  xt_nvdb *g = NULL;
  if (xt_nvdb_from_blob(w, bytes, NULL, "test grid", &g, msg)) return NULL;
  xt_model *m = NULL;
  if (xt_model_from_nvdb(g, vm->name, &m, msg)) {
    xt_nvdb_free(g);
    return NULL;
  }
  m->placement = vm->placement;
  return m;
}

#endif /* XT_TEST_NVDB_H */
