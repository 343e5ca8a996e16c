/* The protocols and their dose control curves as data (issue 24): imaging/protocols.tsv and
 * imaging/dose_curves.tsv, compiled in (cmake/xt_embed.cmake) and parsed once, on first use, through
 * scene/xt_table (cells by column name, errors naming table:line and column). A table is checked as
 * a whole before anything uses it: a curve whose segment changes two factors would break the loop's
 * closed-form inverse (xt_drc_math.h), and a protocol naming a missing curve would fall back silently.
 *
 * The built-in tables are the product's data: one that does not read is a build defect (the tests
 * parse them), so it stops the program with the line that failed, as scene/xt_detectors.c does for the
 * detector tables, rather than leaving the chain without protocols. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_exposure.h"
#include "xt_table.h"

extern const char xt_protocols_tsv[];
extern const char xt_dose_curves_tsv[];

#define CURVE_KV_MIN 60.0 /* the chain's table bank starts there (XT_DRC_BANK_KV0) */
#define MAX_CURVES 32

struct xt_protocol_set {
  xt_table pt, ct; /* kept: the rows' strings point into them */
  xt_protocol *p;
  int np;
  const char *curve_name[MAX_CURVES];
  xt_drc_nodes curve[MAX_CURVES];
  int nc;
};

/* The ids of issue 11's presets (XT_PROTOCOL_*) are the table's first rows. */
static const char *const fixed_names[] = {"custom", "fluoro_low", "fluoro_normal", "fluoro_high",
                                          "cine_15", "cine_30", "dsa"};
static const char *const kind_names[] = {"custom", "fluoro", "exposure", "dsa"};
static const char *const patient_names[] = {"all", "default", "neonate", "child", "adult", "large_adult"};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int cell_fail(const xt_table *t, int r, int c, xt_msg *msg, const char *why) {
  return xt_fail(msg, XT_EFORMAT, "%s:%d: column '%s': '%s' %s", t->source, t->line[r], t->cols[c],
                 xt_table_str(t, r, c), why);
}

static int word_of(const char *s, const char *const *words, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s, words[i])) return i;
  return -1;
}

/* ---- dose control curves -------------------------------------------------------------------- */

static int read_curves(xt_protocol_set *S, const char *text, const char *source, xt_msg *msg) {
  xt_table *t = &S->ct;
  int rc = xt_table_parse(text, source, t, msg);
  if (rc) return rc;
  enum { NAME, NODE, KV, MA, MS, NCOL };
  static const char *names[NCOL] = {"curve", "node", "kv", "ma", "ms"};
  int c[NCOL];
  if (xt_table_cols(t, names, NCOL, c, msg)) return XT_EFORMAT;
  for (int r = 0; r < t->nrows; r++) {
    const char *name = xt_table_str(t, r, c[NAME]);
    int k = 0;
    while (k < S->nc && strcmp(S->curve_name[k], name)) k++;
    if (k == S->nc) {
      if (k == MAX_CURVES) return cell_fail(t, r, c[NAME], msg, "is one curve too many");
      S->curve_name[S->nc++] = name;
    } else if (strcmp(xt_table_str(t, r - 1, c[NAME]), name)) {
      return cell_fail(t, r, c[NAME], msg, "continues a curve that other rows interrupted");
    }
    xt_drc_nodes *cv = &S->curve[k];
    int node;
    if ((rc = xt_table_int(t, r, c[NODE], 0, XT_DRC_MAX_NODES - 1, &node, msg))) return rc;
    if (node != cv->n) return cell_fail(t, r, c[NODE], msg, "is out of order (nodes count 0, 1, 2, ...)");
    double kv = 0, ma, ms;
    if (!strcmp(xt_table_str(t, r, c[KV]), "max")) kv = 0; /* the chain's drc_kv_max */
    else if ((rc = xt_table_num(t, r, c[KV], CURVE_KV_MIN, XT_KV_MAX, &kv, msg)))
      return rc;
    if ((rc = xt_table_num(t, r, c[MA], 0.1, 1500, &ma, msg)) || (rc = xt_table_num(t, r, c[MS], 0.1, 1000, &ms, msg)))
      return rc;
    if (node > 0) { /* one factor per segment, rising: the loop's inverse and its monotone output */
      const double k0 = cv->kv[node - 1], a0 = cv->ma[node - 1], m0 = cv->ms[node - 1];
      if (k0 <= 0) return cell_fail(t, r, c[KV], msg, "follows a node at kV max: max must be the last node");
      const int dk = kv != k0, da = ma != a0, dm = ms != m0;
      if (dk + da + dm != 1)
        return xt_fail(msg, XT_EFORMAT, "%s:%d: curve '%s': node %d must change exactly one of kv, ma, ms from node %d",
                       t->source, t->line[r], name, node, node - 1);
      const int col = dk ? c[KV] : da ? c[MA] : c[MS];
      if ((dk && kv > 0 && kv < k0) || (da && ma < a0) || (dm && ms < m0))
        return cell_fail(t, r, col, msg, "falls: a curve's factors only rise");
    }
    cv->kv[node] = kv;
    cv->ma[node] = ma;
    cv->ms[node] = ms;
    cv->n++;
  }
  for (int k = 0; k < S->nc; k++)
    if (S->curve[k].n < 2) return xt_fail(msg, XT_EFORMAT, "%s: curve '%s' has fewer than 2 nodes", source, S->curve_name[k]);
  if (word_of("default", S->curve_name, S->nc) != 0)
    return xt_fail(msg, XT_EFORMAT, "%s: the first curve must be 'default'", source);
  return 0;
}

/* ---- protocols ------------------------------------------------------------------------------ */

/* "2x3s,1x5s,0.5x10s" (fps x seconds per phase) or "-". */
static int read_phases(const xt_table *t, int r, int c, xt_protocol *p, xt_msg *msg) {
  const char *s = xt_table_str(t, r, c);
  p->nphases = 0;
  if (!strcmp(s, "-")) return 0;
  while (*s) {
    if (p->nphases == XT_PROTOCOL_MAX_PHASES) return cell_fail(t, r, c, msg, "has more than 8 phases");
    char *end;
    const double fps = strtod(s, &end);
    if (end == s || *end != 'x') return cell_fail(t, r, c, msg, "is not FPSxSECONDSs,... (e.g. 2x3s,1x5s)");
    s = end + 1;
    const double sec = strtod(s, &end);
    if (end == s || *end != 's') return cell_fail(t, r, c, msg, "is not FPSxSECONDSs,... (e.g. 2x3s,1x5s)");
    s = end + 1;
    if (!(fps > 0 && fps <= 120) || !(sec > 0 && sec <= 3600))
      return cell_fail(t, r, c, msg, "has a phase outside (0, 120] fps or (0, 3600] s");
    p->phase[p->nphases++] = (xt_protocol_phase){fps, sec};
    if (*s == ',') s++;
    else if (*s) return cell_fail(t, r, c, msg, "is not FPSxSECONDSs,... (e.g. 2x3s,1x5s)");
  }
  return 0;
}

static int read_protocols(xt_protocol_set *S, const char *text, const char *source, xt_msg *msg) {
  xt_table *t = &S->pt;
  int rc = xt_table_parse(text, source, t, msg);
  if (rc) return rc;
  enum { NAME, KIND, FPS, KV, MA, MS, AL, CU, DOSE, CURVE, PATIENT, ALPHA, PHASES, PREP, FIRST, SOURCE, NCOL };
  static const char *names[NCOL] = {"name",         "kind",         "fps",   "kv",      "ma",
                                    "pulse_ms",     "filter_al_mm", "filter_cu_mm", "detector_ngy", "curve",
                                    "patient",      "temporal_alpha", "phases", "prepare_ms", "first_frame_ms",
                                    "source"};
  int c[NCOL];
  if (xt_table_cols(t, names, NCOL, c, msg)) return XT_EFORMAT;
  if (t->nrows > XT_PROTOCOL_MAX + 1) return xt_fail(msg, XT_EFORMAT, "%s: more than %d rows", source, XT_PROTOCOL_MAX + 1);
  S->p = calloc((size_t)t->nrows + 1, sizeof *S->p);
  if (!S->p) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", source);
  for (int r = 0; r < t->nrows; r++) {
    xt_protocol *p = &S->p[r];
    p->name = xt_table_str(t, r, c[NAME]);
    p->kind_name = xt_table_str(t, r, c[KIND]);
    p->curve_name = xt_table_str(t, r, c[CURVE]);
    p->patient = xt_table_str(t, r, c[PATIENT]);
    p->source = xt_table_str(t, r, c[SOURCE]);
    if (r < NELEM(fixed_names) && strcmp(p->name, fixed_names[r]))
      return xt_fail(msg, XT_EFORMAT, "%s:%d: column 'name': row %d must be '%s' (issue 11's ids), not '%s'", source,
                     t->line[r], r, fixed_names[r], p->name);
    for (int q = 0; q < r; q++)
      if (!strcmp(S->p[q].name, p->name)) return cell_fail(t, r, c[NAME], msg, "is named twice");
    if ((p->kind = word_of(p->kind_name, kind_names, NELEM(kind_names))) < 0)
      return cell_fail(t, r, c[KIND], msg, "is not fluoro, exposure or dsa");
    if ((p->kind == XT_PROTOCOL_KIND_CUSTOM) != (r == 0))
      return cell_fail(t, r, c[KIND], msg, r ? "is row 0's alone" : "must be custom in row 0");
    if (word_of(p->patient, patient_names, NELEM(patient_names)) < 0)
      return cell_fail(t, r, c[PATIENT], msg, "is not all, default, neonate, child, adult or large_adult");
    if ((p->curve = word_of(p->curve_name, S->curve_name, S->nc)) < 0)
      return cell_fail(t, r, c[CURVE], msg, "is no curve of the dose control curves");
    const int custom = r == 0; /* row 0 holds no settings: zeros */
    if ((rc = xt_table_num(t, r, c[FPS], custom ? 0 : 0.1, custom ? 0 : 120, &p->fps, msg)) ||
        (rc = xt_table_num(t, r, c[KV], custom ? 0 : XT_KV_MIN, custom ? 0 : XT_KV_MAX, &p->kv, msg)) ||
        (rc = xt_table_num(t, r, c[MA], custom ? 0 : 0.1, custom ? 0 : 1500, &p->ma, msg)) ||
        (rc = xt_table_num(t, r, c[MS], custom ? 0 : 0.1, custom ? 0 : 1000, &p->pulse_ms, msg)) ||
        (rc = xt_table_num(t, r, c[AL], 0, XT_FILTER_MAX_MM_AL, &p->filter_al_mm, msg)) ||
        (rc = xt_table_num(t, r, c[CU], 0, XT_FILTER_MAX_MM_CU, &p->filter_cu_mm, msg)) ||
        (rc = xt_table_num(t, r, c[DOSE], custom ? 0 : 1, custom ? 0 : 100000, &p->detector_ngy, msg)) ||
        (rc = xt_table_num(t, r, c[ALPHA], custom ? 0 : 0.01, custom ? 0 : 1, &p->temporal_alpha, msg)) ||
        (rc = xt_table_num(t, r, c[PREP], 0, 10000, &p->prepare_ms, msg)) ||
        (rc = xt_table_num(t, r, c[FIRST], 0, 10000, &p->first_frame_ms, msg)) ||
        (rc = read_phases(t, r, c[PHASES], p, msg)))
      return rc;
    if (p->nphases && p->fps != p->phase[0].fps)
      return cell_fail(t, r, c[FPS], msg, "differs from the first phase's frame speed");
    S->np++;
  }
  if (S->np < NELEM(fixed_names))
    return xt_fail(msg, XT_EFORMAT, "%s: %d rows; issue 11's %d presets come first", source, S->np, NELEM(fixed_names));
  return 0;
}

void xt_protocol_set_free(xt_protocol_set *s) {
  if (!s) return;
  xt_table_free(&s->pt);
  xt_table_free(&s->ct);
  free(s->p);
  free(s);
}

int xt_protocol_set_parse(const char *protocols_tsv, const char *protocols_source, const char *curves_tsv,
                          const char *curves_source, xt_protocol_set **out, xt_msg *msg) {
  *out = NULL;
  xt_protocol_set *s = calloc(1, sizeof *s);
  if (!s) return xt_fail(msg, XT_ENOMEM, "protocols: out of memory");
  int rc = read_curves(s, curves_tsv, curves_source, msg);
  if (!rc) rc = read_protocols(s, protocols_tsv, protocols_source, msg);
  if (rc) {
    xt_protocol_set_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int xt_protocol_set_count(const xt_protocol_set *s) { return s->np; }
const xt_protocol *xt_protocol_set_at(const xt_protocol_set *s, int id) {
  return id >= 0 && id < s->np ? &s->p[id] : NULL;
}
int xt_protocol_set_curve_count(const xt_protocol_set *s) { return s->nc; }
const char *xt_protocol_set_curve_name(const xt_protocol_set *s, int i) {
  return i >= 0 && i < s->nc ? s->curve_name[i] : NULL;
}
const xt_drc_nodes *xt_protocol_set_curve(const xt_protocol_set *s, int i) {
  return i >= 0 && i < s->nc ? &s->curve[i] : NULL;
}

/* ---- the built-in tables -------------------------------------------------------------------- */

static xt_protocol_set *builtin;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  xt_msg msg = {{0}};
  if (xt_protocol_set_parse(xt_protocols_tsv, "imaging/protocols.tsv", xt_dose_curves_tsv, "imaging/dose_curves.tsv",
                            &builtin, &msg)) {
    fprintf(stderr, "xtwin: the built-in protocol tables: %s\n", msg.text);
    abort();
  }
}

static const xt_protocol_set *set(void) {
  pthread_once(&once, load);
  return builtin;
}

int xt_protocol_count(void) { return set()->np; }
const xt_protocol *xt_protocol_at(int id) { return xt_protocol_set_at(set(), id); }

const char *xt_protocol_name(int id) {
  const xt_protocol *p = xt_protocol_at(id);
  return p ? p->name : NULL;
}

int xt_protocol_find(const char *name) {
  for (int i = 0; name && i < xt_protocol_count(); i++)
    if (strcmp(set()->p[i].name, name) == 0) return i;
  return -1;
}

double xt_protocol_fps(int id) { return id > 0 && id < xt_protocol_count() ? set()->p[id].fps : 0; }

int xt_protocol_phases(int id, xt_protocol_phase *out, int cap) {
  const xt_protocol *p = xt_protocol_at(id);
  if (!p) return 0;
  for (int i = 0; i < p->nphases && i < cap; i++) out[i] = p->phase[i];
  return p->nphases;
}

double xt_protocol_fps_at(int id, double t_s) {
  const xt_protocol *p = xt_protocol_at(id);
  if (!p || id == 0) return 0;
  if (!p->nphases) return p->fps;
  double end = 0;
  for (int i = 0; i < p->nphases; i++) {
    end += p->phase[i].seconds;
    if (t_s < end) return p->phase[i].fps;
  }
  return p->phase[p->nphases - 1].fps;
}

const xt_drc_nodes *xt_protocol_curve(int id) {
  const xt_protocol *p = xt_protocol_at(id);
  return &set()->curve[p ? p->curve : 0];
}

const xt_drc_nodes *xt_drc_nodes_default(void) { return &set()->curve[0]; }

int xt_dose_curve_count(void) { return set()->nc; }
const char *xt_dose_curve_name(int i) { return xt_protocol_set_curve_name(set(), i); }
const xt_drc_nodes *xt_dose_curve_at(int i) { return xt_protocol_set_curve(set(), i); }
