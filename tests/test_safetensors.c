/* test_safetensors.c: the reader's validation and the writer's output. */
#include "ckpt_util.h"

#include <sys/stat.h>

static stitch_st *parse_text(const char *json, size_t data_len, int *rc,
                             stitch_diag *d) {
  size_t hl = strlen(json);
  size_t len = 8 + hl + data_len;
  uint8_t *buf = calloc(1, len);
  for (int i = 0; i < 8; i++)
    buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, json, hl);
  stitch_st *st = NULL;
  *rc = stitch_st_parse(buf, len, &st, d);
  if (st == NULL)
    free(buf);
  return st; /* buf leaks into the test process when parsed: fine here */
}

static void expect_reject(const char *json, size_t data_len, int want,
                          const char *why) {
  stitch_diag d = {{0}};
  int rc;
  stitch_st *st = parse_text(json, data_len, &rc, &d);
  if (rc != want)
    FAIL_("%s: got %d (%s), want %d", why, rc, d.msg, want);
  ASSERT(st == NULL);
  ASSERT(d.msg[0] != 0);
  ASSERT(strchr(d.msg, '\n') == NULL);
}

static void test_rejects(void) {
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                4, STITCH_ETRUNCATED, "past the data");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, STITCH_EFORMAT, "overlap");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, STITCH_EFORMAT, "hole");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
                8, STITCH_EFORMAT, "reversed");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                8, STITCH_EFORMAT, "dtype x shape");
  expect_reject("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                8, STITCH_EDTYPE, "unknown dtype");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, STITCH_EFORMAT, "duplicate names");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                8, STITCH_EFORMAT, "trailing bytes");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                4, STITCH_EFORMAT, "negative dim");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
                "4294967296],\"data_offsets\":[0,4]}}",
                4, STITCH_ELIMIT, "shape overflow");
  expect_reject("{\"__metadata__\":{\"k\":1}}", 0, STITCH_EFORMAT,
                "metadata not strings");
  expect_reject("[1,2]", 0, STITCH_EFORMAT, "not an object");
  expect_reject("{\"a\":", 0, STITCH_EFORMAT, "broken JSON");

  /* Absurd and past-the-end header lengths. */
  uint8_t buf[16] = {0};
  stitch_diag d = {{0}};
  stitch_st *st;
  buf[7] = 0x7f;
  ASSERT_EQ(stitch_st_parse(buf, sizeof(buf), &st, &d), STITCH_ELIMIT);
  memset(buf, 0, sizeof(buf));
  buf[0] = 200;
  ASSERT_EQ(stitch_st_parse(buf, sizeof(buf), &st, &d), STITCH_ETRUNCATED);
  ASSERT_EQ(stitch_st_parse(buf, 5, &st, &d), STITCH_ETRUNCATED);
}

static void test_big_offsets(void) {
  /* Offsets past 2^31 and 2^32 must parse exactly: check the arithmetic on
   * a header whose data region we do not hold by catching the exact
   * "ends at" error. */
  stitch_diag d = {{0}};
  int rc;
  parse_text("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967301],"
             "\"data_offsets\":[0,4294967301]}}",
             0, &rc, &d);
  ASSERT_EQ(rc, STITCH_ETRUNCATED);
  ASSERT(strstr(d.msg, "4294967301") != NULL);
}

static void test_roundtrip(void) {
  uint16_t a[6] = {1, 2, 3, 4, 5, 6};
  int64_t b[2] = {-1, 1ll << 40};
  uint8_t c[1];
  tspec ts[3] = {
      {"x.weight", STITCH_DT_BF16, 2, {2, 3}, (uint8_t *)a},
      {"y", STITCH_DT_I64, 1, {2}, (uint8_t *)b},
      {"empty", STITCH_DT_F32, 2, {0, 7}, c},
  };
  const char *p = test_path("rt.safetensors");
  write_ckpt(p, ts, 3, "{\"format\":\"pt\",\"step\":\"7\"}");
  stitch_st *st = open_ckpt(p);
  ASSERT_EQ(stitch_st_count(st), 3);
  const stitch_tensor *t = stitch_st_find(st, "x.weight");
  ASSERT(t != NULL);
  ASSERT_EQ(t->dtype, STITCH_DT_BF16);
  ASSERT_EQ(t->ndim, 2);
  ASSERT_UEQ(t->shape[1], 3);
  ASSERT_MEM_EQ(t->data, a, sizeof(a));
  t = stitch_st_find(st, "y");
  ASSERT_MEM_EQ(t->data, b, sizeof(b));
  ASSERT_UEQ(stitch_st_find(st, "empty")->nbytes, 0);
  ASSERT(stitch_st_find(st, "nope") == NULL);
  ASSERT_STR_EQ(stitch_st_metadata(st), "{\"format\":\"pt\",\"step\":\"7\"}");
  /* The data region starts 8-byte aligned, as the reference writer does. */
  ASSERT_EQ((uintptr_t)stitch_st_tensor(st, 0)->data % 8, 0);
  stitch_st_free(st);
}

static void test_writer_abort_leaves_nothing(void) {
  stitch_diag d = {{0}};
  stitch_st_writer *w;
  const char *p = test_path("aborted.safetensors");
  ASSERT_OK(stitch_st_writer_new(p, &w, &d), d);
  uint64_t sh[1] = {4};
  ASSERT_OK(stitch_st_writer_add(w, "a", STITCH_DT_F32, 1, sh, &d), d);
  ASSERT_OK(stitch_st_writer_map(w, &d), d);
  stitch_st_writer_free(w); /* never committed */
  struct stat sb;
  ASSERT(stat(p, &sb) != 0);
  ASSERT_EQ(stitch_st_writer_new("/nonexistent-dir/x", &w, &d), STITCH_EIO);
}

int main(void) {
  test_rejects();
  test_big_offsets();
  test_roundtrip();
  test_writer_abort_leaves_nothing();
  puts("test_safetensors: ok");
  return 0;
}
