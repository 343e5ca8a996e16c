/* Models: the kind-independent wrapper around a payload (volume, Gaussian mixture, NanoVDB
 * grid). Each kind's payload lives in its own file; this one only dispatches on the kind. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_gmm.h"
#include "xt_model.h"
#include "xt_nvdb.h"

int xt_model_from_volume(xt_volume *v, const char *name, xt_model **out, xt_msg *msg) {
  xt_model *m = calloc(1, sizeof *m);
  if (!m) return xt_fail(msg, XT_ENOMEM, "model: out of memory");
  snprintf(m->name, sizeof m->name, "%s", name ? name : "model");
  m->kind = v->type == XT_VOXEL_U8 ? XT_MODEL_LABELS : XT_MODEL_DENSE;
  m->placement = xt_aff_identity();
  m->volume = v;
  *out = m;
  return 0;
}

void xt_model_free(xt_model *m) {
  if (!m) return;
  xt_volume_free(m->volume);
  xt_gmm_free(m->gmm);
  xt_nvdb_free(m->nvdb);
  free(m->report);
  free(m);
}

const char *xt_model_kind_name(xt_model_kind k) {
  switch (k) {
  case XT_MODEL_DENSE: return "dense";
  case XT_MODEL_LABELS: return "labels";
  case XT_MODEL_GMM: return "gmm";
  case XT_MODEL_NVDB: return "nvdb";
  }
  return "unknown";
}

int xt_model_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi, xt_msg *msg) {
  switch (m->kind) {
  case XT_MODEL_DENSE:
  case XT_MODEL_LABELS:
    if (!m->volume) break;
    xt_volume_bounds(m->volume, lo, hi);
    return 0;
  case XT_MODEL_GMM: /* the cut-off ellipsoids' boxes (xt_gmm_finish) */
    if (!m->gmm || !m->gmm->nodes) break;
    *lo = xt_v3(m->gmm->lo[0], m->gmm->lo[1], m->gmm->lo[2]);
    *hi = xt_v3(m->gmm->hi[0], m->gmm->hi[1], m->gmm->hi[2]);
    return 0;
  case XT_MODEL_NVDB:
    if (!m->nvdb) break;
    xt_nvdb_bounds(m->nvdb, lo, hi);
    return 0;
  }
  return xt_fail(msg, XT_EINVAL, "model %s: no payload of kind %s", m->name, xt_model_kind_name(m->kind));
}

void xt_load_report_warn(xt_load_report *r, const char *code, const char *fmt, ...) {
  if (!r) return;
  if (r->nwarn >= XT_LOAD_MAX_WARN) {
    r->nwarn_dropped++;
    return;
  }
  xt_load_warning *w = &r->warn[r->nwarn++];
  snprintf(w->code, sizeof w->code, "%s", code);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->text, sizeof w->text, fmt, ap);
  va_end(ap);
  for (char *p = w->text; *p; p++) /* one line each */
    if (*p == '\n' || *p == '\r') *p = ' ';
}

int xt__fopen_regular(const char *path, FILE **f, uint64_t *size, xt_msg *msg) {
  *f = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return xt_fail(msg, XT_ENOTFOUND, "%s: no such file", path);
    return xt_fail(msg, XT_EIO, "%s: %s", path, strerror(e));
  }
  struct stat st;
  const int stat_ok = fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    const int dir = stat_ok && S_ISDIR(st.st_mode);
    close(fd);
    return xt_fail(msg, XT_EINVAL, "%s: %s", path, dir ? "is a directory, not a file" : "not a regular file");
  }
  if (!(*f = fdopen(fd, "rb"))) {
    const int e = errno;
    close(fd);
    return xt_fail(msg, e == ENOMEM ? XT_ENOMEM : XT_EIO, "%s: %s", path, strerror(e));
  }
  if (size) *size = (uint64_t)st.st_size;
  return 0;
}
