/* The stream's sender threads (send.c): a small pool that writes whole frame messages to stream
 * clients' sockets in parallel, so that one client's 9.5 MB frame does not wait for the others'.
 * Each job is one message to one socket: a few bytes of the client's own (the WebSocket frame
 * header and the start of the stream header, with the client's fields) then the rest straight from
 * the shared ring frame (never copied), by sendmsg() with two iovecs. A thread writes one socket
 * at a time and only while it takes bytes: a socket that is full is handed back to the pool's
 * epoll and waited for there, so a slow client holds no thread. Knows nothing of libwebsockets:
 * the stream (ws.c) keeps libwebsockets off a socket while its job is in flight. */
#ifndef XT_SRV_SEND_H
#define XT_SRV_SEND_H

#include <stddef.h>
#include <stdint.h>

#include "xt_err.h"

#define XT_SEND_MAX_THREADS 64
/* The client's own bytes before the shared ones: a WebSocket frame header (at most 10 bytes from a
 * server) and the stream header up to and including its per-client fields (frames_dropped ends at
 * 72, api/stream.md). */
#define XT_SEND_HEAD_MAX 96

typedef struct xt_send_pool xt_send_pool;

/* A finished job: when its first byte and its last went to the kernel, how many sendmsg() calls
 * it took and how many of them the kernel took only in part. */
typedef struct xt_send_result {
  uint64_t t_first_ns, t_last_ns;
  uint64_t calls, partial;
  int err; /* 0, or the errno that ended it (the connection is then unusable) */
} xt_send_result;

/* A pool of nslots jobs (one per client at most) whose finished jobs are announced by calling
 * done(ctx) from the sender thread (it must only wake the owner). NULL with msg set on failure. */
xt_send_pool *xt_send_pool_new(int nslots, void (*done)(void *ctx), void *ctx, xt_msg *msg);
/* Starts nthreads threads (1..XT_SEND_MAX_THREADS); 0 ok. */
int xt_send_pool_start(xt_send_pool *p, int nthreads, xt_msg *msg);
/* Stops and joins the threads; a job in flight stays as it is (its slot can still be put). */
void xt_send_pool_stop(xt_send_pool *p);
void xt_send_pool_free(xt_send_pool *p);
int xt_send_pool_threads(const xt_send_pool *p);

/* A free slot for a client (-1 when none), and its release: a job in flight is abandoned (waiting
 * for a thread that is writing it to stop, which is one sendmsg() at most) and the socket leaves
 * the pool's epoll, so the caller may close it afterwards. */
int xt_send_slot_get(xt_send_pool *p);
void xt_send_slot_put(xt_send_pool *p, int slot);
/* The slot's own head bytes (XT_SEND_HEAD_MAX), for the owner to fill while no job is in flight. */
unsigned char *xt_send_head(xt_send_pool *p, int slot);
/* Hands the job to the threads: head_len bytes of the slot's head, then body_len bytes at body
 * (which must stay valid and unchanged until the job is finished). The 8 bytes at head offset
 * stamp_at (when >= 0) get the time the first byte is handed to the kernel. 0 ok. */
int xt_send_begin(xt_send_pool *p, int slot, int fd, size_t head_len, const void *body, size_t body_len, int stamp_at);
/* 1: the job finished (or failed: r->err), the slot is free for the next; 0: in flight or none. */
int xt_send_poll(xt_send_pool *p, int slot, xt_send_result *r);
/* 1 while the slot has a job in flight. */
int xt_send_busy(xt_send_pool *p, int slot);

#endif /* XT_SRV_SEND_H */
