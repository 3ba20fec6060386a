/* block_util.h: symbol formats and test blocks shared by the block
 * coding tests (test_gaps.c, test_rans.c). Include after declaring
 * `static test_rng rng;`. */
#ifndef STITCH_TESTS_BLOCK_UTIL_H
#define STITCH_TESTS_BLOCK_UTIL_H

#include "test.h"

#include "codec/delta_internal.h"

typedef struct fmt_case {
  const char *name;
  stitch_dtype dt;
  int nibble;
} fmt_case;

static const fmt_case FORMATS[] = {
    {"E2M1 nibbles", STITCH_DT_U8, 1}, {"F8_E4M3", STITCH_DT_F8_E4M3, 0},
    {"F8_E5M2", STITCH_DT_F8_E5M2, 0}, {"I8", STITCH_DT_I8, 0},
    {"U8", STITCH_DT_U8, 0},           {"BF16", STITCH_DT_BF16, 0},
    {"F16", STITCH_DT_F16, 0},         {"I16", STITCH_DT_I16, 0},
    {"U16", STITCH_DT_U16, 0},         {"F32", STITCH_DT_F32, 0},
    {"I32", STITCH_DT_I32, 0},         {"U32", STITCH_DT_U32, 0},
    {"F64", STITCH_DT_F64, 0},         {"I64", STITCH_DT_I64, 0},
    {"U64", STITCH_DT_U64, 0},
};

static inline uint64_t ld_sym(const uint8_t *p, uint64_t j, unsigned bits) {
  if (bits == 4)
    return (p[j >> 1] >> ((j & 1) * 4)) & 15;
  uint64_t v = 0;
  memcpy(&v, p + j * (bits / 8), bits / 8);
  return v;
}

static inline void st_sym(uint8_t *p, uint64_t j, unsigned bits, uint64_t v) {
  if (bits == 4) {
    unsigned sh = (unsigned)(j & 1) * 4;
    p[j >> 1] = (uint8_t)((p[j >> 1] & ~(15u << sh)) | (unsigned)(v << sh));
    return;
  }
  memcpy(p + j * (bits / 8), &v, bits / 8);
}

/* A weight-like base (floats: exponents spread over a few octaves below a
 * maximum, as trained weights are) and a result with a fraction P of its
 * symbols moved, mostly by one step of the bit pattern. */
static inline void make_block(const sym_fmt *f, uint64_t n, double p, uint8_t *base,
                       uint8_t *nw) {
  unsigned bits = f->bits;
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  for (uint64_t j = 0; j < n; j++) {
    uint64_t v = test_rng_next(&rng) & mask;
    if (f->is_float) {
      unsigned emax = (1u << f->exp_bits) - 1, top = emax > 4 ? emax / 2 + 2 : emax;
      unsigned drop = (unsigned)(test_rng_next(&rng) % 9);
      uint64_t e = top > drop ? top - drop : 0;
      uint64_t sign = test_rng_next(&rng) & 1;
      v = (sign << (bits - 1)) | (e << f->mant_bits) |
          (test_rng_next(&rng) & ((1ull << f->mant_bits) - 1));
    }
    st_sym(base, j, bits, v);
  }
  memcpy(nw, base, bits == 4 ? n / 2 : n * (bits / 8));
  for (uint64_t j = 0; j < n; j++) {
    if (test_rng_unit(&rng) >= p)
      continue;
    uint64_t v = ld_sym(base, j, bits), d;
    d = test_rng_unit(&rng) < 0.9 ? 1 : 1 + test_rng_next(&rng) % 300;
    if (test_rng_next(&rng) & 1)
      d = 0 - d;
    uint64_t nv = (v + d) & mask;
    if (nv == v)
      nv = (v + 1) & mask;
    st_sym(nw, j, bits, nv);
  }
}

/* Damage try IT of payload P (LEN bytes) into Q, past its first FROM
 * bytes: every fourth try a cut at a random length, the others one bit
 * flipped. Returns the length to decode. */
static inline size_t damage_payload(const uint8_t *p, size_t len, size_t from,
                                    int it, uint8_t *q) {
  memcpy(q, p, len);
  if (it % 4 == 0)
    return from + test_rng_next(&rng) % (len - from);
  q[from + test_rng_next(&rng) % (len - from)] ^=
      (uint8_t)(1u << (test_rng_next(&rng) % 8));
  return len;
}

static inline uint64_t count_diff(const sym_fmt *f, const uint8_t *a,
                           const uint8_t *b, uint64_t n) {
  uint64_t k = 0;
  for (uint64_t j = 0; j < n; j++)
    k += ld_sym(a, j, f->bits) != ld_sym(b, j, f->bits);
  return k;
}

/* A coding's round trip: codes BASE -> NW (N symbols of F), checks the
 * decoding, and returns the payload (caller frees). */
typedef uint8_t *(*round_trip_fn)(const fmt_case *fc, const sym_fmt *f,
                                  uint64_t n, const uint8_t *base,
                                  const uint8_t *nw, size_t *plen,
                                  uint64_t *pch);

typedef struct block_size {
  uint64_t n; /* symbols (even: a nibble block starts on a byte) */
  double p;   /* the fraction changed */
} block_size;

/* RT on a block of every size in SIZES, in every format; a block that
 * came out unchanged gets one change (a coding sees only changed ones). */
static inline void each_format(round_trip_fn rt, const block_size *sizes,
                               size_t nsizes) {
  for (size_t i = 0; i < sizeof(FORMATS) / sizeof(FORMATS[0]); i++) {
    sym_fmt f;
    ASSERT_EQ(sym_fmt_for(FORMATS[i].dt, FORMATS[i].nibble, &f), 0);
    for (size_t s = 0; s < nsizes; s++) {
      uint64_t n = sizes[s].n;
      size_t nb = f.bits == 4 ? n / 2 : n * (f.bits / 8);
      uint8_t *a = malloc(nb), *b = malloc(nb);
      make_block(&f, n, sizes[s].p, a, b);
      if (count_diff(&f, a, b, n) == 0)
        st_sym(b, n / 2, f.bits, ld_sym(a, n / 2, f.bits) ^ 1);
      size_t len;
      uint64_t ch;
      free(rt(&FORMATS[i], &f, n, a, b, &len, &ch));
      free(a);
      free(b);
    }
  }
}

#endif
