/* The voxel kind of the CUDA frame pipeline (xt_cuda_kind.h): exact traversal of dense float mu
 * volumes and uint8 label volumes with a material table, one launch per chunk of frames, volumes
 * resident.
 *
 * Exactness. The CPU reference (proj_cpu.c) is the oracle. Each ray's set-up - pixel position,
 * direction, the world->cell map applied to it, box clipping, the entry voxel and the number of
 * planes crossed per axis - is computed in double with the reference's own formulas, operation
 * for operation, with FMA contraction prevented by the _rn intrinsics, so the GPU picks the same
 * entry voxel and the same voxel count as the reference (on Hopper FP64 runs at half the FP32
 * rate, and the set-up is ~5% of a ray's work). The march itself is FP32, in a ray-local frame:
 * t is measured from the entry point (not from the source, 800 mm away, whose float rounding
 * alone would shift every ray by 5e-5 voxels and move the crossing of a nearly parallel plane
 * by millimetres), and the k-th crossing of axis a is t_a(k) = tn0_a + k * dt_a, one FMA from
 * the entry values, never accumulated. The loop runs exactly the number of plane crossings the
 * reference makes (settled on the reference's own crossing values in ray_setup), so it needs no
 * bounds test; a guard band of one slice around the linear allocation absorbs the one voxel a
 * rounding tie at the exit can step outside.
 *
 * Background is skipped exactly: each model may carry a content hull (a 26-DOP around every voxel
 * that differs from the background value); the part of a ray outside it, inside the box, meets
 * only background voxels and contributes mu_bg times its length (docs/BENCHMARKS.md, v5).
 *
 * Layout: one kernel, k_render, templated on where voxels live (linear memory or a 3D texture
 * array), where the label table lives (shared or constant memory), whether it counts steps (for
 * the benchmark's bound) and whether models carry hulls. docs/gpu-notes.md records what each
 * variant measured. A second kernel, k_channels, walks the same rays with the same set-up and march
 * but accumulates material channels (xt_channels.h): label voxels add their row of a per-model
 * weight table, dense voxels their optical depth into their HU class. Given a spectral table it
 * writes, instead of the planes, the channels' two spectral sums (xt_spectral.h: the imaging
 * chain's polychromatic integral, evaluated while the channels are in registers). */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cuda_kind.h"

extern "C" {
#include "xt_cuda_config.h"
#include "xt_hull.h"
#include "xt_raycast.h"
}

/* ------------------------------------------------------------------------------------------ */
/* Device descriptors                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* A resident model: set at add_model, passed by value in every launch. */
typedef struct dev_model {
  int n[3];
  int labels; /* 1: u8 voxels through table `lut`; 0: f32 mu */
  const float *f32;
  const unsigned char *u8;
  cudaTextureObject_t tex;
  int lut; /* table index, labels only */
  /* The content hull: a 26-DOP (XT_HULL_DIRS slabs in cell space) enclosing every voxel whose
   * value differs from the background value (the value of voxel (0,0,0), when the eight corner
   * voxels share it). Outside it a ray meets background voxels only, whose integral is exactly
   * mu_bg times the length, so the march is clipped to the hull. hull: 0 none, 1 slabs valid,
   * 2 the volume is all background. */
  int hull;
  float mu_bg;
  int mu_bg_label; /* labels: the background label (host side, to look mu_bg up) */
  float hlo[XT_HULL_DIRS], hhi[XT_HULL_DIRS];
  float thr[2]; /* channels, dense: mu bounds of the air | soft | bone classes (xt_voxel_chan) */
  int ch_off;   /* channels: the model's first row in the channel table */
  int ch_nlab;  /* its label rows (the table's count for labels, 0 for dense) */
  int slots;    /* labels: 1 + the largest label present when at most XT_CH_SLOTS (acc_slots), else 0 */
  int ch_parts; /* labels without slots: the first row of its parts table (acc_parts) */
} dev_model;

/* The channel table, all models' rows packed (XT_MAX_CHANNELS floats a row): per model ch_nlab rows
 * of g/cm^2 per mm of each label, 3 rows of g/cm^2 per unit optical depth of the dense classes, and
 * a row of g/cm^2 per mm of the background voxel (the hull's outside). A block copies it into
 * shared memory (a few hundred bytes for the default tables). */
#define XT_CHW_EXTRA 4
/* acc_slots' slots a thread: label volumes whose labels are all below it take the slot march; the
 * others, acc_parts, with a parts table of a float4 per label (two a row) after their rows */
#define XT_CH_SLOTS 16
#define XT_CHW_ROWS (256 + XT_CHW_EXTRA + 128)

/* Per frame and model: the world->cell map's linear part and the source in cell space (double,
 * computed on the host by xt_world_to_cell and xt_aff_apply exactly as the reference does); the
 * per-frame descriptor: the camera and every model's map (xt_cuda_kind.h). */
typedef xt_cuda_model_map dev_frame_model;
typedef xt_cuda_frame dev_frame;

/* Kernel parameters (by value, __grid_constant__). */
typedef struct dev_scene {
  int nmodels, cols, rows;
  int first; /* the first model slot (a view of another kind's: its slot, nmodels = slot + 1) */
  dev_model model[XT_CUDA_MAX_MODELS];
  const dev_frame *frames; /* one per blockIdx.z */
  const float *luts;       /* XT_CUDA_MAX_MODELS * 256, device memory */
  float *out;              /* frames * rows * cols (channels: frames * nch * rows * cols) */
  int accumulate;          /* add to out (another kind wrote it first) */
  int nch;                 /* k_channels: planes per frame */
  const float *chw;        /* k_channels: the packed channel table */
  int chw_rows;            /* its rows */
  /* k_channels with spec_nbins > 0: the channels' spectral sums (xt_spectral.h) instead of the
   * planes, 2 planes per frame (device pointers of the caller's table) */
  int spec_nbins;
  const float *spec_w, *spec_k1, *spec_k2;
  /* spectral, XT_INSTR_FUSED: the instruments' channel sums of the frame (xt_cuda_instr_acc), added
   * where their tile is flagged and zeroed; NULL: none */
  unsigned long long *instr_acc;
  const unsigned char *instr_flag;
  int instr_tcols;
} dev_scene;

/* The spectral table in shared memory: bins padded with zero bins to a multiple of 4 (whole groups
 * in xt_spectral_sum, the same sums bit for bit), transposed (channel c's weights of bins b at
 * [c * padded bins + b], so that one 128-bit load holds a channel's weights of 4 bins), then k1 and
 * k2 interleaved. */
#define XT_SPEC_PAD(nb) (((nb) + 3) & ~3)
/* spec_sum's bins at a time, in groups of 4: 16 exponents live (6 groups, 71 bins in 3 steps, timed
 * the same on an H100 and spill 8 bytes in the linear variant without the hull) */
#define XT_SPEC_CHUNK_GROUPS 4
/* Shared memory of k_channels beyond the channel table: the largest spectral table. */
#define XT_SPEC_SMEM_MAX (sizeof(float) * XT_SPECTRAL_MAX_BINS * (XT_MAX_CHANNELS + 2))

__constant__ float c_lut[XT_CUDA_MAX_MODELS * 256];

/* ------------------------------------------------------------------------------------------ */
/* Ray set-up in double, operation for operation as proj_cpu.c                                */
/* ------------------------------------------------------------------------------------------ */

#define dm xt_dm
#define da xt_da

/* The march's start: everything the FP32 loop needs, relative to the entry point. */
typedef struct ray_start {
  int i[3];        /* entry voxel */
  int step[3];     /* +1 / -1 (0: axis not crossed) */
  float tn0[3];    /* first plane crossing per axis, mm from the entry */
  float dt[3];     /* mm between crossings per axis */
  float nplanes[3];/* planes crossed per axis before the exit */
  float tend;      /* exit, mm from the entry */
  int total;       /* sum of nplanes */
} ray_start;

/* The part [*h0, *h1] of the ray o + s w (world direction w, cell map m) inside the content hull
 * (xt_hull_clip_f32, conservative: see xt_hull.h). Returns 0 when the ray misses the hull.
 * Computed before the FP64 set-up so that its temporaries are dead by then (registers). */
static __device__ __forceinline__ int hull_clip(const dev_model &md, const dev_frame_model *fm, const double w[3],
                                                float *h0, float *h1) {
  const float wf[3] = {(float)w[0], (float)w[1], (float)w[2]};
  float of[3], qf[3];
#pragma unroll
  for (int k = 0; k < 3; k++) {
    of[k] = (float)fm->o[k];
    qf[k] = (float)fm->m[k][0] * wf[0] + (float)fm->m[k][1] * wf[1] + (float)fm->m[k][2] * wf[2];
  }
  return xt_hull_clip_f32(of, qf, md.hlo, md.hhi, h0, h1, 0);
}

/* Clips and prepares the cell-space ray o + s q (s in [0, len]); 0 when nothing is to be marched.
 * With a hull, only [h0, h1] (hull_clip; empty when h0 > h1) is marched and *bg_len is the length
 * (mm) of the ray inside the box but outside it: background. */
static __device__ __forceinline__ int ray_setup(const dev_model &md, const double o[3], const double q[3], double len,
                                                bool hull, float h0, float h1, ray_start *rs, double *bg_len) {
  const int n[3] = {md.n[0], md.n[1], md.n[2]};
  double s0, s1;
  *bg_len = 0.0;
  if (!xt_clip_box_f64(o, q, n, len, &s0, &s1)) return 0;
  if (hull) {
    const double c0 = fmax(s0, (double)h0), c1 = fmin(s1, (double)h1);
    if (!(c1 > c0)) {
      *bg_len = s1 - s0;
      return 0;
    }
    *bg_len = (c0 - s0) + (s1 - c1);
    s0 = c0;
    s1 = c1;
  }
  rs->total = 0;
#pragma unroll
  for (int a = 0; a < 3; a++) {
    double p = da(o[a], dm(s0, q[a]));
    int i = (int)floor(p);
    if (i < 0) i = 0;
    if (i > n[a] - 1) i = n[a] - 1;
    rs->i[a] = i;
    double e = da(o[a], dm(s1, q[a]));
    double snext, dt;
    int np;
    if (q[a] > 0) {
      double inv = 1.0 / q[a];
      snext = ((double)(i + 1) - o[a]) * inv;
      dt = inv;
      int last = (int)ceil(e) - 1;
      if (last > n[a] - 1) last = n[a] - 1;
      np = last - i;
      /* The reference crosses plane i+k iff its parameter, computed as below, is < s1. e is only an
       * estimate: for a ray nearly in a plane (q ~ 1e-17 after the world->cell map of a 90 deg
       * pose) one ulp of e is hundreds of mm of s, so settle the count on the reference's values.
       * The estimate is off by at most one plane (e is within rounding of the true exit). */
      if (np > 0 && dm(da((double)(i + np), -o[a]), inv) >= s1) np--;
      else if (i + np < n[a] - 1 && dm(da((double)(i + np + 1), -o[a]), inv) < s1) np++;
      rs->step[a] = 1;
    } else if (q[a] < 0) {
      double inv = 1.0 / q[a];
      snext = ((double)i - o[a]) * inv;
      dt = -inv;
      int last = (int)floor(e);
      if (last < 0) last = 0;
      np = i - last;
      if (np > 0 && dm(da((double)(i - np + 1), -o[a]), inv) >= s1) np--;
      else if (i - np > 0 && dm(da((double)(i - np), -o[a]), inv) < s1) np++;
      rs->step[a] = -1;
    } else {
      snext = INFINITY;
      dt = 0;
      np = 0;
      rs->step[a] = 0;
    }
    if (np < 0) np = 0;
    rs->nplanes[a] = (float)np;
    rs->total += np;
    /* >= 0: for q < 0 within rounding of an integer o's plane (q ~ 1e-17, a 90 deg pose), o + s0 q
     * can round onto the plane, so the entry cell is the one above it and its "next" plane lies at
     * s = 0 < s0; the reference (proj_cpu_voxel.c) adds nothing for that crossing (se > s fails)
     * and goes on from s0 in the cell below, which a 0 here does too; a negative value would add
     * -s0 x mu to the first cell and +s0 x mu to the next (found by the bricks8 tests' grazing rays) */
    rs->tn0[a] = np > 0 ? (float)fmax(snext - s0, 0.0) : INFINITY;
    rs->dt[a] = (float)dt;
  }
  rs->tend = (float)(s1 - s0);
  return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The FP32 march                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Voxel access: linear memory (a running linear index) or a texture (running cell coordinates). */
template <int LUT> static __device__ __forceinline__ float lut_get(const float *slut, int base, unsigned lab) {
  if (LUT == XT_CUDA_LUT_CONST) return c_lut[base + lab];
  return slut[base + lab];
}

template <int VOX, int LUT, bool LABELS> struct voxels;

template <int LUT, bool LABELS> struct voxels<XT_CUDA_VOX_LINEAR, LUT, LABELS> {
  const float *f32;
  const unsigned char *u8;
  const float *slut;
  int base, lin, sx, sy, sz;
  __device__ __forceinline__ void init(const dev_model &m, const float *sl, const ray_start &r) {
    f32 = m.f32;
    u8 = m.u8;
    slut = sl;
    base = m.lut * 256;
    lin = r.i[0] + m.n[0] * (r.i[1] + m.n[1] * r.i[2]);
    sx = r.step[0];
    sy = r.step[1] * m.n[0];
    sz = r.step[2] * m.n[0] * m.n[1];
  }
  __device__ __forceinline__ float mu() const {
    if (LABELS) return lut_get<LUT>(slut, base, __ldg(u8 + lin));
    return __ldg(f32 + lin);
  }
  /* ld.global.nc.u8 into a 32-bit register zero-extends (PTX ISA); through __ldg's unsigned char the
   * compiler masks every label again (two more instructions a step of the channel march) */
  __device__ __forceinline__ unsigned label() const {
    unsigned r;
    asm("ld.global.nc.u8 %0, [%1];" : "=r"(r) : "l"(u8 + lin));
    return r;
  }
  __device__ __forceinline__ void step(bool bx, bool by) { lin += bx ? sx : (by ? sy : sz); }
};

template <int LUT, bool LABELS> struct voxels<XT_CUDA_VOX_TEXTURE, LUT, LABELS> {
  cudaTextureObject_t tex;
  const float *slut;
  int base;
  float x, y, z, sx, sy, sz;
  __device__ __forceinline__ void init(const dev_model &m, const float *sl, const ray_start &r) {
    tex = m.tex;
    slut = sl;
    base = m.lut * 256;
    x = (float)r.i[0] + 0.5f;
    y = (float)r.i[1] + 0.5f;
    z = (float)r.i[2] + 0.5f;
    sx = (float)r.step[0];
    sy = (float)r.step[1];
    sz = (float)r.step[2];
  }
  __device__ __forceinline__ float mu() const {
    if (LABELS) return lut_get<LUT>(slut, base, tex3D<unsigned char>(tex, x, y, z));
    return tex3D<float>(tex, x, y, z);
  }
  __device__ __forceinline__ unsigned label() const { return tex3D<unsigned char>(tex, x, y, z); }
  __device__ __forceinline__ void step(bool bx, bool by) {
    x += bx ? sx : 0.f;
    y += by ? sy : 0.f;
    z += (!bx && !by) ? sz : 0.f;
  }
};

/* Sum of mu * length over the ray's voxels. Per step: pick the nearest crossing (ties to x, then
 * y, as the reference), add its segment, move one voxel and recompute the crossings of the axes
 * from their plane counts. The trip count is the exact number of planes the reference crosses;
 * the axes are not stopped individually: in exact arithmetic the first `total` crossings are
 * exactly those planes, so float rounding can only swap an axis's first plane beyond the exit
 * with another axis's last plane when both lie within rounding of the exit - a segment of
 * ~1e-5 mm, and a fetch at most one voxel outside the box, which the one-slice guard band of
 * the linear allocation (and the texture's clamp mode) keeps in bounds. Registers only.
 * The accumulator A takes each segment and the voxel it lies in: acc_mono sums mu, the channel
 * accumulators (k_channels) their weights. */
template <class V, class A> static __device__ __forceinline__ void march_acc(V &v, const ray_start &r, A &acc) {
  const float dtx = r.dt[0], dty = r.dt[1], dtz = r.dt[2];
  const float t0x = r.tn0[0], t0y = r.tn0[1], t0z = r.tn0[2];
  float tx = t0x, ty = t0y, tz = t0z;
  float kx = 0.f, ky = 0.f, kz = 0.f, t = 0.f;
  for (int s = 0; s < r.total; s++) {
    const bool bx = (tx <= ty) && (tx <= tz);
    const bool by = !bx && (ty <= tz);
    const float tm = fminf(tx, fminf(ty, tz));
    acc.add(tm - t, v);
    t = tm;
    v.step(bx, by);
    if (bx) kx += 1.f;
    else if (by) ky += 1.f;
    else kz += 1.f;
    tx = fmaf(kx, dtx, t0x);
    ty = fmaf(ky, dty, t0y);
    tz = fmaf(kz, dtz, t0z);
  }
  acc.add(r.tend - t, v);
}

/* The line integral. */
struct acc_mono {
  float total;
  template <class V> __device__ __forceinline__ void add(float seg, const V &v) { total = fmaf(seg, v.mu(), total); }
};

template <class V> static __device__ __forceinline__ float march(V &v, const ray_start &r) {
  acc_mono a = {0.f};
  march_acc(v, r, a);
  return a.total;
}

/* Path length per label, for volumes of few labels (md.slots): each segment adds its length to its
 * label's slot, a shared-memory word of this thread (slot l of thread x at sl[l * blockDim]: a warp's
 * 32 words of one slot are 32 banks), and the slots are weighted by their rows once after the march.
 * A step then costs a load, an add and a store, where adding each segment's row of 8 weights to 8
 * register accumulators cost two 128-bit row loads and eight FMAs (the NanoVDB kind's march still
 * does, xt_cuda_acc8), and no accumulator is live in registers across the march, where registers
 * are short (k_channels at 4 blocks of 256 threads an SM has 64). */
struct acc_slots {
  float *sl;
  template <class V> __device__ __forceinline__ void add(float seg, const V &v) {
    float *const p = sl + v.label() * XT_CUDA_BLOCK_THREADS;
    *p += seg;
  }
};

static_assert(XT_MAX_CHANNELS == 8, "the channel rows are two float4");

/* Volumes with larger labels: a label is at most two basis parts (xt_material_basis), so its
 * parts-table entry (channel c0, weight w0, channel c1, weight w1; a one-part label has w1 = 0)
 * adds to two of the thread's 8 channel slots in shared memory: the same shape as acc_slots, two
 * read-modify-writes a step. */
struct acc_parts {
  float *sl;
  const float4 *parts;
  template <class V> __device__ __forceinline__ void add(float seg, const V &v) {
    const float4 e = parts[v.label()];
    float *const p0 = sl + __float_as_int(e.x) * XT_CUDA_BLOCK_THREADS;
    *p0 = fmaf(seg, e.y, *p0);
    float *const p1 = sl + __float_as_int(e.z) * XT_CUDA_BLOCK_THREADS;
    *p1 = fmaf(seg, e.w, *p1);
  }
};

/* Channels of dense voxels: the optical depth of each HU class (xt_channels.h), weighted after. */
struct acc_dense {
  float t0, t1, c0, c1, c2;
  template <class V> __device__ __forceinline__ void add(float seg, const V &v) {
    const float mu = v.mu(), x = seg * mu;
    c0 += mu < t0 ? x : 0.f;
    c1 += (mu >= t0 && mu < t1) ? x : 0.f;
    c2 += mu >= t1 ? x : 0.f;
  }
};

/* ------------------------------------------------------------------------------------------ */
/* The kernel                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The pixel of this thread: a block is a TILE_W x TILE_H tile, each warp a WARP_W x WARP_H sub-tile. */
static __device__ __forceinline__ void tile_pixel(int *col, int *row) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wx = XT_CUDA_TILE_W / XT_CUDA_WARP_W;
  *col = blockIdx.x * XT_CUDA_TILE_W + (warp % wx) * XT_CUDA_WARP_W + (lane % XT_CUDA_WARP_W);
  *row = blockIdx.y * XT_CUDA_TILE_H + (warp / wx) * XT_CUDA_WARP_H + (lane / XT_CUDA_WARP_W);
}

/* The march's start of pixel (col, row) through one model: the world ray as in proj_cpu.c's
 * frame_worker (recomputed per model, a few FP64 operations, so that no double stays live across a
 * march), clipped to the content hull. Returns ray_setup's hit; *bg_len as ray_setup. */
template <bool HULL>
static __device__ __forceinline__ int model_ray(const dev_model &md, const dev_frame_model *fm, const xt_cuda_camera &cam,
                                                int col, int row, ray_start *rs, double *bg_len) {
  double w[3];
  const double len = xt_cuda_pixel_ray(cam, col, row, w);
  /* [h0, h1]: the part of the ray to march; empty (h0 > h1) when it misses the content hull. */
  float h0 = 0.f, h1 = (float)len;
  if (HULL && md.hull && (md.hull == 2 || !hull_clip(md, fm, w, &h0, &h1))) {
    h0 = INFINITY;
    h1 = -INFINITY;
  }
  double q[3], o[3];
#pragma unroll
  for (int k = 0; k < 3; k++) {
    q[k] = da(da(dm(fm->m[k][0], w[0]), dm(fm->m[k][1], w[1])), dm(fm->m[k][2], w[2]));
    o[k] = fm->o[k];
  }
  return ray_setup(md, o, q, len, HULL && md.hull, h0, h1, rs, bg_len);
}

/* Thread mapping: one thread per detector pixel; a block is a TILE_W x TILE_H tile, each warp an
 * WARP_W x WARP_H sub-tile; blockIdx.z is the frame. In: sc.frames[z] (pose), the resident
 * models and tables. Out: sc.out[z][row][col], every pixel written (0 where no model is hit) or,
 * with sc.accumulate, added to.
 * COUNT writes the number of voxels visited instead of the line integral. */
template <int VOX, int LUT, bool COUNT, bool HULL>
__global__ void __launch_bounds__(XT_CUDA_BLOCK_THREADS, XT_CUDA_MIN_BLOCKS)
    k_render(const __grid_constant__ dev_scene sc) {
  __shared__ float s_lut[LUT == XT_CUDA_LUT_SHARED ? XT_CUDA_MAX_MODELS * 256 : 1];
  if (LUT == XT_CUDA_LUT_SHARED) {
    const int nl = sc.nmodels * 256;
    for (int i = threadIdx.x; i < nl; i += blockDim.x) s_lut[i] = sc.luts[i];
    __syncthreads();
  }
  int col, row;
  tile_pixel(&col, &row);
  if (col >= sc.cols || row >= sc.rows) return;
  const dev_frame *f = sc.frames + blockIdx.z;

  float total = 0.f;
  for (int mi = sc.first; mi < sc.nmodels; mi++) {
    if (!f->fm[mi].ok) continue;
    const dev_model &md = sc.model[mi];
    ray_start rs;
    double bg_len;
    const int hit = model_ray<HULL>(md, &f->fm[mi], f->cam, col, row, &rs, &bg_len);
    if (!COUNT) total = fmaf((float)bg_len, md.mu_bg, total);
    if (!hit) continue;
    if (COUNT) {
      total += (float)(rs.total + 1);
    } else if (md.labels) {
      voxels<VOX, LUT, true> v;
      v.init(md, s_lut, rs);
      total += march(v, rs);
    } else {
      voxels<VOX, LUT, false> v;
      v.init(md, s_lut, rs);
      total += march(v, rs);
    }
  }
  float *const o = sc.out + ((size_t)blockIdx.z * sc.rows * sc.cols + (size_t)row * sc.cols + col);
  *o = sc.accumulate ? *o + total : total;
}

/* Bins 4 b0 ... 4 (b0 + G) - 1 of spec_sum: the exponents of G groups of 4 bins, a channel at a
 * time for the channels in act (a 128-bit load of its weights for 4 bins, 4 FMAs), then the bins'
 * terms added to s and q in order. wt: the transposed weights (nbp4 = padded bins / 4 float4s a
 * channel); k: k1 k2 interleaved, 2 float4s a group. */
template <int G>
static __device__ __forceinline__ void spec_groups(const float4 *wt, const float4 *k, int nbp4, int b0, const float *a,
                                                   unsigned act, float &s, float &q) {
  float m[4 * G];
#pragma unroll
  for (int j = 0; j < 4 * G; j++) m[j] = 0.f;
#pragma unroll
  for (int c = 0; c < XT_MAX_CHANNELS; c++)
    if (act & (1u << c)) { /* the same for the whole warp: a branch, not a divergence */
#pragma unroll
      for (int g = 0; g < G; g++) {
        const float4 w = wt[c * nbp4 + b0 + g];
        m[4 * g] = fmaf(w.x, a[c], m[4 * g]);
        m[4 * g + 1] = fmaf(w.y, a[c], m[4 * g + 1]);
        m[4 * g + 2] = fmaf(w.z, a[c], m[4 * g + 2]);
        m[4 * g + 3] = fmaf(w.w, a[c], m[4 * g + 3]);
      }
    }
#pragma unroll
  for (int g = 0; g < G; g++) {
    const float4 k0 = k[2 * (b0 + g)], k1 = k[2 * (b0 + g) + 1];
    const float t0 = xt_exp2(-m[4 * g]), t1 = xt_exp2(-m[4 * g + 1]), t2 = xt_exp2(-m[4 * g + 2]),
                t3 = xt_exp2(-m[4 * g + 3]);
    s = fmaf(k0.x, t0, s);
    q = fmaf(k0.y, t0, q);
    s = fmaf(k0.z, t1, s);
    q = fmaf(k0.w, t1, q);
    s = fmaf(k1.x, t2, s);
    q = fmaf(k1.y, t2, q);
    s = fmaf(k1.z, t3, s);
    q = fmaf(k1.w, t3, q);
  }
}

/* xt_spectral_sum of the pixel's channels a over the shared table (XT_SPEC_PAD), the same sums bit
 * for bit, with the channels that no lane of the warp crosses left out: a bin's exponent is the same
 * chain of FMAs over the channels in order, where a channel of value 0 would add +0 and leave it as
 * it is (the exponents start at +0 and the terms are never negative, so no -0 arises), and S and Q
 * still add bin after bin. The epilogue is bound by issue slots (an FMA, a shared load, a branch
 * each; the 2^x on their own pipe), and the thin materials of a head (iodine, metal, blood) are
 * absent from most warps' rays: each channel left out saves a load and 4 FMAs of every 4 bins. A
 * warp's lanes that diverged still each take their own channels: a smaller act only leaves out
 * fewer. */
static __device__ __forceinline__ void spec_sum(const float4 *wt, const float4 *k, int nbp, const float *a, float *S,
                                                float *Q) {
  unsigned act = 0;
#pragma unroll
  for (int c = 0; c < XT_MAX_CHANNELS; c++) act |= (a[c] != 0.f ? 1u : 0u) << c;
  act = __reduce_or_sync(__activemask(), act);
  const int nbp4 = nbp / 4;
  float s = 0.f, q = 0.f;
  int b0 = 0;
#pragma unroll 1
  for (; b0 + XT_SPEC_CHUNK_GROUPS <= nbp4; b0 += XT_SPEC_CHUNK_GROUPS)
    spec_groups<XT_SPEC_CHUNK_GROUPS>(wt, k, nbp4, b0, a, act, s, q);
  if (b0 + 2 <= nbp4) { /* what is left: 2 groups, then 1 */
    spec_groups<2>(wt, k, nbp4, b0, a, act, s, q);
    b0 += 2;
  }
#pragma unroll 1
  for (; b0 < nbp4; b0++) spec_groups<1>(wt, k, nbp4, b0, a, act, s, q);
  *S = s;
  *Q = q;
}

/* Thread mapping as k_render. In: the frames, models and sc.chw (channel tables). Out: sc.nch
 * planes per frame, sc.out[z][c][row][col], written or (sc.accumulate) added to; with
 * sc.spec_nbins > 0 the two spectral sums instead, sc.out[z][0 or 1][row][col], written.
 * Shared memory: the channel table, then (spectral) the bins' weights, transposed, k1 and k2; static,
 * the thread's slots (acc_slots; PARTS, a scene with a label volume of labels beyond them: acc_parts for
 * every label volume, at 3 blocks an SM, which its registers need). */
template <int VOX, bool HULL, bool PARTS>
__global__ void __launch_bounds__(XT_CUDA_BLOCK_THREADS, VOX == XT_CUDA_VOX_LINEAR && !PARTS ? XT_CUDA_CH_MIN_BLOCKS_LINEAR
                                                                                           : XT_CUDA_CH_MIN_BLOCKS_TEXTURE)
    k_channels(const __grid_constant__ dev_scene sc) {
  extern __shared__ float4 s_chw[];
  __shared__ float s_slot[XT_CH_SLOTS * XT_CUDA_BLOCK_THREADS]; /* acc_slots */
  for (int i = threadIdx.x; i < 2 * sc.chw_rows; i += blockDim.x) s_chw[i] = __ldg((const float4 *)sc.chw + i);
  if (sc.spec_nbins) { /* the spectral table after the channel table (addresses recomputed after the march:
                          nothing of this stays live in registers across it) */
    const int nb = sc.spec_nbins, nbp = XT_SPEC_PAD(nb);
    float *const s_wt = (float *)(s_chw + 2 * sc.chw_rows);
    float2 *const s_k = (float2 *)(s_wt + XT_MAX_CHANNELS * nbp);
    for (int i = threadIdx.x; i < XT_MAX_CHANNELS * nbp; i += blockDim.x) {
      const int c = i / nbp, b = i - c * nbp;
      s_wt[i] = b < nb ? __ldg(sc.spec_w + b * XT_MAX_CHANNELS + c) : 0.f;
    }
    for (int i = threadIdx.x; i < nbp; i += blockDim.x)
      s_k[i] = i < nb ? make_float2(__ldg(sc.spec_k1 + i), __ldg(sc.spec_k2 + i)) : make_float2(0.f, 0.f);
  }
  __syncthreads();
  int col, row;
  tile_pixel(&col, &row);
  if (col >= sc.cols || row >= sc.rows) return;
  const dev_frame *f = sc.frames + blockIdx.z;
  float a[XT_MAX_CHANNELS];
#pragma unroll
  for (int c = 0; c < XT_MAX_CHANNELS; c++) a[c] = 0.f;
  for (int mi = sc.first; mi < sc.nmodels; mi++) {
    if (!f->fm[mi].ok) continue;
    const dev_model &md = sc.model[mi];
    const float *tab = (const float *)(s_chw + 2 * md.ch_off);
    const float *cw = tab + md.ch_nlab * XT_MAX_CHANNELS, *bgw = cw + 3 * XT_MAX_CHANNELS;
    ray_start rs;
    double bg_len;
    const int hit = model_ray<HULL>(md, &f->fm[mi], f->cam, col, row, &rs, &bg_len);
    const float bg = (float)bg_len;
    if (hit && md.labels && !PARTS) {
      voxels<VOX, XT_CUDA_LUT_SHARED, true> v;
      v.init(md, NULL, rs);
      float *const sl = s_slot + threadIdx.x;
#pragma unroll 1
      for (int l = 0; l < md.slots; l++) sl[l * XT_CUDA_BLOCK_THREADS] = 0.f;
      acc_slots as = {sl};
      march_acc(v, rs, as);
#pragma unroll 1
      for (int l = 0; l < md.slots; l++) {
        const float4 *const w = (const float4 *)tab + 2 * l;
        xt_cuda_acc8(a, sl[l * XT_CUDA_BLOCK_THREADS], w[0], w[1]);
      }
    } else if (hit && md.labels) { /* PARTS */
      voxels<VOX, XT_CUDA_LUT_SHARED, true> v;
      v.init(md, NULL, rs);
      float *const sl = s_slot + threadIdx.x;
#pragma unroll
      for (int c = 0; c < XT_MAX_CHANNELS; c++) sl[c * XT_CUDA_BLOCK_THREADS] = 0.f;
      acc_parts ap = {sl, s_chw + 2 * md.ch_parts};
      march_acc(v, rs, ap);
#pragma unroll
      for (int c = 0; c < XT_MAX_CHANNELS; c++) a[c] += sl[c * XT_CUDA_BLOCK_THREADS];
    } else if (hit) {
      voxels<VOX, XT_CUDA_LUT_SHARED, false> v;
      v.init(md, NULL, rs);
      acc_dense ad = {md.thr[0], md.thr[1], 0.f, 0.f, 0.f};
      march_acc(v, rs, ad);
#pragma unroll
      for (int c = 0; c < XT_MAX_CHANNELS; c++)
        a[c] += ad.c0 * cw[c] + ad.c1 * cw[XT_MAX_CHANNELS + c] + ad.c2 * cw[2 * XT_MAX_CHANNELS + c];
    }
    /* the background outside the hull after the march: the accumulators are not live across a
     * scene's first march (fewer registers: the march is where they are short) */
#pragma unroll
    for (int c = 0; c < XT_MAX_CHANNELS; c++) a[c] = fmaf(bg, bgw[c], a[c]);
  }
  const size_t plane = (size_t)sc.rows * sc.cols;
  if (sc.spec_nbins) {
    if (sc.instr_acc &&
        sc.instr_flag[(row / XT_CUDA_INSTR_TILE) * sc.instr_tcols + col / XT_CUDA_INSTR_TILE]) {
      /* the instruments' sums, converted and added as proj_instr.cu's k_instr_finish adds them to
       * the planes this kernel would have written (a float add of the same two floats: the unfused
       * path's planes bit for bit), and zeroed for the next frame: this kernel visits every pixel
       * of the frame, hit or not, and the splat touches no other */
      unsigned long long *const ia = sc.instr_acc + ((size_t)row * sc.cols + col) * sc.nch; /* its planes together */
#pragma unroll
      for (int c = 0; c < XT_MAX_CHANNELS; c++)
        if (c < sc.nch) {
          a[c] = a[c] + (float)((double)(long long)ia[c] * (1.0 / 4294967296.0));
          ia[c] = 0ull;
        }
    }
    const int nbp = XT_SPEC_PAD(sc.spec_nbins);
    const float4 *const s_wt = s_chw + 2 * sc.chw_rows;
    float s, q;
    spec_sum(s_wt, s_wt + XT_MAX_CHANNELS * nbp / 4, nbp, a, &s, &q);
    float *const o = sc.out + (size_t)blockIdx.z * 2 * plane + (size_t)row * sc.cols + col;
    o[0] = s;
    o[plane] = q;
    return;
  }
  float *const o = sc.out + (size_t)blockIdx.z * sc.nch * plane + (size_t)row * sc.cols + col;
#pragma unroll
  for (int c = 0; c < XT_MAX_CHANNELS; c++)
    if (c < sc.nch) o[c * plane] = sc.accumulate ? o[c * plane] + a[c] : a[c];
}


/* ------------------------------------------------------------------------------------------ */
/* Host side: the kind                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct voxel_kind {
  xt_cuda_options opt;
  int nmodels;
  const xt_model *models[XT_CUDA_MAX_MODELS];
  dev_model dm[XT_CUDA_MAX_MODELS];
  void *d_vox[XT_CUDA_MAX_MODELS];
  cudaArray_t arr[XT_CUDA_MAX_MODELS];
  float h_luts[XT_CUDA_MAX_MODELS * 256];
  float *d_luts;
  int nluts;
  int debug_sync;
  /* channels: the packed table (XT_CHW_ROWS above) for the set of the last set_channels */
  float *d_chw;
  int chw_rows;
  int label_rows[XT_CUDA_MAX_MODELS]; /* labels: rows its table needs, 1 + the largest label present */
  int chan_models; /* models the table covers */
  /* contrast (issue 26): the packed table as uploaded (host copy, made once), each label volume's
   * iodine (made at its first set_iodine), the iodine channel of the last set_channels */
  float *h_chw;
  xt_iodine_tab *io[XT_CUDA_MAX_MODELS];
  int chw_iodine;
} voxel_kind;

/* Constant memory holds one projector's tables; claimed and released atomically. */
static voxel_kind *g_const_owner;

static int claim_const(voxel_kind *p) {
  voxel_kind *none = NULL;
  return __atomic_compare_exchange_n(&g_const_owner, &none, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void voxel_destroy(void *st) {
  voxel_kind *p = (voxel_kind *)st;
  if (!p) return;
  for (int i = 0; i < p->nmodels; i++) {
    if (p->dm[i].tex) cudaDestroyTextureObject(p->dm[i].tex);
    if (p->arr[i]) cudaFreeArray(p->arr[i]);
    cudaFree(p->d_vox[i]);
  }
  cudaFree(p->d_luts);
  cudaFree(p->d_chw);
  free(p->h_chw);
  for (int i = 0; i < XT_CUDA_MAX_MODELS; i++) free(p->io[i]);
  if (p->opt.lut == XT_CUDA_LUT_CONST) __atomic_store_n(&g_const_owner, (voxel_kind *)NULL, __ATOMIC_RELEASE);
  free(p);
}

static int voxel_create(const xt_cuda_options *opt, void **st, xt_msg *msg) {
  if (opt->voxels != XT_CUDA_VOX_LINEAR && opt->voxels != XT_CUDA_VOX_TEXTURE && opt->voxels != XT_CUDA_VOX_AUTO)
    return xt_fail(msg, XT_EINVAL, "backend cuda: unknown voxel storage %d", opt->voxels);
  if (opt->lut != XT_CUDA_LUT_SHARED && opt->lut != XT_CUDA_LUT_CONST && opt->lut != XT_CUDA_LUT_AUTO)
    return xt_fail(msg, XT_EINVAL, "backend cuda: unknown table placement %d", opt->lut);
  voxel_kind *p = (voxel_kind *)calloc(1, sizeof *p);
  if (!p) return xt_fail(msg, XT_ENOMEM, "backend cuda: out of memory");
  p->opt = *opt;
  if (opt->lut != XT_CUDA_LUT_SHARED) {
    if (claim_const(p)) {
      p->opt.lut = XT_CUDA_LUT_CONST;
    } else if (opt->lut == XT_CUDA_LUT_CONST) {
      free(p);
      return xt_fail(msg, XT_EBUSY, "backend cuda: constant-memory tables are held by another projector");
    } else {
      p->opt.lut = XT_CUDA_LUT_SHARED;
    }
  }
  const char *dbg = getenv("XT_CUDA_SYNC");
  p->debug_sync = dbg && *dbg && strcmp(dbg, "0") != 0;
  const size_t chw_bytes = sizeof(float) * XT_CUDA_MAX_MODELS * XT_CHW_ROWS * XT_MAX_CHANNELS;
  cudaError_t e = cudaMalloc((void **)&p->d_luts, sizeof p->h_luts);
  if (e == cudaSuccess) e = cudaMemset(p->d_luts, 0, sizeof p->h_luts);
  if (e == cudaSuccess) e = cudaMalloc((void **)&p->d_chw, chw_bytes);
  if (e == cudaSuccess) e = cudaMemset(p->d_chw, 0, chw_bytes);
  if (e != cudaSuccess) {
    voxel_destroy(p);
    return xt_fail(msg, XT_EDEVICE, "backend cuda: label tables on device %d: %s", opt->device, cudaGetErrorString(e));
  }
  *st = p;
  return 0;
}

/* The content hull of a volume (see dev_model, xt_hull.h): the background is voxel (0,0,0)'s value
 * when the eight corner voxels share it (else no hull). For each row (y, z) only its first and last
 * non-background voxels matter: n.x over a row is extreme at one of its ends, so the row's cells
 * between them are added as one. One pass over the voxels at add_model. */
static void build_hull(const xt_volume *v, int labels, dev_model *d) {
  const int nx = v->dim[0], ny = v->dim[1], nz = v->dim[2];
  const unsigned char *u8 = (const unsigned char *)v->data;
  const uint32_t *u32 = (const uint32_t *)v->data;
#define XT_VAL(i) (labels ? (uint32_t)u8[i] : u32[i])
  const size_t corner[8] = {0,
                            (size_t)nx - 1,
                            (size_t)nx * (ny - 1),
                            (size_t)nx * ny - 1,
                            (size_t)nx * ny * (nz - 1),
                            (size_t)nx * ny * (nz - 1) + nx - 1,
                            (size_t)nx * ny * nz - nx,
                            (size_t)nx * ny * nz - 1};
  const uint32_t bg = XT_VAL(0);
  d->hull = 0;
  for (int c = 1; c < 8; c++)
    if (XT_VAL(corner[c]) != bg) return;
  xt_hull_acc h;
  xt_hull_begin(&h);
  for (int z = 0; z < nz; z++)
    for (int y = 0; y < ny; y++) {
      const size_t row = (size_t)nx * (y + (size_t)ny * z);
      int x0 = 0, x1 = nx - 1;
      while (x0 < nx && XT_VAL(row + x0) == bg) x0++;
      if (x0 == nx) continue;
      while (XT_VAL(row + x1) == bg) x1--;
      xt_hull_add_cells(&h, x0, x1, y, y, z, z);
    }
#undef XT_VAL
  if (labels) d->mu_bg_label = (int)bg;
  else memcpy(&d->mu_bg, &bg, sizeof d->mu_bg);
  d->hull = xt_hull_end(&h, d->hlo, d->hhi) ? 1 : 2;
}

/* The linear copy, with a guard band of one slice + one voxel on each side (see march()). */
static int upload_linear(voxel_kind *p, int i, const xt_volume *v, int labels, xt_msg *msg) {
  const size_t elem = labels ? 1 : sizeof(float), nvox = xt_volume_voxels(v);
  const size_t guard = (size_t)v->dim[0] * v->dim[1] + 1;
  dev_model *d = &p->dm[i];
  XT_CK(cudaMalloc(&p->d_vox[i], (nvox + 2 * guard) * elem));
  XT_CK(cudaMemset(p->d_vox[i], 0, (nvox + 2 * guard) * elem));
  XT_CK(cudaMemcpy((char *)p->d_vox[i] + guard * elem, v->data, nvox * elem, cudaMemcpyHostToDevice));
  if (labels) d->u8 = (const unsigned char *)p->d_vox[i] + guard;
  else d->f32 = (const float *)p->d_vox[i] + guard;
  return 0;
}

/* The texture copy: a 3D cudaArray (block-linear layout), point sampling, clamped. */
static int upload_texture(voxel_kind *p, int i, const xt_volume *v, int labels, const char *name, xt_msg *msg) {
  const size_t elem = labels ? 1 : sizeof(float);
  dev_model *d = &p->dm[i];
  int lim = 0;
  XT_CK(cudaDeviceGetAttribute(&lim, cudaDevAttrMaxTexture3DWidth, p->opt.device));
  if (v->dim[0] > lim || v->dim[1] > lim || v->dim[2] > lim)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: model %s: dims exceed the 3D texture limit %d", name, lim);
  cudaChannelFormatDesc cd = labels ? cudaCreateChannelDesc<unsigned char>() : cudaCreateChannelDesc<float>();
  cudaExtent ext = make_cudaExtent((size_t)v->dim[0], (size_t)v->dim[1], (size_t)v->dim[2]);
  XT_CK(cudaMalloc3DArray(&p->arr[i], &cd, ext));
  cudaMemcpy3DParms cp;
  memset(&cp, 0, sizeof cp);
  cp.srcPtr = make_cudaPitchedPtr(v->data, (size_t)v->dim[0] * elem, (size_t)v->dim[0], (size_t)v->dim[1]);
  cp.dstArray = p->arr[i];
  cp.extent = ext;
  cp.kind = cudaMemcpyHostToDevice;
  XT_CK(cudaMemcpy3D(&cp));
  XT_CK(xt_cuda_point_texture(p->arr[i], &d->tex));
  return 0;
}

cudaError_t xt_cuda_point_texture(cudaArray_t arr, cudaTextureObject_t *tex) {
  cudaResourceDesc rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaTextureDesc td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = 0;
  return cudaCreateTextureObject(tex, &rd, &td, NULL);
}


static int voxel_accepts(const xt_model *m) { return m->kind == XT_MODEL_DENSE || m->kind == XT_MODEL_LABELS; }

static int voxel_add_model(void *st, const xt_model *m, xt_msg *msg) {
  voxel_kind *p = (voxel_kind *)st;
  const xt_volume *v = xt_model_volume(m);
  const int labels = m->kind == XT_MODEL_LABELS;
  if (!v || !v->data || (labels && (!v->materials || v->type != XT_VOXEL_U8)) || (!labels && v->type != XT_VOXEL_F32))
    return xt_fail(msg, XT_EINVAL, "cuda projector: model %s: no voxel data of its kind", m->name);
  if (p->nmodels == XT_CUDA_MAX_MODELS)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: at most %d voxel models", XT_CUDA_MAX_MODELS);
  size_t nvox = xt_volume_voxels(v);
  if (nvox >= ((size_t)1 << 31))
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: model %s: %zu voxels (limit 2^31)", m->name, nvox);
  const int i = p->nmodels;
  dev_model *d = &p->dm[i];
  memset(d, 0, sizeof *d);
  for (int a = 0; a < 3; a++) d->n[a] = v->dim[a];
  d->labels = labels;
  const size_t elem = labels ? 1 : sizeof(float);
  /* AUTO keeps the linear copy always and adds the texture copy for volumes too large for L2,
   * where the block-linear layout wins at views whose detector rows do not run along the volume's
   * x rows (docs/BENCHMARKS.md); pick_vox chooses per launch. */
  const int vox = p->opt.voxels;
  int want_tex = vox == XT_CUDA_VOX_TEXTURE;
  if (vox == XT_CUDA_VOX_AUTO) {
    int l2 = 0, lim = 0;
    XT_CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, p->opt.device));
    XT_CK(cudaDeviceGetAttribute(&lim, cudaDevAttrMaxTexture3DWidth, p->opt.device));
    const size_t min_bytes = p->opt.dual_min_bytes >= 0 ? (size_t)p->opt.dual_min_bytes : (size_t)l2;
    want_tex = nvox * elem > min_bytes && v->dim[0] <= lim && v->dim[1] <= lim && v->dim[2] <= lim;
  }
  if (vox != XT_CUDA_VOX_TEXTURE) {
    int rc = upload_linear(p, i, v, labels, msg);
    if (rc) return rc;
  }
  if (want_tex) {
    int rc = upload_texture(p, i, v, labels, m->name, msg);
    if (rc) return rc;
  }
  if (p->opt.hull) build_hull(v, labels, d);
  if (labels) { /* the channel table packs only the labels present (one pass, at add_model) */
    const unsigned char *u = (const unsigned char *)v->data;
    int mx = 0;
    for (size_t k = 0; k < nvox; k++) mx = u[k] > mx ? u[k] : mx;
    p->label_rows[i] = mx + 1;
  }
  if (labels) {
    d->mu_bg = v->materials->mu[d->mu_bg_label];
    d->lut = p->nluts++;
    memcpy(&p->h_luts[d->lut * 256], v->materials->mu, 256 * sizeof(float));
    XT_CK(cudaMemcpy(p->d_luts, p->h_luts, sizeof p->h_luts, cudaMemcpyHostToDevice));
    if (p->opt.lut == XT_CUDA_LUT_CONST) XT_CK(cudaMemcpyToSymbol(c_lut, p->h_luts, sizeof p->h_luts));
  }
  p->models[i] = m;
  p->nmodels++;
  return 0;
}

static int voxel_nmodels(const void *st) { return ((const voxel_kind *)st)->nmodels; }

static size_t voxel_frame_bytes(const void *st) { return sizeof(dev_frame); }

/* The per-frame constants, on the host in double: what proj_cpu_voxel.c's frame map computes. */
static void voxel_fill_frame(const void *st, const xt_geometry *g, void *desc) {
  const voxel_kind *p = (const voxel_kind *)st;
  dev_frame *f = (dev_frame *)desc;
  memset(f, 0, sizeof *f);
  xt_cuda_camera_fill(g, &f->cam);
  for (int i = 0; i < p->nmodels; i++) {
    xt_affine w2c;
    dev_frame_model *fm = &f->fm[i];
    fm->ok = xt_world_to_cell(p->models[i], &g->pose, &w2c);
    if (!fm->ok) continue;
    memcpy(fm->m, w2c.m, sizeof fm->m);
    xt_vec3 o = xt_aff_apply(&w2c, g->source);
    fm->o[0] = o.x;
    fm->o[1] = o.y;
    fm->o[2] = o.z;
  }
}

typedef void (*kernel_fn)(const dev_scene);

/* k_channels<voxel storage, hull, parts march> */
static kernel_fn channels_kernel(int texture, int hull, int parts) {
  static const kernel_fn k[2][2][2] = {
      {{k_channels<XT_CUDA_VOX_LINEAR, false, false>, k_channels<XT_CUDA_VOX_LINEAR, false, true>},
       {k_channels<XT_CUDA_VOX_LINEAR, true, false>, k_channels<XT_CUDA_VOX_LINEAR, true, true>}},
      {{k_channels<XT_CUDA_VOX_TEXTURE, false, false>, k_channels<XT_CUDA_VOX_TEXTURE, false, true>},
       {k_channels<XT_CUDA_VOX_TEXTURE, true, false>, k_channels<XT_CUDA_VOX_TEXTURE, true, true>}}};
  return k[texture != 0][hull != 0][parts != 0];
}

template <bool HULL> static kernel_fn pick_variant(int vox, int lut, int count) {
  if (count)
    return vox == XT_CUDA_VOX_LINEAR ? k_render<XT_CUDA_VOX_LINEAR, XT_CUDA_LUT_SHARED, true, HULL>
                                     : k_render<XT_CUDA_VOX_TEXTURE, XT_CUDA_LUT_SHARED, true, HULL>;
  if (vox == XT_CUDA_VOX_LINEAR)
    return lut == XT_CUDA_LUT_SHARED ? k_render<XT_CUDA_VOX_LINEAR, XT_CUDA_LUT_SHARED, false, HULL>
                                     : k_render<XT_CUDA_VOX_LINEAR, XT_CUDA_LUT_CONST, false, HULL>;
  return lut == XT_CUDA_LUT_SHARED ? k_render<XT_CUDA_VOX_TEXTURE, XT_CUDA_LUT_SHARED, false, HULL>
                                   : k_render<XT_CUDA_VOX_TEXTURE, XT_CUDA_LUT_CONST, false, HULL>;
}

/* The hull kernel only when a model has a hull (it costs a few instructions per ray). */
static kernel_fn pick_kernel(const voxel_kind *p, int vox, int count) {
  int hull = 0;
  for (int i = 0; i < p->nmodels; i++) hull |= p->dm[i].hull != 0;
  return hull ? pick_variant<true>(vox, p->opt.lut, count) : pick_variant<false>(vox, p->opt.lut, count);
}

/* The voxel storage of a launch. AUTO with every model holding both copies: linear when the
 * detector's u direction (a warp's rays are 8 wide along u) runs within ~25 deg of model 0's x
 * rows, so the warp's fetches share cache lines; the block-linear texture otherwise. A batch
 * launch decides by its first frame. */
int xt_cuda_voxel_storage(const xt_affine *w2c, const xt_geometry *g) {
  const xt_vec3 uc = xt_aff_apply_dir(w2c, g->u);
  const double n = xt_v3_norm(uc);
  return n > 0 && fabs(uc.x) / n >= XT_CUDA_LINEAR_MIN_ALIGN ? XT_CUDA_VOX_LINEAR : XT_CUDA_VOX_TEXTURE;
}

static int pick_vox(const voxel_kind *p, const xt_geometry *g) {
  if (p->opt.voxels != XT_CUDA_VOX_AUTO) return p->opt.voxels;
  for (int i = 0; i < p->nmodels; i++)
    if (!p->dm[i].tex || !(p->dm[i].f32 || p->dm[i].u8)) return XT_CUDA_VOX_LINEAR;
  xt_affine w2c;
  if (!p->nmodels || !xt_world_to_cell(p->models[0], &g->pose, &w2c)) return XT_CUDA_VOX_LINEAR;
  return xt_cuda_voxel_storage(&w2c, g);
}

/* The packed channel table of every model onto cs, uploaded once (not per frame). */
static int voxel_set_channels(void *st, const xt_chanset *cs, xt_msg *msg) {
  voxel_kind *p = (voxel_kind *)st;
  const size_t rowsz = XT_MAX_CHANNELS;
  float *h = (float *)calloc((size_t)XT_CUDA_MAX_MODELS * XT_CHW_ROWS * rowsz, sizeof(float));
  xt_voxel_chan *vc = (xt_voxel_chan *)malloc(sizeof *vc);
  int rc = 0, rows = 0;
  if (!h || !vc) rc = xt_fail(msg, XT_ENOMEM, "cuda projector: out of memory");
  const int ci = xt_chanset_find(cs, XT_BASIS_IODINE);
  for (int i = 0; i < p->nmodels && !rc; i++) {
    if ((rc = xt_voxel_chan_build(cs, p->models[i], vc, msg))) break;
    if (p->io[i] && ci >= 0) /* the contrast this volume holds now */
      for (int l = 0; l < 256; l++) vc->w[l][ci] = p->io[i]->col[l];
    dev_model *d = &p->dm[i];
    const int count = d->labels ? xt_model_volume(p->models[i])->materials->count : 0;
    const int nlab = d->labels ? (p->label_rows[i] > count ? p->label_rows[i] : count) : 0;
    float *t = h + rowsz * rows;
    memcpy(t, vc->w, sizeof(float) * rowsz * nlab);
    memcpy(t + rowsz * nlab, vc->cw, sizeof vc->cw);
    d->thr[0] = vc->thr[0];
    d->thr[1] = vc->thr[1];
    d->ch_off = rows;
    d->ch_nlab = nlab;
    d->slots = d->labels && p->label_rows[i] <= XT_CH_SLOTS ? p->label_rows[i] : 0;
    d->ch_parts = rows + nlab + XT_CHW_EXTRA;
    int nparts_rows = 0;
    if (d->labels) { /* acc_parts: each label's (at most two) channels and weights */
      float *e = t + rowsz * (nlab + XT_CHW_EXTRA);
      for (int l = 0; l < nlab && !rc; l++, e += 4) {
        int np = 0;
        e[0] = e[2] = 0.f; /* channel 0 at weight 0: a no-op for missing parts */
        for (size_t c = 0; c < rowsz; c++) {
          if (vc->w[l][c] == 0.f) continue;
          if (np == 2) {
            rc = xt_fail(msg, XT_EINTERNAL, "cuda projector: label %d of model %s feeds more than two channels", l,
                         p->models[i]->name);
            break;
          }
          int ci = (int)c;
          memcpy(&e[2 * np], &ci, sizeof ci);
          e[2 * np + 1] = vc->w[l][c];
          np++;
        }
      }
      nparts_rows = (nlab + 1) / 2;
    }
    /* the background voxel per mm: its label's row, or mu_bg times its class's row */
    const int k = xt_voxel_chan_class(vc, d->mu_bg);
    for (size_t c = 0; c < rowsz; c++)
      t[rowsz * (nlab + 3) + c] = d->labels ? vc->w[d->mu_bg_label][c] : d->mu_bg * vc->cw[k][c];
    rows += nlab + XT_CHW_EXTRA + nparts_rows;
  }
  if (!rc) {
    cudaError_t e = cudaMemcpy(p->d_chw, h, sizeof(float) * rowsz * rows, cudaMemcpyHostToDevice);
    /* dynamic shared memory beyond 48 KB less the static slots needs the kernel's opt-in (the
     * spectral table may follow the channel table) */
    const int bytes = (int)(sizeof(float) * rowsz * rows + XT_SPEC_SMEM_MAX);
    for (int k = 0; k < 8 && e == cudaSuccess; k++)
      e = cudaFuncSetAttribute(channels_kernel(k & 1, k >> 1 & 1, k >> 2), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "cuda projector: channel tables: %s", cudaGetErrorString(e));
  }
  if (!rc) {
    p->chan_models = p->nmodels;
    p->chw_rows = rows;
    p->chw_iodine = ci;
    free(p->h_chw);
    p->h_chw = h; /* kept: set_iodine patches its rows */
    h = NULL;
  }
  free(h);
  free(vc);
  return rc;
}

/* Contrast (issue 26): the volume's mono table and, once the channel table exists, its iodine
 * column, its parts (a label's at most two channels) and its background row, patched in the host
 * copy and uploaded for that model's rows only. Synchronous copies: the caller (xt_acq_expose, before
 * the render) has no frame of this projector in flight. */
static int voxel_set_iodine(void *st, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  voxel_kind *p = (voxel_kind *)st;
  int i = 0;
  while (i < p->nmodels && p->models[i] != m) i++;
  if (i == p->nmodels) return XT_ENOTFOUND;
  dev_model *d = &p->dm[i];
  if (!d->labels) return xt_fail(msg, XT_EUNSUPPORTED, "cuda projector: model %s is no label volume", m->name);
  const size_t rowsz = XT_MAX_CHANNELS;
  const int ci = p->chw_iodine, patch = p->chan_models == p->nmodels && p->h_chw && ci >= 0;
  float *const t = patch ? p->h_chw + rowsz * d->ch_off : NULL;
  for (int l = 0; patch && l < d->ch_nlab; l++) { /* the parts march takes two channels a label: checked first */
    int np = 0;
    for (int c = 0; c < (int)rowsz; c++) np += (c == ci ? io->col[l] : t[rowsz * l + c]) != 0.f;
    if (np > 2)
      return xt_fail(msg, XT_EUNSUPPORTED, "cuda projector: label %d of model %s would feed more than two channels", l,
                     m->name);
  }
  if (!p->io[i] && !(p->io[i] = (xt_iodine_tab *)malloc(sizeof *p->io[i])))
    return xt_fail(msg, XT_ENOMEM, "cuda projector: out of memory");
  *p->io[i] = *io;
  memcpy(&p->h_luts[d->lut * 256], io->mu, 256 * sizeof(float));
  if (d->mu_bg_label >= 0 && d->mu_bg_label < 256) d->mu_bg = io->mu[d->mu_bg_label]; /* outside the hull */
  XT_CK(cudaMemcpy(p->d_luts + d->lut * 256, io->mu, 256 * sizeof(float), cudaMemcpyHostToDevice));
  if (p->opt.lut == XT_CUDA_LUT_CONST)
    XT_CK(cudaMemcpyToSymbol(c_lut, io->mu, 256 * sizeof(float), (size_t)d->lut * 256 * sizeof(float)));
  if (!patch) return 0; /* set_channels applies it */
  const int nlab = d->ch_nlab;
  for (int l = 0; l < nlab; l++) t[rowsz * l + ci] = io->col[l];
  if (d->mu_bg_label < nlab) t[rowsz * (nlab + 3) + ci] = io->col[d->mu_bg_label];
  float *e = t + rowsz * (nlab + XT_CHW_EXTRA);
  for (int l = 0; l < nlab; l++, e += 4) {
    int np = 0;
    e[0] = e[1] = e[2] = e[3] = 0.f;
    for (int c = 0; c < (int)rowsz && np < 2; c++) {
      if (t[rowsz * l + c] == 0.f) continue;
      memcpy(&e[2 * np], &c, sizeof c);
      e[2 * np + 1] = t[rowsz * l + c];
      np++;
    }
  }
  const size_t nrows = (size_t)nlab + XT_CHW_EXTRA + (size_t)(nlab + 1) / 2;
  XT_CK(cudaMemcpy(p->d_chw + rowsz * d->ch_off, t, sizeof(float) * rowsz * nrows, cudaMemcpyHostToDevice));
  return 0;
}

static int voxel_render(void *st, const xt_cuda_launch *L, xt_msg *msg) {
  voxel_kind *p = (voxel_kind *)st;
  if (L->nch && p->chan_models != p->nmodels)
    return xt_fail(msg, XT_EINTERNAL, "cuda projector: channel tables cover %d of %d voxel models", p->chan_models,
                   p->nmodels);
  if (L->spectral && (!L->nch || L->accumulate || L->count))
    return xt_fail(msg, XT_EINTERNAL, "cuda projector: spectral sums of a channels launch of one kind only");
  dev_scene sc;
  memset(&sc, 0, sizeof sc);
  sc.nmodels = p->nmodels;
  sc.cols = L->cols;
  sc.rows = L->rows;
  memcpy(sc.model, p->dm, sizeof sc.model);
  sc.frames = (const dev_frame *)L->d_desc;
  sc.luts = p->d_luts;
  sc.out = L->d_out;
  sc.accumulate = L->accumulate;
  sc.nch = L->nch;
  sc.chw = p->d_chw;
  sc.chw_rows = p->chw_rows;
  if (L->spectral) {
    sc.spec_nbins = L->spectral->nbins;
    sc.spec_w = L->spectral->w;
    sc.spec_k1 = L->spectral->k1;
    sc.spec_k2 = L->spectral->k2;
  }
  if (L->instr) {
    if (!L->spectral || L->nf != 1)
      return xt_fail(msg, XT_EINTERNAL, "cuda projector: instruments fuse into one frame's spectral sums only");
    sc.instr_acc = L->instr->acc;
    sc.instr_flag = L->instr->flag;
    sc.instr_tcols = L->instr->tcols;
  }
  const int vox = pick_vox(p, &L->g[0]);
  dim3 grid((unsigned)((L->cols + XT_CUDA_TILE_W - 1) / XT_CUDA_TILE_W),
            (unsigned)((L->rows + XT_CUDA_TILE_H - 1) / XT_CUDA_TILE_H), (unsigned)L->nf);
  if (L->nch) {
    int hull = 0;
    for (int i = 0; i < p->nmodels; i++) hull |= p->dm[i].hull != 0;
    int parts = 0; /* a label volume with labels beyond the slots: the parts march for the scene */
    for (int i = 0; i < p->nmodels; i++) parts |= p->dm[i].labels && !p->dm[i].slots;
    kernel_fn k = channels_kernel(vox == XT_CUDA_VOX_TEXTURE, hull, parts);
    const size_t smem =
        sizeof(float) * (XT_MAX_CHANNELS * (size_t)p->chw_rows + (XT_MAX_CHANNELS + 2) * (size_t)XT_SPEC_PAD(sc.spec_nbins));
    if (!L->count) k<<<grid, XT_CUDA_BLOCK_THREADS, smem, L->stream>>>(sc);
  } else {
    pick_kernel(p, vox, L->count)<<<grid, XT_CUDA_BLOCK_THREADS, 0, L->stream>>>(sc);
  }
  XT_CK(cudaGetLastError());
  if (p->debug_sync) XT_CK(cudaStreamSynchronize(L->stream));
  return 0;
}

int xt_cuda_voxel_render_view(const xt_cuda_dense_view *v, const xt_cuda_options *opt, const xt_affine *w2c0,
                              const xt_cuda_launch *L, xt_msg *msg) {
  if (L->spectral || L->instr || (L->nch && !v->chw))
    return xt_fail(msg, XT_EINTERNAL, "cuda projector: a dense view marches line integrals or channel planes only");
  if (v->model < 0 || v->model >= XT_CUDA_MAX_MODELS || (!v->f32 && !v->tex))
    return xt_fail(msg, XT_EINTERNAL, "cuda projector: dense view of slot %d without voxels", v->model);
  static_assert(XT_CUDA_VIEW_CHW_ROWS == 3 + 1 && XT_CHW_EXTRA == XT_CUDA_VIEW_CHW_ROWS,
                "a view's table is a dense model's rows: three classes, then the background");
  dev_scene sc;
  memset(&sc, 0, sizeof sc);
  sc.first = v->model; /* the slots before it are not marched: their maps are other models' */
  sc.nmodels = v->model + 1;
  sc.cols = L->cols;
  sc.rows = L->rows;
  dev_model *d = &sc.model[v->model];
  memcpy(d->n, v->n, sizeof d->n);
  d->f32 = v->f32;
  d->tex = v->tex;
  d->hull = v->hull;
  d->mu_bg = v->mu_bg;
  memcpy(d->hlo, v->hlo, sizeof d->hlo);
  memcpy(d->hhi, v->hhi, sizeof d->hhi);
  d->thr[0] = v->thr[0];
  d->thr[1] = v->thr[1];
  sc.frames = (const dev_frame *)L->d_desc;
  sc.out = L->d_out;
  sc.accumulate = L->accumulate;
  sc.nch = L->nch;
  sc.chw = v->chw; /* the model's rows at 0: no label rows (ch_nlab 0), the classes, the background */
  sc.chw_rows = XT_CUDA_VIEW_CHW_ROWS;
  /* as pick_vox for a model of the kind's own with both copies */
  int vox = v->f32 ? XT_CUDA_VOX_LINEAR : XT_CUDA_VOX_TEXTURE;
  if (v->f32 && v->tex) {
    if (opt->voxels == XT_CUDA_VOX_TEXTURE) vox = XT_CUDA_VOX_TEXTURE;
    else if (opt->voxels == XT_CUDA_VOX_AUTO && w2c0) vox = xt_cuda_voxel_storage(w2c0, &L->g[0]);
  }
  dim3 grid((unsigned)((L->cols + XT_CUDA_TILE_W - 1) / XT_CUDA_TILE_W),
            (unsigned)((L->rows + XT_CUDA_TILE_H - 1) / XT_CUDA_TILE_H), (unsigned)L->nf);
  if (L->nch) { /* as voxel_render's planes (a count launch writes nothing there either) */
    if (!L->count)
      channels_kernel(vox == XT_CUDA_VOX_TEXTURE, 1, 0)<<<grid, XT_CUDA_BLOCK_THREADS,
                                                          sizeof(float) * XT_MAX_CHANNELS * XT_CUDA_VIEW_CHW_ROWS,
                                                          L->stream>>>(sc);
    XT_CK(cudaGetLastError());
    return 0;
  }
  /* f32 voxels read no table: the constant-table variants, which copy none into shared memory */
  const kernel_fn k = vox == XT_CUDA_VOX_LINEAR
                          ? (L->count ? k_render<XT_CUDA_VOX_LINEAR, XT_CUDA_LUT_CONST, true, true>
                                      : k_render<XT_CUDA_VOX_LINEAR, XT_CUDA_LUT_CONST, false, true>)
                          : (L->count ? k_render<XT_CUDA_VOX_TEXTURE, XT_CUDA_LUT_CONST, true, true>
                                      : k_render<XT_CUDA_VOX_TEXTURE, XT_CUDA_LUT_CONST, false, true>);
  k<<<grid, XT_CUDA_BLOCK_THREADS, 0, L->stream>>>(sc);
  XT_CK(cudaGetLastError());
  return 0;
}

const xt_cuda_kind_ops xt_cuda_kind_voxel = {
    "voxel",           voxel_accepts,    voxel_create, voxel_add_model, voxel_nmodels,      voxel_frame_bytes,
    voxel_fill_frame,  NULL,             voxel_render, voxel_destroy,   voxel_set_channels, NULL,
    voxel_set_iodine,  NULL,             NULL,
};
