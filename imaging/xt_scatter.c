/* Scatter: the host side of xt_scatter.h (the spectrum's water curve, a frame's plan). */
#include <math.h>

#include "xt_basis.h"
#include "xt_chain_internal.h"
#include "xt_scatter.h"

int xt_scatter_water_fit(const xt_chain_tables *t, double *wa, double *wb, xt_msg *msg) {
  double mu[XT_CHAIN_MAX_BINS];
  for (int b = 0; b < t->nbins; b++) {
    const double e = t->k1[b] > 0 ? (double)t->k2[b] / t->k1[b] : 50.0; /* k2 / k1 = the bin's energy */
    double mr = 0;
    int rc = xt_basis_mass_atten(XT_BASIS_WATER, e, &mr, msg);
    if (rc) return rc;
    mu[b] = mr * xt_basis_density(XT_BASIS_WATER) * 0.1; /* per mm */
  }
  /* least squares of L(t) = a t + b t^2 over t = 10..400 mm */
  double s22 = 0, s23 = 0, s33 = 0, s2l = 0, s3l = 0;
  for (int k = 1; k <= 40; k++) {
    const double tt = 10.0 * k;
    double sig = 0;
    for (int b = 0; b < t->nbins; b++) sig += t->k1[b] * exp(-mu[b] * tt);
    const double L = log(t->flat1 / sig);
    s22 += tt * tt;
    s23 += tt * tt * tt;
    s33 += tt * tt * tt * tt;
    s2l += tt * L;
    s3l += tt * tt * L;
  }
  const double det = s22 * s33 - s23 * s23;
  *wa = (s2l * s33 - s3l * s23) / det;
  *wb = (s22 * s3l - s23 * s2l) / det;
  return 0;
}

void xt_scatter_plan_make(const xt_chain_params *p, const xt_chain_info *ci, int cols, int rows, double pitch_mm,
                          xt_scatter_plan *s) {
  const int big = cols > rows ? cols : rows;
  s->field = NULL;
  s->cell = (big + XT_SCATTER_MAX_GRID - 1) / XT_SCATTER_MAX_GRID;
  if (s->cell < 1) s->cell = 1;
  s->gc = (cols + s->cell - 1) / s->cell;
  s->gr = (rows + s->cell - 1) / s->cell;
  s->spr_200 = (float)p->spr_200;
  s->spr_exp = (float)p->spr_exp;
  s->grid_ts = p->grid ? (float)p->grid_ts : 1.f;
  s->sigma_cells = (float)(p->scatter_sigma_mm / (s->cell * pitch_mm));
  int r = (int)ceil(3.0 * s->sigma_cells);
  if (r > XT_SCATTER_MAX_GRID - 1) r = XT_SCATTER_MAX_GRID - 1;
  if (s->sigma_cells < 0.3f) r = 0;
  s->radius = r;
  double sum = 0;
  for (int d = -r; d <= r; d++) sum += r ? exp(-0.5 * d * d / ((double)s->sigma_cells * s->sigma_cells)) : 1.0;
  s->wnorm = (float)(1.0 / sum);
}
