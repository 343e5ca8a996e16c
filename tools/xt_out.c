/* Output writers of the xtwin command: NPY v1.0 float32 arrays, 16-bit grayscale PNG through
 * libpng, and the all-or-nothing output set (temporary files renamed into place together).
 * See xt_out.h for the contract; docs/cli.md for the formats as users see them. */
#include "xt_out.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* NPY                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  uint8_t b;
  memcpy(&b, &one, 1);
  return b == 1;
}

int xt_npy_write_f32(FILE *f, const float *data, int rows, int cols, xt_msg *msg) {
  if (rows < 1 || cols < 1) return xt_fail(msg, XT_EINVAL, "npy: bad shape (%d, %d)", rows, cols);
  /* Magic, version 1.0, little-endian uint16 header length, then the dict padded with spaces
   * and ending in '\n' so that the data starts at a multiple of 64 bytes. */
  char dict[128];
  int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
  if (dl < 0 || dl >= (int)sizeof dict) return xt_fail(msg, XT_EINTERNAL, "npy: header too long");
  size_t total = 10 + (size_t)dl + 1;
  size_t padded = (total + 63) / 64 * 64;
  size_t hlen = padded - 10;
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                            (unsigned char)(hlen >> 8)};
  if (fwrite(head, 1, sizeof head, f) != sizeof head || fwrite(dict, 1, (size_t)dl, f) != (size_t)dl)
    return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));
  for (size_t i = 10 + (size_t)dl; i < padded - 1; i++)
    if (fputc(' ', f) == EOF) return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));
  if (fputc('\n', f) == EOF) return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));

  size_t n = (size_t)rows * (size_t)cols;
  if (host_is_little_endian()) {
    if (fwrite(data, sizeof(float), n, f) != n) return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char b[4], le[4];
    memcpy(b, &data[i], 4);
    le[0] = b[3], le[1] = b[2], le[2] = b[1], le[3] = b[0];
    if (fwrite(le, 1, 4, f) != 4) return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* PNG                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* libpng reports errors by calling this and expecting it not to return. */
static void png_on_error(png_structp png, png_const_charp text) {
  xt_msg *msg = (xt_msg *)png_get_error_ptr(png);
  xt_fail(msg, XT_EIO, "png: %s", text);
  png_longjmp(png, 1);
}
/* Warnings stay quiet: the CLI's stderr carries one line per failure and nothing else. */
static void png_on_warning(png_structp png, png_const_charp text) {
  (void)png;
  (void)text;
}

/* The part that may longjmp; it modifies no local that is read after the jump. */
static int png_body(png_structp png, png_infop info, FILE *f, const uint16_t *px, int rows, int cols,
                    const char *description, uint8_t *row) {
  if (setjmp(png_jmpbuf(png))) return XT_EIO;
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)cols, (png_uint_32)rows, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_text text[2];
  memset(text, 0, sizeof text);
  text[0].compression = PNG_TEXT_COMPRESSION_NONE;
  text[0].key = (png_charp) "Software";
  text[0].text = (png_charp) "xtwin";
  int ntext = 1;
  if (description) {
    text[1].compression = PNG_TEXT_COMPRESSION_NONE;
    text[1].key = (png_charp) "Description";
    text[1].text = (png_charp)description;
    ntext = 2;
  }
  png_set_text(png, info, text, ntext);
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

int xt_png_write_u16(FILE *f, const uint16_t *px, int rows, int cols, const char *description, xt_msg *msg) {
  if (rows < 1 || cols < 1 || rows > 1000000 || cols > 1000000)
    return xt_fail(msg, XT_EINVAL, "png: bad size %d x %d", cols, rows);
  int rc = 0;
  png_structp png = NULL;
  png_infop info = NULL;
  uint8_t *row = malloc((size_t)cols * 2);
  if (!row) return xt_fail(msg, XT_ENOMEM, "png: out of memory");
  png = png_create_write_struct(PNG_LIBPNG_VER_STRING, msg, png_on_error, png_on_warning);
  if (!png) {
    rc = xt_fail(msg, XT_ENOMEM, "png: cannot create the libpng writer");
    goto fail;
  }
  info = png_create_info_struct(png);
  if (!info) {
    rc = xt_fail(msg, XT_ENOMEM, "png: cannot create the libpng info");
    goto fail;
  }
  rc = png_body(png, info, f, px, rows, cols, description, row); /* msg set by png_on_error */
fail:
  if (png) png_destroy_write_struct(&png, info ? &info : NULL);
  free(row);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* All-or-nothing output sets                                                                  */
/* ------------------------------------------------------------------------------------------ */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void xt_outset_init(xt_outset *s) {
  memset(s, 0, sizeof *s);
  s->fail_rename_at = -1;
}

int xt_outset_mkdirs(xt_outset *s, const char *path, xt_msg *msg) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return 0; /* current directory or "/" */
  size_t len = (size_t)(slash - path);
  char *dir = malloc(len + 1);
  if (!dir) return xt_fail(msg, XT_ENOMEM, "out of memory");
  memcpy(dir, path, len);
  dir[len] = 0;
  int rc = 0;
  /* Each prefix ending at a '/' (and the whole), outermost first. */
  for (size_t i = 1; i <= len; i++) {
    if (i < len && dir[i] != '/') continue;
    if (dir[i - 1] == '/') continue; /* "a//b" */
    char save = dir[i];
    dir[i] = 0;
    struct stat st;
    if (mkdir(dir, 0777) == 0) {
      char **nd = realloc(s->made_dirs, (size_t)(s->ndirs + 1) * sizeof *nd);
      char *copy = dup_str(dir);
      if (!nd || !copy) {
        free(copy);
        if (nd) s->made_dirs = nd;
        rmdir(dir);
        rc = xt_fail(msg, XT_ENOMEM, "out of memory");
        goto done;
      }
      s->made_dirs = nd;
      s->made_dirs[s->ndirs++] = copy;
    } else if (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
      /* already there */
    } else {
      int e = errno == EEXIST ? ENOTDIR : errno;
      rc = xt_fail(msg, XT_EIO, "cannot create directory \"%s\": %s", dir, strerror(e));
      goto done;
    }
    dir[i] = save;
  }
done:
  free(dir);
  return rc;
}

int xt_outset_open(xt_outset *s, const char *final_path, FILE **out, xt_msg *msg) {
  *out = NULL;
  const char *slash = strrchr(final_path, '/');
  size_t dlen = slash ? (size_t)(slash - final_path) + 1 : 0; /* keeps the '/' */
  const char *base = final_path + dlen;
  if (!*base) return xt_fail(msg, XT_EINVAL, "\"%s\": not a file name", final_path);
  size_t n = dlen + 1 + strlen(base) + 8;
  char *tmp = malloc(n);
  char *fin = dup_str(final_path);
  if (!tmp || !fin) goto nomem;
  memcpy(tmp, final_path, dlen);
  snprintf(tmp + dlen, n - dlen, ".%s.XXXXXX", base);
  if (s->count == s->cap) {
    int cap = s->cap ? 2 * s->cap : 8;
    xt_outfile *nf = realloc(s->files, (size_t)cap * sizeof *nf);
    if (!nf) goto nomem;
    s->files = nf;
    s->cap = cap;
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    free(fin);
    return xt_fail(msg, XT_EIO, "cannot create a file next to \"%s\": %s", final_path, strerror(e));
  }
  /* mkstemp makes 0600; outputs get the usual 0666 & ~umask. */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) { /* not fatal: the file is still ours */
  }
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    close(fd);
    unlink(tmp);
    free(tmp);
    free(fin);
    return xt_fail(msg, XT_EIO, "cannot open \"%s\": %s", final_path, strerror(e));
  }
  s->files[s->count].final_path = fin;
  s->files[s->count].tmp_path = tmp;
  s->files[s->count].renamed = 0;
  s->count++;
  *out = f;
  return 0;
nomem:
  free(tmp);
  free(fin);
  return xt_fail(msg, XT_ENOMEM, "out of memory");
}

int xt_outset_close(xt_outset *s, FILE *f, const char *final_path, xt_msg *msg) {
  (void)s;
  int bad = 0, e = 0;
  if (fflush(f) != 0 || ferror(f)) bad = 1, e = errno;
  if (!bad && fsync(fileno(f)) != 0 && errno != EINVAL) bad = 1, e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad) return xt_fail(msg, XT_EIO, "cannot write \"%s\": %s", final_path, strerror(e ? e : EIO));
  return 0;
}

int xt_outset_commit(xt_outset *s, xt_msg *msg) {
  for (int i = 0; i < s->count; i++) {
    xt_outfile *o = &s->files[i];
    int e = 0;
    if (i == s->fail_rename_at) e = EIO;
    else if (rename(o->tmp_path, o->final_path) != 0) e = errno;
    if (e) {
      int rc = xt_fail(msg, XT_EIO, "cannot create \"%s\": %s", o->final_path, strerror(e));
      xt_outset_abort(s);
      return rc;
    }
    o->renamed = 1;
    free(o->tmp_path);
    o->tmp_path = NULL;
  }
  return 0;
}

void xt_outset_abort(xt_outset *s) {
  for (int i = 0; i < s->count; i++) {
    xt_outfile *o = &s->files[i];
    if (o->renamed) unlink(o->final_path);
    else if (o->tmp_path) unlink(o->tmp_path);
    o->renamed = 0;
    free(o->tmp_path);
    o->tmp_path = NULL;
  }
  for (int i = s->ndirs - 1; i >= 0; i--) rmdir(s->made_dirs[i]); /* only succeeds when empty */
}

void xt_outset_free(xt_outset *s) {
  for (int i = 0; i < s->count; i++) {
    free(s->files[i].final_path);
    free(s->files[i].tmp_path);
  }
  for (int i = 0; i < s->ndirs; i++) free(s->made_dirs[i]);
  free(s->files);
  free(s->made_dirs);
  xt_outset_init(s);
}
