/* Instruments on the server (issue 26; docs/instruments.md, "Over the API"): the shapes clients
 * give, numbered, kept in a ring per instrument, latched by the pacer with each exposure as poses
 * are, and handed to the worker that renders it.
 *
 * An update (PUT /v1/instruments/{name}/shape, or the stream's "shape" message) is checked and
 * written into the next slot of its instrument's ring under shape_mu, then published under st_mu
 * with its version and the device clock's time: an exposure whose t_exposure_ns is later shows it
 * (or a later one), never an older. The pacer copies the latest versions into the job; the worker
 * copies a version's points out of the ring into its own buffer only when it changes, and the
 * acquisition layer sets them on the projector (xt_acq_request.shapes). A version overwritten
 * before its worker read it (more than XT_SRV_SHAPE_RING updates while one frame waited) is
 * replaced by the newest, and counted (metric xtwin_shape_overruns_total). */
#ifndef SRV_INSTR_H
#define SRV_INSTR_H

#include <jansson.h>

#include "srv_engine.h"
#include "xt_instr.h"

#define XT_SRV_SHAPE_RING 16

typedef struct xt_srv_shape_slot {
  uint64_t version; /* 0: empty */
  int n;
  double *pts; /* max points x 3 */
} xt_srv_shape_slot;

typedef struct xt_srv_instr {
  const xt_model *m;
  int cap;
  uint64_t next;                  /* the version the next update gets (shape_mu) */
  uint64_t latest, t_latest_ns;   /* published (st_mu) */
  uint64_t updates;               /* accepted (st_mu) */
  xt_srv_shape_slot ring[XT_SRV_SHAPE_RING]; /* shape_mu */
  xt_instr_geom check;            /* a shape's layout, to check it before it is kept (shape_mu) */
} xt_srv_instr;

/* Registers every instrument among s->models not yet registered (at start, and after POST
 * /v1/models); buffers of each one's capacity are made here, once. */
int xt_srv_instr_register(xt_server *s, xt_msg *msg);
void xt_srv_instr_free(xt_server *s);
/* A new shape for instrument `name` from {"points": [[x, y, z], ...]}: *version and *t_ns (device
 * clock) of its publication. XT_ENOTFOUND for an unknown name; the shape's checks otherwise. */
int xt_srv_instr_update(xt_server *s, const char *name, const json_t *body, uint64_t *version, uint64_t *t_ns,
                        xt_msg *msg);
/* GET /v1/instruments: name, version, when, points, capacity, updates. */
json_t *xt_srv_instr_json(xt_server *s);
/* Caller holds st_mu: the instruments' latest versions into the job. */
void xt_srv_instr_latch_locked(xt_server *s, xt_job *j);
/* The worker: its copies of the job's versions, as the acquisition layer's shapes (out has room for
 * XT_SRV_MAX_INSTR); *n their count. */
void xt_srv_instr_shapes(xt_server *s, xt_worker *w, const xt_job *j, xt_acq_shape *out, int *n);

#endif /* SRV_INSTR_H */
