/* The imaging chain: its set-up (spectrum, detector absorption, channel tables, blur kernels,
 * the panel's fixed pattern) and the CPU pipeline, which runs the CPU stages over row bands on
 * worker threads. A chain on a CUDA projector hands its frames to chain_cuda.cu instead. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_chain_internal.h"
#include "xt_drc.h"
#include "xt_exposure.h"

/* ------------------------------------------------------------------------------------------ */
/* Set-up                                                                                     */
/* ------------------------------------------------------------------------------------------ */

void xt_blur_kernel_make(double sigma_px, xt_blur_kernel *k) {
  memset(k, 0, sizeof *k);
  if (!(sigma_px > 0.05)) { /* narrower than a twentieth of a pixel: a delta */
    k->w[0] = 1.f;
    return;
  }
  int r = (int)ceil(3.0 * sigma_px);
  if (r > XT_BLUR_MAX_R) r = XT_BLUR_MAX_R;
  double w[2 * XT_BLUR_MAX_R + 1], s = 0;
  for (int j = -r; j <= r; j++) s += w[j + r] = exp(-0.5 * j * j / (sigma_px * sigma_px));
  for (int j = 0; j <= 2 * r; j++) k->w[j] = (float)(w[j] / s);
  k->r = r;
}

void xt_panel_maps_free(xt_panel_maps *m) {
  free(m->gain);
  free(m->offset);
  free(m->defect);
  memset(m, 0, sizeof *m);
}

/* The panel's fixed pattern, a pure function of panel_seed and the pixel (stream XT_RNG_PANEL,
 * frame 0): gain 1 + gain_fpn N(0,1) (floored at 0.2), offset offset_adu + offset_fpn N(0,1), and
 * each pixel dead or hot with probability defect_fraction / 2 each; defect_lines dead columns. */
int xt_panel_maps_make(const xt_chain_params *p, int cols, int rows, xt_panel_maps *m, xt_msg *msg) {
  xt_panel_maps n;
  const size_t np = (size_t)cols * rows;
  memset(&n, 0, sizeof n);
  n.gain = malloc(np * sizeof *n.gain);
  n.offset = malloc(np * sizeof *n.offset);
  n.defect = calloc(np, 1);
  if (!n.gain || !n.offset || !n.defect) {
    xt_panel_maps_free(&n);
    return xt_fail(msg, XT_ENOMEM, "chain: out of memory for the panel maps (%d x %d)", cols, rows);
  }
  for (size_t i = 0; i < np; i++) {
    xt_rng g;
    xt_rng_init(&g, p->panel_seed, 0, (uint32_t)i, XT_RNG_PANEL);
    const double gn = 1.0 + p->gain_fpn * xt_rng_normal(&g);
    n.gain[i] = (float)(gn > 0.2 ? gn : 0.2);
    n.offset[i] = (float)(p->offset_adu + p->offset_fpn_adu * xt_rng_normal(&g));
    const double u = xt_rng_uniform(&g);
    n.defect[i] = u < 0.5 * p->defect_fraction ? XT_DEFECT_DEAD : (u < p->defect_fraction ? XT_DEFECT_HOT : XT_DEFECT_NONE);
  }
  for (int l = 0; l < p->defect_lines; l++) {
    xt_rng g;
    xt_rng_init(&g, p->panel_seed, 1, (uint32_t)l, XT_RNG_PANEL);
    const int col = (int)(xt_rng_u32(&g) % (uint32_t)cols);
    for (int r = 0; r < rows; r++) n.defect[(size_t)r * cols + col] = XT_DEFECT_LINE;
  }
  n.cols = cols;
  n.rows = rows;
  xt_panel_maps_free(m);
  *m = n;
  return 0;
}

void xt_chain_frame_const_make(const xt_chain *c, const xt_geometry *g, uint64_t frame, xt_chain_frame_const *fc) {
  const xt_chain_params *p = &c->prm;
  memset(fc, 0, sizeof *fc);
  const xt_vec3 vs[5] = {g->source, g->det_origin, g->u, g->v, g->d};
  float *dst[5] = {fc->cam.src, fc->cam.det0, fc->cam.u, fc->cam.v, fc->cam.d};
  for (int k = 0; k < 5; k++) {
    dst[k][0] = (float)vs[k].x;
    dst[k][1] = (float)vs[k].y;
    dst[k][2] = (float)vs[k].z;
  }
  fc->cam.pu = (float)g->mode.pitch_u_mm;
  fc->cam.pv = (float)g->mode.pitch_v_mm;
  fc->cols = g->mode.cols;
  fc->rows = g->mode.rows;
  xt_chain_out_size(c, g, &fc->ocols, &fc->orows);
  fc->mas = (float)p->mas;
  fc->seed = p->seed;
  fc->frame = frame;
  fc->noise = p->quantum_noise;
  xt_collim_make(p, fc->cols, fc->rows, &fc->coll);
  if (p->scatter) xt_scatter_plan_make(p, &c->info, fc->cols, fc->rows, g->mode.pitch_u_mm, &fc->sc);
  xt_blur_kernel_make(p->psf_mm / g->mode.pitch_u_mm, &fc->bu);
  xt_blur_kernel_make(p->psf_mm / g->mode.pitch_v_mm, &fc->bv);
  xt_readout_const *r = &fc->ro;
  r->bin = p->binning;
  /* adu_per_kev is a native pixel's gain; a resampled mode's pixel (the mean of n native pixels'
   * codes) reads its render pixel's charge at 1/n of it and averages n reads' electronic noise */
  const double n = xt_mode_native_mean(&g->mode);
  r->adu_per_kev = (float)(p->adu_per_kev / n);
  r->e_noise_adu = (float)(p->e_noise_adu / sqrt(n));
  r->adc_max = (float)((1u << p->adc_bits) - 1u);
  r->lag_on = p->lag;
  double sum = 0;
  for (int k = 0; k < XT_LAG_TERMS; k++) {
    /* term k releases a fraction f_k of a frame's charge over the following frames, a_k^j b_k in
     * frame j: sum_j>=1 b_k a_k^j = f_k gives b_k = f_k (1 - a_k) / a_k */
    const double a = p->lag_decay[k], f = p->lag_frac[k];
    r->lag_a[k] = (float)a;
    r->lag_b[k] = (float)(f * (1 - a) / a);
    sum += f;
  }
  r->lag_b0 = (float)(1.0 - sum);
  r->fault = c->fault;
  xt_process_const *pc = &fc->pc;
  pc->window = (float)p->window;
  pc->level = (float)p->level;
  pc->alpha = (float)p->temporal_alpha;
  pc->edge_gain = (float)p->edge_gain;
  pc->out_max = 4095.f;
  pc->first = c->first;
}

/* ------------------------------------------------------------------------------------------ */
/* Life cycle                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static int default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 64 ? 64 : (int)n);
}

static void free_scratch(xt_chain *c) {
  float **f[] = {&c->A, &c->X, &c->T, &c->D, &c->FA, &c->lag, &c->Y, &c->E, &c->M};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    free(*f[i]);
    *f[i] = NULL;
  }
  free(c->raw);
  c->raw = NULL;
  c->cols = c->rows = c->ocols = c->orows = 0;
}

void xt_chain_destroy(xt_chain *c) {
  if (!c) return;
#ifdef XT_HAVE_CUDA
  if (c->dev) xt_chain_cuda_destroy(c);
#endif
  free_scratch(c);
  xt_panel_maps_free(&c->maps);
  free(c->tc);
  free(c);
}

/* The cache slot of the parameters' own tables (a hit but for the first frame after a change: the
 * loop's kVs may have moved the LRU). */
static int own_tables(xt_chain *c, xt_msg *msg) {
  int slot, rc = xt__tab_cache_get(c, &c->prm, c->prm.kv, &slot, msg);
  if (rc) return rc;
  c->slot = slot;
  c->tab = &c->tc->tab[slot];
  c->info = c->tc->info[slot];
  return 0;
}

/* With the loop on, every whole kV of its curve in the cache (built at set-up, not per frame). */
static int loop_bank(xt_chain *c, xt_msg *msg) {
  const xt_chain_params *p = &c->prm;
  if (!p->drc || !c->tc->enabled) return 0;
  const xt_drc_bank *b = &c->tc->bank;
  int valid = b->n == (int)floor(p->drc_kv_max) - XT_DRC_BANK_KV0 + 1;
  for (int i = 0; valid && i < b->n; i++) {
    const xt_tab_key *k = &c->tc->key[b->slot[i]];
    valid = c->tc->used[b->slot[i]] && k->v[0] == XT_DRC_BANK_KV0 + i && k->v[1] == p->anode_deg &&
            k->v[2] == p->inherent_al_mm && k->v[3] == p->filter_al_mm && k->v[4] == p->filter_cu_mm &&
            k->v[5] == p->csi_mm && k->v[6] == p->csi_fill && k->v[7] == p->energy_bins;
  }
  if (valid) { /* kept the most recently used: a miss elsewhere evicts another slot (66 < 96) */
    for (int i = 0; i < b->n; i++) c->tc->stamp[b->slot[i]] = ++c->tc->clock;
    return 0;
  }
  int rc = xt__tab_cache_bank(c, p, msg);
#ifdef XT_HAVE_CUDA
  if (!rc && c->dev) rc = xt_chain_cuda_upload_bank(c, msg);
#endif
  return rc;
}

int xt_chain_create(const xt_chain_params *p, xt_proj *proj, xt_chain **out, xt_msg *msg) {
  int rc = xt_chain_params_validate(p, msg);
  if (rc) return rc;
  xt_chain *c = calloc(1, sizeof *c);
  if (!c) return xt_fail(msg, XT_ENOMEM, "chain: out of memory");
  c->prm = *p;
  c->proj = proj;
  c->backend = xt_proj_backend(proj);
  c->threads = default_threads();
  c->first = 1;
  if ((rc = xt_proj_channels(proj, &c->cs, msg)) || (rc = xt__tab_cache_init(&c->tc, msg))) goto fail;
#ifdef XT_HAVE_CUDA
  if (c->backend == XT_BACKEND_CUDA && (rc = xt_chain_cuda_create(c, msg))) goto fail;
#endif
  if ((rc = loop_bank(c, msg)) || (rc = own_tables(c, msg))) goto fail;
  *out = c;
  return 0;
fail:
  xt_chain_destroy(c);
  return rc;
}

/* Tables are looked up in the cache (xt_chain_cache.c): a change of mAs, mA or pulse width, or of
 * kV to one seen before, builds and uploads nothing. */
int xt_chain_set_params(xt_chain *c, const xt_chain_params *p, xt_msg *msg) {
  int rc = xt_chain_params_validate(p, msg);
  if (rc) return rc;
  const int maps_changed = p->panel_seed != c->prm.panel_seed || p->gain_fpn != c->prm.gain_fpn ||
                           p->offset_adu != c->prm.offset_adu || p->offset_fpn_adu != c->prm.offset_fpn_adu ||
                           p->defect_fraction != c->prm.defect_fraction || p->defect_lines != c->prm.defect_lines;
  const int loop_changed = p->drc != c->prm.drc || p->drc_target_ngy != c->prm.drc_target_ngy ||
                           p->drc_kv_max != c->prm.drc_kv_max || p->drc_max_step != c->prm.drc_max_step ||
                           xt_protocol_curve(p->protocol) != xt_protocol_curve(c->prm.protocol); /* s means another curve */
  const xt_chain_params old = c->prm;
  c->prm = *p;
  if ((rc = loop_bank(c, msg)) || (rc = own_tables(c, msg))) {
    c->prm = old; /* the old tables are still cached or rebuilt on the next frame */
    return rc;
  }
  if (p->dsa && !old.dsa) c->dsa_valid = 0; /* switched on: the next frame is the mask */
  if (loop_changed) c->drc_fresh = 1;
  if (maps_changed) xt_panel_maps_free(&c->maps); /* remade for the next frame */
  return 0;
}

int xt_chain_drc_attach(xt_chain *c, int on, xt_msg *msg) {
  c->drc_attached = on != 0;
  c->drc_fresh = 1;
  memset(&c->rec, 0, sizeof c->rec);
  return loop_bank(c, msg);
}

/* The record the device's step writes and one copy brings back with the frame (chain_cuda.cu): host
 * and device compile the same header, so one layout; its size is the "80-byte record" the docs name. */
_Static_assert(sizeof(xt_chain_drc_frame) == 80, "xt_chain_drc_frame: 3 doubles, 2 u64, xt_drc (40 bytes)");

void xt_chain_drc_last(const xt_chain *c, xt_chain_drc_frame *r) { *r = c->rec; }

unsigned long long xt_chain_table_builds(const xt_chain *c) { return (unsigned long long)c->tc->builds; }

const xt_chain_params *xt_chain_get_params(const xt_chain *c) { return &c->prm; }

void xt_chain_set_panel_fault(xt_chain *c, const xt_panel_fault *f) {
  if (f && f->on) c->fault = *f;
  else memset(&c->fault, 0, sizeof c->fault); /* on = 0: the readout never looks further */
}
void xt_chain_get_info(const xt_chain *c, xt_chain_info *info) { *info = c->info; }

void xt_chain_set_threads(xt_chain *c, int threads) { c->threads = threads > 0 ? (threads > 64 ? 64 : threads) : default_threads(); }
void xt_chain_dsa_remask(xt_chain *c) { c->dsa_valid = 0; }

void xt_chain_reset(xt_chain *c) {
  c->first = 1;
  c->dsa_valid = 0;
  c->drc_fresh = 1;
  if (c->lag) memset(c->lag, 0, sizeof *c->lag * (size_t)XT_LAG_TERMS * c->ocols * c->orows);
#ifdef XT_HAVE_CUDA
  if (c->dev) xt_chain_cuda_reset(c);
#endif
}

void xt_chain_out_size(const xt_chain *c, const xt_geometry *g, int *cols, int *rows) {
  *cols = g->mode.cols / c->prm.binning;
  *rows = g->mode.rows / c->prm.binning;
}

/* ------------------------------------------------------------------------------------------ */
/* The CPU pipeline                                                                           */
/* ------------------------------------------------------------------------------------------ */

typedef struct band_job {
  xt_chain *c;
  const xt_chain_tables *tab; /* the frame's (the loop's kV, or the parameters') */
  const xt_chain_frame_const *fc;
  const xt_chain_out *out;
  int stage, rows, nthreads, index;
} band_job;

enum { ST_DETECT, ST_BLUR_ROWS, ST_BLUR_COLS, ST_READOUT, ST_PLOG, ST_POUT };

static void *band_worker(void *arg) {
  const band_job *j = arg;
  xt_chain *c = j->c;
  const xt_chain_frame_const *fc = j->fc;
  const int r0 = (int)((long)j->rows * j->index / j->nthreads), r1 = (int)((long)j->rows * (j->index + 1) / j->nthreads);
  switch (j->stage) {
  case ST_DETECT: xt_stage_detect_cpu(j->tab, fc, c->A, r0, r1, c->X, j->out->expected); break;
  case ST_BLUR_ROWS: xt_stage_blur_rows_cpu(&fc->bu, fc->cols, fc->rows, c->X, r0, r1, c->T); break;
  case ST_BLUR_COLS: xt_stage_blur_cols_cpu(&fc->bv, fc->cols, fc->rows, c->T, r0, r1, c->D); break;
  case ST_READOUT: xt_stage_readout_cpu(j->tab, fc, &c->maps, c->D, r0, r1, c->lag, c->raw, c->FA); break;
  case ST_PLOG: xt_stage_process_log_cpu(fc, &c->maps, c->raw, c->FA, r0, r1, c->Y); break;
  case ST_POUT: xt_stage_process_out_cpu(fc, c->Y, r0, r1, j->out->proc); break;
  }
  return NULL;
}

/* Runs one stage over `rows` rows on the chain's threads (fewer when they cannot start). */
static void run_stage(xt_chain *c, const xt_chain_tables *tab, const xt_chain_frame_const *fc, const xt_chain_out *out,
                      int stage, int rows) {
  int n = c->threads < rows ? c->threads : rows;
  if (n < 1) n = 1;
  band_job jobs[64];
  pthread_t tid[64];
  int started[64] = {0};
  for (int i = 0; i < n; i++) jobs[i] = (band_job){c, tab, fc, out, stage, rows, n, i};
  for (int i = 1; i < n; i++) started[i] = pthread_create(&tid[i], NULL, band_worker, &jobs[i]) == 0;
  band_worker(&jobs[0]);
  for (int i = 1; i < n; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else band_worker(&jobs[i]);
  }
}

static int cpu_scratch(xt_chain *c, const xt_chain_frame_const *fc, xt_msg *msg) {
  if (c->cols == fc->cols && c->rows == fc->rows && c->ocols == fc->ocols && c->orows == fc->orows && c->A) return 0;
  free_scratch(c);
  const size_t np = (size_t)fc->cols * fc->rows, no = (size_t)fc->ocols * fc->orows;
  const size_t nch = c->cs.n > 0 ? (size_t)c->cs.n : 1;
  c->A = calloc(np * nch, sizeof(float));
  c->X = malloc(np * sizeof(float));
  c->T = malloc(np * sizeof(float));
  c->D = malloc(np * sizeof(float));
  c->FA = malloc(no * sizeof(float));
  c->lag = calloc(no * XT_LAG_TERMS, sizeof(float));
  c->Y = calloc(no, sizeof(float));
  c->M = calloc(no, sizeof(float));
  c->raw = malloc(no * sizeof(uint16_t));
  if (!c->A || !c->X || !c->T || !c->D || !c->FA || !c->lag || !c->Y || !c->M || !c->raw) {
    free_scratch(c);
    return xt_fail(msg, XT_ENOMEM, "chain: out of memory for a %d x %d frame", fc->cols, fc->rows);
  }
  c->cols = fc->cols;
  c->rows = fc->rows;
  c->ocols = fc->ocols;
  c->orows = fc->orows;
  c->first = 1;
  c->dsa_valid = 0;
  return 0;
}

/* The loop's exposure of the next frame (attached loop, `drc` on): kV, pulse width and mAs. */
static void loop_exposure(xt_chain *c, double *kv, double *pulse_ms, double *mas) {
  if (c->drc_fresh) {
    xt_drc_reset(&c->drc, &c->prm);
    c->drc_fresh = 0;
  }
  xt_drc_exposure_on(xt_protocol_curve(c->prm.protocol), c->drc.s, c->prm.drc_kv_max, kv, pulse_ms, mas);
}

int xt_chain_frame(xt_chain *c, const xt_geometry *g, uint64_t frame, const xt_chain_out *out, xt_msg *msg) {
  xt_chain_frame_const fc;
  int rc;
  if (g->mode.cols < c->prm.binning || g->mode.rows < c->prm.binning)
    return xt_fail(msg, XT_ERANGE, "chain: a %d x %d detector cannot be binned %dx%d", g->mode.cols, g->mode.rows,
                   c->prm.binning, c->prm.binning);
  if ((rc = own_tables(c, msg))) return rc;
  xt_chain_frame_const_make(c, g, frame, &fc);
  if (!c->maps.gain || c->maps.cols != fc.ocols || c->maps.rows != fc.orows) {
    if ((rc = xt_panel_maps_make(&c->prm, fc.ocols, fc.orows, &c->maps, msg))) return rc;
#ifdef XT_HAVE_CUDA
    if (c->dev && (rc = xt_chain_cuda_upload(c, msg))) return rc;
#endif
  }
#ifdef XT_HAVE_CUDA
  if (c->dev) {
    rc = xt_chain_cuda_frame(c, g, frame, out, msg);
    if (!rc && out->proc) c->first = 0;
    return rc;
  }
#endif
  if ((rc = cpu_scratch(c, &fc, msg))) return rc;
  fc.pc.first = c->first;
  /* the frame's exposure: the attached loop's point on its curve, or the parameters' */
  const int loop = c->drc_attached && c->prm.drc;
  const xt_chain_tables *tab = c->tab;
  const xt_chain_info *inf = &c->info;
  double kv = c->prm.kv, pulse = c->prm.pulse_ms, mas = c->prm.mas;
  if (loop) {
    int slot;
    loop_exposure(c, &kv, &pulse, &mas);
    if ((rc = xt__tab_cache_get(c, &c->prm, kv, &slot, msg))) return rc; /* a hit: the bank holds every kV */
    tab = &c->tc->tab[slot];
    inf = &c->tc->info[slot];
    fc.mas = (float)mas;
  }
  if (c->cs.n) {
    rc = c->prm.cpu_exact ? xt_proj_render_channels(c->proj, g, c->A, msg)
                          : xt_proj_render_channels_fast(c->proj, g, c->A, msg);
    if (rc) return rc;
  }
  if (c->prm.scatter) { /* the coarse scatter field before detection (issue 11) */
    fc.sc.field = c->sc_buf[2];
    xt_stage_scatter_cpu(tab, &fc, c->A, c->sc_buf[0], c->sc_buf[1], c->sc_buf[2]);
  }
  run_stage(c, tab, &fc, out, ST_DETECT, fc.rows);
  run_stage(c, tab, &fc, out, ST_BLUR_ROWS, fc.rows);
  run_stage(c, tab, &fc, out, ST_BLUR_COLS, fc.rows);
  if (out->signal) memcpy(out->signal, c->D, sizeof(float) * fc.cols * fc.rows);
  run_stage(c, tab, &fc, out, ST_READOUT, fc.orows);
  if (out->raw) memcpy(out->raw, c->raw, sizeof(uint16_t) * fc.ocols * fc.orows);
  c->saturated = 0;
  for (size_t i = 0, n = (size_t)fc.ocols * fc.orows; i < n; i++) c->saturated += (float)c->raw[i] >= fc.ro.adc_max;
  if (c->prm.drc) { /* the measuring field (issue 11); the attached loop's step */
    memset(&c->rec, 0, sizeof c->rec);
    c->rec.kv = kv;
    c->rec.pulse_ms = pulse;
    c->rec.mas = mas;
    xt_drc_field_sum(c->raw, fc.ocols, fc.orows, &c->rec.field_sum, &c->rec.field_n);
    if (loop) {
      const xt_drc_meter m = xt_drc_meter_of(&c->prm, &g->mode);
      const xt_drc_law law = xt_drc_law_of(&c->prm);
      xt_drc_step(&c->drc, &law, kv, mas, xt_drc_ngy(c->rec.field_sum, c->rec.field_n, &m, inf->flat_kev_per_mm2_ugy));
      c->rec.drc = c->drc;
    }
  }
  if (out->proc) {
    run_stage(c, tab, &fc, out, ST_PLOG, fc.orows);
    fc.pc.dsa_mask = c->prm.dsa && c->dsa_valid ? c->M : NULL; /* DSA: the mask frame itself is unsubtracted */
    if (fc.pc.window > 0.f) {
      c->wl[0] = fc.pc.window;
      c->wl[1] = fc.pc.level;
    } else { /* the automatic window, from this frame's histogram */
      xt_stage_process_auto_cpu(&fc, &c->maps, c->Y, c->whist, c->wl);
      fc.pc.wl = c->wl;
    }
    run_stage(c, tab, &fc, out, ST_POUT, fc.orows);
    if (c->prm.dsa && !c->dsa_valid) {
      memcpy(c->M, c->Y, sizeof(float) * fc.ocols * fc.orows);
      c->dsa_valid = 1;
    }
    c->first = 0;
  }
  return 0;
}

uint32_t xt_chain_saturated_last(const xt_chain *c) { return c->saturated; }

void xt_chain_window_last(const xt_chain *c, double *window, double *level) {
  *window = c->wl[0];
  *level = c->wl[1];
}

int xt_chain_time_device(xt_chain *c, const xt_geometry *g, int n, int warmup, int reps, int what,
                         double *ms_per_frame, xt_msg *msg) {
  if (n < 1 || reps < 1 || warmup < 0) return xt_fail(msg, XT_EINVAL, "chain timing: bad counts");
#ifdef XT_HAVE_CUDA
  if (c->dev) {
    xt_chain_frame_const fc;
    int rc0 = own_tables(c, msg);
    if (rc0) return rc0;
    if (what == 3 && !(c->drc_attached && c->prm.drc))
      return xt_fail(msg, XT_EINVAL, "chain timing: the loop is not attached with drc on");
    xt_chain_frame_const_make(c, &g[0], 0, &fc);
    if (!c->maps.gain || c->maps.cols != fc.ocols || c->maps.rows != fc.orows) {
      int rc = xt_panel_maps_make(&c->prm, fc.ocols, fc.orows, &c->maps, msg);
      if (rc || (rc = xt_chain_cuda_upload(c, msg))) return rc;
    }
    return xt_chain_cuda_time(c, g, n, warmup, reps, what, ms_per_frame, msg);
  }
#endif
  (void)what;
  *ms_per_frame = 0;
  return xt_fail(msg, XT_EUNSUPPORTED, "chain timing: the chain is not on a CUDA projector");
}
