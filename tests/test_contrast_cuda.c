/* The contrast agent on the GPU (issue 26, docs/contrast.md): the CUDA projector's iodine against
 * the CPU reference (line integrals and material channels, after changes and back to none), and a
 * chain frame (the fused spectral path of a voxel-only scene) whose aorta holds iodine against the
 * same device's frame of the static scene whose aorta is iodine_contrast; a catheter whose lumen is
 * a contrast region against the CPU reference, through iodine changes and a shape set after one.
 * Every test runs with each instrument splat kernel (the default, then XT_INSTR_SPLAT=run and compact).
 * Label gpu: exits 77 without a usable device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_basis.h"
#include "xt_gmm.h"
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_test_cuda.h"
#include "xt_test_instr.h"

#define VOXEL_MM 4.0

/* The bars of every CUDA kind against the float64 reference (docs/projector.md): relative L2 of the
 * frame < 1e-5, max error <= 1e-4 of the frame's largest value. */
static void check_bars(const float *gpu, const float *cpu, size_t n, const char *what) {
  double num = 0, den = 0, maxerr = 0, maxv = 0;
  for (size_t k = 0; k < n; k++) {
    const double d = (double)gpu[k] - (double)cpu[k];
    num += d * d;
    den += (double)cpu[k] * cpu[k];
    if (fabs(d) > maxerr) maxerr = fabs(d);
    if (fabs(cpu[k]) > maxv) maxv = fabs(cpu[k]);
  }
  XT_CHECK_MSG(sqrt(num / (den > 0 ? den : 1)) < 1e-5, "%s: relative L2 %.3g", what, sqrt(num / (den > 0 ? den : 1)));
  XT_CHECK_MSG(maxerr <= 1e-4 * maxv, "%s: max error %.3g of max %.3g", what, maxerr, maxv);
}

/* One level of a region's iodine set on both projectors (rho NULL: the level they hold, not set
 * again): the CUDA line integrals and channels against the CPU reference's (a: GPU, b: CPU scratch
 * of the channel planes), and the iodine channel non-zero exactly when the level is. */
static void region_level_matches(xt_proj *pc, xt_proj *pg, const xt_model *m, const double *rho,
                                 const xt_geometry *g, const xt_chanset *cs, int ci, float *a, float *b, size_t px,
                                 int some, const char *what) {
  xt_msg msg;
  if (rho) {
    XT_REQUIRE_MSG(xt_proj_set_iodine(pc, m, rho, &msg) == 0, "%s", msg.text);
    XT_REQUIRE_MSG(xt_proj_set_iodine(pg, m, rho, &msg) == 0, "%s", msg.text);
  }
  XT_REQUIRE(xt_proj_render(pc, g, b, &msg) == 0);
  XT_REQUIRE_MSG(xt_proj_render(pg, g, a, &msg) == 0, "%s", msg.text);
  check_bars(a, b, px, what);
  XT_REQUIRE(xt_proj_render_channels(pc, g, b, &msg) == 0);
  XT_REQUIRE_MSG(xt_proj_render_channels(pg, g, a, &msg) == 0, "%s", msg.text);
  for (int c = 0; c < cs->n; c++) check_bars(a + (size_t)c * px, b + (size_t)c * px, px, xt_basis_name(cs->basis[c]));
  double sum = 0;
  for (size_t k = 0; k < px; k++) sum += a[(size_t)ci * px + k];
  if (some) XT_CHECK(sum > 0);
  else XT_CHECK(sum == 0);
}

static int make_proj(xt_backend b, const xt_model *m, xt_proj **p, xt_msg *msg) {
  xt_proj_options po = {b, 2, 0};
  int rc = xt_proj_create(&po, p, msg);
  return rc ? rc : xt_proj_add_model(*p, m, msg);
}

XT_TEST(cuda_iodine_matches_cpu) {
  const xt_detector_mode *md = xt_mode_find("fd20-256");
  XT_REQUIRE(md);
  xt_msg msg;
  xt_model *m = NULL;
  XT_REQUIRE_MSG(xt_phantom_thorax_model(VOXEL_MM, &m, &msg) == 0, "%s", msg.text);
  xt_proj *pc = NULL, *pg = NULL;
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CPU, m, &pc, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CUDA, m, &pg, &msg) == 0, "%s", msg.text);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(pc, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0);
  const size_t px = (size_t)md->rows * md->cols;
  float *a = malloc(sizeof *a * px * XT_MAX_CHANNELS), *b = malloc(sizeof *b * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b);
  const double levels[][2] = {{0.020, 0.005}, {0.300, 0.0}, {0.0, 0.0}}; /* aorta, heart g/cm^3 */
  for (int pose_i = 0; pose_i < 2; pose_i++) {
    xt_pose pose = xt_pose_default(md);
    pose.primary_deg = pose_i ? -35 : 10;
    pose.secondary_deg = pose_i ? 15 : 0;
    xt_geometry g;
    XT_REQUIRE(xt_geom_compute(&pose, md, &g, &msg) == 0);
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
      double rho[256] = {0};
      rho[XT_THORAX_AORTA] = levels[li][0];
      rho[XT_THORAX_HEART] = levels[li][1];
      XT_REQUIRE_MSG(xt_proj_set_iodine(pc, m, rho, &msg) == 0, "%s", msg.text);
      XT_REQUIRE_MSG(xt_proj_set_iodine(pg, m, rho, &msg) == 0, "%s", msg.text);
      XT_REQUIRE(xt_proj_render(pc, &g, b, &msg) == 0);
      XT_REQUIRE_MSG(xt_proj_render(pg, &g, a, &msg) == 0, "%s", msg.text);
      check_bars(a, b, px, "line integrals");
      XT_REQUIRE(xt_proj_render_channels(pc, &g, b, &msg) == 0);
      XT_REQUIRE_MSG(xt_proj_render_channels(pg, &g, a, &msg) == 0, "%s", msg.text);
      for (int c = 0; c < cs.n; c++) check_bars(a + (size_t)c * px, b + (size_t)c * px, px, xt_basis_name(cs.basis[c]));
      double sum = 0;
      for (size_t k = 0; k < px; k++) sum += a[(size_t)ci * px + k];
      if (levels[li][0] > 0) XT_CHECK(sum > 0);
      else XT_CHECK(sum == 0); /* back to none: nothing left on the device */
    }
  }
  free(a);
  free(b);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  xt_model_free(m);
}

typedef struct planes {
  uint16_t *raw, *proc;
} planes;

static int give_planes(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  const planes *b = ctx;
  (void)msg;
  f->raw.data = b->raw;
  f->proc.data = b->proc;
  return 0;
}

static int chain_frame(xt_acq_renderer *r, const xt_model *m, const xt_detector_mode *md, double aorta, int n,
                       uint16_t *raw, uint16_t *proc, xt_msg *msg) {
  planes b = {raw, proc};
  xt_acq_iodine io = {m, XT_THORAX_AORTA, aorta};
  xt_acq_request q;
  xt_acq_frame f;
  memset(&q, 0, sizeof q);
  q.pose = xt_pose_default(md);
  q.mode = md;
  q.want = XT_ACQ_WANT_CHAIN;
  q.chain = 1;
  q.chain_prm = xt_chain_params_default();
  q.chain_prm.seed = 2626;
  q.run = 1;
  q.iodine = &io;
  q.niodine = n;
  q.buffers = give_planes;
  q.ctx = &b;
  q.flags = XT_ACQ_FIRST_EXPOSURE;
  return xt_acq_expose(NULL, r, &q, &f, msg);
}

XT_TEST(cuda_chain_region_equals_static_scene) {
  const xt_detector_mode *md = xt_mode_find("fd20-256");
  XT_REQUIRE(md);
  xt_msg msg;
  xt_model *live = NULL, *ref = NULL;
  XT_REQUIRE(xt_phantom_thorax_model(VOXEL_MM, &live, &msg) == 0 && xt_phantom_thorax_model(VOXEL_MM, &ref, &msg) == 0);
  xt_material_table def;
  XT_REQUIRE(xt_materials_default(XT_DEFAULT_ENERGY_KEV, &def, &msg) == 0);
  xt_material_table *t = xt_model_volume(ref)->materials; /* the aorta as iodine_contrast, no region */
  memset(t->contrast, 0, sizeof t->contrast);
  t->mu[XT_THORAX_AORTA] = def.mu[XT_MAT_IODINE];
  snprintf(t->name[XT_THORAX_AORTA], XT_MATERIAL_NAME_MAX, "%s", def.name[XT_MAT_IODINE]);
  xt_proj *pl = NULL, *pr = NULL;
  xt_proj_options po = {XT_BACKEND_CUDA, 2, 0};
  XT_REQUIRE_MSG(xt_proj_create(&po, &pl, &msg) == 0 && xt_proj_create(&po, &pr, &msg) == 0, "%s", msg.text);
  xt_acq_renderer rl, rr;
  xt_acq_renderer_init(&rl, pl, 2);
  xt_acq_renderer_init(&rr, pr, 2);
  XT_REQUIRE(xt_acq_renderer_add_model(&rl, live, &msg) == 0 && xt_acq_renderer_add_model(&rr, ref, &msg) == 0);
  const size_t out = (size_t)md->rows * md->cols;
  uint16_t *u = calloc(out * 4, sizeof *u);
  XT_REQUIRE(u);
  /* a frame without, then with: the iodine reaches the device between two frames */
  XT_REQUIRE_MSG(chain_frame(&rl, live, md, 0.0, 1, u, u + out, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(chain_frame(&rl, live, md, 0.010, 1, u, u + out, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(chain_frame(&rr, ref, md, 0.0, 0, u + 2 * out, u + 3 * out, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(u, u + 2 * out, sizeof *u * out) == 0);
  XT_CHECK(memcmp(u + out, u + 3 * out, sizeof *u * out) == 0);
  free(u);
  xt_acq_renderer_free(&rl);
  xt_acq_renderer_free(&rr);
  xt_proj_destroy(pl);
  xt_proj_destroy(pr);
  xt_model_free(live);
  xt_model_free(ref);
}

/* A catheter's lumen as a contrast region (docs/contrast.md): the CUDA splat takes the lumen's mono
 * mu from each frame's descriptor (the segments stay as laid out, without iodine) and the channel
 * rows' iodine column; against the CPU reference frame by frame through an injection: 10 mg/mL, a
 * change to the agent's own 350 with the shape unchanged, a new shape with no iodine call (its
 * segments must take the lumen's iodine from the frame alone), a new shape and a new level in the
 * same frame, the same level set again (the iodine column not copied up again, still right), and
 * back to none (nothing left in the iodine channel). */
XT_TEST(cuda_catheter_lumen_matches_cpu) {
  xt_msg msg;
  xt_instr_device dev;
  int lum = -1;
  double pts[3 * 40], bent[3 * 40];
  XT_REQUIRE_MSG(lumen_catheter(&dev, &lum, pts, bent, &msg) == 0, "%s", msg.text);
  xt_model *m = NULL;
  XT_REQUIRE_MSG(xt_model_from_instr(&dev, pts, 40, "cath", &m, &msg) == 0, "%s", msg.text);
  xt_proj *pc = NULL, *pg = NULL;
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CPU, m, &pc, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CUDA, m, &pg, &msg) == 0, "%s", msg.text);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(pc, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0);
  const xt_detector_mode md = xt_mode_custom("lumen", 160, 128, 0.6, 0.6, 800, 1200);
  xt_pose pose = xt_pose_default(&md);
  pose.primary_deg = 25;
  pose.secondary_deg = -10;
  xt_geometry g;
  XT_REQUIRE(xt_geom_compute(&pose, &md, &g, &msg) == 0);
  const size_t px = (size_t)md.rows * md.cols;
  float *a = malloc(sizeof *a * px * XT_MAX_CHANNELS), *b = malloc(sizeof *b * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b);
  const struct {
    double rho;        /* g/cm^3; < 0: not set this frame (the projectors keep the last) */
    const double *pts; /* a new shape before the frame, NULL: none */
    const char *what;
  } step[] = {{0.010, NULL, "catheter at 10 mg/mL"},
              {0.350, NULL, "catheter, 10 -> 350 mg/mL, same shape"},
              {-1.0, bent, "catheter, new shape at 350 mg/mL, no iodine call"},
              {0.120, pts, "catheter, new shape and 120 mg/mL in one frame"},
              {0.120, NULL, "catheter, 120 mg/mL set again"},
              {0.0, NULL, "catheter, none"}};
  double held = 0;
  for (size_t k = 0; k < sizeof step / sizeof step[0]; k++) {
    double rho[256] = {0};
    rho[lum] = step[k].rho;
    if (step[k].pts) {
      XT_REQUIRE_MSG(xt_proj_set_shape(pc, m, step[k].pts, 40, &msg) == 0, "%s", msg.text);
      XT_REQUIRE_MSG(xt_proj_set_shape(pg, m, step[k].pts, 40, &msg) == 0, "%s", msg.text);
    }
    if (step[k].rho >= 0) held = step[k].rho;
    region_level_matches(pc, pg, m, step[k].rho >= 0 ? rho : NULL, &g, &cs, ci, a, b, px, held > 0, step[k].what);
  }
  free(a);
  free(b);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  xt_model_free(m);
}

/* A labelled mixture whose blood label is a region (xt_gmm_contrast_label): the CUDA kind's scaled
 * records and channel rows against the CPU reference at two levels and back to none. */
XT_TEST(cuda_mixture_region_matches_cpu) {
  xt_msg msg;
  xt_gmm *g = NULL;
  XT_REQUIRE(xt_gmm_create(64, &g, &msg) == 0);
  for (int i = 0; i < 64; i++) { /* a chain of blood Gaussians, soft tissue around it */
    const int blood = i % 2 == 0;
    g->g[i].centre[0] = (float)(-80 + 2.5 * i);
    g->g[i].centre[1] = blood ? 0.f : 12.f;
    g->g[i].centre[2] = (float)(10 * sin(0.2 * i));
    g->g[i].scale[0] = 4.f, g->g[i].scale[1] = 3.f, g->g[i].scale[2] = blood ? 3.f : 8.f;
    g->g[i].quat[0] = 1.f;
    g->g[i].label = blood ? XT_MAT_BLOOD : XT_MAT_SOFT;
    g->g[i].rho = blood ? 0.02f : 0.019f;
  }
  g->has_labels = 1;
  XT_REQUIRE_MSG(xt_gmm_finish(g, "mix", &msg) == 0, "%s", msg.text);
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_gmm(g, "mix", &m, &msg) == 0);
  XT_REQUIRE(xt_gmm_contrast_label(m, XT_MAT_BLOOD, &msg) == 0);
  xt_proj *pc = NULL, *pg = NULL;
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CPU, m, &pc, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(make_proj(XT_BACKEND_CUDA, m, &pg, &msg) == 0, "%s", msg.text);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(pc, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0);
  const xt_detector_mode *md = xt_mode_find("fd20-256");
  XT_REQUIRE(md);
  xt_pose pose = xt_pose_default(md);
  pose.primary_deg = 15;
  xt_geometry geo;
  XT_REQUIRE(xt_geom_compute(&pose, md, &geo, &msg) == 0);
  const size_t px = (size_t)md->rows * md->cols;
  float *a = malloc(sizeof *a * px * XT_MAX_CHANNELS), *b = malloc(sizeof *b * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b);
  const double levels[] = {0.010, 0.300, 0.0};
  for (int li = 0; li < 3; li++) {
    double rho[256] = {0};
    rho[XT_MAT_BLOOD] = levels[li];
    region_level_matches(pc, pg, m, rho, &geo, &cs, ci, a, b, px, levels[li] > 0, "mixture line integrals");
  }
  free(a);
  free(b);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  xt_model_free(m);
}

/* every splat kernel (proj_instr.cu): the default, then XT_INSTR_SPLAT=run and compact */
#define SPLATS {NULL, "run", "compact"}
XT_TEST_MAIN_CUDA_ENV("XT_INSTR_SPLAT", SPLATS,
                      XT_ENTRY(cuda_iodine_matches_cpu) XT_ENTRY(cuda_chain_region_equals_static_scene)
                      XT_ENTRY(cuda_catheter_lumen_matches_cpu)
                      XT_ENTRY(cuda_mixture_region_matches_cpu))
