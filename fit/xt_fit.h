/* Fitting Gaussian mixtures to voxel volumes (`xtwin gmm-fit`), and the image metrics its report
 * and the benchmark use.
 *
 * Layering: fit/ sits above projectors/ (the report renders projections through xt_proj, and the
 * optional projection refinement integrates rays with xt_gmm_line.h), beside tools/ and bench/;
 * models/ stays free of both (docs/models.md says why).
 *
 * The method (docs/models.md, "Fitting"): in voxel-index space, adaptive k-d subdivision of the
 * volume (blocks larger than a lattice size first, then the block with the largest squared error
 * about its mean, until the Gaussian budget or the error target is reached), one Gaussian per
 * non-empty block by moment matching (mass, mean, covariance widened so that neighbours blend
 * into a flat field), then Adam on the mean squared volume error over centres, Cholesky factors
 * of the precisions and log peak densities, stopping at the iteration limit or the 3D PSNR
 * target. Optionally a final refinement on projections at a set of poses. */
#ifndef XT_FIT_H
#define XT_FIT_H

#include <stddef.h>

#include "xt_gmm.h"
#include "xt_model.h"
#include "xt_proj.h"

/* The default and largest margin (xt_fit_options.margin), voxels: 8 holds the cut-off ellipsoid
 * (K = 4) of a boundary Gaussian of sigma up to 2 voxels. */
#define XT_FIT_MARGIN_DEFAULT 8
#define XT_FIT_MARGIN_MAX 64

typedef struct xt_fit_options {
  int budget;           /* at most this many Gaussians (>= 1) */
  double target_psnr;   /* stop when the 3D PSNR reaches this (dB); 0: run all iterations */
  int iters;            /* gradient-descent iterations on the volume error (0: initialisation only) */
  double lr;            /* learning-rate scale (1: the defaults of docs/models.md) */
  double inflate;       /* moment-matching sigma factor */
  double lattice;       /* largest block side, voxels (0: from the budget) */
  double fit_cutoff;    /* Mahalanobis radius the fit evaluates Gaussians to */
  double cutoff;        /* the fitted model's cut-off radius */
  /* empty voxels the fit's grid adds beyond each face of the volume that carries mass (a CT cut
   * through the patient: the neck, the top of a torso). The renderer sees nothing beyond the
   * volume, but the Gaussians of a cut face spread their tails there, unseen by a volume error
   * confined to the volume: on the real head CT that mass was the largest 2D error (docs/models.md,
   * "Fitting"). The margin makes it part of the error. 0: none. */
  int margin;
  int threads;          /* CPU threads, 0 = all cores */
  int engine;           /* XT_FIT_AUTO, XT_FIT_CPU, XT_FIT_CUDA */
  /* optional refinement on projections: proj_iters Adam steps on the squared error of the
   * mixture's line integrals against the volume's at proj_poses poses of geometry mode
   * proj_mode (primary angles spread over 180 deg), proj_size^2 pixels */
  int proj_iters, proj_poses, proj_size;
  const char *proj_mode;
  /* progress: called after each stage step; stage is "init", "fit" or "proj" */
  void (*progress)(void *ctx, const char *stage, int done, int total, double psnr3d);
  void *progress_ctx;
} xt_fit_options;

enum { XT_FIT_AUTO = 0, XT_FIT_CPU = 1, XT_FIT_CUDA = 2 };

/* The defaults (budget 30000, 150 iterations, no target). */
xt_fit_options xt_fit_default_options(void);

typedef struct xt_fit_result {
  size_t count;        /* Gaussians */
  size_t bytes;        /* native file size */
  double psnr3d_init;  /* dB, the initialisation's (peak = the volume's largest mu) */
  double psnr3d;       /* dB, the fitted model's, evaluated to its cut-off */
  double psnr3d_proj;  /* dB, after the projection refinement (0 when none ran) */
  int iters;           /* iterations run */
  int grid[3];         /* the fit's grid (the volume and its margins), voxels */
  double seconds;
  char engine[32];     /* "cpu (N threads)" or "cuda" */
} xt_fit_result;

/* Fits a mixture to the volume (dense or labels, any index_to_model); the mixture is in the
 * volume's model frame, finished, with material labels from the label volume's majority per
 * initial block (labels volumes only). */
int xt_fit_volume(const xt_volume *v, const xt_fit_options *o, xt_gmm **out, xt_fit_result *res, xt_msg *msg);

/* --- metrics (xt_metrics.c) ------------------------------------------------------------------ */

/* PSNR (dB) of a against the reference b over n values, peak = max |b|; inf when equal. */
double xt_psnr(const float *a, const float *b, int rows, int cols);
/* Mean SSIM of a against b (Wang et al. 2004: Gaussian window sigma 1.5, 11 x 11, K1 0.01,
 * K2 0.03, dynamic range = max |b|), over the pixels whose window lies inside the image. */
double xt_ssim(const float *a, const float *b, int rows, int cols);

/* The report of xtwin gmm-fit: renders the mixture (placed like the volume's model vm) and the
 * voxel model at the nine thesis angles with the backend and detector given, and fills psnr[9],
 * ssim[9]. cols = rows = size (the detector's physical size kept). */
int xt_fit_report(const xt_model *vm, const xt_model *gm, xt_backend backend, const char *mode, int size,
                  double psnr[9], double ssim[9], xt_msg *msg);

#endif /* XT_FIT_H */
