/* Stage "blur" on the CPU (twin of stage_blur.cu): the CsI light spread as a separable Gaussian,
 * rows then columns, edges replicated. It runs after the quanta are drawn, so the noise it carries
 * is correlated as a scintillator's is (its NPS follows the MTF^2). */
#include "xt_chain_internal.h"

void xt_stage_blur_rows_cpu(const xt_blur_kernel *k, int cols, int rows, const float *in, int r0, int r1, float *out) {
  for (int r = r0; r < r1; r++) {
    const float *src = in + (size_t)r * cols;
    float *dst = out + (size_t)r * cols;
    for (int c = 0; c < cols; c++) {
      float s = 0.f;
      for (int j = -k->r; j <= k->r; j++) {
        int x = c + j;
        x = x < 0 ? 0 : (x >= cols ? cols - 1 : x);
        s += k->w[j + k->r] * src[x];
      }
      dst[c] = s;
    }
  }
}

void xt_stage_blur_cols_cpu(const xt_blur_kernel *k, int cols, int rows, const float *in, int r0, int r1, float *out) {
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < cols; c++) {
      float s = 0.f;
      for (int j = -k->r; j <= k->r; j++) {
        int y = r + j;
        y = y < 0 ? 0 : (y >= rows ? rows - 1 : y);
        s += k->w[j + k->r] * in[(size_t)y * cols + c];
      }
      out[(size_t)r * cols + c] = s;
    }
}
