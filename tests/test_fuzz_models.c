/* The seed corpora of the model-reader fuzz target (tests/fuzz/nvdb/, tests/fuzz/gmm/) replayed
 * through the target's own code (tests/fuzz/fuzz_models.c, built with XT_FUZZ_NO_ENTRY): every
 * file under every reader's name, with a set of load options, a loaded model rendered by the CPU
 * reference. Nothing may crash, leak (LeakSanitizer in the asan build) or break the loaders'
 * promise (the target aborts on that). So that the replay can fail for the right reason too, the
 * corpus's names say what must happen under the reader they name: files written by our own writers
 * (tests/fuzz/nvdb/float_*, int16_*, zip_*; tests/fuzz/gmm/native_ok, native_labels, thesis_ok,
 * json_ok) load and render; the hostile ones (bad_*; the GMM readers' rejections) fail; odd_* may
 * do either. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_err.h"
#include "xt_fuzz_models.h"
#include "xt_test.h"

#ifndef XT_FUZZ_NVDB_CORPUS_DIR
#error "XT_FUZZ_NVDB_CORPUS_DIR: tests/fuzz/nvdb"
#endif
#ifndef XT_FUZZ_GMM_CORPUS_DIR
#error "XT_FUZZ_GMM_CORPUS_DIR: tests/fuzz/gmm"
#endif

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = NULL;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1)) && fread(b, 1, (size_t)len, f) != (size_t)len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)(len > 0 ? len : 0);
  return b;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The reader a seed is meant for (-1: none in particular), and whether it must load (1), fail (0)
 * or may do either (-1) under that reader with the default options. */
static int intended(int gmm, const char *name, int *must_load) {
  *must_load = -1;
  if (!gmm) { /* odd_*: damage the reader may accept (file metadata that its grid contradicts) */
    *must_load = starts(name, "bad_") ? 0 : starts(name, "odd_") ? -1 : 1;
    return 0;
  }
  static const struct {
    const char *prefix;
    int reader;
  } kinds[] = {{"native", 1}, {"thesis", 2}, {"json", 3}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    if (starts(name, kinds[k].prefix)) {
      *must_load = !strcmp(name + strlen(kinds[k].prefix), "_ok") || !strcmp(name, "native_labels");
      return kinds[k].reader;
    }
  return -1;
}

static void replay(const char *corpus, int gmm, int *files, int *loads, int *checked) {
  static const int options[] = {0, 1, 2, 3, 4, 5, 8, 16, 21};
  DIR *d = opendir(corpus);
  XT_REQUIRE(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", corpus, e->d_name);
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    XT_CHECK_MSG(b != NULL, "%s: cannot read", path);
    if (!b) continue;
    XT_CHECK_MSG(n <= 400000, "%s: seeds stay within the fuzzer's -max_len (400000 bytes)", path);
    int must_load, want = intended(gmm, e->d_name, &must_load);
    for (int r = 0; r < XT_FUZZ_MODELS_NAMES; r++)
      for (size_t o = 0; o < sizeof options / sizeof options[0]; o++) {
        int rc = xt_fuzz_models_load(b, n, r, options[o]);
        *loads += rc == 0;
        if (r != want || options[o] != 0 || must_load < 0) continue;
        (*checked)++;
        if (must_load)
          XT_CHECK_MSG(rc == 0, "%s: written by our own writer, yet %s refuses it (%s)", e->d_name,
                       xt_fuzz_models_names[r], xt_errname(rc));
        else
          XT_CHECK_MSG(rc != 0, "%s: hostile, yet %s loads and renders it", e->d_name, xt_fuzz_models_names[r]);
      }
    free(b);
    (*files)++;
  }
  closedir(d);
}

XT_TEST(nvdb_corpus) {
  int files = 0, loads = 0, checked = 0;
  replay(XT_FUZZ_NVDB_CORPUS_DIR, 0, &files, &loads, &checked);
  printf("  tests/fuzz/nvdb: %d files, %d loads of %d, %d outcomes checked\n", files, loads, files * 4 * 9, checked);
  XT_CHECK(files >= 15 && checked >= files - 2);
}

XT_TEST(gmm_corpus) {
  int files = 0, loads = 0, checked = 0;
  replay(XT_FUZZ_GMM_CORPUS_DIR, 1, &files, &loads, &checked);
  printf("  tests/fuzz/gmm: %d files, %d loads of %d, %d outcomes checked\n", files, loads, files * 4 * 9, checked);
  XT_CHECK(files >= 15 && checked >= 15);
}

XT_TEST_MAIN(XT_ENTRY(nvdb_corpus) XT_ENTRY(gmm_corpus))
