/* sparse.c: the sparse block coding (proto/delta.md section "SPARSE").
 *
 * A block is coded in groups of 16 symbols. One binary decision per group
 * says whether anything changed; only then are the changes located, by
 * halving the group (about 5 decisions for one change instead of 16 mask
 * bits), and their steps coded. Work therefore scales with n/16 plus the
 * changes, not with n decisions.
 *
 * Contexts come from the base's own values, which every decoder holds, so
 * a node that joined from an anchor decodes like any other:
 *  - class c = clamp(ref - e, 0, 15), e the symbol's exponent field (or bit
 *    length, for integers) and ref the block maximum. A weight one octave
 *    smaller has a rounding step half as large, so under Adam absorption it
 *    changes about twice as often: 2^c is proportional to its chance of
 *    changing. The group flag is coded under the bucket of the group's sum
 *    of 2^c; each halving under the left half's share of that weight.
 *  - a change is a step in key space (keys order floats by value, so one
 *    step of the bit pattern is +-1): its sign under (c/4, sign of the old
 *    value), "is it one step" under c/4, otherwise an Elias-gamma length
 *    with adaptive unary bits and raw low bits. */
#include "codec/delta_internal.h"
#include "codec/rangecoder.h"
#include "common/diag.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stitch assumes a little-endian host (safetensors data is little-endian)"
#endif

#define NCLS 16
#define NGCTX 40
#define NLVL 4  /* tree levels inside a group: node sizes 2-3, 4-7, 8-15, 16 */
#define NQ 8    /* buckets of a left half's share of its node's weight */
#define NUNARY 24
#define GROUP 16
#define MI_MAX 2048 /* exponent fields up to 11 bits, integer bit lengths */

/* Adaptation limits: how slowly each family forgets (2^limit symbols). */
#define LIM_GROUP 9
#define LIM_TREE 8
#define LIM_SIGN 7
#define LIM_MAG 7

typedef struct model {
  rc_ctx group[NGCTX];
  rc_ctx left[NLVL][NQ]; /* does the left half hold a change? */
  rc_ctx right[NGCTX];    /* ... and the right half too, by its weight */
  rc_ctx sign[4][2];
  rc_ctx one[4];
  rc_ctx unary[NUNARY];
  uint8_t cls[MI_MAX + 1];
  uint32_t weight[MI_MAX + 1]; /* 2^cls: a group's expected-changes proxy */
  uint32_t wbyte[256];         /* 1-byte and nibble formats: weight of a byte */
} model;

#define Q24(x) ((uint32_t)((x) * (double)RC_PROB_ONE))

static void model_init(model *m, unsigned ref) {
  for (int i = 0; i < NGCTX; i++)
    rc_ctx_init(&m->group[i], Q24(0.03));
  for (int l = 0; l < NLVL; l++)
    for (int q = 0; q < NQ; q++)
      rc_ctx_init(&m->left[l][q], Q24(0.5));
  for (int i = 0; i < NGCTX; i++)
    rc_ctx_init(&m->right[i], Q24(0.15));
  for (int c = 0; c < 4; c++) {
    rc_ctx_init(&m->sign[c][0], Q24(0.5));
    rc_ctx_init(&m->sign[c][1], Q24(0.5));
    rc_ctx_init(&m->one[c], Q24(0.8));
  }
  for (int i = 0; i < NUNARY; i++)
    rc_ctx_init(&m->unary[i], Q24(0.3));
  for (unsigned e = 0; e <= MI_MAX; e++) {
    m->cls[e] = (uint8_t)(e >= ref ? 0 : ref - e >= NCLS ? NCLS - 1 : ref - e);
    m->weight[e] = 1u << m->cls[e];
  }
}

int sym_fmt_for(stitch_dtype dt, int nibble, sym_fmt *f) {
  memset(f, 0, sizeof(*f));
  size_t sz = stitch_dtype_size(dt);
  if (sz == 0)
    return STITCH_EDTYPE;
  if (nibble) {
    if (sz != 1)
      return STITCH_EFORMAT;
    /* Packed E2M1 pairs (NVFP4): sign, 2 exponent bits, 1 mantissa bit. */
    *f = (sym_fmt){.bits = 4, .is_float = 1, .mant_bits = 1, .exp_bits = 2};
    return 0;
  }
  f->bits = (unsigned)sz * 8;
  switch (dt) {
  case STITCH_DT_BF16: f->is_float = 1, f->mant_bits = 7, f->exp_bits = 8; break;
  case STITCH_DT_F16: f->is_float = 1, f->mant_bits = 10, f->exp_bits = 5; break;
  case STITCH_DT_F32: f->is_float = 1, f->mant_bits = 23, f->exp_bits = 8; break;
  case STITCH_DT_F64: f->is_float = 1, f->mant_bits = 52, f->exp_bits = 11; break;
  case STITCH_DT_F8_E4M3: f->is_float = 1, f->mant_bits = 3, f->exp_bits = 4; break;
  case STITCH_DT_F8_E5M2: f->is_float = 1, f->mant_bits = 2, f->exp_bits = 5; break;
  case STITCH_DT_I8: case STITCH_DT_I16: case STITCH_DT_I32: case STITCH_DT_I64:
    f->is_signed = 1;
    break;
  default:
    break;
  }
  return 0;
}

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

static int fmt_id(const sym_fmt *f) {
#define X(ID, B, FL, SG, MB, EB)                                              \
  if (f->bits == B && f->is_float == FL && f->is_signed == SG &&             \
      f->mant_bits == MB && f->exp_bits == EB)                                \
    return ID;
  FMT_LIST(X)
#undef X
  return -1;
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

/* Order-preserving key of a sign-magnitude float; identity for integers. */
static inline __attribute__((always_inline)) uint64_t
key_of(const sym_fmt *f, unsigned bits, uint64_t v) {
  if (!f->is_float)
    return v;
  uint64_t sb = 1ull << (bits - 1);
  return v ^ ((v & sb) ? mask_of(bits) : sb);
}

static inline __attribute__((always_inline)) uint64_t
unkey(const sym_fmt *f, unsigned bits, uint64_t k) {
  if (!f->is_float)
    return k;
  uint64_t sb = 1ull << (bits - 1);
  return k ^ ((k & sb) ? sb : mask_of(bits));
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

/* Sum of 2^class over symbols [start, start + gn): the group's context.
 * A full group takes the fixed-count loop the compiler unrolls. */
/* For formats of at most 8 bits, a byte's weight (both nibbles' for 4-bit
 * symbols) in one lookup. */
static inline __attribute__((always_inline)) void
model_init_bytes(model *m, const sym_fmt *f, const unsigned bits) {
  if (bits == 4)
    for (unsigned b = 0; b < 256; b++)
      m->wbyte[b] = m->weight[mi_of(f, 4, b & 15)] + m->weight[mi_of(f, 4, b >> 4)];
  else if (bits == 8)
    for (unsigned b = 0; b < 256; b++)
      m->wbyte[b] = m->weight[mi_of(f, 8, b)];
}

static inline __attribute__((always_inline)) uint32_t
group_weight(const model *m, const sym_fmt *f, const unsigned bits,
             const uint8_t *p, uint64_t start, uint64_t gn) {
  uint32_t w = 0;
  if (bits <= 8 && gn == GROUP) {
    const uint8_t *q = p + (bits == 4 ? start / 2 : start);
    for (unsigned j = 0; j < GROUP * bits / 8; j++)
      w += m->wbyte[q[j]];
    return w;
  }
  if (gn == GROUP)
    for (unsigned j = 0; j < GROUP; j++)
      w += m->weight[mi_of(f, bits, ld(p, start + j, bits))];
  else
    for (uint64_t j = 0; j < gn; j++)
      w += m->weight[mi_of(f, bits, ld(p, start + j, bits))];
  return w;
}

/* A group is 8 to 128 bytes: compare words inline, not through a call. */
static inline __attribute__((always_inline)) int
bytes_equal(const uint8_t *a, const uint8_t *b, uint64_t n) {
  uint64_t diff = 0;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    memcpy(&x, a + i, 8);
    memcpy(&y, b + i, 8);
    diff |= x ^ y;
  }
  for (; i < n; i++)
    diff |= (uint64_t)(a[i] ^ b[i]);
  return diff == 0;
}

static inline __attribute__((always_inline)) uint64_t
span_bytes(uint64_t sym, unsigned bits) {
  return bits == 4 ? sym / 2 : sym * (bits / 8);
}

static inline unsigned bucket(uint32_t e) {
  unsigned l = 31u - (unsigned)__builtin_clz(e);
  return 2 * l + (l > 0 ? (e >> (l - 1)) & 1 : 0);
}

/* Node of the position tree over [lo, hi) of a group, known to hold a
 * change: the contexts for "left half holds one" and "right half too". */
typedef struct tnode {
  uint8_t lo, hi;
} tnode;

static inline unsigned tree_level(unsigned size) {
  unsigned l = 30u - (unsigned)__builtin_clz(size); /* 2-3 -> 0, 16 -> 3 */
  return l < NLVL ? l : NLVL - 1;
}

/* floor(NQ * W(lo, mid) / W(lo, hi)) without a division: three compares
 * (NQ = 8). The right half weighs at least 1, so q <= NQ - 1. */
static inline unsigned tree_q(const uint32_t *pw, unsigned lo, unsigned mid,
                              unsigned hi) {
  uint64_t a = (uint64_t)(pw[mid] - pw[lo]) * NQ, n = pw[hi] - pw[lo];
  unsigned q4 = a >= 4 * n;
  a -= q4 * 4 * n;
  unsigned q2 = a >= 2 * n;
  a -= q2 * 2 * n;
  return q4 * 4 + q2 * 2 + (a >= n);
}

static inline __attribute__((always_inline)) unsigned
block_ref(const sym_fmt *f, const unsigned bits, const uint8_t *p,
          block_span sp) {
  unsigned ref = 0;
  if (f->is_float) {
    /* Largest magnitude has the largest exponent. Native-width loops (with
     * memcpy loads, so unaligned data is fine) vectorize. */
    const uint8_t *q = p + (bits == 4 ? sp.start / 2 : sp.start * (bits / 8));
    uint64_t mx = 0;
    if (bits == 4) { /* two E2M1 values a byte: magnitudes in bits 0-2, 4-6 */
      uint8_t lo = 0, hi = 0;
      for (uint64_t j = 0; j < sp.n / 2; j++) {
        uint8_t a = q[j] & 7, b = (q[j] >> 4) & 7;
        lo = a > lo ? a : lo;
        hi = b > hi ? b : hi;
      }
      mx = lo > hi ? lo : hi;
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
  for (uint64_t j = 0; j < sp.n; j++) {
    unsigned e = mi_of(f, bits, ld(p, sp.start + j, bits));
    ref = e > ref ? e : ref;
  }
  return ref;
}

static inline __attribute__((always_inline)) int
encode_impl(const sym_fmt *f, const unsigned bits, const uint8_t *old,
            const uint8_t *nw, block_span sp, uint8_t *out, size_t cap,
            size_t *out_len, uint64_t *changed) {
  if (cap < 2)
    return STITCH_ELIMIT;
  unsigned ref = block_ref(f, bits, old, sp);
  model m;
  model_init(&m, ref);
  model_init_bytes(&m, f, bits);
  /* ref as a 1- or 2-byte varint (it is below 2^11). */
  size_t hl = ref < 128 ? 1 : 2;
  out[0] = (uint8_t)(ref < 128 ? ref : (ref & 0x7f) | 0x80);
  if (hl == 2)
    out[1] = (uint8_t)(ref >> 7);
  rc_enc e;
  rc_enc_init(&e, out + hl, cap - hl);
  const uint64_t M = mask_of(bits);
  uint64_t nchanged = 0;
  for (uint64_t g0 = 0; g0 < sp.n; g0 += GROUP) {
    uint64_t gn = sp.n - g0 < GROUP ? sp.n - g0 : GROUP;
    uint64_t at = sp.start + g0;
    uint32_t ew = group_weight(&m, f, bits, old, at, gn);
    /* Most groups are unchanged: a byte compare settles them. Groups start
     * at even symbols, so nibble groups are whole bytes. */
    const uint8_t *oa = old + span_bytes(at, bits), *na = nw + span_bytes(at, bits);
    int same = gn == GROUP ? bytes_equal(oa, na, span_bytes(GROUP, bits))
                           : bytes_equal(oa, na, span_bytes(gn, bits));
    rc_encode(&e, &m.group[bucket(ew)], !same, LIM_GROUP);
    if (same)
      continue;
    uint64_t ov[GROUP], nv[GROUP];
    uint32_t pw[GROUP + 1] = {0};
    unsigned msk = 0;
    for (uint64_t j = 0; j < gn; j++) {
      ov[j] = ld(old, at + j, bits);
      nv[j] = ld(nw, at + j, bits);
      pw[j + 1] = pw[j] + m.weight[mi_of(f, bits, ov[j])];
      msk |= (unsigned)(ov[j] != nv[j]) << j;
    }
    /* Locate the changes by halving, left first, so they come in order. */
    tnode stk[GROUP];
    int top = 0;
    stk[top++] = (tnode){0, (uint8_t)gn};
    while (top > 0) {
      tnode nd = stk[--top];
      if (nd.hi - nd.lo > 1) {
        unsigned mid = nd.lo + (nd.hi - nd.lo) / 2u;
        int l = (msk & ((1u << mid) - (1u << nd.lo))) != 0;
        int r = (msk & ((1u << nd.hi) - (1u << mid))) != 0;
        rc_encode(&e,
                  &m.left[tree_level(nd.hi - nd.lo)][tree_q(pw, nd.lo, mid,
                                                            nd.hi)],
                  l, LIM_TREE);
        if (l)
          rc_encode(&e, &m.right[bucket(pw[nd.hi] - pw[mid])], r, LIM_TREE);
        if (r)
          stk[top++] = (tnode){(uint8_t)mid, nd.hi};
        if (l)
          stk[top++] = (tnode){nd.lo, (uint8_t)mid};
        continue;
      }
      unsigned j = nd.lo;
      nchanged++;
      uint64_t kd = (key_of(f, bits, nv[j]) - key_of(f, bits, ov[j])) & M;
      int neg = (int)((kd >> (bits - 1)) & 1);
      uint64_t mag = neg ? (0 - kd) & M : kd;
      unsigned sc = m.cls[mi_of(f, bits, ov[j])] >> 2;
      rc_encode(&e, &m.sign[sc][(ov[j] >> (bits - 1)) & 1], neg, LIM_SIGN);
      rc_encode(&e, &m.one[sc], mag == 1, LIM_MAG);
      if (mag != 1) {
        uint64_t r = mag - 1;
        unsigned k = 64u - (unsigned)__builtin_clzll(r); /* 1..bits-1 */
        for (unsigned i = 0; i + 1 < k; i++)
          rc_encode(&e, &m.unary[i < NUNARY ? i : NUNARY - 1], 1, LIM_MAG);
        if (k - 1 < bits - 2)
          rc_encode(&e, &m.unary[k - 1 < NUNARY ? k - 1 : NUNARY - 1], 0,
                    LIM_MAG);
        rc_encode_raw(&e, r, k - 1);
      }
    }
    if (e.overflow)
      return STITCH_ELIMIT;
  }
  size_t n = rc_enc_finish(&e);
  if (e.overflow)
    return STITCH_ELIMIT;
  *out_len = n + hl;
  *changed = nchanged;
  return 0;
}

static inline __attribute__((always_inline)) int
decode_impl(const sym_fmt *f, const unsigned bits, uint8_t *data,
            block_span sp, const uint8_t *in, size_t len, uint64_t *changed,
            stitch_diag *d) {
  RETURN_IF(len < 1, d, STITCH_EFORMAT, "sparse block: payload too short");
  unsigned ref = in[0] & 0x7f;
  size_t hl = 1;
  if (in[0] & 0x80) {
    RETURN_IF(len < 2 || in[1] & 0x80, d, STITCH_EFORMAT,
              "sparse block: bad class reference");
    ref |= (unsigned)in[1] << 7;
    hl = 2;
  }
  unsigned mi_max = f->is_float ? (1u << f->exp_bits) - 1 : bits;
  RETURN_IF(ref > mi_max, d, STITCH_EFORMAT,
            "sparse block: class reference %u out of range", ref);
  model m;
  model_init(&m, ref);
  model_init_bytes(&m, f, bits);
  rc_dec r;
  rc_dec_init(&r, in + hl, len - hl);
  const uint64_t M = mask_of(bits);
  uint64_t nchanged = 0;
  for (uint64_t g0 = 0; g0 < sp.n; g0 += GROUP) {
    uint64_t gn = sp.n - g0 < GROUP ? sp.n - g0 : GROUP;
    uint64_t at = sp.start + g0;
    if (!rc_decode(&r, &m.group[bucket(group_weight(&m, f, bits, data, at, gn))],
                   LIM_GROUP))
      continue;
    uint32_t pw[GROUP + 1];
    pw[0] = 0;
    for (uint64_t j = 0; j < gn; j++)
      pw[j + 1] = pw[j] + m.weight[mi_of(f, bits, ld(data, at + j, bits))];
    tnode stk[GROUP];
    int top = 0;
    stk[top++] = (tnode){0, (uint8_t)gn};
    while (top > 0) {
      tnode nd = stk[--top];
      if (nd.hi - nd.lo > 1) {
        unsigned mid = nd.lo + (nd.hi - nd.lo) / 2u;
        int l = rc_decode(
            &r, &m.left[tree_level(nd.hi - nd.lo)][tree_q(pw, nd.lo, mid, nd.hi)],
            LIM_TREE);
        int rr = l ? rc_decode(&r, &m.right[bucket(pw[nd.hi] - pw[mid])],
                               LIM_TREE)
                   : 1;
        if (rr)
          stk[top++] = (tnode){(uint8_t)mid, nd.hi};
        if (l)
          stk[top++] = (tnode){nd.lo, (uint8_t)mid};
        continue;
      }
      nchanged++;
      uint64_t pos = sp.start + g0 + nd.lo;
      uint64_t ov = ld(data, pos, bits);
      unsigned sc = m.cls[mi_of(f, bits, ov)] >> 2;
      int neg = rc_decode(&r, &m.sign[sc][(ov >> (bits - 1)) & 1], LIM_SIGN);
      uint64_t mag = 1;
      if (!rc_decode(&r, &m.one[sc], LIM_MAG)) {
        unsigned k = 1;
        while (k - 1 < bits - 2 &&
               rc_decode(&r, &m.unary[k - 1 < NUNARY ? k - 1 : NUNARY - 1],
                         LIM_MAG))
          k++;
        uint64_t r0 = (1ull << (k - 1)) | rc_decode_raw(&r, k - 1);
        mag = r0 + 1;
      }
      uint64_t kd = neg ? (0 - mag) & M : mag;
      st(data, pos, bits, unkey(f, bits, (key_of(f, bits, ov) + kd) & M));
    }
  }
  /* The encoder drops trailing zero bytes (the decoder reads zeros past the
   * end), so the decoder may run a few bytes past; more means damage. */
  RETURN_IF(r.pos > r.len + 10, d, STITCH_EFORMAT,
            "sparse block: coded data ends early");
  *changed = nchanged;
  return 0;
}

int sparse_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                  block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                  uint64_t *changed) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return encode_impl(&k_, B, old, new_, sp, out, cap, out_len, changed);                                                   \
  }
  DISPATCH(f, STITCH_EINVAL, encode_impl)
#undef DISPATCH_CASE_
}

int sparse_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                  const uint8_t *in, size_t len, uint64_t *changed,
                  stitch_diag *d) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return decode_impl(&k_, B, data, sp, in, len, changed, d);                                                   \
  }
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
#undef DISPATCH_CASE_
}

static inline __attribute__((always_inline)) int
steps_impl(const sym_fmt *f, const unsigned bits, const uint8_t *old,
           const uint8_t *nw, block_span sp, step_hist *h) {
  const uint64_t M = mask_of(bits);
  for (uint64_t j = 0; j < sp.n; j++) {
    uint64_t ov = ld(old, sp.start + j, bits), nv = ld(nw, sp.start + j, bits);
    if (ov == nv)
      continue;
    uint64_t kd = (key_of(f, bits, nv) - key_of(f, bits, ov)) & M;
    uint64_t sx = (kd >> (bits - 1)) & 1 ? kd | ~M : kd; /* sign-extend */
    int64_t step = (int64_t)sx;
    h->total++;
    if (bits <= 16) {
      h->h16[step + 32768]++;
      continue;
    }
    if (h->nbig == h->capbig) {
      size_t nc = h->capbig ? h->capbig * 2 : 4096;
      if (nc > ((size_t)1 << 28))
        return STITCH_ELIMIT;
      int64_t *nb = realloc(h->big, nc * sizeof(*nb));
      if (nb == NULL)
        return STITCH_ENOMEM;
      h->big = nb;
      h->capbig = nc;
    }
    h->big[h->nbig++] = step;
  }
  return 0;
}

int sparse_steps(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                 block_span sp, step_hist *h) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return steps_impl(&k_, B, old, new_, sp, h);                                                   \
  }
  DISPATCH(f, STITCH_EINVAL, steps_impl)
#undef DISPATCH_CASE_
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double plogp_sum(uint64_t c, uint64_t total) {
  return c ? (double)c * log2((double)total / (double)c) : 0.0;
}

double step_hist_take_bits(step_hist *h) {
  double bits = 0;
  uint64_t total = h->total;
  if (total > 0) {
    if (h->h16 != NULL)
      for (int i = 0; i <= 65536; i++) {
        bits += plogp_sum(h->h16[i], total);
        h->h16[i] = 0;
      }
    if (h->nbig > 0)
      qsort(h->big, h->nbig, sizeof(*h->big), cmp_i64);
    for (size_t i = 0, j; i < h->nbig; i = j) {
      for (j = i; j < h->nbig && h->big[j] == h->big[i]; j++)
        ;
      bits += plogp_sum(j - i, total);
    }
  }
  h->nbig = 0;
  h->total = 0;
  return bits;
}

static inline __attribute__((always_inline)) uint64_t
count_impl(const sym_fmt *f, const unsigned bits, const uint8_t *old, const uint8_t *nw,
           block_span sp) {
  uint64_t n = 0;
  for (uint64_t j = 0; j < sp.n; j++)
    n += ld(old, sp.start + j, bits) != ld(nw, sp.start + j, bits);
  return n;
}

uint64_t sparse_count(const sym_fmt *f, const uint8_t *old,
                      const uint8_t *new_, block_span sp) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return count_impl(&k_, B, old, new_, sp);                                                   \
  }
  DISPATCH(f, 0, count_impl)
#undef DISPATCH_CASE_
}
