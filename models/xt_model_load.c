/* xt_model_load: one entry point for every model file, so the CLI, the server and the dataset
 * generator accept whatever kinds the build can read without branching on them. A kind adds its
 * file names and reader to the table below. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "xt_load.h"
#include "xt_nvdb.h"

typedef int (*model_reader)(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg);

static int read_volume(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_volume *v = NULL;
  int rc = xt_volume_load(path, opt, &v, msg);
  if (rc) return rc;
  if ((rc = xt_model_from_volume(v, NULL, out, msg))) xt_volume_free(v);
  return rc;
}

/* NanoVDB: the grid holds mu or labels itself (xt_nvdb.h); the HU conversions do not apply. */
static int read_nvdb(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_nvdb_load_options no = {opt ? opt->grid : NULL, opt && opt->convert == XT_LOAD_LABELS, opt ? opt->energy_kev : 0};
  if (opt && (opt->convert == XT_LOAD_HU_TO_MU || opt->convert == XT_LOAD_HU_TO_LABELS))
    return xt_fail(msg, XT_EINVAL, "%s: NanoVDB grids hold mu or labels: convert must be mu or labels", path);
  xt_nvdb *g = NULL;
  int rc = xt_nvdb_load(path, &no, &g, msg);
  if (rc) return rc;
  if ((rc = xt_model_from_nvdb(g, NULL, out, msg))) xt_nvdb_free(g);
  return rc;
}

/* File-name suffixes (case-insensitive), longest first where one ends another. */
static const struct {
  const char *suffix;
  model_reader read;
} readers[] = {
    {".nii.gz", read_volume}, {".nii", read_volume}, {".nrrd", read_volume},
    {".nhdr", read_volume},   {".mha", read_volume}, {".mhd", read_volume},
    {".nvdb", read_nvdb},
};

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

int xt_model_load(const char *path, const xt_load_options *opt, const char *name, xt_model **out, xt_msg *msg) {
  *out = NULL;
  if (!path || !*path) return xt_fail(msg, XT_EINVAL, "model: empty path");
  for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
    if (!ends_with(path, readers[i].suffix)) continue;
    xt_model *m = NULL;
    int rc = readers[i].read(path, opt, &m, msg);
    if (rc) return rc;
    const char *base = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", name && *name ? name : (base ? base + 1 : path));
    *out = m;
    return 0;
  }
  char list[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < sizeof readers / sizeof readers[0] && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", readers[i].suffix);
  return xt_fail(msg, XT_EUNSUPPORTED, "%s: unknown model format (expected %s)", path, list);
}
