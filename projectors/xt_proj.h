/* Projectors: render the line integral of mu through the loaded models for every detector pixel.
 *
 * One interface, several backends behind a table of function pointers (xt_proj_ops): the CPU
 * reference (proj_cpu.c) and CUDA (cuda_pipeline.cu and its kinds, when built). Callers never branch on the backend
 * or the model kind. Models are added once (uploaded once for GPU backends) and must outlive the
 * projector; each render writes rows*cols float32 line integrals, row-major, row 0 first. */
#ifndef XT_PROJ_H
#define XT_PROJ_H

#include <stddef.h>
#include <stdint.h>

#include "xt_channels.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_spectral.h"

typedef enum xt_backend { XT_BACKEND_CPU = 1, XT_BACKEND_CUDA = 2 } xt_backend;

typedef struct xt_proj_options {
  xt_backend backend;
  int threads; /* CPU: worker threads, 0 = all cores */
  int device;  /* CUDA: device ordinal */
} xt_proj_options;

typedef struct xt_proj xt_proj;

/* The backend's function table; each backend source file defines one. */
typedef struct xt_proj_ops {
  const char *name;
  int (*available)(xt_msg *msg);
  int (*create)(const xt_proj_options *opt, void **impl, xt_msg *msg);
  int (*add_model)(void *impl, const xt_model *m, xt_msg *msg);
  int (*render)(void *impl, const xt_geometry *g, float *lineint, xt_msg *msg);
  /* g points to n geometries of one detector mode; out holds n * rows * cols floats. */
  int (*render_batch)(void *impl, const xt_geometry *g, int n, float *out, xt_msg *msg);
  void (*destroy)(void *impl);
  /* Material channels: the set (the union of the models' materials) and one frame's planes. */
  int (*channels)(void *impl, xt_chanset *cs, xt_msg *msg);
  int (*render_channels)(void *impl, const xt_geometry *g, float *out, xt_msg *msg);
  /* Device backends only (NULL otherwise): renders one frame into device memory d_out on the
   * caller's stream (a cudaStream_t) without synchronising: the line integral (channels 0) or the
   * channel planes (channels 1). For the imaging chain's device pipeline. */
  int (*render_device)(void *impl, const xt_geometry *g, int channels, float *d_out, void *stream, xt_msg *msg);
  /* Device backends only (NULL otherwise): the channels' spectral sums (xt_spectral.h) evaluated
   * in the march's epilogue, 2 planes into d_out; XT_EUNSUPPORTED, queueing nothing, where the
   * scene cannot (see xt_proj_render_device_spectral). */
  int (*render_spectral)(void *impl, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out, void *stream,
                         xt_msg *msg);
  /* Device backends only (NULL otherwise: plain memory): host memory the device's DMA writes
   * directly (xt_host_alloc). */
  int (*host_alloc)(size_t bytes, void **out, xt_msg *msg);
  void (*host_free)(void *p);
  /* Device backends only (NULL otherwise): n frames of one detector size into device memory d_out
   * (n * rows * cols floats) by the batch kernel, many poses per launch; returns once they are
   * there (xt_proj_render_batch_device). */
  int (*render_batch_device)(void *impl, const xt_geometry *g, int n, float *d_out, xt_msg *msg);
  /* A new centreline (n x 3 model mm, tip first) for instrument m, as added: copied into the
   * projector's own buffers of the instrument's capacity (no allocation); the next render shows it. */
  int (*set_shape)(void *impl, const xt_model *m, const double *pts, int n, xt_msg *msg);
  /* Contrast (issue 26): label volume m's labels with iodine added (xt_proj_set_iodine); io NULL:
   * none. NULL: the backend has no contrast. */
  int (*set_iodine)(void *impl, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg);
  /* Model m (as added) renders with placement T * (its placement as added) from the next render on
   * (xt_proj_set_transform); T already checked invertible. */
  int (*set_transform)(void *impl, const xt_model *m, const xt_affine *T, xt_msg *msg);
} xt_proj_ops;

const char *xt_backend_name(xt_backend b);
/* Parses "cpu" / "cuda"; returns 0 or XT_EINVAL. */
int xt_backend_parse(const char *s, xt_backend *out);
/* 0 when the backend is compiled in and usable here, else XT_ENODEV with the reason. */
int xt_proj_available(xt_backend b, xt_msg *msg);

int xt_proj_create(const xt_proj_options *opt, xt_proj **out, xt_msg *msg);
int xt_proj_add_model(xt_proj *p, const xt_model *m, xt_msg *msg);
int xt_proj_render(xt_proj *p, const xt_geometry *g, float *lineint, xt_msg *msg);
/* Instruments (models/xt_instr.h): the projector renders its own copy of each, and this replaces
 * the copy's centreline (pts: n x 3 model mm, tip first) from the next render on, without
 * allocating; m is the model as added. XT_ENOTFOUND when m was not added; the shape's own checks
 * (xt_instr_geom_build) otherwise, the projector's shape unchanged on failure. */
int xt_proj_set_shape(xt_proj *p, const xt_model *m, const double *pts, int n, xt_msg *msg);
/* Contrast (issue 26, docs/contrast.md): from the next render on, label l of label volume m (as
 * added) holds iodine at the partial density rho[l] (g/cm^3; rho 256 values, NULL: none) on top of
 * its own material, in the line integrals and the material channels alike (xt_iodine_tab). No
 * allocation; a small upload on a device backend, queued ahead of the next frame. XT_ENOTFOUND when
 * m was not added; xt_iodine_tab_build's errors (a label that is no contrast region), the
 * projector's iodine unchanged on failure. */
int xt_proj_set_iodine(xt_proj *p, const xt_model *m, const double *rho, xt_msg *msg);
/* Motion (issue 26; docs/geometry.md, "Model motion"): model m (as added) renders from the next
 * render on as if its placement were T * P, P its placement when it was added and T a map of the
 * patient frame (rigid for a table pan or a patient shift; a scaling about a point for a beating
 * heart). Every kind and backend applies it where it applies the placement: the rays are taken into
 * the model's frame by the inverse of patient -> world * T * P, so the integrals stay exact. T is
 * kept until the next call (identity: as added); it does not allocate. XT_ENOTFOUND when m was not
 * added, XT_EINVAL for a singular or non-finite T (nothing changed). */
int xt_proj_set_transform(xt_proj *p, const xt_model *m, const xt_affine *T, xt_msg *msg);
/* n frames of one detector size into out (n * rows * cols floats). Into memory from xt_host_alloc
 * (or any page-locked memory) of a device backend, the frames land where the DMA puts them, in
 * small chunks whose copies overlap the next chunk's kernels; into other memory they go through
 * the projector's pinned buffers and one host copy. The same values either way. */
int xt_proj_render_batch(xt_proj *p, const xt_geometry *g, int n, float *out, xt_msg *msg);
/* Host memory for frames of backend b, for callers that keep their frame buffers for a long run
 * (allocate once at set-up, never per frame): on CUDA page-locked and usable by every device
 * (cudaHostAlloc, portable), so xt_proj_render_batch writes it without a host copy; on the CPU
 * plain memory. 64-byte aligned; XT_ENOMEM (with the reason) when the system refuses, and then a
 * caller may fall back to malloc. Free it with xt_host_free(b, ...) only. */
int xt_host_alloc(xt_backend b, size_t bytes, void **out, xt_msg *msg);
void xt_host_free(xt_backend b, void *p);
void xt_proj_destroy(xt_proj *p);
xt_backend xt_proj_backend(const xt_proj *p);

/* The channel set of the models added so far. */
int xt_proj_channels(xt_proj *p, xt_chanset *cs, xt_msg *msg);
/* One frame's material channels: cs.n planes of rows*cols floats (g/cm^2), channel-major. On the
 * CPU backend the exact float64 reference (the GPU kernels' oracle). */
int xt_proj_render_channels(xt_proj *p, const xt_geometry *g, float *out, xt_msg *msg);
/* The same by the backend's fast path: on the CPU a leaner march of voxel models (proj_cpu_fast.c;
 * other kinds exact), within rel L2 1e-5 and max 1e-4 of the frame's largest value of the reference
 * (docs/projector.md, "The fast CPU path"); elsewhere xt_proj_render_channels. What the CPU
 * imaging chain renders unless its parameter cpu_exact is 1. */
int xt_proj_render_channels_fast(xt_proj *p, const xt_geometry *g, float *out, xt_msg *msg);
/* Device backends: one frame into device memory on a CUDA stream (see xt_proj_ops.render_device);
 * XT_EUNSUPPORTED on the CPU backend. */
int xt_proj_render_device(xt_proj *p, const xt_geometry *g, int channels, float *d_out, void *stream, xt_msg *msg);
/* Device backends: n frames of one detector size into device memory d_out (n * rows * cols floats,
 * frame i at i * rows * cols) by the batch kernel, chunks of many poses per launch, synchronised
 * before it returns: a batch for a consumer on the device (DLPack, issue 30) without a trip through
 * the host. XT_EUNSUPPORTED on the CPU backend. */
int xt_proj_render_batch_device(xt_proj *p, const xt_geometry *g, int n, float *d_out, xt_msg *msg);
/* Device backends: one frame's spectral sums of its channels (xt_spectral_sum with sp, whose
 * pointers are device memory) into d_out: plane 0 the k1 sums, plane 1 the k2 sums (rows*cols
 * floats each), computed from the channels in registers, so the channel planes never reach memory.
 * Equal, on one device, to xt_spectral_sum applied to xt_proj_render_device's planes. Only where
 * every model is of one kind that offers it (today the voxel kind: dense and label volumes): the
 * sums of several kinds' channels do not add. Otherwise XT_EUNSUPPORTED, with nothing queued, and
 * the caller renders the planes instead. */
int xt_proj_render_device_spectral(xt_proj *p, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out,
                                   void *stream, xt_msg *msg);

/* --- the exact reference (double precision, CPU) ------------------------------------------ */

/* Line integral of mu (dimensionless) along the world segment a->b through the models. */
double xt_ref_segment(const xt_model *const *models, int n, xt_vec3 a, xt_vec3 b);
/* Material channels of the whole frame in double: cs->n planes (g/cm^2), channel-major. */
int xt_ref_render_channels_f64(const xt_model *const *models, int n, const xt_chanset *cs, const xt_geometry *g,
                               double *out, int threads, xt_msg *msg);
/* Whole frame in double; threads 0 = all cores. */
int xt_ref_render_f64(const xt_model *const *models, int n, const xt_geometry *g, double *out, int threads,
                      xt_msg *msg);

/* --- Beer-Lambert ------------------------------------------------------------------------- */

/* I/I0 = exp(-L), written as round(65535 * exp(-L)) into 16 bits. */
void xt_intensity_u16(const float *lineint, size_t n, uint16_t *out);

#endif /* XT_PROJ_H */
