/* Error codes for every xtwin module, generated from one X-macro table.
 *
 * Functions return 0 on success or a negative XT_E* code. The human detail (file name, field,
 * byte offset, CUDA message) goes into a caller-supplied xt_msg buffer, so the same code can be
 * reported by a CLI as one line and by the server as a JSON error name. */
#ifndef XT_ERR_H
#define XT_ERR_H

#include <stddef.h>

/* name, value, http status, short description */
#define XT_ERRNO_MAP(X)                                                              \
  X(OK, 0, 200, "success")                                                           \
  X(INVAL, -1, 400, "invalid argument")                                             \
  X(NOMEM, -2, 500, "out of memory")                                                \
  X(IO, -3, 500, "input/output error")                                              \
  X(FORMAT, -4, 400, "malformed file or message")                                   \
  X(UNSUPPORTED, -5, 400, "unsupported feature or type")                            \
  X(RANGE, -6, 400, "value out of range")                                           \
  X(TRUNCATED, -7, 400, "truncated data")                                           \
  X(NOTFOUND, -8, 404, "not found")                                                 \
  X(NODEV, -9, 503, "no device or backend available")                               \
  X(DEVICE, -10, 500, "device error")                                               \
  X(NANDATA, -11, 400, "non-finite value in data")                                  \
  X(EXISTS, -12, 409, "already exists")                                             \
  X(BUSY, -13, 409, "busy")                                                         \
  X(TOOLARGE, -14, 413, "too large")                                                \
  X(AUTH, -15, 401, "unauthorized")                                                 \
  X(INTERNAL, -16, 500, "internal error")                                           \
  X(PERM, -17, 403, "not permitted")                                                \
  X(STATE, -18, 409, "not allowed in the current state")

enum {
#define XT_ERR_ENUM(name, val, http, desc) XT_E##name = (val),
  XT_ERRNO_MAP(XT_ERR_ENUM)
#undef XT_ERR_ENUM
};

/* "invalid argument" etc.; never NULL. */
const char *xt_strerror(int err);
/* "INVAL", "NOMEM" ...: stable machine-readable names (REST error bodies). */
const char *xt_errname(int err);
/* HTTP status a request failing with err should get. */
int xt_errhttp(int err);

/* A caller-supplied message buffer. Functions that fail write one line (no trailing newline)
 * naming what was wrong; callers may pass NULL when they do not care. */
typedef struct xt_msg {
  char text[512];
} xt_msg;

/* printf into msg (if non-NULL; control characters, such as a newline quoted from a file, become
 * '?') and return err, so a failure site is one statement:
 *   return xt_fail(msg, XT_EFORMAT, "%s: bad dimension %d", path, n); */
int xt_fail(xt_msg *msg, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* XT_ERR_H */
