/* Hounsfield units: conversion to linear attenuation and to default material labels.
 *
 * HU is defined against water: HU = 1000 (mu - mu_water) / mu_water (air taken as mu = 0), so
 * mu = mu_water (1 + HU/1000). mu_water comes from the default material table (xraylib/NIST) at
 * the requested effective energy: the ICRP soft-tissue entry's mass attenuation coefficient times
 * the density of water (1 g/cm^3), which is within ~1 % of liquid water over 20..150 keV (soft
 * tissue and water differ mainly in density, not in mu/rho). See docs/loaders.md. */
#ifndef XT_HU_H
#define XT_HU_H

#include "xt_model.h"

/* One HU band of the label conversion: voxels with lo <= HU < hi get `label`. */
typedef struct xt_hu_band {
  double lo, hi; /* HU; -INFINITY / INFINITY at the ends */
  int label;     /* XT_MAT_* index in the default table */
} xt_hu_band;

/* The bands used by XT_LOAD_HU_TO_LABELS, contiguous and ascending; *n receives their count. */
const xt_hu_band *xt_hu_bands(int *n);

/* mu of water in 1/mm at energy_kev (0 = XT_DEFAULT_ENERGY_KEV), from t if non-NULL (then
 * energy_kev is ignored) or from a freshly computed default table. */
int xt_hu_mu_water(double energy_kev, const xt_material_table *t, double *mu_water, xt_msg *msg);

/* mu = mu_water (1 + HU/1000), clamped at 0. NaN in, NaN out (the caller reports it). */
static inline double xt_hu_to_mu(double hu, double mu_water) {
  double mu = mu_water * (1.0 + hu / 1000.0);
  return mu > 0 ? mu : (mu == mu ? 0.0 : mu);
}

/* Default material label for a (finite) HU value, by the bands of xt_hu_bands(). */
int xt_hu_to_label(double hu);

#endif /* XT_HU_H */
