/* xtwin: the command-line program. A table of subcommands (name, summary, handler) drives both
 * dispatch and `xtwin help`; each subcommand owns its options (render: tools/xt_render_cmd.c).
 *
 *   xtwin render [options]   render projections (npy + png + json per frame)
 *   xtwin gmm-fit [options]  fit a Gaussian mixture to a volume or phantom
 *   xtwin nvdb-convert [...] volume or phantom -> NanoVDB grid (.nvdb)
 *   xtwin store [...]        C-STORE DICOM files to a PACS
 *   xtwin modes              list the detector modes
 *   xtwin bench [...]        benchmarks (when built with bench/)
 *   xtwin help [command]     help;  xtwin --version */
#include <stdio.h>
#include <string.h>

#include "xt_cli.h"
#include "xt_geom.h"
#include "xt_proj.h"
#ifdef XT_HAVE_BENCH
#include "xt_bench.h"
#endif

static int cmd_modes(int argc, char **argv);
static int cmd_bench(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

typedef struct xt_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} xt_command;

static const xt_command commands[] = {
    {"render", "render X-ray projections of the head phantom or a volume file (npy, png, json)", xt_cmd_render},
    {"gmm-fit", "fit a Gaussian mixture to a volume file or a built-in phantom (xgmm/gmm, report)", xt_cmd_gmm_fit},
#ifdef XT_HAVE_NVDB_CONVERT
    {"nvdb-convert", "convert a volume file or phantom into a NanoVDB sparse grid (.nvdb)", xt_cmd_nvdb_convert},
#endif
    {"dataset", "generate a labelled dataset from a spec: sharded, resumable, reproducible (see docs/dataset.md)", xt_cmd_dataset},
    {"replay", "render a server session's frames again from its session log (docs/session-log.md)", xt_cmd_replay},
    {"refak", "reference air kerma per image and per minute of protocols and fields (IFU PMMA set-up)", xt_cmd_refak},
    {"store", "send DICOM files (render --dicom's run and dose report) to a PACS by C-STORE (docs/dicom.md)", xt_cmd_store},
    {"modes", "list the detector modes (name, pixels, pitch, distances)", cmd_modes},
    {"bench", "run the benchmarks (see xtwin bench --help)", cmd_bench},
    {"help", "show this help, or a command's: xtwin help render", cmd_help},
    {"version", "print the version and the optional parts built in", cmd_version},
};
#define NCMD ((int)(sizeof commands / sizeof commands[0]))

static const xt_command *find_command(const char *name) {
  for (int i = 0; i < NCMD; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: xtwin <command> [options]\n"
          "\n"
          "xtwin %s: a digital twin of an interventional C-arm's X-ray imaging chain.\n"
          "\n"
          "commands:\n",
          XT_VERSION);
  for (int i = 0; i < NCMD; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n"
          "global options:\n"
          "  -h, --help     this help\n"
          "  --version      the version\n"
          "\n"
          "Run `xtwin <command> --help` for a command's options. Exit status: 0 success, 1 runtime\n"
          "failure, 2 usage error; every failure prints one line on stderr.\n");
}

static int cmd_modes(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: xtwin modes\n\nLists the detector modes usable with `xtwin render --mode NAME`.\n");
    return XT_EXIT_OK;
  }
  if (argc > 1) {
    fprintf(stderr, "xtwin modes: unexpected argument \"%s\"\n", argv[1]);
    return XT_EXIT_USAGE;
  }
  printf("%-10s %11s %9s %9s %9s  %s\n", "name", "cols x rows", "pitch mm", "SOD mm", "SID mm", "description");
  for (int i = 0; i < xt_mode_count(); i++) {
    const xt_detector_mode *m = xt_mode_at(i);
    char size[32];
    snprintf(size, sizeof size, "%dx%d", m->cols, m->rows);
    printf("%-10s %11s %9g %9g %9g  %s\n", m->name, size, m->pitch_u_mm, m->sod_mm, m->sid_mm, m->description);
  }
  return XT_EXIT_OK;
}

static int cmd_bench(int argc, char **argv) {
#ifdef XT_HAVE_BENCH
  return xt_bench_main(argc, argv);
#else
  (void)argc;
  (void)argv;
  fprintf(stderr, "xtwin bench: benchmarks not built into this xtwin (no xt_bench target at configure time)\n");
  return XT_EXIT_USAGE;
#endif
}

static int cmd_version(int argc, char **argv) {
  (void)argc;
  (void)argv;
  xt_msg msg;
  int cuda = xt_proj_available(XT_BACKEND_CUDA, &msg) == 0;
#ifdef XT_HAVE_LOADERS
  const char *loaders = "yes";
#else
  const char *loaders = "no";
#endif
#ifdef XT_HAVE_BENCH
  const char *bench = "yes";
#else
  const char *bench = "no";
#endif
  printf("xtwin %s (backends: cpu%s; volume loading: %s; bench: %s)\n", XT_VERSION, cuda ? ", cuda" : "", loaders,
         bench);
  return XT_EXIT_OK;
}

static int cmd_help(int argc, char **argv) {
  if (argc < 2) {
    usage(stdout);
    return XT_EXIT_OK;
  }
  if (strcmp(argv[1], "render") == 0) {
    xt_cmd_render_help(stdout);
    return XT_EXIT_OK;
  }
  const xt_command *c = find_command(argv[1]);
  if (!c) {
    fprintf(stderr, "xtwin help: unknown command \"%s\" (see xtwin help)\n", argv[1]);
    return XT_EXIT_USAGE;
  }
  char help_arg[] = "--help";
  char *sub[2] = {argv[1], help_arg};
  return c->run(2, sub);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "xtwin: no command given (see xtwin --help)\n");
    return XT_EXIT_USAGE;
  }
  const char *a = argv[1];
  if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
    usage(stdout);
    return XT_EXIT_OK;
  }
  if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) return cmd_version(argc - 1, argv + 1);
  const xt_command *c = find_command(a);
  if (!c) {
    fprintf(stderr, "xtwin: unknown command \"%s\" (see xtwin --help)\n", a);
    return XT_EXIT_USAGE;
  }
  return c->run(argc - 1, argv + 1);
}
