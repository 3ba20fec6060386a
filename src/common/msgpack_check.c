/* msgpack_check.c: see msgpack_check.h. The format is
 * https://github.com/msgpack/msgpack/blob/master/spec.md; multi-byte
 * integers and lengths are big-endian. */
#include "common/msgpack_check.h"

#include "common/diag.h"

static uint64_t be(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

/* Sets *h from a header of `size` bytes whose last `w` bytes hold n. */
static int head_var(const uint8_t *buf, size_t len, size_t pos,
                    msgpack_check_hdr *h, msgpack_check_kind kind,
                    unsigned size, unsigned w, stitch_diag *d) {
  RETURN_IF(len - pos < size, d, STITCH_ETRUNCATED,
            "msgpack: offset %zu: header of %u bytes but %zu left", pos, size,
            len - pos);
  h->kind = kind;
  h->size = size;
  h->n = be(buf + pos + 1, w);
  return 0;
}

int msgpack_check_head(const uint8_t *buf, size_t len, size_t pos,
                       msgpack_check_hdr *h, stitch_diag *d) {
  RETURN_IF(pos >= len, d, STITCH_ETRUNCATED,
            "msgpack: offset %zu: object expected, input ends", pos);
  uint8_t b = buf[pos];
  h->n = 0;
  h->size = 1;
  if (b <= 0x7f) { /* positive fixint */
    h->kind = MSGPACK_CHECK_UINT;
    h->n = b;
    return 0;
  }
  if (b >= 0xe0) { /* negative fixint */
    h->kind = MSGPACK_CHECK_INT;
    h->n = (uint64_t)(int64_t)(int8_t)b;
    return 0;
  }
  if (b <= 0x8f) {
    h->kind = MSGPACK_CHECK_MAP;
    h->n = b & 0x0f;
    return 0;
  }
  if (b <= 0x9f) {
    h->kind = MSGPACK_CHECK_ARRAY;
    h->n = b & 0x0f;
    return 0;
  }
  if (b <= 0xbf) {
    h->kind = MSGPACK_CHECK_STR;
    h->n = b & 0x1f;
    return 0;
  }
  switch (b) {
  case 0xc0:
    h->kind = MSGPACK_CHECK_NIL;
    return 0;
  case 0xc2:
  case 0xc3:
    h->kind = MSGPACK_CHECK_BOOL;
    h->n = b & 1;
    return 0;
  case 0xc4: /* bin 8/16/32 */
  case 0xc5:
  case 0xc6: {
    unsigned w = 1u << (b - 0xc4);
    return head_var(buf, len, pos, h, MSGPACK_CHECK_BIN, 1 + w, w, d);
  }
  case 0xc7: /* ext 8/16/32: length, then a type byte */
  case 0xc8:
  case 0xc9: {
    unsigned w = 1u << (b - 0xc7);
    return head_var(buf, len, pos, h, MSGPACK_CHECK_EXT, 2 + w, w, d);
  }
  case 0xca: /* float 32/64: the payload is part of the header */
  case 0xcb:
    return head_var(buf, len, pos, h, MSGPACK_CHECK_FLOAT, b == 0xca ? 5 : 9, 0,
                    d);
  case 0xcc: /* uint 8/16/32/64 */
  case 0xcd:
  case 0xce:
  case 0xcf: {
    unsigned w = 1u << (b - 0xcc);
    return head_var(buf, len, pos, h, MSGPACK_CHECK_UINT, 1 + w, w, d);
  }
  case 0xd0: /* int 8/16/32/64 */
  case 0xd1:
  case 0xd2:
  case 0xd3: {
    unsigned w = 1u << (b - 0xd0);
    CHECK_RC(head_var(buf, len, pos, h, MSGPACK_CHECK_UINT, 1 + w, w, d));
    if (w < 8 && (h->n >> (8 * w - 1)) != 0) /* sign-extend */
      h->n |= ~0ull << (8 * w);
    if ((int64_t)h->n < 0)
      h->kind = MSGPACK_CHECK_INT;
    return 0;
  }
  case 0xd4: /* fixext 1/2/4/8/16: a type byte, then the payload */
  case 0xd5:
  case 0xd6:
  case 0xd7:
  case 0xd8:
    CHECK_RC(head_var(buf, len, pos, h, MSGPACK_CHECK_EXT, 2, 0, d));
    h->n = 1u << (b - 0xd4);
    return 0;
  case 0xd9: /* str 8/16/32 */
  case 0xda:
  case 0xdb: {
    unsigned w = 1u << (b - 0xd9);
    return head_var(buf, len, pos, h, MSGPACK_CHECK_STR, 1 + w, w, d);
  }
  case 0xdc: /* array 16/32 */
  case 0xdd: {
    unsigned w = b == 0xdc ? 2 : 4;
    return head_var(buf, len, pos, h, MSGPACK_CHECK_ARRAY, 1 + w, w, d);
  }
  case 0xde: /* map 16/32 */
  case 0xdf: {
    unsigned w = b == 0xde ? 2 : 4;
    return head_var(buf, len, pos, h, MSGPACK_CHECK_MAP, 1 + w, w, d);
  }
  default: /* 0xc1 */
    return stitch_diag_set(d, STITCH_EFORMAT,
                           "msgpack: offset %zu: reserved byte 0xc1", pos);
  }
}

static const char *kind_name(msgpack_check_kind k) {
  switch (k) {
  case MSGPACK_CHECK_STR:
    return "str";
  case MSGPACK_CHECK_BIN:
    return "bin";
  case MSGPACK_CHECK_EXT:
    return "ext";
  case MSGPACK_CHECK_ARRAY:
    return "array";
  case MSGPACK_CHECK_MAP:
    return "map";
  default:
    return "object";
  }
}

int msgpack_check(const uint8_t *buf, size_t len, unsigned max_depth,
                  size_t *consumed, stitch_diag *d) {
  RETURN_IF(max_depth > MSGPACK_CHECK_MAX_DEPTH, d, STITCH_EINVAL,
            "msgpack: nesting bound %u above %u", max_depth,
            MSGPACK_CHECK_MAX_DEPTH);
  /* left[k]: objects still expected by the k-th open container (a map
   * expects two per pair); pending: their sum. Each needs a byte at least,
   * so pending <= len - pos holds after every step, which is what bounds
   * every count by the bytes that are really there. */
  uint64_t left[MSGPACK_CHECK_MAX_DEPTH];
  unsigned depth = 0;
  uint64_t pending = 0;
  size_t pos = 0;
  do {
    msgpack_check_hdr h;
    size_t at = pos;
    CHECK_RC(msgpack_check_head(buf, len, pos, &h, d));
    pos += h.size;
    if (depth > 0) {
      left[depth - 1]--;
      pending--;
    }
    uint64_t room = len - pos; /* >= 0: the header was seen whole */
    RETURN_IF(pending > room, d, STITCH_ETRUNCATED,
              "msgpack: offset %zu: %llu more objects expected but %llu "
              "bytes left",
              at, (unsigned long long)pending, (unsigned long long)room);
    room -= pending;
    switch (h.kind) {
    case MSGPACK_CHECK_STR:
    case MSGPACK_CHECK_BIN:
    case MSGPACK_CHECK_EXT:
      RETURN_IF(h.n > room, d, STITCH_ETRUNCATED,
                "msgpack: offset %zu: %s of %llu bytes but %llu left", at,
                kind_name(h.kind), (unsigned long long)h.n,
                (unsigned long long)room);
      pos += (size_t)h.n;
      break;
    case MSGPACK_CHECK_ARRAY:
    case MSGPACK_CHECK_MAP: {
      RETURN_IF(depth >= max_depth, d, STITCH_ELIMIT,
                "msgpack: offset %zu: containers nested deeper than %u", at,
                max_depth);
      /* n < 2^32, so doubling cannot overflow. */
      uint64_t objs = h.kind == MSGPACK_CHECK_MAP ? 2 * h.n : h.n;
      RETURN_IF(objs > room, d, STITCH_ETRUNCATED,
                "msgpack: offset %zu: %s of %llu %s but %llu bytes left", at,
                kind_name(h.kind), (unsigned long long)h.n,
                h.kind == MSGPACK_CHECK_MAP ? "pairs" : "elements",
                (unsigned long long)room);
      if (objs > 0) {
        left[depth++] = objs;
        pending += objs;
      }
      break;
    }
    default: /* scalars: the header is the whole object */
      break;
    }
    while (depth > 0 && left[depth - 1] == 0)
      depth--;
  } while (depth > 0);
  *consumed = pos;
  return 0;
}
