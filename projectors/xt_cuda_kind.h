/* Model kinds on the CUDA backend: the contract between the frame pipeline (cuda_pipeline.cu:
 * device, streams, per-detector scratch, per-frame descriptors, batches, copy-out) and each kind's
 * kernels (proj_voxel.cu; one file per further kind). Internal to projectors/, C++ (nvcc) only.
 *
 * A frame is rendered by every kind that holds models, in the order of the pipeline's kind table,
 * into one device buffer of float line integrals: the first kind writes every pixel, the others
 * add (line integrals add). Per frame, each kind gets a descriptor of its own (frame_bytes, filled
 * on the host in double by fill_frame, uploaded with the others in one copy per chunk of frames),
 * so kinds never share or branch on each other's layouts. Scratch that depends on the detector
 * (sort buffers, tile lists) is sized in prepare(), which the pipeline calls only when the
 * detector or the chunk size changes: nothing is allocated per frame. */
#ifndef XT_CUDA_KIND_H
#define XT_CUDA_KIND_H

#include <cuda_runtime.h>

#include <stddef.h>

extern "C" {
#include "xt_cuda_config.h"
#include "xt_proj_cuda.h"
}

/* Instruments fused into the voxel kind's spectral sums (XT_INSTR_FUSED=1, cuda_pipeline.cu): the
 * instrument kind's splat has queued one frame's channel sums into acc (64-bit fixed point, 2^-32
 * units, rows x cols pixels of nch sums each, a pixel's together) and flagged the
 * XT_CUDA_INSTR_TILE-square tiles it touched; the voxel kernel adds a flagged tile's pixel sums to
 * its channels (as the instrument kind's finish converts and adds them) and zeroes them; the
 * pipeline clears the nflags flags after it. */
#define XT_CUDA_INSTR_TILE 16
typedef struct xt_cuda_instr_acc {
  unsigned long long *acc;
  unsigned char *flag;
  int tcols;  /* tiles a row */
  int nflags; /* tiles */
} xt_cuda_instr_acc;

/* One launch of one kind: nf frames of one detector. */
typedef struct xt_cuda_launch {
  int nf, cols, rows;
  const xt_geometry *g; /* host: the nf geometries (g[j] is frame j of this launch) */
  const void *d_desc;   /* device: nf descriptors of the kind's frame_bytes, contiguous */
  float *d_out;         /* device: nf * rows * cols, frame j at d_out + j*rows*cols, row-major */
  int accumulate;       /* 0: write every pixel (0 where nothing is hit); 1: add to d_out */
  int count;            /* benchmark: write work counts (voxels visited) instead; kinds that
                           cannot, add nothing and succeed */
  int nch;              /* 0: line integrals; n > 0: material channels (xt_channels.h), n planes per
                           frame, channel c of frame j at d_out + (j*n + c)*rows*cols */
  const xt_chan_spectral *spectral; /* NULL; or (nch > 0, one kind alone) the channels' spectral sums
                                       (xt_spectral.h) instead of the planes: 2 planes per frame, sums
                                       of k1 then of k2; host struct, device pointers */
  const xt_cuda_instr_acc *instr; /* NULL; or (spectral, nf 1, the voxel kind) the instruments' sums to add */
  cudaStream_t stream;  /* everything of the launch goes on this stream; no synchronisation */
} xt_cuda_launch;

typedef struct xt_cuda_kind_ops {
  const char *name;
  /* The model kinds this table renders. */
  int (*accepts)(const xt_model *m);
  /* Called once per projector, with the device current. */
  int (*create)(const xt_cuda_options *opt, void **st, xt_msg *msg);
  /* Uploads the model once; the model outlives the projector. */
  int (*add_model)(void *st, const xt_model *m, xt_msg *msg);
  int (*nmodels)(const void *st);
  /* Per-frame descriptor bytes (a multiple of 16), and its fill on the host for geometry g. */
  size_t (*frame_bytes)(const void *st);
  void (*fill_frame)(const void *st, const xt_geometry *g, void *desc);
  /* Per-(detector, model) scratch for up to max_frames frames per launch. May be NULL. */
  int (*prepare)(void *st, int cols, int rows, int max_frames, xt_msg *msg);
  /* Queues the launch's kernels on L->stream; checks each launch (cudaGetLastError). */
  int (*render)(void *st, const xt_cuda_launch *L, xt_msg *msg);
  void (*destroy)(void *st);
  /* Material channels: (re)builds the kind's maps of its models onto the pipeline's channel set
   * and uploads them (called after every add_model that changed the set or added a model). NULL:
   * the kind has no channels yet, and a channels launch fails with XT_EUNSUPPORTED. */
  int (*set_channels)(void *st, const xt_chanset *cs, xt_msg *msg);
  /* Instruments: a new centreline for model m (xt_proj_set_shape) into buffers sized at add_model;
   * XT_ENOTFOUND when m is not one of the kind's. NULL: the kind has no shapes. */
  int (*set_shape)(void *st, const xt_model *m, const double *pts, int n, xt_msg *msg);
  /* Contrast (issue 26): label volume m's labels with iodine (xt_proj_set_iodine): its mono table
   * and channel rows, uploaded before the next frame; XT_ENOTFOUND when m is not one of the kind's.
   * NULL: the kind takes no contrast. */
  int (*set_iodine)(void *st, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg);
  /* Instruments fused into the spectral sums, or splatted beside the other kinds (XT_INSTR_SIDE):
   * queues the splat of L's one frame (of L->nch channels, or line integrals) into the kind's
   * accumulator, without its finish, and says where it is (xt_cuda_instr_acc). NULL: every kind but
   * the instruments. */
  int (*splat)(void *st, const xt_cuda_launch *L, xt_cuda_instr_acc *out, xt_msg *msg);
  /* The splat's finish (after splat, on L's stream): its accumulator into L's one frame (written or
   * added, as L->accumulate says) and back to zero. NULL where splat is. */
  int (*finish)(void *st, const xt_cuda_launch *L, xt_msg *msg);
} xt_cuda_kind_ops;

extern const xt_cuda_kind_ops xt_cuda_kind_voxel; /* proj_voxel.cu: dense and label volumes */
extern const xt_cuda_kind_ops xt_cuda_kind_gmm;   /* proj_gmm.cu: Gaussian mixtures */
extern const xt_cuda_kind_ops xt_cuda_kind_nvdb;  /* proj_nvdb.cu: NanoVDB grids */
extern const xt_cuda_kind_ops xt_cuda_kind_instr; /* proj_instr.cu: instruments (tube segments) */

/* Every CUDA call in host code: on failure, one line naming the call, into msg. */
#define XT_CK(call)                                                                                            \
  do {                                                                                                         \
    cudaError_t e_ = (call);                                                                                   \
    if (e_ != cudaSuccess)                                                                                     \
      return xt_fail(msg, XT_EDEVICE, "cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)

/* The detector and source of a frame, in double, as xt_geom_pixel_pos and proj_cpu.c use them. */
typedef struct xt_cuda_camera {
  double src[3], det0[3], u[3], v[3];
  double pu, pv;
} xt_cuda_camera;

static inline void xt_cuda_camera_fill(const xt_geometry *g, xt_cuda_camera *c) {
  const xt_vec3 vs[4] = {g->source, g->det_origin, g->u, g->v};
  double *dst[4] = {c->src, c->det0, c->u, c->v};
  for (int k = 0; k < 4; k++) {
    dst[k][0] = vs[k].x;
    dst[k][1] = vs[k].y;
    dst[k][2] = vs[k].z;
  }
  c->pu = g->mode.pitch_u_mm;
  c->pv = g->mode.pitch_v_mm;
}

/* The per-frame descriptor of the voxel and NanoVDB kinds (each fills its own): the camera and, per
 * model slot, the world->cell map's linear part and the source in cell space, in double, as the CPU
 * reference computes them. One layout, so that the NanoVDB kind's dense working set can be marched
 * by the voxel kind's kernel on the NanoVDB kind's own descriptors (xt_cuda_voxel_render_view). */
typedef struct xt_cuda_model_map {
  double m[3][3];
  double o[3];
  int ok;
  int pad_;
} xt_cuda_model_map;

typedef struct xt_cuda_frame {
  xt_cuda_camera cam;
  xt_cuda_model_map fm[XT_CUDA_MAX_MODELS];
} xt_cuda_frame;
static_assert(sizeof(xt_cuda_frame) % 16 == 0, "descriptors are 16-byte multiples");

/* A dense float volume that another kind keeps on the device (the NanoVDB kind's working set,
 * proj_nvdb.cu), marched by the voxel kind's k_render exactly as a resident dense model is. */
typedef struct xt_cuda_dense_view {
  int model; /* its map in the launch's descriptors: xt_cuda_frame.fm[model] */
  int n[3];
  const float *f32;        /* n[0] n[1] n[2] floats, x fastest, after a guard band of n[0] n[1] + 1 floats
                            * and before another (finite values: the march may read one voxel past the
                            * box, for a segment of ~1e-5 mm) */
  cudaTextureObject_t tex; /* the same voxels as a 3D float texture (point sampling, clamped), or 0 */
  /* the content hull in its cell space (xt_hull.h): 0 none, 1 the slabs, 2 all of it background;
   * outside the hull the volume is mu_bg */
  int hull;
  float mu_bg;
  float hlo[XT_HULL_DIRS], hhi[XT_HULL_DIRS];
  /* material channels (the voxel kind's dense march: HU classes by mu): the class bounds, and on
   * the device XT_CUDA_VIEW_CHW_ROWS rows of XT_MAX_CHANNELS floats, the three classes' weights per
   * optical depth (xt_voxel_chan.cw) and the background's per mm (mu_bg times its class's row);
   * chw NULL: the view takes no channel launch */
  const float *chw;
  float thr[2];
} xt_cuda_dense_view;
#define XT_CUDA_VIEW_CHW_ROWS 4

/* Queues the march of view v for L (line integrals, L->count steps, or L->nch channel planes; no
 * spectral sums) on L->stream, writing L's frames or adding to them (L->accumulate). Reads the
 * texture copy where the voxel kind would for a model of its own of this map
 * (xt_cuda_voxel_storage), the linear copy otherwise; opt: the projector's options (voxels). */
int xt_cuda_voxel_render_view(const xt_cuda_dense_view *v, const xt_cuda_options *opt, const xt_affine *w2c0,
                              const xt_cuda_launch *L, xt_msg *msg);
/* A texture object over a 3D array as the voxel kind reads its texture copies: point sampling,
 * clamped, unnormalised coordinates, element type. */
cudaError_t xt_cuda_point_texture(cudaArray_t arr, cudaTextureObject_t *tex);
/* Which copy of a volume with both the voxel kind reads for a launch whose first frame is g and whose
 * model's world->cell map under it is w2c (XT_CUDA_VOX_LINEAR or XT_CUDA_VOX_TEXTURE). */
int xt_cuda_voxel_storage(const xt_affine *w2c, const xt_geometry *g);

#ifdef __CUDACC__
/* FP64 without FMA contraction: the reference's own rounding, operation for operation. */
static __device__ __forceinline__ double xt_dm(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ double xt_da(double a, double b) { return __dadd_rn(a, b); }

/* A label segment of length seg into 8 channel accumulators: its row of weights, two float4. Every
 * kind's channel march uses it, so the accumulators stay in registers the same way in each. */
static __device__ __forceinline__ void xt_cuda_acc8(float *a, float seg, float4 p, float4 q) {
  a[0] = fmaf(seg, p.x, a[0]);
  a[1] = fmaf(seg, p.y, a[1]);
  a[2] = fmaf(seg, p.z, a[2]);
  a[3] = fmaf(seg, p.w, a[3]);
  a[4] = fmaf(seg, q.x, a[4]);
  a[5] = fmaf(seg, q.y, a[5]);
  a[6] = fmaf(seg, q.z, a[6]);
  a[7] = fmaf(seg, q.w, a[7]);
}

/* The world ray of pixel (col, row): unit direction w and the length from the source to the
 * pixel centre, exactly as proj_cpu.c's frame_worker computes them (xt_geom_pixel_pos, d/|d|). */
static __device__ __forceinline__ double xt_cuda_pixel_ray(const xt_cuda_camera &c, int col, int row, double w[3]) {
  const double a = xt_dm((double)col, c.pu), b = xt_dm((double)row, c.pv);
  const double dx = xt_da(xt_da(c.det0[0], xt_da(xt_dm(c.u[0], a), xt_dm(c.v[0], b))), -c.src[0]);
  const double dy = xt_da(xt_da(c.det0[1], xt_da(xt_dm(c.u[1], a), xt_dm(c.v[1], b))), -c.src[1]);
  const double dz = xt_da(xt_da(c.det0[2], xt_da(xt_dm(c.u[2], a), xt_dm(c.v[2], b))), -c.src[2]);
  const double len = __dsqrt_rn(xt_da(xt_da(xt_dm(dx, dx), xt_dm(dy, dy)), xt_dm(dz, dz)));
  const double il = __ddiv_rn(1.0, len);
  w[0] = xt_dm(dx, il);
  w[1] = xt_dm(dy, il);
  w[2] = xt_dm(dz, il);
  return len;
}
#endif

#endif /* XT_CUDA_KIND_H */
