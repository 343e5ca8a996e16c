/* Random Gaussian mixtures for the GMM tests (C and C++: test_gmm*.c, test_gmm_footprint.cu).
 * rand()-driven, so each test seeds its own sequence with srand(). Test code only. */
#ifndef XT_TEST_GMM_H
#define XT_TEST_GMM_H

#include <math.h>
#include <stdlib.h>

#include "xt_gmm.h"

static inline double urand(double lo, double hi) { return lo + (hi - lo) * ((double)rand() / RAND_MAX); }

/* A random quaternion of norm in [0.22, 1] (not unit: the loaders normalise). */
static inline void random_quat(float q[4]) {
  double n;
  do {
    for (int a = 0; a < 4; a++) q[a] = (float)urand(-1, 1);
    n = (double)q[0] * q[0] + (double)q[1] * q[1] + (double)q[2] * q[2] + (double)q[3] * q[3];
  } while (n < 0.05 || n > 1);
}

/* n Gaussians, centres within +-spread mm, scales log-uniform in [smin, smax] per axis, rho in
 * [0.001, 0.05] /mm, the given cut-off; a finished mixture wrapped in a model (NULL on failure). */
static inline xt_model *random_mixture(int n, double spread, double smin, double smax, double cutoff) {
  xt_gmm *g;
  xt_model *m;
  if (xt_gmm_create((size_t)n, &g, NULL)) return NULL;
  for (int i = 0; i < n; i++) {
    for (int a = 0; a < 3; a++) {
      g->g[i].centre[a] = (float)urand(-spread, spread);
      g->g[i].scale[a] = (float)(smin * pow(smax / smin, urand(0, 1)));
    }
    random_quat(g->g[i].quat);
    g->g[i].rho = (float)urand(0.001, 0.05);
  }
  g->cutoff = cutoff;
  if (xt_gmm_finish(g, "random", NULL) || xt_model_from_gmm(g, "random", &m, NULL)) {
    xt_gmm_free(g);
    return NULL;
  }
  return m;
}

#endif /* XT_TEST_GMM_H */
