/* libFuzzer entry point for the Gaussian-mixture readers: the input is written under each name
 * xt_model_load maps to a GMM reader (.xgmm, .gmm, .gmm.json) and loaded. Any error code is fine;
 * crashes, leaks, hangs and sanitizer reports are not. Seed corpus: tests/fuzz/gmm/ (also loaded by
 * test_gmm's fuzz_corpus_never_crashes). Build with clang; run by hand:
 *   build/tests/fuzz_gmm -max_total_time=60 tests/fuzz/gmm */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *names[] = {"f.xgmm", "f.gmm", "f.gmm.json"};
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/xt_fuzz_gmm_XXXXXX");
    if (!mkdtemp(dir)) return 0;
  }
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[n]);
    FILE *f = fopen(path, "wb");
    if (!f) continue;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    xt_model *m = NULL;
    xt_msg msg;
    if (xt_model_load(path, NULL, NULL, &m, &msg) == 0) xt_model_free(m);
    unlink(path);
  }
  return 0;
}
