/* The run of `xtwin dataset`: per worker (one per device) a render thread and a pool of writer
 * threads, overlapping the GPU with encoding and writing.
 *
 * Each writer owns one shard at a time (a shard is hashed and written in order, so one thread per
 * shard), claimed from the task's list of missing shards shared by all workers. The worker's
 * render thread renders batches for its writers' shards in turn (round robin), so W shards fill
 * at once and the GPU feeds W writers; a batch never crosses a shard and always holds the same
 * frames, whoever renders it. Batch buffers come from a fixed pool: the render thread waits when
 * the writers fall behind, the writers wait when the GPU does, and each wait is counted, so the
 * summary can say which stage limited the run.
 *
 * The first error stops everything: in-flight shards are dropped (nothing of them stays on disk),
 * finished shards and their manifest lines stay. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xt_dataset_internal.h"

#define MAX_WRITERS 64
#define BATCH_BYTES ((size_t)32 << 20)
#define QUEUE_MAX 2 /* rendered batches waiting per shard, so no writer hoards the pool */

typedef struct batch {
  int slot;          /* the writer slot (shard) it belongs to */
  int n;             /* frames (instants: with plane B, each is two views) */
  long long first;   /* frame index of frames' first in index order */
  xt_ds_frame *drawn;  /* the views as sampled: plane A of frames first .. first + n, then plane B's */
  xt_ds_frame *frames; /* the same views sorted by detector mode */
  int *order;        /* order[v]: position in frames of view v of drawn */
  float *buf;        /* (1 + K) regions of cap_px floats: xt_host_alloc'd (pinned on CUDA) */
  int buf_host;      /* buf came from xt_host_alloc (else malloc: the system refused to pin) */
  const float **img; /* per position */
  const float **chan; /* per position, K each */
  uint16_t *u16;     /* chain: raw then processed regions of cap_px each, or NULL */
  const uint16_t **raw, **proc; /* per position (chain) */
  struct batch *next;
} batch;

typedef struct slot {
  long long shard;   /* -1: no shard */
  long long rendered; /* frames of the shard handed to the render thread so far */
  long long frames;  /* frames in the shard */
  batch *head, *tail;
  int queued;
  int in_render;     /* a batch of it is being rendered */
} slot;

struct run;

typedef struct worker {
  struct run *run;
  int index, device;
  pthread_t render_tid;
  pthread_t writer_tid[MAX_WRITERS];
  int nwriters, writers_alive, started_writers, render_started;
  slot slots[MAX_WRITERS];
  int rr; /* round-robin cursor */
  batch *pool, *free_list;
  int nbatches;
  double gpu_busy_s, render_wait_s;
  long long frames_rendered;
  xt_ds_wstats wstats[MAX_WRITERS];
  double writer_wait_s[MAX_WRITERS];
} worker;

typedef struct run {
  const xt_ds_spec *s;
  const xt_ds_scene *sc;
  const xt_ds_out *o;
  const long long *shards;
  long long nshards, next_shard;
  const xt_ds_run_opts *opt;
  int batch_frames;
  size_t cap_px;
  pthread_mutex_t lock; /* everything below, and every worker's slots and pool */
  pthread_cond_t cond;
  int failed;
  int err;
  xt_msg msg;
  long long frames_done, shards_done;
  double bytes_done;
  int nworkers;
  worker *workers;
  /* disk busy: wall time with at least one write in flight */
  pthread_mutex_t disk_lock;
  int disk_inflight;
  double disk_since, disk_busy_s;
  int pin_failed;        /* the system refused page-locked batch buffers: plain memory */
  xt_msg pin_msg;
  int ready;             /* workers whose projectors are set up */
  double t_launch, t_start; /* threads started; every worker ready (the rates' clock) */
} run;

static void set_error(run *r, int err, const xt_msg *m) {
  pthread_mutex_lock(&r->lock);
  if (!r->failed) {
    r->failed = 1;
    r->err = err;
    r->msg = *m;
  }
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
}

static void disk_cb(void *ctx, int in) {
  run *r = ctx;
  pthread_mutex_lock(&r->disk_lock);
  if (in) {
    if (r->disk_inflight++ == 0) r->disk_since = xt__ds_now_s();
  } else if (--r->disk_inflight == 0) {
    r->disk_busy_s += xt__ds_now_s() - r->disk_since;
  }
  pthread_mutex_unlock(&r->disk_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Batches                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void free_pool(run *r, worker *w) {
  for (int i = 0; i < w->nbatches; i++) {
    batch *b = &w->pool[i];
    free(b->drawn);
    free(b->frames);
    free(b->order);
    if (b->buf_host) xt_host_free(r->s->backend, b->buf);
    else free(b->buf);
    free(b->img);
    free(b->chan);
    free(b->u16);
    free(b->raw);
    free(b->proc);
  }
  free(w->pool);
  w->pool = NULL;
  w->nbatches = 0;
}

/* Views per frame: 2 with plane B (both planes of one instant render in the frame's batch). */
static int planes(const xt_ds_spec *s) { return s->plane_b.present ? 2 : 1; }

static int make_pool(run *r, worker *w, int count, xt_msg *msg) {
  const int B = r->batch_frames * planes(r->s), K = r->s->nchannels;
  w->pool = calloc((size_t)count, sizeof *w->pool);
  if (!w->pool) return xt_fail(msg, XT_ENOMEM, "out of memory");
  w->nbatches = count;
  for (int i = 0; i < count; i++) {
    batch *b = &w->pool[i];
    b->drawn = malloc(sizeof *b->drawn * (size_t)B);
    b->frames = malloc(sizeof *b->frames * (size_t)B);
    b->order = malloc(sizeof *b->order * (size_t)B);
    /* The frames land here by DMA and the writers hash and write them from here: on CUDA page-
     * locked (allocated once, for the whole run), so there is no host copy between the two. */
    const size_t bytes = sizeof *b->buf * r->cap_px * (size_t)(1 + K);
    b->buf_host = !r->pin_failed && xt_host_alloc(r->s->backend, bytes, (void **)&b->buf, &r->pin_msg) == 0;
    if (!b->buf_host) {
      r->pin_failed = 1; /* slower (a staged copy per frame), never wrong */
      b->buf = malloc(bytes);
    }
    b->img = malloc(sizeof *b->img * (size_t)B);
    b->chan = malloc(sizeof *b->chan * (size_t)B * (size_t)(K ? K : 1));
    if (r->s->chain.present) { /* the chain's frames are never larger than the render's */
      b->u16 = malloc(sizeof *b->u16 * r->cap_px * 2);
      b->raw = malloc(sizeof *b->raw * (size_t)B);
      b->proc = malloc(sizeof *b->proc * (size_t)B);
      if (!b->u16 || !b->raw || !b->proc) return xt_fail(msg, XT_ENOMEM, "out of memory for the chain's frames");
    }
    if (!b->drawn || !b->frames || !b->order || !b->buf || !b->img || !b->chan)
      return xt_fail(msg, XT_ENOMEM, "out of memory for %d batch buffers of %.0f MB", count,
                     r->cap_px * (1.0 + K) * 4 / 1e6);
    b->next = w->free_list;
    w->free_list = b;
  }
  return 0;
}

/* The label channels of one group of frames, on a thread of their own so that they render while
 * the image does (separate projectors, streams and host copies). */
typedef struct label_job {
  xt_ds_renderer *rd;
  const xt_ds_frame *f;
  int n;
  float *const *chan;
  int rc;
  xt_msg msg;
} label_job;

static void *label_main(void *arg) {
  label_job *j = arg;
  j->rc = xt_ds_render_labels(j->rd, j->f, j->n, j->chan, &j->msg);
  return NULL;
}

/* Samples and renders frames [first, first + n) into b. */
static int render_batch(run *r, worker *w, xt_ds_renderer *rd, batch *b, long long first, int n, xt_msg *msg) {
  const xt_ds_spec *s = r->s;
  const xt_ds_scene *sc = r->sc;
  const int K = s->nchannels;
  int rc;
  b->n = n;
  b->first = first;
  const int nv = n * planes(s);
  for (int i = 0; i < n; i++) {
    if ((rc = xt_ds_sample_frame(s, sc->placement, (const double(*)[3])sc->center, first + i, &b->drawn[i], msg)))
      return rc;
    if (nv > n && (rc = xt_ds_sample_plane_b(s, &b->drawn[i], &b->drawn[n + i], msg))) return rc;
  }
  /* Sorted by mode (stable), so each mode's views, of either plane, render as one batch. */
  int pos = 0;
  for (int m = 0; m < s->nmodes_all; m++)
    for (int v = 0; v < nv; v++) {
      if (b->drawn[v].mode != m) continue;
      b->frames[pos] = b->drawn[v];
      b->order[v] = pos++;
    }
  size_t off = 0, uoff = 0;
  float *chan_base[XT_DS_MAX_CHANNELS];
  for (int g0 = 0; g0 < nv;) {
    int g1 = g0;
    while (g1 < nv && b->frames[g1].mode == b->frames[g0].mode) g1++;
    const size_t px = (size_t)b->frames[g0].geom.mode.rows * b->frames[g0].geom.mode.cols;
    float *img = b->buf + off;
    for (int k = 0; k < K; k++) chan_base[k] = b->buf + (size_t)(1 + k) * r->cap_px + off;
    double t0 = xt__ds_now_s();
    const int want_img = s->write.lineint || s->write.intensity;
    label_job job = {rd, &b->frames[g0], g1 - g0, chan_base, 0, {{0}}};
    pthread_t tid;
    int threaded = K && (want_img || s->chain.present) && pthread_create(&tid, NULL, label_main, &job) == 0;
    if (want_img) rc = xt_ds_render_image(rd, &b->frames[g0], g1 - g0, img, msg);
    int orows = 0, ocols = 0;
    if (s->chain.present) xt_ds_chain_size(s, b->frames[g0].mode, &orows, &ocols);
    const size_t opx = (size_t)orows * ocols;
    if (!rc && s->chain.present)
      rc = xt_ds_render_chain(rd, &b->frames[g0], g1 - g0, b->u16 + uoff, b->u16 + r->cap_px + uoff, msg);
    if (threaded) pthread_join(tid, NULL);
    else if (K && !rc) label_main(&job);
    if (!rc && job.rc) {
      rc = job.rc;
      *msg = job.msg;
    }
    if (rc) return rc;
    w->gpu_busy_s += xt__ds_now_s() - t0;
    for (int j = g0; j < g1; j++) {
      b->img[j] = img + (size_t)(j - g0) * px;
      for (int k = 0; k < K; k++) b->chan[(size_t)j * K + k] = chan_base[k] + (size_t)(j - g0) * px;
      if (s->chain.present) {
        b->raw[j] = b->u16 + uoff + (size_t)(j - g0) * opx;
        b->proc[j] = b->u16 + r->cap_px + uoff + (size_t)(j - g0) * opx;
      }
    }
    off += (size_t)(g1 - g0) * px;
    uoff += (size_t)(g1 - g0) * opx;
    g0 = g1;
  }
  w->frames_rendered += n;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Render thread                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A slot with frames left to render and room in its queue, round robin; -1 if none. */
static int pick_slot(worker *w) {
  for (int t = 0; t < w->nwriters; t++) {
    int i = (w->rr + t) % w->nwriters;
    slot *sl = &w->slots[i];
    if (sl->shard >= 0 && !sl->in_render && sl->rendered < sl->frames && sl->queued < QUEUE_MAX) {
      w->rr = (i + 1) % w->nwriters;
      return i;
    }
  }
  return -1;
}

static void *render_main(void *arg) {
  worker *w = arg;
  run *r = w->run;
  const xt_ds_spec *s = r->s;
  xt_msg msg;
  xt_ds_renderer *rd = NULL;
  int rc = xt_ds_renderer_create(r->sc, s->backend, w->device, r->opt->threads, &rd, &msg);
  if (rc) {
    if (s->backend == XT_BACKEND_CUDA) {
      xt_msg m2;
      xt_fail(&m2, rc, "device %d: %s", w->device, msg.text);
      msg = m2;
    }
    set_error(r, rc, &msg);
    return NULL;
  }
  /* The clock of the rates starts when every worker is ready: set-up (uploads, scratch) is a fixed
   * cost, reported apart. */
  pthread_mutex_lock(&r->lock);
  if (++r->ready == r->nworkers) {
    r->t_start = xt__ds_now_s();
    pthread_cond_broadcast(&r->cond);
  }
  while (!r->failed && r->ready < r->nworkers) pthread_cond_wait(&r->cond, &r->lock);
  pthread_mutex_unlock(&r->lock);
  if (r->opt->render_only) {
    /* Measurement: the task's shards in order, rendered and dropped. */
    batch *b = w->free_list;
    for (;;) {
      pthread_mutex_lock(&r->lock);
      long long i = r->failed ? r->nshards : r->next_shard++;
      pthread_mutex_unlock(&r->lock);
      if (i >= r->nshards) break;
      long long shard = r->shards[i], first = shard * s->shard_frames;
      long long nf = s->frames - first < s->shard_frames ? s->frames - first : s->shard_frames;
      for (long long k = 0; k < nf; k += r->batch_frames) {
        int n = (int)(nf - k < r->batch_frames ? nf - k : r->batch_frames);
        if ((rc = render_batch(r, w, rd, b, first + k, n, &msg))) {
          set_error(r, rc, &msg);
          goto done;
        }
        pthread_mutex_lock(&r->lock);
        r->frames_done += n;
        pthread_mutex_unlock(&r->lock);
      }
      pthread_mutex_lock(&r->lock);
      r->shards_done++;
      pthread_mutex_unlock(&r->lock);
    }
    goto done;
  }
  for (;;) {
    pthread_mutex_lock(&r->lock);
    int si = -1;
    double t0 = xt__ds_now_s();
    while (!r->failed && w->writers_alive > 0 && (!w->free_list || (si = pick_slot(w)) < 0))
      pthread_cond_wait(&r->cond, &r->lock);
    w->render_wait_s += xt__ds_now_s() - t0; /* for a free buffer (writers behind) or a shard to render */
    if (r->failed || si < 0) {
      pthread_mutex_unlock(&r->lock);
      break;
    }
    slot *sl = &w->slots[si];
    batch *b = w->free_list;
    w->free_list = b->next;
    long long first = sl->shard * s->shard_frames + sl->rendered;
    int n = (int)(sl->frames - sl->rendered < r->batch_frames ? sl->frames - sl->rendered : r->batch_frames);
    sl->rendered += n;
    sl->in_render = 1;
    b->slot = si;
    pthread_mutex_unlock(&r->lock);

    rc = render_batch(r, w, rd, b, first, n, &msg);

    pthread_mutex_lock(&r->lock);
    sl->in_render = 0;
    if (rc) {
      b->next = w->free_list;
      w->free_list = b;
      pthread_mutex_unlock(&r->lock);
      set_error(r, rc, &msg);
      break;
    }
    b->next = NULL;
    if (sl->tail) sl->tail->next = b;
    else sl->head = b;
    sl->tail = b;
    sl->queued++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
  }
done:
  xt_ds_renderer_free(rd);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Writer threads                                                                             */
/* ------------------------------------------------------------------------------------------ */

typedef struct writer_arg {
  worker *w;
  int index;
} writer_arg;

static void *writer_main(void *arg) {
  writer_arg *wa = arg;
  worker *w = wa->w;
  run *r = w->run;
  const xt_ds_spec *s = r->s;
  const int me = wa->index, K = s->nchannels;
  slot *sl = &w->slots[me];
  xt_ds_wstats *st = &w->wstats[me];
  xt_ds_encoder *enc = NULL;
  xt_ds_shard_writer *sw = NULL;
  xt_msg msg;
  int rc = xt_ds_encoder_create(r->sc, &enc, &msg);
  if (rc) set_error(r, rc, &msg);
  while (!rc) {
    pthread_mutex_lock(&r->lock);
    long long i = r->failed ? r->nshards : r->next_shard++;
    pthread_mutex_unlock(&r->lock);
    if (i >= r->nshards) break;
    const long long shard = r->shards[i], first = shard * s->shard_frames;
    const long long nf = s->frames - first < s->shard_frames ? s->frames - first : s->shard_frames;
    if ((rc = xt_ds_shard_open(s, r->o, shard, &sw, &msg))) {
      set_error(r, rc, &msg);
      break;
    }
    pthread_mutex_lock(&r->lock);
    sl->shard = shard;
    sl->frames = nf;
    sl->rendered = 0;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    for (long long done = 0; done < nf && !rc;) {
      pthread_mutex_lock(&r->lock);
      double t0 = xt__ds_now_s();
      while (!r->failed && !sl->head) pthread_cond_wait(&r->cond, &r->lock);
      w->writer_wait_s[me] += xt__ds_now_s() - t0;
      if (r->failed) {
        pthread_mutex_unlock(&r->lock);
        rc = XT_EINTERNAL; /* someone else's error; theirs is reported */
        break;
      }
      batch *b = sl->head;
      sl->head = b->next;
      if (!sl->head) sl->tail = NULL;
      sl->queued--;
      pthread_mutex_unlock(&r->lock);
      long long bytes0 = st->bytes;
      for (int j = 0; j < b->n && !rc; j++) {
        xt_ds_frame_data fd[2]; /* plane A, plane B of the instant */
        for (int pl = 0; pl < planes(s); pl++) {
          const int p = b->order[pl * b->n + j];
          fd[pl].frame = &b->frames[p];
          fd[pl].img = b->img[p];
          for (int k = 0; k < K; k++) fd[pl].chan[k] = b->chan[(size_t)p * K + k];
          fd[pl].raw = b->raw ? b->raw[p] : NULL;
          fd[pl].proc = b->proc ? b->proc[p] : NULL;
          fd[pl].b = NULL;
        }
        if (planes(s) > 1) fd[0].b = &fd[1];
        if ((rc = xt_ds_shard_add(sw, enc, &fd[0], st, disk_cb, r, &msg))) set_error(r, rc, &msg);
      }
      pthread_mutex_lock(&r->lock);
      b->next = w->free_list;
      w->free_list = b;
      if (!rc) {
        r->frames_done += b->n;
        r->bytes_done += (double)(st->bytes - bytes0);
        done += b->n;
      }
      pthread_cond_broadcast(&r->cond);
      pthread_mutex_unlock(&r->lock);
    }
    if (rc) break;
    long long b0 = st->bytes;
    if ((rc = xt_ds_shard_commit(sw, st, disk_cb, r, &msg))) {
      sw = NULL;
      set_error(r, rc, &msg);
      break;
    }
    sw = NULL;
    pthread_mutex_lock(&r->lock);
    r->shards_done++;
    r->bytes_done += (double)(st->bytes - b0);
    sl->shard = -1;
    pthread_mutex_unlock(&r->lock);
  }
  if (sw) xt_ds_shard_abort(sw);
  xt_ds_encoder_free(enc);
  pthread_mutex_lock(&r->lock);
  /* Anything still queued for this slot goes back to the pool. */
  while (sl->head) {
    batch *b = sl->head;
    sl->head = b->next;
    b->next = w->free_list;
    w->free_list = b;
  }
  sl->tail = NULL;
  sl->queued = 0;
  sl->shard = -1;
  w->writers_alive--;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Progress                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void fmt_time(double s, char *out, size_t n) {
  if (!isfinite(s) || s < 0) {
    snprintf(out, n, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(run *r, FILE *f, int bar, long long total, int final) {
  pthread_mutex_lock(&r->lock);
  long long done = r->frames_done;
  double bytes = r->bytes_done;
  double t0 = r->t_start > 0 ? r->t_start : r->t_launch;
  pthread_mutex_unlock(&r->lock);
  double el = xt__ds_now_s() - t0;
  double rate = el > 0 ? done / el : 0;
  char eta[32], ela[32];
  fmt_time(rate > 0 ? (total - done) / rate : NAN, eta, sizeof eta);
  fmt_time(el, ela, sizeof ela);
  double pct = total ? 100.0 * done / total : 100.0;
  if (bar) {
    char b[31];
    int fill = (int)(pct * 30 / 100);
    for (int i = 0; i < 30; i++) b[i] = i < fill ? '#' : '.';
    b[30] = 0;
    fprintf(f, "\r[%s] %5.1f%% %lld/%lld frames  %.0f frames/s  %.1f MB/s  %s  ETA %s ", b, pct, done, total, rate,
            el > 0 ? bytes / el / 1e6 : 0.0, ela, eta);
    if (final) fputc('\n', f);
  } else {
    fprintf(f, "xtwin dataset: %lld/%lld frames (%.1f%%), %.0f frames/s, %.1f MB/s, elapsed %s, ETA %s\n", done, total,
            pct, rate, el > 0 ? bytes / el / 1e6 : 0.0, ela, eta);
  }
  fflush(f);
}

/* ------------------------------------------------------------------------------------------ */
/* The run                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)n;
}

int xt_ds_run(const xt_ds_spec *s, const xt_ds_scene *sc, const xt_ds_out *o, const long long *shards, long long n,
              const xt_ds_run_opts *opt, xt_ds_summary *sum, xt_msg *msg) {
  run r;
  memset(&r, 0, sizeof r);
  memset(sum, 0, sizeof *sum);
  r.s = s;
  r.sc = sc;
  r.o = o;
  r.shards = shards;
  r.nshards = n;
  r.opt = opt;
  pthread_mutex_init(&r.lock, NULL);
  pthread_cond_init(&r.cond, NULL);
  pthread_mutex_init(&r.disk_lock, NULL);
  int rc = 0;
  long long total = 0;
  for (long long i = 0; i < n; i++) {
    long long first = shards[i] * s->shard_frames;
    total += s->frames - first < s->shard_frames ? s->frames - first : s->shard_frames;
  }
  for (int m = 0; m < s->nmodes_all; m++) {
    size_t px = (size_t)s->modes[m]->rows * s->modes[m]->cols;
    if (px > r.cap_px) r.cap_px = px;
  }
  const size_t frame_bytes = r.cap_px * (size_t)planes(s) *
                             (sizeof(float) * (size_t)(1 + s->nchannels) + (s->chain.present ? 2 * sizeof(uint16_t) : 0));
  int B = opt->batch;
  if (B <= 0) {
    B = (int)(BATCH_BYTES / frame_bytes);
    if (s->backend == XT_BACKEND_CPU && B > 4) B = 4; /* the CPU renders frame by frame anyway */
  }
  if (B < 1) B = 1;
  if (B > 1024) B = 1024;
  if (B > s->shard_frames) B = (int)s->shard_frames;
  r.batch_frames = B;
  r.cap_px *= (size_t)B * (size_t)planes(s); /* a region holds every view of a batch */

  int nw = opt->ndevices > 0 ? opt->ndevices : 1;
  int writers = opt->writers > 0 ? opt->writers : cpu_count() - nw;
  if (writers < nw) writers = nw;
  if (writers > MAX_WRITERS * nw) writers = MAX_WRITERS * nw;
  r.nworkers = nw;
  r.workers = calloc((size_t)nw, sizeof *r.workers);
  writer_arg *wargs = calloc((size_t)writers, sizeof *wargs);
  if (!r.workers || !wargs) {
    free(r.workers);
    free(wargs);
    return xt_fail(msg, XT_ENOMEM, "out of memory");
  }
  int wa = 0;
  for (int i = 0; i < nw && !rc; i++) {
    worker *w = &r.workers[i];
    w->run = &r;
    w->index = i;
    w->device = opt->ndevices > 0 ? opt->devices[i] : 0;
    w->nwriters = opt->render_only ? 0 : writers / nw + (i < writers % nw);
    for (int k = 0; k < MAX_WRITERS; k++) w->slots[k].shard = -1;
    rc = make_pool(&r, w, opt->render_only ? 1 : 2 * w->nwriters + 2, msg);
  }
  FILE *log = opt->log ? opt->log : stderr;
  if (!rc && r.pin_failed)
    fprintf(log, "xtwin dataset: note: batch buffers in pageable memory (%s): one more host copy per frame\n",
            r.pin_msg.text);
  r.t_launch = xt__ds_now_s();
  for (int i = 0; i < nw && !rc; i++) {
    worker *w = &r.workers[i];
    w->writers_alive = w->nwriters;
    for (int k = 0; k < w->nwriters; k++) {
      wargs[wa] = (writer_arg){w, k};
      if (pthread_create(&w->writer_tid[k], NULL, writer_main, &wargs[wa++]) != 0) {
        pthread_mutex_lock(&r.lock);
        w->writers_alive -= w->nwriters - k;
        pthread_mutex_unlock(&r.lock);
        rc = xt_fail(msg, XT_ENOMEM, "cannot start a writer thread");
        break;
      }
      w->started_writers++;
    }
    if (!rc && pthread_create(&w->render_tid, NULL, render_main, w) != 0)
      rc = xt_fail(msg, XT_ENOMEM, "cannot start a render thread");
    else if (!rc) w->render_started = 1;
  }
  if (rc) {
    xt_msg m = *msg;
    set_error(&r, rc, &m);
  }

  /* Progress, from this thread, until every thread is done. */
  int mode = opt->progress;
  if (mode == XT_DS_PROGRESS_AUTO) mode = isatty(fileno(log)) ? XT_DS_PROGRESS_BAR : XT_DS_PROGRESS_LINES;
  const double every = mode == XT_DS_PROGRESS_BAR ? 0.25 : 10.0;
  double last = xt__ds_now_s();
  for (;;) {
    pthread_mutex_lock(&r.lock);
    int alive = 0;
    for (int i = 0; i < nw; i++) alive += r.workers[i].writers_alive;
    long long done = r.frames_done;
    int fin = (alive == 0 && !opt->render_only) || r.failed || (opt->render_only && done >= total);
    if (!fin) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&r.cond, &r.lock, &ts);
    }
    pthread_mutex_unlock(&r.lock);
    if (fin) break;
    if (mode != XT_DS_PROGRESS_NONE && xt__ds_now_s() - last >= every) {
      progress(&r, log, mode == XT_DS_PROGRESS_BAR, total, 0);
      last = xt__ds_now_s();
    }
  }
  for (int i = 0; i < nw; i++) {
    worker *w = &r.workers[i];
    if (w->render_started) pthread_join(w->render_tid, NULL);
    for (int k = 0; k < w->started_writers; k++) pthread_join(w->writer_tid[k], NULL);
  }
  const double t_end = xt__ds_now_s();
  const double t_start = r.t_start > 0 ? r.t_start : r.t_launch;
  double wall = t_end - t_start;
  if (mode != XT_DS_PROGRESS_NONE && !r.failed) progress(&r, log, mode == XT_DS_PROGRESS_BAR, total, 1);

  sum->frames = r.frames_done;
  sum->shards = r.shards_done;
  sum->bytes = r.bytes_done;
  sum->wall_s = wall;
  sum->setup_s = t_start - r.t_launch;
  sum->workers = nw;
  sum->backend = xt_backend_name(s->backend);
  sum->writers = opt->render_only ? 0 : writers;
  sum->disk_busy_s = r.disk_busy_s;
  for (int i = 0; i < nw; i++) {
    worker *w = &r.workers[i];
    sum->gpu_busy_s += w->gpu_busy_s;
    for (int k = 0; k < w->nwriters; k++) {
      sum->encode_s += w->wstats[k].encode_s;
      sum->write_s += w->wstats[k].write_s;
    }
    free_pool(&r, w);
  }
  if (r.failed) {
    rc = r.err ? r.err : XT_EINTERNAL;
    *msg = r.msg;
  }
  free(r.workers);
  free(wargs);
  pthread_mutex_destroy(&r.lock);
  pthread_cond_destroy(&r.cond);
  pthread_mutex_destroy(&r.disk_lock);
  return rc;
}

void xt_ds_print_summary(FILE *f, const xt_ds_summary *s, int render_only) {
  if (s->frames == 0) return;
  const double wall = s->wall_s > 0 ? s->wall_s : 1e-9;
  const double fps = s->frames / wall;
  const double bpf = s->bytes / (double)s->frames;
  /* Each stage's rate had it run alone at the busy time it showed. */
  const double gpu = s->gpu_busy_s > 0 ? s->frames / (s->gpu_busy_s / s->workers) : INFINITY;
  int cores = cpu_count();
  int par = s->writers < cores ? s->writers : cores;
  const double enc = s->encode_s > 0 && par > 0 ? s->frames / (s->encode_s / par) : INFINITY;
  const double disk = s->disk_busy_s > 0 && bpf > 0 ? s->bytes / s->disk_busy_s / bpf : INFINITY;
  if (render_only) {
    fprintf(f, "xtwin dataset: rendered %lld frames in %.2f s (render only, nothing written): %.0f frames/s; render "
               "busy %.2f s over %d %s worker%s: %.0f frames/s per the busy time (after %.2f s of set-up)\n",
            s->frames, wall, fps, s->gpu_busy_s, s->workers, s->backend, s->workers > 1 ? "s" : "", gpu, s->setup_s);
    return;
  }
  fprintf(f, "xtwin dataset: wrote %lld frames in %lld shards, %.3f GB in %.2f s: %.0f frames/s, %.3f GB/s (after %.2f s "
             "of set-up)\n",
          s->frames, s->shards, s->bytes / 1e9, wall, fps, s->bytes / 1e9 / wall, s->setup_s);
  fprintf(f, "  render    %6.2f s busy over %d %s worker%s (%3.0f%% of the wall time): %.0f frames/s alone\n",
          s->gpu_busy_s, s->workers, s->backend, s->workers > 1 ? "s" : "", 100 * s->gpu_busy_s / s->workers / wall, gpu);
  fprintf(f, "  encoding  %6.2f s busy over %d writers on %d cores (%3.0f%%): %.0f frames/s alone\n", s->encode_s,
          s->writers, cores, 100 * s->encode_s / par / wall, enc);
  fprintf(f, "  disk      %6.2f s with a write in flight (%3.0f%%): %.3f GB/s, %.0f frames/s alone\n", s->disk_busy_s,
          100 * s->disk_busy_s / wall, s->bytes / 1e9 / (s->disk_busy_s > 0 ? s->disk_busy_s : wall), disk);
  const char *name = strcmp(s->backend, "cuda") == 0 ? "render (GPU)" : "render (CPU projector)";
  double lim = gpu;
  if (enc < lim) lim = enc, name = "encoding (CPU)";
  if (disk < lim) lim = disk, name = "disk";
  fprintf(f, "  bottleneck: %s at %.0f frames/s alone; the run made %.0f frames/s (%.0f%% of it)\n", name, lim, fps,
          isfinite(lim) && lim > 0 ? 100 * fps / lim : 100.0);
}
