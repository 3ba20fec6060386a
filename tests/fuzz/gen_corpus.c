/* gen_corpus.c: writes the seed inputs of the fuzz corpus.
 *
 *   fuzz_gen_corpus DIR
 *
 * writes DIR/<target>/seed-* for every target in tests/fuzz. Everything is derived from fixed seeds,
 * so a rerun gives the same bytes (the committed corpus is this output plus
 * inputs found by campaigns, named min-* and crash-*). The program checks
 * that each delta seed really uses the coding it is named for and exits 1
 * if one does not: ctest runs it so an encoder change that moves a seed off
 * its coding is noticed.
 *
 * Regenerate the committed seeds with:
 *   build/tests/fuzz/fuzz_gen_corpus tests/fuzz/corpus */
#include "fuzz/chunk_fixture.h"
#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_peer.h"
#include "swarm/wire.h"

#include <errno.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *outdir;
static int failures;
static int sparse_mode; /* of the deltas make_delta codes */

static void write_file(const char *target, const char *name, const uint8_t *p,
                       size_t n) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", outdir, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gen_corpus: mkdir %s: %s\n", path, strerror(errno));
    exit(1);
  }
  snprintf(path, sizeof(path), "%s/%s/seed-%s", outdir, target, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || (n > 0 && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
    fprintf(stderr, "gen_corpus: cannot write %s\n", path);
    exit(1);
  }
}

static void write_str(const char *target, const char *name, const char *json) {
  /* A safetensors file whose header is JSON and whose data is 8 x 0x3f. */
  size_t hl = strlen(json);
  uint8_t *b = malloc(8 + hl + 8);
  put_le64(b, hl);
  memcpy(b + 8, json, hl);
  memset(b + 8 + hl, 0x3f, 8);
  write_file(target, name, b, 8 + hl + 8);
  free(b);
}

/* ---- tensors ------------------------------------------------------------ */

typedef struct tdata {
  fz_tensor t;
  uint8_t *p;
} tdata;

static tdata mk(const char *name, stitch_dtype dt, uint64_t d0, uint64_t d1,
                fz_rng *r) {
  tdata x = {{name, dt, d1 ? 2 : 1, {d0, d1}, NULL}, NULL};
  size_t nb = (size_t)fz_nbytes(&x.t);
  x.p = malloc(nb ? nb : 1);
  fz_fill(r, x.p, nb);
  x.t.data = x.p;
  return x;
}

static tdata tdup(const tdata *a) {
  tdata x = *a;
  size_t nb = (size_t)fz_nbytes(&a->t);
  x.p = malloc(nb ? nb : 1);
  if (nb)
    memcpy(x.p, a->p, nb);
  x.t.data = x.p;
  return x;
}

/* Floats with small magnitudes, as trained weights are. */
static void weights(tdata *x, fz_rng *r) {
  size_t es = stitch_dtype_size(x->t.dtype), n = (size_t)fz_numel(&x->t);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = fz_next(r);
    uint8_t *e = x->p + i * es;
    switch (x->t.dtype) {
    case STITCH_DT_BF16: {
      uint16_t h = (uint16_t)(0x3c00 | (v & 0x3ff) | (v >> 63) << 15);
      memcpy(e, &h, 2);
      break;
    }
    case STITCH_DT_F16: {
      uint16_t h = (uint16_t)(0x2000 | (v & 0x1fff) | (v >> 63) << 15);
      memcpy(e, &h, 2);
      break;
    }
    case STITCH_DT_F32: {
      uint32_t w = (uint32_t)(0x3c000000u | (v & 0x3ffffff) | (v >> 63) << 31);
      memcpy(e, &w, 4);
      break;
    }
    case STITCH_DT_F64: {
      uint64_t w =
          0x3f80000000000000ull | (v & 0xffffffffffffull) | (v >> 63) << 63;
      memcpy(e, &w, 8);
      break;
    }
    default:
      break;
    }
  }
}

/* Steps a fraction (per 1024) of the symbols by +-1 in their bit pattern. */
static void step_some(tdata *x, fz_rng *r, unsigned per1024) {
  size_t es = stitch_dtype_size(x->t.dtype), n = (size_t)fz_numel(&x->t);
  for (size_t i = 0; i < n; i++)
    if (fz_next(r) % 1024 < per1024) {
      uint64_t v = 0;
      memcpy(&v, x->p + i * es, es);
      v += (fz_next(r) & 1) ? 1 : (uint64_t)-1;
      memcpy(x->p + i * es, &v, es);
    }
}

/* Steps BF16 symbols by +-1 with a chance that doubles with each octave
 * below the largest (2 per 1024 there), as Adam's steps do. */
static void step_by_magnitude(tdata *x, fz_rng *r) {
  size_t n = (size_t)fz_numel(&x->t);
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, x->p + 2 * i, 2);
    unsigned oct = 0x7f - ((h >> 7) & 0xff);
    if (fz_next(r) % 1024 < (2u << (oct < 8 ? oct : 8))) {
      h = (uint16_t)(h + ((fz_next(r) & 1) ? 1 : -1));
      memcpy(x->p + 2 * i, &h, 2);
    }
  }
}

static void free_all(tdata *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(x[i].p);
}

/* ---- deltas ------------------------------------------------------------- */

typedef struct want {
  int coding; /* a coding some block must use, or -1 */
  int nibble; /* some tensor in nibble mode */
  int is_new; /* some tensor coded as new */
} want;

static uint8_t *make_delta(const tdata *b, size_t nb, const tdata *r, size_t nr,
                           const char *meta, unsigned block_log2, size_t *len) {
  fz_tensor bt[32], rt[32];
  if (nb > 32 || nr > 32)
    exit(1);
  for (size_t i = 0; i < nb; i++)
    bt[i] = b[i].t;
  for (size_t i = 0; i < nr; i++)
    rt[i] = r[i].t;
  size_t bl, rl;
  uint8_t *bb = fz_st_build(bt, nb, NULL, &bl);
  uint8_t *rb = fz_st_build(rt, nr, meta, &rl);
  stitch_st *bs, *rs;
  stitch_diag d = {{0}};
  if (stitch_st_parse(bb, bl, &bs, &d) != 0 ||
      stitch_st_parse(rb, rl, &rs, &d) != 0) {
    fprintf(stderr, "gen_corpus: %s\n", d.msg);
    exit(1);
  }
  stitch_delta_opts o = {.block_log2 = block_log2, .sparse_mode = sparse_mode};
  uint8_t *out;
  if (stitch_delta_encode(bs, rs, &o, &out, len, NULL, &d) != 0) {
    fprintf(stderr, "gen_corpus: encode: %s\n", d.msg);
    exit(1);
  }
  stitch_st_free(bs);
  stitch_st_free(rs);
  free(bb);
  free(rb);
  return out;
}

static void check(const char *name, const uint8_t *p, size_t n, want w) {
  stitch_delta *dl;
  stitch_diag d = {{0}};
  /* Format 3 seeds that name their base's tensors name fz_table_base's. */
  if (stitch_delta_parse_ex(p, n, fz_table_base(), &dl, &d) != 0) {
    fprintf(stderr, "gen_corpus: %s does not parse: %s\n", name, d.msg);
    failures++;
    return;
  }
  int got_c = w.coding < 0, got_n = !w.nibble, got_new = !w.is_new;
  for (size_t i = 0; i < stitch_delta_count(dl); i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    if (w.coding >= 0 && t->blocks_by_coding[w.coding])
      got_c = 1;
    if (t->sym_bits == 4)
      got_n = 1;
    if (t->is_new)
      got_new = 1;
  }
  stitch_delta_free(dl);
  if (!got_c || !got_n || !got_new) {
    fprintf(stderr, "gen_corpus: %s lacks %s%s%s\n", name,
            got_c ? "" : stitch_coding_name(w.coding),
            got_n ? "" : " nibble mode", got_new ? "" : " a new tensor");
    failures++;
  }
}

/* Writes the delta, its raw-index twin, and returns the delta. */
static void emit_delta(const char *name, uint8_t *p, size_t n, want w) {
  check(name, p, n, w);
  write_file("fuzz_delta", name, p, n);
  size_t rl;
  uint8_t *raw = fz_delta_raw_index(p, n, &rl);
  if (raw != NULL) {
    char nm[128];
    snprintf(nm, sizeof(nm), "%s-rawix", name);
    check(nm, raw, rl, w);
    write_file("fuzz_delta", nm, raw, rl);
    free(raw);
  }
}

/* Format 3 naming its base's tensors (fuzz_common.h fz_table_base): some
 * NVFP4 nibbles and BF16 weights stepped, metadata added or edited. */
static void gen_table_base(void) {
  const stitch_st *bs = fz_table_base();
  size_t bl;
  const uint8_t *bb = fz_table_base_bytes(&bl);
  if (bs == NULL || bb == NULL)
    exit(1);
  static const char *const metas[2] = {"{\"step\":\"2\"}", NULL};
  static const char *const names[2] = {"table-base-nvfp4", "table-base-bf16"};
  for (int k = 0; k < 2; k++) {
    fz_rng r = {(uint64_t)(40 + k)};
    size_t n = stitch_st_count(bs);
    fz_tensor t[8];
    uint8_t *copies[8];
    for (size_t i = 0; i < n && i < 8; i++) {
      const stitch_tensor *x = stitch_st_tensor(bs, i);
      copies[i] = malloc(x->nbytes ? (size_t)x->nbytes : 1);
      memcpy(copies[i], x->data, (size_t)x->nbytes);
      t[i] = (fz_tensor){x->name, x->dtype, x->ndim, {0}, copies[i]};
      memcpy(t[i].shape, x->shape, sizeof(t[i].shape));
      /* k 0: a few nibbles of the U8 tensor by one step; 1: BF16 ulps */
      if ((k == 0 && x->dtype == STITCH_DT_U8) ||
          (k == 1 && x->dtype == STITCH_DT_BF16))
        for (size_t j = 0; j < (size_t)x->nbytes; j++)
          if (fz_next(&r) % 64 == 0)
            copies[i][j] ^= k == 0 ? 0x01 : (j & 1 ? 0 : 0x01);
    }
    size_t rl;
    uint8_t *rb = fz_st_build(t, n, metas[k], &rl);
    stitch_st *rs;
    stitch_diag d = {{0}};
    if (rb == NULL || stitch_st_parse(rb, rl, &rs, &d) != 0)
      exit(1);
    stitch_delta_opts o = {.block_log2 = 8, .sparse_mode = sparse_mode,
                           .table_as_base = 1};
    uint8_t *out;
    size_t len;
    if (stitch_delta_encode(bs, rs, &o, &out, &len, NULL, &d) != 0) {
      fprintf(stderr, "gen_corpus: encode: %s\n", d.msg);
      exit(1);
    }
    stitch_delta *dl;
    if (stitch_delta_parse(out, len, &dl, &d) != STITCH_EINVAL) {
      fprintf(stderr, "gen_corpus: %s parses without its base\n", names[k]);
      failures++;
    }
    emit_delta(names[k], out, len,
               (want){STITCH_CODING_SPARSEK, 0, 0});
    free(out);
    stitch_st_free(rs);
    free(rb);
    for (size_t i = 0; i < n && i < 8; i++)
      free(copies[i]);
  }
  (void)bl;
}

static void gen_deltas(uint8_t **keep, size_t *keep_len) {
  fz_rng r = {1};
  const want any = {-1, 0, 0};

  { /* sparse: BF16 weights, ~1% of them step by one ulp */
    tdata b[2] = {mk("model.layers.0.mlp.w", STITCH_DT_BF16, 32, 32, &r),
                  mk("model.norm", STITCH_DT_F32, 64, 0, &r)};
    weights(&b[0], &r), weights(&b[1], &r);
    tdata n[2] = {tdup(&b[0]), tdup(&b[1])};
    step_some(&n[0], &r, 12);
    size_t len;
    uint8_t *p = make_delta(b, 2, n, 2, NULL, 8, &len);
    /* SPARSEK since 2026-12-04: it codes these blocks smaller. */
    emit_delta("sparse-bf16", p, len, (want){STITCH_CODING_SPARSEK, 0, 0});
    *keep = p; /* mutated below */
    *keep_len = len;
    free_all(b, 2), free_all(n, 2);
  }
  { /* SPARSET: a block of 4,096 BF16 values whose first 16 and last change,
     * where SPARSEK's start from the block's density (0.4 %) costs more
     * than SPARSE's own start (no generator: the seeds after it stay as
     * they were) */
    fz_rng r0 = {0};
    tdata b = mk("w", STITCH_DT_BF16, 4096, 0, &r0);
    for (size_t i = 0; i < 4096; i++) {
      uint16_t h = (uint16_t)(0x3c00 + (i * 37 % 512));
      memcpy(b.p + 2 * i, &h, 2);
    }
    tdata n = tdup(&b);
    for (size_t i = 0; i < 16; i++)
      n.p[2 * i] ^= 1;
    n.p[2 * 4095] ^= 1;
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 12, &len);
    emit_delta("sparset-bf16-burst", p, len,
               (want){STITCH_CODING_SPARSET, 0, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* gaps: a block of 2^16 BF16 weights, ~4% of them step by one ulp */
    tdata b = mk("model.layers.1.mlp.w", STITCH_DT_BF16, 256, 256, &r);
    weights(&b, &r);
    tdata n = tdup(&b);
    step_some(&n, &r, 40);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 16, &len);
    emit_delta("gaps-bf16", p, len, (want){STITCH_CODING_GAPS, 0, 0});
    free(p);
    sparse_mode = STITCH_SPARSE_FASTEST; /* the same change, as RANS */
    p = make_delta(&b, 1, &n, 1, NULL, 16, &len);
    sparse_mode = STITCH_SPARSE_FAST;
    emit_delta("rans-bf16", p, len, (want){STITCH_CODING_RANS, 0, 0});
    free(p);
    free_all(&b, 1), free_all(&n, 1);
  }
  { /* ransc: a block like it, smaller weights stepping more often (its
       own generator: the seeds after it stay as they were) */
    fz_rng r3 = {3};
    tdata b = mk("model.layers.1.mlp.w", STITCH_DT_BF16, 256, 256, &r3);
    weights(&b, &r3);
    tdata n = tdup(&b);
    step_by_magnitude(&n, &r3);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 16, &len);
    emit_delta("ransc-bf16", p, len, (want){STITCH_CODING_RANSC, 0, 0});
    free(p);
    free_all(&b, 1), free_all(&n, 1);
  }
  { /* xor: every F32 mantissa low byte jitters */
    tdata b = mk("w", STITCH_DT_F32, 512, 0, &r);
    weights(&b, &r);
    tdata n = tdup(&b);
    for (size_t i = 0; i < 512; i++)
      n.p[4 * i] ^= (uint8_t)(fz_next(&r) | 1);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 10, &len);
    emit_delta("xor-f32", p, len, (want){STITCH_CODING_XOR, 0, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* planes: noise replaced by a smooth ramp */
    tdata b = mk("w", STITCH_DT_BF16, 1024, 0, &r);
    tdata n = tdup(&b);
    for (size_t i = 0; i < 1024; i++) {
      uint16_t h = (uint16_t)(0x3f80 + (i & 63));
      memcpy(n.p + 2 * i, &h, 2);
    }
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 10, &len);
    emit_delta("planes-bf16", p, len, (want){STITCH_CODING_PLANES, 0, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* raw: noise replaced by other noise */
    tdata b = mk("w", STITCH_DT_I32, 256, 0, &r);
    tdata n = mk("w", STITCH_DT_I32, 256, 0, &r);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 8, &len);
    emit_delta("raw-i32", p, len, (want){STITCH_CODING_RAW, 0, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* nibble mode: packed E2M1 pairs (positive, 1 or 5), high nibbles
     * step by one: 16 in byte space, 1 in nibble space */
    tdata b = mk("w_packed", STITCH_DT_U8, 64, 32, &r);
    for (size_t i = 0; i < 2048; i++)
      b.p[i] = (uint8_t)((b.p[i] & 0x44) | 0x11);
    tdata n = tdup(&b);
    for (size_t i = 0; i < 2048; i++)
      if (fz_next(&r) % 32 == 0)
        n.p[i] = (uint8_t)(n.p[i] + 0x10);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 9, &len);
    emit_delta("nibble-u8", p, len, (want){STITCH_CODING_SPARSEK, 1, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* SPARSEK at an RL density: packed E2M1 values, one nibble of 4,224
     * changed (the index's count of 1 is all the decoder is told), in
     * blocks of 512 symbols, the last one short (its own generator: the
     * seeds after it stay as they were) */
    fz_rng r4 = {4};
    tdata b = mk("w_packed", STITCH_DT_U8, 64, 33, &r4);
    for (size_t i = 0; i < 64 * 33; i++)
      b.p[i] = (uint8_t)((b.p[i] & 0x77) | 0x11);
    tdata n = tdup(&b);
    n.p[1000] = (uint8_t)(n.p[1000] ^ 0x10);
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 9, &len);
    emit_delta("sparsek-one-nibble", p, len,
               (want){STITCH_CODING_SPARSEK, 1, 0});
    free(p), free(b.p), free(n.p);
  }

  { /* new, removed and re-laid-out tensors, and metadata */
    tdata b[3] = {mk("kept", STITCH_DT_F16, 128, 0, &r),
                  mk("dropped", STITCH_DT_U8, 40, 0, &r),
                  mk("reshaped", STITCH_DT_F32, 8, 8, &r)};
    weights(&b[0], &r);
    tdata n[3] = {tdup(&b[0]), tdup(&b[2]),
                  mk("added", STITCH_DT_I64, 24, 0, &r)};
    step_some(&n[0], &r, 40);
    n[1].t.shape[0] = 64, n[1].t.shape[1] = 0, n[1].t.ndim = 1;
    size_t len;
    uint8_t *p =
        make_delta(b, 3, n, 3, "{\"step\":\"42\",\"run\":\"fuzz\"}", 8, &len);
    emit_delta("new-tensor-meta", p, len, (want){STITCH_CODING_RAW, 0, 1});
    free(p), free_all(b, 3), free_all(n, 3);
  }
  { /* several blocks, most unchanged (same), one changed */
    tdata b = mk("big", STITCH_DT_BF16, 2048, 0, &r);
    weights(&b, &r);
    tdata n = tdup(&b);
    n.p[2 * 1500] ^= 1, n.p[2 * 1700 + 1] ^= 0x80;
    size_t len;
    uint8_t *p = make_delta(&b, 1, &n, 1, NULL, 8, &len);
    emit_delta("same-blocks", p, len, (want){STITCH_CODING_SAME, 0, 0});
    free(p), free(b.p), free(n.p);
  }
  { /* every dtype, sparse changes; a scalar and an empty tensor */
    static const stitch_dtype all[15] = {
        STITCH_DT_BOOL,    STITCH_DT_U8,  STITCH_DT_I8,  STITCH_DT_F8_E4M3,
        STITCH_DT_F8_E5M2, STITCH_DT_U16, STITCH_DT_I16, STITCH_DT_F16,
        STITCH_DT_BF16,    STITCH_DT_U32, STITCH_DT_I32, STITCH_DT_F32,
        STITCH_DT_U64,     STITCH_DT_I64, STITCH_DT_F64};
    static char names[15][16];
    tdata b[17], n[17];
    for (int i = 0; i < 15; i++) {
      snprintf(names[i], sizeof(names[i]), "t.%s", stitch_dtype_name(all[i]));
      b[i] = mk(names[i], all[i], 96, 0, &r);
      weights(&b[i], &r);
      n[i] = tdup(&b[i]);
      step_some(&n[i], &r, 60);
    }
    b[15] = mk("scalar", STITCH_DT_F32, 0, 0, &r);
    b[15].t.ndim = 0;
    free(b[15].p);
    b[15].p = malloc(4);
    memcpy(b[15].p, "\x00\x00\x80\x3f", 4);
    b[15].t.data = b[15].p;
    n[15] = tdup(&b[15]);
    n[15].p[0] = 1;
    b[16] = mk("empty", STITCH_DT_I16, 0, 0, &r);
    n[16] = tdup(&b[16]);
    size_t len;
    uint8_t *p = make_delta(b, 17, n, 17, NULL, 8, &len);
    emit_delta("all-dtypes", p, len, (want){STITCH_CODING_SPARSEK, 0, 0});
    free(p), free_all(b, 17), free_all(n, 17);
  }
  { /* nothing to nothing */
    size_t len;
    uint8_t *p = make_delta(NULL, 0, NULL, 0, NULL, 8, &len);
    emit_delta("empty", p, len, any);
    free(p);
  }  gen_table_base();
}

/* Mutants of one good delta (format 4: proto/delta.md "File layout,
 * format 4"): each stops at a different check. */
static void gen_delta_mutants(const uint8_t *p, size_t n) {
  size_t hl;
  uint64_t stored;
  uint8_t fl;
  if (!fz_delta4_header(p, n, &hl, &stored, &fl)) {
    fprintf(stderr, "gen_corpus: the mutants' delta is not format 4\n");
    failures++;
    return;
  }
  uint8_t *m = malloc(n + 16);
  memcpy(m, p, n);
  write_file("fuzz_delta", "mut-truncated-header", m, hl - 3);
  write_file("fuzz_delta", "mut-truncated-half", m, n / 2);
  write_file("fuzz_delta", "mut-truncated-last", m, n - 1);
  memcpy(m + n, "extra", 5);
  write_file("fuzz_delta", "mut-trailing", m, n + 5);
  m[0] = 'X';
  write_file("fuzz_delta", "mut-magic", m, n);
  m[0] = p[0];
  m[4] = 5; /* format 5, the checksum fixed */
  fz_delta_fix_sums(m, n);
  write_file("fuzz_delta", "mut-version", m, n);
  memcpy(m, p, n);
  m[5] |= 0x40; /* an unknown flag, the checksum fixed */
  fz_delta_fix_sums(m, n);
  write_file("fuzz_delta", "mut-flags", m, n);
  memcpy(m, p, n);
  m[hl - 4] ^= 1;
  write_file("fuzz_delta", "mut-header-sum", m, n);
  memcpy(m, p, n);
  m[hl + 3] ^= 0x10;
  write_file("fuzz_delta", "mut-index-flip", m, n);
  memcpy(m, p, n);
  m[n - 3] ^= 0x04;
  write_file("fuzz_delta", "mut-payload-flip", m, n); /* the file's sum */
  /* The index claims 4 GiB: a 5-byte varint, the checksum fixed. */
  size_t vl = hl - 8 - 6;
  memcpy(m, p, 6);
  memcpy(m + 6, "\xff\xff\xff\xff\x0f", 5);
  memcpy(m + 11 + 8, p + hl, n - hl);
  size_t hn = n - vl + 5;
  fz_delta_fix_sums(m, hn);
  write_file("fuzz_delta", "mut-index-huge", m, hn);
  free(m);
}

/* ---- safetensors -------------------------------------------------------- */

static void gen_safetensors(void) {
  const char *T = "fuzz_safetensors";
  fz_rng r = {2};
  {
    tdata a = mk("weight", STITCH_DT_BF16, 2, 4, &r);
    size_t len;
    uint8_t *p = fz_st_build(&a.t, 1, NULL, &len);
    write_file(T, "one-bf16", p, len);
    free(p), free(a.p);
  }
  {
    static const stitch_dtype all[15] = {
        STITCH_DT_BOOL,    STITCH_DT_U8,  STITCH_DT_I8,  STITCH_DT_F8_E4M3,
        STITCH_DT_F8_E5M2, STITCH_DT_U16, STITCH_DT_I16, STITCH_DT_F16,
        STITCH_DT_BF16,    STITCH_DT_U32, STITCH_DT_I32, STITCH_DT_F32,
        STITCH_DT_U64,     STITCH_DT_I64, STITCH_DT_F64};
    static char names[15][16];
    tdata t[17];
    fz_tensor ft[17];
    for (int i = 0; i < 15; i++) {
      snprintf(names[i], sizeof(names[i]), "t.%s", stitch_dtype_name(all[i]));
      t[i] = mk(names[i], all[i], 3, (uint64_t)(i % 3), &r);
      if (i % 3 == 0)
        t[i].t.ndim = 1;
    }
    t[15] = mk("scalar", STITCH_DT_F64, 1, 0, &r);
    t[15].t.ndim = 0;
    t[16] = mk("empty", STITCH_DT_F32, 0, 5, &r);
    for (int i = 0; i < 17; i++)
      ft[i] = t[i].t;
    size_t len;
    uint8_t *p =
        fz_st_build(ft, 17, "{\"format\":\"pt\",\"step\":\"3\"}", &len);
    write_file(T, "all-dtypes-meta", p, len);
    free(p), free_all(t, 17);
  }
  {
    size_t len;
    uint8_t *p = fz_st_build(NULL, 0, NULL, &len);
    write_file(T, "empty", p, len);
    free(p);
    p = fz_st_build(NULL, 0, "{}", &len);
    write_file(T, "meta-only", p, len);
    free(p);
  }
  {
    tdata a = mk("q\"uo\\te/\x01\xc3\xa9", STITCH_DT_U8, 3, 0, &r);
    size_t len;
    uint8_t *p = fz_st_build(&a.t, 1, NULL, &len);
    write_file(T, "odd-name", p, len);
    free(p), free(a.p);
  }
  /* Hostile headers; the data region is always 8 bytes. */
  write_str(T, "bad-overlap",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}");
  write_str(T, "bad-hole",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}");
  write_str(T, "bad-trailing",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}");
  write_str(
      T, "bad-past-end",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}");
  write_str(T, "bad-shape-overflow",
            "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
            "\"data_offsets\":[0,8]}}");
  write_str(T, "bad-size-overflow",
            "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952,1],"
            "\"data_offsets\":[0,8]}}");
  write_str(T, "bad-dtype",
            "{\"a\":{\"dtype\":\"F4\",\"shape\":[8],\"data_offsets\":[0,8]}}");
  write_str(T, "bad-dims",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,8],"
            "\"data_offsets\":[0,8]}}");
  write_str(T, "bad-negative",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[-8],\"data_offsets\":[0,8]}}");
  write_str(T, "bad-reversed",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,0]}}");
  write_str(T, "bad-duplicate",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
            "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}");
  write_str(T, "bad-meta",
            "{\"__metadata__\":{\"k\":1},"
            "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}");
  write_str(T, "bad-not-object", "[1,2,3]");
  write_str(T, "bad-json", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],");
  write_str(T, "bad-empty-name",
            "{\"\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}");
  write_str(T, "bad-nul-name",
            "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[8],"
            "\"data_offsets\":[0,8]}}");
  write_str(T, "bad-newline-name",
            "{\"a\\nb\":{\"dtype\":\"U9\",\"shape\":[8],"
            "\"data_offsets\":[0,8]}}");
  {
    uint8_t b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    write_file(T, "bad-header-len", b, 16);
    write_file(T, "bad-short", b, 5);
  }
}

/* ---- roundtrip recipes -------------------------------------------------- */

static void gen_roundtrip(void) {
  const char *T = "fuzz_delta_roundtrip";
  /* flags, count-1, then per tensor: dtype, op|ndim<<4|from_input<<7,
   * numel lo, numel hi, param; then value bytes. See the target's header. */
  static const struct {
    const char *name;
    size_t n;
    uint8_t b[48];
  } recipes[] = {
      {"sparse-bf16", 7, {0x00, 0, 8, 0x11, 0x00, 0x04, 20}},
      {"lowbits-f32", 7, {0x01, 0, 11, 0x12, 0x00, 0x02, 0x0f}},
      {"random-i32", 7, {0x02, 0, 10, 0x13, 0x00, 0x01, 0}},
      {"pattern-f16", 7, {0x03, 0, 7, 0x14, 0x00, 0x03, 9}},
      {"new-gone-reshape",
       17,
       {0x10, 2, 12, 0x15, 0x40, 0, 1, 5, 0x16, 0x80, 0, 2, 11, 0x17, 0x20, 0,
        4}},
      {"reshape-dtype", 7, {0x00, 0, 14, 0x27, 0x10, 0, 3}},
      {"nibble-u8", 7, {0x01, 0, 1, 0x18, 0x00, 0x08, 30}},
      {"mixed-multiblock", 7, {0x44, 0, 8, 0x19, 0x00, 0x0c, 50}},
      {"input-values",
       14,
       {0x00, 0, 11, 0x9a, 0x10, 0x00, 0, 0x7f, 0x80, 0xff, 0xff, 0x00, 0x00,
        0x80}},
      {"scalar-and-empty",
       12,
       {0x20, 1, 12, 0x01, 1, 0, 255, 9, 0x11, 0, 0, 0}},
      {"all-ops", 32, {0x7f, 5,    0,    0x11, 0x80, 0,    100,  3,
                       0x12, 0x00, 1,    0xff, 4,    0x13, 0x10, 1,
                       0,    14,   0x18, 0x40, 0,    3,    1,    0x28,
                       0x00, 2,    200,  13,   0xa9, 0x80, 0,    7}},
      {"nan-inf-f32",
       15,
       {0x00, 0, 11, 0x91, 0x20, 0x00, 255, 0x00, 0x00, 0x80, 0x7f, 0x00, 0x00,
        0xc0, 0xff}},
      /* large: one BF16 tensor of 2^16 + 300 symbols, OP_CLASSES at about
       * 6 %, and an F32 one at about 3 %: RANSC blocks */
      {"classes-large", 12, {0x00, 0x43, 8, 0x1b, 0x2c, 0x01, 30, 11, 0x1b, 0, 0, 14}},
  };
  for (size_t i = 0; i < sizeof(recipes) / sizeof(recipes[0]); i++)
    write_file(T, recipes[i].name, recipes[i].b, recipes[i].n);
}

/* ---- manifests ---------------------------------------------------------- */

/* The 32-byte seed of fuzz_manifest's key (fuzz_manifest.c has the same),
 * so that the signed seeds verify there. Each seed is a mode byte (even:
 * a signed manifest follows; odd: a body, which the target signs) and the
 * payload; see fuzz_manifest.c. */
#define FZ_MANIFEST_SEED "stitch fuzz_manifest fixed seed!"

static void emit_manifest(const char *name, uint8_t mode, const uint8_t *p,
                          size_t n) {
  uint8_t *b = malloc(n + 1);
  if (b == NULL)
    exit(1);
  b[0] = mode;
  if (n > 0)
    memcpy(b + 1, p, n);
  write_file("fuzz_manifest", name, b, n + 1);
  free(b);
}

/* Where the body of a signed manifest [1, body, sig] is. */
static const uint8_t *manifest_body(const uint8_t *p, size_t n, size_t *len) {
  unsigned w = p[2] == 0xc4 ? 1 : p[2] == 0xc5 ? 2 : 4;
  if (n < 3 + w || p[0] != 0x93 || p[1] != 0x01 || p[2] < 0xc4 || p[2] > 0xc6)
    exit(1);
  *len = 0;
  for (unsigned i = 0; i < w; i++)
    *len = *len << 8 | p[3 + i];
  return p + 3 + w;
}

/* First occurrence of needle in p[0..n), or exit. */
static size_t find(const uint8_t *p, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(p + i, needle, k) == 0)
      return i;
  fprintf(stderr, "gen_corpus: manifest: no \"%s\"\n", needle + 1);
  exit(1);
}

static uint8_t *sign_or_die(const stitch_manifest *m, const stitch_seckey *sk,
                            size_t *len) {
  uint8_t *out;
  stitch_diag d = {{0}};
  if (stitch_manifest_sign(m, sk, &out, len, NULL, &d) != 0) {
    fprintf(stderr, "gen_corpus: manifest: %s\n", d.msg);
    exit(1);
  }
  return out;
}

static void gen_manifest(void) {
  stitch_pubkey pk, pk2;
  stitch_seckey sk, sk2;
  crypto_sign_seed_keypair(pk.b, sk.b, (const uint8_t *)FZ_MANIFEST_SEED);
  crypto_sign_seed_keypair(pk2.b, sk2.b,
                           (const uint8_t *)"another swarm's key, 32 bytes.!!");
  stitch_digest empty;
  stitch_view_digest_from(0, NULL, NULL, &empty);
  fz_rng r = {77};

  /* Blocks of 2^8 symbols: w 2, q 1 (40 bytes as 80 nibbles), s 1. */
  stitch_mtensor t[3] = {
      {"w", STITCH_DT_BF16, 2, {32, 16}, 1024, {{0}}},
      {"q", STITCH_DT_U8, 1, {40}, 40, {{0}}},
      {"s", STITCH_DT_F32, 0, {0}, 4, {{0}}},
  };
  uint8_t tf_anchor[3] = {DELTA_TF_NEW, DELTA_TF_NEW | DELTA_TF_NIBBLE,
                          DELTA_TF_NEW};
  uint8_t tf_delta[3] = {0, DELTA_TF_NIBBLE, 0};
  uint8_t tf_cumul[3] = {0, 0, DELTA_TF_NEW};
  stitch_chunk_ref ch_anchor[2] = {{{{0}}, 600, 0, 2}, {{{0}}, 100, 2, 2}};
  stitch_chunk_ref ch_delta[1] = {{{{0}}, 50, 1, 2}};
  stitch_chunk_ref ch_cumul[2] = {{{{0}}, 70, 0, 1}, {{{0}}, 9, 3, 1}};
  for (int i = 0; i < 3; i++)
    fz_fill(&r, t[i].digest.b, 32);
  for (int i = 0; i < 2; i++) {
    fz_fill(&r, ch_anchor[i].hash.b, 32);
    fz_fill(&r, ch_cumul[i].hash.b, 32);
  }
  fz_fill(&r, ch_delta[0].hash.b, 32);
  stitch_object anchor = {STITCH_OBJ_ANCHOR, 0, {{0}}, empty, 8, tf_anchor,
                          2, ch_anchor, 0};
  stitch_object delta = {STITCH_OBJ_DELTA, 0, {{0}}, {{0}}, 8, tf_delta,
                         1, ch_delta, 0};
  stitch_object cumul = {STITCH_OBJ_CUMULATIVE, 2, {{0}}, {{0}}, 8, tf_cumul,
                         2, ch_cumul, 0};
  fz_fill(&r, delta.base_view.b, 32);
  fz_fill(&r, cumul.base_id.b, 32);
  fz_fill(&r, cumul.base_view.b, 32);

  stitch_manifest m = {.swarm = pk, .version = 1, .time_unix = 1767225600,
                       .n_tensors = 3, .tensors = t};
  fz_fill(&r, m.view.b, 32);
  stitch_object objs[3];
  static const struct {
    const char *name;
    uint64_t version;
    int n;
    int kinds[3];
  } plans[] = {{"anchor", 1, 1, {STITCH_OBJ_ANCHOR}},
               {"delta-anchor", 5, 2, {STITCH_OBJ_DELTA, STITCH_OBJ_ANCHOR}},
               {"cumulative",
                9,
                3,
                {STITCH_OBJ_DELTA, STITCH_OBJ_CUMULATIVE, STITCH_OBJ_ANCHOR}}};
  uint8_t *keep = NULL;
  size_t keep_len = 0;
  for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
    m.version = plans[p].version;
    m.parent_version = m.version - 1;
    memset(m.parent_id.b, 0, 32);
    if (m.parent_version > 0)
      fz_fill(&r, m.parent_id.b, 32);
    m.meta = m.version == 5 ? "{\"step\":\"5\"}" : NULL;
    delta.base_version = m.parent_version;
    delta.base_id = m.parent_id;
    for (int i = 0; i < plans[p].n; i++)
      objs[i] = plans[p].kinds[i] == STITCH_OBJ_ANCHOR ? anchor
                : plans[p].kinds[i] == STITCH_OBJ_DELTA ? delta
                                                         : cumul;
    m.n_objects = (uint64_t)plans[p].n;
    m.objects = objs;
    size_t n, bl;
    uint8_t *s = sign_or_die(&m, &sk, &n);
    const uint8_t *body = manifest_body(s, n, &bl);
    char name[64];
    emit_manifest(plans[p].name, 0, s, n);
    snprintf(name, sizeof(name), "%s-body", plans[p].name);
    emit_manifest(name, 1, body, bl);
    if (m.version == 5) {
      keep = s;
      keep_len = n;
    } else {
      free(s);
    }
  }

  /* Mutants of "delta-anchor", each refused for one reason. */
  uint8_t *c = malloc(keep_len + 1);
  size_t bl;
  const uint8_t *body = manifest_body(keep, keep_len, &bl);
  if (c == NULL)
    exit(1);
  memcpy(c, keep, keep_len);
  c[1] = 0x02;
  emit_manifest("bad-format", 0, c, keep_len);
  c[1] = 0x01;
  c[keep_len - 1] ^= 1;
  emit_manifest("bad-signature", 0, c, keep_len);
  c[keep_len - 1] ^= 1;
  c[keep_len] = 0xc0;
  emit_manifest("bad-trailing", 0, c, keep_len + 1);
  emit_manifest("bad-truncated", 0, c, keep_len / 2);
  memcpy(c, body, bl);
  c[find(c, bl, "\xa4time") + 2] = 'a'; /* "tame": an unknown key */
  emit_manifest("bad-unknown-key-body", 1, c, bl);
  memcpy(c, body, bl);
  c[find(c, bl, "\xa1q\x02") + 1] = 'w'; /* two tensors named "w" */
  emit_manifest("bad-dup-name-body", 1, c, bl);
  free(c);
  free(keep);
  m.swarm = pk2; /* signed by another swarm's key */
  m.objects = &anchor;
  m.n_objects = 1;
  m.version = 1;
  m.parent_version = 0;
  memset(m.parent_id.b, 0, 32);
  uint8_t *s = sign_or_die(&m, &sk2, &keep_len);
  emit_manifest("bad-other-swarm", 0, s, keep_len);
  free(s);
  static const uint8_t big[10] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  emit_manifest("bad-count-body", 1, big, sizeof(big));
  uint8_t deep[65];
  memset(deep, 0x91, sizeof(deep));
  deep[64] = 0x90;
  emit_manifest("bad-deep-body", 1, deep, sizeof(deep));
}

/* ---- chunks ------------------------------------------------------------- */

static void emit_chunk(const char *name, const uint8_t *p, size_t n) {
  write_file("fuzz_chunk", name, p, n);
}

/* Chunk 0 of fuzz_chunk's fixed object, other chunks and re-codings of it,
 * and damaged forms (chunk_fixture.h). */
static void gen_chunk(void) {
  fzc f;
  if (fzc_build(&f) != 0 || fzc_seeds(&f, emit_chunk) != 0) {
    fprintf(stderr, "gen_corpus: fuzz_chunk's fixture lost its reach\n");
    failures++;
  }
  fzc_free(&f);
}

/* ---- swarm frames ------------------------------------------------------- */

/* fuzz_wire's input is a split header (byte 0's low 4 bits: how many split
 * bytes follow; bit 4, FUZZ_WIRE_TAIL: the reader's split) and then a
 * stream of frames (fuzz_wire.c). */
#define FUZZ_WIRE_TAIL 0x10
static void emit_wire(const char *name, unsigned flags, const uint8_t *split,
                      size_t k, const uint8_t *stream, size_t len) {
  uint8_t *b = malloc(1 + k + len);
  if (b == NULL)
    exit(1);
  b[0] = (uint8_t)(k | flags);
  if (k > 0)
    memcpy(b + 1, split, k);
  if (len > 0)
    memcpy(b + 1 + k, stream, len);
  write_file("fuzz_wire", name, b, 1 + k + len);
  free(b);
}

static void wire_or_die(dbuf *out, const wire_msg *m) {
  if (wire_encode(out, m) != 0) {
    fprintf(stderr, "gen_corpus: wire: cannot encode type %d\n", m->type);
    exit(1);
  }
}

/* A frame around a body packed by hand (for bodies the encoder refuses). */
static void wire_raw(dbuf *out, int type, const msgpack_sbuffer *sb) {
  uint32_t len = (uint32_t)sb->size + 1;
  uint8_t h[5] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                  (uint8_t)(len >> 24), (uint8_t)type};
  if (dbuf_put(out, h, 5) != 0 || dbuf_put(out, sb->data, sb->size) != 0)
    exit(1);
}

static void gen_wire(void) {
  fz_rng r = {11};
  static uint8_t blob[700], bits[3] = {0xff, 0x5a, 0x03};
  fz_fill(&r, blob, sizeof(blob));
  wire_msg *m = calloc(1, sizeof(*m));
  dbuf s = {NULL, 0, 0, 1u << 20};
  if (m == NULL)
    exit(1);
  m->proto = WIRE_PROTO;
  fz_fill(&r, m->swarm.b, 32);
  fz_fill(&r, m->node.b, 32);
  fz_fill(&r, m->kx, 32);
  fz_fill(&r, m->sig, 64);
  strcpy(m->listen, "10.1.2.3:7070");
  strcpy(m->region, "eu-west");
  m->version = 300, m->object = 1, m->chunk = 2;
  m->n_peers = 2;
  strcpy(m->peer_addr[0], "10.1.2.4:7070");
  strcpy(m->peer_addr[1], "[2001:db8::1]:7070");
  strcpy(m->peer_region[1], "us-east");
  m->n_reach = 2;
  strcpy(m->reach[0], "us-east");
  strcpy(m->reach[1], "asia");
  m->punch = WIRE_PUNCH_ACCEPT;
  strcpy(m->addr, "198.51.100.7:40123");
  static const char *const names[WIRE_TYPE_COUNT_] = {
      NULL,      "hello",  "auth",  "manifest", "bitfield", "have",
      "request", "cancel", "chunk", "reject",   "peers",    "ping",
      "crossing", "reach", "bid", "policy", "punch"};
  for (int t = 1; t < WIRE_TYPE_COUNT_; t++) {
    m->type = (wire_type)t;
    m->data = t == WIRE_BITFIELD ? bits : blob;
    m->data_len = t == WIRE_BITFIELD ? 3
                  : t == WIRE_CHUNK  ? 600
                  : t == WIRE_AUTH   ? STITCH_TICKET_BYTES
                                     : 90;
    m->nbits = 18;
    s.len = 0;
    wire_or_die(&s, m);
    emit_wire(names[t], 0, NULL, 0, s.p, s.len);
  }
  /* What a connection starts with, whole and in uneven pieces. */
  static const wire_type conv[5] = {WIRE_HELLO, WIRE_AUTH, WIRE_BITFIELD,
                                    WIRE_REQUEST, WIRE_CHUNK};
  s.len = 0;
  for (int i = 0; i < 5; i++) {
    m->type = conv[i];
    m->data = conv[i] == WIRE_BITFIELD ? bits : blob;
    m->data_len = conv[i] == WIRE_BITFIELD ? 3
                  : conv[i] == WIRE_AUTH   ? STITCH_TICKET_BYTES
                                           : 200;
    wire_or_die(&s, m);
  }
  static const uint8_t split[3] = {0, 6, 200};
  emit_wire("stream", 0, NULL, 0, s.p, s.len);
  emit_wire("stream-split", 0, split, 3, s.p, s.len);
  emit_wire("stream-truncated", 0, split, 1, s.p, s.len - 7);
  /* A CHUNK's head in one piece, its bytes in the next, with the
   * reader's split: handed out apart (fuzz_wire one_tail). */
  m->type = WIRE_CHUNK;
  m->data = blob;
  m->data_len = 200;
  s.len = 0;
  wire_or_die(&s, m);
  const uint8_t cut[2] = {(uint8_t)(s.len - 200 - 1), 199};
  emit_wire("chunk-tail", FUZZ_WIRE_TAIL, cut, 2, s.p, s.len);

  /* Headers the reader refuses, each followed by a byte of body. */
  static const uint8_t heads[3][6] = {
      {2, 0, 0, 0, WIRE_TYPE_COUNT_, 0x90}, /* unknown type */
      {0, 0, 0, 0, WIRE_PING, 0x90},  /* length 0 */
      {1, 0, 1, 0, WIRE_HAVE, 0x93}}; /* 65537 bytes: over HAVE's limit */
  static const char *const head_names[3] = {"bad-type", "bad-zero-length",
                                            "bad-over-limit"};
  for (int i = 0; i < 3; i++)
    emit_wire(head_names[i], 0, NULL, 0, heads[i], 6);
  /* Bodies the decoder refuses. */
  msgpack_sbuffer sb;
  msgpack_packer pk;
  struct {
    const char *name;
    int type;
  } bad[] = {
      {"bad-swarm-bin31", WIRE_AUTH}, {"bad-bitfield-spare", WIRE_BITFIELD},
      {"bad-peers-65", WIRE_PEERS},   {"bad-trailing", WIRE_REQUEST},
      {"bad-huge-array", WIRE_PEERS}, {"bad-nul-listen", WIRE_AUTH},
      {"bad-newline-listen", WIRE_AUTH}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    switch (i) {
    case 0:
    case 5:
    case 6: {
      const char *listen = i == 5 ? "a\0:1" : i == 6 ? "a:1\n" : "a:1";
      msgpack_pack_array(&pk, 6);
      msgpack_pack_bin_with_body(&pk, blob, i == 0 ? 31 : 32);
      msgpack_pack_bin_with_body(&pk, blob, 32);
      msgpack_pack_bin_with_body(&pk, blob, 64);
      msgpack_pack_bin_with_body(&pk, blob, 0);
      msgpack_pack_str_with_body(&pk, listen, 4);
      msgpack_pack_str_with_body(&pk, "", 0);
      break;
    }
    case 1:
      msgpack_pack_array(&pk, 4);
      msgpack_pack_uint8(&pk, 1);
      msgpack_pack_uint8(&pk, 0);
      msgpack_pack_uint8(&pk, 17); /* bits[2] has bit 17 set */
      msgpack_pack_bin_with_body(&pk, bits, 3);
      break;
    case 2:
      msgpack_pack_array(&pk, 1);
      msgpack_pack_array(&pk, 65);
      for (int p = 0; p < 65; p++) {
        msgpack_pack_array(&pk, 2);
        msgpack_pack_str_with_body(&pk, "h:1", 3);
        msgpack_pack_str_with_body(&pk, "", 0);
      }
      break;
    case 3:
      msgpack_pack_array(&pk, 3);
      msgpack_pack_uint8(&pk, 1);
      msgpack_pack_uint8(&pk, 0);
      msgpack_pack_uint8(&pk, 5);
      msgpack_pack_nil(&pk);
      break;
    default: /* 2^32 - 1 peers claimed in a 10-byte body */
      msgpack_pack_array(&pk, 0xffffffffu);
      msgpack_sbuffer_write(&sb, "\0\0\0\0\0", 5);
      break;
    }
    s.len = 0;
    wire_raw(&s, bad[i].type, &sb);
    emit_wire(bad[i].name, 0, NULL, 0, s.p, s.len);
    msgpack_sbuffer_destroy(&sb);
  }
  dbuf_free(&s);
  free(m);
}
/* ---- the sidecar's requests -------------------------------------------- */

/* fuzz_http_request's input: K split bytes, then what a client sends on
 * one connection (fuzz_http_request.c). */
static void emit_http(const char *name, const char *split, const char *req) {
  size_t k = strlen(split), n = strlen(req);
  uint8_t *b = malloc(1 + k + n);
  if (b == NULL)
    exit(1);
  b[0] = (uint8_t)k;
  memcpy(b + 1, split, k);
  memcpy(b + 1 + k, req, n);
  write_file("fuzz_http_request", name, b, 1 + k + n);
  free(b);
}

static void gen_http(void) {
  static const struct {
    const char *name, *split, *req;
  } seeds[] = {
      {"get", "", "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"post-sized", "\x03\x10",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
       "Content-Type: application/json\r\nContent-Length: 16\r\n\r\n"
       "{\"prompt\": \"hi\"}"},
      {"post-chunked-trailer", "\x07",
       "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
       "Trailer: X-T\r\n\r\n4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n"
       "X-T: 1\r\nX-Stitch-Min-Version: 9\r\n\r\n"},
      {"expect-continue", "\x20",
       "PUT /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n"
       "\r\nabc"},
      {"stitch-headers", "",
       "POST /v1/completions HTTP/1.1\r\nX-Stitch-Min-Version: 3\r\n"
       "x-stitch-wait-ms: 100\r\nX-STITCH-TRACE: t\r\nX-Stitch-Version: 1\r\n"
       "Content-Length: 0\r\n\r\n"},
      {"connection-named", "\x05\x01",
       "GET /echo HTTP/1.1\r\nConnection: keep-alive, X-Hop-A\r\n"
       "Connection: ,x-hop-b,,\r\nX-Hop-A: 1\r\nX-HOP-B: 2\r\nX-Keep: y\r\n"
       "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n"
       "Trailer: X-T\r\nUpgrade: h2c\r\n\r\n"},
      {"pipelined", "\x0b",
       "GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\nHost: h\r\n\r\n"
       "DELETE /c?d=e#f HTTP/1.1\r\nContent-Length: 2\r\n\r\nzz"
       "GET /d HTTP/1.0\r\n\r\n"},
      {"folded", "",
       "GET / HTTP/1.1\r\nX-Fold: a\r\n  b\r\n\tc\r\nX-Empty:\r\n"
       "X-Blanks:   v   \r\n\r\n"},
      {"upgrade", "",
       "GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"},
      {"http10-keepalive", "\x01",
       "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
       "GET /2 HTTP/1.0\r\n\r\n"},
      {"bad-length", "", "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"},
      {"big-length", "",
       "POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n"},
      {"expect-other", "", "POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n"},
      {"garbage", "", "\x00\x01\x02\xff\xfe\r\n\r\n"},
  };
  for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
    emit_http(seeds[i].name, seeds[i].split, seeds[i].req);
  /* A Connection header listing 40 names (over the cap of 32). */
  char many[1024] = "GET / HTTP/1.1\r\nConnection: close";
  for (int i = 0; i < 40; i++)
    snprintf(many + strlen(many), sizeof(many) - strlen(many), ", x-%d", i);
  strcat(many, "\r\nX-1: a\r\n\r\n");
  emit_http("connection-many", "", many);
}

/* ---- fuzz_peer: programs for the scripted dialer (fuzz_peer.h) --------- */

typedef struct prog {
  uint8_t b[1024];
  size_t n;
} prog;

static void put(prog *p, int n, ...) {
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    int v = va_arg(ap, int);
    if (p->n < sizeof(p->b))
      p->b[p->n++] = (uint8_t)v;
  }
  va_end(ap);
}

static void put_bytes(prog *p, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n && p->n < sizeof(p->b); i++)
    p->b[p->n++] = b[i];
}

static void emit_peer(const char *name, const prog *p) {
  write_file("fuzz_peer", name, p->b, p->n);
}

/* Fetch version V (1 or 2): its manifest, a full bitfield, then answer
 * the victim's requests one at a time. */
static void fetch_prog(prog *p, int v) {
  put(p, 2, FP_OP_MANIFEST, v - 1);
  put(p, 3, FP_OP_BITFIELD, v - 1, 0xff);
  put(p, 3, FP_OP_FLUSH, 255, 255);
  for (int i = 0; i < 8; i++) {
    put(p, 4, FP_OP_CHUNK, 0x80, 0, 0);
    put(p, 3, FP_OP_FLUSH, 255, 255);
    put(p, 2, FP_OP_TICK, 3);
  }
}

static void gen_peer(void) {
  prog p;
  static const struct {
    const char *name;
    uint8_t mode, sizes, variant;
  } hs[] = {
      {"hs-good", FP_HS_GOOD, 0xff, 0},
      {"hs-good-bytewise", FP_HS_GOOD, 0x00, 0},
      {"hs-good-records", FP_HS_GOOD, 0x85, 0},
      {"hs-no-ticket", FP_HS_NO_TICKET, 0xff, 0},
      {"hs-no-ticket-open", FP_HS_NO_TICKET | FP_F_OPEN, 0xff, 0},
      {"hs-expired", FP_HS_BAD_TICKET, 0xff, 0},
      {"hs-other-node", FP_HS_BAD_TICKET, 0xff, 1},
      {"hs-other-signer", FP_HS_BAD_TICKET, 0xff, 2},
      {"hs-seed-ticket", FP_HS_BAD_TICKET, 0xff, 3},
      {"hs-short-ticket", FP_HS_BAD_TICKET, 0xff, 4},
      {"hs-flipped-ticket", FP_HS_BAD_TICKET, 0xff, 5},
      {"hs-other-swarm", FP_HS_BAD_AUTH, 0xff, 0},
      {"hs-bad-sig", FP_HS_BAD_AUTH, 0xff, 1},
      {"hs-victims-key", FP_HS_BAD_AUTH, 0xff, 2},
      {"hs-trainer", FP_HS_BAD_AUTH, 0xff, 3},
      {"hs-auth-twice", FP_HS_BAD_AUTH, 0xff, 4},
      {"hs-hello-again", FP_HS_BAD_AUTH, 0xff, 5},
      {"hs-zero-kx", FP_HS_ZERO_KX, 0xff, 0},
      {"hs-cipher-none", FP_HS_GOOD | FP_F_CIPHER_NONE, 0x41, 0},
      {"hs-seed-victim", FP_HS_GOOD | FP_F_SEED, 0xff, 0},
  };
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
    p.n = 0;
    put(&p, 4, hs[i].mode, 0, hs[i].sizes, hs[i].variant);
    emit_peer(hs[i].name, &p);
  }

  /* Raw bytes before any HELLO: a HELLO in clear, then a record that
   * does not open. */
  dbuf w = {NULL, 0, 0, 1 << 20};
  wire_msg *m = calloc(1, sizeof(*m));
  if (m == NULL)
    exit(1);
  m->type = WIRE_HELLO;
  m->proto = WIRE_PROTO;
  memset(m->kx, 9, sizeof(m->kx));
  wire_or_die(&w, m);
  p.n = 0;
  put(&p, 4, FP_HS_RAW, 0, 0x43, 0);
  put_bytes(&p, w.p, w.len);
  put(&p, 8, 40, 0, 1, 2, 3, 4, 5, 6);
  emit_peer("raw-hello-then-junk", &p);
  p.n = 0;
  put(&p, 4, FP_HS_RAW, 0, 0xff, 0);
  put(&p, 9, 1, 0, 0, 0, 2, 0x91, 0x02, 0xc0, 0xc0);
  emit_peer("raw-not-hello", &p);
  /* Our HELLO, then an AUTH-sized frame in clear. */
  p.n = 0;
  put(&p, 4, FP_HS_RAW_HELLO, 0, 0xc0, 0);
  put(&p, 8, 20, 0, 0, 0, 2, 0x96, 0xc4, 0x20);
  emit_peer("raw-after-hello", &p);

  /* A node fetches version 1, then version 2, over records and over a
   * simulator's clear link. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD, 0, 0xff, 0);
  fetch_prog(&p, 1);
  fetch_prog(&p, 2);
  emit_peer("fetch-v1-v2", &p);
  p.n = 0;
  put(&p, 4, FP_HS_GOOD | FP_F_CIPHER_NONE | FP_F_FAR, 0, 0xff, 0);
  fetch_prog(&p, 1);
  emit_peer("fetch-v1-clear-far", &p);
  /* Version 2 announced before its manifest (a BITFIELD and a HAVE,
   * docs/swarm.md "Gossip"), then the manifest and its chunks; with a
   * BITFIELD of one chunk too many, which the manifest then refuses. */
  for (int bad = 0; bad <= 1; bad++) {
    p.n = 0;
    put(&p, 4, FP_HS_GOOD, 0, 0xff, 0);
    fetch_prog(&p, 1);
    put(&p, 3, FP_OP_BITFIELD, 1, bad ? 0x81 : 0x01);
    put(&p, 3, FP_OP_HAVE, 1, 1);
    put(&p, 3, FP_OP_FLUSH, 255, 255);
    put(&p, 2, FP_OP_TICK, 3);
    fetch_prog(&p, 2);
    emit_peer(bad ? "announce-early-bad" : "announce-early", &p);
  }
  /* Holds half of version 1 already; we send a bad chunk. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD | FP_F_HAS_V1, 0x0f, 0xff, 0);
  put(&p, 3, FP_OP_BITFIELD, 0, 0xff);
  put(&p, 3, FP_OP_HAVE, 0, 1);
  put(&p, 3, FP_OP_FLUSH, 3, 9);
  put(&p, 4, FP_OP_CHUNK, 0x80, 0, 1);
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  emit_peer("bad-chunk", &p);

  /* The seed serves us: requests, a cancel, a reject, time. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD | FP_F_SEED, 0, 0xff, 0);
  for (int c = 0; c < 4; c++)
    put(&p, 3, FP_OP_REQUEST, 0, c);
  put(&p, 3, FP_OP_REQUEST, 1, 0);
  put(&p, 4, FP_OP_SMALL, 0, 0, 3);
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 2, FP_OP_TICK, 10);
  put(&p, 3, FP_OP_BITFIELD, 0, 0x55);
  put(&p, 3, FP_OP_HAVE, 1, 0);
  put(&p, 4, FP_OP_SMALL, 1, 1, 0);
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 2, FP_OP_TICK, 60);
  emit_peer("seed-serves", &p);

  /* Both behind NATs: the victim relays our asks (it has nobody to offer),
   * takes an ask relayed to it (and dials), sees answers to asks it never
   * made, and asks us to relay once it wants links. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD2, 0, 0xff, 0x80);
  put(&p, 3, FP_OP_PUNCH, 0, 0);           /* ASK, anyone */
  put(&p, 3, FP_OP_PUNCH, 0, 2);           /* ASK, another key */
  put(&p, 3, FP_OP_PUNCH, 3, 2 + 4);       /* ASKED: another, at 10.0.0.9:7 */
  put(&p, 3, FP_OP_PUNCH, 4, 2 + 4);       /* ACCEPTED, not asked */
  put(&p, 3, FP_OP_PUNCH, 1, 1);           /* ACCEPT of nothing relayed */
  put(&p, 3, FP_OP_PUNCH, 3, 3 + 8);       /* ASKED naming the victim */
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 2, FP_OP_TICK, 30);
  put(&p, 3, FP_OP_PUNCH, 5, 0);           /* DECLINED, nobody */
  put(&p, 3, FP_OP_PUNCH, 4, 2 + 4);       /* ACCEPTED */
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 2, FP_OP_TICK, 60);
  emit_peer("punch", &p);

  /* Everything else a link carries, a manifest with a byte flipped (the
   * peer is dropped), then time and frames for the dropped peer. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD, 0xff, 0xff, 0);
  put(&p, 2, FP_OP_PEERS, 4);
  put(&p, 4, 0x11, 0x22, 0x33, 0x44);
  for (int k = 0; k < 12; k++)
    put(&p, 4, FP_OP_SMALL, k, k * 5, k);
  put(&p, 2, FP_OP_POLICY, 0);
  put(&p, 2, FP_OP_POLICY, 1);
  put(&p, 4, FP_OP_FRAME, WIRE_PING, 1, 0);
  put(&p, 1, 0x90);
  put(&p, 2, FP_OP_MANIFEST, 0);
  put(&p, 3, FP_OP_FLUSH, 0, 2);
  put(&p, 2, FP_OP_MANIFEST, 6); /* one byte flipped */
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 2, FP_OP_TICK, 100);
  put(&p, 2, FP_OP_TICK, 255);
  put(&p, 2, FP_OP_TICK, 255);
  put(&p, 2, FP_OP_TICK, 255);
  put(&p, 3, FP_OP_REQUEST, 0, 0);
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  put(&p, 3, FP_OP_RAW, 3, 1);
  put(&p, 2, 2, 3);
  emit_peer("misc-then-dropped", &p);
  /* A newer policy revokes us; one signed by another key. */
  p.n = 0;
  put(&p, 4, FP_HS_GOOD | FP_F_OPEN, 0, 0xff, 0);
  put(&p, 4, FP_OP_POLICY, 3, FP_OP_POLICY, 2);
  put(&p, 3, FP_OP_FLUSH, 255, 255);
  emit_peer("policy-revokes", &p);
  free(m);
  dbuf_free(&w);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_gen_corpus DIR\n");
    return 2;
  }
  outdir = argv[1];
  if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gen_corpus: mkdir %s: %s\n", outdir, strerror(errno));
    return 1;
  }
  uint8_t *keep;
  size_t keep_len;
  gen_deltas(&keep, &keep_len);
  gen_delta_mutants(keep, keep_len);
  free(keep);
  gen_safetensors();
  gen_roundtrip();
  gen_manifest();
  gen_chunk();
  gen_wire();
  gen_http();
  gen_peer();
  if (failures) {
    fprintf(stderr, "gen_corpus: %d seed(s) off their coding\n", failures);
    return 1;
  }
  return 0;
}
