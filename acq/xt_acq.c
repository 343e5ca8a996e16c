/* The acquisition layer (xt_acq.h): a plane's persistent state, a renderer's chain made on demand,
 * and xt_acq_expose, the one function that turns an exposure into a frame record. The sequence and
 * its locking are those the server's engine ran (issue 11): the loop's exposure is taken under the
 * plane's lock before the render, the measurement and the dose are accounted under it after, and a
 * frame whose run ended while it was rendered leaves the new run's totals alone. */
#include "xt_acq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t xt_acq_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- the plane ------------------------------------------------------------------------------ */

void xt_acq_plane_init(xt_acq_plane *p) {
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
}

void xt_acq_plane_destroy(xt_acq_plane *p) { pthread_mutex_destroy(&p->mu); }

void xt_acq_plane_snapshot(xt_acq_plane *p, xt_acq_plane_state *out) {
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  pthread_mutex_unlock(&p->mu);
}

void xt_acq_plane_new_run(xt_acq_plane *p) { p->run++; }

void xt_acq_plane_latch(const xt_acq_plane *p, xt_acq_request *q) {
  const xt_acq_setup *s = &p->set;
  memset(q, 0, sizeof *q);
  q->pose = s->pose;
  q->mode = s->mode;
  q->chain = s->chain;
  q->chain_prm = s->chain_prm;
  q->pixel_format = s->pixel_format;
  q->counter = p->next_counter;
  q->run = p->run;
  q->pose_seq = s->pose_seq;
  q->t_pose_ns = s->t_pose_ns;
}

void xt_acq_plane_advance(xt_acq_plane *p) { p->next_counter++; }

/* The exposure of a frame: the request's settings, or with dose-rate control on the loop's point on
 * its curve. A new run restarts the totals and the loop; the loop starts on the first frame that
 * has it on (from that frame's settings). */
static void plane_exposure(xt_acq_plane *pl, const xt_acq_request *q, xt_chain_params *p) {
  *p = q->chain_prm;
  /* A smaller zoom field asks the loop for more dose at the detector, to offset the noise a
   * magnified image shows (IFU-p292): the frame's target is the setting's times the field's ratio,
   * so the setting itself (the protocol's) stays what the user chose. */
  const xt_detector_mode *m = q->geom ? &q->geom->mode : q->mode;
  if (m && m->dose_ratio > 0) p->drc_target_ngy *= m->dose_ratio;
  if (!pl) return;
  xt_acq_plane_state *s = &pl->st;
  pthread_mutex_lock(&pl->mu);
  if (s->run != q->run) {
    s->run = q->run;
    memset(&s->dose, 0, sizeof s->dose);
    s->drc_live = 0;
  }
  if (p->drc) {
    if (!s->drc_live) xt_drc_reset(&s->drc, p);
    s->drc_live = 1;
    xt_drc_apply(&s->drc, p);
  } else
    s->drc_live = 0;
  pthread_mutex_unlock(&pl->mu);
}

/* After a chain frame: its dose, its measurement into the loop, the run's totals; copies into f. */
static int plane_account(xt_acq_plane *pl, const xt_acq_request *q, xt_acq_frame *f, xt_msg *msg) {
  const xt_chain_params *p = &f->prm;
  memset(&f->dose, 0, sizeof f->dose);
  xt_msg dmsg;
  int rc = xt_dose_frame(p, f->info.kerma_ugy_per_mas, &f->geom, &f->dose, &dmsg);
  if (rc) { /* the reference point behind the focus */
    if (q->flags & XT_ACQ_DOSE_STRICT) {
      if (msg) *msg = dmsg;
      return rc;
    }
    memset(&f->dose, 0, sizeof f->dose);
  }
  /* the measuring field's sum came with the frame (on a GPU a device reduction: no pass over the
   * raw frame here) */
  f->measured_ngy = p->drc ? xt_drc_measure_sum(f->field.field_sum, f->field.field_n, p, &f->info, &f->geom.mode)
                           : 0;
  if (!pl) { /* no plane: the frame stands alone */
    xt_dose_add(&f->totals, &f->dose);
    f->accounted = 1;
    return 0;
  }
  xt_acq_plane_state *s = &pl->st;
  pthread_mutex_lock(&pl->mu);
  if (s->run == q->run) {
    xt_dose_add(&s->dose, &f->dose);
    s->dose_last = f->dose;
    if (p->drc && s->drc_live) xt_drc_update(&s->drc, p, f->measured_ngy);
    f->accounted = 1;
  }
  f->totals = s->dose;
  f->drc = s->drc;
  pthread_mutex_unlock(&pl->mu);
  return 0;
}

/* ---- the renderer --------------------------------------------------------------------------- */

void xt_acq_renderer_init(xt_acq_renderer *r, xt_proj *proj, int threads) {
  memset(r, 0, sizeof *r);
  r->proj = proj;
  r->threads = threads;
}

void xt_acq_renderer_free(xt_acq_renderer *r) {
  xt_chain_destroy(r->chain);
  r->chain = NULL;
  free(r->batch_g);
  r->batch_g = NULL;
  r->batch_cap = 0;
  free(r->blur_acc);
  r->blur_acc = NULL;
  r->blur_cap = 0;
}

int xt_acq_renderer_add_model(xt_acq_renderer *r, const xt_model *m, xt_msg *msg) {
  int rc = xt_proj_add_model(r->proj, m, msg);
  if (!rc) r->models++;
  return rc;
}

/* Compared through the chain's table (the struct has padding). A seed is a double there: exact, as
 * the table's range stops at 2^53 - 1. */
static int same_params(const xt_chain_params *a, const xt_chain_params *b) {
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    if (xt_chain_param_get(a, in) != xt_chain_param_get(b, in)) return 0;
  }
  return 1;
}

int xt_acq_renderer_chain(xt_acq_renderer *r, const xt_chain_params *p, xt_msg *msg) {
  if (r->chain && r->chain_models != r->models) {
    xt_chain_destroy(r->chain);
    r->chain = NULL;
  }
  if (!r->chain) {
    int rc = xt_chain_create(p, r->proj, &r->chain, msg);
    if (!rc) xt_chain_set_threads(r->chain, r->threads); /* the CPU stages: as the projector */
    r->chain_models = r->models;
    return rc;
  }
  if (same_params(xt_chain_get_params(r->chain), p)) return 0;
  return xt_chain_set_params(r->chain, p, msg);
}

int xt_acq_renderer_warmup(xt_acq_renderer *r, const xt_chain_params *p, const xt_geometry *g, xt_msg *msg) {
  int rc = xt_acq_renderer_chain(r, p, msg), cols, rows;
  if (rc) return rc;
  xt_chain_out_size(r->chain, g, &cols, &rows);
  uint16_t *px = malloc((size_t)cols * rows * 2 * sizeof *px);
  if (!px) return xt_fail(msg, XT_ENOMEM, "warm-up: out of memory");
  xt_chain_out out = {px, px + (size_t)cols * rows, NULL, NULL, 0};
  rc = xt_chain_frame(r->chain, g, 0, &out, msg);
  free(px);
  xt_chain_reset(r->chain);
  return rc;
}

/* ---- one exposure --------------------------------------------------------------------------- */

static void image_size(xt_acq_image *im, int rows, int cols, size_t elem) {
  im->data = NULL;
  im->rows = rows;
  im->cols = cols;
  im->elem = elem;
  im->where = XT_ACQ_HOST;
}

static int host_plane(const xt_acq_image *im, const char *name, xt_msg *msg) {
  if (!im->data) return xt_fail(msg, XT_EINVAL, "acquisition: no buffer for the %s", name);
  if (im->where != XT_ACQ_HOST) return xt_fail(msg, XT_EUNSUPPORTED, "acquisition: %s on the device", name);
  return 0;
}

/* What the record copies from the request: identity, times known before the frame, placement. */
static void record_start(const xt_acq_request *q, xt_acq_frame *f) {
  memset(f, 0, sizeof *f);
  f->counter = q->counter;
  f->run = q->run;
  f->pose_seq = q->pose_seq;
  f->t_pose_ns = q->t_pose_ns;
  f->t_sched_ns = q->t_sched_ns;
  f->t_exposure_ns = q->t_exposure_ns;
  f->period_ns = q->period_ns;
  f->plane = q->plane;
  f->timing = q->timing;
  f->cycle = q->cycle;
  f->t_cycle_ns = q->t_cycle_ns;
  f->pixel_format = q->pixel_format;
  if (q->model) {
    f->has_placement = 1;
    f->placement = q->model->placement;
  }
  f->motion = q->motion;
}

/* The exposure's instrument shapes that the projector does not hold yet (by version). A shape that
 * fails leaves the projector's as it was, and fails the exposure. */
static int apply_shapes(xt_acq_renderer *r, const xt_acq_request *q, xt_msg *msg) {
  xt_acq_shape_cache *c = r->shapes ? r->shapes : &r->own_shapes;
  for (int i = 0; i < q->nshapes; i++) {
    const xt_acq_shape *sh = &q->shapes[i];
    int k = 0;
    while (k < c->n && c->model[k] != sh->model) k++;
    if (k < c->n && c->version[k] == sh->version) continue;
    if (k == c->n && sh->version == 0) continue; /* the model's own shape, as added */
    if (k == c->n && k == XT_ACQ_MAX_SHAPES)
      return xt_fail(msg, XT_ETOOLARGE, "acquisition: more than %d instruments", XT_ACQ_MAX_SHAPES);
    int rc = xt_proj_set_shape(r->proj, sh->model, sh->pts, sh->n, msg);
    if (rc) return rc;
    if (k == c->n) {
      c->model[k] = sh->model;
      c->n++;
    }
    c->version[k] = sh->version;
  }
  return 0;
}

/* The exposure's iodine, per label volume, where the projector holds other values. */
static int apply_iodine(xt_acq_renderer *r, const xt_acq_request *q, xt_msg *msg) {
  xt_acq_shape_cache *c = r->shapes ? r->shapes : &r->own_shapes;
  for (int i = 0; i < q->niodine; i++) {
    const xt_model *m = q->iodine[i].model;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = q->iodine[j].model == m;
    if (seen) continue; /* that model's regions went with its first */
    double rho[256] = {0};
    for (int j = i; j < q->niodine; j++) {
      const xt_acq_iodine *io = &q->iodine[j];
      if (io->model != m) continue;
      if (io->label < 0 || io->label > 255)
        return xt_fail(msg, XT_EINVAL, "acquisition: contrast region label %d of model %s", io->label, m->name);
      rho[io->label] = io->rho_g_cm3;
    }
    int k = 0;
    while (k < c->niodine && c->iodine_model[k] != m) k++;
    if (k < c->niodine && memcmp(c->iodine_rho[k], rho, sizeof rho) == 0) continue;
    int rc = xt_proj_set_iodine(r->proj, m, rho, msg);
    if (rc) return rc;
    if (k == c->niodine && k < XT_ACQ_MAX_IODINE_MODELS) c->iodine_model[c->niodine++] = m;
    if (k < c->niodine) memcpy(c->iodine_rho[k], rho, sizeof rho);
  }
  return 0;
}

/* Whether two requests carry the same iodine, entry for entry. */
static int same_iodine(const xt_acq_request *a, const xt_acq_request *b) {
  if (a->niodine != b->niodine) return 0;
  for (int i = 0; i < a->niodine; i++)
    if (a->iodine[i].model != b->iodine[i].model || a->iodine[i].label != b->iodine[i].label ||
        a->iodine[i].rho_g_cm3 != b->iodine[i].rho_g_cm3)
      return 0;
  return 1;
}

/* Sample k's model transforms onto the projector. */
static int apply_xforms(xt_acq_renderer *r, const xt_acq_request *q, int k, xt_msg *msg) {
  for (int i = 0; i < q->nxforms; i++) {
    const xt_acq_xform *x = &q->xforms[(size_t)k * q->nxforms + i];
    int rc = xt_proj_set_transform(r->proj, x->model, &x->T, msg);
    if (rc) return rc;
  }
  return 0;
}

/* Motion blur within the pulse: the mean intensity of the samples' renders, as a line integral. */
static int render_blurred(xt_acq_renderer *r, const xt_acq_request *q, const xt_geometry *g, float *out, xt_msg *msg) {
  const size_t n = (size_t)g->mode.rows * g->mode.cols;
  if (n > r->blur_cap) { /* grows to the largest frame, once */
    double *a = realloc(r->blur_acc, n * sizeof *a);
    if (!a) return xt_fail(msg, XT_ENOMEM, "acquisition: motion blur: out of memory");
    r->blur_acc = a;
    r->blur_cap = n;
  }
  memset(r->blur_acc, 0, n * sizeof *r->blur_acc);
  int rc = 0;
  for (int k = 0; k < q->blur_samples && !rc; k++) {
    if ((rc = apply_xforms(r, q, k, msg)) || (rc = xt_proj_render(r->proj, g, out, msg))) break;
    for (size_t i = 0; i < n; i++) r->blur_acc[i] += exp(-(double)out[i]);
  }
  const double inv = 1.0 / q->blur_samples;
  for (size_t i = 0; i < n && !rc; i++) out[i] = (float)-log(r->blur_acc[i] * inv);
  /* sample 0's transforms stay set, as an exposure without blur leaves them */
  if (!rc) rc = apply_xforms(r, q, 0, msg);
  return rc;
}

int xt_acq_expose(xt_acq_plane *plane, xt_acq_renderer *r, const xt_acq_request *q, xt_acq_frame *f, xt_msg *msg) {
  record_start(q, f);
  const int chain = q->chain && !(q->flags & XT_ACQ_NO_RENDER);
  const int want = q->flags & XT_ACQ_NO_RENDER ? 0 : q->want;
  if ((want & XT_ACQ_WANT_CHAIN) && !chain) return xt_fail(msg, XT_EINVAL, "acquisition: chain frames with the chain off");

  /* the exposure: the loop's point (taken before the render, as the frame's time starts after it) */
  if (chain) {
    f->chain = 1;
    plane_exposure(plane, q, &f->prm);
    if (q->kv_scale > 0) f->prm.kv *= q->kv_scale; /* the generator's actual kV, not the one asked for */
  }
  f->t_render_ns = xt_acq_now_ns();

  int rc;
  f->step = XT_ACQ_STEP_GEOMETRY;
  if (q->geom) f->geom = *q->geom;
  else if ((rc = xt_geom_compute(&q->pose, q->mode, &f->geom, msg))) return rc;
  xt_P_to_pixel_edge(f->geom.P, f->P_edge);
  if (q->flags & XT_ACQ_NO_RENDER) {
    f->t_done_ns = xt_acq_now_ns();
    f->step = XT_ACQ_STEP_DONE;
    return 0;
  }
  f->step = XT_ACQ_STEP_ADMIT;
  if (q->admit && (rc = q->admit(q->ctx, &f->geom, msg))) return rc;

  /* the renderer: the chain with this exposure's settings; a new run, or a first exposure, starts
   * its lag, temporal filter and DSA mask again */
  f->step = XT_ACQ_STEP_CHAIN;
  const int rows = f->geom.mode.rows, cols = f->geom.mode.cols;
  if (chain) {
    if ((rc = xt_acq_renderer_chain(r, &f->prm, msg))) return rc;
    xt_chain_set_panel_fault(r->chain, &q->panel_fault);
    if (r->chain_run != q->run || (q->flags & XT_ACQ_FIRST_EXPOSURE)) {
      xt_chain_reset(r->chain);
      r->chain_run = q->run;
    }
  }

  /* the instruments' shapes of this exposure, into the projector's own buffers */
  f->step = XT_ACQ_STEP_RENDER;
  if ((rc = apply_shapes(r, q, msg))) return rc;
  if ((rc = apply_iodine(r, q, msg))) return rc;
  if (q->nxforms && (rc = apply_xforms(r, q, 0, msg))) return rc;

  /* the planes' sizes, then the caller's buffers */
  f->step = XT_ACQ_STEP_BUFFERS;
  int nch = 0;
  if (want & XT_ACQ_WANT_CHANNELS) {
    xt_chanset cs;
    if ((rc = xt_proj_channels(r->proj, &cs, msg))) return rc;
    nch = cs.n;
  }
  image_size(&f->lineint, want & XT_ACQ_WANT_LINEINT ? rows : 0, want & XT_ACQ_WANT_LINEINT ? cols : 0, sizeof(float));
  image_size(&f->channels, nch ? rows * nch : 0, nch ? cols : 0, sizeof(float));
  if (want & XT_ACQ_WANT_CHAIN) {
    int ocols, orows;
    xt_chain_out_size(r->chain, &f->geom, &ocols, &orows);
    image_size(&f->raw, orows, ocols, sizeof(uint16_t));
    image_size(&f->proc, orows, ocols, sizeof(uint16_t));
  }
  if (want) {
    if (!q->buffers) return xt_fail(msg, XT_EINVAL, "acquisition: no buffers for the frame");
    if ((rc = q->buffers(q->ctx, f, msg))) return rc;
  }

  /* the render: line integrals and channels from the projector, then the chain's frame */
  f->step = XT_ACQ_STEP_RENDER;
  if (want & XT_ACQ_WANT_LINEINT) {
    const uint64_t t = xt_acq_now_ns();
    if ((rc = host_plane(&f->lineint, "line integrals", msg))) return rc;
    if (q->nxforms && q->blur_samples > 1) rc = render_blurred(r, q, &f->geom, (float *)f->lineint.data, msg);
    else rc = xt_proj_render(r->proj, &f->geom, (float *)f->lineint.data, msg);
    if (rc) return rc;
    f->lineint_ms = (double)(xt_acq_now_ns() - t) * 1e-6;
  }
  if (want & XT_ACQ_WANT_CHANNELS) {
    if ((rc = host_plane(&f->channels, "channels", msg)) ||
        (rc = xt_proj_render_channels(r->proj, &f->geom, (float *)f->channels.data, msg)))
      return rc;
  }
  f->step = XT_ACQ_STEP_CHAIN;
  if (chain && (want & XT_ACQ_WANT_CHAIN)) {
    const uint64_t t = xt_acq_now_ns();
    if ((rc = host_plane(&f->raw, "raw frame", msg)) || (rc = host_plane(&f->proc, "processed frame", msg))) return rc;
    const int unread = (q->flags & XT_ACQ_PROC_UNREAD) != 0;
    xt_chain_out out = {(uint16_t *)f->raw.data, (uint16_t *)f->proc.data, NULL, NULL, unread};
    if ((rc = xt_chain_frame(r->chain, &f->geom, q->counter, &out, msg))) return rc;
    if (unread) f->proc.data = NULL; /* what is there is not this frame's (on a GPU) */
    f->chain_ms = (double)(xt_acq_now_ns() - t) * 1e-6;
  }
  f->t_done_ns = xt_acq_now_ns();

  /* the measurement and the dose */
  if (chain && (want & XT_ACQ_WANT_CHAIN)) {
    f->step = XT_ACQ_STEP_DOSE;
    xt_chain_get_info(r->chain, &f->info);
    xt_chain_drc_last(r->chain, &f->field);
    xt_chain_window_last(r->chain, &f->window, &f->level);
    f->saturated_px = xt_chain_saturated_last(r->chain);
    if ((rc = plane_account(plane, q, f, msg))) return rc;
  }
  f->step = XT_ACQ_STEP_DONE;
  return 0;
}

int xt_acq_expose_batch(xt_acq_renderer *r, const xt_acq_request *q, int n, float *lineint, xt_acq_frame *f,
                        xt_msg *msg) {
  if (n < 0) return xt_fail(msg, XT_EINVAL, "acquisition: a batch of %d exposures", n);
  if (n == 0) return 0;
  if (!lineint) return xt_fail(msg, XT_EINVAL, "acquisition: no buffer for the line integrals");
  if (n > r->batch_cap) { /* grows to the largest batch, once */
    xt_geometry *g = realloc(r->batch_g, sizeof *g * (size_t)n);
    if (!g) return xt_fail(msg, XT_ENOMEM, "acquisition: out of memory");
    r->batch_g = g;
    r->batch_cap = n;
  }
  const uint64_t t0 = xt_acq_now_ns();
  int rc, rows = 0, cols = 0;
  /* every record and geometry first: the detector sizes and the budgets are checked before the
   * projector starts */
  for (int i = 0; i < n; i++) {
    const xt_acq_request *qi = &q[i];
    xt_acq_frame *fi = &f[i];
    record_start(qi, fi);
    if (qi->chain || qi->want != XT_ACQ_WANT_LINEINT || (qi->flags & XT_ACQ_NO_RENDER))
      return xt_fail(msg, XT_EINVAL, "acquisition: exposure %d of a batch: line integrals only, without the chain", i);
    fi->t_render_ns = t0;
    fi->step = XT_ACQ_STEP_GEOMETRY;
    if (qi->geom) fi->geom = *qi->geom;
    else if ((rc = xt_geom_compute(&qi->pose, qi->mode, &fi->geom, msg))) return rc;
    xt_P_to_pixel_edge(fi->geom.P, fi->P_edge);
    if (i == 0) rows = fi->geom.mode.rows, cols = fi->geom.mode.cols;
    else if (fi->geom.mode.rows != rows || fi->geom.mode.cols != cols)
      return xt_fail(msg, XT_EINVAL, "acquisition: exposure %d of a batch: a %d x %d detector, the batch's is %d x %d",
                     i, fi->geom.mode.cols, fi->geom.mode.rows, cols, rows);
    fi->step = XT_ACQ_STEP_ADMIT;
    if (qi->admit && (rc = qi->admit(qi->ctx, &fi->geom, msg))) return rc;
    fi->step = XT_ACQ_STEP_BUFFERS;
    image_size(&fi->lineint, rows, cols, sizeof(float));
    fi->lineint.data = lineint + (size_t)i * rows * cols;
    r->batch_g[i] = fi->geom;
  }
  for (int i = 0; i < n; i++) f[i].step = XT_ACQ_STEP_RENDER;
  const uint64_t t = xt_acq_now_ns();
  /* contrast: each run of exposures with the same iodine is one projector call, its iodine set
   * first (a batch without iodine is one call, as before) */
  for (int a = 0, b; a < n; a = b) {
    for (b = a + 1; b < n && same_iodine(&q[a], &q[b]); b++) {
    }
    if ((rc = apply_iodine(r, &q[a], msg)) ||
        (rc = xt_proj_render_batch(r->proj, r->batch_g + a, b - a, lineint + (size_t)a * rows * cols, msg)))
      return rc;
  }
  const uint64_t t1 = xt_acq_now_ns();
  for (int i = 0; i < n; i++) {
    f[i].lineint_ms = (double)(t1 - t) * 1e-6;
    f[i].t_done_ns = t1;
    f[i].step = XT_ACQ_STEP_DONE;
  }
  return 0;
}
