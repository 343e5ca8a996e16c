/* What a stream client chooses about its frames on the wire (wire.c): the planes it subscribes to
 * and the codec of its pixels, as names (query parameters, stream messages), and the codecs
 * themselves: lossless compression of a frame's pixels with zstd or LZ4, made once per frame by
 * the stream (ws.c) and shared by every client that asked for that codec. Knows nothing of the
 * server, so that the benchmark and the tests use it alone. */
#ifndef XT_SRV_WIRE_H
#define XT_SRV_WIRE_H

#include <stddef.h>

#include "xt_err.h"
#include "xt_stream.h"

/* zstd's level for the stream (docs/BENCHMARKS.md, "Stream compression": on the chain's real
 * frames level 3 is 5 % smaller than 1 at a third of the speed, and compression runs on the
 * stream's service thread) */
#define XT_WIRE_ZSTD_LEVEL 1
#define XT_WIRE_MAX_NAME 64 /* a plane list or codec name longer than this is refused */

/* A codec by name, case-insensitive: "none", "zstd", "lz4"; -1 otherwise. */
int xt_wire_codec_parse(const char *name);
/* "none", "zstd", "lz4" ("?" for anything else). */
const char *xt_wire_codec_name(int codec);
/* 1 when this build has the codec (none always; zstd with libzstd, lz4 with liblz4). */
int xt_wire_codec_available(int codec);
/* The codecs this build has, as "none, zstd, lz4" (for messages and the hello). */
const char *xt_wire_codecs(void);
/* The most bytes compressing n bytes can give (0 for codec none or a missing one). */
size_t xt_wire_bound(int codec, size_t n);
/* Compresses n bytes of src into dst (cap bytes): zstd as one frame that states its content size,
 * LZ4 as one block (its decoded size is the header's payload_bytes). Returns the bytes written, 0
 * on failure (a missing codec, or dst too small). */
size_t xt_wire_compress(int codec, const void *src, size_t n, void *dst, size_t cap);
/* The inverse: exactly n bytes into dst from w bytes of src; 0 ok, XT_EFORMAT when the data is
 * not n bytes of that codec. */
int xt_wire_decompress(int codec, const void *src, size_t w, void *dst, size_t n);

/* A list of planes, "a", "b", "a,b" (case-insensitive, comma-separated, each once at most), as a
 * mask (bit 0 A, bit 1 B). Errors name the field `what` ("planes"). */
int xt_wire_planes_parse(const char *list, const char *what, unsigned *mask, xt_msg *msg);
/* One plane name, "A" or "B" (case-insensitive): XT_STREAM_PLANE_*, or -1. */
int xt_wire_plane_parse(const char *name);

#endif /* XT_SRV_WIRE_H */
