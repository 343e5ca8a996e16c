/* Instruments in JSON (.instr.json; format in docs/instruments.md) and centrelines in JSON (the
 * server's shape updates). Part of xt_loaders (jansson), not of xt_models. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_instr.h"
#include "xt_instr_json.h"

int xt_instr_points_json(const json_t *a, double *pts, int cap, int *n, const char *what, xt_msg *msg) {
  *n = 0;
  if (!json_is_array(a)) return xt_fail(msg, XT_EINVAL, "%s: points: expected an array of [x, y, z] in mm", what);
  const size_t len = json_array_size(a);
  if (len > (size_t)cap)
    return xt_fail(msg, XT_ETOOLARGE, "%s: %zu points, more than the instrument's max_points %d", what, len, cap);
  for (size_t i = 0; i < len; i++) {
    const json_t *p = json_array_get(a, i);
    if (!json_is_array(p) || json_array_size(p) != 3)
      return xt_fail(msg, XT_EINVAL, "%s: points[%zu]: expected [x, y, z]", what, i);
    for (int k = 0; k < 3; k++) {
      const json_t *v = json_array_get(p, (size_t)k);
      if (!json_is_number(v)) return xt_fail(msg, XT_EINVAL, "%s: points[%zu][%d]: expected a number (mm)", what, i, k);
      pts[3 * i + (size_t)k] = json_number_value(v);
    }
  }
  *n = (int)len;
  return 0;
}

static int section_json(const char *path, size_t i, const json_t *e, xt_instr_device *dev, xt_msg *msg) {
  const char *wall = NULL, *lumen = NULL;
  double len = 0, ro = 0, ri = 0;
  json_error_t err;
  if (json_unpack_ex((json_t *)e, &err, JSON_STRICT, "{s?F,s:F,s?F,s:s,s?s}", "length_mm", &len, "r_out_mm", &ro,
                     "r_in_mm", &ri, "wall", &wall, "lumen", &lumen))
    return xt_fail(msg, XT_EFORMAT, "%s: sections[%zu]: %s", path, i, err.text);
  xt_instr_section *s = &dev->sec[i];
  int rc = xt_instr_material(dev, wall, &s->wall, msg);
  if (!rc) rc = lumen ? xt_instr_material(dev, lumen, &s->lumen, msg) : 0;
  if (!lumen) s->lumen = dev->medium;
  if (rc) return xt_fail(msg, rc, "%s: sections[%zu]: %s", path, i, msg ? msg->text : "bad material");
  s->length_mm = len;
  s->r_out = ro;
  s->r_in = ri;
  return 0;
}

int xt_instr_read_json(const char *path, xt_model **out, xt_msg *msg) {
  *out = NULL;
  json_error_t jerr;
  FILE *f = NULL;
  int rc = xt__fopen_regular(path, &f, NULL, msg);
  if (rc) return rc;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
  fclose(f);
  if (!root) {
    if (json_error_code(&jerr) == json_error_out_of_memory) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    return xt_fail(msg, XT_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
  }
  const char *device = NULL, *medium = "blood";
  json_int_t maxp = 4096;
  int lumen_contrast = 0;
  json_t *sections = NULL, *points = NULL;
  double *pts = NULL;
  xt_instr_device *dev = malloc(sizeof *dev);
  if (!dev) {
    json_decref(root);
    return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  }
  if (json_unpack_ex(root, &jerr, JSON_STRICT, "{s?s,s?s,s?I,s?o,s?b,s:o}", "device", &device, "medium",
                     &medium, "max_points", &maxp, "sections", &sections, "contrast_lumen", &lumen_contrast, "points",
                     &points)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: %s (keys: device or sections, medium, max_points, contrast_lumen, points)", path,
                 jerr.text);
    goto done;
  }
  if (maxp < 2 || maxp > XT_INSTR_MAX_POINTS) {
    rc = xt_fail(msg, XT_ERANGE, "%s: max_points %lld outside [2, %d]", path, (long long)maxp, XT_INSTR_MAX_POINTS);
    goto done;
  }
  if (!device == !sections) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: give one of \"device\" (guidewire, catheter) and \"sections\"", path);
    goto done;
  }
  if (device) {
    if (!strcmp(device, "guidewire")) rc = xt_instr_guidewire(dev, medium, (int)maxp, msg);
    else if (!strcmp(device, "catheter")) rc = xt_instr_catheter(dev, medium, (int)maxp, msg);
    else rc = xt_fail(msg, XT_EFORMAT, "%s: device \"%.40s\": expected guidewire or catheter", path, device);
  } else {
    const size_t ns = json_is_array(sections) ? json_array_size(sections) : 0;
    if (ns < 1 || ns > XT_INSTR_MAX_SECTIONS)
      rc = xt_fail(msg, XT_EFORMAT, "%s: sections: expected an array of 1..%d sections", path, XT_INSTR_MAX_SECTIONS);
    if (!rc) rc = xt_instr_device_init(dev, medium, (int)maxp, msg);
    for (size_t i = 0; i < ns && !rc; i++) rc = section_json(path, i, json_array_get(sections, i), dev, msg);
    dev->nsections = (int)ns;
  }
  if (rc) goto done;
  if (lumen_contrast) { /* the lumen takes injections (docs/contrast.md) */
    xt_msg why;
    if ((rc = xt_instr_lumen_region(dev, NULL, &why))) {
      rc = xt_fail(msg, rc, "%s: contrast_lumen: %s", path, why.text);
      goto done;
    }
  }
  if ((rc = xt_instr_device_check(dev, path, msg))) goto done;
  if (!(pts = malloc(sizeof(double) * 3 * (size_t)maxp))) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    goto done;
  }
  int n = 0;
  if ((rc = xt_instr_points_json(points, pts, (int)maxp, &n, path, msg))) goto done;
  rc = xt_model_from_instr(dev, pts, n, NULL, out, msg); /* named by the loader, after the file */
done:
  free(pts);
  free(dev);
  json_decref(root);
  return rc;
}
