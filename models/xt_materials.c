/* Basis materials (xt_basis.h) and the default material table, both from xraylib's NIST data.
 *
 * mu/rho of a NIST compound is the mass-fraction-weighted sum of its elements' CS_Total (cm^2/g,
 * coherent scattering included); mu = (mu/rho) * rho, converted to 1/mm for the table. A default
 * material is one or two basis parts at partial densities: iodine contrast is blood with 10 mg
 * iodine per mL added; metal is titanium (implants, guidewire cores) at 4.506 g/cm^3. The label
 * table and the material channels are computed from the same parts, so a label volume's
 * monochromatic line integral equals the sum over its channels of (mu/rho) times areal density. */
#include <stdio.h>
#include <string.h>

#include <xraylib/xraylib.h>

#include "xt_basis.h"

/* ------------------------------------------------------------------------------------------ */
/* Basis materials                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct basis_def {
  const char *name;
  const char *nist; /* xraylib NIST compound name, or NULL for an element */
  int z;            /* element, when nist is NULL */
  double density;   /* g/cm^3: xraylib's NIST density for compounds; handbook values for elements */
} basis_def;

static const basis_def basis[XT_BASIS_COUNT] = {
    [XT_BASIS_AIR] = {"air", "Air, Dry (near sea level)", 0, 0.001205},
    [XT_BASIS_ADIPOSE] = {"adipose", "Adipose Tissue (ICRP)", 0, 0.92},
    [XT_BASIS_SOFT] = {"soft_tissue", "Tissue, Soft (ICRP)", 0, 1.0},
    [XT_BASIS_BRAIN] = {"brain", "Brain (ICRP)", 0, 1.03},
    [XT_BASIS_BLOOD] = {"blood", "Blood (ICRP)", 0, 1.06},
    [XT_BASIS_BONE] = {"bone", "Bone, Cortical (ICRP)", 0, 1.85},
    [XT_BASIS_IODINE] = {"iodine", NULL, 53, 4.93},
    [XT_BASIS_TITANIUM] = {"titanium", NULL, 22, 4.506},
    [XT_BASIS_WATER] = {"water", "Water, Liquid", 0, 1.0},
    [XT_BASIS_ALUMINIUM] = {"aluminium", NULL, 13, 2.699},
    [XT_BASIS_COPPER] = {"copper", NULL, 29, 8.96},
    [XT_BASIS_TUNGSTEN] = {"tungsten", NULL, 74, 19.3},
    [XT_BASIS_CSI] = {"csi", "Cesium Iodide", 0, 4.51},
    /* C5H8O2 (xraylib's NIST name keeps NIST's spelling) */
    [XT_BASIS_PMMA] = {"pmma", "Polymethyl Methacralate (Lucite, Perspex)", 0, 1.19},
    [XT_BASIS_NICKEL] = {"nickel", NULL, 28, 8.908},
    [XT_BASIS_IRON] = {"iron", NULL, 26, 7.874},
    [XT_BASIS_PLATINUM] = {"platinum", NULL, 78, 21.45},
};

const char *xt_basis_name(int id) { return id >= 0 && id < XT_BASIS_COUNT ? basis[id].name : NULL; }
double xt_basis_density(int id) { return id >= 0 && id < XT_BASIS_COUNT ? basis[id].density : 0.0; }

int xt_basis_find(const char *name) {
  for (int i = 0; name && i < XT_BASIS_COUNT; i++)
    if (strcmp(basis[i].name, name) == 0) return i;
  return -1;
}

/* CS_Total of an element, cm^2/g. */
static int elem_cs(int z, double e, double *cs, const char *what, xt_msg *msg) {
  xrl_error *err = NULL;
  *cs = CS_Total(z, e, &err);
  if (!err) return 0;
  int rc = xt_fail(msg, XT_EINTERNAL, "materials: xraylib CS_Total(Z=%d, %g keV) for %s: %s", z, e, what,
                   err->message ? err->message : "?");
  xrl_error_free(err);
  return rc;
}

/* CS_Total_CP leaks a few bytes per call inside libxrl 4.0 (seen with LeakSanitizer), so the
 * mass-fraction sum is formed here. */
int xt_basis_mass_atten(int id, double e, double *out, xt_msg *msg) {
  if (id < 0 || id >= XT_BASIS_COUNT) return xt_fail(msg, XT_EINVAL, "materials: unknown basis material %d", id);
  if (!(e >= 1.0 && e <= 500.0)) return xt_fail(msg, XT_ERANGE, "materials: energy %g keV outside [1, 500]", e);
  const basis_def *d = &basis[id];
  if (!d->nist) return elem_cs(d->z, e, out, d->name, msg);
  xrl_error *err = NULL;
  struct compoundDataNIST *c = GetCompoundDataNISTByName(d->nist, &err);
  if (!c) {
    int rc = xt_fail(msg, XT_EINTERNAL, "materials: xraylib has no NIST compound \"%s\": %s", d->nist,
                     err && err->message ? err->message : "?");
    xrl_error_free(err);
    return rc;
  }
  double sum = 0;
  int rc = 0;
  for (int i = 0; i < c->nElements && !rc; i++) {
    double cs = 0;
    rc = elem_cs(c->Elements[i], e, &cs, d->name, msg);
    sum += c->massFractions[i] * cs;
  }
  FreeCompoundDataNIST(c);
  *out = sum;
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The default material table                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct mat_def {
  int index;
  const char *name;
  int nparts;
  xt_basis_part part[2];
} mat_def;

static const mat_def defs[XT_MAT_DEFAULT_COUNT] = {
    {XT_MAT_AIR, "air", 1, {{XT_BASIS_AIR, 0.001205}}},
    {XT_MAT_FAT, "fat", 1, {{XT_BASIS_ADIPOSE, 0.92}}},
    {XT_MAT_SOFT, "soft_tissue", 1, {{XT_BASIS_SOFT, 1.0}}},
    {XT_MAT_BRAIN, "brain", 1, {{XT_BASIS_BRAIN, 1.03}}},
    {XT_MAT_BLOOD, "blood", 1, {{XT_BASIS_BLOOD, 1.06}}},
    {XT_MAT_BONE, "bone", 1, {{XT_BASIS_BONE, 1.85}}},
    {XT_MAT_IODINE, "iodine_contrast", 2, {{XT_BASIS_BLOOD, 1.06}, {XT_BASIS_IODINE, 0.010}}},
    {XT_MAT_METAL, "metal_titanium", 1, {{XT_BASIS_TITANIUM, 4.506}}},
};

/* Named materials beyond the default table. Instrument materials (issue 26). Nitinol: 55 % Ni, 45 % Ti by mass at 6.45
 * g/cm^3. Stainless steel (316L: Fe 68, Cr 17, Ni 12, Mo 2 %) at 8.0 g/cm^3 with chromium and
 * molybdenum counted as iron [U]. Catheter shafts (Pebax, nylon, polyurethane: C, H, O, N) are soft
 * tissue at the polymer's density, whose mass attenuation is within about 5 % of theirs at 40-80 keV
 * [U]: a scene holds at most 8 basis materials (XT_MAX_CHANNELS), and the default thorax with its
 * wire and a catheter then fits; "_w" is one loaded with 20 % tungsten by mass for radiopacity [U]. */
static const mat_def instr_defs[] = {
    {0, "nitinol", 2, {{XT_BASIS_NICKEL, 3.5475}, {XT_BASIS_TITANIUM, 2.9025}}},
    {0, "stainless_steel", 2, {{XT_BASIS_IRON, 7.04}, {XT_BASIS_NICKEL, 0.96}}},
    {0, "catheter_polymer", 1, {{XT_BASIS_SOFT, 1.19}}},
    {0, "catheter_polymer_w", 2, {{XT_BASIS_SOFT, 1.2}, {XT_BASIS_TUNGSTEN, 0.3}}},
    /* the thorax phantom's (xt_phantom_thorax.c): inflated lung, and spongy bone [U] */
    {0, "lung", 1, {{XT_BASIS_SOFT, 0.26}}},
    /* and its air (trachea, stomach gas, the room) as soft tissue at air's density [U]: its mass
     * attenuation is air's within 8 % at 30-100 keV, which over a metre of air is below 1e-3 of
     * optical depth, and the thorax then leaves a channel for iodine (contrast, issue 26) beside its
     * wire's three and a tungsten-loaded catheter's */
    {0, "air_as_tissue", 1, {{XT_BASIS_SOFT, 0.001205}}},
    {0, "trabecular_bone", 1, {{XT_BASIS_BONE, 1.18}}},
};

int xt_material_parts_named(const char *name, xt_basis_part parts[2], int *n, xt_msg *msg) {
  *n = 0;
  for (int i = 0; i < XT_MAT_DEFAULT_COUNT; i++)
    if (name && strcmp(name, defs[i].name) == 0) {
      for (int k = 0; k < defs[i].nparts; k++) parts[k] = defs[i].part[k];
      *n = defs[i].nparts;
      return 0;
    }
  for (size_t i = 0; name && i < sizeof instr_defs / sizeof instr_defs[0]; i++)
    if (strcmp(name, instr_defs[i].name) == 0) {
      for (int k = 0; k < instr_defs[i].nparts; k++) parts[k] = instr_defs[i].part[k];
      *n = instr_defs[i].nparts;
      return 0;
    }
  const int b = xt_basis_find(name);
  if (b >= 0) {
    parts[0] = (xt_basis_part){b, xt_basis_density(b)};
    *n = 1;
    return 0;
  }
  return xt_fail(msg, XT_ENOTFOUND, "materials: no material called \"%s\"", name ? name : "");
}

int xt_material_basis(const xt_material_table *t, int label, xt_basis_part parts[2], int *n, xt_msg *msg) {
  *n = 0;
  if (label < 0 || label >= XT_MAX_MATERIALS) return xt_fail(msg, XT_ERANGE, "materials: label %d", label);
  if (label >= t->count || (!t->name[label][0] && t->mu[label] == 0)) return 0;
  for (int i = 0; i < XT_MAT_DEFAULT_COUNT; i++) {
    if (strcmp(t->name[label], defs[i].name) != 0) continue;
    for (int k = 0; k < defs[i].nparts; k++) parts[k] = defs[i].part[k];
    *n = defs[i].nparts;
    return 0;
  }
  for (size_t i = 0; i < sizeof instr_defs / sizeof instr_defs[0]; i++) {
    if (strcmp(t->name[label], instr_defs[i].name) != 0) continue;
    for (int k = 0; k < instr_defs[i].nparts; k++) parts[k] = instr_defs[i].part[k];
    *n = instr_defs[i].nparts;
    return 0;
  }
  /* a basis material by name, at the entry's density: phantoms of one material (PMMA slabs) need no
   * entry in the default table, whose eight entries fill the eight channels of a labelled head */
  const int b = xt_basis_find(t->name[label]);
  if (b >= 0 && t->density[label] > 0) {
    parts[0] = (xt_basis_part){b, t->density[label]};
    *n = 1;
    return 0;
  }
  return xt_fail(msg, XT_EUNSUPPORTED, "materials: label %d (\"%s\") is neither a default nor a basis material, so it has no basis composition",
                 label, t->name[label]);
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
    for (int k = 0; k < d->nparts; k++) {
      double mr = 0;
      int rc = xt_basis_mass_atten(d->part[k].basis, energy_kev, &mr, msg);
      if (rc) return rc;
      mu_cm += mr * d->part[k].density;
      rho += d->part[k].density;
    }
    t->mu[d->index] = (float)(mu_cm / 10.0);
    t->density[d->index] = rho;
    snprintf(t->name[d->index], XT_MATERIAL_NAME_MAX, "%s", d->name);
  }
  return 0;
}
