/* X-ray tube spectra: tungsten anode, 40-125 kV, from TASMIP (xt_tasmip.c, Boone & Seibert 1997)
 * in 1 keV bins, with the anode angle, the tube's inherent filtration and the spectral filter
 * (mm Al + mm Cu, as the Philips filters); and what the chain and the dose bookkeeping need from a
 * spectrum: photon fluence, mean energy, air kerma per mAs at a distance, half-value layer.
 *
 * Units: energies keV; fluence photons / (mm^2 mAs) per bin at 1 m from the focal spot (TASMIP's
 * calibration distance; inverse square elsewhere); air kerma uGy; thicknesses mm.
 * docs/imaging.md states the model, its approximations and the tests that hold it. */
#ifndef XT_SPECTRUM_H
#define XT_SPECTRUM_H

#include "xt_err.h"

#define XT_TASMIP_EMIN 10 /* keV: centre of TASMIP's first bin */
#define XT_TASMIP_NBINS 131 /* bins 10..140 keV */
extern const double xt_tasmip_coef[XT_TASMIP_NBINS][4];

#define XT_KV_MIN 40.0
#define XT_KV_MAX 125.0
#define XT_ANODE_MIN_DEG 7.0
#define XT_ANODE_MAX_DEG 20.0
#define XT_ANODE_REF_DEG 12.0 /* the angle TASMIP's spectra are taken to be for (see xt_spectrum.c) */
#define XT_FILTER_MAX_MM_AL 50.0
#define XT_FILTER_MAX_MM_CU 2.0

#define XT_SPECTRUM_MAX_BINS 128
/* Aluminium that brings TASMIP's own tube to the IEC 61267 RQR beams at 40-80 kV within 4 % (the
 * default inherent filtration, one tube's: fixed over kV; docs/imaging.md). */
#define XT_TASMIP_RQR_AL_MM 0.9

/* The tube and its filtration: what shapes the spectrum. */
typedef struct xt_tube {
  double kv;             /* tube voltage (constant potential), XT_KV_MIN..XT_KV_MAX */
  double anode_deg;      /* anode (target) angle */
  double inherent_al_mm; /* inherent filtration (window, oil) as mm Al added to TASMIP's own tube */
  double filter_al_mm;   /* spectral filter: aluminium */
  double filter_cu_mm;   /* spectral filter: copper */
} xt_tube;

/* The IEC 61267 RQR beams are defined by kV and first HVL, not by one filtration: a laboratory sets
 * the aluminium per quality (more at higher kV). The aluminium, added to TASMIP's own tube with a
 * 12 deg anode, that gives IEC 61267:2005 Table 2's RQR first HVL at kv: 0.72..1.74 mm at the RQR
 * kVs 40..120, linear in kV between them and along the last segment up to XT_KV_MAX; NaN outside
 * XT_KV_MIN..XT_KV_MAX. RQR10 (150 kV) is beyond TASMIP's and the tube's range. */
double xt_rqr_inherent_al_mm(double kv);
/* The RQR beam at kv: 12 deg anode, xt_rqr_inherent_al_mm(kv), no spectral filter. */
xt_tube xt_tube_rqr(double kv);

/* 80 kV, 12 deg, XT_TASMIP_RQR_AL_MM inherent, spectral filter 1.0 mm Al + 0.1 mm Cu (the Philips example). */
xt_tube xt_tube_default(void);
/* Range checks; msg names the field. */
int xt_tube_validate(const xt_tube *t, xt_msg *msg);

typedef struct xt_spectrum {
  int n;                                /* bins in use */
  double e_kev[XT_SPECTRUM_MAX_BINS];   /* bin centres (fluence-weighted for merged bins) */
  double width_kev[XT_SPECTRUM_MAX_BINS];
  double fluence[XT_SPECTRUM_MAX_BINS]; /* photons / (mm^2 mAs) at 1 m, per bin */
} xt_spectrum;

/* TASMIP as published at kv (XT_KV_MIN..XT_KV_MAX): bins 10 keV .. floor(kv) keV, 1 keV wide. */
int xt_spectrum_tasmip(double kv, xt_spectrum *s, xt_msg *msg);
/* Attenuates by `mm` of a basis material (xt_basis.h), narrow beam: exp(-mu/rho rho t) per bin. */
int xt_spectrum_filter(xt_spectrum *s, int basis, double mm, xt_msg *msg);
/* The tube's spectrum: TASMIP at t->kv, the anode-angle correction, then inherent and added filters. */
int xt_spectrum_tube(const xt_tube *t, xt_spectrum *s, xt_msg *msg);
/* Merges consecutive bins into nbins groups of (about) equal width; each group's energy is its
 * fluence-weighted mean. For speed of the per-pixel integral; nbins >= in->n copies. */
int xt_spectrum_rebin(const xt_spectrum *in, int nbins, xt_spectrum *out, xt_msg *msg);

/* Total photon fluence, photons / (mm^2 mAs) at 1 m. */
double xt_spectrum_fluence(const xt_spectrum *s);
/* Fluence-weighted mean energy, keV. */
double xt_spectrum_mean_energy(const xt_spectrum *s);
/* Air kerma per mAs at dist_mm from the focal spot (inverse square from 1 m), uGy/mAs:
 * K = sum_E phi(E) E (mu_en/rho)_air(E), mu_en/rho from NIST (xt_air_muen_rho). */
int xt_spectrum_air_kerma(const xt_spectrum *s, double dist_mm, double *ugy_per_mas, xt_msg *msg);
/* (mu_en/rho) of dry air, cm^2/g, from NIST's table (8..200 keV; NaN outside). */
double xt_air_muen_rho(double e_kev);
/* First half-value layer in mm of a basis material (narrow beam, air kerma), by bisection. */
int xt_spectrum_hvl(const xt_spectrum *s, int basis, double *mm, xt_msg *msg);

/* uGy per (photon/mm^2 x keV x cm^2/g): 1.602176634e-16 J/keV x 1e6 mm^2/m^2 x 0.1 (cm^2/g -> m^2/kg) x 1e6 */
#define XT_KERMA_UGY 1.602176634e-5

#endif /* XT_SPECTRUM_H */
