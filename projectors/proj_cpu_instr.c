/* Instruments on the CPU reference: the closed-form integral of every tube segment the ray meets
 * (xt_tube.h), found through the instrument's boxes (xt_instr.h) and summed in segment order, so a
 * frame does not depend on the thread count.
 *
 * The world ray is mapped into the model frame by the per-frame world -> model map, keeping the
 * world parameter s, as for mixtures (proj_cpu_gmm.c). A frame takes the mean over
 * XT_INSTR_AREA_SAMPLES^2 rays spread over each pixel (instr_pixel): a wire thinner
 * than a pixel then adds its true projected mass to the pixels it crosses instead of all or
 * nothing at the pixel centre (docs/instruments.md, "Thinner than a pixel"). xt_ref_segment and
 * `ray` stay exact per ray.
 *
 * A projector renders its own copy of each instrument (own, reshape): a worker's shape is the one
 * its exposure latched, whatever other workers render meanwhile. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_instr.h"
#include "xt_proj_kind.h"

typedef struct instr_state {
  xt_affine w2m;
  double scale; /* a bound on how far w2m stretches a length (its linear part's Frobenius norm) */
  /* contrast in the lumen (docs/contrast.md): the projector's table with iodine (NULL: the
   * segments' own mu), and the medium's mu it displaces */
  const xt_iodine_tab *io;
  double mu_med;
} instr_state;

_Static_assert(sizeof(instr_state) <= XT_CPU_KIND_STATE, "instrument state fits the kind state");

/* g/cm^2 of each channel per mm of path through material l, the medium's row subtracted. */
typedef struct instr_chan {
  float w[XT_MAX_MATERIALS][XT_MAX_CHANNELS];
  int med; /* the medium's table id (its row is what every row had subtracted) */
} instr_chan;

/* The segment's line integral: its own mu, or with iodine the lumen's entry of the projector's table
 * less the medium's (as xt_instr_geom_build forms mu_lumen; every entry without iodine is the
 * model's own float, so a lumen without iodine gives xt_tube_integral's value bit for bit). */
static double seg_integral(const instr_state *st, const xt_tube_seg *t, const double o[3], const double d[3],
                           double len) {
  if (!st->io || !(t->r_in > 0.0)) return xt_tube_integral(t, o, d, len);
  double co, ci;
  xt_tube_chords(t, o, d, len, &co, &ci);
  return t->mu_wall * (co - ci) + ((double)st->io->mu[t->lumen] - st->mu_med) * ci;
}

static int instr_check(const xt_model *m, xt_msg *msg) {
  const xt_instr *I = xt_model_instr(m);
  if (!I || !I->geom.seg || !I->geom.box || I->geom.nseg < 1)
    return xt_fail(msg, XT_EINVAL, "cpu projector: model %s: no instrument shape", m->name);
  return 0;
}

static int instr_frame(const xt_model *m, const xt_pose *pose, void *state) {
  instr_state *st = state;
  xt_affine p2w = xt_geom_patient_to_world(pose);
  xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  if (!xt_aff_invert(&m2w, &st->w2m)) return 0;
  double f = 0;
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) f += st->w2m.m[r][c] * st->w2m.m[r][c];
  st->scale = sqrt(f);
  st->io = NULL; /* the projector's iodine, if any, comes after (instr_iodine) */
  const xt_instr *I = xt_model_instr(m);
  st->mu_med = (double)I->dev.mt.mu[I->dev.medium];
  return 1;
}

/* Contrast in the lumen: the frame's state reads the table (mono), the channel map gets each row's
 * iodine column, the medium's subtracted as chan_build subtracts it. */
static void instr_iodine(const xt_iodine_tab *io, void *state, void *chan) {
  if (state) ((instr_state *)state)->io = io;
  instr_chan *ch = chan;
  if (ch && io->ci >= 0)
    for (int l = 0; l < XT_MAX_MATERIALS; l++) ch->w[l][io->ci] = io->col[l] - io->col[ch->med];
}

/* Every segment the ray meets, in order: the line integral into acc[0] (ch NULL) or each chord's
 * areal densities into the channels. */
static void instr_walk(const xt_model *m, const void *state, const instr_chan *ch, xt_vec3 a, xt_vec3 w, double len,
                       double *acc) {
  const instr_state *st = state;
  const xt_instr_geom *g = &xt_model_instr(m)->geom;
  const xt_vec3 oa = xt_aff_apply(&st->w2m, a), wa = xt_aff_apply_dir(&st->w2m, w);
  const double o[3] = {oa.x, oa.y, oa.z}, d[3] = {wa.x, wa.y, wa.z};
  int sl[XT_INSTR_MAX_LEVELS * XT_INSTR_FANOUT + 1], si[XT_INSTR_MAX_LEVELS * XT_INSTR_FANOUT + 1], top = 0;
  sl[top] = g->nlevels - 1;
  si[top++] = 0;
  while (top > 0) {
    const int l = sl[--top], i = si[top];
    if (!xt_instr_box_hit(&g->box[g->level_off[l] + i], o, d, len, 0.0)) continue;
    if (l == 0) {
      for (int s = i * XT_INSTR_FANOUT; s < g->nseg && s < (i + 1) * XT_INSTR_FANOUT; s++) {
        const xt_tube_seg *t = &g->seg[s];
        if (!ch) {
          acc[0] += seg_integral(st, t, o, d, len);
          continue;
        }
        double co, ci;
        xt_tube_chords(t, o, d, len, &co, &ci);
        if (co <= 0.0) continue;
        const float *ww = ch->w[t->wall], *wl = ch->w[t->lumen];
        for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += (co - ci) * (double)ww[c] + ci * (double)wl[c];
      }
      continue;
    }
    const int below = g->level_n[l - 1];
    /* children pushed last-first: summed first-first, a fixed order */
    for (int c = (i + 1) * XT_INSTR_FANOUT - 1; c >= i * XT_INSTR_FANOUT; c--) {
      if (c >= below) continue;
      sl[top] = l - 1;
      si[top++] = c;
    }
  }
}

static double instr_ray(const xt_model *m, const void *state, xt_vec3 a, xt_vec3 w, double len) {
  double acc = 0.0;
  instr_walk(m, state, NULL, a, w, len, &acc);
  return acc;
}

static int instr_chan_build(const xt_model *m, const xt_chanset *cs, void **chan, xt_msg *msg) {
  xt_voxel_chan *vc = malloc(sizeof *vc);
  instr_chan *ch = malloc(sizeof *ch);
  int rc = vc && ch ? 0 : xt_fail(msg, XT_ENOMEM, "cpu projector: out of memory");
  if (!rc) rc = xt_voxel_chan_build(cs, m, vc, msg);
  if (!rc) {
    const int med = xt_model_instr(m)->dev.medium;
    for (int l = 0; l < XT_MAX_MATERIALS; l++)
      for (int c = 0; c < XT_MAX_CHANNELS; c++) ch->w[l][c] = vc->w[l][c] - vc->w[med][c];
    ch->med = med;
    *chan = ch;
    ch = NULL;
  }
  free(vc);
  free(ch);
  return rc;
}

static void instr_ray_channels(const xt_model *m, const void *state, const void *chan, xt_vec3 a, xt_vec3 w,
                               double len, double *acc) {
  instr_walk(m, state, chan, a, w, len, acc);
}

/* The segments whose boxes, grown by e, the ray meets, in segment order, into cand (at most cap);
 * -1 when there are more. */
static int candidates(const xt_instr_geom *g, const double o[3], const double d[3], double len, double e, int *cand,
                      int cap) {
  int sl[XT_INSTR_MAX_LEVELS * XT_INSTR_FANOUT + 1], si[XT_INSTR_MAX_LEVELS * XT_INSTR_FANOUT + 1], top = 0, n = 0;
  sl[top] = g->nlevels - 1;
  si[top++] = 0;
  while (top > 0) {
    const int l = sl[--top], i = si[top];
    if (!xt_instr_box_hit(&g->box[g->level_off[l] + i], o, d, len, e)) continue;
    if (l == 0) {
      for (int s = i * XT_INSTR_FANOUT; s < g->nseg && s < (i + 1) * XT_INSTR_FANOUT; s++) {
        xt_instr_box b;
        xt_instr_seg_box(&g->seg[s], &b);
        if (!xt_instr_box_hit(&b, o, d, len, e)) continue;
        if (n == cap) return -1;
        cand[n++] = s;
      }
      continue;
    }
    for (int c = (i + 1) * XT_INSTR_FANOUT - 1; c >= i * XT_INSTR_FANOUT; c--) {
      if (c >= g->level_n[l - 1]) continue;
      sl[top] = l - 1;
      si[top++] = c;
    }
  }
  return n;
}

#define INSTR_CAND_MAX 512

/* The pixel-area integral: the mean over the rays through the centres of the pixel's S x S
 * sub-pixels (S = XT_INSTR_AREA_SAMPLES). Every sub-ray stays within a pixel diagonal (in world
 * mm, within scale x that in model mm) of the centre ray between the source and the detector, so
 * the segments whose boxes the centre ray meets grown by that are all any sub-ray can meet: the
 * boxes are walked once per pixel, and each sub-ray tries those segments only. */
static void instr_pixel(const xt_model *m, const void *state, const void *chan, const xt_geometry *g, int col, int row,
                        double *acc) {
  const instr_state *st = state;
  const instr_chan *ch = chan;
  const xt_instr_geom *G = &xt_model_instr(m)->geom;
  const xt_vec3 oa = xt_aff_apply(&st->w2m, g->source);
  const double o[3] = {oa.x, oa.y, oa.z};
  xt_vec3 dc = xt_v3_sub(xt_geom_pixel_pos(g, col, row), g->source);
  const double lc = xt_v3_norm(dc);
  const xt_vec3 wc = xt_aff_apply_dir(&st->w2m, xt_v3_scale(dc, 1.0 / lc));
  const double dcm[3] = {wc.x, wc.y, wc.z};
  const double e = hypot(g->mode.pitch_u_mm, g->mode.pitch_v_mm) * st->scale;
  int cand[INSTR_CAND_MAX];
  const int nc = candidates(G, o, dcm, lc, e, cand, INSTR_CAND_MAX);
  if (nc == 0) return;
  const int S = XT_INSTR_AREA_SAMPLES;
  const double inv = 1.0 / ((double)S * S);
  double sum = 0.0, acc8[XT_MAX_CHANNELS] = {0};
  for (int sj = 0; sj < S; sj++)
    for (int si = 0; si < S; si++) {
      const xt_vec3 d = xt_v3_sub(xt_geom_pixel_pos(g, col + (si + 0.5) / S - 0.5, row + (sj + 0.5) / S - 0.5), g->source);
      const double len = xt_v3_norm(d);
      const xt_vec3 w = xt_v3_scale(d, 1.0 / len);
      if (nc < 0) { /* more candidates than room: the full walk */
        if (ch) instr_walk(m, state, ch, g->source, w, len, acc8);
        else instr_walk(m, state, NULL, g->source, w, len, &sum);
        continue;
      }
      const xt_vec3 wm = xt_aff_apply_dir(&st->w2m, w);
      const double dm[3] = {wm.x, wm.y, wm.z};
      for (int k = 0; k < nc; k++) {
        const xt_tube_seg *t = &G->seg[cand[k]];
        if (!ch) {
          sum += seg_integral(st, t, o, dm, len);
          continue;
        }
        double co, ci;
        xt_tube_chords(t, o, dm, len, &co, &ci);
        if (co <= 0.0) continue;
        const float *ww = ch->w[t->wall], *wl = ch->w[t->lumen];
        for (int c = 0; c < XT_MAX_CHANNELS; c++) acc8[c] += (co - ci) * (double)ww[c] + ci * (double)wl[c];
      }
    }
  if (ch)
    for (int c = 0; c < XT_MAX_CHANNELS; c++) acc[c] += acc8[c] * inv;
  else acc[0] += sum * inv;
}

static int instr_own(const xt_model *m, xt_model **copy, xt_msg *msg) {
  const xt_instr *I = xt_model_instr(m);
  int rc = xt_model_from_instr(&I->dev, I->points, I->npoints, m->name, copy, msg);
  if (!rc) (*copy)->placement = m->placement;
  return rc;
}

static int instr_reshape(xt_model *own, const double *pts, int n, xt_msg *msg) {
  return xt_instr_set_shape(own, pts, n, msg);
}

const xt_cpu_kind xt_cpu_kind_instr = {.kind = XT_MODEL_INSTR,
                                       .check = instr_check,
                                       .frame = instr_frame,
                                       .ray = instr_ray,
                                       .chan_build = instr_chan_build,
                                       .ray_channels = instr_ray_channels,
                                       .own = instr_own,
                                       .reshape = instr_reshape,
                                       .pixel = instr_pixel,
                                       .iodine = instr_iodine};
