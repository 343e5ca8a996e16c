/* The CUDA projector's own C API: what xt_proj_cuda_ops forwards to, plus the variants, timing
 * and streaming entry points that the benchmark and the GPU tests need. Plain C (gcc -std=c11,
 * no CUDA headers): an opaque handle, int error codes, detail in xt_msg.
 *
 * Everything here fails with XT_ENODEV when no CUDA device is present. */
#ifndef XT_PROJ_CUDA_H
#define XT_PROJ_CUDA_H

#include <stddef.h>

#include "xt_proj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where voxels live on the device. AUTO: linear memory, plus a 3D-texture copy of volumes larger
 * than dual_min_bytes (default: the device's L2), each launch using the layout that suits its
 * view (docs/BENCHMARKS.md: for L2-resident volumes linear is faster at every angle). */
enum { XT_CUDA_VOX_LINEAR = 0, XT_CUDA_VOX_TEXTURE = 1, XT_CUDA_VOX_AUTO = 2 };
/* Where the label -> mu table lives during a launch. Constant memory measured ~4% faster but is
 * one per process: AUTO takes it when free and falls back to shared memory otherwise. */
enum { XT_CUDA_LUT_SHARED = 0, XT_CUDA_LUT_CONST = 1, XT_CUDA_LUT_AUTO = 2 };

typedef struct xt_cuda_options {
  int device; /* ordinal */
  int voxels; /* XT_CUDA_VOX_* */
  long long dual_min_bytes; /* AUTO: volumes above this many bytes also get the texture copy; -1 = L2 size */
  int lut;    /* XT_CUDA_LUT_*; CONST fails with XT_EBUSY when another projector holds it */
  int hull;   /* 1: clip rays to each model's content hull (exact; see proj_voxel.cu); 0: off */
} xt_cuda_options;

/* The defaults: what measured fastest (docs/BENCHMARKS.md). */
xt_cuda_options xt_cuda_default_options(void);

typedef struct xt_cuda_proj xt_cuda_proj;

typedef struct xt_cuda_info {
  char name[256];
  int sm_count;
  int cc_major, cc_minor;
  double sm_clock_mhz; /* peak, as the device reports it */
  size_t l2_bytes;
  size_t global_bytes;
  int driver_version, runtime_version;
} xt_cuda_info;

int xt_cuda_available(xt_msg *msg);
/* 1 when all of [p, p + bytes) is page-locked host memory (xt_host_alloc, cudaHostAlloc): the
 * device's DMA can write it directly, with no staging copy. */
int xt_cuda_host_pinned(const void *p, size_t bytes);
int xt_cuda_device_info(int device, xt_cuda_info *info, xt_msg *msg);
/* Device-to-device copy of `bytes` (timed with events, best of reps); GB/s counting read + write. */
int xt_cuda_copy_bandwidth(int device, size_t bytes, int reps, double *gbps, xt_msg *msg);

int xt_cuda_create(const xt_cuda_options *opt, xt_cuda_proj **out, xt_msg *msg);
/* Uploads the volume (and table) once; the model must outlive the projector. */
int xt_cuda_add_model(xt_cuda_proj *p, const xt_model *m, xt_msg *msg);
/* One frame, rows*cols floats into host memory (synchronous). */
int xt_cuda_render(xt_cuda_proj *p, const xt_geometry *g, float *out, xt_msg *msg);
/* n frames of one detector mode; renders in chunks of many poses per launch, the copy-out of
 * one chunk overlapping the render of the next. */
int xt_cuda_render_batch(xt_cuda_proj *p, const xt_geometry *g, int n, float *out, xt_msg *msg);
/* n frames of one detector mode into device memory d_out, chunks of many poses per launch; returns
 * once they are there. */
int xt_cuda_render_batch_device(xt_cuda_proj *p, const xt_geometry *g, int n, float *d_out, xt_msg *msg);
void xt_cuda_destroy(xt_cuda_proj *p);
/* Material channels: the set, one frame's planes to host memory, and one frame (line integral or
 * channels) into device memory on a caller's cudaStream_t without synchronising. */
int xt_cuda_channels(xt_cuda_proj *p, xt_chanset *cs, xt_msg *msg);
int xt_cuda_render_channels(xt_cuda_proj *p, const xt_geometry *g, float *out, xt_msg *msg);
int xt_cuda_render_device(xt_cuda_proj *p, const xt_geometry *g, int channels, float *d_out, void *stream, xt_msg *msg);
/* The channels' spectral sums, 2 planes (xt_proj_render_device_spectral): voxel models only. */
int xt_cuda_render_spectral(xt_cuda_proj *p, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out,
                            void *stream, xt_msg *msg);

/* --- measurement (benchmark, tests) -------------------------------------------------------- */

/* Kernel time only: `reps` launches of `per_launch` frames each (poses g[(i*per_launch + j) % n]),
 * output left on the device; ms[i] gets each launch's time from CUDA events (after `warmup`
 * untimed launches). */
int xt_cuda_time_kernel(xt_cuda_proj *p, const xt_geometry *g, int n, int per_launch, int warmup, int reps,
                        float *ms, xt_msg *msg);
/* Steps (voxels visited) summed over the frame's rays, counted by the kernel itself. */
int xt_cuda_count_steps(xt_cuda_proj *p, const xt_geometry *g, double *steps, double *rays_hit, xt_msg *msg);
/* Streams `frames` frames (poses cycling through g[0..n)) into a ring of pinned host buffers,
 * render of frame i+1 overlapping the copy-out of frame i; *seconds is the wall time of the
 * whole stream, from the first launch to the last frame in host memory. */
int xt_cuda_stream(xt_cuda_proj *p, const xt_geometry *g, int n, int frames, double *seconds, xt_msg *msg);
/* One frame to host memory, timed from the call to return (pose upload, kernel, copy). */
int xt_cuda_render_timed(xt_cuda_proj *p, const xt_geometry *g, float *out, double *seconds, xt_msg *msg);

extern const xt_proj_ops xt_proj_cuda_ops;

#ifdef __cplusplus
}
#endif

#endif /* XT_PROJ_CUDA_H */
