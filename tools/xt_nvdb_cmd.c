/* `xtwin nvdb-convert`: a volume file or a built-in phantom -> a one-grid NanoVDB file (.nvdb),
 * dense mu or material labels, with an activation tolerance and a choice of value type.
 *
 * The grid is built by NanoVDB's GridBuilder (models/xt_nvdb_build.cpp) and written by NanoVDB's
 * own writer; before the file is committed it is loaded back through the reader every other
 * command uses (models/xt_nvdb.c), so a file this command writes is one xtwin reads. The output
 * appears whole or not at all (xt_outset). Options are one table (drives parsing and --help). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xt_cli.h"
#include "xt_ct_body.h"
#include "xt_hu.h"
#include "xt_load.h"
#include "xt_nvdb.h"
#include "xt_nvdb_build.h"
#include "xt_opt.h"
#include "xt_out.h"
#include "xt_phantom.h"

typedef struct conv_opts {
  int phantom;
  int phantom_size;
  double phantom_spacing;
  const char *volume;
  const char *ellipsoids;
  int labels;
  int convert;
  double energy;
  int quant;
  double tolerance, fpn_tolerance, background;
  const char *name;
  int zip;
  int classify;
  double body_hu;
  const char *out;
  int help;
} conv_opts;

#define OFF(f) offsetof(conv_opts, f)
static const xt_opt tab[] = {
    {"phantom", XT_OPT_CHOICE, NULL, "head", NULL, 0, 0, "head|head-labels", OFF(phantom),
     "built-in Shepp-Logan head: dense mu, or uint8 material labels (used unless --volume or --ellipsoids)"},
    {"phantom-size", XT_OPT_INT, "N", "256", NULL, 2, 1024, NULL, OFF(phantom_size), "phantom voxels per side"},
    {"phantom-spacing", XT_OPT_REAL, "MM", "1", NULL, 0.01, 20, NULL, OFF(phantom_spacing), "phantom voxel size in mm"},
    {"ellipsoids", XT_OPT_STRING, "FILE", NULL, "none", 0, 0, NULL, OFF(ellipsoids),
     "an ellipsoid phantom (JSON, docs/models.md), voxelised on the --phantom-size/--phantom-spacing grid"},
    {"labels", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(labels), "voxelise --ellipsoids as material labels"},
    {"volume", XT_OPT_STRING, "PATH", NULL, "none", 0, 0, NULL, OFF(volume),
     "convert a volume file instead: .nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd"},
    {"convert", XT_OPT_CHOICE, NULL, "hu", NULL, 0, 0, "mu|hu|hu-labels|labels", OFF(convert),
     "meaning of --volume's voxels: mu in 1/mm, HU -> mu, HU -> material labels, integer labels"},
    {"energy", XT_OPT_REAL, "KEV", "60", NULL, 20, 150, NULL, OFF(energy),
     "effective energy of the HU conversion and of the material table stored with label grids"},
    {"quant", XT_OPT_CHOICE, NULL, NULL, "auto for mu, int16 for labels", 0, 0, XT_NVDB_QUANT_NAMES, OFF(quant),
     "value type: float (exact), index (exact; floats for the active voxels only: an IndexGrid with a value "
     "channel), auto (index where it is smaller than float, else float), fp16/fp8/fp4 (per-leaf quantisation), "
     "fpn (variable width, error <= --fpn-tolerance), int16 (labels); labels need float, index, fp16, fp8 "
     "(exact: ids rounded on read) or int16"},
    {"tolerance", XT_OPT_REAL, "MU", "0", NULL, 0, 10, NULL, OFF(tolerance),
     "activation tolerance, 1/mm: mu within this of the background is stored as the background and left "
     "inactive (dense only; e.g. 1e-4 makes air with noise inactive)"},
    {"fpn-tolerance", XT_OPT_REAL, "MU", "1e-4", NULL, 1e-9, 1, NULL, OFF(fpn_tolerance),
     "fpn: largest absolute error of a stored mu, 1/mm"},
    {"background", XT_OPT_REAL, "VALUE", "0", NULL, -1e6, 1e6, NULL, OFF(background),
     "background: mu in 1/mm (dense), or a label id (labels)"},
    {"classify", XT_OPT_CHOICE, NULL, "body", NULL, 0, 0, "body|off", OFF(classify),
     "--convert hu: body makes everything outside the patient the background (the largest connected part at or "
     "above --body-hu, and per slice the air and objects between it and the image edge: docs/models.md, \"A CT's "
     "background\"); its error is reported; off keeps every voxel as loaded"},
    {"body-hu", XT_OPT_REAL, "HU", "-500", NULL, -1000, 1000, NULL, OFF(body_hu),
     "--classify body: the HU at and above which a voxel can be part of the patient"},
    {"name", XT_OPT_STRING, "GRID", NULL, "density (mu) or labels", 0, 0, NULL, OFF(name), "the grid's name"},
    {"zip", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(zip), "compress the grid in the file (NanoVDB's ZIP codec)"},
    {"out", XT_OPT_STRING, "FILE.nvdb", NULL, "required", 0, 0, NULL, OFF(out), "the file to write"},
    {"help", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, OFF(help), "print this help and exit"},
};
#define NOPT ((int)(sizeof tab / sizeof tab[0]))

void xt_cmd_nvdb_convert_help(FILE *out) {
  fprintf(out, "usage: xtwin nvdb-convert [options] --out FILE.nvdb\n"
               "\n"
               "Converts a volume file or a phantom into a NanoVDB sparse grid (NanoVDB 32.4, one grid per file)\n"
               "that xtwin render --volume, xtwin-server --model and POST /v1/models load. Voxel (i,j,k) becomes\n"
               "index (i,j,k) and the grid keeps the volume's index-to-model map, so it renders where the volume\n"
               "does; the volume's box is kept as the grid's domain (background there), and label grids carry\n"
               "their material table.\n"
               "\n"
               "options:\n");
  xt_opt_print_help(tab, NOPT, out);
  fprintf(out, "\n"
               "examples:\n"
               "  xtwin nvdb-convert --volume ct.nii.gz --convert hu --tolerance 1e-4 --quant fp8 --out ct.nvdb\n"
               "  xtwin nvdb-convert --phantom head-labels --phantom-size 256 --quant int16 --out head.nvdb\n");
}

#define say(code, ...) xt_cli_say("nvdb-convert", (code), __VA_ARGS__)

static int seen_opt(const int *seen, const char *name) {
  const int i = xt_opt_find(tab, NOPT, name);
  return i >= 0 && seen[i];
}

/* The source volume (owned by the returned model). */
static int source(const conv_opts *o, xt_model **out, xt_msg *msg) {
  const int dim[3] = {o->phantom_size, o->phantom_size, o->phantom_size};
  if (o->volume) {
    static const xt_load_convert conv[] = {XT_LOAD_MU, XT_LOAD_HU_TO_MU, XT_LOAD_HU_TO_LABELS, XT_LOAD_LABELS};
    xt_load_options lo = {.convert = conv[o->convert], .energy_kev = o->energy};
    xt_volume *v = NULL;
    int rc = xt_volume_load(o->volume, &lo, &v, msg);
    if (!rc && (rc = xt_model_from_volume(v, NULL, out, msg))) xt_volume_free(v);
    return rc;
  }
  if (o->ellipsoids) {
    const double sp[3] = {o->phantom_spacing, o->phantom_spacing, o->phantom_spacing};
    xt_material_table mt;
    xt_phantom ph;
    xt_volume *v = NULL;
    int rc;
    if ((rc = xt_materials_default(o->energy, &mt, msg)) || (rc = xt_phantom_load_json(o->ellipsoids, &mt, &ph, msg)) ||
        (rc = xt_phantom_voxelize(&ph, dim, sp, o->labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &mt, &v, msg)))
      return rc;
    if ((rc = xt_model_from_volume(v, ph.name, out, msg))) xt_volume_free(v);
    return rc;
  }
  return xt_phantom_head_model(dim, o->phantom_spacing, o->phantom == 1 ? XT_VOXEL_U8 : XT_VOXEL_F32, out, msg);
}

int xt_cmd_nvdb_convert(int argc, char **argv) {
  conv_opts o;
  int seen[XT_OPT_MAX];
  xt_msg msg = {{0}};
  int code = XT_EXIT_OK, rc;
  xt_model *m = NULL;
  uint32_t *words = NULL;
  uint64_t bytes = 0;
  xt_nvdb *check = NULL;
  xt_outset set;
  int live = 0;
  xt_outset_init(&set);
  memset(&o, 0, sizeof o);
  if (xt_opt_parse(tab, NOPT, argc - 1, argv + 1, &o, seen, &msg))
    return say(XT_EXIT_USAGE, "%s (see xtwin nvdb-convert --help)", msg.text);
  if (o.help) {
    xt_cmd_nvdb_convert_help(stdout);
    return XT_EXIT_OK;
  }
  if (!o.out) return say(XT_EXIT_USAGE, "--out: required (the .nvdb file to write)");
  const size_t ol = strlen(o.out);
  if (ol < 6 || strcmp(o.out + ol - 5, ".nvdb") != 0) return say(XT_EXIT_USAGE, "--out: \"%s\" must end in .nvdb", o.out);
  if (o.volume && (o.ellipsoids || seen_opt(seen, "phantom")))
    return say(XT_EXIT_USAGE, "--volume excludes --%s", o.ellipsoids ? "ellipsoids" : "phantom");
  if (o.ellipsoids && seen_opt(seen, "phantom")) return say(XT_EXIT_USAGE, "--ellipsoids and --phantom exclude each other");
  if (o.labels && !o.ellipsoids) return say(XT_EXIT_USAGE, "--labels: applies to --ellipsoids only");
  if (!o.volume && seen_opt(seen, "convert")) return say(XT_EXIT_USAGE, "--convert: applies to --volume only");
  if (o.volume) {
    struct stat st;
    if (stat(o.volume, &st) != 0) return say(XT_EXIT_RUNTIME, "--volume: \"%s\": %s", o.volume, strerror(errno));
  }

  if ((rc = source(&o, &m, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s%s", o.volume ? "--volume: " : "", msg.text);
    goto done;
  }
  const int labels = xt_model_volume(m)->type == XT_VOXEL_U8;
  if (!seen_opt(seen, "quant")) o.quant = labels ? XT_NVDB_Q_INT16 : XT_NVDB_Q_AUTO;
  if (labels && o.quant == XT_NVDB_Q_AUTO) {
    code = say(XT_EXIT_USAGE, "--quant auto: for mu volumes; labels take float, index, fp16, fp8 or int16");
    goto done;
  }
  if (labels && seen_opt(seen, "tolerance")) {
    code = say(XT_EXIT_USAGE, "--tolerance: applies to dense mu, not to labels");
    goto done;
  }
  /* A CT's surroundings become the background by default (HU input only: the threshold is a HU). */
  const int classify = o.volume && o.convert == 1 && o.classify == 0;
  if ((seen_opt(seen, "classify") || seen_opt(seen, "body-hu")) && o.classify == 0 && !(o.volume && o.convert == 1)) {
    code = say(XT_EXIT_USAGE, "--classify body / --body-hu: apply to --volume with --convert hu only");
    goto done;
  }
  xt_ct_body_report br;
  if (classify) {
    xt_hu_calib cal;
    if ((rc = xt_hu_calib_make(XT_HU_BILINEAR, o.energy, 0, &cal, &msg)) ||
        (rc = xt_ct_body_classify(xt_model_volume(m), xt_hu_calib_mu(&cal, o.body_hu), o.background, &br, &msg))) {
      code = say(XT_EXIT_RUNTIME, "%s", msg.text);
      goto done;
    }
  }
  xt_nvdb_build_options bo = {o.quant, o.background, o.tolerance, o.fpn_tolerance, o.name};
  if ((rc = xt_nvdb_build(xt_model_volume(m), &bo, &words, &bytes, &msg))) {
    code = say(rc == XT_EINVAL ? XT_EXIT_USAGE : XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  /* What every reader of the file will see: the same checks before the file exists. */
  uint32_t *copy = aligned_alloc(32, (size_t)((bytes + 31) & ~(uint64_t)31));
  if (!copy) {
    code = say(XT_EXIT_RUNTIME, "out of memory");
    goto done;
  }
  memcpy(copy, words, (size_t)bytes);
  if ((rc = xt_nvdb_from_blob(copy, bytes, NULL, "converted grid", &check, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  live = 1;
  FILE *f = NULL;
  if ((rc = xt_outset_mkdirs(&set, o.out, &msg)) || (rc = xt_outset_open(&set, o.out, &f, &msg))) {
    code = say(XT_EXIT_RUNTIME, "--out: %s", msg.text);
    goto done;
  }
  rc = xt_nvdb_write(f, words, bytes, o.zip, &msg);
  if (rc) {
    fclose(f);
    code = say(XT_EXIT_RUNTIME, "\"%s\": %s", o.out, msg.text);
    goto done;
  }
  if ((rc = xt_outset_close(&set, f, o.out, &msg)) || (rc = xt_outset_commit(&set, &msg))) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  live = 0;
  if (classify) {
    char line[512];
    xt_ct_body_format(&br, o.body_hu, line, sizeof line);
    printf("%s\n", line);
  }
  printf("wrote %s: grid \"%s\" %s (%s), domain %dx%dx%d, %.1f%% active, %llu bytes (%.1f%% of %s)\n", o.out,
         check->grid_name, xt_nvdb_type_name(check->grid_type), labels ? "labels" : "mu 1/mm",
         check->hi[0] - check->lo[0] + 1, check->hi[1] - check->lo[1] + 1, check->hi[2] - check->lo[2] + 1,
         100 * xt_nvdb_active_fraction(check), (unsigned long long)bytes,
         100.0 * (double)bytes / (double)xt_model_volume(m)->nbytes, labels ? "the uint8 volume" : "the dense float volume");
done:
  if (live) xt_outset_abort(&set);
  xt_outset_free(&set);
  xt_nvdb_free(check);
  free(words);
  xt_model_free(m);
  return code;
}
