/* test_sparsek.c: the SPARSEK block coding (src/codec/sparse.c,
 * proto/delta.md "SPARSEK") on every symbol format: exact round trips with
 * the vector and the scalar loops (same bytes, each decodes the other's),
 * blocks with no, one and every symbol changed and partial last groups,
 * an encoder and decoder that must agree on the change count, and damaged
 * payloads that must fail cleanly. */
#include "test.h"

#include "stitch.h"

#include "codec/cpu.h"
#include "codec/delta_internal.h"

static test_rng rng;

#include "block_util.h"

/* Codes BASE -> NW as SPARSEK with the vector loops and the scalar ones
 * (same bytes), decodes each way, and checks that SPARSE codes the same
 * changes; returns the payload (caller frees). */
static uint8_t *round_trip(const fmt_case *fc, const sym_fmt *f, uint64_t n,
                           const uint8_t *base, const uint8_t *nw,
                           size_t *plen, uint64_t *pch) {
  size_t nb = f->bits == 4 ? (n + 1) / 2 : n * (f->bits / 8);
  size_t cap = 2 * nb + 4096;
  uint8_t *out = malloc(cap), *out2 = malloc(cap), *data = malloc(nb + 64);
  size_t len = 0, len2 = 0, slen = 0;
  uint64_t k = count_diff(f, base, nw, n), sch = 0;
  block_span sp = {0, n};
  static const codec_run runs[2] = {{0, 0}, {1, 0}}; /* vector, scalar */
  int rc = sparsek_encode_run(&runs[0], f, base, nw, sp, k, out, cap, &len);
  if (rc != 0)
    FAIL_("%s, %" PRIu64 " symbols, %" PRIu64 " changes: sparsek_encode "
          "returned %d", fc->name, n, k, rc);
  ASSERT_EQ(sparsek_encode_run(&runs[1], f, base, nw, sp, k, out2, cap, &len2),
            0);
  ASSERT_UEQ(len, len2);
  ASSERT_MEM_EQ(out, out2, len);
  ASSERT_EQ(sparsek_encode(f, base, nw, sp, k, out2, cap, &len2), 0);
  ASSERT_MEM_EQ(out, out2, len); /* deterministic */
  for (int scalar = 0; scalar < 2; scalar++) {
    stitch_diag d = {{0}};
    memcpy(data, base, nb);
    ASSERT_OK(sparsek_decode_run(&runs[scalar], f, data, sp, out, len, k, 1,
                                 &d), d);
    ASSERT_MEM_EQ(data, nw, nb);
  }
  /* SPARSE of the same block, and SPARSET from the same pass: the same
   * count and bytes as sparse_encode, and SPARSET never longer than SPARSE
   * (its bytes are SPARSE's stream, without the ref, finished after the
   * last change); both decode, SPARSET with the vector and scalar loops. */
  ASSERT_EQ(sparse_encode(f, base, nw, sp, out2, cap, &slen, &sch), 0);
  ASSERT_UEQ(sch, k);
  uint8_t *out3 = malloc(cap), *tbuf = malloc(cap);
  size_t slen3 = 0;
  uint64_t sch3 = 0;
  sparse_trunc tr = {tbuf, cap, 0, 0};
  ASSERT_EQ(sparse_encode_trunc(f, base, nw, sp, out3, cap, &slen3, &sch3, &tr),
            0);
  ASSERT_UEQ(slen3, slen);
  ASSERT_UEQ(sch3, k);
  ASSERT_MEM_EQ(out3, out2, slen);
  ASSERT_EQ(tr.ok, k > 0);
  if (k > 0)
    ASSERT(tr.len < slen);
  for (int scalar = 0; scalar < 2 && k > 0; scalar++) {
    stitch_diag d = {{0}};
    memcpy(data, base, nb);
    ASSERT_OK(sparsek_decode_run(&runs[scalar], f, data, sp, tbuf, tr.len, k,
                                 0, &d), d);
    ASSERT_MEM_EQ(data, nw, nb);
    /* Read as SPARSEK (the warm start) it fails or decodes other bytes. */
    memcpy(data, base, nb);
    if (sparsek_decode(f, data, sp, tbuf, tr.len, k, 1, &d) == 0 &&
        memcmp(data, nw, nb) == 0 && k > 2)
      FAIL_("%s: a SPARSET payload decoded right as SPARSEK", fc->name);
  }
  free(out3);
  free(tbuf);
  free(out2);
  free(data);
  *plen = len;
  *pch = k;
  return out;
}

static void test_formats(void) {
  static const block_size sizes[] = {{70000, 0.05},  {200002, 0.0002},
                                     {65536, 0.0003}, {8192, 0.4},
                                     {4098, 1.0},     {1026, 0.01},
                                     {16, 1.0},       {32, 0.0}};
  each_format(round_trip, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

/* The edges: no change (nothing coded, nothing decoded), one change at
 * the first and at the last symbol (a partial last group), every symbol
 * changed, and block lengths that end inside a group. */
static void test_edges(void) {
  for (size_t i = 0; i < sizeof(FORMATS) / sizeof(FORMATS[0]); i++) {
    sym_fmt f;
    ASSERT_EQ(sym_fmt_for(FORMATS[i].dt, FORMATS[i].nibble, &f), 0);
    static const uint64_t lens[] = {2, 16, 18, 30, 1000, 4096, 65538};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
      uint64_t n = lens[l];
      size_t nb = f.bits == 4 ? n / 2 : n * (f.bits / 8);
      uint8_t *a = malloc(nb), *b = malloc(nb), *data = malloc(nb);
      uint8_t out[64];
      size_t len;
      uint64_t ch;
      make_block(&f, n, 0.0, a, b);
      /* No change: SPARSEK codes nothing and decodes nothing. */
      ASSERT_EQ(sparsek_encode(&f, a, b, (block_span){0, n}, 0, out,
                               sizeof(out), &len), 0);
      ASSERT_UEQ(len, 0);
      stitch_diag d = {{0}};
      memcpy(data, a, nb);
      ASSERT_OK(sparsek_decode(&f, data, (block_span){0, n}, out, 0, 0, 1, &d), d);
      ASSERT_MEM_EQ(data, a, nb);
      ASSERT_ERR(sparsek_decode(&f, data, (block_span){0, n}, out, 1, 0, 1, &d),
                 STITCH_EFORMAT, d, "no changes and 1 bytes");
      /* One change, first symbol; then last symbol. */
      st_sym(b, 0, f.bits, ld_sym(a, 0, f.bits) ^ 1);
      free(round_trip(&FORMATS[i], &f, n, a, b, &len, &ch));
      ASSERT_UEQ(ch, 1);
      memcpy(b, a, nb);
      st_sym(b, n - 1, f.bits, ld_sym(a, n - 1, f.bits) ^ 1);
      free(round_trip(&FORMATS[i], &f, n, a, b, &len, &ch));
      ASSERT_UEQ(ch, 1);
      /* Every symbol. */
      for (uint64_t j = 0; j < n; j++)
        st_sym(b, j, f.bits, ld_sym(a, j, f.bits) ^ 1);
      free(round_trip(&FORMATS[i], &f, n, a, b, &len, &ch));
      ASSERT_UEQ(ch, n);
      free(a);
      free(b);
      free(data);
    }
  }
}

/* Encoder and decoder must agree on the count: the encoder refuses a K
 * that is not the block's, and a decoder told another K than the one
 * coded, or reading the payload as SPARSE, fails or decodes other bytes,
 * never the result. */
static void test_count_agreement(void) {
  sym_fmt f;
  sym_fmt_for(STITCH_DT_U8, 1, &f); /* NVFP4 nibbles */
  uint64_t n = 1u << 16;
  size_t nb = n / 2;
  uint8_t *a = malloc(nb), *b = malloc(nb), *data = malloc(nb);
  make_block(&f, n, 0.0005, a, b);
  size_t len;
  uint64_t ch;
  uint8_t *p = round_trip(&FORMATS[0], &f, n, a, b, &len, &ch);
  ASSERT(ch > 5);
  uint8_t out[4096];
  size_t ol;
  ASSERT_EQ(sparsek_encode(&f, a, b, (block_span){0, n}, ch + 1, out,
                           sizeof(out), &ol), STITCH_EINVAL);
  ASSERT_EQ(sparsek_encode(&f, a, b, (block_span){0, n}, ch - 1, out,
                           sizeof(out), &ol), STITCH_EINVAL);
  stitch_diag d = {{0}};
  for (int dk = -3; dk <= 3; dk++) {
    if (dk == 0)
      continue;
    memcpy(data, a, nb);
    int rc = sparsek_decode(&f, data, (block_span){0, n}, p, len,
                            (uint64_t)((int64_t)ch + dk), 1, &d);
    ASSERT(rc == STITCH_EFORMAT || memcmp(data, b, nb) != 0);
  }
  memcpy(data, a, nb);
  uint64_t sch = 0;
  int rc = sparse_decode(&f, data, (block_span){0, n}, p, len, &sch, &d);
  ASSERT(rc != 0 || sch != ch || memcmp(data, b, nb) != 0);
  /* A count past the block's symbols is refused before decoding. */
  ASSERT_ERR(sparsek_decode(&f, data, (block_span){0, 64}, p, len, 65, 1, &d),
             STITCH_EFORMAT, d, "65 changes in 64 symbols");
  free(p);
  free(a);
  free(b);
  free(data);
}

/* Damaged payloads: a clean error or some decoding, never a read or write
 * out of bounds (run under ASan). */
static void test_damage(void) {
  for (int fi = 0; fi < 2; fi++) {
    sym_fmt f;
    const fmt_case *fc = fi ? &FORMATS[5] : &FORMATS[0]; /* BF16, nibbles */
    sym_fmt_for(fc->dt, fc->nibble, &f);
    uint64_t n = 1u << 15;
    size_t nb = f.bits == 4 ? n / 2 : n * 2;
    uint8_t *a = malloc(nb), *b = malloc(nb), *data = malloc(nb);
    make_block(&f, n, 0.01, a, b);
    size_t len;
    uint64_t ch;
    uint8_t *p = round_trip(fc, &f, n, a, b, &len, &ch);
    uint8_t *q = malloc(len);
    stitch_diag d = {{0}};
    for (int it = 0; it < 400; it++) {
      size_t cut = damage_payload(p, len, 0, it, q);
      memcpy(data, a, nb);
      const codec_run run = {it & 1, 0};
      int rc = sparsek_decode_run(&run, &f, data, (block_span){0, n}, q, cut,
                                  ch, it & 2 ? 1 : 0, &d);
      ASSERT(rc == 0 || rc == STITCH_EFORMAT);
    }
    free(q);
    free(p);
    free(a);
    free(b);
    free(data);
  }
}

/* What it is for: at RL densities (0.01-0.05 %) a small NVFP4 block codes
 * smaller than SPARSE (here by at least 5 %). */
static void test_smaller_when_sparse(void) {
  sym_fmt f;
  sym_fmt_for(STITCH_DT_U8, 1, &f);
  uint64_t n = 98304, tot_k = 0, tot_s = 0; /* an MLP projection's nibbles */
  size_t nb = n / 2, cap = nb;
  uint8_t *a = malloc(nb), *b = malloc(nb), *o = malloc(cap);
  for (int it = 0; it < 20; it++) {
    make_block(&f, n, 0.0002, a, b);
    if (count_diff(&f, a, b, n) == 0)
      st_sym(b, 7, f.bits, ld_sym(a, 7, f.bits) ^ 1);
    size_t lk, ls;
    uint64_t ch;
    free(round_trip(&FORMATS[0], &f, n, a, b, &lk, &ch));
    ASSERT_EQ(sparse_encode(&f, a, b, (block_span){0, n}, o, cap, &ls, &ch), 0);
    tot_k += lk;
    tot_s += ls;
  }
  printf("sparse %" PRIu64 " B, sparsek %" PRIu64 " B over 20 blocks\n", tot_s,
         tot_k);
  ASSERT(tot_k * 20 <= tot_s * 19);
  free(a);
  free(b);
  free(o);
}

int main(void) {
  rng = test_rng_seeded("test_sparsek", 20261204);
  test_formats();
  test_edges();
  test_count_agreement();
  test_damage();
  test_smaller_when_sparse();
  puts("test_sparsek: ok");
  return 0;
}
