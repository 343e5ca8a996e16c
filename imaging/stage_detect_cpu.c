/* Stage "detect" on the CPU (twin of stage_detect.cu): per render pixel, the polychromatic
 * expectation of the absorbed energy from the material channels (inverse square and obliquity in
 * the geometry factor), the flat-field expectation, and the absorbed quanta drawn as Poisson
 * counts keyed by (seed, frame, pixel). The per-pixel formulas are xt_chain_math.h's. */
#include "xt_chain_internal.h"

void xt_stage_detect_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const float *A, int r0, int r1,
                         float *X, float *F, float *S) {
  const int cols = fc->cols;
  const size_t plane = (size_t)cols * fc->rows;
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      float a[XT_CHAIN_MAX_CH];
      for (int ch = 0; ch < XT_CHAIN_MAX_CH; ch++) a[ch] = ch < t->nch ? A[plane * ch + i] : 0.f;
      const float G = xt_pixel_geometry(&fc->cam, c, r, fc->mas);
      float s, q;
      xt_detect_expect(t, a, G, &s, &q);
      const float tc = xt_collim_t(&fc->coll, c, r); /* shutters, wedges, grid (issue 11) */
      s *= tc;
      q *= tc;
      if (fc->sc.field) { /* scatter (issue 11): its quanta at the primary's mean energy per quantum */
        const float sc = xt_scatter_at(&fc->sc, c, r);
        s += sc;
        q += sc * (t->flat2 / t->flat1);
      }
      if (S) S[i] = s;
      F[i] = G * t->flat1 * fc->coll.grid_tp; /* the flat field is calibrated with the grid in */
      if (fc->noise) {
        xt_rng g;
        xt_rng_init(&g, fc->seed, fc->frame, (uint32_t)i, XT_RNG_QUANTA);
        X[i] = xt_detect_draw(s, q, &g);
      } else {
        X[i] = s;
      }
    }
}
