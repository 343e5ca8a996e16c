/* Models: the kind-independent wrapper around a payload (volume, Gaussian mixture, NanoVDB
 * grid). Each kind's payload lives in its own file; this one only dispatches on the kind. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_model.h"

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
  case XT_MODEL_GMM:
  case XT_MODEL_NVDB: break;
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
