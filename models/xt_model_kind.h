/* Model kinds behind one table (issue 23): everything the kind-independent code asks of a model's
 * payload - xt_model.c (free, bounds), the material channels (projectors/xt_channels.c), the
 * server's GET /v1/models and the CLI sidecar (describe, device bytes) - goes through the kind's
 * xt_model_kind_ops, so none of them branches on the kind.
 *
 * A kind *is* its table: xt_model.kind points at it, and XT_MODEL_DENSE, XT_MODEL_GMM, ... (each
 * defined in its kind's header) name the tables, so `m->kind == XT_MODEL_GMM` still reads as it
 * did while a `switch` on the kind no longer compiles. A new kind brings its own files (payload,
 * ops table, a reader in xt_model_load.c's suffix table, projector kind files) and one line in
 * XT_MODEL_KINDS below; docs/models.md, "Adding a model kind".
 *
 * The model layer has no JSON library (the GPU tests run on a machine that carries only libxrl),
 * so a kind describes itself through xt_json_out, writers the caller supplies; xt_model_jansson.h
 * supplies them for jansson. */
#ifndef XT_MODEL_KIND_H
#define XT_MODEL_KIND_H

#include <stdint.h>

#include "xt_model.h"

/* One JSON value at a time into the caller's document. key names the member inside an object and
 * is NULL inside an array; begin opens an object (array 0) or an array under key, end closes the
 * innermost one. Failures (a non-finite real, no memory) are the caller's to record. */
typedef struct xt_json_out {
  void *ctx;
  void (*real)(void *ctx, const char *key, double v);
  void (*integer)(void *ctx, const char *key, int64_t v);
  void (*string)(void *ctx, const char *key, const char *s);
  void (*boolean)(void *ctx, const char *key, int v);
  void (*begin)(void *ctx, const char *key, int array);
  void (*end)(void *ctx);
} xt_json_out;

/* Which description of a model is asked for. Each view is a set of keys the caller places among
 * its own (name, kind, source, placement...); the two sidecar views are split around the sidecar's
 * "placement" so that its key order, frozen by tests/golden/, stays as it was. */
typedef enum xt_model_view {
  XT_MODEL_VIEW_REPORT = 1,    /* GET /v1/models: sizes, voxels, active share (device bytes: their own op) */
  XT_MODEL_VIEW_SIDECAR,       /* the CLI sidecar's "model", before "place": the payload's shape and map */
  XT_MODEL_VIEW_SIDECAR_TABLE, /* the same object after "placement_note": the material table */
  XT_MODEL_VIEW_BRIEF          /* an entry of the sidecar's "added_models": one size figure, if any */
} xt_model_view;

/* What a model's values are to the material channels (projectors/xt_channels.h): how its
 * attenuation splits into basis materials. A kind states one of these; the channel code maps it
 * and never asks for the kind. */
typedef enum xt_matter_kind {
  XT_MATTER_MU_CLASSES = 1, /* mu (1/mm) at energy_kev, classed by HU into air, soft tissue and bone */
  XT_MATTER_LABELS,         /* material ids 0..table->count-1 into `table` */
  XT_MATTER_USED_LABELS,    /* ids into the default table (xt_materials_default at energy_kev), those in used[] */
  XT_MATTER_SOFT            /* one material, soft tissue: optical depth at energy_kev */
} xt_matter_kind;

typedef struct xt_model_matter {
  xt_matter_kind kind;
  double energy_kev;              /* the energy the values (or the default table) are taken at */
  const xt_material_table *table; /* XT_MATTER_LABELS: the model's own table (NULL: it has none) */
  uint64_t used[4];               /* XT_MATTER_USED_LABELS: label l is used when bit l % 64 of used[l / 64] */
  const unsigned char *contrast;  /* XT_MATTER_USED_LABELS: 256 flags of contrast regions, or NULL */
} xt_model_matter;

typedef struct xt_model_kind_ops {
  const char *name; /* "dense", "gmm": the "kind" of every report, sidecar and error message */
  /* Frees the payload; NULL does nothing. */
  void (*free)(void *payload);
  /* The axis-aligned bounds, in model mm, of everything the model can attenuate; nonzero when the
   * payload is not complete (xt_model_bounds says so). */
  int (*bounds)(const xt_model *m, xt_vec3 *lo, xt_vec3 *hi);
  /* Writes the kind's keys of `view` of m; a kind with nothing to say in a view writes nothing. */
  void (*describe)(const xt_model *m, xt_model_view view, const xt_json_out *out);
  /* How the material channels read the model; NULL: the kind has no material channels. msg
   * names the model when the payload cannot say. */
  int (*matter)(const xt_model *m, xt_model_matter *out, xt_msg *msg);
  /* Bytes the model takes on the GPU once a projector has uploaded it; NULL: the kind does not say. */
  uint64_t (*device_bytes)(const xt_model *m);
} xt_model_kind_ops;

/* The registry: one line per kind, X(suffix) for the table xt_model_kind_<suffix>, defined in the
 * kind's own file. Order is the order of xt_model_kind_at (and of docs listing the kinds). */
#define XT_MODEL_KINDS(X)                                                                           \
  X(dense)  /* xt_volume.c: float32 mu voxels */                                                   \
  X(labels) /* xt_volume.c: uint8 label voxels + material table */                                 \
  X(gmm)    /* xt_gmm.c: Gaussian mixtures */                                                      \
  X(nvdb)   /* xt_nvdb.c: NanoVDB sparse grids */                                                 \
  X(instr)  /* xt_instr.c: thin devices, mitred tube segments along a centreline */

#define XT_MODEL_KIND_DECLARE(k) extern const xt_model_kind_ops xt_model_kind_##k;
XT_MODEL_KINDS(XT_MODEL_KIND_DECLARE)
#undef XT_MODEL_KIND_DECLARE

/* The registered kinds, in registry order; NULL past the end. */
int xt_model_kind_count(void);
const xt_model_kind_ops *xt_model_kind_at(int i);
/* The kind called `name`, or NULL. */
const xt_model_kind_ops *xt_model_kind_find(const char *name);

/* Wraps payload (taken over on success only) in a model of that kind with identity placement,
 * named name. For the kinds' own constructors (xt_model_from_volume, xt_model_from_gmm, ...). */
int xt_model_create(const xt_model_kind_ops *kind, void *payload, const char *name, xt_model **out, xt_msg *msg);

/* The kind's view of m into out; nothing for a model without a kind. */
void xt_model_describe(const xt_model *m, xt_model_view view, const xt_json_out *out);
/* How the channels read m: XT_EUNSUPPORTED (msg naming model and kind) for a kind without
 * material channels, else the kind's answer. */
int xt_model_matter_of(const xt_model *m, xt_model_matter *out, xt_msg *msg);
/* The model's device bytes into *bytes: 0, or XT_EUNSUPPORTED when its kind does not say. */
int xt_model_device_bytes(const xt_model *m, uint64_t *bytes);

#endif /* XT_MODEL_KIND_H */
