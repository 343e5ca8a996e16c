/* Ellipsoid phantom files (JSON, via jansson): any set of ellipsoids as a built-in phantom.
 * Strict: unknown keys, wrong types, non-finite numbers and out-of-range values are errors that
 * name the file and the JSON path, so a typo never silently renders a different phantom. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "xt_load.h"
#include "xt_phantom.h"

#define MAX_SEMI_MM 5000.0
#define MAX_CENTER_MM 5000.0
#define MAX_ABS_MU 100.0 /* 1/mm: denser than any element at diagnostic energies */

static int get_number(const json_t *v, double *out) {
  if (!json_is_number(v)) return 0;
  *out = json_number_value(v);
  return isfinite(*out);
}

static int get_vec3(const char *path, int i, const char *key, const json_t *e, double lo, double hi, xt_vec3 *out,
                    xt_msg *msg) {
  const json_t *a = json_object_get(e, key);
  double v[3];
  if (!json_is_array(a) || json_array_size(a) != 3)
    return xt_fail(msg, XT_EFORMAT, "%s: ellipsoids[%d].%s: expected an array of 3 numbers", path, i, key);
  for (int k = 0; k < 3; k++)
    if (!get_number(json_array_get(a, (size_t)k), &v[k]) || v[k] < lo || v[k] > hi)
      return xt_fail(msg, XT_ERANGE, "%s: ellipsoids[%d].%s[%d]: expected a number in [%g, %g]", path, i, key, k, lo,
                     hi);
  *out = xt_v3(v[0], v[1], v[2]);
  return 0;
}

static int get_angle(const char *path, int i, const char *key, const json_t *e, double *out, xt_msg *msg) {
  const json_t *a = json_object_get(e, key);
  *out = 0;
  if (!a) return 0;
  if (!get_number(a, out) || fabs(*out) > 360)
    return xt_fail(msg, XT_ERANGE, "%s: ellipsoids[%d].%s: expected degrees in [-360, 360]", path, i, key);
  return 0;
}

static int parse_ellipsoid(const char *path, int i, const json_t *e, const xt_material_table *mt, xt_ellipsoid *out,
                           xt_msg *msg) {
  static const char *const keys[] = {"center", "semi_axes", "phi_deg", "theta_deg", "material", "mu"};
  if (!json_is_object(e)) return xt_fail(msg, XT_EFORMAT, "%s: ellipsoids[%d]: expected an object", path, i);
  const char *k;
  const json_t *val;
  json_object_foreach((json_t *)e, k, val) {
    size_t j = 0;
    while (j < sizeof keys / sizeof keys[0] && strcmp(keys[j], k) != 0) j++;
    if (j == sizeof keys / sizeof keys[0])
      return xt_fail(msg, XT_EFORMAT, "%s: ellipsoids[%d]: unknown key \"%s\"", path, i, k);
  }
  xt_vec3 c, s;
  double phi, theta, mu;
  int rc;
  if ((rc = get_vec3(path, i, "center", e, -MAX_CENTER_MM, MAX_CENTER_MM, &c, msg)) ||
      (rc = get_vec3(path, i, "semi_axes", e, 1e-3, MAX_SEMI_MM, &s, msg)) ||
      (rc = get_angle(path, i, "phi_deg", e, &phi, msg)) || (rc = get_angle(path, i, "theta_deg", e, &theta, msg)))
    return rc;
  int label = XT_MAT_SOFT;
  const json_t *m = json_object_get(e, "material");
  if (m) {
    if (!json_is_string(m)) return xt_fail(msg, XT_EFORMAT, "%s: ellipsoids[%d].material: expected a string", path, i);
    label = -1;
    for (int j = 0; j < mt->count; j++)
      if (strcmp(mt->name[j], json_string_value(m)) == 0) label = j;
    if (label < 0)
      return xt_fail(msg, XT_ENOTFOUND, "%s: ellipsoids[%d].material: no material \"%s\" in the table", path, i,
                     json_string_value(m));
  }
  mu = mt->mu[label];
  const json_t *u = json_object_get(e, "mu");
  if (u && (!get_number(u, &mu) || fabs(mu) > MAX_ABS_MU))
    return xt_fail(msg, XT_ERANGE, "%s: ellipsoids[%d].mu: expected a number in [-%g, %g] (1/mm)", path, i, MAX_ABS_MU,
                   MAX_ABS_MU);
  *out = xt_ellipsoid_make(c, s, phi, theta, mu, label);
  return 0;
}

int xt_phantom_load_json(const char *path, const xt_material_table *mt, xt_phantom *out, xt_msg *msg) {
  json_error_t jerr;
  int rc = 0;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    if (json_error_code(&jerr) == json_error_out_of_memory) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    /* jansson gives no text when it runs out of memory before it starts parsing */
    if (!jerr.text[0]) return xt_fail(msg, XT_EFORMAT, "%s: JSON parser failed without a reason (out of memory?)", path);
    return xt_fail(msg, XT_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
  }
  xt_phantom p;
  memset(&p, 0, sizeof p);
  if (!json_is_object(root)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: expected a JSON object", path);
    goto done;
  }
  const char *k;
  json_t *val;
  json_object_foreach(root, k, val) {
    if (strcmp(k, "name") != 0 && strcmp(k, "ellipsoids") != 0) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: unknown key \"%s\" (expected name, ellipsoids)", path, k);
      goto done;
    }
  }
  const json_t *name = json_object_get(root, "name");
  if (name && !json_is_string(name)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: name: expected a string", path);
    goto done;
  }
  snprintf(p.name, sizeof p.name, "%s", name ? json_string_value(name) : "ellipsoids");
  const json_t *arr = json_object_get(root, "ellipsoids");
  if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > XT_PHANTOM_MAX_ELLIPSOIDS) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: ellipsoids: expected an array of 1 to %d objects", path,
                 XT_PHANTOM_MAX_ELLIPSOIDS);
    goto done;
  }
  p.count = (int)json_array_size(arr);
  for (int i = 0; i < p.count && !rc; i++) rc = parse_ellipsoid(path, i, json_array_get(arr, (size_t)i), mt, &p.e[i], msg);
  if (!rc) *out = p;
done:
  json_decref(root);
  return rc;
}
