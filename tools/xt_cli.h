/* Subcommands of the xtwin program (tools/xtwin.c dispatches to them). Each returns the process
 * exit status: 0 success, 1 a runtime failure (file, device, write), 2 a usage error. Every
 * failure is exactly one line on stderr, prefixed with "xtwin <command>: ". */
#ifndef XT_CLI_H
#define XT_CLI_H

#include <stdio.h>

enum { XT_EXIT_OK = 0, XT_EXIT_RUNTIME = 1, XT_EXIT_USAGE = 2 };

#ifndef XT_VERSION
#define XT_VERSION "0.0.0"
#endif

/* argv[0] is "render"; the options follow. */
int xt_cmd_render(int argc, char **argv);
void xt_cmd_render_help(FILE *out);
/* argv[0] is "nvdb-convert" (tools/xt_nvdb_cmd.c; built with the loaders and NanoVDB's builder). */
int xt_cmd_nvdb_convert(int argc, char **argv);
void xt_cmd_nvdb_convert_help(FILE *out);

/* argv[0] is "gmm-fit" (tools/xt_gmm_fit_cmd.c). */
int xt_cmd_gmm_fit(int argc, char **argv);
void xt_cmd_gmm_fit_help(FILE *out);
/* argv[0] is "dataset"; SPEC.json and the options follow (tools/xt_dataset_cmd.c). */
int xt_cmd_dataset(int argc, char **argv);
void xt_cmd_dataset_help(FILE *out);
/* argv[0] is "replay"; LOG and the options follow (tools/xt_replay_cmd.c). */
int xt_cmd_replay(int argc, char **argv);
void xt_cmd_replay_help(FILE *out);

/* argv[0] is "refak" (tools/xt_refak_cmd.c): reference air kerma in the IFU's PMMA set-up. */
int xt_cmd_refak(int argc, char **argv);
void xt_cmd_refak_help(FILE *out);

/* argv[0] is "store"; FILEs and the options follow (tools/xt_store_cmd.c): C-STORE to a PACS. */
int xt_cmd_store(int argc, char **argv);
void xt_cmd_store_help(FILE *out);

#endif /* XT_CLI_H */
