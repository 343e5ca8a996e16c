/* The session log (srv_session.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "srv_clock.h"
#include "srv_config.h"
#include "srv_contrast.h"
#include "srv_engine.h"
#include "srv_session.h"
#include "xt_server.h"
#include "xt_session.h"

/* Stamps and writes one line; the log is given up (and says so once) when a write fails, so a
 * full disk never stops the device. */
static void put_line(xt_server *s, json_t *line) {
  if (!line) return;
  pthread_mutex_lock(&s->log_mu);
  if (s->log) {
    json_object_set_new(line, "t_ns", json_integer((json_int_t)xt_now_ns()));
    if (json_dumpf(line, s->log, JSON_COMPACT | JSON_REAL_PRECISION(17)) || fputc('\n', s->log) == EOF ||
        fflush(s->log)) {
      fprintf(stderr, "xtwin-server: session log %s: %s; no further lines are written\n", s->cfg.session_log,
              strerror(errno));
      fclose(s->log);
      s->log = NULL;
    }
  }
  pthread_mutex_unlock(&s->log_mu);
  json_decref(line);
}

static void merge(json_t *into, json_t *more) {
  if (into && more) json_object_update(into, more);
  json_decref(more);
}

int xt_session_open(xt_server *s, xt_msg *msg) {
  if (!s->cfg.session_log[0]) return 0;
  if (!(s->log = fopen(s->cfg.session_log, "w")))
    return xt_fail(msg, XT_EIO, "session_log %s: %s", s->cfg.session_log, strerror(errno));
  /* the projector's threads as the workers get them (0: every core, which the replay may not have) */
  int threads = xt_engine_proj_threads(s);
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  json_t *models = json_array();
  for (int i = 0; i < s->nmodels; i++) {
    json_t *m = json_pack("{s:s,s:s}", "name", s->models[i]->name, "source", s->model_src[i]);
    if (i == s->phantom_index && s->phantom_wire >= 0) /* the thorax (issue 26) */
      merge(m, json_pack("{s:s,s:f}", "phantom", "thorax", "spacing", XT_SRV_THORAX_VOXEL_MM));
    else if (i == s->phantom_wire)
      merge(m, json_pack("{s:s,s:i}", "phantom", "thorax-guidewire", "max_points", XT_SRV_THORAX_WIRE_POINTS));
    else if (i == s->phantom_index)
      merge(m, json_pack("{s:s,s:i,s:f,s:s}", "phantom", "head", "dim", s->cfg.phantom_dim, "spacing",
                         s->cfg.phantom_spacing, "voxel", "f32"));
    else if (i < s->cfg.nmodels)
      merge(m, json_pack("{s:s,s:s}", "path", s->cfg.models[i].path, "convert", s->cfg.models[i].convert));
    json_array_append_new(models, m);
  }
  json_t *line = json_pack("{s:s,s:i,s:s,s:i,s:s,s:i,s:b,s:o,s:o}", "type", "session", "version",
                           XT_SESSION_LOG_VERSION, "server", "xtwin-server " XT_SERVER_VERSION, "stream_header_version",
                           XT_STREAM_VERSION, "backend", xt_backend_name(s->backend), "threads", threads, "synthetic",
                           s->cfg.synthetic, "config", xt_srv_config_json(&s->cfg), "models", models);
  put_line(s, line);
  return 0;
}

void xt_session_close(xt_server *s) {
  pthread_mutex_lock(&s->log_mu);
  if (s->log) fclose(s->log);
  s->log = NULL;
  pthread_mutex_unlock(&s->log_mu);
}

void xt_session_command(xt_server *s, const char *name, const char *via, const json_t *body, int rc,
                        const char *message) {
  if (!s->log) return; /* read without the lock: set once before any thread starts */
  json_t *line = json_pack("{s:s,s:s,s:s,s:O*,s:s}", "type", "command", "command", name, "via", via, "body", body,
                           "result", rc ? xt_errname(rc) : "ok");
  if (line && rc && message) json_object_set_new(line, "message", json_string(message));
  put_line(s, line);
}

void xt_session_event(xt_server *s, json_t *event) {
  if (!s->log || !event) {
    json_decref(event);
    return;
  }
  json_object_set_new(event, "type", json_string("event"));
  put_line(s, event);
}

void xt_session_frame(xt_server *s, const xt_acq_request *q, int lockstep, uint32_t contrast_seq) {
  if (!s->log) return;
  json_t *line = xt_session_frame_json(q, lockstep);
  /* the contrast state the exposure latched (a line of that seq precedes it); absent: none */
  if (line && contrast_seq) json_object_set_new(line, "contrast_seq", json_integer((json_int_t)contrast_seq));
  put_line(s, line);
}

void xt_session_contrast_locked(xt_server *s, const char *action, const json_t *body) {
  const xt_srv_contrast *c = s->contrast;
  if (!s->log || !c) return;
  json_t *regions = json_array(), *inj = json_array();
  for (int k = 0; k < c->nregions; k++) {
    const xt_srv_region *r = &c->region[k];
    json_array_append_new(regions, json_pack("{s:s,s:s,s:i,s:f,s:f,s:f,s:f}", "name", r->name, "model", r->m->name,
                                             "label", r->label, "flow_ml_s", r->b.flow_ml_s, "arrival_s",
                                             r->b.arrival_s, "alpha", r->b.alpha, "beta_s", r->b.beta_s));
  }
  for (int k = 0; k < c->ninj; k++) {
    const xt_injection *in = &c->inj[k];
    json_t *o = json_pack("{s:I,s:s,s:f,s:f,s:f,s:I,s:I}", "id", (json_int_t)c->inj_id[k], "region",
                          c->region[in->region].name, "rate_ml_s", in->rate_ml_s, "volume_ml", in->volume_ml,
                          "agent_mg_ml", in->agent_mg_ml, "t_accepted_ns", (json_int_t)c->inj_accepted_ns[k],
                          "t_start_ns", (json_int_t)in->t0_ns);
    if (o && in->stop_ns != INT64_MAX) json_object_set_new(o, "t_stop_ns", json_integer((json_int_t)in->stop_ns));
    json_array_append_new(inj, o);
  }
  put_line(s, json_pack("{s:s,s:s,s:I,s:O*,s:o,s:o}", "type", "contrast", "action", action, "seq", (json_int_t)c->seq,
                        "body", body, "regions", regions, "injections", inj));
}

void xt_session_model(xt_server *s, const char *path, const char *name, const char *convert) {
  if (!s->log) return;
  put_line(s, json_pack("{s:s,s:s,s:s?,s:s?}", "type", "model", "path", path, "name", name, "convert", convert));
}
