/* Tube spectra: TASMIP, anode angle, filtration; fluence, mean energy, air kerma and HVL.
 *
 * TASMIP (xt_tasmip.c) gives the spectrum of the authors' tube with its own inherent filtration and
 * anode. On top of it:
 *  - Bins: 1 keV wide, centred on 10, 11, ... keV, up to the last bin whose centre is <= kV (TASMIP's
 *    polynomials return small, unphysical values up to kV + 3 keV; those bins are dropped).
 *  - Anode angle: photons leave the target through tungsten; produced at a mean depth d below the
 *    surface they cross d / sin(theta) of it. TASMIP's tube is taken to have a 12 deg anode; another
 *    angle changes the tungsten path by d (1/sin(theta) - 1/sin(12 deg)), applied as a tungsten
 *    filter (negative: less self-filtration). d is a third of the Kanaya-Okayama electron range,
 *    R = 0.0276 A E^1.67 / (Z^0.889 rho) um (E in keV; Kanaya & Okayama, J. Phys. D 5:43, 1972),
 *    the usual estimate of the mean depth of bremsstrahlung production. This is the heel effect's
 *    on-axis part; the off-axis heel profile is part 2's (issue 11).
 *  - Filters: narrow-beam exp(-(mu/rho) rho t) per bin, mu/rho from xraylib (xt_basis.h) at the bin
 *    centre. The inherent filtration parameter is aluminium added to TASMIP's own tube: with 0 the
 *    spectrum is that tube's as measured (its half-value layer at 70 kV is 2.06 mm Al). The default,
 *    0.9 mm, brings it to the IEC 61267 RQR half-value layers at 40-80 kV within 4 % - the beam of a
 *    typical tube assembly with about 2.5 mm Al total filtration. One filtration does not give the
 *    RQR series at every kV (-7 % at 100 kV, -13 % at 120 kV, as SpekPy's tube of fixed filtration
 *    does too): the standard fixes kV and HVL, and a laboratory sets the aluminium per quality.
 *    xt_rqr_inherent_al_mm is that aluminium for this tube.
 * Air kerma uses (mu_en/rho) of dry air from NIST's table (below), not xraylib's CS_Energy, which
 * is off NIST's by up to 45 % in this range (xraylib issues #176, #255). */
#include <math.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_spectrum.h"
#include "xt_vec.h"

xt_tube xt_tube_default(void) {
  xt_tube t = {80.0, XT_ANODE_REF_DEG, XT_TASMIP_RQR_AL_MM, 1.0, 0.1};
  return t;
}

/* The RQR beams of IEC 61267:2005 Table 2 (kV: first HVL mm Al) 40: 1.42, 50: 1.78, 60: 2.19,
 * 70: 2.58, 80: 3.01, 90: 3.48, 100: 3.97, 120: 5.00, each reached with the aluminium here (found
 * by bisection on xt_spectrum_hvl, TASMIP, 12 deg; tests/test_spectrum.c checks it and the
 * homogeneity coefficients, which are not fitted). */
static const double rqr_al[][2] = {
    {40, 0.9025}, {50, 0.7180}, {60, 0.8025}, {70, 0.8769}, {80, 0.9853}, {90, 1.1406}, {100, 1.3190}, {120, 1.7448},
};

double xt_rqr_inherent_al_mm(double kv) {
  const int n = (int)(sizeof rqr_al / sizeof rqr_al[0]);
  if (!(kv >= XT_KV_MIN && kv <= XT_KV_MAX)) return NAN;
  int i = 0;
  while (i < n - 2 && kv > rqr_al[i + 1][0]) i++;
  const double t = (kv - rqr_al[i][0]) / (rqr_al[i + 1][0] - rqr_al[i][0]);
  return rqr_al[i][1] + t * (rqr_al[i + 1][1] - rqr_al[i][1]);
}

xt_tube xt_tube_rqr(double kv) {
  xt_tube t = {kv, XT_ANODE_REF_DEG, xt_rqr_inherent_al_mm(kv), 0.0, 0.0};
  return t;
}

static int check(xt_msg *msg, const char *field, double v, double lo, double hi) {
  if (!isfinite(v)) return xt_fail(msg, XT_ERANGE, "tube.%s: not a finite number", field);
  if (v < lo || v > hi) return xt_fail(msg, XT_ERANGE, "tube.%s: %g outside [%g, %g]", field, v, lo, hi);
  return 0;
}

int xt_tube_validate(const xt_tube *t, xt_msg *msg) {
  int rc;
  if ((rc = check(msg, "kv", t->kv, XT_KV_MIN, XT_KV_MAX)) ||
      (rc = check(msg, "anode_deg", t->anode_deg, XT_ANODE_MIN_DEG, XT_ANODE_MAX_DEG)) ||
      (rc = check(msg, "inherent_al_mm", t->inherent_al_mm, 0, XT_FILTER_MAX_MM_AL)) ||
      (rc = check(msg, "filter_al_mm", t->filter_al_mm, 0, XT_FILTER_MAX_MM_AL)) ||
      (rc = check(msg, "filter_cu_mm", t->filter_cu_mm, 0, XT_FILTER_MAX_MM_CU)))
    return rc;
  return 0;
}

int xt_spectrum_tasmip(double kv, xt_spectrum *s, xt_msg *msg) {
  int rc = check(msg, "kv", kv, XT_KV_MIN, XT_KV_MAX);
  if (rc) return rc;
  memset(s, 0, sizeof *s);
  const int emax = (int)floor(kv);
  for (int e = XT_TASMIP_EMIN; e <= emax; e++) {
    const double *a = xt_tasmip_coef[e - XT_TASMIP_EMIN];
    const double phi = a[0] + kv * (a[1] + kv * (a[2] + kv * a[3]));
    s->e_kev[s->n] = e;
    s->width_kev[s->n] = 1.0;
    s->fluence[s->n] = phi > 0 ? phi : 0.0;
    s->n++;
  }
  return 0;
}

int xt_spectrum_filter(xt_spectrum *s, int basis, double mm, xt_msg *msg) {
  if (!isfinite(mm)) return xt_fail(msg, XT_ERANGE, "spectrum: filter thickness is not finite");
  if (mm == 0) return 0;
  const double rho = xt_basis_density(basis);
  for (int i = 0; i < s->n; i++) {
    double mr = 0;
    int rc = xt_basis_mass_atten(basis, s->e_kev[i], &mr, msg);
    if (rc) return rc;
    s->fluence[i] *= exp(-mr * rho * mm * 0.1);
  }
  return 0;
}

/* Mean depth of bremsstrahlung production in tungsten, mm: a third of the Kanaya-Okayama range. */
static double production_depth_mm(double kv) {
  const double A = 183.84, Z = 74.0, rho = 19.3;
  const double range_um = 0.0276 * A * pow(kv, 1.67) / (pow(Z, 0.889) * rho);
  return range_um / 3.0 * 1e-3;
}

int xt_spectrum_tube(const xt_tube *t, xt_spectrum *s, xt_msg *msg) {
  int rc = xt_tube_validate(t, msg);
  if (rc || (rc = xt_spectrum_tasmip(t->kv, s, msg))) return rc;
  const double d = production_depth_mm(t->kv);
  const double dw = d * (1.0 / sin(t->anode_deg * XT_PI / 180.0) - 1.0 / sin(XT_ANODE_REF_DEG * XT_PI / 180.0));
  if ((rc = xt_spectrum_filter(s, XT_BASIS_TUNGSTEN, dw, msg)) ||
      (rc = xt_spectrum_filter(s, XT_BASIS_ALUMINIUM, t->inherent_al_mm + t->filter_al_mm, msg)) ||
      (rc = xt_spectrum_filter(s, XT_BASIS_COPPER, t->filter_cu_mm, msg)))
    return rc;
  return 0;
}

int xt_spectrum_rebin(const xt_spectrum *in, int nbins, xt_spectrum *out, xt_msg *msg) {
  if (nbins < 1) return xt_fail(msg, XT_ERANGE, "spectrum: %d energy bins", nbins);
  if (nbins >= in->n) {
    if (out != in) *out = *in;
    return 0;
  }
  xt_spectrum r;
  memset(&r, 0, sizeof r);
  for (int g = 0; g < nbins; g++) {
    const int i0 = (int)((long)in->n * g / nbins), i1 = (int)((long)in->n * (g + 1) / nbins);
    double f = 0, fe = 0, w = 0;
    for (int i = i0; i < i1; i++) {
      f += in->fluence[i];
      fe += in->fluence[i] * in->e_kev[i];
      w += in->width_kev[i];
    }
    /* an empty group keeps its plain centre */
    r.e_kev[g] = f > 0 ? fe / f : 0.5 * (in->e_kev[i0] + in->e_kev[i1 - 1]);
    r.width_kev[g] = w;
    r.fluence[g] = f;
  }
  r.n = nbins;
  *out = r;
  return 0;
}

double xt_spectrum_fluence(const xt_spectrum *s) {
  double f = 0;
  for (int i = 0; i < s->n; i++) f += s->fluence[i];
  return f;
}

double xt_spectrum_mean_energy(const xt_spectrum *s) {
  double f = 0, fe = 0;
  for (int i = 0; i < s->n; i++) {
    f += s->fluence[i];
    fe += s->fluence[i] * s->e_kev[i];
  }
  return f > 0 ? fe / f : 0.0;
}

/* Mass energy-absorption coefficient of dry air (near sea level), cm^2/g: J. H. Hubbell and S. M.
 * Seltzer, "Tables of X-Ray Mass Attenuation Coefficients and Mass Energy-Absorption Coefficients",
 * NIST Standard Reference Database 126, Table 4 (physics.nist.gov/PhysRefData/XrayMassCoef/tab4.html),
 * the rows from 8 keV to 200 keV; log-log interpolation between them, as NIST recommends. */
static const double air_muen[][2] = {
    {8.0, 9.446},     {10.0, 4.742},    {15.0, 1.334},    {20.0, 0.5389},   {30.0, 0.1537},
    {40.0, 0.06833},  {50.0, 0.04098},  {60.0, 0.03041},  {80.0, 0.02407},  {100.0, 0.02325},
    {150.0, 0.02496}, {200.0, 0.02672},
};

double xt_air_muen_rho(double e_kev) {
  const int n = (int)(sizeof air_muen / sizeof air_muen[0]);
  if (!(e_kev >= air_muen[0][0] && e_kev <= air_muen[n - 1][0])) return NAN;
  int i = 0;
  while (i < n - 2 && e_kev > air_muen[i + 1][0]) i++;
  const double t = log(e_kev / air_muen[i][0]) / log(air_muen[i + 1][0] / air_muen[i][0]);
  return exp(log(air_muen[i][1]) + t * log(air_muen[i + 1][1] / air_muen[i][1]));
}

int xt_spectrum_air_kerma(const xt_spectrum *s, double dist_mm, double *ugy_per_mas, xt_msg *msg) {
  if (!(dist_mm > 0) || !isfinite(dist_mm)) return xt_fail(msg, XT_ERANGE, "spectrum: distance %g mm", dist_mm);
  double k = 0;
  for (int i = 0; i < s->n; i++) k += s->fluence[i] * s->e_kev[i] * xt_air_muen_rho(s->e_kev[i]);
  *ugy_per_mas = k * XT_KERMA_UGY * (1000.0 / dist_mm) * (1000.0 / dist_mm);
  return 0;
}

int xt_spectrum_hvl(const xt_spectrum *s, int basis, double *mm, xt_msg *msg) {
  double w[XT_SPECTRUM_MAX_BINS], mu[XT_SPECTRUM_MAX_BINS]; /* kerma weight per bin, 1/mm */
  const double rho = xt_basis_density(basis);
  double k0 = 0;
  for (int i = 0; i < s->n; i++) {
    double mr = 0;
    int rc = xt_basis_mass_atten(basis, s->e_kev[i], &mr, msg);
    if (rc) return rc;
    w[i] = s->fluence[i] * s->e_kev[i] * xt_air_muen_rho(s->e_kev[i]);
    mu[i] = mr * rho * 0.1;
    k0 += w[i];
  }
  if (!(k0 > 0)) return xt_fail(msg, XT_ERANGE, "spectrum: no air kerma, so no half-value layer");
  double lo = 0, hi = 1;
  for (;;) { /* kerma falls at least as fast as exp(-mu_min t): a bracket exists */
    double k = 0;
    for (int i = 0; i < s->n; i++) k += w[i] * exp(-mu[i] * hi);
    if (k < 0.5 * k0) break;
    lo = hi;
    hi *= 2;
    if (hi > 1e6) return xt_fail(msg, XT_ERANGE, "spectrum: half-value layer beyond 1 km");
  }
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
    const double mid = 0.5 * (lo + hi);
    double k = 0;
    for (int i = 0; i < s->n; i++) k += w[i] * exp(-mu[i] * mid);
    if (k > 0.5 * k0) lo = mid;
    else hi = mid;
  }
  *mm = 0.5 * (lo + hi);
  return 0;
}
