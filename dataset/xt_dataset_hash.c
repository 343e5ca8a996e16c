/* SHA-256 helpers of `xtwin dataset` (xt_dataset_internal.h), through OpenSSL's libcrypto: the
 * checksums of the manifest lines (a tar shard whole, a folder shard's SHA256SUMS and its member
 * files), the re-hash of --verify, and the dry run's estimate of the time hashing takes. Digests
 * are lowercase hex, as sha256sum(1) prints them, so a folder's SHA256SUMS checks with
 * `sha256sum -c`. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "xt_dataset_internal.h"

void xt__ds_hex(const unsigned char *md, int n, char *out) {
  for (int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

EVP_MD_CTX *xt__ds_sha256_begin(void) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (c && !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
    EVP_MD_CTX_free(c);
    c = NULL;
  }
  return c;
}

void xt__ds_sha256_end(EVP_MD_CTX *c, char out[65]) {
  unsigned char md[32];
  unsigned len = 0;
  EVP_DigestFinal_ex(c, md, &len);
  xt__ds_hex(md, 32, out);
}

void xt__ds_sha256_buf(const void *p, size_t n, char out[65]) {
  unsigned char md[32];
  unsigned len = 0;
  EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
  xt__ds_hex(md, 32, out);
}

int xt__ds_sha256_iov(const struct iovec *iov, int n, char out[65]) {
  EVP_MD_CTX *c = xt__ds_sha256_begin();
  if (!c) return XT_ENOMEM;
  for (int i = 0; i < n; i++) EVP_DigestUpdate(c, iov[i].iov_base, iov[i].iov_len);
  xt__ds_sha256_end(c, out);
  EVP_MD_CTX_free(c);
  return 0;
}

int xt__ds_sha256_file(int dfd, const char *name, char out[65]) {
  int fd = xt__ds_open_read(dfd, name);
  if (fd < 0) return -1;
  EVP_MD_CTX *c = xt__ds_sha256_begin();
  enum { CH = 1 << 20 };
  unsigned char *buf = malloc(CH);
  int rc = -1;
  if (c && buf) {
    for (;;) {
      ssize_t r = read(fd, buf, CH);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) goto done;
      if (r == 0) break;
      EVP_DigestUpdate(c, buf, (size_t)r);
    }
    xt__ds_sha256_end(c, out);
    rc = 0;
  }
done:
  free(buf);
  EVP_MD_CTX_free(c);
  close(fd);
  return rc;
}

/* Hashes `bytes` zeros in 4 MiB calls: the rate of this core, not of the disk. */
double xt_ds_hash_seconds(size_t bytes) {
  enum { CH = 4 << 20 };
  unsigned char *buf = calloc(1, CH), md[32];
  unsigned len = 0;
  if (!buf) return 0;
  double t0 = xt__ds_now_s();
  for (size_t done = 0; done < bytes; done += CH) EVP_Digest(buf, bytes - done < CH ? bytes - done : CH, md, &len, EVP_sha256(), NULL);
  free(buf);
  return xt__ds_now_s() - t0;
}
