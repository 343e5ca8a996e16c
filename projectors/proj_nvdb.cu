/* NanoVDB grids on the CUDA frame pipeline (xt_cuda_kind.h): hierarchical DDA over the tree with
 * exact per-voxel integration inside leaves and constant regions (tiles of lower, upper and root
 * nodes, and the background) crossed in one step each, by length.
 *
 * The grid's own bytes are uploaded once at add_model and read in place through PNanoVDB (the
 * CUDA copy of Debian's header generated at configure time, projectors/cuda.cmake), with the
 * same read functions as the loader and the CPU reference (models/xt_nvdb_access.h).
 *
 * Exactness. As in the voxel kind, the ray's set-up is the reference's (proj_cpu_nvdb.c): pixel
 * ray, world->cell map, domain clip and entry voxel in double with the _rn intrinsics. The march is
 * FP32 in a ray-local frame (t in mm from the entry point), and every plane crossing is computed
 * from integer plane counts, t_a(k) = tn0_a + k dt_a (one FMA, never accumulated): inside a leaf
 * each step crosses one plane; leaving a constant region of edge D crosses up to D planes of the
 * exit axis at once, and the other axes take the planes they crossed before that point (counted,
 * then settled on the same formula so that the voxel chosen is the one t_a(k) says). Cell indices
 * never move backwards, so the walk ends.
 *
 * Layout: one kernel, k_nvdb, templated on the grid type (so PNanoVDB's per-type tables fold into
 * constants) and on its output (the line integral, the step count, or the material channels); one
 * launch per model. Channels (xt_channels.h) take the same march: each segment's stored value
 * goes to the channels by the grid's xt_voxel_chan, as proj_cpu_nvdb.c does - a label's weight
 * row (two 16-byte loads), or for mu grids the optical depth of the value's HU class, weighted
 * once at the end.
 *
 * The traversals (issue 29), chosen per projector by XT_NVDB_TRAVERSAL at create: "dense" (the
 * default since 2026-12-08, below), "tree" (the march above) or "bricks" (and its loop shapes "bricks2" .. "bricks8",
 * xt_nvdb_bricks_flat.inc, on the same pool, to be measured against it): at add_model the grid is also flattened into a brick pool
 * (projectors/xt_nvdb_bricks.h: 8^3 float bricks of the leaves, a table over the coarse cells, a
 * palette of the constant blocks), and k_nvdb_bricks marches it - a dense step (one float load at
 * a running offset) per voxel inside a brick, one step per constant block - with the march the CPU
 * tests run (xt_nvdb_bricks_march.inc). "dense" and "dense-each" keep no pool: a launch marches the
 * projector's dense working set (one model's domain at a time, decoded on the device by
 * k_nvdb_decode when another model is needed; "dense-each" at every launch) with the voxel kind's
 * kernel (xt_cuda_voxel_render_view), so that a step costs a dense step; channel launches of mu
 * grids too (its k_channels); those of label grids keep the tree kernel, and so does a model whose
 * domain the working set cannot hold (2^31 voxels, or device memory refused at add_model). */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cuda_kind.h"

extern "C" {
#include "xt_channels.h"
#include "xt_cuda_config.h"
#include "xt_nvdb.h"
#include "xt_nvdb_raycast.h"
#include "xt_raycast.h"
}
/* 32-bit byte addresses on the device (grids under 4 GiB, checked at add_model): fewer address
 * instructions per read than PNanoVDB's C default of 64. */
#define PNANOVDB_ADDRESS_32
#include "xt_nvdb_access.h"
#include "xt_nvdb_bricks.h"

/* Blocks per SM asked of the compiler: the voxel kind's 4 (64 registers); the march needs ~53 and
 * no stack (ptxas -v; every per-axis array is indexed by unrolled constants only). */
#define NVDB_MIN_BLOCKS XT_CUDA_MIN_BLOCKS
/* The channels variant keeps 8 accumulators (labels) or 3 (mu grids) more: ~60 registers, so it
 * fits the same 4 blocks with no spill (ptxas -v). */
#define NVDB_CH_MIN_BLOCKS XT_CUDA_MIN_BLOCKS

/* What the kernel writes. */
enum { OUT_MU = 0, OUT_COUNT = 1, OUT_CH = 2 };

/* A resident grid: set at add_model, passed by value in every launch. */
typedef struct dev_grid {
  const uint32_t *words;
  int lo[3], n[3];  /* the domain: first voxel and voxels per axis */
  float background; /* stored value (mu, or a label id) */
  int labels;
  const float *lut; /* labels: 256 mu values (device) */
  /* channels (set_channels): labels: 256 rows of XT_MAX_CHANNELS weights (g/cm^2 per mm); mu
   * grids: rows 0..2 the HU classes' weights per optical depth, thr the class bounds (1/mm) */
  const float4 *chw;
  float thr[2];
  xt_nvdb_bricks br; /* the brick pool (device pointers), when the projector marches bricks */
} dev_grid;

/* Per frame: the camera, and per model the world->cell map (linear part) and the source in cell
 * space, in double (xt_cuda_kind.h: the voxel kind's layout, which the dense traversal relies on). */
typedef xt_cuda_model_map dev_frame_model;
typedef xt_cuda_frame dev_frame;

/* Kernel parameters (by value). */
typedef struct dev_launch {
  dev_grid grid;
  int model, cols, rows, accumulate;
  int nch; /* OUT_CH: planes per frame */
  const unsigned char *desc; /* nf dev_frame */
  float *out;
} dev_launch;

static __device__ __forceinline__ double dm(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ double da(double a, double b) { return __dadd_rn(a, b); }

/* What a segment adds: OUT_MU mu x length into a[0]; OUT_CH the channels (a label's weight row
 * into a[0..7]; a mu grid's optical depth into a[class] for the HU class of the value). */
template <int OUT>
static __device__ __forceinline__ void add_seg(const dev_grid &gd, float len, float v, float *a) {
  if (OUT != OUT_CH) {
    const float mu = gd.labels ? __ldg(gd.lut + xt_nvdb_label(v)) : v;
    a[0] = fmaf(len, mu, a[0]);
  } else if (gd.labels) {
    xt_cuda_acc8(a, len, __ldg(gd.chw + 2 * xt_nvdb_label(v)), __ldg(gd.chw + 2 * xt_nvdb_label(v) + 1));
  } else {
    const float d = len * v; /* constant indices only: the accumulators stay in registers */
    if (v < gd.thr[0]) a[0] += d;
    else if (v < gd.thr[1]) a[1] += d;
    else a[2] += d;
  }
}

/* The integral of one ray through one grid into a[0] (or, OUT_COUNT, the number of steps taken;
 * OUT_CH, the channel accumulators of add_seg). */
template <int GT, int OUT>
static __device__ __forceinline__ void nvdb_ray(const dev_grid &gd, const dev_frame_model &fm, const double w[3],
                                                double len, float *acc8) {
  constexpr bool COUNT = OUT == OUT_COUNT;
  double q[3], o[3];
#pragma unroll
  for (int k = 0; k < 3; k++) {
    q[k] = da(da(dm(fm.m[k][0], w[0]), dm(fm.m[k][1], w[1])), dm(fm.m[k][2], w[2]));
    o[k] = fm.o[k];
  }
  double s0, s1;
  if (!xt_clip_box_f64(o, q, gd.n, len, &s0, &s1)) return;
  /* Set-up in double, as proj_cpu_nvdb.c: entry cell, first plane per axis; then FP32 from the
   * entry point. */
  int idx[3], step[3], kc[3];
  float tn0[3], dt[3], tx[3];
#pragma unroll
  for (int a = 0; a < 3; a++) {
    int i = (int)floor(da(o[a], dm(s0, q[a])));
    i = i < 0 ? 0 : (i > gd.n[a] - 1 ? gd.n[a] - 1 : i);
    idx[a] = i;
    kc[a] = 0;
    if (q[a] != 0.0) {
      const double inv = 1.0 / q[a];
      step[a] = q[a] > 0 ? 1 : -1;
      tn0[a] = (float)(dm(da((double)(i + (q[a] > 0)), -o[a]), inv) - s0);
      dt[a] = (float)fabs(inv);
    } else {
      step[a] = 0;
      tn0[a] = INFINITY;
      dt[a] = INFINITY;
    }
    tx[a] = tn0[a];
  }
  const float tend = (float)(s1 - s0);
  pnanovdb_buf_t buf;
  buf.data = (uint32_t *)gd.words;
  pnanovdb_readaccessor_t acc;
  {
    pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
    pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  }
  float t = 0.f;
  int steps = 0;
  for (;;) {
    const pnanovdb_coord_t ijk = {idx[0] + gd.lo[0], idx[1] + gd.lo[1], idx[2] + gd.lo[2]};
    int dim;
    const float v = xt_nvdb_probe((pnanovdb_uint32_t)GT, buf, &acc, &ijk, gd.background, &dim);
    steps++;
    if (dim == 1) { /* a leaf: cross voxel after voxel while in it, reading it directly */
      const pnanovdb_leaf_handle_t leaf = acc.leaf;
      const int key[3] = {ijk.x >> 3, ijk.y >> 3, ijk.z >> 3};
      float m = v; /* the stored value of the voxel being crossed */
      bool done = false;
      for (;;) { /* cross the voxel's nearest plane (ties to x, then y, as the reference) */
        const int a = (tx[0] <= tx[1] && tx[0] <= tx[2]) ? 0 : (tx[1] <= tx[2] ? 1 : 2);
        const float tm = fminf(fminf(fminf(tx[0], tx[1]), tx[2]), tend);
        add_seg<OUT>(gd, fmaxf(tm - t, 0.f), m, acc8);
        t = fmaxf(t, tm);
        if (t >= tend) {
          done = true;
          break;
        }
        bool out = false, left = false;
        /* every index below is a compile-time constant (unrolled): the state stays in registers */
#pragma unroll
        for (int b = 0; b < 3; b++)
          if (b == a) {
            idx[b] += step[b];
            out = idx[b] < 0 || idx[b] >= gd.n[b];
            left = ((idx[b] + gd.lo[b]) >> 3) != key[b];
            kc[b]++;
            tx[b] = fmaf((float)kc[b], dt[b], tn0[b]);
          }
        if (out) done = true;
        if (out || left) break;
        steps++;
        const pnanovdb_coord_t c = {idx[0] + gd.lo[0], idx[1] + gd.lo[1], idx[2] + gd.lo[2]};
        m = xt_nvdb_leaf_value((pnanovdb_uint32_t)GT, buf, leaf, &c, gd.background);
      }
      if (done) break;
      continue;
    }
    /* A constant region of edge dim: planes to its exit face per axis, and the nearest exit. */
    int base[3], mrem[3];
    float te[3];
#pragma unroll
    for (int a = 0; a < 3; a++) {
      const int ic = a == 0 ? ijk.x : (a == 1 ? ijk.y : ijk.z);
      base[a] = (ic & ~(dim - 1)) - gd.lo[a];
      mrem[a] = step[a] > 0 ? base[a] + dim - idx[a] : (step[a] < 0 ? idx[a] - base[a] + 1 : 0);
      te[a] = step[a] ? fmaf((float)(kc[a] + mrem[a] - 1), dt[a], tn0[a]) : INFINITY;
    }
    const int a = (te[0] <= te[1] && te[0] <= te[2]) ? 0 : (te[1] <= te[2] ? 1 : 2);
    const float tm = fminf(fminf(fminf(te[0], te[1]), te[2]), tend);
    add_seg<OUT>(gd, fmaxf(tm - t, 0.f), v, acc8);
    t = fmaxf(t, tm);
    if (t >= tend) break;
    bool out = false;
#pragma unroll
    for (int b = 0; b < 3; b++) {
      int j;
      if (b == a) {
        j = mrem[b];
      } else if (step[b]) { /* planes of b crossed before t, at most the region's */
        const float r = ceilf((t - tn0[b]) / dt[b]) - (float)kc[b];
        j = r > 0.f ? (r < (float)(mrem[b] - 1) ? (int)r : mrem[b] - 1) : 0;
        if (j > 0 && fmaf((float)(kc[b] + j - 1), dt[b], tn0[b]) >= t) j--;
        else if (j < mrem[b] - 1 && fmaf((float)(kc[b] + j), dt[b], tn0[b]) < t) j++;
      } else {
        j = 0;
      }
      idx[b] += step[b] * j;
      kc[b] += j;
      tx[b] = step[b] ? fmaf((float)kc[b], dt[b], tn0[b]) : INFINITY;
      if (b == a) out = idx[b] < 0 || idx[b] >= gd.n[b];
    }
    if (out) break;
  }
  if (COUNT) acc8[0] = (float)steps;
}

/* Thread mapping: one thread per detector pixel, the voxel kind's tiling (xt_cuda_config.h);
 * blockIdx.z is the frame. In: the frame descriptors (camera, per-model map), the resident grid.
 * Out: out[z][row][col] written (0 where the grid is not hit) or, with accumulate, added to;
 * OUT_CH: nch planes per frame, channel c of frame z at out + (z nch + c) rows cols. */
template <int GT, int OUT>
__global__ void __launch_bounds__(XT_CUDA_BLOCK_THREADS, OUT == OUT_CH ? NVDB_CH_MIN_BLOCKS : NVDB_MIN_BLOCKS)
    k_nvdb(const __grid_constant__ dev_launch L) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wx = XT_CUDA_TILE_W / XT_CUDA_WARP_W;
  const int col = blockIdx.x * XT_CUDA_TILE_W + (warp % wx) * XT_CUDA_WARP_W + (lane % XT_CUDA_WARP_W);
  const int row = blockIdx.y * XT_CUDA_TILE_H + (warp / wx) * XT_CUDA_WARP_H + (lane / XT_CUDA_WARP_W);
  if (col >= L.cols || row >= L.rows) return;
  const dev_frame *f = (const dev_frame *)L.desc + blockIdx.z;
  const dev_frame_model &fm = f->fm[L.model];
  float a[OUT == OUT_CH ? XT_MAX_CHANNELS : 1];
#pragma unroll
  for (int c = 0; c < (OUT == OUT_CH ? XT_MAX_CHANNELS : 1); c++) a[c] = 0.f;
  if (fm.ok) {
    double w[3];
    const double len = xt_cuda_pixel_ray(f->cam, col, row, w);
    nvdb_ray<GT, OUT>(L.grid, fm, w, len, a);
  }
  if (OUT != OUT_CH) {
    float *const o = L.out + ((size_t)blockIdx.z * L.rows * L.cols + (size_t)row * L.cols + col);
    *o = L.accumulate ? *o + a[0] : a[0];
    return;
  }
  if (!L.grid.labels) { /* mu grid: the classes' optical depths, weighted (xt_voxel_chan.cw) */
    const float d0 = a[0], d1 = a[1], d2 = a[2];
    const float4 *cw = L.grid.chw;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float4 r0 = __ldg(cw + h), r1 = __ldg(cw + 2 + h), r2 = __ldg(cw + 4 + h);
      a[4 * h + 0] = fmaf(d2, r2.x, fmaf(d1, r1.x, d0 * r0.x));
      a[4 * h + 1] = fmaf(d2, r2.y, fmaf(d1, r1.y, d0 * r0.y));
      a[4 * h + 2] = fmaf(d2, r2.z, fmaf(d1, r1.z, d0 * r0.z));
      a[4 * h + 3] = fmaf(d2, r2.w, fmaf(d1, r1.w, d0 * r0.w));
    }
  }
  const size_t plane = (size_t)L.rows * L.cols;
  float *const o = L.out + (size_t)blockIdx.z * L.nch * plane + (size_t)row * L.cols + col;
#pragma unroll
  for (int c = 0; c < XT_MAX_CHANNELS; c++)
    if (c < L.nch) o[c * plane] = L.accumulate ? o[c * plane] + a[c] : a[c];
}

/* The brick marches (XT_NVDB_TRAVERSAL): the first (xt_nvdb_bricks_march.inc) and its other loop
 * shapes (xt_nvdb_bricks_flat.inc), all on the same pool. */
enum { TR_TREE = 0, TR_BRICKS = 1, TR_BRICKS2 = 2, TR_BRICKS3 = 3, TR_BRICKS4 = 4, TR_BRICKS5 = 5, TR_BRICKS6 = 6,
       TR_BRICKS7 = 7, TR_BRICKS8 = 8, TR_DENSE = 9, TR_DENSE_EACH = 10, TR_N = 11 };

/* Thread mapping: k_nvdb's (one thread per pixel, blockIdx.z the frame). In: the frame
 * descriptors, the grid's brick pool. Out: out[z][row][col] written (0 where the grid is not hit)
 * or added to; OUT_COUNT the cells and blocks crossed. The ray's set-up is k_nvdb's, in double;
 * TR picks the march (TR_BRICKS..TR_BRICKS8). */
template <int OUT, int TR>
__global__ void __launch_bounds__(XT_CUDA_BLOCK_THREADS, NVDB_MIN_BLOCKS) k_nvdb_bricks(const __grid_constant__ dev_launch L) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wx = XT_CUDA_TILE_W / XT_CUDA_WARP_W;
  const int col = blockIdx.x * XT_CUDA_TILE_W + (warp % wx) * XT_CUDA_WARP_W + (lane % XT_CUDA_WARP_W);
  const int row = blockIdx.y * XT_CUDA_TILE_H + (warp / wx) * XT_CUDA_WARP_H + (lane / XT_CUDA_WARP_W);
  if (col >= L.cols || row >= L.rows) return;
  const dev_frame *f = (const dev_frame *)L.desc + blockIdx.z;
  const dev_frame_model &fm = f->fm[L.model];
  float a = 0.f;
  if (fm.ok) {
    double w[3], q[3], o[3], s0, s1;
    const double len = xt_cuda_pixel_ray(f->cam, col, row, w);
#pragma unroll
    for (int k = 0; k < 3; k++) {
      q[k] = da(da(dm(fm.m[k][0], w[0]), dm(fm.m[k][1], w[1])), dm(fm.m[k][2], w[2]));
      o[k] = fm.o[k];
    }
    /* bricks7, bricks8: the clip's 1 / q kept for the set-up (the same FP64 reciprocals, computed once) */
    double inv[3] = {0, 0, 0};
    if (TR == TR_BRICKS7 || TR == TR_BRICKS8 ? xt_clip_box_inv_f64(o, q, L.grid.br.n, len, &s0, &s1, inv)
                         : xt_clip_box_f64(o, q, L.grid.br.n, len, &s0, &s1)) {
      int steps = 0;
      if (TR == TR_BRICKS) a = xt_nvdb_bricks_ray_f32(&L.grid.br, o, q, s0, s1, &steps);
      else if (TR == TR_BRICKS2) a = xt_nvdb_bricks2_ray_f32(&L.grid.br, o, q, s0, s1, &steps);
      else if (TR == TR_BRICKS8) a = xt_nvdb_bricks8_ray_f32(&L.grid.br, o, q, s0, s1, &steps, inv);
      else
        a = xt_nvdb_bricks3_ray_f32(&L.grid.br, o, q, s0, s1, &steps, TR == TR_BRICKS7 ? inv : NULL,
                                    TR == TR_BRICKS3   ? 0
                                    : TR == TR_BRICKS4 ? XT_BR_NEST
                                    : TR == TR_BRICKS5 ? XT_BR_NEST | XT_BR_CLIP
                                    : TR == TR_BRICKS6 ? XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION
                                                       : XT_BR_NEST | XT_BR_CLIP | XT_BR_REGION | XT_BR_HULL);
      if (OUT == OUT_COUNT) a = (float)steps;
    }
  }
  float *const o = L.out + ((size_t)blockIdx.z * L.rows * L.cols + (size_t)row * L.cols + col);
  *o = L.accumulate ? *o + a : a;
}

/* The dense working set (TR_DENSE): the grid's domain decoded into dst (x fastest), voxel by voxel as
 * the tree march reads it. Thread mapping: one thread per run of xt_nvdb_decode_run (a row's voxels
 * in one 8-voxel block of x). Out: every domain voxel of dst written once. */
template <int GT>
__global__ void __launch_bounds__(XT_CUDA_BLOCK_THREADS) k_nvdb_decode(const __grid_constant__ dev_grid gd, float *dst,
                                                                       int nrun, unsigned long long nthreads) {
  const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nthreads) return;
  pnanovdb_buf_t buf;
  buf.data = (uint32_t *)gd.words;
  pnanovdb_readaccessor_t acc;
  {
    pnanovdb_grid_handle_t grid = {pnanovdb_address_null()};
    pnanovdb_readaccessor_init(&acc, pnanovdb_tree_get_root(buf, pnanovdb_grid_get_tree(buf, grid)));
  }
  xt_nvdb_decode_run((pnanovdb_uint32_t)GT, buf, &acc, gd.lo, gd.n, nrun, t, gd.background, gd.labels ? gd.lut : NULL,
                     dst);
}

/* ------------------------------------------------------------------------------------------ */
/* Host side: the kind                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct nvdb_kind {
  xt_cuda_options opt;
  int nmodels;
  const xt_model *models[XT_CUDA_MAX_MODELS];
  dev_grid dg[XT_CUDA_MAX_MODELS];
  uint32_t gt[XT_CUDA_MAX_MODELS];
  void *d_words[XT_CUDA_MAX_MODELS];
  float *d_lut[XT_CUDA_MAX_MODELS];
  float *d_chw[XT_CUDA_MAX_MODELS]; /* channels: 256 x XT_MAX_CHANNELS weights per model */
  void *d_bricks[XT_CUDA_MAX_MODELS][4]; /* bricks traversal: table, pool, palette, level */
  int chan_models;                  /* models the channel tables cover */
  int debug_sync;
  int bricks; /* XT_NVDB_TRAVERSAL=bricks, bricks2..8 (TR_*): mu and count launches march the brick pool;
               * dense, dense-each (TR_DENSE, TR_DENSE_EACH): they march the working set below */
  /* The dense working set (TR_DENSE): one float copy of one model's domain at a time, with the
   * voxel kind's guard bands, decoded on the device from the resident grid when a launch needs
   * another model than it holds (ws_model; TR_DENSE_EACH: at every launch, to time a switch), and
   * marched by the voxel kind's kernel (xt_cuda_voxel_render_view); sized at add_model for the
   * largest domain and zeroed once (the guard bands stay finite). Models whose domain exceeds the
   * L2 cache (AUTO; every model under XT_CUDA_VOX_TEXTURE) also get the texture copy, made after
   * the decode as the voxel kind keeps one. Like the other kinds' scratch, it serves the launches
   * of one stream at a time (xt_cuda_kind.h). */
  float *ws;
  size_t ws_cap; /* floats */
  int ws_model;
  cudaArray_t ws_arr;
  cudaTextureObject_t ws_tex;
  int ws_arr_n[3];
  xt_cuda_dense_view view[XT_CUDA_MAX_MODELS]; /* per model: n and the hull (f32, tex: at launch) */
  int want_tex[XT_CUDA_MAX_MODELS];
  int ws_ok[XT_CUDA_MAX_MODELS]; /* the working set holds this model's domain; 0: it takes the tree */
  float *d_vchw[XT_CUDA_MAX_MODELS]; /* mu grids' channel rows in the view's layout (set_channels) */
} nvdb_kind;

static size_t ws_guard(const int n[3]) { return (size_t)n[0] * n[1] + 1; }

static void ws_free_tex(nvdb_kind *p) {
  if (p->ws_tex) cudaDestroyTextureObject(p->ws_tex);
  if (p->ws_arr) cudaFreeArray(p->ws_arr);
  p->ws_tex = 0;
  p->ws_arr = NULL;
  memset(p->ws_arr_n, 0, sizeof p->ws_arr_n);
}

static void nvdb_destroy(void *st) {
  nvdb_kind *p = (nvdb_kind *)st;
  if (!p) return;
  for (int i = 0; i < p->nmodels; i++) {
    cudaFree(p->d_words[i]);
    cudaFree(p->d_lut[i]);
    cudaFree(p->d_chw[i]);
    for (int k = 0; k < 4; k++) cudaFree(p->d_bricks[i][k]);
    cudaFree(p->d_vchw[i]);
  }
  ws_free_tex(p);
  cudaFree(p->ws);
  free(p);
}

static int nvdb_create(const xt_cuda_options *opt, void **st, xt_msg *msg) {
  nvdb_kind *p = (nvdb_kind *)calloc(1, sizeof *p);
  if (!p) return xt_fail(msg, XT_ENOMEM, "backend cuda: out of memory");
  p->opt = *opt;
  const char *dbg = getenv("XT_CUDA_SYNC");
  p->debug_sync = dbg && *dbg && strcmp(dbg, "0") != 0;
  const char *tr = getenv("XT_NVDB_TRAVERSAL");
  static const char *const names[TR_N] = {"tree",    "bricks",  "bricks2", "bricks3", "bricks4",   "bricks5",
                                          "bricks6", "bricks7", "bricks8", "dense",   "dense-each"};
  p->bricks = -1;
  for (int k = 0; k < TR_N; k++)
    if ((!tr || !*tr) ? k == TR_DENSE : !strcmp(tr, names[k])) p->bricks = k;
  if (p->bricks < 0) {
    free(p);
    return xt_fail(msg, XT_EINVAL, "backend cuda: XT_NVDB_TRAVERSAL=%s: dense, tree, bricks, bricks2 .. bricks8 or dense-each",
                   tr);
  }
  p->ws_model = -1;
  *st = p;
  return 0;
}

static int nvdb_accepts(const xt_model *m) { return m->kind == XT_MODEL_NVDB; }

/* TR_DENSE at add_model of slot i (grid g, the slot's device grid set): the slot's view (its domain
 * and the content hull, xt_nvdb_bricks_build's, whose pool is dropped) and a working set large
 * enough for it. */
static int ws_add(nvdb_kind *p, int i, const xt_nvdb *g, const char *name, xt_msg *msg) {
  xt_nvdb_bricks_host h;
  int rc = xt_nvdb_bricks_build(g, &h, msg);
  if (rc) return rc;
  xt_cuda_dense_view *v = &p->view[i];
  memset(v, 0, sizeof *v);
  v->model = i;
  memcpy(v->n, p->dg[i].n, sizeof v->n);
  v->hull = h.b.hull ? 1 : 2;
  v->mu_bg = h.b.bgmu;
  memcpy(v->hlo, h.b.hlo, sizeof v->hlo);
  memcpy(v->hhi, h.b.hhi, sizeof v->hhi);
  xt_nvdb_bricks_free(&h);
  const size_t nvox = (size_t)v->n[0] * v->n[1] * v->n[2];
  if (nvox >= ((size_t)1 << 31)) return 0; /* the voxel kind's limit, 32-bit linear indices: the tree */
  int lim = 0, l2 = 0;
  XT_CK(cudaDeviceGetAttribute(&lim, cudaDevAttrMaxTexture3DWidth, p->opt.device));
  XT_CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, p->opt.device));
  const size_t min_bytes = p->opt.dual_min_bytes >= 0 ? (size_t)p->opt.dual_min_bytes : (size_t)l2;
  const int fits = v->n[0] <= lim && v->n[1] <= lim && v->n[2] <= lim;
  p->want_tex[i] = fits && (p->opt.voxels == XT_CUDA_VOX_TEXTURE ||
                            (p->opt.voxels == XT_CUDA_VOX_AUTO && nvox * sizeof(float) > min_bytes));
  const size_t need = nvox + 2 * ws_guard(v->n);
  if (need > p->ws_cap) {
    float *w = NULL;
    /* not there (a sparse grid of a huge domain, a full device): this model takes the tree, the
     * others keep the working set they had */
    if (cudaMalloc((void **)&w, need * sizeof(float)) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    XT_CK(cudaMemset(w, 0, need * sizeof(float)));
    XT_CK(cudaFree(p->ws));
    p->ws = w;
    p->ws_cap = need;
    p->ws_model = -1;
  }
  p->ws_ok[i] = 1;
  return 0;
}

/* Slot i into the working set on L's stream (the decode, then the texture copy where the slot has
 * one), unless it holds it already (TR_DENSE_EACH: always). */
static int ws_load(nvdb_kind *p, int i, cudaStream_t stream, xt_msg *msg) {
  if (p->ws_model == i && p->bricks != TR_DENSE_EACH) return 0;
  const dev_grid *d = &p->dg[i];
  p->ws_model = -1;
  float *dst = p->ws + ws_guard(d->n);
  const int nrun = xt_nvdb_decode_nrun(d->lo, d->n);
  const unsigned long long nthreads = (unsigned long long)nrun * d->n[1] * d->n[2];
  void (*k)(const dev_grid, float *, int, unsigned long long) = NULL;
  switch (p->gt[i]) {
  case XT_NVDB_FLOAT: k = k_nvdb_decode<XT_NVDB_FLOAT>; break;
  case XT_NVDB_INT16: k = k_nvdb_decode<XT_NVDB_INT16>; break;
  case XT_NVDB_FP4: k = k_nvdb_decode<XT_NVDB_FP4>; break;
  case XT_NVDB_FP8: k = k_nvdb_decode<XT_NVDB_FP8>; break;
  case XT_NVDB_FP16: k = k_nvdb_decode<XT_NVDB_FP16>; break;
  case XT_NVDB_FPN: k = k_nvdb_decode<XT_NVDB_FPN>; break;
  case XT_NVDB_INDEX: k = k_nvdb_decode<XT_NVDB_INDEX>; break;
  }
  if (!k) return xt_fail(msg, XT_EINTERNAL, "cuda projector: grid type %u", p->gt[i]);
  const size_t nb = (nthreads + XT_CUDA_BLOCK_THREADS - 1) / XT_CUDA_BLOCK_THREADS;
  if (nb > 0x7fffffffu) return xt_fail(msg, XT_ETOOLARGE, "cuda projector: decode of %llu runs", nthreads);
  k<<<(unsigned)nb, XT_CUDA_BLOCK_THREADS, 0, stream>>>(*d, dst, nrun, nthreads);
  XT_CK(cudaGetLastError());
  if (p->want_tex[i]) {
    if (memcmp(p->ws_arr_n, d->n, sizeof p->ws_arr_n) != 0) {
      /* another size: the old array may still be read by queued launches of the last model */
      XT_CK(cudaDeviceSynchronize());
      ws_free_tex(p);
      cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
      XT_CK(cudaMalloc3DArray(&p->ws_arr, &cd, make_cudaExtent((size_t)d->n[0], (size_t)d->n[1], (size_t)d->n[2])));
      XT_CK(xt_cuda_point_texture(p->ws_arr, &p->ws_tex));
      memcpy(p->ws_arr_n, d->n, sizeof p->ws_arr_n);
    }
    cudaMemcpy3DParms cp;
    memset(&cp, 0, sizeof cp);
    cp.srcPtr = make_cudaPitchedPtr(dst, (size_t)d->n[0] * sizeof(float), (size_t)d->n[0], (size_t)d->n[1]);
    cp.dstArray = p->ws_arr;
    cp.extent = make_cudaExtent((size_t)d->n[0], (size_t)d->n[1], (size_t)d->n[2]);
    cp.kind = cudaMemcpyDeviceToDevice;
    XT_CK(cudaMemcpy3DAsync(&cp, stream));
  }
  p->ws_model = i;
  return 0;
}

static int nvdb_add_model(void *st, const xt_model *m, xt_msg *msg) {
  nvdb_kind *p = (nvdb_kind *)st;
  const xt_nvdb *g = xt_model_nvdb(m);
  if (!g || !g->words || (g->labels && !g->materials))
    return xt_fail(msg, XT_EINVAL, "cuda projector: model %s: no NanoVDB grid", m->name);
  if (p->nmodels == XT_CUDA_MAX_MODELS)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: at most %d NanoVDB models", XT_CUDA_MAX_MODELS);
  const int i = p->nmodels;
  dev_grid *d = &p->dg[i];
  memset(d, 0, sizeof *d);
  const size_t bytes = (size_t)((g->bytes + 31) & ~(uint64_t)31);
  if (bytes > (size_t)UINT32_MAX)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: model %s: grid of %zu bytes (the kernels address 4 GiB)", m->name,
                   bytes);
  XT_CK(cudaMalloc(&p->d_words[i], bytes));
  p->nmodels++; /* owned from here: destroy frees it */
  p->models[i] = NULL;
  XT_CK(cudaMemcpy(p->d_words[i], g->words, bytes, cudaMemcpyHostToDevice));
  if (g->labels) {
    XT_CK(cudaMalloc((void **)&p->d_lut[i], 256 * sizeof(float)));
    XT_CK(cudaMemcpy(p->d_lut[i], g->materials->mu, 256 * sizeof(float), cudaMemcpyHostToDevice));
  }
  d->words = (const uint32_t *)p->d_words[i];
  for (int a = 0; a < 3; a++) {
    d->lo[a] = g->lo[a];
    d->n[a] = g->hi[a] - g->lo[a] + 1;
  }
  d->background = g->background;
  d->labels = g->labels;
  d->lut = p->d_lut[i];
  if (p->bricks >= TR_DENSE) {
    int rc = ws_add(p, i, g, m->name, msg);
    if (rc) return rc;
  } else if (p->bricks) { /* flattened on the host, uploaded, the host copy dropped */
    xt_nvdb_bricks_host h;
    int rc = xt_nvdb_bricks_build(g, &h, msg);
    if (rc) return rc;
    const size_t sz[4] = {h.ntable * sizeof(int32_t), (h.nbricks ? h.nbricks : 1) * 512 * sizeof(float),
                          (h.npalette ? h.npalette : 1) * sizeof(float), h.ntable};
    const void *src[4] = {h.table, h.pool, h.palette, h.level};
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < 4 && e == cudaSuccess; k++) {
      e = cudaMalloc(&p->d_bricks[i][k], sz[k]);
      if (e == cudaSuccess) e = cudaMemcpy(p->d_bricks[i][k], src[k], k == 1 ? h.nbricks * 512 * sizeof(float) : sz[k],
                                           cudaMemcpyHostToDevice);
    }
    d->br = h.b;
    d->br.table = (const int32_t *)p->d_bricks[i][0];
    d->br.pool = (const float *)p->d_bricks[i][1];
    d->br.palette = (const float *)p->d_bricks[i][2];
    d->br.level = (const uint8_t *)p->d_bricks[i][3];
    xt_nvdb_bricks_free(&h);
    if (e != cudaSuccess)
      return xt_fail(msg, XT_EDEVICE, "cuda projector: model %s: brick pool upload: %s", m->name, cudaGetErrorString(e));
  }
  p->gt[i] = g->grid_type;
  p->models[i] = m;
  return 0;
}

static int nvdb_nmodels(const void *st) {
  const nvdb_kind *p = (const nvdb_kind *)st;
  int n = 0;
  for (int i = 0; i < p->nmodels; i++) n += p->models[i] != NULL;
  return n;
}

static size_t nvdb_frame_bytes(const void *st) { return sizeof(dev_frame); }

/* The per-frame constants, on the host in double: proj_cpu_nvdb.c's frame map. */
static void nvdb_fill_frame(const void *st, const xt_geometry *g, void *desc) {
  const nvdb_kind *p = (const nvdb_kind *)st;
  dev_frame *f = (dev_frame *)desc;
  memset(f, 0, sizeof *f);
  xt_cuda_camera_fill(g, &f->cam);
  for (int i = 0; i < p->nmodels; i++) {
    xt_affine w2c;
    dev_frame_model *fm = &f->fm[i];
    fm->ok = p->models[i] && xt_nvdb_world_to_cell(p->models[i], &g->pose, &w2c);
    if (!fm->ok) continue;
    memcpy(fm->m, w2c.m, sizeof fm->m);
    const xt_vec3 o = xt_aff_apply(&w2c, g->source);
    fm->o[0] = o.x;
    fm->o[1] = o.y;
    fm->o[2] = o.z;
  }
}

typedef void (*kernel_fn)(const dev_launch);

template <int OUT> static kernel_fn pick(uint32_t gt) {
  switch (gt) {
  case XT_NVDB_FLOAT: return k_nvdb<XT_NVDB_FLOAT, OUT>;
  case XT_NVDB_INT16: return k_nvdb<XT_NVDB_INT16, OUT>;
  case XT_NVDB_FP4: return k_nvdb<XT_NVDB_FP4, OUT>;
  case XT_NVDB_FP8: return k_nvdb<XT_NVDB_FP8, OUT>;
  case XT_NVDB_FP16: return k_nvdb<XT_NVDB_FP16, OUT>;
  case XT_NVDB_FPN: return k_nvdb<XT_NVDB_FPN, OUT>;
  case XT_NVDB_INDEX: return k_nvdb<XT_NVDB_INDEX, OUT>;
  }
  return NULL;
}

template <int OUT> static kernel_fn pick_bricks_out(int tr) {
  switch (tr) {
  case TR_BRICKS: return k_nvdb_bricks<OUT, TR_BRICKS>;
  case TR_BRICKS2: return k_nvdb_bricks<OUT, TR_BRICKS2>;
  case TR_BRICKS3: return k_nvdb_bricks<OUT, TR_BRICKS3>;
  case TR_BRICKS4: return k_nvdb_bricks<OUT, TR_BRICKS4>;
  case TR_BRICKS5: return k_nvdb_bricks<OUT, TR_BRICKS5>;
  case TR_BRICKS6: return k_nvdb_bricks<OUT, TR_BRICKS6>;
  case TR_BRICKS7: return k_nvdb_bricks<OUT, TR_BRICKS7>;
  case TR_BRICKS8: return k_nvdb_bricks<OUT, TR_BRICKS8>;
  }
  return NULL;
}

static kernel_fn pick_bricks(int tr, int count) {
  return count ? pick_bricks_out<OUT_COUNT>(tr) : pick_bricks_out<OUT_MU>(tr);
}

/* Every grid's map onto the set cs (xt_voxel_chan), uploaded: only when the set or the models
 * change, never per frame. */
static int nvdb_set_channels(void *st, const xt_chanset *cs, xt_msg *msg) {
  nvdb_kind *p = (nvdb_kind *)st;
  xt_voxel_chan *ch = (xt_voxel_chan *)malloc(sizeof *ch);
  if (!ch) return xt_fail(msg, XT_ENOMEM, "cuda nvdb: out of memory");
  int rc = 0;
  for (int i = 0; i < p->nmodels && !rc; i++) {
    if (!p->models[i]) continue;
    if ((rc = xt_voxel_chan_build(cs, p->models[i], ch, msg))) break;
    static_assert(sizeof ch->w == 256 * XT_MAX_CHANNELS * sizeof(float), "label rows");
    if (!ch->labels) { /* rows 0..2: the classes' weights per optical depth */
      memset(ch->w, 0, sizeof ch->w);
      memcpy(ch->w, ch->cw, sizeof ch->cw);
    }
    cudaError_t e = cudaSuccess;
    if (!p->d_chw[i]) e = cudaMalloc((void **)&p->d_chw[i], sizeof ch->w);
    if (e == cudaSuccess) e = cudaMemcpy(p->d_chw[i], ch->w, sizeof ch->w, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      rc = xt_fail(msg, XT_EDEVICE, "cuda nvdb: channel table: %s", cudaGetErrorString(e));
      break;
    }
    p->dg[i].chw = (const float4 *)p->d_chw[i];
    p->dg[i].thr[0] = ch->thr[0];
    p->dg[i].thr[1] = ch->thr[1];
    if (p->bricks >= TR_DENSE && !ch->labels) { /* the working set's channel launches (mu grids) */
      xt_cuda_dense_view *v = &p->view[i];
      float t[XT_CUDA_VIEW_CHW_ROWS][XT_MAX_CHANNELS];
      memcpy(t, ch->cw, sizeof ch->cw);
      const int k = xt_voxel_chan_class(ch, v->mu_bg); /* as the march classes it */
      for (int c = 0; c < XT_MAX_CHANNELS; c++) t[3][c] = v->mu_bg * ch->cw[k][c];
      if (!p->d_vchw[i]) e = cudaMalloc((void **)&p->d_vchw[i], sizeof t);
      if (e == cudaSuccess) e = cudaMemcpy(p->d_vchw[i], t, sizeof t, cudaMemcpyHostToDevice);
      if (e != cudaSuccess) {
        rc = xt_fail(msg, XT_EDEVICE, "cuda nvdb: channel table: %s", cudaGetErrorString(e));
        break;
      }
      v->chw = p->d_vchw[i];
      v->thr[0] = ch->thr[0];
      v->thr[1] = ch->thr[1];
    }
  }
  if (!rc) p->chan_models = p->nmodels;
  free(ch);
  return rc;
}

static int nvdb_render(void *st, const xt_cuda_launch *L, xt_msg *msg) {
  nvdb_kind *p = (nvdb_kind *)st;
  if (L->nch && p->chan_models != p->nmodels)
    return xt_fail(msg, XT_EINTERNAL, "cuda nvdb: channels launch without channel maps");
  int first = 1;
  for (int i = 0; i < p->nmodels; i++) {
    if (!p->models[i]) continue;
    if (p->bricks >= TR_DENSE && p->ws_ok[i] && (!L->nch || p->view[i].chw)) { /* label grids' channels: the tree */
      int rc = ws_load(p, i, L->stream, msg);
      if (rc) return rc;
      xt_cuda_dense_view v = p->view[i];
      v.f32 = p->ws + ws_guard(v.n);
      v.tex = p->want_tex[i] ? p->ws_tex : 0;
      xt_cuda_launch l = *L;
      l.accumulate = L->accumulate || !first;
      /* the map only where the view picks its storage by it (both copies under AUTO), as the voxel
       * kind's pick_vox: host work inside every launch, and the frame is timed from before it */
      xt_affine w2c;
      const int ok = v.tex && p->opt.voxels == XT_CUDA_VOX_AUTO && xt_nvdb_world_to_cell(p->models[i], &L->g[0].pose, &w2c);
      if ((rc = xt_cuda_voxel_render_view(&v, &p->opt, ok ? &w2c : NULL, &l, msg))) return rc;
      if (p->debug_sync) XT_CK(cudaStreamSynchronize(L->stream));
      first = 0;
      continue;
    }
    kernel_fn k = L->nch ? pick<OUT_CH>(p->gt[i]) : (L->count ? pick<OUT_COUNT>(p->gt[i]) : pick<OUT_MU>(p->gt[i]));
    if (p->bricks && !L->nch) k = pick_bricks(p->bricks, L->count);
    if (!k) return xt_fail(msg, XT_EINTERNAL, "cuda projector: grid type %u", p->gt[i]);
    dev_launch dl;
    memset(&dl, 0, sizeof dl);
    dl.grid = p->dg[i];
    dl.model = i;
    dl.cols = L->cols;
    dl.rows = L->rows;
    dl.accumulate = L->accumulate || !first;
    dl.nch = L->nch;
    dl.desc = (const unsigned char *)L->d_desc;
    dl.out = L->d_out;
    dim3 grid((unsigned)((L->cols + XT_CUDA_TILE_W - 1) / XT_CUDA_TILE_W),
              (unsigned)((L->rows + XT_CUDA_TILE_H - 1) / XT_CUDA_TILE_H), (unsigned)L->nf);
    k<<<grid, XT_CUDA_BLOCK_THREADS, 0, L->stream>>>(dl);
    XT_CK(cudaGetLastError());
    if (p->debug_sync) XT_CK(cudaStreamSynchronize(L->stream));
    first = 0;
  }
  return 0;
}

const xt_cuda_kind_ops xt_cuda_kind_nvdb = {
    "nvdb",           nvdb_accepts,    nvdb_create, nvdb_add_model, nvdb_nmodels,
    nvdb_frame_bytes, nvdb_fill_frame, NULL,        nvdb_render,    nvdb_destroy,
    nvdb_set_channels, NULL, NULL, NULL, NULL,
};
