/* delta_apply.c: parse a delta and apply it.
 *
 * Parsing checks the header, then the index checksum, then every field of
 * the index against the bytes that are actually there: counts are compared
 * with the bytes left before anything is allocated for them, and payload
 * lengths must add up to the file exactly. Block payloads are checksummed
 * when they are decoded, so a tensor's blocks can be applied in parallel
 * and a bad block is named precisely. */
#include "codec/delta_internal.h"
#include "common/diag.h"
#include "common/fileio.h"
#include "common/parallel.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#define FAIL(d, err, ...) (rc = stitch_diag_set((d), (err), __VA_ARGS__))

/* Formats 1 to 3: the 48-byte header, checked by its own XXH3-64; the
 * index's XXH3-64 (*IXSUM) is checked once it is decompressed. */
static int read_header(stitch_delta *dl, uint64_t *stored, uint64_t *raw,
                       uint64_t *ixsum, int *zst, stitch_diag *d) {
  const uint8_t *b = dl->buf;
  RETURN_IF(dl->len < DELTA_HEADER_BYTES, d, STITCH_ETRUNCATED,
            "delta: %zu bytes, shorter than its %d-byte header", dl->len,
            DELTA_HEADER_BYTES);
  RETURN_IF(XXH3_64bits(b, 40) != le64(b + 40), d, STITCH_ECHECKSUM,
            "delta: header checksum mismatch");
  unsigned fmt = b[8] | b[9] << 8, flags = b[10] | b[11] << 8;
  RETURN_IF(fmt < 1 || fmt > STITCH_DELTA_FORMAT, d, STITCH_EVERSION,
            "delta: format %u, this build reads formats 1 to %d", fmt,
            STITCH_DELTA_FORMAT);
  /* Format 4 has its own header (read_header4). */
  RETURN_IF(fmt > 3, d, STITCH_EFORMAT,
            "delta: format %u in the 48-byte header of formats 1 to 3", fmt);
  dl->format = fmt;
  dl->header_len = DELTA_HEADER_BYTES;
  RETURN_IF(flags != 0 || b[12] > DELTA_INDEX_ZSTD || b[13] || b[14] || b[15],
            d, STITCH_EVERSION, "delta: unknown flags");
  *zst = b[12] == DELTA_INDEX_ZSTD;
  *stored = le64(b + 16);
  *raw = le64(b + 24);
  *ixsum = le64(b + 32);
  RETURN_IF(*stored > dl->len - DELTA_HEADER_BYTES, d, STITCH_ETRUNCATED,
            "delta: index of %llu bytes runs past the file",
            (unsigned long long)*stored);
  return 0;
}

/* Format 4's header (proto/delta.md "File layout, format 4"): magic,
 * format, flags, the index's stored length, then the one XXH3-64 of the
 * whole file without its own 8 bytes, checked here, before anything
 * else is read: it covers this header, the index and the payloads. A
 * zstd index's raw length is its frame's declared content size. */
static int read_header4(stitch_delta *dl, uint64_t *stored, uint64_t *raw,
                        int *zst, stitch_diag *d) {
  const uint8_t *b = dl->buf;
  rd r = {b, dl->len, DELTA4_MAGIC_BYTES};
  uint8_t fmt, flags;
  RETURN_IF(rd_u8(&r, &fmt), d, STITCH_ETRUNCATED,
            "delta: %zu bytes, shorter than its header", dl->len);
  RETURN_IF(fmt != 4, d, STITCH_EVERSION,
            "delta: format %u, this build reads formats 1 to %d", fmt,
            STITCH_DELTA_FORMAT);
  dl->format = fmt;
  RETURN_IF(rd_u8(&r, &flags), d, STITCH_ETRUNCATED,
            "delta: %zu bytes, shorter than its header", dl->len);
  RETURN_IF(flags & ~(DELTA4_F_ZSTD | DELTA4_F_TABLE), d, STITCH_EVERSION,
            "delta: unknown flags 0x%02x", flags);
  size_t at = r.pos;
  if (rd_varint(&r, stored) != 0) {
    /* A varint is at most 10 bytes: with 10 left it is malformed. */
    RETURN_IF(dl->len - at < 10, d, STITCH_ETRUNCATED,
              "delta: %zu bytes, shorter than its header", dl->len);
    RETURN_IF(1, d, STITCH_EFORMAT, "delta: bad index length in the header");
  }
  RETURN_IF(dl->len - r.pos < 8, d, STITCH_ETRUNCATED,
            "delta: %zu bytes, shorter than its header", dl->len);
  size_t sum_at = r.pos;
  dl->header_len = sum_at + 8;
  RETURN_IF(*stored > dl->len - dl->header_len, d, STITCH_ETRUNCATED,
            "delta: index of %llu bytes runs past the file",
            (unsigned long long)*stored);
  uint64_t got;
  RETURN_IF(delta4_file_sum(b, dl->len, sum_at, &got) != 0, d, STITCH_ENOMEM,
            "out of memory");
  RETURN_IF(got != le64(b + sum_at), d, STITCH_ECHECKSUM,
            "delta: checksum mismatch (a damaged or truncated file)");
  *zst = (flags & DELTA4_F_ZSTD) != 0;
  dl->table_as_base = (flags & DELTA4_F_TABLE) != 0;
  *raw = *stored;
  if (*zst) {
    /* The frame's header, its magic put back: at most 18 bytes. */
    uint8_t fh[4 + 18];
    size_t fl = *stored < 18 ? (size_t)*stored : 18;
    memcpy(fh, DELTA4_ZSTD_MAGIC, 4);
    memcpy(fh + 4, b + dl->header_len, fl);
    unsigned long long cs = ZSTD_getFrameContentSize(fh, 4 + fl);
    RETURN_IF(cs == ZSTD_CONTENTSIZE_UNKNOWN || cs == ZSTD_CONTENTSIZE_ERROR,
              d, STITCH_EFORMAT,
              "delta: index frame does not declare its size");
    *raw = cs;
  }
  return 0;
}

int delta4_file_sum(const uint8_t *buf, size_t len, size_t sum_at,
                    uint64_t *sum) {
  XXH3_state_t *xs = XXH3_createState();
  if (xs == NULL || XXH3_64bits_reset(xs) != XXH_OK) {
    XXH3_freeState(xs);
    return STITCH_ENOMEM;
  }
  XXH3_64bits_update(xs, buf, sum_at);
  XXH3_64bits_update(xs, buf + sum_at + 8, len - sum_at - 8);
  *sum = XXH3_64bits_digest(xs);
  XXH3_freeState(xs);
  return 0;
}

/* Limits on the raw index, before it is allocated (all formats). */
static int check_index_size(uint64_t stored, uint64_t raw, int zst,
                            stitch_diag *d) {
  RETURN_IF(raw > DELTA_MAX_INDEX, d, STITCH_ELIMIT,
            "delta: index of %llu bytes exceeds the %u-byte limit",
            (unsigned long long)raw, DELTA_MAX_INDEX);
  RETURN_IF(!zst && raw != stored, d, STITCH_EFORMAT,
            "delta: index sizes disagree");
  /* Names and checksums do not compress 64-fold; a larger claim is bogus. */
  RETURN_IF(zst && raw > 64 * stored + 4096, d, STITCH_ELIMIT,
            "delta: index claims an implausible compression ratio");
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A tensor's name, NL bytes at NAME: no NUL, valid UTF-8. */
static int check_name(const uint8_t *name, uint64_t nl, stitch_diag *d) {
  RETURN_IF(nl == 0 || nl > STITCH_ST_MAX_NAME ||
                memchr(name, 0, (size_t)nl) != NULL,
            d, STITCH_EFORMAT, "delta index: bad tensor name");
  json_t *valid = json_stringn((const char *)name, (size_t)nl);
  RETURN_IF(valid == NULL, d, STITCH_EFORMAT,
            "delta index: a tensor name is not valid UTF-8");
  json_decref(valid);
  return 0;
}

static int parse_flags(stitch_delta *dl, rd *r, delta_entry *e,
                       unsigned allowed, uint64_t *claimed, stitch_diag *d);

/* A tensor's dtype, shape and flags (all formats), and room for its
 * blocks: each takes at least one byte of what R has left. */
static int parse_type(stitch_delta *dl, rd *r, delta_entry *e,
                      uint64_t *claimed, stitch_diag *d) {
  uint8_t dt, nd;
  stitch_delta_tensor *t = &e->pub;
  RETURN_IF(rd_u8(r, &dt) || rd_u8(r, &nd), d, STITCH_ETRUNCATED,
            "delta index: truncated at tensor '%s'", t->name);
  t->dtype = (stitch_dtype)dt;
  RETURN_IF(stitch_dtype_size(t->dtype) == 0, d, STITCH_EDTYPE,
            "delta index: tensor '%s' has unknown dtype %u", t->name, dt);
  RETURN_IF(nd > STITCH_MAX_DIMS, d, STITCH_EFORMAT,
            "delta index: tensor '%s' has %u dims", t->name, nd);
  t->ndim = nd;
  uint64_t numel = 1;
  for (int i = 0; i < nd; i++) {
    RETURN_IF(rd_varint(r, &t->shape[i]), d, STITCH_ETRUNCATED,
              "delta index: truncated at tensor '%s'", t->name);
    RETURN_IF(t->shape[i] && numel > (UINT64_MAX / 16) / t->shape[i], d,
              STITCH_ELIMIT, "delta index: tensor '%s' is too large", t->name);
    numel *= t->shape[i];
  }
  t->nbytes = numel * stitch_dtype_size(t->dtype);
  return parse_flags(dl, r, e, DELTA_TF_NIBBLE | DELTA_TF_NEW, claimed, d);
}

/* A tensor's flags (any of ALLOWED) and room for its blocks, its dtype
 * and shape known: each block takes at least one byte of what R has left
 * (all formats; format 3 with the base's tensors reads only this). */
static int parse_flags(stitch_delta *dl, rd *r, delta_entry *e,
                       unsigned allowed, uint64_t *claimed, stitch_diag *d) {
  stitch_delta_tensor *t = &e->pub;
  uint64_t numel = t->nbytes / stitch_dtype_size(t->dtype);
  RETURN_IF(rd_u8(r, &e->flags) || e->flags & ~allowed, d, STITCH_EFORMAT,
            "delta index: tensor '%s' has bad flags", t->name);
  int nibble = e->flags & DELTA_TF_NIBBLE;
  t->is_new = (e->flags & DELTA_TF_NEW) != 0;
  sym_fmt f;
  RETURN_IF(sym_fmt_for(t->dtype, nibble, &f) != 0, d, STITCH_EFORMAT,
            "delta index: tensor '%s' cannot be coded as nibbles", t->name);
  t->sym_bits = f.bits;
  t->symbols = nibble ? 2 * t->nbytes : numel;
  uint64_t B = 1ull << dl->block_log2;
  uint64_t nb = (t->symbols + B - 1) / B;
  /* Each block takes at least one byte of index; in format 2 one after
   * every tensor's type, so the blocks claimed before count too. */
  uint64_t left = r->len - r->pos, before = claimed ? *claimed : 0;
  RETURN_IF(before > left || nb > left - before, d, STITCH_ETRUNCATED,
            "delta index: tensor '%s' lists %llu blocks the index does not "
            "hold",
            t->name, (unsigned long long)nb);
  t->blocks = (uint32_t)nb;
  if (claimed != NULL)
    *claimed += nb;
  size_t n = nb ? (size_t)nb : 1;
  e->coding = malloc(n);
  e->payload_off = malloc(n * sizeof(uint64_t));
  e->payload_len = malloc(n * sizeof(uint64_t));
  e->blk_changed = malloc(n * sizeof(uint64_t));
  e->checksum = malloc(n * sizeof(uint64_t));
  RETURN_IF(!e->coding || !e->payload_off || !e->payload_len ||
                !e->blk_changed || !e->checksum,
            d, STITCH_ENOMEM, "out of memory");
  return 0;
}

/* Block B's coding C (both formats). */
static int check_coding(const delta_entry *e, uint64_t b, uint8_t c,
                        stitch_diag *d) {
  const stitch_delta_tensor *t = &e->pub;
  RETURN_IF(c >= STITCH_CODING_COUNT_, d, STITCH_EFORMAT,
            "delta index: tensor '%s' block %llu has unknown coding %u",
            t->name, (unsigned long long)b, c);
  RETURN_IF(t->is_new && c != STITCH_CODING_PLANES && c != STITCH_CODING_RAW,
            d, STITCH_EFORMAT,
            "delta index: new tensor '%s' uses a coding that needs a base",
            t->name);
  return 0;
}

/* Block B's length LEN and change count CH, its payload at *PAYLOAD_AT
 * (both formats); moves *PAYLOAD_AT past it. */
static int take_block(stitch_delta *dl, delta_entry *e, uint64_t b, uint8_t c,
                      uint64_t len, uint64_t ch, uint64_t sum,
                      uint64_t *payload_at, stitch_diag *d) {
  stitch_delta_tensor *t = &e->pub;
  if (c != STITCH_CODING_SAME) {
    uint64_t B = 1ull << dl->block_log2;
    uint64_t bsyms = t->symbols - b * B < B ? t->symbols - b * B : B;
    RETURN_IF(ch > bsyms, d, STITCH_EFORMAT,
              "delta index: tensor '%s' block %llu claims more changes than "
              "symbols",
              t->name, (unsigned long long)b);
    RETURN_IF(len > dl->len - *payload_at, d, STITCH_ETRUNCATED,
              "delta: tensor '%s' block %llu runs past the end of the file",
              t->name, (unsigned long long)b);
  }
  e->coding[b] = c;
  e->payload_off[b] = *payload_at;
  e->payload_len[b] = len;
  e->blk_changed[b] = ch;
  e->checksum[b] = sum;
  *payload_at += len;
  t->blocks_by_coding[c]++;
  t->changed += ch;
  t->encoded += len;
  return 0;
}

/* Format 1: a tensor's entry, name to blocks. */
static int parse_tensor(stitch_delta *dl, rd *r, delta_entry *e, char **np,
                        uint64_t *payload_at, stitch_diag *d) {
  size_t at = r->pos;
  uint64_t nl;
  const uint8_t *name;
  RETURN_IF(rd_varint(r, &nl) || nl == 0 || nl > STITCH_ST_MAX_NAME ||
                rd_bytes(r, (size_t)nl, &name),
            d, STITCH_EFORMAT, "delta index: bad tensor name");
  CHECK_RC(check_name(name, nl, d));
  memcpy(*np, name, (size_t)nl);
  (*np)[nl] = 0;
  stitch_delta_tensor *t = &e->pub;
  t->name = *np;
  *np += nl + 1;
  CHECK_RC(parse_type(dl, r, e, NULL, d));
  e->table_bytes = r->pos - at;
  at = r->pos;
  for (uint64_t b = 0; b < t->blocks; b++) {
    uint8_t c;
    uint64_t len = 0, ch = 0, sum = 0;
    RETURN_IF(rd_u8(r, &c), d, STITCH_ETRUNCATED,
              "delta index: truncated in tensor '%s'", t->name);
    CHECK_RC(check_coding(e, b, c, d));
    if (c != STITCH_CODING_SAME)
      RETURN_IF(rd_varint(r, &len) || rd_varint(r, &ch) || rd_u64(r, &sum), d,
                STITCH_ETRUNCATED, "delta index: truncated in tensor '%s'",
                t->name);
    CHECK_RC(take_block(dl, e, b, c, len, ch, sum, payload_at, d));
  }
  /* Checksums apart: 8 bytes a coded block (stitch_delta_bytes_of). */
  e->block_bytes =
      r->pos - at - 8 * (t->blocks - t->blocks_by_coding[STITCH_CODING_SAME]);
  return 0;
}

/* Format 2's names (proto/delta.md "Index, format 2"): each is the first
 * `shared` bytes of the name before, then `suffix` bytes. They are read
 * twice, to size the names' buffer by what they hold (at most
 * DELTA_MAX_NAMES) before it is allocated, then to fill it. */
static int parse_names(stitch_delta *dl, rd *r, uint64_t n, stitch_diag *d) {
  size_t start = r->pos, total = 0;
  /* Front coding lets a name's bytes outgrow the index's; real names
   * hold 2-3 times their column's bytes. */
  size_t cap = r->len < (DELTA_MAX_NAMES - 65536) / 64 ? 64 * r->len + 65536
                                                        : DELTA_MAX_NAMES;
  for (int fill = 0; fill < 2; fill++) {
    uint64_t prev = 0;
    const char *pn = NULL;
    char *np = dl->names;
    r->pos = start;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t shared, suffix;
      const uint8_t *sp;
      size_t at = r->pos;
      RETURN_IF(rd_varint(r, &shared) || rd_varint(r, &suffix) ||
                    shared > prev || suffix > STITCH_ST_MAX_NAME ||
                    shared + suffix > STITCH_ST_MAX_NAME ||
                    rd_bytes(r, (size_t)suffix, &sp),
                d, STITCH_EFORMAT, "delta index: bad tensor name");
      uint64_t nl = shared + suffix;
      if (!fill) {
        RETURN_IF(nl == 0 || total + nl + 1 > cap, d, STITCH_ELIMIT,
                  "delta index: names exceed %zu bytes", cap);
        total += (size_t)nl + 1;
      } else {
        if (shared > 0) /* pn: the name before */
          memmove(np, pn, (size_t)shared);
        memcpy(np + shared, sp, (size_t)suffix);
        np[nl] = 0;
        CHECK_RC(check_name((const uint8_t *)np, nl, d));
        dl->t[i].pub.name = np;
        dl->t[i].table_bytes = r->pos - at;
        pn = np;
        np += nl + 1;
      }
      prev = nl;
    }
    if (!fill) {
      dl->names = malloc(total ? total : 1);
      RETURN_IF(dl->names == NULL, d, STITCH_ENOMEM, "out of memory");
    }
  }
  return 0;
}

/* Format 2's columns after the names (format 3's after the names or the
 * base's table): every tensor's type, every block's
 * coding, every coded block's length and change count. No checksum a
 * block: one over the payloads' XXH3-64s (SUM), checked here, and each
 * block's own kept for decode and for chunks (proto/chunk.md). */
static int parse_columns(stitch_delta *dl, rd *r, uint64_t sum,
                         uint64_t payload_at, stitch_diag *d) {
  uint64_t claimed = 0;
  for (size_t i = 0; i < dl->count; i++) {
    size_t at = r->pos;
    if (dl->table_as_base) /* no tensor is NEW: all are the base's */
      CHECK_RC(parse_flags(dl, r, &dl->t[i], DELTA_TF_NIBBLE, &claimed, d));
    else
      CHECK_RC(parse_type(dl, r, &dl->t[i], &claimed, d));
    dl->t[i].table_bytes += r->pos - at;
  }
  for (size_t i = 0; i < dl->count; i++) {
    delta_entry *e = &dl->t[i];
    RETURN_IF(e->pub.blocks > r->len - r->pos, d, STITCH_ETRUNCATED,
              "delta index: truncated in tensor '%s'", e->pub.name);
    for (uint64_t b = 0; b < e->pub.blocks; b++) {
      e->coding[b] = r->p[r->pos++];
      CHECK_RC(check_coding(e, b, e->coding[b], d));
    }
    e->block_bytes = e->pub.blocks;
  }
  XXH3_state_t *xs = XXH3_createState();
  RETURN_IF(xs == NULL || XXH3_64bits_reset(xs) != XXH_OK, d, STITCH_ENOMEM,
            "out of memory");
  int rc = 0;
  for (size_t i = 0; i < dl->count && rc == 0; i++) {
    delta_entry *e = &dl->t[i];
    for (uint64_t b = 0; b < e->pub.blocks && rc == 0; b++) {
      uint8_t c = e->coding[b], le[8];
      uint64_t len = 0, ch = 0, s = 0;
      size_t at = r->pos;
      if (c != STITCH_CODING_SAME && (rd_varint(r, &len) || rd_varint(r, &ch))) {
        rc = stitch_diag_set(d, STITCH_ETRUNCATED,
                             "delta index: truncated in tensor '%s'",
                             e->pub.name);
        break;
      }
      e->block_bytes += r->pos - at;
      rc = take_block(dl, e, b, c, len, ch, 0, &payload_at, d);
      if (rc == 0 && c != STITCH_CODING_SAME) {
        s = XXH3_64bits(dl->buf + e->payload_off[b], (size_t)len);
        e->checksum[b] = s;
        put_le64(le, s);
        XXH3_64bits_update(xs, le, 8);
      }
    }
  }
  uint64_t got = XXH3_64bits_digest(xs);
  XXH3_freeState(xs);
  CHECK_RC(rc);
  RETURN_IF(r->pos != r->len, d, STITCH_EFORMAT,
            "delta index: %zu unread bytes", r->len - r->pos);
  RETURN_IF(payload_at != dl->len, d, STITCH_EFORMAT,
            "delta: %llu bytes after the last block",
            (unsigned long long)(dl->len - payload_at));
  /* Format 4: the file's checksum covered the payloads (read_header4). */
  RETURN_IF(dl->format <= 3 && got != sum, d, STITCH_ECHECKSUM,
            "delta: payload checksum mismatch");
  return 0;
}

/* The result's metadata: listed (format 1, 2, and 3 with listed
 * tensors), or as an edit of BASE_META (format 3 with the base's
 * tensors; NULL: the base has none): the bytes it shares with the base's
 * at the start and the end, and the `mid` bytes between. */
static int parse_meta(stitch_delta *dl, rd *r, int edit, const char *base_meta,
                      stitch_diag *d) {
  uint64_t v, pre = 0, suf = 0;
  const uint8_t *p;
  size_t bl = base_meta ? strlen(base_meta) : 0;
  if (edit)
    RETURN_IF(rd_varint(r, &pre) || rd_varint(r, &suf) || pre > bl ||
                  suf > bl - pre,
              d, STITCH_EFORMAT,
              "delta index: metadata edit does not fit the base's %zu bytes",
              bl);
  RETURN_IF(rd_varint(r, &v) || rd_bytes(r, (size_t)v, &p) ||
                memchr(p, 0, (size_t)v) != NULL,
            d, STITCH_EFORMAT, "delta index: bad metadata");
  uint64_t ml = pre + v + suf; /* v is at most the index, pre + suf bl */
  if (ml == 0)
    return 0;
  dl->meta = malloc((size_t)ml + 1);
  RETURN_IF(dl->meta == NULL, d, STITCH_ENOMEM, "out of memory");
  if (pre)
    memcpy(dl->meta, base_meta, (size_t)pre);
  if (v)
    memcpy(dl->meta + pre, p, (size_t)v);
  if (suf)
    memcpy(dl->meta + pre + v, base_meta + bl - suf, (size_t)suf);
  dl->meta[ml] = 0;
  json_t *m = json_loads(dl->meta, JSON_REJECT_DUPLICATES, NULL);
  int ok = json_is_object(m);
  json_decref(m);
  RETURN_IF(!ok, d, STITCH_EFORMAT, "delta index: metadata is not a JSON object");
  return 0;
}

/* Format 3 with the base's tensors: names, dtypes and shapes copied from
 * BASE, which must hold N tensors. */
static int take_base_table(stitch_delta *dl, const stitch_st *base, uint64_t n,
                           stitch_diag *d) {
  RETURN_IF(stitch_st_count(base) != n, d, STITCH_EMISMATCH,
            "delta index: lists the base's %llu tensors; this base has %zu",
            (unsigned long long)n, stitch_st_count(base));
  size_t total = 1;
  for (size_t i = 0; i < n; i++)
    total += strlen(stitch_st_tensor(base, i)->name) + 1;
  dl->names = malloc(total);
  RETURN_IF(dl->names == NULL, d, STITCH_ENOMEM, "out of memory");
  char *np = dl->names;
  for (size_t i = 0; i < n; i++) {
    const stitch_tensor *bt = stitch_st_tensor(base, i);
    stitch_delta_tensor *t = &dl->t[i].pub;
    size_t nl = strlen(bt->name);
    memcpy(np, bt->name, nl + 1);
    t->name = np;
    np += nl + 1;
    t->dtype = bt->dtype;
    t->ndim = bt->ndim;
    memcpy(t->shape, bt->shape, sizeof(t->shape));
    t->nbytes = bt->nbytes;
  }
  return 0;
}

static int parse_index(stitch_delta *dl, const uint8_t *ix, size_t il,
                       uint64_t payload_at, const stitch_st *base,
                       stitch_diag *d) {
  rd r = {ix, il, 0};
  const uint8_t *p;
  uint64_t v, n;
  /* Format 4 says in its header whether the tensors are the base's; then
   * the index names the base by a prefix of its digest. */
  RETURN_IF(dl->format >= 4 && dl->table_as_base && base == NULL, d,
            STITCH_EINVAL,
            "delta: names its tensors by its base's; it parses only with the "
            "base at hand");
  if (dl->format >= 4 && dl->table_as_base)
    dl->base_len = DELTA4_BASE_PREFIX;
  RETURN_IF(rd_bytes(&r, dl->base_len, &p), d, STITCH_ETRUNCATED,
            "delta index: short");
  memcpy(dl->base.b, p, dl->base_len);
  RETURN_IF(rd_bytes(&r, 32, &p), d, STITCH_ETRUNCATED, "delta index: short");
  memcpy(dl->result.b, p, 32);
  uint64_t sum = 0; /* formats 2 and 3: the payloads' checksum */
  RETURN_IF((dl->format == 2 || dl->format == 3) && rd_u64(&r, &sum), d,
            STITCH_ETRUNCATED, "delta index: short");
  RETURN_IF(rd_varint(&r, &v) || v < DELTA_MIN_BLOCK_LOG2 ||
                v > DELTA_MAX_BLOCK_LOG2,
            d, STITCH_EFORMAT, "delta index: bad block size");
  dl->block_log2 = (unsigned)v;
  if (dl->format == 3) {
    uint8_t tb;
    RETURN_IF(rd_u8(&r, &tb) || tb > DELTA_TABLE_BASE, d, STITCH_EFORMAT,
              "delta index: bad tensor table kind");
    dl->table_as_base = tb == DELTA_TABLE_BASE;
    RETURN_IF(dl->table_as_base && base == NULL, d, STITCH_EINVAL,
              "delta: names its tensors by its base's; it parses only "
              "with the base at hand");
  }
  CHECK_RC(parse_meta(dl, &r, dl->table_as_base,
                      dl->table_as_base ? stitch_st_metadata(base) : NULL, d));
  /* A tensor takes at least 5 bytes: a name's 2 (format 1: its length
   * and a byte; 2: two lengths), a dtype, a dim count and flags; 1 when
   * they are the base's (its flags: an empty tensor has no block). */
  RETURN_IF(rd_varint(&r, &n) ||
                n > (r.len - r.pos) / (dl->table_as_base ? 1 : 5),
            d, STITCH_EFORMAT, "delta index: bad tensor count");
  dl->index_head = r.pos;
  dl->t = calloc(n ? (size_t)n : 1, sizeof(*dl->t));
  RETURN_IF(dl->t == NULL, d, STITCH_ENOMEM, "out of memory");
  if (dl->format >= 2) {
    dl->count = (size_t)n; /* entries are zeroed: free() copes */
    if (dl->table_as_base)
      CHECK_RC(take_base_table(dl, base, n, d));
    else
      CHECK_RC(parse_names(dl, &r, n, d));
    CHECK_RC(parse_columns(dl, &r, sum, payload_at, d));
  } else {
    dl->names = malloc(il + 1); /* all names fit in the index they came from */
    RETURN_IF(dl->names == NULL, d, STITCH_ENOMEM, "out of memory");
    char *np = dl->names;
    for (uint64_t i = 0; i < n; i++) {
      dl->count = (size_t)i + 1; /* so free() sees the partial entry */
      CHECK_RC(parse_tensor(dl, &r, &dl->t[i], &np, &payload_at, d));
    }
    dl->count = (size_t)n;
    RETURN_IF(r.pos != r.len, d, STITCH_EFORMAT,
              "delta index: %zu unread bytes", r.len - r.pos);
    RETURN_IF(payload_at != dl->len, d, STITCH_EFORMAT,
              "delta: %llu bytes after the last block",
              (unsigned long long)(dl->len - payload_at));
  }
  const char **sorted = malloc((n ? (size_t)n : 1) * sizeof(*sorted));
  RETURN_IF(sorted == NULL, d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    sorted[i] = dl->t[i].pub.name;
  qsort(sorted, (size_t)n, sizeof(*sorted), cmp_str);
  int dup = 0;
  for (size_t i = 1; i < n && !dup; i++)
    dup = strcmp(sorted[i - 1], sorted[i]) == 0;
  free(sorted);
  RETURN_IF(dup, d, STITCH_EFORMAT, "delta index: duplicate tensor names");
  return 0;
}

int stitch_delta_parse(const uint8_t *buf, size_t len, stitch_delta **out,
                       stitch_diag *d) {
  return stitch_delta_parse_ex(buf, len, NULL, out, d);
}

int stitch_delta_parse_ex(const uint8_t *buf, size_t len, const stitch_st *base,
                          stitch_delta **out, stitch_diag *d) {
  *out = NULL;
  stitch_delta *dl = calloc(1, sizeof(*dl));
  RETURN_IF(dl == NULL, d, STITCH_ENOMEM, "out of memory");
  dl->buf = buf;
  dl->len = len;
  uint64_t stored = 0, raw = 0, sum = 0;
  int zst = 0, rc = 0;
  dl->base_len = 32;
  if (len >= 8 && memcmp(buf, DELTA_MAGIC, 8) == 0)
    rc = read_header(dl, &stored, &raw, &sum, &zst, d);
  else if (len >= DELTA4_MAGIC_BYTES &&
           memcmp(buf, DELTA4_MAGIC, DELTA4_MAGIC_BYTES) == 0)
    rc = read_header4(dl, &stored, &raw, &zst, d);
  else if (len < DELTA4_MAGIC_BYTES)
    rc = stitch_diag_set(d, STITCH_ETRUNCATED,
                         "delta: %zu bytes, shorter than its header", len);
  else
    rc = stitch_diag_set(d, STITCH_EFORMAT, "not a stitch delta (bad magic)");
  if (rc == 0)
    rc = check_index_size(stored, raw, zst, d);
  const uint8_t *ix = buf + dl->header_len;
  size_t zlen = (size_t)stored;
  uint8_t *frame = NULL; /* format 4: the frame with its magic put back */
  if (rc == 0 && zst && dl->format >= 4) {
    frame = malloc(4 + zlen); /* the bytes are there: it is the file's */
    if (frame == NULL) {
      FAIL(d, STITCH_ENOMEM, "out of memory");
    } else {
      memcpy(frame, DELTA4_ZSTD_MAGIC, 4);
      memcpy(frame + 4, ix, zlen);
      ix = frame;
      zlen += 4;
    }
  }
  if (rc == 0 && zst) {
    dl->index_owned = malloc(raw ? (size_t)raw : 1);
    if (dl->index_owned == NULL) {
      FAIL(d, STITCH_ENOMEM, "out of memory");
    } else if (ZSTD_getFrameContentSize(ix, zlen) != raw) {
      FAIL(d, STITCH_EFORMAT, "delta: index frame size disagrees");
    } else {
      size_t n = ZSTD_decompress(dl->index_owned, (size_t)raw, ix, zlen);
      if (ZSTD_isError(n) || n != raw)
        FAIL(d, STITCH_EFORMAT, "delta: index does not decompress");
      ix = dl->index_owned;
    }
  }
  free(frame);
  dl->index_stored = stored;
  dl->index_raw = raw;
  /* Format 4's one checksum covered the index already (read_header4). */
  if (rc == 0 && dl->format <= 3 && XXH3_64bits(ix, (size_t)raw) != sum)
    FAIL(d, STITCH_ECHECKSUM, "delta: index checksum mismatch");
  if (rc == 0)
    rc = parse_index(dl, ix, (size_t)raw, dl->header_len + stored, base, d);
  if (rc != 0) {
    stitch_delta_free(dl);
    return rc;
  }
  *out = dl;
  return 0;
}

int stitch_delta_open(const char *path, stitch_delta **out, stitch_diag *d) {
  return stitch_delta_open_ex(path, NULL, out, d);
}

int stitch_delta_open_ex(const char *path, const stitch_st *base,
                         stitch_delta **out, stitch_diag *d) {
  *out = NULL;
  stitch_map m;
  CHECK_RC(stitch_map_open(path, &m, d));
  int rc = stitch_delta_parse_ex(m.data, m.len, base, out, d);
  if (rc != 0) {
    stitch_map_close(&m);
    return stitch_diag_prefix(d, rc, path); /* the error names the file */
  }
  (*out)->map = m.data;
  (*out)->map_len = m.len;
  return 0;
}

void stitch_delta_free(stitch_delta *dl) {
  if (dl == NULL)
    return;
  for (size_t i = 0; i < dl->count; i++) {
    delta_entry *e = &dl->t[i];
    free(e->coding);
    free(e->payload_off);
    free(e->payload_len);
    free(e->blk_changed);
    free(e->checksum);
  }
  free(dl->t);
  free(dl->names);
  free(dl->meta);
  free(dl->index_owned);
  if (dl->map != NULL) {
    stitch_map m = {dl->map, dl->map_len};
    stitch_map_close(&m);
  }
  free(dl);
}

size_t stitch_delta_count(const stitch_delta *dl) { return dl->count; }

const stitch_delta_tensor *stitch_delta_tensor_at(const stitch_delta *dl,
                                                  size_t i) {
  return i < dl->count ? &dl->t[i].pub : NULL;
}

const stitch_digest *stitch_delta_base_digest(const stitch_delta *dl) {
  return &dl->base;
}

size_t stitch_delta_base_digest_len(const stitch_delta *dl) {
  return dl->base_len;
}

const stitch_digest *stitch_delta_result_digest(const stitch_delta *dl) {
  return &dl->result;
}

const char *stitch_delta_metadata(const stitch_delta *dl) { return dl->meta; }

int delta_block_decode(const sym_fmt *f, block_span sp, int coding,
                       const uint8_t *in, size_t len, uint64_t changed,
                       uint64_t checksum, uint8_t *tensor_data,
                       uint8_t *scratch, const char *name, uint64_t b,
                       stitch_diag *d) {
  if (coding == STITCH_CODING_SAME)
    return 0;
  RETURN_IF(XXH3_64bits(in, len) != checksum, d, STITCH_ECHECKSUM,
            "delta: tensor '%s' block %llu: checksum mismatch", name,
            (unsigned long long)b);
  if (coding == STITCH_CODING_SPARSE) {
    uint64_t ch;
    CHECK_RC(sparse_decode(f, tensor_data, sp, in, len, &ch, d));
    RETURN_IF(ch != changed, d, STITCH_EFORMAT,
              "delta: tensor '%s' block %llu decoded %llu changes, index says "
              "%llu",
              name, (unsigned long long)b, (unsigned long long)ch,
              (unsigned long long)changed);
    return 0;
  }
  if (coding == STITCH_CODING_SPARSEK || coding == STITCH_CODING_SPARSET)
    return sparsek_decode(f, tensor_data, sp, in, len, changed,
                          coding == STITCH_CODING_SPARSEK, d);
  if (coding == STITCH_CODING_GAPS)
    return gaps_decode(f, tensor_data, sp, in, len, changed, d);
  if (coding == STITCH_CODING_RANS || coding == STITCH_CODING_RANSC)
    return rans_decode(f, coding, tensor_data, sp, in, len, changed, d);
  RETURN_IF(coding >= STITCH_CODING_COUNT_, d, STITCH_EFORMAT,
            "delta: tensor '%s' block %llu has unknown coding %d", name,
            (unsigned long long)b, coding);
  unsigned sb = f->bits <= 8 ? 1 : f->bits / 8;
  size_t off = f->bits == 4 ? sp.start / 2 : sp.start * sb;
  size_t nb = f->bits == 4 ? sp.n / 2 : sp.n * sb;
  return dense_decode(coding, sb, tensor_data + off, nb, in, len, scratch, d);
}

int delta_apply_block(const stitch_delta *dl, const delta_entry *e, uint32_t b,
                      uint8_t *data, uint8_t *scratch, stitch_diag *d) {
  int c = e->coding[b];
  if (c == STITCH_CODING_SAME)
    return 0;
  sym_fmt f;
  CHECK_RC(sym_fmt_for(e->pub.dtype, e->flags & DELTA_TF_NIBBLE, &f));
  uint64_t B = 1ull << dl->block_log2;
  block_span sp = {(uint64_t)b * B, 0};
  sp.n = e->pub.symbols - sp.start < B ? e->pub.symbols - sp.start : B;
  return delta_block_decode(&f, sp, c, dl->buf + e->payload_off[b],
                            (size_t)e->payload_len[b], e->blk_changed[b],
                            e->checksum[b], data, scratch, e->pub.name, b, d);
}

int stitch_delta_apply_tensor(const stitch_delta *dl, size_t i, uint8_t *data,
                              uint64_t nbytes, stitch_diag *d) {
  RETURN_IF(i >= dl->count, d, STITCH_EINVAL, "no tensor %zu", i);
  const delta_entry *e = &dl->t[i];
  RETURN_IF(nbytes != e->pub.nbytes, d, STITCH_EMISMATCH,
            "tensor '%s': %llu bytes given, the delta expects %llu",
            e->pub.name, (unsigned long long)nbytes,
            (unsigned long long)e->pub.nbytes);
  size_t work = (size_t)8 << dl->block_log2;
  if (work > nbytes)
    work = (size_t)nbytes;
  uint8_t *scratch = malloc(work ? work : 1);
  RETURN_IF(scratch == NULL, d, STITCH_ENOMEM, "out of memory");
  int rc = 0;
  for (uint32_t b = 0; b < e->pub.blocks && rc == 0; b++)
    rc = delta_apply_block(dl, e, b, data, scratch, d);
  free(scratch);
  return rc;
}

/* Every block of every tensor is one work item. */
typedef struct apply_job {
  const stitch_delta *dl;
  uint8_t *const *data;
  const uint64_t *first; /* first item of each tensor; [count] = total */
} apply_job;

static int apply_item(void *ctx, size_t item, uint8_t *scratch,
                      stitch_diag *d) {
  apply_job *j = ctx;
  size_t lo = 0, hi = j->dl->count;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (j->first[mid] <= item)
      lo = mid;
    else
      hi = mid;
  }
  return delta_apply_block(j->dl, &j->dl->t[lo],
                           (uint32_t)(item - j->first[lo]), j->data[lo],
                           scratch, d);
}

int stitch_delta_apply_all(const stitch_delta *dl, uint8_t *const *data,
                           const uint64_t *nbytes, unsigned threads,
                           stitch_diag *d) {
  for (size_t i = 0; i < dl->count; i++)
    RETURN_IF(nbytes[i] != dl->t[i].pub.nbytes, d, STITCH_EMISMATCH,
              "tensor '%s': %llu bytes given, the delta expects %llu",
              dl->t[i].pub.name, (unsigned long long)nbytes[i],
              (unsigned long long)dl->t[i].pub.nbytes);
  size_t n = dl->count;
  uint64_t *first = malloc((n + 1) * sizeof(*first));
  RETURN_IF(first == NULL, d, STITCH_ENOMEM, "out of memory");
  first[0] = 0;
  for (size_t i = 0; i < n; i++)
    first[i + 1] = first[i] + dl->t[i].pub.blocks;
  /* Scratch holds one dense block: at most the largest tensor. */
  size_t work = (size_t)8 << dl->block_log2, largest = 1;
  for (size_t i = 0; i < n; i++)
    largest = dl->t[i].pub.nbytes > largest ? (size_t)dl->t[i].pub.nbytes : largest;
  work = work < largest ? work : largest;
  apply_job j = {dl, data, first};
  int rc = stitch_parallel_diag((size_t)first[n], threads, work, apply_item,
                                &j, d);
  free(first);
  return rc;
}

static int same_layout(const stitch_tensor *bt, const stitch_delta_tensor *t) {
  if (bt->dtype != t->dtype || bt->ndim != t->ndim)
    return 0;
  for (int k = 0; k < t->ndim; k++)
    if (bt->shape[k] != t->shape[k])
      return 0;
  return 1;
}

int stitch_delta_apply_file(const stitch_st *base, const stitch_delta *dl,
                            const char *path, stitch_diag *d) {
  return stitch_delta_apply_file_ex(base, dl, path, NULL, d);
}

static void stage(const stitch_delta_apply_opts *o, const char *what,
                  uint64_t done, uint64_t total) {
  if (o->progress != NULL)
    o->progress(o->progress_arg, what, done, total);
}

int stitch_delta_apply_file_ex(const stitch_st *base, const stitch_delta *dl,
                               const char *path,
                               const stitch_delta_apply_opts *opts,
                               stitch_diag *d) {
  static const stitch_delta_apply_opts none = {0};
  const stitch_delta_apply_opts *o = opts != NULL ? opts : &none;
  uint64_t total = 0, copied = 0;
  for (size_t i = 0; i < dl->count; i++)
    total += dl->t[i].pub.nbytes;
  stitch_digest dg;
  CHECK_RC(stitch_view_digest(base, &dg, NULL));
  /* All 32 bytes, or format 4's prefix: a base that shares it is still
   * refused by the result's full digest, below, before the commit. */
  RETURN_IF(memcmp(dg.b, dl->base.b, dl->base_len) != 0, d, STITCH_EBASE,
            "delta does not apply to this base: its view digest differs (a "
            "replayed delta, or the wrong checkpoint)");
  stitch_st_writer *w;
  CHECK_RC(stitch_st_writer_new(path, &w, d));
  int rc = stitch_st_writer_set_metadata(w, dl->meta, d);
  for (size_t i = 0; i < dl->count && rc == 0; i++) {
    const stitch_delta_tensor *t = &dl->t[i].pub;
    rc = stitch_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, d);
  }
  if (rc == 0)
    rc = stitch_st_writer_map(w, d);
  size_t n = dl->count ? dl->count : 1;
  stitch_digest *tdg = calloc(n, sizeof(*tdg));
  const char **names = calloc(n, sizeof(*names));
  uint8_t **dst = calloc(n, sizeof(*dst));
  uint64_t *sizes = calloc(n, sizeof(*sizes));
  stitch_tensor *out = calloc(n, sizeof(*out));
  const stitch_tensor **outp = calloc(n, sizeof(*outp));
  if (rc == 0 && (!tdg || !names || !dst || !sizes || !out || !outp))
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
  if (rc == 0)
    stage(o, "copying the base", 0, total);
  for (size_t i = 0; i < dl->count && rc == 0; i++) {
    const stitch_delta_tensor *t = &dl->t[i].pub;
    dst[i] = stitch_st_writer_data(w, i);
    sizes[i] = t->nbytes;
    names[i] = t->name;
    out[i] = (stitch_tensor){.name = t->name, .dtype = t->dtype,
                             .ndim = t->ndim, .nbytes = t->nbytes,
                             .data = dst[i]};
    memcpy(out[i].shape, t->shape, sizeof(out[i].shape));
    outp[i] = &out[i];
    const stitch_tensor *bt =
        t->is_new ? NULL : stitch_st_find(base, t->name);
    if (!t->is_new && (bt == NULL || !same_layout(bt, t)))
      rc = stitch_diag_set(d, STITCH_EFORMAT,
                           "delta: tensor '%s' is not in the base as listed",
                           t->name);
    else if (!t->is_new && t->nbytes > 0)
      memcpy(dst[i], bt->data, (size_t)t->nbytes);
    copied += t->nbytes; /* a new tensor has nothing to copy: done too */
    if (rc == 0)
      stage(o, "copying the base", copied, total);
  }
  if (rc == 0) {
    stage(o, "applying", 0, total);
    rc = stitch_delta_apply_all(dl, dst, sizes, o->threads, d);
  }
  if (rc == 0) {
    stage(o, "applying", total, total);
    stage(o, "checking digests", 0, total);
    rc = stitch_tensor_digests(dl->count, outp, o->threads, tdg);
  }
  if (rc == 0)
    stage(o, "checking digests", total, total);
  if (rc == 0 && (rc = stitch_view_digest_from(dl->count, names, tdg, &dg)) ==
                     0 &&
      memcmp(dg.b, dl->result.b, 32) != 0)
    rc = stitch_diag_set(d, STITCH_EDIGEST,
                         "result digest mismatch after apply: output discarded");
  if (rc == 0) {
    stage(o, "writing", 0, total);
    rc = stitch_st_writer_commit(w, d);
  }
  if (rc == 0)
    stage(o, "writing", total, total);
  free(tdg);
  free(names);
  free(dst);
  free(sizes);
  free(out);
  free(outp);
  stitch_st_writer_free(w);
  return rc;
}
