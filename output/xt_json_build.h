/* Building a JSON document with jansson without checking every call: the builder records the
 * first failure (json_object_set_new and json_array_append_new take ownership of the value even
 * when they fail, or when it is NULL: a failed json_real of NaN, an allocation that failed), and
 * the encoder checks once at the end. One copy for every JSON the program writes from a frame
 * record (the sidecar, the dataset's frame JSON and its index) instead of one per writer. */
#ifndef XT_JSON_BUILD_H
#define XT_JSON_BUILD_H

#include <jansson.h>

#include "xt_geom.h"

typedef struct xt_jb {
  int bad; /* a value could not be made or added */
} xt_jb;

void xt_jb_put(xt_jb *b, json_t *obj, const char *key, json_t *val);
void xt_jb_push(xt_jb *b, json_t *arr, json_t *val);
/* [v0, ..., v(n-1)] as reals (a non-finite value marks the builder bad) */
json_t *xt_jb_vec(xt_jb *b, const double *v, int n);
json_t *xt_jb_vec3(xt_jb *b, xt_vec3 v);
/* [[row 0], [row 1], [row 2]] of a 3x4 matrix; of an affine map as [M | t] */
json_t *xt_jb_mat34(xt_jb *b, const double M[3][4]);
json_t *xt_jb_affine34(xt_jb *b, const xt_affine *m);

#endif /* XT_JSON_BUILD_H */
