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
#define XT_STREAM_VERSION 2

enum {
  XT_STREAM_PIX_U16 = 1, /* uint16: intensity round(65535 * exp(-line integral)), or (frame_kind
                            raw / processed) the imaging chain's detector codes */
  XT_STREAM_PIX_F32 = 2  /* float32 line integral of mu (dimensionless) */
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
  XT_STREAM_CHAIN_EDGE = 8u
};

enum {
  XT_STREAM_FLAG_LOCKSTEP = 1u /* frame answers a trigger (run mode lockstep) */
};

typedef struct xt_stream_header {
  uint32_t magic;               /*   0  XT_STREAM_MAGIC */
  uint16_t version;             /*   4  XT_STREAM_VERSION */
  uint16_t header_size;         /*   6  bytes before the pixels (304 in version 1, 400 in 2) */
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
} xt_stream_header;             /* 400 */

#define XT_STREAM_HEADER_SIZE 400

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
_Static_assert(sizeof(xt_stream_header) == XT_STREAM_HEADER_SIZE, "header size");

#endif /* XT_STREAM_H */
