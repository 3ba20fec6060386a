/* test_robust.c: hostile inputs to the delta and safetensors parsers, from a
 * seeded RNG (STITCH_TEST_SEED=N replays a run).
 *
 * Small checkpoints (BF16, F32, I32, U8 tensors, a few KB) are built in
 * memory and a delta encoded between them. Then:
 *  - every truncation of the delta or of a safetensors file must be
 *    refused (lengths are checked against the bytes present);
 *  - random bit flips and byte overwrites: the delta either fails to parse,
 *    or fails to apply with an error code, or (only when the flip hit
 *    nothing that matters) applies to exactly the new bytes. Checksums cover
 *    every byte, so a wrong result is never acceptable;
 *  - stitch_delta_apply_file never leaves its output, or a temporary, behind
 *    when it fails;
 *  - flips past forged checksums (as the fuzz targets do) must not crash;
 *  - a delta applied to the wrong base, or replayed onto its own result,
 *    fails with STITCH_EBASE;
 *  - a crafted delta (valid checksums and digests) naming a tensor with a
 *    name that is not UTF-8 is refused, at parse or at apply_file, or its
 *    output reads back. */
#define _GNU_SOURCE
#include "test.h"

#include "fuzz/fuzz_common.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static test_rng R;
static char tmpdir[256];
static char outpath[300];

typedef struct ckpt {
  fz_tensor t[8];
  uint8_t *data[8];
  size_t n;
  uint8_t *buf;
  size_t len;
} ckpt;

static uint64_t rnd(uint64_t n) { return n ? test_rng_next(&R) % n : 0; }

static uint8_t *alloc_fill(size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  ASSERT(p != NULL);
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)test_rng_next(&R);
  return p;
}

static void add(ckpt *c, const char *name, stitch_dtype dt, int ndim,
                uint64_t d0, uint64_t d1, uint8_t *data) {
  fz_tensor *t = &c->t[c->n];
  memset(t, 0, sizeof(*t));
  t->name = name;
  t->dtype = dt;
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->data = data;
  c->data[c->n++] = data;
}

static void build(ckpt *c, const char *meta) {
  c->buf = fz_st_build(c->t, c->n, meta, &c->len);
  ASSERT(c->buf != NULL);
}

static void ckpt_free(ckpt *c) {
  for (size_t i = 0; i < c->n; i++)
    free(c->data[i]);
  free(c->buf);
}

static uint8_t *copy_of(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  ASSERT(q != NULL);
  if (n)
    memcpy(q, p, n);
  return q;
}

/* BASE and NEW: BF16 with sparse one-ulp steps, F32 whose low bytes all
 * jitter, I32 half replaced, U8 packed nibbles stepping, a tensor only in
 * NEW and one only in BASE. */
static void make_pair(ckpt *base, ckpt *nw) {
  memset(base, 0, sizeof(*base));
  memset(nw, 0, sizeof(*nw));
  uint8_t *bf = alloc_fill(2 * 24 * 40), *f32 = alloc_fill(4 * 300),
          *i32 = alloc_fill(4 * 200), *u8 = alloc_fill(32 * 16),
          *gone = alloc_fill(10);
  for (size_t i = 0; i < 24 * 40; i++) /* weights near 1/64 */
    bf[2 * i + 1] = (uint8_t)((bf[2 * i + 1] & 0x80) | 0x3c);
  for (size_t i = 0; i < 300; i++)
    f32[4 * i + 3] = (uint8_t)((f32[4 * i + 3] & 0x80) | 0x3d);
  for (size_t i = 0; i < 32 * 16; i++)
    u8[i] = (uint8_t)((u8[i] & 0x66) | 0x11);
  uint8_t *bf2 = copy_of(bf, 2 * 24 * 40), *f2 = copy_of(f32, 4 * 300),
          *i2 = copy_of(i32, 4 * 200), *u2 = copy_of(u8, 32 * 16),
          *extra = alloc_fill(4 * 16);
  for (size_t i = 0; i < 24 * 40; i++)
    if (rnd(50) == 0)
      bf2[2 * i] = (uint8_t)(bf2[2 * i] + 1);
  for (size_t i = 0; i < 300; i++)
    f2[4 * i] ^= (uint8_t)(test_rng_next(&R) | 1);
  for (size_t i = 0; i < 4 * 100; i++)
    i2[i] = (uint8_t)test_rng_next(&R);
  for (size_t i = 0; i < 32 * 16; i++)
    if (rnd(40) == 0)
      u2[i] = (uint8_t)(u2[i] + (rnd(2) ? 0x10 : 0x01));
  add(base, "model.layers.0.self_attn.q_proj.weight", STITCH_DT_BF16, 2, 24, 40,
      bf);
  add(base, "model.layers.0.input_layernorm.weight", STITCH_DT_F32, 1, 300, 0,
      f32);
  add(base, "model.layers.0.self_attn.step_counts", STITCH_DT_I32, 1, 200, 0,
      i32);
  add(base, "model.layers.0.mlp.down_proj.weight_packed", STITCH_DT_U8, 2, 32,
      16, u8);
  add(base, "model.layers.0.mlp.dropped", STITCH_DT_U8, 1, 10, 0, gone);
  add(nw, "model.layers.0.self_attn.q_proj.weight", STITCH_DT_BF16, 2, 24, 40,
      bf2);
  add(nw, "model.layers.0.input_layernorm.weight", STITCH_DT_F32, 1, 300, 0,
      f2);
  add(nw, "model.layers.0.self_attn.step_counts", STITCH_DT_I32, 1, 200, 0, i2);
  add(nw, "model.layers.0.mlp.down_proj.weight_packed", STITCH_DT_U8, 2, 32, 16,
      u2);
  add(nw, "model.layers.0.mlp.extra", STITCH_DT_I32, 1, 16, 0, extra);
  build(base, NULL);
  build(nw, "{\"step\":\"12\"}");
}

static int dir_is_empty(const char *dir) {
  DIR *d = opendir(dir);
  ASSERT(d != NULL);
  struct dirent *e;
  int empty = 1;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      fprintf(stderr, "left behind: %s/%s\n", dir, e->d_name);
      empty = 0;
    }
  closedir(d);
  return empty;
}

static void check_err(int rc, const stitch_diag *d) {
  ASSERT_LT(rc, 0);
  ASSERT(strcmp(stitch_errname(rc), "EUNKNOWN") != 0);
  ASSERT(d->msg[0] != 0);
  ASSERT(memchr(d->msg, 0, sizeof(d->msg)) != NULL);
}

/* Applies every tensor of DL onto copies of BASE's; returns 0 and leaves
 * the patched tensors in OUT[i] (caller frees), or the first error. */
static int apply_all(const stitch_delta *dl, const stitch_st *base,
                     uint8_t **out, stitch_diag *d) {
  int rc = 0;
  size_t n = stitch_delta_count(dl);
  for (size_t i = 0; i < n; i++)
    out[i] = NULL;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    if (t->nbytes > (1u << 20)) { /* a forged shape: not worth the memory */
      snprintf(d->msg, sizeof(d->msg), "test: '%s' too large", t->name);
      return STITCH_ELIMIT;
    }
    const stitch_tensor *bt = t->is_new ? NULL : stitch_st_find(base, t->name);
    if (!t->is_new && (bt == NULL || bt->nbytes != t->nbytes)) {
      snprintf(d->msg, sizeof(d->msg), "test: '%s' not in the base", t->name);
      return STITCH_EMISMATCH;
    }
    out[i] = bt ? copy_of(bt->data, (size_t)t->nbytes)
                : calloc(t->nbytes ? (size_t)t->nbytes : 1, 1);
    ASSERT(out[i] != NULL);
    rc = stitch_delta_apply_tensor(dl, i, out[i], t->nbytes, d);
  }
  return rc;
}

static void free_outs(uint8_t **out, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(out[i]);
}

/* Does applying DL give exactly NW's tensors, in order? */
static int equals_new(const stitch_delta *dl, uint8_t **out,
                      const stitch_st *nw) {
  if (stitch_delta_count(dl) != stitch_st_count(nw))
    return 0;
  for (size_t i = 0; i < stitch_st_count(nw); i++) {
    const stitch_tensor *t = stitch_st_tensor(nw, i);
    const stitch_delta_tensor *dt = stitch_delta_tensor_at(dl, i);
    if (strcmp(dt->name, t->name) != 0 || dt->nbytes != t->nbytes ||
        (t->nbytes && memcmp(out[i], t->data, (size_t)t->nbytes) != 0))
      return 0;
  }
  return 1;
}

/* apply_file must fail without leaving anything, or produce NW exactly. */
static int apply_file_check(const stitch_st *base, const stitch_delta *dl,
                            const stitch_st *nw) {
  stitch_diag d = {{0}};
  int rc = stitch_delta_apply_file(base, dl, outpath, &d);
  if (rc != 0) {
    if (d.msg[0] == 0)
      fprintf(stderr, "apply_file: %s with no message\n", stitch_errname(rc));
    check_err(rc, &d);
    ASSERT(dir_is_empty(tmpdir));
    return rc;
  }
  stitch_st *got;
  ASSERT_OK(stitch_st_open(outpath, &got, &d), d);
  ASSERT_UEQ(stitch_st_count(got), stitch_st_count(nw));
  for (size_t i = 0; i < stitch_st_count(nw); i++) {
    const stitch_tensor *a = stitch_st_tensor(nw, i),
                        *b = stitch_st_find(got, a->name);
    ASSERT(b != NULL);
    ASSERT_UEQ(b->nbytes, a->nbytes);
    ASSERT_MEM_EQ(b->data, a->data, (size_t)a->nbytes);
  }
  stitch_st_free(got);
  ASSERT_EQ(unlink(outpath), 0);
  return 0;
}

static void test_roundtrip(const stitch_st *base, const stitch_st *nw,
                           const uint8_t *dbytes, size_t dlen) {
  stitch_delta *dl;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_delta_parse(dbytes, dlen, &dl, &d), d);
  uint8_t *out[8];
  ASSERT_OK(apply_all(dl, base, out, &d), d);
  ASSERT(equals_new(dl, out, nw));
  free_outs(out, stitch_delta_count(dl));
  int codings[STITCH_CODING_COUNT_] = {0}, nibble = 0, fresh = 0;
  for (size_t i = 0; i < stitch_delta_count(dl); i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    for (int c = 0; c < STITCH_CODING_COUNT_; c++)
      codings[c] += (int)t->blocks_by_coding[c];
    nibble += t->sym_bits == 4;
    fresh += t->is_new;
  }
  fprintf(stderr,
          "delta %zu bytes: same %d sparse %d sparsek %d xor %d planes %d "
          "raw %d blocks, %d nibble tensor(s), %d new\n",
          dlen, codings[0], codings[1], codings[STITCH_CODING_SPARSEK],
          codings[2], codings[3], codings[4], nibble, fresh);
  ASSERT_GT(codings[STITCH_CODING_SPARSE] + codings[STITCH_CODING_SPARSEK] +
                codings[STITCH_CODING_SPARSET],
            0);
  ASSERT_EQ(fresh, 1);
  ASSERT_EQ(apply_file_check(base, dl, nw), 0);
  stitch_delta_free(dl);
}

static void test_delta_truncated(const uint8_t *dbytes, size_t dlen) {
  for (size_t len = 0; len < dlen; len++) {
    /* Every length near the ends, a random sample in between. */
    if (len > 64 && len + 64 < dlen && rnd(8) != 0)
      continue;
    uint8_t *p = copy_of(dbytes, len);
    stitch_delta *dl = NULL;
    stitch_diag d = {{0}};
    int rc = stitch_delta_parse(p, len, &dl, &d);
    if (rc == 0)
      FAIL_("delta truncated to %zu of %zu bytes parsed", len, dlen);
    check_err(rc, &d);
    ASSERT(dl == NULL);
    free(p);
  }
}

static void mutate(uint8_t *p, size_t n, char *what, size_t wlen) {
  size_t k = 1 + rnd(3), used = 0;
  what[0] = 0;
  for (size_t i = 0; i < k; i++) {
    size_t pos = rnd(n);
    if (rnd(2)) {
      unsigned bit = (unsigned)rnd(8);
      p[pos] ^= (uint8_t)(1u << bit);
      used +=
          (size_t)snprintf(what + used, wlen - used, " bit %zu.%u", pos, bit);
    } else {
      uint8_t v = (uint8_t)test_rng_next(&R);
      used +=
          (size_t)snprintf(what + used, wlen - used, " byte %zu=%02x", pos, v);
      p[pos] = v;
    }
    if (used >= wlen)
      break;
  }
}

static void test_delta_flips(const stitch_st *base, const stitch_st *nw,
                             const uint8_t *dbytes, size_t dlen, int iters) {
  int nparse = 0, napply_err = 0, nsame = 0, nfile = 0;
  for (int it = 0; it < iters; it++) {
    uint8_t *p = copy_of(dbytes, dlen);
    char what[200];
    mutate(p, dlen, what, sizeof(what));
    stitch_delta *dl = NULL;
    stitch_diag d = {{0}};
    int rc = stitch_delta_parse(p, dlen, &dl, &d);
    if (rc != 0) {
      check_err(rc, &d);
      ASSERT(dl == NULL);
      free(p);
      continue;
    }
    nparse++;
    uint8_t *out[8] = {0};
    size_t cnt = stitch_delta_count(dl);
    if (cnt > 8) {
      FAIL_("iteration %d (%s): a flipped delta lists %zu tensors", it, what,
            cnt);
    }
    rc = apply_all(dl, base, out, &d);
    if (rc != 0) {
      napply_err++;
    } else if (equals_new(dl, out, nw)) {
      nsame++;
    } else {
      FAIL_("iteration %d (%s): a corrupted delta applied cleanly to the "
            "wrong bytes",
            it, what);
    }
    free_outs(out, cnt);
    if (nfile < 150 && it % 4 == 0) {
      nfile++;
      apply_file_check(base, dl, nw);
    }
    stitch_delta_free(dl);
    free(p);
  }
  fprintf(stderr,
          "delta flips: %d tries, %d parsed, %d refused at apply, "
          "%d harmless, %d apply_file runs\n",
          iters, nparse, napply_err, nsame, nfile);
}

/* Past forged checksums: anything may come out, but nothing may crash. */
static void test_delta_forged(const stitch_st *base, const uint8_t *dbytes,
                              size_t dlen, int iters) {
  int nparse = 0, napplied = 0;
  for (int it = 0; it < iters; it++) {
    uint8_t *p = copy_of(dbytes, dlen);
    char what[200];
    /* Skip the magic and header fields most of the time: the index and
     * payloads are what the forgery is for. */
    size_t ix_at = DELTA_HEADER_BYTES, blen;
    int raw;
    ASSERT(fz_delta_index_at(dbytes, dlen, &ix_at, &raw, &blen));
    size_t skip = rnd(4) ? ix_at : 0;
    mutate(p + skip, dlen - skip, what, sizeof(what));
    fz_delta_fix_sums(p, dlen);
    stitch_delta *dl = NULL;
    stitch_diag d = {{0}};
    int rc = stitch_delta_parse(p, dlen, &dl, &d);
    if (rc != 0) {
      check_err(rc, &d);
      free(p);
      continue;
    }
    nparse++;
    fz_delta_fix_blocks(dl);
    uint8_t *out[64] = {0};
    size_t cnt = stitch_delta_count(dl);
    if (cnt <= 64) {
      rc = apply_all(dl, base, out, &d);
      if (rc == 0)
        napplied++;
      else
        check_err(rc, &d);
      free_outs(out, cnt);
    }
    stitch_delta_free(dl);
    free(p);
  }
  fprintf(stderr, "forged flips: %d tries, %d parsed, %d applied\n", iters,
          nparse, napplied);
}

static void walk_st(const stitch_st *st, const uint8_t *buf, size_t len) {
  uint64_t hlen = le64(buf), pos = 0;
  for (size_t i = 0; i < stitch_st_count(st); i++) {
    const stitch_tensor *t = stitch_st_tensor(st, i);
    ASSERT_UEQ(t->offset, pos);
    ASSERT(t->data == buf + 8 + hlen + t->offset);
    ASSERT_UEQ(t->nbytes, t->numel * stitch_dtype_size(t->dtype));
    pos += t->nbytes;
  }
  ASSERT_UEQ(8 + hlen + pos, len);
}

static void test_st_hostile(const uint8_t *sbuf, size_t slen, int iters) {
  for (size_t len = 0; len < slen; len++) {
    if (len > 64 && len + 64 < slen && rnd(8) != 0)
      continue;
    uint8_t *p = copy_of(sbuf, len);
    stitch_st *st = NULL;
    stitch_diag d = {{0}};
    int rc = stitch_st_parse(p, len, &st, &d);
    if (rc == 0)
      FAIL_("safetensors truncated to %zu of %zu bytes parsed", len, slen);
    check_err(rc, &d);
    ASSERT(st == NULL);
    free(p);
  }
  uint64_t hlen = le64(sbuf);
  int nparse = 0;
  for (int it = 0; it < iters; it++) {
    uint8_t *p = copy_of(sbuf, slen);
    char what[200];
    /* Mostly in the length prefix and JSON header, where parsing happens. */
    size_t span = rnd(4) ? (size_t)(8 + hlen) : slen;
    mutate(p, span, what, sizeof(what));
    stitch_st *st = NULL;
    stitch_diag d = {{0}};
    int rc = stitch_st_parse(p, slen, &st, &d);
    if (rc != 0) {
      check_err(rc, &d);
      ASSERT(st == NULL);
    } else {
      nparse++;
      walk_st(st, p, slen);
      stitch_digest dg;
      ASSERT_EQ(stitch_view_digest(st, &dg, NULL), 0);
      stitch_st_free(st);
    }
    free(p);
  }
  fprintf(stderr, "safetensors flips: %d tries, %d parsed\n", iters, nparse);
}

static void test_wrong_base(const ckpt *base, const stitch_st *nw,
                            const uint8_t *dbytes, size_t dlen) {
  stitch_delta *dl;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_delta_parse(dbytes, dlen, &dl, &d), d);

  /* One data byte of the base differs. */
  uint8_t *p = copy_of(base->buf, base->len);
  p[base->len - 1 - rnd(64)] ^= 0x01;
  stitch_st *other;
  ASSERT_OK(stitch_st_parse(p, base->len, &other, &d), d);
  ASSERT_EQ(stitch_delta_apply_file(other, dl, outpath, &d), STITCH_EBASE);
  ASSERT(dir_is_empty(tmpdir));
  stitch_st_free(other);
  free(p);

  /* The base without one tensor. */
  ckpt less = *base;
  less.n--;
  less.buf = fz_st_build(less.t, less.n, NULL, &less.len);
  ASSERT(less.buf != NULL);
  ASSERT_OK(stitch_st_parse(less.buf, less.len, &other, &d), d);
  ASSERT_EQ(stitch_delta_apply_file(other, dl, outpath, &d), STITCH_EBASE);
  ASSERT(dir_is_empty(tmpdir));
  stitch_st_free(other);
  free(less.buf);

  /* Replayed onto its own result. */
  ASSERT_EQ(stitch_delta_apply_file(nw, dl, outpath, &d), STITCH_EBASE);
  ASSERT(dir_is_empty(tmpdir));
  stitch_delta_free(dl);
}

/* A delta is not a secret: anyone can write one with valid checksums and
 * digests. Here a new tensor's name is not UTF-8 (the index rejects only
 * NUL bytes): apply_file must refuse it, or write a file that reads back. */
static void test_crafted_name(void) {
  uint8_t a[16], b[16];
  for (int i = 0; i < 16; i++)
    a[i] = (uint8_t)i, b[i] = (uint8_t)(100 + i);
  fz_tensor bt = {"keep", STITCH_DT_U8, 1, {16}, a};
  fz_tensor rt[2] = {{"keep", STITCH_DT_U8, 1, {16}, a},
                     {"zz", STITCH_DT_U8, 1, {16}, b}};
  size_t bl, rl, dlen;
  uint8_t *bb = fz_st_build(&bt, 1, NULL, &bl);
  uint8_t *rb = fz_st_build(rt, 2, NULL, &rl);
  stitch_st *bs, *rs;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_st_parse(bb, bl, &bs, &d), d);
  ASSERT_OK(stitch_st_parse(rb, rl, &rs, &d), d);
  uint8_t *dl;
  stitch_delta_opts o = {.block_log2 = 8};
  ASSERT_OK(stitch_delta_encode(bs, rs, &o, &dl, &dlen, NULL, &d), d);
  size_t rawlen;
  uint8_t *raw = fz_delta_raw_index(dl, dlen, &rawlen);
  if (raw != NULL) {
    free(dl);
    dl = raw;
    dlen = rawlen;
  }
  size_t ix_at, blen;
  int israw;
  ASSERT(fz_delta_index_at(dl, dlen, &ix_at, &israw, &blen) && israw);
  uint8_t *p = memmem(dl + ix_at, dlen - ix_at, "\x02zz", 3);
  ASSERT(p != NULL);
  p[2] = 0xff; /* "z\xff" */
  stitch_digest td[2], vd;
  const char *names[2] = {"keep", "z\xff"};
  ASSERT_EQ(stitch_tensor_digest(STITCH_DT_U8, 1, bt.shape, a, 16, &td[0]), 0);
  ASSERT_EQ(stitch_tensor_digest(STITCH_DT_U8, 1, bt.shape, b, 16, &td[1]), 0);
  ASSERT_EQ(stitch_view_digest_from(2, names, td, &vd), 0);
  memcpy(dl + ix_at + blen, vd.b, 32); /* the result digest */
  ASSERT(fz_delta_fix_sums(dl, dlen));
  stitch_delta *h;
  int rc = stitch_delta_parse(dl, dlen, &h, &d);
  if (rc != 0) { /* refused at parse: fine */
    check_err(rc, &d);
    fprintf(stderr, "crafted name: %s\n", d.msg);
    free(dl);
    stitch_st_free(bs);
    stitch_st_free(rs);
    free(bb);
    free(rb);
    return;
  }
  rc = stitch_delta_apply_file(bs, h, outpath, &d);
  if (rc != 0) {
    check_err(rc, &d);
    ASSERT(dir_is_empty(tmpdir));
  } else {
    stitch_st *back;
    rc = stitch_st_open(outpath, &back, &d);
    if (rc != 0) {
      FAIL_("apply_file succeeded but its output does not read back: %s",
            d.msg);
    }
    ASSERT_UEQ(stitch_st_count(back), 2);
    stitch_st_free(back);
    ASSERT_EQ(unlink(outpath), 0);
  }
  stitch_delta_free(h);
  free(dl);
  stitch_st_free(bs);
  stitch_st_free(rs);
  free(bb);
  free(rb);
}

/* Runs on exit(), also after a failed assertion. */
static void cleanup(void) {
  unlink(outpath);
  rmdir(tmpdir);
}

int main(void) {
  R = test_rng_seeded("test_robust", 0x5717c4);
  const char *td = getenv("TMPDIR");
  snprintf(tmpdir, sizeof(tmpdir), "%s/stitch-robust-XXXXXX",
           td && *td ? td : "/tmp");
  ASSERT(mkdtemp(tmpdir) != NULL);
  snprintf(outpath, sizeof(outpath), "%s/out.safetensors", tmpdir);
  atexit(cleanup);

  ckpt base, nw;
  make_pair(&base, &nw);
  stitch_st *bst, *nst;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_st_parse(base.buf, base.len, &bst, &d), d);
  ASSERT_OK(stitch_st_parse(nw.buf, nw.len, &nst, &d), d);

  stitch_delta_opts o = {.block_log2 = 8};
  uint8_t *dbytes, *dbytes2;
  size_t dlen, dlen2;
  ASSERT_OK(stitch_delta_encode(bst, nst, &o, &dbytes, &dlen, NULL, &d), d);
  ASSERT_OK(stitch_delta_encode(bst, nst, &o, &dbytes2, &dlen2, NULL, &d), d);
  ASSERT_UEQ(dlen, dlen2); /* deterministic */
  ASSERT_MEM_EQ(dbytes, dbytes2, dlen);
  free(dbytes2);

  test_roundtrip(bst, nst, dbytes, dlen);
  test_wrong_base(&base, nst, dbytes, dlen);
  test_delta_truncated(dbytes, dlen);
  test_delta_flips(bst, nst, dbytes, dlen, 3000);
  test_delta_forged(bst, dbytes, dlen, 2000);

  /* The same with a raw (uncompressed) index, if the encoder chose zstd. */
  size_t rl;
  uint8_t *raw = fz_delta_raw_index(dbytes, dlen, &rl);
  if (raw != NULL) {
    test_roundtrip(bst, nst, raw, rl);
    test_delta_flips(bst, nst, raw, rl, 1000);
    test_delta_forged(bst, raw, rl, 1000);
    free(raw);
  }

  test_st_hostile(base.buf, base.len, 3000);
  test_st_hostile(nw.buf, nw.len, 3000);
  test_crafted_name();

  free(dbytes);
  stitch_st_free(bst);
  stitch_st_free(nst);
  ckpt_free(&base);
  ckpt_free(&nw);
  ASSERT(dir_is_empty(tmpdir));
  ASSERT_EQ(rmdir(tmpdir), 0);
  fprintf(stderr, "test_robust: ok\n");
  return 0;
}
