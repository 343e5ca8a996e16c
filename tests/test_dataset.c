/* Tests of `xtwin dataset`'s building blocks (dataset/xt_dataset_*.c) against independent oracles:
 *   - the spec: every class of bad input gives one line naming the field's JSON path;
 *   - sampling: ranges, determinism per frame index, arcs (angles, one draw per run);
 *   - frames: a label volume of two nested boxes, moved by random rigid perturbations and table
 *     translations, rendered through the dataset's renderer (geometry moved instead of the model,
 *     channels as indicator volumes): the image, both label channels and the segmentation bits
 *     against the exact chord lengths of the boxes (ray-box slabs in double);
 *   - two independently moving models (summed on the host) and a segmentation that follows one;
 *   - tar shards: ustar headers (checksums by the spec's formula), sizes, padding, end blocks.
 * Built twice: test_dataset (CPU backend, label cpu) and test_dataset_cuda (label gpu). */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "xt_dataset.h"
#include "xt_phantom.h"
#include "xt_test.h"

#ifdef XT_DS_TEST_CUDA
#include "xt_test_cuda.h"
#define XT_DS_TEST_MAIN XT_TEST_MAIN_CUDA /* skips alike without a usable device */
#define BACKEND "cuda"
#define TOL_REL 2e-4 /* of the frame's max: the kernels march in float (docs/gpu-notes.md) */
#else
#define XT_DS_TEST_MAIN XT_TEST_MAIN
#define BACKEND "cpu"
#define TOL_REL 1e-6 /* the reference is double, rounded to float once */
#endif

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/xt_test_dataset_%ld_XXXXXX", (long)getpid());
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

static void remove_dir(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "  rm failed\n");
}

static void write_file(const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) exit(1);
  fclose(f);
}

/* Writes spec text to DIR/spec.json and loads it. */
static int load_text(const char *text, xt_ds_spec *s, xt_msg *msg) {
  write_file("spec.json", text, strlen(text));
  char path[512];
  snprintf(path, sizeof path, "%s/spec.json", dir);
  return xt_ds_spec_load(path, s, msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Spec errors                                                                                */
/* ------------------------------------------------------------------------------------------ */

#define M0 "\"models\": [{\"name\": \"h\", \"phantom\": \"head-labels\", \"size\": 16}]"
#define BASE "\"seed\": 1, \"frames\": 10, " M0

XT_TEST(spec_errors_name_the_field) {
  make_dir();
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"{}", "spec.json: seed: required"},
      {"[1]", "spec.json: (top level): expected a JSON object"},
      {"{\"seed\": 1,\n \"frames\": 10,,}", "spec.json:2:"},
      {"{\"seed\": 1, \"seed\": 2}", "duplicate"},
      {"{\"seeed\": 1}", "seeed: unknown field (did you mean \"seed\"?)"},
      {"{\"seed\": -1}", "seed: -1 is outside"},
      {"{\"seed\": 1.5}", "seed: expected an integer"},
      {"{\"seed\": 1, \"frames\": 10}", "models: required"},
      {"{\"seed\": 1, " M0 "}", "frames: required"},
      {"{" BASE ", \"frames\": 0}", "duplicate"},
      {"{\"seed\": 1, \"frames\": 0, " M0 "}", "frames: 0 is outside"},
      {"{" BASE ", \"backend\": \"gpu\"}", "backend: unknown value \"gpu\" (one of auto|cpu|cuda)"},
      {"{" BASE ", \"detector\": {\"mode\": \"fd21\"}}", "detector.mode: unknown mode \"fd21\""},
      {"{" BASE ", \"detector\": {\"modes\": [\"fd20-128\", 3]}}", "detector.modes[1]: expected a mode name"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\"}]}",
       "models[0]: give exactly one of \"phantom\", \"file\", \"ellipsoids\""},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"phantom\": \"head\"}]}", "models[0].name: required"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"a b\", \"phantom\": \"head\"}]}",
       "models[0].name: \"a b\": use letters"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"perturb\": {\"rotate_deg\": "
       "[1, 2]}}]}",
       "models[0].perturb.rotate_deg: expected [x, y, z]"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"perturb\": {\"translate_mm\": "
       "[1, [3, 2], 0]}}]}",
       "models[0].perturb.translate_mm[1]: [3, 2]: lo > hi"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"convert\": \"hu\"}]}",
       "models[0].convert: applies to \"file\" models only"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"hu_model\": \"linear\"}]}",
       "models[0].hu_model: applies to \"file\" models only"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"file\": \"a.nii\", \"hu_model\": \"cubic\"}]}",
       "models[0].hu_model: unknown value \"cubic\" (one of bilinear|linear)"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\"}, {\"name\": \"s\", \"phantom\": "
       "\"head\", \"follows\": \"x\"}]}",
       "models[1].follows: \"x\" is not an earlier model's name"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"role\": \"labels\"}]}",
       "models: no model is in the image"},
      {"{" BASE ", \"poses\": {\"primary_deg\": [90, -90]}}", "poses.primary_deg: [90, -90]: lo > hi"},
      {"{" BASE ", \"poses\": {\"primary_deg\": 200}}", "poses.primary_deg: 200 is outside [-180, 180]"},
      {"{" BASE ", \"poses\": {\"secondary_deg\": [0, 95]}}", "poses.secondary_deg[1]: 95 is outside [-90, 90]"},
      {"{" BASE ", \"poses\": {\"sid_mm\": 700}}", "poses.sid_mm: the SID (down to 700 mm) must exceed the SOD"},
      {"{" BASE ", \"poses\": {\"sampler\": \"views\"}}", "poses.views: required"},
      {"{" BASE ", \"poses\": {\"sampler\": \"views\", \"views\": [\"AP\", \"LOA 30\"]}}",
       "poses.views[1]: \"LOA 30\" is not a view"},
      {"{" BASE ", \"poses\": {\"sampler\": \"views\", \"views\": [\"AP\"], \"primary_deg\": 3}}",
       "poses.primary_deg: the views set the angles"},
      {"{" BASE ", \"poses\": {\"sampler\": \"arc\", \"views\": 3}}", "frames: 10 is not a multiple of poses.views (3)"},
      {"{" BASE ", \"poses\": {\"sampler\": \"arc\", \"views\": 5, \"span_deg\": 300}}",
       "poses.span_deg: the arc -100 .. 200 deg leaves the primary range"},
      {"{" BASE ", \"poses\": {\"jitter_deg\": 3}}", "poses.jitter_deg: applies to the \"views\" sampler only"},
      {"{" BASE ", \"poses\": {\"sampler\": \"uniform\", \"start_deg\": 3}}",
       "poses.start_deg: applies to the \"arc\" sampler only"},
      {"{" BASE ", \"labels\": {\"channels\": [{\"name\": \"b\", \"model\": \"h\", \"labels\": [\"unobtainium\"]}]}}",
       "labels.channels[0].labels[0]: no material named \"unobtainium\""},
      {"{" BASE ", \"labels\": {\"channels\": [{\"name\": \"b\", \"model\": \"q\", \"labels\": [5]}]}}",
       "labels.channels[0].model: \"q\" is not a model's name"},
      {"{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\"}], \"labels\": {\"channels\": "
       "[{\"name\": \"b\", \"model\": \"h\", \"labels\": [5]}]}}",
       "labels.channels[0].labels: model \"h\" holds mu, not labels"},
      {"{" BASE ", \"labels\": {\"channels\": [{\"name\": \"b\", \"model\": \"h\", \"labels\": [5], \"mu_range\": [0, 1]}]}}",
       "labels.channels[0]: give exactly one of"},
      {"{" BASE ", \"labels\": {\"channels\": []}}", "labels.channels: expected: 1 to 64 channels"},
      {"{" BASE ", \"labels\": {\"quantity\": \"area\", \"channels\": [{\"name\": \"b\", \"model\": \"h\", \"labels\": [5]}]}}",
       "labels.quantity: unknown value \"area\""},
      {"{" BASE ", \"landmarks\": [{\"name\": \"n\", \"model\": \"h\"}]}", "landmarks[0].position_mm: required"},
      {"{" BASE ", \"chain\": {\"kvp\": 70}}", "chain.kvp: unknown field (did you mean \"kv\"?)"},
      {"{" BASE ", \"chain\": {\"kv\": [40, 150]}}", "chain.kv[1]: 150 is outside [40, 125]"},
      {"{" BASE ", \"chain\": {\"kv\": 70, \"filter_cu_mn\": 0.2}}", "chain.filter_cu_mn: unknown field (did you mean \"filter_cu_mm\"?)"},
      {"{" BASE ", \"chain\": {\"filter_cu_mm\": 9}}", "spec.json: chain.filter_cu_mm: 9 outside [0, 2]"},
      {"{" BASE ", \"chain\": {\"binning\": 1.5}}", "spec.json: chain.binning: 1.5 is not a whole number"},
      {"{" BASE ", \"chain\": {\"lag\": true}}", "spec.json: chain.lag: expected a number, got a boolean"},
      {"{" BASE ", \"chain\": {\"lag_frac_1\": 0.45, \"lag_frac_2\": 0.45}}", "spec.json: chain.lag_frac_*: fractions sum"},
      {"{" BASE ", \"chain\": {\"seed\": 3}}", "spec.json: chain.seed: not settable"},
      {"{" BASE ", \"chain\": {\"mas\": 0.1, \"dose_ngy\": 50}}", "spec.json: chain.mas: give mas or dose_ngy, not both"},
      {"{" BASE ", \"chain\": {\"noise\": false, \"quantum_noise\": 1}}", "spec.json: chain.quantum_noise: conflicts with"},
      {"{" BASE ", \"chain\": {\"dose_ngy\": [0.001, 10]}}", "spec.json: chain.dose_ngy: 0.001 nGy at 80 kV and SID 1195 mm needs"},
      {"{" BASE ", \"chain\": {\"kv\": 70}, \"write\": {\"raw\": false, \"processed\": false}}",
       "spec.json: write: a \"chain\" but neither raw nor processed"},
      {"{" BASE ", \"write\": {\"raw\": true}}", "write.raw: needs a \"chain\" section"},
      {"{" BASE ", \"write\": {\"labels\": true}}", "write.labels: no label channels"},
      {"{" BASE ", \"write\": {\"lineint\": false}}", "write: writes no image and no labels"},
      {"{" BASE ", \"write\": {\"landmarks\": 1}}", "write.landmarks: expected true or false"},
      {"{" BASE ", \"output\": {\"format\": \"zip\"}}", "output.format: unknown value \"zip\" (one of tar|folder)"},
      {"{" BASE ", \"output\": {\"shard_frames\": 0}}", "output.shard_frames: 0 is outside"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    xt_ds_spec s;
    xt_msg msg = {{0}};
    int rc = load_text(cases[i].json, &s, &msg);
    XT_CHECK_MSG(rc != 0, "case %zu accepted: %s", i, cases[i].json);
    if (rc == 0) {
      xt_ds_spec_free(&s);
      continue;
    }
    XT_CHECK_MSG(strstr(msg.text, cases[i].want) != NULL, "case %zu: got \"%s\", want \"%s\"", i, msg.text,
                 cases[i].want);
    XT_CHECK_MSG(strchr(msg.text, '\n') == NULL, "case %zu: more than one line", i);
  }
  xt_ds_spec s;
  xt_msg msg;
  /* A file that cannot be read is an I/O error naming the path. */
  XT_CHECK(xt_ds_spec_load("/nonexistent/spec.json", &s, &msg) == XT_EIO && strstr(msg.text, "/nonexistent/spec.json"));
  remove_dir();
}

/* The chain section: the chain's parameters by name, kV and dose drawn per frame inside their
 * ranges, one draw each after every other (the poses of a spec without a chain are unchanged),
 * and dose -> mAs by the inverse square law (twice the SID, four times the mAs) and linearly. */
XT_TEST(chain_spec_and_draws) {
  make_dir();
  xt_ds_spec a, b, c;
  xt_msg msg;
  XT_REQUIRE(load_text("{\"seed\": 9007199254740999, \"frames\": 50, " M0 ", \"poses\": {\"sid_mm\": [1000, 2000]}, "
                       "\"chain\": {\"kv\": [60, 90], \"dose_ngy\": [10, 40], \"noise\": false, \"filter_cu_mm\": 0.2, "
                       "\"binning\": 2, \"panel_seed\": 7}}",
                       &a, &msg) == 0);
  XT_REQUIRE(load_text("{\"seed\": 9007199254740999, \"frames\": 50, " M0 ", \"poses\": {\"sid_mm\": [1000, 2000]}}", &b,
                       &msg) == 0);
  XT_REQUIRE(load_text("{\"seed\": 1, \"frames\": 10, " M0 ", \"chain\": {\"mas\": 0.25}}", &c, &msg) == 0);
  XT_CHECK(a.chain.present && a.write.raw && a.write.processed && !b.chain.present && !b.write.raw);
  XT_CHECK(a.chain.base.filter_cu_mm == 0.2 && a.chain.base.binning == 2 && a.chain.base.panel_seed == 7);
  XT_CHECK(a.chain.base.quantum_noise == 0 && a.chain.base.e_noise_adu == 0);
  XT_CHECK(a.chain.base.seed == 9007199254740999ULL - (1ULL << 53)); /* the spec's seed mod 2^53 */
  XT_CHECK(c.chain.base.mas == 0.25 && c.chain.base.quantum_noise == 1 && c.chain.base.seed == 1);
  xt_ds_spec_free(&c);
  int rows, cols;
  xt_ds_chain_size(&a, 0, &rows, &cols);
  XT_CHECK(rows == 256 && cols == 256); /* fd20-512 binned 2x2 */
  xt_affine id = xt_aff_identity();
  double ctr[1][3] = {{0, 0, 0}};
  for (long long i = 0; i < 50; i++) {
    xt_ds_frame fa, fb;
    XT_REQUIRE(xt_ds_sample_frame(&a, &id, (const double(*)[3])ctr, i, &fa, &msg) == 0);
    XT_REQUIRE(xt_ds_sample_frame(&b, &id, (const double(*)[3])ctr, i, &fb, &msg) == 0);
    XT_CHECK(fa.geom.pose.sid_mm == fb.geom.pose.sid_mm && fa.geom.pose.primary_deg == fb.geom.pose.primary_deg);
    XT_CHECK(fa.chain.kv >= 60 && fa.chain.kv <= 90 && fa.dose_ngy >= 10 && fa.dose_ngy <= 40);
    XT_CHECK(fa.chain.filter_cu_mm == 0.2 && fa.chain.seed == a.chain.base.seed);
    double m1, m2, m3;
    XT_REQUIRE(xt_ds_dose_mas(&fa.chain, fa.chain.kv, fa.geom.pose.sid_mm, fa.dose_ngy, &m1, &msg) == 0);
    XT_REQUIRE(xt_ds_dose_mas(&fa.chain, fa.chain.kv, 2 * fa.geom.pose.sid_mm, fa.dose_ngy, &m2, &msg) == 0);
    XT_REQUIRE(xt_ds_dose_mas(&fa.chain, fa.chain.kv, fa.geom.pose.sid_mm, 3 * fa.dose_ngy, &m3, &msg) == 0);
    XT_CHECK(fa.chain.mas == m1 && fabs(m2 / m1 - 4) < 1e-9 && fabs(m3 / m1 - 3) < 1e-9);
  }
  /* Image models moving independently cannot share one chain scene. */
  XT_CHECK(load_text("{\"seed\": 1, \"frames\": 1, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"size\": 16}, "
                     "{\"name\": \"g\", \"phantom\": \"head\", \"size\": 16}], \"chain\": {}}",
                     &c, &msg) == XT_EINVAL &&
           strstr(msg.text, "spec.json: chain: image models \"h\" and \"g\" move independently"));
  xt_ds_spec_free(&a);
  xt_ds_spec_free(&b);
  remove_dir();
}

XT_TEST(spec_defaults_and_canonical_text) {
  make_dir();
  xt_ds_spec s, t;
  xt_msg msg;
  XT_REQUIRE(load_text("{" BASE "}", &s, &msg) == 0);
  XT_CHECK(s.nmodes == 1 && strcmp(s.modes[0]->name, "fd20-512") == 0);
  {
    xt_msg why; /* "auto" by default: the GPU where one is usable, else the CPU */
    XT_CHECK(s.backend == (xt_proj_available(XT_BACKEND_CUDA, &why) == 0 ? XT_BACKEND_CUDA : XT_BACKEND_CPU));
  }
  XT_CHECK(s.write.lineint && !s.write.labels && !s.write.segmentation && !s.write.intensity);
  XT_CHECK(s.format == XT_DS_FMT_TAR);
  /* ~1 GiB per shard at 512^2 float32 line integrals: 1 MiB + headers per frame. */
  XT_CHECK(s.shard_frames > 900 && s.shard_frames < 1024);
  XT_CHECK(xt_ds_spec_shards(&s) == 1);
  XT_CHECK(strlen(s.sha256) == 64);
  /* Key order and spacing do not change the canonical text or its hash. */
  XT_REQUIRE(load_text("{\n  " M0 ",  \"frames\": 10, \"seed\": 1\n}", &t, &msg) == 0);
  XT_CHECK(strcmp(s.canonical, t.canonical) == 0 && strcmp(s.sha256, t.sha256) == 0);
  /* The digest is SHA-256 of the canonical text (computed here independently). */
  unsigned char md[32];
  unsigned len = 0;
  EVP_Digest(s.canonical, strlen(s.canonical), md, &len, EVP_sha256(), NULL);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  XT_CHECK(strcmp(hex, s.sha256) == 0);
  xt_ds_spec_free(&s);
  xt_ds_spec_free(&t);
  remove_dir();
}

XT_TEST(view_names) {
  static const struct {
    const char *text;
    double p, s;
  } ok[] = {{"AP", 0, 0},          {"PA", 180, 0},          {"LAT", 90, 0},        {"rlat", -90, 0},
            {"LAO 30", 30, 0},     {"RAO45", -45, 0},       {"CRAN 20", 0, 20},    {"CAUD15", 0, -15},
            {"RAO 30 CRAN 20", -30, 20}, {"LAO 45/CAUD 30", 45, -30}, {"AP CRAN 10", 0, 10}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    double p = -999, s = -999;
    XT_CHECK_MSG(xt_ds_parse_view(ok[i].text, &p, &s) == 0 && p == ok[i].p && s == ok[i].s, "%s -> %g %g", ok[i].text,
                 p, s);
  }
  static const char *const bad[] = {"", "LOA 30", "LAO", "LAO -30", "LAO 30 RAO 20", "CRAN 95", "LAO 30 x", "APX"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double p, s;
    XT_CHECK_MSG(xt_ds_parse_view(bad[i], &p, &s) != 0, "\"%s\" accepted", bad[i]);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Sampling                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const xt_affine ID3 = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};

XT_TEST(sampling_ranges_and_determinism) {
  make_dir();
  xt_ds_spec s;
  xt_msg msg;
  XT_REQUIRE(load_text("{\"seed\": 99, \"frames\": 4000, \"detector\": {\"modes\": [\"fd20-128\", \"fd20-256\"]}, " M0
                       ", \"poses\": {\"primary_deg\": [-60, 30], \"secondary_deg\": [-10, 20], \"detector_rot_deg\": 5, "
                       "\"sid_mm\": [1000, 1200], \"table_mm\": [[-5, 5], 0, [10, 30]]}}",
                       &s, &msg) == 0);
  const xt_affine pl[1] = {ID3};
  const double c[1][3] = {{0, 0, 0}};
  double sum_p = 0;
  int mode1 = 0;
  for (long long i = 0; i < s.frames; i++) {
    xt_ds_frame f, g;
    XT_REQUIRE(xt_ds_sample_frame(&s, pl, c, i, &f, &msg) == 0);
    const xt_pose *p = &f.geom.pose;
    XT_CHECK(p->primary_deg >= -60 && p->primary_deg <= 30);
    XT_CHECK(p->secondary_deg >= -10 && p->secondary_deg <= 20);
    XT_CHECK(p->detector_rot_deg == 5);
    XT_CHECK(p->sid_mm >= 1000 && p->sid_mm <= 1200 && p->sod_mm == 810);
    XT_CHECK(p->table_mm.x >= -5 && p->table_mm.x <= 5 && p->table_mm.y == 0 && p->table_mm.z >= 10 && p->table_mm.z <= 30);
    XT_CHECK(f.seed == xt_ds_frame_seed(99, i));
    XT_CHECK(strcmp(f.geom.mode.name, s.modes[f.mode]->name) == 0);
    sum_p += p->primary_deg;
    mode1 += f.mode;
    if (i % 997 == 0) { /* the same frame again, out of order: the same draws */
      XT_REQUIRE(xt_ds_sample_frame(&s, pl, c, i, &g, &msg) == 0);
      XT_CHECK(memcmp(&f, &g, sizeof f) == 0);
    }
  }
  /* Uniform: the mean of 4000 draws on [-60, 30] within 6 sigma (sigma = 90/sqrt(12*4000) = 0.41). */
  XT_CHECK_NEAR(sum_p / s.frames, -15.0, 2.5);
  XT_CHECK(mode1 > 1700 && mode1 < 2300); /* each mode about half the time */
  /* The formula of the documented per-frame seed (docs/dataset.md), by hand for index 0. */
  uint64_t z = 99 + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  XT_CHECK(xt_ds_frame_seed(99, 0) == (z ^ (z >> 31)));
  xt_ds_spec_free(&s);
  remove_dir();
}

XT_TEST(arc_angles_and_one_draw_per_run) {
  make_dir();
  xt_ds_spec s;
  xt_msg msg;
  XT_REQUIRE(load_text("{\"seed\": 5, \"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"perturb\": {\"translate_mm\": "
                       "10, \"rotate_deg\": 5}}], \"poses\": {\"sampler\": \"arc\", \"views\": 11, \"runs\": 3, "
                       "\"start_deg\": -100, \"span_deg\": 200, \"secondary_deg\": [-10, 10], \"table_mm\": [5, [-5, 5], 0]}}",
                       &s, &msg) == 0);
  XT_CHECK(s.frames == 33);
  const xt_affine pl[1] = {ID3};
  const double c[1][3] = {{0, 0, 0}};
  xt_ds_frame first[3];
  for (long long i = 0; i < 33; i++) {
    xt_ds_frame f;
    XT_REQUIRE(xt_ds_sample_frame(&s, pl, c, i, &f, &msg) == 0);
    XT_CHECK(f.run == i / 11 && f.view == i % 11);
    XT_CHECK_NEAR(f.geom.pose.primary_deg, -100 + 20.0 * (double)(i % 11), 1e-12);
    if (i % 11 == 0) first[i / 11] = f;
    const xt_ds_frame *r0 = &first[i / 11];
    XT_CHECK(f.geom.pose.secondary_deg == r0->geom.pose.secondary_deg);
    XT_CHECK(f.geom.pose.table_mm.y == r0->geom.pose.table_mm.y);
    XT_CHECK(memcmp(f.translate_mm, r0->translate_mm, sizeof f.translate_mm) == 0);
    XT_CHECK(memcmp(f.rotate_deg, r0->rotate_deg, sizeof f.rotate_deg) == 0);
  }
  XT_CHECK(first[0].geom.pose.secondary_deg != first[1].geom.pose.secondary_deg);
  XT_CHECK(first[1].translate_mm[0][0] != first[2].translate_mm[0][0]);
  xt_ds_spec_free(&s);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* Frames against exact chords                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The volume: 40 x 30 x 20 voxels of 2 x 2.5 x 3 mm, air (0), a block of soft tissue (2) and
 * inside it a box of bone (5), all faces on voxel faces; model mm below. */
static const int NX = 40, NY = 30, NZ = 20;
static const double OUTER[2][3] = {{-32, -30, -24}, {32, 30, 24}};
static const double INNER[2][3] = {{-20, -17.5, -15}, {10, 12.5, 12}};
static const double WHOLE[2][3] = {{-40, -37.5, -30}, {40, 37.5, 30}}; /* air (label 0) has its mu too */

static void write_boxes(const char *name) {
  size_t n = (size_t)NX * NY * NZ;
  unsigned char *v = calloc(n, 1);
  for (int k = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++) {
        int lab = 0;
        if (i >= 4 && i < 36 && j >= 3 && j < 27 && k >= 2 && k < 18) lab = 2;
        if (i >= 10 && i < 25 && j >= 8 && j < 20 && k >= 5 && k < 14) lab = 5;
        v[i + (size_t)NX * (j + (size_t)NY * k)] = (unsigned char)lab;
      }
  char hdr[512];
  int hl = snprintf(hdr, sizeof hdr,
                    "ObjectType = Image\nNDims = 3\nDimSize = %d %d %d\nElementSpacing = 2 2.5 3\nOffset = -39 -36.25 "
                    "-28.5\nTransformMatrix = 1 0 0 0 1 0 0 0 1\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n",
                    NX, NY, NZ);
  unsigned char *all = malloc((size_t)hl + n);
  memcpy(all, hdr, (size_t)hl);
  memcpy(all + hl, v, n);
  write_file(name, all, (size_t)hl + n);
  free(all);
  free(v);
}

/* Length of the segment a->b inside the box [lo, hi] (slabs, double). */
static double chord(const double box[2][3], xt_vec3 a, xt_vec3 b) {
  double t0 = 0, t1 = 1;
  double pa[3] = {a.x, a.y, a.z}, d[3] = {b.x - a.x, b.y - a.y, b.z - a.z};
  for (int i = 0; i < 3; i++) {
    if (d[i] == 0) {
      if (pa[i] < box[0][i] || pa[i] > box[1][i]) return 0;
      continue;
    }
    double u = (box[0][i] - pa[i]) / d[i], v = (box[1][i] - pa[i]) / d[i];
    if (u > v) {
      double t = u;
      u = v;
      v = t;
    }
    if (u > t0) t0 = u;
    if (v < t1) t1 = v;
  }
  return t1 > t0 ? (t1 - t0) * sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) : 0;
}

/* Maps a world point into model m's frame for frame f. */
static xt_vec3 to_model(const xt_ds_frame *f, int m, xt_vec3 p) {
  xt_affine p2w = xt_geom_patient_to_world(&f->geom.pose), m2w = xt_aff_compose(&p2w, &f->model_to_patient[m]), w2m;
  if (!xt_aff_invert(&m2w, &w2m)) return p;
  return xt_aff_apply(&w2m, p);
}

typedef struct frame_buf {
  float *img, *ch[2];
} frame_buf;

/* Renders n frames of spec text through the dataset's renderer. */
static int render_frames(const char *spec_text, int n, xt_ds_spec *s, xt_ds_scene *sc, xt_ds_frame *f, frame_buf *fb) {
  xt_msg msg;
  xt_ds_renderer *r = NULL;
  if (load_text(spec_text, s, &msg) || xt_ds_scene_load(s, sc, &msg) ||
      xt_ds_renderer_create(sc, s->backend, 0, 2, &r, &msg)) {
    fprintf(stderr, "  set-up: %s\n", msg.text);
    return -1;
  }
  size_t px = (size_t)s->modes[0]->rows * s->modes[0]->cols;
  fb->img = malloc(sizeof(float) * px * (size_t)n);
  for (int k = 0; k < 2; k++) fb->ch[k] = malloc(sizeof(float) * px * (size_t)n);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) rc = xt_ds_sample_frame(s, sc->placement, (const double(*)[3])sc->center, i, &f[i], &msg);
  if (!rc) rc = xt_ds_render_image(r, f, n, fb->img, &msg);
  if (!rc && s->nchannels) rc = xt_ds_render_labels(r, f, n, fb->ch, &msg);
  if (rc) fprintf(stderr, "  render: %s\n", msg.text);
  xt_ds_renderer_free(r);
  return rc;
}

static void free_frames(frame_buf *fb) {
  free(fb->img);
  free(fb->ch[0]);
  free(fb->ch[1]);
}

XT_TEST(boxes_under_random_motion_match_exact_chords) {
  make_dir();
  write_boxes("boxes.mha");
  xt_ds_spec s;
  xt_ds_scene sc;
  enum { N = 3 };
  xt_ds_frame f[N];
  frame_buf fb;
  XT_REQUIRE(render_frames(
                 "{\"seed\": 2024, \"frames\": 3, \"backend\": \"" BACKEND "\", \"detector\": {\"mode\": \"fd20-128\"}, "
                 "\"models\": [{\"name\": \"box\", \"file\": \"boxes.mha\", \"convert\": \"labels\", \"place\": \"native\", "
                 "\"perturb\": {\"translate_mm\": [10, 10, [-5, 15]], \"rotate_deg\": 30}}], "
                 "\"poses\": {\"primary_deg\": [-180, 180], \"secondary_deg\": [-40, 40], \"detector_rot_deg\": [-30, 30], "
                 "\"table_mm\": [20, [-20, 20], 10]}, "
                 "\"labels\": {\"channels\": [{\"name\": \"bone\", \"model\": \"box\", \"labels\": [\"bone\"]}, "
                 "{\"name\": \"soft\", \"model\": \"box\", \"labels\": [2]}]}}",
                 N, &s, &sc, f, &fb) == 0);
  const float *mu = xt_model_volume(sc.models[0])->materials->mu;
  const int rows = s.modes[0]->rows, cols = s.modes[0]->cols;
  const size_t px = (size_t)rows * cols;
  for (int i = 0; i < N; i++) {
    double emax[3] = {0}, vmax[3] = {0};
    int hit = 0;
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        const xt_geometry *g = &f[i].geom;
        xt_vec3 a = to_model(&f[i], 0, g->source), b = to_model(&f[i], 0, xt_geom_pixel_pos(g, c, r));
        double in = chord(INNER, a, b), out = chord(OUTER, a, b) - in, air = chord(WHOLE, a, b) - in - out;
        double want[3] = {mu[0] * air + mu[2] * out + mu[5] * in, in, out};
        size_t k = (size_t)i * px + (size_t)r * cols + c;
        double got[3] = {fb.img[k], fb.ch[0][k], fb.ch[1][k]};
        hit += in > 0;
        for (int q = 0; q < 3; q++) {
          emax[q] = fmax(emax[q], fabs(got[q] - want[q]));
          vmax[q] = fmax(vmax[q], want[q]);
        }
      }
    XT_CHECK_MSG(hit > 100, "frame %d: the bone box is hit by %d rays only", i, hit);
    for (int q = 0; q < 3; q++)
      XT_CHECK_MSG(emax[q] <= TOL_REL * vmax[q] + 1e-6, "frame %d, %s: max error %g of max %g", i,
                   q == 0 ? "image" : q == 1 ? "bone" : "soft", emax[q], vmax[q]);
  }
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  free_frames(&fb);
  remove_dir();
}

XT_TEST(two_models_move_apart_and_a_segmentation_follows_one) {
  make_dir();
  write_boxes("boxes.mha");
  xt_ds_spec s;
  xt_ds_scene sc;
  enum { N = 2 };
  xt_ds_frame f[N];
  frame_buf fb;
  XT_REQUIRE(render_frames(
                 "{\"seed\": 11, \"frames\": 2, \"backend\": \"" BACKEND "\", \"detector\": {\"mode\": \"fd20-128\"}, "
                 "\"models\": [{\"name\": \"a\", \"file\": \"boxes.mha\", \"convert\": \"labels\", \"place\": \"native\", "
                 "\"offset_mm\": [-45, 0, 0], \"perturb\": {\"translate_mm\": 8, \"rotate_deg\": 20}}, "
                 "{\"name\": \"b\", \"file\": \"boxes.mha\", \"convert\": \"labels\", \"place\": \"native\", "
                 "\"offset_mm\": [45, 0, 0], \"perturb\": {\"translate_mm\": 8, \"rotate_deg\": 20}}, "
                 "{\"name\": \"seg\", \"file\": \"boxes.mha\", \"convert\": \"labels\", \"role\": \"labels\", \"follows\": \"a\"}], "
                 "\"poses\": {\"primary_deg\": [-180, 180], \"secondary_deg\": [-30, 30]}, "
                 "\"labels\": {\"quantity\": \"line_integral\", \"channels\": [{\"name\": \"a_bone\", \"model\": \"seg\", "
                 "\"labels\": [5]}]}}",
                 N, &s, &sc, f, &fb) == 0);
  XT_CHECK(memcmp(f[0].translate_mm[0], f[0].translate_mm[1], sizeof f[0].translate_mm[0]) != 0);
  XT_CHECK(memcmp(f[0].rotate_deg[2], f[0].rotate_deg[0], sizeof f[0].rotate_deg[0]) == 0);
  const float *mu = xt_model_volume(sc.models[0])->materials->mu;
  const int rows = s.modes[0]->rows, cols = s.modes[0]->cols;
  const size_t px = (size_t)rows * cols;
  for (int i = 0; i < N; i++) {
    double e_img = 0, e_ch = 0, v_img = 0, v_ch = 0;
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        const xt_geometry *g = &f[i].geom;
        double want = 0, want_ch = 0;
        for (int m = 0; m < 2; m++) {
          xt_vec3 a = to_model(&f[i], m, g->source), b = to_model(&f[i], m, xt_geom_pixel_pos(g, c, r));
          double in = chord(INNER, a, b), out = chord(OUTER, a, b) - in, air = chord(WHOLE, a, b) - in - out;
          want += mu[0] * air + mu[2] * out + mu[5] * in;
          if (m == 0) want_ch = mu[5] * in; /* line integral of bone, model a's only */
        }
        size_t k = (size_t)i * px + (size_t)r * cols + c;
        e_img = fmax(e_img, fabs(fb.img[k] - want));
        e_ch = fmax(e_ch, fabs(fb.ch[0][k] - want_ch));
        v_img = fmax(v_img, want);
        v_ch = fmax(v_ch, want_ch);
      }
    XT_CHECK(v_ch > 0.1);
    XT_CHECK_MSG(e_img <= TOL_REL * v_img + 1e-6, "frame %d image: max error %g of %g", i, e_img, v_img);
    XT_CHECK_MSG(e_ch <= TOL_REL * v_ch + 1e-6, "frame %d a_bone: max error %g of %g", i, e_ch, v_ch);
  }
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  free_frames(&fb);
  remove_dir();
}

/* A dense model's channel from a mu range: the bone box again, now as mu (a float volume). */
XT_TEST(mu_range_channel_of_a_dense_model) {
  make_dir();
  /* The same boxes as mu: soft 0.02, bone 0.05 per mm. */
  size_t n = (size_t)NX * NY * NZ;
  float *v = calloc(n, sizeof *v);
  for (int k = 0; k < NZ; k++)
    for (int j = 0; j < NY; j++)
      for (int i = 0; i < NX; i++) {
        float mu = 0;
        if (i >= 4 && i < 36 && j >= 3 && j < 27 && k >= 2 && k < 18) mu = 0.02f;
        if (i >= 10 && i < 25 && j >= 8 && j < 20 && k >= 5 && k < 14) mu = 0.05f;
        v[i + (size_t)NX * (j + (size_t)NY * k)] = mu;
      }
  char hdr[512];
  int hl = snprintf(hdr, sizeof hdr,
                    "ObjectType = Image\nNDims = 3\nDimSize = %d %d %d\nElementSpacing = 2 2.5 3\nOffset = -39 -36.25 "
                    "-28.5\nTransformMatrix = 1 0 0 0 1 0 0 0 1\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n",
                    NX, NY, NZ);
  unsigned char *all = malloc((size_t)hl + n * 4);
  memcpy(all, hdr, (size_t)hl);
  memcpy(all + hl, v, n * 4);
  write_file("mu.mha", all, (size_t)hl + n * 4);
  free(all);
  free(v);
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_ds_frame f[1];
  frame_buf fb;
  XT_REQUIRE(render_frames("{\"seed\": 3, \"frames\": 1, \"backend\": \"" BACKEND "\", \"detector\": {\"mode\": "
                           "\"fd20-128\"}, \"models\": [{\"name\": \"m\", \"file\": \"mu.mha\", \"convert\": \"mu\", "
                           "\"place\": \"native\"}], \"poses\": {\"primary_deg\": 35, \"secondary_deg\": 20}, "
                           "\"labels\": {\"channels\": [{\"name\": \"dense\", \"model\": \"m\", \"mu_range\": [0.03, 1]}]}}",
                           1, &s, &sc, f, &fb) == 0);
  const int rows = s.modes[0]->rows, cols = s.modes[0]->cols;
  double e = 0, vm = 0;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const xt_geometry *g = &f[0].geom;
      xt_vec3 a = to_model(&f[0], 0, g->source), b = to_model(&f[0], 0, xt_geom_pixel_pos(g, c, r));
      double in = chord(INNER, a, b);
      e = fmax(e, fabs(fb.ch[0][(size_t)r * cols + c] - in));
      vm = fmax(vm, in);
    }
  XT_CHECK(vm > 10);
  XT_CHECK_MSG(e <= TOL_REL * vm + 1e-6, "max error %g of %g", e, vm);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  free_frames(&fb);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* Tar shards                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static unsigned long long from_octal(const unsigned char *p, int n) {
  unsigned long long v = 0;
  for (int i = 0; i < n && p[i] >= '0' && p[i] <= '7'; i++) v = v * 8 + (unsigned)(p[i] - '0');
  return v;
}

/* The dataset's chain frames against a chain of their own: the model placed where the frame moved
 * it (placement then perturbation, on the model itself) and the frame's world geometry, where the
 * dataset moves the rays instead and resets its chain per frame. Noise off: the two projections
 * differ only by float rounding of the rays, so the codes agree to 1 ADU (raw) and 2 (processed,
 * after the log and edge enhancement) almost everywhere. Then noise on: reproducible per frame
 * index whatever order the frames come in. */
XT_TEST(chain_frames_match_a_chain_of_their_own) {
  make_dir();
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_msg msg;
  xt_ds_renderer *r = NULL;
  enum { N = 3 };
  xt_ds_frame f[N];
  const char *spec = "{\"seed\": 31, \"frames\": 3, \"backend\": \"" BACKEND "\", \"detector\": {\"mode\": \"fd20-128\"}, "
                     "\"models\": [{\"name\": \"h\", \"phantom\": \"head-labels\", \"size\": 32, \"spacing_mm\": 6, "
                     "\"perturb\": {\"translate_mm\": 15, \"rotate_deg\": [5, 5, 20]}}], "
                     "\"poses\": {\"primary_deg\": [-60, 60], \"table_mm\": [[-10, 10], 0, [-20, 20]]}, "
                     "\"chain\": {\"kv\": [60, 90], \"mas\": 0.0045, \"noise\": false}}";
  /* 0.0045 mAs: the codes this test had at 0.004 mAs with adu_per_kev 0.0005 before a fd20-128 pixel
   * read the mean of its 225 native pixels' codes (issue 27), ~200 ADU above the offset in air */
  XT_REQUIRE(load_text(spec, &s, &msg) == 0);
  XT_REQUIRE(xt_ds_scene_load(&s, &sc, &msg) == 0);
  XT_REQUIRE_MSG(xt_ds_renderer_create(&sc, s.backend, 0, 2, &r, &msg) == 0, "%s", msg.text);
  const size_t px = 128 * 128;
  uint16_t *raw = malloc(sizeof *raw * px * N), *proc = malloc(sizeof *proc * px * N);
  uint16_t *raw1 = malloc(sizeof *raw1 * px), *proc1 = malloc(sizeof *proc1 * px);
  XT_REQUIRE(raw && proc && raw1 && proc1);
  for (int i = 0; i < N; i++) XT_REQUIRE(xt_ds_sample_frame(&s, sc.placement, (const double(*)[3])sc.center, i, &f[i], &msg) == 0);
  XT_REQUIRE_MSG(xt_ds_render_chain(r, f, N, raw, proc, &msg) == 0, "%s", msg.text);
  for (int i = 0; i < N; i++) {
    xt_model *m = NULL;
    int dim[3] = {32, 32, 32};
    XT_REQUIRE(xt_phantom_head_model(dim, 6, XT_VOXEL_U8, &m, &msg) == 0);
    m->placement = f[i].model_to_patient[0];
    xt_proj_options po = {s.backend, 2, 0};
    xt_proj *p = NULL;
    xt_chain *c = NULL;
    XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0 && xt_proj_add_model(p, m, &msg) == 0);
    XT_REQUIRE_MSG(xt_chain_create(&f[i].chain, p, &c, &msg) == 0, "%s", msg.text);
    xt_chain_out co = {raw1, proc1, NULL, NULL, 0};
    XT_REQUIRE_MSG(xt_chain_frame(c, &f[i].geom, (uint64_t)i, &co, &msg) == 0, "%s", msg.text);
    size_t off1 = 0, off2 = 0;
    long long sat = 0;
    for (size_t k = 0; k < px; k++) {
      int d1 = abs((int)raw[i * px + k] - (int)raw1[k]), d2 = abs((int)proc[i * px + k] - (int)proc1[k]);
      off1 += d1 > 1;
      off2 += d2 > 2;
      sat += raw1[k] == 16383;
    }
    XT_CHECK_MSG(off1 <= px / 1000 && off2 <= px / 1000, "frame %d: %zu raw, %zu processed pixels off", i, off1, off2);
    XT_CHECK_MSG(sat < (long long)px / 20, "frame %d: %lld pixels saturated", i, sat);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
    xt_model_free(m);
  }
  /* Noise on: frame 2 alone equals frame 2 of the batch (no state carried from frames 0 and 1). */
  s.chain.base.quantum_noise = 1;
  for (int i = 0; i < N; i++) f[i].chain.quantum_noise = 1;
  XT_REQUIRE_MSG(xt_ds_render_chain(r, f, N, raw, proc, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(xt_ds_render_chain(r, &f[2], 1, raw1, proc1, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(raw + 2 * px, raw1, px * sizeof *raw1) == 0 && memcmp(proc + 2 * px, proc1, px * sizeof *proc1) == 0);
  XT_CHECK(memcmp(raw + 1 * px, raw1, px * sizeof *raw1) != 0);
  free(raw);
  free(proc);
  free(raw1);
  free(proc1);
  xt_ds_renderer_free(r);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  remove_dir();
}

XT_TEST(tar_shard_layout) {
  make_dir();
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_msg msg;
  XT_REQUIRE(load_text("{\"seed\": 1, \"frames\": 3, \"backend\": \"cpu\", \"detector\": {\"mode\": \"fd20-128\"}, " M0
                       ", \"labels\": {\"channels\": [{\"name\": \"b\", \"model\": \"h\", \"labels\": [5]}]}, "
                       "\"write\": {\"intensity\": true}}",
                       &s, &msg) == 0);
  XT_REQUIRE(xt_ds_scene_load(&s, &sc, &msg) == 0);
  xt_ds_out o;
  char out[400];
  snprintf(out, sizeof out, "%s/out", dir);
  XT_REQUIRE(xt_ds_out_prepare(&s, out, &o, &msg) == 0);
  xt_ds_encoder *e = NULL;
  xt_ds_shard_writer *w = NULL;
  XT_REQUIRE(xt_ds_encoder_create(&sc, &e, &msg) == 0);
  XT_REQUIRE(xt_ds_shard_open(&s, &o, 0, &w, &msg) == 0);
  const size_t px = 128 * 128;
  float *img = malloc(px * 4), *ch = malloc(px * 4);
  for (size_t i = 0; i < px; i++) img[i] = (float)i * 1e-4f, ch[i] = (i % 3) ? 0.0f : 2.5f;
  xt_ds_wstats st = {0};
  for (int i = 0; i < 3; i++) {
    xt_ds_frame f;
    XT_REQUIRE(xt_ds_sample_frame(&s, sc.placement, (const double(*)[3])sc.center, i, &f, &msg) == 0);
    xt_ds_frame_data fd = {&f, img, {ch}, NULL, NULL, NULL};
    XT_REQUIRE(xt_ds_shard_add(w, e, &fd, &st, NULL, NULL, &msg) == 0);
  }
  XT_REQUIRE(xt_ds_shard_commit(w, &st, NULL, NULL, &msg) == 0);
  XT_CHECK(xt_ds_shard_done(&s, &o, 0, 1, 0) == 1);
  char path[600];
  snprintf(path, sizeof path, "%s/shards/shard-000000.tar", out);
  FILE *fp = fopen(path, "rb");
  XT_REQUIRE(fp != NULL);
  fseek(fp, 0, SEEK_END);
  long size = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *t = malloc((size_t)size);
  XT_REQUIRE(fread(t, 1, (size_t)size, fp) == (size_t)size);
  fclose(fp);
  XT_CHECK(size % 512 == 0 && st.bytes == size);
  static const char *const ext[] = {"lineint.npy", "intensity.npy", "labels.npy", "seg.npy", "json"};
  long pos = 0;
  int members = 0;
  while (pos + 512 <= size) {
    const unsigned char *h = t + pos;
    int zero = 1;
    for (int i = 0; i < 512; i++) zero &= h[i] == 0;
    if (zero) break;
    /* The ustar checksum: the header's bytes summed with the checksum field read as spaces. */
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    XT_CHECK(from_octal(h + 148, 8) == sum);
    XT_CHECK(memcmp(h + 257, "ustar\0" "00", 8) == 0);
    XT_CHECK(h[156] == '0' && from_octal(h + 136, 12) == 0 && from_octal(h + 108, 8) == 0);
    char want[64];
    snprintf(want, sizeof want, "%012d.%s", members / 5, ext[members % 5]);
    XT_CHECK_MSG(strcmp((const char *)h, want) == 0, "member %d is %s, want %s", members, h, want);
    unsigned long long n = from_octal(h + 124, 12);
    if (members % 5 == 0) { /* lineint: an NPY whose data is the image, bit for bit */
      XT_CHECK(memcmp(t + pos + 512, "\x93NUMPY\x01\x00", 8) == 0);
      size_t hl = (size_t)t[pos + 520] | (size_t)t[pos + 521] << 8;
      XT_CHECK((10 + hl) % 64 == 0 && n == 10 + hl + px * 4);
      XT_CHECK(memcmp(t + pos + 512 + 10 + hl, img, px * 4) == 0);
    }
    if (members % 5 == 3) { /* seg: bit 0 where the channel is > 0 */
      size_t hl = (size_t)t[pos + 520] | (size_t)t[pos + 521] << 8;
      const unsigned char *seg = t + pos + 512 + 10 + hl;
      int bad = 0;
      for (size_t i = 0; i < px; i++) bad += seg[i] != (ch[i] > 0);
      XT_CHECK(bad == 0 && n == 10 + hl + px);
    }
    pos += 512 + (long)((n + 511) / 512 * 512);
    members++;
  }
  XT_CHECK(members == 15);
  XT_CHECK(pos + 1024 == size); /* two zero blocks end the archive */
  free(t);
  free(img);
  free(ch);
  xt_ds_encoder_free(e);
  xt_ds_out_close(&o);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* Contrast (docs/dataset.md, "Contrast")                                                     */
/* ------------------------------------------------------------------------------------------ */

#define THORAX "\"models\": [{\"name\": \"t\", \"phantom\": \"thorax\", \"spacing_mm\": 4}], " \
               "\"detector\": {\"mode\": \"fd20-128\"}, \"backend\": \"" BACKEND "\", "

static double p4(double x) { return x <= 0 ? 0.0 : 1.0 - exp(-x) * (1 + x + x * x / 2 + x * x * x / 6); }

/* Frames of the thorax with iodine in its aorta: at a fixed 10 mg/mL they equal the thorax whose
 * aorta is the default table's iodine_contrast (blood + 10 mg I/mL, no region: an independent
 * path); at a concentration drawn per frame (each frame its own, one batch) each equals the CPU
 * projector's frame of the thorax with that iodine set; a bolus gives each region the closed form
 * (alpha = 3: P(4, x)) at the drawn time; bad contrast sections are refused naming the field. */
XT_TEST(contrast_in_frames) {
  make_dir();
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_msg msg;
  enum { N = 5 };
  xt_ds_frame f[N];
  frame_buf fb;
  /* 1. 10 mg/mL: the static scene */
  XT_REQUIRE(render_frames("{\"seed\": 3, \"frames\": 5, " THORAX "\"poses\": {\"primary_deg\": [-40, 40]}, "
                           "\"contrast\": {\"regions\": [\"aorta\"], \"mg_ml\": 10}}", N, &s, &sc, f, &fb) == 0);
  xt_model *ref = NULL;
  XT_REQUIRE(xt_phantom_thorax_model(4, &ref, &msg) == 0);
  xt_material_table def;
  XT_REQUIRE(xt_materials_default(XT_DEFAULT_ENERGY_KEV, &def, &msg) == 0);
  xt_material_table *t = xt_model_volume(ref)->materials;
  memset(t->contrast, 0, sizeof t->contrast);
  t->mu[XT_THORAX_AORTA] = def.mu[XT_MAT_IODINE];
  ref->placement = sc.models[0]->placement;
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  xt_proj *pr = NULL, *pl = NULL;
  XT_REQUIRE(xt_proj_create(&po, &pr, &msg) == 0 && xt_proj_add_model(pr, ref, &msg) == 0);
  XT_REQUIRE(xt_proj_create(&po, &pl, &msg) == 0 && xt_proj_add_model(pl, sc.models[0], &msg) == 0);
  const size_t px = (size_t)s.modes[0]->rows * s.modes[0]->cols;
  float *o = malloc(sizeof *o * px);
  XT_REQUIRE(o);
  for (int i = 0; i < N; i++) {
    XT_CHECK(f[i].iodine_mg_ml[0] == 10.0);
    XT_REQUIRE(xt_proj_render(pr, &f[i].geom, o, &msg) == 0);
    double mx = 0, err = 0;
    for (size_t k = 0; k < px; k++) {
      if (fabs(o[k]) > mx) mx = fabs(o[k]);
      if (fabs(o[k] - fb.img[i * px + k]) > err) err = fabs(o[k] - fb.img[i * px + k]);
    }
    XT_CHECK_MSG(err <= (TOL_REL > 2e-6 ? TOL_REL : 2e-6) * mx, "frame %d: %g off the static scene (max %g)", i, err, mx);
  }
  free_frames(&fb);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  /* 2. a concentration per frame, five in one batch */
  XT_REQUIRE(render_frames("{\"seed\": 4, \"frames\": 5, " THORAX "\"contrast\": {\"regions\": [\"aorta\", \"heart\"], "
                           "\"mg_ml\": [0, 30]}}", N, &s, &sc, f, &fb) == 0);
  xt_proj_destroy(pl);
  XT_REQUIRE(xt_proj_create(&po, &pl, &msg) == 0 && xt_proj_add_model(pl, sc.models[0], &msg) == 0);
  for (int i = 0; i < N; i++) {
    const double c = f[i].iodine_mg_ml[0];
    XT_CHECK(c >= 0 && c <= 30 && f[i].iodine_mg_ml[1] == c && (i == 0 || c != f[i - 1].iodine_mg_ml[0]));
    double rho[256] = {0};
    rho[XT_THORAX_AORTA] = rho[XT_THORAX_HEART] = c * 1e-3;
    XT_REQUIRE(xt_proj_set_iodine(pl, sc.models[0], rho, &msg) == 0);
    XT_REQUIRE(xt_proj_render(pl, &f[i].geom, o, &msg) == 0);
    double mx = 0, err = 0;
    for (size_t k = 0; k < px; k++) {
      if (fabs(o[k]) > mx) mx = fabs(o[k]);
      if (fabs(o[k] - fb.img[i * px + k]) > err) err = fabs(o[k] - fb.img[i * px + k]);
    }
    XT_CHECK_MSG(err <= TOL_REL * mx, "frame %d (%.3f mg/mL): %g off its projector's frame (max %g)", i, c, err, mx);
  }
  free_frames(&fb);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  /* 3. a bolus: 20 mL at 20 mL/s, the time drawn in [0, 6] s */
  XT_REQUIRE(load_text("{\"seed\": 5, \"frames\": 40, " THORAX "\"contrast\": {\"regions\": [\"aorta\", \"coronary\"], "
                       "\"bolus\": {\"rate_ml_s\": 20, \"volume_ml\": 20, \"t_s\": [0, 6]}}}", &s, &msg) == 0);
  const double place[3] = {0, 0, 0};
  const xt_affine id[1] = {ID3};
  int peak = 0, capped = 0;
  for (int i = 0; i < 40; i++) {
    xt_ds_frame g;
    XT_REQUIRE(xt_ds_sample_frame(&s, id, (const double(*)[3])place, i, &g, &msg) == 0);
    const double ta = g.contrast_t_s - 0.5, T = 1.0;
    XT_CHECK(g.contrast_t_s >= 0 && g.contrast_t_s <= 6);
    const double h = p4(ta / 0.35) - p4((ta - T) / 0.35);
    const double aorta = 350.0 * 20 / 83 * h, cor = fmin(350.0, 350.0 * 20 / 4 * h);
    XT_CHECK_NEAR(g.iodine_mg_ml[0], aorta, 1e-7 * aorta + 1e-9); /* the time in whole ns */
    XT_CHECK_NEAR(g.iodine_mg_ml[1], cor, 1e-7 * cor + 1e-9);
    peak += aorta > 20;
    capped += cor == 350.0;
  }
  XT_CHECK_MSG(peak > 3 && capped > 3, "%d frames near the aorta's peak, %d with the coronaries at the agent's", peak, capped);
  xt_ds_spec_free(&s);
  /* 4. refused, naming the field */
  static const struct {
    const char *contrast, *want;
  } bad[] = {{"{\"regions\": [\"liver\"], \"mg_ml\": 5}", "contrast.regions[0]"},
             {"{\"regions\": [\"aorta\"], \"mg_ml\": 5, \"bolus\": {}}", "contrast: give one of"},
             {"{\"regions\": [\"aorta\"]}", "contrast: give one of"},
             {"{\"regions\": [\"aorta\", \"aorta\"], \"mg_ml\": 5}", "named twice"},
             {"{\"regions\": [\"aorta\"], \"mg_ml\": [5, 500]}", "contrast.mg_ml"},
             {"{\"regions\": [\"aorta\"], \"bolus\": {\"rate_ml_s\": 5, \"t_s\": 1}}", "contrast.bolus.volume_ml"},
             {"{\"regions\": [\"t:0\"], \"mg_ml\": 5}", "label 1..255"},
             {"{\"regions\": [\"x:1\"], \"mg_ml\": 5}", "no model"},
             {"{\"regions\": [], \"mg_ml\": 5}", "contrast.regions"},
             {"{\"regions\": [\"aorta\"], \"mg_ml\": 5, \"speed\": 1}", "speed"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "{\"seed\": 1, \"frames\": 2, " THORAX "\"contrast\": %s}", bad[i].contrast);
    memset(&msg, 0, sizeof msg);
    XT_CHECK_MSG(load_text(text, &s, &msg) == XT_EINVAL && strstr(msg.text, bad[i].want) && !strchr(msg.text, '\n'),
                 "%s: \"%s\" (want %s)", bad[i].contrast, msg.text, bad[i].want);
    xt_ds_spec_free(&s);
  }
  /* a label the model's table does not flag: refused when the scene is loaded */
  XT_REQUIRE(load_text("{\"seed\": 1, \"frames\": 2, " THORAX "\"contrast\": {\"regions\": [\"t:4\"], \"mg_ml\": 5}}", &s,
                       &msg) == 0);
  XT_CHECK(xt_ds_scene_load(&s, &sc, &msg) == XT_EINVAL && strstr(msg.text, "contrast.regions[0]") &&
           strstr(msg.text, "no contrast region"));
  xt_ds_spec_free(&s);
  free(o);
  xt_proj_destroy(pr);
  xt_proj_destroy(pl);
  xt_model_free(ref);
  remove_dir();
}

XT_DS_TEST_MAIN(XT_ENTRY(spec_errors_name_the_field) XT_ENTRY(chain_spec_and_draws) XT_ENTRY(spec_defaults_and_canonical_text) XT_ENTRY(view_names)
                 XT_ENTRY(sampling_ranges_and_determinism) XT_ENTRY(arc_angles_and_one_draw_per_run)
                     XT_ENTRY(boxes_under_random_motion_match_exact_chords)
                         XT_ENTRY(two_models_move_apart_and_a_segmentation_follows_one)
                             XT_ENTRY(mu_range_channel_of_a_dense_model) XT_ENTRY(chain_frames_match_a_chain_of_their_own) XT_ENTRY(tar_shard_layout)
                                 XT_ENTRY(contrast_in_frames))
