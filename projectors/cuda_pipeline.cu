/* The CUDA frame pipeline: what every model kind shares (xt_cuda_kind.h) - the device, the two
 * streams, the per-detector scratch, the per-frame descriptors, batches of many poses per launch
 * with the copy-out of one chunk overlapping the render of the next - and the backend's C API
 * (xt_proj_cuda.h) and function table.
 *
 * A chunk of frames is rendered by each kind that holds models, in the order of `kinds` below:
 * the first writes every pixel, the others add their line integrals. Per frame, each kind gets its
 * own descriptor, filled on the host in double and uploaded for the whole chunk in one copy: the
 * chunk's descriptor block holds kind 0's nf descriptors, then kind 1's, and so on. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_cuda_kind.h"

extern "C" {
#include "xt_cuda_config.h"
#include "xt_proj_internal.h"
}

/* The kinds, in render order. A new kind adds its table here. */
static const xt_cuda_kind_ops *const kinds[] = {&xt_cuda_kind_voxel, &xt_cuda_kind_gmm, &xt_cuda_kind_nvdb,
                                                &xt_cuda_kind_instr};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

#define CK XT_CK
#define XT_DEV_SLOTS 4

struct xt_cuda_proj {
  xt_cuda_options opt;
  void *kst[NKINDS]; /* each kind's state */
  cudaStream_t s_render, s_copy;
  cudaEvent_t ev_k[2], ev_c[2], ev_a, ev_b;
  /* Frame pipeline scratch, for the detector of the last frame (cols x rows), `chunk` frames and
   * the kinds' descriptor bytes per frame; the kinds' own scratch (prepare) for kind_frames frames
   * per launch and the models they held then (nmodels). Models added later re-size both. The
   * buffers only grow (out_cap, desc_cap bytes each): a biplane worker alternates two detectors on
   * one projector, and freeing and re-allocating pinned memory on every switch cost 30-50 ms a
   * frame (H100, FD20 + FD15). */
  int cols, rows, chunk, kind_frames, nmodels;
  size_t desc_bytes, out_cap, desc_cap;
  float *d_out[2], *h_out[2];
  unsigned char *d_desc[2], *h_desc[2];
  /* Material channels: the set of the models added so far (cs_ok 0 when a model has none), and the
   * scratch of channel frames (up to XT_MAX_CHANNELS planes of ch_cols x ch_rows). */
  xt_chanset cs;
  int cs_ok;
  xt_msg cs_msg;
  int ch_cols, ch_rows;
  float *d_ch, *h_ch;
  /* Device renders (render_device): descriptor slots in pinned memory, each reused only after the
   * event of its last upload (XT_DEV_SLOTS frames back) completed. */
  unsigned char *h_dslot[XT_DEV_SLOTS], *d_dslot[XT_DEV_SLOTS];
  cudaEvent_t ev_dslot[XT_DEV_SLOTS];
  size_t dslot_bytes;
  int dslot_next;
  /* Motion (xt_proj_set_transform): the kinds hold a shallow copy of each model (view: the payload
   * shared), whose placement is T * base; they read it on the host when they fill a frame's
   * descriptor, so frames already queued keep theirs. */
  int nviews, views_cap;
  const xt_model **added;
  xt_model **view;
  xt_affine *base;
  /* a scene of voxel models and instruments takes the spectral sums (render_fused) instead of
   * failing them over to the planes; XT_INSTR_FUSED=0 at create: it does not */
  int instr_fused;
  /* XT_INSTR_SIDE=1 at create: a frame of instruments and other kinds queues the instruments' splat
   * on s_side, forked from the frame's stream before the other kinds and joined before its finish
   * (render_side), so that the FP64 splat runs beside the voxel march instead of after it */
  int instr_side;
  cudaStream_t s_side;
  cudaEvent_t ev_fork, ev_join;
};

extern "C" xt_cuda_options xt_cuda_default_options(void) {
  xt_cuda_options o;
  o.device = 0;
  o.voxels = XT_CUDA_VOX_AUTO;
  o.dual_min_bytes = -1;
  o.lut = XT_CUDA_LUT_AUTO;
  o.hull = 1;
  return o;
}

extern "C" int xt_cuda_available(xt_msg *msg) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return xt_fail(msg, XT_ENODEV, "backend cuda: no usable CUDA device (%s)", cudaGetErrorString(e));
  }
  if (n <= 0) return xt_fail(msg, XT_ENODEV, "backend cuda: no CUDA device present");
  return 0;
}

extern "C" int xt_cuda_device_info(int device, xt_cuda_info *info, xt_msg *msg) {
  int rc = xt_cuda_available(msg);
  if (rc) return rc;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, device));
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%s", p.name);
  info->sm_count = p.multiProcessorCount;
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->l2_bytes = (size_t)p.l2CacheSize;
  info->global_bytes = p.totalGlobalMem;
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  info->sm_clock_mhz = khz / 1000.0;
  CK(cudaDriverGetVersion(&info->driver_version));
  CK(cudaRuntimeGetVersion(&info->runtime_version));
  return 0;
}

extern "C" int xt_cuda_copy_bandwidth(int device, size_t bytes, int reps, double *gbps, xt_msg *msg) {
  int rc = xt_cuda_available(msg);
  if (rc) return rc;
  CK(cudaSetDevice(device));
  void *a = NULL, *b = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  float best = 1e30f;
  rc = XT_EDEVICE;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) goto done;
  if (cudaMemset(a, 1, bytes) != cudaSuccess) goto done;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto done;
  for (int i = 0; i < reps + 1; i++) {
    float ms = 0;
    if (cudaEventRecord(e0) != cudaSuccess || cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
        cudaEventRecord(e1) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
      goto done;
    if (i > 0 && ms < best) best = ms; /* the first copy warms up */
  }
  *gbps = 2.0 * (double)bytes / (best * 1e-3) / 1e9;
  rc = 0;
done:
  if (rc) xt_fail(msg, rc, "cuda: bandwidth probe failed: %s", cudaGetErrorString(cudaGetLastError()));
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Projector life cycle                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void free_dev_scratch(xt_cuda_proj *p) {
  cudaFree(p->d_ch);
  cudaFreeHost(p->h_ch);
  p->d_ch = p->h_ch = NULL;
  p->ch_cols = p->ch_rows = 0;
  for (int i = 0; i < XT_DEV_SLOTS; i++) {
    cudaFree(p->d_dslot[i]);
    cudaFreeHost(p->h_dslot[i]);
    p->d_dslot[i] = p->h_dslot[i] = NULL;
  }
  p->dslot_bytes = 0;
}

static void free_scratch(xt_cuda_proj *p) {
  for (int i = 0; i < 2; i++) {
    cudaFree(p->d_out[i]);
    cudaFree(p->d_desc[i]);
    cudaFreeHost(p->h_out[i]);
    cudaFreeHost(p->h_desc[i]);
    p->d_out[i] = p->h_out[i] = NULL;
    p->d_desc[i] = p->h_desc[i] = NULL;
  }
  p->cols = p->rows = p->chunk = p->kind_frames = p->nmodels = 0;
  p->desc_bytes = p->out_cap = p->desc_cap = 0;
}

extern "C" void xt_cuda_destroy(xt_cuda_proj *p) {
  if (!p) return;
  cudaSetDevice(p->opt.device);
  if (p->s_render) cudaStreamSynchronize(p->s_render);
  if (p->s_copy) cudaStreamSynchronize(p->s_copy);
  free_scratch(p);
  free_dev_scratch(p);
  for (int i = 0; i < XT_DEV_SLOTS; i++)
    if (p->ev_dslot[i]) cudaEventDestroy(p->ev_dslot[i]);
  for (int k = 0; k < NKINDS; k++)
    if (p->kst[k]) kinds[k]->destroy(p->kst[k]);
  for (int i = 0; i < p->nviews; i++) free(p->view[i]);
  free(p->view);
  free(p->added);
  free(p->base);
  for (int i = 0; i < 2; i++) {
    if (p->ev_k[i]) cudaEventDestroy(p->ev_k[i]);
    if (p->ev_c[i]) cudaEventDestroy(p->ev_c[i]);
  }
  if (p->ev_a) cudaEventDestroy(p->ev_a);
  if (p->ev_b) cudaEventDestroy(p->ev_b);
  if (p->s_render) cudaStreamDestroy(p->s_render);
  if (p->s_copy) cudaStreamDestroy(p->s_copy);
  if (p->s_side) cudaStreamDestroy(p->s_side);
  if (p->ev_fork) cudaEventDestroy(p->ev_fork);
  if (p->ev_join) cudaEventDestroy(p->ev_join);
  free(p);
}

extern "C" int xt_cuda_create(const xt_cuda_options *opt, xt_cuda_proj **out, xt_msg *msg) {
  int rc = xt_cuda_available(msg);
  if (rc) return rc;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (opt->device < 0 || opt->device >= ndev)
    return xt_fail(msg, XT_ENODEV, "backend cuda: device %d does not exist (%d present)", opt->device, ndev);
  xt_cuda_proj *p = (xt_cuda_proj *)calloc(1, sizeof *p);
  if (!p) return xt_fail(msg, XT_ENOMEM, "backend cuda: out of memory");
  p->opt = *opt;
  const char *fz = getenv("XT_INSTR_FUSED");
  p->instr_fused = !(fz && fz[0] == '0' && !fz[1]); /* since the accumulator holds a pixel's sums together */
  const char *sd = getenv("XT_INSTR_SIDE");
  p->instr_side = sd && sd[0] == '1' && !sd[1];
  cudaError_t e = cudaSetDevice(opt->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&p->s_render, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&p->s_copy, cudaStreamNonBlocking);
  if (e == cudaSuccess && p->instr_side) e = cudaStreamCreateWithFlags(&p->s_side, cudaStreamNonBlocking);
  if (e == cudaSuccess && p->instr_side) e = cudaEventCreateWithFlags(&p->ev_fork, cudaEventDisableTiming);
  if (e == cudaSuccess && p->instr_side) e = cudaEventCreateWithFlags(&p->ev_join, cudaEventDisableTiming);
  for (int i = 0; i < 2 && e == cudaSuccess; i++) {
    e = cudaEventCreateWithFlags(&p->ev_k[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&p->ev_c[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(p->ev_c[i], p->s_copy);
  }
  if (e == cudaSuccess) e = cudaEventCreate(&p->ev_a);
  if (e == cudaSuccess) e = cudaEventCreate(&p->ev_b);
  for (int i = 0; i < XT_DEV_SLOTS && e == cudaSuccess; i++)
    e = cudaEventCreateWithFlags(&p->ev_dslot[i], cudaEventDisableTiming);
  p->cs_ok = 1;
  if (e != cudaSuccess) {
    rc = xt_fail(msg, XT_EDEVICE, "backend cuda: set-up on device %d failed: %s", opt->device, cudaGetErrorString(e));
    xt_cuda_destroy(p);
    return rc;
  }
  for (int k = 0; k < NKINDS; k++)
    if ((rc = kinds[k]->create(opt, &p->kst[k], msg))) {
      xt_cuda_destroy(p);
      return rc;
    }
  *out = p;
  return 0;
}

/* After a model was added: the channel set grows by its materials and every kind with models
 * rebuilds its channel tables. Channels are optional: a model without them (or a set beyond
 * XT_MAX_CHANNELS) only makes channel renders fail, with the reason kept in cs_msg. */
static void update_channels(xt_cuda_proj *p, const xt_model *m) {
  if (!p->cs_ok) return;
  xt_chanset cs = p->cs;
  int rc = xt_chanset_add_model(&cs, m, &p->cs_msg);
  for (int k = 0; k < NKINDS && !rc; k++) {
    if (!kinds[k]->nmodels(p->kst[k])) continue;
    if (!kinds[k]->set_channels)
      rc = xt_fail(&p->cs_msg, XT_EUNSUPPORTED, "cuda projector: %s models have no material channels yet", kinds[k]->name);
    else rc = kinds[k]->set_channels(p->kst[k], &cs, &p->cs_msg);
  }
  if (rc) p->cs_ok = 0;
  else p->cs = cs;
}

/* The copy the kinds hold of model m as added; NULL when m was not added. */
static xt_model *view_of(const xt_cuda_proj *p, const xt_model *m) {
  for (int i = 0; i < p->nviews; i++)
    if (p->added[i] == m) return p->view[i];
  return NULL;
}

extern "C" int xt_cuda_add_model(xt_cuda_proj *p, const xt_model *m, xt_msg *msg) {
  for (int k = 0; k < NKINDS; k++) {
    if (!kinds[k]->accepts(m)) continue;
    CK(cudaSetDevice(p->opt.device));
    if (p->nviews == p->views_cap) {
      const int cap = p->views_cap ? 2 * p->views_cap : 8;
      const xt_model **na = (const xt_model **)realloc(p->added, sizeof *na * (size_t)cap);
      if (na) p->added = na;
      xt_model **nv = (xt_model **)realloc(p->view, sizeof *nv * (size_t)cap);
      if (nv) p->view = nv;
      xt_affine *nb = (xt_affine *)realloc(p->base, sizeof *nb * (size_t)cap);
      if (nb) p->base = nb;
      if (!na || !nv || !nb) return xt_fail(msg, XT_ENOMEM, "cuda projector: out of memory");
      p->views_cap = cap;
    }
    xt_model *v = (xt_model *)malloc(sizeof *v);
    if (!v) return xt_fail(msg, XT_ENOMEM, "cuda projector: out of memory");
    *v = *m;
    int rc = kinds[k]->add_model(p->kst[k], v, msg);
    if (rc) {
      free(v);
      return rc;
    }
    p->added[p->nviews] = m;
    p->view[p->nviews] = v;
    p->base[p->nviews++] = m->placement;
    update_channels(p, v);
    return rc;
  }
  return xt_fail(msg, XT_EUNSUPPORTED, "cuda projector: model %s: kind %s not supported", m->name,
                 xt_model_kind_name(m->kind));
}

extern "C" int xt_cuda_channels(xt_cuda_proj *p, xt_chanset *cs, xt_msg *msg) {
  if (!p->cs_ok) return xt_fail(msg, XT_EUNSUPPORTED, "%s", p->cs_msg.text);
  *cs = p->cs;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Frames                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int active(const xt_cuda_proj *p, int k) { return kinds[k]->nmodels(p->kst[k]) > 0; }

/* Descriptor bytes per frame over the kinds that hold models. */
static size_t frame_desc_bytes(const xt_cuda_proj *p) {
  size_t b = 0;
  for (int k = 0; k < NKINDS; k++)
    if (active(p, k)) b += kinds[k]->frame_bytes(p->kst[k]);
  return b;
}

/* Fills the descriptor block of one launch of nf frames (geometries g[(first + j) % n]). */
static void fill_descs(const xt_cuda_proj *p, const xt_geometry *g, int n, int first, int nf, unsigned char *block) {
  for (int k = 0; k < NKINDS; k++) {
    if (!active(p, k)) continue;
    const size_t fb = kinds[k]->frame_bytes(p->kst[k]);
    for (int j = 0; j < nf; j++) kinds[k]->fill_frame(p->kst[k], &g[(first + j) % n], block + fb * (size_t)j);
    block += fb * (size_t)nf;
  }
}

static int total_models(const xt_cuda_proj *p) {
  int n = 0;
  for (int k = 0; k < NKINDS; k++) n += kinds[k]->nmodels(p->kst[k]);
  return n;
}

static int prepare_kinds(xt_cuda_proj *p, int cols, int rows, int frames, xt_msg *msg) {
  for (int k = 0; k < NKINDS; k++) {
    int rc;
    if (active(p, k) && kinds[k]->prepare && (rc = kinds[k]->prepare(p->kst[k], cols, rows, frames, msg))) return rc;
  }
  p->kind_frames = frames;
  return 0;
}

/* Sizes the scratch for a detector and at least need_frames frames per launch (0: the pipeline's
 * chunk). Allocations happen only when the models or the bytes a launch needs grow, never per
 * frame, nor when a smaller detector follows a larger one. */
static int ensure_scratch(xt_cuda_proj *p, int cols, int rows, int need_frames, xt_msg *msg) {
  const size_t db = frame_desc_bytes(p);
  const int nm = total_models(p);
  const size_t frame = (size_t)cols * rows * sizeof(float), dslot = db ? db : 16;
  int rc;
  if (!(p->desc_bytes == db && p->nmodels == nm && p->d_out[0] && frame <= p->out_cap && dslot <= p->desc_cap)) {
    CK(cudaStreamSynchronize(p->s_render));
    CK(cudaStreamSynchronize(p->s_copy));
    free_scratch(p);
    size_t chunk = XT_CUDA_BATCH_CHUNK_BYTES / frame;
    if (chunk < 1) chunk = 1;
    if (chunk > XT_CUDA_BATCH_MAX_FRAMES) chunk = XT_CUDA_BATCH_MAX_FRAMES;
    for (int i = 0; i < 2; i++) {
      CK(cudaMalloc((void **)&p->d_out[i], frame * chunk));
      CK(cudaMalloc((void **)&p->d_desc[i], dslot * chunk));
      CK(cudaHostAlloc((void **)&p->h_out[i], frame * chunk, cudaHostAllocDefault));
      CK(cudaHostAlloc((void **)&p->h_desc[i], dslot * chunk, cudaHostAllocDefault));
    }
    p->out_cap = frame * chunk;
    p->desc_cap = dslot * chunk;
    p->desc_bytes = db;
    p->nmodels = nm;
  }
  if (p->cols != cols || p->rows != rows) {
    /* the launch size this detector gets from the buffers there are */
    size_t chunk = p->out_cap / frame;
    if (chunk > p->desc_cap / dslot) chunk = p->desc_cap / dslot;
    if (chunk > XT_CUDA_BATCH_MAX_FRAMES) chunk = XT_CUDA_BATCH_MAX_FRAMES;
    const int kf = p->kind_frames > (int)chunk ? p->kind_frames : (int)chunk;
    if ((rc = prepare_kinds(p, cols, rows, kf, msg))) {
      free_scratch(p);
      return rc;
    }
    p->cols = cols;
    p->rows = rows;
    p->chunk = (int)chunk;
  }
  if (need_frames > p->kind_frames) {
    CK(cudaStreamSynchronize(p->s_render));
    if ((rc = prepare_kinds(p, cols, rows, need_frames, msg))) return rc;
  }
  return 0;
}

/* A launch of nf frames of cols x rows into d_out on st; the rest of it zero (none written, no
 * count, no spectral sums, no instruments' accumulator). */
static xt_cuda_launch launch_of(const xt_geometry *g, int nf, int cols, int rows, float *d_out, int nch,
                                cudaStream_t st) {
  xt_cuda_launch L;
  memset(&L, 0, sizeof L);
  L.nf = nf;
  L.cols = cols;
  L.rows = rows;
  L.g = g;
  L.d_out = d_out;
  L.nch = nch;
  L.stream = st;
  return L;
}

/* Every active kind renders the nf frames whose descriptor block is at d_block into d_out: the
 * first writes, the rest add. A scene without models gives zeros. */
static int render_kinds_sp(xt_cuda_proj *p, const xt_geometry *g, int nf, int cols, int rows,
                           const unsigned char *d_block, float *d_out, int count, int nch, const xt_chan_spectral *sp,
                           cudaStream_t st, xt_msg *msg) {
  int written = 0;
  for (int k = 0; k < NKINDS; k++) {
    if (!active(p, k)) continue;
    xt_cuda_launch L = launch_of(g, nf, cols, rows, d_out, nch, st);
    L.d_desc = d_block;
    L.accumulate = written;
    L.count = count;
    L.spectral = sp;
    int rc = kinds[k]->render(p->kst[k], &L, msg);
    if (rc) return rc;
    written = 1;
    d_block += kinds[k]->frame_bytes(p->kst[k]) * (size_t)nf;
  }
  if (!written) CK(cudaMemsetAsync(d_out, 0, (size_t)nf * (nch ? nch : 1) * rows * cols * sizeof(float), st));
  return 0;
}

/* The spectral sums of one frame of voxel models and instruments (XT_INSTR_FUSED): the instruments'
 * splat into their accumulator, then the voxel kernel, which adds the flagged tiles' sums to its
 * channels before the spectral epilogue and zeroes them, then the flags cleared. The voxel kind
 * visits every pixel of the frame, so every accumulator the splat touched is consumed; if its launch
 * fails, the whole accumulator is cleared so that the next frame starts from zero. */
static int render_fused(xt_cuda_proj *p, const xt_geometry *g, int cols, int rows, const unsigned char *d_block,
                        float *d_out, int nch, const xt_chan_spectral *sp, cudaStream_t st, xt_msg *msg) {
  const unsigned char *blk[NKINDS] = {NULL};
  int vk = -1, ik = -1;
  for (int k = 0; k < NKINDS; k++) {
    if (!active(p, k)) continue;
    blk[k] = d_block;
    d_block += kinds[k]->frame_bytes(p->kst[k]);
    if (kinds[k] == &xt_cuda_kind_voxel) vk = k;
    else if (kinds[k]->splat) ik = k;
  }
  if (vk < 0 || ik < 0) return xt_fail(msg, XT_EINTERNAL, "cuda projector: a fused frame needs voxels and instruments");
  xt_cuda_launch L = launch_of(g, 1, cols, rows, d_out, nch, st);
  xt_cuda_instr_acc ia;
  L.d_desc = blk[ik];
  int rc = kinds[ik]->splat(p->kst[ik], &L, &ia, msg);
  if (rc) return rc;
  L.d_desc = blk[vk];
  L.spectral = sp;
  L.instr = &ia;
  rc = kinds[vk]->render(p->kst[vk], &L, msg);
  if (rc) { /* nothing consumed the splat: the accumulator back to zero (the error is the one reported) */
    cudaMemsetAsync(ia.acc, 0, sizeof(unsigned long long) * (size_t)nch * rows * cols, st);
    cudaMemsetAsync(ia.flag, 0, (size_t)ia.nflags, st);
    return rc;
  }
  CK(cudaMemsetAsync(ia.flag, 0, (size_t)ia.nflags, st));
  return 0;
}

/* Instruments and some other kind: what render_side is for. */
static int side_scene(const xt_cuda_proj *p) {
  int instr = 0, other = 0;
  for (int k = 0; k < NKINDS; k++)
    if (active(p, k)) *(kinds[k]->splat ? &instr : &other) = 1;
  return instr && other;
}

/* One frame of instruments and other kinds (XT_INSTR_SIDE): the instruments' splat on s_side, forked
 * from st before the other kinds render (it writes only its own accumulator), its finish on st after
 * them and the join. The same sums as render_kinds_sp's, bit for bit (the splat's are integer). */
static int render_side(xt_cuda_proj *p, const xt_geometry *g, int cols, int rows, const unsigned char *d_block,
                       float *d_out, int nch, cudaStream_t st, xt_msg *msg) {
  const unsigned char *blk[NKINDS] = {NULL};
  int ik = -1;
  for (int k = 0; k < NKINDS; k++) {
    if (!active(p, k)) continue;
    blk[k] = d_block;
    d_block += kinds[k]->frame_bytes(p->kst[k]);
    if (kinds[k]->splat) ik = k;
  }
  xt_cuda_launch L = launch_of(g, 1, cols, rows, d_out, nch, p->s_side);
  L.d_desc = blk[ik];
  CK(cudaEventRecord(p->ev_fork, st));
  CK(cudaStreamWaitEvent(p->s_side, p->ev_fork, 0));
  xt_cuda_instr_acc ia;
  int rc = kinds[ik]->splat(p->kst[ik], &L, &ia, msg);
  /* joined even when the splat failed: st's next frame must not overtake what s_side queued */
  CK(cudaEventRecord(p->ev_join, p->s_side));
  int written = 0;
  for (int k = 0; k < NKINDS && !rc; k++) {
    if (!active(p, k) || k == ik) continue;
    xt_cuda_launch K = L;
    K.d_desc = blk[k];
    K.accumulate = written;
    K.stream = st;
    rc = kinds[k]->render(p->kst[k], &K, msg);
    written = 1;
  }
  CK(cudaStreamWaitEvent(st, p->ev_join, 0));
  if (rc) return rc;
  L.stream = st;
  L.accumulate = written;
  return kinds[ik]->finish(p->kst[ik], &L, msg);
}

static int render_kinds(xt_cuda_proj *p, const xt_geometry *g, int nf, int cols, int rows, const unsigned char *d_block,
                        float *d_out, int count, int nch, cudaStream_t st, xt_msg *msg) {
  return render_kinds_sp(p, g, nf, cols, rows, d_block, d_out, count, nch, NULL, st, msg);
}

static int check_geom(const xt_geometry *g, xt_msg *msg) {
  if (g->mode.cols < 1 || g->mode.rows < 1 || g->mode.cols > 65535 * XT_CUDA_TILE_W ||
      g->mode.rows > 65535 * XT_CUDA_TILE_H)
    return xt_fail(msg, XT_ERANGE, "cuda projector: detector %d x %d", g->mode.cols, g->mode.rows);
  return 0;
}

/* 1 when every byte of [p, p + bytes) lies in page-locked host memory the device can write
 * (cudaHostAlloc'd or registered): a copy-out there needs no staging. Both ends are looked up, so
 * a buffer running past its pinned allocation takes the staged path. */
extern "C" int xt_cuda_host_pinned(const void *p, size_t bytes) {
  cudaPointerAttributes a, b;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess ||
      cudaPointerGetAttributes(&b, (const char *)p + bytes - 1) != cudaSuccess) {
    (void)cudaGetLastError(); /* older runtimes: an error for pageable memory */
    return 0;
  }
  return a.type == cudaMemoryTypeHost && b.type == cudaMemoryTypeHost;
}

/* The batch pipeline: chunks of up to p->chunk poses per launch on s_render; the copy-out of
 * chunk i (s_copy) overlaps the render of chunk i+1. Into pageable `out` it goes to the pinned
 * h_out and the host's copy of chunk i into `out` overlaps both; into page-locked `out` it goes
 * straight there, in chunks of about XT_CUDA_DIRECT_CHUNK_BYTES, and the host only waits. out may
 * be NULL (streaming: frames stay in pinned memory). Kinds see a chunk's geometries contiguously:
 * frames cycle through g[0..n) only when n < frames (streaming), and then a chunk is one frame. */
static int pipeline(xt_cuda_proj *p, const xt_geometry *g, int n, int frames, int per_chunk, float *out, xt_msg *msg) {
  const int cols = g[0].mode.cols, rows = g[0].mode.rows;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  CK(cudaSetDevice(p->opt.device));
  if ((rc = ensure_scratch(p, cols, rows, 0, msg))) return rc;
  const size_t fpx = (size_t)cols * rows;
  const int direct = out && xt_cuda_host_pinned(out, fpx * sizeof(float) * (size_t)frames);
  if (direct && per_chunk < 1) {
    per_chunk = (int)(XT_CUDA_DIRECT_CHUNK_BYTES / (fpx * sizeof(float)));
    if (per_chunk < 1) per_chunk = 1;
  }
  if (per_chunk < 1 || per_chunk > p->chunk) per_chunk = p->chunk;
  if (n < frames) per_chunk = 1;
  const int nch = (frames + per_chunk - 1) / per_chunk;
  for (int c = 0; c <= nch; c++) {
    if (c < nch) {
      const int b = c & 1, first = c * per_chunk;
      const int nf = first + per_chunk <= frames ? per_chunk : frames - first;
      /* Chunk c-2 used these buffers; its D2H finished before the host consumed it below. */
      fill_descs(p, g, n, first, nf, p->h_desc[b]);
      if (p->desc_bytes)
        CK(cudaMemcpyAsync(p->d_desc[b], p->h_desc[b], p->desc_bytes * nf, cudaMemcpyHostToDevice, p->s_render));
      CK(cudaStreamWaitEvent(p->s_render, p->ev_c[b], 0));
      if ((rc = render_kinds(p, &g[first % n], nf, cols, rows, p->d_desc[b], p->d_out[b], 0, 0, p->s_render, msg)))
        return rc;
      CK(cudaEventRecord(p->ev_k[b], p->s_render));
      CK(cudaStreamWaitEvent(p->s_copy, p->ev_k[b], 0));
      float *dst = direct ? out + fpx * (size_t)first : p->h_out[b];
      CK(cudaMemcpyAsync(dst, p->d_out[b], fpx * sizeof(float) * nf, cudaMemcpyDeviceToHost, p->s_copy));
      CK(cudaEventRecord(p->ev_c[b], p->s_copy));
    }
    if (c > 0) {
      /* Also what lets chunk c + 1 refill h_desc[(c - 1) & 1]: its upload precedes this copy. */
      const int pb = (c - 1) & 1, first = (c - 1) * per_chunk;
      const int nf = first + per_chunk <= frames ? per_chunk : frames - first;
      CK(cudaEventSynchronize(p->ev_c[pb]));
      if (out && !direct) memcpy(out + fpx * (size_t)first, p->h_out[pb], fpx * sizeof(float) * nf);
    }
  }
  return 0;
}

extern "C" int xt_cuda_render(xt_cuda_proj *p, const xt_geometry *g, float *out, xt_msg *msg) {
  return pipeline(p, g, 1, 1, 1, out, msg);
}

extern "C" int xt_cuda_render_batch(xt_cuda_proj *p, const xt_geometry *g, int n, float *out, xt_msg *msg) {
  for (int i = 1; i < n; i++)
    if (g[i].mode.cols != g[0].mode.cols || g[i].mode.rows != g[0].mode.rows)
      return xt_fail(msg, XT_EINVAL, "cuda projector: batch frame %d has a different detector", i);
  return pipeline(p, g, n, n, 0, out, msg);
}

/* The batch into device memory (xt_proj_render_batch_device): each chunk's descriptors through the
 * pinned h_desc of its parity (the chunk two before, which used it, has finished its launch), its
 * frames written by the kinds straight into d_out; one synchronisation at the end. */
extern "C" int xt_cuda_render_batch_device(xt_cuda_proj *p, const xt_geometry *g, int n, float *d_out, xt_msg *msg) {
  for (int i = 1; i < n; i++)
    if (g[i].mode.cols != g[0].mode.cols || g[i].mode.rows != g[0].mode.rows)
      return xt_fail(msg, XT_EINVAL, "cuda projector: batch frame %d has a different detector", i);
  const int cols = g[0].mode.cols, rows = g[0].mode.rows;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  CK(cudaSetDevice(p->opt.device));
  if ((rc = ensure_scratch(p, cols, rows, 0, msg))) return rc;
  const size_t fpx = (size_t)cols * rows;
  for (int c = 0, first = 0; first < n; c++, first += p->chunk) {
    const int b = c & 1, nf = first + p->chunk <= n ? p->chunk : n - first;
    CK(cudaEventSynchronize(p->ev_k[b]));
    fill_descs(p, g, n, first, nf, p->h_desc[b]);
    if (p->desc_bytes)
      CK(cudaMemcpyAsync(p->d_desc[b], p->h_desc[b], p->desc_bytes * nf, cudaMemcpyHostToDevice, p->s_render));
    if ((rc = render_kinds(p, &g[first], nf, cols, rows, p->d_desc[b], d_out + fpx * (size_t)first, 0, 0, p->s_render,
                           msg)))
      return rc;
    CK(cudaEventRecord(p->ev_k[b], p->s_render));
  }
  CK(cudaStreamSynchronize(p->s_render));
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

extern "C" int xt_cuda_stream(xt_cuda_proj *p, const xt_geometry *g, int n, int frames, double *seconds, xt_msg *msg) {
  int rc = pipeline(p, g, n, 2, 1, NULL, msg); /* warm-up, and scratch allocation */
  if (rc) return rc;
  double t0 = now_s();
  rc = pipeline(p, g, n, frames, 1, NULL, msg);
  *seconds = now_s() - t0;
  return rc;
}

extern "C" int xt_cuda_render_timed(xt_cuda_proj *p, const xt_geometry *g, float *out, double *seconds, xt_msg *msg) {
  double t0 = now_s();
  int rc = xt_cuda_render(p, g, out, msg);
  *seconds = now_s() - t0;
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Device renders and material channels                                                       */
/* ------------------------------------------------------------------------------------------ */

/* One frame into device memory on the caller's stream: the descriptors go through a pinned slot
 * whose previous upload (XT_DEV_SLOTS renders ago) has completed, then every kind renders. No host
 * synchronisation with the frame itself: the imaging chain queues its stages behind it. */
static int render_device(xt_cuda_proj *p, const xt_geometry *g, int channels, const xt_chan_spectral *sp, float *d_out,
                         void *stream, xt_msg *msg) {
  const int cols = g->mode.cols, rows = g->mode.rows;
  cudaStream_t st = (cudaStream_t)stream;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  if (channels && !p->cs_ok) return xt_fail(msg, XT_EUNSUPPORTED, "%s", p->cs_msg.text);
  int fused = 0;
  if (sp) { /* the sums of several kinds' channels do not add: the voxel kind alone, and some channel;
               with XT_INSTR_FUSED, instruments too (render_fused) */
    int voxels = 0;
    for (int k = 0; k < NKINDS; k++) {
      if (active(p, k) && kinds[k]->splat && p->instr_fused) {
        fused = 1;
        continue;
      }
      if (active(p, k) && kinds[k] != &xt_cuda_kind_voxel)
        return xt_fail(msg, XT_EUNSUPPORTED, "cuda projector: spectral sums need voxel models only (%s present)",
                       kinds[k]->name);
      voxels |= kinds[k] == &xt_cuda_kind_voxel && active(p, k);
    }
    if (!voxels || !p->cs.n)
      return xt_fail(msg, XT_EUNSUPPORTED, "cuda projector: spectral sums need a voxel model with channels");
  }
  CK(cudaSetDevice(p->opt.device));
  if ((rc = ensure_scratch(p, cols, rows, 1, msg))) return rc;
  const size_t db = p->desc_bytes ? p->desc_bytes : 16;
  if (p->dslot_bytes < db) {
    for (int i = 0; i < XT_DEV_SLOTS; i++) {
      CK(cudaEventSynchronize(p->ev_dslot[i]));
      cudaFree(p->d_dslot[i]);
      cudaFreeHost(p->h_dslot[i]);
      p->d_dslot[i] = p->h_dslot[i] = NULL;
    }
    p->dslot_bytes = 0;
    for (int i = 0; i < XT_DEV_SLOTS; i++) {
      CK(cudaMalloc((void **)&p->d_dslot[i], db));
      CK(cudaHostAlloc((void **)&p->h_dslot[i], db, cudaHostAllocDefault));
    }
    p->dslot_bytes = db;
  }
  const int b = p->dslot_next;
  p->dslot_next = (b + 1) % XT_DEV_SLOTS;
  CK(cudaEventSynchronize(p->ev_dslot[b]));
  fill_descs(p, g, 1, 0, 1, p->h_dslot[b]);
  if (p->desc_bytes) CK(cudaMemcpyAsync(p->d_dslot[b], p->h_dslot[b], p->desc_bytes, cudaMemcpyHostToDevice, st));
  CK(cudaEventRecord(p->ev_dslot[b], st));
  if (fused) return render_fused(p, g, cols, rows, p->d_dslot[b], d_out, p->cs.n, sp, st, msg);
  if (p->instr_side && !sp && side_scene(p)) return render_side(p, g, cols, rows, p->d_dslot[b], d_out, channels ? p->cs.n : 0, st, msg);
  return render_kinds_sp(p, g, 1, cols, rows, p->d_dslot[b], d_out, 0, channels ? p->cs.n : 0, sp, st, msg);
}

extern "C" int xt_cuda_render_device(xt_cuda_proj *p, const xt_geometry *g, int channels, float *d_out, void *stream,
                                     xt_msg *msg) {
  return render_device(p, g, channels, NULL, d_out, stream, msg);
}

extern "C" int xt_cuda_render_spectral(xt_cuda_proj *p, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out,
                                       void *stream, xt_msg *msg) {
  return render_device(p, g, 1, sp, d_out, stream, msg);
}

/* One frame's channel planes into host memory (synchronous): for tests and the CLI. */
extern "C" int xt_cuda_render_channels(xt_cuda_proj *p, const xt_geometry *g, float *out, xt_msg *msg) {
  const int cols = g->mode.cols, rows = g->mode.rows;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  if (!p->cs_ok) return xt_fail(msg, XT_EUNSUPPORTED, "%s", p->cs_msg.text);
  if (!p->cs.n) return 0;
  CK(cudaSetDevice(p->opt.device));
  const size_t bytes = (size_t)XT_MAX_CHANNELS * cols * rows * sizeof(float);
  if (p->ch_cols != cols || p->ch_rows != rows) {
    CK(cudaStreamSynchronize(p->s_render));
    cudaFree(p->d_ch);
    cudaFreeHost(p->h_ch);
    p->d_ch = p->h_ch = NULL;
    p->ch_cols = p->ch_rows = 0;
    CK(cudaMalloc((void **)&p->d_ch, bytes));
    CK(cudaHostAlloc((void **)&p->h_ch, bytes, cudaHostAllocDefault));
    p->ch_cols = cols;
    p->ch_rows = rows;
  }
  if ((rc = xt_cuda_render_device(p, g, 1, p->d_ch, p->s_render, msg))) return rc;
  const size_t n = (size_t)p->cs.n * cols * rows * sizeof(float);
  CK(cudaMemcpyAsync(p->h_ch, p->d_ch, n, cudaMemcpyDeviceToHost, p->s_render));
  CK(cudaStreamSynchronize(p->s_render));
  memcpy(out, p->h_ch, n);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Measurement                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Bench-only: own output and descriptor buffers, allocated before and freed after timing. Launch
 * i renders frames g[(i % nlaunch) * per_launch + j) % n], j < per_launch. */
extern "C" int xt_cuda_time_kernel(xt_cuda_proj *p, const xt_geometry *g, int n, int per_launch, int warmup, int reps,
                                   float *ms, xt_msg *msg) {
  const int cols = g[0].mode.cols, rows = g[0].mode.rows;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  if (per_launch < 1 || n < 1 || reps < 1 || warmup < 0) return xt_fail(msg, XT_EINVAL, "time_kernel: bad counts");
  CK(cudaSetDevice(p->opt.device));
  if ((rc = ensure_scratch(p, cols, rows, per_launch, msg))) return rc; /* the kinds' own scratch */
  const int nlaunch = per_launch < n ? (n + per_launch - 1) / per_launch : 1;
  const size_t nfr = (size_t)nlaunch * per_launch, db = p->desc_bytes ? p->desc_bytes : 16;
  xt_geometry *gl = (xt_geometry *)malloc(sizeof(xt_geometry) * nfr);
  unsigned char *h = (unsigned char *)malloc(db * nfr);
  unsigned char *d = NULL;
  float *dout = NULL;
  cudaError_t e = cudaSuccess;
  if (!h || !gl) {
    free(h);
    free(gl);
    return xt_fail(msg, XT_ENOMEM, "time_kernel: out of memory");
  }
  for (size_t j = 0; j < nfr; j++) gl[j] = g[j % (size_t)n];
  for (int l = 0; l < nlaunch; l++) fill_descs(p, gl, (int)nfr, l * per_launch, per_launch, h + db * per_launch * (size_t)l);
  e = cudaMalloc((void **)&d, db * nfr);
  if (e == cudaSuccess) e = cudaMalloc((void **)&dout, (size_t)cols * rows * sizeof(float) * per_launch);
  if (e == cudaSuccess) e = cudaMemcpy(d, h, db * nfr, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    rc = xt_fail(msg, XT_EDEVICE, "time_kernel: %s", cudaGetErrorString(e));
    goto done;
  }
  for (int i = 0; i < warmup + reps && !rc; i++) {
    const int l = i % nlaunch;
    if (i >= warmup) e = cudaEventRecord(p->ev_a, p->s_render);
    if (e == cudaSuccess)
      rc = render_kinds(p, gl + (size_t)l * per_launch, per_launch, cols, rows, d + db * per_launch * (size_t)l, dout, 0,
                        0, p->s_render, msg);
    if (!rc && i >= warmup) {
      float t = 0;
      e = cudaEventRecord(p->ev_b, p->s_render);
      if (e == cudaSuccess) e = cudaEventSynchronize(p->ev_b);
      if (e == cudaSuccess) e = cudaEventElapsedTime(&t, p->ev_a, p->ev_b);
      ms[i - warmup] = t;
    }
    if (e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "time_kernel: %s", cudaGetErrorString(e));
  }
  if (!rc && (e = cudaStreamSynchronize(p->s_render)) != cudaSuccess)
    rc = xt_fail(msg, XT_EDEVICE, "time_kernel: %s", cudaGetErrorString(e));
done:
  cudaFree(d);
  cudaFree(dout);
  free(h);
  free(gl);
  return rc;
}

extern "C" int xt_cuda_count_steps(xt_cuda_proj *p, const xt_geometry *g, double *steps, double *rays_hit, xt_msg *msg) {
  const int cols = g->mode.cols, rows = g->mode.rows;
  int rc = check_geom(g, msg);
  if (rc) return rc;
  CK(cudaSetDevice(p->opt.device));
  if ((rc = ensure_scratch(p, cols, rows, 0, msg))) return rc;
  CK(cudaStreamSynchronize(p->s_copy));
  fill_descs(p, g, 1, 0, 1, p->h_desc[0]);
  if (p->desc_bytes)
    CK(cudaMemcpyAsync(p->d_desc[0], p->h_desc[0], p->desc_bytes, cudaMemcpyHostToDevice, p->s_render));
  if ((rc = render_kinds(p, g, 1, cols, rows, p->d_desc[0], p->d_out[0], 1, 0, p->s_render, msg))) return rc;
  CK(cudaMemcpyAsync(p->h_out[0], p->d_out[0], (size_t)cols * rows * sizeof(float), cudaMemcpyDeviceToHost,
                     p->s_render));
  CK(cudaStreamSynchronize(p->s_render));
  double s = 0, h = 0;
  for (size_t i = 0; i < (size_t)cols * rows; i++) {
    s += p->h_out[0][i];
    h += p->h_out[0][i] > 0;
  }
  *steps = s;
  *rays_hit = h;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The backend table                                                                          */
/* ------------------------------------------------------------------------------------------ */

static int ops_create(const xt_proj_options *opt, void **impl, xt_msg *msg) {
  xt_cuda_options o = xt_cuda_default_options();
  o.device = opt->device;
  return xt_cuda_create(&o, (xt_cuda_proj **)impl, msg);
}
static int ops_add_model(void *impl, const xt_model *m, xt_msg *msg) {
  return xt_cuda_add_model((xt_cuda_proj *)impl, m, msg);
}
static int ops_render(void *impl, const xt_geometry *g, float *out, xt_msg *msg) {
  return xt_cuda_render((xt_cuda_proj *)impl, g, out, msg);
}
static int ops_render_batch(void *impl, const xt_geometry *g, int n, float *out, xt_msg *msg) {
  return xt_cuda_render_batch((xt_cuda_proj *)impl, g, n, out, msg);
}
static void ops_destroy(void *impl) { xt_cuda_destroy((xt_cuda_proj *)impl); }
/* The kind that holds m takes the shape (its own buffers; queued behind the frames already in flight). */
static int ops_set_shape(void *impl, const xt_model *m, const double *pts, int n, xt_msg *msg) {
  xt_cuda_proj *p = (xt_cuda_proj *)impl;
  const xt_model *v = view_of(p, m);
  for (int k = 0; k < NKINDS && v; k++) {
    if (!kinds[k]->set_shape) continue;
    CK(cudaSetDevice(p->opt.device));
    const int rc = kinds[k]->set_shape(p->kst[k], v, pts, n, msg);
    if (rc != XT_ENOTFOUND) return rc;
  }
  return xt_fail(msg, XT_ENOTFOUND, "cuda projector: model %s was not added as an instrument", m->name);
}
/* Contrast: the kind that holds label volume m takes its iodine (mono table and channel rows). */
static int ops_set_iodine(void *impl, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  xt_cuda_proj *p = (xt_cuda_proj *)impl;
  const xt_model *v = view_of(p, m); /* the kinds hold the projector's views of the models (motion) */
  for (int k = 0; k < NKINDS && v; k++) {
    if (!kinds[k]->set_iodine) continue;
    CK(cudaSetDevice(p->opt.device));
    const int rc = kinds[k]->set_iodine(p->kst[k], v, io, msg);
    if (rc != XT_ENOTFOUND) return rc;
  }
  return xt_fail(msg, XT_ENOTFOUND, "cuda projector: model %s was not added as a label volume", m->name);
}
static int ops_set_transform(void *impl, const xt_model *m, const xt_affine *T, xt_msg *msg) {
  xt_cuda_proj *p = (xt_cuda_proj *)impl;
  for (int i = 0; i < p->nviews; i++) {
    if (p->added[i] != m) continue;
    p->view[i]->placement = xt_aff_compose(T, &p->base[i]);
    return 0;
  }
  return xt_fail(msg, XT_ENOTFOUND, "cuda projector: model %s was not added", m->name);
}
/* Portable: pinned for every device's context, so one buffer serves whichever worker renders. */
static int ops_host_alloc(size_t bytes, void **out, xt_msg *msg) {
  cudaError_t e = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
  if (e == cudaSuccess) return 0;
  (void)cudaGetLastError();
  *out = NULL;
  return xt_fail(msg, XT_ENOMEM, "cuda: %zu bytes of page-locked host memory: %s", bytes, cudaGetErrorString(e));
}
static void ops_host_free(void *p) { cudaFreeHost(p); }
static int ops_channels(void *impl, xt_chanset *cs, xt_msg *msg) { return xt_cuda_channels((xt_cuda_proj *)impl, cs, msg); }
static int ops_render_channels(void *impl, const xt_geometry *g, float *out, xt_msg *msg) {
  return xt_cuda_render_channels((xt_cuda_proj *)impl, g, out, msg);
}
static int ops_render_device(void *impl, const xt_geometry *g, int channels, float *d_out, void *stream, xt_msg *msg) {
  return xt_cuda_render_device((xt_cuda_proj *)impl, g, channels, d_out, stream, msg);
}
static int ops_render_batch_device(void *impl, const xt_geometry *g, int n, float *d_out, xt_msg *msg) {
  return xt_cuda_render_batch_device((xt_cuda_proj *)impl, g, n, d_out, msg);
}
static int ops_render_spectral(void *impl, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out, void *stream,
                               xt_msg *msg) {
  return xt_cuda_render_spectral((xt_cuda_proj *)impl, g, sp, d_out, stream, msg);
}

extern "C" const xt_proj_ops xt_proj_cuda_ops = {
    "cuda",     xt_cuda_available, ops_create,   ops_add_model,       ops_render,        ops_render_batch,
    ops_destroy, ops_channels,     ops_render_channels, ops_render_device, ops_render_spectral, ops_host_alloc,
    ops_host_free, ops_render_batch_device, ops_set_shape, ops_set_iodine, ops_set_transform,
};
