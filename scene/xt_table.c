/* Table files (xt_table.h). */
#include "xt_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void xt_table_free(xt_table *t) {
  if (!t) return;
  free(t->cols);
  free(t->cell);
  free(t->line);
  free(t->buf);
  memset(t, 0, sizeof *t);
}

/* Splits one line (in place, in buf) into cells; returns their count or a negative error. */
static int split_line(char *s, char **out, int cap, const char *source, int lineno, xt_msg *msg) {
  int n = 0;
  for (;;) {
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    if (!*s || *s == '#') return n;
    if (n == cap) return xt_fail(msg, XT_EFORMAT, "%s:%d: more than %d cells", source, lineno, cap);
    if (*s == '"') {
      char *end = strchr(s + 1, '"');
      if (!end) return xt_fail(msg, XT_EFORMAT, "%s:%d: unterminated quote", source, lineno);
      *end = '\0';
      out[n++] = s + 1;
      s = end + 1;
      if (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '#')
        return xt_fail(msg, XT_EFORMAT, "%s:%d: a blank must follow a quoted cell", source, lineno);
      continue;
    }
    out[n++] = s;
    while (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '#') s++;
    if (*s == '#') {
      *s = '\0';
      return n;
    }
    if (*s) *s++ = '\0';
  }
}

#define MAX_COLS 64

int xt_table_parse(const char *text, const char *source, xt_table *t, xt_msg *msg) {
  memset(t, 0, sizeof *t);
  snprintf(t->source, sizeof t->source, "%s", source ? source : "table");
  size_t len = strlen(text);
  if (len > XT_TABLE_MAX_BYTES)
    return xt_fail(msg, XT_ETOOLARGE, "%s: larger than %d bytes", t->source, XT_TABLE_MAX_BYTES);
  int nlines = 1;
  for (size_t i = 0; i < len; i++) nlines += text[i] == '\n';
  t->buf = malloc(len + 1);
  t->cols = calloc(MAX_COLS, sizeof *t->cols);
  t->line = calloc((size_t)nlines, sizeof *t->line);
  if (!t->buf || !t->cols || !t->line) {
    xt_table_free(t);
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory", source);
  }
  memcpy(t->buf, text, len + 1);
  char *row[MAX_COLS];
  int rc = 0, lineno = 0;
  for (char *s = t->buf; s && !rc;) {
    char *nl = strchr(s, '\n');
    if (nl) *nl = '\0';
    lineno++;
    int n = split_line(s, row, MAX_COLS, t->source, lineno, msg);
    s = nl ? nl + 1 : NULL;
    if (n < 0) {
      rc = n;
    } else if (n == 0) {
      continue;
    } else if (!t->ncols) {
      t->ncols = n;
      memcpy(t->cols, row, (size_t)n * sizeof *row);
      for (int i = 0; i < n && !rc; i++)
        for (int j = 0; j < i; j++)
          if (!strcmp(row[i], row[j])) {
            rc = xt_fail(msg, XT_EFORMAT, "%s:%d: column '%s' named twice", t->source, lineno, row[i]);
            break;
          }
      if (!rc) t->cell = calloc((size_t)nlines * (size_t)n, sizeof *t->cell);
      if (!rc && !t->cell) rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", t->source);
    } else if (n != t->ncols) {
      rc = xt_fail(msg, XT_EFORMAT, "%s:%d: %d cells, the header names %d", t->source, lineno, n, t->ncols);
    } else {
      memcpy(t->cell + (size_t)t->nrows * (size_t)t->ncols, row, (size_t)n * sizeof *row);
      t->line[t->nrows++] = lineno;
    }
  }
  if (!rc && !t->ncols) rc = xt_fail(msg, XT_EFORMAT, "%s: no header row", t->source);
  if (rc) xt_table_free(t);
  return rc;
}

int xt_table_read_file(const char *path, xt_table *t, xt_msg *msg) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: %s", path, strerror(errno));
  char *text = malloc(XT_TABLE_MAX_BYTES + 2);
  if (!text) {
    fclose(f);
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  }
  size_t n = fread(text, 1, XT_TABLE_MAX_BYTES + 1, f);
  int err = ferror(f);
  fclose(f);
  int rc;
  if (err) rc = xt_fail(msg, XT_EIO, "%s: read error", path);
  else if (n > XT_TABLE_MAX_BYTES)
    rc = xt_fail(msg, XT_ETOOLARGE, "%s: larger than %d bytes", path, XT_TABLE_MAX_BYTES);
  else if (memchr(text, '\0', n)) rc = xt_fail(msg, XT_EFORMAT, "%s: not a text table (NUL byte)", path);
  else {
    text[n] = '\0';
    rc = xt_table_parse(text, path, t, msg);
  }
  free(text);
  return rc;
}

int xt_table_col(const xt_table *t, const char *name, xt_msg *msg) {
  for (int i = 0; i < t->ncols; i++)
    if (!strcmp(t->cols[i], name)) return i;
  return xt_fail(msg, XT_EFORMAT, "%s: no column '%s'", t->source, name);
}

int xt_table_cols(const xt_table *t, const char *const *names, int n, int *col, xt_msg *msg) {
  for (int i = 0; i < n; i++)
    if ((col[i] = xt_table_col(t, names[i], msg)) < 0) return XT_EFORMAT;
  return 0;
}

const char *xt_table_str(const xt_table *t, int row, int col) {
  return t->cell[(size_t)row * (size_t)t->ncols + (size_t)col];
}

int xt_table_num(const xt_table *t, int row, int col, double lo, double hi, double *out, xt_msg *msg) {
  const char *s = xt_table_str(t, row, col);
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno == ERANGE || !isfinite(v))
    return xt_fail(msg, XT_EFORMAT, "%s:%d: column '%s': '%s' is not a number", t->source, t->line[row], t->cols[col],
                   s);
  if (v < lo || v > hi)
    return xt_fail(msg, XT_ERANGE, "%s:%d: column '%s': %g outside [%g, %g]", t->source, t->line[row], t->cols[col], v,
                   lo, hi);
  *out = v;
  return 0;
}

int xt_table_int(const xt_table *t, int row, int col, int lo, int hi, int *out, xt_msg *msg) {
  double v;
  int rc = xt_table_num(t, row, col, lo, hi, &v, msg);
  if (rc) return rc;
  if (v != floor(v))
    return xt_fail(msg, XT_EFORMAT, "%s:%d: column '%s': %g is not a whole number", t->source, t->line[row],
                   t->cols[col], v);
  *out = (int)v;
  return 0;
}
