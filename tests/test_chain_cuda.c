/* GPU tests of the material channels and the imaging chain's device pipeline against the CPU:
 *  - channel planes of the CUDA voxel kind (labels, dense, hull on, both voxel layouts through AUTO)
 *    against the float64 reference: max |gpu - ref| <= 1e-4 of the frame's largest channel value;
 *    labels beyond the slot march's 16 (the parts march) likewise;
 *  - noise-free chain frames: expected and blurred signals within 2e-5 relative of the CPU's, raw
 *    codes within 1 ADU (a rounding tie of float sums), processed within 2; with 2x2 binning too, and
 *    with the defect map changed between frames (the GPU's list of defective pixels follows it);
 *  - with noise: flat-field mean and relative variance agree with the CPU's within 3 % (each is
 *    the mean of 65536 pixels; the draws differ because expf/logf differ in the last bits);
 *  - replay: the same seed and poses give bit-identical raw and processed frames on the GPU;
 *  - the fused detect path (the spectrum integral in the projector's march, voxel models only)
 *    against the separate stage over the channel planes: bit-identical frames, noise on, for label
 *    and dense volumes (the same sums as xt_spectral_sum on the same channel values, the channels
 *    no lane of a warp crosses left out), and in a frame that cuts warps at its edges; and with
 *    instruments fused in (XT_INSTR_FUSED=1: a thorax and three guidewires, one out of the field),
 *    bit-identical too, the same frame twice alike (the accumulators back at zero);
 *  - every model kind's channels (Gaussian mixtures with and without labels, NanoVDB label and mu
 *    grids, with label volumes) against the float64 reference, alone and mixed: relative L2 below
 *    1e-5 and max |gpu - ref| <= 1e-4 of the frame's largest value; the noise-free chain frame of
 *    the mixed scene as above.
 * Labelled `gpu`; without a usable device it skips (xt_test_cuda.h). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_chain.h"
#include "xt_chain_internal.h" /* unfused, fused_frames */
#include "xt_cuda_config.h"   /* XT_CUDA_WARP_W, XT_CUDA_WARP_H */
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_test.h"
#include "xt_test_cuda.h"
#include "xt_test_chain.h"
#include "xt_test_gmm.h"
#ifdef XT_TEST_NVDB
#include "xt_test_nvdb.h"
#endif

static xt_proj *proj(xt_backend b, xt_model *const *ms, int n) { return xt_tc_proj(b, 0, ms, n); }

static xt_geometry geom(const char *mode, double primary, double secondary) {
  return xt_tc_geom(mode, primary, secondary, 0);
}

/* The channel planes of projector p (CUDA, models ms) at pose g against the float64 reference:
 * *err the largest |gpu - ref| (infinite where a value was left unwritten: NaN-poisoned first),
 * *mx the largest |ref|, *l2 the relative L2 difference. 0, or -1 when a render fails. */
static int compare_channels(xt_proj *p, xt_model *const *ms, int nm, const xt_chanset *cs, const xt_geometry *g,
                            double *err, double *mx, double *l2) {
  const size_t n = (size_t)g->mode.rows * g->mode.cols * (size_t)cs->n;
  float *gpu = malloc(sizeof *gpu * n);
  double *ref = malloc(sizeof *ref * n);
  int rc = gpu && ref ? 0 : -1;
  for (size_t i = 0; !rc && i < n; i++) gpu[i] = NAN;
  if (!rc && (xt_proj_render_channels(p, g, gpu, NULL) ||
              xt_ref_render_channels_f64((const xt_model *const *)ms, nm, cs, g, ref, 0, NULL)))
    rc = -1;
  double d2 = 0, r2 = 0;
  *err = *mx = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    const double d = gpu[i] - ref[i];
    *mx = fmax(*mx, fabs(ref[i]));
    *err = fmax(*err, fabs(d));
    d2 += d * d;
    r2 += ref[i] * ref[i];
    if (!(gpu[i] == gpu[i])) *err = INFINITY; /* unwritten */
  }
  *l2 = r2 > 0 ? sqrt(d2 / r2) : INFINITY;
  free(gpu);
  free(ref);
  return rc;
}

XT_TEST(cuda_channels_match_the_reference) {
  const int dim[3] = {96, 96, 96};
  xt_model *ms[2] = {NULL, NULL};
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &ms[0], NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_F32, &ms[1], NULL) == 0);
  ms[1]->placement.t[2] = 30;
  for (int nm = 1; nm <= 2; nm++) {
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, nm);
    XT_REQUIRE(p);
    xt_chanset cs;
    XT_REQUIRE(xt_proj_channels(p, &cs, NULL) == 0);
    XT_CHECK(cs.n == 8);
    const double angles[][2] = {{0, 0}, {33, -12}, {90, 0}, {-120, 25}};
    for (int a = 0; a < 4; a++) {
      xt_geometry g = geom("fd20-256", angles[a][0], angles[a][1]);
      double err, mx, l2;
      XT_REQUIRE(compare_channels(p, ms, nm, &cs, &g, &err, &mx, &l2) == 0);
      XT_CHECK_MSG(err <= 1e-4 * mx, "%d models, pose %d: max |gpu - ref| %g of %g", nm, a, err, mx);
    }
    xt_proj_destroy(p);
  }
  xt_model_free(ms[0]);
  xt_model_free(ms[1]);
}

/* Label volumes take one of two marches (proj_voxel.cu): labels below XT_CH_SLOTS (16) add path
 * lengths per label (acc_slots), larger labels add to their basis parts' channels (acc_parts). The
 * head's labels moved up by 40 (its material entries copied there) take the second: its channels,
 * alone and beside a dense volume, against the float64 reference with the same bars. */
XT_TEST(cuda_channels_of_large_labels_match_the_reference) {
  const int dim[3] = {96, 96, 96}, up = 40;
  xt_model *ms[2] = {NULL, NULL};
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &ms[0], NULL) == 0);
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_F32, &ms[1], NULL) == 0);
  ms[1]->placement.t[2] = 30;
  xt_volume *v = xt_model_volume(ms[0]);
  xt_material_table *t = v->materials;
  XT_REQUIRE(t && t->count + up <= XT_MAX_MATERIALS);
  for (int l = t->count - 1; l >= 0; l--) {
    t->mu[l + up] = t->mu[l];
    t->density[l + up] = t->density[l];
    memcpy(t->name[l + up], t->name[l], sizeof t->name[l]);
  }
  t->count += up;
  unsigned char *u = v->data;
  const size_t nvox = (size_t)dim[0] * dim[1] * dim[2];
  for (size_t k = 0; k < nvox; k++) u[k] = (unsigned char)(u[k] + up);
  for (int nm = 1; nm <= 2; nm++) {
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, nm);
    XT_REQUIRE(p);
    xt_chanset cs;
    XT_REQUIRE(xt_proj_channels(p, &cs, NULL) == 0);
    const double angles[][2] = {{0, 0}, {33, -12}, {-120, 25}};
    for (int a = 0; a < 3; a++) {
      xt_geometry g = geom("fd20-256", angles[a][0], angles[a][1]);
      double err, mx, l2;
      XT_REQUIRE(compare_channels(p, ms, nm, &cs, &g, &err, &mx, &l2) == 0);
      XT_CHECK_MSG(err <= 1e-4 * mx && l2 < 1e-5 && mx > 0, "%d models, pose %d: max %g of %g, rel L2 %g", nm, a, err,
                   mx, l2);
    }
    xt_proj_destroy(p);
  }
  xt_model_free(ms[0]);
  xt_model_free(ms[1]);
}

/* One frame on both backends with the same parameters. */
typedef struct both {
  float *S[2], *D[2];
  uint16_t *raw[2], *proc[2];
  double w[2], l[2]; /* the last frame's window and level (the automatic window's: each backend's own) */
  uint32_t sat[2];   /* the last frame's saturated pixels, as each chain counted them */
} both;

/* The processed frames' GPU/CPU bar in codes for windows w0, w1 and levels l0, l1: 2 codes at a
 * window of 6 attenuation units (0.003 units of float-vs-float difference in the log image),
 * scaled to the narrower window, plus what the windows' own difference moves a code (the automatic
 * window, issue 27: each backend's from its own histogram; a pixel's attenuation on a bin's edge
 * may fall either side, moving a quantile by a fraction of a bin); the windows must agree within
 * 0.01 (2.5 of the histogram's 1/256 bins). */
static int proc_bar(double w0, double l0, double w1, double l1) {
  XT_CHECK_MSG(fabs(w1 - w0) <= 0.01 && fabs(l1 - l0) <= 0.01, "windows %.5f / %.5f, levels %.5f / %.5f (CPU / GPU)", w0,
               w1, l0, l1);
  const double w = fmin(w0, w1);
  return (int)ceil(2.0 * 6.0 / w + 4095.0 * (fabs(l1 - l0) + 0.5 * fabs(w1 - w0)) / w);
}

static const xt_panel_fault *panel_fault; /* set on both chains when not NULL (injected faults) */

static int run_both_models(xt_model *const *ms, int nm, const xt_chain_params *prm, const char *mode, int frames,
                           both *o) {
  xt_geometry g = geom(mode, 20, 5);
  const size_t np = (size_t)g.mode.rows * g.mode.cols;
  for (int b = 0; b < 2; b++) {
    xt_proj *p = proj(b ? XT_BACKEND_CUDA : XT_BACKEND_CPU, ms, nm);
    xt_chain *c = NULL;
    if (!p || xt_chain_create(prm, p, &c, NULL)) return -1;
    if (panel_fault) xt_chain_set_panel_fault(c, panel_fault);
    o->S[b] = malloc(np * sizeof(float));
    o->D[b] = malloc(np * sizeof(float));
    o->raw[b] = malloc(np * sizeof(uint16_t));
    o->proc[b] = malloc(np * sizeof(uint16_t));
    xt_chain_out out = {o->raw[b], o->proc[b], o->S[b], o->D[b], 0};
    for (int f = 0; f < frames; f++)
      if (xt_chain_frame(c, &g, (uint64_t)f, &out, NULL)) return -1;
    xt_chain_window_last(c, &o->w[b], &o->l[b]);
    o->sat[b] = xt_chain_saturated_last(c);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
  }
  return 0;
}

static int run_both(xt_model *m, const xt_chain_params *prm, const char *mode, int frames, both *o) {
  xt_model *ms[1] = {m};
  return run_both_models(ms, m ? 1 : 0, prm, mode, frames, o);
}

static void free_both(both *o) {
  for (int b = 0; b < 2; b++) {
    free(o->S[b]);
    free(o->D[b]);
    free(o->raw[b]);
    free(o->proc[b]);
  }
}

/* The noise-free tests' exposure at fd20-256: the head's thin paths near the ADC's full scale, its air
 * beyond (a pixel reads the mean of its 56.25 native pixels' codes; until issue 27 it read their
 * summed charge, and these tests ran at 0.01 mAs: the same codes), so that the processed frame's
 * codes, which a rounding tie of a raw code moves by ~680 / code, stay within the bar. */
#define FULL_SCALE_MAS 0.5625

/* The noise-free chain on both backends: signals within 2e-5, raw within 1 ADU, processed within
 * proc_bar (2 codes at a window of 6; the automatic window's own on each). psf_mm
 * > 0: that PSF instead of the default (2 mm, the largest allowed: a blur radius of 6 pixels at
 * fd20-256, so the blur kernel's tiles and halos are exercised beyond the default's 1). binning: 1,
 * or 2 (the readout in the blur kernel's epilogue sums whole bins of its tile). */
static void chain_matches_cpu(xt_model *const *ms, int nm, double psf_mm, int binning) {
  xt_chain_params prm = xt_chain_params_default();
  if (psf_mm > 0) prm.psf_mm = psf_mm;
  prm.binning = binning;
  prm.quantum_noise = 0;
  prm.e_noise_adu = 0;
  prm.mas = FULL_SCALE_MAS;
  both o;
  memset(&o, 0, sizeof o);
  XT_REQUIRE(run_both_models(ms, nm, &prm, "fd20-256", 3, &o) == 0);
  const size_t np = 256 * 256, no = np / (size_t)(binning * binning);
  double es = 0, ed = 0;
  int draw = 0, dproc = 0;
  for (size_t i = 0; i < np; i++) {
    es = fmax(es, fabs(o.S[1][i] - o.S[0][i]) / fmax(1e-3, fabs(o.S[0][i])));
    ed = fmax(ed, fabs(o.D[1][i] - o.D[0][i]) / fmax(1e-3, fabs(o.D[0][i])));
  }
  for (size_t i = 0; i < no; i++) {
    draw = abs((int)o.raw[1][i] - (int)o.raw[0][i]) > draw ? abs((int)o.raw[1][i] - (int)o.raw[0][i]) : draw;
    dproc = abs((int)o.proc[1][i] - (int)o.proc[0][i]) > dproc ? abs((int)o.proc[1][i] - (int)o.proc[0][i]) : dproc;
  }
  XT_CHECK_MSG(es <= 2e-5, "expected signal: worst relative difference %g", es);
  XT_CHECK_MSG(ed <= 2e-5, "blurred signal: worst relative difference %g", ed);
  XT_CHECK_MSG(draw <= 1, "raw: worst difference %d ADU", draw);
  /* the saturated pixels each chain counted (the GPU's in its readout kernel) against its raw codes */
  for (int b = 0; b < 2; b++) {
    uint32_t want = 0;
    for (size_t i = 0; i < no; i++) want += o.raw[b][i] >= (1u << prm.adc_bits) - 1u;
    XT_CHECK_MSG(o.sat[b] == want, "backend %d: %u saturated pixels counted, the raw frame has %u", b, o.sat[b], want);
  }
  const int bar = proc_bar(o.w[0], o.l[0], o.w[1], o.l[1]);
  XT_CHECK_MSG(dproc <= bar, "processed: worst difference %d (bar %d, window %.4f)", dproc, bar, o.w[0]);
  free_both(&o);
}

XT_TEST(cuda_chain_matches_cpu_without_noise) {
  const int dim[3] = {96, 96, 96};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &m, NULL) == 0);
  chain_matches_cpu(&m, 1, 0, 1);
  chain_matches_cpu(&m, 1, 2.0, 1);
  chain_matches_cpu(&m, 1, 0, 2);
  chain_matches_cpu(&m, 1, 2.0, 2);
  xt_model_free(m);
}

/* Injected panel faults (issue 24: dead lines, a dead cluster, gain drift, stale calibration) act in
 * the readout stage on both backends alike: the noise-free frames within the same bounds, and the
 * faults visible (a dead column at the dark offset in the raw frame beside a live one). */
XT_TEST(cuda_panel_faults_match_cpu) {
  const int dim[3] = {96, 96, 96};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &m, NULL) == 0);
  xt_panel_fault f;
  memset(&f, 0, sizeof f);
  f.on = 1;
  f.gain_scale = 1.04f;
  f.stale_offset_adu = 20.f;
  f.stale_gain = 0.02f;
  f.stale_seed = 77;
  f.col0 = 31;
  f.ncols = 2;
  f.row0 = 200;
  f.nrows = 1;
  f.cl_col = 120;
  f.cl_row = 90;
  f.cl_r = 3.f;
  panel_fault = &f;
  chain_matches_cpu(&m, 1, 0, 1);
  xt_chain_params prm = xt_chain_params_default();
  prm.quantum_noise = 0;
  prm.e_noise_adu = 0;
  prm.mas = FULL_SCALE_MAS;
  both o;
  memset(&o, 0, sizeof o);
  XT_REQUIRE(run_both_models(&m, 1, &prm, "fd20-256", 1, &o) == 0);
  for (int b = 0; b < 2; b++) { /* the dead column reads the dark offset only, its live neighbour signal too */
    double dead = 0, live = 0;
    for (int r = 0; r < 256; r++) dead += o.raw[b][r * 256 + 31], live += o.raw[b][r * 256 + 29];
    XT_CHECK_MSG(dead / 256 < prm.offset_adu + 100 && live > dead + 256 * 50, "backend %d: dead column mean %.1f, live %.1f",
                 b, dead / 256, live / 256);
  }
  free_both(&o);
  panel_fault = NULL;
  xt_model_free(m);
}

/* The GPU interpolates the defective pixels from a list it builds when the panel maps are uploaded;
 * the list must follow the defect map when the parameters change between frames. Noise-free
 * frames at changing poses (a stale list would leave a defective pixel's temporal state at the
 * previous pose's value) and defect settings, each frame's processed codes against the CPU's
 * within 2 (and raw within 1). */
XT_TEST(cuda_defect_interpolation_follows_the_defect_map) {
  const int dim[3] = {96, 96, 96};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &m, NULL) == 0);
  const double frac[3] = {0, 0.01, 0.002}, ang[3] = {20, 40, 5};
  const int lines[3] = {0, 8, 1};
  const size_t np = 256 * 256;
  uint16_t *raw[2], *proc[2];
  xt_proj *p[2];
  xt_chain *c[2] = {NULL, NULL};
  xt_chain_params prm = xt_chain_params_default();
  prm.quantum_noise = 0;
  prm.e_noise_adu = 0;
  prm.mas = FULL_SCALE_MAS;
  for (int b = 0; b < 2; b++) {
    p[b] = proj(b ? XT_BACKEND_CUDA : XT_BACKEND_CPU, &m, 1);
    XT_REQUIRE(p[b] && xt_chain_create(&prm, p[b], &c[b], NULL) == 0);
    raw[b] = malloc(np * sizeof(uint16_t));
    proc[b] = malloc(np * sizeof(uint16_t));
    XT_REQUIRE(raw[b] && proc[b]);
  }
  for (int f = 0; f < 3; f++) {
    xt_geometry g = geom("fd20-256", ang[f], 5);
    prm.defect_fraction = frac[f];
    prm.defect_lines = lines[f];
    int draw = 0, dproc = 0;
    for (int b = 0; b < 2; b++) {
      const xt_chain_out out = {raw[b], proc[b], NULL, NULL, 0};
      XT_REQUIRE(xt_chain_set_params(c[b], &prm, NULL) == 0);
      XT_REQUIRE(xt_chain_frame(c[b], &g, (uint64_t)f, &out, NULL) == 0);
    }
    for (size_t i = 0; i < np; i++) {
      const int dr = abs((int)raw[1][i] - (int)raw[0][i]), dp = abs((int)proc[1][i] - (int)proc[0][i]);
      draw = dr > draw ? dr : draw;
      dproc = dp > dproc ? dp : dproc;
    }
    XT_CHECK_MSG(draw <= 1, "frame %d: raw: worst difference %d ADU", f, draw);
    double w[2], l[2];
    for (int b = 0; b < 2; b++) xt_chain_window_last(c[b], &w[b], &l[b]);
    const int bar = proc_bar(w[0], l[0], w[1], l[1]);
    XT_CHECK_MSG(dproc <= bar, "frame %d (defect fraction %g, %d lines): processed: worst difference %d (bar %d)", f,
                 frac[f], lines[f], dproc, bar);
  }
  for (int b = 0; b < 2; b++) {
    xt_chain_destroy(c[b]);
    xt_proj_destroy(p[b]);
    free(raw[b]);
    free(proc[b]);
  }
  xt_model_free(m);
}

/* The scene of every kind: [0] label head, [1] labelled mixture, [2] unlabelled mixture, and with
 * NanoVDB [3] a label grid and [4] a mu grid (converted from sparse random volumes). *n models. */
static int mixed_scene(xt_model **ms, int *n, unsigned seed) {
  const int dim[3] = {80, 80, 80};
  srand(seed);
  *n = 0;
  if (xt_phantom_head_model(dim, 2.4, XT_VOXEL_U8, &ms[0], NULL)) return -1;
  ms[1] = labelled_mixture(400, 1, 70, 2, 15, -20);
  ms[2] = labelled_mixture(300, 0, 70, 2, 15, 25);
  if (!ms[1] || !ms[2]) return -1;
  *n = 3;
#ifdef XT_TEST_NVDB
  xt_model *lv = tn_sparse_model(1, 24, 48, 0.0), *dv = tn_sparse_model(0, 24, 48, 0.0);
  if (!lv || !dv || tn_default_materials(lv)) return -1;
  ms[3] = tn_nvdb_of(lv, XT_NVDB_Q_FP8, 0.0, 0.0, NULL);
  ms[4] = tn_nvdb_of(dv, XT_NVDB_Q_FLOAT, 0.0, 0.0, NULL);
  xt_model_free(lv);
  xt_model_free(dv);
  if (!ms[3] || !ms[4]) return -1;
  *n = 5;
#endif
  return 0;
}

/* Channels of subsets of the mixed scene (each kind alone: it then writes every plane itself) on the
 * GPU against the float64 reference. */
XT_TEST(cuda_channels_of_every_kind_match_the_reference) {
  xt_model *all[5] = {NULL};
  int n = 0;
  XT_REQUIRE(mixed_scene(all, &n, 77) == 0);
  const int subsets[][6] = {{5, 0, 1, 2, 3, 4}, {1, 1}, {1, 2}, {2, 1, 2}, {2, 3, 4}, {2, 2, 3}, {3, 0, 1, 2}};
  const char *quick = getenv("XT_CUDA_TEST_QUICK"); /* compute-sanitizer runs: the whole scene, one pose */
  const int nsub = quick && *quick && strcmp(quick, "0") ? 1 : (int)(sizeof subsets / sizeof subsets[0]);
  const int nposes = nsub == 1 ? 1 : 3;
  for (int s = 0; s < nsub; s++) {
    xt_model *ms[5];
    int nm = 0;
    for (int i = 0; i < subsets[s][0]; i++)
      if (subsets[s][1 + i] < n) ms[nm++] = all[subsets[s][1 + i]];
    if (nm < subsets[s][0]) continue; /* a NanoVDB subset without NanoVDB */
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, nm);
    XT_REQUIRE(p);
    xt_chanset cs;
    xt_msg msg;
    XT_REQUIRE(xt_proj_channels(p, &cs, &msg) == 0);
    const double angles[][2] = {{0, 0}, {41, -12}, {-115, 25}};
    for (int a = 0; a < nposes; a++) {
      xt_geometry g = geom("fd20-256", angles[a][0], angles[a][1]);
      double err, mx, l2;
      XT_REQUIRE(compare_channels(p, ms, nm, &cs, &g, &err, &mx, &l2) == 0);
      XT_CHECK_MSG(err <= 1e-4 * mx && l2 < 1e-5 && mx > 0, "subset %d (%d models, %d channels), pose %d: max %g of %g, rel L2 %g",
                   s, nm, cs.n, a, err, mx, l2);
      printf("  subset %d (%d models, %d channels) pose %d: max err %.2e of max, rel L2 %.2e\n", s, nm, cs.n, a,
             err / mx, l2);
    }
    xt_proj_destroy(p);
  }
  for (int i = 0; i < n; i++) xt_model_free(all[i]);
}

XT_TEST(cuda_chain_of_a_mixed_scene_matches_cpu) {
  xt_model *all[5] = {NULL};
  int n = 0;
  XT_REQUIRE(mixed_scene(all, &n, 78) == 0);
  chain_matches_cpu(all, n, 0, 1);
  for (int i = 0; i < n; i++) xt_model_free(all[i]);
}

/* The automatic window on the GPU (k_auto_hist, k_auto_pick) against the CPU's, noise-free: the
 * head with defects, a shutter on each side (the collimated-out rows and columns are not counted:
 * behind the lead the attenuation is the floor's ln(flat), which would set the 99.5 % point), edge
 * enhancement and the recursive filter on, 3 frames, binned 1 and 2: windows and levels within
 * 0.01, processed codes within proc_bar. Then DSA switched on by hand (the automatic window of the
 * subtracted image: frames 2 and 3 against the first, noise-free, so the floor's 0.5 wide window)
 * the same. */
XT_TEST(cuda_automatic_window_matches_cpu) {
  const int dim[3] = {96, 96, 96};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 2.0, XT_VOXEL_U8, &m, NULL) == 0);
  for (int binning = 1; binning <= 2; binning++)
    for (int dsa = 0; dsa < 2; dsa++) {
      xt_chain_params prm = xt_chain_params_default();
      XT_CHECK(prm.window == 0);
      prm.quantum_noise = 0;
      prm.e_noise_adu = 0;
      prm.mas = FULL_SCALE_MAS;
      prm.binning = binning;
      prm.defect_fraction = 0.003;
      prm.defect_lines = 2;
      prm.shutter[0] = prm.shutter[1] = 0.1;
      prm.shutter[2] = 0.15;
      prm.dsa = dsa;
      both o;
      memset(&o, 0, sizeof o);
      XT_REQUIRE(run_both(m, &prm, "fd20-256", 3, &o) == 0);
      const size_t no = 256 * 256 / (size_t)(binning * binning);
      int dproc = 0;
      for (size_t i = 0; i < no; i++) {
        const int d = abs((int)o.proc[1][i] - (int)o.proc[0][i]);
        dproc = d > dproc ? d : dproc;
      }
      const int bar = proc_bar(o.w[0], o.l[0], o.w[1], o.l[1]);
      printf("# binning %d, dsa %d: window %.5f / %.5f, level %.5f / %.5f; worst processed difference %d (bar %d)\n",
             binning, dsa, o.w[0], o.w[1], o.l[0], o.l[1], dproc, bar);
      XT_CHECK(o.w[0] >= 0.5 && (dsa || o.w[0] > 2));
      XT_CHECK_MSG(dproc <= bar, "binning %d, dsa %d: processed: worst difference %d (bar %d)", binning, dsa, dproc, bar);
      free_both(&o);
    }
  xt_model_free(m);
}

XT_TEST(cuda_chain_noise_agrees_statistically) {
  xt_chain_params prm = xt_chain_params_default();
  prm.mas = 0.003;
  both o;
  memset(&o, 0, sizeof o);
  XT_REQUIRE(run_both(NULL, &prm, "fd20-256", 1, &o) == 0);
  double m[2] = {0, 0}, v[2] = {0, 0};
  const size_t np = 256 * 256;
  for (int b = 0; b < 2; b++) {
    for (size_t i = 0; i < np; i++) m[b] += o.D[b][i] / o.S[b][i];
    m[b] /= np;
    for (size_t i = 0; i < np; i++) v[b] += pow(o.D[b][i] / o.S[b][i] - m[b], 2);
    v[b] /= np;
  }
  XT_CHECK_MSG(fabs(m[1] / m[0] - 1) <= 1e-3, "mean %g vs %g", m[1], m[0]);
  XT_CHECK_MSG(fabs(v[1] / v[0] - 1) <= 0.03, "relative variance %g vs %g", v[1], v[0]);
  XT_CHECK(memcmp(o.D[0], o.D[1], np * sizeof(float)) != 0); /* the noise is there */
  free_both(&o);
}

XT_TEST(cuda_replay_is_bit_identical) {
  const int dim[3] = {64, 64, 64};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 3.0, XT_VOXEL_F32, &m, NULL) == 0);
  xt_model *ms[1] = {m};
  static uint16_t raw[3][4][512 * 512], proc[3][4][512 * 512];
  const uint16_t mark = 0xabcd;
  for (int run = 0; run < 3; run++) {
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, 1);
    xt_chain *c = NULL;
    xt_chain_params prm = xt_chain_params_default();
    XT_REQUIRE(p && xt_chain_create(&prm, p, &c, NULL) == 0);
    /* the second run's frames land in page-locked memory (the copy-out's direct path, as the
     * server's frame pool), the first run's in plain memory (the staged path): the same bytes. The
     * third run's middle two processed frames are unread (XT_ACQ_PROC_UNREAD's, the server's when no
     * client takes processed frames): made but not copied out, so the last one is still the same */
    uint16_t *pin = NULL;
    if (run == 1) XT_REQUIRE(xt_host_alloc(XT_BACKEND_CUDA, 2 * sizeof raw[0][0], (void **)&pin, NULL) == 0);
    for (int f = 0; f < 4; f++) {
      xt_geometry g = geom("fd20-512", -30.0 + 20 * f, 0);
      const int unread = run == 2 && (f == 1 || f == 2);
      for (size_t i = 0; i < 512 * 512; i++) proc[run][f][i] = mark;
      xt_chain_out out = {pin ? pin : raw[run][f], pin ? pin + 512 * 512 : proc[run][f], NULL, NULL, unread};
      XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)(1000 + f), &out, NULL) == 0);
      if (pin) {
        memcpy(raw[run][f], pin, sizeof raw[0][0]);
        memcpy(proc[run][f], pin + 512 * 512, sizeof proc[0][0]);
      }
    }
    xt_host_free(XT_BACKEND_CUDA, pin);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
  }
  for (int run = 1; run < 3; run++)
    for (int f = 0; f < 4; f++) {
      XT_CHECK(memcmp(raw[0][f], raw[run][f], sizeof raw[0][f]) == 0);
      if (run == 2 && (f == 1 || f == 2)) {
        size_t kept = 0;
        for (size_t i = 0; i < 512 * 512; i++) kept += proc[2][f][i] == mark;
        XT_CHECK_MSG(kept == 512 * 512, "unread frame %d: %zu of %d pixels left alone", f, kept, 512 * 512);
      } else
        XT_CHECK_MSG(memcmp(proc[0][f], proc[run][f], sizeof proc[0][f]) == 0, "run %d frame %d", run, f);
    }
  XT_CHECK(memcmp(raw[0][0], raw[0][1], sizeof raw[0][0]) != 0);
  xt_model_free(m);
}

/* One model's chain, fused (run 0) and separate (run 1), 2 frames with quantum and electronic noise
 * in detector mode md: the expected and blurred signals, raw and processed frames, bit for bit; the fused
 * run took the fused path, the other did not. *lam_lo, *lam_hi: the range of the first frame's
 * quanta (lam = S^2/Q lies between S / kV and S / 10 keV: no absorbed quantum carries more than kV
 * keV or, at 80 kV through the filters, less than 10), widened. */
static void fused_equals_separate(xt_model *m, double mas, const xt_detector_mode *md, double *lam_lo,
                                  double *lam_hi) {
  xt_model *ms[1] = {m};
  const char *mode = md->name;
  const size_t np = (size_t)md->cols * md->rows;
  float *S[2], *D[2];
  uint16_t *raw[2], *proc[2];
  double kv = 0;
  for (int run = 0; run < 2; run++) {
    S[run] = malloc(np * sizeof(float));
    D[run] = malloc(np * sizeof(float));
    raw[run] = malloc(np * sizeof(uint16_t));
    proc[run] = malloc(np * sizeof(uint16_t));
    XT_REQUIRE(S[run] && D[run] && raw[run] && proc[run]);
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, 1);
    xt_chain *c = NULL;
    xt_chain_params prm = xt_chain_params_default();
    prm.mas = mas;
    kv = prm.kv;
    XT_REQUIRE(p && xt_chain_create(&prm, p, &c, NULL) == 0);
    c->unfused = run;
    xt_chain_out out = {raw[run], proc[run], S[run], D[run], 0};
    for (int f = 0; f < 2; f++) {
      xt_geometry g = xt_tc_geom_of(md, 35.0 * f, -10.0 * f, 0);
      XT_REQUIRE(xt_chain_frame(c, &g, (uint64_t)(7 + f), &out, NULL) == 0);
    }
    XT_CHECK_MSG(c->fused_frames == (run ? 0 : 2), "%s, mAs %g, run %d: %ld fused frames", mode, mas, run,
                 c->fused_frames);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
  }
  for (size_t i = 0; i < np; i++)
    if (S[0][i] > 0.f) {
      *lam_hi = fmax(*lam_hi, S[0][i] / kv);
      *lam_lo = fmin(*lam_lo, S[0][i] / 10.0);
    }
  XT_CHECK_MSG(memcmp(S[0], S[1], np * sizeof(float)) == 0, "%s, mAs %g: expected signals differ", mode, mas);
  XT_CHECK_MSG(memcmp(D[0], D[1], np * sizeof(float)) == 0, "%s, mAs %g: blurred signals differ", mode, mas);
  XT_CHECK_MSG(memcmp(raw[0], raw[1], np * sizeof(uint16_t)) == 0, "%s, mAs %g: raw differs", mode, mas);
  XT_CHECK_MSG(memcmp(proc[0], proc[1], np * sizeof(uint16_t)) == 0, "%s, mAs %g: processed differs", mode, mas);
  for (int run = 0; run < 2; run++) {
    free(S[run]);
    free(D[run]);
    free(raw[run]);
    free(proc[run]);
  }
}

/* The fused path and the separate stage, bit for bit (fused_equals_separate), for both voxel types at
 * four exposures, so that the fused path's float PTRS (stage_detect.cu) meets pixels of a few quanta,
 * of about 10 (the inversion's edge) and of over 10^6 and past 2^22 (its resumed double path): the
 * runs must reach both ends. */
XT_TEST(cuda_fused_detect_equals_the_separate_stage) {
  const int dim[3] = {80, 80, 80};
  const int types[2] = {XT_VOXEL_U8, XT_VOXEL_F32};
  const double mas[4] = {0.0002, 0.02, 2.0, 40.0}; /* the head's quanta: 1-120, 100-12,000, 1e4-1.2e6, 2e5-2.4e7 */
  double lam_max = 0, lam_min = 1e300; /* lam's lower bound's largest, its upper bound's smallest */
  for (int k = 0; k < 2; k++)
    for (int e = 0; e < 4; e++) {
      xt_model *m = NULL;
      XT_REQUIRE(xt_phantom_head_model(dim, 2.4, types[k], &m, NULL) == 0);
      fused_equals_separate(m, mas[e], xt_mode_find("fd20-256"), &lam_min, &lam_max);
      xt_model_free(m);
    }
  XT_CHECK_MSG(lam_max > 4194304.0 && lam_min < 10.0, "quanta from %g up to at least %g: the range is not covered",
               lam_min, lam_max);
}

/* The same in a frame of 250 x 251 pixels, which cuts the projection's warps (XT_CUDA_WARP_W x
 * XT_CUDA_WARP_H pixels) at its right and bottom edges: the fused projection leaves out the channels
 * that no lane of a warp crosses (proj_voxel.cu, spec_sum), and a warp there has lanes outside the
 * frame, gone before the others ask which channels their warp crosses. */
XT_TEST(cuda_fused_detect_in_a_ragged_frame) {
  const int dim[3] = {80, 80, 80};
  xt_model *m = NULL;
  XT_REQUIRE(xt_phantom_head_model(dim, 2.4, XT_VOXEL_U8, &m, NULL) == 0);
  xt_detector_mode md = *xt_mode_find("fd20-256");
  md.name = "fd20-256 cut to 250 x 251";
  md.cols = 250;
  md.rows = 251;
  XT_CHECK(md.cols % XT_CUDA_WARP_W != 0 && md.rows % XT_CUDA_WARP_H != 0);
  double lo = 1e300, hi = 0;
  fused_equals_separate(m, 2.0, &md, &lo, &hi);
  xt_model_free(m);
}

/* Instruments fused into the spectral projection (the default, cuda_pipeline.cu render_fused): the
 * thorax (4 mm labels) and three guidewires of 2,000 points, the third 600 mm to the side (outside
 * every frame's field: its segments flag nothing), through the chain at fd20-256 with noise. Run 0
 * takes the fused path (XT_INSTR_FUSED unset), run 1 the chain's separate stage (the planes,
 * instruments added by their own finish), run 2 the same with XT_INSTR_FUSED=0: signals, raw and processed
 * frames bit for bit. The frames are poses A, B, A with the seeds 7, 8, 7: frame 2's expected and
 * blurred signals equal frame 0's bit for bit (its raw and processed frames carry lag and the
 * temporal filter's state), so the accumulators the voxel kernel consumed were back at zero. With
 * each splat kernel (XT_INSTR_SPLAT unset, compact and run). */
static void wire_arc(int k, int n, double *pts) {
  const double R = 60.0 + 6.0 * k, y = -40.0 + 8.0 * k, a0 = 0.3 * k;
  for (int i = 0; i < n; i++) {
    const double t = a0 + 2.6 * i / (n - 1);
    pts[3 * i] = R * cos(t) - 20.0;
    pts[3 * i + 1] = y + 5.0 * sin(3.0 * t);
    pts[3 * i + 2] = R * sin(t) - 30.0;
  }
}

/* splat: the instruments' splat kernel for all four runs (XT_INSTR_SPLAT, NULL: the default). Runs:
 * fused (the default), fused with the separate detect stage, unfused (XT_INSTR_FUSED=0), unfused
 * with the splat beside the voxels on a side stream (XT_INSTR_SIDE): every frame of the four the
 * same bit for bit. */
static void fused_with_instruments(const char *splat) {
  enum { NPTS = 2000, NW = 3, NF = 3, NRUN = 4 };
  xt_model *ms[1 + NW] = {NULL};
  XT_REQUIRE(xt_phantom_thorax_model(4.0, &ms[0], NULL) == 0);
  xt_instr_device gw;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", NPTS, NULL) == 0);
  static double pts[3 * NPTS];
  for (int k = 0; k < NW; k++) {
    char name[16];
    snprintf(name, sizeof name, "wire%d", k);
    wire_arc(k, NPTS, pts);
    XT_REQUIRE(xt_model_from_instr(&gw, pts, NPTS, name, &ms[1 + k], NULL) == 0);
  }
  ms[NW]->placement.t[0] = 600; /* outside the field, in front of the source */
  ms[NW]->placement.t[2] = 600;
  const xt_detector_mode *md = xt_mode_find("fd20-256");
  const size_t np = (size_t)md->cols * md->rows;
  const char *old = getenv("XT_INSTR_FUSED");
  char *saved = old ? strdup(old) : NULL;
  const char *olds = getenv("XT_INSTR_SPLAT");
  char *saveds = olds ? strdup(olds) : NULL;
  const char *oldside = getenv("XT_INSTR_SIDE");
  char *savedside = oldside ? strdup(oldside) : NULL;
  if (splat) setenv("XT_INSTR_SPLAT", splat, 1);
  else unsetenv("XT_INSTR_SPLAT");
  float *S[NRUN][NF], *D[NRUN][NF];
  uint16_t *raw[NRUN][NF], *proc[NRUN][NF];
  for (int run = 0; run < NRUN; run++) {
    if (run == 0) unsetenv("XT_INSTR_FUSED"); /* read when the projector is created */
    else setenv("XT_INSTR_FUSED", run == 1 ? "1" : "0", 1);
    if (run == 3) setenv("XT_INSTR_SIDE", "1", 1);
    else unsetenv("XT_INSTR_SIDE");
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, 1 + NW);
    xt_chain *c = NULL;
    xt_chain_params prm = xt_chain_params_default();
    prm.mas = 2.0;
    XT_REQUIRE(p && xt_chain_create(&prm, p, &c, NULL) == 0);
    c->unfused = run == 1;
    for (int f = 0; f < NF; f++) {
      S[run][f] = malloc(np * sizeof(float));
      D[run][f] = malloc(np * sizeof(float));
      raw[run][f] = malloc(np * sizeof(uint16_t));
      proc[run][f] = malloc(np * sizeof(uint16_t));
      XT_REQUIRE(S[run][f] && D[run][f] && raw[run][f] && proc[run][f]);
      xt_chain_out out = {raw[run][f], proc[run][f], S[run][f], D[run][f], 0};
      xt_geometry g = xt_tc_geom_of(md, f == 1 ? 35.0 : 0.0, f == 1 ? -10.0 : 0.0, 0);
      xt_msg msg = {{0}};
      const int rc = xt_chain_frame(c, &g, (uint64_t)(f == 1 ? 8 : 7), &out, &msg);
      XT_REQUIRE_MSG(rc == 0, "run %d frame %d: %s", run, f, msg.text);
    }
    XT_CHECK_MSG(c->fused_frames == (run ? 0 : NF), "run %d: %ld fused frames", run, c->fused_frames);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
  }
  if (saved) setenv("XT_INSTR_FUSED", saved, 1);
  else unsetenv("XT_INSTR_FUSED");
  free(saved);
  if (saveds) setenv("XT_INSTR_SPLAT", saveds, 1);
  else unsetenv("XT_INSTR_SPLAT");
  free(saveds);
  if (savedside) setenv("XT_INSTR_SIDE", savedside, 1);
  else unsetenv("XT_INSTR_SIDE");
  free(savedside);
  for (int run = 1; run < NRUN; run++)
    for (int f = 0; f < NF; f++) {
      XT_CHECK_MSG(memcmp(S[0][f], S[run][f], np * sizeof(float)) == 0, "run %d frame %d: expected signals differ", run, f);
      XT_CHECK_MSG(memcmp(D[0][f], D[run][f], np * sizeof(float)) == 0, "run %d frame %d: blurred signals differ", run, f);
      XT_CHECK_MSG(memcmp(raw[0][f], raw[run][f], np * sizeof(uint16_t)) == 0, "run %d frame %d: raw differs", run, f);
      XT_CHECK_MSG(memcmp(proc[0][f], proc[run][f], np * sizeof(uint16_t)) == 0, "run %d frame %d: processed differs", run, f);
    }
  XT_CHECK_MSG(memcmp(S[0][0], S[0][2], np * sizeof(float)) == 0, "the same frame twice: signals differ");
  XT_CHECK_MSG(memcmp(D[0][0], D[0][2], np * sizeof(float)) == 0, "the same frame twice: blurred signals differ");
  XT_CHECK(memcmp(S[0][0], S[0][1], np * sizeof(float)) != 0); /* the poses differ */
  { /* the wires are in the field: the thorax alone's frame 0 differs from the scene's */
    xt_proj *p = proj(XT_BACKEND_CUDA, ms, 1);
    xt_chain *c = NULL;
    xt_chain_params prm = xt_chain_params_default();
    prm.mas = 2.0;
    XT_REQUIRE(p && xt_chain_create(&prm, p, &c, NULL) == 0);
    xt_chain_out out = {raw[1][0], proc[1][0], S[1][0], D[1][0], 0};
    xt_geometry g = xt_tc_geom_of(md, 0.0, 0.0, 0);
    XT_REQUIRE(xt_chain_frame(c, &g, 7, &out, NULL) == 0);
    size_t nd = 0;
    for (size_t i = 0; i < np; i++) nd += S[1][0][i] != S[0][0][i];
    XT_CHECK_MSG(nd > 100, "the wires change %zu pixels of the expected signal", nd);
    xt_chain_destroy(c);
    xt_proj_destroy(p);
  }
  for (int run = 0; run < NRUN; run++)
    for (int f = 0; f < NF; f++) {
      free(S[run][f]);
      free(D[run][f]);
      free(raw[run][f]);
      free(proc[run][f]);
    }
  for (int i = 0; i < 1 + NW; i++) xt_model_free(ms[i]);
}

XT_TEST(cuda_fused_detect_with_instruments_equals_the_separate_stage) { fused_with_instruments(NULL); }

/* The same with the compact splat (XT_INSTR_SPLAT=compact, proj_instr.cu): fused and separate agree
 * bit for bit with it too. */
XT_TEST(cuda_fused_detect_with_compact_splat_equals_the_separate_stage) { fused_with_instruments("compact"); }
/* And with the run splat (XT_INSTR_SPLAT=run: a block per run of segments). */
XT_TEST(cuda_fused_detect_with_run_splat_equals_the_separate_stage) { fused_with_instruments("run"); }

XT_TEST_MAIN_CUDA(XT_ENTRY(cuda_panel_faults_match_cpu) XT_ENTRY(cuda_channels_match_the_reference) XT_ENTRY(cuda_channels_of_large_labels_match_the_reference)
                 XT_ENTRY(cuda_chain_matches_cpu_without_noise) XT_ENTRY(cuda_defect_interpolation_follows_the_defect_map)
                 XT_ENTRY(cuda_channels_of_every_kind_match_the_reference) XT_ENTRY(cuda_chain_of_a_mixed_scene_matches_cpu)
                 XT_ENTRY(cuda_chain_noise_agrees_statistically) XT_ENTRY(cuda_replay_is_bit_identical)
                 XT_ENTRY(cuda_fused_detect_equals_the_separate_stage) XT_ENTRY(cuda_fused_detect_in_a_ragged_frame)
                 XT_ENTRY(cuda_automatic_window_matches_cpu)
                 XT_ENTRY(cuda_fused_detect_with_instruments_equals_the_separate_stage)
                 XT_ENTRY(cuda_fused_detect_with_compact_splat_equals_the_separate_stage)
                 XT_ENTRY(cuda_fused_detect_with_run_splat_equals_the_separate_stage))
