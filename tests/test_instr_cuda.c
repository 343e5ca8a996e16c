/* Instruments on the CUDA backend against the CPU reference (label gpu): line integrals and
 * channels of a scene with a head and three instruments (the voxel kind's bar of test_cuda), a
 * shape set between frames, frames reproducible bit for bit, a 0.1 mm wire alone at fd20-1024's
 * pitch (the splat's sums against the reference's, 1e-6), and the one-launch splat's indexing and
 * tile-flagged finish (instruments of any length, one out of the field, batches, channels, a
 * detector not a multiple of the tiles, a moved shape's old pixels written 0). Every test runs
 * with each splat kernel: the default, XT_INSTR_SPLAT=run (k_instr_splat_run) and compact
 * (k_instr_splat_compact); a bad XT_INSTR_SPLAT is refused at create. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_channels.h"
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_cuda.h"

static void arc(double *pts, int n, double x0, double y0, double z0, double R, double t0, double t1) {
  for (int i = 0; i < n; i++) {
    const double t = t0 + (t1 - t0) * i / (n - 1);
    pts[3 * i] = x0 + R * cos(t);
    pts[3 * i + 1] = y0 + 0.3 * R * sin(2 * t);
    pts[3 * i + 2] = z0 + R * sin(t);
  }
}

static xt_geometry geom2(int cols, int rows, double pitch, double primary, double secondary) {
  const xt_detector_mode mode = xt_mode_custom("t", cols, rows, pitch, pitch, 810, 1195);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.table_mm = xt_v3(3, -2, 5);
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

static xt_geometry geom(int n, double pitch, double primary, double secondary) {
  return geom2(n, n, pitch, primary, secondary);
}

/* max |gpu - cpu| over max |cpu|, both frames of np * planes floats */
static double rel_err(const float *a, const float *b, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs((double)a[i] - b[i]) > e) e = fabs((double)a[i] - b[i]);
    if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
  }
  return m > 0 ? e / m : e;
}

static xt_proj *make(xt_backend b, xt_model *const *ms, int n) {
  xt_proj_options po = {b, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  if (xt_proj_create(&po, &p, &msg)) {
    fprintf(stderr, "  %s\n", msg.text);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (xt_proj_add_model(p, ms[i], &msg)) {
      fprintf(stderr, "  %s\n", msg.text);
      xt_proj_destroy(p);
      return NULL;
    }
  return p;
}

XT_TEST(gpu_matches_cpu_with_a_head_and_instruments) {
  xt_instr_device gw, ct;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 2048, NULL) == 0);
  XT_REQUIRE(xt_instr_catheter(&ct, "blood", 2048, NULL) == 0);
  static double p1[3 * 1500], p2[3 * 800], p3[3 * 1200];
  arc(p1, 1500, 0, 0, 0, 40, 0.2, 2.8);
  arc(p2, 800, 5, 2, -3, 38, 0.6, 2.5);
  arc(p3, 1200, -4, 6, 2, 30, -0.5, 2.0);
  xt_model *h = NULL, *m[3] = {NULL, NULL, NULL};
  int dim[3] = {64, 64, 64};
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &h, NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&gw, p1, 1500, "wire", &m[0], NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&ct, p2, 800, "cath", &m[1], NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&gw, p3, 1200, "wire2", &m[2], NULL) == 0);
  m[1]->placement.t[1] = 4;
  xt_model *all[4] = {h, m[0], m[1], m[2]};
  xt_geometry g = geom(256, 0.28875 * 4, 25, -10);
  const size_t np = (size_t)g.mode.cols * g.mode.rows;
  xt_proj *pc = make(XT_BACKEND_CPU, all, 4), *pg = make(XT_BACKEND_CUDA, all, 4);
  XT_REQUIRE(pc && pg);
  float *a = malloc(sizeof(float) * np * XT_MAX_CHANNELS), *b = malloc(sizeof(float) * np * XT_MAX_CHANNELS),
        *b2 = malloc(sizeof(float) * np * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b && b2);
  XT_REQUIRE(xt_proj_render(pc, &g, a, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &g, b, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &g, b2, NULL) == 0);
  XT_CHECK(memcmp(b, b2, sizeof(float) * np) == 0); /* fixed-point sums: the same bits every time */
  /* the voxel kind's own bar (test_cuda): max |gpu - cpu| <= 1e-4 of the frame's max */
  double e = rel_err(b, a, np);
  XT_CHECK_MSG(e <= 1e-4, "line integrals: rel err %.3g", e);
  {
    /* channels: the instruments alone (with the head the scene has more materials than
     * XT_MAX_CHANNELS, which both backends refuse alike) */
    xt_proj *qc = make(XT_BACKEND_CPU, all + 1, 3), *qg = make(XT_BACKEND_CUDA, all + 1, 3);
    XT_REQUIRE(qc && qg);
    xt_chanset cs;
    XT_REQUIRE(xt_proj_channels(qc, &cs, NULL) == 0);
    XT_REQUIRE(xt_proj_render_channels(qc, &g, a, NULL) == 0);
    XT_REQUIRE(xt_proj_render_channels(qg, &g, b, NULL) == 0);
    e = rel_err(b, a, np * cs.n);
    XT_CHECK_MSG(e <= 1e-4, "channels: rel err %.3g", e);
    xt_proj_destroy(qc);
    xt_proj_destroy(qg);
  }
  /* a new shape between frames, on both */
  arc(p1, 1400, 2, -1, 1, 36, 0.0, 2.6);
  XT_REQUIRE(xt_proj_set_shape(pc, m[0], p1, 1400, NULL) == 0);
  XT_REQUIRE(xt_proj_set_shape(pg, m[0], p1, 1400, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pc, &g, a, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &g, b2, NULL) == 0);
  e = rel_err(b2, a, np);
  XT_CHECK_MSG(e <= 1e-4, "after set_shape: rel err %.3g", e);
  XT_REQUIRE(xt_proj_render(pg, &g, b, NULL) == 0);
  XT_CHECK(memcmp(b, b2, sizeof(float) * np) == 0);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  free(a);
  free(b);
  free(b2);
  xt_model_free(h);
  for (int i = 0; i < 3; i++) xt_model_free(m[i]);
}

XT_TEST(thin_wire_at_fd20_1024_pitch) {
  /* a 0.1 mm wire at the detector's own pitch: the pixel-area sums on the GPU as on the CPU */
  xt_instr_device dev;
  int w = 0;
  XT_REQUIRE(xt_instr_device_init(&dev, "blood", 4096, NULL) == 0);
  XT_REQUIRE(xt_instr_material(&dev, "platinum", &w, NULL) == 0);
  dev.nsections = 1;
  dev.sec[0] = (xt_instr_section){0.0, 0.05, 0.0, w, 0};
  static double p[3 * 2000];
  arc(p, 2000, 0, 0, 0, 10, 0.3, 2.7); /* inside the 37 mm field at the isocentre */
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_instr(&dev, p, 2000, "fine", &m, NULL) == 0);
  xt_geometry g = geom(192, 0.28875, 0, 0);
  const size_t np = (size_t)g.mode.cols * g.mode.rows;
  xt_proj *pc = make(XT_BACKEND_CPU, &m, 1), *pg = make(XT_BACKEND_CUDA, &m, 1);
  XT_REQUIRE(pc && pg);
  float *a = malloc(sizeof(float) * np), *b = malloc(sizeof(float) * np);
  XT_REQUIRE(a && b);
  XT_REQUIRE(xt_proj_render(pc, &g, a, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &g, b, NULL) == 0);
  /* instruments alone: the same double sums, float rounding and 2^-32 apart */
  const double e = rel_err(b, a, np);
  XT_CHECK_MSG(e <= 1e-6, "rel err %.3g", e);
  int hit = 0;
  for (size_t i = 0; i < np; i++) hit += a[i] != 0;
  XT_CHECK(hit > 100);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  free(a);
  free(b);
  xt_model_free(m);
}

XT_TEST(one_launch_for_instruments_of_any_length) {
  /* The splat's indexing (one launch of every instrument's segments, a warp each) and the finish
   * over flagged tiles, against the CPU reference with instruments alone (the finish writes, so
   * untouched tiles must come out 0): four instruments of 1500, 800, 37 and 600 points, the last
   * placed far outside the field (no segment in view); batches of 4 poses (nf > 1 frames per
   * launch) equal frame by frame to the reference and bit for bit to single renders; a detector
   * of 200 x 136 (not a multiple of the 16-pixel tiles) after one of 256 x 256; channels; and a
   * shape moved between frames, whose old pixels must return to 0. */
  xt_instr_device gw, ct;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 2048, NULL) == 0);
  XT_REQUIRE(xt_instr_catheter(&ct, "blood", 2048, NULL) == 0);
  static double p1[3 * 1500], p2[3 * 800], p3[3 * 37], p4[3 * 600];
  arc(p1, 1500, 0, 0, 0, 40, 0.2, 2.8);
  arc(p2, 800, 5, 2, -3, 38, 0.6, 2.5);
  arc(p3, 37, -4, 6, 2, 30, -0.5, 0.1);
  arc(p4, 600, 0, 0, 0, 20, 0.0, 3.0);
  xt_model *m[4] = {NULL, NULL, NULL, NULL};
  XT_REQUIRE(xt_model_from_instr(&gw, p1, 1500, "wire", &m[0], NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&ct, p2, 800, "cath", &m[1], NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&gw, p3, 37, "stub", &m[2], NULL) == 0);
  XT_REQUIRE(xt_model_from_instr(&gw, p4, 600, "away", &m[3], NULL) == 0);
  m[1]->placement.t[1] = 4;
  m[3]->placement.t[0] = 600; /* 600 mm to the side: outside every pose's field, in front of the source */
  m[3]->placement.t[2] = 600;
  xt_geometry g[4];
  for (int i = 0; i < 4; i++) g[i] = geom(256, 0.28875 * 4, -30 + 20 * i, 10 - 7 * i);
  const size_t np = (size_t)256 * 256;
  xt_proj *pc = make(XT_BACKEND_CPU, m, 4), *pg = make(XT_BACKEND_CUDA, m, 4);
  XT_REQUIRE(pc && pg);
  float *a = malloc(sizeof(float) * np * XT_MAX_CHANNELS * 4), *b = malloc(sizeof(float) * np * XT_MAX_CHANNELS * 4),
        *b1 = malloc(sizeof(float) * np * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b && b1);
  XT_REQUIRE(xt_proj_render_batch(pc, g, 4, a, NULL) == 0);
  XT_REQUIRE(xt_proj_render_batch(pg, g, 4, b, NULL) == 0);
  for (int i = 0; i < 4; i++) {
    const double e = rel_err(b + np * i, a + np * i, np);
    XT_CHECK_MSG(e <= 1e-6, "batch frame %d: rel err %.3g", i, e);
    int hit = 0;
    for (size_t k = 0; k < np; k++) hit += a[np * i + k] != 0;
    XT_CHECK_MSG(hit > 300, "batch frame %d: %d pixels hit", i, hit);
    XT_REQUIRE(xt_proj_render(pg, &g[i], b1, NULL) == 0);
    XT_CHECK_MSG(memcmp(b1, b + np * i, sizeof(float) * np) == 0, "frame %d: batch and single render differ", i);
  }
  {
    /* the instrument out of the field alone: zeros, from a buffer the frames above filled */
    xt_proj *qg = make(XT_BACKEND_CUDA, &m[3], 1);
    XT_REQUIRE(qg);
    XT_REQUIRE(xt_proj_render(qg, &g[0], b1, NULL) == 0);
    int nz = 0;
    for (size_t k = 0; k < np; k++) nz += b1[k] != 0;
    XT_CHECK_MSG(nz == 0, "an instrument out of the field: %d pixels non-zero", nz);
    xt_proj_destroy(qg);
  }
  /* another detector, its tiles cut at the right and bottom edges */
  const xt_geometry gs = geom2(200, 136, 0.28875 * 4, 15, 5);
  const size_t ns = (size_t)200 * 136;
  XT_REQUIRE(xt_proj_render(pc, &gs, a, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &gs, b, NULL) == 0);
  double e = rel_err(b, a, ns);
  XT_CHECK_MSG(e <= 1e-6, "200 x 136: rel err %.3g", e);
  /* channels, one frame and a batch */
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(pc, &cs, NULL) == 0);
  XT_REQUIRE(xt_proj_render_channels(pc, &g[1], a, NULL) == 0);
  XT_REQUIRE(xt_proj_render_channels(pg, &g[1], b, NULL) == 0);
  e = rel_err(b, a, np * cs.n);
  XT_CHECK_MSG(e <= 1e-6, "channels: rel err %.3g", e);
  for (int c = 0; c < cs.n; c++) {
    int hit = 0;
    for (size_t k = 0; k < np; k++) hit += a[np * c + k] != 0;
    XT_CHECK_MSG(hit > 0, "channel %d: nothing hit", c);
  }
  /* line integrals again after channels (the planes' count changed), then a moved shape */
  XT_REQUIRE(xt_proj_render(pg, &g[2], b1, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pc, &g[2], a, NULL) == 0);
  e = rel_err(b1, a, np);
  XT_CHECK_MSG(e <= 1e-6, "after channels: rel err %.3g", e);
  arc(p1, 1500, 20, -10, 15, 25, 3.5, 5.5); /* elsewhere: the wire's old pixels must be written 0 */
  XT_REQUIRE(xt_proj_set_shape(pc, m[0], p1, 1500, NULL) == 0);
  XT_REQUIRE(xt_proj_set_shape(pg, m[0], p1, 1500, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pc, &g[2], a, NULL) == 0);
  XT_REQUIRE(xt_proj_render(pg, &g[2], b, NULL) == 0);
  e = rel_err(b, a, np);
  XT_CHECK_MSG(e <= 1e-6, "after set_shape: rel err %.3g", e);
  int gone = 0; /* pixels the old wire alone covered, now 0 on the reference */
  for (size_t k = 0; k < np; k++) gone += b1[k] != 0 && a[k] == 0 && b[k] == 0;
  XT_CHECK_MSG(gone > 50, "%d pixels cleared by the new shape", gone);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  free(a);
  free(b);
  free(b1);
  for (int i = 0; i < 4; i++) xt_model_free(m[i]);
}

/* XT_INSTR_SPLAT other than default or compact: the projector is refused with one line naming it. */
XT_TEST(bad_splat_setting_is_refused) {
  const char *old = getenv("XT_INSTR_SPLAT");
  char *saved = old ? strdup(old) : NULL;
  setenv("XT_INSTR_SPLAT", "compactt", 1);
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  const int rc = xt_proj_create(&po, &p, &msg);
  XT_CHECK_MSG(rc != 0 && strstr(msg.text, "XT_INSTR_SPLAT") && !strchr(msg.text, '\n'), "rc %d: %s", rc,
               rc ? msg.text : "created");
  if (!rc) xt_proj_destroy(p);
  if (saved) setenv("XT_INSTR_SPLAT", saved, 1);
  else unsetenv("XT_INSTR_SPLAT");
  free(saved);
}

/* every splat kernel (proj_instr.cu): the default, then XT_INSTR_SPLAT=run and compact */
#define SPLATS {NULL, "run", "compact"}
XT_TEST_MAIN_CUDA_ENV("XT_INSTR_SPLAT", SPLATS,
                      XT_ENTRY(gpu_matches_cpu_with_a_head_and_instruments) XT_ENTRY(thin_wire_at_fd20_1024_pitch)
                      XT_ENTRY(one_launch_for_instruments_of_any_length) XT_ENTRY(bad_splat_setting_is_refused))
