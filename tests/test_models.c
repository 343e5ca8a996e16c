/* Models: the default material table against published NIST values, volume validation, and the
 * analytic phantoms' chords and voxelisation against closed forms. */
#include <stdint.h>
#include <string.h>

#include "xt_gmm.h"
#include "xt_model_kind.h"
#include "xt_nvdb.h"
#include "xt_phantom.h"
#include "xt_test.h"

XT_TEST(material_table_matches_nist_values) {
  /* mu/rho (cm^2/g) from NIST XCOM as tabulated in shared/reference/notes-detector-domain.md 3.2,
   * times the ICRP densities: checked to 1.5 % (the tables' rounding). */
  static const struct {
    int idx;
    double e, mu_rho, rho;
  } ref[] = {
      {XT_MAT_SOFT, 60, 0.203, 1.00}, {XT_MAT_BONE, 60, 0.310, 1.85}, {XT_MAT_BLOOD, 60, 0.205, 1.06},
      {XT_MAT_FAT, 60, 0.198, 0.92},  {XT_MAT_SOFT, 40, 0.262, 1.00}, {XT_MAT_BONE, 40, 0.645, 1.85},
      {XT_MAT_AIR, 40, 0.248, 0.0012},
  };
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
    xt_material_table t;
    xt_msg msg;
    XT_REQUIRE(xt_materials_default(ref[i].e, &t, &msg) == 0);
    double want = ref[i].mu_rho * ref[i].rho / 10.0; /* 1/mm */
    XT_CHECK_MSG(fabs(t.mu[ref[i].idx] - want) <= 0.015 * want, "%s at %g keV: %g vs %g", t.name[ref[i].idx],
                 ref[i].e, t.mu[ref[i].idx], want);
  }
  xt_material_table t;
  XT_REQUIRE(xt_materials_default(60, &t, NULL) == 0);
  XT_CHECK(t.count == XT_MAT_DEFAULT_COUNT);
  /* iodine contrast adds 10 mg/mL of iodine to blood: 7.58 cm^2/g * 0.01 g/cm^3 at 60 keV */
  XT_CHECK_NEAR(t.mu[XT_MAT_IODINE] - t.mu[XT_MAT_BLOOD], 7.58 * 0.01 / 10.0, 0.015 * 7.58 * 0.001);
  XT_CHECK(t.mu[XT_MAT_METAL] > t.mu[XT_MAT_BONE] && t.mu[XT_MAT_BONE] > t.mu[XT_MAT_SOFT]);
  XT_CHECK(strstr(t.source, "xraylib") != NULL);
  xt_msg msg;
  XT_CHECK(xt_materials_default(5, &t, &msg) == XT_ERANGE && strstr(msg.text, "keV"));
}

XT_TEST(volume_create_rejects_absurd_sizes) {
  xt_volume *v;
  xt_msg msg;
  double sp[3] = {1, 1, 1}, bad[3] = {1, 0, 1}, nan[3] = {1, NAN, 1};
  XT_CHECK(xt_volume_create(0, 4, 4, sp, XT_VOXEL_F32, &v, &msg) == XT_ERANGE);
  XT_CHECK(xt_volume_create(4, -1, 4, sp, XT_VOXEL_F32, &v, &msg) == XT_ERANGE);
  XT_CHECK(xt_volume_create(16000, 16000, 16000, sp, XT_VOXEL_U8, &v, &msg) == XT_ETOOLARGE);
  XT_CHECK(xt_volume_create(4, 4, 4, bad, XT_VOXEL_F32, &v, &msg) == XT_ERANGE && strstr(msg.text, "spacing"));
  XT_CHECK(xt_volume_create(4, 4, 4, nan, XT_VOXEL_F32, &v, &msg) == XT_ERANGE);
  XT_CHECK(xt_volume_create(4, 4, 4, sp, 99, &v, &msg) == XT_EINVAL);
}

XT_TEST(volume_validate_finds_nan_and_bad_labels) {
  xt_volume *v;
  xt_msg msg;
  double sp[3] = {1, 1, 1};
  XT_REQUIRE(xt_volume_create(3, 3, 3, sp, XT_VOXEL_F32, &v, NULL) == 0);
  XT_CHECK(xt_volume_validate(v, "vol", &msg) == 0);
  ((float *)v->data)[13] = NAN;
  XT_CHECK(xt_volume_validate(v, "vol", &msg) == XT_ENANDATA && strstr(msg.text, "vol: voxel 13"));
  xt_volume_free(v);
  XT_REQUIRE(xt_volume_create(3, 3, 3, sp, XT_VOXEL_U8, &v, NULL) == 0);
  XT_CHECK(xt_volume_validate(v, "lab", &msg) == XT_EINVAL); /* no table */
  v->materials = calloc(1, sizeof *v->materials);
  XT_REQUIRE(v->materials);
  v->materials->count = 2;
  ((uint8_t *)v->data)[5] = 2;
  XT_CHECK(xt_volume_validate(v, "lab", &msg) == XT_ERANGE && strstr(msg.text, "label 2"));
  xt_volume_free(v);
}

XT_TEST(volume_bounds_cover_voxel_cubes) {
  xt_volume *v;
  double sp[3] = {2, 1, 0.5};
  XT_REQUIRE(xt_volume_create(10, 20, 40, sp, XT_VOXEL_F32, &v, NULL) == 0);
  xt_vec3 lo, hi;
  xt_volume_bounds(v, &lo, &hi);
  XT_CHECK_NEAR(lo.x, -10, 1e-12);
  XT_CHECK_NEAR(hi.x, 10, 1e-12);
  XT_CHECK_NEAR(lo.y, -10, 1e-12);
  XT_CHECK_NEAR(hi.z, 10, 1e-12);
  xt_volume_free(v);
}

XT_TEST(ellipsoid_chords_closed_form) {
  xt_ellipsoid e = xt_ellipsoid_make(xt_v3(1, 2, 3), xt_v3(10, 5, 2), 0, 0, 1, 0);
  /* through the centre along each axis: the full diameter */
  XT_CHECK_NEAR(xt_ellipsoid_chord(&e, xt_v3(-100, 2, 3), xt_v3(100, 2, 3)), 20, 1e-12);
  XT_CHECK_NEAR(xt_ellipsoid_chord(&e, xt_v3(1, -100, 3), xt_v3(1, 100, 3)), 10, 1e-12);
  XT_CHECK_NEAR(xt_ellipsoid_chord(&e, xt_v3(1, 2, 3), xt_v3(1, 2, 100)), 2, 1e-12); /* starts inside */
  /* an off-centre line x = 1 + 6: chord 2*5*sqrt(1 - 0.36) along y */
  XT_CHECK_NEAR(xt_ellipsoid_chord(&e, xt_v3(7, -100, 3), xt_v3(7, 100, 3)), 10 * sqrt(1 - 0.36), 1e-12);
  XT_CHECK(xt_ellipsoid_chord(&e, xt_v3(12, -100, 3), xt_v3(12, 100, 3)) == 0);
  /* rotated 90 degrees about z: the long axis now lies along y */
  xt_ellipsoid r = xt_ellipsoid_make(xt_v3(0, 0, 0), xt_v3(10, 5, 2), 90, 0, 1, 0);
  XT_CHECK_NEAR(xt_ellipsoid_chord(&r, xt_v3(0, -100, 0), xt_v3(0, 100, 0)), 20, 1e-12);
  XT_CHECK(xt_ellipsoid_contains(&r, xt_v3(0, 9.9, 0)) && !xt_ellipsoid_contains(&r, xt_v3(9.9, 0, 0)));
}

XT_TEST(voxelised_sphere_has_its_volume) {
  xt_phantom p;
  memset(&p, 0, sizeof p);
  p.count = 1;
  p.e[0] = xt_ellipsoid_make(xt_v3(0.3, -0.2, 0.1), xt_v3(20, 20, 20), 0, 0, 0.5, XT_MAT_BONE);
  int dim[3] = {50, 50, 50};
  double sp[3] = {1, 1, 1};
  xt_volume *v;
  XT_REQUIRE(xt_phantom_voxelize(&p, dim, sp, XT_VOXEL_F32, NULL, &v, NULL) == 0);
  double sum = 0;
  for (size_t i = 0; i < xt_volume_voxels(v); i++) sum += ((float *)v->data)[i];
  double want = 0.5 * 4.0 / 3.0 * XT_PI * 8000.0;
  XT_CHECK_MSG(fabs(sum - want) < 0.01 * want, "%g vs %g", sum, want);
  xt_volume_free(v);
}

XT_TEST(head_phantom_has_its_materials) {
  xt_model *m;
  int dim[3] = {64, 64, 64};
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &m, NULL) == 0);
  int seen[256] = {0};
  const xt_volume *v = xt_model_volume(m);
  const uint8_t *u = v->data;
  for (size_t i = 0; i < xt_volume_voxels(v); i++) seen[u[i]]++;
  XT_CHECK(seen[XT_MAT_AIR] && seen[XT_MAT_BONE] && seen[XT_MAT_BRAIN] && seen[XT_MAT_SOFT] && seen[XT_MAT_BLOOD]);
  XT_CHECK(m->kind == XT_MODEL_LABELS && v->materials && v->materials->count == XT_MAT_DEFAULT_COUNT);
  xt_msg msg;
  XT_CHECK(xt_volume_validate(v, "head", &msg) == 0);
  /* the centre voxel is brain, a voxel on the x axis at 67 mm is skull (semi-axis 69 mm) */
  XT_CHECK(u[32 + 64 * (32 + 64 * 32)] == XT_MAT_BRAIN);
  xt_model_free(m);
}

/* ---- the kind table (xt_model_kind.h) ------------------------------------------------------ */

XT_TEST(kind_registry_is_complete) {
  const int n = xt_model_kind_count();
  XT_CHECK(n >= 4);
  for (int i = 0; i < n; i++) {
    const xt_model_kind_ops *k = xt_model_kind_at(i);
    XT_REQUIRE(k && k->name && *k->name);
    XT_CHECK_MSG(k->free && k->bounds && k->describe, "kind %s: free, bounds and describe are required", k->name);
    XT_CHECK_MSG(xt_model_kind_find(k->name) == k, "kind %s: found by its name", k->name);
    for (int j = 0; j < i; j++) XT_CHECK_MSG(strcmp(xt_model_kind_at(j)->name, k->name), "kind %s twice", k->name);
  }
  XT_CHECK(xt_model_kind_at(n) == NULL && xt_model_kind_at(-1) == NULL && xt_model_kind_find("nope") == NULL);
  XT_CHECK(xt_model_kind_find("dense") == XT_MODEL_DENSE && xt_model_kind_find("labels") == XT_MODEL_LABELS &&
           xt_model_kind_find("gmm") == XT_MODEL_GMM && xt_model_kind_find("nvdb") == XT_MODEL_NVDB);
  XT_CHECK(strcmp(xt_model_kind_name(NULL), "unknown") == 0);
}

/* A writer that checks the calls nest (keys in objects, none in arrays) and lists the top-level keys. */
typedef struct keys_out {
  char keys[256];
  int depth, bad;
  int array[16]; /* array[d]: container d is an array */
} keys_out;

static void ko_value(keys_out *k, const char *key) {
  if (k->depth < 1 || (key == NULL) != (k->array[k->depth - 1] != 0)) k->bad = 1;
  if (k->depth == 1 && key) {
    size_t n = strlen(k->keys);
    snprintf(k->keys + n, sizeof k->keys - n, "%s%s", n ? "," : "", key);
  }
}
static void ko_real(void *c, const char *key, double v) { ko_value(c, key); }
static void ko_integer(void *c, const char *key, int64_t v) { ko_value(c, key); }
static void ko_string(void *c, const char *key, const char *s) {
  if (!s) ((keys_out *)c)->bad = 1;
  ko_value(c, key);
}
static void ko_boolean(void *c, const char *key, int v) { ko_value(c, key); }
static void ko_begin(void *c, const char *key, int array) {
  keys_out *k = c;
  ko_value(k, key);
  if (k->depth >= 16) k->bad = 1;
  else k->array[k->depth++] = array;
}
static void ko_end(void *c) {
  keys_out *k = c;
  if (k->depth <= 1) k->bad = 1;
  else k->depth--;
}

/* The top-level keys of view v of m (a balanced, well-formed description), or "BAD". */
static const char *view_keys(const xt_model *m, xt_model_view v, keys_out *k) {
  memset(k, 0, sizeof *k);
  k->depth = 1; /* the caller's object */
  const xt_json_out out = {k, ko_real, ko_integer, ko_string, ko_boolean, ko_begin, ko_end};
  xt_model_describe(m, v, &out);
  return k->bad || k->depth != 1 ? "BAD" : k->keys;
}

XT_TEST(kinds_describe_and_answer_through_the_table) {
  xt_model *dense = NULL, *labels = NULL, *gm = NULL;
  int dim[3] = {16, 16, 16};
  XT_REQUIRE(xt_phantom_head_model(dim, 12.0, XT_VOXEL_F32, &dense, NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 12.0, XT_VOXEL_U8, &labels, NULL) == 0);
  xt_gmm *g = NULL;
  XT_REQUIRE(xt_gmm_create(3, &g, NULL) == 0);
  for (int i = 0; i < 3; i++) {
    g->g[i].scale[0] = g->g[i].scale[1] = g->g[i].scale[2] = 5.0f;
    g->g[i].rho = 0.01f;
    g->g[i].label = i == 2 ? 70u : (uint32_t)XT_MAT_BONE;
  }
  g->has_labels = 1;
  XT_REQUIRE(xt_gmm_finish(g, "t", NULL) == 0);
  XT_REQUIRE(xt_model_from_gmm(g, "mix", &gm, NULL) == 0);

  /* the accessors answer for their own kind only */
  XT_CHECK(xt_model_volume(dense) && xt_model_volume(labels) && !xt_model_volume(gm));
  XT_CHECK(xt_model_gmm(gm) == g && !xt_model_gmm(dense) && !xt_model_nvdb(gm) && !xt_model_nvdb(labels));

  /* the keys each caller places: the server's report, the sidecar's two parts, its added models */
  keys_out k;
  XT_CHECK_MSG(!strcmp(view_keys(dense, XT_MODEL_VIEW_REPORT, &k), "dim,spacing_mm,bytes,voxels,active_fraction"), "%s",
               k.keys);
  XT_CHECK_MSG(!strcmp(view_keys(dense, XT_MODEL_VIEW_SIDECAR, &k),
                       "dims,spacing_mm,voxel_type,index_to_model,index_to_model_note"), "%s", k.keys);
  XT_CHECK(!strcmp(view_keys(dense, XT_MODEL_VIEW_SIDECAR_TABLE, &k), ""));
  XT_CHECK(!strcmp(view_keys(labels, XT_MODEL_VIEW_SIDECAR_TABLE, &k), "materials"));
  XT_CHECK(!strcmp(view_keys(labels, XT_MODEL_VIEW_BRIEF, &k), ""));
  XT_CHECK_MSG(!strcmp(view_keys(gm, XT_MODEL_VIEW_REPORT, &k), "gaussians,bytes,cutoff_sigma"), "%s", k.keys);
  XT_CHECK(!strcmp(view_keys(gm, XT_MODEL_VIEW_SIDECAR, &k), "gaussians,cutoff_sigma"));
  XT_CHECK(!strcmp(view_keys(gm, XT_MODEL_VIEW_SIDECAR_TABLE, &k), ""));
  XT_CHECK(!strcmp(view_keys(gm, XT_MODEL_VIEW_BRIEF, &k), "gaussians"));

  /* device bytes: the voxels' linear copy; mixtures 296 bytes a Gaussian (48 record + 248 scratch) */
  uint64_t b = 1;
  XT_CHECK(xt_model_device_bytes(dense, &b) == 0 && b == xt_model_volume(dense)->nbytes);
  XT_CHECK(xt_model_device_bytes(gm, &b) == 0 && b == (uint64_t)xt_model_gmm(gm)->count * 296u);

  /* what the material channels read */
  xt_model_matter mm;
  xt_msg msg;
  XT_CHECK(xt_model_matter_of(dense, &mm, &msg) == 0 && mm.kind == XT_MATTER_MU_CLASSES &&
           mm.energy_kev == XT_DEFAULT_ENERGY_KEV);
  XT_CHECK(xt_model_matter_of(labels, &mm, &msg) == 0 && mm.kind == XT_MATTER_LABELS &&
           mm.table == xt_model_volume(labels)->materials);
  XT_CHECK(xt_model_matter_of(gm, &mm, &msg) == 0 && mm.kind == XT_MATTER_USED_LABELS);
  XT_CHECK(mm.used[0] == (uint64_t)1 << XT_MAT_BONE && mm.used[1] == (uint64_t)1 << (70 - 64) && !mm.used[2]);
  g->has_labels = 0;
  XT_CHECK(xt_model_matter_of(gm, &mm, &msg) == 0 && mm.kind == XT_MATTER_SOFT && !mm.used[0]);

  /* bounds through the table; a payload that cannot say is an error naming the model and kind */
  xt_vec3 lo, hi;
  XT_CHECK(xt_model_bounds(gm, &lo, &hi, &msg) == 0 && lo.x < hi.x);
  xt_model bare;
  memset(&bare, 0, sizeof bare);
  snprintf(bare.name, sizeof bare.name, "bare");
  bare.kind = XT_MODEL_GMM;
  XT_CHECK(xt_model_bounds(&bare, &lo, &hi, &msg) == XT_EINVAL && strstr(msg.text, "bare") && strstr(msg.text, "gmm"));
  XT_CHECK(!strcmp(view_keys(&bare, XT_MODEL_VIEW_REPORT, &k), ""));
  XT_CHECK(xt_model_device_bytes(&bare, &b) == XT_EUNSUPPORTED);
  xt_model_free(dense);
  xt_model_free(labels);
  xt_model_free(gm);
}

XT_TEST_MAIN(XT_ENTRY(material_table_matches_nist_values) XT_ENTRY(volume_create_rejects_absurd_sizes)
                 XT_ENTRY(volume_validate_finds_nan_and_bad_labels) XT_ENTRY(volume_bounds_cover_voxel_cubes)
                     XT_ENTRY(ellipsoid_chords_closed_form) XT_ENTRY(voxelised_sphere_has_its_volume)
                         XT_ENTRY(head_phantom_has_its_materials) XT_ENTRY(kind_registry_is_complete)
                             XT_ENTRY(kinds_describe_and_answer_through_the_table))
