/* The frame ring (ring.c): finished frames, each one or two WebSocket messages (header then
 * pixels) with room before them for the framing, published in order into a ring of the newest
 * XT_RING, shared by reference among the clients' sends, and recycled through a small pool; the
 * notifier that tells a reader a frame was pushed. Knows neither the engine nor the stream. */
#ifndef XT_SRV_RING_H
#define XT_SRV_RING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct xt_frame {
  atomic_int refs;
  uint64_t pub; /* publication number in the ring, 1, 2, ... */
  int lockstep;
  int plane;           /* XT_STREAM_PLANE_*: whose frame (a stream client subscribes to planes) */
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
#define XT_RING_TEXTS 64
#define XT_FRAME_PRE 64 /* room before the message for the WebSocket framing (>= LWS_PRE) */

typedef struct xt_ring {
  pthread_mutex_t mu;         /* guards slots, next_pub, pool */
  xt_frame *slots[XT_RING];   /* the newest frames, slots[pub % XT_RING] */
  uint64_t next_pub;          /* pub of the next frame pushed (first is 1) */
  xt_frame *pool[4];          /* released buffers kept for reuse */
  int pin;                    /* GPU backend: frames in page-locked memory (made once, reused) */
  /* Who is told that a frame was pushed (the stream's service loop registers itself, ws.c): a
   * callback, so the engine never calls into its readers. Guarded by mu. */
  void (*notify)(void *ctx);
  void *notify_ctx;
  /* The newest event texts (JSON, the device's state changes: server/device.c), texts[seq %
   * XT_RING_TEXTS], each sent once to every stream client that was connected when it came; guarded
   * by mu. A client more than XT_RING_TEXTS behind loses the oldest. */
  char *texts[XT_RING_TEXTS];
  uint64_t next_text; /* seq of the next text pushed (first is 1) */
} xt_ring;

void xt_frame_unref(xt_ring *r, xt_frame *f);
/* The frame a client whose last sent frame was last_pub should get next (latest-wins for free
 * run; in order for lockstep frames); NULL when none. Returns a reference. */
xt_frame *xt_ring_next(xt_ring *r, uint64_t last_pub);
uint64_t xt_ring_latest_pub(xt_ring *r);
/* Registers fn(ctx) to be called after each frame is pushed (NULL: none). Called from any thread
 * once the engine has started; fn runs on the pushing worker's thread, without the ring's lock. */
void xt_ring_set_notify(xt_ring *r, void (*fn)(void *ctx), void *ctx);
/* Calls the registered notifier, if any. */
void xt_ring_notify(xt_ring *r);
/* An event text (malloc'd; the ring takes it) for every stream client; the pusher then calls
 * xt_ring_notify, outside its own locks. */
void xt_ring_push_text(xt_ring *r, char *text);
/* A copy (malloc'd) of the oldest text held after seq last, its seq in *seq; NULL when none. */
char *xt_ring_text_next(xt_ring *r, uint64_t last, uint64_t *seq);
uint64_t xt_ring_latest_text(xt_ring *r);

void xt_ring_init(xt_ring *r);
/* Frees every frame still held (no reader may be left). */
void xt_ring_destroy(xt_ring *r);
/* A frame of one message of len bytes, or (len2 > 0) two: the raw then the processed frame's;
 * one reference, from the pool when a buffer there is large enough. NULL: out of memory. */
xt_frame *xt_frame_get2(xt_ring *r, size_t len, size_t len2);
xt_frame *xt_frame_get(xt_ring *r, size_t len);
/* Publishes f (its reference passes to the ring); the frame it displaces loses the ring's. */
void xt_ring_push(xt_ring *r, xt_frame *f);
/* Caller holds r->mu: f into the pool; returns the buffer that did not fit (or NULL), for the
 * caller to xt_frame_free after unlocking (freeing page-locked memory can wait on the device). */
xt_frame *xt_frame_release_locked(xt_ring *r, xt_frame *f);
void xt_frame_free(xt_frame *f);

#endif /* XT_SRV_RING_H */
