/* Models of every kind for the motion tests (test_motion.c, test_motion_cuda.c): small, off-centre,
 * each with a placement of its own that a transform composes onto. */
#ifndef XT_TEST_MOTION_H
#define XT_TEST_MOTION_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_gmm.h"
#include "xt_instr.h"
#include "xt_proj.h"
#ifdef XT_TEST_NVDB
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"
#endif

/* A dense model of n^3 voxels of side h centred on the origin; uniform mu, or a smooth pattern. */
static xt_model *cube_model(int nx, int ny, int nz, double h, float mu, int pattern, int labels) {
  double sp[3] = {h, h, h};
  xt_volume *v;
  xt_model *m;
  if (xt_volume_create(nx, ny, nz, sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL)) return NULL;
  if (labels) {
    v->materials = calloc(1, sizeof *v->materials);
    if (!v->materials || xt_materials_default(60.0, v->materials, NULL)) return NULL;
  }
  for (int k = 0; k < nz; k++)
    for (int j = 0; j < ny; j++)
      for (int i = 0; i < nx; i++) {
        size_t x = (size_t)i + (size_t)nx * ((size_t)j + (size_t)ny * k);
        if (labels) ((uint8_t *)v->data)[x] = (uint8_t)(1 + (i * 7 + j * 3 + k) % 5);
        else ((float *)v->data)[x] = pattern ? mu * (float)(1.0 + 0.5 * sin(0.7 * i + 0.3 * j - 0.5 * k)) : mu;
      }
  if (xt_model_from_volume(v, labels ? "labels" : "dense", &m, NULL)) return NULL;
  return m;
}

static xt_affine translation(double x, double y, double z) {
  xt_affine t = xt_aff_identity();
  t.t[0] = x;
  t.t[1] = y;
  t.t[2] = z;
  return t;
}

/* The models of every kind, each small and off-centre. */
enum { K_DENSE, K_LABELS, K_GMM, K_INSTR, K_NVDB, K_N };
static const char *kind_names[K_N] = {"dense", "labels", "gmm", "instrument", "nvdb"};

static xt_model *make_kind(int k) {
  xt_model *m = NULL;
  switch (k) {
  case K_DENSE: m = cube_model(24, 20, 16, 2.0, 0.02f, 1, 0); break;
  case K_LABELS: m = cube_model(24, 20, 16, 2.0, 0, 0, 1); break;
  case K_GMM: {
    xt_gmm *g;
    if (xt_gmm_create(3, &g, NULL)) return NULL;
    const float c[3][3] = {{0, 0, 0}, {15, -8, 6}, {-12, 10, -5}};
    for (int i = 0; i < 3; i++) {
      memcpy(g->g[i].centre, c[i], sizeof c[i]);
      g->g[i].scale[0] = 6.0f + (float)i;
      g->g[i].scale[1] = 9.0f;
      g->g[i].scale[2] = 4.0f + 2.0f * (float)i;
      g->g[i].quat[0] = 0.9f;
      g->g[i].quat[1] = 0.1f * (float)i;
      g->g[i].quat[2] = 0.3f;
      g->g[i].quat[3] = -0.2f;
      g->g[i].rho = 0.05f;
    }
    if (xt_gmm_finish(g, "test", NULL) || xt_model_from_gmm(g, "gmm", &m, NULL)) return NULL;
    break;
  }
  case K_INSTR: {
    static xt_instr_device dev;
    if (xt_instr_catheter(&dev, "air", 64, NULL)) return NULL;
    double pts[3 * 6];
    for (int i = 0; i < 6; i++) {
      pts[3 * i] = -25.0 + 10.0 * i;
      pts[3 * i + 1] = 8.0 * sin(0.8 * i);
      pts[3 * i + 2] = 3.0 * cos(0.5 * i);
    }
    if (xt_model_from_instr(&dev, pts, 6, "wire", &m, NULL)) return NULL;
    break;
  }
  case K_NVDB: {
#ifdef XT_TEST_NVDB
    xt_model *d = cube_model(24, 20, 16, 2.0, 0.02f, 1, 0);
    xt_nvdb_build_options o = {XT_NVDB_Q_FLOAT, 0.0, 0.0, 0.0, NULL};
    uint32_t *w = NULL;
    uint64_t bytes = 0;
    xt_nvdb *g = NULL;
    xt_nvdb_load_options lo = {NULL, 0, 0};
    xt_msg msg;
    if (!d || xt_nvdb_build(xt_model_volume(d), &o, &w, &bytes, &msg) ||
        xt_nvdb_from_blob(w, bytes, &lo, "test", &g, &msg) || xt_model_from_nvdb(g, "nvdb", &m, &msg)) {
      fprintf(stderr, "nvdb: %s\n", msg.text);
      m = NULL;
    }
    xt_model_free(d);
#endif
    break;
  }
  }
  if (m) m->placement = translation(3.0, -4.0, 5.0); /* a placement of its own, that T composes onto */
  return m;
}

#endif /* XT_TEST_MOTION_H */
