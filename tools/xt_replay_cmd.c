/* xtwin replay LOG --out DIR: the frames of a server session again, from its session log
 * (xtwin-server --session-log; docs/session-log.md). The log's first line names the backend, the
 * projector's threads, the configuration and the models as the server loaded them; each frame line
 * is the request the server's plane latched. The replay builds the same scene, then exposes every
 * frame through its plane (A, or B of a biplane log) and that plane's renderer in the log's order, as the server's chain frames went
 * through its first worker in counter order (mono frames carry no state, so the worker that made
 * them does not matter): the dose-rate loop, lag and the recursive filter take the same path, and
 * each frame comes out as the stream message the server sent, bit for bit on the same backend but
 * for the per-client and per-delivery fields (t_render_done_ns, t_sent_ns, frames_dropped). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xt_acq.h"
#include "xt_cli.h"
#include "xt_contrast.h"
#include "xt_opt.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_record.h"
#include "xt_session.h"
#include "xt_stream.h"
#ifdef XT_HAVE_LOADERS
#include "xt_load.h"
#endif

#define CMD "replay"
#define MAX_MODELS 64
#define XF_CAP (MAX_MODELS * 16) /* the server's samples across a pulse, at most 16 */
#define MAX_REGIONS 16           /* the server keeps 8 */
#define MAX_INJ 64               /* the server keeps 32 acting at once */

/* The contrast state of one "contrast" line (its seq): the regions and their injections as the
 * server held them, so that a frame latched at that seq gets its regions' iodine at its exposure
 * time from the same function (xt_region_conc) with the same numbers. */
typedef struct contrast_state {
  uint32_t seq;
  int nregions, ninj;
  const xt_model *model[MAX_REGIONS];
  int label[MAX_REGIONS];
  xt_bolus b[MAX_REGIONS];
  xt_injection inj[MAX_INJ];
} contrast_state;

typedef struct replay_opts {
  const char *out;
  int backend; /* 0: the log's */
  int threads; /* 0: the log's */
} replay_opts;

static const xt_opt opts[] = {
    {"out", XT_OPT_STRING, "DIR", NULL, "required", 0, 0, NULL, offsetof(replay_opts, out),
     "folder for the frames (made if missing): one stream message per image, "
     "<run>-<counter>-<mono|raw|processed>.bin"},
    {"backend", XT_OPT_CHOICE, NULL, "log", NULL, 0, 0, "log|cpu|cuda", offsetof(replay_opts, backend),
     "render with this backend; bit-exact only on the log's"},
    {"threads", XT_OPT_INT, "N", "0", "the log's", 0, 256, NULL, offsetof(replay_opts, threads),
     "CPU projector threads (0: the log's)"},
};
enum { NOPTS = sizeof opts / sizeof opts[0] };

void xt_cmd_replay_help(FILE *out) {
  fprintf(out,
          "usage: xtwin replay LOG --out DIR [options]\n\n"
          "Renders the frames of an xtwin-server session again from its session log (--session-log),\n"
          "as the stream messages the server sent (docs/session-log.md).\n\n");
  xt_opt_print_help(opts, NOPTS, out);
}

typedef struct replay {
  xt_proj *proj;
  xt_acq_renderer rnd, rnd_b; /* plane B's (a biplane log): its own chain on the same projector */
  xt_acq_plane plane, plane_b;
  xt_model *models[MAX_MODELS];
  int nmodels;
  json_t *config;
  uint16_t *u16[2];
  float *f32;
  size_t cap;
  const char *out;
  long frames, images;
  xt_acq_xform *xf;                 /* a frame's model transforms (motion), every sample: XF_CAP */
  int moved;                        /* a frame moved the models: later ones set them all again */
  contrast_state *cs;               /* every contrast line's state, in the log's order */
  size_t ncs, cscap;
  uint32_t contrast_seq;            /* the frame's, and its largest region's iodine: its header's */
  float iodine_max;
} replay;

static int add_model(replay *r, xt_model *m, xt_msg *msg) {
  if (r->nmodels == MAX_MODELS) {
    xt_model_free(m);
    return xt_fail(msg, XT_ETOOLARGE, "more than %d models", MAX_MODELS);
  }
  r->models[r->nmodels++] = m;
  return xt_acq_renderer_add_model(&r->rnd, m, msg);
}

/* A model by path with the server's loader settings (its logged configuration). */
static int load_path(replay *r, const char *path, const char *name, const char *convert, xt_msg *msg) {
#ifdef XT_HAVE_LOADERS
  xt_load_options opt;
  memset(&opt, 0, sizeof opt);
  const json_t *c = r->config;
  int rc = xt_load_options_named(convert, json_string_value(json_object_get(c, "hu_model")),
                                 json_number_value(json_object_get(c, "ct_energy")),
                                 json_string_value(json_object_get(c, "nifti_transform")),
                                 json_string_value(json_object_get(c, "nan_value")), &opt, msg);
  if (rc) return rc;
  xt_model *m = NULL;
  rc = xt_model_load(path, &opt, name, &m, msg);
  return rc ? rc : add_model(r, m, msg);
#else
  (void)r, (void)name, (void)convert;
  return xt_fail(msg, XT_EUNSUPPORTED, "model %s: this xtwin was built without the volume loaders", path);
#endif
}

static int session_line(replay *r, const json_t *o, const replay_opts *ro, xt_msg *msg) {
  const json_t *v = json_object_get(o, "version");
  if (!json_is_integer(v) || json_integer_value(v) != XT_SESSION_LOG_VERSION)
    return xt_fail(msg, XT_EUNSUPPORTED, "session log version %" JSON_INTEGER_FORMAT ", this xtwin reads %d",
                   json_is_integer(v) ? json_integer_value(v) : -1, XT_SESSION_LOG_VERSION);
  if (json_is_true(json_object_get(o, "synthetic")))
    return xt_fail(msg, XT_EUNSUPPORTED, "a synthetic session (transport benchmark): its frames were never rendered");
  const char *bname = json_string_value(json_object_get(o, "backend"));
  xt_backend b;
  if (ro->backend == 1) b = XT_BACKEND_CPU;
  else if (ro->backend == 2) b = XT_BACKEND_CUDA;
  else if (!bname || xt_backend_parse(bname, &b))
    return xt_fail(msg, XT_EFORMAT, "session.backend: '%s'", bname ? bname : "");
  int threads = ro->threads;
  if (!threads) threads = (int)json_integer_value(json_object_get(o, "threads"));
  r->config = json_incref(json_object_get(o, "config"));
  xt_proj_options po = {b, threads, 0};
  int rc = xt_proj_create(&po, &r->proj, msg);
  if (rc) return rc;
  xt_acq_renderer_init(&r->rnd, r->proj, threads);
  xt_acq_renderer_init(&r->rnd_b, r->proj, threads);
  const json_t *models = json_object_get(o, "models"), *m;
  size_t i;
  json_array_foreach(models, i, m) {
    const char *phantom = json_string_value(json_object_get(m, "phantom"));
    const char *path = json_string_value(json_object_get(m, "path"));
    if (phantom && !strcmp(phantom, "head")) {
      const int d = (int)json_integer_value(json_object_get(m, "dim")), dim[3] = {d, d, d};
      xt_model *hm = NULL;
      if ((rc = xt_phantom_head_model(dim, json_number_value(json_object_get(m, "spacing")), XT_VOXEL_F32, &hm, msg)) ||
          (rc = add_model(r, hm, msg)))
        return rc;
    } else if (phantom && !strcmp(phantom, "thorax")) { /* issue 26: the built-in patient and its wire */
      xt_model *tm = NULL;
      if ((rc = xt_phantom_thorax_model(json_number_value(json_object_get(m, "spacing")), &tm, msg)) ||
          (rc = add_model(r, tm, msg)))
        return rc;
    } else if (phantom && !strcmp(phantom, "thorax-guidewire")) {
      xt_model *wm = NULL;
      if ((rc = xt_phantom_thorax_wire_model((int)json_integer_value(json_object_get(m, "max_points")), &wm, msg)) ||
          (rc = add_model(r, wm, msg)))
        return rc;
    } else if (path) {
      if ((rc = load_path(r, path, json_string_value(json_object_get(m, "name")),
                          json_string_value(json_object_get(m, "convert")), msg)))
        return rc;
    } else return xt_fail(msg, XT_EUNSUPPORTED, "session.models[%zu]: neither the head phantom nor a file", i);
  }
  return 0;
}

static int give(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  replay *r = ctx;
  const size_t need = (size_t)f->geom.mode.rows * f->geom.mode.cols; /* the render grid: no plane is larger */
  if (need > r->cap) {
    free(r->f32);
    free(r->u16[0]);
    free(r->u16[1]);
    r->f32 = malloc(need * sizeof *r->f32);
    r->u16[0] = malloc(need * sizeof *r->u16[0]);
    r->u16[1] = malloc(need * sizeof *r->u16[1]);
    r->cap = need;
    if (!r->f32 || !r->u16[0] || !r->u16[1]) {
      r->cap = 0;
      return xt_fail(msg, XT_ENOMEM, "out of memory for a %zu-pixel frame", need);
    }
  }
  f->lineint.data = r->f32;
  f->raw.data = r->u16[0];
  f->proc.data = r->u16[1];
  return 0;
}

/* One image of the frame as the stream message the server sent, written whole or not at all. */
static int write_image(replay *r, const xt_frame_fields *ff, const xt_acq_frame *fr, int lockstep, int kind, int rows,
                       int cols, int pixfmt, const void *px, size_t bytes, xt_msg *msg) {
  static const char *kinds[] = {"mono", "raw", "processed"};
  const xt_stream_delivery d = {kind,         rows, cols, pixfmt, bytes, lockstep ? XT_STREAM_FLAG_LOCKSTEP : 0u,
                                fr->t_done_ns};
  xt_stream_header h;
  xt_stream_header_encode(ff, &d, &h);
  h.contrast_seq = r->contrast_seq; /* as the server's worker sets them from its job */
  h.iodine_mg_ml_max = r->iodine_max;
  char path[4096], tmp[4200];
  /* plane B's frames (a biplane log) have runs and counters of their own: a name of their own too */
  snprintf(path, sizeof path, "%s/%06" PRIu64 "-%06" PRIu64 "-%s%s.bin", r->out, fr->run, fr->counter, kinds[kind],
           fr->plane ? "-b" : "");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: %s", tmp, strerror(errno));
  int bad = fwrite(&h, sizeof h, 1, f) != 1 || fwrite(px, 1, bytes, f) != bytes;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) {
    remove(tmp);
    return xt_fail(msg, XT_EIO, "%s: write failed", path);
  }
  r->images++;
  return 0;
}

static int get_num(const json_t *o, const char *what, size_t i, const char *key, double *v, xt_msg *msg) {
  const json_t *x = json_object_get(o, key);
  if (!json_is_number(x) || !isfinite(json_number_value(x)))
    return xt_fail(msg, XT_EFORMAT, "contrast.%s[%zu].%s: a number expected", what, i, key);
  *v = json_number_value(x);
  return 0;
}

static int get_ns(const json_t *o, size_t i, const char *key, int64_t *v, xt_msg *msg) {
  const json_t *x = json_object_get(o, key);
  if (!json_is_integer(x)) return xt_fail(msg, XT_EFORMAT, "contrast.injections[%zu].%s: an integer expected", i, key);
  *v = (int64_t)json_integer_value(x);
  return 0;
}

/* A "contrast" line: the state after an injection, stop or reset, kept under its seq. */
static int contrast_line(replay *r, const json_t *o, xt_msg *msg) {
  if (!r->proj) return xt_fail(msg, XT_EFORMAT, "a contrast line before the session line");
  const json_t *seq = json_object_get(o, "seq"), *regs = json_object_get(o, "regions"),
               *inj = json_object_get(o, "injections");
  if (!json_is_integer(seq) || json_integer_value(seq) <= 0 || json_integer_value(seq) > UINT32_MAX)
    return xt_fail(msg, XT_EFORMAT, "contrast.seq: a whole number > 0 expected");
  if (!json_is_array(regs) || json_array_size(regs) > MAX_REGIONS)
    return xt_fail(msg, XT_EFORMAT, "contrast.regions: an array of at most %d expected", MAX_REGIONS);
  if (!json_is_array(inj) || json_array_size(inj) > MAX_INJ)
    return xt_fail(msg, XT_EFORMAT, "contrast.injections: an array of at most %d expected", MAX_INJ);
  if (r->ncs == r->cscap) {
    const size_t cap = r->cscap ? 2 * r->cscap : 16;
    contrast_state *p = realloc(r->cs, cap * sizeof *p);
    if (!p) return xt_fail(msg, XT_ENOMEM, "out of memory");
    r->cs = p;
    r->cscap = cap;
  }
  contrast_state *c = &r->cs[r->ncs];
  memset(c, 0, sizeof *c);
  c->seq = (uint32_t)json_integer_value(seq);
  const json_t *x;
  size_t i;
  int rc;
  json_array_foreach(regs, i, x) {
    const char *model = json_string_value(json_object_get(x, "model")), *name = json_string_value(json_object_get(x, "name"));
    const json_t *lab = json_object_get(x, "label");
    int k = 0;
    while (model && k < r->nmodels && strcmp(r->models[k]->name, model)) k++;
    if (!model || k == r->nmodels)
      return xt_fail(msg, XT_EFORMAT, "contrast.regions[%zu].model: no model '%s'", i, model ? model : "");
    if (!name || !json_is_integer(lab) || json_integer_value(lab) < 0 || json_integer_value(lab) > 255)
      return xt_fail(msg, XT_EFORMAT, "contrast.regions[%zu]: a name and a label 0-255 expected", i);
    xt_bolus *b = &c->b[i];
    if ((rc = get_num(x, "regions", i, "flow_ml_s", &b->flow_ml_s, msg)) ||
        (rc = get_num(x, "regions", i, "arrival_s", &b->arrival_s, msg)) ||
        (rc = get_num(x, "regions", i, "alpha", &b->alpha, msg)) ||
        (rc = get_num(x, "regions", i, "beta_s", &b->beta_s, msg)) || (rc = xt_bolus_check(b, name, msg)))
      return rc;
    c->model[i] = r->models[k];
    c->label[i] = (int)json_integer_value(lab);
  }
  c->nregions = (int)json_array_size(regs);
  json_array_foreach(inj, i, x) {
    xt_injection *in = &c->inj[i];
    const char *region = json_string_value(json_object_get(x, "region"));
    int k = 0;
    while (region && k < c->nregions && strcmp(json_string_value(json_object_get(json_array_get(regs, (size_t)k), "name")), region)) k++;
    if (!region || k == c->nregions)
      return xt_fail(msg, XT_EFORMAT, "contrast.injections[%zu].region: no region '%s'", i, region ? region : "");
    in->region = k;
    in->stop_ns = INT64_MAX;
    if ((rc = get_num(x, "injections", i, "rate_ml_s", &in->rate_ml_s, msg)) ||
        (rc = get_num(x, "injections", i, "volume_ml", &in->volume_ml, msg)) ||
        (rc = get_num(x, "injections", i, "agent_mg_ml", &in->agent_mg_ml, msg)) ||
        (rc = get_ns(x, i, "t_start_ns", &in->t0_ns, msg)) ||
        (json_object_get(x, "t_stop_ns") && (rc = get_ns(x, i, "t_stop_ns", &in->stop_ns, msg))))
      return rc;
    if (!(in->rate_ml_s > 0.0 && in->volume_ml > 0.0 && in->agent_mg_ml > 0.0))
      return xt_fail(msg, XT_EFORMAT, "contrast.injections[%zu]: rate_ml_s, volume_ml and agent_mg_ml must be > 0", i);
  }
  c->ninj = (int)json_array_size(inj);
  r->ncs++;
  return 0;
}

/* The frame's regions' iodine at its exposure, from the state of its contrast_seq (none: 0, the
 * regions as loaded), as the server's latch computed it (contrast.c). */
static int frame_contrast(replay *r, const json_t *o, xt_acq_request *q, xt_acq_iodine *io, xt_msg *msg) {
  const json_t *seq = json_object_get(o, "contrast_seq");
  r->contrast_seq = 0;
  r->iodine_max = 0.f;
  if (!seq) return 0;
  if (!json_is_integer(seq) || json_integer_value(seq) < 0 || json_integer_value(seq) > UINT32_MAX)
    return xt_fail(msg, XT_EFORMAT, "frame.contrast_seq: a whole number >= 0 expected");
  r->contrast_seq = (uint32_t)json_integer_value(seq);
  if (!r->contrast_seq) return 0;
  const contrast_state *c = NULL; /* the latest line of that seq (seqs only grow) */
  for (size_t k = r->ncs; k-- > 0 && !c;)
    if (r->cs[k].seq == r->contrast_seq) c = &r->cs[k];
  if (!c) return xt_fail(msg, XT_EFORMAT, "frame.contrast_seq %u: no contrast line of that seq before it", r->contrast_seq);
  for (int k = 0; k < c->nregions; k++) {
    const double mg = xt_region_conc(c->inj, c->ninj, k, &c->b[k], (int64_t)q->t_exposure_ns);
    io[k] = (xt_acq_iodine){c->model[k], c->label[k], mg * 1e-3}; /* mg/mL -> g/cm^3, as the server */
    if (mg > r->iodine_max) r->iodine_max = (float)mg;
  }
  q->iodine = io;
  q->niodine = c->nregions;
  return 0;
}

static int frame_line(replay *r, const json_t *o, xt_msg *msg) {
  xt_acq_request q;
  int lockstep = 0;
  int rc = xt_session_frame_parse(o, &q, &lockstep, msg);
  if (rc) return rc;
  if (!r->proj) return xt_fail(msg, XT_EFORMAT, "a frame before the session line");
  /* motion: the transforms the server set, every sample; a still frame after moved ones puts the
   * models back where they were loaded (the server sends identities then) */
  if ((rc = xt_session_frame_motion(o, (const xt_model *const *)r->models, r->nmodels, r->xf, XF_CAP, &q, msg)))
    return rc;
  xt_acq_iodine iodine[MAX_REGIONS];
  if ((rc = frame_contrast(r, o, &q, iodine, msg))) return rc;
  if (q.nxforms) r->moved = 1;
  else if (r->moved) {
    for (int i = 0; i < r->nmodels; i++) r->xf[i] = (xt_acq_xform){r->models[i], xt_aff_identity()};
    q.xforms = r->xf;
    q.nxforms = r->nmodels;
    q.blur_samples = 1;
  }
  q.want = q.chain ? XT_ACQ_WANT_CHAIN : XT_ACQ_WANT_LINEINT;
  q.model = r->nmodels ? r->models[0] : NULL;
  q.buffers = give;
  q.ctx = r;
  xt_acq_frame fr;
  r->rnd_b.models = r->rnd.models; /* the models rnd added are on the projector both share */
  if ((rc = xt_acq_expose(q.plane ? &r->plane_b : &r->plane, q.plane ? &r->rnd_b : &r->rnd, &q, &fr, msg))) return rc;
  xt_frame_fields ff;
  xt_frame_fields_of(&fr, &ff);
  r->frames++;
  if (q.chain) {
    const size_t bytes = (size_t)fr.raw.rows * fr.raw.cols * 2;
    if ((rc = write_image(r, &ff, &fr, lockstep, XT_STREAM_KIND_RAW, fr.raw.rows, fr.raw.cols, XT_STREAM_PIX_U16,
                          fr.raw.data, bytes, msg)))
      return rc;
    return write_image(r, &ff, &fr, lockstep, XT_STREAM_KIND_PROCESSED, fr.proc.rows, fr.proc.cols, XT_STREAM_PIX_U16,
                       fr.proc.data, bytes, msg);
  }
  const size_t n = (size_t)fr.lineint.rows * fr.lineint.cols;
  const void *px = r->f32;
  size_t bytes = n * 4;
  if (q.pixel_format == XT_STREAM_PIX_U16) {
    xt_intensity_u16(r->f32, n, r->u16[0]);
    px = r->u16[0];
    bytes = n * 2;
  }
  return write_image(r, &ff, &fr, lockstep, XT_STREAM_KIND_MONO, fr.lineint.rows, fr.lineint.cols, q.pixel_format, px,
                     bytes, msg);
}

int xt_cmd_replay(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    xt_cmd_replay_help(stdout);
    return XT_EXIT_OK;
  }
  if (argc < 2 || argv[1][0] == '-') return xt_cli_say(CMD, XT_EXIT_USAGE, "usage: xtwin replay LOG --out DIR");
  const char *log = argv[1];
  replay_opts ro;
  int seen[NOPTS];
  xt_msg msg = {{0}};
  if (xt_opt_parse(opts, NOPTS, argc - 2, argv + 2, &ro, seen, &msg))
    return xt_cli_say(CMD, XT_EXIT_USAGE, "%s", msg.text);
  if (!ro.out) return xt_cli_say(CMD, XT_EXIT_USAGE, "--out: required");
  FILE *f = fopen(log, "r");
  if (!f) return xt_cli_say(CMD, XT_EXIT_RUNTIME, "%s: %s", log, strerror(errno));
  if (mkdir(ro.out, 0777) && errno != EEXIST) {
    fclose(f);
    return xt_cli_say(CMD, XT_EXIT_RUNTIME, "%s: %s", ro.out, strerror(errno));
  }
  replay r;
  memset(&r, 0, sizeof r);
  r.out = ro.out;
  if (!(r.xf = calloc(XF_CAP, sizeof *r.xf))) {
    fclose(f);
    return xt_cli_say(CMD, XT_EXIT_RUNTIME, "out of memory");
  }
  xt_acq_plane_init(&r.plane);
  xt_acq_plane_init(&r.plane_b);
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0;
  int rc = 0;
  while (!rc && getline(&line, &cap, f) > 0) {
    lineno++;
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (!o || !type) rc = xt_fail(&msg, XT_EFORMAT, "not a log line (%s)", o ? "no type" : je.text);
    else if (lineno == 1 && strcmp(type, "session"))
      rc = xt_fail(&msg, XT_EFORMAT, "the first line is not the session's");
    else if (!strcmp(type, "session"))
      rc = lineno == 1 ? session_line(&r, o, &ro, &msg) : xt_fail(&msg, XT_EFORMAT, "a second session line");
    else if (!strcmp(type, "frame")) rc = frame_line(&r, o, &msg);
    else if (!strcmp(type, "contrast")) rc = contrast_line(&r, o, &msg);
    else if (!strcmp(type, "model"))
      rc = load_path(&r, json_string_value(json_object_get(o, "path")), json_string_value(json_object_get(o, "name")),
                     json_string_value(json_object_get(o, "convert")), &msg);
    /* commands and events: the frames carry what they changed */
    json_decref(o);
  }
  int read_err = ferror(f);
  fclose(f);
  free(line);
  if (!rc && read_err) rc = xt_fail(&msg, XT_EIO, "read error");
  if (!rc && lineno == 0) rc = xt_fail(&msg, XT_EFORMAT, "empty log");
  xt_acq_renderer_free(&r.rnd);
  xt_acq_renderer_free(&r.rnd_b);
  if (r.proj) xt_proj_destroy(r.proj);
  for (int i = 0; i < r.nmodels; i++) xt_model_free(r.models[i]);
  xt_acq_plane_destroy(&r.plane);
  xt_acq_plane_destroy(&r.plane_b);
  free(r.xf);
  free(r.cs);
  json_decref(r.config);
  free(r.f32);
  free(r.u16[0]);
  free(r.u16[1]);
  if (rc) return xt_cli_say(CMD, XT_EXIT_RUNTIME, "%s:%ld: %s", log, lineno, msg.text);
  printf("replayed %ld frames (%ld images) into %s\n", r.frames, r.images, ro.out);
  return XT_EXIT_OK;
}
