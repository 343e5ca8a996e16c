/* The fitter's optional refinement on projections (xt_fit.h): Adam on the sum of the normalised
 * volume error and the normalised error of the mixture's line integrals against the volume's at
 * a set of poses, both as 10^(-PSNR/10):
 *   E = sum (M - mu)^2 / (N peak^2) + sum_p sum_pix (I - T)^2 / (Npix peak_T^2).
 * T is the reference projector's render of the (air-free) target volume; I the closed-form line
 * integral of each Gaussian over the whole ray (xt_gmm_line.h's form, in voxel-index space where
 * the ray keeps its world parameter), within the fit's cut-off. Per Gaussian, with r = o - c,
 * a = d^T P d, the closest point w = r + t* d and I = rho sqrt(2 pi / a) exp(-m^2 / 2):
 *   dI/dlog rho = I,  dI/dc = I P w,  dI/dP = I (-d d^T / (2a) - w w^T / 2).
 * Each Gaussian visits only the pixels of its cut-off box's projected bounding rectangle. The
 * forward pass sums per-thread images in thread order: deterministic for a given thread count. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_fit_internal.h"

typedef struct proj_view {
  xt_geometry g;
  double o[3];      /* source, index space */
  double *dir;      /* per pixel: index-space image of the unit world direction (3 doubles) */
  double *target;   /* T */
  double *image;    /* I, then I - T */
  double peak;
} proj_view;

typedef struct proj_ctx {
  const xt_fit_problem *pb;
  xt_affine i2w, w2i;
  proj_view *views;
  int nviews, size;
  const xt_fit_param *par;
  int n;
  double K2;
  int nthreads;
  double *timg; /* per thread, per view: forward partial images */
  double *grad;
  atomic_int next;
  int mode;
} proj_ctx;

/* The pixel rectangle a Gaussian's cut-off box projects into on view v (clipped); 0 if none. */
static int footprint_rect(const proj_ctx *C, const xt_fit_param *p, const proj_view *v, int r[4]) {
  double S[3][3];
  xt__fit_sigma(p, S);
  const double K = sqrt(C->K2);
  double h[3];
  for (int a = 0; a < 3; a++) h[a] = K * sqrt(S[a][a]);
  double c0 = 1e300, c1 = -1e300, r0 = 1e300, r1 = -1e300;
  for (int k = 0; k < 8; k++) {
    const xt_vec3 q = xt_v3(p->c[0] + ((k & 1) ? h[0] : -h[0]), p->c[1] + ((k & 2) ? h[1] : -h[1]),
                            p->c[2] + ((k & 4) ? h[2] : -h[2]));
    double col, row;
    if (!xt_geom_project(&v->g, xt_aff_apply(&C->i2w, q), &col, &row)) return 0; /* behind the source */
    if (col < c0) c0 = col;
    if (col > c1) c1 = col;
    if (row < r0) r0 = row;
    if (row > r1) r1 = row;
  }
  r[0] = (int)ceil(c0) < 0 ? 0 : (int)ceil(c0);
  r[1] = (int)floor(c1) > C->size - 1 ? C->size - 1 : (int)floor(c1);
  r[2] = (int)ceil(r0) < 0 ? 0 : (int)ceil(r0);
  r[3] = (int)floor(r1) > C->size - 1 ? C->size - 1 : (int)floor(r1);
  return r[0] <= r[1] && r[2] <= r[3];
}

/* One Gaussian over one view: forward (img given) adds I to img; backward (img NULL)
 * accumulates the moments of the residual against the derivatives (S0, Sw[3], SP[6]). */
static void gaussian_view(const proj_ctx *C, const xt_fit_param *p, const proj_view *v, double *img, double *S0,
                          double Sw[3], double SP[6]) {
  int rc[4];
  if (!footprint_rect(C, p, v, rc)) return;
  double L[3][3], P[6];
  xt__fit_lmat(p, L);
  P[0] = L[0][0] * L[0][0];
  P[1] = L[1][0] * L[0][0];
  P[2] = L[2][0] * L[0][0];
  P[3] = L[1][0] * L[1][0] + L[1][1] * L[1][1];
  P[4] = L[2][0] * L[1][0] + L[2][1] * L[1][1];
  P[5] = L[2][0] * L[2][0] + L[2][1] * L[2][1] + L[2][2] * L[2][2];
  const double rho = exp(p->lr);
  const double r[3] = {v->o[0] - p->c[0], v->o[1] - p->c[1], v->o[2] - p->c[2]};
  double Pr[3];
  Pr[0] = P[0] * r[0] + P[1] * r[1] + P[2] * r[2];
  Pr[1] = P[1] * r[0] + P[3] * r[1] + P[4] * r[2];
  Pr[2] = P[2] * r[0] + P[4] * r[1] + P[5] * r[2];
  for (int row = rc[2]; row <= rc[3]; row++)
    for (int col = rc[0]; col <= rc[1]; col++) {
      const size_t k = (size_t)row * C->size + col;
      const double *d = v->dir + 3 * k;
      const double Pd[3] = {P[0] * d[0] + P[1] * d[1] + P[2] * d[2], P[1] * d[0] + P[3] * d[1] + P[4] * d[2],
                            P[2] * d[0] + P[4] * d[1] + P[5] * d[2]};
      const double a = d[0] * Pd[0] + d[1] * Pd[1] + d[2] * Pd[2];
      const double ts = -(r[0] * Pd[0] + r[1] * Pd[1] + r[2] * Pd[2]) / a;
      const double w[3] = {r[0] + ts * d[0], r[1] + ts * d[1], r[2] + ts * d[2]};
      const double m2 = Pr[0] * w[0] + Pr[1] * w[1] + Pr[2] * w[2] + ts * (Pd[0] * w[0] + Pd[1] * w[1] + Pd[2] * w[2]);
      if (!(m2 <= C->K2)) continue;
      const double I = rho * sqrt(2.0 * XT_PI / a) * exp(-0.5 * m2);
      if (img) {
        img[k] += I;
        continue;
      }
      const double q = 2.0 * v->image[k] / v->peak / v->peak * I; /* v->image holds I - T */
      *S0 += q;
      for (int j = 0; j < 3; j++) Sw[j] += q * w[j];
      const double ia = 0.5 / a;
      SP[0] -= q * (ia * d[0] * d[0] + 0.5 * w[0] * w[0]);
      SP[1] -= q * (ia * d[0] * d[1] + 0.5 * w[0] * w[1]);
      SP[2] -= q * (ia * d[0] * d[2] + 0.5 * w[0] * w[2]);
      SP[3] -= q * (ia * d[1] * d[1] + 0.5 * w[1] * w[1]);
      SP[4] -= q * (ia * d[1] * d[2] + 0.5 * w[1] * w[2]);
      SP[5] -= q * (ia * d[2] * d[2] + 0.5 * w[2] * w[2]);
    }
}

static void *proj_worker(void *arg) {
  proj_ctx *C = arg;
  const size_t npx = (size_t)C->size * C->size;
  if (C->mode == 0) { /* forward: thread t takes Gaussians t, t + T, ... into its own images */
    const int t = atomic_fetch_add(&C->next, 1);
    if (t >= C->nthreads) return NULL;
    double *base = C->timg + (size_t)t * C->nviews * npx;
    for (int g = t; g < C->n; g += C->nthreads)
      for (int v = 0; v < C->nviews; v++) {
        double d0 = 0, dw[3], dp[6]; /* unused in the forward pass */
        gaussian_view(C, &C->par[g], &C->views[v], base + npx * v, &d0, dw, dp);
      }
    return NULL;
  }
  for (;;) { /* backward: Gaussians in chunks */
    const int g0 = atomic_fetch_add(&C->next, 1) * 32;
    if (g0 >= C->n) break;
    for (int g = g0; g < g0 + 32 && g < C->n; g++) {
      double S0 = 0, Sw[3] = {0, 0, 0}, SP[6] = {0, 0, 0, 0, 0, 0};
      for (int v = 0; v < C->nviews; v++) gaussian_view(C, &C->par[g], &C->views[v], NULL, &S0, Sw, SP);
      double L[3][3], P[3][3];
      xt__fit_lmat(&C->par[g], L);
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) P[i][j] = L[i][0] * L[j][0] + L[i][1] * L[j][1] + L[i][2] * L[j][2];
      const double inv = 1.0 / ((double)npx * C->nviews);
      double *gr = C->grad + (size_t)g * XT_FIT_NP;
      gr[XT_FIT_LR] = S0 * inv;
      for (int a = 0; a < 3; a++) gr[XT_FIT_C + a] = inv * (P[a][0] * Sw[0] + P[a][1] * Sw[1] + P[a][2] * Sw[2]);
      const double G[3][3] = {{SP[0], SP[1], SP[2]}, {SP[1], SP[3], SP[4]}, {SP[2], SP[4], SP[5]}};
      double GL[3][3];
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) GL[i][j] = 2.0 * inv * (G[i][0] * L[0][j] + G[i][1] * L[1][j] + G[i][2] * L[2][j]);
      for (int a = 0; a < 3; a++) gr[XT_FIT_U + a] = GL[a][a] * L[a][a];
      gr[XT_FIT_L + 0] = GL[1][0];
      gr[XT_FIT_L + 1] = GL[2][0];
      gr[XT_FIT_L + 2] = GL[2][1];
    }
  }
  return NULL;
}

static void run(proj_ctx *C, int mode) {
  pthread_t tid[64];
  int started = 0;
  C->mode = mode;
  atomic_init(&C->next, 0);
  for (int i = 1; i < C->nthreads; i++)
    if (pthread_create(&tid[started], NULL, proj_worker, C) == 0) started++;
  /* forward needs every thread slot taken: the caller's thread takes what is left */
  if (mode == 0)
    while (atomic_load(&C->next) < C->nthreads) proj_worker(C);
  else proj_worker(C);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

/* The projection error (sum over views of MSE / peak^2); leaves I - T in each view's image. */
static double proj_forward(proj_ctx *C) {
  const size_t npx = (size_t)C->size * C->size;
  memset(C->timg, 0, sizeof(double) * npx * C->nviews * C->nthreads);
  run(C, 0);
  double e = 0;
  for (int v = 0; v < C->nviews; v++) {
    proj_view *pv = &C->views[v];
    for (size_t k = 0; k < npx; k++) {
      double s = 0;
      for (int t = 0; t < C->nthreads; t++) s += C->timg[((size_t)t * C->nviews + v) * npx + k];
      pv->image[k] = s - pv->target[k];
      e += pv->image[k] * pv->image[k] / (pv->peak * pv->peak);
    }
  }
  return e / ((double)npx * C->nviews);
}

/* Adam as xt_fit.c's, on the combined gradient (kept here: the rates differ in scale). */
static void step(const xt_fit_problem *pb, xt_fit_param *par, int n, const double *g, double *m, double *v, int t,
                 double scale) {
  const double b1 = 0.9, b2 = 0.999, c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
  for (int i = 0; i < n; i++) {
    xt_fit_param *p = &par[i];
    double *x[XT_FIT_NP] = {&p->c[0], &p->c[1], &p->c[2], &p->u[0], &p->u[1], &p->u[2],
                            &p->l[0], &p->l[1], &p->l[2], &p->lr};
    const double rate[XT_FIT_NP] = {0.05, 0.05, 0.05, 0.01, 0.01, 0.01, 0.01 * exp(p->u[0]), 0.01 * exp(p->u[0]),
                                    0.01 * exp(p->u[1]), 0.01};
    for (int k = 0; k < XT_FIT_NP; k++) {
      const size_t j = (size_t)i * XT_FIT_NP + k;
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      const double vh = v[j] / c2;
      if (vh > 0) *x[k] -= scale * rate[k] * (m[j] / c1) / (sqrt(vh) + 1e-30);
    }
    for (int a = 0; a < 3; a++) {
      if (p->u[a] > log(4.0)) p->u[a] = log(4.0);
      if (p->u[a] < -log((double)pb->nmax)) p->u[a] = -log((double)pb->nmax);
    }
    if (p->lr > log(8 * pb->peak)) p->lr = log(8 * pb->peak);
  }
}

int xt__fit_project(const xt_fit_problem *pb, const xt_volume *vol, const xt_fit_options *o, xt_fit_param *par, int n,
                    double *m, double *vv, xt_fit_result *res, xt_msg *msg) {
  static const double spread = 180.0;
  const xt_detector_mode *md = xt_mode_find(o->proj_mode ? o->proj_mode : "thesis");
  if (!md) return xt_fail(msg, XT_ENOTFOUND, "gmm-fit: no detector mode %s", o->proj_mode);
  if (o->proj_poses < 1 || o->proj_poses > 360 || o->proj_size < 16 || o->proj_size > 2048)
    return xt_fail(msg, XT_ERANGE, "gmm-fit: projection refinement: %d poses of %d^2 pixels", o->proj_poses, o->proj_size);
  proj_ctx C;
  memset(&C, 0, sizeof C);
  C.pb = pb;
  C.size = o->proj_size;
  C.nviews = o->proj_poses;
  C.par = par;
  C.n = n;
  C.K2 = o->fit_cutoff * o->fit_cutoff;
  long nc = sysconf(_SC_NPROCESSORS_ONLN);
  C.nthreads = o->threads > 0 ? o->threads : (nc < 1 ? 1 : (nc > 64 ? 64 : (int)nc));
  const size_t npx = (size_t)C.size * C.size;
  xt_volume tv;       /* the air-free target as a dense volume (not owned) */
  xt_model tm;        /* placed with its box centred on the isocentre */
  memset(&tv, 0, sizeof tv);
  memcpy(tv.dim, pb->n, sizeof tv.dim);
  memcpy(tv.spacing, vol->spacing, sizeof tv.spacing);
  tv.index_to_model = pb->i2m;
  tv.type = XT_VOXEL_F32;
  tv.data = pb->mu;
  tv.nbytes = sizeof(float) * pb->nv;
  memset(&tm, 0, sizeof tm);
  tm.kind = XT_MODEL_DENSE;
  tm.payload = &tv;
  xt_vec3 lo, hi;
  xt_volume_bounds(&tv, &lo, &hi);
  tm.placement = xt_aff_identity();
  tm.placement.t[0] = -0.5 * (lo.x + hi.x);
  tm.placement.t[1] = -0.5 * (lo.y + hi.y);
  tm.placement.t[2] = -0.5 * (lo.z + hi.z);
  C.i2w = xt_aff_compose(&tm.placement, &pb->i2m); /* table 0: patient = world */
  double *grad = NULL, *gv = NULL;
  int rc = 0;
  if (!xt_aff_invert(&C.i2w, &C.w2i)) return xt_fail(msg, XT_EINVAL, "gmm-fit: singular voxel-to-mm map");
  C.views = calloc((size_t)C.nviews, sizeof *C.views);
  C.timg = malloc(sizeof(double) * npx * C.nviews * C.nthreads);
  grad = calloc((size_t)n * XT_FIT_NP, sizeof(double));
  gv = calloc((size_t)n * XT_FIT_NP, sizeof(double));
  if (!C.views || !C.timg || !grad || !gv) {
    rc = xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for the projection refinement");
    goto done;
  }
  xt_detector_mode dm = *md;
  dm.pitch_u_mm *= (double)md->cols / C.size;
  dm.pitch_v_mm *= (double)md->rows / C.size;
  dm.cols = dm.rows = C.size;
  for (int i = 0; i < C.nviews && !rc; i++) {
    proj_view *v = &C.views[i];
    xt_pose p = xt_pose_default(&dm);
    p.primary_deg = -90 + spread * (i + 0.5) / C.nviews;
    if ((rc = xt_geom_compute(&p, &dm, &v->g, msg))) break;
    v->dir = malloc(sizeof(double) * 3 * npx);
    v->target = malloc(sizeof(double) * npx);
    v->image = malloc(sizeof(double) * npx);
    if (!v->dir || !v->target || !v->image) {
      rc = xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for the projection refinement");
      break;
    }
    const xt_vec3 os = xt_aff_apply(&C.w2i, v->g.source);
    v->o[0] = os.x;
    v->o[1] = os.y;
    v->o[2] = os.z;
    for (int r = 0; r < C.size; r++)
      for (int c = 0; c < C.size; c++) {
        const xt_vec3 px = xt_geom_pixel_pos(&v->g, c, r), d = xt_v3_unit(xt_v3_sub(px, v->g.source));
        const xt_vec3 di = xt_aff_apply_dir(&C.w2i, d);
        double *o3 = v->dir + 3 * ((size_t)r * C.size + c);
        o3[0] = di.x;
        o3[1] = di.y;
        o3[2] = di.z;
      }
    const xt_model *ms[1] = {&tm};
    if ((rc = xt_ref_render_f64(ms, 1, &v->g, v->target, o->threads, msg))) break;
    v->peak = 0;
    for (size_t k = 0; k < npx; k++)
      if (v->target[k] > v->peak) v->peak = v->target[k];
    if (!(v->peak > 0)) v->peak = 1;
  }
  if (rc) goto done;
  /* the volume part of the error through xt_fit.c's CPU engine */
  {
    xt_fit_engine *eng = NULL;
    if ((rc = xt__fit_cpu_engine(pb, o->threads, &eng, msg))) goto done;
    const double pk2 = pb->peak * pb->peak;
    for (int it = 0; it < o->proj_iters && !rc; it++) {
      double sse;
      if ((rc = eng->forward(eng, par, n, o->fit_cutoff, &sse, msg)) || (rc = eng->backward(eng, par, n, o->fit_cutoff, grad, msg)))
        break;
      const double ep = proj_forward(&C);
      C.grad = gv;
      run(&C, 1);
      for (size_t j = 0; j < (size_t)n * XT_FIT_NP; j++) grad[j] = grad[j] / pk2 + gv[j];
      const double scale = 0.05 + 0.95 * 0.5 * (1 + cos(XT_PI * it / (double)o->proj_iters));
      step(pb, par, n, grad, m, vv, it + 1, scale * o->lr);
      if (o->progress)
        o->progress(o->progress_ctx, "proj", it + 1, o->proj_iters, 10 * log10(1.0 / (ep > 0 ? ep : 1e-30)));
    }
    eng->destroy(eng);
  }
done:
  for (int i = 0; C.views && i < C.nviews; i++) {
    free(C.views[i].dir);
    free(C.views[i].target);
    free(C.views[i].image);
  }
  free(C.views);
  free(C.timg);
  free(grad);
  free(gv);
  (void)res;
  return rc;
}
