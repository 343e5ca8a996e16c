/* Material channels (projectors/xt_channels.c, the CPU reference and backend): areal densities
 * against closed-form chords through boxes, the DeepDRR HU classes of dense volumes, and the
 * identity mono line integral = sum_m (mu/rho)_m A_m at the tables' energy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_channels.h"
#include "xt_gmm.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"

/* Exact length (mm) of segment a->b inside the axis-aligned box [lo, hi]^3 (slab method). */
static double box_chord(xt_vec3 a, xt_vec3 b, double lo, double hi) {
  double t0 = 0, t1 = 1;
  const double pa[3] = {a.x, a.y, a.z}, pb[3] = {b.x, b.y, b.z};
  for (int k = 0; k < 3; k++) {
    const double d = pb[k] - pa[k];
    if (d == 0) {
      if (pa[k] < lo || pa[k] > hi) return 0;
      continue;
    }
    double u0 = (lo - pa[k]) / d, u1 = (hi - pa[k]) / d;
    if (u0 > u1) {
      double t = u0;
      u0 = u1;
      u1 = t;
    }
    t0 = fmax(t0, u0);
    t1 = fmin(t1, u1);
  }
  return t1 > t0 ? (t1 - t0) * xt_v3_norm(xt_v3_sub(b, a)) : 0;
}

/* A cube of n^3 voxels of `spacing` mm, every voxel `label` (default table at 60 keV). */
static xt_model *label_cube(int n, double spacing, int label) {
  const double sp[3] = {spacing, spacing, spacing};
  xt_volume *v = NULL;
  xt_model *m = NULL;
  if (xt_volume_create(n, n, n, sp, XT_VOXEL_U8, &v, NULL)) return NULL;
  v->materials = malloc(sizeof *v->materials);
  if (!v->materials || xt_materials_default(60, v->materials, NULL)) {
    xt_volume_free(v);
    return NULL;
  }
  memset(v->data, label, v->nbytes);
  if (xt_model_from_volume(v, "cube", &m, NULL)) xt_volume_free(v);
  return m;
}

XT_TEST(label_cube_channels_are_density_times_chord) {
  xt_model *m = label_cube(5, 10.0, XT_MAT_IODINE); /* 50 mm of iodine contrast */
  XT_REQUIRE(m);
  xt_chanset cs = {0};
  XT_REQUIRE(xt_chanset_add_model(&cs, m, NULL) == 0);
  XT_CHECK(cs.n == 8); /* the default table's 8 entries use 8 basis materials */
  const int cb = xt_chanset_find(&cs, XT_BASIS_BLOOD), ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  XT_REQUIRE(cb >= 0 && ci >= 0);
  xt_geometry g;
  xt_pose pose = xt_pose_default(xt_mode_find("fd20-128"));
  pose.primary_deg = 20;
  pose.secondary_deg = -10;
  XT_REQUIRE(xt_geom_compute(&pose, xt_mode_find("fd20-128"), &g, NULL) == 0);
  const size_t plane = (size_t)g.mode.rows * g.mode.cols;
  double *out = malloc(sizeof *out * plane * cs.n);
  XT_REQUIRE(out);
  const xt_model *ms[1] = {m};
  XT_REQUIRE(xt_ref_render_channels_f64(ms, 1, &cs, &g, out, 2, NULL) == 0);
  int hit = 0;
  for (int r = 0; r < g.mode.rows; r += 3)
    for (int c = 0; c < g.mode.cols; c += 3) {
      const double L = box_chord(g.source, xt_geom_pixel_pos(&g, c, r), -25, 25);
      const size_t k = (size_t)r * g.mode.cols + c;
      hit += L > 0;
      /* float weights (1.06 and 0.010 g/cm^3 rounded to float): 1e-7 relative */
      XT_CHECK_NEAR(out[plane * cb + k], 0.106 * L, 1e-7 * 0.106 * L + 1e-12);
      XT_CHECK_NEAR(out[plane * ci + k], 0.0010 * L, 1e-7 * 0.001 * L + 1e-12);
      for (int ch = 0; ch < cs.n; ch++)
        if (ch != cb && ch != ci) XT_CHECK(out[plane * ch + k] == 0);
    }
  XT_CHECK(hit > 50);
  free(out);
  xt_model_free(m);
}

/* Dense voxels are classed by HU (DeepDRR: air < -800 <= soft < 350 <= bone) and their channel is
 * mu x length / (mu/rho)_class at the volume's energy. */
XT_TEST(dense_voxels_are_classed_by_hu) {
  const double hu[] = {-950, -500, 0, 340, 360, 1200};
  const int cls[] = {XT_BASIS_AIR, XT_BASIS_SOFT, XT_BASIS_SOFT, XT_BASIS_SOFT, XT_BASIS_BONE, XT_BASIS_BONE};
  for (size_t i = 0; i < sizeof hu / sizeof hu[0]; i++) {
    const double sp[3] = {10, 10, 10}, e = 70;
    xt_volume *v = NULL;
    xt_model *m = NULL;
    XT_REQUIRE(xt_volume_create(5, 5, 5, sp, XT_VOXEL_F32, &v, NULL) == 0);
    v->energy_kev = e;
    double mr_soft = 0, mr_cls = 0;
    XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_SOFT, e, &mr_soft, NULL) == 0 &&
               xt_basis_mass_atten(cls[i], e, &mr_cls, NULL) == 0);
    const float mu = (float)(mr_soft * 0.1 * (1 + hu[i] / 1000));
    for (size_t k = 0; k < 125; k++) ((float *)v->data)[k] = mu;
    XT_REQUIRE(xt_model_from_volume(v, "dense", &m, NULL) == 0);
    xt_chanset cs = {0};
    XT_REQUIRE(xt_chanset_add_model(&cs, m, NULL) == 0);
    XT_CHECK(cs.n == 3 && cs.basis[0] == XT_BASIS_AIR && cs.basis[1] == XT_BASIS_SOFT && cs.basis[2] == XT_BASIS_BONE);
    xt_geometry g;
    XT_REQUIRE(xt_geom_compute(&(xt_pose){0, 0, 0, 810, 1195, {0, 0, 0}}, xt_mode_find("fd20-128"), &g, NULL) == 0);
    const xt_model *ms[1] = {m};
    const size_t plane = (size_t)g.mode.rows * g.mode.cols, k = (size_t)64 * g.mode.cols + 64;
    double *out = malloc(sizeof *out * plane * 3);
    XT_REQUIRE(out);
    XT_REQUIRE(xt_ref_render_channels_f64(ms, 1, &cs, &g, out, 1, NULL) == 0);
    const double L = box_chord(g.source, xt_geom_pixel_pos(&g, 64, 64), -25, 25);
    const int want = xt_chanset_find(&cs, cls[i]);
    for (int ch = 0; ch < 3; ch++) {
      const double expect = ch == want ? (double)mu * L / mr_cls : 0.0;
      XT_CHECK_MSG(fabs(out[plane * ch + k] - expect) <= 1e-6 * fabs(expect) + 1e-15, "HU %g channel %d: %g vs %g",
                   hu[i], ch, out[plane * ch + k], expect);
    }
    free(out);
    xt_model_free(m);
  }
}

/* Mono = sum_m (mu/rho)_m(E) A_m at the tables' energy, pixel by pixel, for label and dense heads
 * together in one scene (the channel set is their union), through the CPU backend (float). */
XT_TEST(channels_reproduce_the_mono_line_integral) {
  const int dim[3] = {64, 64, 64};
  xt_model *lab = NULL, *den = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &lab, NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_F32, &den, NULL) == 0);
  den->placement.t[0] = 40; /* overlapping, not coincident */
  xt_proj *p = NULL;
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  XT_REQUIRE(xt_proj_create(&po, &p, NULL) == 0);
  XT_REQUIRE(xt_proj_add_model(p, lab, NULL) == 0 && xt_proj_add_model(p, den, NULL) == 0);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(p, &cs, NULL) == 0);
  XT_CHECK(cs.n == 8);
  double mr[XT_MAX_CHANNELS];
  XT_REQUIRE(xt_chanset_mass_atten(&cs, XT_DEFAULT_ENERGY_KEV, mr, NULL) == 0);
  const xt_detector_mode *mode = xt_mode_find("fd20-128");
  const double angles[] = {0, 37, 90};
  for (int a = 0; a < 3; a++) {
    xt_geometry g;
    xt_pose pose = xt_pose_default(mode);
    pose.primary_deg = angles[a];
    pose.secondary_deg = a == 1 ? 12 : 0;
    XT_REQUIRE(xt_geom_compute(&pose, mode, &g, NULL) == 0);
    const size_t plane = (size_t)mode->rows * mode->cols;
    float *L = malloc(sizeof *L * plane), *A = malloc(sizeof *A * plane * cs.n);
    XT_REQUIRE(L && A);
    XT_REQUIRE(xt_proj_render(p, &g, L, NULL) == 0);
    XT_REQUIRE(xt_proj_render_channels(p, &g, A, NULL) == 0);
    double maxrel = 0, lmax = 0;
    for (size_t k = 0; k < plane; k++) {
      double s = 0;
      for (int c = 0; c < cs.n; c++) s += mr[c] * A[plane * c + k]; /* cm^2/g x g/cm^2 */
      lmax = fmax(lmax, L[k]);
      maxrel = fmax(maxrel, fabs(s - L[k]));
    }
    /* float planes and float table entries: a few 1e-7 of the largest line integral */
    XT_CHECK_MSG(maxrel <= 2e-6 * lmax, "angle %g: max |sum - mono| = %g of %g", angles[a], maxrel, lmax);
    XT_CHECK(lmax > 1);
    free(L);
    free(A);
  }
  xt_proj_destroy(p);
  xt_model_free(lab);
  xt_model_free(den);
}

XT_TEST(channel_set_limits_and_errors) {
  xt_chanset cs = {8, {XT_BASIS_WATER, XT_BASIS_ALUMINIUM, XT_BASIS_COPPER, XT_BASIS_TUNGSTEN, XT_BASIS_CSI,
                       XT_BASIS_IODINE, XT_BASIS_TITANIUM, XT_BASIS_BRAIN}};
  const int dim[3] = {8, 8, 8};
  xt_model *den = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 20.0, XT_VOXEL_F32, &den, NULL) == 0);
  xt_msg msg;
  XT_CHECK(xt_chanset_add_model(&cs, den, &msg) == XT_ETOOLARGE && strstr(msg.text, "head") && strstr(msg.text, "air"));
  XT_CHECK(cs.n == 8 && cs.basis[0] == XT_BASIS_WATER); /* unchanged on failure */
  char names[256];
  xt_chanset small = {2, {XT_BASIS_SOFT, XT_BASIS_BONE}};
  xt_chanset_names(&small, names, sizeof names);
  XT_CHECK(strcmp(names, "soft_tissue,bone") == 0);
  /* a label table entry that is not a default material has no composition */
  xt_model *lab = label_cube(2, 10, XT_MAT_SOFT);
  XT_REQUIRE(lab);
  snprintf(xt_model_volume(lab)->materials->name[3], XT_MATERIAL_NAME_MAX, "unobtainium");
  xt_chanset e = {0};
  XT_CHECK(xt_chanset_add_model(&e, lab, &msg) == XT_EUNSUPPORTED && strstr(msg.text, "unobtainium"));
  xt_model_free(lab);
  xt_model_free(den);
}

/* The fast CPU path (projectors/proj_cpu_fast.c: the CPU chain's projection) against the float64
 * reference on random poses of label and dense heads, alone and overlapping, with odd sizes (blocks
 * cut by the volume's faces) and a rotated, anisotropic placement; also rays grazing the volume
 * (the detector's centre on a face plane). Bars as the GPU's (docs/projector.md): relative L2 of the
 * whole frame < 1e-5 and max |fast - ref| <= 1e-4 of the frame's largest channel value. */
XT_TEST(fast_path_matches_the_reference_on_random_poses) {
  const int dim[3] = {61, 53, 70};
  xt_model *ms[2] = {NULL, NULL};
  XT_REQUIRE(xt_phantom_head_model(dim, 2.5, XT_VOXEL_U8, &ms[0], NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 2.5, XT_VOXEL_F32, &ms[1], NULL) == 0);
  ms[1]->placement.t[0] = 17.3; /* overlapping, not coincident */
  ms[1]->placement.t[2] = -9.1;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (int setup = 0; setup < 4; setup++) {
    /* 0: labels alone, 1: dense alone, 2: both, 3: labels rotated and stretched */
    const xt_model *use[2];
    int nm = 0;
    if (setup != 1) use[nm++] = ms[0];
    if (setup == 1 || setup == 2) use[nm++] = ms[1];
    if (setup == 3) {
      const double c = cos(0.4), s = sin(0.4);
      const xt_affine r = {{{c, -s, 0}, {s * 1.3, c * 1.3, 0}, {0, 0, 0.8}}, {5, -3, 11}};
      ms[0]->placement = r;
    }
    xt_proj *p = NULL;
    xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
    XT_REQUIRE(xt_proj_create(&po, &p, NULL) == 0);
    for (int i = 0; i < nm; i++) XT_REQUIRE(xt_proj_add_model(p, use[i], NULL) == 0);
    xt_chanset cs;
    XT_REQUIRE(xt_proj_channels(p, &cs, NULL) == 0);
    const xt_detector_mode *mode = xt_mode_find("fd20-128");
    for (int k = 0; k < 5; k++) {
      xt_pose pose = xt_pose_default(mode);
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      pose.primary_deg = (double)(rng >> 11) / 9007199254740992.0 * 360.0 - 180.0;
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      pose.secondary_deg = (double)(rng >> 11) / 9007199254740992.0 * 90.0 - 45.0;
      if (k == 4) pose.primary_deg = 90.0, pose.secondary_deg = 0.0; /* axis-aligned rays */
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      pose.table_mm.x = (double)(rng >> 11) / 9007199254740992.0 * 60.0 - 30.0;
      xt_geometry g;
      XT_REQUIRE(xt_geom_compute(&pose, mode, &g, NULL) == 0);
      const size_t plane = (size_t)mode->rows * mode->cols, n = plane * (size_t)cs.n;
      float *fast = malloc(sizeof *fast * n);
      double *ref = malloc(sizeof *ref * n);
      XT_REQUIRE(fast && ref);
      for (size_t i = 0; i < n; i++) fast[i] = NAN;
      XT_REQUIRE(xt_proj_render_channels_fast(p, &g, fast, NULL) == 0);
      XT_REQUIRE(xt_ref_render_channels_f64(use, nm, &cs, &g, ref, 0, NULL) == 0);
      double mx = 0, err = 0, d2 = 0, r2 = 0;
      for (size_t i = 0; i < n; i++) {
        const double d = fast[i] - ref[i];
        mx = fmax(mx, fabs(ref[i]));
        err = fast[i] == fast[i] ? fmax(err, fabs(d)) : INFINITY; /* NaN: unwritten */
        d2 += d * d;
        r2 += ref[i] * ref[i];
      }
      XT_CHECK(mx > 1);
      XT_CHECK_MSG(err <= 1e-4 * mx, "setup %d pose %d: max |fast - ref| %g of %g", setup, k, err, mx);
      XT_CHECK_MSG(sqrt(d2) <= 1e-5 * sqrt(r2), "setup %d pose %d: rel L2 %g", setup, k, sqrt(d2 / r2));
      free(fast);
      free(ref);
    }
    xt_proj_destroy(p);
  }
  xt_model_free(ms[0]);
  xt_model_free(ms[1]);
}

/* Line integral of the isotropic Gaussian rho exp(-|x-c|^2 / 2 s^2) along the whole line a -> b (the
 * segment holds the Gaussian's whole mass: its centre is hundreds of sigma from both ends), with
 * the model's cut-off: 0 when the line passes farther than k s from the centre. */
static double gaussian_line(xt_vec3 a, xt_vec3 b, xt_vec3 c, double s, double rho, double k) {
  const xt_vec3 w = xt_v3_scale(xt_v3_sub(b, a), 1.0 / xt_v3_norm(xt_v3_sub(b, a)));
  const xt_vec3 r = xt_v3_sub(c, a);
  const double t = xt_v3_dot(r, w);
  const xt_vec3 perp = xt_v3_sub(r, xt_v3_scale(w, t));
  const double d2 = xt_v3_dot(perp, perp) / (s * s);
  return d2 > k * k ? 0.0 : rho * s * sqrt(2 * XT_PI) * exp(-0.5 * d2);
}

/* Gaussians carry a material: with labels, label l's default composition, each part getting
 * density x tau / mu_l (tau the Gaussian's line integral, mu_l = sum of the parts' (mu/rho) rho at
 * 60 keV); without, soft tissue, tau / (mu/rho)_soft. Closed-form line integrals of isotropic
 * Gaussians, far apart so each pixel sees at most one. */
XT_TEST(gmm_channels_are_optical_depth_per_material) {
  const int labels[3] = {XT_MAT_BONE, XT_MAT_IODINE, XT_MAT_SOFT};
  const double cx[3] = {-70, 0, 70}, sig = 9, rho = 0.02, e = XT_DEFAULT_ENERGY_KEV;
  xt_material_table *t = malloc(sizeof *t);
  XT_REQUIRE(t && xt_materials_default(e, t, NULL) == 0);
  for (int lab = 0; lab < 2; lab++) {
    xt_gmm *gm = NULL;
    xt_model *m = NULL;
    XT_REQUIRE(xt_gmm_create(3, &gm, NULL) == 0);
    gm->has_labels = lab;
    for (int i = 0; i < 3; i++) {
      xt_gaussian *g = &gm->g[i];
      g->centre[0] = (float)cx[i];
      g->centre[1] = (float)(5 * i);
      for (int a = 0; a < 3; a++) g->scale[a] = (float)sig;
      g->quat[0] = 1;
      g->rho = (float)rho;
      g->label = lab ? (uint32_t)labels[i] : XT_GMM_NO_LABEL;
    }
    XT_REQUIRE(xt_gmm_finish(gm, "three", NULL) == 0 && xt_model_from_gmm(gm, "three", &m, NULL) == 0);
    xt_chanset cs = {0};
    XT_REQUIRE(xt_chanset_add_model(&cs, m, NULL) == 0);
    /* labels in ascending order: soft (2), bone (5), iodine contrast (6) = blood + iodine */
    XT_CHECK(lab ? cs.n == 4 && cs.basis[0] == XT_BASIS_SOFT && cs.basis[1] == XT_BASIS_BONE &&
                       cs.basis[2] == XT_BASIS_BLOOD && cs.basis[3] == XT_BASIS_IODINE
                 : cs.n == 1 && cs.basis[0] == XT_BASIS_SOFT);
    /* expected g/cm^2 per unit optical depth of each Gaussian in each channel, from the parts */
    double wexp[3][XT_MAX_CHANNELS] = {{0}};
    for (int i = 0; i < 3; i++) {
      xt_basis_part parts[2];
      int np = 0;
      if (!lab) {
        parts[0] = (xt_basis_part){XT_BASIS_SOFT, 1.0};
        np = 1;
      } else {
        XT_REQUIRE(xt_material_basis(t, labels[i], parts, &np, NULL) == 0 && np > 0);
      }
      double mr[2], mu = 0;
      for (int k = 0; k < np; k++) {
        XT_REQUIRE(xt_basis_mass_atten(parts[k].basis, e, &mr[k], NULL) == 0);
        mu += mr[k] * parts[k].density * 0.1;
      }
      for (int k = 0; k < np; k++) wexp[i][xt_chanset_find(&cs, parts[k].basis)] += parts[k].density * 0.1 / mu;
    }
    xt_geometry g;
    xt_pose pose = xt_pose_default(xt_mode_find("fd20-128"));
    pose.primary_deg = 10;
    pose.secondary_deg = 5;
    XT_REQUIRE(xt_geom_compute(&pose, xt_mode_find("fd20-128"), &g, NULL) == 0);
    const size_t plane = (size_t)g.mode.rows * g.mode.cols;
    double *out = malloc(sizeof *out * plane * cs.n);
    XT_REQUIRE(out);
    const xt_model *ms[1] = {m};
    XT_REQUIRE(xt_ref_render_channels_f64(ms, 1, &cs, &g, out, 2, NULL) == 0);
    int hit = 0;
    double worst = 0;
    for (int r = 0; r < g.mode.rows; r++)
      for (int c = 0; c < g.mode.cols; c++) {
        const size_t k = (size_t)r * g.mode.cols + c;
        double want[XT_MAX_CHANNELS] = {0};
        for (int i = 0; i < 3; i++) {
          const xt_vec3 ctr = {cx[i], 5.0 * i, 0};
          const double tau = gaussian_line(g.source, xt_geom_pixel_pos(&g, c, r), ctr, sig, rho, gm->cutoff);
          hit += tau > 0;
          for (int ch = 0; ch < cs.n; ch++) want[ch] += tau * wexp[i][ch];
        }
        for (int ch = 0; ch < cs.n; ch++) {
          /* float weights: 1e-7 relative; the closed form's whole line vs the segment: far below */
          const double err = fabs(out[plane * ch + k] - want[ch]);
          worst = fmax(worst, err / (want[ch] + 1e-12));
          XT_CHECK_MSG(err <= 3e-7 * want[ch] + 1e-13, "labels %d pixel (%d,%d) channel %d: %.9g vs %.9g", lab, c,
                       r, ch, out[plane * ch + k], want[ch]);
        }
      }
    XT_CHECK(hit > 100);
    free(out);
    xt_model_free(m);
  }
  free(t);
}

XT_TEST_MAIN(XT_ENTRY(label_cube_channels_are_density_times_chord) XT_ENTRY(dense_voxels_are_classed_by_hu)
                 XT_ENTRY(gmm_channels_are_optical_depth_per_material)
                 XT_ENTRY(channels_reproduce_the_mono_line_integral) XT_ENTRY(channel_set_limits_and_errors)
                     XT_ENTRY(fast_path_matches_the_reference_on_random_poses))
