/* delta_bytes.c: where a delta's bytes go, for `stitch inspect`.
 *
 * A delta's bytes are either fixed (the header, the index's digests and
 * tensor table, each coded block's index entry and checksum, the
 * parameters a payload starts with) or they code the changes. At RL
 * densities on a small model the fixed ones can outweigh the changes
 * (docs/codec.md "Fixed bytes"); this counts them. The payload heads are
 * read as proto/delta.md lays them out, bounds-checked: what does not
 * parse counts as payload, so the figures always add up to the file. */
#include "codec/delta_internal.h"

#include <string.h>

/* Bytes of the varint at the head of R (0 if none parses). */
static size_t varint_at(rd *r) {
  uint64_t v;
  size_t at = r->pos;
  return rd_varint(r, &v) == 0 ? r->pos - at : 0;
}

/* A RANS table: u8 count, then that many varints. */
static int table_skip(rd *r) {
  uint8_t c;
  if (rd_u8(r, &c) != 0)
    return -1;
  for (unsigned i = 0; i < c; i++)
    if (varint_at(r) == 0)
      return -1;
  return 0;
}

/* A RANS payload's head: its two tables and three part lengths; the
 * parts themselves (raw bits, streams) are the coded changes. Adds the
 * head's bytes to *HEAD; R ends past the whole payload (LEN bytes from
 * where it started), or the call fails. */
static int rans_head(rd *r, size_t len, uint64_t *head) {
  size_t start = r->pos;
  if (table_skip(r) != 0 || table_skip(r) != 0)
    return -1;
  size_t heads = r->pos - start;
  for (int k = 0; k < 3; k++) {
    uint64_t n;
    size_t at = r->pos;
    if (rd_varint(r, &n) != 0 || n > r->len - r->pos)
      return -1;
    heads += r->pos - at;
    r->pos += (size_t)n;
  }
  if (r->pos - start > len)
    return -1;
  r->pos = start + len;
  *head += heads;
  return 0;
}

/* The parameter bytes at the head of one block's payload. */
static uint64_t params_of(int coding, const uint8_t *p, size_t len) {
  rd r = {p, len, 0};
  uint64_t head = 0;
  switch (coding) {
  case STITCH_CODING_SPARSE:
    return varint_at(&r);
  case STITCH_CODING_GAPS: {
    size_t n = varint_at(&r);
    return n == 0 ? 0 : n + GAPS_PARAM_BYTES <= len ? n + GAPS_PARAM_BYTES : len;
  }
  case STITCH_CODING_RANS:
    return rans_head(&r, len, &head) == 0 ? head : 0;
  case STITCH_CODING_RANSC: {
    uint8_t c;
    if (rd_u8(&r, &c) != 0 || c < 2 || c > 4)
      return 0;
    head = 1;
    for (unsigned i = 0; i + 1 < c; i++) {
      size_t n = varint_at(&r);
      if (n == 0)
        return 0;
      head += n;
    }
    for (unsigned i = 0; i < c; i++) {
      uint64_t k, n;
      size_t at = r.pos;
      if (rd_varint(&r, &k) != 0)
        return 0;
      if (k == 0) {
        head += r.pos - at;
        continue;
      }
      if (rd_varint(&r, &n) != 0 || n > r.len - r.pos)
        return 0;
      head += r.pos - at;
      rd part = {p + r.pos, (size_t)n, 0};
      if (rans_head(&part, (size_t)n, &head) != 0)
        return 0;
      r.pos += (size_t)n;
    }
    return head;
  }
  default: /* SAME has no payload; a dense block is all payload */
    return 0;
  }
}

void stitch_delta_bytes_of(const stitch_delta *dl, stitch_delta_bytes *all,
                           stitch_delta_tensor_bytes *per) {
  memset(all, 0, sizeof(*all));
  all->format = dl->format;
  all->file = dl->len;
  all->header = dl->header_len;
  all->index_head = dl->index_head;
  all->index_packing = (int64_t)dl->index_stored - (int64_t)dl->index_raw;
  for (size_t i = 0; i < dl->count; i++) {
    const delta_entry *e = &dl->t[i];
    stitch_delta_tensor_bytes t = {.table = e->table_bytes,
                                   .blocks = e->block_bytes};
    for (uint32_t b = 0; b < e->pub.blocks; b++) {
      if (e->coding[b] == STITCH_CODING_SAME)
        continue;
      t.checksums += dl->format == 1 ? 8 : 0; /* 2, 3: one in the index
                                                head; 4: the header's */
      uint64_t h = params_of(e->coding[b], dl->buf + e->payload_off[b],
                             (size_t)e->payload_len[b]);
      t.params += h;
      t.payload += e->payload_len[b] - h;
    }
    if (per != NULL)
      per[i] = t;
    all->tensors.table += t.table;
    all->tensors.blocks += t.blocks;
    all->tensors.checksums += t.checksums;
    all->tensors.params += t.params;
    all->tensors.payload += t.payload;
  }
}
