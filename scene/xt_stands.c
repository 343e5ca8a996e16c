/* The C-arm stands: scene/stands.tsv, compiled in and read once. A biplane system's two planes are
 * two stands on one isocentre; each limits its own axes (the frontal one as the twin always did). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_geom.h"
#include "xt_table.h"

extern const char xt_stands_tsv[];

static xt_table table; /* kept: the stands' names point into it */
static xt_stand *stands;
static int nstands;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int read_stands(xt_msg *msg) {
  xt_table *t = &table;
  int rc = xt_table_parse(xt_stands_tsv, "scene/stands.tsv", t, msg);
  if (rc) return rc;
  enum { NAME, PLANE, PMIN, PMAX, SMIN, SMAX, DMIN, DMAX, P0, S0, NCOL };
  static const char *names[NCOL] = {"name",          "plane",   "primary_min", "primary_max", "secondary_min",
                                    "secondary_max", "sid_min", "sid_max",     "primary",     "secondary"};
  int c[NCOL];
  if (xt_table_cols(t, names, NCOL, c, msg)) return XT_EFORMAT;
  if (!(stands = calloc((size_t)t->nrows, sizeof *stands))) return xt_fail(msg, XT_ENOMEM, "scene/stands.tsv: out of memory");
  for (int r = 0; r < t->nrows; r++) {
    xt_stand *s = &stands[r];
    const char *plane = xt_table_str(t, r, c[PLANE]);
    s->name = xt_table_str(t, r, c[NAME]);
    if (!strcmp(plane, "A")) s->plane = 0;
    else if (!strcmp(plane, "B")) s->plane = 1;
    else return xt_fail(msg, XT_EFORMAT, "scene/stands.tsv:%d: plane '%s' is neither A nor B", t->line[r], plane);
    if ((rc = xt_table_num(t, r, c[PMIN], -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, &s->primary_min, msg)) ||
        (rc = xt_table_num(t, r, c[PMAX], s->primary_min, XT_PRIMARY_MAX_DEG, &s->primary_max, msg)) ||
        (rc = xt_table_num(t, r, c[SMIN], -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG, &s->secondary_min, msg)) ||
        (rc = xt_table_num(t, r, c[SMAX], s->secondary_min, XT_SECONDARY_MAX_DEG, &s->secondary_max, msg)) ||
        (rc = xt_table_num(t, r, c[DMIN], 1, XT_DIST_MAX_MM, &s->sid_min, msg)) ||
        (rc = xt_table_num(t, r, c[DMAX], s->sid_min, XT_DIST_MAX_MM, &s->sid_max, msg)) ||
        (rc = xt_table_num(t, r, c[P0], s->primary_min, s->primary_max, &s->primary_deg, msg)) ||
        (rc = xt_table_num(t, r, c[S0], s->secondary_min, s->secondary_max, &s->secondary_deg, msg)))
      return rc;
    for (int q = 0; q < r; q++)
      if (!strcmp(stands[q].name, s->name))
        return xt_fail(msg, XT_EFORMAT, "scene/stands.tsv:%d: stand '%s' named twice", t->line[r], s->name);
    nstands++;
  }
  return 0;
}

static void load(void) {
  xt_msg msg = {{0}};
  if (read_stands(&msg)) {
    fprintf(stderr, "xtwin: the built-in stand table: %s\n", msg.text);
    abort();
  }
}

const xt_stand *xt_stand_find(const char *name) {
  pthread_once(&once, load);
  for (int i = 0; name && i < nstands; i++)
    if (!strcmp(stands[i].name, name)) return &stands[i];
  return NULL;
}

const xt_stand *xt_stand_of_plane(int plane) {
  pthread_once(&once, load);
  for (int i = 0; i < nstands; i++)
    if (stands[i].plane == plane) return &stands[i];
  return NULL;
}

xt_pose xt_stand_default_pose(const xt_stand *s, const xt_detector_mode *mode) {
  xt_pose p = xt_pose_default(mode);
  if (s) {
    p.primary_deg = s->primary_deg;
    p.secondary_deg = s->secondary_deg;
    if (p.sid_mm < s->sid_min) p.sid_mm = s->sid_min;
    if (p.sid_mm > s->sid_max) p.sid_mm = s->sid_max;
  }
  return p;
}

static int stand_range(xt_msg *msg, const xt_stand *s, const char *field, double v, double lo, double hi) {
  if (v < lo || v > hi)
    return xt_fail(msg, XT_ERANGE, "pose.%s: %g outside the %s stand's [%g, %g]", field, v, s->name, lo, hi);
  return 0;
}

int xt_stand_validate(const xt_stand *s, const xt_pose *p, xt_msg *msg) {
  int rc = xt_pose_validate(p, msg);
  if (rc || !s) return rc;
  if ((rc = stand_range(msg, s, "primary_deg", p->primary_deg, s->primary_min, s->primary_max)) ||
      (rc = stand_range(msg, s, "secondary_deg", p->secondary_deg, s->secondary_min, s->secondary_max)) ||
      (rc = stand_range(msg, s, "sid_mm", p->sid_mm, s->sid_min, s->sid_max)))
    return rc;
  return 0;
}
