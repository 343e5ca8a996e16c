/* Instruments in JSON (.instr.json; docs/instruments.md) and centrelines as JSON arrays. Part of
 * xt_loaders (jansson), not of xt_models. */
#ifndef XT_INSTR_JSON_H
#define XT_INSTR_JSON_H

#include <jansson.h>

#include "xt_model.h"

/* An instrument file: its device (a "device" preset or "sections"), medium, max_points and points.
 * On failure *out is NULL and msg holds one line starting with the path. */
int xt_instr_read_json(const char *path, xt_model **out, xt_msg *msg);
/* [[x, y, z], ...] (mm) into pts (at most cap points); *n the count. One line naming `what` and the
 * point on failure: XT_EINVAL, or XT_ETOOLARGE past cap. */
int xt_instr_points_json(const json_t *a, double *pts, int cap, int *n, const char *what, xt_msg *msg);

#endif /* XT_INSTR_JSON_H */
