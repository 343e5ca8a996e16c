/* The fitter's CUDA engine (xt_fit_internal.h): the volume error and its gradient on the GPU, the
 * same arithmetic as the CPU engine of xt_fit.c (rows of voxels, a geometric recurrence along
 * each row, the residual's moments per Gaussian), with the target resident on the device.
 *
 *   forward   one block per Gaussian, its threads over the rows of its ellipsoid; each voxel's
 *             sum is accumulated as a 64-bit fixed-point integer (atomicAdd), so the sum does not
 *             depend on the order the blocks run in: a fit is reproducible. Then the residual
 *             (model - target) in float and its squared sum (block partials, added on the host
 *             in block order);
 *   backward  one block per Gaussian, its threads over its rows, the ten moments reduced in a
 *             fixed tree; the gradient follows on the host (xt__fit_grad_from_moments).
 * Per iteration the parameters go up (104 bytes per Gaussian) and the moments come back (80). */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "xt_fit_internal.h"
}
#include "xt_fit_row.h"

#define FIT_THREADS 128
#define CK(call)                                                                                       \
  do {                                                                                                 \
    cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess)                                                                             \
      return xt_fail(msg, XT_EDEVICE, "gmm-fit cuda: %s: %s", #call, cudaGetErrorString(e_));          \
  } while (0)

/* One Gaussian as the kernels see it: centre, Cholesky factor, peak, its box of index rows. */
typedef struct dev_g {
  double c[3];
  double L00, L10, L11, L20, L21, L22;
  double rho;
  int lo[3], hi[3];
} dev_g;

typedef struct cuda_engine {
  xt_fit_engine base;
  int nv;
  float *d_mu, *d_res;
  unsigned long long *d_acc;
  double *d_part, *h_part;
  dev_g *d_g, *h_g;
  double *d_mom, *h_mom;
  int cap; /* Gaussians the buffers hold */
  double unit; /* fixed point: one unit of d_acc in mu */
  int nblocks;
} cuda_engine;

typedef struct fwd_args {
  const dev_g *g;
  unsigned long long *acc;
  int n0, n1;
  double K2, inv_unit;
} fwd_args;

/* The row (y, z) of Gaussian G (xt_fit_row.h, shared with the CPU engine). */
static __device__ __forceinline__ int dev_row(const dev_g &G, int y, int z, double K2, int n0, xt_fit_row *r) {
  const double L[6] = {G.L00, G.L10, G.L11, G.L20, G.L21, G.L22};
  return xt_fit_row_setup(G.c, L, G.rho, K2, n0, y - G.c[1], z - G.c[2], r);
}

/* Thread mapping: block = Gaussian, threads over the rows (y, z) of its box. In: the Gaussians.
 * Out: acc (fixed-point sums) += each voxel's value. (No __launch_bounds__: with it, ptxas 13.0
 * keeps one register fewer and spills 8 bytes.) */
__global__ void k_fit_forward(const fwd_args A) {
  const dev_g G = A.g[blockIdx.x];
  const int ny = G.hi[1] - G.lo[1] + 1, nz = G.hi[2] - G.lo[2] + 1;
  if (ny <= 0 || nz <= 0) return;
  for (int r = threadIdx.x; r < ny * nz; r += blockDim.x) {
    const int y = G.lo[1] + r % ny, z = G.lo[2] + r / ny;
    xt_fit_row rw;
    if (!dev_row(G, y, z, A.K2, A.n0, &rw)) continue;
    unsigned long long *row = A.acc + (size_t)A.n0 * ((size_t)y + (size_t)A.n1 * z);
    double Gv = rw.G, R = rw.R;
    for (int x = rw.x0; x <= rw.x1; x++) {
      atomicAdd(row + x, (unsigned long long)__double2ll_rn(Gv * A.inv_unit));
      Gv *= R;
      R *= rw.Q;
    }
  }
}

/* Thread mapping: grid-stride over voxels. In: acc, the target. Out: res = model - target, and
 * each block's sum of res^2 (fixed tree). */
__global__ void __launch_bounds__(256) k_fit_residual(const unsigned long long *acc, const float *mu, float *res,
                                                      size_t nv, double unit, double *part) {
  __shared__ double s[256];
  double e = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
    const float r = (float)((double)acc[i] * unit) - mu[i];
    res[i] = r;
    e += (double)r * r;
  }
  s[threadIdx.x] = e;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = s[0];
}

typedef struct bwd_args {
  const dev_g *g;
  const float *res;
  double *mom; /* 10 per Gaussian: S0, S1[3], S2[6] */
  int n0, n1;
  double K2;
} bwd_args;

/* Thread mapping: block = Gaussian, threads over the rows of its box. In: the residual. Out: the
 * ten moments of the residual over the ellipsoid (sum r G, r G d, r G d d^T), fixed-tree sums. */
__global__ void __launch_bounds__(FIT_THREADS) k_fit_backward(const bwd_args A) {
  __shared__ double s[10][FIT_THREADS];
  const dev_g G = A.g[blockIdx.x];
  const int ny = G.hi[1] - G.lo[1] + 1, nz = G.hi[2] - G.lo[2] + 1;
  double m[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int r = threadIdx.x; ny > 0 && nz > 0 && r < ny * nz; r += blockDim.x) {
    const int y = G.lo[1] + r % ny, z = G.lo[2] + r / ny;
    xt_fit_row rw;
    if (!dev_row(G, y, z, A.K2, A.n0, &rw)) continue;
    double mm[3];
    xt_fit_row_moments(&rw, A.res + (size_t)A.n0 * ((size_t)y + (size_t)A.n1 * z), mm);
    const double W = mm[0], W0 = mm[1], W00 = mm[2];
    const double d1 = y - G.c[1], d2 = z - G.c[2];
    m[0] += W;
    m[1] += W0;
    m[2] += W * d1;
    m[3] += W * d2;
    m[4] += W00;
    m[5] += W0 * d1;
    m[6] += W0 * d2;
    m[7] += W * d1 * d1;
    m[8] += W * d1 * d2;
    m[9] += W * d2 * d2;
  }
  for (int k = 0; k < 10; k++) s[k][threadIdx.x] = m[k];
  __syncthreads();
  for (int h = FIT_THREADS / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h)
      for (int k = 0; k < 10; k++) s[k][threadIdx.x] += s[k][threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x < 10) A.mom[(size_t)blockIdx.x * 10 + threadIdx.x] = s[threadIdx.x][0];
}

/* ------------------------------------------------------------------------------------------ */

static void release(cuda_engine *c) {
  cudaFree(c->d_mu);
  cudaFree(c->d_res);
  cudaFree(c->d_acc);
  cudaFree(c->d_part);
  cudaFree(c->d_g);
  cudaFree(c->d_mom);
  free(c->h_part);
  free(c->h_g);
  free(c->h_mom);
}

static void cuda_destroy(xt_fit_engine *e) {
  cuda_engine *c = (cuda_engine *)e;
  if (!c) return;
  release(c);
  free(c);
}

static int ensure_cap(cuda_engine *c, int n, xt_msg *msg) {
  if (n <= c->cap) return 0;
  cudaFree(c->d_g);
  cudaFree(c->d_mom);
  free(c->h_g);
  free(c->h_mom);
  c->d_g = NULL;
  c->d_mom = NULL;
  c->cap = 0;
  c->h_g = (dev_g *)malloc(sizeof(dev_g) * (size_t)n);
  c->h_mom = (double *)malloc(sizeof(double) * 10 * (size_t)n);
  if (!c->h_g || !c->h_mom) return xt_fail(msg, XT_ENOMEM, "gmm-fit cuda: out of memory");
  CK(cudaMalloc((void **)&c->d_g, sizeof(dev_g) * (size_t)n));
  CK(cudaMalloc((void **)&c->d_mom, sizeof(double) * 10 * (size_t)n));
  c->cap = n;
  return 0;
}

/* The Gaussians as the kernels take them (host, per call). */
static int upload(cuda_engine *c, const xt_fit_param *par, int n, double K, xt_msg *msg) {
  int rc = ensure_cap(c, n, msg);
  if (rc) return rc;
  const int *nn = c->base.pb->n;
  for (int i = 0; i < n; i++) {
    dev_g *g = &c->h_g[i];
    double L[3][3], S[3][3];
    xt__fit_lmat(&par[i], L);
    xt__fit_sigma(&par[i], S);
    memcpy(g->c, par[i].c, sizeof g->c);
    g->L00 = L[0][0];
    g->L10 = L[1][0];
    g->L11 = L[1][1];
    g->L20 = L[2][0];
    g->L21 = L[2][1];
    g->L22 = L[2][2];
    g->rho = exp(par[i].lr);
    for (int a = 0; a < 3; a++) {
      const double h = K * sqrt(S[a][a]);
      g->lo[a] = (int)ceil(par[i].c[a] - h);
      g->hi[a] = (int)floor(par[i].c[a] + h);
      if (g->lo[a] < 0) g->lo[a] = 0;
      if (g->hi[a] > nn[a] - 1) g->hi[a] = nn[a] - 1;
    }
    if (g->lo[0] > g->hi[0]) g->hi[1] = g->lo[1] - 1; /* misses the grid: no rows */
  }
  CK(cudaMemcpy(c->d_g, c->h_g, sizeof(dev_g) * (size_t)n, cudaMemcpyHostToDevice));
  return 0;
}

static int cuda_forward(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *sse, xt_msg *msg) {
  cuda_engine *c = (cuda_engine *)e;
  const xt_fit_problem *pb = e->pb;
  int rc = upload(c, par, n, K, msg);
  if (rc) return rc;
  CK(cudaMemset(c->d_acc, 0, sizeof(unsigned long long) * pb->nv));
  fwd_args A;
  A.g = c->d_g;
  A.acc = c->d_acc;
  A.n0 = pb->n[0];
  A.n1 = pb->n[1];
  A.K2 = K * K;
  A.inv_unit = 1.0 / c->unit;
  if (n > 0) k_fit_forward<<<n, FIT_THREADS>>>(A);
  CK(cudaGetLastError());
  k_fit_residual<<<c->nblocks, 256>>>(c->d_acc, c->d_mu, c->d_res, pb->nv, c->unit, c->d_part);
  CK(cudaGetLastError());
  CK(cudaMemcpy(c->h_part, c->d_part, sizeof(double) * c->nblocks, cudaMemcpyDeviceToHost));
  double s = 0;
  for (int i = 0; i < c->nblocks; i++) s += c->h_part[i];
  *sse = s;
  return 0;
}

static int cuda_backward(xt_fit_engine *e, const xt_fit_param *par, int n, double K, double *grad, xt_msg *msg) {
  cuda_engine *c = (cuda_engine *)e;
  const xt_fit_problem *pb = e->pb;
  int rc = upload(c, par, n, K, msg);
  if (rc) return rc;
  bwd_args A;
  A.g = c->d_g;
  A.res = c->d_res;
  A.mom = c->d_mom;
  A.n0 = pb->n[0];
  A.n1 = pb->n[1];
  A.K2 = K * K;
  if (n > 0) k_fit_backward<<<n, FIT_THREADS>>>(A);
  CK(cudaGetLastError());
  CK(cudaMemcpy(c->h_mom, c->d_mom, sizeof(double) * 10 * (size_t)n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    const double *m = c->h_mom + (size_t)i * 10;
    xt__fit_grad_from_moments(&par[i], m[0], m + 1, m + 4, 1.0 / (double)pb->nv, grad + (size_t)i * XT_FIT_NP);
  }
  return 0;
}

extern "C" int xt__fit_cuda_engine(const xt_fit_problem *pb, xt_fit_engine **out, xt_msg *msg) {
  *out = NULL;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    return xt_fail(msg, XT_ENODEV, "gmm-fit: no CUDA device");
  }
  cuda_engine *c = (cuda_engine *)calloc(1, sizeof *c);
  if (!c) return xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
  c->base.pb = pb;
  c->base.forward = cuda_forward;
  c->base.backward = cuda_backward;
  c->base.destroy = cuda_destroy;
  snprintf(c->base.name, sizeof c->base.name, "cuda");
  /* fixed point: 2^-36 of the peak per unit; a voxel may sum 2^27 peaks before it overflows */
  c->unit = pb->peak * ldexp(1.0, -36);
  c->nblocks = 1024;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_mu, sizeof(float) * pb->nv);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_res, sizeof(float) * pb->nv);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_acc, sizeof(unsigned long long) * pb->nv);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_part, sizeof(double) * c->nblocks);
  if (e == cudaSuccess) e = cudaMemcpy(c->d_mu, pb->mu, sizeof(float) * pb->nv, cudaMemcpyHostToDevice);
  c->h_part = (double *)malloc(sizeof(double) * c->nblocks);
  if (e != cudaSuccess || !c->h_part) {
    int rc = e != cudaSuccess ? xt_fail(msg, XT_EDEVICE, "gmm-fit cuda: %s", cudaGetErrorString(e))
                              : xt_fail(msg, XT_ENOMEM, "gmm-fit: out of memory");
    cuda_destroy(&c->base);
    return rc;
  }
  *out = &c->base;
  return 0;
}
