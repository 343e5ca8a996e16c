/* Instruments on the CUDA backend against the CPU reference (label gpu): line integrals and
 * channels of a scene with a head and three instruments (the voxel kind's bar of test_cuda), a
 * shape set between frames, frames reproducible bit for bit, and a 0.1 mm wire alone at fd20-1024's
 * pitch (the splat's sums against the reference's, 1e-6). */
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

static xt_geometry geom(int n, double pitch, double primary, double secondary) {
  const xt_detector_mode mode = xt_mode_custom("t", n, n, pitch, pitch, 810, 1195);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.table_mm = xt_v3(3, -2, 5);
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
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

XT_TEST_MAIN_CUDA(XT_ENTRY(gpu_matches_cpu_with_a_head_and_instruments) XT_ENTRY(thin_wire_at_fd20_1024_pitch))
