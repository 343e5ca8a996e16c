/* Hounsfield-unit conversion: HU -> mu (linear or bilinear, see xt_hu.h), HU -> default material
 * labels by bands, and the check that data said to be HU looks like HU.
 *
 * Band edges (HU), chosen so that each band's voxels are closest in attenuation to the material
 * they are given; the table has no lung, so lung goes to air (see docs/loaders.md for sources):
 *   air    HU < -500   air is -1000; lung parenchyma (-950..-600) is mostly air and its mu
 *                      (0.05..0.4 x water) is nearer air (0) than fat (~0.9 x water); -500 is
 *                      about the mu midpoint between air and fat (~-100 HU).
 *   fat    -500..-30   adipose tissue is -190..-30 HU (the band used for CT fat quantification,
 *                      Kvist et al., Am J Clin Nutr 1988); -500..-190 is partial volume nearer fat.
 *   soft   -30..300    muscle, organs, blood, brain, contrast-enhanced vessels: 20..300 HU. Brain,
 *                      blood and iodine are not separable from soft tissue by HU alone, so HU
 *                      conversion never produces those labels.
 *   bone   300..2500   trabecular bone from ~300, cortical bone ~1000..2000 HU.
 *   metal  >= 2500     titanium and steel exceed the 12-bit CT range and saturate at 3071; cortical
 *                      bone stays below ~2000 (tooth enamel, up to ~3000, is the known confusion). */
#include <math.h>
#include <stdio.h>

#include <xraylib/xraylib.h>

#include "xt_hu.h"

static const xt_hu_band bands[] = {
    {-INFINITY, -500.0, XT_MAT_AIR}, {-500.0, -30.0, XT_MAT_FAT},    {-30.0, 300.0, XT_MAT_SOFT},
    {300.0, 2500.0, XT_MAT_BONE},    {2500.0, INFINITY, XT_MAT_METAL},
};

const xt_hu_band *xt_hu_bands(int *n) {
  if (n) *n = (int)(sizeof bands / sizeof bands[0]);
  return bands;
}

int xt_hu_to_label(double hu) {
  if (hu < -500.0) return XT_MAT_AIR;
  if (hu < -30.0) return XT_MAT_FAT;
  if (hu < 300.0) return XT_MAT_SOFT;
  if (hu < 2500.0) return XT_MAT_BONE;
  return XT_MAT_METAL;
}

/* ---- attenuation of water and bone ------------------------------------------------------- */

/* Mass attenuation (cm^2/g) of a mixture from xraylib's elemental total cross sections (coherent
 * included) weighted by mass fraction, as xraylib's CS_Total_CP does (which leaks inside libxrl
 * 4.0, see xt_materials.c). */
static int mixture_mu_rho(const char *name, const int *z, const double *w, int n, double e, double *out, xt_msg *msg) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    xrl_error *err = NULL;
    double cs = CS_Total(z[i], e, &err);
    if (err) {
      int rc = xt_fail(msg, XT_EINTERNAL, "hu: xraylib CS_Total(Z=%d, %g keV) for %s: %s", z[i], e, name, err->message);
      xrl_error_free(err);
      return rc;
    }
    s += w[i] * cs;
  }
  *out = s;
  return 0;
}

static int check_energy(double e, xt_msg *msg) {
  if (!(e >= 20.0 && e <= 150.0)) return xt_fail(msg, XT_ERANGE, "hu: energy %g keV outside [20, 150]", e);
  return 0;
}

int xt_hu_mu_water(double energy_kev, double *mu, xt_msg *msg) {
  int rc = check_energy(energy_kev, msg);
  if (rc) return rc;
  /* NIST "Water, Liquid" (NISTIR 5632, Table 2): H .111894, O .888106 by mass, 1 g/cm^3 */
  static const int z[2] = {1, 8};
  static const double w[2] = {0.111894, 0.888106};
  double mr = 0;
  if ((rc = mixture_mu_rho("water", z, w, 2, energy_kev, &mr, msg))) return rc;
  *mu = mr * 1.0 / 10.0; /* cm^-1 -> mm^-1 */
  return 0;
}

int xt_hu_mu_bone(double energy_kev, double *mu, xt_msg *msg) {
  int rc = check_energy(energy_kev, msg);
  if (rc) return rc;
  /* Bone, Cortical (ICRU-44): mass fractions and density of NIST's X-ray mass attenuation tables
   * (Hubbell & Seltzer, NISTIR 5632, Table 2): H .034 C .155 N .042 O .435 Na .001 Mg .002
   * P .103 S .003 Ca .225, 1.92 g/cm^3. xraylib's own NIST list has the ICRP composition
   * (1.85 g/cm^3) instead, 1.5 % lower in mu/rho at 60 keV than NIST's bone table. */
  static const int z[9] = {1, 6, 7, 8, 11, 12, 15, 16, 20};
  static const double w[9] = {0.034, 0.155, 0.042, 0.435, 0.001, 0.002, 0.103, 0.003, 0.225};
  double mr = 0;
  if ((rc = mixture_mu_rho("cortical bone", z, w, 9, energy_kev, &mr, msg))) return rc;
  *mu = mr * 1.92 / 10.0;
  return 0;
}

int xt_hu_calib_make(xt_hu_model model, double energy_kev, double ct_energy_kev, xt_hu_calib *c, xt_msg *msg) {
  if (model != XT_HU_LINEAR && model != XT_HU_BILINEAR) return xt_fail(msg, XT_EINVAL, "hu: unknown HU model %d", (int)model);
  c->model = model;
  c->energy_kev = energy_kev > 0 ? energy_kev : XT_DEFAULT_ENERGY_KEV;
  c->ct_energy_kev = ct_energy_kev > 0 ? ct_energy_kev : XT_HU_CT_ENERGY_KEV;
  c->bone_slope = 0;
  int rc = xt_hu_mu_water(c->energy_kev, &c->mu_w, msg);
  if (rc || model == XT_HU_LINEAR) return rc;
  double wct = 0, b = 0, bct = 0;
  if ((rc = check_energy(c->ct_energy_kev, msg)) || (rc = xt_hu_mu_water(c->ct_energy_kev, &wct, msg)) ||
      (rc = xt_hu_mu_bone(c->energy_kev, &b, msg)) || (rc = xt_hu_mu_bone(c->ct_energy_kev, &bct, msg)))
    return rc;
  if (!(bct > wct)) return xt_fail(msg, XT_EINTERNAL, "hu: bone does not attenuate more than water at %g keV", c->ct_energy_kev);
  c->bone_slope = wct * (b - c->mu_w) / (1000.0 * (bct - wct));
  return 0;
}

/* ---- does it look like HU? ---------------------------------------------------------------- */

void xt_hu_stats_init(xt_hu_stats *s) {
  s->n = s->n_air = s->n_low = s->n_water = 0;
  s->min = INFINITY;
  s->max = -INFINITY;
}

int xt_hu_sanity(const xt_hu_stats *s, const char *what, xt_load_report *r) {
  if (!s->n) return 0;
  if (s->min >= 0) {
    /* air stored as HU + 1024 lands at ~24, water at ~1024 */
    if (s->n_low * 100 >= s->n && s->n_water > 0) {
      xt_load_report_warn(r, "hu_offset_1024",
                          "%s: values are HU? all >= 0 (min %g), %.1f%% at 0..60 and some at 900..1150: looks like "
                          "HU+1024 stored without a -1024 intercept (air renders as water), or not a CT",
                          what, s->min, 100.0 * (double)s->n_low / (double)s->n);
      return 1;
    }
    xt_load_report_warn(r, "hu_nonnegative",
                        "%s: values are HU? all >= 0 (min %g, max %g): a CT has air near -1000; unsigned data "
                        "without its intercept, or not a CT (MRI?)",
                        what, s->min, s->max);
    return 1;
  }
  if (s->n_air == 0) {
    xt_load_report_warn(r, "hu_no_air",
                        "%s: values are HU? none at or below -900 (min %g): a CT normally shows air near -1000; "
                        "cropped inside the body, or not HU",
                        what, s->min);
    return 1;
  }
  return 0;
}
