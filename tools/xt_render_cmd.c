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
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "xt_acq.h"
#include "xt_chain.h"
#include "xt_exposure.h"
#include "xt_cli.h"
#include "xt_coverage.h"
#include "xt_dicom.h"
#include "xt_geom.h"
#include "xt_gmm.h" /* XT_MODEL_GMM: a mixture has no voxel conversion */
#include "xt_model.h"
#include "xt_opt.h"
#include "xt_out.h"
#include "xt_phantom.h"
#include "xt_proj.h"
#include "xt_record.h"
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
  const char *iodine; /* --iodine REGION=MG,... (contrast, docs/contrast.md) */
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
  int dicom;    /* --dicom */
  int dicom_pixels;
  const char *dicom_identity;
  double frame_rate;
  int dicom_fluoro;
} render_opts;

#define OFF(f) offsetof(render_opts, f)
/* The order of the words in these choices is the order of the arrays that map them. */
#define PHANTOM_CHOICES "head|head-labels|thorax"
#define CONVERT_CHOICES "mu|hu|hu-labels|labels"
#define PLACE_CHOICES "center|native"
#define BACKEND_CHOICES "cpu|cuda"
#define HU_MODEL_CHOICES "bilinear|linear"
#define XFORM_CHOICES "sform|qform"
#define DICOM_PIXELS_CHOICES "proc|raw"
static const char *const convert_names[] = {"mu", "hu", "hu-labels", "labels"};
static const char *const place_names[] = {"center", "native"};

static const xt_opt fixed_tab[] = {
    {"phantom", XT_OPT_CHOICE, NULL, "head", NULL, 0, 0, PHANTOM_CHOICES, OFF(phantom),
     "built-in phantom (used unless --volume): the Shepp-Logan head (dense mu, or uint8 material labels), or the "
     "thorax with a guidewire in its aorta (labels at --phantom-spacing; the wire joins as an added model)"},
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
    {"iodine", XT_OPT_STRING, "REGION=MG[,...]", NULL, "none", 0, 0, NULL, OFF(iodine),
     "contrast agent (docs/contrast.md): iodine in mg I/mL in contrast regions of the main model - the thorax's "
     "heart, aorta, pulmonary, veins, coronary, or a label number of a label volume that flags it - e.g. aorta=20"},
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
    {"dicom", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(dicom),
     "--chain: also write the frames as one run: PREFIX_xa.dcm (Enhanced XA, per-frame geometry and technique), "
     "PREFIX_xa_classic.dcm (classic XA) and PREFIX_sr.dcm (X-Ray Radiation Dose SR); docs/dicom.md"},
    {"dicom-pixels", XT_OPT_CHOICE, NULL, "proc", NULL, 0, 0, DICOM_PIXELS_CHOICES, OFF(dicom_pixels),
     "--dicom: the chain's processed frames (12 bits, log) or its raw ones (ADC codes, linear)"},
    {"dicom-identity", XT_OPT_STRING, "FILE", NULL, "synthetic", 0, 0, NULL, OFF(dicom_identity),
     "--dicom: patient, study and institution from a JSON file (docs/dicom.md); without it they say synthetic"},
    {"dicom-fluoro", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(dicom_fluoro),
     "--dicom: the run is stored fluoroscopy (Radiation Setting SC; the dose report's event type Fluoroscopy and "
     "its fluoro totals), not an exposure run"},
    {"frame-rate", XT_OPT_REAL, "FPS", "15", NULL, 0.01, 1000, NULL, OFF(frame_rate),
     "--dicom: the run's frame rate (the frames' times and the dose report's pulse rate)"},
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
#ifdef XT_HAVE_LOADERS
/* The loader's options from the command's conversion flags (the main file and every --add). */
static xt_load_options load_options(const render_opts *o) {
  static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
  xt_load_options lo = {.convert = conv[o->convert], .energy_kev = o->energy};
  lo.hu_model = o->hu_model == 1 ? XT_HU_LINEAR : XT_HU_BILINEAR;
  lo.ct_energy_kev = o->ct_energy;
  lo.nan_fill = o->nan_fill;
  lo.nan_value = o->nan_value;
  lo.nifti_xform = o->nifti_transform == 1 ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
  return lo;
}
#endif

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
  } else if (!o->volume && o->phantom == 2) {
    if ((rc = xt_phantom_thorax_model(o->phantom_spacing, &m, msg))) return rc;
  } else if (!o->volume) {
    int dim[3] = {o->phantom_size, o->phantom_size, o->phantom_size};
    rc = xt_phantom_head_model(dim, o->phantom_spacing, o->phantom == 1 ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, msg);
    if (rc) return rc;
  } else {
#ifdef XT_HAVE_LOADERS
    xt_load_options lo = load_options(o);
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
/* The command, in its steps                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* What the steps share, from the options to the committed outputs. */
typedef struct render_cmd {
  render_opts o;
  int seen[XT_OPT_MAX];
  xt_msg msg;
  xt_chain_params cprm;
  const xt_detector_mode *mode;
  xt_backend backend;
  frame *frames;
  int nframes;
  xt_model *model;
  xt_model *added[MAX_ADDED];
  const char *added_paths[MAX_ADDED];
  char added_buf[4096];
  int nadded;
  /* --iodine: each region's iodine, latched with every frame */
  int niodine;
  xt_acq_iodine iodine[8];
  char iodine_name[8][64];
  const char *iodine_names[8];
  double iodine_mg[8];
  xt_proj *proj;
  xt_acq_plane plane;   /* the command's frames are one run: the loop and the dose totals carry over */
  xt_acq_renderer rnd;  /* the projector and the chain made on the first --chain frame */
  float *lineint;       /* the frame planes, made on the first frame (every frame has one size) */
  uint16_t *pix, *raw, *proc;
  size_t npx, opx;
  xt_outset set;
  int set_live;
  xt_dicom_identity dicom_id; /* --dicom: read before any work, so that a bad file costs nothing */
  xt_acq_frame *dframes; /* --dicom: every frame's record and chosen pixels, kept for the run's objects */
  uint16_t **dpix;
} render_cmd;

/* Options into R->o and the chain's parameters, checked as far as they can be without files.
 * XT_EXIT_OK to go on; *help when --help was answered. */
static int parse_options(render_cmd *R, int argc, char **argv, int *help) {
  render_opts *o = &R->o;
  int *seen = R->seen;
  xt_msg *msg = &R->msg;
  *help = 0;
  if (option_table() != NFIXED + xt_chain_param_count())
    return say(XT_EXIT_RUNTIME, "internal: %d options exceed the table's room (XT_OPT_MAX %d)",
               NFIXED + xt_chain_param_count(), XT_OPT_MAX);
  if (xt_opt_parse(full_tab, option_table(), argc - 1, argv + 1, o, seen, msg)) {
    int hint = strncmp(msg->text, "unknown option", 14) == 0 || strncmp(msg->text, "unexpected", 10) == 0;
    return say(XT_EXIT_USAGE, "%s%s", msg->text, hint ? " (see xtwin render --help)" : "");
  }
  if (o->help) {
    xt_cmd_render_help(stdout);
    *help = 1;
    return XT_EXIT_OK;
  }
  if (o->volume && is_seen(seen, "phantom")) return say(XT_EXIT_USAGE, "--phantom and --volume exclude each other");
  if (o->ellipsoids && (o->volume || is_seen(seen, "phantom")))
    return say(XT_EXIT_USAGE, "--ellipsoids and --%s exclude each other", o->volume ? "volume" : "phantom");
  if (o->labels && !o->ellipsoids) return say(XT_EXIT_USAGE, "--labels: applies to --ellipsoids only");
  if (o->volume && (is_seen(seen, "phantom-size") || is_seen(seen, "phantom-spacing")))
    return say(XT_EXIT_USAGE, "--%s: applies to the phantom only, not to --volume",
               is_seen(seen, "phantom-size") ? "phantom-size" : "phantom-spacing");
  static const char *const volume_only[] = {"convert", "energy", "series", "nan-value", "hu-model", "ct-energy",
                                            "nifti-transform"};
  for (size_t k = 0; k < sizeof volume_only / sizeof volume_only[0]; k++) {
    const int for_added = k < 2 && o->add; /* --convert and --energy apply to added volumes too */
    if (!o->volume && !for_added && is_seen(seen, volume_only[k]))
      return say(XT_EXIT_USAGE, "--%s: applies to --volume only%s", volume_only[k], k < 2 ? " (and --add)" : "");
  }
  o->nan_fill = is_seen(seen, "nan-value");
  if (o->angles.n && is_seen(seen, "primary")) return say(XT_EXIT_USAGE, "--angles and --primary exclude each other");
  xt_chain_params *cprm = &R->cprm;
  *cprm = xt_chain_params_default();
  if (!o->chain && is_seen(seen, "frame")) return say(XT_EXIT_USAGE, "--frame: applies with --chain only");
  if (o->dicom && !o->chain)
    return say(XT_EXIT_USAGE, "--dicom: needs --chain (an XA image is an exposure: kV, mA, dose come from the chain)");
  static const char *const dicom_only[] = {"dicom-pixels", "dicom-identity", "frame-rate", "dicom-fluoro"};
  for (size_t k = 0; k < sizeof dicom_only / sizeof dicom_only[0]; k++)
    if (!o->dicom && is_seen(seen, dicom_only[k])) return say(XT_EXIT_USAGE, "--%s: applies with --dicom only", dicom_only[k]);
  /* --protocol first: a preset, which the other options given then adjust */
  for (int i = 0; i < xt_chain_param_count(); i++)
    if (seen[NFIXED + i] && o->chain && !strcmp(xt_chain_param_at(i)->name, "protocol") &&
        xt_exposure_set(cprm, "protocol", o->chain_vals[i], msg))
      return say(XT_EXIT_USAGE, "--protocol: %s", msg->text);
  for (int i = 0; i < xt_chain_param_count(); i++) {
    if (!seen[NFIXED + i]) continue;
    if (!o->chain) return say(XT_EXIT_USAGE, "--%s: applies with --chain only", chain_names[i]);
    if (!strcmp(xt_chain_param_at(i)->name, "protocol")) continue;
    if (xt_chain_param_set(cprm, xt_chain_param_at(i)->name, o->chain_vals[i], msg)) {
      const char *t = strchr(msg->text, ':'); /* "chain.name: why" -> "--name: why" */
      return say(XT_EXIT_USAGE, "--%s%s", chain_names[i], t ? t : msg->text);
    }
  }
  if (o->chain && xt_chain_params_validate(cprm, msg)) return say(XT_EXIT_USAGE, "--chain: %s", msg->text);
  if (o->add && (R->nadded = split_added(o->add, R->added_buf, sizeof R->added_buf, R->added_paths)) < 0)
    return say(XT_EXIT_USAGE, "--add: expected 1 to %d comma-separated file names", MAX_ADDED);
  {
    const size_t vl = o->volume ? strlen(o->volume) : 0;
    const int nvdb = vl > 5 && strcmp(o->volume + vl - 5, ".nvdb") == 0;
    if (o->grid && !nvdb) return say(XT_EXIT_USAGE, "--grid-name: applies to --volume FILE.nvdb only");
    if (nvdb && !is_seen(seen, "convert")) o->convert = 0; /* NanoVDB grids hold mu or labels, never HU */
  }

  R->mode = xt_mode_find(o->mode);
  if (!R->mode) return say(XT_EXIT_USAGE, "--mode: unknown mode \"%s\" (see xtwin modes)", o->mode);

  size_t plen = strlen(o->out);
  const char *pbase = base_name(o->out);
  if (!*pbase || strcmp(pbase, ".") == 0 || strcmp(pbase, "..") == 0)
    return say(XT_EXIT_USAGE, "--out: \"%s\" names a directory; give a file prefix such as \"%s%sxtwin\"", o->out, o->out,
               (plen && o->out[plen - 1] == '/') ? "" : "/");
  if (plen > 3900) return say(XT_EXIT_USAGE, "--out: prefix longer than 3900 characters");
  return XT_EXIT_OK;
}

/* One pose per frame (--angles or --primary), each frame's geometry and file stem. */
static int plan_frames(render_cmd *R) {
  const render_opts *o = &R->o;
  const xt_detector_mode *mode = R->mode;
  xt_pose pose = xt_pose_default(mode);
  pose.secondary_deg = o->secondary;
  pose.detector_rot_deg = o->detector_rot;
  if (is_seen(R->seen, "sod")) pose.sod_mm = o->sod;
  if (is_seen(R->seen, "sid")) pose.sid_mm = o->sid;
  pose.table_mm = xt_v3(o->table[0], o->table[1], o->table[2]);
  if (!(pose.sid_mm > pose.sod_mm))
    return say(XT_EXIT_USAGE, "--%s: the SID (%g mm) must exceed the SOD (%g mm)", is_seen(R->seen, "sid") ? "sid" : "sod",
               pose.sid_mm, pose.sod_mm);
  R->nframes = o->angles.n ? o->angles.n : 1;
  R->frames = calloc((size_t)R->nframes, sizeof *R->frames);
  if (!R->frames) return say(XT_EXIT_RUNTIME, "out of memory");
  for (int i = 0; i < R->nframes; i++) {
    frame *f = &R->frames[i];
    pose.primary_deg = o->angles.n ? o->angles.v[i] : o->primary;
    if (xt_geom_compute(&pose, mode, &f->geom, &R->msg)) return say(XT_EXIT_USAGE, "%s", R->msg.text);
    if (o->angles.n) snprintf(f->stem, sizeof f->stem, "%s_p%g", o->out, o->angles.v[i]);
    else snprintf(f->stem, sizeof f->stem, "%s", o->out);
    for (int j = 0; j < i; j++)
      if (strcmp(R->frames[j].stem, f->stem) == 0) return say(XT_EXIT_USAGE, "--angles: %g is given twice", o->angles.v[i]);
  }
  return XT_EXIT_OK;
}

/* The backend, the input files and the output directory, before any heavy work. */
static int check_inputs(render_cmd *R) {
  const render_opts *o = &R->o;
  xt_msg *msg = &R->msg;
  R->backend = o->backend == 1 ? XT_BACKEND_CUDA : XT_BACKEND_CPU;
  if (xt_proj_available(R->backend, msg))
    return say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(R->backend), skip_backend(msg->text, R->backend));
  if ((o->volume && !xt_is_dicom(o->volume)) || o->ellipsoids) { /* DICOM folders and @lists: the loader checks */
    const char *opt = o->volume ? "volume" : "ellipsoids", *path = o->volume ? o->volume : o->ellipsoids;
    struct stat st;
    if (stat(path, &st) != 0) return say(XT_EXIT_RUNTIME, "--%s: \"%s\": %s", opt, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return say(XT_EXIT_RUNTIME, "--%s: \"%s\": is a directory", opt, path);
  }
  for (int i = 0; i < R->nadded; i++) {
    struct stat st;
    if (stat(R->added_paths[i], &st) != 0)
      return say(XT_EXIT_RUNTIME, "--add: \"%s\": %s", R->added_paths[i], strerror(errno));
    if (S_ISDIR(st.st_mode)) return say(XT_EXIT_RUNTIME, "--add: \"%s\": is a directory", R->added_paths[i]);
  }
  if (o->dicom && xt_dicom_identity_load(o->dicom_identity, &R->dicom_id, msg))
    return say(XT_EXIT_USAGE, "--dicom-identity: %s", msg->text);
  R->set_live = 1;
  if (xt_outset_mkdirs(&R->set, o->out, msg)) return say(XT_EXIT_RUNTIME, "--out: %s", msg->text);
  xt_outset probe;
  FILE *pf = NULL;
  char path[4200];
  xt_outset_init(&probe);
  snprintf(path, sizeof path, "%s.npy", R->frames[0].stem);
  int rc = xt_outset_open(&probe, path, &pf, msg);
  if (pf) fclose(pf);
  xt_outset_abort(&probe);
  xt_outset_free(&probe);
  if (rc) return say(XT_EXIT_RUNTIME, "--out: %s", msg->text);
  return XT_EXIT_OK;
}

/* The main model (phantom or file) and the --add models, placed like it. */
static int load_models(render_cmd *R) {
  const render_opts *o = &R->o;
  xt_msg *msg = &R->msg;
  if (make_model(o, &R->model, msg)) {
    if (o->volume && !strstr(msg->text, o->volume)) return say(XT_EXIT_RUNTIME, "--volume: \"%s\": %s", o->volume, msg->text);
    return say(XT_EXIT_RUNTIME, "%s%s", o->volume ? "--volume: " : "", msg->text);
  }
  const xt_model *model = R->model;
  if (model->report) /* what the loader noticed: printed, and kept in every sidecar's "load" */
    for (int k = 0; k < model->report->nwarn; k++)
      say(0, "warning: %s [%s]", model->report->warn[k].text, model->report->warn[k].code);
  for (int i = 0; i < R->nadded; i++) {
#ifdef XT_HAVE_LOADERS
    xt_load_options lo = load_options(o); /* --add: the main file's conversion, no series or grid choice */
    if (xt_model_load(R->added_paths[i], &lo, NULL, &R->added[i], msg)) return say(XT_EXIT_RUNTIME, "--add: %s", msg->text);
    R->added[i]->placement = model->placement; /* the scene's models share the main model's placement */
#else
    return say(XT_EXIT_RUNTIME, "--add: model loading not built into this xtwin");
#endif
  }
  if (!o->volume && !o->ellipsoids && o->phantom == 2) { /* the thorax's guidewire, placed with it */
    if (R->nadded == MAX_ADDED) return say(XT_EXIT_USAGE, "--phantom thorax: at most %d --add models beside its guidewire", MAX_ADDED - 1);
    if (xt_phantom_thorax_wire_model(4096, &R->added[R->nadded], msg)) return say(XT_EXIT_RUNTIME, "%s", msg->text);
    R->added[R->nadded]->placement = model->placement;
    R->added_paths[R->nadded++] = "built-in guidewire (thorax)";
  }
  return XT_EXIT_OK;
}

/* The projector with the scene's models, and the acquisition layer's renderer on it. */
static int make_projector(render_cmd *R) {
  xt_msg *msg = &R->msg;
  xt_proj_options po = {R->backend, R->o.threads, 0};
  if (xt_proj_create(&po, &R->proj, msg))
    return say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(R->backend), skip_backend(msg->text, R->backend));
  xt_acq_renderer_init(&R->rnd, R->proj, R->o.threads); /* the CPU stages: as the projector */
  for (int i = -1; i < R->nadded; i++)
    if (xt_acq_renderer_add_model(&R->rnd, i < 0 ? R->model : R->added[i], msg))
      return say(XT_EXIT_RUNTIME, "--backend %s: %s", xt_backend_name(R->backend), skip_backend(msg->text, R->backend));
  return XT_EXIT_OK;
}

/* The acquisition layer's buffers: made on the first frame (all have the mode's size). */
static int frame_buffers(void *ctx, xt_acq_frame *fr, xt_msg *msg) {
  render_cmd *R = ctx;
  if (!R->lineint) {
    R->npx = (size_t)fr->lineint.rows * (size_t)fr->lineint.cols;
    R->lineint = malloc(R->npx * sizeof *R->lineint);
    R->pix = malloc(R->npx * sizeof *R->pix);
    if (!R->lineint || !R->pix)
      return xt_fail(msg, XT_ENOMEM, "out of memory for a %d x %d frame", fr->lineint.cols, fr->lineint.rows);
  }
  fr->lineint.data = R->lineint;
  if (fr->raw.rows) {
    if (!R->raw) {
      R->opx = (size_t)fr->raw.rows * (size_t)fr->raw.cols;
      R->raw = malloc(R->opx * sizeof *R->raw);
      R->proc = malloc(R->opx * sizeof *R->proc);
      if (!R->raw || !R->proc || !R->opx)
        return xt_fail(msg, XT_ENOMEM, "--chain: no memory for a %d x %d frame", fr->raw.cols, fr->raw.rows);
    }
    fr->raw.data = R->raw;
    fr->proc.data = R->proc;
  }
  return 0;
}

/* Frame i through the acquisition layer: line integrals, and with --chain the chain's frames
 * exposed by the run's loop, its dose and totals. */
static int expose_frame(render_cmd *R, int i, xt_acq_frame *fr) {
  frame *f = &R->frames[i];
  xt_acq_request q;
  if (i == 0) { /* the command's one run: the chain's settings and seed, numbered from --frame */
    R->plane.set.chain = R->o.chain;
    R->plane.set.chain_prm = R->cprm;
    R->plane.next_counter = (uint64_t)R->o.frame0;
  }
  xt_acq_plane_latch(&R->plane, &q);
  q.geom = &f->geom; /* planned from the options (--angles: one pose per frame) */
  q.model = R->model;
  q.want = XT_ACQ_WANT_LINEINT | (R->o.chain ? XT_ACQ_WANT_CHAIN : 0);
  q.flags = XT_ACQ_DOSE_STRICT;
  q.iodine = R->iodine;
  q.niodine = R->niodine;
  q.buffers = frame_buffers;
  q.ctx = R;
  if (xt_acq_expose(&R->plane, &R->rnd, &q, fr, &R->msg)) {
    const int s = fr->step;
    return say(XT_EXIT_RUNTIME, "%s%s", s == XT_ACQ_STEP_RENDER ? "render: " : s == XT_ACQ_STEP_BUFFERS ? "" : "chain: ",
               R->msg.text);
  }
  xt_acq_plane_advance(&R->plane);
  f->ms = fr->lineint_ms;
  return XT_EXIT_OK;
}

/* The line integrals' range (all finite), the intensity image, and whether the model landed on
 * the detector: the projected box says where it should be; the frame itself says whether its
 * shadow is empty (missed) or runs off an edge (clipped). */
static int frame_summary(render_cmd *R, int i, xt_sidecar_coverage *cov) {
  frame *f = &R->frames[i];
  const xt_detector_mode *mode = R->mode;
  const size_t npx = R->npx;
  const float *lineint = R->lineint;
  f->lmin = INFINITY;
  f->lmax = -INFINITY;
  for (size_t k = 0; k < npx; k++) {
    double L = lineint[k];
    if (!isfinite(L))
      return say(XT_EXIT_RUNTIME, "render: non-finite line integral at pixel (row %zu, col %zu)", k / (size_t)mode->cols,
                 k % (size_t)mode->cols);
    if (L < f->lmin) f->lmin = L;
    if (L > f->lmax) f->lmax = L;
  }
  xt_intensity_u16(lineint, npx, R->pix);
  memset(cov, 0, sizeof *cov);
  if (xt_model_coverage(R->model, &f->geom, &cov->box, &R->msg)) return say(XT_EXIT_RUNTIME, "coverage: %s", R->msg.text);
  for (size_t k = 0; k < npx; k++) {
    if (!(lineint[k] > 0)) continue;
    size_t r = k / (size_t)mode->cols, c = k % (size_t)mode->cols;
    cov->pixels_nonzero++;
    if (r == 0 || c == 0 || r + 1 == (size_t)mode->rows || c + 1 == (size_t)mode->cols) cov->edge_pixels_nonzero++;
  }
  cov->status = cov->pixels_nonzero == 0 ? XT_COVER_MISSED : cov->edge_pixels_nonzero ? XT_COVER_CLIPPED : XT_COVER_INSIDE;
  if (cov->status == XT_COVER_MISSED)
    say(0, "warning: %s.npy: the model misses the detector (no pixel has a line integral > 0; its bounding box "
           "projects to columns %.0f..%.0f, rows %.0f..%.0f of 0..%d, 0..%d) [coverage_missed]",
        f->stem, cov->box.bbox[0], cov->box.bbox[2], cov->box.bbox[1], cov->box.bbox[3], mode->cols - 1, mode->rows - 1);
  else if (cov->status == XT_COVER_CLIPPED)
    say(0, "warning: %s.npy: the model is clipped at the detector's edge (%zu edge pixels attenuated) [coverage_clipped]",
        f->stem, cov->edge_pixels_nonzero);
  return XT_EXIT_OK;
}

/* The sidecar, with the loader's report as its "load" object when the model came from a file. */
static int write_sidecar(FILE *fp, const xt_model *model, xt_sidecar_info *si, xt_msg *msg) {
  si->load = NULL;
#ifdef XT_HAVE_LOADERS
  if (model->report) si->load = xt_load_report_json(model->report);
#else
  (void)model;
#endif
  int rc = xt_sidecar_write(fp, si, msg);
  json_decref(si->load);
  si->load = NULL;
  return rc;
}

/* Frame i's files into the output set: .npy, .png, .json, and with --chain _raw.png, _proc.png. */
static int write_frame(render_cmd *R, int i, const xt_acq_frame *fr, const xt_sidecar_coverage *cov) {
  const render_opts *o = &R->o;
  const frame *f = &R->frames[i];
  const xt_detector_mode *mode = R->mode;
  const int chain = fr->chain;
  xt_msg *msg = &R->msg;
  char npy_path[4200], png_path[4200], json_path[4200], raw_path[4200], proc_path[4200], desc[4400];
  snprintf(npy_path, sizeof npy_path, "%s.npy", f->stem);
  snprintf(png_path, sizeof png_path, "%s.png", f->stem);
  snprintf(json_path, sizeof json_path, "%s.json", f->stem);
  snprintf(raw_path, sizeof raw_path, "%s_raw.png", f->stem);
  snprintf(proc_path, sizeof proc_path, "%s_proc.png", f->stem);
  snprintf(desc, sizeof desc, "xtwin intensity I/I0 = pixel/65535, pixel = round(65535*exp(-L)); geometry in %s",
           base_name(json_path));
  xt_sidecar_info si = {.frame = fr,
                        .model = R->model,
                        .model_source = o->volume ? o->volume : "phantom",
                        .convert = o->volume && R->model->kind != XT_MODEL_GMM ? convert_names[o->convert] : NULL,
                        .place = place_names[o->place],
                        .backend = xt_backend_name(R->backend),
                        .threads = o->threads,
                        .npy_file = base_name(npy_path),
                        .png_file = base_name(png_path),
                        .raw_file = base_name(raw_path),
                        .proc_file = base_name(proc_path),
                        .lineint_min = f->lmin,
                        .lineint_max = f->lmax,
                        .version = XT_VERSION,
                        .coverage = cov,
                        .added = (const xt_model *const *)R->added,
                        .added_sources = R->added_paths,
                        .nadded = R->nadded,
                        .niodine = R->niodine,
                        .iodine_regions = R->iodine_names,
                        .iodine_mg_ml = R->iodine_mg};
  const char *paths[5] = {npy_path, png_path, json_path, raw_path, proc_path};
  for (int k = 0; k < (chain ? 5 : 3); k++) {
    FILE *fp = NULL;
    int rc;
    if (xt_outset_open(&R->set, paths[k], &fp, msg)) return say(XT_EXIT_RUNTIME, "--out: %s", msg->text);
    if (k == 0) rc = xt_npy_write_f32(fp, R->lineint, mode->rows, mode->cols, msg);
    else if (k == 1) rc = xt_png_write_u16(fp, R->pix, mode->rows, mode->cols, desc, msg);
    else if (k == 2) rc = write_sidecar(fp, R->model, &si, msg);
    else
      rc = xt_png_write_u16(fp, k == 3 ? R->raw : R->proc, fr->raw.rows, fr->raw.cols,
                            k == 3 ? "xtwin raw detector frame (for processing): ADC codes; parameters in the sidecar"
                                   : "xtwin processed frame (for presentation): 12 bits stored; parameters in the sidecar",
                            msg);
    if (rc) {
      fclose(fp);
      return say(XT_EXIT_RUNTIME, "\"%s\": %s", paths[k], msg->text);
    }
    if (xt_outset_close(&R->set, fp, paths[k], msg)) return say(XT_EXIT_RUNTIME, "%s", msg->text);
  }
  return XT_EXIT_OK;
}

/* --dicom: frame i's record and its chosen image, kept until the run is written. */
static int keep_dicom_frame(render_cmd *R, int i, const xt_acq_frame *fr) {
  if (!R->o.dicom) return XT_EXIT_OK;
  if (!R->dframes) {
    R->dframes = calloc((size_t)R->nframes, sizeof *R->dframes);
    R->dpix = calloc((size_t)R->nframes, sizeof *R->dpix);
    if (!R->dframes || !R->dpix) return say(XT_EXIT_RUNTIME, "--dicom: out of memory");
  }
  const size_t n = (size_t)fr->raw.rows * (size_t)fr->raw.cols;
  R->dframes[i] = *fr;
  R->dpix[i] = malloc(n * sizeof **R->dpix);
  if (!R->dpix[i]) return say(XT_EXIT_RUNTIME, "--dicom: out of memory for frame %d", i);
  memcpy(R->dpix[i], R->o.dicom_pixels == 1 ? R->raw : R->proc, n * sizeof **R->dpix);
  R->dframes[i].raw.data = R->dframes[i].proc.data = R->dframes[i].lineint.data = NULL; /* not kept */
  return XT_EXIT_OK;
}

/* One encoded object into the output set. */
static int write_blob(render_cmd *R, const char *path, const unsigned char *b, size_t n) {
  FILE *fp = NULL;
  if (xt_outset_open(&R->set, path, &fp, &R->msg)) return say(XT_EXIT_RUNTIME, "--out: %s", R->msg.text);
  if (fwrite(b, 1, n, fp) != n) {
    fclose(fp);
    return say(XT_EXIT_RUNTIME, "\"%s\": %s", path, strerror(errno));
  }
  if (xt_outset_close(&R->set, fp, path, &R->msg)) return say(XT_EXIT_RUNTIME, "%s", R->msg.text);
  return XT_EXIT_OK;
}

/* --dicom: the run as Enhanced XA, classic XA and its dose report, beside the frames' files. */
static int write_dicom(render_cmd *R) {
  const xt_dicom_identity id = R->dicom_id;
  xt_dicom_run run = {.frames = R->dframes,
                      .pixels = (const uint16_t *const *)R->dpix,
                      .n = R->nframes,
                      .which = R->o.dicom_pixels == 1 ? XT_DICOM_RAW : XT_DICOM_PROC,
                      .frame_ms = 1000.0 / R->o.frame_rate,
                      .series_number = 1,
                      .fluoro = R->o.dicom_fluoro,
                      .software = "xtwin " XT_VERSION};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  run.t0_unix_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  xt_dicom_run_uids(&run);
  static const char *const suffix[3] = {"_xa.dcm", "_xa_classic.dcm", "_sr.dcm"};
  for (int k = 0; k < 3; k++) {
    unsigned char *b = NULL;
    size_t n = 0;
    int rc = k == 0 ? xt_dicom_enhanced_xa(&run, &id, &b, &n, &R->msg)
                    : k == 1 ? xt_dicom_classic_xa(&run, &id, &b, &n, &R->msg) : xt_dicom_dose_sr(&run, 1, &id, &b, &n, &R->msg);
    if (rc) return say(XT_EXIT_RUNTIME, "--dicom: %s", R->msg.text);
    char path[4200];
    snprintf(path, sizeof path, "%s%s", R->o.out, suffix[k]);
    int code = write_blob(R, path, b, n);
    free(b);
    if (code) return code;
  }
  return XT_EXIT_OK;
}

/* --iodine REGION=MG,...: each region of the main model (the thorax's names, or a flagged label's
 * number) with its iodine; one line naming a bad entry. */
static int parse_iodine(render_cmd *R) {
  const char *spec = R->o.iodine;
  if (!spec) return XT_EXIT_OK;
  const xt_volume *v = R->model->kind == XT_MODEL_LABELS ? xt_model_volume(R->model) : NULL;
  const int thorax = !R->o.volume && !R->o.ellipsoids && R->o.phantom == 2;
  while (*spec) {
    const size_t n = strcspn(spec, ",");
    char item[64];
    if (n >= sizeof item) return say(XT_EXIT_USAGE, "--iodine: entry '%.40s...' too long", spec);
    memcpy(item, spec, n);
    item[n] = 0;
    spec += n + (spec[n] == ',');
    char *eq = strchr(item, '='), *end = NULL;
    if (!eq) return say(XT_EXIT_USAGE, "--iodine: '%s' is not REGION=MG", item);
    *eq = 0;
    const double mg = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(mg >= 0 && mg <= 400))
      return say(XT_EXIT_USAGE, "--iodine: %s: '%s' is not a concentration in mg I/mL within 0..400", item, eq + 1);
    int label = -1;
    for (int l = 0; thorax && l < 256 && label < 0; l++)
      if (xt_phantom_thorax_region(l) && !strcmp(xt_phantom_thorax_region(l), item)) label = l;
    if (label < 0 && !thorax) {
      long x = strtol(item, &end, 10);
      if (*item && !*end && x > 0 && x < 256) label = (int)x;
    }
    if (label < 0 || !v || !v->materials || label >= v->materials->count || !v->materials->contrast[label])
      return say(XT_EXIT_USAGE, "--iodine: '%s' is no contrast region of %s", item, R->model->name);
    if (R->niodine == 8) return say(XT_EXIT_USAGE, "--iodine: at most 8 regions");
    const int k = R->niodine++;
    snprintf(R->iodine_name[k], sizeof R->iodine_name[k], "%s", item);
    R->iodine_names[k] = R->iodine_name[k];
    R->iodine_mg[k] = mg;
    R->iodine[k] = (xt_acq_iodine){R->model, label, mg * 1e-3};
  }
  return XT_EXIT_OK;
}

/* Every frame: exposed, summarised, written. */
static int render_frames(render_cmd *R) {
  for (int i = 0; i < R->nframes; i++) {
    xt_acq_frame fr;
    xt_sidecar_coverage cov;
    int code;
    if ((code = expose_frame(R, i, &fr)) || (code = frame_summary(R, i, &cov)) || (code = write_frame(R, i, &fr, &cov)) ||
        (code = keep_dicom_frame(R, i, &fr)))
      return code;
  }
  return R->o.dicom ? write_dicom(R) : XT_EXIT_OK;
}

/* All files appear together (or, on a failure, none). */
static int commit_outputs(render_cmd *R) {
  if (xt_outset_commit(&R->set, &R->msg)) return say(XT_EXIT_RUNTIME, "%s", R->msg.text); /* rolls back by itself */
  R->set_live = 0;
  for (int i = 0; i < R->nframes; i++)
    printf("wrote %s.{npy,png,json}%s  %dx%d  line integral min %.6g max %.6g  %.1f ms (%s)\n", R->frames[i].stem,
           R->o.chain ? " + _raw.png, _proc.png" : "", R->mode->cols, R->mode->rows, R->frames[i].lmin, R->frames[i].lmax,
           R->frames[i].ms, xt_backend_name(R->backend));
  if (R->o.dicom)
    printf("wrote %s_xa.dcm (Enhanced XA, %d frames), %s_xa_classic.dcm (classic XA), %s_sr.dcm (dose SR)\n", R->o.out,
           R->nframes, R->o.out, R->o.out);
  return XT_EXIT_OK;
}

int xt_cmd_render(int argc, char **argv) {
  render_cmd *R = calloc(1, sizeof *R);
  if (!R) return say(XT_EXIT_RUNTIME, "out of memory");
  xt_outset_init(&R->set);
  xt_acq_plane_init(&R->plane);
  xt_acq_renderer_init(&R->rnd, NULL, 0);
  int help = 0, code = parse_options(R, argc, argv, &help);
  if (!code && !help && !(code = plan_frames(R)) && !(code = check_inputs(R)) && !(code = load_models(R)) &&
      !(code = make_projector(R)) && !(code = parse_iodine(R)) && !(code = render_frames(R)))
    code = commit_outputs(R);
  if (R->set_live && code != XT_EXIT_OK) xt_outset_abort(&R->set);
  xt_outset_free(&R->set);
  free(R->lineint);
  free(R->pix);
  free(R->raw);
  free(R->proc);
  xt_acq_renderer_free(&R->rnd);
  xt_acq_plane_destroy(&R->plane);
  xt_proj_destroy(R->proj);
  xt_model_free(R->model);
  for (int i = 0; i < R->nadded; i++) xt_model_free(R->added[i]);
  for (int i = 0; R->dpix && i < R->nframes; i++) free(R->dpix[i]);
  free(R->dpix);
  free(R->dframes);
  free(R->frames);
  free(R);
  return code;
}
