/* Gaussian-mixture models and their files (models/xt_gmm*.c):
 *
 *  - the native format's byte layout, read back by this test's own little-endian decoder and CRC
 *    (zlib), and files built here byte by byte (other units, labels) loaded by the reader;
 *  - native and thesis (.gmm) round trips, bit for bit; a thesis file built here field by field;
 *  - JSON mixtures; the model-file table (xt_model_load) and the kind's bounds against the
 *    cut-off ellipsoid's extents computed here by the quaternion sandwich product;
 *  - every rejection the issue names: truncated and padded files, NaN/inf, zero and negative
 *    scales, quaternions that cannot be normalised, absurd counts, bad checksums, with one line
 *    naming the file;
 *  - the BVH's invariants; the fuzz seed corpus through every reader. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "xt_gmm.h"
#include "xt_gmm_json.h"
#include "xt_load.h"
#include "xt_test.h"
#include "xt_test_gmm.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static void write_bytes(const char *path, const char *mode, const void *p, size_t n) {
  FILE *f = fopen(path, mode);
  if (!f || (n && fwrite(p, 1, n, f) != n)) exit(1);
  fclose(f);
}

static void write_text_then(const char *path, const char *text, const void *data, size_t n) {
  write_bytes(path, "wb", text, strlen(text));
  if (n) write_bytes(path, "ab", data, n);
}

static char g_dir[64];
static char g_path[256];

static void remove_dir(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  char p[320];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(g_dir);
}

/* A path in this test process's own temporary directory (removed at exit). */
static const char *tp(const char *name) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/xt_gmm_test_XXXXXX");
    if (!mkdtemp(g_dir)) exit(1);
    atexit(remove_dir);
  }
  snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
  return g_path;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)sz;
  return b;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }
static float lef(const unsigned char *p) {
  uint32_t u = le32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static double led(const unsigned char *p) {
  uint64_t u = le64(p);
  double d;
  memcpy(&d, &u, 8);
  return d;
}
static void w32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void w64(unsigned char *p, uint64_t v) {
  w32(p, (uint32_t)v);
  w32(p + 4, (uint32_t)(v >> 32));
}
static void wf(unsigned char *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  w32(p, u);
}
static void wd(unsigned char *p, double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  w64(p, u);
}

static xt_gmm *random_gmm(size_t n, int labels) {
  xt_gmm *g;
  if (xt_gmm_create(n, &g, NULL)) return NULL;
  for (size_t i = 0; i < n; i++) {
    for (int a = 0; a < 3; a++) {
      g->g[i].centre[a] = (float)urand(-100, 100);
      g->g[i].scale[a] = (float)urand(0.2, 20);
    }
    random_quat(g->g[i].quat);
    g->g[i].rho = (float)urand(0, 0.3);
    g->g[i].label = labels ? (uint32_t)(rand() % 8) : XT_GMM_NO_LABEL;
  }
  g->has_labels = labels;
  g->cutoff = urand(3, 6);
  if (xt_gmm_finish(g, "random", NULL)) {
    xt_gmm_free(g);
    return NULL;
  }
  return g;
}

/* A native file of n records, built here: header fields as given, records from rec (48 bytes
 * each, already encoded), CRC computed here. Returns the bytes (caller frees). */
typedef struct hdr_fields {
  const char *magic;
  uint32_t version, header_bytes, record_bytes, flags;
  uint64_t count;
  double cutoff, unit;
  const char *layout;
} hdr_fields;

static hdr_fields default_fields(uint64_t count) {
  hdr_fields h = {XT_GMM_MAGIC, 1, 128, 48, 0, count, 4.8, 1.0, XT_GMM_LAYOUT};
  return h;
}

static unsigned char *make_native(const hdr_fields *h, const unsigned char *rec, size_t nrec, size_t *size) {
  *size = 128 + 48 * nrec;
  unsigned char *b = calloc(1, *size);
  if (!b) exit(1);
  memcpy(b, h->magic, 8);
  w32(b + 8, h->version);
  w32(b + 12, h->header_bytes);
  w64(b + 16, h->count);
  w32(b + 24, h->record_bytes);
  w32(b + 28, h->flags);
  wd(b + 32, h->cutoff);
  wd(b + 40, h->unit);
  memcpy(b + 48, h->layout, strlen(h->layout));
  memcpy(b + 128, rec, 48 * nrec);
  uLong crc = crc32(0L, b, 112);
  crc = crc32(crc, b + 128, (uInt)(48 * nrec));
  w32(b + 112, (uint32_t)crc);
  return b;
}

/* One encoded record. */
static void make_record(unsigned char *r, const float c[3], const float s[3], const float q[4], float rho,
                        uint32_t label) {
  for (int a = 0; a < 3; a++) {
    wf(r + 4 * a, c[a]);
    wf(r + 12 + 4 * a, s[a]);
  }
  for (int a = 0; a < 4; a++) wf(r + 24 + 4 * a, q[a]);
  wf(r + 40, rho);
  w32(r + 44, label);
}

/* Loads through every reader of its kind and expects failure with one line naming the file and
 * containing `word`; *out stays NULL. */
static void expect_reject(const char *path, int (*reader)(const char *, xt_gmm **, xt_msg *), const char *word,
                          int line) {
  xt_gmm *g = (xt_gmm *)(uintptr_t)1;
  xt_msg msg = {{0}};
  int rc = reader(path, &g, &msg);
  XT_CHECK_MSG(rc < 0, "line %d: %s loaded", line, path);
  XT_CHECK_MSG(g == NULL, "line %d: *out not NULL", line);
  XT_CHECK_MSG(strncmp(msg.text, path, strlen(path)) == 0, "line %d: message does not start with the path: %s", line,
               msg.text);
  XT_CHECK_MSG(strchr(msg.text, '\n') == NULL, "line %d: message spans lines", line);
  XT_CHECK_MSG(strstr(msg.text, word) != NULL, "line %d: message lacks \"%s\": %s", line, word, msg.text);
  if (rc == 0) xt_gmm_free(g);
}
#define REJECT(path, reader, word) expect_reject(path, reader, word, __LINE__)

/* ---- layout ---------------------------------------------------------------------------------- */

XT_TEST(native_layout_is_as_documented) {
  xt_gmm *g = random_gmm(3, 1);
  XT_REQUIRE(g);
  const char *p = tp("layout.xgmm");
  XT_REQUIRE(xt_gmm_write_native(p, g, NULL) == 0);
  size_t n;
  unsigned char *b = slurp(p, &n);
  XT_REQUIRE(b && n == 128 + 3 * 48);
  XT_CHECK(memcmp(b, "XTGMM\r\n\032", 8) == 0);
  XT_CHECK(le32(b + 8) == 1 && le32(b + 12) == 128 && le64(b + 16) == 3 && le32(b + 24) == 48);
  XT_CHECK(le32(b + 28) == 1); /* labels */
  XT_CHECK(led(b + 32) == g->cutoff && led(b + 40) == 1.0);
  XT_CHECK(strcmp((const char *)b + 48, "centre:f32x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32") == 0);
  uLong crc = crc32(0L, b, 112);
  crc = crc32(crc, b + 128, 3 * 48);
  XT_CHECK(le32(b + 112) == (uint32_t)crc);
  XT_CHECK(le32(b + 116) == 0 && le32(b + 120) == 0 && le32(b + 124) == 0);
  for (int i = 0; i < 3; i++) {
    const unsigned char *r = b + 128 + 48 * i;
    const xt_gaussian *q = &g->g[i];
    for (int a = 0; a < 3; a++) {
      XT_CHECK(lef(r + 4 * a) == q->centre[a]);
      XT_CHECK(lef(r + 12 + 4 * a) == q->scale[a]);
    }
    for (int a = 0; a < 4; a++) XT_CHECK(lef(r + 24 + 4 * a) == q->quat[a]);
    XT_CHECK(lef(r + 40) == q->rho && le32(r + 44) == q->label);
  }
  free(b);
  xt_gmm_free(g);
}

XT_TEST(hand_made_native_file_loads_with_units_and_labels) {
  unsigned char rec[2 * 48];
  const float c0[3] = {1, 2, 3}, s0[3] = {0.5f, 1, 2}, q0[4] = {2, 0, 0, 0}; /* not unit: normalised on load */
  const float c1[3] = {-4, 0, 8}, s1[3] = {1, 1, 1}, q1[4] = {0, 0, 0, 1};
  make_record(rec, c0, s0, q0, 0.2f, 5);
  make_record(rec + 48, c1, s1, q1, 0.1f, 2);
  hdr_fields h = default_fields(2);
  h.unit = 10.0; /* centimetres */
  h.flags = 1;
  h.cutoff = 5.5;
  size_t n;
  unsigned char *b = make_native(&h, rec, 2, &n);
  const char *p = tp("hand.xgmm");
  write_bytes(p, "wb", b, n);
  free(b);
  xt_gmm *g = NULL;
  xt_msg msg;
  XT_REQUIRE(xt_gmm_read_native(p, &g, &msg) == 0);
  XT_CHECK(g->count == 2 && g->has_labels && g->cutoff == 5.5);
  XT_CHECK(g->g[0].centre[0] == 10.0f && g->g[0].centre[2] == 30.0f && g->g[0].scale[0] == 5.0f);
  XT_CHECK_NEAR(g->g[0].rho, 0.02, 1e-9);
  XT_CHECK(g->g[0].quat[0] == 1.0f && g->g[0].label == 5 && g->g[1].label == 2);
  XT_CHECK(g->g[1].quat[3] == 1.0f);
  xt_gmm_free(g);
}

/* ---- round trips ----------------------------------------------------------------------------- */

static int same_records(const xt_gmm *a, const xt_gmm *b, int labels) {
  if (a->count != b->count) return 0;
  for (size_t i = 0; i < a->count; i++) {
    const xt_gaussian *x = &a->g[i], *y = &b->g[i];
    if (memcmp(x->centre, y->centre, 12) || memcmp(x->scale, y->scale, 12) || memcmp(x->quat, y->quat, 16) ||
        x->rho != y->rho || (labels && x->label != y->label))
      return 0;
  }
  return 1;
}

XT_TEST(native_round_trip_is_bit_exact) {
  for (int labels = 0; labels < 2; labels++) {
    xt_gmm *g = random_gmm(5000, labels), *r = NULL;
    XT_REQUIRE(g);
    const char *p = tp("rt.xgmm");
    XT_REQUIRE(xt_gmm_write_native(p, g, NULL) == 0);
    XT_REQUIRE(xt_gmm_read_native(p, &r, NULL) == 0);
    XT_CHECK(same_records(g, r, 1));
    XT_CHECK(r->has_labels == labels && r->cutoff == g->cutoff);
    XT_CHECK(xt_gmm_file_bytes(g) == 128 + 5000 * 48);
    xt_gmm_free(g);
    xt_gmm_free(r);
  }
}

XT_TEST(thesis_round_trip_and_hand_made_file) {
  xt_gmm *g = random_gmm(777, 0), *r = NULL;
  XT_REQUIRE(g);
  const char *p = tp("rt.gmm");
  XT_REQUIRE(xt_gmm_write_thesis(p, g, NULL) == 0);
  size_t n;
  unsigned char *b = slurp(p, &n);
  XT_REQUIRE(b && n == 8 + 777 * 44);
  /* the layout: count, then all positions, all densities, all scales, all rotations */
  XT_CHECK(le64(b) == 777);
  XT_CHECK(lef(b + 8 + 12 * 5 + 4) == g->g[5].centre[1]);
  XT_CHECK(lef(b + 8 + 12 * 777 + 4 * 9) == g->g[9].rho);
  XT_CHECK(lef(b + 8 + 16 * 777 + 12 * 3 + 8) == g->g[3].scale[2]);
  XT_CHECK(lef(b + 8 + 28 * 777 + 16 * 7) == g->g[7].quat[0]); /* w first */
  free(b);
  XT_REQUIRE(xt_gmm_read_thesis(p, &r, NULL) == 0);
  XT_CHECK(same_records(g, r, 0));
  XT_CHECK(!r->has_labels && r->cutoff == XT_GMM_CUTOFF_DEFAULT);
  xt_gmm_free(r);
  xt_gmm_free(g);

  /* two Gaussians written the way the thesis's converter lays them out */
  unsigned char t[8 + 2 * 44];
  w64(t, 2);
  const float pos[6] = {1, 2, 3, -1, -2, -3}, den[2] = {0.5f, 0.25f}, sc[6] = {1, 2, 3, 4, 5, 6},
              rot[8] = {1, 0, 0, 0, 0.70710677f, 0.70710677f, 0, 0};
  for (int i = 0; i < 6; i++) wf(t + 8 + 4 * i, pos[i]);
  for (int i = 0; i < 2; i++) wf(t + 8 + 24 + 4 * i, den[i]);
  for (int i = 0; i < 6; i++) wf(t + 8 + 32 + 4 * i, sc[i]);
  for (int i = 0; i < 8; i++) wf(t + 8 + 56 + 4 * i, rot[i]);
  p = tp("hand.gmm");
  write_bytes(p, "wb", t, sizeof t);
  XT_REQUIRE(xt_gmm_read_thesis(p, &r, NULL) == 0);
  XT_CHECK(r->count == 2 && r->g[1].centre[2] == -3.0f && r->g[1].rho == 0.25f && r->g[1].scale[0] == 4.0f);
  XT_CHECK(r->g[1].quat[0] == 0.70710677f && r->g[1].quat[1] == 0.70710677f);
  xt_gmm_free(r);
}

/* ---- JSON and the model table ---------------------------------------------------------------- */

XT_TEST(json_mixture_and_model_table) {
  const char *p = tp("two.gmm.json");
  write_text_then(p,
                  "{\"name\": \"pair\", \"cutoff_sigma\": 4,\n"
                  " \"gaussians\": [\n"
                  "  {\"center\": [0, 0, 0], \"scale\": 5, \"rho\": 0.02, \"material\": \"bone\"},\n"
                  "  {\"center\": [30, 0, 0], \"scale\": [1, 2, 3], \"quat\": [1, 0, 0, 1], \"rho\": 0.01, "
                  "\"material\": 3}\n"
                  " ]}\n",
                  NULL, 0);
  xt_gmm *g = NULL;
  char name[32];
  xt_msg msg;
  XT_REQUIRE(xt_gmm_read_json(p, &g, name, sizeof name, &msg) == 0);
  XT_CHECK(strcmp(name, "pair") == 0 && g->count == 2 && g->cutoff == 4.0 && g->has_labels);
  XT_CHECK(g->g[0].scale[1] == 5.0f && g->g[0].quat[0] == 1.0f && g->g[0].label == XT_MAT_BONE);
  XT_CHECK_NEAR(g->g[1].quat[3], sqrt(0.5), 1e-7);
  XT_CHECK(g->g[1].label == 3);
  xt_gmm_free(g);

  /* every suffix through xt_model_load: kind GMM, bounds = the cut-off boxes */
  xt_model *m = NULL;
  int lrc = xt_model_load(p, NULL, NULL, &m, &msg);
  XT_CHECK_MSG(lrc == 0, "%s", msg.text);
  XT_REQUIRE(lrc == 0);
  XT_CHECK(m->kind == XT_MODEL_GMM && strcmp(xt_model_kind_name(m->kind), "gmm") == 0);
  XT_CHECK(strcmp(m->name, "two.gmm.json") == 0);
  xt_vec3 lo, hi;
  XT_REQUIRE(xt_model_bounds(m, &lo, &hi, &msg) == 0);
  /* k = 4; Gaussian 1 is turned 90 deg about z, so its 2 mm axis lies along x */
  XT_CHECK_NEAR(lo.x, -20, 1e-5);
  XT_CHECK_NEAR(hi.x, 38, 1e-5);
  XT_CHECK_NEAR(lo.y, -20, 1e-5);
  XT_CHECK_NEAR(hi.z, 20, 1e-5);
  xt_gmm *keep = xt_model_gmm(m);
  const char *px = tp("two.xgmm");
  XT_REQUIRE(xt_gmm_write_native(px, keep, NULL) == 0);
  xt_model *m2 = NULL;
  XT_REQUIRE(xt_model_load(px, NULL, "named", &m2, &msg) == 0);
  XT_CHECK(m2->kind == XT_MODEL_GMM && strcmp(m2->name, "named") == 0 && same_records(keep, xt_model_gmm(m2), 1));
  const char *pt = tp("two.gmm");
  XT_REQUIRE(xt_gmm_write_thesis(pt, keep, NULL) == 0);
  xt_model *m3 = NULL;
  XT_REQUIRE(xt_model_load(pt, NULL, NULL, &m3, &msg) == 0);
  XT_CHECK(m3->kind == XT_MODEL_GMM && same_records(keep, xt_model_gmm(m3), 0));
  xt_model_free(m);
  xt_model_free(m2);
  xt_model_free(m3);
}

XT_TEST(json_rejections) {
  static const struct {
    const char *text, *word;
  } bad[] = {
      {"[1, 2]", "expected a JSON object"},
      {"{\"gaussians\": []}", "array of 1 to"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1}]}", "rho"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 0, \"rho\": 1}]}", "scale"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": [1,-1,1], \"rho\": 1}]}", "scale"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": -1}]}", "rho"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1, \"quat\": [0,0,0,0]}]}", "normalised"},
      {"{\"gaussians\": [{\"center\": [0,0], \"scale\": 1, \"rho\": 1}]}", "center"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1, \"colour\": 1}]}", "unknown key"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1, \"material\": \"cheese\"}]}", "cheese"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1, \"material\": 2},"
       " {\"center\": [0,0,0], \"scale\": 1, \"rho\": 1}]}",
       "every Gaussian or for none"},
      {"{\"cutoff_sigma\": 100, \"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1}]}", "cutoff"},
      {"{\"gaussians\": [{\"center\": [0,0,0], \"scale\": 1, \"rho\": 1e999}]}", ""},
      {"{\"gaussians\": [", "line"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *p = tp("bad.gmm.json");
    write_text_then(p, bad[i].text, NULL, 0);
    xt_gmm *g = NULL;
    xt_msg msg = {{0}};
    int rc = xt_gmm_read_json(p, &g, NULL, 0, &msg);
    XT_CHECK_MSG(rc < 0 && g == NULL, "case %zu loaded", i);
    XT_CHECK_MSG(strncmp(msg.text, p, strlen(p)) == 0 && strstr(msg.text, bad[i].word), "case %zu: %s", i, msg.text);
    xt_gmm_free(g);
  }
}

/* ---- rejections ------------------------------------------------------------------------------ */

static int read_native(const char *p, xt_gmm **g, xt_msg *m) { return xt_gmm_read_native(p, g, m); }
static int read_thesis(const char *p, xt_gmm **g, xt_msg *m) { return xt_gmm_read_thesis(p, g, m); }

XT_TEST(native_rejections) {
  unsigned char rec[2 * 48];
  const float c[3] = {0, 0, 0}, s[3] = {1, 1, 1}, q[4] = {1, 0, 0, 0};
  make_record(rec, c, s, q, 0.1f, 0);
  make_record(rec + 48, c, s, q, 0.1f, 0);
  hdr_fields h = default_fields(2);
  size_t n;
  unsigned char *good = make_native(&h, rec, 2, &n);
  const char *p = tp("bad.xgmm");
  /* truncated anywhere: in the header, in a record, one byte short */
  const size_t cuts[] = {0, 7, 100, 127, 128, 128 + 47, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    write_bytes(p, "wb", good, cuts[i]);
    REJECT(p, read_native, "bytes");
  }
  /* padded */
  write_bytes(p, "wb", good, n);
  write_bytes(p, "ab", "x", 1);
  REJECT(p, read_native, "after");
  /* corrupted record: the checksum finds it */
  good[128 + 5] ^= 0x10;
  write_bytes(p, "wb", good, n);
  REJECT(p, read_native, "checksum");
  free(good);

  struct {
    hdr_fields h;
    const char *word;
  } hb[] = {
      {default_fields(2), "magic"},  {default_fields(2), "version"}, {default_fields(2), "layout"},
      {default_fields(0), "outside"}, {default_fields((uint64_t)1 << 40), "outside"}, {default_fields(2), "unit"},
      {default_fields(2), "cut-off"}, {default_fields(2), "flags"},   {default_fields(2), "records"},
      {default_fields(3), "announces"},
  };
  hb[0].h.magic = "XTGMM\n\n\032";
  hb[1].h.version = 2;
  hb[2].h.layout = "centre:f64x3,scale:f32x3,quat_wxyz:f32x4,rho:f32,label:u32";
  hb[5].h.unit = 0;
  hb[6].h.cutoff = 50;
  hb[7].h.flags = 6;
  hb[8].h.record_bytes = 44;
  for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) {
    unsigned char *b = make_native(&hb[i].h, rec, 2, &n);
    write_bytes(p, "wb", b, n);
    free(b);
    REJECT(p, read_native, hb[i].word);
  }

  /* bad values with a valid checksum */
  const float nan = NAN, inf = INFINITY;
  struct {
    float c[3], s[3], q[4], rho;
    uint32_t label, flags;
    const char *word;
  } vb[] = {
      {{nan, 0, 0}, {1, 1, 1}, {1, 0, 0, 0}, 0.1f, 0, 0, "centre x is not finite"},
      {{0, 0, 0}, {1, inf, 1}, {1, 0, 0, 0}, 0.1f, 0, 0, "scale y is not finite"},
      {{0, 0, 0}, {1, 1, 0}, {1, 0, 0, 0}, 0.1f, 0, 0, "scale z"},
      {{0, 0, 0}, {-1, 1, 1}, {1, 0, 0, 0}, 0.1f, 0, 0, "scale x"},
      {{0, 0, 0}, {1, 1, 1}, {0, 0, 0, 0}, 0.1f, 0, 0, "cannot be normalised"},
      {{0, 0, 0}, {1, 1, 1}, {1e-30f, 0, 0, 0}, 0.1f, 0, 0, "cannot be normalised"},
      {{0, 0, 0}, {1, 1, 1}, {nan, 0, 0, 0}, 0.1f, 0, 0, "quaternion"},
      {{0, 0, 0}, {1, 1, 1}, {1, 0, 0, 0}, inf, 0, 0, "rho is not finite"},
      {{0, 0, 0}, {1, 1, 1}, {1, 0, 0, 0}, -0.1f, 0, 0, "rho"},
      {{0, 0, 0}, {1, 1, 1}, {1, 0, 0, 0}, 0.1f, 300, 1, "label"},
      {{0, 2e7f, 0}, {1, 1, 1}, {1, 0, 0, 0}, 0.1f, 0, 0, "beyond"},
  };
  for (size_t i = 0; i < sizeof vb / sizeof vb[0]; i++) {
    unsigned char r2[2 * 48];
    make_record(r2, c, s, q, 0.1f, 0);
    make_record(r2 + 48, vb[i].c, vb[i].s, vb[i].q, vb[i].rho, vb[i].label);
    hdr_fields hh = default_fields(2);
    hh.flags = vb[i].flags;
    unsigned char *b = make_native(&hh, r2, 2, &n);
    write_bytes(p, "wb", b, n);
    free(b);
    REJECT(p, read_native, vb[i].word);
    REJECT(p, read_native, "Gaussian 1");
  }
  /* missing file, a directory (the volume loaders' words) */
  REJECT(tp("absent.xgmm"), read_native, "no such file");
  REJECT(g_dir, read_native, "is a directory");
}

XT_TEST(thesis_rejections) {
  const char *p = tp("bad.gmm");
  unsigned char t[8 + 2 * 44];
  memset(t, 0, sizeof t);
  w64(t, 2);
  for (int i = 0; i < 2; i++) {
    for (int a = 0; a < 3; a++) wf(t + 8 + 32 + 12 * i + 4 * a, 1.0f); /* scales */
    wf(t + 8 + 56 + 16 * i, 1.0f);                                      /* w */
  }
  write_bytes(p, "wb", t, sizeof t);
  xt_gmm *g = NULL;
  XT_REQUIRE(xt_gmm_read_thesis(p, &g, NULL) == 0); /* the base case is valid */
  xt_gmm_free(g);
  const size_t cuts[] = {0, 5, 8, 50, sizeof t - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    write_bytes(p, "wb", t, cuts[i]);
    REJECT(p, read_thesis, "bytes");
  }
  write_bytes(p, "wb", t, sizeof t);
  write_bytes(p, "ab", "\0\0\0\0", 4);
  REJECT(p, read_thesis, "after");
  unsigned char u[sizeof t];
  memcpy(u, t, sizeof t);
  w64(u, 0);
  write_bytes(p, "wb", u, sizeof u);
  REJECT(p, read_thesis, "count 0");
  w64(u, (uint64_t)1 << 50);
  write_bytes(p, "wb", u, sizeof u);
  REJECT(p, read_thesis, "outside");
  memcpy(u, t, sizeof t);
  wf(u + 8 + 4, NAN);
  write_bytes(p, "wb", u, sizeof u);
  REJECT(p, read_thesis, "centre y");
  memcpy(u, t, sizeof t);
  wf(u + 8 + 32 + 12 + 8, 0.0f);
  write_bytes(p, "wb", u, sizeof u);
  REJECT(p, read_thesis, "Gaussian 1: scale z");
  memcpy(u, t, sizeof t);
  wf(u + 8 + 56 + 16, 0.0f);
  write_bytes(p, "wb", u, sizeof u);
  REJECT(p, read_thesis, "cannot be normalised");
}

XT_TEST(writers_leave_no_partial_file) {
  xt_gmm *g = random_gmm(10, 0);
  XT_REQUIRE(g);
  g->g[3].scale[1] = -1; /* invalid: refused before anything is written */
  const char *p = tp("never.xgmm");
  xt_msg msg;
  XT_CHECK(xt_gmm_write_native(p, g, &msg) < 0);
  XT_CHECK(access(p, F_OK) != 0);
  XT_CHECK(xt_gmm_write_thesis(tp("never.gmm"), g, &msg) < 0);
  XT_CHECK(access(tp("never.gmm"), F_OK) != 0);
  g->g[3].scale[1] = 1;
  XT_CHECK(xt_gmm_write_native("/nonexistent-dir/x.xgmm", g, &msg) == XT_EIO);
  /* the directory holds nothing but what the tests made on purpose: no temporaries */
  DIR *d = opendir(g_dir);
  struct dirent *e;
  while (d && (e = readdir(d))) XT_CHECK_MSG(!strstr(e->d_name, ".tmp."), "left behind: %s", e->d_name);
  if (d) closedir(d);
  xt_gmm_free(g);
}

/* ---- the BVH --------------------------------------------------------------------------------- */

static int box_in(const float lo[3], const float hi[3], const float LO[3], const float HI[3]) {
  for (int a = 0; a < 3; a++)
    if (lo[a] < LO[a] || hi[a] > HI[a]) return 0;
  return 1;
}

XT_TEST(bvh_covers_every_cutoff_ellipsoid_once) {
  xt_gmm *g = random_gmm(4999, 0);
  XT_REQUIRE(g);
  char *seen = calloc(g->count, 1);
  XT_REQUIRE(seen);
  for (uint32_t i = 0; i < g->nnodes; i++) {
    const xt_gmm_node *n = &g->nodes[i];
    if (n->count) {
      for (uint32_t j = 0; j < n->count; j++) {
        uint32_t k = g->index[n->first + j];
        XT_REQUIRE(k < g->count);
        seen[k]++;
        /* the cut-off ellipsoid's box, from the sandwich product of its axes: half-extent along
         * model axis a is k * sqrt(sum_m (R e_m)_a^2 s_m^2) */
        const xt_gaussian *q = &g->g[k];
        double nq = sqrt((double)q->quat[0] * q->quat[0] + (double)q->quat[1] * q->quat[1] +
                         (double)q->quat[2] * q->quat[2] + (double)q->quat[3] * q->quat[3]);
        double w = q->quat[0] / nq, x = q->quat[1] / nq, y = q->quat[2] / nq, z = q->quat[3] / nq;
        for (int a = 0; a < 3; a++) {
          double s2 = 0;
          for (int m = 0; m < 3; m++) {
            double v[3] = {m == 0, m == 1, m == 2};
            /* q v q* for pure v: v + 2w (u x v) + 2 u x (u x v), u = (x, y, z) */
            double u[3] = {x, y, z}, t[3] = {u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]};
            double t2[3] = {u[1] * t[2] - u[2] * t[1], u[2] * t[0] - u[0] * t[2], u[0] * t[1] - u[1] * t[0]};
            double rv = v[a] + 2 * w * t[a] + 2 * t2[a];
            s2 += rv * rv * q->scale[m] * q->scale[m];
          }
          double h = g->cutoff * sqrt(s2) * (1 - 1e-6);
          XT_CHECK(n->lo[a] <= q->centre[a] - h && n->hi[a] >= q->centre[a] + h);
        }
      }
    } else {
      XT_REQUIRE(n->first + 1 < g->nnodes);
      XT_CHECK(box_in(g->nodes[n->first].lo, g->nodes[n->first].hi, n->lo, n->hi));
      XT_CHECK(box_in(g->nodes[n->first + 1].lo, g->nodes[n->first + 1].hi, n->lo, n->hi));
    }
  }
  for (size_t i = 0; i < g->count; i++) XT_CHECK_MSG(seen[i] == 1, "Gaussian %zu in %d leaves", i, seen[i]);
  free(seen);
  xt_gmm_free(g);
}

/* ---- fuzz seed corpus ------------------------------------------------------------------------ */

#ifdef XT_FUZZ_GMM_CORPUS_DIR
XT_TEST(fuzz_corpus_never_crashes) {
  DIR *d = opendir(XT_FUZZ_GMM_CORPUS_DIR);
  XT_REQUIRE(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char src[512];
    snprintf(src, sizeof src, "%s/%s", XT_FUZZ_GMM_CORPUS_DIR, e->d_name);
    size_t n;
    unsigned char *b = slurp(src, &n);
    XT_REQUIRE(b);
    static const char *names[] = {"f.xgmm", "f.gmm", "f.gmm.json"};
    for (int k = 0; k < 3; k++) {
      const char *p = tp(names[k]);
      write_bytes(p, "wb", b, n);
      xt_model *m = NULL;
      xt_msg msg;
      if (xt_model_load(p, NULL, NULL, &m, &msg) == 0) xt_model_free(m);
      else XT_CHECK(m == NULL && strchr(msg.text, '\n') == NULL);
    }
    free(b);
    files++;
  }
  closedir(d);
  XT_CHECK(files >= 5);
}
#define FUZZ_ENTRY XT_ENTRY(fuzz_corpus_never_crashes)
#else
#define FUZZ_ENTRY
#endif

XT_TEST_MAIN(XT_ENTRY(native_layout_is_as_documented) XT_ENTRY(hand_made_native_file_loads_with_units_and_labels)
                 XT_ENTRY(native_round_trip_is_bit_exact) XT_ENTRY(thesis_round_trip_and_hand_made_file)
                     XT_ENTRY(json_mixture_and_model_table) XT_ENTRY(json_rejections) XT_ENTRY(native_rejections)
                         XT_ENTRY(thesis_rejections) XT_ENTRY(writers_leave_no_partial_file)
                             XT_ENTRY(bvh_covers_every_cutoff_ellipsoid_once) FUZZ_ENTRY)
