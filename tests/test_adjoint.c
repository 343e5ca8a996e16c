/* The voxel operator of xt_adjoint.h against its oracles: the forward equals the reference
 * projector (xt_ref_render_f64) bit for bit; the transpose passes the dot-product test
 * <A x, y> = <x, A^T y>; the geometry's derivative equals central differences of xt_geom_compute;
 * the pose gradient equals central differences of the forward. */
#include <stdlib.h>
#include <string.h>

#include "xt_adjoint.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_adjoint.h"

XT_TEST(forward_is_the_reference_projector) {
  xt_model *m = make_model();
  XT_REQUIRE(m);
  xt_adj_grid grid;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_adj_grid_of_model(m, &grid, &msg) == 0, "%s", msg.text);
  xt_geometry g[4];
  make_geoms(g, 4);
  const size_t px = (size_t)g[0].mode.rows * g[0].mode.cols;
  double *x = grid_of(m), *a = malloc(4 * px * sizeof *a), *ref = malloc(px * sizeof *ref);
  XT_REQUIRE(x && a && ref);
  XT_REQUIRE_MSG(xt_adj_forward(&grid, x, g, 4, a, 2, &msg) == 0, "%s", msg.text);
  const xt_model *ms[1] = {m};
  size_t hit = 0, differ = 0;
  for (int f = 0; f < 4; f++) {
    XT_REQUIRE(xt_ref_render_f64(ms, 1, &g[f], ref, 1, &msg) == 0);
    for (size_t k = 0; k < px; k++) {
      hit += ref[k] > 0;
      differ += memcmp(&ref[k], &a[f * px + k], sizeof(double)) != 0;
    }
  }
  XT_CHECK_MSG(differ == 0, "%zu of %zu line integrals differ from the reference", differ, 4 * px);
  XT_CHECK_MSG(hit > px, "only %zu rays hit the volume", hit); /* the test looks at something */
  free(x);
  free(a);
  free(ref);
  xt_model_free(m);
}

XT_TEST(dot_product_test) {
  xt_model *m = make_model();
  XT_REQUIRE(m);
  xt_adj_grid grid;
  XT_REQUIRE(xt_adj_grid_of_model(m, &grid, NULL) == 0);
  xt_geometry g[3];
  make_geoms(g, 3);
  const size_t px = 3 * (size_t)g[0].mode.rows * g[0].mode.cols, nv = 24 * 20 * 16;
  double *x = malloc(nv * sizeof *x), *y = malloc(px * sizeof *y), *ax = malloc(px * sizeof *ax);
  double *aty = malloc(nv * sizeof *aty), *aty1 = malloc(nv * sizeof *aty1);
  XT_REQUIRE(x && y && ax && aty && aty1);
  for (size_t i = 0; i < nv; i++) x[i] = urand() - 0.3;
  for (size_t i = 0; i < px; i++) y[i] = urand() - 0.5;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_adj_forward(&grid, x, g, 3, ax, 2, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(xt_adj_back(&grid, g, 3, y, aty, 2, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_adj_back(&grid, g, 3, y, aty1, 1, &msg) == 0);
  double lhs = 0, rhs = 0, scale = 0, nz = 0;
  for (size_t i = 0; i < px; i++) lhs += ax[i] * y[i], scale += fabs(ax[i] * y[i]);
  for (size_t i = 0; i < nv; i++) rhs += x[i] * aty[i], nz += aty[i] != 0;
  printf("  <Ax,y> = %.17g  <x,A^T y> = %.17g  rel %.3g (of sum |.| %.3g)\n", lhs, rhs, fabs(lhs - rhs) / scale, scale);
  XT_CHECK(fabs(lhs - rhs) <= 1e-6 * fabs(lhs));
  XT_CHECK(fabs(lhs - rhs) <= 1e-12 * scale);
  XT_CHECK(nz > nv / 4); /* most voxels are seen */
  /* the same sums with one thread up to rounding of the partial sums */
  double d = 0, mx = 0;
  for (size_t i = 0; i < nv; i++) d = fmax(d, fabs(aty[i] - aty1[i])), mx = fmax(mx, fabs(aty[i]));
  XT_CHECK(d <= 1e-12 * mx);
  free(x), free(y), free(ax), free(aty), free(aty1);
  xt_model_free(m);
}

/* Patient-frame positions of the source and of pixel (c, r) under pose p. */
static void positions(const xt_pose *p, const xt_detector_mode *mode, double c, double r, xt_vec3 *S, xt_vec3 *X) {
  xt_geometry g;
  xt_geom_compute(p, mode, &g, NULL);
  *S = xt_v3_sub(g.source, p->table_mm);
  *X = xt_v3_sub(xt_geom_pixel_pos(&g, c, r), p->table_mm);
}

XT_TEST(geometry_velocity_is_the_derivative) {
  xt_geometry g[3];
  make_geoms(g, 3);
  const double h[6] = {1e-4, 1e-4, 1e-4, 1e-3, 1e-3, 1e-3};
  for (int f = 0; f < 3; f++)
    for (int px = 0; px < 3; px++) {
      double c = px * 11.5, r = px * 8.25;
      xt_vec3 dS[6], dX[6];
      xt_adj_geom_velocity(&g[f], c, r, dS, dX);
      for (int k = 0; k < 6; k++) {
        xt_pose hi = g[f].pose, lo = g[f].pose;
        double *ph = k == 0 ? &hi.primary_deg : k == 1 ? &hi.secondary_deg : k == 2 ? &hi.detector_rot_deg
                   : k == 3 ? &hi.table_mm.x : k == 4 ? &hi.table_mm.y : &hi.table_mm.z;
        double *pl = (double *)((char *)&lo + ((char *)ph - (char *)&hi));
        *ph += h[k];
        *pl -= h[k];
        xt_vec3 Sh, Xh, Sl, Xl;
        positions(&hi, &g[f].mode, c, r, &Sh, &Xh);
        positions(&lo, &g[f].mode, c, r, &Sl, &Xl);
        xt_vec3 fS = xt_v3_scale(xt_v3_sub(Sh, Sl), 0.5 / h[k]), fX = xt_v3_scale(xt_v3_sub(Xh, Xl), 0.5 / h[k]);
        XT_CHECK_MSG(xt_v3_norm(xt_v3_sub(fS, dS[k])) <= 1e-6 * (1 + xt_v3_norm(fS)), "frame %d param %d source", f, k);
        XT_CHECK_MSG(xt_v3_norm(xt_v3_sub(fX, dX[k])) <= 1e-6 * (1 + xt_v3_norm(fX)), "frame %d param %d pixel", f, k);
      }
    }
}

XT_TEST(pose_gradient_matches_differences) {
  xt_model *m = make_model();
  XT_REQUIRE(m);
  xt_adj_grid grid;
  XT_REQUIRE(xt_adj_grid_of_model(m, &grid, NULL) == 0);
  xt_geometry g[2];
  make_geoms(g, 2);
  const size_t px = (size_t)g[0].mode.rows * g[0].mode.cols;
  double *x = grid_of(m), *y = malloc(2 * px * sizeof *y), *fh = malloc(px * sizeof *fh), *fl = malloc(px * sizeof *fl);
  double grad[12];
  XT_REQUIRE(x && y && fh && fl);
  for (size_t i = 0; i < 2 * px; i++) y[i] = urand() - 0.25;
  xt_msg msg = {{0}};
  XT_REQUIRE_MSG(xt_adj_pose_grad(&grid, x, g, 2, y, grad, 2, &msg) == 0, "%s", msg.text);
  const double h[6] = {1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6};
  for (int f = 0; f < 2; f++)
    for (int k = 0; k < 6; k++) {
      xt_pose hi = g[f].pose, lo = g[f].pose;
      double *ph = k == 0 ? &hi.primary_deg : k == 1 ? &hi.secondary_deg : k == 2 ? &hi.detector_rot_deg
                 : k == 3 ? &hi.table_mm.x : k == 4 ? &hi.table_mm.y : &hi.table_mm.z;
      double *pl = (double *)((char *)&lo + ((char *)ph - (char *)&hi));
      *ph += h[k];
      *pl -= h[k];
      xt_geometry gh, gl;
      xt_geom_compute(&hi, &g[f].mode, &gh, NULL);
      xt_geom_compute(&lo, &g[f].mode, &gl, NULL);
      XT_REQUIRE(xt_adj_forward(&grid, x, &gh, 1, fh, 1, NULL) == 0);
      XT_REQUIRE(xt_adj_forward(&grid, x, &gl, 1, fl, 1, NULL) == 0);
      double num = 0;
      for (size_t i = 0; i < px; i++) num += y[f * px + i] * (fh[i] - fl[i]) / (2 * h[k]);
      printf("  frame %d param %d: analytic %.10g numeric %.10g\n", f, k, grad[f * 6 + k], num);
      XT_CHECK_NEAR(grad[f * 6 + k], num, 1e-4 * fabs(num) + 1e-6);
      XT_CHECK(fabs(num) > 1e-3); /* the pose moves the image */
    }
  free(x), free(y), free(fh), free(fl);
  xt_model_free(m);
}

XT_TEST(bad_grids_are_refused) {
  xt_adj_grid grid;
  memset(&grid, 0, sizeof grid);
  grid.dim[0] = grid.dim[1] = grid.dim[2] = 4;
  grid.placement = xt_aff_identity();
  xt_msg msg = {{0}};
  XT_CHECK(xt_adj_grid_validate(&grid, &msg) == XT_EINVAL); /* zero index_to_model: singular */
  XT_CHECK(strstr(msg.text, "singular") != NULL);
  grid.index_to_model = xt_aff_identity();
  grid.dim[1] = 0;
  XT_CHECK(xt_adj_grid_validate(&grid, &msg) == XT_ERANGE);
  XT_CHECK(strstr(msg.text, "dimension 1") != NULL);
}

XT_TEST_MAIN(XT_ENTRY(forward_is_the_reference_projector) XT_ENTRY(dot_product_test)
                 XT_ENTRY(geometry_velocity_is_the_derivative) XT_ENTRY(pose_gradient_matches_differences)
                     XT_ENTRY(bad_grids_are_refused))
