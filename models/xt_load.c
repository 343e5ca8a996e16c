/* xt_volume_load: picks the reader by file name, then turns the decoded grid into an xt_volume
 * (float mu or uint8 labels) per the requested conversion, and validates it.
 *
 * The readers hand us a non-owning view (xt__grid) of the data as stored, so each voxel is
 * converted exactly once from its file type into the final volume; nothing is half-built: the
 * volume only reaches the caller after xt_volume_validate has passed. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* realpath, readlink, O_NOFOLLOW */
#endif
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "xt_hu.h"
#include "xt_load_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------------------------- */

size_t xt__elem_size(xt__elem e) {
  switch (e) {
  case XT__U8:
  case XT__I8: return 1;
  case XT__U16:
  case XT__I16: return 2;
  case XT__U32:
  case XT__I32:
  case XT__F32: return 4;
  case XT__F64: return 8;
  }
  return 0;
}

const char *xt__elem_name(xt__elem e) {
  switch (e) {
  case XT__U8: return "uint8";
  case XT__I8: return "int8";
  case XT__U16: return "uint16";
  case XT__I16: return "int16";
  case XT__U32: return "uint32";
  case XT__I32: return "int32";
  case XT__F32: return "float32";
  case XT__F64: return "float64";
  }
  return "?";
}

int xt__check_dims(const char *path, const int64_t dim[3], size_t elem_size, size_t *bytes, xt_msg *msg) {
  for (int a = 0; a < 3; a++)
    if (dim[a] < 1 || dim[a] > XT_VOLUME_MAX_DIM)
      return xt_fail(msg, XT_ERANGE, "%s: dimension %d is %lld, outside [1, %d]", path, a, (long long)dim[a],
                     XT_VOLUME_MAX_DIM);
  /* each factor <= 2^14, so the product fits easily in 64 bits */
  uint64_t n = (uint64_t)dim[0] * (uint64_t)dim[1] * (uint64_t)dim[2];
  if (n > XT_VOLUME_MAX_VOXELS)
    return xt_fail(msg, XT_ETOOLARGE, "%s: %lld x %lld x %lld voxels exceed the limit of %zu", path, (long long)dim[0],
                   (long long)dim[1], (long long)dim[2], (size_t)XT_VOLUME_MAX_VOXELS);
  *bytes = (size_t)n * elem_size;
  return 0;
}

uint64_t xt__inflate_bound(uint64_t compressed) {
  if (compressed > UINT64_MAX / 1100) return UINT64_MAX;
  return compressed * 1032 + 1024; /* + slack for tiny streams' framing */
}

int xt__file_size(const char *path, const char *owner, uint64_t *size, xt_msg *msg) {
  return xt__file_check(path, owner, NULL, size, msg);
}

int xt_load_options_named(const char *convert, const char *hu_model, double ct_energy_kev, const char *nifti_transform,
                          const char *nan_value, xt_load_options *opt, xt_msg *msg) {
  const char *c = convert;
  if (!c || !*c || !strcmp(c, "mu")) opt->convert = XT_LOAD_MU;
  else if (!strcmp(c, "hu")) opt->convert = XT_LOAD_HU_TO_MU;
  else if (!strcmp(c, "hu-labels")) opt->convert = XT_LOAD_HU_TO_LABELS;
  else if (!strcmp(c, "labels")) opt->convert = XT_LOAD_LABELS;
  else if (!strcmp(c, "contrast-mask")) opt->convert = XT_LOAD_CONTRAST_MASK;
  else return xt_fail(msg, XT_EINVAL, "convert: '%s' is not mu, hu, hu-labels, labels or contrast-mask", c);
  opt->hu_model = hu_model && !strcmp(hu_model, "linear") ? XT_HU_LINEAR : XT_HU_BILINEAR;
  opt->ct_energy_kev = ct_energy_kev;
  opt->nifti_xform = nifti_transform && !strcmp(nifti_transform, "qform") ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
  opt->nan_fill = 0;
  if (nan_value && *nan_value && strcmp(nan_value, "none") != 0) {
    char *end = NULL;
    opt->nan_value = strtod(nan_value, &end);
    if (!end || *end || !isfinite(opt->nan_value))
      return xt_fail(msg, XT_EINVAL, "nan_value: '%s' is neither none nor a number", nan_value);
    opt->nan_fill = 1;
  }
  return 0;
}

int xt_load_root(const char *dir, char **out, xt_msg *msg) {
  *out = NULL;
  char *real = realpath(dir, NULL);
  if (!real) return xt_fail(msg, errno == ENOENT ? XT_ENOTFOUND : XT_EIO, "model folder %s: %s", dir, strerror(errno));
  struct stat st;
  if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
    free(real);
    return xt_fail(msg, XT_EINVAL, "model folder %s: not a directory", dir);
  }
  *out = real;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Confinement (xt_load_options.roots)
 *
 * A client's path is resolved the way the kernel resolves it (symbolic links followed, ".." taken
 * on the resolved prefix), but by us, one component at a time, and a name is only looked up
 * (lstat, readlink) once it lies under a root, or on the way to one: a proper ancestor of a
 * resolved root needs no look-up (it is a directory without links, realpath said so at start),
 * and an ancestor of a root as configured (root_names) is the operator's path. Anything else
 * ends the resolution with EPERM before any system call names it. So a path outside the roots
 * answers 403 whatever it is or is not (file, folder, FIFO, unreadable, missing): no existence
 * oracle, no FIFO or device opened, and a symlink in a root that points out is read (readlink)
 * but its target never looked at. A missing name inside a root is ENOENT (404).
 *
 * What this guarantees, and what not: at the moment of the check, every component looked at lay
 * inside a root and the resolved path has no symbolic link left in it; the file is then opened by
 * that path (xt__file_check opens it with O_NOFOLLOW, so a link swapped in for the last component
 * is refused). The format libraries open files by name themselves, so someone who can write
 * inside a root and swaps a folder for a link between the check and the open can still redirect
 * them: the roots must not be writable by clients (docs/server.md, "Security"); clients cannot
 * write files through the API.
 * ------------------------------------------------------------------------------------------- */

#define XT_CONFINE_MAX_LINKS 40 /* as the kernel's ELOOP limit */

/* Root r without trailing slashes: its length ("/" stays 1). */
static size_t root_len(const char *r) {
  size_t k = strlen(r);
  while (k > 1 && r[k - 1] == '/') k--;
  return k;
}

/* p (absolute, no "." or "..", no trailing '/'; "" for "/") is r or lies under it. */
static int is_under(const char *p, size_t n, const char *r) {
  size_t k = root_len(r);
  if (k == 1 && r[0] == '/') return 1;
  return n >= k && !strncmp(p, r, k) && (p[k] == '/' || p[k] == 0);
}

/* p is a proper ancestor of r (or r itself, when self). */
static int is_on_way(const char *p, size_t n, const char *r, int self) {
  size_t k = root_len(r);
  if (self && n == k && !strncmp(p, r, n)) return 1;
  return n < k && !strncmp(p, r, n) && r[n] == '/';
}

/* The lexical absolute form of a configured root (relative to the working folder, "." and ".."
 * taken on the text): only used to allow look-ups on the way to it. 0 on failure. */
static int lexical_abs(const char *in, char *out, size_t cap) {
  char buf[PATH_MAX];
  size_t n = 0;
  if (in[0] != '/') {
    if (!getcwd(buf, sizeof buf)) return 0;
    n = strlen(buf);
    if (n == 1) n = 0;
  }
  if (n + strlen(in) + 2 > sizeof buf) return 0;
  const char *s = in;
  while (*s) {
    while (*s == '/') s++;
    const char *e = s;
    while (*e && *e != '/') e++;
    size_t c = (size_t)(e - s);
    if (c == 0 || (c == 1 && s[0] == '.')) {
      s = e;
      continue;
    }
    if (c == 2 && s[0] == '.' && s[1] == '.') {
      while (n && buf[n - 1] != '/') n--;
      if (n) n--;
    } else {
      buf[n++] = '/';
      memcpy(buf + n, s, c);
      n += c;
    }
    s = e;
  }
  buf[n] = 0;
  if (n + 2 > cap) return 0;
  snprintf(out, cap, "%s", n ? buf : "/");
  return 1;
}

/* Resolves path under opt's roots as described above: 0 and *out (malloc'd, resolved, under a
 * root) or an errno value: EPERM outside the roots, ENOENT / ENOTDIR for a missing name inside,
 * ELOOP, ENAMETOOLONG, EACCES, ENOMEM. */
static int resolve_confined(const char *path, const xt_load_options *opt, char **out) {
  *out = NULL;
  char cur[PATH_MAX], pend[PATH_MAX], link[PATH_MAX], tmp[PATH_MAX];
  size_t n = 0; /* cur[0, n): the resolved prefix, no links in it; "" is "/" */
  if (strlen(path) >= sizeof pend) return ENAMETOOLONG;
  if (path[0] != '/') {
    if (!getcwd(cur, sizeof cur)) return errno;
    n = strlen(cur);
    if (n == 1) n = 0;
  }
  cur[n] = 0;
  snprintf(pend, sizeof pend, "%s", path);
  size_t pos = 0;
  int links = 0;
  for (;;) {
    while (pend[pos] == '/') pos++;
    if (!pend[pos]) break;
    const char *c = pend + pos;
    size_t clen = strcspn(c, "/");
    pos += clen;
    if (clen == 1 && c[0] == '.') continue;
    if (clen == 2 && c[0] == '.' && c[1] == '.') { /* cur has no links: its parent is textual */
      while (n && cur[n - 1] != '/') n--;
      if (n) n--;
      cur[n] = 0;
      continue;
    }
    if (n + 1 + clen >= sizeof cur) return ENAMETOOLONG;
    size_t m = n;
    cur[m++] = '/';
    memcpy(cur + m, c, clen);
    m += clen;
    cur[m] = 0;
    int under = 0, way = 0, named = 0;
    for (int i = 0; i < opt->nroots && !under; i++) {
      under = is_under(cur, m, opt->roots[i]);
      way = way || is_on_way(cur, m, opt->roots[i], 0);
    }
    for (int i = 0; opt->root_names && i < opt->nroots && !under && !way && !named; i++)
      named = opt->root_names[i] && lexical_abs(opt->root_names[i], tmp, sizeof tmp) && is_on_way(cur, m, tmp, 1);
    if (!under && way) { /* an ancestor of a resolved root: a folder without links */
      n = m;
      continue;
    }
    if (!under && !named) return EPERM; /* not looked at */
    struct stat st;
    if (lstat(cur, &st) != 0) return under ? errno : EPERM;
    if (S_ISLNK(st.st_mode)) {
      if (++links > XT_CONFINE_MAX_LINKS) return ELOOP;
      ssize_t k = readlink(cur, link, sizeof link - 1);
      if (k < 0) return errno;
      link[k] = 0;
      /* the link's text replaces it; the rest of the path follows */
      if ((size_t)snprintf(tmp, sizeof tmp, "%s/%s", link, pend + pos) >= sizeof tmp) return ENAMETOOLONG;
      memcpy(pend, tmp, strlen(tmp) + 1);
      pos = 0;
      if (link[0] == '/') n = 0;
      cur[n] = 0;
      continue;
    }
    n = m;
  }
  int under = 0;
  for (int i = 0; i < opt->nroots && !under; i++) under = is_under(cur, n, opt->roots[i]);
  if (!under) return EPERM; /* "/", or an ancestor of a root */
  if (!(*out = strdup(n ? cur : "/"))) return ENOMEM;
  return 0;
}

int xt__path_resolve(const char *path, const char *owner, const xt_load_options *opt, char **real, xt_msg *msg) {
  *real = NULL;
  const char *pre = owner ? owner : path, *sep = owner ? ": data file " : "", *what = owner ? path : "";
  int e = resolve_confined(path, opt, real);
  if (!e) return 0;
  if (e == EPERM) return xt_fail(msg, XT_EPERM, "%s%s%s: outside the model folders (--model-root)", pre, sep, what);
  if (e == ENOENT || e == ENOTDIR) return xt_fail(msg, XT_ENOTFOUND, "%s%s%s: no such file", pre, sep, what);
  if (e == ENOMEM) return xt_fail(msg, XT_ENOMEM, "%s%s%s: out of memory", pre, sep, what);
  return xt_fail(msg, XT_EIO, "%s%s%s: %s", pre, sep, what, strerror(e));
}

int xt__path_confined(const char *path, const char *owner, const xt_load_options *opt, xt_msg *msg) {
  if (!opt || !opt->roots) return 0;
  char *real = NULL;
  int rc = xt__path_resolve(path, owner, opt, &real, msg);
  free(real);
  return rc;
}

int xt__source_confined(const char *path, const xt_load_options *opt, xt_msg *msg) {
  if (!opt || !opt->roots) return 0;
  /* "@LIST" and "PATH#SERIES" are not part of the name; the '#' is taken as a selector only when
   * the full name does not exist (as the DICOM reader does), and either way nothing outside is
   * looked at: both names are resolved under the roots. */
  const char *p = path[0] == '@' ? path + 1 : path, *hash = strrchr(p, '#');
  char *real = NULL, base[PATH_MAX];
  int e = resolve_confined(p, opt, &real);
  free(real);
  if ((e == ENOENT || e == ENOTDIR) && hash && hash > p && hash[1] && (size_t)(hash - p) < sizeof base) {
    snprintf(base, sizeof base, "%.*s", (int)(hash - p), p);
    real = NULL;
    e = resolve_confined(base, opt, &real);
    free(real);
  }
  if (!e) return 0;
  if (e == EPERM) return xt_fail(msg, XT_EPERM, "%s: outside the model folders (--model-root)", path);
  if (e == ENOENT || e == ENOTDIR) return xt_fail(msg, XT_ENOTFOUND, "%s: no such file", path);
  if (e == ENOMEM) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  return xt_fail(msg, XT_EIO, "%s: %s", path, strerror(e));
}

int xt__file_check(const char *path, const char *owner, const xt_load_options *opt, uint64_t *size, xt_msg *msg) {
  /* "head.mhd: data file head.raw: ..." for a data file, "head.mha: ..." for the file itself */
  const char *pre = owner ? owner : path, *sep = owner ? ": data file " : "", *what = owner ? path : "";
  char *real = NULL;
  int rc = 0, fd = -1, nofollow = 0;
  if (opt && opt->roots) {
    /* resolved first, under a root, nothing outside looked at; the file checked is the file opened */
    if ((rc = xt__path_resolve(path, owner, opt, &real, msg))) return rc;
    path = real;
    nofollow = O_NOFOLLOW; /* the resolved path has no links: one now is a swap (ELOOP) */
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) rc = xt_fail(msg, XT_ENOTFOUND, "%s%s%s: no such file", pre, sep, what);
    else rc = xt_fail(msg, XT_EIO, "%s%s%s: %s", pre, sep, what, strerror(e));
    goto done;
  }
  if (S_ISDIR(st.st_mode)) {
    rc = xt_fail(msg, XT_EINVAL, "%s%s%s: is a directory, not a file", pre, sep, what);
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = xt_fail(msg, XT_EINVAL, "%s%s%s: not a regular file", pre, sep, what);
    goto done;
  }
  /* Again on a descriptor, opened without blocking: a FIFO put in its place since the stat opens
   * at once here (and is refused) instead of blocking until a writer comes. */
  fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | nofollow);
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = xt_fail(msg, XT_EIO, "%s%s%s: %s", pre, sep, what, strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = xt_fail(msg, XT_EINVAL, "%s%s%s: not a regular file", pre, sep, what);
    goto done;
  }
  *size = (uint64_t)st.st_size;
done:
  if (fd >= 0) close(fd);
  free(real);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Conversion
 * ------------------------------------------------------------------------------------------- */

/* Reads n stored elements starting at element `first` into doubles (value = slope*x + inter). */
static void read_chunk(const xt__grid *g, size_t first, size_t n, double *out) {
#define XT_CHUNK_(T)                                        \
  do {                                                      \
    const T *p = (const T *)g->data + first;                \
    for (size_t i = 0; i < n; i++) out[i] = (double)p[i];   \
  } while (0)
  switch (g->elem) {
  case XT__U8: XT_CHUNK_(uint8_t); break;
  case XT__I8: XT_CHUNK_(int8_t); break;
  case XT__U16: XT_CHUNK_(uint16_t); break;
  case XT__I16: XT_CHUNK_(int16_t); break;
  case XT__U32: XT_CHUNK_(uint32_t); break;
  case XT__I32: XT_CHUNK_(int32_t); break;
  case XT__F32: XT_CHUNK_(float); break;
  case XT__F64: XT_CHUNK_(double); break;
  }
#undef XT_CHUNK_
  if (g->slope != 1.0 || g->inter != 0.0)
    for (size_t i = 0; i < n; i++) out[i] = out[i] * g->slope + g->inter;
}

static void index_of(const xt_volume *v, size_t lin, int ijk[3]) {
  ijk[0] = (int)(lin % (size_t)v->dim[0]);
  lin /= (size_t)v->dim[0];
  ijk[1] = (int)(lin % (size_t)v->dim[1]);
  ijk[2] = (int)(lin / (size_t)v->dim[1]);
}

static int check_geometry(const char *path, const xt__grid *g, double spacing[3], xt_msg *msg) {
  const double(*m)[3] = g->index_to_lps.m;
  for (int a = 0; a < 3; a++) {
    if (!isfinite(g->index_to_lps.t[a]))
      return xt_fail(msg, XT_EFORMAT, "%s: origin component %d is not finite", path, a);
    for (int r = 0; r < 3; r++)
      if (!isfinite(m[r][a])) return xt_fail(msg, XT_EFORMAT, "%s: direction/spacing of axis %d is not finite", path, a);
    spacing[a] = sqrt(m[0][a] * m[0][a] + m[1][a] * m[1][a] + m[2][a] * m[2][a]);
    if (!(spacing[a] > 0) || !(spacing[a] < 1e4))
      return xt_fail(msg, XT_ERANGE, "%s: voxel spacing of axis %d is %g mm, outside (0, 1e4)", path, a, spacing[a]);
  }
  double det = xt_aff_det(&g->index_to_lps);
  /* relative to the spacings, so a singular direction matrix is caught at any voxel size */
  if (!(fabs(det) > 1e-6 * spacing[0] * spacing[1] * spacing[2]))
    return xt_fail(msg, XT_EFORMAT, "%s: voxel-to-mm transform is singular (axes are parallel)", path);
  return 0;
}

int xt__finish(const char *path, const xt__grid *g, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  enum { CHUNK = 4096 };
  xt_volume *v = NULL;
  xt_material_table *table = NULL;
  double *buf = NULL;
  double spacing[3];
  size_t bytes = 0;
  xt_hu_calib cal;
  xt_hu_stats hs;
  xt_hu_stats_init(&hs);
  xt_load_report *rep = opt ? opt->report : NULL;
  int rc = xt__check_dims(path, g->dim, xt__elem_size(g->elem), &bytes, msg);
  if (rc) goto fail;
  rc = check_geometry(path, g, spacing, msg);
  if (rc) goto fail;
  if (!isfinite(g->slope) || !isfinite(g->inter)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: intensity scaling (slope %g, intercept %g) is not finite", path, g->slope, g->inter);
    goto fail;
  }
  xt_load_convert conv = opt ? opt->convert : XT_LOAD_MU;
  double energy = opt && opt->energy_kev > 0 ? opt->energy_kev : XT_DEFAULT_ENERGY_KEV;
  const int mask = conv == XT_LOAD_CONTRAST_MASK;
  int labels = conv == XT_LOAD_HU_TO_LABELS || conv == XT_LOAD_LABELS || mask;
  int hu = conv == XT_LOAD_HU_TO_MU || conv == XT_LOAD_HU_TO_LABELS;
  int fill = opt && opt->nan_fill;
  double fillv = fill ? opt->nan_value : 0;
  size_t nfilled = 0;
  if (fill && !isfinite(fillv)) {
    rc = xt_fail(msg, XT_EINVAL, "%s: the NaN fill value %g is not finite", path, fillv);
    goto fail;
  }
  if (conv != XT_LOAD_MU) {
    table = malloc(sizeof *table);
    if (!table) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
      goto fail;
    }
    xt_msg m2;
    rc = xt_materials_default(energy, table, &m2);
    if (!rc && mask) { /* every entry unused (no material, mu 0); the labels present become regions below */
      memset(table, 0, sizeof *table);
      table->count = XT_MAX_MATERIALS;
      table->energy_kev = energy;
      snprintf(table->source, sizeof table->source, "contrast mask: labels > 0 are regions of iodine only");
    }
    if (!rc && conv == XT_LOAD_HU_TO_MU)
      rc = xt_hu_calib_make(opt->hu_model, energy, opt->ct_energy_kev, &cal, &m2);
    if (rc) {
      xt_fail(msg, rc, "%s: %s", path, m2.text);
      goto fail;
    }
  }
  xt_msg m3; /* "volume: ..." becomes "path: volume: ...", as every load message starts with the path */
  rc = xt_volume_create((int)g->dim[0], (int)g->dim[1], (int)g->dim[2], spacing, labels ? XT_VOXEL_U8 : XT_VOXEL_F32,
                        &v, &m3);
  if (rc) {
    xt_fail(msg, rc, "%s: %s", path, m3.text);
    goto fail;
  }
  v->index_to_model = g->index_to_lps;
  v->energy_kev = energy; /* dense: what its mu (given or converted from HU) is for */
  buf = malloc(CHUNK * sizeof *buf);
  if (!buf) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  size_t n = xt_volume_voxels(v);
  float *f = v->type == XT_VOXEL_F32 ? v->data : NULL;
  uint8_t *u = v->type == XT_VOXEL_U8 ? v->data : NULL;
  double vmin = INFINITY, vmax = -INFINITY;
  for (size_t base = 0; base < n; base += CHUNK) {
    size_t cn = n - base < CHUNK ? n - base : CHUNK;
    read_chunk(g, base, cn, buf);
    for (size_t i = 0; i < cn; i++) {
      double x = buf[i];
      if (fill && isnan(x)) {
        x = fillv;
        nfilled++;
      }
      if (x < vmin) vmin = x;
      if (x > vmax) vmax = x;
      if (conv == XT_LOAD_MU) {
        f[base + i] = (float)x; /* non-finite values are reported by xt_volume_validate below */
        continue;
      }
      if (!isfinite(x)) {
        int ijk[3];
        index_of(v, base + i, ijk);
        rc = xt_fail(msg, XT_ENANDATA, "%s: voxel (%d,%d,%d) is not finite (%g)%s", path, ijk[0], ijk[1], ijk[2], x,
                     isnan(x) && !fill ? "; --nan-value V fills NaN voxels" : "");
        goto fail;
      }
      if (hu) xt_hu_stats_add(&hs, x);
      if (conv == XT_LOAD_HU_TO_MU) {
        f[base + i] = (float)xt_hu_calib_mu(&cal, x);
      } else if (conv == XT_LOAD_HU_TO_LABELS) {
        u[base + i] = (uint8_t)xt_hu_to_label(x);
      } else {
        if (!(x >= 0 && x < table->count) || x != floor(x)) {
          int ijk[3];
          index_of(v, base + i, ijk);
          rc = xt_fail(msg, XT_ERANGE, "%s: voxel (%d,%d,%d) has label %g, not an integer in 0..%d (%s)",
                       path, ijk[0], ijk[1], ijk[2], x, table->count - 1, mask ? "contrast mask" : "default materials");
          goto fail;
        }
        u[base + i] = (uint8_t)x;
        if (mask && x > 0) table->contrast[(int)x] = 1;
      }
    }
  }
  if (labels) {
    v->materials = table;
    table = NULL;
  }
  rc = xt_volume_validate(v, path, msg);
  if (rc) {
    if (rc == XT_ENANDATA && !fill && msg && strstr(msg->text, "nan") && strlen(msg->text) + 40 < sizeof msg->text)
      strcat(msg->text, "; --nan-value V fills NaN voxels");
    goto fail;
  }
  if (rep) {
    rep->value_min = vmin;
    rep->value_max = vmax;
    rep->nan_filled = nfilled;
    rep->nan_value = fillv;
    if (nfilled)
      xt_load_report_warn(rep, "nan_filled", "%s: %zu NaN voxels set to %g (--nan-value)", path, nfilled, fillv);
    if (hu) xt_hu_sanity(&hs, path, rep);
    if (conv == XT_LOAD_HU_TO_MU) {
      snprintf(rep->hu_model, sizeof rep->hu_model, "%s", cal.model == XT_HU_LINEAR ? "linear" : "bilinear");
      rep->ct_energy_kev = cal.model == XT_HU_LINEAR ? 0 : cal.ct_energy_kev;
    }
  }
  free(buf);
  free(table);
  *out = v;
  return 0;
fail:
  free(buf);
  free(table);
  xt_volume_free(v);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && strcasecmp(s + n - k, suffix) == 0;
}

int xt_volume_load(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  if (!path || !*path) return xt_fail(msg, XT_EINVAL, "load: no file name given");
  if (!out) return xt_fail(msg, XT_EINVAL, "%s: no output volume given", path);
  *out = NULL;
  if (opt && (opt->convert < XT_LOAD_MU || opt->convert > XT_LOAD_CONTRAST_MASK))
    return xt_fail(msg, XT_EINVAL, "%s: unknown conversion %d", path, (int)opt->convert);
  int (*reader)(const char *, const xt_load_options *, xt_volume **, xt_msg *) = NULL;
  if (opt && opt->roots) { /* confined first: nothing outside the folders is looked at, let alone
                              opened to sniff for DICOM */
    int rc = xt__source_confined(path, opt, msg);
    if (rc) return rc;
  }
  if (xt_dicom_path(path)) /* a folder, an @list or a file: xt_load_dicom.c checks its own inputs */
    return xt__load_dicom(path, opt, out, msg);
  if (ends_with(path, ".nii") || ends_with(path, ".nii.gz"))
    reader = xt__load_nifti;
  else if (ends_with(path, ".nrrd") || ends_with(path, ".nhdr"))
    reader = xt__load_nrrd;
  else if (ends_with(path, ".mha") || ends_with(path, ".mhd"))
    reader = xt__load_mha;
  else
    return xt_fail(msg, XT_EUNSUPPORTED,
                   "%s: unknown volume format (expected .nii, .nii.gz, .nrrd, .nhdr, .mha, .mhd, or DICOM: a "
                   "folder, .dcm or @list)", path);
  uint64_t size = 0;
  int rc = xt__file_check(path, NULL, opt, &size, msg);
  if (rc) return rc;
  if (size == 0) return xt_fail(msg, XT_ETRUNCATED, "%s: empty file", path);
  rc = reader(path, opt, out, msg);
  if (!rc && opt && opt->report && !opt->report->format[0])
    snprintf(opt->report->format, sizeof opt->report->format, "%s",
             reader == xt__load_nifti ? "nifti" : reader == xt__load_nrrd ? "nrrd" : "metaimage");
  return rc;
}
