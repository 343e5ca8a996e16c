/* The error table's functions: names, descriptions, HTTP statuses and the message helper. */
#include "xt_err.h"

#include <stdarg.h>
#include <stdio.h>

const char *xt_strerror(int err) {
  switch (err) {
#define XT_ERR_DESC(name, val, http, desc) \
  case (val): return desc;
    XT_ERRNO_MAP(XT_ERR_DESC)
#undef XT_ERR_DESC
  default: return "unknown error";
  }
}

const char *xt_errname(int err) {
  switch (err) {
#define XT_ERR_NAME(name, val, http, desc) \
  case (val): return #name;
    XT_ERRNO_MAP(XT_ERR_NAME)
#undef XT_ERR_NAME
  default: return "UNKNOWN";
  }
}

int xt_errhttp(int err) {
  switch (err) {
#define XT_ERR_HTTP(name, val, http, desc) \
  case (val): return http;
    XT_ERRNO_MAP(XT_ERR_HTTP)
#undef XT_ERR_HTTP
  default: return 500;
  }
}

int xt_fail(xt_msg *msg, int err, const char *fmt, ...) {
  if (msg) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg->text, sizeof msg->text, fmt, ap);
    va_end(ap);
    /* One line whatever a file or a client put in the names a message quotes (a NanoVDB grid
     * name, a JSON key with an escaped newline): control characters become '?'. */
    for (unsigned char *c = (unsigned char *)msg->text; *c; c++)
      if (*c < 0x20 || *c == 0x7f) *c = '?';
  }
  return err;
}
