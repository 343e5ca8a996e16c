/* The frame ring the stream sends from (srv_ring.h): frames taken from a small pool (page-locked
 * on a GPU backend), published into the ring's slots, referenced by each client's send, released
 * back into the pool; which frame a client gets next, per plane it subscribed to; the device's
 * event texts beside them; and the notifier a reader registers to be woken by a push. */
#include <stdlib.h>
#include <string.h>

#include "srv_clock.h"
#include "srv_ring.h"
#include "xt_proj.h"

/* The plane a frame counts for: B, or A for anything else (an engine bug must not index out). */
static int plane_of(const xt_frame *f) { return f->plane == 1 ? 1 : 0; }

/* A frame of one message of len bytes, or (len2 > 0) two: the raw then the processed frame's. */
xt_frame *xt_frame_get2(xt_ring *r, size_t len, size_t len2) {
  xt_frame *f = NULL;
  const size_t need = len + (len2 ? XT_FRAME_PRE + len2 : 0);
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < 4; i++)
    if (r->pool[i] && r->pool[i]->cap >= need) {
      f = r->pool[i];
      r->pool[i] = NULL;
      break;
    }
  pthread_mutex_unlock(&r->mu);
  if (!f) {
    f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->cap = need;
    /* page-locked on a GPU backend, so the chain's copy-out needs no host copy after it (frames
     * are pooled and reused: an allocation is rare after the first ring's worth); plain memory
     * when that is refused */
    xt_msg ignored;
    if (r->pin && xt_host_alloc(XT_BACKEND_CUDA, XT_FRAME_PRE + need, (void **)&f->mem, &ignored) == 0)
      f->pinned = 1;
    else
      f->mem = malloc(XT_FRAME_PRE + need);
    if (!f->mem) {
      free(f);
      return NULL;
    }
  }
  f->msg = f->mem + XT_FRAME_PRE;
  f->len = len;
  f->plane = 0; /* the engine sets it; a frame from the pool must not keep its last one */
  f->ppub = 0;
  /* the stream's encodings were of the frame this buffer held last: kept for their memory only */
  for (int m = 0; m < 2; m++)
    for (int k = 0; k < XT_FRAME_CODECS; k++) {
      f->wire[m][k].state = 0;
      f->wire[m][k].len = 0;
    }
  f->msg2 = len2 ? f->msg + len + XT_FRAME_PRE : NULL;
  f->len2 = len2;
  f->proc_ok = 1;
  f->pub = 0;
  atomic_store(&f->refs, 1);
  return f;
}

xt_frame *xt_frame_get(xt_ring *r, size_t len) { return xt_frame_get2(r, len, 0); }

void xt_frame_free(xt_frame *f) {
  if (!f) return;
  for (int m = 0; m < 2; m++)
    for (int k = 0; k < XT_FRAME_CODECS; k++) free(f->wire[m][k].mem);
  if (f->pinned) xt_host_free(XT_BACKEND_CUDA, f->mem);
  else free(f->mem);
  free(f);
}

/* Caller holds r->mu. Returns the buffer that did not fit in the pool (or NULL): the caller frees it
 * after unlocking, as freeing page-locked memory can wait on the device. */
xt_frame *xt_frame_release_locked(xt_ring *r, xt_frame *f) {
  for (int i = 0; i < 4; i++)
    if (!r->pool[i]) {
      r->pool[i] = f;
      return NULL;
    }
  /* Keep the largest buffers: replace the smallest if this one is bigger. */
  int small = 0;
  for (int i = 1; i < 4; i++)
    if (r->pool[i]->cap < r->pool[small]->cap) small = i;
  if (r->pool[small]->cap < f->cap) {
    xt_frame *out = r->pool[small];
    r->pool[small] = f;
    return out;
  }
  return f;
}

void xt_frame_unref(xt_ring *r, xt_frame *f) {
  if (!f) return;
  if (atomic_fetch_sub(&f->refs, 1) != 1) return;
  pthread_mutex_lock(&r->mu);
  xt_frame *spill = xt_frame_release_locked(r, f);
  pthread_mutex_unlock(&r->mu);
  xt_frame_free(spill);
}

void xt_ring_push(xt_ring *r, xt_frame *f) {
  pthread_mutex_lock(&r->mu);
  f->pub = r->next_pub++;
  f->ppub = ++r->plane_pubs[plane_of(f)];
  xt_frame **slot = &r->slots[f->pub % XT_RING];
  xt_frame *old = *slot;
  *slot = f;
  xt_frame *spill = old && atomic_fetch_sub(&old->refs, 1) == 1 ? xt_frame_release_locked(r, old) : NULL;
  /* under the lock: a reader that sees the new stamp and then takes the lock finds the frame */
  atomic_store(&r->t_push_ns, xt_now_ns());
  pthread_mutex_unlock(&r->mu);
  xt_frame_free(spill);
}

uint64_t xt_ring_latest_pub(xt_ring *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t p = r->next_pub - 1;
  pthread_mutex_unlock(&r->mu);
  return p;
}

uint64_t xt_ring_plane_pubs(xt_ring *r, int p) {
  pthread_mutex_lock(&r->mu);
  uint64_t n = p >= 0 && p < XT_RING_PLANES ? r->plane_pubs[p] : 0;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void xt_ring_mark(xt_ring *r, uint64_t *latest, uint64_t plane_pubs[XT_RING_PLANES]) {
  pthread_mutex_lock(&r->mu);
  *latest = r->next_pub - 1;
  for (int p = 0; p < XT_RING_PLANES; p++) plane_pubs[p] = r->plane_pubs[p];
  pthread_mutex_unlock(&r->mu);
}

void xt_ring_set_notify(xt_ring *r, void (*fn)(void *ctx), void *ctx) {
  pthread_mutex_lock(&r->mu);
  r->notify = fn;
  r->notify_ctx = ctx;
  pthread_mutex_unlock(&r->mu);
}

void xt_ring_notify(xt_ring *r) {
  pthread_mutex_lock(&r->mu);
  void (*fn)(void *) = r->notify;
  void *ctx = r->notify_ctx;
  pthread_mutex_unlock(&r->mu);
  if (fn) fn(ctx); /* outside the lock: the reader may take ring.mu itself when woken */
}

void xt_ring_expect(xt_ring *r) {
  atomic_store(&r->t_expect_ns, xt_now_ns());
  xt_ring_notify(r);
}

void xt_ring_push_text(xt_ring *r, char *text) {
  if (!text) return;
  pthread_mutex_lock(&r->mu);
  char **slot = &r->texts[r->next_text++ % XT_RING_TEXTS];
  char *old = *slot;
  *slot = text;
  pthread_mutex_unlock(&r->mu);
  free(old);
}

char *xt_ring_text_next(xt_ring *r, uint64_t last, uint64_t *seq) {
  char *t = NULL;
  pthread_mutex_lock(&r->mu);
  uint64_t latest = r->next_text - 1, first = last + 1;
  if (latest >= XT_RING_TEXTS && first < latest - XT_RING_TEXTS + 1) first = latest - XT_RING_TEXTS + 1;
  if (first <= latest && r->texts[first % XT_RING_TEXTS]) {
    t = strdup(r->texts[first % XT_RING_TEXTS]);
    *seq = first;
  }
  pthread_mutex_unlock(&r->mu);
  return t;
}

uint64_t xt_ring_latest_text(xt_ring *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t t = r->next_text - 1;
  pthread_mutex_unlock(&r->mu);
  return t;
}

xt_frame *xt_ring_next(xt_ring *r, uint64_t last_pub) {
  xt_frame *f = NULL;
  pthread_mutex_lock(&r->mu);
  uint64_t latest = r->next_pub - 1;
  if (latest > last_pub) {
    uint64_t first = last_pub + 1;
    if (latest >= XT_RING && first < latest - XT_RING + 1) first = latest - XT_RING + 1;
    f = r->slots[first % XT_RING];
    /* Free-run frames: latest wins. Lockstep frames answer triggers: in order while in the ring. */
    if (!f || !f->lockstep) f = r->slots[latest % XT_RING];
    if (f) atomic_fetch_add(&f->refs, 1);
  }
  pthread_mutex_unlock(&r->mu);
  return f;
}

xt_frame *xt_ring_next_planes(xt_ring *r, const uint64_t last_pub[XT_RING_PLANES], unsigned planes, uint64_t *upto) {
  xt_frame *best = NULL;
  pthread_mutex_lock(&r->mu);
  const uint64_t latest = r->next_pub - 1;
  const uint64_t oldest = latest >= XT_RING ? latest - XT_RING + 1 : 1;
  for (int p = 0; p < XT_RING_PLANES; p++) {
    if (!(planes >> p & 1)) continue;
    /* this plane's frames still in the ring after the last one sent: the oldest and the newest */
    xt_frame *first = NULL, *newest = NULL;
    for (uint64_t q = last_pub[p] + 1 > oldest ? last_pub[p] + 1 : oldest; q <= latest; q++) {
      xt_frame *f = r->slots[q % XT_RING];
      if (!f || f->pub != q || plane_of(f) != p) continue;
      if (!first) first = f;
      newest = f;
    }
    /* Free-run frames: latest wins. Lockstep frames answer triggers: in order while in the ring. */
    xt_frame *cand = first && first->lockstep ? first : newest;
    /* Both planes pending: the older first, so a plane whose frames are always the newer one (B is
     * pushed after A in every cycle) cannot hold the other back for ever. */
    if (cand && (!best || cand->pub < best->pub)) best = cand;
  }
  if (best) atomic_fetch_add(&best->refs, 1);
  if (upto) *upto = best ? best->pub - 1 : latest;
  pthread_mutex_unlock(&r->mu);
  return best;
}

void xt_ring_init(xt_ring *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->next_pub = 1;
  r->next_text = 1;
}

void xt_ring_destroy(xt_ring *r) {
  for (int i = 0; i < XT_RING; i++) xt_frame_free(r->slots[i]);
  for (int i = 0; i < 4; i++) xt_frame_free(r->pool[i]);
  for (int i = 0; i < XT_RING_TEXTS; i++) free(r->texts[i]);
  pthread_mutex_destroy(&r->mu);
}
