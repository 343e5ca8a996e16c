/* The CUDA Gaussian kind's own measurement entry point (proj_gmm.cu), for the benchmark: plain C,
 * no CUDA headers. Rendering itself goes through the frame pipeline (xt_proj_cuda.h). */
#ifndef XT_GMM_CUDA_H
#define XT_GMM_CUDA_H

#include "xt_proj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Work and time of one frame of the tile pipeline, per stage (CUDA events, median over reps
 * after warm-up, device-resident output). */
typedef struct xt_gmm_cuda_profile {
  double ms_preprocess; /* footprints, culling, tile counts (all GMM models) */
  double ms_scan;       /* prefix sum of the tile counts and the read-back of the pair count */
  double ms_duplicate;  /* one (tile, Gaussian) pair per touched tile */
  double ms_sort;       /* CUB radix sort of the pairs by tile */
  double ms_ranges;     /* each tile's [start, end) in the sorted pairs */
  double ms_render;     /* per-pixel exact integrals */
  double ms_total;      /* all of the above, back to back */
  double gaussians;     /* Gaussians of the scene */
  double visible;       /* Gaussians with at least one tile */
  double pairs;         /* (tile, Gaussian) pairs */
  double evaluated;     /* pixel-Gaussian evaluations (pairs x the tile's pixels on the detector) */
} xt_gmm_cuda_profile;

/* Renders the GMM models of `models` (others are ignored) for geometry g on device `device`,
 * reps times after warmup, with events between stages. */
int xt_gmm_cuda_profile_frame(int device, const xt_model *const *models, int n, const xt_geometry *g, int warmup,
                              int reps, xt_gmm_cuda_profile *out, xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_GMM_CUDA_H */
