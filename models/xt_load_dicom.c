/* DICOM CT series -> one volume: the series logic in C; attributes and pixel decoding come from
 * GDCM through xt_dicom_gdcm.h.
 *
 * Input: a folder (searched recursively), one file, or "@LIST" (a text file naming files, one
 * per line). Files are grouped by Series Instance UID; a folder holding several image series is
 * refused with the list of series unless one is picked (opt->dicom_series, or "PATH#SERIES").
 * Slices (one per classic file, one per frame of an enhanced multi-frame object) are sorted by
 * Image Position (Patient) along the slice normal (row x column direction of Image Orientation
 * (Patient)). The volume's index axes are the row direction, the column direction and the normal,
 * in patient LPS, which is DICOM's own patient frame, so no axis is flipped.
 *
 * Refused, each with a message naming the series and files: mixed orientations, pixel sizes or
 * matrix sizes; two slices at one position; uneven slice spacing (a missing slice); sheared slice
 * stacks (gantry tilt) - we do not resample, because a silently resampled CT would put anatomy
 * where the file does not; colour and floating-point pixel data. Rescale Slope/Intercept is
 * applied per slice (enhanced CT may change it per frame). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "xt_dicom_gdcm.h"
#include "xt_load_internal.h"

#define MAX_DEPTH 8
#define MAX_FILES 200000

/* ---- input ---------------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && strcasecmp(s + n - k, suffix) == 0;
}

static const char *base_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static int dicom_name(const char *path) {
  return ends_with(path, ".dcm") || ends_with(path, ".dicom") || ends_with(path, ".ima");
}

/* Splits "PATH#SERIES" when PATH itself (without the suffix) is what exists. base gets PATH. */
static void split_selector(const char *path, char *base, size_t cap, const char **sel) {
  *sel = NULL;
  snprintf(base, cap, "%s", path);
  struct stat st;
  if (stat(path, &st) == 0) return;
  char *hash = strrchr(base, '#');
  if (!hash || hash == base || !hash[1]) return;
  *hash = 0;
  *sel = path + (hash - base) + 1;
}

int xt_dicom_path(const char *path) {
  if (!path || !*path) return 0;
  if (path[0] == '@') return 1;
  char base[4096];
  const char *sel;
  split_selector(path, base, sizeof base, &sel);
  /* other formats by name (a folder so named is a mistake that reader reports); everything else
   * by the DICOM preamble */
  static const char *const other[] = {".nii", ".nii.gz", ".nrrd", ".nhdr", ".mha", ".mhd", ".json", ".nvdb", ".gmm"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (ends_with(base, other[i])) return 0;
  struct stat st;
  if (stat(base, &st) != 0) return dicom_name(base);
  if (S_ISDIR(st.st_mode)) return 1;
  if (!S_ISREG(st.st_mode)) return 0;
  return dicom_name(base) || xt_dcm_sniff(base);
}

/* The Media Storage SOP Class UID (0002,0002) from the file meta group, which is Explicit VR
 * Little Endian in every DICOM file; "" when absent. Read by us, because a DICOMDIR is not an
 * image and some of them make GDCM's (assertion-enabled Debian build) abort. */
static void media_sop_class(const char *path, char *out, size_t cap) {
  unsigned char b[4096];
  out[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n < 132 || memcmp(b + 128, "DICM", 4) != 0) return;
  size_t p = 132;
  while (p + 8 <= n) {
    unsigned g = b[p] | b[p + 1] << 8, e = b[p + 2] | b[p + 3] << 8;
    if (g != 2) return;
    int longvr = (b[p + 4] == 'O' || b[p + 4] == 'S' || b[p + 4] == 'U') &&
                 (b[p + 5] == 'B' || b[p + 5] == 'W' || b[p + 5] == 'Q' || b[p + 5] == 'N' || b[p + 5] == 'T');
    size_t len, hl;
    if (longvr) {
      if (p + 12 > n) return;
      len = (size_t)b[p + 8] | (size_t)b[p + 9] << 8 | (size_t)b[p + 10] << 16 | (size_t)b[p + 11] << 24;
      hl = 12;
    } else {
      len = (size_t)b[p + 6] | (size_t)b[p + 7] << 8;
      hl = 8;
    }
    if (len > n || p + hl + len > n) return;
    if (e == 2) {
      size_t k = len < cap - 1 ? len : cap - 1;
      memcpy(out, b + p + hl, k);
      while (k && (out[k - 1] == 0 || out[k - 1] == ' ')) k--;
      out[k] = 0;
      return;
    }
    p += hl + len;
  }
}

#define XT_DICOMDIR_SOP "1.2.840.10008.1.3.10"

typedef struct strlist {
  char **v;
  int n, cap;
} strlist;

static int strlist_add(strlist *l, const char *s, xt_msg *msg, const char *what) {
  if (l->n >= MAX_FILES) return xt_fail(msg, XT_ETOOLARGE, "%s: more than %d files", what, MAX_FILES);
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    char **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
    l->v = v;
    l->cap = cap;
  }
  size_t n = strlen(s) + 1;
  l->v[l->n] = malloc(n);
  if (!l->v[l->n]) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
  memcpy(l->v[l->n++], s, n);
  return 0;
}

static void strlist_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Regular files under dir (not hidden; symbolic links are not followed), to MAX_DEPTH, that are
 * named *.dcm/... or carry the DICOM preamble. *others counts the files passed over. */
static int walk(const char *dir, int depth, strlist *out, int *others, const char *what, xt_msg *msg) {
  DIR *d = opendir(dir);
  if (!d) return xt_fail(msg, XT_EIO, "%s: cannot open folder %s: %s", what, dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  char *p = NULL;
  while (!rc && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    free(p);
    p = malloc(n);
    if (!p) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
      break;
    }
    snprintf(p, n, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth < MAX_DEPTH) rc = walk(p, depth + 1, out, others, what, msg);
    } else if (S_ISREG(st.st_mode)) {
      if (dicom_name(p) || xt_dcm_sniff(p)) rc = strlist_add(out, p, msg, what);
      else (*others)++;
    }
  }
  free(p);
  closedir(d);
  return rc;
}

/* "@LIST": one file per line (blank lines and lines starting with '#' ignored); relative names
 * are relative to the list's folder. */
static int read_list(const char *list, strlist *out, xt_msg *msg) {
  FILE *f = fopen(list, "r");
  if (!f) return xt_fail(msg, errno == ENOENT ? XT_ENOTFOUND : XT_EIO, "@%s: %s", list, strerror(errno));
  const char *slash = strrchr(list, '/');
  size_t dlen = slash ? (size_t)(slash - list) : 0;
  char line[4096];
  int rc = 0, lineno = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    lineno++;
    size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n') {
      rc = xt_fail(msg, XT_EFORMAT, "@%s: line %d is longer than %zu characters", list, lineno, sizeof line - 2);
      break;
    }
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    char *s = line;
    while (*s == ' ') s++;
    if (!*s || *s == '#') continue;
    if (*s == '/' || !slash) {
      rc = strlist_add(out, s, msg, list);
    } else {
      size_t m = dlen + strlen(s) + 2;
      char *p = malloc(m);
      if (!p) {
        rc = xt_fail(msg, XT_ENOMEM, "@%s: out of memory", list);
        break;
      }
      snprintf(p, m, "%.*s/%s", (int)dlen, list, s);
      rc = strlist_add(out, p, msg, list);
      free(p);
    }
  }
  fclose(f);
  if (!rc && out->n == 0) rc = xt_fail(msg, XT_EINVAL, "@%s: names no files", list);
  return rc;
}

/* ---- series --------------------------------------------------------------------------------- */

typedef struct series {
  const char *uid; /* into the first file's header */
  int first;       /* file index */
  int nfiles, nframes;
} series;

typedef struct slice {
  int file, frame;
  double pos; /* Image Position (Patient) . normal */
} slice;

static int cmp_slice(const void *a, const void *b) {
  const slice *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  if (x->file != y->file) return x->file - y->file;
  return x->frame - y->frame;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* "UID [#N MODALITY, K images, "desc"]" for listings. */
static void describe(char *out, size_t cap, const series *s, const xt_dcm_header *h) {
  char num[24] = "";
  if (h->has_series_number) snprintf(num, sizeof num, "#%d ", h->series_number);
  snprintf(out, cap, "%s [%s%s, %d image%s%s%s%s]", s->uid[0] ? s->uid : "(no Series Instance UID)", num,
           h->modality[0] ? h->modality : "?", s->nframes, s->nframes == 1 ? "" : "s", h->series_desc[0] ? ", \"" : "",
           h->series_desc, h->series_desc[0] ? "\"" : "");
}

/* Appends the series list to msg->text as far as it fits. */
static void list_series(xt_msg *msg, const series *ser, int nser, const xt_dcm_header *hdr) {
  if (!msg) return;
  size_t used = strlen(msg->text);
  for (int i = 0; i < nser; i++) {
    char one[256];
    describe(one, sizeof one, &ser[i], &hdr[ser[i].first]);
    size_t need = strlen(one) + 2;
    if (used + need + 16 >= sizeof msg->text) {
      snprintf(msg->text + used, sizeof msg->text - used, " (+%d more)", nser - i);
      return;
    }
    used += (size_t)snprintf(msg->text + used, sizeof msg->text - used, "%s%s", i ? "; " : " ", one);
  }
}

static double dot3(const double *a, const double *b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

/* Sign-extends / masks one stored value per the decoder's pixel format. */
static double stored_value(const unsigned char *p, const xt_dcm_pixfmt *f) {
  int bits = f->bits_allocated;
  uint32_t raw = bits == 8 ? p[0] : bits == 16 ? (uint32_t)(*(const uint16_t *)(const void *)p) : *(const uint32_t *)(const void *)p;
  int stored = f->bits_stored > 0 && f->bits_stored <= bits ? f->bits_stored : bits;
  int shift = f->high_bit + 1 - stored;
  if (shift < 0 || shift + stored > bits) shift = 0;
  if (stored < 32) {
    raw = (raw >> shift) & ((1u << stored) - 1u);
    if (f->pixel_rep && (raw & (1u << (stored - 1)))) return (double)(int64_t)raw - (double)(1ull << stored);
    return (double)raw;
  }
  return f->pixel_rep ? (double)(int32_t)raw : (double)raw;
}

/* ---- the load ------------------------------------------------------------------------------- */

static int load_series(const char *what, strlist *files, int from_folder, int others, const char *sel,
                       const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  xt_dcm_header *hdr = NULL;
  series *ser = NULL;
  slice *sl = NULL;
  float *vox = NULL;
  unsigned char *raw = NULL;
  double *steps = NULL;
  int nser = 0, rc = 0, nskipped = others;
  xt_load_report *rep = opt ? opt->report : NULL;

  hdr = calloc((size_t)files->n, sizeof *hdr);
  ser = calloc((size_t)files->n, sizeof *ser);
  if (!hdr || !ser) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %d file headers", what, files->n);
    goto fail;
  }
  /* Named files (an @LIST): every one confined before any is read, so that an entry outside the
   * model folders answers 403 whatever the entries before it hold. A folder's files were found
   * under the (confined) folder without following links; each is still checked below. */
  for (int i = 0; !from_folder && opt && opt->roots && i < files->n; i++)
    if ((rc = xt__path_confined(files->v[i], what, opt, msg))) goto fail;
  /* headers; group by Series Instance UID (files are sorted, so groups come out in name order) */
  for (int i = 0; i < files->n; i++) {
    uint64_t size = 0;
    if ((rc = xt__file_check(files->v[i], NULL, opt, &size, msg))) goto fail; /* confined, regular, non-blocking */
    char sop[XT_DCM_UID];
    media_sop_class(files->v[i], sop, sizeof sop);
    if (!strcmp(sop, XT_DICOMDIR_SOP) || !strcmp(base_of(files->v[i]), "DICOMDIR")) {
      if (!from_folder) {
        rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: a DICOMDIR (an index), not an image; give the folder of the images",
                     files->v[i]);
        goto fail;
      }
      nskipped++;
      continue;
    }
    if ((rc = xt_dcm_read_header(files->v[i], &hdr[i], msg))) goto fail;
    if (!hdr[i].has_rows) {
      if (!from_folder) {
        rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: not an image (no Rows/Columns; SOP class %s)", files->v[i],
                     hdr[i].sop_class[0] ? hdr[i].sop_class : "?");
        goto fail;
      }
      nskipped++;
      continue;
    }
    int s = 0;
    while (s < nser && strcmp(ser[s].uid, hdr[i].series_uid) != 0) s++;
    if (s == nser) {
      ser[nser].uid = hdr[i].series_uid;
      ser[nser].first = i;
      nser++;
    }
    ser[s].nfiles++;
    ser[s].nframes += hdr[i].frames;
  }
  if (nser == 0) {
    rc = xt_fail(msg, XT_ENOTFOUND, "%s: no DICOM image found (%d file%s looked at)", what, files->n + others,
                 files->n + others == 1 ? "" : "s");
    goto fail;
  }
  int pick = -1;
  if (sel && *sel) {
    for (int s = 0; s < nser && pick < 0; s++)
      if (!strcmp(ser[s].uid, sel)) pick = s;
    if (pick < 0) { /* a Series Number, when it names exactly one series */
      char *end = NULL;
      long num = strtol(sel, &end, 10);
      int hits = 0;
      for (int s = 0; end && !*end && s < nser; s++)
        if (hdr[ser[s].first].has_series_number && hdr[ser[s].first].series_number == num) pick = s, hits++;
      if (hits > 1) {
        rc = xt_fail(msg, XT_EINVAL, "%s: Series Number %ld names %d series; give the Series Instance UID:", what, num, hits);
        list_series(msg, ser, nser, hdr);
        goto fail;
      }
    }
    if (pick < 0) {
      rc = xt_fail(msg, XT_ENOTFOUND, "%s: no series \"%.80s\"; found:", what, sel);
      list_series(msg, ser, nser, hdr);
      goto fail;
    }
  } else if (nser > 1) {
    rc = xt_fail(msg, XT_EINVAL, "%s: %d image series; pick one (--series UID or Series Number):", what, nser);
    list_series(msg, ser, nser, hdr);
    goto fail;
  } else
    pick = 0;
  const series *S = &ser[pick];
  const xt_dcm_header *H0 = &hdr[S->first];
  for (int s = 0; s < nser; s++)
    if (s != pick) nskipped += ser[s].nfiles;

  /* every frame of the series is a slice; all must agree on size, pixel format and orientation */
  int nsl = 0;
  sl = calloc((size_t)S->nframes, sizeof *sl);
  if (!sl) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
    goto fail;
  }
  const xt_dcm_frame *F0 = NULL;
  const char *f0name = NULL;
  double r[3], c[3], nrm[3];
  for (int i = 0; i < files->n; i++) {
    const xt_dcm_header *h = &hdr[i];
    if (!h->has_rows || strcmp(h->series_uid, S->uid) != 0) continue;
    const char *fn = files->v[i];
    if (h->samples != 1) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: %d samples per pixel (%s): colour images are not CT", fn, h->samples, h->photometric);
      goto fail;
    }
    if (h->float_pixels) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: floating-point pixel data is not supported", fn);
      goto fail;
    }
    if (!(h->bits_allocated == 8 || h->bits_allocated == 16 || h->bits_allocated == 32)) {
      rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: Bits Allocated %d (need 8, 16 or 32)", fn, h->bits_allocated);
      goto fail;
    }
    if (h->rows < 1 || h->cols < 1 || h->rows != H0->rows || h->cols != H0->cols) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: %d x %d pixels, but %s has %d x %d; one series must have one matrix size", fn,
                   h->cols, h->rows, base_of(files->v[S->first]), H0->cols, H0->rows);
      goto fail;
    }
    for (int k = 0; k < h->nframe_info; k++) {
      const xt_dcm_frame *f = &h->frame[k];
      if (!f->has_ipp || !f->has_iop || !f->has_spacing) {
        rc = xt_fail(msg, XT_EFORMAT, "%s%s%.0d: no %s: the slice cannot be placed", fn, h->frames > 1 ? " frame " : "",
                     h->frames > 1 ? k + 1 : 0,
                     !f->has_ipp ? "Image Position (Patient)" : !f->has_iop ? "Image Orientation (Patient)" : "Pixel Spacing");
        goto fail;
      }
      if (!(f->spacing[0] > 0 && f->spacing[1] > 0 && f->spacing[0] < 1e4 && f->spacing[1] < 1e4)) {
        rc = xt_fail(msg, XT_ERANGE, "%s: Pixel Spacing %g\\%g mm is not positive", fn, f->spacing[0], f->spacing[1]);
        goto fail;
      }
      if (!(isfinite(f->slope) && isfinite(f->inter) && f->slope != 0)) {
        rc = xt_fail(msg, XT_EFORMAT, "%s: Rescale Slope %g / Intercept %g unusable", fn, f->slope, f->inter);
        goto fail;
      }
      if (!F0) {
        F0 = f;
        f0name = fn;
        memcpy(r, f->iop, sizeof r);
        memcpy(c, f->iop + 3, sizeof c);
        double nr = sqrt(dot3(r, r)), nc = sqrt(dot3(c, c));
        if (fabs(nr - 1) > 1e-3 || fabs(nc - 1) > 1e-3 || fabs(dot3(r, c)) > 1e-3) {
          rc = xt_fail(msg, XT_EFORMAT, "%s: Image Orientation (Patient) %g\\%g\\%g\\%g\\%g\\%g is not two orthogonal unit vectors",
                       fn, r[0], r[1], r[2], c[0], c[1], c[2]);
          goto fail;
        }
        for (int a = 0; a < 3; a++) r[a] /= nr, c[a] /= nc;
        nrm[0] = r[1] * c[2] - r[2] * c[1];
        nrm[1] = r[2] * c[0] - r[0] * c[2];
        nrm[2] = r[0] * c[1] - r[1] * c[0];
      } else {
        double d = 0;
        for (int a = 0; a < 6; a++) d = fmax(d, fabs(f->iop[a] - F0->iop[a]));
        if (d > 1e-4) {
          rc = xt_fail(msg, XT_EFORMAT,
                       "%s: Image Orientation (Patient) differs from %s's (by up to %.3g): one series must have one "
                       "orientation (a localizer or a reformat mixed in? pick files with @LIST)",
                       fn, base_of(f0name), d);
          goto fail;
        }
        if (fabs(f->spacing[0] - F0->spacing[0]) > 1e-4 * F0->spacing[0] ||
            fabs(f->spacing[1] - F0->spacing[1]) > 1e-4 * F0->spacing[1]) {
          rc = xt_fail(msg, XT_EFORMAT, "%s: Pixel Spacing %g\\%g differs from %s's %g\\%g", fn, f->spacing[0], f->spacing[1],
                       base_of(f0name), F0->spacing[0], F0->spacing[1]);
          goto fail;
        }
      }
      sl[nsl].file = i;
      sl[nsl].frame = k;
      sl[nsl].pos = dot3(f->ipp, nrm);
      nsl++;
    }
  }
  qsort(sl, (size_t)nsl, sizeof *sl, cmp_slice);

  /* spacing along the normal, and shear (gantry tilt) across it */
  double step = 0;
  const char *tilt_note = H0->has_tilt && H0->tilt_deg != 0 ? " (Gantry/Detector Tilt is set)" : "";
  if (nsl == 1) {
    step = H0->spacing_between > 0 ? H0->spacing_between : F0->thickness > 0 ? F0->thickness : 1.0;
    if (!(H0->spacing_between > 0 || F0->thickness > 0))
      xt_load_report_warn(rep, "dicom_single_slice", "%s: one slice without Slice Thickness: 1 mm assumed across it", what);
  } else {
    steps = malloc((size_t)(nsl - 1) * sizeof *steps);
    if (!steps) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
      goto fail;
    }
    for (int k = 0; k + 1 < nsl; k++) {
      steps[k] = sl[k + 1].pos - sl[k].pos;
      if (steps[k] < 1e-3) {
        const char *a = files->v[sl[k].file], *b = files->v[sl[k + 1].file];
        rc = xt_fail(msg, XT_EFORMAT,
                     "%s: two slices at one position (%.4g mm along the normal): %s frame %d and %s frame %d; several "
                     "phases or acquisitions in one series? pick one set of files with @LIST",
                     what, sl[k].pos, base_of(a), sl[k].frame + 1, base_of(b), sl[k + 1].frame + 1);
        goto fail;
      }
    }
    double *sorted = malloc((size_t)(nsl - 1) * sizeof *sorted);
    if (!sorted) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory", what);
      goto fail;
    }
    memcpy(sorted, steps, (size_t)(nsl - 1) * sizeof *sorted);
    qsort(sorted, (size_t)(nsl - 1), sizeof *sorted, cmp_double);
    double med = sorted[(nsl - 1) / 2];
    free(sorted);
    double tol = fmax(1e-3, 0.01 * med);
    for (int k = 0; k + 1 < nsl; k++) {
      if (fabs(steps[k] - med) > tol) {
        double ratio = steps[k] / med;
        char why[80] = "";
        if (ratio > 1.5 && fabs(ratio - floor(ratio + 0.5)) < 0.05)
          snprintf(why, sizeof why, " (%d slice%s missing?)", (int)floor(ratio + 0.5) - 1, floor(ratio + 0.5) > 2 ? "s" : "");
        rc = xt_fail(msg, XT_EFORMAT,
                     "%s: uneven slice spacing: %.4g mm between %s and %s, %.4g mm elsewhere%s; refused rather than "
                     "stretched",
                     what, steps[k], base_of(files->v[sl[k].file]), base_of(files->v[sl[k + 1].file]), med, why);
        goto fail;
      }
      const double *p0 = hdr[sl[k].file].frame[sl[k].frame].ipp, *p1 = hdr[sl[k + 1].file].frame[sl[k + 1].frame].ipp;
      double d[3] = {p1[0] - p0[0], p1[1] - p0[1], p1[2] - p0[2]};
      double along = dot3(d, nrm);
      double perp[3] = {d[0] - along * nrm[0], d[1] - along * nrm[1], d[2] - along * nrm[2]};
      double off = sqrt(dot3(perp, perp));
      if (off > 1e-3 * fabs(along) + 1e-3) {
        rc = xt_fail(msg, XT_EUNSUPPORTED,
                     "%s: slices are sheared by %.2f deg (each slice shifted %.3g mm across the normal)%s: gantry tilt; "
                     "the slices do not form a rectangular grid; resample the series to an untilted grid first",
                     what, atan2(off, fabs(along)) * 180.0 / XT_PI, off, tilt_note);
        goto fail;
      }
    }
    step = (sl[nsl - 1].pos - sl[0].pos) / (nsl - 1);
  }

  /* the grid: index (i, j, k) = (column, row, slice) -> LPS */
  xt__grid g;
  memset(&g, 0, sizeof g);
  g.dim[0] = H0->cols;
  g.dim[1] = H0->rows;
  g.dim[2] = nsl;
  const double *ipp0 = hdr[sl[0].file].frame[sl[0].frame].ipp;
  for (int a = 0; a < 3; a++) {
    g.index_to_lps.m[a][0] = r[a] * F0->spacing[1]; /* Pixel Spacing [1]: between columns */
    g.index_to_lps.m[a][1] = c[a] * F0->spacing[0]; /* Pixel Spacing [0]: between rows */
    g.index_to_lps.m[a][2] = nrm[a] * step;
    g.index_to_lps.t[a] = ipp0[a];
  }
  g.elem = XT__F32;
  g.slope = 1.0;
  g.inter = 0.0;
  size_t bytes = 0;
  if ((rc = xt__check_dims(what, g.dim, sizeof(float), &bytes, msg))) goto fail;
  vox = malloc(bytes);
  if (!vox) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %zu bytes", what, bytes);
    goto fail;
  }
  /* decode file by file (an enhanced object once for all its frames); slice order from sl[] */
  size_t plane = (size_t)H0->rows * (size_t)H0->cols;
  for (int i = 0; i < files->n; i++) {
    const xt_dcm_header *h = &hdr[i];
    if (!h->has_rows || strcmp(h->series_uid, S->uid) != 0) continue;
    size_t eb = (size_t)h->bits_allocated / 8, rbytes = plane * (size_t)h->frames * eb;
    free(raw);
    raw = malloc(rbytes);
    if (!raw) {
      rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %zu bytes", files->v[i], rbytes);
      goto fail;
    }
    xt_dcm_pixfmt pf;
    if ((rc = xt_dcm_read_pixels(files->v[i], raw, rbytes, &pf, msg))) goto fail;
    if (pf.bits_allocated != h->bits_allocated || pf.samples != 1) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: decoded %d-bit, %d-sample pixels; the header says %d-bit, 1 sample", files->v[i],
                   pf.bits_allocated, pf.samples, h->bits_allocated);
      goto fail;
    }
    for (int k = 0; k < nsl; k++) {
      if (sl[k].file != i) continue;
      const xt_dcm_frame *f = &h->frame[sl[k].frame];
      const unsigned char *src = raw + (size_t)sl[k].frame * plane * eb;
      float *dst = vox + (size_t)k * plane;
      for (size_t p = 0; p < plane; p++) dst[p] = (float)(stored_value(src + p * eb, &pf) * f->slope + f->inter);
    }
  }
  free(raw);
  raw = NULL;
  g.data = vox;
  if ((rc = xt__finish(what, &g, opt, out, msg))) goto fail;
  if (rep) {
    snprintf(rep->format, sizeof rep->format, "dicom");
    snprintf(rep->series_uid, sizeof rep->series_uid, "%s", S->uid);
    snprintf(rep->modality, sizeof rep->modality, "%.19s", H0->modality);
    snprintf(rep->series_desc, sizeof rep->series_desc, "%s", H0->series_desc);
    snprintf(rep->transfer_syntax, sizeof rep->transfer_syntax, "%s", H0->transfer_syntax);
    rep->nseries = nser;
    rep->nslices = nsl;
    rep->nskipped = nskipped;
    rep->enhanced = H0->enhanced;
    rep->slice_step_mm = step;
    int huconv = opt && (opt->convert == XT_LOAD_HU_TO_MU || opt->convert == XT_LOAD_HU_TO_LABELS);
    if (huconv && strcmp(H0->modality, "CT") != 0)
      xt_load_report_warn(rep, "dicom_modality", "%s: Modality is %s, not CT: its values are not Hounsfield units", what,
                          H0->modality[0] ? H0->modality : "(none)");
  }
fail:
  if (hdr)
    for (int i = 0; i < files->n; i++) xt_dcm_header_free(&hdr[i]);
  free(hdr);
  free(ser);
  free(sl);
  free(vox);
  free(raw);
  free(steps);
  return rc;
}

int xt_dicom_load_files(const char *what, const char *const *files, int nfiles, const xt_load_options *opt,
                        xt_volume **out, xt_msg *msg) {
  if (!out) return xt_fail(msg, XT_EINVAL, "%s: no output volume given", what);
  *out = NULL;
  if (nfiles < 1) return xt_fail(msg, XT_EINVAL, "%s: no files given", what);
  strlist l = {0};
  int rc = 0;
  for (int i = 0; i < nfiles && !rc; i++) rc = strlist_add(&l, files[i], msg, what);
  if (!rc) rc = load_series(what, &l, 0, 0, opt ? opt->dicom_series : NULL, opt, out, msg);
  strlist_free(&l);
  return rc;
}

int xt__load_dicom(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  char base[4096];
  const char *sel = NULL;
  strlist l = {0};
  int rc = 0, others = 0, folder = 0;
  if (strlen(path) >= sizeof base) return xt_fail(msg, XT_ETOOLARGE, "%.64s...: path too long", path);
  if (path[0] == '@') {
    split_selector(path + 1, base, sizeof base, &sel);
    uint64_t lsize = 0;
    if (!(rc = xt__file_check(base, NULL, opt, &lsize, msg))) rc = read_list(base, &l, msg); /* a FIFO never blocks */
  } else {
    split_selector(path, base, sizeof base, &sel);
    struct stat st;
    if (stat(base, &st) != 0) {
      rc = xt_fail(msg, errno == ENOENT || errno == ENOTDIR ? XT_ENOTFOUND : XT_EIO, "%s: %s", base,
                   errno == ENOENT ? "no such file or folder" : strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      folder = 1;
      rc = walk(base, 0, &l, &others, path, msg);
      if (!rc && l.n == 0)
        rc = xt_fail(msg, XT_ENOTFOUND, "%s: no DICOM files in the folder (%d other file%s)", path, others, others == 1 ? "" : "s");
      if (!rc) qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_str);
    } else {
      rc = strlist_add(&l, base, msg, path);
    }
  }
  if (!rc && sel && opt && opt->dicom_series && strcmp(sel, opt->dicom_series) != 0)
    rc = xt_fail(msg, XT_EINVAL, "%s: series \"%s\" in the path and \"%s\" in the options disagree", path, sel, opt->dicom_series);
  if (!rc)
    rc = load_series(path, &l, folder, others, sel ? sel : opt ? opt->dicom_series : NULL, opt, out, msg);
  strlist_free(&l);
  return rc;
}
