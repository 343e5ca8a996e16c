/* Backend dispatch: picks the function table for a backend and forwards every call to it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_proj.h"
#include "xt_proj_internal.h"

struct xt_proj {
  const xt_proj_ops *ops;
  xt_backend backend;
  void *impl;
  int cols, rows; /* detector size of the last batch check */
};

const char *xt_backend_name(xt_backend b) {
  switch (b) {
  case XT_BACKEND_CPU: return "cpu";
  case XT_BACKEND_CUDA: return "cuda";
  }
  return "unknown";
}

int xt_backend_parse(const char *s, xt_backend *out) {
  if (s && strcmp(s, "cpu") == 0) *out = XT_BACKEND_CPU;
  else if (s && strcmp(s, "cuda") == 0) *out = XT_BACKEND_CUDA;
  else return XT_EINVAL;
  return 0;
}

static const xt_proj_ops *ops_for(xt_backend b) {
  switch (b) {
  case XT_BACKEND_CPU: return &xt_proj_cpu_ops;
  case XT_BACKEND_CUDA:
#ifdef XT_HAVE_CUDA
    return &xt_proj_cuda_ops;
#else
    return NULL;
#endif
  }
  return NULL;
}

int xt_proj_available(xt_backend b, xt_msg *msg) {
  const xt_proj_ops *ops = ops_for(b);
  if (!ops) {
    if (b == XT_BACKEND_CUDA)
      return xt_fail(msg, XT_ENODEV, "backend cuda: this build has no CUDA support (nvcc was not found at configure time)");
    return xt_fail(msg, XT_EINVAL, "backend %d: unknown", (int)b);
  }
  return ops->available(msg);
}

int xt_proj_create(const xt_proj_options *opt, xt_proj **out, xt_msg *msg) {
  int rc = xt_proj_available(opt->backend, msg);
  if (rc) return rc;
  xt_proj *p = calloc(1, sizeof *p);
  if (!p) return xt_fail(msg, XT_ENOMEM, "projector: out of memory");
  p->ops = ops_for(opt->backend);
  p->backend = opt->backend;
  rc = p->ops->create(opt, &p->impl, msg);
  if (rc) {
    free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int xt_proj_add_model(xt_proj *p, const xt_model *m, xt_msg *msg) {
  if (!m) return xt_fail(msg, XT_EINVAL, "projector: NULL model");
  return p->ops->add_model(p->impl, m, msg);
}

int xt_proj_render(xt_proj *p, const xt_geometry *g, float *lineint, xt_msg *msg) {
  return p->ops->render(p->impl, g, lineint, msg);
}

int xt_proj_set_shape(xt_proj *p, const xt_model *m, const double *pts, int n, xt_msg *msg) {
  if (!p->ops->set_shape) return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no instruments", p->ops->name);
  return p->ops->set_shape(p->impl, m, pts, n, msg);
}

int xt_proj_set_iodine(xt_proj *p, const xt_model *m, const double *rho, xt_msg *msg) {
  if (!p->ops->set_iodine) return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no contrast agent", p->ops->name);
  xt_chanset cs;
  xt_iodine_tab io;
  int rc = p->ops->channels(p->impl, &cs, msg);
  if (!rc) rc = xt_iodine_tab_build(&cs, m, rho, &io, msg);
  return rc ? rc : p->ops->set_iodine(p->impl, m, &io, msg);
}

int xt_proj_set_transform(xt_proj *p, const xt_model *m, const xt_affine *T, xt_msg *msg) {
  if (!m || !T) return xt_fail(msg, XT_EINVAL, "projector: set transform: NULL model or transform");
  xt_affine inv;
  for (int r = 0; r < 3; r++) {
    if (!isfinite(T->t[r])) return xt_fail(msg, XT_EINVAL, "model %s: transform: non-finite translation", m->name);
    for (int c = 0; c < 3; c++)
      if (!isfinite(T->m[r][c])) return xt_fail(msg, XT_EINVAL, "model %s: transform: non-finite matrix", m->name);
  }
  if (!xt_aff_invert(T, &inv)) return xt_fail(msg, XT_EINVAL, "model %s: transform: singular matrix", m->name);
  if (!p->ops->set_transform)
    return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no model transforms", p->ops->name);
  return p->ops->set_transform(p->impl, m, T, msg);
}

int xt_proj_render_batch(xt_proj *p, const xt_geometry *g, int n, float *out, xt_msg *msg) {
  if (n <= 0) return xt_fail(msg, XT_EINVAL, "render batch: %d frames", n);
  for (int i = 1; i < n; i++)
    if (g[i].mode.cols != g[0].mode.cols || g[i].mode.rows != g[0].mode.rows)
      return xt_fail(msg, XT_EINVAL, "render batch: frame %d has a different detector size", i);
  return p->ops->render_batch(p->impl, g, n, out, msg);
}

xt_backend xt_proj_backend(const xt_proj *p) { return p->backend; }

int xt_proj_channels(xt_proj *p, xt_chanset *cs, xt_msg *msg) {
  if (!p->ops->channels)
    return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no material channels", p->ops->name);
  return p->ops->channels(p->impl, cs, msg);
}

int xt_proj_render_channels(xt_proj *p, const xt_geometry *g, float *out, xt_msg *msg) {
  if (!p->ops->render_channels)
    return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no material channels", p->ops->name);
  return p->ops->render_channels(p->impl, g, out, msg);
}

int xt_proj_render_channels_fast(xt_proj *p, const xt_geometry *g, float *out, xt_msg *msg) {
  if (p->backend != XT_BACKEND_CPU) return xt_proj_render_channels(p, g, out, msg);
  return xt_proj_cpu_render_channels_fast(p->impl, g, out, msg);
}

int xt_proj_render_device(xt_proj *p, const xt_geometry *g, int channels, float *d_out, void *stream, xt_msg *msg) {
  if (!p->ops->render_device)
    return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: renders to host memory only", p->ops->name);
  return p->ops->render_device(p->impl, g, channels, d_out, stream, msg);
}

int xt_proj_render_batch_device(xt_proj *p, const xt_geometry *g, int n, float *d_out, xt_msg *msg) {
  if (!p->ops->render_batch_device)
    return xt_fail(msg, XT_EUNSUPPORTED, "projector %s: no device batches", p->ops->name);
  if (n < 1) return 0;
  return p->ops->render_batch_device(p->impl, g, n, d_out, msg);
}

int xt_proj_render_device_spectral(xt_proj *p, const xt_geometry *g, const xt_chan_spectral *sp, float *d_out,
                                   void *stream, xt_msg *msg) {
  if (!p->ops->render_spectral)
    return xt_fail(msg, XT_EUNSUPPORTED, "backend %s: no device spectral sums", p->ops->name);
  if (!sp || sp->nbins < 1 || sp->nbins > XT_SPECTRAL_MAX_BINS)
    return xt_fail(msg, XT_EINVAL, "spectral sums: %d bins (1..%d)", sp ? sp->nbins : 0, XT_SPECTRAL_MAX_BINS);
  return p->ops->render_spectral(p->impl, g, sp, d_out, stream, msg);
}

int xt_host_alloc(xt_backend b, size_t bytes, void **out, xt_msg *msg) {
  const xt_proj_ops *ops = ops_for(b);
  *out = NULL;
  if (ops && ops->host_alloc) return ops->host_alloc(bytes ? bytes : 1, out, msg);
  *out = aligned_alloc(64, (bytes + 63) / 64 * 64 + (bytes ? 0 : 64));
  return *out ? 0 : xt_fail(msg, XT_ENOMEM, "host memory: %zu bytes: out of memory", bytes);
}

void xt_host_free(xt_backend b, void *p) {
  const xt_proj_ops *ops = ops_for(b);
  if (!p) return;
  if (ops && ops->host_free) ops->host_free(p);
  else free(p);
}

void xt_proj_destroy(xt_proj *p) {
  if (!p) return;
  p->ops->destroy(p->impl);
  free(p);
}

void xt_intensity_u16(const float *lineint, size_t n, uint16_t *out) {
  for (size_t i = 0; i < n; i++) {
    double L = lineint[i];
    double v = (L > 0 ? exp(-L) : 1.0) * 65535.0 + 0.5;
    out[i] = (uint16_t)(v > 65535.0 ? 65535.0 : v);
  }
}
