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

#endif
