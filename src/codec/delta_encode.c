/* delta_encode.c: build a delta from a base and a result checkpoint.
 *
 * For each tensor of the result, block by block: unchanged blocks cost one
 * byte of index; changed blocks are coded sparsely, and when that is not
 * clearly small (more than 1/8 of the raw bytes) the dense codings are tried
 * too and the smallest wins, so a delta is never much larger than its
 * result compressed on its own. */
#include "codec/delta_internal.h"
#include "codec/symbol.h"
#include "common/diag.h"
#include "common/fileio.h"
#include "common/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

const char *stitch_coding_name(int coding) {
  static const char *const names[] = {"same",  "sparse", "xor",     "planes",
                                      "raw",   "gaps",   "rans",    "ransc",
                                      "sparsek", "sparset"};
  return coding >= 0 && coding < STITCH_CODING_COUNT_ ? names[coding] : "?";
}

typedef struct enc {
  const stitch_delta_opts *o;
  unsigned block_log2;
  int level;
  dbuf index, payload;
  uint8_t *cand, *best, *scratch; /* per-block work buffers */
  size_t work_cap;
  step_hist hist;
  stitch_diag *d;
} enc;

static double h2(double p) {
  return p <= 0 || p >= 1 ? 0 : -(p * log2(p) + (1 - p) * log2(1 - p));
}

static int same_layout(const stitch_tensor *a, const stitch_tensor *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i])
      return 0;
  return 1;
}

static uint64_t bytes_of(uint64_t sym, unsigned bits) {
  return bits == 4 ? sym / 2 : sym * (bits / 8);
}

/* The candidate just coded into e->cand is the best so far: swap the
 * buffers rather than copy. */
static void take_candidate(enc *e, int coding, size_t n, int *best_coding,
                           size_t *best_len) {
  uint8_t *t = e->best;
  e->best = e->cand;
  e->cand = t;
  *best_coding = coding;
  *best_len = n;
}

/* A block's sparse coding done ahead (by pick_nibble), left in e->cand. */
typedef struct precoded {
  int have;
  uint64_t block; /* its index in the tensor */
  int rc;         /* sparse_encode's result */
  size_t len;
  uint64_t changed;
} precoded;

/* Codes one block; *out points at its payload (e->best, or the new bytes
 * themselves for RAW). PRE, if not NULL, is this block's sparse coding. */
static int code_block(enc *e, const sym_fmt *f, const uint8_t *old,
                      const uint8_t *nw, block_span sp, const precoded *pre,
                      int *coding, size_t *len, uint64_t *changed,
                      const uint8_t **out) {
  unsigned sb = f->bits <= 8 ? 1 : f->bits / 8;
  size_t off = bytes_of(sp.start, f->bits), nb = bytes_of(sp.n, f->bits);
  const uint8_t *ob = old ? old + off : NULL, *nbp = nw + off;
  *changed = 0;
  *out = NULL;
  if (ob != NULL && memcmp(ob, nbp, nb) == 0) {
    *coding = STITCH_CODING_SAME;
    *len = 0;
    return 0;
  }
  /* Raw is the ceiling every other coding must beat. */
  *coding = STITCH_CODING_RAW;
  *len = nb;
  /* The sparse coding of this block: for large blocks RANSC where dense
   * and GAPS elsewhere, or RANS, fastest, unless the caller wants the
   * smallest (docs/codec.md). */
  int sc = e->o->sparse_mode == STITCH_SPARSE_FAST && sp.n >= GAPS_MIN_SYMBOLS
               ? STITCH_CODING_GAPS
           : e->o->sparse_mode == STITCH_SPARSE_FASTEST &&
                   sp.n >= RANS_MIN_SYMBOLS
               ? STITCH_CODING_RANS
               : STITCH_CODING_SPARSE;
  if (ob != NULL) {
    size_t n = 0;
    int rc = GAPS_DECLINED;
    sparse_trunc tr = {e->scratch, e->work_cap, 0, 0};
    if (sc == STITCH_CODING_GAPS) {
      /* RANSC where the block is dense enough for its classes to pay;
       * else GAPS. */
      rc = rans_encode(f, old, nw, sp, e->cand, nb, &n, changed, &sc, 1,
                       e->scratch, e->work_cap);
      if (rc != 0) {
        sc = STITCH_CODING_GAPS;
        rc = gaps_encode(f, old, nw, sp, e->cand, nb, &n, changed);
      }
    } else if (sc == STITCH_CODING_RANS) {
      rc = rans_encode(f, old, nw, sp, e->cand, nb, &n, changed, &sc, 0,
                       e->scratch, e->work_cap);
    }
    if (rc == GAPS_DECLINED) { /* or RANS_DECLINED: SPARSE, perhaps coded
                                  by pick_nibble */
      sc = STITCH_CODING_SPARSE;
      if (pre != NULL) {
        rc = pre->rc;
        n = pre->len;
        *changed = pre->changed;
      } else {
        /* SPARSET comes with SPARSE, in the same pass, into the scratch
         * (free here: RANS and RANSC are done with it). */
        rc = sparse_encode_trunc(f, old, nw, sp, e->cand, nb, &n, changed,
                                 &tr);
      }
    }
    if (rc == 0 && n < *len)
      take_candidate(e, sc, n, coding, len);
    else if (rc != 0 && rc != STITCH_ELIMIT)
      return rc;
    if (sc == STITCH_CODING_SPARSE && *coding == sc && tr.ok &&
        tr.len < *len) { /* never longer than SPARSE: usually shorter */
      memcpy(e->cand, tr.out, tr.len);
      take_candidate(e, STITCH_CODING_SPARSET, tr.len, coding, len);
    }
    /* SPARSEK where it codes smaller (docs/codec.md "Fixed bytes"). It
     * costs a second pass of the range coder: by default only over blocks
     * of fewer than SPARSEK_MAX_SYMBOLS, where its warm start saves most
     * as a share of the block (a pass over every SPARSE block took NVFP4
     * encoding at 0.015 % from 1.25 times zstd -1's speed to 0.8). */
    if (sc == STITCH_CODING_SPARSE &&
        (*coding == sc || *coding == STITCH_CODING_SPARSET) &&
        (sp.n < SPARSEK_MAX_SYMBOLS ||
         e->o->sparse_mode == STITCH_SPARSE_SMALL)) {
      /* The coder holds a few bytes back until it finishes: room for
       * them, then only a shorter result is taken. */
      size_t kcap = *len + 16 < nb ? *len + 16 : nb;
      rc = sparsek_encode(f, old, nw, sp, *changed, e->cand, kcap, &n);
      if (rc == 0 && n < *len)
        take_candidate(e, STITCH_CODING_SPARSEK, n, coding, len);
      else if (rc != 0 && rc != STITCH_ELIMIT)
        return rc;
    }
    if (*coding == STITCH_CODING_SPARSEK || *coding == STITCH_CODING_SPARSET)
      sc = *coding;
    if (*coding != sc)
      *changed = sparse_count(f, old, nw, sp);
  }
  if (!(*coding == sc && *len <= nb / 8))
    for (int c = ob ? STITCH_CODING_XOR : STITCH_CODING_PLANES;
         c <= STITCH_CODING_PLANES; c++) {
      size_t n;
      if (dense_encode(c, sb, ob, nbp, nb, e->level, e->cand, *len, &n,
                       e->scratch) == 0 &&
          n < *len)
        take_candidate(e, c, n, coding, len);
    }
  *out = *coding == STITCH_CODING_RAW ? nbp : e->best;
  return 0;
}

/* For U8 tensors, packed 4-bit values (NVFP4) code far better as nibbles;
 * decide on a sample (the first changed 64 KiB): *NIBBLE is 1 when nibbles
 * code smaller. The fast mode counts (nibbles_cheaper); the small mode
 * codes the sample both ways. Returns 0 or an error.
 *
 * Two shortcuts, the choice unchanged. The sample is usually a tensor's
 * first 64 KiB, so it starts a block (512 KiB of bytes), and when its ref
 * is the block's, its nibble coding is the start of the block's: so the
 * whole block is coded as nibbles here, measuring the sample on the way
 * (sparse_encode_probe), and kept in *PRE for code_block when nibbles win,
 * as they do for NVFP4. And the byte coding, usually the larger, is only
 * run until it certainly passes the nibble coding's size. */
#define NIBBLE_SAMPLE (1u << 16)

/* Elias-gamma bits for a step of magnitude MAG >= 1, plus its sign. */
static double step_bits(unsigned mag) {
  return 2.0 + 2.0 * (31 - __builtin_clz(mag));
}

/* The fast mode's choice for a U8 sample, from counts alone: whether its
 * memoryless cost (mask entropy, plus sign and Elias-gamma length of each
 * step) is lower as E2M1 nibbles than as bytes. Packed NVFP4 changes one
 * nibble of a byte by one E2M1 step, which as a byte is often a step of 16
 * or more; 8-bit integers change by small byte steps. */
static const sym_fmt E2M1 = {.bits = 4, .is_float = 1, .mant_bits = 1,
                             .exp_bits = 2};

static int nibbles_cheaper(const uint8_t *a, const uint8_t *b, size_t n) {
  uint64_t kb = 0, kn = 0;
  double sb = 0, sn = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t x8, y8;
    if (i + 8 <= n && (memcpy(&x8, a + i, 8), memcpy(&y8, b + i, 8), x8 == y8)) {
      i += 7; /* eight equal bytes */
      continue;
    }
    if (a[i] == b[i])
      continue;
    kb++;
    int8_t d = (int8_t)(uint8_t)(b[i] - a[i]);
    sb += step_bits((unsigned)(d < 0 ? -d : d));
    for (int sh = 0; sh < 8; sh += 4) {
      unsigned x = (a[i] >> sh) & 15, y = (b[i] >> sh) & 15;
      if (x == y)
        continue;
      kn++;
      sn += step_bits((unsigned)step_of(&E2M1, 4, x, y).mag);
    }
  }
  double nb = (double)n, cb = nb * h2((double)kb / nb) + sb;
  double cn = 2 * nb * h2((double)kn / (2 * nb)) + sn;
  return cn < cb;
}
static int pick_nibble(enc *e, const stitch_tensor *bt, const stitch_tensor *t,
                       precoded *pre, int *nibble) {
  *nibble = 0;
  *pre = (precoded){0};
  if (t->dtype != STITCH_DT_U8 || bt == NULL)
    return 0;
  /* The sample is coded into e->cand, which holds a block's work; the
   * byte coding into e->scratch (work_cap bytes). */
  uint64_t sample = NIBBLE_SAMPLE < e->work_cap ? NIBBLE_SAMPLE : e->work_cap;
  for (uint64_t s = 0; s < t->nbytes; s += sample) {
    uint64_t n = t->nbytes - s < sample ? t->nbytes - s : sample;
    if (memcmp(bt->data + s, t->data + s, n) == 0)
      continue;
    if (e->o->sparse_mode != STITCH_SPARSE_SMALL) { /* counts, no coding */
      *nibble = nibbles_cheaper(bt->data + s, t->data + s, n);
      return 0;
    }
    sym_fmt fb, fn;
    sym_fmt_for(STITCH_DT_U8, 0, &fb);
    sym_fmt_for(STITCH_DT_U8, 1, &fn);
    uint64_t B = 1ull << e->block_log2, syms = 2 * t->nbytes;
    block_span ssp = {2 * s, 2 * n};
    block_span bsp = {2 * s, syms - 2 * s < B ? syms - 2 * s : B};
    size_t ln = 0;
    uint64_t ch;
    int ok;
    if (ssp.start % B == 0 && ssp.n == bsp.n) { /* the sample is the block */
      pre->rc = sparse_encode(&fn, bt->data, t->data, bsp, e->cand, n,
                              &pre->len, &pre->changed);
      ok = pre->rc == 0;
      ln = pre->len;
      pre->have = 1;
    } else if (ssp.start % B == 0 && ssp.n < bsp.n &&
               ssp.n % SPARSE_PROBE_STEP == 0 &&
               sparse_same_ref(&fn, bt->data, ssp, bsp)) {
      sparse_probe probe = {.at = ssp.n, .cap = n};
      pre->rc = sparse_encode_probe(&fn, bt->data, t->data, bsp, e->cand,
                                    bsp.n / 2, &pre->len, &pre->changed,
                                    &probe);
      if (pre->rc != 0 && pre->rc != STITCH_ELIMIT)
        return pre->rc;
      ok = probe.len != 0;
      ln = probe.len;
      pre->have = 1;
    } else {
      ok = sparse_encode(&fn, bt->data, t->data, ssp, e->cand, n, &ln, &ch) == 0;
    }
    pre->block = ssp.start / B;
    if (!ok) /* no byte coding is larger than a failed one */
      return 0;
    int bytes_larger = 0;
    if (sparse_encode_exceeds(&fb, bt->data, t->data, (block_span){s, n},
                              e->scratch, n, ln, &bytes_larger) != 0)
      bytes_larger = 1; /* the byte coding failed */
    *nibble = bytes_larger;
    return 0;
  }
  return 0;
}

static int encode_tensor(enc *e, const stitch_st *base, const stitch_tensor *t,
                         stitch_delta_tensor *ts) {
  const stitch_tensor *bt = stitch_st_find(base, t->name);
  if (bt != NULL && !same_layout(bt, t))
    bt = NULL; /* a reshaped or retyped tensor is sent whole */
  int nibble;
  precoded pre;
  CHECK_RC(pick_nibble(e, bt, t, &pre, &nibble));
  if (!nibble)
    pre.have = 0;
  sym_fmt f;
  CHECK_RC(sym_fmt_for(t->dtype, nibble, &f));
  uint64_t symbols = nibble ? 2 * t->nbytes : t->numel;
  uint8_t flags = (uint8_t)((nibble ? DELTA_TF_NIBBLE : 0) |
                            (bt == NULL ? DELTA_TF_NEW : 0));
  size_t nl = strlen(t->name);
  dbuf *ix = &e->index;
  CHECK_RC(dbuf_varint(ix, nl));
  CHECK_RC(dbuf_put(ix, t->name, nl));
  CHECK_RC(dbuf_u8(ix, (uint8_t)t->dtype));
  CHECK_RC(dbuf_u8(ix, (uint8_t)t->ndim));
  for (int i = 0; i < t->ndim; i++)
    CHECK_RC(dbuf_varint(ix, t->shape[i]));
  CHECK_RC(dbuf_u8(ix, flags));

  memset(ts, 0, sizeof(*ts));
  ts->name = t->name;
  ts->dtype = t->dtype;
  ts->ndim = t->ndim;
  memcpy(ts->shape, t->shape, sizeof(ts->shape));
  ts->nbytes = t->nbytes;
  ts->is_new = bt == NULL;
  ts->sym_bits = f.bits;
  ts->symbols = symbols;
  uint64_t B = 1ull << e->block_log2;
  uint64_t changed_bytes = 0;
  for (uint64_t s = 0; s < symbols; s += B) {
    block_span sp = {s, symbols - s < B ? symbols - s : B};
    int coding;
    size_t len;
    uint64_t ch;
    const uint8_t *payload;
    const precoded *pb = pre.have && s / B == pre.block ? &pre : NULL;
    CHECK_RC(code_block(e, &f, bt ? bt->data : NULL, t->data, sp, pb, &coding,
                        &len, &ch, &payload));
    if (coding != STITCH_CODING_SAME)
      pre.have = 0; /* e->cand is reused from here on */
    CHECK_RC(dbuf_u8(ix, (uint8_t)coding));
    if (coding != STITCH_CODING_SAME) {
      CHECK_RC(dbuf_varint(ix, len));
      CHECK_RC(dbuf_varint(ix, ch));
      CHECK_RC(dbuf_u64(ix, XXH3_64bits(payload, len)));
      CHECK_RC(dbuf_put(&e->payload, payload, len));
    }
    ts->blocks++;
    ts->blocks_by_coding[coding]++;
    ts->changed += ch;
    ts->encoded += len;
    if (e->hist.h16 != NULL && bt != NULL && coding != STITCH_CODING_SAME) {
      CHECK_RC(sparse_steps(&f, bt->data, t->data, sp, &e->hist));
      size_t off = bytes_of(sp.start, f.bits), nb = bytes_of(sp.n, f.bits);
      for (size_t j = 0; j < nb && nibble; j++)
        changed_bytes += bt->data[off + j] != t->data[off + j];
    }
  }
  if (e->hist.h16 != NULL) {
    if (bt == NULL) {
      ts->bound_bits = 8.0 * (double)ts->encoded; /* nothing to diff against */
      ts->idxval_bytes = t->nbytes + 4 * t->numel;
    } else {
      uint64_t k = e->hist.total;
      double p = (double)k / (double)(symbols ? symbols : 1);
      ts->bound_bits = (double)symbols * h2(p) + step_hist_take_bits(&e->hist);
      uint64_t elems = nibble ? changed_bytes : k;
      ts->idxval_bytes = elems * (4 + stitch_dtype_size(t->dtype));
    }
  }
  return 0;
}

/* Format 2's index is in columns (proto/delta.md "Index, format 2"):
 * names, front-coded against the name before; dtypes, shapes and flags;
 * codings; lengths and change counts; and, instead of a checksum per
 * block, one over them all. Small models' deltas are mostly index at RL
 * densities, and zstd codes each column far better alone (docs/codec.md
 * "Fixed bytes"). Each tensor is coded as a format-1 entry (encode_tensor)
 * and split here, in order, on the calling thread. */
typedef struct columns {
  dbuf names, types, flags, codings, blocks, sums;
  const uint8_t *prev; /* the name before, in the entry it came from */
  size_t prev_len;
} columns;

static void columns_free(columns *c) {
  dbuf_free(&c->names);
  dbuf_free(&c->types);
  dbuf_free(&c->flags);
  dbuf_free(&c->codings);
  dbuf_free(&c->blocks);
  dbuf_free(&c->sums);
}

/* Splits one format-1 tensor entry E of BLOCKS blocks into C. The entry
 * is our own, so it parses; rd failures are bugs, reported as EFORMAT. */
static int columns_add(columns *c, const dbuf *e, uint32_t blocks) {
  rd r = {e->p, e->len, 0};
  uint64_t nl, v, len, ch, sum;
  const uint8_t *name;
  uint8_t u, nd;
  if (rd_varint(&r, &nl) || rd_bytes(&r, (size_t)nl, &name))
    return STITCH_EFORMAT;
  size_t shared = 0;
  while (shared < c->prev_len && shared < nl && c->prev[shared] == name[shared])
    shared++;
  CHECK_RC(dbuf_varint(&c->names, shared));
  CHECK_RC(dbuf_varint(&c->names, nl - shared));
  CHECK_RC(dbuf_put(&c->names, name + shared, (size_t)nl - shared));
  c->prev = name;
  c->prev_len = (size_t)nl;
  size_t at = r.pos;
  if (rd_u8(&r, &u) || rd_u8(&r, &nd))
    return STITCH_EFORMAT;
  for (unsigned i = 0; i < nd; i++)
    if (rd_varint(&r, &v))
      return STITCH_EFORMAT;
  if (rd_u8(&r, &u))
    return STITCH_EFORMAT;
  CHECK_RC(dbuf_put(&c->types, e->p + at, r.pos - at));
  CHECK_RC(dbuf_u8(&c->flags, u)); /* format 3's flags column */
  for (uint32_t b = 0; b < blocks; b++) {
    if (rd_u8(&r, &u))
      return STITCH_EFORMAT;
    CHECK_RC(dbuf_u8(&c->codings, u));
    if (u == STITCH_CODING_SAME)
      continue;
    if (rd_varint(&r, &len) || rd_varint(&r, &ch) || rd_u64(&r, &sum))
      return STITCH_EFORMAT;
    CHECK_RC(dbuf_varint(&c->blocks, len));
    CHECK_RC(dbuf_varint(&c->blocks, ch));
    CHECK_RC(dbuf_u64(&c->sums, sum));
  }
  return r.pos == r.len ? 0 : STITCH_EFORMAT;
}

/* The whole format-2, -3 or -4 index into IX: HEAD's digests (DG
 * bytes), the payloads' checksum (formats 2 and 3: format 4's one
 * checksum, in its header, covers the payloads), the rest of HEAD, then
 * the columns; with AS_BASE (formats 3 and 4, the base's tensors) the
 * flags alone stand for the names and types. */
static int columns_index(columns *c, const dbuf *head, size_t dg,
                         unsigned format, int as_base, dbuf *ix) {
  CHECK_RC(dbuf_put(ix, head->p, dg));
  if (format <= 3)
    CHECK_RC(dbuf_u64(ix, XXH3_64bits(c->sums.p, c->sums.len)));
  CHECK_RC(dbuf_put(ix, head->p + dg, head->len - dg));
  if (as_base) {
    CHECK_RC(dbuf_put(ix, c->flags.p, c->flags.len));
  } else {
    CHECK_RC(dbuf_put(ix, c->names.p, c->names.len));
    CHECK_RC(dbuf_put(ix, c->types.p, c->types.len));
  }
  CHECK_RC(dbuf_put(ix, c->codings.p, c->codings.len));
  return dbuf_put(ix, c->blocks.p, c->blocks.len);
}

/* Format 4's header into H (at most DELTA4_HEADER_MAX bytes), its
 * checksum left for the caller: magic, format, flags, the index's stored
 * length. Returns its length, checksum included. */
static size_t header4(uint8_t *h, int zst, int as_base, size_t il) {
  memcpy(h, DELTA4_MAGIC, DELTA4_MAGIC_BYTES);
  size_t n = DELTA4_MAGIC_BYTES;
  h[n++] = 4;
  h[n++] = (uint8_t)((zst ? DELTA4_F_ZSTD : 0) | (as_base ? DELTA4_F_TABLE : 0));
  uint64_t v = il;
  do {
    h[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return n + 8;
}

static int finish(enc *e, unsigned format, int as_base, uint8_t **out,
                  size_t *out_len) {
  /* The index is mostly names and checksums; zstd helps the names. Level
   * 5 codes a large one within 0.3% of level 19's size at a tenth of the
   * time (an NVFP4 delta's index took a fifth of its encoding at 19). A
   * small one (a small model's, or a delta of few tensors) is a fixed
   * cost that can outweigh the changes at RL densities, and costs
   * microseconds at 19 (docs/codec.md "Fixed bytes"). */
  size_t zcap = ZSTD_compressBound(e->index.len);
  uint8_t *z = malloc(zcap);
  if (z == NULL)
    return STITCH_ENOMEM;
  size_t zn = ZSTD_compress(z, zcap, e->index.p, e->index.len,
                            e->index.len <= DELTA_INDEX_SMALL
                                ? DELTA_INDEX_LEVEL_SMALL
                                : DELTA_INDEX_LEVEL);
  int use_z = !ZSTD_isError(zn) && zn < e->index.len;
  const uint8_t *ip = use_z ? z : e->index.p;
  size_t il = use_z ? zn : e->index.len;
  /* Format 4 leaves the frame's magic out: the flag says it is one. */
  if (format >= 4 && use_z && zn > 4 && memcmp(z, DELTA4_ZSTD_MAGIC, 4) == 0) {
    ip += 4;
    il -= 4;
    use_z = il < e->index.len;
    if (!use_z) {
      ip = e->index.p;
      il = e->index.len;
    }
  }
  uint8_t h4[DELTA4_HEADER_MAX];
  size_t hl = format >= 4 ? header4(h4, use_z, as_base, il)
                          : DELTA_HEADER_BYTES;
  size_t total = hl + il + e->payload.len;
  uint8_t *buf = malloc(total);
  if (buf == NULL) {
    free(z);
    return STITCH_ENOMEM;
  }
  if (format >= 4) {
    /* One XXH3-64 for the whole file, these 8 bytes left out. */
    memcpy(buf, h4, hl - 8);
    memcpy(buf + hl, ip, il);
    if (e->payload.len > 0)
      memcpy(buf + hl + il, e->payload.p, e->payload.len);
    uint64_t sum;
    if (delta4_file_sum(buf, total, hl - 8, &sum) != 0) {
      free(buf);
      free(z);
      return STITCH_ENOMEM;
    }
    put_le64(buf + hl - 8, sum);
    free(z);
    *out = buf;
    *out_len = total;
    return 0;
  }
  memcpy(buf, DELTA_MAGIC, 8);
  buf[8] = (uint8_t)format;
  buf[9] = 0;
  buf[10] = buf[11] = 0; /* flags */
  buf[12] = use_z ? DELTA_INDEX_ZSTD : DELTA_INDEX_RAW;
  buf[13] = buf[14] = buf[15] = 0;
  put_le64(buf + 16, il);
  put_le64(buf + 24, e->index.len);
  put_le64(buf + 32, XXH3_64bits(e->index.p, e->index.len));
  put_le64(buf + 40, XXH3_64bits(buf, 40));
  memcpy(buf + DELTA_HEADER_BYTES, ip, il);
  if (e->payload.len > 0)
    memcpy(buf + DELTA_HEADER_BYTES + il, e->payload.p, e->payload.len);
  free(z);
  *out = buf;
  *out_len = total;
  return 0;
}

/* Whether RESULT lists BASE's tensors, in order, each with its dtype and
 * shape: then format 3 can leave them out of the index. */
static int tables_match(const stitch_st *base, const stitch_st *result) {
  size_t n = stitch_st_count(result);
  if (stitch_st_count(base) != n)
    return 0;
  for (size_t i = 0; i < n; i++) {
    const stitch_tensor *b = stitch_st_tensor(base, i),
                        *r = stitch_st_tensor(result, i);
    if (strcmp(b->name, r->name) != 0 || !same_layout(b, r))
      return 0;
  }
  return 1;
}

/* The result's metadata META (NULL: none): listed (its length, then its
 * bytes), or with EDIT as an edit of the base's, BASE_META (NULL: none):
 * the bytes it shares with it at the start and at the end, then the
 * `mid` bytes between (format 3 with the base's tensors). A trainer's
 * metadata differs from the step before's in its step number. */
static int put_meta(dbuf *ix, int edit, const char *base_meta,
                    const char *meta) {
  size_t ml = meta ? strlen(meta) : 0;
  if (!edit) {
    CHECK_RC(dbuf_varint(ix, ml));
    return ml ? dbuf_put(ix, meta, ml) : 0;
  }
  size_t bl = base_meta ? strlen(base_meta) : 0, pre = 0, suf = 0;
  while (pre < bl && pre < ml && base_meta[pre] == meta[pre])
    pre++;
  while (suf < bl - pre && suf < ml - pre &&
         base_meta[bl - 1 - suf] == meta[ml - 1 - suf])
    suf++;
  size_t mid = ml - pre - suf;
  CHECK_RC(dbuf_varint(ix, pre));
  CHECK_RC(dbuf_varint(ix, suf));
  CHECK_RC(dbuf_varint(ix, mid));
  return mid ? dbuf_put(ix, meta + pre, mid) : 0;
}

static int digest_or_given(const stitch_st *st, const stitch_digest *given,
                           stitch_digest *out) {
  if (given == NULL)
    return stitch_view_digest(st, out, NULL);
  *out = *given;
  return 0;
}

void stitch_delta_stats_free(stitch_delta_stats *s) {
  if (s == NULL)
    return;
  free(s->t);
  s->t = NULL;
}

/* The tensors are coded a wave at a time: each by one worker, with its
 * own work buffers, into an index and a payload of its own, which are
 * then appended in order; so the delta's bytes do not depend on the
 * threads, and progress is reported after each wave. */
#define ENC_WAVE_PER_THREAD 4

typedef struct enc_wave {
  const stitch_st *base, *result;
  enc *w;          /* a worker's encoder each */
  size_t first;    /* the wave's first tensor */
  dbuf *ix, *pl;   /* each tensor's index and payload */
  stitch_diag *id; /* each tensor's diag */
  stitch_delta_tensor *ts;
} enc_wave;

static int encode_item(void *ctx, size_t item, unsigned worker) {
  enc_wave *v = ctx;
  enc *e = &v->w[worker];
  e->d = &v->id[item];
  e->index = (dbuf){.max = DELTA_MAX_INDEX};
  e->payload = (dbuf){.max = SIZE_MAX / 2};
  size_t i = v->first + item;
  int rc = encode_tensor(e, v->base, stitch_st_tensor(v->result, i), &v->ts[i]);
  v->ix[item] = e->index;
  v->pl[item] = e->payload;
  e->index = e->payload = (dbuf){0};
  return rc;
}

static void worker_free(enc *e) {
  free(e->cand);
  free(e->best);
  free(e->scratch);
  free(e->hist.h16);
  free(e->hist.big);
}

static int worker_init(enc *e, const enc *main_, int stats) {
  *e = (enc){.o = main_->o, .block_log2 = main_->block_log2,
             .level = main_->level, .work_cap = main_->work_cap};
  e->cand = malloc(dense_bound(e->work_cap));
  e->best = malloc(dense_bound(e->work_cap));
  e->scratch = malloc(e->work_cap);
  if (stats)
    e->hist.h16 = calloc(65537, sizeof(uint64_t));
  return e->cand == NULL || e->best == NULL || e->scratch == NULL ||
                 (stats && e->hist.h16 == NULL)
             ? STITCH_ENOMEM
             : 0;
}

int stitch_delta_encode(const stitch_st *base, const stitch_st *result,
                        const stitch_delta_opts *opts, uint8_t **out,
                        size_t *out_len, stitch_delta_stats *stats,
                        stitch_diag *d) {
  *out = NULL;
  *out_len = 0;
  stitch_delta_opts dflt = {0};
  if (opts == NULL)
    opts = &dflt;
  enc e = {.o = opts, .d = d};
  e.block_log2 = opts->block_log2 ? opts->block_log2 : DELTA_DEFAULT_BLOCK_LOG2;
  RETURN_IF(e.block_log2 < DELTA_MIN_BLOCK_LOG2 ||
                e.block_log2 > DELTA_MAX_BLOCK_LOG2,
            d, STITCH_EINVAL, "block size 2^%u is out of range [2^%d, 2^%d]",
            e.block_log2, DELTA_MIN_BLOCK_LOG2, DELTA_MAX_BLOCK_LOG2);
  RETURN_IF(opts->sparse_mode != STITCH_SPARSE_FAST &&
                opts->sparse_mode != STITCH_SPARSE_SMALL &&
                opts->sparse_mode != STITCH_SPARSE_FASTEST,
            d, STITCH_EINVAL, "unknown sparse mode %d", opts->sparse_mode);
  RETURN_IF(opts->zstd_level < ZSTD_minCLevel() ||
                opts->zstd_level > ZSTD_maxCLevel(),
            d, STITCH_EINVAL, "zstd level %d is out of range [%d, %d]",
            opts->zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  RETURN_IF(opts->format > STITCH_DELTA_FORMAT, d, STITCH_EINVAL,
            "delta format %u: this build writes 1 to %d", opts->format,
            STITCH_DELTA_FORMAT);
  unsigned format = opts->format ? opts->format : STITCH_DELTA_FORMAT;
  columns cols;
  memset(&cols, 0, sizeof(cols));
  dbuf prevname = {.max = STITCH_ST_MAX_NAME};
  e.level = opts->zstd_level ? opts->zstd_level : 3;
  e.index.max = DELTA_MAX_INDEX;
  e.payload.max = SIZE_MAX / 2;
  /* A block is at most 2^24 symbols of 8 bytes. */
  e.work_cap = (size_t)8 << e.block_log2;
  size_t n = stitch_st_count(result);
  unsigned nw = stitch_parallel_threads(opts->threads, n);
  size_t wave = (size_t)nw * ENC_WAVE_PER_THREAD;
  stitch_delta_tensor *ts = calloc(n ? n : 1, sizeof(*ts));
  enc *w = calloc(nw, sizeof(*w));
  dbuf *ix = calloc(wave, sizeof(*ix)), *pl = calloc(wave, sizeof(*pl));
  stitch_diag *id = calloc(wave, sizeof(*id));
  int rc = ts == NULL || w == NULL || ix == NULL || pl == NULL || id == NULL
               ? STITCH_ENOMEM
               : 0;
  for (unsigned k = 0; k < nw && rc == 0 && w != NULL; k++)
    rc = worker_init(&w[k], &e, stats != NULL);
  if (rc != 0) {
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    goto out;
  }
  stitch_digest bdg, rdg;
  rc = digest_or_given(base, opts->base_digest, &bdg);
  if (rc == 0)
    rc = digest_or_given(result, opts->result_digest, &rdg);
  if (rc != 0) {
    stitch_diag_set(d, rc, "cannot digest the checkpoints");
    goto out;
  }
  int as_base = format >= 3 && opts->table_as_base && tables_match(base, result);
  /* Format 4 names the base of its base's tensors by a prefix of its
   * digest (proto/delta.md "Index, format 4"), and says in its header
   * whether the tensors are the base's; format 3 in a byte of the index. */
  size_t blen = format >= 4 && as_base ? DELTA4_BASE_PREFIX : 32;
  if ((rc = dbuf_put(&e.index, bdg.b, blen)) ||
      (rc = dbuf_put(&e.index, rdg.b, 32)) ||
      (rc = dbuf_varint(&e.index, e.block_log2)) ||
      (format == 3 && (rc = dbuf_u8(&e.index, as_base ? DELTA_TABLE_BASE
                                                         : DELTA_TABLE_LISTED))) ||
      (rc = put_meta(&e.index, as_base, stitch_st_metadata(base),
                     stitch_st_metadata(result))) ||
      (rc = dbuf_varint(&e.index, n)))
    goto fail_rc;
  /* Format 2: e.index holds the head until the columns join it. */
  cols.names.max = cols.types.max = cols.flags.max = cols.codings.max =
      cols.blocks.max = cols.sums.max = DELTA_MAX_INDEX;
  uint64_t total = 0, done = 0;
  for (size_t i = 0; i < n; i++)
    total += stitch_st_tensor(result, i)->nbytes;
  for (size_t i0 = 0; i0 < n; i0 += wave) {
    size_t m = n - i0 < wave ? n - i0 : wave, failed = 0;
    memset(id, 0, m * sizeof(*id));
    enc_wave v = {base, result, w, i0, ix, pl, id, ts};
    rc = stitch_parallel_for(m, nw, encode_item, &v, &failed);
    for (size_t k = 0; k < m; k++) {
      if (rc == 0 &&
          ((rc = format == 1 ? dbuf_put(&e.index, ix[k].p, ix[k].len)
                             : columns_add(&cols, &ix[k],
                                           ts[i0 + k].blocks)) == 0) &&
          (rc = dbuf_put(&e.payload, pl[k].p, pl[k].len)) == 0) {
        done += stitch_st_tensor(result, i0 + k)->nbytes;
        if (opts->progress != NULL)
          opts->progress(opts->progress_arg, done, total);
      }
      if (format != 1 && rc == 0) { /* the next entry's prefix: keep it */
        rc = dbuf_reserve(&prevname, cols.prev_len);
        if (rc == 0) {
          memcpy(prevname.p, cols.prev, cols.prev_len);
          cols.prev = prevname.p;
        }
      }
      dbuf_free(&ix[k]);
      dbuf_free(&pl[k]);
    }
    if (rc != 0 && d != NULL && id[failed].msg[0] != 0)
      *d = id[failed];
    if (rc != 0)
      goto fail_rc;
  }
  if (format != 1) {
    dbuf head = e.index;
    e.index = (dbuf){.max = DELTA_MAX_INDEX};
    rc = columns_index(&cols, &head, blen + 32, format, as_base, &e.index);
    dbuf_free(&head);
    if (rc != 0)
      goto fail_rc;
  }
  if ((rc = finish(&e, format, as_base, out, out_len)))
    goto fail_rc;
  if (stats != NULL) {
    memset(stats, 0, sizeof(*stats));
    stats->tensors = n;
    for (size_t i = 0; i < n; i++) {
      stats->symbols += ts[i].symbols;
      stats->changed += ts[i].changed;
      stats->bound_bits += ts[i].bound_bits;
      stats->idxval_bytes += ts[i].idxval_bytes;
    }
    stats->delta_bytes = *out_len;
    stats->result_bytes = stitch_st_file_size(result);
    stats->t = ts;
    ts = NULL;
  }
  goto out;
fail_rc:
  if (d != NULL && rc == STITCH_ELIMIT)
    stitch_diag_set(d, rc, "delta index exceeds %u bytes", DELTA_MAX_INDEX);
  else if (d != NULL && rc != 0 && d->msg[0] == 0)
    stitch_diag_set(d, rc, "%s", stitch_strerror(rc));
out:
  free(ts);
  for (unsigned k = 0; w != NULL && k < nw; k++)
    worker_free(&w[k]);
  free(w);
  free(ix);
  free(pl);
  free(id);
  dbuf_free(&e.index);
  dbuf_free(&e.payload);
  columns_free(&cols);
  dbuf_free(&prevname);
  return rc;
}

int stitch_delta_encode_file(const stitch_st *base, const stitch_st *result,
                             const stitch_delta_opts *opts, const char *path,
                             stitch_delta_stats *stats, stitch_diag *d) {
  uint8_t *buf;
  size_t len;
  CHECK_RC(stitch_delta_encode(base, result, opts, &buf, &len, stats, d));
  stitch_tmpfile tf;
  int rc = stitch_tmpfile_open(&tf, path, d);
  if (rc == 0) {
    rc = stitch_tmpfile_write(&tf, buf, len, d);
    if (rc == 0)
      rc = stitch_tmpfile_commit(&tf, d);
    else
      stitch_tmpfile_abort(&tf);
  }
  free(buf);
  if (rc != 0)
    stitch_delta_stats_free(stats);
  return rc;
}
