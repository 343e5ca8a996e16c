/* Instruments on the CUDA frame pipeline (xt_cuda_kind.h): a splat of tube segments.
 *
 *   splat   one launch per frame for every instrument's segments, one warp per segment: in
 *           double, the segment's box (as the CPU reference bounds it) projected onto the detector
 *           gives the pixels any of whose sub-rays can meet it; the lanes test 32 of them at a time
 *           (whether the centre ray of each half of the pixel passes within its sub-rays' spread
 *           of the tube: xt_tube_fac_near), then split the XT_INSTR_AREA_SAMPLES^2 rays through
 *           the sub-pixel centres of a candidate's halves that passed, each first through the closed
 *           form's division-free bound (xt_tube_fac_maybe) and, where a lane of the warp passed it,
 *           the closed form of xt_tube.h in double, in its factored form (xt_tube_fac_chords: the
 *           segment's constants for the source once, then four numbers affine in the sub-pixel
 *           centre per ray), summed into the wall's and the lumen's
 *           chord lengths; the pixel's mean - its line integral, or each channel's areal density -
 *           is added to a 64-bit fixed-point accumulator (2^-32 units, a pixel's planes side by
 *           side) by an integer atomic, so the sum does not depend on the order threads finish in:
 *           frames are reproducible bit for bit; and the pixel's 16 x 16 tile is flagged;
 *   finish  one block per tile: a flagged tile's accumulator into the float output (written or
 *           added, as the pipeline says) and back to zero with its flag for the next frame; an
 *           unflagged tile is skipped when adding and written 0 when writing, so a frame touches
 *           the accumulator only where instruments are (about 13 % of fd20-1024's tiles with ten
 *           wires, docs/BENCHMARKS.md);
 *   fused   (the spectral sums of voxel models and instruments, the default since 2026-12-07;
 *           XT_INSTR_FUSED=0: not; instr_splat) the splat alone; the voxel kind's channels kernel
 *           consumes and zeroes the flagged tiles' accumulators and the pipeline clears the flags
 *           (cuda_pipeline.cu, render_fused).
 *   compact (XT_INSTR_SPLAT=compact at create; default: the splat above) the same sums with less
 *           of the warp idle: each candidate half's 32 sub-rays get only a cheap bound of the
 *           closed form (xt_tube_fac_maybe, loosened: it refuses no sub-ray with a chord), the survivors
 *           are queued across pixels in a per-warp ring and evaluated 32 at a time, each pixel's
 *           run summed by a segmented scan per batch and added by the run's last lane
 *           (k_instr_splat_compact: its comment). Works for line integrals, channels and fused.
 *           Measured no faster than the default (docs/BENCHMARKS.md), which now takes the same
 *           bound per sub-ray without the queue.
 *   run     (XT_INSTR_SPLAT=run at create) a block per run of up to 16 consecutive segments of one
 *           material (xt_tube.h, laid out with each shape): candidates by the run's bounding
 *           segment, each sub-ray's closed forms only for the segments its axial position picks,
 *           one butterfly and atomic per pixel and run (k_instr_splat_run: its comment). Not yet
 *           run on a GPU (docs/instruments.md).
 *
 * The same sums as the CPU reference (proj_cpu_instr.c), grouped differently: segments per pixel
 * there, pixels per segment here; a pixel equals the reference to float rounding plus 2^-32 (the
 * factored closed form rounds apart from xt_tube_chords by ~1e-13 mm a chord, ~1e-9 mm at the
 * most, near tangency: test_instr, xtwin-instr-bench --count).
 *
 * Shapes: each instrument has device and pinned staging buffers of its capacity, made at add_model.
 * set_shape lays the centreline out on the host into the staging buffer (after the previous upload
 * from it has completed) and the next render queues the copy on its stream ahead of its kernels:
 * no allocation per frame or per shape. The splat finds each instrument's segments through a table
 * passed by value (instr_tab): nothing is uploaded for it.
 *
 * Per frame only the descriptor goes up (with the pipeline's, as every kind's): 208 bytes of camera
 * (instr_head) and 312 per instrument (instr_xf: its maps, its sub-ray constants, and its lumen's
 * iodine, 16 bytes), 3,328 bytes for ten instruments. Segments go up only with a new shape. Contrast
 * in a lumen (instr_set_iodine) rewrites no segment: the frame's instr_xf carries the lumen region's
 * entry and mu, the splat picks it for that lumen's segments; the channel rows' iodine column (1 KB
 * an instrument) goes up only when it changed. */
#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_cuda_kind.h"

extern "C" {
#include "xt_channels.h"
#include "xt_geom.h"
#include "xt_instr.h"
}

#define XT_CUDA_MAX_INSTR 32
#define FIX_SCALE 4294967296.0 /* 2^32 */
#define CK XT_CK
#define FULL 0xffffffffu /* every lane of a warp */

typedef struct instr_xf {
  double w2m[12]; /* world -> model: m[3][3] row-major, then t[3] */
  double m2w[12];
  double scale;   /* w2m's linear part's Frobenius norm (proj_cpu_instr.c's instr_state.scale) */
  double mu_io;   /* the lumen region's mu with its iodine, medium subtracted (xt_iodine_instr_lumen) */
  /* the sub-rays' frame constants in the model frame (the splat's factored closed form): the
   * source, and the ray from it to the detector's origin, a column's step and a row's step */
  double o[3], d0[3], du[3], dv[3];
  int lumen_io;   /* the lumen region's table entry, -1: no iodine (xt_tube_mu_lumen) */
  int pad;
} instr_xf;

typedef struct instr_head {
  xt_cuda_camera cam;
  double nrm[3]; /* the detector's normal u x v */
  /* reciprocals for the footprint's projection (d_project: multiplications, not divisions): of
   * (det0 - src).nrm, of a column's and a row's pitch */
  double ien, ipu, ipv;
  /* the squared world length of the ray to continuous pixel (x, y): with w0 = det0 - src, wu = u pu,
   * wv = v pv, |w0 + x wu + y wv|^2 = q[0] + x (q[1] + x q[3] + y q[4]) + y (q[2] + y q[5]) */
  double q[6];
} instr_head;

typedef struct instr_one {
  const xt_model *m;
  xt_instr_device dev;
  xt_instr_geom geom;  /* host layout of the latest shape */
  xt_tube_seg *h_seg;  /* pinned staging */
  xt_tube_seg *d_seg;  /* device, capacity geom.cap_seg */
  xt_tube_run *h_run;  /* pinned staging of the runs (xt_tube_runs), with h_seg's */
  xt_tube_run *d_run;  /* device, capacity cap_run */
  int cap_run, nrun, pending_run; /* the runs on the device, staged with pending */
  float *d_w;          /* channel rows, medium subtracted: 256 x XT_MAX_CHANNELS */
  int nseg;            /* segments on the device */
  int pending;         /* staged segments not yet uploaded, -1: none */
  cudaEvent_t ev;      /* the last upload from h_seg */
  xt_iodine_tab io;    /* contrast in the lumen (instr_set_iodine), when has_io: the channel rows' */
  int has_io;
  int lumen_io;        /* the frame's lumen (instr_xf): table entry, -1 none, and its mu */
  double mu_io;
} instr_one;

typedef struct instr_state {
  int device;
  int n;
  instr_one in[XT_CUDA_MAX_INSTR];
  unsigned long long *d_acc; /* 64-bit fixed point, pixels x planes (a pixel's together); zero between frames */
  unsigned char *d_flag;     /* one per TILE x TILE tile: the splat touched it; zero between frames */
  size_t acc_n, flag_n;
  int nch;
  int ci; /* the iodine channel of the last set_channels, -1: none */
  int splat; /* XT_INSTR_SPLAT at create: SPLAT_SEGMENT (k_instr_splat), SPLAT_RUN, SPLAT_COMPACT */
} instr_state;

enum { SPLAT_RUN, SPLAT_SEGMENT, SPLAT_COMPACT };

static size_t frame_bytes_n(int n) {
  const size_t b = sizeof(instr_head) + sizeof(instr_xf) * (size_t)n;
  return (b + 15) / 16 * 16;
}

static int instr_accepts(const xt_model *m) { return m->kind == XT_MODEL_INSTR; }

static int instr_create(const xt_cuda_options *opt, void **st, xt_msg *msg) {
  instr_state *s = (instr_state *)calloc(1, sizeof *s);
  if (!s) return xt_fail(msg, XT_ENOMEM, "cuda instruments: out of memory");
  s->device = opt->device;
  /* the splat's kernel, read once here like XT_INSTR_FUSED (cuda_pipeline.cu): unset, "" or
   * "default" a warp per segment, "run" a block per run of segments, "compact" the survivor-batched
   * one */
  const char *sp = getenv("XT_INSTR_SPLAT");
  if (!sp || !*sp || strcmp(sp, "default") == 0) s->splat = SPLAT_SEGMENT;
  else if (strcmp(sp, "run") == 0) s->splat = SPLAT_RUN;
  else if (strcmp(sp, "compact") == 0) s->splat = SPLAT_COMPACT;
  else {
    free(s);
    return xt_fail(msg, XT_EINVAL, "XT_INSTR_SPLAT: '%.40s' is none of default, run, compact", sp);
  }
  *st = s;
  return 0;
}

static void instr_destroy(void *st) {
  instr_state *s = (instr_state *)st;
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    instr_one *o = &s->in[i];
    if (o->ev) cudaEventSynchronize(o->ev), cudaEventDestroy(o->ev);
    cudaFreeHost(o->h_seg);
    cudaFree(o->d_seg);
    cudaFreeHost(o->h_run);
    cudaFree(o->d_run);
    cudaFree(o->d_w);
    xt_instr_geom_free(&o->geom);
  }
  cudaFree(s->d_acc);
  cudaFree(s->d_flag);
  free(s);
}

static int instr_add_model(void *st, const xt_model *m, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  const xt_instr *I = xt_model_instr(m);
  if (!I || I->geom.nseg < 1) return xt_fail(msg, XT_EINVAL, "cuda projector: model %s: no instrument shape", m->name);
  if (s->n == XT_CUDA_MAX_INSTR)
    return xt_fail(msg, XT_ETOOLARGE, "cuda projector: at most %d instruments", XT_CUDA_MAX_INSTR);
  instr_one *o = &s->in[s->n];
  memset(o, 0, sizeof *o);
  o->m = m;
  o->dev = I->dev;
  o->pending = -1;
  o->lumen_io = -1;
  int rc = xt_instr_geom_alloc(&o->dev, &o->geom, msg);
  if (!rc) rc = xt_instr_geom_build(&o->dev, I->points, I->npoints, m->name, &o->geom, msg);
  const size_t bytes = sizeof(xt_tube_seg) * (size_t)o->geom.cap_seg;
  o->cap_run = xt_tube_runs_cap(o->geom.cap_seg, o->dev.nsections);
  const size_t rbytes = sizeof(xt_tube_run) * (size_t)o->cap_run;
  cudaError_t e = cudaSuccess;
  if (!rc) {
    e = cudaHostAlloc((void **)&o->h_seg, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&o->h_run, rbytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_run, rbytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_seg, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_w, sizeof(float) * 256 * XT_MAX_CHANNELS);
    if (e == cudaSuccess) e = cudaMemset(o->d_w, 0, sizeof(float) * 256 * XT_MAX_CHANNELS);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&o->ev, cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaMemcpy(o->d_seg, o->geom.seg, sizeof(xt_tube_seg) * (size_t)o->geom.nseg, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
      rc = xt_fail(msg, XT_EDEVICE, "cuda projector: model %s: %s", m->name, cudaGetErrorString(e));
  }
  /* the runs only for the splat that reads them: no layout or upload of them otherwise */
  if (!rc && s->splat == SPLAT_RUN && (o->nrun = xt_tube_runs(o->geom.seg, o->geom.nseg, o->h_run, o->cap_run)) < 0)
    rc = xt_fail(msg, XT_EINTERNAL, "cuda projector: model %s: more runs than %d", m->name, o->cap_run);
  if (!rc && o->nrun > 0) {
    e = cudaMemcpy(o->d_run, o->h_run, sizeof(xt_tube_run) * (size_t)o->nrun, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "cuda projector: model %s: %s", m->name, cudaGetErrorString(e));
  }
  if (rc) {
    if (o->ev) cudaEventDestroy(o->ev);
    cudaFreeHost(o->h_seg);
    cudaFree(o->d_seg);
    cudaFreeHost(o->h_run);
    cudaFree(o->d_run);
    cudaFree(o->d_w);
    xt_instr_geom_free(&o->geom);
    memset(o, 0, sizeof *o);
    return rc;
  }
  o->nseg = o->geom.nseg;
  s->n++;
  return 0;
}

static int instr_set_shape(void *st, const xt_model *m, const double *pts, int n, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  for (int i = 0; i < s->n; i++) {
    instr_one *o = &s->in[i];
    if (o->m != m) continue;
    int rc = xt_instr_geom_build(&o->dev, pts, n, m->name, &o->geom, msg);
    if (rc) return rc;
    CK(cudaEventSynchronize(o->ev)); /* the staging buffers' last upload is done */
    const int nr = s->splat == SPLAT_RUN ? xt_tube_runs(o->geom.seg, o->geom.nseg, o->h_run, o->cap_run) : 0;
    if (nr < 0) return xt_fail(msg, XT_EINTERNAL, "cuda projector: model %s: more runs than %d", m->name, o->cap_run);
    memcpy(o->h_seg, o->geom.seg, sizeof(xt_tube_seg) * (size_t)o->geom.nseg);
    o->pending = o->geom.nseg;
    o->pending_run = nr;
    return 0;
  }
  return XT_ENOTFOUND;
}

static int instr_nmodels(const void *st) { return ((const instr_state *)st)->n; }

static size_t instr_frame_bytes(const void *st) { return frame_bytes_n(((const instr_state *)st)->n); }

static void aff_to(const xt_affine *a, double out[12]) {
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) out[3 * r + c] = a->m[r][c];
  for (int r = 0; r < 3; r++) out[9 + r] = a->t[r];
}

/* On the host, in double: the camera, and each instrument's maps as the CPU reference forms them. */
static void instr_fill_frame(const void *st, const xt_geometry *g, void *desc) {
  const instr_state *s = (const instr_state *)st;
  memset(desc, 0, frame_bytes_n(s->n));
  instr_head *h = (instr_head *)desc;
  xt_cuda_camera_fill(g, &h->cam);
  const xt_vec3 n = xt_v3_cross(g->u, g->v);
  h->nrm[0] = n.x;
  h->nrm[1] = n.y;
  h->nrm[2] = n.z;
  h->ien = 1.0 / ((h->cam.det0[0] - h->cam.src[0]) * n.x + (h->cam.det0[1] - h->cam.src[1]) * n.y +
                  (h->cam.det0[2] - h->cam.src[2]) * n.z);
  h->ipu = 1.0 / h->cam.pu;
  h->ipv = 1.0 / h->cam.pv;
  const xt_cuda_camera *c = &h->cam;
  const xt_vec3 src = xt_v3(c->src[0], c->src[1], c->src[2]);
  const xt_vec3 w0 = xt_v3_sub(xt_v3(c->det0[0], c->det0[1], c->det0[2]), src);
  const xt_vec3 wu = xt_v3_scale(xt_v3(c->u[0], c->u[1], c->u[2]), c->pu), wv = xt_v3_scale(xt_v3(c->v[0], c->v[1], c->v[2]), c->pv);
  h->q[0] = xt_v3_dot(w0, w0);
  h->q[1] = 2.0 * xt_v3_dot(w0, wu);
  h->q[2] = 2.0 * xt_v3_dot(w0, wv);
  h->q[3] = xt_v3_dot(wu, wu);
  h->q[4] = 2.0 * xt_v3_dot(wu, wv);
  h->q[5] = xt_v3_dot(wv, wv);
  instr_xf *x = (instr_xf *)((unsigned char *)desc + sizeof(instr_head));
  const xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  for (int i = 0; i < s->n; i++) {
    const xt_affine m2w = xt_aff_compose(&p2w, &s->in[i].m->placement);
    xt_affine w2m;
    if (!xt_aff_invert(&m2w, &w2m)) memset(&w2m, 0, sizeof w2m); /* singular: every ray maps to a point */
    aff_to(&w2m, x[i].w2m);
    aff_to(&m2w, x[i].m2w);
    double f = 0;
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 3; k++) f += w2m.m[r][k] * w2m.m[r][k];
    x[i].scale = sqrt(f);
    x[i].lumen_io = s->in[i].lumen_io;
    x[i].mu_io = s->in[i].mu_io;
    const xt_vec3 om = xt_aff_apply(&w2m, src), m0 = xt_aff_apply_dir(&w2m, w0);
    const xt_vec3 mu = xt_aff_apply_dir(&w2m, wu), mv = xt_aff_apply_dir(&w2m, wv);
    const xt_vec3 *from[4] = {&om, &m0, &mu, &mv};
    double *to[4] = {x[i].o, x[i].d0, x[i].du, x[i].dv};
    for (int k = 0; k < 4; k++) to[k][0] = from[k]->x, to[k][1] = from[k]->y, to[k][2] = from[k]->z;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static __device__ __forceinline__ void d_apply(const double *a, const double p[3], double out[3], int dir) {
  for (int r = 0; r < 3; r++)
    out[r] = a[3 * r] * p[0] + a[3 * r + 1] * p[1] + a[3 * r + 2] * p[2] + (dir ? 0.0 : a[9 + r]);
}

/* The detector position (continuous pixel coordinates) of world point p, and its depth *f: where
 * it lies on the rays from the source to the detector (0 at the source, 1 on the detector plane);
 * 0 when p is not in front of the source. For the footprint only, which the candidates' exact test
 * refines: multiplications by the frame's reciprocals (instr_head) instead of four divisions, a few
 * ulps apart, far inside the footprint's sub-pixel slack (splat_footprint). */
static __device__ __forceinline__ int d_project(const instr_head *h, const double p[3], double *col, double *row,
                                                double *f) {
  const xt_cuda_camera &c = h->cam;
  const double q[3] = {p[0] - c.src[0], p[1] - c.src[1], p[2] - c.src[2]};
  const double e[3] = {c.det0[0] - c.src[0], c.det0[1] - c.src[1], c.det0[2] - c.src[2]};
  const double qn = q[0] * h->nrm[0] + q[1] * h->nrm[1] + q[2] * h->nrm[2];
  const double en = e[0] * h->nrm[0] + e[1] * h->nrm[1] + e[2] * h->nrm[2];
  if (!(qn * en > 0.0)) return 0;
  const double t = en * __drcp_rn(qn);
  *f = qn * h->ien;
  const double x[3] = {c.src[0] + t * q[0] - c.det0[0], c.src[1] + t * q[1] - c.det0[1], c.src[2] + t * q[2] - c.det0[2]};
  *col = (x[0] * c.u[0] + x[1] * c.u[1] + x[2] * c.u[2]) * h->ipu;
  *row = (x[0] * c.v[0] + x[1] * c.v[1] + x[2] * c.v[2]) * h->ipv;
  return 1;
}

/* The footprint: the segment's box (xt_instr_seg_box's, as the CPU reference culls with), projected
 * onto the detector, as the pixels ca..cb x ra..rb (fp) that any of its points falls in (a pixel's
 * sub-rays lie 1/16 of a pixel inside its edges: the slack for the projection's rounding), and the
 * box's largest depth *fe (at most 1); 0 when nothing of it reaches the detector. Lanes 0-7 project
 * one corner each; the bounds by integer reductions (one instruction each, where double min/max
 * butterflies took ~160 a warp: ncu). A corner behind the source gives the whole detector at depth
 * 1, a NaN corner the whole row or column range. The whole warp returns the same. */
static __device__ __forceinline__ int splat_footprint(const instr_head *h, const instr_xf *x, const xt_tube_seg *t,
                                                      int lane, int cols, int rows, int fp[4], double *fe) {
  const double c0 = xt_tube_dot(t->n0, t->d), c1 = xt_tube_dot(t->n1, t->d);
  const double grow = t->r_out / (c0 < c1 ? c0 : c1) * (1.0 + 1e-12) + 1e-12;
  int clo = INT_MAX, chi = INT_MIN, rlo = INT_MAX, rhi = INT_MIN, behind = 0;
  unsigned fb = 0u;
  if (lane < 8) {
    double pm[3];
    for (int q = 0; q < 3; q++) {
      const double a = t->p0[q], e = t->p0[q] + t->len * t->d[q];
      pm[q] = (lane >> q) & 1 ? fmax(a, e) + grow : fmin(a, e) - grow;
    }
    double pw[3], cc, rr, f;
    d_apply(x->m2w, pm, pw, 0);
    if (d_project(h, pw, &cc, &rr, &f)) {
      const double L = 1e9; /* within int; NaN -> the whole range */
      clo = (int)floor(fmax(cc - 0.5, -L));
      chi = (int)ceil(fmin(cc + 0.5, L));
      rlo = (int)floor(fmax(rr - 0.5, -L));
      rhi = (int)ceil(fmin(rr + 0.5, L));
      fb = __float_as_uint(__double2float_ru(f)); /* f > 0: its bits order as its values, rounded up */
    } else {
      behind = 1;
    }
  }
  if (__any_sync(FULL, behind)) {
    fp[0] = 0, fp[1] = cols - 1, fp[2] = 0, fp[3] = rows - 1;
    *fe = 1.0;
    return 1;
  }
  fp[0] = max(0, __reduce_min_sync(FULL, clo));
  fp[1] = min(cols - 1, __reduce_max_sync(FULL, chi));
  fp[2] = max(0, __reduce_min_sync(FULL, rlo));
  fp[3] = min(rows - 1, __reduce_max_sync(FULL, rhi));
  *fe = fmin(1.0, (double)__uint_as_float(__reduce_max_sync(FULL, fb)));
  return fp[0] <= fp[1] && fp[2] <= fp[3];
}

/* The splat's view of the instruments, passed by value as the kernel's parameter (__grid_constant__:
 * read in place from the constant bank, never copied): segment k of the frame is segment
 * k - first[i] of instrument i, first[i] <= k < first[i + 1]. Built on the host at each render from
 * the counts it uploads, so no table lives on the device and nothing is uploaded for it. */
typedef struct instr_tab {
  int n, total;
  int first[XT_CUDA_MAX_INSTR + 1];
  const xt_tube_seg *seg[XT_CUDA_MAX_INSTR];
  const float *w[XT_CUDA_MAX_INSTR];
  /* the runs (xt_tube_run), as the segments: run k of the frame is run k - rfirst[i] of instrument i */
  int rtotal;
  int rfirst[XT_CUDA_MAX_INSTR + 1];
  const xt_tube_run *run[XT_CUDA_MAX_INSTR];
} instr_tab;

#define SPLAT_WARPS 4 /* warps per block, one segment each */
/* Blocks an SM (the launch bound): with the segment's constants in shared memory 96 registers and no
 * spills, so 5 warps in each of the SM's four register files (20 an SM). Unbounded, with the
 * constants in registers, it took 131: 3 warps a register file (ncu, H100: 17 % occupancy,
 * latency-bound on its FP64 chains; 4 blocks bounded it to 128, 16 warps; 6 blocks spill) */
#define SPLAT_BLOCKS_SM 5
#define TILE XT_CUDA_INSTR_TILE /* the finish's tiles: TILE x TILE pixels, one flag each */

static __device__ __forceinline__ double d_shfl_xor(double v, int m) { return __shfl_xor_sync(FULL, v, m); }

/* Segment t's factored closed-form constants for the frame's source (instrument x, camera h): its
 * xt_tube_pre and its family's numbers for the rays to the detector's origin, a column's and a
 * row's step, with the camera's quadratic of the rays' squared world length. One thread. */
static __device__ __forceinline__ void splat_family(const xt_tube_seg *t, const instr_xf *x, const instr_head *h,
                                                    xt_tube_pre *P, xt_tube_fam *F) {
  xt_tube_prep(t, x->o, P);
  xt_tube_lin_of(P, t, x->d0, &F->l0);
  xt_tube_lin_of(P, t, x->du, &F->lu);
  xt_tube_lin_of(P, t, x->dv, &F->lv);
  for (int i = 0; i < 6; i++) F->q[i] = h->q[i];
}

/* The candidate halves of the footprint's 32 pixels from base (ca..cb x ra..rb, fw columns, np
 * pixels; lane i's pixel (*pcl, *prw) kept for the candidates' broadcast): bit i of *h0 (*h1) when
 * pixel i's upper (lower) half's centre ray, row r -+ 1/4, passes within e of the segment (P, F:
 * xt_tube_fac_near). The index division is 32-bit where the footprint allows (a 64-bit one per
 * candidate pixel was a long dependent chain on every lane). */
static __device__ __forceinline__ void splat_candidates(const xt_tube_pre *P, const xt_tube_fam *F, double e,
                                                        long long base, long long np, int fw, int ca, int ra, int lane,
                                                        int *pcl, int *prw, unsigned *h0, unsigned *h1) {
  if (np <= INT_MAX) {
    const unsigned pi = (unsigned)(base + lane);
    *pcl = ca + (int)(pi % (unsigned)fw);
    *prw = ra + (int)(pi / (unsigned)fw);
  } else {
    *pcl = ca + (int)((base + lane) % fw);
    *prw = ra + (int)((base + lane) / fw);
  }
  int near0 = 0, near1 = 0;
  if (base + lane < np) {
    near0 = xt_tube_fac_near(P, F, *pcl, *prw - 0.25, e);
    near1 = xt_tube_fac_near(P, F, *pcl, *prw + 0.25, e);
  }
  *h0 = __ballot_sync(FULL, near0);
  *h1 = __ballot_sync(FULL, near1);
}

/* A candidate pixel's sums into the accumulator, by the whole warp: sw and sl (the wall's and the
 * lumen's chords over each lane's sub-rays; sl all 0 unless lum) reduced by a fixed butterfly, so
 * every lane ends with the same bits (the tree is fixed and + commutes); nothing when both are 0.
 * Otherwise the pixel's tile is flagged, and lane 0 adds its mean (line integrals: t's mu_wall, the
 * lumen's mu_lumen) or lane c channel c's (the rows ww, wl) into the 64-bit fixed point. */
static __device__ __forceinline__ void splat_pixel(double sw, double sl, int lum, int lane, int cl, int r, int cols,
                                                   int tcols, int nch, const xt_tube_seg *t, double mu_lumen, float ww,
                                                   float wl, unsigned long long *__restrict__ acc,
                                                   unsigned char *__restrict__ flag) {
  const double inv = 1.0 / ((double)XT_INSTR_AREA_SAMPLES * XT_INSTR_AREA_SAMPLES);
  for (int m = 16; m; m >>= 1) sw += d_shfl_xor(sw, m);
  if (lum)
    for (int m = 16; m; m >>= 1) sl += d_shfl_xor(sl, m);
  if (sw == 0.0 && sl == 0.0) return; /* the same bits in every lane: the whole warp */
  const size_t px = (size_t)r * cols + cl;
  if (lane == 0) flag[(r / TILE) * tcols + cl / TILE] = 1;
  if (!nch) {
    if (lane == 0) {
      const double v = (t->mu_wall * sw + mu_lumen * sl) * inv;
      atomicAdd(&acc[px], (unsigned long long)llrint(v * FIX_SCALE));
    }
  } else if (lane < nch) {
    const double v = (sw * (double)ww + sl * (double)wl) * inv;
    if (v != 0.0) atomicAdd(&acc[px * nch + lane], (unsigned long long)llrint(v * FIX_SCALE));
  }
}

/* One warp per segment, all instruments' segments in one launch (tab). The footprint
 * (splat_footprint). The footprint's pixels, 32 at a time: each lane asks whether its pixel's two
 * halves' centre rays pass near the segment (xt_tube_fac_near, below); then for each candidate
 * pixel (two ballots' bits, in order) the 32 lanes split the S x S sub-rays of its halves that
 * passed (S = 8: one half a pass, a refused half skipped by the warp). Each lane's sub-ray first
 * takes the closed form's division-free bound (xt_tube_fac_maybe: the cylinder, its span within the
 * ray, the mitres), which refuses no sub-ray with a chord; the closed form follows only where a lane
 * passed it, and only for those lanes (ncu: the short segments' cylinders are met by 70 % of the
 * passes, whose mitres then clip most of them to nothing), and a pixel none of whose sub-rays passed
 * is left there. A butterfly sums the rest (every lane ends with the same bits: the tree is fixed
 * and + commutes), lane 0 (line integrals) or lane c (channel c) adds the pixel's mean into the
 * fixed-point accumulator, and the pixel's tile is flagged for the finish. A refused sub-ray's
 * chords are exactly 0, so the sums are bit for bit those of every sub-ray's closed form. The
 * per-pixel double sums group the sub-rays differently from the CPU reference (a tree here, in order
 * there): the same terms, rounding apart by ~1e-16 relative, far below the 2^-32 of the accumulator. */
static __device__ __forceinline__ void splat_segment(int k, const unsigned char *desc, const instr_tab &tab, int nch,
                                                     int cols, int rows, int tcols, unsigned long long *__restrict__ acc,
                                                     unsigned char *__restrict__ flag) {
  const int lane = threadIdx.x & 31;
  int mi = 0;
  while (k >= tab.first[mi + 1]) mi++;
  const instr_head *h = (const instr_head *)desc;
  const instr_xf *x = (const instr_xf *)(desc + sizeof(instr_head)) + mi;
  const xt_tube_seg *t = tab.seg[mi] + (k - tab.first[mi]);
  const float *w = tab.w[mi];
  if (!(x->scale > 0.0)) return; /* a singular placement (instr_fill_frame zeroes w2m): nothing, as the CPU */
  int fp[4];
  double fe;
  if (!splat_footprint(h, x, t, lane, cols, rows, fp, &fe)) return; /* the whole warp */
  const int ca = fp[0], cb = fp[1], ra = fp[2], rb = fp[3];
  const xt_cuda_camera &c = h->cam;
  const int S = XT_INSTR_AREA_SAMPLES;
  static_assert(XT_INSTR_AREA_SAMPLES == 8, "k_instr_splat: a half's sub-rays are one pass of 32 lanes");
  /* The candidates, by halves: the pixels one of whose halves (sub-pixel rows sj < S/2, then the
   * rest) has a centre ray passing within e of the segment's tube (xt_tube_fac_near). A sub-ray and
   * its half's centre ray start at the source and end on the detector plane at most
   * hypot(pu/2, pv/4) apart, so at depth f (d_project's) they are at most f x that apart (world mm;
   * x scale in model mm). Every point of the segment's box, hence of its tube, lies at depth <= fe
   * (its corners' largest, rounded up; depth is affine): a sub-ray that meets the tube passes within
   * e of its half's centre ray at the same depth. So a half refused has sub-rays whose chords are all
   * exactly 0, and skipping it leaves every sum as it was; the CPU reference's candidates (a box
   * grown by a whole diagonal, proj_cpu_instr.c) are more, the extra ones adding the same zeros:
   * both sum the same non-zero terms. fe <= 1 on the rays' span; the margins cover rounding. */
  /* The sub-rays' factored closed form (xt_tube.h): the segment's constants for this source; the
   * ray to the sub-pixel centre (xs, ys) is D = M (w0 + xs wu + ys wv) (w0 the source to the
   * detector's origin, wu and wv a column's and a row's step, M w2m's linear part), so its four
   * numbers are l(M w0) + xs l(M wu) + ys l(M wv), and its squared world length a quadratic in
   * (xs, ys): a sub-ray that misses the tube costs 4 FMAs and ~6 FP64 operations, one that meets it
   * ~60 more, instead of forming and mapping a unit ray and moving its origin (~235). */
  /* of M w0, M wu, M wv, the quadratic of |w|^2 and the bound's constants: the warp's own, in
   * shared memory, read where the closed form needs them (held in registers, they took 52 of the
   * kernel's 131 and held it to 12 warps an SM) */
  __shared__ xt_tube_pre sP[SPLAT_WARPS];
  __shared__ xt_tube_fam sF[SPLAT_WARPS];
  __shared__ xt_tube_maybe sM[SPLAT_WARPS];
  const int wi = threadIdx.x >> 5;
  if (lane == 0) xt_tube_prep(t, x->o, &sP[wi]);
  __syncwarp();
  /* the three directions' numbers on three lanes at once, the quadratic on six more */
  if (lane < 3) {
    const double *D = lane == 0 ? x->d0 : lane == 1 ? x->du : x->dv;
    xt_tube_lin_of(&sP[wi], t, D, lane == 0 ? &sF[wi].l0 : lane == 1 ? &sF[wi].lu : &sF[wi].lv);
  } else if (lane < 9) {
    sF[wi].q[lane - 3] = h->q[lane - 3];
  }
  __syncwarp();
  if (lane == 0) { /* the bound's constants: the sub-pixel centres' largest |x| and |y|, the centre */
    const double xm = fmax(fabs(ca - 0.5), fabs(cb + 0.5)), ym = fmax(fabs(ra - 0.5), fabs(rb + 0.5));
    xt_tube_fac_maybe_prep(&sP[wi], &sF[wi], xm, ym, 0.5 * (ca + cb), 0.5 * (ra + rb), &sM[wi]);
  }
  __syncwarp();
  const xt_tube_pre &P = sP[wi];
  const xt_tube_fam &F = sF[wi];
  const xt_tube_maybe &MB = sM[wi];
  /* xt_tube_mu_lumen with its test made once a warp: whether this segment's lumen is the region
   * whose iodine the frame's descriptor carries (131 registers unbounded, where picking per pixel took 134) */
  const int io = t->lumen == x->lumen_io;
  const double e = hypot(0.5 * c.pu, 0.25 * c.pv) * x->scale * fe * (1.0 + 1e-9) + 1e-9;
  const int fw = cb - ca + 1;
  const long long np = (long long)fw * (rb - ra + 1);
  /* the lumen's chords are all 0 for a solid segment (a guidewire): its sums and butterfly skipped,
   * the same for the whole warp */
  const int lum = P.ri2 > 0.0;
  /* lane c's channel rows of the wall and the lumen, read once a segment instead of after every
   * candidate's butterfly, where two dependent loads stood before its atomic */
  const float ww = lane < nch ? w[t->wall * XT_MAX_CHANNELS + lane] : 0.f;
  const float wl = lane < nch ? w[t->lumen * XT_MAX_CHANNELS + lane] : 0.f;
  /* the lane's sub-pixel centre in either half, as offsets from the pixel's centre: column
   * lane % S, row lane / S or S / 2 more (q = lane + 32 half: si = q % S, sj = q / S); exact
   * multiples of 1 / 16, so cl + ox equals the reference's cl + (si + 0.5) / S - 0.5 bit for bit */
  const double ox = ((lane % S) + 0.5) / S - 0.5, oy = ((lane / S) + 0.5) / S - 0.5; /* the second half: oy + 1/2 */
  for (long long base = 0; base < np; base += 32) {
    int pcl, prw;
    unsigned h0, h1;
    splat_candidates(&P, &F, e, base, np, fw, ca, ra, lane, &pcl, &prw, &h0, &h1);
    for (unsigned bits = h0 | h1; bits; bits &= bits - 1) {
      const int bi = __ffs(bits) - 1;
      const int cl = __shfl_sync(FULL, pcl, bi), r = __shfl_sync(FULL, prw, bi);
      double sw = 0.0, sl = 0.0;
      int any = 0;
      for (int hh = 0; hh < 2; hh++) {
        if (!((hh ? h1 : h0) >> bi & 1)) continue; /* a refused half: the whole warp */
        const double xs = cl + ox, ys = r + (oy + 0.5 * hh);
        const int mb = xt_tube_fac_maybe(&P, &F, &MB, xs, ys);
        if (!__any_sync(FULL, mb)) continue; /* no sub-ray of the half can meet the tube */
        any = 1;
        if (mb) {
          double co, ci;
          xt_tube_fac_chords(&P, &F, xs, ys, &co, &ci);
          sw += co - ci;
          sl += ci;
        }
      }
      if (!any) continue; /* every chord of the pixel is 0: the whole warp */
      splat_pixel(sw, sl, lum, lane, cl, r, cols, tcols, nch, t, io ? x->mu_io : t->mu_lumen, ww, wl, acc, flag);
    }
  }
}

/* A warp per segment. (A grid of a few blocks an SM whose warps went on to further segments, to
 * share the SMs with the voxel kernel under XT_INSTR_SIDE, was measured slower: 2026-12-07,
 * docs/BENCHMARKS.md.) */
__global__ void __launch_bounds__(32 * SPLAT_WARPS, SPLAT_BLOCKS_SM)
    k_instr_splat(const unsigned char *desc, const __grid_constant__ instr_tab tab, int nch, int cols, int rows,
                  int tcols, unsigned long long *__restrict__ acc, unsigned char *__restrict__ flag) {
  const int k = blockIdx.x * SPLAT_WARPS + (threadIdx.x >> 5);
  if (k < tab.total) splat_segment(k, desc, tab, nch, cols, rows, tcols, acc, flag);
}

/* ------------------------------------------------------------------------------------------ */
/* The run splat (XT_INSTR_SPLAT=run)                                                         */
/* ------------------------------------------------------------------------------------------ */

#define RUN_WARPS 4     /* a block per run: its warps split the footprint */
#define RUN_BLOCKS_SM 4 /* 122 registers (ptxas -v, sm_90), no spills; 5 blocks spilled 44 bytes */

/* A block's shared part of the run splat: its segments' factored closed forms (xt_tube_pre, the
 * family's numbers), the bounding segment's and its span test's constants, the pick's table. */
typedef struct run_smem {
  xt_tube_pre P[XT_TUBE_RUN];
  xt_tube_fam F[XT_TUBE_RUN];
  xt_tube_pre vP;
  xt_tube_fam vF;
  xt_tube_maybe vM;
  double ib;
  float tlo[XT_TUBE_RUN], thi[XT_TUBE_RUN];
  unsigned short bin[XT_TUBE_RUN_BINS];
} run_smem;

/* A block per run (xt_tube.h: up to XT_TUBE_RUN consecutive segments of one material); on the bench's
 * ten wires ~1,260 runs, ~820 of them in the field: a warp each would be less than one wave of an
 * H100's warp slots, so the kernel would wait on its largest footprints. The footprint and the
 * candidate halves are the run's bounding segment v's, as k_instr_splat's are a segment's (v holds
 * every segment's solid, so a half refused for v has no sub-ray that meets any of them); every warp
 * forms the footprint (the same numbers), and warp w takes its passes of 32 pixels w, w + RUN_WARPS,
 * ... The preamble runs on the threads at once: thread j forms segment j's closed-form constants for
 * this source, the second warp's lane 0 v's and its span test's, its lanes the pick's table. Then for
 * each candidate half each lane takes one sub-ray: its axial positions within v's cylinder
 * (xt_tube_fac_span) pick the one or two segments whose extents it reaches (xt_tube_run_pick), and
 * only those get the closed form, from their constants in shared memory; a segment not picked has
 * chords exactly 0 for that sub-ray. The pixel's sums over its halves' sub-rays and the run's
 * segments then take one butterfly and one atomic (or one a channel), where k_instr_splat paid a
 * pass of the warp per (half, segment) and a butterfly per (pixel, segment): on the bench's scene
 * 62,000 passes a frame for 286,000, 21,000 pixel sums for 63,000 (xtwin-instr-bench --count). The
 * sums: each lane's chords in the order of its halves and segments, then the fixed butterfly tree,
 * so frames are reproducible bit for bit; the same non-zero terms as the CPU reference, grouped
 * otherwise (a pixel's mean to ~1e-16 relative, then 2^-32). */
__global__ void __launch_bounds__(32 * RUN_WARPS, RUN_BLOCKS_SM)
    k_instr_splat_run(const unsigned char *desc, const __grid_constant__ instr_tab tab, int nch, int cols, int rows,
                      int tcols, unsigned long long *__restrict__ acc, unsigned char *__restrict__ flag) {
  const int k = blockIdx.x, lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  if (k >= tab.rtotal) return; /* the whole block */
  int mi = 0;
  while (k >= tab.rfirst[mi + 1]) mi++;
  const instr_head *h = (const instr_head *)desc;
  const instr_xf *x = (const instr_xf *)(desc + sizeof(instr_head)) + mi;
  const xt_tube_run *R = tab.run[mi] + (k - tab.rfirst[mi]);
  const xt_tube_seg *v = &R->v;
  const float *w = tab.w[mi];
  if (!(x->scale > 0.0)) return; /* a singular placement (instr_fill_frame zeroes w2m): nothing, as the CPU */
  int fp[4];
  double fe;
  if (!splat_footprint(h, x, v, lane, cols, rows, fp, &fe)) return; /* every warp alike: the whole block */
  const int ca = fp[0], cb = fp[1], ra = fp[2], rb = fp[3];
  const xt_cuda_camera &c = h->cam;
  const int S = XT_INSTR_AREA_SAMPLES;
  static_assert(XT_INSTR_AREA_SAMPLES == 8, "the run splat: a half's sub-rays are one pass of 32 lanes");
  static_assert(XT_TUBE_RUN <= 32 && RUN_WARPS >= 2 && XT_TUBE_RUN_BINS == 64,
                "the run splat's preamble: the first warp's lanes the segments, the second's v and the bins");
  __shared__ run_smem sm;
  const int n = R->n;
  if (wi == 0 && lane < n) { /* segment lane's constants for this source */
    splat_family(tab.seg[mi] + R->first + lane, x, h, &sm.P[lane], &sm.F[lane]);
    sm.tlo[lane] = R->tlo[lane];
    sm.thi[lane] = R->thi[lane];
  } else if (wi == 1) {
    ((unsigned *)sm.bin)[lane] = ((const unsigned *)R->bin)[lane]; /* two bins a lane */
    if (lane == 0) { /* v's, and the span test's for the footprint's sub-pixel centres */
      sm.ib = R->ib;
      splat_family(v, x, h, &sm.vP, &sm.vF);
      const double xm = fmax(fabs(ca - 0.5), fabs(cb + 0.5)), ym = fmax(fabs(ra - 0.5), fabs(rb + 0.5));
      xt_tube_fac_maybe_prep(&sm.vP, &sm.vF, xm, ym, 0.5 * (ca + cb), 0.5 * (ra + rb), &sm.vM);
    }
  }
  __syncthreads();
  const int io = v->lumen == x->lumen_io; /* the run's one lumen (xt_tube_mu_lumen) */
  const double e = hypot(0.5 * c.pu, 0.25 * c.pv) * x->scale * fe * (1.0 + 1e-9) + 1e-9;
  const int fw = cb - ca + 1;
  const long long np = (long long)fw * (rb - ra + 1);
  const int lum = R->lum;
  const float ww = lane < nch ? w[v->wall * XT_MAX_CHANNELS + lane] : 0.f;
  const float wl = lane < nch ? w[v->lumen * XT_MAX_CHANNELS + lane] : 0.f;
  const double ox = ((lane % S) + 0.5) / S - 0.5, oy = ((lane / S) + 0.5) / S - 0.5; /* k_instr_splat's */
  for (long long base = 32 * wi; base < np; base += 32 * RUN_WARPS) {
    int pcl, prw;
    unsigned h0, h1;
    splat_candidates(&sm.vP, &sm.vF, e, base, np, fw, ca, ra, lane, &pcl, &prw, &h0, &h1);
    for (unsigned bits = h0 | h1; bits; bits &= bits - 1) {
      const int bi = __ffs(bits) - 1;
      const int cl = __shfl_sync(FULL, pcl, bi), r = __shfl_sync(FULL, prw, bi);
      double sw = 0.0, sl = 0.0;
      for (int hh = 0; hh < 2; hh++) {
        if (!((hh ? h1 : h0) >> bi & 1)) continue; /* a refused half: the whole warp */
        const double xs = cl + ox, ys = r + (oy + 0.5 * hh);
        double t0, t1;
        unsigned pick = 0u;
        if (xt_tube_fac_span(&sm.vP, &sm.vF, &sm.vM, xs, ys, &t0, &t1))
          pick = xt_tube_run_pick(sm.bin, sm.ib, sm.tlo, sm.thi, n, t0, t1);
        for (; pick; pick &= pick - 1) { /* this lane's segments, in order */
          const int j = __ffs(pick) - 1;
          double co, ci;
          xt_tube_fac_chords(&sm.P[j], &sm.F[j], xs, ys, &co, &ci);
          sw += co - ci;
          sl += ci;
        }
      }
      if (!__any_sync(FULL, sw != 0.0 || sl != 0.0)) continue; /* every chord of the pixel is 0 */
      splat_pixel(sw, sl, lum, lane, cl, r, cols, tcols, nch, v, io ? x->mu_io : v->mu_lumen, ww, wl, acc, flag);
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* The compact splat (XT_INSTR_SPLAT=compact)                                                 */
/* ------------------------------------------------------------------------------------------ */

/* A segment's part of the compact splat: its instrument, its footprint on the detector (ca..cb x
 * ra..rb, fw columns wide, np pixels) and the factored closed form's constants (P, F), as
 * k_instr_splat's preamble forms them (above; the same code, kept there inline: moved into this
 * function, k_instr_splat took 134 registers instead of 131). splat_setup fills it; 0: nothing of
 * this segment reaches the detector. */
typedef struct splat_seg {
  xt_tube_pre P;
  xt_tube_fam F;
  const xt_tube_seg *t;
  int mi;   /* its instrument: the frame's instr_xf and the channel rows (fewer registers than pointers) */
  double e; /* xt_tube_fac_near's margin */
  int ca, cb, ra, rb, fw;
  int io;   /* this segment's lumen is the region whose iodine the frame carries */
  long long np;
} splat_seg;

/* The footprint (splat_footprint) and the segment's constants; the whole warp returns the same. */
static __device__ __forceinline__ int splat_setup(const unsigned char *desc, const instr_tab &tab, int cols, int rows,
                                                  int k, int lane, splat_seg *g) {
  int mi = 0;
  while (k >= tab.first[mi + 1]) mi++;
  const instr_head *h = (const instr_head *)desc;
  const instr_xf *x = (const instr_xf *)(desc + sizeof(instr_head)) + mi;
  const xt_tube_seg *t = tab.seg[mi] + (k - tab.first[mi]);
  g->mi = mi;
  g->t = t;
  if (!(x->scale > 0.0)) return 0; /* a singular placement (instr_fill_frame zeroes w2m): nothing, as the CPU */
  int fp[4];
  double fe;
  if (!splat_footprint(h, x, t, lane, cols, rows, fp, &fe)) return 0;
  const int ca = fp[0], cb = fp[1], ra = fp[2], rb = fp[3];
  const xt_cuda_camera &c = h->cam;
  /* the candidates' margin and the factored closed form's constants: k_instr_splat's comments */
  splat_family(t, x, h, &g->P, &g->F);
  g->io = t->lumen == x->lumen_io;
  g->e = hypot(0.5 * c.pu, 0.25 * c.pv) * x->scale * fe * (1.0 + 1e-9) + 1e-9;
  g->ca = ca, g->cb = cb, g->ra = ra, g->rb = rb;
  g->fw = cb - ca + 1;
  g->np = (long long)g->fw * (rb - ra + 1);
  return 1;
}

/* warps per block, one segment each, as k_instr_splat: 128 registers (ptxas -v, sm_90; with the
 * carried run's sums in registers instead of s_cw, s_cl: 138, 12 warps an SM) leave room for 15 */
#define COMPACT_WARPS 3
#define SPLAT_RING 64 /* survivors queued a warp: < 32 left over + one pass of 32 */

/* Footprint pixel p's sums (sw: the wall's chords, sl: the lumen's, over its sub-rays) into the
 * accumulator, by one lane, with the formulas of k_instr_splat: its mean, or each channel's (the
 * channels one after another: the lanes emit different pixels at once). */
static __device__ __forceinline__ void splat_emit(const unsigned char *desc, const instr_tab &tab, const splat_seg &g,
                                                  int p, double sw, double sl, int nch, int cols, int rows, int tcols,
                                                  unsigned long long *__restrict__ acc,
                                                  unsigned char *__restrict__ flag) {
  if (sw == 0.0 && sl == 0.0) return;
  const double inv = 1.0 / ((double)XT_INSTR_AREA_SAMPLES * XT_INSTR_AREA_SAMPLES);
  const int cl = g.ca + p % g.fw, r = g.ra + p / g.fw;
  const size_t px = (size_t)r * cols + cl;
  flag[(r / TILE) * tcols + cl / TILE] = 1;
  const xt_tube_seg *t = g.t;
  if (!nch) {
    const instr_xf *x = (const instr_xf *)(desc + sizeof(instr_head)) + g.mi;
    const double v = (t->mu_wall * sw + (g.io ? x->mu_io : t->mu_lumen) * sl) * inv;
    atomicAdd(&acc[px], (unsigned long long)llrint(v * FIX_SCALE));
    return;
  }
  for (int c = 0; c < nch; c++) {
    const float *w = tab.w[g.mi];
    const double v =
        (sw * (double)w[t->wall * XT_MAX_CHANNELS + c] + sl * (double)w[t->lumen * XT_MAX_CHANNELS + c]) * inv;
    if (v != 0.0) atomicAdd(&acc[px * nch + c], (unsigned long long)llrint(v * FIX_SCALE));
  }
}

/* k_instr_splat's sums with less of the warp idle (one warp per segment, the same footprint and
 * candidate halves). For each candidate half the 32 lanes test one sub-ray each with a cheap
 * division-free bound of the closed form (xt_tube_fac_maybe: the cylinder, its span within the ray
 * and the mitres, loosened so that it never refuses a sub-ray with a chord; on the bench's scene it
 * passes 1.18 M sub-rays a frame for 1.15 M with a chord, xtwin-instr-bench --count), and
 * the ones that pass are queued (footprint pixel, sub-ray) in a per-warp ring in shared memory, in
 * pixel order, across pixels and across the 32-pixel passes; each time 32 are queued the lanes take
 * one each through the full closed form (all 32 busy on hits, where k_instr_splat's pass waits on
 * its ~12 hits with ~20 lanes idle), then a segmented scan (5 shuffle steps, the keys sorted) sums
 * each pixel's run within the batch: the last lane of each run emits that pixel (splat_emit), and
 * the batch's last run is carried (its sums in shared memory) to the next batch (its pixel may go on there) and
 * emitted when a batch starts on another pixel, or at the end. So the shuffles are paid per batch of
 * 32 survivors, not per candidate pixel, and the emits of a batch's pixels run in parallel lanes.
 * The same non-zero FP64 terms per pixel as k_instr_splat (a refused or unqueued sub-ray has chords
 * exactly 0), summed in another order (the scan's tree and the carry, deterministic: the same
 * frame bit for bit on every run): a pixel's mean may differ from k_instr_splat's in its last bits
 * (~1e-16 relative), which changes its fixed-point value (2^-32) only when v 2^32 lies within
 * ~1e-7 of a half-integer. Shared memory: 5 bytes a ring entry, 16 for the carry and 48 for the
 * pre-test's constants, 1,152 bytes a block of 3 warps. */
__global__ void __launch_bounds__(32 * COMPACT_WARPS)
    k_instr_splat_compact(const unsigned char *desc, const __grid_constant__ instr_tab tab, int nch, int cols, int rows,
                          int tcols, unsigned long long *__restrict__ acc, unsigned char *__restrict__ flag) {
  __shared__ int s_pix[COMPACT_WARPS][SPLAT_RING];
  __shared__ unsigned char s_sub[COMPACT_WARPS][SPLAT_RING];
  __shared__ double s_cw[COMPACT_WARPS], s_cl[COMPACT_WARPS]; /* the carried run's sums */
  __shared__ xt_tube_maybe s_mb[COMPACT_WARPS];                /* the pre-test's constants */
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int k = blockIdx.x * COMPACT_WARPS + wid;
  if (k >= tab.total) return; /* the whole warp */
  splat_seg g;
  if (!splat_setup(desc, tab, cols, rows, k, lane, &g)) return;
  int *qp = s_pix[wid];
  unsigned char *qs = s_sub[wid];
  const int S = XT_INSTR_AREA_SAMPLES, HALF = S * S / 2;
  static_assert(XT_INSTR_AREA_SAMPLES % 2 == 0 && XT_INSTR_AREA_SAMPLES * XT_INSTR_AREA_SAMPLES / 2 <= 32,
                "the compact splat pre-tests a half's sub-rays in one pass of 32 lanes");
  const unsigned below = (1u << lane) - 1u;
  const int fw = g.fw, ca = g.ca, ra = g.ra;
  const int np = (int)g.np; /* at most the detector's pixels */
  if (lane == 0) { /* the pre-test's constants: the sub-pixel centres' largest |x| and |y|, the centre */
    const double xm = fmax(fabs(ca - 0.5), fabs(g.cb + 0.5)), ym = fmax(fabs(ra - 0.5), fabs(g.rb + 0.5));
    xt_tube_fac_maybe_prep(&g.P, &g.F, xm, ym, 0.5 * (ca + g.cb), 0.5 * (ra + g.rb), &s_mb[wid]);
  }
  __syncwarp();
  int head = 0, nq = 0; /* the ring's entries head .. head + nq - 1 (mod SPLAT_RING) */
  int cpix = -1;         /* the carried run's pixel, -1 none; its sums in s_cw, s_cl */
  int base = -32, half = 0; /* the cursor: the pass of 32 pixels, and the half of its first candidate */
  unsigned h0 = 0, h1 = 0, bits = 0;
  for (;;) { /* warp-uniform: one candidate half queued, then a batch when 32 wait (or the last) */
    while (!bits && base + 32 < np) { /* the next 32 pixels' candidate halves, as k_instr_splat */
      base += 32;
      int near0 = 0, near1 = 0;
      if (base + lane < np) {
        const int cl = ca + (base + lane) % fw, r = ra + (base + lane) / fw;
        near0 = xt_tube_fac_near(&g.P, &g.F, cl, r - 0.25, g.e);
        near1 = xt_tube_fac_near(&g.P, &g.F, cl, r + 0.25, g.e);
      }
      h0 = __ballot_sync(FULL, near0);
      h1 = __ballot_sync(FULL, near1);
      bits = h0 | h1;
      half = 0;
    }
    int p = -1;
    if (bits) { /* the candidate half (p, half): its 32 sub-rays pre-tested, the survivors queued */
      const int bi = __ffs(bits) - 1;
      if (half == 0 && !((h0 >> bi) & 1)) half = 1;
      p = base + bi;
      const int q = half * HALF + lane;
      int ok = 0;
      if (lane < HALF) {
        const int cl = ca + p % fw, r = ra + p / fw;
        const double xs = cl + ((q % S) + 0.5) / S - 0.5, ys = r + ((q / S) + 0.5) / S - 0.5;
        ok = xt_tube_fac_maybe(&g.P, &g.F, &s_mb[wid], xs, ys);
      }
      const unsigned m = __ballot_sync(FULL, ok);
      if (ok) {
        const int at = (head + nq + __popc(m & below)) % SPLAT_RING;
        qp[at] = p;
        qs[at] = (unsigned char)q;
      }
      nq += __popc(m);
      if (half == 0 && ((h1 >> bi) & 1)) half = 1; /* its other half next */
      else bits &= bits - 1, half = 0;
    }
    if (nq < 32 && !(p < 0 && nq > 0)) {
      if (p < 0) break; /* nothing queued, nothing left */
      continue;
    }
    /* a batch: 32 survivors, or the last ones; lane i the i-th in pixel order */
    __syncwarp();
    const int nb = nq < 32 ? nq : 32;
    int kp = -1;
    double dw = 0.0, dl = 0.0;
    if (lane < nb) {
      const int at = (head + lane) % SPLAT_RING;
      kp = qp[at];
      const int q = qs[at];
      const int cl = ca + kp % fw, r = ra + kp / fw;
      const double xs = cl + ((q % S) + 0.5) / S - 0.5, ys = r + ((q / S) + 0.5) / S - 0.5;
      double co, ci;
      xt_tube_fac_chords(&g.P, &g.F, xs, ys, &co, &ci);
      dw = co - ci;
      dl = ci;
    }
    __syncwarp(); /* every entry read before the next passes overwrite the ring */
    head = (head + nb) % SPLAT_RING;
    nq -= nb;
    if (cpix >= 0) { /* the carried run: going on in this batch's first run, or complete */
      if (__shfl_sync(FULL, kp, 0) == cpix) {
        if (lane == 0) dw = s_cw[wid] + dw, dl = s_cl[wid] + dl;
      } else if (lane == 0) {
        splat_emit(desc, tab, g, cpix, s_cw[wid], s_cl[wid], nch, cols, rows, tcols, acc, flag);
      }
    }
    for (int d = 1; d < 32; d <<= 1) { /* segmented inclusive scan: the keys are sorted, -1 past nb */
      const double uw = __shfl_up_sync(FULL, dw, d), ul = __shfl_up_sync(FULL, dl, d);
      const int uk = __shfl_up_sync(FULL, kp, d);
      if (lane >= d && uk == kp) dw += uw, dl += ul;
    }
    const int kn = __shfl_down_sync(FULL, kp, 1);
    if (lane < nb - 1 && kn != kp) /* a run ends within the batch: its pixel is complete */
      splat_emit(desc, tab, g, kp, dw, dl, nch, cols, rows, tcols, acc, flag);
    cpix = __shfl_sync(FULL, kp, nb - 1);
    __syncwarp(); /* lane 0 has read the carry */
    if (lane == nb - 1) s_cw[wid] = dw, s_cl[wid] = dl;
    __syncwarp();
  }
  if (cpix >= 0 && lane == 0) splat_emit(desc, tab, g, cpix, s_cw[wid], s_cl[wid], nch, cols, rows, tcols, acc, flag);
}

/* One block per TILE x TILE tile of every plane. A flagged tile: the accumulator into the float
 * output (written or added, as the pipeline says), then back to zero with its flag for the next
 * frame. An unflagged tile's accumulator is zero already: added, nothing to do; written, zeros.
 * The accumulator holds a pixel's planes together (the fused voxel kernel's reads and the splat's
 * atomics want them so), the output plane by plane: each thread reads its pixel's planes. */
__global__ void __launch_bounds__(TILE * TILE)
    k_instr_finish(unsigned long long *__restrict__ acc, float *__restrict__ out, unsigned char *__restrict__ flag,
                   int cols, int rows, int tcols, int planes, int accumulate) {
  const int tile = blockIdx.x;
  const int on = flag[tile];
  if (!on && accumulate) return; /* the whole block */
  __syncthreads();               /* every thread has read the flag before it is cleared */
  if (on && threadIdx.x == 0) flag[tile] = 0;
  const int cl = (tile % tcols) * TILE + (threadIdx.x % TILE), r = (tile / tcols) * TILE + threadIdx.x / TILE;
  if (cl >= cols || r >= rows) return;
  const size_t plane = (size_t)rows * cols, px = (size_t)r * cols + cl;
  for (int p = 0; p < planes; p++) {
    const size_t i = p * plane + px, ia = px * planes + p;
    if (!on) {
      out[i] = 0.0f;
      continue;
    }
    const float v = (float)((double)(long long)acc[ia] * (1.0 / FIX_SCALE));
    out[i] = accumulate ? out[i] + v : v;
    acc[ia] = 0ull;
  }
}

/* The accumulator and flags for L's detector and planes, grown with them, never per frame; zero, as
 * every finish (or the fused voxel kernel and the pipeline's flag clear) leaves them. */
static int instr_ensure(instr_state *s, const xt_cuda_launch *L, size_t planes, int ntiles, xt_msg *msg) {
  const size_t plane = (size_t)L->rows * L->cols;
  if (s->acc_n >= plane * planes && s->flag_n >= (size_t)ntiles) return 0;
  const size_t an = plane * planes > s->acc_n ? plane * planes : s->acc_n;
  CK(cudaStreamSynchronize(L->stream));
  cudaFree(s->d_acc);
  cudaFree(s->d_flag);
  s->d_acc = NULL;
  s->d_flag = NULL;
  s->acc_n = s->flag_n = 0;
  CK(cudaMalloc((void **)&s->d_acc, sizeof(unsigned long long) * an));
  CK(cudaMemsetAsync(s->d_acc, 0, sizeof(unsigned long long) * an, L->stream));
  CK(cudaMalloc((void **)&s->d_flag, (size_t)ntiles));
  CK(cudaMemsetAsync(s->d_flag, 0, (size_t)ntiles, L->stream));
  s->acc_n = an;
  s->flag_n = (size_t)ntiles;
  return 0;
}

/* Staged shapes go up ahead of the launch's kernels; the splat's table of them. */
static int instr_upload(instr_state *s, const xt_cuda_launch *L, instr_tab *tab, xt_msg *msg) {
  memset(tab, 0, sizeof *tab);
  tab->n = s->n;
  for (int i = 0; i < s->n; i++) {
    instr_one *o = &s->in[i];
    if (o->pending >= 0) {
      CK(cudaMemcpyAsync(o->d_seg, o->h_seg, sizeof(xt_tube_seg) * (size_t)o->pending, cudaMemcpyHostToDevice, L->stream));
      if (o->pending_run > 0)
        CK(cudaMemcpyAsync(o->d_run, o->h_run, sizeof(xt_tube_run) * (size_t)o->pending_run, cudaMemcpyHostToDevice,
                           L->stream));
      CK(cudaEventRecord(o->ev, L->stream));
      o->nseg = o->pending;
      o->nrun = o->pending_run;
      o->pending = -1;
    }
    tab->seg[i] = o->d_seg;
    tab->run[i] = o->d_run;
    tab->w[i] = o->d_w;
    tab->first[i + 1] = tab->first[i] + (o->nseg > 0 ? o->nseg : 0);
    tab->rfirst[i + 1] = tab->rfirst[i] + (o->nrun > 0 ? o->nrun : 0);
  }
  for (int i = s->n; i < XT_CUDA_MAX_INSTR; i++) { /* the scans stop at n */
    tab->first[i + 1] = tab->first[s->n];
    tab->rfirst[i + 1] = tab->rfirst[s->n];
  }
  tab->total = tab->first[s->n];
  tab->rtotal = tab->rfirst[s->n];
  return 0;
}

/* One frame's splat, by the kernel chosen at create (XT_INSTR_SPLAT); the caller checks the launch. */
static void splat_launch(const instr_state *s, const xt_cuda_launch *L, const unsigned char *desc, const instr_tab *tab,
                         int tcols) {
  if (s->splat == SPLAT_RUN) {
    if (tab->rtotal < 1) return; /* every instrument has a segment, so a run: not reached */
    k_instr_splat_run<<<tab->rtotal, 32 * RUN_WARPS, 0, L->stream>>>(desc, *tab, L->nch, L->cols, L->rows, tcols, s->d_acc,
                                                              s->d_flag);
  } else if (s->splat == SPLAT_COMPACT) {
    const int blocks = (tab->total + COMPACT_WARPS - 1) / COMPACT_WARPS;
    k_instr_splat_compact<<<blocks, 32 * COMPACT_WARPS, 0, L->stream>>>(desc, *tab, L->nch, L->cols, L->rows, tcols,
                                                                         s->d_acc, s->d_flag);
  } else {
    const int blocks = (tab->total + SPLAT_WARPS - 1) / SPLAT_WARPS;
    k_instr_splat<<<blocks, 32 * SPLAT_WARPS, 0, L->stream>>>(desc, *tab, L->nch, L->cols, L->rows, tcols, s->d_acc,
                                                              s->d_flag);
  }
}

static void finish_launch(const instr_state *s, const xt_cuda_launch *L, float *out, int tcols, int ntiles, int planes) {
  k_instr_finish<<<ntiles, TILE * TILE, 0, L->stream>>>(s->d_acc, out, s->d_flag, L->cols, L->rows, tcols, planes,
                                                       L->accumulate);
}

static int instr_render(void *st, const xt_cuda_launch *L, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  const size_t plane = (size_t)L->rows * L->cols, planes = L->nch ? (size_t)L->nch : 1;
  if (L->spectral) return xt_fail(msg, XT_EUNSUPPORTED, "cuda instruments: no spectral sums");
  if (L->count) {
    if (!L->accumulate) CK(cudaMemsetAsync(L->d_out, 0, sizeof(float) * plane * planes * L->nf, L->stream));
    return 0;
  }
  if (L->nch && L->nch != s->nch) return xt_fail(msg, XT_EINVAL, "cuda instruments: channels not set for %d planes", L->nch);
  const int tcols = (L->cols + TILE - 1) / TILE, ntiles = tcols * ((L->rows + TILE - 1) / TILE);
  int rc = instr_ensure(s, L, planes, ntiles, msg);
  instr_tab tab;
  if (!rc) rc = instr_upload(s, L, &tab, msg);
  if (rc) return rc;
  const size_t fb = frame_bytes_n(s->n);
  for (int j = 0; j < L->nf; j++) {
    const unsigned char *desc = (const unsigned char *)L->d_desc + fb * (size_t)j;
    if (tab.total > 0) {
      splat_launch(s, L, desc, &tab, tcols);
      CK(cudaGetLastError());
    }
    finish_launch(s, L, L->d_out + plane * planes * (size_t)j, tcols, ntiles, (int)planes);
    CK(cudaGetLastError());
  }
  return 0;
}

/* The splat of one frame without its finish (xt_cuda_kind_ops.splat): fused, the voxel kernel
 * consumes the accumulator where the flags say and the pipeline clears the flags; beside the other
 * kinds (XT_INSTR_SIDE), instr_finish follows. */
static int instr_splat(void *st, const xt_cuda_launch *L, xt_cuda_instr_acc *out, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  if (L->nf != 1 || L->count || (L->nch && L->nch != s->nch))
    return xt_fail(msg, XT_EINTERNAL, "cuda instruments: a splat alone is one frame of the set channels");
  const int tcols = (L->cols + TILE - 1) / TILE, ntiles = tcols * ((L->rows + TILE - 1) / TILE);
  int rc = instr_ensure(s, L, L->nch ? (size_t)L->nch : 1, ntiles, msg);
  instr_tab tab;
  if (!rc) rc = instr_upload(s, L, &tab, msg);
  if (rc) return rc;
  if (tab.total > 0) {
    splat_launch(s, L, (const unsigned char *)L->d_desc, &tab, tcols);
    CK(cudaGetLastError());
  }
  out->acc = s->d_acc;
  out->flag = s->d_flag;
  out->tcols = tcols;
  out->nflags = ntiles;
  return 0;
}

static int instr_finish(void *st, const xt_cuda_launch *L, xt_msg *msg) {
  const instr_state *s = (const instr_state *)st;
  const int tcols = (L->cols + TILE - 1) / TILE, ntiles = tcols * ((L->rows + TILE - 1) / TILE);
  if (L->nf != 1 || !s->d_acc) return xt_fail(msg, XT_EINTERNAL, "cuda instruments: a finish without its splat");
  finish_launch(s, L, L->d_out, tcols, ntiles, L->nch ? L->nch : 1);
  CK(cudaGetLastError());
  return 0;
}

/* Each instrument's channel rows for the set cs, the medium's row subtracted (as proj_cpu_instr.c). */
static int instr_set_channels(void *st, const xt_chanset *cs, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  xt_voxel_chan *vc = (xt_voxel_chan *)malloc(sizeof *vc);
  float *rows = (float *)malloc(sizeof(float) * 256 * XT_MAX_CHANNELS);
  int rc = vc && rows ? 0 : xt_fail(msg, XT_ENOMEM, "cuda instruments: out of memory");
  for (int i = 0; i < s->n && !rc; i++) {
    if ((rc = xt_voxel_chan_build(cs, s->in[i].m, vc, msg))) break;
    const int med = s->in[i].dev.medium, ci = xt_chanset_find(cs, XT_BASIS_IODINE);
    for (int l = 0; l < 256; l++)
      for (int c = 0; c < XT_MAX_CHANNELS; c++) rows[l * XT_MAX_CHANNELS + c] = vc->w[l][c] - vc->w[med][c];
    if (s->in[i].has_io && ci >= 0) /* the lumen's iodine (instr_set_iodine) */
      for (int l = 0; l < 256; l++) rows[l * XT_MAX_CHANNELS + ci] = s->in[i].io.col[l] - s->in[i].io.col[med];
    const cudaError_t e = cudaMemcpy(s->in[i].d_w, rows, sizeof(float) * 256 * XT_MAX_CHANNELS, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) rc = xt_fail(msg, XT_EDEVICE, "cuda instruments: channel rows: %s", cudaGetErrorString(e));
  }
  if (!rc) {
    s->nch = cs->n;
    s->ci = xt_chanset_find(cs, XT_BASIS_IODINE);
  }
  free(vc);
  free(rows);
  return rc;
}

/* Contrast in the lumen (docs/contrast.md): no segment is touched. The mono path takes the lumen
 * region's entry and mu (xt_iodine_instr_lumen: the double every hollow segment of that lumen had as
 * mu_lumen when this set it per segment), written into each frame's descriptor by instr_fill_frame
 * (16 bytes of the instr_xf that goes up with every frame anyway); the splat picks it for the
 * segments of that lumen (xt_tube_mu_lumen), so shapes laid out later (from the device's own table,
 * without iodine) take it too. The channel rows' iodine column (1 KB) is copied up only when it
 * changed (synchronous: xt_acq_expose sets iodine before the render, with no frame of this
 * projector in flight); set_channels rebuilds it from io. XT_ENOTFOUND when m is not one of the
 * kind's. */
static int instr_set_iodine(void *st, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  int i = 0;
  while (i < s->n && s->in[i].m != m) i++;
  if (i == s->n) return XT_ENOTFOUND;
  instr_one *o = &s->in[i];
  int id = -1;
  double mu = 0.0;
  const int rc = xt_iodine_instr_lumen(&o->dev, io, &id, &mu, msg);
  if (rc) return rc;
  const int med = o->dev.medium;
  /* the column on the device is o->io's whenever rows exist (here and instr_set_channels) */
  const int same = o->has_io && memcmp(o->io.col, io->col, sizeof io->col) == 0;
  if (!same && s->nch > 0 && s->ci >= 0) { /* the rows exist: their iodine column, medium subtracted */
    float col[256];
    for (int l = 0; l < 256; l++) col[l] = io->col[l] - io->col[med];
    CK(cudaMemcpy2D(o->d_w + s->ci, sizeof(float) * XT_MAX_CHANNELS, col, sizeof(float), sizeof(float), 256,
                    cudaMemcpyHostToDevice));
  }
  o->io = *io;
  o->has_io = 1;
  o->lumen_io = id;
  o->mu_io = mu;
  return 0;
}

const xt_cuda_kind_ops xt_cuda_kind_instr = {
    "instrument", instr_accepts, instr_create, instr_add_model, instr_nmodels, instr_frame_bytes, instr_fill_frame,
    NULL,         instr_render,  instr_destroy, instr_set_channels, instr_set_shape, instr_set_iodine,
    instr_splat,  instr_finish,
};
