/* fuzz_delta_roundtrip.c: encode -> parse -> apply must give back the new
 * checkpoint bit for bit, for any pair of checkpoints.
 *
 * The input is a small recipe for two related checkpoints (BASE, NEW):
 *
 *   byte 0   bits 0-1: block_log2 - 8 (blocks of 256..2048 symbols)
 *            bits 2-3: zstd level - 1
 *            bit 4: NEW carries __metadata__; bit 5: BASE lists its tensors
 *            in reverse order; bit 6: encode a second time, with stats,
 *            and compare; bit 7: the fastest mode (RANS), blocks of
 *            4096..32768 symbols and tensors of up to 16 KiB
 *   byte 1   tensor count - 1 (mod 6); bits 4-5: threads - 1 for
 *            stitch_delta_apply_all; bit 6 (bit 7 of byte 0 clear): large
 *            tensors, 2^16 + numel symbols in blocks of 2^16 or 2^17
 *            (bit 0 of byte 0), where the default mode tries RANSC;
 *            bit 7: format 3 instead of the default (4)
 *   then per tensor 5 bytes:
 *            dtype (mod 15: every safetensors dtype), op (low nibble, see
 *            enum op; bits 4-5 ndim; bit 7: base from the value bytes),
 *            numel (2 bytes LE, capped so a tensor is at most 4 KiB),
 *            a parameter (density or pattern, by op)
 *   the rest: value bytes, cycled, for bases drawn from the input; other
 *            data come from splitmix64 seeded with XXH64 of the input.
 *
 * Checked: the delta parses; encoding twice (the second time with stats,
 * when asked) gives the same bytes; tensors are listed in NEW's order, new
 * exactly when absent from BASE or re-laid-out; apply_tensor onto BASE's bytes
 * yields NEW's; the changed count equals the symbols that differ; and the delta
 * names the view digests of BASE and NEW. Any failure abort()s. */
#include "fuzz/fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_T 6
#define MAX_TENSOR_BYTES (4u << 10)
#define MAX_TENSOR_BYTES_FASTEST (16u << 10) /* RANS: 2^12 symbols or more */

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_delta_roundtrip: check failed: %s (line %d)\n",    \
              #c, __LINE__);                                                   \
      abort();                                                                 \
    }                                                                          \
  } while (0)

enum op {
  OP_SAME,    /* unchanged */
  OP_SPARSE,  /* a few symbols step by +-1..3 in their bit pattern */
  OP_LOWBITS, /* every symbol's low byte jitters: XOR wins */
  OP_RANDOM,  /* replaced by noise: raw wins */
  OP_PATTERN, /* replaced by a short repeating pattern: planes wins */
  OP_NEW,     /* only in NEW */
  OP_GONE,    /* only in BASE */
  OP_RESHAPE, /* same name, other shape or dtype in NEW */
  OP_NIBBLE,  /* single 4-bit halves step by +-1 (NVFP4-like U8) */
  OP_MIXED,   /* per 256-symbol region: same, sparse, or noise */
  OP_INPUT,   /* NEW's bytes are value bytes of the input */
  OP_CLASSES, /* small magnitudes step +-1 more often (RANSC's case) */
  OP_COUNT
};

static const stitch_dtype dtypes[15] = {
    STITCH_DT_BOOL,    STITCH_DT_U8,  STITCH_DT_I8,  STITCH_DT_F8_E4M3,
    STITCH_DT_F8_E5M2, STITCH_DT_U16, STITCH_DT_I16, STITCH_DT_F16,
    STITCH_DT_BF16,    STITCH_DT_U32, STITCH_DT_I32, STITCH_DT_F32,
    STITCH_DT_U64,     STITCH_DT_I64, STITCH_DT_F64};

typedef struct vstream {
  const uint8_t *p;
  size_t n, pos;
} vstream;

static uint8_t vs_next(vstream *v) {
  uint8_t b = v->p[v->pos];
  v->pos = v->pos + 1 == v->n ? 0 : v->pos + 1;
  return b;
}

/* Adds STEP to element j's bit pattern (width es bytes, little-endian). */
static void bump(uint8_t *p, size_t es, size_t j, int64_t step) {
  uint64_t v = 0;
  memcpy(&v, p + j * es, es);
  v += (uint64_t)step;
  memcpy(p + j * es, &v, es);
}

typedef struct spec {
  char name[16];
  enum op op;
  fz_tensor base, res;
  uint8_t *bdata, *rdata;
} spec;

static void shape_of(fz_tensor *t, int ndim, uint64_t numel, unsigned k) {
  t->ndim = ndim;
  if (ndim == 0) {
    return; /* scalar: one element */
  } else if (ndim == 1) {
    t->shape[0] = numel;
  } else {
    uint64_t a = 1 + k % 4;
    t->shape[0] = a;
    t->shape[1] = numel / a;
    if (ndim == 3) {
      t->shape[1] = 1;
      t->shape[2] = numel / a;
    }
  }
}

static uint64_t symbols_differ(unsigned bits, const uint8_t *a,
                               const uint8_t *b, uint64_t nbytes) {
  uint64_t n = 0;
  if (bits == 4) {
    for (uint64_t i = 0; i < nbytes; i++)
      n += ((a[i] ^ b[i]) & 15) != 0, n += ((a[i] ^ b[i]) >> 4) != 0;
    return n;
  }
  size_t sb = bits / 8;
  for (uint64_t i = 0; i < nbytes; i += sb)
    n += memcmp(a + i, b + i, sb) != 0;
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  unsigned flags = data[0];
  size_t nt = 1 + data[1] % MAX_T;
  int large = !(flags & 0x80) && (data[1] & 0x40);
  if (size < 2 + 5 * nt)
    return 0;
  fz_rng rng = {XXH64(data, size, 0)};
  const uint8_t *vals = data + 2 + 5 * nt;
  size_t nvals = size - 2 - 5 * nt;
  vstream vs = {vals, nvals, 0};

  spec sp[MAX_T];
  memset(sp, 0, sizeof(sp));
  for (size_t i = 0; i < nt; i++) {
    const uint8_t *h = data + 2 + 5 * i;
    spec *s = &sp[i];
    snprintf(s->name, sizeof(s->name), "layer.%u.w", (unsigned)(i % 1000));
    stitch_dtype dt = dtypes[h[0] % 15];
    s->op = (enum op)((h[1] & 15) % OP_COUNT);
    int ndim = (h[1] >> 4) & 3, from_input = (h[1] >> 7) && nvals > 0;
    unsigned param = h[4];
    size_t es = stitch_dtype_size(dt);
    uint64_t max_bytes = flags & 0x80 ? MAX_TENSOR_BYTES_FASTEST : MAX_TENSOR_BYTES;
    uint64_t numel = (uint64_t)(h[2] | h[3] << 8) % (max_bytes / es + 1);
    if (large)
      numel = (1u << 16) + (uint64_t)(h[2] | h[3] << 8);
    if (ndim == 0)
      numel = 1;
    if (ndim >= 2)
      numel -= numel % (1 + param % 4);
    s->base.name = s->res.name = s->name;
    s->base.dtype = s->res.dtype = dt;
    shape_of(&s->base, ndim, numel, param);
    s->res = s->base;
    size_t nb = (size_t)numel * es;
    s->bdata = malloc(nb ? nb : 1);
    s->rdata = malloc(nb ? nb : 1);
    CHECK(s->bdata != NULL && s->rdata != NULL);
    if (from_input)
      for (size_t k = 0; k < nb; k++)
        s->bdata[k] = vs_next(&vs);
    else
      fz_fill(&rng, s->bdata, nb);
    if (s->op == OP_NIBBLE && dt == STITCH_DT_U8 && !from_input)
      for (size_t k = 0; k < nb; k++) /* E2M1 pairs away from the ends */
        s->bdata[k] = (uint8_t)((s->bdata[k] & 0x66) | 0x11);
    if (nb)
      memcpy(s->rdata, s->bdata, nb);
    uint64_t dens = param + 1; /* out of 1024 */
    switch (s->op) {
    case OP_SAME:
    case OP_NEW:
    case OP_GONE:
      break;
    case OP_SPARSE:
      for (size_t j = 0; j < numel; j++)
        if (fz_next(&rng) % 1024 < dens)
          bump(s->rdata, es, j, (int64_t)(fz_next(&rng) % 7) - 3);
      break;
    case OP_LOWBITS:
      for (size_t j = 0; j < numel; j++)
        s->rdata[j * es] ^= (uint8_t)(fz_next(&rng) & (param | 1));
      break;
    case OP_RANDOM:
      fz_fill(&rng, s->rdata, nb);
      break;
    case OP_PATTERN:
      for (size_t k = 0; k < nb; k++)
        s->rdata[k] = (uint8_t)(param + (k % 4) * 17);
      break;
    case OP_RESHAPE:
      if (param & 1) { /* other dtype of the same width class, same bytes */
        s->res.dtype = dt == STITCH_DT_U8 ? STITCH_DT_I8 : STITCH_DT_U8;
        s->res.ndim = 1;
        s->res.shape[0] = nb;
      } else {
        s->res.ndim = s->base.ndim == 1 ? 2 : 1;
        s->res.shape[0] = s->res.ndim == 1 ? numel : 1;
        s->res.shape[1] = numel;
      }
      for (size_t j = 0; j < numel; j++)
        if (fz_next(&rng) % 1024 < dens)
          bump(s->rdata, es, j, 1);
      break;
    case OP_NIBBLE:
      for (size_t k = 0; k < nb; k++)
        if (fz_next(&rng) % 1024 < dens) {
          unsigned sh = (fz_next(&rng) & 1) * 4;
          unsigned v = (s->rdata[k] >> sh) & 15;
          v = (fz_next(&rng) & 1) ? (v + 1) & 15 : (v + 15) & 15;
          s->rdata[k] = (uint8_t)((s->rdata[k] & ~(15u << sh)) | v << sh);
        }
      break;
    case OP_MIXED:
      for (size_t j0 = 0; j0 < numel; j0 += 256) {
        unsigned mode = (unsigned)(fz_next(&rng) % 3);
        for (size_t j = j0; j < numel && j < j0 + 256; j++) {
          if (mode == 1 && fz_next(&rng) % 1024 < dens)
            bump(s->rdata, es, j, (int64_t)(fz_next(&rng) % 5) - 2);
          else if (mode == 2)
            fz_fill(&rng, s->rdata + j * es, es);
        }
      }
      break;
    case OP_CLASSES: /* weight-like magnitudes, a few octaves, in the top
                        byte's low 7 bits; the smaller change more often */
      for (size_t j = 0; j < numel; j++) {
        uint64_t x = fz_next(&rng);
        unsigned level = es == 1 ? 0x28 + (unsigned)(x % 0x20)
                                 : 0x3a + (unsigned)(x % 4);
        s->bdata[j * es + es - 1] = s->rdata[j * es + es - 1] =
            (uint8_t)((x >> 8 & 0x80) | level);
        uint64_t p = level < (es == 1 ? 0x38u : 0x3cu) ? dens * 4 : dens / 4;
        if (fz_next(&rng) % 1024 < p)
          bump(s->rdata, es, j, (x >> 9 & 1) ? 1 : -1);
      }
      break;
    case OP_INPUT:
      if (nvals > 0)
        for (size_t k = 0; k < nb; k++)
          s->rdata[k] = vs_next(&vs);
      break;
    default:
      break;
    }
    s->base.data = s->bdata;
    s->res.data = s->rdata;
  }

  /* Assemble BASE (optionally reversed) and NEW. */
  fz_tensor bt[MAX_T], rt[MAX_T];
  size_t nb = 0, nr = 0;
  for (size_t i = 0; i < nt; i++) {
    size_t k = (flags & 0x20) ? nt - 1 - i : i;
    if (sp[k].op != OP_NEW)
      bt[nb++] = sp[k].base;
    if (sp[i].op != OP_GONE)
      rt[nr++] = sp[i].res;
  }
  size_t blen, rlen;
  uint8_t *bbuf = fz_st_build(bt, nb, NULL, &blen);
  uint8_t *rbuf =
      fz_st_build(rt, nr, (flags & 0x10) ? "{\"step\":\"7\"}" : NULL, &rlen);
  CHECK(bbuf != NULL && rbuf != NULL);
  stitch_st *base = NULL, *res = NULL;
  stitch_diag d = {{0}};
  CHECK(stitch_st_parse(bbuf, blen, &base, &d) == 0);
  CHECK(stitch_st_parse(rbuf, rlen, &res, &d) == 0);

  /* Bit 7: the fastest mode, in blocks large enough for RANS; large
   * tensors: blocks large enough for RANSC. */
  stitch_delta_opts o = {.block_log2 = large ? 16 + (flags & 1)
                                       : (flags & 0x80 ? 12 : 8) + (flags & 3),
                         .zstd_level = 1 + ((flags >> 2) & 3),
                         .sparse_mode = flags & 0x80 ? STITCH_SPARSE_FASTEST
                                                     : STITCH_SPARSE_FAST,
                         .format = data[1] & 0x80 ? 3 : 0,
                         /* formats 3 and 4 name BASE's tensors where they
                          * can (format 4 then BASE by a digest prefix) */
                         .table_as_base = 1};
  uint8_t *dbytes, *dbytes2;
  size_t dlen, dlen2;
  stitch_delta_stats st = {0};
  int rc = stitch_delta_encode(base, res, &o, &dbytes, &dlen, NULL, &d);
  if (rc != 0)
    fprintf(stderr, "encode: %s\n", d.msg);
  CHECK(rc == 0);
  if (flags & 0x40) { /* again, with stats: the same bytes */
    CHECK(stitch_delta_encode(base, res, &o, &dbytes2, &dlen2, &st, &d) == 0);
    CHECK(dlen == dlen2 && memcmp(dbytes, dbytes2, dlen) == 0);
    CHECK(st.tensors == nr && st.delta_bytes == dlen && st.t != NULL);
    CHECK(st.result_bytes == rlen);
    stitch_delta_stats_free(&st);
    free(dbytes2);
  }

  stitch_delta *dl = NULL;
  rc = stitch_delta_parse_ex(dbytes, dlen, base, &dl, &d);
  if (rc != 0)
    fprintf(stderr, "parse: %s\n", d.msg);
  CHECK(rc == 0);
  CHECK(stitch_delta_count(dl) == nr);
  stitch_digest bdg, rdg;
  CHECK(stitch_view_digest(base, &bdg, NULL) == 0);
  CHECK(stitch_view_digest(res, &rdg, NULL) == 0);
  size_t bl = stitch_delta_base_digest_len(dl);
  CHECK(bl == 32 || (bl == DELTA4_BASE_PREFIX && !(data[1] & 0x80)));
  CHECK(memcmp(stitch_delta_base_digest(dl)->b, bdg.b, bl) == 0);
  CHECK(memcmp(stitch_delta_result_digest(dl)->b, rdg.b, 32) == 0);
  CHECK((stitch_delta_metadata(dl) != NULL) == ((flags & 0x10) != 0));

  for (size_t i = 0; i < nr; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    const stitch_tensor *want = stitch_st_tensor(res, i);
    CHECK(strcmp(t->name, want->name) == 0);
    CHECK(t->dtype == want->dtype && t->ndim == want->ndim);
    CHECK(t->nbytes == want->nbytes);
    const stitch_tensor *old = stitch_st_find(base, t->name);
    int relaid =
        old != NULL && (old->dtype != want->dtype || old->ndim != want->ndim ||
                        memcmp(old->shape, want->shape,
                               sizeof(uint64_t) * (size_t)want->ndim));
    CHECK(t->is_new == (old == NULL || relaid));
    size_t n = (size_t)t->nbytes;
    uint8_t *w = malloc(n ? n : 1);
    CHECK(w != NULL);
    if (t->is_new)
      memset(w, 0xa5, n);
    else if (n)
      memcpy(w, old->data, n);
    rc = stitch_delta_apply_tensor(dl, i, w, t->nbytes, &d);
    if (rc != 0)
      fprintf(stderr, "apply '%s': %s\n", t->name, d.msg);
    CHECK(rc == 0);
    if (n && memcmp(w, want->data, n) != 0) {
      size_t k = 0;
      while (w[k] == want->data[k])
        k++;
      fprintf(stderr,
              "tensor '%s' (%s, %u-bit symbols): byte %zu is %02x, "
              "want %02x\n",
              t->name, stitch_dtype_name(t->dtype), t->sym_bits, k, w[k],
              want->data[k]);
      abort();
    }
    if (!t->is_new)
      CHECK(t->changed ==
            symbols_differ(t->sym_bits, old->data, want->data, t->nbytes));
    free(w);
  }
  /* All at once, on 1 to 4 threads: the same bytes. */
  uint8_t *bufs[MAX_T];
  uint64_t sizes[MAX_T];
  for (size_t i = 0; i < nr; i++) {
    const stitch_delta_tensor *t = stitch_delta_tensor_at(dl, i);
    const stitch_tensor *old = stitch_st_find(base, t->name);
    size_t n = (size_t)t->nbytes;
    sizes[i] = t->nbytes;
    bufs[i] = malloc(n ? n : 1);
    CHECK(bufs[i] != NULL);
    if (t->is_new)
      memset(bufs[i], 0x5a, n);
    else if (n)
      memcpy(bufs[i], old->data, n);
  }
  unsigned threads = 1 + (data[1] >> 4) % 4;
  rc = stitch_delta_apply_all(dl, bufs, sizes, threads, &d);
  if (rc != 0)
    fprintf(stderr, "apply_all: %s\n", d.msg);
  CHECK(rc == 0);
  for (size_t i = 0; i < nr; i++) {
    CHECK(sizes[i] == 0 || memcmp(bufs[i], stitch_st_tensor(res, i)->data,
                                  (size_t)sizes[i]) == 0);
    free(bufs[i]);
  }
  stitch_delta_free(dl);
  free(dbytes);
  stitch_st_free(base);
  stitch_st_free(res);
  free(bbuf);
  free(rbuf);
  for (size_t i = 0; i < nt; i++) {
    free(sp[i].bdata);
    free(sp[i].rdata);
  }
  return 0;
}
