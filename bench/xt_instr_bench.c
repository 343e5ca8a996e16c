/* xtwin-instr-bench: what instruments cost a frame (issue 26, docs/BENCHMARKS.md "Instruments").
 *
 * The scene is the server's default patient (the thorax, 1.25 mm labels) at fd20-1024 (or --mode),
 * first alone, then with its guidewire and nine more instruments (--instruments N, each --points
 * long: 2000 points = 1999 segments) lying along arcs through the field. For each, on the GPU:
 *   device    the chain to raw + processed, frames queued back to back (xt_chain_time_device, 2);
 *   e2e       xt_chain_frame end to end (render, chain, one copy-out into host memory), one at a time;
 *   reshape   e2e with every instrument given a new shape before every frame (xt_proj_set_shape:
 *             the host layout and the upload into the preallocated buffers).
 * The target: ten instruments of 2000 segments add at most 10 % to the e2e frame (issue 26).
 * With --backend cpu the same scenes run on the CPU backend (e2e and reshape only), e.g. at fd20-256.
 * Usage: xtwin-instr-bench [--frames N] [--instruments N] [--points N] [--mode M] [--backend cuda|cpu] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_acq.h"
#include "xt_chain.h"
#include "xt_instr.h"
#include "xt_phantom.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Instrument k's centreline at time step `phase`: an arc of the field's size, tip first. */
static void arc(int k, int phase, int n, double *pts) {
  const double R = 60.0 + 6.0 * k, y = -40.0 + 8.0 * k, a0 = 0.3 * k + 0.01 * phase;
  for (int i = 0; i < n; i++) {
    const double t = a0 + 2.6 * i / (n - 1);
    pts[3 * i] = R * cos(t) - 20.0;
    pts[3 * i + 1] = y + 5.0 * sin(3.0 * t);
    pts[3 * i + 2] = R * sin(t) - 30.0;
  }
}

static int poses(const char *mode, xt_geometry *g, int n) {
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return -1;
  for (int i = 0; i < n; i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = -30.0 + 60.0 * i / (n > 1 ? n - 1 : 1);
    p.secondary_deg = (i % 3 - 1) * 10.0;
    if (xt_geom_compute(&p, md, &g[i], NULL)) return -1;
  }
  return 0;
}

typedef struct result {
  double device, e2e, reshape;
} result;

static int scene(xt_backend b, const char *mode, xt_model *const *models, int nm, xt_model *const *instr, int ni,
                 int npts, int frames, result *r, xt_msg *msg) {
  xt_proj *p = NULL;
  xt_acq_renderer rnd;
  xt_geometry g[9];
  uint16_t *raw = NULL, *proc = NULL;
  double *pts = NULL;
  int rc;
  memset(r, 0, sizeof *r);
  xt_acq_renderer_init(&rnd, NULL, 0);
  if (poses(mode, g, 9)) return xt_fail(msg, XT_EINVAL, "bench: unknown mode %s", mode);
  xt_proj_options po = {b, 0, 0};
  if ((rc = xt_proj_create(&po, &p, msg))) goto done;
  xt_acq_renderer_init(&rnd, p, 0);
  for (int i = 0; i < nm && !rc; i++) rc = xt_acq_renderer_add_model(&rnd, models[i], msg);
  if (rc) goto done;
  xt_chain_params prm = xt_chain_params_default();
  if ((rc = xt_acq_renderer_chain(&rnd, &prm, msg))) goto done;
  xt_chain *c = rnd.chain;
  if (b == XT_BACKEND_CUDA && (rc = xt_chain_time_device(c, g, 9, 18, frames, 2, &r->device, msg))) goto done;
  int oc, orr;
  xt_chain_out_size(c, &g[0], &oc, &orr);
  raw = malloc((size_t)oc * orr * 2);
  proc = malloc((size_t)oc * orr * 2);
  pts = malloc(sizeof(double) * 3 * (size_t)(npts > 0 ? npts : 1));
  if (!raw || !proc || !pts) {
    rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
    goto done;
  }
  xt_chain_out out = {raw, proc, NULL, NULL};
  for (int i = 0; i < 9 && !rc; i++) rc = xt_chain_frame(c, &g[i], (uint64_t)i, &out, msg);
  double t0 = now_s();
  for (int i = 0; i < frames && !rc; i++) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(100 + i), &out, msg);
  r->e2e = (now_s() - t0) * 1e3 / frames;
  if (ni > 0 && !rc) {
    t0 = now_s();
    for (int i = 0; i < frames && !rc; i++) {
      for (int k = 0; k < ni && !rc; k++) {
        arc(k, i + 1, npts, pts);
        rc = xt_proj_set_shape(p, instr[k], pts, npts, msg);
      }
      if (!rc) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(1000 + i), &out, msg);
    }
    r->reshape = (now_s() - t0) * 1e3 / frames;
  }
done:
  free(raw);
  free(proc);
  free(pts);
  xt_acq_renderer_free(&rnd);
  xt_proj_destroy(p);
  return rc;
}

int main(int argc, char **argv) {
  int frames = 200, ni = 10, npts = 2000;
  const char *mode = "fd20-1024";
  xt_backend b = XT_BACKEND_CUDA;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--instruments") && i + 1 < argc) ni = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--points") && i + 1 < argc) npts = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !xt_backend_parse(argv[i + 1], &b)) i++;
    else {
      fprintf(stderr, "usage: xtwin-instr-bench [--frames N] [--instruments N] [--points N] [--mode M] "
                      "[--backend cuda|cpu]\n");
      return 2;
    }
  }
  if (frames < 1 || ni < 1 || ni > 30 || npts < 2 || npts > XT_INSTR_MAX_POINTS) {
    fprintf(stderr, "xtwin-instr-bench: --frames >= 1, --instruments 1..30, --points 2..%d\n", XT_INSTR_MAX_POINTS);
    return 2;
  }
  xt_msg msg = {{0}};
  int rc = xt_proj_available(b, &msg);
  if (rc) {
    fprintf(stderr, "xtwin-instr-bench: %s\n", msg.text);
    return 77;
  }
  xt_model *models[32] = {NULL};
  int nm = 0;
  double *pts = malloc(sizeof(double) * 3 * (size_t)npts);
  if (!pts) return 1;
  rc = xt_phantom_thorax_model(1.25, &models[nm++], &msg);
  xt_instr_device gw;
  if (!rc) rc = xt_instr_guidewire(&gw, "blood", npts, &msg);
  for (int k = 0; k < ni && !rc; k++) {
    char name[32];
    snprintf(name, sizeof name, "wire%d", k);
    arc(k, 0, npts, pts);
    rc = xt_model_from_instr(&gw, pts, npts, name, &models[nm++], &msg);
  }
  result base, with;
  if (!rc) rc = scene(b, mode, models, 1, NULL, 0, npts, frames, &base, &msg);
  if (!rc) rc = scene(b, mode, models, nm, models + 1, ni, npts, frames, &with, &msg);
  if (rc) {
    fprintf(stderr, "xtwin-instr-bench: %s\n", msg.text);
  } else {
    const int segs = xt_model_instr(models[1])->geom.nseg;
    printf("xtwin-instr-bench: %s, backend %s, thorax labels; %d instruments of %d segments (%d sub-rays per "
           "pixel), %d frames\n", mode, xt_backend_name(b), ni, segs, XT_INSTR_AREA_SAMPLES * XT_INSTR_AREA_SAMPLES,
           frames);
    printf("  %-34s %10s %10s %10s\n", "ms per frame", "device", "e2e", "reshape");
    printf("  %-34s %10.3f %10.3f %10s\n", "thorax", base.device, base.e2e, "-");
    printf("  %-34s %10.3f %10.3f %10.3f\n", "thorax + instruments", with.device, with.e2e, with.reshape);
    printf("  %-34s %9.1f%% %9.1f%% %9.1f%%   (target: e2e <= 10 %%)\n", "added", 
           base.device > 0 ? 100.0 * (with.device / base.device - 1.0) : 0.0, 100.0 * (with.e2e / base.e2e - 1.0),
           100.0 * (with.reshape / base.e2e - 1.0));
  }
  for (int i = 0; i < nm; i++) xt_model_free(models[i]);
  free(pts);
  return rc ? 1 : 0;
}
