/* Stage "detect" on the CPU (twin of stage_detect.cu): per render pixel, the polychromatic
 * expectation of the absorbed energy from the material channels (inverse square and obliquity in
 * the geometry factor), the flat-field expectation, and the absorbed quanta drawn as Poisson
 * counts keyed by (seed, frame, pixel).
 *
 * The spectrum integral is most of the CPU chain's arithmetic (bins x (channels + 2^x + 2) per
 * pixel), so it runs on 16 pixels at once (4 vectors of 4, for overlapping latencies) with the compiler's generic vectors (SSE, the x86-64
 * baseline): the same sums in the same order as xt_detect_expect (xt_chain_math.h), with 2^x
 * by Cephes' exp2f polynomial (relative error 1.5e-7, against the GPU's ex2.approx at ~2^-22); the
 * GPU/CPU bar on expected signals is 2e-5 relative (docs/imaging.md). The draws stay per pixel. */
#include <string.h>

#include "xt_chain_internal.h"

#define LANES 4 /* one SSE vector: the x86-64 baseline (wider generic vectors change the ABI without AVX) */
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int32_t vi __attribute__((vector_size(4 * LANES)));

static inline vf vsplat(float x) {
  vf v;
  for (int i = 0; i < LANES; i++) v[i] = x;
  return v;
}

/* 2^x for x in any range: 2^n 2^f, n = floor(x + 1/2), f in [-1/2, 1/2) by Cephes' exp2f polynomial;
 * 0 below 2^-126 (no denormals), x clamped to 127 above. */
static inline vf vexp2(vf x) {
  const vi keep = x >= vsplat(-126.f);
  const vi big = x > vsplat(127.f);
  x = (vf)(((vi)x & ~big) | ((vi)vsplat(127.f) & big));
  x = (vf)(((vi)x & keep) | ((vi)vsplat(0.f) & ~keep)); /* any finite value; the result is masked */
  const vf y = x + vsplat(0.5f);
  vi n = __builtin_convertvector(y, vi); /* truncation, then down to the floor */
  n += (vi)(__builtin_convertvector(n, vf) > y);
  const vf f = x - __builtin_convertvector(n, vf);
  vf p = vsplat(1.535336188319500e-4f);
  p = p * f + vsplat(1.339887440266574e-3f);
  p = p * f + vsplat(9.618437357674640e-3f);
  p = p * f + vsplat(5.550332471162809e-2f);
  p = p * f + vsplat(2.402264791363012e-1f);
  p = p * f + vsplat(6.931472028550421e-1f);
  p = p * f + vsplat(1.f);
  const vf scale = (vf)((n + 127) << 23);
  return (vf)((vi)(p * scale) & keep);
}

#define NV 4 /* vectors a call: independent 2^x chains, so their latencies overlap */
#define PIX (NV * LANES)

/* S and Q of PIX pixels whose channels are a[v][c] (xt_detect_expect without G). */
static void expect_pix(const xt_chain_tables *t, const vf (*a)[XT_CHAIN_MAX_CH], vf *S, vf *Q) {
  vf s[NV], q[NV];
  for (int v = 0; v < NV; v++) s[v] = q[v] = vsplat(0.f);
  for (int b = 0; b < t->nbins; b++) {
    const vf k1 = vsplat(t->k1[b]), k2 = vsplat(t->k2[b]);
    vf mu[NV];
    for (int v = 0; v < NV; v++) mu[v] = vsplat(0.f);
    for (int c = 0; c < t->nch; c++) {
      const vf m = vsplat(t->mr[b][c]);
      for (int v = 0; v < NV; v++) mu[v] += m * a[v][c];
    }
    for (int v = 0; v < NV; v++) {
      const vf tr = vexp2(-mu[v]);
      s[v] += k1 * tr;
      q[v] += k2 * tr;
    }
  }
  for (int v = 0; v < NV; v++) {
    S[v] = s[v];
    Q[v] = q[v];
  }
}

void xt_stage_detect_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const float *A, int r0, int r1,
                         float *X, float *S) {
  const int cols = fc->cols;
  const size_t plane = (size_t)cols * fc->rows;
  for (int r = r0; r < r1; r++)
    for (int c0 = 0; c0 < cols; c0 += PIX) {
      const int nl = cols - c0 < PIX ? cols - c0 : PIX;
      vf a[NV][XT_CHAIN_MAX_CH], vs[NV], vq[NV];
      for (int ch = 0; ch < t->nch && ch < XT_CHAIN_MAX_CH; ch++) {
        float lane[PIX] = {0};
        memcpy(lane, A + plane * ch + (size_t)r * cols + c0, sizeof(float) * (size_t)nl);
        for (int v = 0; v < NV; v++) memcpy(&a[v][ch], lane + v * LANES, sizeof(vf));
      }
      expect_pix(t, (const vf(*)[XT_CHAIN_MAX_CH])a, vs, vq);
      for (int l = 0; l < nl; l++) {
        const int c = c0 + l;
        const size_t i = (size_t)r * cols + c;
        const float G = xt_pixel_geometry(&fc->cam, c, r, fc->mas);
        float s = G * vs[l / LANES][l % LANES], q = G * vq[l / LANES][l % LANES];
        const float tc = xt_collim_t(&fc->coll, c, r); /* shutters, wedges, grid (issue 11) */
        s *= tc;
        q *= tc;
        if (fc->sc.field) { /* scatter (issue 11): its quanta at the primary's mean energy per quantum */
          const float sc = xt_scatter_at(&fc->sc, c, r);
          s += sc;
          q += sc * (t->flat2 / t->flat1);
        }
        if (S) S[i] = s;
        if (fc->noise) {
          xt_rng g;
          xt_rng_init(&g, fc->seed, fc->frame, (uint32_t)i, XT_RNG_QUANTA);
          X[i] = xt_detect_draw(s, q, &g);
        } else {
          X[i] = s;
        }
      }
    }
}
