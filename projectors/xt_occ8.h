/* The content of a grid's 8^3 blocks, and a ray's part that can meet it (issue 29: "the tree's upper
 * levels skip empty space, so a volume with much air renders faster than its dense copy").
 *
 * The NanoVDB kind's dense working set (proj_nvdb.cu) is marched by the voxel kind's kernel, whose
 * only skipping is the content hull: a convex 26-DOP. Between the hull and the patient lies air the
 * march steps through voxel by voxel (on the real head CT, 10-11 % of the hull's cells along the
 * bench's rays). The grid knows which of its 8^3 blocks (NanoVDB's leaves and tiles, aligned in index
 * space) hold anything but the background: a ray's interval is trimmed, once per ray, to the first
 * and last such block it crosses, by a walk over the blocks from each end, and what the trim removes is background, integrated by length as the hull's outside is.
 *
 * Exactness: the walk steps from plane to plane of the blocks, each plane's parameter computed from
 * its integer count (never accumulated) in float, as the voxel march's own planes: a block is missed
 * only where the ray crosses it for less than that rounding (~1e-4 mm), which decides which voxel
 * such a sliver goes to in the march too; each end is moved back by that rounding, so the trim cuts
 * background only. test_nvdb's brick tests hold what the trim removes to background, against the
 * reference, on every grid they build (and a walk that skips a block fails them). */
#ifndef XT_OCC8_H
#define XT_OCC8_H

#include <math.h>
#include <stdint.h>

#include "xt_vec.h"

typedef struct xt_occ8 {
  const uint8_t *occ; /* nc[0] nc[1] nc[2] (< 2^31) entries, x fastest: 1 where a voxel of the block differs from
                       * the background */
  int lo[3];          /* the domain's first voxel: cell c of the ray's space is voxel c + lo */
  int c0[3], nc[3];   /* the blocks: the first (floor(lo / 8)) and the count per axis */
} xt_occ8;

#if defined(__CUDA_ARCH__)
#define XT_OCC8_UNROLL _Pragma("unroll") /* per-axis state indexed by constants: registers, no stack */
#else
#define XT_OCC8_UNROLL
#endif

#if defined(__CUDA_ARCH__)
#define XT_OCC8_RCP(x) __drcp_rn(x) /* correctly rounded, as 1.0 / x, without the division's slow path */
#else
#define XT_OCC8_RCP(x) (1.0 / (x))
#endif

/* From s_from towards s_to (> s_from) along o + s q: the parameter at which the ray enters the first
 * block holding content (s_from itself when it starts in one), or s_to when none before it; never
 * later than that entry (a float walk, then backed off by its rounding). As the voxel march's set-up:
 * the start block and each axis's first plane of blocks in double (a reciprocal, not a division: the
 * first version's six FP64 divisions a ray cost more than the 10 % of steps the trim saves on the
 * real head CT, 1.02x the dense time on an H100), relative to the start; then every plane's
 * parameter from its integer count in float (t_a(k) = t0_a + k dt_a, one FMA, never accumulated),
 * so that the walk's state is a few registers beside the set-up's. */
static XT_INLINE XT_HOSTDEV double xt_occ8_walk(const xt_occ8 *b, const double o[3], const double q[3], double s_from,
                                                double s_to) {
  int kb[3];
  float t0[3], dt[3], kc[3];
  XT_OCC8_UNROLL
  for (int a = 0; a < 3; a++) {
    const double p = o[a] + s_from * q[a] + (double)b->lo[a];
    kb[a] = (int)floor(p * 0.125);
    /* the next plane of blocks along the ray: 8 (kb + 1) going up, 8 kb going down */
    if (q[a] != 0.0) {
      const double inv = XT_OCC8_RCP(q[a]);
      t0[a] = (float)(((double)(8 * (kb[a] + (q[a] > 0.0)) - b->lo[a]) - o[a]) * inv - s_from);
      dt[a] = (float)(8.0 * fabs(inv));
    } else {
      t0[a] = INFINITY;
      dt[a] = 0.f;
    }
    kc[a] = 0.f;
  }
  const float end = (float)(s_to - s_from);
  float t = 0.f;
  for (int guard = b->nc[0] + b->nc[1] + b->nc[2] + 3; guard > 0; guard--) {
    const int cx = kb[0] - b->c0[0], cy = kb[1] - b->c0[1], cz = kb[2] - b->c0[2];
    if (cx >= 0 && cx < b->nc[0] && cy >= 0 && cy < b->nc[1] && cz >= 0 && cz < b->nc[2] &&
        b->occ[cx + b->nc[0] * (cy + b->nc[1] * cz)])
      break;
    /* each axis's next plane from its count (an axis never crossed: t0 infinite, dt 0) */
    const float tx = fmaf(kc[0], dt[0], t0[0]), ty = fmaf(kc[1], dt[1], t0[1]), tz = fmaf(kc[2], dt[2], t0[2]);
    const int a = (tx <= ty && tx <= tz) ? 0 : (ty <= tz ? 1 : 2);
    const float tm = fminf(fminf(tx, ty), tz);
    if (!(tm < end)) return s_to;
    t = tm > t ? tm : t;
    XT_OCC8_UNROLL
    for (int c = 0; c < 3; c++)
      if (c == a) {
        kb[c] += q[c] > 0.0 ? 1 : -1;
        kc[c] += 1.f;
      }
  }
  /* back by the float parameters' rounding (a few ulps of the largest), so that no content is cut */
  const double back = 8.0 * 1.2e-7 * ((double)fabsf(t) + (double)fabsf(end)) + 1e-9;
  const double s = s_from + (double)t - back;
  return s > s_from ? s : s_from;
}

/* [*s0, *s1] of the ray o + s q trimmed to the blocks holding content; 0 when it crosses none (the
 * whole interval is background). */
static XT_INLINE XT_HOSTDEV int xt_occ8_trim(const xt_occ8 *b, const double o[3], const double q[3], double *s0,
                                             double *s1) {
  const double a0 = xt_occ8_walk(b, o, q, *s0, *s1);
  if (!(a0 < *s1)) return 0;
  const double r[3] = {-q[0], -q[1], -q[2]}; /* backwards: the parameter -s */
  const double a1 = -xt_occ8_walk(b, o, r, -*s1, -a0);
  *s0 = a0;
  *s1 = a1 > a0 ? a1 : a0;
  return 1;
}

#endif /* XT_OCC8_H */
