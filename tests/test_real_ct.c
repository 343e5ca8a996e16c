/* A CT's background (models/xt_ct_body.h) and the compact model forms on a real patient (issue 29).
 *
 * ct_body_synthetic: a phantom whose answer is known from its geometry alone - a water cylinder
 * (the patient) with a lung (-850 HU) joined to the air above it by a trachea, a separate table
 * slab, and air with noise: everything outside the cylinder must become the background, the
 * cylinder with its lung and trachea must stay bit for bit, and the report must equal a recount.
 *
 * The real_ct_* tests use the head CT of Debian's invesalius-examples, made readable by
 * scripts/real-ct (env XT_REAL_CT_SCRIPT, XT_REAL_CT_DIR); without the package they say so and the
 * binary exits 77 (ctest: skipped). Oracles: the classified dense volume itself (the grid must hold
 * it voxel for voxel), and its double-precision render (the grid's render must equal it to 1e-12
 * relative on every pixel, the bound test_nvdb uses for converted volumes).
 *
 * real_ct_gmm_fit: the fitter's defaults on the classified CT at half resolution (CI time), within
 * 1/20 of the dense float bytes; oracle: the voxel model's own CPU renders at nine angles. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_ct_body.h"
#include "xt_fit.h"
#include "xt_gmm.h"
#include "xt_hu.h"
#include "xt_load.h"
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"
#include "xt_proj.h"
#include "xt_test.h"

XT_TEST(ct_body_synthetic) {
  const int n[3] = {40, 40, 24};
  const double sp[3] = {0.8, 0.9, 1.5};
  xt_volume *v = NULL;
  XT_REQUIRE(xt_volume_create(n[0], n[1], n[2], sp, XT_VOXEL_F32, &v, NULL) == 0);
  float *f = v->data;
  const double cx = 20, cy = 21, R = 12, thr = 0.01;
  uint8_t *inside = calloc(xt_volume_voxels(v), 1);
  XT_REQUIRE(inside);
  srand(29);
  for (int k = 0; k < n[2]; k++)
    for (int j = 0; j < n[1]; j++)
      for (int i = 0; i < n[0]; i++) {
        const size_t p = (size_t)i + (size_t)n[0] * ((size_t)j + (size_t)n[1] * (size_t)k);
        const double r2 = (i - cx) * (i - cx) + (j - cy) * (j - cy);
        float mu = (float)(0.0002 + 0.0004 * rand() / RAND_MAX); /* air with noise: never exactly 0 */
        if (j >= 2 && j < 4) mu = 0.03f;                        /* the table: a slab apart from the patient */
        if (k >= 2 && k < 22 && r2 <= R * R) {
          inside[p] = 1;
          mu = 0.02f; /* water */
          const double dl = sqrt(r2 + (k - 10.0) * (k - 10.0));
          if (dl <= 4) mu = 0.003f;                  /* lung, below the threshold */
          if (k > 10 && r2 <= 1.0) mu = 0.0005f;     /* trachea: lung to the air above the patient */
        }
        f[p] = mu;
      }
  float *before = malloc(v->nbytes);
  XT_REQUIRE(before);
  memcpy(before, f, v->nbytes);
  xt_ct_body_report r;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_ct_body_classify(v, thr, 0.0, &r, &msg) == 0, "%s", msg.text);
  size_t bad_in = 0, bad_out = 0, outside = 0, body = 0;
  double mx = 0, sum = 0, mass = 0, dropped = 0;
  const double vox = sp[0] * sp[1] * sp[2];
  for (size_t p = 0; p < xt_volume_voxels(v); p++) {
    mass += fabs(before[p]) * vox;
    body += inside[p] && before[p] >= thr;
    if (inside[p]) {
      bad_in += f[p] != before[p];
    } else {
      outside++;
      bad_out += f[p] != 0.0f;
      mx = fmax(mx, before[p]);
      sum += before[p];
      dropped += before[p] * vox;
    }
  }
  XT_CHECK_MSG(bad_in == 0, "%zu voxels of the patient (lung and trachea included) changed", bad_in);
  XT_CHECK_MSG(bad_out == 0, "%zu voxels outside the patient (air, table) kept", bad_out);
  XT_CHECK(r.voxels == xt_volume_voxels(v));
  XT_CHECK_MSG(r.body == body, "body %zu, want %zu", r.body, body);
  XT_CHECK_MSG(r.outside == outside && r.changed == outside, "outside %zu changed %zu, want %zu", r.outside, r.changed,
               outside);
  XT_CHECK_NEAR(r.max_abs_dmu, mx, 1e-12);
  XT_CHECK_NEAR(r.mean_abs_dmu, sum / (double)xt_volume_voxels(v), 1e-12);
  XT_CHECK_NEAR(r.mass_dropped / r.mass, dropped / mass, 1e-9);
  XT_CHECK(r.mass_dropped > 0);
  /* the line both front ends print (xt_ct_body_format), its figures from this test's recount */
  char line[512], want[160];
  XT_CHECK(xt_ct_body_format(&r, -500, line, sizeof line) < (int)sizeof line);
  snprintf(want, sizeof want, ">= -500 HU = %.6g /mm), %.1f%% of the voxels, %.1f%% changed", thr,
           100.0 * (double)outside / (double)xt_volume_voxels(v), 100.0 * (double)outside / (double)xt_volume_voxels(v));
  static const char head[] = "background: outside the patient (body: largest part ";
  XT_CHECK_MSG(strncmp(line, head, sizeof head - 1) == 0 && strstr(line, want),
               "%s (want ...%s...)", line, want);
  snprintf(want, sizeof want, "line-integral mass dropped %.3g%%", 100 * dropped / mass);
  XT_CHECK_MSG(strstr(line, want) != NULL, "%s (want ...%s)", line, want);
  /* labels and a non-finite threshold are refused, the volume untouched */
  XT_CHECK(xt_ct_body_classify(v, NAN, 0.0, &r, &msg) == XT_EINVAL && strstr(msg.text, "finite"));
  free(before);
  free(inside);
  xt_volume_free(v);
}

/* ---- the real head CT ------------------------------------------------------------------------ */

static char ct_path[4096];

/* The real CT as HU -> mu at 60 keV, the converter's way (xtwin nvdb-convert --convert hu). */
static xt_volume *load_ct(void) {
  xt_load_options lo = {.convert = XT_LOAD_HU_TO_MU, .energy_kev = 60};
  xt_volume *v = NULL;
  xt_msg msg = {{0}};
  if (xt_volume_load(ct_path, &lo, &v, &msg)) fprintf(stderr, "  %s: %s\n", ct_path, msg.text);
  return v;
}

static xt_nvdb *grid_of(const xt_volume *v, int quant, uint64_t *bytes) {
  xt_nvdb_build_options o = {quant, 0.0, 0.0, 1e-4, NULL};
  uint32_t *w = NULL;
  xt_msg msg = {{0}};
  xt_nvdb *g = NULL;
  if (xt_nvdb_build(v, &o, &w, bytes, &msg) || xt_nvdb_from_blob(w, *bytes, NULL, "real CT grid", &g, &msg)) {
    fprintf(stderr, "  build: %s\n", msg.text);
    return NULL;
  }
  return g;
}

static double frac(uint64_t bytes, const xt_volume *v) { return (double)bytes / (double)v->nbytes; }

/* The measurement and its targets (docs/BENCHMARKS.md, "A real head CT"). */
XT_TEST(real_ct_bytes) {
  xt_volume *v = load_ct();
  XT_REQUIRE(v);
  uint64_t b_raw = 0, b_float = 0, b_fp8 = 0;
  xt_nvdb *g = grid_of(v, XT_NVDB_Q_FLOAT, &b_raw);
  XT_REQUIRE(g);
  xt_nvdb_free(g);
  xt_hu_calib cal;
  xt_ct_body_report r;
  xt_msg msg = {{0}};
  XT_REQUIRE(xt_hu_calib_make(XT_HU_BILINEAR, 60, 0, &cal, &msg) == 0);
  XT_REQUIRE_MSG(xt_ct_body_classify(v, xt_hu_calib_mu(&cal, -500), 0.0, &r, &msg) == 0, "%s", msg.text);
  XT_REQUIRE((g = grid_of(v, XT_NVDB_Q_FLOAT, &b_float)));
  xt_nvdb_free(g);
  XT_REQUIRE((g = grid_of(v, XT_NVDB_Q_FP8, &b_fp8)));
  xt_nvdb_free(g);
  printf("  real CT: as loaded Float %.1f%%; classified Float %.1f%%, Fp8 %.1f%% of the dense float bytes; "
         "body %.1f%%, outside %.1f%% of the voxels; max |dmu| %.4g /mm, mean %.3g /mm, mass dropped %.2f%%\n",
         100 * frac(b_raw, v), 100 * frac(b_float, v), 100 * frac(b_fp8, v), 100.0 * (double)r.body / (double)r.voxels,
         100.0 * (double)r.outside / (double)r.voxels, r.max_abs_dmu, r.mean_abs_dmu, 100 * r.mass_dropped / r.mass);
  /* the problem: as loaded, the grid is bigger than the dense copy (air noise is active) */
  XT_CHECK_MSG(frac(b_raw, v) > 1.0, "unclassified Float %.3f", frac(b_raw, v));
  /* Fp8 meets the 15 %; Float misses its 40 %: the head alone needs 5,483 8^3 leaves
   * (41.5 % of the dense bytes in leaves), so this bound guards the measured 43.0 % */
  XT_CHECK_MSG(frac(b_float, v) <= 0.44, "classified Float %.3f of dense", frac(b_float, v));
  XT_CHECK_MSG(frac(b_fp8, v) <= 0.15, "classified Fp8 %.3f of dense", frac(b_fp8, v));
  /* the Float target with no flag: the default form, checked in real_ct_exact */
  /* what is dropped is the head rest, its padding and the air: a few % of the mass, never the head */
  XT_CHECK_MSG(r.body > r.voxels / 4 && r.mass_dropped < 0.12 * r.mass, "body %zu of %zu voxels, mass dropped %.3f",
               r.body, r.voxels, r.mass_dropped / r.mass);
  xt_volume_free(v);
}

/* The grid holds the classified volume exactly: voxel for voxel, and in projection - NanoVDB's
 * Float grid, and the converter's default for mu (--quant auto: the index form on a CT), which
 * must also meet the bytes target for exact values, <= 40 % of the dense float bytes. */
XT_TEST(real_ct_exact) {
  xt_volume *v = load_ct();
  XT_REQUIRE(v);
  xt_hu_calib cal;
  xt_ct_body_report r;
  xt_msg msg = {{0}};
  XT_REQUIRE(xt_hu_calib_make(XT_HU_BILINEAR, 60, 0, &cal, &msg) == 0);
  XT_REQUIRE(xt_ct_body_classify(v, xt_hu_calib_mu(&cal, -500), 0.0, &r, &msg) == 0);
  xt_model *dm = NULL;
  XT_REQUIRE(xt_model_from_volume(v, "cranium", &dm, &msg) == 0); /* owns v */
  xt_vec3 lo, hi;
  XT_REQUIRE(xt_model_bounds(dm, &lo, &hi, &msg) == 0);
  const double c[3] = {0.5 * (lo.x + hi.x), 0.5 * (lo.y + hi.y), 0.5 * (lo.z + hi.z)};
  for (int a = 0; a < 3; a++) dm->placement.t[a] = -c[a];
  const double angles[3][2] = {{0, 0}, {90, 0}, {35, 25}};
  double *ref[3] = {NULL, NULL, NULL};
  xt_detector_mode mode = xt_mode_custom("test", 96, 80, 3.0, 3.0, 800.0, 1200.0);
  const size_t np = (size_t)mode.cols * mode.rows;
  xt_geometry geo[3];
  for (int t = 0; t < 3; t++) {
    xt_pose p = xt_pose_default(&mode);
    p.primary_deg = angles[t][0];
    p.secondary_deg = angles[t][1];
    XT_REQUIRE(xt_geom_compute(&p, &mode, &geo[t], NULL) == 0);
    ref[t] = malloc(np * sizeof *ref[t]);
    XT_REQUIRE(ref[t]);
    const xt_model *m1[1] = {dm};
    XT_REQUIRE(xt_ref_render_f64(m1, 1, &geo[t], ref[t], 0, &msg) == 0);
  }
  /* Float (NanoVDB's 8^3 float leaves) and the index form (the converter's default for a CT) */
  for (int q = 0; q < 2; q++) {
    uint64_t bytes = 0;
    xt_nvdb *g = grid_of(v, q ? XT_NVDB_Q_AUTO : XT_NVDB_Q_FLOAT, &bytes);
    XT_REQUIRE(g);
    const char *tn = xt_nvdb_type_name(g->grid_type);
    printf("  real CT, classified: %s %s %.1f%% of the dense float bytes\n", q ? "the default form," : "", tn,
           100 * frac(bytes, v));
    if (q)
      XT_CHECK_MSG(g->grid_type == XT_NVDB_INDEX && frac(bytes, v) <= 0.40, "default form %s %.3f of dense", tn,
                   frac(bytes, v));
    size_t bad = 0;
    for (int k = 0; k < v->dim[2]; k++)
      for (int j = 0; j < v->dim[1]; j++)
        for (int i = 0; i < v->dim[0]; i++) bad += xt_nvdb_mu(g, i, j, k) != xt_volume_mu(v, i, j, k);
    XT_CHECK_MSG(bad == 0, "%s: %zu voxels of the grid differ from the classified volume", tn, bad);
    xt_model *nm = NULL;
    XT_REQUIRE(xt_model_from_nvdb(g, "cranium", &nm, &msg) == 0);
    for (int a = 0; a < 3; a++) nm->placement.t[a] = -c[a];
    double *b = malloc(np * sizeof *b);
    XT_REQUIRE(b);
    for (int t = 0; t < 3; t++) {
      const xt_model *m2[1] = {nm};
      XT_REQUIRE(xt_ref_render_f64(m2, 1, &geo[t], b, 0, &msg) == 0);
      double w = 0, mx = 0;
      for (size_t i = 0; i < np; i++) {
        const double s = fmax(fabs(ref[t][i]), fabs(b[i]));
        mx = fmax(mx, s);
        if (s > 0) w = fmax(w, fabs(ref[t][i] - b[i]) / s);
      }
      XT_CHECK_MSG(w <= 1e-12 && mx > 1.0, "%s angle %g/%g: max relative difference %.3g (frame max %.4g)", tn,
                   angles[t][0], angles[t][1], w, mx);
    }
    free(b);
    xt_model_free(nm);
  }
  for (int t = 0; t < 3; t++) free(ref[t]);
  xt_model_free(dm);
}

/* The classified CT averaged over 2 x 2 x 2 blocks: 128 x 128 x 54 voxels of 1.91 x 1.91 x 3 mm,
 * the same head and the same cut faces at an eighth of the fit's work. */
static xt_volume *half_ct(const xt_volume *v) {
  xt_volume *h = NULL;
  const int n[3] = {v->dim[0] / 2, v->dim[1] / 2, v->dim[2] / 2};
  const double sp[3] = {2 * v->spacing[0], 2 * v->spacing[1], 2 * v->spacing[2]};
  if (xt_volume_create(n[0], n[1], n[2], sp, XT_VOXEL_F32, &h, NULL)) return NULL;
  const float *a = v->data;
  float *b = h->data;
  for (int k = 0; k < n[2]; k++)
    for (int j = 0; j < n[1]; j++)
      for (int i = 0; i < n[0]; i++) {
        double s = 0;
        for (int d = 0; d < 8; d++)
          s += a[(size_t)(2 * i + (d & 1)) +
                 (size_t)v->dim[0] * ((size_t)(2 * j + ((d >> 1) & 1)) + (size_t)v->dim[1] * (2 * k + (d >> 2)))];
        b[(size_t)i + (size_t)n[0] * ((size_t)j + (size_t)n[1] * k)] = (float)(s / 8);
      }
  /* voxel (i,j,k) of h is centred where (2i + 0.5, 2j + 0.5, 2k + 0.5) of v is */
  for (int r = 0; r < 3; r++) {
    h->index_to_model.t[r] = v->index_to_model.t[r];
    for (int c = 0; c < 3; c++) {
      h->index_to_model.m[r][c] = 2 * v->index_to_model.m[r][c];
      h->index_to_model.t[r] += 0.5 * v->index_to_model.m[r][c];
    }
  }
  return h;
}

/* Issue 29's GMM target is >= 40 dB at every one of the nine angles at <= 1/20 of the dense
 * bytes (docs/BENCHMARKS.md, "Gaussian mixtures on a real patient"). The full CT's default fit is
 * minutes of CPU; this runs the same defaults (classified, the 8-voxel margin) at half resolution
 * with 40 iterations instead of 150 and a 128^2 report: measured 38.63 dB worst (2026-12-07); the
 * same fit without the margin (--margin 0, the fitter before) 24.91 dB worst (the cut neck's spilled
 * mass). */
#define REAL_CT_GMM_BAR 37.5
XT_TEST(real_ct_gmm_fit) {
  xt_volume *full = load_ct();
  XT_REQUIRE(full);
  xt_hu_calib cal;
  xt_ct_body_report br;
  xt_msg msg = {{0}};
  XT_REQUIRE(xt_hu_calib_make(XT_HU_BILINEAR, 60, 0, &cal, &msg) == 0);
  XT_REQUIRE(xt_ct_body_classify(full, xt_hu_calib_mu(&cal, -500), 0.0, &br, &msg) == 0);
  xt_volume *v = half_ct(full);
  xt_volume_free(full);
  XT_REQUIRE(v);
  xt_fit_options o = xt_fit_default_options();
  /* the most Gaussians whose native file (128-byte header, 48 bytes each) is 1/20 of the dense bytes */
  o.budget = (int)((v->nbytes / 20 - 128) / 48);
  o.iters = 40;
  o.engine = XT_FIT_CPU;
  xt_gmm *g = NULL;
  xt_fit_result r;
  XT_REQUIRE_MSG(xt_fit_volume(v, &o, &g, &r, &msg) == 0, "%s", msg.text);
  const double ratio = (double)v->nbytes / (double)xt_gmm_file_bytes(g);
  XT_CHECK_MSG(ratio >= 20, "%zu bytes against %zu dense", xt_gmm_file_bytes(g), v->nbytes);
  XT_CHECK(r.grid[2] == v->dim[2] + 2 * XT_FIT_MARGIN_DEFAULT); /* the cut faces got their margin */
  xt_model *vm = NULL, *gm = NULL;
  XT_REQUIRE(xt_model_from_volume(v, "cranium", &vm, &msg) == 0); /* owns v */
  XT_REQUIRE(xt_model_from_gmm(g, "fitted", &gm, &msg) == 0);    /* owns g */
  xt_vec3 lo, hi;
  XT_REQUIRE(xt_model_bounds(vm, &lo, &hi, &msg) == 0);
  vm->placement.t[0] = -0.5 * (lo.x + hi.x);
  vm->placement.t[1] = -0.5 * (lo.y + hi.y);
  vm->placement.t[2] = -0.5 * (lo.z + hi.z);
  gm->placement = vm->placement;
  double ps[9], ss[9], worst = 1e9;
  XT_REQUIRE_MSG(xt_fit_report(vm, gm, XT_BACKEND_CPU, "thesis", 128, ps, ss, &msg) == 0, "%s", msg.text);
  printf("  real CT at half resolution: %zu Gaussians (1/%.1f of the dense bytes), 3D PSNR %.2f -> %.2f dB, "
         "%.1f s; 2D PSNR at 128^2:",
         r.count, ratio, r.psnr3d_init, r.psnr3d, r.seconds);
  for (int i = 0; i < 9; i++) {
    printf(" %.2f", ps[i]);
    worst = fmin(worst, ps[i]);
  }
  printf("\n");
  XT_CHECK_MSG(worst >= REAL_CT_GMM_BAR, "worst 2D PSNR %.2f dB, the bar %.1f dB", worst, REAL_CT_GMM_BAR);
  xt_model_free(gm);
  xt_model_free(vm);
}

int main(int argc, char **argv) {
  static const xt_test_entry tests[] = {XT_ENTRY(ct_body_synthetic) XT_ENTRY(real_ct_bytes) XT_ENTRY(real_ct_exact)
                                                  XT_ENTRY(real_ct_gmm_fit)};
  const int n = (int)(sizeof tests / sizeof tests[0]);
  const char *script = getenv("XT_REAL_CT_SCRIPT"), *dir = getenv("XT_REAL_CT_DIR");
  int have = 0;
  if (script && dir) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' '%s'", script, dir);
    const int st = system(cmd);
    have = st == 0;
    snprintf(ct_path, sizeof ct_path, "%s/cranium.mhd", dir);
  }
  if (!have) {
    /* the synthetic test still runs; the real ones are skipped, and so is the binary */
    const int rc = xt_test_main_(tests, 1, argc, argv);
    if (rc) return rc;
    printf("SKIP real_ct_*: the real CT is unavailable (Debian package invesalius-examples; scripts/real-ct says why)\n");
    return 77;
  }
  return xt_test_main_(tests, n, argc, argv);
}
