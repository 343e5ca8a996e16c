/* NanoVDB grids on the CPU reference: exact traversal of the tree in double precision, with the
 * dense reference's cell rule (proj_cpu_voxel.c): voxel ijk fills the half-open cell [i, i+1) x
 * [j, j+1) x [k, k+1) of index space shifted by +0.5, every segment end is a plane-crossing
 * parameter computed from the ray origin (never accumulated), ties go to x, then y.
 *
 * Inside a leaf the walk is the dense one, voxel by voxel. Where the tree holds a constant region
 * - a tile of a lower (8^3), upper (128^3) or root node (4096^3), or background - the ray crosses
 * the whole region in one segment: its exit is the nearest of the region's faces, computed with
 * the same plane formula, and its integral is the region's value times the length. The domain
 * (xt_nvdb.h) is the box the ray is clipped to: there, voxels that are not active count as the
 * background. So a grid converted from a volume renders like the volume (inactive voxels =
 * background) up to the rounding of the per-voxel sums (~1e-15 relative).
 *
 * Material channels (xt_channels.h) take the same walk: each segment's value goes to the channels
 * through the grid's xt_voxel_chan, exactly as a voxel of a label or dense volume would. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "xt_nvdb.h"
#include "xt_nvdb_access.h"
#include "xt_nvdb_bricks.h"
#include "xt_nvdb_raycast.h"
#include "xt_proj_kind.h"
#include "xt_raycast.h"

/* The parameter at which the ray o + s q leaves cell i of an axis (exit plane of direction step). */
static inline double plane_s(int plane, double o, double inv) { return ((double)plane - o) * inv; }

/* A segment of length seg through stored value v: mu x seg into acc[0], or the channels. */
static inline void add_segment(const xt_nvdb *g, const xt_voxel_chan *ch, double seg, float v, double *acc) {
  if (!ch) {
    acc[0] += seg * (g->labels ? (double)g->materials->mu[xt_nvdb_label(v)] : (double)v);
  } else if (ch->labels) {
    const float *w = ch->w[xt_nvdb_label(v)];
    for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += seg * (double)w[c];
  } else {
    const int k = xt_voxel_chan_class(ch, v);
    for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += seg * (double)v * (double)ch->cw[k][c];
  }
}

/* Integral of mu over s in [s0, s1] of the ray o + s q in the domain's cell space (domain voxel 0
 * at cell 0, n cells per axis) into acc[0], or with a channel map its channels into acc[].
 * Non-static for the tests that compare other walks with it (xt_nvdb_bricks.h). */
void xt__nvdb_traverse(const xt_nvdb *g, const double o[3], const double q[3], const int n[3], double s0, double s1,
                     const xt_voxel_chan *ch, double *out) {
  pnanovdb_buf_t buf = pnanovdb_make_buf(g->words, g->bytes / 4);
  pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
  pnanovdb_readaccessor_t acc;
  pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  int idx[3], step[3];
  double inv[3], snext[3];
  for (int a = 0; a < 3; a++) {
    int i = (int)floor(o[a] + s0 * q[a]);
    if (i < 0) i = 0; /* the entry point lies on the box surface; rounding may put it a hair outside */
    if (i > n[a] - 1) i = n[a] - 1;
    idx[a] = i;
    step[a] = q[a] > 0 ? 1 : (q[a] < 0 ? -1 : 0);
    inv[a] = step[a] ? 1.0 / q[a] : 0.0;
    snext[a] = step[a] ? plane_s(i + (step[a] > 0), o[a], inv[a]) : INFINITY;
  }
  double s = s0;
  for (;;) {
    const pnanovdb_coord_t ijk = {idx[0] + g->lo[0], idx[1] + g->lo[1], idx[2] + g->lo[2]};
    int dim;
    const float v = xt_nvdb_probe(g->grid_type, buf, &acc, &ijk, g->background, &dim);
    if (dim == 1) { /* a leaf voxel: one dense step */
      const int a = snext[0] <= snext[1] ? (snext[0] <= snext[2] ? 0 : 2) : (snext[1] <= snext[2] ? 1 : 2);
      const double se = snext[a] < s1 ? snext[a] : s1;
      if (se > s) {
        add_segment(g, ch, se - s, v, out);
        s = se;
      }
      if (s >= s1) break;
      idx[a] += step[a];
      if (idx[a] < 0 || idx[a] >= n[a]) break;
      snext[a] = plane_s(idx[a] + (step[a] > 0), o[a], inv[a]);
      continue;
    }
    /* A constant region of edge dim, aligned in index space: leave it through its nearest face. */
    int base[3];
    double sx[3];
    const int ic[3] = {ijk.x, ijk.y, ijk.z};
    for (int a = 0; a < 3; a++) {
      base[a] = (int)(((int64_t)ic[a] & ~(int64_t)(dim - 1)) - g->lo[a]);
      sx[a] = step[a] > 0 ? plane_s(base[a] + dim, o[a], inv[a])
                          : (step[a] < 0 ? plane_s(base[a], o[a], inv[a]) : INFINITY);
    }
    const int a = sx[0] <= sx[1] ? (sx[0] <= sx[2] ? 0 : 2) : (sx[1] <= sx[2] ? 1 : 2);
    const double se = sx[a] < s1 ? sx[a] : s1;
    if (se > s) {
      add_segment(g, ch, se - s, v, out);
      s = se;
    }
    if (s >= s1) break;
    idx[a] = step[a] > 0 ? base[a] + dim : base[a] - 1;
    if (idx[a] < 0 || idx[a] >= n[a]) break;
    for (int b = 0; b < 3; b++) {
      if (b != a && step[b]) { /* where the ray is at se, kept inside the region it has not left and
                                  never moved backwards (so every pass advances: the walk ends) */
        int i = (int)floor(o[b] + se * q[b]);
        if (step[b] > 0 ? i < idx[b] : i > idx[b]) i = idx[b];
        const int rlo = base[b] > 0 ? base[b] : 0, rhi = base[b] + dim - 1 < n[b] - 1 ? base[b] + dim - 1 : n[b] - 1;
        idx[b] = i < rlo ? rlo : (i > rhi ? rhi : i);
      }
      snext[b] = step[b] ? plane_s(idx[b] + (step[b] > 0), o[b], inv[b]) : INFINITY;
    }
  }
}

/* Per frame: the world -> cell map of the domain (cell 0 = domain voxel lo). */
typedef struct nvdb_state {
  xt_affine w2c;
} nvdb_state;

_Static_assert(sizeof(nvdb_state) <= XT_CPU_KIND_STATE, "nvdb state fits the kind state");

static int nvdb_check(const xt_model *m, xt_msg *msg) {
  const xt_nvdb *g = xt_model_nvdb(m);
  if (!g || !g->words || (g->labels && !g->materials))
    return xt_fail(msg, XT_EINVAL, "cpu projector: model %s: no NanoVDB grid", m->name);
  return 0;
}

static int nvdb_frame(const xt_model *m, const xt_pose *pose, void *state) {
  nvdb_state *st = state;
  return xt_nvdb_world_to_cell(m, pose, &st->w2c);
}

static void nvdb_walk(const xt_model *m, const void *state, const xt_voxel_chan *ch, xt_vec3 a, xt_vec3 w, double len,
                      double *acc) {
  const nvdb_state *st = state;
  const xt_nvdb *g = xt_model_nvdb(m);
  xt_vec3 oc = xt_aff_apply(&st->w2c, a), qc = xt_aff_apply_dir(&st->w2c, w);
  const double o[3] = {oc.x, oc.y, oc.z}, q[3] = {qc.x, qc.y, qc.z};
  const int n[3] = {g->hi[0] - g->lo[0] + 1, g->hi[1] - g->lo[1] + 1, g->hi[2] - g->lo[2] + 1};
  double s0, s1;
  if (!xt_clip_box_f64(o, q, n, len, &s0, &s1)) return;
  xt__nvdb_traverse(g, o, q, n, s0, s1, ch, acc);
}

static double nvdb_ray(const xt_model *m, const void *state, xt_vec3 a, xt_vec3 w, double len) {
  double acc = 0.0;
  nvdb_walk(m, state, NULL, a, w, len, &acc);
  return acc;
}

/* The voxel kinds' map (xt_voxel_chan_build takes grids too): the same malloc'd xt_voxel_chan. */
static int nvdb_chan_build(const xt_model *m, const xt_chanset *cs, void **chan, xt_msg *msg) {
  return xt_cpu_kind_dense.chan_build(m, cs, chan, msg);
}

static void nvdb_ray_channels(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w, double len,
                              double *acc) {
  nvdb_walk(m, state, chan, a, w, len, acc);
}

const xt_cpu_kind xt_cpu_kind_nvdb = {.kind = XT_MODEL_NVDB,
                                      .check = nvdb_check,
                                      .frame = nvdb_frame,
                                      .ray = nvdb_ray,
                                      .chan_build = nvdb_chan_build,
                                      .ray_channels = nvdb_ray_channels};
