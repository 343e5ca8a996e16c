/* xtwin-server: the server object every module works on, and the map of the modules. Each
 * module has its own header, named for what it holds; a file includes the ones it uses.
 *
 *   srv_config.h  config.c   the configuration table (file, flags, GET /v1/info)
 *   srv_state.h   state.c    pose and acquisition state, their JSON forms and validation, the
 *                            operations REST and WS share
 *   srv_engine.h  engine.c   the pacer (absolute deadlines on CLOCK_MONOTONIC), one render worker
 *                            per device, and the locked ring of finished frames (with its notifier)
 *   srv_budget.h  budget.c   work budgets of models, frames and REST renders
 *   srv_metrics.h metrics.c  counters and histograms, Prometheus text
 *   srv_guard.h   guard.c    Host, Origin and token checks; gate.c the REST port's accept gate
 *   srv_rest.h    rest.c     libmicrohttpd: the route table and its handlers
 *   srv_ws.h      ws.c       libwebsockets: /v1/stream, owned by one service thread
 *   srv_clock.h   clock.c    the monotonic clock
 *   srv_device.h  device.c   the plane's device state machine (acq/xt_device.h): events, JSON, run
 *   srv_session.h session.c  the session log: every command, event and exposure as JSON lines
 *   srv_fault.h   fault.c    fault injection: REST and the scenario player; where each fault acts
 *
 * Calls go one way, no circle: main calls every module; rest calls gate, guard, state and the
 * engine; ws calls guard, state and the engine; state calls the engine, the budgets and the session
 * log; the engine calls only the budgets, metrics, the device, injected faults (fault.c: which
 * frames are dropped or late, the panel's faults), the session log and the clock, and wakes the
 * stream through the ring's notifier (xt_ring_set_notify), which ws.c registers, never by calling
 * ws.c; scenario events reach state.c through a hook main sets.
 *
 * Threads: the main thread runs the WebSocket service loop (it owns every wsi); a signal thread
 * waits for SIGINT/SIGTERM; libmicrohttpd runs its own pool; the pacer thread stamps exposures;
 * each render worker owns one projector. Every shared field names the lock that guards it. */
#ifndef XT_SERVER_H
#define XT_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "srv_config.h"
#include "srv_engine.h"
#include "srv_fault.h"
#include "srv_metrics.h"
#include "srv_state.h"
#include "xt_acq.h"
#include "srv_scenario.h"
#include "xt_device.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

#define XT_SERVER_VERSION "0.1.0"

typedef struct xt_server {
  xt_srv_config cfg;
  xt_backend backend;
  char backend_note[256];
  char fps_note[256];   /* how the start-up frame rate was chosen (--fps 0, the default) */
  int gpu_count;
  char gpu_names[XT_SRV_MAX_WORKERS][128];

  /* models: written before the workers start, and by POST /v1/models under models_mu; add_mu makes
   * one add at a time without holding models_mu while the workers add the model */
  pthread_mutex_t models_mu, add_mu;
  xt_model *models[XT_SRV_MAX_MODELS];
  char model_src[XT_SRV_MAX_MODELS][XT_SRV_STR];
  int nmodels;
  char *model_roots[XT_SRV_MAX_LIST]; /* cfg.model_roots resolved (realpath) at start */
  int nmodel_roots;

  /* state: guarded by st_mu; st_cv wakes the pacer on any change */
  pthread_mutex_t st_mu;
  pthread_cond_t st_cv;
  xt_srv_run run;    /* frame rate, run mode, running */
  uint64_t acq_gen;  /* bumped on every acquisition change */
  /* The planes (acq/xt_acq.h): plane A (frontal, index 0) always, plane B (lateral, 1) on a biplane
   * system (--planes 2). Each has its setting (pose, detector mode, chain settings and seed), its run
   * and frame counter under st_mu; its state across exposures (dose totals, dose-rate control)
   * under its own lock, planes[p].mu, taken by the workers inside xt_acq_expose and by GET /v1/dose
   * and /metrics. Its stand (scene/stands.tsv) limits its pose. */
  int nplanes;
  xt_acq_plane planes[XT_SRV_PLANES];
  const xt_stand *stands[XT_SRV_PLANES];
  /* Each plane's device state machine (acq/xt_device.h, server/device.c; docs/device.md): standby,
   * ready, prepare, exposing, readout, fault, under st_mu. The pacer exposes a plane only while its
   * device is exposing; run.running is the API's switch (acquisition start/stop), which presses the
   * switch of every plane biplane.planes selects. */
  xt_device devs[XT_SRV_PLANES];
  /* Biplane (st_mu; docs/biplane.md): the planes the API's switch exposes (bit p: plane p) and
   * how their pulses are scheduled within a cycle (XT_STREAM_TIMING_INTERLEAVED or _SIMULTANEOUS);
   * the pulse cycles started since start (the header's cycle). */
  unsigned plane_sel;
  int timing;
  uint64_t cycles;
  /* The scenario being played (srv_scenario.h; st_mu) and how the pacer applies its events and
   * faults: hooks set by main, so that the engine calls neither state.c nor fault.c. */
  xt_scenario scn;
  int (*scenario_hook)(struct xt_server *s, const char *what, const char *name, const json_t *body, xt_msg *msg);
  int (*fault_hook)(struct xt_server *s, const char *name, const json_t *body, xt_msg *msg);
  /* Faults injected (server/fault.c, srv_fault.h; docs/device.md "Faults"): under st_mu, but the
   * stream link's timer (atomic) */
  xt_srv_faults faults;
  int stopping;

  xt_worker workers[XT_SRV_MAX_WORKERS];
  int nworkers;
  xt_worker rest; /* POST /v1/render's own worker and projector: never the stream's (engine.c) */
  unsigned rr; /* round-robin over workers (st_mu) */
  /* the virtual clock's pacer (srv_clock.h): exposures queued and not yet done (st_mu), and the
   * oldest frame every stream client has been sent (ws.c; UINT64_MAX with no client) */
  uint64_t inflight;
  atomic_ullong ws_min_pub;
  pthread_t pacer;
  int pacer_started;

  xt_ring ring;
  xt_metrics metrics;

  /* the study folder (study.c, --study-dir): NULL without it; set before any worker starts */
  struct xt_srv_study *study;

  /* the session log (session.c): log is set before any thread starts, written under log_mu */
  pthread_mutex_t log_mu;
  FILE *log;
  int phantom_index; /* the built-in phantom's place in models, -1 none */
  int phantom_wire;  /* the built-in thorax's guidewire's place in models, -1 none */
  /* Instruments (instr.c, srv_instr.h): registered under st_mu, their shapes' rings under shape_mu
   * (taken before st_mu, never after) */
  struct xt_srv_instr *instr[XT_SRV_MAX_INSTR];
  int ninstr;
  pthread_mutex_t shape_mu;
  /* Contrast (contrast.c, srv_contrast.h): under st_mu; NULL until the first registration */
  struct xt_srv_contrast *contrast;
  /* Motion (motion.c, srv_motion.h): model transforms and periodic motions, under st_mu */
  xt_srv_motion motion;

  /* set by main */
  struct lws_context *lws;
  struct MHD_Daemon *mhd;
  struct xt_gate *gate; /* gate.c */
  int rest_port, ws_port;
  int tls;
  atomic_int quit;
  /* stream clients that take processed frames (ws.c): with none and no study folder, the GPU leaves
   * the processed frame on the device (XT_ACQ_PROC_UNREAD) */
  atomic_int processed_readers;
} xt_server;

/* CUDA devices visible (gpu_info.c when built with CUDA; 0 otherwise), names into names[i]. */
int xt_srv_gpu_list(char names[][128], int max);

#endif /* XT_SERVER_H */
