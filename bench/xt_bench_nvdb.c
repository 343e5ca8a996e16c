/* xtwin bench, NanoVDB scenes (issue 9), timed with CUDA events like the others:
 *
 *   (g) scene (b)'s 512^3 CT-like torso (0.5 mm, float mu with 2% texture noise, 43% air) as
 *       NanoVDB Float and Fp8 against dense, thesis detector (1024^2), 0/45/90 degrees;
 *   (h) a whole-body-sized torso, 512 x 512 x 1200 voxels of 0.7 mm (358 x 358 x 840 mm), air
 *       around it, lungs, heart, liver, spine, ribs and pelvis inside (piecewise constant: each
 *       organ one mu), dense against NanoVDB Float and Fp8, at fd20-1024 and FD20 full resolution;
 *   (r) the real head CT of Debian's invesalius-examples (--real-ct cranium.raw, scripts/real-ct):
 *       256 x 256 x 108 int16 HU of 0.957 x 0.957 x 1.5 mm, HU -> mu by the linear map at 60 keV
 *       (water from xraylib; the converter's bilinear map differs above 0 HU only, which changes no
 *       timing), its surroundings made background as nvdb-convert does by default (models/
 *       xt_ct_body.h), dense (the classified volume) against NanoVDB Float and Fp8 (tolerance 0:
 *       exact), at fd20-1024 and FD20 full resolution (the index form at fd20-1024).
 * The NanoVDB kind's traversal is the one XT_NVDB_TRAVERSAL names (tree, bricks, bricks2 .. bricks8,
 * dense, dense-each: proj_nvdb.cu), or each of XT_BENCH_NVDB_TRAVERSALS in turn on the same models
 * (a row each). Under dense the timed frames march the working set decoded in the warm-up; under
 * dense-each every frame decodes it first (a patient switch per frame).
 *
 * Per model: bytes (dense: the linear voxel copy; the default AUTO storage adds a texture copy of
 * the same size for volumes larger than L2, printed too), median kernel time per angle, the steps
 * the kernel takes (counted by the kernel) and, for Fp8, its error against Float on the same frame. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xraylib.h>

#include "xt_bench.h"
#include "xt_ct_body.h"
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"
#include "xt_proj.h"
#include "xt_proj_cuda.h"

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The (h) torso: elliptic body of semi-axes 170 x 115 mm along z, fat shell, organs. */
int xt_bench_torso(int nx, int ny, int nz, double h, xt_model **out, xt_msg *msg) {
  xt_material_table mt;
  xt_volume *v = NULL;
  const double sp[3] = {h, h, h};
  int rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg);
  if (rc || (rc = xt_volume_create(nx, ny, nz, sp, XT_VOXEL_F32, &v, msg))) return rc;
  const float soft = mt.mu[XT_MAT_SOFT], fat = mt.mu[XT_MAT_FAT], bone = mt.mu[XT_MAT_BONE],
              blood = mt.mu[XT_MAT_BLOOD], lung = 0.25f * soft, liver = 1.06f * soft;
  const double L = nz * h; /* body length, mm; z = 0 at the centre */
  float *f = v->data;
  for (int k = 0; k < nz; k++) {
    const double z = (k - 0.5 * (nz - 1)) * h, zr = z / (0.5 * L); /* -1 feet .. +1 head */
    for (int j = 0; j < ny; j++) {
      const double y = (j - 0.5 * (ny - 1)) * h;
      for (int i = 0; i < nx; i++) {
        const double x = (i - 0.5 * (nx - 1)) * h;
        float m = 0.f;
        const double body = (x / 170) * (x / 170) + (y / 115) * (y / 115);
        if (body <= 1.0 && fabs(zr) < 0.97) {
          m = body > 0.88 ? fat : soft;
          const double lx = (fabs(x) - 75) / 60, ly = (y + 5) / 80, lz = (z - 180) / 150;
          if (lx * lx + ly * ly + lz * lz <= 1) m = lung;
          const double hx = (x + 15) / 55, hy = (y + 20) / 45, hz = (z - 150) / 60;
          if (hx * hx + hy * hy + hz * hz <= 1) m = blood;
          const double vx = (x + 60) / 80, vy = y / 60, vz = (z - 10) / 70;
          if (vx * vx + vy * vy + vz * vz <= 1) m = liver;
          const double sx = x / 18, sy = (y - 75) / 18;
          if (sx * sx + sy * sy <= 1) m = bone; /* spine */
          const double rr = (x / 160) * (x / 160) + (y / 106) * (y / 106);
          if (z > 40 && z < 330 && rr > 0.9 && rr < 1.0 && fmod(z + 400, 25) < 8) m = bone; /* ribs */
          const double px = (fabs(x) - 80) / 60, py = (y - 30) / 50, pz = (z + 250) / 60;
          const double pr = px * px + py * py + pz * pz;
          if (pr <= 1 && pr > 0.6) m = bone; /* pelvis */
        }
        f[(size_t)i + (size_t)nx * ((size_t)j + (size_t)ny * k)] = m;
      }
    }
  }
  if ((rc = xt_model_from_volume(v, "bench-torso", out, msg))) xt_volume_free(v);
  return rc;
}

static int nvdb_model_tol(const xt_model *vm, int quant, double tol, xt_model **out, xt_msg *msg) {
  xt_nvdb_build_options o = {quant, 0.0, tol, 0.0, NULL};
  uint32_t *w;
  uint64_t n;
  xt_nvdb *g;
  int rc = xt_nvdb_build(xt_model_volume(vm), &o, &w, &n, msg);
  if (rc || (rc = xt_nvdb_from_blob(w, n, NULL, "bench grid", &g, msg))) return rc;
  if ((rc = xt_model_from_nvdb(g, quant == XT_NVDB_Q_FP8 ? "nvdb-fp8" : quant == XT_NVDB_Q_INDEX ? "nvdb-index" : "nvdb-float", out, msg))) xt_nvdb_free(g);
  return rc;
}

static int nvdb_model(const xt_model *vm, int quant, xt_model **out, xt_msg *msg) {
  /* The activation tolerance: (b)'s air is mu 2.3e-5 /mm with 2% texture noise; 1e-4 /mm (as
   * xt_bench_nonair counts air) leaves it inactive. (h) has exact zeros around the body. */
  return nvdb_model_tol(vm, quant, 1e-4, out, msg);
}

/* (r): the raw Cranium volume as classified mu (see the file's head). */
static int real_ct(const char *path, xt_model **out, xt_msg *msg) {
  enum { NX = 256, NY = 256, NZ = 108 };
  const double sp[3] = {0.95703119999999997, 0.95703119999999997, 1.5};
  FILE *f = fopen(path, "rb");
  if (!f) return xt_fail(msg, XT_ENOTFOUND, "bench: --real-ct %s: cannot open", path);
  int16_t *hu = malloc((size_t)NX * NY * NZ * sizeof *hu);
  xt_volume *v = NULL;
  int rc = hu ? 0 : xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  if (!rc && (fread(hu, sizeof *hu, (size_t)NX * NY * NZ, f) != (size_t)NX * NY * NZ || fgetc(f) != EOF))
    rc = xt_fail(msg, XT_EFORMAT, "bench: --real-ct %s: not %d x %d x %d int16 voxels", path, NX, NY, NZ);
  fclose(f);
  if (!rc) rc = xt_volume_create(NX, NY, NZ, sp, XT_VOXEL_F32, &v, msg);
  if (!rc) {
    const double mu_w = CS_Total_CP("H2O", 60.0, NULL) * 1.0 / 10.0; /* cm^2/g x g/cm^3 -> 1/mm */
    float *mu = v->data;
    for (size_t i = 0; i < (size_t)NX * NY * NZ; i++) { /* little-endian file, as the plist says */
      const uint16_t u = (uint16_t)hu[i];
      const int16_t h = (int16_t)(((const uint8_t *)&u)[0] | ((const uint8_t *)&u)[1] << 8);
      const double m = mu_w * (1.0 + h / 1000.0);
      mu[i] = (float)(m > 0 ? m : 0);
    }
    v->energy_kev = 60;
    xt_ct_body_report r;
    rc = xt_ct_body_classify(v, 0.5 * mu_w, 0.0, &r, msg);
    if (!rc)
      printf("\n(r) real head CT %s: %dx%dx%d @ %.3g x %.3g x %.3g mm; background: %.1f%% of the voxels, mass dropped "
             "%.2f%%\n",
             path, NX, NY, NZ, sp[0], sp[1], sp[2], 100.0 * (double)r.outside / (double)r.voxels,
             100 * r.mass_dropped / r.mass);
  }
  if (!rc) rc = xt_model_from_volume(v, "real-ct", out, msg);
  if (rc) xt_volume_free(v);
  free(hu);
  return rc;
}

/* Median kernel ms and steps per angle for one model; fills frames[i] (host) when asked. */
static int time_model(const xt_bench_nvdb_ctx *c, const xt_model *m, const xt_geometry *g, int n, double *med_out,
                      double *steps_out, float **frames, xt_msg *msg) {
  xt_cuda_options o = xt_cuda_default_options();
  xt_cuda_proj *p = NULL;
  float *ms = malloc(sizeof(float) * (size_t)c->frames);
  int rc = ms ? 0 : xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  if (!rc) rc = xt_cuda_create(&o, &p, msg);
  if (!rc) rc = xt_cuda_add_model(p, m, msg);
  for (int i = 0; i < n && !rc; i++) {
    double hit;
    rc = xt_cuda_time_kernel(p, &g[i], 1, 1, c->warmup, c->frames, ms, msg);
    if (!rc) rc = xt_cuda_count_steps(p, &g[i], &steps_out[i], &hit, msg);
    if (!rc && frames && frames[i]) rc = xt_cuda_render(p, &g[i], frames[i], msg);
    if (rc) break;
    qsort(ms, (size_t)c->frames, sizeof *ms, cmpf);
    med_out[i] = c->frames % 2 ? ms[c->frames / 2] : 0.5 * (ms[c->frames / 2 - 1] + ms[c->frames / 2]);
  }
  xt_cuda_destroy(p);
  free(ms);
  return rc;
}

/* Relative L2 and max |a - b| / max|b| of two frames. */
static void frame_error(const float *a, const float *b, size_t n, double *rel, double *mxr) {
  double num = 0, den = 0, mx = 0, w = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
    if (fabs(b[i]) > mx) mx = fabs(b[i]);
    if (fabs(d) > w) w = fabs(d);
  }
  *rel = den > 0 ? sqrt(num / den) : 0;
  *mxr = mx > 0 ? w / mx : 0;
}

/* Largest |gpu - reference| over 1024 sampled pixels of the frame, as a fraction of the frame's
 * max: each model against the double-precision CPU reference of itself (xt_ref_segment). */
static double sampled_error(const xt_model *m, const xt_geometry *g, const float *gpu) {
  unsigned s = 7u;
  double mx = 0, worst = 0;
  const size_t np = (size_t)g->mode.cols * g->mode.rows;
  for (size_t i = 0; i < np; i++)
    if (fabs(gpu[i]) > mx) mx = fabs(gpu[i]);
  for (int k = 0; k < 1024; k++) {
    s = s * 1103515245u + 12345u;
    const int c = (int)((s >> 8) % (unsigned)g->mode.cols);
    s = s * 1103515245u + 12345u;
    const int r = (int)((s >> 8) % (unsigned)g->mode.rows);
    const xt_model *ms[1] = {m};
    const double ref = xt_ref_segment(ms, 1, g->source, xt_geom_pixel_pos(g, c, r));
    const double e = fabs(ref - gpu[(size_t)r * g->mode.cols + c]);
    if (e > worst) worst = e;
  }
  return mx > 0 ? worst / mx : 0;
}

/* The traversals to time the NanoVDB models under: XT_BENCH_NVDB_TRAVERSALS ("tree bricks3 ...",
 * spaces or commas), each set as XT_NVDB_TRAVERSAL for the projectors made while it is timed; unset:
 * one pass under whatever XT_NVDB_TRAVERSAL says (name NULL). Returns the count (<= max). */
static int traversals(char names[][16], int max) {
  const char *e = getenv("XT_BENCH_NVDB_TRAVERSALS");
  int n = 0;
  while (e && *e && n < max) {
    const size_t l = strcspn(e, " ,");
    if (l > 0 && l < 16) {
      memcpy(names[n], e, l);
      names[n++][l] = 0;
    }
    e += l;
    e += strspn(e, " ,");
  }
  return n;
}

#define NVDB_MAX_TR 8

/* One scene: dense, then NanoVDB Float and Fp8 under each traversal (traversals()), on `mode` at
 * three angles. */
static int scene(xt_bench_nvdb_ctx *c, const char *tag, const xt_model *dense, xt_model *const nv[2], const char *mode,
                 xt_msg *msg) {
  static const double ang[3] = {0, 45, 90};
  xt_geometry g[3];
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return xt_fail(msg, XT_ENOTFOUND, "bench: no mode %s", mode);
  for (int i = 0; i < 3; i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = ang[i];
    int rc = xt_geom_compute(&p, md, &g[i], msg);
    if (rc) return rc;
  }
  char trn[NVDB_MAX_TR][16];
  const int ntr = traversals(trn, NVDB_MAX_TR), npass = ntr ? ntr : 1;
  const char *tr0 = getenv("XT_NVDB_TRAVERSAL");
  char tr_saved[32] = "";
  if (tr0) snprintf(tr_saved, sizeof tr_saved, "%s", tr0);
  enum { NM = 1 + 2 * NVDB_MAX_TR };
  const int nm = 1 + 2 * npass; /* dense, then Float and Fp8 of each pass */
  const size_t np = (size_t)md->cols * md->rows;
  float *fr[NM][3] = {{0}}; /* [run][angle]: the 45 degree frames only (the errors) */
  int rc = 0;
  for (int k = 0; k < nm && !rc; k++)
    if (!(fr[k][1] = malloc(np * sizeof(float)))) rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
  double med[NM][3] = {{0}}, steps[NM][3] = {{0}};
  const char *names[3] = {"dense float",
                          xt_model_nvdb(nv[0])->grid_type == XT_NVDB_INDEX ? "nanovdb index" : "nanovdb float",
                          "nanovdb fp8"};
  const double dbytes = (double)xt_model_volume(dense)->nbytes;
  printf("\n%s, detector %s %dx%d\n  %-16s %-8s %12s %7s %9s %9s %9s %10s %9s  %s\n", tag, mode, md->cols, md->rows,
         "model", "travers.", "bytes", "of dense", "0 deg ms", "45 deg ms", "90 deg ms", "Msteps@45", "vs ref@45",
         "error vs float @45");
  for (int k = 0; k < nm && !rc; k++) {
    const xt_model *m = k == 0 ? dense : nv[(k - 1) % 2];
    if (k > 0 && ntr) setenv("XT_NVDB_TRAVERSAL", trn[(k - 1) / 2], 1);
    rc = time_model(c, m, g, 3, med[k], steps[k], fr[k], msg);
  }
  if (ntr) { /* as it was */
    if (tr0) setenv("XT_NVDB_TRAVERSAL", tr_saved, 1);
    else unsetenv("XT_NVDB_TRAVERSAL");
  }
  for (int k = 0; k < nm && !rc; k++) {
    const int kind = k == 0 ? 0 : 1 + (k - 1) % 2; /* 0 dense, 1 Float (or index), 2 Fp8 */
    const xt_model *m = kind == 0 ? dense : nv[kind - 1];
    const char *trname = k == 0 ? "-" : (ntr ? trn[(k - 1) / 2] : (tr0 && *tr0 ? tr0 : "dense"));
    const double bytes = kind == 0 ? dbytes : (double)xt_model_nvdb(m)->bytes;
    char err[96] = "-";
    double rel, mxr;
    if (k == 0) {
      frame_error(fr[1][1], fr[0][1], np, &rel, &mxr);
      snprintf(err, sizeof err, "(%s vs dense: rel L2 %.2g, max %.2g)", names[1], rel, mxr);
    } else if (kind == 2) {
      frame_error(fr[k][1], fr[k - 1][1], np, &rel, &mxr);
      snprintf(err, sizeof err, "rel L2 %.2g, max %.2g of frame max", rel, mxr);
    }
    printf("  %-16s %-8s %12.0f %6.1f%% %9.4f %9.4f %9.4f %10.1f %9.2g  %s\n", names[kind], trname, bytes,
           100 * bytes / dbytes, med[k][0], med[k][1], med[k][2], steps[k][1] / 1e6,
           sampled_error(m, &g[1], fr[k][1]), err);
    const double avg = (med[k][0] + med[k][1] + med[k][2]) / 3, davg = (med[0][0] + med[0][1] + med[0][2]) / 3;
    if (c->nsum < c->max) {
      char target[112] = "-";
      if (kind > 0) {
        /* issue 9's targets; the real CT's are issue 29's (Float 40 %) */
        const double lim = kind == 1 ? (tag[1] == 'r' ? 0.40 : 0.30) : 0.15;
        snprintf(target, sizeof target, "%s%s%sbytes <=%.0f%%: %s; time <= dense: %s (%.2fx)", ntr ? "[" : "",
                 ntr ? trname : "", ntr ? "] " : "", 100 * lim, bytes <= lim * dbytes ? "met" : "MISSED",
                 avg <= davg ? "met" : "MISSED", davg > 0 ? avg / davg : 0.0);
      }
      snprintf(c->summary[c->nsum++], 200, "%-34s %9.4f %9.0f %7.1f%%  %s", "", avg, 1e3 / avg, 100 * bytes / dbytes,
               target);
      char name[40];
      snprintf(name, sizeof name, "%s %s", tag, names[kind]);
      memcpy(c->summary[c->nsum - 1], name, strlen(name) < 34 ? strlen(name) : 34);
    }
  }
  printf("  (dense with the default AUTO storage also holds a texture copy: %.0f device bytes in all)\n", 2 * dbytes);
  for (int k = 0; k < nm; k++) free(fr[k][1]);
  return rc;
}

int xt_bench_nvdb(xt_bench_nvdb_ctx *c, xt_msg *msg) {
  int rc = 0;
  xt_model *dense = NULL, *nv[2] = {NULL, NULL};
  if (strchr(c->scenes, 'g')) {
    const int n = c->quick ? 128 : 512;
    if ((rc = xt_bench_ct(n, 256.0 / n, &dense, msg))) goto done;
    for (int k = 0; k < 2 && !rc; k++) rc = nvdb_model(dense, k ? XT_NVDB_Q_FP8 : XT_NVDB_Q_FLOAT, &nv[k], msg);
    if (rc) goto done;
    printf("\n(g) phantom CT torso %d^3 @ %.2f mm, non-air %.1f%%, NanoVDB active %.1f%% (tolerance 1e-4 /mm)\n", n,
           256.0 / n, 100 * xt_bench_nonair(xt_model_volume(dense)), 100 * xt_nvdb_active_fraction(xt_model_nvdb(nv[0])));
    if ((rc = scene(c, "(g) CT 512^3", dense, nv, "thesis", msg))) goto done;
    for (int k = 0; k < 2; k++) xt_model_free(nv[k]), nv[k] = NULL;
    xt_model_free(dense);
    dense = NULL;
  }
  if (strchr(c->scenes, 'h')) {
    const int nx = c->quick ? 128 : 512, nz = c->quick ? 300 : 1200;
    const double h = c->quick ? 2.8 : 0.7;
    if ((rc = xt_bench_torso(nx, nx, nz, h, &dense, msg))) goto done;
    for (int k = 0; k < 2 && !rc; k++) rc = nvdb_model(dense, k ? XT_NVDB_Q_FP8 : XT_NVDB_Q_FLOAT, &nv[k], msg);
    if (rc) goto done;
    printf("\n(h) whole-body torso %dx%dx%d @ %.1f mm, non-air %.1f%%, NanoVDB active %.1f%%, %u leaves, %u lower, "
           "%u upper nodes\n",
           nx, nx, nz, h, 100 * xt_bench_nonair(xt_model_volume(dense)), 100 * xt_nvdb_active_fraction(xt_model_nvdb(nv[0])),
           xt_model_nvdb(nv[0])->nodes[0], xt_model_nvdb(nv[0])->nodes[1], xt_model_nvdb(nv[0])->nodes[2]);
    if ((rc = scene(c, "(h) torso fd20-1024", dense, nv, "fd20-1024", msg))) goto done;
    if ((rc = scene(c, "(h) torso FD20 full", dense, nv, "fd20", msg))) goto done;
    for (int k = 0; k < 2; k++) xt_model_free(nv[k]), nv[k] = NULL;
    xt_model_free(dense);
    dense = NULL;
  }
  if (strchr(c->scenes, 'r')) {
    if (!c->real_ct) {
      printf("\n(r) real head CT: skipped (no --real-ct cranium.raw; scripts/real-ct makes it)\n");
    } else {
      if ((rc = real_ct(c->real_ct, &dense, msg))) goto done;
      for (int k = 0; k < 2 && !rc; k++) rc = nvdb_model_tol(dense, k ? XT_NVDB_Q_FP8 : XT_NVDB_Q_FLOAT, 0.0, &nv[k], msg);
      if (rc) goto done;
      if ((rc = scene(c, "(r) real head CT fd20-1024", dense, nv, "fd20-1024", msg))) goto done;
      if ((rc = scene(c, "(r) real head CT FD20 full", dense, nv, "fd20", msg))) goto done; /* issue 29's second size */
      /* the index form (nvdb-convert's default for mu): exact like Float, 36 % of the bytes */
      xt_model_free(nv[0]);
      nv[0] = NULL;
      if ((rc = nvdb_model_tol(dense, XT_NVDB_Q_INDEX, 0.0, &nv[0], msg))) goto done;
      if ((rc = scene(c, "(r) real head CT, index form, fd20-1024", dense, nv, "fd20-1024", msg))) goto done;
    }
  }
done:
  for (int k = 0; k < 2; k++) xt_model_free(nv[k]);
  xt_model_free(dense);
  return rc;
}
