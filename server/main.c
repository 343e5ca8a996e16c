/* xtwin-server: the detector server. With no arguments it serves the built-in head phantom in a
 * default detector mode on 127.0.0.1 (REST :8710, stream :8711) with the CUDA backend when a GPU
 * is usable and the CPU backend otherwise, and prints its URLs.
 *
 * Start-up order: configuration, backend, projectors (one per render worker), models, then the
 * WebSocket listener, the engine (workers and pacer) and REST. SIGINT/SIGTERM are taken by a
 * signal thread (all other threads block them); it sets quit and wakes the WebSocket loop, which
 * sends every client a close frame; then REST stops, the engine stops and everything is freed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "srv_clock.h"
#include "srv_config.h"
#include "srv_engine.h"
#include "srv_contrast.h"
#include "srv_instr.h"
#include "srv_metrics.h"
#include "srv_rest.h"
#include "srv_device.h"
#include "srv_state.h"
#include "srv_ws.h"
#include "xt_phantom.h"
#include "srv_session.h"
#include "srv_study.h"
#include "xt_server.h"
#include "xt_stream.h"
#ifdef XT_SERVER_HAVE_LOADERS
#include "xt_load.h"
#endif

#ifndef XT_SERVER_HAVE_CUDA_INFO
int xt_srv_gpu_list(char names[][128], int max) {
  (void)names, (void)max;
  return 0;
}
#endif

static sigset_t stop_signals;
/* Shutdown bookkeeping between main and the signal thread. */
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER; /* guards ws_done against a late wake-up */
static int ws_done;                                         /* the stream is closed: no more wake-ups */
static atomic_int cleanup_done;
static atomic_ullong t_signal; /* when SIGINT/SIGTERM arrived (xt_now_ns), 0 if none */

#define XT_STOP_BUDGET_NS 700000000ull /* signal to exit, whatever still runs: 0.3 s of slack under the 1 s promise */

/* Waits for SIGINT/SIGTERM, sets quit and wakes the stream loop until it has sent its close
 * frames. Then it is the shutdown's watchdog: a REST request still loading a model or a CPU
 * render of a large mode must not hold the process, so if the orderly stop has not finished
 * XT_STOP_BUDGET_NS after the signal, it says so and exits at once (the clients already have
 * their close frames). */
static void *signal_main(void *arg) {
  xt_server *s = arg;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (sig == SIGUSR1 && atomic_load(&cleanup_done)) return NULL; /* main's own wake-up at exit */
  uint64_t t0 = xt_now_ns();
  atomic_store(&t_signal, t0);
  fprintf(stderr, "xtwin-server: %s, shutting down\n", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal");
  atomic_store(&s->quit, 1);
  while (!atomic_load(&cleanup_done)) {
    if (xt_now_ns() - t0 > XT_STOP_BUDGET_NS) {
      fprintf(stderr, "xtwin-server: still stopping %.0f ms after the signal (a request or a render is still running): "
                      "exiting now\n", (double)(xt_now_ns() - t0) * 1e-6);
      fflush(stderr);
      _exit(0);
    }
    pthread_mutex_lock(&stop_mu);
    if (!ws_done) xt_ws_wake(s);
    pthread_mutex_unlock(&stop_mu);
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static int pick_backend(xt_server *s, xt_msg *msg) {
  xt_msg m;
  if (!strcmp(s->cfg.backend, "cpu")) s->backend = XT_BACKEND_CPU;
  else if (!strcmp(s->cfg.backend, "cuda")) {
    /* m.text starts "backend cuda: ": one prefix, not two */
    if (xt_proj_available(XT_BACKEND_CUDA, &m)) return xt_fail(msg, XT_ENODEV, "--%s", m.text);
    s->backend = XT_BACKEND_CUDA;
  } else if (xt_proj_available(XT_BACKEND_CUDA, &m) == 0) s->backend = XT_BACKEND_CUDA;
  else {
    s->backend = XT_BACKEND_CPU;
    snprintf(s->backend_note, sizeof s->backend_note, "cpu chosen: %.200s", m.text);
  }
  return 0;
}

/* A built-in model onto every worker's projector and into the list; freed on failure. */
static int add_builtin(xt_server *s, xt_model *m, const char *src, xt_msg *msg) {
  int rc = 0;
  for (int i = 0; i < s->nmodels; i++) /* names are unique, the phantom's too */
    if (!strcmp(s->models[i]->name, m->name)) {
      rc = xt_fail(msg, XT_EEXISTS, "--phantom: model name \"%s\" is taken (by the model from %s)", m->name,
                   s->model_src[i]);
      xt_model_free(m);
      return rc;
    }
  if (s->nmodels >= XT_SRV_MAX_MODELS) rc = xt_fail(msg, XT_ETOOLARGE, "at most %d models", XT_SRV_MAX_MODELS);
  for (int i = 0; i < s->nworkers && !rc; i++) rc = xt_proj_add_model(s->workers[i].proj, m, msg);
  if (rc) {
    xt_model_free(m);
    return rc;
  }
  s->models[s->nmodels] = m;
  snprintf(s->model_src[s->nmodels], sizeof s->model_src[0], "%s", src);
  s->nmodels++;
  return 0;
}

/* The thorax (1.25 mm voxels) and its guidewire, room for 4096 points in a shape. */
static int add_thorax(xt_server *s, xt_msg *msg) {
  xt_model *m = NULL, *w = NULL;
  int rc = xt_phantom_thorax_model(XT_SRV_THORAX_VOXEL_MM, &m, msg);
  if (!rc) rc = add_builtin(s, m, "built-in thorax phantom, 1.25 mm labels", msg);
  if (rc) return rc;
  s->phantom_index = s->nmodels - 1;
  if ((rc = xt_phantom_thorax_wire_model(XT_SRV_THORAX_WIRE_POINTS, &w, msg)) ||
      (rc = add_builtin(s, w, "built-in guidewire in the thorax's aorta", msg)))
    return rc;
  s->phantom_wire = s->nmodels - 1;
  return 0;
}

static int setup(xt_server *s, xt_msg *msg) {
  int rc = pick_backend(s, msg);
  if (rc) return rc;
  s->gpu_count = xt_srv_gpu_list(s->gpu_names, XT_SRV_MAX_WORKERS);
  const char *mode = s->cfg.mode;
  if (!strcmp(mode, "auto")) mode = s->backend == XT_BACKEND_CUDA ? "fd20-1024" : "fd20-256";
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return xt_fail(msg, XT_ENOTFOUND, "--mode: unknown detector mode '%s'", mode);
  s->nplanes = s->cfg.planes == 2 ? 2 : 1;
  const char *mode_b = s->cfg.mode_b;
  if (!strcmp(mode_b, "auto")) mode_b = s->backend == XT_BACKEND_CUDA ? "fd15-1024" : "fd15-256";
  const xt_detector_mode *mdb = xt_mode_find(mode_b);
  if (s->nplanes == 2 && !mdb) return xt_fail(msg, XT_ENOTFOUND, "--mode-b: unknown detector mode '%s'", mode_b);
  s->timing = !strcmp(s->cfg.timing, "simultaneous") ? XT_STREAM_TIMING_SIMULTANEOUS : XT_STREAM_TIMING_INTERLEAVED;
  s->plane_sel = s->nplanes == 2 ? 3u : 1u; /* the API's switch exposes every plane there is */
  s->run.fps = s->cfg.fps > 0 ? s->cfg.fps : 15; /* 0: chosen once the workers can render (engine.c) */
  s->run.lockstep = !strcmp(s->cfg.run_mode, "lockstep");
  s->run.running = s->cfg.autostart;
  for (int p = 0; p < s->nplanes; p++) {
    xt_acq_setup *set = &s->planes[p].set;
    s->stands[p] = xt_stand_of_plane(p);
    set->mode = p ? mdb : md;
    xt_pixfmt_parse(s->cfg.pixel_format, &set->pixel_format);
    set->chain = s->cfg.chain;
    set->chain_prm = xt_chain_params_default();
    /* the planes' noise must not be one: plane B's seed is plane A's, mixed (docs/biplane.md) */
    if (p) set->chain_prm.seed = xt_srv_plane_seed(set->chain_prm.seed, p);
    set->pose = p ? xt_stand_default_pose(s->stands[p], set->mode) : xt_pose_default(md);
    set->t_pose_ns = xt_dev_now_ns();
  }
  xt_srv_device_setup(s, xt_dev_now_ns()); /* powered on: ready, exposing when autostarted */
  s->scenario_hook = xt_srv_scenario_apply;
  s->fault_hook = xt_srv_fault; /* fault.c: a scenario's faults take the REST path's entry point */
  if (s->cfg.scenario[0]) { /* played from the start, before the first exposure */
    xt_scenario sc;
    if ((rc = xt_scenario_load(s->cfg.scenario, &sc, msg))) return rc;
    s->scn = sc;
    s->scn.t_start_ns = xt_dev_now_ns();
    if (sc.has_seed)
      for (int p = 0; p < s->nplanes; p++) s->planes[p].set.chain_prm.seed = xt_srv_plane_seed(sc.seed, p);
  }

  /* One render worker per device: the CPU projector is one (multithreaded) device, unless
   * --devices N > 1 asks for N CPU workers sharing the cores (to test the multi-device path
   * without GPUs: chain frames on worker 0, mono frames round robin, engine.c). */
  s->nworkers = 1;
  if (s->backend == XT_BACKEND_CUDA) {
    int n = s->gpu_count > 0 ? s->gpu_count : 1;
    if (s->cfg.devices > 0 && s->cfg.devices < n) n = s->cfg.devices;
    s->nworkers = n;
  } else if (s->cfg.devices > 1)
    s->nworkers = s->cfg.devices;
  for (int i = 0; i < s->nworkers; i++) {
    xt_proj_options o = {s->backend, xt_engine_proj_threads(s), i};
    if ((rc = xt_proj_create(&o, &s->workers[i].proj, msg))) return rc;
  }

  for (int i = 0; i < s->cfg.nmodel_roots; i++) {
#ifdef XT_SERVER_HAVE_LOADERS
    if ((rc = xt_load_root(s->cfg.model_roots[i], &s->model_roots[i], msg))) return rc;
#else
    if (!(s->model_roots[i] = strdup(s->cfg.model_roots[i]))) return XT_ENOMEM;
#endif
    s->nmodel_roots++;
  }
  for (int i = 0; i < s->cfg.nmodels; i++) {
    const xt_srv_model_cfg *mc = &s->cfg.models[i];
    xt_msg m;
    if ((rc = xt_srv_add_model_path(s, mc->path, mc->name, mc->convert, 0, &m)))
      return xt_fail(msg, rc, "model %s: %s", mc->path, m.text);
  }
  /* auto: with no model configured, the thorax and its guidewire (issue 26) - or the head when its
   * size is given (--phantom-dim, --phantom-spacing size the head only) */
  const int head_sized = s->cfg.phantom_dim > 0 || s->cfg.phantom_spacing > 0;
  const int automatic = !strcmp(s->cfg.phantom, "auto") && s->nmodels == 0;
  if (!strcmp(s->cfg.phantom, "thorax") || (automatic && !head_sized)) {
    if (head_sized)
      return xt_fail(msg, XT_EINVAL, "--phantom thorax: --phantom-dim and --phantom-spacing size the head only");
    if ((rc = add_thorax(s, msg))) return rc;
  } else if (!strcmp(s->cfg.phantom, "head") || automatic) {
    if (s->cfg.phantom_dim == 0) s->cfg.phantom_dim = 256;
    if (s->cfg.phantom_spacing == 0) s->cfg.phantom_spacing = 1.0;
    if (s->cfg.phantom_dim < 16) return xt_fail(msg, XT_ERANGE, "phantom_dim %d: at least 16", s->cfg.phantom_dim);
    if (s->cfg.phantom_spacing < 0.05)
      return xt_fail(msg, XT_ERANGE, "phantom_spacing %g: at least 0.05 mm", s->cfg.phantom_spacing);
    int d = s->cfg.phantom_dim;
    int dim[3] = {d, d, d};
    xt_model *m = NULL;
    if ((rc = xt_phantom_head_model(dim, s->cfg.phantom_spacing, XT_VOXEL_F32, &m, msg))) return rc;
    for (int i = 0; i < s->nmodels; i++) /* names are unique, the phantom's too */
      if (!strcmp(s->models[i]->name, m->name)) {
        rc = xt_fail(msg, XT_EEXISTS, "--phantom head: model name \"%s\" is taken (by the model from %s)", m->name,
                     s->model_src[i]);
        xt_model_free(m);
        return rc;
      }
    for (int i = 0; i < s->nworkers && !rc; i++) rc = xt_proj_add_model(s->workers[i].proj, m, msg);
    if (rc) {
      xt_model_free(m);
      return rc;
    }
    s->phantom_index = s->nmodels;
    s->models[s->nmodels] = m;
    snprintf(s->model_src[s->nmodels], sizeof s->model_src[0], "built-in head phantom, %d^3 at %g mm", d,
             s->cfg.phantom_spacing);
    s->nmodels++;
  }
  if ((rc = xt_srv_instr_register(s, msg))) return rc;
  return xt_srv_contrast_register(s, msg); /* the label volumes' contrast regions */
}

static void write_ports(xt_server *s) {
  if (!s->cfg.ports_file[0]) return;
  char tmp[XT_SRV_STR + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->cfg.ports_file);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "{\"rest\": %d, \"ws\": %d, \"tls\": %s}\n", s->rest_port, s->ws_port, s->tls ? "true" : "false");
  fclose(f);
  rename(tmp, s->cfg.ports_file);
}

int main(int argc, char **argv) {
  static xt_server srv; /* large (queues, stats): static storage, not the stack */
  xt_server *s = &srv;
  xt_msg msg = {{0}};
  int rc = 0, action = 0;
  xt_srv_config_defaults(&s->cfg);
  if ((rc = xt_srv_config_args(&s->cfg, argc, argv, &action, &msg))) {
    fprintf(stderr, "xtwin-server: %s\n", msg.text);
    return 2;
  }
  if (action == 1) {
    xt_srv_config_usage(stdout);
    return 0;
  }
  if (action == 2) {
    printf("xtwin-server %s (stream header version %d)\n", XT_SERVER_VERSION, XT_STREAM_VERSION);
    return 0;
  }
  if (action == 3) {
    for (int i = 0; i < xt_rest_route_count(); i++) {
      const xt_route *r = xt_rest_route_at(i);
      printf("%-6s %-26s %s\n", r->method, r->path, r->summary);
    }
    return 0;
  }

  /* Every thread created from here on inherits the blocked set; only the signal thread takes them. */
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
  signal(SIGPIPE, SIG_IGN);

  pthread_mutex_init(&s->st_mu, NULL);
  pthread_mutex_init(&s->models_mu, NULL);
  pthread_mutex_init(&s->add_mu, NULL);
  pthread_mutex_init(&s->shape_mu, NULL);
  xt_srv_motion_init(&s->motion);
  pthread_mutex_init(&s->log_mu, NULL);
  if (!strcmp(s->cfg.clock, "virtual")) xt_dev_clock_virtual(xt_now_ns());
  atomic_store(&s->ws_min_pub, UINT64_MAX); /* no stream client */
  s->phantom_index = -1;
  s->phantom_wire = -1;
  xt_metrics_init(&s->metrics);
  for (int p = 0; p < XT_SRV_PLANES; p++) xt_acq_plane_init(&s->planes[p]);
  s->tls = s->cfg.tls_cert[0] != 0;
  pthread_t sig_thread;
  int sig_started = 0, engine_started = 0;

  if ((rc = setup(s, &msg))) goto done;
  if ((rc = xt_session_open(s, &msg))) goto done;
  if ((rc = xt_srv_study_open(s, &s->study, &msg))) goto done;
  if ((rc = xt_ws_start(s, &msg))) goto done;
  if ((rc = xt_engine_start(s, &msg))) goto done;
  engine_started = 1;
  if ((rc = xt_rest_start(s, &msg))) goto done;
  if (pthread_create(&sig_thread, NULL, signal_main, s) == 0) sig_started = 1;

  const char *h = s->cfg.bind;
  int v6 = strchr(h, ':') != NULL;
  const char *http = s->tls ? "https" : "http", *ws = s->tls ? "wss" : "ws";
  /* first: the one thing a person starting the server wants (issue 27) */
  printf("xtwin console: %s://%s%s%s:%d/  (open it in a browser)\n", http, v6 ? "[" : "", h, v6 ? "]" : "", s->rest_port);
  printf("xtwin-server %s: backend %s, %d model(s), mode %s (%dx%d) at %g fps, %s, %s%s\n", XT_SERVER_VERSION,
         xt_backend_name(s->backend), s->nmodels, s->planes[0].set.mode->name, s->planes[0].set.mode->cols, s->planes[0].set.mode->rows, s->run.fps,
         s->run.lockstep ? "lockstep" : "free run", xt_pixfmt_name(s->planes[0].set.pixel_format),
         s->run.running ? ", running" : ", stopped");
  if (s->nplanes == 2)
    printf("  biplane: plane B (lateral) mode %s (%dx%d), %s pulses\n", s->planes[1].set.mode->name,
           s->planes[1].set.mode->cols, s->planes[1].set.mode->rows,
           s->timing == XT_STREAM_TIMING_SIMULTANEOUS ? "simultaneous" : "interleaved");
  if (s->backend_note[0]) printf("  (%s)\n", s->backend_note);
  if (s->fps_note[0]) printf("  (%s)\n", s->fps_note);
  printf("  REST    %s://%s%s%s:%d/v1/info\n", http, v6 ? "[" : "", h, v6 ? "]" : "", s->rest_port);
  printf("  stream  %s://%s%s%s:%d/v1/stream\n", ws, v6 ? "[" : "", h, v6 ? "]" : "", s->ws_port);
  printf("  metrics %s://%s%s%s:%d/metrics\n", http, v6 ? "[" : "", h, v6 ? "]" : "", s->rest_port);
  printf("  frames: /usr/bin/python3 api/examples/stream_client.py %s://%s%s%s:%d/v1/stream\n", ws, v6 ? "[" : "", h,
         v6 ? "]" : "", s->ws_port);
  printf("xtwin-server ready rest=%d ws=%d\n", s->rest_port, s->ws_port);
  fflush(stdout);
  write_ports(s);

  xt_ws_run(s);

done:
  if (rc) fprintf(stderr, "xtwin-server: %s\n", msg.text[0] ? msg.text : xt_strerror(rc));
  pthread_mutex_lock(&stop_mu);
  ws_done = 1;
  pthread_mutex_unlock(&stop_mu);
  if (atomic_load(&t_signal))
    fprintf(stderr, "xtwin-server: stream closed %.1f ms after the signal\n",
            (double)(xt_now_ns() - atomic_load(&t_signal)) * 1e-6);
  xt_rest_stop(s);
  if (engine_started) xt_engine_stop(s);
  xt_srv_study_close(s->study); /* after the workers: every frame they handed over is written */
  s->study = NULL;
  xt_session_close(s);
  xt_scenario_free(&s->scn);
  xt_srv_faults_free(s);
  xt_ws_destroy(s);
  if (engine_started) xt_engine_free(s);
  for (int i = 0; i < s->nworkers; i++)
    if (s->workers[i].proj) xt_proj_destroy(s->workers[i].proj);
  for (int i = 0; i < s->nmodels; i++) xt_model_free(s->models[i]);
  xt_srv_instr_free(s);
  free(s->contrast);
  for (int i = 0; i < s->nmodel_roots; i++) free(s->model_roots[i]);
  xt_metrics_destroy(&s->metrics);
  for (int p = 0; p < XT_SRV_PLANES; p++) xt_acq_plane_destroy(&s->planes[p]);
  atomic_store(&cleanup_done, 1);
  if (sig_started) {
    pthread_kill(sig_thread, SIGUSR1); /* releases its sigwait when no signal came */
    pthread_join(sig_thread, NULL);
  }
  if (!rc && atomic_load(&t_signal))
    fprintf(stderr, "xtwin-server: stopped %.1f ms after the signal\n", (double)(xt_now_ns() - atomic_load(&t_signal)) * 1e-6);
  else if (!rc)
    fprintf(stderr, "xtwin-server: stopped\n");
  return rc ? 1 : 0;
}
