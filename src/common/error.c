/* error.c: the message table generated from STITCH_ERRNO_MAP. */
#include "stitch/error.h"
#include "stitch/version_info.h"

#include "common/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *stitch_strerror(int err) {
  switch (err) {
  case STITCH_OK:
    return "success";
#define STITCH_X_(name, msg)                                                  \
  case STITCH_E##name:                                                        \
    return msg;
    STITCH_ERRNO_MAP(STITCH_X_)
#undef STITCH_X_
  default:
    return "unknown error";
  }
}

const char *stitch_errname(int err) {
  switch (err) {
  case STITCH_OK:
    return "OK";
#define STITCH_X_(name, msg)                                                  \
  case STITCH_E##name:                                                        \
    return "E" #name;
    STITCH_ERRNO_MAP(STITCH_X_)
#undef STITCH_X_
  default:
    return "EUNKNOWN";
  }
}

int stitch_diag_set(stitch_diag *d, int err, const char *fmt, ...) {
  if (d != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
    va_end(ap);
  }
  return err;
}

int stitch_diag_prefix(stitch_diag *d, int err, const char *path) {
  if (d != NULL) {
    char tmp[STITCH_DIAG_MAX];
    memcpy(tmp, d->msg, sizeof(tmp));
    stitch_diag_set(d, err, "%.120s: %.190s", path, tmp);
  }
  return err;
}

#define STITCH_STR(x) #x
#define STITCH_XSTR(x) STITCH_STR(x)

const char *stitch_version(void) {
  return STITCH_VERSION_STRING " (wire protocol " STITCH_XSTR(
      STITCH_WIRE_PROTOCOL) ")";
}
