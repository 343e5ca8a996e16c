/* xtwin-chain-bench: the imaging chain's benchmark (issue 10, docs/BENCHMARKS.md "Imaging chain").
 *
 *   (a)  the thesis scene (1024^2, SOD 800, SID 1205), the 8-material head (labels), 9 poses: device
 *        time per frame of the mono render alone, the chain to the raw frame, and to raw + processed,
 *        timed with CUDA events over frames queued back to back (and raw + processed again with the
 *        detect stage unfused: channel planes, then the whole stage); and the end-to-end frame
 *        (render, chain, one copy-out, in host memory) timed on the host;
 *   (c)  FD20 full resolution (2480 x 1920), same head and measures;
 *   both also with scatter and the grid on, and then the dose-rate loop closed every frame (issue 11):
 *        attached inside the chain (its device-resident step, frames back to back: device time;
 *        and one frame at a time, end to end) and run on the host as the server runs it, through
 *        the acquisition layer's xt_acq_expose (the measurement from the field sum that comes back
 *        with the frame, xt_chain_set_params a table-cache hit, the frame's dose); what scatter and
 *        the loop cost per frame;
 *   cpu  the CPU backend at fd20-256 on the head, the whole chain, wall time per frame.
 * Usage: xtwin-chain-bench [--frames N] [--scenes acC] [--threads N]   (C: the CPU scene) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_acq.h"
#include "xt_bench.h"
#include "xt_chain.h"
#include "xt_chain_internal.h" /* unfused: the separate detect stage, measured beside the fused path */
#include "xt_drc.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef struct row {
  char name[64];
  double ms;
  const char *target;
} row;

static row rows[32];
static int nrows;

static void add_row(const char *name, double ms, const char *target) {
  if (nrows == 32) return;
  snprintf(rows[nrows].name, sizeof rows[nrows].name, "%s", name);
  rows[nrows].ms = ms;
  rows[nrows].target = target;
  nrows++;
}

static int poses(const char *mode, xt_geometry *g, int n) {
  const xt_detector_mode *md = xt_mode_find(mode);
  for (int i = 0; i < n; i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = -80.0 + 160.0 * i / (n > 1 ? n - 1 : 1);
    p.secondary_deg = (i % 3 - 1) * 15.0;
    if (xt_geom_compute(&p, md, &g[i], NULL)) return -1;
  }
  return 0;
}

/* The acquisition layer's frame planes: the bench's own raw and processed buffers. */
typedef struct bench_bufs {
  uint16_t *raw, *proc;
} bench_bufs;

static int bench_buffers(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  const bench_bufs *b = ctx;
  fr->raw.data = b->raw;
  fr->proc.data = b->proc;
  return 0;
}

/* Device timings and the end-to-end frame of one scene on the GPU. */
static int gpu_scene(const char *title, const char *tag, const char *mode, xt_model *m, int frames, const char *t_chain,
                     const char *t_loop, xt_msg *msg) {
  xt_proj *p = NULL;
  xt_chain *c = NULL;
  xt_acq_renderer rnd; /* makes the chain; the host loop below exposes through it */
  xt_acq_plane plane;
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_geometry g[9];
  int rc;
  xt_acq_renderer_init(&rnd, NULL, 0);
  xt_acq_plane_init(&plane);
  if (poses(mode, g, 9)) {
    rc = xt_fail(msg, XT_EINVAL, "bench: bad poses");
    goto done;
  }
  if ((rc = xt_proj_create(&po, &p, msg))) goto done;
  xt_acq_renderer_init(&rnd, p, 0);
  if ((rc = xt_acq_renderer_add_model(&rnd, m, msg))) goto done;
  xt_chain_params prm = xt_chain_params_default();
  if ((rc = xt_acq_renderer_chain(&rnd, &prm, msg))) goto done;
  c = rnd.chain;
  xt_chain_info info;
  xt_chain_get_info(c, &info);
  printf("\n%s: %d x %d, %d channels (%s), %d energy bins, %g kV\n", title, g[0].mode.cols, g[0].mode.rows, info.nch,
         info.channels, info.nbins, prm.kv);
  double ms[3], ms_unf = 0;
  for (int w = 0; w < 3; w++)
    if ((rc = xt_chain_time_device(c, g, 9, 18, frames, w, &ms[w], msg))) goto done;
  c->unfused = 1;
  rc = xt_chain_time_device(c, g, 9, 18, frames, 2, &ms_unf, msg);
  c->unfused = 0;
  if (rc) goto done;
  /* end to end: xt_chain_frame (render, chain, one copy-out, raw + processed into host memory) */
  int oc, orr;
  xt_chain_out_size(c, &g[0], &oc, &orr);
  uint16_t *raw = malloc((size_t)oc * orr * 2), *proc = malloc((size_t)oc * orr * 2);
  if (!raw || !proc) {
    free(raw);
    free(proc);
    rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
    goto done;
  }
  xt_chain_out out = {raw, proc, NULL, NULL, 0};
  for (int i = 0; i < 9 && !rc; i++) rc = xt_chain_frame(c, &g[i], (uint64_t)i, &out, msg);
  const int e2e_n = frames < 200 ? frames : 200;
  const double t0 = now_s();
  for (int i = 0; i < e2e_n && !rc; i++) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(100 + i), &out, msg);
  const double e2e = (now_s() - t0) * 1e3 / e2e_n;
  /* issue 11: scatter and the grid on (device time); then the dose-rate loop closed every frame:
   * attached (the device-resident step: frames back to back, device time; and one frame at a time,
   * end to end) and as the server runs it (host step: measure from the field sum that came back,
   * move on the curve, xt_chain_set_params: a table-cache hit, no rebuild) */
  double ms_sc = 0, ms_loop = 0, e2e_att = 0, e2e_ext = 0;
  unsigned long long builds = 0;
  if (!rc) {
    prm.scatter = 1;
    prm.grid = 1;
    prm.drc = 1;
    rc = xt_chain_set_params(c, &prm, msg);
    if (!rc) rc = xt_chain_time_device(c, g, 9, 18, frames, 2, &ms_sc, msg);
    if (!rc) rc = xt_chain_drc_attach(c, 1, msg);
    if (!rc) rc = xt_chain_time_device(c, g, 9, 18, frames, 3, &ms_loop, msg);
    xt_chain_drc_frame rec;
    xt_chain_drc_last(c, &rec);
    for (int i = 0; i < 9 && !rc; i++) rc = xt_chain_frame(c, &g[i], (uint64_t)(300 + i), &out, msg);
    const double t2 = now_s();
    for (int i = 0; i < e2e_n && !rc; i++) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(400 + i), &out, msg);
    e2e_att = (now_s() - t2) * 1e3 / e2e_n;
    xt_chain_drc_last(c, &rec);
    if (!rc) {
      printf("  attached loop after %d frames: %g kV, %.4g mAs, %.1f nGy (target %g), flags %u\n", e2e_n, rec.kv, rec.mas,
             rec.drc.measured_ngy, prm.drc_target_ngy, rec.drc.flags);
      rc = xt_chain_drc_attach(c, 0, msg);
    }
    bench_bufs bb = {raw, proc};
    xt_acq_request q;
    memset(&q, 0, sizeof q);
    q.want = XT_ACQ_WANT_CHAIN;
    q.chain = 1;
    q.chain_prm = prm;
    q.buffers = bench_buffers;
    q.ctx = &bb;
    const unsigned long long b0 = xt_chain_table_builds(c);
    const double t3 = now_s();
    for (int i = 0; i < e2e_n && !rc; i++) {
      xt_acq_frame fr;
      q.geom = &g[i % 9];
      q.counter = (uint64_t)(800 + i);
      rc = xt_acq_expose(&plane, &rnd, &q, &fr, msg);
    }
    e2e_ext = (now_s() - t3) * 1e3 / e2e_n;
    builds = xt_chain_table_builds(c) - b0;
  }
  free(raw);
  free(proc);
  if (rc) goto done;
  printf("  mono render (device)          %8.4f ms  %8.0f fps\n", ms[0], 1e3 / ms[0]);
  printf("  chain to raw (device)         %8.4f ms  %8.0f fps  %.2fx mono\n", ms[1], 1e3 / ms[1], ms[1] / ms[0]);
  printf("  chain to raw + processed      %8.4f ms  %8.0f fps  %.2fx mono  (detect fused: %s)\n", ms[2], 1e3 / ms[2],
         ms[2] / ms[0], c->fused_frames ? "yes" : "no");
  printf("  the same, detect unfused      %8.4f ms  %8.0f fps  %.2fx mono\n", ms_unf, 1e3 / ms_unf, ms_unf / ms[0]);
  printf("  end to end, one copy-out      %8.4f ms  %8.0f fps  (synchronous, one frame at a time)\n", e2e, 1e3 / e2e);
  printf("  + scatter and grid (device)   %8.4f ms  %8.0f fps  scatter costs %.4f ms\n", ms_sc, 1e3 / ms_sc, ms_sc - ms[2]);
  printf("  + dose-rate loop on the device %7.4f ms  %8.0f fps  the loop (field reduction + step) costs %.4f ms\n", ms_loop,
         1e3 / ms_loop, ms_loop - ms_sc);
  printf("  end to end, loop attached     %8.4f ms  %8.0f fps  (one frame at a time, frame + record copied)\n", e2e_att,
         1e3 / e2e_att);
  printf("  end to end, host loop (server) %7.4f ms  %8.0f fps  %llu table builds in %d frames\n", e2e_ext, 1e3 / e2e_ext,
         builds, e2e_n);
  char name[64];
  snprintf(name, sizeof name, "%s mono", tag);
  add_row(name, ms[0], "");
  snprintf(name, sizeof name, "%s chain raw+proc", tag);
  add_row(name, ms[2], t_chain);
  snprintf(name, sizeof name, "%s chain/mono", tag);
  add_row(name, ms[2] / ms[0], "<= 2x");
  snprintf(name, sizeof name, "%s unfused/mono", tag);
  add_row(name, ms_unf / ms[0], "");
  snprintf(name, sizeof name, "%s end-to-end", tag);
  add_row(name, e2e, "");
  snprintf(name, sizeof name, "%s chain+scatter", tag);
  add_row(name, ms_sc, "");
  snprintf(name, sizeof name, "%s chain+scatter+drc", tag);
  add_row(name, ms_loop, t_loop);
  snprintf(name, sizeof name, "%s e2e attached loop", tag);
  add_row(name, e2e_att, "");
  snprintf(name, sizeof name, "%s e2e host loop", tag);
  add_row(name, e2e_ext, "");
done:
  xt_acq_renderer_free(&rnd);
  xt_acq_plane_destroy(&plane);
  xt_proj_destroy(p);
  return rc;
}

static int cpu_scene(xt_model *m, int threads, int frames, xt_msg *msg) {
  xt_proj *p = NULL;
  xt_chain *c = NULL;
  xt_proj_options po = {XT_BACKEND_CPU, threads, 0};
  xt_geometry g[9];
  int rc;
  if (poses("fd20-256", g, 9)) return xt_fail(msg, XT_EINVAL, "bench: bad poses");
  if ((rc = xt_proj_create(&po, &p, msg)) || (rc = xt_proj_add_model(p, m, msg))) goto done;
  xt_chain_params prm = xt_chain_params_default();
  if ((rc = xt_chain_create(&prm, p, &c, msg))) goto done;
  static uint16_t raw[256 * 256], proc[256 * 256];
  xt_chain_out out = {raw, proc, NULL, NULL, 0};
  if ((rc = xt_chain_frame(c, &g[0], 0, &out, msg))) goto done;
  const double t0 = now_s();
  for (int i = 0; i < frames && !rc; i++) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(1 + i), &out, msg);
  const double ms = (now_s() - t0) * 1e3 / frames;
  /* the mono render alone, for the split */
  float *L = malloc(sizeof(float) * 256 * 256);
  double t1 = now_s();
  for (int i = 0; i < frames && !rc && L; i++) rc = xt_proj_render(p, &g[i % 9], L, msg);
  const double ms_mono = (now_s() - t1) * 1e3 / frames;
  free(L);
  if (rc) goto done;
  printf("\ncpu: CPU backend, fd20-256, head labels, %d threads\n", threads);
  printf("  mono render                   %8.2f ms  %8.1f fps\n", ms_mono, 1e3 / ms_mono);
  printf("  whole chain, raw + processed  %8.2f ms  %8.1f fps\n", ms, 1e3 / ms);
  add_row("cpu fd20-256 chain", ms, ">= 15 fps");
done:
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  return rc;
}

int main(int argc, char **argv) {
  int frames = 300, threads = 2;
  const char *scenes = "ac";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--scenes") && i + 1 < argc) scenes = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: xtwin-chain-bench [--frames N] [--scenes acC] [--threads N]\n");
      return 2;
    }
  }
  if (frames < 1) frames = 1;
  xt_msg msg = {{0}};
  xt_model *head = NULL;
  int rc = xt_bench_head(XT_VOXEL_U8, &head, &msg);
  if (!rc && strchr(scenes, 'a')) rc = gpu_scene("(a) thesis scene, 8-material head", "(a)", "thesis", head, frames, ">= 3000 fps",
                                              ">= 2500 fps", &msg);
  if (!rc && strchr(scenes, 'c')) rc = gpu_scene("(c) FD20 full resolution, head", "(c)", "fd20", head, frames / 3 + 1, ">= 500 fps", "",
                                              &msg);
  if (!rc && strchr(scenes, 'C')) rc = cpu_scene(head, threads, frames < 30 ? frames : 30, &msg);
  if (rc) {
    fprintf(stderr, "xtwin-chain-bench: %s\n", msg.text);
    xt_model_free(head);
    return 1;
  }
  printf("\nSUMMARY\n%-28s %10s %9s  %s\n", "measure", "ms/frame", "fps", "target");
  for (int i = 0; i < nrows; i++) {
    const int ratio = strstr(rows[i].name, "/") != NULL;
    if (ratio) printf("%-28s %10.3fx %9s  %s\n", rows[i].name, rows[i].ms, "", rows[i].target);
    else printf("%-28s %10.4f %9.0f  %s\n", rows[i].name, rows[i].ms, 1e3 / rows[i].ms, rows[i].target);
  }
  xt_model_free(head);
  return 0;
}
