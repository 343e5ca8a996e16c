/* The xtwin frame stream's binary message: one WebSocket binary message per frame, a fixed
 * little-endian header followed by the pixels. api/stream.md documents every field; this header
 * is the same layout in C, and the _Static_asserts below pin each offset so a change to the
 * struct that would move a byte on the wire fails to compile.
 *
 * Clients must read header_size and skip that many bytes to reach the pixels: later versions
 * may append fields, never move them. All timestamps are CLOCK_MONOTONIC of the server's host in
 * nanoseconds (the clock Python's time.monotonic_ns() reads on Linux). */
#ifndef XT_STREAM_H
#define XT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#define XT_STREAM_MAGIC 0x46575458u /* bytes "XTWF" */
#define XT_STREAM_VERSION 6

enum {
  XT_STREAM_PIX_U16 = 1, /* uint16: intensity round(65535 * exp(-line integral)), or (frame_kind
                            raw / processed) the imaging chain's detector codes */
  XT_STREAM_PIX_F32 = 2  /* float32 line integral of mu (dimensionless) */
};

/* motion_flags (version 6, offset 840) */
enum {
  XT_STREAM_MOTION_XFORM = 1,   /* model transforms were given over the API (xform_version > 0) */
  XT_STREAM_MOTION_CARDIAC = 2, /* cardiac motion on */
  XT_STREAM_MOTION_RESP = 4     /* respiratory motion on */
};

/* What the pixels are (version 2, offset 304). */
enum {
  XT_STREAM_KIND_MONO = 0,     /* the ideal monochromatic frame of pixel_format (the chain is off) */
  XT_STREAM_KIND_RAW = 1,      /* the panel's raw ADC codes, "for processing" (bits_stored bits) */
  XT_STREAM_KIND_PROCESSED = 2 /* the processed frame, "for presentation" (12 bits stored) */
};

/* chain_flags (offset 396). */
enum {
  XT_STREAM_CHAIN_QUANTUM_NOISE = 1u,
  XT_STREAM_CHAIN_LAG = 2u,
  XT_STREAM_CHAIN_TEMPORAL = 4u,
  XT_STREAM_CHAIN_EDGE = 8u,
  XT_STREAM_CHAIN_AUTO_WINDOW = 16u /* window and level are the frame's own, from its histogram (`window` 0) */
};

enum {
  XT_STREAM_FLAG_LOCKSTEP = 1u /* frame answers a trigger (run mode lockstep) */
};

/* exposure_flags (version 3, offset 492). */
enum {
  XT_STREAM_EXPOSURE_GRID = 1u, /* anti-scatter grid in */
  XT_STREAM_EXPOSURE_DRC = 2u   /* dose-rate control set this frame's kV, pulse width and mA */
};

/* drc_flags (version 3, offset 568): imaging/xt_drc.h's XT_DRC_* */
enum {
  XT_STREAM_DRC_ON = 1u,
  XT_STREAM_DRC_SETTLED = 2u,     /* the last measurement within 10 % of the target */
  XT_STREAM_DRC_CLAMP_HIGH = 4u,  /* at the curve's end (kV at drc_kv_max) and asking for more */
  XT_STREAM_DRC_CLAMP_LOW = 8u,   /* at the curve's start and asking for less */
  XT_STREAM_DRC_RATE_LIMITED = 16u /* the last step was cut to the rate limit */
};

/* fault_flags (version 4, offset 572; was reserved3, always 0): the faults injected on the server
 * (POST /v1/faults/<name>, docs/device.md "Faults") that acted on this frame. The panel's (dead line,
 * cluster, gain drift, stale calibration) and the generator's act on the imaging chain's frames only:
 * a mono frame (the chain off) has no detector and never carries them. */
enum {
  XT_STREAM_FAULT_LATE = 1u,          /* held back: published late_frame's ms after it was ready */
  XT_STREAM_FAULT_DEAD_LINE = 2u,     /* dead columns or rows not in the calibration's defect map */
  XT_STREAM_FAULT_PIXEL_CLUSTER = 4u, /* a dead pixel cluster, likewise */
  XT_STREAM_FAULT_GAIN_DRIFT = 8u,    /* the panel's gain has drifted from its calibration */
  XT_STREAM_FAULT_STALE_CAL = 16u,    /* offset/gain maps out of date: fixed-pattern residue */
  XT_STREAM_FAULT_GENERATOR = 32u,    /* exposed at a kV off nominal (within the generator's tolerance) */
  XT_STREAM_FAULT_TUBE_HEAT = 64u,    /* exposed while the tube is at its heat limit (fluoroscopy only) */
  XT_STREAM_FAULT_AFTER_DROP = 128u   /* the first frame published after frames dropped by drop_frame */
};

/* plane (version 5, offset 752) */
enum { XT_STREAM_PLANE_A = 0, XT_STREAM_PLANE_B = 1 };

/* timing (version 5, offset 756): the pulse schedule of the planes (docs/biplane.md) */
enum {
  XT_STREAM_TIMING_SINGLE = 0,      /* one plane exposes (a single-plane system, or one plane of two alone) */
  XT_STREAM_TIMING_INTERLEAVED = 1, /* A and B alternate: B's pulse half a period after A's */
  XT_STREAM_TIMING_SIMULTANEOUS = 2 /* A and B pulse at the same instant */
};

/* codec (version 5, offset 776): the pixels as sent; payload_bytes is always the decoded size */
enum {
  XT_STREAM_CODEC_NONE = 0, /* the pixels as they are */
  XT_STREAM_CODEC_ZSTD = 1, /* one zstd frame of the payload_bytes pixel bytes */
  XT_STREAM_CODEC_LZ4 = 2   /* one LZ4 block (no frame) of the payload_bytes pixel bytes */
};

typedef struct xt_stream_header {
  uint32_t magic;               /*   0  XT_STREAM_MAGIC */
  uint16_t version;             /*   4  XT_STREAM_VERSION */
  uint16_t header_size;         /*   6  bytes before the pixels (304 in v1, 400 in v2, 576 in v3, 752 in v4, 800 in v5, 864 in v6) */
  uint64_t frame_counter;       /*   8  exposure number since start, strictly increasing */
  uint64_t pose_seq;            /*  16  sequence number of the last pose update applied */
  uint64_t t_pose_ns;           /*  24  when that pose update reached the server */
  uint64_t t_exposure_sched_ns; /*  32  the scheduled exposure (absolute deadline) */
  uint64_t t_exposure_ns;       /*  40  when the exposure happened: the pose was latched */
  uint64_t t_render_done_ns;    /*  48  pixels ready */
  uint64_t t_sent_ns;           /*  56  handed to this client's socket */
  uint64_t frames_dropped;      /*  64  frames this client did not get since it connected */
  uint32_t rows;                /*  72 */
  uint32_t cols;                /*  76 */
  uint32_t pixel_format;        /*  80  XT_STREAM_PIX_* */
  uint32_t flags;               /*  84  XT_STREAM_FLAG_* */
  uint64_t payload_bytes;       /*  88  rows * cols * bytes per pixel */
  double pose[8];               /*  96  primary, secondary, detector rotation (deg), SOD, SID,
                                        table x, y, z (mm): the pose of this exposure */
  double P[12];                 /* 160  3x4 projection matrix, row-major: world mm (homogeneous)
                                        -> (col*w, row*w, w) */
  double pitch_mm[2];           /* 256  pixel pitch along columns (u) and rows (v) */
  char mode[24];                /* 272  detector mode name, NUL-terminated */
  uint64_t period_ns;           /* 296  nominal frame period (0 in lockstep) */
  /* version 2: the imaging chain (all 0 for mono frames, but bits_stored) */
  uint32_t frame_kind;          /* 304  XT_STREAM_KIND_* */
  uint32_t bits_stored;         /* 308  significant bits of each uint16 pixel (16 mono) */
  uint64_t chain_seed;          /* 312  run seed of the frame's noise (keyed with frame_counter) */
  uint64_t chain_params_hash;   /* 320  FNV-1a of every chain parameter (listed by GET /v1/acquisition) */
  double kv;                    /* 328  tube voltage */
  double mas;                   /* 336  exposure of the frame */
  double filter_al_mm;          /* 344  spectral filter */
  double filter_cu_mm;          /* 352 */
  double mean_energy_kev;       /* 360  of the spectrum */
  double kerma_ugy_per_mas;     /* 368  air kerma per mAs at 1 m */
  double window, level;         /* 376, 384  processing: attenuation units */
  uint32_t binning;             /* 392  1 or 2 (2x2, charge summed) */
  uint32_t chain_flags;         /* 396  XT_STREAM_CHAIN_* */
  /* version 3: exposure settings, dose, dose-rate control (all 0 for mono frames) */
  double ma;                    /* 400  tube current */
  double pulse_ms;              /* 408  pulse width (mas = ma x pulse_ms / 1000) */
  double focal_spot_mm;         /* 416  nominal focal spot */
  double shutter[4];            /* 424  left, right, top, bottom: fraction of the field covered */
  double wedge[2];              /* 456  left, right: fraction of the field covered */
  double wedge_t;               /* 472  a wedge's transmission */
  double grid_tp;               /* 480  the grid's primary transmission (0 with the grid out) */
  uint32_t protocol;            /* 488  preset last applied: 0 custom, 1-3 fluoro low/normal/high,
                                        4, 5 cine 15/30, 6 DSA */
  uint32_t exposure_flags;      /* 492  XT_STREAM_EXPOSURE_* */
  double k_irp_mgy;             /* 496  air kerma of this frame at the reference point */
  double kap_gycm2;             /* 504  kerma-area product of this frame */
  double k_irp_total_mgy;       /* 512  run total including this frame */
  double kap_total_gycm2;       /* 520  run total including this frame */
  uint64_t dose_frames;         /* 528  frames in the run totals */
  double d_irp_mm;              /* 536  focal spot to the reference point */
  double drc_measured_ngy;      /* 544  detector dose measured in this frame's central field */
  double drc_target_ngy;        /* 552  requested detector dose per frame */
  double drc_curve_s;           /* 560  the loop's position on its curve for the next frame, 0..7 */
  uint32_t drc_flags;           /* 568  XT_STREAM_DRC_* after this frame's measurement */
  uint32_t fault_flags;         /* 572  XT_STREAM_FAULT_*: injected faults that acted on this frame (0: none) */
  /* version 4: the readout (every frame): the panel, the centred region read out, the binning,
     the zoom field. P (160) is the render grid's; P_out the delivered matrix's (rows, cols) */
  char detector[16];            /* 576  the panel's name, NUL-terminated: fd20, fd15, fd12, ... */
  uint32_t roi[4];              /* 592  col0, row0, cols, rows of the region: native panel pixels */
  uint32_t panel[2];            /* 608  the panel's native cols, rows */
  double panel_pitch_mm;        /* 616  its native pitch */
  double readout_binning;       /* 624  native pixels per delivered pixel along a side (the mode's
                                        x the chain's 2x2) */
  double field_cm;              /* 632  the zoom field's nominal diagonal (0: not a field) */
  double dose_ratio;            /* 640  the field's requested detector dose vs the largest field's */
  double readout_ms;            /* 648  the panel's readout time in this mode */
  double P_out[12];             /* 656  P of the delivered pixels (rows x cols), row-major */
  /* version 5: the plane (biplane systems) and the message as sent */
  uint32_t plane;               /* 752  XT_STREAM_PLANE_*: 0 A (frontal; every single-plane frame), 1 B (lateral) */
  uint32_t timing;              /* 756  XT_STREAM_TIMING_*: how the planes' pulses were scheduled */
  uint64_t cycle;               /* 760  the pulse cycle this exposure belongs to: the frames of both planes
                                        with one cycle are one instant's pair (0 outside a paced run) */
  uint64_t t_cycle_ns;          /* 768  the cycle's start (plane A's slot): t_exposure_sched_ns =
                                        t_cycle_ns + this plane's offset in the cycle */
  uint32_t codec;               /* 776  XT_STREAM_CODEC_*: how the pixels after the header are encoded */
  uint32_t saturated_px;        /* 780  chain frames: raw pixels of this exposure at the ADC's full scale (was reserved5) */
  uint64_t wire_bytes;          /* 784  bytes after the header in this message (payload_bytes when codec 0) */
  uint32_t contrast_seq;        /* 792  contrast (issue 26): the injection state this exposure was
                                        rendered with (GET /v1/contrast's seq; 0: never an injection) */
  float iodine_mg_ml_max;       /* 796  the largest iodine concentration of any region at the exposure
                                        (mg I/mL; each region's: GET /v1/contrast?t_ns=t_exposure_ns) */
  /* version 6: motion (issue 26): the time and phases the frame's models were moved to */
  double motion_t_s;            /* 800  the transforms' time: the pulse's centre, s since the motion's start */
  double cardiac_phase;         /* 808  0..1 from the R wave; -1: no cardiac motion */
  double resp_phase;            /* 816  0..1 from end-expiration; -1: no breathing */
  double cardiac_scale;         /* 824  the beating models' scale about the heart's centre (1: still) */
  double resp_mm;               /* 832  the breathing models' displacement along the axis, mm */
  uint32_t motion_flags;        /* 840  XT_STREAM_MOTION_*: what moved */
  uint32_t blur_samples;        /* 844  renders averaged across the pulse (0 or 1: none) */
  uint64_t xform_version;       /* 848  the version of the models' transforms (PUT /v1/models/{name}/transform; 0 none) */
  uint64_t reserved7;           /* 856  0 */
} xt_stream_header;             /* 864 */

#define XT_STREAM_HEADER_SIZE 864

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "xt_stream.h describes a little-endian wire format; this host is big-endian"
#endif

_Static_assert(offsetof(xt_stream_header, magic) == 0, "magic");
_Static_assert(offsetof(xt_stream_header, version) == 4, "version");
_Static_assert(offsetof(xt_stream_header, header_size) == 6, "header_size");
_Static_assert(offsetof(xt_stream_header, frame_counter) == 8, "frame_counter");
_Static_assert(offsetof(xt_stream_header, pose_seq) == 16, "pose_seq");
_Static_assert(offsetof(xt_stream_header, t_pose_ns) == 24, "t_pose_ns");
_Static_assert(offsetof(xt_stream_header, t_exposure_sched_ns) == 32, "t_exposure_sched_ns");
_Static_assert(offsetof(xt_stream_header, t_exposure_ns) == 40, "t_exposure_ns");
_Static_assert(offsetof(xt_stream_header, t_render_done_ns) == 48, "t_render_done_ns");
_Static_assert(offsetof(xt_stream_header, t_sent_ns) == 56, "t_sent_ns");
_Static_assert(offsetof(xt_stream_header, frames_dropped) == 64, "frames_dropped");
_Static_assert(offsetof(xt_stream_header, rows) == 72, "rows");
_Static_assert(offsetof(xt_stream_header, cols) == 76, "cols");
_Static_assert(offsetof(xt_stream_header, pixel_format) == 80, "pixel_format");
_Static_assert(offsetof(xt_stream_header, flags) == 84, "flags");
_Static_assert(offsetof(xt_stream_header, payload_bytes) == 88, "payload_bytes");
_Static_assert(offsetof(xt_stream_header, pose) == 96, "pose");
_Static_assert(offsetof(xt_stream_header, P) == 160, "P");
_Static_assert(offsetof(xt_stream_header, pitch_mm) == 256, "pitch_mm");
_Static_assert(offsetof(xt_stream_header, mode) == 272, "mode");
_Static_assert(offsetof(xt_stream_header, period_ns) == 296, "period_ns");
_Static_assert(offsetof(xt_stream_header, frame_kind) == 304, "frame_kind");
_Static_assert(offsetof(xt_stream_header, bits_stored) == 308, "bits_stored");
_Static_assert(offsetof(xt_stream_header, chain_seed) == 312, "chain_seed");
_Static_assert(offsetof(xt_stream_header, chain_params_hash) == 320, "chain_params_hash");
_Static_assert(offsetof(xt_stream_header, kv) == 328, "kv");
_Static_assert(offsetof(xt_stream_header, mas) == 336, "mas");
_Static_assert(offsetof(xt_stream_header, filter_al_mm) == 344, "filter_al_mm");
_Static_assert(offsetof(xt_stream_header, filter_cu_mm) == 352, "filter_cu_mm");
_Static_assert(offsetof(xt_stream_header, mean_energy_kev) == 360, "mean_energy_kev");
_Static_assert(offsetof(xt_stream_header, kerma_ugy_per_mas) == 368, "kerma_ugy_per_mas");
_Static_assert(offsetof(xt_stream_header, window) == 376, "window");
_Static_assert(offsetof(xt_stream_header, level) == 384, "level");
_Static_assert(offsetof(xt_stream_header, binning) == 392, "binning");
_Static_assert(offsetof(xt_stream_header, chain_flags) == 396, "chain_flags");
_Static_assert(offsetof(xt_stream_header, ma) == 400, "ma");
_Static_assert(offsetof(xt_stream_header, pulse_ms) == 408, "pulse_ms");
_Static_assert(offsetof(xt_stream_header, focal_spot_mm) == 416, "focal_spot_mm");
_Static_assert(offsetof(xt_stream_header, shutter) == 424, "shutter");
_Static_assert(offsetof(xt_stream_header, wedge) == 456, "wedge");
_Static_assert(offsetof(xt_stream_header, wedge_t) == 472, "wedge_t");
_Static_assert(offsetof(xt_stream_header, grid_tp) == 480, "grid_tp");
_Static_assert(offsetof(xt_stream_header, protocol) == 488, "protocol");
_Static_assert(offsetof(xt_stream_header, exposure_flags) == 492, "exposure_flags");
_Static_assert(offsetof(xt_stream_header, k_irp_mgy) == 496, "k_irp_mgy");
_Static_assert(offsetof(xt_stream_header, kap_gycm2) == 504, "kap_gycm2");
_Static_assert(offsetof(xt_stream_header, k_irp_total_mgy) == 512, "k_irp_total_mgy");
_Static_assert(offsetof(xt_stream_header, kap_total_gycm2) == 520, "kap_total_gycm2");
_Static_assert(offsetof(xt_stream_header, dose_frames) == 528, "dose_frames");
_Static_assert(offsetof(xt_stream_header, d_irp_mm) == 536, "d_irp_mm");
_Static_assert(offsetof(xt_stream_header, drc_measured_ngy) == 544, "drc_measured_ngy");
_Static_assert(offsetof(xt_stream_header, drc_target_ngy) == 552, "drc_target_ngy");
_Static_assert(offsetof(xt_stream_header, drc_curve_s) == 560, "drc_curve_s");
_Static_assert(offsetof(xt_stream_header, drc_flags) == 568, "drc_flags");
_Static_assert(offsetof(xt_stream_header, fault_flags) == 572, "fault_flags");
_Static_assert(offsetof(xt_stream_header, detector) == 576, "detector");
_Static_assert(offsetof(xt_stream_header, roi) == 592, "roi");
_Static_assert(offsetof(xt_stream_header, panel) == 608, "panel");
_Static_assert(offsetof(xt_stream_header, panel_pitch_mm) == 616, "panel_pitch_mm");
_Static_assert(offsetof(xt_stream_header, readout_binning) == 624, "readout_binning");
_Static_assert(offsetof(xt_stream_header, field_cm) == 632, "field_cm");
_Static_assert(offsetof(xt_stream_header, dose_ratio) == 640, "dose_ratio");
_Static_assert(offsetof(xt_stream_header, readout_ms) == 648, "readout_ms");
_Static_assert(offsetof(xt_stream_header, P_out) == 656, "P_out");
_Static_assert(offsetof(xt_stream_header, plane) == 752, "plane");
_Static_assert(offsetof(xt_stream_header, timing) == 756, "timing");
_Static_assert(offsetof(xt_stream_header, cycle) == 760, "cycle");
_Static_assert(offsetof(xt_stream_header, t_cycle_ns) == 768, "t_cycle_ns");
_Static_assert(offsetof(xt_stream_header, codec) == 776, "codec");
_Static_assert(offsetof(xt_stream_header, wire_bytes) == 784, "wire_bytes");
_Static_assert(offsetof(xt_stream_header, contrast_seq) == 792, "contrast_seq");
_Static_assert(offsetof(xt_stream_header, iodine_mg_ml_max) == 796, "iodine_mg_ml_max");
_Static_assert(offsetof(xt_stream_header, motion_t_s) == 800, "motion_t_s");
_Static_assert(offsetof(xt_stream_header, cardiac_phase) == 808, "cardiac_phase");
_Static_assert(offsetof(xt_stream_header, resp_phase) == 816, "resp_phase");
_Static_assert(offsetof(xt_stream_header, cardiac_scale) == 824, "cardiac_scale");
_Static_assert(offsetof(xt_stream_header, resp_mm) == 832, "resp_mm");
_Static_assert(offsetof(xt_stream_header, motion_flags) == 840, "motion_flags");
_Static_assert(offsetof(xt_stream_header, blur_samples) == 844, "blur_samples");
_Static_assert(offsetof(xt_stream_header, xform_version) == 848, "xform_version");
_Static_assert(sizeof(xt_stream_header) == XT_STREAM_HEADER_SIZE, "header size");

#endif /* XT_STREAM_H */
