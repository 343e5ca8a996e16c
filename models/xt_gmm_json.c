/* Small Gaussian mixtures written by hand (.gmm.json, via jansson; format in docs/models.md).
 * Strict like the ellipsoid files: unknown keys, wrong types, non-finite or out-of-range values
 * are errors naming the file and the JSON path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "xt_gmm.h"
#include "xt_gmm_json.h"

#define JSON_MAX_GAUSSIANS 100000

static int number(const json_t *v, double *out) {
  if (!json_is_number(v)) return 0;
  *out = json_number_value(v);
  return isfinite(*out);
}

/* n numbers into v (n = 3 or 4); a single number is accepted for `scalar_ok` keys (isotropic). */
static int numbers(const char *path, size_t i, const char *key, const json_t *e, int n, int scalar_ok, double *v,
                   xt_msg *msg) {
  const json_t *a = json_object_get(e, key);
  if (scalar_ok && json_is_number(a)) {
    if (!number(a, &v[0])) return xt_fail(msg, XT_ENANDATA, "%s: gaussians[%zu].%s: not a finite number", path, i, key);
    for (int k = 1; k < n; k++) v[k] = v[0];
    return 0;
  }
  if (!json_is_array(a) || json_array_size(a) != (size_t)n)
    return xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu].%s: expected an array of %d numbers%s", path, i, key, n,
                   scalar_ok ? " or one number" : "");
  for (int k = 0; k < n; k++)
    if (!number(json_array_get(a, (size_t)k), &v[k]))
      return xt_fail(msg, XT_ENANDATA, "%s: gaussians[%zu].%s[%d]: not a finite number", path, i, key, k);
  return 0;
}

static int parse_one(const char *path, size_t i, const json_t *e, const xt_material_table *mt, xt_gaussian *g,
                     int *has_label, xt_msg *msg) {
  static const char *const keys[] = {"center", "scale", "quat", "rho", "material"};
  if (!json_is_object(e)) return xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu]: expected an object", path, i);
  const char *k;
  const json_t *val;
  json_object_foreach((json_t *)e, k, val) {
    size_t j = 0;
    while (j < sizeof keys / sizeof keys[0] && strcmp(keys[j], k) != 0) j++;
    if (j == sizeof keys / sizeof keys[0])
      return xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu]: unknown key \"%s\" (expected center, scale, quat, rho, material)",
                     path, i, k);
  }
  double c[3], s[3], q[4] = {1, 0, 0, 0}, rho;
  int rc;
  if ((rc = numbers(path, i, "center", e, 3, 0, c, msg)) || (rc = numbers(path, i, "scale", e, 3, 1, s, msg)))
    return rc;
  if (json_object_get(e, "quat") && (rc = numbers(path, i, "quat", e, 4, 0, q, msg))) return rc;
  const json_t *r = json_object_get(e, "rho");
  if (!r) return xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu].rho: missing (peak attenuation, 1/mm)", path, i);
  if (!number(r, &rho)) return xt_fail(msg, XT_ENANDATA, "%s: gaussians[%zu].rho: not a finite number", path, i);
  for (int a = 0; a < 3; a++) {
    if (fabs(c[a]) > 1e6) return xt_fail(msg, XT_ERANGE, "%s: gaussians[%zu].center[%d]: beyond 1e6 mm", path, i, a);
    if (!(s[a] >= XT_GMM_SCALE_MIN && s[a] <= XT_GMM_SCALE_MAX))
      return xt_fail(msg, XT_ERANGE, "%s: gaussians[%zu].scale: %g mm, outside [%g, %g]", path, i, s[a],
                     XT_GMM_SCALE_MIN, XT_GMM_SCALE_MAX);
    g->centre[a] = (float)c[a];
    g->scale[a] = (float)s[a];
  }
  for (int a = 0; a < 4; a++) g->quat[a] = (float)q[a];
  if (!(rho >= 0 && rho <= 1e3))
    return xt_fail(msg, XT_ERANGE, "%s: gaussians[%zu].rho: %g /mm, outside [0, 1000]", path, i, rho);
  g->rho = (float)rho;
  *has_label = 0;
  const json_t *m = json_object_get(e, "material");
  if (m) {
    int label = -1;
    if (json_is_string(m)) {
      for (int j = 0; j < mt->count; j++)
        if (strcmp(mt->name[j], json_string_value(m)) == 0) label = j;
      if (label < 0)
        return xt_fail(msg, XT_ENOTFOUND, "%s: gaussians[%zu].material: no material \"%s\" in the default table", path,
                       i, json_string_value(m));
    } else if (json_is_integer(m) && json_integer_value(m) >= 0 && json_integer_value(m) <= 255) {
      label = (int)json_integer_value(m);
    } else {
      return xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu].material: expected a material name or a label 0..255", path,
                     i);
    }
    g->label = (uint32_t)label;
    *has_label = 1;
  }
  return 0;
}

int xt_gmm_read_json(const char *path, xt_gmm **out, char *name, size_t name_cap, xt_msg *msg) {
  *out = NULL;
  json_error_t jerr;
  xt_gmm *g = NULL;
  int rc = 0;
  FILE *f = NULL;
  if ((rc = xt__fopen_regular(path, &f, NULL, msg))) return rc; /* never blocks on a FIFO */
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
  fclose(f);
  if (!root) {
    if (json_error_code(&jerr) == json_error_out_of_memory) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    if (!jerr.text[0]) return xt_fail(msg, XT_EFORMAT, "%s: JSON parser failed without a reason (out of memory?)", path);
    return xt_fail(msg, XT_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
  }
  xt_material_table mt;
  if (!json_is_object(root)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: expected a JSON object", path);
    goto done;
  }
  const char *k;
  json_t *val;
  json_object_foreach(root, k, val) {
    if (strcmp(k, "name") && strcmp(k, "gaussians") && strcmp(k, "cutoff_sigma") && strcmp(k, "contrast")) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: unknown key \"%s\" (expected name, cutoff_sigma, gaussians, contrast)", path, k);
      goto done;
    }
  }
  const json_t *nm = json_object_get(root, "name");
  if (nm && !json_is_string(nm)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: name: expected a string", path);
    goto done;
  }
  const json_t *arr = json_object_get(root, "gaussians");
  if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > JSON_MAX_GAUSSIANS) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: gaussians: expected an array of 1 to %d objects", path, JSON_MAX_GAUSSIANS);
    goto done;
  }
  if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg))) {
    char why[sizeof msg->text];
    snprintf(why, sizeof why, "%s", msg ? msg->text : "");
    rc = xt_fail(msg, rc, "%s: the default material table: %s", path, why);
    goto done;
  }
  if ((rc = xt_gmm_create(json_array_size(arr), &g, msg))) {
    rc = xt_fail(msg, rc, "%s: out of memory for %zu Gaussians", path, json_array_size(arr));
    goto done;
  }
  const json_t *co = json_object_get(root, "cutoff_sigma");
  if (co && (!number(co, &g->cutoff) || g->cutoff < XT_GMM_CUTOFF_MIN || g->cutoff > XT_GMM_CUTOFF_MAX)) {
    rc = xt_fail(msg, XT_ERANGE, "%s: cutoff_sigma: expected a number in [%g, %g]", path, XT_GMM_CUTOFF_MIN,
                 XT_GMM_CUTOFF_MAX);
    goto done;
  }
  int labelled = 0;
  for (size_t i = 0; i < g->count && !rc; i++) {
    int has = 0;
    rc = parse_one(path, i, json_array_get(arr, i), &mt, &g->g[i], &has, msg);
    if (!rc && i == 0) labelled = has;
    else if (!rc && has != labelled)
      rc = xt_fail(msg, XT_EFORMAT, "%s: gaussians[%zu].material: give a material for every Gaussian or for none", path,
                   i);
  }
  if (rc) goto done;
  g->has_labels = labelled;
  if ((rc = xt_gmm_finish(g, path, msg))) goto done;
  /* "contrast": [material, ...]: the Gaussians of each are a contrast region (docs/contrast.md) */
  const json_t *ct = json_object_get(root, "contrast");
  if (ct && (!json_is_array(ct) || !labelled)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: contrast: %s", path,
                 labelled ? "expected an array of material names" : "a mixture without materials has no regions");
    goto done;
  }
  for (size_t i = 0; ct && i < json_array_size(ct) && !rc; i++) {
    const char *mname = json_string_value(json_array_get(ct, i));
    int l = -1;
    for (int j = 0; mname && j < mt.count && l < 0; j++)
      if (!strcmp(mt.name[j], mname)) l = j;
    size_t n = 0;
    for (size_t q = 0; l >= 0 && q < g->count; q++) n += (g->g[q].label & 255u) == (uint32_t)l;
    if (l < 0 || !n)
      rc = xt_fail(msg, XT_EFORMAT, "%s: contrast[%zu]: \"%.40s\" is no material of a Gaussian here", path, i,
                   mname ? mname : "");
    else g->contrast[l] = 1;
  }
  if (rc) goto done;
  if (name && name_cap) snprintf(name, name_cap, "%s", nm ? json_string_value(nm) : "");
  *out = g;
  g = NULL;
done:
  xt_gmm_free(g);
  json_decref(root);
  return rc;
}
