/* Motion on the server (srv_motion.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "srv_clock.h"
#include "srv_engine.h"
#include "srv_motion.h"
#include "xt_instr.h"
#include "xt_server.h"

_Static_assert(XT_SRV_MAX_MODELS <= 31, "the models' masks hold one bit per model and XT_SRV_MOTION_LISTED");

void xt_srv_motion_init(xt_srv_motion *m) {
  memset(m, 0, sizeof *m);
  xt_motion_defaults(&m->mo);
  m->blur_samples = 1;
}

/* An optional [x, y, z] of numbers into v (left as it is when absent). */
static int vec3(const json_t *o, const char *key, const char *what, double v[3], xt_msg *msg) {
  const json_t *a = json_object_get(o, key);
  if (!a) return 0;
  if (!json_is_array(a) || json_array_size(a) != 3)
    return xt_fail(msg, XT_EINVAL, "%s.%s: an array of 3 numbers expected", what, key);
  for (int i = 0; i < 3; i++) {
    const json_t *x = json_array_get(a, (size_t)i);
    if (!json_is_number(x) || !isfinite(json_number_value(x)))
      return xt_fail(msg, XT_EINVAL, "%s.%s[%d]: a finite number expected", what, key, i);
    v[i] = json_number_value(x);
  }
  return 0;
}

static int number(const json_t *o, const char *key, const char *what, double *v, xt_msg *msg) {
  const json_t *x = json_object_get(o, key);
  if (!x) return 0;
  if (!json_is_number(x) || !isfinite(json_number_value(x)))
    return xt_fail(msg, XT_EINVAL, "%s.%s: a finite number expected", what, key);
  *v = json_number_value(x);
  return 0;
}

/* Only the keys named (a client's typo is an error, not a silent default). */
static int keys_only(const json_t *o, const char *what, const char *const *keys, xt_msg *msg) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    int ok = 0;
    for (int i = 0; keys[i]; i++) ok |= strcmp(k, keys[i]) == 0;
    if (!ok) return xt_fail(msg, XT_EINVAL, "%s: unknown key \"%s\"", what, k);
  }
  return 0;
}

static int model_index(xt_server *s, const char *name) {
  int idx = -1;
  pthread_mutex_lock(&s->models_mu);
  for (int i = 0; i < s->nmodels && idx < 0; i++)
    if (strcmp(s->models[i]->name, name) == 0) idx = i;
  pthread_mutex_unlock(&s->models_mu);
  return idx;
}

int xt_srv_motion_transform_put(xt_server *s, const char *name, const json_t *body, uint64_t *version,
                                uint64_t *t_ns, xt_msg *msg) {
  const int i = model_index(s, name);
  if (i < 0) return xt_fail(msg, XT_ENOTFOUND, "model '%s': no such model (GET /v1/models)", name);
  static const char *const keys[] = {"rotation_deg", "centre_mm", "translation_mm", NULL};
  if (!json_is_object(body)) return xt_fail(msg, XT_EINVAL, "transform: a JSON object expected");
  xt_rigid r;
  memset(&r, 0, sizeof r);
  int rc;
  if ((rc = keys_only(body, "transform", keys, msg)) || (rc = vec3(body, "rotation_deg", "transform", r.rot_deg, msg)) ||
      (rc = vec3(body, "centre_mm", "transform", r.centre_mm, msg)) ||
      (rc = vec3(body, "translation_mm", "transform", r.trans_mm, msg)) || (rc = xt_rigid_check(&r, msg)))
    return rc;
  pthread_mutex_lock(&s->st_mu);
  s->motion.user[i] = r;
  s->motion.user_models |= 1u << i;
  *version = ++s->motion.xform_version;
  *t_ns = xt_dev_now_ns(); /* under st_mu: an exposure latched later has it */
  xt_engine_kick(s);
  pthread_mutex_unlock(&s->st_mu);
  return 0;
}

/* "models": [names] into a mask of s->models. */
static int models_mask(xt_server *s, const json_t *o, const char *what, uint32_t *mask, xt_msg *msg) {
  const json_t *a = json_object_get(o, "models");
  if (!a) return 0;
  if (!json_is_array(a)) return xt_fail(msg, XT_EINVAL, "%s.models: an array of model names expected", what);
  uint32_t m = XT_SRV_MOTION_LISTED; /* [] moves none */
  for (size_t k = 0; k < json_array_size(a); k++) {
    const char *n = json_string_value(json_array_get(a, k));
    if (!n) return xt_fail(msg, XT_EINVAL, "%s.models[%zu]: a model name expected", what, k);
    const int i = model_index(s, n);
    if (i < 0) return xt_fail(msg, XT_ENOTFOUND, "%s.models: no model '%s' (GET /v1/models)", what, n);
    m |= 1u << i;
  }
  *mask = m;
  return 0;
}

static int on_flag(const json_t *o, const char *what, int *on, xt_msg *msg) {
  const json_t *x = json_object_get(o, "on");
  if (!x) return 0;
  if (!json_is_boolean(x)) return xt_fail(msg, XT_EINVAL, "%s.on: true or false expected", what);
  *on = json_is_true(x);
  return 0;
}

int xt_srv_motion_put(xt_server *s, const json_t *body, xt_msg *msg) {
  static const char *const top[] = {"cardiac", "respiratory", "blur_samples", NULL};
  static const char *const ck[] = {"on", "bpm", "amplitude", "centre_mm", "models", NULL};
  static const char *const rk[] = {"on", "period_s", "amplitude_mm", "axis", "models", NULL};
  if (!json_is_object(body)) return xt_fail(msg, XT_EINVAL, "motion: a JSON object expected");
  int rc = keys_only(body, "motion", top, msg);
  if (rc) return rc;
  pthread_mutex_lock(&s->st_mu);
  xt_srv_motion m = s->motion;
  pthread_mutex_unlock(&s->st_mu);
  const int was_c = m.mo.cardiac.on, was_r = m.mo.resp.on;
  const json_t *c = json_object_get(body, "cardiac"), *r = json_object_get(body, "respiratory");
  if (c) {
    if (!json_is_object(c)) return xt_fail(msg, XT_EINVAL, "motion.cardiac: an object expected");
    if ((rc = keys_only(c, "motion.cardiac", ck, msg)) || (rc = on_flag(c, "motion.cardiac", &m.mo.cardiac.on, msg)) ||
        (rc = number(c, "bpm", "motion.cardiac", &m.mo.cardiac.bpm, msg)) ||
        (rc = number(c, "amplitude", "motion.cardiac", &m.mo.cardiac.amplitude, msg)) ||
        (rc = vec3(c, "centre_mm", "motion.cardiac", m.mo.cardiac.centre_mm, msg)) ||
        (rc = models_mask(s, c, "motion.cardiac", &m.cardiac_models, msg)))
      return rc;
    if (!json_object_get(c, "on")) m.mo.cardiac.on = 1; /* naming the motion turns it on */
  }
  if (r) {
    if (!json_is_object(r)) return xt_fail(msg, XT_EINVAL, "motion.respiratory: an object expected");
    if ((rc = keys_only(r, "motion.respiratory", rk, msg)) ||
        (rc = on_flag(r, "motion.respiratory", &m.mo.resp.on, msg)) ||
        (rc = number(r, "period_s", "motion.respiratory", &m.mo.resp.period_s, msg)) ||
        (rc = number(r, "amplitude_mm", "motion.respiratory", &m.mo.resp.amplitude_mm, msg)) ||
        (rc = vec3(r, "axis", "motion.respiratory", m.mo.resp.axis, msg)) ||
        (rc = models_mask(s, r, "motion.respiratory", &m.resp_models, msg)))
      return rc;
    if (!json_object_get(r, "on")) m.mo.resp.on = 1;
  }
  const json_t *b = json_object_get(body, "blur_samples");
  if (b) {
    if (!json_is_integer(b) || json_integer_value(b) < 1 || json_integer_value(b) > XT_SRV_MAX_BLUR)
      return xt_fail(msg, XT_EINVAL, "motion.blur_samples: a whole number 1..%d expected", XT_SRV_MAX_BLUR);
    m.blur_samples = (int)json_integer_value(b);
  }
  if ((rc = xt_motion_check(&m.mo, msg))) return rc;
  pthread_mutex_lock(&s->st_mu);
  /* transforms given meanwhile stay; the phases restart when a motion comes on */
  memcpy(m.user, s->motion.user, sizeof m.user);
  m.user_models = s->motion.user_models;
  m.xform_version = s->motion.xform_version;
  if ((m.mo.cardiac.on && !was_c) || (m.mo.resp.on && !was_r)) m.mo.t0_ns = xt_dev_now_ns();
  s->motion = m;
  xt_engine_kick(s);
  pthread_mutex_unlock(&s->st_mu);
  return 0;
}

static json_t *vec_json(const double v[3]) { return json_pack("[f,f,f]", v[0], v[1], v[2]); }

static json_t *names_json(xt_server *s, uint32_t mask) {
  json_t *a = json_array();
  pthread_mutex_lock(&s->models_mu);
  for (int i = 0; i < s->nmodels; i++)
    if ((mask >> i) & 1u || !(mask & XT_SRV_MOTION_LISTED)) json_array_append_new(a, json_string(s->models[i]->name));
  pthread_mutex_unlock(&s->models_mu);
  return a;
}

json_t *xt_srv_motion_json(xt_server *s) {
  pthread_mutex_lock(&s->st_mu);
  const xt_srv_motion m = s->motion;
  const uint64_t now = xt_dev_now_ns();
  pthread_mutex_unlock(&s->st_mu);
  xt_motion_state st;
  xt_motion_eval(&m.mo, now, &st);
  json_t *tr = json_array();
  pthread_mutex_lock(&s->models_mu);
  for (int i = 0; i < s->nmodels; i++)
    if ((m.user_models >> i) & 1u)
      json_array_append_new(tr, json_pack("{s:s,s:o,s:o,s:o}", "model", s->models[i]->name, "rotation_deg",
                                          vec_json(m.user[i].rot_deg), "centre_mm", vec_json(m.user[i].centre_mm),
                                          "translation_mm", vec_json(m.user[i].trans_mm)));
  pthread_mutex_unlock(&s->models_mu);
  return json_pack(
      "{s:{s:b,s:f,s:f,s:o,s:o},s:{s:b,s:f,s:f,s:o,s:o},s:i,s:I,s:{s:I,s:f,s:f,s:f,s:f,s:f},s:o,s:I}", "cardiac", "on",
      m.mo.cardiac.on, "bpm", m.mo.cardiac.bpm, "amplitude", m.mo.cardiac.amplitude, "centre_mm",
      vec_json(m.mo.cardiac.centre_mm), "models", names_json(s, m.cardiac_models), "respiratory", "on",
      m.mo.resp.on, "period_s", m.mo.resp.period_s, "amplitude_mm", m.mo.resp.amplitude_mm, "axis",
      vec_json(m.mo.resp.axis), "models", names_json(s, m.resp_models), "blur_samples", m.blur_samples, "t0_ns",
      (json_int_t)m.mo.t0_ns, "now", "t_ns", (json_int_t)now, "t_s", st.t_s, "cardiac_phase", st.cardiac_phase,
      "resp_phase", st.resp_phase, "cardiac_scale", st.cardiac_scale, "resp_mm", st.resp_mm, "transforms", tr,
      "xform_version", (json_int_t)m.xform_version);
}

void xt_srv_motion_apply(xt_server *s, xt_worker *w, xt_job *j) {
  const xt_srv_motion *m = &j->mot;
  xt_acq_request *q = &j->req;
  const int moving = m->mo.cardiac.on || m->mo.resp.on;
  /* the pulse: blur samples its width (mono frames); otherwise its centre */
  const double pulse_ns = q->chain_prm.pulse_ms > 0 ? q->chain_prm.pulse_ms * 1e6 : 0.0;
  int n = moving && !q->chain && m->blur_samples > 1 ? m->blur_samples : 1;
  int nm = 0;
  const xt_model *models[XT_SRV_WORKER_MODELS];
  int index[XT_SRV_WORKER_MODELS];
  pthread_mutex_lock(&s->models_mu);
  for (int k = 0; k < w->nbmodels; k++) {
    int i = 0;
    while (i < s->nmodels && s->models[i] != w->bmodels[k]) i++;
    if (i == s->nmodels) continue; /* a model a failed add left: not on the projector */
    models[nm] = w->bmodels[k];
    index[nm++] = i;
  }
  pthread_mutex_unlock(&s->models_mu);
  xt_motion_state st;
  for (int k = 0; k < n; k++) {
    const uint64_t t = q->t_exposure_ns + (uint64_t)llround(pulse_ns * (k + 0.5) / n);
    xt_motion_eval(&m->mo, t, &st);
    for (int i = 0; i < nm; i++) {
      const int x = index[i];
      const uint32_t bit = 1u << x;
      /* instruments follow the breathing, not the heart's scaling (their tubes are rigid) */
      const uint32_t cm = m->cardiac_models, rm = m->resp_models;
      const int beats = (cm & XT_SRV_MOTION_LISTED ? (cm & bit) != 0 : 1) && !xt_model_instr(models[i]);
      const int breathes = rm & XT_SRV_MOTION_LISTED ? (rm & bit) != 0 : 1;
      w->xf[k * nm + i].model = models[i];
      w->xf[k * nm + i].T = xt_motion_transform(&m->mo, &st, (m->user_models & bit) ? &m->user[x] : NULL, beats, breathes);
    }
  }
  q->xforms = w->xf;
  q->nxforms = nm;
  q->blur_samples = n;
  memset(&q->motion, 0, sizeof q->motion);
  if (moving || m->user_models) {
    xt_motion_eval(&m->mo, q->t_exposure_ns + (uint64_t)llround(pulse_ns * 0.5), &st);
    q->motion = (xt_acq_motion){1, st.t_s, st.cardiac_phase, st.resp_phase, st.cardiac_scale, st.resp_mm, n,
                                m->xform_version};
  }
}
