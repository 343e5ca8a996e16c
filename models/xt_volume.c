/* Voxel volumes: allocation, validation, bounds; and the two voxel model kinds (DENSE, LABELS),
 * which share this payload and differ in how the channels and the sidecar read it. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "xt_model.h"
#include "xt_model_kind.h"

size_t xt_volume_voxels(const xt_volume *v) { return (size_t)v->dim[0] * (size_t)v->dim[1] * (size_t)v->dim[2]; }

int xt_volume_create(int nx, int ny, int nz, const double spacing[3], int type, xt_volume **out, xt_msg *msg) {
  const int d[3] = {nx, ny, nz};
  for (int a = 0; a < 3; a++) {
    if (d[a] < 1 || d[a] > XT_VOLUME_MAX_DIM)
      return xt_fail(msg, XT_ERANGE, "volume: dimension %d is %d, outside [1, %d]", a, d[a], XT_VOLUME_MAX_DIM);
    if (!(spacing[a] > 0) || !(spacing[a] < 1e4))
      return xt_fail(msg, XT_ERANGE, "volume: spacing %d is %g mm, outside (0, 1e4)", a, spacing[a]);
  }
  if (type != XT_VOXEL_F32 && type != XT_VOXEL_U8) return xt_fail(msg, XT_EINVAL, "volume: unknown voxel type %d", type);
  size_t n = (size_t)nx * (size_t)ny * (size_t)nz;
  if (n > XT_VOLUME_MAX_VOXELS)
    return xt_fail(msg, XT_ETOOLARGE, "volume: %d x %d x %d voxels exceed the limit of %zu", nx, ny, nz,
                   (size_t)XT_VOLUME_MAX_VOXELS);
  size_t elem = type == XT_VOXEL_F32 ? sizeof(float) : 1;
  xt_volume *v = calloc(1, sizeof *v);
  if (!v) return xt_fail(msg, XT_ENOMEM, "volume: out of memory");
  v->data = calloc(n, elem);
  if (!v->data) {
    free(v);
    return xt_fail(msg, XT_ENOMEM, "volume: out of memory for %zu bytes", n * elem);
  }
  v->nbytes = n * elem;
  v->type = type;
  v->index_to_model = xt_aff_identity();
  for (int a = 0; a < 3; a++) {
    v->dim[a] = d[a];
    v->spacing[a] = spacing[a];
    v->index_to_model.m[a][a] = spacing[a];
    v->index_to_model.t[a] = -0.5 * (d[a] - 1) * spacing[a];
  }
  *out = v;
  return 0;
}

void xt_volume_free(xt_volume *v) {
  if (!v) return;
  free(v->data);
  free(v->materials);
  free(v);
}

double xt_volume_mu(const xt_volume *v, int i, int j, int k) {
  size_t lin = (size_t)i + (size_t)v->dim[0] * ((size_t)j + (size_t)v->dim[1] * (size_t)k);
  if (v->type == XT_VOXEL_F32) return ((const float *)v->data)[lin];
  return v->materials->mu[((const uint8_t *)v->data)[lin]];
}

int xt_volume_validate(const xt_volume *v, const char *what, xt_msg *msg) {
  size_t n = xt_volume_voxels(v);
  if (v->type == XT_VOXEL_F32) {
    const float *f = v->data;
    for (size_t i = 0; i < n; i++)
      if (!isfinite(f[i])) return xt_fail(msg, XT_ENANDATA, "%s: voxel %zu is not finite (%g)", what, i, (double)f[i]);
  } else {
    if (!v->materials) return xt_fail(msg, XT_EINVAL, "%s: label volume without a material table", what);
    const uint8_t *u = v->data;
    for (size_t i = 0; i < n; i++)
      if (u[i] >= v->materials->count)
        return xt_fail(msg, XT_ERANGE, "%s: voxel %zu has label %d but the material table has %d entries", what, i,
                       u[i], v->materials->count);
  }
  double det = xt_aff_det(&v->index_to_model);
  if (!(fabs(det) > 0) || !isfinite(det)) return xt_fail(msg, XT_EFORMAT, "%s: degenerate voxel-to-mm transform", what);
  return 0;
}

void xt_volume_bounds(const xt_volume *v, xt_vec3 *lo, xt_vec3 *hi) {
  double l[3] = {INFINITY, INFINITY, INFINITY}, h[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int c = 0; c < 8; c++) {
    xt_vec3 p = xt_v3((c & 1) ? v->dim[0] - 0.5 : -0.5, (c & 2) ? v->dim[1] - 0.5 : -0.5, (c & 4) ? v->dim[2] - 0.5 : -0.5);
    xt_vec3 q = xt_aff_apply(&v->index_to_model, p);
    for (int a = 0; a < 3; a++) {
      double x = xt_v3_get(q, a);
      if (x < l[a]) l[a] = x;
      if (x > h[a]) h[a] = x;
    }
  }
  *lo = xt_v3(l[0], l[1], l[2]);
  *hi = xt_v3(h[0], h[1], h[2]);
}

/* ------------------------------------------------------------------------------------------ */
/* The DENSE and LABELS kinds                                                                 */
/* ------------------------------------------------------------------------------------------ */

int xt_model_from_volume(xt_volume *v, const char *name, xt_model **out, xt_msg *msg) {
  return xt_model_create(v->type == XT_VOXEL_U8 ? XT_MODEL_LABELS : XT_MODEL_DENSE, v, name ? name : "model", out, msg);
}

static void volume_free(void *payload) { xt_volume_free(payload); }

static int volume_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi) {
  xt_volume_bounds(xt_model_volume(m), lo, hi);
  return 0;
}

static void affine34(const xt_json_out *o, const char *key, const xt_affine *a) {
  o->begin(o->ctx, key, 1);
  for (int i = 0; i < 3; i++) {
    o->begin(o->ctx, NULL, 1);
    for (int j = 0; j < 3; j++) o->real(o->ctx, NULL, a->m[i][j]);
    o->real(o->ctx, NULL, a->t[i]);
    o->end(o->ctx);
  }
  o->end(o->ctx);
}

static void material_table(const xt_json_out *o, const xt_material_table *t) {
  o->begin(o->ctx, "materials", 0);
  o->real(o->ctx, "energy_kev", t->energy_kev);
  o->string(o->ctx, "source", t->source);
  o->begin(o->ctx, "entries", 1);
  for (int i = 0; i < t->count && i < XT_MAX_MATERIALS; i++) {
    char name[XT_MATERIAL_NAME_MAX + 1]; /* a full-length name has no NUL of its own */
    memcpy(name, t->name[i], XT_MATERIAL_NAME_MAX);
    name[XT_MATERIAL_NAME_MAX] = 0;
    o->begin(o->ctx, NULL, 0);
    o->integer(o->ctx, "label", i);
    o->string(o->ctx, "name", name);
    o->real(o->ctx, "mu_per_mm", t->mu[i]);
    o->real(o->ctx, "density_g_cm3", t->density[i]);
    o->end(o->ctx);
  }
  o->end(o->ctx);
  o->end(o->ctx);
}

static void volume_describe(const xt_model *m, xt_model_view view, const xt_json_out *o) {
  const xt_volume *v = xt_model_volume(m);
  switch (view) {
  case XT_MODEL_VIEW_REPORT:
    o->begin(o->ctx, "dim", 1);
    for (int a = 0; a < 3; a++) o->integer(o->ctx, NULL, v->dim[a]);
    o->end(o->ctx);
    o->begin(o->ctx, "spacing_mm", 1);
    for (int a = 0; a < 3; a++) o->real(o->ctx, NULL, v->spacing[a]);
    o->end(o->ctx);
    o->integer(o->ctx, "bytes", (int64_t)v->nbytes);
    o->integer(o->ctx, "voxels", (int64_t)xt_volume_voxels(v));
    o->real(o->ctx, "active_fraction", 1.0);
    break;
  case XT_MODEL_VIEW_SIDECAR:
    o->begin(o->ctx, "dims", 1);
    for (int a = 0; a < 3; a++) o->integer(o->ctx, NULL, v->dim[a]);
    o->end(o->ctx);
    o->begin(o->ctx, "spacing_mm", 1);
    for (int a = 0; a < 3; a++) o->real(o->ctx, NULL, v->spacing[a]);
    o->end(o->ctx);
    o->string(o->ctx, "voxel_type", v->type == XT_VOXEL_U8 ? "uint8 label" : "float32 mu (1/mm)");
    affine34(o, "index_to_model", &v->index_to_model);
    o->string(o->ctx, "index_to_model_note", "3x4 [M | t]: voxel-centre index (i,j,k) -> model mm (LPS)");
    break;
  case XT_MODEL_VIEW_SIDECAR_TABLE:
    if (v->materials) material_table(o, v->materials);
    break;
  case XT_MODEL_VIEW_BRIEF: break;
  }
}

static int volume_matter(const xt_model *m, xt_model_matter *out, xt_msg *msg) {
  const xt_volume *v = xt_model_volume(m);
  if (!v) return xt_fail(msg, XT_EINVAL, "channels: model %s has no volume", m->name);
  if (m->kind == XT_MODEL_LABELS) {
    out->kind = XT_MATTER_LABELS;
    out->table = v->materials;
  } else {
    out->kind = XT_MATTER_MU_CLASSES;
  }
  out->energy_kev = v->energy_kev > 0 ? v->energy_kev : XT_DEFAULT_ENERGY_KEV;
  return 0;
}

/* The projectors upload the voxels as they are: one linear copy. */
static uint64_t volume_device_bytes(const xt_model *m) { return xt_model_volume(m)->nbytes; }

const xt_model_kind_ops xt_model_kind_dense = {.name = "dense",
                                               .free = volume_free,
                                               .bounds = volume_bounds,
                                               .describe = volume_describe,
                                               .matter = volume_matter,
                                               .device_bytes = volume_device_bytes};
const xt_model_kind_ops xt_model_kind_labels = {.name = "labels",
                                                .free = volume_free,
                                                .bounds = volume_bounds,
                                                .describe = volume_describe,
                                                .matter = volume_matter,
                                                .device_bytes = volume_device_bytes};
