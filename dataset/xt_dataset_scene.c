/* The dataset's scene: models loaded once and placed, the label channels as models of their own,
 * and per worker the projectors that render a batch of frames.
 *
 * Per-frame rigid perturbations never touch a model: a projector reads a model's placement and
 * the pose's table translation, so a frame whose model moved by E (patient frame) is rendered by
 * moving the rays by the inverse, E^-1 applied to the source and the detector, with the table
 * folded in. Rigid maps keep lengths, so the line integrals are those of the moved model exactly.
 * Models that move together (one follows another) share one projector, so the kernel sums them;
 * independently moving groups are summed on the host.
 *
 * Label channels go through the public projector API (xt_proj.h): each channel is a volume of its
 * own whose voxels hold the channel's labels and a background label outside it, with a table of
 * 1 per channel label (path length, mm) or the material's mu (line integral); a channel of a dense
 * model is a mask of its mu (or HU) range. Each has its own projector. All of that sits behind
 * xt_ds_render_labels. The projectors' per-material channels (issue 10) cannot replace it: they
 * give areal densities of basis materials summed over a projector's models, not a channel's
 * labels (two labels of one material, user HU thresholds) as path lengths (docs/dataset.md).
 *
 * With a chain, each worker binds one imaging chain per detector mode to the image projector
 * (the spec keeps the image models in one group), and every frame runs as a first exposure keyed
 * by the frame's index (xt_ds_render_chain). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xt_dataset.h"
#include "xt_phantom.h"
#ifdef XT_HAVE_LOADERS
#include "xt_hu.h"
#include "xt_load.h"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Models                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int load_model(const xt_ds_model_spec *ms, xt_model **out, xt_msg *msg) {
  int rc;
  *out = NULL;
  if (ms->source == XT_DS_SRC_PHANTOM) {
    int dim[3] = {ms->size, ms->size, ms->size};
    return xt_phantom_head_model(dim, ms->spacing_mm, ms->phantom_labels ? XT_VOXEL_U8 : XT_VOXEL_F32, out, msg);
  }
#ifdef XT_HAVE_LOADERS
  if (ms->source == XT_DS_SRC_FILE) {
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
    xt_load_options lo;
    memset(&lo, 0, sizeof lo);
    lo.convert = conv[ms->convert];
    lo.energy_kev = ms->energy_kev;
    lo.hu_model = ms->hu_linear ? XT_HU_LINEAR : XT_HU_BILINEAR;
    lo.ct_energy_kev = ms->ct_energy_kev;
    lo.nifti_xform = ms->nifti_qform ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
    lo.nan_fill = ms->nan_fill;
    lo.nan_value = ms->nan_value;
    lo.dicom_series = ms->dicom_series[0] ? ms->dicom_series : NULL;
    return xt_model_load(ms->path, &lo, ms->name, out, msg);
  }
  int dim[3] = {ms->size, ms->size, ms->size};
  double sp[3] = {ms->spacing_mm, ms->spacing_mm, ms->spacing_mm};
  xt_material_table mt;
  xt_phantom *ph = malloc(sizeof *ph);
  xt_volume *v = NULL;
  if (!ph) return xt_fail(msg, XT_ENOMEM, "out of memory");
  if (!(rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg)) && !(rc = xt_phantom_load_json(ms->path, &mt, ph, msg)) &&
      !(rc = xt_phantom_voxelize(ph, dim, sp, ms->voxels_labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &mt, &v, msg)) &&
      (rc = xt_model_from_volume(v, ms->name, out, msg)))
    xt_volume_free(v);
  free(ph);
  return rc;
#else
  (void)rc;
  return xt_fail(msg, XT_EUNSUPPORTED, "model files are not readable by this xtwin");
#endif
}

/* mu in 1/mm of a HU value for a model: the calibration its loader used (a CT converted from HU),
 * else the linear scale through water at its energy (phantoms and mu files at the default). */
static int hu_to_mu(const xt_ds_model_spec *ms, double hu, double *mu, xt_msg *msg) {
#ifdef XT_HAVE_LOADERS
  const int from_hu = ms->source == XT_DS_SRC_FILE && ms->convert == 1;
  xt_hu_calib c;
  int rc = xt_hu_calib_make(from_hu && !ms->hu_linear ? XT_HU_BILINEAR : XT_HU_LINEAR,
                            ms->source == XT_DS_SRC_FILE ? ms->energy_kev : XT_DEFAULT_ENERGY_KEV,
                            ms->source == XT_DS_SRC_FILE ? ms->ct_energy_kev : XT_HU_CT_ENERGY_KEV, &c, msg);
  if (rc) return rc;
  *mu = xt_hu_calib_mu(&c, hu);
  return 0;
#else
  (void)ms, (void)hu, (void)mu;
  return xt_fail(msg, XT_EUNSUPPORTED, "hu_range needs the HU helpers (models/xt_hu.c) in this build");
#endif
}

/* Channel k as a volume of its own over its model's grid (see the top of this file). */
static int make_channel(const xt_ds_spec *s, const xt_ds_channel_spec *cs, const xt_model *src, xt_model **out,
                        xt_msg *msg) {
  const xt_volume *v = xt_model_volume(src);
  const size_t n = xt_volume_voxels(v);
  const int path = s->quantity == XT_DS_QTY_PATH_LENGTH;
  xt_volume *cv = NULL;
  int rc;
  *out = NULL;
  if (cs->kind == XT_DS_CH_LABELS) {
    const xt_material_table *t = v->materials;
    int bg = -1;
    for (int l = 0; l < 256 && bg < 0; l++)
      if (!cs->labels[l]) bg = l;
    if (bg < 0) return xt_fail(msg, XT_EINVAL, "channel %s: every label is in it; nothing is left for the background",
                               cs->name);
    if ((rc = xt_volume_create(v->dim[0], v->dim[1], v->dim[2], v->spacing, XT_VOXEL_U8, &cv, msg))) return rc;
    cv->index_to_model = v->index_to_model;
    cv->materials = calloc(1, sizeof *cv->materials);
    if (!cv->materials) {
      xt_volume_free(cv);
      return xt_fail(msg, XT_ENOMEM, "out of memory");
    }
    *cv->materials = *t;
    for (int l = 0; l < XT_MAX_MATERIALS; l++)
      cv->materials->mu[l] = cs->labels[l] && l < t->count ? (path ? 1.0f : t->mu[l]) : 0.0f;
    if (cv->materials->count <= bg) cv->materials->count = bg + 1;
    snprintf(cv->materials->source, sizeof cv->materials->source, "xtwin dataset: channel %s (%s)", cs->name,
             path ? "1 per mm inside" : "material mu inside");
    const uint8_t *a = v->data;
    uint8_t *b = cv->data;
    for (size_t i = 0; i < n; i++) b[i] = cs->labels[a[i]] ? a[i] : (uint8_t)bg;
  } else {
    double lo = cs->lo, hi = cs->hi;
    if (cs->kind == XT_DS_CH_HU) {
      const xt_ds_model_spec *ms = &s->models[cs->model];
      if ((rc = hu_to_mu(ms, cs->lo, &lo, msg)) || (rc = hu_to_mu(ms, cs->hi, &hi, msg))) return rc;
    }
    const float *a = v->data;
    if ((rc = xt_volume_create(v->dim[0], v->dim[1], v->dim[2], v->spacing, path ? XT_VOXEL_U8 : XT_VOXEL_F32, &cv, msg)))
      return rc;
    cv->index_to_model = v->index_to_model;
    if (path) {
      cv->materials = calloc(1, sizeof *cv->materials);
      if (!cv->materials) {
        xt_volume_free(cv);
        return xt_fail(msg, XT_ENOMEM, "out of memory");
      }
      cv->materials->count = 2;
      cv->materials->mu[1] = 1.0f;
      cv->materials->energy_kev = XT_DEFAULT_ENERGY_KEV;
      snprintf(cv->materials->name[0], XT_MATERIAL_NAME_MAX, "outside");
      snprintf(cv->materials->name[1], XT_MATERIAL_NAME_MAX, "%.31s", cs->name);
      snprintf(cv->materials->source, sizeof cv->materials->source, "xtwin dataset: channel %s, mu in [%g, %g] 1/mm",
               cs->name, lo, hi);
      uint8_t *b = cv->data;
      for (size_t i = 0; i < n; i++) b[i] = a[i] >= lo && a[i] <= hi;
    } else {
      float *b = cv->data;
      for (size_t i = 0; i < n; i++) b[i] = a[i] >= lo && a[i] <= hi ? a[i] : 0.0f;
    }
  }
  if ((rc = xt_model_from_volume(cv, cs->name, out, msg))) {
    xt_volume_free(cv);
    return rc;
  }
  return 0;
}

void xt_ds_scene_free(xt_ds_scene *sc) {
  if (!sc) return;
  for (int i = 0; i < XT_DS_MAX_MODELS; i++) xt_model_free(sc->models[i]);
  for (int k = 0; k < XT_DS_MAX_CHANNELS; k++) xt_model_free(sc->chan_model[k]);
  memset(sc, 0, sizeof *sc);
}

int xt_ds_scene_load(const xt_ds_spec *s, xt_ds_scene *sc, xt_msg *msg) {
  int rc = 0;
  memset(sc, 0, sizeof *sc);
  sc->spec = s;
  const char *base = strrchr(s->path, '/');
  base = base ? base + 1 : s->path;
  /* Missing files first, before any heavy load. */
  for (int i = 0; i < s->nmodels; i++) {
    const xt_ds_model_spec *ms = &s->models[i];
    struct stat st;
    if (ms->source == XT_DS_SRC_PHANTOM) continue;
#ifdef XT_HAVE_LOADERS
    if (ms->source == XT_DS_SRC_FILE && xt_dicom_path(ms->path)) continue; /* folders, @LIST, #SERIES: the loader's */
#endif
    const char *field = ms->source == XT_DS_SRC_FILE ? "file" : "ellipsoids";
    if (stat(ms->path, &st) != 0)
      return xt_fail(msg, XT_ENOTFOUND, "%s: models[%d].%s: \"%s\": %s", base, i, field, ms->path, strerror(errno));
    if (S_ISDIR(st.st_mode))
      return xt_fail(msg, XT_EINVAL, "%s: models[%d].%s: \"%s\": is a directory", base, i, field, ms->path);
  }
  for (int i = 0; i < s->nmodels; i++) {
    const xt_ds_model_spec *ms = &s->models[i];
    xt_msg lm;
    if ((rc = load_model(ms, &sc->models[i], &lm))) {
      const char *field = ms->source == XT_DS_SRC_FILE ? "file" : ms->source == XT_DS_SRC_ELLIPSOIDS ? "ellipsoids" : "phantom";
      xt_fail(msg, rc, "%s: models[%d].%s: %s", base, i, field, lm.text);
      goto fail;
    }
    xt_model *m = sc->models[i];
    snprintf(m->name, sizeof m->name, "%s", ms->name);
    xt_vec3 lo, hi;
    if ((rc = xt_model_bounds(m, &lo, &hi, msg))) goto fail;
    xt_affine pl = xt_aff_identity();
    if (ms->follows >= 0) {
      pl = sc->placement[ms->follows];
    } else {
      if (!ms->place_native) {
        pl.t[0] = -0.5 * (lo.x + hi.x);
        pl.t[1] = -0.5 * (lo.y + hi.y);
        pl.t[2] = -0.5 * (lo.z + hi.z);
      }
      for (int a = 0; a < 3; a++) pl.t[a] += ms->offset_mm[a];
    }
    sc->placement[i] = pl;
    m->placement = pl;
    xt_vec3 c = xt_aff_apply(&pl, xt_v3(0.5 * (lo.x + hi.x), 0.5 * (lo.y + hi.y), 0.5 * (lo.z + hi.z)));
    sc->center[i][0] = c.x;
    sc->center[i][1] = c.y;
    sc->center[i][2] = c.z;
  }
  /* The chain sees a model only through its material channels: a kind without them would be
   * missing from the raw frame without a word (the chain renders no channel of it), so it is
   * refused here, by asking a CPU projector which channels the model brings. */
  for (int i = 0; s->chain.present && i < s->nmodels; i++) {
    if (!s->models[i].in_image) continue;
    xt_proj_options po = {XT_BACKEND_CPU, 1, 0};
    xt_proj *p = NULL;
    xt_chanset cs;
    memset(&cs, 0, sizeof cs);
    if (!(rc = xt_proj_create(&po, &p, msg)) && !(rc = xt_proj_add_model(p, sc->models[i], msg)))
      rc = xt_proj_channels(p, &cs, msg);
    xt_proj_destroy(p);
    if (!rc && cs.n == 0)
      rc = xt_fail(msg, XT_EUNSUPPORTED,
                   "%s: chain: model \"%s\" (%s) has no material channels yet, so the imaging chain cannot see it "
                   "(docs/imaging.md, \"Material channels\")",
                   base, s->models[i].name, xt_model_kind_name(sc->models[i]->kind));
    if (rc) goto fail;
  }
  for (int k = 0; k < s->nchannels; k++) {
    const xt_ds_channel_spec *cs = &s->channels[k];
    const xt_model *src = sc->models[cs->model];
    if (!xt_model_volume(src)) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: labels.channels[%d]: model \"%s\" is not a voxel model", base, k,
                   s->models[cs->model].name);
      goto fail;
    }
    if (cs->kind == XT_DS_CH_LABELS && src->kind != XT_MODEL_LABELS) {
      rc = xt_fail(msg, XT_EINVAL, "%s: labels.channels[%d]: model \"%s\" holds mu, not labels", base, k,
                   s->models[cs->model].name);
      goto fail;
    }
    xt_msg cm;
    if ((rc = make_channel(s, cs, src, &sc->chan_model[k], &cm))) {
      xt_fail(msg, rc, "%s: labels.channels[%d]: %s", base, k, cm.text);
      goto fail;
    }
    sc->chan_model[k]->placement = sc->placement[cs->model];
    sc->chan_src[k] = s->models[cs->model].follows >= 0 ? s->models[cs->model].follows : cs->model;
  }
  return 0;
fail:
  xt_ds_scene_free(sc);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Renderers                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Projectors per detector mode: the CUDA projector sizes its scratch (pinned buffers included) for
 * one detector and re-allocates it when the size changes, so frames of several modes each go to
 * their mode's projectors (models are then uploaded once per mode). */
struct xt_ds_renderer {
  const xt_ds_scene *sc;
  int ngroups, nmodes;
  int group_src[XT_DS_MAX_MODELS]; /* the model whose perturbation the group follows */
  xt_proj *group[XT_DS_MAX_MODES][XT_DS_MAX_MODELS];
  xt_proj *chan[XT_DS_MAX_MODES][XT_DS_MAX_CHANNELS];
  xt_chain *chain[XT_DS_MAX_MODES]; /* on group[mode][0], the one image group (the spec checks) */
  /* Scratch, one set for the image and one for the labels: the two may render at once, from two
   * threads, each through its own projectors. */
  xt_geometry *g, *gl; /* n render geometries */
  float *tmp;          /* a second group's frames, summed into the image (xt_host_alloc: no staging) */
  size_t gcap, glcap, tcap;
  xt_backend backend;
};

void xt_ds_renderer_free(xt_ds_renderer *r) {
  if (!r) return;
  for (int m = 0; m < XT_DS_MAX_MODES; m++) {
    xt_chain_destroy(r->chain[m]); /* before its projector */
    for (int i = 0; i < XT_DS_MAX_MODELS; i++) xt_proj_destroy(r->group[m][i]);
    for (int k = 0; k < XT_DS_MAX_CHANNELS; k++) xt_proj_destroy(r->chan[m][k]);
  }
  free(r->g);
  free(r->gl);
  xt_host_free(r->backend, r->tmp);
  free(r);
}

int xt_ds_renderer_create(const xt_ds_scene *sc, xt_backend backend, int device, int threads, xt_ds_renderer **out,
                          xt_msg *msg) {
  const xt_ds_spec *s = sc->spec;
  xt_ds_renderer *r = calloc(1, sizeof *r);
  int rc = 0;
  *out = NULL;
  if (!r) return xt_fail(msg, XT_ENOMEM, "out of memory");
  r->sc = sc;
  r->backend = backend;
  xt_proj_options po = {backend, threads, device};
  for (int m = 0; m < s->nmodels; m++) {
    if (!s->models[m].in_image) continue;
    const int src = s->models[m].follows >= 0 ? s->models[m].follows : m;
    int g = 0;
    while (g < r->ngroups && r->group_src[g] != src) g++;
    if (g == r->ngroups) r->group_src[r->ngroups++] = src;
  }
  /* The CPU projector keeps no per-detector state: one set serves every mode. */
  r->nmodes = backend == XT_BACKEND_CUDA ? s->nmodes : 1;
  for (int mode = 0; mode < r->nmodes; mode++) {
    for (int m = 0; m < s->nmodels; m++) {
      if (!s->models[m].in_image) continue;
      const int src = s->models[m].follows >= 0 ? s->models[m].follows : m;
      int g = 0;
      while (r->group_src[g] != src) g++;
      if (!r->group[mode][g] && (rc = xt_proj_create(&po, &r->group[mode][g], msg))) goto fail;
      if ((rc = xt_proj_add_model(r->group[mode][g], sc->models[m], msg))) goto fail;
    }
    for (int k = 0; k < s->nchannels; k++)
      if ((rc = xt_proj_create(&po, &r->chan[mode][k], msg)) ||
          (rc = xt_proj_add_model(r->chan[mode][k], sc->chan_model[k], msg)))
        goto fail;
    if (s->chain.present && (rc = xt_chain_create(&s->chain.base, r->group[mode][0], &r->chain[mode], msg))) {
      if (strncmp(msg->text, "chain", 5) != 0) {
        char t[sizeof msg->text];
        snprintf(t, sizeof t, "%s", msg->text);
        xt_fail(msg, rc, "chain: %s", t);
      }
      goto fail;
    }
  }
  /* One frame through every CUDA projector now: it sizes its scratch (device and pinned buffers)
   * on the first render, which belongs to the set-up, not to the first batches. */
  if (backend == XT_BACKEND_CUDA) {
    for (int mode = 0; mode < r->nmodes && !rc; mode++) {
      const xt_detector_mode *md = s->modes[mode];
      xt_pose pose = xt_pose_default(md);
      xt_geometry g;
      float *tmp = malloc(sizeof *tmp * (size_t)md->rows * md->cols);
      if (!tmp) rc = xt_fail(msg, XT_ENOMEM, "out of memory");
      else if (!(rc = xt_geom_compute(&pose, md, &g, msg))) {
        for (int i = 0; i < r->ngroups && !rc; i++) rc = xt_proj_render_batch(r->group[mode][i], &g, 1, tmp, msg);
        for (int k = 0; k < s->nchannels && !rc; k++) rc = xt_proj_render_batch(r->chan[mode][k], &g, 1, tmp, msg);
        if (!rc && r->chain[mode]) { /* the chain's device scratch and panel maps, likewise */
          int orows, ocols;
          xt_ds_chain_size(s, mode, &orows, &ocols);
          uint16_t *u = malloc(sizeof *u * 2 * (size_t)orows * ocols);
          xt_chain_out co = {u, u ? u + (size_t)orows * ocols : NULL, NULL, NULL};
          rc = u ? xt_chain_frame(r->chain[mode], &g, 0, &co, msg) : xt_fail(msg, XT_ENOMEM, "out of memory");
          free(u);
        }
      }
      free(tmp);
    }
    if (rc) goto fail;
  }
  *out = r;
  return 0;
fail:
  xt_ds_renderer_free(r);
  return rc;
}

/* The geometry that renders the unmoved model as the frame sees the moved one: world -> patient
 * (minus the table), then E^-1. Only what the projectors read (source, detector frame) changes. */
static void render_geometry(const xt_ds_frame *f, int src, xt_geometry *g) {
  xt_affine einv;
  *g = f->geom;
  if (!xt_aff_invert(&f->perturb[src], &einv)) einv = xt_aff_identity(); /* rigid: never singular */
  const xt_vec3 t = f->geom.pose.table_mm;
  xt_vec3 *pts[3] = {&g->source, &g->det_center, &g->det_origin};
  for (int i = 0; i < 3; i++) *pts[i] = xt_aff_apply(&einv, xt_v3_sub(*pts[i], t));
  g->u = xt_aff_apply_dir(&einv, g->u);
  g->v = xt_aff_apply_dir(&einv, g->v);
  g->d = xt_aff_apply_dir(&einv, g->d);
  g->pose.table_mm = xt_v3(0, 0, 0);
}

static int ensure_geoms(xt_geometry **g, size_t *cap, int n, xt_msg *msg) {
  if ((size_t)n <= *cap) return 0;
  xt_geometry *ng = realloc(*g, sizeof *ng * (size_t)n);
  if (!ng) return xt_fail(msg, XT_ENOMEM, "out of memory");
  *g = ng;
  *cap = (size_t)n;
  return 0;
}

static int ensure(xt_ds_renderer *r, int n, size_t px, xt_msg *msg) {
  int rc = ensure_geoms(&r->g, &r->gcap, n, msg);
  if (rc) return rc;
  if (r->ngroups > 1 && (size_t)n * px > r->tcap) { /* grows to the largest batch, once */
    xt_host_free(r->backend, r->tmp);
    r->tmp = NULL;
    r->tcap = 0;
    if ((rc = xt_host_alloc(r->backend, sizeof *r->tmp * (size_t)n * px, (void **)&r->tmp, msg))) return rc;
    r->tcap = (size_t)n * px;
  }
  return 0;
}

int xt_ds_render_image(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *img, xt_msg *msg) {
  const size_t px = (size_t)f[0].geom.mode.rows * f[0].geom.mode.cols;
  int rc = ensure(r, n, px, msg);
  if (rc) return rc;
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  for (int gi = 0; gi < r->ngroups; gi++) {
    for (int i = 0; i < n; i++) render_geometry(&f[i], r->group_src[gi], &r->g[i]);
    float *dst = gi == 0 ? img : r->tmp;
    if ((rc = xt_proj_render_batch(r->group[mode][gi], r->g, n, dst, msg))) return rc;
    if (gi > 0)
      for (size_t k = 0; k < (size_t)n * px; k++) img[k] += r->tmp[k];
  }
  return 0;
}

int xt_ds_render_labels(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *const *chan, xt_msg *msg) {
  const xt_ds_spec *s = r->sc->spec;
  int rc = ensure_geoms(&r->gl, &r->glcap, n, msg);
  if (rc) return rc;
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  for (int k = 0; k < s->nchannels; k++) {
    for (int i = 0; i < n; i++) render_geometry(&f[i], r->sc->chan_src[k], &r->gl[i]);
    if ((rc = xt_proj_render_batch(r->chan[mode][k], r->gl, n, chan[k], msg))) return rc;
  }
  return 0;
}

/* Compared through the chain's table (the struct has padding). */
static int same_params(const xt_chain_params *a, const xt_chain_params *b) {
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    if (xt_chain_param_get(a, in) != xt_chain_param_get(b, in)) return 0;
  }
  return 1;
}

int xt_ds_render_chain(xt_ds_renderer *r, const xt_ds_frame *f, int n, uint16_t *raw, uint16_t *proc, xt_msg *msg) {
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  xt_chain *c = r->chain[mode];
  if (!c) return xt_fail(msg, XT_EINVAL, "chain: the spec has none");
  int orows, ocols;
  xt_ds_chain_size(r->sc->spec, f[0].mode, &orows, &ocols);
  const size_t opx = (size_t)orows * ocols;
  for (int i = 0; i < n; i++) {
    xt_geometry g;
    int rc, cr, cc;
    /* New tables only when a drawn parameter changed (kV, the mAs of a dose): the chain rebuilds
     * its spectrum tables and, on the GPU, uploads them. */
    if (!same_params(xt_chain_get_params(c), &f[i].chain) &&
        (rc = xt_chain_set_params(c, &f[i].chain, msg)))
      return rc;
    xt_chain_reset(c); /* a first exposure: nothing of the frame rendered before it lingers */
    render_geometry(&f[i], r->group_src[0], &g);
    xt_chain_out_size(c, &g, &cc, &cr);
    if (cc != ocols || cr != orows)
      return xt_fail(msg, XT_EINVAL, "chain: a %d x %d frame, expected %d x %d", cc, cr, ocols, orows);
    xt_chain_out co = {raw + (size_t)i * opx, proc + (size_t)i * opx, NULL, NULL};
    if ((rc = xt_chain_frame(c, &g, (uint64_t)f[i].index, &co, msg))) return rc;
  }
  return 0;
}
