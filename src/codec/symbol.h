/* symbol.h: reading, writing and ordering the symbols of a block, shared by
 * the block codings (sparse.c, gaps.c; proto/delta.md "Symbols, keys and
 * steps"). Everything here is inlined with the format's constants folded
 * in: each coding compiles its hot loops once per symbol format. */
#ifndef STITCH_CODEC_SYMBOL_H
#define STITCH_CODEC_SYMBOL_H

#include "codec/delta_internal.h"

#include <stdint.h>
#include <string.h>

#define MI_MAX 2048 /* exponent fields up to 11 bits, integer bit lengths */
#define NCLS 16     /* classes: octaves below the block's largest magnitude */

/* Every symbol format, so each gets its own compiled coder with the
 * format's constants folded in (the hot loops then have no format tests). */
#define FMT_LIST(X)                                                           \
  X(0, 4, 1, 0, 1, 2)   /* E2M1 nibbles */                                    \
  X(1, 8, 1, 0, 3, 4)   /* F8_E4M3 */                                         \
  X(2, 8, 1, 0, 2, 5)   /* F8_E5M2 */                                         \
  X(3, 8, 0, 1, 0, 0)   /* I8 */                                              \
  X(4, 8, 0, 0, 0, 0)   /* U8, BOOL */                                        \
  X(5, 16, 1, 0, 7, 8)  /* BF16 */                                            \
  X(6, 16, 1, 0, 10, 5) /* F16 */                                             \
  X(7, 16, 0, 1, 0, 0)  /* I16 */                                             \
  X(8, 16, 0, 0, 0, 0)  /* U16 */                                             \
  X(9, 32, 1, 0, 23, 8) /* F32 */                                             \
  X(10, 32, 0, 1, 0, 0) /* I32 */                                             \
  X(11, 32, 0, 0, 0, 0) /* U32 */                                             \
  X(12, 64, 1, 0, 52, 11) /* F64 */                                           \
  X(13, 64, 0, 1, 0, 0) /* I64 */                                             \
  X(14, 64, 0, 0, 0, 0) /* U64 */

static inline int fmt_id(const sym_fmt *f) {
#define X(ID, B, FL, SG, MB, EB)                                              \
  if (f->bits == B && f->is_float == FL && f->is_signed == SG &&             \
      f->mant_bits == MB && f->exp_bits == EB)                                \
    return ID;
  FMT_LIST(X)
#undef X
  return -1;
}

/* The largest magnitude index of a format. */
static inline __attribute__((always_inline)) unsigned mi_max_of(const sym_fmt *f,
                                                                unsigned bits) {
  return f->is_float ? (1u << f->exp_bits) - 1 : bits;
}

/* Calls IMPL(&constant_format, bits, ...) for f's format, or yields DFLT. */
#define DISPATCH(f, DFLT, IMPL, ...)                                          \
  switch (fmt_id(f)) {                                                        \
    FMT_LIST(DISPATCH_CASE_)                                                  \
  default:                                                                    \
    return DFLT;                                                              \
  }

static inline __attribute__((always_inline)) uint64_t
ld(const uint8_t *p, uint64_t j, unsigned bits) {
  switch (bits) {
  case 4: return (uint64_t)(p[j >> 1] >> ((j & 1) * 4)) & 15;
  case 8: return p[j];
  case 16: { uint16_t v; memcpy(&v, p + 2 * j, 2); return v; }
  case 32: { uint32_t v; memcpy(&v, p + 4 * j, 4); return v; }
  default: { uint64_t v; memcpy(&v, p + 8 * j, 8); return v; }
  }
}

static inline __attribute__((always_inline)) void
st(uint8_t *p, uint64_t j, unsigned bits, uint64_t v) {
  switch (bits) {
  case 4: {
    unsigned sh = (unsigned)(j & 1) * 4;
    p[j >> 1] = (uint8_t)((p[j >> 1] & ~(15u << sh)) | (unsigned)(v << sh));
    break;
  }
  case 8: p[j] = (uint8_t)v; break;
  case 16: { uint16_t x = (uint16_t)v; memcpy(p + 2 * j, &x, 2); break; }
  case 32: { uint32_t x = (uint32_t)v; memcpy(p + 4 * j, &x, 4); break; }
  default: memcpy(p + 8 * j, &v, 8); break;
  }
}

static inline __attribute__((always_inline)) uint64_t mask_of(unsigned bits) {
  return bits == 64 ? ~0ull : (1ull << bits) - 1;
}

/* Order-preserving key of a sign-magnitude float (negatives: every bit
 * flipped; others: the sign bit set); identity for integers. Written as
 * masks, not a branch on the sign, which is a coin toss. */
static inline __attribute__((always_inline)) uint64_t
key_of(const sym_fmt *f, unsigned bits, uint64_t v) {
  if (!f->is_float)
    return v;
  uint64_t sb = 1ull << (bits - 1);
  return v ^ (((0 - ((v >> (bits - 1)) & 1)) & mask_of(bits)) | sb);
}

static inline __attribute__((always_inline)) uint64_t
unkey(const sym_fmt *f, unsigned bits, uint64_t k) {
  if (!f->is_float)
    return k;
  uint64_t sb = 1ull << (bits - 1);
  return k ^ (((((k >> (bits - 1)) & 1) - 1) & mask_of(bits)) | sb);
}

/* Exponent field, or bit length of the magnitude for integers. */
static inline __attribute__((always_inline)) unsigned
mi_of(const sym_fmt *f, unsigned bits, uint64_t v) {
  if (f->is_float)
    return (unsigned)(v >> f->mant_bits) & ((1u << f->exp_bits) - 1);
  if (f->is_signed && (v >> (bits - 1)) & 1)
    v = ~v & mask_of(bits);
  return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

static inline __attribute__((always_inline)) uint64_t
span_bytes(uint64_t sym, unsigned bits) {
  return bits == 4 ? sym / 2 : sym * (bits / 8);
}

/* The class of a symbol of magnitude index E in a block whose reference
 * is REF: octaves below the block's largest, 0..NCLS-1. */
static inline __attribute__((always_inline)) unsigned class_of(unsigned ref,
                                                               unsigned e) {
  return e >= ref ? 0 : ref - e >= NCLS ? NCLS - 1 : ref - e;
}

/* A changed symbol's step in key space, as a sign and a magnitude >= 1. */
typedef struct step_parts {
  uint32_t neg;
  uint64_t mag;
} step_parts;

/* The difference of the keys of NV and OV, modulo 2^bits. */
static inline __attribute__((always_inline)) uint64_t
key_delta(const sym_fmt *f, unsigned bits, uint64_t ov, uint64_t nv) {
  return (key_of(f, bits, nv) - key_of(f, bits, ov)) & mask_of(bits);
}

/* A key difference KD as a step. */
static inline __attribute__((always_inline)) step_parts
step_of_delta(unsigned bits, uint64_t kd) {
  uint32_t neg = (uint32_t)((kd >> (bits - 1)) & 1);
  return (step_parts){neg, ((kd ^ (0 - (uint64_t)neg)) + neg) & mask_of(bits)};
}

static inline __attribute__((always_inline)) step_parts
step_of(const sym_fmt *f, unsigned bits, uint64_t ov, uint64_t nv) {
  return step_of_delta(bits, key_delta(f, bits, ov, nv));
}

/* The symbol OV moved by the step (NEG, MAG). */
static inline __attribute__((always_inline)) uint64_t
step_apply(const sym_fmt *f, unsigned bits, uint64_t ov, uint32_t neg,
           uint64_t mag) {
  const uint64_t M = mask_of(bits);
  uint64_t kd = ((mag ^ (0 - (uint64_t)neg)) + neg) & M; /* mag or -mag */
  return unkey(f, bits, (key_of(f, bits, ov) + kd) & M);
}

/* A block's ref as a 1- or 2-byte varint (it is below 2^11): returns the
 * bytes written. */
static inline size_t ref_put(unsigned ref, uint8_t *out) {
  out[0] = (uint8_t)(ref < 128 ? ref : (ref & 0x7f) | 0x80);
  if (ref < 128)
    return 1;
  out[1] = (uint8_t)(ref >> 7);
  return 2;
}

/* Reads it back from LEN >= 1 bytes: the bytes read, or 0 when it is not
 * a 1- or 2-byte varint. */
static inline size_t ref_get(const uint8_t *in, size_t len, unsigned *ref) {
  *ref = in[0] & 0x7f;
  if (!(in[0] & 0x80))
    return 1;
  if (len < 2 || in[1] & 0x80)
    return 0;
  *ref |= (unsigned)in[1] << 7;
  return 2;
}

/* The block's class reference: the largest magnitude index of its symbols
 * (proto/delta.md "ref"). */
static inline __attribute__((always_inline)) unsigned
block_ref(const sym_fmt *f, const unsigned bits, const uint8_t *p,
          block_span sp) {
  if (f->is_float) {
    /* Largest magnitude has the largest exponent. Native-width loops (with
     * memcpy loads, so unaligned data is fine) vectorize. */
    const uint8_t *q = p + (bits == 4 ? sp.start / 2 : sp.start * (bits / 8));
    uint64_t mx = 0;
    if (bits == 4) {
      /* Two E2M1 values a byte, exponents in bits 1-2 and 5-6: the largest
       * is 3 when some nibble has both bits set, else 2 when one has the
       * upper, else 1 when one has the lower. 3, the most there is, is
       * common (a scaled block's largest value is 4 or 6): stop there. */
      const uint64_t b1 = 0x2222222222222222ull, b2 = 0x4444444444444444ull;
      uint64_t o1 = 0, o2 = 0, nb = sp.n / 2, j = 0;
      for (; j + 256 <= nb; j += 256) {
        for (unsigned i = 0; i < 256; i += 8) {
          uint64_t w;
          memcpy(&w, q + j + i, 8);
          o1 |= w;
          o2 |= w & (w >> 1);
        }
        if (o2 & b1)
          return 3;
      }
      for (; j < nb; j++) {
        o1 |= q[j];
        o2 |= (uint64_t)(q[j] & (q[j] >> 1));
      }
      return (o2 & b1) ? 3 : (o1 & b2) ? 2 : (o1 & b1) ? 1 : 0;
    } else if (bits == 8) {
      uint8_t m8 = 0;
      for (uint64_t j = 0; j < sp.n; j++) {
        uint8_t v = q[j] & 0x7f;
        m8 = v > m8 ? v : m8;
      }
      mx = m8;
    } else if (bits == 16) {
      uint16_t m16 = 0;
      for (uint64_t j = 0; j < sp.n; j++) {
        uint16_t v;
        memcpy(&v, q + 2 * j, 2);
        v &= 0x7fff;
        m16 = v > m16 ? v : m16;
      }
      mx = m16;
    } else if (bits == 32) {
      uint32_t m32 = 0;
      for (uint64_t j = 0; j < sp.n; j++) {
        uint32_t v;
        memcpy(&v, q + 4 * j, 4);
        v &= 0x7fffffffu;
        m32 = v > m32 ? v : m32;
      }
      mx = m32;
    } else {
      for (uint64_t j = 0; j < sp.n; j++) {
        uint64_t v = ld(p, sp.start + j, bits) & (mask_of(bits) >> 1);
        mx = v > mx ? v : mx;
      }
    }
    return mi_of(f, bits, mx);
  }
  /* Integers: the largest bit length is that of the OR of the magnitudes
   * (NOT v for a negative v), an OR reduction the compiler vectorizes. */
  uint64_t acc = 0;
  if (bits == 8) { /* in bytes, so that a vector holds 16 of them */
    const uint8_t *q = p + sp.start;
    uint8_t a8 = 0;
    for (uint64_t j = 0; j < sp.n; j++)
      a8 |= f->is_signed ? (uint8_t)(q[j] ^ (uint8_t)((int8_t)q[j] >> 7)) : q[j];
    acc = a8;
    return acc ? 64u - (unsigned)__builtin_clzll(acc) : 0u;
  }
  for (uint64_t j = 0; j < sp.n; j++) {
    uint64_t v = ld(p, sp.start + j, bits);
    if (f->is_signed)
      v ^= (0 - ((v >> (bits - 1)) & 1)) & mask_of(bits);
    acc |= v;
  }
  return acc ? 64u - (unsigned)__builtin_clzll(acc) : 0u;
}

#endif
