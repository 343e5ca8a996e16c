/* 16-bit greyscale PNG through libpng: the one PNG writer of xtwin (the CLI's intensity, raw and
 * processed frames; POST /v1/render's body), to a FILE * or to memory.
 *
 * The two packing styles (xt_output.h) are two settings of the same libpng writer. XT_PNG_FAST
 * reproduces, byte for byte, the server's former hand-rolled encoder (zlib's compress2 at level 3
 * over unfiltered rows, one IDAT): the deflate stream does not depend on how the rows are fed
 * in, and one compression buffer of compressBound bytes keeps libpng from splitting the IDAT.
 * libpng shrinks the zlib window (and writes that in the stream's first byte) only for images
 * of at most 16 KiB of row data, smaller than any detector mode the server renders. */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "xt_output.h"

/* libpng reports errors by calling this and expecting it not to return. */
static void on_error(png_structp png, png_const_charp text) {
  xt_msg *msg = (xt_msg *)png_get_error_ptr(png);
  xt_fail(msg, XT_EIO, "png: %s", text);
  png_longjmp(png, 1);
}
/* Warnings stay quiet: a CLI's stderr carries one line per failure and nothing else. */
static void on_warning(png_structp png, png_const_charp text) {
  (void)png;
  (void)text;
}

/* The memory sink: one buffer grown by doubling. */
typedef struct sink {
  unsigned char *p;
  size_t n, cap;
  int nomem;
} sink;

static void sink_write(png_structp png, png_bytep data, size_t n) {
  sink *s = (sink *)png_get_io_ptr(png);
  if (s->n + n > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->n + n) cap *= 2;
    unsigned char *p = realloc(s->p, cap);
    if (!p) {
      s->nomem = 1;
      png_error(png, "out of memory");
    }
    s->p = p, s->cap = cap;
  }
  memcpy(s->p + s->n, data, n);
  s->n += n;
}
/* png_write_end flushes; libpng's default flush would take the io pointer for a FILE *. */
static void sink_flush(png_structp png) { (void)png; }

/* The part that may longjmp; it modifies no local that is read after the jump. f or s is the
 * destination. */
static int body(png_structp png, png_infop info, FILE *f, sink *s, const uint16_t *px, int rows, int cols,
                xt_png_style style, const xt_png_text *text, int ntext, png_text *tx, uint8_t *row) {
  if (setjmp(png_jmpbuf(png))) return XT_EIO;
  if (f) png_init_io(png, f);
  else png_set_write_fn(png, s, sink_write, sink_flush);
  png_set_IHDR(png, info, (png_uint_32)cols, (png_uint_32)rows, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (style == XT_PNG_FAST) {
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
    png_set_compression_level(png, 3);
    png_set_compression_strategy(png, Z_DEFAULT_STRATEGY);
    png_set_compression_buffer_size(png, compressBound((uLong)rows * (1 + 2 * (uLong)cols)));
  }
  if (ntext) {
    for (int i = 0; i < ntext; i++) {
      tx[i].compression = PNG_TEXT_COMPRESSION_NONE;
      tx[i].key = (png_charp)text[i].key;
      tx[i].text = (png_charp)text[i].text;
    }
    png_set_text(png, info, tx, ntext);
  }
  png_write_info(png, info);
  for (int r = 0; r < rows; r++) {
    const uint16_t *src = px + (size_t)r * (size_t)cols;
    for (int c = 0; c < cols; c++) { /* PNG samples are big-endian */
      row[2 * c] = (uint8_t)(src[c] >> 8);
      row[2 * c + 1] = (uint8_t)(src[c] & 0xff);
    }
    png_write_row(png, row);
  }
  png_write_end(png, NULL);
  return 0;
}

/* Writes to f, or to s when f is NULL. */
static int png16(FILE *f, sink *s, const uint16_t *px, int rows, int cols, xt_png_style style,
                 const xt_png_text *text, int ntext, xt_msg *msg) {
  if (rows < 1 || cols < 1 || rows > 1000000 || cols > 1000000)
    return xt_fail(msg, XT_EINVAL, "png: bad size %d x %d", cols, rows);
  if (ntext < 0 || (ntext && !text)) return xt_fail(msg, XT_EINVAL, "png: bad text chunks");
  int rc = 0;
  png_structp png = NULL;
  png_infop info = NULL;
  uint8_t *row = malloc((size_t)cols * 2);
  png_text *tx = calloc((size_t)ntext + 1, sizeof *tx);
  if (!row || !tx) {
    rc = xt_fail(msg, XT_ENOMEM, "png: out of memory");
    goto fail;
  }
  png = png_create_write_struct(PNG_LIBPNG_VER_STRING, msg, on_error, on_warning);
  if (!png) {
    rc = xt_fail(msg, XT_ENOMEM, "png: cannot create the libpng writer");
    goto fail;
  }
  info = png_create_info_struct(png);
  if (!info) {
    rc = xt_fail(msg, XT_ENOMEM, "png: cannot create the libpng info");
    goto fail;
  }
  rc = body(png, info, f, s, px, rows, cols, style, text, ntext, tx, row); /* msg set by on_error */
  if (rc && s && s->nomem) rc = xt_fail(msg, XT_ENOMEM, "png: out of memory");
fail:
  if (png) png_destroy_write_struct(&png, info ? &info : NULL);
  free(tx);
  free(row);
  return rc;
}

int xt_png16_write(FILE *f, const uint16_t *px, int rows, int cols, xt_png_style style, const xt_png_text *text,
                   int ntext, xt_msg *msg) {
  return png16(f, NULL, px, rows, cols, style, text, ntext, msg);
}

int xt_png16_encode(const uint16_t *px, int rows, int cols, xt_png_style style, const xt_png_text *text, int ntext,
                    unsigned char **out, size_t *len, xt_msg *msg) {
  sink s = {0};
  int rc = png16(NULL, &s, px, rows, cols, style, text, ntext, msg);
  if (rc) {
    free(s.p);
    return rc;
  }
  *out = s.p;
  *len = s.n;
  return 0;
}
