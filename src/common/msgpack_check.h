/* msgpack_check.h: a bounded pre-scan of untrusted msgpack.
 *
 * msgpack-c allocates from declared counts: a 5-byte array32 header makes
 * its unpacker reserve 24 bytes per claimed element before it has seen
 * one (docs/design.md, "Errors, ownership and limits"). Every buffer from
 * a peer or a file goes through msgpack_check first, which walks exactly
 * one object without allocating and refuses any count or length that the
 * bytes left cannot hold. After it passes, the object's node count is at
 * most its byte length, so unpacking it costs memory in proportion to the
 * bytes actually received.
 *
 * Also here: msgpack_check_head, which decodes one object header. With
 * msgpack_check as a "skip one object" primitive it lets a caller look at
 * a few fields of a large object (a manifest's swarm key) without
 * unpacking all of it. */
#ifndef STITCH_COMMON_MSGPACK_CHECK_H
#define STITCH_COMMON_MSGPACK_CHECK_H

#include "stitch/error.h"

#include <stddef.h>
#include <stdint.h>

/* Deepest nesting msgpack_check accepts as max_depth (its stack size). */
#define MSGPACK_CHECK_MAX_DEPTH 64

typedef enum msgpack_check_kind {
  MSGPACK_CHECK_NIL,
  MSGPACK_CHECK_BOOL,
  MSGPACK_CHECK_UINT,  /* any integer format holding a value >= 0 */
  MSGPACK_CHECK_INT,   /* a negative integer */
  MSGPACK_CHECK_FLOAT, /* float32 or float64 */
  MSGPACK_CHECK_STR,
  MSGPACK_CHECK_BIN,
  MSGPACK_CHECK_EXT,
  MSGPACK_CHECK_ARRAY,
  MSGPACK_CHECK_MAP
} msgpack_check_kind;

/* One decoded header. Integer kinds classify as msgpack-c does (an int8
 * holding 5 is MSGPACK_CHECK_UINT, its POSITIVE_INTEGER). */
typedef struct msgpack_check_hdr {
  msgpack_check_kind kind;
  size_t size; /* bytes of the header, including an ext's type byte */
  /* STR, BIN, EXT: payload bytes after the header; ARRAY: elements; MAP:
   * key-value pairs; UINT: the value; INT: the value as two's complement;
   * BOOL: 0 or 1; NIL, FLOAT: 0. */
  uint64_t n;
} msgpack_check_hdr;

/* Decodes the header at buf[pos] (buf holds len bytes). Fails with
 * STITCH_ETRUNCATED when the header itself runs past len and with
 * STITCH_EFORMAT on the never-used byte 0xc1. Does not check that a
 * payload or the elements of a container exist: msgpack_check does. */
int msgpack_check_head(const uint8_t *buf, size_t len, size_t pos,
                       msgpack_check_hdr *h, stitch_diag *d);

/* Walks exactly one msgpack object at the start of buf (len bytes) and
 * sets *consumed to its length; bytes after it are the caller's business.
 * Fails, before reading past the header that claims them:
 *  - STITCH_ETRUNCATED: a str/bin/ext length, or an array count (one byte
 *    at least per element) or map count (two per pair), added to what the
 *    open containers still expect, exceeds the bytes left;
 *  - STITCH_ELIMIT: containers nest more than max_depth deep (the outer
 *    object is at depth 1; 0 allows scalars only);
 *  - STITCH_EFORMAT: the reserved byte 0xc1;
 *  - STITCH_EINVAL: max_depth > MSGPACK_CHECK_MAX_DEPTH.
 * Iterative, O(len) time, no allocation. Diag lines start "msgpack:" and
 * give the byte offset. */
int msgpack_check(const uint8_t *buf, size_t len, unsigned max_depth,
                  size_t *consumed, stitch_diag *d);

#endif
