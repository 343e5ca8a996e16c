/* The JSON builder every record encoder shares (xt_json_build.h). */
#include "xt_json_build.h"

void xt_jb_put(xt_jb *b, json_t *obj, const char *key, json_t *val) {
  if (!obj || json_object_set_new(obj, key, val) != 0) b->bad = 1;
}

void xt_jb_push(xt_jb *b, json_t *arr, json_t *val) {
  if (!arr || json_array_append_new(arr, val) != 0) b->bad = 1;
}

json_t *xt_jb_vec(xt_jb *b, const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) xt_jb_push(b, a, json_real(v[i]));
  return a;
}

json_t *xt_jb_vec3(xt_jb *b, xt_vec3 v) {
  const double d[3] = {v.x, v.y, v.z};
  return xt_jb_vec(b, d, 3);
}

json_t *xt_jb_mat34(xt_jb *b, const double M[3][4]) {
  json_t *a = json_array();
  for (int i = 0; i < 3; i++) xt_jb_push(b, a, xt_jb_vec(b, M[i], 4));
  return a;
}

json_t *xt_jb_affine34(xt_jb *b, const xt_affine *m) {
  double M[3][4];
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) M[i][j] = m->m[i][j];
    M[i][3] = m->t[i];
  }
  return xt_jb_mat34(b, M);
}
