/* The xtwin command's output files: NPY (float32 line integrals) and 16-bit PNG (intensity, raw
 * and processed frames), encoded by output/ (xt_output.h), and a set of output files that appears
 * all at once or not at all.
 *
 * An xt_outset collects the files of one run. Each file is written to a temporary name in its
 * target directory (".<name>.XXXXXX"); xt_outset_commit renames all of them into place, and
 * xt_outset_abort (or a failed commit) unlinks every temporary and every file this commit had
 * already renamed, and removes the directories the set created. A run therefore leaves either
 * all of its outputs or none. */
#ifndef XT_OUT_H
#define XT_OUT_H

#include <stdint.h>
#include <stdio.h>

#include "xt_err.h"

/* --- image files ---------------------------------------------------------------------------- */

/* NPY v1.0, dtype '<f4', C order, shape (rows, cols) (xt_npy_write). */
int xt_npy_write_f32(FILE *f, const float *data, int rows, int cols, xt_msg *msg);
/* 16-bit greyscale, libpng's default packing (XT_PNG_SMALL), tEXt "Software" = "xtwin" and, when
 * description is non-NULL, "Description" (xt_png16_write). */
int xt_png_write_u16(FILE *f, const uint16_t *px, int rows, int cols, const char *description, xt_msg *msg);

/* --- all-or-nothing output sets ------------------------------------------------------------- */

typedef struct xt_outfile {
  char *final_path; /* where it goes on commit */
  char *tmp_path;   /* where it is written until then; NULL once renamed */
  int renamed;
} xt_outfile;

typedef struct xt_outset {
  xt_outfile *files;
  int count, cap;
  char **made_dirs; /* directories created by xt_outset_mkdirs, outermost first */
  int ndirs;
  int fail_rename_at; /* testing: make the rename of file #n fail (-1 = never) */
} xt_outset;

void xt_outset_init(xt_outset *s);
/* mkdir -p of the directory part of path (nothing when path has none); records what it made. */
int xt_outset_mkdirs(xt_outset *s, const char *path, xt_msg *msg);
/* Opens a temporary file next to final_path for writing ("wb"); the set owns the name. */
int xt_outset_open(xt_outset *s, const char *final_path, FILE **out, xt_msg *msg);
/* Flushes, syncs and closes f (opened by xt_outset_open); reports write errors. */
int xt_outset_close(xt_outset *s, FILE *f, const char *final_path, xt_msg *msg);
/* Renames every file into place; on any failure rolls the whole set back (see above). */
int xt_outset_commit(xt_outset *s, xt_msg *msg);
/* Unlinks every temporary (and renamed file) and the directories the set created. */
void xt_outset_abort(xt_outset *s);
/* Frees the bookkeeping; call after commit or abort. */
void xt_outset_free(xt_outset *s);

#endif /* XT_OUT_H */
