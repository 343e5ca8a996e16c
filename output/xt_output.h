/* The output layer: one encoder per file format, whoever writes the file (the server's POST
 * /v1/render, `xtwin render`, `xtwin dataset`, test helpers). An output format is one file here:
 *
 *   xt_npy.c   NumPy .npy version 1.0 (any dtype and shape in use: '|u1', '<u2', '<u4', '<u8',
 *              '<f4'; 2-D frames, 3-D channel stacks and volumes), C order
 *   xt_png.c   16-bit greyscale PNG through libpng, with tEXt chunks
 *
 * The record-based formats (the JSON sidecar, the stream header, the dataset's frame JSON, and
 * later DICOM) join once the frame record (acq/xt_acq.h) exists, so that each is written from
 * the same fields by one function. This layer knows scene/ (errors) only; acq/ and the front ends
 * call it, never the other way round.
 *
 * Every encoder writes either to a FILE * or to one malloc'd buffer (the caller frees it), and
 * both give the same bytes. Pixel data is taken in host order and the formats are little-endian
 * (NPY) or written big-endian (PNG); xt_npy.c refuses to build on a big-endian host. */
#ifndef XT_OUTPUT_H
#define XT_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xt_err.h"

/* --- NPY ------------------------------------------------------------------------------------ */

/* Largest header xt_npy_header writes for up to XT_NPY_MAX_DIMS dimensions. */
#define XT_NPY_HEADER_MAX 256
#define XT_NPY_MAX_DIMS 4

/* The NPY v1.0 header of an array of dtype descr ("<f4", "<u2", "|u1", ...) and shape[ndim]
 * (1 <= ndim <= XT_NPY_MAX_DIMS, each > 0): magic, version, header length, the dict, padded with
 * spaces and a '\n' so the data starts at a multiple of 64 bytes. Returns its length, or 0 when
 * the arguments are bad or it does not fit cap. */
size_t xt_npy_header(char *buf, size_t cap, const char *descr, int ndim, const int *shape);
/* Bytes of the data that follows that header (the element size is the digit after the byte
 * order: 1, 2, 4 or 8); 0 for a descr this layer does not write. */
size_t xt_npy_data_bytes(const char *descr, int ndim, const int *shape);
/* Header and data to f. */
int xt_npy_write(FILE *f, const char *descr, int ndim, const int *shape, const void *data, xt_msg *msg);
/* Header and data in one malloc'd buffer *out of *len bytes. */
int xt_npy_encode(const char *descr, int ndim, const int *shape, const void *data, unsigned char **out, size_t *len,
                  xt_msg *msg);

/* --- PNG ------------------------------------------------------------------------------------ */

/* How the pixels are packed. Both styles stay because every file must stay byte for byte what it
 * was: the CLI's files were always libpng's defaults, POST /v1/render's body the fast style. */
typedef enum xt_png_style {
  XT_PNG_SMALL = 0, /* libpng's defaults: adaptive row filters, zlib level 6, IDAT chunks of 8 KiB */
  XT_PNG_FAST = 1   /* no row filter, zlib level 3, one IDAT: a frame a client is waiting for */
} xt_png_style;

/* One tEXt chunk: key of 1-79 printable Latin-1 characters, text without NULs. */
typedef struct xt_png_text {
  const char *key, *text;
} xt_png_text;

/* 16-bit greyscale, rows x cols samples (row 0 first; written big-endian as PNG requires), the
 * chunks in the order signature, IHDR, the ntext tEXt chunks, IDAT, IEND. */
int xt_png16_write(FILE *f, const uint16_t *px, int rows, int cols, xt_png_style style, const xt_png_text *text,
                   int ntext, xt_msg *msg);
/* The same bytes in one malloc'd buffer *out of *len bytes. */
int xt_png16_encode(const uint16_t *px, int rows, int cols, xt_png_style style, const xt_png_text *text, int ntext,
                    unsigned char **out, size_t *len, xt_msg *msg);

#endif /* XT_OUTPUT_H */
