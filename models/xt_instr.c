/* Instruments: devices, shapes laid out as mitred tube segments, the model kind's table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_basis.h"
#include "xt_instr.h"
#include "xt_model_kind.h"

int xt_instr_material(xt_instr_device *dev, const char *name, int *id, xt_msg *msg) {
  xt_material_table *t = &dev->mt;
  for (int i = 0; i < t->count; i++)
    if (strcmp(t->name[i], name) == 0) {
      *id = i;
      return 0;
    }
  if (t->count >= XT_MAX_MATERIALS) return xt_fail(msg, XT_ETOOLARGE, "instrument: more than %d materials", XT_MAX_MATERIALS);
  if (strlen(name) >= XT_MATERIAL_NAME_MAX) return xt_fail(msg, XT_EINVAL, "instrument: material name \"%.40s...\" too long", name);
  xt_basis_part parts[2];
  int np = 0, rc = xt_material_parts_named(name, parts, &np, msg);
  if (rc) return rc;
  double mu_cm = 0, rho = 0;
  for (int k = 0; k < np; k++) {
    double mr = 0;
    if ((rc = xt_basis_mass_atten(parts[k].basis, t->energy_kev, &mr, msg))) return rc;
    mu_cm += mr * parts[k].density;
    rho += parts[k].density;
  }
  const int i = t->count++;
  t->mu[i] = (float)(mu_cm / 10.0);
  t->density[i] = rho;
  snprintf(t->name[i], XT_MATERIAL_NAME_MAX, "%s", name);
  *id = i;
  return 0;
}

int xt_instr_device_init(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg) {
  memset(dev, 0, sizeof *dev);
  if (max_points < 2 || max_points > XT_INSTR_MAX_POINTS)
    return xt_fail(msg, XT_ERANGE, "instrument: max_points %d outside [2, %d]", max_points, XT_INSTR_MAX_POINTS);
  dev->max_points = max_points;
  dev->mt.energy_kev = XT_DEFAULT_ENERGY_KEV;
  snprintf(dev->mt.source, sizeof dev->mt.source,
           "xraylib 4.0 (elemental CS_Total by mass fraction) at %.1f keV; instrument materials: docs/instruments.md",
           XT_DEFAULT_ENERGY_KEV);
  return xt_instr_material(dev, medium ? medium : "blood", &dev->medium, msg);
}

int xt_instr_device_check(const xt_instr_device *dev, const char *what, xt_msg *msg) {
  if (dev->nsections < 1 || dev->nsections > XT_INSTR_MAX_SECTIONS)
    return xt_fail(msg, XT_EINVAL, "%s: %d sections (1..%d)", what, dev->nsections, XT_INSTR_MAX_SECTIONS);
  if (dev->max_points < 2 || dev->max_points > XT_INSTR_MAX_POINTS)
    return xt_fail(msg, XT_ERANGE, "%s: max_points %d outside [2, %d]", what, dev->max_points, XT_INSTR_MAX_POINTS);
  if (dev->medium < 0 || dev->medium >= dev->mt.count) return xt_fail(msg, XT_EINVAL, "%s: no medium", what);
  for (int i = 0; i < dev->nsections; i++) {
    const xt_instr_section *s = &dev->sec[i];
    const int last = i == dev->nsections - 1;
    if (!(isfinite(s->length_mm) && (s->length_mm > 0 || (last && s->length_mm <= 0))))
      return xt_fail(msg, XT_EINVAL, "%s: section %d: length %g mm (only the last may be 0: to the end)", what, i,
                     s->length_mm);
    if (!(s->r_out > 0 && s->r_out <= 50 && s->r_in >= 0 && s->r_in < s->r_out))
      return xt_fail(msg, XT_EINVAL, "%s: section %d: radii out %g, in %g mm (need 0 <= in < out <= 50)", what, i,
                     s->r_out, s->r_in);
    if (s->wall < 0 || s->wall >= dev->mt.count || (s->r_in > 0 && (s->lumen < 0 || s->lumen >= dev->mt.count)))
      return xt_fail(msg, XT_EINVAL, "%s: section %d: material id out of the table", what, i);
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Shapes                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int cap_segments(const xt_instr_device *dev) { return dev->max_points - 1 + dev->nsections; }

/* Boxes per level for n segments; the number of levels. */
static int levels_for(int n, int level_n[XT_INSTR_MAX_LEVELS]) {
  int l = 0, k = n;
  do {
    k = (k + XT_INSTR_FANOUT - 1) / XT_INSTR_FANOUT;
    level_n[l++] = k;
  } while (k > 1 && l < XT_INSTR_MAX_LEVELS);
  return l;
}

int xt_instr_geom_alloc(const xt_instr_device *dev, xt_instr_geom *g, xt_msg *msg) {
  memset(g, 0, sizeof *g);
  g->cap_seg = cap_segments(dev);
  int ln[XT_INSTR_MAX_LEVELS];
  const int nl = levels_for(g->cap_seg, ln);
  for (int l = 0; l < nl; l++) g->cap_box += ln[l];
  g->seg = calloc((size_t)g->cap_seg, sizeof *g->seg);
  g->box = calloc((size_t)g->cap_box, sizeof *g->box);
  if (!g->seg || !g->box) {
    xt_instr_geom_free(g);
    return xt_fail(msg, XT_ENOMEM, "instrument: out of memory");
  }
  return 0;
}

void xt_instr_geom_free(xt_instr_geom *g) {
  if (!g) return;
  free(g->seg);
  free(g->box);
  memset(g, 0, sizeof *g);
}

static void unit_between(const double a[3], const double b[3], double out[3]) {
  const double s[3] = {a[0] + b[0], a[1] + b[1], a[2] + b[2]};
  const double n = sqrt(xt_tube_dot(s, s));
  for (int k = 0; k < 3; k++) out[k] = s[k] / n;
}

/* The box of a segment: every point of the mitred tube is within r_out / cos(half bend) of the
 * axis piece (the far corner of a mitre ellipse), so the axis' box grown by that holds it. */
void xt_instr_seg_box(const xt_tube_seg *t, xt_instr_box *b) {
  const double c0 = xt_tube_dot(t->n0, t->d), c1 = xt_tube_dot(t->n1, t->d);
  const double grow = t->r_out / (c0 < c1 ? c0 : c1) * (1.0 + 1e-12) + 1e-12;
  for (int k = 0; k < 3; k++) {
    const double a = t->p0[k], e = t->p0[k] + t->len * t->d[k];
    b->lo[k] = (a < e ? a : e) - grow;
    b->hi[k] = (a > e ? a : e) + grow;
  }
}

static void box_union(xt_instr_box *acc, const xt_instr_box *b, int first) {
  for (int k = 0; k < 3; k++) {
    if (first || b->lo[k] < acc->lo[k]) acc->lo[k] = b->lo[k];
    if (first || b->hi[k] > acc->hi[k]) acc->hi[k] = b->hi[k];
  }
}

int xt_instr_geom_build(const xt_instr_device *dev, const double *pts, int n, const char *what, xt_instr_geom *g,
                        xt_msg *msg) {
  if (n < 2) return xt_fail(msg, XT_EINVAL, "%s: a centreline needs at least 2 points, got %d", what, n);
  if (n > dev->max_points)
    return xt_fail(msg, XT_ETOOLARGE, "%s: %d points, more than the instrument's max_points %d", what, n,
                   dev->max_points);
  for (int i = 0; i < 3 * n; i++)
    if (!isfinite(pts[i]) || fabs(pts[i]) > 1e6)
      return xt_fail(msg, XT_EINVAL, "%s: point %d: coordinate %g is not a finite position in mm", what, i / 3, pts[i]);
  /* the distinct points' directions, and the checks, before g is touched */
  const double cos_max = cos(XT_INSTR_MAX_BEND_DEG * XT_PI / 180.0);
  int m = 0, last = 0;
  double prev_d[3] = {0, 0, 0}, prev_len = 0, prev_tan = 0;
  int *keep = malloc(sizeof *keep * (size_t)n);
  if (!keep) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
  keep[m++] = 0;
  double rmax = 0;
  for (int i = 0; i < dev->nsections; i++)
    if (dev->sec[i].r_out > rmax) rmax = dev->sec[i].r_out;
  for (int i = 1; i < n; i++) {
    const double *a = pts + 3 * last, *b = pts + 3 * i;
    double d[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
    const double len = sqrt(xt_tube_dot(d, d));
    if (!(len > 1e-9)) continue;
    for (int k = 0; k < 3; k++) d[k] /= len;
    if (m >= 2) {
      const double c = xt_tube_dot(prev_d, d);
      if (c < cos_max) {
        free(keep);
        return xt_fail(msg, XT_EINVAL, "%s: point %d: the centreline turns by %.1f degrees there (at most %g)", what,
                       last, acos(c < -1 ? -1 : c) * 180.0 / XT_PI, XT_INSTR_MAX_BEND_DEG);
      }
      /* the mitre at this joint takes r tan(half bend) of both segments' lengths; tan(b / 2) =
       * sqrt((1 - cos b) / (1 + cos b)), cos b >= cos_max > 0 here (acos and tan were a fifth of a
       * shape's layout) */
      const double cb = c > 1 ? 1 : c, tn = sqrt((1.0 - cb) / (1.0 + cb));
      if (rmax * (prev_tan + tn) > prev_len) {
        const int from = keep[m - 2];
        free(keep);
        return xt_fail(msg, XT_EINVAL,
                       "%s: points %d..%d: a %.3f mm segment between bends is shorter than its mitres need (%.3f mm "
                       "at radius %g): smooth or resample the centreline",
                       what, from, last, prev_len, rmax * (prev_tan + tn), rmax);
      }
      prev_tan = tn;
    }
    memcpy(prev_d, d, sizeof d);
    prev_len = len;
    keep[m++] = i;
    last = i;
  }
  if (m < 2) {
    free(keep);
    return xt_fail(msg, XT_EINVAL, "%s: the centreline's points all coincide", what);
  }
  if (prev_len < rmax * prev_tan) {
    free(keep);
    return xt_fail(msg, XT_EINVAL, "%s: the last segment (%.3f mm) is shorter than its mitre needs", what, prev_len);
  }
  /* the segments: each piece of the centreline, split where a section ends */
  int ns = 0, sec = 0;
  double arc = 0, sec_end = dev->sec[0].length_mm > 0 ? dev->sec[0].length_mm : INFINITY;
  double dev_len = 0;
  for (int i = 0; i < dev->nsections; i++) {
    if (dev->sec[i].length_mm <= 0) {
      dev_len = INFINITY;
      break;
    }
    dev_len += dev->sec[i].length_mm;
  }
  const float mu_med = dev->mt.mu[dev->medium];
  double n_prev[3] = {0, 0, 0};
  for (int j = 0; j + 1 < m && arc < dev_len; j++) {
    const double *a = pts + 3 * keep[j], *b = pts + 3 * keep[j + 1];
    double d[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
    const double L = sqrt(xt_tube_dot(d, d));
    for (int k = 0; k < 3; k++) d[k] /= L;
    /* the joint's mitre normal: the previous piece's outgoing one, the same numbers (unit_between of
     * the same two directions), formed once a joint */
    double n_in[3], n_out[3];
    memcpy(n_in, j == 0 ? d : n_prev, sizeof d);
    if (j + 2 >= m) memcpy(n_out, d, sizeof d);
    else {
      const double *c = pts + 3 * keep[j + 2];
      double dc[3] = {c[0] - b[0], c[1] - b[1], c[2] - b[2]};
      const double lc = sqrt(xt_tube_dot(dc, dc));
      for (int k = 0; k < 3; k++) dc[k] /= lc;
      unit_between(d, dc, n_out);
    }
    memcpy(n_prev, n_out, sizeof n_out);
    double s = 0; /* along this piece */
    while (s < L && arc < dev_len) {
      while (arc >= sec_end && sec + 1 < dev->nsections) {
        sec++;
        sec_end = dev->sec[sec].length_mm > 0 ? sec_end + dev->sec[sec].length_mm : INFINITY;
      }
      double e = L;
      if (arc + (e - s) > sec_end) e = s + (sec_end - arc);
      if (e - s < 1e-12 && e < L) { /* a boundary on a point: move on */
        arc = sec_end;
        continue;
      }
      const xt_instr_section *S = &dev->sec[sec];
      xt_tube_seg *t = &g->seg[ns];
      if (ns >= g->cap_seg) break; /* cannot happen: cap = points - 1 + sections */
      for (int k = 0; k < 3; k++) {
        t->p0[k] = a[k] + s * d[k];
        t->d[k] = d[k];
        t->n0[k] = s > 0 ? d[k] : n_in[k];
        t->n1[k] = e < L ? d[k] : n_out[k];
      }
      t->len = e - s;
      t->r_out = S->r_out;
      t->r_in = S->r_in;
      t->wall = S->wall;
      t->lumen = S->r_in > 0 ? S->lumen : dev->medium;
      t->mu_wall = (double)dev->mt.mu[S->wall] - (double)mu_med;
      t->mu_lumen = S->r_in > 0 ? (double)dev->mt.mu[S->lumen] - (double)mu_med : 0.0;
      ns++;
      arc += e - s;
      s = e;
    }
  }
  free(keep);
  g->nseg = ns;
  g->length_mm = arc;
  /* the boxes, level by level */
  g->nlevels = levels_for(ns, g->level_n);
  int off = 0;
  for (int l = 0; l < g->nlevels; l++) {
    g->level_off[l] = off;
    for (int i = 0; i < g->level_n[l]; i++) {
      xt_instr_box *B = &g->box[off + i];
      const int below = l == 0 ? ns : g->level_n[l - 1];
      for (int c = i * XT_INSTR_FANOUT; c < below && c < (i + 1) * XT_INSTR_FANOUT; c++) {
        xt_instr_box cb;
        if (l == 0) xt_instr_seg_box(&g->seg[c], &cb);
        else cb = g->box[g->level_off[l - 1] + c];
        box_union(B, &cb, c == i * XT_INSTR_FANOUT);
      }
    }
    off += g->level_n[l];
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Models                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void instr_free(void *payload) {
  xt_instr *I = payload;
  if (!I) return;
  xt_instr_geom_free(&I->geom);
  free(I->points);
  free(I);
}

int xt_instr_set_shape(xt_model *m, const double *pts, int n, xt_msg *msg) {
  xt_instr *I = xt_model_instr(m);
  if (!I) return xt_fail(msg, XT_EINVAL, "model %s is no instrument", m->name);
  int rc = xt_instr_geom_build(&I->dev, pts, n, m->name, &I->geom, msg);
  if (rc) return rc;
  memcpy(I->points, pts, sizeof(double) * 3 * (size_t)n);
  I->npoints = n;
  return 0;
}

int xt_model_from_instr(const xt_instr_device *dev, const double *pts, int n, const char *name, xt_model **out,
                        xt_msg *msg) {
  int rc = xt_instr_device_check(dev, name, msg);
  if (rc) return rc;
  xt_instr *I = calloc(1, sizeof *I);
  if (!I) return xt_fail(msg, XT_ENOMEM, "instrument: out of memory");
  I->dev = *dev;
  I->points = malloc(sizeof(double) * 3 * (size_t)dev->max_points);
  if (!I->points) rc = xt_fail(msg, XT_ENOMEM, "instrument: out of memory");
  if (!rc) rc = xt_instr_geom_alloc(dev, &I->geom, msg);
  if (!rc) rc = xt_instr_geom_build(dev, pts, n, name, &I->geom, msg);
  if (!rc) {
    memcpy(I->points, pts, sizeof(double) * 3 * (size_t)n);
    I->npoints = n;
    rc = xt_model_create(XT_MODEL_INSTR, I, name, out, msg);
  }
  if (rc) instr_free(I);
  return rc;
}

static int instr_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi) {
  const xt_instr *I = xt_model_instr(m);
  if (!I || !I->geom.box || I->geom.nseg < 1) return 1;
  const xt_instr_box *r = &I->geom.box[I->geom.level_off[I->geom.nlevels - 1]];
  *lo = xt_v3(r->lo[0], r->lo[1], r->lo[2]);
  *hi = xt_v3(r->hi[0], r->hi[1], r->hi[2]);
  return 0;
}

static void instr_describe(const xt_model *m, xt_model_view view, const xt_json_out *o) {
  const xt_instr *I = xt_model_instr(m);
  if (view == XT_MODEL_VIEW_SIDECAR_TABLE) return;
  o->integer(o->ctx, "points", I->npoints);
  if (view == XT_MODEL_VIEW_BRIEF) return;
  o->integer(o->ctx, "segments", I->geom.nseg);
  o->integer(o->ctx, "max_points", I->dev.max_points);
  o->real(o->ctx, "length_mm", I->geom.length_mm);
  o->string(o->ctx, "medium", I->dev.mt.name[I->dev.medium]);
  o->begin(o->ctx, "sections", 1);
  for (int i = 0; i < I->dev.nsections; i++) {
    const xt_instr_section *s = &I->dev.sec[i];
    o->begin(o->ctx, NULL, 0);
    o->real(o->ctx, "length_mm", s->length_mm > 0 ? s->length_mm : 0.0);
    o->real(o->ctx, "r_out_mm", s->r_out);
    o->real(o->ctx, "r_in_mm", s->r_in);
    o->string(o->ctx, "wall", I->dev.mt.name[s->wall]);
    if (s->r_in > 0) o->string(o->ctx, "lumen", I->dev.mt.name[s->lumen]);
    o->end(o->ctx);
  }
  o->end(o->ctx);
}

/* Labels into the device's own table: the channels read each segment's wall and lumen as label
 * voxels are read, and the instrument's kind subtracts the medium's row (proj_cpu_instr.c). */
static int instr_matter(const xt_model *m, xt_model_matter *out, xt_msg *msg) {
  const xt_instr *I = xt_model_instr(m);
  if (!I) return xt_fail(msg, XT_EINVAL, "channels: model %s has no instrument", m->name);
  memset(out, 0, sizeof *out);
  out->kind = XT_MATTER_LABELS;
  out->energy_kev = I->dev.mt.energy_kev;
  out->table = &I->dev.mt;
  return 0;
}

/* What the CUDA kind allocates for the instrument (proj_instr.cu): its segments at capacity and its
 * channel rows. (The kind's per-pixel accumulator is the projector's, shared by its instruments.) */
static uint64_t instr_device_bytes(const xt_model *m) {
  const xt_instr *I = xt_model_instr(m);
  return (uint64_t)I->geom.cap_seg * sizeof(xt_tube_seg) + (uint64_t)XT_MAX_MATERIALS * 8 * sizeof(float);
}

const xt_model_kind_ops xt_model_kind_instr = {.name = "instrument",
                                               .free = instr_free,
                                               .bounds = instr_bounds,
                                               .describe = instr_describe,
                                               .matter = instr_matter,
                                               .device_bytes = instr_device_bytes};

int xt_instr_lumen_id(const xt_instr_device *dev) {
  for (int i = 0; i < dev->mt.count; i++)
    if (dev->mt.contrast[i]) return i;
  return -1;
}

int xt_instr_lumen_region(xt_instr_device *dev, int *id, xt_msg *msg) {
  int l = xt_instr_lumen_id(dev), any = 0;
  for (int i = 0; i < dev->nsections; i++) any |= dev->sec[i].r_in > 0 && (dev->sec[i].lumen == dev->medium || dev->sec[i].lumen == l);
  if (!any) return xt_fail(msg, XT_EINVAL, "instrument: no section has a lumen of its medium to take contrast");
  xt_material_table *t = &dev->mt;
  if (l < 0) {
    if (t->count >= XT_MAX_MATERIALS) return xt_fail(msg, XT_ETOOLARGE, "instrument: more than %d materials", XT_MAX_MATERIALS);
    l = t->count++;
    t->mu[l] = t->mu[dev->medium]; /* the same float: mu_lumen - mu_medium is 0 exactly without iodine */
    t->density[l] = t->density[dev->medium];
    memcpy(t->name[l], t->name[dev->medium], XT_MATERIAL_NAME_MAX); /* its composition is the medium's */
    t->contrast[l] = 1;
  }
  for (int i = 0; i < dev->nsections; i++)
    if (dev->sec[i].r_in > 0 && dev->sec[i].lumen == dev->medium) dev->sec[i].lumen = l;
  if (id) *id = l;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Ready-made devices                                                                         */
/* ------------------------------------------------------------------------------------------ */

int xt_instr_guidewire(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg) {
  int rc = xt_instr_device_init(dev, medium, max_points, msg);
  int pt = 0, ni = 0;
  if (!rc) rc = xt_instr_material(dev, "platinum", &pt, msg);
  if (!rc) rc = xt_instr_material(dev, "nitinol", &ni, msg);
  if (rc) return rc;
  /* 0.014 inch = 0.356 mm. The coil is a wound platinum wire around a tapered core: as a tube its
   * metal fills about 60 % of the section [U], a solid of 0.6 x the coil's area. */
  dev->nsections = 2;
  dev->sec[0] = (xt_instr_section){30.0, 0.178 * sqrt(0.6), 0.0, pt, 0};
  dev->sec[1] = (xt_instr_section){0.0, 0.178, 0.0, ni, 0};
  return 0;
}

int xt_instr_catheter(xt_instr_device *dev, const char *medium, int max_points, xt_msg *msg) {
  int rc = xt_instr_device_init(dev, medium, max_points, msg);
  int pt = 0, sh = 0;
  if (!rc) rc = xt_instr_material(dev, "platinum", &pt, msg);
  if (!rc) rc = xt_instr_material(dev, "catheter_polymer_w", &sh, msg);
  if (rc) return rc;
  const int lum = dev->medium; /* the lumen holds what the vessel holds (contrast: issue 26, point 2) */
  /* 5 F = 1.67 mm outside; 0.043-inch (1.1 mm) lumen. The marker band is the outer 0.05 mm of the
   * wall in platinum; a section has two layers, so under the band the lumen counts as shaft [U]. */
  dev->nsections = 3;
  dev->sec[0] = (xt_instr_section){2.0, 0.835, 0.55, sh, lum};
  dev->sec[1] = (xt_instr_section){1.0, 0.835, 0.785, pt, sh};
  dev->sec[2] = (xt_instr_section){0.0, 0.835, 0.55, sh, lum};
  return 0;
}

int xt_instr_box_hit(const xt_instr_box *b, const double o[3], const double d[3], double len, double e) {
  double lo = 0.0, hi = len;
  for (int a = 0; a < 3; a++) {
    const double blo = b->lo[a] - e, bhi = b->hi[a] + e;
    if (d[a] == 0.0) {
      if (o[a] < blo || o[a] > bhi) return 0;
      continue;
    }
    const double inv = 1.0 / d[a];
    double t0 = (blo - o[a]) * inv, t1 = (bhi - o[a]) * inv;
    if (t0 > t1) {
      const double t = t0;
      t0 = t1;
      t1 = t;
    }
    if (t0 > lo) lo = t0;
    if (t1 < hi) hi = t1;
    if (lo > hi) return 0;
  }
  return 1;
}
