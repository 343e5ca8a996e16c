/* Small fixed-size vector and affine-transform math, shared by host code and CUDA kernels.
 *
 * Everything here is static inline and XT_HOSTDEV so the CPU reference projector and the GPU
 * kernels evaluate the same formulas. Geometry is kept in double on the host; kernels convert
 * what they need to float once per frame. */
#ifndef XT_VEC_H
#define XT_VEC_H

#include <math.h>

#if defined(__CUDACC__)
#define XT_HOSTDEV __host__ __device__
#define XT_INLINE __forceinline__
#else
#define XT_HOSTDEV
#define XT_INLINE inline
#endif

#define XT_PI 3.14159265358979323846

typedef struct xt_vec3 {
  double x, y, z;
} xt_vec3;

/* Affine map y = M x + t; M row-major. */
typedef struct xt_affine {
  double m[3][3];
  double t[3];
} xt_affine;

static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3(double x, double y, double z) {
  xt_vec3 r = {x, y, z};
  return r;
}
static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3_add(xt_vec3 a, xt_vec3 b) { return xt_v3(a.x + b.x, a.y + b.y, a.z + b.z); }
static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3_sub(xt_vec3 a, xt_vec3 b) { return xt_v3(a.x - b.x, a.y - b.y, a.z - b.z); }
static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3_scale(xt_vec3 a, double s) { return xt_v3(a.x * s, a.y * s, a.z * s); }
static XT_INLINE XT_HOSTDEV double xt_v3_dot(xt_vec3 a, xt_vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3_cross(xt_vec3 a, xt_vec3 b) {
  return xt_v3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
static XT_INLINE XT_HOSTDEV double xt_v3_norm(xt_vec3 a) { return sqrt(xt_v3_dot(a, a)); }
static XT_INLINE XT_HOSTDEV xt_vec3 xt_v3_unit(xt_vec3 a) { return xt_v3_scale(a, 1.0 / xt_v3_norm(a)); }
static XT_INLINE XT_HOSTDEV double xt_v3_get(xt_vec3 a, int i) { return i == 0 ? a.x : (i == 1 ? a.y : a.z); }

static XT_INLINE XT_HOSTDEV xt_affine xt_aff_identity(void) {
  xt_affine a = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};
  return a;
}
static XT_INLINE XT_HOSTDEV xt_vec3 xt_aff_apply(const xt_affine *a, xt_vec3 p) {
  return xt_v3(a->m[0][0] * p.x + a->m[0][1] * p.y + a->m[0][2] * p.z + a->t[0],
               a->m[1][0] * p.x + a->m[1][1] * p.y + a->m[1][2] * p.z + a->t[1],
               a->m[2][0] * p.x + a->m[2][1] * p.y + a->m[2][2] * p.z + a->t[2]);
}
/* The linear part only: directions. */
static XT_INLINE XT_HOSTDEV xt_vec3 xt_aff_apply_dir(const xt_affine *a, xt_vec3 d) {
  return xt_v3(a->m[0][0] * d.x + a->m[0][1] * d.y + a->m[0][2] * d.z,
               a->m[1][0] * d.x + a->m[1][1] * d.y + a->m[1][2] * d.z,
               a->m[2][0] * d.x + a->m[2][1] * d.y + a->m[2][2] * d.z);
}
/* c = a ∘ b (apply b first). */
static XT_INLINE XT_HOSTDEV xt_affine xt_aff_compose(const xt_affine *a, const xt_affine *b) {
  xt_affine c;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++)
      c.m[i][j] = a->m[i][0] * b->m[0][j] + a->m[i][1] * b->m[1][j] + a->m[i][2] * b->m[2][j];
    c.t[i] = a->m[i][0] * b->t[0] + a->m[i][1] * b->t[1] + a->m[i][2] * b->t[2] + a->t[i];
  }
  return c;
}
static XT_INLINE XT_HOSTDEV double xt_aff_det(const xt_affine *a) {
  const double(*m)[3] = a->m;
  return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
         m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}
/* Inverse; returns 0 when the linear part is singular (|det| below eps). */
static XT_INLINE XT_HOSTDEV int xt_aff_invert(const xt_affine *a, xt_affine *out) {
  const double(*m)[3] = a->m;
  double det = xt_aff_det(a);
  if (!(fabs(det) > 1e-300)) return 0;
  double id = 1.0 / det;
  xt_affine r;
  r.m[0][0] = (m[1][1] * m[2][2] - m[1][2] * m[2][1]) * id;
  r.m[0][1] = (m[0][2] * m[2][1] - m[0][1] * m[2][2]) * id;
  r.m[0][2] = (m[0][1] * m[1][2] - m[0][2] * m[1][1]) * id;
  r.m[1][0] = (m[1][2] * m[2][0] - m[1][0] * m[2][2]) * id;
  r.m[1][1] = (m[0][0] * m[2][2] - m[0][2] * m[2][0]) * id;
  r.m[1][2] = (m[0][2] * m[1][0] - m[0][0] * m[1][2]) * id;
  r.m[2][0] = (m[1][0] * m[2][1] - m[1][1] * m[2][0]) * id;
  r.m[2][1] = (m[0][1] * m[2][0] - m[0][0] * m[2][1]) * id;
  r.m[2][2] = (m[0][0] * m[1][1] - m[0][1] * m[1][0]) * id;
  for (int i = 0; i < 3; i++) r.t[i] = -(r.m[i][0] * a->t[0] + r.m[i][1] * a->t[1] + r.m[i][2] * a->t[2]);
  *out = r;
  return 1;
}
/* Rotation about the z, y or x axis by an angle in radians (right-handed, active). */
static XT_INLINE XT_HOSTDEV xt_affine xt_aff_rot(int axis, double rad) {
  xt_affine r = xt_aff_identity();
  double c = cos(rad), s = sin(rad);
  int i = (axis + 1) % 3, j = (axis + 2) % 3;
  r.m[i][i] = c;
  r.m[i][j] = -s;
  r.m[j][i] = s;
  r.m[j][j] = c;
  return r;
}

#endif /* XT_VEC_H */
