/* Hounsfield units: conversion to linear attenuation, to default material labels, and a sanity
 * check that data said to be HU looks like HU.
 *
 * HU is defined against water: HU = 1000 (mu_CT - mu_water_CT) / mu_water_CT, at the effective
 * energy E_CT of the CT that measured it. Two maps to mu at the render energy E (docs/loaders.md,
 * "HU -> mu"):
 *   linear:   mu = mu_w(E) (1 + HU/1000)                 for every HU (clamped at 0)
 *   bilinear: the same for HU <= 0 (air-water mixtures); for HU > 0 the voxel is taken as a
 *             water-bone mixture, bone fraction f = HU mu_w(E_CT) / (1000 (mu_b(E_CT) - mu_w(E_CT))),
 *             mu = mu_w(E) + f (mu_b(E) - mu_w(E))  (Kinahan et al. 1998; Carney et al. 2006)
 * Water is xraylib's NIST "Water, Liquid"; bone is NIST's "Bone, Cortical (ICRU-44)" composition
 * (1.92 g/cm^3) through xraylib's elemental cross sections. At E = E_CT both maps agree. */
#ifndef XT_HU_H
#define XT_HU_H

#include <stddef.h>

#include "xt_load.h"

/* One HU band of the label conversion: voxels with lo <= HU < hi get `label`. */
typedef struct xt_hu_band {
  double lo, hi; /* HU; -INFINITY / INFINITY at the ends */
  int label;     /* XT_MAT_* index in the default table */
} xt_hu_band;

/* The bands used by XT_LOAD_HU_TO_LABELS, contiguous and ascending; *n receives their count. */
const xt_hu_band *xt_hu_bands(int *n);

/* Default effective energy of the CT the HU come from (a 120 kVp scan after a patient). */
#define XT_HU_CT_ENERGY_KEV 70.0

/* Linear attenuation in 1/mm of liquid water and of cortical bone (ICRU-44) at energy_kev
 * (20..150 keV), from xraylib. */
int xt_hu_mu_water(double energy_kev, double *mu, xt_msg *msg);
int xt_hu_mu_bone(double energy_kev, double *mu, xt_msg *msg);

/* A ready HU -> mu map. */
typedef struct xt_hu_calib {
  xt_hu_model model;
  double energy_kev, ct_energy_kev;
  double mu_w;        /* water at E */
  double bone_slope;  /* bilinear: d mu / d HU above 0, = mu_w(E_CT) (mu_b(E) - mu_w(E)) / (1000 (mu_b(E_CT) - mu_w(E_CT))) */
} xt_hu_calib;

/* energy_kev / ct_energy_kev 0 take XT_DEFAULT_ENERGY_KEV / XT_HU_CT_ENERGY_KEV. */
int xt_hu_calib_make(xt_hu_model model, double energy_kev, double ct_energy_kev, xt_hu_calib *c, xt_msg *msg);

/* mu of one HU value, clamped at 0. NaN in, NaN out (the caller reports it). */
static inline double xt_hu_calib_mu(const xt_hu_calib *c, double hu) {
  double mu = (c->model == XT_HU_BILINEAR && hu > 0) ? c->mu_w + hu * c->bone_slope : c->mu_w * (1.0 + hu / 1000.0);
  return mu > 0 ? mu : (mu == mu ? 0.0 : mu);
}

/* The linear form with a given mu_water: mu = mu_water (1 + HU/1000), clamped at 0. */
static inline double xt_hu_to_mu(double hu, double mu_water) {
  double mu = mu_water * (1.0 + hu / 1000.0);
  return mu > 0 ? mu : (mu == mu ? 0.0 : mu);
}

/* Default material label for a (finite) HU value, by the bands of xt_hu_bands(). */
int xt_hu_to_label(double hu);

/* Counts over the voxels of a volume said to hold HU, for xt_hu_sanity. */
typedef struct xt_hu_stats {
  size_t n;
  double min, max;
  size_t n_air;    /* HU <= -900: air, as every CT of a body has around it or inside it */
  size_t n_low;    /* 0 <= HU <= 60: where air lands when HU+1024 was stored without an intercept */
  size_t n_water;  /* 900 <= HU <= 1150: where water lands in that case */
} xt_hu_stats;

void xt_hu_stats_init(xt_hu_stats *s);
static inline void xt_hu_stats_add(xt_hu_stats *s, double hu) {
  s->n++;
  if (hu < s->min) s->min = hu;
  if (hu > s->max) s->max = hu;
  if (hu <= -900) s->n_air++;
  else if (hu >= 0 && hu <= 60) s->n_low++;
  else if (hu >= 900 && hu <= 1150) s->n_water++;
}

/* Adds a warning to r for data that does not look like HU (codes hu_offset_1024,
 * hu_nonnegative, hu_no_air; docs/loaders.md). `what` names the file. Returns the number added. */
int xt_hu_sanity(const xt_hu_stats *s, const char *what, xt_load_report *r);

#endif /* XT_HU_H */
