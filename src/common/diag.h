/* diag.h: internal helpers for reporting errors with a reason. */
#ifndef STITCH_COMMON_DIAG_H
#define STITCH_COMMON_DIAG_H

#include "stitch/error.h"

/* Writes a formatted reason into d (if not NULL) and returns err, so a
 * failure reads: return stitch_diag_set(d, STITCH_EFORMAT, "...", ...); */
int stitch_diag_set(stitch_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts "PATH: " before the reason already in d; returns err. */
int stitch_diag_prefix(stitch_diag *d, int err, const char *path);

#define RETURN_IF(cond, d, err, ...)                                          \
  do {                                                                        \
    if (cond)                                                                 \
      return stitch_diag_set((d), (err), __VA_ARGS__);                        \
  } while (0)

#define CHECK_RC(expr)                                                        \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_ != 0)                                                             \
      return rc_;                                                             \
  } while (0)

#endif
