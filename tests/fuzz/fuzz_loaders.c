/* libFuzzer entry point for the volume loaders: the input is written to a temporary file under
 * a supported name (.mha, .mhd, .nrrd, .nhdr, .nii, .nii.gz) and loaded with a conversion, confined
 * to the fuzz folder or not (see below). Any error code is fine; crashes, leaks, hangs and sanitizer reports are not.
 * Seed corpus: tests/fuzz/loaders/ (also loaded by test_loaders' fuzz_corpus test). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void write_all(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
}

/* The last byte picks the file name (% 6) and the conversion (/ 6 % 4), and whether the load is
 * confined to the fuzz folder (/ 24 % 2, as the server's POST /v1/models is): one load per
 * execution, so long runs (scripts/long-fuzz) reach 1e7 executions in reasonable time. The rest is
 * the file. XT_FUZZ_ALL_NAMES=1 instead loads the whole input under every name and conversion. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *names[] = {"f.mha", "f.mhd", "f.nrrd", "f.nhdr", "f.nii", "f.nii.gz"};
  static int all = -1;
  if (all < 0) all = getenv("XT_FUZZ_ALL_NAMES") && atoi(getenv("XT_FUZZ_ALL_NAMES")) > 0;
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/xt_fuzz_XXXXXX");
    if (!mkdtemp(dir)) return 0;
    /* a detached data file the corpus headers may name */
    char raw[128];
    snprintf(raw, sizeof raw, "%s/f.raw", dir);
    uint8_t zeros[256] = {0};
    write_all(raw, zeros, sizeof zeros);
  }
  const char *root = dir;
  unsigned sel = size ? data[size - 1] : 0;
  size_t n0 = all ? 0 : sel % 6, n1 = all ? 6 : n0 + 1;
  int c0 = all ? XT_LOAD_MU : (int)(sel / 6 % 4), c1 = all ? XT_LOAD_LABELS : c0;
  size_t len = all || !size ? size : size - 1;
  for (size_t n = n0; n < n1; n++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[n]);
    write_all(path, data, len);
    for (int c = c0; c <= c1; c++) {
      xt_load_options o = {.convert = (xt_load_convert)c};
      if (!all && sel / 24 % 2) {
        o.roots = &root;
        o.nroots = 1;
      }
      xt_volume *v = NULL;
      xt_msg m;
      if (xt_volume_load(path, &o, &v, &m) == 0) xt_volume_free(v);
    }
    unlink(path);
  }
  return 0;
}
