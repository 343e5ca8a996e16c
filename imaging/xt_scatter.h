/* Scatter and the anti-scatter grid (issue 11): a thickness-dependent scatter-kernel model
 * (notes §3.9, "simplest credible": S = SPR(t_w) x (G_sigma * P)).
 *
 *   1. On a coarse grid (cells of `cell` render pixels, at most XT_SCATTER_MAX_GRID a side) the
 *      expected primary P reaching the patient's exit side is taken at each cell's centre pixel,
 *      with the flat field F there, and the water-equivalent thickness t_w solves
 *      ln(F / P) = wa t + wb t^2 (the spectrum's own polychromatic water curve, fitted per spectrum
 *      over 0..400 mm: beam hardening included).
 *   2. Each cell emits scatter P x SPR(t_w), SPR(t) = spr_200 (t / 200 mm)^spr_exp: the scatter-to-
 *      primary ratio of a broad beam behind t of water, grid out. Shutters and wedges act on the
 *      source (they shape the beam entering the patient).
 *   3. The emitted field is spread by a broad Gaussian (sigma scatter_sigma_mm at the detector),
 *      zero outside the detector (scatter leaving it is lost), and added to every pixel's expected
 *      absorbed energy, bilinear from the cell centres, times the grid's scatter transmission
 *      grid_ts with the grid in (the primary is times grid_tp). Its quanta are drawn with the
 *      primary's (variance: the primary's mean absorbed energy per quantum).
 *
 * A uniform slab on a field much wider than sigma thus shows SPR(t) at the centre, with the grid
 * SPR(t) x grid_ts / grid_tp; on a narrower field the kernel's mass inside it (the model's field-size
 * dependence: growing with the field, saturating). The SPR(t) defaults are [U]: no published SPR
 * table was reachable; the closest citable figures and the test against them are in
 * docs/imaging.md section 11. The per-pixel lookup is XT_HOSTDEV, shared by both detect stages. */
#ifndef XT_SCATTER_H
#define XT_SCATTER_H

#include "xt_vec.h"

#define XT_SCATTER_MAX_GRID 64 /* coarse cells a side */

/* What the frame's stages need: the blurred coarse field (NULL: scatter off) and its grid. */
typedef struct xt_scatter_plan {
  const float *field; /* gc x gr, keV per render pixel at the cell centres (grid factor applied) */
  int gc, gr, cell;   /* coarse grid and its cell, render pixels */
  float spr_200, spr_exp, grid_ts;
  float sigma_cells;  /* the kernel's sigma in cells */
  int radius;         /* kernel taps each side, cells */
  float wnorm;        /* 1 / sum of the 2-D kernel's weights over the infinite plane (per axis) */
} xt_scatter_plan;

/* Scatter at render pixel (col, row): bilinear in the cell centres, clamped at the edges. */
static XT_INLINE XT_HOSTDEV float xt_scatter_at(const xt_scatter_plan *s, int col, int row) {
  const float x = ((float)col + 0.5f) / (float)s->cell - 0.5f, y = ((float)row + 0.5f) / (float)s->cell - 0.5f;
  const float xc = x < 0.f ? 0.f : (x > (float)(s->gc - 1) ? (float)(s->gc - 1) : x);
  const float yc = y < 0.f ? 0.f : (y > (float)(s->gr - 1) ? (float)(s->gr - 1) : y);
  int i0 = (int)xc, j0 = (int)yc;
  if (i0 > s->gc - 2) i0 = s->gc > 1 ? s->gc - 2 : 0;
  if (j0 > s->gr - 2) j0 = s->gr > 1 ? s->gr - 2 : 0;
  const int i1 = s->gc > 1 ? i0 + 1 : i0, j1 = s->gr > 1 ? j0 + 1 : j0;
  const float fx = xc - (float)i0, fy = yc - (float)j0;
  const float *f = s->field;
  const float a = f[j0 * s->gc + i0] + fx * (f[j0 * s->gc + i1] - f[j0 * s->gc + i0]);
  const float b = f[j1 * s->gc + i0] + fx * (f[j1 * s->gc + i1] - f[j1 * s->gc + i0]);
  return a + fy * (b - a);
}

/* Water-equivalent thickness (mm) of a primary transmission ln(F/P) = L on the spectrum's fitted
 * water curve L = wa t + wb t^2 (xt_chain_tables.wa, wb: it travels with the spectrum's tables). */
static XT_INLINE XT_HOSTDEV float xt_scatter_tw(float wa, float wb, float L) {
  if (!(L > 0.f)) return 0.f;
  if (wb > -1e-12f && wb < 1e-12f) return L / wa;
  const float disc = wa * wa + 4.f * wb * L;
  const float tmax = wb < 0.f ? -wa / (2.f * wb) : 1e9f; /* the concave curve's apex */
  if (disc <= 0.f) return tmax;
  const float t = (-wa + sqrtf(disc)) / (2.f * wb);
  return t < tmax ? t : tmax;
}

/* Scatter-to-primary ratio behind t_w mm of water (broad beam, grid out). */
static XT_INLINE XT_HOSTDEV float xt_scatter_spr(const xt_scatter_plan *s, float tw) {
  return tw > 0.f ? s->spr_200 * powf(tw / 200.f, s->spr_exp) : 0.f;
}

#endif /* XT_SCATTER_H */
