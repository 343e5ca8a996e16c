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
/* A rolled loop: unrolled where the slab bounds are indexed at run time (the voxel kind's
 * models), the compiler hoists all 26 into registers and spills. */
#define XT_HULL_ROLLED _Pragma("unroll 1")
#define XT_HULL_UNROLLED _Pragma("unroll")
#else
#define XT_HULL_ROLLED
#define XT_HULL_UNROLLED
#endif

/* One slab, bounds [slo, shi], of direction n where the ray is n.o + s n.q (a = n.o, b = n.q):
 * [*c0, *c1] narrowed, *miss set when the ray runs along the slab outside it. */
static XT_INLINE XT_HOSTDEV void xt_hull_slab(float a, float b, float slo, float shi, float *c0, float *c1, int *miss) {
  const float lo = slo - a, hi = shi - a;
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
  *miss |= along && (lo > 0.f || hi < 0.f);
  *c0 = along ? *c0 : fmaxf(*c0, fminf(t0, t1));
  *c1 = along ? *c1 : fminf(*c1, fmaxf(t0, t1));
}

/* n x for a direction component n known at compile time: -0 for n = 0, which the compiler drops
 * from a sum (x + -0 = x for every x; x * 0 is not 0 for x = inf or nan, so 0 x stays a multiply). */
#define XT_HULL_TERM(n, x) ((n) == 0.f ? -0.f : (n) * (x))

/* Narrows [*h0, *h1] to the part of the ray of + s qf (cell space, float) inside the slabs lo, hi
 * (xt_hull_end's). Returns 0 when the ray misses the hull (then [*h0, *h1] is meaningless).
 * unrolled (a constant at each call): 1 where lo and hi are at fixed addresses of a kernel's
 * parameters (the NanoVDB brick march), so that the directions fold into the arithmetic (their
 * zeros and ones: a few adds per slab, no loads) and the bounds are read as constant operands;
 * 0 where they are indexed at run time (the voxel kind: see XT_HULL_ROLLED). */
static XT_INLINE XT_HOSTDEV int xt_hull_clip_f32(const float of[3], const float qf[3], const float *lo,
                                                 const float *hi, float *h0, float *h1, const int unrolled) {
  static const float dirs[XT_HULL_DIRS][3] = XT_HULL_DIR_LIST;
  float c0 = *h0, c1 = *h1;
  int miss = 0;
  if (unrolled) {
    XT_HULL_UNROLLED
    for (int j = 0; j < XT_HULL_DIRS; j++) {
      const float *n = dirs[j];
      const float a = XT_HULL_TERM(n[0], of[0]) + XT_HULL_TERM(n[1], of[1]) + XT_HULL_TERM(n[2], of[2]);
      const float b = XT_HULL_TERM(n[0], qf[0]) + XT_HULL_TERM(n[1], qf[1]) + XT_HULL_TERM(n[2], qf[2]);
      xt_hull_slab(a, b, lo[j], hi[j], &c0, &c1, &miss);
    }
  } else {
#if defined(__CUDA_ARCH__)
#define XT_HULL_D xt_hull_dirs_dev /* constant memory: uniform loads of a rolled loop */
#else
#define XT_HULL_D dirs
#endif
    XT_HULL_ROLLED
    for (int j = 0; j < XT_HULL_DIRS; j++) {
      const float nx = XT_HULL_D[j][0], ny = XT_HULL_D[j][1], nz = XT_HULL_D[j][2];
      xt_hull_slab(nx * of[0] + ny * of[1] + nz * of[2], nx * qf[0] + ny * qf[1] + nz * qf[2], lo[j], hi[j], &c0, &c1,
                   &miss);
    }
#undef XT_HULL_D
  }
#undef XT_HULL_TERM
  *h0 = c0;
  *h1 = c1;
  return !miss && c1 > c0;
}

#endif /* XT_HULL_H */
