/* The session log's frame lines (issue 24, point 7): an exposure's request as JSON and back, so
 * that `xtwin replay` renders exactly what the server rendered. The request is the one the plane
 * latched (its setting before the dose-rate loop moved it: the replay runs the loop again, in the
 * same order), with every chain parameter by name (the two 64-bit seeds as decimal strings, which
 * a JSON number would round), the times known before the frame and the run and frame numbers.
 * docs/session-log.md lists the lines. */
#ifndef XT_SESSION_H
#define XT_SESSION_H

#include <jansson.h>

#include "xt_acq.h"

#define XT_SESSION_LOG_VERSION 1

/* {"type": "frame", "run", "counter", "lockstep", "pose", "mode", "pixel_format", "chain",
 * "params", "pose_seq", "t_pose_ns", "t_sched_ns", "t_exposure_ns", "period_ns"}; NULL when out
 * of memory or a value is not finite. */
json_t *xt_session_frame_json(const xt_acq_request *q, int lockstep);
/* The request of a frame line: pose, mode (by name), chain, parameters, numbers and times (want,
 * flags and the hooks are the caller's); msg names the field that is wrong. */
int xt_session_frame_parse(const json_t *o, xt_acq_request *q, int *lockstep, xt_msg *msg);
/* A frame line's "motion" (issue 26), if any, into q: the record's motion fields, and each model's
 * transforms for every sample into out (cap entries; models by name among models[0..nmodels)),
 * q->xforms pointing there. Without "motion" q's motion is cleared (the models as added). */
int xt_session_frame_motion(const json_t *o, const xt_model *const *models, int nmodels, xt_acq_xform *out, int cap,
                            xt_acq_request *q, xt_msg *msg);

#endif /* XT_SESSION_H */
