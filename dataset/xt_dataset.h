/* `xtwin dataset`: the generator of labelled training frames (docs/dataset.md), the library
 * xt_dataset of dataset/ that the front end (tools/xt_dataset_cmd.c) and the tests use: the spec
 * (xt_dataset_spec.c), per-frame sampling (xt_dataset_sample.c), the scene and its projectors
 * (xt_dataset_scene.c), a frame's members and JSON (xt_dataset_encode.c), the output directory
 * (xt_dataset_out.c), the shards (xt_dataset_shard.c, one file per format behind
 * xt_dataset_shard.h: xt_dataset_shard_tar.c, xt_dataset_shard_folder.c) over the file-system and
 * hashing helpers (xt_dataset_fs.c, xt_dataset_hash.c), and the render/encode/write pipeline
 * (xt_dataset_run.c).
 *
 * Every frame is a pure function of (spec, frame index): its seed, pose, detector mode and model
 * perturbations come from xt_ds_sample_frame, never from the order in which frames are rendered,
 * so shards come out byte-identical whatever the sharding, the devices or a resume. */
#ifndef XT_DATASET_H
#define XT_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xt_chain.h"
#include "xt_dicom.h"
#include "xt_err.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_proj.h"

#define XT_DS_MAX_MODELS 8
#define XT_DS_MAX_CHANNELS 64 /* the segmentation mask is one bit per channel: uint64 at most */
#define XT_DS_MAX_MODES 8
#define XT_DS_MAX_VIEWS 1024
#define XT_DS_MAX_LANDMARKS 1024
#define XT_DS_MAX_FRAMES 1000000000000LL /* keys are 12 digits */
#define XT_DS_NAME_MAX 64

/* A value drawn uniformly from [lo, hi]; lo == hi is a fixed value. */
typedef struct xt_ds_range {
  double lo, hi;
} xt_ds_range;

/* ------------------------------------------------------------------------------------------ */
/* The spec                                                                                   */
/* ------------------------------------------------------------------------------------------ */

enum { XT_DS_SRC_PHANTOM = 0, XT_DS_SRC_FILE = 1, XT_DS_SRC_ELLIPSOIDS = 2 };

typedef struct xt_ds_model_spec {
  char name[XT_DS_NAME_MAX];
  int source;         /* XT_DS_SRC_* */
  char path[4096];    /* file or ellipsoid JSON, resolved against the spec's directory */
  int phantom_labels; /* phantom "head-labels" (1), "head" (0) or "thorax" (2: labels, contrast regions) */
  int voxels_labels;  /* ellipsoids: painted labels (1) or additive mu (0) */
  int size;           /* phantom / ellipsoids: voxels per side */
  double spacing_mm;
  int convert;        /* files: xt_load_convert */
  double energy_kev;  /* files: HU conversion and material table */
  int hu_linear;      /* files: HU -> mu through water only (else the bilinear calibration) */
  double ct_energy_kev; /* files: effective energy of the CT that measured the HU (bilinear) */
  int nifti_qform;    /* files: NIfTI's qform first (else the sform) */
  int nan_fill;       /* files: NaN voxels become nan_value (else they are an error) */
  double nan_value;
  char dicom_series[128]; /* files: the series to load from a DICOM folder ("" = the only one) */
  int place_native;   /* 0: bounding-box centre at the patient origin; 1: the file's coordinates */
  double offset_mm[3];
  xt_ds_range translate_mm[3]; /* per-frame (per-run on arcs) rigid perturbation, patient axes */
  xt_ds_range rotate_deg[3];   /* about patient x, y, z through the model's centre: R = Rz Ry Rx */
  int in_image;                /* 0: "role": "labels" (a segmentation: label channels only) */
  int follows;                 /* index of the model whose placement and perturbation it shares, or -1 */
} xt_ds_model_spec;

enum { XT_DS_CH_LABELS = 0, XT_DS_CH_MU = 1, XT_DS_CH_HU = 2 };

typedef struct xt_ds_channel_spec {
  char name[XT_DS_NAME_MAX];
  int model; /* index into models */
  int kind;  /* XT_DS_CH_* */
  unsigned char labels[256]; /* LABELS: 1 for each label value in the channel */
  double lo, hi;             /* MU (1/mm) or HU range, inclusive */
} xt_ds_channel_spec;

typedef struct xt_ds_landmark {
  char name[XT_DS_NAME_MAX];
  int model;     /* follows this model's placement and perturbation */
  double pos[3]; /* model frame, mm */
} xt_ds_landmark;

typedef struct xt_ds_view {
  char name[XT_DS_NAME_MAX];
  double primary_deg, secondary_deg;
} xt_ds_view;

enum { XT_DS_POSES_UNIFORM = 0, XT_DS_POSES_VIEWS = 1, XT_DS_POSES_ARC = 2 };
enum { XT_DS_QTY_PATH_LENGTH = 0, XT_DS_QTY_LINE_INTEGRAL = 1 };
/* Shard formats: indexes into the registry of shard writers (xt_dataset_shard.c). */
enum { XT_DS_FMT_TAR = 0, XT_DS_FMT_FOLDER = 1 };
/* A format's name ("tar", "folder"), and every name joined by '|' (the spec's choices). */
const char *xt_ds_format_name(int format);
const char *xt_ds_format_choices(void);

typedef struct xt_ds_pose_spec {
  int sampler; /* XT_DS_POSES_* */
  xt_ds_range primary_deg, secondary_deg, detector_rot_deg, table_mm[3];
  xt_ds_range sod_mm, sid_mm;
  int sod_set, sid_set; /* else the detector mode's distances */
  /* views */
  xt_ds_view *views;
  int nviews;
  xt_ds_range jitter_deg; /* added to both angles of a view; symmetric by default */
  /* arc: frame = run * views + view; run r spans start .. start + span in `views` steps */
  int arc_axis; /* 0 primary (propeller), 1 secondary (roll) */
  double arc_start_deg, arc_span_deg;
  int arc_views;
} xt_ds_pose_spec;

/* The imaging chain (imaging/xt_chain.h) a spec may name: every parameter of the chain's table as
 * a fixed value, kv and dose_ngy as ranges drawn per frame, noise on or off. */
typedef struct xt_ds_chain_spec {
  int present;
  xt_chain_params base; /* the chain's defaults, then the spec's values; kv = kv.lo, seed = noise_seed */
  xt_ds_range kv, dose_ngy;
  int dose_set;         /* dose_ngy given: each frame's mas follows from it, its kV and its SID */
  int noise;            /* 0: quantum_noise and e_noise_adu are 0 */
  uint64_t noise_seed;  /* the chain's `seed`: the spec's seed mod 2^53 (the table's range) */
} xt_ds_chain_spec;

/* Plane B of a biplane system (docs/dataset.md, "Biplane"): its own detector mode(s) and C-arm
 * pose, the patient, table and perturbations of plane A. An angle is either absolute (a range) or
 * an offset from plane A's drawn angle (offset set: the range is added to it). */
typedef struct xt_ds_plane_b_spec {
  int present;
  int nmodes;
  int modes[XT_DS_MAX_MODES]; /* indices into xt_ds_spec.modes (after plane A's, shared where equal) */
  xt_ds_range primary_deg, secondary_deg, detector_rot_deg, sod_mm, sid_mm;
  int primary_offset, secondary_offset; /* 1: primary_deg / secondary_deg are offsets from plane A's */
  int sod_set, sid_set;                 /* else the detector mode's distances */
  uint64_t noise_seed; /* the chain's `seed` of plane B: its own noise, never plane A's */
} xt_ds_plane_b_spec;

/* "dicom": the chain frames also as DICOM (docs/dataset.md, "DICOM"): per shard, an Enhanced XA
 * per plane and detector mode (and a classic XA beside each, if asked) and the shard's dose report,
 * UIDs derived from the spec's SHA-256 and the shard. */
typedef struct xt_ds_dicom_spec {
  int present;
  int raw;     /* 1: the raw frames; 0: the processed ones (the default) */
  int classic; /* a classic XA beside each Enhanced XA */
  char identity_path[4096]; /* "" = the synthetic defaults */
  xt_dicom_identity identity;
} xt_ds_dicom_spec;

/* "contrast" (docs/dataset.md, "Contrast"): iodine in regions of label models (the thorax phantom's
 * named regions, or MODEL:LABEL of a label model whose table flags the label, a contrast mask's),
 * per frame either a concentration drawn from a range (every region the same) or the concentration
 * of the bolus model (acq/xt_contrast.h) an injection into each region gives at a time after its
 * start drawn from a range. */
#define XT_DS_MAX_REGIONS 8
typedef struct xt_ds_contrast_spec {
  int present;
  int nregions;
  char region[XT_DS_MAX_REGIONS][XT_DS_NAME_MAX]; /* as the spec names it */
  int model[XT_DS_MAX_REGIONS], label[XT_DS_MAX_REGIONS];
  int bolus;           /* 0: mg_ml drawn; 1: an injection, t_s drawn */
  xt_ds_range mg_ml;   /* mg I/mL */
  double rate_ml_s, volume_ml, agent_mg_ml;
  xt_ds_range t_s;     /* s after the injection starts */
} xt_ds_contrast_spec;

typedef struct xt_ds_write_spec {
  int lineint, intensity, raw, processed, labels, segmentation, landmarks;
} xt_ds_write_spec;

typedef struct xt_ds_spec {
  char path[4096];
  uint64_t seed;
  long long frames;
  xt_backend backend;
  int nmodes;      /* plane A's modes: modes[0 .. nmodes) */
  int nmodes_all;  /* every mode of either plane: plane B's follow plane A's (at most XT_DS_MAX_MODES) */
  const xt_detector_mode *modes[XT_DS_MAX_MODES];
  int nmodels;
  xt_ds_model_spec models[XT_DS_MAX_MODELS];
  xt_ds_pose_spec poses;
  int quantity; /* XT_DS_QTY_* */
  int nchannels;
  xt_ds_channel_spec channels[XT_DS_MAX_CHANNELS];
  int nlandmarks;
  xt_ds_landmark *landmarks;
  xt_ds_chain_spec chain;
  xt_ds_plane_b_spec plane_b;
  xt_ds_write_spec write;
  xt_ds_dicom_spec dicom;
  xt_ds_contrast_spec contrast;
  int format;            /* XT_DS_FMT_* */
  long long shard_frames;
  char *canonical;       /* the spec as one canonical JSON text (sorted keys, compact): spec.json */
  char sha256[65];       /* of canonical */
} xt_ds_spec;

/* Reads and validates path. Errors are one line naming the file and the JSON path of the field
 * (`spec.json: poses.primary_deg: [90, -90]: lo > hi`); XT_EINVAL for a bad spec, XT_EIO when it
 * cannot be read. */
int xt_ds_spec_load(const char *path, xt_ds_spec *s, xt_msg *msg);
void xt_ds_spec_free(xt_ds_spec *s);
long long xt_ds_spec_shards(const xt_ds_spec *s);
/* The mAs that gives dose_ngy of air kerma (no patient) at the detector, sid_mm from the focal
 * spot, at kv with p's tube and filtration. */
int xt_ds_dose_mas(const xt_chain_params *p, double kv, double sid_mm, double dose_ngy, double *mas, xt_msg *msg);
/* Size of the chain's raw and processed frames for mode m: the detector's, divided by the binning. */
void xt_ds_chain_size(const xt_ds_spec *s, int mode, int *rows, int *cols);

/* ------------------------------------------------------------------------------------------ */
/* Per-frame sampling                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The documented per-frame seed: splitmix64's finaliser of seed + 0x9E3779B97F4A7C15 (index + 1). */
uint64_t xt_ds_frame_seed(uint64_t seed, long long index);

typedef struct xt_ds_frame {
  long long index;
  int plane;      /* 0 plane A, 1 plane B (biplane specs) */
  uint64_t seed;  /* plane A: the frame's (or the arc run's) seed; plane B: its own draws' seed */
  int mode;       /* index into spec->modes */
  int view;       /* views: index into spec->poses.views; arcs: the view within the run; else -1 */
  long long run;  /* arcs: the run; else -1 */
  xt_geometry geom; /* world geometry (pose, P, source, detector frame) */
  double translate_mm[XT_DS_MAX_MODELS][3], rotate_deg[XT_DS_MAX_MODELS][3]; /* drawn perturbations */
  xt_affine perturb[XT_DS_MAX_MODELS];          /* the perturbation alone, patient frame */
  xt_affine model_to_patient[XT_DS_MAX_MODELS]; /* placement, then the perturbation */
  double dose_ngy;      /* chain: the drawn dose (when the spec gives dose_ngy), else 0 */
  xt_chain_params chain; /* chain: every parameter of the frame (kv and mas drawn); its frame number is index */
  /* chain: what the exposure gave (xt_ds_render_chain fills them): the spectrum's figures and the
   * frame's dose, for the DICOM objects (the JSON states the parameters only) */
  xt_chain_info chain_info;
  xt_dose dose;
  /* contrast: each region's iodine (mg I/mL; spec->contrast.region order) and, with a bolus, the
   * drawn time after the injection's start */
  double iodine_mg_ml[XT_DS_MAX_REGIONS];
  double contrast_t_s;
} xt_ds_frame;

/* The frame's draws and geometry. placement[m] is model m's fixed placement and center[m] its
 * bounding-box centre in the patient frame (the pivot of its rotations), from the loaded scene. */
int xt_ds_sample_frame(const xt_ds_spec *s, const xt_affine *placement, const double (*center)[3], long long index,
                       xt_ds_frame *f, xt_msg *msg);

/* Plane B of the instant whose plane A is a (biplane specs): a copy of a (index, patient, table,
 * perturbations) with plane B's own mode, pose and chain exposure, drawn from a generator of its
 * own, so plane A's draws are those of the same spec without plane B. */
int xt_ds_sample_plane_b(const xt_ds_spec *s, const xt_ds_frame *a, xt_ds_frame *b, xt_msg *msg);
/* Plane B's chain seed (its noise's key, beside the frame index): splitmix64's finaliser of
 * seed ^ 0x8CB92BA72F3D8DD7, mod 2^53, never equal to plane A's (seed mod 2^53). */
uint64_t xt_ds_plane_b_noise_seed(uint64_t seed);

/* Parses a clinical view name: "AP", "LAT" (LAO 90), "LAO 30", "RAO45", "CRAN 20", "CAUD 15" and
 * combinations ("RAO 30 CRAN 20"). 0 or XT_EINVAL. */
int xt_ds_parse_view(const char *text, double *primary_deg, double *secondary_deg);

/* ------------------------------------------------------------------------------------------ */
/* Scene: models, label channels, projectors                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct xt_ds_scene {
  const xt_ds_spec *spec;
  xt_model *models[XT_DS_MAX_MODELS];
  xt_affine placement[XT_DS_MAX_MODELS];
  double center[XT_DS_MAX_MODELS][3];
  /* Label channels as models the public projector API renders: each a label volume over the
   * source model's voxels with an indicator table (path length) or the material's mu (line
   * integral), or a mask volume built from a dense model's mu/HU range. */
  xt_model *chan_model[XT_DS_MAX_CHANNELS];
  int chan_src[XT_DS_MAX_CHANNELS]; /* the model whose transform the channel follows */
} xt_ds_scene;

int xt_ds_scene_load(const xt_ds_spec *s, xt_ds_scene *sc, xt_msg *msg);
void xt_ds_scene_free(xt_ds_scene *sc);

/* The renderer of one worker: its projectors on one device. */
typedef struct xt_ds_renderer xt_ds_renderer;
int xt_ds_renderer_create(const xt_ds_scene *sc, xt_backend backend, int device, int threads, xt_ds_renderer **out,
                          xt_msg *msg);
void xt_ds_renderer_free(xt_ds_renderer *r);

/* Renders n frames of one detector mode: img gets n frames of rows*cols float line integrals (all
 * image models summed), chan[k] (k < nchannels) n frames of channel k. */
int xt_ds_render_image(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *img, xt_msg *msg);
/* THE label-channel function: one projector per channel (indicator tables; the chain's
 * per-material channels are basis materials, not label sets: docs/dataset.md). It may run on
 * another thread while xt_ds_render_image and xt_ds_render_chain run (separate projectors). */
int xt_ds_render_labels(xt_ds_renderer *r, const xt_ds_frame *f, int n, float *const *chan, xt_msg *msg);
/* The imaging chain's frames (spec with a chain): raw and proc get n frames of the chain's size
 * (xt_ds_chain_size). Each frame is a first exposure (lag and temporal filter reset) with frame
 * number f->index and seed f->chain.seed, so it depends on nothing rendered before it. Uses the
 * image's projectors: call it on the thread that calls xt_ds_render_image. */
int xt_ds_render_chain(xt_ds_renderer *r, xt_ds_frame *f, int n, uint16_t *raw, uint16_t *proc, xt_msg *msg);

/* ------------------------------------------------------------------------------------------ */
/* Shards                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* One rendered frame as the writer sees it. */
typedef struct xt_ds_frame_data {
  const xt_ds_frame *frame;
  const float *img;                       /* rows*cols line integrals */
  const float *chan[XT_DS_MAX_CHANNELS];  /* rows*cols each */
  const uint16_t *raw, *proc;             /* chain: its size (xt_ds_chain_size) each, or NULL */
  const struct xt_ds_frame_data *b;       /* biplane: plane B of the same instant (its b NULL), else NULL */
} xt_ds_frame_data;

/* The member files of one frame, in order; sizes for the dry run and the manifest. */
typedef struct xt_ds_member_info {
  char ext[24];   /* "lineint.npy", ..., "json" */
  char dtype[8];  /* numpy descr ("<f4", "<u2", "|u1", ...), "" for json */
  int ndim;       /* 2 or 3 */
  int plane;      /* 0: plane A's (or the JSON), 1: plane B's ("..._b.npy") */
} xt_ds_member_info;
int xt_ds_members(const xt_ds_spec *s, xt_ds_member_info *out, int max);
/* Bytes of a frame's members in a tar shard (headers and padding included) for mode m, with a
 * JSON of json_bytes; with plane B, its members at plane B's largest mode are counted too. */
size_t xt_ds_frame_bytes(const xt_ds_spec *s, int mode, size_t json_bytes);

/* Per-writer scratch (intensity, masks, JSON), made once. */
typedef struct xt_ds_encoder xt_ds_encoder;
int xt_ds_encoder_create(const xt_ds_scene *sc, xt_ds_encoder **out, xt_msg *msg);
void xt_ds_encoder_free(xt_ds_encoder *e);
/* The frame's JSON metadata (geometry, pose, imaging parameters, seed, landmarks; with fb, plane B
 * of the same instant under "plane_b", else NULL); valid until the next call. */
int xt_ds_frame_json(xt_ds_encoder *e, const xt_ds_frame *f, const xt_ds_frame *fb, const char **text, size_t *len,
                     xt_msg *msg);

/* Where a dataset lives: DIR/spec.json, DIR/dataset.json, DIR/shards/shard-NNNNNN.{tar,json},
 * DIR/manifest-IIIII-of-NNNNN.jsonl. Every file is reached through the two directory descriptors
 * (shards/ opened with O_NOFOLLOW), never by path: nothing is written through a symbolic link. */
typedef struct xt_ds_out {
  char dir[4096];    /* the paths, for messages */
  char shards[4200];
  int dirfd, shardsfd; /* -1 when not open */
  int direct; /* O_DIRECT shard writes through an aligned staging buffer (--io direct) */
} xt_ds_out;

/* The paths alone, nothing opened. */
int xt_ds_out_paths(const char *dir, xt_ds_out *o, xt_msg *msg);
/* The paths, and the directories opened where they exist, nothing created (the dry run). */
int xt_ds_out_open(const char *dir, xt_ds_out *o, xt_msg *msg);
/* mkdir -p DIR, then refuses (XT_EEXISTS, one line naming the path) a symbolic link at any name a
 * run writes (shards/, its files, spec.json, dataset.json, manifests), and, where DIR holds no
 * dataset (no dataset.json), any file at such a name: a user's. Then spec.json and dataset.json
 * written or checked to be the same (another spec's dataset is refused), shards/ made, a write
 * probe. Close with xt_ds_out_close. */
int xt_ds_out_prepare(const xt_ds_spec *s, const char *dir, xt_ds_out *o, xt_msg *msg);
void xt_ds_out_close(xt_ds_out *o);
/* 1 when shard i is complete (its manifest line exists and the shard has its size; with verify,
 * its checksum too), else 0, after removing what a killed run left of it when cleanup is set. */
int xt_ds_shard_done(const xt_ds_spec *s, const xt_ds_out *o, long long shard, int verify, int cleanup);
/* Seconds to SHA-256 `bytes` bytes on this core (the dry run's estimate of encoding). */
double xt_ds_hash_seconds(size_t bytes);
/* The task's manifest: the manifest lines of `shards` (all complete) concatenated. */
int xt_ds_write_task_manifest(const xt_ds_out *o, const long long *shards, long long n, int task, int ntasks,
                              xt_msg *msg);

/* Time spent in each stage by one writer, for the summary. */
typedef struct xt_ds_wstats {
  double encode_s; /* CPU: JSON, derived images, checksums */
  double write_s;  /* write(2), fsync, rename */
  long long bytes, frames;
} xt_ds_wstats;

/* Callback through which a writer reports its disk busy intervals (in = 1 entering, 0 leaving). */
typedef void (*xt_ds_disk_fn)(void *ctx, int in);

/* The writer of one shard, whatever its format (the spec's output.format picks the writer from
 * the registry of xt_dataset_shard.h; callers never branch on it). */
typedef struct xt_ds_shard_writer xt_ds_shard_writer;
int xt_ds_shard_open(const xt_ds_spec *s, const xt_ds_out *o, long long shard, xt_ds_shard_writer **out, xt_msg *msg);
int xt_ds_shard_add(xt_ds_shard_writer *w, xt_ds_encoder *e, const xt_ds_frame_data *fd, xt_ds_wstats *st,
                    xt_ds_disk_fn disk, void *disk_ctx, xt_msg *msg);
/* Completes the shard: fsync, into place, manifest line. Frees w, on failure too. */
int xt_ds_shard_commit(xt_ds_shard_writer *w, xt_ds_wstats *st, xt_ds_disk_fn disk, void *disk_ctx, xt_msg *msg);
/* Drops the shard: nothing of it stays on disk. Frees w. */
void xt_ds_shard_abort(xt_ds_shard_writer *w);

/* ------------------------------------------------------------------------------------------ */
/* The run                                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum { XT_DS_PROGRESS_AUTO = 0, XT_DS_PROGRESS_BAR = 1, XT_DS_PROGRESS_LINES = 2, XT_DS_PROGRESS_NONE = 3 };

typedef struct xt_ds_run_opts {
  int ndevices;
  int devices[64];   /* CUDA ordinals, one worker each; cpu: one worker */
  int threads;       /* CPU projector threads (0 = all cores) */
  int writers;       /* encode/write threads in all (0 = from the cores) */
  int batch;         /* frames per GPU batch (0 = from the frame size) */
  int render_only;   /* measure: render every batch, write nothing */
  int progress;      /* XT_DS_PROGRESS_* */
  FILE *log;         /* progress and summary (stderr) */
} xt_ds_run_opts;

typedef struct xt_ds_summary {
  long long frames, shards;
  double bytes, wall_s; /* wall_s from the moment every worker was ready */
  double setup_s;       /* model uploads and scratch, before that */
  double gpu_busy_s;   /* summed over workers */
  double encode_s, write_s;
  double disk_busy_s;  /* wall time with at least one write/fsync in flight */
  int workers, writers;
  const char *backend;
} xt_ds_summary;

/* The dry run's estimate for a task of nshards_task shards (done_shards of them complete) and
 * frames_task frames: a calibration batch rendered, JSON and hashing timed, the disk probed
 * inside --out (out_fd; -1: not measured, nothing written anywhere else). */
typedef struct xt_ds_plan {
  int calib_frames;      /* frames in the calibration batch */
  size_t json_bytes;     /* a frame's JSON, on average */
  double frame_bytes;    /* a frame's members in a shard, averaged over the modes */
  double todo_frames, total_bytes; /* what is left to make and write */
  int workers, writers;
  double render_fps, encode_fps, disk_fps; /* disk_fps INFINITY when not measured */
  int have_disk;
  double disk_rate;      /* bytes/s from the probe, 0 when not measured */
  double fps;            /* the least of the three */
  const char *limit;     /* "render", "encoding" or "disk" */
  int bad_spec;          /* on failure: a frame of the spec cannot be sampled (a usage error) */
} xt_ds_plan;
int xt_ds_estimate(const xt_ds_spec *s, const xt_ds_scene *sc, const xt_ds_run_opts *ro, long long nshards_task,
                   long long done_shards, long long frames_task, int out_fd, xt_ds_plan *plan, xt_msg *msg);

int xt_ds_run(const xt_ds_spec *s, const xt_ds_scene *sc, const xt_ds_out *o, const long long *shards, long long n,
              const xt_ds_run_opts *opt, xt_ds_summary *sum, xt_msg *msg);
/* The summary lines: rates per stage and the bottleneck, with numbers. */
void xt_ds_print_summary(FILE *f, const xt_ds_summary *sum, int render_only);

#endif /* XT_DATASET_H */
