/* The tar shard format of `xtwin dataset` (xt_dataset_shard.h): WebDataset-style POSIX ustar,
 * shards/shard-NNNNNN.tar, its manifest checksum the SHA-256 of the whole file.
 *
 * Written by hand (a 512-byte header per member, data padded to 512, two zero blocks at the end)
 * rather than through libarchive, because the writer hands the frame's arrays to writev(2)
 * straight from the render buffers (no copy) and hashes exactly those bytes, and the header fields
 * that would make shards differ between runs (mtime, owner) are fixed: mtime 0, uid/gid 0, no user
 * names. Python's tarfile and GNU tar read the result (tests check both).
 *
 * Crash safety: the shard is written to an unnamed O_TMPFILE in the shards directory and linked
 * into place after fsync, so a killed run leaves nothing behind; where the file system has no
 * O_TMPFILE, a hidden ".shard-N.tar.partial" that the next run removes.
 *
 * I/O: buffered writes (the page cache, fsync at the end of the shard) by default; with --io
 * direct, O_DIRECT writes of an aligned staging buffer (a copy of the frame's pieces) in 8 MiB
 * blocks, the last block padded and the file truncated to its size: the disk's own bandwidth
 * without the page cache, as `dd oflag=direct` measures it. */
#define _GNU_SOURCE /* O_TMPFILE, O_DIRECT, linkat's AT_SYMLINK_FOLLOW */
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

#define TAR_BLOCK 512
#define STAGE_BYTES ((size_t)8 << 20)
#define DIRECT_ALIGN 4096

static const unsigned char zeros[2 * TAR_BLOCK];

static size_t pad512(size_t n) { return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK; }

/* A header block, the data, padding to the block. */
static size_t tar_member_bytes(size_t n) { return TAR_BLOCK + pad512(n); }

/* ------------------------------------------------------------------------------------------ */
/* Headers                                                                                    */
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
/* Writing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct tar_state {
  int fd;
  int direct;    /* O_DIRECT through stage */
  unsigned char *stage;
  size_t staged;
  int anonymous; /* O_TMPFILE: no name until linked */
  EVP_MD_CTX *md; /* the whole file */
} tar_state;

static void tar_free(xt_ds_shard_writer *w) {
  tar_state *t = w->impl;
  if (!t) return;
  if (t->fd >= 0) close(t->fd);
  free(t->stage);
  EVP_MD_CTX_free(t->md);
  free(t);
  w->impl = NULL;
}

static void tar_abort(xt_ds_shard_writer *w) {
  const tar_state *t = w->impl;
  if (t && !t->anonymous) unlinkat(w->o->shardsfd, w->tmp_name, 0); /* an O_TMPFILE vanishes with its descriptor */
}

static int tar_open(xt_ds_shard_writer *w, xt_msg *msg) {
  const xt_ds_out *o = w->o;
  tar_state *t = calloc(1, sizeof *t);
  if (!t) return xt_fail(msg, XT_ENOMEM, "out of memory");
  t->fd = -1;
  w->impl = t;
  if (!(t->md = xt__ds_sha256_begin())) {
    tar_free(w);
    return xt_fail(msg, XT_ENOMEM, "out of memory (sha256)");
  }
  int flags = O_WRONLY | O_CLOEXEC;
  if (o->direct) {
    t->stage = aligned_alloc(DIRECT_ALIGN, STAGE_BYTES);
    if (!t->stage) {
      tar_free(w);
      return xt_fail(msg, XT_ENOMEM, "out of memory (staging buffer)");
    }
  }
  /* O_DIRECT where asked and the file system takes it (tmpfs does not: buffered there). */
  for (int attempt = o->direct ? 0 : 1; attempt < 2 && t->fd < 0; attempt++) {
    int f = flags | (attempt == 0 ? O_DIRECT : 0);
#ifdef O_TMPFILE
    t->fd = openat(o->shardsfd, ".", O_TMPFILE | f, 0666);
    t->anonymous = t->fd >= 0;
#endif
    if (t->fd < 0 && (attempt == 1 || errno != EINVAL)) {
      /* The name is this shard's own (only its task writes it): a killed run's is replaced. */
      snprintf(w->tmp_name, sizeof w->tmp_name, ".shard-%06lld.tar.partial", w->shard);
      snprintf(w->tmp, sizeof w->tmp, "%s/%s", o->shards, w->tmp_name);
      unlinkat(o->shardsfd, w->tmp_name, 0);
      t->fd = openat(o->shardsfd, w->tmp_name, O_CREAT | O_EXCL | O_NOFOLLOW | f, 0666);
    }
    t->direct = t->fd >= 0 && attempt == 0;
  }
  if (t->fd < 0) {
    int e = errno;
    tar_free(w);
    return xt_fail(msg, XT_EIO, "shard %lld: cannot create a file in \"%s\": %s", w->shard, o->shards, strerror(e));
  }
  return 0;
}

/* Bytes hashed and then written (or staged) in one step: few enough to stay in the core's L2
 * cache from the hash to write(2)'s copy, so each frame byte comes from memory once, not twice. */
#define SLICE_BYTES ((size_t)256 << 10)
enum { SLICE_IOV = 64 };

/* Buffered: iov[0..n) hashed into t->md and written, slice by slice. */
static int hash_write(tar_state *t, const struct iovec *iov, int n, double *hash_s, double *write_s,
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
    double t0 = xt__ds_now_s();
    for (int j = 0; j < k; j++) EVP_DigestUpdate(t->md, sl[j].iov_base, sl[j].iov_len);
    double t1 = xt__ds_now_s();
    *hash_s += t1 - t0;
    if (disk) disk(dctx, 1);
    int bad = xt__ds_write_all(t->fd, sl, k), e = errno;
    if (disk) disk(dctx, 0);
    *write_s += xt__ds_now_s() - t1;
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
static int stage_pieces(tar_state *t, const struct iovec *iov, int n, EVP_MD_CTX *md, double *wrote_s,
                        xt_ds_disk_fn disk, void *dctx) {
  for (int i = 0; i < n; i++) {
    const unsigned char *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left) {
      size_t k = STAGE_BYTES - t->staged < left ? STAGE_BYTES - t->staged : left;
      if (k > SLICE_BYTES) k = SLICE_BYTES;
      memcpy(t->stage + t->staged, p, k);
      if (md) EVP_DigestUpdate(md, t->stage + t->staged, k);
      t->staged += k;
      p += k;
      left -= k;
      if (t->staged == STAGE_BYTES) {
        double t0 = xt__ds_now_s();
        if (disk) disk(dctx, 1);
        struct iovec one = {t->stage, STAGE_BYTES};
        int bad = xt__ds_write_all(t->fd, &one, 1);
        int e = errno;
        if (disk) disk(dctx, 0);
        *wrote_s += xt__ds_now_s() - t0;
        if (bad) {
          errno = e;
          return -1;
        }
        t->staged = 0;
      }
    }
  }
  return 0;
}


/* Per member: header | npy header | data | padding, hashed in order, one writev. */
static int tar_add(xt_ds_shard_writer *w, const xt_ds_member *mem, int nm, xt_ds_wstats *st, xt_ds_disk_fn disk,
                   void *dctx, xt_msg *msg) {
  tar_state *t = w->impl;
  double t0 = xt__ds_now_s();
  unsigned char hdr[16][TAR_BLOCK];
  struct iovec iov[16 * (XT_DS_MAX_PIECES + 3)];
  int n = 0;
  size_t total = 0;
  for (int i = 0; i < nm; i++) {
    const xt_ds_member *m = &mem[i];
    tar_header(hdr[i], m->name, m->bytes);
    iov[n].iov_base = hdr[i];
    iov[n++].iov_len = TAR_BLOCK;
    if (m->npy_len) {
      iov[n].iov_base = (void *)m->npy;
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
  if (t->direct) {
    double wrote = 0;
    bad = stage_pieces(t, iov, n, t->md, &wrote, disk, dctx);
    err = errno;
    st->write_s += wrote;
    st->encode_s += xt__ds_now_s() - t0 - wrote;
  } else {
    double hashed = 0, wrote = 0;
    st->encode_s += xt__ds_now_s() - t0;
    bad = hash_write(t, iov, n, &hashed, &wrote, disk, dctx);
    err = errno;
    st->encode_s += hashed;
    st->write_s += wrote;
  }
  if (bad) return xt_fail(msg, XT_EIO, "shard %lld: write failed: %s", w->shard, strerror(err));
  w->bytes += total;
  st->bytes += (long long)total;
  return 0;
}

/* The two zero blocks, fsync, then the file into place under its name. */
static int tar_close(xt_ds_shard_writer *w, char sha[65], xt_ds_wstats *st, xt_msg *msg) {
  tar_state *t = w->impl;
  struct iovec end = {(void *)zeros, sizeof zeros};
  EVP_DigestUpdate(t->md, zeros, sizeof zeros);
  xt__ds_sha256_end(t->md, sha);
  int bad;
  if (t->direct) {
    /* The end blocks, then the last block padded to the alignment and the file cut back. */
    double wrote = 0; /* counted by the caller with the rest of the commit */
    bad = stage_pieces(t, &end, 1, NULL, &wrote, NULL, NULL); /* hashed above */
    if (!bad && t->staged) {
      size_t n = (t->staged + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
      memset(t->stage + t->staged, 0, n - t->staged);
      struct iovec last = {t->stage, n};
      bad = xt__ds_write_all(t->fd, &last, 1) || ftruncate(t->fd, (off_t)(w->bytes + sizeof zeros)) != 0;
    }
  } else {
    bad = xt__ds_write_all(t->fd, &end, 1);
  }
  if (bad || (fsync(t->fd) != 0 && errno != EINVAL))
    return xt_fail(msg, XT_EIO, "shard %lld: write failed: %s", w->shard, strerror(errno));
  w->bytes += sizeof zeros;
  st->bytes += (long long)sizeof zeros;
  const int sfd = w->o->shardsfd;
  if (t->anonymous) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", t->fd);
    /* A tar left by a run killed before its manifest line is replaced. */
    if (linkat(AT_FDCWD, proc, sfd, w->data_name, AT_SYMLINK_FOLLOW) != 0 &&
        !(errno == EEXIST && unlinkat(sfd, w->data_name, 0) == 0 &&
          linkat(AT_FDCWD, proc, sfd, w->data_name, AT_SYMLINK_FOLLOW) == 0))
      return xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
  } else if (renameat(sfd, w->tmp_name, sfd, w->data_name) != 0) {
    return xt_fail(msg, XT_EIO, "shard %lld: cannot create \"%s\": %s", w->shard, w->data, strerror(errno));
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Resume                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A regular file (no link) of the manifest's size; with verify, of its checksum. */
static int tar_complete(int shardsfd, const char *name, long long bytes, const char *sha, int verify) {
  struct stat st;
  if (fstatat(shardsfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || (long long)st.st_size != bytes)
    return 0;
  char h[65];
  return !verify || (xt__ds_sha256_file(shardsfd, name, h) == 0 && strcmp(h, sha) == 0);
}

/* A file: unlinked (a folder at a tar's name is not ours to empty). */
static void tar_remove(int shardsfd, const char *name) { unlinkat(shardsfd, name, 0); }

const xt_ds_shard_ops xt_ds_shard_tar = {
    .name = "tar",
    .suffix = ".tar",
    .sha256_of = "the tar file",
    .member_bytes = tar_member_bytes,
    .open = tar_open,
    .add = tar_add,
    .close = tar_close,
    .abort = tar_abort,
    .free = tar_free,
    .complete = tar_complete,
    .remove = tar_remove,
};
