/* The REST port's gate: accepts every connection itself and hands it to libmicrohttpd
 * (MHD_add_connection) only once its whole request head has arrived and looks like HTTP/1.x.
 *
 * Why: libmicrohttpd's idle timeout restarts with every byte, so a client that sends one header
 * line every few seconds holds a connection for ever, and a few hundred of them (slowloris) took
 * every slot; and the errors libmicrohttpd answers by itself (a URI or head beyond its buffer, a
 * malformed request line) are HTML pages. Here:
 *   - each client address may hold at most max_per_addr connections (gate and libmicrohttpd
 *     together); beyond that a new one is answered 503 at once;
 *   - the head must be complete within head_timeout seconds of the accept (408 otherwise),
 *     however it trickles in;
 *   - a head over XT_GATE_HEAD_MAX bytes gets 414 (request line) or 431 (header fields), a
 *     malformed one 400: all with the JSON error body every other error has.
 * The head is only peeked (MSG_PEEK), so libmicrohttpd reads it again from the socket. Every
 * response carries "Connection: close" (rest.c), so each connection carries one request and every
 * request passes the gate. Answers the gate gives itself end in a lingering close: the write side
 * is shut, and what the client still sends is read and discarded for up to XT_GATE_LINGER_S, so
 * that closing with unread data does not reset the connection before the client read the answer.
 * With TLS the head is encrypted: connections are counted per address and handed over at once
 * (libmicrohttpd's idle timeout then applies).
 *
 * One thread, epoll, edge-triggered (a peek leaves the bytes in place, so only new data wakes). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <microhttpd.h>

#include "xt_server.h"

#define XT_GATE_HEAD_MAX 16384 /* request line + header fields */
#define XT_GATE_URI_MAX 8192
#define XT_GATE_PENDING_MAX 1024 /* connections in the gate at once (heads being read, lingering) */
#define XT_GATE_LINGER_S 2.0
#define XT_GATE_ADDRS 2048 /* distinct client addresses tracked at once */

typedef struct gate_addr {
  unsigned char key[16]; /* IPv6, or IPv4-mapped */
  int count;             /* connections open from it (gate + libmicrohttpd) */
} gate_addr;

typedef struct pend {
  int fd;
  struct sockaddr_storage sa;
  socklen_t salen;
  uint64_t deadline;
  int lingering, counted;
  struct pend *next;
} pend;

struct xt_gate {
  xt_server *srv;
  int lfd, efd, wake;
  pthread_t thread;
  int started;
  pend *list;
  int npend;
  pthread_mutex_t mu; /* guards addrs */
  gate_addr addrs[XT_GATE_ADDRS];
};

static void addr_key(const struct sockaddr *sa, unsigned char key[16]) {
  memset(key, 0, 16);
  if (sa->sa_family == AF_INET6) {
    memcpy(key, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
  } else if (sa->sa_family == AF_INET) {
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
  }
}

/* +1 when under the limit (returns 1), or -1 (returns 0 when nothing was counted). */
static int addr_adjust(struct xt_gate *g, const struct sockaddr *sa, int delta, int limit) {
  unsigned char key[16];
  addr_key(sa, key);
  int ok = 0, fre = -1;
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < XT_GATE_ADDRS; i++) {
    gate_addr *a = &g->addrs[i];
    if (a->count == 0) {
      if (fre < 0) fre = i;
      continue;
    }
    if (memcmp(a->key, key, 16)) continue;
    if (delta > 0) {
      if (a->count < limit) a->count++, ok = 1;
    } else
      a->count--, ok = 1;
    fre = -2;
    break;
  }
  if (delta > 0 && fre >= 0) {
    memcpy(g->addrs[fre].key, key, 16);
    g->addrs[fre].count = 1;
    ok = 1;
  }
  pthread_mutex_unlock(&g->mu);
  return ok;
}

void xt_gate_release(xt_server *s, const struct sockaddr *sa) {
  if (s->gate && sa) addr_adjust(s->gate, sa, -1, 0);
}

/* Writes a JSON error answer (best effort: a fresh socket's buffer takes it). */
static void answer(xt_server *s, int fd, int err, int status, const char *reason, const char *message) {
  json_t *e = xt_error_json(err, status, message);
  char *body = json_dumps(e, JSON_INDENT(2));
  json_decref(e);
  char head[256];
  size_t bl = body ? strlen(body) : 0;
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, reason, bl + 1);
  if (n > 0) {
    struct iovec iov[3] = {{head, (size_t)n}, {body, bl}, {(void *)"\n", 1}};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = body ? 3 : 1;
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
  free(body);
  pthread_mutex_lock(&s->metrics.mu);
  s->metrics.rest_requests++;
  s->metrics.rest_errors++;
  if (status == 503 || status == 408) s->metrics.rest_refused++;
  pthread_mutex_unlock(&s->metrics.mu);
}

static void pend_close(struct xt_gate *g, pend *p) {
  epoll_ctl(g->efd, EPOLL_CTL_DEL, p->fd, NULL);
  close(p->fd);
  if (p->counted) addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
  p->fd = -1;
}

/* Answer given: shut the write side, keep reading (and discarding) until EOF or the linger time. */
static void pend_linger(struct xt_gate *g, pend *p) {
  shutdown(p->fd, SHUT_WR);
  p->lingering = 1;
  p->deadline = xt_now_ns() + (uint64_t)(XT_GATE_LINGER_S * 1e9);
  if (p->counted) addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
  p->counted = 0;
}

static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

int xt_gate_check_head(const char *h, size_t len, const char **why) {
  const char *end = h + len, *eol = memchr(h, '\n', len);
  if (!eol) return *why = "no request line", 400;
  const char *p = h;
  while (p < eol && is_tchar((unsigned char)*p)) p++;
  if (p == h || *p != ' ') return *why = "malformed request line (method)", 400;
  const char *t = ++p;
  while (p < eol && *p != ' ') {
    if ((unsigned char)*p < 0x21 || (unsigned char)*p == 0x7f) return *why = "malformed request target", 400;
    p++;
  }
  if (p - t > XT_GATE_URI_MAX) return *why = "request target longer than 8192 bytes", 414;
  if (p == t || *p != ' ') return *why = "malformed request line (target)", 400;
  p++;
  size_t vl = (size_t)(eol - p) - (eol > p && eol[-1] == '\r');
  if (vl != 8 || (memcmp(p, "HTTP/1.1", 8) && memcmp(p, "HTTP/1.0", 8))) return *why = "not HTTP/1.0 or HTTP/1.1", 400;
  for (p = eol + 1; p < end;) {
    const char *e = memchr(p, '\n', (size_t)(end - p));
    if (!e) break;
    size_t ll = (size_t)(e - p) - (e > p && e[-1] == '\r');
    if (ll == 0) break; /* the blank line */
    const char *q = p;
    while (q < p + ll && is_tchar((unsigned char)*q)) q++;
    if (q == p || *q != ':') return *why = "malformed header field", 400;
    for (; q < p + ll; q++)
      if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f) return *why = "control character in a header field", 400;
    p = e + 1;
  }
  return 0;
}

/* Reads what a pending connection has; returns 1 when it left the gate (handed over or closed). */
static int pend_read(struct xt_gate *g, pend *p) {
  xt_server *s = g->srv;
  if (p->lingering) {
    char junk[65536];
    for (;;) {
      ssize_t n = recv(p->fd, junk, sizeof junk, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
      pend_close(g, p);
      return 1;
    }
  }
  static char buf[XT_GATE_HEAD_MAX + 1]; /* gate thread only */
  ssize_t n = recv(p->fd, buf, XT_GATE_HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    pend_close(g, p);
    return 1;
  }
  if (n < 0) return 0;
  size_t hl = 0;
  for (ssize_t i = 0; i + 1 < n; i++) {
    if (buf[i] != '\n') continue;
    if (buf[i + 1] == '\n') {
      hl = (size_t)i + 2;
      break;
    }
    if (i + 2 < n && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
      hl = (size_t)i + 3;
      break;
    }
  }
  const char *why = NULL;
  int status = 0;
  if (!hl) {
    if (n < XT_GATE_HEAD_MAX) {
      /* Not complete yet; a line that cannot start an HTTP request is refused at once. */
      if (n >= 1 && !is_tchar((unsigned char)buf[0])) status = 400, why = "not an HTTP request";
      else return 0;
    } else if (!memchr(buf, '\n', (size_t)n))
      status = 414, why = "request line longer than 16384 bytes";
    else if ((status = xt_gate_check_head(buf, (size_t)n, &why)) == 0)
      status = 431, why = "request head longer than 16384 bytes";
  } else
    status = xt_gate_check_head(buf, hl, &why);
  if (status) {
    answer(s, p->fd, status == 400 ? XT_EFORMAT : XT_ETOOLARGE, status,
           status == 400 ? "Bad Request" : status == 414 ? "URI Too Long" : "Request Header Fields Too Large", why);
    pend_linger(g, p);
    return pend_read(g, p);
  }
  /* A whole, well-formed head: libmicrohttpd takes it from here (and closes the socket itself
   * when it cannot). Its close notification releases the address's count. */
  epoll_ctl(g->efd, EPOLL_CTL_DEL, p->fd, NULL);
  if (MHD_add_connection(s->mhd, p->fd, (struct sockaddr *)&p->sa, p->salen) != MHD_YES && p->counted)
    addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
  p->fd = -1;
  return 1;
}

static void on_accept(struct xt_gate *g) {
  xt_server *s = g->srv;
  for (;;) {
    pend *p = calloc(1, sizeof *p);
    if (!p) return;
    p->salen = sizeof p->sa;
    p->fd = accept4(g->lfd, (struct sockaddr *)&p->sa, &p->salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p->fd < 0) {
      free(p);
      return; /* EAGAIN, or out of descriptors: the backlog waits */
    }
    if (g->npend >= XT_GATE_PENDING_MAX) {
      answer(s, p->fd, XT_EBUSY, 503, "Service Unavailable", "too many connections");
      close(p->fd);
      free(p);
      continue;
    }
    p->counted = addr_adjust(g, (struct sockaddr *)&p->sa, +1, s->cfg.max_per_addr);
    p->deadline = xt_now_ns() + (uint64_t)(s->cfg.head_timeout * 1e9);
    p->next = g->list;
    g->list = p;
    g->npend++;
    struct epoll_event ev = {EPOLLIN | EPOLLRDHUP | EPOLLET, {.ptr = p}};
    epoll_ctl(g->efd, EPOLL_CTL_ADD, p->fd, &ev);
    if (!p->counted) {
      char t[96];
      snprintf(t, sizeof t, "more than %d connections from one address", s->cfg.max_per_addr);
      answer(s, p->fd, XT_EBUSY, 503, "Service Unavailable", t);
      pend_linger(g, p);
    } else if (s->tls) {
      epoll_ctl(g->efd, EPOLL_CTL_DEL, p->fd, NULL);
      if (MHD_add_connection(s->mhd, p->fd, (struct sockaddr *)&p->sa, p->salen) != MHD_YES)
        addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
      p->fd = -1;
    } else
      pend_read(g, p);
  }
}

static void *gate_main(void *arg) {
  struct xt_gate *g = arg;
  xt_server *s = g->srv;
  struct epoll_event evs[64];
  for (;;) {
    /* Sweep: drop finished entries, time out heads and lingers. */
    uint64_t now = xt_now_ns(), next = now + 1000000000ull;
    for (pend **pp = &g->list; *pp;) {
      pend *p = *pp;
      if (p->fd >= 0 && now >= p->deadline) {
        if (p->lingering) pend_close(g, p);
        else {
          char t[96];
          snprintf(t, sizeof t, "request head not complete within %g s", s->cfg.head_timeout);
          answer(s, p->fd, XT_EBUSY, 408, "Request Timeout", t);
          pend_linger(g, p);
        }
      }
      if (p->fd < 0) {
        *pp = p->next;
        g->npend--;
        free(p);
        continue;
      }
      if (p->deadline < next) next = p->deadline;
      pp = &p->next;
    }
    int ms = next > now ? (int)((next - now) / 1000000ull) + 1 : 0;
    int n = epoll_wait(g->efd, evs, 64, ms);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL) return NULL; /* the wake-up: stop */
      if (evs[i].data.ptr == g) on_accept(g);
      else {
        pend *p = evs[i].data.ptr;
        if (p->fd >= 0) pend_read(g, p);
      }
    }
  }
}

int xt_gate_start(xt_server *s, const struct sockaddr *sa, unsigned salen, xt_msg *msg) {
  struct xt_gate *g = calloc(1, sizeof *g);
  if (!g) return xt_fail(msg, XT_ENOMEM, "REST: out of memory");
  g->srv = s;
  g->lfd = g->efd = g->wake = -1;
  pthread_mutex_init(&g->mu, NULL);
  s->gate = g;
  int one = 1;
  g->lfd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(g->lfd, sa, salen) ||
      listen(g->lfd, 512))
    return xt_fail(msg, XT_EIO, "REST: cannot listen on %s:%d: %s", s->cfg.bind, s->cfg.rest_port, strerror(errno));
  struct sockaddr_storage got;
  socklen_t gl = sizeof got;
  getsockname(g->lfd, (struct sockaddr *)&got, &gl);
  s->rest_port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                 : ((struct sockaddr_in *)&got)->sin_port);
  g->efd = epoll_create1(EPOLL_CLOEXEC);
  g->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (g->efd < 0 || g->wake < 0) return xt_fail(msg, XT_EIO, "REST: epoll: %s", strerror(errno));
  struct epoll_event ev = {EPOLLIN, {.ptr = g}};
  epoll_ctl(g->efd, EPOLL_CTL_ADD, g->lfd, &ev);
  struct epoll_event ew = {EPOLLIN, {.ptr = NULL}};
  epoll_ctl(g->efd, EPOLL_CTL_ADD, g->wake, &ew);
  return 0;
}

int xt_gate_run(xt_server *s, xt_msg *msg) {
  if (pthread_create(&s->gate->thread, NULL, gate_main, s->gate))
    return xt_fail(msg, XT_EINTERNAL, "REST: cannot start the accept thread");
  s->gate->started = 1;
  return 0;
}

void xt_gate_stop_accepting(xt_server *s) {
  struct xt_gate *g = s->gate;
  if (!g) return;
  if (g->started) {
    uint64_t one = 1;
    ssize_t w = write(g->wake, &one, sizeof one);
    (void)w;
    pthread_join(g->thread, NULL);
    g->started = 0;
  }
  while (g->list) {
    pend *p = g->list;
    g->list = p->next;
    if (p->fd >= 0) close(p->fd);
    free(p);
  }
  g->npend = 0;
  if (g->lfd >= 0) close(g->lfd);
  g->lfd = -1;
}

void xt_gate_free(xt_server *s) {
  struct xt_gate *g = s->gate;
  if (!g) return;
  xt_gate_stop_accepting(s);
  if (g->efd >= 0) close(g->efd);
  if (g->wake >= 0) close(g->wake);
  pthread_mutex_destroy(&g->mu);
  free(g);
  s->gate = NULL;
}
