/* The content hull: a 26-DOP (XT_HULL_DIRS slabs in cell space, both signs of 13 integer
 * directions) around every cell of a model that differs from its background, and the clip of a
 * ray against it. Outside the hull a ray meets background only, whose integral is exactly the
 * background's mu times the length, so a march need only cover the part inside.
 *
 * One copy for every projector that clips to it: the dense voxel kind (proj_voxel.cu, built from
 * the volume's rows) and the NanoVDB brick march bricks7 (xt_nvdb_bricks_flat.inc, built from the
 * brick pool by xt_nvdb_bricks.c). The build runs on the host; the clip is XT_HOSTDEV, so the CPU
 * tests run the kernels' own clip.
 *
 * Conservative by construction: the slabs are widened by XT_HULL_MARGIN cells per unit of the
 * direction's 1-norm when built, and the clip is evaluated in float with that margin far above
 * its rounding (|o| < 1e4 cells: n.o to ~1e-3 cells; the reciprocal to ~1e-7 relative), so no
 * non-background cell is ever clipped away; the extra margin is background, which a march
 * integrates exactly anyway. */
#ifndef XT_HULL_H
#define XT_HULL_H

#include "xt_cuda_config.h"
#include "xt_vec.h"

/* The 26-DOP's directions (cell space, integer components; both signs of each are one slab). */
#define XT_HULL_DIR_LIST                                                                              \
  {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}, {1, -1, 0}, {1, 0, 1}, {1, 0, -1}, {0, 1, 1}, {0, 1, -1}, \
   {1, 1, 1}, {1, 1, -1}, {1, -1, 1}, {-1, 1, 1}}

#if defined(__CUDACC__)
/* The directions for device code, read uniformly by every thread (one copy per translation unit). */
static __constant__ float xt_hull_dirs_dev[XT_HULL_DIRS][3] = XT_HULL_DIR_LIST;
#endif

/* The hull while it is built: per direction n the extremes of n.p over the cubes added (exact in
 * double: integer cell coordinates). */
typedef struct xt_hull_acc {
  double lo[XT_HULL_DIRS], hi[XT_HULL_DIRS];
  int any; /* a cell was added */
} xt_hull_acc;

#ifdef __cplusplus
extern "C" {
#endif
void xt_hull_begin(xt_hull_acc *h);
/* Adds the cells [x0, x1] x [y0, y1] x [z0, z1] (inclusive; cell (x, y, z) fills [x, x+1) x
 * [y, y+1) x [z, z+1) of cell space). A row of a volume is y0 = y1, z0 = z1. */
void xt_hull_add_cells(xt_hull_acc *h, int x0, int x1, int y0, int y1, int z0, int z1);
/* The slabs [lo[j], hi[j]] of direction j, widened by the margin, in float. Returns h->any (0: no
 * cell was added, the slabs are left untouched). */
int xt_hull_end(const xt_hull_acc *h, float lo[XT_HULL_DIRS], float hi[XT_HULL_DIRS]);
#ifdef __cplusplus
}
#endif

#if defined(__CUDA_ARCH__)
/* A rolled loop: unrolled, the compiler hoists all 26 slab bounds into registers and spills. */
#define XT_HULL_ROLLED _Pragma("unroll 1")
#else
#define XT_HULL_ROLLED
#endif

/* Narrows [*h0, *h1] to the part of the ray of + s qf (cell space, float) inside the slabs lo, hi
 * (xt_hull_end's). Returns 0 when the ray misses the hull (then [*h0, *h1] is meaningless). */
static XT_INLINE XT_HOSTDEV int xt_hull_clip_f32(const float of[3], const float qf[3], const float *lo_,
                                                 const float *hi_, float *h0, float *h1) {
#if !defined(__CUDA_ARCH__)
  static const float xt_hull_dirs_host[XT_HULL_DIRS][3] = XT_HULL_DIR_LIST;
#define XT_HULL_D xt_hull_dirs_host
#else
#define XT_HULL_D xt_hull_dirs_dev
#endif
  float c0 = *h0, c1 = *h1;
  int miss = 0;
  XT_HULL_ROLLED
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    const float nx = XT_HULL_D[j][0], ny = XT_HULL_D[j][1], nz = XT_HULL_D[j][2];
    const float a = nx * of[0] + ny * of[1] + nz * of[2], b = nx * qf[0] + ny * qf[1] + nz * qf[2];
    const float lo = lo_[j] - a, hi = hi_[j] - a;
    /* on the device an approximate reciprocal (one MUFU, no slow path): the margin covers its
     * error; b = 0 is a slab the ray runs along (its reciprocal, inf or nan, is then not used) */
    float ib;
#if defined(__CUDA_ARCH__)
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(ib) : "f"(b));
#else
    ib = 1.f / b;
#endif
    const float t0 = lo * ib, t1 = hi * ib;
    const int along = b == 0.f;
    miss |= along && (lo > 0.f || hi < 0.f);
    c0 = along ? c0 : fmaxf(c0, fminf(t0, t1));
    c1 = along ? c1 : fminf(c1, fmaxf(t0, t1));
  }
#undef XT_HULL_D
  *h0 = c0;
  *h1 = c1;
  return !miss && c1 > c0;
}

#endif /* XT_HULL_H */
