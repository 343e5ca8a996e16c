/* Models: the kind-independent wrapper around a payload (volume, Gaussian mixture, NanoVDB
 * grid) and the registry of kinds (xt_model_kind.h). Each kind's payload and table live in its
 * own file; this one only calls through the table. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_model.h"
#include "xt_model_kind.h"

#define XT_MODEL_KIND_ENTRY(k) &xt_model_kind_##k,
static const xt_model_kind_ops *const registry[] = {XT_MODEL_KINDS(XT_MODEL_KIND_ENTRY)};
#undef XT_MODEL_KIND_ENTRY

int xt_model_kind_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const xt_model_kind_ops *xt_model_kind_at(int i) { return i >= 0 && i < xt_model_kind_count() ? registry[i] : NULL; }

const xt_model_kind_ops *xt_model_kind_find(const char *name) {
  for (int i = 0; name && i < xt_model_kind_count(); i++)
    if (strcmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

int xt_model_create(const xt_model_kind_ops *kind, void *payload, const char *name, xt_model **out, xt_msg *msg) {
  *out = NULL;
  xt_model *m = calloc(1, sizeof *m);
  if (!m) return xt_fail(msg, XT_ENOMEM, "model: out of memory");
  snprintf(m->name, sizeof m->name, "%s", name ? name : kind->name);
  m->kind = kind;
  m->placement = xt_aff_identity();
  m->payload = payload;
  *out = m;
  return 0;
}

void xt_model_free(xt_model *m) {
  if (!m) return;
  if (m->kind) m->kind->free(m->payload);
  free(m->report);
  free(m);
}

const char *xt_model_kind_name(const xt_model_kind_ops *k) { return k ? k->name : "unknown"; }

int xt_model_bounds(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi, xt_msg *msg) {
  if (!m->kind || !m->payload || m->kind->bounds(m, lo, hi))
    return xt_fail(msg, XT_EINVAL, "model %s: no payload of kind %s", m->name, xt_model_kind_name(m->kind));
  return 0;
}

void xt_model_describe(const xt_model *m, xt_model_view view, const xt_json_out *out) {
  if (m->kind && m->payload) m->kind->describe(m, view, out);
}

int xt_model_matter_of(const xt_model *m, xt_model_matter *out, xt_msg *msg) {
  memset(out, 0, sizeof *out);
  if (!m->kind || !m->kind->matter)
    return xt_fail(msg, XT_EUNSUPPORTED, "channels: model %s: kind %s has no material channels", m->name,
                   xt_model_kind_name(m->kind));
  return m->kind->matter(m, out, msg);
}

int xt_model_device_bytes(const xt_model *m, uint64_t *bytes) {
  *bytes = 0;
  if (!m->kind || !m->kind->device_bytes || !m->payload) return XT_EUNSUPPORTED;
  *bytes = m->kind->device_bytes(m);
  return 0;
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
