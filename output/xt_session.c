/* The session log's frame lines (xt_session.h). */
#include "xt_session.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_json_build.h"
#include "xt_stream.h"

static json_t *u64(uint64_t v) { return json_integer((json_int_t)v); }

json_t *xt_session_frame_json(const xt_acq_request *q, int lockstep) {
  xt_jb b = {0};
  json_t *o = json_object();
  xt_jb_put(&b, o, "type", json_string("frame"));
  xt_jb_put(&b, o, "run", u64(q->run));
  xt_jb_put(&b, o, "counter", u64(q->counter));
  xt_jb_put(&b, o, "lockstep", json_boolean(lockstep));
  const xt_pose *p = &q->pose;
  const double pose[8] = {p->primary_deg, p->secondary_deg, p->detector_rot_deg, p->sod_mm,
                          p->sid_mm,      p->table_mm.x,    p->table_mm.y,       p->table_mm.z};
  xt_jb_put(&b, o, "pose", xt_jb_vec(&b, pose, 8));
  xt_jb_put(&b, o, "mode", json_string(q->mode ? q->mode->name : ""));
  xt_jb_put(&b, o, "pixel_format", json_integer(q->pixel_format));
  xt_jb_put(&b, o, "chain", json_boolean(q->chain));
  json_t *prm = json_object();
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    if (in->type == XT_PARAM_U64) {
      uint64_t v;
      memcpy(&v, (const char *)&q->chain_prm + in->offset, sizeof v);
      char t[24];
      snprintf(t, sizeof t, "%" PRIu64, v);
      xt_jb_put(&b, prm, in->name, json_string(t));
    } else xt_jb_put(&b, prm, in->name, json_real(xt_chain_param_get(&q->chain_prm, in)));
  }
  xt_jb_put(&b, o, "params", prm);
  xt_jb_put(&b, o, "pose_seq", u64(q->pose_seq));
  xt_jb_put(&b, o, "t_pose_ns", u64(q->t_pose_ns));
  xt_jb_put(&b, o, "t_sched_ns", u64(q->t_sched_ns));
  xt_jb_put(&b, o, "t_exposure_ns", u64(q->t_exposure_ns));
  xt_jb_put(&b, o, "period_ns", u64(q->period_ns));
  /* the plane and its pulse schedule (biplane); a log of a single plane has plane 0 throughout */
  xt_jb_put(&b, o, "plane", json_integer(q->plane));
  xt_jb_put(&b, o, "timing", json_integer(q->timing));
  xt_jb_put(&b, o, "cycle", u64(q->cycle));
  xt_jb_put(&b, o, "t_cycle_ns", u64(q->t_cycle_ns));
  /* motion (issue 26): the time and phases the models were moved to, and each model's map of the
   * patient frame, row-major 3 x 4, for every sample across the pulse (sample-major; one without
   * blur: the pulse's centre) */
  if (q->motion.on) {
    const xt_acq_motion *m = &q->motion;
    json_t *mo = json_object(), *tr = json_array();
    xt_jb_put(&b, mo, "t_s", json_real(m->t_s));
    xt_jb_put(&b, mo, "cardiac_phase", json_real(m->cardiac_phase));
    xt_jb_put(&b, mo, "resp_phase", json_real(m->resp_phase));
    xt_jb_put(&b, mo, "cardiac_scale", json_real(m->cardiac_scale));
    xt_jb_put(&b, mo, "resp_mm", json_real(m->resp_mm));
    xt_jb_put(&b, mo, "blur_samples", json_integer(m->blur_samples));
    xt_jb_put(&b, mo, "xform_version", u64(m->xform_version));
    const int nx = q->nxforms * (q->blur_samples > 1 ? q->blur_samples : 1);
    for (int i = 0; i < nx; i++) {
      const xt_affine *T = &q->xforms[i].T;
      const double v[12] = {T->m[0][0], T->m[0][1], T->m[0][2], T->t[0], T->m[1][0], T->m[1][1],
                            T->m[1][2], T->t[1],    T->m[2][0], T->m[2][1], T->m[2][2], T->t[2]};
      json_t *x = json_object();
      xt_jb_put(&b, x, "model", json_string(q->xforms[i].model->name));
      xt_jb_put(&b, x, "T", xt_jb_vec(&b, v, 12));
      json_array_append_new(tr, x);
    }
    xt_jb_put(&b, mo, "transforms", tr);
    xt_jb_put(&b, o, "motion", mo);
  }
  if (b.bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static int get_u64(const json_t *o, const char *key, uint64_t *out, xt_msg *msg);

static int get_num(const json_t *o, const char *key, double *out, xt_msg *msg) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_number(v) || !isfinite(json_number_value(v)))
    return xt_fail(msg, XT_EFORMAT, "frame.motion.%s: a number expected", key);
  *out = json_number_value(v);
  return 0;
}

int xt_session_frame_motion(const json_t *o, const xt_model *const *models, int nmodels, xt_acq_xform *out, int cap,
                            xt_acq_request *q, xt_msg *msg) {
  const json_t *mo = json_object_get(o, "motion");
  q->xforms = NULL;
  q->nxforms = 0;
  q->blur_samples = 0;
  memset(&q->motion, 0, sizeof q->motion);
  if (!mo) return 0;
  xt_acq_motion *m = &q->motion;
  int rc;
  double blur = 0;
  if ((rc = get_num(mo, "t_s", &m->t_s, msg)) || (rc = get_num(mo, "cardiac_phase", &m->cardiac_phase, msg)) ||
      (rc = get_num(mo, "resp_phase", &m->resp_phase, msg)) ||
      (rc = get_num(mo, "cardiac_scale", &m->cardiac_scale, msg)) || (rc = get_num(mo, "resp_mm", &m->resp_mm, msg)) ||
      (rc = get_num(mo, "blur_samples", &blur, msg)) || (rc = get_u64(mo, "xform_version", &m->xform_version, msg)))
    return rc;
  if (!(blur >= 1 && blur <= 64 && blur == floor(blur)))
    return xt_fail(msg, XT_EFORMAT, "frame.motion.blur_samples: 1..64 expected");
  m->on = 1;
  m->blur_samples = (int)blur;
  const json_t *tr = json_object_get(mo, "transforms");
  if (!json_is_array(tr)) return xt_fail(msg, XT_EFORMAT, "frame.motion.transforms: an array expected");
  const size_t n = json_array_size(tr);
  if (n % (size_t)m->blur_samples || n > (size_t)cap)
    return xt_fail(msg, XT_EFORMAT, "frame.motion.transforms: %zu entries for %d samples (at most %d)", n,
                   m->blur_samples, cap);
  for (size_t i = 0; i < n; i++) {
    const json_t *x = json_array_get(tr, i), *T = json_object_get(x, "T");
    const char *name = json_string_value(json_object_get(x, "model"));
    int k = 0;
    while (name && k < nmodels && strcmp(models[k]->name, name)) k++;
    if (!name || k == nmodels)
      return xt_fail(msg, XT_EFORMAT, "frame.motion.transforms[%zu]: no model '%s'", i, name ? name : "");
    if (!json_is_array(T) || json_array_size(T) != 12)
      return xt_fail(msg, XT_EFORMAT, "frame.motion.transforms[%zu].T: 12 numbers expected", i);
    double v[12];
    for (int e = 0; e < 12; e++) {
      const json_t *y = json_array_get(T, (size_t)e);
      if (!json_is_number(y)) return xt_fail(msg, XT_EFORMAT, "frame.motion.transforms[%zu].T[%d]: a number expected", i, e);
      v[e] = json_number_value(y);
    }
    out[i].model = models[k];
    for (int r = 0; r < 3; r++) {
      for (int c = 0; c < 3; c++) out[i].T.m[r][c] = v[4 * r + c];
      out[i].T.t[r] = v[4 * r + 3];
    }
  }
  q->xforms = out;
  q->nxforms = (int)(n / (size_t)m->blur_samples);
  q->blur_samples = m->blur_samples;
  return 0;
}

static int get_u64(const json_t *o, const char *key, uint64_t *out, xt_msg *msg) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return xt_fail(msg, XT_EFORMAT, "frame.%s: a whole number >= 0 expected", key);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int xt_session_frame_parse(const json_t *o, xt_acq_request *q, int *lockstep, xt_msg *msg) {
  int rc;
  memset(q, 0, sizeof *q);
  if (!json_is_object(o)) return xt_fail(msg, XT_EFORMAT, "frame: not an object");
  if ((rc = get_u64(o, "run", &q->run, msg)) || (rc = get_u64(o, "counter", &q->counter, msg)) ||
      (rc = get_u64(o, "pose_seq", &q->pose_seq, msg)) || (rc = get_u64(o, "t_pose_ns", &q->t_pose_ns, msg)) ||
      (rc = get_u64(o, "t_sched_ns", &q->t_sched_ns, msg)) ||
      (rc = get_u64(o, "t_exposure_ns", &q->t_exposure_ns, msg)) || (rc = get_u64(o, "period_ns", &q->period_ns, msg)))
    return rc;
  /* logs written before biplane have no plane: plane A, no cycle */
  if (json_object_get(o, "plane")) {
    uint64_t pl = 0, tm = 0;
    if ((rc = get_u64(o, "plane", &pl, msg)) || (rc = get_u64(o, "timing", &tm, msg)) ||
        (rc = get_u64(o, "cycle", &q->cycle, msg)) || (rc = get_u64(o, "t_cycle_ns", &q->t_cycle_ns, msg)))
      return rc;
    if (pl > 1) return xt_fail(msg, XT_EFORMAT, "frame.plane: 0 (A) or 1 (B) expected");
    if (tm > XT_STREAM_TIMING_SIMULTANEOUS) return xt_fail(msg, XT_EFORMAT, "frame.timing: 0, 1 or 2 expected");
    q->plane = (int)pl;
    q->timing = (int)tm;
  }
  const json_t *pose = json_object_get(o, "pose");
  double v[8];
  if (!json_is_array(pose) || json_array_size(pose) != 8)
    return xt_fail(msg, XT_EFORMAT, "frame.pose: an array of 8 numbers expected");
  for (int i = 0; i < 8; i++) {
    const json_t *x = json_array_get(pose, (size_t)i);
    if (!json_is_number(x)) return xt_fail(msg, XT_EFORMAT, "frame.pose[%d]: a number expected", i);
    v[i] = json_number_value(x);
  }
  q->pose = (xt_pose){v[0], v[1], v[2], v[3], v[4], xt_v3(v[5], v[6], v[7])};
  const char *mode = json_string_value(json_object_get(o, "mode"));
  if (!mode || !(q->mode = xt_mode_find(mode)))
    return xt_fail(msg, XT_EFORMAT, "frame.mode: '%s' is not a detector mode", mode ? mode : "");
  const json_t *pf = json_object_get(o, "pixel_format"), *ch = json_object_get(o, "chain"),
               *ls = json_object_get(o, "lockstep");
  if (!json_is_integer(pf)) return xt_fail(msg, XT_EFORMAT, "frame.pixel_format: a number expected");
  if (!json_is_boolean(ch) || !json_is_boolean(ls))
    return xt_fail(msg, XT_EFORMAT, "frame.chain, frame.lockstep: true or false expected");
  q->pixel_format = (int)json_integer_value(pf);
  q->chain = json_is_true(ch);
  *lockstep = json_is_true(ls);
  const json_t *prm = json_object_get(o, "params");
  if (!json_is_object(prm)) return xt_fail(msg, XT_EFORMAT, "frame.params: an object expected");
  q->chain_prm = xt_chain_params_default();
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    const json_t *x = json_object_get(prm, in->name);
    if (in->type == XT_PARAM_U64) {
      const char *s = json_string_value(x);
      char *end = NULL;
      errno = 0;
      uint64_t u = s ? strtoull(s, &end, 10) : 0;
      if (!s || !*s || *end || errno)
        return xt_fail(msg, XT_EFORMAT, "frame.params.%s: a decimal string expected", in->name);
      memcpy((char *)&q->chain_prm + in->offset, &u, sizeof u);
    } else {
      if (!json_is_number(x)) return xt_fail(msg, XT_EFORMAT, "frame.params.%s: a number expected", in->name);
      if ((rc = xt_chain_param_set(&q->chain_prm, in->name, json_number_value(x), msg))) return rc;
    }
  }
  return 0;
}
