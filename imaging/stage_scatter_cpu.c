/* Stage "scatter" on the CPU (twin of stage_scatter.cu): the coarse scatter field of a frame from
 * its material channels (xt_scatter.h): sources per cell, then the broad Gaussian along rows and
 * columns. A few thousand cells: one thread. */
#include "xt_chain_internal.h"
#include "xt_scatter_math.h"

void xt_stage_scatter_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const float *A, float *src, float *tmp,
                          float *out) {
  const xt_scatter_plan *s = &fc->sc;
  for (int j = 0; j < s->gr; j++)
    for (int i = 0; i < s->gc; i++)
      src[j * s->gc + i] = xt_scatter_source(t, &fc->cam, &fc->coll, s, A, fc->cols, fc->rows, i, j);
  for (int j = 0; j < s->gr; j++)
    for (int i = 0; i < s->gc; i++) tmp[j * s->gc + i] = xt_scatter_blur_at(s, src, i, j, 0, 1.f);
  for (int j = 0; j < s->gr; j++)
    for (int i = 0; i < s->gc; i++) out[j * s->gc + i] = xt_scatter_blur_at(s, tmp, i, j, 1, s->grid_ts * fc->mas);
}
