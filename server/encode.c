/* Encoders for POST /v1/render: a 16-bit greyscale PNG (written here on zlib: signature, IHDR,
 * tEXt with the geometry, IDAT, IEND) and NumPy's .npy version 1.0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "xt_server.h"

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* Appends one chunk (length, type, data, CRC over type and data) at *pos. */
static void chunk(unsigned char *out, size_t *pos, const char *type, const unsigned char *data, size_t n) {
  unsigned char *p = out + *pos;
  put_be32(p, (uint32_t)n);
  memcpy(p + 4, type, 4);
  if (n) memcpy(p + 8, data, n);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, p + 4, (uInt)(n + 4));
  put_be32(p + 8 + n, (uint32_t)crc);
  *pos += 12 + n;
}

int xt_png16_encode(const uint16_t *px, int rows, int cols, const char *text, unsigned char **out, size_t *len,
                    xt_msg *msg) {
  size_t stride = 1 + (size_t)cols * 2; /* filter byte + big-endian samples */
  size_t raw_n = stride * (size_t)rows;
  unsigned char *raw = malloc(raw_n);
  uLongf z_n = compressBound((uLong)raw_n);
  size_t tlen = text ? strlen(text) : 0;
  static const char key[] = "xtwin-geometry";
  size_t cap = 8 + (12 + 13) + (text ? 12 + sizeof key + tlen : 0) + 12 + (size_t)z_n + 12;
  unsigned char *buf = malloc(cap), *tx = text ? malloc(sizeof key + tlen) : NULL;
  int rc = 0;
  if (!raw || !buf || (text && !tx)) {
    rc = xt_fail(msg, XT_ENOMEM, "png: out of memory");
    goto fail;
  }
  for (int r = 0; r < rows; r++) {
    unsigned char *d = raw + (size_t)r * stride;
    const uint16_t *s = px + (size_t)r * (size_t)cols;
    d[0] = 0;
    for (int c = 0; c < cols; c++) d[1 + 2 * c] = (unsigned char)(s[c] >> 8), d[2 + 2 * c] = (unsigned char)s[c];
  }
  size_t pos = 0;
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(buf, sig, 8);
  pos = 8;
  unsigned char ihdr[13];
  put_be32(ihdr, (uint32_t)cols);
  put_be32(ihdr + 4, (uint32_t)rows);
  ihdr[8] = 16, ihdr[9] = 0, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0; /* 16-bit grey, no interlace */
  chunk(buf, &pos, "IHDR", ihdr, 13);
  if (text) {
    memcpy(tx, key, sizeof key); /* keyword, NUL, text */
    memcpy(tx + sizeof key, text, tlen);
    chunk(buf, &pos, "tEXt", tx, sizeof key + tlen);
  }
  /* IDAT: compress straight into the chunk's data area, then write its length and CRC. */
  unsigned char *idat = buf + pos;
  if (compress2(idat + 8, &z_n, raw, (uLong)raw_n, 3) != Z_OK) {
    rc = xt_fail(msg, XT_EINTERNAL, "png: deflate failed");
    goto fail;
  }
  put_be32(idat, (uint32_t)z_n);
  memcpy(idat + 4, "IDAT", 4);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, idat + 4, (uInt)(z_n + 4));
  put_be32(idat + 8 + z_n, (uint32_t)crc);
  pos += 12 + z_n;
  chunk(buf, &pos, "IEND", NULL, 0);
  *out = buf;
  *len = pos;
  buf = NULL;
fail:
  free(raw);
  free(tx);
  free(buf);
  return rc;
}

int xt_npy_encode(const void *px, int rows, int cols, int pixel_format, unsigned char **out, size_t *len, xt_msg *msg) {
  char dict[128];
  int dn = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }",
                    pixel_format == XT_STREAM_PIX_F32 ? "<f4" : "<u2", rows, cols);
  /* magic(6) version(2) header_len(2) dict, padded with spaces and a newline to a multiple of 64 */
  size_t hl = (size_t)dn + 1;
  size_t total_head = 10 + hl;
  size_t pad = (64 - total_head % 64) % 64;
  hl += pad;
  size_t bytes = (size_t)rows * (size_t)cols * (pixel_format == XT_STREAM_PIX_F32 ? 4 : 2);
  unsigned char *b = malloc(10 + hl + bytes);
  if (!b) return xt_fail(msg, XT_ENOMEM, "npy: out of memory");
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (unsigned char)(hl & 0xff), b[9] = (unsigned char)(hl >> 8);
  memcpy(b + 10, dict, (size_t)dn);
  memset(b + 10 + dn, ' ', hl - (size_t)dn - 1);
  b[10 + hl - 1] = '\n';
  memcpy(b + 10 + hl, px, bytes);
  *out = b;
  *len = 10 + hl + bytes;
  return 0;
}
