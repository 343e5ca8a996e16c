/* REST control over libmicrohttpd. Routes are data: the table below (method, path, handler,
 * summary) is what the dispatcher matches, what `xtwin-server --routes` prints and what the test
 * checks api/openapi.yaml against. Every error answers with a JSON body
 *   {"error": {"name": "<xt_errname>", "status": <http>, "message": "..."}}
 * and the server keeps serving. Connections arrive through the accept gate (gate.c: per-address
 * limit, request deadline and body rate, malformed heads and framing answered there, the checks
 * below run on the raw head), with their whole request already in the socket, one request each
 * ("Connection: close" on every answer).
 *
 * What a request must carry, checked on its head before any body is read (docs/server.md,
 * "Security"): a Host the server answers to and, from a browser, an allowed Origin (guard.c,
 * against DNS rebinding and cross-site requests); with --token "Authorization: Bearer TOKEN"
 * (401), health included: a probe that can reach the port is given the token too; a body only as
 * application/json (415: a cross-site form or fetch cannot send that without a CORS preflight);
 * at most max_body bytes (413). Over TLS (where the gate cannot read the head), a request refused
 * here on its head still has its body read and discarded (up to XT_REST_DRAIN bytes) before the
 * answer goes out: a client that writes its whole
 * body before reading (Python's urllib and requests) would otherwise see the connection reset
 * under it instead of the answer. A client that asked "Expect: 100-continue" gets the answer at
 * once (it sends no body). HEAD is answered on every GET route; OPTIONS answers CORS preflights
 * from allowed origins. */
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "srv_budget.h"
#include "srv_clock.h"
#include "srv_engine.h"
#include "srv_guard.h"
#include "srv_contrast.h"
#include "srv_instr.h"
#include "srv_metrics.h"
#include "srv_study.h"
#include "srv_motion.h"
#include "srv_rest.h"
#include "srv_session.h"
#include "srv_state.h"
#include "xt_console.h"
#include "xt_output.h"
#include "xt_record.h"
#include "xt_server.h"
#include "xt_stream.h"

/* ---- requests and replies ----------------------------------------------------------------- */

#define XT_REST_DRAIN ((size_t)256 << 20) /* body bytes read and discarded after an early refusal */

typedef struct reply reply;

typedef struct req {
  char *body;
  size_t n, cap;
  int toolarge;
  reply *early;   /* refused on the head: answered once the body is drained */
  size_t drained;
  char cors[256]; /* an allowed Origin, echoed in Access-Control-Allow-Origin */
  const char *url; /* libmicrohttpd's, valid until the request completes */
} req;

struct reply {
  int status;
  json_t *json;         /* owned; or */
  unsigned char *bin;   /* owned (malloc) */
  size_t binlen;
  const char *ctype;
  char *text;           /* owned (malloc), text/plain */
  size_t textlen;
  const char *hname[6];
  char *hval[6];        /* owned */
  int nh;
};

typedef void (*handler_fn)(xt_server *s, struct MHD_Connection *con, req *r, reply *out);

static void reply_error(reply *out, int err, int status, const char *message) {
  if (!status) status = xt_errhttp(err);
  out->status = status;
  json_decref(out->json);
  out->json = xt_error_json(err, status, message);
}

static void reply_json(reply *out, int status, json_t *j) {
  out->status = status;
  json_decref(out->json);
  out->json = j;
}

static void add_header(reply *out, const char *name, const char *value) {
  if (out->nh < (int)(sizeof out->hval / sizeof out->hval[0])) {
    out->hname[out->nh] = name;
    out->hval[out->nh] = strdup(value);
    out->nh++;
  }
}

/* Parses the body as a JSON object; an empty body gives an empty object when allow_empty. */
static int body_json(req *r, reply *out, int allow_empty, json_t **j) {
  xt_msg m;
  int rc = xt_body_json(r->body, r->n, allow_empty, j, &m);
  if (rc) reply_error(out, rc, 0, m.text);
  return rc ? -1 : 0;
}

/* ---- handlers ----------------------------------------------------------------------------- */

static uint64_t t_start_ns;
static char *tls_cert_mem, *tls_key_mem; /* libmicrohttpd keeps pointers to these until stop */

static void h_health(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, json_pack("{s:s,s:f}", "status", "ok", "uptime_s", (double)(xt_now_ns() - t_start_ns) * 1e-9));
}

static void h_info(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, xt_srv_info_json(s));
}

static void h_pose_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  pthread_mutex_lock(&s->st_mu);
  json_t *j = json_pack("{s:o,s:I}", "pose", xt_pose_to_json(&s->planes[0].set.pose), "seq", (json_int_t)s->planes[0].set.pose_seq);
  pthread_mutex_unlock(&s->st_mu);
  reply_json(out, 200, j);
}

static void h_pose_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  uint64_t seq = 0;
  int rc = xt_srv_update_pose(s, j, 1, &seq, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  h_pose_get(s, con, r, out);
}

static void h_acq_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  /* plane A's view (with the biplane settings on a biplane system) */
  json_t *st = xt_srv_plane_state_json(s, 0);
  json_t *j = json_incref(json_object_get(st, "acquisition"));
  json_object_set(j, "next_frame", json_object_get(st, "next_frame"));
  json_decref(st);
  json_object_set_new(j, "dose", xt_dose_json(s)); /* after st_mu: takes plane.mu */
  reply_json(out, 200, j);
}

static void h_acq_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_update_acq(s, j, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  h_acq_get(s, con, r, out);
}

static void h_start(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  xt_msg m;
  int rc = xt_srv_start(s, 1, &m);
  if (rc) return reply_error(out, rc, 0, m.text); /* 409 naming the device's state */
  h_acq_get(s, con, r, out);
}

static void h_stop(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  xt_msg m;
  int rc = xt_srv_start(s, 0, &m);
  if (rc) return reply_error(out, rc, 0, m.text);
  h_acq_get(s, con, r, out);
}

/* ---- /v1/planes/{plane}/...: one plane of a biplane system (A: what the routes above mean) ---- */

/* The plane the URL names (its segment after /v1/planes/); 404 naming it otherwise. */
static int url_plane(xt_server *s, const req *r, reply *out, int *plane) {
  static const char prefix[] = "/v1/planes/";
  char seg[16] = "";
  if (!strncmp(r->url, prefix, sizeof prefix - 1)) {
    const char *a = r->url + sizeof prefix - 1;
    size_t n = strcspn(a, "/");
    if (n < sizeof seg) snprintf(seg, sizeof seg, "%.*s", (int)n, a);
  }
  xt_msg m;
  if (xt_srv_plane_parse(s, seg, plane, &m)) {
    reply_error(out, XT_ENOTFOUND, 404, m.text);
    return -1;
  }
  return 0;
}

static void h_plane_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  if (url_plane(s, r, out, &pl)) return;
  json_t *j = xt_srv_plane_state_json(s, pl);
  json_object_set_new(j, "dose", xt_dose_json_plane(s, pl)); /* after st_mu: takes the plane's mu */
  json_object_set_new(j, "device", xt_srv_device_json_plane(s, pl));
  reply_json(out, 200, j);
}

static void plane_pose_reply(xt_server *s, int pl, reply *out) {
  pthread_mutex_lock(&s->st_mu);
  json_t *j = json_pack("{s:o,s:I,s:s}", "pose", xt_pose_to_json(&s->planes[pl].set.pose), "seq",
                        (json_int_t)s->planes[pl].set.pose_seq, "plane", pl ? "B" : "A");
  pthread_mutex_unlock(&s->st_mu);
  reply_json(out, 200, j);
}

static void h_plane_pose_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  if (!url_plane(s, r, out, &pl)) plane_pose_reply(s, pl, out);
}

static void h_plane_pose_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  json_t *j;
  if (url_plane(s, r, out, &pl) || body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_update_pose_plane(s, pl, j, 1, NULL, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  plane_pose_reply(s, pl, out);
}

static void plane_acq_reply(xt_server *s, int pl, reply *out) {
  json_t *j = xt_srv_plane_state_json(s, pl);
  json_t *a = json_incref(json_object_get(j, "acquisition"));
  json_object_set(a, "next_frame", json_object_get(j, "next_frame"));
  json_decref(j);
  json_object_set_new(a, "dose", xt_dose_json_plane(s, pl));
  reply_json(out, 200, a);
}

static void h_plane_acq_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  if (!url_plane(s, r, out, &pl)) plane_acq_reply(s, pl, out);
}

static void h_plane_acq_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  json_t *j;
  if (url_plane(s, r, out, &pl) || body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_update_acq_plane(s, pl, j, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  plane_acq_reply(s, pl, out);
}

static void h_plane_device_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  if (!url_plane(s, r, out, &pl)) reply_json(out, 200, xt_srv_device_json_plane(s, pl));
}

/* POST /v1/planes/{plane}/device/{command}: the command is the path's last part. */
static void h_plane_device_cmd(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  int pl;
  if (url_plane(s, r, out, &pl)) return;
  const char *slash = strrchr(r->url, '/');
  const int cmd = xt_dev_cmd_parse(slash ? slash + 1 : "");
  if (cmd < 0) return reply_error(out, XT_ENOTFOUND, 404, "device: no such command (see GET /v1/device's commands)");
  json_t *j, *dev = NULL;
  if (body_json(r, out, 1, &j)) return;
  xt_msg m;
  int rc = xt_srv_device_plane(s, pl, cmd, j, &dev, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  reply_json(out, 200, dev);
}

static void h_scenario_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, xt_srv_scenario_json(s));
}

/* PUT /v1/scenario: a scenario (docs/device.md, "Scenarios") replaces the one playing and starts now. */
static void h_scenario_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_scenario_set(s, j, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  h_scenario_get(s, con, r, out);
}

static void h_device_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, xt_srv_device_json(s));
}

/* POST /v1/device/<command>: the command is the path's last part (one route each in the table). */
static void h_device_cmd(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  const char *slash = strrchr(r->url, '/');
  const int cmd = xt_dev_cmd_parse(slash ? slash + 1 : "");
  json_t *j, *dev = NULL;
  if (body_json(r, out, 1, &j)) return;
  xt_msg m;
  int rc = xt_srv_device(s, cmd, j, &dev, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text); /* a command the state does not allow: 409 STATE */
  reply_json(out, 200, dev);
}

/* GET /v1/faults: the faults acting now (fault.c). */
static void h_faults_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, xt_srv_faults_json(s));
}

/* POST /v1/faults/<name>: the fault is the path's last part (one route each in the table); 200 with
 * GET's body. A bad field: 400 naming it; abort_exposure with nothing exposing: 409 STATE. */
static void h_fault_post(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  const char *slash = strrchr(r->url, '/');
  json_t *j;
  if (body_json(r, out, 1, &j)) return;
  xt_msg m;
  int rc = xt_srv_fault(s, slash ? slash + 1 : "", j, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  reply_json(out, 200, xt_srv_faults_json(s));
}

/* DELETE /v1/faults: every server-side fault cleared (device faults stay: POST /v1/device/reset). */
static void h_faults_delete(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  xt_srv_faults_clear(s);
  reply_json(out, 200, xt_srv_faults_json(s));
}

static void h_trigger(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  xt_msg m;
  uint64_t counter = 0;
  int rc = xt_engine_trigger(s, &counter, &m);
  if (rc) return reply_error(out, rc, 0, m.text);
  reply_json(out, 200, json_pack("{s:I}", "frame", (json_int_t)counter));
}

/* Which encoding the client accepts: 1 png, 2 npy, 0 none we have. */
static int negotiate(struct MHD_Connection *con) {
  const char *f = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "format");
  if (f) return !strcmp(f, "png") ? 1 : !strcmp(f, "npy") ? 2 : 0;
  const char *a = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
  if (!a || !*a) return 1;
  if (strstr(a, "application/x-npy") || strstr(a, "application/octet-stream")) return 2;
  if (strstr(a, "image/png") || strstr(a, "image/*") || strstr(a, "*/*")) return 1;
  return 0;
}

static void h_render(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 1, &j)) return;
  int enc = negotiate(con);
  xt_msg m;
  int rc = 0;
  xt_call c;
  memset(&c, 0, sizeof c);
  pthread_mutex_lock(&s->st_mu);
  xt_pose pose = s->planes[0].set.pose;
  xt_acq acq = xt_srv_acq_get(s);
  pthread_mutex_unlock(&s->st_mu);
  rc = xt_render_from_json(j, &pose, &acq, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  if (!enc) return reply_error(out, XT_EUNSUPPORTED, 406, "Accept: image/png or application/x-npy (or ?format=png|npy)");
  if (enc == 1 && acq.pixel_format == XT_STREAM_PIX_F32)
    return reply_error(out, XT_EUNSUPPORTED, 406, "float32 line integrals come as .npy (Accept: application/x-npy)");
  if ((rc = xt_geom_compute(&pose, acq.mode, &c.geom, &m))) return reply_error(out, rc, 0, m.text);
  if ((rc = xt_budget_render(s, acq.mode, &m))) return reply_error(out, rc, 0, m.text); /* before any work */
  size_t npx = (size_t)acq.mode->rows * (size_t)acq.mode->cols;
  c.lineint = malloc(npx * sizeof(float));
  uint16_t *u16 = acq.pixel_format == XT_STREAM_PIX_U16 ? malloc(npx * 2) : NULL;
  char *gj = NULL;
  if (!c.lineint || (acq.pixel_format == XT_STREAM_PIX_U16 && !u16)) {
    reply_error(out, XT_ENOMEM, 0, "render: out of memory");
    goto done;
  }
  if ((rc = xt_engine_call(s, XT_JOB_RENDER, -1, &c))) {
    reply_error(out, rc, 0, c.msg.text);
    goto done;
  }
  if (u16) xt_intensity_u16(c.lineint, npx, u16);
  xt_frame_fields ff;
  xt_frame_fields_of(&c.frame, &ff);
  json_t *geo = xt_render_geometry_json(&ff, &c.frame.geom, xt_pixfmt_name(acq.pixel_format));
  gj = geo ? json_dumps(geo, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(geo);
  if (!gj) {
    reply_error(out, XT_ENOMEM, 0, "render: out of memory");
    goto done;
  }
  if (enc == 1) {
    const xt_png_text geometry = {"xtwin-geometry", gj};
    rc = xt_png16_encode(u16, acq.mode->rows, acq.mode->cols, XT_PNG_FAST, &geometry, 1, &out->bin, &out->binlen, &m);
    out->ctype = "image/png";
  } else {
    const int shape[2] = {acq.mode->rows, acq.mode->cols};
    rc = xt_npy_encode(u16 ? "<u2" : "<f4", 2, shape, u16 ? (const void *)u16 : (const void *)c.lineint, &out->bin,
                       &out->binlen, &m);
    out->ctype = "application/x-npy";
  }
  if (rc) {
    reply_error(out, rc, 0, m.text);
    goto done;
  }
  out->status = 200;
  add_header(out, "X-Xtwin-Geometry", gj);
  char ms[32];
  snprintf(ms, sizeof ms, "%.3f", c.render_s * 1e3);
  add_header(out, "X-Xtwin-Render-Ms", ms);
done:
  free(gj);
  free(c.lineint);
  free(u16);
}

static void h_models_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, json_pack("{s:o}", "models", xt_srv_models_json(s)));
}

/* ---- instruments (issue 26; instr.c) -------------------------------------------------------- */

static void h_instr_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, json_pack("{s:o}", "instruments", xt_srv_instr_json(s)));
}

/* The {name} of a route /v1/<collection>/{name}/<verb> (the path's third part; the route table
 * matched the rest), "" when too long: the lookup then answers 404. */
static void path_name(const req *r, size_t prefix_len, char name[80]) {
  const char *a = r->url + prefix_len;
  const size_t n = strcspn(a, "/");
  name[0] = 0;
  if (n < 80) snprintf(name, 80, "%.*s", (int)n, a);
}

/* PUT /v1/instruments/{name}/shape */
static void h_instr_shape_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  char name[80];
  path_name(r, strlen("/v1/instruments/"), name);
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  uint64_t version = 0, t = 0;
  int rc = xt_srv_instr_update(s, name, j, &version, &t, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, rc == XT_ENOTFOUND ? 404 : 0, m.text);
  reply_json(out, 200, json_pack("{s:s,s:I,s:I}", "name", name, "version", (json_int_t)version, "t_ns", (json_int_t)t));
}

/* ---- contrast (issue 26; contrast.c) ------------------------------------------------------- */

static void h_contrast_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  const char *t = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "t_ns");
  long long tn = -1;
  if (t) {
    char *end = NULL;
    tn = strtoll(t, &end, 10);
    if (!*t || *end || tn < 0) return reply_error(out, XT_EINVAL, 0, "contrast: t_ns must be a device-clock time in ns");
  }
  json_t *j = xt_srv_contrast_json(s, (int64_t)tn);
  if (!j) return reply_error(out, XT_ENOMEM, 0, "contrast: out of memory");
  reply_json(out, 200, j);
}

static void h_contrast_inject(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j, *res = NULL;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_contrast_inject(s, j, &res, &m);
  /* an accepted one is the log's "contrast" line (contrast.c); a refused one changed nothing */
  if (rc) xt_session_command(s, "contrast_inject", "rest", j, rc, m.text);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  reply_json(out, 200, res);
}

static void h_contrast_delete(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  const char *v = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "reset");
  if (v && strcmp(v, "0") && strcmp(v, "1")) return reply_error(out, XT_EINVAL, 0, "contrast: reset must be 0 or 1");
  json_t *j = xt_srv_contrast_stop(s, v && !strcmp(v, "1"));
  if (!j) return reply_error(out, XT_ENOMEM, 0, "contrast: out of memory");
  reply_json(out, 200, j);
}

/* ---- motion (issue 26; motion.c) ------------------------------------------------------------ */

/* PUT /v1/models/{name}/transform */
static void h_model_transform_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  char name[80];
  path_name(r, strlen("/v1/models/"), name);
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  uint64_t version = 0, t = 0;
  int rc = xt_srv_motion_transform_put(s, name, j, &version, &t, &m);
  xt_session_command(s, "transform", "rest", j, rc, rc ? m.text : NULL);
  json_decref(j);
  if (rc) return reply_error(out, rc, rc == XT_ENOTFOUND ? 404 : 0, m.text);
  reply_json(out, 200, json_pack("{s:s,s:I,s:I}", "model", name, "version", (json_int_t)version, "t_ns", (json_int_t)t));
}

static void h_motion_get(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  reply_json(out, 200, xt_srv_motion_json(s));
}

static void h_motion_put(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  xt_msg m;
  int rc = xt_srv_motion_put(s, j, &m);
  xt_session_command(s, "motion", "rest", j, rc, rc ? m.text : NULL);
  json_decref(j);
  if (rc) return reply_error(out, rc, rc == XT_ENOTFOUND ? 404 : 0, m.text);
  reply_json(out, 200, xt_srv_motion_json(s));
}

static void h_models_post(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  json_t *j;
  if (body_json(r, out, 0, &j)) return;
  const char *path = NULL, *name = NULL, *convert = "mu";
  json_error_t err;
  xt_msg m;
  if (json_unpack_ex(j, &err, JSON_STRICT, "{s:s,s?s,s?s}", "path", &path, "name", &name, "convert", &convert)) {
    reply_error(out, XT_EINVAL, 0, err.text);
    json_decref(j);
    return;
  }
  int rc = xt_srv_add_model_path(s, path, name, convert, 1, &m);
  json_decref(j);
  if (rc) return reply_error(out, rc, 0, m.text);
  reply_json(out, 201, json_pack("{s:o}", "models", xt_srv_models_json(s)));
}

static void h_metrics(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  size_t n = 0;
  xt_acq_plane_state plane;
  xt_acq_plane_snapshot(&s->planes[0], &plane); /* before metrics.mu: the two locks never nest */
  xt_metrics_study study;
  const int have_study = xt_srv_study_stats(s->study, &study);
  char *t = xt_metrics_text(&s->metrics, &plane, have_study ? &study : NULL, &n);
  if (!t) return reply_error(out, XT_ENOMEM, 0, "metrics: out of memory");
  out->status = 200;
  out->text = t;
  out->textlen = n;
  out->ctype = "text/plain; version=0.0.4; charset=utf-8";
}

/* The browser console's files, compiled in (server/console/, xt_console.h). Public like any static
 * page: the page asks for the token and sends it with every API request and the stream upgrade. */
static void h_console(xt_server *s, struct MHD_Connection *con, req *r, reply *out) {
  const xt_console_asset *a = xt_console_find(r->url);
  if (!a) return reply_error(out, XT_ENOTFOUND, 404, "no such console file");
  out->bin = malloc(a->len);
  if (!out->bin) return reply_error(out, XT_ENOMEM, 0, "console: out of memory");
  memcpy(out->bin, a->data, a->len);
  out->binlen = a->len;
  out->ctype = a->ctype;
  out->status = 200;
  add_header(out, "Cache-Control", "no-cache");
  add_header(out, "X-Content-Type-Options", "nosniff");
  add_header(out, "Content-Security-Policy",
             "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data: blob:; frame-ancestors 'none'");
  add_header(out, "Referrer-Policy", "no-referrer");
}

/* ---- the route table ---------------------------------------------------------------------- */

static const xt_route routes[] = {
    {"GET", "/v1/health", "Liveness: always 200 while the server runs", (void *)h_health},
    {"GET", "/v1/info", "Version, backends, GPUs, detector modes, loaded models, limits, configuration", (void *)h_info},
    {"GET", "/v1/pose", "The current C-arm pose and its sequence number", (void *)h_pose_get},
    {"PUT", "/v1/pose", "Update the pose; any subset of fields, optional seq", (void *)h_pose_put},
    {"GET", "/v1/acquisition", "Detector mode, frame rate, run mode, pixel format, running", (void *)h_acq_get},
    {"PUT", "/v1/acquisition", "Change acquisition settings; any subset of fields", (void *)h_acq_put},
    {"POST", "/v1/acquisition/start", "Start the acquisition", (void *)h_start},
    {"POST", "/v1/acquisition/stop", "Stop the acquisition", (void *)h_stop},
    {"POST", "/v1/acquisition/trigger", "Lockstep: expose and stream exactly one frame", (void *)h_trigger},
    {"GET", "/v1/scenario", "The scenario playing: name, events applied and pending, its start", (void *)h_scenario_get},
    {"PUT", "/v1/scenario", "Play a scenario (a timeline of commands and faults) from now", (void *)h_scenario_put},
    {"GET", "/v1/device", "The device: state, fault, latencies, switch held, the image held, commands allowed",
     (void *)h_device_get},
    {"POST", "/v1/device/power_on", "Device: power on (standby -> ready)", (void *)h_device_cmd},
    {"POST", "/v1/device/standby", "Device: standby (from ready or fault)", (void *)h_device_cmd},
    {"POST", "/v1/device/fluoro", "Device: press the fluoroscopy pedal (ready -> prepare -> exposing)",
     (void *)h_device_cmd},
    {"POST", "/v1/device/expose", "Device: press the exposure hand switch; optional multiphase series",
     (void *)h_device_cmd},
    {"POST", "/v1/device/release", "Device: release the switch held (exposing -> readout -> ready, last image hold)",
     (void *)h_device_cmd},
    {"POST", "/v1/device/radiation_disable", "Device: radiation disable on (ends any X-ray)", (void *)h_device_cmd},
    {"POST", "/v1/device/radiation_enable", "Device: radiation disable off", (void *)h_device_cmd},
    {"POST", "/v1/device/fault", "Device: raise a fault {code, text} (aborts any exposure)", (void *)h_device_cmd},
    {"POST", "/v1/device/reset", "Device: reset a fault (fault -> ready)", (void *)h_device_cmd},
    {"GET", "/v1/planes/{plane}", "One plane (A or B): pose, acquisition, stand, dose, device", (void *)h_plane_get},
    {"GET", "/v1/planes/{plane}/pose", "The plane's C-arm pose and its sequence number", (void *)h_plane_pose_get},
    {"PUT", "/v1/planes/{plane}/pose", "Update the plane's pose (within its stand's ranges)", (void *)h_plane_pose_put},
    {"GET", "/v1/planes/{plane}/acquisition", "The plane's detector mode, chain, pixel format; the run's timing",
     (void *)h_plane_acq_get},
    {"PUT", "/v1/planes/{plane}/acquisition", "Change the plane's acquisition settings; any subset of fields",
     (void *)h_plane_acq_put},
    {"GET", "/v1/planes/{plane}/device", "The plane's device state machine", (void *)h_plane_device_get},
    {"POST", "/v1/planes/{plane}/device/{command}", "A device command to one plane (the commands of /v1/device)",
     (void *)h_plane_device_cmd},
    {"GET", "/v1/faults", "Injected faults acting now, and the known fault names", (void *)h_faults_get},
    {"DELETE", "/v1/faults", "Clear every injected fault (device faults stay: reset them)", (void *)h_faults_delete},
    {"POST", "/v1/faults/drop_frame", "Fault: the next {count} exposures are made but not published", (void *)h_fault_post},
    {"POST", "/v1/faults/late_frame", "Fault: the next {count} frames are published {ms} late", (void *)h_fault_post},
    {"POST", "/v1/faults/dead_line", "Fault: {col|row, count} dead lines appear on the panel (chain frames)",
     (void *)h_fault_post},
    {"POST", "/v1/faults/pixel_cluster", "Fault: a dead pixel cluster {col, row, radius} appears (chain frames)",
     (void *)h_fault_post},
    {"POST", "/v1/faults/gain_drift", "Fault: the panel's gain drifts {percent, percent_per_min} (chain frames)",
     (void *)h_fault_post},
    {"POST", "/v1/faults/over_temperature", "Fault: detector over temperature, device not ready for {seconds}",
     (void *)h_fault_post},
    {"POST", "/v1/faults/abort_exposure", "Fault: the running exposure is aborted (device fault 250)", (void *)h_fault_post},
    {"POST", "/v1/faults/generator_fault", "Fault: kV off by {kv_error_percent}; beyond tolerance the generator trips",
     (void *)h_fault_post},
    {"POST", "/v1/faults/link_loss", "Fault: the stream's link is down for {seconds}: no frames reach clients",
     (void *)h_fault_post},
    {"POST", "/v1/faults/stale_calibration", "Fault: offset/gain maps out of date {offset_adu, gain_percent} (chain frames)",
     (void *)h_fault_post},
    {"POST", "/v1/faults/tube_heat", "Fault: the tube at its heat limit for {seconds}: fluoroscopy only",
     (void *)h_fault_post},
    {"POST", "/v1/render", "Render one frame for a pose; 16-bit PNG or .npy by Accept, geometry in headers", (void *)h_render},
    {"GET", "/v1/models", "Loaded models", (void *)h_models_get},
    {"POST", "/v1/models", "Load a volume from a path on the server and keep it resident", (void *)h_models_post},
    {"PUT", "/v1/models/{name}/transform", "A model's rigid transform (table pan, patient shift); the next exposure shows it",
     (void *)h_model_transform_put},
    {"GET", "/v1/motion", "Periodic motion (cardiac, respiratory), blur, the models' transforms and the phases now",
     (void *)h_motion_get},
    {"PUT", "/v1/motion", "Start/stop/change cardiac and respiratory motion and blur within the pulse; any subset",
     (void *)h_motion_put},
    {"GET", "/v1/instruments", "Instruments: each one's shape version, when it came, capacity", (void *)h_instr_get},
    {"PUT", "/v1/instruments/{name}/shape", "A new centreline for an instrument; the next exposure shows it",
     (void *)h_instr_shape_put},
    {"GET", "/v1/contrast", "Contrast: regions, their iodine now (or at ?t_ns=), injections, limits, seq",
     (void *)h_contrast_get},
    {"POST", "/v1/contrast/inject", "Inject contrast agent into a region (rate, volume, duration, delay)",
     (void *)h_contrast_inject},
    {"DELETE", "/v1/contrast", "Stop every running injection (?reset=1: forget them all, regions clear)",
     (void *)h_contrast_delete},
    {"GET", "/metrics", "Prometheus metrics: frames, per-client sent/dropped, histograms", (void *)h_metrics},
    {"GET", "/", "The browser console (compiled-in page; no token needed)", (void *)h_console},
    {"GET", "/console.js", "The browser console's script", (void *)h_console},
    {"GET", "/console.css", "The browser console's style sheet", (void *)h_console},
};
#define NROUTES ((int)(sizeof routes / sizeof routes[0]))

int xt_rest_route_count(void) { return NROUTES; }
const xt_route *xt_rest_route_at(int i) { return i >= 0 && i < NROUTES ? &routes[i] : NULL; }

/* ---- libmicrohttpd glue ------------------------------------------------------------------- */

static const char *header(struct MHD_Connection *con, const char *name) {
  return MHD_lookup_connection_value(con, MHD_HEADER_KIND, name);
}

static enum MHD_Result send_reply(xt_server *s, struct MHD_Connection *con, const req *r, reply *out) {
  struct MHD_Response *resp;
  if (out->bin) {
    resp = MHD_create_response_from_buffer(out->binlen, out->bin, MHD_RESPMEM_MUST_FREE);
    out->bin = NULL;
  } else if (out->text) {
    resp = MHD_create_response_from_buffer(out->textlen, out->text, MHD_RESPMEM_MUST_FREE);
    out->text = NULL;
  } else if (out->status == 204) {
    resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  } else {
    if (!out->json) out->json = xt_error_json(XT_EINTERNAL, 500, "no reply");
    char *t = json_dumps(out->json, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    size_t n = t ? strlen(t) : 0;
    if (t) {
      t = realloc(t, n + 2);
      if (t) t[n++] = '\n';
    }
    resp = t ? MHD_create_response_from_buffer(n, t, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!t) out->status = 500;
    out->ctype = "application/json";
  }
  if (!resp) return MHD_NO;
  if (out->ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, out->ctype);
  for (int i = 0; i < out->nh; i++) MHD_add_response_header(resp, out->hname[i], out->hval[i]);
  if (r && r->cors[0]) {
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "X-Xtwin-Geometry, X-Xtwin-Render-Ms");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
  }
  /* One request per connection: every request goes through the gate (gate.c). */
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result rc = MHD_queue_response(con, (unsigned)out->status, resp);
  MHD_destroy_response(resp);
  pthread_mutex_lock(&s->metrics.mu);
  s->metrics.rest_requests++;
  if (out->status >= 400) s->metrics.rest_errors++;
  pthread_mutex_unlock(&s->metrics.mu);
  return rc;
}

static void reply_free(reply *out) {
  json_decref(out->json);
  free(out->bin);
  free(out->text);
  for (int i = 0; i < out->nh; i++) free(out->hval[i]);
}

static enum MHD_Result finish(xt_server *s, struct MHD_Connection *con, const req *r, reply *out) {
  enum MHD_Result rc = send_reply(s, con, r, out);
  reply_free(out);
  return rc;
}

/* The methods routes allow on url ("GET, HEAD, PUT"), empty when no route has that path. */
/* A route's path against a URL: "{name}" in the path stands for one segment of the URL (not empty,
 * no '/'); the handler judges its value (/v1/planes/{plane}/...: A or B). */
static int route_match(const char *path, const char *url) {
  while (*path) {
    if (*path == '{') {
      const char *close = strchr(path, '}');
      if (!close) return 0;
      size_t n = strcspn(url, "/");
      if (n == 0) return 0;
      path = close + 1;
      url += n;
      continue;
    }
    if (*path++ != *url++) return 0;
  }
  return *url == 0;
}

static void allowed_methods(const char *url, char *allow, size_t cap) {
  allow[0] = 0;
  for (int i = 0; i < NROUTES; i++) {
    if (!route_match(routes[i].path, url)) continue;
    size_t k = strlen(allow);
    snprintf(allow + k, cap - k, "%s%s%s", k ? ", " : "", routes[i].method, strcmp(routes[i].method, "GET") ? "" : ", HEAD");
  }
}

/* The checks a request's head must pass (see the top of the file); fills out and returns 1 when it
 * is refused. */
static int refuse_head(xt_server *s, struct MHD_Connection *con, const char *method, const char *url,
                       const char *version, req *r, reply *out) {
  /* The gate ran these checks on the raw head already (gate.c); they run again here for TLS,
   * whose heads the gate cannot read, from the same function. */
  const char *cl = header(con, MHD_HTTP_HEADER_CONTENT_LENGTH);
  xt_head h = {method, url, version && !strcmp(version, MHD_HTTP_VERSION_1_0), header(con, MHD_HTTP_HEADER_HOST),
               header(con, "Origin"), header(con, MHD_HTTP_HEADER_AUTHORIZATION), header(con, MHD_HTTP_HEADER_CONTENT_TYPE),
               header(con, MHD_HTTP_HEADER_TRANSFER_ENCODING), -1};
  if (cl) {
    unsigned long long v = strtoull(cl, NULL, 10);
    h.content_length = v > (unsigned long long)s->cfg.max_body ? (long long)s->cfg.max_body + 1 : (long long)v;
  }
  char t[400];
  int err = 0, status = xt_guard_request(s, &h, &err, t, sizeof t);
  if (status) {
    reply_error(out, err, status, t);
    if (status == 401) add_header(out, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"xtwin\"");
    return 1;
  }
  if (h.origin) snprintf(r->cors, sizeof r->cors, "%s", h.origin);
  if (!strcmp(method, "OPTIONS")) {
    /* A CORS preflight (no credentials on it) or a plain OPTIONS: what the path allows. */
    char allow[96];
    allowed_methods(url, allow, sizeof allow);
    if (!allow[0]) {
      snprintf(t, sizeof t, "no route %.300s", url);
      reply_error(out, XT_ENOTFOUND, 404, t);
      return 1;
    }
    out->status = 204;
    add_header(out, MHD_HTTP_HEADER_ALLOW, allow);
    if (h.origin) {
      add_header(out, "Access-Control-Allow-Methods", allow);
      add_header(out, "Access-Control-Allow-Headers", "Authorization, Content-Type");
      add_header(out, "Access-Control-Max-Age", "600");
    }
    return 1;
  }
  return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  xt_server *s = cls;
  req *r = *con_cls;
  reply out;
  memset(&out, 0, sizeof out);
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    *con_cls = r;
    r->url = url;
    /* First call: the head only. Judge what needs no body. */
    if (!refuse_head(s, con, method, url, version, r, &out)) return MHD_YES;
    const char *expect = header(con, MHD_HTTP_HEADER_EXPECT);
    if (out.status == 204 || (expect && !strcasecmp(expect, "100-continue"))) return finish(s, con, r, &out);
    /* Answered once the body (if any) has been read and thrown away. */
    if (!(r->early = malloc(sizeof *r->early))) {
      reply_free(&out);
      return MHD_NO;
    }
    *r->early = out;
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (r->early) {
      r->drained += n;
      return r->drained > XT_REST_DRAIN ? MHD_NO : MHD_YES; /* beyond that: cut the connection */
    }
    if (!r->toolarge) {
      if (r->n + n > (size_t)s->cfg.max_body) r->toolarge = 1;
      else {
        if (r->n + n + 1 > r->cap) {
          size_t cap = r->cap ? r->cap : 1024;
          while (cap < r->n + n + 1) cap *= 2;
          char *b = realloc(r->body, cap);
          if (!b) return MHD_NO;
          r->body = b;
          r->cap = cap;
        }
        memcpy(r->body + r->n, upload_data, n);
        r->n += n;
        r->body[r->n] = 0;
      }
    }
    return MHD_YES;
  }
  if (r->early) {
    out = *r->early;
    free(r->early);
    r->early = NULL;
    return finish(s, con, r, &out);
  }
  if (r->toolarge) {
    char t[96];
    snprintf(t, sizeof t, "request body over %d bytes", s->cfg.max_body);
    reply_error(&out, XT_ETOOLARGE, 413, t);
    return finish(s, con, r, &out);
  }
  const xt_route *hit = NULL;
  int head = !strcmp(method, "HEAD"); /* a GET whose body libmicrohttpd leaves out */
  for (int i = 0; i < NROUTES; i++)
    if (route_match(routes[i].path, url) && !strcmp(routes[i].method, head ? "GET" : method)) hit = &routes[i];
  if (!hit) {
    char allow[96];
    allowed_methods(url, allow, sizeof allow);
    if (allow[0]) {
      char t[200];
      snprintf(t, sizeof t, "%.20s %s: method not allowed (allowed: %s)", method, url, allow);
      reply_error(&out, XT_EUNSUPPORTED, 405, t);
      add_header(&out, MHD_HTTP_HEADER_ALLOW, allow);
    } else {
      char t[600];
      snprintf(t, sizeof t, "no route %.20s %.500s", method, url);
      reply_error(&out, XT_ENOTFOUND, 404, t);
    }
    return finish(s, con, r, &out);
  }
  ((handler_fn)hit->handler)(s, con, r, &out);
  if (s->cfg.verbose) fprintf(stderr, "xtwin-server: %s %s -> %d\n", method, url, out.status);
  return finish(s, con, r, &out);
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
  req *r = *con_cls;
  if (r) {
    if (r->early) reply_free(r->early);
    free(r->early);
    free(r->body);
    free(r);
  }
  *con_cls = NULL;
}

/* libmicrohttpd closed a connection the gate handed it: the address may open another. */
static void on_connection(void *cls, struct MHD_Connection *con, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  if (toe != MHD_CONNECTION_NOTIFY_CLOSED) return;
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (ci && ci->client_addr) xt_gate_release(cls, ci->client_addr);
}

static char *slurp(const char *path, xt_msg *msg) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    xt_fail(msg, XT_EIO, "%s: cannot open", path);
    return NULL;
  }
  char *b = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *q = realloc(b, cap);
      if (!q) break;
      b = q;
    }
    size_t k = fread(b + n, 1, 4096, f);
    n += k;
    if (k < 4096) break;
  }
  fclose(f);
  if (b) b[n] = 0;
  return b;
}

int xt_rest_start(xt_server *s, xt_msg *msg) {
  t_start_ns = xt_now_ns();
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(s->cfg.bind, "0", &hints, &ai) || !ai)
    return xt_fail(msg, XT_EINVAL, "bind: '%s' is not a numeric IPv4 or IPv6 address", s->cfg.bind);
  struct sockaddr_storage sa;
  memset(&sa, 0, sizeof sa);
  memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) {
    ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)s->cfg.rest_port);
    flags |= MHD_USE_IPv6;
  } else
    ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)s->cfg.rest_port);
  socklen_t salen = (socklen_t)ai->ai_addrlen;
  freeaddrinfo(ai);
  int rc = xt_gate_start(s, (struct sockaddr *)&sa, salen, msg);
  if (rc) return rc;
  char *cert = NULL, *key = NULL;
  if (s->cfg.tls_cert[0]) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
      return xt_fail(msg, XT_EUNSUPPORTED, "this libmicrohttpd has no TLS support");
    if (!(cert = slurp(s->cfg.tls_cert, msg))) return XT_EIO;
    if (!(key = slurp(s->cfg.tls_key, msg))) {
      free(cert);
      return XT_EIO;
    }
    flags |= MHD_USE_TLS;
  }
  if (s->cfg.verbose) flags |= MHD_USE_ERROR_LOG;
  struct MHD_OptionItem tls_opts[] = {
      {MHD_OPTION_HTTPS_MEM_CERT, 0, cert},
      {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
      {MHD_OPTION_END, 0, NULL},
  };
  s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_THREAD_POOL_SIZE,
                            (unsigned)s->cfg.rest_threads, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)65536, MHD_OPTION_ARRAY, cert ? tls_opts : tls_opts + 2, MHD_OPTION_END);
  tls_cert_mem = cert;
  tls_key_mem = key;
  if (!s->mhd) return xt_fail(msg, XT_EIO, "REST: cannot start libmicrohttpd on %s:%d (bad certificate?)", s->cfg.bind,
                              s->rest_port);
  return xt_gate_run(s, msg);
}

void xt_rest_stop(xt_server *s) {
  xt_gate_stop_accepting(s);
  if (s->mhd) MHD_stop_daemon(s->mhd);
  s->mhd = NULL;
  xt_gate_free(s);
  free(tls_cert_mem);
  free(tls_key_mem);
  tls_cert_mem = tls_key_mem = NULL;
}
