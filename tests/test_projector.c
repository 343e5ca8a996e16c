/* The reference projector against independent oracles: exact chord lengths through boxes and
 * ellipsoids (closed form, computed here or by the phantom module, never by traversal), hand-made
 * rays along faces, edges and through corners, and the voxelisation error bound derived in
 * docs/projector.md:
 *
 *   |L_vox - L_exact| <= sum_e |mu_e| * (chord((1+t_e) E_e) - chord((1-t_e) E_e)),
 *   t_e = (sqrt(3)/2) h / (smallest semi-axis of E_e),
 *
 * for centre-sampled voxelisation with cubic voxels of side h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static double urand(double lo, double hi) { return lo + (hi - lo) * ((double)rand() / RAND_MAX); }

/* A model whose voxel boundaries sit at integer multiples of h from `corner` (its low corner). */
static xt_model *grid_model(int nx, int ny, int nz, double h, xt_vec3 corner, int type) {
  double sp[3] = {h, h, h};
  xt_volume *v;
  xt_model *m;
  if (xt_volume_create(nx, ny, nz, sp, type, &v, NULL)) return NULL;
  v->index_to_model.t[0] = corner.x + 0.5 * h;
  v->index_to_model.t[1] = corner.y + 0.5 * h;
  v->index_to_model.t[2] = corner.z + 0.5 * h;
  if (xt_model_from_volume(v, "grid", &m, NULL)) {
    xt_volume_free(v);
    return NULL;
  }
  return m;
}

static float *f32(xt_model *m) { return (float *)xt_model_volume(m)->data; }

static void fill_uniform(xt_model *m, float mu) {
  size_t n = xt_volume_voxels(xt_model_volume(m));
  for (size_t i = 0; i < n; i++) f32(m)[i] = mu;
}

/* Exact length of segment a->b inside the axis-aligned box [lo, hi] (slab method, closed form). */
static double box_chord(xt_vec3 lo, xt_vec3 hi, xt_vec3 a, xt_vec3 b) {
  double t0 = 0, t1 = 1;
  for (int k = 0; k < 3; k++) {
    double A = xt_v3_get(a, k), D = xt_v3_get(b, k) - A, L = xt_v3_get(lo, k), H = xt_v3_get(hi, k);
    if (D == 0) {
      if (A < L || A > H) return 0;
      continue;
    }
    double u = (L - A) / D, w = (H - A) / D;
    if (u > w) {
      double s = u;
      u = w;
      w = s;
    }
    if (u > t0) t0 = u;
    if (w < t1) t1 = w;
  }
  return t1 > t0 ? (t1 - t0) * xt_v3_norm(xt_v3_sub(b, a)) : 0;
}

static double seg(const xt_model *m, xt_vec3 a, xt_vec3 b) {
  const xt_model *ms[1] = {m};
  return xt_ref_segment(ms, 1, a, b);
}

static xt_geometry random_geometry(const char *mode) {
  const xt_detector_mode *md = xt_mode_find(mode);
  xt_pose p = xt_pose_default(md);
  p.primary_deg = urand(-180, 180);
  p.secondary_deg = urand(-60, 60);
  p.detector_rot_deg = urand(-180, 180);
  p.table_mm = xt_v3(urand(-10, 10), urand(-10, 10), urand(-10, 10));
  xt_geometry g;
  xt_msg msg;
  if (xt_geom_compute(&p, md, &g, &msg)) fprintf(stderr, "%s\n", msg.text);
  return g;
}

/* ---- single voxels and axis-aligned rays ---------------------------------------------------- */

XT_TEST(single_voxel_exact) {
  xt_model *m = grid_model(1, 1, 1, 2.0, xt_v3(-1, -1, -1), XT_VOXEL_F32);
  XT_REQUIRE(m);
  fill_uniform(m, 0.5f);
  srand(1);
  for (int n = 0; n < 2000; n++) {
    /* random segments from far outside through points inside or near the voxel */
    xt_vec3 c = xt_v3(urand(-1.2, 1.2), urand(-1.2, 1.2), urand(-1.2, 1.2));
    xt_vec3 d = xt_v3_unit(xt_v3(urand(-1, 1), urand(-1, 1), urand(-1, 1)));
    xt_vec3 a = xt_v3_sub(c, xt_v3_scale(d, 50)), b = xt_v3_add(c, xt_v3_scale(d, 50));
    double exact = 0.5 * box_chord(xt_v3(-1, -1, -1), xt_v3(1, 1, 1), a, b);
    XT_CHECK_NEAR(seg(m, a, b), exact, 1e-12);
  }
  xt_model_free(m);
}

XT_TEST(axis_aligned_rays_sum_rows_exactly) {
  const int n[3] = {17, 11, 9};
  const double h = 0.75;
  xt_model *m = grid_model(n[0], n[1], n[2], h, xt_v3(-6, -4, -3), XT_VOXEL_F32);
  XT_REQUIRE(m);
  srand(2);
  size_t nv = xt_volume_voxels(xt_model_volume(m));
  for (size_t i = 0; i < nv; i++) f32(m)[i] = (float)urand(0, 0.1);
  /* Along x through the centres of row (j, k): the integral is h * sum of that row. */
  for (int k = 0; k < n[2]; k++)
    for (int j = 0; j < n[1]; j++) {
      double y = -4 + (j + 0.5) * h, z = -3 + (k + 0.5) * h, sum = 0;
      for (int i = 0; i < n[0]; i++) sum += f32(m)[i + n[0] * (j + n[1] * k)];
      XT_CHECK_NEAR(seg(m, xt_v3(-100, y, z), xt_v3(100, y, z)), sum * h, 1e-12 * (1 + sum));
      XT_CHECK_NEAR(seg(m, xt_v3(100, y, z), xt_v3(-100, y, z)), sum * h, 1e-12 * (1 + sum));
    }
  /* Along z, and a segment that ends half-way inside voxel k = 4 of column (3, 2). */
  {
    int i = 3, j = 2;
    double x = -6 + (i + 0.5) * h, y = -4 + (j + 0.5) * h, sum = 0;
    for (int k = 0; k < 4; k++) sum += f32(m)[i + n[0] * (j + n[1] * k)];
    sum += 0.5 * f32(m)[i + n[0] * (j + n[1] * 4)];
    XT_CHECK_NEAR(seg(m, xt_v3(x, y, -50), xt_v3(x, y, -3 + 4.5 * h)), sum * h, 1e-12);
  }
  xt_model_free(m);
}

/* ---- misses, faces, edges, corners ----------------------------------------------------------- */

XT_TEST(rays_that_miss_are_zero) {
  xt_model *m = grid_model(8, 8, 8, 1.0, xt_v3(0, 0, 0), XT_VOXEL_F32);
  XT_REQUIRE(m);
  fill_uniform(m, 1.0f);
  XT_CHECK(seg(m, xt_v3(-10, 9, 4), xt_v3(20, 9, 4)) == 0);    /* passes beside */
  XT_CHECK(seg(m, xt_v3(-10, -1, -1), xt_v3(-5, 4, 4)) == 0);  /* stops short */
  XT_CHECK(seg(m, xt_v3(4, 4, 20), xt_v3(4, 4, 30)) == 0);     /* points away */
  XT_CHECK(seg(m, xt_v3(4, 4, 4), xt_v3(4, 4, 4)) == 0);       /* zero length */
  XT_CHECK(seg(m, xt_v3(-1, 8.5, -1), xt_v3(9, 8.5, 9)) == 0); /* diagonal outside */
  xt_model_free(m);
}

XT_TEST(faces_edges_follow_half_open_cells) {
  /* Cells are [i, i+1): a ray on a low face lies in the first layer, on a high face it misses. */
  xt_model *m = grid_model(4, 4, 4, 1.0, xt_v3(0, 0, 0), XT_VOXEL_F32);
  XT_REQUIRE(m);
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 4; i++) f32(m)[i + 4 * (j + 4 * k)] = (float)(1 + i + 10 * j + 100 * k);
  /* along x in the plane y = 0 (low face), z = 2.5: voxels (i, 0, 2) */
  XT_CHECK_NEAR(seg(m, xt_v3(-5, 0, 2.5), xt_v3(9, 0, 2.5)), (1 + 2 + 3 + 4) + 4 * (0 + 200), 1e-12);
  /* the plane y = 4 (high face): outside */
  XT_CHECK(seg(m, xt_v3(-5, 4, 2.5), xt_v3(9, 4, 2.5)) == 0);
  /* an interior plane y = 2: the + side, voxels (i, 2, 2) */
  XT_CHECK_NEAR(seg(m, xt_v3(-5, 2, 2.5), xt_v3(9, 2, 2.5)), 10 + 4 * (20 + 200), 1e-12);
  /* along the edge y = 0, z = 0: voxels (i, 0, 0) */
  XT_CHECK_NEAR(seg(m, xt_v3(-5, 0, 0), xt_v3(9, 0, 0)), 10, 1e-12);
  /* along an interior edge y = 3, z = 1: voxels (i, 3, 1) */
  XT_CHECK_NEAR(seg(m, xt_v3(9, 3, 1), xt_v3(-5, 3, 1)), 10 + 4 * (30 + 100), 1e-12);
  xt_model_free(m);
}

XT_TEST(diagonal_through_corners) {
  /* The main diagonal meets only the corners of voxels off the diagonal: the integral is
   * sqrt(3) h * sum of mu(i,i,i), whatever the neighbours hold. */
  const int n = 6;
  const double h = 1.5;
  xt_model *m = grid_model(n, n, n, h, xt_v3(0, 0, 0), XT_VOXEL_F32);
  XT_REQUIRE(m);
  srand(3);
  double diag = 0;
  for (int k = 0; k < n; k++)
    for (int j = 0; j < n; j++)
      for (int i = 0; i < n; i++) {
        float v = (float)urand(0.01, 1);
        f32(m)[i + n * (j + n * k)] = v;
        if (i == j && j == k) diag += v;
      }
  double expect = sqrt(3.0) * h * diag;
  XT_CHECK_NEAR(seg(m, xt_v3(-1, -1, -1), xt_v3(n * h + 1, n * h + 1, n * h + 1)), expect, 1e-12 * expect);
  XT_CHECK_NEAR(seg(m, xt_v3(n * h + 1, n * h + 1, n * h + 1), xt_v3(-1, -1, -1)), expect, 1e-12 * expect);
  xt_model_free(m);
}

/* ---- whole frames against closed forms --------------------------------------------------------- */

XT_TEST(uniform_box_frames_match_exact_chords) {
  /* A box whose faces are voxel faces is voxelised exactly: every pixel must equal mu * chord. */
  const double h = 1.25, mu = (float)0.02; /* the volume stores float32 */
  xt_vec3 lo = xt_v3(-25, -18.75, -12.5);
  xt_model *m = grid_model(40, 30, 20, h, lo, XT_VOXEL_F32);
  XT_REQUIRE(m);
  fill_uniform(m, (float)mu);
  xt_vec3 hi = xt_v3(lo.x + 40 * h, lo.y + 30 * h, lo.z + 20 * h);
  const xt_model *ms[1] = {m};
  srand(4);
  for (int f = 0; f < 4; f++) {
    xt_geometry g = random_geometry("fd20-128");
    size_t np = (size_t)g.mode.rows * g.mode.cols;
    double *out = malloc(np * sizeof *out);
    XT_REQUIRE(out);
    XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, out, 2, NULL) == 0);
    double worst = 0;
    int hits = 0;
    xt_vec3 t = g.pose.table_mm;
    xt_vec3 wlo = xt_v3_add(lo, t), whi = xt_v3_add(hi, t);
    for (int r = 0; r < g.mode.rows; r++)
      for (int c = 0; c < g.mode.cols; c++) {
        double exact = mu * box_chord(wlo, whi, g.source, xt_geom_pixel_pos(&g, c, r));
        hits += exact > 0;
        worst = fmax(worst, fabs(out[(size_t)r * g.mode.cols + c] - exact));
      }
    XT_CHECK_MSG(worst < 1e-12, "frame %d: worst error %g", f, worst);
    XT_CHECK(hits > 100);
    free(out);
  }
  xt_model_free(m);
}

XT_TEST(oblique_anisotropic_box_matches_exact_chords) {
  /* A uniform volume with anisotropic spacing, rotated direction cosines and a placement:
   * the oracle maps each segment into index space with R^T by hand and clips the index box. */
  const int n[3] = {20, 14, 9};
  const double sp[3] = {0.8, 1.3, 2.1}, mu = (float)0.03;
  xt_volume *v;
  xt_model *m;
  XT_REQUIRE(xt_volume_create(n[0], n[1], n[2], sp, XT_VOXEL_F32, &v, NULL) == 0);
  XT_REQUIRE(xt_model_from_volume(v, "oblique", &m, NULL) == 0);
  fill_uniform(m, (float)mu);
  xt_affine R = xt_aff_rot(2, 0.4), Rx = xt_aff_rot(0, -0.7);
  R = xt_aff_compose(&Rx, &R);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) v->index_to_model.m[i][j] = R.m[i][j] * sp[j];
  v->index_to_model.t[0] = -7;
  v->index_to_model.t[1] = 3;
  v->index_to_model.t[2] = -5;
  m->placement = xt_aff_rot(1, 0.3);
  m->placement.t[0] = 2;
  /* world = placement(index_to_model(idx)); invert by hand: both linear parts are rotations (x diag). */
  xt_affine w = xt_aff_compose(&m->placement, &v->index_to_model);
  double Q[3][3];
  xt_affine pr = m->placement;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double s = 0;
      for (int k = 0; k < 3; k++) s += pr.m[i][k] * R.m[k][j];
      Q[i][j] = s; /* world rotation of the index axes */
    }
  const xt_model *ms[1] = {m};
  srand(5);
  double worst = 0;
  int hits = 0;
  for (int r = 0; r < 4000; r++) {
    xt_vec3 a = xt_v3(urand(-60, 60), urand(-60, 60), urand(-60, 60));
    xt_vec3 b = xt_v3(urand(-60, 60), urand(-60, 60), urand(-60, 60));
    xt_vec3 ia, ib;
    double pa[3], pb[3];
    for (int j = 0; j < 3; j++) {
      pa[j] = pb[j] = 0;
      for (int i = 0; i < 3; i++) {
        pa[j] += Q[i][j] * (xt_v3_get(a, i) - w.t[i]);
        pb[j] += Q[i][j] * (xt_v3_get(b, i) - w.t[i]);
      }
      pa[j] /= sp[j];
      pb[j] /= sp[j];
    }
    ia = xt_v3(pa[0], pa[1], pa[2]);
    ib = xt_v3(pb[0], pb[1], pb[2]);
    /* fraction of the segment inside the index box, times its world length */
    double frac = box_chord(xt_v3(-0.5, -0.5, -0.5), xt_v3(n[0] - 0.5, n[1] - 0.5, n[2] - 0.5), ia, ib) /
                  xt_v3_norm(xt_v3_sub(ib, ia));
    double exact = mu * frac * xt_v3_norm(xt_v3_sub(b, a));
    hits += exact > 0;
    worst = fmax(worst, fabs(xt_ref_segment(ms, 1, a, b) - exact));
  }
  XT_CHECK_MSG(worst < 1e-12, "worst error %g", worst);
  XT_CHECK(hits > 200);
  xt_model_free(m);
}

/* Per-pixel voxelisation bound for a phantom voxelised at h. */
static double vox_bound(const xt_phantom *p, double h, xt_vec3 a, xt_vec3 b) {
  double bound = 0, delta = 0.5 * sqrt(3.0) * h;
  for (int i = 0; i < p->count; i++) {
    const xt_ellipsoid *e = &p->e[i];
    double amin = fmin(e->semi.x, fmin(e->semi.y, e->semi.z)), t = delta / amin;
    xt_ellipsoid outer = *e, inner = *e;
    outer.semi = xt_v3_scale(e->semi, 1 + t);
    double inner_chord = 0;
    if (t < 1) {
      inner.semi = xt_v3_scale(e->semi, 1 - t);
      inner_chord = xt_ellipsoid_chord(&inner, a, b);
    }
    bound += fabs(e->mu) * (xt_ellipsoid_chord(&outer, a, b) - inner_chord);
  }
  return bound;
}

static void check_phantom_frames(const xt_phantom *ph, const int dim[3], double h, int frames, double *mean_err) {
  double sp[3] = {h, h, h};
  xt_volume *v;
  xt_model *m;
  XT_REQUIRE(xt_phantom_voxelize(ph, dim, sp, XT_VOXEL_F32, NULL, &v, NULL) == 0);
  XT_REQUIRE(xt_model_from_volume(v, "phantom", &m, NULL) == 0);
  const xt_model *ms[1] = {m};
  double sum_err = 0;
  long n_err = 0;
  for (int f = 0; f < frames; f++) {
    xt_geometry g = random_geometry("fd20-128");
    g.pose.table_mm = xt_v3(0, 0, 0);
    xt_msg msg;
    XT_REQUIRE(xt_geom_compute(&g.pose, &g.mode, &g, &msg) == 0);
    size_t np = (size_t)g.mode.rows * g.mode.cols;
    double *out = malloc(np * sizeof *out);
    XT_REQUIRE(out);
    XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, out, 0, NULL) == 0);
    int violations = 0;
    double worst_ratio = 0;
    for (int r = 0; r < g.mode.rows; r++)
      for (int c = 0; c < g.mode.cols; c++) {
        xt_vec3 px = xt_geom_pixel_pos(&g, c, r);
        double exact = xt_phantom_line_integral(ph, g.source, px);
        double got = out[(size_t)r * g.mode.cols + c];
        /* float32 storage of mu: 1e-6 relative */
        double bound = vox_bound(ph, h, g.source, px) + 1e-6 * fabs(exact) + 1e-12;
        double err = fabs(got - exact);
        if (err > bound) violations++;
        if (bound > 0) worst_ratio = fmax(worst_ratio, err / bound);
        sum_err += err;
        n_err++;
      }
    XT_CHECK_MSG(violations == 0, "frame %d: %d pixels beyond the voxelisation bound", f, violations);
    XT_CHECK(worst_ratio <= 1.0);
    free(out);
  }
  *mean_err = sum_err / (double)n_err;
  xt_model_free(m);
}

XT_TEST(ellipsoids_within_voxelisation_bound) {
  /* Random rotated ellipsoids with positive and negative mu. */
  xt_phantom ph;
  memset(&ph, 0, sizeof ph);
  srand(6);
  ph.count = 6;
  for (int i = 0; i < ph.count; i++)
    ph.e[i] = xt_ellipsoid_make(xt_v3(urand(-20, 20), urand(-20, 20), urand(-20, 20)),
                                xt_v3(urand(5, 25), urand(5, 25), urand(5, 25)), urand(-90, 90), urand(-90, 90),
                                urand(-0.01, 0.03), 0);
  const int dim[3] = {96, 96, 96};
  double mean = NAN;
  check_phantom_frames(&ph, dim, 1.0, 3, &mean);
  fprintf(stderr, "  mean |error| %.3g\n", mean);
}

XT_TEST(shepp_logan_within_bound_and_converges) {
  xt_material_table mt;
  xt_phantom ph;
  XT_REQUIRE(xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, NULL) == 0);
  XT_REQUIRE(xt_phantom_shepp_logan(50.0, &mt, &ph, NULL) == 0); /* a 69 x 92 x 90 mm head */
  srand(7);
  const int d1[3] = {48, 64, 64}, d2[3] = {96, 128, 128};
  double e1 = NAN, e2 = NAN; /* stay NaN (and fail the check) if a frame check bails out */
  check_phantom_frames(&ph, d1, 2.0, 2, &e1);
  srand(7);
  check_phantom_frames(&ph, d2, 1.0, 2, &e2);
  /* The error is a boundary effect: halving h should roughly halve it (allow 0.35..0.75). */
  fprintf(stderr, "  mean |error| h=2: %.3g, h=1: %.3g, ratio %.2f\n", e1, e2, e2 / e1);
  XT_CHECK(e2 < 0.75 * e1 && e2 > 0.25 * e1);
}

/* ---- consistency ------------------------------------------------------------------------------ */

XT_TEST(labels_equal_dense_of_their_table) {
  int dim[3] = {40, 36, 30};
  xt_model *lab, *den;
  XT_REQUIRE(xt_phantom_head_model(dim, 4.0, XT_VOXEL_U8, &lab, NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 4.0, XT_VOXEL_F32, &den, NULL) == 0);
  /* Turn the dense copy into table[label] so both describe the same field. */
  size_t n = xt_volume_voxels(xt_model_volume(lab));
  const uint8_t *u = xt_model_volume(lab)->data;
  for (size_t i = 0; i < n; i++) f32(den)[i] = xt_model_volume(lab)->materials->mu[u[i]];
  const xt_model *a[1] = {lab}, *b[1] = {den};
  srand(8);
  xt_geometry g = random_geometry("fd20-128");
  size_t np = (size_t)g.mode.rows * g.mode.cols;
  double *o1 = malloc(np * sizeof *o1), *o2 = malloc(np * sizeof *o2);
  XT_REQUIRE(o1 && o2);
  XT_REQUIRE(xt_ref_render_f64(a, 1, &g, o1, 2, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(b, 1, &g, o2, 2, NULL) == 0);
  double worst = 0, maxv = 0;
  for (size_t i = 0; i < np; i++) {
    worst = fmax(worst, fabs(o1[i] - o2[i]));
    maxv = fmax(maxv, o1[i]);
  }
  XT_CHECK(worst == 0);
  XT_CHECK(maxv > 1); /* a head is several mean free paths thick */
  free(o1);
  free(o2);
  xt_model_free(lab);
  xt_model_free(den);
}

XT_TEST(threads_and_backend_api_agree) {
  int dim[3] = {64, 64, 64};
  xt_model *m;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_F32, &m, NULL) == 0);
  const xt_model *ms[1] = {m};
  srand(9);
  xt_geometry g = random_geometry("fd20-128");
  size_t np = (size_t)g.mode.rows * g.mode.cols;
  double *o1 = malloc(np * sizeof *o1), *o2 = malloc(np * sizeof *o2);
  float *o3 = malloc(np * sizeof *o3), *o4 = malloc(2 * np * sizeof *o4);
  XT_REQUIRE(o1 && o2 && o3 && o4);
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, o1, 1, NULL) == 0);
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g, o2, 3, NULL) == 0);
  XT_CHECK(memcmp(o1, o2, np * sizeof *o1) == 0);
  xt_proj_options opt = {.backend = XT_BACKEND_CPU, .threads = 2};
  xt_proj *p;
  xt_msg msg;
  XT_REQUIRE(xt_proj_create(&opt, &p, &msg) == 0);
  XT_REQUIRE(xt_proj_add_model(p, m, &msg) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, o3, &msg) == 0);
  int same = 1;
  for (size_t i = 0; i < np; i++) same &= o3[i] == (float)o1[i];
  XT_CHECK(same);
  xt_geometry gg[2] = {g, random_geometry("fd20-128")};
  XT_REQUIRE(xt_proj_render_batch(p, gg, 2, o4, &msg) == 0);
  XT_CHECK(memcmp(o4, o3, np * sizeof *o3) == 0);
  xt_proj_destroy(p);
  free(o1);
  free(o2);
  free(o3);
  free(o4);
  xt_model_free(m);
}

XT_TEST(table_translation_equals_moving_the_model) {
  int dim[3] = {48, 48, 48};
  xt_model *m;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_F32, &m, NULL) == 0);
  const xt_model *ms[1] = {m};
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  xt_pose p = xt_pose_default(md);
  p.primary_deg = 20;
  p.table_mm = xt_v3(12.5, -7, 30);
  xt_geometry g1, g2;
  XT_REQUIRE(xt_geom_compute(&p, md, &g1, NULL) == 0);
  p.table_mm = xt_v3(0, 0, 0);
  XT_REQUIRE(xt_geom_compute(&p, md, &g2, NULL) == 0);
  size_t np = (size_t)md->rows * md->cols;
  double *o1 = malloc(np * sizeof *o1), *o2 = malloc(np * sizeof *o2);
  XT_REQUIRE(o1 && o2);
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g1, o1, 2, NULL) == 0);
  m->placement.t[0] = 12.5;
  m->placement.t[1] = -7;
  m->placement.t[2] = 30;
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g2, o2, 2, NULL) == 0);
  double worst = 0;
  for (size_t i = 0; i < np; i++) worst = fmax(worst, fabs(o1[i] - o2[i]));
  XT_CHECK(worst < 1e-12);
  /* and the table really moved the shadow: the translated frame differs from the centred one */
  m->placement = xt_aff_identity();
  XT_REQUIRE(xt_ref_render_f64(ms, 1, &g2, o2, 2, NULL) == 0);
  double diff = 0;
  for (size_t i = 0; i < np; i++) diff = fmax(diff, fabs(o1[i] - o2[i]));
  XT_CHECK(diff > 0.1);
  free(o1);
  free(o2);
  xt_model_free(m);
}

XT_TEST(cuda_backend_reports_clearly_when_absent) {
  xt_msg msg;
  msg.text[0] = 0;
  int rc = xt_proj_available(XT_BACKEND_CUDA, &msg);
  if (rc) {
    XT_CHECK(rc == XT_ENODEV);
    XT_CHECK(strstr(msg.text, "cuda") != NULL || strstr(msg.text, "CUDA") != NULL);
  }
  xt_backend b;
  XT_CHECK(xt_backend_parse("cpu", &b) == 0 && b == XT_BACKEND_CPU);
  XT_CHECK(xt_backend_parse("gpu", &b) == XT_EINVAL);
}

XT_TEST(intensity_scaling) {
  float L[4] = {0.0f, 1.0f, 20.0f, -1.0f};
  uint16_t o[4];
  xt_intensity_u16(L, 4, o);
  XT_CHECK(o[0] == 65535);
  XT_CHECK(o[1] == (uint16_t)floor(65535.0 * exp(-1.0) + 0.5));
  XT_CHECK(o[2] == 0);
  XT_CHECK(o[3] == 65535);
}

XT_TEST_MAIN(XT_ENTRY(single_voxel_exact) XT_ENTRY(axis_aligned_rays_sum_rows_exactly) XT_ENTRY(rays_that_miss_are_zero)
                 XT_ENTRY(faces_edges_follow_half_open_cells) XT_ENTRY(diagonal_through_corners)
                     XT_ENTRY(uniform_box_frames_match_exact_chords) XT_ENTRY(oblique_anisotropic_box_matches_exact_chords)
                         XT_ENTRY(ellipsoids_within_voxelisation_bound) XT_ENTRY(shepp_logan_within_bound_and_converges)
                             XT_ENTRY(labels_equal_dense_of_their_table) XT_ENTRY(threads_and_backend_api_agree)
                                 XT_ENTRY(table_translation_equals_moving_the_model)
                                     XT_ENTRY(cuda_backend_reports_clearly_when_absent) XT_ENTRY(intensity_scaling))
