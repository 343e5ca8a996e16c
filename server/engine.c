/* The frame engine: a pacer that stamps exposures at absolute deadlines on CLOCK_MONOTONIC, one
 * render worker per device that turns each exposure into a finished frame ahead of the send, and
 * the locked ring the WebSocket thread sends from.
 *
 * Free run: exposure k of a run is due at t0 + k*T. At each deadline the pacer latches the latest
 * pose (and its sequence number), gives the exposure the next frame counter and queues it on a
 * worker. A worker that is still busy when the next exposure comes gets the newer one in place
 * of any exposure still waiting (latest wins: the clock never slows; the skipped counter shows as
 * a gap). A pacer that wakes more than a period late (a stopped process) skips the missed
 * deadlines and counts them; it never bunches frames to catch up.
 *
 * Lockstep: each trigger latches the pose and queues one exposure; none are ever replaced.
 *
 * Which worker: frames through the imaging chain and lockstep frames all render on worker 0, in
 * order (the chain's lag, temporal filter and dose-rate loop are sequential; every trigger is
 * answered, and the stream sends in counter order: pick_worker_locked); free-run mono frames go
 * round robin over all workers.
 *
 * POST /v1/render runs on a worker of its own (its thread, its projector), never on a stream
 * worker: a render of a large mode cannot hold a paced exposure back. Its projector gets the
 * server's models on demand, before each render (on CUDA the first REST render uploads them: a
 * second copy on device 0, made only when REST renders are used; docs/server.md). Every worker
 * measures a frame's Gaussian-mixture work before rendering it (budget.c).
 *
 * Lock order: st_mu, then a worker's mu, then ring.mu, then metrics.mu; plane.mu (the acquisition
 * layer's, acq/xt_acq.h) is taken alone, never with another of these held. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "srv_budget.h"
#include "srv_clock.h"
#include "srv_device.h"
#include "srv_engine.h"
#include "srv_contrast.h"
#include "srv_instr.h"
#include "srv_motion.h"
#include "srv_scenario.h"
#include "srv_session.h"
#include "srv_study.h"
#include "srv_metrics.h"
#include "xt_record.h"
#include "xt_server.h"
#include "xt_stream.h"

/* ---- workers ------------------------------------------------------------------------------ */

static void call_finish(xt_call *c, int rc) {
  pthread_mutex_lock(&c->mu);
  c->rc = rc;
  c->done = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int ensure_scratch(xt_worker *w, size_t n) {
  if (w->lineint_cap >= n) return 0;
  float *p = realloc(w->lineint, n * sizeof *p);
  if (!p) return XT_ENOMEM;
  w->lineint = p;
  w->lineint_cap = n;
  return 0;
}

/* The line integral -> uint16 conversion (one exp() a pixel: ~3 ms for 1024^2 on one core, most
 * of a GPU frame's render time) is split over the worker and its helper threads. Each slice goes
 * through xt_intensity_u16, so the pixels are exactly those of a one-thread conversion. */
static void convert_slice(const float *src, uint16_t *dst, size_t n, int part, int parts) {
  size_t chunk = ((n + (size_t)parts - 1) / (size_t)parts + 63) & ~(size_t)63;
  size_t a = (size_t)part * chunk, b = a + chunk < n ? a + chunk : n;
  if (a < b) xt_intensity_u16(src + a, b - a, dst + a);
}

static void *helper_main(void *arg) {
  xt_worker *w = arg;
  pthread_mutex_lock(&w->hmu);
  int part = ++w->hjoined; /* 1..nhelp; the worker takes part 0 */
  uint64_t seen = 0;
  for (;;) {
    while (!w->hstop && w->hgen == seen) pthread_cond_wait(&w->hcv, &w->hmu);
    if (w->hstop) break;
    seen = w->hgen;
    const float *src = w->hsrc;
    uint16_t *dst = w->hdst;
    size_t n = w->hn;
    pthread_mutex_unlock(&w->hmu);
    convert_slice(src, dst, n, part, w->nhelp + 1);
    pthread_mutex_lock(&w->hmu);
    if (--w->hleft == 0) pthread_cond_signal(&w->hdone);
  }
  pthread_mutex_unlock(&w->hmu);
  return NULL;
}

static void convert_u16(xt_worker *w, const float *src, uint16_t *dst, size_t n) {
  if (w->nhelp == 0 || n < 65536) {
    xt_intensity_u16(src, n, dst);
    return;
  }
  pthread_mutex_lock(&w->hmu);
  w->hsrc = src;
  w->hdst = dst;
  w->hn = n;
  w->hleft = w->nhelp;
  w->hgen++;
  pthread_cond_broadcast(&w->hcv);
  pthread_mutex_unlock(&w->hmu);
  convert_slice(src, dst, n, 0, w->nhelp + 1);
  pthread_mutex_lock(&w->hmu);
  while (w->hleft) pthread_cond_wait(&w->hdone, &w->hmu);
  pthread_mutex_unlock(&w->hmu);
}

static void helpers_start(xt_server *s, xt_worker *w) {
  int t = s->cfg.convert_threads;
  if (t <= 0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    t = (int)(ncpu / (2 * (long)s->nworkers));
    if (t > 8) t = 8;
  }
  if (t < 1) t = 1;
  if (t > XT_SRV_MAX_HELPERS + 1) t = XT_SRV_MAX_HELPERS + 1;
  pthread_mutex_init(&w->hmu, NULL);
  pthread_cond_init(&w->hcv, NULL);
  pthread_cond_init(&w->hdone, NULL);
  w->nhelp = 0;
  for (int i = 0; i < t - 1; i++) {
    if (pthread_create(&w->help[i], NULL, helper_main, w)) break; /* fewer helpers is fine */
    w->nhelp++;
  }
}

static void helpers_stop(xt_worker *w) {
  pthread_mutex_lock(&w->hmu);
  w->hstop = 1;
  pthread_cond_broadcast(&w->hcv);
  pthread_mutex_unlock(&w->hmu);
  for (int i = 0; i < w->nhelp; i++) pthread_join(w->help[i], NULL);
  w->nhelp = 0;
  pthread_cond_destroy(&w->hdone);
  pthread_cond_destroy(&w->hcv);
  pthread_mutex_destroy(&w->hmu);
}

/* A finished frame into the ring, its times into the metrics (convert_s < 0: no conversion ran). */
static void publish(xt_server *s, xt_frame *f, const xt_job *j, uint64_t t0, uint64_t t1, double convert_s) {
  f->lockstep = j->lockstep;
  f->plane = j->req.plane;
  xt_ring_push(&s->ring, f);
  const uint64_t tp = atomic_load(&s->ring.t_push_ns);
  pthread_mutex_lock(&s->metrics.mu);
  s->metrics.frames_rendered++;
  s->metrics.frames_published++;
  xt_hist_add(&s->metrics.render, (double)(t1 - t0) * 1e-9);
  if (tp >= t1) xt_hist_add(&s->metrics.publish, (double)(tp - t1) * 1e-9);
  if (convert_s >= 0) xt_hist_add(&s->metrics.convert, convert_s);
  pthread_mutex_unlock(&s->metrics.mu);
  xt_ring_notify(&s->ring);
}

/* A message's header from the frame record (output/'s one stream header encoder). */
static void frame_header(const xt_job *j, const xt_frame_fields *ff, int kind, int rows, int cols, int pixfmt,
                         size_t payload, uint64_t t_done, xt_stream_header *h) {
  /* on the virtual clock a render takes no time: the clock stands still until it is done and sent */
  if (xt_dev_clock_is_virtual()) t_done = xt_dev_now_ns();
  const xt_stream_delivery d = {kind, rows, cols, pixfmt, payload, j->lockstep ? XT_STREAM_FLAG_LOCKSTEP : 0u, t_done};
  xt_stream_header_encode(ff, &d, h);
  h->contrast_seq = j->contrast_seq;
  h->iodine_mg_ml_max = j->iodine_max;
}

/* The acquisition layer's hooks: the work budgets before any render work, and the frame's pixels
 * straight into a ring frame (chain) or the worker's line-integral scratch (mono). */
typedef struct frame_ctx {
  xt_worker *w;
  xt_frame *f;     /* the ring frame taken for a chain frame */
  xt_call *call;   /* POST /v1/render's call */
} frame_ctx;

static int frame_admit(void *ctx, const xt_geometry *g, xt_msg *msg) {
  return xt_budget_frame(((frame_ctx *)ctx)->w, g, msg);
}

/* Raw and processed, each a message of its own in one ring frame; on a GPU the chain's one copy-out
 * lands there, already uint16 (no conversion here). */
static int chain_buffers(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  frame_ctx *c = ctx;
  const size_t pay = (size_t)fr->raw.cols * fr->raw.rows * 2, len = XT_STREAM_HEADER_SIZE + pay;
  if (!(c->f = xt_frame_get2(&c->w->srv->ring, len, len))) return xt_fail(msg, XT_ENOMEM, "out of memory");
  fr->raw.data = c->f->msg + XT_STREAM_HEADER_SIZE;
  fr->proc.data = c->f->msg2 + XT_STREAM_HEADER_SIZE;
  return 0;
}

static int lineint_buffers(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  xt_worker *w = ((frame_ctx *)ctx)->w;
  int rc = ensure_scratch(w, (size_t)fr->lineint.rows * (size_t)fr->lineint.cols);
  if (rc) return xt_fail(msg, rc, "out of memory");
  fr->lineint.data = w->lineint;
  return 0;
}

/* The renderer of a plane's frames on w: plane B's shares the projector and its models (counted by
 * rnd, which adds them). */
static xt_acq_renderer *plane_renderer(xt_worker *w, int plane) {
  if (plane == 0) return &w->rnd;
  w->rnd_b.models = w->rnd.models;
  return &w->rnd_b;
}

/* POST /v1/render's frame: one mono exposure outside any run (no plane: no loop, no totals), its
 * line integrals straight into the caller's buffer, its record kept for the reply's geometry. */
static int call_lineint(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  fr->lineint.data = ((frame_ctx *)ctx)->call->lineint;
  return 0;
}

static int render_call(xt_worker *w, xt_call *c) {
  frame_ctx fc = {w, NULL, c};
  xt_acq_request q;
  memset(&q, 0, sizeof q);
  /* the instruments as they are now */
  xt_job now;
  memset(&now, 0, sizeof now);
  pthread_mutex_lock(&w->srv->st_mu);
  xt_srv_instr_latch_locked(w->srv, &now);
  xt_srv_contrast_latch_locked(w->srv, &now, xt_dev_now_ns());
  now.mot = w->srv->motion;
  now.req.t_exposure_ns = xt_dev_now_ns();
  pthread_mutex_unlock(&w->srv->st_mu);
  xt_srv_motion_apply(w->srv, w, &now); /* the models where they are now */
  q.xforms = now.req.xforms;
  q.nxforms = now.req.nxforms;
  q.blur_samples = 1;
  q.motion = now.req.motion;
  xt_acq_shape shapes[XT_SRV_MAX_INSTR];
  xt_srv_instr_shapes(w->srv, w, &now, shapes, &q.nshapes);
  q.shapes = shapes;
  q.iodine = now.iodine;
  q.niodine = now.niodine;
  q.geom = &c->geom;
  q.want = XT_ACQ_WANT_LINEINT;
  q.admit = frame_admit;
  q.buffers = call_lineint;
  q.ctx = &fc;
  return xt_acq_expose(NULL, &w->rnd, &q, &c->frame, &c->msg);
}

static void frame_failed(xt_server *s, const xt_job *j, const xt_msg *msg) {
  pthread_mutex_lock(&s->metrics.mu);
  s->metrics.render_errors++;
  pthread_mutex_unlock(&s->metrics.mu);
  if (s->cfg.verbose) fprintf(stderr, "xtwin-server: frame %llu: %s\n", (unsigned long long)j->req.counter, msg->text);
}

/* A frame through the imaging chain (the exposure, the loop and the run's dose: the acquisition
 * layer's, on the server's plane); its record fills both messages' headers. */
static void render_chain_frame(xt_worker *w, const xt_job *j) {
  xt_server *s = w->srv;
  xt_msg msg;
  frame_ctx fc = {w, NULL, NULL};
  xt_acq_request q = j->req;
  xt_acq_shape shapes[XT_SRV_MAX_INSTR];
  xt_srv_instr_shapes(s, w, j, shapes, &q.nshapes);
  q.shapes = shapes;
  q.iodine = j->iodine;
  q.niodine = j->niodine;
  q.want = XT_ACQ_WANT_CHAIN;
  q.admit = frame_admit;
  q.buffers = chain_buffers;
  q.ctx = &fc;
  /* a processed frame nobody reads stays on the GPU (a reader that comes now waits for the next) */
  const int unread = !s->study && atomic_load(&s->processed_readers) == 0;
  if (unread) q.flags |= XT_ACQ_PROC_UNREAD;
  xt_acq_frame fr;
  if (xt_acq_expose(&s->planes[j->req.plane], plane_renderer(w, j->req.plane), &q, &fr, &msg)) {
    if (fc.f) xt_frame_unref(&s->ring, fc.f);
    frame_failed(s, j, &msg);
    return;
  }
  xt_frame *f = fc.f;
  f->proc_ok = !unread;
  /* injected faults (fault.c): an exposure made and not published, or published late */
  uint64_t t_done = fr.t_done_ns;
  uint32_t faults = 0;
  if (xt_srv_fault_deliver(s, j, 1, &t_done, &faults)) {
    xt_frame_unref(&s->ring, f);
    return;
  }
  const int rows = fr.raw.rows, cols = fr.raw.cols;
  const size_t pay = (size_t)cols * rows * 2;
  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  xt_stream_header h;
  frame_header(j, &ff, XT_STREAM_KIND_RAW, rows, cols, XT_STREAM_PIX_U16, pay, t_done, &h);
  h.fault_flags = faults;
  memcpy(f->msg, &h, sizeof h);
  frame_header(j, &ff, XT_STREAM_KIND_PROCESSED, rows, cols, XT_STREAM_PIX_U16, pay, t_done, &h);
  h.fault_flags = faults;
  memcpy(f->msg2, &h, sizeof h);
  if (s->study) xt_srv_study_frame(s->study, &fr); /* a copy queued, or dropped: never a wait */
  publish(s, f, j, fr.t_render_ns, fr.t_done_ns, -1);
}

static void render_frame(xt_worker *w, const xt_job *j) {
  xt_server *s = w->srv;
  xt_msg msg;
  if (s->cfg.stream_spin_us > 0) xt_ring_expect(&s->ring); /* a frame is on its way (--stream-spin-us) */
  if (j->req.chain && !s->cfg.synthetic) {
    render_chain_frame(w, j);
    return;
  }
  frame_ctx fc = {w, NULL, NULL};
  xt_acq_request q = j->req;
  xt_acq_shape shapes[XT_SRV_MAX_INSTR];
  xt_srv_instr_shapes(s, w, j, shapes, &q.nshapes);
  q.shapes = shapes;
  q.iodine = j->iodine;
  q.niodine = j->niodine;
  q.chain = 0; /* mono line integrals (a synthetic frame of a chain acquisition too) */
  if (s->cfg.synthetic) q.flags = XT_ACQ_NO_RENDER; /* transport benchmarks: no render, no budget */
  else {
    q.want = XT_ACQ_WANT_LINEINT;
    q.admit = frame_admit;
    q.buffers = lineint_buffers;
    q.ctx = &fc;
  }
  xt_acq_frame fr;
  const xt_detector_mode *mode = q.mode;
  size_t npx = (size_t)mode->rows * (size_t)mode->cols;
  size_t bpp = q.pixel_format == XT_STREAM_PIX_F32 ? 4 : 2;
  xt_frame *f = NULL;
  int rc = xt_acq_expose(&s->planes[j->req.plane], plane_renderer(w, j->req.plane), &q, &fr, &msg);
  if (!rc && !(f = xt_frame_get(&s->ring, XT_STREAM_HEADER_SIZE + npx * bpp))) rc = xt_fail(&msg, XT_ENOMEM, "out of memory");
  if (rc) {
    frame_failed(s, j, &msg);
    return;
  }
  uint64_t t0 = fr.t_render_ns;
  unsigned char *px = f->msg + XT_STREAM_HEADER_SIZE;
  uint64_t tc = xt_now_ns();
  if (s->cfg.synthetic) memset(px, 0x5a, npx * bpp); /* transport benchmarks: a constant frame */
  else if (bpp == 2) convert_u16(w, w->lineint, (uint16_t *)(void *)px, npx);
  else memcpy(px, w->lineint, npx * 4);
  uint64_t t1 = xt_now_ns();
  /* injected faults (fault.c): an exposure made and not published, or published late */
  uint64_t t_done = t1;
  uint32_t faults = 0;
  if (xt_srv_fault_deliver(s, j, 0, &t_done, &faults)) {
    xt_frame_unref(&s->ring, f);
    return;
  }

  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  xt_stream_header h;
  frame_header(j, &ff, XT_STREAM_KIND_MONO, mode->rows, mode->cols, q.pixel_format, npx * bpp, t_done, &h);
  h.fault_flags = faults;
  memcpy(f->msg, &h, sizeof h);
  publish(s, f, j, t0, t1, bpp == 2 && !s->cfg.synthetic ? (double)(t1 - tc) * 1e-9 : -1);
}

/* One frame rendered, converted and thrown away; the frame pool filled with touched buffers of
 * this size. Renders only on a GPU backend: there the first frame of a size pays the module load
 * and the pinned scratch (tens of ms, seen as skipped exposures); the CPU projector has no such
 * one-off cost worth a full render at start-up. */
static int warmup(xt_worker *w, const xt_geometry *g, xt_msg *msg) {
  xt_server *s = w->srv;
  size_t npx = (size_t)g->mode.rows * (size_t)g->mode.cols;
  size_t len = XT_STREAM_HEADER_SIZE + npx * 4;
  int rc = ensure_scratch(w, npx);
  if (rc) return xt_fail(msg, rc, "warm-up: out of memory");
  if (s->backend != XT_BACKEND_CPU && !s->cfg.synthetic) {
    if ((rc = xt_budget_frame(w, g, msg)) || (rc = xt_proj_render(w->proj, g, w->lineint, msg))) return rc;
  } else
    memset(w->lineint, 0, npx * sizeof *w->lineint);
  xt_frame *fr[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; i < 4; i++)
    if ((fr[i] = xt_frame_get(&s->ring, len))) memset(fr[i]->msg, 0, len); /* fault the pages in now */
  if (fr[0]) convert_u16(w, w->lineint, (uint16_t *)(void *)(fr[0]->msg + XT_STREAM_HEADER_SIZE), npx);
  pthread_mutex_lock(&s->ring.mu);
  for (int i = 0; i < 4; i++) fr[i] = fr[i] ? xt_frame_release_locked(&s->ring, fr[i]) : NULL;
  pthread_mutex_unlock(&s->ring.mu);
  for (int i = 0; i < 4; i++) xt_frame_free(fr[i]);
  return 0;
}

/* The chain's one-off costs (tables, the panel's fixed pattern, device scratch) before the first
 * paced frame; then its lag and temporal states start afresh. */
static int warmup_chain(xt_worker *w, const xt_call *c, xt_msg *msg) {
  int rc = xt_budget_frame(w, &c->geom, msg);
  if (rc) return rc;
  return xt_acq_renderer_warmup(plane_renderer(w, c->plane), &c->chain_prm, &c->geom, msg);
}

/* The REST worker's projector catches up with the server's models (listed models are never
 * removed, so the first rnd.models of them are on it already). Not under models_mu while
 * adding: an upload may take a while, and the list only grows. */
static int rest_models(xt_worker *w, xt_msg *msg) {
  xt_server *s = w->srv;
  const xt_model *add[XT_SRV_MAX_MODELS];
  int n = 0;
  pthread_mutex_lock(&s->models_mu);
  for (int i = w->rnd.models; i < s->nmodels && n < XT_SRV_MAX_MODELS; i++) add[n++] = s->models[i];
  pthread_mutex_unlock(&s->models_mu);
  for (int i = 0; i < n; i++) {
    int rc = xt_acq_renderer_add_model(&w->rnd, add[i], msg);
    if (rc) return rc;
    xt_budget_worker_model(w, add[i]);
  }
  return 0;
}

/* An exposure off the queue (rendered, failed or dropped at shutdown): the virtual clock's pacer
 * waits for none to be left. */
static void frame_done(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  if (s->inflight) s->inflight--;
  pthread_cond_broadcast(&s->st_cv);
  pthread_mutex_unlock(&s->st_mu);
}

void xt_engine_wake(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  pthread_cond_broadcast(&s->st_cv);
  pthread_mutex_unlock(&s->st_mu);
}

static void *worker_main(void *arg) {
  xt_worker *w = arg;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->stop && w->qn == 0) pthread_cond_wait(&w->cv, &w->mu);
    if (w->qn == 0) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    xt_job j = w->q[w->qhead];
    w->qhead = (w->qhead + 1) % XT_QUEUE;
    w->qn--;
    int stopping = w->stop;
    pthread_mutex_unlock(&w->mu);

    if (j.kind == XT_JOB_FRAME) {
      /* logged as it is rendered, not as it was queued: a free-run frame replaced in the queue by a
       * newer one never reaches the dose-rate loop, and must not in the replay either */
      xt_srv_motion_apply(w->srv, w, &j); /* the phases at this exposure's pulse (motion.c) */
      if (!stopping) xt_session_frame(w->srv, &j.req, j.lockstep, j.contrast_seq);
      if (!stopping) render_frame(w, &j);
      frame_done(w->srv);
    } else if (j.kind == XT_JOB_RENDER) {
      xt_call *c = j.call;
      if (stopping) {
        call_finish(c, xt_fail(&c->msg, XT_EBUSY, "server is shutting down"));
        continue;
      }
      uint64_t t0 = xt_now_ns();
      int rc = w->rest ? rest_models(w, &c->msg) : 0;
      if (!rc) rc = render_call(w, c);
      c->render_s = (double)(xt_now_ns() - t0) * 1e-9;
      call_finish(c, rc);
    } else if (j.kind == XT_JOB_WARMUP) {
      xt_call *c = j.call;
      int rc = stopping ? XT_EBUSY : warmup(w, &c->geom, &c->msg);
      if (!rc && c->chain && !w->srv->cfg.synthetic) rc = warmup_chain(w, c, &c->msg);
      call_finish(c, rc);
    } else if (j.kind == XT_JOB_ADD_MODEL) {
      xt_call *c = j.call;
      const int rc = xt_acq_renderer_add_model(&w->rnd, c->model, &c->msg);
      if (!rc) xt_budget_worker_model(w, c->model);
      call_finish(c, rc);
    }
  }
  return NULL;
}

/* Queues a job; a free-run frame replaces a free-run frame still waiting. Caller holds no w->mu. */
static int worker_push(xt_server *s, xt_worker *w, const xt_job *j, int *replaced_out) {
  int rc = 0, replaced = 0;
  pthread_mutex_lock(&w->mu);
  if (w->stop) rc = XT_EBUSY;
  else {
    if (j->kind == XT_JOB_FRAME && !j->lockstep) {
      for (int i = 0; i < w->qn; i++) {
        xt_job *q = &w->q[(w->qhead + i) % XT_QUEUE];
        if (q->kind == XT_JOB_FRAME && !q->lockstep) {
          *q = *j;
          replaced = 1;
          break;
        }
      }
    }
    if (!replaced) {
      if (w->qn == XT_QUEUE) rc = XT_EBUSY;
      else {
        w->q[(w->qhead + w->qn) % XT_QUEUE] = *j;
        w->qn++;
      }
    }
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  if (replaced_out) *replaced_out = replaced;
  if (replaced) {
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.frames_skipped++;
    pthread_mutex_unlock(&s->metrics.mu);
  }
  return rc;
}

/* The worker of a frame or call (caller holds st_mu). A chain frame's states are sequential: the
 * detector's lag, the recursive temporal filter and the DSA mask live in a worker's chain (w->rnd)
 * and carry from one frame to the next, and the plane's dose-rate loop sets frame k's exposure
 * from frame k-1's measurement. So every chain frame of the plane renders on the plane's worker
 * (worker 0), in the order queued; round robin would give frame k the states of frame k-n and
 * expose it before frame k-1 is measured. Lockstep frames too: each trigger must be answered, and
 * the stream sends frames in counter order (a frame older than one already sent is dropped, as a
 * free run's latest-wins allows), so frames finishing out of order on two workers would lose
 * triggers. Free-run mono frames (and synthetic ones: no chain runs) are stateless and go round
 * robin over all workers. */
static xt_worker *pick_worker_locked(xt_server *s, int plane, int chain, int lockstep) {
  /* a plane's sequential frames on its own worker where there are several (plane B on the second
   * GPU), else both planes' on the one, each with its own renderer and chain (w->rnd[plane]) */
  if (lockstep || (chain && !s->cfg.synthetic)) return &s->workers[plane % s->nworkers];
  return &s->workers[s->rr++ % (unsigned)s->nworkers];
}

int xt_engine_call(xt_server *s, int kind, int worker, xt_call *c) {
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->done = 0;
  xt_job j;
  memset(&j, 0, sizeof j);
  j.kind = kind;
  j.call = c;
  xt_worker *w;
  if (kind == XT_JOB_RENDER && s->rest.started) w = &s->rest; /* never a stream worker */
  else {
    if (worker < 0) { /* a call renders line integrals only: stateless, any worker */
      pthread_mutex_lock(&s->st_mu);
      w = pick_worker_locked(s, 0, 0, 0);
      pthread_mutex_unlock(&s->st_mu);
    } else
      w = &s->workers[worker];
  }
  int rc = worker_push(s, w, &j, NULL);
  if (rc) {
    xt_fail(&c->msg, rc, "render queue is full or the server is stopping");
  } else {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    rc = c->rc;
  }
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  return rc;
}

void xt_engine_warmup_plane(xt_server *s, int plane, const xt_detector_mode *mode) {
  xt_call c;
  memset(&c, 0, sizeof c);
  pthread_mutex_lock(&s->st_mu);
  xt_pose pose = s->planes[plane].set.pose;
  c.chain = s->planes[plane].set.chain;
  c.chain_prm = s->planes[plane].set.chain_prm;
  c.plane = plane;
  pthread_mutex_unlock(&s->st_mu);
  if (xt_geom_compute(&pose, mode, &c.geom, &c.msg)) return;
  const int chain = c.chain;
  for (int i = 0; i < s->nworkers; i++) {
    /* a plane's chain frames render on one worker only (pick_worker_locked) */
    c.chain = i == plane % s->nworkers ? chain : 0;
    uint64_t t0 = xt_now_ns();
    int rc = xt_engine_call(s, XT_JOB_WARMUP, i, &c);
    if (s->cfg.verbose)
      fprintf(stderr, "xtwin-server: worker %d warm-up (%s): %.1f ms%s%s\n", i, mode->name,
              (double)(xt_now_ns() - t0) * 1e-6, rc ? ", " : "", rc ? c.msg.text : "");
  }
}

/* ---- the pacer ---------------------------------------------------------------------------- */

/* Where an exposure falls in the pacer's pulse cycles (docs/biplane.md): the header's timing, cycle
 * and the cycle's start. */
typedef struct xt_slot_time {
  int timing;
  uint64_t cycle, t_cycle_ns;
} xt_slot_time;

/* Caller holds st_mu: the plane's next exposure, latched (its setting, run and frame number) and
 * queued; the plane's counter moves only when it was queued. */
static int expose_locked(xt_server *s, int pl, uint64_t t_sched, uint64_t t_exp, uint64_t period_ns, int lockstep,
                         const xt_slot_time *st, uint64_t *counter) {
  xt_job j;
  memset(&j, 0, sizeof j);
  j.kind = XT_JOB_FRAME;
  j.lockstep = lockstep;
  xt_acq_plane_latch(&s->planes[pl], &j.req);
  j.req.t_sched_ns = t_sched;
  j.req.t_exposure_ns = t_exp;
  j.req.period_ns = period_ns;
  j.req.plane = pl;
  if (st) {
    j.req.timing = st->timing;
    j.req.cycle = st->cycle;
    j.req.t_cycle_ns = st->t_cycle_ns;
  }
  xt_srv_fault_latch_locked(s, &j, t_exp); /* the faults of this exposure's moment (fault.c) */
  xt_srv_instr_latch_locked(s, &j);        /* the instruments' shapes of this moment (instr.c) */
  xt_srv_contrast_latch_locked(s, &j, t_exp); /* every region's iodine at the exposure (contrast.c) */
  j.mot = s->motion;                       /* the models' transforms and motions (motion.c) */
  xt_worker *w = pick_worker_locked(s, pl, j.req.chain, lockstep);
  int replaced = 0;
  int rc = worker_push(s, w, &j, &replaced);
  if (!rc) {
    if (counter) *counter = j.req.counter;
    xt_acq_plane_advance(&s->planes[pl]);
    xt_dev_frame(&s->devs[pl], j.req.counter); /* the image the last image hold will show */
    if (!replaced) s->inflight++; /* a replaced job hands its place (and its count) to this one */
  }
  return rc;
}

void xt_engine_kick(xt_server *s) { pthread_cond_broadcast(&s->st_cv); }

/* Caller holds st_mu: plane p exposes through the API's switch (the acquisition started). */
static int api_exposing_locked(const xt_server *s, int p) {
  return s->devs[p].state == XT_DEV_EXPOSING && s->devs[p].sw == XT_DEV_SW_API;
}

int xt_engine_trigger(xt_server *s, uint64_t *counter, xt_msg *msg) {
  int rc = 0;
  pthread_mutex_lock(&s->st_mu);
  if (!s->run.lockstep) rc = xt_fail(msg, XT_EBUSY, "trigger needs run_mode lockstep (the acquisition is free-running)");
  else if (!s->run.running) rc = xt_fail(msg, XT_EBUSY, "acquisition is stopped: POST /v1/acquisition/start first");
  else {
    /* one trigger, one cycle: every plane the API's switch exposes, at the same instant */
    uint64_t t = xt_dev_now_ns();
    int n = 0;
    for (int p = 0; p < s->nplanes; p++) n += api_exposing_locked(s, p);
    const xt_slot_time st = {n > 1 ? XT_STREAM_TIMING_SIMULTANEOUS : XT_STREAM_TIMING_SINGLE, ++s->cycles, t};
    int first = 1;
    for (int p = 0; p < s->nplanes && !rc; p++) {
      if (!api_exposing_locked(s, p)) continue;
      rc = expose_locked(s, p, t, t, 0, 1, &st, first ? counter : NULL);
      first = 0;
    }
    if (rc) xt_fail(msg, rc, "render queue is full (%d triggers pending)", XT_QUEUE);
    xt_session_command(s, "trigger", "api", NULL, rc, rc ? msg->text : NULL);
  }
  pthread_mutex_unlock(&s->st_mu);
  return rc;
}

static struct timespec ts_of(uint64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  return t;
}

/* Caller holds st_mu: until the device clock reaches t (a device deadline) or anything changes. The
 * virtual clock jumps there once every exposure is rendered and sent, as the pacer's own deadlines. */
static void sleep_until_locked(xt_server *s, uint64_t t) {
  if (xt_dev_clock_is_virtual()) {
    if (s->inflight == 0 && atomic_load(&s->ws_min_pub) >= xt_ring_latest_pub(&s->ring)) xt_dev_clock_advance(t);
    else pthread_cond_wait(&s->st_cv, &s->st_mu);
    return;
  }
  struct timespec ts = ts_of(t);
  pthread_cond_timedwait(&s->st_cv, &s->st_mu, &ts);
}

/* Caller holds st_mu: the scenario's events due before the plane's next exposure and by device time
 * t, in the file's order, each applied through the API's own operation (s->scenario_hook, which
 * takes st_mu: let go meanwhile; a scenario set meanwhile is looked up afresh). 1 when any was. */
static int scenario_step_locked(xt_server *s, uint64_t t) {
  int any = 0;
  xt_scn_event *e;
  while (s->scenario_hook && (e = xt_scenario_due(&s->scn, s->planes[0].next_counter, t))) {
    e->done = 1;
    s->scn.applied++;
    char what[16], name[64];
    snprintf(what, sizeof what, "%s", e->what);
    snprintf(name, sizeof name, "%s", e->name);
    const int index = e->index;
    json_t *body = json_incref(e->body);
    pthread_mutex_unlock(&s->st_mu);
    xt_msg m = {{0}};
    const int rc = s->scenario_hook(s, what, name, body, &m);
    json_decref(body);
    if (rc) fprintf(stderr, "xtwin-server: scenario event %d (%s %s): %s\n", index, what, name, m.text);
    pthread_mutex_lock(&s->st_mu);
    any = 1;
  }
  return any;
}

/* The earlier of two device times, 0 meaning none. */
static uint64_t earliest(uint64_t a, uint64_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* The planes the pacer exposes now and how (caller holds st_mu): a plane is paced while its device
 * exposes through a switch held, or through the API's switch in free run (in lockstep triggers
 * expose). The lead, the first such plane, sets the cycle's rate and anchor as a single plane always
 * did; every paced plane has a slot in each cycle, plane A's first, and with two planes plane B's
 * half a cycle later (interleaved) or with A's (simultaneous). A plane pressed later than the lead
 * waits in the lead's cadence for its own first exposure (start). */
typedef struct cadence {
  int n;                             /* slots in a cycle */
  int plane[XT_SRV_PLANES];          /* each slot's plane */
  uint64_t start[XT_SRV_PLANES];     /* its plane exposes from then on (0: at once) */
  double off[XT_SRV_PLANES];         /* the slot's offset in the cycle, as a fraction of the period */
  int timing;                        /* XT_STREAM_TIMING_* */
  int api;                           /* the lead exposes through the API's switch */
  xt_dev_pace lead;                  /* the lead's pacing */
  uint64_t until;                    /* exposures due before this only (the earliest phase end); 0 open */
  uint64_t t_next;                   /* the earliest device deadline of any plane, 0 none */
} cadence;

static void cadence_locked(const xt_server *s, cadence *c) {
  memset(c, 0, sizeof *c);
  for (int p = 0; p < s->nplanes; p++) {
    xt_dev_pace q;
    xt_dev_pacing(&s->devs[p], &q);
    if (q.t_next_ns && (!c->t_next || q.t_next_ns < c->t_next)) c->t_next = q.t_next_ns;
    if (!q.expose || (q.sw == XT_DEV_SW_API && s->run.lockstep)) continue;
    if (c->n == 0) {
      c->lead = q;
      c->api = q.sw == XT_DEV_SW_API;
    }
    c->plane[c->n] = p;
    c->start[c->n] = q.sw == XT_DEV_SW_API ? 0 : q.t0_ns;
    if (q.until_ns && (!c->until || q.until_ns < c->until)) c->until = q.until_ns;
    c->n++;
  }
  c->timing = c->n > 1 ? s->timing : XT_STREAM_TIMING_SINGLE;
  for (int i = 0; i < c->n; i++) c->off[i] = c->timing == XT_STREAM_TIMING_INTERLEAVED ? (double)i / c->n : 0.0;
}

static void *pacer_main(void *arg) {
  xt_server *s = arg;
  uint64_t last_exposure[XT_SRV_PLANES] = {0}, last_sched = 0, last_period = 0;
  pthread_mutex_lock(&s->st_mu);
  while (!s->stopping) {
    /* The devices' own deadlines first (prepare over, a phase or the series over, the readout
     * over): their events go to the stream once st_mu is released. */
    if (xt_srv_device_advance_locked(s, xt_dev_now_ns())) {
      pthread_mutex_unlock(&s->st_mu);
      xt_ring_notify(&s->ring);
      pthread_mutex_lock(&s->st_mu);
      continue;
    }
    /* Exposures only while a device is exposing: through the API's switch (the acquisition
     * started: free run as it always ran, or lockstep, answered by triggers), or a switch held
     * (free run at the acquisition's rate or the series phase's, from press + prepare + first
     * frame: docs/device.md). */
    cadence c;
    cadence_locked(s, &c);
    /* A scenario's events due by now (at a frame number: before that exposure is latched) */
    if (scenario_step_locked(s, xt_dev_now_ns())) continue;
    if (c.n == 0) {
      memset(last_exposure, 0, sizeof last_exposure);
      const uint64_t wake = earliest(c.t_next, xt_scenario_next_time(&s->scn));
      if (wake) sleep_until_locked(s, wake);
      else pthread_cond_wait(&s->st_cv, &s->st_mu);
      continue;
    }
    /* A run (or a change of its settings): anchor the deadlines. A change keeps the cadence's
     * phase: the next cycle comes one new period after the last one. */
    uint64_t gen = s->acq_gen;
    double T = 1e9 / (c.api || c.lead.fps <= 0 ? s->run.fps : c.lead.fps);
    uint64_t now = xt_dev_now_ns();
    uint64_t t0 = c.api ? now : c.lead.t0_ns;
    if (last_sched && last_period) {
      uint64_t next = last_sched + (uint64_t)llround(T);
      if (c.api ? next > now : last_sched >= c.lead.t0_ns) t0 = next; /* a switch's: within its phase */
    }
    uint64_t cycle = 0;
    for (uint64_t k = 0, i = 0; !s->stopping && s->acq_gen == gen;) {
      const uint64_t tc = t0 + (uint64_t)llround((double)k * T);
      uint64_t due = tc + (uint64_t)llround(c.off[i] * T);
      /* the phase (or the series) ends before this exposure: wait for its end, then the device moves on */
      const int boundary = c.until && due >= c.until;
      if (boundary) due = c.until;
      now = xt_dev_now_ns();
      /* the scenario's events up to this exposure (not past its deadline, however late it is
       * made: the same frames on the real and the virtual clock); then wait for the earlier of
       * the deadline and the scenario's next time */
      if (scenario_step_locked(s, now < due ? now : due)) continue;
      const uint64_t wake = earliest(due, xt_scenario_next_time(&s->scn));
      if (now < wake && xt_dev_clock_is_virtual()) {
        /* Virtual time moves to the deadline once every exposure before it is rendered and every
         * stream client has been sent the newest frame: as fast as that, never dropping a frame. */
        if (s->inflight == 0 && atomic_load(&s->ws_min_pub) >= xt_ring_latest_pub(&s->ring))
          xt_dev_clock_advance(wake);
        else
          pthread_cond_wait(&s->st_cv, &s->st_mu);
        continue;
      }
      if (now < wake) {
        /* --pacer-spin-us: the last stretch polled with st_mu let go, as a sleeping thread's wake-up
         * can come a millisecond late on a host in power saving (exposure jitter p99 0.84 ms on one
         * H100 machine, 0.05 ms on another); a change meanwhile is seen when it is over */
        const uint64_t spin = (uint64_t)s->cfg.pacer_spin_us * 1000u;
        if (spin && wake - now <= spin) {
          pthread_mutex_unlock(&s->st_mu);
          while (xt_dev_now_ns() < wake) xt_cpu_relax();
          pthread_mutex_lock(&s->st_mu);
          continue;
        }
        struct timespec ts = ts_of(spin ? wake - spin : wake);
        pthread_cond_timedwait(&s->st_cv, &s->st_mu, &ts);
        continue; /* re-check the state and the clock */
      }
      if (boundary) break;
      if (i == 0) cycle = ++s->cycles;
      const int pl = c.plane[i];
      if (due >= c.start[i]) { /* a plane pressed after the lead: from its own first exposure on */
        const xt_slot_time st = {c.timing, cycle, tc};
        int rc = expose_locked(s, pl, due, now, (uint64_t)llround(T), 0, &st, NULL);
        uint64_t prev = last_exposure[pl];
        last_exposure[pl] = now;
        pthread_mutex_lock(&s->metrics.mu);
        xt_hist_add(&s->metrics.jitter, (double)(now - due) * 1e-9);
        if (prev) xt_hist_add(&s->metrics.period, (double)(now - prev) * 1e-9);
        if (rc) s->metrics.frames_skipped++;
        pthread_mutex_unlock(&s->metrics.mu);
      }
      last_sched = tc;
      last_period = (uint64_t)llround(T);
      if (++i < (uint64_t)c.n) continue;
      i = 0;
      k++;
      /* More than a period late: skip the cycles already gone, never bunch exposures. */
      uint64_t missed = 0;
      uint64_t next = t0 + (uint64_t)llround((double)k * T);
      if (now > next) {
        uint64_t k2 = (uint64_t)floor((double)(now - t0) / T) + 1;
        missed = (k2 - k) * (uint64_t)c.n;
        k = k2;
      }
      if (missed) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.deadlines_missed += missed;
        pthread_mutex_unlock(&s->metrics.mu);
      }
    }
    cadence_locked(s, &c);
    if (c.n == 0) last_sched = last_period = 0;
  }
  pthread_mutex_unlock(&s->st_mu);
  return NULL;
}

/* ---- start / stop ------------------------------------------------------------------------- */

int xt_engine_proj_threads(const xt_server *s) {
  if (s->backend != XT_BACKEND_CPU || s->nworkers <= 1) return s->cfg.threads;
  long total = s->cfg.threads > 0 ? s->cfg.threads : sysconf(_SC_NPROCESSORS_ONLN);
  long t = total / s->nworkers;
  return t < 1 ? 1 : (int)t;
}

/* POST /v1/render's worker: its own projector (on CUDA on device 0; on the CPU with fewer threads
 * than the stream's, so that a long render leaves the stream's worker a core), no conversion
 * helpers (the handler converts), models added before each render. */
static int rest_start(xt_server *s, xt_msg *msg) {
  xt_worker *w = &s->rest;
  int t = s->cfg.render_threads;
  if (t <= 0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    t = ncpu > 1 ? (int)(ncpu / 2) : 1;
  }
  xt_proj_options o = {s->backend, t, 0};
  int rc = xt_proj_create(&o, &w->proj, msg);
  if (rc) return rc;
  w->srv = s;
  w->index = -1;
  w->rest = 1;
  xt_acq_renderer_init(&w->rnd, w->proj, t);
  w->rnd.shapes = &w->shape_cache;
  if (!(w->bgrid = malloc(xt_budget_grid_cells() * sizeof *w->bgrid)))
    return xt_fail(msg, XT_ENOMEM, "render worker: out of memory");
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->thread, NULL, worker_main, w)) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return xt_fail(msg, XT_EINTERNAL, "cannot start the render worker");
  }
  w->started = 1;
  return 0;
}

/* --fps 0 (the default): a GPU starts at 15 fps; the CPU at the highest of the usual rates at which
 * one frame of every plane takes at most 40 % of the period, timed here with the frame's render
 * (the REST worker's projector: the same model and threads). 40 %: the rest is left for the
 * stream, the chain's cheaper stages and another process on the same cores, so the pacer skips
 * no exposure (issue 27: the advertised 15 fps on two shared cores came out as 6-9). */
static void pick_fps(xt_server *s) {
  static const double rates[] = {15, 12.5, 10, 7.5, 6, 5, 4, 3, 2, 1, 0.5};
  const int nr = (int)(sizeof rates / sizeof rates[0]);
  if (s->backend != XT_BACKEND_CPU || s->cfg.synthetic || s->nmodels == 0) {
    s->run.fps = 15;
    return;
  }
  xt_call c;
  memset(&c, 0, sizeof c);
  pthread_mutex_lock(&s->st_mu);
  xt_pose pose = s->planes[0].set.pose;
  const xt_detector_mode *mode = s->planes[0].set.mode;
  pthread_mutex_unlock(&s->st_mu);
  if (xt_geom_compute(&pose, mode, &c.geom, &c.msg)) return;
  if (!(c.lineint = malloc((size_t)mode->rows * (size_t)mode->cols * sizeof(float)))) return;
  double t_s = 0;
  for (int i = 0; i < 3; i++) { /* the first pays one-off costs; the slower of the next two counts */
    const uint64_t t0 = xt_now_ns();
    if (xt_engine_call(s, XT_JOB_RENDER, -1, &c)) break;
    const double dt = (double)(xt_now_ns() - t0) * 1e-9;
    if (i > 0 && dt > t_s) t_s = dt;
  }
  free(c.lineint);
  if (t_s <= 0) return; /* the render failed: keep 15, the render errors will say why */
  const double need = t_s * s->nplanes / 0.4;
  int k = 0;
  while (k < nr - 1 && need > 1.0 / rates[k]) k++;
  pthread_mutex_lock(&s->st_mu);
  s->run.fps = rates[k];
  pthread_mutex_unlock(&s->st_mu);
  snprintf(s->fps_note, sizeof s->fps_note,
           "CPU: a %s frame takes %.0f ms here, so %g fps (frames in at most 40 %% of the period%s; --fps N to choose)",
           mode->name, t_s * 1e3, rates[k], need > 1.0 / rates[k] ? ", which even the slowest rate exceeds" : "");
}

int xt_engine_start(xt_server *s, xt_msg *msg) {
  xt_budget_resolve(s);
  xt_ring_init(&s->ring);
  s->ring.pin = s->backend == XT_BACKEND_CUDA;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->st_cv, &ca);
  pthread_condattr_destroy(&ca);
  for (int i = 0; i < s->nworkers; i++) {
    xt_worker *w = &s->workers[i];
    w->srv = s;
    w->index = i;
    xt_acq_renderer_init(&w->rnd, w->proj, xt_engine_proj_threads(s)); /* the CPU stages: as the projector */
    xt_acq_renderer_init(&w->rnd_b, w->proj, xt_engine_proj_threads(s));
    w->rnd.shapes = w->rnd_b.shapes = &w->shape_cache; /* one projector: one set of shapes */
    /* the models setup added to every projector before the workers started */
    for (int k = 0; k < s->nmodels; k++) xt_budget_worker_model(w, s->models[k]);
    if (!(w->bgrid = malloc(xt_budget_grid_cells() * sizeof *w->bgrid)))
      return xt_fail(msg, XT_ENOMEM, "render worker: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    helpers_start(s, w);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
      helpers_stop(w);
      return xt_fail(msg, XT_EINTERNAL, "cannot start a render worker");
    }
    w->started = 1;
  }
  int rc = rest_start(s, msg);
  if (rc) return rc;
  /* Before the first deadline: the first paced frame must not pay the one-off costs. */
  for (int p = 0; p < s->nplanes; p++) xt_engine_warmup_plane(s, p, s->planes[p].set.mode);
  if (s->cfg.fps <= 0) pick_fps(s);
  if (pthread_create(&s->pacer, NULL, pacer_main, s)) return xt_fail(msg, XT_EINTERNAL, "cannot start the pacer");
  s->pacer_started = 1;
  return 0;
}

void xt_engine_stop(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->st_cv);
  pthread_mutex_unlock(&s->st_mu);
  if (s->pacer_started) pthread_join(s->pacer, NULL);
  s->pacer_started = 0;
  for (int i = 0; i < s->nworkers; i++) {
    xt_worker *w = &s->workers[i];
    if (!w->started) continue;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    helpers_stop(w);
    w->started = 0;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->lineint);
    w->lineint = NULL;
    xt_acq_renderer_free(&w->rnd);
    xt_acq_renderer_free(&w->rnd_b);
  }
  for (int i = 0; i < s->nworkers; i++) {
    free(s->workers[i].bgrid);
    s->workers[i].bgrid = NULL;
  }
  xt_worker *w = &s->rest;
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->started = 0;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
  }
  if (w->proj) xt_proj_destroy(w->proj);
  w->proj = NULL;
  free(w->bgrid);
  w->bgrid = NULL;
}

void xt_engine_free(xt_server *s) { xt_ring_destroy(&s->ring); }
