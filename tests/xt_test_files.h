/* Small file writers shared by the tests that make volume files at test time (loaders,
 * allocation failure). Test code only: failures abort the test process. */
#ifndef XT_TEST_FILES_H
#define XT_TEST_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

static void write_bytes(const char *path, const char *mode, const void *p, size_t n) {
  FILE *f = fopen(path, mode);
  if (!f) {
    perror(path);
    exit(1);
  }
  if (n && fwrite(p, 1, n, f) != n) exit(1);
  fclose(f);
}

/* A text header, then n bytes of data (none when n is 0). */
static void write_text_then(const char *path, const char *text, const void *data, size_t n) {
  write_bytes(path, "wb", text, strlen(text));
  if (n) write_bytes(path, "ab", data, n);
}

/* zlib (gzip = 0) or gzip (gzip = 1) stream of buf; caller frees. */
static unsigned char *deflate_buf(const void *buf, size_t n, int gzip, size_t *outn) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 6, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(1);
  size_t cap = deflateBound(&z, (uLong)n) + 64;
  unsigned char *out = malloc(cap);
  if (!out) exit(1);
  z.next_in = (unsigned char *)(uintptr_t)buf;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(1);
  *outn = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

#endif /* XT_TEST_FILES_H */
