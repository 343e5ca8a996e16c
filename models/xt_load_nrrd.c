/* NRRD (.nrrd with attached data, .nhdr with detached data files) through Teem's nrrd.
 *
 * Two passes: the first reads the header only (skipData), so dims, type, encoding and the data
 * files can be checked against what is actually on disk before Teem allocates the voxel buffer
 * (raw: exact byte count; gzip: deflate's 1032:1 bound, then a counting inflate that also
 * proves the stream sound, since Teem leaks on corrupt gzip data); the second loads the data. Geometry:
 * with a `space`, `space directions` are the index->world columns and `space origin` the centre
 * of the first voxel; RAS and LAS are flipped to LPS; scanner-xyz and 3D-right/left-handed spaces
 * have no anatomical frame and are taken as LPS as written. Without a space, `spacings` give a
 * diagonal map with the origin at 0. Only 3D scalar arrays are accepted.
 *
 * Teem's error stack (biff) and the nrrd state are process globals, so all Teem calls are
 * serialised by a mutex; the deepest biff line becomes our one-line message. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <teem/biff.h>
#include <teem/nrrd.h>

#include "xt_load_internal.h"

static pthread_mutex_t teem_lock = PTHREAD_MUTEX_INITIALIZER;

/* Teem's error text as one line: the deepest (last) biff entry, without its "[nrrd] fn: " tag. */
static int biff_fail(xt_msg *msg, const char *path, const char *doing) {
  char *err = biffGetDone(NRRD);
  const char *line = "unknown error";
  if (err) {
    size_t n = strlen(err);
    while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' ')) err[--n] = '\0';
    char *nl = strrchr(err, '\n');
    line = nl ? nl + 1 : err;
    if (strncmp(line, "[nrrd] ", 7) == 0) line += 7;
    const char *colon = strstr(line, ": ");
    if (colon) {
      const char *p = line;
      while (p < colon && (isalnum((unsigned char)*p) || *p == '_')) p++;
      if (p == colon) line = colon + 2; /* drop the Teem function name */
    }
  }
  int code = XT_EFORMAT;
  if (err && (strstr(err, "No such file") || strstr(err, "couldn't open") || strstr(err, "couldn't fopen")))
    code = XT_ENOTFOUND; /* Teem's wording when a detached data file is missing */
  else if (err && (strstr(err, "expected") && strstr(err, "got"))) code = XT_ETRUNCATED;
  int rc = xt_fail(msg, code, "%s: %s: %s", path, doing, line);
  for (char *c = msg ? msg->text : NULL; c && *c; c++)
    if (*c == '\n' || *c == '\t') *c = ' ';
  free(err);
  return rc;
}

static int elem_of(int type, xt__elem *e) {
  switch (type) {
  case nrrdTypeChar: *e = XT__I8; return 1;
  case nrrdTypeUChar: *e = XT__U8; return 1;
  case nrrdTypeShort: *e = XT__I16; return 1;
  case nrrdTypeUShort: *e = XT__U16; return 1;
  case nrrdTypeInt: *e = XT__I32; return 1;
  case nrrdTypeUInt: *e = XT__U32; return 1;
  case nrrdTypeFloat: *e = XT__F32; return 1;
  case nrrdTypeDouble: *e = XT__F64; return 1;
  }
  return 0;
}

/* Offset of the first byte after the header's terminating blank line, or -1. */
static long header_end(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  long pos = 0, found = -1;
  int prev = 0, c;
  while ((c = fgetc(f)) != EOF && pos < (1L << 24)) {
    pos++;
    if (c == '\r') continue; /* CRLF headers */
    if (c == '\n' && prev == '\n') {
      found = pos;
      break;
    }
    prev = c;
  }
  fclose(f);
  return found;
}

/* Inflates the gzip data of `file` from byte `start` to count what it yields (nothing is kept).
 * Done before Teem reads it: Teem leaks its gzip state on corrupt streams, and the exact count
 * is a tighter size check than deflate's ratio bound. -1 on a corrupt stream. */
static int gz_count(const char *file, long start, uint64_t *count) {
  int fd = open(file, O_RDONLY);
  if (fd < 0) return -1;
  if (lseek(fd, (off_t)start, SEEK_SET) != (off_t)start) {
    close(fd);
    return -1;
  }
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) {
    close(fd);
    return -1;
  }
  static unsigned char buf[1 << 16]; /* under teem_lock */
  int n, rc = 0;
  *count = 0;
  while ((n = gzread(gz, buf, sizeof buf)) > 0) *count += (uint64_t)n;
  if (n < 0) rc = -1;
  else {
    int err = 0;
    gzerror(gz, &err);
    if (err != Z_OK && err != Z_BUF_ERROR) rc = -1;
  }
  gzclose(gz);
  return rc;
}

/* Bytes of voxel data the encoding can yield from `avail` bytes on disk (an upper bound). */
static uint64_t yield_bound(const NrrdEncoding *enc, uint64_t avail) {
  if (enc == nrrdEncodingGzip) return xt__inflate_bound(avail);
  if (enc == nrrdEncodingHex) return avail / 2;
  return avail; /* raw: exact; ascii: at least one character per byte of any type */
}

/* Checks that the data files can hold what the header claims; nothing is allocated yet. */
static int check_data_present(const char *path, const Nrrd *nrrd, const NrrdIoState *nio, size_t bytes, xt_msg *msg) {
  const NrrdEncoding *enc = nio->encoding;
  if (enc != nrrdEncodingRaw && enc != nrrdEncodingGzip && enc != nrrdEncodingAscii && enc != nrrdEncodingHex)
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: encoding \"%s\" is not supported (raw, gzip, ascii, hex)", path,
                   enc ? enc->name : "?");
  if (nio->dataFNFormat)
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: numbered data file patterns (\"%s\") are not supported", path,
                   nio->dataFNFormat);
  unsigned int nfiles = nio->dataFNArr ? nio->dataFNArr->len : 0;
  uint64_t yield = 0;
  long skip = nio->byteSkip > 0 ? nio->byteSkip : 0;
  if (nfiles == 0) {
    uint64_t size = 0;
    int rc = xt__file_size(path, NULL, &size, msg);
    if (rc) return rc;
    long start = header_end(path);
    if (start < 0) return xt_fail(msg, XT_EFORMAT, "%s: no blank line ends the header, so there is no attached data", path);
    uint64_t avail = size > (uint64_t)start ? size - (uint64_t)start : 0;
    yield = yield_bound(enc, avail);
    if (enc == nrrdEncodingGzip && (uint64_t)bytes + (uint64_t)skip <= yield && gz_count(path, start, &yield) != 0)
      return xt_fail(msg, XT_EFORMAT, "%s: corrupt gzip data", path);
  } else {
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    for (unsigned int i = 0; i < nfiles; i++) {
      const char *name = nio->dataFN[i];
      if (!name || !*name) return xt_fail(msg, XT_EFORMAT, "%s: empty data file name", path);
      size_t need = dlen + strlen(name) + 1;
      char *full = malloc(need);
      if (!full) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
      if (name[0] == '/')
        snprintf(full, need, "%s", name);
      else
        snprintf(full, need, "%.*s%s", (int)dlen, path, name);
      uint64_t size = 0, got = 0;
      int rc = xt__file_size(full, path, &size, msg);
      if (!rc && enc == nrrdEncodingGzip) {
        if (yield_bound(enc, size) < (uint64_t)bytes / nfiles) /* hopeless: skip inflating */
          got = yield_bound(enc, size);
        else if (gz_count(full, 0, &got) != 0)
          rc = xt_fail(msg, XT_EFORMAT, "%s: data file %s: corrupt gzip data", path, full);
      } else {
        got = yield_bound(enc, size);
      }
      free(full);
      if (rc) return rc;
      yield += got;
    }
  }
  if ((uint64_t)bytes + (uint64_t)skip > yield) {
    if (enc == nrrdEncodingGzip)
      return xt_fail(msg, XT_ETRUNCATED, "%s: header claims %zu data bytes but the gzip data cannot hold more than %llu",
                     path, bytes, (unsigned long long)yield);
    return xt_fail(msg, XT_ETRUNCATED, "%s: truncated: header claims %zu data bytes (+%ld skipped) but only %llu are present",
                   path, bytes, skip, (unsigned long long)yield);
  }
  (void)nrrd;
  return 0;
}

/* Header lines Teem may quote in an error: well under its 1,025-byte message buffer. */
#define XT_NRRD_LINE_MAX 512
#define XT_NRRD_DATA_LINE_MAX 900

/* The data files a detached header names, checked before Teem sees the header: Teem opens them
 * while reading the header (even with skipData), so a FIFO there would block it, and a name
 * outside opt's model folders must never be opened. Every "data file: NAME" line of the header
 * is checked; lists and numbered patterns are refused here. */
static int check_detached(const char *path, const xt_load_options *opt, xt_msg *msg) {
  FILE *f = fopen(path, "rb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: cannot open", path);
  const char *slash = strrchr(path, '/');
  size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int rc = 0, lines = 0, have_dim = 0;
  while (!rc && (got = getline(&line, &cap, f)) > 0 && lines++ < 100000 && ftell(f) < (1L << 24)) {
    /* Teem reads past a NUL where C strings stop: a header line with one would not be the line
     * checked here (found by scripts/long-fuzz: "datafile:\0...  LIST"). */
    if (memchr(line, 0, (size_t)got)) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: header line %d holds a NUL byte", path, lines);
      break;
    }
    size_t n = strcspn(line, "\r\n");
    line[n] = 0;
    const char *name = NULL;
    if (!*line) {
      break; /* the blank line that ends the header: attached data */
    }
    /* Teem formats its error messages, which quote the offending line, into a fixed 1,025-byte
     * stack buffer without bounds (_biffMsgAddVL): a long unparseable line smashes its stack
     * (found by scripts/long-fuzz, reproducers tests/fuzz/loaders/crash_long_line*.nhdr; a
     * key/value line is no exception). Only comments, which Teem skips, may be longer; data file
     * names may be as long as a path, well under the buffer with Teem's wording. */
    const int is_data_line = !strncasecmp(line, "data file: ", 11) || !strncasecmp(line, "datafile: ", 10);
    const size_t max = is_data_line ? XT_NRRD_DATA_LINE_MAX : XT_NRRD_LINE_MAX;
    if (n > max && line[0] != '#') {
      rc = xt_fail(msg, XT_EFORMAT, "%s: header line %d is %zu bytes long (at most %zu outside comments)", path, lines,
                   n, max);
      break;
    }
    /* Teem's field names are case-insensitive, "data file" or "datafile", ended by ": " */
    char *colon = strstr(line, ": ");
    if (colon) *colon = 0;
    /* Per-axis fields need the dimension first (the NRRD spec's order); Teem's error path for
     * one that comes before it leaks (found by scripts/long-fuzz, reproducer
     * tests/fuzz/loaders/leak_axis_first.nhdr), so such a header is refused here. */
    static const char *const per_axis[] = {"sizes", "spacings", "thicknesses", "axis mins", "axismins", "axis maxs",
                                           "axismaxs", "space directions", "centers", "centerings", "kinds", "labels",
                                           "units"};
    if (colon && !strcasecmp(line, "dimension")) have_dim = 1;
    for (size_t k = 0; colon && !have_dim && k < sizeof per_axis / sizeof per_axis[0]; k++)
      if (!strcasecmp(line, per_axis[k])) rc = xt_fail(msg, XT_EFORMAT, "%s: '%s' before 'dimension'", path, per_axis[k]);
    if (rc) break;
    int is_data = colon && (!strcasecmp(line, "data file") || !strcasecmp(line, "datafile"));
    if (is_data) {
      const char *v = colon + 2;
      while (*v == ' ' || *v == '\t') v++;
      if (!strncmp(v, "LIST", 4) && (v[4] == 0 || v[4] == ' ' || v[4] == '\t')) {
        /* Teem leaks its file list whenever the rest of such a header fails to parse (found by
         * scripts/long-fuzz; reproducer tests/fuzz/loaders/leak-nrrd-list.nhdr): refused, as
         * MetaImage's ElementDataFile = LIST is. */
        rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: data file lists (\"data file: LIST\") are not supported", path);
        break;
      }
      if (strchr(v, '%')) {
        rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: numbered data file patterns (\"%.60s\") are not supported", path, v);
        break;
      }
      name = v;
    }
    if (!name) continue;
    if (!*name) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: empty data file name", path);
      break;
    }
    size_t need = dlen + strlen(name) + 1;
    char *full = malloc(need);
    if (!full) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
      break;
    }
    snprintf(full, need, "%.*s%s", name[0] == '/' ? 0 : (int)dlen, path, name);
    uint64_t size = 0;
    rc = xt__file_check(full, path, opt, &size, msg);
    free(full);
  }
  free(line);
  fclose(f);
  return rc;
}

/* index -> LPS from the header's space fields. */
static int geometry(const char *path, const Nrrd *nrrd, xt_affine *a, xt_msg *msg) {
  *a = xt_aff_identity();
  if (nrrd->spaceDim == 0) {
    for (int ax = 0; ax < 3; ax++) {
      double s = nrrd->axis[ax].spacing;
      if (!(s > 0) || !isfinite(s))
        return xt_fail(msg, XT_ERANGE, "%s: spacing of axis %d is %g (missing, zero, negative or NaN)", path, ax, s);
      a->m[ax][ax] = s;
    }
    return 0;
  }
  if (nrrd->spaceDim != 3)
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: %u-dimensional space (time-varying?); only 3D spaces are supported", path,
                   nrrd->spaceDim);
  double sgn[3] = {1, 1, 1};
  if (nrrd->space == nrrdSpaceRightAnteriorSuperior) sgn[0] = sgn[1] = -1;
  else if (nrrd->space == nrrdSpaceLeftAnteriorSuperior) sgn[1] = -1;
  int no_origin = 1;
  for (int r = 0; r < 3; r++) no_origin = no_origin && isnan(nrrd->spaceOrigin[r]);
  for (int r = 0; r < 3; r++) {
    double o = no_origin ? 0.0 : nrrd->spaceOrigin[r];
    if (!isfinite(o)) return xt_fail(msg, XT_EFORMAT, "%s: space origin component %d is %g", path, r, o);
    a->t[r] = sgn[r] * o;
  }
  for (int ax = 0; ax < 3; ax++)
    for (int r = 0; r < 3; r++) {
      double d = nrrd->axis[ax].spaceDirection[r];
      if (!isfinite(d))
        return xt_fail(msg, XT_EFORMAT, "%s: space direction of axis %d is missing or not finite", path, ax);
      a->m[r][ax] = sgn[r] * d;
    }
  return 0;
}

int xt__load_nrrd(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  Nrrd *nrrd = NULL;
  NrrdIoState *nio = NULL;
  int rc = 0;
  /* Teem also reads PNM, VTK and plain text through nrrdLoad; only real NRRD headers get in */
  /* the first line must be exactly the magic: Teem leaks memory on first lines like "NRRD0004xyz" */
  char magic[10] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: cannot open", path);
  size_t got = fread(magic, 1, sizeof magic, f);
  fclose(f);
  if (got < 9 || memcmp(magic, "NRRD000", 7) != 0 || !isdigit((unsigned char)magic[7]) ||
      !(magic[8] == '\n' || (magic[8] == '\r' && magic[9] == '\n')))
    return xt_fail(msg, got < 9 ? XT_ETRUNCATED : XT_EFORMAT, "%s: not a NRRD file (first line is not \"NRRD000x\")", path);

  if ((rc = check_detached(path, opt, msg))) return rc;

  pthread_mutex_lock(&teem_lock);
  nrrdStateVerboseIO = 0; /* Teem prints warnings to stderr otherwise */
  nrrd = nrrdNew();
  nio = nrrdIoStateNew();
  if (!nrrd || !nio) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  nio->skipData = AIR_TRUE;
  if (nrrdLoad(nrrd, path, nio)) {
    rc = biff_fail(msg, path, "header");
    goto fail;
  }
  if (nio->format != nrrdFormatNRRD) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: not a NRRD file", path);
    goto fail;
  }
  if (nrrd->dim != 3) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: dimension %u; only 3D scalar volumes are supported", path, nrrd->dim);
    goto fail;
  }
  xt__grid g;
  memset(&g, 0, sizeof g);
  if (!elem_of(nrrd->type, &g.elem)) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: voxel type %s is not supported (need an 8/16/32-bit integer or float type)",
                 path, airEnumStr(nrrdType, nrrd->type));
    goto fail;
  }
  for (int a = 0; a < 3; a++) g.dim[a] = nrrd->axis[a].size > (size_t)INT64_MAX ? INT64_MAX : (int64_t)nrrd->axis[a].size;
  size_t bytes = 0;
  rc = xt__check_dims(path, g.dim, xt__elem_size(g.elem), &bytes, msg);
  if (rc) goto fail;
  rc = geometry(path, nrrd, &g.index_to_lps, msg);
  if (rc) goto fail;
  rc = check_data_present(path, nrrd, nio, bytes, msg);
  if (rc) goto fail;

  /* second pass: the data */
  nrrdNuke(nrrd);
  nrrd = nrrdNew();
  if (!nrrd) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  if (nrrdLoad(nrrd, path, NULL)) {
    rc = biff_fail(msg, path, "data");
    goto fail;
  }
  xt__elem e2;
  if (nrrd->dim != 3 || !elem_of(nrrd->type, &e2) || e2 != g.elem || !nrrd->data ||
      nrrdElementNumber(nrrd) * nrrdElementSize(nrrd) != bytes) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: header changed between reads", path);
    goto fail;
  }
  g.data = nrrd->data;
  g.slope = 1.0;
  g.inter = 0.0;
  rc = xt__finish(path, &g, opt, out, msg);
fail:
  if (nio) nrrdIoStateNix(nio);
  if (nrrd) nrrdNuke(nrrd);
  pthread_mutex_unlock(&teem_lock);
  return rc;
}
