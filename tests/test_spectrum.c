/* Tube spectra (imaging/xt_spectrum.c) against published facts:
 *  - IEC 61267:2005 RQA half-value layers, reached as the standard reaches them (aluminium set so the
 *    tube gives the RQR half-value layer at that kV, then the RQA filter added);
 *  - IEC 62220-1-1:2015 Table 3 photon fluence per air kerma (SNR_in^2) of RQA3/5/7/9;
 *  - half-value layers with copper filters from SpekPy (an independent spectrum model), as shipped
 *    by PySkinDose (table_data/hvl_tables/hvl_allura_filters_11deg.csv, anode 11 deg);
 *  - ISO 4037-1 narrow-spectrum series mean energies;
 * and closed forms (one-bin spectra, inverse square, rebinning). */
#include <math.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_spectrum.h"
#include "xt_test.h"

static double hvl_of(const xt_tube *t, int basis) {
  xt_spectrum s;
  double h = NAN;
  if (xt_spectrum_tube(t, &s, NULL) || xt_spectrum_hvl(&s, basis, &h, NULL)) return NAN;
  return h;
}

/* Inherent aluminium that gives HVL `target` (mm Al) with the other filters of *t, by bisection. */
static double al_for_hvl(xt_tube t, double target) {
  double lo = 0, hi = 20;
  for (int i = 0; i < 60; i++) {
    t.inherent_al_mm = 0.5 * (lo + hi);
    if (hvl_of(&t, XT_BASIS_ALUMINIUM) < target) lo = t.inherent_al_mm;
    else hi = t.inherent_al_mm;
  }
  return 0.5 * (lo + hi);
}

/* IEC 61267:2005 Tables 2 (RQR) and 4 (RQA): kV, RQR first HVL, RQA added Al, RQA first HVL. */
static const struct {
  const char *name;
  double kv, hvl_rqr, add_al, hvl_rqa;
} rqa[] = {
    {"RQA2", 40, 1.42, 4, 2.2},  {"RQA3", 50, 1.78, 10, 3.8},  {"RQA4", 60, 2.19, 16, 5.4},
    {"RQA5", 70, 2.58, 21, 6.8}, {"RQA6", 80, 3.01, 26, 8.2},  {"RQA7", 90, 3.48, 30, 9.2},
    {"RQA8", 100, 3.97, 34, 10.1}, {"RQA9", 120, 5.00, 40, 11.6},
};

/* Tolerance 3 %: the RQA half-value layers of IEC 61267 moved by up to 5 % between its 1994 and 2005
 * editions (RQA3 4.0 -> 3.8 mm, RQA5 7.1 -> 6.8 mm) for the same kV and filter, i.e. the quantity is
 * defined only to a few per cent by the tube's spectrum, and TASMIP reproduces its measured
 * spectra to 1-4 % (Boone & Seibert 1997). Measured here: at most 2.3 % (RQA3). */
XT_TEST(rqa_half_value_layers_match_iec_61267) {
  for (size_t i = 0; i < sizeof rqa / sizeof rqa[0]; i++) {
    xt_tube t = {rqa[i].kv, XT_ANODE_REF_DEG, 0, 0, 0};
    t.inherent_al_mm = al_for_hvl(t, rqa[i].hvl_rqr);
    XT_CHECK_NEAR(hvl_of(&t, XT_BASIS_ALUMINIUM), rqa[i].hvl_rqr, 1e-6); /* the bisection converged */
    t.filter_al_mm = rqa[i].add_al;
    const double h = hvl_of(&t, XT_BASIS_ALUMINIUM);
    XT_CHECK_MSG(fabs(h / rqa[i].hvl_rqa - 1) <= 0.03, "%s: HVL %.3f mm Al, IEC 61267 %.1f", rqa[i].name, h,
                 rqa[i].hvl_rqa);
  }
}

/* IEC 61267:2005 Table 2: RQR2..RQR9 homogeneity coefficient h = HVL1 / HVL2 (RQR10, 150 kV, is beyond
 * TASMIP's 140 kV and the tube's 125 kV). */
static const double rqr_h[] = {0.81, 0.76, 0.74, 0.71, 0.69, 0.68, 0.68, 0.68};

/* Homogeneity coefficient of the tube's beam: first HVL over second (quarter-value layer - first). */
static double homogeneity_of(const xt_tube *t) {
  xt_spectrum s, f;
  double h1 = NAN, k0 = 0, k = 0;
  if (xt_spectrum_tube(t, &s, NULL) || xt_spectrum_hvl(&s, XT_BASIS_ALUMINIUM, &h1, NULL) ||
      xt_spectrum_air_kerma(&s, 1000, &k0, NULL))
    return NAN;
  double lo = h1, hi = 20 * h1;
  for (int i = 0; i < 80; i++) {
    const double mid = 0.5 * (lo + hi);
    f = s;
    if (xt_spectrum_filter(&f, XT_BASIS_ALUMINIUM, mid, NULL) || xt_spectrum_air_kerma(&f, 1000, &k, NULL)) return NAN;
    if (k > 0.25 * k0) lo = mid;
    else hi = mid;
  }
  return h1 / (0.5 * (lo + hi) - h1);
}

/* The RQR series across kV (issue 24, point 3). IEC 61267 fixes each quality's kV and first HVL, and
 * the aluminium is set per quality (more at higher kV); xt_tube_rqr(kv) is this tube so set. Its
 * first HVL meets the table (0.5 %: the aluminium is stated to 0.1 um), and its homogeneity
 * coefficient - not fitted, so a test of the spectrum's shape at every kV - meets IEC's h within
 * 0.02 (h is stated to two decimals; measured at most 0.011, RQR4). The RQA filters on these beams
 * give the RQA HVLs within the 3 % of rqa_half_value_layers_match_iec_61267. Between the RQR kVs
 * the HVL rises with kV. */
XT_TEST(rqr_beams_hold_across_kv) {
  for (size_t i = 0; i < sizeof rqa / sizeof rqa[0]; i++) {
    xt_tube t = xt_tube_rqr(rqa[i].kv);
    const double h = hvl_of(&t, XT_BASIS_ALUMINIUM), hc = homogeneity_of(&t);
    XT_CHECK_MSG(fabs(h / rqa[i].hvl_rqr - 1) <= 0.005, "RQR at %g kV: HVL %.3f mm Al, IEC 61267 %.2f", rqa[i].kv, h,
                 rqa[i].hvl_rqr);
    XT_CHECK_MSG(fabs(hc - rqr_h[i]) <= 0.02, "RQR at %g kV: h %.3f, IEC 61267 %.2f", rqa[i].kv, hc, rqr_h[i]);
    t.filter_al_mm = rqa[i].add_al;
    const double ha = hvl_of(&t, XT_BASIS_ALUMINIUM);
    XT_CHECK_MSG(fabs(ha / rqa[i].hvl_rqa - 1) <= 0.03, "%s on the RQR beam: HVL %.3f mm Al, IEC 61267 %.1f",
                 rqa[i].name, ha, rqa[i].hvl_rqa);
  }
  double prev = 0;
  for (double kv = XT_KV_MIN; kv <= XT_KV_MAX; kv += 1) {
    xt_tube t = xt_tube_rqr(kv);
    const double h = hvl_of(&t, XT_BASIS_ALUMINIUM);
    XT_CHECK_MSG(h > prev, "RQR beam at %g kV: HVL %.3f after %.3f", kv, h, prev);
    prev = h;
  }
  XT_CHECK(isnan(xt_rqr_inherent_al_mm(150)) && isnan(xt_rqr_inherent_al_mm(XT_KV_MIN - 1)));
}

/* Why the RQR series needs its aluminium per kV: a tube of one filtration gives a first HVL that
 * rises more slowly with kV than IEC 61267's RQR table (ours: -13 % at 120 kV with the RQR5
 * filtration), and SpekPy's tube (2.5 mm Al, 11 deg) does the same. The aluminium that matches
 * our tube to SpekPy's at 73 kV and at 123 kV is the same within 0.1 mm (measured 0.044 mm): the
 * two models agree on the kV dependence of one tube. */
XT_TEST(one_filtration_follows_spekpy_across_kv) {
  xt_tube a = {73, 11.0, 0, 0, 0}, b = {123, 11.0, 0, 0, 0};
  const double al73 = al_for_hvl(a, 2.525602344882635), al123 = al_for_hvl(b, 4.412723537076192);
  XT_CHECK_MSG(fabs(al123 - al73) <= 0.1, "Al matching SpekPy: %.3f mm at 73 kV, %.3f mm at 123 kV", al73, al123);
}

/* IEC 62220-1-1:2015 Table 3, photons / (mm^2 uGy). Tolerance 3 %: the table moved by 2-5 % when the
 * 2005 RQA beams replaced the 1994 ones (RQA5 30174 -> 29653, RQA3 21759 -> 20673); measured here
 * at most 1.9 %. This also checks the air-kerma side (mu_en/rho of air) end to end. */
XT_TEST(rqa_fluence_per_air_kerma_matches_iec_62220) {
  static const struct {
    int i;
    double q_per_k;
  } ref[] = {{1, 20673}, {3, 29653}, {5, 32490}, {7, 31077}};
  for (size_t r = 0; r < sizeof ref / sizeof ref[0]; r++) {
    const int i = ref[r].i;
    xt_tube t = {rqa[i].kv, XT_ANODE_REF_DEG, 0, 0, 0};
    t.inherent_al_mm = al_for_hvl(t, rqa[i].hvl_rqr);
    t.filter_al_mm = rqa[i].add_al;
    xt_spectrum s;
    double k = 0;
    XT_REQUIRE(xt_spectrum_tube(&t, &s, NULL) == 0 && xt_spectrum_air_kerma(&s, 1000, &k, NULL) == 0);
    const double q = xt_spectrum_fluence(&s) / k;
    XT_CHECK_MSG(fabs(q / ref[r].q_per_k - 1) <= 0.03, "%s: %.0f photons/(mm^2 uGy), IEC 62220-1-1 %.0f",
                 rqa[i].name, q, ref[r].q_per_k);
  }
}

/* SpekPy, anode 11 deg, 2.5 mm Al inherent, no added Al: HVL (mm Al) for Cu 0 / 0.1 / 0.4 / 0.9 mm.
 * Our tube is set to SpekPy's Cu-free HVL (the two models' inherent filtrations differ), then the
 * copper is added: this tests the beam hardening by the Philips spectral filters. Tolerance 3 %;
 * measured at most 0.5 %. */
XT_TEST(copper_filter_half_value_layers_match_spekpy) {
  static const struct {
    double kv, hvl[4];
  } ref[] = {{73, {2.525602344882635, 4.042849534545121, 6.310666028228368, 7.872917396751086}},
             {123, {4.412723537076192, 6.601254225915531, 9.427253901148324, 11.22046444374445}}};
  static const double cu[4] = {0, 0.1, 0.4, 0.9};
  for (size_t r = 0; r < 2; r++) {
    xt_tube t = {ref[r].kv, 11.0, 0, 0, 0};
    t.inherent_al_mm = al_for_hvl(t, ref[r].hvl[0]);
    for (int c = 1; c < 4; c++) {
      t.filter_cu_mm = cu[c];
      const double h = hvl_of(&t, XT_BASIS_ALUMINIUM);
      XT_CHECK_MSG(fabs(h / ref[r].hvl[c] - 1) <= 0.03, "%g kV + %g mm Cu: HVL %.3f mm Al, SpekPy %.3f", ref[r].kv,
                   cu[c], h, ref[r].hvl[c]);
    }
  }
}

/* ISO 4037-1 narrow-spectrum series: 4 mm Al total inherent filtration plus copper; mean energies
 * 33, 48, 65, 83 keV. TASMIP's tube carries about 1.6 mm Al of its own (0.9 mm more reach RQR, whose
 * tubes have ~2.5 mm), so 2.4 mm Al are added. Tolerance 3 % (ISO states the mean energies to the
 * keV); measured at most 1.5 %. */
XT_TEST(narrow_spectrum_mean_energies_match_iso_4037) {
  static const struct {
    double kv, cu, emean;
  } ref[] = {{40, 0.21, 33}, {60, 0.6, 48}, {80, 2.0, 65}, {100, 5.0, 83}};
  for (size_t r = 0; r < sizeof ref / sizeof ref[0]; r++) {
    xt_tube t = {ref[r].kv, XT_ANODE_REF_DEG, 2.4, 0, 0};
    xt_spectrum s;
    XT_REQUIRE(xt_spectrum_tube(&t, &s, NULL) == 0 && xt_spectrum_filter(&s, XT_BASIS_COPPER, ref[r].cu, NULL) == 0);
    const double e = xt_spectrum_mean_energy(&s);
    XT_CHECK_MSG(fabs(e / ref[r].emean - 1) <= 0.03, "N-%g: mean energy %.2f keV, ISO 4037 %g", ref[r].kv, e,
                 ref[r].emean);
  }
}

XT_TEST(one_bin_spectrum_follows_closed_forms) {
  xt_spectrum s;
  memset(&s, 0, sizeof s);
  s.n = 1;
  s.e_kev[0] = 60;
  s.width_kev[0] = 1;
  s.fluence[0] = 1e5;
  double mr = 0, h = 0, k1 = 0, k2 = 0;
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_ALUMINIUM, 60, &mr, NULL) == 0);
  const double mu = mr * xt_basis_density(XT_BASIS_ALUMINIUM) * 0.1; /* 1/mm */
  XT_REQUIRE(xt_spectrum_hvl(&s, XT_BASIS_ALUMINIUM, &h, NULL) == 0);
  XT_CHECK_NEAR(h, log(2.0) / mu, 1e-7 * h);
  /* kerma: phi E mu_en/rho, with NIST's 60 keV entry exactly */
  XT_REQUIRE(xt_spectrum_air_kerma(&s, 1000, &k1, NULL) == 0 && xt_spectrum_air_kerma(&s, 2000, &k2, NULL) == 0);
  XT_CHECK_NEAR(k1, 1e5 * 60 * 0.03041 * XT_KERMA_UGY, 1e-12 * k1);
  XT_CHECK_NEAR(k2, k1 / 4, 1e-12 * k1);
  XT_REQUIRE(xt_spectrum_filter(&s, XT_BASIS_ALUMINIUM, 3.0, NULL) == 0);
  XT_CHECK_NEAR(s.fluence[0], 1e5 * exp(-3.0 * mu), 1e-9 * s.fluence[0]);
  XT_CHECK_NEAR(xt_spectrum_mean_energy(&s), 60, 0);
}

XT_TEST(tasmip_spectrum_shape_and_bins) {
  xt_spectrum s;
  XT_REQUIRE(xt_spectrum_tasmip(80.4, &s, NULL) == 0);
  XT_CHECK(s.n == 71); /* 10..80 keV */
  XT_CHECK(s.e_kev[0] == 10 && s.e_kev[s.n - 1] == 80);
  for (int i = 0; i < s.n; i++) XT_CHECK(s.fluence[i] >= 0 && s.width_kev[i] == 1);
  /* the tungsten K-alpha lines (58-59 keV), smoothed over a few 1 keV bins, rise above the falling
   * continuum */
  XT_CHECK(s.fluence[60 - 10] > 1.05 * s.fluence[56 - 10]);
  /* the published polynomial at a bin, by hand: 60 keV at 80.4 kV */
  const double *a = xt_tasmip_coef[60 - XT_TASMIP_EMIN], v = 80.4;
  XT_CHECK_NEAR(s.fluence[50], a[0] + a[1] * v + a[2] * v * v + a[3] * v * v * v, 1e-9 * s.fluence[50]);
  /* more kV: more photons and harder */
  xt_spectrum s2;
  XT_REQUIRE(xt_spectrum_tasmip(100, &s2, NULL) == 0);
  XT_CHECK(xt_spectrum_fluence(&s2) > xt_spectrum_fluence(&s) &&
           xt_spectrum_mean_energy(&s2) > xt_spectrum_mean_energy(&s));
}

XT_TEST(anode_angle_and_filters_harden_the_beam) {
  xt_tube t = xt_tube_default();
  const double h12 = hvl_of(&t, XT_BASIS_ALUMINIUM);
  t.anode_deg = 8;
  const double h8 = hvl_of(&t, XT_BASIS_ALUMINIUM);
  t.anode_deg = 16;
  const double h16 = hvl_of(&t, XT_BASIS_ALUMINIUM);
  XT_CHECK(h8 > h12 && h12 > h16);
  /* a small effect on axis: a few per cent over 8..16 deg */
  XT_CHECK(h8 / h16 < 1.10);
  t = xt_tube_default();
  t.filter_cu_mm = 0.3;
  XT_CHECK(hvl_of(&t, XT_BASIS_ALUMINIUM) > h12);
}

XT_TEST(rebin_keeps_fluence_and_mean_energy) {
  xt_spectrum s, r;
  xt_tube t = xt_tube_default();
  XT_REQUIRE(xt_spectrum_tube(&t, &s, NULL) == 0);
  XT_REQUIRE(xt_spectrum_rebin(&s, 16, &r, NULL) == 0);
  XT_CHECK(r.n == 16);
  XT_CHECK_NEAR(xt_spectrum_fluence(&r), xt_spectrum_fluence(&s), 1e-9 * xt_spectrum_fluence(&s));
  XT_CHECK_NEAR(xt_spectrum_mean_energy(&r), xt_spectrum_mean_energy(&s), 1e-9 * 60);
  double w = 0;
  for (int i = 0; i < r.n; i++) w += r.width_kev[i];
  XT_CHECK_NEAR(w, s.n, 1e-12);
  XT_REQUIRE(xt_spectrum_rebin(&s, 500, &r, NULL) == 0);
  XT_CHECK(r.n == s.n);
}

XT_TEST(bad_tubes_are_rejected_with_the_field) {
  xt_msg msg;
  xt_spectrum s;
  xt_tube t = xt_tube_default();
  t.kv = 150;
  XT_CHECK(xt_spectrum_tube(&t, &s, &msg) == XT_ERANGE && strstr(msg.text, "tube.kv"));
  t = xt_tube_default();
  t.filter_cu_mm = NAN;
  XT_CHECK(xt_spectrum_tube(&t, &s, &msg) == XT_ERANGE && strstr(msg.text, "filter_cu_mm"));
  t = xt_tube_default();
  t.anode_deg = 45;
  XT_CHECK(xt_tube_validate(&t, &msg) == XT_ERANGE && strstr(msg.text, "anode_deg"));
  XT_CHECK(xt_spectrum_rebin(&s, 0, &s, &msg) == XT_ERANGE);
  double k;
  XT_CHECK(xt_spectrum_air_kerma(&s, -1, &k, &msg) == XT_ERANGE);
}

XT_TEST_MAIN(XT_ENTRY(rqa_half_value_layers_match_iec_61267) XT_ENTRY(rqr_beams_hold_across_kv)
                 XT_ENTRY(one_filtration_follows_spekpy_across_kv) XT_ENTRY(rqa_fluence_per_air_kerma_matches_iec_62220)
                 XT_ENTRY(copper_filter_half_value_layers_match_spekpy)
                     XT_ENTRY(narrow_spectrum_mean_energies_match_iso_4037) XT_ENTRY(one_bin_spectrum_follows_closed_forms)
                         XT_ENTRY(tasmip_spectrum_shape_and_bins) XT_ENTRY(anode_angle_and_filters_harden_the_beam)
                             XT_ENTRY(rebin_keeps_fluence_and_mean_energy) XT_ENTRY(bad_tubes_are_rejected_with_the_field))
