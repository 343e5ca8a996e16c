/* The one way a GPU test binary (label gpu) skips: XT_TEST_MAIN_CUDA(entries) in place of
 * XT_TEST_MAIN, or xt_test_require_cuda(argv[0]) first thing in main. Without a usable CUDA device
 * (none present or visible, no driver, a driver too old for the runtime, a build without CUDA) the
 * binary prints one line
 *
 *   SKIP <binary>: no usable CUDA device (<why>)      or
 *   SKIP <binary>: no usable CUDA device: <why>       (xt_proj_available's reason, without its
 *                                                     "backend cuda: ")
 *
 * and exits XT_TEST_SKIP (77), which xt_add_test (tests/CMakeLists.txt) gives every gpu test as
 * ctest's SKIP_RETURN_CODE; tests/test_gpu_skip.py runs every gpu test with its devices hidden and
 * fails where one does not skip so. With a device it returns and the tests run. */
#ifndef XT_TEST_CUDA_H
#define XT_TEST_CUDA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xt_proj.h"
#include "xt_test.h"

#define XT_TEST_SKIP 77

static void xt_test_require_cuda(const char *argv0) {
  const char *slash = strrchr(argv0, '/');
  const char *name = slash ? slash + 1 : argv0;
  /* The probe initialises CUDA, which the forked test children could then not use: it runs in a
   * child of its own. */
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    xt_msg msg;
    int rc = xt_proj_available(XT_BACKEND_CUDA, &msg);
    if (rc) {
      const char *why = strncmp(msg.text, "backend cuda: ", 14) == 0 ? msg.text + 14 : msg.text;
      const char *lead = strncmp(why, "no usable CUDA device", 21) == 0 ? "" : "no usable CUDA device: ";
      printf("SKIP %s: %s%s\n", name, lead, why);
    }
    fflush(stdout);
    _exit(rc ? XT_TEST_SKIP : 0);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != XT_TEST_SKIP)) {
    fprintf(stderr, "%s: the CUDA availability probe failed (status 0x%x)\n", name, (unsigned)st);
    exit(1);
  }
  if (WEXITSTATUS(st) == XT_TEST_SKIP) exit(XT_TEST_SKIP);
}

/* Every test once per value of an environment variable that the CUDA projector reads at create
 * (NULL: unset; the first value the default), e.g. the instruments' splat kernel (XT_INSTR_SPLAT),
 * so that one run checks each variant against the same oracles. Each round says which it is. */
static inline int xt_test_main_env_(const xt_test_entry *tests, int n, int argc, char **argv, const char *var,
                                    const char *const *vals, int nv) {
  int rc = 0;
  for (int i = 0; i < nv; i++) {
    if (vals[i]) setenv(var, vals[i], 1);
    else unsetenv(var);
    printf("-- %s=%s\n", var, vals[i] ? vals[i] : "(unset)");
    fflush(stdout);
    const int r = xt_test_main_(tests, n, argc, argv);
    if (r > rc) rc = r;
  }
  return rc;
}

#define XT_TEST_MAIN_CUDA_ENV(var, values, entries)                                                     \
  int main(int argc, char **argv) {                                                                     \
    xt_test_require_cuda(argv[0]);                                                                      \
    static const xt_test_entry tests_[] = {entries};                                                    \
    static const char *const vals_[] = values;                                                          \
    return xt_test_main_env_(tests_, (int)(sizeof tests_ / sizeof tests_[0]), argc, argv, var, vals_,    \
                             (int)(sizeof vals_ / sizeof vals_[0]));                                    \
  }

#define XT_TEST_MAIN_CUDA(entries)                                                  \
  int main(int argc, char **argv) {                                                 \
    xt_test_require_cuda(argv[0]);                                                  \
    static const xt_test_entry tests_[] = {entries};                                \
    return xt_test_main_(tests_, (int)(sizeof tests_ / sizeof tests_[0]), argc, argv); \
  }

#endif /* XT_TEST_CUDA_H */
