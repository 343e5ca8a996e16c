/* Unit tests of the xtwin program's building blocks (tools/): the all-or-nothing output set
 * (commit, abort, a failing rename rolled back) and the option-table parser (defaults, ranges,
 * one-line errors). The NPY and PNG encoders are output/'s: tests/test_output.c. */
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "xt_opt.h"
#include "xt_out.h"
#include "xt_test.h"

static char scratch[256];

static void make_scratch(const char *name) {
  snprintf(scratch, sizeof scratch, "/tmp/xt_test_cli_%ld_%s", (long)getpid(), name);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
  if (system(cmd) != 0) fprintf(stderr, "  rm failed\n");
}

static void cleanup_scratch(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
  if (system(cmd) != 0) fprintf(stderr, "  rm failed\n");
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int count_entries(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' 2>/dev/null | wc -l) -eq 0", dir);
  return system(cmd) == 0 ? 0 : 1;
}

/* Writes one small file into the set. */
static int put(xt_outset *s, const char *path, const char *text) {
  FILE *f = NULL;
  xt_msg msg;
  int rc = xt_outset_open(s, path, &f, &msg);
  if (rc) return rc;
  fputs(text, f);
  return xt_outset_close(s, f, path, &msg);
}

XT_TEST(outset_commit_creates_dirs_and_files) {
  make_scratch("commit");
  char a[500], b[500], dir[400];
  snprintf(dir, sizeof dir, "%s/one/two", scratch);
  snprintf(a, sizeof a, "%s/x.npy", dir);
  snprintf(b, sizeof b, "%s/x.png", dir);
  xt_outset s;
  xt_outset_init(&s);
  xt_msg msg;
  XT_REQUIRE(xt_outset_mkdirs(&s, a, &msg) == 0);
  XT_CHECK(s.ndirs == 3);
  XT_CHECK(put(&s, a, "a") == 0 && put(&s, b, "b") == 0);
  XT_CHECK(!exists(a) && !exists(b));
  XT_CHECK(xt_outset_commit(&s, &msg) == 0);
  XT_CHECK(exists(a) && exists(b));
  xt_outset_free(&s);
  cleanup_scratch();
}

XT_TEST(outset_abort_leaves_nothing) {
  make_scratch("abort");
  char a[400];
  snprintf(a, sizeof a, "%s/d/x.npy", scratch);
  xt_outset s;
  xt_outset_init(&s);
  xt_msg msg;
  XT_REQUIRE(xt_outset_mkdirs(&s, a, &msg) == 0);
  XT_CHECK(put(&s, a, "a") == 0);
  xt_outset_abort(&s);
  xt_outset_free(&s);
  XT_CHECK(!exists(scratch)); /* every directory the set made is gone too */
  cleanup_scratch();
}

XT_TEST(outset_failed_rename_rolls_back) {
  make_scratch("rollback");
  XT_REQUIRE(mkdir(scratch, 0777) == 0);
  char p[3][400];
  const char *ext[3] = {"npy", "png", "json"};
  xt_outset s;
  xt_outset_init(&s);
  for (int i = 0; i < 3; i++) {
    snprintf(p[i], sizeof p[i], "%s/x.%s", scratch, ext[i]);
    XT_CHECK(put(&s, p[i], "data") == 0);
  }
  s.fail_rename_at = 2; /* npy and png are renamed, then json fails */
  xt_msg msg = {{0}};
  XT_CHECK(xt_outset_commit(&s, &msg) == XT_EIO);
  XT_CHECK(strstr(msg.text, "x.json") != NULL);
  for (int i = 0; i < 3; i++) XT_CHECK(!exists(p[i]));
  XT_CHECK(count_entries(scratch) == 0);
  xt_outset_free(&s);
  cleanup_scratch();
}

XT_TEST(outset_mkdirs_reports_file_in_the_way) {
  make_scratch("blocked");
  XT_REQUIRE(mkdir(scratch, 0777) == 0);
  char blocker[400], out[450];
  snprintf(blocker, sizeof blocker, "%s/file", scratch);
  FILE *f = fopen(blocker, "w");
  XT_REQUIRE(f);
  fclose(f);
  snprintf(out, sizeof out, "%s/sub/x", blocker);
  xt_outset s;
  xt_outset_init(&s);
  xt_msg msg = {{0}};
  XT_CHECK(xt_outset_mkdirs(&s, out, &msg) == XT_EIO);
  XT_CHECK(strstr(msg.text, "file") != NULL && strchr(msg.text, '\n') == NULL);
  xt_outset_free(&s);
  cleanup_scratch();
}

typedef struct opts {
  int n;
  double x;
  double v[3];
  xt_opt_list l;
  int c;
  const char *s;
  int flag;
} opts;

static const xt_opt tab[] = {
    {"n", XT_OPT_INT, "N", "4", NULL, 1, 10, NULL, offsetof(opts, n), "an int"},
    {"x", XT_OPT_REAL, "X", "0.5", NULL, -1, 1, NULL, offsetof(opts, x), "a real"},
    {"v", XT_OPT_VEC3, "X,Y,Z", "1,2,3", NULL, -5, 5, NULL, offsetof(opts, v), "a vector"},
    {"l", XT_OPT_LIST, "A,B", NULL, "none", -5, 5, NULL, offsetof(opts, l), "a list"},
    {"c", XT_OPT_CHOICE, NULL, "b", NULL, 0, 0, "a|b|c-d", offsetof(opts, c), "a choice"},
    {"s", XT_OPT_STRING, "S", "dflt", NULL, 0, 0, NULL, offsetof(opts, s), "a string"},
    {"f", XT_OPT_FLAG, NULL, NULL, NULL, 0, 0, NULL, offsetof(opts, flag), "a flag"},
};
#define NT ((int)(sizeof tab / sizeof tab[0]))

static int parse(opts *o, xt_msg *msg, int argc, const char *const *argv) {
  int seen[XT_OPT_MAX];
  memset(msg, 0, sizeof *msg);
  return xt_opt_parse(tab, NT, argc, (char **)argv, o, seen, msg);
}

XT_TEST(options_defaults_and_values) {
  opts o;
  xt_msg msg;
  XT_REQUIRE(parse(&o, &msg, 0, NULL) == 0);
  XT_CHECK(o.n == 4 && o.x == 0.5 && o.v[2] == 3 && o.l.n == 0 && o.c == 1 && strcmp(o.s, "dflt") == 0 && !o.flag);
  const char *argv[] = {"--n", "7", "--x=-0.25", "--v", "-1,0,4.5", "--l", "1,-2,3", "--c", "c-d", "--s", "hi", "--f"};
  XT_REQUIRE(parse(&o, &msg, 12, argv) == 0);
  XT_CHECK(o.n == 7 && o.x == -0.25 && o.v[0] == -1 && o.v[2] == 4.5);
  XT_CHECK(o.l.n == 3 && o.l.v[1] == -2 && o.c == 2 && strcmp(o.s, "hi") == 0 && o.flag);
}

XT_TEST(options_errors_name_the_option) {
  static const struct {
    int argc;
    const char *argv[3];
    const char *want;
  } cases[] = {
      {2, {"--x", "abc"}, "--x: \"abc\" is not a number"},
      {2, {"--x", "2"}, "--x: 2 is outside [-1, 1]"},
      {2, {"--x", "nan"}, "--x"},
      {2, {"--x", "1e999"}, "--x"},
      {2, {"--x", ""}, "--x"},
      {2, {"--n", "1.5"}, "--n: \"1.5\" is not an integer"},
      {2, {"--n", "11"}, "--n: 11 is outside"},
      {2, {"--v", "1,2"}, "--v"},
      {2, {"--v", "1,2,3,4"}, "--v"},
      {2, {"--l", "1,,2"}, "--l"},
      {2, {"--l", "1,9"}, "--l: 9 is outside"},
      {2, {"--c", "e"}, "--c: unknown value \"e\" (one of a|b|c-d)"},
      {1, {"--x"}, "--x: missing value"},
      {1, {"--zzz"}, "unknown option \"--zzz\""},
      {1, {"-q"}, "unknown option \"-q\""},
      {1, {"word"}, "unexpected argument \"word\""},
      {1, {"--f=1"}, "--f: takes no value"},
      {2, {"--f", "--f"}, "--f: given more than once"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    opts o;
    xt_msg msg;
    int argc = cases[i].argc;
    int rc = parse(&o, &msg, argc, cases[i].argv);
    XT_CHECK_MSG(rc == XT_EINVAL, "case %zu: rc %d", i, rc);
    XT_CHECK_MSG(strstr(msg.text, cases[i].want) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, msg.text, cases[i].want);
  }
}

XT_TEST(options_help_lists_every_option) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  XT_REQUIRE(f);
  xt_opt_print_help(tab, NT, f);
  fclose(f);
  for (int i = 0; i < NT; i++) {
    char want[32];
    snprintf(want, sizeof want, "--%s", tab[i].name);
    XT_CHECK_MSG(strstr(buf, want) != NULL, "help lacks %s", want);
  }
  XT_CHECK(strstr(buf, "(default: 4; range [1, 10])") != NULL);
  XT_CHECK(strstr(buf, "--c a|b|c-d") != NULL);
  free(buf);
}

XT_TEST_MAIN(XT_ENTRY(outset_commit_creates_dirs_and_files) XT_ENTRY(outset_abort_leaves_nothing)
                     XT_ENTRY(outset_failed_rename_rolls_back) XT_ENTRY(outset_mkdirs_reports_file_in_the_way)
                         XT_ENTRY(options_defaults_and_values) XT_ENTRY(options_errors_name_the_option)
                             XT_ENTRY(options_help_lists_every_option))
