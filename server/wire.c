/* The stream's wire options (srv_wire.h): plane and codec names as clients send them, and the
 * codecs. Compression runs on the stream's service thread, once per frame, message and codec
 * (ws.c keeps the result on the ring frame), so its speed is what a level is chosen by. */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#if defined(XT_WIRE_HAVE_ZSTD)
#include <zstd.h>
#endif
#if defined(XT_WIRE_HAVE_LZ4)
#include <lz4.h>
#endif

#include "srv_wire.h"

static const char *const codec_names[] = {"none", "zstd", "lz4"};

int xt_wire_codec_parse(const char *name) {
  if (!name) return -1;
  for (int c = 0; c < (int)(sizeof codec_names / sizeof *codec_names); c++)
    if (!strcasecmp(name, codec_names[c])) return c;
  return -1;
}

const char *xt_wire_codec_name(int codec) {
  return codec >= 0 && codec < (int)(sizeof codec_names / sizeof *codec_names) ? codec_names[codec] : "?";
}

int xt_wire_codec_available(int codec) {
  switch (codec) {
  case XT_STREAM_CODEC_NONE: return 1;
#if defined(XT_WIRE_HAVE_ZSTD)
  case XT_STREAM_CODEC_ZSTD: return 1;
#endif
#if defined(XT_WIRE_HAVE_LZ4)
  case XT_STREAM_CODEC_LZ4: return 1;
#endif
  default: return 0;
  }
}

const char *xt_wire_codecs(void) {
#if defined(XT_WIRE_HAVE_ZSTD) && defined(XT_WIRE_HAVE_LZ4)
  return "none, zstd, lz4";
#elif defined(XT_WIRE_HAVE_ZSTD)
  return "none, zstd";
#elif defined(XT_WIRE_HAVE_LZ4)
  return "none, lz4";
#else
  return "none";
#endif
}

size_t xt_wire_bound(int codec, size_t n) {
  switch (codec) {
#if defined(XT_WIRE_HAVE_ZSTD)
  case XT_STREAM_CODEC_ZSTD: return ZSTD_compressBound(n);
#endif
#if defined(XT_WIRE_HAVE_LZ4)
  case XT_STREAM_CODEC_LZ4: return n > (size_t)LZ4_MAX_INPUT_SIZE ? 0 : (size_t)LZ4_compressBound((int)n);
#endif
  default: return 0;
  }
}

size_t xt_wire_compress(int codec, const void *src, size_t n, void *dst, size_t cap) {
  (void)src, (void)n, (void)dst, (void)cap;
  switch (codec) {
#if defined(XT_WIRE_HAVE_ZSTD)
  case XT_STREAM_CODEC_ZSTD: {
    /* one context for the thread's life: a fresh one per frame costs its allocation each time */
    static _Thread_local ZSTD_CCtx *cctx;
    if (!cctx && !(cctx = ZSTD_createCCtx())) return 0;
    size_t w = ZSTD_compressCCtx(cctx, dst, cap, src, n, XT_WIRE_ZSTD_LEVEL);
    return ZSTD_isError(w) ? 0 : w;
  }
#endif
#if defined(XT_WIRE_HAVE_LZ4)
  case XT_STREAM_CODEC_LZ4: {
    if (n > (size_t)LZ4_MAX_INPUT_SIZE) return 0;
    int w = LZ4_compress_default(src, dst, (int)n, cap > INT32_MAX ? INT32_MAX : (int)cap);
    return w > 0 ? (size_t)w : 0;
  }
#endif
  default: return 0;
  }
}

int xt_wire_decompress(int codec, const void *src, size_t w, void *dst, size_t n) {
  (void)src, (void)w, (void)dst, (void)n;
  switch (codec) {
#if defined(XT_WIRE_HAVE_ZSTD)
  case XT_STREAM_CODEC_ZSTD: {
    size_t got = ZSTD_decompress(dst, n, src, w);
    return !ZSTD_isError(got) && got == n ? 0 : XT_EFORMAT;
  }
#endif
#if defined(XT_WIRE_HAVE_LZ4)
  case XT_STREAM_CODEC_LZ4:
    if (w > INT32_MAX || n > INT32_MAX) return XT_EFORMAT;
    return LZ4_decompress_safe(src, dst, (int)w, (int)n) == (int)n ? 0 : XT_EFORMAT;
#endif
  default: return XT_EFORMAT;
  }
}

int xt_wire_plane_parse(const char *name) {
  if (!name) return -1;
  if (!strcasecmp(name, "a")) return XT_STREAM_PLANE_A;
  if (!strcasecmp(name, "b")) return XT_STREAM_PLANE_B;
  return -1;
}

int xt_wire_planes_parse(const char *list, const char *what, unsigned *mask, xt_msg *msg) {
  if (!list || !*list) return xt_fail(msg, XT_EINVAL, "%s: expected a, b or a,b", what);
  if (strlen(list) > XT_WIRE_MAX_NAME) return xt_fail(msg, XT_EINVAL, "%s: longer than %d characters", what, XT_WIRE_MAX_NAME);
  unsigned m = 0;
  for (const char *p = list;;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char one[XT_WIRE_MAX_NAME + 1];
    memcpy(one, p, n);
    one[n] = 0;
    int k = xt_wire_plane_parse(one);
    if (k < 0) return xt_fail(msg, XT_EINVAL, "%s: unknown plane '%s' (a, b)", what, one);
    if (m >> k & 1) return xt_fail(msg, XT_EINVAL, "%s: plane '%s' named twice", what, one);
    m |= 1u << k;
    if (!e) break;
    p = e + 1;
  }
  *mask = m;
  return 0;
}
