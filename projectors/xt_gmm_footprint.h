/* The Gaussian kind's per-frame math, written once for the CUDA kernels (proj_gmm.cu) and for
 * host-side checks: a Gaussian's footprint on the detector (two quadratic forms in pixel
 * offsets), the silhouette conic of its cut-off ellipsoid and the tiles that conic touches, and
 * one Gaussian's term at one pixel. C++ (nvcc) only: CUDA vector types and __align__.
 *
 * The footprint (docs/projector.md). In the model's frame, a pixel at offsets (dx, dy) from the
 * Gaussian's projected centre has the ray direction e = e0 + dx U + dy V (e0: source to that
 * centre on the detector, U, V: one pixel along the detector axes). With E = e0^T P e0 and
 * r = source - centre = -e0 / t, the ray's squared Mahalanobis distance is
 *   m^2 = [(e0^T P e0)(f^T P f) - (f^T P e0)^2] / (t^2 E Dn),  f = dx U + dy V,
 *   Dn  = e^T P e / E = 1 + 2 (l1 dx + l2 dy) + a0 dx^2 + 2 a1 dx dy + a2 dy^2,
 * a ratio of two quadratic forms whose coefficients are computed once per Gaussian in double.
 * The numerator is a Gram determinant: the large e0 terms cancel algebraically, not in floating
 * point, so float evaluation per pixel keeps ~1e-7 relative accuracy in m^2 where the direct form
 * c - b^2/a would lose everything (the source is ~800 mm away). The line integral along the
 * whole ray is rho sqrt(2 pi / a) exp(-m^2/2) with a = E Dn / len^2:
 *   L = len * [rho sqrt(2 pi) / sqrt(E)] * Dn^(-1/2) * exp(-m^2 / 2),
 * len the source-pixel distance (one factor per pixel). Gaussians whose cut-off ellipsoid
 * crosses the detector plane take the erf form over [0, len] instead (the reference's segment);
 * those wholly beyond it meet no ray segment; those reaching behind the source's plane (inside
 * the X-ray tube) are skipped. */
#ifndef XT_GMM_FOOTPRINT_H
#define XT_GMM_FOOTPRINT_H

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "xt_cuda_config.h"
#include "xt_geom.h"
#include "xt_gmm.h"
}

/* The detector in one model's frame: source S, pixel (0,0) centre O, one pixel along each axis
 * U and V, the unit normal n towards the detector, the detector's depth ddet = n.(O - S), and
 * the dual basis (Ud, Vd) that reads pixel coordinates off a point of the plane. */
typedef struct gmm_cam {
  double S[3], O[3], U[3], V[3], n[3], Ud[3], Vd[3];
  double ddet;
  int ok, pad;
} gmm_cam;

/* Per (frame, Gaussian), what the render needs (64 bytes, float4-loadable). */
typedef struct __align__(16) gmm_screen {
  int xi, yi;          /* projected centre, integer part (pixel coordinates) */
  float xf, yf;        /* and fraction */
  float amp;           /* rho sqrt(2 pi) / sqrt(E) */
  float nm0, nm1, nm2; /* m^2 numerator / (t^2 E): nm0 dx^2 + nm1 dx dy + nm2 dy^2 (nm1 doubled) */
  float l1, l2;        /* Dn = 1 + l1 dx + l2 dy + a0 dx^2 + a1 dx dy + a2 dy^2 (l, a1 doubled) */
  float a0, a1;
  float a2;
  float hE;  /* sqrt(E / 2) when the segment must be truncated at the detector, else 0 */
  float tm1; /* t - 1 (t = detector distance / centre distance along the central ray) */
  float k2;  /* cut-off radius squared */
} gmm_screen;

/* The silhouette conic of the cut-off ellipsoid in absolute pixel coordinates,
 * a u^2 + 2 b u v + g v^2 <= r (u = col - cx, v = row - cy), kept in the form its band test uses
 * (computed in double, stored in float): ia = 1/a, ar = a r, det = a g - b^2, the half-extents
 * hu, hv, the v of the leftmost point vl (the rightmost is at -vl), the widening eps, and the tile
 * rows ty0..ty1. whole != 0: the Gaussian covers every tile. */
typedef struct __align__(16) gmm_conic {
  float cx, cy, b, ia;
  float ar, det, hu, hv;
  float vl, eps;
  int16_t ty0, ty1;
  int whole;
} gmm_conic;

static_assert(sizeof(gmm_screen) == 64, "screen record is 64 bytes");
static_assert(sizeof(gmm_conic) == 48, "conic record is 48 bytes");

static XT_INLINE XT_HOSTDEV double xt_dot3(const double a[3], const double b[3]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/* Host: the detector of geometry g in the frame of a model with this placement; 0 when the
 * placement is singular. In double, per frame. */
static inline int xt_gmm_cam_fill(const xt_geometry *g, const xt_affine *placement, gmm_cam *c) {
  const xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  xt_affine m2w = xt_aff_compose(&p2w, placement), w2m;
  memset(c, 0, sizeof *c);
  if (!xt_aff_invert(&m2w, &w2m)) return 0;
  const xt_vec3 S = xt_aff_apply(&w2m, g->source), O = xt_aff_apply(&w2m, g->det_origin);
  const xt_vec3 U = xt_v3_scale(xt_aff_apply_dir(&w2m, g->u), g->mode.pitch_u_mm);
  const xt_vec3 V = xt_v3_scale(xt_aff_apply_dir(&w2m, g->v), g->mode.pitch_v_mm);
  xt_vec3 n = xt_v3_cross(U, V);
  const double nn = xt_v3_norm(n);
  if (!(nn > 0)) return 0;
  n = xt_v3_scale(n, 1.0 / nn);
  double dd = xt_v3_dot(n, xt_v3_sub(O, S));
  if (dd < 0) {
    n = xt_v3_scale(n, -1.0);
    dd = -dd;
  }
  if (!(dd > 0)) return 0;
  /* dual basis: rows of [U V n]^-1 */
  xt_affine B = xt_aff_identity(), Bi;
  const xt_vec3 cols3[3] = {U, V, n};
  for (int a = 0; a < 3; a++)
    for (int k = 0; k < 3; k++) B.m[k][a] = xt_v3_get(cols3[a], k);
  if (!xt_aff_invert(&B, &Bi)) return 0;
  const xt_vec3 vs[5] = {S, O, U, V, n};
  double *dst[5] = {c->S, c->O, c->U, c->V, c->n};
  for (int k = 0; k < 5; k++) {
    dst[k][0] = vs[k].x;
    dst[k][1] = vs[k].y;
    dst[k][2] = vs[k].z;
  }
  for (int k = 0; k < 3; k++) {
    c->Ud[k] = Bi.m[0][k];
    c->Vd[k] = Bi.m[1][k];
  }
  c->ddet = dd;
  c->ok = 1;
  return 1;
}

/* sqrt for the band test: approximate on the device (the band's widening covers its error). */
#ifdef __CUDA_ARCH__
static __device__ __forceinline__ float xt_gmm_sqrt(float x) {
  float r;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
#else
static inline float xt_gmm_sqrt(float x) { return sqrtf(x); }
#endif

/* The conic's x-interval over the pixel-centre rows [ya, yb] (absolute pixel coordinates),
 * widened by eps pixels so that float rounding never drops a pixel centre inside it: AccuTile's
 * exact test, per band of rows. 0 when the band misses the conic. */
static XT_INLINE XT_HOSTDEV int xt_gmm_band(const gmm_conic &q, float ya, float yb, float *xlo, float *xhi) {
  if (q.whole) {
    *xlo = -1e30f;
    *xhi = 1e30f;
    return 1;
  }
  const float v0 = fmaxf(ya - q.cy - q.eps, -q.hv), v1 = fminf(yb - q.cy + q.eps, q.hv);
  if (v0 > v1) return 0;
  const float d0 = xt_gmm_sqrt(fmaxf(0.f, q.ar - q.det * v0 * v0)), d1 = xt_gmm_sqrt(fmaxf(0.f, q.ar - q.det * v1 * v1));
  const float bv0 = q.b * v0, bv1 = q.b * v1;
  const float umin = (q.vl >= v0 && q.vl <= v1) ? -q.hu : fminf(-bv0 - d0, -bv1 - d1) * q.ia;
  const float umax = (-q.vl >= v0 && -q.vl <= v1) ? q.hu : fmaxf(-bv0 + d0, -bv1 + d1) * q.ia;
  *xlo = q.cx + umin - q.eps;
  *xhi = q.cx + umax + q.eps;
  return 1;
}

/* The tiles of conic q in tile row ty: [*tx0, *tx1] (empty when *tx0 > *tx1). Counting
 * (preprocess) and writing (duplicate) call this same function on the same record. */
static XT_INLINE XT_HOSTDEV void xt_gmm_row_span(const gmm_conic &q, int ty, int ntx, int *tx0, int *tx1) {
  const int TW = XT_GMM_TILE_W, TH = XT_GMM_TILE_H;
  float xlo, xhi;
  *tx0 = 1;
  *tx1 = 0;
  if (!xt_gmm_band(q, (float)(ty * TH), (float)(ty * TH + TH - 1), &xlo, &xhi)) return;
  const float a = ceilf((xlo - (float)(TW - 1)) / (float)TW), b = floorf(xhi / (float)TW);
  *tx0 = a < 0.f ? 0 : (int)a;
  *tx1 = b > (float)(ntx - 1) ? ntx - 1 : (int)b;
}

/* Which warps of the tile at (x0, y0) the conic reaches: bit w for warp w's XT_GMM_WARP_W x
 * XT_GMM_WARP_H sub-tile (warps row-major within the tile). */
static XT_INLINE XT_HOSTDEV uint32_t xt_gmm_warp_mask(const gmm_conic &q, int x0, int y0) {
  const int WW = XT_GMM_WARP_W, WH = XT_GMM_WARP_H, NX = XT_GMM_TILE_W / WW, NY = XT_GMM_TILE_H / WH;
  uint32_t m = 0;
  for (int by = 0; by < NY; by++) {
    float xlo, xhi;
    if (!xt_gmm_band(q, (float)(y0 + by * WH), (float)(y0 + by * WH + WH - 1), &xlo, &xhi)) continue;
    for (int bx = 0; bx < NX; bx++)
      if (xhi >= (float)(x0 + bx * WW) && xlo <= (float)(x0 + bx * WW + WW - 1)) m |= 1u << (by * NX + bx);
  }
  return m;
}

/* A Gaussian whose cut-off ellipsoid reaches the source's plane (a body-sized Gaussian, or one
 * near the tube): no bounded footprint, so every tile, and per pixel the closest-point terms as
 * polynomials in absolute pixel coordinates, e = e00 + col U + row V (source to pixel):
 *   D = e^T P e (quadratic), B = e^T P r (linear), C = r^T P r, r = source - centre,
 *   m^2 = C - B^2 / D, and the segment's erf form with x0 = B / sqrt(2D), x1 = (D + B) / sqrt(2D).
 * No cancellation hurts here: such a Gaussian is large against its distance from the source. The
 * record's fields are reused (hE = -1 marks it; xt_gmm_term). */
static XT_INLINE XT_HOSTDEV uint32_t xt_gmm_generic(const xt_gaussian &G, const gmm_cam &c, const double P[3][3],
                                                    double k, int ntx, int nty, gmm_screen *o, gmm_conic *q) {
  const double r[3] = {c.S[0] - G.centre[0], c.S[1] - G.centre[1], c.S[2] - G.centre[2]};
  const double e00[3] = {c.O[0] - c.S[0], c.O[1] - c.S[1], c.O[2] - c.S[2]};
  double Pe[3], PU[3], PV[3], Pr[3];
  for (int i = 0; i < 3; i++) {
    Pe[i] = P[i][0] * e00[0] + P[i][1] * e00[1] + P[i][2] * e00[2];
    PU[i] = P[i][0] * c.U[0] + P[i][1] * c.U[1] + P[i][2] * c.U[2];
    PV[i] = P[i][0] * c.V[0] + P[i][1] * c.V[1] + P[i][2] * c.V[2];
    Pr[i] = P[i][0] * r[0] + P[i][1] * r[1] + P[i][2] * r[2];
  }
  o->xi = o->yi = 0;
  o->xf = (float)xt_dot3(r, Pr);              /* C */
  o->yf = 0.f;
  o->amp = (float)(G.rho * sqrt(0.5 * XT_PI)); /* rho sqrt(pi/2) */
  o->nm0 = (float)xt_dot3(c.U, PU);            /* D: col^2 */
  o->nm1 = (float)(2.0 * xt_dot3(c.U, PV));    /* col row */
  o->nm2 = (float)xt_dot3(c.V, PV);            /* row^2 */
  o->l1 = (float)(2.0 * xt_dot3(c.U, Pe));     /* col */
  o->l2 = (float)(2.0 * xt_dot3(c.V, Pe));     /* row */
  o->a0 = (float)xt_dot3(e00, Pe);             /* 1 */
  o->a1 = (float)xt_dot3(e00, Pr);             /* B: 1 */
  o->a2 = (float)xt_dot3(c.U, Pr);             /* col */
  o->tm1 = (float)xt_dot3(c.V, Pr);            /* row */
  o->hE = -1.f;
  o->k2 = (float)(k * k);
  memset(q, 0, sizeof *q);
  q->whole = 1;
  q->ty0 = 0;
  q->ty1 = (int16_t)(nty - 1);
  return (uint32_t)ntx * (uint32_t)nty;
}

/* The footprint of one Gaussian with cut-off k in double: its screen and conic records and the
 * number of tiles it touches on a cols x rows detector (ntx x nty tiles); 0 when culled. */
static XT_INLINE XT_HOSTDEV uint32_t xt_gmm_footprint(const xt_gaussian &G, const gmm_cam &c, double k, int cols,
                                                      int ntx, int nty, gmm_screen *o, gmm_conic *q) {
  const int TH = XT_GMM_TILE_H;
  /* R from the quaternion's direction (as xt_gmm_rotation), P = R diag(1/s^2) R^T */
  const double w = G.quat[0], x = G.quat[1], y = G.quat[2], z = G.quat[3];
  const double qs = 1.0 / (w * w + x * x + y * y + z * z);
  const double R[3][3] = {{(w * w + x * x - y * y - z * z) * qs, 2 * (x * y - w * z) * qs, 2 * (x * z + w * y) * qs},
                          {2 * (x * y + w * z) * qs, (w * w - x * x + y * y - z * z) * qs, 2 * (y * z - w * x) * qs},
                          {2 * (x * z - w * y) * qs, 2 * (y * z + w * x) * qs, (w * w - x * x - y * y + z * z) * qs}};
  const double s0 = G.scale[0], s1 = G.scale[1], s2 = G.scale[2];
  const double is[3] = {1.0 / (s0 * s0), 1.0 / (s1 * s1), 1.0 / (s2 * s2)};
  double P[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) P[i][j] = R[i][0] * R[j][0] * is[0] + R[i][1] * R[j][1] * is[1] + R[i][2] * R[j][2] * is[2];
  /* depth range of the cut-off ellipsoid along the detector normal */
  const double rn[3] = {R[0][0] * c.n[0] + R[1][0] * c.n[1] + R[2][0] * c.n[2],
                        R[0][1] * c.n[0] + R[1][1] * c.n[1] + R[2][1] * c.n[2],
                        R[0][2] * c.n[0] + R[1][2] * c.n[1] + R[2][2] * c.n[2]};
  const double h = k * sqrt(rn[0] * rn[0] * s0 * s0 + rn[1] * rn[1] * s1 * s1 + rn[2] * rn[2] * s2 * s2);
  const double r0[3] = {G.centre[0] - c.S[0], G.centre[1] - c.S[1], G.centre[2] - c.S[2]};
  const double dc = xt_dot3(c.n, r0);
  /* wholly behind the source's plane (no ray of the detector meets it) or beyond the detector */
  if (!(dc + h > 0.0) || dc - h >= c.ddet) return 0;
  if (!(dc > 0.0)) return xt_gmm_generic(G, c, P, k, ntx, nty, o, q);
  /* reaching the source's plane: no bounded silhouette (every tile). The whole-line form is
   * used only when the segment's ends lie beyond max(k, 6) sigma in depth: a ray then loses at
   * most exp(-18) = 2e-8 of the Gaussian's integral to the ends, below float rounding, so the
   * segment form of the reference is matched whatever the cut-off; otherwise the erf form. */
  const int whole = !(dc - h > 0.0);
  const double h6 = (k > 6.0 ? 1.0 : 6.0 / k) * h;
  const int trunc = whole || dc + h6 > c.ddet || !(dc - h6 > 0.0);
  const double t = c.ddet / dc;
  const double e0[3] = {t * r0[0], t * r0[1], t * r0[2]};
  const double pp[3] = {c.S[0] + e0[0] - c.O[0], c.S[1] + e0[1] - c.O[1], c.S[2] + e0[2] - c.O[2]};
  const double px = xt_dot3(c.Ud, pp), py = xt_dot3(c.Vd, pp);
  double Pe0[3], PU[3], PV[3];
  for (int i = 0; i < 3; i++) {
    Pe0[i] = P[i][0] * e0[0] + P[i][1] * e0[1] + P[i][2] * e0[2];
    PU[i] = P[i][0] * c.U[0] + P[i][1] * c.U[1] + P[i][2] * c.U[2];
    PV[i] = P[i][0] * c.V[0] + P[i][1] * c.V[1] + P[i][2] * c.V[2];
  }
  const double E = xt_dot3(e0, Pe0);
  const double p = xt_dot3(c.U, Pe0), qv = xt_dot3(c.V, Pe0);
  const double Au = xt_dot3(c.U, PU), Bu = xt_dot3(c.U, PV), Cv = xt_dot3(c.V, PV);
  const double iE = 1.0 / E, it2E = iE / (t * t);
  const double l1 = p * iE, l2 = qv * iE, a0 = Au * iE, a1 = Bu * iE, a2 = Cv * iE;
  const double nm0 = (E * Au - p * p) * it2E, nm1 = (E * Bu - p * qv) * it2E, nm2 = (E * Cv - qv * qv) * it2E;
  /* the silhouette conic: m^2 <= k^2  <=>  Nm - k^2 Dn <= 0 */
  const double k2 = k * k;
  const double al = nm0 - k2 * a0, be = nm1 - k2 * a1, ga = nm2 - k2 * a2, de = -k2 * l1, ep = -k2 * l2;
  const double det = al * ga - be * be;
  if (!whole && (!(al > 0.0) || !(det > 0.0))) return 0; /* an ellipse whenever the cut-off is in front */
  uint32_t tiles = 0;
  if (whole) {
    memset(q, 0, sizeof *q);
    q->whole = 1;
    q->ty0 = 0;
    q->ty1 = (int16_t)(nty - 1);
    tiles = (uint32_t)ntx * (uint32_t)nty;
    goto record;
  }
  {
  const double uc = (be * ep - ga * de) / det, vc = (be * de - al * ep) / det;
  const double rr = k2 - de * uc - ep * vc;
  if (!(rr > 0.0)) return 0;
  const double hu = sqrt(rr * ga / det), hv = sqrt(rr * al / det);
  const double cx = px + uc, cy = py + vc;
  /* widening: float rounding of the stored conic and the approximate square root of the band
   * test (relative 1e-6 of the extents and coordinates involved) */
  const double eps = 0.05 + 1e-5 * (hu + hv + fabs(cx) + fabs(cy));
  int ty0 = (int)ceil((cy - hv - eps - (TH - 1)) / TH), ty1 = (int)floor((cy + hv + eps) / TH);
  if (ty0 < 0) ty0 = 0;
  if (ty1 > nty - 1) ty1 = nty - 1;
  if (ty0 > ty1 || cx + hu + eps < 0.0 || cx - hu - eps > cols - 1.0) return 0;
  q->cx = (float)cx;
  q->cy = (float)cy;
  q->b = (float)be;
  q->ia = (float)(1.0 / al);
  q->ar = (float)(al * rr);
  q->det = (float)det;
  q->hu = (float)hu;
  q->hv = (float)hv;
  q->vl = (float)(be / ga * hu);
  q->eps = (float)eps;
  q->ty0 = (int16_t)ty0;
  q->ty1 = (int16_t)ty1;
  q->whole = 0;
  for (int ty = ty0; ty <= ty1; ty++) {
    int a, b;
    xt_gmm_row_span(*q, ty, ntx, &a, &b);
    if (b >= a) tiles += (uint32_t)(b - a + 1);
  }
  if (!tiles) return 0;
  }
record:
  const double fx = floor(px), fy = floor(py);
  o->xi = (int)fx;
  o->yi = (int)fy;
  o->xf = (float)(px - fx);
  o->yf = (float)(py - fy);
  o->amp = (float)(G.rho * sqrt(2.0 * XT_PI) / sqrt(E));
  o->nm0 = (float)nm0;
  o->nm1 = (float)(2.0 * nm1);
  o->nm2 = (float)nm2;
  o->l1 = (float)(2.0 * l1);
  o->l2 = (float)(2.0 * l2);
  o->a0 = (float)a0;
  o->a1 = (float)(2.0 * a1);
  o->a2 = (float)a2;
  o->hE = trunc ? (float)sqrt(0.5 * E) : 0.f;
  o->tm1 = (float)(t - 1.0);
  o->k2 = (float)k2;
  return tiles;
}

/* A screen record as the render keeps it in shared memory: the offsets of the tile's first
 * pixel from the projected centre folded in (exact integer part, then the fraction); for the
 * whole-detector records (hE < 0) the tile's origin instead. The common case reads g0..g2; amp
 * is stored negated for the rare records, which also read g3. */
typedef struct gmm_tile_g {
  float4 g0; /* dx0, dy0, amp, nm0      | x0, y0, -amp, D_cc */
  float4 g1; /* nm1, nm2, l1, l2        | D_cr, D_rr, D_c, D_r */
  float4 g2; /* a0, a1, a2, k2          | D_1 or a0, B_1 or a1, B_c or a2, k2 */
  float4 g3; /* -                       | hE, B_r or tm1, C, - */
} gmm_tile_g;

static XT_INLINE XT_HOSTDEV gmm_tile_g xt_gmm_tile_record(const gmm_screen &s, int x0, int y0) {
  gmm_tile_g r;
  const int rare = s.hE != 0.f;
  if (s.hE < 0.f) r.g0 = make_float4((float)x0, (float)y0, -s.amp, s.nm0);
  else r.g0 = make_float4((float)(x0 - s.xi) - s.xf, (float)(y0 - s.yi) - s.yf, rare ? -s.amp : s.amp, s.nm0);
  r.g1 = make_float4(s.nm1, s.nm2, s.l1, s.l2);
  r.g2 = make_float4(s.a0, s.a1, s.a2, s.k2);
  r.g3 = make_float4(s.hE, s.tm1, s.xf, 0.f);
  return r;
}

#ifdef __CUDA_ARCH__
static __device__ __forceinline__ float xt_gmm_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
static __device__ __forceinline__ float xt_gmm_rsqrt(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#else
static inline float xt_gmm_ex2(float x) { return exp2f(x); }
static inline float xt_gmm_rsqrt(float x) { return 1.0f / sqrtf(x); }
#endif
#define XT_GMM_MHALF_LOG2E (-0.72134752044448170368f) /* -log2(e) / 2 */

/* erf(x1) - erf(x0), x0 <= x1, in float without cancellation (as xt_erf_diff). */
static XT_INLINE XT_HOSTDEV float xt_gmm_erf_diff(float x0, float x1) {
  if (x0 >= 0.f) return erfcf(x0) - erfcf(x1);
  if (x1 <= 0.f) return erfcf(-x1) - erfcf(-x0);
  return erff(x1) - erff(x0);
}

/* The rare records: a Gaussian crossing the detector plane or near it (hE > 0), or reaching the
 * source's plane (hE < 0). Term of L / len at the tile pixel (fx, fy). */
static XT_INLINE XT_HOSTDEV float xt_gmm_term_rare(const float4 g0, const float4 g1, const float4 g2, const float4 g3,
                                                   float fx, float fy) {
  const float amp = -g0.z;
  if (g3.x < 0.f) { /* whole detector: closest-point terms in absolute pixel coordinates */
    const float x = g0.x + fx, y = g0.y + fy;
    const float D = g2.x + x * (g1.z + g0.w * x + g1.x * y) + y * (g1.w + g1.y * y);
    const float B = g2.y + g2.z * x + g3.y * y;
    const float rd = xt_gmm_rsqrt(D);
    const float m2 = fmaxf(0.f, g3.z - B * B * rd * rd);
    const float x0 = 0.70710678f * B * rd, x1 = 0.70710678f * (D + B) * rd;
    const float ext = x0 > 0.f ? 2.f * x0 * x0 : (x1 < 0.f ? 2.f * x1 * x1 : 0.f);
    if (!(m2 + ext <= g2.w)) return 0.f;
    return amp * rd * xt_gmm_erf_diff(x0, x1) * xt_gmm_ex2(XT_GMM_MHALF_LOG2E * m2);
  }
  /* the segment's erf form (xt_gmm_line.h) in the pixel's terms, ts the closest point's
   * parameter: h len = sqrt(E Dn / 2), ts / len = (1 + L/2) / (t Dn),
   * (len - ts) / len = [(t - 1) + (2t - 1) L/2 + t Q] / (t Dn) */
  const float dx = g0.x + fx, dy = g0.y + fy;
  const float L = fmaf(g1.z, dx, g1.w * dy);
  const float Q = fmaf(fmaf(g2.x, dx, g2.y * dy), dx, g2.z * dy * dy);
  const float Dn = 1.f + L + Q;
  const float Nm = fmaf(fmaf(g0.w, dx, g1.x * dy), dx, g1.y * dy * dy);
  const float rs = xt_gmm_rsqrt(Dn);
  const float m2 = Nm * rs * rs;
  const float t = 1.f + g3.y;
  const float hl = g3.x * sqrtf(Dn);
  const float it = 1.f / (t * Dn);
  const float x0 = -hl * (1.f + 0.5f * L) * it;
  const float x1 = hl * (g3.y + (2.f * t - 1.f) * 0.5f * L + t * Q) * it;
  /* the closest point lies before the source (x0 > 0) or beyond the segment's end (x1 < 0) */
  const float ext = x0 > 0.f ? 2.f * x0 * x0 : (x1 < 0.f ? 2.f * x1 * x1 : 0.f);
  if (!(m2 + ext <= g2.w)) return 0.f;
  return 0.5f * amp * rs * xt_gmm_erf_diff(x0, x1) * xt_gmm_ex2(XT_GMM_MHALF_LOG2E * m2);
}

/* The common case (a Gaussian wholly between source and detector, beyond 6 sigma of both
 * planes): its term of L / len at the tile pixel (fx, fy), 0 beyond the cut-off. */
static XT_INLINE XT_HOSTDEV float xt_gmm_term_common(const float4 g0, const float4 g1, const float4 g2, float fx,
                                                     float fy) {
  const float dx = g0.x + fx, dy = g0.y + fy;
  const float xx = dx * dx, xy = dx * dy, yy = dy * dy;
  const float Dn = fmaf(g2.z, yy, fmaf(g2.y, xy, fmaf(g2.x, xx, fmaf(g1.w, dy, fmaf(g1.z, dx, 1.f)))));
  const float Nm = fmaf(g1.y, yy, fmaf(g1.x, xy, g0.w * xx));
  const float rs = xt_gmm_rsqrt(Dn);
  const float m2 = Nm * (rs * rs);
  const float e = xt_gmm_ex2(XT_GMM_MHALF_LOG2E * m2);
  return m2 <= g2.w ? g0.z * rs * e : 0.f;
}

static XT_INLINE XT_HOSTDEV float xt_gmm_term(const float4 g0, const float4 g1, const float4 g2, const float4 g3,
                                              float fx, float fy) {
  return g0.z < 0.f ? xt_gmm_term_rare(g0, g1, g2, g3, fx, fy) : xt_gmm_term_common(g0, g1, g2, fx, fy);
}

#endif /* XT_GMM_FOOTPRINT_H */
