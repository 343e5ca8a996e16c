/* The contrast agent on the server (srv_contrast.h; docs/contrast.md). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_clock.h"
#include "srv_contrast.h"
#include "srv_session.h"
#include "xt_gmm.h"
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_server.h"

/* A catheter's lumen [U]: the injector fills it at once (no arrival time, an exponential transit of
 * 0.1 s) and a flow of 1 mL/s below any injection's rate holds it at the agent's own concentration
 * while the injector runs (the cap); it empties about 0.1 s after the injection ends, as if the
 * saline behind the bolus flushed it. */
static xt_bolus lumen_bolus(void) { return (xt_bolus){1.0, 0.0, 0.0, 0.1}; }

int xt_srv_contrast_register(xt_server *s, xt_msg *msg) {
  pthread_mutex_lock(&s->st_mu);
  int rc = 0;
  if (!s->contrast && !(s->contrast = calloc(1, sizeof *s->contrast)))
    rc = xt_fail(msg, XT_ENOMEM, "contrast: out of memory");
  xt_srv_contrast *c = s->contrast;
  if (c && !c->next_id) c->next_id = 1;
  for (int i = 0; i < s->nmodels && !rc; i++) {
    const xt_model *m = s->models[i];
    const xt_volume *v = m && m->kind == XT_MODEL_LABELS ? xt_model_volume(m) : NULL;
    const xt_instr *I = m ? xt_model_instr(m) : NULL; /* an instrument's lumen (xt_instr_lumen_region) */
    const xt_gmm *G = m && m->kind == XT_MODEL_GMM ? xt_model_gmm(m) : NULL; /* a mixture's labels */
    const xt_material_table *t = v ? v->materials : I ? &I->dev.mt : NULL;
    if (!t && !G) continue;
    int known = 0;
    for (int k = 0; k < c->nregions; k++) known |= c->region[k].m == m;
    if (known) continue;
    for (int l = 0; l < (t ? t->count : 256) && l < 256 && !rc; l++) {
      if (!(t ? t->contrast[l] : G->contrast[l])) continue;
      if (c->nregions == XT_SRV_MAX_REGIONS) {
        rc = xt_fail(msg, XT_ETOOLARGE, "contrast: model %s: at most %d regions", m->name, XT_SRV_MAX_REGIONS);
        break;
      }
      xt_srv_region *r = &c->region[c->nregions];
      const char *thorax = i == s->phantom_index ? xt_phantom_thorax_region(l) : NULL;
      if (thorax) snprintf(r->name, sizeof r->name, "%s", thorax);
      else if (I) snprintf(r->name, sizeof r->name, "%.40s:lumen", m->name);
      else snprintf(r->name, sizeof r->name, "%.40s:%d", m->name, l);
      r->m = m;
      r->label = l;
      r->b = I ? lumen_bolus() : xt_bolus_default(r->name);
      c->nregions++;
    }
  }
  pthread_mutex_unlock(&s->st_mu);
  return rc;
}

static int find_region(const xt_srv_contrast *c, const char *name) {
  for (int k = 0; c && k < c->nregions; k++)
    if (!strcmp(c->region[k].name, name)) return k;
  return -1;
}

/* An injection has done all it will when its transit is over: H(t - t_a - T) within 1e-12 of 1. */
static int finished(const xt_injection *in, const xt_bolus *b, int64_t now) {
  const double t = (double)(now - in->t0_ns) * 1e-9 - b->arrival_s - xt_injection_duration_s(in);
  return t > 0.0 && 1.0 - xt_gv_cdf(t, b->alpha, b->beta_s) < 1e-12;
}

/* Field `key` of the body into *v when present (*given): -1 when present but no finite number. */
static int num(const json_t *body, const char *key, double *v, int *given) {
  const json_t *x = json_object_get(body, key);
  *given = x != NULL;
  if (!x) return 0;
  if (!json_is_number(x)) return -1;
  *v = json_number_value(x);
  return isfinite(*v) ? 0 : -1;
}

int xt_srv_contrast_inject(xt_server *s, const json_t *body, json_t **out, xt_msg *msg) {
  *out = NULL;
  static const char *const keys[] = {"region", "rate_ml_s", "volume_ml", "duration_s", "delay_s", "agent_mg_ml"};
  if (!json_is_object(body)) return xt_fail(msg, XT_EINVAL, "inject: the body must be a JSON object");
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)body, key, val) {
    int ok = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) ok |= !strcmp(key, keys[k]);
    if (!ok) return xt_fail(msg, XT_EINVAL, "inject: unknown field \"%.40s\"", key);
  }
  const char *region = json_string_value(json_object_get(body, "region"));
  if (!region) return xt_fail(msg, XT_EINVAL, "inject: \"region\" (a string) is required");
  double rate = 0, vol = 0, dur = 0, delay = 0, agent = XT_CONTRAST_AGENT_MG_ML;
  int has_r, has_v, has_d, has_delay, has_a;
  if (num(body, "rate_ml_s", &rate, &has_r)) return xt_fail(msg, XT_EINVAL, "inject: rate_ml_s is not a number");
  if (num(body, "volume_ml", &vol, &has_v)) return xt_fail(msg, XT_EINVAL, "inject: volume_ml is not a number");
  if (num(body, "duration_s", &dur, &has_d)) return xt_fail(msg, XT_EINVAL, "inject: duration_s is not a number");
  if (num(body, "delay_s", &delay, &has_delay)) return xt_fail(msg, XT_EINVAL, "inject: delay_s is not a number");
  if (num(body, "agent_mg_ml", &agent, &has_a)) return xt_fail(msg, XT_EINVAL, "inject: agent_mg_ml is not a number");
  if (has_r + has_v + has_d < 2)
    return xt_fail(msg, XT_EINVAL, "inject: two of rate_ml_s, volume_ml and duration_s are required");
  if ((has_r && !(rate > 0)) || (has_v && !(vol > 0)) || (has_d && !(dur > 0)))
    return xt_fail(msg, XT_ERANGE, "inject: rate_ml_s, volume_ml and duration_s must be > 0");
  if (!has_r) rate = vol / dur;
  else if (!has_v) vol = rate * dur;
  else if (has_d && fabs(rate * dur - vol) > 1e-6 * vol)
    return xt_fail(msg, XT_EINVAL, "inject: rate_ml_s x duration_s = %g mL is not volume_ml %g", rate * dur, vol);
  const xt_srv_config *cfg = &s->cfg;
  if (rate > cfg->contrast_max_rate)
    return xt_fail(msg, XT_ERANGE, "inject: rate %g mL/s over the operator's limit %g mL/s (--contrast-max-rate)", rate,
                   cfg->contrast_max_rate);
  if (vol > cfg->contrast_max_volume)
    return xt_fail(msg, XT_ERANGE, "inject: volume %g mL over the operator's limit %g mL (--contrast-max-volume)", vol,
                   cfg->contrast_max_volume);
  if (vol / rate > 600.0) return xt_fail(msg, XT_ERANGE, "inject: duration %g s over 600 s", vol / rate);
  if (!(delay >= 0.0 && delay <= 60.0)) return xt_fail(msg, XT_ERANGE, "inject: delay_s %g outside [0, 60]", delay);
  if (!(agent >= 50.0 && agent <= 400.0))
    return xt_fail(msg, XT_ERANGE, "inject: agent_mg_ml %g outside [50, 400]", agent);

  pthread_mutex_lock(&s->st_mu);
  xt_srv_contrast *c = s->contrast;
  const int r = find_region(c, region);
  if (r < 0) {
    pthread_mutex_unlock(&s->st_mu);
    return xt_fail(msg, XT_ENOTFOUND, "inject: no contrast region \"%.60s\" (GET /v1/contrast lists them)", region);
  }
  const int64_t now = (int64_t)xt_dev_now_ns();
  int n = 0; /* injections whose bolus has passed make room */
  for (int k = 0; k < c->ninj; k++) {
    if (finished(&c->inj[k], &c->region[c->inj[k].region].b, now)) continue;
    c->inj[n] = c->inj[k];
    c->inj_id[n] = c->inj_id[k];
    c->inj_accepted_ns[n] = c->inj_accepted_ns[k];
    n++;
  }
  c->ninj = n;
  if (n == XT_SRV_MAX_INJECTIONS) {
    pthread_mutex_unlock(&s->st_mu);
    return xt_fail(msg, XT_EBUSY, "inject: %d injections still act (DELETE /v1/contrast?reset=1 clears them)", n);
  }
  xt_injection *in = &c->inj[n];
  in->region = r;
  in->rate_ml_s = rate;
  in->volume_ml = vol;
  in->agent_mg_ml = agent;
  in->t0_ns = now + (int64_t)llround(delay * 1e9);
  in->stop_ns = INT64_MAX;
  c->inj_id[n] = c->next_id++;
  c->inj_accepted_ns[n] = now;
  c->ninj++;
  c->seq++;
  xt_session_contrast_locked(s, "inject", body); /* under st_mu: before any frame latches this seq */
  *out = json_pack("{s:I,s:I,s:s,s:f,s:f,s:f,s:f,s:I,s:I}", "id", (json_int_t)c->inj_id[n], "seq", (json_int_t)c->seq,
                   "region", c->region[r].name, "rate_ml_s", rate, "volume_ml", vol, "duration_s", vol / rate,
                   "agent_mg_ml", agent, "t_ns", (json_int_t)now, "t_start_ns", (json_int_t)in->t0_ns);
  pthread_mutex_unlock(&s->st_mu);
  return *out ? 0 : xt_fail(msg, XT_ENOMEM, "inject: out of memory");
}

json_t *xt_srv_contrast_stop(xt_server *s, int reset) {
  pthread_mutex_lock(&s->st_mu);
  xt_srv_contrast *c = s->contrast;
  const int64_t now = (int64_t)xt_dev_now_ns();
  int stopped = 0;
  if (c) {
    for (int k = 0; k < c->ninj && !reset; k++) {
      xt_injection *in = &c->inj[k];
      if (in->stop_ns != INT64_MAX || (double)(now - in->t0_ns) * 1e-9 >= in->volume_ml / in->rate_ml_s) continue;
      in->stop_ns = now;
      stopped++;
    }
    if (reset) {
      stopped = c->ninj;
      c->ninj = 0;
    }
    c->seq++;
    xt_session_contrast_locked(s, reset ? "reset" : "stop", NULL);
  }
  json_t *j = json_pack("{s:s,s:i,s:I,s:I}", "done", reset ? "reset" : "stopped", "injections", stopped, "seq",
                        (json_int_t)(c ? c->seq : 0), "t_ns", (json_int_t)now);
  pthread_mutex_unlock(&s->st_mu);
  return j;
}

/* Caller holds st_mu: region r's iodine (mg I/mL) at t_ns, capped at the strongest agent injected. */
static double region_conc_locked(const xt_srv_contrast *c, int r, int64_t t_ns) {
  return xt_region_conc(c->inj, c->ninj, r, &c->region[r].b, t_ns);
}

json_t *xt_srv_contrast_json(xt_server *s, int64_t t_ns) {
  pthread_mutex_lock(&s->st_mu);
  const xt_srv_contrast *c = s->contrast;
  const int64_t now = (int64_t)xt_dev_now_ns();
  if (t_ns < 0) t_ns = now;
  json_t *regions = json_array(), *inj = json_array();
  for (int k = 0; c && k < c->nregions; k++) {
    const xt_srv_region *r = &c->region[k];
    json_array_append_new(regions, json_pack("{s:s,s:s,s:i,s:f,s:f,s:f,s:f,s:f}", "name", r->name, "model", r->m->name,
                                             "label", r->label, "flow_ml_s", r->b.flow_ml_s, "arrival_s",
                                             r->b.arrival_s, "alpha", r->b.alpha, "beta_s", r->b.beta_s,
                                             "iodine_mg_ml", region_conc_locked(c, k, t_ns)));
  }
  for (int k = 0; c && k < c->ninj; k++) {
    const xt_injection *in = &c->inj[k];
    json_t *o = json_pack("{s:I,s:s,s:f,s:f,s:f,s:f,s:I,s:I}", "id", (json_int_t)c->inj_id[k], "region",
                          c->region[in->region].name, "rate_ml_s", in->rate_ml_s, "volume_ml", in->volume_ml,
                          "duration_s", xt_injection_duration_s(in), "agent_mg_ml", in->agent_mg_ml, "t_accepted_ns",
                          (json_int_t)c->inj_accepted_ns[k], "t_start_ns", (json_int_t)in->t0_ns);
    if (o && in->stop_ns != INT64_MAX) json_object_set_new(o, "t_stop_ns", json_integer((json_int_t)in->stop_ns));
    json_array_append_new(inj, o);
  }
  json_t *j = json_pack("{s:I,s:I,s:I,s:o,s:o,s:{s:f,s:f,s:f,s:f}}", "seq", (json_int_t)(c ? c->seq : 0), "t_ns",
                        (json_int_t)t_ns, "now_ns", (json_int_t)now, "regions", regions, "injections", inj, "limits",
                        "max_rate_ml_s", s->cfg.contrast_max_rate, "max_volume_ml", s->cfg.contrast_max_volume,
                        "max_delay_s", 60.0, "max_duration_s", 600.0);
  pthread_mutex_unlock(&s->st_mu);
  return j;
}

void xt_srv_contrast_latch_locked(xt_server *s, xt_job *j, uint64_t t_exposure_ns) {
  const xt_srv_contrast *c = s->contrast;
  j->niodine = 0;
  j->contrast_seq = c ? c->seq : 0;
  j->iodine_max = 0.f;
  for (int k = 0; c && k < c->nregions; k++) {
    const double mg = region_conc_locked(c, k, (int64_t)t_exposure_ns);
    j->iodine[j->niodine++] = (xt_acq_iodine){c->region[k].m, c->region[k].label, mg * 1e-3}; /* mg/mL -> g/cm^3 */
    if (mg > j->iodine_max) j->iodine_max = (float)mg;
  }
}
