/* The scatter stage's per-cell formulas (xt_scatter.h's steps 1-3), written once for the CPU
 * (stage_scatter_cpu.c) and the GPU (stage_scatter.cu). */
#ifndef XT_SCATTER_MATH_H
#define XT_SCATTER_MATH_H

#include "xt_chain_math.h"
#include "xt_exposure.h"
#include "xt_scatter.h"

/* Scatter emitted by coarse cell (ci, cj): the expected primary at its centre pixel (render grid
 * cols x rows, nch planes of A) times SPR of its water-equivalent thickness; shutters and wedges
 * applied, the grid not (it sits behind the patient). */
static XT_INLINE XT_HOSTDEV float xt_scatter_source(const xt_chain_tables *t, const xt_chain_cam *cam, const xt_collim *k,
                                                    const xt_scatter_plan *s, const float *A, int cols, int rows,
                                                    int ci, int cj) {
  int col = ci * s->cell + s->cell / 2, row = cj * s->cell + s->cell / 2;
  col = col < cols ? col : cols - 1;
  row = row < rows ? row : rows - 1;
  const size_t plane = (size_t)cols * rows, i = (size_t)row * cols + col;
  float a[XT_CHAIN_MAX_CH];
  for (int c = 0; c < XT_CHAIN_MAX_CH; c++) a[c] = c < t->nch ? A[plane * c + i] : 0.f;
  const float G = xt_pixel_geometry(cam, col, row, 1.f);
  float P, Q;
  xt_detect_expect(t, a, G, &P, &Q);
  const float F = G * t->flat1;
  const float L = P > 0.f ? logf(F / P) : 80.f;
  const float tc = xt_collim_t(k, col, row) / k->grid_tp;
  return P * tc * xt_scatter_spr(s, xt_scatter_tw(t->wa, t->wb, L));
}

/* One pass of the broad Gaussian over the coarse field (axis 0 along rows of cells, 1 along
 * columns), zero outside the detector; `gain` scales the result (the grid's scatter transmission
 * on the last pass). */
static XT_INLINE XT_HOSTDEV float xt_scatter_blur_at(const xt_scatter_plan *s, const float *in, int ci, int cj, int axis,
                                                     float gain) {
  float acc = 0.f;
  const float k = -0.5f / (s->sigma_cells * s->sigma_cells);
  for (int d = -s->radius; d <= s->radius; d++) {
    const int x = axis == 0 ? ci + d : ci, y = axis == 0 ? cj : cj + d;
    if (x < 0 || x >= s->gc || y < 0 || y >= s->gr) continue;
    acc += (s->radius ? expf(k * (float)(d * d)) : 1.f) * in[y * s->gc + x];
  }
  return acc * s->wnorm * gain;
}

#endif /* XT_SCATTER_MATH_H */
