/* A NanoVDB grid as a brick pool (issue 29): the traversal that costs a dense step per voxel.
 *
 * Why: the tree kernel (proj_nvdb.cu, "tree") pays, per leaf voxel, PNanoVDB's value-mask word and
 * byte-addressed value read (two dependent loads plus address arithmetic), and per region entered a
 * descent from the root (~6 dependent loads): ~9 dense steps each (docs/BENCHMARKS.md, "NanoVDB
 * sparse grids"). Here the grid is flattened once, on the host, into
 *   - a table of int32 over the coarse cells (8^3 voxel blocks, aligned in index space as NanoVDB's
 *     leaves are) of the domain: >= 0 the brick of that block, < 0 entry -1-e of the palette;
 *   - the pool: one 8^3 float brick per leaf, voxel (x,y,z) of the block at x + 8y + 64z, holding
 *     the value the renderers integrate (mu: inactive voxels already the background, label ids
 *     already through the material table, Fp types already decoded);
 *   - the palette: the constant value of every other block (tile value or background).
 * A step inside a brick is then one float load at a running offset; a constant block is crossed
 * in one step, by length (the coarse DDA: one 4-byte table load per block).
 *
 * The march is written once (xt_nvdb_bricks_march.inc) and compiled twice: in float, exactly as
 * the CUDA kernel runs it (the kernel calls the same function), and in double, whose result
 * equals the exact CPU reference (proj_cpu_nvdb.c) to 1e-12 relative (test_nvdb bricks_*). The
 * material channels are not marched here (they keep the tree kernel). The same march in other loop
 * shapes (XT_NVDB_TRAVERSAL=bricks2 .. bricks8, to be measured against it) is in
 * xt_nvdb_bricks_flat.inc, compiled and tested the same way.
 *
 * Bytes: table 4 per 512 voxels of the domain (and the level array 1), pool 2,048 per leaf (a
 * Float leaf is 2,144, an Fp8 leaf 608), palette 4 per constant block at most. */
#ifndef XT_NVDB_BRICKS_H
#define XT_NVDB_BRICKS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "xt_hull.h"
#include "xt_nvdb.h"
#include "xt_raycast.h"
#include "xt_vec.h"

/* What the march reads (host or device pointers). */
typedef struct xt_nvdb_bricks {
  const int32_t *table;  /* nc[0] nc[1] nc[2] entries, x fastest */
  const float *pool;     /* 512 floats per brick */
  const float *palette;  /* constant blocks' values */
  const uint8_t *level;  /* per table entry (bricks6): a constant block's aligned region of its value,
                          * 2^level blocks a side (cells c0 + multiples of it), inside the table */
  int lo[3], n[3];       /* the domain: first voxel (index space) and voxels per axis */
  int c0[3], nc[3];      /* the coarse cells: first (floor(lo / 8)) and count per axis */
  /* The content box (bricks5): cells [clo, chi) of the domain (block-aligned, one cell wider where
   * the domain allows) outside which every block is constant at bgmu; content 0: none at all. */
  int clo[3], chi[3], content;
  float bgmu;
  /* The content hull (bricks7, xt_hull.h): the 26-DOP, in the domain's cell space, around every
   * domain voxel whose mu differs from bgmu (bit for bit); hull 0: no such voxel (all bgmu). */
  int hull;
  float hlo[XT_HULL_DIRS], hhi[XT_HULL_DIRS];
} xt_nvdb_bricks;

/* The host's copy: the arrays the pointers above point at, owned. */
typedef struct xt_nvdb_bricks_host {
  xt_nvdb_bricks b;
  int32_t *table;
  float *pool, *palette;
  uint8_t *level;
  size_t ntable, nbricks, npalette;
} xt_nvdb_bricks_host;

#ifdef __cplusplus
extern "C" {
#endif
/* Flattens grid g (mu values: labels through its table). XT_ENOMEM; XT_ETOOLARGE past 2^31 - 1
 * bricks or table entries. */
int xt_nvdb_bricks_build(const xt_nvdb *g, xt_nvdb_bricks_host *out, xt_msg *msg);
void xt_nvdb_bricks_free(xt_nvdb_bricks_host *h);
/* Device bytes of the four arrays (table, pool, palette, and the level array bricks6 reads). */
uint64_t xt_nvdb_bricks_bytes(const xt_nvdb_bricks_host *h);
/* The exact CPU reference's walk (proj_cpu_nvdb.c; ch NULL: mu into out[0]), for tests. */
struct xt_voxel_chan;
void xt__nvdb_traverse(const xt_nvdb *g, const double o[3], const double q[3], const int n[3], double s0, double s1,
                       const struct xt_voxel_chan *ch, double *out);
#ifdef __cplusplus
}
#endif

/* floor(x / 8) for any int (a right shift of a negative int is implementation-defined in C). */
static XT_INLINE XT_HOSTDEV int xt_nvdb_coarse(int x) { return x >= 0 ? x / 8 : -((7 - x) / 8); }

/* The part [*c0, *c1] of [s0, s1] of the ray o + s q inside the pool's content: its hull (hull != 0:
 * bricks7, bricks8; in float, conservatively, xt_hull.h) or its box (bricks5, bricks6). Outside it
 * every block is the background (bgmu). Returns 0 when none of [s0, s1] is inside. */
static XT_INLINE XT_HOSTDEV int xt_nvdb_bricks_content(const xt_nvdb_bricks *b, const double o[3], const double q[3],
                                                       double s0, double s1, int hull, double *c0, double *c1) {
  *c0 = 0;
  *c1 = 0;
  if (hull) { /* unbounded but for the hull */
    const float of[3] = {(float)o[0], (float)o[1], (float)o[2]}, qf[3] = {(float)q[0], (float)q[1], (float)q[2]};
    float h0 = -INFINITY, h1 = INFINITY;
    if (b->hull && xt_hull_clip_f32(of, qf, b->hlo, b->hhi, &h0, &h1, 1)) {
      *c0 = (double)h0 > s0 ? (double)h0 : s0;
      *c1 = (double)h1 < s1 ? (double)h1 : s1;
    }
  } else {
    const double oc[3] = {o[0] - b->clo[0], o[1] - b->clo[1], o[2] - b->clo[2]};
    const int nb[3] = {b->chi[0] - b->clo[0], b->chi[1] - b->clo[1], b->chi[2] - b->clo[2]};
    if (b->content && xt_clip_box_f64(oc, q, nb, s1, c0, c1)) {
      *c0 = *c0 > s0 ? *c0 : s0;
      *c1 = *c1 < s1 ? *c1 : s1;
    }
  }
  return *c1 > *c0;
}

/* Double arithmetic of the set-up, never contracted into FMAs, so the device's set-up is the
 * host's to the bit (as in proj_nvdb.cu). */
#if defined(__CUDA_ARCH__)
#define XT_BR_DMUL(a, b) __dmul_rn((a), (b))
#define XT_BR_DADD(a, b) __dadd_rn((a), (b))
#define XT_BR_LDG(p) __ldg(p) /* read-only for the whole launch */
#define XT_BR_UNROLL _Pragma("unroll")
#else
#define XT_BR_DMUL(a, b) ((a) * (b))
#define XT_BR_DADD(a, b) ((a) + (b))
#define XT_BR_LDG(p) (*(p))
#define XT_BR_UNROLL
#endif

/* xt_nvdb_bricks_ray_f32 (the kernel's) and xt_nvdb_bricks_ray_f64: the integral of mu over
 * s in [s0, s1] of the ray o + s q in the domain's cell space (cell 0 = voxel lo; [s0, s1] inside
 * the domain box, as xt_clip_box_f64 gives it); *steps (may be NULL) the cells and blocks crossed.
 * xt_nvdb_bricks2_ray_* and xt_nvdb_bricks3_ray_* (mode 0: bricks3, XT_BR_NEST: bricks4): the same
 * march in other loop shapes (xt_nvdb_bricks_flat.inc), the same cells, blocks and segments; mode
 * XT_BR_NEST | XT_BR_CLIP (bricks5) also clips the ray to the content box first (fewer blocks), and
 * with XT_BR_REGION (bricks6) crosses whole regions of one value; XT_BR_HULL with XT_BR_CLIP
 * (bricks7) clips to the content hull instead of the box and indexes the table in 32 bits.
 * xt_nvdb_bricks3_ray_*'s qinv: NULL, or 1.0 / q[a] per axis with q[a] != 0 as xt_clip_box_inv_f64
 * computed it for [s0, s1] (the set-up then divides no more: bricks7).
 * xt_nvdb_bricks8_ray_* (bricks8, qinv as bricks7's): bricks7's clip, then the dense kernel's march
 * (proj_voxel.cu) through the pool: the exact number of plane crossings settled at set-up, one cell
 * a step in bricks and constant blocks alike (*steps: the cells); the same segments. */
#define XT_BR_NEST 1
#define XT_BR_CLIP 2
#define XT_BR_REGION 4 /* bricks6: whole regions of one value (xt_nvdb_bricks.level) in one step */
#define XT_BR_HULL 8   /* bricks7, with XT_BR_CLIP: the content hull (xt_nvdb_bricks.hlo, hhi), not the box */
#define XT_BR_T float
#define XT_BR_FMA fmaf
#define XT_BR_MIN fminf
#define XT_BR_MAX fmaxf
#define XT_BR_NAME xt_nvdb_bricks_ray_f32
#include "xt_nvdb_bricks_march.inc"
#define XT_BR_T float
#define XT_BR_FMA fmaf
#define XT_BR_MIN fminf
#define XT_BR_MAX fmaxf
#define XT_BR_NAME2 xt_nvdb_bricks2_ray_f32
#define XT_BR_NAME3 xt_nvdb_bricks3_ray_f32
#define XT_BR_NAME8 xt_nvdb_bricks8_ray_f32
#include "xt_nvdb_bricks_flat.inc"
#define XT_BR_T double
#define XT_BR_FMA fma
#define XT_BR_MIN fmin
#define XT_BR_MAX fmax
#define XT_BR_NAME xt_nvdb_bricks_ray_f64
#include "xt_nvdb_bricks_march.inc"
#define XT_BR_T double
#define XT_BR_FMA fma
#define XT_BR_MIN fmin
#define XT_BR_MAX fmax
#define XT_BR_NAME2 xt_nvdb_bricks2_ray_f64
#define XT_BR_NAME3 xt_nvdb_bricks3_ray_f64
#define XT_BR_NAME8 xt_nvdb_bricks8_ray_f64
#include "xt_nvdb_bricks_flat.inc"

#endif /* XT_NVDB_BRICKS_H */
