/* Work budgets (budget.c): what one model, frame or REST render may cost, checked before the
 * work (docs/server.md, "Work budgets"). */
#ifndef XT_SRV_BUDGET_H
#define XT_SRV_BUDGET_H

#include <stddef.h>

#include "srv_engine.h"
#include "xt_err.h"
#include "xt_geom.h"
#include "xt_model.h"

typedef struct xt_server xt_server; /* xt_server.h */

/* A Gaussian mixture about to be added, measured with the mixtures already loaded over a set of
 * poses at the current mode: XT_ETOOLARGE naming the budget and the figure when over it (the
 * model is then freed and *m set to NULL). Other kinds pass. */
int xt_budget_admit(xt_server *s, xt_model **m, xt_msg *msg);
/* A frame's geometry against the budgets, for the mixtures on worker w (XT_ETOOLARGE when over). */
int xt_budget_frame(xt_worker *w, const xt_geometry *g, xt_msg *msg);
/* A model is on w's projector now. */
void xt_budget_worker_model(xt_worker *w, const xt_model *m);
/* POST /v1/render of this mode against render_pixel_budget. */
int xt_budget_render(const xt_server *s, const xt_detector_mode *mode, xt_msg *msg);
/* Ints of the per-frame tile grid for the largest detector mode. */
size_t xt_budget_grid_cells(void);
/* The "auto" (0) budgets replaced by the backend's defaults (before REST starts). */
void xt_budget_resolve(xt_server *s);

#endif /* XT_SRV_BUDGET_H */
