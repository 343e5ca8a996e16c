/* The fitter's internals shared by its files (xt_fit.c: initialisation, Adam, the CPU engine;
 * fit_cuda.cu: the CUDA engine; xt_fit_proj.c: the projection refinement). Not installed. */
#ifndef XT_FIT_INTERNAL_H
#define XT_FIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "xt_fit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mu at or below this (1/mm) is air, left out of the fit (air is 2e-5 /mm at 60 keV). */
#define XT_FIT_AIR_MU 1e-4

/* One Gaussian during the fit, in voxel-index space: centre, log of the Cholesky factor's
 * diagonal, its off-diagonal (L10, L20, L21; P = L L^T), log rho. */
typedef struct xt_fit_param {
  double c[3], u[3], l[3], lr;
} xt_fit_param;

/* The gradient's layout per Gaussian. */
enum { XT_FIT_C = 0, XT_FIT_U = 3, XT_FIT_L = 6, XT_FIT_LR = 9, XT_FIT_NP = 10 };

/* The fit's grid: the volume, with `margin` empty voxels (xt_fit_options) on both sides of each
 * axis whose end faces carry mass (pad[a] voxels on each side of axis a; xt_fit.h says why). */
typedef struct xt_fit_problem {
  int n[3], nmax;
  int pad[3];            /* margin per axis and side, voxels */
  size_t nv;
  xt_affine i2m;         /* the fit grid's index -> model mm */
  float *mu;             /* target, air zeroed (owned) */
  uint8_t *labels;       /* label volumes: the labels on the fit grid (owned), else NULL */
  double peak;           /* largest mu */
} xt_fit_problem;

/* An engine evaluates the volume error and its gradient. forward: sum of the Gaussians over
 * their ellipsoids of radius K, minus the target, and the squared sum; backward: the gradient
 * of sum (M - mu)^2 / N per Gaussian (XT_FIT_NP each), from the residual the last forward left. */
typedef struct xt_fit_engine xt_fit_engine;
struct xt_fit_engine {
  const xt_fit_problem *pb;
  char name[32];
  int (*forward)(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *sse, xt_msg *msg);
  int (*backward)(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *grad, xt_msg *msg);
  void (*destroy)(xt_fit_engine *e);
};

void xt__fit_lmat(const xt_fit_param *p, double L[3][3]);
void xt__fit_sigma(const xt_fit_param *p, double S[3][3]);
/* The gradient from the residual's moments over one Gaussian's ellipsoid (xt_fit.c). */
void xt__fit_grad_from_moments(const xt_fit_param *p, double S0, const double S1[3], const double S2[6], double inv_n,
                               double *gr);
int xt__fit_problem_init(const xt_volume *v, int margin, xt_fit_problem *pb, xt_msg *msg);
void xt__fit_problem_free(xt_fit_problem *pb);
int xt__fit_to_gmm(const xt_fit_problem *pb, const xt_fit_param *par, const uint8_t *lab, int n, double cutoff,
                   xt_gmm **out, xt_msg *msg);

/* The CPU engine (xt_fit.c): threads 0 = all cores. */
int xt__fit_cpu_engine(const xt_fit_problem *pb, int threads, xt_fit_engine **out, xt_msg *msg);
/* The CUDA engine (fit_cuda.cu), or XT_ENODEV without a device or a CUDA build. */
int xt__fit_cuda_engine(const xt_fit_problem *pb, xt_fit_engine **out, xt_msg *msg);

/* The projection refinement (xt_fit_proj.c): o->proj_iters Adam steps on the volume error plus
 * the projection error at o->proj_poses poses. m, v: Adam's moments (continued). */
int xt__fit_project(const xt_fit_problem *pb, const xt_volume *v, const xt_fit_options *o, xt_fit_param *par, int n,
                    double *m, double *vv, xt_fit_result *res, xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_FIT_INTERNAL_H */
