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
 * Every render goes through the acquisition layer (acq/xt_acq.h), as the server's and `xtwin
 * render`'s do: each projector is an xt_acq_renderer, a batch of frames is one xt_acq_expose_batch
 * per group or channel (one projector call), and with a chain each worker's image renderer of a
 * detector mode holds its imaging chain (the spec keeps the image models in one group), every frame
 * an xt_acq_expose of its own with XT_ACQ_FIRST_EXPOSURE, keyed by the frame's index
 * (xt_ds_render_chain). No xt_acq_plane: the frames are independent, with no dose-rate loop or
 * totals; a biplane spec's plane B views are frames like plane A's, of their own mode and pose. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xt_acq.h"
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
  if (ms->source == XT_DS_SRC_PHANTOM && ms->phantom_labels == 2) /* the thorax: contrast regions */
    return xt_phantom_thorax_model(ms->spacing_mm, out, msg);
  if (ms->source == XT_DS_SRC_PHANTOM) {
    int dim[3] = {ms->size, ms->size, ms->size};
    return xt_phantom_head_model(dim, ms->spacing_mm, ms->phantom_labels ? XT_VOXEL_U8 : XT_VOXEL_F32, out, msg);
  }
#ifdef XT_HAVE_LOADERS
  if (ms->source == XT_DS_SRC_FILE) {
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS,
                                           XT_LOAD_CONTRAST_MASK};
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
  /* Contrast: each region a label its model's table flags (a contrast mask's come from its file). */
  for (int k = 0; k < s->contrast.nregions; k++) {
    const xt_volume *v = xt_model_volume(sc->models[s->contrast.model[k]]);
    const int l = s->contrast.label[k];
    if (!v || !v->materials || l >= v->materials->count || !v->materials->contrast[l]) {
      rc = xt_fail(msg, XT_EINVAL, "%s: contrast.regions[%d]: \"%s\": label %d of model \"%s\" is no contrast region "
                                   "(a \"thorax\" phantom's regions, or a file read with \"convert\": \"contrast-mask\")",
                   base, k, s->contrast.region[k], l, s->models[s->contrast.model[k]].name);
      goto fail;
    }
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
  xt_proj *group[XT_DS_MAX_MODES][XT_DS_MAX_MODELS]; /* owned; rendered through img */
  xt_proj *chan[XT_DS_MAX_MODES][XT_DS_MAX_CHANNELS];
  /* The acquisition layer's renderers on those projectors; img[mode][0] holds the mode's chain
   * (the one image group: the spec checks), made at set-up from the spec's chain. */
  xt_acq_renderer img[XT_DS_MAX_MODES][XT_DS_MAX_MODELS];
  xt_acq_renderer lab[XT_DS_MAX_MODES][XT_DS_MAX_CHANNELS];
  /* Scratch, one set for the image and one for the labels: the two may render at once, from two
   * threads, each through its own projectors. */
  xt_geometry *g, *gl;    /* n render geometries */
  xt_acq_request *q, *ql; /* n requests (their geometries those above) */
  xt_acq_frame *rec, *recl; /* n records */
  float *tmp;          /* a second group's frames, summed into the image (xt_host_alloc: no staging) */
  xt_acq_iodine *io;   /* contrast: n x XT_DS_MAX_REGIONS, each frame's regions of the group rendered */
  size_t gcap, glcap, tcap, iocap;
  xt_backend backend;
};

void xt_ds_renderer_free(xt_ds_renderer *r) {
  if (!r) return;
  for (int m = 0; m < XT_DS_MAX_MODES; m++) {
    for (int i = 0; i < XT_DS_MAX_MODELS; i++) {
      xt_acq_renderer_free(&r->img[m][i]); /* the chain, before its projector */
      xt_proj_destroy(r->group[m][i]);
    }
    for (int k = 0; k < XT_DS_MAX_CHANNELS; k++) {
      xt_acq_renderer_free(&r->lab[m][k]);
      xt_proj_destroy(r->chan[m][k]);
    }
  }
  free(r->g);
  free(r->gl);
  free(r->q);
  free(r->ql);
  free(r->rec);
  free(r->recl);
  xt_host_free(r->backend, r->tmp);
  free(r->io);
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
  r->nmodes = backend == XT_BACKEND_CUDA ? s->nmodes_all : 1; /* both planes' modes */
  for (int mode = 0; mode < r->nmodes; mode++) {
    for (int m = 0; m < s->nmodels; m++) {
      if (!s->models[m].in_image) continue;
      const int src = s->models[m].follows >= 0 ? s->models[m].follows : m;
      int g = 0;
      while (r->group_src[g] != src) g++;
      if (!r->group[mode][g]) {
        if ((rc = xt_proj_create(&po, &r->group[mode][g], msg))) goto fail;
        /* the chain's CPU stages on all cores, as they always ran (threads 0: the chain's default) */
        xt_acq_renderer_init(&r->img[mode][g], r->group[mode][g], 0);
      }
      if ((rc = xt_acq_renderer_add_model(&r->img[mode][g], sc->models[m], msg))) goto fail;
    }
    for (int k = 0; k < s->nchannels; k++) {
      if ((rc = xt_proj_create(&po, &r->chan[mode][k], msg))) goto fail;
      xt_acq_renderer_init(&r->lab[mode][k], r->chan[mode][k], 0);
      if ((rc = xt_acq_renderer_add_model(&r->lab[mode][k], sc->chan_model[k], msg))) goto fail;
    }
    if (s->chain.present && (rc = xt_acq_renderer_chain(&r->img[mode][0], &s->chain.base, msg))) {
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
        /* the chain's device scratch and panel maps, likewise */
        if (!rc && s->chain.present) rc = xt_acq_renderer_warmup(&r->img[mode][0], &s->chain.base, &g, msg);
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

/* n geometries, requests and records, grown together to the largest batch. */
static int ensure_batch(xt_geometry **g, xt_acq_request **q, xt_acq_frame **rec, size_t *cap, int n, xt_msg *msg) {
  if ((size_t)n <= *cap) return 0;
  xt_geometry *ng = realloc(*g, sizeof *ng * (size_t)n);
  if (ng) *g = ng;
  xt_acq_request *nq = ng ? realloc(*q, sizeof *nq * (size_t)n) : NULL;
  if (nq) *q = nq;
  xt_acq_frame *nr = nq ? realloc(*rec, sizeof *nr * (size_t)n) : NULL;
  if (!nr) return xt_fail(msg, XT_ENOMEM, "out of memory");
  *rec = nr;
  *cap = (size_t)n;
  return 0;
}

static int ensure(xt_ds_renderer *r, int n, size_t px, xt_msg *msg) {
  int rc = ensure_batch(&r->g, &r->q, &r->rec, &r->gcap, n, msg);
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

/* Contrast: frame f's regions whose model is in the group following src, into io (q's iodine). */
static void frame_iodine(const xt_ds_renderer *r, const xt_ds_frame *f, int src, xt_acq_iodine *io,
                         xt_acq_request *q) {
  const xt_ds_spec *s = r->sc->spec;
  int n = 0;
  for (int k = 0; k < s->contrast.nregions; k++) {
    const int m = s->contrast.model[k];
    if ((s->models[m].follows >= 0 ? s->models[m].follows : m) != src) continue;
    io[n++] = (xt_acq_iodine){r->sc->models[m], s->contrast.label[k], f->iodine_mg_ml[k] * 1e-3}; /* g/cm^3 */
  }
  q->iodine = n ? io : NULL;
  q->niodine = n;
}

static int ensure_iodine(xt_ds_renderer *r, int n, xt_msg *msg) {
  if (!r->sc->spec->contrast.present || (size_t)n <= r->iocap) return 0;
  xt_acq_iodine *io = realloc(r->io, sizeof *io * (size_t)n * XT_DS_MAX_REGIONS);
  if (!io) return xt_fail(msg, XT_ENOMEM, "out of memory");
  r->io = io;
  r->iocap = (size_t)n;
  return 0;
}

/* The mono exposures of n frames: line integrals of the render geometries g[i] (filled per group
 * or channel before each batch), numbered by the frames' indices. */
static void mono_requests(const xt_ds_frame *f, int n, const xt_geometry *g, xt_acq_request *q) {
  for (int i = 0; i < n; i++) {
    memset(&q[i], 0, sizeof q[i]);
    q[i].geom = &g[i];
    q[i].want = XT_ACQ_WANT_LINEINT;
    q[i].counter = (uint64_t)f[i].index;
  }
}

int xt_ds_render_image(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *img, xt_msg *msg) {
  const size_t px = (size_t)f[0].geom.mode.rows * f[0].geom.mode.cols;
  int rc = ensure(r, n, px, msg);
  if (rc) return rc;
  if ((rc = ensure_iodine(r, n, msg))) return rc;
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  mono_requests(f, n, r->g, r->q);
  for (int gi = 0; gi < r->ngroups; gi++) {
    for (int i = 0; i < n; i++) render_geometry(&f[i], r->group_src[gi], &r->g[i]);
    /* contrast: runs of frames with equal iodine go to the projector together (xt_acq_expose_batch) */
    for (int i = 0; i < n && r->io; i++)
      frame_iodine(r, &f[i], r->group_src[gi], r->io + (size_t)i * XT_DS_MAX_REGIONS, &r->q[i]);
    float *dst = gi == 0 ? img : r->tmp;
    if ((rc = xt_acq_expose_batch(&r->img[mode][gi], r->q, n, dst, r->rec, msg))) return rc;
    if (gi > 0)
      for (size_t k = 0; k < (size_t)n * px; k++) img[k] += r->tmp[k];
  }
  return 0;
}

int xt_ds_render_labels(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *const *chan, xt_msg *msg) {
  const xt_ds_spec *s = r->sc->spec;
  int rc = ensure_batch(&r->gl, &r->ql, &r->recl, &r->glcap, n, msg);
  if (rc) return rc;
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  mono_requests(f, n, r->gl, r->ql);
  for (int k = 0; k < s->nchannels; k++) {
    for (int i = 0; i < n; i++) render_geometry(&f[i], r->sc->chan_src[k], &r->gl[i]);
    if ((rc = xt_acq_expose_batch(&r->lab[mode][k], r->ql, n, chan[k], r->recl, msg))) return rc;
  }
  return 0;
}

/* Where a chain exposure's raw and processed frames go: the caller's slots, of the spec's size. */
typedef struct chain_slot {
  uint16_t *raw, *proc;
  int orows, ocols;
} chain_slot;

static int chain_buffers(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  const chain_slot *o = ctx;
  if (fr->raw.cols != o->ocols || fr->raw.rows != o->orows)
    return xt_fail(msg, XT_EINVAL, "chain: a %d x %d frame, expected %d x %d", fr->raw.cols, fr->raw.rows, o->ocols,
                   o->orows);
  fr->raw.data = o->raw;
  fr->proc.data = o->proc;
  return 0;
}

int xt_ds_render_chain(xt_ds_renderer *r, xt_ds_frame *f, int n, uint16_t *raw, uint16_t *proc, xt_msg *msg) {
  const int mode = r->nmodes > 1 ? f[0].mode : 0;
  xt_acq_renderer *ar = &r->img[mode][0];
  if (!ar->chain) return xt_fail(msg, XT_EINVAL, "chain: the spec has none");
  chain_slot o;
  xt_ds_chain_size(r->sc->spec, f[0].mode, &o.orows, &o.ocols);
  const size_t opx = (size_t)o.orows * o.ocols;
  /* Each frame a first exposure (nothing rendered before it lingers) keyed by its index, with its
   * drawn parameters: the renderer gives them to the chain only when one changed (kV, the mAs of a
   * dose), as new tables are a rebuild and, on the GPU, an upload. */
  xt_acq_request q;
  memset(&q, 0, sizeof q);
  q.want = XT_ACQ_WANT_CHAIN;
  q.chain = 1;
  q.flags = XT_ACQ_FIRST_EXPOSURE;
  q.buffers = chain_buffers;
  q.ctx = &o;
  xt_acq_iodine io[XT_DS_MAX_REGIONS];
  for (int i = 0; i < n; i++) {
    if (r->sc->spec->contrast.present) frame_iodine(r, &f[i], r->group_src[0], io, &q); /* the one image group */
    xt_geometry g;
    xt_acq_frame rec;
    int rc;
    render_geometry(&f[i], r->group_src[0], &g);
    q.geom = &g;
    q.chain_prm = f[i].chain;
    q.counter = (uint64_t)f[i].index;
    o.raw = raw + (size_t)i * opx;
    o.proc = proc + (size_t)i * opx;
    if ((rc = xt_acq_expose(NULL, ar, &q, &rec, msg))) return rc;
    f[i].chain_info = rec.info;
    f[i].dose = rec.dose; /* of the render geometry: a rigid motion keeps distances and the field */
  }
  return 0;
}
