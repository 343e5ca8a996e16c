/* The NanoVDB model kind on the CPU: loader, converter and the exact reference.
 *
 * Oracles: the dense volume a grid was converted from (its voxels, and its dense double-precision
 * render, which the grid's render must equal to 1e-12 relative on every pixel); files written by
 * an independent writer (Debian's pyopenvdb + nanovdb_convert, when installed); and, for the
 * quantised types, the Float grid of the same volume with the quantisation's own error bound.
 * Bad files are made by cutting and patching a good one at the offsets of NanoVDB's layout. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_channels.h"
#include "xt_gmm.h"
#include "xt_load.h"
#include "xt_nvdb.h"
#include "xt_nvdb_bricks.h"
#include "xt_nvdb_build.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_raycast.h"
#include "xt_test.h"
#include "xt_test_gmm.h"
#include "xt_test_nvdb.h"

#define XT_REQUIRE_MSG_(cond, m)                                                                    \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "  %s:%d: requirement failed: %s: %s\n", __FILE__, __LINE__, #cond, (m).text); \
      xt_test_failures_++;                                                                          \
      return;                                                                                       \
    }                                                                                               \
  } while (0)

static xt_detector_mode tmode(int cols, int rows, double pitch) {
  xt_detector_mode m = xt_mode_custom("test", cols, rows, pitch, pitch * tn_urand(0.8, 1.25), 800.0, 1200.0);
  return m;
}

static int rgeom(const xt_detector_mode *mode, xt_geometry *g) {
  xt_pose p = xt_pose_default(mode);
  p.primary_deg = rand() % 4 == 0 ? 90.0 * (rand() % 4 - 1) : tn_urand(-180, 180); /* rays in voxel planes too */
  p.secondary_deg = rand() % 4 == 0 ? 0.0 : tn_urand(-40, 40);
  p.detector_rot_deg = tn_urand(-30, 30);
  p.table_mm = xt_v3(tn_urand(-10, 10), tn_urand(-10, 10), tn_urand(-10, 10));
  return xt_geom_compute(&p, mode, g, NULL);
}

static double *render(const xt_model *m, const xt_geometry *g) {
  const size_t np = (size_t)g->mode.cols * g->mode.rows;
  double *out = malloc(np * sizeof *out);
  const xt_model *ms[1] = {m};
  xt_msg msg;
  if (out && xt_ref_render_f64(ms, 1, g, out, 0, &msg)) {
    fprintf(stderr, "  render: %s\n", msg.text);
    free(out);
    return NULL;
  }
  return out;
}

/* Largest |a-b| / max(|a|,|b|) over the frame (0 where both are 0), and the frame's max. */
static double max_rel(const double *a, const double *b, size_t n, double *mx) {
  double w = 0;
  *mx = 0;
  for (size_t i = 0; i < n; i++) {
    const double s = fmax(fabs(a[i]), fabs(b[i]));
    if (s > *mx) *mx = s;
    if (s > 0 && fabs(a[i] - b[i]) / s > w) w = fabs(a[i] - b[i]) / s;
    if (isnan(a[i]) || isnan(b[i])) w = INFINITY;
  }
  return w;
}

/* The volume as the converter sees it: voxels within tol of bg become bg. */
static void apply_tolerance(xt_volume *v, float bg, float tol) {
  if (v->type != XT_VOXEL_F32) return;
  float *f = v->data;
  for (size_t i = 0; i < xt_volume_voxels(v); i++)
    if (fabsf(f[i] - bg) <= tol) f[i] = bg;
}

/* ---- values and renders of converted volumes ------------------------------------------------- */

XT_TEST(voxels_roundtrip) {
  srand(11);
  static const int qd[] = {XT_NVDB_Q_FLOAT, XT_NVDB_Q_INDEX, XT_NVDB_Q_AUTO},
                   ql[] = {XT_NVDB_Q_INT16, XT_NVDB_Q_FP8, XT_NVDB_Q_FP16, XT_NVDB_Q_FLOAT, XT_NVDB_Q_INDEX};
  for (int labels = 0; labels < 2; labels++) {
    const int nq = labels ? 5 : 3;
    for (int qi = 0; qi < nq; qi++) {
      const double bg = labels ? 0.0 : (rand() % 2 ? 0.0 : 0.004);
      xt_model *vm = tn_sparse_model(labels, 9, 40, labels ? 0.003 : bg);
      XT_REQUIRE(vm);
      xt_msg msg = {{0}};
      const int q = labels ? ql[qi] : qd[qi];
      xt_model *nm = tn_nvdb_of(vm, q, bg, 0.0, &msg);
      XT_REQUIRE_MSG_(nm, msg);
      const xt_volume *v = xt_model_volume(vm);
      const xt_nvdb *g = xt_model_nvdb(nm);
      size_t bad = 0, active = 0, bad_decode = 0;
      /* the CUDA kind's dense working set (XT_NVDB_TRAVERSAL=dense) decodes with this function's run */
      float *dec = malloc(xt_nvdb_domain_voxels(g) * sizeof *dec);
      XT_REQUIRE(dec);
      for (size_t vi = 0; vi < xt_nvdb_domain_voxels(g); vi++) dec[vi] = NAN; /* an unwritten voxel fails */
      xt_nvdb_decode(g, dec);
      for (int k = 0; k < v->dim[2]; k++)
        for (int j = 0; j < v->dim[1]; j++)
          for (int i = 0; i < v->dim[0]; i++) {
            bad_decode += (double)dec[i + (size_t)v->dim[0] * (j + (size_t)v->dim[1] * k)] != xt_volume_mu(v, i, j, k);
            bad += xt_nvdb_mu(g, i, j, k) != xt_volume_mu(v, i, j, k);
            active += labels ? ((uint8_t *)v->data)[i + v->dim[0] * (j + v->dim[1] * k)] != 0
                             : ((float *)v->data)[i + v->dim[0] * (j + v->dim[1] * k)] != (float)bg;
          }
      XT_CHECK_MSG(bad == 0, "%s %s: %zu voxels differ", labels ? "labels" : "dense", xt_nvdb_type_name(g->grid_type), bad);
      XT_CHECK_MSG(bad_decode == 0, "%s %s: %zu decoded voxels differ", labels ? "labels" : "dense",
                   xt_nvdb_type_name(g->grid_type), bad_decode);
      free(dec);
      /* the index form where asked, and auto's choice on a sparse grid (leaves not full) */
      XT_CHECK(g->grid_type == (q == XT_NVDB_Q_INDEX || q == XT_NVDB_Q_AUTO ? (uint32_t)XT_NVDB_INDEX : g->grid_type));
      XT_CHECK_MSG(g->active_voxels == active, "active %llu, expected %zu", (unsigned long long)g->active_voxels, active);
      XT_CHECK(g->lo[0] == 0 && g->hi[0] == v->dim[0] - 1 && g->hi[2] == v->dim[2] - 1);
      XT_CHECK(g->labels == labels);
      XT_CHECK(xt_nvdb_mu(g, -1, 0, 0) == 0.0 && xt_nvdb_mu(g, v->dim[0], 0, 0) == 0.0);
      xt_vec3 a, b, c, d;
      xt_msg m2;
      XT_CHECK(xt_model_bounds(vm, &a, &b, &m2) == 0 && xt_model_bounds(nm, &c, &d, &m2) == 0);
      XT_CHECK(fabs(a.x - c.x) < 1e-9 && fabs(b.y - d.y) < 1e-9 && fabs(b.z - d.z) < 1e-9);
      xt_model_free(nm);
      xt_model_free(vm);
    }
  }
}

/* NanoVDB 32.4's GridBuilder prunes blocks whose values agree but for the last one (see
 * xt_nvdb_build.cpp): a leaf with a different (7,7,7) voxel, a lower node whose last 8^3 block
 * differs, and both at once. The converter repairs them; every voxel must survive. */
XT_TEST(builder_prune_repair) {
  for (int lq = 0; lq < 3; lq++) {
    const int labels = lq == 1, index = lq == 2; /* 2: mu in the index form */
    xt_volume *v;
    const double sp[3] = {1, 1, 1};
    XT_REQUIRE(xt_volume_create(136, 130, 129, sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL) == 0);
    if (labels) {
      v->materials = calloc(1, sizeof *v->materials);
      XT_REQUIRE(v->materials);
      v->materials->count = 6;
      for (int i = 0; i < 6; i++) v->materials->mu[i] = 0.01f * (float)i;
    }
    const float val[5] = {0.02f, 0.05f, 0.03f, 0.04f, 0.01f}; /* label ids 2, 5, 3, 4, 1 */
    for (int k = 0; k < 129; k++)
      for (int j = 0; j < 130; j++)
        for (int i = 0; i < 136; i++) {
          int c = -1;
          if (i < 128 && j < 128 && k < 128) c = (i >= 120 && j >= 120 && k >= 120) ? 1 : 0; /* lower node */
          if (i == 15 && j == 7 && k == 7) c = 2;                   /* a leaf in it, last voxel differs */
          if (i >= 128 && j < 8 && k < 8) c = (i == 135 && j == 7 && k == 7) ? 4 : 3; /* a lone leaf */
          const size_t at = (size_t)i + 136 * ((size_t)j + 130 * (size_t)k);
          if (labels) ((uint8_t *)v->data)[at] = (uint8_t)(c < 0 ? 0 : (int)lrintf(val[c] * 100));
          else ((float *)v->data)[at] = c < 0 ? 0.f : val[c];
        }
    xt_model *vm;
    XT_REQUIRE(xt_model_from_volume(v, "prune", &vm, NULL) == 0);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, index ? XT_NVDB_Q_INDEX : labels ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    size_t bad = 0;
    for (int k = 0; k < 129; k++)
      for (int j = 0; j < 130; j++)
        for (int i = 0; i < 136; i++) bad += xt_nvdb_mu(xt_model_nvdb(nm), i, j, k) != xt_volume_mu(v, i, j, k);
    XT_CHECK_MSG(bad == 0, "%s %s: %zu voxels lost to the builder's prune", labels ? "labels" : "mu",
                 xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), bad);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

/* The exactness: a NanoVDB render of a converted volume equals the dense render of that
 * volume (inactive voxels = background) to 1e-12 relative on every pixel. */
static void render_equal(int labels, int quant, double tol, int trials) {
  for (int t = 0; t < trials; t++) {
    const double bg = labels ? 0.0 : (t % 2 ? 0.0 : 0.002);
    xt_model *vm = tn_sparse_model(labels, 8, 72, labels ? 0.0025 : bg);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, quant, bg, tol, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    apply_tolerance(xt_model_volume(vm), (float)bg, (float)tol);
    xt_detector_mode mode = tmode(48 + rand() % 64, 40 + rand() % 64, tn_urand(0.5, 2.5));
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    double *d = render(vm, &g), *n = render(nm, &g), mx;
    XT_REQUIRE(d && n);
    const double w = max_rel(d, n, (size_t)mode.cols * mode.rows, &mx);
    XT_CHECK_MSG(w <= 1e-12 && mx > 0, "%s %s tol %g trial %d: max relative difference %.3g (frame max %.4g)",
                 labels ? "labels" : "dense", xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), tol, t, w, mx);
    free(d);
    free(n);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

XT_TEST(render_equals_dense_float) {
  srand(21);
  render_equal(0, XT_NVDB_Q_FLOAT, 0.0, 12);
}
/* The index form (an IndexGrid and its float channel): dense mu, with a tolerance, and labels. */
XT_TEST(render_equals_dense_index) {
  srand(25);
  render_equal(0, XT_NVDB_Q_INDEX, 0.0, 6);
  render_equal(0, XT_NVDB_Q_INDEX, 0.01, 4);
  render_equal(1, XT_NVDB_Q_INDEX, 0.0, 4);
}
XT_TEST(render_equals_dense_tolerance) {
  srand(22);
  render_equal(0, XT_NVDB_Q_FLOAT, 0.01, 8);
}
/* Long volumes: regions of empty upper nodes (128^3) and of the root's background (4096^3) too. */
XT_TEST(render_equals_dense_long) {
  srand(24);
  for (int a = 0; a < 3; a++) {
    tn_long_axis = a;
    render_equal(a == 1, a == 1 ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FLOAT, 0.0, 4);
    render_equal(a == 1, XT_NVDB_Q_INDEX, 0.0, 1);
  }
}

XT_TEST(render_equals_dense_labels) {
  srand(23);
  render_equal(1, XT_NVDB_Q_INT16, 0.0, 8);
  render_equal(1, XT_NVDB_Q_FP8, 0.0, 8);
  render_equal(1, XT_NVDB_Q_FP16, 0.0, 4);
}

/* Mixed scenes (issue 9 Deliver 5, issue 8 Deliver 6): a dense or label volume, a Gaussian mixture
 * and a NanoVDB grid, each with its own placement, render as the sum of the three rendered alone.
 * The decomposition is independent of the scene code: the grid's term is the render of the dense
 * volume it was converted from (equal to the grid's own render to 1e-12, above), the others are
 * each model alone; the float64 reference of the scene must equal that sum to 1e-12 relative on
 * every pixel, and the CPU backend (xt_proj, float32 frames) must equal it to float rounding. Each
 * of the three must attenuate some pixel of the frame, and some pixel must see all three. */
static xt_affine random_placement(double shift) {
  xt_affine rz = xt_aff_rot(2, tn_urand(-XT_PI, XT_PI)), rx = xt_aff_rot(0, tn_urand(-XT_PI, XT_PI));
  xt_affine r = xt_aff_compose(&rx, &rz);
  for (int a = 0; a < 3; a++) r.t[a] = tn_urand(-shift, shift);
  return r;
}

XT_TEST(mixed_scene_is_the_sum) {
  srand(51);
  for (int t = 0; t < 6; t++) {
    const int labels = t % 2; /* the voxel model: dense mu, or labels + table */
    xt_model *vm = tn_sparse_model(labels, 12, 48, labels ? 0.0025 : 0.0);
    xt_model *src = tn_sparse_model(!labels, 12, 48, labels ? 0.0 : 0.0025); /* the grid's source */
    xt_model *gm = random_mixture(30 + rand() % 40, 20, 1.0, 8.0, 4.8);
    XT_REQUIRE(vm && src && gm);
    gm->placement = random_placement(10);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(src, labels ? XT_NVDB_Q_FLOAT : XT_NVDB_Q_INT16, 0.0, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    xt_detector_mode mode = tmode(48 + rand() % 48, 40 + rand() % 48, tn_urand(1.2, 2.2));
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    const size_t np = (size_t)mode.cols * mode.rows;
    double *a = render(vm, &g), *b = render(gm, &g), *c = render(src, &g), *s = malloc(np * sizeof *s);
    float *p = malloc(np * sizeof *p);
    XT_REQUIRE(a && b && c && s && p);
    /* the scene, the grid first (the order models come in must not matter) */
    const xt_model *ms[3] = {nm, vm, gm};
    XT_REQUIRE(xt_ref_render_f64(ms, 3, &g, s, 0, &msg) == 0);
    xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
    xt_proj *pr;
    XT_REQUIRE(xt_proj_create(&po, &pr, &msg) == 0);
    for (int i = 0; i < 3; i++) XT_REQUIRE_MSG_(xt_proj_add_model(pr, ms[2 - i], &msg) == 0, msg);
    XT_REQUIRE_MSG_(xt_proj_render(pr, &g, p, &msg) == 0, msg);
    xt_proj_destroy(pr);
    double worst = 0, worst32 = 0, ma = 0, mb = 0, mc = 0;
    size_t all3 = 0;
    for (size_t i = 0; i < np; i++) {
      const double sum = a[i] + b[i] + c[i];
      const double e = fabs(s[i] - sum), e32 = fabs((double)p[i] - sum);
      const double r = sum > 0 ? e / sum : (e > 0 ? INFINITY : 0), r32 = sum > 0 ? e32 / sum : (e32 > 0 ? INFINITY : 0);
      if (!(r <= worst)) worst = r; /* NaN too */
      if (!(r32 <= worst32)) worst32 = r32;
      ma = fmax(ma, a[i]), mb = fmax(mb, b[i]), mc = fmax(mc, c[i]);
      all3 += a[i] > 0 && b[i] > 0 && c[i] > 0;
    }
    XT_CHECK_MSG(worst <= 1e-12, "trial %d (%s + gmm + nvdb %s): reference scene vs sum: %.3g relative", t,
                 labels ? "labels" : "dense", xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), worst);
    XT_CHECK_MSG(worst32 <= 0x1p-23, "trial %d: CPU backend scene vs sum: %.3g relative (float rounding: 6e-8)", t,
                 worst32);
    XT_CHECK_MSG(ma > 0 && mb > 0 && mc > 0 && all3 > 0,
                 "trial %d: each model in view (max %.3g %.3g %.3g), %zu pixels see all three", t, ma, mb, mc, all3);
    free(a), free(b), free(c), free(s), free(p);
    xt_model_free(nm);
    xt_model_free(vm);
    xt_model_free(src);
    xt_model_free(gm);
  }
}

/* Quantised mu: each type's render stays within its quantisation error of the Float render. */
XT_TEST(quantised_error) {
  srand(31);
  static const int qs[] = {XT_NVDB_Q_FP16, XT_NVDB_Q_FP8, XT_NVDB_Q_FP4, XT_NVDB_Q_FPN};
  static const double bound[] = {1e-4, 1e-2, 0.1, 0.05}; /* relative L2 of the frame */
  for (int t = 0; t < 3; t++) {
    xt_model *vm = tn_sparse_model(0, 20, 60, 0.0);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *fm = tn_nvdb_of(vm, XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
    XT_REQUIRE_MSG_(fm, msg);
    xt_detector_mode mode = tmode(64, 64, 1.5);
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    double *ref = render(fm, &g);
    XT_REQUIRE(ref);
    for (int k = 0; k < 4; k++) {
      xt_model *qm = tn_nvdb_of(vm, qs[k], 0.0, 0.0, &msg);
      XT_REQUIRE_MSG_(qm, msg);
      XT_CHECK(xt_model_nvdb(qm)->bytes < xt_model_nvdb(fm)->bytes);
      double *q = render(qm, &g), num = 0, den = 0;
      XT_REQUIRE(q);
      for (size_t i = 0; i < (size_t)mode.cols * mode.rows; i++) {
        num += (q[i] - ref[i]) * (q[i] - ref[i]);
        den += ref[i] * ref[i];
      }
      const double rel = sqrt(num / den);
      XT_CHECK_MSG(rel < bound[k], "%s: relative L2 %.3g vs Float (bound %g)", xt_nvdb_type_name(xt_model_nvdb(qm)->grid_type),
                   rel, bound[k]);
      free(q);
      xt_model_free(qm);
    }
    free(ref);
    xt_model_free(fm);
    xt_model_free(vm);
  }
}

/* ---- files ------------------------------------------------------------------------------------ */

static char scratch_dir[512];

static const char *scratch(const char *name, char *buf, size_t cap) {
  if (!scratch_dir[0]) {
    snprintf(scratch_dir, sizeof scratch_dir, "/tmp/xt_test_nvdb_%d", (int)getpid());
    mkdir(scratch_dir, 0700);
  }
  snprintf(buf, cap, "%s/%s", scratch_dir, name);
  return buf;
}

static long file_bytes(const char *path, unsigned char **data) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  *data = malloc((size_t)n + 1);
  if (!*data || fread(*data, 1, (size_t)n, f) != (size_t)n) n = -1;
  fclose(f);
  return n;
}

static int put_bytes(const char *path, const unsigned char *d, long n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(d, 1, (size_t)n, f) == (size_t)n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes the converter's grid of vm to path; returns the grid blob's offset in the file. */
static long write_grid(const xt_model *vm, int quant, const char *name, int zip, const char *path) {
  xt_nvdb_build_options o = {quant, 0.0, 0.0, 1e-3, name};
  uint32_t *w;
  uint64_t n;
  xt_msg msg;
  FILE *f = NULL;
  if (xt_nvdb_build(xt_model_volume(vm), &o, &w, &n, &msg) || !(f = fopen(path, "wb")) || xt_nvdb_write(f, w, n, zip, &msg) ||
      fclose(f) != 0) {
    fprintf(stderr, "  write_grid: %s\n", msg.text);
    return -1;
  }
  free(w);
  return 16 + 176 + (long)strlen(name) + 1;
}

XT_TEST(file_roundtrip_and_grid_names) {
  srand(41);
  char p1[600], p2[600], pz[600], pm[600];
  xt_model *a = tn_sparse_model(0, 16, 40, 0.0), *b = tn_sparse_model(1, 16, 40, 0.0025);
  XT_REQUIRE(a && b);
  XT_REQUIRE(write_grid(a, XT_NVDB_Q_FLOAT, "density", 0, scratch("a.nvdb", p1, sizeof p1)) > 0);
  XT_REQUIRE(write_grid(b, XT_NVDB_Q_FP8, "material", 0, scratch("b.nvdb", p2, sizeof p2)) > 0);
  XT_REQUIRE(write_grid(a, XT_NVDB_Q_FLOAT, "density", 1, scratch("z.nvdb", pz, sizeof pz)) > 0);
  /* two segments in one file: a multi-grid file as NanoVDB reads it */
  unsigned char *d1 = NULL, *d2 = NULL;
  long n1 = file_bytes(p1, &d1), n2 = file_bytes(p2, &d2);
  XT_REQUIRE(n1 > 0 && n2 > 0);
  unsigned char *cat = malloc((size_t)(n1 + n2));
  XT_REQUIRE(cat);
  memcpy(cat, d1, (size_t)n1);
  memcpy(cat + n1, d2, (size_t)n2);
  XT_REQUIRE(put_bytes(scratch("two.nvdb", pm, sizeof pm), cat, n1 + n2) == 0);
  free(cat);
  free(d1);
  free(d2);

  xt_detector_mode mode = tmode(40, 36, 2.0);
  xt_geometry g;
  XT_REQUIRE(rgeom(&mode, &g) == 0);
  xt_msg msg = {{0}};
  const char *paths[3] = {p1, pz, pm};
  for (int i = 0; i < 3; i++) { /* NONE, ZIP, and the first grid of the two-grid file */
    xt_model *m = NULL;
    xt_load_options lo = {.convert = XT_LOAD_MU};
    XT_REQUIRE_MSG_(xt_model_load(paths[i], &lo, NULL, &m, &msg) == 0, msg);
    XT_CHECK(m->kind == XT_MODEL_NVDB && strcmp(xt_model_nvdb(m)->grid_name, "density") == 0 && xt_model_nvdb(m)->has_record);
    m->placement = a->placement;
    double *r0 = render(a, &g), *r1 = render(m, &g), mx;
    XT_REQUIRE(r0 && r1);
    XT_CHECK_MSG(max_rel(r0, r1, (size_t)mode.cols * mode.rows, &mx) <= 1e-12, "%s", paths[i]);
    free(r0);
    free(r1);
    xt_model_free(m);
  }
  xt_model *m = NULL;
  xt_load_options lo = {.convert = XT_LOAD_MU, .grid = "material"};
  XT_REQUIRE_MSG_(xt_model_load(pm, &lo, "picked", &m, &msg) == 0, msg);
  XT_CHECK(xt_model_nvdb(m)->labels && xt_model_nvdb(m)->grid_type == XT_NVDB_FP8 && strcmp(m->name, "picked") == 0);
  XT_CHECK(xt_model_nvdb(m)->materials->count == xt_model_volume(b)->materials->count);
  xt_model_free(m);
  lo.grid = "nonesuch";
  XT_CHECK(xt_model_load(pm, &lo, NULL, &m, &msg) == XT_ENOTFOUND && m == NULL);
  XT_CHECK_MSG(strstr(msg.text, "\"density\", \"material\"") != NULL, "%s", msg.text);
  lo.grid = NULL;
  lo.convert = XT_LOAD_HU_TO_MU;
  XT_CHECK(xt_model_load(p1, &lo, NULL, &m, &msg) == XT_EINVAL && m == NULL);
  lo.convert = XT_LOAD_LABELS; /* the record says mu */
  XT_CHECK(xt_model_load(p1, &lo, NULL, &m, &msg) == XT_EINVAL && m == NULL);
  xt_model_free(a);
  xt_model_free(b);
}

static void put_u32(unsigned char *d, long off, uint32_t v) { memcpy(d + off, &v, 4); }

/* Loads the patched bytes; expects failure with `code` (0: any) and one line starting with the path
 * and containing `word`. */
static void expect_bad(const char *what, const unsigned char *d, long n, int code, const char *word) {
  char p[600];
  scratch("bad.nvdb", p, sizeof p);
  if (put_bytes(p, d, n)) {
    XT_CHECK_MSG(0, "%s: cannot write", what);
    return;
  }
  xt_model *m = (xt_model *)1;
  xt_msg msg = {{0}};
  xt_load_options lo = {.convert = XT_LOAD_MU};
  int rc = xt_model_load(p, &lo, NULL, &m, &msg);
  XT_CHECK_MSG(rc != 0 && (code == 0 || rc == code) && m == NULL, "%s: rc %d (want %d): %s", what, rc, code, msg.text);
  XT_CHECK_MSG(strncmp(msg.text, p, strlen(p)) == 0 && !strchr(msg.text, '\n'), "%s: message \"%s\"", what, msg.text);
  XT_CHECK_MSG(!word || strstr(msg.text, word), "%s: message \"%s\" lacks \"%s\"", what, msg.text, word);
  if (rc == 0) xt_model_free(m);
}

XT_TEST(bad_files) {
  srand(51);
  char p[600];
  xt_model *a = tn_sparse_model(1, 20, 30, 0.0025);
  XT_REQUIRE(a);
  const long blob = write_grid(a, XT_NVDB_Q_INT16, "labels", 0, scratch("good.nvdb", p, sizeof p));
  XT_REQUIRE(blob > 0);
  unsigned char *good;
  const long n = file_bytes(p, &good);
  XT_REQUIRE(n > blob + 800);
  unsigned char *d = malloc((size_t)n);
  XT_REQUIRE(d);
  const long cuts[] = {0, 9, 15, 16, 100, blob - 2, blob, blob + 300, n / 2, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "cut at %ld", cuts[i]);
    expect_bad(what, good, cuts[i], cuts[i] == 0 ? 0 : XT_ETRUNCATED, cuts[i] == 0 ? NULL : "truncated");
  }
#define PATCH(stmt, code, word)        \
  do {                                 \
    memcpy(d, good, (size_t)n);        \
    stmt;                              \
    expect_bad(#stmt, d, n, code, word); \
  } while (0)
  PATCH(d[0] ^= 0x20, XT_EFORMAT, "magic");
  PATCH(put_u32(d, 8, 31u << 21), XT_EUNSUPPORTED, "version 31.0.0");
  PATCH(put_u32(d, blob + 16, 33u << 21), XT_EUNSUPPORTED, "33.0.0");
  PATCH(d[blob + 300] ^= 1, XT_EFORMAT, "checksum mismatch"); /* a byte of the map */
  PATCH(put_u32(d, blob + 636, 2), XT_EUNSUPPORTED, "Double");   /* grid type */
  PATCH(put_u32(d, blob + 636, 4), XT_EUNSUPPORTED, "Int32");
  PATCH(put_u32(d, 14, 2), XT_EUNSUPPORTED, "BLOSC");
  {
    long rec = -1; /* the xtwin record's domain: index x up to a million */
    for (long i = blob; i + 8 <= n && rec < 0; i++)
      if (memcmp(good + i, XT_NVDB_RECORD_MAGIC, 8) == 0) rec = i;
    XT_REQUIRE(rec > 0);
    PATCH(put_u32(d, rec + 28, 1000000), XT_ERANGE, "absurd bounds");
    PATCH(put_u32(d, rec + 16, (uint32_t)-20000000), XT_ERANGE, "absurd bounds");
    PATCH(put_u32(d, rec + 48, 100000), XT_EFORMAT, "materials");
  }
  /* with the checksum disabled, broken structure is still caught by the walk */
  PATCH((put_u32(d, blob + 8, 0xffffffffu), put_u32(d, blob + 672 + 24, 0x7ffffff0u)), XT_EFORMAT, "root");
  PATCH((put_u32(d, blob + 8, 0xffffffffu), put_u32(d, blob + 672 + 32, 0)), XT_EFORMAT, "leaf nodes");
  PATCH((put_u32(d, blob + 8, 0xffffffffu), put_u32(d, blob + 296 + 88, 0), put_u32(d, blob + 296 + 92, 0)), XT_EFORMAT,
        "map");
  /* random byte flips past the header, checksum off: every outcome a clean load or a clean error
   * (ASan/UBSan builds turn a stray read into a failure) */
  for (int t = 0; t < 300; t++) {
    memcpy(d, good, (size_t)n);
    put_u32(d, blob + 8, 0xffffffffu);
    for (int k = 0; k < 1 + t % 4; k++) d[blob + 672 + rand() % (n - blob - 672)] ^= (unsigned char)(1 + rand() % 255);
    char pp[600];
    scratch("flip.nvdb", pp, sizeof pp);
    XT_REQUIRE(put_bytes(pp, d, n) == 0);
    xt_model *m = NULL;
    xt_msg msg = {{0}};
    if (xt_model_load(pp, NULL, NULL, &m, &msg) == 0) {
      xt_detector_mode mode = tmode(24, 20, 4.0);
      xt_geometry g;
      XT_REQUIRE(rgeom(&mode, &g) == 0);
      double *r = render(m, &g);
      free(r);
      xt_model_free(m);
    } else {
      XT_CHECK_MSG(strncmp(msg.text, pp, strlen(pp)) == 0, "flip %d: \"%s\"", t, msg.text);
    }
  }
  free(d);
  free(good);
  xt_model_free(a);
}

/* The index form's own structure: the value channel and every index into it are checked, so that
 * no read leaves the channel (the checksum is disabled in each patch: the walk must catch it). */
static uint64_t get_u64(const unsigned char *d, long off) {
  uint64_t v;
  memcpy(&v, d + off, 8);
  return v;
}
static void put_u64(unsigned char *d, long off, uint64_t v) { memcpy(d + off, &v, 8); }

XT_TEST(bad_index_grids) {
  srand(52);
  xt_model *a = tn_sparse_model(0, 20, 30, 0.0);
  XT_REQUIRE(a);
  xt_nvdb_build_options o = {XT_NVDB_Q_INDEX, 0.0, 0.0, 1e-3, NULL};
  uint32_t *w = NULL;
  uint64_t n = 0;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG_(xt_nvdb_build(xt_model_volume(a), &o, &w, &n, &msg) == 0, msg);
  unsigned char *good = (unsigned char *)w;
  XT_CHECK(get_u64(good, 632) == (8u | (uint64_t)19 << 32)); /* class IndexGrid (8), type Index (19) */
  const long meta = (long)get_u64(good, 640), chan = meta + (long)get_u64(good, meta);
  const uint64_t values = get_u64(good, meta + 8);
  const long leaf = 672 + (long)get_u64(good, 672); /* the tree's first leaf */
  XT_REQUIRE(values > 1 && get_u64(good, 656) == values && leaf > 672 && (uint64_t)leaf < n);
  struct {
    const char *what, *word;
    long at;
    uint64_t v;
    int u32;
  } bad[] = {
      {"channel length 1", "outside the value channel", meta + 8, 1, 0},
      {"channel beyond the grid", "outside the grid", meta + 8, n, 0},
      {"channel of class IndexArray", "not a float channel", meta + 24, 1, 1},
      {"channel of Int32", "not a float channel", meta + 28, 4, 1},
      {"leaf values from the channel's end", "outside the value channel", leaf + 88, values, 0},
      {"leaf values from 2^63", "outside the value channel", leaf + 88, (uint64_t)1 << 63, 0},
      {"background index", "background index", 672 + 64 + 32, values, 0},
      {"grid class FogVolume", "class", 632, 2, 1},
      {"no blind data", "value channel", 648, 0, 1},
      {"an Index grid of NanoVDB 32.6", "32.6", 16, (32u << 21) | (6u << 10), 1},
  };
  unsigned char *d = aligned_alloc(32, (size_t)((n + 31) & ~(uint64_t)31));
  XT_REQUIRE(d);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memcpy(d, good, n);
    put_u32(d, 8, 0xffffffffu);
    if (bad[i].u32) put_u32(d, bad[i].at, (uint32_t)bad[i].v);
    else put_u64(d, bad[i].at, bad[i].v);
    uint32_t *copy = aligned_alloc(32, (size_t)((n + 31) & ~(uint64_t)31));
    XT_REQUIRE(copy);
    memcpy(copy, d, n);
    xt_nvdb *g = NULL;
    xt_msg m2 = {{0}};
    const int rc = xt_nvdb_from_blob(copy, n, NULL, "bad index", &g, &m2);
    XT_CHECK_MSG(rc != 0 && !g && strstr(m2.text, bad[i].word) && strncmp(m2.text, "bad index", 9) == 0,
                 "%s: rc %d \"%s\"", bad[i].what, rc, m2.text);
    xt_nvdb_free(g);
  }
  /* the unpatched grid loads, and the channel's first entry is the background */
  {
    uint32_t *copy = aligned_alloc(32, (size_t)((n + 31) & ~(uint64_t)31));
    XT_REQUIRE(copy);
    memcpy(copy, good, n);
    xt_nvdb *g = NULL;
    XT_REQUIRE_MSG_(xt_nvdb_from_blob(copy, n, NULL, "good index", &g, &msg) == 0, msg);
    float bg0;
    memcpy(&bg0, good + chan, 4);
    XT_CHECK(g->grid_type == XT_NVDB_INDEX && bg0 == g->background && g->background == 0.f);
    xt_nvdb_free(g);
  }
  free(d);
  free(w);
  xt_model_free(a);
}

/* ---- an independent writer -------------------------------------------------------------------- */

/* pyopenvdb (Debian's python3-openvdb) writes a .vdb from a numpy array, Debian's nanovdb_convert
 * turns it into .nvdb (Float, and ZIP-compressed), and the grid must render like the same array as a
 * dense volume. OpenVDB's copyFromArray makes active tiles of constant 8^3 blocks, which our own
 * builder never does, so this also covers tiles. */
XT_TEST(independent_writer) {
  if (access("/usr/bin/nanovdb_convert", X_OK) != 0 ||
      system("/usr/bin/python3 -c 'import pyopenvdb, numpy' >/dev/null 2>&1") != 0) {
    printf("SKIP independent_writer: needs Debian's libnanovdb-tools (nanovdb_convert) and python3-openvdb "
           "(scripts/install-deps installs both)\n");
    return;
  }
  char raw[600], vdb[600], nv[600], nz[600], py[600], vdbo[600], nvo[600], cmd[8192];
  scratch("indo.vdb", vdbo, sizeof vdbo);
  scratch("indo.nvdb", nvo, sizeof nvo);
  scratch("ind.raw", raw, sizeof raw);
  scratch("ind.vdb", vdb, sizeof vdb);
  scratch("ind.nvdb", nv, sizeof nv);
  scratch("indz.nvdb", nz, sizeof nz);
  scratch("ind.py", py, sizeof py);
  /* the array: x fastest in the raw file, numpy axis 0 = x (pyopenvdb's convention) */
  const int nx = 37, ny = 29, nzz = 33;
  const double vox = 0.8;
  xt_volume *v;
  const double sp[3] = {vox, vox, vox};
  XT_REQUIRE(xt_volume_create(nx, ny, nzz, sp, XT_VOXEL_F32, &v, NULL) == 0);
  float *f = v->data;
  srand(61);
  for (int k = 0; k < nzz; k++)
    for (int j = 0; j < ny; j++)
      for (int i = 0; i < nx; i++) {
        double a = (i - 15.0) * (i - 15.0) + (j - 14.0) * (j - 14.0) + (k - 16.0) * (k - 16.0);
        double b = (i - 28.0) * (i - 28.0) + (j - 8.0) * (j - 8.0) + (k - 9.0) * (k - 9.0);
        float val = a < 110 ? 0.02f : 0.f;                    /* a uniform ball: tiles */
        if (b < 30) val = (float)tn_urand(0.01, 0.05);         /* a noisy one: leaves */
        f[i + nx * (j + ny * k)] = val;
      }
  FILE *fr = fopen(raw, "wb");
  XT_REQUIRE(fr && fwrite(f, sizeof(float), (size_t)nx * ny * nzz, fr) == (size_t)nx * ny * nzz);
  fclose(fr);
  FILE *fp = fopen(py, "w");
  XT_REQUIRE(fp);
  fprintf(fp,
          "import numpy, pyopenvdb\n"
          "a = numpy.fromfile('%s', dtype=numpy.float32).reshape(%d, %d, %d).transpose(2, 1, 0).copy()\n"
          "g = pyopenvdb.FloatGrid(0.0)\n"
          "g.copyFromArray(a)\n"
          "g.name = 'density'\n"
          "g.transform = pyopenvdb.createLinearTransform(voxelSize=%.17g)\n"
          "pyopenvdb.write('%s', grids=[g])\n"
          "h = pyopenvdb.FloatGrid(0.0)\n" /* the same array from index (-14, 6, -21) */
          "h.copyFromArray(a, ijk=(-14, 6, -21))\n"
          "h.name = 'density'\n"
          "pyopenvdb.write('%s', grids=[h])\n",
          raw, nzz, ny, nx, vox, vdb, vdbo);
  fclose(fp);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 %s && /usr/bin/nanovdb_convert -f %s %s >/dev/null && "
           "/usr/bin/nanovdb_convert -f -z %s %s >/dev/null && /usr/bin/nanovdb_convert -f %s %s >/dev/null",
           py, vdb, nv, vdb, nz, vdbo, nvo);
  XT_REQUIRE_MSG_(system(cmd) == 0, (xt_msg){"pyopenvdb / nanovdb_convert failed"});
  /* the dense twin: voxel centres at index * vox, as the OpenVDB transform says */
  v->index_to_model = xt_aff_identity();
  for (int a2 = 0; a2 < 3; a2++) v->index_to_model.m[a2][a2] = vox;
  xt_model *dm;
  XT_REQUIRE(xt_model_from_volume(v, "dense", &dm, NULL) == 0);
  const char *files[2] = {nv, nz};
  for (int i = 0; i < 2; i++) {
    xt_model *m = NULL;
    xt_msg msg = {{0}};
    XT_REQUIRE_MSG_(xt_model_load(files[i], NULL, NULL, &m, &msg) == 0, msg);
    XT_CHECK(xt_model_nvdb(m)->grid_type == XT_NVDB_FLOAT && !xt_model_nvdb(m)->has_record && !xt_model_nvdb(m)->labels);
    XT_CHECK_MSG(xt_model_nvdb(m)->nodes[1] > 0, "lower nodes %u", xt_model_nvdb(m)->nodes[1]);
    size_t bad = 0;
    for (int k = 0; k < nzz; k++)
      for (int j = 0; j < ny; j++)
        for (int i2 = 0; i2 < nx; i2++) bad += xt_nvdb_mu(xt_model_nvdb(m), i2, j, k) != f[i2 + nx * (j + ny * k)];
    XT_CHECK_MSG(bad == 0, "%s: %zu voxels differ", files[i], bad);
    for (int t = 0; t < 6; t++) {
      xt_detector_mode mode = tmode(56, 48, 1.2);
      xt_geometry g;
      XT_REQUIRE(rgeom(&mode, &g) == 0);
      dm->placement = xt_aff_identity();
      for (int a2 = 0; a2 < 3; a2++) dm->placement.t[a2] = tn_urand(-20, 0);
      m->placement = dm->placement;
      double *r0 = render(dm, &g), *r1 = render(m, &g), mx;
      XT_REQUIRE(r0 && r1);
      const double w = max_rel(r0, r1, (size_t)mode.cols * mode.rows, &mx);
      XT_CHECK_MSG(w <= 1e-12 && mx > 0, "%s pose %d: max relative difference %.3g", files[i], t, w);
      free(r0);
      free(r1);
    }
    xt_model_free(m);
  }
  /* The offset grid: a domain from negative and unaligned indices, decoded (the CUDA kind's dense
   * working set, XT_NVDB_TRAVERSAL=dense, takes the same runs) to the array's values, and to the
   * background (0) where the domain reaches beyond the array. */
  static const int off[3] = {-14, 6, -21};
  xt_model *mo = NULL;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG_(xt_model_load(nvo, NULL, NULL, &mo, &msg) == 0, msg);
  const xt_nvdb *go = xt_model_nvdb(mo);
  XT_CHECK_MSG(go->lo[0] < 0 && go->lo[0] % 8 != 0 && go->lo[1] % 8 != 0 && go->lo[2] < 0,
               "offset grid: domain from %d %d %d", go->lo[0], go->lo[1], go->lo[2]);
  const int dn[3] = {go->hi[0] - go->lo[0] + 1, go->hi[1] - go->lo[1] + 1, go->hi[2] - go->lo[2] + 1};
  float *dec = malloc(xt_nvdb_domain_voxels(go) * sizeof *dec);
  XT_REQUIRE(dec);
  for (size_t q = 0; q < xt_nvdb_domain_voxels(go); q++) dec[q] = NAN; /* an unwritten voxel fails */
  xt_nvdb_decode(go, dec);
  size_t bad = 0, inside = 0;
  for (int k = 0; k < dn[2]; k++)
    for (int j = 0; j < dn[1]; j++)
      for (int i2 = 0; i2 < dn[0]; i2++) {
        const int a[3] = {i2 + go->lo[0] - off[0], j + go->lo[1] - off[1], k + go->lo[2] - off[2]};
        const int in = a[0] >= 0 && a[0] < nx && a[1] >= 0 && a[1] < ny && a[2] >= 0 && a[2] < nzz;
        const float want = in ? f[a[0] + nx * (a[1] + ny * a[2])] : 0.f;
        inside += in;
        bad += !(dec[i2 + (size_t)dn[0] * (j + (size_t)dn[1] * k)] == want);
      }
  XT_CHECK_MSG(bad == 0 && inside > 0, "offset grid (domain from %d %d %d): %zu of %zu decoded voxels differ", go->lo[0],
               go->lo[1], go->lo[2], bad, (size_t)dn[0] * dn[1] * dn[2]);
  free(dec);
  xt_model_free(mo);
  xt_model_free(dm); /* frees f too */
}

/* ---- material channels ------------------------------------------------------------------------ */

/* Channel planes of model m on set cs (double reference), NULL on failure. */
static double *render_ch(const xt_model *m, const xt_chanset *cs, const xt_geometry *g) {
  const size_t np = (size_t)g->mode.cols * g->mode.rows * (size_t)cs->n;
  double *out = malloc(np * sizeof *out);
  const xt_model *ms[1] = {m};
  xt_msg msg;
  if (out && xt_ref_render_channels_f64(ms, 1, cs, g, out, 0, &msg)) {
    fprintf(stderr, "  render channels: %s\n", msg.text);
    free(out);
    return NULL;
  }
  return out;
}

/* A grid converted from a label volume has the label volume's channels (each label's composition),
 * one converted from a mu volume the dense volume's (HU classes at the volume's energy, which the
 * converter records): 1e-12 relative on every pixel of every plane, as the mono renders. */
XT_TEST(channels_equal_the_source_volume) {
  srand(31);
  for (int t = 0; t < 9; t++) {
    const int labels = t % 3 != 0;
    const int quant = labels ? (t % 3 == 1 ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FP8) : XT_NVDB_Q_FLOAT;
    const double bg = labels ? 0.0 : (t % 2 ? 0.0 : 0.002);
    xt_model *vm = tn_sparse_model(labels, 8, 56, bg);
    XT_REQUIRE(vm);
    if (labels) XT_REQUIRE(tn_default_materials(vm) == 0);
    else xt_model_volume(vm)->energy_kev = 70; /* not the default: the grid must carry it */
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, quant, bg, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    XT_CHECK(labels || xt_model_nvdb(nm)->energy_kev == 70);
    xt_chanset cs = {0}, cg = {0};
    XT_REQUIRE(xt_chanset_add_model(&cs, vm, NULL) == 0);
    XT_REQUIRE_MSG_(xt_chanset_add_model(&cg, nm, &msg) == 0, msg);
    XT_CHECK(cg.n == cs.n && memcmp(cg.basis, cs.basis, sizeof cs.basis) == 0);
    XT_CHECK(cs.n == (labels ? 8 : 3));
    xt_detector_mode mode = tmode(40 + rand() % 48, 36 + rand() % 48, tn_urand(0.6, 2.0));
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    double *d = render_ch(vm, &cs, &g), *n = render_ch(nm, &cs, &g), mx;
    XT_REQUIRE(d && n);
    const double w = max_rel(d, n, (size_t)mode.cols * mode.rows * (size_t)cs.n, &mx);
    XT_CHECK_MSG(w <= 1e-12 && mx > 0, "%s %s trial %d: max relative difference %.3g (max %.4g)",
                 labels ? "labels" : "dense", xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), t, w, mx);
    free(d);
    free(n);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

/* A scene of every kind (label volume, mixtures with and without labels, label and mu grids): the
 * channels reproduce the mono line integral at the tables' energy, sum_m (mu/rho)_m A_m = L,
 * through the CPU backend (float planes), on every pixel. */
XT_TEST(mixed_scene_channels_reproduce_mono) {
  srand(32);
  xt_model *ms[5] = {NULL};
  const int dim[3] = {48, 48, 48};
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &ms[0], NULL) == 0);
  ms[1] = labelled_mixture(200, 1, 50, 2, 12, -30);
  ms[2] = labelled_mixture(200, 0, 50, 2, 12, 30);
  XT_REQUIRE(ms[1] && ms[2]);
  xt_model *lv = tn_sparse_model(1, 24, 40, 0.0), *dv = tn_sparse_model(0, 24, 40, 0.0);
  XT_REQUIRE(lv && dv && tn_default_materials(lv) == 0);
  xt_msg msg = {{0}};
  ms[3] = tn_nvdb_of(lv, XT_NVDB_Q_INT16, 0.0, 0.0, &msg);
  XT_REQUIRE_MSG_(ms[3], msg);
  ms[4] = tn_nvdb_of(dv, XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
  XT_REQUIRE_MSG_(ms[4], msg);
  xt_proj *p = NULL;
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  XT_REQUIRE(xt_proj_create(&po, &p, NULL) == 0);
  for (int i = 0; i < 5; i++) XT_REQUIRE(xt_proj_add_model(p, ms[i], NULL) == 0);
  xt_chanset cs;
  XT_REQUIRE_MSG_(xt_proj_channels(p, &cs, &msg) == 0, msg);
  XT_CHECK(cs.n == 8);
  double mr[XT_MAX_CHANNELS];
  XT_REQUIRE(xt_chanset_mass_atten(&cs, XT_DEFAULT_ENERGY_KEV, mr, NULL) == 0);
  const xt_detector_mode *mode = xt_mode_find("fd20-128");
  for (int a = 0; a < 3; a++) {
    xt_geometry g;
    xt_pose pose = xt_pose_default(mode);
    pose.primary_deg = 50.0 * a;
    pose.secondary_deg = a == 1 ? 15 : 0;
    XT_REQUIRE(xt_geom_compute(&pose, mode, &g, NULL) == 0);
    const size_t plane = (size_t)mode->rows * mode->cols;
    float *L = malloc(sizeof *L * plane), *A = malloc(sizeof *A * plane * cs.n);
    XT_REQUIRE(L && A);
    XT_REQUIRE(xt_proj_render(p, &g, L, NULL) == 0);
    XT_REQUIRE_MSG_(xt_proj_render_channels(p, &g, A, &msg) == 0, msg);
    double err = 0, lmax = 0;
    for (size_t k = 0; k < plane; k++) {
      double s = 0;
      for (int c = 0; c < cs.n; c++) s += mr[c] * A[plane * c + k];
      lmax = fmax(lmax, L[k]);
      err = fmax(err, fabs(s - L[k]));
    }
    XT_CHECK_MSG(err <= 2e-6 * lmax && lmax > 1, "pose %d: max |sum - mono| = %g of %g", a, err, lmax);
    free(L);
    free(A);
  }
  xt_proj_destroy(p);
  for (int i = 0; i < 5; i++) xt_model_free(ms[i]);
  xt_model_free(lv);
  xt_model_free(dv);
}

/* ---- the brick traversal (projectors/xt_nvdb_bricks.h, issue 29) ------------------------------ */

/* The largest |mu| of a brick pool: one cell of it is the floor of the scale the double marches are
 * compared on (a ray that only grazes content, at a tie of planes or a hull's corner, integrates to
 * nearly 0, where both walks keep the rounding of s ~ 100 cells: ~1e-15 absolute). */
static double pool_mu_max(const xt_nvdb_bricks_host *h) {
  double m = 0;
  for (size_t i = 0; i < h->nbricks * 512; i++) m = fmax(m, fabs((double)h->pool[i]));
  for (size_t i = 0; i < h->npalette; i++) m = fmax(m, fabs((double)h->palette[i]));
  return m;
}

/* bricks7's content hull (xt_hull.h, bricks8's too) on grid nm: each slab must hold every domain voxel whose mu
 * differs from the background (found here voxel by voxel) and be tight (within twice the margin).
 * Rays lying in planes of each slab's direction (n.p constant), through the voxel that is extreme
 * along n: `depth` cells (of n.p) inside the extreme (grazing: they cross that voxel's corner or edge)
 * and outside it (inside the margin, then beyond it: missing the hull), integrate to the exact
 * reference's walk to 1e-12 relative (double march, on pool_mu_max's scale) and within float
 * rounding (the kernel's float march); the rays beyond the margin take no step at all (the clip did skip them), and the grazing
 * ones meet content (they test something). */
static void bricks_hull_check(const xt_model *nm, const char *what) {
  const xt_nvdb *g = xt_model_nvdb(nm);
  xt_nvdb_bricks_host h;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG_(xt_nvdb_bricks_build(g, &h, &msg) == 0, msg);
  static const int dirs[XT_HULL_DIRS][3] = XT_HULL_DIR_LIST;
  const int n[3] = {g->hi[0] - g->lo[0] + 1, g->hi[1] - g->lo[1] + 1, g->hi[2] - g->lo[2] + 1};
  double lo[XT_HULL_DIRS], hi[XT_HULL_DIRS];
  int vlo[XT_HULL_DIRS][3], vhi[XT_HULL_DIRS][3];
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    lo[j] = INFINITY;
    hi[j] = -INFINITY;
  }
  size_t content = 0;
  for (int k = 0; k < n[2]; k++)
    for (int jy = 0; jy < n[1]; jy++)
      for (int i = 0; i < n[0]; i++) {
        const float v = (float)xt_nvdb_mu(g, i + g->lo[0], jy + g->lo[1], k + g->lo[2]);
        if (memcmp(&v, &h.b.bgmu, sizeof v) == 0) continue;
        content++;
        const int c[3] = {i, jy, k};
        for (int j = 0; j < XT_HULL_DIRS; j++) { /* n.p over the voxel's cube [c, c + 1) */
          double a = 0, b = 0;
          for (int x = 0; x < 3; x++) {
            a += dirs[j][x] * (c[x] + (dirs[j][x] < 0));
            b += dirs[j][x] * (c[x] + (dirs[j][x] > 0));
          }
          if (a < lo[j]) {
            lo[j] = a;
            memcpy(vlo[j], c, sizeof c);
          }
          if (b > hi[j]) {
            hi[j] = b;
            memcpy(vhi[j], c, sizeof c);
          }
        }
      }
  XT_CHECK_MSG(h.b.hull == (content > 0), "%s: hull %d with %zu content voxels", what, h.b.hull, content);
  if (!content) {
    xt_nvdb_bricks_free(&h);
    return;
  }
  for (int j = 0; j < XT_HULL_DIRS; j++) {
    const double m2 = 2 * XT_HULL_MARGIN * (abs(dirs[j][0]) + abs(dirs[j][1]) + abs(dirs[j][2]));
    XT_CHECK_MSG(h.b.hlo[j] <= lo[j] && h.b.hlo[j] >= lo[j] - m2 && h.b.hhi[j] >= hi[j] && h.b.hhi[j] <= hi[j] + m2,
                 "%s: slab %d [%.4f, %.4f] for content over [%g, %g]", what, j, h.b.hlo[j], h.b.hhi[j], lo[j], hi[j]);
  }
  const int mode = XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION | XT_BR_HULL;
  const double mu1 = pool_mu_max(&h);
  /* n.p offsets from the extreme, outwards: grazing inside, inside the margin, beyond it */
  static const double depth[4] = {-0.3, -0.02, 0.02, 1.0};
  const double big = 2.0 * (n[0] + n[1] + n[2]);
  double worst64 = 0, worst32 = 0, mx = 0;
  int rays = 0, met = 0, missed = 0, stepped = 0;
  for (int j = 0; j < XT_HULL_DIRS; j++)
    for (int side = 0; side < 2; side++) /* 0: the lo face (direction -n), 1: the hi face */
      for (int d = 0; d < 4; d++)
        for (int r = 0; r < 3; r++) {
          double nn[3], n2 = 0, p[3], q[3], o[3], ql = 0;
          const int *c = side ? vhi[j] : vlo[j];
          for (int x = 0; x < 3; x++) {
            nn[x] = side ? dirs[j][x] : -dirs[j][x];
            n2 += nn[x] * nn[x];
          }
          for (int x = 0; x < 3; x++) { /* the extreme corner (a face centre where n_x = 0), moved along n */
            p[x] = c[x] + (nn[x] > 0 ? 1.0 : (nn[x] < 0 ? 0.0 : 0.5)) + depth[d] * nn[x] / n2;
            q[x] = tn_urand(-1, 1);
          }
          const double qn = (q[0] * nn[0] + q[1] * nn[1] + q[2] * nn[2]) / n2;
          for (int x = 0; x < 3; x++) {
            q[x] -= qn * nn[x]; /* in the plane: n.q = 0 */
            ql += q[x] * q[x];
          }
          ql = sqrt(ql);
          if (ql < 1e-3) continue;
          for (int x = 0; x < 3; x++) {
            q[x] /= ql;
            o[x] = p[x] - big * q[x];
          }
          double s0, s1, inv[3] = {0, 0, 0};
          if (!xt_clip_box_inv_f64(o, q, n, 2 * big, &s0, &s1, inv)) continue;
          rays++;
          double ref = 0;
          xt__nvdb_traverse(g, o, q, n, s0, s1, NULL, &ref);
          int st64 = 0, st32 = 0;
          const double b64 = xt_nvdb_bricks3_ray_f64(&h.b, o, q, s0, s1, &st64, inv, mode);
          const double b32 = (double)xt_nvdb_bricks3_ray_f32(&h.b, o, q, s0, s1, &st32, inv, mode);
          int st64b8 = 0, st32b8 = 0; /* bricks8: the same clip, the dense-shaped march */
          const double b64b8 = xt_nvdb_bricks8_ray_f64(&h.b, o, q, s0, s1, &st64b8, inv);
          const double b32b8 = (double)xt_nvdb_bricks8_ray_f32(&h.b, o, q, s0, s1, &st32b8, inv);
          const double sc = fmax(fmax(fmax(fabs(ref), fabs(b64)), fabs(b64b8)), mu1);
          if (sc > 0) worst64 = fmax(worst64, fmax(fabs(ref - b64), fabs(ref - b64b8)) / sc);
          worst32 = fmax(worst32, fmax(fabs(ref - b32), fabs(ref - b32b8)));
          mx = fmax(mx, fabs(ref));
          const double bgint = (double)h.b.bgmu * (s1 - s0);
          if (d == 0) met += fabs(ref - bgint) > 1e-9 * fmax(1.0, fabs(ref));
          if (d == 3) {
            missed++;
            stepped += st64 != 0 || st32 != 0 || st64b8 != 0 || st32b8 != 0;
          }
        }
  XT_CHECK_MSG(worst64 <= 1e-12, "%s: bricks7/8 grazing rays, double march vs the reference: max relative %.3g", what,
               worst64);
  XT_CHECK_MSG(worst32 <= 1e-4 * fmax(mx, 1e-3), "%s: bricks7/8 grazing rays, float march: max %.3g (largest %.3g)",
               what, worst32, mx);
  XT_CHECK_MSG(stepped == 0 && missed > 0, "%s: %d of %d rays outside the hull stepped into the grid", what, stepped,
               missed);
  XT_CHECK_MSG(met > rays / 8, "%s: %d grazing rays of %d met content", what, met, rays);
  xt_nvdb_bricks_free(&h);
}

/* One grid: its brick pool holds every domain voxel as xt_nvdb_mu reads it; rays through it (random,
 * axis-parallel, in voxel planes) integrate, in the double march, to the exact reference's walk to
 * 1e-12 relative (of the integral, or of one cell of the largest mu: pool_mu_max), and in the float
 * march (the CUDA kernel's own code) within float rounding:
 * relative L2 < 1e-5 and max |diff| <= 1e-4 of the largest integral, the GPU tests' bound. The same
 * for each loop shape of the march (XT_NVDB_TRAVERSAL=bricks2 .. bricks8), of which bricks2 ..
 * bricks4 must also take the first march's number of steps on every ray, and bricks8 the same
 * number of cells in both precisions (its trip count is settled in double); and bricks7's content
 * hull (bricks_hull_check). */
static void bricks_check(const xt_model *nm, int rays, const char *what) {
  bricks_hull_check(nm, what);
  const xt_nvdb *g = xt_model_nvdb(nm);
  xt_nvdb_bricks_host h;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG_(xt_nvdb_bricks_build(g, &h, &msg) == 0, msg);
  const int n[3] = {g->hi[0] - g->lo[0] + 1, g->hi[1] - g->lo[1] + 1, g->hi[2] - g->lo[2] + 1};
  size_t bad = 0, bad_decode = 0;
  float *dec = malloc(xt_nvdb_domain_voxels(g) * sizeof *dec); /* the dense working set's values */
  XT_REQUIRE(dec);
  for (size_t q = 0; q < xt_nvdb_domain_voxels(g); q++) dec[q] = NAN; /* an unwritten voxel fails */
  xt_nvdb_decode(g, dec);
  for (int k = 0; k < n[2]; k++)
    for (int j = 0; j < n[1]; j++)
      for (int i = 0; i < n[0]; i++) {
        const int c[3] = {i + g->lo[0], j + g->lo[1], k + g->lo[2]};
        int cb[3];
        for (int a = 0; a < 3; a++) cb[a] = xt_nvdb_coarse(c[a]);
        const int32_t e = h.table[(size_t)(cb[0] - h.b.c0[0]) +
                                  (size_t)h.b.nc[0] * ((size_t)(cb[1] - h.b.c0[1]) + (size_t)h.b.nc[1] * (size_t)(cb[2] - h.b.c0[2]))];
        const float v = e >= 0 ? h.pool[(size_t)e * 512 + (size_t)(c[0] - 8 * cb[0]) + 8 * (size_t)(c[1] - 8 * cb[1]) +
                                        64 * (size_t)(c[2] - 8 * cb[2])]
                               : h.palette[-1 - e];
        bad += (double)v != xt_nvdb_mu(g, c[0], c[1], c[2]);
        bad_decode += memcmp(&v, &dec[i + (size_t)n[0] * (j + (size_t)n[1] * k)], sizeof v) != 0;
      }
  free(dec);
  XT_CHECK_MSG(bad == 0, "%s: %zu voxels of the brick pool differ from the grid", what, bad);
  XT_CHECK_MSG(bad_decode == 0, "%s: %zu decoded voxels differ from the brick pool (domain from %d %d %d)", what,
               bad_decode, g->lo[0], g->lo[1], g->lo[2]);
  XT_CHECK_MSG(h.nbricks == g->nodes[0], "%s: %zu bricks for %u leaves", what, h.nbricks, g->nodes[0]);
  double worst64 = 0, mx = 0, se = 0, sr = 0, worst32 = 0;
  const double mu1 = pool_mu_max(&h);
  enum { NV = 8 }; /* bricks, bricks2 .. bricks8 */
  double worst64v[NV] = {0}, worst32v[NV] = {0}, sev[NV] = {0};
  int badsteps[NV] = {0};
  int hit = 0, badcells = 0;
  for (int r = 0; r < rays; r++) {
    double p0[3], p1[3], o[3], q[3], len = 0;
    const int kind = r % 4; /* 0,1 random; 2 axis-parallel; 3 in a voxel plane (integer coordinate) */
    for (int a = 0; a < 3; a++) {
      p0[a] = tn_urand(-0.3, 1.3) * n[a];
      p1[a] = tn_urand(-0.3, 1.3) * n[a];
    }
    if (kind == 2) {
      const int ax = rand() % 3;
      for (int a = 0; a < 3; a++)
        if (a != ax) p1[a] = p0[a];
    }
    if (kind == 3) p0[rand() % 3] = p1[rand() % 3] = (double)(rand() % (n[0] + 1));
    if (r % 8 == 7) { /* a diagonal from voxel centres: planes of two or three axes cross at one t,
                       * so an inner plane of one axis ties with another's brick exit (bricks3) */
      const int skip = rand() % 4, big = 2 * (n[0] + n[1] + n[2]);
      for (int a = 0; a < 3; a++) {
        p0[a] = (double)(rand() % (n[a] + 8) - 4) + 0.5;
        p1[a] = p0[a] + (a == skip ? 0.0 : (rand() % 2 ? big : -big));
      }
    }
    for (int a = 0; a < 3; a++) len += (p1[a] - p0[a]) * (p1[a] - p0[a]);
    len = sqrt(len);
    if (len < 1e-3) continue;
    for (int a = 0; a < 3; a++) {
      o[a] = p0[a];
      q[a] = (p1[a] - p0[a]) / len;
    }
    double s0, s1;
    if (!xt_clip_box_f64(o, q, n, len, &s0, &s1)) continue;
    hit++;
    double ref = 0;
    xt__nvdb_traverse(g, o, q, n, s0, s1, NULL, &ref);
    /* the first march and its other loop shapes (bricks2 .. bricks7): every one to the reference,
     * each but bricks5 .. bricks7 (which start at the content box or hull, in a block of their own,
     * and bricks6 and bricks7 cross whole regions) in the same number of steps as the first */
    int st64[NV] = {0}, st32[NV] = {0};
    double b64[NV], b32[NV];
    b64[0] = xt_nvdb_bricks_ray_f64(&h.b, o, q, s0, s1, &st64[0]);
    b32[0] = (double)xt_nvdb_bricks_ray_f32(&h.b, o, q, s0, s1, &st32[0]);
    b64[1] = xt_nvdb_bricks2_ray_f64(&h.b, o, q, s0, s1, &st64[1]);
    b32[1] = (double)xt_nvdb_bricks2_ray_f32(&h.b, o, q, s0, s1, &st32[1]);
    static const int mode[5] = {0, XT_BR_NEST, XT_BR_NEST | XT_BR_CLIP, XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION,
                                XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION | XT_BR_HULL};
    double inv[3] = {0, 0, 0}, c0, c1; /* bricks7: the set-up takes 1 / q from the domain's clip, as the kernel */
    XT_REQUIRE(xt_clip_box_inv_f64(o, q, n, len, &c0, &c1, inv) && c0 == s0 && c1 == s1);
    for (int m = 0; m < 5; m++) {
      const double *iv = mode[m] & XT_BR_HULL ? inv : NULL;
      b64[2 + m] = xt_nvdb_bricks3_ray_f64(&h.b, o, q, s0, s1, &st64[2 + m], iv, mode[m]);
      b32[2 + m] = (double)xt_nvdb_bricks3_ray_f32(&h.b, o, q, s0, s1, &st32[2 + m], iv, mode[m]);
    }
    /* bricks8: bricks7's clip, then the dense kernel's march: its trip count, settled in double, is
     * the same in both precisions */
    b64[7] = xt_nvdb_bricks8_ray_f64(&h.b, o, q, s0, s1, &st64[7], inv);
    b32[7] = (double)xt_nvdb_bricks8_ray_f32(&h.b, o, q, s0, s1, &st32[7], inv);
    badcells += st64[7] != st32[7];
    for (int v = 0; v < NV; v++) {
      const double sc = fmax(fmax(fabs(ref), fabs(b64[v])), mu1);
      if (sc > 0) worst64v[v] = fmax(worst64v[v], fabs(ref - b64[v]) / sc);
      worst32v[v] = fmax(worst32v[v], fabs(ref - b32[v]));
      sev[v] += (ref - b32[v]) * (ref - b32[v]);
      if (v < 4 && st64[v] != st64[0]) badsteps[v]++;
    }
    mx = fmax(mx, fabs(ref));
    sr += ref * ref;
  }
  worst64 = worst64v[0];
  worst32 = worst32v[0];
  se = sev[0];
  for (int v = 1; v < NV; v++) {
    XT_CHECK_MSG(worst64v[v] <= 1e-12, "%s: bricks%d double march vs the reference: max relative difference %.3g", what,
                 v + 1, worst64v[v]);
    XT_CHECK_MSG(worst32v[v] <= 1e-4 * mx && sqrt(sev[v]) <= 1e-5 * sqrt(sr),
                 "%s: bricks%d float march vs the reference: max %.3g of the largest integral, relative L2 %.3g", what,
                 v + 1, worst32v[v] / mx, sqrt(sev[v] / sr));
    XT_CHECK_MSG(badsteps[v] == 0, "%s: bricks%d: %d rays in a different number of steps than bricks", what, v + 1,
                 badsteps[v]);
  }
  XT_CHECK_MSG(badcells == 0, "%s: bricks8: %d rays of different cell counts in float and double", what, badcells);
  XT_CHECK_MSG(hit > rays / 4 && mx > 0, "%s: %d of %d rays hit (max integral %g)", what, hit, rays, mx);
  XT_CHECK_MSG(worst64 <= 1e-12, "%s: double march vs the reference: max relative difference %.3g", what, worst64);
  XT_CHECK_MSG(worst32 <= 1e-4 * mx && sqrt(se) <= 1e-5 * sqrt(sr),
               "%s: float march vs the reference: max %.3g of the largest integral, relative L2 %.3g", what,
               worst32 / mx, sqrt(se / sr));
  xt_nvdb_bricks_free(&h);
}

XT_TEST(bricks_equal_reference) {
  srand(2901);
  static const int quants[] = {XT_NVDB_Q_FLOAT, XT_NVDB_Q_FP8, XT_NVDB_Q_FP16, XT_NVDB_Q_FPN};
  for (int t = 0; t < 8; t++) {
    const int labels = t >= 6;
    const double bg = labels ? 0.0 : (t % 2 ? 0.0 : 0.002);
    xt_model *vm = tn_sparse_model(labels, 8, 72, labels ? 0.0025 : bg);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    const int quant = labels ? (t == 6 ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FP8) : quants[t % 4];
    xt_model *nm = tn_nvdb_of(vm, quant, bg, t == 3 ? 0.01 : 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    char what[64];
    snprintf(what, sizeof what, "trial %d (%s %s)", t, labels ? "labels" : "mu", xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type));
    bricks_check(nm, 600, what);
    xt_model_free(nm);
    if (t < 4 || t == 7) { /* the index form of the same volume (mu, a tolerance, labels) */
      nm = tn_nvdb_of(vm, XT_NVDB_Q_INDEX, bg, t == 3 ? 0.01 : 0.0, &msg);
      XT_REQUIRE_MSG_(nm, msg);
      snprintf(what, sizeof what, "trial %d (%s index)", t, labels ? "labels" : "mu");
      bricks_check(nm, 400, what);
      xt_model_free(nm);
    }
    xt_model_free(vm);
  }
}

/* Long grids: rays across empty upper-node slots (128^3 tiles) and the root's background, which
 * the brick march crosses block by block. */
XT_TEST(bricks_equal_reference_long) {
  srand(2902);
  for (int a = 0; a < 3; a++) {
    tn_long_axis = a;
    xt_model *vm = tn_sparse_model(a == 1, 8, 72, a == 1 ? 0.0025 : 0.0);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, a == 1 ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    char what[32];
    snprintf(what, sizeof what, "long axis %d", a);
    bricks_check(nm, 400, what);
    xt_model_free(nm);
    nm = tn_nvdb_of(vm, XT_NVDB_Q_INDEX, 0.0, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    snprintf(what, sizeof what, "long axis %d (index)", a);
    bricks_check(nm, 300, what);
    xt_model_free(nm);
    xt_model_free(vm);
  }
  tn_long_axis = -1;
}

XT_TEST(bricks7_hull_grazing) {
  srand(2903);
  for (int t = 0; t < 8; t++) {
    const int labels = t >= 5;
    const double bg = t % 2 ? 0.0 : 0.002;
    xt_model *vm = tn_inner_model(labels, bg, t % 3 == 2);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    const int quant = labels ? XT_NVDB_Q_INT16 : (t < 2 ? XT_NVDB_Q_FLOAT : XT_NVDB_Q_INDEX);
    xt_model *nm = tn_nvdb_of(vm, quant, labels ? 0.0 : bg, 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    char what[48];
    snprintf(what, sizeof what, "hull trial %d (%s %s)", t, labels ? "labels" : "mu", xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type));
    bricks_check(nm, 300, what); /* the hull's grazing rays, and random rays through every march */
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

/* bricks8's march has no exit test: a rounding swap of two crossings within rounding of the end may
 * take one step past the domain, whose value must still be read from the table and the pool
 * (xt_nvdb_bricks_flat.inc: the table index clamped, the brick offset wrapped). Here the arrays are
 * copies inside a margin of NaN (table entries naming a NaN palette entry, NaN floats around the
 * pool), so a read outside them makes the integral NaN. Grids of 64^3 voxels (domain faces on block
 * boundaries, where a step past the face leaves the table) and of 8..72 per axis. Rays: out through
 * a face within 1e-6 cells of an inner plane of the other axes (where the swap happens: tens of
 * steps out of the table per grid, found by instrumenting the march), through the box's corners,
 * edges and faces along diagonals, nearly in a plane (the trip count's settle) and random; each to
 * the reference as bricks_check (the nearly-in-plane ones to bricks7, below). */
XT_TEST(bricks8_reads_in_bounds) {
  srand(2904);
  for (int t = 0; t < 6; t++) {
    const int labels = t == 5, sz = t < 3 ? 64 : 8;
    xt_model *vm = tn_sparse_model(labels, sz, t < 3 ? 64 : 72, labels ? 0.0025 : (t % 2 ? 0.0 : 0.002));
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, labels ? XT_NVDB_Q_INT16 : (t == 1 ? XT_NVDB_Q_INDEX : XT_NVDB_Q_FLOAT),
                              labels ? 0.0 : (t % 2 ? 0.0 : 0.002), 0.0, &msg);
    XT_REQUIRE_MSG_(nm, msg);
    const xt_nvdb *g = xt_model_nvdb(nm);
    xt_nvdb_bricks_host h;
    XT_REQUIRE_MSG_(xt_nvdb_bricks_build(g, &h, &msg) == 0, msg);
    const int n[3] = {g->hi[0] - g->lo[0] + 1, g->hi[1] - g->lo[1] + 1, g->hi[2] - g->lo[2] + 1};
    enum { GT = 4096, GP = 2048 }; /* margins: table entries, pool floats */
    int32_t *tab = malloc((h.ntable + 2 * GT) * sizeof *tab);
    float *pool = malloc((h.nbricks * 512 + 2 * GP) * sizeof *pool), *pal = malloc((h.npalette + 1) * sizeof *pal);
    XT_REQUIRE(tab && pool && pal);
    for (size_t i = 0; i < h.ntable + 2 * GT; i++)
      tab[i] = i < GT || i >= GT + h.ntable ? -1 - (int32_t)h.npalette : h.table[i - GT];
    for (size_t i = 0; i < h.nbricks * 512 + 2 * GP; i++)
      pool[i] = i < GP || i >= GP + h.nbricks * 512 ? NAN : h.pool[i - GP];
    memcpy(pal, h.palette, h.npalette * sizeof *pal);
    pal[h.npalette] = NAN;
    xt_nvdb_bricks b = h.b;
    b.table = tab + GT;
    b.pool = pool + GP;
    b.palette = pal;
    const double mu1 = pool_mu_max(&h), big = 2.0 * (n[0] + n[1] + n[2]);
    double worst64 = 0, worst32 = 0, mx = 0;
    int nan = 0, hit = 0;
    for (int r = 0; r < 8000; r++) {
      double p[3], q[3], o[3], ql = 0;
      const int kind = r % 5 < 2 ? 0 : r % 5 - 1;
      if (kind == 0) { /* out through a face of axis ax where the other axes are within 1e-6 cells of
                        * an inner plane: the march's float t (~1e-5 cells of rounding) may swap
                        * that plane's crossing with the face's, the step past the domain */
        const int ax = rand() % 3;
        for (int a = 0; a < 3; a++) {
          q[a] = (rand() % 2 ? 1.0 : -1.0) * tn_urand(0.2, 1.0);
          p[a] = a == ax ? (q[a] > 0 ? n[a] : 0.0)
                         : rand() % (n[a] - 1) + 1.0 + tn_urand(-1, 1) * (rand() % 2 ? 1e-6 : 1e-7);
        }
      } else if (kind == 3) { /* nearly in an inner plane of axis ax (q ~ 1e-17, as a 90 degree pose's
                               * map gives), crossing it at p: one ulp of o + s q there is ~100 cells
                               * of s, so only the planes' parameters settle the count (ray_setup) */
        const int ax = rand() % 3;
        for (int a = 0; a < 3; a++) {
          q[a] = a == ax ? (rand() % 2 ? 1.0 : -1.0) * tn_urand(1e-18, 1e-16) : tn_urand(-1, 1);
          p[a] = a == ax ? (double)(1 + rand() % (n[a] - 1)) : tn_urand(0, n[a]);
        }
      } else {
        for (int a = 0; a < 3; a++) { /* 1: through the box's corners, edges and faces, diagonals; 2: random */
          const int at = rand() % 3;
          p[a] = kind == 2 ? tn_urand(0, n[a]) : (at == 0 ? 0.0 : (at == 1 ? rand() % n[a] + 0.5 : n[a]));
          q[a] = kind == 2 ? tn_urand(-1, 1) : (rand() % 3 == 0 && a ? 0.0 : (rand() % 2 ? 1.0 : -1.0));
        }
      }
      for (int a = 0; a < 3; a++) ql += q[a] * q[a];
      if (ql == 0) continue;
      ql = sqrt(ql);
      for (int a = 0; a < 3; a++) {
        q[a] /= ql;
        o[a] = p[a] - big * q[a];
      }
      /* ends: past the box, at p, just before it, or (nearly in a plane) within 60 cells of p */
      const double len = big + (kind == 3 ? tn_urand(-60, 60) : (r % 7 == 0 ? 0.0 : (r % 7 == 1 ? -1e-9 : big)));
      double s0, s1, inv[3] = {0, 0, 0};
      if (!xt_clip_box_inv_f64(o, q, n, len, &s0, &s1, inv)) continue;
      hit++;
      /* nearly in a plane, the oracle is bricks7 (its double march): the reference, after a
       * constant region, places the ray by floor(o + s q), whose last ulp is there ~100 cells of s,
       * where the brick marches place it by the planes' parameters (both within the problem's
       * conditioning; elsewhere they agree to 1e-12) */
      double ref = 0;
      if (kind == 3)
        ref = xt_nvdb_bricks3_ray_f64(&h.b, o, q, s0, s1, NULL, inv,
                                      XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION | XT_BR_HULL);
      else
        xt__nvdb_traverse(g, o, q, n, s0, s1, NULL, &ref);
      const double b64 = xt_nvdb_bricks8_ray_f64(&b, o, q, s0, s1, NULL, inv);
      const double b32 = (double)xt_nvdb_bricks8_ray_f32(&b, o, q, s0, s1, NULL, inv);
      nan += !isfinite(b64) || !isfinite(b32);
      const double sc = fmax(fmax(fabs(ref), fabs(b64)), mu1);
      if (sc > 0 && isfinite(b64)) worst64 = fmax(worst64, fabs(ref - b64) / sc);
      if (isfinite(b32)) worst32 = fmax(worst32, fabs(ref - b32));
      mx = fmax(mx, fabs(ref));
    }
    XT_CHECK_MSG(nan == 0, "trial %d (%dx%dx%d): %d of %d bricks8 rays read outside the table or pool", t, n[0], n[1],
                 n[2], nan, hit);
    XT_CHECK_MSG(worst64 <= 1e-12, "trial %d: bricks8 double march vs the reference: max relative %.3g", t, worst64);
    XT_CHECK_MSG(worst32 <= 1e-4 * fmax(mx, 1e-3), "trial %d: bricks8 float march: max %.3g (largest %.3g)", t, worst32,
                 mx);
    XT_CHECK_MSG(hit > 1000, "trial %d: %d rays hit", t, hit);
    free(tab);
    free(pool);
    free(pal);
    xt_nvdb_bricks_free(&h);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

XT_TEST_MAIN(XT_ENTRY(voxels_roundtrip) XT_ENTRY(builder_prune_repair) XT_ENTRY(render_equals_dense_float) XT_ENTRY(render_equals_dense_index) XT_ENTRY(render_equals_dense_tolerance) XT_ENTRY(render_equals_dense_long)
                 XT_ENTRY(render_equals_dense_labels) XT_ENTRY(mixed_scene_is_the_sum) XT_ENTRY(quantised_error)
                     XT_ENTRY(file_roundtrip_and_grid_names) XT_ENTRY(bad_files) XT_ENTRY(bad_index_grids) XT_ENTRY(independent_writer)
                         XT_ENTRY(channels_equal_the_source_volume) XT_ENTRY(mixed_scene_channels_reproduce_mono)
                             XT_ENTRY(bricks_equal_reference) XT_ENTRY(bricks_equal_reference_long)
                                 XT_ENTRY(bricks7_hull_grazing) XT_ENTRY(bricks8_reads_in_bounds))
