/* The exact line integral of one tube segment of an instrument (xt_instr.h): a straight piece of a
 * centreline with an outer and an inner radius (a wire: inner 0; a catheter: its lumen), cut at
 * each end by its mitre plane, the plane that bisects the joint with its neighbour. Mitred pieces
 * of one radius tile a bent tube without gap or overlap (the two cut ellipses coincide), so the
 * sum over segments is the integral through the whole tube.
 *
 * Closed form per segment: the ray meets the infinite cylinder |q_perp + s w_perp| <= r on an
 * interval of s about its point of closest approach to the axis, the two mitre half-spaces clip
 * it, and the chord is the overlap of the three with [0, len]. Double precision,
 * the same operations on the host (CPU reference, proj_cpu_instr.c) and the device (proj_instr.cu).
 * The ray's parameter s is the caller's (world mm), so w need not be a unit vector in the model
 * frame. */
#ifndef XT_TUBE_H
#define XT_TUBE_H

#include <math.h>
#include <string.h>

#include "xt_vec.h"

typedef struct xt_tube_seg {
  double p0[3]; /* axis start, model mm */
  double d[3];  /* unit axis direction */
  double len;   /* axis length, mm */
  double n0[3]; /* mitre normal at p0 (unit, n0.d > 0): the segment is where (x - p0).n0 >= 0 */
  double n1[3]; /* mitre normal at p0 + len d (unit, n1.d > 0): where (x - p1).n1 <= 0 */
  double r_out, r_in; /* mm; r_in 0 for a solid section */
  int wall, lumen;    /* material ids of the wall and of the lumen (the instrument's table) */
  double mu_wall, mu_lumen; /* 1/mm, the instrument's medium subtracted (xt_instr.h, "medium") */
} xt_tube_seg;

static XT_INLINE XT_HOSTDEV double xt_tube_dot(const double a[3], const double b[3]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/* Narrows [*lo, *hi] to the ray's parameters within the mitre half-spaces a0 + s b0 >= 0 and
 * a1 + s b1 <= 0; 0 when a plane parallel to the ray leaves the whole ray outside. */
static XT_INLINE XT_HOSTDEV int xt_tube__mitres(double a0, double b0, double a1, double b1, double *lo, double *hi) {
  if (b0 != 0.0) {
    const double s = -a0 / b0;
    if (b0 > 0.0) *lo = s > *lo ? s : *lo;
    else *hi = s < *hi ? s : *hi;
  } else if (a0 < 0.0)
    return 0;
  if (b1 != 0.0) {
    const double s = -a1 / b1;
    if (b1 > 0.0) *hi = s < *hi ? s : *hi;
    else *lo = s > *lo ? s : *lo;
  } else if (a1 > 0.0)
    return 0;
  return 1;
}

/* The length of [lo, hi] inside the cylinder |qp + s wp| <= r (qp, wp across the axis), formed
 * about the ray's point of closest approach to the axis, s_m = -qp.wp / wp.wp: the squared
 * half-chord is (r^2 - |e|^2) / wp.wp with e = qp + s_m wp, free of the cancellation of the
 * textbook discriminant when the ray starts far from a thin tube. */
static XT_INLINE XT_HOSTDEV double xt_tube_cyl(const double qp[3], const double wp[3], double A, double r, double lo,
                                               double hi) {
  if (!(A > 0.0)) /* along the axis: all inside or all outside */
    return xt_tube_dot(qp, qp) <= r * r ? hi - lo : 0.0;
  const double sm = -xt_tube_dot(qp, wp) / A;
  const double e[3] = {qp[0] + sm * wp[0], qp[1] + sm * wp[1], qp[2] + sm * wp[2]};
  const double h2 = r * r - xt_tube_dot(e, e);
  if (!(h2 > 0.0)) return 0.0; /* a miss, or a tangent ray (a chord of length 0) */
  const double half = sqrt(h2 / A);
  double s0 = sm - half, s1 = sm + half;
  if (s0 < lo) s0 = lo;
  if (s1 > hi) s1 = hi;
  return s1 > s0 ? s1 - s0 : 0.0;
}

/* The chords of the ray o + s w, s in [0, len], through the segment's outer tube (*c_out) and its
 * lumen (*c_in, 0 when solid); the wall's chord is their difference. The ray's origin is first
 * moved to its point nearest the segment's middle (s_c), so every quantity below is of the
 * segment's size, not of the source's distance. */
static XT_INLINE XT_HOSTDEV void xt_tube_chords(const xt_tube_seg *t, const double o[3], const double w[3], double len,
                                                double *c_out, double *c_in) {
  *c_out = *c_in = 0.0;
  const double hl = 0.5 * t->len;
  const double mid[3] = {t->p0[0] + hl * t->d[0] - o[0], t->p0[1] + hl * t->d[1] - o[1], t->p0[2] + hl * t->d[2] - o[2]};
  const double ww = xt_tube_dot(w, w);
  if (!(ww > 0.0)) return;
  const double sc = xt_tube_dot(mid, w) / ww;
  /* q: the moved origin relative to p0 */
  const double q[3] = {o[0] - t->p0[0] + sc * w[0], o[1] - t->p0[1] + sc * w[1], o[2] - t->p0[2] + sc * w[2]};
  double lo = -sc, hi = len - sc;
  /* the mitre half-spaces: q.n0 + s w.n0 >= 0 and (q - len d).n1 + s w.n1 <= 0 */
  const double a0 = xt_tube_dot(q, t->n0), b0 = xt_tube_dot(w, t->n0);
  const double a1 = xt_tube_dot(q, t->n1) - t->len * xt_tube_dot(t->d, t->n1), b1 = xt_tube_dot(w, t->n1);
  if (!xt_tube__mitres(a0, b0, a1, b1, &lo, &hi)) return;
  if (!(hi > lo)) return;
  /* the cylinder: the parts of q and w across the axis */
  const double qd = xt_tube_dot(q, t->d), wd = xt_tube_dot(w, t->d);
  const double qp[3] = {q[0] - qd * t->d[0], q[1] - qd * t->d[1], q[2] - qd * t->d[2]};
  const double wp[3] = {w[0] - wd * t->d[0], w[1] - wd * t->d[1], w[2] - wd * t->d[2]};
  const double A = xt_tube_dot(wp, wp);
  *c_out = xt_tube_cyl(qp, wp, A, t->r_out, lo, hi);
  if (t->r_in > 0.0 && *c_out > 0.0) *c_in = xt_tube_cyl(qp, wp, A, t->r_in, lo, hi);
}

/* Whether the ray o + s w, s in [0, len], passes within e of the segment's solid: it meets the
 * "fat" segment, the tube of radius r_out + e between the mitre planes each moved out by e. Any
 * point within e of the solid is in it (a unit normal and the distance across the axis change by
 * at most e), so a ray that misses it has no point within e of the solid. Conservative: ties and
 * rays along the axis or a mitre plane count as near, the test is the chords' closed form with >=
 * for >. The CUDA splat (proj_instr.cu) asks it of the centre ray of each half of a pixel with e
 * the spread of the half's sub-rays at the segment's depth: the halves it refuses have sub-rays
 * whose chords are all exactly 0. */
static XT_INLINE XT_HOSTDEV int xt_tube_near(const xt_tube_seg *t, const double o[3], const double w[3], double len,
                                             double e) {
  const double hl = 0.5 * t->len;
  const double mid[3] = {t->p0[0] + hl * t->d[0] - o[0], t->p0[1] + hl * t->d[1] - o[1], t->p0[2] + hl * t->d[2] - o[2]};
  const double ww = xt_tube_dot(w, w);
  if (!(ww > 0.0)) return 1;
  const double sc = xt_tube_dot(mid, w) / ww;
  const double q[3] = {o[0] - t->p0[0] + sc * w[0], o[1] - t->p0[1] + sc * w[1], o[2] - t->p0[2] + sc * w[2]};
  double lo = -sc, hi = len - sc;
  const double a0 = xt_tube_dot(q, t->n0) + e, b0 = xt_tube_dot(w, t->n0);
  const double a1 = xt_tube_dot(q, t->n1) - t->len * xt_tube_dot(t->d, t->n1) - e, b1 = xt_tube_dot(w, t->n1);
  if (!xt_tube__mitres(a0, b0, a1, b1, &lo, &hi)) return 0;
  if (hi < lo) return 0;
  const double qd = xt_tube_dot(q, t->d), wd = xt_tube_dot(w, t->d);
  const double qp[3] = {q[0] - qd * t->d[0], q[1] - qd * t->d[1], q[2] - qd * t->d[2]};
  const double wp[3] = {w[0] - wd * t->d[0], w[1] - wd * t->d[1], w[2] - wd * t->d[2]};
  const double A = xt_tube_dot(wp, wp), r = t->r_out + e;
  if (!(A > 0.0)) return xt_tube_dot(qp, qp) <= r * r;
  const double sm = -xt_tube_dot(qp, wp) / A;
  const double c[3] = {qp[0] + sm * wp[0], qp[1] + sm * wp[1], qp[2] + sm * wp[2]};
  const double h2 = r * r - xt_tube_dot(c, c);
  if (h2 < 0.0) return 0;
  const double half = sqrt(h2 / A);
  return sm - half <= hi && sm + half >= lo;
}

/* The lumen's mu (medium subtracted) of segment t in a frame whose instrument's lumen region - table
 * entry lumen_io, -1: none - holds mu_io (contrast, docs/contrast.md): the region's, else the
 * segment's own (laid out without iodine). The CUDA splat picks it per pixel from the frame's
 * descriptor, so a change of iodine rewrites no segment. A solid segment's lumen is the medium,
 * never the region, and its lumen chord is 0. */
static XT_INLINE XT_HOSTDEV double xt_tube_mu_lumen(const xt_tube_seg *t, int lumen_io, double mu_io) {
  return t->lumen == lumen_io ? mu_io : t->mu_lumen;
}

/* The segment's line integral of mu (its medium subtracted) along the ray. */
static XT_INLINE XT_HOSTDEV double xt_tube_integral(const xt_tube_seg *t, const double o[3], const double w[3],
                                                    double len) {
  double co, ci;
  xt_tube_chords(t, o, w, len, &co, &ci);
  return t->mu_wall * (co - ci) + t->mu_lumen * ci;
}

/* ---- The factored closed form: one source, many rays (the CUDA splat's sub-rays) ----
 *
 * The same chords as xt_tube_chords for the ray o + s D, s in [0, 1] from the source to the end
 * of the ray (a detector pixel), its world length dl = sqrt(dl2): xt_tube_chords(t, o, D / dl, dl)
 * in exact arithmetic. What depends on the segment and the source only is formed once
 * (xt_tube_prep); what a ray needs of its direction are four numbers linear in D (xt_tube_lin: D
 * across the axis in an orthonormal basis e1, e2, and D along the mitre normals), so for
 * D = D0 + x U + y V they are l(D0) + x l(U) + y l(V), 2 FMAs each (xt_tube_fam, xt_tube_lin_at).
 * From them, per ray and in double:
 *   A = |D_perp|^2, T = g_perp x D_perp (g: the source less a point of the axis), B = g_perp.D_perp;
 *   the cylinder |g_perp + s D_perp| <= r holds on s_m -+ sqrt(r^2 A - T^2) / A, s_m = -B / A
 *   (Lagrange's identity |g|^2 |D|^2 = (g.D)^2 + (g x D)^2 turns the textbook B^2 - A (|g|^2 - r^2)
 *   into r^2 A - T^2, two terms of the size of (r |D_perp|)^2 where the ray meets the tube instead
 *   of (|g| |D_perp|)^2: T carries the only cancellation, as the reference's moved origin does);
 *   the mitre half-spaces a0 + s b0 >= 0 and a1 + s b1 <= 0 (a0, a1 per segment) clip it at
 *   -a0 / b0 and -a1 / b1; one reciprocal, of A b0 b1, serves all three divisions.
 * Rounding: both forms see the source ~1 m away, so each carries an absolute error of a few ulps of
 * that distance in the ray's position at the segment (~1e-13 mm); they agree to that (docs/
 * instruments.md, "The factored closed form"). Degenerate rays (along the axis, parallel to a
 * mitre plane, A b0 b1 out of range) take xt_tube__fac_slow, which follows xt_tube_chords' cases. */
typedef struct xt_tube_pre {
  double e1[3], e2[3]; /* orthonormal, across the axis */
  double g1, g2;       /* the source less p0, on e1 and e2 */
  double gg;           /* g1^2 + g2^2: a ray along the axis is inside when gg <= r^2 */
  double a0, a1;       /* the mitre planes at the source: (o - p0).n0, (o - p1).n1 */
  double ro2, ri2;     /* r_out^2, r_in^2 */
  double ro;           /* r_out */
} xt_tube_pre;

typedef struct xt_tube_lin {
  double p1, p2; /* D.e1, D.e2 */
  double b0, b1; /* D.n0, D.n1 */
} xt_tube_lin;

static XT_INLINE XT_HOSTDEV void xt_tube_prep(const xt_tube_seg *t, const double o[3], xt_tube_pre *p) {
  const double *d = t->d;
  /* e1 = d x (the unit axis d is least along), normalised; e2 = d x e1 */
  const double ax = fabs(d[0]), ay = fabs(d[1]), az = fabs(d[2]);
  double e1[3];
  if (ax <= ay && ax <= az) e1[0] = 0.0, e1[1] = d[2], e1[2] = -d[1];
  else if (ay <= az) e1[0] = -d[2], e1[1] = 0.0, e1[2] = d[0];
  else e1[0] = d[1], e1[1] = -d[0], e1[2] = 0.0;
  const double in = 1.0 / sqrt(xt_tube_dot(e1, e1));
  for (int k = 0; k < 3; k++) p->e1[k] = e1[k] * in;
  p->e2[0] = d[1] * p->e1[2] - d[2] * p->e1[1];
  p->e2[1] = d[2] * p->e1[0] - d[0] * p->e1[2];
  p->e2[2] = d[0] * p->e1[1] - d[1] * p->e1[0];
  /* the source less p0 (any point of the axis gives the same g1, g2) */
  const double q[3] = {o[0] - t->p0[0], o[1] - t->p0[1], o[2] - t->p0[2]};
  p->g1 = xt_tube_dot(q, p->e1);
  p->g2 = xt_tube_dot(q, p->e2);
  p->gg = p->g1 * p->g1 + p->g2 * p->g2;
  p->a0 = xt_tube_dot(q, t->n0);
  p->a1 = xt_tube_dot(q, t->n1) - t->len * xt_tube_dot(d, t->n1);
  p->ro2 = t->r_out * t->r_out;
  p->ri2 = t->r_in > 0.0 ? t->r_in * t->r_in : 0.0;
  p->ro = t->r_out;
}

/* The four numbers of a direction (or of a direction's increment: they are linear in it). */
static XT_INLINE XT_HOSTDEV void xt_tube_lin_of(const xt_tube_pre *p, const xt_tube_seg *t, const double D[3],
                                                xt_tube_lin *l) {
  l->p1 = xt_tube_dot(D, p->e1);
  l->p2 = xt_tube_dot(D, p->e2);
  l->b0 = xt_tube_dot(D, t->n0);
  l->b1 = xt_tube_dot(D, t->n1);
}

/* l(D0 + x U + y V) from l(D0), l(U), l(V). */
static XT_INLINE XT_HOSTDEV xt_tube_lin xt_tube_lin_at(const xt_tube_lin *l0, const xt_tube_lin *lu,
                                                       const xt_tube_lin *lv, double x, double y) {
  xt_tube_lin l;
  l.p1 = l0->p1 + x * lu->p1 + y * lv->p1;
  l.p2 = l0->p2 + x * lu->p2 + y * lv->p2;
  l.b0 = l0->b0 + x * lu->b0 + y * lv->b0;
  l.b1 = l0->b1 + x * lu->b1 + y * lv->b1;
  return l;
}

static XT_INLINE XT_HOSTDEV double xt_tube__rcp(double x) {
#ifdef __CUDA_ARCH__
  return __drcp_rn(x); /* correctly rounded, as 1.0 / x on the host, without the division's slow path */
#else
  return 1.0 / x;
#endif
}

/* The length of [sm - h, sm + h] within [lo, hi]; 2 h exactly when nothing clips it. */
static XT_INLINE XT_HOSTDEV double xt_tube__span(double sm, double h, double lo, double hi) {
  const double t0 = sm - h, t1 = sm + h;
  if (t0 >= lo && t1 <= hi) return 2.0 * h;
  const double u0 = t0 > lo ? t0 : lo, u1 = t1 < hi ? t1 : hi;
  return u1 > u0 ? u1 - u0 : 0.0;
}

/* The degenerate rays, case by case as xt_tube_chords: a direction on a mitre plane (b = 0) or
 * along the axis (A = 0), or A b0 b1 outside the range where one reciprocal serves. */
#ifdef __CUDACC__
#define XT_TUBE_COLD static __noinline__ __host__ __device__ /* off the sub-rays' path */
#else
#define XT_TUBE_COLD static inline
#endif
typedef struct xt_tube_pair {
  double c_out, c_in;
} xt_tube_pair;

/* Scalars in, the pair out by value: a call on the device keeps everything in registers. */
XT_TUBE_COLD xt_tube_pair xt_tube__fac_slow(double a0, double a1, double gg, double ro2, double ri2, double B, double b0,
                                            double b1, double A, double T, double dl2) {
  xt_tube_pair c = {0.0, 0.0};
  double lo = 0.0, hi = 1.0;
  if (!xt_tube__mitres(a0, b0, a1, b1, &lo, &hi)) return c;
  if (!(hi > lo)) return c;
  const double dl = sqrt(dl2);
  if (!(A > 0.0)) { /* along the axis: all inside or all outside */
    if (gg <= ro2) {
      c.c_out = (hi - lo) * dl;
      if (ri2 > 0.0 && gg <= ri2) c.c_in = c.c_out;
    }
    return c;
  }
  const double disc = ro2 * A - T * T;
  if (!(disc > 0.0)) return c;
  const double rA = 1.0 / A, sm = -B * rA;
  c.c_out = xt_tube__span(sm, sqrt(disc) * rA, lo, hi) * dl;
  const double di = ri2 * A - T * T;
  if (ri2 > 0.0 && c.c_out > 0.0 && di > 0.0) c.c_in = xt_tube__span(sm, sqrt(di) * rA, lo, hi) * dl;
  return c;
}

/* A family of rays from the source: D(x, y) = D0 + x U + y V, l(D0), l(U), l(V), and the squared
 * world length of D(x, y) as q[0] + x (q[1] + x q[3] + y q[4]) + y (q[2] + y q[5]). */
typedef struct xt_tube_fam {
  xt_tube_lin l0, lu, lv;
  double q[6];
} xt_tube_fam;

/* The chords (world mm, as xt_tube_chords') of the family's ray (x, y), o + s D(x, y), s in [0, 1],
 * through the segment's outer tube and its lumen. A ray that misses the outer cylinder costs its
 * two numbers across the axis (4 FMAs) and ~6 FP64 operations more; the mitres' numbers and the
 * world length are formed only for a ray that meets it, with a reciprocal and one square root per
 * radius and one for the length. */
static XT_INLINE XT_HOSTDEV void xt_tube_fac_chords(const xt_tube_pre *p, const xt_tube_fam *f, double x, double y,
                                                    double *c_out, double *c_in) {
  *c_out = *c_in = 0.0;
  const double p1 = f->l0.p1 + x * f->lu.p1 + y * f->lv.p1, p2 = f->l0.p2 + x * f->lu.p2 + y * f->lv.p2;
  const double A = p1 * p1 + p2 * p2;
  const double T = p->g1 * p2 - p->g2 * p1;
  const double disc = p->ro2 * A - T * T;
  if (!(disc > 0.0) && A > 0.0) return; /* a miss, or a tangent ray (a chord of length 0) */
  const double b0 = f->l0.b0 + x * f->lu.b0 + y * f->lv.b0, b1 = f->l0.b1 + x * f->lu.b1 + y * f->lv.b1;
  const double dl2 = f->q[0] + x * (f->q[1] + x * f->q[3] + y * f->q[4]) + y * (f->q[2] + y * f->q[5]);
  const double b01 = b0 * b1, prod = A * b01, ap = fabs(prod);
  if (!(ap >= 1e-250 && ap <= 1e250)) {
    const xt_tube_pair c =
        xt_tube__fac_slow(p->a0, p->a1, p->gg, p->ro2, p->ri2, p->g1 * p1 + p->g2 * p2, b0, b1, A, T, dl2);
    *c_out = c.c_out;
    *c_in = c.c_in;
    return;
  }
  const double R = xt_tube__rcp(prod), AR = A * R, rA = b01 * R;
  const double s0 = -p->a0 * (AR * b1), s1 = -p->a1 * (AR * b0);
  double lo = 0.0, hi = 1.0;
  if (b0 > 0.0) lo = s0 > lo ? s0 : lo;
  else hi = s0 < hi ? s0 : hi;
  if (b1 > 0.0) hi = s1 < hi ? s1 : hi;
  else lo = s1 > lo ? s1 : lo;
  if (!(hi > lo)) return;
  const double sm = -(p->g1 * p1 + p->g2 * p2) * rA, dl = sqrt(dl2);
  *c_out = xt_tube__span(sm, sqrt(disc) * rA, lo, hi) * dl;
  if (p->ri2 > 0.0 && *c_out > 0.0) {
    const double di = p->ri2 * A - T * T;
    if (di > 0.0) *c_in = xt_tube__span(sm, sqrt(di) * rA, lo, hi) * dl;
  }
}

/* xt_tube_near's mitre and cylinder tests, case by case, for the rays xt_tube_fac_near does not
 * decide with one reciprocal (as xt_tube__fac_slow). */
XT_TUBE_COLD int xt_tube__near_slow(double a0, double a1, double gg, double r, double B, double b0, double b1, double A,
                                    double disc) {
  double lo = 0.0, hi = 1.0;
  if (!xt_tube__mitres(a0, b0, a1, b1, &lo, &hi)) return 0;
  if (hi < lo) return 0;
  if (!(A > 0.0)) return gg <= r * r;
  if (disc < 0.0) return 0;
  const double rA = 1.0 / A, sm = -B * rA, h = sqrt(disc) * rA;
  return sm - h <= hi && sm + h >= lo;
}

/* xt_tube_near in the factored form, for the family's ray (x, y): whether it passes within e of the
 * segment's solid (the tube of radius r_out + e between the mitre planes each moved out by e),
 * conservative in the same way: ties and rays along the axis or a mitre plane count as near. The
 * same tests in another order (the cylinder first: most rays tested miss it) and with one
 * reciprocal; its rounding is of the order of xt_tube_fac_chords' (~1e-13 mm at a source 1 m
 * away), far inside the margins the splat adds to e. */
static XT_INLINE XT_HOSTDEV int xt_tube_fac_near(const xt_tube_pre *p, const xt_tube_fam *f, double x, double y,
                                                 double e) {
  const double p1 = f->l0.p1 + x * f->lu.p1 + y * f->lv.p1, p2 = f->l0.p2 + x * f->lu.p2 + y * f->lv.p2;
  const double A = p1 * p1 + p2 * p2, T = p->g1 * p2 - p->g2 * p1, r = p->ro + e;
  const double disc = r * r * A - T * T;
  if (A > 0.0 && disc < 0.0) return 0;
  const double b0 = f->l0.b0 + x * f->lu.b0 + y * f->lv.b0, b1 = f->l0.b1 + x * f->lu.b1 + y * f->lv.b1;
  const double a0 = p->a0 + e, a1 = p->a1 - e, B = p->g1 * p1 + p->g2 * p2;
  const double b01 = b0 * b1, prod = A * b01, ap = fabs(prod);
  if (!(ap >= 1e-250 && ap <= 1e250)) return xt_tube__near_slow(a0, a1, p->gg, r, B, b0, b1, A, disc);
  const double R = xt_tube__rcp(prod), AR = A * R, rA = b01 * R;
  const double s0 = -a0 * (AR * b1), s1 = -a1 * (AR * b0);
  double lo = 0.0, hi = 1.0;
  if (b0 > 0.0) lo = s0 > lo ? s0 : lo;
  else hi = s0 < hi ? s0 : hi;
  if (b1 > 0.0) hi = s1 < hi ? s1 : hi;
  else lo = s1 > lo ? s1 : lo;
  if (hi < lo) return 0;
  const double sm = -B * rA, h = sqrt(disc) * rA;
  return sm - h <= hi && sm + h >= lo;
}

/* A cheap pre-test for the compact splat (proj_instr.cu, XT_INSTR_SPLAT=compact): whether the
 * family's ray (x, y) may meet the segment's outer tube, never false where xt_tube_fac_chords gives
 * a non-zero chord. In u = s A (A > 0, so no division):
 *   the cylinder: T^2 <= r_out^2 A + kappa (the closed form's own first test, loosened);
 *   its span [-B - w, -B + w] with w >= sqrt(r_out^2 A - T^2 + kappa) without a square root
 *     (sqrt(v) <= (v / c + c) / 2 for any c > 0: c = r_out sqrt(A) at the footprint's centre, exact
 *     there for rays through the axis, up to c / 2 over for tangent ones), within [0, A], widened by
 *     delta, must not be empty;
 *   each mitre half-space a0 A + u b0 >= 0, a1 A + u b1 <= 0 must hold at one end of that span,
 *     to within k0 A, k1 A (each on its own: a relaxation, never stricter than the two together).
 * About 40 FP64 operations where the cylinder passes, 14 where it refuses; the closed form's rest
 * (the reciprocal, its interval, two or three square roots) only for the rays that pass.
 * The slacks cover the test and the closed form running at different sites (another lane, another
 * inlining, FMAs contracted otherwise: their per-ray numbers may differ by a few ulps of the
 * largest term that forms them) and the closed form's own rounding, each a thousand times over or
 * more (xt_tube_fac_maybe_prep). Degenerate rays (A = 0, NaN) pass. */
typedef struct xt_tube_maybe {
  double kappa;  /* the cylinder test's slack (mm^2 A) */
  double c, ic;  /* the square root's bound: its tangent point and 1 / c */
  double delta;  /* the span's widening, in u */
  double k0, k1; /* the mitre tests' tolerances per unit of A */
} xt_tube_maybe;

/* xt_tube_fac_maybe's cylinder and its span within the ray, in u = s A (by value: the CUDA
 * splats keep it in registers): c 0 off the cylinder or an empty span, 1 a span [L, H] (A > 0),
 * 2 a degenerate ray (A = 0 or NaN: the caller lets it pass). Shared with xt_tube_fac_span (runs,
 * below). */
typedef struct xt_tube_cyl_span {
  int c;
  double A, L, H;
} xt_tube_cyl_span;

static XT_INLINE XT_HOSTDEV xt_tube_cyl_span xt_tube__fac_cyl(const xt_tube_pre *p, const xt_tube_maybe *m, double p1,
                                                              double p2) {
  xt_tube_cyl_span r;
  r.A = p1 * p1 + p2 * p2;
  r.L = r.H = 0.0;
  const double T = p->g1 * p2 - p->g2 * p1;
  const double v = p->ro2 * r.A - T * T + m->kappa;
  if (v < 0.0) return r.c = 0, r; /* off the cylinder (NaN passes) */
  if (!(r.A > 0.0)) return r.c = 2, r;
  const double B = p->g1 * p1 + p->g2 * p2, w = 0.5 * (v * m->ic + m->c);
  const double l = -B - w, h = -B + w;
  r.L = (l > 0.0 ? l : 0.0) - m->delta;
  r.H = (h < r.A ? h : r.A) + m->delta;
  r.c = r.L <= r.H;
  return r;
}

static XT_INLINE XT_HOSTDEV int xt_tube_fac_maybe(const xt_tube_pre *p, const xt_tube_fam *f, const xt_tube_maybe *m,
                                                  double x, double y) {
  const double p1 = f->l0.p1 + x * f->lu.p1 + y * f->lv.p1, p2 = f->l0.p2 + x * f->lu.p2 + y * f->lv.p2;
  const xt_tube_cyl_span cs = xt_tube__fac_cyl(p, m, p1, p2);
  if (cs.c != 1) return cs.c != 0;
  const double A = cs.A, L = cs.L, H = cs.H;
  const double b0 = f->l0.b0 + x * f->lu.b0 + y * f->lv.b0, b1 = f->l0.b1 + x * f->lu.b1 + y * f->lv.b1;
  const double A0 = p->a0 * A, A1 = p->a1 * A, t0 = m->k0 * A, t1 = m->k1 * A;
  if (A0 + L * b0 < -t0 && A0 + H * b0 < -t0) return 0; /* behind the first mitre all along */
  if (A1 + L * b1 > t1 && A1 + H * b1 > t1) return 0;   /* beyond the second */
  return 1;
}

/* xt_tube_fac_maybe's constants for the family's rays with |x| <= xm, |y| <= ym, (xc, yc) the
 * footprint's centre. With pm a bound of |p1| + |p2| and of the rounding scale of each (the sum of
 * its terms' magnitudes), the two sites' T differ by at most ~12 eps (|g1| + |g2|) pm and their
 * sqrt(A) by ~12 eps pm; so where the closed form finds |T| < r sqrt(A), the pre-test's
 * |T| < r sqrt(A) + mm with mm = 1e-12 (r + |g1| + |g2|) pm (~450 eps of both), and squared
 * (sqrt(A) <= pm): T^2 < r^2 A + mm (3 r pm + mm): kappa, a distance of ~1e-12 of the source's
 * (~1e-9 mm). B and the span's ends (the closed form's s times A, each to a few eps) move by less
 * than 1e-12 pm (|g1| + |g2| + pm + r): delta is 1e-9 of that. The mitre numbers a0 A + u b0 with
 * u in [0, A] have terms below A (|a0| + bm0), bm0 b0's rounding scale: k0 is 1e-9 of that
 * (and k1); the closed form's crossings -a0 / b0 move by a few eps of them. */
static XT_INLINE XT_HOSTDEV void xt_tube_fac_maybe_prep(const xt_tube_pre *p, const xt_tube_fam *f, double xm,
                                                        double ym, double xc, double yc, xt_tube_maybe *m) {
  const double pm = fabs(f->l0.p1) + fabs(f->l0.p2) + xm * (fabs(f->lu.p1) + fabs(f->lu.p2)) +
                    ym * (fabs(f->lv.p1) + fabs(f->lv.p2));
  const double bm0 = fabs(f->l0.b0) + xm * fabs(f->lu.b0) + ym * fabs(f->lv.b0);
  const double bm1 = fabs(f->l0.b1) + xm * fabs(f->lu.b1) + ym * fabs(f->lv.b1);
  const double G = fabs(p->g1) + fabs(p->g2);
  const double mm = 1e-12 * (p->ro + G) * pm;
  m->kappa = mm * (3.0 * p->ro * pm + mm);
  m->delta = 1e-9 * pm * (G + pm + p->ro);
  m->k0 = 1e-9 * (fabs(p->a0) + bm0);
  m->k1 = 1e-9 * (fabs(p->a1) + bm1);
  const double p1 = f->l0.p1 + xc * f->lu.p1 + yc * f->lv.p1, p2 = f->l0.p2 + xc * f->lu.p2 + yc * f->lv.p2;
  double c = p->ro * sqrt(p1 * p1 + p2 * p2);
  if (!(c > 0.0 && c < 1e300)) c = p->ro * pm > 0.0 ? p->ro * pm : 1.0; /* any c > 0 bounds */
  m->c = c;
  m->ic = 1.0 / c;
}

/* ---- Runs: consecutive segments a warp takes together (the CUDA splat, proj_instr.cu) ----
 *
 * On a wire laid out finely (the bench's: 0.08-0.13 mm segments, pixels ~0.19 mm at the isocentre)
 * a pixel's sub-rays meet one or two of the segments near them; a splat that tests every sub-ray
 * against every nearby segment spends most of its work on pairs that meet nothing. So the splat
 * takes up to XT_TUBE_RUN consecutive segments of one material (wall, lumen, their mu) together, a
 * run, and each sub-ray picks the segments it can meet:
 *   v      a bounding segment: straight along the run's chord a, cut square at both ends
 *          (n0 = n1 = a), radius rho, holding every segment's solid; the splat's footprint and
 *          candidate halves are v's, as they were each segment's;
 *   tlo, thi  each segment's extent along a, from v's p0 (floats rounded outward): a sub-ray meets
 *          segment j only at points inside v whose axial position lies in [tlo_j, thi_j];
 *   bin    v's length in XT_TUBE_RUN_BINS equal bins, each the segments whose extents meet it
 *          (widened by 1e-6 of a bin, far beyond the rounding of the bin a position falls in).
 * xt_tube_fac_span gives a sub-ray's axial positions inside v's cylinder, xt_tube_run_pick the
 * segments of the bins they fall in whose extents they reach; the closed form then runs for those
 * only.
 * The bounds (xt_tube_run_make): a segment's solid, its cylinder between its mitre planes, lies in
 * the hull of its two cut ellipses (a point inside lies on a line along the axis between the two
 * planes). An ellipse of centre c in the plane of normal m (d.m > 0) has the points c + u + lambda d,
 * u across d, |u| <= r, lambda = -u.m / d.m: its extent along a is c.a -+ r |x|, x the part across d
 * of a - (d.a / d.m) m, and its points lie within r / d.m (its semi-major axis) of c. So the solid's
 * extent along a is the two ellipses' and its distance from the chord's line at most a centre's plus
 * r / d.m. Each bound grows by 1e-9 (1 + the run's coordinates) mm, thousands of times the rounding
 * of forming it and of the closed forms that test against it (~1e-13 mm, docs/instruments.md). */
#define XT_TUBE_RUN 16
#define XT_TUBE_RUN_BINS 64
typedef struct xt_tube_run {
  xt_tube_seg v; /* the bounding segment, with the run's materials */
  double ib;     /* bins per mm along v's axis (0: every segment in bin 0) */
  int first, n;  /* the instrument's segments first .. first + n - 1 */
  int lum;       /* one of them is hollow */
  int pad;
  float tlo[XT_TUBE_RUN], thi[XT_TUBE_RUN];
  unsigned short bin[XT_TUBE_RUN_BINS]; /* bit j: segment j meets the bin */
} xt_tube_run;

/* The run of the n (1 .. XT_TUBE_RUN) segments s, the first of them the instrument's segment first. */
static inline void xt_tube_run_make(const xt_tube_seg *s, int n, int first, xt_tube_run *r) {
  memset(r, 0, sizeof *r);
  const double *ps = s[0].p0;
  const xt_tube_seg *last = &s[n - 1];
  double a[3], size = 1.0;
  for (int k = 0; k < 3; k++) a[k] = last->p0[k] + last->len * last->d[k] - ps[k];
  const double al = sqrt(xt_tube_dot(a, a));
  for (int k = 0; k < 3; k++) a[k] = al > 0.0 ? a[k] / al : s[0].d[k]; /* any unit a bounds; the chord bounds tightly */
  for (int j = 0; j < n; j++)
    for (int k = 0; k < 3; k++) {
      const double e = fabs(s[j].p0[k]) + s[j].len + s[j].r_out;
      size = e > size ? e : size;
    }
  const double slack = 1e-9 * size;
  double rho = 0.0, lo[XT_TUBE_RUN], hi[XT_TUBE_RUN], lall = HUGE_VAL, hall = -HUGE_VAL;
  for (int j = 0; j < n; j++) {
    const xt_tube_seg *t = &s[j];
    lo[j] = HUGE_VAL, hi[j] = -HUGE_VAL;
    for (int end = 0; end < 2; end++) {
      const double *m = end ? t->n1 : t->n0;
      double dm = xt_tube_dot(t->d, m), c[3], x[3];
      dm = dm > 1e-300 ? dm : 1e-300; /* > 0 for every mitre the layout allows */
      const double q = xt_tube_dot(t->d, a) / dm;
      for (int k = 0; k < 3; k++) {
        c[k] = t->p0[k] + (end ? t->len * t->d[k] : 0.0) - ps[k];
        x[k] = a[k] - q * m[k];
      }
      const double xd = xt_tube_dot(x, t->d);
      for (int k = 0; k < 3; k++) x[k] -= xd * t->d[k];
      const double ext = t->r_out * sqrt(xt_tube_dot(x, x)), tc = xt_tube_dot(c, a);
      lo[j] = tc - ext < lo[j] ? tc - ext : lo[j];
      hi[j] = tc + ext > hi[j] ? tc + ext : hi[j];
      const double cp[3] = {c[0] - tc * a[0], c[1] - tc * a[1], c[2] - tc * a[2]};
      const double dist = sqrt(xt_tube_dot(cp, cp)) + t->r_out / dm;
      rho = dist > rho ? dist : rho;
    }
    lo[j] -= slack, hi[j] += slack;
    lall = lo[j] < lall ? lo[j] : lall;
    hall = hi[j] > hall ? hi[j] : hall;
  }
  xt_tube_seg *v = &r->v;
  for (int k = 0; k < 3; k++) v->p0[k] = ps[k] + lall * a[k], v->d[k] = v->n0[k] = v->n1[k] = a[k];
  v->len = hall - lall;
  v->r_out = rho + slack;
  v->r_in = 0.0;
  v->wall = s[0].wall, v->lumen = s[0].lumen, v->mu_wall = s[0].mu_wall, v->mu_lumen = s[0].mu_lumen;
  r->first = first, r->n = n;
  r->ib = v->len > 0.0 ? XT_TUBE_RUN_BINS / v->len : 0.0;
  for (int j = 0; j < n; j++) {
    float fl = (float)(lo[j] - lall), fh = (float)(hi[j] - lall);
    if ((double)fl > lo[j] - lall) fl = nextafterf(fl, -HUGE_VALF);
    if ((double)fh < hi[j] - lall) fh = nextafterf(fh, HUGE_VALF);
    r->tlo[j] = fl, r->thi[j] = fh;
    r->lum |= s[j].r_in > 0.0;
    const double b0 = (lo[j] - lall) * r->ib - 1e-6, b1 = (hi[j] - lall) * r->ib + 1e-6;
    const int i0 = b0 > 0.0 ? (int)b0 : 0, i1 = b1 < XT_TUBE_RUN_BINS - 1 ? (int)b1 : XT_TUBE_RUN_BINS - 1;
    for (int b = i0; b <= i1; b++) r->bin[b] |= (unsigned short)(1u << j);
  }
}

/* How many runs an instrument of at most nseg segments and nsections sections can have: each
 * stretch of one material gives at most its length / XT_TUBE_RUN + 1, and a material changes only
 * where a section ends. */
static inline int xt_tube_runs_cap(int nseg, int nsections) { return nseg / XT_TUBE_RUN + 2 + nsections; }

/* The runs of an instrument's n segments s into out (at most cap, xt_tube_runs_cap): up to
 * XT_TUBE_RUN consecutive segments of one material each. Their count, or -1 when cap is too small. */
static inline int xt_tube_runs(const xt_tube_seg *s, int n, xt_tube_run *out, int cap) {
  int nr = 0;
  for (int k = 0; k < n;) {
    int m = 1;
    while (k + m < n && m < XT_TUBE_RUN && s[k + m].wall == s[k].wall && s[k + m].lumen == s[k].lumen &&
           s[k + m].mu_wall == s[k].mu_wall && s[k + m].mu_lumen == s[k].mu_lumen)
      m++;
    if (nr == cap) return -1;
    xt_tube_run_make(s + k, m, k, &out[nr++]);
    k += m;
  }
  return nr;
}

/* The axial positions (along v's axis, from its p0) of the family's ray (x, y) within v's cylinder
 * and its span from the source to the detector, [*t0, *t1]; 0 when the ray misses the cylinder. The
 * cylinder and the span as xt_tube_fac_maybe's (m: xt_tube_fac_maybe_prep's constants for v and the
 * footprint), division-free; then one reciprocal takes the span's ends (u = s A) to positions
 * a0 + s b0, widened by m's mitre tolerance k0 (1e-9 of their terms). Degenerate rays (A = 0, NaN)
 * get the whole axis. */
static XT_INLINE XT_HOSTDEV int xt_tube_fac_span(const xt_tube_pre *p, const xt_tube_fam *f, const xt_tube_maybe *m,
                                                 double x, double y, double *t0, double *t1) {
  const double p1 = f->l0.p1 + x * f->lu.p1 + y * f->lv.p1, p2 = f->l0.p2 + x * f->lu.p2 + y * f->lv.p2;
  const xt_tube_cyl_span cs = xt_tube__fac_cyl(p, m, p1, p2);
  const double A = cs.A, L = cs.L, H = cs.H;
  if (cs.c == 0) return 0;
  if (cs.c == 2) {
    *t0 = -HUGE_VAL, *t1 = HUGE_VAL;
    return 1;
  }
  const double b0 = f->l0.b0 + x * f->lu.b0 + y * f->lv.b0, iA = xt_tube__rcp(A);
  const double u0 = p->a0 + (L * iA) * b0, u1 = p->a0 + (H * iA) * b0;
  *t0 = (u0 < u1 ? u0 : u1) - m->k0;
  *t1 = (u0 < u1 ? u1 : u0) + m->k0;
  return 1;
}

/* The segments of a run that axial positions [t0, t1] reach, as bits: those of the bins t0 .. t1
 * fall in (bin, ib: the run's, wherever the caller keeps them) whose extents (tlo, thi) [t0, t1]
 * meets; all n when t0 or t1 is NaN. Positions beyond v's ends take its end bins (no segment
 * reaches beyond them); t0, t1 are rounded outward to floats for the extents, so no bit is lost. */
static XT_INLINE XT_HOSTDEV unsigned xt_tube_run_pick(const unsigned short *bin, double ib, const float *tlo,
                                                      const float *thi, int n, double t0, double t1) {
  if (!(t0 <= t1)) return (1u << n) - 1u;
  double b0 = t0 * ib, b1 = t1 * ib;
  b0 = b0 > 0.0 ? (b0 < XT_TUBE_RUN_BINS - 1 ? b0 : XT_TUBE_RUN_BINS - 1) : 0.0;
  b1 = b1 > 0.0 ? (b1 < XT_TUBE_RUN_BINS - 1 ? b1 : XT_TUBE_RUN_BINS - 1) : 0.0;
  unsigned cand = 0u;
  for (int b = (int)b0; b <= (int)b1; b++) cand |= bin[b];
#ifdef __CUDA_ARCH__
  const float f0 = __double2float_rd(t0), f1 = __double2float_ru(t1);
#else
  float f0 = (float)t0, f1 = (float)t1;
  if ((double)f0 > t0) f0 = nextafterf(f0, -HUGE_VALF);
  if ((double)f1 < t1) f1 = nextafterf(f1, HUGE_VALF);
#endif
  unsigned bits = 0u;
  for (; cand; cand &= cand - 1) {
#ifdef __CUDA_ARCH__
    const int j = __ffs(cand) - 1;
#else
    const int j = __builtin_ctz(cand);
#endif
    bits |= (unsigned)(thi[j] >= f0 && tlo[j] <= f1) << j;
  }
  return bits;
}

#endif /* XT_TUBE_H */
