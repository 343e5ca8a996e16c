/* Motion on the CUDA backend (label gpu): every model kind moved by xt_proj_set_transform against
 * the CPU reference moved the same way (each kind's own bar), the same as the model added with its
 * placement already moved (bit for bit: the same descriptor arithmetic), and a transform set
 * between frames and set back gives the first frame again, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_motion.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_motion.h"

static xt_geometry geom(double primary, double secondary) {
  const xt_detector_mode mode = xt_mode_custom("t", 96, 80, 2.0, 2.0, 810, 1195);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  p.table_mm = xt_v3(3, -2, 5);
  xt_geometry g;
  xt_geom_compute(&p, &mode, &g, NULL);
  return g;
}

static xt_proj *make(xt_backend b, xt_model *m) {
  xt_proj_options po = {b, 0, 0};
  xt_proj *p = NULL;
  xt_msg msg;
  if (xt_proj_create(&po, &p, &msg) || xt_proj_add_model(p, m, &msg)) {
    fprintf(stderr, "  %s\n", msg.text);
    xt_proj_destroy(p);
    return NULL;
  }
  return p;
}

static double rel_err(const float *a, const float *b, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    e = fmax(e, fabs((double)a[i] - b[i]));
    m = fmax(m, fabs((double)b[i]));
  }
  return m > 0 ? e / m : e;
}

XT_TEST(every_kind_moved_gpu_matches_cpu) {
  const xt_rigid r = {{10.0, 25.0, -40.0}, {2.0, 1.0, -3.0}, {-6.0, 4.0, 9.0}};
  xt_motion mo;
  xt_motion_defaults(&mo);
  mo.cardiac.on = mo.resp.on = 1;
  mo.cardiac.amplitude = 0.2;
  mo.cardiac.centre_mm[0] = 4.0;
  xt_motion_state st;
  xt_motion_eval(&mo, mo.t0_ns + 400000000ull, &st);
  const xt_geometry g = geom(35, -20);
  const size_t np = (size_t)g.mode.rows * g.mode.cols;
  float *cpu = malloc(np * sizeof *cpu), *gpu = malloc(np * sizeof *gpu), *pre = malloc(np * sizeof *pre),
        *first = malloc(np * sizeof *first), *again = malloc(np * sizeof *again);
  XT_REQUIRE(cpu && gpu && pre && first && again);
  for (int k = 0; k < K_N; k++) {
    xt_model *m = make_kind(k), *placed = make_kind(k);
    if (!m || !placed) {
      fprintf(stderr, "  %s: not built here, skipped\n", kind_names[k]);
      XT_CHECK(k == K_NVDB);
      continue;
    }
    const xt_affine T = xt_motion_transform(&mo, &st, &r, k != K_INSTR, 1);
    placed->placement = xt_aff_compose(&T, &m->placement);
    xt_proj *pc = make(XT_BACKEND_CPU, m), *pg = make(XT_BACKEND_CUDA, m), *pp = make(XT_BACKEND_CUDA, placed);
    XT_REQUIRE(pc && pg && pp);
    xt_msg msg;
    XT_REQUIRE(xt_proj_render(pg, &g, first, &msg) == 0);
    XT_REQUIRE(xt_proj_set_transform(pc, m, &T, &msg) == 0 && xt_proj_set_transform(pg, m, &T, &msg) == 0);
    XT_REQUIRE(xt_proj_render(pc, &g, cpu, &msg) == 0 && xt_proj_render(pg, &g, gpu, &msg) == 0 &&
               xt_proj_render(pp, &g, pre, &msg) == 0);
    const double bar = k == K_GMM ? 1e-3 : 1e-4, e = rel_err(gpu, cpu, np);
    XT_CHECK_MSG(e <= bar, "%s: moved, gpu vs cpu rel err %.3g (bar %g)", kind_names[k], e, bar);
    XT_CHECK_MSG(memcmp(gpu, pre, np * sizeof *gpu) == 0, "%s: moved differs from the pre-placed model", kind_names[k]);
    XT_CHECK_MSG(rel_err(gpu, first, np) > 0.01, "%s: the move changed nothing", kind_names[k]);
    const xt_affine I = xt_aff_identity();
    XT_REQUIRE(xt_proj_set_transform(pg, m, &I, &msg) == 0 && xt_proj_render(pg, &g, again, &msg) == 0);
    XT_CHECK_MSG(memcmp(first, again, np * sizeof *first) == 0, "%s: identity is not the frame as added", kind_names[k]);
    xt_proj_destroy(pc);
    xt_proj_destroy(pg);
    xt_proj_destroy(pp);
    xt_model_free(m);
    xt_model_free(placed);
  }
  free(cpu), free(gpu), free(pre), free(first), free(again);
}

XT_TEST_MAIN_CUDA(XT_ENTRY(every_kind_moved_gpu_matches_cpu))
