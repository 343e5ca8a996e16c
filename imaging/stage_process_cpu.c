/* Stage "process" on the CPU (twin of stage_process.cu): the frame "for presentation". Pass 1 per
 * output pixel: offset/gain correction, defect interpolation (the mean of the pixel's non-defective
 * 4-neighbours), log against the flat field, recursive temporal filter (state Y). Pass 2: edge
 * enhancement (unsharp mask against the 3x3 mean of Y) and window/level to 12 bits. */
#include "xt_chain_internal.h"

/* Attenuation of output pixel (r, c), NAN for a defective one. */
static float atten(const xt_panel_maps *m, const uint16_t *raw, const float *FA, int ocols, int r, int c) {
  const size_t o = (size_t)r * ocols + c;
  if (m->defect[o] != XT_DEFECT_NONE) return NAN;
  return xt_process_log(xt_process_correct((float)raw[o], m->gain[o], m->offset[o]), FA[o]);
}

void xt_stage_process_log_cpu(const xt_chain_frame_const *fc, const xt_panel_maps *m, const uint16_t *raw,
                              const float *FA, int r0, int r1, float *Y) {
  const int oc = fc->ocols, orr = fc->orows;
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < oc; c++) {
      float L = atten(m, raw, FA, oc, r, c);
      if (L != L) { /* defect: interpolate */
        const int nr[4] = {r, r, r - 1, r + 1}, nc[4] = {c - 1, c + 1, c, c};
        float s = 0.f;
        int n = 0;
        for (int k = 0; k < 4; k++) {
          if (nr[k] < 0 || nr[k] >= orr || nc[k] < 0 || nc[k] >= oc) continue;
          const float v = atten(m, raw, FA, oc, nr[k], nc[k]);
          if (v == v) {
            s += v;
            n++;
          }
        }
        L = n ? s / (float)n : 0.f;
      }
      const size_t o = (size_t)r * oc + c;
      Y[o] = xt_process_temporal(&fc->pc, L, Y[o]);
    }
}

void xt_stage_process_out_cpu(const xt_chain_frame_const *fc, const float *Y, int r0, int r1, uint16_t *proc) {
  const int oc = fc->ocols, orr = fc->orows;
  const float *M = fc->pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
#define YV(i) (M ? Y[i] - M[i] : Y[i])
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < oc; c++) {
      float s = 0.f;
      for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
          int y = r + dy, x = c + dx;
          y = y < 0 ? 0 : (y >= orr ? orr - 1 : y);
          x = x < 0 ? 0 : (x >= oc ? oc - 1 : x);
          s += YV((size_t)y * oc + x);
        }
      const float y0 = YV((size_t)r * oc + c);
      const float e = y0 + fc->pc.edge_gain * (y0 - s * (1.f / 9.f));
      proc[(size_t)r * oc + c] = xt_process_window(&fc->pc, e);
    }
}
#undef YV
