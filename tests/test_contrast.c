/* The contrast agent (issue 26, docs/contrast.md) on the CPU: iodine's mass attenuation across its K
 * edge against NIST's table, the bolus model against closed forms and quadrature written here, and
 * a frame whose region holds iodine against the static render of the same scene whose region's
 * material is blood with that iodine (the default table's iodine_contrast: 10 mg I/mL), through the
 * line integrals, the material channels and the imaging chain (raw, processed, DSA). */
#include <float.h>
#include <stdio.h>
#include <unistd.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_basis.h"
#include "xt_contrast.h"
#include "xt_gmm.h"
#include "xt_instr.h"
#ifdef XT_TEST_HAVE_LOADERS
#include "xt_load.h"
#endif
#include "xt_phantom.h"
#include "xt_test.h"
#include "xt_test_instr.h"

/* ---- iodine ------------------------------------------------------------------------------------ */

/* NIST Standard Reference Database 126 (Hubbell & Seltzer, X-Ray Mass Attenuation Coefficients,
 * Table 3, Z = 53: physics.nist.gov/PhysRefData/XrayMassCoef/ElemTab/z53.html), mu/rho in cm^2/g,
 * typed in here as the independent oracle; the K edge at 33.1694 keV is listed twice (below, above). */
static const double nist_e[] = {30.0, 33.1694, 33.1694, 40.0, 50.0, 60.0, 80.0, 100.0};
static const double nist_mr[] = {8.561, 6.553, 35.82, 22.10, 12.32, 7.579, 3.510, 1.942};

/* NIST's own interpolation: log-log between the rows that bracket e on e's side of the edge. */
static double nist_iodine(double e) {
  const int n = (int)(sizeof nist_e / sizeof nist_e[0]);
  for (int i = 0; i + 1 < n; i++) {
    if (nist_e[i + 1] == nist_e[i]) continue; /* the edge's two rows */
    if (e >= nist_e[i] && e <= nist_e[i + 1]) {
      const double f = log(e / nist_e[i]) / log(nist_e[i + 1] / nist_e[i]);
      return exp(log(nist_mr[i]) + f * log(nist_mr[i + 1] / nist_mr[i]));
    }
  }
  return NAN;
}

XT_TEST(iodine_k_edge_against_nist) {
  xt_msg msg;
  double below = 0, above = 0;
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_IODINE, 33.16, &below, &msg) == 0);
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_IODINE, 33.18, &above, &msg) == 0);
  /* just below and just above the edge, NIST's edge rows */
  XT_CHECK_NEAR(below, 6.553, 0.05 * 6.553);
  XT_CHECK_NEAR(above, 35.82, 0.05 * 35.82);
  XT_CHECK(above / below > 4.5 && above / below < 6.5); /* the jump: 5.47 in NIST's table */
  /* and across the diagnostic range, each side of the edge */
  const double e[] = {31.0, 33.0, 33.5, 35.0, 45.0, 55.0, 70.0, 90.0};
  for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
    double mr = 0;
    XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_IODINE, e[i], &mr, &msg) == 0);
    const double ref = nist_iodine(e[i]);
    XT_CHECK_MSG(fabs(mr - ref) <= 0.05 * ref, "%g keV: %g against NIST %g cm^2/g", e[i], mr, ref);
  }
}

/* ---- the bolus model ---------------------------------------------------------------------------- */

/* P(a, x) for integer a: 1 - e^-x sum_{k<a} x^k / k!. */
static double p_int(int a, double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < a; k++) {
    term *= x / k;
    sum += term;
  }
  return 1.0 - exp(-x) * sum;
}

/* The gamma variate written out here: t^alpha e^(-t/beta) / (beta^(alpha+1) Gamma(alpha+1)). */
static double h_test(double t, double alpha, double beta) {
  return t > 0 ? pow(t, alpha) * exp(-t / beta) / (pow(beta, alpha + 1) * tgamma(alpha + 1)) : 0.0;
}

/* Simpson's rule over [a, b] in n (even) steps. */
static double simpson(double (*f)(double, const void *), const void *arg, double a, double b, int n) {
  const double h = (b - a) / n;
  double s = f(a, arg) + f(b, arg);
  for (int i = 1; i < n; i++) s += (i & 1 ? 4.0 : 2.0) * f(a + i * h, arg);
  return s * h / 3.0;
}

typedef struct gv_arg {
  double alpha, beta, shift;
} gv_arg;
static double gv_f(double t, const void *a) {
  const gv_arg *g = a;
  return h_test(g->shift - t, g->alpha, g->beta);
}

XT_TEST(gamma_variate_closed_forms) {
  /* the incomplete gamma function against its closed form for integer a, both branches */
  for (int a = 1; a <= 6; a++)
    for (double x = 0.05; x < 40.0; x *= 1.7) XT_CHECK_NEAR(xt_gamma_p(a, x), p_int(a, x), 1e-12);
  /* the density, and its distribution against quadrature, for a non-integer shape */
  const double alpha = 2.6, beta = 0.45;
  for (double t = 0.1; t < 10.0; t += 0.7) {
    XT_CHECK_NEAR(xt_gv_pdf(t, alpha, beta), h_test(t, alpha, beta), 1e-12 * (1 + h_test(t, alpha, beta)));
    gv_arg g = {alpha, beta, t};
    const double q = simpson(gv_f, &g, 0.0, t, 4000); /* int_0^t h(t - u) du = H(t) */
    XT_CHECK_NEAR(xt_gv_cdf(t, alpha, beta), q, 1e-9);
  }
  XT_CHECK(xt_gv_pdf(-1.0, alpha, beta) == 0.0 && xt_gv_cdf(0.0, alpha, beta) == 0.0);
}

typedef struct inj_arg {
  const xt_injection *in;
  const xt_bolus *b;
} inj_arg;

/* The finite injection by quadrature: (C r / F) int_0^T h(t - t_a - tau) dtau. */
static double conv_f(double tau, const void *a) {
  const gv_arg *g = a;
  return h_test(g->shift - tau, g->alpha, g->beta);
}

static double conc_s(double t, const void *a) {
  const inj_arg *p = a;
  return xt_injection_conc(p->in, p->b, p->in->t0_ns + (int64_t)llround(t * 1e9));
}

XT_TEST(bolus_curve_against_convolution_and_mass) {
  const xt_bolus b = {83.0, 0.5, 3.0, 0.35};
  xt_injection in = {0, 15.0, 30.0, 350.0, 5000000000LL, INT64_MAX}; /* 15 mL/s for 2 s from t0 = 5 s */
  const double T = in.volume_ml / in.rate_ml_s, k = in.agent_mg_ml * in.rate_ml_s / b.flow_ml_s;
  XT_CHECK_NEAR(xt_injection_duration_s(&in), 2.0, 1e-15);
  /* nothing before the bolus arrives */
  XT_CHECK(xt_injection_conc(&in, &b, in.t0_ns - 1000000000LL) == 0.0);
  XT_CHECK(xt_injection_conc(&in, &b, in.t0_ns + 400000000LL) == 0.0);
  /* the convolution of the rate with the transit, by quadrature */
  double peak = 0;
  for (double t = 0.6; t < 12.0; t += 0.37) {
    gv_arg g = {b.alpha, b.beta_s, t - b.arrival_s};
    const double q = k * simpson(conv_f, &g, 0.0, T, 20000);
    const double c = xt_injection_conc(&in, &b, in.t0_ns + (int64_t)llround(t * 1e9));
    XT_CHECK_MSG(fabs(c - q) <= 1e-6 * k, "t %g s: %.9g against quadrature %.9g mg/mL", t, c, q);
    if (c > peak) peak = c;
  }
  XT_CHECK(peak > 0.5 * k && peak <= k); /* a 2 s injection nearly reaches the plateau C r / F */
  /* mass: F int c dt = C V (Stewart-Hamilton) */
  inj_arg p = {&in, &b};
  const double mass = b.flow_ml_s * simpson(conc_s, &p, 0.0, 40.0, 40000);
  XT_CHECK_MSG(fabs(mass - in.agent_mg_ml * in.volume_ml) <= 1e-5 * in.agent_mg_ml * in.volume_ml,
               "iodine through the region %.6f mg, injected %.6f mg", mass, in.agent_mg_ml * in.volume_ml);
  /* stopped half way: half the iodine */
  xt_injection half = in;
  half.stop_ns = in.t0_ns + 1000000000LL;
  XT_CHECK_NEAR(xt_injection_duration_s(&half), 1.0, 1e-12);
  inj_arg ph = {&half, &b};
  XT_CHECK_NEAR(b.flow_ml_s * simpson(conc_s, &ph, 0.0, 40.0, 40000), 0.5 * in.agent_mg_ml * in.volume_ml,
                1e-5 * in.agent_mg_ml * in.volume_ml);
  /* a short bolus of volume V: (C V / F) h(t - t_a), h taken at the injection's middle (T = 5 ms:
   * the rest is O(T^2 h'') ) */
  xt_injection bolus = {0, 1000.0, 5.0, 350.0, 0, INT64_MAX}; /* 5 mL in 5 ms */
  for (double t = 0.7; t < 6.0; t += 0.41) {
    const double c = xt_injection_conc(&bolus, &b, (int64_t)llround(t * 1e9));
    const double ref = 350.0 * 5.0 / b.flow_ml_s * h_test(t - b.arrival_s - 0.0025, b.alpha, b.beta_s);
    XT_CHECK_MSG(fabs(c - ref) <= 1e-3 * ref + 1e-9, "bolus at %g s: %g against %g mg/mL", t, c, ref);
  }
  xt_msg msg;
  xt_bolus bad = b;
  bad.flow_ml_s = 0;
  XT_CHECK(xt_bolus_check(&bad, "aorta", &msg) == XT_EINVAL && strstr(msg.text, "flow_ml_s"));
  XT_CHECK(xt_bolus_check(&b, "aorta", &msg) == 0);
}

/* ---- frames ------------------------------------------------------------------------------------- */

#define VOXEL_MM 4.0

/* The oracle: the thorax whose aorta is the default table's iodine_contrast (blood + 10 mg I/mL),
 * no region flagged. */
static int thorax_static(xt_model **out, xt_msg *msg) {
  int rc = xt_phantom_thorax_model(VOXEL_MM, out, msg);
  if (rc) return rc;
  xt_material_table def;
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &def, msg))) return rc;
  xt_material_table *t = xt_model_volume(*out)->materials;
  memset(t->contrast, 0, sizeof t->contrast);
  t->mu[XT_THORAX_AORTA] = def.mu[XT_MAT_IODINE];
  t->density[XT_THORAX_AORTA] = def.density[XT_MAT_IODINE];
  snprintf(t->name[XT_THORAX_AORTA], XT_MATERIAL_NAME_MAX, "%s", def.name[XT_MAT_IODINE]);
  return 0;
}

static int cpu_proj(const xt_model *m, xt_proj **p, xt_msg *msg) {
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  int rc = xt_proj_create(&po, p, msg);
  return rc ? rc : xt_proj_add_model(*p, m, msg);
}

XT_TEST(region_at_c_equals_static_render) {
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  XT_REQUIRE(md);
  xt_msg msg;
  xt_model *live = NULL, *ref = NULL;
  XT_REQUIRE_MSG(xt_phantom_thorax_model(VOXEL_MM, &live, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(thorax_static(&ref, &msg) == 0, "%s", msg.text);
  xt_proj *pl = NULL, *pr = NULL;
  XT_REQUIRE_MSG(cpu_proj(live, &pl, &msg) == 0 && cpu_proj(ref, &pr, &msg) == 0, "%s", msg.text);
  xt_chanset csl, csr;
  XT_REQUIRE(xt_proj_channels(pl, &csl, &msg) == 0 && xt_proj_channels(pr, &csr, &msg) == 0);
  XT_REQUIRE(csl.n == csr.n && memcmp(csl.basis, csr.basis, sizeof csl.basis) == 0); /* the same set, same order */
  const int ci = xt_chanset_find(&csl, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0);
  xt_geometry g;
  xt_pose pose = xt_pose_default(md);
  pose.primary_deg = 20;
  XT_REQUIRE(xt_geom_compute(&pose, md, &g, &msg) == 0);
  const size_t px = (size_t)md->rows * md->cols;
  float *a = malloc(sizeof *a * px * XT_MAX_CHANNELS), *b = malloc(sizeof *b * px * XT_MAX_CHANNELS);
  float *c25 = malloc(sizeof *c25 * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b && c25);
  /* no iodine: the aorta is blood, the iodine channel empty */
  XT_REQUIRE(xt_proj_render_channels(pl, &g, a, &msg) == 0);
  for (size_t k = 0; k < px; k++) XT_CHECK(a[ci * px + k] == 0.f);
  /* 10 mg/mL in the aorta: the channels equal the static scene's bit for bit */
  double rho[256] = {0};
  rho[XT_THORAX_AORTA] = 0.010;
  XT_REQUIRE_MSG(xt_proj_set_iodine(pl, live, rho, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_proj_render_channels(pl, &g, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(pr, &g, b, &msg) == 0);
  XT_CHECK(memcmp(a, b, sizeof *a * px * (size_t)csl.n) == 0);
  size_t hit = 0;
  for (size_t k = 0; k < px; k++) hit += b[ci * px + k] > 0.f;
  XT_CHECK_MSG(hit > px / 50, "the aorta covers %zu pixels", hit); /* the oracle sees iodine */
  /* the fast channels too */
  XT_REQUIRE(xt_proj_render_channels_fast(pl, &g, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels_fast(pr, &g, b, &msg) == 0);
  XT_CHECK(memcmp(a, b, sizeof *a * px * (size_t)csl.n) == 0);
  /* the line integrals: the table entries differ by their float rounding only */
  XT_REQUIRE(xt_proj_render(pl, &g, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render(pr, &g, b, &msg) == 0);
  for (size_t k = 0; k < px; k++) XT_CHECK_NEAR(a[k], b[k], 2e-6 * fabsf(b[k]) + 1e-7);
  /* 25 mg/mL: the iodine channel 2.5 times 10's, every other channel as it was */
  XT_REQUIRE(xt_proj_render_channels(pr, &g, b, &msg) == 0);
  rho[XT_THORAX_AORTA] = 0.025;
  XT_REQUIRE(xt_proj_set_iodine(pl, live, rho, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(pl, &g, c25, &msg) == 0);
  for (int c = 0; c < csl.n; c++)
    for (size_t k = 0; k < px; k++) {
      if (c == ci) XT_CHECK_NEAR(c25[c * px + k], 2.5f * b[c * px + k], 1e-6 * b[c * px + k] + 1e-12);
      else XT_CHECK(c25[c * px + k] == b[c * px + k]);
    }
  /* back to none: the model's own */
  XT_REQUIRE(xt_proj_set_iodine(pl, live, NULL, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(pl, &g, a, &msg) == 0);
  for (size_t k = 0; k < px; k++) XT_CHECK(a[ci * px + k] == 0.f);
  /* bad iodine refused, naming the label; the projector's unchanged */
  rho[XT_THORAX_AORTA] = 0;
  rho[XT_THORAX_BONE] = 0.01; /* bone is no region */
  XT_CHECK(xt_proj_set_iodine(pl, live, rho, &msg) == XT_EINVAL && strstr(msg.text, "label 4"));
  rho[XT_THORAX_BONE] = 0;
  rho[XT_THORAX_HEART] = -1;
  XT_CHECK(xt_proj_set_iodine(pl, live, rho, &msg) == XT_EINVAL);
  rho[XT_THORAX_HEART] = NAN;
  XT_CHECK(xt_proj_set_iodine(pl, live, rho, &msg) == XT_EINVAL);
  XT_CHECK(xt_proj_set_iodine(pl, ref, NULL, &msg) == XT_ENOTFOUND);
  free(a);
  free(b);
  free(c25);
  xt_proj_destroy(pl);
  xt_proj_destroy(pr);
  xt_model_free(live);
  xt_model_free(ref);
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

/* Chain exposure `counter` of run 1 on r: iodine in the aorta (n 1) or not given (n 0). */
static int chain_frame(xt_acq_renderer *r, const xt_model *m, const xt_detector_mode *md, int dsa, uint64_t counter,
                       double aorta_g_cm3, int n, uint16_t *raw, uint16_t *proc, int *orows, int *ocols,
                       xt_msg *msg) {
  planes b = {raw, proc};
  xt_acq_iodine io = {m, XT_THORAX_AORTA, aorta_g_cm3};
  xt_acq_request q;
  xt_acq_frame f;
  memset(&q, 0, sizeof q);
  q.pose = xt_pose_default(md);
  q.mode = md;
  q.want = XT_ACQ_WANT_CHAIN;
  q.chain = 1;
  q.chain_prm = xt_chain_params_default();
  q.chain_prm.seed = 2626;
  q.chain_prm.dsa = dsa;
  if (dsa) { /* the dsa protocol's fixed window (zero difference mid-grey): the automatic one would
              * stretch a frame without contrast's noise over the whole range */
    q.chain_prm.window = 1.0;
    q.chain_prm.level = 0.0;
  }
  q.counter = counter;
  q.run = 1;
  q.iodine = &io;
  q.niodine = n;
  q.buffers = give_planes;
  q.ctx = &b;
  const int rc = xt_acq_expose(NULL, r, &q, &f, msg);
  *orows = f.raw.rows;
  *ocols = f.raw.cols;
  return rc;
}

XT_TEST(chain_and_dsa_show_the_region) {
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  XT_REQUIRE(md);
  xt_msg msg;
  xt_model *live = NULL, *ref = NULL;
  XT_REQUIRE_MSG(xt_phantom_thorax_model(VOXEL_MM, &live, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(thorax_static(&ref, &msg) == 0, "%s", msg.text);
  xt_proj *pl = NULL, *pr = NULL;
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  XT_REQUIRE(xt_proj_create(&po, &pl, &msg) == 0 && xt_proj_create(&po, &pr, &msg) == 0);
  xt_acq_renderer rl, rr;
  xt_acq_renderer_init(&rl, pl, 2);
  xt_acq_renderer_init(&rr, pr, 2);
  XT_REQUIRE(xt_acq_renderer_add_model(&rl, live, &msg) == 0 && xt_acq_renderer_add_model(&rr, ref, &msg) == 0);
  const size_t out = (size_t)(md->rows / 2) * (md->cols / 2) + (size_t)md->rows * md->cols; /* room either way */
  uint16_t *u = calloc(out * 6, sizeof *u);
  XT_REQUIRE(u);
  int oR = 0, oC = 0;
  uint16_t *raw_l = u, *proc_l = u + out, *raw_r = u + 2 * out, *proc_r = u + 3 * out, *raw_0 = u + 4 * out,
           *proc_0 = u + 5 * out;
  /* a chain frame with 10 mg/mL latched equals the static scene's, raw and processed */
  XT_REQUIRE_MSG(chain_frame(&rl, live, md, 0, 0, 0.010, 1, raw_l, proc_l, &oR, &oC, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(chain_frame(&rr, ref, md, 0, 0, 0, 0, raw_r, proc_r, &oR, &oC, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(raw_l, raw_r, sizeof *u * out) == 0);
  XT_CHECK(memcmp(proc_l, proc_r, sizeof *u * out) == 0);

  /* DSA: a mask without iodine, then the same exposure with and without it: the subtracted frames
   * differ where the aorta projects and nowhere far from it */
  xt_acq_renderer_free(&rl);
  XT_REQUIRE(chain_frame(&rl, live, md, 1, 0, 0.0, 1, raw_0, proc_0, &oR, &oC, &msg) == 0); /* the mask */
  XT_REQUIRE(chain_frame(&rl, live, md, 1, 1, 0.0, 1, raw_0, proc_0, &oR, &oC, &msg) == 0); /* no contrast */
  xt_acq_renderer_free(&rl);
  XT_REQUIRE(chain_frame(&rl, live, md, 1, 0, 0.0, 1, raw_l, proc_l, &oR, &oC, &msg) == 0);
  XT_REQUIRE(chain_frame(&rl, live, md, 1, 1, 0.020, 1, raw_l, proc_l, &oR, &oC, &msg) == 0); /* 20 mg/mL */
  /* where the aorta is: its iodine channel at this pose, on the output grid */
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(pl, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  xt_geometry g;
  xt_pose pose = xt_pose_default(md);
  XT_REQUIRE(xt_geom_compute(&pose, md, &g, &msg) == 0);
  const int R = md->rows, C = md->cols;
  float *ch = malloc(sizeof *ch * (size_t)R * C * XT_MAX_CHANNELS);
  XT_REQUIRE(ch);
  double rho[256] = {0};
  rho[XT_THORAX_AORTA] = 0.020;
  XT_REQUIRE(xt_proj_set_iodine(pl, live, rho, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(pl, &g, ch, &msg) == 0);
  const float *io = ch + (size_t)ci * R * C;
  /* the chain's output grid: the render grid, or binned */
  XT_REQUIRE(oR > 0 && R % oR == 0 && oR * C == oC * R);
  const int f = R / oR;
  double in_sum = 0, out_sum = 0;
  long nin = 0, nout = 0;
  for (int r = 0; r < oR; r++)
    for (int c = 0; c < oC; c++) {
      double near = 0, here = 0;
      for (int dr = -4 * f; dr <= 4 * f + f - 1; dr++)
        for (int dc = -4 * f; dc <= 4 * f + f - 1; dc++) {
          const int rr_ = r * f + dr, cc = c * f + dc;
          if (rr_ < 0 || cc < 0 || rr_ >= R || cc >= C) continue;
          near += io[(size_t)rr_ * C + cc];
          if (dr >= 0 && dr < f && dc >= 0 && dc < f) here += io[(size_t)rr_ * C + cc];
        }
      const double d = fabs((double)proc_l[(size_t)r * oC + c] - (double)proc_0[(size_t)r * oC + c]);
      if (here > 1e-3 * f * f) in_sum += d, nin++;
      else if (near == 0) out_sum += d, nout++;
    }
  XT_REQUIRE_MSG(nin > 20 && nout > 20, "%ld pixels on the aorta, %ld far from it", nin, nout);
  XT_CHECK_MSG(in_sum / nin > 20.0 * (out_sum / nout + 1e-3), "DSA: %.3f on the aorta, %.3f far from it",
               in_sum / nin, out_sum / nout);
  free(ch);
  free(u);
  xt_acq_renderer_free(&rl);
  xt_acq_renderer_free(&rr);
  xt_proj_destroy(pl);
  xt_proj_destroy(pr);
  xt_model_free(live);
  xt_model_free(ref);
}

#ifdef XT_TEST_HAVE_LOADERS
/* A contrast mask loaded from a file (--convert contrast-mask): its labels present above 0 are
 * regions of iodine only. Its iodine channel with 10 mg/mL equals that of the same voxels labelled
 * iodine_contrast in the default table, and its line integral is iodine's alone. */
XT_TEST(contrast_mask_volume) {
  enum { N = 16 };
  char dir[] = "/tmp/xt_contrast_XXXXXX", path[64];
  XT_REQUIRE(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/mask.mha", dir);
  unsigned char vox[N * N * N] = {0};
  for (int k = 4; k < 12; k++)
    for (int j = 5; j < 11; j++)
      for (int i = 3; i < 13; i++) vox[i + N * (j + N * k)] = 1;
  vox[0] = 3; /* a second region, one voxel */
  FILE *f = fopen(path, "wb");
  XT_REQUIRE(f);
  fprintf(f, "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
             "DimSize = %d %d %d\nElementSpacing = 6 6 6\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n",
          N, N, N);
  XT_REQUIRE(fwrite(vox, 1, sizeof vox, f) == sizeof vox);
  fclose(f);
  xt_msg msg;
  xt_load_options lo;
  memset(&lo, 0, sizeof lo);
  XT_REQUIRE(xt_load_options_named("contrast-mask", NULL, 0, NULL, NULL, &lo, &msg) == 0);
  xt_volume *v = NULL, *w = NULL;
  XT_REQUIRE_MSG(xt_volume_load(path, &lo, &v, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(v->type == XT_VOXEL_U8 && v->materials);
  XT_CHECK(v->materials->contrast[0] == 0 && v->materials->contrast[1] == 1 && v->materials->contrast[2] == 0 &&
           v->materials->contrast[3] == 1);
  XT_CHECK(v->materials->mu[1] == 0.f && !v->materials->name[1][0]);
  lo.convert = XT_LOAD_LABELS; /* the oracle: label 1 = blood, relabelled iodine_contrast below */
  XT_REQUIRE_MSG(xt_volume_load(path, &lo, &w, &msg) == 0, "%s", msg.text);
  unlink(path);
  rmdir(dir);
  uint8_t *d = w->data;
  for (size_t k = 0; k < (size_t)N * N * N; k++) d[k] = d[k] == 1 ? XT_MAT_IODINE : XT_MAT_AIR;
  xt_model *mm = NULL, *mw = NULL;
  XT_REQUIRE(xt_model_from_volume(v, "mask", &mm, &msg) == 0 && xt_model_from_volume(w, "ref", &mw, &msg) == 0);
  xt_proj *pm = NULL, *pw = NULL;
  XT_REQUIRE(cpu_proj(mm, &pm, &msg) == 0 && cpu_proj(mw, &pw, &msg) == 0);
  xt_chanset cm, cw;
  XT_REQUIRE(xt_proj_channels(pm, &cm, &msg) == 0 && xt_proj_channels(pw, &cw, &msg) == 0);
  XT_REQUIRE(cm.n == 1 && cm.basis[0] == XT_BASIS_IODINE); /* iodine only */
  const int ci = xt_chanset_find(&cw, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0);
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  xt_geometry g;
  xt_pose pose = xt_pose_default(md);
  pose.primary_deg = 25;
  pose.secondary_deg = -10;
  XT_REQUIRE(xt_geom_compute(&pose, md, &g, &msg) == 0);
  const size_t px = (size_t)md->rows * md->cols;
  float *a = malloc(sizeof *a * px * XT_MAX_CHANNELS), *b = malloc(sizeof *b * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b);
  XT_REQUIRE(xt_proj_render(pm, &g, a, &msg) == 0);
  for (size_t k = 0; k < px; k++) XT_CHECK(a[k] == 0.f); /* nothing before an injection */
  double rho[256] = {0};
  rho[1] = 0.010;
  XT_REQUIRE_MSG(xt_proj_set_iodine(pm, mm, rho, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_proj_render_channels(pm, &g, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(pw, &g, b, &msg) == 0);
  XT_CHECK(memcmp(a, b + (size_t)ci * px, sizeof *a * px) == 0);
  size_t hit = 0;
  for (size_t k = 0; k < px; k++) hit += a[k] > 0.f;
  XT_CHECK(hit > 100);
  double mr = 0;
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_IODINE, XT_DEFAULT_ENERGY_KEV, &mr, &msg) == 0);
  XT_REQUIRE(xt_proj_render(pm, &g, b, &msg) == 0);
  for (size_t k = 0; k < px; k++) XT_CHECK_NEAR(b[k], mr * a[k], 1e-6 * mr * a[k] + 1e-9);
  free(a);
  free(b);
  xt_proj_destroy(pm);
  xt_proj_destroy(pw);
  xt_model_free(mm);
  xt_model_free(mw);
}
#else
XT_TEST(contrast_mask_volume) { printf("  (no loaders in this build: skipped)\n"); }
#endif

/* ---- an instrument's lumen ------------------------------------------------------------------------ */

/* The oracle's chord: the ray src + s w (w unit) through the infinite cylinder of radius r about the
 * line a + t e (e unit), by the textbook quadratic (not xt_tube.h's form). */
static double cyl_chord(xt_vec3 src, xt_vec3 w, xt_vec3 a, xt_vec3 e, double r) {
  const xt_vec3 q = xt_v3_sub(src, a);
  const xt_vec3 qp = xt_v3_sub(q, xt_v3_scale(e, xt_v3_dot(q, e))), wp = xt_v3_sub(w, xt_v3_scale(e, xt_v3_dot(w, e)));
  const double A = xt_v3_dot(wp, wp), B = xt_v3_dot(qp, wp), C = xt_v3_dot(qp, qp) - r * r;
  const double disc = B * B - A * C;
  return disc > 0 && A > 0 ? 2.0 * sqrt(disc) / A : 0.0;
}

/* A catheter whose lumen is a contrast region (xt_instr_lumen_region), straight across the beam
 * through the isocentre: with iodine rho in its lumen, each pixel's line integral grows by
 * (mu/rho)_I(E) rho times the mean lumen chord of its 8 x 8 sub-rays, the chord from the closed form
 * of a cylinder of the lumen's radius (the pixels looked at see the straight lumen section only, far
 * from its ends and the marker band); the iodine channel is rho / 10 times that mean chord, every
 * other channel unchanged; 25 mg/mL is 2.5 times 10's; none gives the frame back bit for bit, and a
 * catheter whose lumen is no region renders the same frame. */
XT_TEST(catheter_lumen_against_closed_form) {
  xt_msg msg;
  xt_instr_device dev, plain;
  int lum = -1;
  XT_REQUIRE(xt_instr_catheter(&dev, "blood", 16, &msg) == 0);
  plain = dev;
  XT_REQUIRE_MSG(xt_instr_lumen_region(&dev, &lum, &msg) == 0, "%s", msg.text);
  XT_CHECK(lum == plain.mt.count && dev.mt.contrast[lum] && !dev.mt.contrast[dev.medium]);
  XT_CHECK(dev.sec[0].lumen == lum && dev.sec[2].lumen == lum && dev.sec[1].lumen == plain.sec[1].lumen); /* band: shaft */
  XT_CHECK(dev.mt.mu[lum] == dev.mt.mu[dev.medium] && !strcmp(dev.mt.name[lum], dev.mt.name[dev.medium]));
  int again = -1;
  XT_CHECK(xt_instr_lumen_region(&dev, &again, NULL) == 0 && again == lum && dev.mt.count == plain.mt.count + 1);
  xt_instr_device gw;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 16, NULL) == 0);
  XT_CHECK(xt_instr_lumen_region(&gw, NULL, &msg) == XT_EINVAL && strstr(msg.text, "lumen")); /* a solid wire */

  const xt_detector_mode md = xt_mode_custom("lumen", 40, 24, 0.3, 0.3, 800, 1200);
  xt_pose pose = xt_pose_default(&md);
  pose.primary_deg = 20;
  pose.secondary_deg = -10;
  xt_geometry g;
  XT_REQUIRE(xt_geom_compute(&pose, &md, &g, &msg) == 0);
  /* the axis along the detector's rows through the isocentre, tip 40 mm out */
  const xt_affine p2w = xt_geom_patient_to_world(&pose);
  xt_affine iw;
  XT_REQUIRE(xt_aff_invert(&p2w, &iw));
  const xt_vec3 iso = xt_v3_add(g.source, xt_v3_scale(g.d, g.pose.sod_mm)), e = g.u;
  double pts[6];
  for (int k = 0; k < 2; k++) {
    const xt_vec3 pw = xt_v3_add(iso, xt_v3_scale(e, k ? 40.0 : -40.0)), pm = xt_aff_apply(&iw, pw);
    pts[3 * k] = pm.x, pts[3 * k + 1] = pm.y, pts[3 * k + 2] = pm.z;
  }
  xt_model *m = NULL, *mp = NULL;
  XT_REQUIRE_MSG(xt_model_from_instr(&dev, pts, 2, "cath", &m, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_model_from_instr(&plain, pts, 2, "plain", &mp, &msg) == 0);
  xt_proj *p = NULL, *pp = NULL;
  XT_REQUIRE_MSG(cpu_proj(m, &p, &msg) == 0 && cpu_proj(mp, &pp, &msg) == 0, "%s", msg.text);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(p, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE);
  XT_REQUIRE(ci >= 0); /* the region brings the channel from the start */
  const size_t px = (size_t)md.rows * md.cols;
  float *a = malloc(sizeof *a * px), *b = malloc(sizeof *b * px), *c = malloc(sizeof *c * px);
  float *ch0 = malloc(sizeof *ch0 * px * XT_MAX_CHANNELS), *ch1 = malloc(sizeof *ch1 * px * XT_MAX_CHANNELS);
  double *chord = calloc(px, sizeof *chord);
  XT_REQUIRE(a && b && c && ch0 && ch1 && chord);
  XT_REQUIRE(xt_proj_render(p, &g, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render(pp, &g, b, &msg) == 0);
  XT_CHECK(memcmp(a, b, sizeof *a * px) == 0); /* the region's entry alone changes nothing */
  XT_REQUIRE(xt_proj_render_channels(p, &g, ch0, &msg) == 0);
  /* the oracle: each pixel's mean lumen chord over its sub-rays, as docs/instruments.md lays them */
  const int S = XT_INSTR_AREA_SAMPLES;
  const double r_in = dev.sec[2].r_in;
  double cmax = 0;
  for (int row = 0; row < md.rows; row++)
    for (int col = 0; col < md.cols; col++) {
      double sum = 0;
      for (int sj = 0; sj < S; sj++)
        for (int si = 0; si < S; si++) {
          const xt_vec3 d = xt_v3_sub(xt_geom_pixel_pos(&g, col + (si + 0.5) / S - 0.5, row + (sj + 0.5) / S - 0.5), g.source);
          sum += cyl_chord(g.source, xt_v3_scale(d, 1.0 / xt_v3_norm(d)), iso, e, r_in);
        }
      chord[(size_t)row * md.cols + col] = sum / (S * S);
      if (chord[(size_t)row * md.cols + col] > cmax) cmax = chord[(size_t)row * md.cols + col];
    }
  XT_REQUIRE_MSG(cmax > 0.9 * 2 * r_in, "the lumen is not in the picture (chord %g mm)", cmax);
  double mr = 0;
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_IODINE, dev.mt.energy_kev, &mr, &msg) == 0);
  double rho[256] = {0};
  rho[lum] = 0.010;
  XT_REQUIRE_MSG(xt_proj_set_iodine(p, m, rho, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_proj_render(p, &g, b, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(p, &g, ch1, &msg) == 0);
  const double dmu = mr * 0.010 * 0.1; /* 1/mm */
  size_t seen = 0;
  for (size_t k = 0; k < px; k++) {
    const double want = dmu * chord[k];
    XT_CHECK_NEAR((double)b[k] - (double)a[k], want, 2e-5 * dmu * cmax);
    if (chord[k] == 0) XT_CHECK(b[k] == a[k]); /* no sub-ray through the lumen */
    seen += chord[k] > 0.5 * cmax;
    XT_CHECK_NEAR(ch1[(size_t)ci * px + k], 0.010 * 0.1 * chord[k], 2e-5 * 0.001 * cmax);
    for (int cc = 0; cc < cs.n; cc++)
      if (cc != ci) XT_CHECK(ch1[(size_t)cc * px + k] == ch0[(size_t)cc * px + k]);
  }
  XT_CHECK_MSG(seen > (size_t)md.cols / 2, "%zu pixels through the lumen", seen);
  /* 25 mg/mL: 2.5 times 10's increment */
  rho[lum] = 0.025;
  XT_REQUIRE(xt_proj_set_iodine(p, m, rho, &msg) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, c, &msg) == 0);
  for (size_t k = 0; k < px; k++)
    XT_CHECK_NEAR((double)c[k] - a[k], 2.5 * ((double)b[k] - a[k]), 2e-5 * dmu * cmax);
  /* none again (zeros, as the server's latch sends, and NULL): the frame back bit for bit */
  memset(rho, 0, sizeof rho);
  XT_REQUIRE(xt_proj_set_iodine(p, m, rho, &msg) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, c, &msg) == 0);
  XT_CHECK(memcmp(a, c, sizeof *a * px) == 0);
  XT_REQUIRE(xt_proj_set_iodine(p, m, NULL, &msg) == 0);
  XT_REQUIRE(xt_proj_render(p, &g, c, &msg) == 0);
  XT_CHECK(memcmp(a, c, sizeof *a * px) == 0);
  /* the medium is no region: refused, naming the label */
  rho[dev.medium] = 0.01;
  XT_CHECK(xt_proj_set_iodine(p, m, rho, &msg) == XT_EINVAL && strstr(msg.text, "no contrast region"));
  XT_CHECK(xt_proj_set_iodine(pp, mp, rho, &msg) == XT_EINVAL);
  free(a);
  free(b);
  free(c);
  free(ch0);
  free(ch1);
  free(chord);
  xt_proj_destroy(p);
  xt_proj_destroy(pp);
  xt_model_free(m);
  xt_model_free(mp);
}

/* What the CUDA kind puts into each frame's descriptor for a lumen with iodine (xt_iodine_instr_lumen:
 * the region's entry and mu) and how its splat picks a segment's lumen mu from it
 * (xt_tube_mu_lumen), on the host: for every segment of a straight and a bent shape, bit for bit the
 * CPU reference's seg_integral value ((double)io.mu[lumen] - (double)mu[medium] for a hollow
 * segment), and the mu_lumen the segments had when they were laid out from a table holding the
 * iodine (what the kind did before: a segment rewrite per change); the marker band's lumen (shaft,
 * no region) and the solid parts keep their own; none gives 0 exactly; a device with no region
 * gives -1 and every segment its own; iodine outside the region is refused, naming the entry. */
XT_TEST(instr_lumen_frame_value_matches_segments) {
  xt_msg msg;
  xt_instr_device dev;
  int lum = -1;
  double pts[3 * 40], bent[3 * 40];
  XT_REQUIRE_MSG(lumen_catheter(&dev, &lum, pts, bent, &msg) == 0, "%s", msg.text);
  xt_model *m = NULL;
  XT_REQUIRE_MSG(xt_model_from_instr(&dev, pts, 40, "cath", &m, &msg) == 0, "%s", msg.text);
  xt_instr_geom own, old;
  xt_instr_device with = dev; /* the table with the iodine, as the kind rewrote it */
  XT_REQUIRE(xt_instr_geom_alloc(&dev, &own, &msg) == 0 && xt_instr_geom_alloc(&dev, &old, &msg) == 0);
  xt_iodine_tab *io = malloc(sizeof *io);
  XT_REQUIRE(io);
  const double levels[] = {0.010, 0.350, 0.120, 0.0};
  int hollow = 0, region = 0;
  for (int li = 0; li < 4; li++) {
    double rho[256] = {0};
    rho[lum] = levels[li];
    XT_REQUIRE_MSG(xt_iodine_tab_build(NULL, m, rho, io, &msg) == 0, "%s", msg.text);
    int id = -2;
    double mu = -1;
    XT_REQUIRE_MSG(xt_iodine_instr_lumen(&dev, io, &id, &mu, &msg) == 0, "%s", msg.text);
    XT_CHECK(id == lum);
    if (levels[li] > 0) XT_CHECK(mu > 0);
    else XT_CHECK(mu == 0.0); /* none: the region's float is the medium's */
    for (int l = 0; l < dev.mt.count; l++) with.mt.mu[l] = io->mu[l];
    const double mu_med = (double)dev.mt.mu[dev.medium];
    for (int sh = 0; sh < 2; sh++) {
      const double *p = sh ? bent : pts;
      XT_REQUIRE_MSG(xt_instr_geom_build(&dev, p, 40, "cath", &own, &msg) == 0, "%s", msg.text);
      XT_REQUIRE(xt_instr_geom_build(&with, p, 40, "cath", &old, &msg) == 0);
      XT_REQUIRE(own.nseg == old.nseg);
      for (int k = 0; k < own.nseg; k++) {
        const xt_tube_seg *t = &own.seg[k];
        const double got = xt_tube_mu_lumen(t, id, mu);
        XT_CHECK(memcmp(&got, &old.seg[k].mu_lumen, sizeof got) == 0);
        XT_CHECK(t->mu_wall == old.seg[k].mu_wall);
        if (t->r_in > 0.0) {
          const double ref = (double)io->mu[t->lumen] - mu_med; /* proj_cpu_instr.c's seg_integral */
          XT_CHECK(memcmp(&got, &ref, sizeof got) == 0);
          hollow++;
          region += t->lumen == lum;
        } else
          XT_CHECK(t->lumen != lum && got == t->mu_lumen);
        if (t->lumen != lum) XT_CHECK(memcmp(&got, &t->mu_lumen, sizeof got) == 0); /* the band, solid parts */
      }
    }
  }
  XT_CHECK_MSG(region > 0 && region < hollow, "%d of %d hollow segments in the region", region, hollow);
  /* a device with no region: nothing picked */
  xt_instr_device gw;
  XT_REQUIRE(xt_instr_guidewire(&gw, "blood", 64, NULL) == 0);
  xt_model *mg = NULL;
  XT_REQUIRE(xt_model_from_instr(&gw, pts, 40, "wire", &mg, &msg) == 0);
  XT_REQUIRE(xt_iodine_tab_build(NULL, mg, NULL, io, &msg) == 0);
  int id = 0;
  double mu = -1;
  XT_CHECK(xt_iodine_instr_lumen(&gw, io, &id, &mu, &msg) == 0 && id == -1 && mu == 0.0);
  /* iodine anywhere else in the table: refused, naming the entry */
  double rho[256] = {0};
  rho[lum] = 0.010;
  XT_REQUIRE(xt_iodine_tab_build(NULL, m, rho, io, &msg) == 0);
  io->mu[dev.sec[2].wall] *= 1.5f;
  XT_CHECK(xt_iodine_instr_lumen(&dev, io, &id, &mu, &msg) == XT_EINVAL && strstr(msg.text, "entry"));
  free(io);
  xt_instr_geom_free(&own);
  xt_instr_geom_free(&old);
  xt_model_free(m);
  xt_model_free(mg);
}

/* ---- a mixture's label ----------------------------------------------------------------------------- */

/* A labelled mixture of two Gaussians, blood (a region) and soft tissue: with iodine rho in the blood
 * label every ray through the blood Gaussian alone grows by the same ratio, (mu/rho)_I rho / mu_blood
 * (NIST's iodine within 1 %, xraylib's to 1e-6), the soft tissue's rays not at all; the iodine channel
 * is rho / 10 times the blood's path-equivalent (L / mu_blood), the blood channel unchanged; none gives
 * the frame back bit for bit; soft tissue is no region. */
XT_TEST(mixture_label_against_closed_form) {
  xt_msg msg;
  xt_gmm *g = NULL;
  XT_REQUIRE(xt_gmm_create(2, &g, &msg) == 0);
  double mr_b = 0, mr_s = 0, mr_i = 0;
  XT_REQUIRE(xt_basis_mass_atten(XT_BASIS_BLOOD, XT_DEFAULT_ENERGY_KEV, &mr_b, &msg) == 0 &&
             xt_basis_mass_atten(XT_BASIS_SOFT, XT_DEFAULT_ENERGY_KEV, &mr_s, &msg) == 0 &&
             xt_basis_mass_atten(XT_BASIS_IODINE, XT_DEFAULT_ENERGY_KEV, &mr_i, &msg) == 0);
  const double mu_b = mr_b * 1.06 * 0.1;
  const float c[2][3] = {{-25, 0, 0}, {25, 0, 0}};
  for (int i = 0; i < 2; i++) {
    memcpy(g->g[i].centre, c[i], sizeof c[i]);
    g->g[i].scale[0] = g->g[i].scale[1] = g->g[i].scale[2] = 6.f;
    g->g[i].quat[0] = 1.f;
    g->g[i].label = i ? XT_MAT_SOFT : XT_MAT_BLOOD;
    g->g[i].rho = (float)(i ? mr_s * 0.1 : mu_b);
  }
  g->has_labels = 1;
  XT_REQUIRE_MSG(xt_gmm_finish(g, "mix", &msg) == 0, "%s", msg.text);
  xt_model *m = NULL;
  XT_REQUIRE(xt_model_from_gmm(g, "mix", &m, &msg) == 0);
  XT_CHECK(xt_gmm_contrast_label(m, XT_MAT_SOFT + 100, &msg) == XT_EINVAL); /* no Gaussian of it */
  XT_REQUIRE_MSG(xt_gmm_contrast_label(m, XT_MAT_BLOOD, &msg) == 0, "%s", msg.text);
  xt_proj *p = NULL;
  XT_REQUIRE_MSG(cpu_proj(m, &p, &msg) == 0, "%s", msg.text);
  xt_chanset cs;
  XT_REQUIRE(xt_proj_channels(p, &cs, &msg) == 0);
  const int ci = xt_chanset_find(&cs, XT_BASIS_IODINE), cb = xt_chanset_find(&cs, XT_BASIS_BLOOD);
  XT_REQUIRE(ci >= 0 && cb >= 0); /* the region brings the channel */
  const xt_detector_mode md = xt_mode_custom("mix", 64, 32, 1.5, 1.5, 800, 1200);
  xt_pose pose = xt_pose_default(&md);
  xt_geometry geo;
  XT_REQUIRE(xt_geom_compute(&pose, &md, &geo, &msg) == 0);
  const size_t px = (size_t)md.rows * md.cols;
  float *a = malloc(sizeof *a * px), *b = malloc(sizeof *b * px), *ch0 = malloc(sizeof *ch0 * px * XT_MAX_CHANNELS),
        *ch1 = malloc(sizeof *ch1 * px * XT_MAX_CHANNELS);
  XT_REQUIRE(a && b && ch0 && ch1);
  XT_REQUIRE(xt_proj_render(p, &geo, a, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(p, &geo, ch0, &msg) == 0);
  double rho[256] = {0};
  rho[XT_MAT_BLOOD] = 0.010;
  XT_REQUIRE_MSG(xt_proj_set_iodine(p, m, rho, &msg) == 0, "%s", msg.text);
  XT_REQUIRE(xt_proj_render(p, &geo, b, &msg) == 0);
  XT_REQUIRE(xt_proj_render_channels(p, &geo, ch1, &msg) == 0);
  const double want = mr_i * 0.010 * 0.1 / mu_b; /* the ratio of the increment */
  XT_CHECK_MSG(fabs(7.579 * 0.010 * 0.1 / mu_b - want) < 0.01 * want, "(mu/rho)_I %g, NIST 7.579", mr_i);
  size_t nb = 0, ns = 0;
  for (size_t k = 0; k < px; k++) {
    const double bl = ch0[(size_t)cb * px + k]; /* the blood Gaussian's areal density: where it is */
    const double so = (double)a[k] - bl * mr_b;  /* the rest: soft tissue's */
    if (bl > 1e-3 && so < 1e-9 * a[k]) { /* the blood Gaussian alone */
      XT_CHECK_NEAR(((double)b[k] - a[k]) / a[k], want, 2e-6 * want + 1e-7 / a[k]);
      XT_CHECK_NEAR(ch1[(size_t)ci * px + k], 0.010 * 0.1 * a[k] / mu_b, 2e-6 * 0.001 * a[k] / mu_b);
      XT_CHECK_NEAR(ch1[(size_t)cb * px + k], ch0[(size_t)cb * px + k], 2e-6 * ch0[(size_t)cb * px + k]);
      nb++;
    } else if (bl == 0 && a[k] > 0) {
      XT_CHECK(b[k] == a[k]); /* soft tissue alone: no iodine */
      ns++;
    }
  }
  XT_CHECK_MSG(nb > 20 && ns > 20, "%zu pixels of the blood Gaussian alone, %zu of soft tissue", nb, ns);
  memset(rho, 0, sizeof rho);
  XT_REQUIRE(xt_proj_set_iodine(p, m, rho, &msg) == 0);
  XT_REQUIRE(xt_proj_render(p, &geo, b, &msg) == 0);
  XT_CHECK(memcmp(a, b, sizeof *a * px) == 0);
  XT_REQUIRE(xt_proj_render_channels(p, &geo, ch1, &msg) == 0);
  XT_CHECK(memcmp(ch0, ch1, sizeof *ch0 * px * (size_t)cs.n) == 0);
  rho[XT_MAT_SOFT] = 0.01;
  XT_CHECK(xt_proj_set_iodine(p, m, rho, &msg) == XT_EINVAL && strstr(msg.text, "label 2 is no contrast region"));
  free(a);
  free(b);
  free(ch0);
  free(ch1);
  xt_proj_destroy(p);
  xt_model_free(m);
}

XT_TEST_MAIN(XT_ENTRY(iodine_k_edge_against_nist) XT_ENTRY(gamma_variate_closed_forms)
                 XT_ENTRY(bolus_curve_against_convolution_and_mass) XT_ENTRY(region_at_c_equals_static_render)
                 XT_ENTRY(chain_and_dsa_show_the_region) XT_ENTRY(contrast_mask_volume)
                     XT_ENTRY(catheter_lumen_against_closed_form) XT_ENTRY(instr_lumen_frame_value_matches_segments)
                     XT_ENTRY(mixture_label_against_closed_form))
