/* The frame ring (ring.c): finished frames, each one or two WebSocket messages (header then
 * pixels) with room before them for the framing, published in order into a ring of the newest
 * XT_RING, shared by reference among the clients' sends, and recycled through a small pool; per
 * plane, which frame a client subscribed to some planes gets next; the notifier that tells a
 * reader a frame was pushed. Knows neither the engine nor the stream. */
#ifndef XT_SRV_RING_H
#define XT_SRV_RING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define XT_RING_PLANES 2 /* A and B (XT_STREAM_PLANE_*) */
#define XT_FRAME_CODECS 3 /* XT_STREAM_CODEC_NONE, _ZSTD, _LZ4 */

/* One message of a frame encoded for the wire by the stream (ws.c): the header, its codec and
 * wire_bytes set, then the compressed pixels, with XT_FRAME_PRE bytes of room before it. Made once
 * per frame, message and codec by the first client that asks, reused by every other. Only the
 * stream's service thread reads or writes it while the frame is published; xt_frame_get2 marks it
 * unmade when the frame is taken from the pool again (the buffer is kept for reuse). */
typedef struct xt_frame_wire {
  unsigned char *mem; /* XT_FRAME_PRE bytes of room, then the message; NULL until first needed */
  size_t cap;         /* bytes allocated after XT_FRAME_PRE */
  size_t len;         /* header + compressed payload */
  int state;          /* 0 not made for this frame, 1 made, -1 not smaller than the pixels: send them */
} xt_frame_wire;

typedef struct xt_frame {
  atomic_int refs;
  uint64_t pub;  /* publication number in the ring, 1, 2, ... */
  uint64_t ppub; /* publication number among its plane's frames, 1, 2, ... (gaps: frames missed) */
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
  int proc_ok; /* msg2's pixels are this frame's: 0 when no client read processed frames as it was made */
  int pinned; /* mem from xt_host_alloc (page-locked: the GPU's copy-out lands in it directly) */
  xt_frame_wire wire[2][XT_FRAME_CODECS]; /* [raw 0 / processed 1][codec]: the stream's encodings */
} xt_frame;

#define XT_RING 8
#define XT_RING_TEXTS 64
#define XT_FRAME_PRE 64 /* room before the message for the WebSocket framing (>= LWS_PRE) */

typedef struct xt_ring {
  pthread_mutex_t mu;         /* guards slots, next_pub, pool */
  xt_frame *slots[XT_RING];   /* the newest frames, slots[pub % XT_RING] */
  uint64_t next_pub;          /* pub of the next frame pushed (first is 1) */
  uint64_t plane_pubs[XT_RING_PLANES]; /* frames of each plane pushed so far (the last ppub) */
  xt_frame *pool[4];          /* released buffers kept for reuse */
  int pin;                    /* GPU backend: frames in page-locked memory (made once, reused) */
  /* Who is told that a frame was pushed (the stream's service loop registers itself, ws.c): a
   * callback, so the engine never calls into its readers. Guarded by mu. */
  void (*notify)(void *ctx);
  void *notify_ctx;
  /* CLOCK_MONOTONIC of the newest push (xt_ring_push): a reader's wake-up latency is measured from
   * it (xtwin_stream_wake_seconds) */
  _Atomic uint64_t t_push_ns;
  /* CLOCK_MONOTONIC of the newest xt_ring_expect: a render that will push a frame began */
  _Atomic uint64_t t_expect_ns;
  /* The newest event texts (JSON, the device's state changes: server/device.c), texts[seq %
   * XT_RING_TEXTS], each sent once to every stream client that was connected when it came; guarded
   * by mu. A client more than XT_RING_TEXTS behind loses the oldest. */
  char *texts[XT_RING_TEXTS];
  uint64_t next_text; /* seq of the next text pushed (first is 1) */
} xt_ring;

void xt_frame_unref(xt_ring *r, xt_frame *f);
/* A render that will push a frame began (the stream's service thread may then stay awake for it,
 * --stream-spin-us): stamps t_expect_ns and calls the notifier. */
void xt_ring_expect(xt_ring *r);
/* The frame a client whose last sent frame was last_pub should get next (latest-wins for free
 * run; in order for lockstep frames); NULL when none. Returns a reference. */
xt_frame *xt_ring_next(xt_ring *r, uint64_t last_pub);
/* The same per plane, for a client subscribed to the planes of the mask (bit p: plane p) whose last
 * sent frame of plane p was last_pub[p]: of each plane the frame it would get alone (latest wins;
 * the oldest first while it is a lockstep frame), and of those the older, so that neither plane
 * starves the other. NULL when none; *upto (may be NULL) then gets the newest publication, which the
 * client has nothing left to get up to (else the chosen frame's pub - 1). Returns a reference. */
xt_frame *xt_ring_next_planes(xt_ring *r, const uint64_t last_pub[XT_RING_PLANES], unsigned planes, uint64_t *upto);
/* Frames of plane p (0 A, 1 B) pushed so far: the ppub of its newest. */
uint64_t xt_ring_plane_pubs(xt_ring *r, int p);
/* The newest pub and each plane's frames pushed so far, read together: a client that starts from
 * them is neither sent nor counted as missing anything published before. */
void xt_ring_mark(xt_ring *r, uint64_t *latest, uint64_t plane_pubs[XT_RING_PLANES]);
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
/* Publishes f (its reference passes to the ring; its plane numbers it among the plane's frames: a
 * plane outside 0..XT_RING_PLANES-1 counts as A); the frame it displaces loses the ring's. */
void xt_ring_push(xt_ring *r, xt_frame *f);
/* Caller holds r->mu: f into the pool; returns the buffer that did not fit (or NULL), for the
 * caller to xt_frame_free after unlocking (freeing page-locked memory can wait on the device). */
xt_frame *xt_frame_release_locked(xt_ring *r, xt_frame *f);
void xt_frame_free(xt_frame *f);

#endif /* XT_SRV_RING_H */
