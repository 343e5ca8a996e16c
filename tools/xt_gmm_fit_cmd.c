/* `xtwin gmm-fit`: fits a Gaussian mixture to a volume file or a built-in phantom (fit/xt_fit.h)
 * and writes it as .xgmm (native) or .gmm (the thesis's layout, chosen by the file name), then
 * reports the count, the bytes, the 3D PSNR of the mixture on the grid and the 2D PSNR/SSIM of
 * its renders against the voxel renders at the thesis's nine angles.
 *
 * Options are one table (fit_tab) driving parsing and --help. Everything that can be checked is
 * checked before the fit (options, input, output directory); the output appears whole or not at
 * all (the writers rename a finished temporary file). A progress bar goes to stderr when it is a
 * terminal. Every failure is one line on stderr; exit 2 for usage, 1 for runtime. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_bench.h"
#include "xt_cli.h"
#include "xt_ct_body.h"
#include "xt_fit.h"
#include "xt_gmm.h"
#include "xt_opt.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#ifdef XT_HAVE_LOADERS
#include "xt_hu.h"
#include "xt_load.h"
#endif

typedef struct fit_opts {
  int phantom;
  int phantom_size;
  double phantom_spacing;
  const char *volume;
  int convert;
  double energy;
  int classify;
  double body_hu;
  const char *out;
  int budget;
  double target_psnr;
  int iters;
  double lr, inflate, fit_cutoff, cutoff;
  int margin;
  int engine;
  int threads;
  int proj_iters, proj_poses, proj_size;
  int report;
  int report_size;
  const char *report_mode;
  int quiet;
  int help;
} fit_opts;

#define OFF(f) offsetof(fit_opts, f)
#define XT_FIT_STR_(x) #x
#define XT_FIT_STR(x) XT_FIT_STR_(x)
#define PHANTOM_CHOICES "head|head-labels|bench-head|bench-head-mu"
static const xt_opt fit_tab[] = {
    {"phantom", XT_OPT_CHOICE, NULL, "bench-head", NULL, 0, 0, PHANTOM_CHOICES, OFF(phantom),
     "built-in phantom (used unless --volume): the Shepp-Logan head (mu or labels), or the benchmark's "
     "7-material head of scene (a) (labels, or float mu)"},
    {"phantom-size", XT_OPT_INT, "N", "256", NULL, 2, 1024, NULL, OFF(phantom_size),
     "Shepp-Logan head: voxels per side"},
    {"phantom-spacing", XT_OPT_REAL, "MM", "1", NULL, 0.01, 20, NULL, OFF(phantom_spacing),
     "Shepp-Logan head: voxel size in mm"},
    {"volume", XT_OPT_STRING, "PATH", NULL, "none", 0, 0, NULL, OFF(volume),
     "fit a volume file instead: .nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd"},
    {"convert", XT_OPT_CHOICE, NULL, "hu", NULL, 0, 0, "mu|hu|hu-labels|labels", OFF(convert),
     "meaning of --volume's voxels (as xtwin render)"},
    {"energy", XT_OPT_REAL, "KEV", "60", NULL, 20, 150, NULL, OFF(energy), "effective energy for HU conversion"},
    {"classify", XT_OPT_CHOICE, NULL, "body", NULL, 0, 0, "body|off", OFF(classify),
     "--convert hu: body makes everything outside the patient the background before the fit (as xtwin "
     "nvdb-convert: docs/models.md, \"A CT's background\"), its error reported; off fits every voxel as loaded"},
    {"body-hu", XT_OPT_REAL, "HU", "-500", NULL, -1000, 1000, NULL, OFF(body_hu),
     "--classify body: the HU at and above which a voxel can be part of the patient"},
    {"out", XT_OPT_STRING, "FILE", NULL, "required", 0, 0, NULL, OFF(out),
     "output mixture: FILE.xgmm (native) or FILE.gmm (the thesis's layout, no labels)"},
    {"budget", XT_OPT_INT, "N", NULL, "30000, or fewer to keep the file within 1/20 of the dense float bytes", 1,
     50000000, NULL, OFF(budget), "at most N Gaussians"},
    {"target-psnr", XT_OPT_REAL, "DB", "0", NULL, 0, 200, NULL, OFF(target_psnr),
     "stop when the 3D PSNR reaches DB (0: run every iteration)"},
    {"iters", XT_OPT_INT, "N", "150", NULL, 0, 100000, NULL, OFF(iters), "gradient-descent iterations on the volume error"},
    {"lr", XT_OPT_REAL, "X", "1", NULL, 1e-3, 100, NULL, OFF(lr), "learning-rate scale"},
    {"inflate", XT_OPT_REAL, "X", "1.8", NULL, 1, 4, NULL, OFF(inflate),
     "moment matching: widen each block's sigma by X so that neighbours blend"},
    {"fit-cutoff", XT_OPT_REAL, "K", "4", NULL, 2, 8, NULL, OFF(fit_cutoff),
     "Mahalanobis radius the fit evaluates each Gaussian to"},
    {"cutoff", XT_OPT_REAL, "K", "4.8", NULL, XT_GMM_CUTOFF_MIN, XT_GMM_CUTOFF_MAX, NULL, OFF(cutoff),
     "the written model's cut-off radius (docs/projector.md)"},
    {"margin", XT_OPT_INT, "N", XT_FIT_STR(XT_FIT_MARGIN_DEFAULT), NULL, 0, XT_FIT_MARGIN_MAX, NULL, OFF(margin),
     "empty voxels the fit adds beyond each face of the volume that carries mass (a CT cut through the "
     "patient), so that the Gaussians of a cut face do not spill mass past it; 0: none"},
    {"engine", XT_OPT_CHOICE, NULL, "auto", NULL, 0, 0, "auto|cpu|cuda", OFF(engine),
     "where the volume error is evaluated: the GPU when there is one (auto), or as named"},
    {"threads", XT_OPT_INT, "N", "0", NULL, 0, 1024, NULL, OFF(threads), "CPU threads, 0 = all cores"},
    {"proj-iters", XT_OPT_INT, "N", "0", NULL, 0, 100000, NULL, OFF(proj_iters),
     "then N steps on the volume error plus the projection error at --proj-poses poses (0: none)"},
    {"proj-poses", XT_OPT_INT, "N", "9", NULL, 1, 360, NULL, OFF(proj_poses), "poses of the projection refinement"},
    {"proj-size", XT_OPT_INT, "N", "128", NULL, 16, 2048, NULL, OFF(proj_size),
     "detector pixels per side of the projection refinement (thesis detector)"},
    {"report", XT_OPT_CHOICE, NULL, "auto", NULL, 0, 0, "auto|cpu|cuda|none", OFF(report),
     "backend of the 2D report (auto: cuda when available)"},
    {"report-size", XT_OPT_INT, "N", NULL, "1024 on cuda, 256 on cpu", 16, 4096, NULL, OFF(report_size),
     "report detector pixels per side (the detector's size in mm is kept)"},
    {"report-mode", XT_OPT_STRING, "NAME", "thesis", NULL, 0, 0, NULL, OFF(report_mode), "report detector mode"},
    {"quiet", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(quiet), "no progress bar"},
    {"help", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(help), "print this help and exit"},
};
#define NOPT ((int)(sizeof fit_tab / sizeof fit_tab[0]))

void xt_cmd_gmm_fit_help(FILE *out) {
  fprintf(out,
          "usage: xtwin gmm-fit --out FILE [options]\n"
          "\n"
          "Fits a Gaussian mixture to a volume or a built-in phantom: adaptive subdivision with one\n"
          "Gaussian per block by moment matching, then gradient descent on the volume error (and\n"
          "optionally on projections), stopping at --budget Gaussians / --iters / --target-psnr.\n"
          "Reports the count, the bytes, the 3D PSNR on the grid and the 2D PSNR/SSIM of GMM renders\n"
          "against voxel renders at the thesis's nine angles (0..180 deg). Method: docs/models.md.\n"
          "\n"
          "options:\n");
  xt_opt_print_help(fit_tab, NOPT, out);
  fprintf(out,
          "\n"
          "examples:\n"
          "  xtwin gmm-fit --phantom bench-head --budget 28000 --out head.xgmm\n"
          "  xtwin gmm-fit --volume ct.nii.gz --convert hu --budget 100000 --target-psnr 45 --out ct.xgmm\n"
          "  xtwin render --volume head.xgmm --mode fd20-512 --out out/gmm\n");
}

#define say(code, ...) xt_cli_say("gmm-fit", (code), __VA_ARGS__)

static int is_seen(const int *seen, const char *name) {
  int i = xt_opt_find(fit_tab, NOPT, name);
  return i >= 0 && seen[i];
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* The progress bar: one line on stderr, rewritten in place. */
static void progress(void *ctx, const char *stage, int done, int total, double psnr) {
  (void)ctx;
  const int width = 30;
  const int fill = total > 0 ? (int)((long)width * done / total) : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : ' ';
  bar[width] = 0;
  if (!strcmp(stage, "init")) fprintf(stderr, "\r  subdividing: %d blocks%20s", done, "");
  else
    fprintf(stderr, "\r  %-4s [%s] %d/%d  %s PSNR %.2f dB ", stage, bar, done, total, strcmp(stage, "proj") ? "3D" : "2D",
            psnr);
  fflush(stderr);
}

/* The model to fit: a phantom or a volume file, centred on the isocentre like xtwin render's
 * --place center (the report renders it so). */
static int make_model(const fit_opts *o, xt_model **out, xt_msg *msg) {
  int rc;
  xt_model *m = NULL;
  if (o->volume) {
#ifdef XT_HAVE_LOADERS
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
    xt_load_options lo = {.convert = conv[o->convert], .energy_kev = o->energy};
    if ((rc = xt_model_load(o->volume, &lo, NULL, &m, msg))) return rc;
    if (!xt_model_volume(m)) {
      const char *kind = xt_model_kind_name(m->kind); /* a static string: outlives the model */
      xt_model_free(m);
      return xt_fail(msg, XT_EINVAL, "%s: a %s model: gmm-fit fits voxel volumes", o->volume, kind);
    }
#else
    return xt_fail(msg, XT_EUNSUPPORTED, "volume loading not built into this xtwin");
#endif
  } else if (o->phantom <= 1) {
    int dim[3] = {o->phantom_size, o->phantom_size, o->phantom_size};
    if ((rc = xt_phantom_head_model(dim, o->phantom_spacing, o->phantom == 1 ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, msg)))
      return rc;
  } else if ((rc = xt_bench_head(o->phantom == 2 ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, msg))) {
    return rc;
  }
  xt_vec3 lo, hi;
  if ((rc = xt_model_bounds(m, &lo, &hi, msg))) {
    xt_model_free(m);
    return rc;
  }
  m->placement = xt_aff_identity();
  m->placement.t[0] = -0.5 * (lo.x + hi.x);
  m->placement.t[1] = -0.5 * (lo.y + hi.y);
  m->placement.t[2] = -0.5 * (lo.z + hi.z);
  *out = m;
  return 0;
}

int xt_cmd_gmm_fit(int argc, char **argv) {
  fit_opts o;
  int seen[XT_OPT_MAX];
  xt_msg msg = {{0}};
  xt_model *vm = NULL, *gm = NULL;
  xt_gmm *g = NULL;
  int code = XT_EXIT_OK, rc;
  memset(&o, 0, sizeof o);
  if (xt_opt_parse(fit_tab, NOPT, argc - 1, argv + 1, &o, seen, &msg)) {
    int hint = strncmp(msg.text, "unknown option", 14) == 0 || strncmp(msg.text, "unexpected", 10) == 0;
    return say(XT_EXIT_USAGE, "%s%s", msg.text, hint ? " (see xtwin gmm-fit --help)" : "");
  }
  if (o.help) {
    xt_cmd_gmm_fit_help(stdout);
    return XT_EXIT_OK;
  }
  if (!o.out) return say(XT_EXIT_USAGE, "--out: required (FILE.xgmm or FILE.gmm)");
  const int thesis = ends_with(o.out, ".gmm");
  if (!thesis && !ends_with(o.out, ".xgmm"))
    return say(XT_EXIT_USAGE, "--out: \"%s\": the name must end in .xgmm (native) or .gmm (thesis layout)", o.out);
  if (o.volume && is_seen(seen, "phantom")) return say(XT_EXIT_USAGE, "--phantom and --volume exclude each other");
  if (!o.volume && (is_seen(seen, "convert") || is_seen(seen, "energy")))
    return say(XT_EXIT_USAGE, "--%s: applies to --volume only", is_seen(seen, "convert") ? "convert" : "energy");
  /* a CT's surroundings become the background by default, as xtwin nvdb-convert does (HU input
   * only: the threshold is a HU); the noise of the air and the head rest would take Gaussians */
  const int classify = o.volume && o.convert == 1 && o.classify == 0;
  if ((is_seen(seen, "classify") || is_seen(seen, "body-hu")) && o.classify == 0 && !(o.volume && o.convert == 1))
    return say(XT_EXIT_USAGE, "--classify body / --body-hu: apply to --volume with --convert hu only");
  if ((o.volume || o.phantom > 1) && (is_seen(seen, "phantom-size") || is_seen(seen, "phantom-spacing")))
    return say(XT_EXIT_USAGE, "--%s: applies to the Shepp-Logan head only",
               is_seen(seen, "phantom-size") ? "phantom-size" : "phantom-spacing");
  if (!xt_mode_find(o.report_mode)) return say(XT_EXIT_USAGE, "--report-mode: unknown mode \"%s\" (see xtwin modes)", o.report_mode);
  /* the engine and the report's backend, before any work */
  xt_backend rb = XT_BACKEND_CPU;
  const int have_cuda = xt_proj_available(XT_BACKEND_CUDA, &msg) == 0;
  if (o.report == 0) rb = have_cuda ? XT_BACKEND_CUDA : XT_BACKEND_CPU;
  else if (o.report == 2) rb = XT_BACKEND_CUDA;
  if (o.report != 3 && rb == XT_BACKEND_CUDA && !have_cuda) return say(XT_EXIT_RUNTIME, "--report cuda: %s", msg.text);
  if (o.engine == 2 && !have_cuda) return say(XT_EXIT_RUNTIME, "--engine cuda: %s", msg.text);
  if (!is_seen(seen, "report-size")) o.report_size = rb == XT_BACKEND_CUDA ? 1024 : 256;
  if (o.volume) {
    struct stat st;
    if (stat(o.volume, &st) != 0) return say(XT_EXIT_RUNTIME, "--volume: \"%s\": %s", o.volume, strerror(errno));
    if (S_ISDIR(st.st_mode)) return say(XT_EXIT_RUNTIME, "--volume: \"%s\": is a directory", o.volume);
  }
  {
    /* the output's directory must exist and take files: probed with the writer's own temporary */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o.out);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return say(XT_EXIT_RUNTIME, "--out: \"%s\": no such directory", dir);
    if (access(dir, W_OK) != 0) return say(XT_EXIT_RUNTIME, "--out: \"%s\": %s", dir, strerror(errno));
  }

  if ((rc = make_model(&o, &vm, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s%s", o.volume ? "--volume: " : "", msg.text);
    goto done;
  }
  if (classify) {
#ifdef XT_HAVE_LOADERS
    xt_ct_body_report br;
    xt_hu_calib cal;
    if ((rc = xt_hu_calib_make(XT_HU_BILINEAR, o.energy, 0, &cal, &msg)) ||
        (rc = xt_ct_body_classify(xt_model_volume(vm), xt_hu_calib_mu(&cal, o.body_hu), 0.0, &br, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
    char line[512];
    xt_ct_body_format(&br, o.body_hu, line, sizeof line);
    printf("%s\n", line);
    fflush(stdout);
#endif
  }
  xt_fit_options fo = xt_fit_default_options();
  if (!is_seen(seen, "budget")) {
    /* a mixture is there to be small: by default its native file (a header and one record per
     * Gaussian) stays within 1/20 of the dense float volume, the compactness issue 29 asks of it */
    const size_t dense = xt_volume_voxels(xt_model_volume(vm)) * sizeof(float), head = sizeof(xt_gmm_header);
    const size_t fit = dense / 20 > head ? (dense / 20 - head) / sizeof(xt_gaussian) : 0;
    o.budget = fit < (size_t)fo.budget ? (fit > 0 ? (int)fit : 1) : fo.budget;
  }
  fo.budget = o.budget;
  fo.target_psnr = o.target_psnr;
  fo.iters = o.iters;
  fo.lr = o.lr;
  fo.inflate = o.inflate;
  fo.fit_cutoff = o.fit_cutoff;
  fo.cutoff = o.cutoff;
  fo.margin = o.margin;
  fo.threads = o.threads;
  fo.engine = o.engine == 0 ? XT_FIT_AUTO : (o.engine == 1 ? XT_FIT_CPU : XT_FIT_CUDA);
  fo.proj_iters = o.proj_iters;
  fo.proj_poses = o.proj_poses;
  fo.proj_size = o.proj_size;
  fo.proj_mode = o.report_mode;
  if (!o.quiet && isatty(fileno(stderr))) fo.progress = progress;
  xt_fit_result res;
  rc = xt_fit_volume(xt_model_volume(vm), &fo, &g, &res, &msg);
  if (fo.progress) fprintf(stderr, "\n");
  if (rc) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  if ((rc = thesis ? xt_gmm_write_thesis(o.out, g, &msg) : xt_gmm_write_native(o.out, g, &msg))) {
    code = say(XT_EXIT_RUNTIME, "--out: %s", msg.text);
    goto done;
  }
  const size_t fbytes = thesis ? 8 + g->count * 44 : xt_gmm_file_bytes(g);
  const xt_volume *vol = xt_model_volume(vm);
  const size_t dense = xt_volume_voxels(vol) * sizeof(float);
  printf("wrote %s: %zu Gaussians, %zu bytes (dense float volume %zu bytes: 1/%.1f)\n", o.out, g->count, fbytes, dense,
         (double)dense / fbytes);
  printf("3D PSNR on the %d x %d x %d grid (", res.grid[0], res.grid[1], res.grid[2]);
  if (res.grid[0] != vol->dim[0] || res.grid[1] != vol->dim[1] || res.grid[2] != vol->dim[2])
    printf("the volume's %d x %d x %d and %d empty voxels beyond each face with mass; ", vol->dim[0], vol->dim[1],
           vol->dim[2], o.margin);
  printf("peak = largest mu): initialisation %.2f dB, fitted %.2f dB", res.psnr3d_init, res.psnr3d);
  if (o.proj_iters > 0) printf(", after the projection refinement %.2f dB", res.psnr3d_proj);
  printf("\nengine %s, %d iterations, %.1f s\n", res.engine, res.iters, res.seconds);
  if (o.report != 3) {
    /* the mixture placed like the volume, both rendered from the nine angles */
    if ((rc = xt_model_from_gmm(g, "fitted", &gm, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
    g = NULL;
    gm->placement = vm->placement;
    double ps[9], ss[9];
    if ((rc = xt_fit_report(vm, gm, rb, o.report_mode, o.report_size, ps, ss, &msg))) {
      code = say(XT_EXIT_RUNTIME, "report: %s", msg.text);
      goto done;
    }
    static const int ang[9] = {0, 30, 45, 60, 90, 120, 135, 150, 180};
    printf("2D, GMM render vs voxel render (%s geometry, %d x %d, %s backend; PSNR peak = the frame's largest line "
           "integral):\n  angle ",
           o.report_mode, o.report_size, o.report_size, xt_backend_name(rb));
    for (int i = 0; i < 9; i++) printf("%7d", ang[i]);
    double pmin = 1e9, smin = 1e9, psum = 0, ssum = 0;
    printf("\n  PSNR  ");
    for (int i = 0; i < 9; i++) {
      printf("%7.2f", ps[i]);
      pmin = fmin(pmin, ps[i]);
      psum += ps[i];
    }
    printf("\n  SSIM  ");
    for (int i = 0; i < 9; i++) {
      printf("%7.4f", ss[i]);
      smin = fmin(smin, ss[i]);
      ssum += ss[i];
    }
    printf("\n  PSNR min %.2f mean %.2f dB; SSIM min %.4f mean %.4f\n", pmin, psum / 9, smin, ssum / 9);
  }
done:
  xt_model_free(gm);
  xt_gmm_free(g);
  xt_model_free(vm);
  return code;
}
