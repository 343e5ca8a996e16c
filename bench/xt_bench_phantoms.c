/* The benchmark's generated phantoms: a 7-material head at the thesis's grid and a CT-like torso.
 * Painted from ellipsoids (last one containing a voxel centre wins), each ellipsoid visiting only
 * the voxels of its bounding box, so the 512^3 torso takes seconds, not minutes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_bench.h"
#include "xt_phantom.h"

typedef struct paint {
  double cx, cy, cz, ax, ay, az, phi, theta;
  int label;
} paint;

static void paint_all(uint8_t *lab, const int n[3], const double h[3], const paint *ps, int np) {
  for (int e = 0; e < np; e++) {
    const paint *p = &ps[e];
    xt_ellipsoid el = xt_ellipsoid_make(xt_v3(p->cx, p->cy, p->cz), xt_v3(p->ax, p->ay, p->az), p->phi, p->theta, 0,
                                        p->label);
    double r = p->ax > p->ay ? p->ax : p->ay;
    if (p->az > r) r = p->az;
    const double c[3] = {p->cx, p->cy, p->cz};
    int lo[3], hi[3];
    for (int a = 0; a < 3; a++) {
      double o = -0.5 * (n[a] - 1) * h[a]; /* centre of voxel 0 */
      lo[a] = (int)((c[a] - r - o) / h[a]) - 1;
      hi[a] = (int)((c[a] + r - o) / h[a]) + 1;
      if (lo[a] < 0) lo[a] = 0;
      if (hi[a] > n[a] - 1) hi[a] = n[a] - 1;
    }
    for (int k = lo[2]; k <= hi[2]; k++)
      for (int j = lo[1]; j <= hi[1]; j++)
        for (int i = lo[0]; i <= hi[0]; i++) {
          xt_vec3 x = xt_v3(-0.5 * (n[0] - 1) * h[0] + i * h[0], -0.5 * (n[1] - 1) * h[1] + j * h[1],
                            -0.5 * (n[2] - 1) * h[2] + k * h[2]);
          if (xt_ellipsoid_contains(&el, x)) lab[(size_t)i + (size_t)n[0] * ((size_t)j + (size_t)n[1] * k)] = (uint8_t)p->label;
        }
  }
}

/* Model frame: LPS mm, +x left, +y posterior, +z superior; the face is at -y. */
static const paint head[] = {
    {0, 0, 0, 76, 87, 106, 0, 0, XT_MAT_FAT},          /* subcutaneous fat */
    {0, 0, 0, 73, 84, 103, 0, 0, XT_MAT_SOFT},         /* scalp, muscle */
    {0, -12, -72, 56, 62, 34, 0, 0, XT_MAT_SOFT},      /* jaw and neck */
    {0, 0, 8, 70, 81, 94, 0, 0, XT_MAT_BONE},          /* skull */
    {0, 0, 10, 64.5, 75.5, 88, 0, 0, XT_MAT_BRAIN},    /* brain */
    {0, 4, -30, 50, 32, 7, 0, 0, XT_MAT_BONE},         /* skull base */
    {0, -54, -70, 44, 20, 11, 0, 0, XT_MAT_BONE},      /* mandible */
    {0, -66, -12, 14, 7, 9, 0, 0, XT_MAT_AIR},         /* frontal sinus */
    {12, 2, 22, 6, 24, 9, 10, 0, XT_MAT_BLOOD},        /* ventricles (blood as CSF) */
    {-12, 2, 22, 6, 24, 9, -10, 0, XT_MAT_BLOOD},
    {0, 70, 30, 3.5, 6, 55, 0, 20, XT_MAT_BLOOD},      /* sagittal sinus */
    {24, -4, -60, 2.8, 2.8, 42, 0, 8, XT_MAT_IODINE},  /* carotids */
    {-24, -4, -60, 2.8, 2.8, 42, 0, 8, XT_MAT_IODINE},
    {30, -6, 4, 26, 2.2, 2.2, 20, 0, XT_MAT_IODINE},   /* middle cerebral arteries */
    {-30, -6, 4, 26, 2.2, 2.2, -20, 0, XT_MAT_IODINE},
    {0, 12, -24, 2.2, 2.2, 24, 0, -15, XT_MAT_IODINE}, /* basilar */
    {20, -8, 8, 4, 4, 4.5, 0, 0, XT_MAT_METAL},        /* aneurysm coil */
    {18, -62, -62, 3, 4, 3, 0, 0, XT_MAT_METAL},       /* dental fillings */
    {-18, -62, -62, 3, 4, 3, 0, 0, XT_MAT_METAL},
};

static int labels_model(int n[3], double h[3], uint8_t **lab_out, xt_volume **vout, xt_msg *msg) {
  xt_volume *v;
  int rc = xt_volume_create(n[0], n[1], n[2], h, XT_VOXEL_U8, &v, msg);
  if (rc) return rc;
  *vout = v;
  *lab_out = (uint8_t *)v->data;
  return 0;
}

int xt_bench_head(int type, xt_model **out, xt_msg *msg) {
  int n[3] = {181, 178, 216};
  double h[3] = {1, 1, 1};
  xt_volume *v = NULL;
  uint8_t *lab;
  int rc = labels_model(n, h, &lab, &v, msg);
  if (rc) return rc;
  paint_all(lab, n, h, head, (int)(sizeof head / sizeof head[0]));
  xt_material_table *mt = calloc(1, sizeof *mt);
  if (!mt) {
    xt_volume_free(v);
    return xt_fail(msg, XT_ENOMEM, "bench head: out of memory");
  }
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, mt, msg))) {
    free(mt);
    xt_volume_free(v);
    return rc;
  }
  if (type == XT_VOXEL_F32) {
    xt_volume *f;
    if ((rc = xt_volume_create(n[0], n[1], n[2], h, XT_VOXEL_F32, &f, msg))) {
      free(mt);
      xt_volume_free(v);
      return rc;
    }
    size_t nv = xt_volume_voxels(v);
    for (size_t i = 0; i < nv; i++) ((float *)f->data)[i] = mt->mu[lab[i]];
    free(mt);
    xt_volume_free(v);
    v = f;
  } else {
    v->materials = mt;
  }
  if ((rc = xt_model_from_volume(v, type == XT_VOXEL_F32 ? "bench-head-mu" : "bench-head-labels", out, msg)))
    xt_volume_free(v);
  else
    (*out)->kind = type == XT_VOXEL_F32 ? XT_MODEL_DENSE : XT_MODEL_LABELS;
  return rc;
}

enum { CT_LUNG = 8, CT_LIVER = 9, CT_KIDNEY = 10, CT_COUNT = 11 };

int xt_bench_ct(int nn, double hh, xt_model **out, xt_msg *msg) {
  int n[3] = {nn, nn, nn};
  double h[3] = {hh, hh, hh};
  const double s = nn * hh / 256.0; /* the torso is laid out for a 256 mm cube */
  const paint torso[] = {
      {0, 0, 0, 125 * s, 95 * s, 200 * s, 0, 0, XT_MAT_FAT},
      {0, 0, 0, 117 * s, 87 * s, 200 * s, 0, 0, XT_MAT_SOFT},
      {0, 0, 70 * s, 112 * s, 84 * s, 5 * s, 0, 0, XT_MAT_BONE}, /* ribs as rings */
      {0, 0, 70 * s, 106 * s, 78 * s, 5 * s, 0, 0, XT_MAT_SOFT},
      {0, 0, 30 * s, 112 * s, 84 * s, 5 * s, 0, 0, XT_MAT_BONE},
      {0, 0, 30 * s, 106 * s, 78 * s, 5 * s, 0, 0, XT_MAT_SOFT},
      {0, 0, 105 * s, 110 * s, 82 * s, 5 * s, 0, 0, XT_MAT_BONE},
      {0, 0, 105 * s, 104 * s, 76 * s, 5 * s, 0, 0, XT_MAT_SOFT},
      {52 * s, 8 * s, 62 * s, 42 * s, 58 * s, 75 * s, 0, 0, CT_LUNG},
      {-52 * s, 8 * s, 62 * s, 42 * s, 58 * s, 75 * s, 0, 0, CT_LUNG},
      {12 * s, -18 * s, 45 * s, 40 * s, 34 * s, 38 * s, 25, 0, XT_MAT_BLOOD},
      {-45 * s, 0, -60 * s, 58 * s, 48 * s, 45 * s, 0, 0, CT_LIVER},
      {60 * s, 42 * s, -80 * s, 18 * s, 14 * s, 30 * s, 0, 0, CT_KIDNEY},
      {-60 * s, 42 * s, -85 * s, 18 * s, 14 * s, 30 * s, 0, 0, CT_KIDNEY},
      {0, 55 * s, 0, 16 * s, 16 * s, 200 * s, 0, 0, XT_MAT_BONE}, /* spine */
      {0, 60 * s, 0, 7 * s, 7 * s, 200 * s, 0, 0, XT_MAT_SOFT},   /* spinal canal */
      {4 * s, 30 * s, 0, 11 * s, 11 * s, 200 * s, 0, 0, XT_MAT_IODINE}, /* aorta with contrast */
      {4 * s, 30 * s, 10 * s, 11.5 * s, 11.5 * s, 18 * s, 0, 0, XT_MAT_METAL}, /* stent */
      {4 * s, 30 * s, 10 * s, 10.5 * s, 10.5 * s, 18 * s, 0, 0, XT_MAT_IODINE},
  };
  xt_volume *v = NULL, *f = NULL;
  uint8_t *lab;
  xt_material_table mt;
  int rc = labels_model(n, h, &lab, &v, msg);
  if (rc) return rc;
  paint_all(lab, n, h, torso, (int)(sizeof torso / sizeof torso[0]));
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg))) goto fail;
  float mu[256];
  memset(mu, 0, sizeof mu);
  for (int i = 0; i < XT_MAT_DEFAULT_COUNT; i++) mu[i] = mt.mu[i];
  mu[CT_LUNG] = 0.25f * mt.mu[XT_MAT_SOFT];
  mu[CT_LIVER] = 1.06f * mt.mu[XT_MAT_SOFT];
  mu[CT_KIDNEY] = 1.04f * mt.mu[XT_MAT_SOFT];
  if ((rc = xt_volume_create(n[0], n[1], n[2], h, XT_VOXEL_F32, &f, msg))) goto fail;
  size_t nv = xt_volume_voxels(v);
  uint32_t st = 12345u;
  for (size_t i = 0; i < nv; i++) {
    st = st * 1664525u + 1013904223u; /* texture noise, like CT's */
    float m = mu[lab[i]];
    ((float *)f->data)[i] = m > 0 ? m * (1.0f + 0.02f * ((float)(st >> 8) / 16777216.0f - 0.5f)) : 0.0f;
  }
  xt_volume_free(v);
  v = NULL;
  if ((rc = xt_model_from_volume(f, "bench-ct", out, msg))) goto fail;
  (*out)->kind = XT_MODEL_DENSE;
  return 0;
fail:
  xt_volume_free(v);
  xt_volume_free(f);
  return rc;
}

double xt_bench_nonair(const xt_volume *v) {
  size_t n = xt_volume_voxels(v), k = 0;
  for (size_t i = 0; i < n; i++) {
    float m = v->type == XT_VOXEL_F32 ? ((const float *)v->data)[i] : v->materials->mu[((const uint8_t *)v->data)[i]];
    k += m > 1e-4f; /* air's mu (~2e-6 /mm) counts as air */
  }
  return n ? (double)k / n : 0.0;
}
