/* xt_model_load: one entry point for every model file, so the CLI, the server and the dataset
 * generator accept whatever kinds the build can read without branching on them. A kind adds its
 * file names and reader to the table below. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "xt_gmm.h"
#include "xt_gmm_json.h"
#include "xt_load.h"

typedef int (*model_reader)(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg);

static int read_volume(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_volume *v = NULL;
  int rc = xt_volume_load(path, opt, &v, msg);
  if (rc) return rc;
  if ((rc = xt_model_from_volume(v, NULL, out, msg))) xt_volume_free(v);
  return rc;
}

/* Gaussian mixtures: native, the thesis's .gmm, hand-written JSON (opt does not apply). */
static int wrap_gmm(int rc, xt_gmm **g, xt_model **out, xt_msg *msg) {
  if (!rc && (rc = xt_model_from_gmm(*g, NULL, out, msg))) xt_gmm_free(*g);
  return rc;
}
static int read_gmm_native(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(xt_gmm_read_native(path, &g, msg), &g, out, msg);
}
static int read_gmm_thesis(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(xt_gmm_read_thesis(path, &g, msg), &g, out, msg);
}
static int read_gmm_json(const char *path, const xt_load_options *opt, xt_model **out, xt_msg *msg) {
  xt_gmm *g = NULL;
  return wrap_gmm(xt_gmm_read_json(path, &g, NULL, 0, msg), &g, out, msg);
}

/* File-name suffixes (case-insensitive), longest first where one ends another. */
static const struct {
  const char *suffix;
  model_reader read;
} readers[] = {
    {".nii.gz", read_volume}, {".nii", read_volume}, {".nrrd", read_volume},
    {".nhdr", read_volume},   {".mha", read_volume}, {".mhd", read_volume},
    {".xgmm", read_gmm_native}, {".gmm.json", read_gmm_json}, {".gmm", read_gmm_thesis},
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
