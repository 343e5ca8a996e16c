/* The per-frame JSON sidecar, built with jansson (see xt_sidecar.h, docs/cli.md). Objects added
 * for real data (issue 14) stay in their own keys: "load" (what the loader noticed and chose),
 * "coverage" (did the model land on the detector) and "geometry_pixel_edge" (P in the convention
 * of DeepDRR and DiffDRR). */
#include "xt_model_jansson.h"
#include "xt_sidecar.h"
#ifdef XT_HAVE_LOADERS
#include "xt_load.h"
#endif

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* Builders that record the first failure instead of checking every call: json_object_set_new
 * and json_array_append_new take ownership of the value even when they fail (or it is NULL). */
typedef struct jb {
  int bad;
} jb;

static void put(jb *b, json_t *obj, const char *key, json_t *val) {
  if (!obj || json_object_set_new(obj, key, val) != 0) b->bad = 1;
}
static void push(jb *b, json_t *arr, json_t *val) {
  if (!arr || json_array_append_new(arr, val) != 0) b->bad = 1;
}
static json_t *num(double v) { return json_real(v); } /* NULL (an error) for NaN/inf */

static json_t *str(const char *s) { return json_string(s ? s : ""); }

static json_t *vec3(jb *b, xt_vec3 v) {
  json_t *a = json_array();
  push(b, a, num(v.x));
  push(b, a, num(v.y));
  push(b, a, num(v.z));
  return a;
}

static json_t *affine34(jb *b, const xt_affine *m) {
  json_t *a = json_array();
  for (int i = 0; i < 3; i++) {
    json_t *row = json_array();
    for (int j = 0; j < 3; j++) push(b, row, num(m->m[i][j]));
    push(b, row, num(m->t[i]));
    push(b, a, row);
  }
  return a;
}

static json_t *mat34(jb *b, const double M[3][4]) {
  json_t *a = json_array();
  for (int i = 0; i < 3; i++) {
    json_t *row = json_array();
    for (int j = 0; j < 4; j++) push(b, row, num(M[i][j]));
    push(b, a, row);
  }
  return a;
}

/* A number, or null when it is not finite (coverage of a box behind the source). */
static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *coverage_json(jb *b, const xt_sidecar_coverage *c) {
  json_t *o = json_object();
  put(b, o, "status", str(xt_cover_name(c->status)));
  put(b, o, "status_note", str("from this frame: missed = no pixel attenuated; clipped = pixels of the first/last row or "
                               "column attenuated (the shadow runs off the detector); inside = neither"));
  put(b, o, "pixels_attenuated", json_integer((json_int_t)c->pixels_nonzero));
  put(b, o, "edge_pixels_attenuated", json_integer((json_int_t)c->edge_pixels_nonzero));
  json_t *bb = json_array();
  for (int i = 0; i < 4; i++) push(b, bb, num_or_null(c->box.bbox[i]));
  put(b, o, "bbox_px", bb);
  put(b, o, "bbox_note", str("the model's bounding box projected through P: [col_min, row_min, col_max, row_max], "
                             "pixel-centre coordinates; the detector spans -0.5..cols-0.5, -0.5..rows-0.5"));
  put(b, o, "bbox_status", str(xt_cover_name(c->box.status)));
  put(b, o, "bbox_on_detector", num_or_null(c->box.on_detector));
  return o;
}

/* The model's own keys, as its kind describes them (xt_model_kind.h). */
static void describe(jb *b, const xt_model *m, xt_model_view view, json_t *obj) {
  if (!obj || xt_model_describe_json(m, view, obj) != 0) b->bad = 1;
}

static json_t *build(const xt_sidecar_info *in, jb *b) {
  const xt_geometry *g = in->geom;
  const xt_model *m = in->model;
  json_t *root = json_object();

  put(b, root, "format", str("xtwin-projection"));
  put(b, root, "format_version", json_integer(1));
  put(b, root, "xtwin_version", str(in->version));
  char ts[40] = "";
  time_t now = time(NULL);
  struct tm tmv;
  if (gmtime_r(&now, &tmv)) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  put(b, root, "created_utc", str(ts));

  json_t *units = json_object();
  put(b, units, "length", str("mm"));
  put(b, units, "angle", str("deg"));
  put(b, units, "mu", str("1/mm"));
  put(b, units, "line_integral", str("dimensionless: integral of mu dl along the ray, source to pixel"));
  put(b, units, "energy", str("keV"));
  put(b, root, "units", units);

  json_t *files = json_object();
  put(b, files, "npy", str(in->npy_file));
  put(b, files, "npy_content", str("float32 line integrals L, shape (rows, cols), C order, row 0 first"));
  put(b, files, "png", str(in->png_file));
  put(b, files, "png_content", str("16-bit grayscale intensity I/I0 scaled to 0..65535"));
  put(b, root, "files", files);

  json_t *inten = json_object();
  put(b, inten, "formula", str("png = round(65535 * exp(-L)); L <= 0 gives 65535"));
  put(b, inten, "inverse", str("L = -ln(png / 65535); exact to the 16-bit quantisation, png = 0 means L > ~11.09"));
  put(b, inten, "bit_depth", json_integer(16));
  put(b, inten, "line_integral_min", num(in->lineint_min));
  put(b, inten, "line_integral_max", num(in->lineint_max));
  put(b, root, "intensity", inten);

  json_t *pose = json_object();
  put(b, pose, "primary_deg", num(g->pose.primary_deg));
  put(b, pose, "primary_convention", str("LAO + / RAO -"));
  put(b, pose, "secondary_deg", num(g->pose.secondary_deg));
  put(b, pose, "secondary_convention", str("CRAN + / CAUD -"));
  put(b, pose, "detector_rot_deg", num(g->pose.detector_rot_deg));
  put(b, pose, "sod_mm", num(g->pose.sod_mm));
  put(b, pose, "sid_mm", num(g->pose.sid_mm));
  put(b, pose, "table_mm", vec3(b, g->pose.table_mm));
  put(b, root, "pose", pose);

  json_t *det = json_object();
  put(b, det, "mode", str(g->mode.name));
  put(b, det, "description", str(g->mode.description));
  put(b, det, "rows", json_integer(g->mode.rows));
  put(b, det, "cols", json_integer(g->mode.cols));
  put(b, det, "pitch_u_mm", num(g->mode.pitch_u_mm));
  put(b, det, "pitch_v_mm", num(g->mode.pitch_v_mm));
  put(b, root, "detector", det);

  json_t *geo = json_object();
  put(b, geo, "frame", str("world (room) mm: origin at the isocentre, +x patient left, +y posterior, +z superior "
                           "(patient LPS of a head-first supine patient on an untranslated table)"));
  put(b, geo, "source", vec3(b, g->source));
  put(b, geo, "det_center", vec3(b, g->det_center));
  put(b, geo, "det_origin", vec3(b, g->det_origin));
  put(b, geo, "det_origin_note", str("centre of pixel (col 0, row 0)"));
  put(b, geo, "u", vec3(b, g->u));
  put(b, geo, "u_note", str("unit vector, +column direction"));
  put(b, geo, "v", vec3(b, g->v));
  put(b, geo, "v_note", str("unit vector, +row direction"));
  put(b, geo, "d", vec3(b, g->d));
  put(b, geo, "d_note", str("unit vector, isocentre -> detector (the central beam's direction)"));
  json_t *pp = json_array();
  push(b, pp, num(g->c0));
  push(b, pp, num(g->r0));
  put(b, geo, "principal_point", pp);
  put(b, geo, "principal_point_note", str("(col, row) where the central beam meets the detector"));
  json_t *P = json_array();
  for (int i = 0; i < 3; i++) {
    json_t *row = json_array();
    for (int j = 0; j < 4; j++) push(b, row, num(g->P[i][j]));
    push(b, P, row);
  }
  put(b, geo, "P", P);
  put(b, geo, "P_convention",
      str("3x4, world mm (homogeneous x,y,z,1) -> (col*w, row*w, w): col = h0/h2, row = h1/h2; pixel centres at "
          "integer coordinates from 0 (col 0 = first column, row 0 = first row of the npy/png); the third row gives "
          "w = depth along d in mm from the source"));
  put(b, root, "geometry", geo);

  /* The same projection in the pixel-edge convention of DeepDRR and DiffDRR (docs/geometry.md). */
  double Pe[3][4];
  xt_P_to_pixel_edge(g->P, Pe);
  json_t *ge = json_object();
  put(b, ge, "P", mat34(b, Pe));
  json_t *ppe = json_array();
  push(b, ppe, num(g->c0 + 0.5));
  push(b, ppe, num(g->r0 + 0.5));
  put(b, ge, "principal_point", ppe);
  put(b, ge, "convention",
      str("pixel (col, row) covers [col, col+1) x [row, row+1): its centre is at (col+0.5, row+0.5), the principal point "
          "at (cols/2, rows/2), as DeepDRR's CameraIntrinsicTransform.from_sizes and DiffDRR's make_intrinsic_matrix "
          "build K; P_edge = [[1,0,0.5],[0,1,0.5],[0,0,1]] * P, w unchanged. Angles are not converted: DeepDRR's "
          "alpha/beta signs are the opposite of primary/secondary (see docs/geometry.md)"));
  put(b, root, "geometry_pixel_edge", ge);

  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  put(b, root, "patient_to_world", affine34(b, &p2w));
  put(b, root, "patient_to_world_note", str("3x4 [M | t], world = M * patient + t (the table translation)"));

  json_t *mod = json_object();
  put(b, mod, "name", str(m->name));
  put(b, mod, "kind", str(xt_model_kind_name(m->kind)));
  put(b, mod, "source", str(in->model_source));
  if (in->convert) put(b, mod, "convert", str(in->convert));
  describe(b, m, XT_MODEL_VIEW_SIDECAR, mod); /* the kind's keys: shape, map, size */
  put(b, mod, "place", str(in->place));
  put(b, mod, "placement", affine34(b, &m->placement));
  put(b, mod, "placement_note", str("3x4 [M | t]: model mm -> patient mm"));
  describe(b, m, XT_MODEL_VIEW_SIDECAR_TABLE, mod);
  put(b, root, "model", mod);
  if (in->nadded > 0) {
    json_t *more = json_array();
    for (int i = 0; i < in->nadded; i++) {
      const xt_model *a = in->added[i];
      json_t *e = json_object();
      put(b, e, "name", str(a->name));
      put(b, e, "kind", str(xt_model_kind_name(a->kind)));
      put(b, e, "source", str(in->added_sources[i]));
      describe(b, a, XT_MODEL_VIEW_BRIEF, e);
      put(b, e, "placement", affine34(b, &a->placement));
      push(b, more, e);
    }
    put(b, root, "added_models", more);
  }
#ifdef XT_HAVE_LOADERS
  if (m->report) put(b, root, "load", xt_load_report_json(m->report));
#endif
  if (in->coverage) put(b, root, "coverage", coverage_json(b, in->coverage));

  json_t *be = json_object();
  put(b, be, "name", str(in->backend));
  put(b, be, "threads", json_integer(in->threads));
  put(b, be, "render_ms", num(in->render_ms));
  put(b, root, "backend", be);

  if (in->chain) {
    const xt_sidecar_chain *c = in->chain;
    json_t *ch = json_object(), *prm = json_object(), *punits = json_object(), *der = json_object();
    put(b, ch, "frame", json_integer((json_int_t)c->frame));
    put(b, ch, "frame_note", str("the run's frame number: with the seed it keys every random draw of the frame"));
    for (int i = 0; i < c->nparams; i++) {
      put(b, prm, c->params[i].name, num(c->params[i].value));
      if (c->params[i].unit && *c->params[i].unit) put(b, punits, c->params[i].name, str(c->params[i].unit));
    }
    put(b, ch, "parameters", prm);
    put(b, ch, "units", punits);
    put(b, der, "mean_energy_kev", num(c->mean_energy_kev));
    put(b, der, "hvl_mm_al", num(c->hvl_mm_al));
    put(b, der, "air_kerma_ugy_per_mas_at_1m", num(c->kerma_ugy_per_mas_1m));
    put(b, der, "csi_absorbed_fraction", num(c->absorbed_fraction));
    put(b, der, "energy_bins", json_integer(c->nbins));
    put(b, der, "channels", str(c->channels));
    put(b, der, "ma", num(c->ma));
    put(b, der, "protocol_name", str(c->protocol_name ? c->protocol_name : "custom"));
    put(b, ch, "derived", der);
    json_t *d = json_object();
    put(b, d, "k_irp_mgy", num(c->k_irp_mgy));
    put(b, d, "kap_gycm2", num(c->kap_gycm2));
    put(b, d, "d_irp_mm", num(c->d_irp_mm));
    put(b, d, "field_cm2_at_irp", num(c->field_cm2));
    put(b, d, "run_frames", json_integer((json_int_t)c->run_frames));
    put(b, d, "k_irp_total_mgy", num(c->k_irp_total_mgy));
    put(b, d, "kap_total_gycm2", num(c->kap_total_gycm2));
    put(b, d, "note", str("air kerma free in air at the interventional reference point (SOD - irp_mm) and the "
                          "kerma-area product of this frame; totals over this command's frames (docs/imaging.md)"));
    put(b, ch, "dose", d);
    if (c->drc) {
      json_t *r = json_object();
      put(b, r, "measured_ngy", num(c->drc_measured_ngy));
      put(b, r, "target_ngy", num(c->drc_target_ngy));
      put(b, r, "curve_s", num(c->drc_curve_s));
      put(b, r, "flags", json_integer((json_int_t)c->drc_flags));
      put(b, ch, "drc", r);
    }
    json_t *fl = json_object();
    put(b, fl, "raw", str(c->raw_file));
    put(b, fl, "raw_content", str("16-bit PNG holding the panel's raw ADC codes (\"for processing\"), 0..2^adc_bits-1"));
    put(b, fl, "processed", str(c->proc_file));
    put(b, fl, "processed_content",
        str("16-bit PNG holding the processed frame (\"for presentation\"), 12 bits stored, 0..4095, attenuation dark"));
    put(b, fl, "rows", json_integer(c->out_rows));
    put(b, fl, "cols", json_integer(c->out_cols));
    put(b, ch, "files", fl);
    put(b, ch, "chain_ms", num(c->chain_ms));
    put(b, ch, "model", str("docs/imaging.md"));
    put(b, root, "chain", ch);
  }
  return root;
}

int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg) {
  jb b = {0};
  json_t *root = build(in, &b);
  int rc = 0;
  if (!root || b.bad) {
    rc = xt_fail(msg, XT_EINTERNAL, "json sidecar: cannot encode (out of memory or a non-finite value)");
    goto fail;
  }
  if (json_dumpf(root, f, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 || fputc('\n', f) == EOF) {
    rc = xt_fail(msg, XT_EIO, "json sidecar: write failed: %s", strerror(errno));
    goto fail;
  }
fail:
  json_decref(root);
  return rc;
}
