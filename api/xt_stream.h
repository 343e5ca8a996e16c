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
#define XT_STREAM_VERSION 1

enum {
  XT_STREAM_PIX_U16 = 1, /* uint16 intensity, round(65535 * exp(-line integral)) */
  XT_STREAM_PIX_F32 = 2  /* float32 line integral of mu (dimensionless) */
};

enum {
  XT_STREAM_FLAG_LOCKSTEP = 1u /* frame answers a trigger (run mode lockstep) */
};

typedef struct xt_stream_header {
  uint32_t magic;               /*   0  XT_STREAM_MAGIC */
  uint16_t version;             /*   4  XT_STREAM_VERSION */
  uint16_t header_size;         /*   6  bytes before the pixels (304 in version 1) */
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
} xt_stream_header;             /* 304 */

#define XT_STREAM_HEADER_SIZE 304

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
_Static_assert(sizeof(xt_stream_header) == XT_STREAM_HEADER_SIZE, "header size");

#endif /* XT_STREAM_H */
