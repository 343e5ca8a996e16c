/* Gaussian-mixture models on the CPU reference: the exact line integral of every Gaussian the
 * ray segment meets within the cut-off radius, in double (xt_gmm_line.h), summed in the
 * mixture's leaf order of its BVH (xt_gmm.h), so a frame does not depend on the thread count.
 *
 * The world ray a + s w (|w| = 1) is mapped into the model frame once per ray by the per-frame
 * world -> model map (table translation and placement included); the map is affine, so the model
 * ray a' + s w' keeps the world parameter s (|w'| = 1 only for rigid placements; the closed form
 * takes any |w'|), and the integral is over world millimetres as for voxels. The BVH's boxes
 * enclose the cut-off ellipsoids, so a segment that misses a box meets none of its Gaussians
 * within the cut-off: skipping it changes nothing.
 *
 * Material channels (xt_channels.h): each Gaussian's integral, an optical depth, goes to the
 * channels of its material by the mixture's xt_gmm_chan row (its label's, or row 0 without labels). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "xt_gmm.h"
#include "xt_gmm_line.h"
#include "xt_proj_kind.h"

typedef struct gmm_state {
  xt_affine w2m; /* world -> model frame */
  double k2;     /* cut-off radius squared */
} gmm_state;

_Static_assert(sizeof(gmm_state) <= XT_CPU_KIND_STATE, "gmm state fits the kind state");

static int gmm_check(const xt_model *m, xt_msg *msg) {
  const xt_gmm *g = xt_model_gmm(m);
  if (!g || !g->g || !g->nodes || g->count < 1)
    return xt_fail(msg, XT_EINVAL, "cpu projector: model %s: no finished Gaussian mixture", m->name);
  return 0;
}

static int gmm_frame(const xt_model *m, const xt_pose *pose, void *state) {
  gmm_state *st = state;
  xt_affine p2w = xt_geom_patient_to_world(pose);
  xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  const double k = xt_model_gmm(m)->cutoff;
  st->k2 = k * k;
  return xt_aff_invert(&m2w, &st->w2m);
}

/* The part of [0, len] of o + s d inside the box; 0 on a miss. */
static int hits_box(const xt_gmm_node *n, const double o[3], const double d[3], double len) {
  double lo = 0.0, hi = len;
  for (int a = 0; a < 3; a++) {
    if (d[a] == 0.0) {
      if (o[a] < n->lo[a] || o[a] > n->hi[a]) return 0;
      continue;
    }
    const double inv = 1.0 / d[a];
    double t0 = (n->lo[a] - o[a]) * inv, t1 = (n->hi[a] - o[a]) * inv;
    if (t0 > t1) {
      double t = t0;
      t0 = t1;
      t1 = t;
    }
    if (t0 > lo) lo = t0;
    if (t1 < hi) hi = t1;
    if (lo > hi) return 0;
  }
  return 1;
}

static double gaussian_on_ray(const xt_gaussian *g, const double o[3], const double d[3], double len, double k2) {
  double P[6];
  xt_gmm_precision(g, P);
  const double r[3] = {o[0] - g->centre[0], o[1] - g->centre[1], o[2] - g->centre[2]};
  return xt_gmm_segment(P, g->rho, r, d, len, k2);
}

/* The walk of the world ray through the mixture's BVH: without a channel map the line integral
 * into acc[0], with one each Gaussian's integral into its material's channels. */
static void gmm_walk(const xt_model *m, const void *state, const xt_gmm_chan *ch, xt_vec3 a, xt_vec3 w, double len,
                     double *acc) {
  const gmm_state *st = state;
  const xt_gmm *gm = xt_model_gmm(m);
  const xt_vec3 oa = xt_aff_apply(&st->w2m, a), wa = xt_aff_apply_dir(&st->w2m, w);
  const double o[3] = {oa.x, oa.y, oa.z}, d[3] = {wa.x, wa.y, wa.z};
  uint32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const xt_gmm_node *n = &gm->nodes[stack[--top]];
    if (!hits_box(n, o, d, len)) continue;
    if (n->count) {
      for (uint32_t i = 0; i < n->count; i++) {
        const xt_gaussian *g = &gm->g[gm->index[n->first + i]];
        const double v = gaussian_on_ray(g, o, d, len, st->k2);
        if (!ch) {
          acc[0] += v;
          continue;
        }
        const float *wr = ch->w[ch->labels ? (g->label & 255u) : 0];
        for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += v * (double)wr[c];
      }
    } else if (top + 2 <= (int)(sizeof stack / sizeof stack[0])) {
      /* right pushed first: the left subtree is summed first, a fixed order */
      stack[top++] = n->first + 1;
      stack[top++] = n->first;
    }
  }
}

static double gmm_ray(const xt_model *m, const void *state, xt_vec3 a, xt_vec3 w, double len) {
  double acc = 0.0;
  gmm_walk(m, state, NULL, a, w, len, &acc);
  return acc;
}

static int gmm_chan_build(const xt_model *m, const xt_chanset *cs, void **chan, xt_msg *msg) {
  xt_gmm_chan *ch = malloc(sizeof *ch);
  if (!ch) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
  int rc = xt_gmm_chan_build(cs, m, ch, msg);
  if (rc) {
    free(ch);
    return rc;
  }
  *chan = ch;
  return 0;
}

static void gmm_ray_channels(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w, double len,
                             double *acc) {
  gmm_walk(m, state, chan, a, w, len, acc);
}

const xt_cpu_kind xt_cpu_kind_gmm = {.kind = XT_MODEL_GMM,
                                     .check = gmm_check,
                                     .frame = gmm_frame,
                                     .ray = gmm_ray,
                                     .chan_build = gmm_chan_build,
                                     .ray_channels = gmm_ray_channels};
