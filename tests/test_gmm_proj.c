/* The CPU reference projector on Gaussian mixtures, against independent oracles:
 *
 *  - closed forms computed here in long double in each Gaussian's own normalised frame (the ray
 *    rotated by the quaternion sandwich product q* v q, not by the projector's matrix, and the
 *    distance taken as |o' x d'| / |d'|, not by the closest-point form the projector uses);
 *  - numerical quadrature (adaptive Simpson) of the mixture's mu along the ray;
 *  - the sum of separate renders for mixed GMM + voxel scenes.
 *
 * Rays through the centre, tangent to the cut-off ellipsoid (just inside and just outside), and
 * beyond it; segments that end inside a Gaussian; placements and table translations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_gmm.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_gmm.h"

/* ---- helpers -------------------------------------------------------------------------------- */

typedef struct quatl {
  long double w, x, y, z;
} quatl;

static quatl qmul(quatl a, quatl b) {
  quatl r = {a.w * b.w - a.x * b.x - a.y * b.y - a.z * b.z, a.w * b.x + a.x * b.w + a.y * b.z - a.z * b.y,
             a.w * b.y - a.x * b.z + a.y * b.w + a.z * b.x, a.w * b.z + a.x * b.y - a.y * b.x + a.z * b.w};
  return r;
}

/* v rotated by the unit quaternion q (q v q*), or by its inverse (q* v q). */
static void qrotl(quatl q, int inverse, const long double v[3], long double out[3]) {
  quatl qc = {q.w, -q.x, -q.y, -q.z}, p = {0, v[0], v[1], v[2]};
  quatl r = inverse ? qmul(qmul(qc, p), q) : qmul(qmul(q, p), qc);
  out[0] = r.x;
  out[1] = r.y;
  out[2] = r.z;
}

static quatl qnorm(const float qf[4]) {
  long double n = sqrtl((long double)qf[0] * qf[0] + (long double)qf[1] * qf[1] + (long double)qf[2] * qf[2] +
                        (long double)qf[3] * qf[3]);
  quatl q = {qf[0] / n, qf[1] / n, qf[2] / n, qf[3] / n};
  return q;
}

static void qrot(const float qf[4], int inverse, const long double v[3], long double out[3]) {
  qrotl(qnorm(qf), inverse, v, out);
}

/* One Gaussian (centre c, rotation q, scales s, peak rho) on the ray o + s d, s in [s0, s1], in
 * its own frame where it is exp(-|y|^2/2): y(s) = o' + s d', o' = S^-1 q*(o - c) q,
 * d' = S^-1 q* d q. No cut-off. */
static long double oracle_raw(const long double c[3], quatl q, const float sc[3], long double rho, const double o[3],
                              const double d[3], long double s0, long double s1) {
  long double r[3], dd[3], ro[3], dr[3];
  for (int a = 0; a < 3; a++) {
    r[a] = (long double)o[a] - c[a];
    dd[a] = d[a];
  }
  qrotl(q, 1, r, ro);
  qrotl(q, 1, dd, dr);
  for (int a = 0; a < 3; a++) {
    ro[a] /= sc[a];
    dr[a] /= sc[a];
  }
  long double dn2 = dr[0] * dr[0] + dr[1] * dr[1] + dr[2] * dr[2], dn = sqrtl(dn2);
  long double cx = ro[1] * dr[2] - ro[2] * dr[1], cy = ro[2] * dr[0] - ro[0] * dr[2], cz = ro[0] * dr[1] - ro[1] * dr[0];
  long double m2 = (cx * cx + cy * cy + cz * cz) / dn2;
  long double ts = -(ro[0] * dr[0] + ro[1] * dr[1] + ro[2] * dr[2]) / dn2;
  long double e = isinf(s0) && isinf(s1) ? 2.0L : erfl(dn * (s1 - ts) / sqrtl(2.0L)) - erfl(dn * (s0 - ts) / sqrtl(2.0L));
  return rho * sqrtl(acosl(-1.0L) / 2.0L) / dn * expl(-m2 / 2) * e;
}

static long double oracle(const xt_gaussian *g, const double o[3], const double d[3], long double s0, long double s1) {
  const long double c[3] = {g->centre[0], g->centre[1], g->centre[2]};
  return oracle_raw(c, qnorm(g->quat), g->scale, g->rho, o, d, s0, s1);
}

/* mu of the mixture at x (no cut-off), through the sandwich product. */
static double mix_mu(const xt_gmm *gm, const double x[3]) {
  double acc = 0;
  for (size_t i = 0; i < gm->count; i++) {
    const xt_gaussian *g = &gm->g[i];
    long double r[3] = {x[0] - g->centre[0], x[1] - g->centre[1], x[2] - g->centre[2]}, y[3];
    qrot(g->quat, 1, r, y);
    long double m2 = 0;
    for (int a = 0; a < 3; a++) m2 += (y[a] / g->scale[a]) * (y[a] / g->scale[a]);
    acc += g->rho * (double)expl(-m2 / 2);
  }
  return acc;
}

typedef struct quad_ctx {
  const xt_gmm *gm;
  const double *o, *d;
  int evals;
} quad_ctx;

static double qf(quad_ctx *q, double s) {
  double x[3] = {q->o[0] + s * q->d[0], q->o[1] + s * q->d[1], q->o[2] + s * q->d[2]};
  q->evals++;
  return mix_mu(q->gm, x);
}

static double simpson(quad_ctx *q, double a, double b, double fa, double fm, double fb, double whole, double tol,
                      int depth) {
  double m = 0.5 * (a + b), lm = 0.5 * (a + m), rm = 0.5 * (m + b);
  double flm = qf(q, lm), frm = qf(q, rm);
  double left = (m - a) / 6 * (fa + 4 * flm + fm), right = (b - m) / 6 * (fm + 4 * frm + fb);
  if (depth <= 0 || fabs(left + right - whole) <= 15 * tol) return left + right + (left + right - whole) / 15;
  return simpson(q, a, m, fa, flm, fm, left, tol / 2, depth - 1) + simpson(q, m, b, fm, frm, fb, right, tol / 2, depth - 1);
}

/* Adaptive Simpson over [0, len] from n equal starting panels (fine enough to see every peak). */
static double quadrature(const xt_gmm *gm, const double o[3], const double d[3], double len, int n, double tol) {
  quad_ctx q = {gm, o, d, 0};
  double acc = 0, h = len / n;
  for (int i = 0; i < n; i++) {
    double a = i * h, b = (i + 1) * h, fa = qf(&q, a), fb = qf(&q, b), fm = qf(&q, 0.5 * (a + b));
    acc += simpson(&q, a, b, fa, fm, fb, h / 6 * (fa + 4 * fm + fb), tol / n, 40);
  }
  return acc;
}

static xt_model *one_gaussian_model(xt_gaussian g, double cutoff, xt_gmm **gm_out) {
  xt_gmm *gm;
  xt_model *m;
  if (xt_gmm_create(1, &gm, NULL)) return NULL;
  gm->g[0] = g;
  gm->cutoff = cutoff;
  if (xt_gmm_finish(gm, "test", NULL) || xt_model_from_gmm(gm, "one", &m, NULL)) return NULL;
  if (gm_out) *gm_out = gm;
  return m;
}

/* The header's random mixture (scales 1..12 mm), with its payload. */
static xt_model *mixture_of(int n, double cutoff, double spread, xt_gmm **gm_out) {
  xt_model *m = random_mixture(n, spread, 1.0, 12.0, cutoff);
  if (m && gm_out) *gm_out = xt_model_gmm(m);
  return m;
}

static double seg(const xt_model *m, const double o[3], const double d[3], double s0, double s1) {
  const xt_model *ms[1] = {m};
  xt_vec3 a = xt_v3(o[0] + s0 * d[0], o[1] + s0 * d[1], o[2] + s0 * d[2]);
  xt_vec3 b = xt_v3(o[0] + s1 * d[0], o[1] + s1 * d[1], o[2] + s1 * d[2]);
  return xt_ref_segment(ms, 1, a, b);
}

static void unit(double d[3]) {
  double n = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  for (int a = 0; a < 3; a++) d[a] /= n;
}

/* ---- one Gaussian ---------------------------------------------------------------------------- */

XT_TEST(isotropic_closed_form) {
  const double sigma = 3.0, rho = (float)0.04, k = XT_GMM_CUTOFF_DEFAULT; /* rho as stored */
  xt_gaussian g = {{10, -5, 20}, {(float)sigma, (float)sigma, (float)sigma}, {1, 0, 0, 0}, (float)rho, 0};
  xt_model *m = one_gaussian_model(g, k, NULL);
  XT_REQUIRE(m);
  const double peak = rho * sigma * sqrt(2 * XT_PI); /* the integral along a ray through the centre */
  /* rays along random directions at distance b from the centre */
  const double bs[] = {0, 0.5 * sigma, sigma, 3 * sigma, k * sigma * (1 - 1e-9)};
  for (int t = 0; t < 20; t++) {
    double d[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)}, p[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)};
    unit(d);
    double dp = d[0] * p[0] + d[1] * p[1] + d[2] * p[2];
    for (int a = 0; a < 3; a++) p[a] -= dp * d[a];
    unit(p); /* p perpendicular to d */
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
      double o[3];
      for (int a = 0; a < 3; a++) o[a] = g.centre[a] + bs[i] * p[a] - 900 * d[a];
      double want = peak * exp(-bs[i] * bs[i] / (2 * sigma * sigma));
      XT_CHECK_NEAR(seg(m, o, d, 0, 1800), want, 1e-13 * peak);
    }
    /* just outside the cut-off, and far beyond it: nothing */
    for (int f = 0; f < 2; f++) {
      double b = f ? 1.5 * k * sigma : k * sigma * (1 + 1e-9), o[3];
      for (int a = 0; a < 3; a++) o[a] = g.centre[a] + b * p[a] - 900 * d[a];
      XT_CHECK(seg(m, o, d, 0, 1800) == 0.0);
    }
  }
  xt_model_free(m);
}

XT_TEST(rotated_anisotropic_closed_form) {
  for (int t = 0; t < 50; t++) {
    xt_gaussian g = {{(float)urand(-50, 50), (float)urand(-50, 50), (float)urand(-50, 50)},
                     {(float)urand(0.3, 3), (float)urand(2, 8), (float)urand(5, 25)},
                     {1, 0, 0, 0},
                     (float)urand(0.005, 0.5),
                     0};
    random_quat(g.quat);
    const double k = urand(3, 6);
    xt_gmm *gm;
    xt_model *m = one_gaussian_model(g, k, &gm);
    XT_REQUIRE(m);
    const xt_gaussian *gn = &gm->g[0]; /* quaternion normalised in float by finish */
    /* (1) through the centre, random directions */
    double d[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)};
    unit(d);
    double o[3];
    for (int a = 0; a < 3; a++) o[a] = gn->centre[a] - 700 * d[a];
    double want = (double)oracle(gn, o, d, -INFINITY, INFINITY);
    XT_CHECK_NEAR(seg(m, o, d, 0, 1400), want, 1e-12 * want);
    /* (2) tangent to the cut-off ellipsoid: a point y on |y| = k in the normalised frame and a
     * direction e perpendicular to it, mapped back by S then q (y -> q (S y) q*). */
    long double y[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)}, e[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)};
    long double yn = sqrtl(y[0] * y[0] + y[1] * y[1] + y[2] * y[2]);
    for (int a = 0; a < 3; a++) y[a] /= yn;
    long double ey = e[0] * y[0] + e[1] * y[1] + e[2] * y[2];
    for (int a = 0; a < 3; a++) e[a] -= ey * y[a];
    for (int side = 0; side < 3; side++) {
      const double f = side == 0 ? 1 - 1e-7 : (side == 1 ? 1 + 1e-7 : 2.0); /* inside, outside, far */
      long double ys[3], es[3], yw[3], ew[3];
      for (int a = 0; a < 3; a++) {
        ys[a] = y[a] * k * f * gn->scale[a];
        es[a] = e[a] * gn->scale[a];
      }
      qrot(gn->quat, 0, ys, yw);
      qrot(gn->quat, 0, es, ew);
      double dd[3] = {(double)ew[0], (double)ew[1], (double)ew[2]};
      unit(dd);
      double oo[3];
      for (int a = 0; a < 3; a++) oo[a] = gn->centre[a] + (double)yw[a] - 800 * dd[a];
      double got = seg(m, oo, dd, 0, 1600);
      if (side == 0) {
        double w2 = (double)oracle(gn, oo, dd, -INFINITY, INFINITY);
        XT_CHECK(w2 > 0);
        XT_CHECK_NEAR(got, w2, 1e-9 * want + 1e-12 * w2);
      } else {
        XT_CHECK_MSG(got == 0.0, "side %d: %g", side, got);
      }
    }
    xt_model_free(m);
  }
}

XT_TEST(segments_that_end_inside_a_gaussian) {
  for (int t = 0; t < 40; t++) {
    xt_gaussian g = {{0, 0, 0}, {(float)urand(1, 4), (float)urand(1, 9), (float)urand(2, 12)}, {1, 0, 0, 0}, 0.02f, 0};
    random_quat(g.quat);
    xt_gmm *gm;
    xt_model *m = one_gaussian_model(g, XT_GMM_CUTOFF_MAX, &gm);
    XT_REQUIRE(m);
    const xt_gaussian *gn = &gm->g[0];
    double d[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)}, off[3] = {urand(-2, 2), urand(-2, 2), urand(-2, 2)};
    unit(d);
    double o[3];
    for (int a = 0; a < 3; a++) o[a] = off[a] - 500 * d[a];
    /* ends at a point of the ray inside the Gaussian; starts inside; both */
    const double s0s[] = {0, 500 + urand(-5, 5), 500 + urand(-10, -1), 0};
    const double s1s[] = {500 + urand(-5, 5), 1000, 500 + urand(1, 10), 1000};
    for (int i = 0; i < 4; i++) {
      double want = (double)oracle(gn, o, d, s0s[i], s1s[i]);
      double full = (double)oracle(gn, o, d, -INFINITY, INFINITY);
      XT_CHECK_NEAR(seg(m, o, d, s0s[i], s1s[i]), want, 1e-12 * full);
    }
    /* a segment ending exactly at the closest point holds exactly half of a centred ray */
    double oc[3];
    for (int a = 0; a < 3; a++) oc[a] = -300 * d[a];
    double whole = seg(m, oc, d, 0, 600), half = seg(m, oc, d, 0, 300);
    XT_CHECK_NEAR(half, 0.5 * whole, 1e-13 * whole);
    xt_model_free(m);
  }
}

/* ---- mixtures -------------------------------------------------------------------------------- */

XT_TEST(mixture_matches_quadrature) {
  xt_gmm *gm;
  /* the widest cut-off: what it drops, exp(-32) of a Gaussian's integral, is below quadrature error */
  xt_model *m = mixture_of(25, XT_GMM_CUTOFF_MAX, 30, &gm);
  XT_REQUIRE(m);
  for (int t = 0; t < 12; t++) {
    double target[3] = {urand(-30, 30), urand(-30, 30), urand(-30, 30)}, d[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)};
    unit(d);
    double o[3];
    for (int a = 0; a < 3; a++) o[a] = target[a] - 150 * d[a];
    double ref = seg(m, o, d, 0, 300), q = quadrature(gm, o, d, 300, 600, 1e-11);
    XT_CHECK_NEAR(ref, q, 1e-9 * (fabs(q) + 1e-3));
  }
  xt_model_free(m);
}

XT_TEST(default_cutoff_error_within_documented_bound) {
  /* docs/projector.md: dropping Gaussians the ray passes farther than k from changes the ray's
   * integral by at most exp(-k^2/2) * sum_i A_i, A_i = rho_i sqrt(2 pi / a_i) the central
   * integral of Gaussian i in the ray's direction. */
  xt_gmm *gm;
  xt_model *m = mixture_of(60, XT_GMM_CUTOFF_DEFAULT, 40, &gm);
  XT_REQUIRE(m);
  const double k = gm->cutoff;
  int cut_somewhere = 0;
  for (int t = 0; t < 60; t++) {
    double target[3] = {urand(-60, 60), urand(-60, 60), urand(-60, 60)}, d[3] = {urand(-1, 1), urand(-1, 1), urand(-1, 1)};
    unit(d);
    double o[3];
    for (int a = 0; a < 3; a++) o[a] = target[a] - 400 * d[a];
    double ref = seg(m, o, d, 0, 800), exact = 0, bound = 0;
    for (size_t i = 0; i < gm->count; i++) {
      exact += (double)oracle(&gm->g[i], o, d, 0, 800);
      double c[3] = {gm->g[i].centre[0], gm->g[i].centre[1], gm->g[i].centre[2]};
      /* central integral in this direction: the oracle on the parallel ray through the centre */
      double oc[3];
      for (int a = 0; a < 3; a++) oc[a] = c[a] - 400 * d[a];
      bound += (double)oracle(&gm->g[i], oc, d, -INFINITY, INFINITY);
    }
    bound *= exp(-0.5 * k * k);
    XT_CHECK_MSG(fabs(ref - exact) <= bound + 1e-13 * exact, "ray %d: |%.17g - %.17g| > %.3g", t, ref, exact, bound);
    cut_somewhere |= ref != exact;
  }
  XT_CHECK(cut_somewhere); /* the test did exercise the cut-off */
  xt_model_free(m);
}

/* A geometry with a small detector for whole-frame tests. */
static xt_geometry small_geom(double primary, double secondary, xt_vec3 table) {
  const xt_detector_mode mode = xt_mode_custom("t", 48, 40, 3.0, 3.2, 800, 1200);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.detector_rot_deg = 17;
  p.table_mm = table;
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

XT_TEST(frame_equals_direct_sum_with_placement_and_table) {
  xt_gmm *gm;
  xt_model *m = mixture_of(300, XT_GMM_CUTOFF_MAX, 60, &gm);
  XT_REQUIRE(m);
  /* a rigid placement: rotation and shift */
  xt_affine rz = xt_aff_rot(2, 0.7), rx = xt_aff_rot(0, -0.4);
  m->placement = xt_aff_compose(&rx, &rz);
  m->placement.t[0] = 12;
  m->placement.t[1] = -7;
  m->placement.t[2] = 30;
  xt_geometry g = small_geom(35, -20, xt_v3(5, -9, 14));
  const int np = g.mode.cols * g.mode.rows;
  double *f = malloc(sizeof(double) * np);
  XT_REQUIRE(f);
  const xt_model *ms[1] = {m};
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, f, 2, NULL) == 0);
  /* oracle: every Gaussian moved into the world exactly (long double centre, composed
   * quaternion), no BVH, no cut-off */
  xt_affine p2w = xt_geom_patient_to_world(&g.pose), m2w = xt_aff_compose(&p2w, &m->placement);
  /* the placement's rotation as a quaternion (rz first, then rx): q = q_x q_z */
  const long double hz = 0.35L, hx = -0.2L;
  quatl qz = {cosl(hz), 0, 0, sinl(hz)}, qx = {cosl(hx), sinl(hx), 0, 0}, qp = qmul(qx, qz);
  long double(*wc)[3] = malloc(sizeof *wc * gm->count);
  quatl *wq = malloc(sizeof *wq * gm->count);
  XT_REQUIRE(wc && wq);
  for (size_t i = 0; i < gm->count; i++) {
    const xt_gaussian *gi = &gm->g[i];
    for (int a = 0; a < 3; a++)
      wc[i][a] = m2w.t[a] + (long double)m2w.m[a][0] * gi->centre[0] + (long double)m2w.m[a][1] * gi->centre[1] +
                 (long double)m2w.m[a][2] * gi->centre[2];
    wq[i] = qmul(qp, qnorm(gi->quat));
  }
  double fmax = 0, maxerr = 0;
  int nonzero = 0;
  for (int r = 0; r < g.mode.rows; r++)
    for (int c = 0; c < g.mode.cols; c++) {
      xt_vec3 px = xt_geom_pixel_pos(&g, c, r), dv = xt_v3_sub(px, g.source);
      double len = xt_v3_norm(dv), o[3] = {g.source.x, g.source.y, g.source.z},
             d[3] = {dv.x / len, dv.y / len, dv.z / len}, want = 0;
      for (size_t i = 0; i < gm->count; i++)
        want += (double)oracle_raw(wc[i], wq[i], gm->g[i].scale, gm->g[i].rho, o, d, 0, len);
      double got = f[r * g.mode.cols + c];
      if (fabs(got - want) > maxerr) maxerr = fabs(got - want);
      if (want > fmax) fmax = want;
      nonzero += got > 0;
    }
  XT_CHECK_MSG(maxerr <= 1e-11 * fmax, "max err %.3g of max %.3g", maxerr, fmax);
  XT_CHECK(nonzero > np / 4);
  free(wc);
  free(wq);
  free(f);
  xt_model_free(m);
}

XT_TEST(mixed_scene_is_the_sum_of_its_models) {
  xt_gmm *gm;
  xt_model *mg = mixture_of(80, XT_GMM_CUTOFF_DEFAULT, 50, &gm), *mv = NULL;
  XT_REQUIRE(mg);
  int dim[3] = {40, 36, 44};
  XT_REQUIRE(xt_phantom_head_model(dim, 4.0, XT_VOXEL_U8, &mv, NULL) == 0);
  mv->placement.t[0] = 8;
  xt_geometry g = small_geom(-60, 25, xt_v3(0, 3, -4));
  const int np = g.mode.cols * g.mode.rows;
  double *a = malloc(sizeof(double) * np), *b = malloc(sizeof(double) * np), *ab = malloc(sizeof(double) * np);
  XT_REQUIRE(a && b && ab);
  const xt_model *both[2] = {mv, mg}, *v1[1] = {mv}, *g1[1] = {mg};
  XT_REQUIRE(xt_ref_render_f64(v1, 1, &g, a, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(g1, 1, &g, b, 0, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(both, 2, &g, ab, 0, NULL) == 0);
  int va = 0, vb = 0;
  for (int i = 0; i < np; i++) {
    XT_CHECK_NEAR(ab[i], a[i] + b[i], 1e-13 * (a[i] + b[i]));
    va += a[i] > 0;
    vb += b[i] > 0;
  }
  XT_CHECK(va > np / 10 && vb > np / 10);
  /* through the projector API as well (float output), single and batch */
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  xt_proj *p = NULL;
  float *out = malloc(sizeof(float) * np * 2);
  XT_REQUIRE(out && xt_proj_create(&po, &p, NULL) == 0);
  XT_REQUIRE(xt_proj_add_model(p, mv, NULL) == 0 && xt_proj_add_model(p, mg, NULL) == 0);
  xt_geometry gg[2] = {g, g};
  XT_REQUIRE(xt_proj_render_batch(p, gg, 2, out, NULL) == 0);
  for (int i = 0; i < np; i++) {
    XT_CHECK(out[i] == (float)ab[i]);
    XT_CHECK(out[np + i] == (float)ab[i]);
  }
  xt_proj_destroy(p);
  free(out);
  free(a);
  free(b);
  free(ab);
  xt_model_free(mv);
  xt_model_free(mg);
}

XT_TEST(thread_count_does_not_change_a_frame) {
  xt_model *m = mixture_of(200, XT_GMM_CUTOFF_DEFAULT, 50, NULL);
  XT_REQUIRE(m);
  xt_geometry g = small_geom(10, 5, xt_v3(0, 0, 0));
  const int np = g.mode.cols * g.mode.rows;
  double *a = malloc(sizeof(double) * np), *b = malloc(sizeof(double) * np);
  XT_REQUIRE(a && b);
  const xt_model *ms[1] = {m};
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, a, 1, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, b, 3, NULL) == 0);
  XT_CHECK(memcmp(a, b, sizeof(double) * np) == 0);
  free(a);
  free(b);
  xt_model_free(m);
}

XT_TEST(unfinished_mixture_is_refused) {
  xt_gmm *gm = NULL;
  XT_REQUIRE(xt_gmm_create(3, &gm, NULL) == 0);
  xt_model m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "raw");
  m.kind = XT_MODEL_GMM;
  m.placement = xt_aff_identity();
  m.payload = gm; /* no xt_gmm_finish: no index */
  xt_proj_options po = {XT_BACKEND_CPU, 1, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  XT_REQUIRE(xt_proj_create(&po, &p, NULL) == 0);
  XT_CHECK(xt_proj_add_model(p, &m, &msg) == XT_EINVAL);
  XT_CHECK(strstr(msg.text, "raw") != NULL);
  xt_proj_destroy(p);
  xt_gmm_free(gm);
}

XT_TEST_MAIN(XT_ENTRY(isotropic_closed_form) XT_ENTRY(rotated_anisotropic_closed_form)
                 XT_ENTRY(segments_that_end_inside_a_gaussian) XT_ENTRY(mixture_matches_quadrature)
                     XT_ENTRY(default_cutoff_error_within_documented_bound)
                         XT_ENTRY(frame_equals_direct_sum_with_placement_and_table)
                             XT_ENTRY(mixed_scene_is_the_sum_of_its_models)
                                 XT_ENTRY(thread_count_does_not_change_a_frame) XT_ENTRY(unfinished_mixture_is_refused))
