/* Hand-written Gaussian mixtures in JSON (.gmm.json; format in docs/models.md). Part of
 * xt_loaders (jansson), not of xt_models. */
#ifndef XT_GMM_JSON_H
#define XT_GMM_JSON_H

#include <stddef.h>

#include "xt_gmm.h"

/* Reads and finishes the mixture; `name` (may be NULL) gets the file's "name" or "". On failure
 * *out is NULL and msg holds one line starting with the path. */
int xt_gmm_read_json(const char *path, xt_gmm **out, char *name, size_t name_cap, xt_msg *msg);

#endif /* XT_GMM_JSON_H */
