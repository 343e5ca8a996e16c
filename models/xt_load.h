/* Loading CT and label volumes from the formats they arrive in: NIfTI-1/2 (.nii, .nii.gz, via
 * libnifti2), NRRD (.nrrd, .nhdr + raw/gzip data, via Teem's nrrd), MetaImage (.mha, .mhd +
 * raw, our own parser: no C library exists) and DICOM series (a folder, a .dcm file or an @list
 * of files, via GDCM). Origin, spacing and direction are honoured and expressed in patient LPS
 * (NIfTI's RAS is converted). Every failure is one line in msg naming the file and what is
 * wrong; nothing is half-loaded. */
#ifndef XT_LOAD_H
#define XT_LOAD_H

#include "xt_model.h"

typedef enum xt_load_convert {
  XT_LOAD_MU = 0,        /* voxels already hold mu in 1/mm: keep as float32 */
  XT_LOAD_HU_TO_MU = 1,  /* voxels are Hounsfield units: mu = mu_water * (1 + HU/1000), clamped at 0 */
  XT_LOAD_HU_TO_LABELS = 2, /* Hounsfield units -> default material labels by HU ranges */
  XT_LOAD_LABELS = 3,    /* voxels are integer labels 0..255 into the default material table */
  /* voxels are integer labels 0..255 of a contrast mask (issue 26, docs/contrast.md): 0 nothing, every
   * label present above 0 a contrast region of no material of its own (iodine only, when injected),
   * to lie over a CT that holds the vessels' blood */
  XT_LOAD_CONTRAST_MASK = 4
} xt_load_convert;

/* HU -> mu: the bilinear calibration (air-water and water-bone segments, xt_hu.h) is the
 * default; the single linear scale through water stays selectable. */
typedef enum xt_hu_model { XT_HU_BILINEAR = 0, XT_HU_LINEAR = 1 } xt_hu_model;

/* NIfTI voxel-to-world map: the sform (as nibabel and ITK prefer), falling back to the qform;
 * or the qform, falling back to the sform. */
typedef enum xt_nifti_xform { XT_NIFTI_SFORM = 0, XT_NIFTI_QFORM = 1 } xt_nifti_xform;

/* Zero-initialised options are the defaults. */
typedef struct xt_load_options {
  xt_load_convert convert;
  double energy_kev; /* for the material table / mu_water; 0 = XT_DEFAULT_ENERGY_KEV */
  const char *grid;  /* .nvdb: the grid's name; NULL or "" = the file's first grid */
  /* real-data options (docs/loaders.md, "Traps of real volumes") */
  xt_hu_model hu_model;
  double ct_energy_kev;      /* bilinear: effective energy of the CT that measured the HU; 0 = 70 */
  int nan_fill;              /* 0: NaN voxels are an error (default); 1: replaced by nan_value */
  double nan_value;          /* in the file's units (HU for the HU conversions), before conversion */
  xt_nifti_xform nifti_xform;
  const char *dicom_series;  /* Series Instance UID (or Series Number) to load from a folder that
                                holds several series; NULL: the folder must hold exactly one */
  xt_load_report *report;    /* optional out: warnings and choices (xt_model.h); may be NULL */
  /* Confinement, for paths that come from a client (the server's POST /v1/models). NULL: any
   * regular file the process can read. Else the file and every data file its header names must
   * resolve (symlinks and ".." as the kernel takes them) to a regular file under one of the nroots
   * directories, which must themselves be resolved absolute paths (xt_load_root); nroots 0
   * refuses every path (XT_EPERM). The resolution looks at one component at a time and never at
   * a name outside the roots: a path outside answers XT_EPERM without any file access, so it
   * tells nothing about what exists there (details: xt_load.c, "Confinement"). */
  const char *const *roots;
  int nroots;
  /* Optional: the same nroots folders as configured, before realpath (NULL entries allowed). The
   * components on the way to them may be looked up, so that a client may name a root by this
   * path when it goes through a symbolic link outside the root (/data -> /mnt/disk/data). */
  const char *const *root_names;
} xt_load_options;

/* Resolves a model folder for xt_load_options.roots: realpath of dir, which must be a directory;
 * *out is malloc'd. */
int xt_load_root(const char *dir, char **out, xt_msg *msg);

/* Picks the format from the file name (.nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd) or, for DICOM,
 * from xt_dicom_path() below; anything else is XT_EUNSUPPORTED. opt may be NULL (XT_LOAD_MU). On
 * failure *out is NULL and msg holds one line starting with the path. HU helpers and the label
 * bands: xt_hu.h; details: docs/loaders.md. */
int xt_volume_load(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);

/* 1 when path names DICOM input: a directory, a file named *.dcm / *.dicom / *.ima, a file with
 * the DICOM preamble ("DICM" at byte 128), or "@LIST" (a text file naming one DICOM file per line,
 * relative to the list's directory). A trailing "#SERIES" (Series Instance UID or Series Number)
 * picks one series, like opt->dicom_series. */
int xt_dicom_path(const char *path);

/* Loads one DICOM series from explicitly named files (all of one series), as xt_volume_load
 * does for a folder; `what` names the input in messages. */
int xt_dicom_load_files(const char *what, const char *const *files, int nfiles, const xt_load_options *opt,
                        xt_volume **out, xt_msg *msg);

/* Loads any model file this build reads, the reader picked from the file name by the table in
 * xt_model_load.c: volumes (xt_volume_load with opt's conversion; dense or labels), DICOM series
 * (xt_dicom_path) and each further kind's files. The model is named `name` (NULL or "": the file's
 * base name) and placed at identity; m->report holds the loader's report (opt->report, if set,
 * receives a copy). On failure *out is NULL and msg holds one line starting with the path. */
int xt_model_load(const char *path, const xt_load_options *opt, const char *name, xt_model **out, xt_msg *msg);

/* The loader's settings by the names xtwin-server's configuration (and so its session log) gives
 * them: convert mu|hu|hu-labels|labels (NULL or "": mu), hu_model bilinear|linear, nifti_transform
 * sform|qform, nan_value none|a number. One translation, so that `xtwin replay` loads a model as the
 * server did. Other fields of opt are kept; msg names the setting that is wrong. */
int xt_load_options_named(const char *convert, const char *hu_model, double ct_energy_kev, const char *nifti_transform,
                          const char *nan_value, xt_load_options *opt, xt_msg *msg);

/* The load report as a JSON object (jansson json_t *, new reference; NULL when out of memory):
 * format, warnings [{code, message}], value range, and the NIfTI / DICOM / HU choices made. The
 * sidecar's "load" and the server's model report use it. */
struct json_t;
struct json_t *xt_load_report_json(const xt_load_report *r);

/* Reads an ellipsoid phantom from JSON (format: docs/models.md, "Ellipsoid phantom files"):
 *   {"name": "...", "ellipsoids": [{"center": [x,y,z], "semi_axes": [a,b,c], "phi_deg": 0,
 *     "theta_deg": 0, "material": "bone", "mu": 0.05}, ...]}
 * mm and 1/mm; "material" names an entry of mt (default soft_tissue) and gives the painted label;
 * "mu" (additive, for dense voxelisation) defaults to that material's mu in mt. */
struct xt_phantom;
int xt_phantom_load_json(const char *path, const xt_material_table *mt, struct xt_phantom *out, xt_msg *msg);

#endif /* XT_LOAD_H */
