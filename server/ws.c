/* The frame stream: WebSocket /v1/stream over libwebsockets. One thread (the caller of
 * xt_ws_run) owns every connection: render workers only push frames into the ring and call
 * lws_cancel_service(); the EVENT_WAIT_CANCELLED callback asks every client for a writable
 * callback, and each writable callback sends one message (a queued JSON text first, else the
 * next frame). Delivery is latest-wins per client: a client whose socket is still busy simply
 * is not writable, and when it is, it gets the newest frame; the frames it missed are counted in
 * its header's frames_dropped and in /metrics. Lockstep frames (answers to triggers) go out in
 * order while they are in the ring.
 *
 * Text messages from clients are JSON commands (api/stream.md):
 *   {"type":"pose","seq":N,"pose":{...}}         -> {"type":"ack","seq":N,"ok":true,...}
 *   {"type":"acquisition","acquisition":{...}}   -> {"type":"ack","ok":true,"acquisition":{...}}
 *   {"type":"start"|"stop"|"trigger"|"state"}    -> {"type":"ack",...}
 * Any "id" member is echoed in the reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "xt_server.h"

_Static_assert(LWS_PRE <= XT_FRAME_PRE, "frame buffers leave XT_FRAME_PRE bytes for the WebSocket framing");

#define XT_WS_MAX_TEXTS 64
#define XT_WS_TX_PACKET ((size_t)64 << 20)

typedef struct client {
  struct lws *wsi;
  xt_server *srv;
  unsigned id;
  int slot; /* metrics.clients index, -1 if none */
  uint64_t last_pub, last_counter, last_pose_seq;
  int have_sent;
  uint64_t sent, dropped;
  char *texts[XT_WS_MAX_TEXTS];
  size_t tlen[XT_WS_MAX_TEXTS];
  int th, tn;
  char *rx;
  size_t rxn;
  int rx_bad; /* the message being received is over the limit */
  int closing;
  struct client *next;
} client;

/* Owned by the service thread. */
static client *clients;
static int nclients;
static unsigned next_id = 1;
static struct lws_protocols protocols[2];

void xt_ws_wake(xt_server *s) {
  if (s->lws) lws_cancel_service(s->lws);
}

static int route_ok(struct lws *wsi) {
  char uri[256];
  int n = lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
  if (n <= 0) return 0;
  char *q = strchr(uri, '?');
  if (q) *q = 0;
  return !strcmp(uri, "/v1/stream") || !strcmp(uri, "/v1/stream/");
}

/* Constant-time comparison of a presented token with the configured one. */
static int token_eq(const char *want, const char *got, size_t m) {
  size_t n = strlen(want);
  unsigned diff = (unsigned)(n ^ m);
  for (size_t i = 0; i < n; i++) diff |= (unsigned)(want[i] ^ (i < m ? got[i] : 0));
  return diff == 0;
}

/* The token may come as "Authorization: Bearer TOKEN" (any client), or in the forms a browser can
 * send on a WebSocket, which cannot carry headers: a Sec-WebSocket-Protocol entry "bearer.TOKEN"
 * offered beside "xtwin-stream" (the protocol the server selects; a token of HTTP token
 * characters), or a "token=TOKEN" query parameter (any token, percent-encoded). */
static int token_ok(xt_server *s, struct lws *wsi) {
  if (!s->cfg.token[0]) return 1;
  char a[1024];
  if (lws_hdr_copy(wsi, a, sizeof a, WSI_TOKEN_HTTP_AUTHORIZATION) > 7 && !strncmp(a, "Bearer ", 7))
    return token_eq(s->cfg.token, a + 7, strlen(a + 7));
  if (lws_hdr_copy(wsi, a, sizeof a, WSI_TOKEN_PROTOCOL) > 0) {
    for (char *save = NULL, *t = strtok_r(a, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
      if (!strncmp(t, "bearer.", 7) && token_eq(s->cfg.token, t + 7, strlen(t + 7))) return 1;
  }
  const char *q = lws_get_urlarg_by_name(wsi, "token=", a, (int)sizeof a);
  return q && token_eq(s->cfg.token, q, strlen(q));
}

/* Refuses an upgrade with a JSON error body. Written by hand: lws_return_http_status() answers
 * an upgrade request as HTTP/1.0, which WebSocket clients reject as malformed. Returns -1 (hang
 * up once the short response is on the socket). */
static int reject_upgrade(struct lws *wsi, int err, int status, const char *reason, const char *message) {
  json_t *e = xt_error_json(err, status, message);
  char *body = json_dumps(e, JSON_COMPACT);
  json_decref(e);
  unsigned char buf[LWS_PRE + 1024];
  int n = snprintf((char *)buf + LWS_PRE, sizeof buf - LWS_PRE,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                   "Connection: close\r\n\r\n%s",
                   status, reason, body ? strlen(body) : 0,
                   status == 401 ? "WWW-Authenticate: Bearer realm=\"xtwin\"\r\n" : "", body ? body : "");
  free(body);
  if (n > 0 && n < (int)(sizeof buf - LWS_PRE)) lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_HTTP_HEADERS);
  return -1;
}

/* Queues a JSON text for this client (takes the reference). */
static void queue_json(client *c, json_t *j) {
  char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  if (!t) return;
  if (c->tn == XT_WS_MAX_TEXTS) {
    /* The client sends commands faster than it reads replies: drop it rather than grow. */
    free(t);
    c->closing = 1;
    lws_callback_on_writable(c->wsi);
    return;
  }
  size_t n = strlen(t);
  char *b = malloc(LWS_PRE + n);
  if (!b) {
    free(t);
    return;
  }
  memcpy(b + LWS_PRE, t, n);
  free(t);
  int k = (c->th + c->tn) % XT_WS_MAX_TEXTS;
  c->texts[k] = b;
  c->tlen[k] = n;
  c->tn++;
  lws_callback_on_writable(c->wsi);
}

static json_t *ack(const json_t *cmd, int ok) {
  json_t *j = json_pack("{s:s,s:b}", "type", "ack", "ok", ok);
  json_t *id = cmd ? json_object_get(cmd, "id") : NULL;
  if (id) json_object_set(j, "id", id);
  json_t *ty = cmd ? json_object_get(cmd, "type") : NULL;
  if (json_is_string(ty)) json_object_set(j, "command", ty);
  return j;
}

static json_t *nack(const json_t *cmd, int err, const char *message) {
  json_t *j = ack(cmd, 0);
  json_t *seq = cmd ? json_object_get(cmd, "seq") : NULL;
  if (seq) json_object_set(j, "seq", seq);
  json_t *e = xt_error_json(err, xt_errhttp(err), message);
  json_object_set(j, "error", json_object_get(e, "error"));
  json_decref(e);
  return j;
}

static void handle_text(client *c, const char *text, size_t len) {
  xt_server *s = c->srv;
  xt_msg m;
  xt_ws_cmd k;
  int rc = xt_ws_cmd_parse(text, len, &k, &m);
  const json_t *cmd = k.cmd;
  if (rc) {
    queue_json(c, nack(cmd, rc, m.text));
  } else if (k.type == XT_CMD_POSE) {
    uint64_t seq = 0;
    rc = xt_srv_update_pose(s, k.update, 1, &seq, &m);
    if (rc) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "seq", json_integer((json_int_t)seq));
      json_object_set_new(j, "t_ns", json_integer((json_int_t)xt_now_ns()));
      queue_json(c, j);
    }
  } else if (k.type == XT_CMD_ACQ) {
    if ((rc = xt_srv_update_acq(s, k.update, &m))) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "state", xt_srv_state_json(s));
      queue_json(c, j);
    }
  } else if (k.type == XT_CMD_START || k.type == XT_CMD_STOP) {
    xt_srv_start(s, k.type == XT_CMD_START);
    json_t *j = ack(cmd, 1);
    json_object_set_new(j, "state", xt_srv_state_json(s));
    queue_json(c, j);
  } else if (k.type == XT_CMD_TRIGGER) {
    uint64_t counter = 0;
    if ((rc = xt_engine_trigger(s, &counter, &m))) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "frame", json_integer((json_int_t)counter));
      queue_json(c, j);
    }
  } else { /* XT_CMD_STATE */
    json_t *j = ack(cmd, 1);
    json_object_set_new(j, "state", xt_srv_state_json(s));
    queue_json(c, j);
  }
  xt_ws_cmd_free(&k);
}

static void stats_attach(client *c) {
  xt_metrics *m = &c->srv->metrics;
  pthread_mutex_lock(&m->mu);
  m->ws_connections++;
  c->slot = -1;
  for (int i = 0; i < XT_SRV_MAX_CLIENT_STATS; i++)
    if (!m->clients[i].used) {
      memset(&m->clients[i], 0, sizeof m->clients[i]);
      m->clients[i].used = 1;
      m->clients[i].id = c->id;
      lws_get_peer_simple(c->wsi, m->clients[i].peer, sizeof m->clients[i].peer);
      c->slot = i;
      break;
    }
  pthread_mutex_unlock(&m->mu);
}

/* Sends the next frame; returns -1 to close. */
static int send_frame(client *c) {
  xt_server *s = c->srv;
  xt_frame *f = xt_ring_next(&s->ring, c->last_pub);
  if (!f) return 0;
  xt_stream_header *h = (xt_stream_header *)(void *)f->msg;
  uint64_t drop = c->have_sent || c->last_pub ? f->pub - c->last_pub - 1 : 0;
  int stale = c->have_sent && h->frame_counter <= c->last_counter; /* out of order from another worker */
  c->last_pub = f->pub;
  if (stale) {
    c->dropped += 1;
    xt_frame_unref(&s->ring, f);
    return 0;
  }
  c->dropped += drop;
  uint64_t t = xt_now_ns();
  h->t_sent_ns = t;
  h->frames_dropped = c->dropped;
  int n = lws_write(c->wsi, f->msg, f->len, LWS_WRITE_BINARY);
  int pose_changed = c->have_sent && h->pose_seq != c->last_pose_seq;
  c->last_counter = h->frame_counter;
  c->last_pose_seq = h->pose_seq;
  c->have_sent = 1;
  c->sent++;
  xt_metrics *m = &s->metrics;
  pthread_mutex_lock(&m->mu);
  m->sent_total++;
  m->dropped_total += drop;
  if (c->slot >= 0) {
    m->clients[c->slot].sent = c->sent;
    m->clients[c->slot].dropped = c->dropped;
  }
  if (h->t_exposure_ns && t >= h->t_exposure_ns) xt_hist_add(&m->latency, (double)(t - h->t_exposure_ns) * 1e-9);
  if (pose_changed && h->t_pose_ns && t >= h->t_pose_ns) xt_hist_add(&m->pose_latency, (double)(t - h->t_pose_ns) * 1e-9);
  pthread_mutex_unlock(&m->mu);
  xt_frame_unref(&s->ring, f);
  return n < (int)f->len ? -1 : 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  struct lws_context *ctx = lws_get_context(wsi);
  xt_server *s = lws_context_user(ctx);
  client *c = user;
  switch (reason) {
  case LWS_CALLBACK_HTTP:
    /* Plain HTTP on the stream port: only the upgrade lives here. */
    if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, "only the WebSocket /v1/stream is served on this port"))
      return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;

  case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
    if (!s) return -1;
    if (!token_ok(s, wsi)) return reject_upgrade(wsi, XT_EAUTH, 401, "Unauthorized", "missing or wrong bearer token");
    if (!route_ok(wsi)) return reject_upgrade(wsi, XT_ENOTFOUND, 404, "Not Found", "the stream is at /v1/stream");
    if (nclients >= s->cfg.max_clients || atomic_load(&s->quit))
      return reject_upgrade(wsi, XT_EBUSY, 503, "Service Unavailable", "too many stream clients, or shutting down");
    return 0;

  case LWS_CALLBACK_ESTABLISHED: {
    memset(c, 0, sizeof *c);
    c->wsi = wsi;
    c->srv = s;
    c->id = next_id++;
    c->last_pub = xt_ring_latest_pub(&s->ring);
    c->next = clients;
    clients = c;
    nclients++;
    stats_attach(c);
    json_t *hello = json_pack("{s:s,s:I,s:s,s:i,s:i,s:o}", "type", "hello", "client", (json_int_t)c->id, "server",
                              "xtwin-server " XT_SERVER_VERSION, "header_version", XT_STREAM_VERSION, "header_size",
                              XT_STREAM_HEADER_SIZE, "state", xt_srv_state_json(s));
    json_object_set_new(hello, "max_message_bytes", json_integer(s->cfg.max_ws_message));
    queue_json(c, hello);
    return 0;
  }

  case LWS_CALLBACK_RECEIVE:
    if (lws_frame_is_binary(wsi)) {
      lws_close_reason(wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, (unsigned char *)"text JSON only", 14);
      return -1;
    }
    if (!c->rx_bad) {
      if (c->rxn + len > (size_t)s->cfg.max_ws_message) {
        c->rx_bad = 1;
        free(c->rx);
        c->rx = NULL;
        c->rxn = 0;
      } else {
        char *b = realloc(c->rx, c->rxn + len + 1);
        if (!b) return -1;
        c->rx = b;
        memcpy(c->rx + c->rxn, in, len);
        c->rxn += len;
      }
    }
    if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
      if (c->rx_bad) {
        char t[96];
        snprintf(t, sizeof t, "message over %d bytes", s->cfg.max_ws_message);
        queue_json(c, nack(NULL, XT_ETOOLARGE, t));
      } else
        handle_text(c, c->rx ? c->rx : "", c->rxn);
      free(c->rx);
      c->rx = NULL;
      c->rxn = 0;
      c->rx_bad = 0;
    }
    return 0;

  case LWS_CALLBACK_SERVER_WRITEABLE:
    if (c->closing || atomic_load(&s->quit)) {
      lws_close_reason(wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)"server shutting down", 20);
      return -1;
    }
    if (c->tn) {
      int k = c->th;
      int n = lws_write(wsi, (unsigned char *)c->texts[k] + LWS_PRE, c->tlen[k], LWS_WRITE_TEXT);
      free(c->texts[k]);
      c->texts[k] = NULL;
      c->th = (c->th + 1) % XT_WS_MAX_TEXTS;
      c->tn--;
      if (n < 0) return -1;
      lws_callback_on_writable(wsi); /* more texts, or a frame */
      return 0;
    }
    if (send_frame(c)) return -1;
    if (xt_ring_latest_pub(&s->ring) > c->last_pub) lws_callback_on_writable(wsi);
    return 0;

  case LWS_CALLBACK_CLOSED:
    for (client **p = &clients; *p; p = &(*p)->next)
      if (*p == c) {
        *p = c->next;
        nclients--;
        break;
      }
    for (int i = 0; i < c->tn; i++) free(c->texts[(c->th + i) % XT_WS_MAX_TEXTS]);
    c->tn = 0;
    free(c->rx);
    c->rx = NULL;
    if (c->slot >= 0) {
      pthread_mutex_lock(&s->metrics.mu);
      s->metrics.clients[c->slot].used = 0;
      pthread_mutex_unlock(&s->metrics.mu);
      c->slot = -1;
    }
    return 0;

  case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
    if (s && clients) {
      /* A client still busy with an older frame will skip to the newest: what it has missed so far
       * is already lost, so /metrics shows it now rather than at its next send. */
      uint64_t latest = xt_ring_latest_pub(&s->ring);
      pthread_mutex_lock(&s->metrics.mu);
      for (client *k = clients; k; k = k->next)
        if (k->slot >= 0 && latest > k->last_pub + 1 && !k->closing)
          s->metrics.clients[k->slot].dropped = k->dropped + (latest - k->last_pub - 1);
      pthread_mutex_unlock(&s->metrics.mu);
      lws_callback_on_writable_all_protocol(ctx, &protocols[0]);
    }
    return 0;

  default:
    break;
  }
  return 0;
}

int xt_ws_start(xt_server *s, xt_msg *msg) {
  memset(protocols, 0, sizeof protocols);
  protocols[0].name = "xtwin-stream";
  protocols[0].callback = callback;
  protocols[0].per_session_data_size = sizeof(client);
  protocols[0].rx_buffer_size = (size_t)s->cfg.max_ws_message;
  /* One send() per frame: with tx_packet_size 0, lws caps each send() at rx_buffer_size (16 KiB)
   * and trickles the rest of a 2 MiB frame out 16 KiB per poll round (~7 ms on loopback). Larger
   * than any frame (fd20 float32 is 19 MB); what the socket does not take, lws keeps and sends as
   * the socket drains, and only then asks for the next writable callback. */
  protocols[0].tx_packet_size = XT_WS_TX_PACKET;

  lws_set_log_level(s->cfg.verbose >= 2 ? (LLL_ERR | LLL_WARN | LLL_NOTICE) : s->cfg.verbose ? (LLL_ERR | LLL_WARN) : 0,
                    NULL);
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DISABLE_IPV6;
  if (strchr(s->cfg.bind, ':')) info.options &= ~(uint64_t)LWS_SERVER_OPTION_DISABLE_IPV6;
  if (s->cfg.tls_cert[0]) info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  info.user = s;
  info.port = CONTEXT_PORT_NO_LISTEN;
  s->lws = lws_create_context(&info);
  if (!s->lws) return xt_fail(msg, XT_EINTERNAL, "WebSocket: cannot create the libwebsockets context");

  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
  if (strchr(s->cfg.bind, ':')) info.options = 0;
  info.port = s->cfg.ws_port;
  info.iface = s->cfg.bind;
  info.protocols = protocols;
  info.vhost_name = "xtwin";
  if (s->cfg.tls_cert[0]) {
    info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.ssl_cert_filepath = s->cfg.tls_cert;
    info.ssl_private_key_filepath = s->cfg.tls_key;
  }
  struct lws_vhost *vh = lws_create_vhost(s->lws, &info);
  if (!vh) {
    lws_context_destroy(s->lws);
    s->lws = NULL;
    return xt_fail(msg, XT_EIO, "WebSocket: cannot listen on %s:%d (in use? bad certificate?)", s->cfg.bind,
                   s->cfg.ws_port);
  }
  s->ws_port = lws_get_vhost_listen_port(vh);
  return 0;
}

void xt_ws_run(xt_server *s) {
  while (!atomic_load(&s->quit)) lws_service(s->lws, 0);
  /* Shutting down: every client gets a close frame (GOINGAWAY), then a bounded wait for them to
   * answer it, so nothing hangs on a client that does not. */
  for (client *c = clients; c; c = c->next) {
    c->closing = 1;
    lws_callback_on_writable(c->wsi);
  }
  uint64_t until = xt_now_ns() + 1500000000ull;
  while (clients && xt_now_ns() < until) lws_service(s->lws, 0);
}

void xt_ws_destroy(xt_server *s) {
  if (s->lws) lws_context_destroy(s->lws);
  s->lws = NULL;
}
