/* Motion (issue 26, point 3) on the CPU reference, against oracles built here:
 *   - a model moved by a translation T renders as the unmoved model under a pose whose table is
 *     shifted by T (world = patient + table: docs/geometry.md), for every model kind;
 *   - a uniform box rotated and moved renders the closed-form chord lengths of the moved box
 *     (the slab method on the ray taken into the box's frame by an inverse written out here);
 *   - every kind under a general map (rotation, the heart's scaling) equals the same model added
 *     with its placement already moved;
 *   - the phases and maps of xt_motion.h against their formulas at virtual times;
 *   - motion blur: a box moving linearly during the pulse; the blurred frame is -ln of the mean of
 *     exp(-mu chord) over the samples' times, chords in closed form. */
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_motion.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_motion.h"

#define PI 3.14159265358979323846

/* ---- helpers -------------------------------------------------------------------------------- */

/* Exact length of segment a->b inside the axis-aligned box [lo, hi] (slab method). */
static double box_chord(const double lo[3], const double hi[3], const double a[3], const double b[3]) {
  double t0 = 0, t1 = 1;
  for (int k = 0; k < 3; k++) {
    double D = b[k] - a[k];
    if (D == 0) {
      if (a[k] < lo[k] || a[k] > hi[k]) return 0;
      continue;
    }
    double u = (lo[k] - a[k]) / D, w = (hi[k] - a[k]) / D;
    if (u > w) {
      double s = u;
      u = w;
      w = s;
    }
    if (u > t0) t0 = u;
    if (w < t1) t1 = w;
  }
  double L = sqrt((b[0] - a[0]) * (b[0] - a[0]) + (b[1] - a[1]) * (b[1] - a[1]) + (b[2] - a[2]) * (b[2] - a[2]));
  return t1 > t0 ? (t1 - t0) * L : 0;
}

static xt_geometry geometry(double primary, double secondary, xt_vec3 table) {
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  xt_pose p = xt_pose_default(md);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.table_mm = table;
  xt_geometry g;
  xt_msg msg;
  if (xt_geom_compute(&p, md, &g, &msg)) fprintf(stderr, "%s\n", msg.text);
  return g;
}

static xt_proj *cpu_proj(void) {
  xt_proj_options o = {XT_BACKEND_CPU, 2, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  if (xt_proj_create(&o, &p, &msg)) fprintf(stderr, "%s\n", msg.text);
  return p;
}

static float *render(xt_proj *p, const xt_geometry *g) {
  float *out = malloc(sizeof *out * (size_t)g->mode.rows * g->mode.cols);
  xt_msg msg;
  if (out && xt_proj_render(p, g, out, &msg)) {
    fprintf(stderr, "render: %s\n", msg.text);
    free(out);
    return NULL;
  }
  return out;
}

static double maxabs(const float *a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}
static double maxdiff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* A translation of the model equals the same shift of the table, for every kind. */
XT_TEST(translation_equals_table_shift_every_kind) {
  const xt_vec3 d = xt_v3(17.5, -9.25, 31.0);
  for (int k = 0; k < K_N; k++) {
    xt_model *m = make_kind(k);
    if (!m) {
      fprintf(stderr, "  %s: not built here, skipped\n", kind_names[k]);
      XT_CHECK(k == K_NVDB);
      continue;
    }
    xt_proj *p = cpu_proj();
    XT_REQUIRE(p && xt_proj_add_model(p, m, NULL) == 0);
    const xt_geometry g0 = geometry(30, 15, xt_v3(0, 0, 0)), g1 = geometry(30, 15, d);
    const size_t n = (size_t)g0.mode.rows * g0.mode.cols;
    float *still = render(p, &g0);
    const xt_affine T = translation(d.x, d.y, d.z);
    XT_REQUIRE(xt_proj_set_transform(p, m, &T, NULL) == 0);
    float *moved = render(p, &g0);
    XT_REQUIRE(xt_proj_set_transform(p, m, &(xt_affine){{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {0, 0, 0}}, NULL) == 0);
    float *shifted = render(p, &g1);
    float *back = render(p, &g0);
    XT_REQUIRE(still && moved && shifted && back);
    const double top = maxabs(still, n);
    XT_CHECK_MSG(top > (k == K_INSTR ? 1e-3 : 0.1), "%s: nothing in view (%g)", kind_names[k], top);
    XT_CHECK_MSG(maxdiff(moved, shifted, n) <= 1e-5 * top + 1e-6, "%s: moved vs table shift %g (of %g)", kind_names[k],
                 maxdiff(moved, shifted, n), top);
    XT_CHECK_MSG(maxdiff(moved, still, n) > 0.05 * top, "%s: the move changed nothing", kind_names[k]);
    XT_CHECK_MSG(maxdiff(back, still, n) == 0, "%s: identity is not the model as added", kind_names[k]);
    free(still), free(moved), free(shifted), free(back);
    xt_proj_destroy(p);
    xt_model_free(m);
  }
}

/* R = Rz(c) Ry(b) Rx(a), written out. */
static void rot_xyz(double a, double b, double c, double R[3][3]) {
  const double ca = cos(a), sa = sin(a), cb = cos(b), sb = sin(b), cc = cos(c), sc = sin(c);
  const double Rx[3][3] = {{1, 0, 0}, {0, ca, -sa}, {0, sa, ca}};
  const double Ry[3][3] = {{cb, 0, sb}, {0, 1, 0}, {-sb, 0, cb}};
  const double Rz[3][3] = {{cc, -sc, 0}, {sc, cc, 0}, {0, 0, 1}};
  double Y[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      Y[i][j] = 0;
      for (int k = 0; k < 3; k++) Y[i][j] += Ry[i][k] * Rx[k][j];
    }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      R[i][j] = 0;
      for (int k = 0; k < 3; k++) R[i][j] += Rz[i][k] * Y[k][j];
    }
}

/* A uniform box, rotated about a centre and moved through xt_rigid (the API's form), against its
 * closed-form chords: a world point x maps to the box frame by R^T (x - table - c - t) + c - P. */
XT_TEST(rotated_box_closed_form) {
  const int nx = 20, ny = 30, nz = 40;
  const double h = 1.0, mu = 0.02;
  xt_model *m = cube_model(nx, ny, nz, h, (float)mu, 0, 0);
  XT_REQUIRE(m);
  m->placement = translation(3.0, -4.0, 5.0);
  xt_proj *p = cpu_proj();
  XT_REQUIRE(p && xt_proj_add_model(p, m, NULL) == 0);
  const xt_rigid r = {{20.0, -35.0, 50.0}, {5.0, -3.0, 8.0}, {10.0, -20.0, 15.0}};
  XT_REQUIRE(xt_rigid_check(&r, NULL) == 0);
  const xt_affine T = xt_rigid_affine(&r);
  XT_REQUIRE(xt_proj_set_transform(p, m, &T, NULL) == 0);
  const xt_vec3 table = xt_v3(4.0, 6.0, -2.0);
  const xt_geometry g = geometry(-40, 20, table);
  float *out = render(p, &g);
  XT_REQUIRE(out);
  double R[3][3];
  rot_xyz(r.rot_deg[0] * PI / 180, r.rot_deg[1] * PI / 180, r.rot_deg[2] * PI / 180, R);
  const double lo[3] = {-0.5 * nx * h, -0.5 * ny * h, -0.5 * nz * h}, hi[3] = {0.5 * nx * h, 0.5 * ny * h, 0.5 * nz * h};
  const double P[3] = {3.0, -4.0, 5.0}, tb[3] = {table.x, table.y, table.z};
  double worst = 0, top = 0;
  int hit = 0;
  for (int row = 0; row < g.mode.rows; row++)
    for (int col = 0; col < g.mode.cols; col++) {
      const xt_vec3 px = xt_geom_pixel_pos(&g, col, row);
      const double w[2][3] = {{g.source.x, g.source.y, g.source.z}, {px.x, px.y, px.z}};
      double b[2][3];
      for (int e = 0; e < 2; e++) {
        double y[3];
        for (int a = 0; a < 3; a++) y[a] = w[e][a] - tb[a] - r.centre_mm[a] - r.trans_mm[a];
        for (int a = 0; a < 3; a++) b[e][a] = R[0][a] * y[0] + R[1][a] * y[1] + R[2][a] * y[2] + r.centre_mm[a] - P[a];
      }
      const double exact = mu * box_chord(lo, hi, b[0], b[1]);
      hit += exact > 0;
      top = fmax(top, exact);
      worst = fmax(worst, fabs(out[(size_t)row * g.mode.cols + col] - exact));
    }
  XT_CHECK_MSG(hit > 500, "%d pixels see the box", hit);
  XT_CHECK_MSG(worst <= 2e-6 * top + 1e-6, "worst %g of %g", worst, top);
  free(out);
  xt_proj_destroy(p);
  xt_model_free(m);
}

/* Every kind under a rotation (and, but for instruments, the heart's scaling) equals the model added
 * with its placement already moved; a model not added is refused; a singular map changes nothing. */
XT_TEST(every_kind_equals_premoved_placement) {
  const xt_rigid r = {{10.0, 25.0, -40.0}, {2.0, 1.0, -3.0}, {-6.0, 4.0, 9.0}};
  xt_motion mo;
  xt_motion_defaults(&mo);
  mo.cardiac.on = mo.resp.on = 1;
  mo.cardiac.amplitude = 0.2;
  mo.cardiac.centre_mm[0] = 4.0;
  xt_motion_state st;
  xt_motion_eval(&mo, mo.t0_ns + 400000000ull, &st);
  XT_CHECK(st.cardiac_scale < 0.9);
  for (int k = 0; k < K_N; k++) {
    xt_model *m = make_kind(k);
    if (!m) continue;
    const xt_affine T = xt_motion_transform(&mo, &st, &r, k != K_INSTR, 1);
    xt_model *pre = make_kind(k); /* the same model, its placement moved beforehand */
    XT_REQUIRE(pre);
    pre->placement = xt_aff_compose(&T, &m->placement);
    xt_proj *p = cpu_proj(), *q = cpu_proj();
    XT_REQUIRE(p && q && xt_proj_add_model(p, m, NULL) == 0 && xt_proj_add_model(q, pre, NULL) == 0);
    XT_REQUIRE(xt_proj_set_transform(p, m, &T, NULL) == 0);
    const xt_geometry g = geometry(60, -25, xt_v3(1, 2, 3));
    const size_t n = (size_t)g.mode.rows * g.mode.cols;
    float *a = render(p, &g), *b = render(q, &g);
    XT_REQUIRE(a && b);
    const double top = maxabs(b, n);
    XT_CHECK_MSG(top > (k == K_INSTR ? 1e-3 : 0.1), "%s: nothing in view (%g)", kind_names[k], top);
    XT_CHECK_MSG(maxdiff(a, b, n) <= 1e-6 * top, "%s: %g of %g", kind_names[k], maxdiff(a, b, n), top);
    xt_msg msg;
    XT_CHECK(xt_proj_set_transform(q, m, &T, &msg) == XT_ENOTFOUND);
    xt_affine S = T;
    S.m[0][0] = S.m[1][0] = S.m[2][0] = 0; /* singular */
    XT_CHECK(xt_proj_set_transform(p, m, &S, &msg) == XT_EINVAL);
    S = T;
    S.t[1] = NAN;
    XT_CHECK(xt_proj_set_transform(p, m, &S, &msg) == XT_EINVAL);
    float *c = render(p, &g);
    XT_CHECK(c && maxdiff(a, c, n) == 0);
    free(a), free(b), free(c);
    xt_proj_destroy(p);
    xt_proj_destroy(q);
    xt_model_free(m);
    xt_model_free(pre);
  }
}

/* Phases and maps at virtual times (no clock is read). */
XT_TEST(phases_and_maps) {
  xt_motion mo;
  xt_motion_defaults(&mo);
  XT_CHECK(mo.cardiac.bpm == 70 && mo.resp.period_s == 4 && mo.resp.amplitude_mm == 10 && mo.resp.axis[2] == -1);
  XT_CHECK(xt_motion_check(&mo, NULL) == 0);
  mo.t0_ns = 5000000000ull;
  mo.cardiac.on = mo.resp.on = 1;
  mo.cardiac.bpm = 60; /* a 1 s beat */
  mo.cardiac.centre_mm[0] = 10, mo.cardiac.centre_mm[1] = -20, mo.cardiac.centre_mm[2] = 30;
  xt_motion_state st;
  const struct { double t, cp, rp; } cases[] = {{0, 0, 0}, {0.25, 0.25, 0.0625}, {0.5, 0.5, 0.125}, {1.0, 0, 0.25},
                                                {2.75, 0.75, 0.6875}, {4.0, 0, 0}, {-0.25, 0.75, 0.9375}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    xt_motion_eval(&mo, mo.t0_ns + (uint64_t)(int64_t)llround(cases[i].t * 1e9), &st);
    XT_CHECK_NEAR(st.t_s, cases[i].t, 1e-12);
    XT_CHECK_NEAR(st.cardiac_phase, cases[i].cp, 1e-12);
    XT_CHECK_NEAR(st.resp_phase, cases[i].rp, 1e-12);
    XT_CHECK_NEAR(st.cardiac_scale, 1 - 0.1 * sin(PI * cases[i].cp) * sin(PI * cases[i].cp), 1e-12);
    XT_CHECK_NEAR(st.resp_mm, 10 * sin(PI * cases[i].rp) * sin(PI * cases[i].rp), 1e-12);
  }
  /* 70 bpm: a quarter beat after t0 */
  mo.cardiac.bpm = 70;
  xt_motion_eval(&mo, mo.t0_ns + 214285714ull, &st);
  XT_CHECK_NEAR(st.cardiac_phase, 0.25, 1e-8);
  /* end-systole and end-inspiration together (40 bpm: a 1.5 s beat; a 4.5 s breath; t = 2.25 s): a
   * point 10 mm right of the centre lands at c + 0.9 * 10 (L) and 10 mm caudal, then the user's map */
  mo.cardiac.bpm = 40;
  mo.resp.period_s = 4.5;
  xt_motion_eval(&mo, mo.t0_ns + 2250000000ull, &st);
  XT_CHECK_NEAR(st.cardiac_scale, 0.9, 1e-12);
  XT_CHECK_NEAR(st.resp_mm, 10.0, 1e-12);
  const xt_rigid u = {{0, 0, 90}, {0, 0, 0}, {1, 2, 3}};
  xt_affine T = xt_motion_transform(&mo, &st, &u, 1, 1);
  xt_vec3 y = xt_aff_apply(&T, xt_v3(20, -20, 30));
  /* before the user's map: (10 + 9, -20, 30 - 10) = (19, -20, 20); Rz(90): (x, y) -> (-y, x) */
  XT_CHECK_NEAR(y.x, 20 + 1, 1e-9);
  XT_CHECK_NEAR(y.y, 19 + 2, 1e-9);
  XT_CHECK_NEAR(y.z, 20 + 3, 1e-9);
  T = xt_motion_transform(&mo, &st, NULL, 0, 1); /* breathing only */
  y = xt_aff_apply(&T, xt_v3(20, -20, 30));
  XT_CHECK_NEAR(y.x, 20, 1e-12);
  XT_CHECK_NEAR(y.z, 20, 1e-12);
  /* limits */
  xt_msg msg;
  mo.cardiac.bpm = 300;
  XT_CHECK(xt_motion_check(&mo, &msg) == XT_EINVAL && strstr(msg.text, "bpm"));
  mo.cardiac.bpm = 70;
  mo.resp.axis[0] = 1;
  XT_CHECK(xt_motion_check(&mo, &msg) == XT_EINVAL && strstr(msg.text, "axis"));
  xt_rigid bad = {{0, 200, 0}, {0, 0, 0}, {0, 0, 0}};
  XT_CHECK(xt_rigid_check(&bad, &msg) == XT_EINVAL && strstr(msg.text, "rotation_deg[1]"));
  bad = (xt_rigid){{0, 0, 0}, {0, 0, 0}, {0, 0, 2000}};
  XT_CHECK(xt_rigid_check(&bad, &msg) == XT_EINVAL && strstr(msg.text, "translation_mm[2]"));
}

static int lineint_buf(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  f->lineint.data = ctx;
  return 0;
}

/* Motion blur: a uniform box moves 12 mm along L during the pulse; the frame is -ln of the mean of
 * exp(-mu chord(t_k)) over the N sample times t_k = (k + 1/2)/N of the pulse (chords in closed form);
 * and with N large it approaches the pulse's continuous average (integrated here on a fine grid). */
XT_TEST(blur_moving_box) {
  const int nx = 16, ny = 16, nz = 16;
  const double h = 2.0, mu = 0.03, travel = 12.0;
  xt_model *m = cube_model(nx, ny, nz, h, (float)mu, 0, 0);
  XT_REQUIRE(m);
  xt_proj *p = cpu_proj();
  XT_REQUIRE(p);
  xt_acq_renderer r;
  xt_acq_renderer_init(&r, p, 2);
  XT_REQUIRE(xt_acq_renderer_add_model(&r, m, NULL) == 0);
  const xt_geometry g = geometry(0, 0, xt_v3(0, 0, 0)); /* AP: L is across the image */
  const size_t n = (size_t)g.mode.rows * g.mode.cols;
  float *out = malloc(n * sizeof *out), *still = malloc(n * sizeof *still);
  XT_REQUIRE(out && still);
  const double lo[3] = {-16, -16, -16}, hi[3] = {16, 16, 16};
  for (int N = 1; N <= 64; N *= 8) {
    xt_acq_xform *x = calloc((size_t)N, sizeof *x);
    XT_REQUIRE(x);
    for (int k = 0; k < N; k++) {
      x[k].model = m;
      x[k].T = translation(travel * ((k + 0.5) / N - 0.5), 0, 0);
    }
    xt_acq_request q;
    memset(&q, 0, sizeof q);
    q.geom = &g;
    q.want = XT_ACQ_WANT_LINEINT;
    q.buffers = lineint_buf;
    q.ctx = out;
    q.xforms = x;
    q.nxforms = 1;
    q.blur_samples = N;
    xt_acq_frame f;
    xt_msg msg;
    XT_REQUIRE(xt_acq_expose(NULL, &r, &q, &f, &msg) == 0);
    double worst = 0, worst_cont = 0, top = 0;
    for (int row = 0; row < g.mode.rows; row++)
      for (int col = 0; col < g.mode.cols; col++) {
        const xt_vec3 px = xt_geom_pixel_pos(&g, col, row);
        double a[3] = {g.source.x, g.source.y, g.source.z}, b[3] = {px.x, px.y, px.z};
        double sum = 0, cont = 0;
        for (int k = 0; k < N; k++) {
          const double dx = travel * ((k + 0.5) / N - 0.5);
          double a2[3] = {a[0] - dx, a[1], a[2]}, b2[3] = {b[0] - dx, b[1], b[2]};
          sum += exp(-mu * box_chord(lo, hi, a2, b2));
        }
        const int M = 2000;
        for (int k = 0; k < M; k++) {
          const double dx = travel * ((k + 0.5) / M - 0.5);
          double a2[3] = {a[0] - dx, a[1], a[2]}, b2[3] = {b[0] - dx, b[1], b[2]};
          cont += exp(-mu * box_chord(lo, hi, a2, b2));
        }
        const double want = -log(sum / N), wcont = -log(cont / M), got = out[(size_t)row * g.mode.cols + col];
        top = fmax(top, want);
        worst = fmax(worst, fabs(got - want));
        worst_cont = fmax(worst_cont, fabs(got - wcont));
      }
    XT_CHECK_MSG(worst <= 1e-5 * top, "N %d: worst %g of %g", N, worst, top);
    if (N == 64) XT_CHECK_MSG(worst_cont <= 2e-3 * top, "N 64 vs the continuous average: %g of %g", worst_cont, top);
    if (N == 1) memcpy(still, out, n * sizeof *out);
    else XT_CHECK_MSG(maxdiff(still, out, n) > 0.05 * top, "N %d: no blur", N);
    free(x);
  }
  free(out);
  free(still);
  xt_acq_renderer_free(&r);
  xt_proj_destroy(p);
  xt_model_free(m);
}

XT_TEST_MAIN(XT_ENTRY(translation_equals_table_shift_every_kind) XT_ENTRY(rotated_box_closed_form)
                 XT_ENTRY(every_kind_equals_premoved_placement) XT_ENTRY(phases_and_maps) XT_ENTRY(blur_moving_box))
