/* The chain's CUDA stages: one launch function per stage file (stage_*.cu), queued by the device
 * pipeline (chain_cuda.cu) on its stream. Internal to imaging/, C++ (nvcc) only. Each launch is
 * checked (cudaGetLastError) and never synchronises. */
#ifndef XT_STAGE_CUDA_H
#define XT_STAGE_CUDA_H

#include <cuda_runtime.h>

extern "C" {
#include "xt_chain_internal.h"
#include "xt_drc.h"
}

#define XT_STAGE_BLOCK 256 /* threads per block of the per-pixel stages */
#define XT_DETECT_MAX_BLOCKS 1056 /* the detect stage's grid: 8 blocks per SM of a 132-SM Hopper */

/* Row r and column c of linear index i in a grid `cols` wide, in 32 bits (a 64-bit division is a
 * long routine; the pipeline's grids stay below 2^31 pixels: chain_cuda.cu checks). */
static __device__ __forceinline__ void xt_stage_rc(unsigned i, int cols, int *r, int *c) {
  const unsigned q = i / (unsigned)cols;
  *r = (int)q;
  *c = (int)(i - q * (unsigned)cols);
}

/* Programmatic dependent launch (Hopper) of the stages after k_detect: each is launched with
 * xt_stage_launch, so the device sets up its grid and starts its blocks as the kernel ahead of it in
 * the stream ends, without the gap of a stream's kernel boundary (k_blur + k_readout + k_process_out
 * at 1024^2: 3.4 us a frame less, H200), and waits with xt_stage_wait_prior before it reads
 * anything that kernel (or any before it) wrote; whatever a stage reads before its wait is what no
 * kernel writes while frames run (the panel maps and k_process_out's defect lists, changed only by
 * an upload the host waits for). Loads after the wait of what the kernel ahead wrote are plain,
 * never __ldg (the non-coherent path is for data read-only over the kernel's lifetime, which here
 * may begin before the writer's ends). No stage releases its dependant early
 * (griddepcontrol.launch_dependents at the start of k_blur and k_readout, which let the next
 * kernel's blocks make their map loads during the last wave: no gain, 0.2610 against 0.2612 ms a
 * frame at (a)). Without the attribute (or before sm_90) the wait is a no-op and the launch an
 * ordinary one. */
static __device__ __forceinline__ void xt_stage_wait_prior(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
template <typename... P, typename... A>
static cudaError_t xt_stage_launch(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t st, A... a) {
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = st;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, k, a...);
}

/* Every CUDA call in host code: on failure, one line naming the call, into msg. */
#define XT_SCK(call)                                                                                           \
  do {                                                                                                         \
    cudaError_t e_ = (call);                                                                                   \
    if (e_ != cudaSuccess)                                                                                     \
      return xt_fail(msg, XT_EDEVICE, "cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)

/* detect: A (nch planes) -> X (absorbed energy, quanta drawn), S (expected; may be NULL) */
int xt_stage_detect_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                         float *S, cudaStream_t st, xt_msg *msg);
/* detect, fused path: P (the 2 planes of spectral sums the projector evaluated in its march's
 * epilogue, xt_proj_render_device_spectral) -> X, S as above. */
int xt_stage_detect_sums_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *P, float *X,
                              float *S, cudaStream_t st, xt_msg *msg);
/* scatter (issue 11): A -> src -> tmp -> out, the coarse scatter field (fc->sc) */
int xt_stage_scatter_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *src,
                          float *tmp, float *out, cudaStream_t st, xt_msg *msg);
/* dose-rate control (issue 11, stage_drc.cu): the loop's state on the device and the next frame's
 * exposure; the measuring field's code sum; the device-resident step */
typedef struct xt_drc_dev {
  xt_drc st;
  double kv, mas, pulse_ms; /* the next frame's exposure */
} xt_drc_dev;
int xt_stage_drc_field_cuda(const uint16_t *raw, int ocols, int orows, unsigned long long *sum, cudaStream_t st,
                            xt_msg *msg);
int xt_stage_drc_step_cuda(xt_drc_dev *L, const xt_drc_bank *bank, const xt_chain_tables *slots, xt_chain_tables *live,
                           unsigned long long *sum, unsigned long long n, const xt_drc_law *law, const xt_drc_meter *m,
                           int measure, xt_chain_drc_frame *rec, cudaStream_t st, xt_msg *msg);

/* blur: in -> out (rows then columns, one kernel) */
int xt_stage_blur_cuda(const xt_chain_frame_const *fc, const float *in, float *out, cudaStream_t st, xt_msg *msg);
/* readout: D -> raw (ADC codes); lag state updated; Y (non-NULL when the frame is processed): the
 * processing's pass 1 at the non-defective pixels, and Yd: Y's value (the state before this frame)
 * copied at the defective ones, which k_process_out computes; the codes at the ADC's full scale
 * added to *nsat (device memory, zeroed by the caller) */
int xt_stage_readout_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *gain,
                          const float *offset, const unsigned char *defect, const float *D, float *lag, uint16_t *raw,
                          float *Y, float *Yd, uint32_t *nsat, cudaStream_t st, xt_msg *msg);

/* The flat field an output pixel (r, c) collects, in ADU: xt_flat_expect over its bin (the same
 * sums in the same order wherever it is evaluated: readout and defect interpolation). */
static __device__ __forceinline__ float xt_stage_flat_adu(const xt_chain_frame_const &fc, float flat1, int r, int c) {
  const int b = fc.ro.bin;
  float f = 0.f;
  for (int dy = 0; dy < b; dy++)
    for (int dx = 0; dx < b; dx++)
      f += xt_flat_expect(&fc.cam, fc.mas, flat1, fc.coll.grid_tp, c * b + dx, r * b + dy);
  return f * fc.ro.adu_per_kev;
}

/* process, after xt_stage_readout_cuda with Y and Yd: raw -> Y at the defective pixels -> proc; with
 * fc->pc.wl (device memory, the automatic window) first the histogram into hist (XT_AUTO_BINS counts,
 * zero on entry and left zero) and the pick into wl. The
 * defective pixels by tile of k_process_out (XT_POUT_TW x XT_POUT_TH output pixels, tile b =
 * row-major over the tile grid, with a 1-pixel halo): their output indices bl[boff[b] ..
 * boff[b + 1]); boff NULL when there are none. xt_chain_cuda_upload builds them from the defect map. */
#define XT_POUT_TW 32
#define XT_POUT_TH 32
int xt_stage_process_cuda(const xt_chain_frame_const *fc, const xt_chain_tables *d_tab, const float *gain,
                          const float *offset, const unsigned char *defect, const uint32_t *boff, const uint32_t *bl,
                          const uint16_t *raw, const float *Yd, float *Y, uint16_t *proc, uint32_t *hist,
                          cudaStream_t st, xt_msg *msg);

#endif /* XT_STAGE_CUDA_H */
