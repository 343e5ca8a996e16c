/* The frame engine (engine.c): the render workers and their jobs, and the pacer's entry points.
 * Finished frames go into the ring (srv_ring.h, ring.c); nothing here knows the stream: readers
 * register on the ring. */
#ifndef XT_SRV_ENGINE_H
#define XT_SRV_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "srv_config.h"
#include "srv_motion.h"
#include "srv_ring.h"
#include "xt_acq.h"
#include "xt_chain.h"
#include "xt_err.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

typedef struct xt_server xt_server; /* xt_server.h */

/* A synchronous request to a render worker (POST /v1/render, adding a model). */
typedef struct xt_call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, rc;
  xt_msg msg;
  /* render */
  xt_geometry geom;
  float *lineint;     /* rows*cols, filled by the worker */
  double render_s;
  xt_acq_frame frame; /* the render's record (its geometry and times) */
  /* add model */
  const xt_model *model;
  /* warm-up: also the imaging chain, with these parameters */
  int chain;
  int plane; /* whose chain (w->rnd or rnd_b) */
  xt_chain_params chain_prm;
} xt_call;

#define XT_SRV_MAX_INSTR XT_SRV_MAX_MODELS /* instruments (instr.c) */
#define XT_SRV_MAX_REGIONS 8 /* contrast regions (contrast.c) */

enum { XT_JOB_FRAME = 1, XT_JOB_RENDER = 2, XT_JOB_ADD_MODEL = 3, XT_JOB_WARMUP = 4 };

typedef struct xt_job {
  int kind;
  /* frame: the plane's exposure as the pacer latched it (setting, run, frame number, the times
   * known before the render: xt_acq_plane_latch); the worker adds its hooks */
  xt_acq_request req;
  int lockstep;
  /* faults injected (fault.c) latched with the exposure: its fault_flags, drop it, hold it back */
  uint32_t fault_flags;
  int fault_drop;
  uint64_t fault_late_ns;
  /* instruments (instr.c): each one's shape version latched with the exposure */
  int nshape;
  uint64_t shape_v[XT_SRV_MAX_INSTR];
  /* contrast (contrast.c): every region's iodine at the exposure's time, the state's number, the
   * largest concentration (mg I/mL) */
  int niodine;
  xt_acq_iodine iodine[XT_SRV_MAX_REGIONS];
  uint32_t contrast_seq;
  float iodine_max;
  /* motion (motion.c): the transforms and periodic motions latched with the exposure */
  xt_srv_motion mot;
  /* render / add model */
  xt_call *call;
} xt_job;

#define XT_QUEUE 32
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
  /* The acquisition layer's renderer on proj: the imaging chain made on first use, remade when
   * rnd.models (the models on this worker's projector) grows; reset at a new run. */
  xt_acq_renderer rnd;
  /* Plane B's renderer on the same projector (a biplane system): its own chain, so that the two
   * planes' lag, temporal filters and DSA masks never mix; its model count follows rnd's. */
  xt_acq_renderer rnd_b;
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
  /* Instruments (instr.c): this worker's copies of the shapes its projector renders, their
   * versions, and the versions the projector holds (both renderers share it). */
  double *shape_pts[XT_SRV_MAX_INSTR];
  int shape_n[XT_SRV_MAX_INSTR];
  uint64_t shape_have[XT_SRV_MAX_INSTR];
  xt_acq_shape_cache shape_cache;
  /* Motion (motion.c): the exposure's model transforms, sample-major (blur) */
  xt_acq_xform xf[XT_SRV_MAX_BLUR * XT_SRV_WORKER_MODELS];
} xt_worker;

/* Threads of each stream worker's CPU projector and chain stages: --threads, split between the
 * workers (at least 1 each) when the CPU backend has several (--devices N). */
int xt_engine_proj_threads(const xt_server *s);
int xt_engine_start(xt_server *s, xt_msg *msg);
void xt_engine_stop(xt_server *s);
/* The frame ring, after xt_engine_stop and xt_ws_destroy: the stream's sender threads and its
 * clients' close callbacks (and the study writer) still hand frames back to it until then. */
void xt_engine_free(xt_server *s);
/* Runs a call on a worker and waits for it. */
int xt_engine_call(xt_server *s, int kind, int worker, xt_call *c); /* worker -1: any */
/* Lockstep: latches the pose now and queues one frame; *counter gets its frame counter. */
int xt_engine_trigger(xt_server *s, uint64_t *counter, xt_msg *msg);
/* Renders (and converts) one frame of a plane's `mode` on every worker (its chain on the worker its
 * chain frames render on) and discards it, so that the first
 * paced frame of a mode pays no one-off costs (CUDA module load, pinned scratch, buffers). */
void xt_engine_warmup_plane(xt_server *s, int plane, const xt_detector_mode *mode);

/* Wakes the pacer after a state change (caller holds st_mu). */
void xt_engine_kick(xt_server *s);
/* The same under st_mu (no wake-up lost between the pacer's check and its wait): the stream calls
 * it when its clients caught up, which the virtual clock's pacer waits for. */
void xt_engine_wake(xt_server *s);

#endif /* XT_SRV_ENGINE_H */
