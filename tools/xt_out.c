/* Output files of the xtwin command: the CLI's choices for its NPY and PNG files (encoded by
 * output/), and the all-or-nothing output set (temporary files renamed into place together).
 * See xt_out.h for the contract; docs/cli.md for the formats as users see them. */
#include "xt_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "xt_output.h"

/* ------------------------------------------------------------------------------------------ */
/* The CLI's image files                                                                      */
/* ------------------------------------------------------------------------------------------ */

int xt_npy_write_f32(FILE *f, const float *data, int rows, int cols, xt_msg *msg) {
  const int shape[2] = {rows, cols};
  return xt_npy_write(f, "<f4", 2, shape, data, msg);
}

int xt_png_write_u16(FILE *f, const uint16_t *px, int rows, int cols, const char *description, xt_msg *msg) {
  const xt_png_text text[2] = {{"Software", "xtwin"}, {"Description", description}};
  return xt_png16_write(f, px, rows, cols, XT_PNG_SMALL, text, description ? 2 : 1, msg);
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
