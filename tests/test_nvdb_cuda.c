/* GPU tests of the NanoVDB kind (projectors/proj_nvdb.cu) against the float64 CPU reference
 * (proj_cpu_nvdb.c, itself equal to the dense reference to 1e-12: test_nvdb.c).
 *
 * Sparse random grids of every value type (Float, Fp4, Fp8, Fp16, FpN; Int16 and Fp8 labels) under
 * random poses, rays in voxel planes included; long grids whose rays cross empty upper-node slots
 * and the root's background; the head phantom at the benchmark's angles; scenes mixing dense,
 * label and NanoVDB models, and with a Gaussian mixture too (the pipeline's three kinds adding into
 * one frame; test_nvdb's mixed_scene_is_the_sum holds the CPU reference of such scenes equal to the
 * sum of its models rendered alone); the batch entry point; grids whose content sits well inside
 * their box (the brick march's content hull, bricks7); the dense working set's switches between
 * grids; the traversal names. Every test runs under the traversal XT_NVDB_TRAVERSAL names (dense
 * by default; tree, bricks .. bricks8, dense-each).
 * Each frame is poisoned with NaN first, so an unwritten pixel fails. Pass: relative L2 < 1e-5
 * and max |gpu - ref| <= 1e-4 of the frame's max.
 *
 * Labelled `gpu`: CI (no GPU) excludes it; without a usable device it skips (xt_test_cuda.h).
 * XT_CUDA_TEST_QUICK=1 shrinks the sizes (compute-sanitizer runs). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_proj_cuda.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_gmm.h"
#include "xt_test_gpu.h"
#include "xt_test_nvdb.h"

static int quick(void) {
  const char *q = getenv("XT_CUDA_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

static xt_detector_mode tmode(int cols, int rows, double pitch) {
  xt_detector_mode m = xt_mode_custom("test", cols, rows, pitch, pitch * tn_urand(0.8, 1.25), 800.0, 1200.0);
  return m;
}

static int rgeom(const xt_detector_mode *mode, xt_geometry *g) {
  xt_pose p = xt_pose_default(mode);
  p.primary_deg = rand() % 4 == 0 ? 90.0 * (rand() % 4 - 1) : tn_urand(-180, 180);
  p.secondary_deg = rand() % 4 == 0 ? 0.0 : tn_urand(-40, 40);
  p.detector_rot_deg = rand() % 3 == 0 ? 0.0 : tn_urand(-30, 30);
  p.sod_mm = tn_urand(600, 900);
  p.sid_mm = p.sod_mm + tn_urand(250, 500);
  p.table_mm = xt_v3(tn_urand(-15, 15), tn_urand(-15, 15), tn_urand(-15, 15));
  return xt_geom_compute(&p, mode, g, NULL);
}

/* Renders models on the GPU (one projector) and checks the frame against the reference. */
static int check_scene(const char *what, xt_model **ms, int nm, const xt_geometry *g) {
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p;
  xt_msg msg;
  if (xt_proj_create(&po, &p, &msg)) {
    fprintf(stderr, "  %s: %s\n", what, msg.text);
    return 1;
  }
  int fail = 0;
  for (int i = 0; i < nm && !fail; i++)
    if (xt_proj_add_model(p, ms[i], &msg)) {
      fprintf(stderr, "  %s: %s\n", what, msg.text);
      fail = 1;
    }
  float *out = poisoned((size_t)g->mode.cols * g->mode.rows);
  if (!fail && out && xt_proj_render(p, g, out, &msg)) {
    fprintf(stderr, "  %s: %s\n", what, msg.text);
    fail = 1;
  }
  if (!fail && out) fail = compare(what, (const xt_model *const *)ms, nm, g, out);
  free(out);
  xt_proj_destroy(p);
  return fail || !out;
}

/* Whether the double-precision reference frame of one model has any pixel above zero. */
static int ref_sees(const xt_model *m, const xt_geometry *g) {
  const size_t np = (size_t)g->mode.cols * g->mode.rows;
  double *ref = malloc(sizeof(double) * np);
  xt_msg msg;
  int hit = 0;
  if (ref && xt_ref_render_f64(&m, 1, g, ref, 0, &msg) == 0)
    for (size_t i = 0; i < np && !hit; i++) hit = ref[i] > 0;
  free(ref);
  return hit;
}

/* One grid alone on a random detector and pose (check_scene), named "<kind> <grid type> trial t". */
static void check_random_view(xt_model *nm, const char *kind, int t) {
  xt_detector_mode mode = tmode(64 + rand() % 96, 48 + rand() % 96, tn_urand(0.6, 2.5));
  xt_geometry g;
  /* A random pose can leave a long grid's content outside a small field (the comparison fails on
   * an empty frame, rightly): redraw until the reference sees some of it. */
  int tries = 0;
  do XT_REQUIRE(rgeom(&mode, &g) == 0);
  while (!ref_sees(nm, &g) && ++tries < 50);
  XT_REQUIRE(tries < 50);
  char what[96];
  snprintf(what, sizeof what, "%s %s trial %d", kind, xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), t);
  XT_CHECK_MSG(check_scene(what, &nm, 1, &g) == 0, "%s", what);
}

static void random_trials(int labels, int quant, int trials, int lo, int hi) {
  for (int t = 0; t < trials; t++) {
    const double bg = labels ? 0.0 : (t % 2 ? 0.0 : 0.002);
    xt_model *vm = tn_sparse_model(labels, lo, hi, labels ? 0.0025 : bg);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, quant, bg, t % 3 == 2 ? 0.01 : 0.0, &msg);
    XT_CHECK_MSG(nm, "%s", msg.text);
    if (!nm) {
      xt_model_free(vm);
      return;
    }
    check_random_view(nm, labels ? "labels" : "mu", t);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

XT_TEST(random_float) {
  srand(101);
  random_trials(0, XT_NVDB_Q_FLOAT, quick() ? 3 : 16, 8, 72);
}

/* The index form (an IndexGrid and its float channel, the converter's default for sparse mu). */
XT_TEST(random_index) {
  srand(105);
  random_trials(0, XT_NVDB_Q_INDEX, quick() ? 2 : 8, 8, 72);
  random_trials(1, XT_NVDB_Q_INDEX, quick() ? 1 : 4, 8, 64);
}

XT_TEST(random_quantised) {
  srand(102);
  static const int qs[] = {XT_NVDB_Q_FP8, XT_NVDB_Q_FP16, XT_NVDB_Q_FP4, XT_NVDB_Q_FPN};
  for (int k = 0; k < 4; k++) random_trials(0, qs[k], quick() ? 1 : 5, 8, 64);
}

XT_TEST(random_labels) {
  srand(103);
  random_trials(1, XT_NVDB_Q_INT16, quick() ? 2 : 8, 8, 64);
  random_trials(1, XT_NVDB_Q_FP8, quick() ? 1 : 6, 8, 64);
}

/* Long grids: rays cross empty 128^3 slots of the upper node in one step. */
XT_TEST(long_grids) {
  srand(104);
  for (int a = 0; a < 3; a++) {
    tn_long_axis = a;
    random_trials(a == 2, a == 2 ? XT_NVDB_Q_INT16 : XT_NVDB_Q_FLOAT, quick() ? 1 : 4, 8, 40);
    random_trials(a == 2, XT_NVDB_Q_INDEX, quick() ? 1 : 2, 8, 40);
  }
  tn_long_axis = -1;
}

/* The head phantom converted (dense mu and labels) at the benchmark's nine angles, all pixels. */
XT_TEST(head_angles) {
  const int n = quick() ? 64 : 160;
  int dim[3] = {n, n, n};
  static const double ang[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};
  const xt_detector_mode *md = xt_mode_find(quick() ? "fd20-128" : "fd20-512");
  XT_REQUIRE(md);
  for (int lq = 0; lq < 3; lq++) {
    const int labels = lq == 1; /* 2: dense mu in the index form */
    xt_model *vm;
    xt_msg msg = {{0}};
    XT_REQUIRE(xt_phantom_head_model(dim, 200.0 / n, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &vm, &msg) == 0);
    xt_model *nm = tn_nvdb_of(vm, labels ? XT_NVDB_Q_FP8 : lq == 2 ? XT_NVDB_Q_INDEX : XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
    XT_REQUIRE(nm);
    for (int i = 0; i < (quick() ? 2 : 9); i++) {
      xt_pose p = xt_pose_default(md);
      p.primary_deg = ang[i];
      xt_geometry g;
      XT_REQUIRE(xt_geom_compute(&p, md, &g, &msg) == 0);
      char what[64];
      snprintf(what, sizeof what, "head %s %g deg", labels ? "labels fp8" : lq == 2 ? "index" : "float", ang[i]);
      XT_CHECK_MSG(check_scene(what, &nm, 1, &g) == 0, "%s", what);
    }
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

/* Dense, label and NanoVDB models in one scene: the kinds add into one frame. */
XT_TEST(mixed_scene) {
  srand(105);
  for (int t = 0; t < (quick() ? 1 : 4); t++) {
    xt_model *d = tn_sparse_model(0, 10, 50, 0.0), *l = tn_sparse_model(1, 10, 50, 0.0025);
    xt_model *a = tn_sparse_model(0, 10, 50, 0.0), *b = tn_sparse_model(1, 10, 50, 0.0025);
    XT_REQUIRE(d && l && a && b);
    xt_msg msg = {{0}};
    xt_model *na = tn_nvdb_of(a, XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg), *nb = tn_nvdb_of(b, XT_NVDB_Q_INT16, 0.0, 0.0, &msg);
    XT_REQUIRE(na && nb);
    xt_model *ms[4] = {na, d, nb, l};
    xt_detector_mode mode = tmode(96, 80, 1.8);
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    XT_CHECK(check_scene("mixed dense + labels + 2 nvdb", ms, 4, &g) == 0);
    xt_model *only[2] = {na, nb}; /* NanoVDB kind alone, two grids of different types */
    XT_CHECK(check_scene("two nvdb", only, 2, &g) == 0);
    xt_model_free(na);
    xt_model_free(nb);
    xt_model_free(d);
    xt_model_free(l);
    xt_model_free(a);
    xt_model_free(b);
  }
}

/* Issue 9 Deliver 5 / issue 8 Deliver 6 on the GPU: a dense or label volume, a Gaussian mixture
 * and a NanoVDB grid in one scene, each placed on its own, against the CPU reference of the scene;
 * also all five (dense, labels, the mixture, a Float and an Int16 grid) and the batch path. */
XT_TEST(mixed_scene_with_gmm) {
  srand(107);
  for (int t = 0; t < (quick() ? 2 : 6); t++) {
    const int labels = t % 2;
    xt_model *vm = tn_sparse_model(labels, 10, 50, labels ? 0.0025 : 0.0);
    xt_model *src = tn_sparse_model(!labels, 10, 50, labels ? 0.0 : 0.0025);
    xt_model *gm = random_mixture(50 + rand() % 200, 20, 1.0, 8.0, 4.8);
    XT_REQUIRE(vm && src && gm);
    xt_affine rz = xt_aff_rot(2, tn_urand(-XT_PI, XT_PI)), rx = xt_aff_rot(0, tn_urand(-XT_PI, XT_PI));
    gm->placement = xt_aff_compose(&rx, &rz);
    for (int a = 0; a < 3; a++) gm->placement.t[a] = tn_urand(-10, 10);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(src, labels ? XT_NVDB_Q_FLOAT : XT_NVDB_Q_INT16, 0.0, 0.0, &msg);
    XT_CHECK_MSG(nm, "%s", msg.text);
    if (!nm) return;
    xt_detector_mode mode = tmode(64 + rand() % 96, 48 + rand() % 96, tn_urand(1.2, 2.2));
    xt_geometry g;
    XT_REQUIRE(rgeom(&mode, &g) == 0);
    char what[96];
    snprintf(what, sizeof what, "%s + gmm %zu + nvdb %s, trial %d", labels ? "labels" : "dense", xt_model_gmm(gm)->count,
             xt_nvdb_type_name(xt_model_nvdb(nm)->grid_type), t);
    xt_model *ms[3] = {gm, nm, vm};
    XT_CHECK_MSG(check_scene(what, ms, 3, &g) == 0, "%s", what);
    if (t == 1) { /* every kind at once: dense, labels, mixture, Float and Int16 grids */
      xt_model *other = tn_sparse_model(0, 10, 50, 0.0);
      XT_REQUIRE(other);
      xt_model *nf = tn_nvdb_of(other, XT_NVDB_Q_FLOAT, 0.0, 0.0, &msg);
      XT_REQUIRE(nf);
      xt_model *all[5] = {vm, nf, gm, other, nm};
      XT_CHECK(check_scene("dense + labels + gmm + 2 nvdb", all, 5, &g) == 0);
      xt_model_free(nf);
      xt_model_free(other);
    }
    xt_model_free(nm);
    xt_model_free(vm);
    xt_model_free(src);
    xt_model_free(gm);
  }
}

/* Grids whose content sits well inside their box (tn_inner_model: under XT_NVDB_TRAVERSAL=bricks7
 * and bricks8 most rays clip to the content hull, many miss it or graze it, and the background around
 * the content is integrated by length), and with a tile in a corner: mu with and without a background
 * mu, labels, Float and the index form. */
XT_TEST(content_inside_box) {
  srand(107);
  const int trials = quick() ? 2 : 8;
  for (int t = 0; t < trials; t++) {
    const int labels = t % 4 == 3;
    const double bg = t % 2 ? 0.0 : 0.002;
    xt_model *vm = tn_inner_model(labels, bg, t % 3 == 2);
    XT_REQUIRE(vm);
    xt_msg msg = {{0}};
    xt_model *nm = tn_nvdb_of(vm, labels ? XT_NVDB_Q_INT16 : (t % 4 == 1 ? XT_NVDB_Q_INDEX : XT_NVDB_Q_FLOAT),
                              labels ? 0.0 : bg, 0.0, &msg);
    XT_REQUIRE_MSG(nm, "%s", msg.text);
    check_random_view(nm, labels ? "inner labels" : "inner mu", t);
    xt_model_free(nm);
    xt_model_free(vm);
  }
}

/* The dense working set (XT_NVDB_TRAVERSAL=dense, or dense-each where the run names it): three grids
 * of different sizes and value types in one projector, so that every frame decodes each into the
 * working set in turn (it holds one model at a time), and a fourth, larger one added after the first
 * frames (the working set grows). With each voxel storage: linear, texture (the decode copied into a
 * 3D array, re-made at each size) and AUTO with both copies forced (the copy read is picked per
 * view). Every frame against the reference; a batch of frames equal to single renders bit for bit,
 * and a frame rendered twice bit for bit the same (the decode is deterministic). */
XT_TEST(dense_working_set) {
  const char *was = getenv("XT_NVDB_TRAVERSAL");
  char saved[32] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  if (!was || strncmp(was, "dense", 5) != 0) setenv("XT_NVDB_TRAVERSAL", "dense", 1);
  srand(108);
  xt_model *vm[4] = {tn_sparse_model(0, 20, 60, 0.002), tn_sparse_model(1, 12, 40, 0.0025), tn_sparse_model(0, 30, 50, 0.0),
                     tn_sparse_model(0, 64, 80, 0.0)};
  XT_REQUIRE(vm[0] && vm[1] && vm[2] && vm[3]);
  xt_msg msg = {{0}};
  static const int quant[4] = {XT_NVDB_Q_FLOAT, XT_NVDB_Q_INT16, XT_NVDB_Q_FP8, XT_NVDB_Q_INDEX};
  xt_model *nm[4];
  for (int i = 0; i < 4; i++) {
    nm[i] = tn_nvdb_of(vm[i], quant[i], i == 0 ? 0.002 : 0.0, 0.0, &msg);
    XT_REQUIRE_MSG(nm[i], "%s", msg.text);
    nm[i]->placement = xt_aff_identity();
    for (int a = 0; a < 3; a++) nm[i]->placement.t[a] = tn_urand(-25, 25);
  }
  const int nf = quick() ? 2 : 5;
  xt_detector_mode mode = tmode(96, 72, 1.4);
  xt_geometry g[5];
  for (int f = 0; f < nf; f++) XT_REQUIRE(rgeom(&mode, &g[f]) == 0);
  const size_t np = (size_t)mode.cols * mode.rows;
  for (int vox = 0; vox < 3; vox++) { /* linear, texture, AUTO with both copies */
    xt_cuda_options o = xt_cuda_default_options();
    o.voxels = vox;
    o.dual_min_bytes = 0;
    xt_cuda_proj *p;
    XT_REQUIRE(xt_cuda_create(&o, &p, &msg) == 0);
    for (int i = 0; i < 3; i++) XT_CHECK_MSG(xt_cuda_add_model(p, nm[i], &msg) == 0, "%s", msg.text);
    float *out = poisoned(np * nf), *again = poisoned(np), *batch = poisoned(np * nf);
    XT_REQUIRE(out && again && batch);
    for (int f = 0; f < nf; f++) {
      const int all = f >= nf / 2; /* the fourth grid from the middle on */
      if (f == nf / 2) XT_CHECK_MSG(xt_cuda_add_model(p, nm[3], &msg) == 0, "%s", msg.text);
      XT_CHECK_MSG(xt_cuda_render(p, &g[f], out + f * np, &msg) == 0, "%s", msg.text);
      char what[80];
      snprintf(what, sizeof what, "working set, voxels %d, frame %d (%d grids)", vox, f, all ? 4 : 3);
      XT_CHECK_MSG(compare(what, (const xt_model *const *)nm, all ? 4 : 3, &g[f], out + f * np) == 0, "%s", what);
      XT_CHECK(xt_cuda_render(p, &g[f], again, &msg) == 0);
      XT_CHECK_MSG(memcmp(again, out + f * np, np * sizeof(float)) == 0, "%s: rendered again, it differs", what);
    }
    XT_CHECK_MSG(xt_cuda_render_batch(p, g, nf, batch, &msg) == 0, "%s", msg.text);
    size_t diff = 0;
    for (int f = nf / 2; f < nf; f++) diff += memcmp(batch + f * np, out + f * np, np * sizeof(float)) != 0;
    XT_CHECK_MSG(diff == 0, "voxels %d: %zu batch frames differ from single renders", vox, diff);
    free(out);
    free(again);
    free(batch);
    xt_cuda_destroy(p);
  }
  for (int i = 0; i < 4; i++) {
    xt_model_free(nm[i]);
    xt_model_free(vm[i]);
  }
  if (was) setenv("XT_NVDB_TRAVERSAL", saved, 1);
  else unsetenv("XT_NVDB_TRAVERSAL");
}

/* XT_NVDB_TRAVERSAL: every traversal name is taken at create, an unknown one refused with a
 * message naming the field and listing the names (dense-each the last). */
XT_TEST(traversal_names) {
  const char *was = getenv("XT_NVDB_TRAVERSAL");
  char saved[32] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  static const char *const ok[] = {"tree",    "bricks",  "bricks2", "bricks3", "bricks4",  "bricks5",
                                   "bricks6", "bricks7", "bricks8", "dense",   "dense-each"};
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg = {{0}};
  for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
    setenv("XT_NVDB_TRAVERSAL", ok[k], 1);
    const int rc = xt_proj_create(&po, &p, &msg);
    XT_CHECK_MSG(rc == 0, "XT_NVDB_TRAVERSAL=%s: %s", ok[k], msg.text);
    if (!rc) xt_proj_destroy(p);
  }
  setenv("XT_NVDB_TRAVERSAL", "bricks9", 1);
  const int rc = xt_proj_create(&po, &p, &msg);
  XT_CHECK_MSG(rc == XT_EINVAL && strstr(msg.text, "XT_NVDB_TRAVERSAL=bricks9") && strstr(msg.text, "dense-each"),
               "bricks9: rc %d, %s", rc, msg.text);
  if (!rc) xt_proj_destroy(p);
  if (was) setenv("XT_NVDB_TRAVERSAL", saved, 1);
  else unsetenv("XT_NVDB_TRAVERSAL");
}

/* The batch pipeline renders NanoVDB frames like single renders. */
XT_TEST(batch_matches_single) {
  srand(106);
  xt_model *vm = tn_sparse_model(0, 20, 60, 0.0);
  XT_REQUIRE(vm);
  xt_msg msg = {{0}};
  xt_model *nm = tn_nvdb_of(vm, XT_NVDB_Q_FP8, 0.0, 0.0, &msg);
  XT_REQUIRE(nm);
  const int nf = quick() ? 3 : 17;
  xt_detector_mode mode = tmode(80, 64, 1.5);
  xt_geometry *g = malloc(sizeof *g * nf);
  XT_REQUIRE(g);
  for (int i = 0; i < nf; i++) XT_REQUIRE(rgeom(&mode, &g[i]) == 0);
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p;
  XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0);
  XT_REQUIRE(xt_proj_add_model(p, nm, &msg) == 0);
  const size_t fp = (size_t)mode.cols * mode.rows;
  float *batch = poisoned(fp * nf), *one = poisoned(fp);
  XT_REQUIRE(batch && one);
  XT_REQUIRE(xt_proj_render_batch(p, g, nf, batch, &msg) == 0);
  size_t diff = 0;
  for (int i = 0; i < nf; i++) {
    XT_REQUIRE(xt_proj_render(p, &g[i], one, &msg) == 0);
    diff += memcmp(one, batch + fp * i, fp * sizeof(float)) != 0;
  }
  XT_CHECK_MSG(diff == 0, "%zu batch frames differ from single renders", diff);
  const xt_model *ms[1] = {nm};
  XT_CHECK(compare("batch frame 0", ms, 1, &g[0], batch) == 0);
  free(batch);
  free(one);
  free(g);
  xt_proj_destroy(p);
  xt_model_free(nm);
  xt_model_free(vm);
}

XT_TEST_MAIN_CUDA(XT_ENTRY(random_float) XT_ENTRY(random_index) XT_ENTRY(random_quantised) XT_ENTRY(random_labels) XT_ENTRY(long_grids)
                 XT_ENTRY(head_angles) XT_ENTRY(mixed_scene) XT_ENTRY(mixed_scene_with_gmm)
                     XT_ENTRY(batch_matches_single) XT_ENTRY(content_inside_box)
                         XT_ENTRY(dense_working_set) XT_ENTRY(traversal_names))
