/* Basis materials: the materials whose areal densities the projectors write as material channels
 * and whose mass attenuation the imaging chain integrates over the spectrum, plus the filter and
 * detector materials of the tube and panel. One list, so that the default label table, the
 * channels of a label volume and the polychromatic chain all use the same compositions and the
 * same xraylib numbers.
 *
 * Each basis material is a NIST compound of xraylib (elemental cross sections summed by mass
 * fraction) or a pure element; its density is the NIST (or handbook) value. A material-table entry
 * is one or two basis parts with partial densities (iodine contrast = blood + 10 mg/mL iodine). */
#ifndef XT_BASIS_H
#define XT_BASIS_H

#include "xt_model.h"

typedef enum xt_basis_id {
  XT_BASIS_AIR = 0,
  XT_BASIS_ADIPOSE,
  XT_BASIS_SOFT,
  XT_BASIS_BRAIN,
  XT_BASIS_BLOOD,
  XT_BASIS_BONE,
  XT_BASIS_IODINE,
  XT_BASIS_TITANIUM,
  /* tube, filter and detector materials (also usable as channels) */
  XT_BASIS_WATER,
  XT_BASIS_ALUMINIUM,
  XT_BASIS_COPPER,
  XT_BASIS_TUNGSTEN,
  XT_BASIS_CSI,
  /* phantom materials (issue 24: the reference air kerma setup's PMMA slabs) */
  XT_BASIS_PMMA,
  /* instrument materials (issue 26): nitinol, stainless steel, marker bands and coils */
  XT_BASIS_NICKEL,
  XT_BASIS_IRON,
  XT_BASIS_PLATINUM,
  XT_BASIS_COUNT
} xt_basis_id;

/* One part of a material: a basis material at a partial density (g/cm^3). */
typedef struct xt_basis_part {
  int basis;
  double density;
} xt_basis_part;

const char *xt_basis_name(int id);   /* "air", "soft_tissue", ...; NULL for an unknown id */
double xt_basis_density(int id);     /* g/cm^3 of the pure material */
int xt_basis_find(const char *name); /* id, or -1 */

/* Total mass attenuation (coherent included), cm^2/g, at e_kev (1..500). (xraylib 4.0's
 * mass-energy absorption, CS_Energy, is off NIST's by up to 45 % below 60 keV - xraylib issues
 * #176, #255 - so air kerma uses NIST's table instead: imaging/xt_spectrum.c.) */
int xt_basis_mass_atten(int id, double e_kev, double *mu_rho, xt_msg *msg);

/* The basis parts of entry `label` of table t, found by the entry's name (the default materials,
 * xt_materials_default): *n gets 0 (an unused entry: mu 0, no name), 1 or 2. An entry named after a
 * basis material ("pmma") is that material alone at the entry's density. XT_EUNSUPPORTED, naming
 * the entry, when the name is neither. */
int xt_material_basis(const xt_material_table *t, int label, xt_basis_part parts[2], int *n, xt_msg *msg);

/* The composition of the material called `name`: a default material (xt_materials_default), an
 * instrument material ("nitinol", "stainless_steel", "catheter_polymer", "catheter_polymer_w") or a
 * basis material at its own density. XT_ENOTFOUND, naming it, when it is none of these. */
int xt_material_parts_named(const char *name, xt_basis_part parts[2], int *n, xt_msg *msg);

#endif /* XT_BASIS_H */
