/* Issue 24, point 2: protocols as data and the reference air kerma (tools/xt_refak.h), against
 * independent facts. The IFU's PMMA set-up against a hand calculation written here in double
 * precision: the air kerma at the patient entrance reference point from the tube output, the mAs and
 * the inverse square law, and the detector dose behind 200 mm PMMA from the tube's spectrum, PMMA's
 * mu/rho and NIST's air mu_en/rho (typed here, Hubbell & Seltzer, not the library's table); the FD20
 * Cerebral 2 fps Low reference air kerma against the values the IFU publishes (IFU-p292); the ratio of
 * the fields' air kerma against their dose ratios; every protocol row, the multiphase table, and
 * broken tables named by file, line and column. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_chain.h"
#include "xt_drc.h"
#include "xt_exposure.h"
#include "xt_refak.h"
#include "xt_spectrum.h"
#include "xt_test.h"

/* NIST X-ray mass energy-absorption coefficients, air (dry, near sea level), keV and cm^2/g
 * (Hubbell & Seltzer, NIST SRD 126), log-log interpolated. */
static double nist_air(double e) {
  static const double E[] = {10, 15, 20, 30, 40, 50, 60, 80, 100, 150};
  static const double M[] = {4.742, 1.334, 0.5389, 0.1537, 0.06833, 0.04098, 0.03041, 0.02407, 0.02325, 0.02496};
  int i = 0;
  while (i < 8 && e > E[i + 1]) i++;
  const double t = log(e / E[i]) / log(E[i + 1] / E[i]);
  return exp(log(M[i]) + t * log(M[i + 1] / M[i]));
}

static xt_refak *open_refak(int scatter) {
  xt_refak_options o = {XT_BACKEND_CPU, 2, 48, scatter, 0};
  xt_refak *r = NULL;
  xt_msg msg;
  if (xt_refak_open(&o, &r, &msg)) fprintf(stderr, "refak: %s\n", msg.text);
  return r;
}

/* ---- the set-up against a hand calculation ------------------------------------------------------- */

XT_TEST(reference_set_up_against_a_hand_calculation) {
  xt_refak *r = open_refak(0);
  XT_REQUIRE(r);
  const int id = xt_protocol_find("cerebral_2fps_low");
  const xt_detector_mode *m = xt_mode_find("fd20-48");
  XT_REQUIRE(id > 0 && m);
  xt_refak_result res;
  xt_msg msg;
  XT_REQUIRE_MSG(xt_refak_measure(r, id, m, &res, &msg) == 0, "%s", msg.text);
  XT_CHECK(res.settled && res.frames < 40);
  XT_CHECK_NEAR(res.d_irp_mm, 660.0, 1e-9); /* SOD 810 - 150 */

  /* the tube's spectrum at the settled exposure, its filter the protocol's */
  xt_chain_params p = xt_chain_params_default();
  XT_REQUIRE(xt_protocol_apply(&p, id, NULL) == 0);
  xt_tube t = {res.kv, p.anode_deg, p.inherent_al_mm, p.filter_al_mm, p.filter_cu_mm};
  xt_spectrum s;
  XT_REQUIRE(xt_spectrum_tube(&t, &s, NULL) == 0);
  /* air kerma per mAs at 1 m: photons/mm^2 x 100 (per cm^2) x keV x 1.602e-16 J/keV x mu_en/rho cm^2/g x
   * 1000 g/kg, in uGy; the same behind 200 mm PMMA (mu/rho of PMMA at 1.19 g/cm^3, narrow beam); and the
   * panel's response, the energy the CsI absorbs (fluence x E x (1 - exp(-mu/rho rho fill t))), open and
   * behind the PMMA: the loop's meter converts it to a dose with the open beam's signal per air kerma */
  double k_open = 0, k_pmma = 0, e_open = 0, e_pmma = 0;
  const double rho_csi = xt_basis_density(XT_BASIS_CSI) * p.csi_fill;
  for (int b = 0; b < s.n; b++) {
    double mr = 0, mr_csi = 0;
    XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_PMMA, s.e_kev[b], &mr, NULL) == 0);
    XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_CSI, s.e_kev[b], &mr_csi, NULL) == 0);
    const double tr = exp(-mr * 1.19 * 20.0);
    const double k = s.fluence[b] * 100.0 * s.e_kev[b] * 1.602176634e-16 * nist_air(s.e_kev[b]) * 1000.0 * 1e6;
    const double e = s.fluence[b] * s.e_kev[b] * (1.0 - exp(-mr_csi * rho_csi * p.csi_mm * 0.1));
    k_open += k;
    k_pmma += k * tr;
    e_open += e;
    e_pmma += e * tr;
  }
  const double T_air = k_pmma / k_open, T_det = e_pmma / e_open; /* spectrum-weighted transmissions */
  XT_CHECK_NEAR(res.kerma_ugy_per_mas / k_open, 1.0, 0.02); /* the chain's tube output */
  /* air kerma at the PERP: tube output x mAs x (1000 / 660)^2 */
  const double k_perp = res.kerma_ugy_per_mas * res.mas * pow(1000.0 / 660.0, 2) * 1e-3;
  XT_CHECK_NEAR(res.k_irp_mgy / k_perp, 1.0, 0.02);
  XT_CHECK_NEAR(res.k_irp_mgy_min / (res.k_irp_mgy * 2 * 60), 1.0, 1e-12); /* 2 fps */
  /* the detector dose: tube output x mAs x T x (1000 / 1195)^2 in front of the grid, where the loop's
   * meter reads it (the panel is calibrated grid in, so its reading divides the grid's primary
   * transmission out again: behind the grid the signal is x grid_tp) */
  const double d_front = res.kerma_ugy_per_mas * res.mas * T_det * pow(1000.0 / 1195.0, 2) * 1e3;
  XT_CHECK_MSG(fabs(res.detector_ngy / d_front - 1.0) < 0.02, "detector %.2f nGy, hand %.2f nGy (T %.5f)",
               res.detector_ngy, d_front, T_det);
  XT_CHECK_NEAR((res.detector_ngy * p.grid_tp) / (d_front * p.grid_tp), 1.0, 0.02);
  /* the meter is calibrated with the open beam: behind 200 mm PMMA the hardened beam gives the CsI more
   * energy per air kerma, and the reading exceeds the air kerma there by T_det / T_air (~1.35) */
  const double d_air = res.kerma_ugy_per_mas * res.mas * T_air * pow(1000.0 / 1195.0, 2) * 1e3;
  printf("T_air %.5f, T_det %.5f, meter %.1f nGy, air kerma at the detector %.1f nGy (behind the grid %.1f)\n", T_air,
         T_det, res.detector_ngy, d_air, d_air * p.grid_tp);
  XT_CHECK(T_det / T_air > 1.1 && T_det / T_air < 1.6);
  /* a plausible DSA-class detector dose (0.5-5 uGy per image) for the calibrated protocol */
  XT_CHECK(d_air > 500 && d_air < 5000 && res.detector_ngy > 500 && res.detector_ngy < 5000);
  xt_refak_close(r);
}

/* ---- the IFU's published values ----------------------------------------------------------------- */

/* FD20, Cerebral 2 fps Low, reference air kerma per image (mGy), IFU-p292 [S]. */
static const char *const fd20_fields[8] = {"fd20-48", "fd20-42", "fd20-37", "fd20-31",
                                           "fd20-27", "fd20-22", "fd20-19", "fd20-15"};
static const double fd20_ak[8] = {0.463, 0.605, 0.677, 0.798, 0.946, 1.149, 1.358, 1.620};

XT_TEST(cerebral_2fps_low_at_48_cm_within_25_percent_of_the_ifu) {
  xt_refak *r = open_refak(0);
  XT_REQUIRE(r);
  xt_refak_result res;
  xt_msg msg;
  XT_REQUIRE(xt_refak_measure(r, xt_protocol_find("cerebral_2fps_low"), xt_mode_find("fd20-48"), &res, &msg) == 0);
  XT_CHECK_MSG(fabs(res.k_irp_mgy / 0.463 - 1.0) <= 0.25, "%.4f mGy/img against 0.463", res.k_irp_mgy);
  xt_refak_close(r);
}

/* The other seven fields are predictions: the protocol's detector dose was calibrated on 48 cm alone. */
XT_TEST(cerebral_2fps_low_in_every_fd20_field_within_25_percent_of_the_ifu) {
  if (!xt_mode_find("fd20-15")) { /* the field modes of issue 24, point 1 */
    printf("skipped: no fd20 field modes\n");
    return;
  }
  xt_refak *r = open_refak(0);
  XT_REQUIRE(r);
  const int id = xt_protocol_find("cerebral_2fps_low");
  double k48 = 0;
  for (int i = 0; i < 8; i++) {
    const xt_detector_mode *m = xt_mode_find(fd20_fields[i]);
    XT_REQUIRE(m);
    xt_refak_result res;
    xt_msg msg;
    XT_REQUIRE_MSG(xt_refak_measure(r, id, m, &res, &msg) == 0, "%s", msg.text);
    XT_CHECK(res.settled);
    XT_CHECK_MSG(fabs(res.k_irp_mgy / fd20_ak[i] - 1.0) <= 0.25, "%s: %.4f mGy/img against %.3f", m->name,
                 res.k_irp_mgy, fd20_ak[i]);
    /* the loop asks for the field's dose ratio; at the curve's constant 70 kV the air kerma follows it */
    if (i == 0) k48 = res.k_irp_mgy;
    XT_CHECK_NEAR(res.target_ngy / 858.0, m->dose_ratio, 1e-9);
    XT_CHECK_MSG(res.kv != 70 || fabs(res.k_irp_mgy / k48 / m->dose_ratio - 1.0) < 0.01, "%s: ratio %.4f, dose ratio %.2f",
                 m->name, res.k_irp_mgy / k48, m->dose_ratio);
  }
  xt_refak_close(r);
}

/* The air kerma per image does not depend on the frame speed (IFU-p292): the rate does, linearly. */
XT_TEST(air_kerma_per_image_does_not_depend_on_the_frame_speed) {
  xt_refak *r = open_refak(0);
  XT_REQUIRE(r);
  const char *names[3] = {"cardiac_7_5", "cardiac_15", "cardiac_30"};
  xt_refak_result res[3];
  for (int i = 0; i < 3; i++) {
    xt_msg msg;
    XT_REQUIRE_MSG(xt_refak_measure(r, xt_protocol_find(names[i]), xt_mode_find("fd20-48"), &res[i], &msg) == 0, "%s",
                   msg.text);
  }
  XT_CHECK_NEAR(res[1].k_irp_mgy / res[0].k_irp_mgy, 1.0, 1e-9);
  XT_CHECK_NEAR(res[2].k_irp_mgy / res[0].k_irp_mgy, 1.0, 1e-9);
  XT_CHECK_NEAR(res[2].k_irp_mgy_min / res[0].k_irp_mgy_min, 4.0, 1e-9);
  xt_refak_close(r);
}

/* ---- the tables --------------------------------------------------------------------------------- */

XT_TEST(every_protocol_row_parses_and_applies) {
  XT_CHECK(xt_protocol_count() > 7);
  static const char *const first[7] = {"custom", "fluoro_low", "fluoro_normal", "fluoro_high", "cine_15", "cine_30", "dsa"};
  for (int i = 0; i < 7; i++) XT_CHECK(!strcmp(xt_protocol_name(i), first[i]));
  for (int id = 1; id < xt_protocol_count(); id++) {
    const xt_protocol *pr = xt_protocol_at(id);
    xt_chain_params p = xt_chain_params_default();
    xt_msg msg;
    XT_CHECK_MSG(xt_protocol_apply(&p, id, &msg) == 0, "%s: %s", pr->name, msg.text);
    XT_CHECK(p.protocol == id && p.drc == 1 && p.grid == 1 && p.drc_target_ngy == pr->detector_ngy);
    XT_CHECK(p.dsa == (pr->kind == XT_PROTOCOL_KIND_DSA) && xt_protocol_find(pr->name) == id);
    XT_CHECK(xt_protocol_fps(id) > 0 && *pr->source && *pr->patient);
    XT_CHECK(pr->prepare_ms == (pr->kind == XT_PROTOCOL_KIND_FLUORO ? 50 : 300) && pr->first_frame_ms == 0);
    /* the loop follows the protocol's curve, which starts where the preset's exposure is reachable */
    const xt_drc_law law = xt_drc_law_of(&p);
    XT_CHECK(law.curve.n == xt_protocol_curve(id)->n && law.curve.n >= 2);
    xt_drc d;
    xt_drc_reset(&d, &p);
    XT_CHECK(d.s >= 0 && d.s <= law.curve.n - 1);
  }
  /* the default curve is issue 11's, node for node (xt_drc.h's table) */
  const xt_drc_nodes *c = xt_protocol_curve(XT_PROTOCOL_FLUORO_NORMAL);
  static const double kv[8] = {60, 70, 70, 80, 80, 90, 90, 0}, ma[8] = {10, 10, 10, 10, 100, 100, 400, 400},
                      ms[8] = {3, 3, 8, 8, 8, 8, 8, 8};
  XT_REQUIRE(c == xt_drc_nodes_default() && c->n == 8);
  for (int i = 0; i < 8; i++) XT_CHECK(c->kv[i] == kv[i] && c->ma[i] == ma[i] && c->ms[i] == ms[i]);
  /* a multiphase protocol: its phases and the frame speed through a run */
  const int v = xt_protocol_find("vascular_multiphase");
  xt_protocol_phase ph[8];
  XT_REQUIRE(v > 0 && xt_protocol_phases(v, ph, 8) == 3);
  XT_CHECK(ph[0].fps == 2 && ph[0].seconds == 3 && ph[1].fps == 1 && ph[1].seconds == 5 && ph[2].fps == 0.5 &&
           ph[2].seconds == 10);
  XT_CHECK(xt_protocol_fps_at(v, 0) == 2 && xt_protocol_fps_at(v, 2.9) == 2 && xt_protocol_fps_at(v, 3) == 1 &&
           xt_protocol_fps_at(v, 8.5) == 0.5 && xt_protocol_fps_at(v, 100) == 0.5);
  XT_CHECK(xt_protocol_phases(XT_PROTOCOL_CINE_15, ph, 8) == 0 && xt_protocol_fps_at(XT_PROTOCOL_CINE_15, 50) == 15);
}

/* A table of one curve and two protocols, mutated below. */
static const char *curves_ok = "curve node kv ma ms\n"
                               "default 0 60 10 3\n"
                               "default 1 max 10 3\n";

static void expect_error(const char *protocols, const char *curves, const char *want1, const char *want2) {
  xt_protocol_set *s = NULL;
  xt_msg msg = {{0}};
  const int rc = xt_protocol_set_parse(protocols, "p.tsv", curves ? curves : curves_ok, "c.tsv", &s, &msg);
  XT_CHECK_MSG(rc != 0 && !s && strstr(msg.text, want1) && strstr(msg.text, want2), "rc %d: %s (want '%s', '%s')", rc,
               msg.text, want1, want2);
}

XT_TEST(broken_tables_are_named_by_file_line_and_column) {
  const char *head = "name kind fps kv ma pulse_ms filter_al_mm filter_cu_mm detector_ngy curve patient temporal_alpha "
                     "phases prepare_ms first_frame_ms source\n";
  const char *rows = "custom custom 0 0 0 0 0 0 0 default all 0 - 0 0 x\n"
                     "fluoro_low fluoro 7.5 70 10 5 1 0.9 20 default all 0.3 - 0 0 x\n"
                     "fluoro_normal fluoro 15 70 15 5 1 0.4 40 default all 0.4 - 0 0 x\n"
                     "fluoro_high fluoro 15 75 30 6 1 0.2 80 default all 0.5 - 0 0 x\n"
                     "cine_15 exposure 15 75 100 6 1 0.1 150 default all 1 - 0 0 x\n"
                     "cine_30 exposure 30 75 100 6 1 0.1 150 default all 1 - 0 0 x\n"
                     "dsa dsa 3 70 200 50 1 0 2000 default all 1 - 0 0 x\n";
  char text[4096];
  /* the good table parses */
  snprintf(text, sizeof text, "%s%smulti exposure 2 70 100 50 1 0.1 900 default all 1 2x3s,1x5s 0 0 x\n", head, rows);
  xt_protocol_set *s = NULL;
  xt_msg msg;
  XT_REQUIRE_MSG(xt_protocol_set_parse(text, "p.tsv", curves_ok, "c.tsv", &s, &msg) == 0, "%s", msg.text);
  XT_CHECK(xt_protocol_set_count(s) == 8 && xt_protocol_set_at(s, 7)->nphases == 2);
  xt_protocol_set_free(s);
  /* a non-number: file, line 9, column */
  snprintf(text, sizeof text, "%s%smulti exposure 2 seventy 100 50 1 0.1 900 default all 1 - 0 0 x\n", head, rows);
  expect_error(text, NULL, "p.tsv:9:", "column 'kv'");
  /* a wrong cell count: file and line */
  snprintf(text, sizeof text, "%s%smulti exposure 2 70 100 50 1 0.1 900 default all 1 -\n", head, rows);
  expect_error(text, NULL, "p.tsv:9:", "13 cells");
  /* a missing column: file and the column */
  expect_error("name kind fps\ncustom custom 0\n", NULL, "p.tsv", "no column 'kv'");
  /* a bad multiphase cell, an unknown curve, a row out of issue 11's order */
  snprintf(text, sizeof text, "%s%smulti exposure 2 70 100 50 1 0.1 900 default all 1 2x3s;1x5s 0 0 x\n", head, rows);
  expect_error(text, NULL, "p.tsv:9:", "column 'phases'");
  snprintf(text, sizeof text, "%s%smulti exposure 2 70 100 50 1 0.1 900 turbo all 1 - 0 0 x\n", head, rows);
  expect_error(text, NULL, "p.tsv:9:", "column 'curve'");
  snprintf(text, sizeof text, "%sfluoro_low fluoro 7.5 70 10 5 1 0.9 20 default all 0.3 - 0 0 x\n", head);
  expect_error(text, NULL, "p.tsv:2:", "column 'name'");
  /* curves: a segment changing two factors, a falling factor, a non-number */
  snprintf(text, sizeof text, "%s%s", head, rows);
  expect_error(text, "curve node kv ma ms\ndefault 0 60 10 3\ndefault 1 70 20 3\n", "c.tsv:3:", "exactly one");
  expect_error(text, "curve node kv ma ms\ndefault 0 60 10 3\ndefault 1 60 5 3\n", "c.tsv:3:", "column 'ma'");
  expect_error(text, "curve node kv ma ms\ndefault 0 60 10 3\ndefault 1 60 10 x\n", "c.tsv:3:", "column 'ms'");
}

XT_TEST_MAIN(XT_ENTRY(reference_set_up_against_a_hand_calculation)
                 XT_ENTRY(cerebral_2fps_low_at_48_cm_within_25_percent_of_the_ifu)
                     XT_ENTRY(cerebral_2fps_low_in_every_fd20_field_within_25_percent_of_the_ifu)
                         XT_ENTRY(air_kerma_per_image_does_not_depend_on_the_frame_speed)
                             XT_ENTRY(every_protocol_row_parses_and_applies)
                                 XT_ENTRY(broken_tables_are_named_by_file_line_and_column))
