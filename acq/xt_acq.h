/* The acquisition layer (issue 23): one exposure of one plane becomes one frame record, whoever asks
 * for it (xtwin-server's workers, `xtwin render`, the benchmarks). It sits between the imaging chain
 * and projectors below and the front ends above, and is the one place where a frame's sequence is
 * written:
 *
 *   exposure      the plane's dose-rate control loop sets kV, pulse width and mAs (xt_drc_apply)
 *   geometry      the pose through the detector mode (P in both pixel conventions)
 *   render        line integrals (the mono projector) and/or the imaging chain's raw + processed
 *   measurement   the chain's measuring field -> xt_drc_update
 *   dose          xt_dose_frame, added to the plane's run totals
 *
 * Three objects, so that a second plane (biplane) is a second plane and renderer, not a second copy
 * of this code: the plane (what persists across exposures: run, dose totals, the loop), shared by a
 * server's workers under its own lock; the renderer (per worker or device: the projector it renders
 * with and the chain made on demand); and the request/record pair of one exposure. Encoding the
 * record (stream header, sidecar, PNG/NPY) belongs to the front ends and output/.
 *
 * The loop runs on the host (xt_drc_apply before the frame, xt_drc_update from the field sum that
 * comes back with it), as the server and the CLI always ran it; the chain's attached loop
 * (xt_chain_drc_attach, the device-resident step) stays the benchmark's. */
#ifndef XT_ACQ_H
#define XT_ACQ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "xt_chain.h"
#include "xt_dose.h"
#include "xt_drc.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

/* ---- the plane ------------------------------------------------------------------------------ */

/* What persists from one exposure of a plane to the next. A run (the server's acquisition start)
 * restarts the totals and the loop: the first exposure of a new run resets them. */
typedef struct xt_acq_plane_state {
  uint64_t run;         /* the run the totals and the loop belong to */
  xt_dose_totals dose;  /* the run's totals */
  xt_dose dose_last;    /* the last frame's dose */
  xt_drc drc;           /* the dose-rate control loop */
  int drc_live;         /* the loop was reset in this run (dose-rate control is on) */
} xt_acq_plane_state;

/* What a plane is set to: the pose, the detector mode and the chain's settings (the seed of the
 * run's noise among them), changed between exposures by the front end's commands and latched by
 * each exposure (xt_acq_plane_latch). */
typedef struct xt_acq_setup {
  xt_pose pose;
  uint64_t pose_seq, t_pose_ns;  /* the last pose command applied, and when it arrived */
  const xt_detector_mode *mode;
  int pixel_format;              /* the front end's delivery format, carried into the record */
  int chain;                     /* the imaging chain on */
  xt_chain_params chain_prm;     /* its settings; seed keys the run's noise with the frame counter */
} xt_acq_setup;

typedef struct xt_acq_plane {
  pthread_mutex_t mu;    /* guards st: a server's workers share the plane */
  xt_acq_plane_state st;
  /* The setting, the run and the frame counter: guarded by the owner's lock (the server's state
   * lock, which also orders commands with the exposures' time stamps), not by mu, so that a
   * command and the latch of the next exposure each see the whole setting. */
  xt_acq_setup set;
  uint64_t run;          /* the current run: a new one restarts the totals, the loop, the chain's states */
  uint64_t next_counter; /* the frame number of the plane's next exposure */
} xt_acq_plane;

void xt_acq_plane_init(xt_acq_plane *p);
void xt_acq_plane_destroy(xt_acq_plane *p);
/* A consistent copy for readers (GET /v1/dose, metrics); takes p->mu. */
void xt_acq_plane_snapshot(xt_acq_plane *p, xt_acq_plane_state *out);
/* A new run of the plane (an acquisition start): its first exposure restarts the totals, the
 * loop and the chain's states. Caller holds the owner's lock. */
void xt_acq_plane_new_run(xt_acq_plane *p);

/* ---- the renderer --------------------------------------------------------------------------- */

/* A projector (not owned) and the imaging chain on it, made on the first chain exposure and remade
 * when models were added since (the channel set may have grown). One per worker or device: not
 * shared between threads. */
/* Instruments (issue 26): the shape an exposure renders an instrument with, latched with it. */
typedef struct xt_acq_shape {
  const xt_model *model; /* the instrument model as added to the projector */
  const double *pts;     /* n x 3 model mm, tip first; read during xt_acq_expose only */
  int n;
  uint64_t version;      /* the caller's number of this shape (0: the model's own) */
} xt_acq_shape;

/* The shape versions a projector holds, one entry per instrument. Renderers on one projector share
 * one (the server's worker: plane A's and plane B's), so that a version is set once. */
#define XT_ACQ_MAX_SHAPES 32
#define XT_ACQ_MAX_IODINE_MODELS 4
typedef struct xt_acq_shape_cache {
  int n;
  const xt_model *model[XT_ACQ_MAX_SHAPES];
  uint64_t version[XT_ACQ_MAX_SHAPES];
  /* contrast (issue 26): the iodine (g/cm^3 per label) each label volume holds on the projector, so
   * that an unchanged one is not set again */
  int niodine;
  const xt_model *iodine_model[XT_ACQ_MAX_IODINE_MODELS];
  double iodine_rho[XT_ACQ_MAX_IODINE_MODELS][256];
} xt_acq_shape_cache;

/* Contrast (issue 26, docs/contrast.md): the iodine in one region (a label of a label volume) as an
 * exposure renders it, latched with it. */
typedef struct xt_acq_iodine {
  const xt_model *model; /* the label volume as added to the projector */
  int label;
  double rho_g_cm3;      /* iodine's partial density: mg I/mL / 1000 */
} xt_acq_iodine;
/* Motion (issue 26; acq/xt_motion.h): a model's map of the patient frame for one exposure. */
/* What moved an exposure's models, as the front end evaluated it (copied into the record): every
 * frame carries its motion time and phases. */
typedef struct xt_acq_motion {
  int on;                 /* 0: no motion and no model transform (the fields below are zeros) */
  double t_s;             /* the time the transforms are of (the pulse's centre; with blur, the
                             samples span the pulse around it), seconds on the motion clock */
  double cardiac_phase;   /* 0..1 from the R wave; -1: the heart is still */
  double resp_phase;      /* 0..1 from end-expiration; -1: no breathing */
  double cardiac_scale;   /* the beating models' scale at t_s (1: still) */
  double resp_mm;         /* the breathing models' displacement at t_s, mm along the axis */
  int blur_samples;       /* renders averaged across the pulse (1: none) */
  uint64_t xform_version; /* the version of the models' API transforms (0: none given) */
} xt_acq_motion;

typedef struct xt_acq_xform {
  const xt_model *model; /* as added to the projector */
  xt_affine T;           /* xt_proj_set_transform */
} xt_acq_xform;

typedef struct xt_acq_renderer {
  xt_proj *proj;
  double *blur_acc; /* motion blur's sum of intensities, grown once to the largest frame */
  size_t blur_cap;
  xt_acq_shape_cache *shapes; /* the projector's instruments' versions; NULL: the renderer's own */
  xt_acq_shape_cache own_shapes;
  xt_chain *chain;     /* NULL until a chain exposure */
  int threads;         /* the chain's CPU stage threads (as the projector's) */
  int models;          /* models on proj (xt_acq_renderer_add_model or the owner counts them) */
  int chain_models;    /* ... when the chain was made */
  uint64_t chain_run;  /* the run the chain's states (lag, temporal filter, DSA mask) belong to */
  xt_geometry *batch_g; /* xt_acq_expose_batch's geometries, side by side as the projector takes them */
  int batch_cap;
} xt_acq_renderer;

void xt_acq_renderer_init(xt_acq_renderer *r, xt_proj *proj, int threads);
/* Destroys the chain and the batch's scratch, never the projector. */
void xt_acq_renderer_free(xt_acq_renderer *r);
/* A model onto the projector, counted (the chain is remade on its next exposure). */
int xt_acq_renderer_add_model(xt_acq_renderer *r, const xt_model *m, xt_msg *msg);
/* The chain with these parameters: made (or remade) when needed, else given them when they differ.
 * They are compared through the parameter table (xt_chain_param_at), not as bytes: the struct has
 * padding, and a copy that differs there only must not rebuild the chain's spectrum tables (on the
 * GPU an upload) on every frame whose settings are drawn per frame, as a dataset's are. */
int xt_acq_renderer_chain(xt_acq_renderer *r, const xt_chain_params *p, xt_msg *msg);
/* The chain's one-off costs (tables, the panel's fixed pattern, device scratch) paid on one frame
 * of g that is thrown away; its lag and temporal states then start afresh. */
int xt_acq_renderer_warmup(xt_acq_renderer *r, const xt_chain_params *p, const xt_geometry *g, xt_msg *msg);

/* ---- one exposure --------------------------------------------------------------------------- */

/* Where an image plane's pixels live. Only host memory today (on a GPU the chain copies its frame
 * out once); the device kind is for front ends that keep frames on the GPU (DICOM, biplane). */
enum { XT_ACQ_HOST = 0, XT_ACQ_DEVICE = 1 };

/* One image plane of a frame: the caller's buffer (NULL: not made), its size, its element size. */
typedef struct xt_acq_image {
  void *data;
  int rows, cols;
  size_t elem;  /* bytes per pixel: 4 (float) or 2 (uint16) */
  int where;    /* XT_ACQ_HOST, XT_ACQ_DEVICE */
} xt_acq_image;

/* The frame record: everything known about one exposure once it is made. */
typedef struct xt_acq_frame {
  /* identity and time (CLOCK_MONOTONIC ns; those before the frame copied from the request) */
  uint64_t counter, run, pose_seq;
  uint64_t t_pose_ns, t_sched_ns, t_exposure_ns, period_ns;
  int plane, timing;               /* the plane and its pulse schedule (copied from the request) */
  uint64_t cycle, t_cycle_ns;
  uint64_t t_render_ns, t_done_ns; /* the render began (after the exposure was set), the frame was made */
  double lineint_ms, chain_ms;     /* the mono render's and the chain's time */
  int pixel_format;                /* the front end's delivery format (copied from the request) */
  /* geometry */
  xt_geometry geom;                /* P in the pixel-centre convention */
  double P_edge[3][4];             /* the same in the pixel-edge convention (xt_P_to_pixel_edge) */
  int has_placement;
  xt_affine placement;             /* the main model's placement (request.model) */
  /* the exposure: with the chain on only (zeros otherwise) */
  int chain;
  xt_chain_params prm;             /* every chain parameter as exposed: after the loop moved it */
  xt_chain_info info;
  xt_chain_drc_frame field;        /* the measuring field's sum and the exposure it had */
  double window, level;            /* the processing's window and level for this frame (the automatic
                                    * window's with `window` 0: xt_chain_window_last) */
  double measured_ngy;             /* the loop's measurement of this frame (0 with the loop off) */
  uint32_t saturated_px;           /* raw pixels at the ADC's full scale (xt_chain_saturated_last) */
  xt_dose dose;                    /* this frame's dose */
  xt_dose_totals totals;           /* the run's totals after it */
  xt_drc drc;                      /* the loop's state after it */
  int accounted;                   /* 0: a new run began while it was made; not in the totals */
  int step;                        /* the step reached (XT_ACQ_STEP_*): where an error came from */
  /* image planes: what the request's buffers callback pointed at */
  xt_acq_image lineint;            /* float line integrals, the render grid */
  xt_acq_image channels;           /* float material channels, nch planes of the render grid */
  xt_acq_image raw, proc;          /* uint16 chain frames, the output grid (binned) */
  xt_acq_motion motion;            /* the request's */
} xt_acq_frame;

enum { XT_ACQ_STEP_GEOMETRY = 1, XT_ACQ_STEP_ADMIT, XT_ACQ_STEP_BUFFERS, XT_ACQ_STEP_RENDER, XT_ACQ_STEP_CHAIN,
       XT_ACQ_STEP_DOSE, XT_ACQ_STEP_DONE };
enum {
  XT_ACQ_WANT_LINEINT = 1,   /* the mono projector's line integrals */
  XT_ACQ_WANT_CHANNELS = 2,  /* the material channels (xt_proj_render_channels) */
  XT_ACQ_WANT_CHAIN = 4,     /* the chain's raw and processed frames (request.chain must be on) */
};
enum {
  XT_ACQ_DOSE_STRICT = 1, /* a frame whose dose cannot be worked out fails (the CLI); else zeros */
  XT_ACQ_NO_RENDER = 2,   /* geometry and record only: the caller fills the pixels (transport tests) */
  /* A first exposure: the chain's temporal states (lag, the recursive filter, the DSA mask) are
   * reset before it, whatever the renderer rendered before, and then belong to request.run. For
   * frames that must depend on nothing but themselves (a dataset's, keyed by their index, rendered
   * in any order and split over any number of workers); a run's first frame gets the same without
   * it, when request.run changes. */
  XT_ACQ_FIRST_EXPOSURE = 4,
  /* Nobody reads this exposure's processed frame: it is made all the same (the chain's states go
   * on), but a GPU chain does not copy it out, and the record's proc.data comes back NULL. */
  XT_ACQ_PROC_UNREAD = 8,
};

typedef struct xt_acq_request {
  xt_pose pose;
  const xt_detector_mode *mode;
  const xt_geometry *geom;    /* a geometry the caller made (then pose and mode are not read); or NULL */
  const xt_model *model;      /* the scene's main model, for the record's placement; or NULL */
  int want;                   /* XT_ACQ_WANT_* */
  int chain;                  /* the imaging chain on: exposure, loop and dose run */
  xt_chain_params chain_prm;  /* the settings asked for (seed included); the loop moves kV, pulse, mAs */
  int pixel_format;
  int flags;                  /* XT_ACQ_DOSE_STRICT, XT_ACQ_NO_RENDER, XT_ACQ_FIRST_EXPOSURE, XT_ACQ_PROC_UNREAD */
  uint64_t counter;           /* the run's frame number: keys the chain's noise */
  uint64_t run;               /* the run it belongs to (plane totals, the loop, the chain's states) */
  uint64_t pose_seq, t_pose_ns, t_sched_ns, t_exposure_ns, period_ns; /* known before the frame */
  /* The plane (XT_STREAM_PLANE_*: 0 A, 1 B) and the pulse schedule it was exposed in (the timing
   * XT_STREAM_TIMING_*, the cycle and the cycle's start: docs/biplane.md); zeros for one plane. */
  int plane, timing;
  uint64_t cycle, t_cycle_ns;
  /* Faults (the server's injection, server/fault.c; zeros: none): the panel's since its calibration
   * (the chain's readout: xt_chain_set_panel_fault), and a generator off its nominal kV: the frame
   * is exposed (and recorded: prm.kv) at kV x kv_scale (0: nominal), after the loop set it. */
  xt_panel_fault panel_fault;
  double kv_scale;
  /* Instruments (issue 26): the shapes latched with the exposure; the projector takes each whose
   * version it does not hold (xt_proj_set_shape, before the render). nshapes 0: as they are. */
  const xt_acq_shape *shapes;
  int nshapes;
  /* Contrast (issue 26): every region's iodine at the exposure's time; the projector takes each
   * label volume's that differs from what it holds (xt_proj_set_iodine). A label volume named by
   * none of them keeps what it holds. niodine 0: as they are. */
  const xt_acq_iodine *iodine;
  int niodine;
  /* Motion (issue 26; xt_motion.h): nxforms model transforms per time sample, blur_samples samples
   * across the pulse (xforms[k * nxforms + i]: sample k, model i; 0 or 1: one sample). Sample 0's
   * are set on the projector before any render (xt_proj_set_transform; they stay set after the
   * exposure). With blur_samples > 1 the line integrals are those of the mean intensity over the
   * samples, -ln(mean_k exp(-L_k)): a detector integrates photons across the pulse; channels and
   * the chain render sample 0 only (a caller wanting the pulse's centre for those passes it there).
   * nxforms 0: the transforms as they are. */
  const xt_acq_xform *xforms;
  int nxforms, blur_samples;
  xt_acq_motion motion; /* into the record as it is */
  /* Called with the geometry before any render work (the server's work budgets); NULL: none. */
  int (*admit)(void *ctx, const xt_geometry *g, xt_msg *msg);
  /* Called once the planes' sizes are in the record: points each wanted plane's data at a buffer
   * of rows x cols x elem bytes (channels: x info.nch). Required when anything is rendered. */
  int (*buffers)(void *ctx, xt_acq_frame *f, xt_msg *msg);
  void *ctx;
} xt_acq_request;

/* The plane's next exposure as a request (zeros but the setting, the run and the next frame
 * number); xt_acq_plane_advance once it is queued, so that a refused exposure takes no number.
 * Caller holds the owner's lock. */
void xt_acq_plane_latch(const xt_acq_plane *p, xt_acq_request *q);
void xt_acq_plane_advance(xt_acq_plane *p);

/* One exposure of plane (NULL: the loop and totals are the caller's business, as a dataset's
 * independent frames are) on renderer r into the record f. On error f holds what was known (at
 * least the geometry when it could be computed); the plane is not moved by a frame that failed
 * before its render. */
int xt_acq_expose(xt_acq_plane *plane, xt_acq_renderer *r, const xt_acq_request *req, xt_acq_frame *f, xt_msg *msg);

/* n independent mono exposures on r (q[i] -> f[i]) with ONE projector call (xt_proj_render_batch):
 * on a GPU a batch keeps the device busy while frames are copied out, which n single exposures
 * cannot (a dataset's thousands of frames per second). Each q[i] wants XT_ACQ_WANT_LINEINT only,
 * with the chain off and without XT_ACQ_NO_RENDER; their geometries share one detector size.
 * lineint gets the n frames of rows x cols floats side by side (frame i at i x rows x cols):
 * memory from xt_host_alloc takes a device backend's frames without a host copy, which a buffers
 * callback per frame could not promise, so buffers is not called (admit is, per geometry, before
 * anything is rendered). Each record is xt_acq_expose's for that request (identity, geometry and
 * P_edge, lineint pointing into lineint); t_render_ns, t_done_ns and lineint_ms are the batch's,
 * as its frames are made together. On error the records up to the one that failed hold what was
 * known, later ones are not written. Contrast (q[i].iodine): each run of consecutive requests with
 * the same iodine is one projector call, after its iodine is set (as xt_acq_expose sets it), so a
 * batch of frames with one concentration stays one call. */
int xt_acq_expose_batch(xt_acq_renderer *r, const xt_acq_request *q, int n, float *lineint, xt_acq_frame *f,
                        xt_msg *msg);

/* CLOCK_MONOTONIC in ns (the server's clock too). */
uint64_t xt_acq_now_ns(void);

#endif /* XT_ACQ_H */
