/* The dataset spec: a JSON file read with jansson and validated field by field before any work,
 * every error one line naming the file and the field's JSON path (docs/dataset.md lists the
 * fields). Unknown fields are errors (a typo must not silently fall back to a default), with the
 * nearest known name suggested. The spec is also kept as one canonical JSON text (sorted keys,
 * compact) whose SHA-256 identifies the dataset in every shard's manifest line. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "xt_contrast.h"
#include "xt_dataset.h"
#include "xt_phantom.h"
#ifdef XT_HAVE_LOADERS
#include "xt_load.h"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Field paths and errors                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct ctx {
  const char *file; /* base name for messages */
  char path[256];   /* "models[1].perturb" */
  xt_msg *msg;
} ctx;

static size_t push_key(ctx *c, const char *key) {
  size_t n = strlen(c->path);
  snprintf(c->path + n, sizeof c->path - n, "%s%s", n ? "." : "", key);
  return n;
}
static size_t push_index(ctx *c, size_t i) {
  size_t n = strlen(c->path);
  snprintf(c->path + n, sizeof c->path - n, "[%zu]", i);
  return n;
}
static void pop(ctx *c, size_t n) { c->path[n] = 0; }

static int fail(ctx *c, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(ctx *c, int code, const char *fmt, ...) {
  char text[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return xt_fail(c->msg, code, "%s: %s: %s", c->file, c->path[0] ? c->path : "(top level)", text);
}

/* fail() with the field `key` appended to the path for this message only. */
static int fail_key(ctx *c, const char *key, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int fail_key(ctx *c, const char *key, int code, const char *fmt, ...) {
  char text[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  size_t n = push_key(c, key);
  int rc = fail(c, code, "%s", text);
  pop(c, n);
  return rc;
}

/* Edit distance for "did you mean"; short names only. */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 99;
  int d[41][41];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int s = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
      d[i][j] = s < x ? (s < y ? s : y) : (x < y ? x : y);
    }
  return d[la][lb];
}

/* Every key of obj must be one of the NULL-terminated list. */
static int check_keys(ctx *c, json_t *obj, const char *const *known) {
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    int ok = 0, best = 99;
    const char *near = NULL;
    for (int i = 0; known[i]; i++) {
      if (strcmp(key, known[i]) == 0) ok = 1;
      int d = edit_distance(key, known[i]);
      if (d < best) best = d, near = known[i];
    }
    if (ok) continue;
    size_t n = push_key(c, key);
    int rc = best <= 2 ? fail(c, XT_EINVAL, "unknown field (did you mean \"%s\"?)", near)
                       : fail(c, XT_EINVAL, "unknown field (see docs/dataset.md)");
    pop(c, n);
    return rc;
  }
  return 0;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER:
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

/* ------------------------------------------------------------------------------------------ */
/* Typed field readers: each pushes the key, so its messages name it                           */
/* ------------------------------------------------------------------------------------------ */

static int want_number(ctx *c, json_t *v, double lo, double hi, double *out) {
  if (!json_is_number(v)) return fail(c, XT_EINVAL, "expected a number, got %s", type_name(v));
  double x = json_number_value(v);
  if (!isfinite(x)) return fail(c, XT_EINVAL, "not a finite number");
  if (x < lo || x > hi) return fail(c, XT_EINVAL, "%g is outside [%g, %g]", x, lo, hi);
  *out = x;
  return 0;
}

/* Optional number field: def when absent. */
static int get_number(ctx *c, json_t *obj, const char *key, double lo, double hi, double def, double *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  size_t n = push_key(c, key);
  int rc = want_number(c, v, lo, hi, out);
  pop(c, n);
  return rc;
}

static int get_int(ctx *c, json_t *obj, const char *key, long long lo, long long hi, long long def, int required,
                   long long *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    if (required) {
      int rc = fail_key(c, key, XT_EINVAL, "required");
      return rc;
    }
    *out = def;
    return 0;
  }
  size_t n = push_key(c, key);
  int rc = 0;
  if (!json_is_integer(v)) rc = fail(c, XT_EINVAL, "expected an integer, got %s", type_name(v));
  else if (json_integer_value(v) < lo || json_integer_value(v) > hi)
    rc = fail(c, XT_EINVAL, "%lld is outside [%lld, %lld]", (long long)json_integer_value(v), lo, hi);
  else *out = json_integer_value(v);
  pop(c, n);
  return rc;
}

static int get_bool(ctx *c, json_t *obj, const char *key, int def, int *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  size_t n = push_key(c, key);
  int rc = 0;
  if (!json_is_boolean(v)) rc = fail(c, XT_EINVAL, "expected true or false, got %s", type_name(v));
  else *out = json_is_true(v);
  pop(c, n);
  return rc;
}

/* Optional string; NULL when absent. */
static int get_string(ctx *c, json_t *obj, const char *key, const char **out) {
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (!v) return 0;
  size_t n = push_key(c, key);
  int rc = 0;
  if (!json_is_string(v)) rc = fail(c, XT_EINVAL, "expected a string, got %s", type_name(v));
  else if (!*json_string_value(v)) rc = fail(c, XT_EINVAL, "empty");
  else *out = json_string_value(v);
  pop(c, n);
  return rc;
}

/* One of the '|'-separated words; def when absent. */
static int get_choice(ctx *c, json_t *obj, const char *key, const char *choices, int def, int *out) {
  const char *s;
  int rc = get_string(c, obj, key, &s);
  if (rc) return rc;
  if (!s) {
    *out = def;
    return 0;
  }
  size_t len = strlen(s);
  int idx = 0;
  for (const char *p = choices; *p; idx++) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == len && strncmp(p, s, l) == 0) {
      *out = idx;
      return 0;
    }
    if (!bar) break;
    p = bar + 1;
  }
  rc = fail_key(c, key, XT_EINVAL, "unknown value \"%s\" (one of %s)", s, choices);
  return rc;
}

/* A value or a range: a number (fixed; with symmetric, the range [-x, x]) or [lo, hi]. */
static int want_range(ctx *c, json_t *v, double lo, double hi, int symmetric, xt_ds_range *out) {
  if (json_is_number(v)) {
    double x;
    int rc = want_number(c, v, symmetric ? 0 : lo, hi, &x);
    if (rc) return rc;
    out->lo = symmetric ? -x : x;
    out->hi = x;
    if (symmetric && -x < lo) return fail(c, XT_EINVAL, "-%g is outside [%g, %g]", x, lo, hi);
    return 0;
  }
  if (!json_is_array(v) || json_array_size(v) != 2)
    return fail(c, XT_EINVAL, "expected a number or [lo, hi], got %s%s", type_name(v),
                json_is_array(v) ? " of other than 2 numbers" : "");
  double a, b;
  size_t n = push_index(c, 0);
  int rc = want_number(c, json_array_get(v, 0), lo, hi, &a);
  pop(c, n);
  if (rc) return rc;
  n = push_index(c, 1);
  rc = want_number(c, json_array_get(v, 1), lo, hi, &b);
  pop(c, n);
  if (rc) return rc;
  if (a > b) return fail(c, XT_EINVAL, "[%g, %g]: lo > hi", a, b);
  out->lo = a;
  out->hi = b;
  return 0;
}

static int get_range(ctx *c, json_t *obj, const char *key, double lo, double hi, int symmetric, double def,
                     xt_ds_range *out, int *present) {
  json_t *v = json_object_get(obj, key);
  if (present) *present = v != NULL;
  if (!v) {
    out->lo = out->hi = def;
    return 0;
  }
  size_t n = push_key(c, key);
  int rc = want_range(c, v, lo, hi, symmetric, out);
  pop(c, n);
  return rc;
}

/* Three ranges (x, y, z): [r, r, r] where each r is a number or [lo, hi]; with symmetric, a single
 * number a also means [-a, a] on every axis. */
static int get_range3(ctx *c, json_t *obj, const char *key, double lo, double hi, int symmetric, xt_ds_range out[3]) {
  json_t *v = json_object_get(obj, key);
  for (int a = 0; a < 3; a++) out[a].lo = out[a].hi = 0;
  if (!v) return 0;
  size_t n = push_key(c, key);
  int rc = 0;
  if (symmetric && json_is_number(v)) {
    rc = want_range(c, v, lo, hi, 1, &out[0]);
    out[1] = out[2] = out[0];
  } else if (!json_is_array(v) || json_array_size(v) != 3) {
    rc = fail(c, XT_EINVAL, "expected [x, y, z] (each a number or [lo, hi]), got %s", type_name(v));
  } else {
    for (size_t a = 0; a < 3 && !rc; a++) {
      size_t m = push_index(c, a);
      rc = want_range(c, json_array_get(v, a), lo, hi, symmetric, &out[a]);
      pop(c, m);
    }
  }
  pop(c, n);
  return rc;
}

static int get_vec3(ctx *c, json_t *obj, const char *key, double lo, double hi, double out[3], int required) {
  json_t *v = json_object_get(obj, key);
  size_t n = push_key(c, key);
  int rc = 0;
  if (!v) {
    out[0] = out[1] = out[2] = 0;
    if (required) rc = fail(c, XT_EINVAL, "required");
  } else if (!json_is_array(v) || json_array_size(v) != 3) {
    rc = fail(c, XT_EINVAL, "expected [x, y, z], got %s", type_name(v));
  } else {
    for (size_t a = 0; a < 3 && !rc; a++) {
      size_t m = push_index(c, a);
      rc = want_number(c, json_array_get(v, a), lo, hi, &out[a]);
      pop(c, m);
    }
  }
  pop(c, n);
  return rc;
}

static int get_object(ctx *c, json_t *obj, const char *key, json_t **out) {
  json_t *v = json_object_get(obj, key);
  *out = v;
  if (!v || json_is_object(v)) return 0;
  int rc = fail_key(c, key, XT_EINVAL, "expected an object, got %s", type_name(v));
  return rc;
}

static int get_array(ctx *c, json_t *obj, const char *key, json_t **out) {
  json_t *v = json_object_get(obj, key);
  *out = v;
  if (!v || json_is_array(v)) return 0;
  int rc = fail_key(c, key, XT_EINVAL, "expected an array, got %s", type_name(v));
  return rc;
}

/* Names become file and channel names: letters, digits, '_', '-', '.'. */
static int check_name(ctx *c, const char *s) {
  if (strlen(s) >= XT_DS_NAME_MAX) return fail(c, XT_EINVAL, "longer than %d characters", XT_DS_NAME_MAX - 1);
  for (const char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
      return fail(c, XT_EINVAL, "\"%s\": use letters, digits, '_', '-' and '.' only", s);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sections                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int model_is_labels(const xt_ds_model_spec *m) {
  if (m->source == XT_DS_SRC_PHANTOM) return m->phantom_labels != 0;
  if (m->source == XT_DS_SRC_ELLIPSOIDS) return m->voxels_labels;
#ifdef XT_HAVE_LOADERS
  return m->convert == XT_LOAD_HU_TO_LABELS || m->convert == XT_LOAD_LABELS || m->convert == XT_LOAD_CONTRAST_MASK;
#else
  return 0;
#endif
}

static int find_model(const xt_ds_spec *s, const char *name) {
  for (int i = 0; i < s->nmodels; i++)
    if (strcmp(s->models[i].name, name) == 0) return i;
  return -1;
}

/* The spec's relative paths are relative to the spec file's directory. */
static void resolve_path(const char *spec_path, const char *p, char *out, size_t cap) {
  const char *slash = strrchr(spec_path, '/');
  if (p[0] == '/' || !slash) snprintf(out, cap, "%s", p);
  else snprintf(out, cap, "%.*s/%s", (int)(slash - spec_path), spec_path, p);
}

static int parse_model(ctx *c, xt_ds_spec *s, json_t *mj, int idx) {
  static const char *const keys[] = {"name", "phantom", "file", "ellipsoids", "size", "spacing_mm", "voxels",
                                     "convert", "energy_kev", "hu_model", "ct_energy_kev", "nifti_transform",
                                     "nan_value", "dicom_series", "place", "offset_mm", "perturb", "role", "follows",
                                     NULL};
  static const char *const file_only[] = {"convert", "energy_kev", "hu_model", "ct_energy_kev", "nifti_transform",
                                          "nan_value", "dicom_series", NULL};
  xt_ds_model_spec *m = &s->models[idx];
  int rc;
  memset(m, 0, sizeof *m);
  m->follows = -1;
  if (!json_is_object(mj)) return fail(c, XT_EINVAL, "expected an object, got %s", type_name(mj));
  if ((rc = check_keys(c, mj, keys))) return rc;
  const char *name, *phantom, *file, *ell;
  if ((rc = get_string(c, mj, "name", &name)) || (rc = get_string(c, mj, "phantom", &phantom)) ||
      (rc = get_string(c, mj, "file", &file)) || (rc = get_string(c, mj, "ellipsoids", &ell)))
    return rc;
  if (!name) {
    rc = fail_key(c, "name", XT_EINVAL, "required");
    return rc;
  }
  size_t n = push_key(c, "name");
  rc = check_name(c, name);
  if (!rc && find_model(s, name) >= 0) rc = fail(c, XT_EINVAL, "\"%s\" names two models", name);
  pop(c, n);
  if (rc) return rc;
  snprintf(m->name, sizeof m->name, "%s", name);
  int sources = !!phantom + !!file + !!ell;
  if (sources != 1)
    return fail(c, XT_EINVAL, "give exactly one of \"phantom\", \"file\", \"ellipsoids\" (%d given)", sources);
  long long size;
  if ((rc = get_int(c, mj, "size", 2, 1024, 256, 0, &size)) ||
      (rc = get_number(c, mj, "spacing_mm", 0.01, 20, 1.0, &m->spacing_mm)))
    return rc;
  m->size = (int)size;
  if (!file) {
    const char *bad = NULL;
    for (int i = 0; file_only[i] && !bad; i++)
      if (json_object_get(mj, file_only[i])) bad = file_only[i];
    if (bad) {
      n = push_key(c, bad);
      rc = fail(c, XT_EINVAL, "applies to \"file\" models only");
      pop(c, n);
      return rc;
    }
  } else {
    const char *bad = json_object_get(mj, "size") ? "size" : json_object_get(mj, "spacing_mm") ? "spacing_mm" : NULL;
    if (bad) {
      n = push_key(c, bad);
      rc = fail(c, XT_EINVAL, "applies to phantoms and ellipsoids only (a file has its own grid)");
      pop(c, n);
      return rc;
    }
  }
  if (!ell && json_object_get(mj, "voxels")) {
    n = push_key(c, "voxels");
    rc = fail(c, XT_EINVAL, "applies to \"ellipsoids\" models only");
    pop(c, n);
    return rc;
  }
  if (phantom) {
    m->source = XT_DS_SRC_PHANTOM;
    if ((rc = get_choice(c, mj, "phantom", "head|head-labels|thorax", 0, &m->phantom_labels))) return rc;
  } else if (file) {
    m->source = XT_DS_SRC_FILE;
    resolve_path(s->path, file, m->path, sizeof m->path);
    const char *series;
    if ((rc = get_choice(c, mj, "convert", "mu|hu|hu-labels|labels|contrast-mask", 1, &m->convert)) ||
        (rc = get_number(c, mj, "energy_kev", 20, 150, XT_DEFAULT_ENERGY_KEV, &m->energy_kev)) ||
        (rc = get_choice(c, mj, "hu_model", "bilinear|linear", 0, &m->hu_linear)) ||
        (rc = get_number(c, mj, "ct_energy_kev", 20, 150, 70, &m->ct_energy_kev)) ||
        (rc = get_choice(c, mj, "nifti_transform", "sform|qform", 0, &m->nifti_qform)) ||
        (rc = get_number(c, mj, "nan_value", -1e9, 1e9, 0, &m->nan_value)) ||
        (rc = get_string(c, mj, "dicom_series", &series)))
      return rc;
    m->nan_fill = json_object_get(mj, "nan_value") != NULL;
    if (series) {
      size_t n2 = push_key(c, "dicom_series");
      if (strlen(series) >= sizeof m->dicom_series) rc = fail(c, XT_EINVAL, "longer than %zu characters", sizeof m->dicom_series - 1);
      pop(c, n2);
      if (rc) return rc;
      snprintf(m->dicom_series, sizeof m->dicom_series, "%s", series);
    }
  } else {
    m->source = XT_DS_SRC_ELLIPSOIDS;
    resolve_path(s->path, ell, m->path, sizeof m->path);
    int v = 0;
    if ((rc = get_choice(c, mj, "voxels", "mu|labels", 0, &v))) return rc;
    m->voxels_labels = v;
  }
#ifndef XT_HAVE_LOADERS
  if (m->source != XT_DS_SRC_PHANTOM)
    return fail(c, XT_EUNSUPPORTED, "model files are not readable by this xtwin (built without models/xt_load*.c)");
#endif
  if ((rc = get_choice(c, mj, "place", "center|native", 0, &m->place_native)) ||
      (rc = get_vec3(c, mj, "offset_mm", -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM, m->offset_mm, 0)))
    return rc;
  int role = 0;
  if ((rc = get_choice(c, mj, "role", "image|labels", 0, &role))) return rc;
  m->in_image = role == 0;
  json_t *pj;
  if ((rc = get_object(c, mj, "perturb", &pj))) return rc;
  if (pj) {
    static const char *const pkeys[] = {"translate_mm", "rotate_deg", NULL};
    n = push_key(c, "perturb");
    if (!(rc = check_keys(c, pj, pkeys)) && !(rc = get_range3(c, pj, "translate_mm", -500, 500, 1, m->translate_mm)))
      rc = get_range3(c, pj, "rotate_deg", -180, 180, 1, m->rotate_deg);
    pop(c, n);
    if (rc) return rc;
  }
  const char *follows;
  if ((rc = get_string(c, mj, "follows", &follows))) return rc;
  if (follows) {
    n = push_key(c, "follows");
    int f = find_model(s, follows);
    if (f < 0) rc = fail(c, XT_EINVAL, "\"%s\" is not an earlier model's name", follows);
    else if (s->models[f].follows >= 0) rc = fail(c, XT_EINVAL, "\"%s\" itself follows another model", follows);
    else if (pj || json_object_get(mj, "place") || json_object_get(mj, "offset_mm"))
      rc = fail(c, XT_EINVAL, "a model that follows another takes its placement and perturbation (drop place, "
                             "offset_mm and perturb)");
    m->follows = f;
    pop(c, n);
    if (rc) return rc;
  }
  return 0;
}

/* A "mode" (one name) or "modes" (a list drawn from per frame) of obj, into out[0 .. *count). */
static int parse_mode_list(ctx *c, json_t *obj, const xt_detector_mode **out, int *count_out) {
  int rc = 0;
  json_t *one = json_object_get(obj, "mode"), *many = json_object_get(obj, "modes");
  if (!!one + !!many != 1) return fail(c, XT_EINVAL, "give \"mode\" or \"modes\"");
  json_t *list = many ? many : one;
  size_t count = json_is_array(list) ? json_array_size(list) : 1;
  size_t m = push_key(c, many ? "modes" : "mode");
  if (many && (!json_is_array(many) || count == 0 || count > XT_DS_MAX_MODES)) {
    rc = fail(c, XT_EINVAL, "expected an array of 1 to %d mode names", XT_DS_MAX_MODES);
    pop(c, m);
    return rc;
  }
  for (size_t i = 0; i < count && !rc; i++) {
    json_t *v = many ? json_array_get(many, i) : one;
    size_t k = many ? push_index(c, i) : strlen(c->path);
    if (!json_is_string(v)) rc = fail(c, XT_EINVAL, "expected a mode name, got %s", type_name(v));
    else if (!(out[i] = xt_mode_find(json_string_value(v))))
      rc = fail(c, XT_EINVAL, "unknown mode \"%s\" (see xtwin modes)", json_string_value(v));
    for (size_t j = 0; j < i && !rc; j++)
      if (out[j] == out[i]) rc = fail(c, XT_EINVAL, "\"%s\" is listed twice", out[i]->name);
    pop(c, k);
  }
  pop(c, m);
  *count_out = (int)count;
  return rc;
}

static int parse_detector(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"mode", "modes", NULL};
  json_t *d;
  int rc;
  if ((rc = get_object(c, root, "detector", &d))) return rc;
  if (!d) {
    s->modes[0] = xt_mode_find("fd20-512");
    s->nmodes = s->nmodes_all = 1;
    return 0;
  }
  size_t n = push_key(c, "detector");
  if (!(rc = check_keys(c, d, keys))) rc = parse_mode_list(c, d, s->modes, &s->nmodes);
  s->nmodes_all = s->nmodes;
  pop(c, n);
  return rc;
}

static int parse_poses(ctx *c, xt_ds_spec *s, json_t *root, long long *runs) {
  static const char *const keys[] = {"sampler", "primary_deg", "secondary_deg", "detector_rot_deg", "sod_mm",
                                     "sid_mm", "table_mm", "views", "jitter_deg", "axis", "start_deg", "span_deg",
                                     "runs", NULL};
  xt_ds_pose_spec *p = &s->poses;
  json_t *pj;
  int rc;
  *runs = 0;
  if ((rc = get_object(c, root, "poses", &pj))) return rc;
  json_t *empty = NULL;
  if (!pj) pj = empty = json_object();
  size_t n = push_key(c, "poses");
  if ((rc = check_keys(c, pj, keys)) || (rc = get_choice(c, pj, "sampler", "uniform|views|arc", 0, &p->sampler)))
    goto done;
  if ((rc = get_range(c, pj, "primary_deg", -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, 0, 0, &p->primary_deg, NULL)) ||
      (rc = get_range(c, pj, "secondary_deg", -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG, 0, 0, &p->secondary_deg,
                      NULL)) ||
      (rc = get_range(c, pj, "detector_rot_deg", -XT_DETROT_MAX_DEG, XT_DETROT_MAX_DEG, 0, 0, &p->detector_rot_deg,
                      NULL)) ||
      (rc = get_range(c, pj, "sod_mm", 1, XT_DIST_MAX_MM, 0, 0, &p->sod_mm, &p->sod_set)) ||
      (rc = get_range(c, pj, "sid_mm", 1, XT_DIST_MAX_MM, 0, 0, &p->sid_mm, &p->sid_set)) ||
      (rc = get_range3(c, pj, "table_mm", -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM, 0, p->table_mm)))
    goto done;
  /* The SID must exceed the SOD for every draw: check the worst case once, here. */
  for (int i = 0; i < s->nmodes; i++) {
    double sod_hi = p->sod_set ? p->sod_mm.hi : s->modes[i]->sod_mm;
    double sid_lo = p->sid_set ? p->sid_mm.lo : s->modes[i]->sid_mm;
    if (!(sid_lo > sod_hi)) {
      rc = fail_key(c, p->sid_set ? "sid_mm" : "sod_mm", XT_EINVAL, "the SID (down to %g mm) must exceed the SOD (up to %g mm) for every draw", sid_lo, sod_hi);
      goto done;
    }
  }
  static const char *const only_views[] = {"views", "jitter_deg", NULL};
  static const char *const only_arc[] = {"axis", "start_deg", "span_deg", "runs", NULL};
  for (int w = 0; w < 2; w++) {
    const char *const *list = w ? only_arc : only_views;
    int allowed = p->sampler == (w ? XT_DS_POSES_ARC : XT_DS_POSES_VIEWS);
    for (int i = 0; list[i] && !allowed; i++) {
      if (!json_object_get(pj, list[i])) continue;
      /* "views" is the arc's view count too. */
      if (w == 0 && p->sampler == XT_DS_POSES_ARC && strcmp(list[i], "views") == 0) continue;
      rc = fail_key(c, list[i], XT_EINVAL, "applies to the \"%s\" sampler only", w ? "arc" : "views");
      goto done;
    }
  }
  if (p->sampler == XT_DS_POSES_VIEWS) {
    json_t *vj;
    if ((rc = get_array(c, pj, "views", &vj))) goto done;
    size_t k = push_key(c, "views");
    if (!vj || json_array_size(vj) == 0 || json_array_size(vj) > XT_DS_MAX_VIEWS) {
      rc = fail(c, XT_EINVAL, "%s: 1 to %d views", vj ? "expected" : "required", XT_DS_MAX_VIEWS);
      pop(c, k);
      goto done;
    }
    p->nviews = (int)json_array_size(vj);
    p->views = calloc((size_t)p->nviews, sizeof *p->views);
    if (!p->views) {
      rc = xt_fail(c->msg, XT_ENOMEM, "out of memory");
      pop(c, k);
      goto done;
    }
    for (int i = 0; i < p->nviews && !rc; i++) {
      json_t *v = json_array_get(vj, (size_t)i);
      xt_ds_view *vw = &p->views[i];
      size_t q = push_index(c, (size_t)i);
      if (json_is_string(v)) {
        snprintf(vw->name, sizeof vw->name, "%s", json_string_value(v));
        if (xt_ds_parse_view(json_string_value(v), &vw->primary_deg, &vw->secondary_deg))
          rc = fail(c, XT_EINVAL, "\"%s\" is not a view (AP, PA, LAT, LAO n, RAO n, CRAN n, CAUD n, combined)",
                    json_string_value(v));
      } else if (json_is_object(v)) {
        static const char *const vkeys[] = {"name", "primary_deg", "secondary_deg", NULL};
        const char *nm;
        if (!(rc = check_keys(c, v, vkeys)) && !(rc = get_string(c, v, "name", &nm)) &&
            !(rc = get_number(c, v, "primary_deg", -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, 0, &vw->primary_deg)))
          rc = get_number(c, v, "secondary_deg", -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG, 0, &vw->secondary_deg);
        if (!rc) snprintf(vw->name, sizeof vw->name, "%s", nm ? nm : "view");
      } else {
        rc = fail(c, XT_EINVAL, "expected a view name or {\"primary_deg\", \"secondary_deg\"}, got %s", type_name(v));
      }
      pop(c, q);
    }
    pop(c, k);
    if (rc) goto done;
    if ((rc = get_range(c, pj, "jitter_deg", -30, 30, 1, 0, &p->jitter_deg, NULL))) goto done;
    if (json_object_get(pj, "primary_deg") || json_object_get(pj, "secondary_deg")) {
      k = push_key(c, json_object_get(pj, "primary_deg") ? "primary_deg" : "secondary_deg");
      rc = fail(c, XT_EINVAL, "the views set the angles (use jitter_deg to vary them)");
      pop(c, k);
      goto done;
    }
  } else if (p->sampler == XT_DS_POSES_ARC) {
    long long views = 0, r = 0;
    if ((rc = get_choice(c, pj, "axis", "primary|secondary", 0, &p->arc_axis)) ||
        (rc = get_number(c, pj, "start_deg", -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, -100, &p->arc_start_deg)) ||
        (rc = get_number(c, pj, "span_deg", -360, 360, 200, &p->arc_span_deg)) ||
        (rc = get_int(c, pj, "views", 1, 100000, 0, 1, &views)) || (rc = get_int(c, pj, "runs", 1, XT_DS_MAX_FRAMES, 0, 0, &r)))
      goto done;
    p->arc_views = (int)views;
    *runs = r;
    double a0 = p->arc_start_deg, a1 = p->arc_start_deg + p->arc_span_deg;
    double lim = p->arc_axis ? XT_SECONDARY_MAX_DEG : XT_PRIMARY_MAX_DEG;
    if (fmin(a0, a1) < -lim || fmax(a0, a1) > lim) {
      rc = fail_key(c, "span_deg", XT_EINVAL, "the arc %g .. %g deg leaves the %s range [%g, %g]", a0, a1,
                p->arc_axis ? "secondary" : "primary", -lim, lim);
      goto done;
    }
    const char *fixed = p->arc_axis ? "secondary_deg" : "primary_deg";
    if (json_object_get(pj, fixed)) {
      rc = fail_key(c, fixed, XT_EINVAL, "the arc sets this angle (start_deg, span_deg)");
      goto done;
    }
  }
done:
  pop(c, n);
  json_decref(empty);
  return rc;
}

/* "plane_b": the lateral plane of a biplane system. Its own mode(s) and C-arm pose, drawn like
 * plane A's; each angle absolute (primary_deg, LAO 90 by default; secondary_deg, 0) or an offset
 * from plane A's drawn angle (primary_offset_deg, secondary_offset_deg). The table is plane A's:
 * one patient on one table, so plane_b has no table_mm. */
static int parse_plane_b(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"mode", "modes", "pose", NULL};
  static const char *const pkeys[] = {"primary_deg", "secondary_deg", "primary_offset_deg", "secondary_offset_deg",
                                      "detector_rot_deg", "sod_mm", "sid_mm", "table_mm", NULL};
  xt_ds_plane_b_spec *pb = &s->plane_b;
  json_t *bj, *pj = NULL, *empty = NULL;
  int rc;
  if ((rc = get_object(c, root, "plane_b", &bj))) return rc;
  if (!bj) return 0;
  size_t n = push_key(c, "plane_b");
  const xt_detector_mode *modes[XT_DS_MAX_MODES];
  int count = 0;
  if ((rc = check_keys(c, bj, keys)) || (rc = parse_mode_list(c, bj, modes, &count))) goto done;
  /* Plane B's modes join plane A's in one list (a mode both planes use is one entry): each has
   * its projectors on a GPU, so the list's bound holds for both planes together. */
  for (int i = 0; i < count && !rc; i++) {
    int k = 0;
    while (k < s->nmodes_all && s->modes[k] != modes[i]) k++;
    if (k == s->nmodes_all) {
      if (k == XT_DS_MAX_MODES) {
        rc = fail_key(c, json_object_get(bj, "modes") ? "modes" : "mode", XT_EINVAL,
                      "the two planes name more than %d detector modes", XT_DS_MAX_MODES);
        break;
      }
      s->modes[s->nmodes_all++] = modes[i];
    }
    pb->modes[i] = k;
  }
  pb->nmodes = count;
  if (rc || (rc = get_object(c, bj, "pose", &pj))) goto done;
  if (!pj) pj = empty = json_object();
  size_t q = push_key(c, "pose");
  if (!(rc = check_keys(c, pj, pkeys)) && json_object_get(pj, "table_mm"))
    rc = fail_key(c, "table_mm", XT_EINVAL, "the table is shared: poses.table_mm places it for both planes");
  for (int a = 0; a < 2 && !rc; a++) {
    const char *abs_key = a ? "secondary_deg" : "primary_deg", *off_key = a ? "secondary_offset_deg" : "primary_offset_deg";
    const double lim = a ? XT_SECONDARY_MAX_DEG : XT_PRIMARY_MAX_DEG;
    xt_ds_range *r = a ? &pb->secondary_deg : &pb->primary_deg;
    int *off = a ? &pb->secondary_offset : &pb->primary_offset;
    *off = json_object_get(pj, off_key) != NULL;
    if (*off && json_object_get(pj, abs_key))
      rc = fail_key(c, off_key, XT_EINVAL, "give %s or %s, not both", abs_key, off_key);
    else if (*off) rc = get_range(c, pj, off_key, -2 * lim, 2 * lim, 0, 0, r, NULL);
    else rc = get_range(c, pj, abs_key, -lim, lim, 0, a ? 0 : 90, r, NULL);
  }
  if (!rc && !(rc = get_range(c, pj, "detector_rot_deg", -XT_DETROT_MAX_DEG, XT_DETROT_MAX_DEG, 0, 0,
                              &pb->detector_rot_deg, NULL)) &&
      !(rc = get_range(c, pj, "sod_mm", 1, XT_DIST_MAX_MM, 0, 0, &pb->sod_mm, &pb->sod_set)))
    rc = get_range(c, pj, "sid_mm", 1, XT_DIST_MAX_MM, 0, 0, &pb->sid_mm, &pb->sid_set);
  for (int i = 0; i < pb->nmodes && !rc; i++) {
    const xt_detector_mode *md = s->modes[pb->modes[i]];
    double sod_hi = pb->sod_set ? pb->sod_mm.hi : md->sod_mm, sid_lo = pb->sid_set ? pb->sid_mm.lo : md->sid_mm;
    if (!(sid_lo > sod_hi))
      rc = fail_key(c, pb->sid_set ? "sid_mm" : "sod_mm", XT_EINVAL,
                    "the SID (down to %g mm) must exceed the SOD (up to %g mm) for every draw", sid_lo, sod_hi);
  }
  pop(c, q);
  pb->noise_seed = xt_ds_plane_b_noise_seed(s->seed);
  pb->present = !rc;
done:
  pop(c, n);
  json_decref(empty);
  return rc;
}

static int parse_labels(ctx *c, xt_ds_spec *s, json_t *root, const xt_material_table *mt) {
  static const char *const keys[] = {"quantity", "channels", NULL};
  static const char *const ckeys[] = {"name", "model", "labels", "mu_range", "hu_range", NULL};
  json_t *lj, *cj;
  int rc;
  if ((rc = get_object(c, root, "labels", &lj))) return rc;
  if (!lj) return 0;
  size_t n = push_key(c, "labels");
  if ((rc = check_keys(c, lj, keys)) ||
      (rc = get_choice(c, lj, "quantity", "path_length_mm|line_integral", 0, &s->quantity)) ||
      (rc = get_array(c, lj, "channels", &cj)))
    goto done;
  size_t k = push_key(c, "channels");
  if (!cj || json_array_size(cj) == 0 || json_array_size(cj) > XT_DS_MAX_CHANNELS) {
    rc = fail(c, XT_EINVAL, "%s: 1 to %d channels", cj ? "expected" : "required", XT_DS_MAX_CHANNELS);
    pop(c, k);
    goto done;
  }
  s->nchannels = (int)json_array_size(cj);
  for (int i = 0; i < s->nchannels && !rc; i++) {
    json_t *ch = json_array_get(cj, (size_t)i);
    xt_ds_channel_spec *cs = &s->channels[i];
    size_t q = push_index(c, (size_t)i);
    const char *name, *model;
    if (!json_is_object(ch)) rc = fail(c, XT_EINVAL, "expected an object, got %s", type_name(ch));
    else if (!(rc = check_keys(c, ch, ckeys)) && !(rc = get_string(c, ch, "name", &name)) &&
             !(rc = get_string(c, ch, "model", &model))) {
      if (!name || !model) {
        rc = fail_key(c, name ? "model" : "name", XT_EINVAL, "required");
      } else {
        size_t w = push_key(c, "name");
        rc = check_name(c, name);
        for (int j = 0; j < i && !rc; j++)
          if (strcmp(s->channels[j].name, name) == 0) rc = fail(c, XT_EINVAL, "\"%s\" names two channels", name);
        pop(c, w);
        snprintf(cs->name, sizeof cs->name, "%s", name);
        cs->model = find_model(s, model);
        if (!rc && cs->model < 0) {
          w = push_key(c, "model");
          rc = fail(c, XT_EINVAL, "\"%s\" is not a model's name", model);
          pop(c, w);
        }
      }
      if (!rc) {
        json_t *lab = json_object_get(ch, "labels"), *mu = json_object_get(ch, "mu_range"),
               *hu = json_object_get(ch, "hu_range");
        int labels_model = model_is_labels(&s->models[cs->model]);
        if (!!lab + !!mu + !!hu != 1) {
          rc = fail(c, XT_EINVAL, "give exactly one of \"labels\", \"mu_range\", \"hu_range\"");
        } else if (lab) {
          size_t w = push_key(c, "labels");
          cs->kind = XT_DS_CH_LABELS;
          if (!labels_model)
            rc = fail(c, XT_EINVAL, "model \"%s\" holds mu, not labels (use mu_range or hu_range)", model);
          else if (!json_is_array(lab) || json_array_size(lab) == 0)
            rc = fail(c, XT_EINVAL, "expected a non-empty array of label numbers or material names");
          for (size_t j = 0; !rc && j < json_array_size(lab); j++) {
            json_t *l = json_array_get(lab, j);
            size_t z = push_index(c, j);
            if (json_is_integer(l) && json_integer_value(l) >= 0 && json_integer_value(l) <= 255) {
              cs->labels[json_integer_value(l)] = 1;
            } else if (json_is_string(l)) {
              int found = -1;
              for (int t = 0; t < mt->count; t++)
                if (strncmp(mt->name[t], json_string_value(l), XT_MATERIAL_NAME_MAX) == 0) found = t;
              if (found < 0) rc = fail(c, XT_EINVAL, "no material named \"%s\" in the default table", json_string_value(l));
              else cs->labels[found] = 1;
            } else {
              rc = fail(c, XT_EINVAL, "expected a label 0..255 or a material name, got %s", type_name(l));
            }
            pop(c, z);
          }
          pop(c, w);
        } else {
          cs->kind = mu ? XT_DS_CH_MU : XT_DS_CH_HU;
          xt_ds_range r;
          size_t w = push_key(c, mu ? "mu_range" : "hu_range");
          if (labels_model) rc = fail(c, XT_EINVAL, "model \"%s\" holds labels (use \"labels\")", model);
          else if (!(rc = want_range(c, mu ? mu : hu, mu ? 0 : -1000, mu ? 100 : 1e5, 0, &r))) {
            if (json_is_number(mu ? mu : hu)) rc = fail(c, XT_EINVAL, "expected [lo, hi]");
            cs->lo = r.lo;
            cs->hi = r.hi;
          }
          pop(c, w);
        }
      }
    }
    pop(c, q);
  }
  pop(c, k);
done:
  pop(c, n);
  return rc;
}

/* "contrast": {"regions": [...], "mg_ml": [lo, hi]} or {"regions": [...], "bolus": {"rate_ml_s",
 * "volume_ml", "agent_mg_ml"?, "t_s": [lo, hi]}}. A region is a thorax phantom's region name (the
 * first thorax model's) or MODEL:LABEL of a label model; that the label is flagged as a region in
 * the model's table is checked when the scene is loaded (a contrast mask's flags come from its
 * file). */
static int parse_contrast(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"regions", "mg_ml", "bolus", NULL};
  static const char *const bkeys[] = {"rate_ml_s", "volume_ml", "agent_mg_ml", "t_s", NULL};
  json_t *cj, *rj, *bj;
  int rc;
  if ((rc = get_object(c, root, "contrast", &cj)) || !cj) return rc;
  xt_ds_contrast_spec *ct = &s->contrast;
  size_t n = push_key(c, "contrast");
  if ((rc = check_keys(c, cj, keys)) || (rc = get_array(c, cj, "regions", &rj)) || (rc = get_object(c, cj, "bolus", &bj)))
    goto done;
  if (!rj || json_array_size(rj) < 1 || json_array_size(rj) > XT_DS_MAX_REGIONS) {
    rc = fail_key(c, "regions", XT_EINVAL, "1 to %d regions", XT_DS_MAX_REGIONS);
    goto done;
  }
  if (!bj == !json_object_get(cj, "mg_ml")) {
    rc = fail(c, XT_EINVAL, "give one of \"mg_ml\" (a concentration per frame) and \"bolus\" (an injection)");
    goto done;
  }
  for (size_t i = 0; i < json_array_size(rj) && !rc; i++) {
    const char *name = json_string_value(json_array_get(rj, i));
    size_t k = push_key(c, "regions");
    size_t q = push_index(c, i);
    int m = -1, l = -1;
    const char *colon = name ? strrchr(name, ':') : NULL;
    if (!name || strlen(name) >= XT_DS_NAME_MAX) rc = fail(c, XT_EINVAL, "a region's name (a string) expected");
    else if (colon) { /* MODEL:LABEL */
      char model[XT_DS_NAME_MAX];
      char *end = NULL;
      snprintf(model, sizeof model, "%.*s", (int)(colon - name), name);
      const long v = strtol(colon + 1, &end, 10);
      m = find_model(s, model);
      if (m < 0) rc = fail(c, XT_EINVAL, "\"%s\": no model \"%s\"", name, model);
      else if (!colon[1] || *end || v < 1 || v > 255) rc = fail(c, XT_EINVAL, "\"%s\": a label 1..255 after the ':'", name);
      else if (!model_is_labels(&s->models[m]))
        rc = fail(c, XT_EINVAL, "\"%s\": model \"%s\" has no labels", name, model);
      l = (int)v;
    } else {
      for (int j = 0; j < s->nmodels && m < 0; j++)
        if (s->models[j].source == XT_DS_SRC_PHANTOM && s->models[j].phantom_labels == 2) m = j;
      for (int lab = 0; lab < XT_THORAX_LABELS && m >= 0 && l < 0; lab++)
        if (xt_phantom_thorax_region(lab) && !strcmp(xt_phantom_thorax_region(lab), name)) l = lab;
      if (m < 0 || l < 0)
        rc = fail(c, XT_EINVAL, "\"%s\": not a region of a \"thorax\" phantom (heart, aorta, pulmonary, veins, "
                                "coronary) nor MODEL:LABEL", name);
    }
    for (int j = 0; j < ct->nregions && !rc; j++)
      if (ct->model[j] == m && ct->label[j] == l) rc = fail(c, XT_EINVAL, "\"%s\" is named twice", name);
    if (!rc && !s->models[m].in_image) rc = fail(c, XT_EINVAL, "\"%s\": its model is not in the image", name);
    if (!rc) {
      snprintf(ct->region[ct->nregions], XT_DS_NAME_MAX, "%s", name);
      ct->model[ct->nregions] = m;
      ct->label[ct->nregions++] = l;
    }
    pop(c, k);
    (void)q;
  }
  if (rc) goto done;
  if (!bj) {
    rc = get_range(c, cj, "mg_ml", 0, 400, 0, 0, &ct->mg_ml, NULL);
  } else {
    size_t k = push_key(c, "bolus");
    if (!(rc = check_keys(c, bj, bkeys)) && !(rc = get_number(c, bj, "rate_ml_s", 0.01, 100, 0, &ct->rate_ml_s)) &&
        !(rc = get_number(c, bj, "volume_ml", 0.01, 1000, 0, &ct->volume_ml)) &&
        !(rc = get_number(c, bj, "agent_mg_ml", 50, 400, XT_CONTRAST_AGENT_MG_ML, &ct->agent_mg_ml)) &&
        !(rc = get_range(c, bj, "t_s", 0, 600, 0, 0, &ct->t_s, NULL))) {
      const char *miss = !json_object_get(bj, "rate_ml_s") ? "rate_ml_s" : !json_object_get(bj, "volume_ml") ? "volume_ml"
                         : !json_object_get(bj, "t_s") ? "t_s" : NULL;
      if (miss) rc = fail_key(c, miss, XT_EINVAL, "required");
    }
    pop(c, k);
    ct->bolus = 1;
  }
  if (!rc && !ct->bolus && !json_object_get(cj, "mg_ml")) rc = fail_key(c, "mg_ml", XT_EINVAL, "required");
  ct->present = !rc;
done:
  pop(c, n);
  return rc;
}

static int parse_landmarks(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"name", "model", "position_mm", NULL};
  json_t *lj;
  int rc;
  if ((rc = get_array(c, root, "landmarks", &lj))) return rc;
  if (!lj || json_array_size(lj) == 0) return 0;
  size_t n = push_key(c, "landmarks");
  if (json_array_size(lj) > XT_DS_MAX_LANDMARKS) {
    rc = fail(c, XT_EINVAL, "at most %d landmarks", XT_DS_MAX_LANDMARKS);
    goto done;
  }
  s->nlandmarks = (int)json_array_size(lj);
  s->landmarks = calloc((size_t)s->nlandmarks, sizeof *s->landmarks);
  if (!s->landmarks) {
    rc = xt_fail(c->msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  for (int i = 0; i < s->nlandmarks && !rc; i++) {
    json_t *l = json_array_get(lj, (size_t)i);
    xt_ds_landmark *lm = &s->landmarks[i];
    size_t q = push_index(c, (size_t)i);
    const char *name, *model;
    if (!json_is_object(l)) rc = fail(c, XT_EINVAL, "expected an object, got %s", type_name(l));
    else if (!(rc = check_keys(c, l, keys)) && !(rc = get_string(c, l, "name", &name)) &&
             !(rc = get_string(c, l, "model", &model))) {
      if (!name || !model) {
        rc = fail_key(c, name ? "model" : "name", XT_EINVAL, "required");
      } else if (strlen(name) >= XT_DS_NAME_MAX) {
        rc = fail_key(c, "name", XT_EINVAL, "longer than %d characters", XT_DS_NAME_MAX - 1);
      } else if ((lm->model = find_model(s, model)) < 0) {
        rc = fail_key(c, "model", XT_EINVAL, "\"%s\" is not a model's name", model);
      } else {
        snprintf(lm->name, sizeof lm->name, "%s", name);
        rc = get_vec3(c, l, "position_mm", -1e5, 1e5, lm->pos, 1);
      }
    }
    pop(c, q);
  }
done:
  pop(c, n);
  return rc;
}

void xt_ds_chain_size(const xt_ds_spec *s, int mode, int *rows, int *cols) {
  const int b = s->chain.present ? s->chain.base.binning : 1;
  *rows = s->modes[mode]->rows / b;
  *cols = s->modes[mode]->cols / b;
}

int xt_ds_dose_mas(const xt_chain_params *p, double kv, double sid_mm, double dose_ngy, double *mas, xt_msg *msg) {
  xt_tube t = {kv, p->anode_deg, p->inherent_al_mm, p->filter_al_mm, p->filter_cu_mm};
  xt_spectrum sp;
  double k = 0;
  int rc = xt_spectrum_tube(&t, &sp, msg);
  if (rc || (rc = xt_spectrum_air_kerma(&sp, sid_mm, &k, msg))) return rc;
  if (!(k > 0)) return xt_fail(msg, XT_ERANGE, "chain.dose_ngy: no air kerma at %g kV", kv);
  *mas = dose_ngy * 1e-3 / k;
  return 0;
}

/* A chain error as a spec error: the chain's own messages name the parameter as its JSON path
 * ("chain.lag_frac_1: ...", the tube's "tube.kv: ..."), so only the file goes in front. */
static int chain_fail(ctx *c, const xt_msg *m) {
  const int tube = strncmp(m->text, "tube.", 5) == 0;
  return xt_fail(c->msg, XT_EINVAL, "%s: %s%s", c->file, tube ? "chain." : "", m->text + (tube ? 5 : 0));
}

/* "chain": every parameter of the chain's table (imaging/xt_chain_params.c) by its name, set and
 * range-checked by the chain itself (xt_chain_param_set, xt_chain_params_validate); kv and
 * dose_ngy may be ranges drawn per frame; noise false turns quantum and electronic noise off. The
 * chain's `seed` is not a field: the noise is keyed by the spec's seed and the frame's index. */
static int parse_chain(ctx *c, xt_ds_spec *s, json_t *root) {
  const char *keys[96];
  int nk = 0;
  keys[nk++] = "dose_ngy";
  keys[nk++] = "noise";
  for (int i = 0; i < xt_chain_param_count() && nk < 95; i++) keys[nk++] = xt_chain_param_at(i)->name;
  keys[nk] = NULL;
  json_t *cj;
  int rc;
  if ((rc = get_object(c, root, "chain", &cj))) return rc;
  if (!cj) return 0;
  size_t n = push_key(c, "chain");
  xt_ds_chain_spec *ch = &s->chain;
  xt_msg m = {{0}};
  ch->present = 1;
  ch->base = xt_chain_params_default();
  ch->noise_seed = s->seed & ((UINT64_C(1) << 53) - 1);
  ch->dose_set = json_object_get(cj, "dose_ngy") != NULL;
  if ((rc = check_keys(c, cj, keys)) || (rc = get_range(c, cj, "kv", XT_KV_MIN, XT_KV_MAX, 0, ch->base.kv, &ch->kv, NULL)) ||
      (rc = get_range(c, cj, "dose_ngy", 0.001, 1e6, 0, 0, &ch->dose_ngy, NULL)) ||
      (rc = get_bool(c, cj, "noise", 1, &ch->noise)))
    goto done;
  const char *key;
  json_t *v;
  json_object_foreach(cj, key, v) {
    if (!strcmp(key, "kv") || !strcmp(key, "dose_ngy") || !strcmp(key, "noise")) continue;
    double x;
    size_t q = push_key(c, key);
    if (!strcmp(key, "seed"))
      rc = fail(c, XT_EINVAL, "not settable: the noise is keyed by the spec's \"seed\" and the frame's index");
    else if (!strcmp(key, "mas") && ch->dose_set)
      rc = fail(c, XT_EINVAL, "give mas or dose_ngy, not both");
    else if ((!strcmp(key, "quantum_noise") || !strcmp(key, "e_noise_adu")) && !ch->noise)
      rc = fail(c, XT_EINVAL, "conflicts with \"noise\": false (which sets it to 0)");
    else if (!(rc = want_number(c, v, -HUGE_VAL, HUGE_VAL, &x)) && xt_chain_param_set(&ch->base, key, x, &m))
      rc = chain_fail(c, &m);
    pop(c, q);
    if (rc) goto done;
  }
  if (!ch->noise) ch->base.quantum_noise = 0, ch->base.e_noise_adu = 0;
  ch->base.seed = ch->noise_seed;
  /* The tube's cross-checks at both ends of the kV range. */
  for (int e = 0; e < 2 && !rc; e++) {
    xt_chain_params t = ch->base;
    t.kv = e ? ch->kv.hi : ch->kv.lo;
    if (xt_chain_params_validate(&t, &m)) rc = chain_fail(c, &m);
  }
  if (rc) goto done;
  ch->base.kv = ch->kv.lo;
  /* dose_ngy: the mAs it asks for at the corners of kV and SID (kerma grows with kV, falls with
   * SID) must be the chain's to give, so no frame fails halfway through a run. */
  double sid_lo = s->poses.sid_set ? s->poses.sid_mm.lo : s->modes[0]->sid_mm,
         sid_hi = s->poses.sid_set ? s->poses.sid_mm.hi : s->modes[0]->sid_mm;
  for (int k = 1; !s->poses.sid_set && k < s->nmodes; k++) {
    if (s->modes[k]->sid_mm < sid_lo) sid_lo = s->modes[k]->sid_mm;
    if (s->modes[k]->sid_mm > sid_hi) sid_hi = s->modes[k]->sid_mm;
  }
  /* Plane B's tube gives its own dose at its own SID. */
  for (int k = 0; s->plane_b.present && k < s->plane_b.nmodes; k++) {
    const xt_ds_plane_b_spec *pb = &s->plane_b;
    const double lo = pb->sid_set ? pb->sid_mm.lo : s->modes[pb->modes[k]]->sid_mm,
                 hi = pb->sid_set ? pb->sid_mm.hi : s->modes[pb->modes[k]]->sid_mm;
    if (lo < sid_lo) sid_lo = lo;
    if (hi > sid_hi) sid_hi = hi;
  }
  for (int i = 0; ch->dose_set && i < 8 && !rc; i++) {
    const double kv = i & 1 ? ch->kv.hi : ch->kv.lo, sid = i & 2 ? sid_hi : sid_lo,
                 dose = i & 4 ? ch->dose_ngy.hi : ch->dose_ngy.lo;
    const xt_chain_param_info *in = xt_chain_param_find("mas");
    double mas = 0;
    if (xt_ds_dose_mas(&ch->base, kv, sid, dose, &mas, &m)) rc = chain_fail(c, &m);
    else if (mas < in->lo || mas > in->hi)
      rc = fail_key(c, "dose_ngy", XT_EINVAL, "%g nGy at %g kV and SID %g mm needs %.3g mAs, outside the chain's [%g, %g]",
                    dose, kv, sid, mas, in->lo, in->hi);
  }
  if (rc) goto done;
  /* One scene for the chain: it renders the material channels of one projector with one pose. */
  int group = -1;
  for (int i = 0; i < s->nmodels && !rc; i++) {
    if (!s->models[i].in_image) continue;
    const int src = s->models[i].follows >= 0 ? s->models[i].follows : i;
    if (group < 0) group = src;
    else if (src != group)
      rc = fail(c, XT_EINVAL,
                "image models \"%s\" and \"%s\" move independently; the chain renders them as one scene "
                "(give \"%s\" \"follows\": \"%s\", or \"role\": \"labels\")",
                s->models[group].name, s->models[i].name, s->models[i].name, s->models[group].name);
  }
done:
  pop(c, n);
  return rc;
}

static int parse_write(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"lineint", "intensity", "raw", "processed", "labels", "segmentation",
                                     "landmarks", NULL};
  json_t *wj;
  int rc;
  xt_ds_write_spec *w = &s->write;
  if ((rc = get_object(c, root, "write", &wj))) return rc;
  json_t *empty = NULL;
  if (!wj) wj = empty = json_object();
  size_t n = push_key(c, "write");
  if ((rc = check_keys(c, wj, keys)) || (rc = get_bool(c, wj, "lineint", 1, &w->lineint)) ||
      (rc = get_bool(c, wj, "intensity", 0, &w->intensity)) ||
      (rc = get_bool(c, wj, "raw", s->chain.present, &w->raw)) ||
      (rc = get_bool(c, wj, "processed", s->chain.present, &w->processed)) ||
      (rc = get_bool(c, wj, "labels", s->nchannels > 0, &w->labels)) ||
      (rc = get_bool(c, wj, "segmentation", s->nchannels > 0, &w->segmentation)) ||
      (rc = get_bool(c, wj, "landmarks", s->nlandmarks > 0, &w->landmarks)))
    goto done;
  const char *bad = NULL, *why = NULL;
  if ((w->raw || w->processed) && !s->chain.present)
    bad = w->raw ? "raw" : "processed", why = "needs a \"chain\" section";
  else if ((w->labels || w->segmentation) && s->nchannels == 0)
    bad = w->labels ? "labels" : "segmentation", why = "no label channels (labels.channels)";
  else if (w->landmarks && s->nlandmarks == 0)
    bad = "landmarks", why = "no landmarks given";
  else if (s->chain.present && !w->raw && !w->processed)
    why = "a \"chain\" but neither raw nor processed: the chain would shape nothing";
  else if (!w->lineint && !w->intensity && !w->raw && !w->processed && !w->labels && !w->segmentation)
    why = "writes no image and no labels";
  if (why) {
    size_t k = bad ? push_key(c, bad) : strlen(c->path);
    rc = fail(c, XT_EINVAL, "%s", why);
    pop(c, k);
  }
done:
  pop(c, n);
  json_decref(empty);
  return rc;
}

static int parse_output(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"format", "shard_frames", NULL};
  json_t *oj;
  int rc;
  if ((rc = get_object(c, root, "output", &oj))) return rc;
  json_t *empty = NULL;
  if (!oj) oj = empty = json_object();
  size_t n = push_key(c, "output");
  long long sf = 0;
  if (!(rc = check_keys(c, oj, keys)) && !(rc = get_choice(c, oj, "format", xt_ds_format_choices(), 0, &s->format)))
    rc = get_int(c, oj, "shard_frames", 1, 1000000, 0, 0, &sf);
  if (!rc && !sf) {
    /* About 1 GiB per shard (WebDataset's advice: 100 MB to a few GB), from the largest mode, so
     * the shard size follows from the spec alone. */
    size_t fb = 0;
    for (int i = 0; i < s->nmodes; i++) {
      size_t b = xt_ds_frame_bytes(s, i, 4096);
      if (b > fb) fb = b;
    }
    sf = (long long)(((size_t)1 << 30) / (fb ? fb : 1));
    if (sf < 1) sf = 1;
    if (sf > 10000) sf = 10000;
  }
  s->shard_frames = sf;
  pop(c, n);
  json_decref(empty);
  return rc;
}

/* "dicom": the chain frames also as DICOM objects, per shard (xt_dataset_dicom.c). The identity
 * file is read here, so that a bad one stops the run before anything is rendered. A shard is a
 * study of its own (its UID from the spec and the shard: Slurm tasks never share one), so the
 * file may not name one. An object's pixels must fit DICOM's 32-bit value length. */
static int parse_dicom(ctx *c, xt_ds_spec *s, json_t *root) {
  static const char *const keys[] = {"pixels", "classic", "identity", NULL};
  json_t *dj;
  int rc;
  xt_ds_dicom_spec *d = &s->dicom;
  if ((rc = get_object(c, root, "dicom", &dj)) || !dj) return rc;
  size_t n = push_key(c, "dicom");
  const char *idp = NULL;
  if ((rc = check_keys(c, dj, keys)) || (rc = get_choice(c, dj, "pixels", "processed|raw", 0, &d->raw)) ||
      (rc = get_bool(c, dj, "classic", 0, &d->classic)) || (rc = get_string(c, dj, "identity", &idp)))
    goto done;
  if (!s->chain.present) {
    rc = fail(c, XT_EINVAL, "needs a \"chain\" section: an XA image is an exposure");
    goto done;
  }
  if (idp) resolve_path(s->path, idp, d->identity_path, sizeof d->identity_path);
  xt_msg m = {0};
  if (xt_dicom_identity_load(idp ? d->identity_path : NULL, &d->identity, &m)) {
    size_t k = push_key(c, "identity");
    rc = fail(c, XT_EINVAL, "%s", m.text);
    pop(c, k);
    goto done;
  }
  if (d->identity.study_uid_given) {
    size_t k = push_key(c, "identity");
    rc = fail(c, XT_EINVAL, "%s: \"study_instance_uid\": a dataset's shard is a study of its own, its UID made "
                            "from the spec and the shard; leave it out", d->identity_path);
    pop(c, k);
    goto done;
  }
  for (int i = 0; i < s->nmodes_all; i++) {
    int rows, cols;
    xt_ds_chain_size(s, i, &rows, &cols);
    if ((double)rows * cols * 2.0 * (double)s->shard_frames > 4294967294.0) {
      size_t k = push_key(c, "pixels");
      rc = fail(c, XT_EINVAL, "a shard of %lld %d x %d frames (%s) is more pixel data than one DICOM object holds "
                              "(4 GiB): lower output.shard_frames", s->shard_frames, cols, rows, s->modes[i]->name);
      pop(c, k);
      goto done;
    }
  }
  d->present = 1;
done:
  pop(c, n);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The whole spec                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void sha256_hex(const void *data, size_t n, char out[65]) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

long long xt_ds_spec_shards(const xt_ds_spec *s) { return (s->frames + s->shard_frames - 1) / s->shard_frames; }

void xt_ds_spec_free(xt_ds_spec *s) {
  if (!s) return;
  free(s->poses.views);
  free(s->landmarks);
  free(s->canonical);
  memset(s, 0, sizeof *s);
}

int xt_ds_spec_load(const char *path, xt_ds_spec *s, xt_msg *msg) {
  static const char *const keys[] = {"format", "version", "description", "seed", "frames", "backend", "detector",
                                     "models", "poses", "plane_b", "labels", "landmarks", "chain", "write", "output",
                                     "dicom", "contrast", NULL};
  memset(s, 0, sizeof *s);
  const char *base = strrchr(path, '/');
  ctx c = {base ? base + 1 : path, "", msg};
  int rc;
  json_error_t jerr;
  json_t *root = NULL, *mj;
  if (strlen(path) >= sizeof s->path) return xt_fail(msg, XT_EINVAL, "%s: path too long", path);
  snprintf(s->path, sizeof s->path, "%s", path);
  root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    if (jerr.line < 1) return xt_fail(msg, XT_EIO, "%s: %s", path, jerr.text);
    return xt_fail(msg, XT_EINVAL, "%s:%d:%d: %s", c.file, jerr.line, jerr.column, jerr.text);
  }
  if (!json_is_object(root)) {
    rc = fail(&c, XT_EINVAL, "expected a JSON object, got %s", type_name(root));
    goto done;
  }
  if ((rc = check_keys(&c, root, keys))) goto done;
  const char *fmt;
  long long version, seed, frames;
  if ((rc = get_string(&c, root, "format", &fmt))) goto done;
  if (fmt && strcmp(fmt, "xtwin-dataset-spec") != 0) {
    rc = fail_key(&c, "format", XT_EINVAL, "\"%s\": expected \"xtwin-dataset-spec\"", fmt);
    goto done;
  }
  if (json_object_get(root, "description") && !json_is_string(json_object_get(root, "description"))) {
    rc = fail_key(&c, "description", XT_EINVAL, "expected a string");
    goto done;
  }
  if ((rc = get_int(&c, root, "version", 1, 1, 1, 0, &version)) ||
      (rc = get_int(&c, root, "seed", 0, INT64_MAX, 0, 1, &seed)))
    goto done;
  s->seed = (uint64_t)seed;
  int backend = 0;
  if ((rc = get_choice(&c, root, "backend", "auto|cpu|cuda", 0, &backend))) goto done;
  if (backend == 0) { /* auto (the default): a usable GPU, else the CPU, as the server chooses */
    xt_msg why;
    s->backend = xt_proj_available(XT_BACKEND_CUDA, &why) == 0 ? XT_BACKEND_CUDA : XT_BACKEND_CPU;
  } else
    s->backend = backend == 2 ? XT_BACKEND_CUDA : XT_BACKEND_CPU;
  if ((rc = parse_detector(&c, s, root))) goto done;

  if ((rc = get_array(&c, root, "models", &mj))) goto done;
  {
    size_t n = push_key(&c, "models");
    if (!mj || json_array_size(mj) == 0 || json_array_size(mj) > XT_DS_MAX_MODELS) {
      rc = fail(&c, XT_EINVAL, "%s: 1 to %d models", mj ? "expected" : "required", XT_DS_MAX_MODELS);
      pop(&c, n);
      goto done;
    }
    for (size_t i = 0; i < json_array_size(mj) && !rc; i++) {
      size_t q = push_index(&c, i);
      rc = parse_model(&c, s, json_array_get(mj, i), (int)i);
      if (!rc) s->nmodels = (int)i + 1;
      pop(&c, q);
    }
    int in_image = 0;
    for (int i = 0; i < s->nmodels; i++) in_image += s->models[i].in_image;
    if (!rc && !in_image) rc = fail(&c, XT_EINVAL, "no model is in the image (every one has \"role\": \"labels\")");
    pop(&c, n);
    if (rc) goto done;
  }

  long long runs = 0;
  if ((rc = parse_poses(&c, s, root, &runs))) goto done;
  if ((rc = get_int(&c, root, "frames", 1, XT_DS_MAX_FRAMES, 0, runs == 0, &frames))) goto done;
  if (s->poses.sampler == XT_DS_POSES_ARC) {
    long long v = s->poses.arc_views;
    size_t n = push_key(&c, "frames");
    if (runs && json_object_get(root, "frames") && frames != runs * v)
      rc = fail(&c, XT_EINVAL, "%lld, but poses.runs x poses.views = %lld", frames, runs * v);
    else if (!runs && frames % v)
      rc = fail(&c, XT_EINVAL, "%lld is not a multiple of poses.views (%lld): an arc's runs are whole", frames, v);
    pop(&c, n);
    if (rc) goto done;
    if (runs) frames = runs * v;
    if (frames > XT_DS_MAX_FRAMES) {
      rc = fail(&c, XT_EINVAL, "poses.runs x poses.views exceeds %lld frames", XT_DS_MAX_FRAMES);
      goto done;
    }
  }
  s->frames = frames;

  xt_material_table mt;
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg))) goto done;
  if ((rc = parse_plane_b(&c, s, root)) || (rc = parse_labels(&c, s, root, &mt)) || (rc = parse_landmarks(&c, s, root)) ||
      (rc = parse_contrast(&c, s, root)) || (rc = parse_chain(&c, s, root)) ||
      (rc = parse_write(&c, s, root)) || (rc = parse_output(&c, s, root)) || (rc = parse_dicom(&c, s, root)))
    goto done;

  s->canonical = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  if (!s->canonical) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  sha256_hex(s->canonical, strlen(s->canonical), s->sha256);
done:
  json_decref(root);
  if (rc) xt_ds_spec_free(s);
  return rc;
}
