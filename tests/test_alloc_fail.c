/* Allocation failure while building or loading each model kind: for N = 1, 2, ... the N-th
 * allocation fails, and every failing run must return a negative code (XT_ENOMEM) with a
 * non-empty one-line message, leave *out NULL and leak nothing; the loop ends at the first N past
 * the last allocation, where the load must succeed.
 *
 * The hook: this executable is linked with -Wl,--wrap=malloc,calloc,realloc,free,strdup,aligned_alloc
 * (tests/alloc.cmake; aligned_alloc holds a NanoVDB grid's bytes), so calls from this file and from our static libraries (xt_scene,
 * xt_models, xt_loaders) reach the __wrap_* functions below, which call the real allocator
 * (ASan's, in the sanitizer build). Calls made inside shared libraries (libnifti2, Teem, zlib,
 * xraylib) are not wrapped: what is tested is our code's handling of its own failures; jansson,
 * which takes an allocator, is given the wrapped one for the ellipsoid files.
 * The wrapper keeps the set of live blocks it handed out, so a leak is seen without ASan too
 * (LeakSanitizer also checks each test's process at exit in the sanitizer build).
 *
 * Two modes per case: one-shot (only the N-th call fails) and persistent (the N-th and every
 * later call fail, so cleanup paths that allocate are caught too). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <nifti1.h>
#include <zlib.h>

#include "xt_ct_body.h"
#include "xt_gmm.h"
#include "xt_load.h"
#include "xt_nvdb.h"
#include "xt_nvdb_bricks.h"
#include "xt_phantom.h"
#include "xt_test.h"
#include "xt_test_files.h"

/* --- the allocation hook ---------------------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
void *__wrap_aligned_alloc(size_t align, size_t n);

enum { LIVE_MAX = 1 << 14 };
/* volatile: glibc declares malloc & co. leaf functions, so without it GCC may take the hook's
 * state as untouched by them and drop or move the stores that arm it around a direct call. */
/* Blocks handed out through the wrappers and not yet freed, stored disguised (complemented) so
 * that this table does not keep a leaked block reachable and hide it from LeakSanitizer. */
static uintptr_t g_live[LIVE_MAX];
static volatile int g_nlive;
static volatile int g_armed, g_persistent;
static volatile long g_calls, g_fail_at, g_injected;
static volatile int g_in_jansson, g_first_in_jansson; /* the first injected failure was jansson's */

static void live_add(void *p) {
  if (!p) return;
  if (g_nlive == LIVE_MAX) {
    fprintf(stderr, "test_alloc_fail: more than %d live blocks\n", LIVE_MAX);
    abort();
  }
  g_live[g_nlive++] = ~(uintptr_t)p;
}

/* Blocks that came from an unwrapped allocator (a shared library's) are not in the set. */
static void live_remove(void *p) {
  if (!p) return;
  for (int i = g_nlive - 1; i >= 0; i--)
    if (g_live[i] == ~(uintptr_t)p) {
      g_live[i] = g_live[--g_nlive];
      return;
    }
}

/* 1 when this allocation is to fail. */
static int inject(void) {
  if (!g_armed) return 0;
  long k = ++g_calls;
  if (k == g_fail_at || (g_persistent && k > g_fail_at)) {
    if (g_injected++ == 0) g_first_in_jansson = g_in_jansson;
    return 1;
  }
  return 0;
}

void *__wrap_malloc(size_t n) {
  if (inject()) return NULL;
  void *p = __real_malloc(n);
  live_add(p);
  return p;
}

void *__wrap_calloc(size_t n, size_t size) {
  if (inject()) return NULL;
  void *p = __real_calloc(n, size);
  live_add(p);
  return p;
}

void *__wrap_realloc(void *p, size_t n) {
  if (inject()) return NULL; /* p stays valid, as realloc promises */
  void *q = __real_realloc(p, n);
  if (q || n == 0) live_remove(p);
  live_add(q);
  return q;
}

void __wrap_free(void *p) {
  live_remove(p);
  __real_free(p);
}

char *__wrap_strdup(const char *s) {
  if (inject()) return NULL;
  char *p = __real_strdup(s);
  live_add(p);
  return p;
}

void *__wrap_aligned_alloc(size_t align, size_t n) {
  if (inject()) return NULL;
  void *p = __real_aligned_alloc(align, n);
  live_add(p);
  return p;
}

/* jansson's allocator: the wrapped one, marked so that its failures can be told from ours. */
static void *jansson_malloc(size_t n) {
  g_in_jansson = 1;
  void *p = __wrap_malloc(n);
  g_in_jansson = 0;
  return p;
}

static void arm(long n, int persistent) {
  g_calls = 0;
  g_injected = 0;
  g_first_in_jansson = 0;
  g_fail_at = n;
  g_persistent = persistent;
  g_armed = 1;
}

static void disarm(void) { g_armed = 0; }

/* --- scratch files ------------------------------------------------------------------------------ */

static char g_dir[64];

static void tmp_begin(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/xt_alloc_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

static const char *tp(const char *name) {
  static char buf[16][256];
  static int k;
  char *b = buf[k++ & 15];
  snprintf(b, 256, "%s/%s", g_dir, name);
  return b;
}

/* Removes the files made by this test (the directory holds nothing else). */
static void tmp_end(const char *const *names, int n) {
  for (int i = 0; i < n; i++) unlink(tp(names[i]));
  rmdir(g_dir);
}


/* The grid: 4 x 3 x 2 voxels holding (i + 2j + 3k) mod 8, valid as HU and as default labels, so
 * every conversion applies to every file. */
enum { NX = 4, NY = 3, NZ = 2, NV = NX * NY * NZ };

static int value(int n) {
  int i = n % NX, j = (n / NX) % NY, k = n / (NX * NY);
  return (i + 2 * j + 3 * k) % 8;
}

/* NV values as little-endian integers of es bytes. */
static void grid_le(unsigned char *out, int es) {
  for (int n = 0; n < NV; n++)
    for (int b = 0; b < es; b++) out[es * n + b] = (unsigned char)(b == 0 ? value(n) : 0);
}

static void write_nifti1(const char *path, int dt, int bitpix, int gzip) {
  nifti_1_header h;
  memset(&h, 0, sizeof h);
  h.sizeof_hdr = 348;
  h.dim[0] = 3;
  h.dim[1] = NX, h.dim[2] = NY, h.dim[3] = NZ;
  for (int i = 4; i < 8; i++) h.dim[i] = 1;
  h.datatype = (short)dt;
  h.bitpix = (short)bitpix;
  h.pixdim[0] = 1;
  h.pixdim[1] = 1.5f, h.pixdim[2] = 2, h.pixdim[3] = 2.5f;
  h.vox_offset = 352;
  memcpy(h.magic, "n+1", 4);
  int es = bitpix / 8;
  unsigned char file[352 + NV * 4];
  memset(file, 0, sizeof file);
  memcpy(file, &h, sizeof h);
  for (int n = 0; n < NV; n++) { /* host byte order, as the header is */
    if (es == 1) file[352 + n] = (unsigned char)value(n);
    else {
      int16_t v = (int16_t)value(n);
      memcpy(file + 352 + 2 * n, &v, 2);
    }
  }
  size_t len = 352 + (size_t)NV * (size_t)es;
  if (!gzip) {
    write_bytes(path, "wb", file, len);
    return;
  }
  size_t zn;
  unsigned char *z = deflate_buf(file, len, 1, &zn);
  write_bytes(path, "wb", z, zn);
  free(z);
}

static const char *const g_files[] = {"a.mha", "z.mha", "b.mhd", "b.raw", "c.nrrd", "d.nhdr", "d.raw",
                                      "e.nii", "f.nii.gz", "g.json"};
enum { NFILES = (int)(sizeof g_files / sizeof g_files[0]) };

static void write_files(void) {
  unsigned char d8[NV], d16[NV * 2], d32[NV * 4];
  grid_le(d8, 1);
  grid_le(d16, 2);
  grid_le(d32, 4);
  write_text_then(tp("a.mha"),
                  "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
                  "TransformMatrix = 1 0 0 0 1 0 0 0 1\nOffset = 10 -20 30\nElementSpacing = 0.5 0.75 2\n"
                  "DimSize = 4 3 2\nElementType = MET_SHORT\nElementDataFile = LOCAL\n",
                  d16, sizeof d16);
  size_t zn;
  unsigned char *z = deflate_buf(d16, sizeof d16, 0, &zn);
  char hdr[512];
  snprintf(hdr, sizeof hdr,
           "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
           "CompressedData = True\nCompressedDataSize = %zu\nElementSpacing = 1 1 1\nDimSize = 4 3 2\n"
           "ElementType = MET_SHORT\nElementDataFile = LOCAL\n",
           zn);
  write_text_then(tp("z.mha"), hdr, z, zn);
  free(z);
  write_text_then(tp("b.mhd"),
                  "ObjectType = Image\nNDims = 3\nBinaryData = True\nElementByteOrderMSB = False\n"
                  "AnatomicalOrientation = RAI\nElementSpacing = 1 2 3\nDimSize = 4 3 2\nElementType = MET_INT\n"
                  "ElementDataFile = b.raw\n",
                  NULL, 0);
  write_bytes(tp("b.raw"), "wb", d32, sizeof d32);
  write_text_then(tp("c.nrrd"),
                  "NRRD0004\ntype: uchar\ndimension: 3\nspace: left-posterior-superior\nsizes: 4 3 2\n"
                  "space directions: (2,0,0) (0,2,0) (0,0,2)\nspace origin: (-1,-2,-3)\nencoding: raw\n\n",
                  d8, sizeof d8);
  write_text_then(tp("d.nhdr"),
                  "NRRD0004\ntype: short\ndimension: 3\nsizes: 4 3 2\nspacings: 0.5 1.5 2.5\nendian: little\n"
                  "encoding: raw\ndata file: d.raw\n",
                  NULL, 0);
  write_bytes(tp("d.raw"), "wb", d16, sizeof d16);
  write_nifti1(tp("e.nii"), DT_INT16, 16, 0);
  write_nifti1(tp("f.nii.gz"), DT_UINT8, 8, 1);
  const char *json = "{\"name\": \"two balls\", \"ellipsoids\": [\n"
                     "  {\"center\": [0, 0, 0], \"semi_axes\": [40, 40, 40], \"mu\": 0.02},\n"
                     "  {\"center\": [10, 0, 5], \"semi_axes\": [8, 12, 20], \"phi_deg\": 30, \"theta_deg\": 10,"
                     " \"material\": \"bone\"}]}\n";
  write_bytes(tp("g.json"), "wb", json, strlen(json));
}

/* --- the cases ---------------------------------------------------------------------------------- */

enum { K_HEAD, K_JSON, K_VOLUME, K_MODEL };

typedef struct alloc_case {
  int kind;
  const char *path; /* JSON and volume files */
  int type;         /* head and JSON: XT_VOXEL_F32 or XT_VOXEL_U8 */
  xt_load_convert conv;
  const char *grid; /* .nvdb: the grid's name (NULL: the first) */
} alloc_case;

static const char *const conv_name[] = {"MU", "HU_TO_MU", "HU_TO_LABELS", "LABELS"};

/* An ellipsoid file as a model, the way `xtwin render --ellipsoids` builds it. */
static int json_model(const char *path, int type, xt_model **out, xt_msg *msg) {
  const int dim[3] = {12, 12, 12};
  const double sp[3] = {8, 8, 8};
  xt_material_table mt;
  xt_phantom ph;
  xt_volume *v = NULL;
  int rc;
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg)) || (rc = xt_phantom_load_json(path, &mt, &ph, msg)) ||
      (rc = xt_phantom_voxelize(&ph, dim, sp, type, &mt, &v, msg)))
    return rc;
  if ((rc = xt_model_from_volume(v, ph.name, out, msg))) xt_volume_free(v);
  return rc;
}

/* Runs one case; *obj is the model or volume made (NULL before the call). */
static int run_case(const alloc_case *c, void **obj, xt_msg *msg) {
  static const int head_dim[3] = {16, 16, 16};
  xt_model *m = NULL;
  xt_volume *v = NULL;
  int rc;
  switch (c->kind) {
  case K_HEAD:
    rc = xt_phantom_head_model(head_dim, 12.0, c->type, &m, msg);
    *obj = m;
    return rc;
  case K_JSON:
    rc = json_model(c->path, c->type, &m, msg);
    *obj = m;
    return rc;
  case K_MODEL: { /* any model file through the table (Gaussian mixtures, NanoVDB) */
    xt_load_options o = {.convert = c->conv, .grid = c->grid};
    m = (xt_model *)(uintptr_t)0x1; /* xt_model_load must set it to NULL on failure */
    rc = xt_model_load(c->path, &o, NULL, &m, msg);
    *obj = m;
    return rc;
  }
  default: {
    xt_load_options o = {.convert = c->conv};
    v = (xt_volume *)(uintptr_t)0x1; /* xt_volume_load must set it to NULL on failure */
    rc = xt_volume_load(c->path, &o, &v, msg);
    *obj = v;
    return rc;
  }
  }
}

static void free_obj(const alloc_case *c, void *obj) {
  if (c->kind == K_VOLUME) xt_volume_free(obj);
  else xt_model_free(obj);
}

static void describe(const alloc_case *c, char *buf, size_t n) {
  const char *base = c->path ? strrchr(c->path, '/') + 1 : NULL;
  if (c->kind == K_HEAD) snprintf(buf, n, "head %s", c->type == XT_VOXEL_U8 ? "labels" : "dense");
  else if (c->kind == K_JSON) snprintf(buf, n, "%s %s", base, c->type == XT_VOXEL_U8 ? "labels" : "dense");
  else if (c->kind == K_MODEL)
    snprintf(buf, n, "%s%s%s%s", base, c->grid ? " grid " : "", c->grid ? c->grid : "",
             c->conv == XT_LOAD_LABELS ? " LABELS" : "");
  else snprintf(buf, n, "%s %s", base, conv_name[c->conv]);
}

/* The loop: N = 1, 2, ... until a run makes fewer than N allocations. Returns the number of
 * allocations the successful run made. */
static long fail_each(const alloc_case *c, int persistent) {
  char what[160];
  describe(c, what, sizeof what);
  const char *mode = persistent ? "persistent" : "one-shot";
  for (long n = 1; n <= 100000; n++) {
    int live0 = g_nlive;
    void *obj = NULL;
    xt_msg msg;
    memset(msg.text, 0, sizeof msg.text);
    arm(n, persistent);
    int rc = run_case(c, &obj, &msg);
    disarm();
    long calls = g_calls;
    if (g_injected == 0) { /* past the last allocation: must load */
      XT_CHECK_MSG(rc == 0 && obj, "%s: no failure injected (%ld allocations) yet rc %d (%s): %s", what, calls, rc,
                   xt_errname(rc), msg.text);
      free_obj(c, rc == 0 ? obj : NULL);
      XT_CHECK_MSG(g_nlive == live0, "%s: %d blocks leaked by a successful load", what, g_nlive - live0);
      return calls;
    }
    if (rc == 0) { /* survived a failed allocation: allowed, but it must still be whole */
      XT_CHECK_MSG(obj != NULL, "%s: %s failure of allocation %ld: success without a result", what, mode, n);
      free_obj(c, obj);
      XT_CHECK_MSG(g_nlive == live0, "%s: %s failure of allocation %ld: %d blocks leaked", what, mode, n,
                   g_nlive - live0);
      continue;
    }
    int ok = 1;
#define CHK_(cond, ...)                                                                                          \
  do {                                                                                                           \
    if (!(cond)) {                                                                                               \
      ok = 0;                                                                                                    \
      XT_CHECK_MSG(cond, __VA_ARGS__);                                                                           \
    }                                                                                                            \
  } while (0)
    /* jansson reports most of its allocation failures as syntax errors, so only a failure in
     * our own code must come back as NOMEM */
    if (g_first_in_jansson)
      CHK_(rc < 0, "%s: %s failure of jansson's allocation %ld: rc %d", what, mode, n, rc);
    else
      CHK_(rc == XT_ENOMEM, "%s: %s failure of allocation %ld: rc %d (%s), want NOMEM: %s", what, mode, n, rc,
           xt_errname(rc), msg.text);
    size_t len = strlen(msg.text);
    CHK_(len > 0 && !(len >= 2 && strcmp(msg.text + len - 2, ": ") == 0),
         "%s: %s failure of allocation %ld: empty message or detail: \"%s\"", what, mode, n, msg.text);
    CHK_(strchr(msg.text, '\n') == NULL, "%s: %s failure of allocation %ld: message spans lines: %s", what, mode, n,
         msg.text);
    /* xt_volume_load's messages start with the path; so do the JSON parser's (voxelising the
     * parsed phantom knows no file) */
    if (c->kind == K_VOLUME || c->kind == K_MODEL || (c->kind == K_JSON && g_first_in_jansson))
      CHK_(strncmp(msg.text, c->path, strlen(c->path)) == 0,
           "%s: %s failure of allocation %ld: message does not start with the path: %s", what, mode, n, msg.text);
    CHK_(obj == NULL, "%s: %s failure of allocation %ld: *out is %p, not NULL", what, mode, n, obj);
    CHK_(g_nlive == live0, "%s: %s failure of allocation %ld: %d blocks leaked (%s)", what, mode, n, g_nlive - live0,
         msg.text);
#undef CHK_
    if (!ok) return -1; /* one report per case is enough */
  }
  XT_CHECK_MSG(0, "%s: still failing after 100000 allocations", what);
  return -1;
}

static void run_all(const alloc_case *cases, int n) {
  for (int i = 0; i < n; i++) {
    long a = fail_each(&cases[i], 0);
    long b = fail_each(&cases[i], 1);
    char what[160];
    describe(&cases[i], what, sizeof what);
    printf("  %-28s %ld allocations\n", what, a);
    /* every case allocates in our code, so the hook must have had something to fail */
    XT_CHECK_MSG(a > 0 && b == a, "%s: %ld allocations one-shot, %ld persistent", what, a, b);
  }
  fflush(stdout);
}

/* --- tests -------------------------------------------------------------------------------------- */

/* The hook itself: the N-th call fails, the others do not, and the live set follows. */
XT_TEST(hook_fails_the_nth_call) {
  int live0 = g_nlive;
  arm(2, 0);
  void *a = malloc(8), *b = calloc(2, 8), *c = strdup("x"), *d = realloc(NULL, 8), *al = aligned_alloc(32, 64);
  disarm();
  XT_CHECK(a && !b && c && d && al && ((uintptr_t)al & 31) == 0);
  XT_CHECK(g_calls == 5 && g_injected == 1);
  XT_CHECK(g_nlive == live0 + 4);
  free(al);
  arm(1, 1);
  void *e = realloc(d, 64), *f = malloc(1);
  disarm();
  XT_CHECK(!e && !f && g_injected == 2);
  if (e) d = e; /* not expected: a failed realloc leaves d as it was */
  free(a);
  free(c);
  free(d);
  XT_CHECK(g_nlive == live0);
}

XT_TEST(phantoms) {
  static const alloc_case cases[] = {
      {K_HEAD, NULL, XT_VOXEL_F32, XT_LOAD_MU, NULL},
      {K_HEAD, NULL, XT_VOXEL_U8, XT_LOAD_MU, NULL},
  };
  run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void volume_cases(const char *const *names, int nnames) {
  tmp_begin();
  write_files();
  alloc_case cases[64];
  int n = 0;
  for (int i = 0; i < nnames; i++) {
    const char *p = tp(names[i]);
    if (strstr(p, ".json")) {
      cases[n++] = (alloc_case){K_JSON, p, XT_VOXEL_F32, XT_LOAD_MU, NULL};
      cases[n++] = (alloc_case){K_JSON, p, XT_VOXEL_U8, XT_LOAD_MU, NULL};
      continue;
    }
    for (int cv = XT_LOAD_MU; cv <= XT_LOAD_LABELS; cv++) cases[n++] = (alloc_case){K_VOLUME, p, 0, (xt_load_convert)cv, NULL};
  }
  run_all(cases, n);
  tmp_end(g_files, NFILES);
}

/* jansson's allocations fail too: its parser is part of loading the file, and what it builds must
 * be released on every path. */
XT_TEST(ellipsoid_json) {
  static const char *const f[] = {"g.json"};
  json_set_alloc_funcs(jansson_malloc, __wrap_free);
  volume_cases(f, 1);
}

XT_TEST(metaimage) {
  static const char *const f[] = {"a.mha", "z.mha", "b.mhd"};
  volume_cases(f, 3);
}

XT_TEST(nrrd) {
  static const char *const f[] = {"c.nrrd", "d.nhdr"};
  volume_cases(f, 2);
}

XT_TEST(nifti) {
  static const char *const f[] = {"e.nii", "f.nii.gz"};
  volume_cases(f, 2);
}

/* DICOM: a real CT series folder and one file from Debian's python3-pydicom (scripts/install-deps
 * installs it). Our allocations fail; GDCM's go through C++'s operator new, which these wrappers do
 * not see. */
#define XT_PYDICOM_FILES "/usr/lib/python3/dist-packages/pydicom/data/test_files"
XT_TEST(dicom) {
  static const char *const f[] = {XT_PYDICOM_FILES "/dicomdirtests/98892001/CT5N", XT_PYDICOM_FILES "/CT_small.dcm"};
  alloc_case cases[4];
  int n = 0;
  for (int i = 0; i < 2; i++) {
    if (access(f[i], R_OK) != 0) {
      printf("  (%s missing: python3-pydicom not installed; skipped)\n", f[i]);
      continue;
    }
    cases[n++] = (alloc_case){K_VOLUME, f[i], 0, XT_LOAD_MU, NULL};
    cases[n++] = (alloc_case){K_VOLUME, f[i], 0, XT_LOAD_HU_TO_MU, NULL};
  }
  run_all(cases, n);
}

/* Gaussian mixtures (issue 8): the native file, the thesis layout and JSON, each through
 * xt_model_load (jansson on the wrapped allocator for the JSON one). The files are written by
 * the library's own writers before the hook is armed. */
XT_TEST(gaussian_mixtures) {
  static const char *const names[] = {"m.xgmm", "m.gmm", "m.gmm.json"};
  tmp_begin();
  xt_gmm *g = NULL;
  XT_REQUIRE(xt_gmm_create(3, &g, NULL) == 0);
  for (int i = 0; i < 3; i++) {
    g->g[i].centre[0] = (float)(10 * i);
    for (int a = 0; a < 3; a++) g->g[i].scale[a] = (float)(2 + i);
    g->g[i].rho = 0.01f;
    g->g[i].label = (uint32_t)i;
  }
  g->has_labels = 1;
  XT_REQUIRE(xt_gmm_finish(g, "test", NULL) == 0);
  XT_REQUIRE(xt_gmm_write_native(tp(names[0]), g, NULL) == 0);
  XT_REQUIRE(xt_gmm_write_thesis(tp(names[1]), g, NULL) == 0);
  xt_gmm_free(g);
  const char *json = "{\"gaussians\": [{\"center\": [0, 0, 0], \"scale\": 3, \"rho\": 0.02, \"material\": \"bone\"},"
                     " {\"center\": [9, 0, 0], \"scale\": [1, 2, 3], \"quat\": [1, 0, 0, 1], \"rho\": 0.01,"
                     " \"material\": 2}]}";
  write_bytes(tp(names[2]), "wb", json, strlen(json));
  json_set_alloc_funcs(jansson_malloc, __wrap_free);
  alloc_case cases[3];
  for (int i = 0; i < 3; i++) cases[i] = (alloc_case){K_MODEL, tp(names[i]), 0, XT_LOAD_MU, NULL};
  /* tp() reuses one buffer: give each case its own copy of the path */
  static char paths[3][256];
  for (int i = 0; i < 3; i++) {
    snprintf(paths[i], sizeof paths[i], "%s", tp(names[i]));
    cases[i].path = paths[i];
  }
  run_all(cases, 3);
  tmp_end(names, 3);
}

/* NanoVDB (issue 9): files written by our converter (`xtwin nvdb-convert`; the seeds of the
 * fuzz corpus tests/fuzz/nvdb): a plain Float grid, ZIP-compressed Int16 and Fp8 labels with the
 * xtwin record's material table, a quantised FpN grid, a file of two segments where the second
 * grid is picked by name, and the index form (an IndexGrid and its value channel). zlib's own allocations are not wrapped (a shared library). */
#ifdef XT_FUZZ_NVDB_CORPUS_DIR
XT_TEST(nanovdb) {
  static const struct {
    const char *file, *grid;
    xt_load_convert conv;
  } f[] = {{"float_head.nvdb", NULL, XT_LOAD_MU},
           {"zip_fp8_labels.nvdb", NULL, XT_LOAD_LABELS},
           {"zip_int16_labels.nvdb", NULL, XT_LOAD_MU},
           {"zip_fpn_head.nvdb", "density", XT_LOAD_MU},
           {"zip_two_segments.nvdb", "b", XT_LOAD_MU},
           {"zip_index_head40.nvdb", NULL, XT_LOAD_MU}};
  enum { N = (int)(sizeof f / sizeof f[0]) };
  static char paths[N][512];
  alloc_case cases[N];
  for (int i = 0; i < N; i++) {
    snprintf(paths[i], sizeof paths[i], "%s/%s", XT_FUZZ_NVDB_CORPUS_DIR, f[i].file);
    XT_REQUIRE(access(paths[i], R_OK) == 0);
    cases[i] = (alloc_case){K_MODEL, paths[i], 0, f[i].conv, f[i].grid};
  }
  run_all(cases, N);
}

/* Issue 29's two builders: a CT's background (models/xt_ct_body.c) on a small volume, and the
 * brick pool of the corpus's Float grid (projectors/xt_nvdb_bricks.c). Each failing run must
 * return XT_ENOMEM with a one-line message, leave the volume as it was (classification) or the
 * host copy empty (bricks), and leak nothing; the loop ends where the call succeeds. */
XT_TEST(ct_body_and_bricks) {
  const double sp[3] = {1, 1, 1};
  xt_volume *v = NULL;
  XT_REQUIRE(xt_volume_create(20, 18, 6, sp, XT_VOXEL_F32, &v, NULL) == 0);
  float *f = v->data;
  for (size_t i = 0; i < xt_volume_voxels(v); i++) f[i] = (i % 20 > 4 && i % 20 < 15) ? 0.02f : 0.0003f;
  float *copy = malloc(v->nbytes);
  XT_REQUIRE(copy);
  memcpy(copy, f, v->nbytes);
  char path[512];
  snprintf(path, sizeof path, "%s/float_head.nvdb", XT_FUZZ_NVDB_CORPUS_DIR);
  xt_load_options lo = {.convert = XT_LOAD_MU};
  xt_model *gm = NULL;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_model_load(path, &lo, NULL, &gm, &msg) == 0, "%s", msg.text);
  for (int which = 0; which < 2; which++)
    for (int persistent = 0; persistent < 2; persistent++) {
      long n = 1;
      for (; n < 100000; n++) {
        const int live0 = g_nlive;
        xt_ct_body_report r;
        xt_nvdb_bricks_host h;
        memset(&h, 0, sizeof h);
        msg.text[0] = 0;
        arm(n, persistent);
        const int rc = which == 0 ? xt_ct_body_classify(v, 0.01, 0.0, &r, &msg)
                                  : xt_nvdb_bricks_build(xt_model_nvdb(gm), &h, &msg);
        disarm();
        if (rc == 0) {
          if (which == 0) memcpy(f, copy, v->nbytes); /* for the next run */
          else xt_nvdb_bricks_free(&h);
          XT_CHECK(g_nlive == live0);
          break;
        }
        XT_CHECK_MSG(rc == XT_ENOMEM && msg.text[0] && !strchr(msg.text, '\n'), "%s, allocation %ld: rc %d: %s",
                     which ? "bricks" : "ct body", n, rc, msg.text);
        XT_CHECK_MSG(which == 1 || memcmp(f, copy, v->nbytes) == 0, "ct body, allocation %ld: volume changed", n);
        XT_CHECK_MSG(which == 0 || (!h.table && !h.pool && !h.palette), "bricks, allocation %ld: host copy kept", n);
        XT_CHECK_MSG(g_nlive == live0, "%s, allocation %ld: %d blocks leaked", which ? "bricks" : "ct body", n,
                     g_nlive - live0);
      }
      XT_CHECK_MSG(n > 1 && n < 100000, "%s: %ld allocations", which ? "bricks" : "ct body", n - 1);
    }
  xt_model_free(gm);
  free(copy);
  xt_volume_free(v);
}
#define NVDB_ENTRY XT_ENTRY(nanovdb) XT_ENTRY(ct_body_and_bricks)
#else
#define NVDB_ENTRY
#endif

XT_TEST_MAIN(XT_ENTRY(hook_fails_the_nth_call) XT_ENTRY(phantoms) XT_ENTRY(ellipsoid_json) XT_ENTRY(metaimage)
                 XT_ENTRY(nrrd) XT_ENTRY(nifti) XT_ENTRY(dicom) XT_ENTRY(gaussian_mixtures) NVDB_ENTRY)
