/* Stage "scatter" on the GPU (twin of stage_scatter_cpu.c): the coarse scatter field of a frame
 * (xt_scatter.h), three launches of one thread per coarse cell (at most 64 x 64). */
#include "xt_stage_cuda.h"

extern "C" {
#include "xt_scatter_math.h"
}

/* Thread mapping: one thread per coarse cell. In: A (nch planes), the tables. Out: src. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_scatter_src(const xt_chain_tables *tab, const __grid_constant__ xt_chain_frame_const fc, const float *A, float *src) {
  const int n = fc.sc.gc * fc.sc.gr, c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= n) return;
  src[c] = xt_scatter_source(tab, &fc.cam, &fc.coll, &fc.sc, A, fc.cols, fc.rows, c % fc.sc.gc, c / fc.sc.gc);
}

/* Thread mapping: one thread per coarse cell. In: in. Out: out, the Gaussian along one axis. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_scatter_blur(const __grid_constant__ xt_chain_frame_const fc, const float *in, float *out, int axis, float gain) {
  const int n = fc.sc.gc * fc.sc.gr, c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= n) return;
  out[c] = xt_scatter_blur_at(&fc.sc, in, c % fc.sc.gc, c / fc.sc.gc, axis, gain);
}

int xt_stage_scatter_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *src,
                          float *tmp, float *out, cudaStream_t st, xt_msg *msg) {
  const int n = fc->sc.gc * fc->sc.gr;
  const unsigned blocks = (unsigned)((n + XT_STAGE_BLOCK - 1) / XT_STAGE_BLOCK);
  k_scatter_src<<<blocks, XT_STAGE_BLOCK, 0, st>>>(d_tab, *fc, A, src);
  XT_SCK(cudaGetLastError());
  k_scatter_blur<<<blocks, XT_STAGE_BLOCK, 0, st>>>(*fc, src, tmp, 0, 1.f);
  XT_SCK(cudaGetLastError());
  k_scatter_blur<<<blocks, XT_STAGE_BLOCK, 0, st>>>(*fc, tmp, out, 1, fc->sc.grid_ts * fc->mas);
  XT_SCK(cudaGetLastError());
  return 0;
}
