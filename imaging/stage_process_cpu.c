/* Stage "process" on the CPU (twin of stage_process.cu): the frame "for presentation". Pass 1 per
 * output pixel: offset/gain correction, defect interpolation (the mean of the pixel's non-defective
 * 4-neighbours), log against the flat field, recursive temporal filter (state Y). Pass 2: edge
 * enhancement (unsharp mask against the 3x3 mean of Y) and window/level to 12 bits; between them,
 * with the automatic window, its histogram and pick (xt_chain_math.h). */
#include <string.h>

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

/* The automatic window of Y (minus the DSA mask): the histogram over the counted pixels, its
 * quantiles, window and level into wl. The histogram is the caller's (no allocation per frame). */
void xt_stage_process_auto_cpu(const xt_chain_frame_const *fc, const xt_panel_maps *m, const float *Y,
                               uint32_t *hist, float wl[2]) {
  const int oc = fc->ocols, orr = fc->orows;
  const float *M = fc->pc.dsa_mask;
  memset(hist, 0, sizeof(uint32_t) * XT_AUTO_BINS);
  unsigned n = 0;
  for (int r = 0; r < orr; r++)
    for (int c = 0; c < oc; c++) {
      const size_t o = (size_t)r * oc + c;
      if (!xt_auto_counts(&fc->coll, fc->ro.bin, m->defect[o], r, c)) continue;
      hist[xt_auto_bin(M ? Y[o] - M[o] : Y[o])]++;
      n++;
    }
  const float t[2] = {xt_auto_rank(n, XT_AUTO_Q), xt_auto_rank(n, 1.f - XT_AUTO_Q)};
  float q[2] = {0.f, 0.f};
  for (int k = 0; k < 2; k++) {
    unsigned below = 0;
    for (int b = 0; b < XT_AUTO_BINS; b++) {
      if (xt_auto_in(below, hist[b], t[k])) {
        q[k] = xt_auto_value(b, below, hist[b], t[k]);
        break;
      }
      below += hist[b];
    }
  }
  xt_auto_wl(q[0], q[1], &wl[0], &wl[1]);
}

void xt_stage_process_out_cpu(const xt_chain_frame_const *fc, const float *Y, int r0, int r1, uint16_t *proc) {
  const int oc = fc->ocols, orr = fc->orows;
  const float *M = fc->pc.dsa_mask; /* DSA: the log image minus the mask's (issue 11) */
  const float W = fc->pc.wl ? fc->pc.wl[0] : fc->pc.window, L = fc->pc.wl ? fc->pc.wl[1] : fc->pc.level;
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
      proc[(size_t)r * oc + c] = xt_process_window_wl(W, L, fc->pc.out_max, e);
    }
}
#undef YV
