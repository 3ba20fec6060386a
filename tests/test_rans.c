/* test_rans.c: the RANS block coding (src/codec/rans.c), the fastest
 * mode's: exact round trips on every symbol format, long gaps and wide
 * steps (the raw bits), its size against the memoryless bound, the
 * encoder's mode choosing it, and damaged payloads that must fail
 * cleanly. */
#include "ckpt_util.h"

#include "stitch.h"

#include "codec/cpu.h"
#include "codec/delta_internal.h"

#include <math.h>

static test_rng rng;

#include "block_util.h"

static int rt_coding; /* the coding round_trip's encoder chose */

/* Codes symbols [0, n) of BASE -> NW as RANS or RANSC, decodes it onto a copy of
 * BASE, and returns the payload (caller frees). */
static uint8_t *round_trip(const fmt_case *fc, const sym_fmt *f, uint64_t n,
                           const uint8_t *base, const uint8_t *nw,
                           size_t *plen, uint64_t *pch) {
  size_t nb = f->bits == 4 ? n / 2 : n * (f->bits / 8);
  size_t cap = nb + 4096, scap = 8 * n + 4096;
  uint8_t *out = malloc(cap), *scratch = malloc(scap), *data = malloc(nb);
  size_t len = 0;
  uint64_t ch = 0;
  int coding = -1;
  block_span sp = {0, n};
  int rc = rans_encode(f, base, nw, sp, out, cap, &len, &ch, &coding, 0, scratch, scap);
  if (rc != 0)
    FAIL_("%s, %" PRIu64 " symbols: rans_encode returned %d", fc->name, n, rc);
  ASSERT_UEQ(ch, count_diff(f, base, nw, n));
  stitch_diag d = {{0}};
  memcpy(data, base, nb);
  ASSERT(coding == STITCH_CODING_RANS || coding == STITCH_CODING_RANSC);
  rt_coding = coding;
  ASSERT_OK(rans_decode(f, coding, data, sp, out, len, ch, &d), d);
  if (memcmp(data, nw, nb) != 0)
    FAIL_("%s, %" PRIu64 " symbols: decoded block differs", fc->name, n);
  free(scratch);
  free(data);
  *plen = len;
  *pch = ch;
  return out;
}

static void test_formats(void) {
  static const block_size sizes[] = {
      {70000, 0.05}, {200002, 0.01}, {1u << 19, 0.0035}, {8192, 0.4},
      {4098, 1.0},   {65538, 0.02},  {1000, 0.001},      {76, 0.3}};
  each_format(round_trip, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

/* Gaps up to the largest block's (2^24 symbols) and steps of every width
 * up to 2^63 take raw bits past a table's symbols; the last symbol of the
 * block and the first change too. */
static void test_edges(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_U8, 0, &f), 0);
  uint64_t n = 1u << 24;
  uint8_t *a = calloc(n, 1), *b = calloc(n, 1);
  b[0] = 1;
  b[5000000] = 200;
  b[n - 1] = 7;
  size_t len;
  uint64_t ch;
  free(round_trip(&FORMATS[4], &f, n, a, b, &len, &ch));
  ASSERT_UEQ(ch, 3);
  free(a);
  free(b);

  ASSERT_EQ(sym_fmt_for(STITCH_DT_U64, 0, &f), 0);
  n = 32768;
  uint64_t *x = calloc(n, 8), *y = calloc(n, 8);
  for (uint64_t j = 0; j < n; j++) {
    x[j] = y[j] = test_rng_next(&rng);
    if (j % 8 != 3)
      continue;
    unsigned k = (unsigned)(j / 8 % 64); /* a step of every bit length */
    uint64_t step = k == 0 ? 1 : (1ull << k) | (test_rng_next(&rng) >> (64 - k));
    y[j] = j & 16 ? x[j] + step : x[j] - step;
  }
  free(round_trip(&FORMATS[14], &f, n, (uint8_t *)x, (uint8_t *)y, &len, &ch));
  ASSERT_UEQ(ch, n / 8);
  free(x);
  free(y);
}

/* BF16 steps of +-1 at 1 % density: the memoryless bound is n h(p) for
 * the positions plus a bit a change for the sign; RANS comes within 5 %
 * of it (gaps in buckets of four, two tables). */
static void test_near_bound(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 21;
  double p = 0.01;
  uint16_t *a = malloc(2 * n), *b = malloc(2 * n);
  for (uint64_t j = 0; j < n; j++) {
    a[j] = (uint16_t)(0x3c00 + test_rng_next(&rng) % 0x300);
    b[j] = a[j];
    if (test_rng_unit(&rng) < p)
      b[j] = (uint16_t)(test_rng_next(&rng) & 1 ? a[j] + 1 : a[j] - 1);
  }
  size_t len;
  uint64_t ch;
  free(round_trip(&FORMATS[5], &f, n, (uint8_t *)a, (uint8_t *)b, &len, &ch));
  double q = (double)ch / (double)n;
  double bound = ((double)n * -(q * log2(q) + (1 - q) * log2(1 - q)) +
                  (double)ch) / 8;
  fprintf(stderr, "near_bound: %" PRIu64 " changes, %zu B, bound %.0f B (x%.3f)\n",
          ch, len, bound, (double)len / bound);
  ASSERT_DBL_LE((double)len, 1.05 * bound);
  ASSERT_DBL_LE(0.99 * bound, (double)len);
  free(a);
  free(b);
}

/* The encoder's modes: FASTEST codes large blocks as RANS, FAST as GAPS,
 * and each applies exactly; a mode it does not know is refused. */
static void test_modes(void) {
  uint64_t n = 1u << 18;
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *c = malloc(2 * n);
  make_block(&f, n, 0.02, a, b);
  tspec ta = {"w", STITCH_DT_BF16, 1, {n}, a}, tb = {"w", STITCH_DT_BF16, 1, {n}, b};
  const char *pa = test_path("ra.safetensors"), *pb = test_path("rb.safetensors");
  write_ckpt(pa, &ta, 1, NULL);
  write_ckpt(pb, &tb, 1, NULL);
  static const struct {
    int mode, coding;
  } want[] = {{STITCH_SPARSE_FASTEST, STITCH_CODING_RANS},
              {STITCH_SPARSE_FAST, STITCH_CODING_GAPS}};
  for (int m = 0; m < 2; m++) {
    stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
    stitch_diag d = {{0}};
    stitch_delta_opts o = {.block_log2 = 16, .sparse_mode = want[m].mode};
    stitch_delta_stats st;
    uint8_t *buf;
    size_t len;
    ASSERT_OK(stitch_delta_encode(sa, sb, &o, &buf, &len, &st, &d), d);
    ASSERT_EQ(st.t[0].blocks_by_coding[want[m].coding], 4u);
    stitch_delta_stats_free(&st);
    stitch_delta *dl;
    ASSERT_OK(stitch_delta_parse(buf, len, &dl, &d), d);
    memcpy(c, a, 2 * n);
    ASSERT_OK(stitch_delta_apply_tensor(dl, 0, c, 2 * n, &d), d);
    ASSERT_MEM_EQ(c, b, 2 * n);
    ASSERT_STR_EQ(stitch_coding_name(STITCH_CODING_RANS), "rans");
    stitch_delta_free(dl);
    free(buf);
    stitch_st_free(sa);
    stitch_st_free(sb);
  }
  free(a);
  free(b);
  free(c);
}

/* No room: the encoder says so, by what ran out, and never writes past
 * either buffer (ASan in CI). Out of scratch (wide steps at a high
 * density) it declines and the delta encoder codes the block SPARSE; out
 * of output it reports STITCH_ELIMIT. Every cap and scratch size around
 * what a block needs, each buffer allocated to exactly that size. */
static void test_no_room(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 16;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *scratch = malloc(8 * n);
  make_block(&f, n, 0.5, a, b);
  size_t len;
  uint64_t ch;
  int coding;
  uint8_t *out = malloc(4096);
  block_span sp = {0, n};
  ASSERT_EQ(rans_encode(&f, a, b, sp, out, 4096, &len, &ch, &coding, 0, scratch, 8 * n),
            STITCH_ELIMIT);
  ASSERT_EQ(rans_encode(&f, a, b, sp, out, 4096, &len, &ch, &coding, 0, scratch, 4 * n),
            RANS_DECLINED);
  free(out);
  free(scratch);

  /* F32 symbols 95 % of them new at random: the steps' raw bits (some 28
   * a change) outgrow the scratch the delta encoder gives (8 bytes a
   * symbol). */
  ASSERT_EQ(sym_fmt_for(STITCH_DT_F32, 0, &f), 0);
  uint32_t *x = malloc(4 * n), *y = malloc(4 * n);
  for (uint64_t j = 0; j < n; j++) {
    x[j] = y[j] = (uint32_t)test_rng_next(&rng) & 0x3fffffffu;
    if (test_rng_unit(&rng) < 0.95)
      y[j] = x[j] ^ (1u + ((uint32_t)test_rng_next(&rng) & 0x3ffffffeu));
  }
  scratch = malloc(8 * n);
  out = malloc(4 * n);
  ASSERT_EQ(rans_encode(&f, (uint8_t *)x, (uint8_t *)y, sp, out, 4 * n, &len,
                        &ch, &coding, 0, scratch, 8 * n),
            RANS_DECLINED);
  free(out);
  free(scratch);
  tspec ta = {"w", STITCH_DT_F32, 1, {n}, (uint8_t *)x},
        tb = {"w", STITCH_DT_F32, 1, {n}, (uint8_t *)y};
  const char *pa = test_path("wa.safetensors"), *pb = test_path("wb.safetensors");
  write_ckpt(pa, &ta, 1, NULL);
  write_ckpt(pb, &tb, 1, NULL);
  stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
  stitch_diag d = {{0}};
  stitch_delta_opts o = {.block_log2 = 16, .sparse_mode = STITCH_SPARSE_FASTEST};
  stitch_delta_stats st;
  uint8_t *buf;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &buf, &len, &st, &d), d);
  ASSERT_EQ(st.t[0].blocks_by_coding[STITCH_CODING_RANS], 0u);
  stitch_delta_stats_free(&st);
  stitch_delta *dl;
  ASSERT_OK(stitch_delta_parse(buf, len, &dl, &d), d);
  uint32_t *z = malloc(4 * n);
  memcpy(z, x, 4 * n);
  ASSERT_OK(stitch_delta_apply_tensor(dl, 0, (uint8_t *)z, 4 * n, &d), d);
  ASSERT_MEM_EQ(z, y, 4 * n);
  free(z);
  stitch_delta_free(dl);
  free(buf);
  stitch_st_free(sa);
  stitch_st_free(sb);
  free(x);
  free(y);

  /* Exact sizes around the need: a success decodes, a failure says why. */
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  n = 1u << 13;
  make_block(&f, n, 0.2, a, b);
  size_t need;
  uint8_t *big = malloc(2 * n), *sbig = malloc(8 * n);
  ASSERT_EQ(rans_encode(&f, a, b, (block_span){0, n}, big, 2 * n, &need, &ch,
                        &coding, 0, sbig, 8 * n),
            0);
  uint8_t *data = malloc(2 * n);
  int ok = 0, limit = 0, declined = 0;
  for (size_t c = need > 900 ? need - 900 : 0; c <= need + 40; c += 7)
    for (size_t sc = 6 * n; sc <= 8 * n; sc += n / 4) {
      uint8_t *o2 = malloc(c ? c : 1), *s2 = malloc(sc);
      int rc = rans_encode(&f, a, b, (block_span){0, n}, o2, c, &len, &ch,
                           &coding, 0, s2, sc);
      if (rc == 0) {
        ok++;
        ASSERT(len <= c);
        memcpy(data, a, 2 * n);
        ASSERT_OK(rans_decode(&f, coding, data, (block_span){0, n}, o2, len, ch, &d), d);
        ASSERT_MEM_EQ(data, b, 2 * n);
      } else {
        ASSERT(rc == STITCH_ELIMIT || rc == RANS_DECLINED);
        limit += rc == STITCH_ELIMIT;
        declined += rc == RANS_DECLINED;
      }
      free(o2);
      free(s2);
    }
  ASSERT(ok > 0 && limit > 0 && declined > 0);
  free(data);
  free(big);
  free(sbig);
  free(a);
  free(b);
}

/* A payload's parts (proto/delta.md "RANS"), to damage one at a time. */
typedef struct parts {
  const uint8_t *gtab, *stab, *gb, *gs, *sb, *ss;
  size_t ngtab, nstab, ngb, ngs, nsb, nss;
} parts;

static size_t table_len(const uint8_t *p) {
  size_t k = 1;
  for (unsigned i = 0; i < p[0]; i++)
    while (p[k++] & 0x80)
      ;
  return k;
}

static size_t get_varint(const uint8_t *p, size_t *v) {
  size_t k = 0;
  *v = 0;
  do
    *v |= (size_t)(p[k] & 0x7f) << (7 * k);
  while (p[k++] & 0x80);
  return k;
}

static void split(const uint8_t *p, size_t len, parts *x) {
  size_t k = 0;
  x->gtab = p;
  k += x->ngtab = table_len(p);
  x->stab = p + k;
  k += x->nstab = table_len(p + k);
  k += get_varint(p + k, &x->ngb);
  x->gb = p + k;
  k += x->ngb;
  k += get_varint(p + k, &x->ngs);
  x->gs = p + k;
  k += x->ngs;
  k += get_varint(p + k, &x->nsb);
  x->sb = p + k;
  k += x->nsb;
  x->ss = p + k;
  ASSERT(k <= len);
  x->nss = len - k;
}

static size_t put_varint(uint8_t *p, size_t v) {
  size_t k = 0;
  do {
    p[k++] = (uint8_t)(v >= 0x80 ? (v & 0x7f) | 0x80 : v);
    v >>= 7;
  } while (v);
  return k;
}

static size_t join(const parts *x, uint8_t *out) {
  size_t k = 0;
  memcpy(out + k, x->gtab, x->ngtab), k += x->ngtab;
  memcpy(out + k, x->stab, x->nstab), k += x->nstab;
  k += put_varint(out + k, x->ngb);
  memcpy(out + k, x->gb, x->ngb), k += x->ngb;
  k += put_varint(out + k, x->ngs);
  memcpy(out + k, x->gs, x->ngs), k += x->ngs;
  k += put_varint(out + k, x->nsb);
  memcpy(out + k, x->sb, x->nsb), k += x->nsb;
  memcpy(out + k, x->ss, x->nss), k += x->nss;
  return k;
}

/* A BF16 base of N symbols, B a copy of it to change, and room to decode
 * into. */
static void ramp_pair(uint64_t n, uint16_t **a, uint16_t **b, uint16_t **data) {
  *a = malloc(2 * n), *b = malloc(2 * n), *data = malloc(2 * n);
  ASSERT(*a != NULL && *b != NULL && *data != NULL);
  for (uint64_t j = 0; j < n; j++)
    (*a)[j] = (*b)[j] = (uint16_t)(0x3c00 + j % 512);
}

/* Each rule the spec lists, broken on purpose, gets its own error. */
static void test_rules(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 14;
  uint16_t *a, *b, *data;
  ramp_pair(n, &a, &b, &data);
  b[100] += 1;  /* gap 100: four raw bits, four of padding */
  b[140] -= 3;  /* a step of 3: one raw bit */
  b[5000] += 1; /* gap 4859: ten raw bits */
  size_t len;
  uint64_t ch;
  uint8_t *p = round_trip(&FORMATS[5], &f, n, (uint8_t *)a, (uint8_t *)b,
                          &len, &ch);
  ASSERT_UEQ(ch, 3);
  ASSERT_EQ(rt_coding, STITCH_CODING_RANS);
  parts x;
  split(p, len, &x);
  ASSERT(x.ngb == 3 && x.nsb == 1); /* 4 + 10 gap bits, 1 step bit */
  uint8_t *q = malloc(len + 64), t1[300], t2[300], bytes[64];
  block_span sp = {0, n};
  stitch_diag d = {{0}};
#define EXPECT(what)                                                          \
  do {                                                                        \
    size_t ql = join(&y, q);                                                  \
    memcpy(data, a, 2 * n);                                                   \
    ASSERT_ERR(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, sp, q, ql, ch, &d),           \
               STITCH_EFORMAT, d, what);                                      \
  } while (0)
  parts y = x;
  { /* a nonzero padding bit */
    memcpy(bytes, x.gb, x.ngb);
    bytes[x.ngb - 1] |= 0x80;
    y.gb = bytes;
    EXPECT("does not end cleanly");
  }
  y = x;
  { /* a raw byte left over */
    memcpy(bytes, x.sb, x.nsb);
    bytes[x.nsb] = 0;
    y.sb = bytes;
    y.nsb = x.nsb + 1;
    EXPECT("does not end cleanly");
  }
  y = x;
  { /* a stream byte left over */
    memcpy(bytes, x.gs, x.ngs);
    bytes[x.ngs] = 0;
    y.gs = bytes;
    y.ngs = x.ngs + 1;
    EXPECT("does not end cleanly");
  }
  y = x;
  { /* a start state below 2^23, then one of 2^31 */
    memcpy(bytes, x.gs, x.ngs);
    memset(bytes, 0, 4);
    bytes[0] = 1;
    y.gs = bytes;
    EXPECT("bad coder state");
    memset(bytes, 0, 4);
    bytes[3] = 0x80;
    EXPECT("bad coder state");
  }
  y = x;
  { /* raw bits cut short */
    y.ngb = 1;
    EXPECT("raw bits end early");
  }
  y = x;
  { /* a step table of one code, 40 (above 2w - 1 = 31): accepted as a
       table, rejected when decoded */
    size_t k = 0;
    t1[k++] = 41;
    for (int i = 0; i < 40; i++)
      t1[k++] = 0;
    k += put_varint(t1 + k, 4096);
    y.stab = t1;
    y.nstab = k;
    EXPECT("bad step");
  }
  y = x;
  { /* a gap table of one code, 31 of 4096: the fourth change would be at
       124, but the steps' stream runs out first, or the block ends */
    size_t k = 0;
    t2[k++] = 32;
    for (int i = 0; i < 31; i++)
      t2[k++] = 0;
    k += put_varint(t2 + k, 4096);
    y.gtab = t2;
    y.ngtab = k;
    EXPECT("rans block");
  }
  y = x;
  { /* tables that do not sum to 4096, counts past the last code, empty */
    t1[0] = 1;
    t1[1] = 0x80, t1[2] = 0x10; /* 2048 */
    y.gtab = t1;
    y.ngtab = 3;
    EXPECT("bad table");
    t1[0] = 109; /* gap codes are 0..107 */
    y.ngtab = 1;
    EXPECT("bad table");
    t1[0] = 0;
    EXPECT("an empty table");
    y = x;
    t2[0] = 129; /* step codes are 0..127 */
    y.stab = t2;
    y.nstab = 1;
    EXPECT("bad table");
  }
  y = x;
  { /* a gap past the block's end: the block is shorter than the coded */
    size_t ql = join(&y, q);
    memcpy(data, a, 2 * n);
    ASSERT_ERR(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, (block_span){0, 4000}, q, ql,
                           ch, &d),
               STITCH_EFORMAT, d, "lies past the block");
  }
#undef EXPECT
  free(q);
  free(p);
  free(a);
  free(b);
  free(data);
}

/* 600 random damages of the payload P (a bit flipped anywhere, or a cut)
 * decoded onto a copy of BASE (NB bytes): a clean error or a decoding,
 * never a read or write out of bounds (ASan in CI), and every cut
 * caught. */
static void damage(const sym_fmt *f, int coding, const uint8_t *base,
                   size_t nb, const uint8_t *p, size_t len, uint64_t ch) {
  uint8_t *q = malloc(len), *data = malloc(nb);
  block_span sp = {0, f->bits == 4 ? 2 * nb : nb / (f->bits / 8)};
  stitch_diag d = {{0}};
  for (int it = 0; it < 600; it++) {
    size_t cut = damage_payload(p, len, 0, it, q);
    memcpy(data, base, nb);
    int rc = rans_decode(f, coding, data, sp, q, cut, ch, &d);
    ASSERT(rc == 0 || rc == STITCH_EFORMAT);
    if (it % 4 == 0)
      ASSERT(rc != 0); /* every byte counts: a cut is always caught */
  }
  free(q);
  free(data);
}

/* The raw-bit rules again with parts of dozens of bytes, both the gaps'
 * and the steps': a byte left over, a part one byte short and a nonzero
 * padding bit are each caught, and the part as coded decodes. */
static void test_rules_long(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 16;
  uint16_t *a, *b, *data;
  ramp_pair(n, &a, &b, &data);
  /* Gaps of 200 to 1,299 (5 to 8 raw bits each) and steps of 2 to 9 (up
   * to three raw bits): both raw parts dozens of bytes long. */
  for (uint64_t j = 200, k = 0; j < n; j += 300 + (k * 337) % 1000, k++)
    b[j] = (uint16_t)(b[j] + 2 + k % 8);
  size_t len;
  uint64_t ch;
  uint8_t *p = round_trip(&FORMATS[5], &f, n, (uint8_t *)a, (uint8_t *)b,
                          &len, &ch);
  ASSERT_EQ(rt_coding, STITCH_CODING_RANS);
  parts x;
  split(p, len, &x);
  ASSERT(x.ngb > 40 && x.nsb > 16);
  uint8_t *q = malloc(len + 64), *bytes = malloc(len + 64);
  block_span sp = {0, n};
  stitch_diag d = {{0}};
  parts y = x;
  const uint8_t **part[2] = {&y.gb, &y.sb};
  size_t *plen[2] = {&y.ngb, &y.nsb};
  const uint8_t *orig[2] = {x.gb, x.sb};
  const size_t olen[2] = {x.ngb, x.nsb};
  for (int t = 0; t < 2; t++) {
    y = x;
    memcpy(bytes, orig[t], olen[t]);
    *part[t] = bytes;
    bytes[olen[t]] = 0; /* a byte left over */
    *plen[t] = olen[t] + 1;
    size_t ql = join(&y, q);
    memcpy(data, a, 2 * n);
    ASSERT_ERR(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, sp, q, ql, ch, &d),
               STITCH_EFORMAT, d, "does not end cleanly");
    *plen[t] = olen[t] - 1; /* one short */
    ql = join(&y, q);
    memcpy(data, a, 2 * n);
    ASSERT_ERR(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, sp, q, ql, ch, &d),
               STITCH_EFORMAT, d, "raw bits end early");
    *plen[t] = olen[t];
    ql = join(&y, q); /* as coded: decodes */
    memcpy(data, a, 2 * n);
    ASSERT_OK(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, sp, q, ql, ch, &d), d);
    ASSERT(memcmp(data, b, 2 * n) == 0);
  }
  /* The gaps' last byte holds padding above its last bit (the changes
   * above leave some): set the top one. */
  y = x;
  memcpy(bytes, x.gb, x.ngb);
  y.gb = bytes;
  ASSERT((bytes[x.ngb - 1] & 0x80) == 0);
  bytes[x.ngb - 1] |= 0x80;
  size_t ql = join(&y, q);
  memcpy(data, a, 2 * n);
  ASSERT_ERR(rans_decode(&f, STITCH_CODING_RANS, (uint8_t *)data, sp, q, ql, ch, &d),
             STITCH_EFORMAT, d, "does not end cleanly");
  free(bytes);
  free(q);
  free(p);
  free(a);
  free(b);
  free(data);
}

/* Damaged payloads and wrong counts: a clean error or some decoding, never
 * a read or write out of bounds (run under ASan), and the damage that
 * must be caught is. */
static void test_damage(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 16;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *data = malloc(2 * n);
  make_block(&f, n, 0.03, a, b);
  size_t len;
  uint64_t ch;
  uint8_t *p = round_trip(&FORMATS[5], &f, n, a, b, &len, &ch);
  block_span sp = {0, n};
  stitch_diag d = {{0}};
  memcpy(data, a, 2 * n);
  ASSERT_ERR(rans_decode(&f, rt_coding, data, sp, p, len, ch + 1, &d), STITCH_EFORMAT, d,
             "rans block");
  memcpy(data, a, 2 * n);
  ASSERT_ERR(rans_decode(&f, rt_coding, data, sp, p, len, ch - 1, &d), STITCH_EFORMAT, d,
             "does not end cleanly");
  ASSERT_ERR(rans_decode(&f, rt_coding, data, sp, p, 0, ch, &d), STITCH_EFORMAT, d,
             "bad table");
  /* A table whose frequencies do not sum to 4096. */
  uint8_t *q = malloc(len);
  memcpy(q, p, len);
  ASSERT(q[0] > 0 && q[1] > 1); /* the gap table's count, first frequency */
  q[1]--;
  ASSERT_ERR(rans_decode(&f, rt_coding, data, sp, q, len, ch, &d), STITCH_EFORMAT, d,
             "bad table");
  damage(&f, rt_coding, a, 2 * n, p, len, ch); /* anywhere, and cuts */
  free(q);
  free(p);
  free(a);
  free(b);
  free(data);
}

/* ---- RANSC ------------------------------------------------------------ */

/* A float block whose changes follow magnitude, as under Adam: exponents
 * spread evenly over up to 8 octaves below a top, and a symbol OCT
 * octaves below the top changes with chance P * 4^OCT (at most 0.9),
 * by one step. */
static void make_class_block(const sym_fmt *f, uint64_t n, double p,
                             uint8_t *base, uint8_t *nw) {
  unsigned bits = f->bits, emax = (1u << f->exp_bits) - 1;
  unsigned top = emax > 4 ? emax / 2 + 2 : emax, span = top < 7 ? top + 1 : 8;
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  for (uint64_t j = 0; j < n; j++) {
    unsigned oct = (unsigned)(test_rng_next(&rng) % span);
    uint64_t v = (test_rng_next(&rng) & 1) << (bits - 1) |
                 (uint64_t)(top - oct) << f->mant_bits |
                 (test_rng_next(&rng) & ((1ull << f->mant_bits) - 1));
    st_sym(base, j, bits, v);
    st_sym(nw, j, bits, v);
    double q = p * (double)(1u << (2 * oct));
    if (test_rng_unit(&rng) >= (q < 0.9 ? q : 0.9))
      continue;
    uint64_t nv = (test_rng_next(&rng) & 1 ? v + 1 : v - 1) & mask;
    st_sym(nw, j, bits, nv == v ? (v + 2) & mask : nv);
  }
}

/* Codes BASE -> NW with CLASSES, expecting RC and (on success) CODING;
 * a payload decodes exactly. Returns the payload, or NULL. */
static uint8_t *code_one_run(const codec_run *run, const sym_fmt *f,
                             uint64_t n, const uint8_t *base,
                             const uint8_t *nw, int classes, int want_rc,
                             int want_coding, size_t *plen) {
  size_t nb = f->bits == 4 ? n / 2 : n * (f->bits / 8);
  size_t cap = nb + 4096, scap = 8 * n + 4096;
  uint8_t *out = malloc(cap), *scratch = malloc(scap), *data = malloc(nb);
  uint64_t ch = 0;
  int coding = -1;
  int rc = rans_encode_run(run, f, base, nw, (block_span){0, n}, out, cap,
                           plen, &ch, &coding, classes, scratch, scap);
  if (rc != want_rc)
    FAIL_("%u-bit symbols, %" PRIu64 " of them, %" PRIu64 " changed: "
          "rans_encode returned %d, not %d", f->bits, n,
          count_diff(f, base, nw, n), rc, want_rc);
  free(scratch);
  if (rc != 0) {
    free(out);
    free(data);
    return NULL;
  }
  ASSERT_EQ(coding, want_coding);
  ASSERT_UEQ(ch, count_diff(f, base, nw, n));
  stitch_diag d = {{0}};
  memcpy(data, base, nb);
  ASSERT_OK(rans_decode_run(run, f, coding, data, (block_span){0, n}, out,
                            *plen, ch, &d), d);
  ASSERT_MEM_EQ(data, nw, nb);
  free(data);
  return out;
}

static const codec_run vec_run = {0, 0}, scalar_run = {1, 0};

static uint8_t *code_one(const sym_fmt *f, uint64_t n, const uint8_t *base,
                         const uint8_t *nw, int classes, int want_rc,
                         int want_coding, size_t *plen) {
  return code_one_run(&vec_run, f, n, base, nw, classes, want_rc, want_coding,
                      plen);
}

/* Every float format at sizes around the window (4096 symbols) and the
 * word: RANSC round trips, and the vector class words (AVX2) give the
 * reference loops' bytes, both ways. */
static void test_classes_formats(void) {
  static const uint64_t sizes[] = {65536, 70002, 200000, 135170}; /* and
                                          partial windows and words */
  static const int floats[] = {0, 1, 2, 5, 6, 9, 12}; /* in FORMATS */
  int coded = 0;
  for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++) {
    const fmt_case *fc = &FORMATS[floats[i]];
    sym_fmt f;
    ASSERT_EQ(sym_fmt_for(fc->dt, fc->nibble, &f), 0);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
      uint64_t n = sizes[s];
      size_t nb = f.bits == 4 ? n / 2 : n * (f.bits / 8), la = 0, lb = 0;
      uint8_t *a = malloc(nb), *b = malloc(nb);
      for (double p = 1e-7;; p *= 1.5) { /* 3 % or more: RANSC's range */
        make_class_block(&f, n, p, a, b);
        if (count_diff(&f, a, b, n) * 100 >= 3 * n)
          break;
      }
      uint8_t *p1 = code_one(&f, n, a, b, 1, 0, STITCH_CODING_RANSC, &la);
      uint8_t *p2 = code_one_run(&scalar_run, &f, n, a, b, 1, 0,
                                 STITCH_CODING_RANSC, &lb);
      stitch_diag d = {{0}};
      uint8_t *data = malloc(nb);
      memcpy(data, a, nb); /* the vector encoder's payload, decoded by the reference */
      ASSERT_OK(rans_decode_run(&scalar_run, &f, STITCH_CODING_RANSC, data,
                                (block_span){0, n}, p1, la,
                                count_diff(&f, a, b, n), &d), d);
      ASSERT_MEM_EQ(data, b, nb);
      if (la != lb || memcmp(p1, p2, la) != 0)
        FAIL_("%s, %" PRIu64 " symbols: vector and reference payloads differ",
              fc->name, n);
      coded++;
      free(data);
      free(p1);
      free(p2);
      free(a);
      free(b);
    }
  }
  ASSERT_EQ(coded, 28);
}

/* The memoryless bound of a BF16 block (steps of one: a bit each). */
static double bound_bytes(uint64_t n, uint64_t k) {
  double q = (double)k / (double)n;
  return ((double)n * -(q * log2(q) + (1 - q) * log2(1 - q)) + (double)k) / 8;
}

/* Where changes follow magnitude, classes code well below the memoryless
 * bound, and below RANS; the encoder declines what they cannot help. */
static void test_classes_gain(void) {
  sym_fmt f;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  uint64_t n = 1u << 20;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n);
  make_class_block(&f, n, 0.00003, a, b);
  uint64_t k = count_diff(&f, a, b, n);
  ASSERT(k > n / 40 && k < n / 4); /* dense enough, not too dense */
  size_t lc = 0, lr = 0;
  free(code_one(&f, n, a, b, 1, 0, STITCH_CODING_RANSC, &lc));
  free(code_one(&f, n, a, b, 0, 0, STITCH_CODING_RANS, &lr));
  double bound = bound_bytes(n, k);
  fprintf(stderr, "classes: %" PRIu64 " changes, RANSC %zu B, RANS %zu B, bound %.0f B (x%.3f)\n",
          k, lc, lr, bound, (double)lc / bound);
  ASSERT_DBL_LE((double)lc, 0.85 * bound);
  ASSERT_DBL_LE((double)lc, 0.85 * (double)lr);

  /* Declined: changes blind to magnitude (classes do not pay); below
   * 2.5 % (GAPS codes those); above a quarter; integers. */
  make_block(&f, n, 0.05, a, b);
  ASSERT(code_one(&f, n, a, b, 1, RANS_DECLINED, 0, &lc) == NULL);
  make_class_block(&f, n, 0.000001, a, b);
  ASSERT(count_diff(&f, a, b, n) < n / 50);
  ASSERT(code_one(&f, n, a, b, 1, RANS_DECLINED, 0, &lc) == NULL);
  make_class_block(&f, n, 0.001, a, b);
  ASSERT(count_diff(&f, a, b, n) > n / 4);
  ASSERT(code_one(&f, n, a, b, 1, RANS_DECLINED, 0, &lc) == NULL);
  ASSERT_EQ(sym_fmt_for(STITCH_DT_U16, 0, &f), 0);
  make_block(&f, n, 0.05, a, b);
  ASSERT(code_one(&f, n, a, b, 1, RANS_DECLINED, 0, &lc) == NULL);
  free(a);
  free(b);
}

/* Each rule of the spec's RANSC header broken on purpose, each with its
 * own error; then random damage and cuts: a clean error or a decoding,
 * never a read or write out of bounds (ASan in CI). */
static void test_classes_rules(void) {
  sym_fmt f, u16;
  ASSERT_EQ(sym_fmt_for(STITCH_DT_BF16, 0, &f), 0);
  ASSERT_EQ(sym_fmt_for(STITCH_DT_U16, 0, &u16), 0);
  uint64_t n = 1u << 16;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *data = malloc(2 * n);
  make_class_block(&f, n, 0.00003, a, b);
  uint64_t ch = count_diff(&f, a, b, n);
  size_t len = 0;
  uint8_t *p = code_one(&f, n, a, b, 1, 0, STITCH_CODING_RANSC, &len);
  ASSERT(p[0] >= 2 && p[0] <= 4);
  uint8_t *q = malloc(len + 16);
  block_span sp = {0, n};
  stitch_diag d = {{0}};
#define EXPECT_C(fmt, ql, chg, what)                                          \
  do {                                                                        \
    memcpy(data, a, 2 * n);                                                   \
    ASSERT_ERR(rans_decode(fmt, STITCH_CODING_RANSC, data, sp, q, ql, chg, &d), \
               STITCH_EFORMAT, d, what);                                      \
  } while (0)
  memcpy(q, p, len);
  q[0] = 1; /* one class: that is RANS */
  EXPECT_C(&f, len, ch, "bad class count");
  q[0] = 5;
  EXPECT_C(&f, len, ch, "bad class count");
  memcpy(q, p, len);
  q[1] = 0; /* a limit of 0 */
  EXPECT_C(&f, len, ch, "bad class limits");
  memcpy(q, p, len); /* the first limit at 2^15: past every level */
  q[1] = 0x80, q[2] = 0x80, q[3] = 0x02;
  EXPECT_C(&f, len, ch, "bad class limits");
  if (p[0] >= 3) { /* limits that do not fall */
    memcpy(q, p, len);
    size_t k1 = 1;
    while (q[k1] & 0x80)
      k1++;
    memcpy(q + k1 + 1, q + 1, k1); /* the second limit = the first */
    EXPECT_C(&f, len, ch, "bad class limits");
  }
  memcpy(q, p, len);
  EXPECT_C(&f, len, ch + 1, "class counts");
  EXPECT_C(&f, len, ch - 1, "class counts");
  q[len] = 0;
  EXPECT_C(&f, len + 1, ch, "trailing bytes");
  EXPECT_C(&u16, len, ch, "need a float format");
  EXPECT_C(&f, 1, ch, "ransc block");
#undef EXPECT_C
  /* Exact buffer sizes around the need (ASan in CI): a success decodes,
   * a failure says why. */
  int ok = 0, short_ = 0;
  for (size_t c = len - 300; c <= len + 40; c += 3)
    for (size_t sc = 6 * n + 64; sc <= 8 * n; sc += n / 2) {
      uint8_t *o2 = malloc(c), *s2 = malloc(sc);
      size_t l2;
      uint64_t ch2;
      int coding = -1;
      int rc = rans_encode(&f, a, b, sp, o2, c, &l2, &ch2, &coding, 1, s2, sc);
      if (rc == 0) {
        ok++;
        ASSERT(l2 <= c && coding == STITCH_CODING_RANSC);
        memcpy(data, a, 2 * n);
        ASSERT_OK(rans_decode(&f, coding, data, sp, o2, l2, ch2, &d), d);
        ASSERT_MEM_EQ(data, b, 2 * n);
      } else {
        ASSERT(rc == STITCH_ELIMIT || rc == RANS_DECLINED);
        short_++;
      }
      free(o2);
      free(s2);
    }
  ASSERT(ok > 0 && short_ > 0);
  damage(&f, STITCH_CODING_RANSC, a, 2 * n, p, len, ch);
  free(q);
  free(p);
  free(a);
  free(b);
  free(data);
}

int main(void) {
  rng = test_rng_seeded("test_rans", 20261201);
  test_formats();
  test_edges();
  test_near_bound();
  test_modes();
  test_no_room();
  test_rules();
  test_rules_long();
  test_damage();
  test_classes_formats();
  test_classes_gain();
  test_classes_rules();
  puts("test_rans: ok");
  return 0;
}
