/* rans.c: the RANS coding (proto/delta.md "RANS"), for the fastest mode.
 *
 * Each change of a block is two symbols: its gap (the unchanged symbols
 * before it, since the last change) and its step (sign and magnitude in
 * key space, as SPARSE and GAPS have it). Each kind has a static table,
 * sent with the block, and a stream of its own, coded with rANS (Duda's
 * asymmetric numeral systems, byte-wise as in Giesen's rans_byte: a
 * 32-bit state kept in [2^23, 2^31), probabilities of 12 bits). What a
 * table cannot name exactly (long gaps, large steps) goes as raw bits,
 * again a stream for each kind.
 *
 * Nothing depends on the base's symbols: no weights, no contexts. So the
 * encoder only compares the two blocks word by word, and the decoder
 * touches only the symbols that change. It decodes a batch of gaps ahead
 * of their steps and prefetches the symbols they name: no decision waits
 * on a symbol's load. (A step table chosen by the old symbol's sign bit
 * held every change up on that load, half the decoder's time at 1.5 %
 * density, and coded no smaller.) The price is the context gain: RANS
 * codes at about the memoryless bound, where GAPS codes 20-30 % below it
 * (docs/codec.md, "The fastest mode").
 *
 * rANS encodes backwards: the first pass stores each change's two symbols
 * (in the caller's scratch) and writes the raw bits; the second codes the
 * symbols from the last to the first, both streams in one loop so that
 * the two states' chains overlap. */
#include "codec/delta_internal.h"
#include "codec/symbol.h"
#include "common/diag.h"

#include <inttypes.h>
#include <string.h>

#define SCALE_BITS 12
#define SCALE (1u << SCALE_BITS)
#define STATE_LOW (1u << 23)
#define GAP_DIRECT 32  /* gaps below this are symbols of their own */
#define GAP_SYMS 108   /* GAP_DIRECT + 4 per bit length 6..24 */
#define STEP_SYMS 128  /* 2 x (1 + the largest bit length, 63) */
#define TABLE_BYTES (2 * (2 + 2 * STEP_SYMS)) /* both, at most */

/* ---- Symbols ---------------------------------------------------------- */

static inline unsigned bitlen64(uint64_t v) {
  return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

/* A gap G: below GAP_DIRECT its own symbol; else its bit length n (6 to
 * 24) and the two bits below the leading one name the symbol, and the
 * n - 3 bits under those go raw. */
static inline unsigned gap_sym(uint64_t g, unsigned *nraw, uint64_t *raw) {
  if (g < GAP_DIRECT) {
    *nraw = 0;
    *raw = 0;
    return (unsigned)g;
  }
  unsigned n = bitlen64(g);
  *nraw = n - 3;
  *raw = g & ((1ull << (n - 3)) - 1);
  return GAP_DIRECT + 4 * (n - 6) + (unsigned)((g >> (n - 3)) & 3);
}

/* A step of magnitude 1: symbol NEG; else r = mag - 1 of bit length k:
 * 2 + 2 (k - 1) + NEG, with the k - 1 bits below r's leading one raw. */
static inline unsigned step_sym(step_parts s, unsigned *nraw, uint64_t *raw) {
  if (s.mag == 1) {
    *nraw = 0;
    *raw = 0;
    return s.neg;
  }
  uint64_t r = s.mag - 1;
  unsigned k = bitlen64(r);
  *nraw = k - 1;
  *raw = k > 1 ? r & ((1ull << (k - 1)) - 1) : 0;
  return 2 + 2 * (k - 1) + s.neg;
}

/* ---- Raw bits --------------------------------------------------------- */

typedef struct bitw {
  uint8_t *p, *end;
  uint64_t acc;
  unsigned n; /* bits in acc */
  int full;
} bitw;

/* Appends the low N (at most 32) bits of V, least significant first;
 * sets FULL, and writes no more, once END is reached. */
static inline void bitw_put(bitw *w, uint64_t v, unsigned n) {
  w->acc |= v << w->n;
  w->n += n;
  while (w->n >= 8) {
    if (w->p == w->end) {
      w->full = 1;
      w->acc = 0;
      w->n = 0;
      return;
    }
    *w->p++ = (uint8_t)w->acc;
    w->acc >>= 8;
    w->n -= 8;
  }
}

static inline void bitw_put_wide(bitw *w, uint64_t v, unsigned n) {
  if (n > 32) {
    bitw_put(w, v & 0xffffffffu, 32);
    v >>= 32;
    n -= 32;
  }
  bitw_put(w, v, n);
}

typedef struct bitr {
  const uint8_t *p, *end;
  uint64_t acc;
  unsigned n;
} bitr;

/* The next N (at most 32) bits, or -1 past the end. */
static inline int bitr_get(bitr *r, unsigned n, uint64_t *v) {
  while (r->n < n) {
    if (r->p == r->end)
      return -1;
    r->acc |= (uint64_t)*r->p++ << r->n;
    r->n += 8;
  }
  *v = r->acc & ((1ull << n) - 1);
  r->acc >>= n;
  r->n -= n;
  return 0;
}

static inline int bitr_get_wide(bitr *r, unsigned n, uint64_t *v) {
  uint64_t lo = 0, hi = 0;
  if (n > 32) {
    if (bitr_get(r, 32, &lo) != 0 || bitr_get(r, n - 32, &hi) != 0)
      return -1;
    *v = lo | hi << 32;
    return 0;
  }
  return bitr_get(r, n, v);
}

/* ---- Tables ----------------------------------------------------------- */

/* Scales the counts C[0..N) (summing to TOTAL > 0) to frequencies F that
 * sum to SCALE, every symbol that occurs keeping at least 1. */
static void normalize(const uint32_t *c, unsigned n, uint64_t total,
                      uint32_t *f) {
  uint32_t sum = 0;
  for (unsigned s = 0; s < n; s++) {
    f[s] = c[s] == 0 ? 0 : (uint32_t)(((uint64_t)c[s] * SCALE) / total);
    if (c[s] != 0 && f[s] == 0)
      f[s] = 1;
    sum += f[s];
  }
  /* Rounding down leaves at most N short, the floor of 1 at most N over:
   * settle the difference on the largest frequencies. */
  while (sum != SCALE) {
    unsigned big = 0;
    for (unsigned s = 1; s < n; s++)
      if (f[s] > f[big])
        big = s;
    if (sum < SCALE) {
      f[big] += SCALE - sum;
      sum = SCALE;
    } else {
      f[big]--; /* the largest is above 1 while the sum passes SCALE */
      sum--;
    }
  }
}

/* V as a varint at OUT; returns its bytes. */
static size_t varint_put(uint64_t v, uint8_t *out) {
  size_t k = 0;
  do {
    out[k++] = (uint8_t)(v >= 0x80 ? (v & 0x7f) | 0x80 : v);
    v >>= 7;
  } while (v != 0);
  return k;
}

static size_t varint_len(uint64_t v) {
  size_t k = 1;
  while (v >>= 7)
    k++;
  return k;
}

/* A table as sent: the count of symbols up to the last that occurs, then
 * each one's frequency, varints. An empty table (no symbol of it coded)
 * is a single 0. Returns the bytes written. */
static size_t table_put(const uint32_t *f, unsigned n, uint8_t *out) {
  unsigned last = 0;
  for (unsigned s = 0; s < n; s++)
    if (f[s] != 0)
      last = s + 1;
  size_t k = 0;
  out[k++] = (uint8_t)last;
  for (unsigned s = 0; s < last; s++)
    k += varint_put(f[s], out + k);
  return k;
}

/* The encoder's form of a symbol (after Alverson's division by a
 * reciprocal, as rans_byte has it): x / f as a multiply and a shift. */
typedef struct esym {
  uint32_t x_max, rcp, bias;
  uint16_t cmpl;
  uint16_t shift;
} esym;

static void esym_init(esym *e, uint32_t start, uint32_t f) {
  e->x_max = ((STATE_LOW >> SCALE_BITS) << 8) * f;
  e->cmpl = (uint16_t)(SCALE - f);
  if (f < 2) { /* q = x - 1 from a reciprocal of just under 1 */
    e->rcp = ~0u;
    e->shift = 0;
    e->bias = start + SCALE - 1;
    return;
  }
  unsigned sh = 0;
  while (f > (1u << sh))
    sh++;
  e->rcp = (uint32_t)(((1ull << (sh + 31)) + f - 1) / f);
  e->shift = (uint16_t)(sh - 1);
  e->bias = start;
}

static void esyms_of(const uint32_t *f, unsigned n, esym *e) {
  uint32_t start = 0;
  for (unsigned s = 0; s < n; s++) {
    esym_init(&e[s], start, f[s] ? f[s] : 1);
    start += f[s];
  }
}

/* Codes symbol E into state X, writing bytes down from *P. A state
 * below 2^31 over x_max >= 2^19 sheds at most two bytes, and does so
 * without a branch: the count is a coin toss at every symbol. */
static inline void rans_put(uint32_t *x, uint8_t **p, const esym *e) {
  uint32_t v = *x;
  for (int k = 0; k < 2; k++) {
    unsigned out = v >= e->x_max;
    (*p)[-1] = (uint8_t)v;
    *p -= out;
    v >>= 8 * out;
  }
  uint32_t q = (uint32_t)(((uint64_t)v * e->rcp) >> 32) >> e->shift;
  *x = v + e->bias + q * e->cmpl;
}

/* The decoder's form: symbol, start and frequency by slot. */
typedef struct dtab {
  int empty;
  uint16_t freq[STEP_SYMS], start[STEP_SYMS];
  uint8_t sym[SCALE];
} dtab;

static int table_get(rd *r, unsigned n, dtab *t) {
  uint8_t cnt;
  if (rd_u8(r, &cnt) != 0 || cnt > n)
    return -1;
  t->empty = cnt == 0;
  uint32_t start = 0;
  for (unsigned s = 0; s < cnt; s++) {
    uint64_t f;
    if (rd_varint(r, &f) != 0 || f > SCALE - start)
      return -1;
    t->freq[s] = (uint16_t)f;
    t->start[s] = (uint16_t)start;
    memset(t->sym + start, (int)s, f);
    start += (uint32_t)f;
  }
  return t->empty || start == SCALE ? 0 : -1;
}

/* Decodes a symbol of table T from state X, reading from *P (before
 * END) as it renormalises. */
static inline int rans_get(uint32_t *x, const uint8_t **p, const uint8_t *end,
                           const dtab *t, unsigned *s) {
  uint32_t slot = *x & (SCALE - 1);
  unsigned v = t->sym[slot];
  uint32_t y = t->freq[v] * (*x >> SCALE_BITS) + slot - t->start[v];
  if (end - *p >= 2) { /* at most two bytes, read without a branch */
    for (int k = 0; k < 2; k++) {
      unsigned in = y < STATE_LOW;
      uint32_t z = y << 8 | **p;
      y = in ? z : y;
      *p += in;
    }
  } else {
    while (y < STATE_LOW) {
      if (*p == end)
        return -1;
      y = y << 8 | *(*p)++;
    }
  }
  *x = y;
  *s = v;
  return 0;
}

/* ---- Encoding --------------------------------------------------------- */

/* The top bit of each W-bit lane of X set where the lane is not zero:
 * adding 2^(W-1) - 1 to a lane's low bits carries into its top bit
 * unless they are all zero, and never into the next lane. */
static inline __attribute__((always_inline)) uint64_t
lanes_nonzero(uint64_t x, unsigned w) {
  uint64_t hi = 0;
  for (unsigned i = w - 1; i < 64; i += w)
    hi |= 1ull << i;
  return (((x & ~hi) + ~hi) | x) & hi;
}

typedef struct rans_enc {
  uint32_t *pos;    /* the changed symbols' indices in the block */
  uint8_t *gs, *ss; /* per change: its gap's and its step's symbols */
  uint64_t n;
  uint32_t gcount[GAP_SYMS], scount[STEP_SYMS];
  bitw gbits, sbits; /* the gaps' and the steps' raw bits */
} rans_enc;

/* First pass: every change of the block, in order, into E, and the raw
 * bits into E's writers, which the caller has set up. Whether a
 * word of the base equals the result's is a coin toss at 10 % density
 * (four BF16 symbols a word), so within a unit of four words that differ
 * somewhere the words are not tested: each lane's index is stored and the
 * count moves on by whether it changed. Equal units, most of them below
 * 2 %, are skipped at once. A raw-bit writer that runs out says so
 * (bitw.full). */
static inline __attribute__((always_inline)) void
scan_block(rans_enc *e, const sym_fmt *f, const unsigned bits,
           const uint8_t *old, const uint8_t *nw, block_span sp) {
  const uint8_t *o = old + span_bytes(sp.start, bits);
  const uint8_t *q = nw + span_bytes(sp.start, bits);
  const unsigned per = 64 / bits; /* symbols a word */
  uint64_t words = sp.n / per / 4 * 4, n = 0;
  uint32_t *pos = e->pos;
  for (uint64_t w = 0; w < words; w += 4) {
    uint64_t x[4], any = 0;
    for (int i = 0; i < 4; i++) {
      uint64_t a, b;
      memcpy(&a, o + 8 * (w + i), 8);
      memcpy(&b, q + 8 * (w + i), 8);
      x[i] = a ^ b;
      any |= x[i];
    }
    if (any == 0)
      continue;
    for (int i = 0; i < 4; i++) {
      uint64_t m = lanes_nonzero(x[i], bits);
      for (unsigned k = 0; k < per; k++) {
        pos[n] = (uint32_t)((w + i) * per + k);
        n += (m >> (k * bits + bits - 1)) & 1;
      }
    }
  }
  for (uint64_t j = words * per; j < sp.n; j++)
    if (ld(o, j, bits) != ld(q, j, bits))
      pos[n++] = (uint32_t)j;
  e->n = n;
  uint64_t origin = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t j = pos[i];
    unsigned nr;
    uint64_t raw;
    unsigned g = gap_sym(j - origin, &nr, &raw);
    if (nr != 0)
      bitw_put(&e->gbits, raw, nr);
    unsigned s = step_sym(step_of(f, bits, ld(o, j, bits), ld(q, j, bits)),
                          &nr, &raw);
    if (nr != 0)
      bitw_put_wide(&e->sbits, raw, nr);
    e->gs[i] = (uint8_t)g;
    e->ss[i] = (uint8_t)s;
    e->gcount[g]++;
    e->scount[s]++;
    origin = j + 1;
  }
}

/* The final state X, below *P. */
static void state_put(uint32_t x, uint8_t **p) {
  *p -= 4;
  for (int k = 0; k < 4; k++)
    (*p)[k] = (uint8_t)(x >> (8 * k));
}

static inline __attribute__((always_inline)) int
encode_impl(const sym_fmt *f, const unsigned bits, const uint8_t *old,
            const uint8_t *nw, block_span sp, uint8_t *out, size_t cap,
            size_t *out_len, uint64_t *changed, uint8_t *scratch,
            size_t scratch_cap) {
  rans_enc e = {0};
  /* Scratch: an index a symbol (the first pass stores each lane's at the
   * count, which never passes the lane), two symbols a change, then the
   * steps' raw bits, and the gaps' stream down from its end; OUT: room
   * for the tables and lengths, the gaps' raw bits, and the steps' stream
   * down from its end. Out of scratch, the block is declined (wide steps
   * at a high density; SPARSE codes those); out of OUT, it is no smaller
   * than its raw bytes. */
  size_t head = TABLE_BYTES + 40, used = 6 * (size_t)sp.n;
  if (cap < head + 64 || scratch_cap < used + 64 || sp.n > UINT32_MAX)
    return RANS_DECLINED;
  e.pos = (uint32_t *)(void *)scratch;
  e.gs = scratch + 4 * sp.n;
  e.ss = e.gs + sp.n;
  e.gbits = (bitw){out + head, out + cap, 0, 0, 0};
  e.sbits = (bitw){scratch + used, scratch + scratch_cap, 0, 0, 0};
  scan_block(&e, f, bits, old, nw, sp);
  bitw_put(&e.gbits, 0, 7); /* the last partial bytes */
  bitw_put(&e.sbits, 0, 7);
  if (e.sbits.full)
    return RANS_DECLINED;
  if (e.gbits.full)
    return STITCH_ELIMIT;
  *changed = e.n;
  if (e.n == 0)
    return RANS_DECLINED; /* the caller codes SAME before it gets here */
  size_t ngb = (size_t)(e.gbits.p - (out + head));
  size_t nsb = (size_t)(e.sbits.p - (scratch + used));

  uint32_t gf[GAP_SYMS], sf[STEP_SYMS];
  normalize(e.gcount, GAP_SYMS, e.n, gf);
  normalize(e.scount, STEP_SYMS, e.n, sf);
  uint8_t tb[TABLE_BYTES];
  size_t nt = table_put(gf, GAP_SYMS, tb);
  nt += table_put(sf, STEP_SYMS, tb + nt);

  /* Second pass, backwards: the steps' stream from the end of OUT, the
   * gaps' from the end of SCRATCH, in one loop so that the two states'
   * chains overlap. */
  esym ge[GAP_SYMS], se[STEP_SYMS];
  esyms_of(gf, GAP_SYMS, ge);
  esyms_of(sf, STEP_SYMS, se);
  uint8_t *ps = out + cap, *pg = scratch + scratch_cap;
  uint32_t x0 = STATE_LOW, x1 = STATE_LOW;
  for (uint64_t i = e.n; i-- > 0;) { /* at most 2 bytes a put, 4 a state */
    if (ps - e.gbits.p < 8)
      return STITCH_ELIMIT;
    if (pg - e.sbits.p < 8)
      return RANS_DECLINED;
    rans_put(&x1, &ps, &se[e.ss[i]]);
    rans_put(&x0, &pg, &ge[e.gs[i]]);
  }
  state_put(x1, &ps);
  state_put(x0, &pg);
  size_t nss = (size_t)(out + cap - ps), ngs = (size_t)(scratch + scratch_cap - pg);

  /* Tables; the gaps' raw bits and stream; the steps' raw bits and
   * stream, to the end. Each part moves down, in order. */
  if (nt + varint_len(ngb) + ngb + varint_len(ngs) + ngs + varint_len(nsb) +
          nsb + nss > cap)
    return STITCH_ELIMIT;
  memcpy(out, tb, nt);
  size_t k = nt;
  k += varint_put(ngb, out + k);
  memmove(out + k, out + head, ngb);
  k += ngb;
  k += varint_put(ngs, out + k);
  memcpy(out + k, pg, ngs);
  k += ngs;
  k += varint_put(nsb, out + k);
  memcpy(out + k, scratch + used, nsb);
  k += nsb;
  memmove(out + k, ps, nss);
  *out_len = k + nss;
  return 0;
}

/* ---- Decoding --------------------------------------------------------- */

/* One of a payload's parts: a varint length, then that many bytes. */
static int part_get(rd *r, const uint8_t **p, size_t *n) {
  uint64_t len;
  if (rd_varint(r, &len) != 0 || len > r->len - r->pos ||
      rd_bytes(r, (size_t)len, p) != 0)
    return -1;
  *n = (size_t)len;
  return 0;
}

/* A stream's first four bytes: the coder's state, which an encoder
 * leaves in [2^23, 2^31). */
static int state_get(const uint8_t **p, const uint8_t *end, uint32_t *x) {
  if (end - *p < 4)
    return -1;
  *x = 0;
  for (int k = 0; k < 4; k++)
    *x |= (uint32_t)(*p)[k] << (8 * k);
  *p += 4;
  return *x < STATE_LOW || *x >> 31 ? -1 : 0;
}

#define BATCH 256 /* gaps decoded ahead of their steps */

static inline __attribute__((always_inline)) int
decode_impl(const sym_fmt *f, const unsigned bits, uint8_t *data,
            block_span sp, const uint8_t *in, size_t len, uint64_t changed,
            stitch_diag *d) {
  dtab gt, stab;
  rd r = {in, len, 0};
  RETURN_IF(table_get(&r, GAP_SYMS, &gt) != 0 ||
                table_get(&r, STEP_SYMS, &stab) != 0,
            d, STITCH_EFORMAT, "rans block: bad table");
  RETURN_IF(changed > 0 && (gt.empty || stab.empty), d, STITCH_EFORMAT,
            "rans block: an empty table");
  const uint8_t *gb, *gp, *sb, *sp_;
  size_t ngb, ngs, nsb;
  RETURN_IF(part_get(&r, &gb, &ngb) != 0 || part_get(&r, &gp, &ngs) != 0 ||
                part_get(&r, &sb, &nsb) != 0,
            d, STITCH_EFORMAT, "rans block: truncated");
  sp_ = in + r.pos;
  const uint8_t *gend = gp + ngs, *send = in + len;
  uint32_t x0, x1;
  RETURN_IF(state_get(&gp, gend, &x0) != 0 || state_get(&sp_, send, &x1) != 0,
            d, STITCH_EFORMAT, "rans block: bad coder state");
  bitr gr = {gb, gb + ngb, 0, 0}, sr = {sb, sb + nsb, 0, 0};
  uint8_t *base = data + span_bytes(sp.start, bits);
  uint64_t o = 0;
  uint32_t pos[BATCH];
  for (uint64_t i = 0; i < changed;) {
    unsigned nb = changed - i < BATCH ? (unsigned)(changed - i) : BATCH;
    /* The batch's gaps, then its steps: nothing waits on a symbol's
     * load, so many are in flight at once. */
    for (unsigned t = 0; t < nb; t++) {
      unsigned g;
      uint64_t gap, x;
      RETURN_IF(rans_get(&x0, &gp, gend, &gt, &g) != 0, d, STITCH_EFORMAT,
                "rans block: coded data ends early");
      if (g < GAP_DIRECT) {
        gap = g;
      } else {
        unsigned n = 6 + (g - GAP_DIRECT) / 4;
        RETURN_IF(bitr_get(&gr, n - 3, &x) != 0, d, STITCH_EFORMAT,
                  "rans block: raw bits end early");
        gap = (1ull << (n - 1)) | (uint64_t)((g - GAP_DIRECT) & 3) << (n - 3) |
              x;
      }
      RETURN_IF(gap >= sp.n - o, d, STITCH_EFORMAT,
                "rans block: change %" PRIu64 " lies past the block", i + t);
      pos[t] = (uint32_t)(o + gap);
      __builtin_prefetch(base + span_bytes(o + gap, bits), 1);
      o += gap + 1;
    }
    for (unsigned t = 0; t < nb; t++) {
      unsigned s;
      uint64_t x, mag = 1;
      RETURN_IF(rans_get(&x1, &sp_, send, &stab, &s) != 0, d, STITCH_EFORMAT,
                "rans block: coded data ends early");
      if (s >= 2) {
        unsigned k = (s - 2) / 2 + 1;
        RETURN_IF(k > bits - 1, d, STITCH_EFORMAT, "rans block: bad step");
        RETURN_IF(bitr_get_wide(&sr, k - 1, &x) != 0, d, STITCH_EFORMAT,
                  "rans block: raw bits end early");
        mag = ((1ull << (k - 1)) | x) + 1;
      }
      uint64_t j = pos[t];
      st(base, j, bits, step_apply(f, bits, ld(base, j, bits), s & 1, mag));
    }
    i += nb;
  }
  RETURN_IF(x0 != STATE_LOW || x1 != STATE_LOW || gp != gend || sp_ != send ||
                gr.p != gr.end || gr.acc != 0 || sr.p != sr.end || sr.acc != 0,
            d, STITCH_EFORMAT, "rans block: coded data does not end cleanly");
  return 0;
}

int rans_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                uint64_t *changed, uint8_t *scratch, size_t scratch_cap) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return encode_impl(&k_, B, old, new_, sp, out, cap, out_len, changed,     \
                       scratch, scratch_cap);                                 \
  }
  DISPATCH(f, STITCH_EINVAL, encode_impl)
#undef DISPATCH_CASE_
}

int rans_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                const uint8_t *in, size_t len, uint64_t changed,
                stitch_diag *d) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return decode_impl(&k_, B, data, sp, in, len, changed, d);               \
  }
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
#undef DISPATCH_CASE_
}
