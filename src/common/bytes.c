/* bytes.c: see bytes.h. */
#include "common/bytes.h"

#include "stitch/error.h"

#include <stdlib.h>
#include <string.h>

int dbuf_reserve(dbuf *b, size_t more) {
  if (more > b->max || b->len > b->max - more)
    return STITCH_ELIMIT;
  if (b->len + more <= b->cap)
    return 0;
  size_t nc = b->cap ? b->cap : 256;
  while (nc < b->len + more)
    nc = nc > b->max / 2 ? b->max : nc * 2;
  uint8_t *np = realloc(b->p, nc);
  if (np == NULL)
    return STITCH_ENOMEM;
  b->p = np;
  b->cap = nc;
  return 0;
}

int dbuf_put(dbuf *b, const void *src, size_t n) {
  int rc = dbuf_reserve(b, n);
  if (rc == 0 && n > 0) {
    memcpy(b->p + b->len, src, n);
    b->len += n;
  }
  return rc;
}

int dbuf_u8(dbuf *b, uint8_t v) { return dbuf_put(b, &v, 1); }

int dbuf_u64(dbuf *b, uint64_t v) {
  uint8_t t[8];
  put_le64(t, v);
  return dbuf_put(b, t, 8);
}

int dbuf_varint(dbuf *b, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  do {
    t[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v)
      t[n] |= 0x80;
    n++;
  } while (v);
  return dbuf_put(b, t, n);
}

void dbuf_free(dbuf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void dbuf_empty(dbuf *b, size_t keep) {
  b->len = 0;
  if (b->cap > keep)
    dbuf_free(b);
}

int rd_bytes(rd *r, size_t n, const uint8_t **out) {
  if (n > r->len - r->pos)
    return STITCH_ETRUNCATED;
  *out = r->p + r->pos;
  r->pos += n;
  return 0;
}

int rd_u8(rd *r, uint8_t *v) {
  const uint8_t *p;
  int rc = rd_bytes(r, 1, &p);
  if (rc == 0)
    *v = *p;
  return rc;
}

int rd_u64(rd *r, uint64_t *v) {
  const uint8_t *p;
  int rc = rd_bytes(r, 8, &p);
  if (rc == 0)
    *v = le64(p);
  return rc;
}

/* Rejects overlong encodings past 10 bytes and bits above 2^64. */
int rd_varint(rd *r, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned shift = 0; shift < 70; shift += 7) {
    uint8_t b;
    int rc = rd_u8(r, &b);
    if (rc != 0)
      return rc;
    if (shift == 63 && (b & 0x7e))
      return STITCH_EFORMAT;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return STITCH_EFORMAT;
}
