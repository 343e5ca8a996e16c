/* The frame stream: WebSocket /v1/stream over libwebsockets. One thread (the caller of
 * xt_ws_run) owns every connection: render workers only push frames into the ring, whose notifier
 * (registered by xt_ws_run) calls lws_cancel_service(), so the engine never calls into this file;
 * the EVENT_WAIT_CANCELLED callback asks every client for a writable callback, and each writable
 * callback sends one message (a queued JSON text first, else the next frame). Delivery is
 * latest-wins per client: a client whose socket is still busy simply is not writable, and when it
 * is, it gets the newest frame; the frames it missed are counted in its header's frames_dropped
 * and in /metrics. Lockstep frames (answers to triggers) go out in order while they are in the
 * ring.
 *
 * Text messages from clients are JSON commands (api/stream.md):
 *   {"type":"pose","seq":N,"pose":{...}}         -> {"type":"ack","seq":N,"ok":true,...}
 *   {"type":"acquisition","acquisition":{...}}   -> {"type":"ack","ok":true,"acquisition":{...}}
 *   {"type":"start"|"stop"|"trigger"|"state"}    -> {"type":"ack",...}
 * Any "id" member is echoed in the reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <libwebsockets.h>

#include "srv_clock.h"
#include "srv_engine.h"
#include "srv_guard.h"
#include "srv_metrics.h"
#include "srv_state.h"
#include "srv_ws.h"
#include "xt_server.h"
#include "xt_stream.h"

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
  int processed; /* with the chain on: 1 gets the processed frames, 0 the raw ones */
  uint64_t last_text; /* the ring's last event text queued for it */
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

/* The ring's notifier: a worker pushed a frame. */
static void ring_pushed(void *ctx) { xt_ws_wake(ctx); }

static int route_ok(struct lws *wsi) {
  char uri[256];
  int n = lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
  if (n <= 0) return 0;
  char *q = strchr(uri, '?');
  if (q) *q = 0;
  return !strcmp(uri, "/v1/stream") || !strcmp(uri, "/v1/stream/");
}

/* The token may come as "Authorization: Bearer TOKEN" (any client), or in forms a browser can
 * send on a WebSocket: a Sec-WebSocket-Protocol entry "bearer.TOKEN" next to "xtwin-stream", or a
 * "token=TOKEN" query parameter (api/stream.md). */
static int token_ok(xt_server *s, struct lws *wsi) {
  if (!s->cfg.token[0]) return 1;
  char a[1024];
  if (lws_hdr_copy(wsi, a, sizeof a, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 && xt_bearer_ok(s, a)) return 1;
  if (lws_hdr_copy(wsi, a, sizeof a, WSI_TOKEN_PROTOCOL) > 0) {
    for (char *save = NULL, *t = strtok_r(a, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
      if (!strncmp(t, "bearer.", 7) && xt_token_eq(s, t + 7, strlen(t + 7))) return 1;
  }
  const char *q = lws_get_urlarg_by_name(wsi, "token=", a, (int)sizeof a);
  if (q && xt_token_eq(s, q, strlen(q))) return 1;
  return 0;
}

/* Host and Origin as on REST (guard.c): a page the console serves from the REST port may open the
 * stream; a foreign page, or a rebound name, may not. 0 ok, else the message. */
static const char *origin_refused(xt_server *s, struct lws *wsi) {
  char host[256], origin[256];
  int hn = lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST);
  if (hn > 0 && !xt_host_ok(s, host)) return "Host is not one this server answers to (an IP address, localhost or --allow-host)";
  int on = lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN);
  if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) > 0 && (on <= 0 || !xt_origin_ok(s, origin, hn > 0 ? host : NULL, NULL)))
    return "Origin is not allowed (start the server with --allow-origin to allow it)";
  return NULL;
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

/* Queues a text for this client (takes t). A reply that does not fit drops the client; an event
 * is dropped instead (a client that reads nothing is dropped by its peer timeout). */
static void queue_text(client *c, char *t, int event) {
  if (!t) return;
  if (c->tn == XT_WS_MAX_TEXTS) {
    free(t);
    if (event) return;
    /* The client sends commands faster than it reads replies: drop it rather than grow. */
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

/* Queues a JSON text for this client (takes the reference). */
static void queue_json(client *c, json_t *j) {
  char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  queue_text(c, t, 0);
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

/* Parses a complete text message and acts on it: one reply (ack or nack) queued per command, in
 * the order the commands came (queue_json drops a client that does not read its replies). */
static void run_command(client *c, const char *text, size_t len) {
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
    if ((rc = xt_srv_start(s, k.type == XT_CMD_START, &m))) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "state", xt_srv_state_json(s));
      queue_json(c, j);
    }
  } else if (k.type == XT_CMD_DEVICE) {
    json_t *dev = NULL;
    if ((rc = xt_srv_device(s, k.device, k.update, &dev, &m))) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "device", dev);
      queue_json(c, j); /* before the command's events: they reach this queue on the next wake */
    }
  } else if (k.type == XT_CMD_TRIGGER) {
    uint64_t counter = 0;
    if ((rc = xt_engine_trigger(s, &counter, &m))) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "frame", json_integer((json_int_t)counter));
      queue_json(c, j);
    }
  } else if (k.type == XT_CMD_FRAMES) {
    c->processed = k.processed;
    json_t *j = ack(cmd, 1);
    json_object_set_new(j, "frames", json_string(c->processed ? "processed" : "raw"));
    queue_json(c, j);
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

/* The oldest frame every client has been sent, for the virtual clock's pacer, which moves time on
 * only once it is the newest (srv_clock.h); woken when it moves. */
static void publish_caught_up(xt_server *s) {
  uint64_t m = UINT64_MAX;
  for (client *k = clients; k; k = k->next)
    if (!k->closing && k->last_pub < m) m = k->last_pub;
  const uint64_t old = atomic_exchange(&s->ws_min_pub, m);
  if (m != old && xt_dev_clock_is_virtual()) xt_engine_wake(s);
}

/* Sends the next frame; returns -1 to close. */
static int send_frame(client *c) {
  xt_server *s = c->srv;
  xt_frame *f = xt_ring_next(&s->ring, c->last_pub);
  if (!f) return 0;
  /* the chain's frames come as two messages; this client gets the one it chose */
  unsigned char *const fm = c->processed && f->msg2 ? f->msg2 : f->msg;
  const size_t flen = c->processed && f->msg2 ? f->len2 : f->len;
  xt_stream_header *h = (xt_stream_header *)(void *)fm;
  uint64_t drop = c->have_sent || c->last_pub ? f->pub - c->last_pub - 1 : 0;
  int stale = c->have_sent && h->frame_counter <= c->last_counter; /* out of order from another worker */
  c->last_pub = f->pub;
  if (stale) {
    c->dropped += 1;
    xt_frame_unref(&s->ring, f);
    return 0;
  }
  if (xt_srv_fault_link_down(s, xt_dev_now_ns())) {
    /* fault link_loss (fault.c): the frame and those it skipped are lost on the way; texts still go */
    c->dropped += drop + 1;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.dropped_total += drop + 1;
    s->metrics.frames_link_lost += drop + 1;
    if (c->slot >= 0) s->metrics.clients[c->slot].dropped = c->dropped;
    pthread_mutex_unlock(&s->metrics.mu);
    xt_frame_unref(&s->ring, f);
    return 0;
  }
  c->dropped += drop;
  uint64_t t = xt_dev_now_ns();
  h->t_sent_ns = t;
  h->frames_dropped = c->dropped;
  int n = lws_write(c->wsi, fm, flen, LWS_WRITE_BINARY);
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
  return n < (int)flen ? -1 : 0;
}

/* ---- the connection's steps, one per libwebsockets reason ---------------------------------- */

/* Plain HTTP on the stream port: only the upgrade lives here. */
static int on_http(struct lws *wsi) {
  if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, "only the WebSocket /v1/stream is served on this port"))
    return -1;
  return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* Decides an upgrade before any WebSocket state exists; every refusal is counted in /metrics.
 * The order of the checks is the answer a client refused for several reasons gets: Host/Origin
 * (403), the token (401), the path (404), then the client limit or shutdown (503). */
static int on_confirm_upgrade(xt_server *s, struct lws *wsi) {
  if (!s) return -1;
  const char *why = origin_refused(s, wsi);
  int rc = 0;
  if (why) rc = reject_upgrade(wsi, XT_EPERM, 403, "Forbidden", why);
  else if (!token_ok(s, wsi)) rc = reject_upgrade(wsi, XT_EAUTH, 401, "Unauthorized", "missing or wrong bearer token");
  else if (!route_ok(wsi)) rc = reject_upgrade(wsi, XT_ENOTFOUND, 404, "Not Found", "the stream is at /v1/stream");
  else if (nclients >= s->cfg.max_clients || atomic_load(&s->quit))
    rc = reject_upgrade(wsi, XT_EBUSY, 503, "Service Unavailable", "too many stream clients, or shutting down");
  if (rc) {
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.ws_refused++;
    pthread_mutex_unlock(&s->metrics.mu);
  }
  return rc;
}

/* A new client: its state, its metrics slot and the hello. It starts at the ring's newest frame,
 * so it is not sent (or counted as dropping) frames published before it came. */
static int on_established(xt_server *s, client *c, struct lws *wsi) {
  /* A peer that vanished without a FIN or RST (cable pulled, host gone: half-open TCP) is
   * dropped once data it has not acknowledged is peer_timeout old, not after the kernel's
   * ~15 minutes of retransmissions; keepalive (vhost) finds idle ones. */
  unsigned uto = (unsigned)(s->cfg.peer_timeout * 1000.0);
  int fd = (int)lws_get_socket_fd(wsi);
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
  memset(c, 0, sizeof *c);
  c->wsi = wsi;
  c->srv = s;
  c->id = next_id++;
  c->last_pub = xt_ring_latest_pub(&s->ring);
  c->last_text = xt_ring_latest_text(&s->ring); /* events from its connection on */
  c->next = clients;
  clients = c;
  nclients++;
  publish_caught_up(s);
  stats_attach(c);
  json_t *hello = json_pack("{s:s,s:I,s:s,s:i,s:i,s:o}", "type", "hello", "client", (json_int_t)c->id, "server",
                            "xtwin-server " XT_SERVER_VERSION, "header_version", XT_STREAM_VERSION, "header_size",
                            XT_STREAM_HEADER_SIZE, "state", xt_srv_state_json(s));
  json_object_set_new(hello, "max_message_bytes", json_integer(s->cfg.max_ws_message));
  queue_json(c, hello);
  return 0;
}

/* A whole text message is in: a command, or a nack when it outgrew the limit. */
static void on_message(xt_server *s, client *c) {
  if (c->rx_bad) {
    char t[96];
    snprintf(t, sizeof t, "message over %d bytes", s->cfg.max_ws_message);
    queue_json(c, nack(NULL, XT_ETOOLARGE, t));
  } else
    run_command(c, c->rx ? c->rx : "", c->rxn);
  free(c->rx);
  c->rx = NULL;
  c->rxn = 0;
  c->rx_bad = 0;
}

/* A piece of a message: libwebsockets hands over fragments and partial frames, so text is
 * gathered until the last byte of the final fragment. A message over the limit is not kept but
 * read to its end (the connection stays usable), then answered with one nack. */
static int on_receive(xt_server *s, client *c, struct lws *wsi, const void *in, size_t len) {
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
  if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) on_message(s, c);
  return 0;
}

/* Sends the oldest queued text; returns -1 to close. */
static int send_text(client *c) {
  int k = c->th;
  int n = lws_write(c->wsi, (unsigned char *)c->texts[k] + LWS_PRE, c->tlen[k], LWS_WRITE_TEXT);
  free(c->texts[k]);
  c->texts[k] = NULL;
  c->th = (c->th + 1) % XT_WS_MAX_TEXTS;
  c->tn--;
  if (n < 0) return -1;
  lws_callback_on_writable(c->wsi); /* more texts, or a frame */
  return 0;
}

/* One message per writable callback (libwebsockets allows one lws_write each): the close frame
 * when closing, else a queued reply before any frame (acks are not held behind pixels), else the
 * next frame; asks for another callback while the ring has newer frames. */
static int on_writable(xt_server *s, client *c, struct lws *wsi) {
  if (c->closing || atomic_load(&s->quit)) {
    lws_close_reason(wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)"server shutting down", 20);
    return -1;
  }
  if (c->tn) return send_text(c);
  if (send_frame(c)) return -1;
  publish_caught_up(s);
  if (xt_ring_latest_pub(&s->ring) > c->last_pub) lws_callback_on_writable(wsi);
  return 0;
}

/* The connection is gone: out of the list, its queued texts and partial message freed, its
 * metrics slot given back (the totals keep what it was sent). */
static int on_closed(xt_server *s, client *c) {
  for (client **p = &clients; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      nclients--;
      break;
    }
  publish_caught_up(s); /* a client gone no longer holds the virtual clock back */
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
}

/* The loop was woken from another thread (xt_ws_wake: a new frame, or shutdown): every client
 * is asked for a writable callback, the only place it may send from. */
static int on_wake(xt_server *s, struct lws_context *ctx) {
  if (s && clients) {
    /* A client still busy with an older frame will skip to the newest: what it has missed so far
     * is already lost, so /metrics shows it now rather than at its next send. */
    uint64_t latest = xt_ring_latest_pub(&s->ring);
    pthread_mutex_lock(&s->metrics.mu);
    for (client *k = clients; k; k = k->next)
      if (k->slot >= 0 && latest > k->last_pub + 1 && !k->closing)
        s->metrics.clients[k->slot].dropped = k->dropped + (latest - k->last_pub - 1);
    pthread_mutex_unlock(&s->metrics.mu);
    /* the device's events (server/device.c), each once to every client, before its next frame */
    for (client *k = clients; k; k = k->next) {
      uint64_t seq;
      for (char *t; !k->closing && (t = xt_ring_text_next(&s->ring, k->last_text, &seq));) {
        k->last_text = seq;
        queue_text(k, t, 1);
      }
    }
    lws_callback_on_writable_all_protocol(ctx, &protocols[0]);
  }
  return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  struct lws_context *ctx = lws_get_context(wsi);
  xt_server *s = lws_context_user(ctx);
  client *c = user;
  switch (reason) {
  case LWS_CALLBACK_HTTP: return on_http(wsi);
  case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: return on_confirm_upgrade(s, wsi);
  case LWS_CALLBACK_ESTABLISHED: return on_established(s, c, wsi);
  case LWS_CALLBACK_RECEIVE: return on_receive(s, c, wsi, in, len);
  case LWS_CALLBACK_SERVER_WRITEABLE: return on_writable(s, c, wsi);
  case LWS_CALLBACK_CLOSED: return on_closed(s, c);
  case LWS_CALLBACK_EVENT_WAIT_CANCELLED: return on_wake(s, ctx);
  default: return 0;
  }
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
  info.ka_time = (int)(s->cfg.peer_timeout / 2 + 1); /* TCP keepalive finds vanished idle peers */
  info.ka_probes = 3;
  info.ka_interval = (int)(s->cfg.peer_timeout / 6 + 1);
  s->lws = lws_create_context(&info);
  if (!s->lws) return xt_fail(msg, XT_EINTERNAL, "WebSocket: cannot create the libwebsockets context");

  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
  if (strchr(s->cfg.bind, ':')) info.options = 0;
  info.port = s->cfg.ws_port;
  info.iface = s->cfg.bind;
  info.timeout_secs = (unsigned)s->cfg.head_timeout + 1; /* an upgrade request must complete in time too */
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
  /* Registered here, not in xt_ws_start: the engine starts after the stream (and initialises the
   * ring then), and no client can connect before this loop runs, so no earlier frame needs a
   * wake-up. */
  xt_ring_set_notify(&s->ring, ring_pushed, s);
  while (!atomic_load(&s->quit)) lws_service(s->lws, 0);
  /* Shutting down: every client gets a close frame (GOINGAWAY), then a bounded wait for them to
   * answer it, so nothing hangs on a client that does not. */
  for (client *c = clients; c; c = c->next) {
    c->closing = 1;
    lws_callback_on_writable(c->wsi);
  }
  uint64_t until = xt_now_ns() + 400000000ull; /* within the 1 s a SIGTERM may take (main.c) */
  while (clients && xt_now_ns() < until) lws_service(s->lws, 0);
  xt_ring_set_notify(&s->ring, NULL, NULL); /* nothing serves the loop from here on */
}

void xt_ws_destroy(xt_server *s) {
  if (s->lws) lws_context_destroy(s->lws);
  s->lws = NULL;
}
