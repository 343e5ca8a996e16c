/* Motion on the server (issue 26, point 3; docs/server.md, "Motion"): the models' rigid transforms
 * given over the API (PUT /v1/models/{name}/transform: a table pan, a patient shift) and the
 * periodic motions (PUT /v1/motion: cardiac, respiratory; blur within the pulse), kept under st_mu.
 *
 * The pacer copies the whole setting into each exposure's job as it latches the pose (an update
 * given before an exposure shows in that exposure); the worker evaluates the phases at the
 * exposure's pulse on the device clock (virtual in CI) and hands each model's map to the
 * acquisition layer (xt_acq_request.xforms), which sets them on the projector before the render. */
#ifndef SRV_MOTION_H
#define SRV_MOTION_H

#include <jansson.h>

#include "srv_config.h"
#include "xt_motion.h"

#define XT_SRV_MAX_BLUR 16 /* renders averaged across a pulse, at most */
#define XT_SRV_MOTION_LISTED 0x80000000u

typedef struct xt_srv_motion {
  xt_motion mo;                       /* parameters; t0 when a motion was turned on */
  uint32_t cardiac_models, resp_models; /* bit i: s->models[i] beats / breathes; XT_SRV_MOTION_LISTED
                                         set: a list was given, else every model moves */
  uint32_t user_models;               /* bit i: user[i] was given */
  xt_rigid user[XT_SRV_MAX_MODELS];
  uint64_t xform_version;             /* transforms accepted */
  int blur_samples;                   /* 1: none */
} xt_srv_motion;

struct xt_server;
struct xt_worker;
struct xt_job;

void xt_srv_motion_init(xt_srv_motion *m);
/* PUT /v1/models/{name}/transform: {rotation_deg: [3], centre_mm: [3], translation_mm: [3]} (each
 * optional, 0 when left out); *version and *t_ns its publication. XT_ENOTFOUND for no such model. */
int xt_srv_motion_transform_put(struct xt_server *s, const char *name, const json_t *body, uint64_t *version,
                                uint64_t *t_ns, xt_msg *msg);
/* PUT /v1/motion: {cardiac: {on, bpm, amplitude, centre_mm, models}, respiratory: {on, period_s,
 * amplitude_mm, axis, models}, blur_samples}, any subset; a motion turned on restarts the phases
 * (t0 = now). Checked whole before anything changes. */
int xt_srv_motion_put(struct xt_server *s, const json_t *body, xt_msg *msg);
/* GET /v1/motion: the setting, the transforms and the phases now. */
json_t *xt_srv_motion_json(struct xt_server *s);
/* The worker: the job's motion into its request (xforms into the worker's own array, for the
 * models on its projector; the record's times and phases); chain frames take the pulse's centre. */
void xt_srv_motion_apply(struct xt_server *s, struct xt_worker *w, struct xt_job *j);

#endif /* SRV_MOTION_H */
