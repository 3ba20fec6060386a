/* fuzz_common.h: helpers shared by the fuzz targets, the corpus generator
 * (gen_corpus.c) and tests/test_robust.c.
 *
 *  - fz_st_build: a safetensors file built in memory (the library's writer
 *    only writes files), so targets stay in memory as libFuzzer wants.
 *  - fz_delta_fix_sums / fz_delta_fix_blocks: recompute a mutated delta's
 *    XXH3 checksums (header, index, and the parsed per-block sums), so that
 *    a fuzzer's mutations reach the index parser and the block decoders
 *    instead of stopping at the first checksum. This is a harness-only
 *    forgery: fz_delta_fix_blocks writes into the parsed handle through
 *    codec/delta_internal.h; nothing in the library is relaxed for fuzzing.
 *  - fz_rng: splitmix64, for deterministic derived data.
 *
 * Everything is static so each program gets its own copy; unused-function
 * warnings are silenced with the attribute below. */
#ifndef STITCH_TESTS_FUZZ_COMMON_H
#define STITCH_TESTS_FUZZ_COMMON_H

#include "stitch.h"

#include "codec/delta_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#define FZ_UNUSED __attribute__((unused))

typedef struct fz_rng {
  uint64_t s;
} fz_rng;

static FZ_UNUSED uint64_t fz_next(fz_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static FZ_UNUSED void fz_fill(fz_rng *r, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = fz_next(r);
    for (size_t k = 0; k < 8 && i + k < n; k++)
      p[i + k] = (uint8_t)(v >> (8 * k));
  }
}

/* ---- safetensors in memory -------------------------------------------- */

typedef struct fz_tensor {
  const char *name;
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  const uint8_t *data; /* fz_nbytes() bytes; may be NULL when that is 0 */
} fz_tensor;

static FZ_UNUSED uint64_t fz_numel(const fz_tensor *t) {
  uint64_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

static FZ_UNUSED uint64_t fz_nbytes(const fz_tensor *t) {
  return fz_numel(t) * stitch_dtype_size(t->dtype);
}

typedef struct fz_str {
  char *p;
  size_t len, cap;
  int oom;
} fz_str;

static FZ_UNUSED void fz_str_put(fz_str *s, const char *src, size_t n) {
  if (s->oom)
    return;
  if (s->len + n + 1 > s->cap) {
    size_t nc = s->cap ? s->cap : 256;
    while (nc < s->len + n + 1)
      nc *= 2;
    char *np = realloc(s->p, nc);
    if (np == NULL) {
      s->oom = 1;
      return;
    }
    s->p = np;
    s->cap = nc;
  }
  memcpy(s->p + s->len, src, n);
  s->len += n;
  s->p[s->len] = 0;
}

static FZ_UNUSED void fz_str_cat(fz_str *s, const char *src) {
  fz_str_put(s, src, strlen(src));
}

/* A JSON string literal; control characters and non-ASCII bytes as \u00XX
 * (so arbitrary bytes stay valid JSON; names are expected to be ASCII). */
static FZ_UNUSED void fz_str_json(fz_str *s, const char *src) {
  fz_str_cat(s, "\"");
  for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
    char b[8];
    if (*p == '"' || *p == '\\') {
      b[0] = '\\';
      b[1] = (char)*p;
      fz_str_put(s, b, 2);
    } else if (*p < 0x20 || *p >= 0x7f) {
      snprintf(b, sizeof(b), "\\u%04x", *p);
      fz_str_cat(s, b);
    } else {
      fz_str_put(s, (const char *)p, 1);
    }
  }
  fz_str_cat(s, "\"");
}

/* Builds a safetensors file: tensors laid out in the order given. META is
 * the JSON text of the __metadata__ object, or NULL. Returns a malloc'd
 * buffer (caller frees) or NULL when out of memory. */
static FZ_UNUSED uint8_t *fz_st_build(const fz_tensor *t, size_t n,
                                      const char *meta, size_t *len) {
  fz_str h = {0};
  fz_str_cat(&h, "{");
  if (meta != NULL) {
    fz_str_cat(&h, "\"__metadata__\":");
    fz_str_cat(&h, meta);
  }
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    char b[64];
    if (i > 0 || meta != NULL)
      fz_str_cat(&h, ",");
    fz_str_json(&h, t[i].name);
    fz_str_cat(&h, ":{\"dtype\":\"");
    fz_str_cat(&h, stitch_dtype_name(t[i].dtype));
    fz_str_cat(&h, "\",\"shape\":[");
    for (int k = 0; k < t[i].ndim; k++) {
      snprintf(b, sizeof(b), "%s%llu", k ? "," : "",
               (unsigned long long)t[i].shape[k]);
      fz_str_cat(&h, b);
    }
    uint64_t nb = fz_nbytes(&t[i]);
    snprintf(b, sizeof(b), "],\"data_offsets\":[%llu,%llu]}",
             (unsigned long long)off, (unsigned long long)(off + nb));
    fz_str_cat(&h, b);
    off += nb;
  }
  fz_str_cat(&h, "}");
  while (!h.oom && (8 + h.len) % 8 != 0) /* data 8-aligned, as the writer */
    fz_str_cat(&h, " ");
  uint8_t *buf = h.oom ? NULL : malloc(8 + h.len + (size_t)off);
  if (buf == NULL) {
    free(h.p);
    return NULL;
  }
  put_le64(buf, h.len);
  memcpy(buf + 8, h.p, h.len);
  size_t pos = 8 + h.len;
  for (size_t i = 0; i < n; i++) {
    size_t nb = (size_t)fz_nbytes(&t[i]);
    if (nb > 0)
      memcpy(buf + pos, t[i].data, nb);
    pos += nb;
  }
  free(h.p);
  *len = pos;
  return buf;
}

/* ---- delta checksum forgery ------------------------------------------- */

/* Largest decompressed index the fix-up will inflate (fuzzing only). */
#define FZ_MAX_INDEX (8u << 20)

/* Format 4's compact header (proto/delta.md "File layout, format 4"):
 * *HL its bytes (the checksum's 8 last), *STORED the index's stored
 * length, *FLAGS its flags byte. Returns 1 when BUF starts with one
 * (the checksum is not checked), else 0. */
static FZ_UNUSED int fz_delta4_header(const uint8_t *buf, size_t len,
                                      size_t *hl, uint64_t *stored,
                                      uint8_t *flags) {
  if (len < DELTA4_MAGIC_BYTES + 2 ||
      memcmp(buf, DELTA4_MAGIC, DELTA4_MAGIC_BYTES) != 0)
    return 0;
  rd r = {buf, len, DELTA4_MAGIC_BYTES + 2};
  if (rd_varint(&r, stored) != 0 || len - r.pos < 8)
    return 0;
  *flags = buf[DELTA4_MAGIC_BYTES + 1];
  *hl = r.pos + 8;
  return 1;
}

/* Where a delta's index starts (the header's length), whether it is
 * stored raw, and how many bytes of the base's digest it holds (format 4
 * with the base's tensors: a prefix). Returns 0 when BUF is no delta. */
static FZ_UNUSED int fz_delta_index_at(const uint8_t *buf, size_t len,
                                       size_t *at, int *raw, size_t *blen) {
  size_t hl;
  uint64_t stored;
  uint8_t fl;
  if (fz_delta4_header(buf, len, &hl, &stored, &fl)) {
    *at = hl;
    *raw = !(fl & DELTA4_F_ZSTD);
    *blen = fl & DELTA4_F_TABLE ? DELTA4_BASE_PREFIX : 32;
    return 1;
  }
  if (len < DELTA_HEADER_BYTES || memcmp(buf, DELTA_MAGIC, 8) != 0)
    return 0;
  *at = DELTA_HEADER_BYTES;
  *raw = buf[12] == DELTA_INDEX_RAW;
  *blen = 32;
  return 1;
}

/* Format 4: its one checksum, over the whole file but its own 8 bytes
 * (at HL - 8). */
static FZ_UNUSED void fz_delta4_fix_sum(uint8_t *buf, size_t len, size_t hl) {
  XXH3_state_t *xs = XXH3_createState();
  if (xs == NULL)
    return;
  XXH3_64bits_reset(xs);
  XXH3_64bits_update(xs, buf, hl - 8);
  XXH3_64bits_update(xs, buf + hl, len - hl);
  put_le64(buf + hl - 8, XXH3_64bits_digest(xs));
  XXH3_freeState(xs);
}

/* Recomputes the index checksum (of the decompressed index when it is
 * zstd-coded) and then the header checksum of the delta in BUF, in place
 * (format 4: its one checksum). Returns 1 when BUF looked enough like a
 * delta to be fixed, else 0. */
static FZ_UNUSED int fz_delta_fix_sums(uint8_t *buf, size_t len) {
  size_t hl;
  uint64_t st4;
  uint8_t fl;
  if (fz_delta4_header(buf, len, &hl, &st4, &fl)) {
    fz_delta4_fix_sum(buf, len, hl);
    return 1;
  }
  if (len < DELTA_HEADER_BYTES || memcmp(buf, DELTA_MAGIC, 8) != 0)
    return 0;
  uint64_t stored = le64(buf + 16), raw = le64(buf + 24);
  if (stored > len - DELTA_HEADER_BYTES)
    return 0;
  const uint8_t *ix = buf + DELTA_HEADER_BYTES;
  if (buf[12] == DELTA_INDEX_ZSTD) {
    if (raw > FZ_MAX_INDEX)
      return 0;
    uint8_t *tmp = malloc(raw ? (size_t)raw : 1);
    if (tmp == NULL)
      return 0;
    size_t n = ZSTD_decompress(tmp, (size_t)raw, ix, (size_t)stored);
    if (!ZSTD_isError(n) && n == raw)
      put_le64(buf + 32, XXH3_64bits(tmp, (size_t)raw));
    free(tmp);
  } else if (raw <= stored) {
    put_le64(buf + 32, XXH3_64bits(ix, (size_t)raw));
  }
  put_le64(buf + 40, XXH3_64bits(buf, 40));
  return 1;
}

/* Sets every block's expected checksum to that of the bytes it points at,
 * so that apply reaches the sparse and dense decoders with forged input. */
static FZ_UNUSED void fz_delta_fix_blocks(stitch_delta *dl) {
  for (size_t i = 0; i < dl->count; i++) {
    delta_entry *e = &dl->t[i];
    for (uint32_t b = 0; b < e->pub.blocks; b++)
      if (e->coding[b] != STITCH_CODING_SAME)
        e->checksum[b] =
            XXH3_64bits(dl->buf + e->payload_off[b], (size_t)e->payload_len[b]);
  }
}

/* Sets the change count the index gives each sparse block of tensor I to
 * what decoding it onto BASE (the tensor's nbytes) actually yields, so
 * that a forged sparse payload applies instead of stopping at the count
 * check (which an attacker would satisfy the same way). */
static FZ_UNUSED void fz_delta_fix_changes(stitch_delta *dl, size_t i,
                                           const uint8_t *base) {
  delta_entry *e = &dl->t[i];
  sym_fmt f;
  if (sym_fmt_for(e->pub.dtype, e->flags & DELTA_TF_NIBBLE, &f) != 0)
    return;
  size_t nb = (size_t)e->pub.nbytes;
  uint8_t *work = malloc(nb ? nb : 1);
  if (work == NULL)
    return;
  if (nb)
    memcpy(work, base, nb);
  uint64_t B = 1ull << dl->block_log2;
  for (uint32_t b = 0; b < e->pub.blocks; b++) {
    if (e->coding[b] != STITCH_CODING_SPARSE)
      continue;
    block_span sp = {(uint64_t)b * B, 0};
    sp.n = e->pub.symbols - sp.start < B ? e->pub.symbols - sp.start : B;
    uint64_t ch;
    if (sparse_decode(&f, work, sp, dl->buf + e->payload_off[b],
                      (size_t)e->payload_len[b], &ch, NULL) == 0)
      e->blk_changed[b] = ch;
  }
  free(work);
}

/* Rewrites a delta whose index is zstd-coded into the equivalent delta with
 * a raw index (easier for a mutator to work on). Returns a malloc'd buffer,
 * or NULL when BUF is not such a delta. */
static FZ_UNUSED uint8_t *fz_delta_raw_index(const uint8_t *buf, size_t len,
                                             size_t *out_len) {
  size_t hl;
  uint64_t st4;
  uint8_t fl;
  if (fz_delta4_header(buf, len, &hl, &st4, &fl)) {
    if (!(fl & DELTA4_F_ZSTD) || st4 > len - hl || st4 > FZ_MAX_INDEX)
      return NULL;
    /* The frame lacks its magic (proto/delta.md): put it back. */
    uint8_t *zf = malloc(4 + (size_t)st4);
    if (zf == NULL)
      return NULL;
    memcpy(zf, DELTA4_ZSTD_MAGIC, 4);
    memcpy(zf + 4, buf + hl, (size_t)st4);
    unsigned long long raw = ZSTD_getFrameContentSize(zf, 4 + (size_t)st4);
    if (raw > FZ_MAX_INDEX) { /* also ZSTD_CONTENTSIZE_UNKNOWN and _ERROR */
      free(zf);
      return NULL;
    }
    size_t pay = len - hl - (size_t)st4;
    uint8_t *out = malloc(DELTA4_HEADER_MAX + (size_t)raw + pay);
    if (out == NULL) {
      free(zf);
      return NULL;
    }
    /* The new header: the same, flag ZSTD off, the raw length. */
    memcpy(out, buf, DELTA4_MAGIC_BYTES + 2);
    out[DELTA4_MAGIC_BYTES + 1] &= (uint8_t)~DELTA4_F_ZSTD;
    size_t n = DELTA4_MAGIC_BYTES + 2;
    uint64_t v = raw;
    do {
      out[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
      v >>= 7;
    } while (v != 0);
    size_t nhl = n + 8;
    size_t got = ZSTD_decompress(out + nhl, (size_t)raw, zf, 4 + (size_t)st4);
    free(zf);
    if (ZSTD_isError(got) || got != raw) {
      free(out);
      return NULL;
    }
    memcpy(out + nhl + raw, buf + hl + st4, pay);
    *out_len = nhl + (size_t)raw + pay;
    fz_delta4_fix_sum(out, *out_len, nhl);
    return out;
  }
  if (len < DELTA_HEADER_BYTES || memcmp(buf, DELTA_MAGIC, 8) != 0 ||
      buf[12] != DELTA_INDEX_ZSTD)
    return NULL;
  uint64_t stored = le64(buf + 16), raw = le64(buf + 24);
  if (stored > len - DELTA_HEADER_BYTES || raw > FZ_MAX_INDEX)
    return NULL;
  size_t pay = len - DELTA_HEADER_BYTES - (size_t)stored;
  uint8_t *out = malloc(DELTA_HEADER_BYTES + (size_t)raw + pay);
  if (out == NULL)
    return NULL;
  size_t n = ZSTD_decompress(out + DELTA_HEADER_BYTES, (size_t)raw,
                             buf + DELTA_HEADER_BYTES, (size_t)stored);
  if (ZSTD_isError(n) || n != raw) {
    free(out);
    return NULL;
  }
  memcpy(out, buf, DELTA_HEADER_BYTES);
  out[12] = DELTA_INDEX_RAW;
  put_le64(out + 16, raw);
  memcpy(out + DELTA_HEADER_BYTES + raw, buf + DELTA_HEADER_BYTES + stored,
         pay);
  put_le64(out + 40, XXH3_64bits(out, 40));
  *out_len = DELTA_HEADER_BYTES + (size_t)raw + pay;
  return out;
}

/* ---- the base format-3 seeds name ------------------------------------- */

/* A delta in format 3 may name its base's tensors instead of listing
 * them (proto/delta.md "Index, format 3"), and then parses only with that
 * base. The seeds of gen_corpus's "table-base-*" are coded against this
 * one, and fuzz_delta parses every input with it: a BF16 matrix, packed
 * NVFP4 values with their E4M3 scales, and an F32 vector, no metadata.
 * Its bytes (*DATA, fz_table_base_len) are built once and kept for the
 * process, as is the parsed checkpoint. */
static FZ_UNUSED const uint8_t *fz_table_base_bytes(size_t *len) {
  static uint8_t *file;
  static size_t flen;
  if (file == NULL) {
    static uint8_t w[64 * 32 * 2], q[32 * 64], sc[32 * 8], nrm[64 * 4];
    fz_rng r = {38};
    for (size_t i = 0; i < sizeof(w) / 2; i++) { /* weights near +-0.02 */
      uint64_t v = fz_next(&r);
      uint16_t h = (uint16_t)(0x3c00 + (v % 640) + (v & 0x10000 ? 0x8000 : 0));
      memcpy(w + 2 * i, &h, 2);
    }
    fz_fill(&r, q, sizeof(q));
    for (size_t i = 0; i < sizeof(sc); i++)
      sc[i] = (uint8_t)(0x30 + fz_next(&r) % 16);
    for (size_t i = 0; i < 64; i++) {
      float f = 1.0f + (float)(fz_next(&r) % 100) / 1000.0f;
      memcpy(nrm + 4 * i, &f, 4);
    }
    fz_tensor t[4] = {
        {"model.layers.0.mlp.w", STITCH_DT_BF16, 2, {64, 32}, w},
        {"model.layers.0.mlp.q", STITCH_DT_U8, 2, {32, 64}, q},
        {"model.layers.0.mlp.q_scale", STITCH_DT_F8_E4M3, 2, {32, 8}, sc},
        {"model.norm", STITCH_DT_F32, 1, {64}, nrm}};
    file = fz_st_build(t, 4, NULL, &flen);
  }
  *len = flen;
  return file;
}

static FZ_UNUSED const stitch_st *fz_table_base(void) {
  static stitch_st *st;
  size_t len;
  const uint8_t *p = fz_table_base_bytes(&len);
  if (st == NULL && p != NULL && stitch_st_parse(p, len, &st, NULL) != 0)
    st = NULL;
  return st;
}

#endif
