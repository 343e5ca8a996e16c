/* The frame stream's binary header (api/xt_stream.h, api/stream.md) from a record's fields: the
 * one writer of it, for every message of every frame (mono, raw, processed). */
#include <stdio.h>
#include <string.h>

#include "xt_record.h"

/* The version 2 and 3 parts: the exposure the frame had, its dose, the loop after it. */
static void exposure_part(const xt_frame_fields *ff, int kind, xt_stream_header *h) {
  const xt_chain_params *p = ff->prm;
  h->frame_kind = (uint32_t)kind;
  h->bits_stored = kind == XT_STREAM_KIND_RAW ? (uint32_t)p->adc_bits : 12u;
  h->chain_seed = p->seed;
  h->chain_params_hash = ff->params_hash;
  h->kv = p->kv;
  h->mas = p->mas;
  h->filter_al_mm = p->filter_al_mm;
  h->filter_cu_mm = p->filter_cu_mm;
  h->mean_energy_kev = ff->mean_energy_kev;
  h->kerma_ugy_per_mas = ff->kerma_ugy_per_mas;
  h->window = ff->window; /* the frame's own: with the automatic window not the parameter (0) */
  h->level = ff->level;
  h->binning = (uint32_t)p->binning;
  h->chain_flags = ff->chain_flags;
  h->saturated_px = ff->saturated_px;
  h->ma = ff->ma;
  h->pulse_ms = p->pulse_ms;
  h->focal_spot_mm = p->focal_spot_mm;
  memcpy(h->shutter, p->shutter, sizeof h->shutter);
  memcpy(h->wedge, p->wedge, sizeof h->wedge);
  h->wedge_t = p->wedge_t;
  h->grid_tp = ff->grid_tp;
  h->protocol = (uint32_t)p->protocol;
  h->exposure_flags = ff->exposure_flags;
  h->k_irp_mgy = ff->k_irp_mgy;
  h->kap_gycm2 = ff->kap_gycm2;
  h->k_irp_total_mgy = ff->k_irp_total_mgy;
  h->kap_total_gycm2 = ff->kap_total_gycm2;
  h->dose_frames = ff->dose_frames;
  h->d_irp_mm = ff->d_irp_mm;
  h->drc_measured_ngy = ff->drc_measured_ngy;
  h->drc_target_ngy = ff->drc_target_ngy;
  h->drc_curve_s = ff->drc_curve_s;
  h->drc_flags = ff->drc_flags;
}

void xt_stream_header_encode(const xt_frame_fields *ff, const xt_stream_delivery *d, xt_stream_header *h) {
  memset(h, 0, sizeof *h);
  h->magic = XT_STREAM_MAGIC;
  h->version = XT_STREAM_VERSION;
  h->header_size = XT_STREAM_HEADER_SIZE;
  h->frame_counter = ff->counter;
  h->pose_seq = ff->pose_seq;
  h->t_pose_ns = ff->t_pose_ns;
  h->t_exposure_sched_ns = ff->t_sched_ns;
  h->t_exposure_ns = ff->t_exposure_ns;
  h->t_render_done_ns = d->t_done_ns;
  h->rows = (uint32_t)d->rows;
  h->cols = (uint32_t)d->cols;
  h->pixel_format = (uint32_t)d->pixel_format;
  h->flags = d->flags;
  h->payload_bytes = d->payload;
  memcpy(h->pose, ff->pose, sizeof h->pose);
  memcpy(h->P, ff->P, sizeof h->P);
  memcpy(h->pitch_mm, ff->out_pitch_mm, sizeof h->pitch_mm);
  snprintf(h->mode, sizeof h->mode, "%s", ff->mode);
  h->period_ns = ff->period_ns;
  h->bits_stored = d->pixel_format == XT_STREAM_PIX_F32 ? 32u : 16u;
  snprintf(h->detector, sizeof h->detector, "%s", ff->detector ? ff->detector : "");
  for (int i = 0; i < 4; i++) h->roi[i] = (uint32_t)ff->roi[i];
  h->panel[0] = (uint32_t)ff->panel[0];
  h->panel[1] = (uint32_t)ff->panel[1];
  h->panel_pitch_mm = ff->panel_pitch_mm;
  h->field_cm = ff->field_cm;
  h->dose_ratio = ff->dose_ratio;
  h->readout_ms = ff->readout_ms;
  h->readout_binning = ff->binning;
  memcpy(h->P_out, ff->P_out, sizeof h->P_out);
  h->plane = (uint32_t)ff->plane;
  h->timing = (uint32_t)ff->timing;
  h->cycle = ff->cycle;
  h->t_cycle_ns = ff->t_cycle_ns;
  h->codec = XT_STREAM_CODEC_NONE; /* the sender rewrites codec and wire_bytes for a client that asked */
  h->wire_bytes = d->payload;
  h->motion_t_s = ff->motion.t_s;
  h->cardiac_phase = ff->motion.cardiac_phase;
  h->resp_phase = ff->motion.resp_phase;
  h->cardiac_scale = ff->motion.cardiac_scale;
  h->resp_mm = ff->motion.resp_mm;
  h->motion_flags = ff->motion_flags;
  h->blur_samples = (uint32_t)(ff->motion.blur_samples > 1 ? ff->motion.blur_samples : 1);
  h->xform_version = ff->motion.xform_version;
  if (ff->chain && d->kind != XT_STREAM_KIND_MONO) exposure_part(ff, d->kind, h);
}
