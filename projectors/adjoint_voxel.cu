/* The voxel operator and its transpose on a CUDA device (xt_adjoint.h: xt_adj_forward_cuda,
 * xt_adj_back_cuda): float64 throughout, each pixel's ray set up as the CPU reference sets it up
 * (proj_cpu.c's frame_worker, proj_cpu_voxel.c's voxel_walk) and walked by the same iterator
 * (xt_voxel_walk.h). Built with -fmad=false (projectors/cuda.cmake) so that no multiply-add is
 * contracted: the arithmetic is the CPU's, operation for operation, and the forward equals the
 * CPU's (test_adjoint_cuda). The back-projection scatters with atomicAdd, so its sums are the CPU's
 * up to the order of the additions.
 *
 * One call is one batch: the grid and the frames are copied in, the result out; device memory is
 * allocated per call (an operator for optimisation loops, not the frame path of a renderer). */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

/* The C headers' functions have C linkage (xt_fail, xt_geom_patient_to_world). */
extern "C" {
#include "xt_adjoint.h"
#include "xt_raycast.h"
#include "xt_voxel_walk.h"
}

/* What a thread needs of its frame. */
typedef struct adj_frame {
  xt_affine w2c;
  xt_vec3 source, det_origin, u, v;
  double pu, pv;
  int ok;
} adj_frame;

typedef struct adj_launch {
  int dim[3];
  int rows, cols, n;
  const adj_frame *frames;
} adj_launch;

/* The ray of pixel (c, r) of frame f in cell space, clipped: 0 when it misses the grid. */
static __device__ __forceinline__ int pixel_ray(const adj_launch &L, const adj_frame &fr, int c, int r, double o[3],
                                                double q[3], double *s0, double *s1) {
  /* xt_geom_pixel_pos, then frame_worker's direction and length, then voxel_walk's map */
  xt_vec3 px = xt_v3_add(fr.det_origin, xt_v3_add(xt_v3_scale(fr.u, c * fr.pu), xt_v3_scale(fr.v, r * fr.pv)));
  xt_vec3 d = xt_v3_sub(px, fr.source);
  double len = xt_v3_norm(d);
  xt_vec3 w = xt_v3_scale(d, 1.0 / len);
  xt_vec3 oc = xt_aff_apply(&fr.w2c, fr.source), qc = xt_aff_apply_dir(&fr.w2c, w);
  o[0] = oc.x, o[1] = oc.y, o[2] = oc.z;
  q[0] = qc.x, q[1] = qc.y, q[2] = qc.z;
  int ain, aout;
  return xt_clip_box_axes_f64(o, q, L.dim, len, s0, s1, &ain, &aout);
}

/* Thread per pixel of the batch (frame-major): out[k] = sum over the ray's voxels of seg * mu. */
__global__ void adj_forward_kernel(adj_launch L, const double *__restrict__ mu, double *__restrict__ out) {
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long frame = (long long)L.rows * L.cols;
  if (k >= frame * L.n) return;
  const int f = (int)(k / frame), r = (int)((k % frame) / L.cols), c = (int)(k % L.cols);
  const adj_frame &fr = L.frames[f];
  double acc = 0.0, o[3], q[3], s0, s1;
  if (fr.ok && pixel_ray(L, fr, c, r, o, q, &s0, &s1)) {
    xt_vwalk wk;
    xt_vwalk_init(&wk, L.dim, o, q, s0, s1);
    ptrdiff_t lin;
    double seg, sx;
    int cross;
    while (xt_vwalk_next(&wk, &lin, &seg, &cross, &sx)) acc += seg * mu[lin];
  }
  out[k] = acc;
}

/* Thread per pixel of the batch: x[v] += seg * y[k] over the ray's voxels (atomic). */
__global__ void adj_back_kernel(adj_launch L, const double *__restrict__ y, double *__restrict__ x) {
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long frame = (long long)L.rows * L.cols;
  if (k >= frame * L.n) return;
  const int f = (int)(k / frame), r = (int)((k % frame) / L.cols), c = (int)(k % L.cols);
  const adj_frame &fr = L.frames[f];
  const double yk = y[k];
  double o[3], q[3], s0, s1;
  if (yk == 0.0 || !fr.ok || !pixel_ray(L, fr, c, r, o, q, &s0, &s1)) return;
  xt_vwalk wk;
  xt_vwalk_init(&wk, L.dim, o, q, s0, s1);
  ptrdiff_t lin;
  double seg, sx;
  int cross;
  while (xt_vwalk_next(&wk, &lin, &seg, &cross, &sx))
    if (seg > 0.0) atomicAdd(&x[lin], seg * yk);
}

#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      rc = xt_fail(msg, XT_EDEVICE, "adjoint cuda: %s: %s", #call, cudaGetErrorString(e_));          \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)

/* forward (back = 0): in = mu (voxels), out = frames; back: in = y (frames), out = x (voxels). */
static int run(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *in, double *out, int back,
               int device, xt_msg *msg) {
  int rc = xt_adj_grid_validate(grid, msg);
  if (rc) return rc;
  const size_t voxels = (size_t)grid->dim[0] * grid->dim[1] * grid->dim[2];
  if (n < 1) {
    if (back) memset(out, 0, voxels * sizeof(double));
    return 0;
  }
  const int rows = g[0].mode.rows, cols = g[0].mode.cols;
  for (int f = 1; f < n; f++)
    if (g[f].mode.rows != rows || g[f].mode.cols != cols)
      return xt_fail(msg, XT_EINVAL, "adjoint: frame %d is %d x %d, frame 0 %d x %d: one detector size per batch", f,
                     g[f].mode.cols, g[f].mode.rows, cols, rows);
  const size_t pixels = (size_t)rows * cols * (size_t)n;
  adj_frame *hf = (adj_frame *)malloc(sizeof(adj_frame) * (size_t)n);
  adj_frame *df = NULL;
  double *dv = NULL, *dp = NULL;
  if (!hf) return xt_fail(msg, XT_ENOMEM, "adjoint cuda: out of memory");
  {
    xt_model fake;
    memset(&fake, 0, sizeof fake);
    fake.placement = grid->placement;
    static const int zero[3] = {0, 0, 0};
    for (int f = 0; f < n; f++) {
      hf[f].ok = xt_world_to_cell_of(&fake, &grid->index_to_model, zero, &g[f].pose, &hf[f].w2c);
      hf[f].source = g[f].source;
      hf[f].det_origin = g[f].det_origin;
      hf[f].u = g[f].u;
      hf[f].v = g[f].v;
      hf[f].pu = g[f].mode.pitch_u_mm;
      hf[f].pv = g[f].mode.pitch_v_mm;
    }
  }
  CK(cudaSetDevice(device));
  CK(cudaMalloc(&df, sizeof(adj_frame) * (size_t)n));
  CK(cudaMalloc(&dv, voxels * sizeof(double)));
  CK(cudaMalloc(&dp, pixels * sizeof(double)));
  CK(cudaMemcpy(df, hf, sizeof(adj_frame) * (size_t)n, cudaMemcpyHostToDevice));
  {
    adj_launch L;
    for (int a = 0; a < 3; a++) L.dim[a] = grid->dim[a];
    L.rows = rows, L.cols = cols, L.n = n, L.frames = df;
    const int threads = 128;
    const unsigned blocks = (unsigned)((pixels + threads - 1) / threads);
    if (back) {
      CK(cudaMemcpy(dp, in, pixels * sizeof(double), cudaMemcpyHostToDevice));
      CK(cudaMemset(dv, 0, voxels * sizeof(double)));
      adj_back_kernel<<<blocks, threads>>>(L, dp, dv);
      CK(cudaGetLastError());
      CK(cudaMemcpy(out, dv, voxels * sizeof(double), cudaMemcpyDeviceToHost));
    } else {
      CK(cudaMemcpy(dv, in, voxels * sizeof(double), cudaMemcpyHostToDevice));
      adj_forward_kernel<<<blocks, threads>>>(L, dv, dp);
      CK(cudaGetLastError());
      CK(cudaMemcpy(out, dp, pixels * sizeof(double), cudaMemcpyDeviceToHost));
    }
  }
done:
  if (df) cudaFree(df);
  if (dv) cudaFree(dv);
  if (dp) cudaFree(dp);
  free(hf);
  return rc;
}

extern "C" int xt_adj_forward_cuda(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, double *out,
                                   int device, xt_msg *msg) {
  return run(grid, g, n, mu, out, 0, device, msg);
}

extern "C" int xt_adj_back_cuda(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *y, double *x,
                                int device, xt_msg *msg) {
  return run(grid, g, n, y, x, 1, device, msg);
}
