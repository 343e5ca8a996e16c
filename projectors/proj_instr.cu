/* Instruments on the CUDA frame pipeline (xt_cuda_kind.h): a splat of tube segments.
 *
 *   splat   one thread per segment: in double, the segment's box (as the CPU reference bounds it)
 *           projected onto the detector gives the pixels any of whose sub-rays can meet it; for
 *           each, the XT_INSTR_AREA_SAMPLES^2 rays through its sub-pixel centres, each the closed
 *           form of xt_tube.h in double, summed into the wall's and the lumen's chord lengths; the
 *           pixel's mean - its line integral, or each channel's areal density - is added to a
 *           64-bit fixed-point accumulator (2^-32 units) by an integer atomic, so the sum does not
 *           depend on the order threads finish in: frames are reproducible bit for bit;
 *   finish  one thread per pixel: the accumulator into the float output (written or added, as the
 *           pipeline says) and back to zero for the next frame.
 *
 * The same sums as the CPU reference (proj_cpu_instr.c), grouped differently: segments per pixel
 * there, pixels per segment here; a pixel equals the reference to float rounding plus 2^-32.
 *
 * Shapes: each instrument has device and pinned staging buffers of its capacity, made at add_model.
 * set_shape lays the centreline out on the host into the staging buffer (after the previous upload
 * from it has completed) and the next render queues the copy on its stream ahead of its kernels:
 * no allocation per frame or per shape. */
#include <cuda_runtime.h>

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

typedef struct instr_xf {
  double w2m[12]; /* world -> model: m[3][3] row-major, then t[3] */
  double m2w[12];
  double scale;   /* w2m's linear part's Frobenius norm (proj_cpu_instr.c's instr_state.scale) */
  double pad;
} instr_xf;

typedef struct instr_head {
  xt_cuda_camera cam;
  double nrm[3]; /* the detector's normal u x v */
  double pad;
} instr_head;

typedef struct instr_one {
  const xt_model *m;
  xt_instr_device dev;
  xt_instr_geom geom;  /* host layout of the latest shape */
  xt_tube_seg *h_seg;  /* pinned staging */
  xt_tube_seg *d_seg;  /* device, capacity geom.cap_seg */
  float *d_w;          /* channel rows, medium subtracted: 256 x XT_MAX_CHANNELS */
  int nseg;            /* segments on the device */
  int pending;         /* staged segments not yet uploaded, -1: none */
  cudaEvent_t ev;      /* the last upload from h_seg */
  xt_iodine_tab io;    /* contrast in the lumen (instr_set_iodine), when has_io */
  int has_io;
} instr_one;

typedef struct instr_state {
  int device;
  int n;
  instr_one in[XT_CUDA_MAX_INSTR];
  unsigned long long *d_acc;
  size_t acc_n;
  int nch;
  int ci; /* the iodine channel of the last set_channels, -1: none */
} instr_state;

static size_t frame_bytes_n(int n) {
  const size_t b = sizeof(instr_head) + sizeof(instr_xf) * (size_t)n;
  return (b + 15) / 16 * 16;
}

static int instr_accepts(const xt_model *m) { return m->kind == XT_MODEL_INSTR; }

static int instr_create(const xt_cuda_options *opt, void **st, xt_msg *msg) {
  instr_state *s = (instr_state *)calloc(1, sizeof *s);
  if (!s) return xt_fail(msg, XT_ENOMEM, "cuda instruments: out of memory");
  s->device = opt->device;
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
    cudaFree(o->d_w);
    xt_instr_geom_free(&o->geom);
  }
  cudaFree(s->d_acc);
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
  int rc = xt_instr_geom_alloc(&o->dev, &o->geom, msg);
  if (!rc) rc = xt_instr_geom_build(&o->dev, I->points, I->npoints, m->name, &o->geom, msg);
  const size_t bytes = sizeof(xt_tube_seg) * (size_t)o->geom.cap_seg;
  cudaError_t e = cudaSuccess;
  if (!rc) {
    e = cudaHostAlloc((void **)&o->h_seg, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_seg, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_w, sizeof(float) * 256 * XT_MAX_CHANNELS);
    if (e == cudaSuccess) e = cudaMemset(o->d_w, 0, sizeof(float) * 256 * XT_MAX_CHANNELS);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&o->ev, cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaMemcpy(o->d_seg, o->geom.seg, sizeof(xt_tube_seg) * (size_t)o->geom.nseg, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
      rc = xt_fail(msg, XT_EDEVICE, "cuda projector: model %s: %s", m->name, cudaGetErrorString(e));
  }
  if (rc) {
    if (o->ev) cudaEventDestroy(o->ev);
    cudaFreeHost(o->h_seg);
    cudaFree(o->d_seg);
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
    CK(cudaEventSynchronize(o->ev)); /* the staging buffer's last upload is done */
    memcpy(o->h_seg, o->geom.seg, sizeof(xt_tube_seg) * (size_t)o->geom.nseg);
    o->pending = o->geom.nseg;
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
      for (int c = 0; c < 3; c++) f += w2m.m[r][c] * w2m.m[r][c];
    x[i].scale = sqrt(f);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static __device__ __forceinline__ void d_apply(const double *a, const double p[3], double out[3], int dir) {
  for (int r = 0; r < 3; r++)
    out[r] = a[3 * r] * p[0] + a[3 * r + 1] * p[1] + a[3 * r + 2] * p[2] + (dir ? 0.0 : a[9 + r]);
}

/* The detector position (continuous pixel coordinates) of world point p; 0 when p is not in front
 * of the source. */
static __device__ __forceinline__ int d_project(const instr_head *h, const double p[3], double *col, double *row) {
  const xt_cuda_camera &c = h->cam;
  const double q[3] = {p[0] - c.src[0], p[1] - c.src[1], p[2] - c.src[2]};
  const double e[3] = {c.det0[0] - c.src[0], c.det0[1] - c.src[1], c.det0[2] - c.src[2]};
  const double qn = q[0] * h->nrm[0] + q[1] * h->nrm[1] + q[2] * h->nrm[2];
  const double en = e[0] * h->nrm[0] + e[1] * h->nrm[1] + e[2] * h->nrm[2];
  if (!(qn * en > 0.0)) return 0;
  const double t = en / qn;
  const double x[3] = {c.src[0] + t * q[0] - c.det0[0], c.src[1] + t * q[1] - c.det0[1], c.src[2] + t * q[2] - c.det0[2]};
  *col = (x[0] * c.u[0] + x[1] * c.u[1] + x[2] * c.u[2]) / c.pu;
  *row = (x[0] * c.v[0] + x[1] * c.v[1] + x[2] * c.v[2]) / c.pv;
  return 1;
}

/* Whether o + s d, s in [0, len], meets the box [lo, hi] (proj_cpu_instr.c's hits_box). */
static __device__ __forceinline__ int d_hits_box(const double lo[3], const double hi[3], const double o[3],
                                                 const double d[3], double len) {
  double a = 0.0, b = len;
  for (int k = 0; k < 3; k++) {
    if (d[k] == 0.0) {
      if (o[k] < lo[k] || o[k] > hi[k]) return 0;
      continue;
    }
    const double inv = 1.0 / d[k];
    double t0 = (lo[k] - o[k]) * inv, t1 = (hi[k] - o[k]) * inv;
    if (t0 > t1) {
      const double t = t0;
      t0 = t1;
      t1 = t;
    }
    if (t0 > a) a = t0;
    if (t1 < b) b = t1;
    if (a > b) return 0;
  }
  return 1;
}

__global__ void k_instr_splat(const unsigned char *desc, int mi, const xt_tube_seg *__restrict__ segs, int nseg,
                              const float *__restrict__ w, int nch, int cols, int rows,
                              unsigned long long *__restrict__ acc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nseg) return;
  const instr_head *h = (const instr_head *)desc;
  const instr_xf *x = (const instr_xf *)(desc + sizeof(instr_head)) + mi;
  const xt_tube_seg *t = &segs[i];
  /* the footprint: the segment's box (xt_instr_seg_box's, as the CPU reference culls with), projected */
  const double c0 = xt_tube_dot(t->n0, t->d), c1 = xt_tube_dot(t->n1, t->d);
  const double grow = t->r_out / (c0 < c1 ? c0 : c1) * (1.0 + 1e-12) + 1e-12;
  double lo[3], hi[3];
  for (int k = 0; k < 3; k++) {
    const double a = t->p0[k], e = t->p0[k] + t->len * t->d[k];
    lo[k] = fmin(a, e) - grow;
    hi[k] = fmax(a, e) + grow;
  }
  double cmin = 1e30, cmax = -1e30, rmin = 1e30, rmax = -1e30;
  int whole = 0;
  for (int k = 0; k < 8; k++) {
    const double pm[3] = {k & 1 ? hi[0] : lo[0], k & 2 ? hi[1] : lo[1], k & 4 ? hi[2] : lo[2]};
    double pw[3], cc, rr;
    d_apply(x->m2w, pm, pw, 0);
    if (!d_project(h, pw, &cc, &rr)) {
      whole = 1;
      break;
    }
    cmin = fmin(cmin, cc);
    cmax = fmax(cmax, cc);
    rmin = fmin(rmin, rr);
    rmax = fmax(rmax, rr);
  }
  int ca = 0, cb = cols - 1, ra = 0, rb = rows - 1;
  if (!whole) {
    if (cmax < -1.0 || rmax < -1.0 || cmin > cols || rmin > rows) return;
    ca = max(0, (int)floor(cmin - 0.5));
    cb = min(cols - 1, (int)ceil(cmax + 0.5));
    ra = max(0, (int)floor(rmin - 0.5));
    rb = min(rows - 1, (int)ceil(rmax + 0.5));
  }
  const xt_cuda_camera &c = h->cam;
  double o[3];
  d_apply(x->w2m, c.src, o, 0);
  const int S = XT_INSTR_AREA_SAMPLES;
  const double inv = 1.0 / ((double)S * S);
  const size_t plane = (size_t)rows * cols;
  /* the pixels whose centre ray meets the segment's box grown by a pixel diagonal: the CPU
   * reference's candidates (proj_cpu_instr.c), so both sum the same segments; the others are
   * skipped without their sub-rays */
  const double e = hypot(c.pu, c.pv) * x->scale;
  for (int k = 0; k < 3; k++) {
    lo[k] -= e;
    hi[k] += e;
  }
  for (int r = ra; r <= rb; r++)
    for (int cl = ca; cl <= cb; cl++) {
      {
        const double a = cl * c.pu, b = r * c.pv;
        const double d[3] = {c.det0[0] + (c.u[0] * a + c.v[0] * b) - c.src[0],
                             c.det0[1] + (c.u[1] * a + c.v[1] * b) - c.src[1],
                             c.det0[2] + (c.u[2] * a + c.v[2] * b) - c.src[2]};
        const double len = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]), il = 1.0 / len;
        const double ww[3] = {d[0] * il, d[1] * il, d[2] * il};
        double wm[3];
        d_apply(x->w2m, ww, wm, 1);
        if (!d_hits_box(lo, hi, o, wm, len)) continue;
      }
      double sw = 0.0, sl = 0.0;
      for (int sj = 0; sj < S; sj++)
        for (int si = 0; si < S; si++) {
          const double a = (cl + (si + 0.5) / S - 0.5) * c.pu, b = (r + (sj + 0.5) / S - 0.5) * c.pv;
          const double d[3] = {c.det0[0] + (c.u[0] * a + c.v[0] * b) - c.src[0],
                               c.det0[1] + (c.u[1] * a + c.v[1] * b) - c.src[1],
                               c.det0[2] + (c.u[2] * a + c.v[2] * b) - c.src[2]};
          const double len = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]), il = 1.0 / len;
          const double ww[3] = {d[0] * il, d[1] * il, d[2] * il};
          double wm[3], co, ci;
          d_apply(x->w2m, ww, wm, 1);
          xt_tube_chords(t, o, wm, len, &co, &ci);
          sw += co - ci;
          sl += ci;
        }
      if (sw == 0.0 && sl == 0.0) continue;
      const size_t px = (size_t)r * cols + cl;
      if (!nch) {
        const double v = (t->mu_wall * sw + t->mu_lumen * sl) * inv;
        atomicAdd(&acc[px], (unsigned long long)llrint(v * FIX_SCALE));
        continue;
      }
      for (int ch = 0; ch < nch; ch++) {
        const double v = (sw * (double)w[t->wall * XT_MAX_CHANNELS + ch] + sl * (double)w[t->lumen * XT_MAX_CHANNELS + ch]) * inv;
        if (v != 0.0) atomicAdd(&acc[ch * plane + px], (unsigned long long)llrint(v * FIX_SCALE));
      }
    }
}

__global__ void k_instr_finish(unsigned long long *__restrict__ acc, float *__restrict__ out, size_t n, int accumulate) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = (float)((double)(long long)acc[i] * (1.0 / FIX_SCALE));
  out[i] = accumulate ? out[i] + v : v;
  acc[i] = 0ull;
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
  if (s->acc_n < plane * planes) { /* grows with the detector or the channel set, never per frame */
    CK(cudaStreamSynchronize(L->stream));
    cudaFree(s->d_acc);
    s->d_acc = NULL;
    s->acc_n = 0;
    CK(cudaMalloc((void **)&s->d_acc, sizeof(unsigned long long) * plane * planes));
    CK(cudaMemsetAsync(s->d_acc, 0, sizeof(unsigned long long) * plane * planes, L->stream));
    s->acc_n = plane * planes;
  }
  for (int i = 0; i < s->n; i++) { /* staged shapes go up ahead of this launch's kernels */
    instr_one *o = &s->in[i];
    if (o->pending < 0) continue;
    CK(cudaMemcpyAsync(o->d_seg, o->h_seg, sizeof(xt_tube_seg) * (size_t)o->pending, cudaMemcpyHostToDevice, L->stream));
    CK(cudaEventRecord(o->ev, L->stream));
    o->nseg = o->pending;
    o->pending = -1;
  }
  const size_t fb = frame_bytes_n(s->n);
  for (int j = 0; j < L->nf; j++) {
    const unsigned char *desc = (const unsigned char *)L->d_desc + fb * (size_t)j;
    for (int i = 0; i < s->n; i++) {
      const instr_one *o = &s->in[i];
      if (o->nseg < 1) continue;
      k_instr_splat<<<(o->nseg + 127) / 128, 128, 0, L->stream>>>(desc, i, o->d_seg, o->nseg, o->d_w, L->nch, L->cols,
                                                                  L->rows, s->d_acc);
      CK(cudaGetLastError());
    }
    const size_t n = plane * planes;
    k_instr_finish<<<(unsigned)((n + 255) / 256), 256, 0, L->stream>>>(s->d_acc, L->d_out + n * (size_t)j, n,
                                                                       L->accumulate);
    CK(cudaGetLastError());
  }
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

/* Contrast in the lumen (docs/contrast.md): data the splat already reads. The kind's copy of the
 * device table takes the iodine's mono mu, the latest shape's segments their mu_lumen from it (as
 * xt_instr_geom_build forms it; later shapes are laid out from the same table) and go up through the
 * staging buffer before the next frame, as a shape does; the channel rows' iodine column is copied
 * up (synchronous: xt_acq_expose sets iodine before the render, with no frame of this projector in
 * flight). XT_ENOTFOUND when m is not one of the kind's. */
static int instr_set_iodine(void *st, const xt_model *m, const xt_iodine_tab *io, xt_msg *msg) {
  instr_state *s = (instr_state *)st;
  int i = 0;
  while (i < s->n && s->in[i].m != m) i++;
  if (i == s->n) return XT_ENOTFOUND;
  instr_one *o = &s->in[i];
  o->io = *io;
  o->has_io = 1;
  xt_instr_device *dev = &o->dev;
  for (int l = 0; l < dev->mt.count; l++) dev->mt.mu[l] = io->mu[l];
  const double mu_med = (double)dev->mt.mu[dev->medium];
  for (int k = 0; k < o->geom.nseg; k++) {
    xt_tube_seg *t = &o->geom.seg[k];
    if (t->r_in > 0.0) t->mu_lumen = (double)dev->mt.mu[t->lumen] - mu_med;
  }
  CK(cudaEventSynchronize(o->ev)); /* the staging buffer's last upload is done */
  memcpy(o->h_seg, o->geom.seg, sizeof(xt_tube_seg) * (size_t)o->geom.nseg);
  o->pending = o->geom.nseg;
  if (s->nch > 0 && s->ci >= 0) { /* the rows exist: their iodine column, medium subtracted */
    float col[256];
    for (int l = 0; l < 256; l++) col[l] = io->col[l] - io->col[dev->medium];
    CK(cudaMemcpy2D(o->d_w + s->ci, sizeof(float) * XT_MAX_CHANNELS, col, sizeof(float), sizeof(float), 256,
                    cudaMemcpyHostToDevice));
  }
  return 0;
}

const xt_cuda_kind_ops xt_cuda_kind_instr = {
    "instrument", instr_accepts, instr_create, instr_add_model, instr_nmodels, instr_frame_bytes, instr_fill_frame,
    NULL,         instr_render,  instr_destroy, instr_set_channels, instr_set_shape, instr_set_iodine,
};
