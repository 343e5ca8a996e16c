/* Gaussian-mixture files: the native self-describing format (.xgmm) and the thesis renderer's
 * headerless .gmm (xt_gmm.h, docs/models.md). Both are little-endian; values are encoded and
 * decoded field by field, so the files are the same whatever the host's byte order.
 *
 * Readers check the size the header (or count) implies against the file's size before
 * allocating, so a truncated, padded or absurd file fails with one line and no allocation
 * larger than the file. Writers go to a temporary file in the target's directory and rename it
 * into place: a failed write leaves no partial file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "xt_gmm.h"

/* ------------------------------------------------------------------------------------------ */
/* Little-endian fields                                                                       */
/* ------------------------------------------------------------------------------------------ */

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static float get_f32(const unsigned char *p) {
  uint32_t u = get_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static double get_f64(const unsigned char *p) {
  uint64_t u = get_u64(p);
  double d;
  memcpy(&d, &u, 8);
  return d;
}
static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}
static void put_f32(unsigned char *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(p, u);
}
static void put_f64(unsigned char *p, double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  put_u64(p, u);
}

/* A record (48 bytes) <-> a Gaussian. */
static void decode_record(const unsigned char *p, xt_gaussian *g) {
  for (int a = 0; a < 3; a++) {
    g->centre[a] = get_f32(p + offsetof(xt_gaussian, centre) + 4 * a);
    g->scale[a] = get_f32(p + offsetof(xt_gaussian, scale) + 4 * a);
  }
  for (int a = 0; a < 4; a++) g->quat[a] = get_f32(p + offsetof(xt_gaussian, quat) + 4 * a);
  g->rho = get_f32(p + offsetof(xt_gaussian, rho));
  g->label = get_u32(p + offsetof(xt_gaussian, label));
}
static void encode_record(unsigned char *p, const xt_gaussian *g) {
  for (int a = 0; a < 3; a++) {
    put_f32(p + offsetof(xt_gaussian, centre) + 4 * a, g->centre[a]);
    put_f32(p + offsetof(xt_gaussian, scale) + 4 * a, g->scale[a]);
  }
  for (int a = 0; a < 4; a++) put_f32(p + offsetof(xt_gaussian, quat) + 4 * a, g->quat[a]);
  put_f32(p + offsetof(xt_gaussian, rho), g->rho);
  put_u32(p + offsetof(xt_gaussian, label), g->label);
}

/* ------------------------------------------------------------------------------------------ */
/* Files                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Opens path and reports its size; one line on failure. */
static int open_sized(const char *path, FILE **f, size_t *size, xt_msg *msg) {
  uint64_t n = 0;
  int rc = xt__fopen_regular(path, f, &n, msg); /* never blocks on a FIFO */
  *size = (size_t)n;
  return rc;
}

static int read_exact(FILE *f, void *buf, size_t n, const char *path, size_t at, xt_msg *msg) {
  if (n && fread(buf, 1, n, f) != n)
    return xt_fail(msg, XT_ETRUNCATED, "%s: read failed at byte %zu (%zu bytes wanted)", path, at, n);
  return 0;
}

/* Write side: a temporary sibling renamed over `path` at commit. */
typedef struct atomic_file {
  char tmp[4200];
  FILE *f;
} atomic_file;

static int af_open(atomic_file *af, const char *path, xt_msg *msg) {
  af->f = NULL;
  if (strlen(path) > 4000) return xt_fail(msg, XT_EINVAL, "%s: path too long", path);
  snprintf(af->tmp, sizeof af->tmp, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(af->tmp);
  if (fd < 0) return xt_fail(msg, XT_EIO, "%s: cannot create a temporary file: %s", path, strerror(errno));
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    close(fd);
    unlink(af->tmp);
    return xt_fail(msg, XT_EIO, "%s: %s", path, strerror(errno));
  }
  return 0;
}

static void af_abort(atomic_file *af) {
  if (af->f) fclose(af->f);
  af->f = NULL;
  unlink(af->tmp);
}

static int af_write(atomic_file *af, const void *p, size_t n, const char *path, xt_msg *msg) {
  if (n && fwrite(p, 1, n, af->f) != n) return xt_fail(msg, XT_EIO, "%s: write failed: %s", path, strerror(errno));
  return 0;
}

static int af_commit(atomic_file *af, const char *path, xt_msg *msg) {
  int bad = fflush(af->f) != 0 || ferror(af->f);
  bad |= fclose(af->f) != 0;
  af->f = NULL;
  if (bad || rename(af->tmp, path) != 0) {
    int e = errno;
    unlink(af->tmp);
    return xt_fail(msg, XT_EIO, "%s: write failed: %s", path, strerror(e));
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Native format                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define HDR_BYTES ((size_t)sizeof(xt_gmm_header))
#define REC_BYTES ((size_t)sizeof(xt_gaussian))

int xt_gmm_read_native(const char *path, xt_gmm **out, xt_msg *msg) {
  *out = NULL;
  FILE *f = NULL;
  size_t size = 0;
  unsigned char h[HDR_BYTES];
  unsigned char *rec = NULL;
  xt_gmm *g = NULL;
  int rc = open_sized(path, &f, &size, msg);
  if (rc) return rc;
  if (size < HDR_BYTES) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: %zu bytes, shorter than the %zu-byte header", path, size, HDR_BYTES);
    goto fail;
  }
  if ((rc = read_exact(f, h, HDR_BYTES, path, 0, msg))) goto fail;
  if (memcmp(h, XT_GMM_MAGIC, 8) != 0) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: not an xtwin GMM file (bad magic)", path);
    goto fail;
  }
  const uint32_t version = get_u32(h + offsetof(xt_gmm_header, version));
  const uint32_t hbytes = get_u32(h + offsetof(xt_gmm_header, header_bytes));
  const uint64_t count = get_u64(h + offsetof(xt_gmm_header, count));
  const uint32_t rbytes = get_u32(h + offsetof(xt_gmm_header, record_bytes));
  const uint32_t flags = get_u32(h + offsetof(xt_gmm_header, flags));
  const double cutoff = get_f64(h + offsetof(xt_gmm_header, cutoff));
  const double unit = get_f64(h + offsetof(xt_gmm_header, unit_mm));
  const uint32_t crc_file = get_u32(h + offsetof(xt_gmm_header, crc32));
  char layout[65];
  memcpy(layout, h + offsetof(xt_gmm_header, layout), 64);
  layout[64] = 0;
  if (version != XT_GMM_VERSION) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: format version %u (this build reads %u)", path, version, XT_GMM_VERSION);
    goto fail;
  }
  if (hbytes != HDR_BYTES || rbytes != REC_BYTES) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: header says %u-byte header and %u-byte records (version 1: %zu and %zu)", path,
                 hbytes, rbytes, HDR_BYTES, REC_BYTES);
    goto fail;
  }
  if (strcmp(layout, XT_GMM_LAYOUT) != 0) {
    for (char *p = layout; *p; p++)
      if (*p < 32 || *p > 126) *p = '?';
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: field layout \"%s\" (this build reads \"%s\")", path, layout, XT_GMM_LAYOUT);
    goto fail;
  }
  if (count < 1 || count > XT_GMM_MAX_COUNT) {
    rc = xt_fail(msg, XT_ERANGE, "%s: header announces %llu Gaussians, outside [1, %zu]", path,
                 (unsigned long long)count, (size_t)XT_GMM_MAX_COUNT);
    goto fail;
  }
  const size_t want = HDR_BYTES + (size_t)count * REC_BYTES;
  if (size < want) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: %zu bytes, but the header announces %llu Gaussians (%zu bytes)", path, size,
                 (unsigned long long)count, want);
    goto fail;
  }
  if (size > want) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: %zu bytes after the %llu announced Gaussians", path, size - want,
                 (unsigned long long)count);
    goto fail;
  }
  if (flags & ~1u) {
    rc = xt_fail(msg, XT_EUNSUPPORTED, "%s: unknown flags 0x%x", path, flags);
    goto fail;
  }
  if (!(unit >= 1e-6 && unit <= 1e6)) {
    rc = xt_fail(msg, XT_ERANGE, "%s: length unit %g mm, outside [1e-6, 1e6]", path, unit);
    goto fail;
  }
  rec = malloc((size_t)count * REC_BYTES);
  if (!rec) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %llu Gaussians", path, (unsigned long long)count);
    goto fail;
  }
  if ((rc = read_exact(f, rec, (size_t)count * REC_BYTES, path, HDR_BYTES, msg))) goto fail;
  uLong crc = crc32_z(0L, h, offsetof(xt_gmm_header, crc32));
  crc = crc32_z(crc, rec, (size_t)count * REC_BYTES);
  if ((uint32_t)crc != crc_file) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: checksum mismatch (file says %08x, contents give %08x)", path, crc_file,
                 (unsigned)crc);
    goto fail;
  }
  if ((rc = xt_gmm_create((size_t)count, &g, msg))) {
    rc = xt_fail(msg, rc, "%s: out of memory for %llu Gaussians", path, (unsigned long long)count);
    goto fail;
  }
  g->cutoff = cutoff;
  g->has_labels = (flags & 1u) != 0;
  for (size_t i = 0; i < g->count; i++) {
    xt_gaussian *p = &g->g[i];
    decode_record(rec + i * REC_BYTES, p);
    if (unit != 1.0) {
      for (int a = 0; a < 3; a++) {
        p->centre[a] = (float)(p->centre[a] * unit);
        p->scale[a] = (float)(p->scale[a] * unit);
      }
      p->rho = (float)(p->rho / unit);
    }
  }
  if ((rc = xt_gmm_finish(g, path, msg))) goto fail;
  free(rec);
  fclose(f);
  *out = g;
  return 0;
fail:
  xt_gmm_free(g);
  free(rec);
  if (f) fclose(f);
  return rc;
}

int xt_gmm_write_native(const char *path, const xt_gmm *g, xt_msg *msg) {
  int rc = xt_gmm_validate(g, path, msg);
  if (rc) return rc;
  unsigned char h[HDR_BYTES];
  memset(h, 0, sizeof h);
  memcpy(h, XT_GMM_MAGIC, 8);
  put_u32(h + offsetof(xt_gmm_header, version), XT_GMM_VERSION);
  put_u32(h + offsetof(xt_gmm_header, header_bytes), (uint32_t)HDR_BYTES);
  put_u64(h + offsetof(xt_gmm_header, count), (uint64_t)g->count);
  put_u32(h + offsetof(xt_gmm_header, record_bytes), (uint32_t)REC_BYTES);
  put_u32(h + offsetof(xt_gmm_header, flags), g->has_labels ? 1u : 0u);
  put_f64(h + offsetof(xt_gmm_header, cutoff), g->cutoff);
  put_f64(h + offsetof(xt_gmm_header, unit_mm), 1.0);
  memcpy(h + offsetof(xt_gmm_header, layout), XT_GMM_LAYOUT, sizeof XT_GMM_LAYOUT - 1);
  /* Records in chunks, so a million Gaussians need no second copy of the mixture. */
  enum { CHUNK = 4096 };
  unsigned char *buf = malloc(CHUNK * REC_BYTES);
  if (!buf) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  uLong crc = crc32_z(0L, h, offsetof(xt_gmm_header, crc32));
  for (size_t i = 0; i < g->count; i += CHUNK) {
    size_t n = g->count - i < CHUNK ? g->count - i : CHUNK;
    for (size_t j = 0; j < n; j++) {
      xt_gaussian r = g->g[i + j];
      if (!g->has_labels) r.label = XT_GMM_NO_LABEL;
      encode_record(buf + j * REC_BYTES, &r);
    }
    crc = crc32_z(crc, buf, n * REC_BYTES);
  }
  put_u32(h + offsetof(xt_gmm_header, crc32), (uint32_t)crc);
  atomic_file af;
  if ((rc = af_open(&af, path, msg))) goto done;
  if ((rc = af_write(&af, h, HDR_BYTES, path, msg))) goto abort;
  for (size_t i = 0; i < g->count; i += CHUNK) {
    size_t n = g->count - i < CHUNK ? g->count - i : CHUNK;
    for (size_t j = 0; j < n; j++) {
      xt_gaussian r = g->g[i + j];
      if (!g->has_labels) r.label = XT_GMM_NO_LABEL;
      encode_record(buf + j * REC_BYTES, &r);
    }
    if ((rc = af_write(&af, buf, n * REC_BYTES, path, msg))) goto abort;
  }
  rc = af_commit(&af, path, msg);
  goto done;
abort:
  af_abort(&af);
done:
  free(buf);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The thesis's .gmm                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Per Gaussian: 3 position + 1 density + 3 scale + 4 rotation floats. */
#define THESIS_PER_G ((size_t)44)

int xt_gmm_read_thesis(const char *path, xt_gmm **out, xt_msg *msg) {
  *out = NULL;
  FILE *f = NULL;
  size_t size = 0;
  unsigned char *buf = NULL;
  xt_gmm *g = NULL;
  unsigned char c8[8];
  int rc = open_sized(path, &f, &size, msg);
  if (rc) return rc;
  if (size < 8) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: %zu bytes, shorter than the 8-byte count", path, size);
    goto fail;
  }
  if ((rc = read_exact(f, c8, 8, path, 0, msg))) goto fail;
  const uint64_t count = get_u64(c8);
  if (count < 1 || count > XT_GMM_MAX_COUNT) {
    rc = xt_fail(msg, XT_ERANGE, "%s: count %llu, outside [1, %zu] (is this a thesis .gmm file?)", path,
                 (unsigned long long)count, (size_t)XT_GMM_MAX_COUNT);
    goto fail;
  }
  const size_t want = 8 + (size_t)count * THESIS_PER_G;
  if (size < want) {
    rc = xt_fail(msg, XT_ETRUNCATED, "%s: %zu bytes, but the count %llu needs %zu", path, size,
                 (unsigned long long)count, want);
    goto fail;
  }
  if (size > want) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: %zu bytes after the %llu Gaussians the count announces", path, size - want,
                 (unsigned long long)count);
    goto fail;
  }
  buf = malloc(want - 8);
  if (!buf) {
    rc = xt_fail(msg, XT_ENOMEM, "%s: out of memory for %llu Gaussians", path, (unsigned long long)count);
    goto fail;
  }
  if ((rc = read_exact(f, buf, want - 8, path, 8, msg))) goto fail;
  if ((rc = xt_gmm_create((size_t)count, &g, msg))) {
    rc = xt_fail(msg, rc, "%s: out of memory for %llu Gaussians", path, (unsigned long long)count);
    goto fail;
  }
  const size_t n = (size_t)count;
  const unsigned char *pos = buf, *den = buf + 12 * n, *scl = buf + 16 * n, *rot = buf + 28 * n;
  for (size_t i = 0; i < n; i++) {
    xt_gaussian *p = &g->g[i];
    for (int a = 0; a < 3; a++) {
      p->centre[a] = get_f32(pos + 12 * i + 4 * a);
      p->scale[a] = get_f32(scl + 12 * i + 4 * a);
    }
    p->rho = get_f32(den + 4 * i);
    for (int a = 0; a < 4; a++) p->quat[a] = get_f32(rot + 16 * i + 4 * a);
  }
  if ((rc = xt_gmm_finish(g, path, msg))) goto fail;
  free(buf);
  fclose(f);
  *out = g;
  return 0;
fail:
  xt_gmm_free(g);
  free(buf);
  if (f) fclose(f);
  return rc;
}

int xt_gmm_write_thesis(const char *path, const xt_gmm *g, xt_msg *msg) {
  int rc = xt_gmm_validate(g, path, msg);
  if (rc) return rc;
  const size_t n = g->count;
  unsigned char *buf = malloc(8 + n * THESIS_PER_G);
  if (!buf) return xt_fail(msg, XT_ENOMEM, "%s: out of memory", path);
  put_u64(buf, (uint64_t)n);
  unsigned char *pos = buf + 8, *den = pos + 12 * n, *scl = pos + 16 * n, *rot = pos + 28 * n;
  for (size_t i = 0; i < n; i++) {
    const xt_gaussian *p = &g->g[i];
    for (int a = 0; a < 3; a++) {
      put_f32(pos + 12 * i + 4 * a, p->centre[a]);
      put_f32(scl + 12 * i + 4 * a, p->scale[a]);
    }
    put_f32(den + 4 * i, p->rho);
    for (int a = 0; a < 4; a++) put_f32(rot + 16 * i + 4 * a, p->quat[a]);
  }
  atomic_file af;
  if (!(rc = af_open(&af, path, msg))) {
    if ((rc = af_write(&af, buf, 8 + n * THESIS_PER_G, path, msg))) af_abort(&af);
    else rc = af_commit(&af, path, msg);
  }
  free(buf);
  return rc;
}
