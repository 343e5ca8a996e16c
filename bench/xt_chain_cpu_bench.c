/* xtwin-chain-cpu-bench: the CPU backend's imaging chain (issue 10 target: fd20-256, the whole
 * chain to raw + processed, >= 15 fps on two cores; docs/BENCHMARKS.md "Imaging chain").
 *
 * The bench head (labels, 8 materials) at fd20-256, default chain (80 kV, every 1 keV bin), 9 poses
 * in turn; wall time per frame of xt_chain_frame, and of the projection alone (the channel planes),
 * with the fast CPU path (the chain's default) and, with --exact, the float64 reference
 * (cpu_exact 1). Prints the load average before and after: the development machine is shared.
 * Builds without CUDA. Usage:
 *   xtwin-chain-cpu-bench [--frames N] [--threads N] [--mode NAME] [--exact] [--dense] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_bench.h"
#include "xt_chain.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* CPU time of the process (all threads): what a frame costs whatever else runs on the machine. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void loadavg(char *buf, size_t n) {
  FILE *f = fopen("/proc/loadavg", "r");
  buf[0] = 0;
  if (f) {
    if (!fgets(buf, (int)n, f)) buf[0] = 0;
    fclose(f);
  }
  buf[strcspn(buf, "\n")] = 0;
}

/* One configuration: ms per whole-chain frame and per projection alone. */
static int measure(xt_model *m, const char *mode, int threads, int exact, int frames, double *ms_chain, double *ms_proj,
                   xt_msg *msg) {
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return xt_fail(msg, XT_EINVAL, "bench: no detector mode %s", mode);
  xt_geometry g[9];
  for (int i = 0; i < 9; i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = -80.0 + 20.0 * i;
    p.secondary_deg = (i % 3 - 1) * 15.0;
    int rc = xt_geom_compute(&p, md, &g[i], msg);
    if (rc) return rc;
  }
  xt_proj *p = NULL;
  xt_chain *c = NULL;
  uint16_t *raw = NULL, *proc = NULL;
  float *A = NULL;
  xt_proj_options po = {XT_BACKEND_CPU, threads, 0};
  xt_chain_params prm = xt_chain_params_default();
  prm.cpu_exact = exact;
  int rc;
  if ((rc = xt_proj_create(&po, &p, msg)) || (rc = xt_proj_add_model(p, m, msg)) ||
      (rc = xt_chain_create(&prm, p, &c, msg)))
    goto done;
  xt_chain_set_threads(c, threads);
  xt_chain_info info;
  xt_chain_get_info(c, &info);
  const size_t np = (size_t)md->cols * md->rows;
  raw = malloc(np * sizeof *raw);
  proc = malloc(np * sizeof *proc);
  A = malloc(np * sizeof *A * (size_t)(info.nch > 0 ? info.nch : 1));
  if (!raw || !proc || !A) {
    rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
    goto done;
  }
  xt_chain_out out = {raw, proc, NULL, NULL, 0};
  if ((rc = xt_chain_frame(c, &g[0], 0, &out, msg))) goto done; /* scratch, panel maps */
  double t0 = now_s(), c0 = cpu_s();
  for (int i = 0; i < frames && !rc; i++) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(1 + i), &out, msg);
  *ms_chain = (now_s() - t0) * 1e3 / frames;
  const double cpu_chain = (cpu_s() - c0) * 1e3 / frames;
  t0 = now_s();
  c0 = cpu_s();
  for (int i = 0; i < frames && !rc; i++)
    rc = exact ? xt_proj_render_channels(p, &g[i % 9], A, msg) : xt_proj_render_channels_fast(p, &g[i % 9], A, msg);
  *ms_proj = (now_s() - t0) * 1e3 / frames;
  const double cpu_proj = (cpu_s() - c0) * 1e3 / frames;
  printf("  %-5s %d thread%s  wall: chain %8.2f ms (%5.1f fps), projection %8.2f ms;  CPU time: chain %8.2f ms, "
         "projection %8.2f ms, stages %7.2f ms  [%d ch, %d bins]\n",
         exact ? "exact" : "fast", threads, threads == 1 ? " " : "s", *ms_chain, 1e3 / *ms_chain, *ms_proj, cpu_chain,
         cpu_proj, cpu_chain - cpu_proj, info.nch, info.nbins);
  fflush(stdout);
done:
  free(raw);
  free(proc);
  free(A);
  xt_chain_destroy(c);
  xt_proj_destroy(p);
  return rc;
}

int main(int argc, char **argv) {
  int frames = 30, threads = 2, exact = 0, dense = 0;
  const char *mode = "fd20-256";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--exact")) exact = 1;
    else if (!strcmp(argv[i], "--dense")) dense = 1;
    else {
      fprintf(stderr, "usage: xtwin-chain-cpu-bench [--frames N] [--threads N] [--mode NAME] [--exact] [--dense]\n");
      return 2;
    }
  }
  if (frames < 1) frames = 1;
  if (threads < 1) threads = 1;
  xt_msg msg = {{0}};
  xt_model *head = NULL;
  char la0[128], la1[128];
  int rc = xt_bench_head(dense ? XT_VOXEL_F32 : XT_VOXEL_U8, &head, &msg);
  loadavg(la0, sizeof la0);
  printf("CPU chain, %s, bench head (%s), default chain, %d frames a measure; load average before: %s\n", mode,
         dense ? "dense mu" : "labels", frames, la0);
  double fast[2] = {0}, fproj[2] = {0}, ex = 0, exproj = 0;
  if (!rc) rc = measure(head, mode, threads, 0, frames, &fast[0], &fproj[0], &msg);
  if (!rc && threads > 1) rc = measure(head, mode, 1, 0, frames, &fast[1], &fproj[1], &msg);
  if (!rc && exact) rc = measure(head, mode, threads, 1, frames / 3 + 1, &ex, &exproj, &msg);
  loadavg(la1, sizeof la1);
  if (rc) {
    fprintf(stderr, "xtwin-chain-cpu-bench: %s\n", msg.text);
    xt_model_free(head);
    return 1;
  }
  printf("load average after: %s\n", la1);
  printf("SUMMARY %s whole chain, fast path, %d threads: %.2f ms = %.1f fps (target >= 15 fps: %s)\n", mode, threads,
         fast[0], 1e3 / fast[0], 1e3 / fast[0] >= 15 ? "met" : "missed");
  xt_model_free(head);
  return 0;
}
