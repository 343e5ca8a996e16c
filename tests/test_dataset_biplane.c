/* Tests of the biplane datasets of `xtwin dataset` (spec section "plane_b", docs/dataset.md,
 * "Biplane"), CPU backend, each against an oracle of its own:
 *   - bad plane_b fields: one line naming the field's JSON path;
 *   - plane B's P and P_pixel_edge in the frame's JSON against the projection of known points
 *     worked out by hand from docs/geometry.md (LAO 90 / CRAN 0: the lateral view), plane A's
 *     likewise at AP; both planes state the same table;
 *   - sampling: plane B shares the index, table and model perturbations with plane A; its angles
 *     follow absolute ranges or offsets from plane A's; plane A's draws are those of the same spec
 *     without plane B; plane B's noise seed differs from plane A's;
 *   - the whole pipeline (xt_ds_run into folder shards): A and B given the same pose and mode write
 *     identical line integrals and labels (and, noise off, identical chain frames; noise on,
 *     different ones); at LAO 90 plane B's member equals a render of plane B's frame made apart
 *     and differs from plane A's; frames are byte-identical whatever the batch size and shard
 *     order. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_dataset.h"
#include "xt_test.h"

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/xt_test_dataset_biplane_%ld_XXXXXX", (long)getpid());
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

/* Writes the spec text to DIR/spec.json and loads it. */
static int load_text(const char *text, xt_ds_spec *s, xt_msg *msg) {
  char path[512];
  snprintf(path, sizeof path, "%s/spec.json", dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(text, 1, strlen(text), f) != strlen(text)) exit(1);
  fclose(f);
  return xt_ds_spec_load(path, s, msg);
}

/* A whole (small) file; NULL when absent. */
static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  if (p) p[len] = 0;
  *n = (size_t)len;
  return p;
}

#define M0 "\"models\": [{\"name\": \"h\", \"phantom\": \"head-labels\", \"size\": 16}]"
#define BASE "\"seed\": 1, \"frames\": 10, \"backend\": \"cpu\", " M0

/* ------------------------------------------------------------------------------------------ */
/* The spec                                                                                   */
/* ------------------------------------------------------------------------------------------ */

XT_TEST(bad_plane_b_fields_are_named) {
  make_dir();
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"{" BASE ", \"plane_b\": 3}", "spec.json: plane_b: expected an object, got a number"},
      {"{" BASE ", \"plane_b\": {}}", "spec.json: plane_b: give \"mode\" or \"modes\""},
      {"{" BASE ", \"plane_b\": {\"mode\": \"x\"}}", "spec.json: plane_b.mode: unknown mode \"x\""},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"modes\": [\"fd12-30\"]}}",
       "spec.json: plane_b: give \"mode\" or \"modes\""},
      {"{" BASE ", \"plane_b\": {\"modes\": [\"fd15-39\", \"fd15-39\"]}}",
       "spec.json: plane_b.modes[1]: \"fd15-39\" is listed twice"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"tube\": 1}}", "spec.json: plane_b.tube: unknown field"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": []}}", "spec.json: plane_b.pose: expected an object"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"primay_deg\": 90}}}",
       "spec.json: plane_b.pose.primay_deg: unknown field (did you mean \"primary_deg\"?)"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"primary_deg\": 200}}}",
       "spec.json: plane_b.pose.primary_deg: 200 is outside [-180, 180]"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"secondary_deg\": [10, -10]}}}",
       "spec.json: plane_b.pose.secondary_deg: [10, -10]: lo > hi"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"primary_deg\": 90, \"primary_offset_deg\": 90}}}",
       "spec.json: plane_b.pose.primary_offset_deg: give primary_deg or primary_offset_deg, not both"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"secondary_offset_deg\": \"up\"}}}",
       "spec.json: plane_b.pose.secondary_offset_deg: expected a number or [lo, hi], got a string"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"table_mm\": [0, 0, 0]}}}",
       "spec.json: plane_b.pose.table_mm: the table is shared: poses.table_mm places it for both planes"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"sid_mm\": 700}}}",
       "spec.json: plane_b.pose.sid_mm: the SID (down to 700 mm) must exceed the SOD (up to 810 mm)"},
      {"{" BASE ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"sod_mm\": [800, 1300]}}}",
       "spec.json: plane_b.pose.sod_mm: the SID (down to 1195 mm) must exceed the SOD (up to 1300 mm)"},
      {"{" BASE ", \"detector\": {\"modes\": [\"fd20-512\", \"fd20-128\", \"fd20-256\", \"fd15-39\", \"fd15-37\", "
       "\"fd15-31\", \"fd15-27\", \"fd15-22\"]}, \"plane_b\": {\"mode\": \"fd12-30\"}}",
       "spec.json: plane_b.mode: the two planes name more than 8 detector modes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xt_ds_spec s;
    xt_msg msg = {{0}};
    int rc = load_text(cases[i].json, &s, &msg);
    XT_CHECK_MSG(rc == XT_EINVAL, "case %zu: rc %d (%s)", i, rc, msg.text);
    XT_CHECK_MSG(strstr(msg.text, cases[i].want) != NULL, "case %zu: got \"%s\", want \"%s\"", i, msg.text,
                 cases[i].want);
    XT_CHECK_MSG(strchr(msg.text, '\n') == NULL, "case %zu: more than one line: %s", i, msg.text);
    if (rc == 0) xt_ds_spec_free(&s);
  }
  /* A mode both planes name is one entry of the list; plane B's own join after plane A's. */
  xt_ds_spec s;
  xt_msg msg;
  XT_REQUIRE_MSG(load_text("{" BASE ", \"detector\": {\"modes\": [\"fd20-128\", \"fd20-256\"]}, "
                           "\"plane_b\": {\"modes\": [\"fd15-39\", \"fd20-256\"]}}",
                           &s, &msg) == 0,
                 "%s", msg.text);
  XT_CHECK(s.nmodes == 2 && s.nmodes_all == 3 && s.plane_b.nmodes == 2);
  XT_CHECK(s.plane_b.modes[0] == 2 && s.plane_b.modes[1] == 1 && strcmp(s.modes[2]->name, "fd15-39") == 0);
  /* The defaults: LAO 90, CRAN 0, the mode's distances. */
  XT_CHECK(s.plane_b.primary_deg.lo == 90 && s.plane_b.primary_deg.hi == 90 && !s.plane_b.primary_offset);
  XT_CHECK(s.plane_b.secondary_deg.lo == 0 && s.plane_b.secondary_deg.hi == 0 && !s.plane_b.sid_set);
  xt_ds_spec_free(&s);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* Sampling                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const xt_affine ID3 = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}};

XT_TEST(planes_share_the_patient_and_draw_their_own_pose) {
  make_dir();
  xt_ds_spec s, one, off;
  xt_msg msg;
#define PATIENT                                                                                                   \
  "\"seed\": 77, \"frames\": 500, \"backend\": \"cpu\", \"detector\": {\"modes\": [\"fd20-128\", \"fd20-256\"]}, "  \
  "\"models\": [{\"name\": \"h\", \"phantom\": \"head\", \"size\": 16, \"perturb\": {\"translate_mm\": 10, "      \
  "\"rotate_deg\": [2, 3, 4]}}], \"poses\": {\"primary_deg\": [-60, 60], \"secondary_deg\": [-20, 20], "           \
  "\"sid_mm\": [1000, 1200], \"table_mm\": [[-30, 30], [-10, 10], [-50, 50]]}, "                                    \
  "\"chain\": {\"kv\": [60, 90], \"dose_ngy\": [20, 40]}"
  XT_REQUIRE_MSG(load_text("{" PATIENT ", \"plane_b\": {\"modes\": [\"fd15-39\", \"fd12-30\"], \"pose\": "
                           "{\"primary_deg\": [80, 100], \"secondary_deg\": [-5, 5], \"sid_mm\": [1100, 1300]}}}",
                           &s, &msg) == 0,
                 "%s", msg.text);
  XT_REQUIRE_MSG(load_text("{" PATIENT "}", &one, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(load_text("{" PATIENT ", \"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"primary_offset_deg\": 90, "
                           "\"secondary_offset_deg\": [-3, 3]}}}",
                           &off, &msg) == 0,
                 "%s", msg.text);
  const xt_affine pl[1] = {ID3};
  const double c[1][3] = {{0, 0, 0}};
  XT_CHECK(s.plane_b.noise_seed != s.chain.base.seed && s.plane_b.noise_seed < (1ULL << 53));
  XT_CHECK(s.plane_b.noise_seed == xt_ds_plane_b_noise_seed(77));
  int fd15 = 0;
  for (long long i = 0; i < s.frames; i++) {
    xt_ds_frame a, b, a1, b2, ao, bo;
    XT_REQUIRE(xt_ds_sample_frame(&s, pl, c, i, &a, &msg) == 0);
    XT_REQUIRE_MSG(xt_ds_sample_plane_b(&s, &a, &b, &msg) == 0, "%s", msg.text);
    /* One patient on one table: index, table and perturbations are plane A's. */
    XT_CHECK(b.index == i && a.plane == 0 && b.plane == 1);
    XT_CHECK(memcmp(&b.geom.pose.table_mm, &a.geom.pose.table_mm, sizeof a.geom.pose.table_mm) == 0);
    XT_CHECK(memcmp(b.model_to_patient, a.model_to_patient, sizeof a.model_to_patient) == 0);
    XT_CHECK(memcmp(b.translate_mm, a.translate_mm, sizeof a.translate_mm) == 0);
    /* Its own C-arm: its modes, ranges and distances. */
    const xt_pose *p = &b.geom.pose;
    XT_CHECK(b.mode == s.plane_b.modes[0] || b.mode == s.plane_b.modes[1]);
    XT_CHECK(strcmp(b.geom.mode.name, s.modes[b.mode]->name) == 0);
    fd15 += b.mode == s.plane_b.modes[0];
    XT_CHECK(p->primary_deg >= 80 && p->primary_deg <= 100 && p->secondary_deg >= -5 && p->secondary_deg <= 5);
    XT_CHECK(p->sid_mm >= 1100 && p->sid_mm <= 1300 && p->sod_mm == 810);
    /* Its own tube: kV in range, mAs from its own SID, its own noise seed. */
    double mas;
    XT_REQUIRE(xt_ds_dose_mas(&b.chain, b.chain.kv, p->sid_mm, b.dose_ngy, &mas, &msg) == 0);
    XT_CHECK(b.chain.kv >= 60 && b.chain.kv <= 90 && b.dose_ngy >= 20 && b.dose_ngy <= 40 && b.chain.mas == mas);
    XT_CHECK(b.chain.seed == s.plane_b.noise_seed && a.chain.seed == s.chain.base.seed && b.seed != a.seed);
    /* Plane A is the same with or without plane B (its own generator). */
    XT_REQUIRE(xt_ds_sample_frame(&one, pl, c, i, &a1, &msg) == 0);
    XT_CHECK(memcmp(&a1, &a, sizeof a) == 0);
    /* A frame is a function of its index alone. */
    if (i % 97 == 3) {
      XT_REQUIRE(xt_ds_sample_plane_b(&s, &a, &b2, &msg) == 0);
      XT_CHECK(memcmp(&b, &b2, sizeof b) == 0);
    }
    /* Offsets follow plane A's drawn angles. */
    XT_REQUIRE(xt_ds_sample_frame(&off, pl, c, i, &ao, &msg) == 0);
    XT_REQUIRE(xt_ds_sample_plane_b(&off, &ao, &bo, &msg) == 0);
    XT_CHECK_NEAR(bo.geom.pose.primary_deg, ao.geom.pose.primary_deg + 90, 1e-9); /* A in [-60, 60]: no wrap */
    XT_CHECK(fabs(bo.geom.pose.secondary_deg - ao.geom.pose.secondary_deg) <= 3 + 1e-9);
  }
  XT_CHECK(fd15 > 200 && fd15 < 300); /* each of plane B's modes about half the time */
  /* Wrapping: LAO 170 + 90 is RAO 100. */
  xt_ds_frame a, b;
  xt_ds_spec_free(&one);
  XT_REQUIRE_MSG(load_text("{\"seed\": 1, \"frames\": 1, \"backend\": \"cpu\", " M0 ", \"poses\": {\"primary_deg\": 170}, "
                           "\"plane_b\": {\"mode\": \"fd20-128\", \"pose\": {\"primary_offset_deg\": 90}}}",
                           &one, &msg) == 0,
                 "%s", msg.text);
  XT_REQUIRE(xt_ds_sample_frame(&one, pl, c, 0, &a, &msg) == 0 && xt_ds_sample_plane_b(&one, &a, &b, &msg) == 0);
  XT_CHECK_NEAR(b.geom.pose.primary_deg, -100, 1e-9);
  xt_ds_spec_free(&s);
  xt_ds_spec_free(&one);
  xt_ds_spec_free(&off);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* P against the closed form                                                                  */
/* ------------------------------------------------------------------------------------------ */

static double jnum(json_t *root, const char *path) {
  json_t *v = root;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) {
    char *end;
    long k = strtol(tok, &end, 10);
    v = *end == 0 ? json_array_get(v, (size_t)k) : json_object_get(v, tok);
  }
  return v && json_is_number(v) ? json_number_value(v) : NAN;
}

/* (col, row) of world point x through the 3x4 matrix at JSON path `at` (..."geometry.P"). */
static void project(json_t *root, const char *at, const double x[3], double *col, double *row) {
  double r[3];
  char p[160];
  for (int i = 0; i < 3; i++) {
    r[i] = 0;
    for (int j = 0; j < 4; j++) {
      snprintf(p, sizeof p, "%s.%d.%d", at, i, j);
      r[i] += jnum(root, p) * (j < 3 ? x[j] : 1.0);
    }
  }
  *col = r[0] / r[2];
  *row = r[1] / r[2];
}

/* Plane B at LAO 90 / CRAN 0 (docs/geometry.md: d = (1, 0, 0), u = (0, 1, 0), v = (0, 0, -1), the
 * source at -SOD d on the patient's right): a world point x lands at magnification
 * m = SID / (SOD + x) at column c0 + m y / pitch, row r0 - m z / pitch; plane A at AP (d =
 * (0, -1, 0), u = (1, 0, 0)): m = SID / (SOD - y), column c0 + m x / pitch, row r0 - m z / pitch.
 * The pixel-edge convention adds 1/2 to both. The points are patient points on the drawn table. */
XT_TEST(plane_b_projection_matrix_is_the_lateral_closed_form) {
  make_dir();
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_msg msg;
  xt_ds_encoder *e = NULL;
  XT_REQUIRE_MSG(load_text("{\"seed\": 3, \"frames\": 4, \"backend\": \"cpu\", \"detector\": {\"mode\": \"fd20-128\"}, " M0
                           ", \"poses\": {\"table_mm\": [[-20, 20], [-10, 10], [-40, 40]]}, "
                           "\"plane_b\": {\"mode\": \"fd15-39\", \"pose\": {\"primary_deg\": 90, \"secondary_deg\": 0, "
                           "\"sod_mm\": 700, \"sid_mm\": 1100}}}",
                           &s, &msg) == 0,
                 "%s", msg.text);
  XT_REQUIRE_MSG(xt_ds_scene_load(&s, &sc, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_ds_encoder_create(&sc, &e, &msg) == 0);
  static const double pts[][3] = {{0, 0, 0}, {30, -20, 50}, {-45, 60, -25}, {10, 0, 80}};
  for (long long i = 0; i < s.frames; i++) {
    xt_ds_frame a, b;
    const char *text;
    size_t len;
    XT_REQUIRE(xt_ds_sample_frame(&s, sc.placement, (const double(*)[3])sc.center, i, &a, &msg) == 0);
    XT_REQUIRE(xt_ds_sample_plane_b(&s, &a, &b, &msg) == 0);
    XT_REQUIRE_MSG(xt_ds_frame_json(e, &a, &b, &text, &len, &msg) == 0, "%s", msg.text);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    XT_REQUIRE(root != NULL);
    XT_CHECK(strcmp(json_string_value(json_object_get(json_object_get(root, "plane_b"), "plane")), "B") == 0);
    XT_CHECK(strcmp(json_string_value(json_object_get(json_object_get(json_object_get(root, "plane_b"), "detector"),
                                                      "mode")),
                    "fd15-39") == 0);
    /* The table: drawn once, stated the same for both planes. */
    double t[3];
    for (int k = 0; k < 3; k++) {
      char p[64];
      snprintf(p, sizeof p, "pose.table_mm.%d", k);
      t[k] = jnum(root, p);
      snprintf(p, sizeof p, "plane_b.pose.table_mm.%d", k);
      XT_CHECK(jnum(root, p) == t[k]);
    }
    XT_CHECK(t[0] != 0 && t[2] != 0); /* drawn, not the default */
    XT_CHECK(jnum(root, "plane_b.pose.primary_deg") == 90 && jnum(root, "plane_b.pose.sid_mm") == 1100);
    for (size_t k = 0; k < sizeof pts / sizeof *pts; k++) {
      const double x[3] = {pts[k][0] + t[0], pts[k][1] + t[1], pts[k][2] + t[2]};
      double col, row;
      /* plane B: FD15 39 cm, 896 x 896 at 0.308 mm, SOD 700, SID 1100 */
      const double mb = 1100.0 / (700.0 + x[0]), cb = 447.5 + mb * x[1] / 0.308, rb = 447.5 - mb * x[2] / 0.308;
      project(root, "plane_b.geometry.P", x, &col, &row);
      XT_CHECK_NEAR(col, cb, 1e-7);
      XT_CHECK_NEAR(row, rb, 1e-7);
      project(root, "plane_b.geometry.P_pixel_edge", x, &col, &row);
      XT_CHECK_NEAR(col, cb + 0.5, 1e-7);
      XT_CHECK_NEAR(row, rb + 0.5, 1e-7);
      /* plane A: AP, FD20 128 x 128 at 2.31 mm, SOD 810, SID 1195 */
      const double ma = 1195.0 / (810.0 - x[1]), ca = 63.5 + ma * x[0] / 2.31, ra = 63.5 - ma * x[2] / 2.31;
      project(root, "geometry.P", x, &col, &row);
      XT_CHECK_NEAR(col, ca, 1e-8);
      XT_CHECK_NEAR(row, ra, 1e-8);
    }
    /* The lateral source sits on the patient's right, SOD from the isocentre. */
    XT_CHECK_NEAR(jnum(root, "plane_b.geometry.source.0"), -700, 1e-9);
    XT_CHECK_NEAR(jnum(root, "plane_b.geometry.source.1"), 0, 1e-9);
    json_decref(root);
  }
  /* The JSON of a biplane spec needs both planes. */
  xt_ds_frame a;
  const char *text;
  size_t len;
  XT_REQUIRE(xt_ds_sample_frame(&s, sc.placement, (const double(*)[3])sc.center, 0, &a, &msg) == 0);
  XT_CHECK(xt_ds_frame_json(e, &a, NULL, &text, &len, &msg) == XT_EINVAL);
  xt_ds_encoder_free(e);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  remove_dir();
}

/* ------------------------------------------------------------------------------------------ */
/* The pipeline                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Runs the spec text into DIR/<name> (folder shards) with the given batch size, shards in the
 * given order (NULL: all, in order). */
static int run_spec(const char *text, const char *name, int batch, const long long *order, long long n) {
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_ds_out o;
  xt_msg msg;
  char out[400];
  snprintf(out, sizeof out, "%s/%s", dir, name);
  if (load_text(text, &s, &msg)) {
    fprintf(stderr, "  spec: %s\n", msg.text);
    return -1;
  }
  int rc = xt_ds_scene_load(&s, &sc, &msg);
  if (!rc && !(rc = xt_ds_out_prepare(&s, out, &o, &msg))) {
    long long all[64];
    const long long ns = xt_ds_spec_shards(&s);
    for (long long i = 0; i < ns && i < 64; i++) all[i] = i;
    xt_ds_run_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.threads = 1;
    ro.writers = 2;
    ro.batch = batch;
    ro.progress = XT_DS_PROGRESS_NONE;
    ro.log = stderr;
    xt_ds_summary sum;
    rc = xt_ds_run(&s, &sc, &o, order ? order : all, order ? n : ns, &ro, &sum, &msg);
    xt_ds_out_close(&o);
    xt_ds_scene_free(&sc);
  }
  if (rc) fprintf(stderr, "  run: %s\n", msg.text);
  xt_ds_spec_free(&s);
  return rc;
}

/* Member `ext` of frame `key` of the run `name` (shard_frames 2): the file's bytes past the NPY
 * header (the JSON whole). */
static unsigned char *member(const char *name, long long key, const char *ext, size_t *n) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s/shards/shard-%06lld/%012lld.%s", dir, name, key / 2, key, ext);
  size_t len;
  unsigned char *p = read_file(path, &len);
  if (!p) return NULL;
  if (len >= 10 && memcmp(p, "\x93NUMPY", 6) == 0) {
    size_t off = 10 + ((size_t)p[8] | (size_t)p[9] << 8);
    memmove(p, p + off, len - off);
    len -= off;
  }
  *n = len;
  return p;
}

/* Whether two members are byte-identical (both present). */
static int same_member(const char *run_a, const char *ext_a, const char *run_b, const char *ext_b, long long key) {
  size_t na = 0, nb = 0;
  unsigned char *a = member(run_a, key, ext_a, &na), *b = member(run_b, key, ext_b, &nb);
  int same = a && b && na == nb && memcmp(a, b, na) == 0;
  if (!a || !b) fprintf(stderr, "  frame %lld: %s.%s or %s.%s missing\n", key, run_a, ext_a, run_b, ext_b);
  free(a);
  free(b);
  return same;
}

#define PIPE_HEAD                                                                                                 \
  "\"seed\": 41, \"frames\": 4, \"backend\": \"cpu\", \"detector\": {\"mode\": \"fd20-128\"}, "                     \
  "\"models\": [{\"name\": \"h\", \"phantom\": \"head-labels\", \"size\": 32, \"spacing_mm\": 6, "                   \
  "\"perturb\": {\"translate_mm\": 10, \"rotate_deg\": 5}}], "                                                     \
  "\"labels\": {\"channels\": [{\"name\": \"bone\", \"model\": \"h\", \"labels\": [\"bone\"]}]}, "                   \
  "\"output\": {\"format\": \"folder\", \"shard_frames\": 2}, "

/* Plane A and plane B given the same pose and the same mode see the same patient on the same
 * table: every member of plane B equals plane A's, byte for byte (the chain's too with its noise
 * off; with it on, the planes' own noise seeds make them differ). */
XT_TEST(same_pose_and_mode_give_identical_planes) {
  make_dir();
  XT_REQUIRE(run_spec("{" PIPE_HEAD "\"poses\": {\"primary_deg\": 20, \"secondary_deg\": 10, "
                      "\"table_mm\": [[-20, 20], [-10, 10], [-30, 30]]}, "
                      "\"plane_b\": {\"mode\": \"fd20-128\", \"pose\": {\"primary_deg\": 20, \"secondary_deg\": 10}}, "
                      "\"chain\": {\"kv\": 70, \"mas\": 0.004, \"noise\": false}, "
                      "\"write\": {\"intensity\": true}}",
                      "same", 0, NULL, 0) == 0);
  static const char *const ext[] = {"lineint", "intensity", "raw", "processed", "labels", "seg"};
  for (long long k = 0; k < 4; k++) {
    for (int m = 0; m < 6; m++) {
      char ea[32], eb[32];
      snprintf(ea, sizeof ea, "%s.npy", ext[m]);
      snprintf(eb, sizeof eb, "%s_b.npy", ext[m]);
      XT_CHECK_MSG(same_member("same", ea, "same", eb, k), "frame %lld: %s and %s differ", k, ea, eb);
    }
    size_t n;
    unsigned char *js = member("same", k, "json", &n);
    XT_REQUIRE(js != NULL);
    json_error_t jerr;
    json_t *root = json_loads((const char *)js, 0, &jerr);
    XT_REQUIRE(root != NULL);
    for (int i = 0; i < 12; i++) {
      char pa[64], pb[64];
      snprintf(pa, sizeof pa, "geometry.P.%d.%d", i / 4, i % 4);
      snprintf(pb, sizeof pb, "plane_b.geometry.P.%d.%d", i / 4, i % 4);
      XT_CHECK(jnum(root, pa) == jnum(root, pb));
    }
    /* Two tubes, two noise seeds, both stated. */
    double sa = jnum(root, "imaging.chain.parameters.seed"), sb = jnum(root, "plane_b.imaging.chain.parameters.seed");
    XT_CHECK(sa == 41 && sb == (double)xt_ds_plane_b_noise_seed(41) && sa != sb);
    json_decref(root);
    free(js);
  }
  /* Noise on: the same instant, two panels' own noise. */
  XT_REQUIRE(run_spec("{" PIPE_HEAD "\"poses\": {\"primary_deg\": 20, \"secondary_deg\": 10}, "
                      "\"plane_b\": {\"mode\": \"fd20-128\", \"pose\": {\"primary_deg\": 20, \"secondary_deg\": 10}}, "
                      "\"chain\": {\"kv\": 70, \"mas\": 0.004}}",
                      "noisy", 0, NULL, 0) == 0);
  for (long long k = 0; k < 4; k++) {
    XT_CHECK(same_member("noisy", "lineint.npy", "noisy", "lineint_b.npy", k));
    XT_CHECK_MSG(!same_member("noisy", "raw.npy", "noisy", "raw_b.npy", k), "frame %lld: the planes' noise is one", k);
  }
  remove_dir();
}

/* At LAO 90 plane B's members are plane B's own render (made apart, from the sampled frame), not
 * plane A's; and every member of every frame is the same whatever the batch and shard order. */
XT_TEST(lateral_plane_is_its_own_render_and_frames_are_reproducible) {
  make_dir();
  const char *spec = "{" PIPE_HEAD "\"poses\": {\"primary_deg\": [-30, 30], \"table_mm\": [[-20, 20], 0, [-30, 30]]}, "
                     "\"plane_b\": {\"mode\": \"fd20-256\", \"pose\": {\"secondary_deg\": [-10, 10]}}}";
  XT_REQUIRE(run_spec(spec, "lat", 0, NULL, 0) == 0);
  static const long long order[] = {1, 0};
  XT_REQUIRE(run_spec(spec, "lat2", 1, order, 2) == 0);
  xt_ds_spec s;
  xt_ds_scene sc;
  xt_ds_renderer *r = NULL;
  xt_msg msg;
  XT_REQUIRE(load_text(spec, &s, &msg) == 0 && xt_ds_scene_load(&s, &sc, &msg) == 0);
  XT_REQUIRE_MSG(xt_ds_renderer_create(&sc, s.backend, 0, 1, &r, &msg) == 0, "%s", msg.text);
  const size_t px = 256 * 256;
  float *img = malloc(px * sizeof *img), *bone = malloc(px * sizeof *bone);
  XT_REQUIRE(img && bone);
  static const char *const ext[] = {"lineint.npy", "labels.npy", "seg.npy", "json",
                                    "lineint_b.npy", "labels_b.npy", "seg_b.npy"};
  for (long long k = 0; k < 4; k++) {
    xt_ds_frame a, b;
    XT_REQUIRE(xt_ds_sample_frame(&s, sc.placement, (const double(*)[3])sc.center, k, &a, &msg) == 0);
    XT_REQUIRE(xt_ds_sample_plane_b(&s, &a, &b, &msg) == 0);
    XT_REQUIRE_MSG(xt_ds_render_image(r, &b, 1, img, &msg) == 0, "%s", msg.text);
    float *chan[1] = {bone};
    XT_REQUIRE_MSG(xt_ds_render_labels(r, &b, 1, chan, &msg) == 0, "%s", msg.text);
    size_t n;
    unsigned char *lb = member("lat", k, "lineint_b.npy", &n);
    XT_CHECK(lb && n == px * sizeof *img && memcmp(lb, img, n) == 0);
    free(lb);
    lb = member("lat", k, "labels_b.npy", &n);
    XT_CHECK(lb && n == px * sizeof *bone && memcmp(lb, bone, n) == 0);
    free(lb);
    float sum = 0;
    for (size_t i = 0; i < px; i++) sum += img[i];
    XT_CHECK_MSG(sum > 0, "frame %lld: plane B sees nothing", k); /* the phantom is in the lateral beam */
    unsigned char *la = member("lat", k, "lineint.npy", &n);
    XT_CHECK(la && n == 128 * 128 * sizeof(float)); /* plane A's own mode */
    free(la);
    for (int m = 0; m < 7; m++)
      XT_CHECK_MSG(same_member("lat", ext[m], "lat2", ext[m], k), "frame %lld: %s differs between the runs", k, ext[m]);
  }
  free(img);
  free(bone);
  xt_ds_renderer_free(r);
  xt_ds_scene_free(&sc);
  xt_ds_spec_free(&s);
  remove_dir();
}

XT_TEST_MAIN(XT_ENTRY(bad_plane_b_fields_are_named) XT_ENTRY(planes_share_the_patient_and_draw_their_own_pose)
                 XT_ENTRY(plane_b_projection_matrix_is_the_lateral_closed_form)
                     XT_ENTRY(same_pose_and_mode_give_identical_planes)
                         XT_ENTRY(lateral_plane_is_its_own_render_and_frames_are_reproducible))
