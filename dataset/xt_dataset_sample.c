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

#include "xt_dataset.h"

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define RUN_SALT 0xD1B54A32D192ED03ULL

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
