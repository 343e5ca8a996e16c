/* Models: what the projectors render. One xt_model_t per object in the room.
 *
 * A model has a kind (dense float32 mu voxels, uint8 label voxels + material table, Gaussian
 * mixtures, NanoVDB sparse grids), a name, its own coordinate frame (patient LPS mm as the file
 * states it), and a placement: the rigid or affine map from that frame to the patient frame.
 * Projectors receive models through this header only; a kind is a table of operations
 * (xt_model_kind.h) and its payload is opaque here, reached with the accessor of its kind
 * (xt_model_volume, xt_model_gmm, xt_model_nvdb), so adding a kind adds a table, not fields to
 * every model. */
#ifndef XT_MODEL_H
#define XT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xt_err.h"
#include "xt_vec.h"

/* The kinds are their tables (xt_model_kind.h); each kind's header names its own. The two voxel
 * kinds share the xt_volume payload. */
extern const struct xt_model_kind_ops xt_model_kind_dense, xt_model_kind_labels;
#define XT_MODEL_DENSE (&xt_model_kind_dense)   /* float32 mu (1/mm) per voxel: xt_model_volume(m) */
#define XT_MODEL_LABELS (&xt_model_kind_labels) /* uint8 label per voxel + xt_material_table: xt_model_volume(m) */

#define XT_MAX_MATERIALS 256
#define XT_MATERIAL_NAME_MAX 32

typedef struct xt_material_table {
  int count;                                       /* entries in use, 1..256 */
  double energy_kev;                               /* effective energy the mu values are for */
  float mu[XT_MAX_MATERIALS];                      /* linear attenuation, 1/mm; unused entries 0 */
  double density[XT_MAX_MATERIALS];                /* g/cm^3, informational */
  char name[XT_MAX_MATERIALS][XT_MATERIAL_NAME_MAX];
  char source[160];                                /* where the values come from */
  /* Contrast regions (issue 26, docs/contrast.md): 1 where label l can take iodine, so the model's
   * channel set holds iodine and a projector may add it (xt_proj_set_iodine); 0 elsewhere. */
  unsigned char contrast[XT_MAX_MATERIALS];
} xt_material_table;

/* A regular voxel grid. Voxel (i,j,k) is stored at data[i + dim[0]*(j + dim[1]*k)] and its
 * centre lies at index_to_model * (i,j,k); it fills the cube [i-0.5, i+0.5] x ... in index space. */
typedef struct xt_volume {
  int dim[3];
  double spacing[3];        /* mm, as the file states (also implied by index_to_model) */
  xt_affine index_to_model; /* voxel-centre index -> model LPS mm (origin, spacing, direction) */
  int type;                 /* XT_VOXEL_F32 or XT_VOXEL_U8 */
  void *data;               /* owned */
  size_t nbytes;
  xt_material_table *materials; /* owned; labels only, NULL for dense */
  double energy_kev;            /* dense: the effective energy its mu values are for (the material
                                   channels convert mu back to density at it); 0 = XT_DEFAULT_ENERGY_KEV */
} xt_volume;

enum { XT_VOXEL_F32 = 1, XT_VOXEL_U8 = 2 };

/* What a loader noticed and chose while reading a file: warnings for data that is probably not
 * what the conversion assumes (HU sanity, qform/sform disagreement, NaN filled...), and the
 * choices it made (NIfTI transform, DICOM series, HU model). Plain data, so the CLI's sidecar,
 * the server's model report and the dataset generator print it without knowing the formats.
 * Filled by models/xt_load*.c (docs/loaders.md lists the warning codes). */
#define XT_LOAD_MAX_WARN 8
typedef struct xt_load_warning {
  char code[24];  /* stable machine-readable name, e.g. "hu_no_air" */
  char text[232]; /* one line for people */
} xt_load_warning;

typedef struct xt_load_report {
  char format[16]; /* "nifti", "nrrd", "metaimage", "dicom" */
  int nwarn;       /* entries in warn[]; further warnings are counted in nwarn_dropped */
  int nwarn_dropped;
  xt_load_warning warn[XT_LOAD_MAX_WARN];
  double value_min, value_max; /* voxel values after the file's own scaling, before conversion */
  size_t nan_filled;           /* NaN voxels replaced by the nan_value option */
  double nan_value;
  char hu_model[12]; /* "linear" or "bilinear" for HU -> mu, "" otherwise */
  double ct_energy_kev;
  /* NIfTI: which voxel-to-world map was used, and how far the other one is from it. */
  char xform[12]; /* "sform", "qform" or "pixdim" */
  int sform_code, qform_code;
  double xform_disagree_mm; /* largest distance over the 8 corner voxels; -1 when not both present */
  /* DICOM */
  char series_uid[68], modality[20], series_desc[68], transfer_syntax[68];
  int nseries;        /* image series found where the volume was looked for */
  int nslices;        /* slices (frames) in the volume */
  int nskipped;       /* files passed over: not DICOM images, or of another series */
  int enhanced;       /* one multi-frame (enhanced) object */
  double slice_step_mm;
} xt_load_report;

/* Adds a warning (printf-style text) to r; r may be NULL. */
void xt_load_report_warn(xt_load_report *r, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The payload is the kind's own type, owned by the model and freed by the kind's table; code
 * outside the kind reaches it through the kind's accessor, which answers NULL for a model of
 * another kind. */
typedef struct xt_model {
  char name[64];
  const struct xt_model_kind_ops *kind; /* XT_MODEL_DENSE, XT_MODEL_GMM, ... */
  xt_affine placement;                  /* model frame -> patient frame */
  void *payload;                        /* owned; e.g. xt_volume for the two voxel kinds */
  xt_load_report *report;               /* owned; set by xt_model_load, NULL for built-in models */
} xt_model;

/* The volume of a DENSE or LABELS model, else NULL. */
static inline xt_volume *xt_model_volume(const xt_model *m) {
  return m->kind == XT_MODEL_DENSE || m->kind == XT_MODEL_LABELS ? (xt_volume *)m->payload : NULL;
}

/* --- volumes ------------------------------------------------------------------------------ */

/* Allocates a zero-filled volume with the given dims/spacing and index_to_model = diag(spacing)
 * with the grid centred on the model origin. Fails on absurd sizes (see XT_VOLUME_MAX_VOXELS). */
#define XT_VOLUME_MAX_VOXELS ((size_t)4096 * 1024 * 1024)
#define XT_VOLUME_MAX_DIM 16384
int xt_volume_create(int nx, int ny, int nz, const double spacing[3], int type, xt_volume **out, xt_msg *msg);
void xt_volume_free(xt_volume *v);
size_t xt_volume_voxels(const xt_volume *v);
/* Mu at voxel (i,j,k) for either type (labels through the table); no bounds check. */
double xt_volume_mu(const xt_volume *v, int i, int j, int k);
/* Checks the data: NaN/inf in float volumes, labels beyond the table; msg names what is wrong. */
int xt_volume_validate(const xt_volume *v, const char *what, xt_msg *msg);
/* The axis-aligned bounds, in model mm, of the voxel cubes (not just the centres). */
void xt_volume_bounds(const xt_volume *v, xt_vec3 *lo, xt_vec3 *hi);

/* --- models ------------------------------------------------------------------------------- */

/* Wraps a volume (takes ownership) in a model with identity placement. */
int xt_model_from_volume(xt_volume *v, const char *name, xt_model **out, xt_msg *msg);
void xt_model_free(xt_model *m);
/* The kind's name ("dense", "gmm", ...); "unknown" for NULL. */
const char *xt_model_kind_name(const struct xt_model_kind_ops *k);
/* The axis-aligned bounds, in model mm, of everything the model can attenuate (voxel cubes for
 * volumes; each kind states its own extent). XT_EINVAL when the payload is missing. */
int xt_model_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi, xt_msg *msg);

/* Opens path for reading as a regular file without ever blocking: the descriptor is opened with
 * O_NONBLOCK and checked (fstat) before anything is read, so a FIFO or device named like a model
 * file is refused at once instead of hanging the caller (a server thread). *size (may be NULL)
 * gets the file's length. One line naming the file on failure: XT_ENOTFOUND, XT_EINVAL (a
 * directory or anything not a regular file), XT_EIO. For the readers of xt_models (.nvdb, .xgmm,
 * .gmm) and xt_loaders (.gmm.json). */
int xt__fopen_regular(const char *path, FILE **f, uint64_t *size, xt_msg *msg);

/* --- materials ---------------------------------------------------------------------------- */

/* Default materials, indices fixed: the label values used by phantoms and HU conversion. */
enum {
  XT_MAT_AIR = 0,
  XT_MAT_FAT = 1,
  XT_MAT_SOFT = 2,
  XT_MAT_BRAIN = 3,
  XT_MAT_BLOOD = 4,
  XT_MAT_BONE = 5,
  XT_MAT_IODINE = 6,
  XT_MAT_METAL = 7,
  XT_MAT_DEFAULT_COUNT = 8
};
#define XT_DEFAULT_ENERGY_KEV 60.0
/* Fills t with the default table at energy_kev (20..150 keV) from xraylib's NIST data. */
int xt_materials_default(double energy_kev, xt_material_table *t, xt_msg *msg);

#endif /* XT_MODEL_H */
