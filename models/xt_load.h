/* Loading CT and label volumes from the formats they arrive in: NIfTI-1/2 (.nii, .nii.gz, via
 * libnifti2), NRRD (.nrrd, .nhdr + raw/gzip data, via Teem's nrrd) and MetaImage (.mha, .mhd +
 * raw, our own parser: no C library exists). Origin, spacing and direction are honoured and
 * expressed in patient LPS (NIfTI's RAS is converted). Every failure is one line in msg naming
 * the file and what is wrong; nothing is half-loaded. */
#ifndef XT_LOAD_H
#define XT_LOAD_H

#include "xt_model.h"

typedef enum xt_load_convert {
  XT_LOAD_MU = 0,        /* voxels already hold mu in 1/mm: keep as float32 */
  XT_LOAD_HU_TO_MU = 1,  /* voxels are Hounsfield units: mu = mu_water * (1 + HU/1000), clamped at 0 */
  XT_LOAD_HU_TO_LABELS = 2, /* Hounsfield units -> default material labels by HU ranges */
  XT_LOAD_LABELS = 3     /* voxels are integer labels 0..255 into the default material table */
} xt_load_convert;

typedef struct xt_load_options {
  xt_load_convert convert;
  double energy_kev; /* for the material table / mu_water; 0 = XT_DEFAULT_ENERGY_KEV */
  const char *grid;  /* .nvdb: the grid's name; NULL or "" = the file's first grid */
} xt_load_options;

/* Picks the format from the file name (.nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd); anything else is
 * XT_EUNSUPPORTED. opt may be NULL (XT_LOAD_MU). On failure *out is NULL and msg holds one line
 * starting with the path. HU helpers and the label bands: xt_hu.h; details: docs/loaders.md. */
int xt_volume_load(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);

/* Loads any model file this build reads, the reader picked from the file name by the table in
 * xt_model_load.c: volumes (xt_volume_load with opt's conversion; dense or labels) and each
 * further kind's files. The model is named `name` (NULL or "": the file's base name) and placed
 * at identity. On failure *out is NULL and msg holds one line starting with the path. */
int xt_model_load(const char *path, const xt_load_options *opt, const char *name, xt_model **out, xt_msg *msg);

/* Reads an ellipsoid phantom from JSON (format: docs/models.md, "Ellipsoid phantom files"):
 *   {"name": "...", "ellipsoids": [{"center": [x,y,z], "semi_axes": [a,b,c], "phi_deg": 0,
 *     "theta_deg": 0, "material": "bone", "mu": 0.05}, ...]}
 * mm and 1/mm; "material" names an entry of mt (default soft_tissue) and gives the painted label;
 * "mu" (additive, for dense voxelisation) defaults to that material's mu in mt. */
struct xt_phantom;
int xt_phantom_load_json(const char *path, const xt_material_table *mt, struct xt_phantom *out, xt_msg *msg);

#endif /* XT_LOAD_H */
