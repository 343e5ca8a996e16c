/* A frame record's fields as the record encoders publish them (xt_record.h): each derived value
 * (the tube current, the flags, the hash, the delivered pitch) is worked out here once. */
#include <string.h>

#include "xt_exposure.h"
#include "xt_json_build.h"
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
                    (p->edge_gain > 0 ? XT_STREAM_CHAIN_EDGE : 0u) | (p->window > 0 ? 0u : XT_STREAM_CHAIN_AUTO_WINDOW);
  ff->window = fr->window;
  ff->level = fr->level;
  ff->exposure_flags = (p->grid ? XT_STREAM_EXPOSURE_GRID : 0u) | (p->drc ? XT_STREAM_EXPOSURE_DRC : 0u);
  ff->grid_tp = p->grid ? p->grid_tp : 0;
  ff->chain_ms = fr->chain_ms;
  /* so that a client showing the processed frame still learns the panel clipped (issue 27); the
   * chain counted them (on a GPU there: a pass over the frame here cost 0.5 ms at FD20 full) */
  ff->saturated_px = fr->saturated_px;
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
  ff->binning *= p->binning;
  ff->matrix[0] = fr->raw.cols;
  ff->matrix[1] = fr->raw.rows;
  /* b x b render pixels make one: the delivered pixel c covers render pixels [b c, b c + b), so
   * c = (c_render + 1/2) / b - 1/2 */
  const double b = p->binning > 1 ? p->binning : 1;
  for (int j = 0; j < 4; j++) {
    ff->P_out[0][j] = (fr->geom.P[0][j] + 0.5 * fr->geom.P[2][j]) / b - 0.5 * fr->geom.P[2][j];
    ff->P_out[1][j] = (fr->geom.P[1][j] + 0.5 * fr->geom.P[2][j]) / b - 0.5 * fr->geom.P[2][j];
  }
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
  ff->plane = fr->plane;
  ff->timing = fr->timing;
  ff->cycle = fr->cycle;
  ff->t_cycle_ns = fr->t_cycle_ns;
  ff->motion = fr->motion;
  if (!fr->motion.on) ff->motion.cardiac_phase = ff->motion.resp_phase = -1, ff->motion.cardiac_scale = 1;
  ff->motion_flags = (fr->motion.xform_version ? XT_STREAM_MOTION_XFORM : 0u) |
                     (fr->motion.on && fr->motion.cardiac_phase >= 0 ? XT_STREAM_MOTION_CARDIAC : 0u) |
                     (fr->motion.on && fr->motion.resp_phase >= 0 ? XT_STREAM_MOTION_RESP : 0u);
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
  const xt_detector_mode *m = &g->mode; /* completed by xt_geom_compute: a hand-made mode is a panel */
  ff->detector = m->detector ? m->detector : m->name;
  ff->panel[0] = m->det_cols;
  ff->panel[1] = m->det_rows;
  ff->panel_pitch_mm = m->det_pitch_mm;
  ff->roi[0] = m->roi_col0;
  ff->roi[1] = m->roi_row0;
  ff->roi[2] = m->roi_cols;
  ff->roi[3] = m->roi_rows;
  ff->binning = m->binning;
  ff->matrix[0] = m->cols;
  ff->matrix[1] = m->rows;
  memcpy(ff->P_out, g->P, sizeof ff->P_out);
  ff->field_cm = m->field_cm;
  ff->dose_ratio = m->dose_ratio;
  ff->readout_ms = m->readout_ms;
  if (fr->chain) exposure_fields(fr, ff);
}

static json_t *pair(xt_jb *b, int x, int y) {
  json_t *a = json_array();
  xt_jb_push(b, a, json_integer(x));
  xt_jb_push(b, a, json_integer(y));
  return a;
}

json_t *xt_readout_json(xt_jb *b, const xt_frame_fields *ff) {
  json_t *o = json_object();
  xt_jb_put(b, o, "detector", json_string(ff->detector));
  xt_jb_put(b, o, "panel", pair(b, ff->panel[0], ff->panel[1]));
  xt_jb_put(b, o, "panel_pitch_mm", json_real(ff->panel_pitch_mm));
  xt_jb_put(b, o, "roi_origin", pair(b, ff->roi[0], ff->roi[1]));
  xt_jb_put(b, o, "roi_size", pair(b, ff->roi[2], ff->roi[3]));
  xt_jb_put(b, o, "binning", json_real(ff->binning));
  xt_jb_put(b, o, "matrix", pair(b, ff->matrix[0], ff->matrix[1]));
  xt_jb_put(b, o, "P", xt_jb_mat34(b, ff->P_out));
  xt_jb_put(b, o, "field_cm", json_real(ff->field_cm));
  xt_jb_put(b, o, "dose_ratio", json_real(ff->dose_ratio));
  xt_jb_put(b, o, "readout_ms", json_real(ff->readout_ms));
  return o;
}
