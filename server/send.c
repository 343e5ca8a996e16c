/* The stream's sender threads (srv_send.h). Every job's socket is in one epoll, armed one-shot
 * while the job waits for room: whichever thread the kernel wakes owns that socket until the socket
 * is full or the message is out, so two threads never write one socket and no thread waits on a
 * full one. Slots outlive their clients (the pool's lifetime) and carry a generation in the epoll
 * data, so an event that fires while its client is being closed is recognised and ignored. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "srv_clock.h"
#include "srv_send.h"

enum { SLOT_FREE, SLOT_IDLE, SLOT_ARMED, SLOT_ACTIVE, SLOT_DONE };

#define QUIT_TAG UINT64_MAX

typedef struct slot {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a thread left SLOT_ACTIVE */
  int state;
  uint32_t gen;      /* bumped when the slot changes hands: stale epoll events are ignored */
  int fd, in_epoll;  /* the socket, and whether it is registered in the pool's epoll */
  atomic_int cancel; /* the owner is releasing the slot: the writing thread stops */
  unsigned char head[XT_SEND_HEAD_MAX];
  size_t head_len;
  const unsigned char *body;
  size_t body_len, off;
  int stamp_at;
  xt_send_result r;
} slot;

struct xt_send_pool {
  int epfd, quitfd;
  int nslots;
  slot *slots;
  pthread_t threads[XT_SEND_MAX_THREADS];
  int nthreads;
  void (*done)(void *ctx);
  void *ctx;
};

static uint64_t tag(int i, uint32_t gen) { return (uint64_t)gen << 32 | (uint32_t)i; }

/* Writes the job from where it stands until it is out (1), the socket is full (0) or broken
 * (-errno). Called by the thread that owns the slot (SLOT_ACTIVE), without its lock. */
static int pump(slot *s) {
  const size_t total = s->head_len + s->body_len;
  while (s->off < total) {
    if (atomic_load(&s->cancel)) return 0;
    struct iovec v[2];
    int nv = 0;
    if (s->off < s->head_len) {
      v[nv++] = (struct iovec){s->head + s->off, s->head_len - s->off};
      if (s->body_len) v[nv++] = (struct iovec){(void *)s->body, s->body_len};
    } else
      v[nv++] = (struct iovec){(void *)(s->body + (s->off - s->head_len)), total - s->off};
    if (s->off == 0) {
      s->r.t_first_ns = xt_dev_now_ns();
      if (s->stamp_at >= 0) memcpy(s->head + s->stamp_at, &s->r.t_first_ns, 8);
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = v;
    mh.msg_iovlen = (size_t)nv;
    const ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -errno;
    }
    s->r.calls++;
    s->off += (size_t)w;
    if (s->off < total) s->r.partial++;
  }
  s->r.t_last_ns = xt_dev_now_ns();
  return 1;
}

static int arm(xt_send_pool *p, int i, slot *s) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = tag(i, s->gen);
  if (s->in_epoll) return epoll_ctl(p->epfd, EPOLL_CTL_MOD, s->fd, &ev);
  if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, s->fd, &ev)) return -1;
  s->in_epoll = 1;
  return 0;
}

static void *sender_main(void *arg) {
  xt_send_pool *p = arg;
  for (;;) {
    struct epoll_event ev;
    const int n = epoll_wait(p->epfd, &ev, 1, -1);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (ev.data.u64 == QUIT_TAG) break;
    const int i = (int)(uint32_t)ev.data.u64;
    if (i < 0 || i >= p->nslots) continue;
    slot *s = &p->slots[i];
    pthread_mutex_lock(&s->mu);
    if (s->gen != (uint32_t)(ev.data.u64 >> 32) || s->state != SLOT_ARMED) {
      pthread_mutex_unlock(&s->mu); /* released or re-armed since: not this event's job any more */
      continue;
    }
    s->state = SLOT_ACTIVE;
    pthread_mutex_unlock(&s->mu);
    const int rc = pump(s);
    int finished = 0;
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->cancel)) s->state = SLOT_IDLE; /* the owner is waiting to release it */
    else if (rc == 0) {
      s->state = SLOT_ARMED;
      if (arm(p, i, s)) {
        s->r.err = errno ? errno : EIO;
        s->state = SLOT_DONE;
        finished = 1;
      }
    } else {
      if (rc < 0) s->r.err = -rc;
      s->state = SLOT_DONE;
      finished = 1;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (finished && p->done) p->done(p->ctx);
  }
  return NULL;
}

xt_send_pool *xt_send_pool_new(int nslots, void (*done)(void *ctx), void *ctx, xt_msg *msg) {
  xt_send_pool *p = calloc(1, sizeof *p);
  if (p) p->slots = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof *p->slots);
  if (!p || !p->slots) {
    free(p);
    xt_fail(msg, XT_ENOMEM, "stream senders: out of memory");
    return NULL;
  }
  p->nslots = nslots;
  p->done = done;
  p->ctx = ctx;
  p->epfd = epoll_create1(EPOLL_CLOEXEC);
  p->quitfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN; /* level-triggered: every thread sees the quit */
  ev.data.u64 = QUIT_TAG;
  if (p->epfd < 0 || p->quitfd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->quitfd, &ev)) {
    if (p->epfd >= 0) close(p->epfd);
    if (p->quitfd >= 0) close(p->quitfd);
    free(p->slots);
    free(p);
    xt_fail(msg, XT_EINTERNAL, "stream senders: cannot make their epoll (%s)", strerror(errno));
    return NULL;
  }
  for (int i = 0; i < nslots; i++) {
    pthread_mutex_init(&p->slots[i].mu, NULL);
    pthread_cond_init(&p->slots[i].cv, NULL);
    p->slots[i].fd = -1;
  }
  return p;
}

int xt_send_pool_start(xt_send_pool *p, int nthreads, xt_msg *msg) {
  if (nthreads < 1 || nthreads > XT_SEND_MAX_THREADS)
    return xt_fail(msg, XT_EINVAL, "stream_senders: %d outside [1, %d]", nthreads, XT_SEND_MAX_THREADS);
  for (p->nthreads = 0; p->nthreads < nthreads; p->nthreads++)
    if (pthread_create(&p->threads[p->nthreads], NULL, sender_main, p)) break;
  return p->nthreads ? 0 : xt_fail(msg, XT_EINTERNAL, "stream senders: cannot start a thread");
}

void xt_send_pool_stop(xt_send_pool *p) {
  if (!p || !p->nthreads) return;
  const uint64_t one = 1;
  if (write(p->quitfd, &one, sizeof one) != (ssize_t)sizeof one) {
    /* a full counter still reads as readable: the threads see the quit either way */
  }
  for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  p->nthreads = 0;
}

void xt_send_pool_free(xt_send_pool *p) {
  if (!p) return;
  xt_send_pool_stop(p);
  for (int i = 0; i < p->nslots; i++) {
    pthread_mutex_destroy(&p->slots[i].mu);
    pthread_cond_destroy(&p->slots[i].cv);
  }
  close(p->epfd);
  close(p->quitfd);
  free(p->slots);
  free(p);
}

int xt_send_pool_threads(const xt_send_pool *p) { return p ? p->nthreads : 0; }

int xt_send_slot_get(xt_send_pool *p) {
  for (int i = 0; i < p->nslots; i++) {
    slot *s = &p->slots[i];
    pthread_mutex_lock(&s->mu);
    const int free_ = s->state == SLOT_FREE;
    if (free_) {
      s->state = SLOT_IDLE;
      s->fd = -1;
      s->in_epoll = 0;
      atomic_store(&s->cancel, 0);
    }
    pthread_mutex_unlock(&s->mu);
    if (free_) return i;
  }
  return -1;
}

void xt_send_slot_put(xt_send_pool *p, int i) {
  if (!p || i < 0 || i >= p->nslots) return;
  slot *s = &p->slots[i];
  pthread_mutex_lock(&s->mu);
  atomic_store(&s->cancel, 1);
  while (s->state == SLOT_ACTIVE) pthread_cond_wait(&s->cv, &s->mu);
  if (s->in_epoll) epoll_ctl(p->epfd, EPOLL_CTL_DEL, s->fd, NULL);
  s->in_epoll = 0;
  s->fd = -1;
  s->gen++;
  s->state = SLOT_FREE;
  atomic_store(&s->cancel, 0);
  pthread_mutex_unlock(&s->mu);
}

unsigned char *xt_send_head(xt_send_pool *p, int i) { return p->slots[i].head; }

int xt_send_begin(xt_send_pool *p, int i, int fd, size_t head_len, const void *body, size_t body_len, int stamp_at) {
  slot *s = &p->slots[i];
  if (head_len > XT_SEND_HEAD_MAX || fd < 0) return -1;
  pthread_mutex_lock(&s->mu);
  int rc = -1;
  if (s->state == SLOT_IDLE) {
    if (s->in_epoll && s->fd != fd) { /* cannot happen while a slot belongs to one client; kept honest */
      epoll_ctl(p->epfd, EPOLL_CTL_DEL, s->fd, NULL);
      s->in_epoll = 0;
    }
    s->fd = fd;
    s->head_len = head_len;
    s->body = body;
    s->body_len = body_len;
    s->off = 0;
    s->stamp_at = stamp_at;
    memset(&s->r, 0, sizeof s->r);
    s->state = SLOT_ARMED;
    rc = arm(p, i, s);
    if (rc) s->state = SLOT_IDLE;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int xt_send_poll(xt_send_pool *p, int i, xt_send_result *r) {
  slot *s = &p->slots[i];
  pthread_mutex_lock(&s->mu);
  const int done = s->state == SLOT_DONE;
  if (done) {
    *r = s->r;
    s->state = SLOT_IDLE;
  }
  pthread_mutex_unlock(&s->mu);
  return done;
}

int xt_send_busy(xt_send_pool *p, int i) {
  slot *s = &p->slots[i];
  pthread_mutex_lock(&s->mu);
  const int busy = s->state == SLOT_ARMED || s->state == SLOT_ACTIVE || s->state == SLOT_DONE;
  pthread_mutex_unlock(&s->mu);
  return busy;
}
