/* xt_volume_load: picks the reader by file name, then turns the decoded grid into an xt_volume
 * (float mu or uint8 labels) per the requested conversion, and validates it.
 *
 * The readers hand us a non-owning view (xt__grid) of the data as stored, so each voxel is
 * converted exactly once from its file type into the final volume; nothing is half-built: the
 * volume only reaches the caller after xt_volume_validate has passed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

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
  /* "head.mhd: data file head.raw: ..." for a data file, "head.mha: ..." for the file itself */
  const char *pre = owner ? owner : path, *sep = owner ? ": data file " : "", *what = owner ? path : "";
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      return xt_fail(msg, XT_ENOTFOUND, "%s%s%s: no such file", pre, sep, what);
    return xt_fail(msg, XT_EIO, "%s%s%s: %s", pre, sep, what, strerror(e));
  }
  if (S_ISDIR(st.st_mode))
    return xt_fail(msg, XT_EINVAL, "%s%s%s: is a directory, not a file", pre, sep, what);
  if (!S_ISREG(st.st_mode))
    return xt_fail(msg, XT_EINVAL, "%s%s%s: not a regular file", pre, sep, what);
  *size = (uint64_t)st.st_size;
  return 0;
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
  int labels = conv == XT_LOAD_HU_TO_LABELS || conv == XT_LOAD_LABELS;
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
          rc = xt_fail(msg, XT_ERANGE, "%s: voxel (%d,%d,%d) has label %g, not an integer in 0..%d (default materials)",
                       path, ijk[0], ijk[1], ijk[2], x, table->count - 1);
          goto fail;
        }
        u[base + i] = (uint8_t)x;
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
  if (opt && (opt->convert < XT_LOAD_MU || opt->convert > XT_LOAD_LABELS))
    return xt_fail(msg, XT_EINVAL, "%s: unknown conversion %d", path, (int)opt->convert);
  int (*reader)(const char *, const xt_load_options *, xt_volume **, xt_msg *) = NULL;
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
  int rc = xt__file_size(path, NULL, &size, msg);
  if (rc) return rc;
  if (size == 0) return xt_fail(msg, XT_ETRUNCATED, "%s: empty file", path);
  rc = reader(path, opt, out, msg);
  if (!rc && opt && opt->report && !opt->report->format[0])
    snprintf(opt->report->format, sizeof opt->report->format, "%s",
             reader == xt__load_nifti ? "nifti" : reader == xt__load_nrrd ? "nrrd" : "metaimage");
  return rc;
}
