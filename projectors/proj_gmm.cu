/* The Gaussian-mixture kind of the CUDA frame pipeline (xt_cuda_kind.h): a tile pipeline in the
 * manner of 3D Gaussian splatting, with the exact per-ray line integral instead of a splat.
 *
 *   preprocess  one thread per Gaussian: in double, the Gaussian's footprint on the detector as
 *               two quadratic forms in pixel offsets (below), the exact silhouette conic of its
 *               cut-off ellipsoid, culling, and the tiles that conic touches (AccuTile: per tile
 *               row, the conic's exact x-interval over the row's pixel centres);
 *   scan        CUB inclusive sum of the tile counts; the pair count is read back (one small
 *               copy per frame: CUB's sort takes its item count on the host);
 *   duplicate   one (tile, Gaussian) pair per touched tile, written in Gaussian order;
 *   sort        CUB stable radix sort by tile id only: line integrals add, so no depth order is
 *               needed, and stability keeps each tile's list in Gaussian order (bit-reproducible);
 *   ranges      each tile's [start, end) in the sorted pairs;
 *   render      one block per tile: the tile's Gaussians through shared memory, each pixel adding
 *               the exact integral of those it meets within the cut-off.
 *
 * Material channels (xt_channels.h): each Gaussian is one material (xt_gmm_chan), so a channel
 * plane is the same render with each Gaussian's term weighted by its material's g/cm^2 per unit
 * optical depth in that channel: one render pass per channel the mixtures feed, after one
 * preprocess and sort (Gaussians of weight 0 are masked out of the pass like a missed warp).
 *
 * The footprint math (the pixel's squared Mahalanobis distance as a ratio of two quadratic
 * forms, the silhouette conic, AccuTile's row spans, a Gaussian's term at a pixel) lives in
 * xt_gmm_footprint.h, shared with host-side checks. Gaussians whose cut-off ellipsoid reaches
 * behind the source's plane (inside the X-ray tube) are skipped: the one documented difference
 * from the reference. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cuda_kind.h"
#include "xt_gmm_footprint.h"

extern "C" {
#include "xt_channels.h"
#include "xt_cub.h"
#include "xt_cuda_config.h"
#include "xt_gmm.h"
#include "xt_gmm_cuda.h"
}

#define CK XT_CK
#define TW XT_GMM_TILE_W
#define TH XT_GMM_TILE_H

/* ------------------------------------------------------------------------------------------ */
/* Descriptors                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct __align__(16) gmm_frame {
  xt_cuda_camera cam; /* world: for the pixel lengths, as the reference computes them */
  gmm_cam m[XT_CUDA_MAX_MODELS];
} gmm_frame;

static_assert(sizeof(gmm_frame) % 16 == 0, "descriptor is a multiple of 16 bytes");

/* The model layer states this kind's bytes per Gaussian (GET /v1/models' device_bytes): the record,
 * the scratch gmm_prepare sizes by the count, and the eight initial pairs of ensure_pairs. */
static_assert(sizeof(xt_gaussian) + sizeof(gmm_screen) + sizeof(gmm_conic) + 2 * sizeof(uint32_t) +
                      8 * 2 * 2 * sizeof(uint32_t) ==
                  XT_GMM_DEVICE_BYTES_PER_GAUSSIAN,
              "XT_GMM_DEVICE_BYTES_PER_GAUSSIAN (models/xt_gmm.h) no longer matches the CUDA kind's allocations");

/* ------------------------------------------------------------------------------------------ */
/* The kind's state                                                                           */
/* ------------------------------------------------------------------------------------------ */

typedef struct gmm_state {
  int device;
  int nmodels;
  const xt_model *models[XT_CUDA_MAX_MODELS];
  uint32_t first[XT_CUDA_MAX_MODELS], count[XT_CUDA_MAX_MODELS];
  double cutoff[XT_CUDA_MAX_MODELS];
  uint32_t ntotal;
  xt_gaussian *d_g; /* every model's records, concatenated */
  /* scratch for one detector and ntotal Gaussians (prepare) */
  int cols, rows, ntx, nty;
  size_t ranges_cap; /* tiles d_ranges holds: grown only, as a biplane worker alternates detectors */
  uint32_t sized_for;
  gmm_screen *d_screen;
  gmm_conic *d_conic;
  uint32_t *d_cnt, *d_off;
  uint32_t *d_keys[2], *d_vals[2];
  size_t cap; /* pairs the key/value buffers hold */
  uint2 *d_ranges;
  void *d_temp;
  size_t temp_bytes;
  uint32_t *h_total; /* pinned: the pair count of the frame */
  /* channels (set_channels): each Gaussian's row of the weight table (model slot x 256 + label),
   * the table (XT_CUDA_MAX_MODELS x 256 rows of XT_MAX_CHANNELS g/cm^2 per optical depth), and the
   * channels some Gaussian feeds (bit c) */
  uint16_t *d_row;
  float *d_tab;
  uint32_t feeds;
  int chan_models; /* models the table covers */
  /* contrast (docs/contrast.md, a mixture's label): per model the projector's iodine (NULL: none)
   * and a host copy of its records with each region's rho scaled; the table's rows as the mixtures
   * give them (h_tab) and the iodine channel of the last set_channels (ci, -1: none) */
  xt_iodine_tab *io[XT_CUDA_MAX_MODELS];
  xt_gaussian *h_g[XT_CUDA_MAX_MODELS];
  float *h_tab;
  int ci;
} gmm_state;

static_assert(XT_CUDA_MAX_MODELS * 256 <= 65536, "weight rows fit uint16");

static void free_scratch(gmm_state *s) {
  cudaFree(s->d_screen);
  cudaFree(s->d_conic);
  cudaFree(s->d_cnt);
  cudaFree(s->d_off);
  for (int i = 0; i < 2; i++) {
    cudaFree(s->d_keys[i]);
    cudaFree(s->d_vals[i]);
    s->d_keys[i] = s->d_vals[i] = NULL;
  }
  cudaFree(s->d_ranges);
  cudaFree(s->d_temp);
  cudaFreeHost(s->h_total);
  s->d_screen = NULL;
  s->d_conic = NULL;
  s->d_cnt = s->d_off = NULL;
  s->d_ranges = NULL;
  s->d_temp = NULL;
  s->h_total = NULL;
  s->cap = s->temp_bytes = 0;
  s->cols = s->rows = s->ntx = s->nty = 0;
  s->ranges_cap = 0;
  s->sized_for = 0;
}

static int gmm_accepts(const xt_model *m) { return m->kind == XT_MODEL_GMM; }

static int gmm_create(const xt_cuda_options *opt, void **st, xt_msg *msg) {
  gmm_state *s = (gmm_state *)calloc(1, sizeof *s);
  if (!s) return xt_fail(msg, XT_ENOMEM, "cuda gmm: out of memory");
  s->device = opt->device;
  *st = s;
  return 0;
}

static void gmm_destroy(void *st) {
  gmm_state *s = (gmm_state *)st;
  if (!s) return;
  free_scratch(s);
  cudaFree(s->d_g);
  cudaFree(s->d_row);
  cudaFree(s->d_tab);
  for (int i = 0; i < XT_CUDA_MAX_MODELS; i++) free(s->io[i]), free(s->h_g[i]);
  free(s->h_tab);
  free(s);
}

static int gmm_add_model(void *st, const xt_model *m, xt_msg *msg) {
  gmm_state *s = (gmm_state *)st;
  const xt_gmm *g = xt_model_gmm(m);
  if (!g || !g->g || !g->nodes || g->count < 1)
    return xt_fail(msg, XT_EINVAL, "cuda projector: model %s: no finished Gaussian mixture", m->name);
  if (s->nmodels == XT_CUDA_MAX_MODELS)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: at most %d Gaussian mixtures", XT_CUDA_MAX_MODELS);
  if ((uint64_t)s->ntotal + g->count > ((uint64_t)1 << 31) / 16)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: model %s: %zu more Gaussians exceed the limit of %llu",
                   m->name, g->count, (unsigned long long)(((uint64_t)1 << 31) / 16));
  const size_t n = s->ntotal + g->count;
  xt_gaussian *d = NULL;
  CK(cudaMalloc((void **)&d, sizeof(xt_gaussian) * n));
  cudaError_t e = cudaSuccess;
  if (s->ntotal) e = cudaMemcpy(d, s->d_g, sizeof(xt_gaussian) * s->ntotal, cudaMemcpyDeviceToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(d + s->ntotal, g->g, sizeof(xt_gaussian) * g->count, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaFree(d);
    return xt_fail(msg, XT_EDEVICE, "cuda projector: model %s: upload: %s", m->name, cudaGetErrorString(e));
  }
  cudaFree(s->d_g);
  s->d_g = d;
  const int i = s->nmodels++;
  s->models[i] = m;
  s->first[i] = s->ntotal;
  s->count[i] = (uint32_t)g->count;
  s->cutoff[i] = g->cutoff;
  s->ntotal = (uint32_t)n;
  return 0;
}

static int gmm_nmodels(const void *st) { return ((const gmm_state *)st)->nmodels; }

static size_t gmm_frame_bytes(const void *st) { return sizeof(gmm_frame); }

/* Per frame on the host, in double: the world camera, and each model's view of the detector. */
static void gmm_fill_frame(const void *st, const xt_geometry *g, void *desc) {
  const gmm_state *s = (const gmm_state *)st;
  gmm_frame *f = (gmm_frame *)desc;
  memset(f, 0, sizeof *f);
  xt_cuda_camera_fill(g, &f->cam);
  for (int i = 0; i < s->nmodels; i++) xt_gmm_cam_fill(g, &s->models[i]->placement, &f->m[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct pre_args {
  const gmm_frame *frame;
  const xt_gaussian *g; /* this model's records */
  gmm_screen *screen;   /* this model's slots */
  gmm_conic *conic;
  uint32_t *cnt;
  int model, n, cols, rows, ntx, nty;
  double k;
} pre_args;

/* Thread mapping: one thread per Gaussian of one model. In: the frame descriptor (that model's
 * camera), the model's records. Out: its screen and conic records and tile count (0: culled). */
__global__ void __launch_bounds__(XT_GMM_PRE_THREADS) k_preprocess(const __grid_constant__ pre_args A) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= A.n) return;
  const gmm_cam &c = A.frame->m[A.model];
  gmm_screen o;
  gmm_conic q;
  uint32_t tiles = 0;
  if (c.ok) tiles = xt_gmm_footprint(A.g[i], c, A.k, A.cols, A.ntx, A.nty, &o, &q);
  A.cnt[i] = tiles;
  if (tiles) {
    A.screen[i] = o;
    A.conic[i] = q;
  }
}

typedef struct dup_args {
  const gmm_conic *conic;
  const uint32_t *cnt, *off; /* inclusive prefix sum */
  uint32_t *keys, *vals;
  int n, ntx;
} dup_args;

/* Thread mapping: XT_GMM_DUP_LANES lanes per Gaussian (all models), lane r its tile rows
 * ty0 + r, ty0 + r + LANES, ... In: its conic, count and inclusive offset. Out: keys (tile id)
 * and values (Gaussian id) at [off - cnt, off), row by row: each lane counts its row's tiles, the
 * group scans the counts (shuffles), each lane writes its row's run. */
__global__ void __launch_bounds__(XT_GMM_PRE_THREADS) k_duplicate(const __grid_constant__ dup_args A) {
  const int NL = XT_GMM_DUP_LANES;
  const int i = (int)((blockIdx.x * (unsigned)blockDim.x + threadIdx.x) / NL), lane = (int)(threadIdx.x % NL);
  /* every lane of a group stays to the end: the shuffles below need the whole group */
  const uint32_t c = i < A.n ? A.cnt[i] : 0u;
  gmm_conic q;
  int rows = 0;
  uint32_t base = 0;
  if (c) {
    q = A.conic[i];
    rows = q.ty1 - q.ty0 + 1;
    base = A.off[i] - c;
  }
  /* the longest group of the warp decides the trip count; shorter groups idle */
  int trips = (rows + NL - 1) / NL;
#pragma unroll
  for (int d = NL; d < 32; d <<= 1) trips = max(trips, __shfl_xor_sync(0xffffffffu, trips, d));
  for (int t = 0; t < trips; t++) {
    const int r = t * NL + lane;
    int a = 1, b = 0;
    if (r < rows) xt_gmm_row_span(q, q.ty0 + r, A.ntx, &a, &b);
    const uint32_t n = b >= a ? (uint32_t)(b - a + 1) : 0u;
    uint32_t sc = n;
#pragma unroll
    for (int d = 1; d < NL; d <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, sc, d, NL);
      if (lane >= d) sc += v;
    }
    uint32_t o = base + sc - n;
    for (int x = a; x <= b; x++, o++) {
      A.keys[o] = (uint32_t)((q.ty0 + r) * A.ntx + x);
      A.vals[o] = (uint32_t)i;
    }
    base += __shfl_sync(0xffffffffu, sc, NL - 1, NL);
  }
}

/* Thread mapping: one thread per sorted pair. In: sorted keys. Out: ranges[tile] = [start, end)
 * for every tile that has pairs (the others were zeroed). */
__global__ void k_ranges(const uint32_t *keys, int n, uint2 *ranges) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t k = keys[i];
  if (i == 0 || keys[i - 1] != k) ranges[k].x = (uint32_t)i;
  if (i == n - 1 || keys[i + 1] != k) ranges[k].y = (uint32_t)(i + 1);
}

typedef struct ren_args {
  const gmm_frame *frame;
  const gmm_screen *screen;
  const gmm_conic *conic;
  const uint32_t *vals;
  const uint2 *ranges;
  float *out;
  int cols, rows, ntx, accumulate;
  /* CH: channel ch, each Gaussian's term times tab[row[id] * XT_MAX_CHANNELS + ch] */
  const uint16_t *row;
  const float *tab;
  int ch;
} ren_args;

/* Thread mapping: one block per TW x TH tile, XT_GMM_BLOCK threads of two pixels each; warp w
 * covers the XT_GMM_WARP_W x XT_GMM_WARP_H region w of the tile (row-major), each lane the
 * pixels (lx, ly) and (lx, ly + WARP_H/2) of it. In: the tile's range of sorted Gaussian ids,
 * their screen and conic records (through shared memory, XT_GMM_BATCH at a time: the tile's
 * offset folded in, and the mask of the warps whose region the conic reaches), the frame's camera
 * (pixel lengths). Out: out[row][col], written (accumulate 0: every pixel of the detector) or
 * added to. A warp skips the Gaussians its region does not meet (a uniform branch). Each batch
 * sums in float, batches in double: thousands of terms keep ~1e-7 relative accuracy, in the same
 * order every time. CH: the terms of one material channel, each weighted (a weight of 0 masks the
 * Gaussian out for every warp). */
template <bool CH>
__global__ void __launch_bounds__(XT_GMM_BLOCK) k_render(const __grid_constant__ ren_args A) {
  __shared__ float4 sh[4][XT_GMM_BATCH];
  __shared__ float shw[CH ? XT_GMM_BATCH : 1];
  __shared__ uint32_t msk[XT_GMM_BATCH];
  const int tx = blockIdx.x, ty = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nwx = TW / XT_GMM_WARP_W;
  const int lx = (warp % nwx) * XT_GMM_WARP_W + lane % XT_GMM_WARP_W;
  const int ly = (warp / nwx) * XT_GMM_WARP_H + lane / XT_GMM_WARP_W;
  const int ly2 = ly + XT_GMM_WARP_H / 2;
  const float fx = (float)lx, fy = (float)ly, fy2 = (float)ly2;
  const uint2 rg = A.ranges[ty * A.ntx + tx];
  const uint32_t bit = 1u << warp;
  double acc = 0.0, acc2 = 0.0;
  for (uint32_t base = rg.x; base < rg.y; base += XT_GMM_BATCH) {
    const int nb = (int)min((uint32_t)XT_GMM_BATCH, rg.y - base);
    __syncthreads();
    int rare = 0;
    if ((int)threadIdx.x < nb) {
      const uint32_t id = A.vals[base + threadIdx.x];
      const gmm_tile_g r = xt_gmm_tile_record(A.screen[id], tx * TW, ty * TH);
      sh[0][threadIdx.x] = r.g0;
      sh[1][threadIdx.x] = r.g1;
      sh[2][threadIdx.x] = r.g2;
      sh[3][threadIdx.x] = r.g3;
      msk[threadIdx.x] = xt_gmm_warp_mask(A.conic[id], tx * TW, ty * TH);
      rare = r.g0.z < 0.f;
      if (CH) {
        const float w = __ldg(A.tab + (size_t)A.row[id] * XT_MAX_CHANNELS + A.ch);
        shw[threadIdx.x] = w;
        if (w == 0.f) msk[threadIdx.x] = 0;
      }
    }
    /* the barrier also tells the block whether this batch holds a rare record at all */
    rare = __syncthreads_or(rare);
    float part = 0.f, part2 = 0.f;
    if (!rare) {
      for (int j = 0; j < nb; j++) {
        if (!(msk[j] & bit)) continue; /* uniform across the warp */
        const float4 g0 = sh[0][j], g1 = sh[1][j], g2 = sh[2][j];
        if (CH) {
          const float w = shw[j];
          part = fmaf(w, xt_gmm_term_common(g0, g1, g2, fx, fy), part);
          part2 = fmaf(w, xt_gmm_term_common(g0, g1, g2, fx, fy2), part2);
        } else {
          part += xt_gmm_term_common(g0, g1, g2, fx, fy);
          part2 += xt_gmm_term_common(g0, g1, g2, fx, fy2);
        }
      }
    } else {
      for (int j = 0; j < nb; j++) {
        if (!(msk[j] & bit)) continue;
        const float4 g0 = sh[0][j], g1 = sh[1][j], g2 = sh[2][j], g3 = sh[3][j];
        const float w = CH ? shw[j] : 1.f;
        part = fmaf(w, xt_gmm_term(g0, g1, g2, g3, fx, fy), part);
        part2 = fmaf(w, xt_gmm_term(g0, g1, g2, g3, fx, fy2), part2);
      }
    }
    acc += (double)part;
    acc2 += (double)part2;
  }
  const int col = tx * TW + lx;
  for (int k = 0; k < 2; k++) {
    const int row = ty * TH + (k ? ly2 : ly);
    if (col < A.cols && row < A.rows) {
      double w[3];
      const double len = xt_cuda_pixel_ray(A.frame->cam, col, row, w);
      const float v = (float)((k ? acc2 : acc) * len);
      float *o = A.out + (size_t)row * A.cols + col;
      *o = A.accumulate ? *o + v : v;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Host: scratch and the stages of one frame                                                  */
/* ------------------------------------------------------------------------------------------ */

static int end_bit_for(int ntiles) {
  int b = 1;
  while ((1 << b) < ntiles) b++;
  return b;
}

/* CUB temp storage for the scan of ntotal counts and the sort of n pairs. */
static int ensure_temp(gmm_state *s, size_t npairs, xt_msg *msg) {
  size_t a = 0, b = 0;
  int e = xt_cub_inclusive_sum_u32(NULL, &a, NULL, NULL, (int)s->ntotal, NULL);
  if (!e) e = xt_cub_sort_pairs_u32(NULL, &b, NULL, NULL, NULL, NULL, (int)npairs, end_bit_for(s->ntx * s->nty), NULL);
  if (e) return xt_fail(msg, XT_EDEVICE, "cuda gmm: cub temp query: %s", cudaGetErrorString((cudaError_t)e));
  const size_t need = a > b ? a : b;
  if (need <= s->temp_bytes) return 0;
  cudaFree(s->d_temp);
  s->d_temp = NULL;
  s->temp_bytes = 0;
  CK(cudaMalloc(&s->d_temp, need));
  s->temp_bytes = need;
  return 0;
}

/* Key/value buffers for n pairs (grown, with head room, when a frame needs more). */
static int ensure_pairs(gmm_state *s, size_t n, xt_msg *msg) {
  if (n <= s->cap) return ensure_temp(s, n, msg);
  const size_t cap = n + n / 2 + 4096;
  if (cap > ((size_t)1 << 31) - 1)
    return xt_fail(msg, XT_ETOOLARGE, "cuda gmm: %zu tile-Gaussian pairs in one frame (limit 2^31)", n);
  for (int i = 0; i < 2; i++) {
    cudaFree(s->d_keys[i]);
    cudaFree(s->d_vals[i]);
    s->d_keys[i] = s->d_vals[i] = NULL;
  }
  s->cap = 0;
  for (int i = 0; i < 2; i++) {
    CK(cudaMalloc((void **)&s->d_keys[i], cap * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&s->d_vals[i], cap * sizeof(uint32_t)));
  }
  s->cap = cap;
  return ensure_temp(s, cap, msg);
}

/* Per-(detector, models) scratch: allocated here, never per frame. The pair buffers start at
 * eight pairs per Gaussian and grow when a frame needs more (docs/projector.md). */
static int gmm_prepare(void *st, int cols, int rows, int max_frames, xt_msg *msg) {
  gmm_state *s = (gmm_state *)st;
  if (s->cols == cols && s->rows == rows && s->sized_for == s->ntotal && s->d_screen) return 0;
  const int ntx = (cols + TW - 1) / TW, nty = (rows + TH - 1) / TH;
  if (nty > 32767 || (size_t)ntx * nty > ((size_t)1 << 30))
    return xt_fail(msg, XT_ERANGE, "cuda gmm: detector %d x %d has too many tiles", cols, rows);
  if (s->sized_for == s->ntotal && s->d_screen && (size_t)ntx * nty <= s->ranges_cap) {
    /* another detector the scratch already holds (the CUB temp is checked per frame) */
    s->ntx = ntx;
    s->nty = nty;
    s->cols = cols;
    s->rows = rows;
    return 0;
  }
  CK(cudaSetDevice(s->device));
  CK(cudaDeviceSynchronize());
  free_scratch(s);
  const size_t n = s->ntotal ? s->ntotal : 1;
  s->ntx = ntx;
  s->nty = nty;
  CK(cudaMalloc((void **)&s->d_screen, n * sizeof(gmm_screen)));
  CK(cudaMalloc((void **)&s->d_conic, n * sizeof(gmm_conic)));
  CK(cudaMalloc((void **)&s->d_cnt, n * sizeof(uint32_t)));
  CK(cudaMalloc((void **)&s->d_off, n * sizeof(uint32_t)));
  CK(cudaMalloc((void **)&s->d_ranges, (size_t)s->ntx * s->nty * sizeof(uint2)));
  s->ranges_cap = (size_t)s->ntx * s->nty;
  CK(cudaHostAlloc((void **)&s->h_total, sizeof(uint32_t), cudaHostAllocDefault));
  int rc = ensure_pairs(s, n * 8 > (1u << 20) ? n * 8 : (1u << 20), msg);
  if (rc) return rc;
  s->cols = cols;
  s->rows = rows;
  s->sized_for = s->ntotal;
  return 0;
}

/* Events between the stages of one frame (profiling); NULL in the frame path. */
typedef struct stage_events {
  cudaEvent_t ev[7];
} stage_events;

#define MARK(i)                                         \
  do {                                                  \
    if (ev) CK(cudaEventRecord(ev->ev[i], stream));     \
  } while (0)

/* One frame: desc on the device, output at out (nch 0: the line integrals; else nch channel
 * planes). Queues everything on `stream`; one synchronisation, for the pair count. *npairs (may be
 * NULL) gets the frame's pair count. */
static int render_frame(gmm_state *s, const gmm_frame *desc, float *out, int accumulate, int nch, cudaStream_t stream,
                        stage_events *ev, uint32_t *npairs, xt_msg *msg) {
  MARK(0);
  for (int m = 0; m < s->nmodels; m++) {
    pre_args A;
    A.frame = desc;
    A.g = s->d_g + s->first[m];
    A.screen = s->d_screen + s->first[m];
    A.conic = s->d_conic + s->first[m];
    A.cnt = s->d_cnt + s->first[m];
    A.model = m;
    A.n = (int)s->count[m];
    A.cols = s->cols;
    A.rows = s->rows;
    A.ntx = s->ntx;
    A.nty = s->nty;
    A.k = s->cutoff[m];
    k_preprocess<<<(A.n + XT_GMM_PRE_THREADS - 1) / XT_GMM_PRE_THREADS, XT_GMM_PRE_THREADS, 0, stream>>>(A);
    CK(cudaGetLastError());
  }
  MARK(1);
  size_t tb = s->temp_bytes;
  int e = xt_cub_inclusive_sum_u32(s->d_temp, &tb, s->d_cnt, s->d_off, (int)s->ntotal, stream);
  if (e) return xt_fail(msg, XT_EDEVICE, "cuda gmm: scan: %s", cudaGetErrorString((cudaError_t)e));
  CK(cudaMemcpyAsync(s->h_total, s->d_off + s->ntotal - 1, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  const uint32_t total = *s->h_total;
  if (npairs) *npairs = total;
  int rc = ensure_pairs(s, total, msg);
  if (rc) return rc;
  MARK(2);
  if (total) {
    dup_args D;
    D.conic = s->d_conic;
    D.cnt = s->d_cnt;
    D.off = s->d_off;
    D.keys = s->d_keys[0];
    D.vals = s->d_vals[0];
    D.n = (int)s->ntotal;
    D.ntx = s->ntx;
    const int nw = (int)(((size_t)s->ntotal * XT_GMM_DUP_LANES + XT_GMM_PRE_THREADS - 1) / XT_GMM_PRE_THREADS);
    k_duplicate<<<nw, XT_GMM_PRE_THREADS, 0, stream>>>(D);
    CK(cudaGetLastError());
  }
  MARK(3);
  if (total) {
    tb = s->temp_bytes;
    e = xt_cub_sort_pairs_u32(s->d_temp, &tb, s->d_keys[0], s->d_keys[1], s->d_vals[0], s->d_vals[1], (int)total,
                              end_bit_for(s->ntx * s->nty), stream);
    if (e) return xt_fail(msg, XT_EDEVICE, "cuda gmm: sort: %s", cudaGetErrorString((cudaError_t)e));
  }
  MARK(4);
  CK(cudaMemsetAsync(s->d_ranges, 0, (size_t)s->ntx * s->nty * sizeof(uint2), stream));
  if (total) {
    k_ranges<<<(total + 255) / 256, 256, 0, stream>>>(s->d_keys[1], (int)total, s->d_ranges);
    CK(cudaGetLastError());
  }
  MARK(5);
  ren_args R;
  R.frame = desc;
  R.screen = s->d_screen;
  R.conic = s->d_conic;
  R.vals = s->d_vals[1];
  R.ranges = s->d_ranges;
  R.out = out;
  R.cols = s->cols;
  R.rows = s->rows;
  R.ntx = s->ntx;
  R.accumulate = accumulate;
  R.row = s->d_row;
  R.tab = s->d_tab;
  R.ch = 0;
  const dim3 grid((unsigned)s->ntx, (unsigned)s->nty);
  if (!nch) {
    k_render<false><<<grid, XT_GMM_BLOCK, 0, stream>>>(R);
    CK(cudaGetLastError());
  }
  const size_t plane = (size_t)s->cols * s->rows;
  for (int c = 0; c < nch; c++) {
    R.out = out + plane * (size_t)c;
    R.ch = c;
    if (s->feeds >> c & 1u) {
      k_render<true><<<grid, XT_GMM_BLOCK, 0, stream>>>(R);
      CK(cudaGetLastError());
    } else if (!accumulate) {
      CK(cudaMemsetAsync(R.out, 0, plane * sizeof(float), stream));
    }
  }
  MARK(6);
  return 0;
}

static int gmm_render(void *st, const xt_cuda_launch *L, xt_msg *msg) {
  gmm_state *s = (gmm_state *)st;
  if (L->cols != s->cols || L->rows != s->rows || s->sized_for != s->ntotal)
    return xt_fail(msg, XT_EINTERNAL, "cuda gmm: render before prepare for %d x %d", L->cols, L->rows);
  if (L->nch && s->chan_models != s->nmodels)
    return xt_fail(msg, XT_EINTERNAL, "cuda gmm: channels launch without channel maps");
  const size_t fpx = (size_t)L->cols * L->rows * (L->nch ? L->nch : 1);
  for (int j = 0; j < L->nf; j++) {
    float *out = L->d_out + fpx * (size_t)j;
    if (L->count) { /* no step count of its own: nothing added */
      if (!L->accumulate) CK(cudaMemsetAsync(out, 0, fpx * sizeof(float), L->stream));
      continue;
    }
    const gmm_frame *desc = (const gmm_frame *)((const unsigned char *)L->d_desc + sizeof(gmm_frame) * (size_t)j);
    int rc = render_frame(s, desc, out, L->accumulate, L->nch, L->stream, NULL, NULL, msg);
    if (rc) return rc;
  }
  return 0;
}

/* Model slot m's 256 weight rows with its iodine (gmm_set_iodine), uploaded. */
static int gmm_upload_rows(gmm_state *s, int m, xt_msg *msg) {
  const xt_iodine_tab *io = s->io[m];
  float rows[256 * XT_MAX_CHANNELS];
  const float *base = s->h_tab + (size_t)m * 256 * XT_MAX_CHANNELS;
  for (int l = 0; l < 256; l++) {
    for (int c = 0; c < XT_MAX_CHANNELS; c++)
      rows[l * XT_MAX_CHANNELS + c] = (float)(base[l * XT_MAX_CHANNELS + c] / io->scale[l]);
    if (s->ci >= 0 && io->scale[l] != 1.0) rows[l * XT_MAX_CHANNELS + s->ci] = io->wio[l];
  }
  CK(cudaMemcpy(s->d_tab + (size_t)m * 256 * XT_MAX_CHANNELS, rows, sizeof rows, cudaMemcpyHostToDevice));
  return 0;
}

/* Each Gaussian's weight row and the models' weight tables for the set cs (xt_gmm_chan), uploaded;
 * only when the set or the models change, never per frame. */
static int gmm_set_channels(void *st, const xt_chanset *cs, xt_msg *msg) {
  gmm_state *s = (gmm_state *)st;
  const size_t nrow = (size_t)XT_CUDA_MAX_MODELS * 256;
  float *tab = (float *)calloc(nrow * XT_MAX_CHANNELS, sizeof(float));
  uint16_t *row = (uint16_t *)malloc(sizeof(uint16_t) * (s->ntotal ? s->ntotal : 1));
  xt_gmm_chan *ch = (xt_gmm_chan *)malloc(sizeof *ch);
  int rc = 0;
  uint32_t feeds = 0;
  if (!tab || !row || !ch) rc = xt_fail(msg, XT_ENOMEM, "cuda gmm: out of memory");
  for (int m = 0; m < s->nmodels && !rc; m++) {
    const xt_gmm *g = xt_model_gmm(s->models[m]);
    if ((rc = xt_gmm_chan_build(cs, s->models[m], ch, msg))) break;
    memcpy(tab + (size_t)m * 256 * XT_MAX_CHANNELS, ch->w, sizeof ch->w);
    for (size_t i = 0; i < g->count; i++) {
      const uint32_t l = ch->labels ? (g->g[i].label & 255u) : 0u;
      row[s->first[m] + i] = (uint16_t)(m * 256 + (int)l);
      for (int c = 0; c < XT_MAX_CHANNELS; c++)
        if (ch->w[l][c] != 0.f) feeds |= 1u << c;
    }
  }
  if (!rc && !s->d_tab && cudaMalloc((void **)&s->d_tab, nrow * XT_MAX_CHANNELS * sizeof(float)) != cudaSuccess)
    rc = xt_fail(msg, XT_EDEVICE, "cuda gmm: channel table: out of device memory");
  if (!rc) {
    cudaFree(s->d_row);
    s->d_row = NULL;
    if (cudaMalloc((void **)&s->d_row, sizeof(uint16_t) * (s->ntotal ? s->ntotal : 1)) != cudaSuccess)
      rc = xt_fail(msg, XT_EDEVICE, "cuda gmm: channel rows: out of device memory");
  }
  if (!rc) {
    cudaError_t e = cudaMemcpy(s->d_tab, tab, nrow * XT_MAX_CHANNELS * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(s->d_row, row, sizeof(uint16_t) * s->ntotal, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "cuda gmm: channel upload: %s", cudaGetErrorString(e));
  }
  if (!rc) {
    s->feeds = feeds;
    s->chan_models = s->nmodels;
    s->ci = xt_chanset_find(cs, XT_BASIS_IODINE);
    int regions = 0; /* a region's iodine may come later (gmm_set_iodine): its channel is fed */
    for (int m = 0; m < s->nmodels; m++)
      for (int l = 0; l < 256; l++) regions |= xt_model_gmm(s->models[m])->contrast[l];
    if (s->ci >= 0 && regions) s->feeds |= 1u << s->ci;
    free(s->h_tab);
    s->h_tab = tab; /* kept: set_iodine makes a region's rows from it */
    tab = NULL;
    for (int m = 0; m < s->nmodels && !rc; m++)
      if (s->io[m]) rc = gmm_upload_rows(s, m, msg);
  }
  free(tab);
  free(row);
  free(ch);
  return rc;
}

/* Contrast: model slot m's records with each region's rho scaled (io->scale, 1 elsewhere) and its
 * channel rows (the mixture's divided by the scale, the iodine's its weight per unit of the scaled
 * depth), as the CPU reference forms them (proj_cpu_gmm.c); synchronous copies: xt_acq_expose sets
 * iodine before the render, with no frame of this projector in flight. XT_ENOTFOUND when m is not
 * one of the kind's. */
static int gmm_set_iodine(void *st, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  gmm_state *s = (gmm_state *)st;
  int i = 0;
  while (i < s->nmodels && s->models[i] != m) i++;
  if (i == s->nmodels) return XT_ENOTFOUND;
  const xt_gmm *g = xt_model_gmm(m);
  if (!s->io[i] && !(s->io[i] = (xt_iodine_tab *)malloc(sizeof *s->io[i])))
    return xt_fail(msg, XT_ENOMEM, "cuda gmm: out of memory");
  if (!s->h_g[i] && !(s->h_g[i] = (xt_gaussian *)malloc(sizeof(xt_gaussian) * g->count)))
    return xt_fail(msg, XT_ENOMEM, "cuda gmm: out of memory");
  *s->io[i] = *io;
  memcpy(s->h_g[i], g->g, sizeof(xt_gaussian) * g->count);
  for (size_t k = 0; g->has_labels && k < g->count; k++) {
    const double sc = io->scale[s->h_g[i][k].label & 255u];
    if (sc != 1.0) s->h_g[i][k].rho = (float)((double)s->h_g[i][k].rho * sc);
  }
  CK(cudaMemcpy(s->d_g + s->first[i], s->h_g[i], sizeof(xt_gaussian) * g->count, cudaMemcpyHostToDevice));
  return s->h_tab && s->chan_models == s->nmodels ? gmm_upload_rows(s, i, msg) : 0; /* else set_channels applies it */
}

const xt_cuda_kind_ops xt_cuda_kind_gmm = {
    "gmm", gmm_accepts, gmm_create, gmm_add_model, gmm_nmodels, gmm_frame_bytes, gmm_fill_frame, gmm_prepare,
    gmm_render, gmm_destroy, gmm_set_channels, NULL, gmm_set_iodine, NULL, NULL,
};

/* ------------------------------------------------------------------------------------------ */
/* Profiling (benchmark)                                                                      */
/* ------------------------------------------------------------------------------------------ */

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

extern "C" int xt_gmm_cuda_profile_frame(int device, const xt_model *const *models, int n, const xt_geometry *g,
                                         int warmup, int reps, xt_gmm_cuda_profile *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  if (reps < 1 || reps > 10000 || warmup < 0) return xt_fail(msg, XT_EINVAL, "gmm profile: bad counts");
  int rc = xt_cuda_available(msg);
  if (rc) return rc;
  CK(cudaSetDevice(device));
  xt_cuda_options o = xt_cuda_default_options();
  o.device = device;
  void *st = NULL;
  gmm_frame h;
  gmm_frame *d_desc = NULL;
  float *d_out = NULL;
  cudaStream_t stream = NULL;
  stage_events ev;
  memset(&ev, 0, sizeof ev);
  double *t = (double *)calloc((size_t)reps * 7, sizeof(double));
  uint2 *ranges = NULL;
  uint32_t *cnt = NULL;
  gmm_state *s = NULL;
  cudaError_t e = cudaSuccess;
  if (!t) return xt_fail(msg, XT_ENOMEM, "gmm profile: out of memory");
  if ((rc = gmm_create(&o, &st, msg))) goto done;
  s = (gmm_state *)st;
  for (int i = 0; i < n && !rc; i++)
    if (models[i]->kind == XT_MODEL_GMM) rc = gmm_add_model(st, models[i], msg);
  if (rc) goto done;
  if (!s->nmodels) {
    rc = xt_fail(msg, XT_EINVAL, "gmm profile: no Gaussian mixture among the models");
    goto done;
  }
  if ((rc = gmm_prepare(st, g->mode.cols, g->mode.rows, 1, msg))) goto done;
  gmm_fill_frame(st, g, &h);
  e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&d_desc, sizeof h);
  if (e == cudaSuccess) e = cudaMalloc((void **)&d_out, sizeof(float) * g->mode.cols * g->mode.rows);
  if (e == cudaSuccess) e = cudaMemcpy(d_desc, &h, sizeof h, cudaMemcpyHostToDevice);
  for (int i = 0; i < 7 && e == cudaSuccess; i++) e = cudaEventCreate(&ev.ev[i]);
  if (e != cudaSuccess) {
    rc = xt_fail(msg, XT_EDEVICE, "gmm profile: %s", cudaGetErrorString(e));
    goto done;
  }
  for (int r = 0; r < warmup + reps && !rc; r++) {
    uint32_t np = 0;
    rc = render_frame(s, d_desc, d_out, 0, 0, stream, &ev, &np, msg);
    if (rc) break;
    if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) break;
    out->pairs = np;
    if (r < warmup) continue;
    for (int k = 0; k < 6 && e == cudaSuccess; k++) {
      float ms = 0;
      e = cudaEventElapsedTime(&ms, ev.ev[k], ev.ev[k + 1]);
      t[(size_t)k * reps + (r - warmup)] = ms;
    }
    float all = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&all, ev.ev[0], ev.ev[6]);
    t[(size_t)6 * reps + (r - warmup)] = all;
  }
  if (!rc && e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "gmm profile: %s", cudaGetErrorString(e));
  if (rc) goto done;
  {
    double med[7];
    for (int k = 0; k < 7; k++) {
      qsort(t + (size_t)k * reps, (size_t)reps, sizeof(double), cmpd);
      med[k] = t[(size_t)k * reps + reps / 2];
    }
    out->ms_preprocess = med[0];
    out->ms_scan = med[1];
    out->ms_duplicate = med[2];
    out->ms_sort = med[3];
    out->ms_ranges = med[4];
    out->ms_render = med[5];
    out->ms_total = med[6];
  }
  /* the work: Gaussians with tiles, and pixels evaluated (pairs x the tile's detector pixels) */
  out->gaussians = s->ntotal;
  ranges = (uint2 *)malloc(sizeof(uint2) * (size_t)s->ntx * s->nty);
  cnt = (uint32_t *)malloc(sizeof(uint32_t) * s->ntotal);
  if (!ranges || !cnt) {
    rc = xt_fail(msg, XT_ENOMEM, "gmm profile: out of memory");
    goto done;
  }
  e = cudaMemcpy(ranges, s->d_ranges, sizeof(uint2) * (size_t)s->ntx * s->nty, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(cnt, s->d_cnt, sizeof(uint32_t) * s->ntotal, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    rc = xt_fail(msg, XT_EDEVICE, "gmm profile: %s", cudaGetErrorString(e));
    goto done;
  }
  for (uint32_t i = 0; i < s->ntotal; i++) out->visible += cnt[i] > 0;
  for (int ty = 0; ty < s->nty; ty++)
    for (int tx = 0; tx < s->ntx; tx++) {
      const uint2 r = ranges[ty * s->ntx + tx];
      const int w = (tx + 1) * TW <= s->cols ? TW : s->cols - tx * TW, hh = (ty + 1) * TH <= s->rows ? TH : s->rows - ty * TH;
      out->evaluated += (double)(r.y - r.x) * w * hh;
    }
done:
  if (stream) cudaStreamSynchronize(stream);
  for (int i = 0; i < 7; i++)
    if (ev.ev[i]) cudaEventDestroy(ev.ev[i]);
  if (stream) cudaStreamDestroy(stream);
  cudaFree(d_desc);
  cudaFree(d_out);
  gmm_destroy(st);
  free(t);
  free(ranges);
  free(cnt);
  return rc;
}
