/* libFuzzer entry point for xtwin-server's parsers of untrusted input. Each input goes through
 * every parser, as the server would run it:
 *   pose     PUT /v1/pose body        xt_body_json + xt_pose_from_json (seq allowed)
 *   acq      PUT /v1/acquisition body xt_body_json + xt_acq_from_json
 *   render   POST /v1/render body     xt_body_json (empty allowed) + xt_render_from_json + geometry
 *   ws       WebSocket text message   xt_ws_cmd_parse + the pose/acquisition update it carries
 *   config   the JSON config file     xt_srv_config_parse over the defaults
 *   head     a REST request head      xt_gate_check_head (the accept gate), as received
 *   guard    request header values    Host / Origin / Authorization / Content-Type checks, one
 *                                     value a line (guard.c), against a server with a token,
 *                                     an --allow-origin and an --allow-host
 * Any error code is fine; crashes, leaks, sanitizer reports are not, and neither are these
 * (checked here, abort() on violation): an error without a one-line message or whose JSON error
 * body cannot be built (the client would get no error), a parsed pose that fails to round-trip
 * through its JSON form, a render request whose validated pose/mode give no geometry.
 *
 * The same driver runs the seed corpus (tests/fuzz/server/) in test_server_parsers; built there
 * with XT_FUZZ_NO_ENTRY. By hand (clang build):
 *   build-fuzzsrv-clang/tests/fuzz_server -max_total_time=120 tests/fuzz/server */
#define _GNU_SOURCE /* strcasestr */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_config.h"
#include "srv_guard.h"
#include "srv_state.h"
#include "xt_record.h"
#include "xt_server.h"
#include "xt_stream.h"

enum { XT_FZ_POSE, XT_FZ_ACQ, XT_FZ_RENDER, XT_FZ_WS, XT_FZ_CONFIG, XT_FZ_HEAD, XT_FZ_GUARD, XT_FZ_N };
extern const char *const xt_fuzz_server_names[XT_FZ_N];
void xt_fuzz_server_run(const uint8_t *data, size_t size, int rc[XT_FZ_N]);

const char *const xt_fuzz_server_names[XT_FZ_N] = {"pose", "acq", "render", "ws", "config", "head", "guard"};

static void fz_die(const char *parser, const char *what, const xt_msg *m) {
  fprintf(stderr, "fuzz_server: %s: %s (message: '%s')\n", parser, what, m ? m->text : "");
  abort();
}

/* An error must carry a message and give a JSON error body (REST reply, WebSocket nack). */
static void fz_check_error(const char *parser, int rc, const xt_msg *m) {
  if (rc >= 0) fz_die(parser, "positive return code", m);
  if (!m->text[0]) fz_die(parser, "error without a message", m);
  json_t *e = xt_error_json(rc, xt_errhttp(rc), m->text);
  if (!e) fz_die(parser, "error message gives no JSON error body", m);
  char *t = json_dumps(e, JSON_COMPACT);
  json_decref(e);
  if (!t) fz_die(parser, "error body does not serialise", m);
  free(t);
}

/* What the server answers with after a pose change must read back as the same pose. */
static void fz_check_pose(const char *parser, const xt_pose *p) {
  json_t *j = xt_pose_to_json(p);
  if (!j) fz_die(parser, "pose has no JSON form", NULL);
  char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  if (!t) fz_die(parser, "pose JSON does not serialise", NULL);
  json_t *back = NULL;
  xt_msg m;
  m.text[0] = '\0';
  xt_pose q;
  memset(&q, 0, sizeof q);
  if (xt_body_json(t, strlen(t), 0, &back, &m) || xt_pose_from_json(back, &q, 0, NULL, NULL, &m))
    fz_die(parser, "pose does not round-trip through its JSON form", &m);
  json_decref(back);
  free(t);
  if (q.primary_deg != p->primary_deg || q.secondary_deg != p->secondary_deg ||
      q.detector_rot_deg != p->detector_rot_deg || q.sod_mm != p->sod_mm || q.sid_mm != p->sid_mm ||
      q.table_mm.x != p->table_mm.x || q.table_mm.y != p->table_mm.y || q.table_mm.z != p->table_mm.z)
    fz_die(parser, "pose changed in its JSON round trip", NULL);
}

static void fz_check_acq(const char *parser, const xt_acq *a) {
  json_t *j = xt_acq_to_json(a);
  if (!j) fz_die(parser, "acquisition has no JSON form", NULL);
  json_decref(j);
}

/* The server's state before the request: the default pose and acquisition. */
static void fz_base(xt_pose *pose, xt_acq *acq) {
  const xt_detector_mode *mode = xt_mode_find("fd20-256");
  *pose = xt_pose_default(mode);
  memset(acq, 0, sizeof *acq);
  acq->mode = mode;
  acq->fps = 15;
  acq->pixel_format = XT_STREAM_PIX_U16;
  acq->running = 1;
  acq->chain_prm = xt_chain_params_default(); /* as the server starts (main.c): chain updates can be valid */
}

static int fz_pose(const char *text, size_t len) {
  xt_pose pose;
  xt_acq acq;
  fz_base(&pose, &acq);
  xt_msg m;
  m.text[0] = '\0';
  json_t *j = NULL;
  uint64_t seq = 0;
  int has = 0;
  int rc = xt_body_json(text, len, 0, &j, &m);
  if (!rc) rc = xt_pose_from_json(j, &pose, 1, &seq, &has, &m);
  json_decref(j);
  if (rc) fz_check_error("pose", rc, &m);
  else fz_check_pose("pose", &pose);
  return rc;
}

static int fz_acq(const char *text, size_t len) {
  xt_pose pose;
  xt_acq acq;
  fz_base(&pose, &acq);
  xt_msg m;
  m.text[0] = '\0';
  json_t *j = NULL;
  int rc = xt_body_json(text, len, 0, &j, &m);
  if (!rc) rc = xt_acq_from_json(j, &acq, &m);
  json_decref(j);
  if (rc) fz_check_error("acq", rc, &m);
  else fz_check_acq("acq", &acq);
  return rc;
}

static int fz_render(const char *text, size_t len) {
  xt_pose pose;
  xt_acq acq;
  fz_base(&pose, &acq);
  xt_msg m;
  m.text[0] = '\0';
  json_t *j = NULL;
  int rc = xt_body_json(text, len, 1, &j, &m);
  if (!rc) rc = xt_render_from_json(j, &pose, &acq, &m);
  json_decref(j);
  if (rc) {
    fz_check_error("render", rc, &m);
    return rc;
  }
  xt_acq_frame fr;
  memset(&fr, 0, sizeof fr);
  if (xt_geom_compute(&pose, acq.mode, &fr.geom, &m)) fz_die("render", "validated request gives no geometry", &m);
  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  json_t *gj = xt_render_geometry_json(&ff, &fr.geom, xt_pixfmt_name(acq.pixel_format));
  if (!gj) fz_die("render", "geometry has no JSON form", NULL);
  json_decref(gj);
  fz_check_pose("render", &pose);
  return 0;
}

static int fz_ws(const char *text, size_t len) {
  xt_pose pose;
  xt_acq acq;
  fz_base(&pose, &acq);
  xt_msg m;
  m.text[0] = '\0';
  xt_ws_cmd k;
  int rc = xt_ws_cmd_parse(text, len, &k, &m);
  if (!rc) {
    if (k.type < XT_CMD_POSE || k.type > XT_CMD_STATE) fz_die("ws", "unknown command type", NULL);
    if ((k.type == XT_CMD_POSE || k.type == XT_CMD_ACQ) && !k.update) fz_die("ws", "update without a body", NULL);
    if (k.type == XT_CMD_POSE) {
      uint64_t seq = 0;
      int has = 0;
      if (!(rc = xt_pose_from_json(k.update, &pose, 1, &seq, &has, &m))) fz_check_pose("ws", &pose);
    } else if (k.type == XT_CMD_ACQ) {
      if (!(rc = xt_acq_from_json(k.update, &acq, &m))) fz_check_acq("ws", &acq);
    }
  }
  if (rc) fz_check_error("ws", rc, &m);
  xt_ws_cmd_free(&k);
  return rc;
}

static int fz_config(const char *text, size_t len) {
  xt_srv_config c;
  xt_srv_config_defaults(&c);
  xt_msg m;
  m.text[0] = '\0';
  int rc = xt_srv_config_parse(&c, text, len, "fuzz.json", &m);
  if (rc) {
    fz_check_error("config", rc, &m);
    return rc;
  }
  if (c.nmodels < 0 || c.nmodels > XT_SRV_MAX_MODELS) fz_die("config", "model count out of range", NULL);
  json_t *j = xt_srv_config_json(&c);
  char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!t) fz_die("config", "configuration has no JSON form", NULL);
  free(t);
  return 0;
}

/* A request head: accepted heads must hold a request line and end in the blank line; a refusal
 * names its reason and is one of the statuses the gate answers. */
static int fz_head(const char *text, size_t len) {
  const char *why = NULL;
  int st = xt_gate_check_head(text, len, &why);
  if (st && st != 400 && st != 414) fz_die("head", "unexpected status", NULL);
  if (st && (!why || !*why)) fz_die("head", "refusal without a reason", NULL);
  if (!st && !memchr(text, '\n', len)) fz_die("head", "accepted a head without a line end", NULL);
  return st ? XT_EFORMAT : 0;
}

/* Header values, one a line (NUL-terminated copies): none may crash a check; an accepted Origin
 * must name the allowed console or one of the server's own names. */
static int fz_guard(const char *text, size_t len) {
  static xt_server srv; /* large: static storage */
  static int init;
  if (!init) {
    xt_srv_config_defaults(&srv.cfg);
    snprintf(srv.cfg.token, sizeof srv.cfg.token, "s3cret");
    snprintf(srv.cfg.allow_origins[0], sizeof srv.cfg.allow_origins[0], "https://console.example");
    srv.cfg.nallow_origins = 1;
    snprintf(srv.cfg.allow_hosts[0], sizeof srv.cfg.allow_hosts[0], "twin.example");
    srv.cfg.nallow_hosts = 1;
    srv.rest_port = 8710;
    init = 1;
  }
  char *v[4] = {NULL, NULL, NULL, NULL};
  size_t at = 0;
  for (int i = 0; i < 4 && at <= len; i++) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
    v[i] = malloc(n + 1);
    if (!v[i]) break;
    memcpy(v[i], text + at, n);
    v[i][n] = 0;
    at += n + 1;
  }
  int ok = 0;
  if (v[0]) ok += xt_host_ok(&srv, v[0]);
  if (v[1]) {
    int listed = 0;
    if (xt_origin_ok(&srv, v[1], v[0], &listed)) {
      ok++;
      if (!strstr(v[1], "console.example") && !strcasestr(v[1], "localhost") && !strstr(v[1], "127.0.0.1") &&
          !strstr(v[1], "::1") && !(v[0] && *v[0]))
        fz_die("guard", "accepted a foreign origin", NULL);
    }
  }
  if (v[2]) ok += xt_bearer_ok(&srv, v[2]);
  if (v[3]) ok += xt_media_is_json(v[3]);
  for (int i = 0; i < 4; i++) free(v[i]);
  return ok ? 0 : XT_EPERM;
}

void xt_fuzz_server_run(const uint8_t *data, size_t size, int rc[XT_FZ_N]) {
  const char *text = (const char *)data;
  rc[XT_FZ_POSE] = fz_pose(text, size);
  rc[XT_FZ_ACQ] = fz_acq(text, size);
  rc[XT_FZ_RENDER] = fz_render(text, size);
  rc[XT_FZ_WS] = fz_ws(text, size);
  rc[XT_FZ_CONFIG] = fz_config(text, size);
  rc[XT_FZ_HEAD] = fz_head(text, size);
  rc[XT_FZ_GUARD] = fz_guard(text, size);
}

#ifndef XT_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int rc[XT_FZ_N];
  xt_fuzz_server_run(data, size, rc);
  return 0;
}
#endif
