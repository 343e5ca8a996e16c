/* xtwin bench, Gaussian mixtures (issue 8):
 *
 *   (e) 100k and 1M random Gaussians filling a head-sized ellipsoid (semi-axes 90 x 110 x 100 mm,
 *       scales ~0.55 x the mean spacing, so a larger mixture has smaller Gaussians, as a denser
 *       model would), thesis geometry, 1024^2, the nine angles of (a): the whole pipeline per
 *       frame (CUDA events around the kind's launch, the pair-count read-back included), and each
 *       stage (preprocess, scan + read-back, duplicate, sort, ranges, render) with the work
 *       behind it (visible Gaussians, tile-Gaussian pairs, pixel evaluations);
 *   (f) a fitted head (--gmm FILE, made by `xtwin gmm-fit --phantom bench-head`): bytes against
 *       the dense float volume, PSNR and SSIM of its renders against the voxel renders at the
 *       nine angles, and its render time beside the voxel render's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_bench.h"
#include "xt_gmm.h"
#include "xt_gmm_cuda.h"
#include "xt_proj_cuda.h"
#ifdef XT_BENCH_HAVE_FIT
#include "xt_fit.h"
#endif

static const double angles[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};

static unsigned g_seed = 12345u;
static double urand(double lo, double hi) {
  g_seed = g_seed * 1664525u + 1013904223u;
  return lo + (hi - lo) * ((g_seed >> 8) / 16777216.0);
}

int xt_bench_random_gmm(size_t n, unsigned seed, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  int rc = xt_gmm_create(n, &g, msg);
  if (rc) return rc;
  g_seed = seed;
  const double ax[3] = {90, 110, 100};
  const double vol = 4.0 / 3.0 * XT_PI * ax[0] * ax[1] * ax[2];
  const double s0 = 0.55 * cbrt(vol / (double)n);
  for (size_t i = 0; i < n; i++) {
    xt_gaussian *p = &g->g[i];
    double x[3], r2;
    do {
      r2 = 0;
      for (int a = 0; a < 3; a++) {
        x[a] = urand(-1, 1);
        r2 += x[a] * x[a];
      }
    } while (r2 > 1);
    for (int a = 0; a < 3; a++) {
      p->centre[a] = (float)(x[a] * ax[a]);
      p->scale[a] = (float)(s0 * exp(urand(log(0.5), log(2.0))));
    }
    double qn;
    do {
      qn = 0;
      for (int a = 0; a < 4; a++) {
        p->quat[a] = (float)urand(-1, 1);
        qn += (double)p->quat[a] * p->quat[a];
      }
    } while (qn < 0.05 || qn > 1);
    p->rho = (float)urand(0.002, 0.02);
  }
  if ((rc = xt_gmm_finish(g, "bench mixture", msg)) || (rc = xt_model_from_gmm(g, "bench-random", out, msg))) {
    xt_gmm_free(g);
    return rc;
  }
  return 0;
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpf);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int thesis_geoms(xt_geometry g[9], xt_msg *msg) {
  const xt_detector_mode *m = xt_mode_find("thesis");
  if (!m) return xt_fail(msg, XT_ENOTFOUND, "bench: no detector mode thesis");
  for (int i = 0; i < 9; i++) {
    xt_pose p = xt_pose_default(m);
    p.primary_deg = angles[i];
    int rc = xt_geom_compute(&p, m, &g[i], msg);
    if (rc) return rc;
  }
  return 0;
}

static void add_row(char (*sum)[200], int *nsum, int max, const char *name, double ms, const char *target) {
  if (*nsum < max)
    snprintf(sum[(*nsum)++], 200, "%-34s %9.4f %9.0f %8s  %s", name, ms, 1e3 / ms, "-", target);
}

/* Times the nine angles for the models on a default CUDA projector; *mean gets the mean of the
 * per-angle medians (ms). Prints a row per angle. */
static int time_nine(xt_model *const *models, int nm, const xt_geometry *g, int frames, int warmup, double *mean,
                     double per_angle[9], xt_msg *msg) {
  xt_cuda_options o = xt_cuda_default_options();
  xt_cuda_proj *p = NULL;
  float *ms = malloc(sizeof(float) * (size_t)frames);
  int rc = ms ? xt_cuda_create(&o, &p, msg) : xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  for (int i = 0; i < nm && !rc; i++) rc = xt_cuda_add_model(p, models[i], msg);
  double sum = 0;
  for (int i = 0; i < 9 && !rc; i++) {
    rc = xt_cuda_time_kernel(p, &g[i], 1, 1, warmup, frames, ms, msg);
    if (!rc) {
      per_angle[i] = median(ms, frames);
      sum += per_angle[i];
    }
  }
  xt_cuda_destroy(p);
  free(ms);
  *mean = sum / 9;
  return rc;
}

/* ---- (e) --------------------------------------------------------------------------------------- */

static int scene_e(int frames, int warmup, int quick, char (*sum)[200], int *nsum, int max, xt_msg *msg) {
  xt_geometry g[9];
  int rc = thesis_geoms(g, msg);
  if (rc) return rc;
  const size_t sizes[2] = {quick ? 10000 : 100000, quick ? 100000 : 1000000};
  const double target_ms[2] = {1.0, 5.0};
  for (int s = 0; s < 2; s++) {
    xt_model *m = NULL;
    if ((rc = xt_bench_random_gmm(sizes[s], 777u + (unsigned)s, &m, msg))) return rc;
    printf("\n(e) %zu random Gaussians in a 180 x 220 x 200 mm ellipsoid, thesis geometry 1024x1024, %d frames after %d "
           "warm-up per angle, cut-off %.2f sigma\n",
           sizes[s], frames, warmup, xt_model_gmm(m)->cutoff);
    double mean = 0, pa[9];
    if ((rc = time_nine(&m, 1, g, frames, warmup, &mean, pa, msg))) {
      xt_model_free(m);
      return rc;
    }
    printf("  %7s %9s %8s | %8s %8s %8s %8s %8s %8s | %9s %10s %12s\n", "angle", "whole ms", "fps", "pre", "scan", "dup",
           "sort", "ranges", "render", "visible", "pairs", "pixel evals");
    xt_gmm_cuda_profile acc;
    memset(&acc, 0, sizeof acc);
    for (int i = 0; i < 9 && !rc; i++) {
      xt_gmm_cuda_profile pr;
      const xt_model *ms[1] = {m};
      if ((rc = xt_gmm_cuda_profile_frame(0, ms, 1, &g[i], warmup > 2 ? 2 : warmup, frames < 20 ? frames : 20, &pr, msg)))
        break;
      printf("  %7.0f %9.4f %8.0f | %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f | %9.0f %10.0f %12.3g\n", angles[i], pa[i],
             1e3 / pa[i], pr.ms_preprocess, pr.ms_scan, pr.ms_duplicate, pr.ms_sort, pr.ms_ranges, pr.ms_render,
             pr.visible, pr.pairs, pr.evaluated);
      acc.ms_preprocess += pr.ms_preprocess / 9;
      acc.ms_scan += pr.ms_scan / 9;
      acc.ms_duplicate += pr.ms_duplicate / 9;
      acc.ms_sort += pr.ms_sort / 9;
      acc.ms_ranges += pr.ms_ranges / 9;
      acc.ms_render += pr.ms_render / 9;
      acc.pairs += pr.pairs / 9;
      acc.evaluated += pr.evaluated / 9;
      acc.visible += pr.visible / 9;
    }
    if (!rc) {
      printf("  %7s %9.4f %8.0f | %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f | %9.0f %10.0f %12.3g\n", "mean", mean, 1e3 / mean,
             acc.ms_preprocess, acc.ms_scan, acc.ms_duplicate, acc.ms_sort, acc.ms_ranges, acc.ms_render, acc.visible,
             acc.pairs, acc.evaluated);
      char name[64], tgt[64];
      snprintf(name, sizeof name, "(e) %zuk Gaussians, mean of 9", sizes[s] / 1000);
      snprintf(tgt, sizeof tgt, ">=%.0f fps: %s", 1e3 / target_ms[s], mean <= target_ms[s] ? "met" : "MISSED");
      add_row(sum, nsum, max, name, mean, quick ? "-" : tgt);
    }
    xt_model_free(m);
    if (rc) return rc;
  }
  return 0;
}

/* ---- (f) --------------------------------------------------------------------------------------- */

#ifdef XT_BENCH_HAVE_FIT
static void fit_progress(void *ctx, const char *stage, int done, int total, double psnr) {
  (void)ctx;
  if (!strcmp(stage, "fit") && (done % 50 == 0 || done == total))
    printf("  fit %d/%d: 3D PSNR %.2f dB\n", done, total, psnr);
}
#endif

static int scene_f(const char *gmm_file, int frames, int warmup, char (*sum)[200], int *nsum, int max, xt_msg *msg) {
  xt_geometry g[9];
  int rc = thesis_geoms(g, msg);
  if (rc) return rc;
  xt_gmm *gm = NULL;
  xt_model *gmod = NULL, *head = NULL, *headf = NULL;
  float *a = NULL, *b = NULL;
  if ((rc = xt_bench_head(XT_VOXEL_U8, &head, msg)) || (rc = xt_bench_head(XT_VOXEL_F32, &headf, msg))) goto done;
  if (gmm_file) {
    if ((rc = xt_gmm_read_native(gmm_file, &gm, msg))) goto done;
    printf("\n(f) the head of (a) as a Gaussian mixture: %s\n", gmm_file);
  } else {
#ifdef XT_BENCH_HAVE_FIT
    /* what `xtwin gmm-fit --phantom bench-head --budget 28000` does, on the GPU when there is one */
    xt_fit_options fo = xt_fit_default_options();
    fo.budget = 28000;
    fo.progress = fit_progress;
    xt_fit_result fr;
    printf("\n(f) the head of (a) fitted as a Gaussian mixture (budget %d, %d iterations)\n", fo.budget, fo.iters);
    if ((rc = xt_fit_volume(xt_model_volume(head), &fo, &gm, &fr, msg))) goto done;
    printf("  fit: %zu Gaussians, 3D PSNR %.2f dB (initialisation %.2f dB), engine %s, %.1f s\n", fr.count, fr.psnr3d,
           fr.psnr3d_init, fr.engine, fr.seconds);
#else
    printf("\n(f) skipped: give --gmm FILE (xtwin gmm-fit --phantom bench-head --out FILE)\n");
    goto done;
#endif
  }
  if ((rc = xt_model_from_gmm(gm, "fitted head", &gmod, msg))) {
    xt_gmm_free(gm);
    goto done;
  }
  const size_t gbytes = xt_gmm_file_bytes(gm), vbytes = xt_model_volume(headf)->nbytes;
  printf("  %zu Gaussians, %zu bytes (native file) vs dense float mu %zu bytes: 1/%.1f\n", gm->count, gbytes, vbytes,
         (double)vbytes / gbytes);
  double gmean, vmean, gpa[9], vpa[9];
  if ((rc = time_nine(&gmod, 1, g, frames, warmup, &gmean, gpa, msg)) ||
      (rc = time_nine(&head, 1, g, frames, warmup, &vmean, vpa, msg)))
    goto done;
  const size_t np = 1024 * 1024;
  a = malloc(sizeof(float) * np);
  b = malloc(sizeof(float) * np);
  if (!a || !b) {
    rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
    goto done;
  }
  printf("  %7s %12s %12s %10s %8s\n", "angle", "gmm ms", "voxel ms", "PSNR dB", "SSIM");
  double worst = 1e9;
  for (int i = 0; i < 9 && !rc; i++) {
    xt_cuda_options o = xt_cuda_default_options();
    xt_cuda_proj *pg = NULL, *pv = NULL;
    rc = xt_cuda_create(&o, &pg, msg);
    if (!rc) rc = xt_cuda_add_model(pg, gmod, msg);
    if (!rc) rc = xt_cuda_render(pg, &g[i], a, msg);
    if (!rc) rc = xt_cuda_create(&o, &pv, msg);
    if (!rc) rc = xt_cuda_add_model(pv, head, msg);
    if (!rc) rc = xt_cuda_render(pv, &g[i], b, msg);
    xt_cuda_destroy(pg);
    xt_cuda_destroy(pv);
    if (rc) break;
#ifdef XT_BENCH_HAVE_FIT
    double psnr = xt_psnr(a, b, 1024, 1024), ssim = xt_ssim(a, b, 1024, 1024);
#else
    double psnr = NAN, ssim = NAN;
#endif
    if (psnr < worst) worst = psnr;
    printf("  %7.0f %12.4f %12.4f %10.2f %8.4f\n", angles[i], gpa[i], vpa[i], psnr, ssim);
  }
  if (!rc) {
    printf("  %7s %12.4f %12.4f   worst PSNR %.2f dB\n", "mean", gmean, vmean, worst);
    char tgt[96];
    snprintf(tgt, sizeof tgt, "1/%.1f bytes (<=1/20: %s), worst PSNR %.1f dB (>=40: %s)", (double)vbytes / gbytes,
             gbytes * 20 <= vbytes ? "met" : "MISSED", worst, worst >= 40 ? "met" : "MISSED");
    add_row(sum, nsum, max, "(f) fitted head GMM, mean of 9", gmean, tgt);
    add_row(sum, nsum, max, "(f) same head, voxel labels", vmean, "-");
  }
done:
  free(a);
  free(b);
  xt_model_free(gmod);
  xt_model_free(head);
  xt_model_free(headf);
  return rc;
}

int xt_bench_gmm(const char *scenes, int frames, int warmup, int quick, const char *gmm_file, char (*summary)[200],
                 int *nsum, int max, xt_msg *msg) {
  int rc = 0;
  if (strchr(scenes, 'e') && (rc = scene_e(frames, warmup, quick, summary, nsum, max, msg))) return rc;
  if (strchr(scenes, 'f') && (rc = scene_f(gmm_file, frames, warmup, summary, nsum, max, msg))) return rc;
  return 0;
}
