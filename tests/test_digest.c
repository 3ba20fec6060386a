/* test_digest.c: tensor digests of a base with a sparse patch laid over it
 * (stitch_tensor_digest_patched) equal the digest of a patched copy, for
 * every element width, empty lists, changes at the first and last element
 * and at leaf edges, one or many tensors on one or many threads; the base
 * is never written; unsorted, repeated and out-of-range lists are refused
 * with a message naming the change. */
#include "test.h"

#include "stitch.h"

#define LEAF STITCH_DIGEST_LEAF

typedef struct patched {
  stitch_tensor t;
  stitch_sparse sp;
  uint8_t *base, *copy; /* copy: base with the changes written in */
  uint64_t *pos;
  uint8_t *val;
} patched;

static stitch_dtype dtype_of(unsigned w) {
  switch (w) {
  case 1: return STITCH_DT_U8;
  case 2: return STITCH_DT_BF16;
  case 4: return STITCH_DT_F32;
  default: return STITCH_DT_F64;
  }
}

/* A tensor of NUMEL elements of W bytes and about DENSITY of them changed,
 * always the first and the last when EDGES, and the elements either side
 * of every leaf edge. */
static void make(patched *p, test_rng *r, unsigned w, uint64_t numel,
                 double density, int edges) {
  memset(p, 0, sizeof(*p));
  uint64_t nb = numel * w;
  p->base = malloc(nb ? nb : 1);
  p->copy = malloc(nb ? nb : 1);
  p->pos = malloc((numel ? numel : 1) * sizeof(*p->pos));
  p->val = malloc(nb ? nb : 1);
  ASSERT(p->base && p->copy && p->pos && p->val);
  for (uint64_t i = 0; i < nb; i++)
    p->base[i] = (uint8_t)test_rng_next(r);
  memcpy(p->copy, p->base, nb);
  uint64_t n = 0, per_leaf = LEAF / w;
  for (uint64_t e = 0; e < numel; e++) {
    int pick = test_rng_unit(r) < density;
    if (edges && (e == 0 || e == numel - 1 || e % per_leaf == 0 ||
                  e % per_leaf == per_leaf - 1))
      pick = 1;
    if (!pick)
      continue;
    p->pos[n] = e;
    for (unsigned b = 0; b < w; b++) /* a value that differs */
      p->val[n * w + b] = (uint8_t)(p->base[e * w + b] ^ (1 + b));
    memcpy(p->copy + e * w, p->val + n * w, w);
    n++;
  }
  p->t.dtype = dtype_of(w);
  p->t.ndim = 1;
  p->t.shape[0] = numel;
  p->t.numel = numel;
  p->t.nbytes = nb;
  p->t.data = p->base;
  p->sp = (stitch_sparse){n, w, p->pos, p->val};
}

static void drop(patched *p) {
  free(p->base);
  free(p->copy);
  free(p->pos);
  free(p->val);
}

static void want_digest(const patched *p, stitch_digest *out) {
  ASSERT_EQ(stitch_tensor_digest(p->t.dtype, p->t.ndim, p->t.shape, p->copy,
                                 p->t.nbytes, out),
            0);
}

static void test_one(test_rng *r, unsigned w, uint64_t numel, double density,
                     int edges) {
  patched p;
  make(&p, r, w, numel, density, edges);
  uint8_t *before = malloc(p.t.nbytes ? p.t.nbytes : 1);
  ASSERT(before != NULL);
  memcpy(before, p.base, p.t.nbytes);
  stitch_digest got, want;
  stitch_diag d = {{0}};
  want_digest(&p, &want);
  ASSERT_OK(stitch_tensor_digest_patched(&p.t, &p.sp, &got, &d), d);
  if (memcmp(got.b, want.b, 32) != 0)
    FAIL_("width %u, %" PRIu64 " elements, %" PRIu64
          " changes: the patched digest differs from the patched copy's",
          w, numel, p.sp.n);
  ASSERT_MEM_EQ(before, p.base, p.t.nbytes); /* read only */
  free(before);
  drop(&p);
}

static void test_widths(test_rng *r) {
  static const unsigned ws[] = {1, 2, 4, 8};
  for (size_t k = 0; k < 4; k++) {
    unsigned w = ws[k];
    test_one(r, w, 1, 1.0, 1);                   /* one element, changed */
    test_one(r, w, 1000, 0.01, 1);               /* within one leaf */
    test_one(r, w, 1000, 0.0, 0);                /* nothing changes */
    test_one(r, w, (3 * LEAF + 123) / w, 0.001, 1); /* leaves and a tail */
    test_one(r, w, (2 * LEAF) / w, 0.5, 0);      /* dense, whole leaves */
    test_one(r, w, (2 * LEAF) / w, 0.0, 1);      /* only the edges */
  }
}

/* An empty list is the plain digest, with or without arrays; so is a
 * tensor of no bytes. */
static void test_empty(void) {
  uint8_t data[64];
  for (int i = 0; i < 64; i++)
    data[i] = (uint8_t)(i * 7);
  uint64_t shape[2] = {4, 8};
  stitch_tensor t = {NULL, STITCH_DT_BF16, 2, {4, 8}, 32, 64, 0, data};
  stitch_digest plain, got;
  stitch_diag d = {{0}};
  ASSERT_EQ(stitch_tensor_digest(STITCH_DT_BF16, 2, shape, data, 64, &plain),
            0);
  stitch_sparse none = {0, 0, NULL, NULL};
  ASSERT_OK(stitch_tensor_digest_patched(&t, &none, &got, &d), d);
  ASSERT_MEM_EQ(got.b, plain.b, 32);
  uint64_t pos[1] = {3};
  uint8_t val[2] = {1, 2};
  stitch_sparse unused = {0, 2, pos, val};
  ASSERT_OK(stitch_tensor_digest_patched(&t, &unused, &got, &d), d);
  ASSERT_MEM_EQ(got.b, plain.b, 32);
  stitch_tensor z = {NULL, STITCH_DT_F32, 1, {0}, 0, 0, 0, NULL};
  ASSERT_EQ(stitch_tensor_digest(STITCH_DT_F32, 1, z.shape, NULL, 0, &plain),
            0);
  ASSERT_OK(stitch_tensor_digest_patched(&z, &none, &got, &d), d);
  ASSERT_MEM_EQ(got.b, plain.b, 32);
}

/* Many tensors at once, on 1 and on 4 threads, some with no list. */
static void test_many(test_rng *r) {
  enum { N = 6 };
  patched p[N];
  static const unsigned ws[N] = {2, 1, 4, 8, 2, 2};
  for (int i = 0; i < N; i++)
    make(&p[i], r, ws[i], (LEAF + 4096 * (uint64_t)i) / ws[i] + 1, 0.003,
         i % 2);
  p[4].sp.n = 0; /* unpatched: its own digest */
  memcpy(p[4].copy, p[4].base, p[4].t.nbytes);
  const stitch_tensor *ts[N];
  stitch_sparse sp[N];
  stitch_digest want[N], got[N];
  for (int i = 0; i < N; i++) {
    ts[i] = &p[i].t;
    sp[i] = p[i].sp;
    want_digest(&p[i], &want[i]);
  }
  for (unsigned threads = 1; threads <= 4; threads += 3) {
    stitch_diag d = {{0}};
    memset(got, 0, sizeof(got));
    ASSERT_OK(stitch_tensor_digests_patched(N, ts, sp, threads, got, &d), d);
    for (int i = 0; i < N; i++)
      ASSERT_MEM_EQ(got[i].b, want[i].b, 32);
  }
  for (int i = 0; i < N; i++)
    drop(&p[i]);
}

static void test_refused(void) {
  uint8_t data[64] = {0};
  stitch_tensor t = {"w", STITCH_DT_BF16, 1, {32}, 32, 64, 0, data};
  stitch_digest out;
  stitch_diag d = {{0}};
  uint8_t val[8] = {0};
  uint64_t unsorted[3] = {1, 5, 4};
  stitch_sparse sp = {3, 2, unsorted, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&t, &sp, &out, &d), STITCH_EINVAL,
             d, "tensor 'w': change 2 is at element 4, not after change 1");
  uint64_t twice[2] = {7, 7};
  sp = (stitch_sparse){2, 2, twice, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&t, &sp, &out, &d), STITCH_EINVAL,
             d, "must ascend strictly");
  uint64_t past[2] = {0, 32};
  sp = (stitch_sparse){2, 2, past, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&t, &sp, &out, &d), STITCH_EINVAL,
             d, "change 1 is at element 32, past its 32 elements");
  uint64_t ok[1] = {0};
  sp = (stitch_sparse){1, 3, ok, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&t, &sp, &out, &d), STITCH_EINVAL,
             d, "element width 3 is not 1, 2, 4 or 8");
  stitch_tensor odd = {NULL, STITCH_DT_U8, 1, {6}, 6, 6, 0, data};
  sp = (stitch_sparse){1, 4, ok, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&odd, &sp, &out, &d), STITCH_EINVAL,
             d, "tensor 0: 6 bytes are not a whole number of 4-byte");
  sp = (stitch_sparse){1, 2, NULL, val};
  ASSERT_ERR(stitch_tensor_digest_patched(&t, &sp, &out, &d), STITCH_EINVAL,
             d, "no positions or values");
  /* In a batch, the offending tensor is named by its index. */
  const stitch_tensor *ts[2] = {&t, &odd};
  stitch_sparse two[2] = {{0, 0, NULL, NULL}, {1, 4, ok, val}};
  stitch_digest outs[2];
  ASSERT_ERR(stitch_tensor_digests_patched(2, ts, two, 0, outs, &d),
             STITCH_EINVAL, d, "tensor 1:");
}

int main(void) {
  test_rng r = test_rng_seeded("test_digest", 0x5eed38);
  test_widths(&r);
  test_empty();
  test_many(&r);
  test_refused();
  printf("test_digest: OK\n");
  return 0;
}
