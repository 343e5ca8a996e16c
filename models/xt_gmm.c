/* Gaussian mixtures: allocation, validation, per-Gaussian math, bounds and the bounding-volume
 * hierarchy over the cut-off ellipsoids (xt_gmm.h). Files are in xt_gmm_io.c and xt_gmm_json.c.
 *
 * The BVH is built once per mixture by median splits of the centres along the longest axis of
 * their bounds (leaves of <= 4 Gaussians); boxes are the exact axis-aligned boxes of the cut-off
 * ellipsoids, rounded outward to float, so a ray that misses a box misses every Gaussian below
 * it by more than the cut-off radius. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_gmm.h"
#include "xt_model_kind.h"

#define LEAF_MAX 4

int xt_gmm_create(size_t count, xt_gmm **out, xt_msg *msg) {
  *out = NULL;
  if (count < 1 || count > XT_GMM_MAX_COUNT)
    return xt_fail(msg, XT_ERANGE, "gmm: %zu Gaussians, outside [1, %zu]", count, (size_t)XT_GMM_MAX_COUNT);
  xt_gmm *g = calloc(1, sizeof *g);
  if (!g) return xt_fail(msg, XT_ENOMEM, "gmm: out of memory");
  g->g = calloc(count, sizeof *g->g);
  if (!g->g) {
    free(g);
    return xt_fail(msg, XT_ENOMEM, "gmm: out of memory for %zu Gaussians", count);
  }
  g->count = count;
  g->cutoff = XT_GMM_CUTOFF_DEFAULT;
  for (size_t i = 0; i < count; i++) {
    g->g[i].quat[0] = 1.0f;
    g->g[i].label = XT_GMM_NO_LABEL;
  }
  *out = g;
  return 0;
}

void xt_gmm_free(xt_gmm *g) {
  if (!g) return;
  free(g->g);
  free(g->nodes);
  free(g->index);
  free(g);
}

static const char *const axis_name = "xyz";

int xt_gmm_validate(const xt_gmm *g, const char *what, xt_msg *msg) {
  if (!g || !g->g) return xt_fail(msg, XT_EINVAL, "%s: no Gaussians", what);
  if (g->count < 1 || g->count > XT_GMM_MAX_COUNT)
    return xt_fail(msg, XT_ERANGE, "%s: %zu Gaussians, outside [1, %zu]", what, g->count, (size_t)XT_GMM_MAX_COUNT);
  if (!(g->cutoff >= XT_GMM_CUTOFF_MIN && g->cutoff <= XT_GMM_CUTOFF_MAX))
    return xt_fail(msg, XT_ERANGE, "%s: cut-off radius %g, outside [%g, %g]", what, g->cutoff, XT_GMM_CUTOFF_MIN,
                   XT_GMM_CUTOFF_MAX);
  for (size_t i = 0; i < g->count; i++) {
    const xt_gaussian *p = &g->g[i];
    for (int a = 0; a < 3; a++) {
      if (!isfinite(p->centre[a]))
        return xt_fail(msg, XT_ENANDATA, "%s: Gaussian %zu: centre %c is not finite (%g)", what, i, axis_name[a],
                       (double)p->centre[a]);
      if (!isfinite(p->scale[a]))
        return xt_fail(msg, XT_ENANDATA, "%s: Gaussian %zu: scale %c is not finite (%g)", what, i, axis_name[a],
                       (double)p->scale[a]);
      if (!(p->scale[a] >= XT_GMM_SCALE_MIN && p->scale[a] <= XT_GMM_SCALE_MAX))
        return xt_fail(msg, XT_ERANGE, "%s: Gaussian %zu: scale %c is %g mm, outside [%g, %g]", what, i, axis_name[a],
                       (double)p->scale[a], XT_GMM_SCALE_MIN, XT_GMM_SCALE_MAX);
      if (!(fabs((double)p->centre[a]) <= 1e6))
        return xt_fail(msg, XT_ERANGE, "%s: Gaussian %zu: centre %c is %g mm, beyond 1e6", what, i, axis_name[a],
                       (double)p->centre[a]);
    }
    double n2 = 0;
    for (int a = 0; a < 4; a++) {
      if (!isfinite(p->quat[a]))
        return xt_fail(msg, XT_ENANDATA, "%s: Gaussian %zu: quaternion component %d is not finite (%g)", what, i, a,
                       (double)p->quat[a]);
      n2 += (double)p->quat[a] * p->quat[a];
    }
    /* Below 1e-6 the direction of q is mostly rounding noise: not a rotation anyone meant. */
    if (!(n2 >= 1e-12))
      return xt_fail(msg, XT_ERANGE, "%s: Gaussian %zu: quaternion (%g, %g, %g, %g) cannot be normalised", what, i,
                     (double)p->quat[0], (double)p->quat[1], (double)p->quat[2], (double)p->quat[3]);
    if (!isfinite(p->rho)) return xt_fail(msg, XT_ENANDATA, "%s: Gaussian %zu: rho is not finite (%g)", what, i, (double)p->rho);
    if (!(p->rho >= 0 && p->rho <= 1e3))
      return xt_fail(msg, XT_ERANGE, "%s: Gaussian %zu: rho is %g /mm, outside [0, 1000]", what, i, (double)p->rho);
    if (g->has_labels && p->label > 255)
      return xt_fail(msg, XT_ERANGE, "%s: Gaussian %zu: material label %u, outside [0, 255]", what, i, p->label);
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Per-Gaussian math                                                                          */
/* ------------------------------------------------------------------------------------------ */

void xt_gmm_rotation(const float q[4], double R[3][3]) {
  /* The homogeneous form, divided by |q|^2: the exact rotation of q/|q| even though a float
   * quaternion normalised in float is unit only to ~1e-7. */
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  const double n = w * w + x * x + y * y + z * z, s = 1.0 / n;
  R[0][0] = (w * w + x * x - y * y - z * z) * s;
  R[0][1] = 2 * (x * y - w * z) * s;
  R[0][2] = 2 * (x * z + w * y) * s;
  R[1][0] = 2 * (x * y + w * z) * s;
  R[1][1] = (w * w - x * x + y * y - z * z) * s;
  R[1][2] = 2 * (y * z - w * x) * s;
  R[2][0] = 2 * (x * z - w * y) * s;
  R[2][1] = 2 * (y * z + w * x) * s;
  R[2][2] = (w * w - x * x - y * y + z * z) * s;
}

void xt_gmm_precision(const xt_gaussian *g, double P[6]) {
  double R[3][3];
  xt_gmm_rotation(g->quat, R);
  double is2[3];
  for (int k = 0; k < 3; k++) is2[k] = 1.0 / ((double)g->scale[k] * g->scale[k]);
  /* P = R diag(1/s^2) R^T */
  static const int ij[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 2}};
  for (int e = 0; e < 6; e++) {
    const int i = ij[e][0], j = ij[e][1];
    P[e] = R[i][0] * R[j][0] * is2[0] + R[i][1] * R[j][1] * is2[1] + R[i][2] * R[j][2] * is2[2];
  }
}

void xt_gmm_half_extent(const xt_gaussian *g, double k, double h[3]) {
  double R[3][3];
  xt_gmm_rotation(g->quat, R);
  for (int a = 0; a < 3; a++) {
    double s = 0;
    for (int m = 0; m < 3; m++) s += R[a][m] * R[a][m] * (double)g->scale[m] * g->scale[m];
    h[a] = k * sqrt(s);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Bounds and the BVH                                                                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct build {
  const xt_gmm *g;
  float (*box)[6];  /* per Gaussian: lo[3], hi[3], rounded outward */
  float (*cen)[3];
  uint32_t *idx;
  xt_gmm_node *nodes;
  uint32_t nnodes, cap;
} build;

/* Three-way quickselect: idx[lo..hi) ordered so that idx[mid] holds the mid-th centre along
 * axis a, smaller ones before it and larger after. Equal keys (lattices) do not degrade it. */
static void select_mid(build *b, uint32_t lo, uint32_t hi, uint32_t mid, int a) {
  uint32_t *x = b->idx;
  while (hi - lo > 1) {
    const float piv = b->cen[x[lo + (hi - lo) / 2]][a];
    uint32_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      const float v = b->cen[x[i]][a];
      if (v < piv) {
        uint32_t t = x[lt];
        x[lt++] = x[i];
        x[i++] = t;
      } else if (v > piv) {
        uint32_t t = x[--gt];
        x[gt] = x[i];
        x[i] = t;
      } else {
        i++;
      }
    }
    if (mid < lt) hi = lt;
    else if (mid >= gt) lo = gt;
    else return;
  }
}

/* Builds the subtree of idx[lo..hi) at node `at`. Depth is at most ~log2(count) + 1. */
static void build_node(build *b, uint32_t at, uint32_t lo, uint32_t hi) {
  xt_gmm_node *n = &b->nodes[at];
  float blo[3] = {INFINITY, INFINITY, INFINITY}, bhi[3] = {-INFINITY, -INFINITY, -INFINITY};
  float clo[3] = {INFINITY, INFINITY, INFINITY}, chi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (uint32_t i = lo; i < hi; i++) {
    const uint32_t g = b->idx[i];
    for (int a = 0; a < 3; a++) {
      blo[a] = fminf(blo[a], b->box[g][a]);
      bhi[a] = fmaxf(bhi[a], b->box[g][3 + a]);
      clo[a] = fminf(clo[a], b->cen[g][a]);
      chi[a] = fmaxf(chi[a], b->cen[g][a]);
    }
  }
  memcpy(n->lo, blo, sizeof blo);
  memcpy(n->hi, bhi, sizeof bhi);
  if (hi - lo <= LEAF_MAX) {
    n->first = lo;
    n->count = hi - lo;
    return;
  }
  int a = 0;
  for (int k = 1; k < 3; k++)
    if (chi[k] - clo[k] > chi[a] - clo[a]) a = k;
  const uint32_t mid = lo + (hi - lo) / 2;
  select_mid(b, lo, hi, mid, a);
  /* Children are allocated as a pair: left at `first`, right at `first + 1`. */
  const uint32_t left = b->nnodes;
  b->nnodes += 2;
  n->count = 0;
  n->first = left;
  build_node(b, left, lo, mid);
  build_node(b, left + 1, mid, hi);
}

int xt_gmm_finish(xt_gmm *g, const char *what, xt_msg *msg) {
  int rc = xt_gmm_validate(g, what, msg);
  if (rc) return rc;
  for (size_t i = 0; i < g->count; i++) {
    float *q = g->g[i].quat;
    double n = sqrt((double)q[0] * q[0] + (double)q[1] * q[1] + (double)q[2] * q[2] + (double)q[3] * q[3]);
    /* Unit to float precision already (a file this program wrote): left bit for bit, so that
     * write -> read round trips are exact. */
    if (fabs(n - 1.0) > 4e-7)
      for (int a = 0; a < 4; a++) q[a] = (float)(q[a] / n);
    if (!g->has_labels) g->g[i].label = XT_GMM_NO_LABEL;
  }
  free(g->nodes);
  free(g->index);
  g->nodes = NULL;
  g->index = NULL;
  build b = {0};
  b.g = g;
  b.box = malloc(sizeof *b.box * g->count);
  b.cen = malloc(sizeof *b.cen * g->count);
  b.idx = malloc(sizeof *b.idx * g->count);
  /* A binary tree with <= count leaves has < 2 * count nodes. */
  b.cap = (uint32_t)(2 * g->count);
  b.nodes = malloc(sizeof *b.nodes * b.cap);
  if (!b.box || !b.cen || !b.idx || !b.nodes) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for the index of %zu Gaussians", what, g->count);
    goto fail;
  }
  for (int a = 0; a < 3; a++) {
    g->lo[a] = INFINITY;
    g->hi[a] = -INFINITY;
  }
  for (size_t i = 0; i < g->count; i++) {
    double h[3];
    xt_gmm_half_extent(&g->g[i], g->cutoff, h);
    for (int a = 0; a < 3; a++) {
      const double c = g->g[i].centre[a];
      const double lo = c - h[a], hi = c + h[a];
      b.box[i][a] = nextafterf((float)lo, -INFINITY);
      b.box[i][3 + a] = nextafterf((float)hi, INFINITY);
      b.cen[i][a] = g->g[i].centre[a];
      if (lo < g->lo[a]) g->lo[a] = lo;
      if (hi > g->hi[a]) g->hi[a] = hi;
    }
    b.idx[i] = (uint32_t)i;
  }
  b.nnodes = 1;
  build_node(&b, 0, 0, (uint32_t)g->count);
  xt_gmm_node *shrunk = realloc(b.nodes, sizeof *b.nodes * b.nnodes);
  g->nodes = shrunk ? shrunk : b.nodes;
  g->nnodes = b.nnodes;
  g->index = b.idx;
  b.nodes = NULL;
  b.idx = NULL;
  rc = 0;
fail:
  free(b.box);
  free(b.cen);
  free(b.idx);
  free(b.nodes);
  return rc;
}

int xt_model_from_gmm(xt_gmm *g, const char *name, xt_model **out, xt_msg *msg) {
  *out = NULL;
  if (!g || !g->nodes) return xt_fail(msg, XT_EINVAL, "gmm model: mixture not finished");
  return xt_model_create(XT_MODEL_GMM, g, name ? name : "gmm", out, msg);
}

size_t xt_gmm_file_bytes(const xt_gmm *g) { return sizeof(xt_gmm_header) + g->count * sizeof(xt_gaussian); }

/* ------------------------------------------------------------------------------------------ */
/* The GMM kind                                                                               */
/* ------------------------------------------------------------------------------------------ */

static void gmm_free(void *payload) { xt_gmm_free(payload); }

/* The cut-off ellipsoids' boxes, which xt_gmm_finish computes with the BVH. */
static int gmm_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi) {
  const xt_gmm *g = xt_model_gmm(m);
  if (!g->nodes) return -1;
  *lo = xt_v3(g->lo[0], g->lo[1], g->lo[2]);
  *hi = xt_v3(g->hi[0], g->hi[1], g->hi[2]);
  return 0;
}

/* A mixture's size is its count, and on the server its native file's size ("model size"). */
static void gmm_describe(const xt_model *m, xt_model_view view, const xt_json_out *o) {
  const xt_gmm *g = xt_model_gmm(m);
  if (view == XT_MODEL_VIEW_SIDECAR_TABLE) return; /* the labels are default-table ids: no table of its own */
  o->integer(o->ctx, "gaussians", (int64_t)g->count);
  if (view == XT_MODEL_VIEW_REPORT) o->integer(o->ctx, "bytes", (int64_t)xt_gmm_file_bytes(g));
  if (view != XT_MODEL_VIEW_BRIEF) o->real(o->ctx, "cutoff_sigma", g->cutoff);
}

/* Each Gaussian is one material: with labels, the default table's entry (only the labels that
 * occur need channels); without, soft tissue. Mixtures carry no energy: their mu are taken at the
 * default one. */
static int gmm_matter(const xt_model *m, xt_model_matter *out, xt_msg *msg) {
  const xt_gmm *g = xt_model_gmm(m);
  if (!g || !g->g) return xt_fail(msg, XT_EINVAL, "channels: model %s has no mixture", m->name);
  out->energy_kev = XT_DEFAULT_ENERGY_KEV;
  out->kind = g->has_labels ? XT_MATTER_USED_LABELS : XT_MATTER_SOFT;
  memset(out->used, 0, sizeof out->used);
  out->contrast = g->has_labels ? g->contrast : NULL;
  for (size_t i = 0; g->has_labels && i < g->count; i++) {
    const uint32_t l = g->g[i].label & 255u; /* validated 0..255 when has_labels */
    out->used[l >> 6] |= (uint64_t)1 << (l & 63);
  }
  return 0;
}

int xt_gmm_contrast_label(xt_model *m, int label, xt_msg *msg) {
  xt_gmm *g = m ? xt_model_gmm(m) : NULL;
  if (!g || !g->g) return xt_fail(msg, XT_EINVAL, "contrast: model %s has no mixture", m ? m->name : "?");
  if (!g->has_labels)
    return xt_fail(msg, XT_EINVAL, "contrast: mixture %s has no labels: a region is the Gaussians of one label", m->name);
  size_t n = 0;
  for (size_t i = 0; label >= 0 && label < 256 && i < g->count; i++) n += (g->g[i].label & 255u) == (uint32_t)label;
  if (!n) return xt_fail(msg, XT_EINVAL, "contrast: mixture %s has no Gaussian of label %d", m->name, label);
  g->contrast[label] = 1;
  return 0;
}

/* What the CUDA kind allocates for the mixture's Gaussians: records and the per-Gaussian share of
 * the frame scratch (XT_GMM_DEVICE_BYTES_PER_GAUSSIAN; the BVH stays on the host). */
static uint64_t gmm_device_bytes(const xt_model *m) {
  return (uint64_t)xt_model_gmm(m)->count * XT_GMM_DEVICE_BYTES_PER_GAUSSIAN;
}

const xt_model_kind_ops xt_model_kind_gmm = {.name = "gmm",
                                             .free = gmm_free,
                                             .bounds = gmm_bounds,
                                             .describe = gmm_describe,
                                             .matter = gmm_matter,
                                             .device_bytes = gmm_device_bytes};
