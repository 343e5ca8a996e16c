/* xtwin bench: the fixed projector benchmark of issue 3 (docs/BENCHMARKS.md), and the generated
 * phantoms it renders, which the GPU tests reuse. */
#ifndef XT_BENCH_H
#define XT_BENCH_H

#include "xt_model.h"

/* Rows of the closing SUMMARY table at most (a row per model, scene and NanoVDB traversal). */
#define XT_BENCH_MAX_SUMMARY 160

/* `xtwin bench [options]`; prints the tables, returns 0 or 1. */
int xt_bench_main(int argc, char **argv);

/* The thesis-sized head: 181 x 178 x 216 voxels of 1 mm, 7 materials (fat, soft tissue, brain,
 * blood, bone, iodine vessels, metal) painted from ellipsoids. XT_VOXEL_U8 gives labels + the
 * default table at 60 keV; XT_VOXEL_F32 gives the same voxels as float mu. */
int xt_bench_head(int type, xt_model **out, xt_msg *msg);
/* A CT-like torso, 512^3 voxels of 0.5 mm, float mu with 2% texture noise. */
int xt_bench_ct(int n, double spacing_mm, xt_model **out, xt_msg *msg);
/* Fraction of voxels denser than air (mu > 1e-4 /mm). */
double xt_bench_nonair(const xt_volume *v);

/* Gaussian-mixture scenes (e) and (f) (xt_bench_gmm.c), those of `scenes` that are asked for;
 * appends rows to summary (up to max). gmm_file: the fitted head of (f), or NULL. */
int xt_bench_gmm(const char *scenes, int frames, int warmup, int quick, const char *gmm_file, char (*summary)[200],
                 int *nsum, int max, xt_msg *msg);
/* n random Gaussians filling a head-sized ellipsoid (the mixtures of (e)), reproducible by seed. */
int xt_bench_random_gmm(size_t n, unsigned seed, xt_model **out, xt_msg *msg);
/* NanoVDB scenes (g) and (h) (bench/xt_bench_nvdb.c): prints their tables and appends summary
 * rows (name, ms/frame, fps, bytes as % of dense, targets) to summary[nsum..max). */
typedef struct xt_bench_nvdb_ctx {
  const char *scenes; /* runs 'g', 'h' and/or 'r' */
  int frames, warmup, quick;
  char (*summary)[200];
  int nsum, max;
  const char *real_ct; /* (r): the raw int16 HU volume scripts/real-ct extracts (cranium.raw) */
} xt_bench_nvdb_ctx;
int xt_bench_nvdb(xt_bench_nvdb_ctx *c, xt_msg *msg);
/* (h)'s whole-body torso: nx x ny x nz voxels of h mm, float mu, air around, organs inside. */
int xt_bench_torso(int nx, int ny, int nz, double h, xt_model **out, xt_msg *msg);

#endif /* XT_BENCH_H */
