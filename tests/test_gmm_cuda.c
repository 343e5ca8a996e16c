/* GPU tests of the CUDA Gaussian kind (projectors/proj_gmm.cu) against the float64 reference
 * (xt_ref_render_f64, proj_cpu_gmm.c):
 *
 *  - random mixtures (anisotropic, rotated, rigid and affine placements, random poses, detectors
 *    whose sizes are not multiples of the tile);
 *  - several mixtures with different cut-offs in one scene, and GMM + voxel scenes;
 *  - Gaussians that cross the detector plane (the erf form over the segment), lie beyond it, or
 *    cover the whole detector; a scene whose pairs outgrow the initial buffers;
 *  - batches against single frames (bit-identical), repeated frames (bit-identical);
 *  - the stage profile's counts.
 * Every frame's output is poisoned with NaN first; pass: relative L2 < 1e-5 and max |gpu - ref|
 * <= 1e-4 of the frame's maximum, no pixel unwritten.
 *
 * Labelled `gpu`: CI (no GPU) excludes it; without a usable device it skips (xt_test_cuda.h).
 * XT_CUDA_TEST_QUICK=1 shrinks the sizes (compute-sanitizer runs); XT_CUDA_TEST_VERBOSE=1 prints
 * every comparison's figures. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_fit.h"
#include "xt_fit_internal.h"
#include "xt_gmm.h"
#include "xt_gmm_cuda.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_proj_cuda.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_gmm.h"
#include "xt_test_gpu.h"

static int quick(void) {
  const char *q = getenv("XT_CUDA_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

/* n Gaussians, centres within +-spread mm, scales log-uniform in [smin, smax] per axis. */
static void random_placement(xt_model *m, int affine) {
  xt_affine rz = xt_aff_rot(2, urand(-XT_PI, XT_PI)), ry = xt_aff_rot(1, urand(-XT_PI, XT_PI)),
            rx = xt_aff_rot(0, urand(-XT_PI, XT_PI));
  xt_affine r1 = xt_aff_compose(&ry, &rz);
  m->placement = xt_aff_compose(&rx, &r1);
  if (affine) { /* a scaled, sheared placement: the field is transported, rays keep world mm */
    xt_affine s = xt_aff_identity();
    s.m[0][0] = urand(0.7, 1.3);
    s.m[1][1] = urand(0.7, 1.3);
    s.m[0][2] = urand(-0.2, 0.2);
    m->placement = xt_aff_compose(&m->placement, &s);
  }
  for (int a = 0; a < 3; a++) m->placement.t[a] = urand(-20, 20);
}

static xt_detector_mode test_mode(int cols, int rows, double pitch, double sod, double sid) {
  xt_detector_mode m = xt_mode_custom("test", cols, rows, pitch, pitch * urand(0.8, 1.25), sod, sid);
  return m;
}

static int random_geom(const xt_detector_mode *mode, xt_geometry *g) {
  xt_pose p = xt_pose_default(mode);
  p.primary_deg = urand(-180, 180);
  p.secondary_deg = urand(-40, 40);
  p.detector_rot_deg = urand(-30, 30);
  p.table_mm = xt_v3(urand(-15, 15), urand(-15, 15), urand(-15, 15));
  return xt_geom_compute(&p, mode, g, NULL);
}

/* Renders the models on the GPU (xt_cuda API: the frame pipeline) and compares. */
static int render_and_compare(const char *what, xt_model *const *models, int nm, const xt_geometry *g) {
  xt_cuda_options o = xt_cuda_default_options();
  xt_cuda_proj *p = NULL;
  xt_msg msg;
  int fail = 1;
  size_t np = (size_t)g->mode.cols * g->mode.rows;
  float *out = poisoned(np);
  if (!out || xt_cuda_create(&o, &p, &msg)) goto done;
  for (int i = 0; i < nm; i++)
    if (xt_cuda_add_model(p, models[i], &msg)) {
      fprintf(stderr, "  %s: add_model: %s\n", what, msg.text);
      goto done;
    }
  if (xt_cuda_render(p, g, out, &msg)) {
    fprintf(stderr, "  %s: render: %s\n", what, msg.text);
    goto done;
  }
  fail = compare(what, (const xt_model *const *)models, nm, g, out);
done:
  xt_cuda_destroy(p);
  free(out);
  return fail;
}

/* ---- tests ----------------------------------------------------------------------------------- */

XT_TEST(random_mixtures) {
  srand(11);
  const int trials = quick() ? 2 : 24;
  for (int t = 0; t < trials; t++) {
    const int n = t % 3 == 0 ? 50 : (t % 3 == 1 ? 800 : 5000);
    xt_model *m = random_mixture(quick() ? 40 : n, 60, 0.3, 12, urand(3, 6));
    XT_REQUIRE(m);
    random_placement(m, t % 4 == 3);
    xt_detector_mode mode = test_mode(70 + rand() % 120, 50 + rand() % 120, urand(0.5, 2.5), urand(600, 900), 0);
    mode.sid_mm = mode.sod_mm + urand(250, 500);
    xt_geometry g;
    XT_REQUIRE(random_geom(&mode, &g) == 0);
    char what[64];
    snprintf(what, sizeof what, "mixture trial %d (%d Gaussians)", t, (int)xt_model_gmm(m)->count);
    XT_CHECK_MSG(render_and_compare(what, &m, 1, &g) == 0, "%s", what);
    xt_model_free(m);
  }
  summary("random_mixtures");
}

XT_TEST(several_mixtures_and_voxels) {
  srand(12);
  for (int t = 0; t < (quick() ? 1 : 6); t++) {
    xt_model *ms[4];
    ms[0] = random_mixture(quick() ? 30 : 600, 50, 0.5, 8, 3.0);
    ms[1] = random_mixture(quick() ? 30 : 300, 30, 1, 20, 5.5);
    int dim[3] = {36, 40, 44};
    XT_REQUIRE(xt_phantom_head_model(dim, 4.5, t % 2 ? XT_VOXEL_U8 : XT_VOXEL_F32, &ms[2], NULL) == 0);
    ms[3] = random_mixture(quick() ? 20 : 200, 70, 0.4, 4, XT_GMM_CUTOFF_DEFAULT);
    XT_REQUIRE(ms[0] && ms[1] && ms[3]);
    random_placement(ms[0], 0);
    random_placement(ms[1], 1);
    random_placement(ms[3], 0);
    xt_detector_mode mode = test_mode(133, 101, urand(1.0, 2.0), 800, 1200);
    xt_geometry g;
    XT_REQUIRE(random_geom(&mode, &g) == 0);
    char what[64];
    snprintf(what, sizeof what, "3 mixtures + voxels, trial %d", t);
    XT_CHECK_MSG(render_and_compare(what, ms, 4, &g) == 0, "%s", what);
    for (int i = 0; i < 4; i++) xt_model_free(ms[i]);
  }
  summary("several_mixtures_and_voxels");
}

/* The detector plane through the mixture: Gaussians beyond it add nothing, those crossing it
 * are integrated over the segment up to the pixel (erf form). */
XT_TEST(gaussians_at_the_detector) {
  srand(13);
  for (int t = 0; t < (quick() ? 1 : 8); t++) {
    xt_model *m = random_mixture(quick() ? 40 : 1500, 60, 1, 15, urand(3, 6));
    XT_REQUIRE(m);
    xt_detector_mode mode = test_mode(97, 83, urand(1, 2), 800, 800 + urand(10, 40));
    xt_geometry g;
    XT_REQUIRE(random_geom(&mode, &g) == 0);
    char what[64];
    snprintf(what, sizeof what, "detector through the mixture, trial %d", t);
    XT_CHECK_MSG(render_and_compare(what, &m, 1, &g) == 0, "%s", what);
    xt_model_free(m);
  }
  summary("gaussians_at_the_detector");
}

/* A few Gaussians larger than the field of view, and many small ones: tiles with long lists,
 * and more pairs than the buffers first hold (they grow). */
XT_TEST(huge_gaussians_and_growth) {
  srand(14);
  xt_model *big = random_mixture(5, 20, 150, 400, XT_GMM_CUTOFF_DEFAULT);
  xt_model *many = random_mixture(quick() ? 200 : 20000, 80, 8, 30, XT_GMM_CUTOFF_DEFAULT);
  XT_REQUIRE(big && many);
  xt_detector_mode mode = test_mode(160, 144, 1.5, 800, 1200);
  xt_geometry g;
  XT_REQUIRE(random_geom(&mode, &g) == 0);
  xt_model *ms[2] = {big, many};
  XT_CHECK(render_and_compare("huge Gaussians", ms, 1, &g) == 0);
  XT_CHECK(render_and_compare("huge + many large (pair growth)", ms, 2, &g) == 0);
  xt_gmm_cuda_profile pr;
  xt_msg msg;
  XT_REQUIRE(xt_gmm_cuda_profile_frame(0, (const xt_model *const *)ms, 2, &g, 0, 1, &pr, &msg) == 0);
  /* 16 x 16 tiles: 10 x 9 of them */
  XT_CHECK(pr.gaussians == xt_model_gmm(big)->count + xt_model_gmm(many)->count);
  XT_CHECK(pr.visible > 0 && pr.visible <= pr.gaussians);
  XT_CHECK_MSG(pr.pairs > 8.0 * pr.gaussians, "%g pairs for %g Gaussians: no growth exercised", pr.pairs, pr.gaussians);
  XT_CHECK(pr.pairs <= pr.visible * 90 && pr.evaluated <= pr.pairs * 256);
  xt_model_free(big);
  xt_model_free(many);
  summary("huge_gaussians_and_growth");
}

/* Gaussians reaching the source's plane: body-sized ones, small ones beside the tube, and ones
 * centred behind it that reach forward past it: every tile, the segment's erf form. */
XT_TEST(gaussians_reaching_the_source) {
  srand(17);
  const xt_detector_mode mode = xt_mode_custom("test", 96, 80, 3.0, 3.0, 800, 1200);
  for (int t = 0; t < (quick() ? 1 : 4); t++) {
    xt_model *m = random_mixture(quick() ? 12 : 40, 30, 30, 250, urand(3, 6));
    XT_REQUIRE(m);
    xt_pose p = xt_pose_default(&mode); /* primary 0: the source at +y, 800 mm from the isocentre */
    xt_geometry g;
    XT_REQUIRE(xt_geom_compute(&p, &mode, &g, NULL) == 0);
    for (int i = 0; i < 10; i++) {
      xt_gaussian *q = &xt_model_gmm(m)->g[i];
      q->centre[0] = (float)(g.source.x + urand(-30, 30));
      q->centre[1] = (float)(g.source.y + (i < 5 ? -urand(10, 100) : urand(10, 80)));
      q->centre[2] = (float)(g.source.z + urand(-30, 30));
      for (int a = 0; a < 3; a++) q->scale[a] = (float)(i < 5 ? urand(2, 20) : urand(20, 60));
    }
    XT_REQUIRE(xt_gmm_finish(xt_model_gmm(m), "t", NULL) == 0);
    char what[64];
    snprintf(what, sizeof what, "reaching the source, trial %d", t);
    XT_CHECK_MSG(render_and_compare(what, &m, 1, &g) == 0, "%s", what);
    xt_model_free(m);
  }
  summary("gaussians_reaching_the_source");
}

XT_TEST(batch_equals_single_and_repeats) {
  srand(15);
  xt_model *m = random_mixture(quick() ? 60 : 3000, 60, 0.5, 10, XT_GMM_CUTOFF_DEFAULT);
  XT_REQUIRE(m);
  xt_detector_mode mode = test_mode(128, 96, 1.2, 800, 1200);
  const int n = quick() ? 3 : 20;
  xt_geometry *g = malloc(sizeof *g * n);
  XT_REQUIRE(g);
  for (int i = 0; i < n; i++) XT_REQUIRE(random_geom(&mode, &g[i]) == 0);
  const size_t np = (size_t)mode.cols * mode.rows;
  float *batch = poisoned(np * n), *one = poisoned(np), *again = poisoned(np);
  XT_REQUIRE(batch && one && again);
  xt_proj_options po = {XT_BACKEND_CUDA, 0, 0};
  xt_proj *p;
  xt_msg msg;
  XT_REQUIRE(xt_proj_create(&po, &p, &msg) == 0);
  XT_REQUIRE(xt_proj_add_model(p, m, &msg) == 0);
  XT_REQUIRE(xt_proj_render_batch(p, g, n, batch, &msg) == 0);
  for (int i = 0; i < n; i++) {
    XT_REQUIRE(xt_proj_render(p, &g[i], one, &msg) == 0);
    XT_CHECK_MSG(memcmp(one, batch + np * i, np * sizeof(float)) == 0, "frame %d of the batch differs", i);
    XT_REQUIRE(xt_proj_render(p, &g[i], again, &msg) == 0);
    XT_CHECK_MSG(memcmp(one, again, np * sizeof(float)) == 0, "frame %d differs when rendered again", i);
  }
  const xt_model *ms[1] = {m};
  XT_CHECK(compare("batch frame 0", ms, 1, &g[0], batch) == 0);
  XT_CHECK(compare("batch last frame", ms, 1, &g[n - 1], batch + np * (n - 1)) == 0);
  xt_proj_destroy(p);
  free(batch);
  free(one);
  free(again);
  free(g);
  xt_model_free(m);
  summary("batch_equals_single_and_repeats");
}

/* The benchmark's geometry and density at a size the reference can afford: 1024^2, thesis
 * distances, 20k Gaussians filling a head-sized ellipsoid. */
XT_TEST(thesis_geometry_full_detector) {
  srand(16);
  const xt_detector_mode *md = xt_mode_find("thesis");
  XT_REQUIRE(md);
  xt_model *m = random_mixture(quick() ? 500 : 20000, 80, 0.8, 4, XT_GMM_CUTOFF_DEFAULT);
  XT_REQUIRE(m);
  const double ang[] = {0, 45, 90, 150};
  for (int i = 0; i < (quick() ? 1 : 4); i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = ang[i];
    xt_geometry g;
    XT_REQUIRE(xt_geom_compute(&p, md, &g, NULL) == 0);
    char what[64];
    snprintf(what, sizeof what, "thesis 1024^2 at %g deg", ang[i]);
    XT_CHECK_MSG(render_and_compare(what, &m, 1, &g) == 0, "%s", what);
  }
  xt_model_free(m);
  summary("thesis_geometry_full_detector");
}

/* The fitter's CUDA engine against its CPU engine: the same volume error and gradient (the GPU
 * sums in fixed point, the CPU in float: they agree to float rounding), and the same fit. */
XT_TEST(fit_engines_agree) {
  int dim[3] = {40, 52, 50};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.6, XT_VOXEL_F32, &m, NULL) == 0);
  xt_fit_problem pb;
  /* with the default margin: the head is cut by the y and z faces at this size, so the engines
   * are compared on a grid with empty margins (issue 29) */
  XT_REQUIRE(xt__fit_problem_init(xt_model_volume(m), XT_FIT_MARGIN_DEFAULT, &pb, NULL) == 0);
  XT_CHECK(pb.pad[1] == XT_FIT_MARGIN_DEFAULT && pb.pad[2] == XT_FIT_MARGIN_DEFAULT);
  xt_fit_engine *ec = NULL, *eg = NULL;
  xt_msg msg;
  XT_REQUIRE(xt__fit_cpu_engine(&pb, 0, &ec, &msg) == 0);
  XT_REQUIRE(xt__fit_cuda_engine(&pb, &eg, &msg) == 0);
  srand(18);
  enum { N = 300 };
  xt_fit_param p[N];
  for (int i = 0; i < N; i++) {
    for (int a = 0; a < 3; a++) {
      p[i].c[a] = urand(2, dim[a] - 2);
      p[i].u[a] = log(1.0 / urand(0.8, 4));
      p[i].l[a] = urand(-0.2, 0.2);
    }
    p[i].lr = log(urand(0.002, 0.03));
  }
  double sc, sg, *gc = calloc(N * XT_FIT_NP, sizeof(double)), *gg = calloc(N * XT_FIT_NP, sizeof(double));
  XT_REQUIRE(gc && gg);
  XT_REQUIRE(ec->forward(ec, p, N, 4.0, &sc, &msg) == 0 && ec->backward(ec, p, N, 4.0, gc, &msg) == 0);
  XT_REQUIRE(eg->forward(eg, p, N, 4.0, &sg, &msg) == 0 && eg->backward(eg, p, N, 4.0, gg, &msg) == 0);
  XT_CHECK_NEAR(sg, sc, 1e-5 * sc);
  double worst = 0, scale = 0;
  for (int i = 0; i < N * XT_FIT_NP; i++) scale = fmax(scale, fabs(gc[i]));
  for (int i = 0; i < N * XT_FIT_NP; i++) worst = fmax(worst, fabs(gg[i] - gc[i]));
  XT_CHECK_MSG(worst <= 1e-5 * scale, "gradients differ by %.3g of their largest %.3g", worst, scale);
  ec->destroy(ec);
  eg->destroy(eg);
  free(gc);
  free(gg);
  xt__fit_problem_free(&pb);
  /* whole fits: CUDA and CPU reach the same PSNR */
  xt_fit_options o = xt_fit_default_options();
  o.budget = 2000;
  o.iters = quick() ? 3 : 30;
  xt_gmm *a = NULL, *b = NULL;
  xt_fit_result ra, rb;
  o.engine = XT_FIT_CPU;
  XT_REQUIRE(xt_fit_volume(xt_model_volume(m), &o, &a, &ra, &msg) == 0);
  o.engine = XT_FIT_CUDA;
  XT_REQUIRE(xt_fit_volume(xt_model_volume(m), &o, &b, &rb, &msg) == 0);
  printf("  fit engines: cpu %.3f dB in %.2f s, cuda %.3f dB in %.2f s\n", ra.psnr3d, ra.seconds, rb.psnr3d, rb.seconds);
  XT_CHECK(strcmp(rb.engine, "cuda") == 0);
  XT_CHECK_NEAR(rb.psnr3d, ra.psnr3d, 0.05);
  xt_gmm_free(a);
  xt_gmm_free(b);
  xt_model_free(m);
}

int main(int argc, char **argv) {
  xt_test_require_cuda(argv[0]);
  static const xt_test_entry tests[] = {
      XT_ENTRY(random_mixtures) XT_ENTRY(several_mixtures_and_voxels) XT_ENTRY(gaussians_at_the_detector)
          XT_ENTRY(huge_gaussians_and_growth) XT_ENTRY(gaussians_reaching_the_source)
              XT_ENTRY(batch_equals_single_and_repeats)
              XT_ENTRY(thesis_geometry_full_detector) XT_ENTRY(fit_engines_agree)};
  return xt_test_main_(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
