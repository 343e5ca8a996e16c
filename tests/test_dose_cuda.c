/* GPU tests of issue 11's chain changes against the CPU pipeline (labelled `gpu`; without a usable
 * device it skips, xt_test_cuda.h):
 *  - shutters, wedges and the grid in the device's detect stage: the expected signal within 2e-5
 *    relative of the CPU's, exactly 0 behind the shutters;
 *  - DSA on the device: a static scene against its mask is the zero grey everywhere; the mask frame
 *    and a subtracted frame after a change agree with the CPU's codes within 2 (float rounding);
 *  - the dose-rate loop on the device converges as on the CPU (same stated settling bar);
 *  - scatter on the device (coarse sources, broad kernel, grid): the expected signal of the head
 *    with scatter and the grid within 1e-4 relative of the CPU's;
 *  - the measuring field's sum reduced on the device equals the host's sum of the same raw frame,
 *    exactly, and so does the dose it converts to;
 *  - the device-resident loop step (attached loop): each frame's record against its host twin
 *    (xt_drc_math.h on the host from the device's previous state and field sum), its frames against
 *    the same exposures set from the host, its settling within the stated frames. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_chain.h"
#include "xt_chain_internal.h"
#include "xt_drc.h"
#include "xt_exposure.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_chain.h"

static xt_proj *proj(xt_backend b, xt_model *m) { return xt_tc_proj(b, 0, &m, m ? 1 : 0); }

static xt_geometry geom(const char *mode) { return xt_tc_geom(mode, 0, 0, 0); }

static xt_chain_params quiet(void) {
  xt_chain_params p = xt_tc_quiet();
  p.quantum_noise = 0;
  return p;
}

/* The 64^3 head phantom (labels). */
static xt_model *head64(void) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL;
  return xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0 ? head : NULL;
}

/* The normal-dose fluoroscopy preset (dose-rate control on) on the quiet panel, no temporal filter. */
static xt_chain_params fluoro(void) {
  xt_chain_params p = quiet();
  const double adu = p.adu_per_kev;
  if (xt_protocol_apply(&p, XT_PROTOCOL_FLUORO_NORMAL, NULL)) p.drc = 0; /* the tests then fail on the loop */
  p.adu_per_kev = adu;
  p.temporal_alpha = 1;
  return p;
}

XT_TEST(cuda_collimator_and_grid_match_the_cpu) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj *pc = proj(XT_BACKEND_CPU, head), *pg = proj(XT_BACKEND_CUDA, head);
  xt_chain_params p = quiet();
  p.shutter[0] = 0.2;
  p.shutter[3] = 0.3;
  p.wedge[1] = 0.25;
  p.grid = 1;
  xt_chain *cc = NULL, *cg = NULL;
  XT_REQUIRE(pc && pg && xt_chain_create(&p, pc, &cc, NULL) == 0 && xt_chain_create(&p, pg, &cg, NULL) == 0);
  xt_geometry g = geom("fd20-256");
  const int n = 256 * 256;
  float *ec = malloc(sizeof(float) * n), *eg = malloc(sizeof(float) * n);
  XT_REQUIRE(ec && eg);
  xt_chain_out oc = {0}, og = {0};
  oc.expected = ec;
  og.expected = eg;
  /* scatter first: everywhere, behind the shutters too */
  p.scatter = 1;
  XT_REQUIRE(xt_chain_set_params(cc, &p, NULL) == 0 && xt_chain_set_params(cg, &p, NULL) == 0);
  XT_REQUIRE(xt_chain_frame(cc, &g, 0, &oc, NULL) == 0 && xt_chain_frame(cg, &g, 0, &og, NULL) == 0);
  double ws = 0;
  for (int i = 0; i < n; i++) ws = fmax(ws, fabs(eg[i] - ec[i]) / fmax(ec[i], 1e-30));
  XT_CHECK_MSG(ws <= 1e-4, "scatter: worst relative GPU - CPU %g", ws);
  p.scatter = 0;
  XT_REQUIRE(xt_chain_set_params(cc, &p, NULL) == 0 && xt_chain_set_params(cg, &p, NULL) == 0);
  XT_REQUIRE(xt_chain_frame(cc, &g, 0, &oc, NULL) == 0 && xt_chain_frame(cg, &g, 0, &og, NULL) == 0);
  double worst = 0;
  int shut = 0;
  for (int r = 0; r < 256; r++)
    for (int c = 0; c < 256; c++) {
      const int i = r * 256 + c;
      if (c < 51 || r >= 179) { /* behind the left (0.2 x 256 = 51.2) or bottom (0.7 x 256 = 179.2) shutter */
        shut += eg[i] != 0.f;
        continue;
      }
      worst = fmax(worst, fabs(eg[i] - ec[i]) / fmax(ec[i], 1e-30));
    }
  XT_CHECK_MSG(shut == 0, "%d pixels behind the shutters have signal on the GPU", shut);
  XT_CHECK_MSG(worst <= 2e-5, "worst relative GPU - CPU %g", worst);
  free(ec);
  free(eg);
  xt_chain_destroy(cc);
  xt_chain_destroy(cg);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  xt_model_free(head);
}

XT_TEST(cuda_dsa_matches_the_cpu_and_subtracts_a_static_scene) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj *pc = proj(XT_BACKEND_CPU, head), *pg = proj(XT_BACKEND_CUDA, head);
  xt_chain_params p = quiet();
  XT_REQUIRE(xt_protocol_apply(&p, XT_PROTOCOL_DSA, NULL) == 0);
  p.drc = 0;
  p.mas = 0.05;
  p.quantum_noise = 0;
  p.adu_per_kev = quiet().adu_per_kev;
  xt_chain *cc = NULL, *cg = NULL;
  XT_REQUIRE(pc && pg && xt_chain_create(&p, pc, &cc, NULL) == 0 && xt_chain_create(&p, pg, &cg, NULL) == 0);
  xt_geometry g = geom("fd20-256");
  const int n = 256 * 256;
  uint16_t *rc_ = malloc(2 * n), *pc_ = malloc(2 * n), *rg = malloc(2 * n), *pgp = malloc(2 * n);
  XT_REQUIRE(rc_ && pc_ && rg && pgp);
  xt_chain_out oc = {rc_, pc_, NULL, NULL, 0}, og = {rg, pgp, NULL, NULL, 0};
  const uint16_t zero = (uint16_t)floor(4095 * 0.5 + 0.5);
  /* The chain's GPU/CPU bar for processed frames is 2 codes at a window of 6 attenuation
   * units, test_chain_cuda): 0.003 units of float-vs-double difference in the log image. DSA's
   * window is narrower (1 unit), so the same difference spans more codes: the bar in codes scales
   * by the window ratio. */
  const int tol = (int)ceil(2.0 * 6.0 / p.window); /* the DSA protocol's window is fixed (1 unit) */
  for (int f = 0; f < 3; f++) {
    if (f == 2) { /* a change after the mask: less mAs (a darker frame), subtracted on both */
      p.mas = 0.04;
      XT_REQUIRE(xt_chain_set_params(cc, &p, NULL) == 0 && xt_chain_set_params(cg, &p, NULL) == 0);
    }
    XT_REQUIRE(xt_chain_frame(cc, &g, (uint64_t)f, &oc, NULL) == 0 && xt_chain_frame(cg, &g, (uint64_t)f, &og, NULL) == 0);
    int diff = 0, off = 0;
    for (int i = 0; i < n; i++) {
      diff += abs((int)pc_[i] - (int)pgp[i]) > tol;
      off += pgp[i] != zero;
    }
    XT_CHECK_MSG(diff == 0, "frame %d: %d processed codes differ by more than %d", f, diff, tol);
    if (f == 1) XT_CHECK_MSG(off <= n / 1000, "frame 1 against its mask: %d pixels off the zero grey", off);
  }
  free(rc_);
  free(pc_);
  free(rg);
  free(pgp);
  xt_chain_destroy(cc);
  xt_chain_destroy(cg);
  xt_proj_destroy(pc);
  xt_proj_destroy(pg);
  xt_model_free(head);
}

/* The loop on the device: from the protocol's start it reaches the target within the stated
 * settling time on the head (a step from the preset's guess) and stays within 10 %. */
XT_TEST(cuda_drc_settles_on_the_head) {
  xt_model *head = head64();
  XT_REQUIRE(head);
  xt_proj *pg = proj(XT_BACKEND_CUDA, head);
  xt_chain_params p = fluoro();
  xt_chain *cg = NULL;
  XT_REQUIRE(pg && xt_chain_create(&p, pg, &cg, NULL) == 0);
  xt_geometry g = geom("fd20-256");
  uint16_t *raw = malloc(2 * 256 * 256);
  XT_REQUIRE(raw);
  xt_drc d;
  xt_drc_reset(&d, &p);
  int settled = -1;
  for (int f = 0; f < 30; f++) {
    xt_drc_apply(&d, &p);
    XT_REQUIRE(xt_chain_set_params(cg, &p, NULL) == 0);
    xt_chain_out o = {raw, NULL, NULL, NULL, 0};
    XT_REQUIRE(xt_chain_frame(cg, &g, (uint64_t)f, &o, NULL) == 0);
    xt_chain_info ci;
    xt_chain_get_info(cg, &ci);
    const double m = xt_drc_measure(raw, 256, 256, &p, &ci, &g.mode);
    xt_drc_update(&d, &p, m);
    const int in = fabs(m / p.drc_target_ngy - 1) < 0.1;
    if (in && settled < 0) settled = f;
    if (!in && settled >= 0) XT_CHECK_MSG(0, "left the band at frame %d: %g nGy", f, m);
  }
  XT_CHECK_MSG(settled >= 0 && settled <= XT_DRC_SETTLE_FRAMES, "settled after %d frames", settled);
  free(raw);
  xt_chain_destroy(cg);
  xt_proj_destroy(pg);
  xt_model_free(head);
}

/* The measuring field on the device: its code sum equals the host's sum of the raw frame that came
 * back with it, exactly (integers), detached and attached; the doses convert alike. */
XT_TEST(cuda_field_sum_equals_the_host_sum) {
  const int dim[3] = {64, 64, 64};
  xt_model *head = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_U8, &head, NULL) == 0);
  xt_proj *pg = proj(XT_BACKEND_CUDA, head);
  xt_chain_params p = xt_tc_quiet(); /* noise on: codes of every parity */
  p.drc = 1;
  p.scatter = 1;
  xt_chain *cg = NULL;
  XT_REQUIRE(pg && xt_chain_create(&p, pg, &cg, NULL) == 0);
  const char *modes[2] = {"fd20-256", "thesis"};
  for (int mi = 0; mi < 2; mi++) {
    xt_geometry g = geom(modes[mi]);
    const int oc = g.mode.cols, orr = g.mode.rows;
    uint16_t *raw = malloc(2 * (size_t)oc * orr);
    XT_REQUIRE(raw);
    for (int att = 0; att < 2; att++) {
      XT_REQUIRE(xt_chain_drc_attach(cg, att, NULL) == 0);
      xt_chain_out o = {raw, NULL, NULL, NULL, 0};
      XT_REQUIRE(xt_chain_frame(cg, &g, 3, &o, NULL) == 0);
      xt_chain_drc_frame r;
      xt_chain_drc_last(cg, &r);
      uint64_t sum, n;
      xt_drc_field_sum(raw, oc, orr, &sum, &n);
      XT_CHECK_MSG(r.field_sum == sum && r.field_n == n, "%s attached %d: device %llu / %llu, host %llu / %llu", modes[mi],
                   att, (unsigned long long)r.field_sum, (unsigned long long)r.field_n, (unsigned long long)sum,
                   (unsigned long long)n);
      XT_CHECK(sum > n * 1000); /* a real signal above the offset */
      xt_chain_info ci;
      xt_chain_get_info(cg, &ci);
      if (!att)
        XT_CHECK(xt_drc_measure_sum(r.field_sum, r.field_n, &p, &ci, &g.mode) == xt_drc_measure(raw, oc, orr, &p, &ci, &g.mode));
    }
    free(raw);
  }
  xt_chain_destroy(cg);
  xt_proj_destroy(pg);
  xt_model_free(head);
}

/* The device-resident loop: every frame's record against the host twin's arithmetic from the
 * device's own previous state and field sum (the measurement exactly, the step's s within 1e-12:
 * libm's and CUDA's logs may differ in the last bit), its exposures against xt_drc_exposure, its
 * raw frames against a detached chain given the same exposures from the host (the device scales the
 * tables by mAs instead of the geometry: float rounding, codes within 2), and settling within
 * XT_DRC_SETTLE_FRAMES from the protocol's start. */
XT_TEST(cuda_attached_loop_steps_as_its_host_twin) {
  xt_model *head = head64();
  XT_REQUIRE(head);
  xt_proj *pg = proj(XT_BACKEND_CUDA, head);
  xt_chain_params p = fluoro();
  p.scatter = 1;
  p.mas *= 0.2; /* start well below the target */
  p.defect_lines = 4; /* dead columns, which processed frames interpolate from their neighbours (hot
                        * pixels would hold the measured dose and so the loop's kV still) */
  xt_chain *ca = NULL, *cx = NULL;
  XT_REQUIRE(pg && xt_chain_create(&p, pg, &ca, NULL) == 0 && xt_chain_create(&p, pg, &cx, NULL) == 0);
  XT_REQUIRE(xt_chain_drc_attach(ca, 1, NULL) == 0);
  xt_geometry g = geom("fd20-256");
  const int n = 256 * 256;
  uint16_t *ra = malloc(2 * n), *rx = malloc(2 * n), *pa = malloc(2 * n), *px = malloc(2 * n);
  XT_REQUIRE(ra && rx && pa && px);
  xt_drc prev;
  xt_drc_reset(&prev, &p);
  const xt_drc_law law = xt_drc_law_of(&p);
  const xt_drc_meter m = xt_drc_meter_of(&p, &g.mode);
  int settled = -1, worst = 0, worst_pd = 0, worst_pn = 0;
  double worst_s = 0;
  for (int f = 0; f < 25; f++) {
    xt_chain_out oa = {ra, pa, NULL, NULL, 0}, ox = {rx, px, NULL, NULL, 0};
    XT_REQUIRE(xt_chain_frame(ca, &g, (uint64_t)f, &oa, NULL) == 0);
    xt_chain_drc_frame r;
    xt_chain_drc_last(ca, &r);
    double kv, ms, mas;
    xt_drc_exposure(prev.s, p.drc_kv_max, &kv, &ms, &mas);
    XT_CHECK_MSG(r.kv == kv && fabs(r.mas / mas - 1) < 1e-12 && fabs(r.pulse_ms / ms - 1) < 1e-12, "frame %d: %g kV %g mAs, host %g %g", f,
                 r.kv, r.mas, kv, mas);
    const int k = (int)r.kv - XT_DRC_BANK_KV0;
    XT_REQUIRE(k >= 0 && k < ca->tc->bank.n);
    const double ngy = xt_drc_ngy(r.field_sum, r.field_n, &m, ca->tc->bank.flat_per_ugy[k]);
    XT_CHECK_MSG(r.drc.measured_ngy == ngy, "frame %d: device %.17g nGy, host %.17g", f, r.drc.measured_ngy, ngy);
    xt_drc twin = prev;
    xt_drc_step(&twin, &law, r.kv, r.mas, ngy);
    worst_s = fmax(worst_s, fabs(twin.s - r.drc.s));
    XT_CHECK_MSG(fabs(twin.s - r.drc.s) <= 1e-12 && twin.flags == r.drc.flags && twin.frames == r.drc.frames,
                 "frame %d: s %.17g flags %u, host %.17g %u", f, r.drc.s, r.drc.flags, twin.s, twin.flags);
    /* the same exposure set from the host on a detached chain */
    xt_chain_params q = p;
    q.kv = r.kv;
    q.mas = r.mas;
    q.pulse_ms = r.pulse_ms;
    XT_REQUIRE(xt_chain_set_params(cx, &q, NULL) == 0 && xt_chain_frame(cx, &g, (uint64_t)f, &ox, NULL) == 0);
    for (int i = 0; i < n; i++) {
      worst = abs((int)ra[i] - (int)rx[i]) > worst ? abs((int)ra[i] - (int)rx[i]) : worst;
      const int d = abs((int)pa[i] - (int)px[i]);
      if (ca->maps.defect[i] != XT_DEFECT_NONE) worst_pd = d > worst_pd ? d : worst_pd;
      else worst_pn = d > worst_pn ? d : worst_pn;
    }
    const int in = fabs(ngy / p.drc_target_ngy - 1) < 0.1;
    if (in && settled < 0) settled = f;
    if (!in && settled >= 0) XT_CHECK_MSG(0, "left the band at frame %d: %g nGy", f, ngy);
    prev = r.drc;
  }
  XT_CHECK_MSG(worst <= 2, "attached and detached frames differ by %d codes", worst);
  /* a defective pixel's processed value is its neighbours' mean through the same per-pixel
   * functions, with this frame's flat field: no further from the detached chain's than theirs (the
   * step rewrites the attached chain's tables for the next frame before the frame is processed) */
  XT_CHECK_MSG(worst_pd <= worst_pn + 1, "processed frames: defective pixels differ by %d codes, the others by %d",
               worst_pd, worst_pn);
  XT_CHECK_MSG(settled >= 1 && settled <= XT_DRC_SETTLE_FRAMES, "settled after %d frames", settled);
  if (getenv("XT_TEST_VERBOSE"))
    fprintf(stderr, "settled after %d frames, s within %g, codes within %d, processed %d (defective) %d (others)\n",
            settled, worst_s, worst, worst_pd, worst_pn);
  free(ra);
  free(rx);
  free(pa);
  free(px);
  xt_chain_destroy(ca);
  xt_chain_destroy(cx);
  xt_proj_destroy(pg);
  xt_model_free(head);
}

XT_TEST_MAIN_CUDA(XT_ENTRY(cuda_collimator_and_grid_match_the_cpu) XT_ENTRY(cuda_dsa_matches_the_cpu_and_subtracts_a_static_scene)
                 XT_ENTRY(cuda_drc_settles_on_the_head) XT_ENTRY(cuda_field_sum_equals_the_host_sum)
                     XT_ENTRY(cuda_attached_loop_steps_as_its_host_twin))
