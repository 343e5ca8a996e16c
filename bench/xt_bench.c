/* xtwin bench: the CUDA projector's fixed scene set (issue 3), timed with CUDA events.
 *
 *   (a) thesis scene (SOD 800, SID 1205, 40 cm at 1024^2), 181x178x216 head, labels + table and
 *       float mu, at 0, 30, 45, 60, 90, 120, 135, 150, 180 degrees;
 *   (b) 512^3, 0.5 mm CT-like torso (float mu) on the same detector;
 *   (c) FD20 full resolution (2480 x 1920), the head;
 *   (d) 1,000 random poses of (a) through the batch kernel;
 *   (s) streaming (a) into pinned host memory, render and copy overlapped.
 *
 * For each: median and minimum kernel time over >= 50 frames after warm-up, frames per second,
 * and the fraction of a bound derived from the steps the kernel takes (counted by the kernel
 * itself) times the instructions per step, against the SMs' issue rate, and from the bytes
 * against the device-to-device bandwidth measured here. The last lines are a summary table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_bench.h"
#include "xt_cuda_config.h"
#include "xt_proj_cuda.h"

/* Instructions (thread-level) per voxel step of the march, from ncu's sass_thread_inst_executed
 * over the kernel's own step count (docs/BENCHMARKS.md); --inst-per-step overrides. */
#define XT_BENCH_INST_PER_STEP 35.1

typedef struct bench_ctx {
  int frames, warmup, quick;
  double inst_per_step;
  xt_cuda_info info;
  double bw_gbps;
  const char *scenes;
  const char *gmm_file; /* (f): the fitted head */
  const char *real_ct;  /* (r): cranium.raw */
  int variants;
  char summary[XT_BENCH_MAX_SUMMARY][200];
  int nsum;
} bench_ctx;

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void stats(float *ms, int n, double *med, double *mn) {
  qsort(ms, (size_t)n, sizeof *ms, cmpf);
  *med = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  *mn = ms[0];
}

static void add_summary(bench_ctx *b, const char *name, double med_ms, double fps, double bound, const char *target) {
  if (b->nsum < XT_BENCH_MAX_SUMMARY)
    snprintf(b->summary[b->nsum++], sizeof b->summary[0], "%-34s %9.4f %9.0f %7.1f%%  %s", name, med_ms, fps,
             100.0 * bound, target);
}

/* The bound for one frame of `steps` voxel steps: issue time vs unique-bytes time; returns ms. */
static double bound_ms(const bench_ctx *b, double steps, double bytes) {
  double issue = (double)b->info.sm_count * 4.0 * 32.0 * b->info.sm_clock_mhz * 1e6; /* thread-inst/s */
  double t_issue = steps * b->inst_per_step / issue;
  double t_mem = bytes / (b->bw_gbps * 1e9);
  return 1e3 * (t_issue > t_mem ? t_issue : t_mem);
}

static int make_geom(const char *mode, double primary, double secondary, xt_vec3 table, xt_geometry *g, xt_msg *msg) {
  const xt_detector_mode *m = xt_mode_find(mode);
  if (!m) return xt_fail(msg, XT_ENOTFOUND, "bench: no detector mode %s", mode);
  xt_pose p = xt_pose_default(m);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.table_mm = table;
  return xt_geom_compute(&p, m, g, msg);
}

static const double angles[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};

/* Times one projector on a set of single-frame poses; prints a row per pose. */
static int time_poses(bench_ctx *b, xt_cuda_proj *p, const xt_geometry *g, int n, const char *label, double vox_bytes,
                      double *avg_med, double *worst_ratio, double *avg_bound, xt_msg *msg) {
  float *ms = malloc(sizeof(float) * (size_t)b->frames);
  if (!ms) return xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  double sum = 0, lo = 1e30, hi = 0, bsum = 0;
  printf("  %-28s %7s %9s %9s %9s %10s %8s\n", label, "angle", "med ms", "min ms", "fps", "Msteps", "bound%");
  for (int i = 0; i < n; i++) {
    int rc = xt_cuda_time_kernel(p, &g[i], 1, 1, b->warmup, b->frames, ms, msg);
    double steps = 0, hit = 0;
    if (!rc) rc = xt_cuda_count_steps(p, &g[i], &steps, &hit, msg);
    if (rc) {
      free(ms);
      return rc;
    }
    double med, mn;
    stats(ms, b->frames, &med, &mn);
    double bytes = vox_bytes + 4.0 * g[i].mode.cols * g[i].mode.rows;
    double bd = bound_ms(b, steps, bytes) / med;
    printf("  %-28s %7.1f %9.4f %9.4f %9.0f %10.1f %7.1f%%\n", "", g[i].pose.primary_deg, med, mn, 1e3 / med,
           steps / 1e6, 100 * bd);
    sum += med;
    bsum += bd;
    if (med < lo) lo = med;
    if (med > hi) hi = med;
  }
  free(ms);
  *avg_med = sum / n;
  *worst_ratio = hi / lo;
  *avg_bound = bsum / n;
  printf("  %-28s average %.4f ms (%.0f fps), slowest/fastest %.2f, bound %.1f%%\n", "", *avg_med, 1e3 / *avg_med,
         *worst_ratio, 100 * *avg_bound);
  return 0;
}

static const char *vox_name(int v) { return v == XT_CUDA_VOX_LINEAR ? "linear" : "texture"; }
static const char *lut_name(int l) { return l == XT_CUDA_LUT_SHARED ? "shared" : "const"; }

/* Times the nine angles of (a) for one model under options o and adds a summary row. */
static int time_variant(bench_ctx *b, xt_model *m, const xt_cuda_options *o, const xt_geometry *g, const char *label,
                        int is_target, xt_msg *msg) {
  const int labels = m->kind == XT_MODEL_LABELS;
  double vb = (labels ? 1.0 : 4.0) * (double)xt_volume_voxels(xt_model_volume(m));
  xt_cuda_proj *p;
  int rc;
  if ((rc = xt_cuda_create(o, &p, msg))) return rc;
  if ((rc = xt_cuda_add_model(p, m, msg))) {
    xt_cuda_destroy(p);
    return rc;
  }
  double med = 0, ratio = 0, bd = 0;
  rc = time_poses(b, p, g, 9, label, vb, &med, &ratio, &bd, msg);
  xt_cuda_destroy(p);
  if (rc) return rc;
  char name[80];
  snprintf(name, sizeof name, "(a) %s", label);
  const char *tgt = !is_target ? "-" : (med <= 0.15 && ratio <= 2 ? "<=0.15 ms: met" : "<=0.15 ms: MISSED");
  add_summary(b, name, med, 1e3 / med, bd, tgt);
  return 0;
}

static int scene_a(bench_ctx *b, xt_model *head_l, xt_model *head_f, xt_msg *msg) {
  xt_geometry g[9];
  int rc;
  for (int i = 0; i < 9; i++)
    if ((rc = make_geom("thesis", angles[i], 0, xt_v3(0, 0, 0), &g[i], msg))) return rc;
  printf("\n(a) thesis scene, head 181x178x216 @1 mm, detector 1024x1024, %d frames after %d warm-up per angle\n",
         b->frames, b->warmup);
  for (int kind = 0; kind < 2; kind++)
    for (int vox = 0; vox < 2; vox++)
      for (int lut = 0; lut < (kind == 0 ? 2 : 1); lut++) {
        if (!b->variants && (vox != XT_CUDA_VOX_LINEAR || lut != XT_CUDA_LUT_SHARED)) continue;
        xt_cuda_options o = xt_cuda_default_options();
        o.voxels = vox;
        o.lut = lut;
        char label[64];
        snprintf(label, sizeof label, "%s %s%s%s", kind == 0 ? "labels" : "float-mu", vox_name(vox),
                 kind == 0 ? "/" : "", kind == 0 ? lut_name(lut) : "");
        if ((rc = time_variant(b, kind == 0 ? head_l : head_f, &o, g, label, kind == 0, msg))) return rc;
      }
  /* The default options without the content hull: what the hull clipping gains. */
  for (int kind = 0; kind < 2; kind++) {
    xt_cuda_options o = xt_cuda_default_options();
    o.hull = 0;
    if ((rc = time_variant(b, kind == 0 ? head_l : head_f, &o, g, kind == 0 ? "labels default, no hull" : "float-mu default, no hull", 0, msg)))
      return rc;
  }
  return 0;
}

static int single_scene(bench_ctx *b, const char *title, const char *mode, xt_model *m, double vox_bytes,
                        const double *ang, int nang, double target_ms, const char *tag, xt_msg *msg) {
  xt_geometry g[9];
  int rc = 0;
  for (int i = 0; i < nang; i++)
    if ((rc = make_geom(mode, ang[i], 0, xt_v3(0, 0, 0), &g[i], msg))) return rc;
  printf("\n%s, detector %dx%d\n", title, g[0].mode.cols, g[0].mode.rows);
  /* The default options, then (with variants) each voxel storage explicitly. */
  for (int v = -1; v < (b->variants ? 2 : 0) && !rc; v++) {
    xt_cuda_options o = xt_cuda_default_options();
    if (v >= 0) o.voxels = v;
    xt_cuda_proj *p;
    if ((rc = xt_cuda_create(&o, &p, msg))) return rc;
    if (!(rc = xt_cuda_add_model(p, m, msg))) {
      char label[64], name[96];
      snprintf(label, sizeof label, "%s", v < 0 ? "default options" : vox_name(v));
      double med = 0, ratio = 0, bd = 0;
      rc = time_poses(b, p, g, nang, label, vox_bytes, &med, &ratio, &bd, msg);
      if (!rc) {
        char tgt[64];
        snprintf(tgt, sizeof tgt, "<=%.2f ms: %s", target_ms, med <= target_ms ? "met" : "MISSED");
        snprintf(name, sizeof name, "%s%s%s", tag, v < 0 ? "" : " ", v < 0 ? "" : label);
        add_summary(b, name, med, 1e3 / med, bd, v < 0 ? tgt : "-");
      }
    }
    xt_cuda_destroy(p);
  }
  return rc;
}

static double urand(unsigned *s, double lo, double hi) {
  *s = *s * 1103515245u + 12345u;
  return lo + (hi - lo) * ((*s >> 8) / 16777216.0);
}

static int scene_d_s(bench_ctx *b, xt_model *head_l, xt_msg *msg) {
  const int n = 1000;
  xt_geometry *g = malloc(sizeof *g * n);
  if (!g) return xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  unsigned seed = 42;
  int rc = 0;
  for (int i = 0; i < n && !rc; i++)
    rc = make_geom("thesis", urand(&seed, -180, 180), urand(&seed, -40, 40),
                   xt_v3(urand(&seed, -10, 10), urand(&seed, -10, 10), urand(&seed, -10, 10)), &g[i], msg);
  xt_cuda_options o = xt_cuda_default_options();
  xt_cuda_proj *p = NULL;
  if (!rc) rc = xt_cuda_create(&o, &p, msg);
  if (!rc) rc = xt_cuda_add_model(p, head_l, msg);
  if (!rc) {
    /* (d): all 1000 poses in one launch, timed 3 times after a warm-up. */
    const int reps = b->quick ? 1 : 3;
    float ms[3];
    printf("\n(d) batch of %d random poses of (a) (primary +-180, secondary +-40, table +-10 mm), one launch\n", n);
    rc = xt_cuda_time_kernel(p, g, n, n, 1, reps, ms, msg);
    if (!rc) {
      double med, mn;
      stats(ms, reps, &med, &mn);
      double fps = n / (med * 1e-3);
      printf("  launch of %d frames: median %.2f ms, min %.2f ms -> %.0f frames/s (%.4f ms/frame)\n", n, med, mn, fps,
             med / n);
      snprintf(b->summary[b->nsum++], sizeof b->summary[0], "%-34s %9.4f %9.0f %8s  %s", "(d) batch 1000 random poses",
               med / n, fps, "-", fps >= 8000 ? ">=8000 fps: met" : ">=8000 fps: MISSED");
    }
  }
  if (!rc) {
    /* Streaming: the nine angles of (a) cycled, render N+1 overlapping copy-out N into pinned memory. */
    xt_geometry ga[9];
    for (int i = 0; i < 9 && !rc; i++) rc = make_geom("thesis", angles[i], 0, xt_v3(0, 0, 0), &ga[i], msg);
    const int frames = b->quick ? 50 : 1000;
    double sec = 0;
    if (!rc) rc = xt_cuda_stream(p, ga, 9, frames, &sec, msg);
    if (!rc) {
      double fps = frames / sec;
      printf("\n(s) streaming (a) into pinned host memory: %d frames in %.3f s -> %.0f frames/s (%.1f GB/s to host)\n",
             frames, sec, fps, fps * 4.0 * 1024 * 1024 / 1e9);
      snprintf(b->summary[b->nsum++], sizeof b->summary[0], "%-34s %9.4f %9.0f %8s  %s", "(s) stream (a) to pinned host",
               1e3 / fps, fps, "-", fps >= 2000 ? ">=2000 fps: met" : ">=2000 fps: MISSED");
    }
    /* Time to a host buffer: one synchronous render() call. */
    float *out = malloc(sizeof(float) * 1024 * 1024);
    if (!rc && out) {
      const int reps = b->quick ? 5 : 50;
      float *ts = malloc(sizeof(float) * reps);
      for (int i = 0; i < reps + 3 && !rc && ts; i++) {
        double s;
        rc = xt_cuda_render_timed(p, &ga[i % 9], out, &s, msg);
        if (i >= 3) ts[i - 3] = (float)(s * 1e3);
      }
      if (!rc && ts) {
        double med, mn;
        stats(ts, reps, &med, &mn);
        printf("  render() to a host buffer (pose upload + kernel + copy to pinned + memcpy): median %.3f ms, min %.3f ms\n",
               med, mn);
        snprintf(b->summary[b->nsum++], sizeof b->summary[0], "%-34s %9.4f %9.0f %8s  %s", "(a) render() to host buffer",
                 med, 1e3 / med, "-", "-");
      }
      free(ts);
    }
    free(out);
  }
  xt_cuda_destroy(p);
  free(g);
  return rc;
}

static void usage(void) {
  printf("usage: xtwin bench [--frames N] [--warmup N] [--scenes abcdsefghr] [--no-variants] [--quick]\n"
         "                   [--inst-per-step X] [--gmm FITTED_HEAD.xgmm] [--real-ct cranium.raw]\n"
         "  (r): the real head CT (scripts/real-ct OUTDIR makes OUTDIR/cranium.raw); the NanoVDB scenes use\n"
         "  the traversal XT_NVDB_TRAVERSAL names (dense, the default, tree, bricks, bricks2 .. bricks8\n"
         "  or dense-each), or each of XT_BENCH_NVDB_TRAVERSALS=\"tree dense ...\" in turn on the same\n"
         "  models (a row per traversal)\n");
}

int xt_bench_main(int argc, char **argv) {
  bench_ctx b;
  memset(&b, 0, sizeof b);
  b.frames = 100;
  b.warmup = 10;
  b.inst_per_step = XT_BENCH_INST_PER_STEP;
  b.scenes = "abcdsef";
  b.variants = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--frames") && i + 1 < argc) b.frames = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) b.warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--scenes") && i + 1 < argc) b.scenes = argv[++i];
    else if (!strcmp(argv[i], "--inst-per-step") && i + 1 < argc) b.inst_per_step = atof(argv[++i]);
    else if (!strcmp(argv[i], "--gmm") && i + 1 < argc) b.gmm_file = argv[++i];
    else if (!strcmp(argv[i], "--real-ct") && i + 1 < argc) b.real_ct = argv[++i];
    else if (!strcmp(argv[i], "--no-variants")) b.variants = 0;
    else if (!strcmp(argv[i], "--quick")) {
      b.quick = 1;
      b.frames = 5;
      b.warmup = 1;
    } else {
      usage();
      return strcmp(argv[i], "--help") == 0 ? 0 : 1;
    }
  }
  if (b.frames < 1) b.frames = 1;
  xt_msg msg = {{0}};
  int rc = xt_cuda_device_info(0, &b.info, &msg);
  if (rc) {
    fprintf(stderr, "xtwin bench: %s\n", msg.text);
    return 1;
  }
  if ((rc = xt_cuda_copy_bandwidth(0, (size_t)1 << 30, 5, &b.bw_gbps, &msg))) {
    fprintf(stderr, "xtwin bench: %s\n", msg.text);
    return 1;
  }
  time_t now = time(NULL);
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  printf("xtwin bench, %s\nGPU: %s (cc %d.%d, %d SMs, %.0f MHz peak, L2 %zu MB, %.1f GB), driver %d, runtime %d\n", date,
         b.info.name, b.info.cc_major, b.info.cc_minor, b.info.sm_count, b.info.sm_clock_mhz, b.info.l2_bytes >> 20,
         b.info.global_bytes / 1e9, b.info.driver_version, b.info.runtime_version);
  printf("measured device-to-device copy: %.0f GB/s (read + write); issue bound: %d SMs x 4 x 32 lanes x %.0f MHz; "
         "%.1f thread-instructions per voxel step\n",
         b.bw_gbps, b.info.sm_count, b.info.sm_clock_mhz, b.inst_per_step);
  printf("bound%% = max(steps x inst/step / issue rate, (volume + frame bytes) / bandwidth) / median kernel time\n");

  xt_model *head_l = NULL, *head_f = NULL, *ct = NULL;
  if ((rc = xt_bench_head(XT_VOXEL_U8, &head_l, &msg)) || (rc = xt_bench_head(XT_VOXEL_F32, &head_f, &msg))) goto fail;
  printf("phantom head: %d x %d x %d @ 1 mm, labels %.1f MB + float mu %.1f MB, non-air %.1f%%\n",
         xt_model_volume(head_l)->dim[0], xt_model_volume(head_l)->dim[1], xt_model_volume(head_l)->dim[2], xt_model_volume(head_l)->nbytes / 1e6,
         xt_model_volume(head_f)->nbytes / 1e6, 100 * xt_bench_nonair(xt_model_volume(head_l)));

  if (strchr(b.scenes, 'a') && (rc = scene_a(&b, head_l, head_f, &msg))) goto fail;
  if (strchr(b.scenes, 'b')) {
    int n = b.quick ? 128 : 512;
    double h = 256.0 / n;
    if ((rc = xt_bench_ct(n, h, &ct, &msg))) goto fail;
    printf("\nphantom CT torso: %d^3 @ %.2f mm, float mu %.1f MB, non-air %.1f%%\n", n, h, xt_model_volume(ct)->nbytes / 1e6,
           100 * xt_bench_nonair(xt_model_volume(ct)));
    const double ang[3] = {0, 45, 90};
    if ((rc = single_scene(&b, "(b) CT-like 512^3 @ 0.5 mm", "thesis", ct, (double)xt_model_volume(ct)->nbytes, ang, 3, 0.7,
                           "(b) CT 512^3 float mu", &msg)))
      goto fail;
    xt_model_free(ct);
    ct = NULL;
  }
  if (strchr(b.scenes, 'c')) {
    const double ang[3] = {0, 45, 90};
    if ((rc = single_scene(&b, "(c) FD20 full resolution, head labels", "fd20", head_l,
                           (double)xt_model_volume(head_l)->nbytes, ang, 3, 1.0, "(c) FD20 2480x1920 labels", &msg)))
      goto fail;
  }
  if ((strchr(b.scenes, 'd') || strchr(b.scenes, 's')) && (rc = scene_d_s(&b, head_l, &msg))) goto fail;
  if ((rc = xt_bench_gmm(b.scenes, b.frames, b.warmup, b.quick, b.gmm_file, b.summary, &b.nsum, XT_BENCH_MAX_SUMMARY, &msg))) goto fail;
  if (strchr(b.scenes, 'g') || strchr(b.scenes, 'h') || strchr(b.scenes, 'r')) { /* NanoVDB (xt_bench_nvdb.c) */
    xt_bench_nvdb_ctx nc = {b.scenes, b.frames, b.warmup, b.quick, b.summary, b.nsum, XT_BENCH_MAX_SUMMARY, b.real_ct};
    if ((rc = xt_bench_nvdb(&nc, &msg))) goto fail;
    b.nsum = nc.nsum;
  }

  printf("\nSUMMARY (%s, %s)\n%-34s %9s %9s %8s  %s\n", b.info.name, date, "scene", "ms/frame", "fps", "bound",
         "target");
  for (int i = 0; i < b.nsum; i++) printf("%s\n", b.summary[i]);
  xt_model_free(head_l);
  xt_model_free(head_f);
  return 0;
fail:
  fprintf(stderr, "xtwin bench: %s\n", msg.text);
  xt_model_free(head_l);
  xt_model_free(head_f);
  xt_model_free(ct);
  return 1;
}
