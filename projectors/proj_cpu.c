/* The CPU reference projector: for every detector pixel, the exact line integral of mu through
 * every model, in double precision. Each model kind integrates its own rays (xt_proj_kind.h;
 * voxels: proj_cpu_voxel.c); this file sets up the rays, sums over models and spreads the rows
 * over threads. This is the oracle the GPU kernels are tested against: it favours exactness
 * over speed. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_proj.h"
#include "xt_proj_internal.h"
#include "xt_proj_kind.h"

/* ------------------------------------------------------------------------------------------ */
/* Models: each kind's table (xt_proj_kind.h) does the ray; this file sums over models          */
/* ------------------------------------------------------------------------------------------ */

static const xt_cpu_kind *const kinds[] = {&xt_cpu_kind_dense, &xt_cpu_kind_labels, &xt_cpu_kind_gmm,
                                           &xt_cpu_kind_nvdb, &xt_cpu_kind_instr};

static const xt_cpu_kind *kind_of(const xt_model *m) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (kinds[i]->kind == m->kind) return kinds[i];
  return NULL;
}

/* Per-model, per-frame state: the kind's own (its world->model map and what it derives). */
typedef struct ray_model {
  const xt_model *m;
  const xt_cpu_kind *k;
  const void *chan; /* the model's channel map (channels frames only) */
  int ok;
  int area; /* the kind integrates pixel areas (xt_cpu_kind.pixel) */
  _Alignas(16) unsigned char state[XT_CPU_KIND_STATE];
} ray_model;

/* ios: NULL, or per model the projector's iodine (NULL: none) */
static void setup_models(const xt_model *const *models, int n, const xt_pose *pose, void *const *chans,
                         xt_iodine_tab *const *ios, ray_model *rm) {
  for (int i = 0; i < n; i++) {
    rm[i].m = models[i];
    rm[i].k = kind_of(models[i]);
    rm[i].chan = chans ? chans[i] : NULL;
    rm[i].ok = rm[i].k && rm[i].k->frame(models[i], pose, rm[i].state);
    rm[i].area = rm[i].k && rm[i].k->pixel;
    if (rm[i].ok && ios && ios[i] && rm[i].k->iodine) rm[i].k->iodine(ios[i], rm[i].state, NULL);
  }
}

/* fast: the kinds' fast march where they have one (proj_cpu_fast.c), else their exact one. */
static void integrate_channels(const ray_model *rm, int n, int fast, xt_vec3 a, xt_vec3 w, double len, double *acc) {
  for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] = 0.0;
  for (int i = 0; i < n; i++) {
    if (!rm[i].ok || rm[i].area) continue;
    if (fast && rm[i].k->ray_channels_fast) rm[i].k->ray_channels_fast(rm[i].m, rm[i].state, rm[i].chan, a, w, len, acc);
    else rm[i].k->ray_channels(rm[i].m, rm[i].state, rm[i].chan, a, w, len, acc);
  }
}

static double integrate(const ray_model *rm, int n, xt_vec3 a, xt_vec3 w, double len) {
  double total = 0.0;
  for (int i = 0; i < n; i++)
    if (rm[i].ok && !rm[i].area) total += rm[i].k->ray(rm[i].m, rm[i].state, a, w, len);
  return total;
}

/* The pixel-area models (xt_cpu_kind.pixel), added to *v (line integrals) or acc[] (channels, acc
 * non-NULL). */
static void integrate_area(const ray_model *rm, int n, const xt_geometry *g, int col, int row, double *v,
                           double *acc) {
  for (int i = 0; i < n; i++) {
    if (!rm[i].ok || !rm[i].area) continue;
    if (acc) rm[i].k->pixel(rm[i].m, rm[i].state, rm[i].chan, g, col, row, acc);
    else rm[i].k->pixel(rm[i].m, rm[i].state, NULL, g, col, row, v);
  }
}

double xt_ref_segment(const xt_model *const *models, int n, xt_vec3 a, xt_vec3 b) {
  xt_vec3 d = xt_v3_sub(b, a);
  double len = xt_v3_norm(d);
  if (!(len > 0) || n <= 0) return 0.0;
  ray_model rm_stack[16];
  ray_model *rm = n <= 16 ? rm_stack : malloc(sizeof *rm * (size_t)n);
  if (!rm) return NAN;
  xt_pose id;
  memset(&id, 0, sizeof id); /* a, b are world points: the table is already applied by the caller */
  setup_models(models, n, &id, NULL, NULL, rm);
  for (int i = 0; i < n; i++) rm[i].area = 0; /* one ray, whatever the kind */
  double r = integrate(rm, n, a, xt_v3_scale(d, 1.0 / len), len);
  if (rm != rm_stack) free(rm);
  return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Frames, multithreaded over rows                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct frame_job {
  const ray_model *rm;
  int nmodels;
  const xt_geometry *g;
  int nch; /* 0: line integrals; else this many channel planes */
  int fast; /* channels by the kinds' fast march */
  double *out64;
  float *out32;
  atomic_int next_row;
} frame_job;

static void *frame_worker(void *arg) {
  frame_job *job = arg;
  const xt_geometry *g = job->g;
  const int cols = g->mode.cols, rows = g->mode.rows;
  for (;;) {
    int r = atomic_fetch_add(&job->next_row, 1);
    if (r >= rows) break;
    for (int c = 0; c < cols; c++) {
      xt_vec3 px = xt_geom_pixel_pos(g, c, r);
      xt_vec3 d = xt_v3_sub(px, g->source);
      double len = xt_v3_norm(d);
      size_t k = (size_t)r * cols + c;
      if (job->nch) {
        double acc[XT_MAX_CHANNELS];
        const size_t plane = (size_t)rows * cols;
        integrate_channels(job->rm, job->nmodels, job->fast, g->source, xt_v3_scale(d, 1.0 / len), len, acc);
        integrate_area(job->rm, job->nmodels, g, c, r, NULL, acc);
        for (int ch = 0; ch < job->nch; ch++) {
          if (job->out64) job->out64[plane * ch + k] = acc[ch];
          if (job->out32) job->out32[plane * ch + k] = (float)acc[ch];
        }
        continue;
      }
      double v = integrate(job->rm, job->nmodels, g->source, xt_v3_scale(d, 1.0 / len), len);
      integrate_area(job->rm, job->nmodels, g, c, r, &v, NULL);
      if (job->out64) job->out64[k] = v;
      if (job->out32) job->out32[k] = (float)v;
    }
  }
  return NULL;
}

static int default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

/* chans: NULL for line integrals, else each model's channel map and nch planes out (fast: by the
 * kinds' fast march). */
static int render_frame(const xt_model *const *models, int n, const xt_geometry *g, void *const *chans,
                        xt_iodine_tab *const *ios, int nch, int fast, double *out64, float *out32, int threads,
                        xt_msg *msg) {
  if (n < 0 || n > 1024) return xt_fail(msg, XT_EINVAL, "render: %d models", n);
  ray_model *rm = calloc((size_t)(n > 0 ? n : 1), sizeof *rm);
  if (!rm) return xt_fail(msg, XT_ENOMEM, "render: out of memory");
  setup_models(models, n, &g->pose, chans, ios, rm);
  frame_job job = {.rm = rm, .nmodels = n, .g = g, .nch = chans ? nch : 0, .fast = fast, .out64 = out64, .out32 = out32};
  atomic_init(&job.next_row, 0);
  if (threads <= 0) threads = default_threads();
  if (threads > g->mode.rows) threads = g->mode.rows;
  pthread_t tid[256];
  int started = 0;
  for (int i = 1; i < threads && i < 256; i++) {
    if (pthread_create(&tid[started], NULL, frame_worker, &job) != 0) break; /* fewer threads is fine */
    started++;
  }
  frame_worker(&job);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  free(rm);
  return 0;
}

int xt_ref_render_f64(const xt_model *const *models, int n, const xt_geometry *g, double *out, int threads,
                      xt_msg *msg) {
  return render_frame(models, n, g, NULL, NULL, 0, 0, out, NULL, threads, msg);
}

/* Each model's channel map onto cs; chans[i] NULL-initialised by the caller, freed with free_chans. */
static int build_chans(const xt_model *const *models, int n, const xt_chanset *cs, void **chans, xt_msg *msg) {
  for (int i = 0; i < n; i++) {
    const xt_cpu_kind *k = kind_of(models[i]);
    if (!k || !k->chan_build)
      return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s has no material channels yet", models[i]->name,
                     xt_model_kind_name(models[i]->kind));
    int rc = k->chan_build(models[i], cs, &chans[i], msg);
    if (rc) return rc;
  }
  return 0;
}

static void free_chans(void **chans, int n) {
  for (int i = 0; chans && i < n; i++) free(chans[i]);
  free(chans);
}

int xt_ref_render_channels_f64(const xt_model *const *models, int n, const xt_chanset *cs, const xt_geometry *g,
                               double *out, int threads, xt_msg *msg) {
  void **chans = calloc((size_t)(n > 0 ? n : 1), sizeof *chans);
  if (!chans) return xt_fail(msg, XT_ENOMEM, "channels: out of memory");
  int rc = build_chans(models, n, cs, chans, msg);
  if (!rc) rc = render_frame(models, n, g, chans, NULL, cs->n, 0, out, NULL, threads, msg);
  free_chans(chans, n);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The backend                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct cpu_proj {
  int threads;
  int nmodels, cap;
  const xt_model **models; /* what renders: own[i], else view[i] */
  const xt_model **added;  /* the models as added (xt_proj_set_shape, xt_proj_set_transform name them) */
  xt_model **own;          /* the own copies (kinds with `own`), else NULL */
  xt_model **view;         /* kinds without `own`: a shallow copy (the payload shared) whose placement
                              xt_proj_set_transform moves; else NULL */
  xt_affine *base;         /* each model's placement as added (xt_proj_set_transform composes onto it) */
  xt_chanset cs;   /* the models' channel set */
  void **chans;    /* each model's map onto cs; rebuilt when cs grows (at add_model) */
  xt_iodine_tab **io; /* contrast: each label volume's iodine (made at its first xt_proj_set_iodine), else NULL */
} cpu_proj;

static int cpu_available(xt_msg *msg) { return 0; }

static int cpu_create(const xt_proj_options *opt, void **impl, xt_msg *msg) {
  cpu_proj *p = calloc(1, sizeof *p);
  if (!p) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
  p->threads = opt->threads;
  *impl = p;
  return 0;
}

static int cpu_add_model(void *impl, const xt_model *m, xt_msg *msg) {
  cpu_proj *p = impl;
  const xt_cpu_kind *k = kind_of(m);
  if (!k)
    return xt_fail(msg, XT_EUNSUPPORTED, "cpu projector: model %s: kind %s not supported", m->name,
                   xt_model_kind_name(m->kind));
  int rc = k->check(m, msg);
  if (rc) return rc;
  if (p->nmodels == p->cap) {
    int cap = p->cap ? 2 * p->cap : 4;
    const xt_model **nm = realloc(p->models, sizeof *nm * (size_t)cap);
    if (!nm) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->models = nm;
    void **nc = realloc(p->chans, sizeof *nc * (size_t)cap);
    if (!nc) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->chans = nc;
    const xt_model **na = realloc(p->added, sizeof *na * (size_t)cap);
    if (!na) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->added = na;
    xt_model **no = realloc(p->own, sizeof *no * (size_t)cap);
    if (!no) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->own = no;
    xt_iodine_tab **ni = realloc(p->io, sizeof *ni * (size_t)cap);
    if (!ni) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->io = ni;
    xt_model **nv = realloc(p->view, sizeof *nv * (size_t)cap);
    if (!nv) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->view = nv;
    xt_affine *nb = realloc(p->base, sizeof *nb * (size_t)cap);
    if (!nb) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    p->base = nb;
    p->cap = cap;
  }
  xt_model *own = NULL, *view = NULL;
  if (k->own && (rc = k->own(m, &own, msg))) return rc;
  if (!own) { /* a shallow copy: the kinds read the placement through the model they render */
    if (!(view = malloc(sizeof *view))) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    *view = *m;
  }
  /* Channels are optional per kind: a model without them only makes render_channels fail. The maps
   * are rebuilt lazily (render_channels) since the set may grow with later models. */
  xt_chanset cs = p->cs;
  if (k->chan_build && xt_chanset_add_model(&cs, m, NULL) == 0) p->cs = cs;
  p->chans[p->nmodels] = NULL;
  p->added[p->nmodels] = m;
  p->own[p->nmodels] = own;
  p->io[p->nmodels] = NULL;
  p->view[p->nmodels] = view;
  p->base[p->nmodels] = m->placement;
  p->models[p->nmodels++] = own ? own : view;
  for (int i = 0; i < p->nmodels; i++) {
    free(p->chans[i]);
    p->chans[i] = NULL;
  }
  return 0;
}

static int cpu_channels(void *impl, xt_chanset *cs, xt_msg *msg) {
  cpu_proj *p = impl;
  *cs = p->cs;
  return 0;
}

static int channels_frame(cpu_proj *p, const xt_geometry *g, int fast, float *out, xt_msg *msg) {
  for (int i = 0; i < p->nmodels; i++) {
    if (p->chans[i]) continue;
    const xt_cpu_kind *k = kind_of(p->models[i]);
    if (!k->chan_build)
      return xt_fail(msg, XT_EUNSUPPORTED, "cpu projector: model %s: kind %s has no material channels yet",
                     p->models[i]->name, xt_model_kind_name(p->models[i]->kind));
    int rc = k->chan_build(p->models[i], &p->cs, &p->chans[i], msg);
    if (rc) return rc;
  }
  if (!p->cs.n) return 0;
  for (int i = 0; i < p->nmodels; i++) /* the iodine of this frame (set since, or a map rebuilt) */
    if (p->io[i]) kind_of(p->models[i])->iodine(p->io[i], NULL, p->chans[i]);
  return render_frame(p->models, p->nmodels, g, p->chans, p->io, p->cs.n, fast, NULL, out, p->threads, msg);
}

static int cpu_render_channels(void *impl, const xt_geometry *g, float *out, xt_msg *msg) {
  return channels_frame(impl, g, 0, out, msg);
}

int xt_proj_cpu_render_channels_fast(void *impl, const xt_geometry *g, float *out, xt_msg *msg) {
  return channels_frame(impl, g, 1, out, msg);
}

static int cpu_render(void *impl, const xt_geometry *g, float *out, xt_msg *msg) {
  cpu_proj *p = impl;
  return render_frame(p->models, p->nmodels, g, NULL, p->io, 0, 0, NULL, out, p->threads, msg);
}

static int cpu_render_batch(void *impl, const xt_geometry *g, int n, float *out, xt_msg *msg) {
  size_t frame = (size_t)g[0].mode.rows * g[0].mode.cols;
  for (int i = 0; i < n; i++) {
    int rc = cpu_render(impl, &g[i], out + frame * (size_t)i, msg);
    if (rc) return rc;
  }
  return 0;
}

static void cpu_destroy(void *impl) {
  cpu_proj *p = impl;
  if (!p) return;
  for (int i = 0; i < p->nmodels; i++) {
    free(p->chans[i]);
    free(p->io[i]);
    xt_model_free(p->own[i]);
    free(p->view[i]); /* the payload is the caller's */
  }
  free(p->io);
  free(p->chans);
  free(p->view);
  free(p->base);
  free(p->added);
  free(p->own);
  free(p->models);
  free(p);
}

static int cpu_set_shape(void *impl, const xt_model *m, const double *pts, int n, xt_msg *msg) {
  cpu_proj *p = impl;
  for (int i = 0; i < p->nmodels; i++) {
    if (p->added[i] != m) continue;
    const xt_cpu_kind *k = kind_of(m);
    if (!p->own[i] || !k->reshape)
      return xt_fail(msg, XT_EUNSUPPORTED, "cpu projector: model %s (%s) has no shape to set", m->name,
                     xt_model_kind_name(m->kind));
    return k->reshape(p->own[i], pts, n, msg);
  }
  return xt_fail(msg, XT_ENOTFOUND, "cpu projector: model %s was not added", m->name);
}

static int cpu_set_iodine(void *impl, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  cpu_proj *p = impl;
  for (int i = 0; i < p->nmodels; i++) {
    if (p->added[i] != m) continue;
    if (!kind_of(m)->iodine)
      return xt_fail(msg, XT_EUNSUPPORTED, "cpu projector: model %s (%s) takes no contrast", m->name,
                     xt_model_kind_name(m->kind));
    if (!io) { /* none: the model's own tables again */
      free(p->io[i]);
      p->io[i] = NULL;
      free(p->chans[i]); /* rebuilt from the model at the next channels frame */
      p->chans[i] = NULL;
      return 0;
    }
    if (!p->io[i] && !(p->io[i] = malloc(sizeof *p->io[i]))) /* once per model: later sets copy into it */
      return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
    *p->io[i] = *io;
    return 0;
  }
  return xt_fail(msg, XT_ENOTFOUND, "cpu projector: model %s was not added", m->name);
}

static int cpu_set_transform(void *impl, const xt_model *m, const xt_affine *T, xt_msg *msg) {
  cpu_proj *p = impl;
  for (int i = 0; i < p->nmodels; i++) {
    if (p->added[i] != m) continue;
    xt_model *r = p->own[i] ? p->own[i] : p->view[i];
    r->placement = xt_aff_compose(T, &p->base[i]);
    return 0;
  }
  return xt_fail(msg, XT_ENOTFOUND, "cpu projector: model %s was not added", m->name);
}

const xt_proj_ops xt_proj_cpu_ops = {
    .name = "cpu",
    .available = cpu_available,
    .create = cpu_create,
    .add_model = cpu_add_model,
    .render = cpu_render,
    .render_batch = cpu_render_batch,
    .destroy = cpu_destroy,
    .channels = cpu_channels,
    .render_channels = cpu_render_channels,
    .render_device = NULL,
    .render_spectral = NULL,
    .set_shape = cpu_set_shape,
    .set_iodine = cpu_set_iodine,
    .set_transform = cpu_set_transform,
};
