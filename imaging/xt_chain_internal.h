/* The chain object and its stages, shared by xt_chain.c (orchestration, the CPU pipeline), the CPU
 * stages (stage_*_cpu.c) and the CUDA pipeline (chain_cuda.cu). Internal to imaging/. */
#ifndef XT_CHAIN_INTERNAL_H
#define XT_CHAIN_INTERNAL_H

#include "xt_chain.h"
#include "xt_chain_math.h"
#include "xt_drc_math.h"
#include "xt_exposure.h"
#include "xt_scatter.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XT_BLUR_MAX_R 8 /* taps each side: sigma up to ~2.7 pixels */

/* A Gaussian of sigma (pixels) sampled at the integer offsets -r..r and normalised; r = ceil(3 sigma). */
typedef struct xt_blur_kernel {
  int r;
  float w[2 * XT_BLUR_MAX_R + 1];
} xt_blur_kernel;
void xt_blur_kernel_make(double sigma_px, xt_blur_kernel *k);

/* The panel's fixed pattern on the output grid: gain and offset maps and defect codes. */
typedef struct xt_panel_maps {
  int cols, rows;
  float *gain, *offset;
  uint8_t *defect;
} xt_panel_maps;
int xt_panel_maps_make(const xt_chain_params *p, int cols, int rows, xt_panel_maps *m, xt_msg *msg);
void xt_panel_maps_free(xt_panel_maps *m);

/* What a frame's stages need, on the host (the CUDA pipeline uploads it). */
typedef struct xt_chain_frame_const {
  xt_chain_cam cam;
  int cols, rows;   /* render grid */
  int ocols, orows; /* output grid */
  float mas;
  uint64_t seed, frame;
  int noise;
  xt_blur_kernel bu, bv; /* along columns (u) and rows (v) */
  xt_readout_const ro;
  xt_process_const pc;
  xt_collim coll; /* shutters, wedges, grid (issue 11: xt_exposure.h) */
  xt_scatter_plan sc; /* scatter (issue 11: xt_scatter.h); sc.field NULL: off */
} xt_chain_frame_const;

/* Whether output pixel (r, c) of a frame binned b counts: not a defect and within the open field
 * (its render pixels' corners both open: the field is a rectangle). */
static XT_INLINE XT_HOSTDEV int xt_auto_counts(const xt_collim *k, int bin, unsigned char defect, int r, int c) {
  return defect == XT_DEFECT_NONE && xt_collim_t(k, c * bin, r * bin) > 0.f &&
         xt_collim_t(k, c * bin + bin - 1, r * bin + bin - 1) > 0.f;
}

/* The spectral tables' cache (xt_chain_cache.c). */
#define XT_TAB_SLOTS 96  /* every whole kV of the loop's curve (60..125: at most 66) and 30 more */
#define XT_TAB_KEY_N 8
#define XT_DRC_BANK_KV0 60 /* the loop's curve starts at 60 kV */
#define XT_DRC_BANK_N 66   /* whole kVs 60..125 */
typedef struct xt_tab_key {
  double v[XT_TAB_KEY_N]; /* kV, anode, inherent Al, filter Al, Cu, CsI mm, CsI fill, energy bins */
} xt_tab_key;
/* The whole kVs of the loop's curve: each one's cache slot and signal per air kerma (the device
 * loop's step picks its next frame's tables here). */
typedef struct xt_drc_bank {
  int n; /* kVs XT_DRC_BANK_KV0 .. + n - 1 */
  int slot[XT_DRC_BANK_N];
  double flat_per_ugy[XT_DRC_BANK_N];
} xt_drc_bank;
typedef struct xt_tab_cache {
  xt_tab_key key[XT_TAB_SLOTS];
  xt_chain_tables tab[XT_TAB_SLOTS];
  xt_chain_info info[XT_TAB_SLOTS];
  uint64_t stamp[XT_TAB_SLOTS], clock;
  int used[XT_TAB_SLOTS];
  int enabled;            /* 0: every request builds (tests' uncached reference) */
  uint64_t hits, builds;  /* counters (tests, bench) */
  xt_drc_bank bank;       /* valid while the loop is on */
} xt_tab_cache;
int xt__tab_cache_init(xt_tab_cache **out, xt_msg *msg);
/* The slot holding the tables of p's shape at kv (built on a miss, uploaded to the device). */
int xt__tab_cache_get(xt_chain *c, const xt_chain_params *p, double kv, int *slot, xt_msg *msg);
/* Every whole kV of the loop's curve in the cache, and the bank that indexes them. */
int xt__tab_cache_bank(xt_chain *c, const xt_chain_params *p, xt_msg *msg);

struct xt_chain {
  xt_chain_params prm;
  xt_chain_info info;
  xt_proj *proj;
  xt_backend backend;
  xt_chanset cs;
  xt_tab_cache *tc;
  int slot;                  /* the cache slot of prm's tables */
  const xt_chain_tables *tab; /* = &tc->tab[slot] */
  /* dose-rate control inside the chain (xt_chain_drc_attach) */
  int drc_attached, drc_fresh; /* fresh: the loop restarts at the next frame */
  xt_drc drc;                /* the host's loop state (CPU backend; the device's record otherwise) */
  xt_chain_drc_frame rec;    /* the last frame's record */
  xt_panel_maps maps;
  xt_panel_fault fault; /* the panel's faults since calibration (xt_chain_set_panel_fault), into fc.ro */
  int threads;
  int first; /* the next frame starts the temporal filter */
  /* CPU scratch for a render grid of cols x rows (output ocols x orows) */
  int cols, rows, ocols, orows;
  float *A, *X, *T, *D, *FA, *lag, *Y, *E;
  float *M;      /* DSA mask: the mask frame's log image (issue 11) */
  float sc_buf[3][XT_SCATTER_MAX_GRID * XT_SCATTER_MAX_GRID]; /* scatter: sources, one pass, the field */
  int dsa_valid; /* M holds this run's mask */
  uint32_t whist[XT_AUTO_BINS]; /* the automatic window's histogram (CPU) */
  float wl[2];                  /* the window and level the last processed frame had */
  uint32_t saturated;           /* the last frame's raw codes at the ADC's full scale */
  uint16_t *raw;
  /* the CUDA pipeline (chain_cuda.cu), when the projector is on a GPU */
  void *dev;
  int unfused; /* 1: channel planes and the whole detect stage even where the projector could fuse the
                  spectrum integral into its march (tests compare the two; benchmarks measure both) */
  long fused_frames; /* frames whose detect stage took the fused path (tests) */
};

/* Fills the frame constants for geometry g and frame number `frame`. */
void xt_chain_frame_const_make(const xt_chain *c, const xt_geometry *g, uint64_t frame, xt_chain_frame_const *fc);

/* CPU stages, each over rows [r0, r1) of its output (the caller splits rows among threads). */
void xt_stage_detect_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const float *A, int r0, int r1,
                         float *X, float *S);
void xt_stage_blur_rows_cpu(const xt_blur_kernel *k, int cols, int rows, const float *in, int r0, int r1, float *out);
void xt_stage_blur_cols_cpu(const xt_blur_kernel *k, int cols, int rows, const float *in, int r0, int r1, float *out);
void xt_stage_readout_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const xt_panel_maps *m,
                          const float *D, int r0, int r1, float *lag, uint16_t *raw, float *FA);
void xt_stage_process_log_cpu(const xt_chain_frame_const *fc, const xt_panel_maps *m, const uint16_t *raw,
                              const float *FA, int r0, int r1, float *Y);
void xt_stage_process_auto_cpu(const xt_chain_frame_const *fc, const xt_panel_maps *m, const float *Y,
                               uint32_t *hist, float wl[2]);
void xt_stage_process_out_cpu(const xt_chain_frame_const *fc, const float *Y, int r0, int r1, uint16_t *proc);
/* Scatter (issue 11, xt_scatter.c, stage_scatter_cpu.c): the spectrum's water curve, a frame's plan, the coarse field. */
int xt_scatter_water_fit(const xt_chain_tables *t, double *wa, double *wb, xt_msg *msg);
void xt_scatter_plan_make(const xt_chain_params *p, const xt_chain_info *ci, int cols, int rows, double pitch_mm,
                          xt_scatter_plan *s);
void xt_stage_scatter_cpu(const xt_chain_tables *t, const xt_chain_frame_const *fc, const float *A, float *src, float *tmp,
                          float *out);

#ifdef XT_HAVE_CUDA
/* The device pipeline (chain_cuda.cu). */
int xt_chain_cuda_create(xt_chain *c, xt_msg *msg);
int xt_chain_cuda_upload(xt_chain *c, xt_msg *msg); /* panel maps changed */
int xt_chain_cuda_upload_slot(xt_chain *c, int slot, xt_msg *msg); /* a table cache slot was built */
int xt_chain_cuda_upload_bank(xt_chain *c, xt_msg *msg); /* the loop's bank changed */
int xt_chain_cuda_frame(xt_chain *c, const xt_geometry *g, uint64_t frame, const xt_chain_out *out, xt_msg *msg);
void xt_chain_cuda_reset(xt_chain *c);
void xt_chain_cuda_destroy(xt_chain *c);
int xt_chain_cuda_time(xt_chain *c, const xt_geometry *g, int n, int warmup, int reps, int what, double *ms,
                       xt_msg *msg);
#endif

#ifdef __cplusplus
}
#endif

#endif /* XT_CHAIN_INTERNAL_H */
