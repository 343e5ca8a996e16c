/* NIfTI-1 and NIfTI-2 (.nii, .nii.gz) through libnifti2.
 *
 * The header is read first (nifti_image_read without data) and everything is checked before the
 * library allocates the voxel buffer: dims, type, and that the file can hold the data the header
 * claims (exactly for .nii, through deflate's 1032:1 bound for .nii.gz). The voxel-to-world map
 * is the sform if sform_code > 0, else the qform if qform_code > 0, else pixdim scaling (as
 * nibabel and ITK); opt->nifti_xform = XT_NIFTI_QFORM prefers the qform instead. When both are
 * set, the largest distance between them over the 8 corner voxels goes into the load report, and
 * a disagreement larger than the smallest voxel spacing is a warning (real atlases differ by
 * over 100 mm). NIfTI world is RAS, so rows x and y are negated to get LPS. scl_slope/scl_inter
 * apply when slope != 0.
 *
 * The voxels are read by us (zlib's gzread handles .nii and .nii.gz alike) because
 * nifti_image_load replaces NaN/inf floats by 0, which would hide bad data.
 *
 * libnifti2 keeps global state (debug level) and prints to stderr when its debug level is above
 * zero, so calls are serialised and the level forced to 0; we always write our own message. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nifti2_io.h>
#include <zlib.h>

#include "xt_load_internal.h"

static pthread_mutex_t nifti_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t rd32(const unsigned char *p, int swap) {
  uint32_t v = swap ? ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3])
                    : ((uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]);
  return v;
}

static int elem_of(int dt, xt__elem *e) {
  switch (dt) {
  case DT_UINT8: *e = XT__U8; return 1;
  case DT_INT8: *e = XT__I8; return 1;
  case DT_INT16: *e = XT__I16; return 1;
  case DT_UINT16: *e = XT__U16; return 1;
  case DT_INT32: *e = XT__I32; return 1;
  case DT_UINT32: *e = XT__U32; return 1;
  case DT_FLOAT32: *e = XT__F32; return 1;
  case DT_FLOAT64: *e = XT__F64; return 1;
  }
  return 0;
}

/* Our own look at the fixed-size header before libnifti2 sees it: which version, and where the
 * data starts (vox_offset), so absurd offsets are refused before the library reads extensions. */
static int peek_header(const char *path, int *version, int *compressed, double *vox_offset, double pixdim[3],
                       xt_msg *msg) {
  unsigned char h[540];
  FILE *f = fopen(path, "rb");
  if (!f) return xt_fail(msg, XT_EIO, "%s: cannot open", path);
  unsigned char magic[2] = {0, 0};
  size_t got = fread(magic, 1, 2, f);
  fclose(f);
  *compressed = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  gzFile gz = gzopen(path, "rb");
  if (!gz) return xt_fail(msg, XT_EIO, "%s: cannot open", path);
  int n = gzread(gz, h, sizeof h);
  gzclose(gz);
  if (n < 4) return xt_fail(msg, XT_ETRUNCATED, "%s: truncated NIfTI header (%d bytes)", path, n < 0 ? 0 : n);
  uint32_t le = rd32(h, 0), be = rd32(h, 1);
  int swap = 0;
  if (le == 348 || le == 540)
    *version = le == 348 ? 1 : 2;
  else if (be == 348 || be == 540) {
    *version = be == 348 ? 1 : 2;
    swap = 1;
  } else
    return xt_fail(msg, XT_EFORMAT, "%s: not a NIfTI-1/2 file (sizeof_hdr is %u, expected 348 or 540)", path, le);
  int need = *version == 1 ? 348 : 540;
  if (n < need) return xt_fail(msg, XT_ETRUNCATED, "%s: truncated NIfTI-%d header (%d of %d bytes)", path, *version, n, need);
  /* dim[0] and datatype checked here too: libnifti2 prints its own complaints about them to
   * stderr whatever the debug level. NIfTI-1: dim short[8] at 40, datatype short at 70;
   * NIfTI-2: datatype short at 12, dim int64[8] at 16. */
  int ndim, dt;
  if (*version == 1) {
    ndim = swap ? (int16_t)(h[40] << 8 | h[41]) : (int16_t)(h[41] << 8 | h[40]);
    dt = swap ? (int16_t)(h[70] << 8 | h[71]) : (int16_t)(h[71] << 8 | h[70]);
  } else {
    uint32_t lo = rd32(h + 16, swap), hi = rd32(h + 20, swap);
    ndim = (swap ? hi : lo) <= 8 && (swap ? lo : hi) == 0 ? (int)(swap ? hi : lo) : -1;
    dt = swap ? (int16_t)(h[12] << 8 | h[13]) : (int16_t)(h[13] << 8 | h[12]);
  }
  if (ndim != 3 && ndim != 4)
    return xt_fail(msg, ndim >= 1 && ndim <= 7 ? XT_EUNSUPPORTED : XT_EFORMAT,
                   "%s: dim[0] is %d; only 3D volumes (dim[0] 3, or 4 with one time point) are supported", path, ndim);
  xt__elem e;
  if (!elem_of(dt, &e))
    return xt_fail(msg, XT_EUNSUPPORTED, "%s: voxel type %s (%d) is not supported (need an 8/16/32-bit integer or float type)",
                   path, nifti_datatype_string(dt), dt);
  /* NIfTI-1: pixdim float[8] at 76, vox_offset float at 108; NIfTI-2: pixdim double[8] at 104,
   * vox_offset int64 at 168. The raw pixdims matter because libnifti2 quietly replaces zero ones. */
  if (*version == 1) {
    float fv;
    for (int a = 0; a < 4; a++) {
      uint32_t bits = rd32(h + (a < 3 ? 80 + 4 * a : 108), swap);
      memcpy(&fv, &bits, sizeof fv);
      if (a < 3) pixdim[a] = fv;
      else *vox_offset = fv;
    }
  } else {
    for (int a = 0; a < 4; a++) {
      int off = a < 3 ? 112 + 8 * a : 168;
      uint64_t lo = rd32(h + off, swap), hi = rd32(h + off + 4, swap);
      uint64_t v = swap ? (lo << 32 | hi) : (hi << 32 | lo);
      if (a < 3) memcpy(&pixdim[a], &v, sizeof v);
      else *vox_offset = (double)(int64_t)v;
    }
  }
  return 0;
}

int xt__load_nifti(const char *path, const xt_load_options *opt, xt_volume **out, xt_msg *msg) {
  nifti_image *nim = NULL;
  int version = 0, compressed = 0, locked = 0;
  double vox_offset = 0, raw_pixdim[3] = {0, 0, 0};
  unsigned char *data = NULL;
  gzFile gz = NULL;
  uint64_t fsize = 0;
  int rc = xt__file_size(path, NULL, &fsize, msg);
  if (rc) goto fail;
  rc = peek_header(path, &version, &compressed, &vox_offset, raw_pixdim, msg);
  if (rc) goto fail;
  uint64_t avail = compressed ? xt__inflate_bound(fsize) : fsize;
  if (!(vox_offset >= 0) || vox_offset > (double)avail) {
    rc = xt_fail(msg, compressed ? XT_EFORMAT : XT_ETRUNCATED, "%s: vox_offset %g lies beyond the end of the file (%llu bytes%s)",
                 path, vox_offset, (unsigned long long)fsize, compressed ? " compressed" : "");
    goto fail;
  }

  pthread_mutex_lock(&nifti_lock);
  locked = 1;
  nifti_set_debug_level(0);
  nim = nifti_image_read(path, 0);
  if (!nim) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: libnifti2 rejected the NIfTI-%d header (bad dims, datatype or magic)", path, version);
    goto fail;
  }
  if (nim->nifti_type != NIFTI_FTYPE_NIFTI1_1 && nim->nifti_type != NIFTI_FTYPE_NIFTI2_1) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: %s header; only single-file NIfTI (magic n+1/n+2) is supported", path,
                 nim->nifti_type == NIFTI_FTYPE_ANALYZE ? "ANALYZE 7.5" : "two-file or ASCII NIfTI");
    goto fail;
  }
  if (!(nim->dim[0] == 3 || (nim->dim[0] == 4 && nim->dim[4] == 1))) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: %lld-dimensional image (dim[4] = %lld); only 3D volumes are supported", path,
                 (long long)nim->dim[0], (long long)(nim->dim[0] >= 4 ? nim->dim[4] : 1));
    goto fail;
  }
  xt__grid g;
  memset(&g, 0, sizeof g);
  if (!elem_of(nim->datatype, &g.elem)) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: voxel type %s (%d) is not supported (need an 8/16/32-bit integer or float type)",
                 path, nifti_datatype_string(nim->datatype), nim->datatype);
    goto fail;
  }
  for (int a = 0; a < 3; a++) g.dim[a] = nim->dim[a + 1];
  size_t bytes = 0;
  rc = xt__check_dims(path, g.dim, xt__elem_size(g.elem), &bytes, msg);
  if (rc) goto fail;
  if ((double)bytes + vox_offset > (double)avail) {
    if (compressed)
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: header claims %zu data bytes but %llu compressed bytes cannot hold them", path,
                   bytes, (unsigned long long)fsize);
    else
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated: header claims %zu data bytes from offset %.0f but the file has %llu",
                   path, bytes, vox_offset, (unsigned long long)fsize);
    goto fail;
  }

  /* index -> RAS mm, then RAS -> LPS (negate x and y) */
  double m[3][4];
  int want_q = opt && opt->nifti_xform == XT_NIFTI_QFORM;
  int use_s = nim->sform_code > 0 && (!want_q || nim->qform_code <= 0);
  int use_q = !use_s && nim->qform_code > 0;
  if (use_q)
    for (int a = 0; a < 3; a++)
      if (!(raw_pixdim[a] > 0) || !isfinite(raw_pixdim[a])) {
        rc = xt_fail(msg, XT_ERANGE, "%s: pixdim[%d] is %g; the qform needs positive voxel sizes", path, a + 1, raw_pixdim[a]);
        goto fail;
      }
  if (use_s || use_q) {
    const nifti_dmat44 *x = use_s ? &nim->sto_xyz : &nim->qto_xyz;
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 4; c++) m[r][c] = x->m[r][c];
  } else {
    /* no orientation: NIfTI "method 1", x = pixdim * index */
    const double *pd = raw_pixdim;
    memset(m, 0, sizeof m);
    for (int a = 0; a < 3; a++) {
      if (!(pd[a] > 0) || !isfinite(pd[a])) {
        rc = xt_fail(msg, XT_ERANGE, "%s: pixdim[%d] is %g; voxel spacing must be positive", path, a + 1, pd[a]);
        goto fail;
      }
      m[a][a] = pd[a];
    }
  }
  xt_load_report *rep = opt ? opt->report : NULL;
  if (rep) {
    snprintf(rep->format, sizeof rep->format, "nifti");
    snprintf(rep->xform, sizeof rep->xform, "%s", use_s ? "sform" : use_q ? "qform" : "pixdim");
    rep->sform_code = nim->sform_code;
    rep->qform_code = nim->qform_code;
    rep->xform_disagree_mm = -1;
    if (nim->sform_code > 0 && nim->qform_code > 0) {
      /* the two maps at the 8 corner voxels */
      double worst = 0, minsp = INFINITY;
      for (int cnr = 0; cnr < 8; cnr++) {
        double ijk[3] = {(cnr & 1) ? (double)(g.dim[0] - 1) : 0, (cnr & 2) ? (double)(g.dim[1] - 1) : 0,
                         (cnr & 4) ? (double)(g.dim[2] - 1) : 0};
        double d2 = 0;
        for (int r = 0; r < 3; r++) {
          double a = nim->sto_xyz.m[r][3], b = nim->qto_xyz.m[r][3];
          for (int c = 0; c < 3; c++) a += nim->sto_xyz.m[r][c] * ijk[c], b += nim->qto_xyz.m[r][c] * ijk[c];
          d2 += (a - b) * (a - b);
        }
        if (sqrt(d2) > worst) worst = sqrt(d2);
      }
      for (int c = 0; c < 3; c++) {
        double l = sqrt(m[0][c] * m[0][c] + m[1][c] * m[1][c] + m[2][c] * m[2][c]);
        if (l < minsp) minsp = l;
      }
      rep->xform_disagree_mm = isfinite(worst) ? worst : -1;
      if (isfinite(worst) && worst > minsp)
        xt_load_report_warn(rep, "nifti_qform_sform",
                            "%s: qform and sform disagree by up to %.3g mm (more than a voxel, %.3g mm); the %s was "
                            "used (--nifti-transform sform|qform picks)",
                            path, worst, minsp, use_s ? "sform" : "qform");
    }
  }
  for (int r = 0; r < 3; r++) {
    double sgn = r < 2 ? -1.0 : 1.0;
    for (int c = 0; c < 3; c++) g.index_to_lps.m[r][c] = sgn * m[r][c];
    g.index_to_lps.t[r] = sgn * m[r][3];
  }
  g.slope = 1.0;
  g.inter = 0.0;
  if (nim->scl_slope != 0) {
    g.slope = nim->scl_slope;
    g.inter = nim->scl_inter;
  }

  /* The voxels are read here rather than by nifti_image_load, which silently zeroes NaN and inf
   * floats; non-finite data must reach xt_volume_validate and be reported. gzopen reads plain
   * and gzip files alike. */
  if ((size_t)nim->nbyper != xt__elem_size(g.elem)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: %d bytes per voxel do not match datatype %s", path, nim->nbyper,
                 nifti_datatype_string(nim->datatype));
    goto fail;
  }
  int64_t offset = nim->iname_offset;
  int swap = nim->byteorder != nifti_short_order();
  pthread_mutex_unlock(&nifti_lock);
  locked = 0;
  data = malloc(bytes ? bytes : 1);
  if (!data) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %zu bytes", path, bytes);
    goto fail;
  }
  gz = gzopen(path, "rb");
  if (!gz || gzseek(gz, (z_off_t)offset, SEEK_SET) != (z_off_t)offset) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: cannot reach the voxel data at byte %lld", path, (long long)offset);
    goto fail;
  }
  for (size_t done = 0; done < bytes;) {
    unsigned want = bytes - done < (1u << 30) ? (unsigned)(bytes - done) : (1u << 30);
    int got = gzread(gz, data + done, want);
    if (got <= 0) {
      rc = xt_fail(msg, XT_ETRUNCATED, "%s: truncated%s: read %zu of %zu voxel bytes", path,
                   compressed ? " or corrupt gzip stream" : "", done, bytes);
      goto fail;
    }
    done += (size_t)got;
  }
  size_t es = xt__elem_size(g.elem);
  if (swap && es > 1)
    for (size_t i = 0; i < bytes; i += es)
      for (size_t a = 0, b = es - 1; a < b; a++, b--) {
        unsigned char t = data[i + a];
        data[i + a] = data[i + b];
        data[i + b] = t;
      }
  g.data = data;
  rc = xt__finish(path, &g, opt, out, msg);
fail:
  if (gz) gzclose(gz);
  free(data);
  if (locked) pthread_mutex_unlock(&nifti_lock);
  if (nim) nifti_image_free(nim);
  return rc;
}
