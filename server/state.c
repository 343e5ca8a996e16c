/* Pose and acquisition state: their JSON forms, validation of (partial) updates, and the
 * server-level operations REST and WebSocket share (update pose, update acquisition, start/stop,
 * info, models). Everything here that touches xt_server takes st_mu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_budget.h"
#include "srv_clock.h"
#include "srv_config.h"
#include "srv_device.h"
#include "srv_engine.h"
#include "srv_contrast.h"
#include "srv_instr.h"
#include "srv_metrics.h"
#include "srv_scenario.h"
#include "srv_session.h"
#include "srv_state.h"
#include "srv_wire.h"
#include "xt_coverage.h"
#include "xt_exposure.h"
#include "xt_model_jansson.h"
#include "xt_server.h"
#include "xt_stream.h"
#ifdef XT_SERVER_HAVE_LOADERS
#include "xt_load.h"
#endif

/* ---- JSON helpers ------------------------------------------------------------------------- */

int xt_json_parse(const char *text, size_t len, json_t **out, xt_msg *msg) {
  json_error_t err;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!j) return xt_fail(msg, XT_EFORMAT, "malformed JSON at line %d column %d: %s", err.line, err.column, err.text);
  if (!json_is_object(j)) {
    json_decref(j);
    return xt_fail(msg, XT_EFORMAT, "expected a JSON object");
  }
  *out = j;
  return 0;
}

int xt_body_json(const char *body, size_t len, int allow_empty, json_t **out, xt_msg *msg) {
  if (len == 0) {
    if (!allow_empty) return xt_fail(msg, XT_EINVAL, "request body: expected a JSON object");
    *out = json_object();
    return 0;
  }
  return xt_json_parse(body, len, out, msg);
}

/* Copies s into out (cap bytes, truncating) with every byte that is not part of a valid UTF-8
 * sequence replaced by '?'. Messages quote client strings cut at a byte count ("%.64s", the
 * xt_msg size), which can split a character; jansson refuses such a string. */
static void utf8_clean(const char *s, char *out, size_t cap) {
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0;
  while (*p && o + 1 < cap) {
    unsigned c = p[0];
    size_t n = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < n; i++) {
      if ((p[i] & 0xc0) != 0x80) { /* also stops at the terminating NUL */
        n = 0;
        break;
      }
      cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if (n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) n = 0;
    if (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) n = 0;
    if (!n || o + n >= cap) {
      if (n) break; /* a whole character that does not fit */
      out[o++] = '?';
      p++;
      continue;
    }
    memcpy(out + o, p, n);
    o += n;
    p += n;
  }
  out[o] = 0;
}

json_t *xt_error_json(int err, int status, const char *message) {
  char clean[1024]; /* more than any message: xt_msg, and the REST router's 600 */
  utf8_clean(message ? message : xt_strerror(err), clean, sizeof clean);
  return json_pack("{s:{s:s,s:i,s:s}}", "error", "name", xt_errname(err), "status", status, "message", clean);
}

static int get_number(const json_t *v, const char *field, double *out, xt_msg *msg) {
  if (!json_is_number(v)) return xt_fail(msg, XT_EINVAL, "%s: expected a number", field);
  double x = json_number_value(v);
  if (!isfinite(x)) return xt_fail(msg, XT_ENANDATA, "%s: not finite", field);
  *out = x;
  return 0;
}

/* ---- pose --------------------------------------------------------------------------------- */

int xt_pose_from_json(const json_t *obj, xt_pose *pose, int allow_seq, uint64_t *seq_out, int *has_seq,
                      xt_msg *msg) {
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "pose: expected a JSON object");
  xt_pose p = *pose;
  const char *key;
  json_t *v;
  int rc;
  if (has_seq) *has_seq = 0;
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "primary_deg")) rc = get_number(v, key, &p.primary_deg, msg);
    else if (!strcmp(key, "secondary_deg")) rc = get_number(v, key, &p.secondary_deg, msg);
    else if (!strcmp(key, "detector_rot_deg")) rc = get_number(v, key, &p.detector_rot_deg, msg);
    else if (!strcmp(key, "sod_mm")) rc = get_number(v, key, &p.sod_mm, msg);
    else if (!strcmp(key, "sid_mm")) rc = get_number(v, key, &p.sid_mm, msg);
    else if (!strcmp(key, "table_mm")) {
      if (!json_is_array(v) || json_array_size(v) != 3) return xt_fail(msg, XT_EINVAL, "table_mm: expected [x, y, z]");
      double t[3];
      for (int i = 0; i < 3; i++)
        if ((rc = get_number(json_array_get(v, (size_t)i), "table_mm", &t[i], msg))) return rc;
      p.table_mm.x = t[0], p.table_mm.y = t[1], p.table_mm.z = t[2];
      rc = 0;
    } else if (allow_seq && !strcmp(key, "seq")) {
      if (!json_is_integer(v) || json_integer_value(v) < 0) return xt_fail(msg, XT_EINVAL, "seq: expected an integer >= 0");
      if (seq_out) *seq_out = (uint64_t)json_integer_value(v);
      if (has_seq) *has_seq = 1;
      rc = 0;
    } else
      return xt_fail(msg, XT_EINVAL, "pose: unknown field '%s'", key);
    if (rc) return rc;
  }
  if ((rc = xt_pose_validate(&p, msg))) return rc;
  *pose = p;
  return 0;
}

json_t *xt_pose_to_json(const xt_pose *p) {
  return json_pack("{s:f,s:f,s:f,s:f,s:f,s:[f,f,f]}", "primary_deg", p->primary_deg, "secondary_deg", p->secondary_deg,
                   "detector_rot_deg", p->detector_rot_deg, "sod_mm", p->sod_mm, "sid_mm", p->sid_mm, "table_mm",
                   p->table_mm.x, p->table_mm.y, p->table_mm.z);
}

/* ---- acquisition -------------------------------------------------------------------------- */

const char *xt_pixfmt_name(int f) { return f == XT_STREAM_PIX_F32 ? "float32" : "uint16"; }

int xt_pixfmt_parse(const char *s, int *out) {
  if (!strcmp(s, "uint16")) *out = XT_STREAM_PIX_U16;
  else if (!strcmp(s, "float32")) *out = XT_STREAM_PIX_F32;
  else return XT_EINVAL;
  return 0;
}

/* "chain": {"enabled": bool, and any parameter of imaging's table by its name}, a partial update.
 * "protocol" (a preset's name or number) is applied first, so the other fields of the same update
 * adjust the preset; it also sets the acquisition's frame rate. "ma" sets the tube current (mAs
 * follows: xt_exposure_set). */
static int chain_from_json(const json_t *obj, xt_acq *a, xt_msg *msg) {
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "chain: expected a JSON object");
  const char *key;
  json_t *v;
  xt_chain_params p = a->chain_prm;
  const json_t *pv = json_object_get(obj, "protocol");
  if (pv) {
    int id = -1;
    if (json_is_string(pv)) id = xt_protocol_find(json_string_value(pv));
    else if (json_is_integer(pv)) id = (int)json_integer_value(pv);
    if (id < 0 || id >= XT_PROTOCOL_COUNT) { /* the names: imaging/protocols.tsv's rows */
      char names[400] = "";
      size_t n = 0;
      for (int i = 0; i < XT_PROTOCOL_COUNT && n < sizeof names; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", xt_protocol_name(i));
      return xt_fail(msg, XT_EINVAL, "chain.protocol: expected one of %s", names);
    }
    int rc = xt_protocol_apply(&p, id, msg);
    if (rc) return rc;
    if (xt_protocol_fps(id) > 0) a->fps = xt_protocol_fps(id);
  }
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "enabled")) {
      if (!json_is_boolean(v)) return xt_fail(msg, XT_EINVAL, "chain.enabled: expected true or false");
      a->chain = json_is_true(v);
      continue;
    }
    if (!strcmp(key, "protocol")) continue;
    if (!xt_chain_param_find(key) && strcmp(key, "ma"))
      return xt_fail(msg, XT_EINVAL, "chain: unknown field '%s' (docs/imaging.md)", key);
    char field[64];
    snprintf(field, sizeof field, "chain.%s", key);
    double x = 0;
    int rc = get_number(v, field, &x, msg);
    if (rc || (rc = xt_exposure_set(&p, key, x, msg))) return rc;
  }
  int rc = xt_chain_params_validate(&p, msg);
  if (rc) return rc;
  a->chain_prm = p;
  return 0;
}

json_t *xt_chain_to_json(int enabled, const xt_chain_params *p) {
  json_t *o = json_object();
  json_object_set_new(o, "enabled", json_boolean(enabled));
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    const double v = xt_chain_param_get(p, in);
    json_object_set_new(o, in->name, in->type == XT_PARAM_REAL ? json_real(v) : json_integer((json_int_t)v));
  }
  json_object_set_new(o, "ma", json_real(xt_exposure_ma(p))); /* derived: mas / pulse width */
  json_object_set_new(o, "protocol_name", json_string(xt_protocol_name(p->protocol)));
  return o;
}

/* {"planes": ["A", "B"] | ["A"] | ["B"], "timing": "interleaved" | "simultaneous"}, partial; whether
 * the system has plane B is the caller's check. */
static int biplane_from_json(const json_t *obj, xt_acq *a, xt_msg *msg) {
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "biplane: expected {\"planes\", \"timing\"}");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "planes")) {
      unsigned sel = 0;
      size_t i, n = json_array_size(v);
      if (!json_is_array(v) || n < 1 || n > 2) return xt_fail(msg, XT_EINVAL, "biplane.planes: expected [\"A\"], [\"B\"] or [\"A\", \"B\"]");
      for (i = 0; i < n; i++) {
        const char *p = json_string_value(json_array_get(v, i));
        const int k = xt_wire_plane_parse(p);
        if (k < 0)
          return xt_fail(msg, XT_EINVAL, "biplane.planes[%zu]: '%.16s' is neither A nor B", i, p ? p : "(not a string)");
        sel |= 1u << k;
      }
      a->plane_sel = sel;
    } else if (!strcmp(key, "timing")) {
      const char *t = json_string_value(v);
      if (t && !strcmp(t, "interleaved")) a->timing = XT_STREAM_TIMING_INTERLEAVED;
      else if (t && !strcmp(t, "simultaneous")) a->timing = XT_STREAM_TIMING_SIMULTANEOUS;
      else return xt_fail(msg, XT_EINVAL, "biplane.timing: expected \"interleaved\" or \"simultaneous\"");
    } else
      return xt_fail(msg, XT_EINVAL, "biplane: unknown field '%.64s'", key);
  }
  return 0;
}

int xt_acq_from_json(const json_t *obj, xt_acq *acq, xt_msg *msg) {
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "acquisition: expected a JSON object");
  xt_acq a = *acq;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "mode")) {
      if (!json_is_string(v)) return xt_fail(msg, XT_EINVAL, "mode: expected a string");
      const xt_detector_mode *m = xt_mode_find(json_string_value(v));
      if (!m) return xt_fail(msg, XT_ENOTFOUND, "mode: unknown detector mode '%s'", json_string_value(v));
      a.mode = m;
    } else if (!strcmp(key, "fps")) {
      double f = 0;
      int rc = get_number(v, key, &f, msg);
      if (rc) return rc;
      if (f < XT_FPS_MIN || f > XT_FPS_MAX)
        return xt_fail(msg, XT_ERANGE, "fps: %g outside [%g, %g]", f, XT_FPS_MIN, XT_FPS_MAX);
      a.fps = f;
    } else if (!strcmp(key, "run_mode")) {
      const char *s = json_string_value(v);
      if (!s) return xt_fail(msg, XT_EINVAL, "run_mode: expected a string");
      if (!strcmp(s, "free")) a.lockstep = 0;
      else if (!strcmp(s, "lockstep")) a.lockstep = 1;
      else return xt_fail(msg, XT_EINVAL, "run_mode: '%s' is not free or lockstep", s);
    } else if (!strcmp(key, "pixel_format")) {
      const char *s = json_string_value(v);
      if (!s) return xt_fail(msg, XT_EINVAL, "pixel_format: expected a string");
      if (xt_pixfmt_parse(s, &a.pixel_format)) return xt_fail(msg, XT_EINVAL, "pixel_format: '%s' is not uint16 or float32", s);
    } else if (!strcmp(key, "running")) {
      if (!json_is_boolean(v)) return xt_fail(msg, XT_EINVAL, "running: expected true or false");
      a.running = json_is_true(v);
    } else if (!strcmp(key, "chain")) {
      int rc = chain_from_json(v, &a, msg);
      if (rc) return rc;
    } else if (!strcmp(key, "biplane")) {
      int rc = biplane_from_json(v, &a, msg);
      if (rc) return rc;
    } else
      return xt_fail(msg, XT_EINVAL, "acquisition: unknown field '%s'", key);
  }
  *acq = a;
  return 0;
}

json_t *xt_acq_to_json(const xt_acq *a) {
  return json_pack("{s:s,s:i,s:i,s:f,s:s,s:s,s:b,s:f,s:o}", "mode", a->mode->name, "rows", a->mode->rows, "cols",
                   a->mode->cols, "fps", a->fps, "run_mode", a->lockstep ? "lockstep" : "free", "pixel_format",
                   xt_pixfmt_name(a->pixel_format), "running", a->running, "period_ms", 1000.0 / a->fps, "chain",
                   xt_chain_to_json(a->chain, &a->chain_prm));
}

int xt_render_from_json(const json_t *obj, xt_pose *pose, xt_acq *acq, xt_msg *msg) {
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "render: expected a JSON object");
  const char *key;
  json_t *v;
  int rc = 0;
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "pose")) rc = xt_pose_from_json(v, pose, 0, NULL, NULL, msg);
    else if (!strcmp(key, "mode") || !strcmp(key, "pixel_format")) {
      json_t *one = json_pack("{s:O}", key, v);
      rc = xt_acq_from_json(one, acq, msg);
      json_decref(one);
    } else
      rc = xt_fail(msg, XT_EINVAL, "render: unknown field '%s' (pose, mode, pixel_format)", key);
    if (rc) break;
  }
  return rc;
}

/* ---- stream commands ---------------------------------------------------------------------- */

int xt_ws_cmd_parse(const char *text, size_t len, xt_ws_cmd *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  int rc = xt_json_parse(text, len, &out->cmd, msg);
  if (rc) return rc;
  const json_t *cmd = out->cmd;
  const char *type = json_string_value(json_object_get(cmd, "type"));
  if (!type) return xt_fail(msg, XT_EINVAL, "missing \"type\" (pose, acquisition, start, stop, trigger, state, frames, shape)");
  if (!strcmp(type, "pose")) {
    json_t *pose = json_object_get(cmd, "pose");
    json_t *seqv = json_object_get(cmd, "seq");
    if (!json_is_object(pose)) return xt_fail(msg, XT_EINVAL, "pose: expected {\"pose\": {...}}");
    if (seqv && (!json_is_integer(seqv) || json_integer_value(seqv) < 0))
      return xt_fail(msg, XT_EINVAL, "seq: expected an integer >= 0");
    out->update = json_deep_copy(pose);
    if (seqv) json_object_set(out->update, "seq", seqv);
    /* {"plane": "B"}: the operation takes it from the update (xt_srv_update_pose) */
    if (json_object_get(cmd, "plane")) json_object_set(out->update, "plane", json_object_get(cmd, "plane"));
    out->type = XT_CMD_POSE;
  } else if (!strcmp(type, "acquisition")) {
    json_t *a = json_object_get(cmd, "acquisition");
    if (!json_is_object(a)) return xt_fail(msg, XT_EINVAL, "acquisition: expected {\"acquisition\": {...}}");
    if (json_object_get(cmd, "plane")) {
      out->update = json_copy(a);
      json_object_set(out->update, "plane", json_object_get(cmd, "plane"));
    } else
      out->update = json_incref(a);
    out->type = XT_CMD_ACQ;
  } else if (!strcmp(type, "start")) out->type = XT_CMD_START;
  else if (!strcmp(type, "stop")) out->type = XT_CMD_STOP;
  else if (!strcmp(type, "trigger")) out->type = XT_CMD_TRIGGER;
  else if (!strcmp(type, "device")) { /* {"type": "device", "command": NAME, its fields} */
    const char *name = json_string_value(json_object_get(cmd, "command"));
    if ((out->device = xt_dev_cmd_parse(name)) < 0)
      return xt_fail(msg, XT_EINVAL, "device: unknown command '%.64s'", name ? name : "(none)");
    out->update = json_deep_copy(cmd);
    json_object_del(out->update, "type");
    json_object_del(out->update, "command");
    json_object_del(out->update, "id");
    out->type = XT_CMD_DEVICE;
  }
  else if (!strcmp(type, "shape")) { /* {"type": "shape", "name": INSTRUMENT, "points": [[x, y, z], ...]} */
    if (!json_is_string(json_object_get(cmd, "name")))
      return xt_fail(msg, XT_EINVAL, "shape: expected {\"name\": INSTRUMENT, \"points\": [[x, y, z], ...]}");
    out->update = json_incref((json_t *)cmd);
    out->type = XT_CMD_SHAPE;
  }
  else if (!strcmp(type, "state")) out->type = XT_CMD_STATE;
  else if (!strcmp(type, "frames")) { /* which of the chain's frames this client gets */
    const char *f = json_string_value(json_object_get(cmd, "frames"));
    if (!f || (strcmp(f, "raw") && strcmp(f, "processed")))
      return xt_fail(msg, XT_EINVAL, "frames: expected {\"frames\": \"raw\" or \"processed\"}");
    out->processed = !strcmp(f, "processed");
    out->type = XT_CMD_FRAMES;
  } else return xt_fail(msg, XT_EINVAL, "unknown type '%.64s'", type);
  return 0;
}

void xt_ws_cmd_free(xt_ws_cmd *c) {
  json_decref(c->cmd);
  json_decref(c->update);
  c->cmd = c->update = NULL;
}

/* ---- server-level operations -------------------------------------------------------------- */

/* ---- planes ------------------------------------------------------------------------------- */

uint64_t xt_srv_plane_seed(uint64_t seed, int plane) {
  if (plane == 0) return seed;
  /* splitmix64's finaliser: plane B's noise is a stream of its own, still fixed by the one seed */
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)plane;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  /* 53 bits: a seed is a chain parameter, which the API states as a JSON number */
  return (z ^ (z >> 31)) & ((1ull << 53) - 1);
}

int xt_srv_plane_parse(const xt_server *s, const char *name, int *plane, xt_msg *msg) {
  const int p = xt_wire_plane_parse(name);
  if (p < 0) return xt_fail(msg, XT_EINVAL, "plane: '%.16s' is neither A nor B", name ? name : "(not a string)");
  if (p >= s->nplanes)
    return xt_fail(msg, XT_ENOTFOUND, "plane: this is a single-plane system (plane B needs --planes 2)");
  *plane = p;
  return 0;
}

/* An operation's body may name its plane ({"plane": "B", ...}: the stream's messages, scenario
 * events); *rest gets the body without it (a new reference), *plane the plane (A when unnamed). */
static int take_plane(const xt_server *s, const json_t *obj, int *plane, json_t **rest, xt_msg *msg) {
  *plane = 0;
  *rest = NULL;
  const json_t *v = json_is_object(obj) ? json_object_get(obj, "plane") : NULL;
  if (!v) {
    *rest = json_incref((json_t *)obj);
    return 0;
  }
  int rc = xt_srv_plane_parse(s, json_string_value(v), plane, msg);
  if (rc) return rc;
  *rest = json_copy((json_t *)obj);
  json_object_del(*rest, "plane");
  return 0;
}

int xt_srv_update_pose_plane(xt_server *s, int pl, const json_t *obj, int allow_seq, uint64_t *seq, xt_msg *msg) {
  pthread_mutex_lock(&s->st_mu);
  /* Stamped under st_mu, as the pacer stamps exposures: an exposure latches this pose exactly when
   * its t_exposure_ns is later than this t_pose_ns (stamped before the lock, an exposure taken
   * while we waited for it would be later than t_pose and still carry the older pose). */
  uint64_t t = xt_dev_now_ns();
  xt_acq_setup *set = &s->planes[pl].set;
  xt_pose p = set->pose;
  uint64_t q = 0;
  int has = 0;
  int rc = xt_pose_from_json(obj, &p, allow_seq, &q, &has, msg);
  /* the stand's own ranges: a single-plane system's frontal stand is the twin's full range */
  if (!rc && s->nplanes > 1) rc = xt_stand_validate(s->stands[pl], &p, msg);
  if (!rc) {
    set->pose = p;
    set->pose_seq = has ? q : set->pose_seq + 1;
    set->t_pose_ns = t;
    if (seq) *seq = set->pose_seq;
    /* one table under both planes: moving it moves the patient in both views (a new pose of the
     * other plane too, numbered on from its own) */
    for (int o = 0; o < s->nplanes; o++) {
      xt_acq_setup *os = &s->planes[o].set;
      if (o == pl || !memcmp(&os->pose.table_mm, &p.table_mm, sizeof p.table_mm)) continue;
      os->pose.table_mm = p.table_mm;
      os->pose_seq++;
      os->t_pose_ns = t;
    }
  }
  /* logged under st_mu, as the pacer logs exposures: the log's order is the server's */
  xt_session_command(s, pl ? "pose_b" : "pose", "api", obj, rc, msg ? msg->text : NULL);
  pthread_mutex_unlock(&s->st_mu);
  if (!rc) {
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.pose_updates++;
    pthread_mutex_unlock(&s->metrics.mu);
  }
  return rc;
}

int xt_srv_update_pose(xt_server *s, const json_t *obj, int allow_seq, uint64_t *seq, xt_msg *msg) {
  int pl;
  json_t *rest;
  int rc = take_plane(s, obj, &pl, &rest, msg);
  if (rc) return rc;
  rc = xt_srv_update_pose_plane(s, pl, rest, allow_seq, seq, msg);
  json_decref(rest);
  return rc;
}

xt_acq xt_srv_acq_get_plane(const xt_server *s, int pl) {
  const xt_acq_setup *p = &s->planes[pl].set;
  return (xt_acq){.mode = p->mode, .fps = s->run.fps, .lockstep = s->run.lockstep, .pixel_format = p->pixel_format,
                  .running = s->run.running, .chain = p->chain, .chain_prm = p->chain_prm,
                  .plane_sel = s->plane_sel, .timing = s->timing};
}

void xt_srv_acq_put_plane(xt_server *s, int pl, const xt_acq *a) {
  xt_acq_setup *p = &s->planes[pl].set;
  p->mode = a->mode;
  p->pixel_format = a->pixel_format;
  p->chain = a->chain;
  p->chain_prm = a->chain_prm;
  s->run = (xt_srv_run){a->fps, a->lockstep, a->running};
  s->plane_sel = a->plane_sel;
  s->timing = a->timing;
}

xt_acq xt_srv_acq_get(const xt_server *s) { return xt_srv_acq_get_plane(s, 0); }

/* The API's switch, pressed or let go on every plane it selects (sel), all or none: a plane whose
 * device refuses leaves every other as it was. Caller holds st_mu. */
static int api_switch_locked(xt_server *s, int run, unsigned sel, int *events, xt_msg *msg) {
  const xt_dev_cmd cmd = run ? XT_DEV_CMD_START : XT_DEV_CMD_STOP;
  const uint64_t now = xt_dev_now_ns();
  int n = 0, rc = 0;
  if (run && s->nplanes > 1) {
    /* each plane's answer first, on a copy of its machine (its own words), so that none is pressed
     * when one refuses */
    for (int p = 0; p < s->nplanes && !rc; p++) {
      if (!(sel & (1u << p))) continue;
      xt_device trial = s->devs[p];
      xt_dev_out o;
      if ((rc = xt_dev_command(&trial, cmd, NULL, now, &o, msg)) && msg) {
        char t[sizeof msg->text];
        snprintf(t, sizeof t, "%s", msg->text);
        xt_fail(msg, rc, "plane %s: %.200s", p ? "B" : "A", t);
      }
    }
  }
  for (int p = 0; p < s->nplanes && !rc; p++) {
    /* stop lets go of every plane's switch; start presses the selected planes' */
    if (run && !(sel & (1u << p))) continue;
    int e = 0;
    rc = xt_srv_device_locked(s, p, cmd, NULL, now, &e, msg);
    n += e;
  }
  *events = n;
  return rc;
}

int xt_srv_update_acq_plane(xt_server *s, int pl, const json_t *obj, xt_msg *msg) {
  pthread_mutex_lock(&s->st_mu);
  xt_acq a = xt_srv_acq_get_plane(s, pl);
  int events = 0;
  int rc = xt_acq_from_json(obj, &a, msg);
  if (!rc && s->nplanes < 2 && (a.plane_sel != 1u || a.timing != s->timing))
    rc = xt_fail(msg, XT_EINVAL, "biplane: this is a single-plane system (--planes 2 for plane B)");
  /* "running" is the device's API switch (start/stop): refused by the device, nothing is applied */
  if (!rc && a.running != s->run.running) rc = api_switch_locked(s, a.running, a.plane_sel, &events, msg);
  if (!rc) {
    a.running = s->run.running; /* as the device left it (a new run began with its exposure) */
    /* a seed given to plane A is the system's: plane B's noise follows it, mixed (one seed fixes
     * both); plane B's own acquisition may still set its seed alone */
    if (pl == 0 && s->nplanes > 1 && a.chain_prm.seed != s->planes[0].set.chain_prm.seed)
      s->planes[1].set.chain_prm.seed = xt_srv_plane_seed(a.chain_prm.seed, 1);
    xt_srv_acq_put_plane(s, pl, &a);
    s->acq_gen++;
    xt_engine_kick(s);
  }
  xt_session_command(s, pl ? "acquisition_b" : "acquisition", "api", obj, rc, msg ? msg->text : NULL);
  pthread_mutex_unlock(&s->st_mu);
  if (events) xt_ring_notify(&s->ring);
  return rc;
}

int xt_srv_update_acq(xt_server *s, const json_t *obj, xt_msg *msg) {
  int pl;
  json_t *rest;
  int rc = take_plane(s, obj, &pl, &rest, msg);
  if (rc) return rc;
  rc = xt_srv_update_acq_plane(s, pl, rest, msg);
  json_decref(rest);
  return rc;
}

/* The device's API switch: start presses it (no latencies: exposing on return, a new run), stop lets
 * go of whatever switch is held. Both answer ok when there is nothing to do, as they always did;
 * start is refused (409 STATE) where the device allows no exposure (standby, fault, radiation
 * disabled, another switch's exposure). On a biplane system start presses the switch of every
 * plane the acquisition's "planes" selects, stop lets go of both. */
int xt_srv_start(xt_server *s, int run, xt_msg *msg) {
  int events = 0;
  pthread_mutex_lock(&s->st_mu);
  const int rc = api_switch_locked(s, run, s->plane_sel, &events, msg);
  s->acq_gen++;
  xt_engine_kick(s);
  xt_session_command(s, run ? "start" : "stop", "api", NULL, rc, rc && msg ? msg->text : NULL);
  pthread_mutex_unlock(&s->st_mu);
  if (events) xt_ring_notify(&s->ring);
  return rc;
}

/* ---- the device --------------------------------------------------------------------------- */

/* A device command's arguments: {"phases": [{"duration_s", "fps"}, ...]} (expose), {"code",
 * "text"} (fault); the machine says which command takes which. */
static int device_args(const json_t *obj, xt_dev_args *a, xt_dev_phase *ph, xt_msg *msg) {
  memset(a, 0, sizeof *a);
  if (!obj) return 0;
  if (!json_is_object(obj)) return xt_fail(msg, XT_EINVAL, "device: expected a JSON object");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    if (!strcmp(key, "phases")) {
      size_t n = json_array_size(v);
      if (!json_is_array(v) || n == 0 || n > XT_DEV_MAX_PHASES)
        return xt_fail(msg, XT_EINVAL, "phases: expected 1 to %d objects {\"duration_s\", \"fps\"}", XT_DEV_MAX_PHASES);
      for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(v, i);
        if (!json_is_object(p) || json_object_size(p) != 2)
          return xt_fail(msg, XT_EINVAL, "phases[%zu]: expected {\"duration_s\", \"fps\"}", i);
        int rc = get_number(json_object_get(p, "duration_s"), "phases: duration_s", &ph[i].duration_s, msg);
        if (!rc) rc = get_number(json_object_get(p, "fps"), "phases: fps", &ph[i].fps, msg);
        if (rc) return rc;
      }
      a->phases = ph;
      a->nphases = (int)n;
    } else if (!strcmp(key, "code")) {
      if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 1000000)
        return xt_fail(msg, XT_EINVAL, "code: expected an integer in 1..1000000");
      a->fault_code = (int)json_integer_value(v);
    } else if (!strcmp(key, "text")) {
      if (!json_is_string(v)) return xt_fail(msg, XT_EINVAL, "text: expected a string");
      a->fault_text = json_string_value(v);
    } else
      return xt_fail(msg, XT_EINVAL, "device: unknown field '%.64s'", key);
  }
  return 0;
}

int xt_srv_device_plane(xt_server *s, int pl, int cmd, const json_t *args, json_t **device_out, xt_msg *msg) {
  if (cmd < 0 || cmd >= XT_DEV_NCMDS) return xt_fail(msg, XT_EINVAL, "device: no such command");
  if (cmd == XT_DEV_CMD_START || cmd == XT_DEV_CMD_STOP) { /* the acquisition's own, with its bookkeeping */
    if (args && json_object_size(args)) return xt_fail(msg, XT_EINVAL, "device: '%s' takes no fields", xt_dev_cmd_name(cmd));
    int rc = xt_srv_start(s, cmd == XT_DEV_CMD_START, msg);
    if (!rc && device_out) *device_out = xt_srv_device_json_plane(s, pl);
    return rc;
  }
  xt_dev_phase ph[XT_DEV_MAX_PHASES];
  xt_dev_args a;
  int rc = device_args(args, &a, ph, msg), events = 0;
  if (rc) return rc;
  pthread_mutex_lock(&s->st_mu);
  const uint64_t now = xt_dev_now_ns();
  rc = xt_srv_device_locked(s, pl, (xt_dev_cmd)cmd, &a, now, &events, msg);
  if (!rc) {
    s->acq_gen++; /* the pacer looks again: X-ray may have begun or ended */
    xt_engine_kick(s);
    if (device_out) *device_out = xt_srv_device_json_locked(s, pl, now);
  }
  json_t *logged = json_pack("{s:s,s:O*}", "command", xt_dev_cmd_name((xt_dev_cmd)cmd), "args", args);
  if (s->nplanes > 1) json_object_set_new(logged, "plane", json_string(pl ? "B" : "A"));
  xt_session_command(s, "device", "api", logged, rc, rc && msg ? msg->text : NULL);
  json_decref(logged);
  pthread_mutex_unlock(&s->st_mu);
  if (events) xt_ring_notify(&s->ring);
  return rc;
}

int xt_srv_device(xt_server *s, int cmd, const json_t *args, json_t **device_out, xt_msg *msg) {
  int pl = 0;
  json_t *rest = NULL;
  int rc = args ? take_plane(s, args, &pl, &rest, msg) : 0;
  if (rc) return rc;
  rc = xt_srv_device_plane(s, pl, cmd, rest, device_out, msg);
  json_decref(rest);
  return rc;
}

json_t *xt_srv_device_json_plane(xt_server *s, int pl) {
  pthread_mutex_lock(&s->st_mu);
  const uint64_t now = xt_dev_now_ns();
  const int events = xt_srv_device_advance_locked(s, now); /* as of now, should the pacer not have woken yet */
  json_t *j = xt_srv_device_json_locked(s, pl, now);
  pthread_mutex_unlock(&s->st_mu);
  if (events) xt_ring_notify(&s->ring);
  return j;
}

json_t *xt_srv_device_json(xt_server *s) { return xt_srv_device_json_plane(s, 0); }

/* {"planes": ["A", "B"] (those the API's switch exposes), "timing"}: on a biplane system only. */
static json_t *biplane_json_locked(const xt_server *s) {
  json_t *sel = json_array();
  for (int p = 0; p < s->nplanes; p++)
    if (s->plane_sel & (1u << p)) json_array_append_new(sel, json_string(p ? "B" : "A"));
  return json_pack("{s:o,s:s}", "planes", sel, "timing",
                   s->timing == XT_STREAM_TIMING_SIMULTANEOUS ? "simultaneous" : "interleaved");
}

json_t *xt_srv_plane_state_json(xt_server *s, int pl) {
  pthread_mutex_lock(&s->st_mu);
  const xt_acq a = xt_srv_acq_get_plane(s, pl);
  json_t *acq = xt_acq_to_json(&a);
  if (s->nplanes > 1) json_object_set_new(acq, "biplane", biplane_json_locked(s));
  json_t *o = json_pack("{s:o,s:I,s:o,s:I}", "pose", xt_pose_to_json(&s->planes[pl].set.pose), "pose_seq",
                        (json_int_t)s->planes[pl].set.pose_seq, "acquisition", acq, "next_frame",
                        (json_int_t)s->planes[pl].next_counter);
  if (s->nplanes > 1) {
    const xt_stand *st = s->stands[pl];
    json_object_set_new(o, "plane", json_string(pl ? "B" : "A"));
    if (st)
      json_object_set_new(o, "stand",
                          json_pack("{s:s,s:[f,f],s:[f,f],s:[f,f]}", "name", st->name, "primary_deg", st->primary_min,
                                    st->primary_max, "secondary_deg", st->secondary_min, st->secondary_max, "sid_mm",
                                    st->sid_min, st->sid_max));
  }
  pthread_mutex_unlock(&s->st_mu);
  return o;
}

json_t *xt_srv_state_json(xt_server *s) {
  json_t *o = xt_srv_plane_state_json(s, 0);
  if (s->nplanes > 1) json_object_set_new(o, "plane_b", xt_srv_plane_state_json(s, 1));
  return o;
}

/* Where a model lands on the detector at the current pose and mode (its projected bounding box;
 * the CLI also checks the rendered frame's edges). */
static json_t *coverage_json(const xt_model *m, const xt_geometry *g) {
  xt_coverage c;
  xt_msg msg;
  if (!g || xt_model_coverage(m, g, &c, &msg)) return json_null();
  json_t *bb = json_array();
  for (int i = 0; i < 4; i++) json_array_append_new(bb, isfinite(c.bbox[i]) ? json_real(c.bbox[i]) : json_null());
  return json_pack("{s:s,s:o,s:o,s:s}", "status", xt_cover_name(c.status), "bbox_px", bb, "on_detector",
                   isfinite(c.on_detector) ? json_real(c.on_detector) : json_null(), "basis",
                   "the model's bounding box projected at the current pose and mode");
}

json_t *xt_srv_models_json(xt_server *s) {
  json_t *a = json_array();
  xt_geometry geom, *g = &geom;
  pthread_mutex_lock(&s->st_mu);
  xt_pose pose = s->planes[0].set.pose;
  const xt_detector_mode *mode = s->planes[0].set.mode;
  pthread_mutex_unlock(&s->st_mu);
  xt_msg gm;
  if (!mode || xt_geom_compute(&pose, mode, &geom, &gm)) g = NULL;
  pthread_mutex_lock(&s->models_mu);
  for (int i = 0; i < s->nmodels; i++) {
    const xt_model *m = s->models[i];
    json_t *o = json_pack("{s:s,s:s,s:s}", "name", m->name, "kind", xt_model_kind_name(m->kind), "source", s->model_src[i]);
    xt_model_describe_json(m, XT_MODEL_VIEW_REPORT, o); /* the kind's keys: sizes, voxels, active share */
    uint64_t dev;
    if (xt_model_device_bytes(m, &dev) == 0) json_object_set_new(o, "device_bytes", json_integer((json_int_t)dev));
#ifdef XT_SERVER_HAVE_LOADERS
    if (m->report) json_object_set_new(o, "load", xt_load_report_json(m->report));
#endif
    json_object_set_new(o, "coverage", coverage_json(m, g));
    json_array_append_new(a, o);
  }
  pthread_mutex_unlock(&s->models_mu);
  return a;
}

/* Hints for clients that build controls from GET /v1/acquisition (the console, docs/console.md):
 * "chain.NAME": label-free (the name says it), unit, range, a step of a tenth of the default's order
 * of magnitude (kV 70: 1, mAs 0.1: 0.01), the table's help as the description; 0/1 switches are
 * "boolean"; the protocol names as an enum. From imaging's one table, so a new parameter gets its
 * hints without a change here. */
static json_t *acquisition_fields_json(void) {
  json_t *o = json_object();
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    char key[80];
    snprintf(key, sizeof key, "chain.%s", in->name);
    json_t *f = json_pack("{s:s,s:s,s:f,s:f}", "unit", in->unit, "description", in->help, "min", in->lo, "max", in->hi);
    if (in->type != XT_PARAM_REAL) {
      json_object_set_new(f, "step", json_integer(1));
      if (in->lo == 0 && in->hi == 1) json_object_set_new(f, "boolean", json_true());
    } else {
      const double mag = fabs(in->def) > 0 ? fabs(in->def) : (in->hi - in->lo) / 10;
      json_object_set_new(f, "step", json_real(pow(10, floor(log10(mag))) / 10));
    }
    json_object_set_new(o, key, f);
  }
  json_t *names = json_array();
  for (int i = 0; i < XT_PROTOCOL_COUNT; i++) json_array_append_new(names, json_string(xt_protocol_name(i)));
  json_object_set_new(json_object_get(o, "chain.protocol"), "names", names);
  json_object_set_new(o, "chain.ma", json_pack("{s:s,s:s}", "unit", "mA", "description",
                                               "tube current (mas / pulse width); setting it changes mAs"));
  json_object_set_new(o, "chain.protocol_name", json_pack("{s:b}", "readonly", 1));
  return o;
}

json_t *xt_srv_info_json(xt_server *s) {
  json_t *modes = json_array();
  for (int i = 0; i < xt_mode_count(); i++) {
    const xt_detector_mode *m = xt_mode_at(i);
    json_array_append_new(
        modes, json_pack("{s:s,s:s,s:i,s:i,s:[f,f],s:f,s:f,s:s,s:f,s:[i,i,i,i],s:f,s:f,s:f}", "name", m->name,
                         "description", m->description, "cols", m->cols, "rows", m->rows, "pitch_mm", m->pitch_u_mm,
                         m->pitch_v_mm, "sod_mm", m->sod_mm, "sid_mm", m->sid_mm, "detector", m->detector, "field_cm",
                         m->field_cm, "roi", m->roi_col0, m->roi_row0, m->roi_cols, m->roi_rows, "binning", m->binning,
                         "dose_ratio", m->dose_ratio, "readout_ms", m->readout_ms));
  }
  json_t *backends = json_array();
  for (int b = XT_BACKEND_CPU; b <= XT_BACKEND_CUDA; b++) {
    xt_msg m;
    int rc = xt_proj_available((xt_backend)b, &m);
    json_array_append_new(backends, json_pack("{s:s,s:b,s:s}", "name", xt_backend_name((xt_backend)b), "available",
                                              rc == 0, "note", rc ? m.text : ""));
  }
  json_t *gpus = json_array();
  for (int i = 0; i < s->gpu_count && i < XT_SRV_MAX_WORKERS; i++)
    json_array_append_new(gpus, json_pack("{s:i,s:s}", "index", i, "name", s->gpu_names[i]));
  json_t *limits = json_pack("{s:i,s:i,s:i}", "max_body_bytes", s->cfg.max_body, "max_ws_message_bytes",
                             s->cfg.max_ws_message, "max_clients", s->cfg.max_clients);
  json_t *stream = json_pack("{s:s,s:i,s:i,s:I}", "path", "/v1/stream", "header_version", XT_STREAM_VERSION,
                             "header_size", XT_STREAM_HEADER_SIZE, "magic", (json_int_t)XT_STREAM_MAGIC);
  json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:o,s:i,s:o,s:o,s:o,s:o,s:o,s:b,s:b,s:i,s:i}", "name", "xtwin-server",
                        "version", XT_SERVER_VERSION, "backend", xt_backend_name(s->backend), "backends", backends,
                        "gpus", gpus, "render_workers", s->nworkers, "detector_modes", modes, "models",
                        xt_srv_models_json(s), "stream", stream, "limits", limits, "config", xt_srv_config_json(&s->cfg),
                        "tls", s->tls, "auth", s->cfg.token[0] != 0, "rest_port", s->rest_port, "ws_port", s->ws_port);
  if (s->backend_note[0]) json_object_set_new(o, "backend_note", json_string(s->backend_note));
  /* the planes of this system (docs/biplane.md): 1, or 2 for a biplane one */
  json_t *planes = json_array();
  for (int p = 0; p < s->nplanes; p++) {
    const xt_stand *st = s->stands[p];
    json_array_append_new(planes, json_pack("{s:s,s:s,s:s}", "plane", p ? "B" : "A", "stand", st ? st->name : "frontal",
                                            "path", p ? "/v1/planes/b" : "/v1/planes/a"));
  }
  json_object_set_new(o, "planes", planes);
  json_object_set_new(o, "acquisition_fields", acquisition_fields_json());
  return o;
}

#ifdef XT_SERVER_HAVE_LOADERS
/* The model named name, or -1. Caller holds models_mu. */
static int model_named(xt_server *s, const char *name) {
  for (int i = 0; i < s->nmodels; i++)
    if (s->models[i] && !strcmp(s->models[i]->name, name)) return i;
  return -1;
}

/* Names are unique: a name the request gave collides (409, the first model untouched; there is no
 * replace, since the projectors cannot drop a model the render workers may be using), a default
 * name (the file's) is made unique as "NAME~2", "NAME~3", ... Caller holds models_mu. */
static int claim_name(xt_server *s, xt_model *m, int given, xt_msg *msg) {
  int i = model_named(s, m->name);
  if (i < 0) return 0;
  if (given)
    return xt_fail(msg, XT_EEXISTS, "model name \"%s\" is taken (by the model from %s); names are unique", m->name,
                   s->model_src[i]);
  char base[sizeof m->name];
  snprintf(base, sizeof base, "%s", m->name);
  for (int k = 2; k <= XT_SRV_MAX_MODELS + 1; k++) {
    char suffix[16];
    int sl = snprintf(suffix, sizeof suffix, "~%d", k);
    int keep = (int)strlen(base);
    if (keep > (int)sizeof m->name - 1 - sl) keep = (int)sizeof m->name - 1 - sl;
    snprintf(m->name, sizeof m->name, "%.*s%s", keep, base, suffix);
    if (model_named(s, m->name) < 0) return 0;
  }
  return xt_fail(msg, XT_EINTERNAL, "model name \"%s\": no unique default name", base); /* more names than models */
}
#endif

int xt_srv_add_model_path(xt_server *s, const char *path, const char *name, const char *convert, int from_client,
                          xt_msg *msg) {
#ifdef XT_SERVER_HAVE_LOADERS
  xt_load_options opt = {0};
  int rc = xt_load_options_named(convert, s->cfg.hu_model, s->cfg.ct_energy, s->cfg.nifti_transform,
                                 s->cfg.nan_value, &opt, msg);
  if (rc) return rc;
  if (from_client && s->nmodel_roots == 0)
    return xt_fail(msg, XT_EPERM, "loading models by path is disabled: start the server with --model-root DIR");
  const char *root_names[XT_SRV_MAX_LIST];
  if (from_client) {
    opt.roots = (const char *const *)s->model_roots;
    opt.nroots = s->nmodel_roots;
    for (int i = 0; i < s->nmodel_roots; i++) root_names[i] = s->cfg.model_roots[i];
    opt.root_names = root_names;
  }
  xt_model *m = NULL;
  int given = name && *name;
  pthread_mutex_lock(&s->models_mu);
  int n = s->nmodels, taken = given ? model_named(s, name) : -1;
  if (taken >= 0) /* before the load, which may be long: checked again once loaded */
    rc = xt_fail(msg, XT_EEXISTS, "model name \"%s\" is taken (by the model from %s); names are unique", name,
                 s->model_src[taken]);
  pthread_mutex_unlock(&s->models_mu);
  if (rc) return rc;
  if (n >= XT_SRV_MAX_MODELS) return xt_fail(msg, XT_ETOOLARGE, "at most %d models", XT_SRV_MAX_MODELS);
  if ((rc = xt_model_load(path, &opt, name, &m, msg))) return rc;
  if ((rc = xt_budget_admit(s, &m, msg))) return rc; /* frees m when over a work budget */
  /* One add at a time (add_mu), but models_mu is not held while the workers add it: a worker takes
   * models_mu in its frame path (motion.c, every exposure), and this thread waits for the workers. */
  pthread_mutex_lock(&s->add_mu);
  pthread_mutex_lock(&s->models_mu);
  if (s->nmodels >= XT_SRV_MAX_MODELS) {
    pthread_mutex_unlock(&s->models_mu);
    pthread_mutex_unlock(&s->add_mu);
    xt_model_free(m);
    return xt_fail(msg, XT_ETOOLARGE, "at most %d models", XT_SRV_MAX_MODELS);
  }
  if ((rc = claim_name(s, m, given, msg))) { /* under add_mu: two requests cannot both claim it */
    pthread_mutex_unlock(&s->models_mu);
    pthread_mutex_unlock(&s->add_mu);
    xt_model_free(m);
    return rc;
  }
  pthread_mutex_unlock(&s->models_mu);
  /* Added to the projectors before it is listed; the projectors reference it until exit. */
  for (int w = 0; w < s->nworkers && !rc; w++) {
    if (!s->workers[w].started) {
      rc = xt_proj_add_model(s->workers[w].proj, m, msg);
      continue;
    }
    xt_call c;
    memset(&c, 0, sizeof c);
    c.model = m;
    rc = xt_engine_call(s, XT_JOB_ADD_MODEL, w, &c);
    if (rc) *msg = c.msg;
  }
  pthread_mutex_lock(&s->models_mu);
  if (rc) {
    /* A projector may hold a partial upload; keep the model alive (unlisted) rather than free
     * memory a backend might still reference. */
    s->models[s->nmodels] = NULL;
  } else {
    s->models[s->nmodels] = m;
    snprintf(s->model_src[s->nmodels], sizeof s->model_src[0], "%s", path);
    s->nmodels++;
    xt_session_model(s, path, m->name, convert);
    rc = xt_srv_instr_register(s, msg); /* an instrument (.instr.json) takes shapes from now on */
    if (!rc) rc = xt_srv_contrast_register(s, msg); /* a contrast mask's regions take injections */
  }
  pthread_mutex_unlock(&s->models_mu);
  pthread_mutex_unlock(&s->add_mu);
  return rc;
#else
  (void)s, (void)path, (void)name, (void)convert, (void)from_client;
  return xt_fail(msg, XT_EUNSUPPORTED, "this server was built without the volume loaders");
#endif
}

/* ---- dose ----------------------------------------------------------------------------------- */

json_t *xt_dose_json_plane(xt_server *s, int plane) {
  xt_acq_plane_state pl, *m = &pl;
  xt_acq_plane_snapshot(&s->planes[plane], &pl);
  json_t *o = json_pack("{s:I,s:f,s:f,s:{s:f,s:f,s:f,s:f},s:{s:b,s:f,s:f,s:f,s:i}}", "run_frames",
                        (json_int_t)m->dose.frames, "k_irp_total_mgy", m->dose.k_irp_mgy, "kap_total_gycm2",
                        m->dose.kap_gycm2, "last_frame", "k_irp_mgy", m->dose_last.k_irp_mgy, "kap_gycm2",
                        m->dose_last.kap_gycm2, "d_irp_mm", m->dose_last.d_irp_mm, "field_cm2", m->dose_last.field_cm2,
                        "drc", "active", m->drc_live && (m->drc.flags & XT_DRC_ON), "measured_ngy", m->drc.measured_ngy,
                        "target_ngy", m->drc.target_ngy, "curve_s", m->drc.s, "flags", (int)m->drc.flags);
  return o;
}

/* Plane A's (as a single-plane system's always was); on a biplane system also each plane's and the
 * total: the air kerma of the two reference points and the KAPs added (each plane's run totals). */
json_t *xt_dose_json(xt_server *s) {
  json_t *o = xt_dose_json_plane(s, 0);
  if (s->nplanes < 2) return o;
  json_t *b = xt_dose_json_plane(s, 1);
  json_t *a = json_deep_copy(o);
  const double k = json_real_value(json_object_get(a, "k_irp_total_mgy")) +
                   json_real_value(json_object_get(b, "k_irp_total_mgy"));
  const double kap = json_real_value(json_object_get(a, "kap_total_gycm2")) +
                     json_real_value(json_object_get(b, "kap_total_gycm2"));
  const json_int_t n = json_integer_value(json_object_get(a, "run_frames")) +
                       json_integer_value(json_object_get(b, "run_frames"));
  json_object_set_new(o, "planes", json_pack("{s:o,s:o}", "A", a, "B", b));
  json_object_set_new(o, "total", json_pack("{s:I,s:f,s:f}", "run_frames", n, "k_irp_total_mgy", k, "kap_total_gycm2", kap));
  return o;
}

/* ---- scenarios ------------------------------------------------------------------------------ */

int xt_srv_scenario_apply(xt_server *s, const char *what, const char *name, const json_t *body, xt_msg *msg) {
  json_t *empty = json_object();
  const json_t *b = body ? body : empty;
  int rc;
  if (!strcmp(what, "fault")) rc = s->fault_hook ? s->fault_hook(s, name, b, msg)
                                                 : xt_fail(msg, XT_EUNSUPPORTED, "fault '%s': no faults in this build", name);
  else if (!strcmp(name, "pose")) rc = xt_srv_update_pose(s, b, 0, NULL, msg);
  else if (!strcmp(name, "acquisition")) rc = xt_srv_update_acq(s, b, msg);
  else if (!strcmp(name, "start") || !strcmp(name, "stop")) rc = xt_srv_start(s, !strcmp(name, "start"), msg);
  else if (!strcmp(name, "trigger")) rc = xt_engine_trigger(s, NULL, msg);
  else if (!strcmp(name, "device")) { /* {"command": NAME, its fields} */
    const char *c = json_string_value(json_object_get(b, "command"));
    const int cmd = xt_dev_cmd_parse(c);
    json_t *args = json_copy((json_t *)b);
    json_object_del(args, "command");
    rc = cmd < 0 ? xt_fail(msg, XT_EINVAL, "device: unknown command '%.64s'", c ? c : "(none)")
                 : xt_srv_device(s, cmd, args, NULL, msg);
    json_decref(args);
  } else
    rc = xt_fail(msg, XT_EINVAL, "scenario: unknown command '%.64s'", name);
  json_decref(empty);
  return rc;
}

int xt_srv_scenario_set(xt_server *s, const json_t *doc, xt_msg *msg) {
  xt_scenario sc;
  int rc = xt_scenario_parse(doc, &sc, msg);
  if (rc) return rc;
  pthread_mutex_lock(&s->st_mu);
  xt_scenario_free(&s->scn);
  s->scn = sc;
  s->scn.t_start_ns = xt_dev_now_ns();
  if (sc.has_seed) /* the run's noise: the same every time */
    for (int p = 0; p < s->nplanes; p++) s->planes[p].set.chain_prm.seed = xt_srv_plane_seed(sc.seed, p);
  json_t *logged = json_pack("{s:s,s:i}", "name", s->scn.name, "events", s->scn.n);
  xt_session_command(s, "scenario", "api", logged, 0, NULL);
  json_decref(logged);
  s->acq_gen++;
  xt_engine_kick(s);
  pthread_mutex_unlock(&s->st_mu);
  return 0;
}

json_t *xt_srv_scenario_json(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  json_t *j = xt_scenario_json(&s->scn);
  pthread_mutex_unlock(&s->st_mu);
  return j;
}
