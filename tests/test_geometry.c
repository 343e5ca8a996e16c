/* Geometry: angle conventions, the projection matrix, detector modes and pose validation.
 * Oracles are the conventions of docs/geometry.md stated as independent facts (LAO 90 puts the
 * source on the patient's right, ...) and the traced ray of every pixel. */
#include "xt_geom.h"
#include "xt_table.h"
#include "xt_test.h"

static xt_geometry geom(double prim, double sec, double rot, const char *mode) {
  const xt_detector_mode *m = xt_mode_find(mode);
  xt_pose p = xt_pose_default(m);
  p.primary_deg = prim;
  p.secondary_deg = sec;
  p.detector_rot_deg = rot;
  xt_geometry g;
  xt_msg msg;
  int rc = xt_geom_compute(&p, m, &g, &msg);
  if (rc) fprintf(stderr, "geom: %s\n", msg.text);
  return g;
}

XT_TEST(ap_view_source_posterior) {
  xt_geometry g = geom(0, 0, 0, "fd20");
  /* At 0/0 the source is under the table (posterior, +y in LPS) and the beam runs P->A. */
  XT_CHECK_NEAR(g.source.x, 0, 1e-12);
  XT_CHECK_NEAR(g.source.y, 810, 1e-9);
  XT_CHECK_NEAR(g.source.z, 0, 1e-12);
  XT_CHECK_NEAR(g.d.y, -1, 1e-15);
  /* Columns run toward the patient's left, rows toward the feet: head up, patient left on the right. */
  XT_CHECK_NEAR(g.u.x, 1, 1e-15);
  XT_CHECK_NEAR(g.v.z, -1, 1e-15);
  XT_CHECK_NEAR(xt_v3_norm(xt_v3_sub(g.det_center, g.source)), 1195, 1e-9);
}

XT_TEST(lao90_source_on_patient_right) {
  xt_geometry g = geom(90, 0, 0, "fd20");
  XT_CHECK_NEAR(g.source.x, -810, 1e-9); /* LPS: -x is the patient's right */
  XT_CHECK_NEAR(g.det_center.x, 1195 - 810, 1e-9);
  xt_geometry r = geom(-90, 0, 0, "fd20");
  XT_CHECK_NEAR(r.source.x, 810, 1e-9); /* RAO 90: source on the patient's left */
}

XT_TEST(cran_tilts_detector_to_head) {
  xt_geometry g = geom(0, 30, 0, "fd20");
  XT_CHECK(g.det_center.z > 0); /* detector toward the head (+z superior) */
  XT_CHECK(g.source.z < 0);     /* source toward the feet */
  XT_CHECK_NEAR(g.d.z, 0.5, 1e-12);
  xt_geometry c = geom(0, -30, 0, "fd20");
  XT_CHECK(c.det_center.z < 0);
}

XT_TEST(frame_is_orthonormal_at_any_pose) {
  srand(7);
  for (int n = 0; n < 500; n++) {
    xt_geometry g = geom(-180 + 360.0 * rand() / RAND_MAX, -90 + 180.0 * rand() / RAND_MAX,
                         -180 + 360.0 * rand() / RAND_MAX, "fd20-bin2");
    XT_CHECK_NEAR(xt_v3_norm(g.u), 1, 1e-12);
    XT_CHECK_NEAR(xt_v3_norm(g.v), 1, 1e-12);
    XT_CHECK_NEAR(xt_v3_norm(g.d), 1, 1e-12);
    XT_CHECK_NEAR(xt_v3_dot(g.u, g.v), 0, 1e-12);
    XT_CHECK_NEAR(xt_v3_dot(g.u, g.d), 0, 1e-12);
    XT_CHECK_NEAR(xt_v3_dot(g.v, g.d), 0, 1e-12);
    /* The documented handedness: u x v = -d (the image is viewed from the detector side). */
    xt_vec3 c = xt_v3_cross(g.u, g.v);
    XT_CHECK_NEAR(xt_v3_dot(c, g.d), -1, 1e-12);
  }
}

XT_TEST(isocentre_projects_to_detector_centre) {
  const char *modes[] = {"fd20", "fd20-bin2", "fd20-1024", "fd20-512", "thesis"};
  for (int m = 0; m < 5; m++)
    for (int a = -180; a <= 180; a += 45)
      for (int b = -90; b <= 90; b += 30) {
        xt_geometry g = geom(a, b, 17, modes[m]);
        double c, r;
        XT_REQUIRE(xt_geom_project(&g, xt_v3(0, 0, 0), &c, &r));
        XT_CHECK_NEAR(c, (g.mode.cols - 1) / 2.0, 1e-9);
        XT_CHECK_NEAR(r, (g.mode.rows - 1) / 2.0, 1e-9);
      }
}

XT_TEST(matrix_agrees_with_traced_rays) {
  /* Every point on the ray from the source through pixel (c, r) projects to (c, r). */
  xt_geometry g = geom(33, -21, 12, "fd20-512");
  double worst = 0;
  for (int r = 0; r < g.mode.rows; r += 7)
    for (int c = 0; c < g.mode.cols; c += 5) {
      xt_vec3 px = xt_geom_pixel_pos(&g, c, r);
      for (double t = 0.1; t <= 1.0; t += 0.3) {
        xt_vec3 x = xt_v3_add(g.source, xt_v3_scale(xt_v3_sub(px, g.source), t));
        double cc, rr;
        XT_REQUIRE(xt_geom_project(&g, x, &cc, &rr));
        worst = fmax(worst, fmax(fabs(cc - c), fabs(rr - r)));
      }
    }
  XT_CHECK_MSG(worst < 1e-8, "worst pixel error %g", worst);
  /* The third row gives the depth along the central beam in mm. */
  double w = g.P[2][0] * 0 + g.P[2][3];
  XT_CHECK_NEAR(w, 810, 1e-9);
}

XT_TEST(pixel_pitch_and_magnification) {
  xt_geometry g = geom(0, 0, 0, "fd20");
  xt_vec3 a = xt_geom_pixel_pos(&g, 0, 0), b = xt_geom_pixel_pos(&g, 1, 0), c = xt_geom_pixel_pos(&g, 0, 1);
  XT_CHECK_NEAR(xt_v3_norm(xt_v3_sub(b, a)), 0.154, 1e-12);
  XT_CHECK_NEAR(xt_v3_norm(xt_v3_sub(c, a)), 0.154, 1e-12);
  /* A 1 mm step at the isocentre along u spans SID/SOD * 1 mm / pitch pixels. */
  double c0, r0, c1, r1;
  xt_geom_project(&g, xt_v3(0, 0, 0), &c0, &r0);
  xt_geom_project(&g, xt_v3(1, 0, 0), &c1, &r1);
  XT_CHECK_NEAR(c1 - c0, 1195.0 / 810.0 / 0.154, 1e-9);
  /* Pixel (0,0) of the AP view sees the patient's right shoulder side, head end. */
  XT_CHECK(a.x < 0 && a.z > 0);
}

XT_TEST(detector_rotation_turns_u_toward_v) {
  xt_geometry g0 = geom(0, 0, 0, "fd20"), g = geom(0, 0, 90, "fd20");
  XT_CHECK_NEAR(xt_v3_dot(g.u, g0.v), 1, 1e-12);
  XT_CHECK_NEAR(xt_v3_dot(g.v, g0.u), -1, 1e-12);
  XT_CHECK_NEAR(xt_v3_dot(g.d, g0.d), 1, 1e-12);
}

XT_TEST(table_translation_moves_patient) {
  xt_pose p = xt_pose_default(NULL);
  p.table_mm = xt_v3(10, -20, 30);
  xt_affine a = xt_geom_patient_to_world(&p);
  xt_vec3 w = xt_aff_apply(&a, xt_v3(1, 2, 3));
  XT_CHECK_NEAR(w.x, 11, 0);
  XT_CHECK_NEAR(w.y, -18, 0);
  XT_CHECK_NEAR(w.z, 33, 0);
}

XT_TEST(modes_are_the_documented_presets) {
  const xt_detector_mode *m = xt_mode_find("fd20");
  XT_REQUIRE(m);
  XT_CHECK(m->cols == 2480 && m->rows == 1920 && m->pitch_u_mm == 0.154);
  m = xt_mode_find("fd20-bin2");
  XT_REQUIRE(m);
  XT_CHECK(m->cols == 1240 && m->rows == 960 && m->pitch_u_mm == 0.308);
  m = xt_mode_find("thesis");
  XT_REQUIRE(m);
  XT_CHECK(m->cols == 1024 && m->sod_mm == 800 && m->sid_mm == 1205);
  XT_CHECK_NEAR(m->cols * m->pitch_u_mm, 400, 1e-9);
  XT_REQUIRE(xt_mode_find("fd20-1024") && xt_mode_find("fd20-512"));
  XT_CHECK(xt_mode_find("nope") == NULL);
  XT_CHECK(xt_mode_find(NULL) == NULL);
}

/* The zoom fields of the Azurion's Instructions for Use (R1.2, "Field Size", IFU-p292): the
 * ladder of nominal diagonals and the requested detector dose of each relative to the largest,
 * typed here from the publication, not read from the table under test. */
typedef struct published_field {
  const char *detector;
  double cm[8];
  double ratio_pct[8];
  int n;
} published_field;

static const published_field published[] = {
    {"fd20", {48, 42, 37, 31, 27, 22, 19, 15}, {100, 130, 145, 170, 200, 240, 280, 330}, 8},
    {"fd15", {39, 37, 31, 27, 22, 19, 15}, {100, 110, 130, 150, 180, 215, 260}, 7},
    {"fd12", {30, 27, 22, 19, 15}, {100, 110, 130, 155, 185}, 5},
};

XT_TEST(fields_are_the_published_ladders) {
  for (size_t d = 0; d < sizeof published / sizeof published[0]; d++) {
    const published_field *pf = &published[d];
    int listed = 0;
    for (int i = 0; i < xt_mode_count(); i++) {
      const xt_detector_mode *m = xt_mode_at(i);
      if (strcmp(m->detector, pf->detector) || m->field_cm == 0) continue;
      XT_CHECK_MSG(listed < pf->n && m->field_cm == pf->cm[listed], "%s: field %g out of the published order", m->name,
                   m->field_cm);
      if (listed < pf->n) XT_CHECK_NEAR(m->dose_ratio, pf->ratio_pct[listed] / 100.0, 1e-12);
      char name[32];
      snprintf(name, sizeof name, "%s-%g", pf->detector, m->field_cm);
      XT_CHECK_MSG(!strcmp(name, m->name), "%s: a field's mode is named detector-cm", m->name);
      listed++;
    }
    XT_CHECK_MSG(listed == pf->n, "%s: %d fields, %d published", pf->detector, listed, pf->n);
  }
}

/* Each field is a centred region of its panel read out with its binning: its size on the panel is
 * its nominal diagonal (to the 16-pixel rounding of the table; the largest field is the whole
 * panel), and its projection matrix is the panel's with the pixel coordinates mapped through the
 * region: col_field = (col_panel - col0 + 1/2) / b - 1/2, the same for rows. */
XT_TEST(field_geometry_is_the_panel_region) {
  for (int i = 0; i < xt_mode_count(); i++) {
    const xt_detector_mode *m = xt_mode_at(i);
    if (m->field_cm == 0) continue;
    XT_CHECK(m->roi_col0 == (m->det_cols - m->roi_cols) / 2 && m->roi_row0 == (m->det_rows - m->roi_rows) / 2);
    XT_CHECK(m->roi_col0 * 2 + m->roi_cols == m->det_cols && m->roi_row0 * 2 + m->roi_rows == m->det_rows);
    const double diag_mm = hypot(m->roi_cols, m->roi_rows) * m->det_pitch_mm;
    XT_CHECK_MSG(fabs(diag_mm - 10.0 * m->field_cm) < 16 * sqrt(2.0) * m->det_pitch_mm + 3.5, "%s: diagonal %.1f mm",
                 m->name, diag_mm);
    XT_CHECK_NEAR(m->binning * m->cols, m->roi_cols, 1e-9);
    XT_CHECK_NEAR(m->pitch_u_mm, m->det_pitch_mm * m->binning, 1e-12);
    /* the whole panel as a mode of its own: native pixels, the same distances */
    xt_detector_mode panel =
        xt_mode_custom("panel", m->det_cols, m->det_rows, m->det_pitch_mm, m->det_pitch_mm, m->sod_mm, m->sid_mm);
    xt_pose p = xt_pose_default(m);
    p.primary_deg = 25;
    p.secondary_deg = -10;
    p.detector_rot_deg = 7;
    xt_geometry gf, gp;
    XT_REQUIRE(xt_geom_compute(&p, m, &gf, NULL) == 0 && xt_geom_compute(&p, &panel, &gp, NULL) == 0);
    XT_CHECK(gf.mode.roi_cols == m->roi_cols && gf.mode.dose_ratio == m->dose_ratio);
    for (int k = 0; k < 20; k++) {
      xt_vec3 x =
          xt_v3(-80 + 160.0 * rand() / RAND_MAX, -80 + 160.0 * rand() / RAND_MAX, -80 + 160.0 * rand() / RAND_MAX);
      double cf, rf, cp, rp;
      XT_REQUIRE(xt_geom_project(&gf, x, &cf, &rf) && xt_geom_project(&gp, x, &cp, &rp));
      XT_CHECK_NEAR(cf, (cp - m->roi_col0 + 0.5) / m->binning - 0.5, 1e-7);
      XT_CHECK_NEAR(rf, (rp - m->roi_row0 + 0.5) / m->binning - 0.5, 1e-7);
    }
  }
}

XT_TEST(custom_modes_are_whole_panels) {
  xt_detector_mode m = xt_mode_custom("t", 101, 81, 0.5, 0.6, 800, 1200);
  xt_geometry g;
  xt_pose p = xt_pose_default(&m);
  XT_REQUIRE(xt_geom_compute(&p, &m, &g, NULL) == 0);
  XT_CHECK(g.mode.roi_cols == 101 && g.mode.roi_rows == 81 && g.mode.roi_col0 == 0 && g.mode.binning == 1);
  XT_CHECK(g.mode.dose_ratio == 1 && g.mode.field_cm == 0);
}

XT_TEST(tables_refuse_what_they_cannot_read) {
  xt_table t;
  xt_msg msg;
  XT_REQUIRE(xt_table_parse("a b \"c d\" # note\n\n1 2 \"x y\"\n3 4 z\n", "t.tsv", &t, &msg) == 0);
  XT_CHECK(t.nrows == 2 && t.ncols == 3 && !strcmp(xt_table_str(&t, 0, 2), "x y") && t.line[1] == 4);
  XT_CHECK(xt_table_col(&t, "c d", NULL) == 2);
  XT_CHECK(xt_table_col(&t, "e", &msg) == XT_EFORMAT && strstr(msg.text, "t.tsv: no column 'e'"));
  double v;
  int iv;
  XT_CHECK(xt_table_num(&t, 1, 0, 0, 10, &v, NULL) == 0 && v == 3);
  XT_CHECK(xt_table_num(&t, 1, 2, 0, 10, &v, &msg) == XT_EFORMAT && strstr(msg.text, "t.tsv:4: column 'c d': 'z'"));
  XT_CHECK(xt_table_num(&t, 1, 1, 0, 3, &v, &msg) == XT_ERANGE && strstr(msg.text, "t.tsv:4: column 'b'"));
  XT_CHECK(xt_table_int(&t, 0, 0, 0, 3, &iv, NULL) == 0 && iv == 1);
  xt_table_free(&t);
  XT_CHECK(xt_table_parse("a b\n1\n", "t.tsv", &t, &msg) == XT_EFORMAT && strstr(msg.text, "t.tsv:2: 1 cells"));
  XT_CHECK(xt_table_parse("a \"b\n", "t.tsv", &t, &msg) == XT_EFORMAT && strstr(msg.text, "t.tsv:1: unterminated"));
  XT_CHECK(xt_table_parse("a a\n", "t.tsv", &t, &msg) == XT_EFORMAT && strstr(msg.text, "named twice"));
  XT_CHECK(xt_table_parse("# only a comment\n", "t.tsv", &t, &msg) == XT_EFORMAT && strstr(msg.text, "no header"));
  XT_CHECK(xt_table_read_file("/nonexistent/x.tsv", &t, &msg) == XT_EIO && strstr(msg.text, "/nonexistent/x.tsv"));
}

XT_TEST(invalid_poses_are_rejected_by_field) {
  const xt_detector_mode *m = xt_mode_find("fd20");
  xt_geometry g;
  xt_msg msg;
  xt_pose p = xt_pose_default(m);
  p.primary_deg = 181;
  XT_CHECK(xt_geom_compute(&p, m, &g, &msg) == XT_ERANGE && strstr(msg.text, "primary_deg"));
  p = xt_pose_default(m);
  p.secondary_deg = NAN;
  XT_CHECK(xt_geom_compute(&p, m, &g, &msg) == XT_ERANGE && strstr(msg.text, "secondary_deg"));
  p = xt_pose_default(m);
  p.sid_mm = 700;
  XT_CHECK(xt_geom_compute(&p, m, &g, &msg) == XT_ERANGE && strstr(msg.text, "sid_mm"));
  p = xt_pose_default(m);
  p.table_mm.z = INFINITY;
  XT_CHECK(xt_geom_compute(&p, m, &g, &msg) == XT_ERANGE && strstr(msg.text, "table_mm"));
  p = xt_pose_default(m);
  XT_CHECK(xt_geom_compute(&p, NULL, &g, &msg) == XT_EINVAL);
}

XT_TEST_MAIN(XT_ENTRY(ap_view_source_posterior) XT_ENTRY(lao90_source_on_patient_right)
                 XT_ENTRY(cran_tilts_detector_to_head) XT_ENTRY(frame_is_orthonormal_at_any_pose)
                     XT_ENTRY(isocentre_projects_to_detector_centre) XT_ENTRY(matrix_agrees_with_traced_rays)
                         XT_ENTRY(pixel_pitch_and_magnification) XT_ENTRY(detector_rotation_turns_u_toward_v)
                             XT_ENTRY(table_translation_moves_patient) XT_ENTRY(modes_are_the_documented_presets)
                                 XT_ENTRY(invalid_poses_are_rejected_by_field)
                                     XT_ENTRY(fields_are_the_published_ladders)
                                         XT_ENTRY(field_geometry_is_the_panel_region)
                                             XT_ENTRY(custom_modes_are_whole_panels)
                                                 XT_ENTRY(tables_refuse_what_they_cannot_read))
