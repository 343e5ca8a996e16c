/* The voxel operator, its transpose and its pose derivative on the CPU (xt_adjoint.h), on the
 * reference projector's own traversal (xt_voxel_walk.h) and ray set-up (proj_cpu.c's frame_worker,
 * proj_cpu_voxel.c's voxel_walk), so that the three are one operator.
 *
 * Threads take fixed shares of the rows (row r of frame f goes to thread (f rows + r) mod T) and
 * keep private sums, added in thread order at the end: the result depends on T only, never on
 * scheduling. */
#include "xt_adjoint.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_raycast.h"
#include "xt_voxel_walk.h"

int xt_adj_grid_of_model(const xt_model *m, xt_adj_grid *out, xt_msg *msg) {
  const xt_volume *v = m ? xt_model_volume(m) : NULL;
  if (!v) return xt_fail(msg, XT_EINVAL, "adjoint: model %s is not a voxel model", m ? m->name : "(none)");
  memset(out, 0, sizeof *out);
  for (int a = 0; a < 3; a++) out->dim[a] = v->dim[a];
  out->index_to_model = v->index_to_model;
  out->placement = m->placement;
  return xt_adj_grid_validate(out, msg);
}

int xt_adj_grid_validate(const xt_adj_grid *grid, xt_msg *msg) {
  for (int a = 0; a < 3; a++)
    if (grid->dim[a] < 1 || grid->dim[a] > XT_VOLUME_MAX_DIM)
      return xt_fail(msg, XT_ERANGE, "adjoint: grid dimension %d is %d, outside [1, %d]", a, grid->dim[a],
                     XT_VOLUME_MAX_DIM);
  if ((size_t)grid->dim[0] * grid->dim[1] * grid->dim[2] > XT_VOLUME_MAX_VOXELS)
    return xt_fail(msg, XT_ETOOLARGE, "adjoint: grid of %d x %d x %d voxels is too large", grid->dim[0], grid->dim[1],
                   grid->dim[2]);
  xt_affine c = xt_aff_compose(&grid->placement, &grid->index_to_model), inv;
  if (!xt_aff_invert(&c, &inv)) return xt_fail(msg, XT_EINVAL, "adjoint: the grid's voxel-to-patient map is singular");
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if (!isfinite(c.m[i][j]) || !isfinite(c.t[i]))
        return xt_fail(msg, XT_EINVAL, "adjoint: the grid's voxel-to-patient map is not finite");
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The geometry's derivative                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* From docs/geometry.md ("Derivation"): d, u0, v0 of R = Rz(a) Rx(-b), u and v turned by gamma,
 * S = -sod d, X(c, r) = (sid - sod) d + (c - c0) pu u + (r - r0) pv v; each differentiated. */
void xt_adj_geom_velocity(const xt_geometry *g, double c, double r, xt_vec3 dS[XT_ADJ_NPARAM],
                          xt_vec3 dX[XT_ADJ_NPARAM]) {
  const double k = XT_PI / 180.0;
  const double a = g->pose.primary_deg * k, b = g->pose.secondary_deg * k, gm = g->pose.detector_rot_deg * k;
  const double sa = sin(a), ca = cos(a), sb = sin(b), cb = cos(b), sg = sin(gm), cg = cos(gm);
  const xt_vec3 u0 = xt_v3(ca, sa, 0.0), v0 = xt_v3(sa * sb, -ca * sb, -cb);
  const double sod = g->pose.sod_mm, sid = g->pose.sid_mm;
  const double cu = (c - g->c0) * g->mode.pitch_u_mm, rv = (r - g->r0) * g->mode.pitch_v_mm;
  xt_vec3 dd[3], du[3], dv[3];
  /* primary */
  dd[0] = xt_v3(ca * cb, sa * cb, 0.0);
  xt_vec3 du0 = xt_v3(-sa, ca, 0.0), dv0 = xt_v3(ca * sb, sa * sb, 0.0);
  du[0] = xt_v3_add(xt_v3_scale(du0, cg), xt_v3_scale(dv0, sg));
  dv[0] = xt_v3_add(xt_v3_scale(du0, -sg), xt_v3_scale(dv0, cg));
  /* secondary */
  dd[1] = xt_v3(-sa * sb, ca * sb, cb);
  dv0 = xt_v3(sa * cb, -ca * cb, sb);
  du[1] = xt_v3_scale(dv0, sg);
  dv[1] = xt_v3_scale(dv0, cg);
  /* detector rotation */
  dd[2] = xt_v3(0, 0, 0);
  du[2] = xt_v3_add(xt_v3_scale(u0, -sg), xt_v3_scale(v0, cg));
  dv[2] = xt_v3_add(xt_v3_scale(u0, -cg), xt_v3_scale(v0, -sg));
  for (int i = 0; i < 3; i++) {
    dS[i] = xt_v3_scale(dd[i], -sod * k);
    xt_vec3 x = xt_v3_add(xt_v3_scale(dd[i], sid - sod), xt_v3_add(xt_v3_scale(du[i], cu), xt_v3_scale(dv[i], rv)));
    dX[i] = xt_v3_scale(x, k);
  }
  for (int i = 0; i < 3; i++) {
    xt_vec3 e = xt_v3(i == 0 ? -1.0 : 0.0, i == 1 ? -1.0 : 0.0, i == 2 ? -1.0 : 0.0);
    dS[3 + i] = e;
    dX[3 + i] = e;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* The three operators over rows and threads                                                  */
/* ------------------------------------------------------------------------------------------ */

enum { OP_FORWARD, OP_BACK, OP_POSE };

typedef struct adj_job {
  int op;
  const xt_adj_grid *grid;
  const double *mu, *y;
  const xt_geometry *g;
  const xt_affine *w2c; /* per frame */
  const int *ok;        /* per frame: the map is regular */
  int n, threads;
  double *out;   /* forward */
  double *acc;   /* back: threads x voxels; pose: threads x n x 6 */
  size_t voxels;
} adj_job;

typedef struct adj_arg {
  adj_job *job;
  int t;
} adj_arg;

/* One ray's dL / dtheta (pose): crossing terms and the length's; returns L. */
static double ray_pose(const adj_job *job, const xt_affine *w2c, const double o[3], const double q[3], double len,
                       double s0, double s1, int ain, int aout, const xt_vec3 dS[XT_ADJ_NPARAM],
                       const xt_vec3 dX[XT_ADJ_NPARAM], const xt_vec3 w, double dL[XT_ADJ_NPARAM]) {
  const double *mu = job->mu;
  double dA[XT_ADJ_NPARAM][3], dB[XT_ADJ_NPARAM][3], term[XT_ADJ_NPARAM];
  for (int k = 0; k < XT_ADJ_NPARAM; k++) {
    xt_vec3 a = xt_aff_apply_dir(w2c, dS[k]), b = xt_aff_apply_dir(w2c, dX[k]);
    dA[k][0] = a.x, dA[k][1] = a.y, dA[k][2] = a.z;
    dB[k][0] = b.x, dB[k][1] = b.y, dB[k][2] = b.z;
    term[k] = 0.0;
  }
  /* (mu before - mu after) dp_a(s) / q_a at a crossing of axis a at parameter s */
#define XT_ADJ_CROSS(ax, s, jump)                                               \
  do {                                                                          \
    const double tt = (s) / len, sc = (jump) / q[ax];                          \
    for (int k = 0; k < XT_ADJ_NPARAM; k++)                                     \
      term[k] += sc * (dA[k][ax] + tt * (dB[k][ax] - dA[k][ax]));               \
  } while (0)
  xt_vwalk wk;
  xt_vwalk_init(&wk, job->grid->dim, o, q, s0, s1);
  ptrdiff_t lin;
  double seg, sx, L = 0.0;
  int cross, first = 1, pend = -1;
  double pend_s = 0.0, pend_mu = 0.0;
  while (xt_vwalk_next(&wk, &lin, &seg, &cross, &sx)) {
    const double m = mu[lin];
    if (first && ain >= 0) XT_ADJ_CROSS(ain, s0, 0.0 - m);
    if (pend >= 0) XT_ADJ_CROSS(pend, pend_s, pend_mu - m);
    first = 0;
    pend = -1;
    L += seg * m;
    if (cross >= 0 && cross < 3) {
      pend = cross;
      pend_s = sx;
      pend_mu = m;
    } else if (cross >= 3) {
      XT_ADJ_CROSS(cross - 3, sx, m);
    } else if (aout >= 0) {
      XT_ADJ_CROSS(aout, s1, m);
    }
  }
#undef XT_ADJ_CROSS
  for (int k = 0; k < XT_ADJ_NPARAM; k++) {
    const double dlen = xt_v3_dot(w, xt_v3_sub(dX[k], dS[k]));
    dL[k] = L * dlen / len - term[k];
  }
  return L;
}

static void *adj_worker(void *p) {
  adj_arg *arg = p;
  adj_job *job = arg->job;
  const int rows = job->g[0].mode.rows, cols = job->g[0].mode.cols;
  double *acc = job->acc ? job->acc + (size_t)arg->t * (job->op == OP_BACK ? job->voxels : (size_t)job->n * 6) : NULL;
  for (size_t gr = (size_t)arg->t; gr < (size_t)job->n * rows; gr += (size_t)job->threads) {
    const int f = (int)(gr / (size_t)rows), r = (int)(gr % (size_t)rows);
    const xt_geometry *g = &job->g[f];
    const xt_affine *w2c = &job->w2c[f];
    for (int c = 0; c < cols; c++) {
      const size_t k = gr * (size_t)cols + (size_t)c;
      if (job->op == OP_FORWARD) job->out[k] = 0.0;
      if (!job->ok[f]) continue;
      /* proj_cpu.c's frame_worker, then proj_cpu_voxel.c's voxel_walk */
      xt_vec3 px = xt_geom_pixel_pos(g, c, r);
      xt_vec3 d = xt_v3_sub(px, g->source);
      double len = xt_v3_norm(d);
      xt_vec3 w = xt_v3_scale(d, 1.0 / len);
      xt_vec3 oc = xt_aff_apply(w2c, g->source), qc = xt_aff_apply_dir(w2c, w);
      double o[3] = {oc.x, oc.y, oc.z}, q[3] = {qc.x, qc.y, qc.z}, s0, s1;
      int ain, aout;
      if (!xt_clip_box_axes_f64(o, q, job->grid->dim, len, &s0, &s1, &ain, &aout)) continue;
      if (job->op == OP_POSE) {
        xt_vec3 dS[XT_ADJ_NPARAM], dX[XT_ADJ_NPARAM];
        double dL[XT_ADJ_NPARAM];
        xt_adj_geom_velocity(g, c, r, dS, dX);
        ray_pose(job, w2c, o, q, len, s0, s1, ain, aout, dS, dX, w, dL);
        const double yk = job->y[k];
        for (int i = 0; i < XT_ADJ_NPARAM; i++) acc[(size_t)f * 6 + i] += yk * dL[i];
        continue;
      }
      xt_vwalk wk;
      xt_vwalk_init(&wk, job->grid->dim, o, q, s0, s1);
      ptrdiff_t lin;
      double seg, sx;
      int cross;
      if (job->op == OP_FORWARD) {
        double a = 0.0;
        while (xt_vwalk_next(&wk, &lin, &seg, &cross, &sx)) a += seg * job->mu[lin];
        job->out[k] = a;
      } else {
        const double yk = job->y[k];
        while (xt_vwalk_next(&wk, &lin, &seg, &cross, &sx)) acc[lin] += seg * yk;
      }
    }
  }
  return NULL;
}

static int run_op(adj_job *job, int threads, xt_msg *msg) {
  int rc = xt_adj_grid_validate(job->grid, msg);
  if (rc) return rc;
  if (job->n < 1) return 0;
  const int rows = job->g[0].mode.rows, cols = job->g[0].mode.cols;
  for (int f = 1; f < job->n; f++)
    if (job->g[f].mode.rows != rows || job->g[f].mode.cols != cols)
      return xt_fail(msg, XT_EINVAL, "adjoint: frame %d is %d x %d, frame 0 %d x %d: one detector size per batch", f,
                     job->g[f].mode.cols, job->g[f].mode.rows, cols, rows);
  if (threads <= 0) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    threads = nc < 1 ? 1 : (nc > 64 ? 64 : (int)nc);
  }
  if (threads > 64) threads = 64;
  if ((size_t)threads > (size_t)job->n * rows) threads = job->n * rows;
  job->voxels = (size_t)job->grid->dim[0] * job->grid->dim[1] * job->grid->dim[2];
  /* Back-projection keeps one grid per thread: fewer threads rather than more than 1 GiB of them. */
  if (job->op == OP_BACK)
    while (threads > 1 && job->voxels * sizeof(double) * (size_t)threads > ((size_t)1 << 30)) threads--;
  job->threads = threads;
  xt_affine *w2c = malloc(sizeof *w2c * (size_t)job->n);
  int *ok = malloc(sizeof *ok * (size_t)job->n);
  size_t accn = job->op == OP_BACK ? job->voxels : job->op == OP_POSE ? (size_t)job->n * 6 : 0;
  job->acc = accn ? calloc(accn * (size_t)threads, sizeof(double)) : NULL;
  if (!w2c || !ok || (accn && !job->acc)) {
    rc = xt_fail(msg, XT_ENOMEM, "adjoint: out of memory");
    goto done;
  }
  xt_model fake;
  memset(&fake, 0, sizeof fake);
  fake.placement = job->grid->placement;
  static const int zero[3] = {0, 0, 0};
  for (int f = 0; f < job->n; f++) ok[f] = xt_world_to_cell_of(&fake, &job->grid->index_to_model, zero, &job->g[f].pose, &w2c[f]);
  job->w2c = w2c;
  job->ok = ok;
  adj_arg args[64];
  pthread_t tid[64];
  int started[64] = {0};
  for (int t = 0; t < threads; t++) args[t] = (adj_arg){job, t};
  for (int t = 1; t < threads; t++) started[t] = pthread_create(&tid[t], NULL, adj_worker, &args[t]) == 0;
  adj_worker(&args[0]);
  for (int t = 1; t < threads; t++)
    if (started[t]) pthread_join(tid[t], NULL);
    else adj_worker(&args[t]); /* a thread refused: its share on this one, the same sums */
  if (job->op == OP_BACK) {
    for (size_t v = 0; v < job->voxels; v++) {
      double s = 0.0;
      for (int t = 0; t < threads; t++) s += job->acc[(size_t)t * job->voxels + v];
      job->out[v] = s;
    }
  } else if (job->op == OP_POSE) {
    for (size_t i = 0; i < (size_t)job->n * 6; i++) {
      double s = 0.0;
      for (int t = 0; t < threads; t++) s += job->acc[(size_t)t * (size_t)job->n * 6 + i];
      job->out[i] = s;
    }
  }
done:
  free(w2c);
  free(ok);
  free(job->acc);
  job->acc = NULL;
  return rc;
}

int xt_adj_forward(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, double *out, int threads,
                   xt_msg *msg) {
  adj_job job = {.op = OP_FORWARD, .grid = grid, .mu = mu, .g = g, .n = n, .out = out};
  return run_op(&job, threads, msg);
}

int xt_adj_back(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *y, double *x, int threads,
                xt_msg *msg) {
  adj_job job = {.op = OP_BACK, .grid = grid, .y = y, .g = g, .n = n, .out = x};
  if (n < 1) {
    int rc = xt_adj_grid_validate(grid, msg);
    if (rc) return rc;
    size_t nv = (size_t)grid->dim[0] * grid->dim[1] * grid->dim[2];
    for (size_t v = 0; v < nv; v++) x[v] = 0.0;
  }
  return run_op(&job, threads, msg);
}

int xt_adj_pose_grad(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, const double *y,
                     double *grad, int threads, xt_msg *msg) {
  adj_job job = {.op = OP_POSE, .grid = grid, .mu = mu, .y = y, .g = g, .n = n, .out = grad};
  return run_op(&job, threads, msg);
}

#ifndef XT_HAVE_CUDA
int xt_adj_forward_cuda(const xt_adj_grid *grid, const double *mu, const xt_geometry *g, int n, double *out,
                        int device, xt_msg *msg) {
  return xt_fail(msg, XT_ENODEV, "adjoint: this build has no CUDA backend");
}

int xt_adj_back_cuda(const xt_adj_grid *grid, const xt_geometry *g, int n, const double *y, double *x, int device,
                     xt_msg *msg) {
  return xt_fail(msg, XT_ENODEV, "adjoint: this build has no CUDA backend");
}
#endif
