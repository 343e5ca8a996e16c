/* Reference air kerma (xt_refak.h): the IFU's PMMA set-up and the measurement of one protocol in one
 * field through the acquisition layer. The chain runs noise-free and without the panel's defects and
 * lag: the measurement is the expected value a physicist averages towards, a dead column crossing a
 * coarse grid's measuring field would bias it by a whole column's share, and lag would make a frame
 * depend on the settling frames before it. The raw frame's gain is set so that the target dose reads
 * about 2000 codes above the offset whatever the protocol: the loop's meter is calibrated through the
 * same gain, so the dose it reads does not depend on it, and neither the 14-bit ceiling nor the
 * codes' rounding (0.5 / 2000) can bias it. */
#include "xt_refak.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_exposure.h"
#include "xt_phantom.h"

#define DEFAULT_GRID_COLS 48
#define DEFAULT_MAX_FRAMES 60
#define TARGET_CODES 2000.0     /* codes above the offset the target dose reads, roughly */
#define FLAT_KEV_MM2_UGY 1.0e6  /* the panel's absorbed keV per mm^2 per uGy, roughly (60-80 kV) */

struct xt_refak {
  xt_refak_options o;
  xt_model *phantom;
  xt_proj *proj;
  xt_acq_renderer rnd;
  xt_acq_plane plane;
  uint16_t *raw, *proc;
  size_t cap;
};

xt_pose xt_refak_pose(void) {
  xt_pose p = xt_pose_default(NULL);
  p.primary_deg = 90.0; /* LAO 90: the horizontal beam of IFU-p312 */
  p.secondary_deg = 0.0;
  p.sod_mm = XT_REFAK_SOD_MM;
  p.sid_mm = XT_REFAK_SID_MM;
  p.table_mm = xt_v3(0, 0, 0);
  return p;
}

int xt_refak_phantom(xt_model **out, xt_msg *msg) {
  *out = NULL;
  const double size[3] = {XT_REFAK_PMMA_U_MM, XT_REFAK_PMMA_V_MM, XT_REFAK_PMMA_MM};
  const xt_pose pose = xt_refak_pose();
  const xt_detector_mode probe = xt_mode_custom("refak", 8, 8, 1, 1, pose.sod_mm, pose.sid_mm);
  xt_geometry g;
  int rc = xt_geom_compute(&pose, &probe, &g, msg);
  if (rc) return rc;
  xt_model *m = NULL;
  if ((rc = xt_phantom_slab_model("pmma", XT_REFAK_PMMA_DENSITY, size, 10.0, &m, msg))) return rc;
  /* model x, y, z -> the detector's u, v and the beam d; its centre on the central ray, half its
   * thickness behind the entrance face (the table is at 0: patient = world) */
  const double c = XT_REFAK_ENTRANCE_MM + 0.5 * XT_REFAK_PMMA_MM;
  const xt_vec3 axis[3] = {g.u, g.v, g.d};
  for (int a = 0; a < 3; a++) {
    m->placement.m[0][a] = axis[a].x;
    m->placement.m[1][a] = axis[a].y;
    m->placement.m[2][a] = axis[a].z;
  }
  m->placement.t[0] = g.source.x + c * g.d.x;
  m->placement.t[1] = g.source.y + c * g.d.y;
  m->placement.t[2] = g.source.z + c * g.d.z;
  *out = m;
  return 0;
}

xt_detector_mode xt_refak_grid_mode(const xt_detector_mode *f, int grid_cols) {
  /* the field's region at the detector; a mode made by hand is its whole grid */
  const double w = f->roi_cols ? f->roi_cols * f->det_pitch_mm : f->cols * f->pitch_u_mm;
  const double h = f->roi_rows ? f->roi_rows * f->det_pitch_mm : f->rows * f->pitch_v_mm;
  int rows = (int)floor(grid_cols * h / w + 0.5);
  if (rows < 1) rows = 1;
  xt_detector_mode m = xt_mode_custom(f->name, grid_cols, rows, w / grid_cols, h / rows, f->sod_mm, f->sid_mm);
  m.description = f->description;
  m.field_cm = f->field_cm;
  m.dose_ratio = f->dose_ratio;
  return m;
}

int xt_refak_open(const xt_refak_options *o, xt_refak **out, xt_msg *msg) {
  *out = NULL;
  xt_refak *r = calloc(1, sizeof *r);
  if (!r) return xt_fail(msg, XT_ENOMEM, "refak: out of memory");
  r->o = *o;
  if (r->o.grid_cols <= 0) r->o.grid_cols = DEFAULT_GRID_COLS;
  if (r->o.max_frames <= 0) r->o.max_frames = DEFAULT_MAX_FRAMES;
  xt_acq_plane_init(&r->plane);
  xt_acq_renderer_init(&r->rnd, NULL, o->threads);
  xt_proj_options po = {o->backend, o->threads, 0};
  int rc;
  if ((rc = xt_refak_phantom(&r->phantom, msg)) || (rc = xt_proj_create(&po, &r->proj, msg))) goto fail;
  xt_acq_renderer_init(&r->rnd, r->proj, o->threads);
  if ((rc = xt_acq_renderer_add_model(&r->rnd, r->phantom, msg))) goto fail;
  *out = r;
  return 0;
fail:
  xt_refak_close(r);
  return rc;
}

void xt_refak_close(xt_refak *r) {
  if (!r) return;
  xt_acq_renderer_free(&r->rnd);
  xt_acq_plane_destroy(&r->plane);
  xt_proj_destroy(r->proj);
  xt_model_free(r->phantom);
  free(r->raw);
  free(r->proc);
  free(r);
}

static int buffers(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  xt_refak *r = ctx;
  const size_t n = (size_t)f->raw.rows * (size_t)f->raw.cols;
  if (n > r->cap) {
    free(r->raw);
    free(r->proc);
    r->raw = malloc(n * sizeof *r->raw);
    r->proc = malloc(n * sizeof *r->proc);
    r->cap = r->raw && r->proc ? n : 0;
    if (!r->cap) return xt_fail(msg, XT_ENOMEM, "refak: out of memory");
  }
  f->raw.data = r->raw;
  f->proc.data = r->proc;
  return 0;
}

/* The chain's settings for the measurement: the protocol's, with the panel made ideal (above). */
static int measure_params(const xt_refak *r, int protocol, const xt_detector_mode *grid, xt_chain_params *p,
                          xt_msg *msg) {
  *p = xt_chain_params_default();
  int rc = xt_protocol_apply(p, protocol, msg);
  if (rc) return rc;
  p->quantum_noise = 0;
  p->e_noise_adu = 0;
  p->offset_fpn_adu = 0;
  p->gain_fpn = 0;
  p->defect_fraction = 0;
  p->defect_lines = 0;
  p->lag = 0;
  p->binning = 1;
  p->scatter = r->o.scatter;
  const double ratio = grid->dose_ratio > 0 ? grid->dose_ratio : 1.0;
  const double target_ugy = p->drc_target_ngy * ratio * 1e-3;
  p->adu_per_kev = TARGET_CODES / (target_ugy * FLAT_KEV_MM2_UGY * grid->pitch_u_mm * grid->pitch_v_mm * p->grid_tp);
  return xt_chain_params_validate(p, msg);
}

int xt_refak_measure(xt_refak *r, int protocol, const xt_detector_mode *mode, xt_refak_result *res, xt_msg *msg) {
  memset(res, 0, sizeof *res);
  const xt_protocol *pr = xt_protocol_at(protocol);
  if (!pr || protocol == XT_PROTOCOL_CUSTOM) return xt_fail(msg, XT_EINVAL, "refak: protocol %d has no settings", protocol);
  const xt_detector_mode grid = xt_refak_grid_mode(mode, r->o.grid_cols);
  xt_chain_params p;
  int rc = measure_params(r, protocol, &grid, &p, msg);
  if (rc) return rc;
  xt_acq_plane_new_run(&r->plane); /* the loop starts again from the protocol's exposure */
  r->plane.set.chain = 1;
  r->plane.set.chain_prm = p;
  r->plane.set.pose = xt_refak_pose();
  r->plane.set.mode = &grid;
  r->plane.next_counter = 0;
  res->protocol = pr->name;
  res->mode = mode->name;
  res->field_cm = mode->field_cm;
  res->dose_ratio = mode->dose_ratio > 0 ? mode->dose_ratio : 1.0;
  res->fps = pr->fps;
  double best = INFINITY;
  int clamped = 0;
  for (int i = 0; i < r->o.max_frames; i++) {
    xt_acq_request q;
    xt_acq_frame f;
    xt_acq_plane_latch(&r->plane, &q);
    q.want = XT_ACQ_WANT_CHAIN;
    q.flags = XT_ACQ_DOSE_STRICT;
    q.model = r->phantom;
    q.buffers = buffers;
    q.ctx = r;
    if ((rc = xt_acq_expose(&r->plane, &r->rnd, &q, &f, msg))) break;
    xt_acq_plane_advance(&r->plane);
    const double err = f.measured_ngy > 0 ? fabs(log(f.measured_ngy / f.prm.drc_target_ngy)) : INFINITY;
    if (err < best) { /* the frame closest to the target is the measurement */
      best = err;
      res->kv = f.prm.kv;
      res->pulse_ms = f.prm.pulse_ms;
      res->mas = f.prm.mas;
      res->ma = f.prm.mas * 1000.0 / f.prm.pulse_ms;
      res->target_ngy = f.prm.drc_target_ngy;
      res->detector_ngy = f.measured_ngy;
      res->kerma_ugy_per_mas = f.info.kerma_ugy_per_mas;
      res->d_irp_mm = f.dose.d_irp_mm;
      res->k_irp_mgy = f.dose.k_irp_mgy;
      res->drc_flags = f.drc.flags;
    }
    res->frames = i + 1;
    /* three frames at a curve's end asking for more: the target is out of reach, the loop holds */
    clamped = f.drc.flags & (XT_DRC_CLAMP_HIGH | XT_DRC_CLAMP_LOW) ? clamped + 1 : 0;
    if (best < XT_REFAK_CLOSE || clamped >= 3) break;
  }
  r->plane.set.mode = NULL; /* grid is this call's */
  if (rc) return rc;
  res->settled = best < XT_REFAK_SETTLED;
  res->k_irp_mgy_min = res->k_irp_mgy * res->fps * 60.0;
  return 0;
}
