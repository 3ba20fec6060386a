/* fuzz_chunk.c: stitch_patch_add, stitch_patch_apply and
 * stitch_patch_decode_block on arbitrary bytes taken as chunk 0 of a fixed
 * object (chunk_fixture.h, built once).
 *
 * The input's BLAKE2b-256 and length are written into chunk 0's manifest
 * entry, as a buggy or hostile signer could, so every input reaches the
 * chunk parser. When the input is laid out as a chunk, it runs again with
 * its block checksums (XXH3, not MACs) forged to match its payloads, so
 * that mutated payloads reach the sparse and dense decoders. If it parses, the
 * other chunks (intact) are added and the patch is applied to copies of the
 * fixed base twice: all at once on 1 to 3 threads, and block by block with
 * stitch_patch_decode_block. Both must agree (both fail, or both succeed with
 * the same bytes); every block must lie inside its tensor; errors must be
 * STITCH_E* codes with a message; and the intact chunk 0 must give the
 * fixture's result. Never a crash, a read past the input or a write past a
 * tensor. */
#include "fuzz/chunk_fixture.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_chunk: check failed: %s (line %d)\n", #c,          \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static fzc fx;
static int fx_ready;

static void check_err(int rc, const stitch_diag *d) {
  CHECK(rc < 0 && strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
  CHECK(memchr(d->msg, 0, sizeof(d->msg)) != NULL && d->msg[0] != 0);
}

/* Copies of the base, each exactly its tensor's size. */
static void base_copy(uint8_t **w) {
  for (int i = 0; i < FZC_T; i++) {
    w[i] = malloc((size_t)fx.nbytes[i]);
    CHECK(w[i] != NULL);
    memcpy(w[i], fx.base[i], (size_t)fx.nbytes[i]);
  }
}

static void base_free(uint8_t **w) {
  for (int i = 0; i < FZC_T; i++)
    free(w[i]);
}

/* A patch whose chunk 0 parsed: the other chunks, then both ways of
 * applying it. Returns 1 when the result is the fixture's. */
static int apply_both(stitch_patch *p, const stitch_manifest *m,
                      unsigned threads, stitch_diag *why) {
  stitch_diag d = {{0}};
  for (uint64_t j = 1; j < m->objects[0].n_chunks; j++)
    CHECK(stitch_patch_add(p, (size_t)j, fx.bufs[j],
                           (size_t)m->objects[0].chunks[j].size, &d) == 0);
  CHECK(stitch_patch_missing(p) == 0);
  uint64_t n = stitch_patch_block_count(p);
  for (uint64_t k = 0; k < n; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    CHECK(b.tensor < FZC_T && b.byte_len > 0 &&
          b.byte_off + b.byte_len <= fx.nbytes[b.tensor]);
  }
  uint8_t *all[FZC_T], *one[FZC_T];
  base_copy(all);
  base_copy(one);
  int rc_all = stitch_patch_apply(p, all, fx.nbytes, threads, &d);
  if (rc_all != 0) {
    check_err(rc_all, &d);
    *why = d;
  }
  size_t sl = stitch_patch_scratch_bytes(p);
  uint8_t *scratch = malloc(sl ? sl : 1);
  CHECK(scratch != NULL);
  int rc_one = 0;
  for (uint64_t k = 0; k < n; k++) {
    stitch_patch_block b;
    stitch_patch_block_at(p, k, &b);
    int rc = stitch_patch_decode_block(p, k, one[b.tensor] + b.byte_off,
                                       scratch, &d);
    if (rc != 0) {
      check_err(rc, &d);
      rc_one = rc_one ? rc_one : rc;
    }
  }
  CHECK((rc_all == 0) == (rc_one == 0));
  int same = rc_all == 0;
  for (int i = 0; i < FZC_T && rc_all == 0; i++) {
    CHECK(memcmp(all[i], one[i], (size_t)fx.nbytes[i]) == 0);
    same &= memcmp(all[i], fx.result[i], (size_t)fx.nbytes[i]) == 0;
  }
  uint64_t wrong[FZC_T];
  memcpy(wrong, fx.nbytes, sizeof(wrong));
  wrong[FZC_T - 1]++;
  CHECK(stitch_patch_apply(p, all, wrong, 1, &d) == STITCH_EMISMATCH);
  free(scratch);
  base_free(all);
  base_free(one);
  return same;
}

/* One input as chunk 0 (COPY is exactly SIZE bytes). */
static void run(const uint8_t *copy, size_t size) {
  size_t nc = (size_t)fx.obj.n_chunks;
  stitch_chunk_ref *refs = malloc(nc * sizeof(*refs));
  CHECK(refs != NULL);
  memcpy(refs, fx.obj.chunks, nc * sizeof(*refs));
  refs[0].size = size;
  stitch_hash(copy, size, &refs[0].hash);
  stitch_object o = fx.obj;
  o.chunks = refs;
  stitch_manifest m = fx.m;
  m.objects = &o;

  stitch_diag d = {{0}};
  stitch_patch *p = NULL;
  int rc = stitch_patch_new(&m, 0, &p, &d);
  if (rc != 0) { /* only a size the format rules out */
    check_err(rc, &d);
    CHECK(size == 0 || size > STITCH_CHUNK_MAX);
  } else {
    rc = stitch_patch_add(p, 0, copy, size, &d);
    if (rc != 0) {
      check_err(rc, &d);
      CHECK(stitch_patch_missing(p) == nc);
      CHECK(stitch_patch_block_count(p) == 0);
    } else {
      CHECK(stitch_patch_add(p, 0, copy, size, &d) == STITCH_EEXISTS);
      memset(&d, 0, sizeof(d));
      int same = apply_both(p, &m, 1 + (unsigned)(size % 3), &d);
      rc = d.msg[0] != 0; /* for the verbose line below */
      if (size == fx.obj.chunks[0].size && memcmp(copy, fx.bufs[0], size) == 0)
        CHECK(same);
    }
  }
  if (getenv("FUZZ_CHUNK_VERBOSE"))
    fprintf(stderr, "    %s\n", rc ? d.msg : "parsed and applied");
  stitch_patch_free(p);
  free(refs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fzc_chunk c;
  if (!fx_ready) {
    CHECK(fzc_build(&fx) == 0);
    fx_ready = 1;
  }
  /* Pass 1: as given, from a private copy, exactly sized, so reads past
   * the end are caught. */
  uint8_t *copy = malloc(size ? size : 1);
  CHECK(copy != NULL);
  if (size)
    memcpy(copy, data, size);
  run(copy, size);
  /* Pass 2: when the layout is sound, the block checksums forged to match
   * the payloads, so mutated payloads reach the decoders. */
  if (fzc_read(copy, size, &c) == 0) {
    int forged = 0;
    for (uint64_t k = 0; k < c.n; k++) {
      uint64_t sum = XXH3_64bits(c.e[k].body, c.e[k].body_len);
      forged |= sum != c.e[k].sum;
      c.e[k].sum = sum;
    }
    size_t len;
    uint8_t *p = forged ? fzc_write(&c, &len) : NULL;
    if (p != NULL)
      run(p, len);
    free(p);
  }
  free(copy);
  return 0;
}
