/* The REST port's gate: accepts every connection itself and hands it to libmicrohttpd
 * (MHD_add_connection) only once its whole request, head and body, has arrived and passed the
 * checks on its head.
 *
 * Why: libmicrohttpd's idle timeout restarts with every byte, so a client that sends one byte
 * every few seconds holds one of its connection slots for ever, and a few hundred of them took
 * every slot: first with slow heads (slowloris), then with slow bodies (a complete PUT head, then
 * a body byte every 5 s). And the errors libmicrohttpd answers by itself (a URI or head beyond its
 * buffer, a malformed request line, a bad Content-Length or chunk size) are HTML pages, some sent
 * twice. Here, with no libmicrohttpd slot spent on a connection until its request is complete:
 *   - each client address may hold at most max_per_addr connections, counted from the accept
 *     until the socket is closed, whoever holds it (head, body, lingering after an answer,
 *     libmicrohttpd); beyond that a new one is answered 503 at once;
 *   - the head must be complete within head_timeout s of the accept, head and body within
 *     request_timeout s, and once the head is in, the body must average min_body_rate bytes/s
 *     (after a second of grace): 408 otherwise;
 *   - the head is judged before any body byte is read: its syntax (400; 414/431 when over
 *     XT_GATE_HEAD_MAX), its framing (Content-Length digits only and one value, one Host, chunked
 *     the only Transfer-Encoding and never with a Content-Length: 400/501), then Host, Origin,
 *     the token, the announced size and the content type (guard.c: 403/401/413/415);
 *   - a chunked body's framing is checked as it arrives (400 on a bad chunk size, 413 over
 *     max_body).
 * Every answer the gate gives is one JSON error response, then a lingering close: the write side
 * is shut and what the client still sends is read and discarded (while it keeps coming at
 * min_body_rate, for up to request_timeout) so that a client still uploading reads the answer
 * instead of a reset. The gate holds XT_GATE_PENDING_MAX connections at most; when it is full,
 * the one answered longest ago gives way to a new one (only when none has been answered is a new
 * one refused 503), so refused clients reconnecting at once cannot keep another address out.
 *
 * Nothing is read off a socket that is handed over: the gate only peeks (MSG_PEEK) and asks how
 * much is queued (FIONREAD), so libmicrohttpd reads head and body from the socket itself. The
 * whole request must therefore fit in the socket's receive buffer: the listening socket asks for
 * room for twice XT_GATE_HEAD_MAX + max_body (twice: the kernel counts its own bookkeeping per
 * segment against the same buffer), and a request that cannot fit what the kernel granted is
 * refused 413 (xt_gate_capacity; the server says so at start when that is below max_body).
 * Every response carries "Connection: close" (rest.c), so each connection carries one request
 * and every request passes the gate.
 * With TLS the head is encrypted: connections are counted per address and handed over at once
 * (libmicrohttpd's idle timeout then applies, and rest.c runs the head checks).
 *
 * One thread, epoll, edge-triggered (a peek leaves the bytes in place, so only new data wakes). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <microhttpd.h>

#include "srv_clock.h"
#include "srv_guard.h"
#include "srv_metrics.h"
#include "srv_state.h"
#include "xt_server.h"

#define XT_GATE_HEAD_MAX 16384 /* request line + header fields */
#define XT_GATE_URI_MAX 8192
#define XT_GATE_PENDING_MAX 1024 /* connections in the gate at once (heads, bodies, lingering) */
#define XT_GATE_LINGER_S 2.0     /* a lingering close lasts at least this long ... */
#define XT_GATE_DRAIN ((size_t)256 << 20) /* ... and discards at most this many bytes */
#define XT_GATE_GRACE_S 1.0      /* the body's first second is not held to min_body_rate */
#define XT_GATE_ADDRS 2048       /* distinct client addresses tracked at once */

typedef struct gate_addr {
  unsigned char key[16]; /* IPv6, or IPv4-mapped */
  int count;             /* connections open from it (gate + libmicrohttpd) */
} gate_addr;

enum { P_HEAD, P_BODY, P_LINGER };

typedef struct pend {
  int fd;
  struct sockaddr_storage sa;
  socklen_t salen;
  int state, counted;
  uint64_t t_accept, t_phase, deadline; /* t_phase: when the head was complete, or the linger began */
  size_t hl;        /* head bytes (with the blank line) */
  size_t need;      /* Content-Length bodies: head + body bytes */
  int chunked;
  size_t have;      /* body: bytes queued at the last look, head included; linger: bytes discarded */
  struct pend *next;
} pend;

struct xt_gate {
  xt_server *srv;
  int lfd, efd, wake;
  pthread_t thread;
  int started;
  pend *list;
  int npend; /* entries on the list, closed ones included until the sweep frees them */
  int nopen; /* of those, with their socket still in the gate: what XT_GATE_PENDING_MAX bounds */
  size_t cap;  /* head + body bytes a socket's receive buffer holds (what the kernel granted) */
  char *buf;   /* cap + 1 bytes: what a peek copies (gate thread only) */
  pthread_mutex_t mu; /* guards addrs */
  gate_addr addrs[XT_GATE_ADDRS];
};

static uint64_t secs_ns(double s) { return (uint64_t)(s * 1e9); }

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

size_t xt_gate_capacity(const xt_server *s) { return s->gate ? s->gate->cap : 0; }

static const char *reason(int status) {
  switch (status) {
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 408: return "Request Timeout";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 431: return "Request Header Fields Too Large";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  default: return "Error";
  }
}

/* Writes the one JSON error response of a refused request (best effort: the socket's send buffer
 * is empty, and the answer is far smaller). extra: one more header line ("Name: value") or NULL. */
static void answer(xt_server *s, int fd, int err, int status, const char *message, const char *extra) {
  json_t *e = xt_error_json(err, status, message);
  char *body = json_dumps(e, JSON_INDENT(2));
  json_decref(e);
  char head[384];
  size_t bl = body ? strlen(body) : 0;
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s%sConnection: "
                   "close\r\n\r\n",
                   status, reason(status), bl + 1, extra ? extra : "", extra ? "\r\n" : "");
  if (n > 0 && (size_t)n < sizeof head) {
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
  g->nopen--;
  epoll_ctl(g->efd, EPOLL_CTL_DEL, p->fd, NULL);
  close(p->fd);
  if (p->counted) addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
  p->counted = 0;
  p->fd = -1;
}

/* When a lingering close gives up: LINGER_S after it began at the earliest; later while the
 * client keeps sending at min_body_rate, up to request_timeout. */
static uint64_t linger_deadline(const xt_server *s, const pend *p) {
  uint64_t lo = p->t_phase + secs_ns(XT_GATE_LINGER_S), hi = p->t_phase + secs_ns(s->cfg.request_timeout);
  if (hi < lo) hi = lo;
  if (s->cfg.min_body_rate <= 0) return hi;
  uint64_t d = lo + secs_ns((double)p->have / s->cfg.min_body_rate);
  return d < hi ? d : hi;
}

/* When the request must be complete: its head within head_timeout (and request_timeout) of the
 * accept; its body within request_timeout, and never below min_body_rate since the head. */
static uint64_t request_deadline(const xt_server *s, const pend *p) {
  uint64_t d = p->t_accept + secs_ns(s->cfg.request_timeout);
  if (p->state == P_HEAD) {
    uint64_t h = p->t_accept + secs_ns(s->cfg.head_timeout);
    return h < d ? h : d;
  }
  if (s->cfg.min_body_rate > 0) {
    size_t body = p->have > p->hl ? p->have - p->hl : 0;
    uint64_t r = p->t_phase + secs_ns(XT_GATE_GRACE_S + (double)body / s->cfg.min_body_rate);
    if (r < d) d = r;
  }
  return d;
}

/* Answer given: shut the write side, keep reading (and discarding) until EOF or the linger time.
 * The connection still counts against its address until it is closed. */
static void pend_linger(struct xt_gate *g, pend *p) {
  shutdown(p->fd, SHUT_WR);
  p->state = P_LINGER;
  p->t_phase = xt_now_ns();
  p->have = 0;
  p->deadline = linger_deadline(g->srv, p);
}

static void refuse(struct xt_gate *g, pend *p, int err, int status, const char *why, const char *extra) {
  answer(g->srv, p->fd, err, status, why, extra);
  pend_linger(g, p);
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

/* ---- the head's fields -------------------------------------------------------------------- */

typedef struct head_fields {
  xt_head h;
  int expect_continue;
  char text[XT_GATE_HEAD_MAX + 1]; /* the head copied, values cut out in place */
} head_fields;

/* Splits a head that xt_gate_check_head accepted into the fields the checks read, and judges its
 * framing (the things libmicrohttpd would otherwise answer with its own page, or accept): 0, or
 * the status to answer with *why set. */
static int head_parse(const char *raw, size_t hl, long long max_body, head_fields *f, const char **why) {
  memset(&f->h, 0, sizeof f->h);
  f->h.content_length = -1;
  f->expect_continue = 0;
  memcpy(f->text, raw, hl);
  f->text[hl] = 0;
  char *p = f->text, *eol = strchr(p, '\n');
  *eol = 0;
  if (eol > p && eol[-1] == '\r') eol[-1] = 0;
  char *sp = strchr(p, ' ');
  *sp = 0;
  f->h.method = p;
  char *target = sp + 1, *sp2 = strchr(target, ' ');
  *sp2 = 0;
  f->h.http10 = !strcmp(sp2 + 1, "HTTP/1.0");
  target[strcspn(target, "?")] = 0;
  f->h.path = target;
  int nhost = 0, ncl = 0;
  for (p = eol + 1; *p && *p != '\r' && *p != '\n';) {
    eol = strchr(p, '\n');
    char *next = eol + 1;
    *eol = 0;
    if (eol > p && eol[-1] == '\r') *--eol = 0;
    char *colon = strchr(p, ':'), *v = colon + 1;
    *colon = 0;
    while (*v == ' ' || *v == '\t') v++;
    int trailing = eol > v && (eol[-1] == ' ' || eol[-1] == '\t');
    while (eol > v && (eol[-1] == ' ' || eol[-1] == '\t')) *--eol = 0;
    if (!strcasecmp(p, "Host")) {
      if (nhost++) return *why = "more than one Host header", 400;
      f->h.host = v;
    } else if (!strcasecmp(p, "Content-Length")) {
      /* 1*DIGIT, and every copy the same number (RFC 9110 8.6): anything else leaves the body's
       * end in doubt, which is how requests are smuggled past a proxy. */
      if (!*v || strspn(v, "0123456789") != strlen(v)) return *why = "Content-Length is not a number", 400;
      /* RFC 9110 lets a parser drop it; libmicrohttpd 0.9 does not, and answers with its own page */
      if (trailing) return *why = "Content-Length with whitespace after the number", 400;
      long long n = 0;
      for (const char *d = v; *d; d++) n = n > max_body ? n : n * 10 + (*d - '0'); /* saturates past max_body */
      if (ncl++ && n != f->h.content_length) return *why = "Content-Length headers that differ", 400;
      f->h.content_length = n;
    } else if (!strcasecmp(p, "Transfer-Encoding")) {
      if (f->h.transfer_encoding) return *why = "more than one Transfer-Encoding header", 400;
      f->h.transfer_encoding = v;
    } else if (!strcasecmp(p, "Origin") && !f->h.origin) {
      f->h.origin = v;
    } else if (!strcasecmp(p, "Authorization") && !f->h.authorization) {
      f->h.authorization = v;
    } else if (!strcasecmp(p, "Content-Type") && !f->h.content_type) {
      f->h.content_type = v;
    } else if (!strcasecmp(p, "Expect")) {
      f->expect_continue = !strcasecmp(v, "100-continue");
    }
    p = next;
  }
  if (f->h.transfer_encoding) {
    if (f->h.http10) return *why = "Transfer-Encoding in an HTTP/1.0 request", 400;
    if (f->h.content_length >= 0) return *why = "both Transfer-Encoding and Content-Length", 400;
    if (strcasecmp(f->h.transfer_encoding, "chunked"))
      return *why = "Transfer-Encoding other than chunked", 501;
  }
  return 0;
}

/* A chunked body's framing in b[0, n): 1 complete (*len: its bytes on the wire), 0 not yet, or
 * -status (400 a malformed chunk, 413 over max_body) with *why set. */
static int chunked_scan(const char *b, size_t n, size_t max_body, size_t *len, const char **why) {
  size_t i = 0, total = 0;
  for (;;) {
    size_t size = 0, digits = 0;
    while (i < n && b[i] && strchr("0123456789abcdefABCDEF", b[i])) {
      int d = b[i] <= '9' ? b[i] - '0' : (b[i] | 0x20) - 'a' + 10;
      if (size > max_body) size = max_body + 1; /* saturates: only "over the limit" matters */
      else size = size * 16 + (size_t)d;
      i++, digits++;
    }
    if (i == n) return 0;
    if (!digits || (b[i] != '\r' && b[i] != '\n' && b[i] != ';' && b[i] != ' ' && b[i] != '\t'))
      return *why = "malformed chunk size", -400;
    if ((total += size) > max_body) return *why = "request body over max_body bytes", -413;
    const char *e = memchr(b + i, '\n', n - i); /* chunk extensions are skipped */
    if (!e) return 0;
    for (const char *c = b + i; c < e; c++)
      if ((unsigned char)*c < 0x20 && *c != '\t' && !(*c == '\r' && c + 1 == e)) return *why = "malformed chunk size", -400;
    i = (size_t)(e - b) + 1;
    if (size == 0) break;
    if (n - i < size + 1) return 0;
    i += size;
    if (b[i] == '\r') {
      if (i + 1 >= n) return 0;
      i++;
    }
    if (b[i] != '\n') return *why = "chunk data longer than its size", -400;
    i++;
  }
  for (;;) { /* trailer fields, then the blank line */
    const char *e = memchr(b + i, '\n', n - i);
    if (!e) return 0;
    size_t ll = (size_t)(e - (b + i)) - (e > b + i && e[-1] == '\r');
    i = (size_t)(e - b) + 1;
    if (ll == 0) break;
  }
  *len = i;
  return 1;
}

/* ---- connections -------------------------------------------------------------------------- */

/* The request is complete: libmicrohttpd takes it from here (and closes the socket itself when it
 * cannot). Its close notification releases the address's count. */
static void hand_over(struct xt_gate *g, pend *p) {
  g->nopen--;
  epoll_ctl(g->efd, EPOLL_CTL_DEL, p->fd, NULL);
  if (MHD_add_connection(g->srv->mhd, p->fd, (struct sockaddr *)&p->sa, p->salen) != MHD_YES && p->counted)
    addr_adjust(g, (struct sockaddr *)&p->sa, -1, 0);
  p->counted = 0;
  p->fd = -1;
}

/* A connection in its body phase: hands it over once the body is in; 1 when it left the gate. */
static int pend_body(struct xt_gate *g, pend *p) {
  xt_server *s = g->srv;
  if (!p->chunked) {
    int q = 0;
    if (ioctl(p->fd, FIONREAD, &q) == 0 && q > 0) p->have = (size_t)q;
    if (p->have >= p->need) {
      hand_over(g, p);
      return 1;
    }
  } else {
    ssize_t n = recv(p->fd, g->buf, g->cap, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
      p->have = (size_t)n;
      size_t len = 0;
      const char *why = NULL;
      int rc = chunked_scan(g->buf + p->hl, (size_t)n - p->hl, (size_t)s->cfg.max_body, &len, &why);
      if (rc == 1) {
        hand_over(g, p);
        return 1;
      }
      if (rc < 0 || (size_t)n >= g->cap) {
        char t[160];
        if (rc == -413 || rc == 0) snprintf(t, sizeof t, "request body over %d bytes", rc ? s->cfg.max_body : (int)g->cap);
        else snprintf(t, sizeof t, "chunked body: %s", why);
        refuse(g, p, rc == -400 ? XT_EFORMAT : XT_ETOOLARGE, rc == -400 ? 400 : 413, t, NULL);
        return 0;
      }
    }
  }
  p->deadline = request_deadline(s, p);
  return 0;
}

/* Reads what a pending connection has; returns 1 when it left the gate (handed over or closed).
 * hup: the client shut its sending side (or the connection broke): a head or body not complete
 * by now never will be. */
static int pend_read(struct xt_gate *g, pend *p, int hup) {
  xt_server *s = g->srv;
  if (p->state == P_LINGER) {
    char junk[65536];
    for (;;) {
      ssize_t n = recv(p->fd, junk, sizeof junk, MSG_DONTWAIT);
      if (n > 0 && (p->have += (size_t)n) <= XT_GATE_DRAIN) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        p->deadline = linger_deadline(s, p);
        return 0;
      }
      pend_close(g, p);
      return 1;
    }
  }
  if (p->state == P_BODY) {
    if (pend_body(g, p)) return 1;
    if (p->state == P_LINGER) return pend_read(g, p, 0);
    if (!hup) return 0;
    refuse(g, p, XT_EFORMAT, 400, "the client closed its side before the request body was complete", NULL);
    return pend_read(g, p, 0);
  }
  static head_fields f; /* gate thread only */
  char *buf = g->buf;
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
      else if (hup) status = 400, why = "the client closed its side before the request head was complete";
      else return 0;
    } else if (!memchr(buf, '\n', (size_t)n))
      status = 414, why = "request line longer than 16384 bytes";
    else if ((status = xt_gate_check_head(buf, (size_t)n, &why)) == 0)
      status = 431, why = "request head longer than 16384 bytes";
  } else if (!(status = xt_gate_check_head(buf, hl, &why)))
    status = head_parse(buf, hl, s->cfg.max_body, &f, &why);
  if (status) {
    refuse(g, p, status == 400 ? XT_EFORMAT : status == 501 ? XT_EUNSUPPORTED : XT_ETOOLARGE, status, why, NULL);
    return pend_read(g, p, 0);
  }
  /* Who may ask, and what it may send (guard.c): judged on the head, before any body is read. */
  char t[400];
  int err = 0;
  if ((status = xt_guard_request(s, &f.h, &err, t, sizeof t))) {
    refuse(g, p, err, status, t, status == 401 ? "WWW-Authenticate: Bearer realm=\"xtwin\"" : NULL);
    return pend_read(g, p, 0);
  }
  p->hl = hl;
  p->chunked = f.h.transfer_encoding != NULL;
  p->need = hl + (size_t)(f.h.content_length > 0 ? f.h.content_length : 0);
  if (!p->chunked && p->need == hl) {
    hand_over(g, p);
    return 1;
  }
  if (!p->chunked && p->need > g->cap) {
    snprintf(t, sizeof t, "request body over %zu bytes (what this system's socket receive buffer holds)", g->cap - hl);
    refuse(g, p, XT_ETOOLARGE, 413, t, NULL);
    return pend_read(g, p, 0);
  }
  p->state = P_BODY;
  p->t_phase = xt_now_ns();
  p->have = (size_t)n;
  if (pend_body(g, p)) return 1;
  if (p->state == P_LINGER) return pend_read(g, p, 0);
  if (f.expect_continue && !f.h.http10) {
    /* The client waits for this before it sends the body (libmicrohttpd may send its own again
     * once it has the connection: a client skips any number of 100 responses). */
    ssize_t w = send(p->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
  return 0;
}

/* Room for one more connection in the gate. Closed entries do not count (they leave the list at
 * the next sweep: an event already fetched may still name them); when every slot is open, the
 * connection answered longest ago (lingering only so that its answer arrives) gives way, so a storm
 * of refused clients reconnecting at once cannot keep another address out. 0: every slot holds a
 * request still being read. */
static int make_room(struct xt_gate *g) {
  if (g->nopen < XT_GATE_PENDING_MAX) return 1;
  pend *old = NULL;
  for (pend *p = g->list; p; p = p->next)
    if (p->fd >= 0 && p->state == P_LINGER && (!old || p->t_phase < old->t_phase)) old = p;
  if (!old) return 0;
  pend_close(g, old);
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
    if (!make_room(g)) {
      answer(s, p->fd, XT_EBUSY, 503, "too many connections", NULL);
      close(p->fd);
      free(p);
      continue;
    }
    p->counted = addr_adjust(g, (struct sockaddr *)&p->sa, +1, s->cfg.max_per_addr);
    p->t_accept = xt_now_ns();
    p->state = P_HEAD;
    p->deadline = request_deadline(s, p);
    p->next = g->list;
    g->list = p;
    g->npend++;
    g->nopen++;
    struct epoll_event ev = {EPOLLIN | EPOLLRDHUP | EPOLLET, {.ptr = p}};
    epoll_ctl(g->efd, EPOLL_CTL_ADD, p->fd, &ev);
    if (!p->counted) {
      char t[96];
      snprintf(t, sizeof t, "more than %d connections from one address", s->cfg.max_per_addr);
      refuse(g, p, XT_EBUSY, 503, t, NULL);
    } else if (s->tls) {
      hand_over(g, p);
    } else
      pend_read(g, p, 0);
  }
}

static void *gate_main(void *arg) {
  struct xt_gate *g = arg;
  xt_server *s = g->srv;
  struct epoll_event evs[64];
  for (;;) {
    /* Sweep: drop finished entries; time out heads, bodies and lingers. */
    uint64_t now = xt_now_ns(), next = now + 1000000000ull;
    for (pend **pp = &g->list; *pp;) {
      pend *p = *pp;
      if (p->fd >= 0 && now >= p->deadline) {
        if (p->state == P_LINGER) pend_close(g, p);
        else if (p->state == P_HEAD || !pend_body(g, p)) {
          if (p->fd >= 0 && p->state != P_LINGER && now >= p->deadline) {
            char t[160];
            if (p->state == P_HEAD)
              snprintf(t, sizeof t, "request head not complete within %g s",
                       s->cfg.head_timeout < s->cfg.request_timeout ? s->cfg.head_timeout : s->cfg.request_timeout);
            else if (now >= p->t_accept + secs_ns(s->cfg.request_timeout))
              snprintf(t, sizeof t, "request not complete within %g s", s->cfg.request_timeout);
            else
              snprintf(t, sizeof t, "request body arriving slower than %d bytes/s", s->cfg.min_body_rate);
            refuse(g, p, XT_EBUSY, 408, t, NULL);
          }
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
        if (p->fd >= 0) pend_read(g, p, (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
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
  /* Room for a whole request in each accepted socket's receive buffer (they inherit the
   * listener's, and the window they announce follows from it), twice over for the kernel's
   * per-segment bookkeeping; the kernel doubles what is asked and reads back the doubled size. */
  size_t want = (size_t)XT_GATE_HEAD_MAX + (size_t)s->cfg.max_body;
  int ask = (int)(2 * want), granted = 0;
  socklen_t il = sizeof granted;
  if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      setsockopt(g->lfd, SOL_SOCKET, SO_RCVBUF, &ask, sizeof ask) ||
      getsockopt(g->lfd, SOL_SOCKET, SO_RCVBUF, &granted, &il) || bind(g->lfd, sa, salen) || listen(g->lfd, 512))
    return xt_fail(msg, XT_EIO, "REST: cannot listen on %s:%d: %s", s->cfg.bind, s->cfg.rest_port, strerror(errno));
  g->cap = (size_t)granted / 4;
  if (g->cap < XT_GATE_HEAD_MAX) g->cap = XT_GATE_HEAD_MAX;
  if (g->cap < want)
    fprintf(stderr,
            "xtwin-server: the kernel grants %d bytes of socket receive buffer (net.core.rmem_max): REST request "
            "bodies over about %zu bytes are refused (413), below max_body %d\n",
            granted, g->cap - XT_GATE_HEAD_MAX, s->cfg.max_body);
  if (!(g->buf = malloc(g->cap + 1))) return xt_fail(msg, XT_ENOMEM, "REST: out of memory");
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
  g->npend = g->nopen = 0;
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
  free(g->buf);
  free(g);
  s->gate = NULL;
}
