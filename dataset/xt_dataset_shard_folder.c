/* The folder shard format of `xtwin dataset` (xt_dataset_shard.h): shards/shard-NNNNNN/ holds the
 * frames' member files as they are (KEY.EXT, the same bytes a tar shard carries) and a
 * SHA256SUMS that `sha256sum -c` checks; the manifest line's checksum is that of SHA256SUMS, so a
 * shard is verified by its list and the list by the manifest.
 *
 * Crash safety: the folder is built as the hidden ".shard-N.partial" (this shard's own name: only
 * its task writes it, and a killed run's is removed first), every file fsync'd, SHA256SUMS written
 * atomically last, and the folder renamed into place; a killed run leaves only the hidden name,
 * which the next run removes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "xt_dataset_internal.h"
#include "xt_dataset_shard.h"

/* The member's bytes as they are: no header, no padding. */
static size_t folder_member_bytes(size_t n) { return n; }

typedef struct folder_state {
  int tmpfd; /* the temporary folder */
  char *sums; /* one "DIGEST  NAME" line per member file, for SHA256SUMS */
  size_t sums_len, sums_cap;
} folder_state;

static void folder_free(xt_ds_shard_writer *w) {
  folder_state *f = w->impl;
  if (!f) return;
  if (f->tmpfd >= 0) close(f->tmpfd);
  free(f->sums);
  free(f);
  w->impl = NULL;
}

static void folder_abort(xt_ds_shard_writer *w) { xt__ds_rm_rf(w->o->shardsfd, w->tmp_name); }

static int folder_open(xt_ds_shard_writer *w, xt_msg *msg) {
  const xt_ds_out *o = w->o;
  folder_state *f = calloc(1, sizeof *f);
  if (!f) return xt_fail(msg, XT_ENOMEM, "out of memory");
  f->tmpfd = -1;
  w->impl = f;
  snprintf(w->tmp_name, sizeof w->tmp_name, ".shard-%06lld.partial", w->shard);
  snprintf(w->tmp, sizeof w->tmp, "%s/%s", o->shards, w->tmp_name);
  xt__ds_rm_rf(o->shardsfd, w->tmp_name);
  if (mkdirat(o->shardsfd, w->tmp_name, 0777) != 0 ||
      (f->tmpfd = openat(o->shardsfd, w->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    int e = errno;
    folder_free(w);
    return xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->tmp, strerror(e));
  }
  return 0;
}

/* One member file, and its line for SHA256SUMS. */
static int write_member_file(xt_ds_shard_writer *w, const xt_ds_member *m, xt_ds_wstats *st, xt_ds_disk_fn disk,
                             void *dctx, xt_msg *msg) {
  folder_state *f = w->impl;
  char path[4600];
  if (snprintf(path, sizeof path, "%s/%s", w->tmp, m->name) >= (int)sizeof path)
    return xt_fail(msg, XT_EINVAL, "shard %lld: path too long", w->shard);
  double t0 = xt__ds_now_s();
  struct iovec iov[XT_DS_MAX_PIECES + 1];
  int n = 0;
  if (m->npy_len) {
    iov[n].iov_base = (void *)m->npy;
    iov[n++].iov_len = m->npy_len;
  }
  for (int i = 0; i < m->npieces; i++) {
    iov[n].iov_base = (void *)m->data[i].p;
    iov[n++].iov_len = m->data[i].n;
  }
  char line[256], h[65];
  if (xt__ds_sha256_iov(iov, n, h)) return xt_fail(msg, XT_ENOMEM, "out of memory (sha256)");
  int ll = snprintf(line, sizeof line, "%s  %s\n", h, m->name);
  if (f->sums_len + (size_t)ll + 1 > f->sums_cap) {
    size_t cap = f->sums_cap ? 2 * f->sums_cap : 4096;
    while (cap < f->sums_len + (size_t)ll + 1) cap *= 2;
    char *ns = realloc(f->sums, cap);
    if (!ns) return xt_fail(msg, XT_ENOMEM, "out of memory");
    f->sums = ns;
    f->sums_cap = cap;
  }
  memcpy(f->sums + f->sums_len, line, (size_t)ll);
  f->sums_len += (size_t)ll;
  double t1 = xt__ds_now_s();
  st->encode_s += t1 - t0;
  if (disk) disk(dctx, 1);
  int fd = openat(f->tmpfd, m->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  int bad = fd < 0 || xt__ds_write_all(fd, iov, n) != 0 || (fsync(fd) != 0 && errno != EINVAL);
  int e = errno;
  if (fd >= 0 && close(fd) != 0 && !bad) bad = 1, e = errno;
  if (disk) disk(dctx, 0);
  st->write_s += xt__ds_now_s() - t1;
  if (bad) return xt_fail(msg, XT_EIO, "shard %lld: cannot write \"%s\": %s", w->shard, path, strerror(e));
  w->bytes += m->bytes;
  st->bytes += (long long)m->bytes;
  return 0;
}

static int folder_add(xt_ds_shard_writer *w, const xt_ds_member *m, int n, xt_ds_wstats *st, xt_ds_disk_fn disk,
                      void *dctx, xt_msg *msg) {
  int rc;
  for (int i = 0; i < n; i++)
    if ((rc = write_member_file(w, &m[i], st, disk, dctx, msg))) return rc;
  return 0;
}

/* SHA256SUMS (atomically), then the folder into place: a previous run's folder of this shard
 * (without its line, or the --verify run found it wrong) is removed first, as rename cannot
 * replace a folder that holds files. */
static int folder_close(xt_ds_shard_writer *w, char sha[65], xt_ds_wstats *st, xt_msg *msg) {
  folder_state *f = w->impl;
  const char *sums = f->sums ? f->sums : "";
  int rc;
  xt__ds_sha256_buf(sums, f->sums_len, sha);
  if ((rc = xt__ds_write_atomic(f->tmpfd, w->tmp, "SHA256SUMS", sums, f->sums_len, msg))) return rc;
  xt__ds_rm_rf(w->o->shardsfd, w->data_name);
  if (renameat(w->o->shardsfd, w->tmp_name, w->o->shardsfd, w->data_name) != 0)
    return xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
  return 0;
}

/* Every file the folder's SHA256SUMS names (plain names in the folder dfd) has that digest. */
static int folder_files_match(int dfd) {
  char *sums = xt__ds_read_small(dfd, "SHA256SUMS", NULL);
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
    ok = xt__ds_sha256_file(dfd, line + 66, h) == 0 && strncmp(h, line, 64) == 0;
  }
  free(sums);
  return ok;
}

/* A folder (no link) with a regular SHA256SUMS; with verify, the list of the manifest's checksum
 * and every file of the list of its own. The size is not checked: it is the files' sum. */
static int folder_complete(int shardsfd, const char *name, long long bytes, const char *sha, int verify) {
  int dfd = openat(shardsfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return 0;
  struct stat st;
  int done = fstatat(dfd, "SHA256SUMS", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  if (done && verify) {
    char h[65];
    done = xt__ds_sha256_file(dfd, "SHA256SUMS", h) == 0 && strcmp(h, sha) == 0 && folder_files_match(dfd);
  }
  close(dfd);
  return done;
}

static void folder_remove(int shardsfd, const char *name) { xt__ds_rm_rf(shardsfd, name); }

const xt_ds_shard_ops xt_ds_shard_folder = {
    .name = "folder",
    .suffix = "",
    .sha256_of = "the folder's SHA256SUMS file",
    .member_bytes = folder_member_bytes,
    .open = folder_open,
    .add = folder_add,
    .close = folder_close,
    .abort = folder_abort,
    .free = folder_free,
    .complete = folder_complete,
    .remove = folder_remove,
};
