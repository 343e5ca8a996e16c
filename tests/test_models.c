/* Models: the default material table against published NIST values, volume validation, and the
 * analytic phantoms' chords and voxelisation against closed forms. */
#include <stdint.h>
#include <string.h>

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
  const uint8_t *u = m->volume->data;
  for (size_t i = 0; i < xt_volume_voxels(m->volume); i++) seen[u[i]]++;
  XT_CHECK(seen[XT_MAT_AIR] && seen[XT_MAT_BONE] && seen[XT_MAT_BRAIN] && seen[XT_MAT_SOFT] && seen[XT_MAT_BLOOD]);
  XT_CHECK(m->kind == XT_MODEL_LABELS && m->volume->materials && m->volume->materials->count == XT_MAT_DEFAULT_COUNT);
  xt_msg msg;
  XT_CHECK(xt_volume_validate(m->volume, "head", &msg) == 0);
  /* the centre voxel is brain, a voxel on the x axis at 67 mm is skull (semi-axis 69 mm) */
  XT_CHECK(u[32 + 64 * (32 + 64 * 32)] == XT_MAT_BRAIN);
  xt_model_free(m);
}

XT_TEST_MAIN(XT_ENTRY(material_table_matches_nist_values) XT_ENTRY(volume_create_rejects_absurd_sizes)
                 XT_ENTRY(volume_validate_finds_nan_and_bad_labels) XT_ENTRY(volume_bounds_cover_voxel_cubes)
                     XT_ENTRY(ellipsoid_chords_closed_form) XT_ENTRY(voxelised_sphere_has_its_volume)
                         XT_ENTRY(head_phantom_has_its_materials))
