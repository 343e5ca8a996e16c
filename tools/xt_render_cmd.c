/* `xtwin render`: builds or loads one model, renders one frame per pose and writes each frame as
 * PREFIX.npy (float32 line integrals), PREFIX.png (16-bit intensity) and PREFIX.json (sidecar); with
 * --chain also the imaging chain's raw and processed detector frames (PREFIX_raw.png,
 * PREFIX_proc.png), every chain parameter an option generated from the chain's table.
 *
 * The options are one table (render_opts below) that drives parsing and --help. The command
 * checks everything it can before doing work (options, mode, poses, backend, input file, output
 * directory), then renders; outputs go through an xt_outset so that a failure anywhere leaves no
 * output file behind. Every failure is one line on stderr; exit 2 for usage, 1 for runtime. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "xt_chain.h"
#include "xt_dose.h"
#include "xt_drc.h"
#include "xt_exposure.h"
#include "xt_cli.h"
#include "xt_coverage.h"
#include "xt_geom.h"
#include "xt_model.h"
#include "xt_opt.h"
#include "xt_out.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_sidecar.h"
#ifdef XT_HAVE_LOADERS
#include "xt_load.h"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct render_opts {
  int phantom;
  int phantom_size;
  double phantom_spacing;
  const char *volume;
  const char *add;
  const char *grid;
  const char *ellipsoids;
  int labels;
  int convert;
  double energy;
  const char *series;
  double nan_value;
  int hu_model;
  double ct_energy;
  int nifti_transform;
  int place;
  double primary, secondary, detector_rot, sod, sid;
  double table[3];
  const char *mode;
  xt_opt_list angles;
  int backend;
  int threads;
  const char *out;
  int help;
  int chain;   /* --chain */
  int frame0;  /* --frame */
  double chain_vals[XT_OPT_MAX]; /* the generated chain options, by table index */
  int nan_fill; /* set from `seen` */
} render_opts;

#define OFF(f) offsetof(render_opts, f)
/* The order of the words in these choices is the order of the arrays that map them. */
#define PHANTOM_CHOICES "head|head-labels"
#define CONVERT_CHOICES "mu|hu|hu-labels|labels"
#define PLACE_CHOICES "center|native"
#define BACKEND_CHOICES "cpu|cuda"
#define HU_MODEL_CHOICES "bilinear|linear"
#define XFORM_CHOICES "sform|qform"
static const char *const convert_names[] = {"mu", "hu", "hu-labels", "labels"};
static const char *const place_names[] = {"center", "native"};

static const xt_opt fixed_tab[] = {
    {"phantom", XT_OPT_CHOICE, NULL, "head", NULL, 0, 0, PHANTOM_CHOICES, OFF(phantom),
     "built-in Shepp-Logan head: dense mu, or uint8 material labels (used unless --volume)"},
    {"phantom-size", XT_OPT_INT, "N", "256", NULL, 2, 1024, NULL, OFF(phantom_size), "phantom voxels per side"},
    {"phantom-spacing", XT_OPT_REAL, "MM", "1", NULL, 0.01, 20, NULL, OFF(phantom_spacing),
     "phantom voxel size in mm (the head is 138 x 184 x 180 mm)"},
    {"ellipsoids", XT_OPT_STRING, "FILE", NULL, "none", 0, 0, NULL, OFF(ellipsoids),
     "an ellipsoid phantom (JSON, see docs/models.md) instead of the head, voxelised on the "
     "--phantom-size/--phantom-spacing grid"},
    {"labels", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(labels),
     "voxelise --ellipsoids as painted material labels instead of additive mu"},
    {"volume", XT_OPT_STRING, "PATH", NULL, "none", 0, 0, NULL, OFF(volume),
     "render a model file instead: .nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd, DICOM (a folder, a .dcm file or "
     "@LIST, a text file naming the files of one series), a NanoVDB grid .nvdb, or a Gaussian mixture: .xgmm, "
     ".gmm (thesis layout), .gmm.json"},
    {"add", XT_OPT_STRING, "FILE[,FILE...]", NULL, "none", 0, 0, NULL, OFF(add),
     "further model files rendered in the same scene (line integrals add), placed like the main model: "
     "volumes, .nvdb, .xgmm, .gmm, .gmm.json (at most 7)"},
    {"grid-name", XT_OPT_STRING, "NAME", NULL, "the file's first", 0, 0, NULL, OFF(grid),
     "--volume .nvdb: the grid to render, by name"},
    {"convert", XT_OPT_CHOICE, NULL, "hu", NULL, 0, 0, CONVERT_CHOICES, OFF(convert),
     "meaning of --volume's voxels: mu in 1/mm, HU -> mu, HU -> material labels, integer labels "
     "(.nvdb: mu unless given; Int16 grids and grids converted from labels are labels anyway)"},
    {"energy", XT_OPT_REAL, "KEV", "60", NULL, 20, 150, NULL, OFF(energy),
     "effective energy for --volume's HU conversion and material table"},
    {"series", XT_OPT_STRING, "UID", NULL, "the only one", 0, 0, NULL, OFF(series),
     "DICOM: the Series Instance UID (or Series Number) to load from a folder holding several series"},
    {"nan-value", XT_OPT_REAL, "V", NULL, "refuse NaN", -1e9, 1e9, NULL, OFF(nan_value),
     "replace NaN voxels of --volume by V (in the file's units: HU for --convert hu, e.g. -1000) instead of refusing "
     "the file"},
    {"hu-model", XT_OPT_CHOICE, NULL, "bilinear", NULL, 0, 0, HU_MODEL_CHOICES, OFF(hu_model),
     "HU -> mu: bilinear (air-water and water-bone segments, bone from xraylib) or linear (mu_water (1 + HU/1000))"},
    {"ct-energy", XT_OPT_REAL, "KEV", "70", NULL, 20, 150, NULL, OFF(ct_energy),
     "bilinear HU -> mu: effective energy of the CT that measured the HU"},
    {"nifti-transform", XT_OPT_CHOICE, NULL, "sform", NULL, 0, 0, XFORM_CHOICES, OFF(nifti_transform),
     "NIfTI voxel-to-world map to use when both are set (the other is the fallback)"},
    {"place", XT_OPT_CHOICE, NULL, "center", NULL, 0, 0, PLACE_CHOICES, OFF(place),
     "center: the model's bounding-box centre at the patient origin (the isocentre at --table 0,0,0); "
     "native: the file's LPS coordinates as they are"},
    {"primary", XT_OPT_REAL, "DEG", "0", NULL, -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, NULL, OFF(primary),
     "primary angle, LAO + / RAO -"},
    {"secondary", XT_OPT_REAL, "DEG", "0", NULL, -XT_SECONDARY_MAX_DEG, XT_SECONDARY_MAX_DEG, NULL, OFF(secondary),
     "secondary angle, CRAN + / CAUD -"},
    {"detector-rot", XT_OPT_REAL, "DEG", "0", NULL, -XT_DETROT_MAX_DEG, XT_DETROT_MAX_DEG, NULL, OFF(detector_rot),
     "detector rotation in its plane about the central beam"},
    {"sod", XT_OPT_REAL, "MM", NULL, "the mode's", 1, XT_DIST_MAX_MM, NULL, OFF(sod), "source to isocentre distance"},
    {"sid", XT_OPT_REAL, "MM", NULL, "the mode's", 1, XT_DIST_MAX_MM, NULL, OFF(sid),
     "source to image (detector) distance; must exceed the SOD"},
    {"table", XT_OPT_VEC3, "X,Y,Z", "0,0,0", NULL, -XT_TABLE_MAX_MM, XT_TABLE_MAX_MM, NULL, OFF(table),
     "patient (table) translation in the room, LPS mm: world = patient + table"},
    {"mode", XT_OPT_STRING, "NAME", "fd20-512", NULL, 0, 0, NULL, OFF(mode), "detector mode (see: xtwin modes)"},
    {"angles", XT_OPT_LIST, "DEG,DEG,...", NULL, "none", -XT_PRIMARY_MAX_DEG, XT_PRIMARY_MAX_DEG, NULL, OFF(angles),
     "one frame per primary angle instead of --primary; files are named PREFIX_p<angle>.*"},
    {"backend", XT_OPT_CHOICE, NULL, "cpu", NULL, 0, 0, BACKEND_CHOICES, OFF(backend), "projector backend"},
    {"threads", XT_OPT_INT, "N", "0", NULL, 0, 1024, NULL, OFF(threads), "CPU backend worker threads, 0 = all cores"},
    {"out", XT_OPT_STRING, "PREFIX", "out/xtwin", NULL, 0, 0, NULL, OFF(out),
     "output prefix: PREFIX.npy, PREFIX.png, PREFIX.json; missing directories are created"},
    {"chain", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(chain),
     "also run the imaging chain (spectrum, CsI panel, noise, processing): PREFIX_raw.png and PREFIX_proc.png; "
     "the chain's parameters follow (docs/imaging.md)"},
    {"frame", XT_OPT_INT, "N", "0", NULL, 0, 2147483647, NULL, OFF(frame0),
     "--chain: the run's frame number of the first frame (it keys the noise; --angles frames follow it)"},
    {"help", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(help), "print this help and exit"},
};
#define NFIXED ((int)(sizeof fixed_tab / sizeof fixed_tab[0]))

/* The option table: the fixed options, then one per chain parameter (its name with '-' for '_',
 * its default, range and help from imaging's table), stored into chain_vals. */
static xt_opt full_tab[XT_OPT_MAX];
static char chain_names[XT_OPT_MAX][40], chain_defs[XT_OPT_MAX][32], chain_help[XT_OPT_MAX][200];
static int nopt;

static int option_table(void) {
  if (nopt) return nopt;
  int n = 0;
  for (int i = 0; i < NFIXED; i++) full_tab[n++] = fixed_tab[i];
  for (int i = 0; i < xt_chain_param_count() && n < XT_OPT_MAX; i++, n++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    snprintf(chain_names[i], sizeof chain_names[i], "%s", in->name);
    for (char *c = chain_names[i]; *c; c++)
      if (*c == '_') *c = '-';
    snprintf(chain_defs[i], sizeof chain_defs[i], "%.10g", in->def);
    snprintf(chain_help[i], sizeof chain_help[i], "--chain: %s%s%s%s", in->help, *in->unit ? " (" : "", in->unit,
             *in->unit ? ")" : "");
    full_tab[n] = (xt_opt){chain_names[i], XT_OPT_REAL, "X", chain_defs[i], NULL, in->lo, in->hi, NULL,
                           OFF(chain_vals) + sizeof(double) * (size_t)i, chain_help[i]};
  }
  nopt = n;
  return nopt;
}

void xt_cmd_render_help(FILE *out) {
  fprintf(out,
          "usage: xtwin render [options]\n"
          "\n"
          "Renders X-ray line integrals of a model (the built-in head phantom or a volume file) for one\n"
          "C-arm pose, or one frame per --angles entry, and writes for each frame:\n"
          "  PREFIX.npy   float32 line integrals L = integral of mu dl, shape (rows, cols)\n"
          "  PREFIX.png   16-bit grayscale intensity, pixel = round(65535 * exp(-L))\n"
          "  PREFIX.json  sidecar: units, pose, detector, geometry and projection matrix, model\n"
          "and with --chain the detector frames of the imaging chain:\n"
          "  PREFIX_raw.png   16-bit PNG of the panel's raw ADC codes (\"for processing\")\n"
          "  PREFIX_proc.png  16-bit PNG of the processed frame (\"for presentation\", 12 bits)\n"
          "All outputs of a run appear together or not at all.\n"
          "\n"
          "options:\n");
  xt_opt_print_help(full_tab, option_table(), out);
  fprintf(out,
          "\n"
          "examples:\n"
          "  xtwin render --phantom head --mode fd20-512 --primary 30 --secondary 15 --out out/head\n"
          "  xtwin render --phantom-size 128 --phantom-spacing 1.5 --angles -90,-45,0,45,90 --out out/sweep\n"
          "  xtwin render --volume ct.nii.gz --convert hu --place center --backend cuda --out out/ct\n"
          "  xtwin render --phantom head-labels --mode fd20-512 --chain --kv 70 --filter-cu-mm 0.2 --mas 0.05 --out out/fluoro\n"
          "  xtwin render --volume dicom/study --series 5 --nan-value -1000 --out out/study\n"
          "  xtwin render --volume head.xgmm --add vessels.nii.gz --convert labels --out out/mixed\n");
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define say(code, ...) xt_cli_say("render", (code), __VA_ARGS__)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static int xt_is_dicom(const char *path) {
#ifdef XT_HAVE_LOADERS
  return xt_dicom_path(path);
#else
  (void)path;
  return 0;
#endif
}

static int is_seen(const int *seen, const char *name) {
  int i = xt_opt_find(full_tab, option_table(), name);
  return i >= 0 && seen[i];
}

/* The projector's messages start with "backend cuda: "; ours already name the option. */
static const char *skip_backend(const char *text, xt_backend b) {
  char pre[32];
  snprintf(pre, sizeof pre, "backend %s: ", xt_backend_name(b));
  size_t n = strlen(pre);
  return strncmp(text, pre, n) == 0 ? text + n : text;
}

#define MAX_ADDED 7

/* Splits --add's comma-separated list into buf (in place) and paths; returns the count or -1. */
static int split_added(const char *list, char *buf, size_t cap, const char *paths[MAX_ADDED]) {
  snprintf(buf, cap, "%s", list);
  int n = 0;
  for (char *p = buf; p && *p;) {
    char *c = strchr(p, ',');
    if (c) *c = 0;
    if (!*p || n == MAX_ADDED) return -1;
    paths[n++] = p;
    p = c ? c + 1 : NULL;
  }
  return n;
}

typedef struct frame {
  xt_geometry geom;
  char stem[4096]; /* PREFIX or PREFIX_p<angle> */
  double lmin, lmax, ms;
} frame;

/* Builds (phantom) or loads (volume file) the model; places it. */
static int make_model(const render_opts *o, xt_model **out, xt_msg *msg) {
  int rc = 0;
  xt_model *m = NULL;
  *out = NULL;
  if (o->ellipsoids) {
#ifdef XT_HAVE_LOADERS
    int dim[3] = {o->phantom_size, o->phantom_size, o->phantom_size};
    double sp[3] = {o->phantom_spacing, o->phantom_spacing, o->phantom_spacing};
    int type = o->labels ? XT_VOXEL_U8 : XT_VOXEL_F32;
    xt_material_table mt;
    xt_phantom ph;
    xt_volume *v = NULL;
    if ((rc = xt_materials_default(XT_DEFAULT_ENERGY_KEV, &mt, msg)) ||
        (rc = xt_phantom_load_json(o->ellipsoids, &mt, &ph, msg)) ||
        (rc = xt_phantom_voxelize(&ph, dim, sp, type, &mt, &v, msg)))
      return rc;
    if ((rc = xt_model_from_volume(v, ph.name, &m, msg))) {
      xt_volume_free(v);
      return rc;
    }
#else
    return xt_fail(msg, XT_EUNSUPPORTED, "phantom files not built into this xtwin (no models/xt_load*.c at configure time)");
#endif
  } else if (!o->volume) {
    int dim[3] = {o->phantom_size, o->phantom_size, o->phantom_size};
    rc = xt_phantom_head_model(dim, o->phantom_spacing, o->phantom == 1 ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, msg);
    if (rc) return rc;
  } else {
#ifdef XT_HAVE_LOADERS
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
    xt_load_options lo = {.convert = conv[o->convert], .energy_kev = o->energy};
    lo.hu_model = o->hu_model == 1 ? XT_HU_LINEAR : XT_HU_BILINEAR;
    lo.ct_energy_kev = o->ct_energy;
    lo.nan_fill = o->nan_fill;
    lo.nan_value = o->nan_value;
    lo.nifti_xform = o->nifti_transform == 1 ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
    lo.dicom_series = o->series;
    lo.grid = o->grid;
    if ((rc = xt_model_load(o->volume, &lo, NULL, &m, msg))) return rc;
#else
    return xt_fail(msg, XT_EUNSUPPORTED, "volume loading not built into this xtwin (no models/xt_load*.c at configure time)");
#endif
  }
  if (o->place == 0) { /* center: the bounding box's centre at the patient origin */
    xt_vec3 lo, hi;
    if ((rc = xt_model_bounds(m, &lo, &hi, msg))) {
      xt_model_free(m);
      return rc;
    }
    m->placement = xt_aff_identity();
    m->placement.t[0] = -0.5 * (lo.x + hi.x);
    m->placement.t[1] = -0.5 * (lo.y + hi.y);
    m->placement.t[2] = -0.5 * (lo.z + hi.z);
  }
  *out = m;
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The command                                                                                */
/* ------------------------------------------------------------------------------------------ */

int xt_cmd_render(int argc, char **argv) {
  render_opts o;
  int seen[XT_OPT_MAX];
  xt_msg msg = {{0}};
  int code = XT_EXIT_OK, rc;
  frame *frames = NULL;
  int nframes = 0;
  xt_model *model = NULL;
  xt_model *added[MAX_ADDED] = {NULL};
  const char *added_paths[MAX_ADDED];
  char added_buf[4096];
  int nadded = 0;
  xt_proj *proj = NULL;
  xt_chain *chain = NULL;
  float *lineint = NULL;
  uint16_t *pix = NULL, *raw = NULL, *proc = NULL;
  xt_outset set;
  int set_live = 0;
  xt_outset_init(&set);
  memset(&o, 0, sizeof o);

  /* --- options ---------------------------------------------------------------------------- */
  if (option_table() != NFIXED + xt_chain_param_count())
    return say(XT_EXIT_RUNTIME, "internal: %d options exceed the table's room (XT_OPT_MAX %d)",
               NFIXED + xt_chain_param_count(), XT_OPT_MAX);
  if (xt_opt_parse(full_tab, option_table(), argc - 1, argv + 1, &o, seen, &msg)) {
    int hint = strncmp(msg.text, "unknown option", 14) == 0 || strncmp(msg.text, "unexpected", 10) == 0;
    return say(XT_EXIT_USAGE, "%s%s", msg.text, hint ? " (see xtwin render --help)" : "");
  }
  if (o.help) {
    xt_cmd_render_help(stdout);
    return XT_EXIT_OK;
  }
  if (o.volume && is_seen(seen, "phantom")) return say(XT_EXIT_USAGE, "--phantom and --volume exclude each other");
  if (o.ellipsoids && (o.volume || is_seen(seen, "phantom")))
    return say(XT_EXIT_USAGE, "--ellipsoids and --%s exclude each other", o.volume ? "volume" : "phantom");
  if (o.labels && !o.ellipsoids) return say(XT_EXIT_USAGE, "--labels: applies to --ellipsoids only");
  if (o.volume && (is_seen(seen, "phantom-size") || is_seen(seen, "phantom-spacing")))
    return say(XT_EXIT_USAGE, "--%s: applies to the phantom only, not to --volume",
               is_seen(seen, "phantom-size") ? "phantom-size" : "phantom-spacing");
  static const char *const volume_only[] = {"convert", "energy", "series", "nan-value", "hu-model", "ct-energy",
                                            "nifti-transform"};
  for (size_t k = 0; k < sizeof volume_only / sizeof volume_only[0]; k++) {
    const int for_added = k < 2 && o.add; /* --convert and --energy apply to added volumes too */
    if (!o.volume && !for_added && is_seen(seen, volume_only[k]))
      return say(XT_EXIT_USAGE, "--%s: applies to --volume only%s", volume_only[k], k < 2 ? " (and --add)" : "");
  }
  o.nan_fill = is_seen(seen, "nan-value");
  if (o.angles.n && is_seen(seen, "primary")) return say(XT_EXIT_USAGE, "--angles and --primary exclude each other");
  xt_chain_params cprm = xt_chain_params_default();
  if (!o.chain && is_seen(seen, "frame")) return say(XT_EXIT_USAGE, "--frame: applies with --chain only");
  /* --protocol first: a preset, which the other options given then adjust */
  for (int i = 0; i < xt_chain_param_count(); i++)
    if (seen[NFIXED + i] && o.chain && !strcmp(xt_chain_param_at(i)->name, "protocol") &&
        xt_exposure_set(&cprm, "protocol", o.chain_vals[i], &msg))
      return say(XT_EXIT_USAGE, "--protocol: %s", msg.text);
  for (int i = 0; i < xt_chain_param_count(); i++) {
    if (!seen[NFIXED + i]) continue;
    if (!o.chain) return say(XT_EXIT_USAGE, "--%s: applies with --chain only", chain_names[i]);
    if (!strcmp(xt_chain_param_at(i)->name, "protocol")) continue;
    if (xt_chain_param_set(&cprm, xt_chain_param_at(i)->name, o.chain_vals[i], &msg)) {
      const char *t = strchr(msg.text, ':'); /* "chain.name: why" -> "--name: why" */
      return say(XT_EXIT_USAGE, "--%s%s", chain_names[i], t ? t : msg.text);
    }
  }
  if (o.chain && xt_chain_params_validate(&cprm, &msg)) return say(XT_EXIT_USAGE, "--chain: %s", msg.text);
  if (o.add && (nadded = split_added(o.add, added_buf, sizeof added_buf, added_paths)) < 0)
    return say(XT_EXIT_USAGE, "--add: expected 1 to %d comma-separated file names", MAX_ADDED);
  {
    const size_t vl = o.volume ? strlen(o.volume) : 0;
    const int nvdb = vl > 5 && strcmp(o.volume + vl - 5, ".nvdb") == 0;
    if (o.grid && !nvdb) return say(XT_EXIT_USAGE, "--grid-name: applies to --volume FILE.nvdb only");
    if (nvdb && !is_seen(seen, "convert")) o.convert = 0; /* NanoVDB grids hold mu or labels, never HU */
  }

  const xt_detector_mode *mode = xt_mode_find(o.mode);
  if (!mode) return say(XT_EXIT_USAGE, "--mode: unknown mode \"%s\" (see xtwin modes)", o.mode);

  size_t plen = strlen(o.out);
  const char *pbase = base_name(o.out);
  if (!*pbase || strcmp(pbase, ".") == 0 || strcmp(pbase, "..") == 0)
    return say(XT_EXIT_USAGE, "--out: \"%s\" names a directory; give a file prefix such as \"%s%sxtwin\"", o.out, o.out,
               (plen && o.out[plen - 1] == '/') ? "" : "/");
  if (plen > 3900) return say(XT_EXIT_USAGE, "--out: prefix longer than 3900 characters");

  /* --- poses ------------------------------------------------------------------------------ */
  xt_pose pose = xt_pose_default(mode);
  pose.secondary_deg = o.secondary;
  pose.detector_rot_deg = o.detector_rot;
  if (is_seen(seen, "sod")) pose.sod_mm = o.sod;
  if (is_seen(seen, "sid")) pose.sid_mm = o.sid;
  pose.table_mm = xt_v3(o.table[0], o.table[1], o.table[2]);
  if (!(pose.sid_mm > pose.sod_mm))
    return say(XT_EXIT_USAGE, "--%s: the SID (%g mm) must exceed the SOD (%g mm)", is_seen(seen, "sid") ? "sid" : "sod",
               pose.sid_mm, pose.sod_mm);
  nframes = o.angles.n ? o.angles.n : 1;
  frames = calloc((size_t)nframes, sizeof *frames);
  if (!frames) return say(XT_EXIT_RUNTIME, "out of memory");
  for (int i = 0; i < nframes; i++) {
    frame *f = &frames[i];
    pose.primary_deg = o.angles.n ? o.angles.v[i] : o.primary;
    if ((rc = xt_geom_compute(&pose, mode, &f->geom, &msg))) {
      code = say(XT_EXIT_USAGE, "%s", msg.text);
      goto done;
    }
    if (o.angles.n) snprintf(f->stem, sizeof f->stem, "%s_p%g", o.out, o.angles.v[i]);
    else snprintf(f->stem, sizeof f->stem, "%s", o.out);
    for (int j = 0; j < i; j++)
      if (strcmp(frames[j].stem, f->stem) == 0) {
        code = say(XT_EXIT_USAGE, "--angles: %g is given twice", o.angles.v[i]);
        goto done;
      }
  }

  /* --- backend, input, output directory: checked before any heavy work ---------------------- */
  xt_backend backend = o.backend == 1 ? XT_BACKEND_CUDA : XT_BACKEND_CPU;
  if ((rc = xt_proj_available(backend, &msg))) {
    code = say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(backend), skip_backend(msg.text, backend));
    goto done;
  }
  if ((o.volume && !xt_is_dicom(o.volume)) || o.ellipsoids) { /* DICOM folders and @lists: the loader checks */
    const char *opt = o.volume ? "volume" : "ellipsoids", *path = o.volume ? o.volume : o.ellipsoids;
    struct stat st;
    if (stat(path, &st) != 0) {
      code = say(XT_EXIT_RUNTIME, "--%s: \"%s\": %s", opt, path, strerror(errno));
      goto done;
    }
    if (S_ISDIR(st.st_mode)) {
      code = say(XT_EXIT_RUNTIME, "--%s: \"%s\": is a directory", opt, path);
      goto done;
    }
  }
  for (int i = 0; i < nadded; i++) {
    struct stat st;
    if (stat(added_paths[i], &st) != 0) {
      code = say(XT_EXIT_RUNTIME, "--add: \"%s\": %s", added_paths[i], strerror(errno));
      goto done;
    }
    if (S_ISDIR(st.st_mode)) {
      code = say(XT_EXIT_RUNTIME, "--add: \"%s\": is a directory", added_paths[i]);
      goto done;
    }
  }
  set_live = 1;
  if ((rc = xt_outset_mkdirs(&set, o.out, &msg))) {
    code = say(XT_EXIT_RUNTIME, "--out: %s", msg.text);
    goto done;
  }
  {
    xt_outset probe;
    FILE *pf = NULL;
    char path[4200];
    xt_outset_init(&probe);
    snprintf(path, sizeof path, "%s.npy", frames[0].stem);
    rc = xt_outset_open(&probe, path, &pf, &msg);
    if (pf) fclose(pf);
    xt_outset_abort(&probe);
    xt_outset_free(&probe);
    if (rc) {
      code = say(XT_EXIT_RUNTIME, "--out: %s", msg.text);
      goto done;
    }
  }

  /* --- model and projector ------------------------------------------------------------------ */
  if ((rc = make_model(&o, &model, &msg))) {
    if (o.volume && !strstr(msg.text, o.volume))
      code = say(XT_EXIT_RUNTIME, "--volume: \"%s\": %s", o.volume, msg.text);
    else code = say(XT_EXIT_RUNTIME, "%s%s", o.volume ? "--volume: " : "", msg.text);
    goto done;
  }
  if (model->report) /* what the loader noticed: printed, and kept in every sidecar's "load" */
    for (int k = 0; k < model->report->nwarn; k++)
      say(0, "warning: %s [%s]", model->report->warn[k].text, model->report->warn[k].code);
  for (int i = 0; i < nadded; i++) {
#ifdef XT_HAVE_LOADERS
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
    xt_load_options lo = {.convert = conv[o.convert], .energy_kev = o.energy};
    lo.hu_model = o.hu_model == 1 ? XT_HU_LINEAR : XT_HU_BILINEAR;
    lo.ct_energy_kev = o.ct_energy;
    lo.nan_fill = o.nan_fill;
    lo.nan_value = o.nan_value;
    lo.nifti_xform = o.nifti_transform == 1 ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
    if ((rc = xt_model_load(added_paths[i], &lo, NULL, &added[i], &msg))) {
      code = say(XT_EXIT_RUNTIME, "--add: %s", msg.text);
      goto done;
    }
    added[i]->placement = model->placement; /* the scene's models share the main model's placement */
#else
    code = say(XT_EXIT_RUNTIME, "--add: model loading not built into this xtwin");
    goto done;
#endif
  }
  xt_proj_options po = {backend, o.threads, 0};
  if ((rc = xt_proj_create(&po, &proj, &msg)) || (rc = xt_proj_add_model(proj, model, &msg))) {
    code = say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(backend), skip_backend(msg.text, backend));
    goto done;
  }
  for (int i = 0; i < nadded; i++)
    if ((rc = xt_proj_add_model(proj, added[i], &msg))) {
      code = say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(backend), skip_backend(msg.text, backend));
      goto done;
    }

  int ocols = 0, orows = 0;
  xt_drc drc;               /* dose-rate control over the command's frames, a run */
  xt_dose_totals dose_total; /* the run's dose */
  memset(&drc, 0, sizeof drc);
  memset(&dose_total, 0, sizeof dose_total);
  if (o.chain) {
    if ((rc = xt_chain_create(&cprm, proj, &chain, &msg))) {
      code = say(XT_EXIT_RUNTIME, "--chain: %s", msg.text);
      goto done;
    }
    xt_chain_set_threads(chain, o.threads); /* the CPU stages: as the projector */
    xt_chain_out_size(chain, &frames[0].geom, &ocols, &orows);
    if (cprm.drc) xt_drc_reset(&drc, &cprm);
    raw = malloc((size_t)ocols * orows * sizeof *raw);
    proc = malloc((size_t)ocols * orows * sizeof *proc);
    if (!raw || !proc || !ocols || !orows) {
      code = say(XT_EXIT_RUNTIME, "--chain: no memory for a %d x %d frame", ocols, orows);
      goto done;
    }
  }

  /* --- frames ------------------------------------------------------------------------------- */
  size_t npx = (size_t)mode->rows * (size_t)mode->cols;
  lineint = malloc(npx * sizeof *lineint);
  pix = malloc(npx * sizeof *pix);
  if (!lineint || !pix) {
    code = say(XT_EXIT_RUNTIME, "out of memory for a %d x %d frame", mode->cols, mode->rows);
    goto done;
  }
  for (int i = 0; i < nframes; i++) {
    frame *f = &frames[i];
    double t0 = now_ms();
    if ((rc = xt_proj_render(proj, &f->geom, lineint, &msg))) {
      code = say(XT_EXIT_RUNTIME, "render: %s", msg.text);
      goto done;
    }
    f->ms = now_ms() - t0;
    f->lmin = INFINITY;
    f->lmax = -INFINITY;
    for (size_t k = 0; k < npx; k++) {
      double L = lineint[k];
      if (!isfinite(L)) {
        code = say(XT_EXIT_RUNTIME, "render: non-finite line integral at pixel (row %zu, col %zu)", k / (size_t)mode->cols,
                   k % (size_t)mode->cols);
        goto done;
      }
      if (L < f->lmin) f->lmin = L;
      if (L > f->lmax) f->lmax = L;
    }
    xt_intensity_u16(lineint, npx, pix);
    /* Does the model land on the detector? The projected box says where it should be; the frame
     * itself says whether its shadow is empty (missed) or runs off an edge (clipped). */
    xt_sidecar_coverage cov;
    memset(&cov, 0, sizeof cov);
    if ((rc = xt_model_coverage(model, &f->geom, &cov.box, &msg))) {
      code = say(XT_EXIT_RUNTIME, "coverage: %s", msg.text);
      goto done;
    }
    for (size_t k = 0; k < npx; k++) {
      if (!(lineint[k] > 0)) continue;
      size_t r = k / (size_t)mode->cols, c = k % (size_t)mode->cols;
      cov.pixels_nonzero++;
      if (r == 0 || c == 0 || r + 1 == (size_t)mode->rows || c + 1 == (size_t)mode->cols) cov.edge_pixels_nonzero++;
    }
    cov.status = cov.pixels_nonzero == 0 ? XT_COVER_MISSED : cov.edge_pixels_nonzero ? XT_COVER_CLIPPED : XT_COVER_INSIDE;
    if (cov.status == XT_COVER_MISSED)
      say(0, "warning: %s.npy: the model misses the detector (no pixel has a line integral > 0; its bounding box "
             "projects to columns %.0f..%.0f, rows %.0f..%.0f of 0..%d, 0..%d) [coverage_missed]",
          f->stem, cov.box.bbox[0], cov.box.bbox[2], cov.box.bbox[1], cov.box.bbox[3], mode->cols - 1, mode->rows - 1);
    else if (cov.status == XT_COVER_CLIPPED)
      say(0, "warning: %s.npy: the model is clipped at the detector's edge (%zu edge pixels attenuated) [coverage_clipped]",
          f->stem, cov.edge_pixels_nonzero);

    char npy_path[4200], png_path[4200], json_path[4200], raw_path[4200], proc_path[4200], desc[4400];
    snprintf(npy_path, sizeof npy_path, "%s.npy", f->stem);
    snprintf(png_path, sizeof png_path, "%s.png", f->stem);
    snprintf(json_path, sizeof json_path, "%s.json", f->stem);
    snprintf(raw_path, sizeof raw_path, "%s_raw.png", f->stem);
    snprintf(proc_path, sizeof proc_path, "%s_proc.png", f->stem);
    xt_sidecar_param sp[XT_OPT_MAX];
    xt_sidecar_chain sc;
    xt_chain_info ci;
    memset(&sc, 0, sizeof sc);
    xt_dose dose;
    if (chain) {
      const double t1 = now_ms();
      xt_chain_out co = {raw, proc, NULL, NULL};
      if (cprm.drc) { /* the loop's exposure for this frame */
        xt_drc_apply(&drc, &cprm);
        if ((rc = xt_chain_set_params(chain, &cprm, &msg))) {
          code = say(XT_EXIT_RUNTIME, "chain: dose-rate control: %s", msg.text);
          goto done;
        }
      }
      if ((rc = xt_chain_frame(chain, &f->geom, (uint64_t)o.frame0 + (uint64_t)i, &co, &msg))) {
        code = say(XT_EXIT_RUNTIME, "chain: %s", msg.text);
        goto done;
      }
      xt_chain_get_info(chain, &ci);
      if ((rc = xt_dose_frame(&cprm, ci.kerma_ugy_per_mas, &f->geom, &dose, &msg))) {
        code = say(XT_EXIT_RUNTIME, "chain: %s", msg.text);
        goto done;
      }
      xt_dose_add(&dose_total, &dose);
      if (cprm.drc) { /* the measuring field's sum came with the frame (a device reduction on a GPU) */
        xt_chain_drc_frame fld;
        xt_chain_drc_last(chain, &fld);
        xt_drc_update(&drc, &cprm,
                      xt_drc_measure_sum(fld.field_sum, fld.field_n, &cprm, &ci, f->geom.mode.pitch_u_mm * f->geom.mode.pitch_v_mm));
      }
      for (int k = 0; k < xt_chain_param_count() && k < XT_OPT_MAX; k++) {
        const xt_chain_param_info *in = xt_chain_param_at(k);
        sp[k] = (xt_sidecar_param){in->name, xt_chain_param_get(&cprm, in), in->unit};
      }
      sc = (xt_sidecar_chain){xt_chain_param_count(), sp, (unsigned long long)o.frame0 + (unsigned long long)i,
                              ci.mean_energy_kev, ci.hvl_mm_al, ci.kerma_ugy_per_mas, ci.absorbed_fraction, ci.nbins,
                              ci.channels, base_name(raw_path), base_name(proc_path), orows, ocols, cprm.adc_bits,
                              now_ms() - t1, xt_protocol_name(cprm.protocol), xt_exposure_ma(&cprm),
                              dose.k_irp_mgy, dose.kap_gycm2, dose.d_irp_mm, dose.field_cm2,
                              (unsigned long long)dose_total.frames, dose_total.k_irp_mgy, dose_total.kap_gycm2,
                              cprm.drc, drc.measured_ngy, drc.target_ngy, drc.s, drc.flags};
    }
    snprintf(desc, sizeof desc, "xtwin intensity I/I0 = pixel/65535, pixel = round(65535*exp(-L)); geometry in %s",
             base_name(json_path));
    xt_sidecar_info si = {&f->geom,
                          model,
                          o.volume ? o.volume : "phantom",
                          o.volume && model->kind != XT_MODEL_GMM ? convert_names[o.convert] : NULL,
                          place_names[o.place],
                          xt_backend_name(backend),
                          o.threads,
                          base_name(npy_path),
                          base_name(png_path),
                          f->lmin,
                          f->lmax,
                          f->ms,
                          XT_VERSION,
                          &cov,
                          chain ? &sc : NULL,
                          (const xt_model *const *)added,
                          added_paths,
                          nadded};
    const char *paths[5] = {npy_path, png_path, json_path, raw_path, proc_path};
    for (int k = 0; k < (chain ? 5 : 3); k++) {
      FILE *fp = NULL;
      if ((rc = xt_outset_open(&set, paths[k], &fp, &msg))) {
        code = say(XT_EXIT_RUNTIME, "--out: %s", msg.text);
        goto done;
      }
      if (k == 0) rc = xt_npy_write_f32(fp, lineint, mode->rows, mode->cols, &msg);
      else if (k == 1) rc = xt_png_write_u16(fp, pix, mode->rows, mode->cols, desc, &msg);
      else if (k == 2) rc = xt_sidecar_write(fp, &si, &msg);
      else
        rc = xt_png_write_u16(fp, k == 3 ? raw : proc, orows, ocols,
                              k == 3 ? "xtwin raw detector frame (for processing): ADC codes; parameters in the sidecar"
                                     : "xtwin processed frame (for presentation): 12 bits stored; parameters in the sidecar",
                              &msg);
      if (rc) {
        fclose(fp);
        code = say(XT_EXIT_RUNTIME, "\"%s\": %s", paths[k], msg.text);
        goto done;
      }
      if ((rc = xt_outset_close(&set, fp, paths[k], &msg))) {
        code = say(XT_EXIT_RUNTIME, "%s", msg.text);
        goto done;
      }
    }
  }
  if ((rc = xt_outset_commit(&set, &msg))) { /* rolls back by itself */
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  set_live = 0;
  for (int i = 0; i < nframes; i++)
    printf("wrote %s.{npy,png,json}%s  %dx%d  line integral min %.6g max %.6g  %.1f ms (%s)\n", frames[i].stem,
           chain ? " + _raw.png, _proc.png" : "", mode->cols, mode->rows, frames[i].lmin, frames[i].lmax, frames[i].ms,
           xt_backend_name(backend));

done:
  if (set_live && code != XT_EXIT_OK) xt_outset_abort(&set);
  xt_outset_free(&set);
  free(lineint);
  free(pix);
  free(raw);
  free(proc);
  xt_chain_destroy(chain);
  xt_proj_destroy(proj);
  xt_model_free(model);
  for (int i = 0; i < nadded; i++) xt_model_free(added[i]);
  free(frames);
  return code;
}
