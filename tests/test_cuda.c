/* GPU tests of the CUDA projector against the float64 reference (xt_ref_render_f64).
 *
 * Random volumes (dense and labels, anisotropic spacing, oblique placement) under random poses;
 * every kernel variant (linear / texture voxels, shared / constant table); rays lying exactly on
 * voxel planes; the batch entry point against single renders and into page-locked memory; the thesis-scene head at the nine
 * angles of the benchmark on all pixels; piecewise-constant volumes with rays lying exactly on
 * voxel planes across which mu changes. Each check poisons the output with NaN first, so an
 * unwritten pixel fails. Pass: relative L2 < 1e-5 and max |gpu - ref| <= 1e-4 of the frame's max.
 *
 * Labelled `gpu`: CI (no GPU) excludes it; without a usable device it skips (xt_test_cuda.h).
 * XT_CUDA_TEST_QUICK=1 shrinks the sizes (compute-sanitizer runs). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_bench.h"
#include "xt_proj.h"
#include "xt_proj_cuda.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_gpu.h"

static int quick(void) {
  const char *q = getenv("XT_CUDA_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

static double urand(double lo, double hi) { return lo + (hi - lo) * ((double)rand() / RAND_MAX); }

/* A random volume: dims 6..48, spacing 0.4..2 mm per axis, rotated and shifted placement. */
static xt_model *random_model(int labels) {
  int n[3];
  double sp[3];
  for (int a = 0; a < 3; a++) {
    n[a] = 6 + rand() % 43;
    sp[a] = urand(0.4, 2.0);
  }
  xt_volume *v;
  if (xt_volume_create(n[0], n[1], n[2], sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL)) return NULL;
  size_t nv = xt_volume_voxels(v);
  if (labels) {
    v->materials = calloc(1, sizeof *v->materials);
    if (!v->materials) return NULL;
    int k = 2 + rand() % 30;
    v->materials->count = k;
    for (int i = 1; i < k; i++) v->materials->mu[i] = (float)urand(0.001, 0.2);
    for (size_t i = 0; i < nv; i++) ((uint8_t *)v->data)[i] = (uint8_t)(rand() % 5 == 0 ? 0 : rand() % k);
  } else {
    for (size_t i = 0; i < nv; i++) ((float *)v->data)[i] = rand() % 5 == 0 ? 0.0f : (float)urand(0.0, 0.1);
  }
  xt_model *m;
  if (xt_model_from_volume(v, labels ? "rand-labels" : "rand-dense", &m, NULL)) return NULL;
  xt_affine rz = xt_aff_rot(2, urand(-XT_PI, XT_PI)), ry = xt_aff_rot(1, urand(-XT_PI, XT_PI)),
            rx = xt_aff_rot(0, urand(-XT_PI, XT_PI));
  xt_affine r1 = xt_aff_compose(&ry, &rz);
  m->placement = xt_aff_compose(&rx, &r1);
  for (int a = 0; a < 3; a++) m->placement.t[a] = urand(-20, 20);
  return m;
}

static xt_detector_mode test_mode(int cols, int rows, double pitch) {
  xt_detector_mode m = xt_mode_custom("test", cols, rows, pitch, pitch * urand(0.8, 1.25), 800.0, 1200.0);
  return m;
}

static int random_geom(const xt_detector_mode *mode, xt_geometry *g) {
  xt_pose p = xt_pose_default(mode);
  p.primary_deg = urand(-180, 180);
  p.secondary_deg = urand(-40, 40);
  p.detector_rot_deg = urand(-30, 30);
  p.sod_mm = urand(600, 900);
  p.sid_mm = p.sod_mm + urand(250, 500);
  p.table_mm = xt_v3(urand(-15, 15), urand(-15, 15), urand(-15, 15));
  return xt_geom_compute(&p, mode, g, NULL);
}

static void random_trials(int labels, int trials) {
  for (int t = 0; t < trials; t++) {
    xt_model *m = random_model(labels);
    XT_REQUIRE(m);
    xt_detector_mode mode = test_mode(64 + rand() % 96, 48 + rand() % 96, urand(0.6, 2.5));
    xt_geometry g;
    XT_REQUIRE(random_geom(&mode, &g) == 0);
    xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
    xt_proj *p;
    xt_msg msg;
    XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0);
    XT_CHECK(xt_proj_add_model(p, m, &msg) == 0);
    float *out = poisoned((size_t)mode.cols * mode.rows);
    XT_REQUIRE(out);
    XT_CHECK(xt_proj_render(p, &g, out, &msg) == 0);
    const xt_model *ms[1] = {m};
    char what[64];
    snprintf(what, sizeof what, "%s trial %d", labels ? "labels" : "dense", t);
    XT_CHECK_MSG(compare(what, ms, 1, &g, out) == 0, "%s", what);
    free(out);
    xt_proj_destroy(p);
    xt_model_free(m);
  }
}

XT_TEST(random_dense) {
  srand(1);
  random_trials(0, quick() ? 2 : 40);
}

XT_TEST(random_labels) {
  srand(2);
  random_trials(1, quick() ? 2 : 40);
}

/* Two models at once, each kernel variant, same answer as the reference and bit-identical to
 * each other (the variants differ in where data lives, not in arithmetic). */
XT_TEST(variants_multi_model) {
  srand(3);
  for (int t = 0; t < (quick() ? 1 : 8); t++) {
    xt_model *a = random_model(0), *b = random_model(1);
    XT_REQUIRE(a && b);
    xt_detector_mode mode = test_mode(120, 100, urand(0.8, 2.0));
    xt_geometry g;
    XT_REQUIRE(random_geom(&mode, &g) == 0);
    const xt_model *ms[2] = {a, b};
    size_t np = (size_t)mode.cols * mode.rows;
    float *first = NULL;
    for (int vox = 0; vox < 3; vox++) /* linear, texture, AUTO with both copies forced */
      for (int lut = 0; lut < 2; lut++) {
        xt_cuda_options o = xt_cuda_default_options();
        o.voxels = vox;
        o.dual_min_bytes = 0;
        o.lut = lut;
        xt_cuda_proj *p;
        xt_msg msg;
        XT_REQUIRE(xt_cuda_create(&o, &p, &msg) == 0);
        XT_CHECK(xt_cuda_add_model(p, a, &msg) == 0);
        XT_CHECK(xt_cuda_add_model(p, b, &msg) == 0);
        float *out = poisoned(np);
        XT_REQUIRE(out);
        XT_CHECK(xt_cuda_render(p, &g, out, &msg) == 0);
        char what[64];
        snprintf(what, sizeof what, "two models, voxels %d table %d", vox, lut);
        XT_CHECK_MSG(compare(what, ms, 2, &g, out) == 0, "%s", what);
        if (!first) first = out;
        else {
          XT_CHECK_MSG(memcmp(first, out, np * sizeof(float)) == 0, "variant %d/%d differs from linear/shared", vox, lut);
          free(out);
        }
        xt_cuda_destroy(p);
      }
    free(first);
    xt_model_free(a);
    xt_model_free(b);
  }
}

/* AUTO storage with both copies resident: views at 0, 45, 90 and 120 deg primary and a cranial one
 * pick linear or texture per launch; every frame matches the reference and, bit for bit, the
 * linear-only projector; a batch mixing the views too. */
XT_TEST(auto_storage_per_view) {
  srand(11);
  xt_model *m = random_model(1);
  XT_REQUIRE(m);
  xt_detector_mode mode = test_mode(96, 80, 1.2);
  const double prim[5] = {0, 45, 90, 120, 10}, sec[5] = {0, 0, 0, 0, 60};
  xt_geometry g[5];
  for (int i = 0; i < 5; i++) {
    xt_pose pose = xt_pose_default(&mode);
    pose.primary_deg = prim[i];
    pose.secondary_deg = sec[i];
    XT_REQUIRE(xt_geom_compute(&pose, &mode, &g[i], NULL) == 0);
  }
  xt_cuda_options oa = xt_cuda_default_options(), ol = xt_cuda_default_options();
  oa.dual_min_bytes = 0;
  ol.voxels = XT_CUDA_VOX_LINEAR;
  xt_cuda_proj *pa, *pl;
  xt_msg msg;
  XT_REQUIRE(xt_cuda_create(&oa, &pa, &msg) == 0);
  XT_REQUIRE(xt_cuda_create(&ol, &pl, &msg) == 0);
  XT_REQUIRE(xt_cuda_add_model(pa, m, &msg) == 0 && xt_cuda_add_model(pl, m, &msg) == 0);
  const size_t np = (size_t)mode.cols * mode.rows;
  float *a = poisoned(5 * np), *l = poisoned(5 * np);
  XT_REQUIRE(a && l);
  const xt_model *ms[1] = {m};
  for (int i = 0; i < 5; i++) {
    XT_CHECK(xt_cuda_render(pa, &g[i], a + i * np, &msg) == 0);
    XT_CHECK(xt_cuda_render(pl, &g[i], l + i * np, &msg) == 0);
    char what[64];
    snprintf(what, sizeof what, "auto storage, view %d", i);
    XT_CHECK_MSG(compare(what, ms, 1, &g[i], a + i * np) == 0, "%s", what);
    XT_CHECK_MSG(memcmp(a + i * np, l + i * np, np * sizeof(float)) == 0, "%s differs from linear", what);
  }
  float *b = poisoned(5 * np);
  XT_REQUIRE(b);
  XT_CHECK(xt_cuda_render_batch(pa, g, 5, b, &msg) == 0);
  XT_CHECK(memcmp(a, b, 5 * np * sizeof(float)) == 0);
  free(a);
  free(l);
  free(b);
  xt_cuda_destroy(pa);
  xt_cuda_destroy(pl);
  xt_model_free(m);
}

/* A 32^3 volume of 1 mm voxels centred on the isocentre: mu 0.01 for x < 16 cells, 0.1 beyond,
 * times zfac for z >= 16 cells. */
static xt_model *slab_model(float zfac, const char *name) {
  double sp[3] = {1, 1, 1};
  xt_volume *v;
  if (xt_volume_create(32, 32, 32, sp, XT_VOXEL_F32, &v, NULL)) return NULL;
  for (int k = 0; k < 32; k++)
    for (int j = 0; j < 32; j++)
      for (int i = 0; i < 32; i++)
        ((float *)v->data)[i + 32 * (j + 32 * k)] = (i < 16 ? 0.01f : 0.1f) * (k < 16 ? 1.0f : zfac);
  xt_model *m;
  return xt_model_from_volume(v, name, &m, NULL) ? NULL : m;
}

/* m through the CUDA projector on an odd 101 x 81 detector at primary angle deg, against the
 * reference; non-zero on any failure. */
static int odd_detector_matches(const xt_model *m, double deg, const char *what) {
  xt_detector_mode mode = xt_mode_custom("odd", 101, 81, 0.5, 0.5, 800, 1200);
  xt_pose pose = xt_pose_default(&mode);
  pose.primary_deg = deg;
  xt_geometry g;
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  float *out = poisoned((size_t)mode.cols * mode.rows);
  int fail = !out || xt_geom_compute(&pose, &mode, &g, NULL) || xt_proj_create(&po, &p, &msg) ||
             xt_proj_add_model(p, m, &msg) || xt_proj_render(p, &g, out, &msg);
  const xt_model *ms[1] = {m};
  if (!fail) fail = compare(what, ms, 1, &g, out) != 0;
  free(out);
  xt_proj_destroy(p);
  return fail;
}

/* An axis-aligned volume with even dims centred on the isocentre, an odd detector at 0/0: the
 * central column's rays lie exactly in the plane x = 0 between two voxel slabs that differ by
 * 10x, and the central row's in z = 0. Half-open cells put them in the + slab, as on the CPU. */
XT_TEST(rays_on_planes) {
  xt_model *m = slab_model(2.0f, "planes");
  XT_REQUIRE(m);
  const double deg[4] = {0, 90, 180, -90};
  for (int a = 0; a < 4; a++)
    XT_CHECK_MSG(odd_detector_matches(m, deg[a], "rays on planes") == 0, "angle %g", deg[a]);
  xt_model_free(m);
}

/* rays_on_planes' volume turned about z by +-1e-18 rad (and +-3e-19): the central column's rays
 * then cross the plane x = 16 cells (its origin within rounding of 16, exactly 16.0 in double) with
 * a direction component of ~1e-18 cells/mm, so o + s0 q rounds onto the plane and, for q < 0, the
 * entry cell (16, above the plane) and the plane's parameter (s = 0, before the entry) disagree.
 * The reference adds nothing for that crossing and integrates the whole ray in cell 15; the kernel's
 * set-up once put the first plane at t = -s0 and added -s0 x mu to cell 16 and +s0 x mu to cell 15
 * (ray_setup's clamp; ~70 against ~0.3 here). */
XT_TEST(rays_a_hair_off_a_plane) {
  xt_model *m = slab_model(1.0f, "hair");
  XT_REQUIRE(m);
  const double tilt[4] = {1e-18, -1e-18, 3e-19, -3e-19};
  for (int t = 0; t < 4; t++) {
    m->placement = xt_aff_rot(2, tilt[t]);
    XT_CHECK_MSG(odd_detector_matches(m, 0, "rays a hair off a plane") == 0, "tilt %g rad", tilt[t]);
  }
  xt_model_free(m);
}

/* The batch tests' scene: a random model (seeded), n random poses on a 200 x 150 detector and a
 * CUDA projector holding the model; NULL (and nothing to free) on failure. */
static xt_proj *batch_scene(unsigned seed, int labels, int n, xt_detector_mode *mode, xt_geometry *g, xt_model **m) {
  srand(seed);
  *m = random_model(labels);
  *mode = test_mode(200, 150, 1.5);
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  int ok = *m != NULL;
  for (int i = 0; i < n && ok; i++) ok = random_geom(mode, &g[i]) == 0;
  if (ok && xt_proj_create(&po, &p, &msg) == 0 && xt_proj_add_model(p, *m, &msg) == 0) return p;
  xt_proj_destroy(p);
  xt_model_free(*m);
  return NULL;
}

/* A batch into page-locked memory from xt_host_alloc takes the pipeline's direct path (frames
 * copied out where they belong, in chunks whose copies overlap the next chunk's kernels): the same
 * bytes as through the staging buffers, every pixel written, and the reference where it is
 * checked. 37 frames of 200 x 150 are two direct chunks; a second batch starts inside the buffer. */
XT_TEST(batch_into_host_memory) {
  enum { N = 37 };
  xt_model *m;
  xt_geometry g[N];
  xt_detector_mode mode;
  xt_msg msg;
  xt_proj *p = batch_scene(12, 0, N, &mode, g, &m);
  XT_REQUIRE(p);
  const size_t np = (size_t)mode.cols * mode.rows;
  float *paged = poisoned(np * N), *pinned = NULL;
  XT_REQUIRE(paged);
  if (xt_host_alloc(XT_BACKEND_CUDA, np * N * sizeof(float), (void **)&pinned, &msg) != 0) {
    fprintf(stderr, "  %s\n", msg.text);
    XT_REQUIRE(pinned);
  }
  XT_CHECK(((uintptr_t)pinned & 63) == 0);
  XT_CHECK(xt_proj_render_batch(p, g, N, paged, &msg) == 0);
  for (size_t k = 0; k < np * N; k++) pinned[k] = NAN;
  XT_CHECK(xt_proj_render_batch(p, g, N, pinned, &msg) == 0);
  XT_CHECK_MSG(memcmp(paged, pinned, np * N * sizeof(float)) == 0, "pinned batch differs from the staged one");
  const xt_model *ms[1] = {m};
  const int check[] = {0, 35, N - 1};
  for (int i = 0; i < 3; i++) XT_CHECK_MSG(compare("pinned batch", ms, 1, &g[check[i]], pinned + np * check[i]) == 0, "frame %d", check[i]);
  for (size_t k = 0; k < np * N; k++) pinned[k] = NAN;
  XT_CHECK(xt_proj_render_batch(p, g + 1, N - 1, pinned + np, &msg) == 0);
  XT_CHECK_MSG(isnan(pinned[0]) && isnan(pinned[np - 1]), "wrote before the batch's start");
  XT_CHECK_MSG(memcmp(paged + np, pinned + np, np * (N - 1) * sizeof(float)) == 0, "offset batch differs");
  xt_host_free(XT_BACKEND_CUDA, pinned);
  free(paged);
  xt_proj_destroy(p);
  xt_model_free(m);
}

XT_TEST(batch_equals_single) {
  enum { N = 37 }; /* more than one chunk of the pipeline at this size? no: exercises odd counts */
  xt_model *m;
  xt_geometry g[N];
  xt_detector_mode mode;
  xt_msg msg;
  xt_proj *p = batch_scene(4, 1, N, &mode, g, &m);
  XT_REQUIRE(p);
  size_t np = (size_t)mode.cols * mode.rows;
  float *batch = poisoned(np * N), *one = poisoned(np);
  XT_REQUIRE(batch && one);
  XT_CHECK(xt_proj_render_batch(p, g, N, batch, &msg) == 0);
  for (int i = 0; i < N; i++) {
    for (size_t k = 0; k < np; k++) one[k] = NAN;
    XT_CHECK(xt_proj_render(p, &g[i], one, &msg) == 0);
    XT_CHECK_MSG(memcmp(one, batch + np * i, np * sizeof(float)) == 0, "batch frame %d differs from its single render", i);
  }
  const xt_model *ms[1] = {m};
  XT_CHECK(compare("batch frame 5", ms, 1, &g[5], batch + np * 5) == 0);
  free(batch);
  free(one);
  xt_proj_destroy(p);
  xt_model_free(m);
}

/* A biplane worker renders its two planes' detectors alternately on one projector: its scratch is
 * kept for the larger and reused for the smaller (one with more rows and fewer pixels included),
 * and every frame equals a fresh projector's render of it, singly and in batches. */
XT_TEST(alternating_detectors) {
  xt_model *m = random_model(0);
  XT_REQUIRE(m);
  xt_detector_mode modes[3] = {test_mode(160, 120, 1.5), test_mode(96, 136, 1.7), test_mode(200, 150, 1.2)};
  xt_geometry g[3][3];
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 3; j++) XT_REQUIRE(random_geom(&modes[k], &g[k][j]) == 0);
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p;
  xt_msg msg;
  XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0);
  XT_CHECK(xt_proj_add_model(p, m, &msg) == 0);
  const int order[8] = {0, 1, 0, 1, 2, 1, 0, 2};
  for (int i = 0; i < 8; i++) {
    const int k = order[i];
    const size_t np = (size_t)modes[k].cols * modes[k].rows;
    float *out = poisoned(np * 3), *fresh = poisoned(np * 3);
    XT_REQUIRE(out && fresh);
    if (i % 2) XT_CHECK(xt_proj_render_batch(p, g[k], 3, out, &msg) == 0);
    else
      for (int j = 0; j < 3; j++) XT_CHECK(xt_proj_render(p, &g[k][j], out + np * j, &msg) == 0);
    xt_proj *q;
    XT_REQUIRE(xt_proj_create(&po, &q, &msg) == 0);
    XT_CHECK(xt_proj_add_model(q, m, &msg) == 0);
    for (int j = 0; j < 3; j++) XT_CHECK(xt_proj_render(q, &g[k][j], fresh + np * j, &msg) == 0);
    xt_proj_destroy(q);
    XT_CHECK_MSG(memcmp(out, fresh, np * 3 * sizeof(float)) == 0, "step %d: detector %d x %d differs from a fresh projector's",
                 i, modes[k].cols, modes[k].rows);
    const xt_model *ms[1] = {m};
    XT_CHECK(compare("alternating detectors", ms, 1, &g[k][1], out + np) == 0);
    free(out);
    free(fresh);
  }
  xt_proj_destroy(p);
  xt_model_free(m);
}

/* The thesis scene of the benchmark: the head at the nine angles, labels and float mu, all pixels. */
static void thesis_head(int type) {
  xt_model *m;
  xt_msg msg;
  XT_REQUIRE(xt_bench_head(type, &m, &msg) == 0);
  const xt_detector_mode *tm = xt_mode_find("thesis");
  XT_REQUIRE(tm);
  xt_detector_mode mode = *tm;
  if (quick()) {
    mode.cols = mode.rows = 256;
    mode.pitch_u_mm = mode.pitch_v_mm = 400.0 / 256;
  }
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p;
  XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0);
  XT_CHECK(xt_proj_add_model(p, m, &msg) == 0);
  const double angles[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};
  float *out = malloc(sizeof(float) * (size_t)mode.cols * mode.rows);
  XT_REQUIRE(out);
  for (int i = 0; i < (quick() ? 2 : 9); i++) {
    xt_pose pose = xt_pose_default(&mode);
    pose.primary_deg = angles[i];
    xt_geometry g;
    XT_REQUIRE(xt_geom_compute(&pose, &mode, &g, NULL) == 0);
    for (size_t k = 0; k < (size_t)mode.cols * mode.rows; k++) out[k] = NAN;
    XT_CHECK(xt_proj_render(p, &g, out, &msg) == 0);
    const xt_model *ms[1] = {m};
    char what[64];
    snprintf(what, sizeof what, "thesis head %s %g deg", type == XT_VOXEL_U8 ? "labels" : "mu", angles[i]);
    XT_CHECK_MSG(compare(what, ms, 1, &g, out) == 0, "%s", what);
  }
  free(out);
  xt_proj_destroy(p);
  xt_model_free(m);
}

XT_TEST(thesis_head_labels) { thesis_head(XT_VOXEL_U8); }
XT_TEST(thesis_head_mu) { thesis_head(XT_VOXEL_F32); }


/* A piecewise-constant volume: a background of nonzero mu, random boxes of other values (some
 * with edges at multiples of 4) and lone voxels. Dims 20..60 (edge
 * edges cut by the volume), anisotropic spacing; `aligned` keeps the volume axis-aligned and
 * centred so that rays of an odd detector at 0/90 deg lie exactly on voxel planes. */
static xt_model *blocky_model(int labels, int aligned) {
  int n[3];
  double sp[3];
  for (int a = 0; a < 3; a++) {
    n[a] = aligned ? 32 : 20 + rand() % 41;
    sp[a] = aligned ? 1.0 : urand(0.5, 1.8);
  }
  xt_volume *v;
  if (xt_volume_create(n[0], n[1], n[2], sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, NULL)) return NULL;
  const int k = 6;
  float mu[6] = {0.0002f, 0.02f, 0.05f, 0.09f, 0.15f, 0.4f};
  uint8_t *lab = malloc(xt_volume_voxels(v));
  if (!lab) return NULL;
  memset(lab, 0, xt_volume_voxels(v));
  for (int b = 0; b < 6; b++) {
    int lo[3], hi[3], val = 1 + rand() % (k - 1);
    for (int a = 0; a < 3; a++) {
      lo[a] = rand() % n[a];
      hi[a] = lo[a] + 1 + rand() % (n[a] - lo[a]);
      if (b < 2) { /* boxes with edges at multiples of 4 */
        lo[a] &= ~3;
        hi[a] = (hi[a] + 3) & ~3;
        if (hi[a] > n[a]) hi[a] = n[a];
      }
    }
    for (int z = lo[2]; z < hi[2]; z++)
      for (int y = lo[1]; y < hi[1]; y++)
        for (int x = lo[0]; x < hi[0]; x++) lab[x + n[0] * (y + (size_t)n[1] * z)] = (uint8_t)val;
  }
  for (int i = 0; i < 12; i++) /* lone voxels */
    lab[rand() % xt_volume_voxels(v)] = (uint8_t)(rand() % k);
  if (labels) {
    v->materials = calloc(1, sizeof *v->materials);
    if (!v->materials) return NULL;
    v->materials->count = k;
    for (int i = 0; i < k; i++) v->materials->mu[i] = mu[i];
    memcpy(v->data, lab, xt_volume_voxels(v));
  } else {
    for (size_t i = 0; i < xt_volume_voxels(v); i++) ((float *)v->data)[i] = mu[lab[i]];
  }
  free(lab);
  xt_model *m;
  if (xt_model_from_volume(v, labels ? "blocky-labels" : "blocky-dense", &m, NULL)) return NULL;
  if (!aligned) {
    xt_affine rz = xt_aff_rot(2, urand(-XT_PI, XT_PI)), ry = xt_aff_rot(1, urand(-XT_PI, XT_PI)),
              rx = xt_aff_rot(0, urand(-XT_PI, XT_PI));
    xt_affine r1 = xt_aff_compose(&ry, &rz);
    m->placement = xt_aff_compose(&rx, &r1);
    for (int a = 0; a < 3; a++) m->placement.t[a] = urand(-10, 10);
  }
  return m;
}

/* Renders m with the default options and compares with the reference. */
static int render_default(const xt_model *m, const xt_geometry *g, const char *what) {
  xt_cuda_options o = xt_cuda_default_options();
  xt_cuda_proj *p;
  xt_msg msg;
  if (xt_cuda_create(&o, &p, &msg)) return 1;
  int fail = xt_cuda_add_model(p, m, &msg) != 0;
  float *out = poisoned((size_t)g->mode.cols * g->mode.rows);
  if (!out) fail = 1;
  if (!fail) fail |= xt_cuda_render(p, g, out, &msg) != 0;
  const xt_model *ms[1] = {m};
  if (!fail) fail |= compare(what, ms, 1, g, out);
  free(out);
  xt_cuda_destroy(p);
  return fail;
}

/* Piecewise-constant volumes against the reference: random oblique poses and placements, and
 * axis-aligned rays lying exactly on voxel planes of a volume that varies across those planes
 * (a centred 32^3 volume, odd detector, 0/90/180 deg, secondary 0 and 45 deg). Such rays are
 * ill-conditioned: the world->cell map leaves a direction component of ~1e-17 across the plane,
 * and whether the ray crosses the plane before its exit must be decided exactly as the reference
 * decides it. */
XT_TEST(blocky_exact) {
  srand(5);
  for (int t = 0; t < (quick() ? 2 : 16); t++) {
    const int labels = t & 1, aligned = (t >> 1) % 3 == 0;
    xt_model *m = blocky_model(labels, aligned);
    XT_REQUIRE(m);
    xt_detector_mode mode = aligned ? xt_mode_custom("odd", 101, 81, 0.5, 0.5, 800, 1200)
                                    : test_mode(64 + rand() % 96, 48 + rand() % 96, urand(0.3, 1.5));
    xt_geometry g;
    if (aligned) {
      xt_pose pose = xt_pose_default(&mode);
      pose.primary_deg = 90.0 * (t % 3);
      pose.secondary_deg = (t % 4) < 2 ? 0 : 45;
      XT_REQUIRE(xt_geom_compute(&pose, &mode, &g, NULL) == 0);
    } else {
      XT_REQUIRE(random_geom(&mode, &g) == 0);
    }
    char what[96];
    snprintf(what, sizeof what, "blocky %s %s trial %d", labels ? "labels" : "dense", aligned ? "aligned" : "oblique", t);
    XT_CHECK_MSG(render_default(m, &g, what) == 0, "%s", what);
    xt_model_free(m);
  }
}

/* A volume of one value everywhere (all background: rays never march) and one whose only
 * non-background voxel sits in a corner-adjacent spot: the content hull must not clip it away. */
XT_TEST(hull_extremes) {
  for (int t = 0; t < 2; t++) {
    int n[3] = {24, 17, 30};
    double sp[3] = {1.1, 0.9, 1.3};
    xt_volume *v;
    XT_REQUIRE(xt_volume_create(n[0], n[1], n[2], sp, XT_VOXEL_F32, &v, NULL) == 0);
    for (size_t i = 0; i < xt_volume_voxels(v); i++) ((float *)v->data)[i] = 0.01f;
    if (t == 1) ((float *)v->data)[1 + n[0] * (1 + (size_t)n[1] * 1)] = 0.5f;
    xt_model *m;
    XT_REQUIRE(xt_model_from_volume(v, "uniform", &m, NULL) == 0);
    for (int k = 0; k < 4; k++) {
      xt_detector_mode mode = test_mode(97, 83, 0.4);
      xt_geometry g;
      XT_REQUIRE(random_geom(&mode, &g) == 0);
      char what[64];
      snprintf(what, sizeof what, "hull %s pose %d", t ? "corner voxel" : "all background", k);
      XT_CHECK_MSG(render_default(m, &g, what) == 0, "%s", what);
    }
    xt_model_free(m);
  }
}

XT_TEST(errors) {
  xt_msg msg;
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 99};
  xt_proj *p = NULL;
  XT_CHECK(xt_proj_create(&po, &p, &msg) == XT_ENODEV);
  xt_cuda_options o = xt_cuda_default_options();
  o.lut = XT_CUDA_LUT_CONST;
  xt_cuda_proj *a = NULL, *b = NULL;
  XT_REQUIRE(xt_cuda_create(&o, &a, &msg) == 0);
  XT_CHECK(xt_cuda_create(&o, &b, &msg) == XT_EBUSY);
  xt_cuda_options au = xt_cuda_default_options(); /* AUTO: falls back to shared memory */
  XT_CHECK(xt_cuda_create(&au, &b, &msg) == 0);
  xt_cuda_destroy(b);
  xt_cuda_destroy(a);
  XT_CHECK(xt_cuda_create(&o, &b, &msg) == 0);
  xt_cuda_destroy(b);
}

int main(int argc, char **argv) {
  xt_test_require_cuda(argv[0]);
  static const xt_test_entry tests[] = {
      XT_ENTRY(errors) XT_ENTRY(rays_on_planes) XT_ENTRY(rays_a_hair_off_a_plane) XT_ENTRY(random_dense) XT_ENTRY(random_labels)
          XT_ENTRY(variants_multi_model) XT_ENTRY(batch_equals_single) XT_ENTRY(alternating_detectors) XT_ENTRY(batch_into_host_memory) XT_ENTRY(thesis_head_labels)
              XT_ENTRY(thesis_head_mu) XT_ENTRY(blocky_exact) XT_ENTRY(hull_extremes)
                  XT_ENTRY(auto_storage_per_view)};
  return xt_test_main_(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
