/* The frame stream: WebSocket /v1/stream over libwebsockets. One thread (the caller of
 * xt_ws_run) owns every connection: render workers only push frames into the ring, whose notifier
 * (registered by xt_ws_run) calls lws_cancel_service(), so the engine never calls into this file;
 * the EVENT_WAIT_CANCELLED callback asks every client for a writable callback, and each writable
 * callback sends a queued JSON text, or goes on with the client's frame. Delivery is latest-wins
 * per client and plane: a client whose socket is still busy simply is not writable, and when it
 * is, it gets the newest frame of a plane it subscribed to (of two planes pending, the older
 * frame first); the frames it missed are counted in its header's frames_dropped and in /metrics.
 * Lockstep frames (answers to triggers) go out in order while they are in the ring.
 *
 * Transport (api/stream.md, "Transport"). Every client's message is sent from the ring frame's own
 * buffer, never a copy. With sender threads (send.c, --stream-senders; the default without TLS)
 * the service thread picks the client's frame and hands it over as one WebSocket frame whose first
 * bytes (the framing and the client's header fields) are in the client's own slot: the shared frame
 * is only read, by any number of threads at once. While they have it, libwebsockets is kept off
 * the socket (hand_to_senders says how); their completion wakes the loop (on_wake). Without them
 * (--stream-senders 0, TLS) one WebSocket message goes out in fragments, each as large as the socket
 * takes right now, so that libwebsockets never has to keep an unsent remainder (which it copies);
 * the fragments go out over as many writable callbacks as the socket needs. The client's own
 * header fields (t_sent_ns, frames_dropped) are then written into the frame's header just before its
 * first fragment, which takes the header with it: the service thread is the only writer, and the
 * kernel has the bytes before the next client's turn. A client that asked for a codec gets the
 * frame's compressed message, made once per frame and codec by the first such client and kept on
 * the ring frame (xt_frame_wire) for the others. Each socket's send buffer is sized to a frame.
 *
 * Text messages from clients are JSON commands (api/stream.md):
 *   {"type":"pose","seq":N,"pose":{...}}         -> {"type":"ack","seq":N,"ok":true,...}
 *   {"type":"acquisition","acquisition":{...}}   -> {"type":"ack","ok":true,"acquisition":{...}}
 *   {"type":"start"|"stop"|"trigger"|"state"}    -> {"type":"ack",...}
 *   {"type":"subscribe","planes":["A","B"]}      -> {"type":"ack","ok":true,"planes":[...],...}
 *   {"type":"codec","codec":"zstd"}              -> {"type":"ack","ok":true,"codec":"zstd"}
 * Any "id" member is echoed in the reply. The last two are this file's (the client's transport);
 * the others go through state.c's xt_ws_cmd_parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <libwebsockets.h>

#include "srv_clock.h"
#include "srv_engine.h"
#include "srv_guard.h"
#include "srv_instr.h"
#include "srv_metrics.h"
#include "srv_send.h"
#include "srv_state.h"
#include "srv_wire.h"
#include "srv_ws.h"
#include "xt_server.h"
#include "xt_stream.h"

_Static_assert(LWS_PRE <= XT_FRAME_PRE, "frame buffers leave XT_FRAME_PRE bytes for the WebSocket framing");

#define XT_WS_MAX_TEXTS 64
#define XT_WS_TX_PACKET ((size_t)64 << 20)
/* The smallest fragment worth a write: below it a callback waits for the socket to drain, unless it
 * has written nothing yet (a writable callback always makes progress, so it cannot spin). */
#define XT_WS_MIN_FRAG ((size_t)16 << 10)
/* The most a stream socket's send buffer is asked for (a frame is ~9.5 MB at FD20 full
 * resolution); the kernel bounds it further by net.core.wmem_max. */
#define XT_WS_SNDBUF_CAP ((size_t)64 << 20)

typedef struct client {
  struct lws *wsi;
  xt_server *srv;
  unsigned id;
  int slot; /* metrics.clients index, -1 if none */
  /* per plane: the last frame sent (its pub in the ring, its number among the plane's frames) and
   * its counter, and whether any was sent */
  uint64_t last_pub[XT_RING_PLANES], last_ppub[XT_RING_PLANES], last_counter[XT_RING_PLANES];
  int have_sent[XT_RING_PLANES];
  uint64_t last_pose_seq;
  int have_pose;
  uint64_t upto;   /* the ring holds nothing more for it up to this pub (the virtual clock's pacer) */
  unsigned planes; /* subscribed: bit p for plane p (XT_STREAM_PLANE_*) */
  int codec;       /* XT_STREAM_CODEC_* asked for: 16-bit frames go out compressed with it */
  /* the message on its way, in fragments: its frame (a reference), its bytes, how far it got */
  xt_frame *tx_f;
  unsigned char *tx_msg;
  size_t tx_len, tx_off;
  /* with sender threads: its slot in the pool (-1 none), whether the message is with them (the
   * service thread then neither reads nor writes on the socket), and whether its frame carried a
   * new pose (for the pose latency, counted when its first byte is out) */
  int sslot, tx_raw, tx_pose_changed;
  uint64_t send_calls, send_partial;
  /* the socket: send buffer asked for (0: none yet) and what the kernel granted */
  size_t sndbuf_asked;
  int sndbuf_granted;
  /* how its frames travelled (the log line at its close, --verbose) */
  uint64_t fragments, lws_buffered, bytes;
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
/* The sender threads (srv_send.h), NULL when the service thread writes every frame itself
 * (--stream-senders 0, or TLS: the threads write plain sockets). */
static xt_send_pool *senders;
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
    if (c->srv->cfg.verbose)
      fprintf(stderr, "xtwin-server: stream client %u: %d replies unsent, dropped\n", c->id, XT_WS_MAX_TEXTS);
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

/* ---- the client's planes and codec ----------------------------------------------------------- */

/* The planes of a mask as ["A", "B"]. */
static json_t *planes_json(unsigned planes) {
  json_t *a = json_array();
  for (int p = 0; p < XT_RING_PLANES; p++)
    if (planes >> p & 1) json_array_append_new(a, json_string(p ? "B" : "A"));
  return a;
}

/* A codec by name for this client: known and built in, else the error naming the field. */
static int codec_pick(const char *name, const char *field, int *codec, xt_msg *msg) {
  const int k = xt_wire_codec_parse(name);
  if (k < 0) return xt_fail(msg, XT_EINVAL, "%s: unknown codec '%.64s' (none, zstd, lz4)", field, name ? name : "");
  if (!xt_wire_codec_available(k))
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: %s is not built into this server (it has: %s)", field, name, xt_wire_codecs());
  *codec = k;
  return 0;
}

/* The upgrade's query: ?planes=a|b|a,b (default a) and ?codec=none|zstd|lz4 (default none), each
 * once at most; 0, or the error naming the parameter. Read in CONFIRM_UPGRADE, to refuse bad values
 * with a 400, and again in ESTABLISHED (libwebsockets keeps the request's headers until then). */
static int query_opts(struct lws *wsi, unsigned *planes, int *codec, xt_msg *msg) {
  *planes = 1u << XT_STREAM_PLANE_A;
  *codec = XT_STREAM_CODEC_NONE;
  int seen_planes = 0, seen_codec = 0;
  for (int i = 0; i < 64; i++) {
    char arg[4096]; /* a fragment is at most the request's header space (libwebsockets' 4 KiB) */
    const int n = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
    if (n <= 0) break;
    if (n >= (int)sizeof arg || lws_hdr_copy_fragment(wsi, arg, sizeof arg, WSI_TOKEN_HTTP_URI_ARGS, i) < 0) continue;
    const int is_planes = !strncmp(arg, "planes=", 7), is_codec = !strncmp(arg, "codec=", 6);
    if (!is_planes && !is_codec) continue; /* token=, or anything else: not ours */
    const char *v = strchr(arg, '=') + 1;
    if (is_planes) {
      if (seen_planes++) return xt_fail(msg, XT_EINVAL, "planes: given twice");
      int rc = xt_wire_planes_parse(v, "planes", planes, msg);
      if (rc) return rc;
    } else {
      if (seen_codec++) return xt_fail(msg, XT_EINVAL, "codec: given twice");
      int rc = codec_pick(v, "codec", codec, msg);
      if (rc) return rc;
    }
  }
  return 0;
}

/* {"type": "subscribe", "planes": ["A", "B"]}: the planes this client gets from now on. A plane
 * newly subscribed starts at its newest frame: nothing before it is sent or counted as missed. The
 * ack states each plane's frames published so far, so that a client of a plane that publishes
 * none (B on a single-plane server) can tell. */
static void cmd_subscribe(client *c, const json_t *cmd) {
  const json_t *a = json_object_get(cmd, "planes");
  xt_msg m;
  unsigned mask = 0;
  int rc = 0;
  if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > XT_RING_PLANES)
    rc = xt_fail(&m, XT_EINVAL, "planes: expected [\"A\"], [\"B\"] or [\"A\", \"B\"]");
  for (size_t i = 0; !rc && i < json_array_size(a); i++) {
    const char *name = json_string_value(json_array_get(a, i));
    const int p = xt_wire_plane_parse(name);
    if (p < 0) rc = xt_fail(&m, XT_EINVAL, "planes: unknown plane '%.64s' (A, B)", name ? name : "(not a string)");
    else if (mask >> p & 1) rc = xt_fail(&m, XT_EINVAL, "planes: plane '%s' named twice", name);
    else mask |= 1u << p;
  }
  if (rc) {
    queue_json(c, nack(cmd, rc, m.text));
    return;
  }
  uint64_t latest, ppubs[XT_RING_PLANES];
  xt_ring_mark(&c->srv->ring, &latest, ppubs);
  for (int p = 0; p < XT_RING_PLANES; p++)
    if (mask >> p & 1 && !(c->planes >> p & 1)) {
      c->last_pub[p] = latest;
      c->last_ppub[p] = ppubs[p];
    }
  c->planes = mask;
  json_t *j = ack(cmd, 1);
  json_object_set_new(j, "planes", planes_json(mask));
  json_object_set_new(j, "published", json_pack("{s:I,s:I}", "A", (json_int_t)ppubs[0], "B", (json_int_t)ppubs[1]));
  queue_json(c, j);
  lws_callback_on_writable(c->wsi);
}

/* {"type": "codec", "codec": "zstd"}: how this client's 16-bit frames come from its next frame on. */
static void cmd_codec(client *c, const json_t *cmd) {
  xt_msg m;
  const json_t *v = json_object_get(cmd, "codec");
  int k = 0;
  int rc = json_is_string(v) ? codec_pick(json_string_value(v), "codec", &k, &m)
                             : xt_fail(&m, XT_EINVAL, "codec: expected \"none\", \"zstd\" or \"lz4\"");
  if (rc) {
    queue_json(c, nack(cmd, rc, m.text));
    return;
  }
  c->codec = k;
  json_t *j = ack(cmd, 1);
  json_object_set_new(j, "codec", json_string(xt_wire_codec_name(k)));
  queue_json(c, j);
}

/* The client's own transport messages (subscribe, codec), answered here; 0 when the text is
 * another command (or not JSON: state.c's parser names the error). */
static int transport_command(client *c, const char *text, size_t len) {
  json_t *j = NULL;
  xt_msg m;
  if (xt_json_parse(text, len, &j, &m)) return 0;
  const char *type = json_string_value(json_object_get(j, "type"));
  int done = 1;
  if (type && !strcmp(type, "subscribe")) cmd_subscribe(c, j);
  else if (type && !strcmp(type, "codec")) cmd_codec(c, j);
  else done = 0;
  json_decref(j);
  return done;
}

/* Parses a complete text message and acts on it: one reply (ack or nack) queued per command, in
 * the order the commands came (queue_json drops a client that does not read its replies). */
static void run_command(client *c, const char *text, size_t len) {
  if (transport_command(c, text, len)) return;
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
  } else if (k.type == XT_CMD_SHAPE) {
    uint64_t version = 0, t = 0;
    rc = xt_srv_instr_update(s, json_string_value(json_object_get(k.update, "name")), k.update, &version, &t, &m);
    if (rc) queue_json(c, nack(cmd, rc, m.text));
    else {
      json_t *j = ack(cmd, 1);
      json_object_set_new(j, "version", json_integer((json_int_t)version));
      json_object_set_new(j, "t_ns", json_integer((json_int_t)t));
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
    if (k.processed != c->processed) atomic_fetch_add(&s->processed_readers, k.processed ? 1 : -1);
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

/* Where the client stands for the virtual clock's pacer: nothing left for it up to this pub. A
 * message still on its way is not sent yet. */
static uint64_t caught_up(const client *k) {
  if (k->tx_f && k->tx_f->pub - 1 < k->upto) return k->tx_f->pub - 1;
  return k->upto;
}

/* The oldest frame every client has been sent, for the virtual clock's pacer, which moves time on
 * only once it is the newest (srv_clock.h); woken when it moves. */
static void publish_caught_up(xt_server *s) {
  uint64_t m = UINT64_MAX;
  for (client *k = clients; k; k = k->next)
    if (!k->closing && caught_up(k) < m) m = caught_up(k);
  const uint64_t old = atomic_exchange(&s->ws_min_pub, m);
  if (m != old && xt_dev_clock_is_virtual()) xt_engine_wake(s);
}

/* ---- transport: socket buffer, compressed messages, fragments -------------------------------- */

/* A sysctl's first number (0 when it cannot be read). */
static size_t sysctl_num(const char *path, int field) {
  FILE *f = fopen(path, "r");
  unsigned long v[3] = {0, 0, 0};
  if (f) {
    if (fscanf(f, "%lu %lu %lu", &v[0], &v[1], &v[2]) < field + 1) v[field] = 0;
    fclose(f);
  }
  return (size_t)v[field];
}

/* Sizes the client's send buffer for a message of len bytes, so that the kernel can hold a whole
 * frame (api/stream.md, "Transport"): asked once per larger message, within XT_WS_SNDBUF_CAP; the
 * kernel grants twice the request (its bookkeeping), bounded by net.core.wmem_max. Setting it ends
 * the kernel's autotuning of that socket (which grows up to net.ipv4.tcp_wmem's maximum), so it is
 * asked only where the grant beats that. */
static void size_sndbuf(client *c, size_t len) {
  size_t want = len + ((size_t)64 << 10);
  if (want > XT_WS_SNDBUF_CAP) want = XT_WS_SNDBUF_CAP;
  if (want <= c->sndbuf_asked) return;
  c->sndbuf_asked = want;
  const int fd = (int)lws_get_socket_fd(c->wsi);
  if (fd < 0) return;
  static size_t wmem_max, tcp_max;
  if (!wmem_max) {
    wmem_max = sysctl_num("/proc/sys/net/core/wmem_max", 0);
    tcp_max = sysctl_num("/proc/sys/net/ipv4/tcp_wmem", 2);
  }
  const size_t grant = 2 * (wmem_max && want > wmem_max ? wmem_max : want);
  int v = (int)want;
  const int set = grant > tcp_max && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v) == 0;
  socklen_t l = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &l)) v = -1;
  if (set) c->sndbuf_granted = v;
  if (c->srv->cfg.verbose)
    fprintf(stderr, "xtwin-server: stream client %u: %zu-byte messages: send buffer %s %d bytes (asked %zu; "
            "net.core.wmem_max %zu, tcp_wmem max %zu)\n", c->id, len, set ? "set, kernel granted" : "left to autotuning, now",
            v, want, wmem_max, tcp_max);
}

/* Bytes the kernel takes on this socket now without refusing any: three quarters of its send
 * buffer (the rest covers the kernel's per-packet bookkeeping, which the buffer's size counts)
 * less what it holds unacknowledged. */
static size_t socket_room(const client *c) {
  const int fd = (int)lws_get_socket_fd(c->wsi);
  int sb = 0, q = 0;
  socklen_t l = sizeof sb;
  if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &l) || ioctl(fd, SIOCOUTQ, &q) || sb <= 0 || q < 0)
    return XT_WS_MIN_FRAG;
  const size_t cap = (size_t)sb / 4 * 3;
  return cap > (size_t)q ? cap - (size_t)q : 0;
}

/* Message m (0 raw, 1 processed) of frame f compressed with codec, made on first use and kept on
 * the frame for every other client (the service thread owns f->wire while f is published); NULL
 * when it cannot be made or would not be smaller: the client then gets the pixels as they are. */
static xt_frame_wire *wire_of(xt_frame *f, int m, int codec) {
  xt_frame_wire *w = &f->wire[m][codec];
  if (w->state) return w->state > 0 ? w : NULL;
  w->state = -1;
  const unsigned char *src = m ? f->msg2 : f->msg;
  const size_t n = m ? f->len2 : f->len;
  const xt_stream_header *h = (const xt_stream_header *)(const void *)src;
  const size_t hs = h->header_size;
  if (hs < XT_STREAM_HEADER_SIZE || hs > n || h->pixel_format != XT_STREAM_PIX_U16) return NULL;
  const size_t bound = xt_wire_bound(codec, n - hs);
  if (!bound) return NULL;
  if (w->cap < hs + bound) {
    free(w->mem);
    w->cap = 0;
    if (!(w->mem = malloc(XT_FRAME_PRE + hs + bound))) return NULL;
    w->cap = hs + bound;
  }
  unsigned char *out = w->mem + XT_FRAME_PRE;
  const size_t cw = xt_wire_compress(codec, src + hs, n - hs, out + hs, bound);
  if (!cw || cw >= n - hs) return NULL;
  memcpy(out, src, hs);
  xt_stream_header *oh = (xt_stream_header *)(void *)out;
  oh->codec = (uint32_t)codec;
  oh->wire_bytes = cw;
  w->len = hs + cw;
  w->state = 1;
  return w;
}

/* The client's message went out: its latencies into /metrics. t_first: its first byte handed to the
 * kernel (the header's t_sent_ns); t_last: its last (0: not known yet). */
static void count_sent(client *c, uint64_t t_first, uint64_t t_last) {
  const xt_stream_header *h = (const xt_stream_header *)(const void *)c->tx_msg;
  xt_metrics *mt = &c->srv->metrics;
  pthread_mutex_lock(&mt->mu);
  if (t_first) {
    if (h->t_exposure_ns && t_first >= h->t_exposure_ns) xt_hist_add(&mt->latency, (double)(t_first - h->t_exposure_ns) * 1e-9);
    if (c->tx_pose_changed && h->t_pose_ns && t_first >= h->t_pose_ns)
      xt_hist_add(&mt->pose_latency, (double)(t_first - h->t_pose_ns) * 1e-9);
  }
  if (t_last && h->t_render_done_ns && t_last >= h->t_render_done_ns)
    xt_hist_add(&mt->send, (double)(t_last - h->t_render_done_ns) * 1e-9);
  pthread_mutex_unlock(&mt->mu);
}

/* Writes the client's message from where it stands, fragment by fragment while the socket takes
 * them whole; returns -1 to close. libwebsockets writes each fragment's framing into the LWS_PRE
 * bytes before it, which inside a message are pixels other clients still need: kept and put back
 * around the write (the kernel, or libwebsockets' own buffer, has them by then). */
static int send_fragments(client *c) {
  for (int first = 1;; first = 0) {
    const size_t left = c->tx_len - c->tx_off, room = socket_room(c);
    if (!first && room < XT_WS_MIN_FRAG && room < left) break;
    size_t n = room > XT_WS_MIN_FRAG ? room : XT_WS_MIN_FRAG;
    if (n > left) n = left;
    unsigned char *p = c->tx_msg + c->tx_off, keep[LWS_PRE];
    const int flags = (c->tx_off ? LWS_WRITE_CONTINUATION : LWS_WRITE_BINARY) | (n < left ? LWS_WRITE_NO_FIN : 0);
    memcpy(keep, p - LWS_PRE, LWS_PRE);
    const int w = lws_write(c->wsi, p, n, (enum lws_write_protocol)flags);
    memcpy(p - LWS_PRE, keep, LWS_PRE);
    if (w < (int)n) return -1;
    c->tx_off += n;
    c->fragments++;
    c->bytes += n;
    const int buffered = lws_partial_buffered(c->wsi);
    c->lws_buffered += buffered != 0;
    if (c->tx_off == c->tx_len) {
      count_sent(c, 0, xt_dev_now_ns());
      xt_frame_unref(&c->srv->ring, c->tx_f);
      c->tx_f = NULL;
      c->tx_msg = NULL;
      break; /* the next frame, or a text, in the next callback */
    }
    if (buffered || lws_send_pipe_choked(c->wsi)) break;
  }
  lws_callback_on_writable(c->wsi);
  return 0;
}

/* Picks the client's next frame and makes it the message on its way: counts what it missed,
 * chooses raw or processed, compressed or not, and writes this client's fields into the header.
 * 1: a message to send; 0: none now; -1: a frame consumed unsent (stale, or lost to an injected
 * link fault): look again. */
static int begin_frame(client *c) {
  xt_server *s = c->srv;
  xt_frame *f = xt_ring_next_planes(&s->ring, c->last_pub, c->planes, &c->upto);
  if (!f) return 0;
  const int p = f->plane == XT_STREAM_PLANE_B ? 1 : 0;
  /* the chain's frames come as two messages; this client gets the one it chose */
  const int m = c->processed && f->msg2 ? 1 : 0;
  unsigned char *fm = m ? f->msg2 : f->msg;
  size_t flen = m ? f->len2 : f->len;
  xt_stream_header *h = (xt_stream_header *)(void *)fm;
  uint64_t drop = (c->have_sent[p] || c->last_ppub[p]) && f->ppub > c->last_ppub[p] ? f->ppub - c->last_ppub[p] - 1 : 0;
  /* out of order from another worker */
  const int stale = c->have_sent[p] && h->frame_counter <= c->last_counter[p];
  c->last_pub[p] = f->pub;
  c->last_ppub[p] = f->ppub;
  if (stale || (m && !f->proc_ok)) {
    /* a processed frame made while no client read them (this one asked since) was left on the
     * device: not a frame this client missed, its first is the next one */
    c->dropped += stale;
    xt_frame_unref(&s->ring, f);
    return -1;
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
    return -1;
  }
  c->dropped += drop;
  if (c->codec != XT_STREAM_CODEC_NONE) {
    xt_frame_wire *w = wire_of(f, m, c->codec);
    if (w) {
      fm = w->mem + XT_FRAME_PRE;
      flen = w->len;
    }
  }
  c->tx_f = f;
  c->tx_msg = fm;
  c->tx_len = flen;
  c->tx_off = 0;
  c->tx_pose_changed = c->have_pose && h->pose_seq != c->last_pose_seq;
  c->last_counter[p] = h->frame_counter;
  c->have_sent[p] = 1;
  c->last_pose_seq = h->pose_seq;
  c->have_pose = 1;
  c->sent++;
  xt_metrics *mt = &s->metrics;
  const uint64_t now = xt_dev_now_ns();
  pthread_mutex_lock(&mt->mu);
  mt->sent_total++;
  mt->dropped_total += drop;
  if (h->t_render_done_ns && now >= h->t_render_done_ns)
    xt_hist_add(&mt->handoff, (double)(now - h->t_render_done_ns) * 1e-9);
  if (c->slot >= 0) {
    mt->clients[c->slot].sent = c->sent;
    mt->clients[c->slot].dropped = c->dropped;
  }
  pthread_mutex_unlock(&mt->mu);
  return 1;
}

/* The service thread's own send: this client's fields written into the shared frame's header just
 * before its first fragment (nothing else writes the frame meanwhile). */
static void stamp_shared(client *c) {
  const uint64_t t = xt_dev_now_ns();
  xt_stream_header *wh = (xt_stream_header *)(void *)c->tx_msg;
  wh->t_sent_ns = t;
  wh->frames_dropped = c->dropped;
  size_sndbuf(c, c->tx_len);
  count_sent(c, t, 0);
}

/* Hands the client's message to the sender threads: one WebSocket frame (FIN, binary, unmasked),
 * its header and the stream header's first bytes with this client's fields in the slot's own
 * buffer, the rest from the shared frame. t_sent_ns is stamped by the thread as the first byte goes
 * (srv_send.h). libwebsockets is kept off the socket until it is done: no reading (a ping's pong
 * or a close's answer would be written into the middle of the frame), no writes of ours (on_writable
 * waits), nothing of its own left buffered (checked before this is called). 0, or -1 to close. */
static int hand_to_senders(client *c) {
  const int fd = (int)lws_get_socket_fd(c->wsi);
  const size_t own = offsetof(xt_stream_header, frames_dropped) + sizeof(uint64_t);
  const size_t ncopy = c->tx_len < own ? c->tx_len : own;
  unsigned char *b = xt_send_head(senders, c->sslot);
  size_t k = 0;
  b[k++] = 0x82; /* FIN, binary */
  if (c->tx_len < 126) b[k++] = (unsigned char)c->tx_len;
  else if (c->tx_len <= 0xffff) {
    b[k++] = 126;
    for (int i = 1; i >= 0; i--) b[k++] = (unsigned char)(c->tx_len >> (8 * i));
  } else {
    b[k++] = 127;
    for (int i = 7; i >= 0; i--) b[k++] = (unsigned char)((uint64_t)c->tx_len >> (8 * i));
  }
  memcpy(b + k, c->tx_msg, ncopy);
  int stamp_at = -1;
  if (ncopy == own) {
    xt_stream_header hh; /* this client's fields, at their offsets in the copy */
    memcpy(&hh, c->tx_msg, own);
    hh.frames_dropped = c->dropped;
    memcpy(b + k, &hh, own);
    stamp_at = (int)(k + offsetof(xt_stream_header, t_sent_ns));
  }
  size_sndbuf(c, c->tx_len);
  lws_rx_flow_control(c->wsi, 0);
  c->tx_raw = 1;
  if (fd < 0 || xt_send_begin(senders, c->sslot, fd, k + ncopy, c->tx_msg + ncopy, c->tx_len - ncopy, stamp_at)) {
    c->tx_raw = 0;
    return -1;
  }
  return 0;
}

/* The sender threads finished this client's message (on the service thread, woken by them): the
 * frame's reference goes, the latencies are counted, reading resumes and the next writable
 * callback sends a queued text or the next frame. A socket that broke (r->err) is closed by that
 * callback instead, without reading again. */
static void sent_by_senders(client *c, const xt_send_result *r) {
  c->tx_raw = 0;
  c->send_calls += r->calls;
  c->send_partial += r->partial;
  if (!r->err) {
    count_sent(c, r->t_first_ns, r->t_last_ns);
    c->fragments++;
    c->bytes += c->tx_len;
  }
  xt_frame_unref(&c->srv->ring, c->tx_f);
  c->tx_f = NULL;
  c->tx_msg = NULL;
  if (r->err) {
    if (c->srv->cfg.verbose)
      fprintf(stderr, "xtwin-server: stream client %u: send failed (%s)\n", c->id, strerror(r->err));
    c->closing = 1;
  } else
    lws_rx_flow_control(c->wsi, 1);
  lws_callback_on_writable(c->wsi);
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
 * (403), the token (401), the path (404), the client limit or shutdown (503), then the query's
 * planes and codec (400, naming the parameter). */
static int on_confirm_upgrade(xt_server *s, struct lws *wsi) {
  if (!s) return -1;
  const char *why = origin_refused(s, wsi);
  int rc = 0;
  if (why) rc = reject_upgrade(wsi, XT_EPERM, 403, "Forbidden", why);
  else if (!token_ok(s, wsi)) rc = reject_upgrade(wsi, XT_EAUTH, 401, "Unauthorized", "missing or wrong bearer token");
  else if (!route_ok(wsi)) rc = reject_upgrade(wsi, XT_ENOTFOUND, 404, "Not Found", "the stream is at /v1/stream");
  else if (nclients >= s->cfg.max_clients || atomic_load(&s->quit))
    rc = reject_upgrade(wsi, XT_EBUSY, 503, "Service Unavailable", "too many stream clients, or shutting down");
  else {
    unsigned planes;
    int codec;
    xt_msg m;
    int err = query_opts(wsi, &planes, &codec, &m);
    if (err) rc = reject_upgrade(wsi, err, xt_errhttp(err), "Bad Request", m.text);
  }
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
  c->slot = -1;
  c->sslot = -1;
  /* its planes and codec from the upgrade's query (checked by on_confirm_upgrade) */
  xt_msg m;
  if (query_opts(wsi, &c->planes, &c->codec, &m)) return -1;
  /* every client of a server with sender threads is theirs: the service thread's own sends write
   * into the shared frame, which the threads may be reading for another client (a slot per
   * max_clients: none free cannot happen) */
  if (senders && (c->sslot = xt_send_slot_get(senders)) < 0) return -1;
  uint64_t latest, ppubs[XT_RING_PLANES];
  xt_ring_mark(&s->ring, &latest, ppubs);
  for (int p = 0; p < XT_RING_PLANES; p++) {
    c->last_pub[p] = latest;
    c->last_ppub[p] = ppubs[p];
  }
  c->upto = latest;
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
  json_object_set_new(hello, "planes", planes_json(c->planes));
  json_object_set_new(hello, "codec", json_string(xt_wire_codec_name(c->codec)));
  json_t *codecs = json_array();
  for (int k = 0; k < XT_FRAME_CODECS; k++)
    if (xt_wire_codec_available(k)) json_array_append_new(codecs, json_string(xt_wire_codec_name(k)));
  json_object_set_new(hello, "codecs", codecs);
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

/* A writable callback: the close frame when closing; else the message on its way goes on (a text
 * cannot come between a message's fragments); else a queued reply before any new frame (acks are
 * not held behind pixels); else the next frame begins. */
static int on_writable(xt_server *s, client *c, struct lws *wsi) {
  /* the sender threads have its message: nothing may go onto the socket until they are done (their
   * completion asks for this callback again) */
  if (c->tx_raw) return 0;
  if (c->closing || atomic_load(&s->quit)) {
    lws_close_reason(wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)"server shutting down", 20);
    return -1;
  }
  int rc = 0;
  if (c->tx_f) rc = send_fragments(c);
  else if (c->tn) return send_text(c);
  else if (senders && lws_partial_buffered(wsi)) {
    /* a text libwebsockets still holds part of goes out first (it flushes before this callback) */
    lws_callback_on_writable(wsi);
    return 0;
  } else {
    int b;
    while ((b = begin_frame(c)) < 0) {}
    if (b > 0 && senders) {
      if ((rc = hand_to_senders(c)) && s->cfg.verbose)
        fprintf(stderr, "xtwin-server: stream client %u: the sender threads refused its frame\n", c->id);
    } else if (b > 0) {
      stamp_shared(c);
      rc = send_fragments(c);
    }
  }
  publish_caught_up(s);
  return rc;
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
  if (c->processed) atomic_fetch_sub(&s->processed_readers, 1);
  c->processed = 0;
  if (s->cfg.verbose)
    fprintf(stderr, "xtwin-server: stream client %u closed: %llu frames, %llu bytes in %llu fragments, "
            "libwebsockets kept a remainder %llu times; sender threads: %llu sendmsg calls, %llu partial\n", c->id,
            (unsigned long long)c->sent, (unsigned long long)c->bytes, (unsigned long long)c->fragments,
            (unsigned long long)c->lws_buffered, (unsigned long long)c->send_calls, (unsigned long long)c->send_partial);
  /* the sender threads let go of its socket before libwebsockets closes it */
  if (senders && c->sslot >= 0) xt_send_slot_put(senders, c->sslot);
  c->sslot = -1;
  c->tx_raw = 0;
  xt_frame_unref(&s->ring, c->tx_f);
  c->tx_f = NULL;
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

static uint64_t last_push; /* the ring's t_push_ns when on_wake last ran */

/* The loop was woken from another thread (xt_ws_wake: a new frame, or shutdown), or, polling
 * (--stream-spin-us, xt_ws_run), saw a new frame pushed: every client is asked for a writable
 * callback, the only place it may send from. */
static int on_wake(xt_server *s, struct lws_context *ctx) {
  /* the first wake-up after a frame was pushed: how long the service thread took to run */
  if (s) {
    const uint64_t tp = atomic_load(&s->ring.t_push_ns), now = xt_now_ns();
    if (tp > last_push && now >= tp) {
      last_push = tp;
      pthread_mutex_lock(&s->metrics.mu);
      xt_hist_add(&s->metrics.wake, (double)(now - tp) * 1e-9);
      pthread_mutex_unlock(&s->metrics.mu);
    }
  }
  if (s && clients && senders) {
    /* messages the sender threads finished */
    xt_send_result r;
    for (client *k = clients; k; k = k->next)
      if (k->tx_raw && xt_send_poll(senders, k->sslot, &r)) sent_by_senders(k, &r);
    publish_caught_up(s);
  }
  if (s && clients) {
    /* A client still busy with an older frame will skip to the newest: what it has missed so far
     * is already lost, so /metrics shows it now rather than at its next send. */
    uint64_t latest, ppubs[XT_RING_PLANES];
    xt_ring_mark(&s->ring, &latest, ppubs);
    pthread_mutex_lock(&s->metrics.mu);
    for (client *k = clients; k; k = k->next) {
      uint64_t missed = 0;
      for (int p = 0; p < XT_RING_PLANES; p++)
        if (k->planes >> p & 1 && ppubs[p] > k->last_ppub[p] + 1) missed += ppubs[p] - k->last_ppub[p] - 1;
      if (k->slot >= 0 && missed && !k->closing) s->metrics.clients[k->slot].dropped = k->dropped + missed;
    }
    pthread_mutex_unlock(&s->metrics.mu);
    /* the device's events (server/device.c), each once to every client, before its next frame */
    for (client *k = clients; k; k = k->next) {
      uint64_t seq;
      for (char *t; !k->closing && (t = xt_ring_text_next(&s->ring, k->last_text, &seq));) {
        k->last_text = seq;
        queue_text(k, t, 1);
      }
    }
    /* Every client gets its frame from its writable callback, never from here: libwebsockets
     * answers a ping it has read with a pong that it writes at the socket's next POLLOUT, before
     * that callback and without asking us, and no API says one is pending. Handed to the sender
     * threads from here (as 930a6d8 did), a client whose ping had just been read got that pong
     * written into the middle of its frame (a corrupt frame; the client stopped reading and the
     * peer timeout dropped it: test_server_senders' "fast client reset"). By its writable
     * callback the pong is out. */
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

/* The sender threads this server runs (--stream-senders; api/stream.md, "Transport"): auto is one
 * per client up to four. None with TLS: they write the plain socket, and the TLS record layer is
 * libwebsockets' (an explicit count with TLS is refused at start, config.c). No WebSocket extension
 * is offered (the vhost has none), so permessage-deflate never applies to a frame. */
static int senders_wanted(const xt_server *s) {
  if (s->cfg.tls_cert[0]) return 0;
  if (s->cfg.stream_senders >= 0) return s->cfg.stream_senders;
  return s->cfg.max_clients < 4 ? s->cfg.max_clients : 4;
}

int xt_ws_start(xt_server *s, xt_msg *msg) {
  memset(protocols, 0, sizeof protocols);
  protocols[0].name = "xtwin-stream";
  protocols[0].callback = callback;
  protocols[0].per_session_data_size = sizeof(client);
  protocols[0].rx_buffer_size = (size_t)s->cfg.max_ws_message;
  /* One send() per fragment: with tx_packet_size 0, lws caps each send() at rx_buffer_size (16 KiB)
   * and trickles the rest of a 2 MiB frame out 16 KiB per poll round (~7 ms on loopback). Larger
   * than any frame (fd20 float32 is 19 MB); send_fragments sizes each fragment to what the socket
   * takes, so lws never keeps a remainder. */
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
  /* No PING of libwebsockets' own on an idle connection (its default: after 300 s without a PONG or
   * other proof of life): with sender threads it would be written on POLLOUT, possibly into the
   * middle of a frame they are writing. Dead peers are found by TCP keepalive and TCP_USER_TIMEOUT
   * (on_established). */
  static const lws_retry_bo_t no_idle_ping = {.secs_since_valid_ping = 0, .secs_since_valid_hangup = 0};
  info.retry_and_idle_policy = &no_idle_ping;
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
  if (s->cfg.tls_cert[0] && s->cfg.stream_senders > 0) {
    xt_ws_destroy(s);
    return xt_fail(msg, XT_EINVAL, "stream_senders: sender threads write plain sockets; with TLS (tls_cert) the "
                   "service thread writes every frame: leave it at -1 (auto) or 0");
  }
  const int n = senders_wanted(s);
  if (n > 0) {
    /* the threads only ever wake the service loop (ring_pushed), which exists from here on */
    int rc = (senders = xt_send_pool_new(s->cfg.max_clients, ring_pushed, s, msg)) ? xt_send_pool_start(senders, n, msg)
                                                                                    : XT_ENOMEM;
    if (rc) {
      xt_ws_destroy(s);
      return rc;
    }
    if (s->cfg.verbose) fprintf(stderr, "xtwin-server: stream: %d sender threads (--stream-senders)\n", n);
  }
  return 0;
}

void xt_ws_run(xt_server *s) {
  /* Registered here, not in xt_ws_start: the engine starts after the stream (and initialises the
   * ring then), and no client can connect before this loop runs, so no earlier frame needs a
   * wake-up. */
  xt_ring_set_notify(&s->ring, ring_pushed, s);
  const uint64_t spin = (uint64_t)s->cfg.stream_spin_us * 1000u;
  while (!atomic_load(&s->quit)) {
    /* --stream-spin-us: from a render's start (xt_ring_expect, which also woke this thread) until
     * its frame is pushed, or for at most that long, the sockets are polled without sleeping and
     * the ring looked at between polls, so the frame goes to the clients at once rather than
     * after this thread's wake-up (xtwin_stream_wake_seconds, ~0.9 ms p50 on a 16-core GPU host) */
    const uint64_t te = spin ? atomic_load(&s->ring.t_expect_ns) : 0;
    if (te && clients && te > atomic_load(&s->ring.t_push_ns) && xt_now_ns() - te < spin) {
      lws_service(s->lws, -1); /* no wait: only what is pending */
      if (atomic_load(&s->ring.t_push_ns) > last_push) on_wake(s, s->lws);
    } else
      lws_service(s->lws, 0);
  }
  /* Shutting down: every client gets a close frame (GOINGAWAY), then a bounded wait for them to
   * answer it, so nothing hangs on a client that does not. */
  for (client *c = clients; c; c = c->next) {
    c->closing = 1;
    lws_callback_on_writable(c->wsi);
  }
  uint64_t until = xt_now_ns() + 400000000ull; /* within the 1 s a SIGTERM may take (main.c) */
  while (clients && xt_now_ns() < until) lws_service(s->lws, 0);
  /* a message still with the threads (a client that stopped reading) is abandoned: its socket is
   * closed with the context */
  xt_send_pool_stop(senders);
  xt_ring_set_notify(&s->ring, NULL, NULL); /* nothing serves the loop from here on */
}

void xt_ws_destroy(xt_server *s) {
  xt_send_pool_stop(senders); /* no thread may wake a context being destroyed */
  if (s->lws) lws_context_destroy(s->lws);
  s->lws = NULL;
  xt_send_pool_free(senders); /* after the clients' close callbacks gave their slots back */
  senders = NULL;
}
