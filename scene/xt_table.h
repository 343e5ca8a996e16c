/* Table files: the device's data (detectors and their fields, protocols) as text a physicist can
 * read and change without touching code. One row per line, cells separated by blanks, a cell with
 * blanks in double quotes, '#' to the end of a line a comment; the first row names the columns.
 * Readers look columns up by name, so a table may gain columns without breaking older readers, and
 * every error names the table, the line and the column. */
#ifndef XT_TABLE_H
#define XT_TABLE_H

#include "xt_err.h"

#define XT_TABLE_MAX_BYTES (1 << 20)

typedef struct xt_table {
  char source[160]; /* the file name (or the embedded table's name) errors quote */
  int ncols, nrows;
  char **cols; /* ncols names */
  char **cell; /* nrows x ncols, row-major */
  int *line;   /* source line of each row */
  char *buf;   /* the cells' storage */
} xt_table;

/* Parses text (NUL-terminated) into t; every row must have the header's number of cells. */
int xt_table_parse(const char *text, const char *source, xt_table *t, xt_msg *msg);
/* The same from a file (at most XT_TABLE_MAX_BYTES). */
int xt_table_read_file(const char *path, xt_table *t, xt_msg *msg);
void xt_table_free(xt_table *t);

/* The index of a named column; XT_EFORMAT naming the table when it is missing. */
int xt_table_col(const xt_table *t, const char *name, xt_msg *msg);
/* The indices of n named columns into col[]; XT_EFORMAT naming the first one missing. */
int xt_table_cols(const xt_table *t, const char *const *names, int n, int *col, xt_msg *msg);
const char *xt_table_str(const xt_table *t, int row, int col);
/* A cell as a number in [lo, hi] (XT_EFORMAT / XT_ERANGE naming table:line and column). */
int xt_table_num(const xt_table *t, int row, int col, double lo, double hi, double *out, xt_msg *msg);
int xt_table_int(const xt_table *t, int row, int col, int lo, int hi, int *out, xt_msg *msg);

#endif /* XT_TABLE_H */
