/* NanoVDB sparse grids as a model kind (XT_MODEL_NVDB, xt_model_nvdb(m)): one grid of a .nvdb file (NanoVDB 32.4,
 * Debian's libnanovdb-dev), read from C through PNanoVDB.h, kept as the grid's own byte blob so
 * that the CPU reference and the CUDA kernels traverse exactly the same bytes.
 *
 * Meaning of the values. A grid holds either mu in 1/mm (Float, Fp4, Fp8, Fp16, FpN) or material
 * labels (ids into a material table): Int16 grids always, float grids when the file's xtwin
 * record says so (the converter's Fp8 label grids: ids are rounded on read, exact for 0..255 with
 * dithering off) or when the caller asks for labels. Inactive voxels and tiles count as the
 * background value; the background fills the grid's domain: the index box of the xtwin record
 * (the source volume's box, so that a converted volume renders like its dense original) or, for
 * files from other writers, the bounding box of the active values.
 *
 * The xtwin record: blind data named "xtwin" (GridBlindMetaData), written by `xtwin
 * nvdb-convert`; other writers' files have none. Little-endian byte layout:
 *   0  char magic[8] "XTWINVDB"       8  u32 version (1)     12 u32 flags (bit 0: labels)
 *   16 i32 domain_lo[3] (inclusive)   28 i32 domain_hi[3] (inclusive, index space)
 *   40 f64 energy_kev (of the table, or of a mu grid's values; 0 = unknown)
 *   48 u32 material count              52 u32 reserved (0)
 *   56 count x { f32 mu (1/mm); u32 reserved; f64 density (g/cm^3); char name[32] } (48 B each) */
#ifndef XT_NVDB_H
#define XT_NVDB_H

#include <stddef.h>
#include <stdint.h>

#include "xt_model.h"

/* NanoVDB grid types this kind renders (PNANOVDB_GRID_TYPE_* values). */
enum {
  XT_NVDB_FLOAT = 1,
  XT_NVDB_INT16 = 3,
  XT_NVDB_FP4 = 13,
  XT_NVDB_FP8 = 14,
  XT_NVDB_FP16 = 15,
  XT_NVDB_FPN = 16,
  XT_NVDB_INDEX = 19 /* the sparse index form: an IndexGrid (class IndexGrid) whose leaves index
                        their active voxels only, and a float channel (blind data 0, named
                        XT_NVDB_CHANNEL_NAME, class ChannelArray, type Float) with the values:
                        entry 0 the background, then active tiles, then active leaf voxels */
};
#define XT_NVDB_CHANNEL_NAME "xtwin.values"

/* Limits a grid must respect (else "absurd bounds"): domain edge in voxels, and |coordinate|. */
#define XT_NVDB_MAX_EXTENT 65536
#define XT_NVDB_MAX_COORD (1 << 24)
/* Largest grid blob accepted (bytes). */
#define XT_NVDB_MAX_BYTES ((uint64_t)16 << 30)

#define XT_NVDB_RECORD_NAME "xtwin"
#define XT_NVDB_RECORD_MAGIC "XTWINVDB"
#define XT_NVDB_RECORD_VERSION 1u
#define XT_NVDB_RECORD_HEADER 56
#define XT_NVDB_RECORD_MATERIAL 48

typedef struct xt_nvdb {
  uint32_t *words;          /* the grid blob, 32-byte aligned, `bytes` long (owned) */
  uint64_t bytes;
  uint32_t grid_type;       /* XT_NVDB_* */
  uint32_t grid_class;      /* nanovdb GridClass as stored */
  char grid_name[256];
  int labels;               /* 1: values are material ids into `materials` */
  xt_material_table *materials; /* owned; labels only */
  float background;         /* the stored background value (mu, or a label id) */
  double mu_background;     /* the background in 1/mm */
  int lo[3], hi[3];         /* the domain, inclusive index box */
  xt_affine index_to_model; /* voxel-centre index -> model mm (the grid's double map) */
  uint64_t active_voxels;   /* active voxels, leaves and tiles together */
  uint32_t nodes[4];        /* leaf, lower, upper node counts; root tiles */
  int has_record;           /* the file carried an xtwin record */
  double energy_kev;        /* mu grids: the energy the mu values are for (the record's; 0 when
                               unknown: material channels take XT_DEFAULT_ENERGY_KEV) */
} xt_nvdb;

typedef struct xt_nvdb_load_options {
  const char *grid; /* grid name; NULL or "" = the first grid of the file */
  int labels;       /* 1: read float grids as label ids (the xtwin record, if any, decides too) */
  double energy_kev;/* default material table's energy for label grids without a table; 0 = 60 */
} xt_nvdb_load_options;

/* Loads one grid of a .nvdb file (codecs NONE and ZIP). Checks the file and segment headers,
 * version 32.x, the grid's checksum (unless the file disabled it), the grid type, every node
 * offset against the blob (so traversal never leaves it), the map, the bounds, and every value
 * (finite mu; label ids inside the table). On failure *out is NULL and msg holds one line that
 * starts with the path. */
int xt_nvdb_load(const char *path, const xt_nvdb_load_options *opt, xt_nvdb **out, xt_msg *msg);

/* Wraps a grid blob already in memory (taken over: `words` must come from aligned_alloc(32, ..)
 * and is freed on failure too), with the same checks as xt_nvdb_load but no checksum. what names
 * the source in messages. */
int xt_nvdb_from_blob(uint32_t *words, uint64_t bytes, const xt_nvdb_load_options *opt, const char *what,
                      xt_nvdb **out, xt_msg *msg);

void xt_nvdb_free(xt_nvdb *g);

/* The model-mm bounds of the domain's voxel cubes. */
void xt_nvdb_bounds(const xt_nvdb *g, xt_vec3 *lo, xt_vec3 *hi);
/* Voxels of the domain box, and the active fraction of them. */
uint64_t xt_nvdb_domain_voxels(const xt_nvdb *g);
double xt_nvdb_active_fraction(const xt_nvdb *g);
/* mu (1/mm) of voxel ijk as the renderers see it: inactive = background, labels through the table,
 * outside the domain 0. */
double xt_nvdb_mu(const xt_nvdb *g, int i, int j, int k);
/* The domain as a dense float volume, x fastest (dst: xt_nvdb_domain_voxels floats): voxel
 * (i, j, k) of dst is xt_nvdb_mu(g, lo + (i, j, k)), as float. */
void xt_nvdb_decode(const xt_nvdb *g, float *dst);
/* "float", "fp8", ... */
const char *xt_nvdb_type_name(uint32_t grid_type);

/* The NVDB model kind (xt_model_kind.h): its table, and the grid of an NVDB model (else NULL). */
extern const struct xt_model_kind_ops xt_model_kind_nvdb;
#define XT_MODEL_NVDB (&xt_model_kind_nvdb)
static inline xt_nvdb *xt_model_nvdb(const xt_model *m) { return m->kind == XT_MODEL_NVDB ? (xt_nvdb *)m->payload : NULL; }

/* Wraps a grid (takes ownership) in a model with identity placement. */
int xt_model_from_nvdb(xt_nvdb *g, const char *name, xt_model **out, xt_msg *msg);

/* CRC-32 as NanoVDB's GridChecksum computes it (zlib's polynomial): the head part of a grid. */
uint32_t xt_nvdb_head_crc(const uint32_t *words, uint64_t bytes);

#endif /* XT_NVDB_H */
