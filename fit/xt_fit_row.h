/* One row of voxels through one Gaussian of the fit, written once for the CPU engine (xt_fit.c)
 * and the CUDA engine (fit_cuda.cu). In voxel-index space, with P = L L^T (L lower-triangular),
 * the voxels (x, y, z) of the row y, z inside Mahalanobis radius K form an interval in x, and
 * along it the Gaussian is a geometric recurrence: G(x+1) = G(x) R(x), R(x+1) = R(x) Q with
 * Q = exp(-L00^2). */
#ifndef XT_FIT_ROW_H
#define XT_FIT_ROW_H

#include <math.h>

#include "xt_vec.h"

typedef struct xt_fit_row {
  int x0, x1;       /* the voxels of the row inside radius K, clipped to [0, n0) */
  double d0;        /* x0 - c_x */
  double G, R, Q;   /* the Gaussian at x0 and the recurrence's ratios */
} xt_fit_row;

/* c: centre; L: L00, L10, L11, L20, L21, L22; d1 = y - c_y, d2 = z - c_z. 0 when the row misses. */
static XT_INLINE XT_HOSTDEV int xt_fit_row_setup(const double c[3], const double L[6], double rho, double K2, int n0,
                                                 double d1, double d2, xt_fit_row *r) {
  const double L00 = L[0], L10 = L[1], L11 = L[2], L20 = L[3], L21 = L[4], L22 = L[5];
  const double A = L10 * d1 + L20 * d2, z1 = L11 * d1 + L21 * d2, z2 = L22 * d2;
  const double B = z1 * z1 + z2 * z2;
  if (B > K2) return 0;
  const double half = sqrt(K2 - B) / L00, xc = c[0] - A / L00;
  int x0 = (int)ceil(xc - half), x1 = (int)floor(xc + half);
  if (x0 < 0) x0 = 0;
  if (x1 > n0 - 1) x1 = n0 - 1;
  if (x0 > x1) return 0;
  r->x0 = x0;
  r->x1 = x1;
  r->d0 = x0 - c[0];
  const double z0 = L00 * r->d0 + A;
  r->G = rho * exp(-0.5 * (z0 * z0 + B));
  r->R = exp(-L00 * z0 - 0.5 * L00 * L00);
  r->Q = exp(-L00 * L00);
  return 1;
}

/* The residual's moments along the row: m[0] = sum r G, m[1] = sum r G d0, m[2] = sum r G d0^2
 * (res: the residual of the row, indexed by x). */
static XT_INLINE XT_HOSTDEV void xt_fit_row_moments(const xt_fit_row *r, const float *res, double m[3]) {
  double G = r->G, R = r->R, d0 = r->d0, W = 0, W0 = 0, W00 = 0;
  for (int x = r->x0; x <= r->x1; x++) {
    const double w = res[x] * G;
    W += w;
    W0 += w * d0;
    W00 += w * d0 * d0;
    G *= R;
    R *= r->Q;
    d0 += 1.0;
  }
  m[0] = W;
  m[1] = W0;
  m[2] = W00;
}

#endif /* XT_FIT_ROW_H */
