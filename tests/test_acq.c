/* The acquisition layer (acq/xt_acq.h) on the CPU: what a dataset asks of it. A batch of mono
 * exposures equals the same exposures made one by one, byte for byte, and fills each record as
 * xt_acq_expose does; a batch that mixes detector sizes or asks for the chain is refused before
 * anything renders. A first exposure (XT_ACQ_FIRST_EXPOSURE) after another equals the same
 * exposure on a fresh renderer, while without the flag lag and the recursive filter carry over. A
 * copy of the parameters that differs only in the struct's padding leaves the chain alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_exposure.h"
#include "xt_phantom.h"
#include "xt_test.h"

/* The head phantom (labels, 32^3 x 6 mm) on a CPU projector of 2 threads. */
static int head_renderer(xt_acq_renderer *r, xt_model **m) {
  int dim[3] = {32, 32, 32};
  xt_proj_options po = {XT_BACKEND_CPU, 2, 0};
  xt_proj *p = NULL;
  *m = NULL;
  if (xt_phantom_head_model(dim, 6, XT_VOXEL_U8, m, NULL) || xt_proj_create(&po, &p, NULL)) return -1;
  xt_acq_renderer_init(r, p, 2);
  return xt_acq_renderer_add_model(r, *m, NULL);
}

static void head_free(xt_acq_renderer *r, xt_model *m) {
  xt_acq_renderer_free(r);
  xt_proj_destroy(r->proj);
  xt_model_free(m);
}

static xt_pose pose_at(const xt_detector_mode *md, double primary, double secondary) {
  xt_pose p = xt_pose_default(md);
  p.primary_deg = primary;
  p.secondary_deg = secondary;
  return p;
}

/* The buffers hook: every plane the record asks for from one block the test owns. */
typedef struct planes {
  float *lineint;
  uint16_t *raw, *proc;
} planes;

static int give_planes(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  const planes *b = ctx;
  (void)msg;
  f->lineint.data = b->lineint;
  f->raw.data = b->raw;
  f->proc.data = b->proc;
  return 0;
}

XT_TEST(batch_equals_single_exposures) {
  enum { N = 3 };
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  XT_REQUIRE(md);
  const size_t px = (size_t)md->rows * md->cols;
  xt_acq_renderer r;
  xt_model *m = NULL;
  xt_msg msg;
  XT_REQUIRE(head_renderer(&r, &m) == 0);
  const double ang[N][2] = {{0, 0}, {30, 15}, {-90, -20}};
  float *one = malloc(sizeof *one * px * N), *all = malloc(sizeof *all * px * N);
  XT_REQUIRE(one && all);
  memset(all, 0xff, sizeof *all * px * N); /* NaN everywhere: a frame left unwritten shows */
  xt_acq_request q[N];
  xt_acq_frame f1[N], fb[N];
  for (int i = 0; i < N; i++) {
    memset(&q[i], 0, sizeof q[i]);
    q[i].pose = pose_at(md, ang[i][0], ang[i][1]);
    q[i].mode = md;
    q[i].model = m;
    q[i].want = XT_ACQ_WANT_LINEINT;
    q[i].counter = 100 + (uint64_t)i;
    q[i].pose_seq = 7 + (uint64_t)i;
  }
  /* one by one, through the buffers hook */
  for (int i = 0; i < N; i++) {
    planes b = {one + (size_t)i * px, NULL, NULL};
    xt_acq_request qi = q[i];
    qi.buffers = give_planes;
    qi.ctx = &b;
    XT_REQUIRE_MSG(xt_acq_expose(NULL, &r, &qi, &f1[i], &msg) == 0, "%s", msg.text);
  }
  /* as one batch (buffers is not called: the requests above set none) */
  XT_REQUIRE_MSG(xt_acq_expose_batch(&r, q, N, all, fb, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(one, all, sizeof *one * px * N) == 0);
  double sum = 0;
  for (size_t k = 0; k < px * N; k++) sum += all[k];
  XT_CHECK_MSG(sum > 1000, "line integrals sum to %g: nothing rendered?", sum);
  for (int i = 0; i < N; i++) {
    XT_CHECK(fb[i].step == XT_ACQ_STEP_DONE);
    XT_CHECK(fb[i].counter == 100 + (uint64_t)i && fb[i].pose_seq == 7 + (uint64_t)i);
    XT_CHECK(memcmp(fb[i].geom.P, f1[i].geom.P, sizeof fb[i].geom.P) == 0);
    XT_CHECK(memcmp(fb[i].P_edge, f1[i].P_edge, sizeof fb[i].P_edge) == 0);
    XT_CHECK(fb[i].has_placement && memcmp(&fb[i].placement, &f1[i].placement, sizeof fb[i].placement) == 0);
    XT_CHECK(fb[i].lineint.data == all + (size_t)i * px);
    XT_CHECK(fb[i].lineint.rows == md->rows && fb[i].lineint.cols == md->cols && fb[i].lineint.elem == sizeof(float));
    XT_CHECK(fb[i].lineint_ms >= 0 && fb[i].t_done_ns >= fb[i].t_render_ns && fb[i].t_render_ns > 0);
    XT_CHECK(!fb[i].chain && fb[i].raw.data == NULL && fb[i].channels.data == NULL);
  }
  /* caller-made geometries render the same */
  xt_geometry g[N];
  xt_acq_request qg[N];
  for (int i = 0; i < N; i++) {
    g[i] = f1[i].geom;
    qg[i] = q[i];
    qg[i].geom = &g[i];
    qg[i].mode = NULL;
  }
  memset(all, 0xff, sizeof *all * px * N);
  XT_REQUIRE_MSG(xt_acq_expose_batch(&r, qg, N, all, fb, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(one, all, sizeof *one * px * N) == 0);
  /* refused before rendering: another detector size, the chain, no buffer, a negative count */
  xt_acq_request bad[2] = {q[0], q[1]};
  bad[1].mode = xt_mode_find("fd20-256");
  XT_REQUIRE(bad[1].mode && bad[1].mode->rows != md->rows);
  memset(all, 0xff, sizeof *all * px * N);
  XT_CHECK(xt_acq_expose_batch(&r, bad, 2, all, fb, &msg) == XT_EINVAL);
  const uint32_t *bits = (const uint32_t *)all;
  XT_CHECK(bits[0] == 0xffffffffu && bits[px - 1] == 0xffffffffu); /* nothing rendered */
  bad[1] = q[1];
  bad[1].chain = 1;
  bad[1].chain_prm = xt_chain_params_default();
  XT_CHECK(xt_acq_expose_batch(&r, bad, 2, all, fb, &msg) == XT_EINVAL);
  bad[1] = q[1];
  bad[1].want = XT_ACQ_WANT_LINEINT | XT_ACQ_WANT_CHANNELS;
  XT_CHECK(xt_acq_expose_batch(&r, bad, 2, all, fb, &msg) == XT_EINVAL);
  XT_CHECK(xt_acq_expose_batch(&r, q, N, NULL, fb, &msg) == XT_EINVAL);
  XT_CHECK(xt_acq_expose_batch(&r, q, -1, all, fb, &msg) == XT_EINVAL);
  XT_CHECK(xt_acq_expose_batch(&r, q, 0, all, fb, &msg) == 0);
  free(one);
  free(all);
  head_free(&r, m);
}

/* The chain with lag and the recursive filter on (the defaults), noise on. */
static xt_chain_params lag_params(void) {
  xt_chain_params p = xt_chain_params_default();
  p.seed = 2323;
  return p;
}

/* Exposure `counter` of the pose (primary, secondary) on r, with flags, into raw and proc. */
static int chain_exposure(xt_acq_renderer *r, const xt_detector_mode *md, double primary, double secondary,
                          uint64_t counter, int flags, uint16_t *raw, uint16_t *proc, xt_msg *msg) {
  planes b = {NULL, raw, proc};
  xt_acq_request q;
  xt_acq_frame f;
  memset(&q, 0, sizeof q);
  q.pose = pose_at(md, primary, secondary);
  q.mode = md;
  q.want = XT_ACQ_WANT_CHAIN;
  q.chain = 1;
  q.chain_prm = lag_params();
  q.flags = flags;
  q.counter = counter;
  q.buffers = give_planes;
  q.ctx = &b;
  return xt_acq_expose(NULL, r, &q, &f, msg);
}

XT_TEST(first_exposure_forgets_what_came_before) {
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  XT_REQUIRE(md);
  const size_t px = (size_t)md->rows * md->cols;
  xt_acq_renderer r;
  xt_model *m = NULL;
  xt_msg msg;
  XT_REQUIRE(head_renderer(&r, &m) == 0);
  uint16_t *u = malloc(sizeof *u * px * 6);
  XT_REQUIRE(u);
  uint16_t *raw_alone = u, *proc_alone = u + px, *raw_first = u + 2 * px, *proc_first = u + 3 * px,
           *raw_cont = u + 4 * px, *proc_cont = u + 5 * px;
  /* frame 1 (LAO 30) alone: the renderer's first exposure */
  XT_REQUIRE_MSG(chain_exposure(&r, md, 30, 0, 1, 0, raw_alone, proc_alone, &msg) == 0, "%s", msg.text);
  xt_acq_renderer_free(&r); /* the chain made afresh on the next exposure */
  /* frame 0 (AP) then frame 1 as a first exposure: the same as alone */
  XT_REQUIRE_MSG(chain_exposure(&r, md, 0, 0, 0, 0, raw_cont, proc_cont, &msg) == 0, "%s", msg.text);
  XT_REQUIRE_MSG(chain_exposure(&r, md, 30, 0, 1, XT_ACQ_FIRST_EXPOSURE, raw_first, proc_first, &msg) == 0, "%s",
                 msg.text);
  XT_CHECK(memcmp(raw_first, raw_alone, sizeof *u * px) == 0);
  XT_CHECK(memcmp(proc_first, proc_alone, sizeof *u * px) == 0);
  /* frame 0 then frame 1 without the flag, the same run: lag and the filter carry frame 0 over */
  XT_REQUIRE_MSG(chain_exposure(&r, md, 0, 0, 0, XT_ACQ_FIRST_EXPOSURE, raw_cont, proc_cont, &msg) == 0, "%s",
                 msg.text);
  XT_REQUIRE_MSG(chain_exposure(&r, md, 30, 0, 1, 0, raw_cont, proc_cont, &msg) == 0, "%s", msg.text);
  XT_CHECK(memcmp(raw_cont, raw_alone, sizeof *u * px) != 0);
  XT_CHECK(memcmp(proc_cont, proc_alone, sizeof *u * px) != 0);
  /* and the flag again: the carried states are gone */
  XT_REQUIRE_MSG(chain_exposure(&r, md, 30, 0, 1, XT_ACQ_FIRST_EXPOSURE, raw_first, proc_first, &msg) == 0, "%s",
                 msg.text);
  XT_CHECK(memcmp(raw_first, raw_alone, sizeof *u * px) == 0);
  XT_CHECK(memcmp(proc_first, proc_alone, sizeof *u * px) == 0);
  long long sat = 0, lo = 0;
  for (size_t k = 0; k < px; k++) sat += raw_alone[k] >= 16383, lo += raw_alone[k] < 16383;
  XT_CHECK_MSG(lo > (long long)px / 10, "%lld of %zu raw pixels below the ADC's ceiling", lo, px);
  free(u);
  head_free(&r, m);
}

/* Equal values whose padding differs are the same parameters: the chain is not given them (its
 * copy keeps its bytes); a value that differs is given. */
XT_TEST(chain_params_compared_by_value) {
  const xt_detector_mode *md = xt_mode_find("fd20-128");
  XT_REQUIRE(md);
  xt_acq_renderer r;
  xt_model *m = NULL;
  xt_msg msg;
  XT_REQUIRE(head_renderer(&r, &m) == 0);
  xt_chain_params p = lag_params();
  XT_REQUIRE_MSG(xt_acq_renderer_chain(&r, &p, &msg) == 0, "%s", msg.text);
  xt_chain *c = r.chain;
  XT_REQUIRE(c);
  xt_chain_params before;
  memcpy(&before, xt_chain_get_params(c), sizeof before);
  xt_chain_params q;
  memset(&q, 0x5a, sizeof q); /* padding bytes no copy of p has */
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    XT_REQUIRE_MSG(xt_chain_param_set(&q, in->name, xt_chain_param_get(&p, in), &msg) == 0, "%s", msg.text);
  }
  XT_REQUIRE(memcmp(&q, &before, sizeof q) != 0); /* the struct has padding */
  XT_REQUIRE_MSG(xt_acq_renderer_chain(&r, &q, &msg) == 0, "%s", msg.text);
  XT_CHECK(r.chain == c);
  XT_CHECK(memcmp(xt_chain_get_params(c), &before, sizeof before) == 0);
  q.kv = 70;
  XT_REQUIRE_MSG(xt_acq_renderer_chain(&r, &q, &msg) == 0, "%s", msg.text);
  XT_CHECK(r.chain == c && xt_chain_get_params(c)->kv == 70);
  head_free(&r, m);
}

/* A smaller zoom field asks for more dose at the detector (IFU-p292): with dose-rate control on, a
 * plane whose mode carries a dose ratio of 3.3 (the FD20 15 cm field's) settles on a detector dose
 * 3.3 times the setting's, and its air kerma at the reference point rises with it; the setting
 * itself is left as it was. The two modes differ only in the ratio, so nothing else moves. */
XT_TEST(smaller_field_raises_air_kerma) {
  const xt_detector_mode *base = xt_mode_find("fd20-128");
  XT_REQUIRE(base && base->dose_ratio == 1.0);
  xt_detector_mode zoom = *base;
  zoom.dose_ratio = xt_mode_find("fd20-15")->dose_ratio;
  XT_REQUIRE(zoom.dose_ratio == 3.3);
  const size_t px = (size_t)base->rows * base->cols;
  uint16_t *u = malloc(sizeof *u * px * 2);
  XT_REQUIRE(u);
  planes b = {NULL, u, u + px};
  double measured[2], target[2], k_irp[2];
  for (int which = 0; which < 2; which++) {
    xt_acq_renderer r;
    xt_model *m = NULL;
    xt_msg msg;
    XT_REQUIRE(head_renderer(&r, &m) == 0);
    xt_acq_plane pl;
    xt_acq_plane_init(&pl);
    xt_acq_request q;
    memset(&q, 0, sizeof q);
    q.mode = which ? &zoom : base;
    q.pose = pose_at(q.mode, 0, 0);
    q.want = XT_ACQ_WANT_CHAIN;
    q.chain = 1;
    q.chain_prm = lag_params();
    XT_REQUIRE(xt_protocol_apply(&q.chain_prm, XT_PROTOCOL_FLUORO_NORMAL, &msg) == 0);
    q.chain_prm.lag = 0;
    q.run = 1;
    q.buffers = give_planes;
    q.ctx = &b;
    xt_acq_frame f;
    for (int k = 0; k < 3 * XT_DRC_SETTLE_FRAMES; k++) {
      q.counter = (uint64_t)k;
      XT_REQUIRE_MSG(xt_acq_expose(&pl, &r, &q, &f, &msg) == 0, "%s", msg.text);
    }
    XT_CHECK(q.chain_prm.drc_target_ngy == 40); /* fluoro_normal's: the request is not scaled */
    target[which] = f.prm.drc_target_ngy;
    measured[which] = f.measured_ngy;
    k_irp[which] = f.dose.k_irp_mgy;
    xt_acq_plane_destroy(&pl);
    head_free(&r, m);
  }
  XT_CHECK_NEAR(target[0], 40, 1e-12);
  XT_CHECK_NEAR(target[1], 40 * 3.3, 1e-9);
  for (int i = 0; i < 2; i++)
    XT_CHECK_MSG(fabs(measured[i] / target[i] - 1) < 0.1, "measured %.1f nGy for a target of %.1f", measured[i],
                 target[i]);
  /* the loop buys the dose with mAs and kV: the air kerma rises about as the detector dose does */
  XT_CHECK_MSG(k_irp[1] / k_irp[0] > 2.5 && k_irp[1] / k_irp[0] < 4.5, "air kerma %.4g -> %.4g mGy", k_irp[0],
               k_irp[1]);
  free(u);
}

/* The plane's latch: the request carries the whole setting, the run and the next frame number;
 * the number moves only on advance (a refused exposure takes none), a new run is a new number. */
XT_TEST(plane_latch_counts_and_runs) {
  xt_acq_plane pl;
  xt_acq_plane_init(&pl);
  pl.set.mode = xt_mode_find("fd20-128");
  pl.set.pose = xt_pose_default(pl.set.mode);
  pl.set.pose.primary_deg = 12.5;
  pl.set.pose_seq = 9;
  pl.set.t_pose_ns = 77;
  pl.set.chain = 1;
  pl.set.chain_prm = xt_chain_params_default();
  pl.set.chain_prm.seed = 4242;
  pl.set.pixel_format = 2;
  pl.next_counter = 5;
  xt_acq_request q;
  memset(&q, 0xab, sizeof q); /* every field the latch leaves must come out zero */
  xt_acq_plane_latch(&pl, &q);
  XT_CHECK(q.counter == 5 && q.run == 0 && q.pose.primary_deg == 12.5 && q.mode == pl.set.mode);
  XT_CHECK(q.chain == 1 && q.chain_prm.seed == 4242 && q.pixel_format == 2 && q.pose_seq == 9 && q.t_pose_ns == 77);
  XT_CHECK(q.geom == NULL && q.model == NULL && q.want == 0 && q.flags == 0 && q.admit == NULL && q.buffers == NULL);
  XT_CHECK(q.t_sched_ns == 0 && q.t_exposure_ns == 0 && q.period_ns == 0);
  xt_acq_plane_latch(&pl, &q);
  XT_CHECK(q.counter == 5); /* not advanced: the same number again */
  xt_acq_plane_advance(&pl);
  xt_acq_plane_new_run(&pl);
  xt_acq_plane_latch(&pl, &q);
  XT_CHECK(q.counter == 6 && q.run == 1);
  xt_acq_plane_destroy(&pl);
}

XT_TEST_MAIN(XT_ENTRY(plane_latch_counts_and_runs) XT_ENTRY(batch_equals_single_exposures) XT_ENTRY(first_exposure_forgets_what_came_before)
                 XT_ENTRY(chain_params_compared_by_value) XT_ENTRY(smaller_field_raises_air_kerma))
