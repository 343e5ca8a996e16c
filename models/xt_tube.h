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
  if (b0 > 0.0) {
    const double s = -a0 / b0;
    if (s > lo) lo = s;
  } else if (b0 < 0.0) {
    const double s = -a0 / b0;
    if (s < hi) hi = s;
  } else if (a0 < 0.0)
    return;
  if (b1 > 0.0) {
    const double s = -a1 / b1;
    if (s < hi) hi = s;
  } else if (b1 < 0.0) {
    const double s = -a1 / b1;
    if (s > lo) lo = s;
  } else if (a1 > 0.0)
    return;
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
  if (b0 > 0.0) {
    const double s = -a0 / b0;
    if (s > lo) lo = s;
  } else if (b0 < 0.0) {
    const double s = -a0 / b0;
    if (s < hi) hi = s;
  } else if (a0 < 0.0)
    return 0;
  if (b1 > 0.0) {
    const double s = -a1 / b1;
    if (s < hi) hi = s;
  } else if (b1 < 0.0) {
    const double s = -a1 / b1;
    if (s > lo) lo = s;
  } else if (a1 > 0.0)
    return 0;
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

/* The segment's line integral of mu (its medium subtracted) along the ray. */
static XT_INLINE XT_HOSTDEV double xt_tube_integral(const xt_tube_seg *t, const double o[3], const double w[3],
                                                    double len) {
  double co, ci;
  xt_tube_chords(t, o, w, len, &co, &ci);
  return t->mu_wall * (co - ci) + t->mu_lumen * ci;
}

#endif /* XT_TUBE_H */
