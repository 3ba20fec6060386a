/* chunk_fixture.h: the fixed object that fuzz_chunk feeds its inputs into,
 * and the seeds gen_corpus.c writes for it.
 *
 * Seven small tensors (BF16 with sparse changes, U8 coded as nibbles, an
 * unchanged F32, F8_E4M3 with a sparse and a dense block, a NEW F32, a
 * larger BF16 with dense stretches, an I32 changed at random), a delta of
 * 2^8-symbol blocks between them, cut into chunks of about FZC_TARGET
 * bytes, and a manifest for them built by hand. Everything comes from fixed
 * seeds, so the fuzz target and the seed generator build the same bytes.
 * fuzz_chunk takes each input as chunk 0, whose range holds blocks of every
 * kind above (fzc_seeds checks that it does).
 *
 * Everything is static; each program gets its own copy. */
#ifndef STITCH_TESTS_FUZZ_CHUNK_FIXTURE_H
#define STITCH_TESTS_FUZZ_CHUNK_FIXTURE_H

#include "fuzz/fuzz_common.h"

#include "common/bytes.h"

#define FZC_T 7
#define FZC_TARGET 1536
#define FZC_MAX_ENTRIES 256

typedef struct fzc {
  uint8_t *a_data[FZC_T], *b_data[FZC_T];
  uint8_t *a_buf, *b_buf; /* the checkpoints' bytes */
  stitch_st *a, *b;
  uint8_t *dbuf;
  size_t dlen;
  stitch_delta *dl;
  stitch_object obj;
  uint8_t **bufs; /* obj.n_chunks chunks */
  stitch_mtensor mt[FZC_T];
  stitch_manifest m;
  uint8_t *zero; /* the base of the NEW tensor */
  const uint8_t *base[FZC_T], *result[FZC_T];
  uint64_t nbytes[FZC_T];
} fzc;

static FZ_UNUSED void fzc_free(fzc *f) {
  stitch_chunks_free(f->bufs, f->obj.n_chunks);
  stitch_object_clear(&f->obj);
  stitch_delta_free(f->dl);
  stitch_st_free(f->a);
  stitch_st_free(f->b);
  free(f->dbuf);
  free(f->a_buf);
  free(f->b_buf);
  free(f->zero);
  for (int i = 0; i < FZC_T; i++) {
    free(f->a_data[i]);
    free(f->b_data[i]);
  }
  memset(f, 0, sizeof(*f));
}

/* Steps about PER1024/1024 of the elements' low bytes by one. */
static void fzc_steps(fz_rng *r, uint8_t *p, size_t n, size_t es,
                      unsigned per1024) {
  for (size_t i = 0; i < n; i++)
    if (fz_next(r) % 1024 < per1024)
      p[i * es] ^= 1;
}

/* Builds the fixture; 0 or a STITCH_E* code (out of memory). */
static FZ_UNUSED int fzc_build(fzc *f) {
  static const struct {
    const char *name;
    stitch_dtype dt;
    uint64_t n;
  } spec[FZC_T] = {{"a", STITCH_DT_BF16, 600}, {"n", STITCH_DT_U8, 300},
                   {"s", STITCH_DT_F32, 100},  {"f", STITCH_DT_F8_E4M3, 512},
                   {"x", STITCH_DT_F32, 200},  {"t", STITCH_DT_BF16, 3072},
                   {"z", STITCH_DT_I32, 64}};
  memset(f, 0, sizeof(*f));
  fz_rng r = {20261201};
  fz_tensor ta[FZC_T], tb[FZC_T];
  size_t na = 0;
  for (int i = 0; i < FZC_T; i++) {
    size_t es = stitch_dtype_size(spec[i].dt), nb = (size_t)spec[i].n * es;
    f->a_data[i] = malloc(nb);
    f->b_data[i] = malloc(nb);
    if (f->a_data[i] == NULL || f->b_data[i] == NULL)
      return STITCH_ENOMEM;
    fz_fill(&r, f->a_data[i], nb);
    if (spec[i].dt == STITCH_DT_BF16 || spec[i].dt == STITCH_DT_F8_E4M3)
      for (size_t k = 0; k < nb; k += es)
        f->a_data[i][k + es - 1] &= 0x3f; /* small magnitudes */
    if (spec[i].dt == STITCH_DT_U8)
      for (size_t k = 0; k < nb; k++)
        f->a_data[i][k] &= 0x5f; /* positive E2M1 high nibbles below 6 */
    memcpy(f->b_data[i], f->a_data[i], nb);
    uint8_t *b = f->b_data[i];
    switch (i) {
    case 0:
      fzc_steps(&r, b, spec[i].n, es, 30);
      break;
    case 1: /* the high nibble steps: better coded as nibbles */
      for (size_t k = 0; k < nb; k++)
        if (fz_next(&r) % 1024 < 50)
          b[k] = (uint8_t)(b[k] + 0x10);
      break;
    case 3:
      fzc_steps(&r, b, 256, es, 20);
      fz_fill(&r, b + 256, 256);
      break;
    case 4:
    case 6:
      fz_fill(&r, b, nb);
      break;
    case 5:
      fzc_steps(&r, b, spec[i].n, es, 10);
      fz_fill(&r, b + 1024, 2048);
      break;
    default:
      break;
    }
    tb[i] = (fz_tensor){spec[i].name, spec[i].dt, 1, {spec[i].n}, b};
    if (i != 4)
      ta[na++] =
          (fz_tensor){spec[i].name, spec[i].dt, 1, {spec[i].n}, f->a_data[i]};
  }
  size_t al = 0, bl = 0;
  stitch_diag d = {{0}};
  f->a_buf = fz_st_build(ta, na, NULL, &al);
  f->b_buf = fz_st_build(tb, FZC_T, NULL, &bl);
  if (f->a_buf == NULL || f->b_buf == NULL)
    return STITCH_ENOMEM;
  stitch_delta_opts o = {.block_log2 = 8};
  int rc = stitch_st_parse(f->a_buf, al, &f->a, &d);
  if (rc == 0)
    rc = stitch_st_parse(f->b_buf, bl, &f->b, &d);
  if (rc == 0)
    rc = stitch_delta_encode(f->a, f->b, &o, &f->dbuf, &f->dlen, NULL, &d);
  if (rc == 0)
    rc = stitch_delta_parse(f->dbuf, f->dlen, &f->dl, &d);
  if (rc == 0)
    rc = stitch_chunks_from_delta(f->dl, FZC_TARGET, &f->obj, &f->bufs, &d);
  if (rc != 0 || stitch_delta_count(f->dl) != FZC_T)
    return rc ? rc : STITCH_EINVAL;
  f->zero = calloc(1, (size_t)tb[4].shape[0] * 4);
  if (f->zero == NULL)
    return STITCH_ENOMEM;
  for (int i = 0; i < FZC_T; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(f->dl, (size_t)i);
    f->mt[i] = (stitch_mtensor){.name = (char *)t->name,
                                .dtype = t->dtype,
                                .ndim = t->ndim,
                                .nbytes = t->nbytes};
    memcpy(f->mt[i].shape, t->shape, sizeof(t->shape));
    stitch_tensor_digest(t->dtype, t->ndim, t->shape, f->b_data[i], t->nbytes,
                         &f->mt[i].digest);
    f->base[i] = i == 4 ? f->zero : f->a_data[i];
    f->result[i] = f->b_data[i];
    f->nbytes[i] = t->nbytes;
  }
  f->obj.kind = STITCH_OBJ_DELTA;
  f->obj.base_view = *stitch_delta_base_digest(f->dl);
  f->m = (stitch_manifest){.version = 2,
                           .parent_version = 1,
                           .view = *stitch_delta_result_digest(f->dl),
                           .n_tensors = FZC_T,
                           .tensors = f->mt,
                           .n_objects = 1,
                           .objects = &f->obj};
  return 0;
}

/* ---- Seeds -------------------------------------------------------------- */

typedef struct fzc_chunk {
  uint8_t head[16];
  uint64_t n;
  struct {
    uint64_t gap, len, changed, sum;
    uint8_t coding;
    const uint8_t *body;
    size_t body_len;
  } e[FZC_MAX_ENTRIES];
} fzc_chunk;

/* Reads a chunk that is well formed as far as its layout goes. */
static FZ_UNUSED int fzc_read(const uint8_t *buf, size_t len, fzc_chunk *c) {
  rd r = {buf, len, 0};
  const uint8_t *h;
  if (rd_bytes(&r, 16, &h) || rd_varint(&r, &c->n) || c->n > FZC_MAX_ENTRIES)
    return -1;
  memcpy(c->head, h, 16);
  for (uint64_t k = 0; k < c->n; k++)
    if (rd_varint(&r, &c->e[k].gap) || rd_u8(&r, &c->e[k].coding) ||
        rd_varint(&r, &c->e[k].len) || rd_varint(&r, &c->e[k].changed) ||
        rd_u64(&r, &c->e[k].sum))
      return -1;
  for (uint64_t k = 0; k < c->n; k++) {
    c->e[k].body_len = (size_t)c->e[k].len;
    if (rd_bytes(&r, c->e[k].body_len, &c->e[k].body))
      return -1;
  }
  return r.pos == len ? 0 : -1;
}

/* C's bytes (entries as they are, then the bodies) in a malloc'd buffer,
 * or NULL when out of memory. */
static FZ_UNUSED uint8_t *fzc_write(const fzc_chunk *c, size_t *len) {
  dbuf b = {NULL, 0, 0, 64u << 20};
  int rc = dbuf_put(&b, c->head, 16) | dbuf_varint(&b, c->n);
  for (uint64_t k = 0; k < c->n; k++)
    rc |= dbuf_varint(&b, c->e[k].gap) | dbuf_u8(&b, c->e[k].coding) |
          dbuf_varint(&b, c->e[k].len) | dbuf_varint(&b, c->e[k].changed) |
          dbuf_u64(&b, c->e[k].sum);
  for (uint64_t k = 0; k < c->n; k++)
    rc |= dbuf_put(&b, c->e[k].body, c->e[k].body_len);
  if (rc != 0) {
    dbuf_free(&b);
    return NULL;
  }
  *len = b.len;
  return b.p ? b.p : malloc(1);
}

static void fzc_emit(const fzc_chunk *c, const char *name,
                     void (*emit)(const char *, const uint8_t *, size_t)) {
  size_t len;
  uint8_t *p = fzc_write(c, &len);
  if (p != NULL)
    emit(name, p, len);
  free(p);
}

/* Writes the seeds of fuzz_chunk through EMIT: chunk 0, other chunks and
 * re-codings of it, and damaged forms. Returns the number of problems (the
 * fixture no longer reaches what it promises). */
static FZ_UNUSED int
fzc_seeds(const fzc *f, void (*emit)(const char *, const uint8_t *, size_t)) {
  static fzc_chunk c, m;
  static uint8_t raw[FZC_MAX_ENTRIES][2048];
  static size_t raw_len[FZC_MAX_ENTRIES];
  if (f->obj.n_chunks < 3 ||
      fzc_read(f->bufs[0], (size_t)f->obj.chunks[0].size, &c) != 0)
    return 1;
  /* Chunk 0 must hold sparse, dense and new blocks, and nibbles. */
  int seen[256] = {0}, seen_new = 0, seen_nib = 0;
  uint64_t g = f->obj.chunks[0].first_block - 1;
  size_t kn = 0;
  for (uint64_t k = 0; k < c.n; k++) {
    g += c.e[k].gap + 1;
    seen[c.e[k].coding]++;
    /* Tensors of the fixture have at most 12 blocks of 2^8 symbols. */
    uint64_t at = 0, B = 256;
    for (int i = 0; i < FZC_T; i++) {
      uint64_t s = f->obj.tflags[i] & 1
                       ? 2 * f->nbytes[i]
                       : f->nbytes[i] / stitch_dtype_size(f->mt[i].dtype);
      uint64_t nb = (s + B - 1) / B;
      if (g < at + nb) {
        seen_new |= (f->obj.tflags[i] & 2) != 0;
        seen_nib |= (f->obj.tflags[i] & 1) != 0;
        if (f->obj.tflags[i] & 2)
          kn = (size_t)k;
        /* The same block coded raw: the result's bytes. */
        unsigned w = f->obj.tflags[i] & 1
                         ? 4
                         : 8 * (unsigned)stitch_dtype_size(f->mt[i].dtype);
        uint64_t off = (g - at) * B * w / 8, len = B * w / 8;
        if (off + len > f->nbytes[i])
          len = f->nbytes[i] - off;
        if (len > sizeof(raw[k]))
          return 1;
        memcpy(raw[k], f->result[i] + off, (size_t)len);
        raw_len[k] = (size_t)len;
        break;
      }
      at += nb;
    }
  }
  if (!(seen[STITCH_CODING_SPARSE] || seen[STITCH_CODING_SPARSEK] ||
        seen[STITCH_CODING_SPARSET]) ||
      !seen_new || !seen_nib ||
      !(seen[STITCH_CODING_XOR] || seen[STITCH_CODING_PLANES] ||
        seen[STITCH_CODING_RAW]))
    return 1;

  emit("chunk0", f->bufs[0], (size_t)f->obj.chunks[0].size);
  emit("chunk1", f->bufs[1], (size_t)f->obj.chunks[1].size);
  emit("chunk-last", f->bufs[f->obj.n_chunks - 1],
       (size_t)f->obj.chunks[f->obj.n_chunks - 1].size);
  m = c; /* every block raw: applies to the same result */
  for (uint64_t k = 0; k < c.n; k++) {
    m.e[k].coding = STITCH_CODING_RAW;
    m.e[k].len = m.e[k].body_len = raw_len[k];
    m.e[k].body = raw[k];
    m.e[k].sum = XXH3_64bits(raw[k], m.e[k].body_len);
  }
  fzc_emit(&m, "all-raw", emit);
  m = c;
  m.n = 0;
  fzc_emit(&m, "no-entries", emit);
  m = c; /* the first block left out: it stays as the base had it */
  m.e[1].gap += m.e[0].gap + 1;
  memmove(&m.e[0], &m.e[1], (size_t)(c.n - 1) * sizeof(m.e[0]));
  m.n--;
  fzc_emit(&m, "drop-first", emit);
  m = c;
  m.e[kn].coding = STITCH_CODING_SPARSE;
  fzc_emit(&m, "new-sparse", emit);
  m = c;
  m.e[0].gap = f->obj.chunks[0].n_blocks;
  fzc_emit(&m, "gap-out", emit);
  m = c;
  m.e[0].coding = 7;
  fzc_emit(&m, "bad-coding", emit);
  m = c;
  m.e[0].changed = 4096;
  fzc_emit(&m, "changed-over", emit);
  m = c;
  m.e[c.n - 1].sum ^= 1;
  fzc_emit(&m, "bad-block-sum", emit);
  m = c;
  m.head[8] = 2;
  fzc_emit(&m, "format-2", emit);
  m = c;
  m.e[0].len++;
  fzc_emit(&m, "long-payload", emit);
  size_t n0 = (size_t)f->obj.chunks[0].size;
  emit("truncated", f->bufs[0], n0 - 5);
  uint8_t *t = malloc(n0 + 2);
  if (t == NULL)
    return 1;
  memcpy(t, f->bufs[0], n0);
  t[n0] = t[n0 + 1] = 0;
  emit("trailing", t, n0 + 2);
  free(t);
  return 0;
}

#endif
