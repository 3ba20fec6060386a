/* test_delta.c: the delta codec round-trips bit for bit, names its base,
 * and comes out near (below) the memoryless bound. */
#define _GNU_SOURCE /* memmem */
#include "ckpt_util.h"
#include "fuzz/fuzz_common.h"

#include <math.h>
#include <pthread.h>
#include <sys/stat.h>

static test_rng rng;

/* One step of the bit pattern of a sign-magnitude float, up or down in
 * value: what Adam absorption mostly produces. */
static uint64_t step_float(uint64_t v, unsigned bits, int up) {
  uint64_t sb = 1ull << (bits - 1);
  int neg = (v & sb) != 0;
  uint64_t mag = v & (sb - 1);
  if (up != neg)
    return mag + 1 < sb ? v + 1 : v - 1;
  return mag > 0 ? v - 1 : v ^ sb; /* -0 <-> +0 */
}

static int is_float(stitch_dtype dt) {
  return dt == STITCH_DT_BF16 || dt == STITCH_DT_F16 || dt == STITCH_DT_F32 ||
         dt == STITCH_DT_F64 || dt == STITCH_DT_F8_E4M3 ||
         dt == STITCH_DT_F8_E5M2;
}

static uint64_t get(const uint8_t *p, size_t i, size_t es) {
  uint64_t v = 0;
  memcpy(&v, p + i * es, es);
  return v;
}

static void set(uint8_t *p, size_t i, size_t es, uint64_t v) {
  memcpy(p + i * es, &v, es);
}

/* Fills base with weight-like values and derives new with a fraction p of
 * elements moved: mostly one step, sometimes more, for floats; random for
 * integers. */
static void make_pair(stitch_dtype dt, size_t n, double p, uint8_t *base,
                      uint8_t *nw) {
  size_t es = stitch_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = test_rng_next(&rng);
    if (dt == STITCH_DT_BF16) {
      float f = (float)((test_rng_unit(&rng) - 0.5) * 0.08);
      uint32_t u;
      memcpy(&u, &f, 4);
      v = u >> 16;
    }
    set(base, i, es, v);
  }
  memcpy(nw, base, n * es);
  for (size_t i = 0; i < n; i++) {
    if (test_rng_unit(&rng) >= p)
      continue;
    uint64_t v = get(base, i, es);
    if (is_float(dt)) {
      int k = test_rng_unit(&rng) < 0.9 ? 1 : 1 + (int)(test_rng_next(&rng) % 40);
      int up = (int)(test_rng_next(&rng) & 1);
      for (int s = 0; s < k; s++)
        v = step_float(v, (unsigned)es * 8, up);
    } else {
      v = v + 1 + test_rng_next(&rng) % 1000;
    }
    set(nw, i, es, v);
  }
}

static uint8_t *encode_fmt(const char *a, const char *b, unsigned block_log2,
                           unsigned format, size_t *len,
                           stitch_delta_stats *stats) {
  stitch_st *sa = open_ckpt(a), *sb = open_ckpt(b);
  stitch_diag d = {{0}};
  stitch_delta_opts o = {.block_log2 = block_log2, .format = format};
  uint8_t *buf;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &buf, len, stats, &d), d);
  stitch_st_free(sa);
  stitch_st_free(sb);
  return buf;
}

static uint8_t *encode(const char *a, const char *b, unsigned block_log2,
                       size_t *len, stitch_delta_stats *stats) {
  return encode_fmt(a, b, block_log2, 0, len, stats);
}

/* What stitch_delta_apply_file_ex reported: the stages in order, each
 * from 0 to the same total, never going back. */
typedef struct progress_log {
  const char *stage[8];
  int n;
  uint64_t done, total;
} progress_log;

static void on_progress(void *arg, const char *what, uint64_t done,
                        uint64_t total) {
  progress_log *p = arg;
  if (p->n == 0 || strcmp(p->stage[p->n - 1], what) != 0) {
    ASSERT(p->n < 8);
    ASSERT(p->n == 0 || p->done == p->total); /* the last stage finished */
    ASSERT_UEQ(done, 0);
    p->stage[p->n++] = what;
    p->done = 0;
  }
  ASSERT(done >= p->done && done <= total);
  ASSERT(p->n == 1 || total == p->total);
  p->done = done;
  p->total = total;
}

static void check_apply_file(const char *a, const uint8_t *dbytes, size_t dlen,
                             const char *b) {
  stitch_diag d = {{0}};
  stitch_delta *dl;
  stitch_st *sa = open_ckpt(a), *sb = open_ckpt(b);
  ASSERT_OK(stitch_delta_parse_ex(dbytes, dlen, sa, &dl, &d), d);
  const char *out = test_path("applied.safetensors");
  progress_log pl = {.n = 0};
  stitch_delta_apply_opts o = {.threads = 2, .progress = on_progress,
                               .progress_arg = &pl};
  ASSERT_OK(stitch_delta_apply_file_ex(sa, dl, out, &o, &d), d);
  static const char *const stages[] = {"copying the base", "applying",
                                       "checking digests", "writing"};
  ASSERT_EQ(pl.n, 4);
  for (int i = 0; i < 4; i++)
    ASSERT_STR_EQ(pl.stage[i], stages[i]);
  ASSERT_UEQ(pl.done, pl.total);
  stitch_st *so = open_ckpt(out);
  ASSERT_EQ(stitch_st_count(so), stitch_st_count(sb));
  uint64_t result_bytes = 0;
  for (size_t i = 0; i < stitch_st_count(sb); i++)
    result_bytes += stitch_st_tensor(sb, i)->nbytes;
  ASSERT_UEQ(pl.total, result_bytes);
  for (size_t i = 0; i < stitch_st_count(sb); i++) {
    const stitch_tensor *x = stitch_st_tensor(sb, i);
    const stitch_tensor *y = stitch_st_find(so, x->name);
    ASSERT(y != NULL);
    ASSERT_EQ(x->dtype, y->dtype);
    ASSERT_EQ(x->ndim, y->ndim);
    for (int k = 0; k < x->ndim; k++)
      ASSERT_UEQ(x->shape[k], y->shape[k]);
    ASSERT_UEQ(x->nbytes, y->nbytes);
    ASSERT_MEM_EQ(x->data, y->data, x->nbytes);
  }
  const char *m1 = stitch_st_metadata(sb), *m2 = stitch_st_metadata(so);
  ASSERT((m1 == NULL) == (m2 == NULL));
  if (m1)
    ASSERT_STR_EQ(m1, m2);
  stitch_st_free(sa);
  stitch_st_free(sb);
  stitch_st_free(so);
  stitch_delta_free(dl);
}

static void test_dtypes(void) {
  static const stitch_dtype dts[] = {
      STITCH_DT_BF16, STITCH_DT_F16,     STITCH_DT_F32,     STITCH_DT_F64,
      STITCH_DT_F8_E4M3, STITCH_DT_F8_E5M2, STITCH_DT_U8,   STITCH_DT_I8,
      STITCH_DT_I16,  STITCH_DT_U16,     STITCH_DT_I32,     STITCH_DT_U32,
      STITCH_DT_I64,  STITCH_DT_U64,     STITCH_DT_BOOL};
  static const double ps[] = {0, 0.001, 0.01, 0.1, 0.5, 1.0};
  for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++)
    for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
      size_t n = 3000 + (size_t)(test_rng_next(&rng) % 3000);
      size_t es = stitch_dtype_size(dts[di]);
      uint8_t *a = malloc(n * es), *b = malloc(n * es);
      make_pair(dts[di], n, ps[pi], a, b);
      tspec ta = {"t", dts[di], 1, {n}, a}, tb = {"t", dts[di], 1, {n}, b};
      const char *pa = test_path("a.safetensors"), *pb = test_path("b.safetensors");
      write_ckpt(pa, &ta, 1, NULL);
      write_ckpt(pb, &tb, 1, NULL);
      size_t len;
      /* Small blocks so block edges and partial groups are exercised. */
      uint8_t *dbytes = encode(pa, pb, 10, &len, NULL);
      stitch_diag d = {{0}};
      stitch_delta *dl;
      ASSERT_OK(stitch_delta_parse(dbytes, len, &dl, &d), d);
      uint8_t *c = malloc(n * es);
      memcpy(c, a, n * es);
      ASSERT_OK(stitch_delta_apply_tensor(dl, 0, c, n * es, &d), d);
      if (memcmp(c, b, n * es) != 0)
        FAIL_("%s at p=%g: apply differs", stitch_dtype_name(dts[di]), ps[pi]);
      /* Never much larger than the raw new bytes. */
      ASSERT_LE(len, n * es + 400);
      stitch_delta_free(dl);
      check_apply_file(pa, dbytes, len, pb);
      free(dbytes);
      free(a);
      free(b);
      free(c);
    }
}

static void test_layout_changes(void) {
  /* A tensor added, one dropped, one reshaped, one retyped, metadata changed,
   * plus an empty tensor and a scalar. */
  uint16_t w[256], w2[256];
  for (int i = 0; i < 256; i++)
    w[i] = w2[i] = (uint16_t)(0x3c00 + i);
  w2[7] ^= 1;
  float f[4] = {1, 2, 3, 4};
  uint8_t z[1];
  int32_t s = 5, s2 = 6;
  tspec a[] = {{"w", STITCH_DT_BF16, 2, {16, 16}, (uint8_t *)w},
               {"gone", STITCH_DT_F32, 1, {4}, (uint8_t *)f},
               {"shape", STITCH_DT_F32, 1, {4}, (uint8_t *)f},
               {"type", STITCH_DT_F32, 1, {4}, (uint8_t *)f},
               {"empty", STITCH_DT_F32, 2, {0, 3}, z},
               {"scalar", STITCH_DT_I32, 0, {0}, (uint8_t *)&s}};
  tspec b[] = {{"w", STITCH_DT_BF16, 2, {16, 16}, (uint8_t *)w2},
               {"shape", STITCH_DT_F32, 2, {2, 2}, (uint8_t *)f},
               {"type", STITCH_DT_I32, 1, {4}, (uint8_t *)f},
               {"added", STITCH_DT_F32, 1, {4}, (uint8_t *)f},
               {"empty", STITCH_DT_F32, 2, {0, 3}, z},
               {"scalar", STITCH_DT_I32, 0, {0}, (uint8_t *)&s2}};
  const char *pa = test_path("la.safetensors"), *pb = test_path("lb.safetensors");
  write_ckpt(pa, a, 6, "{\"step\":\"1\"}");
  write_ckpt(pb, b, 6, "{\"step\":\"2\",\"extra\":\"x\"}");
  size_t len;
  stitch_delta_stats st;
  uint8_t *dbytes = encode(pa, pb, 0, &len, &st);
  ASSERT_EQ(st.tensors, 6);
  int news = 0;
  for (size_t i = 0; i < st.tensors; i++)
    news += st.t[i].is_new;
  ASSERT_EQ(news, 3); /* shape, type, added */
  stitch_delta_stats_free(&st);
  check_apply_file(pa, dbytes, len, pb);
  free(dbytes);
}

static void test_base_mismatch_and_replay(void) {
  size_t n = 4096;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *c = malloc(2 * n);
  make_pair(STITCH_DT_BF16, n, 0.01, a, b);
  make_pair(STITCH_DT_BF16, n, 0.01, c, c); /* unrelated */
  tspec ta = {"w", STITCH_DT_BF16, 1, {n}, a}, tb = {"w", STITCH_DT_BF16, 1, {n}, b},
        tc = {"w", STITCH_DT_BF16, 1, {n}, c};
  const char *pa = test_path("ma.safetensors"), *pb = test_path("mb.safetensors"),
             *pc = test_path("mc.safetensors");
  write_ckpt(pa, &ta, 1, NULL);
  write_ckpt(pb, &tb, 1, NULL);
  write_ckpt(pc, &tc, 1, NULL);
  size_t len;
  uint8_t *dbytes = encode(pa, pb, 0, &len, NULL);
  stitch_diag d = {{0}};
  stitch_delta *dl;
  ASSERT_OK(stitch_delta_parse(dbytes, len, &dl, &d), d);
  const char *out = test_path("never.safetensors");
  stitch_st *sb = open_ckpt(pb), *sc = open_ckpt(pc);
  ASSERT_EQ(stitch_delta_apply_file(sb, dl, out, &d), STITCH_EBASE); /* replay */
  ASSERT_EQ(stitch_delta_apply_file(sc, dl, out, &d), STITCH_EBASE);
  struct stat sbuf;
  ASSERT(stat(out, &sbuf) != 0);
  stitch_st_free(sb);
  stitch_st_free(sc);
  stitch_delta_free(dl);
  free(dbytes);
  free(a);
  free(b);
  free(c);
}

static void test_deterministic(void) {
  size_t n = 50000;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n);
  make_pair(STITCH_DT_BF16, n, 0.02, a, b);
  tspec ta = {"w", STITCH_DT_BF16, 1, {n}, a}, tb = {"w", STITCH_DT_BF16, 1, {n}, b};
  const char *pa = test_path("da.safetensors"), *pb = test_path("db.safetensors");
  write_ckpt(pa, &ta, 1, NULL);
  write_ckpt(pb, &tb, 1, NULL);
  size_t l1, l2;
  uint8_t *d1 = encode(pa, pb, 0, &l1, NULL), *d2 = encode(pa, pb, 0, &l2, NULL);
  ASSERT_UEQ(l1, l2);
  ASSERT_MEM_EQ(d1, d2, l1);
  free(d1);
  free(d2);
  free(a);
  free(b);
}

/* Adam-like BF16 weights: Gaussian masters moving by ~lr per step. A
 * weight's chance of crossing a rounding boundary scales with 1/|w|, which
 * is what the coder's contexts exploit; the delta must come in under the
 * memoryless bound and far under the int32+value layout. */
static void test_size_vs_bound(void) {
  size_t n = 1 << 20;
  float *m = malloc(n * 4);
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    double u1 = test_rng_unit(&rng) + 1e-12, u2 = test_rng_unit(&rng);
    m[i] = (float)(0.02 * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
    a[i] = stitch_f32_to_bf16(m[i]);
    m[i] -= (float)(1.5e-6 * (test_rng_unit(&rng) < 0.5 ? -1 : 1));
    b[i] = stitch_f32_to_bf16(m[i]);
  }
  tspec ta = {"w", STITCH_DT_BF16, 2, {1024, 1024}, (uint8_t *)a},
        tb = {"w", STITCH_DT_BF16, 2, {1024, 1024}, (uint8_t *)b};
  const char *pa = test_path("sa.safetensors"), *pb = test_path("sb.safetensors");
  write_ckpt(pa, &ta, 1, NULL);
  write_ckpt(pb, &tb, 1, NULL);
  size_t len;
  stitch_delta_stats st;
  uint8_t *dbytes = encode(pa, pb, 0, &len, &st);
  double dens = (double)st.changed / (double)st.symbols;
  fprintf(stderr,
          "size_vs_bound: density %.4f, delta %zu B, bound %.0f B, int32+value "
          "%llu B\n",
          dens, len, st.bound_bits / 8, (unsigned long long)st.idxval_bytes);
  ASSERT(dens > 0.001 && dens < 0.1);
  ASSERT_DBL_LE((double)len, 1.10 * st.bound_bits / 8);
  ASSERT_LE(5 * len, st.idxval_bytes);
  stitch_delta_stats_free(&st);
  check_apply_file(pa, dbytes, len, pb);
  free(dbytes);
  free(m);
  free(a);
  free(b);
}

/* Many blocks on several threads give the same bytes as one thread, and a
 * damaged block is reported by name whichever thread met it. */
static void test_apply_all_threads(void) {
  size_t n = 40000;
  uint8_t *a = malloc(2 * n), *b = malloc(2 * n), *a2 = malloc(4 * n),
          *b2 = malloc(4 * n);
  make_pair(STITCH_DT_BF16, n, 0.03, a, b);
  make_pair(STITCH_DT_F32, n, 0.03, a2, b2);
  tspec ta[2] = {{"x", STITCH_DT_BF16, 1, {n}, a}, {"y", STITCH_DT_F32, 1, {n}, a2}};
  tspec tb[2] = {{"x", STITCH_DT_BF16, 1, {n}, b}, {"y", STITCH_DT_F32, 1, {n}, b2}};
  const char *pa = test_path("ta.safetensors"), *pb = test_path("tb.safetensors");
  write_ckpt(pa, ta, 2, NULL);
  write_ckpt(pb, tb, 2, NULL);
  size_t len;
  uint8_t *dbytes = encode(pa, pb, 8, &len, NULL); /* 2^8 symbols a block */
  stitch_diag d = {{0}};
  stitch_delta *dl;
  ASSERT_OK(stitch_delta_parse(dbytes, len, &dl, &d), d);
  ASSERT_GT(stitch_delta_tensor_at(dl, 0)->blocks, 100);
  for (unsigned threads = 1; threads <= 4; threads++) {
    uint8_t *c = malloc(2 * n), *c2 = malloc(4 * n);
    memcpy(c, a, 2 * n);
    memcpy(c2, a2, 4 * n);
    uint8_t *ptr[2] = {c, c2};
    uint64_t sz[2] = {2 * n, 4 * n};
    ASSERT_OK(stitch_delta_apply_all(dl, ptr, sz, threads, &d), d);
    ASSERT_MEM_EQ(c, b, 2 * n);
    ASSERT_MEM_EQ(c2, b2, 4 * n);
    sz[1] = 3;
    ASSERT_EQ(stitch_delta_apply_all(dl, ptr, sz, threads, &d), STITCH_EMISMATCH);
    free(c);
    free(c2);
  }
  stitch_delta_free(dl);
  /* Damage the last payload byte. Format 4 has one checksum over the
   * whole file, format 2 one over the payloads' checksums: the parse
   * refuses the file. */
  dbytes[len - 1] ^= 0x40;
  ASSERT_EQ(stitch_delta_parse(dbytes, len, &dl, &d), STITCH_ECHECKSUM);
  ASSERT(strstr(d.msg, "checksum mismatch") != NULL);
  free(dbytes);
  dbytes = encode_fmt(pa, pb, 8, 2, &len, NULL);
  dbytes[len - 1] ^= 0x40;
  ASSERT_EQ(stitch_delta_parse(dbytes, len, &dl, &d), STITCH_ECHECKSUM);
  ASSERT(strstr(d.msg, "payload checksum") != NULL);
  free(dbytes);
  /* Format 1 has one a block: the last block of 'y' fails its own. */
  dbytes = encode_fmt(pa, pb, 8, 1, &len, NULL);
  dbytes[len - 1] ^= 0x40;
  ASSERT_OK(stitch_delta_parse(dbytes, len, &dl, &d), d);
  uint8_t *c = malloc(2 * n), *c2 = malloc(4 * n);
  memcpy(c, a, 2 * n);
  memcpy(c2, a2, 4 * n);
  uint8_t *ptr[2] = {c, c2};
  uint64_t sz[2] = {2 * n, 4 * n};
  ASSERT_EQ(stitch_delta_apply_all(dl, ptr, sz, 3, &d), STITCH_ECHECKSUM);
  ASSERT(strstr(d.msg, "tensor 'y'") != NULL);
  stitch_delta_free(dl);
  free(c);
  free(c2);
  free(dbytes);
  free(a);
  free(b);
  free(a2);
  free(b2);
}

/* Tensors coded on several threads give the delta and the stats of one
 * thread, byte for byte, and progress still comes from the calling thread,
 * in order, up to the total. Eleven tensors: more than a wave of two
 * threads (8), of every kind: dense, sparse, unchanged, new, nibbles. */
typedef struct prog {
  pthread_t caller;
  uint64_t last, total, calls;
  int bad;
} prog;

static void on_encode_progress(void *arg, uint64_t done, uint64_t total) {
  prog *p = arg;
  p->bad |= !pthread_equal(pthread_self(), p->caller) || done < p->last ||
            done > total;
  p->last = done;
  p->total = total;
  p->calls++;
}

static void test_encode_threads(void) {
  enum { NT = 11 };
  static const stitch_dtype dts[NT] = {
      STITCH_DT_BF16, STITCH_DT_F32, STITCH_DT_BF16, STITCH_DT_F16,
      STITCH_DT_U8,   STITCH_DT_BF16, STITCH_DT_I32, STITCH_DT_F8_E4M3,
      STITCH_DT_BF16, STITCH_DT_F64, STITCH_DT_BF16};
  static const double dens[NT] = {0.03, 0.01, 0, 0.2, 0.02, 0.06,
                                  0.01, 0.05, 0.9, 0.02, 0.001};
  tspec ta[NT], tb[NT];
  uint8_t *bufs[2 * NT];
  char names[NT][8];
  for (int i = 0; i < NT; i++) {
    size_t n = 70000 + 5000 * (size_t)i, es = stitch_dtype_size(dts[i]);
    uint8_t *a = malloc(n * es), *b = malloc(n * es);
    make_pair(dts[i], n, dens[i], a, b);
    snprintf(names[i], sizeof(names[i]), "t%d", i);
    ta[i] = (tspec){names[i], dts[i], 1, {n}, a};
    tb[i] = (tspec){names[i], dts[i], 1, {n}, b};
    bufs[2 * i] = a;
    bufs[2 * i + 1] = b;
  }
  const char *pa = test_path("tha.safetensors"), *pb = test_path("thb.safetensors");
  write_ckpt(pa, ta, NT - 1, NULL); /* the last tensor is new */
  write_ckpt(pb, tb, NT, NULL);
  stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
  uint8_t *one = NULL;
  size_t one_len = 0;
  stitch_delta_stats one_st = {0};
  for (unsigned threads = 1; threads <= 9; threads += 2) {
    stitch_diag d = {{0}};
    prog pg = {.caller = pthread_self()};
    stitch_delta_opts o = {.threads = threads, .progress = on_encode_progress,
                           .progress_arg = &pg};
    uint8_t *buf;
    size_t len;
    stitch_delta_stats st = {0};
    ASSERT_OK(stitch_delta_encode(sa, sb, &o, &buf, &len, &st, &d), d);
    ASSERT(!pg.bad);
    ASSERT_UEQ(pg.calls, NT);
    ASSERT_UEQ(pg.last, pg.total);
    if (one == NULL) {
      one = buf;
      one_len = len;
      one_st = st;
      continue;
    }
    ASSERT_UEQ(len, one_len);
    ASSERT_MEM_EQ(buf, one, len);
    ASSERT_UEQ(st.changed, one_st.changed);
    ASSERT(st.bound_bits == one_st.bound_bits);
    ASSERT_UEQ(st.idxval_bytes, one_st.idxval_bytes);
    for (int i = 0; i < NT; i++)
      ASSERT_MEM_EQ(st.t[i].blocks_by_coding, one_st.t[i].blocks_by_coding,
                    sizeof(st.t[i].blocks_by_coding));
    stitch_delta_stats_free(&st);
    free(buf);
  }
  check_apply_file(pa, one, one_len, pb);
  stitch_delta_stats_free(&one_st);
  free(one);
  stitch_st_free(sa);
  stitch_st_free(sb);
  for (int i = 0; i < 2 * NT; i++)
    free(bufs[i]);
}

/* U8 tensors: packed E2M1 pairs whose changes are one nibble's one E2M1
 * step code as nibbles, 8-bit integers stepped by one code as bytes, in
 * both sparse modes (the fast mode decides from counts, the small one by
 * coding a sample both ways); each round-trips. */
static void test_nibble_choice(void) {
  size_t n = 1 << 18;
  uint8_t *a = malloc(n), *b = malloc(n);
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < n; i++)
      a[i] = (uint8_t)test_rng_next(&rng);
    memcpy(b, a, n);
    for (size_t i = 0; i < n; i++) {
      if (test_rng_unit(&rng) >= 0.02)
        continue;
      if (kind == 0) { /* one E2M1 step in one nibble, away from the ends */
        unsigned sh = (test_rng_next(&rng) & 1) * 4, x = (a[i] >> sh) & 7;
        unsigned y = x == 7 ? 6 : x == 0 ? 1 : (test_rng_next(&rng) & 1) ? x + 1 : x - 1;
        b[i] = (uint8_t)((a[i] & ~(7u << sh)) | (y << sh));
      } else {
        b[i] = (uint8_t)(a[i] + ((test_rng_next(&rng) & 1) ? 1 : 255));
      }
    }
    tspec ta = {"q", STITCH_DT_U8, 1, {n}, a}, tb = {"q", STITCH_DT_U8, 1, {n}, b};
    const char *pa = test_path("na.safetensors"), *pb = test_path("nb.safetensors");
    write_ckpt(pa, &ta, 1, NULL);
    write_ckpt(pb, &tb, 1, NULL);
    for (int mode = 0; mode < 2; mode++) {
      stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
      stitch_diag d = {{0}};
      stitch_delta_opts o = {.sparse_mode = mode ? STITCH_SPARSE_SMALL : STITCH_SPARSE_FAST};
      uint8_t *buf;
      size_t len;
      ASSERT_OK(stitch_delta_encode(sa, sb, &o, &buf, &len, NULL, &d), d);
      stitch_delta *dl;
      ASSERT_OK(stitch_delta_parse(buf, len, &dl, &d), d);
      ASSERT_EQ(stitch_delta_tensor_at(dl, 0)->sym_bits, (kind == 0 ? 4 : 8));
      stitch_delta_free(dl);
      check_apply_file(pa, buf, len, pb);
      free(buf);
      stitch_st_free(sa);
      stitch_st_free(sb);
    }
  }
  /* A mode the encoder does not know is refused. */
  stitch_st *sa = open_ckpt(test_path("na.safetensors"));
  stitch_diag d = {{0}};
  stitch_delta_opts o = {.sparse_mode = 7};
  uint8_t *buf = NULL;
  size_t len;
  ASSERT_ERR(stitch_delta_encode(sa, sa, &o, &buf, &len, NULL, &d), STITCH_EINVAL,
             d, "unknown sparse mode 7");
  ASSERT(buf == NULL);
  stitch_st_free(sa);
  free(a);
  free(b);
}

/* A dense block's byte planes end zstd blocks of their own: a plane of
 * 2^16 BF16 symbols is 64 KiB, and sharing one zstd block (one Huffman
 * table for its literals) with its neighbour costs 12% here. Random low
 * bytes and high bytes of 8 values: 93,910 B apart, 105,150 B mixed. */
static void test_planes_flush(void) {
  enum { N = 1 << 16 };
  uint16_t *w = malloc(2 * N);
  ASSERT(w != NULL);
  for (size_t i = 0; i < N; i++) {
    uint64_t r = test_rng_next(&rng);
    w[i] = (uint16_t)((0x3c + (r & 3) + (r & 4 ? 0x80 : 0)) << 8 |
                      (r >> 8 & 0xff));
  }
  tspec t = {"w", STITCH_DT_BF16, 1, {N}, (uint8_t *)w};
  const char *pa = test_path("pf_empty.safetensors"),
             *pb = test_path("pf.safetensors");
  write_ckpt(pa, &t, 0, NULL);
  write_ckpt(pb, &t, 1, NULL);
  size_t len;
  stitch_delta_stats st;
  uint8_t *dbytes = encode(pa, pb, 16, &len, &st);
  ASSERT_EQ(st.tensors, 1);
  ASSERT(st.t[0].is_new);
  stitch_delta_stats_free(&st);
  ASSERT(len < 97 * 1024);
  check_apply_file(pa, dbytes, len, pb);
  free(dbytes);
  free(w);
}

/* NT tensors named as a model's MLP projections, every third U8, the
 * rest BF16, tensor i of N0 + N0 / 4 * i elements; the new side changes
 * with DENSITY (none in every fourth from the second). BUFS gets the 2 NT
 * buffers to free. */
static void mlp_pairs(int nt, size_t n0, double density, tspec *ta, tspec *tb,
                      char (*names)[64], uint8_t **bufs) {
  for (int i = 0; i < nt; i++) {
    size_t n = n0 + n0 / 4 * (size_t)i;
    stitch_dtype dt = i % 3 == 0 ? STITCH_DT_U8 : STITCH_DT_BF16;
    size_t es = stitch_dtype_size(dt);
    bufs[2 * i] = malloc(n * es);
    bufs[2 * i + 1] = malloc(n * es);
    make_pair(dt, n, i % 4 == 1 ? 0.0 : density, bufs[2 * i],
              bufs[2 * i + 1]);
    snprintf(names[i], 64, "model.layers.%d.mlp.%s_proj.weight", i / 3,
             i % 3 == 0 ? "gate" : i % 3 == 1 ? "up" : "down");
    ta[i] = (tspec){names[i], dt, 1, {n}, bufs[2 * i]};
    tb[i] = (tspec){names[i], dt, 1, {n}, bufs[2 * i + 1]};
  }
}

/* Format 2 (columns, front-coded names, one payload checksum) and format
 * 1 decode to the same result; every block keeps the same checksum (what
 * chunks carry); format 2 is smaller where the index weighs; an unknown
 * format is refused by number; a bad name prefix, a payload that does not
 * match, and too many blocks for the index are refused at parse. */
static void test_formats(void) {
  enum { NT = 40 };
  tspec ta[NT], tb[NT];
  char names[NT][64];
  uint8_t *bufs[2 * NT];
  mlp_pairs(NT, 1024, 0.002, ta, tb, names, bufs);
  const char *pa = test_path("fa.safetensors"), *pb = test_path("fb.safetensors");
  write_ckpt(pa, ta, NT, "{\"format\": \"pt\"}");
  write_ckpt(pb, tb, NT, "{\"format\": \"pt\"}");
  size_t l1, l2;
  uint8_t *d1 = encode_fmt(pa, pb, 10, 1, &l1, NULL);
  uint8_t *d2 = encode_fmt(pa, pb, 10, 2, &l2, NULL);
  ASSERT_UEQ(le64(d1 + 8) & 0xffff, 1);
  ASSERT_UEQ(le64(d2 + 8) & 0xffff, 2);
  fprintf(stderr, "formats: %d tensors, format 1 %zu B, format 2 %zu B\n", NT,
          l1, l2);
  ASSERT_LE(l2 + 100, l1);
  check_apply_file(pa, d1, l1, pb);
  check_apply_file(pa, d2, l2, pb);
  stitch_diag d = {{0}};
  stitch_delta *h1, *h2;
  ASSERT_OK(stitch_delta_parse(d1, l1, &h1, &d), d);
  ASSERT_OK(stitch_delta_parse(d2, l2, &h2, &d), d);
  ASSERT_UEQ(stitch_delta_count(h1), stitch_delta_count(h2));
  ASSERT_STR_EQ(stitch_delta_metadata(h1), stitch_delta_metadata(h2));
  for (size_t i = 0; i < stitch_delta_count(h1); i++) {
    const delta_entry *e1 = &h1->t[i], *e2 = &h2->t[i];
    ASSERT_STR_EQ(e1->pub.name, e2->pub.name);
    ASSERT_EQ(e1->pub.dtype, e2->pub.dtype);
    ASSERT_UEQ(e1->pub.changed, e2->pub.changed);
    ASSERT_EQ(e1->flags, e2->flags);
    ASSERT_UEQ(e1->pub.blocks, e2->pub.blocks);
    for (uint32_t b = 0; b < e1->pub.blocks; b++) {
      ASSERT_EQ(e1->coding[b], e2->coding[b]);
      ASSERT_UEQ(e1->payload_len[b], e2->payload_len[b]);
      ASSERT_UEQ(e1->checksum[b], e2->checksum[b]);
    }
  }
  stitch_delta_bytes by1, by2;
  stitch_delta_bytes_of(h1, &by1, NULL);
  stitch_delta_bytes_of(h2, &by2, NULL);
  ASSERT_UEQ(by1.format, 1);
  ASSERT_UEQ(by2.format, 2);
  ASSERT_GT(by1.tensors.checksums, 0);
  ASSERT_UEQ(by2.tensors.checksums, 0);
  ASSERT_UEQ(by1.tensors.payload, by2.tensors.payload);
  stitch_delta_free(h1);
  stitch_delta_free(h2);

  /* An unknown format: refused by number, before anything else. */
  uint8_t *x = malloc(l2);
  memcpy(x, d2, l2);
  x[8] = STITCH_DELTA_FORMAT + 1;
  ASSERT(fz_delta_fix_sums(x, l2));
  ASSERT_EQ(stitch_delta_parse(x, l2, &h2, &d), STITCH_EVERSION);
  ASSERT(strstr(d.msg, "format 5") != NULL);
  /* Format 4 in the 48-byte header: format 4 has its own. */
  x[8] = 4;
  ASSERT(fz_delta_fix_sums(x, l2));
  ASSERT_EQ(stitch_delta_parse(x, l2, &h2, &d), STITCH_EFORMAT);
  free(x);
  /* Format 2, index raw: damage its names and counts (sums fixed, so the
   * index parser meets them). */
  size_t rl;
  uint8_t *raw = fz_delta_raw_index(d2, l2, &rl);
  ASSERT(raw != NULL);
  ASSERT_OK(stitch_delta_parse(raw, rl, &h2, &d), d);
  stitch_delta_free(h2);
  /* The second name shares its first 19 bytes with the first: make it
   * claim more than the first name holds. */
  const char *first = names[0];
  uint8_t *p = memmem(raw + DELTA_HEADER_BYTES, rl - DELTA_HEADER_BYTES,
                      first, strlen(first));
  ASSERT(p != NULL);
  p += strlen(first);
  ASSERT_EQ(p[0], 19); /* "model.layers.0.mlp." */
  x = malloc(rl);
  memcpy(x, raw, rl);
  x[p - raw] = (uint8_t)(strlen(first) + 1);
  ASSERT(fz_delta_fix_sums(x, rl));
  ASSERT_EQ(stitch_delta_parse(x, rl, &h2, &d), STITCH_EFORMAT);
  ASSERT(strstr(d.msg, "bad tensor name") != NULL);
  /* The payloads' checksum, the 8 bytes after the digests. */
  memcpy(x, raw, rl);
  x[DELTA_HEADER_BYTES + 64] ^= 1;
  ASSERT(fz_delta_fix_sums(x, rl));
  ASSERT_EQ(stitch_delta_parse(x, rl, &h2, &d), STITCH_ECHECKSUM);
  /* Every shape claims more blocks than the codings column holds: each
   * alone would fit what is left, all together do not. */
  memcpy(x, raw, rl);
  x[DELTA_HEADER_BYTES + 64 + 8] = 8; /* block_log2: 2^8 symbols a block */
  ASSERT(fz_delta_fix_sums(x, rl));
  ASSERT_EQ(stitch_delta_parse(x, rl, &h2, &d), STITCH_ETRUNCATED);
  free(x);
  free(raw);
  free(d1);
  free(d2);
  for (int i = 0; i < 2 * NT; i++)
    free(bufs[i]);
}

/* Format 3 with the base's tensors (proto/delta.md "Index, format 3"):
 * D encoded with table_as_base from PA to PB, whose metadata are MA and
 * MB. It parses only with the base, to what format 2 lists, and applies
 * to PB's bytes and metadata; a base of another tensor count is refused. */
static void check_format3(const char *pa, const char *pb, const char *ma,
                          const char *mb, const uint8_t *d3, size_t l3,
                          const uint8_t *d2, size_t l2) {
  stitch_diag d = {{0}};
  stitch_delta *h2, *h3;
  ASSERT_UEQ(le64(d3 + 8) & 0xffff, 3);
  ASSERT_EQ(stitch_delta_parse(d3, l3, &h3, &d), STITCH_EINVAL);
  ASSERT(strstr(d.msg, "base") != NULL);
  stitch_st *sa = open_ckpt(pa);
  ASSERT_OK(stitch_delta_parse_ex(d3, l3, sa, &h3, &d), d);
  ASSERT_OK(stitch_delta_parse(d2, l2, &h2, &d), d);
  if (mb == NULL)
    ASSERT(stitch_delta_metadata(h3) == NULL);
  else
    ASSERT_STR_EQ(stitch_delta_metadata(h3), stitch_delta_metadata(h2));
  (void)ma;
  ASSERT_UEQ(stitch_delta_count(h3), stitch_delta_count(h2));
  for (size_t i = 0; i < stitch_delta_count(h3); i++) {
    const stitch_delta_tensor *a = stitch_delta_tensor_at(h3, i),
                              *b = stitch_delta_tensor_at(h2, i);
    ASSERT_STR_EQ(a->name, b->name);
    ASSERT_EQ(a->dtype, b->dtype);
    ASSERT_EQ(a->ndim, b->ndim);
    ASSERT_UEQ(a->shape[0], b->shape[0]);
    ASSERT_UEQ(a->symbols, b->symbols);
    ASSERT_UEQ(a->changed, b->changed);
    ASSERT_UEQ(a->encoded, b->encoded);
    ASSERT_UEQ(a->blocks, b->blocks);
  }
  stitch_delta_bytes by3, by2;
  stitch_delta_bytes_of(h3, &by3, NULL);
  stitch_delta_bytes_of(h2, &by2, NULL);
  ASSERT_UEQ(by3.format, 3);
  ASSERT_UEQ(by3.file, l3);
  ASSERT_UEQ(by3.tensors.payload, by2.tensors.payload);
  ASSERT_UEQ(by3.tensors.table, stitch_delta_count(h3)); /* a flag byte each */
  stitch_delta_free(h2);
  stitch_delta_free(h3);
  stitch_st_free(sa);
  check_apply_file(pa, d3, l3, pb);
  stitch_st *so = open_ckpt(test_path("applied.safetensors")),
            *sb = open_ckpt(pb);
  if (mb == NULL)
    ASSERT(stitch_st_metadata(so) == NULL);
  else
    ASSERT_STR_EQ(stitch_st_metadata(so), stitch_st_metadata(sb));
  stitch_st_free(so);
  stitch_st_free(sb);
}

/* Format 3: the index names the base's tensors instead of listing them
 * when the result has the base's table, and edits the base's metadata;
 * smaller than format 2, the same result; deterministic; a listed table
 * stays parseable alone; damaged edits, flags and table kinds are
 * refused at parse, as is a base with another table. */
static void test_format3(void) {
  enum { NT = 30 };
  tspec ta[NT], tb[NT];
  char names[NT][64];
  uint8_t *bufs[2 * NT];
  mlp_pairs(NT, 512, 0.001, ta, tb, names, bufs);
  /* Metadata pairs: a step number edited, added, dropped, none, all new. */
  static const char *const metas[][2] = {
      {"{\"step\": \"00000001\", \"view\": \"nvfp4\"}",
       "{\"step\": \"00000002\", \"view\": \"nvfp4\"}"},
      {NULL, "{\"a\": \"b\"}"},
      {"{\"a\": \"b\"}", NULL},
      {NULL, NULL},
      {"{\"aa\": \"aa\"}", "{\"aa\": \"aaaa\", \"aa2\": \"aa\"}"},
  };
  char pa[256], pb[256]; /* test_path's slots are reused */
  snprintf(pa, sizeof(pa), "%s", test_path("f3a.safetensors"));
  snprintf(pb, sizeof(pb), "%s", test_path("f3b.safetensors"));
  stitch_diag d = {{0}};
  for (size_t m = 0; m < sizeof(metas) / sizeof(metas[0]); m++) {
    write_ckpt(pa, ta, NT, metas[m][0]);
    write_ckpt(pb, tb, NT, metas[m][1]);
    stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
    stitch_delta_opts o = {.block_log2 = 10, .format = 3, .table_as_base = 1};
    uint8_t *d3, *d3b, *d2;
    size_t l3, l3b, l2;
    ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d3, &l3, NULL, &d), d);
    ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d3b, &l3b, NULL, &d), d);
    ASSERT_UEQ(l3, l3b);
    ASSERT(memcmp(d3, d3b, l3) == 0);
    o.format = 2;
    ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d2, &l2, NULL, &d), d);
    fprintf(stderr, "format3: %d tensors, metadata %zu: format 2 %zu B, "
            "format 3 %zu B\n", NT, m, l2, l3);
    ASSERT_LE(l3 + 100, l2);
    check_format3(pa, pb, metas[m][0], metas[m][1], d3, l3, d2, l2);
    free(d3b);
    if (m == 0) {
      /* Damage the raw index (sums fixed): after the digests, the
       * payloads' checksum and block_log2 comes the table kind, then
       * the metadata edit (shared start, shared end, mid). */
      size_t rl;
      uint8_t *raw = fz_delta_raw_index(d3, l3, &rl), *x = malloc(rl);
      stitch_delta *h;
      ASSERT(raw != NULL && x != NULL);
      size_t kind = DELTA_HEADER_BYTES + 64 + 8 + 1;
      ASSERT_EQ(raw[kind], DELTA_TABLE_BASE);
      memcpy(x, raw, rl);
      x[kind] = 2;
      ASSERT(fz_delta_fix_sums(x, rl));
      ASSERT_EQ(stitch_delta_parse_ex(x, rl, sa, &h, &d), STITCH_EFORMAT);
      ASSERT(strstr(d.msg, "table kind") != NULL);
      /* The edit claims more of the base's metadata than it has. */
      memcpy(x, raw, rl);
      ASSERT_EQ(x[kind + 1], 16); /* '{"step":"0000000', stored compact */
      x[kind + 1] = 0x7f;
      ASSERT(fz_delta_fix_sums(x, rl));
      ASSERT_EQ(stitch_delta_parse_ex(x, rl, sa, &h, &d), STITCH_EFORMAT);
      ASSERT(strstr(d.msg, "metadata edit") != NULL);
      /* An edit that leaves no JSON object. */
      memcpy(x, raw, rl);
      x[kind + 1] = 1;
      ASSERT(fz_delta_fix_sums(x, rl));
      ASSERT_EQ(stitch_delta_parse_ex(x, rl, sa, &h, &d), STITCH_EFORMAT);
      /* A NEW flag: the base's tensors are never new. */
      memcpy(x, raw, rl);
      size_t flags = kind + 1 + 3 + x[kind + 3] + 1;
      ASSERT_LE(x[flags], DELTA_TF_NIBBLE); /* tensor 0's flags */
      x[flags] |= DELTA_TF_NEW;
      ASSERT(fz_delta_fix_sums(x, rl));
      ASSERT_EQ(stitch_delta_parse_ex(x, rl, sa, &h, &d), STITCH_EFORMAT);
      ASSERT(strstr(d.msg, "bad flags") != NULL);
      /* A base with another table: one tensor fewer. */
      const char *pc = test_path("f3c.safetensors");
      write_ckpt(pc, ta, NT - 1, metas[m][0]);
      stitch_st *sc = open_ckpt(pc);
      ASSERT_EQ(stitch_delta_parse_ex(raw, rl, sc, &h, &d), STITCH_EMISMATCH);
      ASSERT(strstr(d.msg, "tensors") != NULL);
      stitch_st_free(sc);
      free(x);
      free(raw);
    }
    free(d3);
    free(d2);
    stitch_st_free(sa);
    stitch_st_free(sb);
  }
  /* A result whose table is not the base's is listed, and parses alone. */
  write_ckpt(pa, ta, NT, NULL);
  write_ckpt(pb, tb, NT - 1, NULL);
  stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
  stitch_delta_opts o = {.block_log2 = 10, .format = 3, .table_as_base = 1};
  uint8_t *d3;
  size_t l3;
  stitch_delta *h;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d3, &l3, NULL, &d), d);
  ASSERT_UEQ(le64(d3 + 8) & 0xffff, 3);
  ASSERT_OK(stitch_delta_parse(d3, l3, &h, &d), d);
  ASSERT_UEQ(stitch_delta_count(h), NT - 1);
  stitch_delta_free(h);
  check_apply_file(pa, d3, l3, pb);
  free(d3);
  stitch_st_free(sa);
  stitch_st_free(sb);
  for (int i = 0; i < 2 * NT; i++)
    free(bufs[i]);
}

/* Applies DELTA (LEN bytes) to the checkpoint at BASE into a fresh path:
 * it must fail with WANT, the message one line holding WHY, and leave
 * nothing behind. */
static void check_refused(const char *base, const uint8_t *delta, size_t len,
                          int want, const char *why) {
  stitch_diag d = {{0}};
  stitch_st *sb = open_ckpt(base);
  stitch_delta *h;
  const char *out = test_path("refused.safetensors");
  unlink(out);
  ASSERT_OK(stitch_delta_parse_ex(delta, len, sb, &h, &d), d);
  ASSERT_EQ(stitch_delta_apply_file(sb, h, out, &d), want);
  ASSERT(strstr(d.msg, why) != NULL);
  ASSERT(strchr(d.msg, '\n') == NULL);
  struct stat st;
  ASSERT(stat(out, &st) != 0); /* nothing written */
  stitch_delta_free(h);
  stitch_st_free(sb);
}

/* Parsing X (LEN bytes) with BASE fails with WANT, on one line naming
 * WHY. */
static void check_bad(const uint8_t *x, size_t len, const stitch_st *base,
                      int want, const char *why) {
  stitch_diag d = {{0}};
  stitch_delta *h = NULL;
  int rc = stitch_delta_parse_ex(x, len, base, &h, &d);
  if (rc != want || strstr(d.msg, why) == NULL)
    fprintf(stderr, "format4: got %d '%s', want %d '%s'\n", rc, d.msg, want,
            why);
  ASSERT_EQ(rc, want);
  ASSERT(h == NULL);
  ASSERT(strstr(d.msg, why) != NULL);
  ASSERT(strchr(d.msg, '\n') == NULL);
}

/* Format 4 (proto/delta.md "File layout, format 4"): a compact header
 * with one checksum over the whole file, and with the base's tensors the
 * base named by an 8-byte prefix of its digest. The same payloads as
 * format 3, about 65 bytes smaller (32 of header, 24 of the base's
 * digest, the payloads' checksum and the table byte); bit for bit;
 * deterministic; a
 * wrong base is refused with nothing written, by the prefix or, when
 * the prefix is the base's, by the result's full digest; a damaged or
 * truncated file, an unknown format or flag, and an index frame whose
 * size is missing or implausible are refused on one line. */
static void test_format4(void) {
  enum { NT = 30 };
  tspec ta[NT], tb[NT];
  char names[NT][64];
  uint8_t *bufs[2 * NT];
  mlp_pairs(NT, 512, 0.001, ta, tb, names, bufs);
  char pa[256], pb[256];
  snprintf(pa, sizeof(pa), "%s", test_path("f4a.safetensors"));
  snprintf(pb, sizeof(pb), "%s", test_path("f4b.safetensors"));
  write_ckpt(pa, ta, NT, "{\"step\": \"00000001\"}");
  write_ckpt(pb, tb, NT, "{\"step\": \"00000002\"}");
  stitch_st *sa = open_ckpt(pa), *sb = open_ckpt(pb);
  stitch_diag d = {{0}};
  stitch_delta_opts o = {.block_log2 = 10, .table_as_base = 1};
  uint8_t *d4, *d4b, *d3;
  size_t l4, l4b, l3;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d4, &l4, NULL, &d), d);
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d4b, &l4b, NULL, &d), d);
  ASSERT_UEQ(l4, l4b);
  ASSERT(memcmp(d4, d4b, l4) == 0);
  free(d4b);
  o.format = 3;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &d3, &l3, NULL, &d), d);
  fprintf(stderr, "format4: %d tensors: format 3 %zu B, format 4 %zu B\n", NT,
          l3, l4);
  ASSERT(memcmp(d4, DELTA4_MAGIC, DELTA4_MAGIC_BYTES) == 0);
  ASSERT_EQ(d4[4], 4);
  ASSERT_EQ(d4[5], DELTA4_F_ZSTD | DELTA4_F_TABLE);
  /* The header's 24+ bytes, the base digest's 24, the payload checksum's 8
   * and the table byte; zstd may take a few back. */
  ASSERT_LE(l4 + 50, l3);
  stitch_delta *h4, *h3;
  ASSERT_EQ(stitch_delta_parse(d4, l4, &h4, &d), STITCH_EINVAL);
  ASSERT(strstr(d.msg, "base") != NULL);
  ASSERT_OK(stitch_delta_parse_ex(d4, l4, sa, &h4, &d), d);
  ASSERT_OK(stitch_delta_parse_ex(d3, l3, sa, &h3, &d), d);
  stitch_digest bdg, rdg;
  ASSERT_OK(stitch_view_digest(sa, &bdg, NULL), d);
  ASSERT_OK(stitch_view_digest(sb, &rdg, NULL), d);
  ASSERT_UEQ(stitch_delta_base_digest_len(h4), DELTA4_BASE_PREFIX);
  ASSERT_UEQ(stitch_delta_base_digest_len(h3), 32);
  ASSERT(memcmp(stitch_delta_base_digest(h4)->b, bdg.b, 8) == 0);
  ASSERT(memcmp(stitch_delta_result_digest(h4)->b, rdg.b, 32) == 0);
  ASSERT_STR_EQ(stitch_delta_metadata(h4), stitch_delta_metadata(h3));
  stitch_delta_bytes by4, by3;
  stitch_delta_bytes_of(h4, &by4, NULL);
  stitch_delta_bytes_of(h3, &by3, NULL);
  ASSERT_UEQ(by4.format, 4);
  ASSERT_UEQ(by4.file, l4);
  ASSERT(by4.header >= DELTA4_HEADER_MIN && by4.header <= 17);
  ASSERT_UEQ(by4.index_head + 32 + 1, by3.index_head); /* 24 + 8 + table */
  ASSERT_UEQ(by4.tensors.payload, by3.tensors.payload);
  ASSERT_UEQ(by4.tensors.table, NT);
  ASSERT_UEQ(by4.tensors.checksums, 0);
  for (size_t i = 0; i < NT; i++) {
    const delta_entry *e4 = &h4->t[i], *e3 = &h3->t[i];
    for (uint32_t b = 0; b < e4->pub.blocks; b++) /* what chunks carry */
      ASSERT_UEQ(e4->checksum[b], e3->checksum[b]);
  }
  stitch_delta_free(h3);
  stitch_delta_free(h4);
  check_apply_file(pa, d4, l4, pb); /* bit for bit, metadata too */

  /* A wrong base with the same table: its digest's prefix differs. */
  check_refused(pb, d4, l4, STITCH_EBASE, "does not apply to this base");
  /* The same, its prefix written into the delta: only the result's full
   * digest tells, and nothing is written. */
  size_t rl;
  uint8_t *raw = fz_delta_raw_index(d4, l4, &rl);
  size_t at, blen;
  int isr;
  ASSERT(raw != NULL && fz_delta_index_at(raw, rl, &at, &isr, &blen));
  ASSERT(isr && blen == DELTA4_BASE_PREFIX);
  ASSERT(memcmp(raw + at, bdg.b, 8) == 0);
  /* The wrong base: the base with a byte changed in tensor 1, which the
   * delta leaves alone (density 0: every block SAME), so every block
   * decodes and only the result's digest differs. */
  char pc[256];
  snprintf(pc, sizeof(pc), "%s", test_path("f4c.safetensors"));
  bufs[2][5] ^= 0x01;
  write_ckpt(pc, ta, NT, "{\"step\": \"00000001\"}");
  bufs[2][5] ^= 0x01;
  stitch_st *sc = open_ckpt(pc);
  stitch_digest cdg;
  ASSERT_OK(stitch_view_digest(sc, &cdg, NULL), d);
  stitch_st_free(sc);
  uint8_t *x = malloc(rl + 16);
  ASSERT(x != NULL);
  memcpy(x, raw, rl);
  memcpy(x + at, cdg.b, 8);
  ASSERT(fz_delta_fix_sums(x, rl));
  check_refused(pc, x, rl, STITCH_EDIGEST, "result digest mismatch");
  check_refused(pc, raw, rl, STITCH_EBASE, "does not apply to this base");
  check_apply_file(pa, raw, rl, pb); /* the raw index applies as it was */

  /* Damage, one line each. The checksum first: any byte. */
  memcpy(x, raw, rl);
  x[at + 40] ^= 0x20;
  check_bad(x, rl, sa, STITCH_ECHECKSUM, "checksum mismatch");
  memcpy(x, raw, rl);
  x[rl - 1] ^= 1; /* a payload */
  check_bad(x, rl, sa, STITCH_ECHECKSUM, "checksum mismatch");
  check_bad(raw, rl - 1, sa, STITCH_ECHECKSUM, "truncated");
  check_bad(raw, at + 3, sa, STITCH_ETRUNCATED, "runs past the file");
  for (size_t n = 0; n < at; n++)
    check_bad(raw, n, sa, STITCH_ETRUNCATED, "shorter than its header");
  memcpy(x, raw, rl);
  x[1] = 'X';
  check_bad(x, rl, sa, STITCH_EFORMAT, "bad magic");
  /* Past a forged checksum: the format, the flags, the frame. */
  memcpy(x, raw, rl);
  x[4] = 5;
  ASSERT(fz_delta_fix_sums(x, rl));
  check_bad(x, rl, sa, STITCH_EVERSION, "format 5, this build reads formats 1 to 4");
  memcpy(x, raw, rl);
  x[5] |= 0x10;
  ASSERT(fz_delta_fix_sums(x, rl));
  check_bad(x, rl, sa, STITCH_EVERSION, "unknown flags");
  memcpy(x, raw, rl);
  x[5] |= DELTA4_F_ZSTD; /* a raw index read as a zstd frame */
  ASSERT(fz_delta_fix_sums(x, rl));
  check_bad(x, rl, sa, STITCH_EFORMAT, "index frame");
  memcpy(x, raw, rl);
  x[6] = 0x80 | x[6]; /* the index length runs on into the checksum */
  x[7] = 0x7f;
  ASSERT(fz_delta_fix_sums(x, rl));
  check_bad(x, rl, sa, STITCH_ETRUNCATED, "runs past the file");
  /* A zstd frame that claims far more than it holds: refused before the
   * index is allocated. */
  {
    size_t zsrc = 1u << 20, zcap = ZSTD_compressBound(zsrc);
    uint8_t *zeros = calloc(zsrc, 1), *f = malloc(DELTA4_HEADER_MAX + zcap);
    ASSERT(zeros != NULL && f != NULL);
    size_t zn = ZSTD_compress(f + 12, zcap, zeros, zsrc, 19);
    ASSERT(!ZSTD_isError(zn) && zn < 128);
    ASSERT(memcmp(f + 12, DELTA4_ZSTD_MAGIC, 4) == 0);
    zn -= 4; /* format 4 leaves the magic out: the frame is at f + 16 */
    memcpy(f, DELTA4_MAGIC, 4);
    f[4] = 4;
    f[5] = DELTA4_F_ZSTD;
    f[6] = 0x80 | (uint8_t)(zn & 0x7f); /* two bytes: header of 16 */
    f[7] = (uint8_t)(zn >> 7);
    fz_delta4_fix_sum(f, 16 + zn, 16);
    check_bad(f, 16 + zn, NULL, STITCH_ELIMIT, "compression ratio");
    free(zeros);
    free(f);
  }
  /* Format 4 with a listed table: parses alone, names the base in full,
   * no table flag. */
  o.format = 0;
  o.table_as_base = 0;
  uint8_t *dl4;
  size_t ll4;
  ASSERT_OK(stitch_delta_encode(sa, sb, &o, &dl4, &ll4, NULL, &d), d);
  ASSERT_EQ(dl4[5] & DELTA4_F_TABLE, 0);
  stitch_delta *hl;
  ASSERT_OK(stitch_delta_parse(dl4, ll4, &hl, &d), d);
  ASSERT_UEQ(stitch_delta_base_digest_len(hl), 32);
  ASSERT(memcmp(stitch_delta_base_digest(hl)->b, bdg.b, 32) == 0);
  stitch_delta_free(hl);
  check_apply_file(pa, dl4, ll4, pb);
  check_refused(pb, dl4, ll4, STITCH_EBASE, "does not apply to this base");
  free(dl4);
  free(x);
  free(raw);
  free(d3);
  free(d4);
  stitch_st_free(sa);
  stitch_st_free(sb);
  for (int i = 0; i < 2 * NT; i++)
    free(bufs[i]);
}

int main(void) {
  rng = test_rng_seeded("test_delta", 20261130);
  test_dtypes();
  test_layout_changes();
  test_base_mismatch_and_replay();
  test_deterministic();
  test_size_vs_bound();
  test_apply_all_threads();
  test_encode_threads();
  test_nibble_choice();
  test_planes_flush();
  test_formats();
  test_format3();
  test_format4();
  puts("test_delta: ok");
  return 0;
}
