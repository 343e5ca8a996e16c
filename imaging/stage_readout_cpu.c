/* Stage "readout" on the CPU (twin of stage_readout.cu): per output pixel, the charge of its 1 or
 * 2x2 render pixels summed (binning in the panel), converted to ADU, lag, the panel's gain and
 * offset (with the panel's faults since calibration: xt_panel_fault_pixel), electronic noise, defects,
 * saturation and the ADC (xt_readout_pixel). FA gets the
 * flat-field signal of an ideal panel at the pixel (xt_flat_expect over its render pixels, from the
 * frame's tables t), for the processing's log. */
#include "xt_chain_internal.h"

void xt_stage_readout_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const xt_panel_maps *m,
                          const float *D, int r0, int r1, float *lag, uint16_t *raw, float *FA) {
  const int b = fc->ro.bin, cols = fc->cols, ocols = fc->ocols;
  const size_t oplane = (size_t)ocols * fc->orows;
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < ocols; c++) {
      float x = 0.f, f = 0.f;
      for (int dy = 0; dy < b; dy++)
        for (int dx = 0; dx < b; dx++) {
          const size_t i = (size_t)(r * b + dy) * cols + (c * b + dx);
          x += D[i];
          f += xt_flat_expect(&fc->cam, fc->mas, t->flat1, fc->coll.grid_tp, c * b + dx, r * b + dy);
        }
      const size_t o = (size_t)r * ocols + c;
      float l[XT_LAG_TERMS];
      for (int k = 0; k < XT_LAG_TERMS; k++) l[k] = lag[oplane * k + o];
      xt_rng g;
      xt_rng_init(&g, fc->seed, fc->frame, (uint32_t)o, XT_RNG_READ);
      /* the panel as it is now (its faults since calibration); the processing keeps the maps */
      float gn = m->gain[o], of = m->offset[o];
      int dc = m->defect[o];
      xt_panel_fault_pixel(&fc->ro.fault, r, c, (uint32_t)o, &gn, &of, &dc);
      raw[o] = xt_readout_pixel(&fc->ro, x * fc->ro.adu_per_kev, l, gn, of, dc, &g);
      for (int k = 0; k < XT_LAG_TERMS; k++) lag[oplane * k + o] = l[k];
      FA[o] = f * fc->ro.adu_per_kev;
    }
}
