/* test_minifloat.c: the BF16, E4M3 and E2M1 element converters
 * (src/codec/minifloat.c) against slow double-precision references.
 *
 * Each narrow format is checked exhaustively where it is small (every code
 * decodes to the value its definition gives and round-trips), at every
 * rounding boundary (each midpoint between neighbouring codes and one FP32
 * ulp either side), and on millions of random floats, some uniform over
 * all bit patterns and most concentrated on the format's range. */
#include "stitch.h"
#include "test.h"

#include <math.h>

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- references ---------------------------------------------------- */

/* A small float format: positive finite codes 0..maxc with the value its
 * definition gives, computed in double from the fields. */
typedef struct fmt {
  const char *name;
  int mbits, bias;
  uint8_t maxc, sign; /* largest finite magnitude code, sign bit */
  double v[128];
} fmt;

static void fmt_init(fmt *f) {
  for (int c = 0; c <= f->maxc; c++) {
    int e = c >> f->mbits, m = c & ((1 << f->mbits) - 1);
    f->v[c] = e == 0 ? ldexp(m, 1 - f->bias - f->mbits)
                     : ldexp(1.0 + ldexp(m, -f->mbits), e - f->bias);
  }
}

/* Nearest code to finite x, ties to the even code, saturating at maxc. */
static uint8_t fmt_ref(const fmt *f, float x) {
  double a = fabs((double)x);
  int best = 0;
  if (a >= f->v[f->maxc]) {
    best = f->maxc;
  } else {
    for (int c = 1; c <= f->maxc; c++) {
      double dc = fabs(a - f->v[c]), db = fabs(a - f->v[best]);
      if (dc < db || (dc == db && (c & 1) == 0))
        best = c;
    }
  }
  return (uint8_t)(best | (signbit(x) ? f->sign : 0));
}

/* BF16 reference: the two neighbours by truncation, compared exactly in
 * double; the one past BF16's largest finite is inf (worth 2^128). */
static uint16_t bf16_ref(float x) {
  uint32_t u = u_of(x), t = u & 0xFFFF0000u;
  if (isinf(x))
    return (uint16_t)(u >> 16);
  double a = fabs((double)x), lo = fabs((double)f_of(t));
  uint32_t tn = (t & 0x7FFFFFFFu) + 0x10000u;
  double hi = tn == 0x7F800000u ? ldexp(1.0, 128) : fabs((double)f_of(tn));
  double dl = a - lo, dh = hi - a;
  int up = dh < dl || (dh == dl && ((t >> 16) & 1));
  return (uint16_t)((up ? (t + 0x10000u) : t) >> 16);
}

/* ---- random inputs ---------------------------------------------------- */

/* Mostly values whose exponent is within the format's range (+-4 binades),
 * some raw bit patterns (huge, tiny, inf, NaN). */
static float rand_float(test_rng *r, int emin, int emax) {
  uint64_t z = test_rng_next(r);
  if ((z & 7) == 0)
    return f_of((uint32_t)(z >> 32));
  int e = emin + (int)((z >> 8) % (uint64_t)(emax - emin + 1));
  uint32_t u = (uint32_t)(z >> 40) & 0x7FFFFFu;
  u |= (uint32_t)(e + 127) << 23;
  if (z & 16)
    u |= 0x80000000u;
  return f_of(u);
}

/* ---- BF16 ------------------------------------------------------------- */

static void test_bf16(test_rng *r) {
  /* Every BF16 value round-trips; NaNs stay NaN. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = stitch_bf16_to_f32((uint16_t)h);
    ASSERT_EQ(u_of(f), h << 16);
    uint16_t back = stitch_f32_to_bf16(f);
    if (isnan(f)) {
      ASSERT(isnan(stitch_bf16_to_f32(back)));
      ASSERT_EQ(back & 0x8000, h & 0x8000);
    } else {
      ASSERT_EQ(back, h);
    }
  }
  /* Ties go to even; anything past the tie goes up. */
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x3F808000u)), 0x3F80); /* even: down */
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x3F818000u)), 0x3F82); /* odd: up */
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x3F808001u)), 0x3F81);
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x3F807FFFu)), 0x3F80);
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0xBF818000u)), 0xBF82);
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX: inf */
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x7F7F7FFFu)), 0x7F7F);
  ASSERT_EQ(stitch_f32_to_bf16(INFINITY), 0x7F80);
  ASSERT_EQ(stitch_f32_to_bf16(-INFINITY), 0xFF80);
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x00008000u)), 0x0000); /* subnormal tie */
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0x00018000u)), 0x0002);
  /* A signalling NaN whose payload is only in the low bits stays NaN. */
  uint16_t sn = stitch_f32_to_bf16(f_of(0x7F800001u));
  ASSERT(isnan(stitch_bf16_to_f32(sn)));
  ASSERT_EQ(sn & 0x0040, 0x0040);
  ASSERT_EQ(stitch_f32_to_bf16(f_of(0xFFC00000u)) & 0x8000, 0x8000);
  /* Every tie pattern against the reference, then random floats. */
  for (uint32_t h = 0; h < 0x10000; h++)
    for (int k = -1; k <= 1; k++) {
      float f = f_of((h << 16) + 0x8000u + (uint32_t)k);
      if (!isnan(f))
        ASSERT_EQ(stitch_f32_to_bf16(f), bf16_ref(f));
    }
  for (int i = 0; i < 4000000; i++) {
    float f = rand_float(r, -130, 127);
    if (isnan(f))
      ASSERT(isnan(stitch_bf16_to_f32(stitch_f32_to_bf16(f))));
    else if (stitch_f32_to_bf16(f) != bf16_ref(f))
      FAIL_("bf16(%a = 0x%08x): 0x%04x, reference 0x%04x", (double)f, u_of(f),
            stitch_f32_to_bf16(f), bf16_ref(f));
  }
}

/* ---- E4M3 and E2M1 ---------------------------------------------------- */

typedef uint8_t (*enc_fn)(float);
typedef float (*dec_fn)(uint8_t);

static void check_one(const fmt *f, enc_fn enc, float x) {
  uint8_t got = enc(x), want = fmt_ref(f, x);
  if (got != want)
    FAIL_("%s(%a = 0x%08x): 0x%02x, reference 0x%02x", f->name, (double)x,
          u_of(x), got, want);
}

/* Codes: decoding, round trip, ordering; boundaries; random floats. */
static void check_format(test_rng *r, fmt *f, enc_fn enc, dec_fn dec,
                         int ncodes, int emin, int emax, int iters) {
  fmt_init(f);
  for (int c = 0; c < ncodes; c++) {
    int mag = c & ~f->sign;
    float v = dec((uint8_t)c);
    if (mag > f->maxc) { /* E4M3's NaN codes */
      ASSERT(isnan(v));
      continue;
    }
    double want = (c & f->sign) ? -f->v[mag] : f->v[mag];
    if ((double)v != want || (signbit(v) != 0) != ((c & f->sign) != 0))
      FAIL_("%s decode(0x%02x) = %a, expected %a", f->name, c, (double)v, want);
    ASSERT_EQ(enc(v), c); /* includes -0 */
    if (mag > 0)
      ASSERT(fabsf(dec((uint8_t)(c - 1))) < fabsf(v));
  }
  /* Every midpoint between neighbours (a tie) and one ulp either side,
   * both signs; and the saturation region. */
  for (int c = 0; c < f->maxc; c++) {
    float mid = (float)((f->v[c] + f->v[c + 1]) / 2); /* exact in FP32 */
    ASSERT_EQ((double)mid, (f->v[c] + f->v[c + 1]) / 2);
    float xs[] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
    for (int k = 0; k < 3; k++) {
      check_one(f, enc, xs[k]);
      check_one(f, enc, -xs[k]);
    }
    ASSERT_EQ(enc(mid), (c & 1) ? c + 1 : c);
  }
  float top = (float)f->v[f->maxc];
  float big[] = {
      top, nextafterf(top, INFINITY), top * 1.1f, top * 2, 3.0e38f, INFINITY};
  for (int k = 0; k < 6; k++) {
    ASSERT_EQ(enc(big[k]), f->maxc);
    ASSERT_EQ(enc(-big[k]), f->maxc | f->sign);
  }
  float tiny[] = {0x1p-149f, 0x1p-126f, 1e-30f, 0.0f};
  for (int k = 0; k < 4; k++) {
    ASSERT_EQ(enc(tiny[k]), 0);
    ASSERT_EQ(enc(-tiny[k]), f->sign);
  }
  for (int i = 0; i < iters; i++) {
    float x = rand_float(r, emin, emax);
    if (!isnan(x))
      check_one(f, enc, x);
  }
}

static void test_e4m3(test_rng *r) {
  fmt f = {.name = "e4m3", .mbits = 3, .bias = 7, .maxc = 0x7E, .sign = 0x80};
  check_format(r, &f, stitch_f32_to_e4m3, stitch_e4m3_to_f32, 256, -13, 10,
               3000000);
  ASSERT_EQ(f.v[0x7E], 448.0);
  ASSERT_EQ(f.v[0x01], 0x1p-9);
  ASSERT_EQ(f.v[0x08], 0x1p-6);
  ASSERT_EQ(stitch_f32_to_e4m3(NAN), 0x7F);
  ASSERT_EQ(stitch_f32_to_e4m3(-NAN), 0x7F);
  ASSERT(isnan(stitch_e4m3_to_f32(0xFF)));
  ASSERT_EQ(stitch_f32_to_e4m3(464.0f), 0x7E);   /* tie, and saturation */
  ASSERT_EQ(stitch_f32_to_e4m3(0x1p-10f), 0x00); /* tie with 0: even */
  ASSERT_EQ(stitch_f32_to_e4m3(0x1.000002p-10f), 0x01);
  ASSERT_EQ(stitch_f32_to_e4m3(0x1.ep-7f), 0x08); /* 15/16 * 2^-6: up */
}

static void test_e2m1(test_rng *r) {
  fmt f = {.name = "e2m1", .mbits = 1, .bias = 1, .maxc = 0x7, .sign = 0x8};
  check_format(r, &f, stitch_f32_to_e2m1, stitch_e2m1_to_f32, 16, -5, 4,
               3000000);
  static const double want[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; c++)
    ASSERT_EQ(f.v[c], want[c]);
  ASSERT_EQ(stitch_f32_to_e2m1(NAN), 0x7);   /* no NaN code: +max, as PTX */
  ASSERT_EQ(stitch_f32_to_e2m1(5.0f), 0x6);  /* tie 4|6: even code 4 */
  ASSERT_EQ(stitch_f32_to_e2m1(0.25f), 0x0); /* tie 0|.5: even code 0 */
  ASSERT_EQ(stitch_f32_to_e2m1(0.75f), 0x2); /* tie .5|1: even code 1 */
  ASSERT_EQ(stitch_f32_to_e2m1(7.0f), 0x7);
  for (int x = 0; x < 256; x++) /* high bits are ignored */
    ASSERT((stitch_e2m1_to_f32((uint8_t)x) == stitch_e2m1_to_f32(x & 15)));
}

int main(void) {
  test_rng r = test_rng_seeded("test_minifloat", 0x5eed0001);
  test_bf16(&r);
  test_e4m3(&r);
  test_e2m1(&r);
  fprintf(stderr, "test_minifloat: ok\n");
  return 0;
}
