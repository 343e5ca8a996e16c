/* Gaussian-mixture models (the GMM kind): attenuation as a sum of anisotropic Gaussians,
 *
 *   mu(x) = sum_i rho_i * exp(-1/2 (x - c_i)^T Sigma_i^-1 (x - c_i)),
 *   Sigma_i = R(q_i) diag(s_i)^2 R(q_i)^T,
 *
 * with c in model mm, s the three standard deviations (mm) along the Gaussian's own axes, q a
 * unit quaternion (w, x, y, z) whose rotation R maps those axes into the model frame, and rho the
 * peak attenuation (1/mm). docs/models.md states this once for the whole project.
 *
 * Each Gaussian is taken to vanish beyond the model's cut-off radius k (Mahalanobis distance):
 * projectors drop a Gaussian from a ray that passes farther than k from its centre, and bounds
 * are those of the cut-off ellipsoids. docs/projector.md derives the error this causes.
 *
 * The model also holds a bounding-volume hierarchy over the cut-off ellipsoids (model frame),
 * built once by xt_gmm_finish, so that a ray meets only the Gaussians near it (the CPU reference
 * and the fitter use it). This file and xt_gmm.c know nothing of projectors. */
#ifndef XT_GMM_H
#define XT_GMM_H

#include <stddef.h>
#include <stdint.h>

#include "xt_model.h"

/* One Gaussian; also the native file's record (docs/models.md), 48 bytes, little-endian. */
typedef struct xt_gaussian {
  float centre[3]; /* mm, model frame */
  float scale[3];  /* standard deviations along the Gaussian's axes, mm, > 0 */
  float quat[4];   /* rotation (w, x, y, z), unit after xt_gmm_finish */
  float rho;       /* peak attenuation, 1/mm, >= 0 */
  uint32_t label;  /* material label (default table index), XT_GMM_NO_LABEL when none */
} xt_gaussian;

#define XT_GMM_NO_LABEL 0xffffffffu
/* Default cut-off radius: a ray farther than k from a Gaussian loses at most exp(-k^2/2) = 1e-5
 * of that Gaussian's central line integral (docs/projector.md). */
#define XT_GMM_CUTOFF_DEFAULT 4.8
#define XT_GMM_CUTOFF_MIN 2.0
#define XT_GMM_CUTOFF_MAX 8.0
/* Loaders refuse more Gaussians than this (3 GiB of records). */
#define XT_GMM_MAX_COUNT ((size_t)64 * 1024 * 1024)
/* GPU bytes per Gaussian of a mixture on the CUDA projector (projectors/proj_gmm.cu, which
 * asserts the sum): its record (48), and the per-frame scratch sized by the Gaussian count - the
 * screen record (64) and silhouette conic (48), the tile count and offset (4 + 4), and the initial
 * eight tile pairs (keys and values, double-buffered: 8 x 16). A frame that touches more tiles grows
 * the pair buffers; the floor of 2^20 pairs and the CUB temporary are per projector, not per model. */
#define XT_GMM_DEVICE_BYTES_PER_GAUSSIAN 296u
/* Scales outside [min, max] mm are refused: below, no detector resolves them and float precision
 * of the precision matrix suffers; above, they are larger than any room. */
#define XT_GMM_SCALE_MIN 1e-4
#define XT_GMM_SCALE_MAX 1e4

/* BVH node: a box (model mm) around the cut-off ellipsoids below it. count > 0: a leaf of `count`
 * Gaussians, whose indices are index[first .. first+count); count == 0: an inner node whose
 * children are nodes `first` and `first + 1`. */
typedef struct xt_gmm_node {
  float lo[3], hi[3];
  uint32_t first, count;
} xt_gmm_node;

typedef struct xt_gmm {
  size_t count;
  xt_gaussian *g;   /* owned, count records */
  int has_labels;   /* 1: every label is a material index 0..255 */
  double cutoff;    /* k, Mahalanobis radius (XT_GMM_CUTOFF_MIN..MAX) */
  /* Set by xt_gmm_finish: */
  double lo[3], hi[3];   /* bounds of the cut-off ellipsoids, model mm */
  xt_gmm_node *nodes;    /* owned; nodes[0] is the root */
  uint32_t nnodes;
  uint32_t *index;       /* owned, count entries: Gaussian indices in leaf order */
  /* Contrast regions (issue 26, docs/contrast.md "A mixture's label"): 1 where the Gaussians of
   * label l can take iodine (xt_gmm_contrast_label); labelled mixtures only. */
  unsigned char contrast[256];
} xt_gmm;

/* Makes the Gaussians of `label` a contrast region: iodine put into it scales each one's optical
 * depth by (mu_l + (mu/rho)_I rho_I) / mu_l, mu_l its material's (the default table's composition at
 * the mixture's energy), and feeds the iodine channel. XT_EINVAL naming the model when the mixture
 * has no labels or no Gaussian of that label. */
int xt_gmm_contrast_label(xt_model *m, int label, xt_msg *msg);

/* A mixture of `count` zeroed Gaussians (identity rotations, no labels, default cut-off). The
 * caller fills g[] and calls xt_gmm_finish. count must be 1..XT_GMM_MAX_COUNT. */
int xt_gmm_create(size_t count, xt_gmm **out, xt_msg *msg);
void xt_gmm_free(xt_gmm *g);

/* Checks every Gaussian (finite values, scales in range, normalisable quaternion, rho >= 0,
 * labels 0..255 when has_labels) and the cut-off; msg names `what` (a file) and the Gaussian. */
int xt_gmm_validate(const xt_gmm *g, const char *what, xt_msg *msg);
/* Validates, normalises the quaternions, and computes the bounds and the BVH. Every constructor
 * ends with it; the projectors require it. */
int xt_gmm_finish(xt_gmm *g, const char *what, xt_msg *msg);

/* The GMM model kind (xt_model_kind.h): its table, and the mixture of a GMM model (else NULL). */
extern const struct xt_model_kind_ops xt_model_kind_gmm;
#define XT_MODEL_GMM (&xt_model_kind_gmm)
static inline xt_gmm *xt_model_gmm(const xt_model *m) { return m->kind == XT_MODEL_GMM ? (xt_gmm *)m->payload : NULL; }

/* Wraps a finished mixture (takes ownership) in a model with identity placement. */
int xt_model_from_gmm(xt_gmm *g, const char *name, xt_model **out, xt_msg *msg);

/* Bytes of the native file of this mixture (header + records): what "model size" means for a GMM. */
size_t xt_gmm_file_bytes(const xt_gmm *g);

/* --- per-Gaussian math (double) ----------------------------------------------------------- */

/* Rotation matrix (row-major) of the quaternion q = (w, x, y, z), exactly that of q/|q|. */
void xt_gmm_rotation(const float q[4], double R[3][3]);
/* Precision Sigma^-1 as xx, xy, xz, yy, yz, zz. */
void xt_gmm_precision(const xt_gaussian *g, double P[6]);
/* Half-extents of the Gaussian's cut-off ellipsoid along the model axes: k * sqrt(Sigma_aa). */
void xt_gmm_half_extent(const xt_gaussian *g, double k, double h[3]);

/* --- files (xt_gmm_io.c) -------------------------------------------------------------------- */

/* Native format (.xgmm; layout in docs/models.md): magic, version, count, units, field layout,
 * cut-off, CRC-32, records. The header is this struct, little-endian. */
#define XT_GMM_MAGIC "XTGMM\r\n\032"
#define XT_GMM_VERSION 1u
#define XT_GMM_LAYOUT "centre:f32x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32"
typedef struct xt_gmm_header {
  char magic[8];          /* XT_GMM_MAGIC (8 bytes, no NUL) */
  uint32_t version;       /* XT_GMM_VERSION */
  uint32_t header_bytes;  /* sizeof(xt_gmm_header) = 128 */
  uint64_t count;         /* records */
  uint32_t record_bytes;  /* sizeof(xt_gaussian) = 48 */
  uint32_t flags;         /* bit 0: labels are material indices */
  double cutoff;          /* k */
  double unit_mm;         /* length unit in mm: centres and scales are multiplied by it, rho divided */
  char layout[64];        /* XT_GMM_LAYOUT, NUL-padded */
  uint32_t crc32;         /* zlib CRC-32 of header bytes 0..111 then of all records */
  uint32_t reserved[3];   /* 0 */
} xt_gmm_header;

/* C11 and C++ (the CUDA kind includes this header) spell it differently. */
#ifdef __cplusplus
#define XT_GMM_ASSERT static_assert
#else
#define XT_GMM_ASSERT _Static_assert
#endif
XT_GMM_ASSERT(sizeof(xt_gaussian) == 48, "GMM record is 48 bytes");
XT_GMM_ASSERT(offsetof(xt_gaussian, centre) == 0, "record: centre at 0");
XT_GMM_ASSERT(offsetof(xt_gaussian, scale) == 12, "record: scale at 12");
XT_GMM_ASSERT(offsetof(xt_gaussian, quat) == 24, "record: quat at 24");
XT_GMM_ASSERT(offsetof(xt_gaussian, rho) == 40, "record: rho at 40");
XT_GMM_ASSERT(offsetof(xt_gaussian, label) == 44, "record: label at 44");
XT_GMM_ASSERT(sizeof(xt_gmm_header) == 128, "GMM header is 128 bytes");
XT_GMM_ASSERT(offsetof(xt_gmm_header, version) == 8, "header: version at 8");
XT_GMM_ASSERT(offsetof(xt_gmm_header, header_bytes) == 12, "header: header_bytes at 12");
XT_GMM_ASSERT(offsetof(xt_gmm_header, count) == 16, "header: count at 16");
XT_GMM_ASSERT(offsetof(xt_gmm_header, record_bytes) == 24, "header: record_bytes at 24");
XT_GMM_ASSERT(offsetof(xt_gmm_header, flags) == 28, "header: flags at 28");
XT_GMM_ASSERT(offsetof(xt_gmm_header, cutoff) == 32, "header: cutoff at 32");
XT_GMM_ASSERT(offsetof(xt_gmm_header, unit_mm) == 40, "header: unit_mm at 40");
XT_GMM_ASSERT(offsetof(xt_gmm_header, layout) == 48, "header: layout at 48");
XT_GMM_ASSERT(offsetof(xt_gmm_header, crc32) == 112, "header: crc32 at 112");
XT_GMM_ASSERT(sizeof XT_GMM_LAYOUT <= 64, "layout string fits its field");

/* Each reader fails on truncated or oversized files, NaN/inf, non-positive scales, quaternions
 * that cannot be normalised and absurd counts, with one line in msg starting with the path; on
 * failure *out is NULL. Writers are all-or-nothing (a temporary file renamed into place). */
int xt_gmm_read_native(const char *path, xt_gmm **out, xt_msg *msg);
int xt_gmm_write_native(const char *path, const xt_gmm *g, xt_msg *msg);
/* The thesis renderer's .gmm (xray-thesis §5.1): u64 count, then count x f32[3] positions,
 * count x f32 densities, count x f32[3] scales, count x f32[4] rotations (w, x, y, z); all
 * activated (rho in 1/mm, sigma in mm), little-endian, no header beyond the count. */
int xt_gmm_read_thesis(const char *path, xt_gmm **out, xt_msg *msg);
int xt_gmm_write_thesis(const char *path, const xt_gmm *g, xt_msg *msg);

#endif /* XT_GMM_H */
