/* test_msgpack_check.c: the bounded msgpack pre-scan
 * (src/common/msgpack_check.c): every format, truncations, the count of
 * objects still expected, nesting bounds. */
#include "test.h"

#include "stitch.h"

#include "common/msgpack_check.h"

static void test_msgpack_check(void) {
  static const struct {
    const char *what;
    size_t len;
    uint8_t b[24];
    int rc;
    size_t consumed;
  } cases[] = {
      {"fixint", 2, {0x05, 0xff}, 0, 1},
      {"negative fixint", 1, {0xe0}, 0, 1},
      {"nil", 1, {0xc0}, 0, 1},
      {"uint64", 9, {0xcf, 1, 2, 3, 4, 5, 6, 7, 8}, 0, 9},
      {"uint64 short", 8, {0xcf, 1, 2, 3, 4, 5, 6, 7}, STITCH_ETRUNCATED, 0},
      {"float32", 5, {0xca, 0, 0, 0, 0}, 0, 5},
      {"str8", 4, {0xd9, 2, 'h', 'i'}, 0, 4},
      {"str8 short", 3, {0xd9, 2, 'h'}, STITCH_ETRUNCATED, 0},
      {"fixext4", 6, {0xd6, 1, 0, 0, 0, 0}, 0, 6},
      {"fixext4 short", 5, {0xd6, 1, 0, 0, 0}, STITCH_ETRUNCATED, 0},
      {"ext8", 4, {0xc7, 1, 9, 0xaa}, 0, 4},
      {"array of 2", 3, {0x92, 0xc0, 0xc3}, 0, 3},
      {"array missing one", 2, {0x92, 0xc0}, STITCH_ETRUNCATED, 0},
      {"map of 1", 3, {0x81, 0x01, 0x02}, 0, 3},
      {"map missing a value", 2, {0x81, 0x01}, STITCH_ETRUNCATED, 0},
      {"empty containers", 3, {0x92, 0x90, 0x80}, 0, 3},
      {"reserved 0xc1", 2, {0x91, 0xc1}, STITCH_EFORMAT, 0},
      /* The outer array still wants one more element, so the inner one
       * may claim only what is left after it. */
      {"pending counted", 6, {0x92, 0x94, 1, 2, 3, 4}, STITCH_ETRUNCATED, 0},
      {"bin past pending", 6, {0x92, 0xc4, 3, 1, 2, 3}, STITCH_ETRUNCATED, 0},
      {"array32 of 2^32-1",
       10,
       {0xdd, 0xff, 0xff, 0xff, 0xff},
       STITCH_ETRUNCATED,
       0},
      {"empty input", 0, {0}, STITCH_ETRUNCATED, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    stitch_diag d = {{0}};
    size_t used = 12345;
    uint8_t *copy = malloc(cases[i].len + 1);
    memcpy(copy, cases[i].b, cases[i].len);
    int rc = msgpack_check(copy, cases[i].len, 4, &used, &d);
    free(copy);
    if (rc != cases[i].rc)
      FAIL_("%s: rc %d, expected %d (%s)", cases[i].what, rc, cases[i].rc,
            d.msg);
    if (rc == 0 && used != cases[i].consumed)
      FAIL_("%s: consumed %zu, expected %zu", cases[i].what, used,
            cases[i].consumed);
    if (rc != 0 && strncmp(d.msg, "msgpack: offset", 15) != 0)
      FAIL_("%s: message \"%s\"", cases[i].what, d.msg);
  }
  /* Depth: [[[]]] is three deep. */
  static const uint8_t three[] = {0x91, 0x91, 0x90};
  size_t used;
  stitch_diag d = {{0}};
  ASSERT_OK(msgpack_check(three, 3, 3, &used, &d), d);
  ASSERT_ERR(msgpack_check(three, 3, 2, &used, &d), STITCH_ELIMIT, d,
             "deeper than 2");
  ASSERT_ERR(msgpack_check(three, 3, 0, &used, &d), STITCH_ELIMIT, d,
             "deeper than 0");
  ASSERT_ERR(msgpack_check(three, 3, MSGPACK_CHECK_MAX_DEPTH + 1, &used, &d),
             STITCH_EINVAL, d, "nesting bound");
  /* A deep one at the stack's limit, and past it. */
  uint8_t deep[MSGPACK_CHECK_MAX_DEPTH + 1];
  memset(deep, 0x91, sizeof(deep));
  deep[MSGPACK_CHECK_MAX_DEPTH] = 0xc0;
  ASSERT_OK(
      msgpack_check(deep, sizeof(deep), MSGPACK_CHECK_MAX_DEPTH, &used, &d), d);
  ASSERT_UEQ(used, sizeof(deep));
  deep[MSGPACK_CHECK_MAX_DEPTH] = 0x91;
  ASSERT_NE(
      msgpack_check(deep, sizeof(deep), MSGPACK_CHECK_MAX_DEPTH, &used, &d), 0);
  /* Signed integer formats classify as msgpack-c does. */
  msgpack_check_hdr h;
  static const uint8_t i8[] = {0xd0, 0x05}, n8[] = {0xd0, 0xfb},
                       i16[] = {0xd1, 0xff, 0xfe};
  ASSERT_OK(msgpack_check_head(i8, 2, 0, &h, &d), d);
  ASSERT(h.kind == MSGPACK_CHECK_UINT && h.n == 5);
  ASSERT_OK(msgpack_check_head(n8, 2, 0, &h, &d), d);
  ASSERT(h.kind == MSGPACK_CHECK_INT && (int64_t)h.n == -5);
  ASSERT_OK(msgpack_check_head(i16, 3, 0, &h, &d), d);
  ASSERT(h.kind == MSGPACK_CHECK_INT && (int64_t)h.n == -2);
}

int main(void) {
  test_msgpack_check();
  puts("test_msgpack_check: ok");
  return 0;
}
