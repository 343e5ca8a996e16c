/* The contrast agent on the server (issue 26, docs/contrast.md): regions, injections over REST, and
 * each exposure's iodine latched with it as poses and shapes are.
 *
 * Regions are the labels of the loaded label volumes flagged in their tables (the thorax's five
 * blood labels: heart, aorta, pulmonary, veins, coronary), each with its bolus model (acq/
 * xt_contrast.h). An injection (POST /v1/contrast/inject) is checked against the operator's limits
 * and stamped with the device clock under st_mu, so an exposure whose t_exposure_ns is later
 * renders with it: the pacer evaluates every region's concentration at the exposure's time
 * (xt_srv_contrast_latch_locked) into the job, and the worker hands it to the acquisition layer
 * (xt_acq_request.iodine). The state's number (seq) moves with every injection, stop and reset and
 * goes out in each frame's header with the largest concentration. */
#ifndef SRV_CONTRAST_H
#define SRV_CONTRAST_H

#include <jansson.h>

#include "srv_engine.h"
#include "xt_contrast.h"

#define XT_SRV_MAX_INJECTIONS 32

typedef struct xt_srv_region {
  char name[48];
  const xt_model *m;
  int label;
  xt_bolus b;
} xt_srv_region;

typedef struct xt_srv_contrast {
  int nregions;
  xt_srv_region region[XT_SRV_MAX_REGIONS];
  int ninj;
  xt_injection inj[XT_SRV_MAX_INJECTIONS];
  uint64_t inj_id[XT_SRV_MAX_INJECTIONS];
  int64_t inj_accepted_ns[XT_SRV_MAX_INJECTIONS];
  uint64_t next_id;
  uint32_t seq;
} xt_srv_contrast;

/* Registers the regions of every label volume among s->models not yet registered (at start, and
 * after POST /v1/models). */
int xt_srv_contrast_register(xt_server *s, xt_msg *msg);
/* POST /v1/contrast/inject: {"region", two or three of "rate_ml_s", "volume_ml", "duration_s",
 * "delay_s"?, "agent_mg_ml"?} -> the injection as accepted. XT_ENOTFOUND for an unknown region,
 * XT_ERANGE over the operator's limits, XT_EINVAL for a bad body, XT_EBUSY when
 * XT_SRV_MAX_INJECTIONS still act. */
int xt_srv_contrast_inject(xt_server *s, const json_t *body, json_t **out, xt_msg *msg);
/* DELETE /v1/contrast: every running injection stops now (reset 0: what was injected washes out),
 * or (reset 1) every injection is forgotten and the regions are clear from the next exposure. */
json_t *xt_srv_contrast_stop(xt_server *s, int reset);
/* GET /v1/contrast: regions with their bolus model and concentration at t_ns (device clock; < 0:
 * now), injections, limits, seq. */
json_t *xt_srv_contrast_json(xt_server *s, int64_t t_ns);
/* Caller holds st_mu: every region's iodine at the exposure's time into the job. */
void xt_srv_contrast_latch_locked(xt_server *s, xt_job *j, uint64_t t_exposure_ns);

#endif /* SRV_CONTRAST_H */
