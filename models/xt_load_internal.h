/* Shared between the format readers (xt_load_nifti.c, xt_load_nrrd.c, xt_load_mha.c,
 * xt_load_dicom.c) and the common back end (xt_load.c): a non-owning view of a decoded grid and
 * the size checks every reader makes before it allocates. Not installed; not public API. */
#ifndef XT_LOAD_INTERNAL_H
#define XT_LOAD_INTERNAL_H

#include <stdint.h>

#include "xt_load.h"

/* Element types a file may store; voxels are in host byte order by the time they reach us. */
typedef enum xt__elem { XT__U8 = 1, XT__I8, XT__U16, XT__I16, XT__U32, XT__I32, XT__F32, XT__F64 } xt__elem;

size_t xt__elem_size(xt__elem e);
const char *xt__elem_name(xt__elem e);

/* A decoded grid: dims, the voxel-centre index -> patient LPS mm map, and the data as stored,
 * with an optional linear scaling value = slope * stored + inter (NIfTI scl_*). */
typedef struct xt__grid {
  int64_t dim[3];
  xt_affine index_to_lps;
  xt__elem elem;
  const void *data;
  double slope, inter;
} xt__grid;

/* Checks dims against XT_VOLUME_MAX_DIM / XT_VOLUME_MAX_VOXELS; on success *bytes = the data
 * size for elements of elem_size bytes. Message names the file. */
int xt__check_dims(const char *path, const int64_t dim[3], size_t elem_size, size_t *bytes, xt_msg *msg);

/* deflate cannot expand more than 1032:1 (zlib technical notes), so a compressed stream of
 * `compressed` bytes cannot hold more than this many bytes. */
uint64_t xt__inflate_bound(uint64_t compressed);

/* The size of a regular file; errors for a missing file, a directory or anything not regular.
 * owner: NULL for the file being loaded, else the header file that names path as its data. */
int xt__file_size(const char *path, const char *owner, uint64_t *size, xt_msg *msg);

/* xt__file_size for a file under opt's confinement (opt->roots, see xt_load.h): path is resolved
 * (xt__path_resolve) and must lie under a root; it must be a regular file, checked with stat and
 * again on a descriptor opened with O_NONBLOCK | O_NOFOLLOW, so that a FIFO or device never
 * blocks the caller. Every file a reader opens by a name from a client or a header goes through
 * this first. */
int xt__file_check(const char *path, const char *owner, const xt_load_options *opt, uint64_t *size, xt_msg *msg);
/* Resolves path under opt->roots (which must be set) without looking at any name outside them
 * (xt_load.c, "Confinement"): 0 and *real (malloc'd, no links left, under a root), else XT_EPERM
 * (outside: the same message whatever is there), XT_ENOTFOUND (missing inside) or XT_EIO. */
int xt__path_resolve(const char *path, const char *owner, const xt_load_options *opt, char **real, xt_msg *msg);
/* Only the confinement part of xt__file_check (for folders): 0 when opt does not confine. */
int xt__path_confined(const char *path, const char *owner, const xt_load_options *opt, xt_msg *msg);
/* The confinement of a model source as a client names it: "@LIST" and "PATH#SERIES" included
 * (the '@' and a '#SERIES' the name does not have are not part of it). 0 when opt does not
 * confine. Called before anything else looks at the path. */
int xt__source_confined(const char *path, const xt_load_options *opt, xt_msg *msg);

/* Converts g per opt into a new volume (the back end of every reader); validates it. */
int xt__finish(const char *path, const xt__grid *g, const xt_load_options *opt, xt_volume **out, xt_msg *msg);

/* The readers: parse, check, decode, hand a grid to xt__finish. */
int xt__load_nifti(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);
int xt__load_nrrd(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);
int xt__load_mha(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);
int xt__load_dicom(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg);

#endif /* XT_LOAD_INTERNAL_H */
