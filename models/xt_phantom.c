/* Analytic ellipsoid phantoms: the 3D Shepp-Logan head, exact chords, voxelisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_phantom.h"

xt_ellipsoid xt_ellipsoid_make(xt_vec3 center, xt_vec3 semi, double phi_deg, double theta_deg, double mu, int label) {
  xt_ellipsoid e;
  memset(&e, 0, sizeof e);
  e.center = center;
  e.semi = semi;
  xt_affine rz = xt_aff_rot(2, phi_deg * XT_PI / 180.0), rx = xt_aff_rot(0, theta_deg * XT_PI / 180.0);
  xt_affine r = xt_aff_compose(&rx, &rz);
  memcpy(e.R, r.m, sizeof e.R);
  e.mu = mu;
  e.label = label;
  return e;
}

/* Point in the ellipsoid's unit-sphere frame: S^-1 R^T (x - c). */
static xt_vec3 to_unit(const xt_ellipsoid *e, xt_vec3 x, int is_dir) {
  xt_vec3 d = is_dir ? x : xt_v3_sub(x, e->center);
  double s[3] = {e->semi.x, e->semi.y, e->semi.z}, r[3];
  for (int j = 0; j < 3; j++) r[j] = (e->R[0][j] * d.x + e->R[1][j] * d.y + e->R[2][j] * d.z) / s[j];
  return xt_v3(r[0], r[1], r[2]);
}

int xt_ellipsoid_contains(const xt_ellipsoid *e, xt_vec3 x) {
  xt_vec3 p = to_unit(e, x, 0);
  return xt_v3_dot(p, p) <= 1.0;
}

double xt_ellipsoid_chord(const xt_ellipsoid *e, xt_vec3 a, xt_vec3 b) {
  xt_vec3 ab = xt_v3_sub(b, a);
  double len = xt_v3_norm(ab);
  if (!(len > 0)) return 0.0;
  xt_vec3 p = to_unit(e, a, 0), q = to_unit(e, ab, 1);
  /* |p + t q|^2 = 1 for t in [0, 1] */
  double A = xt_v3_dot(q, q), B = xt_v3_dot(p, q), C = xt_v3_dot(p, p) - 1.0;
  double disc = B * B - A * C;
  if (!(disc > 0) || !(A > 0)) return 0.0;
  double sq = sqrt(disc);
  /* Stable roots: avoid cancelling -B against sq. */
  double qq = -(B + (B >= 0 ? sq : -sq));
  double t0 = qq / A, t1 = C / qq;
  if (qq == 0) t0 = t1 = 0;
  if (t0 > t1) {
    double t = t0;
    t0 = t1;
    t1 = t;
  }
  if (t0 < 0) t0 = 0;
  if (t1 > 1) t1 = 1;
  return t1 > t0 ? (t1 - t0) * len : 0.0;
}

double xt_phantom_line_integral(const xt_phantom *p, xt_vec3 a, xt_vec3 b) {
  double s = 0;
  for (int i = 0; i < p->count; i++) s += p->e[i].mu * xt_ellipsoid_chord(&p->e[i], a, b);
  return s;
}

/* Kak & Slaney's 3D extension of the Shepp-Logan head (Principles of Computerized Tomographic
 * Imaging, 1988): semi-axes, centres (phantom units), rotation about z (degrees) and additive
 * density relative to the surrounding soft tissue. Phantom +x = patient left, +y = anterior,
 * +z = superior; the LPS model frame therefore takes y -> -y. */
typedef struct sl_row {
  double a, b, c, x, y, z, phi, rho;
  int label;
} sl_row;
static const sl_row shepp_logan[] = {
    {0.69, 0.92, 0.90, 0, 0, 0, 0, 2.0, XT_MAT_BONE},            /* skull */
    {0.6624, 0.874, 0.88, 0, -0.0184, 0, 0, -0.98, XT_MAT_BRAIN}, /* brain */
    {0.11, 0.31, 0.21, 0.22, 0, -0.25, -18, -0.02, XT_MAT_SOFT},  /* right ventricle */
    {0.16, 0.41, 0.22, -0.22, 0, -0.25, 18, -0.02, XT_MAT_SOFT},  /* left ventricle */
    {0.21, 0.25, 0.35, 0, 0.35, -0.25, 0, 0.01, XT_MAT_BLOOD},
    {0.046, 0.046, 0.046, 0, 0.1, -0.25, 0, 0.01, XT_MAT_BLOOD},
    {0.046, 0.046, 0.02, 0, -0.1, -0.25, 0, 0.01, XT_MAT_BLOOD},
    {0.046, 0.023, 0.02, -0.08, -0.605, -0.25, 0, 0.01, XT_MAT_BLOOD},
    {0.023, 0.023, 0.1, 0, -0.605, -0.25, 0, 0.01, XT_MAT_BLOOD},
    {0.023, 0.046, 0.1, 0.06, -0.605, -0.25, 0, 0.01, XT_MAT_BLOOD},
};

int xt_phantom_shepp_logan(double scale_mm, const xt_material_table *mt, xt_phantom *out, xt_msg *msg) {
  if (!(scale_mm > 0 && scale_mm < 1e4)) return xt_fail(msg, XT_ERANGE, "shepp-logan: scale %g mm out of range", scale_mm);
  if (!mt || mt->count <= XT_MAT_BLOOD) return xt_fail(msg, XT_EINVAL, "shepp-logan: needs the default material table");
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "shepp-logan-3d");
  double unit_mu = mt->mu[XT_MAT_SOFT];
  out->count = (int)(sizeof shepp_logan / sizeof shepp_logan[0]);
  for (int i = 0; i < out->count; i++) {
    const sl_row *s = &shepp_logan[i];
    /* y -> -y mirrors the phantom; a mirrored rotation about z is the opposite angle. */
    out->e[i] = xt_ellipsoid_make(xt_v3(s->x * scale_mm, -s->y * scale_mm, s->z * scale_mm),
                                  xt_v3(s->a * scale_mm, s->b * scale_mm, s->c * scale_mm), -s->phi, 0,
                                  s->rho * unit_mu, s->label);
  }
  return 0;
}

int xt_phantom_voxelize(const xt_phantom *p, const int dim[3], const double spacing[3], int type,
                        const xt_material_table *mt, xt_volume **out, xt_msg *msg) {
  if (type == XT_VOXEL_U8 && !mt) return xt_fail(msg, XT_EINVAL, "voxelize: labels need a material table");
  xt_volume *v;
  int rc = xt_volume_create(dim[0], dim[1], dim[2], spacing, type, &v, msg);
  if (rc) return rc;
  if (type == XT_VOXEL_U8) {
    v->materials = malloc(sizeof *v->materials);
    if (!v->materials) {
      xt_volume_free(v);
      return xt_fail(msg, XT_ENOMEM, "voxelize: out of memory");
    }
    *v->materials = *mt;
  }
  xt_affine m2i;
  xt_aff_invert(&v->index_to_model, &m2i); /* diagonal with positive spacing: never singular */
  for (int n = 0; n < p->count; n++) {
    const xt_ellipsoid *e = &p->e[n];
    /* Index-space bounding box of the ellipsoid: half extent along axis i is |row i of R S|. */
    int lo[3], hi[3];
    double s[3] = {e->semi.x, e->semi.y, e->semi.z};
    for (int a = 0; a < 3; a++) {
      double h = sqrt(pow(e->R[a][0] * s[0], 2) + pow(e->R[a][1] * s[1], 2) + pow(e->R[a][2] * s[2], 2));
      double c = xt_v3_get(e->center, a);
      double i0 = (c - h - v->index_to_model.t[a]) / spacing[a], i1 = (c + h - v->index_to_model.t[a]) / spacing[a];
      lo[a] = (int)fmax(0, floor(i0));
      hi[a] = (int)fmin(dim[a] - 1, ceil(i1));
    }
    for (int k = lo[2]; k <= hi[2]; k++)
      for (int j = lo[1]; j <= hi[1]; j++)
        for (int i = lo[0]; i <= hi[0]; i++) {
          xt_vec3 x = xt_aff_apply(&v->index_to_model, xt_v3(i, j, k));
          if (!xt_ellipsoid_contains(e, x)) continue;
          size_t lin = (size_t)i + (size_t)dim[0] * ((size_t)j + (size_t)dim[1] * (size_t)k);
          if (type == XT_VOXEL_F32) ((float *)v->data)[lin] += (float)e->mu;
          else ((uint8_t *)v->data)[lin] = (uint8_t)e->label;
        }
  }
  *out = v;
  return 0;
}

int xt_phantom_head_model(const int dim[3], double spacing_mm, int type, xt_model **out, xt_msg *msg) {
  xt_material_table mt;
  xt_phantom ph;
  xt_volume *v;
  int rc;
  const int def[3] = {256, 256, 256};
  if (!dim) dim = def;
  double sp[3] = {spacing_mm, spacing_mm, spacing_mm};
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg)) || (rc = xt_phantom_shepp_logan(100.0, &mt, &ph, msg)) ||
      (rc = xt_phantom_voxelize(&ph, dim, sp, type, &mt, &v, msg)))
    return rc;
  v->energy_kev = mt.energy_kev;
  rc = xt_model_from_volume(v, type == XT_VOXEL_U8 ? "head-labels" : "head", out, msg);
  if (rc) xt_volume_free(v);
  return rc;
}

int xt_phantom_slab_model(const char *material, double density, const double size_mm[3], double voxel_mm,
                          xt_model **out, xt_msg *msg) {
  *out = NULL;
  const int b = material ? xt_basis_find(material) : -1;
  if (b < 0) return xt_fail(msg, XT_EINVAL, "slab: \"%s\" is no basis material", material ? material : "(null)");
  if (!(density > 0) || !(voxel_mm > 0)) return xt_fail(msg, XT_ERANGE, "slab: density and voxel size must be > 0");
  int dim[3];
  for (int a = 0; a < 3; a++) {
    const double n = size_mm[a] / voxel_mm;
    /* whole voxels only: the slab's faces are then the voxel grid's, and a chord through it exact */
    if (!(n >= 1 && n <= XT_VOLUME_MAX_DIM) || fabs(n - floor(n + 0.5)) > 1e-9)
      return xt_fail(msg, XT_ERANGE, "slab: side %g mm is not a whole number of %g mm voxels", size_mm[a], voxel_mm);
    dim[a] = (int)floor(n + 0.5);
  }
  double mr = 0;
  int rc = xt_basis_mass_atten(b, XT_DEFAULT_ENERGY_KEV, &mr, msg);
  if (rc) return rc;
  const double sp[3] = {voxel_mm, voxel_mm, voxel_mm};
  xt_volume *v = NULL;
  if ((rc = xt_volume_create(dim[0], dim[1], dim[2], sp, XT_VOXEL_U8, &v, msg))) return rc;
  v->materials = calloc(1, sizeof *v->materials);
  if (!v->materials) {
    xt_volume_free(v);
    return xt_fail(msg, XT_ENOMEM, "slab: out of memory");
  }
  /* label 0 is unused (no material, no channel); label 1 is the slab's material (xt_material_basis
   * finds a basis material by its name) */
  xt_material_table *t = v->materials;
  t->count = 2;
  t->energy_kev = XT_DEFAULT_ENERGY_KEV;
  t->mu[1] = (float)(mr * density / 10.0);
  t->density[1] = density;
  snprintf(t->name[1], XT_MATERIAL_NAME_MAX, "%s", material);
  snprintf(t->source, sizeof t->source, "xraylib 4.0 NIST compound data (elemental CS_Total by mass fraction) at %.1f keV",
           XT_DEFAULT_ENERGY_KEV);
  memset(v->data, 1, v->nbytes);
  v->energy_kev = XT_DEFAULT_ENERGY_KEV;
  char name[64];
  snprintf(name, sizeof name, "%s-slab", material);
  rc = xt_model_from_volume(v, name, out, msg);
  if (rc) xt_volume_free(v);
  return rc;
}
