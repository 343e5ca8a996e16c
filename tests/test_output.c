/* Unit tests of the output layer (output/): the NPY header's exact bytes for every dtype and rank
 * in use, files equal to in-memory buffers, PNGs read back through libpng (samples and tEXt) in
 * both packing styles, and both styles' bytes pinned to what the encoders they replaced wrote
 * (the server's server/encode.c and the CLI's tools/xt_out.c of commit 6cfa5f6). */
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_output.h"
#include "xt_test.h"

/* A disc on a gradient with noise: neither flat nor random, as a frame is. */
static void image(uint16_t *px, int rows, int cols) {
  uint32_t s = 2323;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      s = s * 1664525u + 1013904223u;
      int in = (r - rows / 2) * (r - rows / 2) + (c - cols / 2) * (c - cols / 2) < rows * cols / 8;
      px[r * cols + c] = (uint16_t)((in ? 12000 : 60000) - 90 * r + 7 * c + (int)(s >> 24));
    }
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* What an encoder wrote to a FILE *, in memory (the caller frees it). */
static unsigned char *file_bytes(FILE *f, size_t *n) {
  long end = ftell(f);
  unsigned char *b = end > 0 ? malloc((size_t)end) : NULL;
  rewind(f);
  *n = b ? fread(b, 1, (size_t)end, f) : 0;
  return b;
}

XT_TEST(npy_header_bytes) {
  char h[XT_NPY_HEADER_MAX + 1] = {0}; /* a NUL after any header, for strstr */
  const int s2[2] = {2, 3}, s3[3] = {40, 50, 60}, s1[1] = {5};
  static const char want2[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  size_t n = xt_npy_header(h, XT_NPY_HEADER_MAX, "<f4", 2, s2);
  XT_REQUIRE(n == 128);
  XT_CHECK(!memcmp(h, want2, sizeof want2 - 1));
  for (size_t i = sizeof want2 - 1; i < n - 1; i++) XT_CHECK_MSG(h[i] == ' ', "byte %zu", i);
  XT_CHECK(h[n - 1] == '\n');
  n = xt_npy_header(h, XT_NPY_HEADER_MAX, "|u1", 3, s3);
  XT_CHECK(n == 128 && strstr(h + 10, "{'descr': '|u1', 'fortran_order': False, 'shape': (40, 50, 60), }") == h + 10);
  n = xt_npy_header(h, XT_NPY_HEADER_MAX, "<u2", 1, s1);
  XT_CHECK(n == 128 && strstr(h + 10, "'shape': (5,), }\x20") != NULL);
  XT_CHECK(xt_npy_data_bytes("<u8", 3, s3) == 40 * 50 * 60 * 8 && xt_npy_data_bytes("|u1", 2, s2) == 6);
  /* refused: a dtype we do not write, a bad shape, too small a buffer */
  const int zero[2] = {0, 3};
  XT_CHECK(xt_npy_header(h, sizeof h, ">f4", 2, s2) == 0 && xt_npy_header(h, sizeof h, "<f3", 2, s2) == 0);
  XT_CHECK(xt_npy_header(h, sizeof h, "<f4", 2, zero) == 0 && xt_npy_header(h, sizeof h, "<f4", 0, s2) == 0);
  XT_CHECK(xt_npy_header(h, 127, "<f4", 2, s2) == 0);
  xt_msg m;
  unsigned char *out = NULL;
  size_t len = 0;
  XT_CHECK(xt_npy_encode("<f4", 2, zero, h, &out, &len, &m) == XT_EINVAL && !out);
}

XT_TEST(npy_file_equals_buffer) {
  const float data[6] = {0.f, 1.5f, -2.f, 3.25f, 1e-7f, 100.f};
  const int shape[2] = {2, 3};
  unsigned char *mem = NULL;
  size_t nm = 0, nf = 0;
  xt_msg m;
  XT_REQUIRE(xt_npy_encode("<f4", 2, shape, data, &mem, &nm, &m) == 0);
  FILE *f = tmpfile();
  XT_REQUIRE(f);
  XT_CHECK(xt_npy_write(f, "<f4", 2, shape, data, &m) == 0);
  unsigned char *fb = file_bytes(f, &nf);
  fclose(f);
  XT_CHECK(nm == 128 + sizeof data && nf == nm && fb && !memcmp(fb, mem, nm));
  XT_CHECK(!memcmp(mem + 128, data, sizeof data));
  free(fb);
  free(mem);
  FILE *full = fopen("/dev/full", "wb");
  if (full) { /* unbuffered, so the write itself fails */
    setvbuf(full, NULL, _IONBF, 0);
    XT_CHECK(xt_npy_write(full, "<f4", 2, shape, data, &m) == XT_EIO);
    fclose(full);
  }
}

/* Decodes b through libpng: size, depth, samples, and the tEXt chunks in order. */
static void check_png(const unsigned char *b, size_t n, const uint16_t *px, int rows, int cols,
                      const xt_png_text *text, int ntext) {
  FILE *f = fmemopen((void *)b, n, "rb");
  XT_REQUIRE(f);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  uint8_t *row = malloc((size_t)cols * 2);
  XT_REQUIRE(png && info && row);
  if (setjmp(png_jmpbuf(png))) {
    XT_CHECK(!"libpng read error");
  } else {
    png_init_io(png, f);
    png_read_info(png, info);
    XT_CHECK(png_get_image_width(png, info) == (png_uint_32)cols);
    XT_CHECK(png_get_image_height(png, info) == (png_uint_32)rows);
    XT_CHECK(png_get_bit_depth(png, info) == 16 && png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY);
    png_textp t = NULL;
    int nt = 0;
    png_get_text(png, info, &t, &nt);
    XT_CHECK_MSG(nt == ntext, "%d text chunks", nt);
    for (int i = 0; i < nt && i < ntext; i++)
      XT_CHECK(!strcmp(t[i].key, text[i].key) && !strcmp(t[i].text, text[i].text));
    int bad = 0;
    for (int r = 0; r < rows; r++) {
      png_read_row(png, row, NULL);
      for (int c = 0; c < cols; c++) bad += (uint16_t)(row[2 * c] << 8 | row[2 * c + 1]) != px[r * cols + c];
    }
    XT_CHECK_MSG(bad == 0, "%d samples differ", bad);
  }
  png_destroy_read_struct(&png, &info, NULL);
  free(row);
  fclose(f);
}

XT_TEST(png_both_styles_read_back) {
  enum { R = 37, C = 53 };
  uint16_t px[R * C];
  image(px, R, C);
  px[0] = 0, px[1] = 65535, px[2] = 0x0102;
  const xt_png_text text[2] = {{"Software", "xtwin"}, {"xtwin-geometry", "{\"P\":[[1.0]]}"}};
  for (int style = XT_PNG_SMALL; style <= XT_PNG_FAST; style++) {
    unsigned char *mem = NULL;
    size_t nm = 0, nf = 0;
    xt_msg m;
    XT_REQUIRE(xt_png16_encode(px, R, C, (xt_png_style)style, text, 2, &mem, &nm, &m) == 0);
    check_png(mem, nm, px, R, C, text, 2);
    FILE *f = tmpfile();
    XT_REQUIRE(f);
    XT_CHECK(xt_png16_write(f, px, R, C, (xt_png_style)style, text, 2, &m) == 0);
    unsigned char *fb = file_bytes(f, &nf);
    fclose(f);
    XT_CHECK_MSG(fb && nf == nm && !memcmp(fb, mem, nm), "style %d: the file and the buffer differ", style);
    free(fb);
    free(mem);
  }
  unsigned char *mem = NULL;
  size_t nm = 0;
  xt_msg m;
  XT_REQUIRE(xt_png16_encode(px, R, C, XT_PNG_FAST, NULL, 0, &mem, &nm, &m) == 0); /* no tEXt at all */
  check_png(mem, nm, px, R, C, NULL, 0);
  free(mem);
}

/* The bytes of record: a 128 x 128 frame (the server's smallest mode) in each style, as the
 * replaced encoders wrote it. FAST is POST /v1/render's body; SMALL the CLI's .png files (which
 * tests/golden also pins, through whole renders). */
XT_TEST(png_bytes_as_before) {
  enum { R = 128, C = 128 };
  static uint16_t px[R * C];
  image(px, R, C);
  unsigned char *b = NULL;
  size_t n = 0;
  xt_msg m;
  const xt_png_text geo = {"xtwin-geometry", "{\"primary_deg\":20.0,\"pixel_format\":\"uint16\"}"};
  XT_REQUIRE(xt_png16_encode(px, R, C, XT_PNG_FAST, &geo, 1, &b, &n, &m) == 0);
  XT_CHECK_MSG(n == 28663 && fnv1a(b, n) == 0x5b728e36d8c89393ull, "FAST: %zu bytes, hash %016llx", n,
               (unsigned long long)fnv1a(b, n));
  free(b);
  const xt_png_text cli[2] = {{"Software", "xtwin"}, {"Description", "xtwin intensity"}};
  XT_REQUIRE(xt_png16_encode(px, R, C, XT_PNG_SMALL, cli, 2, &b, &n, &m) == 0);
  XT_CHECK_MSG(n == 23673 && fnv1a(b, n) == 0x3f10b577e6e86c90ull, "SMALL: %zu bytes, hash %016llx", n,
               (unsigned long long)fnv1a(b, n));
  free(b);
}

XT_TEST(png_errors) {
  uint16_t px[4] = {1, 2, 3, 4};
  unsigned char *b = NULL;
  size_t n = 0;
  xt_msg m;
  XT_CHECK(xt_png16_encode(px, 0, 2, XT_PNG_FAST, NULL, 0, &b, &n, &m) == XT_EINVAL && !b);
  const xt_png_text bad = {"", "empty key"};
  XT_CHECK(xt_png16_encode(px, 2, 2, XT_PNG_SMALL, &bad, 1, &b, &n, &m) != 0 && !b);
  FILE *full = fopen("/dev/full", "wb");
  if (full) { /* libpng's error path (longjmp) through a failing write */
    setvbuf(full, NULL, _IONBF, 0);
    XT_CHECK(xt_png16_write(full, px, 2, 2, XT_PNG_SMALL, NULL, 0, &m) == XT_EIO);
    XT_CHECK_MSG(strstr(m.text, "png:") == m.text, "%s", m.text);
    fclose(full);
  }
}

XT_TEST_MAIN(XT_ENTRY(npy_header_bytes) XT_ENTRY(npy_file_equals_buffer) XT_ENTRY(png_both_styles_read_back)
                 XT_ENTRY(png_bytes_as_before) XT_ENTRY(png_errors))
