/* Per-frame sampling: everything random about a frame (detector mode, pose, model perturbations)
 * drawn from a generator seeded by (spec seed, frame index) alone, so a frame is the same whoever
 * renders it and whenever. The seed formula and the draw order are documented in docs/dataset.md
 * (and re-derived by the Python test), so they are part of the format: change them only with the
 * format version.
 *
 * Arcs (rotational runs) draw per run instead: one patient, one table position and one detector
 * mode for all the views of a run, as on the real system. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xt_contrast.h"
#include "xt_dataset.h"

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define RUN_SALT 0xD1B54A32D192ED03ULL
#define PLANE_B_SALT 0x8CB92BA72F3D8DD7ULL /* plane B's generator: a stream apart from plane A's */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t xt_ds_frame_seed(uint64_t seed, long long index) { return mix64(seed + GOLDEN * ((uint64_t)index + 1)); }

static uint64_t run_seed(uint64_t seed, long long run) { return mix64((seed ^ RUN_SALT) + GOLDEN * ((uint64_t)run + 1)); }

/* xoshiro256** seeded through splitmix64 (its authors' recommendation). */
typedef struct rng {
  uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) {
    seed += GOLDEN;
    r->s[i] = mix64(seed);
  }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

/* One draw per call whatever the range, so the stream's layout never depends on the values. */
static double draw(rng *r, xt_ds_range q) {
  double u = (double)(rng_next(r) >> 11) * 0x1.0p-53;
  return q.lo == q.hi ? q.lo : q.lo + (q.hi - q.lo) * u;
}

static double wrap180(double a) {
  while (a > 180.0) a -= 360.0;
  while (a < -180.0) a += 360.0;
  return a;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

int xt_ds_sample_frame(const xt_ds_spec *s, const xt_affine *placement, const double (*center)[3], long long index,
                       xt_ds_frame *f, xt_msg *msg) {
  const xt_ds_pose_spec *p = &s->poses;
  memset(f, 0, sizeof *f);
  f->index = index;
  f->seed = xt_ds_frame_seed(s->seed, index);
  f->view = -1;
  f->run = -1;
  rng r;
  int arc = p->sampler == XT_DS_POSES_ARC;
  if (arc) {
    f->run = index / p->arc_views;
    f->view = (int)(index % p->arc_views);
    rng_seed(&r, run_seed(s->seed, f->run));
  } else {
    rng_seed(&r, f->seed);
  }

  /* 1. detector mode */
  xt_ds_range unit = {0, 1};
  double u = draw(&r, unit);
  f->mode = (int)(u * s->nmodes);
  if (f->mode >= s->nmodes) f->mode = s->nmodes - 1;
  const xt_detector_mode *mode = s->modes[f->mode];

  /* 2. pose: primary, secondary, detector rotation, SOD, SID, table x, y, z */
  xt_pose pose = xt_pose_default(mode);
  pose.primary_deg = draw(&r, p->primary_deg);
  pose.secondary_deg = draw(&r, p->secondary_deg);
  pose.detector_rot_deg = draw(&r, p->detector_rot_deg);
  double sod = draw(&r, p->sod_mm), sid = draw(&r, p->sid_mm);
  if (p->sod_set) pose.sod_mm = sod;
  if (p->sid_set) pose.sid_mm = sid;
  double t[3];
  for (int a = 0; a < 3; a++) t[a] = draw(&r, p->table_mm[a]);
  pose.table_mm = xt_v3(t[0], t[1], t[2]);
  if (p->sampler == XT_DS_POSES_VIEWS) {
    f->view = (int)(index % p->nviews);
    double jp = draw(&r, p->jitter_deg), js = draw(&r, p->jitter_deg);
    pose.primary_deg = wrap180(p->views[f->view].primary_deg + jp);
    pose.secondary_deg = clampd(p->views[f->view].secondary_deg + js, -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG);
  } else if (arc) {
    double step = p->arc_views > 1 ? p->arc_span_deg / (p->arc_views - 1) : 0.0;
    double a = p->arc_start_deg + step * f->view;
    if (p->arc_axis == 0) pose.primary_deg = a;
    else pose.secondary_deg = a;
  }

  /* 3. model perturbations: translate x, y, z then rotate x, y, z, for every model in order */
  for (int m = 0; m < s->nmodels; m++) {
    const xt_ds_model_spec *ms = &s->models[m];
    for (int a = 0; a < 3; a++) f->translate_mm[m][a] = draw(&r, ms->translate_mm[a]);
    for (int a = 0; a < 3; a++) f->rotate_deg[m][a] = draw(&r, ms->rotate_deg[a]);
  }
  for (int m = 0; m < s->nmodels; m++) {
    const int src = s->models[m].follows >= 0 ? s->models[m].follows : m;
    if (src != m) {
      memcpy(f->translate_mm[m], f->translate_mm[src], sizeof f->translate_mm[m]);
      memcpy(f->rotate_deg[m], f->rotate_deg[src], sizeof f->rotate_deg[m]);
    }
    /* E = T(c + t) R T(-c), R = Rz Ry Rx about the model's placed centre c. */
    const double k = XT_PI / 180.0;
    xt_affine rx = xt_aff_rot(0, f->rotate_deg[m][0] * k), ry = xt_aff_rot(1, f->rotate_deg[m][1] * k),
              rz = xt_aff_rot(2, f->rotate_deg[m][2] * k);
    xt_affine ryx = xt_aff_compose(&ry, &rx);
    xt_affine e = xt_aff_compose(&rz, &ryx);
    const double *c = center[src];
    for (int i = 0; i < 3; i++)
      e.t[i] = c[i] + f->translate_mm[m][i] - (e.m[i][0] * c[0] + e.m[i][1] * c[1] + e.m[i][2] * c[2]);
    f->perturb[m] = e;
    f->model_to_patient[m] = xt_aff_compose(&e, &placement[m]);
  }

  /* 4. the imaging chain: kV, then dose (after every other draw, so a chain never moves them) */
  const xt_ds_chain_spec *ch = &s->chain;
  double kv = draw(&r, ch->kv), dose = draw(&r, ch->dose_ngy);
  /* 5. contrast, last (a spec without it draws as before): the concentration, or the time after the
   * injection's start (arcs: per run, as every draw) */
  const xt_ds_contrast_spec *ct = &s->contrast;
  if (ct->present) {
    const double cu = draw(&r, ct->bolus ? ct->t_s : ct->mg_ml);
    f->contrast_t_s = ct->bolus ? cu : 0.0;
    for (int k = 0; k < ct->nregions; k++) {
      if (!ct->bolus) {
        f->iodine_mg_ml[k] = cu;
        continue;
      }
      /* an injection into the region at time 0, its bolus model the server's (xt_bolus_default) */
      const xt_injection in = {0, ct->rate_ml_s, ct->volume_ml, ct->agent_mg_ml, 0, INT64_MAX};
      const xt_bolus b = xt_bolus_default(ct->region[k]);
      f->iodine_mg_ml[k] = xt_region_conc(&in, 1, 0, &b, (int64_t)llround(cu * 1e9));
    }
  }
  int rc = xt_geom_compute(&pose, mode, &f->geom, msg);
  if (rc || !ch->present) return rc;
  f->chain = ch->base;
  f->chain.kv = kv;
  if (ch->dose_set) {
    double mas;
    if ((rc = xt_ds_dose_mas(&ch->base, kv, f->geom.pose.sid_mm, dose, &mas, msg))) return rc;
    if ((rc = xt_chain_param_set(&f->chain, "mas", mas, msg))) return rc;
    f->dose_ngy = dose;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Clinical view names                                                                         */
/* ------------------------------------------------------------------------------------------ */

int xt_ds_parse_view(const char *text, double *primary_deg, double *secondary_deg) {
  double pr = 0, se = 0;
  int have_p = 0, have_s = 0;
  const char *p = text;
  for (;;) {
    while (*p == ' ' || *p == '/' || *p == ',') p++;
    if (!*p) break;
    char word[16];
    int n = 0;
    while (isalpha((unsigned char)*p) && n < 15) word[n++] = (char)toupper((unsigned char)*p++);
    word[n] = 0;
    if (isalpha((unsigned char)*p)) return XT_EINVAL;
    if (!strcmp(word, "AP") || !strcmp(word, "PA") || !strcmp(word, "LAT") || !strcmp(word, "LLAT") ||
        !strcmp(word, "RLAT")) {
      if (have_p) return XT_EINVAL;
      have_p = 1;
      pr = !strcmp(word, "AP") ? 0.0 : !strcmp(word, "PA") ? 180.0 : !strcmp(word, "RLAT") ? -90.0 : 90.0;
      continue;
    }
    int kind = !strcmp(word, "LAO") ? 1 : !strcmp(word, "RAO") ? 2 : !strcmp(word, "CRAN") ? 3 : !strcmp(word, "CAUD") ? 4 : 0;
    if (!kind) return XT_EINVAL;
    while (*p == ' ') p++;
    char *end = NULL;
    double v = strtod(p, &end);
    if (end == p || !isfinite(v) || v < 0) return XT_EINVAL;
    p = end;
    if (kind <= 2) {
      if (have_p || v > XT_PRIMARY_MAX_DEG) return XT_EINVAL;
      have_p = 1;
      pr = kind == 1 ? v : -v;
    } else {
      if (have_s || v > XT_SECONDARY_MAX_DEG) return XT_EINVAL;
      have_s = 1;
      se = kind == 3 ? v : -v;
    }
  }
  if (!have_p && !have_s) return XT_EINVAL;
  *primary_deg = pr;
  *secondary_deg = se;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Plane B                                                                                    */
/* ------------------------------------------------------------------------------------------ */

uint64_t xt_ds_plane_b_noise_seed(uint64_t seed) {
  const uint64_t mask = (UINT64_C(1) << 53) - 1, a = seed & mask;
  uint64_t b = mix64(seed ^ PLANE_B_SALT) & mask;
  return b == a ? (b + 1) & mask : b; /* never plane A's, whatever the seed */
}

/* Plane B draws from a generator of its own (seeded from the seed plane A used: the frame's, or
 * the arc run's), so a spec's plane A frames are the same with or without plane B, and plane B's
 * fields can change without moving plane A. Draw order: mode, primary, secondary, detector
 * rotation, SOD, SID, then the chain's kV and dose: one draw each whether or not fixed. The
 * patient side (table, model perturbations) is plane A's: one patient on one table. */
int xt_ds_sample_plane_b(const xt_ds_spec *s, const xt_ds_frame *a, xt_ds_frame *b, xt_msg *msg) {
  const xt_ds_plane_b_spec *pb = &s->plane_b;
  if (!pb->present) return xt_fail(msg, XT_EINVAL, "the spec has no plane_b");
  *b = *a;
  b->plane = 1;
  const uint64_t base = s->poses.sampler == XT_DS_POSES_ARC ? run_seed(s->seed, a->run) : a->seed;
  b->seed = mix64(base ^ PLANE_B_SALT);
  rng r;
  rng_seed(&r, b->seed);
  xt_ds_range unit = {0, 1};
  int k = (int)(draw(&r, unit) * pb->nmodes);
  if (k >= pb->nmodes) k = pb->nmodes - 1;
  b->mode = pb->modes[k];
  const xt_detector_mode *mode = s->modes[b->mode];

  xt_pose pose = xt_pose_default(mode);
  const xt_pose *pa = &a->geom.pose;
  double pr = draw(&r, pb->primary_deg), se = draw(&r, pb->secondary_deg);
  /* An offset follows plane A's angle (an arc's too): primary wraps around, secondary stays on
   * the C-arm's travel, as the views sampler keeps it. */
  pose.primary_deg = pb->primary_offset ? wrap180(pa->primary_deg + pr) : pr;
  pose.secondary_deg =
      pb->secondary_offset ? clampd(pa->secondary_deg + se, -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG) : se;
  pose.detector_rot_deg = draw(&r, pb->detector_rot_deg);
  double sod = draw(&r, pb->sod_mm), sid = draw(&r, pb->sid_mm);
  if (pb->sod_set) pose.sod_mm = sod;
  if (pb->sid_set) pose.sid_mm = sid;
  pose.table_mm = pa->table_mm;

  const xt_ds_chain_spec *ch = &s->chain;
  double kv = draw(&r, ch->kv), dose = draw(&r, ch->dose_ngy);
  int rc = xt_geom_compute(&pose, mode, &b->geom, msg);
  if (rc || !ch->present) return rc;
  /* Plane B's own tube: its own kV and dose draws, the mAs from its own SID, its own noise seed. */
  b->chain = ch->base;
  b->chain.seed = pb->noise_seed;
  b->chain.kv = kv;
  b->dose_ngy = 0;
  if (ch->dose_set) {
    double mas;
    if ((rc = xt_ds_dose_mas(&ch->base, kv, b->geom.pose.sid_mm, dose, &mas, msg))) return rc;
    if ((rc = xt_chain_param_set(&b->chain, "mas", mas, msg))) return rc;
    b->dose_ngy = dose;
  }
  return 0;
}
