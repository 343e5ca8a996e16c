/* A frame record's fields as the record encoders publish them (xt_record.h): each derived value
 * (the tube current, the flags, the hash, the delivered pitch) is worked out here once. */
#include <string.h>

#include "xt_exposure.h"
#include "xt_record.h"

/* FNV-1a over the parameters' values in table order (the stream header's chain_params_hash;
 * GET /v1/acquisition lists the table). */
static uint64_t params_hash(const xt_chain_params *p) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const double v = xt_chain_param_get(p, xt_chain_param_at(i));
    unsigned char b[sizeof v];
    memcpy(b, &v, sizeof v);
    for (size_t k = 0; k < sizeof v; k++) h = (h ^ b[k]) * 1099511628211ull;
  }
  return h;
}

static void exposure_fields(const xt_acq_frame *fr, xt_frame_fields *ff) {
  const xt_chain_params *p = &fr->prm;
  ff->chain = 1;
  ff->prm = p;
  ff->params_hash = params_hash(p);
  ff->ma = xt_exposure_ma(p);
  ff->protocol_name = xt_protocol_name(p->protocol);
  ff->chain_flags = (p->quantum_noise ? XT_STREAM_CHAIN_QUANTUM_NOISE : 0u) | (p->lag ? XT_STREAM_CHAIN_LAG : 0u) |
                    (p->temporal_alpha < 1 ? XT_STREAM_CHAIN_TEMPORAL : 0u) |
                    (p->edge_gain > 0 ? XT_STREAM_CHAIN_EDGE : 0u);
  ff->exposure_flags = (p->grid ? XT_STREAM_EXPOSURE_GRID : 0u) | (p->drc ? XT_STREAM_EXPOSURE_DRC : 0u);
  ff->grid_tp = p->grid ? p->grid_tp : 0;
  ff->chain_ms = fr->chain_ms;
  ff->mean_energy_kev = fr->info.mean_energy_kev;
  ff->hvl_mm_al = fr->info.hvl_mm_al;
  ff->kerma_ugy_per_mas = fr->info.kerma_ugy_per_mas;
  ff->absorbed_fraction = fr->info.absorbed_fraction;
  ff->nbins = fr->info.nbins;
  ff->channels = fr->info.channels;
  ff->out_rows = fr->raw.rows;
  ff->out_cols = fr->raw.cols;
  ff->out_pitch_mm[0] *= p->binning;
  ff->out_pitch_mm[1] *= p->binning;
  ff->k_irp_mgy = fr->dose.k_irp_mgy;
  ff->kap_gycm2 = fr->dose.kap_gycm2;
  ff->d_irp_mm = fr->dose.d_irp_mm;
  ff->field_cm2 = fr->dose.field_cm2;
  ff->dose_frames = fr->totals.frames;
  ff->k_irp_total_mgy = fr->totals.k_irp_mgy;
  ff->kap_total_gycm2 = fr->totals.kap_gycm2;
  if (p->drc) {
    ff->drc = 1;
    ff->drc_measured_ngy = fr->drc.measured_ngy;
    ff->drc_target_ngy = fr->drc.target_ngy;
    ff->drc_curve_s = fr->drc.s;
    ff->drc_flags = fr->drc.flags;
  }
}

void xt_frame_fields_of(const xt_acq_frame *fr, xt_frame_fields *ff) {
  memset(ff, 0, sizeof *ff);
  const xt_geometry *g = &fr->geom;
  ff->counter = fr->counter;
  ff->pose_seq = fr->pose_seq;
  ff->t_pose_ns = fr->t_pose_ns;
  ff->t_sched_ns = fr->t_sched_ns;
  ff->t_exposure_ns = fr->t_exposure_ns;
  ff->period_ns = fr->period_ns;
  const xt_pose *p = &g->pose;
  const double pose[8] = {p->primary_deg, p->secondary_deg, p->detector_rot_deg, p->sod_mm,
                          p->sid_mm,      p->table_mm.x,    p->table_mm.y,       p->table_mm.z};
  memcpy(ff->pose, pose, sizeof pose);
  memcpy(ff->P, g->P, sizeof ff->P);
  memcpy(ff->P_edge, fr->P_edge, sizeof ff->P_edge);
  ff->principal[0] = g->c0;
  ff->principal[1] = g->r0;
  ff->principal_edge[0] = g->c0 + 0.5; /* xt_P_to_pixel_edge's shift */
  ff->principal_edge[1] = g->r0 + 0.5;
  ff->mode = g->mode.name;
  ff->out_pitch_mm[0] = g->mode.pitch_u_mm;
  ff->out_pitch_mm[1] = g->mode.pitch_v_mm;
  if (fr->chain) exposure_fields(fr, ff);
}
