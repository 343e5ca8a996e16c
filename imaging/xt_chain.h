/* The imaging chain: from a pose to the detector frame an FD20-like indirect CsI:Tl panel delivers.
 *
 *   projection   material channels A_m (projectors/, xt_channels.h)
 *   detect       per pixel: spectrum x CsI absorption x exp(-sum_m (mu/rho)_m(E) A_m) over the
 *                energy bins, inverse square and obliquity -> expected absorbed energy; absorbed
 *                quanta drawn as Poisson counts (stage_detect*)
 *   blur         CsI light spread, a Gaussian PSF, applied after the quanta are drawn (stage_blur*)
 *   readout      2x2 charge binning, lag, gain and offset maps, electronic noise, defects,
 *                saturation, 14-bit ADC -> uint16 raw frame, "for processing" (stage_readout*)
 *   process      offset/gain correction, defect interpolation, log, recursive temporal filter,
 *                edge enhancement, window/level -> uint16 frame "for presentation" (stage_process*)
 *
 * One chain object per projector; it runs on the projector's backend: the CPU stages, or on the
 * GPU one device pipeline (chain_cuda.cu) in which a frame stays on the device from the first ray to
 * the final uint16 pixels and crosses to the host once. Every parameter is a row of one table
 * (xt_chain_param_*), which drives the CLI options, the server's settings, the sidecar and docs.
 * Random draws are keyed by (seed, frame number, pixel): same seed and poses, same frames.
 * docs/imaging.md gives the models, their parameters' sources and the tests. */
#ifndef XT_CHAIN_H
#define XT_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "xt_drc_math.h"
#include "xt_proj.h"
#include "xt_spectrum.h"

typedef struct xt_chain_params {
  /* tube and exposure */
  double kv, anode_deg, inherent_al_mm, filter_al_mm, filter_cu_mm;
  double mas;      /* tube current x pulse width of one frame, mAs */
  int energy_bins; /* 0: every 1 keV bin; else merged into this many */
  /* detector */
  double csi_mm;         /* CsI:Tl thickness */
  double csi_fill;       /* packing fraction of the columnar CsI */
  double psf_mm;         /* sigma of the Gaussian light-spread PSF at the detector plane */
  double adu_per_kev;    /* conversion gain of a native pixel, ADU per keV absorbed (a resampled mode's
                          * pixel reads the mean of its native pixels' codes: xt_mode_native_mean) */
  double e_noise_adu;    /* electronic noise per read of a native pixel, rms ADU */
  double offset_adu;     /* mean dark offset */
  double offset_fpn_adu; /* its pixel-to-pixel spread (fixed pattern), rms */
  double gain_fpn;       /* relative pixel-to-pixel gain spread, rms */
  double defect_fraction; /* dead + hot pixels, fraction */
  int defect_lines;       /* dead columns */
  int lag;                /* 1: lag on */
  double lag_frac[3];     /* fraction of a frame's charge released later, per term */
  double lag_decay[3];    /* per-frame decay of each term */
  int adc_bits;
  int binning;           /* 1, or 2: 2x2 binning sums charge */
  int quantum_noise;     /* 1: Poisson quanta; 0: expected values */
  uint64_t seed;         /* the run's seed: frame noise */
  uint64_t panel_seed;   /* the panel's fixed pattern: gain, offset, defects */
  /* processing */
  double window, level;  /* attenuation units ln(flat / signal); window 0 (the default): automatic, per frame */
  double temporal_alpha; /* recursive filter weight of the new frame; 1 = off */
  double edge_gain;      /* unsharp-mask gain; 0 = off */
  /* exposure settings, dose and dose-rate control (issue 11: xt_exposure.h, xt_dose.h, xt_drc.h) */
  double pulse_ms;        /* pulse width; the tube current is mas / pulse width */
  double focal_spot_mm;   /* nominal focal spot size (reported; its blur is not modelled) */
  int grid;               /* 1: anti-scatter grid in */
  double grid_tp;         /* the grid's primary transmission */
  double shutter[4];      /* left, right, top, bottom: fraction of the field each shutter covers */
  double wedge[2];        /* left, right: fraction of the field each wedge filter covers */
  double wedge_t;         /* a wedge's transmission */
  double irp_mm;          /* interventional reference point: this far from the isocentre toward the focus */
  int protocol;           /* XT_PROTOCOL_*: the preset last applied (0 custom) */
  int drc;                /* 1: dose-rate control sets kV, pulse width and mA each frame */
  double drc_target_ngy;  /* requested detector dose per frame, nGy */
  double drc_kv_max;      /* the control curve's highest kV */
  double drc_max_step;    /* largest change of the detector dose the loop asks for in one frame, factor */
  int dsa;                /* 1: digital subtraction: the processed frame is the log image minus the mask's */
  int scatter;            /* 1: scatter kernel model on (xt_scatter.h) */
  double scatter_sigma_mm; /* sigma of the broad scatter kernel at the detector */
  double spr_200;         /* scatter-to-primary ratio behind 200 mm of water, broad beam, grid out */
  double spr_exp;         /* SPR(t) = spr_200 (t / 200 mm)^spr_exp */
  double grid_ts;         /* the grid's scatter transmission */
  /* backend */
  int cpu_exact; /* CPU backend: 1 renders the channels with the exact float64 reference, 0 with the
                  * fast march (xt_proj_render_channels_fast); no effect on the GPU */
} xt_chain_params;

/* Faults of the panel since its calibration (the server's fault injection, server/fault.c): what the
 * panel does now against what its calibration (the gain/offset maps, the defect map the processing
 * corrects and interpolates with) says. They act on the readout only, so the processing's correction
 * shows them as a real system's would: a line or cluster that died after the defect map was made is
 * not interpolated; a drifted gain or offset leaves its pattern in the processed frame. All zero
 * (on = 0): the readout is bit for bit the fault-free one. Output-grid pixels. */
typedef struct xt_panel_fault {
  int on;
  float gain_scale;        /* gain drift: the panel's gain now over its calibrated gain (1: none) */
  float stale_offset_adu;  /* stale calibration: rms of each pixel's offset drift since the maps (0: none) */
  float stale_gain;        /* ... and of its relative gain drift */
  uint64_t stale_seed;     /* keys the drift's pattern (fixed: the same in every frame) */
  int col0, ncols;         /* dead columns col0 .. col0 + ncols - 1 (ncols 0: none) */
  int row0, nrows;         /* dead rows */
  int cl_col, cl_row;      /* a dead cluster: the pixels within cl_r of (cl_col, cl_row) */
  float cl_r;              /* < 0: no cluster */
} xt_panel_fault;

xt_chain_params xt_chain_params_default(void);

/* The parameter table. */
typedef enum xt_param_type { XT_PARAM_REAL = 1, XT_PARAM_INT = 2, XT_PARAM_U64 = 3 } xt_param_type;
typedef struct xt_chain_param_info {
  const char *name; /* "kv", "lag_frac_1", ... */
  xt_param_type type;
  size_t offset; /* into xt_chain_params */
  double def, lo, hi;
  const char *unit;
  const char *help;
} xt_chain_param_info;

int xt_chain_param_count(void);
const xt_chain_param_info *xt_chain_param_at(int i);
const xt_chain_param_info *xt_chain_param_find(const char *name);
double xt_chain_param_get(const xt_chain_params *p, const xt_chain_param_info *info);
/* Sets one parameter after checking its range (integers must be whole); msg names it. */
int xt_chain_param_set(xt_chain_params *p, const char *name, double value, xt_msg *msg);
/* Ranges and cross-checks (the tube's own, lag fractions summing below 1). */
int xt_chain_params_validate(const xt_chain_params *p, xt_msg *msg);

/* What the spectrum and panel work out to (for sidecars, headers and docs). */
typedef struct xt_chain_info {
  double mean_energy_kev;   /* of the spectrum reaching the patient */
  double hvl_mm_al;
  double kerma_ugy_per_mas; /* air kerma at 1 m */
  double absorbed_fraction; /* of the incident photons, in the CsI (unattenuated beam) */
  int nbins, nch;
  char channels[256]; /* "air,soft_tissue,bone" */
  double flat_kev_per_mm2_ugy; /* absorbed energy per detector area per air kerma, unattenuated (issue 11: xt_drc.c) */
  double water_fit_a, water_fit_b; /* the spectrum's water curve ln(F/P) = a t + b t^2, t mm (xt_scatter.c) */
} xt_chain_info;

typedef struct xt_chain xt_chain;

/* Binds a chain to a projector (whose models give the channel set; add them first) and its backend. */
int xt_chain_create(const xt_chain_params *p, xt_proj *proj, xt_chain **out, xt_msg *msg);
void xt_chain_destroy(xt_chain *c);
/* New parameters (validated; the lag and temporal states are kept unless the output size changes). */
int xt_chain_set_params(xt_chain *c, const xt_chain_params *p, xt_msg *msg);
const xt_chain_params *xt_chain_get_params(const xt_chain *c);
void xt_chain_get_info(const xt_chain *c, xt_chain_info *info);
/* Worker threads of the CPU pipeline's stages (0: all cores, the default). */
void xt_chain_set_threads(xt_chain *c, int threads);
/* Lag and temporal-filter states back to zero, the DSA mask dropped (a new run). */
void xt_chain_reset(xt_chain *c);
/* DSA: the next processed frame becomes the mask (it is delivered unsubtracted; later frames are
 * its log image minus the mask's). Also happens on the first frame after dsa is switched on. */
void xt_chain_dsa_remask(xt_chain *c);

/* The panel's faults since calibration for the next frames (NULL or on = 0: none); kept until changed.
 * They act in the readout only (xt_panel_fault above); the parameters and their hash are untouched. */
void xt_chain_set_panel_fault(xt_chain *c, const xt_panel_fault *f);

/* The output frame's size for a render geometry: the detector's, halved by 2x2 binning. */
void xt_chain_out_size(const xt_chain *c, const xt_geometry *g, int *cols, int *rows);

/* What one frame delivers; NULL pointers are not produced. Sizes: raw, proc out_size; the float
 * planes the render grid's (diagnostics and tests). */
typedef struct xt_chain_out {
  uint16_t *raw;   /* "for processing": 14-bit ADC codes */
  uint16_t *proc;  /* "for presentation": 12-bit display values */
  float *expected; /* noise-free absorbed energy per render pixel, keV (before blur) */
  float *signal;   /* absorbed energy after quanta and blur, keV */
  /* 1: nobody reads proc this frame. It is still made (the recursive filter, the DSA mask and the
   * automatic window go on as if it were read), but a GPU chain leaves its pixels on the device:
   * one frame's copy less over the bus. The CPU chain writes it as ever. */
  int proc_unread;
} xt_chain_out;

/* One exposure: frame is the run's frame number (it keys the noise). Frames must come in order
 * for lag and the temporal filter to mean anything; any order is reproducible. */
int xt_chain_frame(xt_chain *c, const xt_geometry *g, uint64_t frame, const xt_chain_out *out, xt_msg *msg);

/* The window and level (attenuation units) the last processed frame was displayed with: the
 * parameters', or with `window` 0 the automatic window's from that frame's histogram (on a GPU
 * they came back with the frame). Zeros before a processed frame. */
void xt_chain_window_last(const xt_chain *c, double *window, double *level);
/* The last frame's raw pixels at the ADC's full scale (2^adc_bits - 1): the panel saturated (or a
 * hot pixel). On a GPU counted there and returned with the frame. */
uint32_t xt_chain_saturated_last(const xt_chain *c);

/* Dose-rate control inside the chain (issue 11; xt_drc.h states the loop). Attached, with the
 * `drc` parameter on, each xt_chain_frame exposes the frame at the loop's point on its curve,
 * measures its central field and moves the loop for the next frame: on a GPU the measurement is a
 * device reduction and the step a one-block kernel (xt_drc_math.h's arithmetic) that writes the next
 * frame's tables and mAs on the device, so frames need no host round trip and can be queued back to
 * back (xt_chain_time_device what 3); on the CPU the same arithmetic runs on the host. The loop
 * restarts from the parameters' kV and mAs on attaching, on xt_chain_reset and when a parameter of
 * the loop changes. Not attached (the default), the `drc` parameter only makes the chain measure
 * the field (the caller runs the loop: xt_drc_update, xt_drc_apply, xt_chain_set_params, as the
 * server does for its workers' shared loop). */
typedef struct xt_chain_drc_frame {
  double kv, mas, pulse_ms;      /* the exposure this frame had */
  uint64_t field_sum, field_n;   /* its measuring field's exact code sum and pixel count */
  xt_drc drc;                    /* the loop's state after this frame's measurement (attached only) */
} xt_chain_drc_frame;
int xt_chain_drc_attach(xt_chain *c, int on, xt_msg *msg);
/* The last frame's record (with `drc` on; zeros otherwise). On a GPU it came back with the frame. */
void xt_chain_drc_last(const xt_chain *c, xt_chain_drc_frame *r);

/* Spectral table sets built so far: the cache's misses (xt_chain_cache.c; benchmarks, tests). */
unsigned long long xt_chain_table_builds(const xt_chain *c);

/* Benchmark (CUDA chains; XT_EUNSUPPORTED otherwise): device time per frame of `reps` frames queued
 * back to back on the chain's stream (poses g[i % n], after `warmup` frames), timed with CUDA events,
 * without the copy-out. what: 0 the mono line-integral render alone (the baseline), 1 the chain to
 * the raw frame, 2 the chain to the raw and processed frames, 3 as 2 with the attached dose-rate
 * loop closed on the device every frame (its reduction and step included; XT_EINVAL unless
 * attached with `drc` on). */
int xt_chain_time_device(xt_chain *c, const xt_geometry *g, int n, int warmup, int reps, int what,
                         double *ms_per_frame, xt_msg *msg);

#endif /* XT_CHAIN_H */
