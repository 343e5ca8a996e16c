/* The option-table parser and --help printer (see xt_opt.h). */
#include "xt_opt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int xt_opt_parse_real(const char *s, double *out) {
  if (!s || !*s) return XT_EINVAL;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != 0 || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) return XT_EINVAL;
  *out = v;
  return 0;
}

int xt_opt_find(const xt_opt *tab, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(tab[i].name, name) == 0) return i;
  return -1;
}

static int check_range(const xt_opt *o, double v, xt_msg *msg) {
  if (v < o->lo || v > o->hi) return xt_fail(msg, XT_EINVAL, "--%s: %g is outside [%g, %g]", o->name, v, o->lo, o->hi);
  return 0;
}

/* Splits s at commas into at most max reals, each checked against the option's range. */
static int parse_reals(const xt_opt *o, const char *s, double *v, int max, int *count, xt_msg *msg) {
  int k = 0;
  const char *p = s;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[64];
    if (k == max) return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" has more than %d values", o->name, s, max);
    if (len == 0) return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" has an empty value", o->name, s);
    if (len >= sizeof item) return xt_fail(msg, XT_EINVAL, "--%s: \"%.*s\" is not a number", o->name, (int)len, p);
    memcpy(item, p, len);
    item[len] = 0;
    if (xt_opt_parse_real(item, &v[k])) return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" is not a number", o->name, item);
    int rc = check_range(o, v[k], msg);
    if (rc) return rc;
    k++;
    if (!comma) break;
    p = comma + 1;
  }
  *count = k;
  return 0;
}

static int set_value(const xt_opt *o, const char *val, void *dst, xt_msg *msg) {
  char *field = (char *)dst + o->offset;
  switch (o->type) {
  case XT_OPT_FLAG: *(int *)field = 1; return 0;
  case XT_OPT_INT: {
    char *end = NULL;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (!*val || end == val || *end != 0 || errno == ERANGE || v < INT_MIN || v > INT_MAX)
      return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" is not an integer", o->name, val);
    int rc = check_range(o, (double)v, msg);
    if (rc) return rc;
    *(int *)field = (int)v;
    return 0;
  }
  case XT_OPT_REAL: {
    double v;
    if (xt_opt_parse_real(val, &v)) return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" is not a number", o->name, val);
    int rc = check_range(o, v, msg);
    if (rc) return rc;
    *(double *)field = v;
    return 0;
  }
  case XT_OPT_VEC3: {
    double v[3];
    int k = 0;
    int rc = parse_reals(o, val, v, 3, &k, msg);
    if (rc) return rc;
    if (k != 3) return xt_fail(msg, XT_EINVAL, "--%s: \"%s\" needs three numbers %s", o->name, val, o->metavar);
    memcpy(field, v, sizeof v);
    return 0;
  }
  case XT_OPT_LIST: {
    xt_opt_list *l = (xt_opt_list *)field;
    int k = 0;
    int rc = parse_reals(o, val, l->v, XT_OPT_LIST_MAX, &k, msg);
    if (rc) return rc;
    l->n = k;
    return 0;
  }
  case XT_OPT_CHOICE: {
    size_t vl = strlen(val);
    int idx = 0;
    for (const char *p = o->choices; *p; idx++) {
      const char *bar = strchr(p, '|');
      size_t len = bar ? (size_t)(bar - p) : strlen(p);
      if (len == vl && strncmp(p, val, len) == 0) {
        *(int *)field = idx;
        return 0;
      }
      if (!bar) break;
      p = bar + 1;
    }
    return xt_fail(msg, XT_EINVAL, "--%s: unknown value \"%s\" (one of %s)", o->name, val, o->choices);
  }
  case XT_OPT_STRING:
    if (!*val) return xt_fail(msg, XT_EINVAL, "--%s: empty value", o->name);
    *(const char **)field = val;
    return 0;
  }
  return xt_fail(msg, XT_EINTERNAL, "--%s: bad option type", o->name);
}

int xt_opt_parse(const xt_opt *tab, int n, int argc, char **argv, void *dst, int *seen, xt_msg *msg) {
  int rc;
  if (n > XT_OPT_MAX) return xt_fail(msg, XT_EINTERNAL, "option table too large");
  for (int i = 0; i < n; i++) {
    seen[i] = 0;
    if (tab[i].type == XT_OPT_LIST) ((xt_opt_list *)((char *)dst + tab[i].offset))->n = 0;
    if (tab[i].type == XT_OPT_FLAG) *(int *)((char *)dst + tab[i].offset) = 0;
    if (tab[i].type == XT_OPT_STRING) *(const char **)((char *)dst + tab[i].offset) = NULL;
    if (tab[i].def && (rc = set_value(&tab[i], tab[i].def, dst, msg)))
      return xt_fail(msg, XT_EINTERNAL, "--%s: bad default \"%s\"", tab[i].name, tab[i].def);
  }
  for (int a = 0; a < argc; a++) {
    const char *arg = argv[a];
    if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
      if (arg[0] == '-' && arg[1]) return xt_fail(msg, XT_EINVAL, "unknown option \"%s\"", arg);
      return xt_fail(msg, XT_EINVAL, "unexpected argument \"%s\"", arg);
    }
    char name[64];
    const char *eq = strchr(arg + 2, '=');
    size_t len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
    if (len >= sizeof name) return xt_fail(msg, XT_EINVAL, "unknown option \"%.*s\"", (int)(len + 2), arg);
    memcpy(name, arg + 2, len);
    name[len] = 0;
    int i = xt_opt_find(tab, n, name);
    if (i < 0) return xt_fail(msg, XT_EINVAL, "unknown option \"--%s\"", name);
    const xt_opt *o = &tab[i];
    if (seen[i]) return xt_fail(msg, XT_EINVAL, "--%s: given more than once", o->name);
    seen[i] = 1;
    const char *val = NULL;
    if (o->type == XT_OPT_FLAG) {
      if (eq) return xt_fail(msg, XT_EINVAL, "--%s: takes no value", o->name);
    } else if (eq) {
      val = eq + 1;
    } else {
      /* "--primary --out x": a value never starts with "--" (negative numbers have one '-'). */
      if (a + 1 >= argc || (strncmp(argv[a + 1], "--", 2) == 0 && argv[a + 1][2]))
        return xt_fail(msg, XT_EINVAL, "--%s: missing value", o->name);
      val = argv[++a];
    }
    if ((rc = set_value(o, val, dst, msg))) return rc;
  }
  return 0;
}

/* Prints text word-wrapped into columns [indent, width), the first line already at indent. */
static void print_wrapped(FILE *out, const char *text, int indent, int width) {
  int col = indent;
  const char *p = text;
  while (*p) {
    while (*p == ' ') p++;
    const char *e = p;
    while (*e && *e != ' ') e++;
    int len = (int)(e - p);
    if (!len) break;
    if (col > indent && col + 1 + len > width) {
      fprintf(out, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', out);
      col++;
    }
    for (int c = 0; c < len; c++) fputc(p[c] == '\x01' ? ' ' : p[c], out); /* \x01: a space that never breaks */
    col += len;
    p = e;
  }
  fputc('\n', out);
}

void xt_opt_print_help(const xt_opt *tab, int n, FILE *out) {
  enum { INDENT = 30, WIDTH = 100 };
  for (int i = 0; i < n; i++) {
    const xt_opt *o = &tab[i];
    char form[96], text[768];
    const char *mv = o->type == XT_OPT_CHOICE ? o->choices : o->metavar;
    if (o->type == XT_OPT_FLAG || !mv) snprintf(form, sizeof form, "--%s", o->name);
    else snprintf(form, sizeof form, "--%s %s", o->name, mv);
    size_t k = (size_t)snprintf(text, sizeof text, "%s", o->help);
    const char *def = o->def ? o->def : o->def_note;
    int paren = 0;
    if (def && o->type != XT_OPT_FLAG && k < sizeof text) {
      k += (size_t)snprintf(text + k, sizeof text - k, " (default: %s", def);
      paren = 1;
    }
    int numeric = o->type == XT_OPT_INT || o->type == XT_OPT_REAL || o->type == XT_OPT_VEC3 || o->type == XT_OPT_LIST;
    if (numeric && k < sizeof text) {
      k += (size_t)snprintf(text + k, sizeof text - k, "%s%s[%g,\x01%g]", paren ? "; " : " (",
                            o->type == XT_OPT_REAL || o->type == XT_OPT_INT ? "range " : "each in ", o->lo, o->hi);
      paren = 1;
    }
    if (paren && k < sizeof text) snprintf(text + k, sizeof text - k, ")");
    if ((int)strlen(form) + 2 >= INDENT - 1) fprintf(out, "  %s\n%*s", form, INDENT, "");
    else fprintf(out, "  %-*s", INDENT - 2, form);
    print_wrapped(out, text, INDENT, WIDTH);
  }
}

int xt_cli_say(const char *cmd, int code, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  for (char *p = line; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  fprintf(stderr, "xtwin %s: %s\n", cmd, line);
  return code;
}
