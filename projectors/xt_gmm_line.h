/* The closed-form line integral of one Gaussian along a ray segment, in double, shared by the CPU
 * reference (proj_cpu_gmm.c), the CUDA kind's straddling case (proj_gmm.cu) and the fitter.
 *
 * For the ray x(s) = o + s d (any |d|, s in [0, len]) and G(x) = rho exp(-1/2 (x-c)^T P (x-c)),
 * with r = o - c:
 *   a = d^T P d,  t* = -(r^T P d) / a          (the parameter of the closest point, P-metric)
 *   w = r + t* d, m^2 = w^T P w                (the ray's squared Mahalanobis distance to c)
 *   integral = rho sqrt(pi / (2a)) exp(-m^2/2) [erf(sqrt(a/2)(len - t*)) - erf(sqrt(a/2)(0 - t*))]
 * m^2 is evaluated in the closest-point form (w is a short vector), not as c - b^2/a, which
 * cancels catastrophically when the source is far from the Gaussian; the difference of erfs is
 * taken through erfc when both arguments have one sign (a Gaussian wholly before or after the
 * segment's end), so it never cancels either. docs/projector.md derives the cut-off. */
#ifndef XT_GMM_LINE_H
#define XT_GMM_LINE_H

#include <math.h>

#include "xt_vec.h"

/* erf(x1) - erf(x0) for x0 <= x1, without cancellation. */
static XT_INLINE XT_HOSTDEV double xt_erf_diff(double x0, double x1) {
  if (x0 >= 0.0) return erfc(x0) - erfc(x1);
  if (x1 <= 0.0) return erfc(-x1) - erfc(-x0);
  return erf(x1) - erf(x0);
}

/* P (xx, xy, xz, yy, yz, zz) times v. */
static XT_INLINE XT_HOSTDEV void xt_sym_mul(const double P[6], const double v[3], double out[3]) {
  out[0] = P[0] * v[0] + P[1] * v[1] + P[2] * v[2];
  out[1] = P[1] * v[0] + P[3] * v[1] + P[4] * v[2];
  out[2] = P[2] * v[0] + P[4] * v[1] + P[5] * v[2];
}

/* The integral of rho * G over s in [0, len] of o + s d, r = o - c. 0 when the segment stays
 * farther than the cut-off k (k2 = k^2) from c: min over s in [0, len] of m(s) > k, where
 * m(s)^2 = m^2 + a (s - t*)^2. */
static XT_INLINE XT_HOSTDEV double xt_gmm_segment(const double P[6], double rho, const double r[3], const double d[3],
                                                  double len, double k2) {
  double Pd[3];
  xt_sym_mul(P, d, Pd);
  const double a = d[0] * Pd[0] + d[1] * Pd[1] + d[2] * Pd[2];
  if (!(a > 0.0)) return 0.0;
  const double ts = -(r[0] * Pd[0] + r[1] * Pd[1] + r[2] * Pd[2]) / a;
  const double w[3] = {r[0] + ts * d[0], r[1] + ts * d[1], r[2] + ts * d[2]};
  double Pw[3];
  xt_sym_mul(P, w, Pw);
  double m2 = w[0] * Pw[0] + w[1] * Pw[1] + w[2] * Pw[2];
  if (m2 < 0.0) m2 = 0.0; /* rounding of a ray through the centre */
  const double sc = ts < 0.0 ? 0.0 : (ts > len ? len : ts);
  if (m2 + a * (sc - ts) * (sc - ts) > k2) return 0.0;
  const double h = sqrt(0.5 * a), x0 = h * (0.0 - ts), x1 = h * (len - ts);
  /* beyond 6 erf is 1 in double (erfc(6) = 2e-17 < half an ulp of 1): the whole line, exactly */
  const double ed = (x0 <= -6.0 && x1 >= 6.0) ? 2.0 : xt_erf_diff(x0, x1);
  return rho * sqrt(XT_PI / (2.0 * a)) * exp(-0.5 * m2) * ed;
}

#endif /* XT_GMM_LINE_H */
