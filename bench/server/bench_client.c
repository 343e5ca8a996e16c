/* Stream benchmark client: N WebSocket clients (a libwebsockets context and thread each) on an
 * xtwin-server stream for a fixed time. Client 0 also sends pose updates at --pose-hz and times
 * each until the first frame carrying its sequence number arrives (pose-to-frame latency, on the
 * shared CLOCK_MONOTONIC of a loopback client). Only the frame header is kept; pixels are
 * counted, not copied.
 *
 *   bench_server_client --port 8711 --clients 4 --seconds 60 --pose-hz 10 [--json out.json] [--csv frames.csv]
 *                       [--lws] [--tls] [--rx-buf BYTES]
 *
 * Clients read with plain sockets (raw_main) unless --lws or --tls; pose updates come at random
 * waits of 0.5-1.5 / pose-hz so that they sample every phase of the exposure clock.
 *
 * Prints a JSON summary: per client frames, counter gaps, frames_dropped reported by the server;
 * exposure jitter (actual - scheduled), period jitter (|interval - T| between consecutive
 * exposures), arrival-period jitter, exposure-to-arrival latency, pose-to-frame latency:
 * p50/p99/max in ms. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "xt_stream.h"

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

typedef struct series {
  double *v;
  size_t n, cap;
} series;

static void push(series *s, double x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    double *p = realloc(s->v, cap * sizeof *p);
    if (!p) return;
    s->v = p;
    s->cap = cap;
  }
  s->v[s->n++] = x;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(series *s, double p) {
  if (!s->n) return NAN;
  qsort(s->v, s->n, sizeof *s->v, cmp);
  size_t i = (size_t)ceil(p / 100.0 * (double)s->n);
  if (i > 0) i--;
  if (i >= s->n) i = s->n - 1;
  return s->v[i];
}

typedef struct bclient {
  int index;
  const char *host, *path, *token;
  int port, tls;
  int plane_b; /* pose updates go to plane B (a biplane server: "plane": "B", the lateral stand's range) */
  double pose_hz, seconds;
  pthread_t thread;
  struct lws_context *ctx;
  struct lws *wsi;
  int connected, failed, closed;
  /* message assembly */
  unsigned char hdr[XT_STREAM_HEADER_SIZE];
  size_t got;
  /* results */
  uint64_t frames, gaps, last_counter, server_dropped, bytes;
  uint64_t prev_exposure, prev_arrival, period_ns;
  series jitter, period_jit, arrival_jit, latency, pose_lat;
  series render, queue, xfer; /* exposure -> render done -> handed to the socket -> fully received */
  series trace;               /* --csv: 9 values a frame (see dump_csv) */
  /* pose updates (client 0) */
  uint64_t next_pose_at, seq, pending_seq, pending_t, rng;
  char text[256];
  int want_send;
} bclient;

static atomic_int stop_all;
static int want_trace;
static unsigned rx_buf = 1u << 20;
static int use_lws;

/* The next pose update's text: primary angles stepping through 120 degrees (plane A: RAO 60 ..
 * LAO 59; plane B: LAO 0 .. 119, inside the lateral stand's range). */
static int pose_text(const bclient *c, char *t, size_t cap) {
  const double a = (double)((c->seq * 7) % 120) - (c->plane_b ? 0.0 : 60.0);
  return snprintf(t, cap, "{\"type\":\"pose\",%s\"seq\":%llu,\"pose\":{\"primary_deg\":%.1f}}",
                  c->plane_b ? "\"plane\":\"B\"," : "", (unsigned long long)c->seq, a);
}

/* The wait before the next pose update: 1/pose_hz scaled by a uniform factor in [0.5, 1.5) from
 * a fixed-seed generator. A fixed 10 Hz would keep every update at one phase of the 60 fps
 * exposure clock (100 ms = 6 periods), so the latency would depend on that phase alone. */
static uint64_t pose_wait_ns(bclient *c) {
  c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
  double u = (double)(c->rng >> 11) * (1.0 / 9007199254740992.0);
  return (uint64_t)((0.5 + u) * 1e9 / c->pose_hz);
}

/* A whole binary message has arrived at t: its first XT_STREAM_HEADER_SIZE bytes are in c->hdr. */
static void on_frame(bclient *c, uint64_t t, size_t total) {
  xt_stream_header h;
  memcpy(&h, c->hdr, sizeof h);
  if (h.magic != XT_STREAM_MAGIC || total != h.header_size + h.payload_bytes) {
    fprintf(stderr, "client %d: bad frame (magic %x, %zu bytes)\n", c->index, h.magic, total);
    c->failed = 1;
    return;
  }
  if (c->frames && h.frame_counter > c->last_counter + 1) c->gaps += h.frame_counter - c->last_counter - 1;
  if (c->frames && h.frame_counter == c->last_counter + 1) {
    double T = (double)h.period_ns;
    push(&c->period_jit, fabs((double)(h.t_exposure_ns - c->prev_exposure) - T) * 1e-6);
    push(&c->arrival_jit, fabs((double)(t - c->prev_arrival) - T) * 1e-6);
  }
  c->prev_exposure = h.t_exposure_ns;
  c->prev_arrival = t;
  c->period_ns = h.period_ns;
  c->last_counter = h.frame_counter;
  c->server_dropped = h.frames_dropped;
  c->frames++;
  c->bytes += total;
  push(&c->jitter, (double)(h.t_exposure_ns - h.t_exposure_sched_ns) * 1e-6);
  push(&c->latency, (double)(t - h.t_exposure_ns) * 1e-6);
  push(&c->render, (double)(h.t_render_done_ns - h.t_exposure_ns) * 1e-6);
  push(&c->queue, (double)(h.t_sent_ns - h.t_render_done_ns) * 1e-6);
  push(&c->xfer, (double)(t - h.t_sent_ns) * 1e-6);
  if (want_trace) {
    double row[9] = {(double)h.frame_counter, (double)h.pose_seq, (double)h.t_exposure_sched_ns,
                     (double)h.t_exposure_ns, (double)h.t_render_done_ns, (double)h.t_sent_ns, (double)t,
                     (double)h.frames_dropped, (double)h.t_pose_ns};
    for (int k = 0; k < 9; k++) push(&c->trace, row[k]);
  }
  if (c->pending_seq && h.pose_seq >= c->pending_seq) {
    push(&c->pose_lat, (double)(t - c->pending_t) * 1e-6);
    c->pending_seq = 0;
  }
}

static int cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  bclient *c = lws_context_user(lws_get_context(wsi));
  switch (reason) {
  case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
    if (c->token) {
      unsigned char **p = (unsigned char **)in, *end = (*p) + len;
      char v[300];
      snprintf(v, sizeof v, "Bearer %s", c->token);
      if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, (unsigned char *)v, (int)strlen(v), p, end))
        return -1;
    }
    break;
  case LWS_CALLBACK_CLIENT_ESTABLISHED:
    c->connected = 1;
    if (c->pose_hz > 0) lws_set_timer_usecs(wsi, (lws_usec_t)(pose_wait_ns(c) / 1000));
    break;
  case LWS_CALLBACK_TIMER:
    if (c->pose_hz > 0 && !c->pending_seq) {
      c->seq++;
      pose_text(c, (char *)c->text + LWS_PRE, sizeof c->text - LWS_PRE);
      c->want_send = 1;
      lws_callback_on_writable(wsi);
    }
    if (c->pose_hz > 0) lws_set_timer_usecs(wsi, (lws_usec_t)(pose_wait_ns(c) / 1000));
    break;
  case LWS_CALLBACK_CLIENT_WRITEABLE:
    if (c->want_send) {
      size_t n = strlen(c->text + LWS_PRE);
      c->pending_seq = c->seq;
      c->pending_t = now_ns();
      if (lws_write(wsi, (unsigned char *)c->text + LWS_PRE, n, LWS_WRITE_TEXT) < (int)n) return -1;
      c->want_send = 0;
    }
    break;
  case LWS_CALLBACK_CLIENT_RECEIVE: {
    if (!lws_frame_is_binary(wsi)) break; /* hello, acks */
    if (c->got < XT_STREAM_HEADER_SIZE) {
      size_t k = len < XT_STREAM_HEADER_SIZE - c->got ? len : XT_STREAM_HEADER_SIZE - c->got;
      memcpy(c->hdr + c->got, in, k);
    }
    c->got += len;
    if (!(lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi))) break;
    size_t total = c->got;
    c->got = 0;
    on_frame(c, now_ns(), total);
    break;
  }
  case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
    fprintf(stderr, "client %d: connection error: %s\n", c->index, in ? (const char *)in : "");
    c->failed = 1;
    c->closed = 1;
    break;
  case LWS_CALLBACK_CLIENT_CLOSED:
    c->closed = 1;
    break;
  default:
    break;
  }
  return 0;
}


/* ---- the plain-socket client ---------------------------------------------------------------
 * libwebsockets' client parses received payload a byte at a time (~300 MB/s on the development
 * machine: ~7 ms for one 2 MiB frame, more than the server needs to render and send it), so with
 * it the benchmark mostly measures itself. This client reads the socket with large recv() calls
 * and walks only the WebSocket frame headers (RFC 6455 section 5.2): server frames are unmasked;
 * payload bytes past the stream header are counted, never copied. Used unless --lws or --tls. */

static int send_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* One client-to-server frame (masked, as RFC 6455 requires of clients). */
static int raw_send(int fd, int opcode, const void *payload, size_t n, uint32_t mask_seed) {
  unsigned char f[14 + 256];
  if (n > 256) return -1;
  size_t h = 0;
  f[h++] = (unsigned char)(0x80 | opcode);
  if (n < 126) f[h++] = (unsigned char)(0x80 | n);
  else {
    f[h++] = 0x80 | 126;
    f[h++] = (unsigned char)(n >> 8);
    f[h++] = (unsigned char)n;
  }
  unsigned char m[4] = {(unsigned char)(mask_seed >> 24), (unsigned char)(mask_seed >> 16), (unsigned char)(mask_seed >> 8),
                        (unsigned char)mask_seed};
  memcpy(f + h, m, 4);
  h += 4;
  for (size_t i = 0; i < n; i++) f[h + i] = ((const unsigned char *)payload)[i] ^ m[i & 3];
  return send_all(fd, f, h + n);
}

static int raw_connect(bclient *c, unsigned char *buf, size_t cap, size_t *have) {
  char port[16];
  snprintf(port, sizeof port, "%d", c->port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(c->host, port, &hints, &ai) || !ai) return -1;
  int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char req[768];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: eHR3aW4tYmVuY2gtY2xpZW50\r\nSec-WebSocket-Version: 13\r\n%s%s%s\r\n",
                   c->path, c->host, c->port, c->token ? "Authorization: Bearer " : "", c->token ? c->token : "",
                   c->token ? "\r\n" : "");
  if (n <= 0 || n >= (int)sizeof req || send_all(fd, req, (size_t)n)) goto fail;
  /* The response headers; whatever follows them is the first stream bytes. */
  size_t got = 0;
  char *end = NULL;
  while (!end) {
    if (got + 1 >= cap) goto fail;
    ssize_t k = recv(fd, buf + got, cap - got - 1, 0);
    if (k <= 0) goto fail;
    got += (size_t)k;
    buf[got] = 0;
    end = strstr((char *)buf, "\r\n\r\n");
  }
  if (strncmp((char *)buf, "HTTP/1.1 101", 12) != 0) {
    fprintf(stderr, "client %d: upgrade refused: %.60s\n", c->index, (char *)buf);
    goto fail;
  }
  size_t hl = (size_t)(end + 4 - (char *)buf);
  memmove(buf, buf + hl, got - hl);
  *have = got - hl;
  return fd;
fail:
  close(fd);
  return -1;
}

static void raw_pose(bclient *c, int fd) {
  char t[200];
  c->seq++;
  int n = pose_text(c, t, sizeof t);
  c->pending_seq = c->seq;
  c->pending_t = now_ns();
  if (raw_send(fd, 1, t, (size_t)n, (uint32_t)(c->seq * 2654435761u))) c->failed = 1;
}

static void raw_main(bclient *c) {
  const size_t cap = rx_buf < 65536 ? 65536 : rx_buf;
  unsigned char *buf = malloc(cap);
  size_t have = 0, pos = 0;
  int fd = buf ? raw_connect(c, buf, cap, &have) : -1;
  if (fd < 0) {
    fprintf(stderr, "client %d: cannot connect to %s:%d\n", c->index, c->host, c->port);
    c->failed = 1;
    free(buf);
    return;
  }
  c->connected = 1;
  /* Parser state: the frame being read. */
  unsigned char fh[14];
  size_t fhn = 0, need_hdr = 2;
  uint64_t left = 0; /* payload bytes of the current frame still to come */
  int in_payload = 0, opcode = 0, msg_binary = 0;
  unsigned char ctl[128];
  size_t ctln = 0;
  uint64_t t_start = now_ns(), end = t_start + (uint64_t)(c->seconds * 1e9);
  int poses = c->pose_hz > 0;
  uint64_t next_pose = poses ? t_start + pose_wait_ns(c) : 0;
  while (!c->failed && !c->closed && !atomic_load(&stop_all)) {
    uint64_t now = now_ns();
    if (now >= end) break;
    if (poses && now >= next_pose) {
      if (!c->pending_seq) raw_pose(c, fd);
      next_pose = now + pose_wait_ns(c);
    }
    if (pos == have) {
      uint64_t until = poses && next_pose < end ? next_pose : end;
      int ms = (int)((until - now + 999999) / 1000000);
      struct pollfd pfd = {fd, POLLIN, 0};
      int r = poll(&pfd, 1, ms > 50 ? 50 : ms);
      if (r < 0 && errno != EINTR) break;
      if (r <= 0) continue;
      ssize_t k = recv(fd, buf, cap, 0);
      if (k == 0) c->closed = 1;
      if (k <= 0) {
        if (k < 0 && errno == EINTR) continue;
        break;
      }
      have = (size_t)k;
      pos = 0;
    }
    uint64_t t = now_ns(); /* these bytes arrived by now */
    while (pos < have && !c->failed) {
      if (!in_payload) {
        fh[fhn++] = buf[pos++];
        if (fhn == 2) {
          unsigned len7 = fh[1] & 0x7f;
          need_hdr = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + ((fh[1] & 0x80) ? 4 : 0);
        }
        if (fhn < 2 || fhn < need_hdr) continue;
        unsigned len7 = fh[1] & 0x7f;
        left = len7;
        if (len7 == 126) left = (uint64_t)fh[2] << 8 | fh[3];
        if (len7 == 127) {
          left = 0;
          for (int i = 0; i < 8; i++) left = left << 8 | fh[2 + i];
        }
        if (fh[1] & 0x80) { /* servers never mask */
          fprintf(stderr, "client %d: masked frame from the server\n", c->index);
          c->failed = 1;
          break;
        }
        opcode = fh[0] & 0x0f;
        if (opcode == 2) {
          msg_binary = 1;
          c->got = 0;
        } else if (opcode == 1) msg_binary = 0;
        ctln = 0;
        fhn = 0;
        need_hdr = 2;
        in_payload = 1;
      }
      size_t k = have - pos;
      if (k > left) k = (size_t)left;
      if (opcode >= 8) { /* control frames: keep the payload (at most 125 bytes) */
        size_t room = sizeof ctl - ctln, m = k < room ? k : room;
        memcpy(ctl + ctln, buf + pos, m);
        ctln += m;
      } else if (msg_binary) {
        if (c->got < XT_STREAM_HEADER_SIZE) {
          size_t m = k < XT_STREAM_HEADER_SIZE - c->got ? k : XT_STREAM_HEADER_SIZE - c->got;
          memcpy(c->hdr + c->got, buf + pos, m);
        }
        c->got += k;
      }
      pos += k;
      left -= k;
      if (left) continue;
      in_payload = 0;
      int fin = fh[0] & 0x80;
      /* the header bytes were consumed into fh before the payload: fh[0] still holds them */
      if (opcode == 8) c->closed = 1;
      else if (opcode == 9) raw_send(fd, 10, ctl, ctln, 0x5eed1234u);
      else if (fin && msg_binary && opcode != 1) {
        on_frame(c, t, c->got);
        c->got = 0;
      }
    }
  }
  if (!c->closed) raw_send(fd, 8, "\x03\xe8", 2, 0x0badf00du); /* close 1000 */
  close(fd);
  free(buf);
}

static const struct lws_protocols protos[] = {{"xtwin-stream", cb, 0, 1 << 16, 0, NULL, 0}, {NULL, NULL, 0, 0, 0, NULL, 0}};

static void *client_main(void *arg) {
  bclient *c = arg;
  if (!use_lws) {
    raw_main(c);
    return NULL;
  }
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protos;
  info.user = c;
  /* lws reads a socket pt_serv_buf_size bytes at a time (default 4 KiB: ~512 poll+recv rounds
   * per 2 MiB frame); the receive path must not be what the latency measures. */
  info.pt_serv_buf_size = rx_buf;
  if (c->tls) info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  c->ctx = lws_create_context(&info);
  if (!c->ctx) {
    c->failed = 1;
    return NULL;
  }
  struct lws_client_connect_info ci;
  memset(&ci, 0, sizeof ci);
  ci.context = c->ctx;
  ci.address = c->host;
  ci.port = c->port;
  ci.path = c->path;
  ci.host = c->host;
  ci.origin = c->host;
  ci.ssl_connection = c->tls ? (LCCSCF_USE_SSL | LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK) : 0;
  ci.pwsi = &c->wsi;
  if (!lws_client_connect_via_info(&ci)) c->failed = 1;
  uint64_t end = now_ns() + (uint64_t)(c->seconds * 1e9);
  while (!c->failed && !c->closed && !atomic_load(&stop_all) && now_ns() < end) lws_service(c->ctx, 50);
  lws_context_destroy(c->ctx);
  return NULL;
}

/* One row a frame: client, counter, pose_seq, t_sched, t_exposure, t_render_done, t_sent, t_arrival
 * (ns, CLOCK_MONOTONIC), frames_dropped. */
static void dump_csv(const char *path, bclient *cs, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "client,counter,pose_seq,t_sched,t_exposure,t_render_done,t_sent,t_arrival,dropped,t_pose\n");
  for (int i = 0; i < n; i++)
    for (size_t k = 0; k + 9 <= cs[i].trace.n; k += 9) {
      const double *r = cs[i].trace.v + k;
      fprintf(f, "%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", i, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
              r[8]);
    }
  fclose(f);
}

static void stats_json(FILE *f, const char *name, series *s, int last) {
  fprintf(f, "    \"%s\": {\"n\": %zu, \"p50\": %.4f, \"p99\": %.4f, \"max\": %.4f}%s\n", name, s->n, pct(s, 50), pct(s, 99),
          pct(s, 100), last ? "" : ",");
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *path = "/v1/stream", *token = NULL, *json = NULL, *csv = NULL;
  int port = 8711, nclients = 4, tls = 0;
  double seconds = 10, pose_hz = 10;
  int plane_b = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--host") && v) host = v, i++;
    else if (!strcmp(a, "--port") && v) port = atoi(v), i++;
    else if (!strcmp(a, "--clients") && v) nclients = atoi(v), i++;
    else if (!strcmp(a, "--seconds") && v) seconds = atof(v), i++;
    else if (!strcmp(a, "--pose-hz") && v) pose_hz = atof(v), i++;
    else if (!strcmp(a, "--token") && v) token = v, i++;
    else if (!strcmp(a, "--json") && v) json = v, i++;
    else if (!strcmp(a, "--csv") && v) csv = v, i++;
    else if (!strcmp(a, "--rx-buf") && v) rx_buf = (unsigned)atoi(v), i++;
    else if (!strcmp(a, "--tls")) tls = use_lws = 1;
    else if (!strcmp(a, "--lws")) use_lws = 1;
    else if (!strcmp(a, "--path") && v) path = v, i++; /* e.g. /v1/stream?planes=b (a biplane server) */
    else if (!strcmp(a, "--plane-b")) plane_b = 1;
    else {
      fprintf(stderr, "usage: %s [--host H] [--port P] [--clients N] [--seconds S] [--pose-hz HZ] [--token T] [--tls] [--json FILE] [--csv FILE] [--lws] [--rx-buf BYTES] [--path /v1/stream?planes=b] [--plane-b]\n", argv[0]);
      return 2;
    }
  }
  if (nclients < 1 || nclients > 64) return 2;
  want_trace = csv != NULL;
  lws_set_log_level(LLL_ERR, NULL);
  bclient *cs = calloc((size_t)nclients, sizeof *cs);
  if (!cs) return 1;
  for (int i = 0; i < nclients; i++) {
    cs[i].index = i;
    cs[i].host = host;
    cs[i].path = path;
    cs[i].port = port;
    cs[i].tls = tls;
    cs[i].token = token;
    cs[i].seconds = seconds;
    cs[i].pose_hz = i == 0 ? pose_hz : 0;
    cs[i].plane_b = plane_b;
    cs[i].rng = 0x9e3779b97f4a7c15ull + (uint64_t)i;
    pthread_create(&cs[i].thread, NULL, client_main, &cs[i]);
  }
  int failed = 0;
  for (int i = 0; i < nclients; i++) {
    pthread_join(cs[i].thread, NULL);
    failed |= cs[i].failed || !cs[i].connected;
  }
  FILE *f = json ? fopen(json, "w") : stdout;
  if (!f) f = stdout;
  if (csv) dump_csv(csv, cs, nclients);
  series all_jit = {0}, all_per = {0}, all_arr = {0}, all_lat = {0}, all_ren = {0}, all_que = {0}, all_xfr = {0};
  fprintf(f, "{\n  \"clients\": [\n");
  for (int i = 0; i < nclients; i++) {
    bclient *c = &cs[i];
    for (size_t k = 0; k < c->jitter.n; k++) push(&all_jit, c->jitter.v[k]);
    for (size_t k = 0; k < c->period_jit.n; k++) push(&all_per, c->period_jit.v[k]);
    for (size_t k = 0; k < c->arrival_jit.n; k++) push(&all_arr, c->arrival_jit.v[k]);
    for (size_t k = 0; k < c->latency.n; k++) push(&all_lat, c->latency.v[k]);
    for (size_t k = 0; k < c->render.n; k++) push(&all_ren, c->render.v[k]);
    for (size_t k = 0; k < c->queue.n; k++) push(&all_que, c->queue.v[k]);
    for (size_t k = 0; k < c->xfer.n; k++) push(&all_xfr, c->xfer.v[k]);
    double mbps = (double)c->bytes / seconds / 1e6;
    fprintf(f, "    {\"frames\": %llu, \"counter_gaps\": %llu, \"server_dropped\": %llu, \"MB_per_s\": %.1f, \"fps\": %.3f}%s\n",
            (unsigned long long)c->frames, (unsigned long long)c->gaps, (unsigned long long)c->server_dropped, mbps,
            (double)c->frames / seconds, i + 1 < nclients ? "," : "");
  }
  fprintf(f, "  ],\n  \"period_ms\": %.4f,\n  \"ms\": {\n", (double)cs[0].period_ns * 1e-6);
  stats_json(f, "exposure_jitter", &all_jit, 0);
  stats_json(f, "period_jitter", &all_per, 0);
  stats_json(f, "arrival_period_jitter", &all_arr, 0);
  stats_json(f, "exposure_to_arrival", &all_lat, 0);
  stats_json(f, "exposure_to_render_done", &all_ren, 0);
  stats_json(f, "render_done_to_sent", &all_que, 0);
  stats_json(f, "sent_to_arrival", &all_xfr, 0);
  stats_json(f, "pose_to_frame", &cs[0].pose_lat, 1);
  fprintf(f, "  },\n  \"ok\": %s\n}\n", failed ? "false" : "true");
  if (f != stdout) fclose(f);
  return failed ? 1 : 0;
}
