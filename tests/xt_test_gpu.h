/* Shared by the GPU tests (test_cuda.c, test_gmm_cuda.c, test_nvdb_cuda.c): a GPU frame against the float64 CPU
 * reference with the projector's promise - relative L2 < 1e-5 and max |gpu - ref| <= 1e-4 of the
 * frame's max, every pixel written (frames are poisoned with NaN first). */
#ifndef XT_TEST_GPU_H
#define XT_TEST_GPU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "xt_proj.h"

/* The worst figures over a test binary's comparisons (each test runs in a process of its own). */
static double g_worst_ratio, g_worst_rel;

/* GPU frame vs the float64 reference; prints and returns the failures. */
static int compare(const char *what, const xt_model *const *models, int nm, const xt_geometry *g, const float *gpu) {
  size_t np = (size_t)g->mode.cols * g->mode.rows;
  double *ref = malloc(sizeof(double) * np);
  if (!ref) return 1;
  xt_msg msg;
  if (xt_ref_render_f64(models, nm, g, ref, 0, &msg)) {
    free(ref);
    return 1;
  }
  double mx = 0, num = 0, den = 0, worst = 0;
  size_t bad = 0, worst_i = 0, unwritten = 0, hit = 0;
  for (size_t i = 0; i < np; i++) {
    if (!isfinite(gpu[i])) unwritten++;
    if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    hit += ref[i] > 0;
  }
  for (size_t i = 0; i < np; i++) {
    double e = fabs((double)gpu[i] - ref[i]);
    if (!(e <= worst)) {
      worst = e;
      worst_i = i;
    }
    num += e * e;
    den += ref[i] * ref[i];
    if (!(e <= 1e-4 * mx)) bad++;
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int fail = unwritten > 0 || bad > 0 || !(rel < 1e-5) || mx == 0;
  if (mx > 0 && worst / mx > g_worst_ratio) g_worst_ratio = worst / mx;
  if (rel > g_worst_rel) g_worst_rel = rel;
  if (fail || getenv("XT_CUDA_TEST_VERBOSE"))
    fprintf(stderr,
            "  %s: %dx%d, max %.6g, %zu pixels hit, rel L2 %.3g, max abs %.3g (%.3g of max) at pixel %zu (gpu %.9g ref "
            "%.9g), %zu over tolerance, %zu unwritten\n",
            what, g->mode.cols, g->mode.rows, mx, hit, rel, worst, mx > 0 ? worst / mx : 0, worst_i, gpu[worst_i],
            ref[worst_i], bad, unwritten);
  free(ref);
  return fail;
}

/* Prints the worst figures of this binary's comparisons so far. */
static inline void summary(const char *test) { /* inline: not every test binary prints it */
  printf("  %s: worst max |gpu - ref| %.3g of the frame maximum, worst relative L2 %.3g\n", test, g_worst_ratio,
         g_worst_rel);
  fflush(stdout);
}

static float *poisoned(size_t n) {
  float *f = malloc(sizeof(float) * n);
  if (f)
    for (size_t i = 0; i < n; i++) f[i] = NAN;
  return f;
}

#endif /* XT_TEST_GPU_H */
