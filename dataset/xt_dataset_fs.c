/* File-system helpers of `xtwin dataset` (xt_dataset_internal.h): temporaries of our own made with
 * O_EXCL, whole files written atomically (a temporary, fsync, renameat, the directory synced),
 * reads and removals that never follow a symbolic link, and writev(2) to the end. Every shard
 * writer and the output directory use these, so the guarantees of docs/dataset.md (nothing written
 * through a link, nothing half-written under a final name) are kept in one place. */
#define _GNU_SOURCE /* IOV_MAX (an XSI limit: _POSIX_C_SOURCE alone hides it) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "xt_dataset_internal.h"

int xt__ds_fsync(int fd) { return fsync(fd) == 0 || errno == EINVAL ? 0 : -1; }

/* Random rather than a counter or the pid: tasks of a Slurm array or an Indexed Job, on any host,
 * make temporaries of the same prefix at the same moment. */
int xt__ds_create_unique(int dfd, const char *prefix, char *name, size_t cap, int flags) {
  for (int tries = 0; tries < 100; tries++) {
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      const unsigned long long t = (unsigned long long)getpid() * 0x9E3779B97F4A7C15ull ^
                                   (unsigned long long)(xt__ds_now_s() * 1e9) ^ (unsigned long long)tries << 48;
      for (int i = 0; i < 6; i++) r[i] = (unsigned char)(t >> (8 * i));
    }
    snprintf(name, cap, "%s%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3], r[4], r[5]);
    int fd = openat(dfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

int xt__ds_write_atomic(int dfd, const char *dir, const char *name, const void *data, size_t n, xt_msg *msg) {
  char tmp[300], prefix[200];
  snprintf(prefix, sizeof prefix, ".%s.", name);
  int fd = xt__ds_create_unique(dfd, prefix, tmp, sizeof tmp, O_WRONLY);
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
  if (xt__ds_fsync(dfd) != 0) return xt_fail(msg, XT_EIO, "cannot sync \"%s\": %s", dir, strerror(errno));
  return 0;
}

int xt__ds_open_read(int dfd, const char *name) {
  return openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

char *xt__ds_read_small(int dfd, const char *name, size_t *n) {
  int fd = xt__ds_open_read(dfd, name);
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

void xt__ds_rm_rf(int dfd, const char *name) {
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

int xt__ds_mkdir_p(const char *path, xt_msg *msg) {
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

int xt__ds_write_all(int fd, struct iovec *iov, int n) {
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
