/* Hounsfield-unit conversion: HU -> mu through water, HU -> default material labels by bands.
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

int xt_hu_mu_water(double energy_kev, const xt_material_table *t, double *mu_water, xt_msg *msg) {
  xt_material_table local;
  if (!t) {
    int rc = xt_materials_default(energy_kev > 0 ? energy_kev : XT_DEFAULT_ENERGY_KEV, &local, msg);
    if (rc) return rc;
    t = &local;
  }
  double rho = t->density[XT_MAT_SOFT], mu = t->mu[XT_MAT_SOFT];
  if (!(rho > 0) || !(mu > 0) || !isfinite(mu / rho))
    return xt_fail(msg, XT_EINTERNAL, "hu: material table has no usable soft-tissue entry (mu %g, rho %g)", mu, rho);
  /* mass attenuation of soft tissue x density of water (1 g/cm^3) */
  *mu_water = mu / rho * 1.0;
  return 0;
}
