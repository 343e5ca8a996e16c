/* Shard files of `xtwin dataset`: WebDataset-style tar shards (or a plain folder per shard), the
 * per-frame members (NPY arrays and a JSON of the frame's geometry), the manifest lines and the
 * dataset's own description. docs/dataset.md gives the layout; api/python/xtwin_dataset.py reads it.
 *
 * Tar: POSIX ustar, written by hand (a 512-byte header per member, data padded to 512, two zero
 * blocks at the end) rather than through libarchive, because the writer hands the frame's arrays
 * to writev(2) straight from the render buffers (no copy) and hashes exactly those bytes, and the
 * header fields that would make shards differ between runs (mtime, owner) are fixed: mtime 0,
 * uid/gid 0, no user names. Python's tarfile and GNU tar read the result (tests check both).
 *
 * Crash safety: a tar shard is written to an unnamed O_TMPFILE in the shards directory and linked
 * into place after fsync, so a killed run leaves nothing behind; where the file system has no
 * O_TMPFILE, a hidden ".shard-N.tar.partial" that the next run removes. A shard counts as done
 * only once its manifest line (shard-N.json, itself written to a temporary and renamed) exists.
 *
 * Ownership: files are only replaced or removed in a directory that holds a dataset of ours (its
 * dataset.json), never through a symbolic link, and nothing is written outside --out
 * (xt_ds_out_prepare says how).
 *
 * I/O: buffered writes (the page cache, fsync at the end of the shard) by default; with --io
 * direct, O_DIRECT writes of an aligned staging buffer (a copy of the frame's pieces) in 8 MiB
 * blocks, the last block padded and the file truncated to its size: the disk's own bandwidth
 * without the page cache, as `dd oflag=direct` measures it. */
#define _GNU_SOURCE /* O_TMPFILE, linkat's AT_SYMLINK_FOLLOW */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "xt_cli.h"
#include "xt_dataset.h"
#include "xt_sidecar.h"

#define KEY_DIGITS 12
#define TAR_BLOCK 512

static const unsigned char zeros[2 * TAR_BLOCK];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* Members                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int seg_bytes(int nchannels) { return nchannels <= 8 ? 1 : nchannels <= 16 ? 2 : nchannels <= 32 ? 4 : 8; }

int xt_ds_members(const xt_ds_spec *s, xt_ds_member_info *out, int max) {
  int n = 0;
#define ADD(e, d, nd)                                                                                               \
  do {                                                                                                              \
    if (n < max) {                                                                                                  \
      snprintf(out[n].ext, sizeof out[n].ext, "%s", e);                                                             \
      snprintf(out[n].dtype, sizeof out[n].dtype, "%s", d);                                                         \
      out[n].ndim = nd;                                                                                             \
    }                                                                                                               \
    n++;                                                                                                            \
  } while (0)
  if (s->write.lineint) ADD("lineint.npy", "<f4", 2);
  if (s->write.intensity) ADD("intensity.npy", "<u2", 2);
  if (s->write.raw) ADD("raw.npy", "<u2", 2);
  if (s->write.processed) ADD("processed.npy", "<u2", 2);
  if (s->write.labels) ADD("labels.npy", "<f4", 3);
  if (s->write.segmentation) {
    static const char *const d[] = {"|u1", "<u2", "", "<u4", "", "", "", "<u8"};
    ADD("seg.npy", d[seg_bytes(s->nchannels) - 1], 2);
  }
  ADD("json", "", 0);
#undef ADD
  return n;
}

/* NPY v1.0 header for dtype and shape, padded so the data starts at a multiple of 64. */
static size_t npy_header(char *buf, size_t cap, const char *descr, int ndim, const int *shape) {
  char dict[160];
  int dl;
  if (ndim == 3)
    dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d, %d), }", descr,
                  shape[0], shape[1], shape[2]);
  else
    dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }", descr, shape[0],
                  shape[1]);
  size_t total = (10 + (size_t)dl + 1 + 63) / 64 * 64;
  if (total > cap) return 0;
  size_t hlen = total - 10;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)dl);
  memset(buf + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
  buf[total - 1] = '\n';
  return total;
}

static size_t elem_size(const char *dtype) { return (size_t)(dtype[2] - '0'); }

/* Data bytes (NPY header included) of member i for mode m. */
static size_t member_data_bytes(const xt_ds_spec *s, const xt_ds_member_info *mi, int mode) {
  const xt_detector_mode *md = s->modes[mode];
  int shape[3] = {s->nchannels, md->rows, md->cols};
  if (!strcmp(mi->ext, "raw.npy") || !strcmp(mi->ext, "processed.npy")) xt_ds_chain_size(s, mode, &shape[1], &shape[2]);
  char h[256];
  const int *sh = mi->ndim == 3 ? shape : shape + 1;
  size_t hb = npy_header(h, sizeof h, mi->dtype, mi->ndim, sh);
  size_t n = (size_t)shape[1] * shape[2] * (mi->ndim == 3 ? (size_t)s->nchannels : 1);
  return hb + n * elem_size(mi->dtype);
}

static size_t pad512(size_t n) { return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK; }

size_t xt_ds_frame_bytes(const xt_ds_spec *s, int mode, size_t json_bytes) {
  xt_ds_member_info mi[16];
  int n = xt_ds_members(s, mi, 16);
  size_t b = 0;
  for (int i = 0; i < n; i++) {
    size_t d = mi[i].ndim ? member_data_bytes(s, &mi[i], mode) : json_bytes;
    b += (s->format == XT_DS_FMT_TAR ? TAR_BLOCK + pad512(d) : d);
  }
  return b;
}

/* ------------------------------------------------------------------------------------------ */
/* Tar headers                                                                                */
/* ------------------------------------------------------------------------------------------ */

static void octal(char *dst, size_t width, unsigned long long v) { /* width-1 digits, then NUL */
  dst[width - 1] = 0;
  for (size_t i = width - 1; i-- > 0;) {
    dst[i] = (char)('0' + (v & 7));
    v >>= 3;
  }
}

/* A ustar header for a regular file; fixed mode, owner and time so shards are reproducible. */
static void tar_header(unsigned char h[TAR_BLOCK], const char *name, unsigned long long size) {
  memset(h, 0, TAR_BLOCK);
  size_t nl = strlen(name);
  memcpy(h, name, nl < 100 ? nl : 99); /* keys and extensions keep names far below 100 */
  octal((char *)h + 100, 8, 0644);
  octal((char *)h + 108, 8, 0);
  octal((char *)h + 116, 8, 0);
  octal((char *)h + 124, 12, size);
  octal((char *)h + 136, 12, 0);
  memset(h + 148, ' ', 8);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6); /* magic "ustar\0", version "00" */
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  for (int i = 0; i < TAR_BLOCK; i++) sum += h[i];
  octal((char *)h + 148, 7, sum); /* six digits, NUL, then the space already there */
}

/* ------------------------------------------------------------------------------------------ */
/* Encoder: per-writer scratch and the frame's JSON                                            */
/* ------------------------------------------------------------------------------------------ */

struct xt_ds_encoder {
  const xt_ds_scene *sc;
  uint16_t *u16;
  unsigned char *seg;
  char *json;
  size_t px;
};

void xt_ds_encoder_free(xt_ds_encoder *e) {
  if (!e) return;
  free(e->u16);
  free(e->seg);
  free(e->json);
  free(e);
}

int xt_ds_encoder_create(const xt_ds_scene *sc, xt_ds_encoder **out, xt_msg *msg) {
  const xt_ds_spec *s = sc->spec;
  xt_ds_encoder *e = calloc(1, sizeof *e);
  if (!e) return xt_fail(msg, XT_ENOMEM, "out of memory");
  e->sc = sc;
  for (int i = 0; i < s->nmodes; i++) {
    size_t px = (size_t)s->modes[i]->rows * s->modes[i]->cols;
    if (px > e->px) e->px = px;
  }
  e->u16 = malloc(e->px * sizeof *e->u16);
  e->seg = malloc(e->px * 8);
  if (!e->u16 || !e->seg) {
    xt_ds_encoder_free(e);
    return xt_fail(msg, XT_ENOMEM, "out of memory for the encoder's scratch");
  }
  *out = e;
  return 0;
}

typedef struct jb {
  int bad;
} jb;
static void put(jb *b, json_t *o, const char *k, json_t *v) {
  if (!o || json_object_set_new(o, k, v) != 0) b->bad = 1;
}
static void push(jb *b, json_t *a, json_t *v) {
  if (!a || json_array_append_new(a, v) != 0) b->bad = 1;
}
static json_t *vec(jb *b, const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) push(b, a, json_real(v[i]));
  return a;
}
static json_t *v3(jb *b, xt_vec3 p) {
  double d[3] = {p.x, p.y, p.z};
  return vec(b, d, 3);
}
static json_t *aff34(jb *b, const xt_affine *m) {
  json_t *a = json_array();
  for (int i = 0; i < 3; i++) {
    double r[4] = {m->m[i][0], m->m[i][1], m->m[i][2], m->t[i]};
    push(b, a, vec(b, r, 4));
  }
  return a;
}

/* Every parameter that shaped the frame's raw and processed images, by the chain's table (as the
 * render sidecar's "chain" object), and what reproduces the frame alone. */
static json_t *chain_json(const xt_ds_spec *s, const xt_ds_frame *f, jb *b) {
  json_t *ch = json_object(), *prm = json_object(), *units = json_object(), *fl = json_object();
  int rows, cols;
  put(b, ch, "frame", json_integer(f->index));
  put(b, ch, "frame_note", json_string("the chain's frame number (the dataset's frame index): with parameters.seed it "
                                       "keys the frame's noise; each frame is a first exposure (lag and temporal "
                                       "filter start from zero)"));
  for (int i = 0; i < xt_chain_param_count(); i++) {
    const xt_chain_param_info *in = xt_chain_param_at(i);
    const double v = xt_chain_param_get(&f->chain, in);
    put(b, prm, in->name, in->type == XT_PARAM_REAL ? json_real(v) : json_integer((json_int_t)v));
    if (*in->unit) put(b, units, in->name, json_string(in->unit));
  }
  put(b, ch, "parameters", prm);
  put(b, ch, "units", units);
  put(b, ch, "noise", json_boolean(s->chain.noise));
  if (s->chain.dose_set) put(b, ch, "dose_ngy", json_real(f->dose_ngy));
  xt_ds_chain_size(s, f->mode, &rows, &cols);
  if (s->write.raw) put(b, fl, "raw", json_string("raw.npy: uint16 ADC codes (\"for processing\"), 0 .. 2^adc_bits - 1"));
  if (s->write.processed)
    put(b, fl, "processed", json_string("processed.npy: uint16, 12 bits stored (\"for presentation\"), attenuation dark"));
  put(b, fl, "rows", json_integer(rows));
  put(b, fl, "cols", json_integer(cols));
  put(b, ch, "files", fl);
  put(b, ch, "model", json_string("docs/imaging.md"));
  return ch;
}

static json_t *frame_json(const xt_ds_scene *sc, const xt_ds_frame *f, jb *b) {
  const xt_ds_spec *s = sc->spec;
  const xt_geometry *g = &f->geom;
  json_t *root = json_object();
  char key[32], seed[24];
  snprintf(key, sizeof key, "%0*lld", KEY_DIGITS, f->index);
  snprintf(seed, sizeof seed, "%016llx", (unsigned long long)f->seed);
  put(b, root, "key", json_string(key));
  put(b, root, "frame", json_integer(f->index));
  put(b, root, "shard", json_integer(f->index / s->shard_frames));
  put(b, root, "seed", json_string(seed));
  put(b, root, "spec_sha256", json_string(s->sha256));
  if (s->poses.sampler == XT_DS_POSES_VIEWS) put(b, root, "view", json_string(s->poses.views[f->view].name));
  if (s->poses.sampler == XT_DS_POSES_ARC) {
    put(b, root, "run", json_integer(f->run));
    put(b, root, "view_in_run", json_integer(f->view));
  }

  json_t *det = json_object();
  put(b, det, "mode", json_string(g->mode.name));
  put(b, det, "rows", json_integer(g->mode.rows));
  put(b, det, "cols", json_integer(g->mode.cols));
  put(b, det, "pitch_u_mm", json_real(g->mode.pitch_u_mm));
  put(b, det, "pitch_v_mm", json_real(g->mode.pitch_v_mm));
  put(b, root, "detector", det);

  json_t *pose = json_object();
  put(b, pose, "primary_deg", json_real(g->pose.primary_deg));
  put(b, pose, "secondary_deg", json_real(g->pose.secondary_deg));
  put(b, pose, "detector_rot_deg", json_real(g->pose.detector_rot_deg));
  put(b, pose, "sod_mm", json_real(g->pose.sod_mm));
  put(b, pose, "sid_mm", json_real(g->pose.sid_mm));
  put(b, pose, "table_mm", v3(b, g->pose.table_mm));
  put(b, root, "pose", pose);

  json_t *geo = json_object();
  json_t *P = json_array();
  for (int i = 0; i < 3; i++) push(b, P, vec(b, g->P[i], 4));
  put(b, geo, "P", P);
  double Pe[3][4]; /* DeepDRR's and DiffDRR's pixel-edge convention (docs/geometry.md) */
  xt_P_to_pixel_edge(g->P, Pe);
  json_t *PE = json_array();
  for (int i = 0; i < 3; i++) push(b, PE, vec(b, Pe[i], 4));
  put(b, geo, "P_pixel_edge", PE);
  put(b, geo, "source", v3(b, g->source));
  put(b, geo, "det_center", v3(b, g->det_center));
  put(b, geo, "det_origin", v3(b, g->det_origin));
  put(b, geo, "u", v3(b, g->u));
  put(b, geo, "v", v3(b, g->v));
  put(b, geo, "d", v3(b, g->d));
  double pp[2] = {g->c0, g->r0};
  put(b, geo, "principal_point", vec(b, pp, 2));
  put(b, root, "geometry", geo);

  xt_affine p2w = xt_geom_patient_to_world(&g->pose);
  json_t *models = json_array();
  for (int m = 0; m < s->nmodels; m++) {
    json_t *mo = json_object();
    xt_affine m2w = xt_aff_compose(&p2w, &f->model_to_patient[m]);
    put(b, mo, "name", json_string(s->models[m].name));
    put(b, mo, "in_image", json_boolean(s->models[m].in_image));
    put(b, mo, "translate_mm", vec(b, f->translate_mm[m], 3));
    put(b, mo, "rotate_deg", vec(b, f->rotate_deg[m], 3));
    put(b, mo, "model_to_world", aff34(b, &m2w));
    push(b, models, mo);
  }
  put(b, root, "models", models);

  json_t *im = json_object();
  put(b, im, "image", json_string("ideal monoenergetic line integrals L = integral of mu dl (no spectrum, no detector)"));
  const xt_volume *lv = NULL;
  for (int m = 0; m < s->nmodels && !lv; m++)
    if (sc->models[m] && sc->models[m]->volume && sc->models[m]->volume->materials) lv = sc->models[m]->volume;
  put(b, im, "energy_kev", json_real(lv ? lv->materials->energy_kev : XT_DEFAULT_ENERGY_KEV));
  if (s->write.intensity) put(b, im, "intensity", json_string("round(65535 * exp(-L)), uint16"));
  put(b, im, "chain", s->chain.present ? chain_json(s, f, b) : json_null());
  put(b, root, "imaging", im);

  if (s->write.labels || s->write.segmentation) {
    json_t *lab = json_object(), *names = json_array();
    for (int k = 0; k < s->nchannels; k++) push(b, names, json_string(s->channels[k].name));
    put(b, lab, "channels", names);
    put(b, lab, "quantity", json_string(s->quantity == XT_DS_QTY_PATH_LENGTH ? "path_length_mm" : "line_integral"));
    if (s->write.segmentation) put(b, lab, "segmentation", json_string("bit k of seg.npy: channel k's value > 0"));
    put(b, root, "labels", lab);
  }

  if (s->write.landmarks) {
    json_t *lms = json_array();
    for (int i = 0; i < s->nlandmarks; i++) {
      const xt_ds_landmark *l = &s->landmarks[i];
      xt_vec3 pm = xt_v3(l->pos[0], l->pos[1], l->pos[2]);
      xt_vec3 pw = xt_aff_apply(&p2w, xt_aff_apply(&f->model_to_patient[l->model], pm));
      double col = 0, row = 0;
      int front = xt_geom_project(g, pw, &col, &row);
      double depth = xt_v3_dot(g->d, xt_v3_sub(pw, g->source));
      int vis = front && col >= -0.5 && col <= g->mode.cols - 0.5 && row >= -0.5 && row <= g->mode.rows - 0.5;
      json_t *lo = json_object();
      put(b, lo, "name", json_string(l->name));
      put(b, lo, "world_mm", v3(b, pw));
      double uv[2] = {col, row};
      put(b, lo, "uv", front ? vec(b, uv, 2) : json_null());
      put(b, lo, "depth_mm", json_real(depth));
      put(b, lo, "visible", json_boolean(vis));
      push(b, lms, lo);
    }
    put(b, root, "landmarks", lms);
  }
  return root;
}

int xt_ds_frame_json(xt_ds_encoder *e, const xt_ds_frame *f, const char **text, size_t *len, xt_msg *msg) {
  jb b = {0};
  json_t *root = frame_json(e->sc, f, &b);
  free(e->json);
  e->json = NULL;
  if (root && !b.bad) e->json = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!e->json) return xt_fail(msg, XT_EINTERNAL, "frame %lld: cannot encode its JSON (out of memory or NaN)", f->index);
  *text = e->json;
  *len = strlen(e->json);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* File helpers                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Everything below works on directory descriptors: --out is opened once and shards/ is opened
 * within it with O_NOFOLLOW, and every file inside is made with openat(O_CREAT | O_EXCL), renameat,
 * linkat or unlinkat, none of which follows a symbolic link in the last component. So nothing is
 * ever written through a link, even one that appears while the run is going (a check by name
 * before an open would leave that window open). */

static int fsync_fd(int dfd) { return fsync(dfd) == 0 || errno == EINVAL ? 0 : -1; }

/* A name of our own in dfd, never one that exists: "PREFIX" and 12 random hex digits, created
 * with O_EXCL (tasks of a Slurm array or an Indexed Job, on any host, make temporaries of the same
 * prefix at the same moment). The descriptor, or -1 with errno. */
static int create_unique(int dfd, const char *prefix, char *name, size_t cap, int flags) {
  for (int tries = 0; tries < 100; tries++) {
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      const unsigned long long t = (unsigned long long)getpid() * 0x9E3779B97F4A7C15ull ^
                                   (unsigned long long)(now_s() * 1e9) ^ (unsigned long long)tries << 48;
      for (int i = 0; i < 6; i++) r[i] = (unsigned char)(t >> (8 * i));
    }
    snprintf(name, cap, "%s%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3], r[4], r[5]);
    int fd = openat(dfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

/* Writes the whole buffer to dfd/name (dir its path, for messages) through a temporary next to
 * it, fsync and renameat. */
static int write_atomic(int dfd, const char *dir, const char *name, const void *data, size_t n, xt_msg *msg) {
  char tmp[300], prefix[200];
  snprintf(prefix, sizeof prefix, ".%s.", name);
  int fd = create_unique(dfd, prefix, tmp, sizeof tmp, O_WRONLY);
  if (fd < 0) return xt_fail(msg, XT_EIO, "cannot create a file in \"%s\": %s", dir, strerror(errno));
  const char *p = data;
  size_t left = n;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      unlinkat(dfd, tmp, 0);
      return xt_fail(msg, XT_EIO, "cannot write \"%s/%s\": %s", dir, name, strerror(e));
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    int e = errno;
    close(fd);
    unlinkat(dfd, tmp, 0);
    return xt_fail(msg, XT_EIO, "cannot write \"%s/%s\": %s", dir, name, strerror(e));
  }
  if (close(fd) != 0 || renameat(dfd, tmp, dfd, name) != 0) {
    int e = errno;
    unlinkat(dfd, tmp, 0);
    return xt_fail(msg, XT_EIO, "cannot write \"%s/%s\": %s", dir, name, strerror(e));
  }
  if (fsync_fd(dfd) != 0) return xt_fail(msg, XT_EIO, "cannot sync \"%s\": %s", dir, strerror(errno));
  return 0;
}

/* Opens dfd/name for reading, never through a link (ELOOP) and never blocking on a FIFO. */
static int open_read(int dfd, const char *name) {
  return openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

/* Reads a whole (small) file dfd/name; NULL with errno set on failure. */
static char *read_small(int dfd, const char *name, size_t *n) {
  int fd = open_read(dfd, name);
  if (fd < 0) return NULL;
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      char *nb = cap > ((size_t)64 << 20) ? NULL : realloc(buf, cap);
      if (!nb) {
        int e = cap > ((size_t)64 << 20) ? EFBIG : ENOMEM;
        free(buf);
        close(fd);
        errno = e;
        return NULL;
      }
      buf = nb;
    }
    ssize_t r = read(fd, buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      errno = e;
      return NULL;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = 0;
  if (n) *n = len;
  return buf;
}

/* Removes dfd/name: a file, or a folder of files (a folder shard). A link is removed, never
 * followed. */
static void rm_rf(int dfd, const char *name) {
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    unlinkat(dfd, name, 0);
    return;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) unlinkat(fd, de->d_name, 0);
  closedir(d);
  unlinkat(dfd, name, AT_REMOVEDIR);
}

/* mkdir -p of --out itself: the path the user named, links in it followed as the user meant. */
static int mkdir_p(const char *path, xt_msg *msg) {
  char buf[4400];
  snprintf(buf, sizeof buf, "%s", path);
  size_t n = strlen(buf);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    char save = buf[i];
    buf[i] = 0;
    struct stat st;
    if (mkdir(buf, 0777) != 0) {
      int e = errno;
      if (!(e == EEXIST && stat(buf, &st) == 0 && S_ISDIR(st.st_mode)))
        return xt_fail(msg, XT_EIO, "cannot create directory \"%s\": %s", buf, strerror(e == EEXIST ? ENOTDIR : e));
    }
    buf[i] = save;
  }
  return 0;
}

static void hex(const unsigned char *md, int n, char *out) {
  for (int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static int sha256_file(int dfd, const char *name, char out[65]) {
  int fd = open_read(dfd, name);
  if (fd < 0) return -1;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  enum { CH = 1 << 20 };
  unsigned char *buf = malloc(CH);
  int rc = -1;
  if (c && buf && EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
    for (;;) {
      ssize_t r = read(fd, buf, CH);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) goto done;
      if (r == 0) break;
      EVP_DigestUpdate(c, buf, (size_t)r);
    }
    unsigned char md[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(c, md, &len);
    hex(md, 32, out);
    rc = 0;
  }
done:
  free(buf);
  EVP_MD_CTX_free(c);
  close(fd);
  return rc;
}

/* Every file a folder shard's SHA256SUMS names (plain names in the folder dfd) has that digest. */
static int folder_files_match(int dfd) {
  char *sums = read_small(dfd, "SHA256SUMS", NULL);
  if (!sums) return 0;
  int ok = 1;
  for (char *line = sums, *next; ok && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    else next = line + strlen(line);
    if (strlen(line) < 67 || line[64] != ' ' || line[65] != ' ' || strchr(line + 66, '/')) {
      ok = 0;
      break;
    }
    char h[65];
    ok = sha256_file(dfd, line + 66, h) == 0 && strncmp(h, line, 64) == 0;
  }
  free(sums);
  return ok;
}

/* ------------------------------------------------------------------------------------------ */
/* The output directory                                                                       */
/* ------------------------------------------------------------------------------------------ */

static char *dataset_json(const xt_ds_spec *s) {
  jb b = {0};
  json_t *r = json_object();
  put(&b, r, "format", json_string("xtwin-dataset"));
  put(&b, r, "format_version", json_integer(1));
  put(&b, r, "xtwin_version", json_string(XT_VERSION));
  put(&b, r, "spec_sha256", json_string(s->sha256));
  put(&b, r, "backend", json_string(xt_backend_name(s->backend)));
  put(&b, r, "frames", json_integer(s->frames));
  put(&b, r, "shard_frames", json_integer(s->shard_frames));
  put(&b, r, "shards", json_integer(xt_ds_spec_shards(s)));
  put(&b, r, "shard_format", json_string(s->format == XT_DS_FMT_TAR ? "tar" : "folder"));
  put(&b, r, "key_digits", json_integer(KEY_DIGITS));
  xt_ds_member_info mi[16];
  int n = xt_ds_members(s, mi, 16);
  json_t *mem = json_array();
  for (int i = 0; i < n; i++) {
    json_t *m = json_object();
    put(&b, m, "ext", json_string(mi[i].ext));
    if (mi[i].ndim) {
      put(&b, m, "dtype", json_string(mi[i].dtype));
      const int binned = s->chain.present && s->chain.base.binning == 2 &&
                         (!strcmp(mi[i].ext, "raw.npy") || !strcmp(mi[i].ext, "processed.npy"));
      put(&b, m, "shape",
          json_string(mi[i].ndim == 3 ? "(channels, rows, cols)" : binned ? "(rows / 2, cols / 2)" : "(rows, cols)"));
    }
    push(&b, mem, m);
  }
  put(&b, r, "members", mem);
  json_t *modes = json_array();
  for (int i = 0; i < s->nmodes; i++) push(&b, modes, json_string(s->modes[i]->name));
  put(&b, r, "modes", modes);
  json_t *ch = json_array();
  for (int k = 0; k < s->nchannels; k++) push(&b, ch, json_string(s->channels[k].name));
  put(&b, r, "channels", ch);
  put(&b, r, "quantity", json_string(s->quantity == XT_DS_QTY_PATH_LENGTH ? "path_length_mm" : "line_integral"));
  json_t *lm = json_array();
  for (int i = 0; i < s->nlandmarks; i++) push(&b, lm, json_string(s->landmarks[i].name));
  put(&b, r, "landmarks", lm);
  char *text = b.bad ? NULL : json_dumps(r, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(r);
  if (!text) return NULL;
  size_t len = strlen(text);
  char *t2 = realloc(text, len + 2);
  if (!t2) {
    free(text);
    return NULL;
  }
  t2[len] = '\n';
  t2[len + 1] = 0;
  return t2;
}

/* Whether dfd/name holds exactly text: 1 the same, 0 not, -1 absent, -2 unreadable (errno). */
static int same_text(int dfd, const char *name, const char *text) {
  size_t n = 0;
  char *old = read_small(dfd, name, &n);
  if (!old) return errno == ENOENT ? -1 : -2;
  int same = n == strlen(text) && memcmp(old, text, n) == 0;
  free(old);
  return same;
}

/* Writes OUT/name with text, or checks that the one there is the same. */
static int write_or_check(const xt_ds_out *o, const char *name, const char *text, const char *what, xt_msg *msg) {
  int same = same_text(o->dirfd, name, text);
  if (same == 1) return 0;
  if (same == 0)
    return xt_fail(msg, XT_EEXISTS,
                   "--out: \"%s\" holds a dataset of another %s (%s differs); use another directory or the same spec",
                   o->dir, what, name);
  if (errno != ENOENT) return xt_fail(msg, XT_EIO, "--out: cannot read \"%s/%s\": %s", o->dir, name, strerror(errno));
  xt_msg m;
  int rc = write_atomic(o->dirfd, o->dir, name, text, strlen(text), &m);
  if (rc) return xt_fail(msg, rc, "--out: %s", m.text);
  return 0;
}

int xt_ds_out_paths(const char *dir, xt_ds_out *o, xt_msg *msg) {
  memset(o, 0, sizeof *o);
  o->dirfd = o->shardsfd = -1;
  if (strlen(dir) > 4000) return xt_fail(msg, XT_EINVAL, "--out: path longer than 4000 characters");
  snprintf(o->dir, sizeof o->dir, "%s", dir);
  snprintf(o->shards, sizeof o->shards, "%s/shards", dir);
  return 0;
}

void xt_ds_out_close(xt_ds_out *o) {
  if (o->shardsfd >= 0) close(o->shardsfd);
  if (o->dirfd >= 0) close(o->dirfd);
  o->dirfd = o->shardsfd = -1;
}

static int refuse_link(const char *dir, const char *name, xt_msg *msg) {
  return xt_fail(msg, XT_EEXISTS, "--out: \"%s/%s\" is a symbolic link; xtwin dataset writes nothing through one and "
                                  "replaces none", dir, name);
}

/* OUT/shards, never through a link. must: create it first where it is missing. */
static int open_shards(xt_ds_out *o, int must, xt_msg *msg) {
  if (must && mkdirat(o->dirfd, "shards", 0777) != 0 && errno != EEXIST)
    return xt_fail(msg, XT_EIO, "--out: cannot create directory \"%s\": %s", o->shards, strerror(errno));
  o->shardsfd = openat(o->dirfd, "shards", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (o->shardsfd >= 0 || (!must && errno == ENOENT)) return 0;
  int e = errno;
  struct stat st;
  if (fstatat(o->dirfd, "shards", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return refuse_link(o->dir, "shards", msg);
  return xt_fail(msg, XT_EIO, "--out: cannot open \"%s\": %s", o->shards, strerror(e));
}

int xt_ds_out_open(const char *dir, xt_ds_out *o, xt_msg *msg) {
  int rc = xt_ds_out_paths(dir, o, msg);
  if (rc) return rc;
  o->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->dirfd >= 0) open_shards(o, 0, msg);
  return 0;
}

/* The names a run writes, replaces or removes: in --out, and in shards/. */
static int is_manifest(const char *n) {
  size_t l = strlen(n);
  return strncmp(n, "manifest-", 9) == 0 && l > 15 && strcmp(n + l - 6, ".jsonl") == 0;
}
static int is_out_name(const char *n) {
  return !strcmp(n, "spec.json") || !strcmp(n, "dataset.json") || !strcmp(n, "shards") || is_manifest(n);
}
static int is_shard_name(const char *n) { return !strncmp(n, "shard-", 6) || !strncmp(n, ".shard-", 7); }

/* The entries of dfd (path dir) that a run would write, replace or remove (ours()): a link among
 * them is refused; the first that in_way() names is kept in first (where no dataset is, they
 * are a user's). */
static int scan(int dfd, const char *dir, int (*ours)(const char *), int (*in_way)(const char *), char *first,
                size_t cap, xt_msg *msg) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* a description of its own for readdir */
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    int e = errno;
    if (fd >= 0) close(fd);
    return xt_fail(msg, XT_EIO, "--out: cannot read \"%s\": %s", dir, strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    struct stat st;
    if (!ours(de->d_name) || fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(st.st_mode)) rc = refuse_link(dir, de->d_name, msg);
    else if (!*first && in_way(de->d_name)) snprintf(first, cap, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return rc;
}

double xt_ds_hash_seconds(size_t bytes) {
  enum { CH = 4 << 20 };
  unsigned char *buf = calloc(1, CH), md[32];
  unsigned len = 0;
  if (!buf) return 0;
  double t0 = now_s();
  for (size_t done = 0; done < bytes; done += CH) EVP_Digest(buf, bytes - done < CH ? bytes - done : CH, md, &len, EVP_sha256(), NULL);
  free(buf);
  return now_s() - t0;
}

/* Ownership: a directory holds a dataset of ours once its dataset.json is there, and a run writes
 * dataset.json before anything in shards/. So where there is none, every file at a name of ours
 * is a user's and the run is refused before it writes anything; tasks that start together into one
 * new directory see each other's shards only after one of them wrote dataset.json, which is why a
 * name in the way is looked at again once the scan is over. */
int xt_ds_out_prepare(const xt_ds_spec *s, const char *dir, xt_ds_out *o, xt_msg *msg) {
  int rc = xt_ds_out_paths(dir, o, msg);
  if (rc) return rc;
  char *spec_text = NULL, *ds = NULL, first[4400] = "";
  xt_msg m;
  if ((rc = mkdir_p(o->dir, &m))) return xt_fail(msg, rc, "--out: %s", m.text);
  o->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->dirfd < 0) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot open \"%s\": %s", o->dir, strerror(errno));
    goto fail;
  }
  spec_text = malloc(strlen(s->canonical) + 2);
  ds = dataset_json(s);
  if (!spec_text || !ds) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto fail;
  }
  sprintf(spec_text, "%s\n", s->canonical);
  if ((rc = scan(o->dirfd, o->dir, is_out_name, is_manifest, first, sizeof first, msg)) ||
      (rc = open_shards(o, 0, msg)) ||
      (o->shardsfd >= 0 && (rc = scan(o->shardsfd, o->shards, is_shard_name, is_shard_name, first, sizeof first, msg))))
    goto fail;
  int have = same_text(o->dirfd, "dataset.json", ds);
  if (have == -1) {
    if (!*first && same_text(o->dirfd, "spec.json", spec_text) == 0) snprintf(first, sizeof first, "%s/spec.json", o->dir);
    if (*first && same_text(o->dirfd, "dataset.json", ds) != 1) {
      rc = xt_fail(msg, XT_EEXISTS,
                   "--out: \"%s\" is in the way: \"%s\" holds no dataset (no dataset.json) and xtwin dataset replaces "
                   "no file it did not write",
                   first, o->dir);
      goto fail;
    }
  } else if (have == 0) {
    const int spec_differs = same_text(o->dirfd, "spec.json", spec_text) == 0;
    rc = xt_fail(msg, XT_EEXISTS,
                 "--out: \"%s\" holds a dataset of another %s (%s differs); use another directory or the same spec",
                 o->dir, spec_differs ? "spec" : "spec or backend", spec_differs ? "spec.json" : "dataset.json");
    goto fail;
  } else if (have == -2) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot read \"%s/dataset.json\": %s", o->dir, strerror(errno));
    goto fail;
  }
  if ((rc = write_or_check(o, "spec.json", spec_text, "spec", msg)) ||
      (rc = write_or_check(o, "dataset.json", ds, "spec or backend", msg)) ||
      (o->shardsfd < 0 && (rc = open_shards(o, 1, msg))))
    goto fail;
  /* Fail now, not after the first shard's render, where shards/ cannot be written. */
  int fd = -1;
#ifdef O_TMPFILE
  fd = openat(o->shardsfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
#endif
  if (fd < 0) {
    char probe[64];
    fd = create_unique(o->shardsfd, ".xtwin-write-probe-", probe, sizeof probe, O_WRONLY);
    if (fd >= 0) unlinkat(o->shardsfd, probe, 0);
  }
  if (fd < 0) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot write in \"%s\": %s", o->shards, strerror(errno));
    goto fail;
  }
  close(fd);
  free(spec_text);
  free(ds);
  return 0;
fail:
  free(spec_text);
  free(ds);
  xt_ds_out_close(o);
  return rc;
}

/* Shard i's data (file or folder) and manifest line, as names in shards/. */
static void shard_names(const xt_ds_spec *s, long long shard, char *data, char *json, size_t cap) {
  snprintf(data, cap, "shard-%06lld%s", shard, s->format == XT_DS_FMT_TAR ? ".tar" : "");
  snprintf(json, cap, "shard-%06lld.json", shard);
}

/* What a killed run may have left of a shard: its temporaries (every hidden ".shard-N." name: only
 * the task that owns shard N writes them), and a shard without its line. */
static void remove_leftovers(const xt_ds_spec *s, const xt_ds_out *o, long long shard) {
  char prefix[64];
  int pl = snprintf(prefix, sizeof prefix, ".shard-%06lld.", shard);
  int fd = openat(o->shardsfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)))
      if (strncmp(de->d_name, prefix, (size_t)pl) == 0) rm_rf(fd, de->d_name);
    closedir(d);
  } else if (fd >= 0) {
    close(fd);
  }
  char data[64], json[64];
  shard_names(s, shard, data, json, sizeof data);
  if (s->format == XT_DS_FMT_TAR) unlinkat(o->shardsfd, data, 0);
  else rm_rf(o->shardsfd, data);
}

int xt_ds_shard_done(const xt_ds_spec *s, const xt_ds_out *o, long long shard, int verify, int cleanup) {
  if (o->shardsfd < 0) return 0;
  char data[64], jname[64];
  shard_names(s, shard, data, jname, sizeof data);
  size_t n = 0;
  char *text = read_small(o->shardsfd, jname, &n);
  int done = 0;
  if (text) {
    json_t *j = json_loads(text, 0, NULL);
    json_t *sha = json_object_get(j, "sha256"), *bytes = json_object_get(j, "bytes"),
           *spec = json_object_get(j, "spec_sha256");
    /* The tar itself, or the folder's SHA256SUMS: regular files, reached through no link. */
    const int folder = s->format == XT_DS_FMT_FOLDER;
    int dfd = folder ? openat(o->shardsfd, data, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    const int at = folder ? dfd : o->shardsfd;
    const char *name = folder ? "SHA256SUMS" : data;
    struct stat st;
    if (json_is_string(sha) && json_is_integer(bytes) && json_is_string(spec) &&
        strcmp(json_string_value(spec), s->sha256) == 0 && at >= 0 && fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode) && (folder || (long long)st.st_size == json_integer_value(bytes))) {
      done = 1;
      if (verify) {
        char h[65];
        done = sha256_file(at, name, h) == 0 && strcmp(h, json_string_value(sha)) == 0;
        if (done && folder) done = folder_files_match(dfd);
      }
    }
    if (dfd >= 0) close(dfd);
    json_decref(j);
    free(text);
  }
  if (!done && cleanup) {
    unlinkat(o->shardsfd, jname, 0);
    remove_leftovers(s, o, shard);
  }
  return done;
}

int xt_ds_write_task_manifest(const xt_ds_out *o, const long long *shards, long long n, int task, int ntasks,
                              xt_msg *msg) {
  size_t cap = 4096, len = 0;
  char *all = malloc(cap);
  if (!all) return xt_fail(msg, XT_ENOMEM, "out of memory");
  for (long long i = 0; i < n; i++) {
    char p[64];
    snprintf(p, sizeof p, "shard-%06lld.json", shards[i]);
    size_t k = 0;
    char *line = read_small(o->shardsfd, p, &k);
    if (!line) {
      int e = errno;
      free(all);
      return xt_fail(msg, XT_EIO, "cannot read \"%s/%s\": %s", o->shards, p, strerror(e));
    }
    if (len + k + 2 > cap) {
      while (len + k + 2 > cap) cap *= 2;
      char *na = realloc(all, cap);
      if (!na) {
        free(line);
        free(all);
        return xt_fail(msg, XT_ENOMEM, "out of memory");
      }
      all = na;
    }
    memcpy(all + len, line, k);
    len += k;
    free(line);
  }
  char name[64];
  snprintf(name, sizeof name, "manifest-%05d-of-%05d.jsonl", task, ntasks);
  int rc = write_atomic(o->dirfd, o->dir, name, all, len, msg);
  free(all);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Shard writers                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define STAGE_BYTES ((size_t)8 << 20)
#define DIRECT_ALIGN 4096

struct xt_ds_shard_writer {
  const xt_ds_spec *s;
  const xt_ds_out *o;
  long long shard, frames;
  int fd;
  int direct;          /* O_DIRECT through stage */
  unsigned char *stage;
  size_t staged;
  int anonymous;       /* O_TMPFILE: no name until linked */
  int tmpfd;           /* folder: the temporary folder */
  char tmp_name[64], data_name[64], json_name[64]; /* in shards/: the named temporary, the shard, its line */
  char tmp[4400], data[4400];                      /* their paths, for messages */
  EVP_MD_CTX *md;      /* tar: the whole file */
  unsigned long long bytes;
  /* folder: one line per member file for SHA256SUMS */
  char *sums;
  size_t sums_len, sums_cap;
};

static void writer_free(xt_ds_shard_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  if (w->tmpfd >= 0) close(w->tmpfd);
  free(w->stage);
  EVP_MD_CTX_free(w->md);
  free(w->sums);
  free(w);
}

void xt_ds_shard_abort(xt_ds_shard_writer *w) {
  if (!w) return;
  if (w->s->format == XT_DS_FMT_TAR) {
    if (!w->anonymous) unlinkat(w->o->shardsfd, w->tmp_name, 0); /* an O_TMPFILE vanishes with its descriptor */
  } else {
    rm_rf(w->o->shardsfd, w->tmp_name);
  }
  writer_free(w);
}

int xt_ds_shard_open(const xt_ds_spec *s, const xt_ds_out *o, long long shard, xt_ds_shard_writer **out, xt_msg *msg) {
  xt_ds_shard_writer *w = calloc(1, sizeof *w);
  *out = NULL;
  if (!w) return xt_fail(msg, XT_ENOMEM, "out of memory");
  w->s = s;
  w->o = o;
  w->fd = w->tmpfd = -1;
  w->shard = shard;
  shard_names(s, shard, w->data_name, w->json_name, sizeof w->data_name);
  snprintf(w->data, sizeof w->data, "%s/%s", o->shards, w->data_name);
  if (s->format == XT_DS_FMT_TAR) {
    w->md = EVP_MD_CTX_new();
    if (!w->md || !EVP_DigestInit_ex(w->md, EVP_sha256(), NULL)) {
      writer_free(w);
      return xt_fail(msg, XT_ENOMEM, "out of memory (sha256)");
    }
    int flags = O_WRONLY | O_CLOEXEC;
    if (o->direct) {
      w->stage = aligned_alloc(DIRECT_ALIGN, STAGE_BYTES);
      if (!w->stage) {
        writer_free(w);
        return xt_fail(msg, XT_ENOMEM, "out of memory (staging buffer)");
      }
    }
    /* O_DIRECT where asked and the file system takes it (tmpfs does not: buffered there). */
    for (int attempt = o->direct ? 0 : 1; attempt < 2 && w->fd < 0; attempt++) {
      int f = flags | (attempt == 0 ? O_DIRECT : 0);
#ifdef O_TMPFILE
      w->fd = openat(o->shardsfd, ".", O_TMPFILE | f, 0666);
      w->anonymous = w->fd >= 0;
#endif
      if (w->fd < 0 && (attempt == 1 || errno != EINVAL)) {
        /* The name is this shard's own (only its task writes it): a killed run's is replaced. */
        snprintf(w->tmp_name, sizeof w->tmp_name, ".shard-%06lld.tar.partial", shard);
        snprintf(w->tmp, sizeof w->tmp, "%s/%s", o->shards, w->tmp_name);
        unlinkat(o->shardsfd, w->tmp_name, 0);
        w->fd = openat(o->shardsfd, w->tmp_name, O_CREAT | O_EXCL | O_NOFOLLOW | f, 0666);
      }
      w->direct = w->fd >= 0 && attempt == 0;
    }
    if (w->fd < 0) {
      int e = errno;
      writer_free(w);
      return xt_fail(msg, XT_EIO, "shard %lld: cannot create a file in \"%s\": %s", shard, o->shards, strerror(e));
    }
  } else {
    snprintf(w->tmp_name, sizeof w->tmp_name, ".shard-%06lld.partial", shard);
    snprintf(w->tmp, sizeof w->tmp, "%s/%s", o->shards, w->tmp_name);
    rm_rf(o->shardsfd, w->tmp_name);
    if (mkdirat(o->shardsfd, w->tmp_name, 0777) != 0 ||
        (w->tmpfd = openat(o->shardsfd, w->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
      int e = errno;
      writer_free(w);
      return xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", shard, w->tmp, strerror(e));
    }
  }
  *out = w;
  return 0;
}

/* Writes iov[0..n) fully (write(2) may stop short). */
static int write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t r = writev(fd, iov, n > IOV_MAX ? IOV_MAX : n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = EIO;
      return -1;
    }
    size_t left = (size_t)r;
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

/* One member as pieces: the NPY header (or none) and the data pieces. */
typedef struct piece {
  const void *p;
  size_t n;
} piece;

enum { MAX_PIECES = XT_DS_MAX_CHANNELS + 4 };

typedef struct member {
  const char *ext;
  char npy[256];
  size_t npy_len;
  piece data[MAX_PIECES];
  int npieces;
  size_t bytes; /* npy header + data */
} member;

/* A member of one piece (more may follow); shape3 is (channels, rows, cols), 2-D members use the
 * last two. */
static void add_member(member *m, const char *ext, const char *dtype, int ndim, const int shape3[3], const void *p,
                       size_t n) {
  m->ext = ext;
  m->npy_len = npy_header(m->npy, sizeof m->npy, dtype, ndim, ndim == 3 ? shape3 : shape3 + 1);
  m->data[0] = (piece){p, n};
  m->npieces = 1;
}

/* Folder format: member file, its sha256 line for SHA256SUMS. */
static int write_member_file(xt_ds_shard_writer *w, const char *name, const member *m, xt_ds_wstats *st,
                             xt_ds_disk_fn disk, void *dctx, xt_msg *msg) {
  char path[4600];
  if (snprintf(path, sizeof path, "%s/%s", w->tmp, name) >= (int)sizeof path)
    return xt_fail(msg, XT_EINVAL, "shard %lld: path too long", w->shard);
  double t0 = now_s();
  unsigned char md[32];
  unsigned mdl = 0;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
    EVP_MD_CTX_free(c);
    return xt_fail(msg, XT_ENOMEM, "out of memory (sha256)");
  }
  struct iovec iov[MAX_PIECES + 1];
  int n = 0;
  if (m->npy_len) {
    iov[n].iov_base = (void *)m->npy;
    iov[n++].iov_len = m->npy_len;
  }
  for (int i = 0; i < m->npieces; i++) {
    iov[n].iov_base = (void *)m->data[i].p;
    iov[n++].iov_len = m->data[i].n;
  }
  for (int i = 0; i < n; i++) EVP_DigestUpdate(c, iov[i].iov_base, iov[i].iov_len);
  EVP_DigestFinal_ex(c, md, &mdl);
  EVP_MD_CTX_free(c);
  char line[256], h[65];
  hex(md, 32, h);
  int ll = snprintf(line, sizeof line, "%s  %s\n", h, name);
  if (w->sums_len + (size_t)ll + 1 > w->sums_cap) {
    size_t cap = w->sums_cap ? 2 * w->sums_cap : 4096;
    while (cap < w->sums_len + (size_t)ll + 1) cap *= 2;
    char *ns = realloc(w->sums, cap);
    if (!ns) return xt_fail(msg, XT_ENOMEM, "out of memory");
    w->sums = ns;
    w->sums_cap = cap;
  }
  memcpy(w->sums + w->sums_len, line, (size_t)ll);
  w->sums_len += (size_t)ll;
  double t1 = now_s();
  st->encode_s += t1 - t0;
  if (disk) disk(dctx, 1);
  int fd = openat(w->tmpfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  int bad = fd < 0 || write_all(fd, iov, n) != 0 || (fsync(fd) != 0 && errno != EINVAL);
  int e = errno;
  if (fd >= 0 && close(fd) != 0 && !bad) bad = 1, e = errno;
  if (disk) disk(dctx, 0);
  st->write_s += now_s() - t1;
  if (bad) return xt_fail(msg, XT_EIO, "shard %lld: cannot write \"%s\": %s", w->shard, path, strerror(e));
  w->bytes += m->bytes;
  st->bytes += (long long)m->bytes;
  return 0;
}

/* Bytes hashed and then written (or staged) in one step: few enough to stay in the core's L2
 * cache from the hash to write(2)'s copy, so each frame byte comes from memory once, not twice. */
#define SLICE_BYTES ((size_t)256 << 10)
enum { SLICE_IOV = 64 };

/* Buffered: iov[0..n) hashed into w->md and written, slice by slice. */
static int hash_write(xt_ds_shard_writer *w, const struct iovec *iov, int n, double *hash_s, double *write_s,
                      xt_ds_disk_fn disk, void *dctx) {
  struct iovec sl[SLICE_IOV];
  size_t off = 0; /* into iov[i] */
  for (int i = 0; i < n;) {
    int k = 0;
    size_t got = 0;
    while (i < n && got < SLICE_BYTES && k < SLICE_IOV) {
      size_t take = iov[i].iov_len - off < SLICE_BYTES - got ? iov[i].iov_len - off : SLICE_BYTES - got;
      sl[k].iov_base = (char *)iov[i].iov_base + off;
      sl[k++].iov_len = take;
      got += take;
      off += take;
      if (off == iov[i].iov_len) i++, off = 0;
    }
    double t0 = now_s();
    for (int j = 0; j < k; j++) EVP_DigestUpdate(w->md, sl[j].iov_base, sl[j].iov_len);
    double t1 = now_s();
    *hash_s += t1 - t0;
    if (disk) disk(dctx, 1);
    int bad = write_all(w->fd, sl, k), e = errno;
    if (disk) disk(dctx, 0);
    *write_s += now_s() - t1;
    if (bad) {
      errno = e;
      return -1;
    }
  }
  return 0;
}

/* O_DIRECT: copies the pieces into the staging buffer (hashing each slice just copied into md,
 * unless NULL) and writes each full block. The copy and the hash are encoding (CPU); the writes
 * are the disk's. */
static int stage_pieces(xt_ds_shard_writer *w, const struct iovec *iov, int n, EVP_MD_CTX *md, double *wrote_s,
                        xt_ds_disk_fn disk, void *dctx) {
  for (int i = 0; i < n; i++) {
    const unsigned char *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left) {
      size_t k = STAGE_BYTES - w->staged < left ? STAGE_BYTES - w->staged : left;
      if (k > SLICE_BYTES) k = SLICE_BYTES;
      memcpy(w->stage + w->staged, p, k);
      if (md) EVP_DigestUpdate(md, w->stage + w->staged, k);
      w->staged += k;
      p += k;
      left -= k;
      if (w->staged == STAGE_BYTES) {
        double t = now_s();
        if (disk) disk(dctx, 1);
        struct iovec one = {w->stage, STAGE_BYTES};
        int bad = write_all(w->fd, &one, 1);
        int e = errno;
        if (disk) disk(dctx, 0);
        *wrote_s += now_s() - t;
        if (bad) {
          errno = e;
          return -1;
        }
        w->staged = 0;
      }
    }
  }
  return 0;
}

int xt_ds_shard_add(xt_ds_shard_writer *w, xt_ds_encoder *e, const xt_ds_frame_data *fd, xt_ds_wstats *st,
                    xt_ds_disk_fn disk, void *dctx, xt_msg *msg) {
  const xt_ds_spec *s = w->s;
  const xt_ds_frame *f = fd->frame;
  const int rows = f->geom.mode.rows, cols = f->geom.mode.cols;
  const size_t px = (size_t)rows * cols;
  double t0 = now_s();
  int rc;
  member mem[16];
  int nm = 0;
  int shape3[3] = {s->nchannels, rows, cols};
  /* Derived images, in the encoder's scratch. */
  static const char *const seg_dtype[] = {"|u1", "<u2", "", "<u4", "", "", "", "<u8"};
  const int sb = seg_bytes(s->nchannels);
  if (s->write.lineint) add_member(&mem[nm++], "lineint.npy", "<f4", 2, shape3, fd->img, px * sizeof(float));
  if (s->write.intensity) {
    xt_intensity_u16(fd->img, px, e->u16);
    add_member(&mem[nm++], "intensity.npy", "<u2", 2, shape3, e->u16, px * sizeof(uint16_t));
  }
  if (s->write.raw || s->write.processed) {
    int cshape[3] = {0, 0, 0};
    xt_ds_chain_size(s, f->mode, &cshape[1], &cshape[2]);
    const size_t cb = (size_t)cshape[1] * cshape[2] * sizeof(uint16_t);
    if (!fd->raw || !fd->proc) return xt_fail(msg, XT_EINVAL, "frame %lld: no chain frames", f->index);
    if (s->write.raw) add_member(&mem[nm++], "raw.npy", "<u2", 2, cshape, fd->raw, cb);
    if (s->write.processed) add_member(&mem[nm++], "processed.npy", "<u2", 2, cshape, fd->proc, cb);
  }
  if (s->write.labels) {
    member *m = &mem[nm++];
    add_member(m, "labels.npy", "<f4", 3, shape3, fd->chan[0], px * sizeof(float));
    for (int k = 1; k < s->nchannels; k++) m->data[m->npieces++] = (piece){fd->chan[k], px * sizeof(float)};
  }
  if (s->write.segmentation) {
    /* Little-endian bitmask, built byte by byte so the host's order does not matter. */
    memset(e->seg, 0, px * (size_t)sb);
    for (int k = 0; k < s->nchannels; k++) {
      const float *c = fd->chan[k];
      const unsigned char bit = (unsigned char)(1u << (k & 7));
      unsigned char *dst = e->seg + (k >> 3);
      for (size_t p = 0; p < px; p++)
        if (c[p] > 0.0f) dst[p * (size_t)sb] |= bit;
    }
    add_member(&mem[nm++], "seg.npy", seg_dtype[sb - 1], 2, shape3, e->seg, px * (size_t)sb);
  }
  {
    const char *text;
    size_t len;
    if ((rc = xt_ds_frame_json(e, f, &text, &len, msg))) return rc;
    member *m = &mem[nm++];
    m->ext = "json";
    m->npy_len = 0;
    m->data[0] = (piece){text, len};
    m->npieces = 1;
  }
  for (int i = 0; i < nm; i++) {
    mem[i].bytes = mem[i].npy_len;
    for (int k = 0; k < mem[i].npieces; k++) mem[i].bytes += mem[i].data[k].n;
  }
  char names[16][48];
  for (int i = 0; i < nm; i++) snprintf(names[i], sizeof names[i], "%0*lld.%s", KEY_DIGITS, f->index, mem[i].ext);

  if (s->format == XT_DS_FMT_FOLDER) {
    st->encode_s += now_s() - t0;
    for (int i = 0; i < nm; i++)
      if ((rc = write_member_file(w, names[i], &mem[i], st, disk, dctx, msg))) return rc;
    w->frames++;
    st->frames++;
    return 0;
  }

  /* Tar: header | npy header | data | padding per member, hashed in order, one writev. */
  unsigned char hdr[16][TAR_BLOCK];
  struct iovec iov[16 * (MAX_PIECES + 3)];
  int n = 0;
  size_t total = 0;
  for (int i = 0; i < nm; i++) {
    member *m = &mem[i];
    tar_header(hdr[i], names[i], m->bytes);
    iov[n].iov_base = hdr[i];
    iov[n++].iov_len = TAR_BLOCK;
    if (m->npy_len) {
      iov[n].iov_base = m->npy;
      iov[n++].iov_len = m->npy_len;
    }
    for (int k = 0; k < m->npieces; k++) {
      iov[n].iov_base = (void *)m->data[k].p;
      iov[n++].iov_len = m->data[k].n;
    }
    size_t pad = pad512(m->bytes) - m->bytes;
    if (pad) {
      iov[n].iov_base = (void *)zeros;
      iov[n++].iov_len = pad;
    }
    total += TAR_BLOCK + pad512(m->bytes);
  }
  int bad, err;
  if (w->direct) {
    double wrote = 0;
    bad = stage_pieces(w, iov, n, w->md, &wrote, disk, dctx);
    err = errno;
    st->write_s += wrote;
    st->encode_s += now_s() - t0 - wrote;
  } else {
    double hashed = 0, wrote = 0;
    st->encode_s += now_s() - t0;
    bad = hash_write(w, iov, n, &hashed, &wrote, disk, dctx);
    err = errno;
    st->encode_s += hashed;
    st->write_s += wrote;
  }
  if (bad) return xt_fail(msg, XT_EIO, "shard %lld: write failed: %s", w->shard, strerror(err));
  w->bytes += total;
  w->frames++;
  st->bytes += (long long)total;
  st->frames++;
  return 0;
}

static int manifest_line(xt_ds_shard_writer *w, const char *sha, xt_msg *msg) {
  const xt_ds_spec *s = w->s;
  jb b = {0};
  json_t *r = json_object();
  char rel[64];
  snprintf(rel, sizeof rel, "shards/shard-%06lld%s", w->shard, s->format == XT_DS_FMT_TAR ? ".tar" : "");
  put(&b, r, "shard", json_integer(w->shard));
  put(&b, r, "path", json_string(rel));
  put(&b, r, "format", json_string(s->format == XT_DS_FMT_TAR ? "tar" : "folder"));
  put(&b, r, "first_frame", json_integer(w->shard * s->shard_frames));
  put(&b, r, "frames", json_integer(w->frames));
  put(&b, r, "bytes", json_integer((json_int_t)w->bytes));
  put(&b, r, "sha256", json_string(sha));
  put(&b, r, "sha256_of", json_string(s->format == XT_DS_FMT_TAR ? "the tar file" : "the folder's SHA256SUMS file"));
  put(&b, r, "spec_sha256", json_string(s->sha256));
  char *text = b.bad ? NULL : json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(r);
  if (!text) return xt_fail(msg, XT_ENOMEM, "out of memory");
  size_t len = strlen(text);
  char *line = realloc(text, len + 2);
  if (!line) {
    free(text);
    return xt_fail(msg, XT_ENOMEM, "out of memory");
  }
  line[len] = '\n';
  line[len + 1] = 0;
  char name[64];
  snprintf(name, sizeof name, "shard-%06lld.json", w->shard);
  int rc = write_atomic(w->o->shardsfd, w->o->shards, name, line, len + 1, msg);
  free(line);
  return rc;
}

int xt_ds_shard_commit(xt_ds_shard_writer *w, xt_ds_wstats *st, xt_ds_disk_fn disk, void *dctx, xt_msg *msg) {
  const xt_ds_spec *s = w->s;
  int rc = 0;
  char sha[65];
  double t0 = now_s();
  if (disk) disk(dctx, 1);
  if (s->format == XT_DS_FMT_TAR) {
    struct iovec end = {(void *)zeros, sizeof zeros};
    EVP_DigestUpdate(w->md, zeros, sizeof zeros);
    unsigned char md[32];
    unsigned mdl = 0;
    EVP_DigestFinal_ex(w->md, md, &mdl);
    hex(md, 32, sha);
    int bad;
    if (w->direct) {
      /* The end blocks, then the last block padded to the alignment and the file cut back. */
      double wrote = 0; /* counted below with the rest of the commit */
      bad = stage_pieces(w, &end, 1, NULL, &wrote, NULL, NULL); /* hashed above */
      if (!bad && w->staged) {
        size_t n = (w->staged + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        memset(w->stage + w->staged, 0, n - w->staged);
        struct iovec last = {w->stage, n};
        bad = write_all(w->fd, &last, 1) || ftruncate(w->fd, (off_t)(w->bytes + sizeof zeros)) != 0;
      }
    } else {
      bad = write_all(w->fd, &end, 1);
    }
    if (bad || (fsync(w->fd) != 0 && errno != EINVAL)) {
      rc = xt_fail(msg, XT_EIO, "shard %lld: write failed: %s", w->shard, strerror(errno));
      goto fail;
    }
    w->bytes += sizeof zeros;
    st->bytes += (long long)sizeof zeros;
    if (w->anonymous) {
      char proc[64];
      snprintf(proc, sizeof proc, "/proc/self/fd/%d", w->fd);
      /* A tar left by a run killed before its manifest line is replaced. */
      const int sfd = w->o->shardsfd;
      if (linkat(AT_FDCWD, proc, sfd, w->data_name, AT_SYMLINK_FOLLOW) != 0 &&
          !(errno == EEXIST && unlinkat(sfd, w->data_name, 0) == 0 &&
            linkat(AT_FDCWD, proc, sfd, w->data_name, AT_SYMLINK_FOLLOW) == 0)) {
        rc = xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
        goto fail;
      }
    } else if (renameat(w->o->shardsfd, w->tmp_name, w->o->shardsfd, w->data_name) != 0) {
      rc = xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
      goto fail;
    }
  } else {
    unsigned char md[32];
    unsigned mdl = 0;
    EVP_Digest(w->sums ? w->sums : "", w->sums_len, md, &mdl, EVP_sha256(), NULL);
    hex(md, 32, sha);
    if ((rc = write_atomic(w->tmpfd, w->tmp, "SHA256SUMS", w->sums ? w->sums : "", w->sums_len, msg))) goto fail;
    rm_rf(w->o->shardsfd, w->data_name);
    if (renameat(w->o->shardsfd, w->tmp_name, w->o->shardsfd, w->data_name) != 0) {
      rc = xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
      goto fail;
    }
  }
  if (fsync_fd(w->o->shardsfd) != 0) {
    rc = xt_fail(msg, XT_EIO, "shard %lld: cannot sync \"%s\": %s", w->shard, w->o->shards, strerror(errno));
    goto fail;
  }
  if ((rc = manifest_line(w, sha, msg))) {
    /* No line, no shard: do not leave a shard that looks finished. */
    if (s->format == XT_DS_FMT_TAR) unlinkat(w->o->shardsfd, w->data_name, 0);
    else rm_rf(w->o->shardsfd, w->data_name);
    goto done;
  }
  goto done;
fail:
  if (disk) disk(dctx, 0);
  st->write_s += now_s() - t0;
  xt_ds_shard_abort(w);
  return rc;
done:
  if (disk) disk(dctx, 0);
  st->write_s += now_s() - t0;
  writer_free(w);
  return rc;
}
