/* Shared between the files of dataset/, not public API (tools/ and the tests use xt_dataset.h):
 * the file-system helpers (xt_dataset_fs.c), the hashing helpers (xt_dataset_hash.c), the JSON
 * builders and the frame's members (xt_dataset_encode.c). The shard writers' interface is
 * xt_dataset_shard.h. */
#ifndef XT_DATASET_INTERNAL_H
#define XT_DATASET_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <sys/uio.h>
#include <time.h>

#include <openssl/evp.h>

#include "xt_dataset.h"
#include "xt_json_build.h"

#define XT__DS_KEY_DIGITS 12 /* frame keys: the frame index, zero-padded */

static inline double xt__ds_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* File system (xt_dataset_fs.c)                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Everything works on directory descriptors: --out is opened once and shards/ is opened within it
 * with O_NOFOLLOW, and every file inside is made with openat(O_CREAT | O_EXCL), renameat, linkat or
 * unlinkat, none of which follows a symbolic link in the last component. So nothing is ever
 * written through a link, even one that appears while the run is going (a check by name before an
 * open would leave that window open). */

/* fsync of a directory (or file); EINVAL (a file system that cannot) counts as done. 0 or -1. */
int xt__ds_fsync(int fd);
/* A name of our own in dfd, never one that exists: "PREFIX" and 12 random hex digits, created
 * with O_EXCL | O_NOFOLLOW and flags. The descriptor, or -1 with errno. */
int xt__ds_create_unique(int dfd, const char *prefix, char *name, size_t cap, int flags);
/* Writes the whole buffer to dfd/name (dir its path, for messages) through a temporary next to
 * it, fsync and renameat, then syncs dfd. */
int xt__ds_write_atomic(int dfd, const char *dir, const char *name, const void *data, size_t n, xt_msg *msg);
/* Opens dfd/name for reading, never through a link (ELOOP) and never blocking on a FIFO. */
int xt__ds_open_read(int dfd, const char *name);
/* Reads a whole (small, <= 64 MiB) file dfd/name; NULL with errno set on failure. */
char *xt__ds_read_small(int dfd, const char *name, size_t *n);
/* Removes dfd/name: a file, or a folder of files (a folder shard). A link is removed, never
 * followed. */
void xt__ds_rm_rf(int dfd, const char *name);
/* mkdir -p of --out itself: the path the user named, links in it followed as the user meant. */
int xt__ds_mkdir_p(const char *path, xt_msg *msg);
/* Writes iov[0..n) fully (writev(2) may stop short); the entries are consumed. 0 or -1 (errno). */
int xt__ds_write_all(int fd, struct iovec *iov, int n);

/* ------------------------------------------------------------------------------------------ */
/* Hashing (xt_dataset_hash.c): SHA-256 through OpenSSL's libcrypto, as lowercase hex         */
/* ------------------------------------------------------------------------------------------ */

void xt__ds_hex(const unsigned char *md, int n, char *out);
/* A streaming context, or NULL (out of memory); EVP_DigestUpdate feeds it, xt__ds_sha256_end
 * gives the hex digest (the context stays the caller's to free with EVP_MD_CTX_free). */
EVP_MD_CTX *xt__ds_sha256_begin(void);
void xt__ds_sha256_end(EVP_MD_CTX *c, char out[65]);
/* Of one buffer; of the pieces iov[0..n) in order (XT_ENOMEM or 0). */
void xt__ds_sha256_buf(const void *p, size_t n, char out[65]);
int xt__ds_sha256_iov(const struct iovec *iov, int n, char out[65]);
/* Of the file dfd/name, opened as xt__ds_open_read does. 0 or -1. */
int xt__ds_sha256_file(int dfd, const char *name, char out[65]);

/* ------------------------------------------------------------------------------------------ */
/* JSON and members (xt_dataset_encode.c)                                                     */
/* ------------------------------------------------------------------------------------------ */


/* One frame's member files, in order, as the shard writers get them (xt_dataset_shard.h). */
typedef struct xt_ds_member xt_ds_member;
/* The members of fd's frame: derived images in e's scratch, NPY headers, the JSON; names
 * KEY.EXT. At most 16. Valid until the next call with e. */
int xt__ds_encode_frame(xt_ds_encoder *e, const xt_ds_frame_data *fd, xt_ds_member *mem, int *n, xt_msg *msg);

#endif /* XT_DATASET_INTERNAL_H */
