/* The spectral integral of material channels: the polychromatic transmission sums that the imaging
 * chain's detect stage needs per pixel, written once for the CPU twin and the chain's detect kernel;
 * the voxel kind's fused channels kernel (proj_voxel.cu, spec_sum) evaluates the same operations in
 * the same order, leaving out only FMAs that add +0, so that the fused path and the separate stage
 * are bit-identical on one device.
 *
 * It lives with the projectors because a device backend may evaluate it in the epilogue of its
 * march, while the channels are still in registers: the eight channel planes then never reach
 * memory (docs/imaging.md, "The fused detect integral"). The physics (what the weights and moments
 * are) stays with the chain (imaging/xt_chain.c builds the table). */
#ifndef XT_SPECTRAL_H
#define XT_SPECTRAL_H

#include "xt_channels.h"
#include "xt_vec.h"

#define XT_SPECTRAL_MAX_BINS 128

/* A spectral weighting, device pointers (or host pointers for the CPU function below):
 * w: nbins rows of XT_MAX_CHANNELS floats, 16-byte aligned (row b weights the channels at bin b;
 *    the chain stores (mu/rho)(E_b) log2(e), so the transmission is one 2^x), 0 past the set's n;
 * k1, k2: nbins floats each, the two moments weighted per bin. */
typedef struct xt_chan_spectral {
  int nbins;
  const float *w;
  const float *k1, *k2;
} xt_chan_spectral;

/* 2^x: one MUFU.EX2 on the GPU (relative error ~2^-22, well inside the chain's float bar); exp2f
 * on the CPU. */
static XT_INLINE XT_HOSTDEV float xt_exp2(float x) {
#ifdef __CUDA_ARCH__
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}

/* S = sum_b k1_b 2^(-sum_c w_bc a_c), Q likewise with k2, for channels a[XT_MAX_CHANNELS]. Four
 * bins at a time, then one: their exponents are independent chains of 8 FMAs (instruction-level
 * parallelism for the GPU's latency, and the loop's overhead shared), while S and Q still add bin
 * after bin, so the result is that of the plain loop over b (the CPU's SSE twin,
 * stage_detect_cpu.c, keeps that order). Bins with w = k = 0 (padding) leave S and Q unchanged, bit
 * for bit. */
static XT_INLINE XT_HOSTDEV void xt_spectral_sum(const float *w, const float *k1, const float *k2, int nbins,
                                                 const float *a, float *S, float *Q) {
  float s = 0.f, q = 0.f;
  int b = 0;
  for (; b + 3 < nbins; b += 4) {
    const float *w0 = w + (size_t)b * XT_MAX_CHANNELS;
    float m[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c = 0; c < XT_MAX_CHANNELS; c++)
      for (int j = 0; j < 4; j++) m[j] += w0[j * XT_MAX_CHANNELS + c] * a[c];
    for (int j = 0; j < 4; j++) {
      const float t = xt_exp2(-m[j]);
      s += k1[b + j] * t;
      q += k2[b + j] * t;
    }
  }
  for (; b < nbins; b++) {
    const float *w0 = w + (size_t)b * XT_MAX_CHANNELS;
    float m0 = 0.f;
    for (int c = 0; c < XT_MAX_CHANNELS; c++) m0 += w0[c] * a[c];
    const float t0 = xt_exp2(-m0);
    s += k1[b] * t0;
    q += k2[b] * t0;
  }
  *S = s;
  *Q = q;
}

#endif /* XT_SPECTRAL_H */
