/* The default material table, computed from xraylib's NIST compound data at one effective energy.
 *
 * mu = (mu/rho)(E) * rho with (mu/rho) from xraylib's total cross sections (cm^2/g, including
 * coherent scattering) and rho from the NIST compound table, converted
 * to 1/mm. Iodine contrast is blood with 10 mg iodine per mL added; metal is titanium (implants,
 * guidewire cores) at 4.506 g/cm^3. */
#include <stdio.h>
#include <string.h>

#include <xraylib/xraylib.h>

#include "xt_model.h"

typedef struct mat_def {
  int index;
  const char *name;
  const char *nist; /* xraylib NIST compound name, or NULL for an element */
  int z;            /* element, when nist is NULL */
  double density;   /* used for elements; NIST compounds carry their own */
} mat_def;

static const mat_def defs[XT_MAT_DEFAULT_COUNT] = {
    {XT_MAT_AIR, "air", "Air, Dry (near sea level)", 0, 0},
    {XT_MAT_FAT, "fat", "Adipose Tissue (ICRP)", 0, 0},
    {XT_MAT_SOFT, "soft_tissue", "Tissue, Soft (ICRP)", 0, 0},
    {XT_MAT_BRAIN, "brain", "Brain (ICRP)", 0, 0},
    {XT_MAT_BLOOD, "blood", "Blood (ICRP)", 0, 0},
    {XT_MAT_BONE, "bone", "Bone, Cortical (ICRP)", 0, 0},
    {XT_MAT_IODINE, "iodine_contrast", "Blood (ICRP)", 53, 0.010},
    {XT_MAT_METAL, "metal_titanium", NULL, 22, 4.506},
};

/* mu/rho of a NIST compound is the mass-fraction-weighted sum of its elements' CS_Total. This is
 * what xraylib's CS_Total_CP computes; calling CS_Total_CP itself leaks a few bytes per call
 * inside libxrl 4.0 (seen with LeakSanitizer), so the sum is formed here. */
static int nist_mu(const char *name, double e, double *mu_cm, double *rho, xt_msg *msg) {
  xrl_error *err = NULL;
  struct compoundDataNIST *c = GetCompoundDataNISTByName(name, &err);
  if (!c) {
    int rc = xt_fail(msg, XT_EINTERNAL, "materials: xraylib has no NIST compound \"%s\": %s", name,
                     err && err->message ? err->message : "?");
    xrl_error_free(err);
    return rc;
  }
  double mr = 0;
  int rc = 0;
  for (int i = 0; i < c->nElements && !rc; i++) {
    double cs = CS_Total(c->Elements[i], e, &err);
    if (err) {
      rc = xt_fail(msg, XT_EINTERNAL, "materials: xraylib CS_Total(Z=%d, %g keV) for %s: %s", c->Elements[i], e, name,
                   err->message);
      xrl_error_free(err);
      err = NULL;
    }
    mr += c->massFractions[i] * cs;
  }
  *rho = c->density;
  *mu_cm = mr * c->density;
  FreeCompoundDataNIST(c);
  return rc;
}

int xt_materials_default(double energy_kev, xt_material_table *t, xt_msg *msg) {
  if (!(energy_kev >= 20.0 && energy_kev <= 150.0))
    return xt_fail(msg, XT_ERANGE, "materials: effective energy %g keV outside [20, 150]", energy_kev);
  memset(t, 0, sizeof *t);
  t->count = XT_MAT_DEFAULT_COUNT;
  t->energy_kev = energy_kev;
  snprintf(t->source, sizeof t->source,
           "xraylib 4.0 NIST compound data (elemental CS_Total by mass fraction, coherent included) at %.1f keV; iodine = blood + 10 mg I/mL; metal = Ti", energy_kev);
  for (int i = 0; i < XT_MAT_DEFAULT_COUNT; i++) {
    const mat_def *d = &defs[i];
    double mu_cm = 0, rho = 0;
    if (d->nist) {
      int rc = nist_mu(d->nist, energy_kev, &mu_cm, &rho, msg);
      if (rc) return rc;
    }
    if (d->z) {
      xrl_error *err = NULL;
      double mr = CS_Total(d->z, energy_kev, &err);
      if (err) {
        int rc = xt_fail(msg, XT_EINTERNAL, "materials: xraylib CS_Total(Z=%d): %s", d->z, err->message);
        xrl_error_free(err);
        return rc;
      }
      mu_cm += mr * d->density; /* partial density of the element (added to the compound for iodine) */
      rho += d->density;
    }
    t->mu[d->index] = (float)(mu_cm / 10.0);
    t->density[d->index] = rho;
    snprintf(t->name[d->index], XT_MATERIAL_NAME_MAX, "%s", d->name);
  }
  return 0;
}
