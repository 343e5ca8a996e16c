/* Image metrics of the fitter's report and the benchmark (xt_fit.h): PSNR against a reference
 * frame's own peak, and SSIM (Wang, Bovik, Sheikh, Simoncelli 2004) with its usual constants.
 * Written here rather than taken from a library: the formulas are a few lines, and the C
 * libraries on Debian that have them (OpenCV, ITK) are far heavier than what they would replace. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_fit.h"

double xt_psnr(const float *a, const float *b, int rows, int cols) {
  const size_t n = (size_t)rows * cols;
  double peak = 0, se = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(b[i]) > peak) peak = fabs(b[i]);
    const double d = (double)a[i] - b[i];
    se += d * d;
  }
  if (!(se > 0)) return INFINITY;
  return 10.0 * log10(peak * peak / (se / (double)n));
}

/* Separable Gaussian filter (sigma 1.5, 11 taps), "valid" part only: out is (rows-10) x (cols-10). */
static void blur(const double *in, int rows, int cols, double *tmp, double *out) {
  double w[11], s = 0;
  for (int k = 0; k < 11; k++) s += w[k] = exp(-0.5 * (k - 5) * (k - 5) / (1.5 * 1.5));
  for (int k = 0; k < 11; k++) w[k] /= s;
  const int oc = cols - 10, orows = rows - 10;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < oc; c++) {
      double v = 0;
      for (int k = 0; k < 11; k++) v += w[k] * in[(size_t)r * cols + c + k];
      tmp[(size_t)r * oc + c] = v;
    }
  for (int r = 0; r < orows; r++)
    for (int c = 0; c < oc; c++) {
      double v = 0;
      for (int k = 0; k < 11; k++) v += w[k] * tmp[(size_t)(r + k) * oc + c];
      out[(size_t)r * oc + c] = v;
    }
}

double xt_ssim(const float *a, const float *b, int rows, int cols) {
  if (rows < 11 || cols < 11) return NAN;
  const size_t n = (size_t)rows * cols, m = (size_t)(rows - 10) * (cols - 10);
  double peak = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs(b[i]) > peak) peak = fabs(b[i]);
  if (!(peak > 0)) peak = 1;
  const double C1 = (0.01 * peak) * (0.01 * peak), C2 = (0.03 * peak) * (0.03 * peak);
  double *buf = malloc(sizeof(double) * (n * 2 + (size_t)rows * (cols - 10) + m * 5));
  if (!buf) return NAN;
  double *x = buf, *y = x + n, *tmp = y + n, *mx = tmp + (size_t)rows * (cols - 10), *my = mx + m, *sxx = my + m,
         *syy = sxx + m, *sxy = syy + m;
  for (size_t i = 0; i < n; i++) {
    x[i] = a[i];
    y[i] = b[i];
  }
  blur(x, rows, cols, tmp, mx);
  blur(y, rows, cols, tmp, my);
  for (size_t i = 0; i < n; i++) x[i] = (double)a[i] * a[i];
  blur(x, rows, cols, tmp, sxx);
  for (size_t i = 0; i < n; i++) x[i] = (double)b[i] * b[i];
  blur(x, rows, cols, tmp, syy);
  for (size_t i = 0; i < n; i++) x[i] = (double)a[i] * b[i];
  blur(x, rows, cols, tmp, sxy);
  double acc = 0;
  for (size_t i = 0; i < m; i++) {
    const double vx = sxx[i] - mx[i] * mx[i], vy = syy[i] - my[i] * my[i], cxy = sxy[i] - mx[i] * my[i];
    acc += ((2 * mx[i] * my[i] + C1) * (2 * cxy + C2)) / ((mx[i] * mx[i] + my[i] * my[i] + C1) * (vx + vy + C2));
  }
  free(buf);
  return acc / (double)m;
}

int xt_fit_report(const xt_model *vm, const xt_model *gm, xt_backend backend, const char *mode, int size,
                  double psnr[9], double ssim[9], xt_msg *msg) {
  static const double angles[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return xt_fail(msg, XT_ENOTFOUND, "gmm-fit report: no detector mode %s", mode);
  if (size < 16 || size > 4096) return xt_fail(msg, XT_ERANGE, "gmm-fit report: detector size %d", size);
  xt_detector_mode dm = *md;
  dm.pitch_u_mm *= (double)md->cols / size;
  dm.pitch_v_mm *= (double)md->rows / size;
  dm.cols = dm.rows = size;
  const size_t np = (size_t)size * size;
  float *fa = malloc(sizeof(float) * np), *fb = malloc(sizeof(float) * np);
  xt_proj *pg = NULL, *pv = NULL;
  xt_proj_options po = {backend, 0, 0};
  int rc = 0;
  if (!fa || !fb) {
    rc = xt_fail(msg, XT_ENOMEM, "gmm-fit report: out of memory");
    goto done;
  }
  if ((rc = xt_proj_create(&po, &pg, msg)) || (rc = xt_proj_add_model(pg, gm, msg)) ||
      (rc = xt_proj_create(&po, &pv, msg)) || (rc = xt_proj_add_model(pv, vm, msg)))
    goto done;
  for (int i = 0; i < 9; i++) {
    xt_pose p = xt_pose_default(&dm);
    p.primary_deg = angles[i];
    xt_geometry g;
    if ((rc = xt_geom_compute(&p, &dm, &g, msg)) || (rc = xt_proj_render(pg, &g, fa, msg)) ||
        (rc = xt_proj_render(pv, &g, fb, msg)))
      goto done;
    psnr[i] = xt_psnr(fa, fb, size, size);
    ssim[i] = xt_ssim(fa, fb, size, size);
  }
done:
  xt_proj_destroy(pg);
  xt_proj_destroy(pv);
  free(fa);
  free(fb);
  return rc;
}
