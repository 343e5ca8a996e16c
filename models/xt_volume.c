/* Voxel volumes: allocation, validation, bounds. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "xt_model.h"

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
