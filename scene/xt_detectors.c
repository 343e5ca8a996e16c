/* The detector modes: scene/detectors.tsv and scene/detector_modes.tsv, compiled in (xt_embed_text)
 * and read once, on first use. The tables are the product's data; a table that does not read is a
 * build defect, so it stops the program with the line that failed rather than leaving it without
 * detectors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_geom.h"
#include "xt_table.h"

extern const char xt_detectors_tsv[];
extern const char xt_detector_modes_tsv[];

typedef struct panel {
  const char *name, *description;
  int cols, rows;
  double pitch_mm, sod_mm, sid_mm;
} panel;

static xt_table det_table, mode_table; /* kept: the modes' strings point into them */
static panel *panels;
static int npanels;
static xt_detector_mode *modes;
static int nmodes;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int read_panels(xt_msg *msg) {
  xt_table *t = &det_table;
  int rc = xt_table_parse(xt_detectors_tsv, "scene/detectors.tsv", t, msg);
  if (rc) return rc;
  int c_name, c_cols, c_rows, c_pitch, c_sod, c_sid, c_desc;
  if ((c_name = xt_table_col(t, "name", msg)) < 0 || (c_cols = xt_table_col(t, "cols", msg)) < 0 ||
      (c_rows = xt_table_col(t, "rows", msg)) < 0 || (c_pitch = xt_table_col(t, "pitch_mm", msg)) < 0 ||
      (c_sod = xt_table_col(t, "sod_mm", msg)) < 0 || (c_sid = xt_table_col(t, "sid_mm", msg)) < 0 ||
      (c_desc = xt_table_col(t, "description", msg)) < 0)
    return XT_EFORMAT;
  panels = calloc((size_t)t->nrows, sizeof *panels);
  if (!panels) return xt_fail(msg, XT_ENOMEM, "scene/detectors.tsv: out of memory");
  for (int r = 0; r < t->nrows; r++) {
    panel *p = &panels[r];
    p->name = xt_table_str(t, r, c_name);
    p->description = xt_table_str(t, r, c_desc);
    if ((rc = xt_table_int(t, r, c_cols, 1, 16384, &p->cols, msg)) ||
        (rc = xt_table_int(t, r, c_rows, 1, 16384, &p->rows, msg)) ||
        (rc = xt_table_num(t, r, c_pitch, 1e-3, 10, &p->pitch_mm, msg)) ||
        (rc = xt_table_num(t, r, c_sod, 1, XT_DIST_MAX_MM, &p->sod_mm, msg)) ||
        (rc = xt_table_num(t, r, c_sid, 1, XT_DIST_MAX_MM, &p->sid_mm, msg)))
      return rc;
    for (int q = 0; q < r; q++)
      if (!strcmp(panels[q].name, p->name))
        return xt_fail(msg, XT_EFORMAT, "scene/detectors.tsv:%d: detector '%s' named twice", t->line[r], p->name);
    npanels++;
  }
  return 0;
}

static int read_modes(xt_msg *msg) {
  xt_table *t = &mode_table;
  int rc = xt_table_parse(xt_detector_modes_tsv, "scene/detector_modes.tsv", t, msg);
  if (rc) return rc;
  enum { NAME, DET, FIELD, RC, RR, OC, OR, RATIO, READOUT, DESC, NCOL };
  static const char *names[NCOL] = {"name",     "detector", "field_cm",       "roi_cols",   "roi_rows",
                                    "out_cols", "out_rows", "dose_ratio_pct", "readout_ms", "description"};
  int c[NCOL];
  if (xt_table_cols(t, names, NCOL, c, msg)) return XT_EFORMAT;
  modes = calloc((size_t)t->nrows, sizeof *modes);
  if (!modes) return xt_fail(msg, XT_ENOMEM, "scene/detector_modes.tsv: out of memory");
  for (int r = 0; r < t->nrows; r++) {
    xt_detector_mode *m = &modes[r];
    const int line = t->line[r];
    m->name = xt_table_str(t, r, c[NAME]);
    m->description = xt_table_str(t, r, c[DESC]);
    m->detector = xt_table_str(t, r, c[DET]);
    const panel *p = NULL;
    for (int q = 0; q < npanels; q++)
      if (!strcmp(panels[q].name, m->detector)) p = &panels[q];
    if (!p) return xt_fail(msg, XT_EFORMAT, "scene/detector_modes.tsv:%d: no detector '%s'", line, m->detector);
    double ratio_pct;
    if ((rc = xt_table_num(t, r, c[FIELD], 0, 100, &m->field_cm, msg)) ||
        (rc = xt_table_int(t, r, c[RC], 1, p->cols, &m->roi_cols, msg)) ||
        (rc = xt_table_int(t, r, c[RR], 1, p->rows, &m->roi_rows, msg)) ||
        (rc = xt_table_int(t, r, c[OC], 1, m->roi_cols, &m->cols, msg)) ||
        (rc = xt_table_int(t, r, c[OR], 1, m->roi_rows, &m->rows, msg)) ||
        (rc = xt_table_num(t, r, c[RATIO], 10, 1000, &ratio_pct, msg)) ||
        (rc = xt_table_num(t, r, c[READOUT], 0, 1000, &m->readout_ms, msg)))
      return rc;
    /* A centred region starts on a whole pixel only when it leaves an even margin. */
    if ((p->cols - m->roi_cols) % 2 || (p->rows - m->roi_rows) % 2)
      return xt_fail(msg, XT_EFORMAT,
                     "scene/detector_modes.tsv:%d: %s: a %d x %d region is not centred on the %d x %d panel", line,
                     m->name, m->roi_cols, m->roi_rows, p->cols, p->rows);
    /* One ratio both ways: square pixels in, square pixels out. */
    if ((long)m->roi_cols * m->rows != (long)m->roi_rows * m->cols)
      return xt_fail(msg, XT_EFORMAT, "scene/detector_modes.tsv:%d: %s: %d x %d out of %d x %d is not one scale", line,
                     m->name, m->cols, m->rows, m->roi_cols, m->roi_rows);
    m->det_cols = p->cols;
    m->det_rows = p->rows;
    m->det_pitch_mm = p->pitch_mm;
    m->roi_col0 = (p->cols - m->roi_cols) / 2;
    m->roi_row0 = (p->rows - m->roi_rows) / 2;
    m->binning = (double)m->roi_cols / m->cols;
    m->pitch_u_mm = m->pitch_v_mm = p->pitch_mm * m->roi_cols / m->cols;
    m->sod_mm = p->sod_mm;
    m->sid_mm = p->sid_mm;
    m->dose_ratio = ratio_pct / 100.0;
    for (int q = 0; q < r; q++)
      if (!strcmp(modes[q].name, m->name))
        return xt_fail(msg, XT_EFORMAT, "scene/detector_modes.tsv:%d: mode '%s' named twice", line, m->name);
    nmodes++;
  }
  return 0;
}

static void load(void) {
  xt_msg msg = {{0}};
  if (read_panels(&msg) || read_modes(&msg)) {
    fprintf(stderr, "xtwin: the built-in detector tables: %s\n", msg.text);
    abort();
  }
}

int xt_mode_count(void) {
  pthread_once(&once, load);
  return nmodes;
}

const xt_detector_mode *xt_mode_at(int i) { return (i >= 0 && i < xt_mode_count()) ? &modes[i] : NULL; }

const xt_detector_mode *xt_mode_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < xt_mode_count(); i++)
    if (strcmp(modes[i].name, name) == 0) return &modes[i];
  return NULL;
}

const char *xt_detector_name_at(int i) {
  pthread_once(&once, load);
  return (i >= 0 && i < npanels) ? panels[i].name : NULL;
}
