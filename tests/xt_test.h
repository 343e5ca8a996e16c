/* A minimal test runner: a list of tests per file, each run in its own forked process with a
 * timeout, so one crash or hang is reported as that test's failure and the rest still run.
 *
 *   XT_TEST(name) { XT_CHECK(cond); XT_CHECK_NEAR(a, b, tol); }
 *   XT_TEST_MAIN(XT_ENTRY(name) XT_ENTRY(other))
 *
 * Run with no arguments: every test; with a name: only that test (in-process, for debuggers).
 * XT_TEST_TIMEOUT (seconds, default 120) bounds each test. Set XT_TEST_NOFORK=1 to run
 * in-process (sanitizer stacks are then easier to read). */
#ifndef XT_TEST_H
#define XT_TEST_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct xt_test_entry {
  const char *name;
  void (*fn)(void);
} xt_test_entry;

static int xt_test_failures_;

#define XT_TEST(name) static void name(void)
#define XT_ENTRY(name) {#name, name},

#define XT_CHECK(cond)                                                      \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      xt_test_failures_++;                                                  \
    }                                                                       \
  } while (0)

#define XT_CHECK_MSG(cond, ...)                                             \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
      xt_test_failures_++;                                                  \
    }                                                                       \
  } while (0)

#define XT_CHECK_NEAR(a, b, tol)                                                                       \
  do {                                                                                                 \
    double xa_ = (double)(a), xb_ = (double)(b), xt_ = (double)(tol);                                  \
    if (!(fabs(xa_ - xb_) <= xt_)) {                                                                   \
      fprintf(stderr, "  %s:%d: |%s - %s| = |%.17g - %.17g| = %.3g > %.3g\n", __FILE__, __LINE__, #a, #b, \
              xa_, xb_, fabs(xa_ - xb_), xt_);                                                         \
      xt_test_failures_++;                                                                             \
    }                                                                                                  \
  } while (0)

/* Stop the test now (after a failed precondition). */
#define XT_REQUIRE(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "  %s:%d: requirement failed: %s\n", __FILE__, __LINE__, #cond); \
      xt_test_failures_++;                                                            \
      return;                                                                         \
    }                                                                                 \
  } while (0)

/* XT_REQUIRE that also prints why (e.g. the xt_msg of the call that failed). */
#define XT_REQUIRE_MSG(cond, ...)                                                        \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "  %s:%d: requirement failed: %s: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                                      \
      fputc('\n', stderr);                                                              \
      xt_test_failures_++;                                                               \
      return;                                                                            \
    }                                                                                    \
  } while (0)

static int xt_test_run_one_(const xt_test_entry *t, int nofork, int timeout) {
  if (nofork) {
    xt_test_failures_ = 0;
    t->fn();
    return xt_test_failures_ ? 1 : 0;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    alarm((unsigned)timeout);
    xt_test_failures_ = 0;
    t->fn();
    fflush(stderr);
    /* exit(), not _exit(): LeakSanitizer checks for leaks in its exit handler. */
    exit(xt_test_failures_ ? 1 : 0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) return 1;
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "  %s: killed by signal %d%s\n", t->name, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
    return 1;
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int xt_test_main_(const xt_test_entry *tests, int n, int argc, char **argv) {
  const char *nf = getenv("XT_TEST_NOFORK"), *to = getenv("XT_TEST_TIMEOUT");
  int nofork = nf && *nf && strcmp(nf, "0") != 0;
  int timeout = to ? atoi(to) : 120;
  if (timeout <= 0) timeout = 120;
  int failed = 0, ran = 0;
  for (int i = 0; i < n; i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
    int rc = xt_test_run_one_(&tests[i], nofork || argc > 1, timeout);
    printf("%s %s\n", rc ? "FAIL" : "ok  ", tests[i].name);
    fflush(stdout);
    failed += rc;
    ran++;
  }
  if (argc > 1 && ran == 0) {
    fprintf(stderr, "no test named %s\n", argv[1]);
    return 2;
  }
  printf("%d passed, %d failed\n", ran - failed, failed);
  return failed ? 1 : 0;
}

#define XT_TEST_MAIN(entries)                                                       \
  int main(int argc, char **argv) {                                                 \
    static const xt_test_entry tests_[] = {entries};                                \
    return xt_test_main_(tests_, (int)(sizeof tests_ / sizeof tests_[0]), argc, argv); \
  }

#endif /* XT_TEST_H */
