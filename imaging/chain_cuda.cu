/* The chain's device pipeline: a frame stays on the GPU from the first ray to the final uint16
 * pixels and crosses to the host once.
 *
 *   xt_proj_render_device     material channels A            (projectors: cuda_pipeline.cu)
 *   k_detect                  A -> X (quanta), F (flat)      (stage_detect.cu)
 *     or, fused (voxel models only, no scatter: queue_detect below):
 *   xt_proj_render_device_spectral  spectral sums P (2 planes, in A's memory)
 *   k_detect<sums>            P -> X, F
 *   k_blur                    X -> D (rows, columns)         (stage_blur.cu)
 *   k_readout                 D, F -> raw, FA; lag state     (stage_readout.cu)
 *   k_process_log, _out       raw, FA -> Y (state) -> proc   (stage_process.cu)
 *   one cudaMemcpyAsync       [raw | proc] -> pinned host memory
 *
 * Everything is queued on the chain's own stream; the only synchronisation is the wait for that
 * copy. Scratch is allocated once per detector size (never per frame); the tables and panel maps
 * are uploaded when they change. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "xt_stage_cuda.h"

typedef struct chain_dev {
  int device;
  cudaStream_t st;
  int cols, rows, ocols, orows, nch; /* the scratch's sizes */
  float *A, *X, *D, *F, *FA, *lag, *Y, *S;
  float *M;      /* DSA mask (issue 11) */
  float *SC;     /* scatter (issue 11): 3 coarse planes, sources, one pass, the field */
  uint16_t *out; /* raw (ocols x orows) then proc */
  xt_draw_rest *rest; /* the fused path's deferred draws (one slot a render pixel) */
  unsigned *rest_n;   /* their 2 counters, used alternately */
  int rest_parity;
  float *gain, *offset;
  unsigned char *defect;
  int maps_cols, maps_rows;
  xt_chain_tables *tab;
  /* pinned host side of the copy-out */
  uint16_t *h_out;
  float *h_f;
} chain_dev;

#define CK XT_SCK

static void free_frame_scratch(chain_dev *d) {
  float **f[] = {&d->A, &d->X, &d->D, &d->F, &d->FA, &d->lag, &d->Y, &d->S, &d->M, &d->SC};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    cudaFree(*f[i]);
    *f[i] = NULL;
  }
  cudaFree(d->out);
  cudaFree(d->rest);
  cudaFree(d->rest_n);
  d->rest = NULL;
  d->rest_n = NULL;
  cudaFreeHost(d->h_out);
  cudaFreeHost(d->h_f);
  d->out = NULL;
  d->h_out = NULL;
  d->h_f = NULL;
  d->cols = d->rows = d->ocols = d->orows = 0;
}

static void free_maps(chain_dev *d) {
  cudaFree(d->gain);
  cudaFree(d->offset);
  cudaFree(d->defect);
  d->gain = d->offset = NULL;
  d->defect = NULL;
  d->maps_cols = d->maps_rows = 0;
}

extern "C" void xt_chain_cuda_destroy(xt_chain *c) {
  chain_dev *d = (chain_dev *)c->dev;
  if (!d) return;
  cudaSetDevice(d->device);
  if (d->st) cudaStreamSynchronize(d->st);
  free_frame_scratch(d);
  free_maps(d);
  cudaFree(d->tab);
  if (d->st) cudaStreamDestroy(d->st);
  free(d);
  c->dev = NULL;
}

extern "C" int xt_chain_cuda_upload(xt_chain *c, xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  CK(cudaSetDevice(d->device));
  CK(cudaMemcpyAsync(d->tab, &c->tab, sizeof c->tab, cudaMemcpyHostToDevice, d->st));
  if (c->maps.gain) {
    const size_t n = (size_t)c->maps.cols * c->maps.rows;
    if (d->maps_cols != c->maps.cols || d->maps_rows != c->maps.rows) {
      CK(cudaStreamSynchronize(d->st));
      free_maps(d);
      CK(cudaMalloc((void **)&d->gain, n * sizeof(float)));
      CK(cudaMalloc((void **)&d->offset, n * sizeof(float)));
      CK(cudaMalloc((void **)&d->defect, n));
      d->maps_cols = c->maps.cols;
      d->maps_rows = c->maps.rows;
    }
    CK(cudaMemcpyAsync(d->gain, c->maps.gain, n * sizeof(float), cudaMemcpyHostToDevice, d->st));
    CK(cudaMemcpyAsync(d->offset, c->maps.offset, n * sizeof(float), cudaMemcpyHostToDevice, d->st));
    CK(cudaMemcpyAsync(d->defect, c->maps.defect, n, cudaMemcpyHostToDevice, d->st));
  }
  /* the host's tables and maps may change after this returns */
  CK(cudaStreamSynchronize(d->st));
  return 0;
}

extern "C" int xt_chain_cuda_create(xt_chain *c, xt_msg *msg) {
  chain_dev *d = (chain_dev *)calloc(1, sizeof *d);
  if (!d) return xt_fail(msg, XT_ENOMEM, "chain: out of memory");
  c->dev = d;
  CK(cudaGetDevice(&d->device));
  CK(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&d->tab, sizeof(xt_chain_tables)));
  return xt_chain_cuda_upload(c, msg);
}

extern "C" void xt_chain_cuda_reset(xt_chain *c) {
  chain_dev *d = (chain_dev *)c->dev;
  if (d && d->lag) cudaMemsetAsync(d->lag, 0, sizeof(float) * XT_LAG_TERMS * d->ocols * d->orows, d->st);
}

/* Scratch for a render grid and output grid; allocated when they change, never per frame. */
static int ensure_scratch(xt_chain *c, chain_dev *d, const xt_chain_frame_const *fc, xt_msg *msg) {
  const int nch = c->cs.n > 0 ? c->cs.n : 1;
  if (d->cols == fc->cols && d->rows == fc->rows && d->ocols == fc->ocols && d->orows == fc->orows && d->nch == nch &&
      d->A)
    return 0;
  const size_t np = (size_t)fc->cols * fc->rows, no = (size_t)fc->ocols * fc->orows;
  if (np > 0x7fffffffu) /* the stages index pixels in 32 bits */
    return xt_fail(msg, XT_ERANGE, "chain: render grid %d x %d over 2^31 pixels", fc->cols, fc->rows);
  CK(cudaStreamSynchronize(d->st));
  free_frame_scratch(d);
  const size_t na = np * (nch < 2 ? 2 : nch); /* the channel planes, or the fused path's 2 sums */
  CK(cudaMalloc((void **)&d->A, na * sizeof(float)));
  CK(cudaMemsetAsync(d->A, 0, na * sizeof(float), d->st));
  float **planes[] = {&d->X, &d->D, &d->F, &d->S};
  for (size_t i = 0; i < sizeof planes / sizeof planes[0]; i++) CK(cudaMalloc((void **)planes[i], np * sizeof(float)));
  CK(cudaMalloc((void **)&d->FA, no * sizeof(float)));
  CK(cudaMalloc((void **)&d->Y, no * sizeof(float)));
  CK(cudaMalloc((void **)&d->M, no * sizeof(float)));
  CK(cudaMalloc((void **)&d->SC, 3 * XT_SCATTER_MAX_GRID * XT_SCATTER_MAX_GRID * sizeof(float)));
  CK(cudaMalloc((void **)&d->lag, no * XT_LAG_TERMS * sizeof(float)));
  CK(cudaMemsetAsync(d->lag, 0, no * XT_LAG_TERMS * sizeof(float), d->st));
  CK(cudaMalloc((void **)&d->out, 2 * no * sizeof(uint16_t)));
  CK(cudaMalloc((void **)&d->rest, np * sizeof(xt_draw_rest)));
  CK(cudaMalloc((void **)&d->rest_n, 2 * sizeof(unsigned)));
  CK(cudaMemsetAsync(d->rest_n, 0, 2 * sizeof(unsigned), d->st));
  d->rest_parity = 0;
  CK(cudaHostAlloc((void **)&d->h_out, 2 * no * sizeof(uint16_t), cudaHostAllocDefault));
  CK(cudaHostAlloc((void **)&d->h_f, np * sizeof(float), cudaHostAllocDefault));
  d->cols = fc->cols;
  d->rows = fc->rows;
  d->ocols = fc->ocols;
  d->orows = fc->orows;
  d->nch = nch;
  c->first = 1;
  c->dsa_valid = 0;
  return 0;
}

/* Render and detect, queued: -> X, F (and S when non-NULL). A scene of voxel models without scatter
 * takes the fused path: the projector integrates the spectrum while the channels are in registers
 * (xt_proj_render_device_spectral; the same xt_spectral_sum as the detect stage's) and k_detect<sums>
 * finishes the pixels, so the channel planes never reach memory. Other scenes (other kinds: their
 * channels add across kinds, the sums do not; scatter, which samples the channel planes) render the
 * planes for the whole detect stage. */
static int queue_detect(xt_chain *c, chain_dev *d, const xt_geometry *g, xt_chain_frame_const *fc, float *S,
                        xt_msg *msg) {
  int rc;
  if (c->cs.n && !c->prm.scatter && !c->unfused) {
    const xt_chan_spectral sp = {c->tab.nbins, &d->tab->mr[0][0], d->tab->k1, d->tab->k2}; /* device addresses */
    rc = xt_proj_render_device_spectral(c->proj, g, &sp, d->A, d->st, msg);
    if (rc == 0) {
      c->fused_frames++;
      d->rest_parity ^= fc->noise ? 1 : 0; /* the counter the previous frame's draw zeroed */
      return xt_stage_detect_sums_cuda(d->tab, fc, d->A, d->X, d->F, S, d->rest, d->rest_n, d->rest_parity, d->st,
                                       msg);
    }
    if (rc != XT_EUNSUPPORTED) return rc; /* unsupported: nothing was queued; the planes instead */
  }
  if (c->cs.n && (rc = xt_proj_render_device(c->proj, g, 1, d->A, d->st, msg))) return rc;
  if (c->prm.scatter) { /* the coarse scatter field before detection (issue 11) */
    const size_t ncell = XT_SCATTER_MAX_GRID * XT_SCATTER_MAX_GRID;
    fc->sc.field = d->SC + 2 * ncell;
    if ((rc = xt_stage_scatter_cuda(d->tab, fc, d->A, d->SC, d->SC + ncell, d->SC + 2 * ncell, d->st, msg))) return rc;
  }
  return xt_stage_detect_cuda(d->tab, fc, d->A, d->X, d->F, S, d->st, msg);
}

/* A float plane for tests and diagnostics (not on the frame path). */
static int copy_plane(chain_dev *d, const float *src, float *dst, size_t n, xt_msg *msg) {
  CK(cudaMemcpyAsync(d->h_f, src, n * sizeof(float), cudaMemcpyDeviceToHost, d->st));
  CK(cudaStreamSynchronize(d->st));
  memcpy(dst, d->h_f, n * sizeof(float));
  return 0;
}

extern "C" int xt_chain_cuda_frame(xt_chain *c, const xt_geometry *g, uint64_t frame, const xt_chain_out *out,
                                   xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  xt_chain_frame_const fc;
  int rc;
  CK(cudaSetDevice(d->device));
  xt_chain_frame_const_make(c, g, frame, &fc);
  if ((rc = ensure_scratch(c, d, &fc, msg))) return rc;
  fc.pc.first = c->first;
  const size_t np = (size_t)fc.cols * fc.rows, no = (size_t)fc.ocols * fc.orows;
  uint16_t *raw = d->out, *proc = d->out + no;
  if ((rc = queue_detect(c, d, g, &fc, out->expected ? d->S : NULL, msg)) ||
      (rc = xt_stage_blur_cuda(&fc, d->X, d->D, d->st, msg)) ||
      (rc = xt_stage_readout_cuda(&fc, d->gain, d->offset, d->defect, d->D, d->F, d->lag, raw, d->FA, d->st, msg)))
    return rc;
  fc.pc.dsa_mask = c->prm.dsa && c->dsa_valid ? d->M : NULL; /* DSA: the mask frame itself is unsubtracted */
  if (out->proc &&
      (rc = xt_stage_process_cuda(&fc, d->gain, d->offset, d->defect, raw, d->FA, d->Y, proc, d->st, msg)))
    return rc;
  if (out->proc && c->prm.dsa && !c->dsa_valid) {
    CK(cudaMemcpyAsync(d->M, d->Y, no * sizeof(float), cudaMemcpyDeviceToDevice, d->st));
    c->dsa_valid = 1;
  }
  /* the one crossing: raw, or raw and proc together (contiguous) */
  if (out->raw || out->proc) {
    const size_t off = out->raw ? 0 : no, n = (out->raw ? no : 0) + (out->proc ? no : 0);
    CK(cudaMemcpyAsync(d->h_out + off, d->out + off, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, d->st));
  }
  CK(cudaStreamSynchronize(d->st));
  if (out->raw) memcpy(out->raw, d->h_out, no * sizeof(uint16_t));
  if (out->proc) memcpy(out->proc, d->h_out + no, no * sizeof(uint16_t));
  if (out->expected && (rc = copy_plane(d, d->S, out->expected, np, msg))) return rc;
  if (out->signal && (rc = copy_plane(d, d->D, out->signal, np, msg))) return rc;
  return 0;
}

/* Benchmark: frames queued back to back on the stream, timed with events; no copy-out. */
extern "C" int xt_chain_cuda_time(xt_chain *c, const xt_geometry *g, int n, int warmup, int reps, int what, double *ms,
                                  xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  xt_chain_frame_const fc;
  int rc;
  cudaEvent_t e0 = NULL, e1 = NULL;
  CK(cudaSetDevice(d->device));
  xt_chain_frame_const_make(c, &g[0], 0, &fc);
  if ((rc = ensure_scratch(c, d, &fc, msg))) return rc;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < warmup + reps && !rc; i++) {
    if (i == warmup) rc = cudaEventRecord(e0, d->st) == cudaSuccess ? 0 : XT_EDEVICE;
    const xt_geometry *gi = &g[i % n];
    xt_chain_frame_const_make(c, gi, (uint64_t)i, &fc);
    const size_t no = (size_t)fc.ocols * fc.orows;
    if (what == 0) {
      rc = xt_proj_render_device(c->proj, gi, 0, d->X, d->st, msg);
      continue;
    }
    rc = queue_detect(c, d, gi, &fc, NULL, msg);
    if (!rc) rc = xt_stage_blur_cuda(&fc, d->X, d->D, d->st, msg);
    if (!rc) rc = xt_stage_readout_cuda(&fc, d->gain, d->offset, d->defect, d->D, d->F, d->lag, d->out, d->FA, d->st, msg);
    if (!rc && what == 2)
      rc = xt_stage_process_cuda(&fc, d->gain, d->offset, d->defect, d->out, d->FA, d->Y, d->out + no, d->st, msg);
  }
  float t = 0;
  if (!rc && (cudaEventRecord(e1, d->st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
              cudaEventElapsedTime(&t, e0, e1) != cudaSuccess))
    rc = xt_fail(msg, XT_EDEVICE, "chain timing: %s", cudaGetErrorString(cudaGetLastError()));
  *ms = t / reps;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return rc;
}
