/* libFuzzer entry point for the volume loaders: the input is written to a temporary file under
 * each supported name (.mha, .mhd, .nrrd, .nhdr, .nii, .nii.gz) and loaded with every
 * conversion. Any error code is fine; crashes, leaks, hangs and sanitizer reports are not.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *names[] = {"f.mha", "f.mhd", "f.nrrd", "f.nhdr", "f.nii", "f.nii.gz"};
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/xt_fuzz_XXXXXX");
    if (!mkdtemp(dir)) return 0;
    /* a detached data file the corpus headers may name */
    char raw[128];
    snprintf(raw, sizeof raw, "%s/f.raw", dir);
    uint8_t zeros[256] = {0};
    write_all(raw, zeros, sizeof zeros);
  }
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[n]);
    write_all(path, data, size);
    for (int c = XT_LOAD_MU; c <= XT_LOAD_LABELS; c++) {
      xt_load_options o = {.convert = (xt_load_convert)c};
      xt_volume *v = NULL;
      xt_msg m;
      if (xt_volume_load(path, &o, &v, &m) == 0) xt_volume_free(v);
    }
    unlink(path);
  }
  return 0;
}
