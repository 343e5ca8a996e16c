/* Stream benchmark client: N WebSocket clients (a libwebsockets context and thread each) on an
 * xtwin-server stream for a fixed time. Client 0 also sends pose updates at --pose-hz and times
 * each until the first frame carrying its sequence number arrives (pose-to-frame latency, on the
 * shared CLOCK_MONOTONIC of a loopback client). Only the frame header is kept; pixels are
 * counted, not copied.
 *
 *   bench_server_client --port 8711 --clients 4 --seconds 60 --pose-hz 10 [--fps 60] [--json out.json]
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
  /* pose updates (client 0) */
  uint64_t next_pose_at, seq, pending_seq, pending_t;
  char text[256];
  int want_send;
} bclient;

static atomic_int stop_all;

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
    if (c->pose_hz > 0) lws_set_timer_usecs(wsi, (lws_usec_t)(1e6 / c->pose_hz));
    break;
  case LWS_CALLBACK_TIMER:
    if (c->pose_hz > 0 && !c->pending_seq) {
      c->seq++;
      snprintf(c->text + LWS_PRE, sizeof c->text - LWS_PRE,
               "{\"type\":\"pose\",\"seq\":%llu,\"pose\":{\"primary_deg\":%.1f}}", (unsigned long long)c->seq,
               (double)((c->seq * 7) % 120) - 60.0);
      c->want_send = 1;
      lws_callback_on_writable(wsi);
    }
    if (c->pose_hz > 0) lws_set_timer_usecs(wsi, (lws_usec_t)(1e6 / c->pose_hz));
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
    uint64_t t = now_ns();
    xt_stream_header h;
    memcpy(&h, c->hdr, sizeof h);
    size_t total = c->got;
    c->got = 0;
    if (h.magic != XT_STREAM_MAGIC || total != h.header_size + h.payload_bytes) {
      fprintf(stderr, "client %d: bad frame (magic %x, %zu bytes)\n", c->index, h.magic, total);
      c->failed = 1;
      break;
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
    if (c->pending_seq && h.pose_seq >= c->pending_seq) {
      push(&c->pose_lat, (double)(t - c->pending_t) * 1e-6);
      c->pending_seq = 0;
    }
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

static const struct lws_protocols protos[] = {{"xtwin-stream", cb, 0, 1 << 16, 0, NULL, 0}, {NULL, NULL, 0, 0, 0, NULL, 0}};

static void *client_main(void *arg) {
  bclient *c = arg;
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protos;
  info.user = c;
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

static void stats_json(FILE *f, const char *name, series *s, int last) {
  fprintf(f, "    \"%s\": {\"n\": %zu, \"p50\": %.4f, \"p99\": %.4f, \"max\": %.4f}%s\n", name, s->n, pct(s, 50), pct(s, 99),
          pct(s, 100), last ? "" : ",");
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *path = "/v1/stream", *token = NULL, *json = NULL;
  int port = 8711, nclients = 4, tls = 0;
  double seconds = 10, pose_hz = 10;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--host") && v) host = v, i++;
    else if (!strcmp(a, "--port") && v) port = atoi(v), i++;
    else if (!strcmp(a, "--clients") && v) nclients = atoi(v), i++;
    else if (!strcmp(a, "--seconds") && v) seconds = atof(v), i++;
    else if (!strcmp(a, "--pose-hz") && v) pose_hz = atof(v), i++;
    else if (!strcmp(a, "--token") && v) token = v, i++;
    else if (!strcmp(a, "--json") && v) json = v, i++;
    else if (!strcmp(a, "--tls")) tls = 1;
    else {
      fprintf(stderr, "usage: %s [--host H] [--port P] [--clients N] [--seconds S] [--pose-hz HZ] [--token T] [--tls] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (nclients < 1 || nclients > 64) return 2;
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
    pthread_create(&cs[i].thread, NULL, client_main, &cs[i]);
  }
  int failed = 0;
  for (int i = 0; i < nclients; i++) {
    pthread_join(cs[i].thread, NULL);
    failed |= cs[i].failed || !cs[i].connected;
  }
  FILE *f = json ? fopen(json, "w") : stdout;
  if (!f) f = stdout;
  series all_jit = {0}, all_per = {0}, all_arr = {0}, all_lat = {0};
  fprintf(f, "{\n  \"clients\": [\n");
  for (int i = 0; i < nclients; i++) {
    bclient *c = &cs[i];
    for (size_t k = 0; k < c->jitter.n; k++) push(&all_jit, c->jitter.v[k]);
    for (size_t k = 0; k < c->period_jit.n; k++) push(&all_per, c->period_jit.v[k]);
    for (size_t k = 0; k < c->arrival_jit.n; k++) push(&all_arr, c->arrival_jit.v[k]);
    for (size_t k = 0; k < c->latency.n; k++) push(&all_lat, c->latency.v[k]);
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
  stats_json(f, "pose_to_frame", &cs[0].pose_lat, 1);
  fprintf(f, "  },\n  \"ok\": %s\n}\n", failed ? "false" : "true");
  if (f != stdout) fclose(f);
  return failed ? 1 : 0;
}
