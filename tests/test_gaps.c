/* test_gaps.c: the GAPS block coding (src/codec/gaps.c) on every symbol
 * format: exact round trips, the vector loops against the scalar ones
 * (same bytes out, each decodes the other's), the blocks it declines, and
 * damaged payloads that must fail cleanly. */
#include "test.h"

#include "stitch.h"

#include "codec/cpu.h"
#include "codec/delta_internal.h"

#include <math.h>

static test_rng rng;

#include "block_util.h"

/* Encodes with the vector loops and with the scalar ones (same bytes),
 * decodes each way, and returns the payload (caller frees). */
/* Codes NW against BASE with the vector loops and with the scalar ones
 * (each with COUNT_ALL, codec_run), checks that both give the same bytes
 * and that either decoder restores NW; returns the payload. */
static uint8_t *round_trip(const fmt_case *fc, const sym_fmt *f, uint64_t n,
                           const uint8_t *base, const uint8_t *nw,
                           int count_all, size_t *plen, uint64_t *pch) {
  size_t nb = f->bits == 4 ? n / 2 : n * (f->bits / 8);
  size_t cap = nb + 4096;
  uint8_t *out = malloc(cap), *out2 = malloc(cap), *data = malloc(nb + 64);
  size_t len = 0, len2 = 0;
  uint64_t ch = 0, ch2 = 0;
  block_span sp = {0, n};
  const codec_run vec = {0, count_all}, scalar = {1, count_all};
  int rc = gaps_encode_run(&vec, f, base, nw, sp, out, cap, &len, &ch);
  if (rc != 0)
    FAIL_("%s, %" PRIu64 " symbols: gaps_encode returned %d", fc->name, n, rc);
  ASSERT_EQ(gaps_encode_run(&scalar, f, base, nw, sp, out2, cap, &len2, &ch2),
            0);
  ASSERT_UEQ(len, len2);
  ASSERT_UEQ(ch, ch2);
  ASSERT_MEM_EQ(out, out2, len);
  ASSERT_UEQ(ch, count_diff(f, base, nw, n));
  for (int k = 0; k < 2; k++) {
    stitch_diag d = {{0}};
    memcpy(data, base, nb);
    ASSERT_OK(gaps_decode_run(k ? &scalar : &vec, f, data, sp, out, len, ch,
                              &d), d);
    ASSERT_MEM_EQ(data, nw, nb);
  }
  free(out2);
  free(data);
  *plen = len;
  *pch = ch;
  return out;
}

static uint8_t *round_trip_sampled(const fmt_case *fc, const sym_fmt *f,
                                   uint64_t n, const uint8_t *base,
                                   const uint8_t *nw, size_t *plen,
                                   uint64_t *pch) {
  return round_trip(fc, f, n, base, nw, 0, plen, pch);
}

static void test_formats(void) {
  static const block_size sizes[] = {{70000, 0.05}, {200002, 0.01},
                                     {1u << 19, 0.0035}, {8192, 0.4},
                                     {4098, 1.0}, {65538, 0.02}};
  each_format(round_trip_sampled, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

/* Too few changes: GAPS declines and codes nothing. */
static void test_declines(void) {
  sym_fmt f;
  sym_fmt_for(STITCH_DT_BF16, 0, &f);
  uint64_t n = 1u << 17;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), out[4096];
  make_block(&f, n, 0.001, a, b); /* some 130 changes */
  size_t len = 0;
  uint64_t ch = 0;
  ASSERT_EQ(gaps_encode(&f, a, b, (block_span){0, n}, out, sizeof(out), &len, &ch),
            GAPS_DECLINED);
  free(a);
  free(b);
}

/* Damaged payloads and wrong counts: a clean error or some decoding, never
 * a read or write out of bounds (run under ASan), and the damage that
 * must be caught is. */
static void test_damage(void) {
  sym_fmt f;
  sym_fmt_for(STITCH_DT_BF16, 0, &f);
  uint64_t n = 1u << 16;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *data = malloc(2 * n);
  make_block(&f, n, 0.03, a, b);
  size_t len;
  uint64_t ch;
  uint8_t *p = round_trip(&FORMATS[5], &f, n, a, b, 0, &len, &ch);
  block_span sp = {0, n};
  stitch_diag d = {{0}};
  /* More changes than were coded: the decoder runs off the block or off
   * its data. */
  memcpy(data, a, 2 * n);
  ASSERT(gaps_decode(&f, data, sp, p, len, ch + 50, &d) != 0);
  ASSERT(strstr(d.msg, "gaps block") != NULL);
  /* A weight code past the last. */
  uint8_t *q = malloc(len);
  memcpy(q, p, len);
  size_t hl = (q[0] & 0x80) ? 2 : 1;
  q[hl + 3] = 0xc0;
  ASSERT_ERR(gaps_decode(&f, data, sp, q, len, ch, &d), STITCH_EFORMAT, d,
             "weight code 3 is 0xc0, past 0xbf");
  ASSERT_ERR(gaps_decode(&f, data, sp, p, hl + 10, ch, &d), STITCH_EFORMAT, d,
             "payload too short");
  /* Random damage past the parameters, both loops. */
  for (int it = 0; it < 400; it++) {
    size_t cut = damage_payload(p, len, hl + GAPS_PARAM_BYTES, it, q);
    memcpy(data, a, 2 * n);
    const codec_run run = {it & 1, 0};
    int rc = gaps_decode_run(&run, &f, data, sp, q, cut, ch, &d);
    ASSERT(rc == 0 || rc == STITCH_EFORMAT);
  }
  free(q);
  free(p);
  free(a);
  free(b);
  free(data);
}

/* Weight codes: every weight from 1 to 3968 gets a code within 1/32 of
 * it (exact below 32), each code names what it says, and the codes are in
 * order of weight. */
static void test_weight_codes(void) {
  ASSERT_EQ(gaps_weight_of_code(0x00), 1u);
  ASSERT_EQ(gaps_weight_of_code(0x40), 16u);
  ASSERT_EQ(gaps_weight_of_code(0x4f), 31u);
  ASSERT_EQ(gaps_weight_of_code(0xbf), 3968u);
  for (unsigned b = 1; b <= 0xbf; b++)
    ASSERT(gaps_weight_of_code(b) >= gaps_weight_of_code(b - 1));
  for (unsigned w = 1; w <= 3968; w++) {
    uint8_t b = gaps_code_of_weight(w);
    ASSERT(b <= 0xbf);
    double got = gaps_weight_of_code(b);
    if (w < 32)
      ASSERT_EQ((unsigned)got, w);
    else
      ASSERT(fabs(got - w) <= w / 32.0);
  }
  ASSERT_EQ(gaps_weight_of_code(gaps_code_of_weight(0.2)), 1u);
  ASSERT_EQ(gaps_weight_of_code(gaps_code_of_weight(1e9)), 3968u);
}

/* The encoder's first pass counts one stretch of 64 KiB (32,768 BF16
 * symbols) in eight when those hold 2,048 changes: the bytes then differ
 * from those of a count of the whole block, the size hardly. A block
 * whose changes all lie outside those stretches is counted whole, and
 * coded. */
static void test_sampled_count(void) {
  const fmt_case *fc = &FORMATS[5]; /* BF16 */
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(fc->dt, fc->nibble, &f), 0);
  uint64_t n = 1u << 20;
  size_t nb = n * (f.bits / 8), len1, len2;
  uint64_t ch1, ch2;
  uint8_t *a = malloc(nb), *b = malloc(nb);
  make_block(&f, n, 0.05, a, b);
  uint8_t *o1 = round_trip(fc, &f, n, a, b, 0, &len1, &ch1);
  uint8_t *o2 = round_trip(fc, &f, n, a, b, 1, &len2, &ch2);
  ASSERT(len1 != len2 || memcmp(o1, o2, len1) != 0);
  ASSERT(len1 <= len2 + len2 / 200);
  free(o1);
  free(o2);
  for (uint64_t j = 0; j < n; j += 8 * 32768) /* empty the sampled stretches */
    memcpy(b + j * 2, a + j * 2, 32768 * 2);
  free(round_trip(fc, &f, n, a, b, 0, &len1, &ch1));
  ASSERT(ch1 > 40000);
  free(a);
  free(b);
}

int main(void) {
  rng = test_rng_seeded("test_gaps", 20261130);
  test_weight_codes();
  test_formats();
  test_declines();
  test_sampled_count();
  test_damage();
  puts("test_gaps: ok");
  return 0;
}
