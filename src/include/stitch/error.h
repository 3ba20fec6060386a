/* stitch/error.h: error codes and diagnostics for libstitch.
 *
 * Every fallible function returns 0 on success or a negative STITCH_E* code.
 * Functions that parse input also take an optional stitch_diag*, into which
 * they write one human-readable line naming what was wrong and where.
 * There is no global error state.
 */
#ifndef STITCH_ERROR_H
#define STITCH_ERROR_H

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

/* X(name, message): the one list the enum and its string table come from. */
#define STITCH_ERRNO_MAP(X)                                                   \
  X(NOMEM, "out of memory")                                                   \
  X(INVAL, "invalid argument")                                                \
  X(IO, "I/O error")                                                          \
  X(FORMAT, "malformed input")                                                \
  X(TRUNCATED, "input is truncated")                                          \
  X(CHECKSUM, "checksum mismatch")                                            \
  X(LIMIT, "input exceeds a hard limit")                                      \
  X(DTYPE, "unsupported or unknown dtype")                                    \
  X(MISMATCH, "inputs do not match")                                          \
  X(BASE, "delta does not apply to this base")                                \
  X(DIGEST, "digest mismatch after apply")                                    \
  X(VERSION, "unsupported format version")                                    \
  X(NOTFOUND, "not found")                                                    \
  X(EXISTS, "already exists")                                                 \
  X(SWARM, "manifest belongs to another swarm")                               \
  X(SIGNATURE, "signature does not verify")                                   \
  X(ROLLBACK, "version rollback or fork")                                     \
  X(GAP, "version chain has a gap")                                          \
  X(ADMIT, "not admitted to the swarm")

typedef enum stitch_errno {
  STITCH_OK = 0,
#define STITCH_X_(name, msg) STITCH_E##name,
  STITCH_E_FIRST_ = -1000,
  STITCH_ERRNO_MAP(STITCH_X_)
#undef STITCH_X_
  STITCH_E_LAST_
} stitch_errno;

/* Static strings; never NULL. Unknown codes give "unknown error". */
const char *stitch_strerror(int err);
const char *stitch_errname(int err);

#define STITCH_DIAG_MAX 320

/* Caller-owned; functions write a NUL-terminated line on failure. */
typedef struct stitch_diag {
  char msg[STITCH_DIAG_MAX];
} stitch_diag;

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
