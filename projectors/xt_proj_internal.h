/* The backends' function tables, visible to xt_proj.c only. A backend that is not built has
 * no table; xt_proj.c then reports it unavailable. */
#ifndef XT_PROJ_INTERNAL_H
#define XT_PROJ_INTERNAL_H

#include "xt_proj.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const xt_proj_ops xt_proj_cpu_ops;
/* The CPU backend's fast channels (xt_proj_render_channels_fast), outside the ops table: the only
 * backend with a second path, and the CUDA table (a positional initialiser in cuda_pipeline.cu)
 * keeps its shape. */
int xt_proj_cpu_render_channels_fast(void *impl, const xt_geometry *g, float *out, xt_msg *msg);
#ifdef XT_HAVE_CUDA
extern const xt_proj_ops xt_proj_cuda_ops;
#endif

#ifdef __cplusplus
}
#endif

#endif /* XT_PROJ_INTERNAL_H */
