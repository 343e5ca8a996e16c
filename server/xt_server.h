/* xtwin-server internals: the shared server object and the modules around it.
 *
 *   config.c   the configuration table (file, flags, GET /v1/info)
 *   state.c    pose and acquisition state, their JSON forms and validation (REST and WS share it)
 *   engine.c   the pacer (absolute deadlines on CLOCK_MONOTONIC), one render worker per device,
 *              and the locked ring of finished frames the WebSocket thread sends from
 *   rest.c     libmicrohttpd: the route table and its handlers
 *   ws.c       libwebsockets: /v1/stream, owned by one service thread
 *   metrics.c  counters and histograms, Prometheus text
 *   encode.c   16-bit PNG and .npy encoders for POST /v1/render
 *
 * Threads: the main thread runs the WebSocket service loop (it owns every wsi); a signal thread
 * waits for SIGINT/SIGTERM; libmicrohttpd runs its own pool; the pacer thread stamps exposures;
 * each render worker owns one projector. Every shared field names the lock that guards it. */
#ifndef XT_SERVER_H
#define XT_SERVER_H

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "../api/xt_stream.h"
#include "xt_chain.h"
#include "xt_dose.h"
#include "xt_drc.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

#define XT_SERVER_VERSION "0.1.0"
#define XT_SRV_MAX_MODELS 16
#define XT_SRV_MAX_WORKERS 8
#define XT_SRV_STR 512
#define XT_SRV_MAX_LIST 16

/* ---- configuration (config.c) ------------------------------------------------------------- */

typedef struct xt_srv_model_cfg {
  char path[XT_SRV_STR];
  char name[64];
  char convert[16]; /* mu | hu | hu-labels | labels */
} xt_srv_model_cfg;

typedef struct xt_srv_config {
  char bind[64];
  int rest_port, ws_port;
  char backend[16]; /* auto | cpu | cuda */
  int threads;      /* CPU projector threads, 0 = all cores */
  int devices;      /* CUDA devices to use, 0 = all */
  char tls_cert[XT_SRV_STR], tls_key[XT_SRV_STR];
  char token[256];
  char mode[32]; /* detector mode, or "auto" */
  double fps;
  char run_mode[16];     /* free | lockstep */
  char pixel_format[16]; /* uint16 | float32 */
  int autostart;
  int chain; /* the imaging chain on at launch */
  char phantom[16]; /* auto | head | none */
  int phantom_dim;
  double phantom_spacing;
  int max_body;       /* bytes of a REST request body */
  int max_ws_message; /* bytes of a WebSocket text message */
  int rest_threads;
  int max_clients;
  char ports_file[XT_SRV_STR];
  int verbose;
  int synthetic;       /* benchmarks/tests: skip the projector, send a constant frame */
  int convert_threads; /* threads of the uint16 conversion per worker, 0 = auto */
  /* volume loading (docs/loaders.md): applied to every model the server loads */
  char hu_model[16];        /* bilinear | linear */
  double ct_energy;         /* keV, bilinear HU -> mu */
  char nifti_transform[16]; /* sform | qform */
  char nan_value[32];       /* "none" (refuse NaN voxels) or a number to fill them with */
  int nmodels;
  xt_srv_model_cfg models[XT_SRV_MAX_MODELS];
  /* Repeatable options (lists in the config file). */
  int nmodel_roots; /* folders POST /v1/models may load from; none: the route is refused */
  char model_roots[XT_SRV_MAX_LIST][XT_SRV_STR];
  int nallow_origins; /* browser origins allowed besides the server's own */
  char allow_origins[XT_SRV_MAX_LIST][256];
  int nallow_hosts; /* Host names accepted besides IP literals and localhost */
  char allow_hosts[XT_SRV_MAX_LIST][256];
  int max_per_addr;   /* REST connections from one client address */
  double head_timeout; /* seconds for a REST request head to arrive in full */
  double request_timeout; /* seconds for a REST request's head and body together */
  int min_body_rate;      /* bytes/s a REST body must average after its head (0: no minimum) */
  double peer_timeout; /* seconds a stream peer may leave sent data unacknowledged (half-open TCP) */
  /* work budgets (budget.c, docs/server.md); 0 where "auto": the backend's default, set at start */
  int gmm_tile_budget;     /* Gaussians reaching one 16x16-pixel tile */
  int gmm_pair_budget;     /* (Gaussian, tile) pairs of one frame */
  int render_pixel_budget; /* pixels of one POST /v1/render */
  int render_threads;      /* CPU threads of the REST render worker's projector, 0 = auto */
} xt_srv_config;

void xt_srv_config_defaults(xt_srv_config *c);
/* Applies a JSON config file (keys of the table, plus "models"). */
int xt_srv_config_file(xt_srv_config *c, const char *path, xt_msg *msg);
/* The same from a JSON text in memory; `name` stands for the file in messages. */
int xt_srv_config_parse(xt_srv_config *c, const char *text, size_t len, const char *name, xt_msg *msg);
/* Parses argv: --config FILE first, then every --flag of the table; --help/--version/--routes
 * set *action (1 help, 2 version, 3 routes). */
int xt_srv_config_args(xt_srv_config *c, int argc, char **argv, int *action, xt_msg *msg);
void xt_srv_config_usage(FILE *f);
/* The table as JSON (secrets masked), for GET /v1/info. */
json_t *xt_srv_config_json(const xt_srv_config *c);

/* ---- time --------------------------------------------------------------------------------- */

uint64_t xt_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- metrics (metrics.c) ------------------------------------------------------------------ */

#define XT_HIST_MAX_BUCKETS 20
typedef struct xt_hist {
  const char *name, *help;
  int nb;
  double le[XT_HIST_MAX_BUCKETS];
  uint64_t count[XT_HIST_MAX_BUCKETS + 1];
  uint64_t n;
  double sum;
} xt_hist;

typedef struct xt_client_stats {
  unsigned id;
  char peer[64];
  uint64_t sent, dropped;
  int used;
} xt_client_stats;

#define XT_SRV_MAX_CLIENT_STATS 64
typedef struct xt_metrics {
  pthread_mutex_t mu; /* guards everything below */
  uint64_t frames_rendered, frames_skipped, frames_published, render_errors, deadlines_missed;
  uint64_t pose_updates, rest_requests, rest_errors, ws_connections;
  uint64_t rest_refused;   /* REST connections refused (per-address limit) or cut (head deadline) */
  uint64_t ws_refused;     /* stream upgrades refused (client limit, token, origin, host) */
  uint64_t sent_total, dropped_total; /* over all clients ever connected */
  xt_hist render, convert, period, jitter, latency, pose_latency;
  xt_client_stats clients[XT_SRV_MAX_CLIENT_STATS];
  /* dose bookkeeping and dose-rate control of the current run (issue 11; engine.c) */
  uint64_t dose_run;       /* the run (xt_server.run_gen) the totals and the loop belong to */
  xt_dose_totals dose;     /* run totals */
  xt_dose dose_last;       /* the last frame's */
  xt_drc drc;              /* the loop's state */
  int drc_live;            /* drc was reset for this run */
} xt_metrics;

void xt_metrics_init(xt_metrics *m);
void xt_metrics_destroy(xt_metrics *m);
void xt_hist_add(xt_hist *h, double v); /* caller holds m->mu */
/* Appends the Prometheus text exposition to a malloc'd string. */
char *xt_metrics_text(xt_metrics *m, size_t *len);

/* ---- state (state.c) ---------------------------------------------------------------------- */

typedef struct xt_acq {
  const xt_detector_mode *mode;
  double fps;
  int lockstep;     /* run mode: 0 free, 1 lockstep */
  int pixel_format; /* XT_STREAM_PIX_* */
  int running;
  int chain;                 /* the imaging chain on: frames are raw + processed uint16 */
  xt_chain_params chain_prm; /* its parameters (imaging/xt_chain.h's table) */
} xt_acq;

#define XT_FPS_MIN 0.5
#define XT_FPS_MAX 60.0

/* Merges the members of obj into *pose (partial update), rejecting unknown keys, wrong types
 * and invalid poses; msg names the field. *seq_out gets "seq" when present (else untouched). */
int xt_pose_from_json(const json_t *obj, xt_pose *pose, int allow_seq, uint64_t *seq_out, int *has_seq,
                      xt_msg *msg);
json_t *xt_pose_to_json(const xt_pose *p);
int xt_acq_from_json(const json_t *obj, xt_acq *acq, xt_msg *msg);
json_t *xt_acq_to_json(const xt_acq *a);
/* {"enabled": ..., every chain parameter by name} */
json_t *xt_chain_to_json(int enabled, const xt_chain_params *p);
const char *xt_pixfmt_name(int f);
int xt_pixfmt_parse(const char *s, int *out);
json_t *xt_geometry_to_json(const xt_geometry *g);
/* Parses a JSON text with a size limit; returns XT_EFORMAT naming line/column on error. */
int xt_json_parse(const char *text, size_t len, json_t **out, xt_msg *msg);
/* A REST request body as a JSON object (what every handler with a body parses first); an empty
 * body gives {} when allow_empty, else XT_EINVAL. */
int xt_body_json(const char *body, size_t len, int allow_empty, json_t **out, xt_msg *msg);
/* The body of POST /v1/render ({"pose", "mode", "pixel_format"}, all optional) applied over
 * *pose and *acq (the current state); both may be partly updated on error. */
int xt_render_from_json(const json_t *obj, xt_pose *pose, xt_acq *acq, xt_msg *msg);

/* A WebSocket text message parsed and checked (ws.c then acts on it). On error, cmd is kept when
 * the text was a JSON object, for the "id" and "seq" a nack echoes; free with xt_ws_cmd_free
 * either way. The pose/acquisition update itself is validated when applied, against the state
 * of the moment (xt_srv_update_pose, xt_srv_update_acq). */
enum { XT_CMD_POSE = 1, XT_CMD_ACQ, XT_CMD_START, XT_CMD_STOP, XT_CMD_TRIGGER, XT_CMD_STATE, XT_CMD_FRAMES };
typedef struct xt_ws_cmd {
  int type;       /* XT_CMD_* */
  json_t *cmd;    /* the whole message (owned), NULL when it did not parse */
  json_t *update; /* pose: a copy of "pose" with the message's "seq" merged in; acquisition:
                     "acquisition" (owned either way); else NULL */
  int processed;  /* frames: 1 for "processed", 0 for "raw" */
} xt_ws_cmd;
int xt_ws_cmd_parse(const char *text, size_t len, xt_ws_cmd *out, xt_msg *msg);
void xt_ws_cmd_free(xt_ws_cmd *c);
/* {"error": {"name", "status", "message"}} */
json_t *xt_error_json(int err, int status, const char *message);

/* ---- frames, ring, engine (engine.c) ------------------------------------------------------ */

typedef struct xt_frame {
  atomic_int refs;
  uint64_t pub; /* publication number in the ring, 1, 2, ... */
  int lockstep;
  size_t cap;          /* bytes allocated after XT_FRAME_PRE */
  size_t len;          /* header + payload */
  unsigned char *mem;  /* XT_FRAME_PRE bytes of room, then the message */
  unsigned char *msg;  /* = mem + LWS_PRE: header then pixels */
  /* with the chain on, the processed frame's message follows (its own XT_FRAME_PRE of room before
   * it): msg is the raw frame, msg2 the processed one; each client gets the one it chose */
  unsigned char *msg2; /* NULL without the chain */
  size_t len2;
  int pinned; /* mem from xt_host_alloc (page-locked: the GPU's copy-out lands in it directly) */
} xt_frame;

#define XT_RING 8
#define XT_FRAME_PRE 64 /* room before the message for the WebSocket framing (>= LWS_PRE) */

typedef struct xt_ring {
  pthread_mutex_t mu;         /* guards slots, next_pub, pool */
  xt_frame *slots[XT_RING];   /* the newest frames, slots[pub % XT_RING] */
  uint64_t next_pub;          /* pub of the next frame pushed (first is 1) */
  xt_frame *pool[4];          /* released buffers kept for reuse */
  int pin;                    /* GPU backend: frames in page-locked memory (made once, reused) */
} xt_ring;

void xt_frame_unref(xt_ring *r, xt_frame *f);
/* The frame a client whose last sent frame was last_pub should get next (latest-wins for free
 * run; in order for lockstep frames); NULL when none. Returns a reference. */
xt_frame *xt_ring_next(xt_ring *r, uint64_t last_pub);
uint64_t xt_ring_latest_pub(xt_ring *r);

/* A synchronous request to a render worker (POST /v1/render, adding a model). */
typedef struct xt_call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, rc;
  xt_msg msg;
  /* render */
  xt_geometry geom;
  float *lineint; /* rows*cols, filled by the worker */
  double render_s;
  /* add model */
  const xt_model *model;
  /* warm-up: also the imaging chain, with these parameters */
  int chain;
  xt_chain_params chain_prm;
} xt_call;

enum { XT_JOB_FRAME = 1, XT_JOB_RENDER = 2, XT_JOB_ADD_MODEL = 3, XT_JOB_WARMUP = 4 };

typedef struct xt_job {
  int kind;
  /* frame */
  uint64_t counter, pose_seq, t_pose, t_sched, t_exposure, period_ns;
  xt_pose pose;
  const xt_detector_mode *mode;
  int pixel_format, lockstep;
  int chain;
  xt_chain_params chain_prm;
  uint64_t run_gen; /* the run this exposure belongs to (dose totals, dose-rate control) */
  /* render / add model */
  xt_call *call;
} xt_job;

#define XT_QUEUE 32
#define XT_SRV_MAX_HELPERS 15
#define XT_SRV_WORKER_MODELS (2 * XT_SRV_MAX_MODELS) /* a worker also keeps models a failed add left */

typedef struct xt_worker {
  struct xt_server *srv;
  int index, device;
  xt_proj *proj;
  pthread_t thread;
  int started;
  pthread_mutex_t mu; /* guards q, qn, qhead, stop */
  pthread_cond_t cv;
  xt_job q[XT_QUEUE];
  int qhead, qn, stop;
  float *lineint; /* worker-private scratch */
  size_t lineint_cap;
  xt_chain *chain;    /* the imaging chain on this worker's projector, made on first use */
  int models_added;   /* models on this worker's projector (the chain is remade when it grows) */
  int chain_models;   /* ... when the chain was made */
  uint64_t chain_run; /* the run the chain's states (lag, temporal filter, DSA mask) belong to */
  /* Helpers that share the line integral -> uint16 conversion with the worker (engine.c). */
  int nhelp;
  pthread_t help[XT_SRV_MAX_HELPERS];
  pthread_mutex_t hmu; /* guards the h* fields below */
  pthread_cond_t hcv, hdone;
  uint64_t hgen;
  int hleft, hstop, hjoined;
  const float *hsrc;
  uint16_t *hdst;
  size_t hn;
  /* Work budgets (budget.c): the models on this worker's projector and the per-frame check's
   * tile grid (made once, for the largest mode); the last pose measured within budget. */
  const xt_model *bmodels[XT_SRV_WORKER_MODELS];
  int nbmodels;
  int32_t *bgrid;
  int bok, bok_models;
  const char *bok_mode;
  xt_pose bok_pose;
  int rest; /* the REST render worker: renders POST /v1/render only, models added on demand */
} xt_worker;

typedef struct xt_server {
  xt_srv_config cfg;
  xt_backend backend;
  char backend_note[256];
  int gpu_count;
  char gpu_names[XT_SRV_MAX_WORKERS][128];

  /* models: written before the workers start, and by POST /v1/models under models_mu */
  pthread_mutex_t models_mu;
  xt_model *models[XT_SRV_MAX_MODELS];
  char model_src[XT_SRV_MAX_MODELS][XT_SRV_STR];
  int nmodels;
  char *model_roots[XT_SRV_MAX_LIST]; /* cfg.model_roots resolved (realpath) at start */
  int nmodel_roots;

  /* state: guarded by st_mu; st_cv wakes the pacer on any change */
  pthread_mutex_t st_mu;
  pthread_cond_t st_cv;
  xt_pose pose;
  uint64_t pose_seq, t_pose;
  xt_acq acq;
  uint64_t acq_gen;      /* bumped on every acquisition change */
  uint64_t run_gen;      /* bumped when an acquisition starts: a new run of dose totals */
  uint64_t next_counter; /* frame counter of the next exposure */
  int stopping;

  xt_worker workers[XT_SRV_MAX_WORKERS];
  int nworkers;
  xt_worker rest; /* POST /v1/render's own worker and projector: never the stream's (engine.c) */
  unsigned rr; /* round-robin over workers (st_mu) */
  pthread_t pacer;
  int pacer_started;

  xt_ring ring;
  xt_metrics metrics;

  /* set by main */
  struct lws_context *lws;
  struct MHD_Daemon *mhd;
  struct xt_gate *gate; /* gate.c */
  int rest_port, ws_port;
  int tls;
  atomic_int quit;
} xt_server;

int xt_engine_start(xt_server *s, xt_msg *msg);
void xt_engine_stop(xt_server *s);
/* Runs a call on a worker and waits for it. */
int xt_engine_call(xt_server *s, int kind, int worker, xt_call *c); /* worker -1: any */
/* Lockstep: latches the pose now and queues one frame; *counter gets its frame counter. */
int xt_engine_trigger(xt_server *s, uint64_t *counter, xt_msg *msg);
/* Renders (and converts) one frame of `mode` on every worker and discards it, so that the first
 * paced frame of a mode pays no one-off costs (CUDA module load, pinned scratch, buffers). */
void xt_engine_warmup(xt_server *s, const xt_detector_mode *mode);
/* ---- work budgets (budget.c) -------------------------------------------------------------- */

/* A Gaussian mixture about to be added, measured with the mixtures already loaded over a set of
 * poses at the current mode: XT_ETOOLARGE naming the budget and the figure when over it (the
 * model is then freed and *m set to NULL). Other kinds pass. */
int xt_budget_admit(xt_server *s, xt_model **m, xt_msg *msg);
/* A frame's geometry against the budgets, for the mixtures on worker w (XT_ETOOLARGE when over). */
int xt_budget_frame(xt_worker *w, const xt_geometry *g, xt_msg *msg);
/* A model is on w's projector now. */
void xt_budget_worker_model(xt_worker *w, const xt_model *m);
/* POST /v1/render of this mode against render_pixel_budget. */
int xt_budget_render(const xt_server *s, const xt_detector_mode *mode, xt_msg *msg);
/* Ints of the per-frame tile grid for the largest detector mode. */
size_t xt_budget_grid_cells(void);
/* The "auto" (0) budgets replaced by the backend's defaults (before REST starts). */
void xt_budget_resolve(xt_server *s);

/* Wakes the pacer after a state change (caller holds st_mu). */
void xt_engine_kick(xt_server *s);
/* Called by a worker when a frame is in the ring: wakes the WebSocket thread. */
void xt_ws_wake(xt_server *s);

/* Shared by REST and WS: apply updates under st_mu, returning the applied pose seq. */
int xt_srv_update_pose(xt_server *s, const json_t *obj, int allow_seq, uint64_t *seq, xt_msg *msg);
/* {"run_frames", "k_irp_total_mgy", "kap_total_gycm2", the last frame's, the loop's state}: takes metrics.mu */
json_t *xt_dose_json(xt_server *s);
int xt_srv_update_acq(xt_server *s, const json_t *obj, xt_msg *msg);
int xt_srv_start(xt_server *s, int run);
json_t *xt_srv_state_json(xt_server *s);
/* Loads a model by path (through xt_loaders when built) and adds it to every worker. from_client:
 * the path came over the network, so it (and every data file its header names) must resolve
 * into one of the --model-root folders (XT_EPERM otherwise, and always when there are none). */
int xt_srv_add_model_path(xt_server *s, const char *path, const char *name, const char *convert, int from_client,
                          xt_msg *msg);
json_t *xt_srv_models_json(xt_server *s);
json_t *xt_srv_info_json(xt_server *s);

/* CUDA devices visible (gpu_info.c when built with CUDA; 0 otherwise), names into names[i]. */
int xt_srv_gpu_list(char names[][128], int max);

/* ---- who may talk to the server (guard.c) ------------------------------------------------- */

/* A Host header value the server answers to: an IP literal, localhost or an --allow-host name. */
int xt_host_ok(const xt_server *s, const char *host);
/* An Origin header (NULL: not a browser, allowed): the server's own REST origin or an
 * --allow-origin entry (*listed set then). host: the request's Host, for same-origin requests. */
int xt_origin_ok(const xt_server *s, const char *origin, const char *host, int *listed);
/* "Bearer TOKEN" (scheme case-insensitive) against --token; 1 when no token is configured. */
int xt_bearer_ok(const xt_server *s, const char *authorization);
int xt_token_eq(const xt_server *s, const char *t, size_t n);
/* A Content-Type of application/json (parameters such as charset allowed). */
int xt_media_is_json(const char *ctype);
/* What the checks on a REST request head look at, filled by the gate from the raw head (before
 * any body byte is read) and by rest.c from libmicrohttpd's parse (TLS, where the gate sees no
 * head). Absent headers are NULL. */
typedef struct xt_head {
  const char *method, *path; /* path without the query */
  int http10;
  const char *host, *origin, *authorization, *content_type, *transfer_encoding;
  long long content_length; /* -1: none */
} xt_head;
/* Host, Origin, the token, the body's announced size and its content type, in that order: 0 when
 * the request may go on (OPTIONS stops after Origin: rest.c answers it), else the HTTP status,
 * with *err and the message set (401 wants a WWW-Authenticate header). */
int xt_guard_request(const xt_server *s, const xt_head *h, int *err, char *message, size_t cap);

/* ---- the REST port's accept gate (gate.c) ------------------------------------------------- */

struct sockaddr;
/* Listens (sets s->rest_port); xt_gate_run starts accepting once s->mhd exists. */
int xt_gate_start(xt_server *s, const struct sockaddr *sa, unsigned salen, xt_msg *msg);
int xt_gate_run(xt_server *s, xt_msg *msg);
void xt_gate_stop_accepting(xt_server *s);
void xt_gate_free(xt_server *s);
/* Checks a complete request head (len bytes up to and including the blank line): 0 when it is a
 * well-formed HTTP/1.0 or 1.1 head, else the status to answer (400, 414) with *why set. */
int xt_gate_check_head(const char *h, size_t len, const char **why);
/* A connection libmicrohttpd had from this address is closed (its per-address count). */
void xt_gate_release(xt_server *s, const struct sockaddr *sa);
/* Bytes of head + body the gate can hold in a socket's receive buffer (what the kernel granted):
 * a request body is only handed to libmicrohttpd once it has arrived in full. */
size_t xt_gate_capacity(const xt_server *s);

/* ---- REST (rest.c) ------------------------------------------------------------------------ */

typedef struct xt_route {
  const char *method;
  const char *path;
  const char *summary;
  void *handler; /* rest.c's handler type, opaque here */
} xt_route;

int xt_rest_route_count(void);
const xt_route *xt_rest_route_at(int i);
int xt_rest_start(xt_server *s, xt_msg *msg);
void xt_rest_stop(xt_server *s);

/* ---- WebSocket (ws.c) --------------------------------------------------------------------- */

int xt_ws_start(xt_server *s, xt_msg *msg);
/* Serves until s->quit; then sends close frames and returns within about a second. */
void xt_ws_run(xt_server *s);
void xt_ws_destroy(xt_server *s);

/* ---- encoders (encode.c) ------------------------------------------------------------------ */

/* 16-bit greyscale PNG (big-endian samples), with a tEXt chunk "xtwin-geometry" = text. */
int xt_png16_encode(const uint16_t *px, int rows, int cols, const char *text, unsigned char **out,
                    size_t *len, xt_msg *msg);
/* NumPy .npy version 1.0, C order, '<u2' or '<f4'. */
int xt_npy_encode(const void *px, int rows, int cols, int pixel_format, unsigned char **out, size_t *len,
                  xt_msg *msg);

#endif /* XT_SERVER_H */
