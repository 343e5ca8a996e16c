/* Instruments on the server (issue 26): shape updates, their ring, the latch and the workers' copies
 * (srv_instr.h). */
#include <stdlib.h>
#include <string.h>

#include "srv_clock.h"
#include "srv_instr.h"
#include "xt_instr.h"
#include "xt_server.h"
#ifdef XT_SERVER_HAVE_LOADERS
#include "xt_instr_json.h"
#endif

static void instr_free_one(xt_srv_instr *in) {
  if (!in) return;
  for (int k = 0; k < XT_SRV_SHAPE_RING; k++) free(in->ring[k].pts);
  xt_instr_geom_free(&in->check);
  free(in);
}

int xt_srv_instr_register(xt_server *s, xt_msg *msg) {
  for (int i = 0; i < s->nmodels; i++) {
    const xt_model *m = s->models[i];
    const xt_instr *I = m ? xt_model_instr(m) : NULL;
    if (!I) continue;
    int known = 0;
    pthread_mutex_lock(&s->st_mu);
    for (int k = 0; k < s->ninstr; k++) known |= s->instr[k]->m == m;
    const int full = s->ninstr == XT_SRV_MAX_INSTR;
    pthread_mutex_unlock(&s->st_mu);
    if (known) continue;
    if (full) return xt_fail(msg, XT_ETOOLARGE, "at most %d instruments", XT_SRV_MAX_INSTR);
    xt_srv_instr *in = calloc(1, sizeof *in);
    int rc = in ? 0 : XT_ENOMEM;
    if (!rc) {
      in->m = m;
      in->cap = I->dev.max_points;
      in->next = 1;
      rc = xt_instr_geom_alloc(&I->dev, &in->check, msg);
    }
    for (int k = 0; k < XT_SRV_SHAPE_RING && !rc; k++)
      if (!(in->ring[k].pts = malloc(sizeof(double) * 3 * (size_t)in->cap))) rc = XT_ENOMEM;
    if (rc) {
      instr_free_one(in);
      return xt_fail(msg, rc, "instrument %s: out of memory", m->name);
    }
    pthread_mutex_lock(&s->st_mu);
    s->instr[s->ninstr++] = in;
    pthread_mutex_unlock(&s->st_mu);
  }
  return 0;
}

void xt_srv_instr_free(xt_server *s) {
  for (int k = 0; k < s->ninstr; k++) instr_free_one(s->instr[k]);
  s->ninstr = 0;
  for (int w = 0; w < XT_SRV_MAX_WORKERS; w++)
    for (int k = 0; k < XT_SRV_MAX_INSTR; k++) {
      free(s->workers[w].shape_pts[k]);
      s->workers[w].shape_pts[k] = NULL;
    }
  for (int k = 0; k < XT_SRV_MAX_INSTR; k++) {
    free(s->rest.shape_pts[k]);
    s->rest.shape_pts[k] = NULL;
  }
}

static xt_srv_instr *find(xt_server *s, const char *name) {
  xt_srv_instr *in = NULL;
  pthread_mutex_lock(&s->st_mu);
  for (int k = 0; k < s->ninstr && !in; k++)
    if (!strcmp(s->instr[k]->m->name, name)) in = s->instr[k];
  pthread_mutex_unlock(&s->st_mu);
  return in;
}

int xt_srv_instr_update(xt_server *s, const char *name, const json_t *body, uint64_t *version, uint64_t *t_ns,
                        xt_msg *msg) {
#ifdef XT_SERVER_HAVE_LOADERS
  xt_srv_instr *in = find(s, name);
  if (!in) return xt_fail(msg, XT_ENOTFOUND, "no instrument called \"%.64s\" (GET /v1/instruments)", name);
  const char *k;
  json_t *v;
  if (!json_is_object(body)) return xt_fail(msg, XT_EINVAL, "shape: expected {\"points\": [[x, y, z], ...]}");
  json_object_foreach((json_t *)body, k, v) {
    /* name, type and id: the stream message's own keys */
    if (strcmp(k, "points") && strcmp(k, "name") && strcmp(k, "type") && strcmp(k, "id"))
      return xt_fail(msg, XT_EINVAL, "shape: unknown field '%.64s' (points)", k);
  }
  const xt_instr *I = xt_model_instr(in->m);
  pthread_mutex_lock(&s->shape_mu);
  const uint64_t ver = in->next;
  xt_srv_shape_slot *slot = &in->ring[ver % XT_SRV_SHAPE_RING];
  int n = 0;
  /* parsed into the slot; a failure leaves it marked empty, which no latched version names */
  slot->version = 0;
  int rc = xt_instr_points_json(json_object_get(body, "points"), slot->pts, in->cap, &n, in->m->name, msg);
  if (!rc) rc = xt_instr_geom_build(&I->dev, slot->pts, n, in->m->name, &in->check, msg);
  if (!rc) {
    slot->n = n;
    slot->version = ver;
    in->next++;
    /* published under st_mu, stamped there as poses are: an exposure latched later carries it */
    pthread_mutex_lock(&s->st_mu);
    const uint64_t t = xt_dev_now_ns();
    in->latest = ver;
    in->t_latest_ns = t;
    in->updates++;
    pthread_mutex_unlock(&s->st_mu);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.shape_updates++;
    pthread_mutex_unlock(&s->metrics.mu);
    if (version) *version = ver;
    if (t_ns) *t_ns = t;
  }
  pthread_mutex_unlock(&s->shape_mu);
  return rc;
#else
  (void)s, (void)name, (void)body, (void)version, (void)t_ns;
  return xt_fail(msg, XT_EUNSUPPORTED, "this server was built without the loaders (instrument shapes)");
#endif
}

json_t *xt_srv_instr_json(xt_server *s) {
  json_t *a = json_array();
  pthread_mutex_lock(&s->st_mu);
  for (int k = 0; k < s->ninstr; k++) {
    const xt_srv_instr *in = s->instr[k];
    const xt_instr *I = xt_model_instr(in->m);
    json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I,s:i,s:s}", "name", in->m->name, "version",
                                       (json_int_t)in->latest, "t_ns", (json_int_t)in->t_latest_ns, "updates",
                                       (json_int_t)in->updates, "max_points", in->cap, "medium",
                                       I->dev.mt.name[I->dev.medium]));
  }
  pthread_mutex_unlock(&s->st_mu);
  return a;
}

void xt_srv_instr_latch_locked(xt_server *s, xt_job *j) {
  j->nshape = s->ninstr;
  for (int k = 0; k < s->ninstr; k++) j->shape_v[k] = s->instr[k]->latest;
}

void xt_srv_instr_shapes(xt_server *s, xt_worker *w, const xt_job *j, xt_acq_shape *out, int *n) {
  *n = 0;
  for (int k = 0; k < j->nshape; k++) {
    pthread_mutex_lock(&s->st_mu);
    xt_srv_instr *in = s->instr[k];
    pthread_mutex_unlock(&s->st_mu);
    const xt_instr *I = xt_model_instr(in->m);
    if (!w->shape_pts[k]) {
      if (!(w->shape_pts[k] = malloc(sizeof(double) * 3 * (size_t)in->cap))) continue; /* renders as it was */
      w->shape_have[k] = UINT64_MAX;
    }
    uint64_t v = j->shape_v[k];
    if (w->shape_have[k] != v) {
      if (v == 0) { /* the model's own shape */
        memcpy(w->shape_pts[k], I->points, sizeof(double) * 3 * (size_t)I->npoints);
        w->shape_n[k] = I->npoints;
      } else {
        pthread_mutex_lock(&s->shape_mu);
        const xt_srv_shape_slot *slot = &in->ring[v % XT_SRV_SHAPE_RING];
        if (slot->version != v) { /* overwritten while the frame waited: the newest there is */
          pthread_mutex_lock(&s->st_mu);
          v = in->latest;
          pthread_mutex_unlock(&s->st_mu);
          slot = &in->ring[v % XT_SRV_SHAPE_RING];
          pthread_mutex_lock(&s->metrics.mu);
          s->metrics.shape_overruns++;
          pthread_mutex_unlock(&s->metrics.mu);
        }
        memcpy(w->shape_pts[k], slot->pts, sizeof(double) * 3 * (size_t)slot->n);
        w->shape_n[k] = slot->n;
        pthread_mutex_unlock(&s->shape_mu);
      }
      w->shape_have[k] = v;
    }
    out[*n] = (xt_acq_shape){in->m, w->shape_pts[k], w->shape_n[k], v};
    (*n)++;
  }
}
