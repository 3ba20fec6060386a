/* test_proofs.c: the store's set of checked chunks (version/proofs.h)
 * against a plain array as the model: adds, lookups and removals in a
 * seeded random order, many names sharing a home slot (so that removal's
 * shift of a run is exercised), growth, the bound's edge cases. */
#include "test.h"

#include "version/proofs.h"

#define N 6000

/* Name I: random, except that the odd ones share their first 8 bytes (the
 * slot they hash to) with a few others. */
static stitch_digest name(test_rng *r, int i) {
  stitch_digest h;
  for (size_t k = 0; k < sizeof(h.b); k += 8) {
    uint64_t v = test_rng_next(r);
    memcpy(h.b + k, &v, 8);
  }
  if (i & 1) {
    uint64_t home = (uint64_t)(i % 7) * 1024; /* same slot at every size */
    memcpy(h.b, &home, 8);
  }
  h.b[31] |= 1; /* never all-zero */
  return h;
}

int main(void) {
  test_rng r = test_rng_seeded("test_proofs", 7);
  static stitch_digest names[N];
  static int in[N];
  for (int i = 0; i < N; i++)
    names[i] = name(&r, i);
  chunk_proofs *ps = proofs_new();
  ASSERT(ps != NULL);
  for (int round = 0; round < 40 * N; round++) {
    int i = (int)(test_rng_next(&r) % N);
    switch (test_rng_next(&r) % 3) {
    case 0:
      proofs_add(ps, &names[i]);
      in[i] = 1;
      break;
    case 1:
      proofs_remove(ps, &names[i]);
      in[i] = 0;
      break;
    default:
      ASSERT_EQ(proofs_has(ps, &names[i]), in[i]);
    }
  }
  for (int i = 0; i < N; i++) /* everything, after all the shifting */
    ASSERT_EQ(proofs_has(ps, &names[i]), in[i]);
  stitch_digest zero;
  memset(&zero, 0, sizeof(zero));
  proofs_add(ps, &zero); /* the empty slot's mark is never a name */
  ASSERT_EQ(proofs_has(ps, &zero), 0);
  proofs_remove(ps, &zero);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(proofs_has(ps, &names[i]), in[i]);
  proofs_free(ps);
  /* A store without a set (out of memory at open) proves nothing. */
  proofs_add(NULL, &names[0]);
  proofs_remove(NULL, &names[0]);
  ASSERT_EQ(proofs_has(NULL, &names[0]), 0);
  proofs_free(NULL);
  printf("test_proofs: ok\n");
  return 0;
}
