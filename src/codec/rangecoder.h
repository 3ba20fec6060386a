/* rangecoder.h: an adaptive binary range coder (LZMA-style carry handling).
 *
 * Probabilities are P(bit = 1) in Q24 inside a context; the coder uses their
 * top 15 bits. Each context adapts with a rate that starts fast and slows as
 * it sees more symbols (rate = log2 of its count, up to a per-family limit),
 * which approximates a counting estimator without a division per symbol.
 * proto/delta.md fixes every step of this arithmetic: the bytes of format 1
 * depend on it, so a faster formulation must compute the same values.
 *
 * Speed: a coded bit is usually unpredictable, so one decision is written
 * without a branch on the bit (conditional moves, RC_CMOV); only the
 * renormalisation branches, about once per eight bits of output. Bits that
 * are nearly always 0 (group flags) have forms that do branch, being
 * cheaper when predicted (rc_encode_known, rc_decode_rare). The coder
 * state is a small struct the callers keep as a local and pass to these
 * always-inlined functions, so it stays in registers across a block.
 *
 * The encoder writes into a caller buffer and raises `overflow` instead of
 * writing past it. The decoder reads zeros past the end of its input, so a
 * hostile payload can give wrong bits but never an out-of-bounds read. */
#ifndef STITCH_CODEC_RANGECODER_H
#define STITCH_CODEC_RANGECODER_H

#include <stddef.h>
#include <stdint.h>

#define RC_TOP (1u << 24)
#define RC_PROB_ONE (1u << 24)
#define RC_INLINE static inline __attribute__((always_inline))

typedef struct rc_ctx {
  uint32_t p; /* P(1) in Q24; always in [1, 2^24 - 1] (see rc_adapt) */
  uint16_t m; /* n + 2 for the spec's count n, held at 2^limit (rc_rate) */
} rc_ctx;

static inline void rc_ctx_init(rc_ctx *c, uint32_t p) {
  c->p = p;
  c->m = 2;
}

/* On x86-64 a decision's three selects (range, low or code, p) are
 * conditional moves written out, after one test: GCC, given the choice,
 * turns them into a branch on the coded bit, which mispredicts about as
 * often as the bit is uncertain, and the mask arithmetic (the portable
 * form, same values; -DSTITCH_NO_ASM) costs about ten instructions more. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(STITCH_NO_ASM)
#define RC_CMOV 1
#else
#define RC_CMOV 0
#endif

/* Hides a value from the optimiser so that selects on it stay arithmetic:
 * left alone, GCC turns them back into a branch on the coded bit, which
 * mispredicts about as often as the bit is uncertain. */
RC_INLINE uint32_t rc_opaque(uint32_t x) {
  __asm__("" : "+r"(x));
  return x;
}

/* q = clamp(p >> 9, 1, 32767). p stays below 2^24 (rc_adapt moves it by at
 * most half the distance to 2^24, rounded down), so only the low clamp can
 * act. */
RC_INLINE uint32_t rc_p15(const rc_ctx *c) {
  uint32_t p = c->p >> 9;
  return p ? p : 1; /* a conditional move on a hoisted constant */
}

/* The spec: r = floor(log2(n + 2)); if r > limit then r = limit, else
 * n += 1. With m = n + 2, r = floor(log2 m) as long as m < 2^(limit+1),
 * and limit after; and floor(log2 m) is already limit from m = 2^limit
 * on. So m is held at 2^limit, where the count stops mattering, and r is
 * floor(log2 m) at every step. Then p moves 2^-r of the way towards the
 * coded bit, rounding the step down: p += (2^24 - p) >> r for a 1,
 * p -= p >> r for a 0; both keep p inside [1, 2^24 - 1] since r >= 1.
 *
 * A context reaches 2^limit after at most 2^limit - 2 uses (126 to 510)
 * and stays there for the rest of its block, so the branch that counts
 * predicts well and saves a select and a store per decision. */
RC_INLINE unsigned rc_rate(rc_ctx *c, unsigned limit) {
  unsigned m = c->m;
  if (__builtin_expect(m < (1u << limit), 0))
    c->m = (uint16_t)(m + 1);
  return (unsigned)__builtin_clz(m) ^ 31u;
}

/* ONE is all ones for a coded 1, zero for a 0. */
RC_INLINE void rc_adapt(rc_ctx *c, uint32_t one, unsigned limit) {
  unsigned rate = rc_rate(c, limit);
  uint32_t p = c->p;
  uint32_t step = (((RC_PROB_ONE - p) & one) | (p & ~one)) >> rate;
  c->p = p + ((step ^ ~one) - ~one); /* +step, or -step */
}

/* The encoder's byte output, touched once per output byte. It is kept
 * apart from the per-bit state (low, range) so that the latter, a local of
 * the caller whose address never escapes, can live in registers while the
 * rare byte shifting goes through a pointer. */
typedef struct rc_out {
  uint8_t *out;
  size_t pos, cap;
  uint64_t cache_size;
  uint8_t cache;
  int overflow;
  uint8_t dropped; /* OR of the bytes not stored for want of room */
  int first; /* the first byte out is always 0: not stored */
} rc_out;

typedef struct rc_enc {
  uint64_t low;
  uint32_t range;
  rc_out *o;
} rc_enc;

static inline void rc_enc_init(rc_enc *e, rc_out *o, uint8_t *out,
                               size_t cap) {
  e->low = 0;
  e->range = 0xFFFFFFFFu;
  e->o = o;
  o->cache = 0;
  o->cache_size = 1;
  o->out = out;
  o->pos = 0;
  o->cap = cap;
  o->overflow = 0;
  o->dropped = 0;
  o->first = 1;
}

RC_INLINE void rc_put(rc_out *o, uint8_t b) {
  if (o->first) {
    o->first = 0;
    return;
  }
  if (o->pos < o->cap) {
    o->out[o->pos++] = b;
  } else {
    o->overflow = 1;
    o->dropped |= b;
  }
}

/* Shifts the top byte of LOW out (through the one-byte cache that absorbs
 * carries) and returns the new low. Runs once per output byte, not per
 * bit. */
static inline uint64_t rc_shift_low(rc_out *o, uint64_t low) {
  if ((uint32_t)low < 0xFF000000u || (low >> 32) != 0) {
    uint8_t carry = (uint8_t)(low >> 32);
    uint8_t temp = o->cache;
    do {
      rc_put(o, (uint8_t)(temp + carry));
      temp = 0xFF;
    } while (--o->cache_size != 0);
    o->cache = (uint8_t)(low >> 24);
  }
  o->cache_size++;
  return (low & 0x00FFFFFFu) << 8;
}

/* One decision, or one span, leaves range >= 2^9 (q is in [1, 32767]; a
 * span keeps at least range >> 15), so at most two bytes move per step. */
RC_INLINE void rc_enc_norm(rc_enc *e) {
  if (__builtin_expect(e->range < RC_TOP, 0)) {
    do {
      e->range <<= 8;
      e->low = rc_shift_low(e->o, e->low);
    } while (e->range < RC_TOP);
  }
}

RC_INLINE void rc_encode(rc_enc *e, rc_ctx *c, uint32_t bit, unsigned limit) {
  uint32_t bound = (e->range >> 15) * rc_p15(c);
#if RC_CMOV
  unsigned rate = rc_rate(c, limit);
  uint32_t p = c->p;
  uint32_t p1 = p + ((RC_PROB_ONE - p) >> rate), p0 = p - (p >> rate);
  uint32_t range = e->range - bound;
  uint64_t add = bound, zero = 0;
  __asm__("test %[b], %[b]\n\t"
          "cmovne %[bound], %[range]\n\t"
          "cmovne %[zero], %[add]\n\t"
          "cmovne %[p1], %[p0]"
          : [range] "+r"(range), [add] "+r"(add), [p0] "+r"(p0)
          : [b] "r"(bit), [bound] "r"(bound), [zero] "r"(zero), [p1] "r"(p1)
          : "cc");
  e->low += add;
  e->range = range;
  c->p = p0;
#else
  uint32_t one = rc_opaque(0u - bit);
  e->low += bound & ~one;
  e->range = (bound & one) | ((e->range - bound) & ~one);
  rc_adapt(c, one, limit);
#endif
  rc_enc_norm(e);
}

/* A decision whose bit the caller already branched on (BIT is a constant
 * where this is inlined): the same arithmetic as rc_encode without the
 * selects. The group flags of a block's unchanged groups, most of its
 * decisions, are coded this way, a run at a time. */
RC_INLINE void rc_encode_known(rc_enc *e, rc_ctx *c, const uint32_t bit,
                               unsigned limit) {
  uint64_t bound = (uint64_t)(e->range >> 15) * rc_p15(c); /* < 2^32 */
  uint32_t p = c->p;
  unsigned m = c->m;
  /* A held context's rate is the limit, a constant shift; one still
   * counting takes rc_rate's path. */
  if (__builtin_expect(m < (1u << limit), 0)) {
    unsigned rate = rc_rate(c, limit);
    c->p = bit ? p + ((RC_PROB_ONE - p) >> rate) : p - (p >> rate);
  } else {
    c->p = bit ? p + ((RC_PROB_ONE - p) >> limit) : p - (p >> limit);
  }
  if (bit) {
    e->range = (uint32_t)bound;
  } else {
    e->low += bound;
    e->range -= (uint32_t)bound;
  }
  rc_enc_norm(e);
}

/* Decisions of a fixed probability, P(1) = q / 2^15 with q in [1, 32767]:
 * the arithmetic of rc_encode without a context to adapt (GAPS). */
RC_INLINE void rc_encode_fixed(rc_enc *e, uint32_t q, uint32_t bit) {
  uint32_t bound = (e->range >> 15) * q;
  uint32_t one = rc_opaque(0u - bit); /* selects, not a branch on the bit */
  e->low += bound & ~one;
  e->range = (bound & one) | ((e->range - bound) & ~one);
  rc_enc_norm(e);
}

/* The interval [lo, hi) of 2^sh equally likely values, lo < hi <= 2^sh,
 * sh <= 15, in one step: r = range >> sh, low += r * lo,
 * range = r * (hi - lo). */
RC_INLINE void rc_encode_span(rc_enc *e, uint32_t lo, uint32_t hi,
                              unsigned sh) {
  uint32_t r = e->range >> sh;
  e->low += (uint64_t)r * lo;
  e->range = r * (hi - lo);
  rc_enc_norm(e);
}

/* Equiprobable bits, most significant first. nbits <= 64. */
static inline void rc_encode_raw(rc_enc *e, uint64_t v, unsigned nbits) {
  while (nbits-- > 0) {
    e->range >>= 1;
    if ((v >> nbits) & 1)
      e->low += e->range;
    rc_enc_norm(e);
  }
}

/* Returns the number of bytes written; check e->o->overflow. Any value in
 * [low, low + range) decodes the same, so pick the one with the most
 * trailing zero bits, flush, and drop trailing zero bytes: the decoder
 * reads zeros past the end of its input. Saves ~4 bytes a block. */
static inline size_t rc_enc_finish(rc_enc *e) {
  uint64_t hi = e->low + e->range;
  for (int k = 32; k > 0; k--) {
    uint64_t m = (1ull << k) - 1, v = (e->low + m) & ~m;
    if (v < hi) {
      e->low = v;
      break;
    }
  }
  rc_out *o = e->o;
  for (int i = 0; i < 5; i++)
    e->low = rc_shift_low(o, e->low);
  while (o->pos > 0 && o->out[o->pos - 1] == 0)
    o->pos--;
  return o->pos;
}

typedef struct rc_dec {
  uint32_t range, code;
  const uint8_t *in;
  size_t pos, len;
} rc_dec;

RC_INLINE uint8_t rc_get(rc_dec *d) {
  return d->pos < d->len ? d->in[d->pos++] : (d->pos++, 0);
}

static inline void rc_dec_init(rc_dec *d, const uint8_t *in, size_t len) {
  d->in = in;
  d->len = len;
  d->pos = 0;
  d->range = 0xFFFFFFFFu;
  d->code = 0;
  for (int i = 0; i < 4; i++) /* the encoder's always-zero first byte is not stored */
    d->code = (d->code << 8) | rc_get(d);
}

RC_INLINE void rc_dec_norm(rc_dec *d) {
  if (__builtin_expect(d->range < RC_TOP, 0)) {
    do {
      d->range <<= 8;
      d->code = (d->code << 8) | rc_get(d);
    } while (d->range < RC_TOP);
  }
}

/* Returns the decoded bit as a mask: all ones for a 1. */
RC_INLINE uint32_t rc_decode_mask(rc_dec *d, rc_ctx *c, unsigned limit) {
  uint32_t bound = (d->range >> 15) * rc_p15(c);
#if RC_CMOV
  unsigned rate = rc_rate(c, limit);
  uint32_t p = c->p, code = d->code;
  uint32_t p1 = p + ((RC_PROB_ONE - p) >> rate), p0 = p - (p >> rate);
  uint32_t range = d->range - bound, code0 = code - bound, one;
  __asm__("cmp %[bound], %[code]\n\t"
          "cmovb %[bound], %[range]\n\t"
          "cmovb %[code], %[code0]\n\t"
          "cmovb %[p1], %[p0]\n\t"
          "sbb %[one], %[one]"
          : [range] "+r"(range), [code0] "+r"(code0), [p0] "+r"(p0),
            [one] "=r"(one)
          : [bound] "r"(bound), [code] "r"(code), [p1] "r"(p1)
          : "cc");
  d->code = code0;
  d->range = range;
  c->p = p0;
#else
  uint32_t one = rc_opaque(0u - (uint32_t)(d->code < bound));
  d->code -= bound & ~one;
  d->range = (bound & one) | ((d->range - bound) & ~one);
  rc_adapt(c, one, limit);
#endif
  rc_dec_norm(d);
  return one;
}

/* A decision that is nearly always 0 (a group flag): a branch on the bit
 * predicts well there and costs less than the selects, and the caller
 * branches on the bit anyway. Same arithmetic as rc_decode_mask. */
RC_INLINE uint32_t rc_decode_rare(rc_dec *d, rc_ctx *c, unsigned limit) {
  uint32_t bound = (d->range >> 15) * rc_p15(c);
  unsigned rate = rc_rate(c, limit);
  uint32_t p = c->p, bit = d->code < bound;
  if (__builtin_expect(bit, 0)) {
    d->range = bound;
    c->p = p + ((RC_PROB_ONE - p) >> rate);
  } else {
    d->code -= bound;
    d->range -= bound;
    c->p = p - (p >> rate);
  }
  rc_dec_norm(d);
  return bit;
}

RC_INLINE uint32_t rc_decode(rc_dec *d, rc_ctx *c, unsigned limit) {
  return rc_decode_mask(d, c, limit) & 1;
}

RC_INLINE uint32_t rc_decode_fixed(rc_dec *d, uint32_t q) {
  uint32_t bound = (d->range >> 15) * q;
#if RC_CMOV
  uint32_t range = d->range - bound, code = d->code, code0 = code - bound, one;
  __asm__("cmp %[bound], %[code]\n\t"
          "cmovb %[bound], %[range]\n\t"
          "cmovb %[code], %[code0]\n\t"
          "sbb %[one], %[one]"
          : [range] "+r"(range), [code0] "+r"(code0), [one] "=r"(one)
          : [bound] "r"(bound), [code] "r"(code)
          : "cc");
  d->code = code0;
  d->range = range;
#else
  uint32_t one = rc_opaque(0u - (uint32_t)(d->code < bound));
  d->code -= bound & ~one;
  d->range = (bound & one) | ((d->range - bound) & ~one);
#endif
  rc_dec_norm(d);
  return one & 1;
}

/* The value v whose interval the encoder narrowed to, out of 2^sh (only
 * damaged input gives 2^sh or more); then rc_decode_span with the
 * interval [lo, hi) that holds v. */
RC_INLINE uint32_t rc_decode_span_value(const rc_dec *d, unsigned sh) {
  return d->code / (d->range >> sh);
}

RC_INLINE void rc_decode_span(rc_dec *d, uint32_t lo, uint32_t hi,
                              unsigned sh) {
  uint32_t r = d->range >> sh;
  d->code -= r * lo;
  d->range = r * (hi - lo);
  rc_dec_norm(d);
}

static inline uint64_t rc_decode_raw(rc_dec *d, unsigned nbits) {
  uint64_t v = 0;
  while (nbits-- > 0) {
    d->range >>= 1;
    uint32_t bit = d->code >= d->range;
    d->code = bit ? d->code - d->range : d->code;
    v = (v << 1) | bit;
    rc_dec_norm(d);
  }
  return v;
}

#endif
