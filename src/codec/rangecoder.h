/* rangecoder.h: an adaptive binary range coder (LZMA-style carry handling).
 *
 * Probabilities are P(bit = 1) in Q24 inside a context; the coder uses their
 * top 15 bits. Each context adapts with a rate that starts fast and slows as
 * it sees more symbols (rate = log2 of its count, up to a per-family limit),
 * which approximates a counting estimator without a division per symbol.
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

typedef struct rc_ctx {
  uint32_t p; /* P(1) in Q24 */
  uint16_t n; /* symbols seen, saturating */
} rc_ctx;

static inline void rc_ctx_init(rc_ctx *c, uint32_t p) {
  c->p = p;
  c->n = 0;
}

static inline __attribute__((always_inline)) uint32_t rc_p15(const rc_ctx *c) {
  uint32_t p = c->p >> 9;
  return p < 1 ? 1 : p > 32767 ? 32767 : p;
}

static inline __attribute__((always_inline)) void rc_adapt(rc_ctx *c, int bit, unsigned limit) {
  unsigned n = c->n + 2u;
  unsigned rate = 31u - (unsigned)__builtin_clz(n);
  if (rate > limit)
    rate = limit;
  else
    c->n++;
  if (bit)
    c->p += (RC_PROB_ONE - c->p) >> rate;
  else
    c->p -= c->p >> rate;
}

typedef struct rc_enc {
  uint64_t low;
  uint32_t range;
  uint8_t cache;
  uint64_t cache_size;
  uint8_t *out;
  size_t pos, cap;
  int overflow;
  int first; /* the first byte out is always 0: not stored */
} rc_enc;

static inline void rc_enc_init(rc_enc *e, uint8_t *out, size_t cap) {
  e->low = 0;
  e->range = 0xFFFFFFFFu;
  e->cache = 0;
  e->cache_size = 1;
  e->out = out;
  e->pos = 0;
  e->cap = cap;
  e->overflow = 0;
  e->first = 1;
}

static inline __attribute__((always_inline)) void rc_put(rc_enc *e, uint8_t b) {
  if (e->first) {
    e->first = 0;
    return;
  }
  if (e->pos < e->cap)
    e->out[e->pos++] = b;
  else
    e->overflow = 1;
}

static inline __attribute__((always_inline)) void rc_shift_low(rc_enc *e) {
  if ((uint32_t)e->low < 0xFF000000u || (e->low >> 32) != 0) {
    uint8_t carry = (uint8_t)(e->low >> 32);
    uint8_t temp = e->cache;
    do {
      rc_put(e, (uint8_t)(temp + carry));
      temp = 0xFF;
    } while (--e->cache_size != 0);
    e->cache = (uint8_t)(e->low >> 24);
  }
  e->cache_size++;
  e->low = (e->low & 0x00FFFFFFu) << 8;
}

static inline __attribute__((always_inline)) void rc_encode(rc_enc *e, rc_ctx *c, int bit, unsigned limit) {
  uint32_t bound = (e->range >> 15) * rc_p15(c);
  if (bit) {
    e->range = bound;
  } else {
    e->low += bound;
    e->range -= bound;
  }
  while (e->range < RC_TOP) {
    e->range <<= 8;
    rc_shift_low(e);
  }
  rc_adapt(c, bit, limit);
}

/* Equiprobable bits, most significant first. nbits <= 64. */
static inline void rc_encode_raw(rc_enc *e, uint64_t v, unsigned nbits) {
  while (nbits-- > 0) {
    e->range >>= 1;
    if ((v >> nbits) & 1)
      e->low += e->range;
    while (e->range < RC_TOP) {
      e->range <<= 8;
      rc_shift_low(e);
    }
  }
}

/* Returns the number of bytes written; check e->overflow. Any value in
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
  for (int i = 0; i < 5; i++)
    rc_shift_low(e);
  while (e->pos > 0 && e->out[e->pos - 1] == 0)
    e->pos--;
  return e->pos;
}

typedef struct rc_dec {
  uint32_t range, code;
  const uint8_t *in;
  size_t pos, len;
} rc_dec;

static inline __attribute__((always_inline)) uint8_t rc_get(rc_dec *d) {
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

static inline __attribute__((always_inline)) int rc_decode(rc_dec *d, rc_ctx *c, unsigned limit) {
  uint32_t bound = (d->range >> 15) * rc_p15(c);
  int bit;
  if (d->code < bound) {
    d->range = bound;
    bit = 1;
  } else {
    d->code -= bound;
    d->range -= bound;
    bit = 0;
  }
  while (d->range < RC_TOP) {
    d->range <<= 8;
    d->code = (d->code << 8) | rc_get(d);
  }
  rc_adapt(c, bit, limit);
  return bit;
}

static inline uint64_t rc_decode_raw(rc_dec *d, unsigned nbits) {
  uint64_t v = 0;
  while (nbits-- > 0) {
    d->range >>= 1;
    int bit = d->code >= d->range;
    if (bit)
      d->code -= d->range;
    v = (v << 1) | (uint64_t)bit;
    while (d->range < RC_TOP) {
      d->range <<= 8;
      d->code = (d->code << 8) | rc_get(d);
    }
  }
  return v;
}

#endif
