/* Command-line options as one table: name, type, default, range, help. The same table parses
 * argv (defaults first, through the same parser, so a default obeys its own range) and prints
 * --help, so the documentation cannot drift from what is accepted.
 *
 * Accepted forms: --name VALUE and --name=VALUE; flags take no value. A value may start with '-'
 * (--primary -30) but never starts with "--" (write --out=--odd for that). Each option may be
 * given once. Errors are one line in msg that names the option: `--primary: "abc" is not a
 * number`. */
#ifndef XT_OPT_H
#define XT_OPT_H

#include <stddef.h>
#include <stdio.h>

#include "xt_err.h"

typedef enum xt_opt_type {
  XT_OPT_FLAG,   /* no value; stores int 1 */
  XT_OPT_INT,    /* int in [lo, hi] */
  XT_OPT_REAL,   /* finite double in [lo, hi] */
  XT_OPT_VEC3,   /* X,Y,Z: three finite doubles, each in [lo, hi]; stores double[3] */
  XT_OPT_LIST,   /* A,B,...: 1..XT_OPT_LIST_MAX finite doubles, each in [lo, hi]; stores xt_opt_list */
  XT_OPT_CHOICE, /* one of the '|'-separated words of choices; stores the word's index (int) */
  XT_OPT_STRING  /* non-empty text; stores const char * (into argv or the table) */
} xt_opt_type;

#define XT_OPT_LIST_MAX 360
#define XT_OPT_MAX 128

typedef struct xt_opt_list {
  int n;
  double v[XT_OPT_LIST_MAX];
} xt_opt_list;

typedef struct xt_opt {
  const char *name;     /* long name without the leading "--" */
  xt_opt_type type;
  const char *metavar;  /* "DEG", "MM", "X,Y,Z" ... (NULL for flags and choices) */
  const char *def;      /* default, as it would be typed; NULL = none */
  const char *def_note; /* shown as the default in --help when def is NULL ("the mode's") */
  double lo, hi;        /* range of INT, REAL, VEC3 and LIST values */
  const char *choices;  /* CHOICE: "cpu|cuda" */
  size_t offset;        /* where the value goes in the caller's struct */
  const char *help;
} xt_opt;

/* Applies every default to dst, then parses argv[0..argc). seen[i] (n entries) is set to 1 for
 * each option given on the command line. Returns 0 or XT_EINVAL with the one-line reason. */
int xt_opt_parse(const xt_opt *tab, int n, int argc, char **argv, void *dst, int *seen, xt_msg *msg);

/* Index of the option named name (without "--"), or -1. */
int xt_opt_find(const xt_opt *tab, int n, const char *name);

/* Prints one entry per option: form, help, default and range. */
void xt_opt_print_help(const xt_opt *tab, int n, FILE *out);

/* Prints "xtwin CMD: <text>" to stderr as exactly one line (line breaks in the text become spaces)
 * and returns code: every subcommand's error and warning lines. */
int xt_cli_say(const char *cmd, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Strict number parsing (whole string, finite): 0 or XT_EINVAL. */
int xt_opt_parse_real(const char *s, double *out);

#endif /* XT_OPT_H */
