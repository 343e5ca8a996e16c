/* Making NanoVDB grids from voxel volumes: the C face of models/xt_nvdb_build.cpp, the one C++
 * file (NanoVDB's GridBuilder is a C++ template library). Plain C: no exception crosses it.
 *
 * Voxel (i,j,k) of the volume becomes index (i,j,k) of the grid and the grid's map is the volume's
 * index_to_model, so the grid renders in the same place as the volume. Voxels whose value lies
 * within `tolerance` of the background are stored as the background and left inactive (that is
 * what makes the grid sparse); the grid's xtwin record (xt_nvdb.h) keeps the volume's box as the
 * domain and, for labels, the material table. */
#ifndef XT_NVDB_BUILD_H
#define XT_NVDB_BUILD_H

#include <stdint.h>
#include <stdio.h>

#include "xt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Value types of the grid; the order is that of XT_NVDB_QUANT_NAMES. */
typedef enum xt_nvdb_quant {
  XT_NVDB_Q_FLOAT = 0, /* 32-bit float, exact */
  XT_NVDB_Q_FP16 = 1,  /* 16-bit per-leaf quantisation (exact for labels) */
  XT_NVDB_Q_FP8 = 2,   /* 8-bit per-leaf quantisation (exact for labels 0..255: rounded on read) */
  XT_NVDB_Q_FP4 = 3,   /* 4-bit (mu only) */
  XT_NVDB_Q_FPN = 4,   /* variable bit width per leaf, error bounded by fpn_tolerance (mu only) */
  XT_NVDB_Q_INT16 = 5, /* 16-bit integers (labels only) */
  XT_NVDB_Q_INDEX = 6, /* 32-bit float, exact, stored for active voxels only: a sparse IndexGrid and a
                          float channel (xt_nvdb.h XT_NVDB_INDEX) */
  XT_NVDB_Q_AUTO = 7   /* mu: index where it is smaller than float (a grid with any leaf not fully
                          active), else float; both exact */
} xt_nvdb_quant;
#define XT_NVDB_QUANT_NAMES "float|fp16|fp8|fp4|fpn|int16|index|auto"

typedef struct xt_nvdb_build_options {
  int quant;            /* xt_nvdb_quant */
  double background;    /* mu (1/mm) for dense volumes; a label id for label volumes */
  double tolerance;     /* dense: |mu - background| <= tolerance stays inactive (0: only equal values) */
  double fpn_tolerance; /* FpN: largest absolute error of a quantised value (1/mm) */
  const char *name;     /* the grid's name (NULL: "density" for mu, "labels" for labels) */
} xt_nvdb_build_options;

/* Builds the grid into a new 32-byte aligned blob (*words, *bytes; free() it). Labels volumes
 * need float, fp16, fp8 or int16; dense ones anything but int16. msg: one line. */
int xt_nvdb_build(const xt_volume *v, const xt_nvdb_build_options *o, uint32_t **words, uint64_t *bytes, xt_msg *msg);

/* Writes the blob as a one-grid .nvdb file (NanoVDB's io::writeGrid: codec NONE, or ZIP when
 * zip != 0) to f; callers wanting all-or-nothing files write a temporary and rename it. */
int xt_nvdb_write(FILE *f, const uint32_t *words, uint64_t bytes, int zip, xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_NVDB_BUILD_H */
