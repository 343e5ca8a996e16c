/* `xtwin render`'s per-frame JSON sidecar (xt_record.h, docs/cli.md), built with jansson from the
 * frame record's fields. Objects added for real data (issue 14) stay in their own keys: "load"
 * (what the loader noticed and chose), "coverage" (did the model land on the detector) and
 * "geometry_pixel_edge" (P in the convention of DeepDRR and DiffDRR). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "xt_json_build.h"
#include "xt_model_jansson.h"
#include "xt_record.h"

static json_t *num(double v) { return json_real(v); } /* NULL (an error) for NaN/inf */

static json_t *str(const char *s) { return json_string(s ? s : ""); }

/* A number, or null when it is not finite (coverage of a box behind the source). */
static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *coverage_json(xt_jb *b, const xt_sidecar_coverage *c) {
  json_t *o = json_object();
  xt_jb_put(b, o, "status", str(xt_cover_name(c->status)));
  xt_jb_put(b, o, "status_note",
            str("from this frame: missed = no pixel attenuated; clipped = pixels of the first/last row or "
                "column attenuated (the shadow runs off the detector); inside = neither"));
  xt_jb_put(b, o, "pixels_attenuated", json_integer((json_int_t)c->pixels_nonzero));
  xt_jb_put(b, o, "edge_pixels_attenuated", json_integer((json_int_t)c->edge_pixels_nonzero));
  json_t *bb = json_array();
  for (int i = 0; i < 4; i++) xt_jb_push(b, bb, num_or_null(c->box.bbox[i]));
  xt_jb_put(b, o, "bbox_px", bb);
  xt_jb_put(b, o, "bbox_note",
            str("the model's bounding box projected through P: [col_min, row_min, col_max, row_max], "
                "pixel-centre coordinates; the detector spans -0.5..cols-0.5, -0.5..rows-0.5"));
  xt_jb_put(b, o, "bbox_status", str(xt_cover_name(c->box.status)));
  xt_jb_put(b, o, "bbox_on_detector", num_or_null(c->box.on_detector));
  return o;
}

/* The model's own keys, as its kind describes them (xt_model_kind.h). */
static void describe(xt_jb *b, const xt_model *m, xt_model_view view, json_t *obj) {
  if (!obj || xt_model_describe_json(m, view, obj) != 0) b->bad = 1;
}

/* The imaging chain's part (render --chain): every parameter that shaped the frames, by the
 * chain's parameter table, what they work out to, the frame's dose and the loop after it. */
static json_t *chain_json(xt_jb *b, const xt_sidecar_info *in, const xt_frame_fields *c) {
  json_t *ch = json_object(), *prm = json_object(), *punits = json_object(), *der = json_object();
  xt_jb_put(b, ch, "frame", json_integer((json_int_t)c->counter));
  xt_jb_put(b, ch, "frame_note", str("the run's frame number: with the seed it keys every random draw of the frame"));
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *pi = xt_chain_param_at(i);
    xt_jb_put(b, prm, pi->name, num(xt_chain_param_get(c->prm, pi)));
    if (pi->unit && *pi->unit) xt_jb_put(b, punits, pi->name, str(pi->unit));
  }
  xt_jb_put(b, ch, "parameters", prm);
  xt_jb_put(b, ch, "units", punits);
  xt_jb_put(b, der, "mean_energy_kev", num(c->mean_energy_kev));
  xt_jb_put(b, der, "hvl_mm_al", num(c->hvl_mm_al));
  xt_jb_put(b, der, "air_kerma_ugy_per_mas_at_1m", num(c->kerma_ugy_per_mas));
  xt_jb_put(b, der, "csi_absorbed_fraction", num(c->absorbed_fraction));
  xt_jb_put(b, der, "energy_bins", json_integer(c->nbins));
  xt_jb_put(b, der, "channels", str(c->channels));
  xt_jb_put(b, der, "ma", num(c->ma));
  xt_jb_put(b, der, "protocol_name", str(c->protocol_name ? c->protocol_name : "custom"));
  xt_jb_put(b, ch, "derived", der);
  json_t *disp = json_object();
  xt_jb_put(b, disp, "window", num(c->window));
  xt_jb_put(b, disp, "level", num(c->level));
  xt_jb_put(b, disp, "automatic", json_boolean(!(c->prm->window > 0)));
  xt_jb_put(b, disp, "note", str("the window and level (attenuation units ln(flat/signal)) this processed frame was "
                                 "displayed with: with parameter window 0, its own from its histogram's 0.5 and 99.5 % "
                                 "points (docs/imaging.md)"));
  xt_jb_put(b, ch, "processing", disp);
  json_t *d = json_object();
  xt_jb_put(b, d, "k_irp_mgy", num(c->k_irp_mgy));
  xt_jb_put(b, d, "kap_gycm2", num(c->kap_gycm2));
  xt_jb_put(b, d, "d_irp_mm", num(c->d_irp_mm));
  xt_jb_put(b, d, "field_cm2_at_irp", num(c->field_cm2));
  xt_jb_put(b, d, "run_frames", json_integer((json_int_t)c->dose_frames));
  xt_jb_put(b, d, "k_irp_total_mgy", num(c->k_irp_total_mgy));
  xt_jb_put(b, d, "kap_total_gycm2", num(c->kap_total_gycm2));
  xt_jb_put(b, d, "note",
            str("air kerma free in air at the interventional reference point (SOD - irp_mm) and the "
                "kerma-area product of this frame; totals over this command's frames (docs/imaging.md)"));
  xt_jb_put(b, ch, "dose", d);
  if (c->drc) {
    json_t *r = json_object();
    xt_jb_put(b, r, "measured_ngy", num(c->drc_measured_ngy));
    xt_jb_put(b, r, "target_ngy", num(c->drc_target_ngy));
    xt_jb_put(b, r, "curve_s", num(c->drc_curve_s));
    xt_jb_put(b, r, "flags", json_integer((json_int_t)c->drc_flags));
    xt_jb_put(b, ch, "drc", r);
  }
  json_t *fl = json_object();
  xt_jb_put(b, fl, "raw", str(in->raw_file));
  xt_jb_put(b, fl, "raw_content",
            str("16-bit PNG holding the panel's raw ADC codes (\"for processing\"), 0..2^adc_bits-1"));
  xt_jb_put(b, fl, "processed", str(in->proc_file));
  xt_jb_put(
      b, fl, "processed_content",
      str("16-bit PNG holding the processed frame (\"for presentation\"), 12 bits stored, 0..4095, attenuation dark"));
  xt_jb_put(b, fl, "rows", json_integer(c->out_rows));
  xt_jb_put(b, fl, "cols", json_integer(c->out_cols));
  xt_jb_put(b, ch, "files", fl);
  xt_jb_put(b, ch, "chain_ms", num(c->chain_ms));
  xt_jb_put(b, ch, "model", str("docs/imaging.md"));
  return ch;
}

static json_t *build(const xt_sidecar_info *in, xt_jb *b) {
  const xt_acq_frame *fr = in->frame;
  const xt_geometry *g = &fr->geom;
  xt_frame_fields ff;
  xt_frame_fields_of(fr, &ff);
  const xt_model *m = in->model;
  json_t *root = json_object();

  xt_jb_put(b, root, "format", str("xtwin-projection"));
  xt_jb_put(b, root, "format_version", json_integer(1));
  xt_jb_put(b, root, "xtwin_version", str(in->version));
  char ts[40] = "";
  time_t now = time(NULL);
  struct tm tmv;
  if (gmtime_r(&now, &tmv)) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  xt_jb_put(b, root, "created_utc", str(ts));

  json_t *units = json_object();
  xt_jb_put(b, units, "length", str("mm"));
  xt_jb_put(b, units, "angle", str("deg"));
  xt_jb_put(b, units, "mu", str("1/mm"));
  xt_jb_put(b, units, "line_integral", str("dimensionless: integral of mu dl along the ray, source to pixel"));
  xt_jb_put(b, units, "energy", str("keV"));
  xt_jb_put(b, root, "units", units);

  json_t *files = json_object();
  xt_jb_put(b, files, "npy", str(in->npy_file));
  xt_jb_put(b, files, "npy_content", str("float32 line integrals L, shape (rows, cols), C order, row 0 first"));
  xt_jb_put(b, files, "png", str(in->png_file));
  xt_jb_put(b, files, "png_content", str("16-bit grayscale intensity I/I0 scaled to 0..65535"));
  xt_jb_put(b, root, "files", files);

  json_t *inten = json_object();
  xt_jb_put(b, inten, "formula", str("png = round(65535 * exp(-L)); L <= 0 gives 65535"));
  xt_jb_put(b, inten, "inverse",
            str("L = -ln(png / 65535); exact to the 16-bit quantisation, png = 0 means L > ~11.09"));
  xt_jb_put(b, inten, "bit_depth", json_integer(16));
  xt_jb_put(b, inten, "line_integral_min", num(in->lineint_min));
  xt_jb_put(b, inten, "line_integral_max", num(in->lineint_max));
  xt_jb_put(b, root, "intensity", inten);

  json_t *pose = json_object();
  xt_jb_put(b, pose, "primary_deg", num(ff.pose[0]));
  xt_jb_put(b, pose, "primary_convention", str("LAO + / RAO -"));
  xt_jb_put(b, pose, "secondary_deg", num(ff.pose[1]));
  xt_jb_put(b, pose, "secondary_convention", str("CRAN + / CAUD -"));
  xt_jb_put(b, pose, "detector_rot_deg", num(ff.pose[2]));
  xt_jb_put(b, pose, "sod_mm", num(ff.pose[3]));
  xt_jb_put(b, pose, "sid_mm", num(ff.pose[4]));
  xt_jb_put(b, pose, "table_mm", xt_jb_vec(b, ff.pose + 5, 3));
  xt_jb_put(b, root, "pose", pose);

  json_t *det = json_object();
  xt_jb_put(b, det, "mode", str(ff.mode));
  xt_jb_put(b, det, "description", str(g->mode.description));
  xt_jb_put(b, det, "rows", json_integer(g->mode.rows));
  xt_jb_put(b, det, "cols", json_integer(g->mode.cols));
  xt_jb_put(b, det, "pitch_u_mm", num(g->mode.pitch_u_mm));
  xt_jb_put(b, det, "pitch_v_mm", num(g->mode.pitch_v_mm));
  xt_jb_put(b, det, "readout", xt_readout_json(b, &ff));
  xt_jb_put(b, root, "detector", det);

  json_t *geo = json_object();
  xt_jb_put(b, geo, "frame",
            str("world (room) mm: origin at the isocentre, +x patient left, +y posterior, +z superior "
                "(patient LPS of a head-first supine patient on an untranslated table)"));
  xt_jb_put(b, geo, "source", xt_jb_vec3(b, g->source));
  xt_jb_put(b, geo, "det_center", xt_jb_vec3(b, g->det_center));
  xt_jb_put(b, geo, "det_origin", xt_jb_vec3(b, g->det_origin));
  xt_jb_put(b, geo, "det_origin_note", str("centre of pixel (col 0, row 0)"));
  xt_jb_put(b, geo, "u", xt_jb_vec3(b, g->u));
  xt_jb_put(b, geo, "u_note", str("unit vector, +column direction"));
  xt_jb_put(b, geo, "v", xt_jb_vec3(b, g->v));
  xt_jb_put(b, geo, "v_note", str("unit vector, +row direction"));
  xt_jb_put(b, geo, "d", xt_jb_vec3(b, g->d));
  xt_jb_put(b, geo, "d_note", str("unit vector, isocentre -> detector (the central beam's direction)"));
  xt_jb_put(b, geo, "principal_point", xt_jb_vec(b, ff.principal, 2));
  xt_jb_put(b, geo, "principal_point_note", str("(col, row) where the central beam meets the detector"));
  xt_jb_put(b, geo, "P", xt_jb_mat34(b, ff.P));
  xt_jb_put(
      b, geo, "P_convention",
      str("3x4, world mm (homogeneous x,y,z,1) -> (col*w, row*w, w): col = h0/h2, row = h1/h2; pixel centres at "
          "integer coordinates from 0 (col 0 = first column, row 0 = first row of the npy/png); the third row gives "
          "w = depth along d in mm from the source"));
  xt_jb_put(b, root, "geometry", geo);

  /* The same projection in the pixel-edge convention of DeepDRR and DiffDRR (docs/geometry.md). */
  json_t *ge = json_object();
  xt_jb_put(b, ge, "P", xt_jb_mat34(b, ff.P_edge));
  xt_jb_put(b, ge, "principal_point", xt_jb_vec(b, ff.principal_edge, 2));
  xt_jb_put(
      b, ge, "convention",
      str("pixel (col, row) covers [col, col+1) x [row, row+1): its centre is at (col+0.5, row+0.5), the principal "
          "point "
          "at (cols/2, rows/2), as DeepDRR's CameraIntrinsicTransform.from_sizes and DiffDRR's make_intrinsic_matrix "
          "build K; P_edge = [[1,0,0.5],[0,1,0.5],[0,0,1]] * P, w unchanged. Angles are not converted: DeepDRR's "
          "alpha/beta signs are the opposite of primary/secondary (see docs/geometry.md)"));
  xt_jb_put(b, root, "geometry_pixel_edge", ge);

  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  xt_jb_put(b, root, "patient_to_world", xt_jb_affine34(b, &p2w));
  xt_jb_put(b, root, "patient_to_world_note", str("3x4 [M | t], world = M * patient + t (the table translation)"));

  json_t *mod = json_object();
  xt_jb_put(b, mod, "name", str(m->name));
  xt_jb_put(b, mod, "kind", str(xt_model_kind_name(m->kind)));
  xt_jb_put(b, mod, "source", str(in->model_source));
  if (in->convert) xt_jb_put(b, mod, "convert", str(in->convert));
  describe(b, m, XT_MODEL_VIEW_SIDECAR, mod); /* the kind's keys: shape, map, size */
  xt_jb_put(b, mod, "place", str(in->place));
  xt_jb_put(b, mod, "placement", xt_jb_affine34(b, &m->placement));
  xt_jb_put(b, mod, "placement_note", str("3x4 [M | t]: model mm -> patient mm"));
  describe(b, m, XT_MODEL_VIEW_SIDECAR_TABLE, mod);
  xt_jb_put(b, root, "model", mod);
  if (in->nadded > 0) {
    json_t *more = json_array();
    for (int i = 0; i < in->nadded; i++) {
      const xt_model *a = in->added[i];
      json_t *e = json_object();
      xt_jb_put(b, e, "name", str(a->name));
      xt_jb_put(b, e, "kind", str(xt_model_kind_name(a->kind)));
      xt_jb_put(b, e, "source", str(in->added_sources[i]));
      describe(b, a, XT_MODEL_VIEW_BRIEF, e);
      xt_jb_put(b, e, "placement", xt_jb_affine34(b, &a->placement));
      xt_jb_push(b, more, e);
    }
    xt_jb_put(b, root, "added_models", more);
  }
  if (in->load) xt_jb_put(b, root, "load", json_incref(in->load));
  if (in->coverage) xt_jb_put(b, root, "coverage", coverage_json(b, in->coverage));
  if (in->niodine > 0) { /* contrast (docs/contrast.md): what the frame's regions held */
    json_t *ct = json_object(), *mg = json_object();
    for (int i = 0; i < in->niodine; i++) xt_jb_put(b, mg, in->iodine_regions[i], num(in->iodine_mg_ml[i]));
    xt_jb_put(b, ct, "iodine_mg_ml", mg);
    xt_jb_put(b, ct, "note", str("each region's material plus iodine at this concentration (partial density mg/mL / 1000 g/cm^3)"));
    xt_jb_put(b, root, "contrast", ct);
  }

  json_t *be = json_object();
  xt_jb_put(b, be, "name", str(in->backend));
  xt_jb_put(b, be, "threads", json_integer(in->threads));
  xt_jb_put(b, be, "render_ms", num(fr->lineint_ms));
  xt_jb_put(b, root, "backend", be);

  if (ff.chain) xt_jb_put(b, root, "chain", chain_json(b, in, &ff));
  return root;
}

int xt_sidecar_write(FILE *f, const xt_sidecar_info *in, xt_msg *msg) {
  xt_jb b = {0};
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
