/* bytes.h: a growable byte buffer with a hard cap (after curl's dynbuf)
 * and a bounds-checked reader for little-endian fields and LEB128 varints.
 * Every reader call fails with STITCH_ETRUNCATED once past the end. */
#ifndef STITCH_COMMON_BYTES_H
#define STITCH_COMMON_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Growable byte buffer with a hard cap (curl's dynbuf idea). */
typedef struct dbuf {
  uint8_t *p;
  size_t len, cap, max;
} dbuf;
int dbuf_reserve(dbuf *b, size_t more);
int dbuf_put(dbuf *b, const void *src, size_t n);
int dbuf_varint(dbuf *b, uint64_t v);
int dbuf_u8(dbuf *b, uint8_t v);
int dbuf_u64(dbuf *b, uint64_t v);
void dbuf_free(dbuf *b);
/* Empties B, and gives its storage back if it holds more than KEEP bytes:
 * a buffer one large message grew does not stay that size. */
void dbuf_empty(dbuf *b, size_t keep);

/* Bounds-checked reader. Every get fails once past the end. */
typedef struct rd {
  const uint8_t *p;
  size_t len, pos;
} rd;
int rd_varint(rd *r, uint64_t *v);
int rd_u8(rd *r, uint8_t *v);
int rd_u64(rd *r, uint64_t *v);
int rd_bytes(rd *r, size_t n, const uint8_t **out);

/* One load and one store, not eight: gcc -O2 keeps the byte loops as
 * loops, and the swarm core's bitset scans (fetch.c wanted_from) read a
 * word this way at every pick (a third of pick's time in stitch-sim). */
static inline uint64_t le64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}
static inline void put_le64(uint8_t *p, uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  memcpy(p, &v, 8);
}

/* In ascending POS[0..n): the first k with pos[k] >= e, else n. */
static inline uint64_t lower_bound_u64(const uint64_t *pos, uint64_t n,
                                       uint64_t e) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (pos[mid] < e)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}


#endif
