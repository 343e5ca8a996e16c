/* `xtwin dataset`'s DICOM output (spec "dicom", docs/dataset.md "DICOM"): a shard's chain frames
 * as the objects a C-arm sends to the archive, beside the shard in shards/:
 *
 *   shard-000012_a-fd20-512_xa.dcm          Enhanced XA: plane A's frames of mode fd20-512, in order
 *   shard-000012_a-fd20-512_xa_classic.dcm  the classic XA of the same (dicom.classic)
 *   shard-000012_b-fd15-39_xa.dcm           plane B's (biplane specs)
 *   shard-000012_sr.dcm                     the shard's X-Ray Radiation Dose SR over those runs
 *
 * A dataset's frames are independent exposures; a shard's frames of one plane and one mode are
 * taken as one run (the encoders want one matrix per object), and a shard as one study. Every UID
 * is derived from the spec's SHA-256, the shard and what the UID names ("2.25." and 128 bits of a
 * SHA-256, a name-based UUID of version 8), and the times are a fixed synthetic clock, so the same
 * spec gives the same objects in any split over tasks and devices, and no two shards (or datasets)
 * share a UID or a file name. The files are written (each to a temporary, fsync'd and renamed)
 * after the shard's data is in place and before its manifest line: a shard that counts as done has
 * its objects; a shard remade after a crash rewrites them, and the leftovers of one that is not
 * done are removed with it (xt__ds_dicom_remove). */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_dataset_internal.h"
#include "xt_dataset_shard.h"
#include "xt_dicom.h"

/* 2000-01-01T00:00:00Z: the objects' clock (the frames have no acquisition time of their own) */
#define DS_DICOM_EPOCH_US 946684800000000ll
#define DS_DICOM_FRAME_MS (1000.0 / 15) /* the nominal frame interval of a dataset "run" [U] */

typedef struct group {
  int plane, mode;
  int n, cap;
  xt_acq_frame *fr;
  uint16_t **px;
} group;

struct xt_ds_dicom_acc {
  group g[2 * XT_DS_MAX_MODES]; /* index plane * XT_DS_MAX_MODES + mode */
  int nfiles;
  char files[4 * XT_DS_MAX_MODES + 1][96]; /* written, for the manifest line */
};

xt_ds_dicom_acc *xt__ds_dicom_new(void) { return calloc(1, sizeof(xt_ds_dicom_acc)); }

void xt__ds_dicom_free(xt_ds_dicom_acc *a) {
  if (!a) return;
  for (int k = 0; k < 2 * XT_DS_MAX_MODES; k++) {
    for (int i = 0; i < a->g[k].n; i++) free(a->g[k].px[i]);
    free(a->g[k].px);
    free(a->g[k].fr);
  }
  free(a);
}

/* The frame as one exposure's record: its stated geometry (the C-arm's pose and the table; not the
 * render geometry of a moved model), its index as the frame number, what the chain gave. */
static void dicom_record(const xt_ds_spec *s, const xt_ds_frame *f, long long shard, xt_acq_frame *r) {
  memset(r, 0, sizeof *r);
  r->counter = (uint64_t)f->index;
  r->run = (uint64_t)shard;
  r->plane = f->plane;
  r->geom = f->geom;
  xt_P_to_pixel_edge(f->geom.P, r->P_edge);
  r->chain = 1;
  r->prm = f->chain;
  r->info = f->chain_info;
  r->dose = f->dose;
  int rows, cols;
  xt_ds_chain_size(s, f->mode, &rows, &cols);
  r->raw.rows = r->proc.rows = rows;
  r->raw.cols = r->proc.cols = cols;
  r->raw.elem = r->proc.elem = 2;
}

static int add_one(const xt_ds_spec *s, xt_ds_dicom_acc *a, long long shard, const xt_ds_frame_data *fd, xt_msg *msg) {
  const xt_ds_frame *f = fd->frame;
  group *g = &a->g[(f->plane ? XT_DS_MAX_MODES : 0) + f->mode];
  const uint16_t *src = s->dicom.raw ? fd->raw : fd->proc;
  if (!src) return xt_fail(msg, XT_EINTERNAL, "shard %lld: DICOM: frame %lld has no chain pixels", shard, f->index);
  if (g->n == g->cap) {
    int cap = g->cap ? g->cap * 2 : 64;
    xt_acq_frame *fr = realloc(g->fr, (size_t)cap * sizeof *fr);
    if (fr) g->fr = fr;
    uint16_t **px = fr ? realloc(g->px, (size_t)cap * sizeof *px) : NULL;
    if (!px) return xt_fail(msg, XT_ENOMEM, "shard %lld: DICOM: out of memory", shard);
    g->px = px;
    g->cap = cap;
  }
  dicom_record(s, f, shard, &g->fr[g->n]);
  const size_t bytes = (size_t)g->fr[g->n].raw.rows * (size_t)g->fr[g->n].raw.cols * 2;
  uint16_t *copy = malloc(bytes);
  if (!copy) return xt_fail(msg, XT_ENOMEM, "shard %lld: DICOM: out of memory for the frames' pixels", shard);
  memcpy(copy, src, bytes);
  g->plane = f->plane;
  g->mode = f->mode;
  g->px[g->n++] = copy;
  return 0;
}

int xt__ds_dicom_add(xt_ds_shard_writer *w, const xt_ds_frame_data *fd, xt_msg *msg) {
  int rc = add_one(w->s, w->dcm, w->shard, fd, msg);
  if (!rc && fd->b) rc = add_one(w->s, w->dcm, w->shard, fd->b, msg);
  return rc;
}

/* "2.25." and the first 128 bits of SHA-256(spec SHA-256, shard, what) as a UUID of version 8
 * (RFC 9562: its version and variant bits set), in decimal: at most 44 characters. */
static void derived_uid(const xt_ds_spec *s, long long shard, const char *what, char out[XT_DCW_UID]) {
  char text[256];
  const int n = snprintf(text, sizeof text, "xtwin-dataset-dicom/%s/%lld/%s", s->sha256, shard, what);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(text, (size_t)n, md, &len, EVP_sha256(), NULL);
  md[6] = (unsigned char)((md[6] & 0x0f) | 0x80); /* version 8 */
  md[8] = (unsigned char)((md[8] & 0x3f) | 0x80); /* variant 10 */
  /* 16 bytes in base 256 -> decimal, by repeated division */
  unsigned char num[16];
  memcpy(num, md, 16);
  char dec[48];
  int nd = 0;
  for (;;) {
    int zero = 1;
    unsigned rem = 0;
    for (int i = 0; i < 16; i++) {
      const unsigned cur = rem * 256u + num[i];
      num[i] = (unsigned char)(cur / 10u);
      rem = cur % 10u;
      zero &= num[i] == 0;
    }
    dec[nd++] = (char)('0' + rem);
    if (zero) break;
  }
  char *o = out + snprintf(out, XT_DCW_UID, "2.25.");
  while (nd) *o++ = dec[--nd];
  *o = 0;
}

static int put(xt_ds_shard_writer *w, const char *name, const unsigned char *b, size_t n, xt_msg *msg) {
  int rc = xt__ds_write_atomic(w->o->shardsfd, w->o->shards, name, b, n, msg);
  if (rc) return rc;
  char *f = w->dcm->files[w->dcm->nfiles++];
  if (snprintf(f, sizeof w->dcm->files[0], "shards/%s", name) >= (int)sizeof w->dcm->files[0])
    return xt_fail(msg, XT_EINVAL, "%s: file name too long for the manifest", name);
  return 0;
}

int xt__ds_dicom_write(xt_ds_shard_writer *w, unsigned long long *bytes, xt_msg *msg) {
  const xt_ds_spec *s = w->s;
  xt_ds_dicom_acc *a = w->dcm;
  xt_dicom_identity id = s->dicom.identity;
  derived_uid(s, w->shard, "study", id.study_uid);
  if (id.synthetic) snprintf(id.study_id, sizeof id.study_id, "%lld", w->shard);
  xt_dicom_run runs[2 * XT_DS_MAX_MODES];
  const group *rg[2 * XT_DS_MAX_MODES];
  int nrun = 0, rc = 0;
  a->nfiles = 0;
  for (int k = 0; k < 2 * XT_DS_MAX_MODES; k++) {
    group *g = &a->g[k];
    if (!g->n) continue;
    rg[nrun] = g;
    xt_dicom_run *r = &runs[nrun++];
    memset(r, 0, sizeof *r);
    r->frames = g->fr;
    r->pixels = (const uint16_t *const *)g->px;
    r->n = g->n;
    r->which = s->dicom.raw ? XT_DICOM_RAW : XT_DICOM_PROC;
    r->frame_ms = DS_DICOM_FRAME_MS;
    r->t0_unix_us = DS_DICOM_EPOCH_US + (int64_t)llround((double)w->shard * (double)s->shard_frames * DS_DICOM_FRAME_MS * 1e3);
    r->series_number = k + 1;
    r->biplane = s->plane_b.present;
    r->software = "xtwin dataset " XT_VERSION;
    char what[64];
    static const char *const kinds[] = {"series", "sop", "classic_series", "classic_sop", "event", "frame_of_reference"};
    char *dst[] = {r->series_uid, r->sop_uid, r->classic_series_uid, r->classic_sop_uid, r->event_uid,
                   r->frame_of_reference_uid};
    for (int u = 0; u < 6; u++) {
      snprintf(what, sizeof what, "%c/%s/%s", g->plane ? 'b' : 'a', s->modes[g->mode]->name, kinds[u]);
      derived_uid(s, w->shard, what, dst[u]);
    }
  }
  /* Biplane: each object names the other plane's first object of the shard (of its lowest mode):
   * with one mode per plane, the object of the same instants. */
  for (int i = 0; i < nrun; i++)
    for (int j = 0; j < nrun; j++)
      if (rg[j]->plane != rg[i]->plane && !runs[i].other_plane_sop_uid[0]) {
        memcpy(runs[i].other_plane_sop_uid, runs[j].sop_uid, XT_DCW_UID);
        if (s->dicom.classic) memcpy(runs[i].other_plane_classic_sop_uid, runs[j].classic_sop_uid, XT_DCW_UID);
      }
  for (int i = 0; i < nrun && !rc; i++) {
    const group *g = rg[i];
    for (int c = 0; c < 1 + s->dicom.classic && !rc; c++) {
      unsigned char *b = NULL;
      size_t n = 0;
      rc = c ? xt_dicom_classic_xa(&runs[i], &id, &b, &n, msg) : xt_dicom_enhanced_xa(&runs[i], &id, &b, &n, msg);
      char name[96];
      snprintf(name, sizeof name, "shard-%06lld_%c-%s_xa%s.dcm", w->shard, g->plane ? 'b' : 'a', s->modes[g->mode]->name,
               c ? "_classic" : "");
      if (!rc) rc = put(w, name, b, n, msg);
      if (!rc) *bytes += n;
      free(b);
    }
  }
  if (!rc && nrun) {
    char series[XT_DCW_UID], sop[XT_DCW_UID], name[64];
    derived_uid(s, w->shard, "sr/series", series);
    derived_uid(s, w->shard, "sr/sop", sop);
    unsigned char *b = NULL;
    size_t n = 0;
    rc = xt_dicom_dose_sr_uids(runs, nrun, &id, series, sop, &b, &n, msg);
    snprintf(name, sizeof name, "shard-%06lld_sr.dcm", w->shard);
    if (!rc) rc = put(w, name, b, n, msg);
    if (!rc) *bytes += n;
    free(b);
  }
  if (rc && strncmp(msg->text, "shard ", 6) != 0) {
    char t[sizeof msg->text];
    snprintf(t, sizeof t, "%s", msg->text);
    xt_fail(msg, rc, "shard %lld: DICOM: %s", w->shard, t);
  }
  return rc;
}

json_t *xt__ds_dicom_manifest(const xt_ds_shard_writer *w, xt_jb *b) {
  json_t *arr = json_array();
  for (int i = 0; i < w->dcm->nfiles; i++) xt_jb_push(b, arr, json_string(w->dcm->files[i]));
  return arr;
}

void xt__ds_dicom_remove(int shardsfd, long long shard) {
  char pre[48], tmp[48];
  const int pl = snprintf(pre, sizeof pre, "shard-%06lld_", shard);
  const int tl = snprintf(tmp, sizeof tmp, ".shard-%06lld_", shard);
  int fd = openat(shardsfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    const size_t len = strlen(de->d_name);
    const int ours = (!strncmp(de->d_name, pre, (size_t)pl) && len > 4 && !strcmp(de->d_name + len - 4, ".dcm")) ||
                     !strncmp(de->d_name, tmp, (size_t)tl);
    if (ours) unlinkat(fd, de->d_name, 0);
  }
  closedir(d);
}
