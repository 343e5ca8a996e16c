/* Issue 11 on the CPU, against independent facts: exposure settings (mA x pulse = mAs, presets,
 * named errors), the air kerma at the reference point against the closed form from the TASMIP
 * spectrum, NIST's air mu_en/rho (typed here from the NIST table, not the library's), the mAs and
 * the distance; the kerma-area product against field area x kerma at two distances; the
 * collimator and grid in the detected signal; the dose-rate loop's measurement against the closed
 * form of an open field, its settling after a step in water-equivalent thickness, and its clamp
 * with the shutters closed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_chain.h"
#include "xt_chain_internal.h"
#include "xt_dose.h"
#include "xt_drc.h"
#include "xt_exposure.h"
#include "xt_test.h"
#include "xt_test_chain.h"

static xt_proj *cpu_proj_with(xt_model *m) { return xt_tc_proj(XT_BACKEND_CPU, 2, &m, m ? 1 : 0); }

static xt_geometry geom(const char *mode) { return xt_tc_geom(mode, 0, 0, 0); }

/* A quiet panel (no fixed pattern, defects, lag, electronic noise, blur). Its resampled modes'
 * pixels read the mean of their native pixels' codes, so they saturate at the air kerma a native
 * 0.154 mm FD20 pixel does, whatever the mode. */
static xt_chain_params quiet(void) {
  xt_chain_params p = xt_tc_quiet();
  p.psf_mm = 0;
  return p;
}

/* A soft-tissue slab `mm` thick across the beam (the beam runs along -y at 0/0), 400 x 400 mm. */
static xt_model *slab(double mm) {
  const double sp[3] = {10.0, mm, 10.0};
  xt_volume *v = NULL;
  xt_model *m = NULL;
  if (xt_volume_create(40, 1, 40, sp, XT_VOXEL_U8, &v, NULL)) return NULL;
  v->materials = malloc(sizeof *v->materials);
  if (!v->materials || xt_materials_default(60, v->materials, NULL)) return NULL;
  memset(v->data, XT_MAT_SOFT, 40 * 40);
  if (xt_model_from_volume(v, "slab", &m, NULL)) return NULL;
  return m;
}

XT_TEST(exposure_settings_couple_current_pulse_and_mas) {
  xt_chain_params p = xt_chain_params_default();
  xt_msg msg;
  XT_CHECK(xt_exposure_set(&p, "pulse_ms", 10, &msg) == 0);
  XT_CHECK(xt_exposure_set(&p, "ma", 25, &msg) == 0);
  XT_CHECK_NEAR(p.mas, 0.25, 1e-12); /* 25 mA x 10 ms */
  XT_CHECK(xt_exposure_set(&p, "pulse_ms", 4, &msg) == 0); /* the current stays */
  XT_CHECK_NEAR(p.mas, 0.1, 1e-12);
  XT_CHECK_NEAR(xt_exposure_ma(&p), 25, 1e-9);
  XT_CHECK(xt_exposure_set(&p, "mas", 0.2, &msg) == 0); /* the pulse stays */
  XT_CHECK_NEAR(xt_exposure_ma(&p), 50, 1e-9);
  XT_CHECK(xt_exposure_set(&p, "ma", 5000, &msg) == XT_ERANGE && strstr(msg.text, "chain.ma"));
  XT_CHECK(xt_exposure_set(&p, "shutter_left", 1.5, &msg) == XT_ERANGE && strstr(msg.text, "shutter_left"));
  XT_CHECK(xt_exposure_set(&p, "protocol", XT_PROTOCOL_COUNT, &msg) == XT_ERANGE && strstr(msg.text, "protocol"));
  /* every preset is a valid parameter set and names itself */
  for (int id = 1; id < XT_PROTOCOL_COUNT; id++) {
    xt_chain_params q = xt_chain_params_default();
    XT_CHECK_MSG(xt_protocol_apply(&q, id, &msg) == 0, "%s: %s", xt_protocol_name(id), msg.text);
    XT_CHECK(q.protocol == id && q.grid == 1 && q.drc == 1 && xt_protocol_fps(id) > 0);
    XT_CHECK(xt_protocol_find(xt_protocol_name(id)) == id);
  }
  xt_chain_params lo = xt_chain_params_default(), hi = lo;
  XT_REQUIRE(xt_protocol_apply(&lo, XT_PROTOCOL_FLUORO_LOW, NULL) == 0);
  XT_REQUIRE(xt_protocol_apply(&hi, XT_PROTOCOL_FLUORO_HIGH, NULL) == 0);
  XT_CHECK(lo.drc_target_ngy < hi.drc_target_ngy && lo.filter_cu_mm > hi.filter_cu_mm);
  XT_CHECK(xt_protocol_find("turbo") == -1);
}

/* NIST X-ray mass energy-absorption coefficients, air (dry, near sea level), keV and cm^2/g
 * (Hubbell & Seltzer, NIST SRD 126), log-log interpolated. */
static double nist_air(double e) {
  static const double t[][2] = {{10, 4.742},  {15, 1.334},   {20, 0.5389},  {30, 0.1537},  {40, 0.06833}, {50, 0.04098},
                                {60, 0.03041}, {80, 0.02407}, {100, 0.02325}, {150, 0.02496}, {200, 0.02672}};
  int i = 0;
  while (i < 9 && e > t[i + 1][0]) i++;
  const double f = log(e / t[i][0]) / log(t[i + 1][0] / t[i][0]);
  return exp(log(t[i][1]) + f * log(t[i + 1][1] / t[i][1]));
}

/* K_irp = mAs x sum_E phi(E) E (mu_en/rho)(E) x 1.602e-5 uGy x (1000 / (SOD - 150))^2 */
XT_TEST(air_kerma_per_frame_matches_the_closed_form) {
  const double kvs[3] = {60, 80, 110}, cus[3] = {0, 0.1, 0.9}, sods[2] = {810, 700};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++) {
      xt_chain_params p = xt_chain_params_default();
      p.kv = kvs[a];
      p.filter_cu_mm = cus[a];
      p.mas = 0.37;
      xt_tube tube = {p.kv, p.anode_deg, p.inherent_al_mm, p.filter_al_mm, p.filter_cu_mm};
      xt_spectrum s;
      XT_REQUIRE(xt_spectrum_tube(&tube, &s, NULL) == 0);
      double k1m = 0;
      for (int i = 0; i < s.n; i++) k1m += s.fluence[i] * s.e_kev[i] * nist_air(s.e_kev[i]) * 1.602176634e-5;
      const double d = sods[b] - 150.0, want = p.mas * k1m * (1000.0 / d) * (1000.0 / d) * 1e-3; /* mGy */
      /* the chain's own spectrum figure, as the server uses it */
      xt_proj *pr = cpu_proj_with(NULL);
      xt_chain *c = NULL;
      XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
      xt_chain_info ci;
      xt_chain_get_info(c, &ci);
      xt_geometry g = geom("fd20-128");
      g.pose.sod_mm = sods[b];
      xt_dose dz;
      XT_REQUIRE(xt_dose_frame(&p, ci.kerma_ugy_per_mas, &g, &dz, NULL) == 0);
      XT_CHECK_MSG(fabs(dz.k_irp_mgy / want - 1) < 1e-3, "%g kV, SOD %g: K_irp %g mGy, closed form %g", kvs[a], sods[b],
                   dz.k_irp_mgy, want);
      XT_CHECK_NEAR(dz.d_irp_mm, d, 1e-9);
      xt_chain_destroy(c);
      xt_proj_destroy(pr);
    }
}

/* KAP = kerma x area is the same at the reference point and at the detector; shutters cut the
 * area, wedges count at their transmission, closed shutters give none. */
XT_TEST(kerma_area_product_is_field_area_times_kerma) {
  xt_chain_params p = xt_chain_params_default();
  xt_geometry g = geom("fd20-1024");
  const double k1m = 50.0; /* uGy/mAs at 1 m */
  xt_dose d;
  XT_REQUIRE(xt_dose_frame(&p, k1m, &g, &d, NULL) == 0);
  /* at the detector: K = mAs k1m (1000/SID)^2, area = 295.68 mm square */
  const double side = 1024 * 0.28875, kdet = p.mas * k1m * pow(1000.0 / g.pose.sid_mm, 2) * 1e-6; /* Gy */
  XT_CHECK_MSG(fabs(d.kap_gycm2 / (kdet * side * side * 0.01) - 1) < 1e-9, "KAP %g", d.kap_gycm2);
  p.shutter[0] = 0.25;
  p.shutter[3] = 0.5;
  xt_dose h;
  XT_REQUIRE(xt_dose_frame(&p, k1m, &g, &h, NULL) == 0);
  XT_CHECK_NEAR(h.kap_gycm2 / d.kap_gycm2, 0.75 * 0.5, 1e-12);
  XT_CHECK_NEAR(h.k_irp_mgy, d.k_irp_mgy, 1e-15); /* the central ray's kerma does not change */
  p.wedge[1] = 0.5; /* over [0.5, 1) of the open [0.25, 1): 0.5 of 0.75 at transmission 0.3 */
  XT_REQUIRE(xt_dose_frame(&p, k1m, &g, &h, NULL) == 0);
  XT_CHECK_NEAR(h.kap_gycm2 / d.kap_gycm2, (0.25 + 0.5 * p.wedge_t) * 0.5, 1e-12);
  p.shutter[0] = p.shutter[1] = 0.5;
  XT_REQUIRE(xt_dose_frame(&p, k1m, &g, &h, NULL) == 0);
  XT_CHECK(h.kap_gycm2 == 0);
  xt_dose_totals t = {0};
  xt_dose_add(&t, &d);
  xt_dose_add(&t, &d);
  XT_CHECK(t.frames == 2 && t.kap_gycm2 == 2 * d.kap_gycm2 && t.k_irp_mgy == 2 * d.k_irp_mgy);
  p.irp_mm = 900; /* behind the focal spot */
  xt_msg msg;
  XT_CHECK(xt_dose_frame(&p, k1m, &g, &h, &msg) == XT_ERANGE && strstr(msg.text, "reference point"));
}

/* Shutters block, wedges transmit wedge_t, the grid grid_tp (noise off: expected values). */
XT_TEST(collimator_and_grid_shape_the_signal) {
  xt_proj *pr = cpu_proj_with(NULL);
  xt_chain_params p = quiet();
  p.quantum_noise = 0;
  xt_chain *c = NULL;
  XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128");
  const int n = 128 * 128;
  float *open = malloc(sizeof(float) * n), *cut = malloc(sizeof(float) * n);
  XT_REQUIRE(open && cut);
  xt_chain_out out = {0};
  out.expected = open;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  p.shutter[0] = 0.25;  /* columns 0..31 */
  p.shutter[2] = 0.125; /* rows 0..15 */
  p.wedge[1] = 0.25;    /* columns 96..127 */
  p.grid = 1;
  XT_REQUIRE(xt_chain_set_params(c, &p, NULL) == 0);
  out.expected = cut;
  XT_REQUIRE(xt_chain_frame(c, &g, 1, &out, NULL) == 0);
  double worst = 0;
  for (int r = 0; r < 128; r++)
    for (int col = 0; col < 128; col++) {
      const int i = r * 128 + col;
      const double want = (col < 32 || r < 16) ? 0 : open[i] * p.grid_tp * (col >= 96 ? p.wedge_t : 1.0);
      worst = fmax(worst, fabs(cut[i] - want) / open[i]);
    }
  XT_CHECK_MSG(worst < 1e-6, "worst relative deviation %g", worst);
  free(open);
  free(cut);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
}

/* The loop's measurement of an open field is the detector air kerma mAs K_1m (1000/SID)^2. */
XT_TEST(drc_measures_the_open_field_dose) {
  xt_proj *pr = cpu_proj_with(NULL);
  xt_chain_params p = quiet();
  p.grid = 1;
  p.binning = 2;
  p.mas = 0.01;
  xt_chain *c = NULL;
  XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  xt_geometry g = geom("fd20-256");
  uint16_t *raw = malloc(sizeof(uint16_t) * 128 * 128);
  XT_REQUIRE(raw);
  xt_chain_out out = {0};
  out.raw = raw;
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0);
  xt_chain_info ci;
  xt_chain_get_info(c, &ci);
  const double got = xt_drc_measure(raw, 128, 128, &p, &ci, &g.mode);
  const double want = p.mas * ci.kerma_ugy_per_mas * pow(1000.0 / g.pose.sid_mm, 2) * 1e3;
  /* 2 %: obliquity and inverse square across the central third (cos^3 of <= 4.2 deg), ADC rounding */
  XT_CHECK_MSG(fabs(got / want - 1) < 0.02, "measured %g nGy, closed form %g nGy", got, want);
  free(raw);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
}

/* Runs `frames` frames of the loop on chain c; returns the last measurement; *kv the last kV. */
static double run_loop(xt_chain *c, xt_chain_params *p, xt_drc *d, const xt_geometry *g, int frames, uint64_t *fr,
                       uint16_t *raw, double *hist, double *kv) {
  xt_chain_info ci;
  double m = 0;
  for (int k = 0; k < frames; k++) {
    xt_drc_apply(d, p);
    if (xt_chain_set_params(c, p, NULL)) return NAN;
    xt_chain_out out = {0};
    out.raw = raw;
    if (xt_chain_frame(c, g, (*fr)++, &out, NULL)) return NAN;
    xt_chain_get_info(c, &ci);
    m = xt_drc_measure(raw, g->mode.cols, g->mode.rows, p, &ci, &g->mode);
    if (hist) hist[k] = m;
    xt_drc_update(d, p, m);
  }
  *kv = p->kv;
  return m;
}

/* A step from 150 to 250 mm of soft tissue (about tenfold in attenuation): the first frame after it
 * is far below the target; within XT_DRC_SETTLE_FRAMES frames the loop is back within 10 % and
 * stays there; each step it asked for was within the rate limit. */
XT_TEST(drc_settles_after_a_thickness_step) {
  xt_model *thin = slab(150), *thick = slab(250);
  XT_REQUIRE(thin && thick);
  xt_proj *p1 = cpu_proj_with(thin), *p2 = cpu_proj_with(thick);
  xt_chain_params p = quiet();
  XT_REQUIRE(xt_protocol_apply(&p, XT_PROTOCOL_FLUORO_NORMAL, NULL) == 0);
  p.temporal_alpha = 1;
  xt_chain *c1 = NULL, *c2 = NULL;
  XT_REQUIRE(p1 && p2 && xt_chain_create(&p, p1, &c1, NULL) == 0 && xt_chain_create(&p, p2, &c2, NULL) == 0);
  xt_geometry g = geom("fd20-128");
  uint16_t *raw = malloc(sizeof(uint16_t) * 128 * 128);
  XT_REQUIRE(raw);
  xt_drc d;
  xt_drc_reset(&d, &p);
  uint64_t fr = 0;
  double kv = 0, hist[40];
  double m = run_loop(c1, &p, &d, &g, 25, &fr, raw, hist, &kv);
  XT_CHECK_MSG(fabs(m / p.drc_target_ngy - 1) < 0.1, "thin slab: %g nGy for %g", m, p.drc_target_ngy);
  const double kv_thin = kv;
  m = run_loop(c2, &p, &d, &g, 30, &fr, raw, hist, &kv);
  XT_CHECK_MSG(hist[0] < 0.3 * p.drc_target_ngy, "the step is a real one: first frame %g nGy", hist[0]);
  int settled = -1;
  for (int k = 0; k < 30; k++) {
    const int in = fabs(hist[k] / p.drc_target_ngy - 1) < 0.1;
    if (in && settled < 0) settled = k;
    if (!in && settled >= 0) XT_CHECK_MSG(0, "left the band again at frame %d: %g nGy", k, hist[k]);
    if (k > 0) XT_CHECK_MSG(hist[k] <= hist[k - 1] * p.drc_max_step * 1.5, "frame %d: %g after %g", k, hist[k], hist[k - 1]);
  }
  XT_CHECK_MSG(settled >= 0 && settled <= XT_DRC_SETTLE_FRAMES, "settled after %d frames", settled);
  if (getenv("XT_TEST_VERBOSE"))
    for (int k = 0; k < 30; k++) fprintf(stderr, "frame %d: %.2f nGy\n", k, hist[k]);
  if (getenv("XT_TEST_VERBOSE")) fprintf(stderr, "kV %g -> %g, settled after %d frames\n", kv_thin, kv, settled);
  XT_CHECK(kv > kv_thin);
  XT_CHECK(d.flags & XT_DRC_SETTLED);
  free(raw);
  xt_chain_destroy(c1);
  xt_chain_destroy(c2);
  xt_proj_destroy(p1);
  xt_proj_destroy(p2);
  xt_model_free(thin);
  xt_model_free(thick);
}

/* Closed shutters: no signal in the measuring field; the loop drives kV to its maximum and stays,
 * every frame rendered without an error (the IFU's AEC user test, notes §1.5). */
XT_TEST(drc_clamps_at_kv_max_with_closed_shutters) {
  xt_proj *pr = cpu_proj_with(NULL);
  xt_chain_params p = quiet();
  XT_REQUIRE(xt_protocol_apply(&p, XT_PROTOCOL_FLUORO_NORMAL, NULL) == 0);
  p.drc_kv_max = 110;
  p.shutter[0] = p.shutter[1] = 0.5;
  xt_chain *c = NULL;
  XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128");
  uint16_t *raw = malloc(sizeof(uint16_t) * 128 * 128);
  XT_REQUIRE(raw);
  xt_drc d;
  xt_drc_reset(&d, &p);
  uint64_t fr = 0;
  double kv;
  const double m = run_loop(c, &p, &d, &g, 30, &fr, raw, NULL, &kv);
  XT_CHECK_MSG(m == 0, "closed shutters measured %g nGy", m);
  XT_CHECK_MSG(kv == 110 && (d.flags & XT_DRC_CLAMP_HIGH), "kV %g, flags %x", kv, d.flags);
  XT_CHECK(!(d.flags & XT_DRC_SETTLED));
  free(raw);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
}

/* DSA of a static scene: a soft-tissue block with a vessel along z; the mask frame has blood in
 * the vessel, the next frames iodine contrast (blood + 10 mg/mL iodine). Noise off: every pixel
 * whose ray misses the vessel shows exactly the zero-difference grey (level 0 of the window:
 * floor(4095/2 + 1/2)); every pixel through the iodine is darker. The mask frame itself is the
 * unsubtracted image. */
XT_TEST(dsa_of_a_static_scene_is_zero_outside_the_iodine) {
  const double sp[3] = {4.0, 4.0, 4.0};
  xt_volume *v = NULL;
  xt_model *m = NULL;
  XT_REQUIRE(xt_volume_create(40, 40, 40, sp, XT_VOXEL_U8, &v, NULL) == 0);
  v->materials = malloc(sizeof *v->materials);
  XT_REQUIRE(v->materials && xt_materials_default(60, v->materials, NULL) == 0);
  uint8_t *lab = v->data;
  for (int z = 0; z < 40; z++)
    for (int y = 0; y < 40; y++)
      for (int x = 0; x < 40; x++) {
        const int vessel = (x - 20) * (x - 20) + (y - 20) * (y - 20) <= 4; /* ~2 voxels radius, along z */
        lab[((size_t)z * 40 + y) * 40 + x] = vessel ? XT_MAT_BLOOD : XT_MAT_SOFT;
      }
  XT_REQUIRE(xt_model_from_volume(v, "vessel", &m, NULL) == 0);
  xt_proj *pr = cpu_proj_with(m);
  xt_chain_params p = quiet();
  XT_REQUIRE(xt_protocol_apply(&p, XT_PROTOCOL_DSA, NULL) == 0);
  p.drc = 0;
  p.mas = 0.05; /* the panel well below saturation behind the block (what the loop would set) */
  p.quantum_noise = 0;
  xt_chain *c = NULL;
  XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128");
  const int n = 128 * 128;
  uint16_t *proc = malloc(sizeof(uint16_t) * n), *raw = malloc(sizeof(uint16_t) * n);
  float *e0 = malloc(sizeof(float) * n), *e1 = malloc(sizeof(float) * n);
  XT_REQUIRE(proc && raw && e0 && e1);
  xt_chain_out out = {raw, proc, e0, NULL, 0};
  XT_REQUIRE(xt_chain_frame(c, &g, 0, &out, NULL) == 0); /* the mask */
  int dark_in_mask = 0;
  for (int i = 0; i < n; i++) dark_in_mask += proc[i] < 2000;
  XT_CHECK_MSG(dark_in_mask > n / 4, "the mask frame is the unsubtracted image (%d dark pixels)", dark_in_mask);
  for (size_t i = 0; i < (size_t)40 * 40 * 40; i++)
    if (lab[i] == XT_MAT_BLOOD) lab[i] = XT_MAT_IODINE;
  out.expected = e1;
  for (int f = 1; f <= 2; f++) {
    XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)f, &out, NULL) == 0);
    const uint16_t zero = (uint16_t)floor(4095 * 0.5 + 0.5);
    int outside = 0, inside = 0, bad = 0, not_dark = 0;
    for (int i = 0; i < n; i++) {
      if (e1[i] == e0[i]) {
        outside++;
        bad += proc[i] != zero;
      } else if (e1[i] < 0.97f * e0[i]) {
        inside++;
        not_dark += proc[i] >= zero - 20;
      }
    }
    XT_CHECK_MSG(outside > n / 2 && inside > 100, "frame %d: %d outside, %d through the iodine", f, outside, inside);
    XT_CHECK_MSG(bad == 0, "frame %d: %d pixels outside the iodine are not the zero grey %u", f, bad, zero);
    XT_CHECK_MSG(not_dark == 0, "frame %d: %d pixels through the iodine are not darker", f, not_dark);
  }
  /* a new mask: the next frame (iodine in) is the mask, the one after subtracts to zero everywhere */
  xt_chain_dsa_remask(c);
  XT_REQUIRE(xt_chain_frame(c, &g, 3, &out, NULL) == 0);
  XT_REQUIRE(xt_chain_frame(c, &g, 4, &out, NULL) == 0);
  int off = 0;
  for (int i = 0; i < n; i++) off += proc[i] != (uint16_t)floor(4095 * 0.5 + 0.5);
  XT_CHECK_MSG(off == 0, "static scene against its own mask: %d pixels differ from zero", off);
  free(proc);
  free(raw);
  free(e0);
  free(e1);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
  xt_model_free(m);
}

/* Scatter at the centre of a slab: (S_on - S_off) / S_off of the noise-free expected signal. */
static double centre_spr(double mm, const xt_chain_params *p0, double *spr_grid) {
  xt_model *m = slab(mm);
  xt_proj *pr = m ? cpu_proj_with(m) : NULL;
  xt_chain_params p = *p0;
  p.quantum_noise = 0;
  xt_chain *c = NULL;
  if (!pr || xt_chain_create(&p, pr, &c, NULL)) return NAN;
  xt_geometry g = geom("fd20-256");
  float *e = malloc(sizeof(float) * 256 * 256);
  double v[4] = {0, 0, 0, 0};
  for (int k = 0; k < (spr_grid ? 4 : 2) && e; k++) { /* scatter off/on, grid out/in (when asked for) */
    p.scatter = k & 1;
    p.grid = k >> 1;
    xt_chain_out out = {0};
    out.expected = e;
    if (xt_chain_set_params(c, &p, NULL) || xt_chain_frame(c, &g, (uint64_t)k, &out, NULL)) break;
    for (int r = 126; r < 130; r++)
      for (int col = 126; col < 130; col++) v[k] += e[r * 256 + col];
  }
  free(e);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
  xt_model_free(m);
  if (spr_grid) *spr_grid = (v[3] - v[2]) / v[2];
  return (v[1] - v[0]) / v[0];
}

/* The kernel's mass inside a centred open field of half-widths hu, hv (mm) at sigma (mm). */
static double inside(double hu, double hv, double sigma) { return erf(hu / (sigma * sqrt(2.0))) * erf(hv / (sigma * sqrt(2.0))); }

/* Scatter-to-primary ratio at the centre of a soft-tissue slab (water within ~2 % in mu) on a
 * 296 mm square detector, grid out: SPR(t) = spr_200 (t / 200)^spr_exp times the broad kernel's
 * mass inside the field, within 5 % (the slab is soft tissue, not water: its water-equivalent
 * thickness is ~1.5 % less; the coarse grid's sampling). The defaults spr_200 = 4, spr_exp = 1.4
 * give 1.5 / 4.0 / 7.1 at 100 / 200 / 300 mm: the range of broad-beam values for water in the
 * literature (notes §3.9: up to ~5 and more), [U] as docs/imaging.md says. With the grid in the
 * ratio is SPR x grid_ts / grid_tp to float rounding; closing the shutters to a central third
 * cuts it to the kernel's mass inside the smaller field, within 8 % (cells of 4.6 mm). */
XT_TEST(scatter_to_primary_ratio_of_water_slabs) {
  xt_chain_params p = quiet();
  const double mm[3] = {100, 200, 300};
  for (int k = 0; k < 3; k++) {
    double with_grid = 0;
    const double got = centre_spr(mm[k], &p, &with_grid);
    const double want = p.spr_200 * pow(mm[k] / 200.0, p.spr_exp) * inside(148, 148, p.scatter_sigma_mm);
    XT_CHECK_MSG(fabs(got / want - 1) < 0.05, "%g mm: SPR %g, model %g", mm[k], got, want);
    if (getenv("XT_TEST_VERBOSE")) fprintf(stderr, "%g mm: SPR %g (grid %g), model %g\n", mm[k], got, with_grid, want);
    XT_CHECK_MSG(fabs(with_grid / (got * p.grid_ts / p.grid_tp) - 1) < 1e-3, "%g mm: grid SPR %g vs %g", mm[k],
                 with_grid, got * p.grid_ts / p.grid_tp);
  }
  xt_chain_params q = p;
  q.shutter[0] = q.shutter[1] = q.shutter[2] = q.shutter[3] = 1.0 / 3.0;
  const double got = centre_spr(200, &q, NULL);
  const double want = p.spr_200 * inside(296.0 / 6, 296.0 / 6, p.scatter_sigma_mm);
  XT_CHECK_MSG(fabs(got / want - 1) < 0.08, "collimated to a third: SPR %g, model %g", got, want);
  if (getenv("XT_TEST_VERBOSE")) fprintf(stderr, "a third: SPR %g, model %g\n", got, want);
}

/* ---- the table cache and the attached loop (issue 11, part 2) -------------------------------- */

/* Frames of a chain whose tables came from the cache (80 kV revisited after 95 kV) are bit-identical
 * to a fresh chain's at 80 kV; changing mAs, mA or pulse width builds nothing. */
XT_TEST(table_cache_hits_give_the_frames_of_a_fresh_build) {
  xt_model *m = slab(150);
  xt_proj *pr = cpu_proj_with(m);
  xt_chain_params p = quiet();
  p.scatter = 1;
  xt_chain *c = NULL, *f = NULL;
  XT_REQUIRE(m && pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  xt_geometry g = geom("fd20-128");
  const size_t n = 128 * 128;
  uint16_t *r1 = malloc(2 * n), *r2 = malloc(2 * n), *q1 = malloc(2 * n), *q2 = malloc(2 * n);
  float *e1 = malloc(4 * n), *e2 = malloc(4 * n);
  XT_REQUIRE(r1 && r2 && q1 && q2 && e1 && e2);
  xt_chain_params q = p;
  q.kv = 95;
  XT_REQUIRE(xt_chain_set_params(c, &q, NULL) == 0);
  const uint64_t builds = c->tc->builds;
  { /* 95 kV: its own tables, a fresh chain's frame */
    XT_REQUIRE(xt_chain_create(&q, pr, &f, NULL) == 0);
    xt_chain_out o1 = {r1, NULL, e1, NULL, 0}, o2 = {r2, NULL, e2, NULL, 0};
    XT_REQUIRE(xt_chain_frame(c, &g, 4, &o1, NULL) == 0 && xt_chain_frame(f, &g, 4, &o2, NULL) == 0);
    XT_CHECK(memcmp(r1, r2, 2 * n) == 0 && memcmp(e1, e2, 4 * n) == 0);
    xt_chain_destroy(f);
    f = NULL;
  }
  XT_REQUIRE(xt_chain_set_params(c, &p, NULL) == 0); /* 80 kV again: a hit */
  XT_CHECK_MSG(c->tc->builds == builds, "80 kV rebuilt: %llu builds", (unsigned long long)(c->tc->builds - builds));
  xt_chain_params r = p;
  XT_REQUIRE(xt_exposure_set(&r, "mas", 0.37, NULL) == 0 && xt_exposure_set(&r, "pulse_ms", 7, NULL) == 0 &&
             xt_exposure_set(&r, "ma", 33, NULL) == 0 && xt_chain_set_params(c, &r, NULL) == 0);
  XT_CHECK_MSG(c->tc->builds == builds, "an exposure change rebuilt the tables");
  XT_REQUIRE(xt_chain_set_params(c, &p, NULL) == 0);
  XT_REQUIRE(xt_chain_create(&p, pr, &f, NULL) == 0);
  xt_chain_out o1 = {r1, q1, e1, NULL, 0}, o2 = {r2, q2, e2, NULL, 0};
  XT_REQUIRE(xt_chain_frame(c, &g, 5, &o1, NULL) == 0 && xt_chain_frame(f, &g, 5, &o2, NULL) == 0);
  XT_CHECK(memcmp(r1, r2, 2 * n) == 0);
  XT_CHECK(memcmp(q1, q2, 2 * n) == 0);
  XT_CHECK(memcmp(e1, e2, 4 * n) == 0);
  free(r1), free(r2), free(q1), free(q2), free(e1), free(e2);
  xt_chain_destroy(c);
  xt_chain_destroy(f);
  xt_proj_destroy(pr);
  xt_model_free(m);
}

/* The loop's exposure: kV in whole steps, and the output model mAs kV^3 continuous along the curve
 * (the mAs takes the rounding up, within 2.5 %). */
XT_TEST(drc_kv_moves_in_whole_steps) {
  for (int i = 0; i <= 700; i++) {
    const double s = i * 0.01;
    double kv, ms, mas, k, ma, ms2;
    xt_drc_exposure(s, 110, &kv, &ms, &mas);
    xt_drc_curve(s, 110, &k, &ma, &ms2);
    XT_CHECK(kv == floor(kv) && fabs(kv - k) <= 0.5);
    XT_CHECK_NEAR(log(mas) + 3 * log(kv), xt_drc_log_output(s, 110), 1e-12);
    XT_CHECK(fabs(mas / (ma * ms * 1e-3) - 1) <= 0.026);
  }
  /* the closed-form inverse of the curve: log_output(solve(y)) = y inside, the ends outside */
  const double kvm[3] = {70, 95.5, 125};
  for (int j = 0; j < 3; j++) {
    const double y0 = xt_drc_log_output(0, kvm[j]), y1 = xt_drc_log_output(7, kvm[j]);
    for (int i = 0; i <= 1000; i++) {
      const double y = y0 + (y1 - y0) * i / 1000.0;
      XT_CHECK_NEAR(xt_drc_log_output(xt_drc_solve(y, kvm[j]), kvm[j]), y, 1e-12);
    }
    XT_CHECK(xt_drc_solve(y0 - 1, kvm[j]) == 0 && xt_drc_solve(y1 + 1, kvm[j]) == 7);
  }
}

/* A run of the loop as the server runs it (apply, set_params, frame, measure, update): the raw
 * frames and loop states; with the cache off every set_params builds. */
static int server_loop(xt_chain *c, xt_chain_params p, const xt_geometry *g, int frames, uint16_t *raw, xt_drc *hist) {
  xt_drc d;
  xt_drc_reset(&d, &p);
  for (int k = 0; k < frames; k++) {
    xt_drc_apply(&d, &p);
    xt_chain_out out = {raw + (size_t)k * g->mode.cols * g->mode.rows, NULL, NULL, NULL, 0};
    if (xt_chain_set_params(c, &p, NULL) || xt_chain_frame(c, g, (uint64_t)k, &out, NULL)) return -1;
    xt_chain_info ci;
    xt_chain_get_info(c, &ci);
    xt_drc_update(&d, &p, xt_drc_measure(out.raw, g->mode.cols, g->mode.rows, &p, &ci, &g->mode));
    hist[k] = d;
  }
  return 0;
}

/* The loop with the table cache equals the loop without it (every table rebuilt), bit for bit; and
 * the loop attached inside the chain (its host twin of the device step) equals both: same
 * exposures, frames and states. The cached run builds no table after set-up. */
XT_TEST(loop_with_the_cache_equals_the_loop_without) {
  enum { FR = 12 };
  xt_model *m = slab(250);
  xt_proj *pr = cpu_proj_with(m);
  xt_chain_params p = quiet();
  XT_REQUIRE(xt_protocol_apply(&p, XT_PROTOCOL_FLUORO_NORMAL, NULL) == 0);
  p.temporal_alpha = 1;
  p.scatter = 1;
  xt_chain *a = NULL, *b = NULL, *t = NULL;
  XT_REQUIRE(m && pr && xt_chain_create(&p, pr, &a, NULL) == 0 && xt_chain_create(&p, pr, &b, NULL) == 0 &&
             xt_chain_create(&p, pr, &t, NULL) == 0);
  b->tc->enabled = 0;
  xt_geometry g = geom("fd20-128");
  const size_t n = 128 * 128;
  uint16_t *ra = malloc(2 * n * FR), *rb = malloc(2 * n * FR), *rt = malloc(2 * n);
  xt_drc ha[FR], hb[FR];
  XT_REQUIRE(ra && rb && rt);
  const uint64_t builds = a->tc->builds;
  XT_REQUIRE(server_loop(a, p, &g, FR, ra, ha) == 0 && server_loop(b, p, &g, FR, rb, hb) == 0);
  XT_CHECK_MSG(a->tc->builds == builds, "the cached loop built %llu tables", (unsigned long long)(a->tc->builds - builds));
  XT_CHECK(b->tc->builds >= FR);
  XT_CHECK(memcmp(ra, rb, 2 * n * FR) == 0);
  int moved = 0;
  for (int k = 0; k < FR; k++) {
    XT_CHECK(ha[k].s == hb[k].s && ha[k].measured_ngy == hb[k].measured_ngy && ha[k].flags == hb[k].flags);
    moved += k > 0 && ha[k].s != ha[k - 1].s;
  }
  XT_CHECK_MSG(moved >= 3, "the loop hardly moved (%d steps)", moved);
  /* attached: the chain runs the same loop itself */
  XT_REQUIRE(xt_chain_drc_attach(t, 1, NULL) == 0);
  xt_chain_params e = p;
  xt_drc d;
  xt_drc_reset(&d, &p);
  for (int k = 0; k < FR; k++) {
    xt_drc_apply(k ? &ha[k - 1] : &d, &e); /* the exposure the server loop gave frame k */
    xt_chain_out out = {rt, NULL, NULL, NULL, 0};
    XT_REQUIRE(xt_chain_frame(t, &g, (uint64_t)k, &out, NULL) == 0);
    xt_chain_drc_frame rec;
    xt_chain_drc_last(t, &rec);
    XT_CHECK_MSG(rec.kv == e.kv && rec.mas == e.mas && rec.pulse_ms == e.pulse_ms, "frame %d: %g kV %g mAs, not %g, %g", k,
                 rec.kv, rec.mas, e.kv, e.mas);
    XT_CHECK(memcmp(rt, ra + (size_t)k * n, 2 * n) == 0);
    XT_CHECK(rec.drc.s == ha[k].s && rec.drc.measured_ngy == ha[k].measured_ngy && rec.drc.flags == ha[k].flags);
    uint64_t sum, cnt;
    xt_drc_field_sum(rt, 128, 128, &sum, &cnt);
    XT_CHECK(rec.field_sum == sum && rec.field_n == cnt);
  }
  free(ra), free(rb), free(rt);
  xt_chain_destroy(a);
  xt_chain_destroy(b);
  xt_chain_destroy(t);
  xt_proj_destroy(pr);
  xt_model_free(m);
}

/* The scatter model against the closest citable figures for water found (docs/imaging.md §11: no
 * citable table of SPR against thickness and field size was reachable here, so the defaults are not
 * refitted and these are range checks, each bar stated with its reason). Soft-tissue slabs (water
 * within ~2 % in mu), centre of the 296 mm detector, grid out:
 *  - "Simulation of scatter in cone-beam CT: effects on projection image quality" (Monte Carlo, two
 *    water cylinders; the abstract notes-detector-domain §3.9 cites): the SPR "may reach values around 5 for large phantoms, wide beams and 120 kV spectrum". A
 *    300 mm slab on the full field at 120 kV must lie within a factor 1.5 of 5: "around" a rounded
 *    maximum for a phantom and beam the abstract does not size, so no finer bar is honest;
 *  - Siewerdsen & Jaffray (Med Phys 28:220, 2001; measured, flat-panel cone beam): SPR "in excess of
 *    100 %" for a pelvis at a 6 degree cone angle. A 200 mm slab (thinner than a pelvis, so a lower
 *    bound) under a field of 2 tan 3 deg x SID at the detector must exceed 1;
 *  - the published dependences (the same sources; "A Monte Carlo collision density estimator for
 *    calculations of the scatter rejection in diagnostic radiology", water slabs): the SPR grows with thickness and with field area, and saturates as
 *    the field grows (the model's field-size dependence: the broad kernel's mass inside the field,
 *    Gaussian as Boone, Arnold & Seibert measured the scatter PSF, Med Phys 13:254, 1986). */
XT_TEST(scatter_to_primary_ratio_against_published_figures) {
  xt_chain_params p = quiet();
  xt_chain_params q = p;
  q.kv = 120;
  const double large = centre_spr(300, &q, NULL);
  XT_CHECK_MSG(large > 5 / 1.5 && large < 5 * 1.5, "300 mm, full field, 120 kV: SPR %g, published ~5", large);
  xt_geometry g = geom("fd20-256");
  const double side = 2 * tan(3 * XT_PI / 180) * g.pose.sid_mm, frac = (296.0 - side) / 2 / 296.0;
  xt_chain_params c6 = p;
  c6.shutter[0] = c6.shutter[1] = c6.shutter[2] = c6.shutter[3] = frac;
  const double cone = centre_spr(200, &c6, NULL);
  XT_CHECK_MSG(cone > 1, "200 mm at a 6 degree cone (%.0f mm field): SPR %g, published > 1", side, cone);
  double spr[3][3]; /* thickness 100/200/300 x field a third / two thirds / full */
  const double shut[3] = {1.0 / 3.0, 1.0 / 6.0, 0};
  for (int t = 0; t < 3; t++)
    for (int f = 0; f < 3; f++) {
      xt_chain_params r = p;
      r.shutter[0] = r.shutter[1] = r.shutter[2] = r.shutter[3] = shut[f];
      spr[t][f] = centre_spr(100.0 * (t + 1), &r, NULL);
    }
  for (int t = 0; t < 3; t++) {
    XT_CHECK_MSG(spr[t][0] < spr[t][1] && spr[t][1] < spr[t][2], "%d mm: SPR not growing with the field: %g %g %g",
                 100 * (t + 1), spr[t][0], spr[t][1], spr[t][2]);
    /* saturation: the second doubling of the field side adds less than the first */
    XT_CHECK_MSG(spr[t][2] - spr[t][1] < spr[t][1] - spr[t][0], "%d mm: no saturation with the field", 100 * (t + 1));
  }
  for (int f = 0; f < 3; f++)
    XT_CHECK_MSG(spr[0][f] < spr[1][f] && spr[1][f] < spr[2][f], "field %d: SPR not growing with thickness", f);
  if (getenv("XT_TEST_VERBOSE")) {
    fprintf(stderr, "300 mm 120 kV full: %.3f; 200 mm 6 deg cone: %.3f\n", large, cone);
    for (int t = 0; t < 3; t++) fprintf(stderr, "%d mm: %.3f %.3f %.3f\n", 100 * (t + 1), spr[t][0], spr[t][1], spr[t][2]);
  }
}

/* With the loop on, the cache keeps every whole kV of its curve (the device step reads them by
 * slot) however many other table sets pass through it; the bank's slots hold their kVs. */
XT_TEST(table_cache_keeps_the_loops_kvs) {
  xt_proj *pr = cpu_proj_with(NULL);
  xt_chain_params p = quiet();
  p.drc = 1;
  xt_chain *c = NULL;
  XT_REQUIRE(pr && xt_chain_create(&p, pr, &c, NULL) == 0);
  XT_REQUIRE(c->tc->bank.n == 110 - XT_DRC_BANK_KV0 + 1);
  const xt_drc_bank *b = &c->tc->bank;
  int bad = 0;
  for (int j = 0; j < 2 * XT_TAB_SLOTS; j++) { /* more fractional kVs than slots; the bank after each */
    xt_chain_params q = p;
    q.kv = 60.5 + 0.25 * j;
    XT_REQUIRE(xt_chain_set_params(c, &q, NULL) == 0);
    for (int i = 0; i < b->n; i++) bad += !c->tc->used[b->slot[i]] || c->tc->key[b->slot[i]].v[0] != XT_DRC_BANK_KV0 + i;
  }
  XT_CHECK_MSG(bad == 0, "%d bank slots lost their kV", bad);
  xt_chain_destroy(c);
  xt_proj_destroy(pr);
}

/* The loop's tables are built side by side on the chain's threads (xt_chain_cache.c): the bank of
 * a chain on 1 thread and of one on 8 hold the same tables, byte for byte, at the same kVs. */
XT_TEST(loop_tables_built_on_threads_equal_one_thread) {
  xt_proj *pr = cpu_proj_with(NULL);
  xt_chain_params p = quiet(), q;
  xt_chain *c[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    XT_REQUIRE(pr && xt_chain_create(&p, pr, &c[k], NULL) == 0);
    xt_chain_set_threads(c[k], k ? 8 : 1);
    q = p;
    q.drc = 1;
    XT_REQUIRE(xt_chain_set_params(c[k], &q, NULL) == 0);
  }
  const xt_drc_bank *b0 = &c[0]->tc->bank, *b1 = &c[1]->tc->bank;
  XT_REQUIRE(b0->n == 110 - XT_DRC_BANK_KV0 + 1 && b1->n == b0->n);
  int bad = 0;
  for (int i = 0; i < b0->n; i++) {
    const int s0 = b0->slot[i], s1 = b1->slot[i];
    bad += memcmp(&c[0]->tc->tab[s0], &c[1]->tc->tab[s1], sizeof c[0]->tc->tab[s0]) != 0 ||
           memcmp(&c[0]->tc->info[s0], &c[1]->tc->info[s1], sizeof c[0]->tc->info[s0]) != 0 ||
           c[1]->tc->key[s1].v[0] != XT_DRC_BANK_KV0 + i || b0->flat_per_ugy[i] != b1->flat_per_ugy[i];
  }
  XT_CHECK_MSG(bad == 0, "%d of %d kV tables differ", bad, b0->n);
  xt_chain_destroy(c[0]);
  xt_chain_destroy(c[1]);
  xt_proj_destroy(pr);
}

XT_TEST_MAIN(XT_ENTRY(scatter_to_primary_ratio_of_water_slabs) XT_ENTRY(dsa_of_a_static_scene_is_zero_outside_the_iodine) XT_ENTRY(exposure_settings_couple_current_pulse_and_mas) XT_ENTRY(air_kerma_per_frame_matches_the_closed_form)
                 XT_ENTRY(kerma_area_product_is_field_area_times_kerma) XT_ENTRY(collimator_and_grid_shape_the_signal)
                     XT_ENTRY(drc_measures_the_open_field_dose) XT_ENTRY(drc_settles_after_a_thickness_step)
                         XT_ENTRY(drc_clamps_at_kv_max_with_closed_shutters)
                             XT_ENTRY(table_cache_hits_give_the_frames_of_a_fresh_build)
                                 XT_ENTRY(drc_kv_moves_in_whole_steps) XT_ENTRY(loop_with_the_cache_equals_the_loop_without)
                                     XT_ENTRY(scatter_to_primary_ratio_against_published_figures)
                                         XT_ENTRY(table_cache_keeps_the_loops_kvs)
                                             XT_ENTRY(loop_tables_built_on_threads_equal_one_thread))
