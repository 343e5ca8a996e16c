/* Fitting a Gaussian mixture to a voxel volume (xt_fit.h; method in docs/models.md, "Fitting").
 *
 * Everything runs in voxel-index space (unit voxels; voxel (i,j,k) centred at (i,j,k)); the
 * result is mapped to the model frame once at the end (centre by index_to_model, covariance
 * A Sigma A^T, then eigenvectors and scales). Per Gaussian the parameters are its centre c, the
 * Cholesky factor L of its precision (P = L L^T, diagonal as logarithms, so P stays positive
 * definite under any step) and log rho.
 *
 * The volume error and its gradient cost two passes over each Gaussian's ellipsoid of radius
 * fit_cutoff per iteration. Along a row of voxels the Gaussian is a geometric recurrence
 * (G(x+1) = G(x) R, R(x+1) = R(x) exp(-L00^2)), so a voxel costs a few multiply-adds and no exp;
 * the gradient needs only the moments sum r G, sum r G d, sum r G d d^T of the residual r over
 * each ellipsoid, from which the derivatives in c, L and log rho follow in closed form:
 *   dE/dlog rho = 2 S0 / N,  dE/dc = 2 P S1 / N,  dE/dP = -S2 / N,  dE/dL = 2 (dE/dP) L.
 * The forward pass is split over z-slabs and the gradient over Gaussians, each thread summing in
 * a fixed order: a fit does not depend on the thread count. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xt_fit.h"
#include "xt_fit_internal.h"
#include "xt_fit_row.h"

xt_fit_options xt_fit_default_options(void) {
  xt_fit_options o;
  memset(&o, 0, sizeof o);
  o.budget = 30000;
  o.iters = 150;
  o.lr = 1.0;
  o.inflate = 1.8;
  o.fit_cutoff = 4.0;
  o.cutoff = XT_GMM_CUTOFF_DEFAULT;
  o.margin = XT_FIT_MARGIN_DEFAULT;
  o.engine = XT_FIT_AUTO;
  o.proj_poses = 9;
  o.proj_size = 128;
  o.proj_mode = "thesis";
  return o;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 64 ? 64 : (int)n);
}

/* ------------------------------------------------------------------------------------------ */
/* Parameters                                                                                 */
/* ------------------------------------------------------------------------------------------ */

void xt__fit_lmat(const xt_fit_param *p, double L[3][3]) {
  memset(L, 0, sizeof(double) * 9);
  L[0][0] = exp(p->u[0]);
  L[1][1] = exp(p->u[1]);
  L[2][2] = exp(p->u[2]);
  L[1][0] = p->l[0];
  L[2][0] = p->l[1];
  L[2][1] = p->l[2];
}

/* Inverse of a symmetric positive-definite 3 x 3 matrix. */
static void inv3(const double a[3][3], double r[3][3]) {
  const double c00 = a[1][1] * a[2][2] - a[1][2] * a[2][1], c01 = a[1][2] * a[2][0] - a[1][0] * a[2][2],
               c02 = a[1][0] * a[2][1] - a[1][1] * a[2][0];
  const double det = a[0][0] * c00 + a[0][1] * c01 + a[0][2] * c02, id = 1.0 / det;
  r[0][0] = c00 * id;
  r[1][0] = c01 * id;
  r[2][0] = c02 * id;
  r[0][1] = (a[0][2] * a[2][1] - a[0][1] * a[2][2]) * id;
  r[1][1] = (a[0][0] * a[2][2] - a[0][2] * a[2][0]) * id;
  r[2][1] = (a[0][1] * a[2][0] - a[0][0] * a[2][1]) * id;
  r[0][2] = (a[0][1] * a[1][2] - a[0][2] * a[1][1]) * id;
  r[1][2] = (a[0][2] * a[1][0] - a[0][0] * a[1][2]) * id;
  r[2][2] = (a[0][0] * a[1][1] - a[0][1] * a[1][0]) * id;
}

/* The covariance Sigma = P^-1 of a parameter set. */
void xt__fit_sigma(const xt_fit_param *p, double S[3][3]) {
  double L[3][3], P[3][3];
  xt__fit_lmat(p, L);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) P[i][j] = L[i][0] * L[j][0] + L[i][1] * L[j][1] + L[i][2] * L[j][2];
  inv3(P, S);
}

/* Parameters from a centre, a covariance and a peak (Cholesky of the precision). */
static int from_moments(const double c[3], const double C[3][3], double rho, xt_fit_param *p) {
  double P[3][3];
  inv3(C, P);
  const double a = P[0][0];
  if (!(a > 0)) return 0;
  const double L00 = sqrt(a), L10 = P[1][0] / L00, L20 = P[2][0] / L00;
  const double b = P[1][1] - L10 * L10;
  if (!(b > 0)) return 0;
  const double L11 = sqrt(b), L21 = (P[2][1] - L20 * L10) / L11;
  const double e = P[2][2] - L20 * L20 - L21 * L21;
  if (!(e > 0)) return 0;
  const double L22 = sqrt(e);
  memcpy(p->c, c, sizeof p->c);
  p->u[0] = log(L00);
  p->u[1] = log(L11);
  p->u[2] = log(L22);
  p->l[0] = L10;
  p->l[1] = L20;
  p->l[2] = L21;
  p->lr = log(rho);
  return 1;
}

/* The box of index rows a Gaussian's ellipsoid of radius K covers, clipped to the grid; 0 when
 * it misses the grid. */
static int gbox(const xt_fit_param *p, double K, const int n[3], int lo[3], int hi[3]) {
  double S[3][3];
  xt__fit_sigma(p, S);
  for (int a = 0; a < 3; a++) {
    const double h = K * sqrt(S[a][a]);
    lo[a] = (int)ceil(p->c[a] - h);
    hi[a] = (int)floor(p->c[a] + h);
    if (lo[a] < 0) lo[a] = 0;
    if (hi[a] > n[a] - 1) hi[a] = n[a] - 1;
    if (lo[a] > hi[a]) return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The CPU engine                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* One row of Gaussian p at (y, z) = (d1, d2) from its centre (xt_fit_row.h). */
static int row_setup(const xt_fit_param *p, const double L[3][3], double rho, double K2, int n0, double d1, double d2,
                     xt_fit_row *r) {
  const double l6[6] = {L[0][0], L[1][0], L[1][1], L[2][0], L[2][1], L[2][2]};
  return xt_fit_row_setup(p->c, l6, rho, K2, n0, d1, d2, r);
}

typedef struct cpu_job {
  const xt_fit_problem *pb;
  const xt_fit_param *par;
  int n;
  double K;
  float *model;       /* forward: the sum */
  const float *resid; /* backward: model - target */
  double *grad;       /* backward: XT_FIT_NP per Gaussian */
  double *slab_sse;   /* forward: per thread */
  int nthreads;
  atomic_int next;
  int mode; /* 0 forward, 1 backward */
} cpu_job;

/* Forward over z in [z0, z1): model = sum of Gaussians, then residual and its squared sum. */
static void forward_slab(cpu_job *J, int z0, int z1, double *sse) {
  const xt_fit_problem *pb = J->pb;
  const int *n = pb->n;
  const size_t sx = 1, sy = (size_t)n[0], sz = (size_t)n[0] * n[1];
  float *M = J->model;
  memset(M + sz * z0, 0, sizeof(float) * sz * (size_t)(z1 - z0));
  const double K2 = J->K * J->K;
  for (int g = 0; g < J->n; g++) {
    const xt_fit_param *p = &J->par[g];
    int lo[3], hi[3];
    if (!gbox(p, J->K, n, lo, hi) || hi[2] < z0 || lo[2] >= z1) continue;
    double L[3][3];
    xt__fit_lmat(p, L);
    const double rho = exp(p->lr);
    const int za = lo[2] > z0 ? lo[2] : z0, zb = hi[2] < z1 - 1 ? hi[2] : z1 - 1;
    for (int z = za; z <= zb; z++)
      for (int y = lo[1]; y <= hi[1]; y++) {
        xt_fit_row r;
        if (!row_setup(p, L, rho, K2, n[0], y - p->c[1], z - p->c[2], &r)) continue;
        float *m = M + sz * z + sy * y;
        double G = r.G, R = r.R;
        for (int x = r.x0; x <= r.x1; x++) {
          m[x * sx] += (float)G;
          G *= R;
          R *= r.Q;
        }
      }
  }
  double s = 0;
  for (size_t i = sz * z0; i < sz * (size_t)z1; i++) {
    M[i] -= pb->mu[i];
    s += (double)M[i] * M[i];
  }
  *sse = s;
}

/* The moments of the residual over Gaussian g's ellipsoid, turned into its gradient. */
static void backward_one(cpu_job *J, int g) {
  const xt_fit_problem *pb = J->pb;
  const int *n = pb->n;
  const size_t sy = (size_t)n[0], sz = (size_t)n[0] * n[1];
  const xt_fit_param *p = &J->par[g];
  double *gr = J->grad + (size_t)g * XT_FIT_NP;
  memset(gr, 0, sizeof(double) * XT_FIT_NP);
  int lo[3], hi[3];
  if (!gbox(p, J->K, n, lo, hi)) return;
  double L[3][3];
  xt__fit_lmat(p, L);
  const double rho = exp(p->lr), K2 = J->K * J->K;
  double S0 = 0, S1[3] = {0, 0, 0}, S2[6] = {0, 0, 0, 0, 0, 0};
  for (int z = lo[2]; z <= hi[2]; z++)
    for (int y = lo[1]; y <= hi[1]; y++) {
      const double d1 = y - p->c[1], d2 = z - p->c[2];
      xt_fit_row r;
      if (!row_setup(p, L, rho, K2, n[0], d1, d2, &r)) continue;
      double mm[3];
      xt_fit_row_moments(&r, J->resid + sz * z + sy * y, mm);
      const double W = mm[0], W0 = mm[1], W00 = mm[2];
      S0 += W;
      S1[0] += W0;
      S1[1] += W * d1;
      S1[2] += W * d2;
      S2[0] += W00;
      S2[1] += W0 * d1;
      S2[2] += W0 * d2;
      S2[3] += W * d1 * d1;
      S2[4] += W * d1 * d2;
      S2[5] += W * d2 * d2;
    }
  xt__fit_grad_from_moments(p, S0, S1, S2, 1.0 / (double)pb->nv, gr);
}

void xt__fit_grad_from_moments(const xt_fit_param *p, double S0, const double S1[3], const double S2[6], double inv_n,
                               double *gr) {
  double L[3][3], P[3][3];
  xt__fit_lmat(p, L);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) P[i][j] = L[i][0] * L[j][0] + L[i][1] * L[j][1] + L[i][2] * L[j][2];
  /* E = sum (M - mu)^2 / N: dE/dlog rho = 2 S0/N; dE/dc = 2 P S1 / N; dE/dP = -S2 / N */
  gr[XT_FIT_LR] = 2.0 * S0 * inv_n;
  for (int a = 0; a < 3; a++) gr[XT_FIT_C + a] = 2.0 * inv_n * (P[a][0] * S1[0] + P[a][1] * S1[1] + P[a][2] * S1[2]);
  const double S[3][3] = {{S2[0], S2[1], S2[2]}, {S2[1], S2[3], S2[4]}, {S2[2], S2[4], S2[5]}};
  /* dE/dL = 2 (dE/dP) L = -2 S L / N (lower triangle); the diagonal through its logarithm */
  double GL[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) GL[i][j] = -2.0 * inv_n * (S[i][0] * L[0][j] + S[i][1] * L[1][j] + S[i][2] * L[2][j]);
  for (int a = 0; a < 3; a++) gr[XT_FIT_U + a] = GL[a][a] * L[a][a];
  gr[XT_FIT_L + 0] = GL[1][0];
  gr[XT_FIT_L + 1] = GL[2][0];
  gr[XT_FIT_L + 2] = GL[2][1];
}

static void *cpu_worker(void *arg) {
  cpu_job *J = arg;
  const int nz = J->pb->n[2];
  for (;;) {
    const int t = atomic_fetch_add(&J->next, 1);
    if (J->mode == 0) {
      if (t >= J->nthreads) break;
      const int z0 = (int)((long)nz * t / J->nthreads), z1 = (int)((long)nz * (t + 1) / J->nthreads);
      forward_slab(J, z0, z1, &J->slab_sse[t]);
    } else {
      /* Gaussians in chunks of 64: the per-Gaussian work varies a lot */
      const int g0 = t * 64;
      if (g0 >= J->n) break;
      const int g1 = g0 + 64 < J->n ? g0 + 64 : J->n;
      for (int g = g0; g < g1; g++) backward_one(J, g);
    }
  }
  return NULL;
}

static void run_threads(cpu_job *J, int nthreads) {
  pthread_t tid[64];
  int started = 0;
  atomic_init(&J->next, 0);
  for (int i = 1; i < nthreads && i < 64; i++)
    if (pthread_create(&tid[started], NULL, cpu_worker, J) == 0) started++;
  cpu_worker(J);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

typedef struct cpu_engine {
  xt_fit_engine base;
  int threads;
  float *model; /* the sum, then the residual */
  double *slab;
} cpu_engine;

static int cpu_forward(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *sse, xt_msg *msg) {
  cpu_engine *c = (cpu_engine *)e;
  cpu_job J;
  memset(&J, 0, sizeof J);
  J.pb = e->pb;
  J.par = par;
  J.n = n;
  J.K = K;
  J.model = c->model;
  J.slab_sse = c->slab;
  J.nthreads = c->threads < e->pb->n[2] ? c->threads : e->pb->n[2];
  J.mode = 0;
  run_threads(&J, J.nthreads);
  double s = 0;
  for (int t = 0; t < J.nthreads; t++) s += c->slab[t];
  *sse = s;
  return 0;
}

static int cpu_backward(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *grad, xt_msg *msg) {
  cpu_engine *c = (cpu_engine *)e;
  cpu_job J;
  memset(&J, 0, sizeof J);
  J.pb = e->pb;
  J.par = par;
  J.n = n;
  J.K = K;
  J.resid = c->model;
  J.grad = grad;
  J.nthreads = c->threads;
  J.mode = 1;
  run_threads(&J, c->threads);
  return 0;
}

static void cpu_destroy(xt_fit_engine *e) {
  cpu_engine *c = (cpu_engine *)e;
  if (!c) return;
  free(c->model);
  free(c->slab);
  free(c);
}

int xt__fit_cpu_engine(const xt_fit_problem *pb, int threads, xt_fit_engine **out, xt_msg *msg) {
  cpu_engine *c = calloc(1, sizeof *c);
  if (!c) return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
  c->threads = threads > 0 ? threads : default_threads();
  c->model = malloc(sizeof(float) * pb->nv);
  c->slab = calloc(64, sizeof(double));
  if (!c->model || !c->slab) {
    cpu_destroy(&c->base);
    return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for a %zu-voxel model grid", pb->nv);
  }
  c->base.pb = pb;
  c->base.forward = cpu_forward;
  c->base.backward = cpu_backward;
  c->base.destroy = cpu_destroy;
  snprintf(c->base.name, sizeof c->base.name, "cpu (%d threads)", c->threads);
  *out = &c->base;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Initialisation: adaptive subdivision and moment matching                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct block {
  int lo[3], hi[3]; /* inclusive */
  double pri;       /* split priority */
} block;

typedef struct heap {
  block *b;
  int n, cap;
} heap;

static int heap_push(heap *h, block b) {
  if (h->n == h->cap) {
    int cap = h->cap ? 2 * h->cap : 1024;
    block *nb = realloc(h->b, sizeof *nb * (size_t)cap);
    if (!nb) return 0;
    h->b = nb;
    h->cap = cap;
  }
  int i = h->n++;
  h->b[i] = b;
  while (i > 0 && h->b[(i - 1) / 2].pri < h->b[i].pri) {
    block t = h->b[i];
    h->b[i] = h->b[(i - 1) / 2];
    h->b[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
  return 1;
}

static block heap_pop(heap *h) {
  block top = h->b[0];
  h->b[0] = h->b[--h->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->b[l].pri > h->b[m].pri) m = l;
    if (r < h->n && h->b[r].pri > h->b[m].pri) m = r;
    if (m == i) break;
    block t = h->b[i];
    h->b[i] = h->b[m];
    h->b[m] = t;
    i = m;
  }
  return top;
}

/* Mass and squared error about the mean of a block. */
static void block_stats(const xt_fit_problem *pb, const block *b, double *mass, double *sse) {
  const int *n = pb->n;
  double s1 = 0, s2 = 0, cnt = 0;
  for (int z = b->lo[2]; z <= b->hi[2]; z++)
    for (int y = b->lo[1]; y <= b->hi[1]; y++) {
      const float *m = pb->mu + (size_t)n[0] * ((size_t)y + (size_t)n[1] * z);
      for (int x = b->lo[0]; x <= b->hi[0]; x++) {
        s1 += m[x];
        s2 += (double)m[x] * m[x];
      }
      cnt += b->hi[0] - b->lo[0] + 1;
    }
  *mass = s1;
  *sse = s2 - s1 * s1 / cnt;
  if (*sse < 0) *sse = 0;
}

static int longest(const block *b) {
  int a = 0;
  for (int k = 1; k < 3; k++)
    if (b->hi[k] - b->lo[k] > b->hi[a] - b->lo[a]) a = k;
  return a;
}

static double priority(const xt_fit_problem *pb, const block *b, double lattice, double sse) {
  const int a = longest(b);
  if (b->hi[a] == b->lo[a]) return -1; /* one voxel: cannot split */
  /* larger than the lattice: split first, the largest first (a budget that binds here leaves the
   * volume evenly refined) */
  if (b->hi[a] - b->lo[a] + 1 > lattice)
    return 1e250 * (double)(b->hi[0] - b->lo[0] + 1) * (b->hi[1] - b->lo[1] + 1) * (b->hi[2] - b->lo[2] + 1);
  return sse;
}

/* Moment matching of one block: its Gaussian (mass, mean, covariance of the mu-weighted voxel
 * cubes, widened by inflate^2) and its majority label. 0 when the block is empty. */
static int block_gaussian(const xt_fit_problem *pb, const block *b, double inflate, xt_fit_param *p, uint8_t *label) {
  const int *n = pb->n;
  double m = 0, s[3] = {0, 0, 0}, ss[3][3] = {{0}};
  unsigned hist[256];
  if (pb->labels) memset(hist, 0, sizeof hist);
  for (int z = b->lo[2]; z <= b->hi[2]; z++)
    for (int y = b->lo[1]; y <= b->hi[1]; y++) {
      const size_t base = (size_t)n[0] * ((size_t)y + (size_t)n[1] * z);
      for (int x = b->lo[0]; x <= b->hi[0]; x++) {
        const double w = pb->mu[base + x];
        if (w <= 0) continue;
        const double q[3] = {x, y, z};
        m += w;
        for (int i = 0; i < 3; i++) {
          s[i] += w * q[i];
          for (int j = 0; j < 3; j++) ss[i][j] += w * q[i] * q[j];
        }
        if (pb->labels) hist[pb->labels[base + x]]++;
      }
    }
  if (!(m > 0)) return 0;
  double c[3], C[3][3];
  for (int i = 0; i < 3; i++) c[i] = s[i] / m;
  const double f2 = inflate * inflate;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) C[i][j] = f2 * (ss[i][j] / m - c[i] * c[j] + (i == j ? 1.0 / 12.0 : 0.0));
  const double det = C[0][0] * (C[1][1] * C[2][2] - C[1][2] * C[2][1]) - C[0][1] * (C[1][0] * C[2][2] - C[1][2] * C[2][0]) +
                     C[0][2] * (C[1][0] * C[2][1] - C[1][1] * C[2][0]);
  const double rho = m / (pow(2.0 * XT_PI, 1.5) * sqrt(det));
  if (!from_moments(c, C, rho, p)) return 0;
  if (label) {
    int best = 0;
    if (pb->labels)
      for (int i = 1; i < 256; i++)
        if (hist[i] > hist[best]) best = i;
    *label = (uint8_t)best;
  }
  return 1;
}

/* The subdivision: blocks larger than the lattice first, then by squared error, until the
 * budget (or the error the PSNR target allows, summed over the leaves) is reached. */
static int initialise(const xt_fit_problem *pb, const xt_fit_options *o, xt_fit_param **par_out, uint8_t **lab_out,
                      int *n_out, xt_msg *msg) {
  const int *n = pb->n;
  double lattice = o->lattice;
  size_t nonair = 0;
  for (size_t i = 0; i < pb->nv; i++) nonair += pb->mu[i] > 0;
  if (!nonair) return xt_fail(msg, XT_EINVAL, "gmm-fit: the volume holds nothing denser than air");
  if (!(lattice > 0)) lattice = cbrt((double)nonair / (0.4 * o->budget));
  if (lattice < 2) lattice = 2;
  const double sse_target =
      o->target_psnr > 0 ? pb->peak * pb->peak * pow(10.0, -o->target_psnr / 10.0) * (double)pb->nv * 0.5 : -1;
  heap h = {0};
  block root = {{0, 0, 0}, {n[0] - 1, n[1] - 1, n[2] - 1}, 0};
  double mass, sse, total_sse;
  block_stats(pb, &root, &mass, &sse);
  root.pri = priority(pb, &root, lattice, sse);
  total_sse = sse;
  int rc = 0, count = 1;
  if (!heap_push(&h, root)) return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
  while (h.n > 0 && h.b[0].pri > 0) {
    const block top = h.b[0];
    /* the budget binds always; the error target only once the lattice is reached */
    if (count >= o->budget || (top.pri < 1e250 && sse_target > 0 && total_sse <= sse_target)) break;
    heap_pop(&h);
    block c[2] = {top, top};
    const int a = longest(&top), mid = (top.lo[a] + top.hi[a]) / 2;
    c[0].hi[a] = mid;
    c[1].lo[a] = mid + 1;
    double psse = 0;
    block_stats(pb, &top, &mass, &psse);
    total_sse -= psse;
    int kept = 0;
    for (int k = 0; k < 2; k++) {
      block_stats(pb, &c[k], &mass, &sse);
      if (!(mass > 0)) continue;
      c[k].pri = priority(pb, &c[k], lattice, sse);
      total_sse += sse;
      if (!heap_push(&h, c[k])) {
        rc = xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
        goto done;
      }
      kept++;
    }
    count += kept - 1;
    if (o->progress && (count & 1023) == 0) o->progress(o->progress_ctx, "init", count, o->budget, 0);
  }
  {
    const size_t nb = h.n > 0 ? (size_t)h.n : 1;
    xt_fit_param *par = calloc(nb, sizeof *par);
    uint8_t *lab = calloc(nb, 1);
    if (!par || !lab) {
      free(par);
      free(lab);
      rc = xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
      goto done;
    }
    /* blocks in a fixed order (by their low corner), so the mixture does not depend on the heap */
    int m = 0;
    for (int i = 0; i < h.n; i++)
      if (block_gaussian(pb, &h.b[i], o->inflate, &par[m], &lab[m])) m++;
    *par_out = par;
    *lab_out = lab;
    *n_out = m;
  }
done:
  free(h.b);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Adam                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void clamp_param(const xt_fit_problem *pb, xt_fit_param *p) {
  const double umin = -log((double)pb->nmax), umax = log(1.0 / 0.25); /* sigma in [0.25 voxel, the grid] */
  for (int a = 0; a < 3; a++) {
    if (p->u[a] < umin) p->u[a] = umin;
    if (p->u[a] > umax) p->u[a] = umax;
    if (p->c[a] < -0.5) p->c[a] = -0.5;
    if (p->c[a] > pb->n[a] - 0.5) p->c[a] = pb->n[a] - 0.5;
  }
  const double lmax = log(8.0 * pb->peak), lmin = log(1e-9 * pb->peak);
  if (p->lr > lmax) p->lr = lmax;
  if (p->lr < lmin) p->lr = lmin;
}

/* One Adam step over every parameter: centre, log-diagonal, off-diagonal (relative to its
 * column's diagonal) and log rho each with their own rate. */
static void adam_step(const xt_fit_problem *pb, xt_fit_param *par, int n, const double *g, double *m, double *v, int t,
                      double scale) {
  const double b1 = 0.9, b2 = 0.999;
  const double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
  const double lr_c = 0.2 * scale, lr_u = 0.04 * scale, lr_l = 0.04 * scale, lr_r = 0.04 * scale;
  for (int i = 0; i < n; i++) {
    xt_fit_param *p = &par[i];
    double *x[XT_FIT_NP] = {&p->c[0], &p->c[1], &p->c[2], &p->u[0], &p->u[1], &p->u[2],
                            &p->l[0], &p->l[1], &p->l[2], &p->lr};
    const double rate[XT_FIT_NP] = {lr_c, lr_c, lr_c, lr_u, lr_u, lr_u,
                                    lr_l * exp(p->u[0]), lr_l * exp(p->u[0]), lr_l * exp(p->u[1]), lr_r};
    for (int k = 0; k < XT_FIT_NP; k++) {
      const size_t j = (size_t)i * XT_FIT_NP + k;
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      const double mh = m[j] / c1, vh = v[j] / c2;
      if (vh > 0) *x[k] -= rate[k] * mh / (sqrt(vh) + 1e-30);
    }
    clamp_param(pb, p);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* The result in the model frame                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Eigen-decomposition of a symmetric 3 x 3 matrix (cyclic Jacobi): A = V diag(w) V^T. */
static void jacobi3(double A[3][3], double w[3], double V[3][3]) {
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) V[i][j] = i == j;
  for (int sweep = 0; sweep < 50; sweep++) {
    double off = fabs(A[0][1]) + fabs(A[0][2]) + fabs(A[1][2]);
    if (off < 1e-300) break;
    for (int p = 0; p < 2; p++)
      for (int q = p + 1; q < 3; q++) {
        if (A[p][q] == 0) continue;
        const double th = 0.5 * (A[q][q] - A[p][p]) / A[p][q];
        const double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
        const double c = 1 / sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < 3; k++) {
          const double akp = A[k][p], akq = A[k][q];
          A[k][p] = c * akp - s * akq;
          A[k][q] = s * akp + c * akq;
        }
        for (int k = 0; k < 3; k++) {
          const double apk = A[p][k], aqk = A[q][k];
          A[p][k] = c * apk - s * aqk;
          A[q][k] = s * apk + c * aqk;
        }
        for (int k = 0; k < 3; k++) {
          const double vkp = V[k][p], vkq = V[k][q];
          V[k][p] = c * vkp - s * vkq;
          V[k][q] = s * vkp + c * vkq;
        }
      }
  }
  for (int i = 0; i < 3; i++) w[i] = A[i][i];
}

/* Unit quaternion (w, x, y, z) of a rotation matrix (Shepperd's method). */
static void quat_of(const double R[3][3], float q[4]) {
  const double tr = R[0][0] + R[1][1] + R[2][2];
  double w, x, y, z;
  if (tr > 0) {
    const double s = 2 * sqrt(tr + 1);
    w = 0.25 * s;
    x = (R[2][1] - R[1][2]) / s;
    y = (R[0][2] - R[2][0]) / s;
    z = (R[1][0] - R[0][1]) / s;
  } else if (R[0][0] > R[1][1] && R[0][0] > R[2][2]) {
    const double s = 2 * sqrt(1 + R[0][0] - R[1][1] - R[2][2]);
    w = (R[2][1] - R[1][2]) / s;
    x = 0.25 * s;
    y = (R[0][1] + R[1][0]) / s;
    z = (R[0][2] + R[2][0]) / s;
  } else if (R[1][1] > R[2][2]) {
    const double s = 2 * sqrt(1 + R[1][1] - R[0][0] - R[2][2]);
    w = (R[0][2] - R[2][0]) / s;
    x = (R[0][1] + R[1][0]) / s;
    y = 0.25 * s;
    z = (R[1][2] + R[2][1]) / s;
  } else {
    const double s = 2 * sqrt(1 + R[2][2] - R[0][0] - R[1][1]);
    w = (R[1][0] - R[0][1]) / s;
    x = (R[0][2] + R[2][0]) / s;
    y = (R[1][2] + R[2][1]) / s;
    z = 0.25 * s;
  }
  const double nn = sqrt(w * w + x * x + y * y + z * z);
  q[0] = (float)(w / nn);
  q[1] = (float)(x / nn);
  q[2] = (float)(y / nn);
  q[3] = (float)(z / nn);
}

int xt__fit_to_gmm(const xt_fit_problem *pb, const xt_fit_param *par, const uint8_t *lab, int n, double cutoff,
                   xt_gmm **out, xt_msg *msg) {
  /* drop the Gaussians the fit has emptied (below 1e-6 of the peak) */
  int keep = 0;
  for (int i = 0; i < n; i++) keep += exp(par[i].lr) >= 1e-6 * pb->peak;
  if (!keep) return xt_fail(msg, XT_EINVAL, "gmm-fit: every Gaussian vanished");
  xt_gmm *g = NULL;
  int rc = xt_gmm_create((size_t)keep, &g, msg);
  if (rc) return rc;
  const xt_affine *A = &pb->i2m;
  int k = 0;
  for (int i = 0; i < n; i++) {
    const xt_fit_param *p = &par[i];
    if (exp(p->lr) < 1e-6 * pb->peak) continue;
    xt_gaussian *q = &g->g[k++];
    const xt_vec3 c = xt_aff_apply(A, xt_v3(p->c[0], p->c[1], p->c[2]));
    q->centre[0] = (float)c.x;
    q->centre[1] = (float)c.y;
    q->centre[2] = (float)c.z;
    double S[3][3], T[3][3], M[3][3], w[3], V[3][3];
    xt__fit_sigma(p, S);
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) T[a][b] = A->m[a][0] * S[0][b] + A->m[a][1] * S[1][b] + A->m[a][2] * S[2][b];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) M[a][b] = T[a][0] * A->m[b][0] + T[a][1] * A->m[b][1] + T[a][2] * A->m[b][2];
    jacobi3(M, w, V);
    const double det = V[0][0] * (V[1][1] * V[2][2] - V[1][2] * V[2][1]) - V[0][1] * (V[1][0] * V[2][2] - V[1][2] * V[2][0]) +
                       V[0][2] * (V[1][0] * V[2][1] - V[1][1] * V[2][0]);
    if (det < 0)
      for (int a = 0; a < 3; a++) V[a][2] = -V[a][2];
    for (int a = 0; a < 3; a++) {
      double s = sqrt(w[a] > 0 ? w[a] : 0);
      if (s < XT_GMM_SCALE_MIN) s = XT_GMM_SCALE_MIN;
      q->scale[a] = (float)s;
    }
    quat_of(V, q->quat);
    q->rho = (float)exp(p->lr);
    q->label = pb->labels ? lab[i] : XT_GMM_NO_LABEL;
  }
  g->has_labels = pb->labels != NULL;
  g->cutoff = cutoff;
  if ((rc = xt_gmm_finish(g, "gmm-fit", msg))) {
    xt_gmm_free(g);
    return rc;
  }
  *out = g;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The fit                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static double psnr_of(const xt_fit_problem *pb, double sse) {
  const double mse = sse / (double)pb->nv;
  return mse > 0 ? 10.0 * log10(pb->peak * pb->peak / mse) : INFINITY;
}

/* 1 when a face of the (air-zeroed) volume at index a = i (axis ax) holds any mass. */
static int face_has_mass(const float *mu, const int n[3], int ax, int i) {
  const int b = (ax + 1) % 3, c = (ax + 2) % 3;
  const size_t st[3] = {1, (size_t)n[0], (size_t)n[0] * n[1]};
  for (int j = 0; j < n[c]; j++)
    for (int k = 0; k < n[b]; k++)
      if (mu[st[ax] * (size_t)i + st[b] * (size_t)k + st[c] * (size_t)j] > 0) return 1;
  return 0;
}

int xt__fit_problem_init(const xt_volume *v, int margin, xt_fit_problem *pb, xt_msg *msg) {
  memset(pb, 0, sizeof *pb);
  if (!v || !v->data) return xt_fail(msg, XT_EINVAL, "gmm-fit: no volume");
  if (margin < 0 || margin > XT_FIT_MARGIN_MAX) return xt_fail(msg, XT_ERANGE, "gmm-fit: margin %d voxels", margin);
  const size_t nvol = xt_volume_voxels(v);
  float *mu = malloc(sizeof(float) * nvol);
  if (!mu) return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for %zu voxels", nvol);
  if (v->type == XT_VOXEL_U8) {
    for (size_t i = 0; i < nvol; i++) mu[i] = v->materials->mu[((const uint8_t *)v->data)[i]];
  } else {
    memcpy(mu, v->data, sizeof(float) * nvol);
  }
  /* air (and anything thinner, or negative) is left out: docs/models.md */
  for (size_t i = 0; i < nvol; i++)
    if (!(mu[i] > XT_FIT_AIR_MU)) mu[i] = 0;
  for (int a = 0; a < 3; a++) {
    pb->pad[a] = face_has_mass(mu, v->dim, a, 0) || face_has_mass(mu, v->dim, a, v->dim[a] - 1) ? margin : 0;
    pb->n[a] = v->dim[a] + 2 * pb->pad[a];
  }
  pb->nmax = pb->n[0] > pb->n[1] ? pb->n[0] : pb->n[1];
  if (pb->n[2] > pb->nmax) pb->nmax = pb->n[2];
  pb->nv = (size_t)pb->n[0] * pb->n[1] * pb->n[2];
  /* fit index q = volume index + pad */
  pb->i2m = v->index_to_model;
  for (int r = 0; r < 3; r++)
    pb->i2m.t[r] -= v->index_to_model.m[r][0] * pb->pad[0] + v->index_to_model.m[r][1] * pb->pad[1] +
                    v->index_to_model.m[r][2] * pb->pad[2];
  if (!pb->pad[0] && !pb->pad[1] && !pb->pad[2]) {
    pb->mu = mu;
    mu = NULL;
  } else {
    pb->mu = calloc(pb->nv, sizeof(float));
    if (!pb->mu) {
      free(mu);
      return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for %zu voxels", pb->nv);
    }
    for (int z = 0; z < v->dim[2]; z++)
      for (int y = 0; y < v->dim[1]; y++)
        memcpy(pb->mu + pb->pad[0] + (size_t)pb->n[0] * ((size_t)(y + pb->pad[1]) + (size_t)pb->n[1] * (z + pb->pad[2])),
               mu + (size_t)v->dim[0] * ((size_t)y + (size_t)v->dim[1] * z), sizeof(float) * v->dim[0]);
  }
  free(mu);
  if (v->type == XT_VOXEL_U8) {
    pb->labels = calloc(pb->nv, 1);
    if (!pb->labels) {
      xt__fit_problem_free(pb);
      return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for %zu voxels", pb->nv);
    }
    const uint8_t *src = v->data;
    for (int z = 0; z < v->dim[2]; z++)
      for (int y = 0; y < v->dim[1]; y++)
        memcpy(pb->labels + pb->pad[0] +
                   (size_t)pb->n[0] * ((size_t)(y + pb->pad[1]) + (size_t)pb->n[1] * (z + pb->pad[2])),
               src + (size_t)v->dim[0] * ((size_t)y + (size_t)v->dim[1] * z), v->dim[0]);
  }
  pb->peak = 0;
  for (size_t i = 0; i < pb->nv; i++)
    if (pb->mu[i] > pb->peak) pb->peak = pb->mu[i];
  return 0;
}

void xt__fit_problem_free(xt_fit_problem *pb) {
  free(pb->mu);
  free(pb->labels);
  pb->mu = NULL;
  pb->labels = NULL;
}

int xt_fit_volume(const xt_volume *v, const xt_fit_options *o, xt_gmm **out, xt_fit_result *res, xt_msg *msg) {
  *out = NULL;
  memset(res, 0, sizeof *res);
  if (o->budget < 1 || o->iters < 0 || !(o->lr > 0) || !(o->inflate >= 1) || !(o->fit_cutoff >= 2) ||
      !(o->cutoff >= XT_GMM_CUTOFF_MIN && o->cutoff <= XT_GMM_CUTOFF_MAX))
    return xt_fail(msg, XT_EINVAL, "gmm-fit: invalid options");
  const double t0 = now_s();
  xt_fit_problem pb;
  xt_fit_engine *eng = NULL;
  xt_fit_param *par = NULL;
  uint8_t *lab = NULL;
  double *grad = NULL, *m = NULL, *vv = NULL;
  int n = 0, rc;
  if ((rc = xt__fit_problem_init(v, o->margin, &pb, msg))) return rc;
  memcpy(res->grid, pb.n, sizeof res->grid);
  if (!(pb.peak > 0)) {
    rc = xt_fail(msg, XT_EINVAL, "gmm-fit: the volume holds nothing denser than air");
    goto done;
  }
  if (o->engine != XT_FIT_CPU) {
    rc = xt__fit_cuda_engine(&pb, &eng, msg);
    if (rc && o->engine == XT_FIT_CUDA) goto done;
    rc = 0;
  }
  if (!eng && (rc = xt__fit_cpu_engine(&pb, o->threads, &eng, msg))) goto done;
  snprintf(res->engine, sizeof res->engine, "%s", eng->name);
  if ((rc = initialise(&pb, o, &par, &lab, &n, msg))) goto done;
  grad = calloc((size_t)n * XT_FIT_NP, sizeof(double));
  m = calloc((size_t)n * XT_FIT_NP, sizeof(double));
  vv = calloc((size_t)n * XT_FIT_NP, sizeof(double));
  if (!grad || !m || !vv) {
    rc = xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory for %d Gaussians", n);
    goto done;
  }
  double sse = 0;
  if ((rc = eng->forward(eng, par, n, o->fit_cutoff, &sse, msg))) goto done;
  res->psnr3d_init = psnr_of(&pb, sse);
  if (o->progress) o->progress(o->progress_ctx, "fit", 0, o->iters, res->psnr3d_init);
  int it = 0;
  for (it = 0; it < o->iters; it++) {
    if (o->target_psnr > 0 && psnr_of(&pb, sse) >= o->target_psnr) break;
    if ((rc = eng->backward(eng, par, n, o->fit_cutoff, grad, msg))) goto done;
    /* cosine decay from the full rate to 5% */
    const double scale = o->lr * (0.05 + 0.95 * 0.5 * (1 + cos(XT_PI * it / (double)o->iters)));
    adam_step(&pb, par, n, grad, m, vv, it + 1, scale);
    if ((rc = eng->forward(eng, par, n, o->fit_cutoff, &sse, msg))) goto done;
    if (o->progress) o->progress(o->progress_ctx, "fit", it + 1, o->iters, psnr_of(&pb, sse));
  }
  res->iters = it;
  /* the model as rendered: evaluated to its own cut-off */
  if ((rc = eng->forward(eng, par, n, o->cutoff, &sse, msg))) goto done;
  res->psnr3d = psnr_of(&pb, sse);
  if (o->proj_iters > 0) {
    if ((rc = xt__fit_project(&pb, v, o, par, n, m, vv, res, msg))) goto done;
    if ((rc = eng->forward(eng, par, n, o->cutoff, &sse, msg))) goto done;
    res->psnr3d_proj = psnr_of(&pb, sse);
  }
  if ((rc = xt__fit_to_gmm(&pb, par, lab, n, o->cutoff, out, msg))) goto done;
  res->count = (*out)->count;
  res->bytes = xt_gmm_file_bytes(*out);
  res->seconds = now_s() - t0;
done:
  if (eng) eng->destroy(eng);
  xt__fit_problem_free(&pb);
  free(par);
  free(lab);
  free(grad);
  free(m);
  free(vv);
  return rc;
}
