/* fuzz_safetensors.c: stitch_st_parse on arbitrary bytes.
 *
 * The parser must reject bad input with an error code and a one-line
 * message, or hand back tensors that all lie inside the buffer, cover the
 * data region exactly and agree with their dtype and shape. A parsed
 * checkpoint is then digested and, when small, sent through the delta
 * codec (against itself and against an empty base) so that whatever names
 * and shapes the JSON parser lets through also survive the delta index. */
#include "fuzz/fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_safetensors: check failed: %s (line %d)\n", #c,    \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static void walk(const stitch_st *st, const uint8_t *buf, size_t len) {
  size_t n = stitch_st_count(st);
  CHECK(len >= 8);
  uint64_t hlen = le64(buf);
  const uint8_t *data = buf + 8 + hlen;
  uint64_t total = 0;
  CHECK(stitch_st_file_size(st) == len);
  for (size_t i = 0; i < n; i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    CHECK(t != NULL && t->name != NULL && t->name[0] != 0);
    CHECK(strlen(t->name) <= STITCH_ST_MAX_NAME);
    size_t es = stitch_dtype_size(t->dtype);
    CHECK(es > 0);
    CHECK(t->ndim >= 0 && t->ndim <= STITCH_MAX_DIMS);
    uint64_t numel = 1;
    for (int k = 0; k < t->ndim; k++)
      numel *= t->shape[k];
    CHECK(numel == t->numel && t->nbytes == numel * es);
    CHECK(t->offset == total); /* file order, no holes */
    CHECK(t->data == data + t->offset);
    CHECK(t->nbytes <= len - 8 - hlen - t->offset);
    total += t->nbytes;
    CHECK(stitch_st_find(st, t->name) == t);
    /* Touch every byte, so ASan sees any pointer past the buffer. */
    volatile uint8_t acc = 0;
    for (uint64_t k = 0; k < t->nbytes; k++)
      acc ^= t->data[k];
    (void)acc;
  }
  CHECK(total == len - 8 - hlen);
  CHECK(stitch_st_tensor(st, n) == NULL);
  const char *m = stitch_st_metadata(st);
  if (m != NULL)
    CHECK(m[0] == '{');
  stitch_digest dg, *per = malloc((n ? n : 1) * sizeof(*per));
  CHECK(per != NULL);
  CHECK(stitch_view_digest(st, &dg, per) == 0);
  free(per);
}

/* Checkpoint -> delta (vs itself, vs nothing) -> parse -> apply. */
static void through_delta(const stitch_st *st) {
  size_t n = stitch_st_count(st);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += stitch_st_tensor(st, i)->nbytes;
  if (total > (256u << 10) || n > 64)
    return;
  size_t elen;
  uint8_t *empty = fz_st_build(NULL, 0, NULL, &elen);
  stitch_st *none = NULL;
  CHECK(empty != NULL && stitch_st_parse(empty, elen, &none, NULL) == 0);
  const stitch_st *bases[2] = {st, none};
  stitch_delta_opts o = {.block_log2 = 10, .zstd_level = 1};
  for (int k = 0; k < 2; k++) {
    uint8_t *buf;
    size_t len;
    stitch_diag d = {{0}};
    int rc = stitch_delta_encode(bases[k], st, &o, &buf, &len, NULL, &d);
    if (rc == STITCH_ELIMIT)
      continue; /* index over its cap: legitimate refusal */
    CHECK(rc == 0);
    stitch_delta *dl;
    CHECK(stitch_delta_parse(buf, len, &dl, &d) == 0);
    CHECK(stitch_delta_count(dl) == n);
    for (size_t i = 0; i < n; i++) {
      const stitch_tensor *t = stitch_st_tensor(st, i);
      const stitch_delta_tensor *dt = stitch_delta_tensor_at(dl, i);
      CHECK(strcmp(dt->name, t->name) == 0 && dt->nbytes == t->nbytes);
      CHECK(dt->is_new == (k == 1));
      uint8_t *w = malloc(t->nbytes ? (size_t)t->nbytes : 1);
      CHECK(w != NULL);
      if (k == 0 && t->nbytes)
        memcpy(w, t->data, (size_t)t->nbytes);
      else
        memset(w, 0x5a, t->nbytes ? (size_t)t->nbytes : 1);
      CHECK(stitch_delta_apply_tensor(dl, i, w, t->nbytes, &d) == 0);
      CHECK(t->nbytes == 0 || memcmp(w, t->data, (size_t)t->nbytes) == 0);
      free(w);
    }
    stitch_delta_free(dl);
    free(buf);
  }
  stitch_st_free(none);
  free(empty);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stitch_st *st = NULL;
  stitch_diag d = {{0}};
  int rc = stitch_st_parse(data, size, &st, &d);
  if (rc != 0) {
    CHECK(st == NULL);
    CHECK(rc < 0 && strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
    CHECK(memchr(d.msg, 0, sizeof(d.msg)) != NULL && d.msg[0] != 0);
    return 0;
  }
  CHECK(st != NULL);
  walk(st, data, size);
  through_delta(st);
  stitch_st_free(st);
  return 0;
}
