/* test.h: tiny typed assertions that print both sides (after libuv's
 * test/task.h), and a seeded RNG that every randomized test prints and
 * accepts (STITCH_TEST_SEED=N replays a run). */
#ifndef STITCH_TEST_H
#define STITCH_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL_(...)                                                            \
  do {                                                                        \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                           \
    fprintf(stderr, __VA_ARGS__);                                             \
    fputc('\n', stderr);                                                      \
    exit(1);                                                                  \
  } while (0)

#define ASSERT(c)                                                             \
  do {                                                                        \
    if (!(c))                                                                 \
      FAIL_("assertion failed: %s", #c);                                      \
  } while (0)

#define ASSERT_OP_(a, op, b, T, fmt)                                          \
  do {                                                                        \
    T a_ = (a), b_ = (b);                                                     \
    if (!(a_ op b_))                                                          \
      FAIL_("%s %s %s: " fmt " vs " fmt, #a, #op, #b, a_, b_);                \
  } while (0)

#define ASSERT_EQ(a, b) ASSERT_OP_(a, ==, b, int64_t, "%" PRId64)
#define ASSERT_NE(a, b) ASSERT_OP_(a, !=, b, int64_t, "%" PRId64)
#define ASSERT_LT(a, b) ASSERT_OP_(a, <, b, int64_t, "%" PRId64)
#define ASSERT_LE(a, b) ASSERT_OP_(a, <=, b, int64_t, "%" PRId64)
#define ASSERT_GT(a, b) ASSERT_OP_(a, >, b, int64_t, "%" PRId64)
#define ASSERT_GE(a, b) ASSERT_OP_(a, >=, b, int64_t, "%" PRId64)
#define ASSERT_UEQ(a, b) ASSERT_OP_(a, ==, b, uint64_t, "%" PRIu64)
#define ASSERT_DBL_LE(a, b) ASSERT_OP_(a, <=, b, double, "%.6g")
#define ASSERT_STR_EQ(a, b)                                                   \
  do {                                                                        \
    const char *a_ = (a), *b_ = (b);                                          \
    if (strcmp(a_, b_) != 0)                                                  \
      FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_, b_);                    \
  } while (0)
#define ASSERT_MEM_EQ(a, b, n)                                                \
  do {                                                                        \
    if (memcmp((a), (b), (n)) != 0)                                           \
      FAIL_("%s and %s differ in their first %zu bytes", #a, #b,              \
            (size_t)(n));                                                     \
  } while (0)
/* For calls that must fail with CODE and a message holding SUBSTR. */
#define ASSERT_ERR(expr, code, diag, substr)                                   \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ != (code))                                                         \
      FAIL_("%s returned %d (%s), expected %d (%s)", #expr, rc_,               \
            stitch_errname(rc_), (code), (diag).msg);                          \
    if (strstr((diag).msg, (substr)) == NULL)                                  \
      FAIL_("%s: message \"%s\" lacks \"%s\"", #expr, (diag).msg, (substr));   \
  } while (0)
/* For calls returning a stitch error code; prints the diag on failure. */
#define ASSERT_OK(expr, diag)                                                 \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    if (rc_ != 0)                                                             \
      FAIL_("%s returned %d (%s)", #expr, rc_, (diag).msg);                   \
  } while (0)

/* splitmix64: small, seedable, identical on every platform. */
typedef struct test_rng {
  uint64_t s;
} test_rng;

static inline uint64_t test_rng_next(test_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline double test_rng_unit(test_rng *r) {
  return (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Seed from STITCH_TEST_SEED or the given default; prints it. */
static inline test_rng test_rng_seeded(const char *test, uint64_t dflt) {
  const char *e = getenv("STITCH_TEST_SEED");
  test_rng r = {e != NULL ? strtoull(e, NULL, 0) : dflt};
  fprintf(stderr, "%s: Seed = %" PRIu64 " (STITCH_TEST_SEED to replay)\n",
          test, r.s);
  return r;
}

#endif
