/* The study folder (--study-dir, issue 28): every chain run of the session written as DICOM, off
 * the frame path. A render worker hands each chain frame's record and processed pixels to
 * xt_srv_study_frame, which copies them and queues the copy under a short lock, or drops it (counted)
 * when the queue holds its byte budget: it never waits on the writer, the disk or the encoder. The
 * writer thread gathers a plane's frames into its run and writes it when the acquisition has
 * stopped and nothing came for STUDY_QUIET_NS, when a frame of a newer run of that plane arrives, or
 * at shutdown: DIR/<study UID>/run-<plane>-<run>_xa.dcm (Enhanced XA) and _xa_classic.dcm, and the
 * study's dose report DIR/<study UID>/dose_sr.dcm rewritten over every run so far; each file through
 * a temporary and a rename, so a reader never sees half a file. A run's frames stay until the next
 * run begins: a frame still in a worker when the run was written (a slow first frame, say) is added
 * and the run written again, under the same UIDs. The identity is the operator's file (--identity),
 * else synthetic (docs/dicom.md). With two planes each plane's runs are its own objects (PLANE A,
 * PLANE B) and the one dose report carries both planes' events and accumulated doses. With
 * study_store a sender thread sends each run the writer wrote to a PACS by C-STORE, and the report
 * at the stop: the network is the sender's alone, so a silent PACS holds up neither the frames nor
 * the folder. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "srv_study.h"
#include "xt_dicom.h"
#include "xt_pacs.h"
#include "xt_server.h"

#define STUDY_QUEUE_BYTES ((size_t)512 << 20) /* frames waiting for the writer */
#define STUDY_RUN_FRAMES 4000                 /* a run's frames kept; later ones are dropped (counted) */
#define STUDY_RUN_BYTES ((size_t)768 << 20)   /* ... and their pixels' bytes */
#define STUDY_QUIET_NS 500000000ull           /* stopped and quiet this long: the run is over */

typedef struct item {
  struct item *next;
  xt_acq_frame fr;
  uint16_t *px; /* rows x cols of fr.proc */
  int64_t wall_us;
  size_t bytes;
} item;

typedef struct run_acc { /* the run being gathered, per plane */
  uint64_t run;
  int n, cap, live;
  int written, dirty; /* written once (done[done_index]); frames added since */
  int done_index;
  size_t bytes;
  xt_acq_frame *fr;
  uint16_t **px;
  int64_t t0_us;
  xt_dicom_run uids; /* made when the run begins, so that the other plane's objects can name it */
} run_acc;

typedef struct done_run { /* a written run: its records (no pixels) for the dose report */
  xt_dicom_run r;
  xt_acq_frame *fr;
} done_run;

typedef struct send_item { /* files for the sender, sent in one association */
  struct send_item *next;
  int n;
  char path[2][1200];
} send_item;

struct xt_srv_study {
  xt_server *srv;
  char dir[1024];
  xt_dicom_identity id;
  pthread_t thread;
  int started;
  pthread_mutex_t mu; /* guards head, tail, bytes, quit */
  pthread_cond_t cv;
  item *head, *tail;
  size_t bytes;
  uint64_t queued; /* frames in the queue */
  int quit;
  /* the writer's own */
  run_acc acc[XT_SRV_PLANES];
  char last_sop[XT_SRV_PLANES][XT_DCW_UID], last_classic_sop[XT_SRV_PLANES][XT_DCW_UID]; /* each plane's latest run */
  done_run *done;
  int ndone, series;
  uint64_t last_frame_ns;
  /* counters (atomic: workers and the writer) */
  atomic_ullong dropped, written_runs, errors, objects, object_bytes;
  /* study_store: the PACS (port 0: none) and the sender thread, which alone talks to it, so that
   * a slow or silent PACS holds up neither the stream nor the folder */
  char store_host[256];
  int store_port;
  pthread_t sender;
  int sender_started;
  pthread_mutex_t smu; /* guards shead, stail, squit */
  pthread_cond_t scv;
  send_item *shead, *stail;
  int squit;
  atomic_ullong stored, store_failures;
};

static int64_t wall_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void xt_srv_study_frame(xt_srv_study *st, const xt_acq_frame *fr) {
  if (!st || !fr->chain || !fr->proc.data || fr->proc.where != XT_ACQ_HOST) return;
  const size_t npx = (size_t)fr->proc.rows * (size_t)fr->proc.cols, bytes = npx * 2 + sizeof(item);
  pthread_mutex_lock(&st->mu);
  const int full = st->bytes + bytes > STUDY_QUEUE_BYTES || st->quit;
  if (!full) st->bytes += bytes; /* reserved before the copy, so that the budget holds */
  pthread_mutex_unlock(&st->mu);
  item *it = full ? NULL : malloc(sizeof *it);
  uint16_t *px = it ? malloc(npx * 2) : NULL;
  if (!px) {
    free(it);
    if (!full) {
      pthread_mutex_lock(&st->mu);
      st->bytes -= bytes;
      pthread_mutex_unlock(&st->mu);
    }
    atomic_fetch_add(&st->dropped, 1);
    return;
  }
  memcpy(px, fr->proc.data, npx * 2);
  it->next = NULL;
  it->fr = *fr;
  it->fr.lineint.data = it->fr.channels.data = it->fr.raw.data = it->fr.proc.data = NULL;
  it->px = px;
  it->bytes = bytes;
  /* the exposure's wall-clock time: now, less how long ago it was on the monotonic clock */
  const uint64_t now = xt_acq_now_ns();
  it->wall_us = wall_now_us() - (int64_t)((now > fr->t_exposure_ns ? now - fr->t_exposure_ns : 0) / 1000u);
  pthread_mutex_lock(&st->mu);
  if (st->tail) st->tail->next = it;
  else st->head = it;
  st->tail = it;
  st->queued++;
  pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

/* ---- the writer ------------------------------------------------------------------------------- */

/* b's bytes to path through a temporary in the same folder and a rename. */
static int write_file(const char *path, const unsigned char *b, size_t n, xt_msg *msg) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: %s", tmp, strerror(errno));
  int ok = fwrite(b, 1, n, f) == n;
  ok = (fflush(f) == 0) && ok;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return xt_fail(msg, XT_EIO, "%s: %s", path, strerror(e));
  }
  return 0;
}

/* C-STORE of files to study_store, on the sender thread: a slow PACS holds up only the sender. */
static int send_files(xt_srv_study *st, const char *const *files, int n) {
  if (!n) return 0;
  const xt_pacs_peer peer = {st->store_host, st->store_port, st->srv->cfg.study_called, NULL,
                             st->srv->cfg.study_store_timeout};
  xt_msg msg = {0};
  if (xt_pacs_store(&peer, files, n, &msg) == 0) {
    atomic_fetch_add(&st->stored, (unsigned long long)n);
    return 0;
  }
  atomic_fetch_add(&st->store_failures, 1);
  fprintf(stderr, "xtwin-server: study folder: C-STORE: %s\n", msg.text);
  return -1;
}

/* Hands files (just written) to the sender; never waits for it. */
static void send_later(xt_srv_study *st, const char *a, const char *b) {
  if (!st->store_port) return;
  send_item *it = calloc(1, sizeof *it);
  if (!it) {
    atomic_fetch_add(&st->store_failures, 1);
    fprintf(stderr, "xtwin-server: study folder: C-STORE: out of memory\n");
    return;
  }
  snprintf(it->path[it->n++], sizeof it->path[0], "%s", a);
  if (b) snprintf(it->path[it->n++], sizeof it->path[0], "%s", b);
  pthread_mutex_lock(&st->smu);
  if (st->stail) st->stail->next = it;
  else st->shead = it;
  st->stail = it;
  pthread_cond_signal(&st->scv);
  pthread_mutex_unlock(&st->smu);
}

/* The sender: whatever is waiting, in one association (a failure is counted, not retried), until
 * told to quit with nothing left. */
static void *sender_main(void *arg) {
  xt_srv_study *st = arg;
  for (;;) {
    pthread_mutex_lock(&st->smu);
    while (!st->shead && !st->squit) pthread_cond_wait(&st->scv, &st->smu);
    send_item *batch = st->shead;
    st->shead = st->stail = NULL;
    const int quit = st->squit;
    pthread_mutex_unlock(&st->smu);
    if (!batch && quit) break;
    int n = 0;
    for (send_item *it = batch; it; it = it->next) n += it->n;
    const char **files = malloc((size_t)n * sizeof *files);
    if (files) {
      int k = 0;
      for (send_item *it = batch; it; it = it->next)
        for (int i = 0; i < it->n; i++) files[k++] = it->path[i];
      send_files(st, files, n);
    } else {
      atomic_fetch_add(&st->store_failures, 1);
    }
    free(files);
    while (batch) {
      send_item *next = batch->next;
      free(batch);
      batch = next;
    }
  }
  return NULL;
}

/* write_file, counted for /metrics */
static int put_object(xt_srv_study *st, const char *path, const unsigned char *b, size_t n, xt_msg *msg) {
  const int rc = write_file(path, b, n, msg);
  if (!rc) {
    atomic_fetch_add(&st->objects, 1);
    atomic_fetch_add(&st->object_bytes, n);
  }
  return rc;
}

static void study_log(xt_srv_study *st, const xt_msg *msg) {
  atomic_fetch_add(&st->errors, 1);
  fprintf(stderr, "xtwin-server: study folder: %s\n", msg->text);
}

static int write_sr(xt_srv_study *st, xt_msg *msg) {
  xt_dicom_run *runs = malloc((size_t)st->ndone * sizeof *runs);
  if (!runs) return xt_fail(msg, XT_ENOMEM, "out of memory");
  for (int i = 0; i < st->ndone; i++) runs[i] = st->done[i].r;
  unsigned char *b = NULL;
  size_t n = 0;
  int rc = xt_dicom_dose_sr(runs, st->ndone, &st->id, &b, &n, msg);
  char path[1200];
  snprintf(path, sizeof path, "%s/%s/dose_sr.dcm", st->dir, st->id.study_uid);
  if (!rc) rc = put_object(st, path, b, n, msg);
  free(b);
  free(runs);
  return rc;
}

/* Writes the plane's run (again, if frames came after it was written) and the study's report. The
 * report keeps its own copy of the run's records. */
static void write_run(xt_srv_study *st, int plane) {
  run_acc *a = &st->acc[plane];
  if (!a->live || !a->dirty || !a->n) return;
  xt_msg msg = {0};
  int rc = 0;
  xt_acq_frame *copy = malloc((size_t)a->n * sizeof *copy);
  if (!copy) {
    rc = xt_fail(&msg, XT_ENOMEM, "out of memory");
    goto out;
  }
  memcpy(copy, a->fr, (size_t)a->n * sizeof *copy);
  if (!a->written) {
    done_run *grown = realloc(st->done, (size_t)(st->ndone + 1) * sizeof *grown);
    if (!grown) {
      free(copy);
      rc = xt_fail(&msg, XT_ENOMEM, "out of memory");
      goto out;
    }
    st->done = grown;
    done_run *d = &st->done[st->ndone];
    memset(d, 0, sizeof *d);
    d->r.which = XT_DICOM_PROC;
    d->r.frame_ms = a->fr[0].period_ns ? (double)a->fr[0].period_ns / 1e6 : 1000.0 / 15;
    d->r.t0_unix_us = a->t0_us;
    d->r.series_number = ++st->series;
    d->r.software = "xtwin-server " XT_SERVER_VERSION;
    memcpy(d->r.series_uid, a->uids.series_uid, sizeof d->r.series_uid);
    memcpy(d->r.sop_uid, a->uids.sop_uid, sizeof d->r.sop_uid);
    memcpy(d->r.classic_series_uid, a->uids.classic_series_uid, sizeof d->r.classic_series_uid);
    memcpy(d->r.classic_sop_uid, a->uids.classic_sop_uid, sizeof d->r.classic_sop_uid);
    memcpy(d->r.event_uid, a->uids.event_uid, sizeof d->r.event_uid);
    memcpy(d->r.frame_of_reference_uid, a->uids.frame_of_reference_uid, sizeof d->r.frame_of_reference_uid);
    a->done_index = st->ndone++;
    a->written = 1;
  }
  done_run *d = &st->done[a->done_index];
  free(d->fr);
  d->fr = copy;
  d->r.frames = copy;
  d->r.n = a->n;
  char dir[1100], path[1200];
  snprintf(dir, sizeof dir, "%s/%s", st->dir, st->id.study_uid);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    rc = xt_fail(&msg, XT_EIO, "%s: %s", dir, strerror(errno));
    goto out;
  }
  /* Biplane once the other plane has a run: its latest, the one exposed beside this one. A plane
   * that has run alone so far is written as a single plane's (nothing to name). */
  d->r.biplane = st->srv->cfg.planes == 2 && st->last_sop[!plane][0];
  if (d->r.biplane) {
    memcpy(d->r.other_plane_sop_uid, st->last_sop[!plane], XT_DCW_UID);
    memcpy(d->r.other_plane_classic_sop_uid, st->last_classic_sop[!plane], XT_DCW_UID);
  }
  xt_dicom_run r = d->r;
  r.pixels = (const uint16_t *const *)a->px;
  char paths[2][1200];
  for (int k = 0; k < 2 && !rc; k++) {
    unsigned char *b = NULL;
    size_t n = 0;
    rc = k == 0 ? xt_dicom_enhanced_xa(&r, &st->id, &b, &n, &msg) : xt_dicom_classic_xa(&r, &st->id, &b, &n, &msg);
    snprintf(path, sizeof path, "%s/run-%c-%llu%s", dir, plane ? 'b' : 'a', (unsigned long long)a->run,
             k == 0 ? "_xa.dcm" : "_xa_classic.dcm");
    if (!rc) rc = put_object(st, path, b, n, &msg);
    snprintf(paths[k], sizeof paths[k], "%s", path);
    free(b);
  }
  if (!rc) send_later(st, paths[0], paths[1]);
  if (!rc) rc = write_sr(st, &msg);
  if (!rc) atomic_fetch_add(&st->written_runs, 1);
out:
  a->dirty = 0;
  if (rc) study_log(st, &msg);
}

/* Lets go of the plane's run (written first if it has unwritten frames). */
static void end_run(xt_srv_study *st, int plane) {
  run_acc *a = &st->acc[plane];
  write_run(st, plane);
  for (int i = 0; i < a->n; i++) free(a->px[i]);
  free(a->px);
  free(a->fr);
  memset(a, 0, sizeof *a);
}

static void take(xt_srv_study *st, item *it) {
  const int plane = it->fr.plane == 1 ? 1 : 0;
  run_acc *a = &st->acc[plane];
  if (a->live && a->run != it->fr.run) end_run(st, plane);
  if (!a->live) {
    a->live = 1;
    a->run = it->fr.run;
    a->t0_us = it->wall_us;
    xt_dicom_run_uids(&a->uids);
    memcpy(st->last_sop[plane], a->uids.sop_uid, XT_DCW_UID);
    memcpy(st->last_classic_sop[plane], a->uids.classic_sop_uid, XT_DCW_UID);
  }
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 64;
    if (cap > STUDY_RUN_FRAMES) cap = STUDY_RUN_FRAMES;
    xt_acq_frame *fr = a->n < cap ? realloc(a->fr, (size_t)cap * sizeof *fr) : NULL;
    if (fr) a->fr = fr;
    uint16_t **px = fr ? realloc(a->px, (size_t)cap * sizeof *px) : NULL;
    if (px) a->px = px, a->cap = cap;
  }
  const size_t px_bytes = it->bytes - sizeof(item);
  if (a->n < a->cap && a->bytes + px_bytes <= STUDY_RUN_BYTES) {
    a->fr[a->n] = it->fr;
    a->px[a->n++] = it->px;
    a->bytes += px_bytes;
    a->dirty = 1;
  } else {
    free(it->px);
    atomic_fetch_add(&st->dropped, 1);
  }
  free(it);
}

static int running(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  const int r = s->run.running;
  pthread_mutex_unlock(&s->st_mu);
  return r;
}

static void *writer_main(void *arg) {
  xt_srv_study *st = arg;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    while (!st->head && !st->quit) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&st->cv, &st->mu, &ts);
      if (!st->head && !st->quit) { /* idle: a stopped acquisition's runs are over once quiet */
        pthread_mutex_unlock(&st->mu);
        if ((st->acc[0].dirty || st->acc[1].dirty) && xt_acq_now_ns() - st->last_frame_ns > STUDY_QUIET_NS &&
            !running(st->srv))
          for (int p = 0; p < XT_SRV_PLANES; p++) write_run(st, p);
        pthread_mutex_lock(&st->mu);
      }
    }
    if (!st->head && st->quit) break;
    item *it = st->head;
    st->head = it->next;
    if (!st->head) st->tail = NULL;
    st->bytes -= it->bytes;
    st->queued--;
    pthread_mutex_unlock(&st->mu);
    st->last_frame_ns = xt_acq_now_ns();
    take(st, it);
    pthread_mutex_lock(&st->mu);
  }
  pthread_mutex_unlock(&st->mu);
  for (int p = 0; p < XT_SRV_PLANES; p++) end_run(st, p);
  if (st->ndone) { /* the study is over: its dose report, once, as a modality sends it at the end */
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/dose_sr.dcm", st->dir, st->id.study_uid);
    send_later(st, path, NULL);
  }
  return NULL;
}

int xt_srv_study_open(xt_server *s, xt_srv_study **out, xt_msg *msg) {
  *out = NULL;
  const char *dir = s->cfg.study_dir;
  if (!dir[0]) {
    if (s->cfg.study_store[0])
      return xt_fail(msg, XT_EINVAL, "study_store: \"%s\" sends the study folder's objects, and study_dir is not set",
                     s->cfg.study_store);
    if (s->cfg.identity[0])
      return xt_fail(msg, XT_EINVAL, "identity: \"%s\" is for the study folder, and study_dir is not set",
                     s->cfg.identity);
    return 0;
  }
  char host[256] = "";
  long port = 0;
  const char *to = s->cfg.study_store;
  if (to[0]) {
    const char *colon = strrchr(to, ':');
    char *end = NULL;
    port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == to || (size_t)(colon - to) >= sizeof host || !end || *end || port < 1 || port > 65535)
      return xt_fail(msg, XT_EINVAL, "study_store: expected HOST:PORT, got \"%s\"", to);
    snprintf(host, sizeof host, "%.*s", (int)(colon - to), to);
    const size_t al = strlen(s->cfg.study_called);
    if (al < 1 || al > 16) return xt_fail(msg, XT_EINVAL, "study_called: AE title \"%s\": 1 to 16 characters", s->cfg.study_called);
  }
  xt_dicom_identity id;
  xt_msg im = {0};
  if (xt_dicom_identity_load(s->cfg.identity[0] ? s->cfg.identity : NULL, &id, &im))
    return xt_fail(msg, XT_EINVAL, "identity: %s", im.text); /* the file and the key, as the CLI says them */
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return xt_fail(msg, XT_EINVAL, "study_dir: \"%s\" is not a folder", dir);
  if (access(dir, W_OK) != 0) return xt_fail(msg, XT_EPERM, "study_dir: \"%s\": %s", dir, strerror(errno));
  xt_srv_study *st = calloc(1, sizeof *st);
  if (!st) return xt_fail(msg, XT_ENOMEM, "out of memory");
  st->srv = s;
  snprintf(st->dir, sizeof st->dir, "%s", dir);
  st->id = id;
  snprintf(st->store_host, sizeof st->store_host, "%s", host);
  st->store_port = (int)port;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  pthread_mutex_init(&st->smu, NULL);
  pthread_cond_init(&st->scv, NULL);
  if (st->store_port && pthread_create(&st->sender, NULL, sender_main, st) != 0) {
    xt_srv_study_close(st);
    return xt_fail(msg, XT_ENOMEM, "study_store: cannot start the sender thread");
  }
  st->sender_started = st->store_port != 0;
  if (pthread_create(&st->thread, NULL, writer_main, st) != 0) {
    xt_srv_study_close(st);
    return xt_fail(msg, XT_ENOMEM, "study_dir: cannot start the writer thread");
  }
  st->started = 1;
  *out = st;
  return 0;
}

void xt_srv_study_close(xt_srv_study *st) {
  if (!st) return;
  pthread_mutex_lock(&st->mu);
  st->quit = 1;
  pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
  if (st->started) pthread_join(st->thread, NULL);
  /* then the sender, with what the writer handed it last (the dose report): it may be held by a
   * slow PACS up to its timeout; the server's shutdown deadline applies as to any other thread */
  pthread_mutex_lock(&st->smu);
  st->squit = 1;
  pthread_cond_signal(&st->scv);
  pthread_mutex_unlock(&st->smu);
  if (st->sender_started) pthread_join(st->sender, NULL);
  for (send_item *it = st->shead; it;) {
    send_item *n = it->next;
    free(it);
    it = n;
  }
  uint64_t runs, dropped, errors;
  xt_srv_study_counts(st, &runs, &dropped, &errors);
  const unsigned long long failed = atomic_load(&st->store_failures);
  if (dropped || errors || failed)
    fprintf(stderr,
            "xtwin-server: study folder %s: %llu frames not written (queue or run full), %llu write errors, %llu failed "
            "C-STOREs\n",
            st->dir, (unsigned long long)dropped, (unsigned long long)errors, failed);
  for (item *it = st->head; it;) { /* nothing is left: the writer drains before it quits */
    item *n = it->next;
    free(it->px);
    free(it);
    it = n;
  }
  for (int i = 0; i < st->ndone; i++) free(st->done[i].fr);
  free(st->done);
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->smu);
  pthread_cond_destroy(&st->scv);
  free(st);
}

int xt_srv_study_stats(xt_srv_study *st, xt_metrics_study *o) {
  memset(o, 0, sizeof *o);
  if (!st) return 0;
  o->objects = atomic_load(&st->objects);
  o->bytes = atomic_load(&st->object_bytes);
  o->runs = atomic_load(&st->written_runs);
  o->dropped = atomic_load(&st->dropped);
  o->errors = atomic_load(&st->errors);
  o->storing = st->store_port != 0;
  o->stored = atomic_load(&st->stored);
  o->store_failures = atomic_load(&st->store_failures);
  pthread_mutex_lock(&st->mu);
  o->queue_frames = st->queued;
  o->queue_bytes = st->bytes;
  pthread_mutex_unlock(&st->mu);
  return 1;
}

void xt_srv_study_counts(xt_srv_study *st, uint64_t *runs, uint64_t *dropped, uint64_t *errors) {
  *runs = st ? atomic_load(&st->written_runs) : 0;
  *dropped = st ? atomic_load(&st->dropped) : 0;
  *errors = st ? atomic_load(&st->errors) : 0;
}
