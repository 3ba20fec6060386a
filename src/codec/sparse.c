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
 *    with adaptive unary bits and raw low bits.
 *
 * Speed (the bytes are fixed by format 1; only the work to produce them
 * changed): a block is coded a chunk of 64 groups at a time. One vector
 * scan gives the chunk's group buckets (sparse_scan.h; for E2M1 nibbles
 * a table lookup and a byte sum), and for the encoder one vector compare
 * marks its changed groups. The unchanged groups' flags, most decisions
 * of a block, are coded a run at a time without the selects a coin-flip
 * bit needs. A changed group, in an out-of-line function per format so
 * that the flag loop keeps the coder state in registers, computes its own
 * classes and all 15 of its tree nodes' contexts in one vector pass, then
 * walks the nodes that hold a change as the set bits of a preorder mask
 * (no stack). Coin-flip decisions are branch-free (rangecoder.h). */
#include "codec/delta_internal.h"
#include "codec/rangecoder.h"
#include "codec/sparse_scan.h"
#include "codec/symbol.h"
#include "common/diag.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stitch assumes a little-endian host (safetensors data is little-endian)"
#endif

#define NGCTX 40
#define NLVL 4  /* tree levels inside a group: node sizes 2-3, 4-7, 8-15, 16 */
#define NQ 8    /* buckets of a left half's share of its node's weight */
#define NUNARY 24
#define GROUP 16

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
  unsigned ref;
  unsigned lim_group; /* LIM_GROUP, or SPARSEK's from the block's density */
  uint8_t nib_w[16]; /* weight 2^c of each E2M1 nibble value */
  uint8_t cls[MI_MAX + 1]; /* class of each magnitude index up to mi_max */
} model;

#define Q24(x) ((uint32_t)((x) * (double)RC_PROB_ONE))

/* SPARSEK's warm start (proto/delta.md "SPARSEK"), from the index's count
 * K of changes among the block's N symbols (1 <= K <= N), in integers so
 * that a second implementation gets the same bits:
 *  - group contexts start at pg = min(1/2, 16 K / N) (the chance that a
 *    group of 16 holds a change, a little high at high density) instead
 *    of SPARSE's 3 %, with a count worth about one expected changed group
 *    (m = 1 / pg) and a window of at least 4 / pg groups (2^9 to 2^14):
 *    at 0.02 % density a group changes once in 300, and SPARSE's contexts
 *    spent their first few hundred groups learning that, while their
 *    window of 512 saw one or two changes, each moving the estimate by
 *    half of itself;
 *  - right contexts ("the right half changed too") start at
 *    min(0.15, 8 K / N), not 0.15: at low density a group holds one
 *    change, and every "left half" 1 paid 0.23 bits for it.
 * On the synthetic NVFP4 trajectories of docs/codec.md this took the coded
 * changes from 1.03-1.19 of their bound to 1.02-1.09. */
static void warm_model(model *m, uint64_t k, uint64_t n) {
  const uint32_t lo = 1u << 10; /* q = p >> 9 stays >= 2 */
  uint64_t pg = n ? (k << 28) / n : 0; /* 16 K / N in Q24; K <= 2^24 */
  pg = pg < lo ? lo : pg > RC_PROB_ONE / 2 ? RC_PROB_ONE / 2 : pg;
  unsigned lim = 9;
  while (lim < 14 && (pg << lim) < (4ull << 24))
    lim++;
  uint64_t m0 = RC_PROB_ONE / pg;
  m0 = m0 < 2 ? 2 : m0 > (1u << lim) ? 1u << lim : m0;
  for (int i = 0; i < NGCTX; i++) {
    rc_ctx_init(&m->group[i], (uint32_t)pg);
    m->group[i].m = (uint16_t)m0;
  }
  m->lim_group = lim;
  uint64_t pr = n ? (k << 27) / n : 0; /* 8 K / N */
  pr = pr < lo ? lo : pr > Q24(0.15) ? Q24(0.15) : pr;
  for (int i = 0; i < NGCTX; i++)
    rc_ctx_init(&m->right[i], (uint32_t)pr);
}

/* mi_max is the format's largest magnitude index: the scalar paths look
 * classes up in m->cls up to it. */
static void model_init(model *m, unsigned ref, unsigned mi_max) {
  for (int i = 0; i < NGCTX; i++)
    rc_ctx_init(&m->group[i], Q24(0.03));
  m->lim_group = LIM_GROUP;
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
  m->ref = ref;
  for (unsigned v = 0; v < 16; v++) { /* E2M1 (ref <= 3): exponent bits 1-2 */
    unsigned e = (v >> 1) & 3;
    m->nib_w[v] = (uint8_t)(ref <= 3 ? 1u << (e >= ref ? 0 : ref - e) : 0);
  }
  for (unsigned e = 0; e <= mi_max; e++)
    m->cls[e] = (uint8_t)class_of(ref, e);
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


/* 2 floor(log2 e) plus the bit below the leading one (e >= 1). */
static inline __attribute__((always_inline)) unsigned bucket(uint32_t e) {
  unsigned l = 31u - (unsigned)__builtin_clz(e);
  return 2 * l + (((e << 1) >> l) & 1);
}

/* floor(NQ * a / n) for a < n, without a division: three compares
 * (NQ = 8). */
static inline __attribute__((always_inline)) unsigned tree_q(uint32_t a32,
                                                             uint32_t n32) {
  uint64_t a = (uint64_t)a32 * NQ, n = n32;
  unsigned q4 = a >= 4 * n;
  a -= q4 * 4 * n;
  unsigned q2 = a >= 2 * n;
  a -= q2 * 2 * n;
  return q4 * 4 + q2 * 2 + (a >= n);
}

/* Groups per chunk: the chunk's buckets and change mask come from one
 * pass over its bytes, and the flag loop then reads them back. */
#define CHUNK 64
_Static_assert(SPARSE_PROBE_STEP == CHUNK * GROUP, "a probe ends a chunk");

/* Each group's context bucket, for NG full groups from symbol AT of P. */
static inline __attribute__((always_inline)) void
group_buckets(const model *m, const sym_fmt *f, const unsigned bits,
              const uint8_t *p, uint64_t at, unsigned ng, uint8_t *bkt,
              int avx2) {
  (void)avx2;
#ifdef SCAN_SSE2
  if (SCAN_FITS(f->is_float, bits)) {
    const uint8_t *q = p + span_bytes(at, bits);
    const unsigned emask = (1u << f->exp_bits) - 1;
#ifdef SCAN_AVX2
    if (avx2) {
      scan_buckets_avx2(q, bits, f->mant_bits, emask, !f->is_float,
                        f->is_signed, m->ref, m->nib_w, ng, bkt);
      return;
    }
#endif
    scan_buckets(q, bits, f->mant_bits, emask, !f->is_float, f->is_signed,
                 m->ref, ng, bkt);
    return;
  }
#endif
  for (unsigned g = 0; g < ng; g++) {
    uint32_t w = 0;
    for (unsigned j = 0; j < GROUP; j++)
      w += 1u << m->cls[mi_of(f, bits, ld(p, at + GROUP * g + j, bits))];
    bkt[g] = (uint8_t)bucket(w);
  }
}

#ifndef SCAN_SSE2
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
#endif

/* Bit g set when full group g of the NG from symbol AT differs. */
static inline __attribute__((always_inline)) uint64_t
groups_differ(const unsigned bits, const uint8_t *old, const uint8_t *nw,
              uint64_t at, unsigned ng, int avx2) {
  const unsigned gbytes = GROUP * bits / 8;
  const uint8_t *a = old + span_bytes(at, bits), *b = nw + span_bytes(at, bits);
  (void)avx2;
#ifdef SCAN_AVX2
  if (avx2)
    return scan_groups_differ_avx2(a, b, gbytes, ng);
#endif
#ifdef SCAN_SSE2
  return scan_groups_differ(a, b, gbytes, ng);
#else
  uint64_t m = 0;
  for (unsigned g = 0; g < ng; g++)
    m |= (uint64_t)!bytes_equal(a + g * gbytes, b + g * gbytes, gbytes) << g;
  return m;
#endif
}

/* Bit j set when symbol j of the full group at symbol AT differs. */
static inline __attribute__((always_inline)) unsigned
symbols_differ(const unsigned bits, const uint8_t *old, const uint8_t *nw,
               uint64_t at) {
#ifdef SCAN_SSE2
  if (bits <= 32)
    return scan_symbols_differ(old + span_bytes(at, bits),
                               nw + span_bytes(at, bits), bits);
#endif
  unsigned msk = 0;
  for (unsigned j = 0; j < GROUP; j++)
    msk |= (unsigned)(ld(old, at + j, bits) != ld(nw, at + j, bits)) << j;
  return msk;
}

static inline __attribute__((always_inline)) unsigned heap_level(unsigned k) {
  return (unsigned)__builtin_clz(k) - 28u; /* 1 -> 3, 2-3 -> 2, ... 8-15 -> 0 */
}

/* The position tree of a full group is the heap: node 1 is the group,
 * node k has halves 2k and 2k+1, leaves 16..31 are the symbols. Full
 * groups halve evenly, so node k at depth D covers [(k - 2^D) 16 / 2^D,
 * ...) exactly as proto/delta.md's halving does, its left half is 2k and
 * its tree level is 3 - D. This computes the group's classes into CLS and
 * each inner node's two contexts, LQ[k] = level * NQ + floor(NQ W(2k) /
 * W(k)) into the left family and RB[k] = bucket(W(2k + 1)) into the right
 * one (W a span's weight sum), before the walk needs them. */
static inline __attribute__((always_inline)) void
group_tree(const model *m, const sym_fmt *f, const unsigned bits,
           const uint8_t *p, uint64_t at, uint8_t *cls, uint8_t *lq,
           uint8_t *rb) {
#ifdef SCAN_SSE2
  if (SCAN_FITS(f->is_float, bits)) {
    scan_group_tree(p + span_bytes(at, bits), bits, f->mant_bits,
                    (1u << f->exp_bits) - 1, !f->is_float, f->is_signed,
                    m->ref, cls, lq, rb);
    return;
  }
#endif
  uint32_t W[2 * GROUP];
  for (unsigned j = 0; j < GROUP; j++) {
    cls[j] = m->cls[mi_of(f, bits, ld(p, at + j, bits))];
    W[GROUP + j] = 1u << cls[j];
  }
  for (unsigned k = GROUP - 1; k > 0; k--) {
    W[k] = W[2 * k] + W[2 * k + 1];
    lq[k] = (uint8_t)(heap_level(k) * NQ + tree_q(W[2 * k], W[k]));
    rb[k] = (uint8_t)bucket(W[2 * k + 1]);
  }
}

/* A partial group (the last of a tensor, g < 16 symbols) halves unevenly;
 * it keeps the general walk over [lo, hi) nodes and prefix weights. */
typedef struct tnode {
  uint8_t lo, hi;
} tnode;

static inline unsigned tree_level(unsigned size) {
  unsigned l = 30u - (unsigned)__builtin_clz(size); /* 2-3 -> 0, 16 -> 3 */
  return l < NLVL ? l : NLVL - 1;
}


/* The step of a changed symbol (item 3 of proto/delta.md's symbol order);
 * C is its class. */
static inline __attribute__((always_inline)) void
encode_step(rc_enc *e, model *m, const sym_fmt *f, const unsigned bits,
            uint64_t ov, uint64_t nv, unsigned c) {
  step_parts s = step_of(f, bits, ov, nv);
  uint32_t neg = s.neg;
  uint64_t mag = s.mag;
  unsigned sc = c >> 2;
  rc_encode(e, &m->sign[sc][(ov >> (bits - 1)) & 1], neg, LIM_SIGN);
  rc_encode(e, &m->one[sc], mag == 1, LIM_MAG);
  if (__builtin_expect(mag != 1, 0)) {
    uint64_t r = mag - 1;
    unsigned k = 64u - (unsigned)__builtin_clzll(r); /* 1..bits-1 */
    for (unsigned i = 0; i + 1 < k; i++)
      rc_encode(e, &m->unary[i < NUNARY ? i : NUNARY - 1], 1, LIM_MAG);
    if (k - 1 < bits - 2)
      rc_encode(e, &m->unary[k - 1 < NUNARY ? k - 1 : NUNARY - 1], 0, LIM_MAG);
    rc_encode_raw(e, r, k - 1);
  }
}

/* Decodes the step of the symbol holding OV (class C); returns its new
 * value. */
static inline __attribute__((always_inline)) uint64_t
decode_step(rc_dec *r, model *m, const sym_fmt *f, const unsigned bits,
            uint64_t ov, unsigned c) {
  unsigned sc = c >> 2;
  uint32_t neg = rc_decode(r, &m->sign[sc][(ov >> (bits - 1)) & 1], LIM_SIGN);
  uint64_t mag = 1;
  if (__builtin_expect(!rc_decode(r, &m->one[sc], LIM_MAG), 0)) {
    unsigned k = 1;
    while (k - 1 < bits - 2 &&
           rc_decode(r, &m->unary[k - 1 < NUNARY ? k - 1 : NUNARY - 1], LIM_MAG))
      k++;
    mag = ((1ull << (k - 1)) | rc_decode_raw(r, k - 1)) + 1;
  }
  return step_apply(f, bits, ov, neg, mag);
}

/* The walk over a full group's position tree in the order of
 * proto/delta.md (a node, then its left subtree, then its right) is the
 * preorder of the heap: PRE_NODE[i] is the node visited i-th among all 31.
 * An inner node at preorder position i has its left half at i + 1 and
 * its right half at PRE_RIGHT[i] = i + 2^(level+1), past the left
 * subtree's 2^(level+1) - 1 nodes. So a 32-bit mask over preorder
 * positions stands in for the stack: the encoder builds it from the
 * change mask (the nodes that hold a change are exactly those visited)
 * and walks its set bits in order; the decoder sets the halves it learns
 * of and takes the lowest pending bit next. */
static const uint8_t PRE_NODE[31] = {1,  2,  4,  8,  16, 17, 9,  18, 19, 5,  10,
                                     20, 21, 11, 22, 23, 3,  6,  12, 24, 25, 13,
                                     26, 27, 7,  14, 28, 29, 15, 30, 31};
static const uint8_t PRE_RIGHT[31] = {16, 9, 6,  5,  0,  0,  8,  0,  0,  13, 12,
                                      0,  0, 15, 0,  0,  24, 21, 20, 0,  0,  23,
                                      0,  0, 28, 27, 0,  0,  30, 0,  0};

/* Preorder bits of an 8-symbol half's 15 nodes from its 8 change bits:
 * the half's node, then for each 4-symbol quarter its node, its first
 * pair's node and 2 leaves, its second pair's node and 2 leaves. */
#define PRE7_(n)                                                              \
  (((n) != 0) | (((n) & 3) != 0) << 1 | ((n) & 1) << 2 |                      \
   (((n) >> 1) & 1) << 3 | (((n) & 12) != 0) << 4 | (((n) >> 2) & 1) << 5 |   \
   (((n) >> 3) & 1) << 6)
#define PRE15_(b) (uint16_t)(((b) != 0) | PRE7_((b) & 15) << 1 | PRE7_((b) >> 4) << 8)
#define PRE4_(b) PRE15_(b), PRE15_((b) + 1), PRE15_((b) + 2), PRE15_((b) + 3)
#define PRE16_(b) PRE4_(b), PRE4_((b) + 4), PRE4_((b) + 8), PRE4_((b) + 12)
#define PRE64_(b) PRE16_(b), PRE16_((b) + 16), PRE16_((b) + 32), PRE16_((b) + 48)
static const uint16_t PRE_HALF[256] = {PRE64_(0), PRE64_(64), PRE64_(128),
                                       PRE64_(192)};
#undef PRE7_
#undef PRE15_
#undef PRE4_
#undef PRE16_
#undef PRE64_

/* The nodes of a full group's tree that hold a change, MSK != 0, as
 * preorder bits: the root, the first half's 15 nodes, the second's. */
static inline __attribute__((always_inline)) uint32_t tree_visits(unsigned msk) {
  return 1u | (uint32_t)PRE_HALF[msk & 255] << 1 |
         (uint32_t)PRE_HALF[msk >> 8] << 16;
}

/* A full group known to hold a change: its positions by halving, each
 * change's step right after it. Returns the number of changes. */
static inline __attribute__((always_inline)) uint64_t
encode_group16(rc_enc *e, model *m, const sym_fmt *f, const unsigned bits,
               const uint8_t *old, const uint8_t *nw, uint64_t at) {
  uint8_t cls[GROUP], lq[GROUP], rb[GROUP];
  group_tree(m, f, bits, old, at, cls, lq, rb);
  uint32_t vis = tree_visits(symbols_differ(bits, old, nw, at));
  rc_ctx *left = &m->left[0][0];
  uint64_t n = 0;
  for (uint32_t todo = vis; todo != 0; todo &= todo - 1) {
    unsigned i = (unsigned)__builtin_ctz(todo), k = PRE_NODE[i];
    if (k >= GROUP) {
      unsigned j = k - GROUP;
      encode_step(e, m, f, bits, ld(old, at + j, bits), ld(nw, at + j, bits),
                  cls[j]);
      n++;
      continue;
    }
    uint32_t l = (vis >> (i + 1)) & 1, rr = (vis >> PRE_RIGHT[i]) & 1;
    rc_encode(e, &left[lq[k]], l, LIM_TREE);
    if (l)
      rc_encode(e, &m->right[rb[k]], rr, LIM_TREE);
  }
  return n;
}

/* The decoder's walk; classes come from the base before the group is
 * patched (a group's patches touch only its own bytes). */
static inline __attribute__((always_inline)) uint64_t
decode_group16(rc_dec *r, model *m, const sym_fmt *f, const unsigned bits,
               uint8_t *data, uint64_t at) {
  uint8_t cls[GROUP], lq[GROUP], rb[GROUP];
  group_tree(m, f, bits, data, at, cls, lq, rb);
  rc_ctx *left = &m->left[0][0];
  uint64_t n = 0;
  uint32_t todo = 1;
  while (todo != 0) {
    unsigned i = (unsigned)__builtin_ctz(todo), k = PRE_NODE[i];
    todo &= todo - 1;
    if (k >= GROUP) {
      uint64_t pos = at + k - GROUP;
      uint64_t ov = ld(data, pos, bits);
      st(data, pos, bits, decode_step(r, m, f, bits, ov, cls[k - GROUP]));
      n++;
      continue;
    }
    /* "and the right half too" is coded only after a 1 on the left. (A
     * masked, branch-free decision here was no faster: it spends a whole
     * decision's work on every left 0 to save the branch.) */
    uint32_t l = rc_decode_mask(r, &left[lq[k]], LIM_TREE) & 1;
    uint32_t rr = l ? rc_decode_mask(r, &m->right[rb[k]], LIM_TREE) & 1 : 1;
    todo |= l << (i + 1) | rr << PRE_RIGHT[i];
  }
  return n;
}

/* Prefix weights of a partial group of GN < 16 symbols at AT. */
static inline __attribute__((always_inline)) uint32_t
partial_weights(const model *m, const sym_fmt *f, const unsigned bits,
                const uint8_t *p, uint64_t at, unsigned gn, uint32_t *pw) {
  pw[0] = 0;
  for (unsigned j = 0; j < gn; j++)
    pw[j + 1] = pw[j] + (1u << m->cls[mi_of(f, bits, ld(p, at + j, bits))]);
  return pw[gn];
}

static inline __attribute__((always_inline)) uint64_t
encode_partial(rc_enc *e, model *m, const sym_fmt *f, const unsigned bits,
               const uint8_t *old, const uint8_t *nw, uint64_t at,
               unsigned gn) {
  uint32_t pw[GROUP + 1];
  partial_weights(m, f, bits, old, at, gn, pw);
  unsigned msk = 0;
  for (unsigned j = 0; j < gn; j++)
    msk |= (unsigned)(ld(old, at + j, bits) != ld(nw, at + j, bits)) << j;
  rc_encode(e, &m->group[bucket(pw[gn])], msk != 0, m->lim_group);
  if (msk == 0)
    return 0;
  tnode stk[GROUP];
  unsigned top = 0, n = 0;
  stk[top++] = (tnode){0, (uint8_t)gn};
  while (top > 0) {
    tnode nd = stk[--top];
    if (nd.hi - nd.lo > 1) {
      unsigned mid = nd.lo + (nd.hi - nd.lo) / 2u;
      uint32_t l = (msk & ((1u << mid) - (1u << nd.lo))) != 0;
      uint32_t r = (msk & ((1u << nd.hi) - (1u << mid))) != 0;
      rc_encode(e,
                &m->left[tree_level(nd.hi - nd.lo)]
                        [tree_q(pw[mid] - pw[nd.lo], pw[nd.hi] - pw[nd.lo])],
                l, LIM_TREE);
      if (l)
        rc_encode(e, &m->right[bucket(pw[nd.hi] - pw[mid])], r, LIM_TREE);
      if (r)
        stk[top++] = (tnode){(uint8_t)mid, nd.hi};
      if (l)
        stk[top++] = (tnode){nd.lo, (uint8_t)mid};
      continue;
    }
    unsigned j = nd.lo;
    uint64_t ov = ld(old, at + j, bits);
    encode_step(e, m, f, bits, ov, ld(nw, at + j, bits),
                m->cls[mi_of(f, bits, ov)]);
    n++;
  }
  return n;
}

static inline __attribute__((always_inline)) uint64_t
decode_partial(rc_dec *r, model *m, const sym_fmt *f, const unsigned bits,
               uint8_t *data, uint64_t at, unsigned gn) {
  uint32_t pw[GROUP + 1];
  partial_weights(m, f, bits, data, at, gn, pw);
  if (!rc_decode(r, &m->group[bucket(pw[gn])], m->lim_group))
    return 0;
  tnode stk[GROUP];
  unsigned top = 0, n = 0;
  stk[top++] = (tnode){0, (uint8_t)gn};
  while (top > 0) {
    tnode nd = stk[--top];
    if (nd.hi - nd.lo > 1) {
      unsigned mid = nd.lo + (nd.hi - nd.lo) / 2u;
      uint32_t l = rc_decode(
          r,
          &m->left[tree_level(nd.hi - nd.lo)]
                  [tree_q(pw[mid] - pw[nd.lo], pw[nd.hi] - pw[nd.lo])],
          LIM_TREE);
      uint32_t rr =
          l ? rc_decode(r, &m->right[bucket(pw[nd.hi] - pw[mid])], LIM_TREE) : 1;
      if (rr)
        stk[top++] = (tnode){(uint8_t)mid, nd.hi};
      if (l)
        stk[top++] = (tnode){nd.lo, (uint8_t)mid};
      continue;
    }
    uint64_t pos = at + nd.lo;
    uint64_t ov = ld(data, pos, bits);
    st(data, pos, bits,
       decode_step(r, m, f, bits, ov, m->cls[mi_of(f, bits, ov)]));
    n++;
  }
  return n;
}

/* The changed-group coders, one out-of-line copy per symbol format. The
 * group-flag loop that calls them runs for every group and must keep the
 * coder state in registers; inlining the whole position walk into it made
 * GCC spill low and range to the stack on every flag. So the walk gets its
 * own function, and the loop hands it a copy of the state, so that the
 * loop's own state never has its address taken. */
typedef uint64_t (*enc_group_fn)(rc_enc *e, model *m, const uint8_t *old,
                                 const uint8_t *nw, uint64_t at);
typedef uint64_t (*dec_group_fn)(rc_dec *r, model *m, uint8_t *data,
                                 uint64_t at);
#define X(ID, B, FL, SG, MB, EB)                                              \
  static __attribute__((noinline)) uint64_t enc_group_##ID(                  \
      rc_enc *e, model *m, const uint8_t *old, const uint8_t *nw,             \
      uint64_t at) {                                                          \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    rc_enc t = *e;                                                            \
    uint64_t n = encode_group16(&t, m, &k_, B, old, nw, at);                  \
    *e = t;                                                                   \
    return n;                                                                 \
  }                                                                           \
  static __attribute__((noinline)) uint64_t dec_group_##ID(                  \
      rc_dec *r, model *m, uint8_t *data, uint64_t at) {                      \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    rc_dec t = *r;                                                            \
    uint64_t n = decode_group16(&t, m, &k_, B, data, at);                     \
    *r = t;                                                                   \
    return n;                                                                 \
  }
FMT_LIST(X)
#undef X

/* The length that coding the block's first probe->at symbols alone, with
 * a cap of probe->cap, would give: finish a copy of the coder state, into
 * OUT past the bytes so far (the block's own coding overwrites them
 * later). The two codings are the same up to here (the caller checks that
 * the prefix has the block's ref), except that the prefix fails once it
 * emits more than its cap. */
static void probe_finish(const rc_enc *e, const rc_out *eo, size_t hl,
                         sparse_probe *probe) {
  rc_enc t = *e;
  rc_out to = *eo;
  t.o = &to;
  probe->len = 0;
  if (probe->cap < hl + to.pos)
    return;
  to.cap = probe->cap - hl;
  size_t n = rc_enc_finish(&t);
  if (!to.overflow)
    probe->len = n + hl;
}

static inline __attribute__((always_inline)) int
encode_impl(const sym_fmt *f, const unsigned bits, const uint8_t *old,
            const uint8_t *nw, block_span sp, uint8_t *out, size_t cap,
            size_t *out_len, uint64_t *changed, int *dropped,
            sparse_probe *probe, enc_group_fn group_fn, int known,
            uint64_t k, sparse_trunc *tr, const codec_run *run) {
  if (cap < 2)
    return STITCH_ELIMIT;
  unsigned ref = block_ref(f, bits, old, sp);
  model m;
  model_init(&m, ref, mi_max_of(f, bits));
  /* SPARSEK: no ref (the decoder finds it in the base), warm group
   * contexts, and nothing after the K-th change. */
  size_t hl = 0;
  if (known)
    warm_model(&m, k, sp.n);
  else
    hl = ref_put(ref, out);
  rc_enc e;
  rc_out eo;
  rc_enc_init(&e, &eo, out + hl, cap - hl);
  uint64_t nchanged = 0, nfull = sp.n / GROUP, stop = sp.start + sp.n;
  const unsigned lg = m.lim_group; /* a local: the flag loop's stores
                                      cannot be taken to change it */
  /* SPARSET (TR): the coder's state after the last changed group; the
   * bytes it has put out stay as they are (a carry moves only the cached
   * byte and the pending 0xFFs, which the state holds). */
  rc_enc se = e;
  rc_out so = eo;
  uint8_t bkt[CHUNK];
  int avx2 = codec_avx2() && !run->scalar;
  for (uint64_t g0 = 0; g0 < nfull; g0 += CHUNK) {
    unsigned ng = nfull - g0 < CHUNK ? (unsigned)(nfull - g0) : CHUNK;
    uint64_t at = sp.start + g0 * GROUP;
    group_buckets(&m, f, bits, old, at, ng, bkt, avx2);
    /* Most groups are unchanged: a byte compare settles them, and their
     * flags are coded a run at a time up to the next changed group.
     * Groups start at even symbols, so nibble groups are whole bytes. */
    uint64_t chg = groups_differ(bits, old, nw, at, ng, avx2);
    unsigned g = 0;
    for (; chg != 0; chg &= chg - 1) {
      unsigned j = (unsigned)__builtin_ctzll(chg);
      for (; g < j; g++)
        rc_encode_known(&e, &m.group[bkt[g]], 0, lg);
      rc_encode_known(&e, &m.group[bkt[j]], 1, lg);
      rc_enc t = e;
      nchanged += group_fn(&t, &m, old, nw, at + GROUP * j);
      e = t;
      g = j + 1;
      if (tr != NULL)
        se = e, so = eo;
      if (known && nchanged >= k) {
        stop = at + GROUP * (j + 1);
        goto done;
      }
    }
    for (; g < ng; g++)
      rc_encode_known(&e, &m.group[bkt[g]], 0, lg);
    if (eo.overflow) { /* past the cap: the caller codes the block densely */
      *dropped = eo.dropped != 0;
      return STITCH_ELIMIT; /* and a probe's prefix fails too (its cap is less) */
    }
    if (probe != NULL && (g0 + ng) * GROUP == probe->at)
      probe_finish(&e, &eo, hl, probe);
  }
  if (sp.n % GROUP && !(known && nchanged >= k)) {
    uint64_t pc = encode_partial(&e, &m, f, bits, old, nw,
                                 sp.start + nfull * GROUP,
                                 (unsigned)(sp.n % GROUP));
    nchanged += pc;
    if (tr != NULL && pc != 0)
      se = e, so = eo;
  }
done:;
  /* SPARSEK with K other than the block's count would not decode: past
   * the K-th change the rest of the block must equal the base. (Groups
   * start on even symbols, so STOP is on a byte.) */
  if (known && (nchanged != k ||
                memcmp(old + span_bytes(stop, bits), nw + span_bytes(stop, bits),
                       span_bytes(sp.start + sp.n, bits) -
                           span_bytes(stop, bits)) != 0))
    return STITCH_EINVAL;
  size_t n = known && k == 0 ? 0 : rc_enc_finish(&e); /* nothing to read */
  if (eo.overflow) {
    *dropped = eo.dropped != 0;
    return STITCH_ELIMIT;
  }
  *out_len = n + hl;
  *changed = nchanged;
  if (tr != NULL) { /* finish the saved state into TR's buffer */
    tr->len = 0;
    tr->ok = 0;
    if (nchanged > 0 && so.pos <= tr->cap) {
      memcpy(tr->out, out + hl, so.pos);
      so.out = tr->out;
      so.cap = tr->cap;
      se.o = &so;
      size_t tn = rc_enc_finish(&se);
      tr->len = tn;
      tr->ok = !so.overflow;
    }
  }
  return 0;
}

static inline __attribute__((always_inline)) int
decode_impl(const sym_fmt *f, const unsigned bits, uint8_t *data,
            block_span sp, const uint8_t *in, size_t len, uint64_t *changed,
            stitch_diag *d, dec_group_fn group_fn, int known, uint64_t k,
            int warm, const codec_run *run) {
  unsigned ref;
  size_t hl = 0;
  unsigned mi_max = mi_max_of(f, bits);
  if (known) {
    RETURN_IF(k > sp.n, d, STITCH_EFORMAT,
              "sparsek block: %llu changes in %llu symbols",
              (unsigned long long)k, (unsigned long long)sp.n);
    RETURN_IF(k == 0 && len != 0, d, STITCH_EFORMAT,
              "sparsek block: no changes and %zu bytes", len);
    ref = block_ref(f, bits, data, sp);
  } else {
    RETURN_IF(len < 1, d, STITCH_EFORMAT, "sparse block: payload too short");
    hl = ref_get(in, len, &ref);
    RETURN_IF(hl == 0, d, STITCH_EFORMAT, "sparse block: bad class reference");
    RETURN_IF(ref > mi_max, d, STITCH_EFORMAT,
              "sparse block: class reference %u out of range", ref);
  }
  model m;
  model_init(&m, ref, mi_max);
  if (known && warm)
    warm_model(&m, k, sp.n);
  rc_dec r;
  rc_dec_init(&r, in + hl, len - hl);
  uint64_t nchanged = 0, nfull = sp.n / GROUP;
  const unsigned lg = m.lim_group;
  if (known && k == 0)
    goto done;
  uint8_t bkt[CHUNK];
  int avx2 = codec_avx2() && !run->scalar;
  for (uint64_t g0 = 0; g0 < nfull; g0 += CHUNK) {
    unsigned ng = nfull - g0 < CHUNK ? (unsigned)(nfull - g0) : CHUNK;
    uint64_t at = sp.start + g0 * GROUP;
    /* Buckets come from the base: scan the chunk before patching it (a
     * group's patches touch only its own bytes). */
    group_buckets(&m, f, bits, data, at, ng, bkt, avx2);
    for (unsigned g = 0; g < ng; g++)
      if (rc_decode_rare(&r, &m.group[bkt[g]], lg)) {
        rc_dec t = r;
        nchanged += group_fn(&t, &m, data, at + GROUP * g);
        r = t;
        if (known && nchanged >= k)
          goto done;
      }
  }
  if (sp.n % GROUP)
    nchanged += decode_partial(&r, &m, f, bits, data, sp.start + nfull * GROUP,
                               (unsigned)(sp.n % GROUP));
done:
  /* SPARSEK ends at its K-th change: a group that held more is damage. */
  RETURN_IF(known && nchanged != k, d, STITCH_EFORMAT,
            "sparsek block: decoded %llu changes, index says %llu",
            (unsigned long long)nchanged, (unsigned long long)k);
  /* The encoder drops trailing zero bytes (the decoder reads zeros past the
   * end), so the decoder may run a few bytes past; more means damage. */
  RETURN_IF(r.pos > r.len + 10, d, STITCH_EFORMAT,
            "sparse block: coded data ends early");
  /* SPARSEK and SPARSET end with the K-th change, so a decoder that got
   * there has read every byte (it reads as many as the encoder put out
   * before dropping trailing zeros): bytes left mean a count lower than
   * the one coded, or damage. */
  RETURN_IF(known && k > 0 && r.pos < r.len, d, STITCH_EFORMAT,
            "sparsek block: %zu bytes left after the last of %llu changes",
            r.len - r.pos, (unsigned long long)k);
  *changed = nchanged;
  return 0;
}

static const codec_run plain_run = {0, 0};

static int encode_any(const sym_fmt *f, const uint8_t *old,
                      const uint8_t *new_, block_span sp, uint8_t *out,
                      size_t cap, size_t *out_len, uint64_t *changed,
                      int *dropped, sparse_probe *probe, int known,
                      uint64_t k, sparse_trunc *tr, const codec_run *run) {
  *dropped = 0;
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return encode_impl(&k_, B, old, new_, sp, out, cap, out_len, changed,     \
                       dropped, probe, enc_group_##ID, known, k, tr, run);    \
  }
  DISPATCH(f, STITCH_EINVAL, encode_impl)
#undef DISPATCH_CASE_
}

int sparse_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                  block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                  uint64_t *changed) {
  int dropped;
  return encode_any(f, old, new_, sp, out, cap, out_len, changed, &dropped,
                    NULL, 0, 0, NULL, &plain_run);
}

int sparse_encode_trunc(const sym_fmt *f, const uint8_t *old,
                        const uint8_t *new_, block_span sp, uint8_t *out,
                        size_t cap, size_t *out_len, uint64_t *changed,
                        sparse_trunc *tr) {
  int dropped;
  tr->len = 0;
  tr->ok = 0;
  return encode_any(f, old, new_, sp, out, cap, out_len, changed, &dropped,
                    NULL, 0, 0, tr, &plain_run);
}

int sparse_encode_probe(const sym_fmt *f, const uint8_t *old,
                        const uint8_t *new_, block_span sp, uint8_t *out,
                        size_t cap, size_t *out_len, uint64_t *changed,
                        sparse_probe *probe) {
  int dropped;
  probe->len = 0;
  if (probe->at == 0 || probe->at % SPARSE_PROBE_STEP || probe->at >= sp.n)
    return STITCH_EINVAL;
  return encode_any(f, old, new_, sp, out, cap, out_len, changed, &dropped,
                    probe, 0, 0, NULL, &plain_run);
}

static unsigned sparse_ref(const sym_fmt *f, const uint8_t *data,
                           block_span sp) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return block_ref(&k_, B, data, sp);                                       \
  }
  DISPATCH(f, 0, block_ref)
#undef DISPATCH_CASE_
}

int sparse_same_ref(const sym_fmt *f, const uint8_t *data, block_span prefix,
                    block_span sp) {
  unsigned r = sparse_ref(f, data, prefix);
  /* The block's ref is at least the prefix's and at most the largest. */
  return r == mi_max_of(f, f->bits) || r == sparse_ref(f, data, sp);
}

/* Coded with a cap of LIMIT instead, the coder stops soon after its output
 * passes LIMIT. Then a dropped byte that is not zero settles it: the
 * output, whose trailing zeros alone are trimmed, reaches past LIMIT (or
 * past CAP, which fails). Only when every dropped byte was zero, which
 * the trimming might yet take back, is the block coded again in full. */
int sparse_encode_exceeds(const sym_fmt *f, const uint8_t *old,
                          const uint8_t *new_, block_span sp, uint8_t *out,
                          size_t cap, size_t limit, int *exceeds) {
  size_t n;
  uint64_t ch;
  int dropped;
  int rc = encode_any(f, old, new_, sp, out, limit < cap ? limit : cap, &n,
                      &ch, &dropped, NULL, 0, 0, NULL, &plain_run);
  if (rc == STITCH_ELIMIT && !dropped)
    rc = encode_any(f, old, new_, sp, out, cap, &n, &ch, &dropped, NULL, 0, 0, NULL, &plain_run);
  if (rc != 0 && rc != STITCH_ELIMIT)
    return rc;
  *exceeds = rc == STITCH_ELIMIT || n > limit;
  return 0;
}

int sparsek_encode_run(const codec_run *run, const sym_fmt *f,
                       const uint8_t *old, const uint8_t *new_, block_span sp,
                       uint64_t k, uint8_t *out, size_t cap, size_t *out_len) {
  int dropped;
  uint64_t ch;
  return encode_any(f, old, new_, sp, out, cap, out_len, &ch, &dropped, NULL,
                    1, k, NULL, run);
}

int sparsek_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                   block_span sp, uint64_t k, uint8_t *out, size_t cap,
                   size_t *out_len) {
  return sparsek_encode_run(&plain_run, f, old, new_, sp, k, out, cap,
                            out_len);
}

static int decode_any(const sym_fmt *f, uint8_t *data, block_span sp,
                      const uint8_t *in, size_t len, uint64_t *changed,
                      stitch_diag *d, int known, uint64_t k, int warm,
                      const codec_run *run) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return decode_impl(&k_, B, data, sp, in, len, changed, d,                \
                       dec_group_##ID, known, k, warm, run);                  \
  }
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
#undef DISPATCH_CASE_
}

int sparse_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                  const uint8_t *in, size_t len, uint64_t *changed,
                  stitch_diag *d) {
  return decode_any(f, data, sp, in, len, changed, d, 0, 0, 0, &plain_run);
}

int sparsek_decode_run(const codec_run *run, const sym_fmt *f, uint8_t *data,
                       block_span sp, const uint8_t *in, size_t len,
                       uint64_t changed, int warm, stitch_diag *d) {
  uint64_t ch;
  return decode_any(f, data, sp, in, len, &ch, d, 1, changed, warm, run);
}

int sparsek_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                   const uint8_t *in, size_t len, uint64_t changed, int warm,
                   stitch_diag *d) {
  return sparsek_decode_run(&plain_run, f, data, sp, in, len, changed, warm,
                            d);
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
