/* The frame's members in `xtwin dataset`: what each frame writes (lineint, intensity, raw,
 * processed, labels, seg as NPY v1.0 arrays, and a JSON of the frame's geometry, pose, imaging
 * parameters, seed and landmarks), the per-writer scratch for the derived images, and the byte
 * counts of the dry run. Every shard format writes exactly these members, in this order
 * (xt_dataset_shard.h); docs/dataset.md gives the layout, api/python/xtwin_dataset.py reads it.
 *
 * The arrays are handed on as pieces that point into the render buffers, never copied here: the
 * writers send them to writev(2) and hash exactly those bytes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "xt_dataset_internal.h"
#include "xt_dataset_shard.h"
#include "xt_record.h"

/* ------------------------------------------------------------------------------------------ */
/* Members                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* seg.npy: one bit per channel in the smallest unsigned integer that holds them all. */
static int seg_bytes(int nchannels) { return nchannels <= 8 ? 1 : nchannels <= 16 ? 2 : nchannels <= 32 ? 4 : 8; }
static const char *const seg_dtype[] = {"|u1", "<u2", "", "<u4", "", "", "", "<u8"};

/* Plane B's members are plane A's names with "_b" before ".npy": both planes of one instant
 * share the frame's key, so WebDataset and the reader keep them together as one sample. */
int xt_ds_members(const xt_ds_spec *s, xt_ds_member_info *out, int max) {
  int n = 0;
  const int planes = s->plane_b.present ? 2 : 1;
#define ADD(e, d, nd)                                                                                               \
  do {                                                                                                              \
    if (n < max) {                                                                                                  \
      snprintf(out[n].ext, sizeof out[n].ext, "%s%s%s", e, pl ? "_b" : "", nd ? ".npy" : "");                      \
      snprintf(out[n].dtype, sizeof out[n].dtype, "%s", d);                                                         \
      out[n].ndim = nd;                                                                                             \
      out[n].plane = pl;                                                                                            \
    }                                                                                                               \
    n++;                                                                                                            \
  } while (0)
  for (int pl = 0; pl < planes; pl++) {
    if (s->write.lineint) ADD("lineint", "<f4", 2);
    if (s->write.intensity) ADD("intensity", "<u2", 2);
    if (s->write.raw) ADD("raw", "<u2", 2);
    if (s->write.processed) ADD("processed", "<u2", 2);
    if (s->write.labels) ADD("labels", "<f4", 3);
    if (s->write.segmentation) ADD("seg", seg_dtype[seg_bytes(s->nchannels) - 1], 2);
  }
  {
    const int pl = 0;
    ADD("json", "", 0);
  }
#undef ADD
  return n;
}

/* A chain member (binned to the chain's size): raw or processed, of either plane. */
static int chain_member(const char *ext) { return !strncmp(ext, "raw", 3) || !strncmp(ext, "processed", 9); }

/* Data bytes (NPY header included) of member i for mode m. */
static size_t member_data_bytes(const xt_ds_spec *s, const xt_ds_member_info *mi, int mode) {
  const xt_detector_mode *md = s->modes[mode];
  int shape[3] = {s->nchannels, md->rows, md->cols};
  if (chain_member(mi->ext)) xt_ds_chain_size(s, mode, &shape[1], &shape[2]);
  char h[XT_NPY_HEADER_MAX];
  const int *sh = mi->ndim == 3 ? shape : shape + 1;
  return xt_npy_header(h, sizeof h, mi->dtype, mi->ndim, sh) + xt_npy_data_bytes(mi->dtype, mi->ndim, sh);
}

size_t xt_ds_frame_bytes(const xt_ds_spec *s, int mode, size_t json_bytes) {
  const xt_ds_shard_ops *fmt = xt__ds_shard_format(s);
  xt_ds_member_info mi[32];
  int n = xt_ds_members(s, mi, 32);
  /* Plane B's members at its largest mode: the bound the shard size and the estimate want. */
  int mode_b = 0;
  for (int k = 0; k < s->plane_b.nmodes; k++) {
    const xt_detector_mode *a = s->modes[s->plane_b.modes[k]], *b = s->modes[s->plane_b.modes[mode_b]];
    if ((size_t)a->rows * a->cols > (size_t)b->rows * b->cols) mode_b = k;
  }
  size_t b = 0;
  for (int i = 0; i < n; i++) {
    size_t d = mi[i].ndim ? member_data_bytes(s, &mi[i], mi[i].plane ? s->plane_b.modes[mode_b] : mode) : json_bytes;
    b += fmt->member_bytes(d);
  }
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoder: per-writer scratch and the frame's JSON                                            */
/* ------------------------------------------------------------------------------------------ */

struct xt_ds_encoder {
  const xt_ds_scene *sc;
  xt_acq_frame rec[2];   /* each plane as one exposure's record (frame_record) */
  xt_frame_fields ff[2]; /* ... and its fields, as every record encoder states them */
  uint16_t *u16[2];      /* per plane: the writer sends both planes' members at once */
  unsigned char *seg[2];
  char *json;
  size_t px;
};

void xt_ds_encoder_free(xt_ds_encoder *e) {
  if (!e) return;
  for (int p = 0; p < 2; p++) {
    free(e->u16[p]);
    free(e->seg[p]);
  }
  free(e->json);
  free(e);
}

int xt_ds_encoder_create(const xt_ds_scene *sc, xt_ds_encoder **out, xt_msg *msg) {
  const xt_ds_spec *s = sc->spec;
  xt_ds_encoder *e = calloc(1, sizeof *e);
  if (!e) return xt_fail(msg, XT_ENOMEM, "out of memory");
  e->sc = sc;
  for (int i = 0; i < s->nmodes_all; i++) {
    size_t px = (size_t)s->modes[i]->rows * s->modes[i]->cols;
    if (px > e->px) e->px = px;
  }
  int bad = 0;
  for (int p = 0; p < (s->plane_b.present ? 2 : 1); p++) {
    e->u16[p] = malloc(e->px * sizeof *e->u16[p]);
    e->seg[p] = malloc(e->px * 8);
    bad |= !e->u16[p] || !e->seg[p];
  }
  if (bad) {
    xt_ds_encoder_free(e);
    return xt_fail(msg, XT_ENOMEM, "out of memory for the encoder's scratch");
  }
  *out = e;
  return 0;
}

/* A dataset frame as the record of one exposure: its stated geometry (not the render geometry of
 * a moved model), its index as the frame number, the chain's settings it was exposed with. */
static void frame_record(const xt_ds_spec *s, const xt_ds_frame *f, xt_acq_frame *r) {
  memset(r, 0, sizeof *r);
  r->counter = (uint64_t)f->index;
  r->plane = f->plane;
  r->geom = f->geom;
  xt_P_to_pixel_edge(f->geom.P, r->P_edge);
  if (s->chain.present) {
    r->chain = 1;
    r->prm = f->chain;
  }
}

/* Every parameter that shaped the frame's raw and processed images, by the chain's table (as the
 * render sidecar's "chain" object), and what reproduces the frame alone. */
static json_t *chain_json(const xt_ds_spec *s, const xt_ds_frame *f, const xt_frame_fields *ff, xt_jb *b) {
  json_t *ch = json_object(), *prm = json_object(), *units = json_object(), *fl = json_object();
  int rows, cols;
  xt_jb_put(b, ch, "frame", json_integer((json_int_t)ff->counter));
  xt_jb_put(b, ch, "frame_note", json_string("the chain's frame number (the dataset's frame index): with parameters.seed it "
                                       "keys the frame's noise; each frame is a first exposure (lag and temporal "
                                       "filter start from zero)"));
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    const double v = xt_chain_param_get(ff->prm, in);
    xt_jb_put(b, prm, in->name, in->type == XT_PARAM_REAL ? json_real(v) : json_integer((json_int_t)v));
    if (*in->unit) xt_jb_put(b, units, in->name, json_string(in->unit));
  }
  xt_jb_put(b, ch, "parameters", prm);
  xt_jb_put(b, ch, "units", units);
  xt_jb_put(b, ch, "noise", json_boolean(s->chain.noise));
  if (s->chain.dose_set) xt_jb_put(b, ch, "dose_ngy", json_real(f->dose_ngy));
  xt_ds_chain_size(s, f->mode, &rows, &cols);
  if (s->write.raw) xt_jb_put(b, fl, "raw", json_string("raw.npy: uint16 ADC codes (\"for processing\"), 0 .. 2^adc_bits - 1"));
  if (s->write.processed)
    xt_jb_put(b, fl, "processed", json_string("processed.npy: uint16, 12 bits stored (\"for presentation\"), attenuation dark"));
  xt_jb_put(b, fl, "rows", json_integer(rows));
  xt_jb_put(b, fl, "cols", json_integer(cols));
  xt_jb_put(b, ch, "files", fl);
  xt_jb_put(b, ch, "model", json_string("docs/imaging.md"));
  return ch;
}

/* One plane's detector, pose and geometry, put into obj (the frame's root for plane A, so its
 * keys keep their places there). */
static void plane_json(const xt_ds_frame *f, const xt_frame_fields *ff, xt_jb *b, json_t *obj) {
  const xt_geometry *g = &f->geom;
  json_t *det = json_object();
  xt_jb_put(b, det, "mode", json_string(ff->mode));
  xt_jb_put(b, det, "rows", json_integer(g->mode.rows));
  xt_jb_put(b, det, "cols", json_integer(g->mode.cols));
  xt_jb_put(b, det, "pitch_u_mm", json_real(g->mode.pitch_u_mm));
  xt_jb_put(b, det, "pitch_v_mm", json_real(g->mode.pitch_v_mm));
  xt_jb_put(b, det, "readout", xt_readout_json(b, ff));
  xt_jb_put(b, obj, "detector", det);

  json_t *pose = json_object();
  xt_jb_put(b, pose, "primary_deg", json_real(ff->pose[0]));
  xt_jb_put(b, pose, "secondary_deg", json_real(ff->pose[1]));
  xt_jb_put(b, pose, "detector_rot_deg", json_real(ff->pose[2]));
  xt_jb_put(b, pose, "sod_mm", json_real(ff->pose[3]));
  xt_jb_put(b, pose, "sid_mm", json_real(ff->pose[4]));
  xt_jb_put(b, pose, "table_mm", xt_jb_vec(b, ff->pose + 5, 3));
  xt_jb_put(b, obj, "pose", pose);

  json_t *geo = json_object();
  xt_jb_put(b, geo, "P", xt_jb_mat34(b, ff->P));
  xt_jb_put(b, geo, "P_pixel_edge", xt_jb_mat34(b, ff->P_edge)); /* DeepDRR's and DiffDRR's (docs/geometry.md) */
  xt_jb_put(b, geo, "source", xt_jb_vec3(b, g->source));
  xt_jb_put(b, geo, "det_center", xt_jb_vec3(b, g->det_center));
  xt_jb_put(b, geo, "det_origin", xt_jb_vec3(b, g->det_origin));
  xt_jb_put(b, geo, "u", xt_jb_vec3(b, g->u));
  xt_jb_put(b, geo, "v", xt_jb_vec3(b, g->v));
  xt_jb_put(b, geo, "d", xt_jb_vec3(b, g->d));
  xt_jb_put(b, geo, "principal_point", xt_jb_vec(b, ff->principal, 2));
  xt_jb_put(b, obj, "geometry", geo);
}

/* The landmarks as one plane sees them. */
static json_t *landmarks_json(const xt_ds_spec *s, const xt_ds_frame *f, xt_jb *b) {
  const xt_geometry *g = &f->geom;
  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  json_t *lms = json_array();
  for (int i = 0; i < s->nlandmarks; i++) {
    const xt_ds_landmark *l = &s->landmarks[i];
    xt_vec3 pm = xt_v3(l->pos[0], l->pos[1], l->pos[2]);
    xt_vec3 pw = xt_aff_apply(&p2w, xt_aff_apply(&f->model_to_patient[l->model], pm));
    double col = 0, row = 0;
    int front = xt_geom_project(g, pw, &col, &row);
    double depth = xt_v3_dot(g->d, xt_v3_sub(pw, g->source));
    int vis = front && col >= -0.5 && col <= g->mode.cols - 0.5 && row >= -0.5 && row <= g->mode.rows - 0.5;
    json_t *lo = json_object();
    xt_jb_put(b, lo, "name", json_string(l->name));
    xt_jb_put(b, lo, "world_mm", xt_jb_vec3(b, pw));
    double uv[2] = {col, row};
    xt_jb_put(b, lo, "uv", front ? xt_jb_vec(b, uv, 2) : json_null());
    xt_jb_put(b, lo, "depth_mm", json_real(depth));
    xt_jb_put(b, lo, "visible", json_boolean(vis));
    xt_jb_push(b, lms, lo);
  }
  return lms;
}

/* Plane B of the instant: the same keys as plane A's at the top level (detector, pose, geometry,
 * imaging.chain, landmarks), so a reader takes meta["plane_b"]["geometry"]["P"] as it takes
 * meta["geometry"]["P"]; the patient side (models, table) is plane A's and is not repeated. */
static json_t *plane_b_json(const xt_ds_spec *s, const xt_ds_frame *f, const xt_frame_fields *ff, xt_jb *b) {
  json_t *o = json_object();
  char seed[24];
  snprintf(seed, sizeof seed, "%016llx", (unsigned long long)f->seed);
  xt_jb_put(b, o, "plane", json_string("B"));
  xt_jb_put(b, o, "seed", json_string(seed));
  plane_json(f, ff, b, o);
  json_t *im = json_object();
  xt_jb_put(b, im, "chain", s->chain.present ? chain_json(s, f, ff, b) : json_null());
  xt_jb_put(b, o, "imaging", im);
  if (s->write.landmarks) xt_jb_put(b, o, "landmarks", landmarks_json(s, f, b));
  return o;
}

static json_t *frame_json(const xt_ds_scene *sc, const xt_ds_frame *f, const xt_frame_fields *ff,
                          const xt_ds_frame *fb, const xt_frame_fields *ffb, xt_jb *b) {
  const xt_ds_spec *s = sc->spec;
  const xt_geometry *g = &f->geom;
  json_t *root = json_object();
  char key[32], seed[24];
  snprintf(key, sizeof key, "%0*lld", XT__DS_KEY_DIGITS, f->index);
  snprintf(seed, sizeof seed, "%016llx", (unsigned long long)f->seed);
  xt_jb_put(b, root, "key", json_string(key));
  xt_jb_put(b, root, "frame", json_integer(f->index));
  xt_jb_put(b, root, "shard", json_integer(f->index / s->shard_frames));
  xt_jb_put(b, root, "seed", json_string(seed));
  xt_jb_put(b, root, "spec_sha256", json_string(s->sha256));
  if (s->poses.sampler == XT_DS_POSES_VIEWS) xt_jb_put(b, root, "view", json_string(s->poses.views[f->view].name));
  if (s->poses.sampler == XT_DS_POSES_ARC) {
    xt_jb_put(b, root, "run", json_integer(f->run));
    xt_jb_put(b, root, "view_in_run", json_integer(f->view));
  }
  plane_json(f, ff, b, root);

  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  json_t *models = json_array();
  for (int m = 0; m < s->nmodels; m++) {
    json_t *mo = json_object();
    xt_affine m2w = xt_aff_compose(&p2w, &f->model_to_patient[m]);
    xt_jb_put(b, mo, "name", json_string(s->models[m].name));
    xt_jb_put(b, mo, "in_image", json_boolean(s->models[m].in_image));
    xt_jb_put(b, mo, "translate_mm", xt_jb_vec(b, f->translate_mm[m], 3));
    xt_jb_put(b, mo, "rotate_deg", xt_jb_vec(b, f->rotate_deg[m], 3));
    xt_jb_put(b, mo, "model_to_world", xt_jb_affine34(b, &m2w));
    xt_jb_push(b, models, mo);
  }
  xt_jb_put(b, root, "models", models);

  json_t *im = json_object();
  xt_jb_put(b, im, "image", json_string("ideal monoenergetic line integrals L = integral of mu dl (no spectrum, no detector)"));
  const xt_volume *lv = NULL;
  for (int m = 0; m < s->nmodels && !lv; m++) {
    const xt_volume *mv = sc->models[m] ? xt_model_volume(sc->models[m]) : NULL;
    if (mv && mv->materials) lv = mv;
  }
  xt_jb_put(b, im, "energy_kev", json_real(lv ? lv->materials->energy_kev : XT_DEFAULT_ENERGY_KEV));
  if (s->write.intensity) xt_jb_put(b, im, "intensity", json_string("round(65535 * exp(-L)), uint16"));
  xt_jb_put(b, im, "chain", s->chain.present ? chain_json(s, f, ff, b) : json_null());
  xt_jb_put(b, root, "imaging", im);

  if (s->write.labels || s->write.segmentation) {
    json_t *lab = json_object(), *names = json_array();
    for (int k = 0; k < s->nchannels; k++) xt_jb_push(b, names, json_string(s->channels[k].name));
    xt_jb_put(b, lab, "channels", names);
    xt_jb_put(b, lab, "quantity", json_string(s->quantity == XT_DS_QTY_PATH_LENGTH ? "path_length_mm" : "line_integral"));
    if (s->write.segmentation) xt_jb_put(b, lab, "segmentation", json_string("bit k of seg.npy: channel k's value > 0"));
    xt_jb_put(b, root, "labels", lab);
  }

  if (s->contrast.present) { /* the iodine this frame's regions were rendered with (both planes': one instant) */
    const xt_ds_contrast_spec *ct = &s->contrast;
    json_t *co = json_object(), *mg = json_object();
    for (int k = 0; k < ct->nregions; k++) xt_jb_put(b, mg, ct->region[k], json_real(f->iodine_mg_ml[k]));
    xt_jb_put(b, co, "iodine_mg_ml", mg);
    if (ct->bolus) {
      json_t *in = json_object();
      xt_jb_put(b, in, "rate_ml_s", json_real(ct->rate_ml_s));
      xt_jb_put(b, in, "volume_ml", json_real(ct->volume_ml));
      xt_jb_put(b, in, "agent_mg_ml", json_real(ct->agent_mg_ml));
      xt_jb_put(b, co, "injection", in);
      xt_jb_put(b, co, "t_s", json_real(f->contrast_t_s));
    }
    xt_jb_put(b, co, "note", json_string("each region's material plus iodine at this concentration (partial density "
                                         "mg/mL / 1000 g/cm^3); t_s: after the injection's start (docs/contrast.md)"));
    xt_jb_put(b, root, "contrast", co);
  }
  if (s->write.landmarks) xt_jb_put(b, root, "landmarks", landmarks_json(s, f, b));
  if (fb) xt_jb_put(b, root, "plane_b", plane_b_json(s, fb, ffb, b));
  return root;
}

int xt_ds_frame_json(xt_ds_encoder *e, const xt_ds_frame *f, const xt_ds_frame *fb, const char **text, size_t *len,
                     xt_msg *msg) {
  xt_jb b = {0};
  const xt_ds_spec *s = e->sc->spec;
  if (!fb != !s->plane_b.present)
    return xt_fail(msg, XT_EINVAL, "frame %lld: %s", f->index, fb ? "plane B given, the spec has none" : "plane B missing");
  frame_record(s, f, &e->rec[0]);
  xt_frame_fields_of(&e->rec[0], &e->ff[0]);
  if (fb) {
    frame_record(s, fb, &e->rec[1]);
    xt_frame_fields_of(&e->rec[1], &e->ff[1]);
  }
  json_t *root = frame_json(e->sc, f, &e->ff[0], fb, &e->ff[1], &b);
  free(e->json);
  e->json = NULL;
  if (root && !b.bad) e->json = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!e->json) return xt_fail(msg, XT_EINTERNAL, "frame %lld: cannot encode its JSON (out of memory or NaN)", f->index);
  *text = e->json;
  *len = strlen(e->json);
  return 0;
}


/* ------------------------------------------------------------------------------------------ */
/* A frame's members                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Member KEY.ext of frame `key`: the NPY header (none where dtype is NULL: the JSON) and one piece
 * (more may follow); shape3 is (channels, rows, cols), 2-D members use the last two. */
static void add_member(xt_ds_member *m, long long key, const char *ext, const char *dtype, int ndim,
                       const int shape3[3], const void *p, size_t n) {
  snprintf(m->name, sizeof m->name, "%0*lld.%s", XT__DS_KEY_DIGITS, key, ext);
  m->npy_len = dtype ? xt_npy_header(m->npy, sizeof m->npy, dtype, ndim, ndim == 3 ? shape3 : shape3 + 1) : 0;
  m->data[0] = (xt_ds_piece){p, n};
  m->npieces = 1;
}

/* The array members of one plane (pl 1: plane B, names with "_b"), scratch from e's set pl. */
static int encode_plane(xt_ds_encoder *e, const xt_ds_frame_data *fd, int pl, long long key, xt_ds_member *mem,
                        int *nm, xt_msg *msg) {
  const xt_ds_spec *s = e->sc->spec;
  const xt_ds_frame *f = fd->frame;
  const int rows = f->geom.mode.rows, cols = f->geom.mode.cols;
  const size_t px = (size_t)rows * cols;
  int shape3[3] = {s->nchannels, rows, cols};
  const int sb = seg_bytes(s->nchannels);
  const char *sfx = pl ? "_b" : "";
  char ext[32];
#define EXT(name) (snprintf(ext, sizeof ext, "%s%s.npy", name, sfx), ext)
  if (s->write.lineint) add_member(&mem[(*nm)++], key, EXT("lineint"), "<f4", 2, shape3, fd->img, px * sizeof(float));
  if (s->write.intensity) {
    xt_intensity_u16(fd->img, px, e->u16[pl]);
    add_member(&mem[(*nm)++], key, EXT("intensity"), "<u2", 2, shape3, e->u16[pl], px * sizeof(uint16_t));
  }
  if (s->write.raw || s->write.processed) {
    int cshape[3] = {0, 0, 0};
    xt_ds_chain_size(s, f->mode, &cshape[1], &cshape[2]);
    const size_t cb = (size_t)cshape[1] * cshape[2] * sizeof(uint16_t);
    if (!fd->raw || !fd->proc) return xt_fail(msg, XT_EINVAL, "frame %lld: no chain frames", f->index);
    if (s->write.raw) add_member(&mem[(*nm)++], key, EXT("raw"), "<u2", 2, cshape, fd->raw, cb);
    if (s->write.processed) add_member(&mem[(*nm)++], key, EXT("processed"), "<u2", 2, cshape, fd->proc, cb);
  }
  if (s->write.labels) {
    xt_ds_member *m = &mem[(*nm)++];
    add_member(m, key, EXT("labels"), "<f4", 3, shape3, fd->chan[0], px * sizeof(float));
    for (int k = 1; k < s->nchannels; k++) m->data[m->npieces++] = (xt_ds_piece){fd->chan[k], px * sizeof(float)};
  }
  if (s->write.segmentation) {
    /* Little-endian bitmask, built byte by byte so the host's order does not matter. */
    unsigned char *seg = e->seg[pl];
    memset(seg, 0, px * (size_t)sb);
    for (int k = 0; k < s->nchannels; k++) {
      const float *c = fd->chan[k];
      const unsigned char bit = (unsigned char)(1u << (k & 7));
      unsigned char *dst = seg + (k >> 3);
      for (size_t p = 0; p < px; p++)
        if (c[p] > 0.0f) dst[p * (size_t)sb] |= bit;
    }
    add_member(&mem[(*nm)++], key, EXT("seg"), seg_dtype[sb - 1], 2, shape3, seg, px * (size_t)sb);
  }
#undef EXT
  return 0;
}

int xt__ds_encode_frame(xt_ds_encoder *e, const xt_ds_frame_data *fd, xt_ds_member *mem, int *count, xt_msg *msg) {
  const xt_ds_spec *s = e->sc->spec;
  const xt_ds_frame *f = fd->frame;
  int rc, nm = 0;
  *count = 0;
  if (!fd->b != !s->plane_b.present || (fd->b && (fd->b->b || fd->b->frame->index != f->index)))
    return xt_fail(msg, XT_EINVAL, "frame %lld: the planes of the instant do not match the spec's", f->index);
  if ((rc = encode_plane(e, fd, 0, f->index, mem, &nm, msg))) return rc;
  if (fd->b && (rc = encode_plane(e, fd->b, 1, f->index, mem, &nm, msg))) return rc;
  {
    const char *text;
    size_t len;
    int shape3[3] = {0, 0, 0};
    if ((rc = xt_ds_frame_json(e, f, fd->b ? fd->b->frame : NULL, &text, &len, msg))) return rc;
    add_member(&mem[nm++], f->index, "json", NULL, 0, shape3, text, len);
  }
  for (int i = 0; i < nm; i++) {
    mem[i].bytes = mem[i].npy_len;
    for (int k = 0; k < mem[i].npieces; k++) mem[i].bytes += mem[i].data[k].n;
  }
  *count = nm;
  return 0;
}
