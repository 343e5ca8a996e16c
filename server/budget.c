/* Work budgets (docs/server.md, "Work budgets"): the operator's bounds on what one frame may cost,
 * so that no model and no request can stall the paced stream.
 *
 * Gaussian mixtures. A mixture's render cost is set by how its Gaussians pile up on the detector:
 * the CUDA kind renders one 16 x 16-pixel tile per block, looping over every Gaussian whose
 * footprint reaches the tile, and the CPU reference walks, per ray, every Gaussian whose cut-off
 * ellipsoid the ray meets. So the figures are those of the CUDA kind's binning: the most Gaussians
 * reaching one tile (gmm_tile_budget) and the (Gaussian, tile) pairs of a frame, each pair one
 * tile's worth of term evaluations (gmm_pair_budget). They are counted here, on the host, over
 * each Gaussian's footprint bounding box, which holds the exact conic the CUDA kind bins with:
 * never fewer than the projector's own counts.
 *
 * The footprint of the cut-off ellipsoid {x : (x - c)^T S^-1 (x - c) <= k^2} under the camera
 * matrix P' (model -> (col w, row w, w)) is the conic whose dual is C* = P' Q* P'^T, with the
 * ellipsoid's dual quadric Q* = [k^2 S - c c^T, -c; -c^T, -1]: C*_ij = k^2 a_i^T S a_j - n_i n_j,
 * a_i the rows of P''s linear part, n_i = P'_i (c, 1). Its column extent is where the vertical
 * line (1, 0, -u) is tangent: C*_22 u^2 - 2 C*_02 u + C*_00 = 0; rows likewise. An ellipsoid that
 * reaches the source's plane (w - k sqrt(a_2^T S a_2) <= 0) has no bounded footprint: every tile,
 * as the CUDA kind does; one wholly behind the source reaches none.
 *
 * Pose dependence: the load check measures a set of poses around the current one (the C-arm's
 * angles, at the current distances, table and mode); the render workers measure every frame's
 * own geometry before rendering (an O(Gaussians) pass, skipped while the pose, mode and models
 * stay as last measured), so a pose the load check did not see fails that frame at once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "srv_budget.h"
#include "xt_cuda_config.h"
#include "xt_gmm.h"
#include "xt_server.h"

#define TILE_W XT_GMM_TILE_W
#define TILE_H XT_GMM_TILE_H

/* What a frame of the mixtures would cost. */
typedef struct gmm_work {
  uint32_t tile_max; /* most Gaussians reaching one tile */
  int tile_col, tile_row;
  uint64_t pairs; /* (Gaussian, tile) pairs */
  uint64_t gaussians; /* Gaussians of the mixtures measured */
} gmm_work;

static size_t grid_cells(const xt_detector_mode *mode) {
  const size_t ntx = (size_t)(mode->cols + TILE_W - 1) / TILE_W, nty = (size_t)(mode->rows + TILE_H - 1) / TILE_H;
  return (ntx + 1) * (nty + 1);
}

size_t xt_budget_grid_cells(void) {
  size_t n = 0;
  for (int i = 0; i < xt_mode_count(); i++)
    if (grid_cells(xt_mode_at(i)) > n) n = grid_cells(xt_mode_at(i));
  return n;
}

/* One mixture's footprints into the difference grid (width gw) and the pair count. */
static void gmm_bin(const xt_model *m, const xt_geometry *g, int ntx, int nty, int32_t *grid, int gw, uint64_t *pairs) {
  const xt_gmm *gm = xt_model_gmm(m);
  const xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  const xt_affine m2w = xt_aff_compose(&p2w, &m->placement);
  double A[3][3], b[3]; /* P' = P (model -> world) */
  for (int r = 0; r < 3; r++) {
    for (int c = 0; c < 3; c++) A[r][c] = g->P[r][0] * m2w.m[0][c] + g->P[r][1] * m2w.m[1][c] + g->P[r][2] * m2w.m[2][c];
    b[r] = g->P[r][0] * m2w.t[0] + g->P[r][1] * m2w.t[1] + g->P[r][2] * m2w.t[2] + g->P[r][3];
  }
  const double k2 = gm->cutoff * gm->cutoff;
  const int cols = g->mode.cols, rows = g->mode.rows;
  for (size_t i = 0; i < gm->count; i++) {
    const xt_gaussian *G = &gm->g[i];
    double R[3][3];
    xt_gmm_rotation(G->quat, R);
    double t[3][3], n[3]; /* t_i = R^T a_i: a_i^T S a_j = sum_k t_ik t_jk s_k^2 */
    for (int r = 0; r < 3; r++) {
      for (int k = 0; k < 3; k++) t[r][k] = A[r][0] * R[0][k] + A[r][1] * R[1][k] + A[r][2] * R[2][k];
      n[r] = A[r][0] * G->centre[0] + A[r][1] * G->centre[1] + A[r][2] * G->centre[2] + b[r];
    }
    const double s2[3] = {(double)G->scale[0] * G->scale[0], (double)G->scale[1] * G->scale[1],
                          (double)G->scale[2] * G->scale[2]};
#define SIG(p, q) (t[p][0] * t[q][0] * s2[0] + t[p][1] * t[q][1] * s2[1] + t[p][2] * t[q][2] * s2[2])
    const double h2 = k2 * SIG(2, 2), w = n[2];
    if (!(w > 0 || w * w < h2)) continue; /* wholly behind the source's plane */
    int tx0 = 0, tx1 = ntx - 1, ty0 = 0, ty1 = nty - 1;
    if (w > 0 && w * w > h2) { /* bounded: the conic's extents */
      const double c22 = h2 - w * w;  /* < 0 */
      const double c00 = k2 * SIG(0, 0) - n[0] * n[0], c02 = k2 * SIG(0, 2) - n[0] * w;
      const double c11 = k2 * SIG(1, 1) - n[1] * n[1], c12 = k2 * SIG(1, 2) - n[1] * w;
      const double du = sqrt(fmax(0.0, c02 * c02 - c00 * c22)), dv = sqrt(fmax(0.0, c12 * c12 - c11 * c22));
      const double u0 = (c02 + du) / c22, u1 = (c02 - du) / c22, v0 = (c12 + dv) / c22, v1 = (c12 - dv) / c22;
      if (!(u1 >= -0.5 && u0 <= cols - 0.5 && v1 >= -0.5 && v0 <= rows - 0.5)) continue; /* off the detector */
      tx0 = u0 <= 0 ? 0 : (int)(u0 / TILE_W);
      ty0 = v0 <= 0 ? 0 : (int)(v0 / TILE_H);
      tx1 = u1 >= cols - 1 ? ntx - 1 : (int)(u1 / TILE_W);
      ty1 = v1 >= rows - 1 ? nty - 1 : (int)(v1 / TILE_H);
    }
#undef SIG
    grid[ty0 * gw + tx0]++;
    grid[ty0 * gw + tx1 + 1]--;
    grid[(ty1 + 1) * gw + tx0]--;
    grid[(ty1 + 1) * gw + tx1 + 1]++;
    *pairs += (uint64_t)(tx1 - tx0 + 1) * (uint64_t)(ty1 - ty0 + 1);
  }
}

/* The work of the mixtures among models[0..n) at geometry g; grid: grid_cells(mode) ints. */
static void gmm_measure(const xt_model *const *models, int n, const xt_geometry *g, int32_t *grid, gmm_work *out) {
  const int ntx = (g->mode.cols + TILE_W - 1) / TILE_W, nty = (g->mode.rows + TILE_H - 1) / TILE_H, gw = ntx + 1;
  memset(out, 0, sizeof *out);
  memset(grid, 0, grid_cells(&g->mode) * sizeof *grid);
  for (int i = 0; i < n; i++)
    if (models[i] && xt_model_gmm(models[i])) {
      gmm_bin(models[i], g, ntx, nty, grid, gw, &out->pairs);
      out->gaussians += xt_model_gmm(models[i])->count;
    }
  if (!out->gaussians) return;
  /* the difference grid's prefix sums are the per-tile counts */
  for (int y = 0; y < nty; y++)
    for (int x = 0; x < ntx; x++) {
      int32_t v = grid[y * gw + x];
      if (x) v += grid[y * gw + x - 1];
      if (y) v += grid[(y - 1) * gw + x];
      if (x && y) v -= grid[(y - 1) * gw + x - 1];
      grid[y * gw + x] = v;
      if ((uint32_t)v > out->tile_max) {
        out->tile_max = (uint32_t)v;
        out->tile_col = x;
        out->tile_row = y;
      }
    }
}

/* The budgets against a measured frame: XT_ETOOLARGE with the budget's name and the figure. */
static int gmm_judge(const xt_server *s, const gmm_work *wk, const xt_geometry *g, const char *what, xt_msg *msg) {
  if (wk->tile_max > (uint32_t)s->cfg.gmm_tile_budget)
    return xt_fail(msg, XT_ETOOLARGE,
                   "%s: %u Gaussians reach one %dx%d-pixel tile (tile %d,%d of %s at primary %g, secondary %g deg), "
                   "over gmm_tile_budget %d",
                   what, wk->tile_max, TILE_W, TILE_H, wk->tile_col, wk->tile_row, g->mode.name, g->pose.primary_deg,
                   g->pose.secondary_deg, s->cfg.gmm_tile_budget);
  if (wk->pairs > (uint64_t)s->cfg.gmm_pair_budget)
    return xt_fail(msg, XT_ETOOLARGE,
                   "%s: %llu Gaussian-tile pairs in one frame (%s at primary %g, secondary %g deg), over "
                   "gmm_pair_budget %d",
                   what, (unsigned long long)wk->pairs, g->mode.name, g->pose.primary_deg, g->pose.secondary_deg,
                   s->cfg.gmm_pair_budget);
  return 0;
}

/* ---- at load ------------------------------------------------------------------------------- */

int xt_budget_admit(xt_server *s, xt_model **mp, xt_msg *msg) {
  xt_model *m = *mp;
  if (!m || !xt_model_gmm(m)) return 0;
  xt_budget_resolve(s); /* --model loads before the engine starts; idempotent after */
  const xt_model *models[XT_SRV_MAX_MODELS + 1];
  int n = 0;
  pthread_mutex_lock(&s->models_mu);
  for (int i = 0; i < s->nmodels && n < XT_SRV_MAX_MODELS; i++)
    if (s->models[i] && xt_model_gmm(s->models[i])) models[n++] = s->models[i];
  pthread_mutex_unlock(&s->models_mu);
  models[n++] = m;
  pthread_mutex_lock(&s->st_mu);
  const xt_pose base = s->planes[0].set.pose;
  const xt_detector_mode *mode = s->planes[0].set.mode;
  pthread_mutex_unlock(&s->st_mu);
  if (!mode) mode = xt_mode_at(0);
  int32_t *grid = malloc(grid_cells(mode) * sizeof *grid);
  if (!grid) return xt_fail(msg, XT_ENOMEM, "model %s: out of memory", m->name);
  /* the current pose first, then the C-arm's angles over its working range */
  static const double prim[] = {0, 45, -45, 90, -90}, sec[] = {0, 30, -30};
  int rc = 0;
  char what[128];
  snprintf(what, sizeof what, "model %.64s", m->name);
  for (int k = -1; k < (int)(sizeof prim / sizeof prim[0] * (sizeof sec / sizeof sec[0])) && !rc; k++) {
    xt_pose p = base;
    if (k >= 0) {
      p.primary_deg = prim[k / 3];
      p.secondary_deg = sec[k % 3];
    }
    xt_geometry g;
    xt_msg gm;
    if (xt_geom_compute(&p, mode, &g, &gm)) continue; /* a pose out of this C-arm's range */
    gmm_work wk;
    gmm_measure(models, n, &g, grid, &wk);
    rc = gmm_judge(s, &wk, &g, what, msg);
  }
  free(grid);
  if (rc) {
    xt_model_free(m);
    *mp = NULL;
  }
  return rc;
}

/* ---- per frame ----------------------------------------------------------------------------- */

int xt_budget_frame(xt_worker *w, const xt_geometry *g, xt_msg *msg) {
  int any = 0;
  for (int i = 0; i < w->nbmodels; i++) any |= xt_model_gmm(w->bmodels[i]) != NULL;
  if (!any || !w->bgrid) return 0;
  /* the last frame's pose, mode and models, measured and within budget: nothing changed */
  if (w->bok && w->bok_models == w->nbmodels && w->bok_mode == g->mode.name &&
      memcmp(&w->bok_pose, &g->pose, sizeof g->pose) == 0)
    return 0;
  w->bok = 0;
  gmm_work wk;
  gmm_measure(w->bmodels, w->nbmodels, g, w->bgrid, &wk);
  int rc = gmm_judge(w->srv, &wk, g, "frame", msg);
  if (!rc) {
    w->bok = 1;
    w->bok_models = w->nbmodels;
    w->bok_mode = g->mode.name;
    w->bok_pose = g->pose;
  }
  return rc;
}

void xt_budget_worker_model(xt_worker *w, const xt_model *m) {
  if (w->nbmodels < XT_SRV_WORKER_MODELS) w->bmodels[w->nbmodels++] = m;
}

/* ---- REST renders -------------------------------------------------------------------------- */

int xt_budget_render(const xt_server *s, const xt_detector_mode *mode, xt_msg *msg) {
  const long long px = (long long)mode->rows * mode->cols;
  if (px > s->cfg.render_pixel_budget)
    return xt_fail(msg, XT_ETOOLARGE, "render: mode %s is %d x %d = %lld pixels, over render_pixel_budget %d",
                   mode->name, mode->cols, mode->rows, px, s->cfg.render_pixel_budget);
  return 0;
}

void xt_budget_resolve(xt_server *s) {
  const int cpu = s->backend == XT_BACKEND_CPU;
  /* the backend's defaults (docs/server.md): what a frame of each costs there */
  if (!s->cfg.gmm_tile_budget) s->cfg.gmm_tile_budget = cpu ? 32768 : 131072;
  if (!s->cfg.render_pixel_budget) s->cfg.render_pixel_budget = cpu ? 1048576 : 16777216;
  if (!s->cfg.gmm_pair_budget) s->cfg.gmm_pair_budget = cpu ? 4000000 : 200000000;
}
