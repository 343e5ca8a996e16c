/* The record-based encoders (output/xt_record.h) state one frame the same way: a real exposure
 * through the acquisition layer (the head phantom, the chain on, dose-rate control on, a second
 * frame so the loop and the totals have moved), then its stream headers and its JSON sidecar,
 * and every quantity both carry compared exactly (the sidecar's doubles round-trip). The oracle
 * for each field is the record itself (the pose, P, the exposure, the dose as acq/ made them), so
 * an encoder that rounds, reorders, derives differently or forgets a field fails here. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_exposure.h"
#include "xt_phantom.h"
#include "xt_record.h"
#include "xt_test.h"

typedef struct bufs {
  uint16_t raw[128 * 128], proc[128 * 128];
  float lineint[128 * 128];
} bufs;

static int give_buffers(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  bufs *b = ctx;
  if ((size_t)f->lineint.rows * f->lineint.cols > 128 * 128 || (size_t)f->raw.rows * f->raw.cols > 128 * 128)
    return xt_fail(msg, XT_EINVAL, "test: frame too large");
  f->lineint.data = b->lineint;
  f->raw.data = b->raw;
  f->proc.data = b->proc;
  return 0;
}

static double jnum(const json_t *root, const char *path) {
  json_t *v = json_object_get(root, path);
  if (!v || !json_is_number(v)) {
    fprintf(stderr, "sidecar: no number at %s\n", path);
    return NAN; /* fails every comparison */
  }
  return json_number_value(v);
}

static double at(const json_t *obj, const char *key) { return jnum(obj, key); }

/* Element i of an array member (or row r, column c of a matrix member). */
static double el(const json_t *obj, const char *key, int r, int c) {
  json_t *a = json_object_get(obj, key);
  json_t *v = json_array_get(a, (size_t)r);
  if (c >= 0) v = json_array_get(v, (size_t)c);
  if (!v || !json_is_number(v)) {
    fprintf(stderr, "sidecar: %s[%d][%d] is not a number\n", key, r, c);
    return NAN;
  }
  return json_number_value(v);
}

XT_TEST(header_and_sidecar_agree) {
  const int dim[3] = {48, 48, 48};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 4.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  xt_proj *proj = NULL;
  XT_REQUIRE(xt_proj_create(&po, &proj, NULL) == 0);
  xt_acq_plane plane;
  xt_acq_renderer rnd;
  xt_acq_plane_init(&plane);
  xt_acq_renderer_init(&rnd, proj, 2);
  XT_REQUIRE(xt_acq_renderer_add_model(&rnd, head, NULL) == 0);
  bufs *b = calloc(1, sizeof *b);
  XT_REQUIRE(b);

  xt_acq_request q;
  memset(&q, 0, sizeof q);
  q.pose = xt_pose_default(xt_mode_find("fd20-128"));
  q.pose.primary_deg = 23.5;
  q.pose.secondary_deg = -11.25;
  q.pose.table_mm = xt_v3(3.5, -7.25, 12.0);
  q.mode = xt_mode_find("fd20-128");
  q.model = head;
  q.want = XT_ACQ_WANT_LINEINT | XT_ACQ_WANT_CHAIN;
  q.chain = 1;
  q.chain_prm = xt_chain_params_default();
  q.chain_prm.binning = 2;
  q.chain_prm.drc = 1;
  q.chain_prm.grid = 1;
  q.chain_prm.seed = 2323;
  q.run = 1;
  q.pose_seq = 41;
  q.t_pose_ns = 1000;
  q.t_sched_ns = 2000;
  q.t_exposure_ns = 3000;
  q.period_ns = 33333333;
  q.buffers = give_buffers;
  q.ctx = b;
  xt_acq_frame fr;
  xt_msg msg;
  for (int k = 0; k < 2; k++) { /* the second frame: the loop has measured one, the totals hold two */
    q.counter = 7 + (uint64_t)k;
    XT_REQUIRE_MSG(xt_acq_expose(&plane, &rnd, &q, &fr, &msg) == 0, "%s", msg.text);
  }
  XT_REQUIRE(fr.chain && fr.totals.frames == 2 && fr.dose.k_irp_mgy > 0 && fr.drc.target_ngy > 0);

  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  xt_stream_header h[2];
  for (int k = 0; k < 2; k++) {
    const xt_stream_delivery d = {k ? XT_STREAM_KIND_PROCESSED : XT_STREAM_KIND_RAW,
                                  fr.raw.rows,
                                  fr.raw.cols,
                                  XT_STREAM_PIX_U16,
                                  (size_t)fr.raw.rows * fr.raw.cols * 2,
                                  0,
                                  fr.t_done_ns};
    xt_stream_header_encode(&ff, &d, &h[k]);
  }
  FILE *f = tmpfile();
  XT_REQUIRE(f);
  xt_sidecar_info si = {.frame = &fr,
                        .model = head,
                        .model_source = "phantom",
                        .place = "center",
                        .backend = "cpu",
                        .threads = 2,
                        .npy_file = "a.npy",
                        .png_file = "a.png",
                        .raw_file = "a_raw.png",
                        .proc_file = "a_proc.png",
                        .version = "test"};
  XT_REQUIRE_MSG(xt_sidecar_write(f, &si, &msg) == 0, "%s", msg.text);
  rewind(f);
  json_error_t je;
  json_t *root = json_loadf(f, 0, &je);
  fclose(f);
  XT_REQUIRE_MSG(root, "sidecar does not parse: %s", je.text);

  /* the record against itself: each derived field where it came from */
  const xt_chain_params *p = &fr.prm;
  XT_CHECK(ff.ma == xt_exposure_ma(p) && p->drc && fr.prm.kv > 0);
  XT_CHECK(ff.out_pitch_mm[0] == fr.geom.mode.pitch_u_mm * 2 && ff.out_pitch_mm[1] == fr.geom.mode.pitch_v_mm * 2);

  json_t *pose = json_object_get(root, "pose"), *geo = json_object_get(root, "geometry"),
         *ge = json_object_get(root, "geometry_pixel_edge"), *ch = json_object_get(root, "chain");
  XT_REQUIRE(pose && geo && ge && ch);
  json_t *prm = json_object_get(ch, "parameters"), *der = json_object_get(ch, "derived"),
         *dose = json_object_get(ch, "dose"), *drc = json_object_get(ch, "drc"), *files = json_object_get(ch, "files");
  XT_REQUIRE(prm && der && dose && drc && files);
  for (int k = 0; k < 2; k++) {
    const xt_stream_header *x = &h[k];
    XT_CHECK(x->frame_counter == 8 && at(ch, "frame") == 8);
    XT_CHECK(x->pose_seq == 41 && x->t_pose_ns == 1000 && x->t_exposure_sched_ns == 2000 && x->t_exposure_ns == 3000);
    XT_CHECK(x->pose[0] == at(pose, "primary_deg") && x->pose[0] == 23.5);
    XT_CHECK(x->pose[1] == at(pose, "secondary_deg") && x->pose[1] == -11.25);
    XT_CHECK(x->pose[2] == at(pose, "detector_rot_deg"));
    XT_CHECK(x->pose[3] == at(pose, "sod_mm") && x->pose[4] == at(pose, "sid_mm"));
    for (int i = 0; i < 3; i++) XT_CHECK(x->pose[5 + i] == el(pose, "table_mm", i, -1));
    XT_CHECK(x->pose[5] == 3.5 && x->pose[6] == -7.25 && x->pose[7] == 12.0);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 4; c++) {
        XT_CHECK(x->P[r * 4 + c] == el(geo, "P", r, c) && x->P[r * 4 + c] == fr.geom.P[r][c]);
        XT_CHECK(el(ge, "P", r, c) == fr.P_edge[r][c]);
      }
    XT_CHECK(!strcmp(x->mode, "fd20-128") &&
             !strcmp(json_string_value(json_object_get(json_object_get(root, "detector"), "mode")), "fd20-128"));
    XT_CHECK(x->rows == (uint32_t)at(files, "rows") && x->cols == (uint32_t)at(files, "cols") && x->rows == 64);
    XT_CHECK(x->chain_seed == (uint64_t)at(prm, "seed") && x->chain_seed == 2323);
    XT_CHECK(x->kv == at(prm, "kv") && x->kv == p->kv);
    XT_CHECK(x->mas == at(prm, "mas") && x->pulse_ms == at(prm, "pulse_ms"));
    XT_CHECK(x->filter_al_mm == at(prm, "filter_al_mm") && x->filter_cu_mm == at(prm, "filter_cu_mm"));
    /* the automatic window (the default, window 0): the frame's own window and level in the header,
     * the sidecar's processing block and the acquisition record alike, a real window (> 0.5) */
    json_t *disp = json_object_get(ch, "processing");
    XT_CHECK(at(prm, "window") == 0 && (x->chain_flags & XT_STREAM_CHAIN_AUTO_WINDOW) &&
             json_is_true(json_object_get(disp, "automatic")));
    XT_CHECK(x->window == at(disp, "window") && x->level == at(disp, "level") && x->window == fr.window &&
             x->level == fr.level && x->window >= 0.5);
    XT_CHECK(x->binning == (uint32_t)at(prm, "binning") && x->binning == 2);
    XT_CHECK(x->focal_spot_mm == at(prm, "focal_spot_mm") && x->protocol == (uint32_t)at(prm, "protocol"));
    XT_CHECK(x->ma == at(der, "ma") && x->ma > 0);
    XT_CHECK(x->mean_energy_kev == at(der, "mean_energy_kev") && x->mean_energy_kev > 20);
    XT_CHECK(x->kerma_ugy_per_mas == at(der, "air_kerma_ugy_per_mas_at_1m") && x->kerma_ugy_per_mas > 0);
    XT_CHECK(x->k_irp_mgy == at(dose, "k_irp_mgy") && x->k_irp_mgy == fr.dose.k_irp_mgy);
    XT_CHECK(x->kap_gycm2 == at(dose, "kap_gycm2") && x->d_irp_mm == at(dose, "d_irp_mm"));
    XT_CHECK(x->k_irp_total_mgy == at(dose, "k_irp_total_mgy") && x->kap_total_gycm2 == at(dose, "kap_total_gycm2"));
    XT_CHECK(x->dose_frames == (uint64_t)at(dose, "run_frames") && x->dose_frames == 2);
    XT_CHECK(x->drc_measured_ngy == at(drc, "measured_ngy") && x->drc_measured_ngy > 0);
    XT_CHECK(x->drc_target_ngy == at(drc, "target_ngy") && x->drc_curve_s == at(drc, "curve_s"));
    XT_CHECK(x->drc_flags == (uint32_t)at(drc, "flags") && (x->drc_flags & XT_STREAM_DRC_ON));
    XT_CHECK((x->exposure_flags & XT_STREAM_EXPOSURE_DRC) && (x->exposure_flags & XT_STREAM_EXPOSURE_GRID));
    XT_CHECK(x->grid_tp == at(prm, "grid_tp"));
    /* the readout: fd20-128 resamples 1920 native pixels to 128, the chain bins 2x2 on top */
    json_t *ro = json_object_get(json_object_get(root, "detector"), "readout");
    XT_REQUIRE(ro);
    XT_CHECK(x->readout_binning == 30 && at(ro, "binning") == 30 && !strcmp(x->detector, "fd20"));
    XT_CHECK(x->roi[0] == 280 && el(ro, "roi_origin", 0, -1) == 280 && x->roi[3] == 1920);
    XT_CHECK(el(ro, "matrix", 0, -1) == 64 && el(ro, "matrix", 1, -1) == 64 && el(ro, "panel", 0, -1) == 2480);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 4; c++) XT_CHECK(x->P_out[r * 4 + c] == el(ro, "P", r, c));
    /* P_out is the delivered matrix's: the isocentre lands on its centre, (64 - 1) / 2, and any
     * point at (c + 1/2) / 2 - 1/2 of where the render grid's P puts it */
    XT_CHECK_NEAR(x->P_out[3] / x->P_out[11], 31.5, 1e-9);
    XT_CHECK_NEAR(x->P_out[7] / x->P_out[11], 31.5, 1e-9);
    const double X[4] = {30, -20, 45, 1};
    double a[3] = {0, 0, 0}, o[3] = {0, 0, 0};
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 4; c++) a[r] += x->P[r * 4 + c] * X[c], o[r] += x->P_out[r * 4 + c] * X[c];
    XT_CHECK_NEAR(o[0] / o[2], (a[0] / a[2] + 0.5) / 2 - 0.5, 1e-9);
    XT_CHECK_NEAR(o[1] / o[2], (a[1] / a[2] + 0.5) / 2 - 0.5, 1e-9);
  }
  XT_CHECK(h[0].bits_stored == (uint32_t)at(prm, "adc_bits") && h[1].bits_stored == 12);
  XT_CHECK(h[0].frame_kind == XT_STREAM_KIND_RAW && h[1].frame_kind == XT_STREAM_KIND_PROCESSED);
  XT_CHECK(memcmp((const char *)&h[0] + 312, (const char *)&h[1] + 312, XT_STREAM_HEADER_SIZE - 312) == 0);
  /* saturated_px (offset 780, issue 27): the raw frame's codes at the ADC's full scale, counted
   * here from the delivered pixels; then an exposure of 300 times the dose, which saturates the
   * panel outside the head, and the count that follows (the chain's, not a pass over this buffer). */
  {
    const uint16_t full = (uint16_t)((1u << fr.prm.adc_bits) - 1u);
    const size_t n = (size_t)fr.raw.rows * (size_t)fr.raw.cols;
    uint32_t want = 0;
    for (size_t i = 0; i < n; i++) want += b->raw[i] >= full;
    XT_CHECK_MSG(h[0].saturated_px == want && h[1].saturated_px == want, "%u %u vs %u", h[0].saturated_px,
                 h[1].saturated_px, want);
    xt_acq_request q2 = q;
    q2.chain_prm.drc = 0;
    q2.chain_prm.mas *= 300.0;
    q2.run = 2;
    q2.counter = 9;
    XT_REQUIRE_MSG(xt_acq_expose(&plane, &rnd, &q2, &fr, &msg) == 0, "%s", msg.text);
    want = 0;
    for (size_t i = 0; i < n; i++) want += b->raw[i] >= full;
    xt_frame_fields ff2;
    xt_frame_fields_of(&fr, &ff2);
    xt_stream_header h2;
    const xt_stream_delivery d2 = {XT_STREAM_KIND_PROCESSED, fr.raw.rows, fr.raw.cols, XT_STREAM_PIX_U16,
                                   n * 2, 0, fr.t_done_ns};
    xt_stream_header_encode(&ff2, &d2, &h2);
    XT_CHECK_MSG(want >= n / 10 && want < n && h2.saturated_px == want, "%u vs %u of %zu", h2.saturated_px, want, n);
  }

  json_decref(root);
  free(b);
  xt_acq_renderer_free(&rnd);
  xt_acq_plane_destroy(&plane);
  xt_proj_destroy(proj);
  xt_model_free(head);
}

/* A mono frame (the chain off) says nothing of an exposure: every version 2 and 3 field is 0 but
 * bits_stored (16, or 32 for float32 line integrals); the readout (version 4) it does state. */
XT_TEST(mono_header_has_no_exposure) {
  xt_acq_frame fr;
  memset(&fr, 0, sizeof fr);
  xt_pose pose = xt_pose_default(xt_mode_find("fd20-128"));
  XT_REQUIRE(xt_geom_compute(&pose, xt_mode_find("fd20-128"), &fr.geom, NULL) == 0);
  fr.counter = 3;
  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  for (int pf = XT_STREAM_PIX_U16; pf <= XT_STREAM_PIX_F32; pf++) {
    const xt_stream_delivery d = {
        XT_STREAM_KIND_MONO, 128, 128, pf, 128u * 128u * (pf == XT_STREAM_PIX_F32 ? 4 : 2), 0, 5};
    xt_stream_header h;
    xt_stream_header_encode(&ff, &d, &h);
    XT_CHECK(h.bits_stored == (pf == XT_STREAM_PIX_F32 ? 32u : 16u));
    XT_CHECK(h.frame_counter == 3 && h.t_render_done_ns == 5 && h.pitch_mm[0] == fr.geom.mode.pitch_u_mm);
    static const unsigned char zero[XT_STREAM_HEADER_SIZE];
    XT_CHECK(memcmp((const char *)&h + 312, zero, 576 - 312) == 0 && h.frame_kind == 0);
    /* the readout (version 4) is every frame's: fd20-128 resamples the FD20's central 1920 square */
    XT_CHECK(!strcmp(h.detector, "fd20") && h.panel[0] == 2480 && h.panel[1] == 1920 && h.panel_pitch_mm == 0.154);
    XT_CHECK(h.roi[0] == 280 && h.roi[1] == 0 && h.roi[2] == 1920 && h.roi[3] == 1920 && h.readout_binning == 15);
    XT_CHECK(h.field_cm == 0 && h.dose_ratio == 1 && memcmp(h.P_out, h.P, sizeof h.P) == 0);
  }
}

XT_TEST_MAIN(XT_ENTRY(header_and_sidecar_agree) XT_ENTRY(mono_header_has_no_exposure))
