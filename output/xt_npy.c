/* NumPy's .npy format, version 1.0, C order: the one writer of every .npy xtwin makes (the CLI's
 * line integrals, POST /v1/render's frames, the dataset's members, the loaders' test dumps).
 *
 * The header's bytes are part of every golden file, so their form is fixed: the dict exactly as
 * numpy.save writes it ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), then
 * spaces and one '\n' up to a multiple of 64 bytes counted from the start of the file. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_output.h"

/* The data goes out as it lies in memory, and every dtype written says little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "xt_npy.c writes host-order data under little-endian dtypes"
#endif

/* Element size of descr ('<' or '|', a kind, one digit), 0 when it is not one of ours. */
static size_t item_size(const char *d) {
  if (!d || strlen(d) != 3 || !strchr("<|", d[0]) || !strchr("uif", d[1]) || !strchr("1248", d[2])) return 0;
  return (size_t)(d[2] - '0');
}

size_t xt_npy_data_bytes(const char *descr, int ndim, const int *shape) {
  size_t n = item_size(descr);
  if (!n || ndim < 1 || ndim > XT_NPY_MAX_DIMS) return 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 1 || (size_t)shape[i] > SIZE_MAX / n) return 0;
    n *= (size_t)shape[i];
  }
  return n;
}

size_t xt_npy_header(char *buf, size_t cap, const char *descr, int ndim, const int *shape) {
  if (!xt_npy_data_bytes(descr, ndim, shape)) return 0;
  char dict[XT_NPY_HEADER_MAX];
  size_t dl = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < ndim; i++) /* Python's tuple repr: "(5,)", "(2, 3)" */
    dl += (size_t)snprintf(dict + dl, sizeof dict - dl, i ? ", %d" : "%d", shape[i]);
  dl += (size_t)snprintf(dict + dl, sizeof dict - dl, ndim == 1 ? ",), }" : "), }");
  assert(dl < sizeof dict); /* XT_NPY_MAX_DIMS positive ints always fit */
  const size_t total = (10 + dl + 1 + 63) / 64 * 64; /* magic(6) version(2) length(2) dict '\n' */
  if (total > cap) return 0;
  const size_t hlen = total - 10;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, dl);
  memset(buf + 10 + dl, ' ', total - 10 - dl - 1);
  buf[total - 1] = '\n';
  return total;
}

int xt_npy_write(FILE *f, const char *descr, int ndim, const int *shape, const void *data, xt_msg *msg) {
  char head[XT_NPY_HEADER_MAX];
  const size_t hb = xt_npy_header(head, sizeof head, descr, ndim, shape);
  if (!hb) return xt_fail(msg, XT_EINVAL, "npy: bad dtype or shape");
  const size_t db = xt_npy_data_bytes(descr, ndim, shape);
  if (fwrite(head, 1, hb, f) != hb || fwrite(data, 1, db, f) != db)
    return xt_fail(msg, XT_EIO, "npy: write failed: %s", strerror(errno));
  return 0;
}

int xt_npy_encode(const char *descr, int ndim, const int *shape, const void *data, unsigned char **out, size_t *len,
                  xt_msg *msg) {
  char head[XT_NPY_HEADER_MAX];
  const size_t hb = xt_npy_header(head, sizeof head, descr, ndim, shape);
  if (!hb) return xt_fail(msg, XT_EINVAL, "npy: bad dtype or shape");
  const size_t db = xt_npy_data_bytes(descr, ndim, shape);
  unsigned char *b = malloc(hb + db);
  if (!b) return xt_fail(msg, XT_ENOMEM, "npy: out of memory");
  memcpy(b, head, hb);
  memcpy(b + hb, data, db);
  *out = b;
  *len = hb + db;
  return 0;
}
