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
 * channels of its material by the mixture's xt_gmm_chan row (its label's, or row 0 without labels).
 * Contrast (a label flagged by xt_gmm_contrast_label): the region's optical depths are scaled by the
 * projector's iodine table (gmm_iodine). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "xt_gmm.h"
#include "xt_gmm_line.h"
#include "xt_proj_kind.h"

typedef struct gmm_state {
  xt_affine w2m; /* world -> model frame */
  double k2;     /* cut-off radius squared */
  const xt_iodine_tab *io; /* contrast (docs/contrast.md): the labels' optical-depth scales; NULL: none */
} gmm_state;

/* The channel map: the rows in use (the mixture's, with the projector's iodine: gmm_iodine), then
 * the mixture's own (xt_gmm_chan_build's), which the iodine's rows are made from each time. */
typedef struct gmm_chan {
  xt_gmm_chan cur; /* first: gmm_walk reads it as an xt_gmm_chan */
  xt_gmm_chan base;
} gmm_chan;

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
  st->io = NULL; /* the projector's iodine, if any, comes after (gmm_iodine) */
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
        double v = gaussian_on_ray(g, o, d, len, st->k2);
        if (st->io) v *= st->io->scale[g->label & 255u]; /* a region's iodine: 1 exactly elsewhere */
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
  gmm_chan *ch = malloc(sizeof *ch);
  if (!ch) return xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
  int rc = xt_gmm_chan_build(cs, m, &ch->base, msg);
  if (rc) {
    free(ch);
    return rc;
  }
  ch->cur = ch->base;
  *chan = ch;
  return 0;
}

/* Contrast in a labelled mixture: the frame's state scales each region's optical depth, and the
 * channel rows of the scaled depth are the mixture's divided by the scale, the iodine's its weight
 * (made from the base rows each time: the hook runs every channels frame). */
static void gmm_iodine(const xt_iodine_tab *io, void *state, void *chan) {
  if (state) ((gmm_state *)state)->io = io;
  gmm_chan *ch = chan;
  if (!ch || !ch->base.labels) return;
  for (int l = 0; l < 256; l++) {
    for (int c = 0; c < XT_MAX_CHANNELS; c++) ch->cur.w[l][c] = (float)(ch->base.w[l][c] / io->scale[l]);
    if (io->ci >= 0 && io->scale[l] != 1.0) ch->cur.w[l][io->ci] = io->wio[l];
  }
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
                                     .ray_channels = gmm_ray_channels,
                                     .iodine = gmm_iodine};
