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

/* n Gaussians centred within +-spread mm, scales smin..smax mm, rho 0.001..0.031 /mm, rotations
 * about a random axis in the x-z plane, with labels 1..7 of the default material table (labels 1)
 * or none; placed shifted by `shift` mm along x. (The draws are test_chain_cuda's measured scene.) */
static inline xt_model *labelled_mixture(int n, int labels, double spread, double smin, double smax, double shift) {
  xt_gmm *gm;
  xt_model *m;
  if (xt_gmm_create((size_t)n, &gm, NULL)) return NULL;
  gm->has_labels = labels;
  for (int i = 0; i < n; i++) {
    xt_gaussian *g = &gm->g[i];
    for (int a = 0; a < 3; a++) {
      g->centre[a] = (float)(-spread + 2 * spread * rand() / RAND_MAX);
      g->scale[a] = (float)(smin + (smax - smin) * rand() / RAND_MAX);
    }
    g->quat[0] = (float)(0.2 + 0.8 * rand() / RAND_MAX);
    g->quat[2] = (float)(-1 + 2.0 * rand() / RAND_MAX);
    g->rho = (float)(0.001 + 0.03 * rand() / RAND_MAX);
    g->label = labels ? (uint32_t)(1 + rand() % (XT_MAT_DEFAULT_COUNT - 1)) : XT_GMM_NO_LABEL;
  }
  if (xt_gmm_finish(gm, "mixture", NULL) || xt_model_from_gmm(gm, labels ? "mix-labels" : "mix", &m, NULL)) {
    xt_gmm_free(gm);
    return NULL;
  }
  m->placement.t[0] = shift;
  return m;
}

#endif /* XT_TEST_GMM_H */
