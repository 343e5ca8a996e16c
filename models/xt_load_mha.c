/* MetaImage (.mha with the data after the header, .mhd with a separate data file): our own
 * parser, since ITK's MetaIO is C++ and no C library exists.
 *
 * The header is "Key = Value" lines; ElementDataFile must be the last key and, when LOCAL, the
 * data starts right after its line. Geometry follows ITK's MetaImageIO: Offset (or Origin,
 * Position) is the centre of voxel (0,0,0) in LPS mm, ElementSpacing (or ElementSize) the voxel
 * pitch, and TransformMatrix (or Orientation, Rotation) lists the direction cosines one image axis
 * after another, i.e. numbers 3i..3i+2 are the LPS direction of index axis i (ITK writes
 * GetDirection(i)[j] at position i*3+j, so it is the column-major direction matrix).
 * AnatomicalOrientation ("RAI" = axes running Right->Left, Anterior->Posterior, Inferior->
 * Superior, i.e. the LPS axes) gives the directions only when no TransformMatrix is present:
 * ITK itself reads directions from TransformMatrix alone and writes AnatomicalOrientation as a
 * summary of them. Every size is checked against the file before anything is allocated. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <zlib.h>

#include "xt_load_internal.h"

enum { LINE_MAX_ = 4096, HEADER_MAX = 1 << 20 };

typedef struct mha_hdr {
  int have_ndims, have_dims, have_elem, have_tm, have_orient, have_spacing, have_size;
  int ndims, msb, compressed, binary;
  int64_t dim[3];
  double spacing[3], esize[3], origin[3], tm[9];
  char orient[4];
  xt__elem elem;
  long long header_size, cds; /* cds = CompressedDataSize, -1 when absent */
  char *datafile;             /* ElementDataFile value (owned) */
  long long data_start;       /* offset just past the ElementDataFile line */
} mha_hdr;

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* Exactly n finite numbers separated by blanks. */
static int parse_doubles(const char *v, int n, double *out) {
  const char *p = v;
  for (int i = 0; i < n; i++) {
    char *end;
    out[i] = strtod(p, &end);
    if (end == p || !isfinite(out[i])) return 0;
    if (*end && !isspace((unsigned char)*end)) return 0;
    p = end;
  }
  while (isspace((unsigned char)*p)) p++;
  return *p == '\0';
}

static int parse_ints(const char *v, int n, long long *out) {
  const char *p = v;
  for (int i = 0; i < n; i++) {
    char *end;
    while (isspace((unsigned char)*p)) p++;
    if (!(isdigit((unsigned char)*p) || *p == '-' || *p == '+')) return 0;
    out[i] = strtoll(p, &end, 10);
    if (end == p || (*end && !isspace((unsigned char)*end))) return 0;
    p = end;
  }
  while (isspace((unsigned char)*p)) p++;
  return *p == '\0';
}

static int parse_bool(const char *v, int *out) {
  if (!strcasecmp(v, "true") || !strcmp(v, "1")) return *out = 1, 1;
  if (!strcasecmp(v, "false") || !strcmp(v, "0")) return *out = 0, 1;
  return 0;
}

static int elem_of(const char *v, xt__elem *e) {
  static const struct {
    const char *name;
    xt__elem e;
  } map[] = {{"MET_UCHAR", XT__U8}, {"MET_CHAR", XT__I8},   {"MET_USHORT", XT__U16}, {"MET_SHORT", XT__I16},
             {"MET_UINT", XT__U32}, {"MET_INT", XT__I32},   {"MET_FLOAT", XT__F32},  {"MET_DOUBLE", XT__F64}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcasecmp(v, map[i].name)) return *e = map[i].e, 1;
  return 0;
}

/* AnatomicalOrientation letter -> the LPS unit vector its axis runs along: the letter names the
 * side the axis comes FROM ("R" runs right-to-left, towards +L). */
static int orient_axis(char c, double d[3]) {
  d[0] = d[1] = d[2] = 0;
  switch (toupper((unsigned char)c)) {
  case 'R': d[0] = 1; return 0;
  case 'L': d[0] = -1; return 0;
  case 'A': d[1] = 1; return 1;
  case 'P': d[1] = -1; return 1;
  case 'I': d[2] = 1; return 2;
  case 'S': d[2] = -1; return 2;
  }
  return -1;
}

#define BAD_(code, ...) do { rc = xt_fail(msg, code, __VA_ARGS__); goto fail; } while (0)

/* One "Key = Value" line into h; *done set at ElementDataFile. */
static int parse_line(const char *path, int lineno, char *line, mha_hdr *h, int *done, xt_msg *msg) {
  int rc = 0;
  char *eq = strchr(line, '=');
  if (!eq) BAD_(XT_EFORMAT, "%s: line %d: expected \"Key = Value\", got \"%.60s\"", path, lineno, line);
  *eq = '\0';
  char *key = trim(line), *val = trim(eq + 1);
  long long iv[3];
  if (!strcasecmp(key, "ObjectType")) {
    if (strcasecmp(val, "Image")) BAD_(XT_EUNSUPPORTED, "%s: ObjectType is \"%.40s\"; only Image is supported", path, val);
  } else if (!strcasecmp(key, "NDims")) {
    if (!parse_ints(val, 1, iv)) BAD_(XT_EFORMAT, "%s: NDims: expected an integer, got \"%.60s\"", path, val);
    if (iv[0] != 3) BAD_(XT_EUNSUPPORTED, "%s: NDims is %lld; only 3D volumes are supported", path, iv[0]);
    h->ndims = 3;
    h->have_ndims = 1;
  } else if (!strcasecmp(key, "DimSize")) {
    if (!parse_ints(val, 3, iv) || iv[0] < 1 || iv[1] < 1 || iv[2] < 1)
      BAD_(XT_EFORMAT, "%s: DimSize: expected 3 positive integers, got \"%.60s\"", path, val);
    for (int a = 0; a < 3; a++) h->dim[a] = iv[a];
    h->have_dims = 1;
  } else if (!strcasecmp(key, "ElementSpacing") || !strcasecmp(key, "ElementSize")) {
    double s[3];
    if (!parse_doubles(val, 3, s) || !(s[0] > 0 && s[1] > 0 && s[2] > 0))
      BAD_(XT_ERANGE, "%s: %s: expected 3 positive numbers, got \"%.60s\"", path, key, val);
    int sp = !strcasecmp(key, "ElementSpacing");
    memcpy(sp ? h->spacing : h->esize, s, sizeof s);
    if (sp) h->have_spacing = 1;
    else h->have_size = 1;
  } else if (!strcasecmp(key, "Offset") || !strcasecmp(key, "Origin") || !strcasecmp(key, "Position")) {
    if (!parse_doubles(val, 3, h->origin)) BAD_(XT_EFORMAT, "%s: %s: expected 3 numbers, got \"%.60s\"", path, key, val);
  } else if (!strcasecmp(key, "TransformMatrix") || !strcasecmp(key, "Orientation") || !strcasecmp(key, "Rotation")) {
    if (!parse_doubles(val, 9, h->tm)) BAD_(XT_EFORMAT, "%s: %s: expected 9 numbers, got \"%.60s\"", path, key, val);
    h->have_tm = 1;
  } else if (!strcasecmp(key, "AnatomicalOrientation")) {
    if (strchr(val, '?')) return 0; /* "???": unknown, says nothing */
    int seen[3] = {0, 0, 0};
    double d[3];
    if (strlen(val) != 3) BAD_(XT_EFORMAT, "%s: AnatomicalOrientation: expected 3 letters like RAI, got \"%.20s\"", path, val);
    for (int i = 0; i < 3; i++) {
      int ax = orient_axis(val[i], d);
      if (ax < 0 || seen[ax]++)
        BAD_(XT_EFORMAT, "%s: AnatomicalOrientation: \"%.20s\" must use one of R/L, A/P, I/S each", path, val);
    }
    memcpy(h->orient, val, 3);
    h->orient[3] = '\0';
    h->have_orient = 1;
  } else if (!strcasecmp(key, "ElementType")) {
    if (!elem_of(val, &h->elem))
      BAD_(XT_EUNSUPPORTED, "%s: ElementType %.40s is not supported (MET_UCHAR/CHAR/USHORT/SHORT/UINT/INT/FLOAT/DOUBLE)",
           path, val);
    h->have_elem = 1;
  } else if (!strcasecmp(key, "ElementByteOrderMSB") || !strcasecmp(key, "BinaryDataByteOrderMSB")) {
    if (!parse_bool(val, &h->msb)) BAD_(XT_EFORMAT, "%s: %s: expected True or False, got \"%.40s\"", path, key, val);
  } else if (!strcasecmp(key, "BinaryData")) {
    if (!parse_bool(val, &h->binary)) BAD_(XT_EFORMAT, "%s: BinaryData: expected True or False, got \"%.40s\"", path, val);
    if (!h->binary) BAD_(XT_EUNSUPPORTED, "%s: BinaryData = False (ASCII voxels) is not supported", path);
  } else if (!strcasecmp(key, "ElementNumberOfChannels")) {
    if (!parse_ints(val, 1, iv)) BAD_(XT_EFORMAT, "%s: ElementNumberOfChannels: expected an integer, got \"%.40s\"", path, val);
    if (iv[0] != 1) BAD_(XT_EUNSUPPORTED, "%s: ElementNumberOfChannels is %lld; only scalar volumes (1) are supported", path, iv[0]);
  } else if (!strcasecmp(key, "HeaderSize")) {
    if (!parse_ints(val, 1, iv) || iv[0] < -1)
      BAD_(XT_EFORMAT, "%s: HeaderSize: expected an integer >= -1, got \"%.40s\"", path, val);
    h->header_size = iv[0];
  } else if (!strcasecmp(key, "CompressedData")) {
    if (!parse_bool(val, &h->compressed)) BAD_(XT_EFORMAT, "%s: CompressedData: expected True or False, got \"%.40s\"", path, val);
  } else if (!strcasecmp(key, "CompressedDataSize")) {
    if (!parse_ints(val, 1, iv) || iv[0] < 1)
      BAD_(XT_EFORMAT, "%s: CompressedDataSize: expected a positive integer, got \"%.40s\"", path, val);
    h->cds = iv[0];
  } else if (!strcasecmp(key, "ElementDataFile")) {
    if (!*val) BAD_(XT_EFORMAT, "%s: ElementDataFile is empty", path);
    h->datafile = strdup(val);
    if (!h->datafile) BAD_(XT_ENOMEM, "%s: out of memory", path);
    *done = 1;
  } /* other keys (Comment, CenterOfRotation, ElementMin, Modality, ...) carry nothing we use */
  return 0;
fail:
  return rc;
}

static int read_header(const char *path, FILE *f, mha_hdr *h, xt_msg *msg) {
  char line[LINE_MAX_];
  int lineno = 0, done = 0, rc = 0;
  long long pos = 0;
  while (!done) {
    long long before = pos;
    if (!fgets(line, sizeof line, f)) {
      if (ferror(f)) BAD_(XT_EIO, "%s: read error in the header", path);
      BAD_(lineno == 0 ? XT_ETRUNCATED : XT_EFORMAT, "%s: no ElementDataFile line (it must be the last key)", path);
    }
    lineno++;
    size_t n = strlen(line);
    pos = (long long)ftello(f);
    if (pos - before != (long long)n)
      BAD_(XT_EFORMAT, "%s: line %d contains a NUL byte (not a MetaImage header?)", path, lineno);
    if (n == sizeof line - 1 && line[n - 1] != '\n')
      BAD_(XT_EFORMAT, "%s: line %d is longer than %d characters (not a MetaImage header?)", path, lineno, LINE_MAX_ - 2);
    if (pos > HEADER_MAX) BAD_(XT_EFORMAT, "%s: no ElementDataFile within the first %d header bytes", path, HEADER_MAX);
    char *t = trim(line);
    if (!*t) continue;
    rc = parse_line(path, lineno, t, h, &done, msg);
    if (rc) goto fail;
  }
  h->data_start = pos;
  if (!h->have_ndims) BAD_(XT_EFORMAT, "%s: missing NDims", path);
  if (!h->have_dims) BAD_(XT_EFORMAT, "%s: missing DimSize", path);
  if (!h->have_elem) BAD_(XT_EFORMAT, "%s: missing ElementType", path);
  return 0;
fail:
  return rc;
}

/* Direction cosines per index axis (columns of the LPS direction matrix). */
static int directions(const char *path, const mha_hdr *h, double dir[3][3], xt_msg *msg) {
  int rc = 0;
  for (int i = 0; i < 3; i++) {
    if (h->have_tm)
      for (int j = 0; j < 3; j++) dir[i][j] = h->tm[3 * i + j];
    else if (h->have_orient)
      orient_axis(h->orient[i], dir[i]);
    else
      for (int j = 0; j < 3; j++) dir[i][j] = i == j;
    if (!(dir[i][0] * dir[i][0] + dir[i][1] * dir[i][1] + dir[i][2] * dir[i][2] > 1e-12))
      BAD_(XT_EFORMAT, "%s: TransformMatrix: direction of axis %d is zero", path, i);
  }
  double det = dir[0][0] * (dir[1][1] * dir[2][2] - dir[1][2] * dir[2][1]) -
               dir[0][1] * (dir[1][0] * dir[2][2] - dir[1][2] * dir[2][0]) +
               dir[0][2] * (dir[1][0] * dir[2][1] - dir[1][1] * dir[2][0]);
  if (!(fabs(det) > 1e-6)) BAD_(XT_EFORMAT, "%s: TransformMatrix is singular (determinant %g)", path, det);
  return 0;
fail:
  return rc;
}

static void swap_bytes(unsigned char *p, size_t n, size_t es) {
  for (size_t i = 0; i < n; i += es)
    for (size_t a = 0, b = es - 1; a < b; a++, b--) {
      unsigned char t = p[i + a];
      p[i + a] = p[i + b];
      p[i + b] = t;
    }
}

/* Inflates exactly `bytes` bytes of output from at most `clen` bytes of f (zlib or gzip). */
static int inflate_data(const char *path, FILE *f, long long clen, unsigned char *out, size_t bytes, xt_msg *msg) {
  enum { IN = 1 << 16 };
  unsigned char *in = malloc(IN);
  if (!in) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  z_stream z;
  memset(&z, 0, sizeof z);
  int rc = 0, zr = inflateInit2(&z, 15 + 32); /* +32: accept zlib and gzip wrappers */
  if (zr != Z_OK) {
    free(in);
    return xt_fail(msg, XT_EINTERNAL, "%s: zlib inflateInit failed (%d)", path, zr);
  }
  size_t produced = 0;
  long long left = clen;
  zr = Z_OK;
  while (zr != Z_STREAM_END) {
    if (z.avail_in == 0) {
      if (left <= 0) break;
      size_t want = left < IN ? (size_t)left : IN;
      size_t got = fread(in, 1, want, f);
      if (got == 0) break;
      left -= (long long)got;
      z.next_in = in;
      z.avail_in = (uInt)got;
    }
    /* output goes straight into the volume; chunked so avail_out fits a uInt */
    size_t room = bytes - produced;
    unsigned char scratch[1];
    z.next_out = room ? out + produced : scratch;
    z.avail_out = room ? (uInt)(room < (1u << 30) ? room : (1u << 30)) : 1;
    uInt before = z.avail_out;
    zr = inflate(&z, Z_NO_FLUSH);
    if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: corrupt compressed data (zlib: %s)", path, z.msg ? z.msg : "error");
      goto done;
    }
    if (!room && z.avail_out != before) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: compressed data holds more than the %zu bytes DimSize and ElementType imply", path,
                   bytes);
      goto done;
    }
    produced += before - z.avail_out;
    if (zr == Z_BUF_ERROR && z.avail_in != 0 && room) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: corrupt compressed data (zlib made no progress)", path);
      goto done;
    }
  }
  if (produced < bytes)
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: compressed data ends after %zu of %zu bytes", path, produced, bytes);
done:
  inflateEnd(&z);
  free(in);
  return rc;
}

int xt__load_mha(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  mha_hdr h;
  memset(&h, 0, sizeof h);
  h.cds = -1;
  h.binary = 1;
  FILE *f = NULL;
  char *datapath = NULL;
  unsigned char *data = NULL;
  int rc = 0;
  f = fopen(path, "rb");
  if (!f) BAD_(XT_EIO, "%s: cannot open", path);
  rc = read_header(path, f, &h, msg);
  if (rc) goto fail;

  xt__grid g;
  memset(&g, 0, sizeof g);
  g.elem = h.elem;
  g.slope = 1.0;
  for (int a = 0; a < 3; a++) g.dim[a] = h.dim[a];
  size_t bytes = 0, es = xt__elem_size(h.elem);
  rc = xt__check_dims(path, g.dim, es, &bytes, msg);
  if (rc) goto fail;
  double dir[3][3];
  rc = directions(path, &h, dir, msg);
  if (rc) goto fail;
  for (int i = 0; i < 3; i++) {
    double s = h.have_spacing ? h.spacing[i] : h.have_size ? h.esize[i] : 1.0;
    for (int r = 0; r < 3; r++) g.index_to_lps.m[r][i] = dir[i][r] * s;
    g.index_to_lps.t[i] = h.origin[i];
  }

  /* where the data is */
  long long start;
  if (!strcasecmp(h.datafile, "LOCAL")) {
    datapath = strdup(path);
    if (!datapath) BAD_(XT_ENOMEM, "%s: out of memory", path);
    start = h.data_start + (h.header_size > 0 ? h.header_size : 0);
  } else {
    if (!strcasecmp(h.datafile, "LIST") || strchr(h.datafile, '%') || strchr(h.datafile, ' '))
      BAD_(XT_EUNSUPPORTED, "%s: ElementDataFile \"%.60s\": file lists and patterns are not supported", path, h.datafile);
    const char *slash = strrchr(path, '/');
    size_t dlen = (h.datafile[0] != '/' && slash) ? (size_t)(slash - path) + 1 : 0;
    size_t need = dlen + strlen(h.datafile) + 1;
    datapath = malloc(need);
    if (!datapath) BAD_(XT_ENOMEM, "%s: out of memory", path);
    snprintf(datapath, need, "%.*s%s", (int)dlen, path, h.datafile);
    fclose(f);
    f = NULL;
    start = h.header_size > 0 ? h.header_size : 0;
  }
  uint64_t fsize = 0;
  rc = xt__file_check(datapath, strcmp(datapath, path) ? path : NULL, opt, &fsize, msg);
  if (rc) goto fail;
  if (h.header_size == -1) {
    if (h.compressed) BAD_(XT_EFORMAT, "%s: HeaderSize = -1 cannot be used with compressed data", path);
    if (fsize < bytes) BAD_(XT_ETRUNCATED, "%s: truncated: needs %zu data bytes, file has %llu", path, bytes, (unsigned long long)fsize);
    start = (long long)(fsize - bytes);
  }
  if ((uint64_t)start > fsize)
    BAD_(XT_ETRUNCATED, "%s: truncated: data would start at byte %lld but the file has %llu", path, start, (unsigned long long)fsize);
  uint64_t avail = fsize - (uint64_t)start;
  long long clen = 0;
  if (h.compressed) {
    clen = h.cds > 0 ? h.cds : (long long)avail;
    if ((uint64_t)clen > avail)
      BAD_(XT_ETRUNCATED, "%s: truncated: CompressedDataSize is %lld but only %llu bytes follow", path, clen, (unsigned long long)avail);
    if (bytes > xt__inflate_bound((uint64_t)clen))
      BAD_(XT_ETRUNCATED, "%s: %zu voxel bytes cannot come from %lld compressed bytes (truncated or wrong DimSize)", path, bytes, clen);
  } else if (avail < bytes) {
    BAD_(XT_ETRUNCATED, "%s: truncated: needs %zu data bytes from offset %lld, only %llu present", path, bytes, start,
         (unsigned long long)avail);
  }

  /* sizes are plausible: now allocate and read */
  if (!f) {
    f = fopen(datapath, "rb");
    if (!f) BAD_(XT_EIO, "%s: cannot open data file %s", path, datapath);
  }
  if (fseeko(f, (off_t)start, SEEK_SET) != 0) BAD_(XT_EIO, "%s: cannot seek to the data at byte %lld", path, start);
  data = malloc(bytes ? bytes : 1);
  if (!data) BAD_(XT_ENOMEM, "%s: out of memory for %zu bytes", path, bytes);
  if (h.compressed) {
    rc = inflate_data(path, f, clen, data, bytes, msg);
    if (rc) goto fail;
  } else if (fread(data, 1, bytes, f) != bytes) {
    BAD_(XT_ETRUNCATED, "%s: truncated: could not read %zu data bytes", path, bytes);
  }
  const unsigned one = 1;
  int host_msb = *(const unsigned char *)&one == 0;
  if (es > 1 && h.msb != host_msb) swap_bytes(data, bytes, es);
  g.data = data;
  rc = xt__finish(path, &g, opt, out, msg);
fail:
  if (f) fclose(f);
  free(h.datafile);
  free(datapath);
  free(data);
  return rc;
}
