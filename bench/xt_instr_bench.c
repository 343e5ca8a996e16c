/* xtwin-instr-bench: what instruments cost a frame (issue 26, docs/BENCHMARKS.md "Instruments").
 *
 * The scene is the server's default patient (the thorax, 1.25 mm labels) at fd20-1024 (or --mode),
 * first alone, then with its guidewire and nine more instruments (--instruments N, each --points
 * long: 2000 points = 1999 segments) lying along arcs through the field. For each, on the GPU:
 *   device    the chain to raw + processed, frames queued back to back (xt_chain_time_device, 2);
 *   e2e       xt_chain_frame end to end (render, chain, one copy-out into host memory), one at a time:
 *             the median frame (a mean moved by ±0.1 ms between runs of the thorax alone on a
 *             GPU host, 2026-12-07: a few slow frames of the host's, not of the frame's work);
 *   reshape   e2e with every instrument given a new shape before every frame (xt_proj_set_shape:
 *             the host layout and the upload into the preallocated buffers);
 *   inject    (--catheters: the instruments are 5 F catheters whose lumens are contrast regions)
 *             e2e with every lumen given a new iodine level before every frame (xt_proj_set_iodine,
 *             as an injection's exposures do: docs/contrast.md), the shapes kept.
 * The target: ten instruments of 2000 segments add at most 10 % to the e2e frame (issue 26).
 * With --backend cpu the same scenes run on the CPU backend (e2e and reshape only), e.g. at fd20-256.
 * With --count nothing is timed: the splat's work per frame, counted on the host (count_work), and
 * what the compact splat would do with it (pre-test survivors, batches of 32).
 * The instruments are fused into the spectral projection by default; XT_INSTR_FUSED=0 in the
 * environment: not (the planes and the chain's separate detect stage; read by the CUDA projector at
 * create); the output says which path each scene's chain frames took.
 * XT_INSTR_SIDE=1 with XT_INSTR_FUSED=0: the splat on a side stream beside the voxel render
 * (cuda_pipeline.cu, render_side).
 * XT_INSTR_SPLAT=run: the splat kernel that takes a block per run of consecutive segments, each
 * sub-ray picking the segments it can meet (k_instr_splat_run, proj_instr.cu; default: k_instr_splat);
 * XT_INSTR_SPLAT=compact: the one that batches the sub-rays meeting the tube across pixels
 * (k_instr_splat_compact); read at create; with or without XT_INSTR_FUSED. The output's path line
 * names both settings. --count mirrors the default and the run splat on the host.
 * Usage: xtwin-instr-bench [--frames N] [--instruments N] [--points N] [--mode M] [--backend cuda|cpu]
 *                          [--catheters] [--count] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_acq.h"
#include "xt_chain.h"
#include "xt_chain_internal.h" /* fused_frames: which path the frames took */
#include "xt_instr.h"
#include "xt_phantom.h"
#include "xt_proj.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Instrument k's centreline at time step `phase`: an arc of the field's size, tip first. */
static void arc(int k, int phase, int n, double *pts) {
  const double R = 60.0 + 6.0 * k, y = -40.0 + 8.0 * k, a0 = 0.3 * k + 0.01 * phase;
  for (int i = 0; i < n; i++) {
    const double t = a0 + 2.6 * i / (n - 1);
    pts[3 * i] = R * cos(t) - 20.0;
    pts[3 * i + 1] = y + 5.0 * sin(3.0 * t);
    pts[3 * i + 2] = R * sin(t) - 30.0;
  }
}

static int poses(const char *mode, xt_geometry *g, int n) {
  const xt_detector_mode *md = xt_mode_find(mode);
  if (!md) return -1;
  for (int i = 0; i < n; i++) {
    xt_pose p = xt_pose_default(md);
    p.primary_deg = -30.0 + 60.0 * i / (n > 1 ? n - 1 : 1);
    p.secondary_deg = (i % 3 - 1) * 10.0;
    if (xt_geom_compute(&p, md, &g[i], NULL)) return -1;
  }
  return 0;
}

typedef struct result {
  double device, e2e, reshape, inject;
  int fused; /* the chain's frames took the fused spectral path */
} result;

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of the n per-frame times t (ms), sorting t. */
static double median_ms(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static int scene(xt_backend b, const char *mode, xt_model *const *models, int nm, xt_model *const *instr, int ni,
                 int npts, int frames, int inject, result *r, xt_msg *msg) {
  xt_proj *p = NULL;
  xt_acq_renderer rnd;
  xt_geometry g[9];
  uint16_t *raw = NULL, *proc = NULL;
  double *pts = NULL, *ft = NULL; /* ft: the frames' times, ms */
  int rc;
  memset(r, 0, sizeof *r);
  xt_acq_renderer_init(&rnd, NULL, 0);
  if (poses(mode, g, 9)) return xt_fail(msg, XT_EINVAL, "bench: unknown mode %s", mode);
  xt_proj_options po = {b, 0, 0};
  if ((rc = xt_proj_create(&po, &p, msg))) goto done;
  xt_acq_renderer_init(&rnd, p, 0);
  for (int i = 0; i < nm && !rc; i++) rc = xt_acq_renderer_add_model(&rnd, models[i], msg);
  if (rc) goto done;
  xt_chain_params prm = xt_chain_params_default();
  if ((rc = xt_acq_renderer_chain(&rnd, &prm, msg))) goto done;
  xt_chain *c = rnd.chain;
  if (b == XT_BACKEND_CUDA && (rc = xt_chain_time_device(c, g, 9, 18, frames, 2, &r->device, msg))) goto done;
  int oc, orr;
  xt_chain_out_size(c, &g[0], &oc, &orr);
  raw = malloc((size_t)oc * orr * 2);
  proc = malloc((size_t)oc * orr * 2);
  pts = malloc(sizeof(double) * 3 * (size_t)(npts > 0 ? npts : 1));
  ft = malloc(sizeof(double) * (size_t)frames);
  if (!raw || !proc || !pts || !ft) {
    rc = xt_fail(msg, XT_ENOMEM, "bench: out of memory");
    goto done;
  }
  xt_chain_out out = {raw, proc, NULL, NULL, 0};
  for (int i = 0; i < 9 && !rc; i++) rc = xt_chain_frame(c, &g[i], (uint64_t)i, &out, msg);
  for (int i = 0; i < frames && !rc; i++) {
    const double t0 = now_s();
    rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(100 + i), &out, msg);
    ft[i] = (now_s() - t0) * 1e3;
  }
  if (!rc) r->e2e = median_ms(ft, frames);
  r->fused = c->fused_frames > 0;
  if (ni > 0 && !rc) {
    for (int i = 0; i < frames && !rc; i++) {
      const double t0 = now_s();
      for (int k = 0; k < ni && !rc; k++) {
        arc(k, i + 1, npts, pts);
        rc = xt_proj_set_shape(p, instr[k], pts, npts, msg);
      }
      if (!rc) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(1000 + i), &out, msg);
      ft[i] = (now_s() - t0) * 1e3;
    }
    if (!rc) r->reshape = median_ms(ft, frames);
  }
  if (inject && ni > 0 && !rc) {
    double rho[256] = {0};
    for (int i = 0; i < frames && !rc; i++) {
      const double t0 = now_s();
      for (int k = 0; k < ni && !rc; k++) {
        const int l = xt_instr_lumen_id(&xt_model_instr(instr[k])->dev);
        rho[l] = 0.001 * (1 + (i + k) % 350); /* g/cm^3: 1 to 350 mg/mL, a new level every frame */
        rc = xt_proj_set_iodine(p, instr[k], rho, msg);
        rho[l] = 0.0;
      }
      if (!rc) rc = xt_chain_frame(c, &g[i % 9], (uint64_t)(5000 + i), &out, msg);
      ft[i] = (now_s() - t0) * 1e3;
    }
    if (!rc) r->inject = median_ms(ft, frames);
  }
done:
  free(raw);
  free(proc);
  free(pts);
  free(ft);
  xt_acq_renderer_free(&rnd);
  xt_proj_destroy(p);
  return rc;
}

/* --count: the splat's work for one frame of the scene, on the host (no GPU needed), mirroring
 * proj_instr.cu step by step in double: per segment (one warp each) the footprint of its box, the
 * candidate pixels (a half's centre ray within e of the tube, xt_tube_near, e the half's sub-rays'
 * spread at the segment's depth; for comparison the CPU reference's box grown by a whole pixel
 * diagonal), the sub-rays of the halves kept, the pixels whose sums are non-zero (one atomic per
 * plane), and the
 * 16 x 16 tiles the finish converts. Averaged over the bench's 9 poses. Every footprint pixel's
 * sub-rays are traced, so it also checks that no sub-ray the kernel skips has a non-zero chord. */
typedef struct work {
  double segs, seen, foot, cand, cand_ref, subrays, hit, lost, refused, tiles;
  double met, passes_met, near_diff; /* sub-rays meeting the outer tube; warp passes (a half's 32) with one */
  double near_passes;                /* the halves' tests, 32 pixels a warp pass */
  double dev_max;                    /* max |factored - xt_tube_chords| over the sub-rays, mm */
  double surv, batches, maybe_missed; /* XT_INSTR_SPLAT=compact: pre-test survivors, batches of 32 */
  double gated, gated_px;             /* the default splat: halves and pixels with a pre-test survivor */
  /* the run splat (count_runs) */
  double runs, runs_seen, r_near_passes, r_halves, r_forms, r_iters, r_met, r_lost, r_hit;
} work;

/* The footprint of segment t's box (xt_instr_seg_box's) on the detector, as the kernel's
 * splat_footprint: pixels ca..cb x ra..rb (fp), the corners' largest depth *fmx, *whole when a
 * corner lies behind the source (the whole detector); 0 when it misses the detector. */
static int footprint(const xt_geometry *g, const xt_affine *m2w, const xt_tube_seg *t, int fp[4], double lo[3],
                     double hi[3], double *fmx, int *whole) {
  const int cols = g->mode.cols, rows = g->mode.rows;
  const xt_vec3 nrm = xt_v3_cross(g->u, g->v), e0 = xt_v3_sub(g->det_origin, g->source);
  const double en = xt_v3_dot(e0, nrm);
  const double c0 = xt_tube_dot(t->n0, t->d), c1 = xt_tube_dot(t->n1, t->d);
  const double grow = t->r_out / (c0 < c1 ? c0 : c1) * (1.0 + 1e-12) + 1e-12;
  double cmin = 1e30, cmax = -1e30, rmin = 1e30, rmax = -1e30;
  *fmx = 0;
  *whole = 0;
  for (int q = 0; q < 3; q++) {
    lo[q] = fmin(t->p0[q], t->p0[q] + t->len * t->d[q]) - grow;
    hi[q] = fmax(t->p0[q], t->p0[q] + t->len * t->d[q]) + grow;
  }
  for (int q = 0; q < 8; q++) {
    const xt_vec3 pw = xt_aff_apply(m2w, xt_v3(q & 1 ? hi[0] : lo[0], q & 2 ? hi[1] : lo[1], q & 4 ? hi[2] : lo[2]));
    const xt_vec3 d = xt_v3_sub(pw, g->source);
    const double qn = xt_v3_dot(d, nrm);
    if (!(qn * en > 0.0)) {
      *whole = 1;
      continue;
    }
    const xt_vec3 x = xt_v3_sub(xt_v3_add(g->source, xt_v3_scale(d, en / qn)), g->det_origin);
    const double cc = xt_v3_dot(x, g->u) / g->mode.pitch_u_mm, rr = xt_v3_dot(x, g->v) / g->mode.pitch_v_mm;
    cmin = fmin(cmin, cc);
    cmax = fmax(cmax, cc);
    rmin = fmin(rmin, rr);
    rmax = fmax(rmax, rr);
    *fmx = fmax(*fmx, qn / en);
  }
  fp[0] = 0, fp[1] = cols - 1, fp[2] = 0, fp[3] = rows - 1;
  if (!*whole) {
    if (cmax < -1.0 || rmax < -1.0 || cmin > cols || rmin > rows) return 0;
    fp[0] = (int)fmax(0, floor(cmin - 0.5));
    fp[1] = (int)fmin(cols - 1, ceil(cmax + 0.5));
    fp[2] = (int)fmax(0, floor(rmin - 0.5));
    fp[3] = (int)fmin(rows - 1, ceil(rmax + 0.5));
  }
  return fp[0] <= fp[1] && fp[2] <= fp[3];
}

/* The kernel's factored constants of segment t for the source o (model frame): the rays to the
 * detector's origin and a column's and a row's step, and the squared world length's quadratic. */
static void family(const xt_geometry *g, const xt_affine *w2m, const xt_tube_seg *t, const double o[3], xt_tube_pre *P,
                   xt_tube_fam *F) {
  xt_tube_prep(t, o, P);
  const double pu = g->mode.pitch_u_mm, pv = g->mode.pitch_v_mm;
  const xt_vec3 w0 = xt_v3_sub(g->det_origin, g->source), wu = xt_v3_scale(g->u, pu), wv = xt_v3_scale(g->v, pv);
  const xt_vec3 m0 = xt_aff_apply_dir(w2m, w0), mu = xt_aff_apply_dir(w2m, wu), mv = xt_aff_apply_dir(w2m, wv);
  const double a0[3] = {m0.x, m0.y, m0.z}, au[3] = {mu.x, mu.y, mu.z}, av[3] = {mv.x, mv.y, mv.z};
  xt_tube_lin_of(P, t, a0, &F->l0);
  xt_tube_lin_of(P, t, au, &F->lu);
  xt_tube_lin_of(P, t, av, &F->lv);
  F->q[0] = xt_v3_dot(w0, w0);
  F->q[1] = 2.0 * xt_v3_dot(w0, wu);
  F->q[2] = 2.0 * xt_v3_dot(w0, wv);
  F->q[3] = xt_v3_dot(wu, wu);
  F->q[4] = 2.0 * xt_v3_dot(wu, wv);
  F->q[5] = xt_v3_dot(wv, wv);
}

/* The run splat (k_instr_splat_run) of instrument G's segments on the host: per run (a warp) its
 * bounding segment's footprint and candidate halves, and per candidate half each sub-ray's pick
 * (xt_tube_fac_span, xt_tube_run_pick): the closed forms it runs (the picks' sizes), the warp's
 * iterations (the largest pick of the 32 lanes), the pixels it sums. Every footprint sub-ray's chords
 * with every segment of the run are formed too, so it also counts the non-zero chords the run
 * splat would skip (a refused half, or a segment not picked): must be 0. */
static void count_runs(const xt_geometry *g, const xt_instr *I, const xt_affine *m2w, const xt_affine *w2m,
                       double scale, const double o[3], work *wk) {
  const xt_instr_geom *G = &I->geom;
  const int S = XT_INSTR_AREA_SAMPLES, cap = xt_tube_runs_cap(G->nseg, I->dev.nsections);
  xt_tube_run *run = malloc(sizeof *run * (size_t)cap);
  const int nr = run ? xt_tube_runs(G->seg, G->nseg, run, cap) : -1;
  if (nr < 0) {
    wk->r_lost += 1e9; /* cannot happen: reported as skipped chords */
    free(run);
    return;
  }
  const double pu = g->mode.pitch_u_mm, pv = g->mode.pitch_v_mm;
  for (int k = 0; k < nr; k++) {
    const xt_tube_run *R = &run[k];
    wk->runs++;
    int fp[4], whole;
    double lo[3], hi[3], fmx;
    if (!footprint(g, m2w, &R->v, fp, lo, hi, &fmx, &whole)) continue;
    wk->runs_seen++;
    const int ca = fp[0], cb = fp[1], ra = fp[2], rb = fp[3];
    wk->r_near_passes += ceil((double)(cb - ca + 1) * (rb - ra + 1) / 32.0);
    const double e = hypot(0.5 * pu, 0.25 * pv) * scale * (whole ? 1.0 : fmin(1.0, fmx)) * (1.0 + 1e-9) + 1e-9;
    xt_tube_pre vP, P[XT_TUBE_RUN];
    xt_tube_fam vF, F[XT_TUBE_RUN];
    family(g, w2m, &R->v, o, &vP, &vF);
    for (int j = 0; j < R->n; j++) family(g, w2m, &G->seg[R->first + j], o, &P[j], &F[j]);
    const double xm = fmax(fabs(ca - 0.5), fabs(cb + 0.5)), ym = fmax(fabs(ra - 0.5), fabs(rb + 0.5));
    xt_tube_maybe vM;
    xt_tube_fac_maybe_prep(&vP, &vF, xm, ym, 0.5 * (ca + cb), 0.5 * (ra + rb), &vM);
    for (int r = ra; r <= rb; r++)
      for (int cl = ca; cl <= cb; cl++) {
        int on[2], any = 0;
        for (int hh = 0; hh < 2; hh++) on[hh] = xt_tube_fac_near(&vP, &vF, cl, r - 0.25 + 0.5 * hh, e);
        wk->r_halves += on[0] + on[1];
        for (int hh = 0; hh < 2; hh++) {
          int most = 0;
          for (int q = 0; q < 32; q++) {
            const int si = q % S, sj = q / S + hh * (S / 2);
            const double xs = cl + (si + 0.5) / S - 0.5, ys = r + (sj + 0.5) / S - 0.5;
            unsigned pick = 0u;
            double t0, t1;
            if (on[hh] && xt_tube_fac_span(&vP, &vF, &vM, xs, ys, &t0, &t1)) pick = xt_tube_run_pick(R->bin, R->ib, R->tlo, R->thi, R->n, t0, t1);
            const int np = __builtin_popcount(pick);
            wk->r_forms += np;
            most = np > most ? np : most;
            for (int j = 0; j < R->n; j++) {
              double fo, fi;
              xt_tube_fac_chords(&P[j], &F[j], xs, ys, &fo, &fi);
              if (fo != 0.0 || fi != 0.0) {
                any = 1;
                wk->r_met += (pick >> j) & 1;
                wk->r_lost += !((pick >> j) & 1);
              }
            }
          }
          wk->r_iters += most;
        }
        wk->r_hit += any;
      }
  }
  free(run);
}

static void count_frame(const xt_geometry *g, xt_model *const *instr, int ni, work *wk, unsigned char *tile) {
  const int cols = g->mode.cols, rows = g->mode.rows, tcols = (cols + 15) / 16, S = XT_INSTR_AREA_SAMPLES;
  const double pu = g->mode.pitch_u_mm, pv = g->mode.pitch_v_mm;
  memset(tile, 0, (size_t)tcols * ((rows + 15) / 16));
  const xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  for (int k = 0; k < ni; k++) {
    const xt_instr_geom *G = &xt_model_instr(instr[k])->geom;
    const xt_affine m2w = xt_aff_compose(&p2w, &instr[k]->placement);
    xt_affine w2m;
    if (!xt_aff_invert(&m2w, &w2m)) continue;
    double f2 = 0;
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 3; c++) f2 += w2m.m[r][c] * w2m.m[r][c];
    const double scale = sqrt(f2);
    const xt_vec3 om = xt_aff_apply(&w2m, g->source);
    const double o[3] = {om.x, om.y, om.z};
    count_runs(g, xt_model_instr(instr[k]), &m2w, &w2m, scale, o, wk);
    for (int i = 0; i < G->nseg; i++) {
      const xt_tube_seg *t = &G->seg[i];
      wk->segs++;
      int fp[4], whole;
      double lo[3], hi[3], fmx;
      if (!footprint(g, &m2w, t, fp, lo, hi, &fmx, &whole)) continue;
      const int ca = fp[0], cb = fp[1], ra = fp[2], rb = fp[3];
      wk->seen++;
      wk->near_passes += ceil((double)(cb - ca + 1) * (rb - ra + 1) / 32.0);
      const double e = hypot(0.5 * pu, 0.25 * pv) * scale * (whole ? 1.0 : fmin(1.0, fmx)) * (1.0 + 1e-9) + 1e-9;
      const double eref = hypot(pu, pv) * scale;
      xt_tube_pre P;
      xt_tube_fam F;
      family(g, &w2m, t, o, &P, &F);
      /* the compact kernel's pre-test slack (k_instr_splat_compact) and its survivors, queued
       * across the segment's pixels: batches of 32 and one partial at the end */
      const double xm = fmax(fabs(ca - 0.5), fabs(cb + 0.5)), ym = fmax(fabs(ra - 0.5), fabs(rb + 0.5));
      xt_tube_maybe mbc;
      xt_tube_fac_maybe_prep(&P, &F, xm, ym, 0.5 * (ca + cb), 0.5 * (ra + rb), &mbc);
      double surv = 0;
      for (int r = ra; r <= rb; r++)
        for (int cl = ca; cl <= cb; cl++) {
          wk->foot++;
          const xt_vec3 dc = xt_v3_sub(xt_geom_pixel_pos(g, cl, r), g->source);
          const double len = xt_v3_norm(dc);
          const xt_vec3 wm = xt_aff_apply_dir(&w2m, xt_v3_scale(dc, 1.0 / len));
          const double d[3] = {wm.x, wm.y, wm.z};
          const xt_instr_box bx = {{lo[0], lo[1], lo[2]}, {hi[0], hi[1], hi[2]}};
          const int ref = xt_instr_box_hit(&bx, o, d, len, eref);
          wk->cand_ref += ref;
          int on[2];
          for (int hh = 0; hh < 2; hh++) { /* the halves' centre rays, as the kernel */
            on[hh] = xt_tube_fac_near(&P, &F, cl, r - 0.25 + 0.5 * hh, e);
            /* against the unfactored test on the same ray */
            const xt_vec3 dh = xt_v3_sub(xt_geom_pixel_pos(g, cl, r - 0.25 + 0.5 * hh), g->source);
            const double ln = xt_v3_norm(dh);
            const xt_vec3 wh = xt_aff_apply_dir(&w2m, xt_v3_scale(dh, 1.0 / ln));
            const double dm[3] = {wh.x, wh.y, wh.z};
            wk->near_diff += on[hh] != xt_tube_near(t, o, dm, ln, e);
          }
          wk->cand += on[0] || on[1];
          double sw = 0, sl = 0;
          int bad = 0, pass_met[2] = {0, 0}, gate[2] = {0, 0};
          for (int sj = 0; sj < S; sj++)
            for (int si = 0; si < S; si++) {
              const xt_vec3 ds = xt_v3_sub(xt_geom_pixel_pos(g, cl + (si + 0.5) / S - 0.5, r + (sj + 0.5) / S - 0.5), g->source);
              const double ls = xt_v3_norm(ds);
              const xt_vec3 ws = xt_aff_apply_dir(&w2m, xt_v3_scale(ds, 1.0 / ls));
              const double dd[3] = {ws.x, ws.y, ws.z};
              double co, ci, fo, fi;
              xt_tube_chords(t, o, dd, ls, &co, &ci);
              const double xs = cl + (si + 0.5) / S - 0.5, ys = r + (sj + 0.5) / S - 0.5;
              xt_tube_fac_chords(&P, &F, xs, ys, &fo, &fi);
              wk->dev_max = fmax(wk->dev_max, fmax(fabs(fo - co), fabs(fi - ci)));
              if (on[sj >= S / 2] && fo > 0.0) wk->met++, pass_met[sj >= S / 2] = 1;
              wk->subrays += on[sj >= S / 2];
              if (on[sj >= S / 2]) {
                const int mb = xt_tube_fac_maybe(&P, &F, &mbc, xs, ys);
                surv += mb;
                gate[sj >= S / 2] |= mb;
                wk->maybe_missed += !mb && (fo != 0.0 || fi != 0.0);
              }
              bad += !on[sj >= S / 2] && (co != 0.0 || ci != 0.0);
              sw += co - ci;
              sl += ci;
            }
          wk->refused += bad; /* sub-rays the kernel skips with a non-zero chord: must stay 0 */
          wk->passes_met += pass_met[0] + pass_met[1];
          wk->gated += gate[0] + gate[1];
          wk->gated_px += gate[0] || gate[1];
          if (sw == 0.0 && sl == 0.0) continue;
          wk->lost += !ref; /* a non-zero sum outside the CPU reference's candidates: must stay 0 */
          wk->hit++;
          unsigned char *tf = &tile[(r / 16) * tcols + cl / 16];
          if (!*tf) *tf = 1, wk->tiles++;
        }
      wk->surv += surv;
      wk->batches += ceil(surv / 32.0);
    }
  }
}

static int count_work(const char *mode, xt_model *const *instr, int ni, int nch) {
  xt_geometry g[9];
  if (poses(mode, g, 9)) {
    fprintf(stderr, "xtwin-instr-bench: unknown mode %s\n", mode);
    return 2;
  }
  const int cols = g[0].mode.cols, rows = g[0].mode.rows, S = XT_INSTR_AREA_SAMPLES;
  const int ntiles = ((cols + 15) / 16) * ((rows + 15) / 16);
  unsigned char *tile = malloc((size_t)ntiles);
  if (!tile) return 1;
  work w = {0};
  for (int i = 0; i < 9; i++) count_frame(&g[i], instr, ni, &w, tile);
  free(tile);
  const double n = 9.0, planes = nch > 0 ? nch : 1;
  printf("xtwin-instr-bench --count: %s, %d instruments, %d sub-rays per pixel, %d channel planes; per frame "
         "(mean of 9 poses), the splat of proj_instr.cu mirrored on the host:\n", mode, ni, S * S, nch);
  printf("  segments (warps)              %12.0f  (%.0f threads, %.0f blocks of 96)\n", w.segs / n, 32 * w.segs / n,
         ceil(w.segs / n / 3));
  printf("  segments in the field         %12.0f\n", w.seen / n);
  printf("  footprint pixels tested       %12.0f  (%.1f per segment in the field; %.0f warp passes)\n", w.foot / n,
         w.foot / fmax(1, w.seen), w.near_passes / n);
  printf("  candidate pixels              %12.0f  (%.1f per segment; the CPU's whole-diagonal bound: %.0f)\n",
         w.cand / n, w.cand / fmax(1, w.seen), w.cand_ref / n);
  printf("  sub-rays (closed forms)       %12.0f  (of %.0f in the candidates: refused halves skipped)\n",
         w.subrays / n, w.cand / n * S * S);
  printf("  sub-rays meeting the tube     %12.0f  (warp passes of 32 sub-rays with one: %.0f of %.0f)\n", w.met / n,
         w.passes_met / n, w.subrays / n / 32);
  printf("  compact splat (XT_INSTR_SPLAT) %12.0f  pre-test survivors, in %.0f batches of 32 (%.1f %% of lanes busy; "
         "the default's %.1f %%); chords refused by the pre-test: %.0f (must be 0)\n", w.surv / n, w.batches / n,
         100.0 * w.surv / fmax(1, 32 * w.batches), 100.0 * w.met / fmax(1, w.subrays), w.maybe_missed);
  printf("  default splat's gate          %12.0f  candidate halves with a pre-test survivor: the closed form's passes "
         "(of %.0f); candidate pixels summed and reduced: %.0f\n", w.gated / n, w.subrays / n / 32, w.gated_px / n);
  printf("  factored closed form          max |xt_tube_fac_chords - xt_tube_chords| %.3g mm over all sub-rays; "
         "halves judged otherwise by xt_tube_fac_near: %.0f\n", w.dev_max, w.near_diff);
  printf("  pixel sums non-zero           %12.0f  (atomics: %.0f)\n", w.hit / n, w.hit / n * planes);
  printf("  non-zero chords skipped       %12.0f  (by the kernel's halves: must be 0; sums outside the CPU's candidates: "
         "%.0f)\n", w.refused, w.lost);
  printf("  run splat: runs (blocks)      %12.0f  (%.0f in the field; %d segments at most)\n", w.runs / n,
         w.runs_seen / n, XT_TUBE_RUN);
  printf("    candidate halves (passes)   %12.0f  (near passes %.0f; the segment splat: %.0f passes)\n", w.r_halves / n,
         w.r_near_passes / n, w.subrays / n / 32);
  printf("    closed forms                %12.0f  (%.0f of them with a chord; %.2f a sub-ray; the warp's iterations "
         "%.0f, %.2f a pass)\n", w.r_forms / n, w.r_met / n, w.r_forms / fmax(1, 32 * w.r_halves),
         w.r_iters / n, w.r_iters / fmax(1, w.r_halves));
  printf("    pixel sums                  %12.0f  (the segment splat's: %.0f pixel-segment sums)\n", w.r_hit / n,
         w.gated_px / n);
  printf("    non-zero chords skipped     %12.0f  (must be 0)\n", w.r_lost);
  printf("  tiles flagged                 %12.0f of %d  (finish: %.2f MB read+written of %.1f MB)\n", w.tiles / n,
         ntiles, w.tiles / n * 256 * planes * (8 + 8 + 4 + 4) / 1e6, (double)cols * rows * planes * (8 + 8 + 4 + 4) / 1e6);
  return 0;
}

int main(int argc, char **argv) {
  int frames = 200, ni = 10, npts = 2000, count = 0, cath = 0;
  const char *mode = "fd20-1024";
  xt_backend b = XT_BACKEND_CUDA;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--instruments") && i + 1 < argc) ni = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--points") && i + 1 < argc) npts = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--count")) count = 1;
    else if (!strcmp(argv[i], "--catheters")) cath = 1;
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !xt_backend_parse(argv[i + 1], &b)) i++;
    else {
      fprintf(stderr, "usage: xtwin-instr-bench [--frames N] [--instruments N] [--points N] [--mode M] "
                      "[--backend cuda|cpu] [--catheters] [--count]\n"
                      "  environment, read by the CUDA projector at create: XT_INSTR_FUSED=1 (instruments fused\n"
                      "  into the spectral projection), XT_INSTR_SPLAT=default|run|compact (the splat kernel)\n");
      return 2;
    }
  }
  if (frames < 1 || ni < 1 || ni > 30 || npts < 2 || npts > XT_INSTR_MAX_POINTS) {
    fprintf(stderr, "xtwin-instr-bench: --frames >= 1, --instruments 1..30, --points 2..%d\n", XT_INSTR_MAX_POINTS);
    return 2;
  }
  xt_msg msg = {{0}};
  int rc = count ? 0 : xt_proj_available(b, &msg);
  if (rc) {
    fprintf(stderr, "xtwin-instr-bench: %s\n", msg.text);
    return 77;
  }
  xt_model *models[32] = {NULL};
  int nm = 0;
  double *pts = malloc(sizeof(double) * 3 * (size_t)npts);
  if (!pts) return 1;
  rc = xt_phantom_thorax_model(1.25, &models[nm++], &msg);
  xt_instr_device gw;
  if (!rc) rc = cath ? xt_instr_catheter(&gw, "blood", npts, &msg) : xt_instr_guidewire(&gw, "blood", npts, &msg);
  if (!rc && cath) rc = xt_instr_lumen_region(&gw, NULL, &msg);
  for (int k = 0; k < ni && !rc; k++) {
    char name[32];
    snprintf(name, sizeof name, "wire%d", k);
    arc(k, 0, npts, pts);
    rc = xt_model_from_instr(&gw, pts, npts, name, &models[nm++], &msg);
  }
  if (count && !rc) { /* the channel planes the chain renders: the set of all the scene's models */
    xt_proj_options po = {XT_BACKEND_CPU, 0, 0};
    xt_proj *p = NULL;
    xt_chanset cs;
    rc = xt_proj_create(&po, &p, &msg);
    for (int i = 0; i < nm && !rc; i++) rc = xt_proj_add_model(p, models[i], &msg);
    if (!rc) rc = xt_proj_channels(p, &cs, &msg);
    xt_proj_destroy(p);
    if (!rc) rc = count_work(mode, models + 1, ni, cs.n);
    else fprintf(stderr, "xtwin-instr-bench: %s\n", msg.text);
    for (int i = 0; i < nm; i++) xt_model_free(models[i]);
    free(pts);
    return rc ? 1 : 0;
  }
  result base, with;
  if (!rc) rc = scene(b, mode, models, 1, NULL, 0, npts, frames, 0, &base, &msg);
  if (!rc) rc = scene(b, mode, models, nm, models + 1, ni, npts, frames, cath, &with, &msg);
  if (rc) {
    fprintf(stderr, "xtwin-instr-bench: %s\n", msg.text);
  } else {
    const int segs = xt_model_instr(models[1])->geom.nseg;
    printf("xtwin-instr-bench: %s, backend %s, thorax labels; %d %s of %d segments (%d sub-rays per "
           "pixel), %d frames\n", mode, xt_backend_name(b), ni, cath ? "catheters (lumen regions)" : "instruments",
           segs, XT_INSTR_AREA_SAMPLES * XT_INSTR_AREA_SAMPLES, frames);
    printf("  %-34s %10s %10s %10s %10s\n", "ms per frame", "device", "e2e", "reshape", "inject");
    printf("  %-34s %10.3f %10.3f %10s %10s\n", "thorax", base.device, base.e2e, "-", "-");
    if (cath)
      printf("  %-34s %10.3f %10.3f %10.3f %10.3f\n", "thorax + instruments", with.device, with.e2e, with.reshape,
             with.inject);
    else
      printf("  %-34s %10.3f %10.3f %10.3f %10s\n", "thorax + instruments", with.device, with.e2e, with.reshape, "-");
    printf("  %-34s %9.1f%% %9.1f%% %9.1f%%", "added",
           base.device > 0 ? 100.0 * (with.device / base.device - 1.0) : 0.0, 100.0 * (with.e2e / base.e2e - 1.0),
           100.0 * (with.reshape / base.e2e - 1.0));
    if (cath) printf(" %9.1f%%", 100.0 * (with.inject / base.e2e - 1.0));
    printf("   (target: e2e <= 10 %%)\n");
    if (b == XT_BACKEND_CUDA)
      printf("  path: thorax %s, thorax + instruments %s (XT_INSTR_FUSED=%s, XT_INSTR_SPLAT=%s, XT_INSTR_SIDE=%s)\n",
             base.fused ? "fused" : "planes", with.fused ? "fused" : "planes",
             getenv("XT_INSTR_FUSED") ? getenv("XT_INSTR_FUSED") : "unset",
             getenv("XT_INSTR_SPLAT") ? getenv("XT_INSTR_SPLAT") : "unset",
             getenv("XT_INSTR_SIDE") ? getenv("XT_INSTR_SIDE") : "unset");
  }
  for (int i = 0; i < nm; i++) xt_model_free(models[i]);
  free(pts);
  return rc ? 1 : 0;
}
