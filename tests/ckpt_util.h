/* ckpt_util.h: build small checkpoints for tests, through the public
 * writer, in a private temporary directory. */
#ifndef STITCH_TEST_CKPT_UTIL_H
#define _DEFAULT_SOURCE /* mkdtemp */
#define STITCH_TEST_CKPT_UTIL_H

#include "stitch.h"
#include "test.h"

#include <dirent.h>
#include <stdarg.h>
#include <unistd.h>

typedef struct tspec {
  const char *name;
  stitch_dtype dtype;
  int ndim;
  uint64_t shape[STITCH_MAX_DIMS];
  uint8_t *data; /* nbytes of it, owned by the caller */
} tspec;

static inline uint64_t tspec_bytes(const tspec *t) {
  uint64_t n = stitch_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

static char test_dir_[64];

/* The directory is flat: remove its files, then it. */
static inline void test_tmpdir_remove(void) {
  DIR *dp = opendir(test_dir_);
  struct dirent *de;
  char p[320];
  while (dp != NULL && (de = readdir(dp)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    snprintf(p, sizeof(p), "%s/%s", test_dir_, de->d_name);
    unlink(p);
  }
  if (dp != NULL)
    closedir(dp);
  rmdir(test_dir_);
}

static inline const char *test_tmpdir(void) {
  if (test_dir_[0] == 0) {
    snprintf(test_dir_, sizeof(test_dir_), "/tmp/stitch-test-XXXXXX");
    ASSERT(mkdtemp(test_dir_) != NULL);
    atexit(test_tmpdir_remove);
  }
  return test_dir_;
}

/* Returns a path inside the test's temporary directory (static storage,
 * 8 slots in rotation). */
static inline const char *test_path(const char *fmt, ...) {
  static char slots[8][256];
  static int next;
  char *p = slots[next++ & 7];
  int n = snprintf(p, 256, "%s/", test_tmpdir());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p + n, (size_t)(256 - n), fmt, ap);
  va_end(ap);
  return p;
}

static inline void write_ckpt(const char *path, const tspec *ts, size_t n,
                              const char *meta) {
  stitch_diag d = {{0}};
  stitch_st_writer *w;
  ASSERT_OK(stitch_st_writer_new(path, &w, &d), d);
  ASSERT_OK(stitch_st_writer_set_metadata(w, meta, &d), d);
  for (size_t i = 0; i < n; i++)
    ASSERT_OK(stitch_st_writer_add(w, ts[i].name, ts[i].dtype, ts[i].ndim,
                                   ts[i].shape, &d),
              d);
  ASSERT_OK(stitch_st_writer_map(w, &d), d);
  for (size_t i = 0; i < n; i++) {
    uint64_t nb = tspec_bytes(&ts[i]);
    if (nb)
      memcpy(stitch_st_writer_data(w, i), ts[i].data, nb);
  }
  ASSERT_OK(stitch_st_writer_commit(w, &d), d);
  stitch_st_writer_free(w);
}

static inline stitch_st *open_ckpt(const char *path) {
  stitch_diag d = {{0}};
  stitch_st *st;
  ASSERT_OK(stitch_st_open(path, &st, &d), d);
  return st;
}

/* The manifest's tensor list for the result of delta DL (RESULT holds its
 * bytes): names, layouts and digests. calloc'd; names point into DL. */
static inline stitch_mtensor *test_manifest_tensors(const stitch_delta *dl,
                                                    const stitch_st *result) {
  stitch_diag d = {{0}};
  size_t n = stitch_delta_count(dl);
  stitch_mtensor *mt = calloc(n ? n : 1, sizeof(*mt));
  for (size_t i = 0; i < n; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    const stitch_tensor *rt = stitch_st_find(result, t->name);
    ASSERT(rt != NULL);
    mt[i] = (stitch_mtensor){.name = (char *)t->name,
                             .dtype = t->dtype,
                             .ndim = t->ndim,
                             .nbytes = t->nbytes};
    memcpy(mt[i].shape, t->shape, sizeof(t->shape));
    ASSERT_OK(stitch_tensor_digest(t->dtype, t->ndim, t->shape, rt->data,
                                   rt->nbytes, &mt[i].digest),
              d);
  }
  return mt;
}

/* ---- Weights ------------------------------------------------------------ */

static inline uint8_t *test_dup_bytes(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  memcpy(q, p, n);
  return q;
}

static inline uint8_t *test_rnd_bytes(test_rng *r, size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)test_rng_next(r);
  return p;
}

#define TEST_DENSE_ANYWHERE SIZE_MAX

/* A step of N weights: *A near 1/8..1 of random sign (BF16, F32, E4M3, or
 * with NIBBLE packed E2M1 pairs), *B the same with a fraction P moved by
 * one step of their bit pattern, and DENSE_LEN elements from DENSE_AT
 * (TEST_DENSE_ANYWHERE: at random) rewritten at random, a dense block. */
static inline void test_step_pair(test_rng *r, stitch_dtype dt, int nibble,
                                  size_t n, double p, size_t dense_at,
                                  size_t dense_len, uint8_t **a, uint8_t **b) {
  size_t es = stitch_dtype_size(dt);
  *a = malloc(n > 0 ? n * es : 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = test_rng_next(r);
    if (dt == STITCH_DT_BF16)
      v = 0x3c00 | (v & 0x3ff) | (v >> 63) << 15;
    else if (dt == STITCH_DT_F32)
      v = 0x3c000000u | (v & 0x3ffffff) | (v >> 63) << 31;
    else if (nibble)
      v &= 0x5f;
    else
      v = 0x20 | (v & 0x1f) | (v >> 63) << 7;
    memcpy(*a + i * es, &v, es);
  }
  *b = test_dup_bytes(*a, n * es);
  for (size_t i = 0; i < n; i++)
    if (test_rng_unit(r) < p) /* the low mantissa bit of a value */
      (*b)[i * es] ^= nibble && (test_rng_next(r) & 1) ? 0x10 : 1;
  if (dense_at == TEST_DENSE_ANYWHERE)
    dense_at = n > dense_len ? (size_t)(test_rng_next(r) % (n - dense_len)) : 0;
  for (size_t i = dense_at; i < dense_at + dense_len && i < n; i++)
    for (size_t k = 0; k < es; k++)
      (*b)[i * es + k] = (uint8_t)test_rng_next(r);
}

#endif
