/* `xtwin store`: C-STORE of DICOM files (an `xtwin render --dicom` run, its dose report) to a PACS,
 * through output/xt_pacs.h (DCMTK's network module): one association, a C-ECHO, then each file. Exit 0 when every file was stored, 1 on a network or PACS failure, 2 on
 * usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xt_cli.h"
#include "xt_pacs.h"
#include "xt_opt.h"

#define say(code, ...) xt_cli_say("store", (code), __VA_ARGS__)

void xt_cmd_store_help(FILE *out) {
  fprintf(out, "usage: xtwin store --to HOST:PORT [--called AET] [--calling AET] FILE...\n"
               "\n"
               "Sends DICOM files to a PACS (one association: C-ECHO, then C-STORE of each), e.g. the Enhanced XA, classic XA and\n"
               "dose SR of `xtwin render --dicom` (docs/dicom.md).\n"
               "  --to HOST:PORT   the PACS (its DICOM port)\n"
               "  --called AET     its AE title (default ANY-SCP)\n"
               "  --calling AET    ours (default XTWIN)\n");
}

int xt_cmd_store(int argc, char **argv) {
  const char *to = NULL, *called = NULL, *calling = NULL;
  const char **files = calloc((size_t)argc, sizeof *files);
  int n = 0, code = XT_EXIT_OK;
  if (!files) return say(XT_EXIT_RUNTIME, "out of memory");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      xt_cmd_store_help(stdout);
      goto done;
    }
    const char **dst = !strcmp(a, "--to") ? &to : !strcmp(a, "--called") ? &called : !strcmp(a, "--calling") ? &calling : NULL;
    if (dst) {
      if (i + 1 >= argc) {
        code = say(XT_EXIT_USAGE, "%s: needs a value", a);
        goto done;
      }
      *dst = argv[++i];
    } else if (!strncmp(a, "--", 2)) {
      code = say(XT_EXIT_USAGE, "unknown option %s (see xtwin store --help)", a);
      goto done;
    } else {
      files[n++] = a;
    }
  }
  if (!to) {
    code = say(XT_EXIT_USAGE, "--to HOST:PORT is required");
    goto done;
  }
  if (!n) {
    code = say(XT_EXIT_USAGE, "no files to store");
    goto done;
  }
  const char *titles[2] = {called, calling};
  for (int k = 0; k < 2; k++)
    if (titles[k] && (!titles[k][0] || strlen(titles[k]) > 16)) {
      code = say(XT_EXIT_USAGE, "--%s: AE title \"%s\": 1 to 16 characters", k ? "calling" : "called", titles[k]);
      goto done;
    }
  char host[256];
  const char *colon = strrchr(to, ':');
  char *end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : 0;
  if (!colon || colon == to || (size_t)(colon - to) >= sizeof host || !end || *end || port < 1 || port > 65535) {
    code = say(XT_EXIT_USAGE, "--to: expected HOST:PORT, got \"%s\"", to);
    goto done;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - to), to);
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (stat(files[i], &st) != 0) {
      code = say(XT_EXIT_RUNTIME, "\"%s\": %s", files[i], strerror(errno));
      goto done;
    }
    if (!S_ISREG(st.st_mode)) {
      code = say(XT_EXIT_RUNTIME, "\"%s\": not a file", files[i]);
      goto done;
    }
  }
  xt_msg msg = {0};
  const xt_pacs_peer peer = {host, (int)port, called, calling, 0};
  if (xt_pacs_store(&peer, files, n, &msg)) {
    code = say(XT_EXIT_RUNTIME, "%s", msg.text);
    goto done;
  }
  printf("stored %d file%s on %s@%s:%ld\n", n, n == 1 ? "" : "s", called ? called : "ANY-SCP", host, port);
done:
  free(files);
  return code;
}
