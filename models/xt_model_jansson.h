/* A model's description (xt_model_describe, xt_model_kind.h) into a jansson object: the
 * xt_json_out writers for the callers that build their JSON with jansson (the server's
 * GET /v1/models, the CLI sidecar). Header only, so the model layer itself links no JSON library;
 * include it only where jansson is. */
#ifndef XT_MODEL_JANSSON_H
#define XT_MODEL_JANSSON_H

#include <jansson.h>

#include "xt_model_kind.h"

/* Containers open at once: the object described and the kinds' nesting below it. */
#define XT_MODEL_JANSSON_DEPTH 8

typedef struct xt_model_jansson {
  json_t *open[XT_MODEL_JANSSON_DEPTH]; /* borrowed: each is owned by the one below it */
  int depth;
  int bad; /* a value could not be made or added (a non-finite real, no memory, too deep) */
} xt_model_jansson;

/* Adds v (a new reference, taken over even on failure, as json_object_set_new does) to the
 * innermost open container; past the depth there is none, and v is dropped. */
static inline void xt__mj_add(xt_model_jansson *j, const char *key, json_t *v) {
  json_t *top = j->depth >= 1 && j->depth <= XT_MODEL_JANSSON_DEPTH ? j->open[j->depth - 1] : NULL;
  if ((key ? json_object_set_new(top, key, v) : json_array_append_new(top, v)) != 0) j->bad = 1;
}

static inline void xt__mj_real(void *ctx, const char *key, double v) { xt__mj_add(ctx, key, json_real(v)); }
static inline void xt__mj_integer(void *ctx, const char *key, int64_t v) {
  xt__mj_add(ctx, key, json_integer((json_int_t)v));
}
static inline void xt__mj_string(void *ctx, const char *key, const char *s) {
  xt__mj_add(ctx, key, json_string(s ? s : ""));
}
static inline void xt__mj_boolean(void *ctx, const char *key, int v) { xt__mj_add(ctx, key, json_boolean(v)); }

static inline void xt__mj_begin(void *ctx, const char *key, int array) {
  xt_model_jansson *j = ctx;
  json_t *c = array ? json_array() : json_object();
  /* kept open with a reference of its own, taken before the parent takes (or drops) c */
  if (j->depth < XT_MODEL_JANSSON_DEPTH) j->open[j->depth] = json_incref(c);
  else j->bad = 1;
  xt__mj_add(j, key, c);
  j->depth++;
}

static inline void xt__mj_end(void *ctx) {
  xt_model_jansson *j = ctx;
  if (j->depth <= 1) { /* the described object is the caller's: never closed here */
    j->bad = 1;
    return;
  }
  j->depth--;
  if (j->depth < XT_MODEL_JANSSON_DEPTH) json_decref(j->open[j->depth]);
}

/* Adds the keys of `view` of m to obj. Returns 0, or -1 when a value could not be added (the
 * sidecar fails the file, the server leaves the key out). */
static inline int xt_model_describe_json(const xt_model *m, xt_model_view view, json_t *obj) {
  xt_model_jansson j = {{obj}, 1, 0};
  const xt_json_out out = {&j, xt__mj_real, xt__mj_integer, xt__mj_string, xt__mj_boolean, xt__mj_begin, xt__mj_end};
  xt_model_describe(m, view, &out);
  while (j.depth > 1) xt__mj_end(&j); /* a kind that left a container open */
  return j.bad ? -1 : 0;
}

#endif /* XT_MODEL_JANSSON_H */
