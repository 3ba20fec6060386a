/* test_chunk.c: a delta cut into chunks (proto/chunk.md) and put back
 * together as a patch gives the delta's result bit for bit, in any order of
 * arrival, all at once or block by block; anchors and empty deltas work;
 * and damaged chunks, even with their names forged to match, are refused
 * with a code and a message, never a crash. */
#include "ckpt_util.h"

#include "common/bytes.h"

static test_rng rng;

/* ---- Checkpoints -------------------------------------------------------- */

/* In file order; the unchanged tensor is last, so that the last chunk's
 * range ends in blocks it need not cover. */
enum { T_BF16, T_F32, T_FP8, T_NIB, T_NEW, T_SAME, T_GONE, T_COUNT };

typedef struct pair {
  tspec a[T_COUNT], b[T_COUNT];
  size_t na, nb;
} pair;

static uint8_t *rnd_bytes(size_t n) { return test_rnd_bytes(&rng, n); }
#define dup_bytes test_dup_bytes

/* Small weights (BF16, F32 or F8_E4M3), a fraction P moved by one step of
 * their bit pattern, and block DENSE (of 256 symbols) rewritten at random. */
static void weights(stitch_dtype dt, size_t n, double p, size_t dense,
                    uint8_t **a, uint8_t **b) {
  test_step_pair(&rng, dt, 0, n, p, dense * 256, 256, a, b);
}

/* BF16, F32, FP8 and U8 tensors that change, one that does not, one that is
 * new and one that goes away. */
static void make_pair(pair *pr) {
  static const size_t n[] = {60000, 20000, 16000, 16384, 4000, 700, 300};
  uint8_t *a, *b;
  memset(pr, 0, sizeof(*pr));
  weights(STITCH_DT_BF16, n[T_BF16], 0.02, 7, &a, &b);
  pr->a[T_BF16] = (tspec){"w.bf16", STITCH_DT_BF16, 2, {300, 200}, a};
  pr->b[T_BF16] = (tspec){"w.bf16", STITCH_DT_BF16, 2, {300, 200}, b};
  weights(STITCH_DT_F32, n[T_F32], 0.03, 3, &a, &b);
  pr->a[T_F32] = (tspec){"w.f32", STITCH_DT_F32, 1, {n[T_F32]}, a};
  pr->b[T_F32] = (tspec){"w.f32", STITCH_DT_F32, 1, {n[T_F32]}, b};
  weights(STITCH_DT_F8_E4M3, n[T_FP8], 0.01, 99, &a, &b);
  pr->a[T_FP8] = (tspec){"w.fp8", STITCH_DT_F8_E4M3, 1, {n[T_FP8]}, a};
  pr->b[T_FP8] = (tspec){"w.fp8", STITCH_DT_F8_E4M3, 1, {n[T_FP8]}, b};
  a = rnd_bytes(2 * n[T_SAME]);
  pr->a[T_SAME] = (tspec){"same", STITCH_DT_BF16, 1, {n[T_SAME]}, a};
  b = dup_bytes(a, 2 * n[T_SAME]);
  pr->b[T_SAME] = (tspec){"same", STITCH_DT_BF16, 1, {n[T_SAME]}, b};
  /* Packed E2M1 pairs: high nibbles step up by one now and then, which
   * codes far better as nibbles than as bytes. */
  a = rnd_bytes(n[T_NIB]);
  for (size_t i = 0; i < n[T_NIB]; i++)
    a[i] &= 0x5f;
  b = dup_bytes(a, n[T_NIB]);
  for (size_t i = 0; i < n[T_NIB]; i++)
    if (test_rng_unit(&rng) < 0.03)
      b[i] = (uint8_t)(b[i] + 0x10);
  pr->a[T_NIB] = (tspec){"w.nvfp4", STITCH_DT_U8, 1, {n[T_NIB]}, a};
  pr->b[T_NIB] = (tspec){"w.nvfp4", STITCH_DT_U8, 1, {n[T_NIB]}, b};
  b = rnd_bytes(4 * n[T_NEW]);
  pr->b[T_NEW] = (tspec){"new", STITCH_DT_F32, 1, {n[T_NEW]}, b};
  a = rnd_bytes(4 * n[T_GONE]); /* in the base where the result has new */
  pr->a[T_NEW] = (tspec){"gone", STITCH_DT_I32, 1, {n[T_GONE]}, a};
  pr->na = pr->nb = T_SAME + 1;
}

static void pair_free(pair *pr) {
  for (size_t i = 0; i < pr->na; i++)
    free(pr->a[i].data);
  for (size_t i = 0; i < pr->nb; i++)
    free(pr->b[i].data);
}

/* ---- A delta, its chunks and a manifest for them ---------------------- */

typedef struct fixture {
  const stitch_st *base, *result;
  uint8_t *dbuf;
  size_t dlen;
  stitch_delta *dl;
  stitch_object obj;
  uint8_t **bufs;
  stitch_mtensor *mt;
  stitch_manifest m;
} fixture;

static void fixture_make(fixture *f, const stitch_st *base,
                         const stitch_st *result, unsigned block_log2,
                         size_t target) {
  stitch_diag d = {{0}};
  memset(f, 0, sizeof(*f));
  f->base = base;
  f->result = result;
  stitch_delta_opts o = {.block_log2 = block_log2};
  ASSERT_OK(stitch_delta_encode(base, result, &o, &f->dbuf, &f->dlen, NULL, &d),
            d);
  ASSERT_OK(stitch_delta_parse(f->dbuf, f->dlen, &f->dl, &d), d);
  ASSERT_OK(stitch_chunks_from_delta(f->dl, target, &f->obj, &f->bufs, &d), d);
  size_t n = stitch_delta_count(f->dl);
  f->mt = test_manifest_tensors(f->dl, result);
  f->obj.kind = stitch_st_count(base) ? STITCH_OBJ_DELTA : STITCH_OBJ_ANCHOR;
  f->obj.base_view = *stitch_delta_base_digest(f->dl);
  f->m = (stitch_manifest){.version = 1,
                           .view = *stitch_delta_result_digest(f->dl),
                           .n_tensors = n,
                           .tensors = f->mt,
                           .n_objects = 1,
                           .objects = &f->obj};
}

static void fixture_free(fixture *f) {
  stitch_chunks_free(f->bufs, f->obj.n_chunks);
  stitch_object_clear(&f->obj);
  stitch_delta_free(f->dl);
  free(f->dbuf);
  free(f->mt);
}

/* Per manifest tensor: a copy of the base's bytes, or FILL for new ones. */
static uint8_t **base_copy(const fixture *f, int fill, uint64_t **sizes) {
  size_t n = f->m.n_tensors;
  uint8_t **data = calloc(n ? n : 1, sizeof(*data));
  *sizes = calloc(n ? n : 1, sizeof(**sizes));
  for (size_t i = 0; i < n; i++) {
    const stitch_mtensor *t = &f->mt[i];
    const stitch_tensor *bt = stitch_st_find(f->base, t->name);
    data[i] = malloc(t->nbytes ? t->nbytes : 1);
    (*sizes)[i] = t->nbytes;
    if (bt != NULL && bt->nbytes == t->nbytes && bt->dtype == t->dtype)
      memcpy(data[i], bt->data, t->nbytes);
    else
      memset(data[i], fill, t->nbytes);
  }
  return data;
}

static void data_free(const fixture *f, uint8_t **data, uint64_t *sizes) {
  for (size_t i = 0; i < f->m.n_tensors; i++)
    free(data[i]);
  free(data);
  free(sizes);
}

static void check_result(const fixture *f, uint8_t *const *data) {
  for (size_t i = 0; i < f->m.n_tensors; i++) {
    const stitch_mtensor *t = &f->mt[i];
    const stitch_tensor *rt = stitch_st_find(f->result, t->name);
    if (memcmp(data[i], rt->data, t->nbytes) != 0)
      FAIL_("tensor '%s' differs from the result", t->name);
    stitch_digest dg;
    ASSERT(stitch_tensor_digest(t->dtype, t->ndim, t->shape, data[i], t->nbytes,
                                &dg) == 0);
    ASSERT_MEM_EQ(dg.b, t->digest.b, 32);
  }
}

/* Adds every chunk in a random order. */
static stitch_patch *patch_all(const fixture *f) {
  stitch_diag d = {{0}};
  stitch_patch *p;
  ASSERT_OK(stitch_patch_new(&f->m, 0, &p, &d), d);
  size_t n = (size_t)f->obj.n_chunks;
  size_t *order = malloc((n ? n : 1) * sizeof(size_t));
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(test_rng_next(&rng) % i), t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    ASSERT_UEQ(stitch_patch_missing(p), n - i);
    ASSERT_EQ(stitch_patch_block_count(p), 0);
    size_t c = order[i];
    ASSERT_OK(
        stitch_patch_add(p, c, f->bufs[c], (size_t)f->obj.chunks[c].size, &d),
        d);
  }
  ASSERT_UEQ(stitch_patch_missing(p), 0);
  free(order);
  return p;
}

/* ---- Reading and rewriting chunks in the test (proto/chunk.md) -------- */

typedef struct tck_entry {
  uint64_t gap, len, changed, sum; /* as written in the entry */
  uint8_t coding;
  const uint8_t *body; /* the payload that was read, whatever len says */
  size_t body_len;
} tck_entry;

typedef struct tck {
  uint8_t head[16];
  uint64_t n;
  tck_entry e[4096];
} tck;

static void tck_read(const uint8_t *buf, size_t len, tck *c) {
  rd r = {buf, len, 0};
  const uint8_t *h;
  ASSERT(rd_bytes(&r, 16, &h) == 0);
  memcpy(c->head, h, 16);
  ASSERT(rd_varint(&r, &c->n) == 0 && c->n <= 4096);
  for (uint64_t k = 0; k < c->n; k++) {
    tck_entry *e = &c->e[k];
    ASSERT(rd_varint(&r, &e->gap) == 0 && rd_u8(&r, &e->coding) == 0 &&
           rd_varint(&r, &e->len) == 0 && rd_varint(&r, &e->changed) == 0 &&
           rd_u64(&r, &e->sum) == 0);
  }
  for (uint64_t k = 0; k < c->n; k++) {
    c->e[k].body_len = (size_t)c->e[k].len;
    ASSERT(rd_bytes(&r, c->e[k].body_len, &c->e[k].body) == 0);
  }
  ASSERT_UEQ(r.pos, len);
}

/* The entries as they are, then the bodies, then EXTRA bytes. */
static uint8_t *tck_write(const tck *c, size_t extra, size_t *len) {
  dbuf b = {NULL, 0, 0, 64u << 20};
  ASSERT(dbuf_put(&b, c->head, 16) == 0 && dbuf_varint(&b, c->n) == 0);
  for (uint64_t k = 0; k < c->n; k++) {
    const tck_entry *e = &c->e[k];
    ASSERT(dbuf_varint(&b, e->gap) == 0 && dbuf_u8(&b, e->coding) == 0 &&
           dbuf_varint(&b, e->len) == 0 && dbuf_varint(&b, e->changed) == 0 &&
           dbuf_u64(&b, e->sum) == 0);
  }
  for (uint64_t k = 0; k < c->n; k++)
    ASSERT(dbuf_put(&b, c->e[k].body, c->e[k].body_len) == 0);
  for (size_t i = 0; i < extra; i++)
    ASSERT(dbuf_u8(&b, 0x5a) == 0);
  *len = b.len;
  return b.p;
}

/* Object block g's tensor, counting as stitch_chunk_ref describes. */
static size_t tensor_of_block(const fixture *f, uint64_t g) {
  uint64_t B = 1ull << f->obj.block_log2, at = 0;
  for (size_t i = 0; i < f->m.n_tensors; i++) {
    uint64_t s = f->obj.tflags[i] & 1
                     ? 2 * f->mt[i].nbytes
                     : f->mt[i].nbytes / stitch_dtype_size(f->mt[i].dtype);
    at += (s + B - 1) / B;
    if (g < at)
      return i;
  }
  FAIL_("block %llu is past the object", (unsigned long long)g);
}

/* Runs chunk CI replaced by BUF (its name forged to match) through a patch
 * with every other chunk intact. Returns the first error, or 0 when it
 * parsed and applied. Never crashes, and an error always has a message. */
static int try_forged(const fixture *f, size_t ci, const uint8_t *buf,
                      size_t len, stitch_diag *d) {
  size_t n = (size_t)f->obj.n_chunks;
  stitch_chunk_ref *refs = malloc(n * sizeof(*refs));
  memcpy(refs, f->obj.chunks, n * sizeof(*refs));
  refs[ci].size = len;
  stitch_hash(buf, len, &refs[ci].hash);
  stitch_object o = f->obj;
  o.chunks = refs;
  stitch_manifest m = f->m;
  m.objects = &o;
  stitch_patch *p = NULL;
  memset(d, 0, sizeof(*d));
  int rc = stitch_patch_new(&m, 0, &p, d);
  for (size_t j = 0; j < n && rc == 0; j++)
    rc = j == ci ? stitch_patch_add(p, j, buf, len, d)
                 : stitch_patch_add(p, j, f->bufs[j], (size_t)refs[j].size, d);
  if (rc == 0) {
    uint64_t *sizes;
    uint8_t **data = base_copy(f, 0, &sizes);
    rc = stitch_patch_apply(p, data, sizes, 2, d);
    data_free(f, data, sizes);
  }
  if (rc != 0) {
    ASSERT_LT(rc, 0);
    ASSERT(d->msg[0] != 0);
  }
  stitch_patch_free(p);
  free(refs);
  return rc;
}

/* ---- Tests -------------------------------------------------------------- */

static stitch_st *base_st, *result_st;

static void open_pair(void) {
  pair pr;
  make_pair(&pr);
  const char *pa = test_path("base.safetensors");
  const char *pb = test_path("result.safetensors");
  write_ckpt(pa, pr.a, pr.na, NULL);
  write_ckpt(pb, pr.b, pr.nb, "{\"step\":\"2\"}");
  pair_free(&pr);
  base_st = open_ckpt(pa);
  result_st = open_ckpt(pb);
}

/* Chunk ranges tile the blocks in order, each ends right after its last
 * listed block, sizes keep to the target unless one block is larger. */
static void check_layout(const fixture *f, size_t target) {
  uint64_t total = 0, at = 0, bytes = 0, listed = 0;
  for (size_t i = 0; i < stitch_delta_count(f->dl); i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(f->dl, i);
    total += t->blocks;
    listed += t->blocks - t->blocks_by_coding[STITCH_CODING_SAME];
  }
  static tck c;
  uint64_t seen = 0;
  for (uint64_t j = 0; j < f->obj.n_chunks; j++) {
    const stitch_chunk_ref *r = &f->obj.chunks[j];
    ASSERT_UEQ(r->first_block, at);
    ASSERT_GT(r->n_blocks, 0);
    tck_read(f->bufs[j], (size_t)r->size, &c);
    ASSERT_GT(c.n, 0);
    ASSERT(r->size <= target || c.n == 1);
    uint64_t g = r->first_block - 1;
    for (uint64_t k = 0; k < c.n; k++)
      g += c.e[k].gap + 1;
    if (j + 1 < f->obj.n_chunks)
      ASSERT_UEQ(g + 1, r->first_block + r->n_blocks);
    stitch_digest h;
    stitch_hash(f->bufs[j], (size_t)r->size, &h);
    ASSERT_MEM_EQ(h.b, r->hash.b, 32);
    at += r->n_blocks;
    bytes += r->size;
    seen += c.n;
  }
  ASSERT_UEQ(at, f->obj.n_chunks ? total : 0);
  ASSERT_UEQ(bytes, f->obj.bytes);
  ASSERT_UEQ(seen, listed);
  ASSERT_UEQ(f->obj.block_log2, 8);
}

static int is_sparse(int coding) {
  return coding == STITCH_CODING_SPARSE || coding == STITCH_CODING_SPARSEK ||
         coding == STITCH_CODING_SPARSET;
}

static void test_roundtrip(void) {
  fixture f;
  fixture_make(&f, base_st, result_st, 8, 4096);
  /* The fixture reaches what it should: every coding, nibbles, a new
   * tensor, an unchanged one, and many chunks. */
  unsigned codings[STITCH_CODING_COUNT_] = {0};
  int nibble = 0, fresh = 0;
  for (size_t i = 0; i < stitch_delta_count(f.dl); i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(f.dl, i);
    for (int c = 0; c < STITCH_CODING_COUNT_; c++)
      codings[c] += t->blocks_by_coding[c];
    nibble |= t->sym_bits == 4 && f.obj.tflags[i] == 1;
    fresh |= t->is_new && f.obj.tflags[i] == 2;
  }
  ASSERT(nibble && fresh);
  ASSERT_GT(codings[STITCH_CODING_SAME], 0);
  /* Sparse blocks: SPARSE's successors since 2026-12-04. */
  ASSERT_GT(codings[STITCH_CODING_SPARSEK] + codings[STITCH_CODING_SPARSET], 0);
  ASSERT_GT(codings[STITCH_CODING_XOR] + codings[STITCH_CODING_PLANES] +
                codings[STITCH_CODING_RAW],
            1);
  check_layout(&f, 4096);
  fprintf(stderr, "roundtrip: %llu chunks, %llu bytes (delta %zu)\n",
          (unsigned long long)f.obj.n_chunks, (unsigned long long)f.obj.bytes,
          f.dlen);
  ASSERT_GT(f.obj.n_chunks, 5);

  /* Cutting is deterministic. */
  stitch_object o2;
  uint8_t **b2;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_chunks_from_delta(f.dl, 4096, &o2, &b2, &d), d);
  ASSERT_UEQ(o2.n_chunks, f.obj.n_chunks);
  ASSERT_MEM_EQ(o2.chunks, f.obj.chunks, o2.n_chunks * sizeof(*o2.chunks));
  stitch_chunks_free(b2, o2.n_chunks);
  stitch_object_clear(&o2);

  /* All at once, on 1 to 3 threads, chunks arriving in any order. */
  for (unsigned threads = 1; threads <= 3; threads++) {
    stitch_patch *p = patch_all(&f);
    uint64_t *sizes;
    uint8_t **data = base_copy(&f, 0xa5, &sizes);
    ASSERT_OK(stitch_patch_apply(p, data, sizes, threads, &d), d);
    check_result(&f, data);
    sizes[T_F32] += 1;
    ASSERT_EQ(stitch_patch_apply(p, data, sizes, threads, &d),
              STITCH_EMISMATCH);
    data_free(&f, data, sizes);
    stitch_patch_free(p);
  }

  /* One block at a time, as an engine adapter would. */
  stitch_patch *p = patch_all(&f);
  uint64_t *sizes, n = stitch_patch_block_count(p);
  uint8_t **data = base_copy(&f, 0x5a, &sizes);
  uint8_t *scratch = malloc(stitch_patch_scratch_bytes(p));
  uint64_t covered = 0;
  for (uint64_t k = 0; k < n; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    ASSERT_LT(b.tensor, f.m.n_tensors);
    ASSERT_GT(b.byte_len, 0);
    ASSERT_LE(b.byte_off + b.byte_len, f.mt[b.tensor].nbytes);
    covered += b.byte_len;
    ASSERT_OK(stitch_patch_decode_block(p, k, data[b.tensor] + b.byte_off,
                                        scratch, &d),
              d);
  }
  ASSERT_GT(covered, 0);
  check_result(&f, data);
  /* Into a copy of the block elsewhere, as a journaling applier does. */
  data_free(&f, data, sizes);
  data = base_copy(&f, 0x5a, &sizes);
  uint8_t *blk = malloc(8u << 8);
  for (uint64_t k = 0; k < n; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    ASSERT_LE(b.byte_len, 8u << 8);
    memcpy(blk, data[b.tensor] + b.byte_off, b.byte_len);
    ASSERT_OK(stitch_patch_decode_block(p, k, blk, scratch, &d), d);
    memcpy(data[b.tensor] + b.byte_off, blk, b.byte_len);
  }
  check_result(&f, data);
  free(blk);
  ASSERT_EQ(stitch_patch_decode_block(p, n, data[0], scratch, &d),
            STITCH_EINVAL);
  free(scratch);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  fixture_free(&f);

  /* Chunks of one block each (every block exceeds a 1-byte target), and
   * the default size (one chunk here). */
  fixture_make(&f, base_st, result_st, 8, 1);
  check_layout(&f, 1);
  p = patch_all(&f);
  ASSERT_UEQ(stitch_patch_block_count(p), f.obj.n_chunks);
  data = base_copy(&f, 0, &sizes);
  ASSERT_OK(stitch_patch_apply(p, data, sizes, 0, &d), d);
  check_result(&f, data);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  fixture_free(&f);
  fixture_make(&f, base_st, result_st, 8, 0);
  ASSERT_UEQ(f.obj.n_chunks, 1);
  fixture_free(&f);
}

static void test_anchor(void) {
  static const uint8_t empty[] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  stitch_st *none;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_st_parse(empty, sizeof(empty), &none, &d), d);
  fixture f;
  fixture_make(&f, none, result_st, 9, 8192);
  for (size_t i = 0; i < f.m.n_tensors; i++)
    ASSERT(f.obj.tflags[i] & 2);
  ASSERT_GT(f.obj.n_chunks, 2);
  stitch_patch *p = patch_all(&f);
  uint64_t *sizes;
  uint8_t **data = base_copy(&f, 0, &sizes);
  ASSERT_OK(stitch_patch_apply(p, data, sizes, 2, &d), d);
  check_result(&f, data);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  fixture_free(&f);
  stitch_st_free(none);
}

static void test_no_change(void) {
  fixture f;
  fixture_make(&f, result_st, result_st, 8, 4096);
  ASSERT_UEQ(f.obj.n_chunks, 0);
  ASSERT_UEQ(f.obj.bytes, 0);
  stitch_diag d = {{0}};
  stitch_patch *p;
  ASSERT_OK(stitch_patch_new(&f.m, 0, &p, &d), d);
  ASSERT_UEQ(stitch_patch_missing(p), 0);
  ASSERT_UEQ(stitch_patch_block_count(p), 0);
  uint64_t *sizes;
  uint8_t **data = base_copy(&f, 0, &sizes);
  ASSERT_OK(stitch_patch_apply(p, data, sizes, 0, &d), d);
  check_result(&f, data);
  ASSERT_EQ(stitch_patch_add(p, 0, f.dbuf, 17, &d), STITCH_EINVAL);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  fixture_free(&f);
}

static void test_limits(void) {
  /* A block that alone passes STITCH_CHUNK_MAX: 2^22 random F64 values of
   * a new tensor code raw, 32 MiB. */
  static const uint8_t empty[] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  size_t n = 1u << 22;
  uint8_t *big = rnd_bytes(8 * n);
  tspec t = {"big", STITCH_DT_F64, 1, {n}, big};
  const char *path = test_path("big.safetensors");
  write_ckpt(path, &t, 1, NULL);
  free(big);
  stitch_st *none, *st = open_ckpt(path);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_st_parse(empty, sizeof(empty), &none, &d), d);
  stitch_delta_opts o = {.block_log2 = 22};
  uint8_t *buf;
  size_t len;
  ASSERT_OK(stitch_delta_encode(none, st, &o, &buf, &len, NULL, &d), d);
  stitch_delta *dl;
  ASSERT_OK(stitch_delta_parse(buf, len, &dl, &d), d);
  stitch_object obj;
  uint8_t **bufs;
  ASSERT_EQ(stitch_chunks_from_delta(dl, 0, &obj, &bufs, &d), STITCH_ELIMIT);
  ASSERT(strstr(d.msg, "'big'") != NULL);
  ASSERT(bufs == NULL && obj.chunks == NULL && obj.tflags == NULL);
  ASSERT_EQ(stitch_chunks_from_delta(dl, STITCH_CHUNK_MAX + 1, &obj, &bufs, &d),
            STITCH_EINVAL);
  stitch_delta_free(dl);
  free(buf);
  stitch_st_free(st);
  stitch_st_free(none);
}

static void test_rejections(void) {
  fixture f;
  fixture_make(&f, base_st, result_st, 8, 4096);
  stitch_diag d = {{0}};
  stitch_patch *p;
  ASSERT_OK(stitch_patch_new(&f.m, 0, &p, &d), d);
  size_t c = 3, len = (size_t)f.obj.chunks[c].size;
  uint8_t *bad = dup_bytes(f.bufs[c], len);
  bad[len / 2] ^= 0x10;
  ASSERT_EQ(stitch_patch_add(p, c, bad, len, &d), STITCH_ECHECKSUM);
  ASSERT_STR_EQ(d.msg, "chunk 3: hash mismatch");
  ASSERT_EQ(stitch_patch_add(p, c, f.bufs[c], len - 1, &d), STITCH_ECHECKSUM);
  ASSERT_EQ(stitch_patch_add(p, f.obj.n_chunks, f.bufs[c], len, &d),
            STITCH_EINVAL);
  ASSERT_UEQ(stitch_patch_missing(p), f.obj.n_chunks);
  ASSERT_OK(stitch_patch_add(p, c, f.bufs[c], len, &d), d);
  ASSERT_EQ(stitch_patch_add(p, c, f.bufs[c], len, &d), STITCH_EEXISTS);
  ASSERT_UEQ(stitch_patch_missing(p), f.obj.n_chunks - 1);
  /* Everything but chunk 0. */
  for (size_t j = 1; j < f.obj.n_chunks; j++)
    if (j != c)
      ASSERT_OK(
          stitch_patch_add(p, j, f.bufs[j], (size_t)f.obj.chunks[j].size, &d),
          d);
  ASSERT_UEQ(stitch_patch_missing(p), 1);
  ASSERT_EQ(stitch_patch_block_count(p), 0);
  uint64_t *sizes;
  uint8_t **data = base_copy(&f, 0, &sizes);
  ASSERT_EQ(stitch_patch_apply(p, data, sizes, 0, &d), STITCH_EINVAL);
  ASSERT(strstr(d.msg, "missing") != NULL);
  ASSERT_EQ(stitch_patch_decode_block(p, 0, data[0], data[1], &d),
            STITCH_EINVAL);
  stitch_patch_block b;
  stitch_patch_block_at(p, 0, &b);
  ASSERT_UEQ(b.byte_len, 0);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  free(bad);

  /* Ranges need not tile: the unchanged tensor's 3 blocks at the end may
   * be in no chunk. A new tensor's may not. */
  stitch_chunk_ref *last = &f.obj.chunks[f.obj.n_chunks - 1];
  last->n_blocks -= 3;
  p = patch_all(&f);
  data = base_copy(&f, 0, &sizes);
  ASSERT_OK(stitch_patch_apply(p, data, sizes, 0, &d), d);
  check_result(&f, data);
  data_free(&f, data, sizes);
  stitch_patch_free(p);
  last->n_blocks += 3;
  uint64_t nc = f.obj.n_chunks;
  f.obj.n_chunks = 0;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  ASSERT_STR_EQ(d.msg, "object: blocks of new tensor 'new' are in no chunk");
  f.obj.n_chunks = nc;

  /* Ranges out of order or past the end, or no such object. */
  ASSERT_EQ(stitch_patch_new(&f.m, 1, &p, &d), STITCH_EINVAL);
  stitch_chunk_ref saved = f.obj.chunks[2];
  f.obj.chunks[2].first_block = f.obj.chunks[1].first_block;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  f.obj.chunks[2].first_block = saved.first_block + 1;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  f.obj.chunks[2] = saved;
  f.obj.chunks[f.obj.n_chunks - 1].n_blocks++;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  f.obj.chunks[f.obj.n_chunks - 1].n_blocks--;
  f.obj.block_log2 = 30;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  f.obj.block_log2 = 8;
  f.obj.tflags[0] |= 4;
  ASSERT_EQ(stitch_patch_new(&f.m, 0, &p, &d), STITCH_EFORMAT);
  f.obj.tflags[0] &= 3;
  fixture_free(&f);
}

/* Chunks whose contents are wrong but whose names were forged to match:
 * the parser itself must refuse them. */
static void test_forged(void) {
  fixture f;
  fixture_make(&f, base_st, result_st, 8, 4096);
  static tck c, m;
  stitch_diag d;
  size_t len;
  uint8_t *buf;
  /* A chunk holding blocks of the new tensor, and one holding a SPARSE
   * block. */
  size_t cnew = (size_t)-1, csp = (size_t)-1;
  for (size_t j = 0; j < f.obj.n_chunks; j++) {
    tck_read(f.bufs[j], (size_t)f.obj.chunks[j].size, &c);
    uint64_t g = f.obj.chunks[j].first_block - 1;
    for (uint64_t k = 0; k < c.n; k++) {
      g += c.e[k].gap + 1;
      if (f.obj.tflags[tensor_of_block(&f, g)] & 2 && cnew == (size_t)-1)
        cnew = j;
      if (is_sparse(c.e[k].coding) && csp == (size_t)-1)
        csp = j;
    }
  }
  ASSERT(cnew != (size_t)-1 && csp != (size_t)-1);
  tck_read(f.bufs[csp], (size_t)f.obj.chunks[csp].size, &c);

  /* The intact chunk passes through the forging path. */
  buf = tck_write(&c, 0, &len);
  ASSERT_OK(try_forged(&f, csp, buf, len, &d), d);
  free(buf);

#define EXPECT(rc_, what)                                                      \
  do {                                                                         \
    buf = tck_write(&m, 0, &len);                                              \
    int r_ = try_forged(&f, csp, buf, len, &d);                                \
    if (r_ != (rc_))                                                           \
      FAIL_("%s: got %d (%s)", what, r_, d.msg);                               \
    free(buf);                                                                 \
  } while (0)

  /* Entry counts: more than the range has blocks, and more than the
   * bytes could hold. */
  ASSERT_GE(f.obj.chunks[csp].n_blocks, 2);
  buf = tck_write(&c, 0, &len);
  {
    size_t at = 16 + 1 + (c.n >= 128); /* after the count (< 2^14) */
    dbuf b = {NULL, 0, 0, 1u << 20};
    ASSERT(dbuf_put(&b, buf, 16) == 0 && dbuf_varint(&b, 1ull << 60) == 0 &&
           dbuf_put(&b, buf + at, len - at) == 0);
    ASSERT_EQ(try_forged(&f, csp, b.p, b.len, &d), STITCH_EFORMAT);
    ASSERT(strstr(d.msg, "entries for a range") != NULL);
    b.len = 16;
    ASSERT(dbuf_varint(&b, f.obj.chunks[csp].n_blocks) == 0 &&
           dbuf_put(&b, buf + at, 12) == 0);
    ASSERT_EQ(try_forged(&f, csp, b.p, b.len, &d), STITCH_ETRUNCATED);
    ASSERT(strstr(d.msg, "do not fit") != NULL);
    dbuf_free(&b);
  }
  free(buf);
  m = c;
  m.e[0].gap = f.obj.chunks[csp].n_blocks;
  EXPECT(STITCH_EFORMAT, "gap past the range");
  m = c;
  m.e[c.n - 1].gap += f.obj.chunks[csp].n_blocks;
  EXPECT(STITCH_EFORMAT, "last gap past the range");
  for (unsigned bad_coding = 0; bad_coding < 256; bad_coding += 5) {
    if (bad_coding >= 1 && bad_coding <= 4)
      continue;
    m = c;
    m.e[0].coding = (uint8_t)bad_coding;
    EXPECT(STITCH_EFORMAT, "bad coding");
  }
  m = c;
  m.e[0].changed = 1u << 20;
  EXPECT(STITCH_EFORMAT, "more changes than symbols");
  m = c;
  memcpy(m.head, "STITCHDL", 8);
  EXPECT(STITCH_EFORMAT, "magic");
  m = c;
  m.head[8] = 2;
  EXPECT(STITCH_EVERSION, "format");
  m = c;
  m.head[13] = 1;
  EXPECT(STITCH_EVERSION, "reserved");
  m = c;
  m.e[0].len += 1;
  EXPECT(STITCH_ETRUNCATED, "payloads longer than the chunk");
  m = c;
  m.e[0].len += 1u << 30;
  EXPECT(STITCH_ETRUNCATED, "a payload far longer than the chunk");
  m = c;
  buf = tck_write(&m, 3, &len);
  ASSERT_EQ(try_forged(&f, csp, buf, len, &d), STITCH_EFORMAT);
  ASSERT(strstr(d.msg, "after the last payload") != NULL);
  free(buf);
  /* Structurally sound, wrong at decode time: a block checksum, and a
   * SPARSE change count. */
  m = c;
  m.e[c.n - 1].sum ^= 1;
  EXPECT(STITCH_ECHECKSUM, "block checksum");
  ASSERT(strstr(d.msg, "checksum mismatch") != NULL);
  /* SPARSE checks the count it decoded against the index's. SPARSEK and
   * SPARSET are told the count and stop there, so a forged count (in a
   * chunk whose hash was forged too) may decode other bytes without an
   * error: the result's digest, checked before anything is published,
   * catches those. Here: a clean error or a decode, never a crash. */
  for (uint64_t k = 0; k < c.n; k++)
    if (is_sparse(c.e[k].coding)) {
      for (int dk = -1; dk <= 1; dk += 2) {
        m = c;
        m.e[k].changed = c.e[k].changed + (uint64_t)(int64_t)dk;
        buf = tck_write(&m, 0, &len);
        int r_ = try_forged(&f, csp, buf, len, &d);
        ASSERT(r_ == 0 || r_ == STITCH_EFORMAT);
        if (c.e[k].coding == STITCH_CODING_SPARSE)
          ASSERT_EQ(r_, STITCH_EFORMAT);
        free(buf);
      }
      break;
    }
  /* Dropping a block of a tensor with a base is legal: it stays as it was
   * (the caller's digest check then fails). */
  m = c;
  m.e[1].gap += m.e[0].gap + 1;
  memmove(&m.e[0], &m.e[1], (size_t)(c.n - 1) * sizeof(m.e[0]));
  m.n--;
  EXPECT(0, "a base block left out");

  /* The new tensor: SPARSE or XOR need a base; no block may be left out. */
  tck_read(f.bufs[cnew], (size_t)f.obj.chunks[cnew].size, &c);
  uint64_t g = f.obj.chunks[cnew].first_block - 1, kn = 0;
  for (uint64_t k = 0; k < c.n; k++) {
    g += c.e[k].gap + 1;
    if (f.obj.tflags[tensor_of_block(&f, g)] & 2) {
      kn = k;
      break;
    }
  }
  for (uint8_t cd = STITCH_CODING_SPARSE; cd <= STITCH_CODING_XOR; cd++) {
    m = c;
    m.e[kn].coding = cd;
    buf = tck_write(&m, 0, &len);
    ASSERT_EQ(try_forged(&f, cnew, buf, len, &d), STITCH_EFORMAT);
    ASSERT(strstr(d.msg, "new tensor 'new'") != NULL);
    free(buf);
  }
  m = c;
  if (kn + 1 < c.n)
    m.e[kn + 1].gap += c.e[kn].gap + 1;
  memmove(&m.e[kn], &m.e[kn + 1], (size_t)(c.n - kn - 1) * sizeof(m.e[0]));
  m.n--;
  buf = tck_write(&m, 0, &len);
  ASSERT_EQ(try_forged(&f, cnew, buf, len, &d), STITCH_EFORMAT);
  ASSERT(strstr(d.msg, "leaves out a block of new tensor 'new'") != NULL);
  free(buf);
#undef EXPECT

  /* Every truncation, and thousands of random flips and overwrites, with
   * the name forged each time: an error with a message, or success. */
  size_t j = csp, full = (size_t)f.obj.chunks[j].size;
  for (size_t l = 0; l < full; l++)
    ASSERT_LT(try_forged(&f, j, f.bufs[j], l, &d), 0);
  buf = malloc(full);
  int ok = 0, failed = 0;
  for (int it = 0; it < 3000; it++) {
    j = (size_t)(test_rng_next(&rng) % f.obj.n_chunks);
    full = (size_t)f.obj.chunks[j].size;
    buf = realloc(buf, full);
    memcpy(buf, f.bufs[j], full);
    int edits = 1 + (int)(test_rng_next(&rng) % 3);
    /* Mostly the header and entries, where the parser looks. */
    size_t span = test_rng_next(&rng) & 1 ? full : (full < 96 ? full : 96);
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)(test_rng_next(&rng) % span);
      if (test_rng_next(&rng) & 1)
        buf[at] ^= (uint8_t)(1u << (test_rng_next(&rng) % 8));
      else
        buf[at] = (uint8_t)test_rng_next(&rng);
    }
    if (try_forged(&f, j, buf, full, &d) == 0)
      ok++;
    else
      failed++;
  }
  fprintf(stderr, "forged flips: %d applied, %d refused\n", ok, failed);
  ASSERT_GT(failed, 1000);
  free(buf);
  fixture_free(&f);
}

int main(void) {
  rng = test_rng_seeded("test_chunk", 20261201);
  open_pair();
  test_roundtrip();
  test_anchor();
  test_no_change();
  test_rejections();
  test_forged();
  test_limits();
  stitch_st_free(base_st);
  stitch_st_free(result_st);
  puts("test_chunk: ok");
  return 0;
}
