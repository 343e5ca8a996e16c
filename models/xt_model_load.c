/* xt_model_load: one entry point for every model file, so the CLI, the server and the dataset
 * generator accept whatever kinds the build can read without branching on them. A kind adds its
 * file names and reader to the table below; DICOM input (a folder, a .dcm file, an @list) is
 * recognised by xt_dicom_path() before the table, since a folder has no suffix. The loader's
 * report (warnings, choices) stays with the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xt_gmm.h"
#include "xt_gmm_json.h"
#include "xt_instr_json.h"
#include "xt_load.h"
#include "xt_load_internal.h"
#include "xt_nvdb.h"

typedef int (*model_reader)(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg);

static int read_volume(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_volume *v = NULL;
  int rc = xt_volume_load(path, opt, &v, msg);
  if (rc) return rc;
  if ((rc = xt_model_from_volume(v, NULL, out, msg))) xt_volume_free(v);
  return rc;
}

/* Gaussian mixtures: native, the thesis's .gmm, hand-written JSON (opt does not apply). */
static int wrap_gmm(const char *path, int rc, xt_gmm **g, xt_model **out, xt_msg *msg) {
  if (!rc && (rc = xt_model_from_gmm(*g, NULL, out, msg))) {
    xt_gmm_free(*g);
    rc = xt_fail(msg, rc, "%s: out of memory for the model", path);
  }
  return rc;
}
static int read_gmm_native(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(path, xt_gmm_read_native(path, &g, msg), &g, out, msg);
}
static int read_gmm_thesis(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(path, xt_gmm_read_thesis(path, &g, msg), &g, out, msg);
}
static int read_gmm_json(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(path, xt_gmm_read_json(path, &g, NULL, 0, msg), &g, out, msg);
}

/* NanoVDB: the grid holds mu or labels itself (xt_nvdb.h); the HU conversions do not apply. */
static int read_nvdb(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_nvdb_load_options no = {opt ? opt->grid : NULL, opt && opt->convert == XT_LOAD_LABELS, opt ? opt->energy_kev : 0};
  if (opt && (opt->convert == XT_LOAD_HU_TO_MU || opt->convert == XT_LOAD_HU_TO_LABELS))
    return xt_fail(msg, XT_EINVAL, "%s: NanoVDB grids hold mu or labels: convert must be mu or labels", path);
  xt_nvdb *g = NULL;
  int rc = xt_nvdb_load(path, &no, &g, msg);
  if (rc) return rc;
  if ((rc = xt_model_from_nvdb(g, NULL, out, msg))) {
    xt_nvdb_free(g);
    return xt_fail(msg, rc, "%s: out of memory for the model", path);
  }
  if (opt && opt->report) { /* what the loader noticed: the format, and the stored value range */
    snprintf(opt->report->format, sizeof opt->report->format, "nanovdb");
    opt->report->value_min = opt->report->value_max = g->background;
  }
  return 0;
}

/* Instruments (issue 26): a device and its centreline; opt does not apply. */
static int read_instr(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  return xt_instr_read_json(path, out, msg);
}

/* File-name suffixes (case-insensitive), longest first where one ends another. */
static const struct {
  const char *suffix;
  model_reader read;
} readers[] = {
    {".nii.gz", read_volume}, {".nii", read_volume}, {".nrrd", read_volume},
    {".nhdr", read_volume},   {".mha", read_volume}, {".mhd", read_volume},
    {".xgmm", read_gmm_native}, {".gmm.json", read_gmm_json}, {".gmm", read_gmm_thesis},
    {".nvdb", read_nvdb},       {".instr.json", read_instr},
};

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* Runs one reader with a fresh report that the model keeps (and the caller's opt->report gets).
 * The volume readers confine every file they open themselves (xt__file_check: a header names its
 * data files); the other kinds read one file, checked here the same way before the reader sees
 * it: under the model folders when opt confines (the resolved path, which has no links left, is
 * what the reader opens), and a regular file, never waited on. */
static int run_reader(model_reader read, const char *path, const xt_load_options *opt, const char *name, xt_model **out,
                      xt_msg *msg) {
  xt_load_options o = {0};
  if (opt) o = *opt;
  char *real = NULL;
  int rc;
  if (read != read_volume) {
    uint64_t size;
    if ((rc = xt__file_check(path, NULL, opt, &size, msg))) return rc;
    if (opt && opt->roots && (rc = xt__path_resolve(path, NULL, opt, &real, msg))) return rc;
  }
  o.report = calloc(1, sizeof *o.report);
  if (!o.report) {
    free(real);
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  }
  xt_model *m = NULL;
  rc = read(real ? real : path, &o, &m, msg);
  free(real);
  if (rc) {
    free(o.report);
    return rc;
  }
  if (opt && opt->report) *opt->report = *o.report;
  m->report = o.report;
  const char *base = strrchr(path, '/');
  if (base && !base[1]) { /* "dir/": name it after the folder */
    const char *p = base;
    while (p > path && p[-1] != '/') p--;
    snprintf(m->name, sizeof m->name, "%.*s", (int)(base - p), p);
  } else
    snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
  if (name && *name) snprintf(m->name, sizeof m->name, "%s", name);
  *out = m;
  return 0;
}

int xt_model_load(const char *path, const xt_load_options *opt, const char *name, xt_model **out, xt_msg *msg) {
  *out = NULL;
  if (!path || !*path) return xt_fail(msg, XT_EINVAL, "model: empty path");
  /* Confined before anything else: xt_dicom_path looks at the file (stat, and reads it to sniff
   * for the DICOM preamble), and an unknown suffix would answer 400 for a path outside the
   * folders where a path inside answers 404: neither may happen outside. */
  int rc = xt__source_confined(path, opt, msg);
  if (rc) return rc;
  if (xt_dicom_path(path)) return run_reader(read_volume, path, opt, name, out, msg);
  for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
    if (!ends_with(path, readers[i].suffix)) continue;
    return run_reader(readers[i].read, path, opt, name, out, msg);
  }
  char list[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < sizeof readers / sizeof readers[0] && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", readers[i].suffix);
  return xt_fail(msg, XT_EUNSUPPORTED, "%s: unknown model format (expected %s, or DICOM: a folder, .dcm or @list)", path,
                 list);
}
