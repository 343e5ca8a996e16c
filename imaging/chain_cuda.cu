/* The chain's device pipeline: a frame stays on the GPU from the first ray to the final uint16
 * pixels and crosses to the host once.
 *
 *   xt_proj_render_device     material channels A            (projectors: cuda_pipeline.cu)
 *   k_scatter_*               A -> coarse scatter field      (stage_scatter.cu; scatter on)
 *   k_detect                  A -> X (quanta)                (stage_detect.cu)
 *     or, fused (voxel models only, no scatter: queue_detect below):
 *   xt_proj_render_device_spectral  spectral sums P (2 planes, in A's memory)
 *   k_detect<sums>            P -> X (its few undecided PTRS tries resumed by their own lanes)
 *   k_blur                    X -> D (rows, columns)         (stage_blur.cu)
 *   k_readout                 D -> raw; lag state; Y at      (stage_readout.cu; the flat field
 *                             non-defective pixels when       evaluated, xt_stage_flat_adu)
 *                             processed (pass 1 of processing);
 *                             the count of saturated codes
 *   k_auto_hist, k_auto_pick  Y -> histogram -> window/level (stage_process.cu; the automatic
 *                                                             window, `window` 0: the default)
 *   k_process_out             raw -> Y at defects -> proc    (stage_process.cu; the defects' lists
 *                                                             by tile built when the maps are
 *                                                             uploaded)
 *   k_drc_field, k_drc_step   raw -> field sum -> the loop   (stage_drc.cu; drc on; the step
 *                                                             rewrites the live tables last)
 *   one cudaMemcpyAsync       [raw | proc] -> pinned host memory (and the loop's 80-byte record,
 *                             the automatic window's 8 bytes, the saturated count's 4)
 *
 * Everything is queued on the chain's own stream; the only synchronisation is the wait for that
 * copy. Scratch is allocated once per detector size (never per frame). The spectral tables live in
 * XT_TAB_SLOTS device slots beside the host's cache (xt_chain_cache.c), each uploaded when it is
 * built; a frame reads its slot, or with the attached dose-rate loop the `live` tables the loop's
 * step wrote for it (the next kV's slot times the next mAs). */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "xt_stage_cuda.h"
extern "C" {
#include "xt_proj_cuda.h"
}

typedef struct chain_dev {
  int device;
  cudaStream_t st;
  int cols, rows, ocols, orows, nch; /* the scratch's sizes */
  float *A, *X, *D, *lag, *Y, *S;
  float *Yd;     /* Y before the frame at the defective pixels (k_readout -> k_process_out) */
  float *M;      /* DSA mask (issue 11) */
  float *SC;     /* scatter (issue 11): 3 coarse planes, sources, one pass, the field */
  uint16_t *out; /* raw (ocols x orows) then proc */
  float *gain, *offset;
  unsigned char *defect;
  int maps_cols, maps_rows;
  uint32_t *dlist;           /* k_process_out's tiles' offsets into their defective pixels' indices, then those */
  unsigned dlist_n, dlist_cap; /* entries (offsets and indices; 0: no defective pixel), room */
  xt_chain_tables *slots; /* the table cache's device side (XT_TAB_SLOTS) */
  /* dose-rate control (issue 11): allocated with the chain */
  xt_chain_tables *live;    /* the attached loop's tables for the next frame */
  xt_drc_bank *bank;
  xt_drc_dev *loop;
  unsigned long long *fsum; /* the measuring field's code sum */
  uint32_t *nsat;           /* the frame's raw codes at the ADC's full scale (zeroed as a frame starts) */
  xt_chain_drc_frame *rec;  /* the step's record of the frame */
  /* the automatic window: its histogram (kept zero between frames) and the frame's window, level */
  uint32_t *whist;
  float *wl;
  float *h_wl;
  /* pinned host side of the copy-out */
  uint16_t *h_out;
  float *h_f;
  xt_chain_drc_frame *h_rec;
  unsigned long long *h_fsum;
  uint32_t *h_nsat;
  xt_drc_dev *h_loop;
} chain_dev;

#define CK XT_SCK

static void free_frame_scratch(chain_dev *d) {
  float **f[] = {&d->A, &d->X, &d->D, &d->lag, &d->Y, &d->Yd, &d->S, &d->M, &d->SC};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    cudaFree(*f[i]);
    *f[i] = NULL;
  }
  cudaFree(d->out);
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
  cudaFree(d->dlist);
  d->gain = d->offset = NULL;
  d->defect = NULL;
  d->dlist = NULL;
  d->dlist_n = d->dlist_cap = 0;
  d->maps_cols = d->maps_rows = 0;
}

extern "C" void xt_chain_cuda_destroy(xt_chain *c) {
  chain_dev *d = (chain_dev *)c->dev;
  if (!d) return;
  cudaSetDevice(d->device);
  if (d->st) cudaStreamSynchronize(d->st);
  free_frame_scratch(d);
  free_maps(d);
  cudaFree(d->slots);
  cudaFree(d->live);
  cudaFree(d->bank);
  cudaFree(d->loop);
  cudaFree(d->fsum);
  cudaFree(d->nsat);
  cudaFree(d->rec);
  cudaFreeHost(d->h_rec);
  cudaFreeHost(d->h_fsum);
  cudaFreeHost(d->h_nsat);
  cudaFreeHost(d->h_loop);
  cudaFree(d->whist);
  cudaFree(d->wl);
  cudaFreeHost(d->h_wl);
  if (d->st) cudaStreamDestroy(d->st);
  free(d);
  c->dev = NULL;
}

/* The defective pixels by tile of k_process_out from the host's defect map: for each tile (with its
 * 1-pixel halo, edges replicated: a pixel belongs to its own tile and to the up to 3 tiles whose halo
 * holds it), the output indices of the defective pixels it computes, as offsets (tiles + 1) then the
 * indices. Grown (never per frame: the maps change with the panel's parameters or size) when it
 * outgrows its room. The copy is waited for before the host buffer is freed. */
static int upload_defect_list(xt_chain *c, chain_dev *d, xt_msg *msg) {
  const int oc = c->maps.cols, orr = c->maps.rows;
  const int tx = (oc + XT_POUT_TW - 1) / XT_POUT_TW, ty = (orr + XT_POUT_TH - 1) / XT_POUT_TH;
  const size_t nt = (size_t)tx * ty;
  size_t m = 0; /* the tiles' entries */
  for (int r = 0; r < orr; r++)
    for (int col = 0; col < oc; col++)
      if (c->maps.defect[(size_t)r * oc + col] != XT_DEFECT_NONE)
        m += (size_t)(1 + (r % XT_POUT_TH == 0 && r > 0) + ((r + 1) % XT_POUT_TH == 0 && r + 1 < orr)) *
             (size_t)(1 + (col % XT_POUT_TW == 0 && col > 0) + ((col + 1) % XT_POUT_TW == 0 && col + 1 < oc));
  d->dlist_n = 0;
  if (!m) return 0;
  const size_t total = nt + 1 + m;
  if (total > 0xffffffffu) return xt_fail(msg, XT_ERANGE, "chain: %zu defective pixel entries", m);
  if (total > d->dlist_cap) {
    CK(cudaStreamSynchronize(d->st));
    cudaFree(d->dlist);
    d->dlist = NULL;
    d->dlist_cap = 0;
    CK(cudaMalloc((void **)&d->dlist, total * sizeof(uint32_t)));
    d->dlist_cap = (unsigned)total;
  }
  uint32_t *h = (uint32_t *)calloc(total, sizeof(uint32_t));
  if (!h) return xt_fail(msg, XT_ENOMEM, "chain: out of memory (defect lists of %zu entries)", m);
  uint32_t *off = h, *idx = h + nt + 1;
  for (int pass = 0; pass < 2; pass++) { /* counts, then (offsets made) the indices */
    for (int r = 0; r < orr; r++)
      for (int col = 0; col < oc; col++) {
        if (c->maps.defect[(size_t)r * oc + col] == XT_DEFECT_NONE) continue;
        const int by[3] = {r / XT_POUT_TH, r % XT_POUT_TH == 0 && r > 0 ? r / XT_POUT_TH - 1 : -1,
                           (r + 1) % XT_POUT_TH == 0 && r + 1 < orr ? r / XT_POUT_TH + 1 : -1};
        const int bx[3] = {col / XT_POUT_TW, col % XT_POUT_TW == 0 && col > 0 ? col / XT_POUT_TW - 1 : -1,
                           (col + 1) % XT_POUT_TW == 0 && col + 1 < oc ? col / XT_POUT_TW + 1 : -1};
        for (int a = 0; a < 3; a++)
          for (int b = 0; b < 3; b++) {
            if (by[a] < 0 || bx[b] < 0) continue;
            const size_t t = (size_t)by[a] * tx + bx[b];
            if (pass == 0) off[t + 1]++;
            else idx[off[t]++] = (uint32_t)((size_t)r * oc + col);
          }
      }
    if (pass == 0)
      for (size_t t = 0; t < nt; t++) off[t + 1] += off[t];
  }
  for (size_t t = nt; t > 0; t--) off[t] = off[t - 1]; /* the fill advanced each tile's offset to its end */
  off[0] = 0;
  const cudaError_t e = cudaMemcpyAsync(d->dlist, h, total * sizeof(uint32_t), cudaMemcpyHostToDevice, d->st);
  const cudaError_t w = e == cudaSuccess ? cudaStreamSynchronize(d->st) : e;
  free(h);
  CK(w);
  d->dlist_n = (unsigned)total;
  return 0;
}

/* The panel maps (when they change), and the defective pixels' list that follows the defect map. */
extern "C" int xt_chain_cuda_upload(xt_chain *c, xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  int rc;
  CK(cudaSetDevice(d->device));
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
    if ((rc = upload_defect_list(c, d, msg))) return rc;
  }
  /* the host's maps may change after this returns */
  CK(cudaStreamSynchronize(d->st));
  return 0;
}

/* A table slot just built on the host (a cache miss: at set-up, never on the loop's path). The
 * copy is ordered after the frames queued before it; the wait keeps the host's slot stable. */
extern "C" int xt_chain_cuda_upload_slot(xt_chain *c, int slot, xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  CK(cudaSetDevice(d->device));
  CK(cudaMemcpyAsync(d->slots + slot, &c->tc->tab[slot], sizeof(xt_chain_tables), cudaMemcpyHostToDevice, d->st));
  CK(cudaStreamSynchronize(d->st));
  return 0;
}

extern "C" int xt_chain_cuda_upload_bank(xt_chain *c, xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  CK(cudaSetDevice(d->device));
  CK(cudaMemcpyAsync(d->bank, &c->tc->bank, sizeof(xt_drc_bank), cudaMemcpyHostToDevice, d->st));
  CK(cudaStreamSynchronize(d->st));
  return 0;
}

extern "C" int xt_chain_cuda_create(xt_chain *c, xt_msg *msg) {
  chain_dev *d = (chain_dev *)calloc(1, sizeof *d);
  if (!d) return xt_fail(msg, XT_ENOMEM, "chain: out of memory");
  c->dev = d;
  CK(cudaGetDevice(&d->device));
  CK(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&d->slots, XT_TAB_SLOTS * sizeof(xt_chain_tables)));
  CK(cudaMalloc((void **)&d->live, sizeof(xt_chain_tables)));
  CK(cudaMalloc((void **)&d->bank, sizeof(xt_drc_bank)));
  CK(cudaMalloc((void **)&d->loop, sizeof(xt_drc_dev)));
  CK(cudaMalloc((void **)&d->fsum, sizeof(unsigned long long)));
  CK(cudaMalloc((void **)&d->rec, sizeof(xt_chain_drc_frame)));
  CK(cudaMalloc((void **)&d->nsat, sizeof(uint32_t)));
  CK(cudaMemset(d->bank, 0, sizeof(xt_drc_bank)));
  CK(cudaMemset(d->fsum, 0, sizeof(unsigned long long)));
  CK(cudaMemset(d->rec, 0, sizeof(xt_chain_drc_frame)));
  CK(cudaHostAlloc((void **)&d->h_rec, sizeof(xt_chain_drc_frame), cudaHostAllocDefault));
  CK(cudaHostAlloc((void **)&d->h_fsum, sizeof(unsigned long long), cudaHostAllocDefault));
  CK(cudaHostAlloc((void **)&d->h_nsat, sizeof(uint32_t), cudaHostAllocDefault));
  CK(cudaHostAlloc((void **)&d->h_loop, sizeof(xt_drc_dev), cudaHostAllocDefault));
  CK(cudaMalloc((void **)&d->whist, XT_AUTO_BINS * sizeof(uint32_t)));
  CK(cudaMalloc((void **)&d->wl, 2 * sizeof(float)));
  CK(cudaMemset(d->whist, 0, XT_AUTO_BINS * sizeof(uint32_t)));
  CK(cudaMemset(d->wl, 0, 2 * sizeof(float)));
  CK(cudaHostAlloc((void **)&d->h_wl, 2 * sizeof(float), cudaHostAllocDefault));
  return 0;
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
  float **planes[] = {&d->X, &d->D, &d->S};
  for (size_t i = 0; i < sizeof planes / sizeof planes[0]; i++) CK(cudaMalloc((void **)planes[i], np * sizeof(float)));
  CK(cudaMalloc((void **)&d->Y, no * sizeof(float)));
  CK(cudaMalloc((void **)&d->Yd, no * sizeof(float)));
  CK(cudaMemsetAsync(d->Yd, 0, no * sizeof(float), d->st));
  CK(cudaMalloc((void **)&d->M, no * sizeof(float)));
  CK(cudaMalloc((void **)&d->SC, 3 * XT_SCATTER_MAX_GRID * XT_SCATTER_MAX_GRID * sizeof(float)));
  CK(cudaMalloc((void **)&d->lag, no * XT_LAG_TERMS * sizeof(float)));
  CK(cudaMemsetAsync(d->lag, 0, no * XT_LAG_TERMS * sizeof(float), d->st));
  CK(cudaMalloc((void **)&d->out, 2 * no * sizeof(uint16_t)));
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

/* Render and detect, queued: -> X (and S when non-NULL), with the device tables tab. A scene of
 * voxel models without scatter takes the fused path when the host knows the tables' bin count
 * (nbins > 0): the projector integrates the spectrum while the channels are in registers
 * (xt_proj_render_device_spectral; the same xt_spectral_sum as the detect stage's) and k_detect<sums>
 * finishes the pixels, so the channel planes never reach memory. Other scenes (other kinds: their
 * channels add across kinds, the sums do not; scatter, which samples the channel planes; the
 * attached dose-rate loop, whose next kV and so bin count the device picks) render the planes for
 * the whole detect stage. */
static int queue_detect(xt_chain *c, chain_dev *d, const xt_geometry *g, xt_chain_frame_const *fc,
                        const xt_chain_tables *tab, int nbins, float *S, xt_msg *msg) {
  int rc;
  if (c->cs.n && nbins > 0 && !c->prm.scatter && !c->unfused) { /* tab: device; nbins: its bins, from the host */
    const xt_chan_spectral sp = {nbins, &tab->mr[0][0], tab->k1, tab->k2}; /* device addresses */
    rc = xt_proj_render_device_spectral(c->proj, g, &sp, d->A, d->st, msg);
    if (rc == 0) {
      c->fused_frames++;
      return xt_stage_detect_sums_cuda(tab, fc, d->A, d->X, S, d->st, msg);
    }
    if (rc != XT_EUNSUPPORTED) return rc; /* unsupported: nothing was queued; the planes instead */
  }
  if (c->cs.n && (rc = xt_proj_render_device(c->proj, g, 1, d->A, d->st, msg))) return rc;
  if (c->prm.scatter) { /* the coarse scatter field before detection (issue 11) */
    const size_t ncell = XT_SCATTER_MAX_GRID * XT_SCATTER_MAX_GRID;
    fc->sc.field = d->SC + 2 * ncell;
    if ((rc = xt_stage_scatter_cuda(tab, fc, d->A, d->SC, d->SC + ncell, d->SC + 2 * ncell, d->st, msg))) return rc;
  }
  return xt_stage_detect_cuda(tab, fc, d->A, d->X, S, d->st, msg);
}

/* A float plane for tests and diagnostics (not on the frame path). */
static int copy_plane(chain_dev *d, const float *src, float *dst, size_t n, xt_msg *msg) {
  CK(cudaMemcpyAsync(d->h_f, src, n * sizeof(float), cudaMemcpyDeviceToHost, d->st));
  CK(cudaStreamSynchronize(d->st));
  memcpy(dst, d->h_f, n * sizeof(float));
  return 0;
}

/* The attached loop restarts: its state from the parameters (xt_drc_reset, on the host as the CPU
 * twin does), then a step without a measurement writes the first frame's tables and exposure. */
static int loop_restart(xt_chain *c, chain_dev *d, xt_msg *msg) {
  xt_drc_dev *h = d->h_loop;
  memset(h, 0, sizeof *h);
  CK(cudaStreamSynchronize(d->st)); /* the pinned staging may still be read by an earlier restart */
  xt_drc_reset(&h->st, &c->prm);
  CK(cudaMemcpyAsync(d->loop, h, sizeof *h, cudaMemcpyHostToDevice, d->st));
  CK(cudaMemsetAsync(d->fsum, 0, sizeof(unsigned long long), d->st));
  const xt_drc_law law = xt_drc_law_of(&c->prm);
  const xt_drc_meter m = {0, 0, 0, 0, 0};
  c->drc_fresh = 0;
  return xt_stage_drc_step_cuda(d->loop, d->bank, d->slots, d->live, d->fsum, 0, &law, &m, 0, d->rec, d->st, msg);
}

/* Queues one frame on the stream: render, scatter, detect, blur, readout, the loop's measurement
 * and step, process when proc. Outputs stay on the device (raw at d->out, proc after it). */
static int queue_frame(xt_chain *c, chain_dev *d, const xt_geometry *g, uint64_t frame, int proc, int expected,
                       xt_msg *msg) {
  xt_chain_frame_const fc;
  int rc;
  xt_chain_frame_const_make(c, g, frame, &fc);
  if ((rc = ensure_scratch(c, d, &fc, msg))) return rc;
  fc.pc.first = c->first;
  /* here, not beside the readout: between two kernels it would hold the readout's early start back */
  CK(cudaMemsetAsync(d->nsat, 0, sizeof(uint32_t), d->st));
  const size_t no = (size_t)fc.ocols * fc.orows;
  uint16_t *raw = d->out;
  const int loop = c->drc_attached && c->prm.drc;
  const xt_chain_tables *tab = d->slots + c->slot;
  if (loop) { /* the tables and mAs the loop's last step wrote */
    if (c->drc_fresh && (rc = loop_restart(c, d, msg))) return rc;
    tab = d->live;
    fc.mas = 1.f;
  }
  /* the live tables' bins are the kV the loop's step picks on the device: unknown here, so the planes */
  if ((rc = queue_detect(c, d, g, &fc, tab, loop ? 0 : c->tab->nbins, expected ? d->S : NULL, msg)) ||
      (rc = xt_stage_blur_cuda(&fc, d->X, d->D, d->st, msg)) ||
      (rc = xt_stage_readout_cuda(tab, &fc, d->gain, d->offset, d->defect, d->D, d->lag, raw, proc ? d->Y : NULL, d->Yd,
                                  d->nsat, d->st, msg)))
    return rc;
  /* processed before the attached loop's step, which rewrites the live tables (tab) for the next
   * frame: the defective pixels' flat field is then this frame's, as the readout's */
  fc.pc.dsa_mask = c->prm.dsa && c->dsa_valid ? d->M : NULL; /* DSA: the mask frame itself is unsubtracted */
  if (proc) {
    const int tiles = ((fc.ocols + XT_POUT_TW - 1) / XT_POUT_TW) * ((fc.orows + XT_POUT_TH - 1) / XT_POUT_TH);
    const uint32_t *boff = d->dlist_n ? d->dlist : NULL;
    fc.pc.wl = fc.pc.window > 0.f ? NULL : d->wl; /* the automatic window */
    if ((rc = xt_stage_process_cuda(&fc, tab, d->gain, d->offset, d->defect, boff, boff ? boff + tiles + 1 : NULL, raw,
                                    d->Yd, d->Y, d->out + no, d->whist, d->st, msg)))
      return rc;
  }
  if (proc && c->prm.dsa && !c->dsa_valid) {
    CK(cudaMemcpyAsync(d->M, d->Y, no * sizeof(float), cudaMemcpyDeviceToDevice, d->st));
    c->dsa_valid = 1;
  }
  if (c->prm.drc) { /* the measuring field; the attached loop's step (issue 11) */
    if (!loop) CK(cudaMemsetAsync(d->fsum, 0, sizeof(unsigned long long), d->st));
    if ((rc = xt_stage_drc_field_cuda(raw, fc.ocols, fc.orows, d->fsum, d->st, msg))) return rc;
    if (loop) {
      int c0, c1, r0, r1;
      xt_drc_field_box(fc.ocols, fc.orows, &c0, &c1, &r0, &r1);
      const xt_drc_law law = xt_drc_law_of(&c->prm);
      const xt_drc_meter m = xt_drc_meter_of(&c->prm, &g->mode);
      rc = xt_stage_drc_step_cuda(d->loop, d->bank, d->slots, d->live, d->fsum,
                                  (unsigned long long)(c1 - c0) * (unsigned long long)(r1 - r0), &law, &m, 1, d->rec,
                                  d->st, msg);
      if (rc) return rc;
    }
  }
  return 0;
}

extern "C" int xt_chain_cuda_frame(xt_chain *c, const xt_geometry *g, uint64_t frame, const xt_chain_out *out,
                                   xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  int rc;
  CK(cudaSetDevice(d->device));
  if ((rc = queue_frame(c, d, g, frame, out->proc != NULL, out->expected != NULL, msg))) return rc;
  const size_t np = (size_t)d->cols * d->rows, no = (size_t)d->ocols * d->orows;
  const int loop = c->drc_attached && c->prm.drc;
  /* the one crossing: raw, or raw and proc together (contiguous), and the loop's few bytes. Into
   * page-locked destinations (the server's frame pool, xt_host_alloc) the DMA writes them directly;
   * other memory goes through the pinned staging h_out and a host copy after the wait. */
  const size_t nb = no * sizeof(uint16_t);
  const int proc_copy = out->proc && !out->proc_unread;
  const int raw_direct = out->raw && xt_cuda_host_pinned(out->raw, nb);
  const int proc_direct = proc_copy && xt_cuda_host_pinned(out->proc, nb);
  if (raw_direct) CK(cudaMemcpyAsync(out->raw, d->out, nb, cudaMemcpyDeviceToHost, d->st));
  if (proc_direct) CK(cudaMemcpyAsync(out->proc, d->out + no, nb, cudaMemcpyDeviceToHost, d->st));
  const int raw_staged = out->raw && !raw_direct, proc_staged = proc_copy && !proc_direct;
  if (raw_staged || proc_staged) {
    const size_t off = raw_staged ? 0 : no, n = (raw_staged ? no : 0) + (proc_staged ? no : 0);
    CK(cudaMemcpyAsync(d->h_out + off, d->out + off, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, d->st));
  }
  const int autowl = out->proc && !(c->prm.window > 0);
  if (autowl) CK(cudaMemcpyAsync(d->h_wl, d->wl, 2 * sizeof(float), cudaMemcpyDeviceToHost, d->st));
  if (loop) CK(cudaMemcpyAsync(d->h_rec, d->rec, sizeof *d->h_rec, cudaMemcpyDeviceToHost, d->st));
  else if (c->prm.drc) CK(cudaMemcpyAsync(d->h_fsum, d->fsum, sizeof *d->h_fsum, cudaMemcpyDeviceToHost, d->st));
  CK(cudaMemcpyAsync(d->h_nsat, d->nsat, sizeof *d->h_nsat, cudaMemcpyDeviceToHost, d->st));
  CK(cudaStreamSynchronize(d->st));
  c->saturated = *d->h_nsat;
  if (raw_staged) memcpy(out->raw, d->h_out, nb);
  if (proc_staged) memcpy(out->proc, d->h_out + no, nb);
  if (autowl) {
    c->wl[0] = d->h_wl[0];
    c->wl[1] = d->h_wl[1];
  } else if (out->proc) {
    c->wl[0] = (float)c->prm.window;
    c->wl[1] = (float)c->prm.level;
  }
  if (loop) {
    c->rec = *d->h_rec;
    c->drc = c->rec.drc;
  } else if (c->prm.drc) {
    int c0, c1, r0, r1;
    xt_drc_field_box(d->ocols, d->orows, &c0, &c1, &r0, &r1);
    memset(&c->rec, 0, sizeof c->rec);
    c->rec.kv = c->prm.kv;
    c->rec.mas = c->prm.mas;
    c->rec.pulse_ms = c->prm.pulse_ms;
    c->rec.field_sum = *d->h_fsum;
    c->rec.field_n = (uint64_t)(c1 - c0) * (uint64_t)(r1 - r0);
  }
  if (out->expected && (rc = copy_plane(d, d->S, out->expected, np, msg))) return rc;
  if (out->signal && (rc = copy_plane(d, d->D, out->signal, np, msg))) return rc;
  return 0;
}

/* Benchmark: frames queued back to back on the stream, timed with events; no copy-out. With the
 * attached loop (what 3) every frame is measured and steps the loop on the device before the next
 * is exposed: the loop is closed each frame, with no host round trip. */
extern "C" int xt_chain_cuda_time(xt_chain *c, const xt_geometry *g, int n, int warmup, int reps, int what, double *ms,
                                  xt_msg *msg) {
  chain_dev *d = (chain_dev *)c->dev;
  int rc = 0;
  cudaEvent_t e0 = NULL, e1 = NULL;
  CK(cudaSetDevice(d->device));
  const int attached = c->drc_attached, drc = c->prm.drc;
  if (what != 3) { /* the chain alone: no loop, no measurement */
    c->drc_attached = 0;
    c->prm.drc = 0;
  }
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < warmup + reps && !rc; i++) {
    if (i == warmup) rc = cudaEventRecord(e0, d->st) == cudaSuccess ? 0 : XT_EDEVICE;
    const xt_geometry *gi = &g[i % n];
    if (what == 0) {
      xt_chain_frame_const fc;
      xt_chain_frame_const_make(c, gi, (uint64_t)i, &fc);
      if (!(rc = ensure_scratch(c, d, &fc, msg))) rc = xt_proj_render_device(c->proj, gi, 0, d->X, d->st, msg);
      continue;
    }
    if (!rc) rc = queue_frame(c, d, gi, (uint64_t)i, what >= 2, 0, msg);
  }
  c->drc_attached = attached;
  c->prm.drc = drc;
  float t = 0;
  if (!rc && (cudaEventRecord(e1, d->st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
              cudaEventElapsedTime(&t, e0, e1) != cudaSuccess))
    rc = xt_fail(msg, XT_EDEVICE, "chain timing: %s", cudaGetErrorString(cudaGetLastError()));
  *ms = t / reps;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return rc;
}
