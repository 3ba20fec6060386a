/* gaps.c: the GAPS block coding (proto/delta.md section "GAPS").
 *
 * SPARSE (sparse.c) codes smallest, but it pays about ten adaptive binary
 * decisions per change plus one per group of 16 symbols, each waiting on
 * the last. GAPS codes each change as its distance from the previous one,
 * measured in weight rather than in symbols, with a handful of
 * fixed-probability steps:
 *
 *  - Every symbol weighs W[c], c its class (octaves below the block's
 *    largest magnitude, as in SPARSE), from a table of 16 weights that the
 *    encoder sets per block to the hazard of each class, -ln(1 - p_c) for
 *    a class whose symbols change with probability p_c. If symbols change
 *    independently, the chance that none of a stretch changes is
 *    exp(-(its weight) / K): measured in weight, the next change is an
 *    exponential distance away whatever the classes on the way.
 *  - That distance is cut into rounds of M = 2^12. Each round passed costs
 *    one decision ("not in this round", fixed probability); then the
 *    change's own interval, [its start, its start + its weight) inside the
 *    round, is coded as a span of M equally likely values: a symbol of
 *    weight w costs log2(M / w) bits there, so a small weight, which
 *    changes often, is cheap to name. With the encoder's scale, about 1.25
 *    round decisions a change.
 *  - The step: its sign and "one step?" as fixed-probability decisions by
 *    class (the probabilities sent with the block), larger steps in
 *    Elias gamma.
 *
 * Between changes only weights are summed, with vector table lookups
 * (BF16, F16, 8-bit floats and E2M1 nibbles, on CPUs with AVX2; a scalar
 * loop, the reference, elsewhere): the encoder 16 to 64 at a time, the
 * decoder a window of 4,096 symbols ahead, so that it finds each change
 * with compares instead of a walk (see "The decoder's scan"). There is no
 * per-group decision: work is a vector pass over the symbols plus some
 * five coder steps per change. The model is static within a
 * block (two passes in the encoder; its 29 parameters, a byte each, are
 * sent with it), so the size is that of the per-class rates, about
 * H(mask | class): 1-7% above what SPARSE's adaptive contexts reach
 * (docs/codec.md, "Two sparse codings"). */
#include "codec/cpu.h"
#include "codec/delta_internal.h"
#include "codec/rangecoder.h"
#include "codec/symbol.h"
#include "common/diag.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define GAPS_M_LOG2 12
#define GAPS_M (1u << GAPS_M_LOG2)
#define GAPS_WMAX 3968u /* the largest weight a code names; 16 sum below 2^16 */
#define GAPS_WCODE_MAX 0xbfu /* the largest weight code */
_Static_assert(GAPS_WMAX == ((16 + (GAPS_WCODE_MAX & 15))
                             << (GAPS_WCODE_MAX >> 4)) >> 4,
               "GAPS_WMAX is the weight GAPS_WCODE_MAX names");
#define GAPS_SAMPLE_EVERY 512 /* the encoder counts classes on 16 symbols of each 512 */
#define GAPS_STRETCH_BYTES 65536 /* the first pass counts a stretch ... */
#define GAPS_STRETCH_EVERY 8      /* ... of every 8 first, */
#define GAPS_ENOUGH 2048          /* and stops there with this many changes */
_Static_assert((GAPS_STRETCH_BYTES * 8 / 64) % GAPS_SAMPLE_EVERY == 0,
               "stretches sample the base's classes where the block would");

/* Weight code B names ((16 + (B & 15)) << (B >> 4)) >> 4: 1 to 3968,
 * exact below 32 and within 1/32 above. */
static inline unsigned wcode_value(unsigned b) {
  return ((16u | (b & 15u)) << (b >> 4)) >> 4;
}

unsigned gaps_weight_of_code(unsigned b) { return wcode_value(b); }

/* A probability code B names P(1) = (128 B + 64) / 2^15. */
static inline uint32_t pcode_value(unsigned b) { return b << 7 | 64u; }

typedef struct gaps_model {
  uint32_t q_round;    /* P(the change lies in this round), Q15 */
  uint32_t sign[4][2]; /* P(step < 0) by class / 4 and the old sign bit */
  uint32_t one[4];     /* P(|step| = 1) by class / 4 */
  uint16_t w[NCLS];
  unsigned ref;
  uint8_t nib_lo[16], nib_hi[16]; /* weight of each E2M1 nibble value */
  uint8_t cls[MI_MAX + 1];
  uint16_t wmi[MI_MAX + 1]; /* weight of each magnitude index */
} gaps_model;

static void gaps_tables(gaps_model *m, unsigned mi_max) {
  for (unsigned e = 0; e <= mi_max; e++) {
    unsigned c = class_of(m->ref, e);
    m->cls[e] = (uint8_t)c;
    m->wmi[e] = m->w[c];
  }
  for (unsigned v = 0; v < 16; v++) { /* E2M1: exponent in bits 1-2 */
    unsigned e = (v >> 1) & 3;
    uint16_t w = e <= mi_max ? m->wmi[e] : 0;
    m->nib_lo[v] = (uint8_t)w;
    m->nib_hi[v] = (uint8_t)(w >> 8);
  }
}

static inline __attribute__((always_inline)) unsigned
weight_of(const gaps_model *m, const sym_fmt *f, const unsigned bits,
          uint64_t v) {
  return m->wmi[mi_of(f, bits, v)];
}

/* ---- Weight sums, 16 symbols at a time -------------------------------- */

#ifdef CODEC_X86_SIMD
#include <immintrin.h>
#define GAPS_AVX2 1
#define GAPS_AVX2_FN __attribute__((target("avx2"), always_inline)) static inline
/* For the decoder's body (decode_impl), which has no target of its own:
 * inlined once that body is, into the AVX2 copy of it (decode_vec_*). */
#define GAPS_AVX2_INL __attribute__((target("avx2"))) static inline

/* The vector layouts: 16- and 8-bit floats and E2M1 nibbles. Integers and
 * wider floats take the scalar loops. */
enum { LAYOUT_NONE, LAYOUT_16, LAYOUT_8, LAYOUT_4 };

static inline int layout_of(const sym_fmt *f, unsigned bits) {
  if (!f->is_float)
    return LAYOUT_NONE;
  return bits == 16 ? LAYOUT_16 : bits == 8 ? LAYOUT_8 : bits == 4 ? LAYOUT_4
                                                                     : LAYOUT_NONE;
}

typedef struct gaps_lut {
  __m256i lo, hi, ref, emask, low15; /* lo, hi: bytes of W[class] */
  __m128i nlo, nhi;                  /* bytes of the weight of each nibble */
  __m128i shift;
  unsigned refv, ebits;
  int layout;
} gaps_lut;

__attribute__((target("avx2"))) __attribute__((noinline)) static void
lut_init(gaps_lut *l, const gaps_model *m, const sym_fmt *f,
                           unsigned bits) {
  uint8_t lo[16], hi[16];
  for (int c = 0; c < NCLS; c++) {
    lo[c] = (uint8_t)m->w[c];
    hi[c] = (uint8_t)(m->w[c] >> 8);
  }
  l->layout = layout_of(f, bits);
  l->lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lo));
  l->hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hi));
  l->nlo = _mm_loadu_si128((const __m128i *)m->nib_lo);
  l->nhi = _mm_loadu_si128((const __m128i *)m->nib_hi);
  l->ref = _mm256_set1_epi16((short)m->ref);
  l->emask = _mm256_set1_epi16((short)((1u << f->exp_bits) - 1));
  l->low15 = _mm256_set1_epi16(15);
  l->shift = _mm_cvtsi32_si128((int)f->mant_bits);
  l->refv = m->ref;
  l->ebits = f->exp_bits;
}

/* Bytes that 16 symbols take. */
static inline unsigned lut_step(const int layout) {
  return layout == LAYOUT_16 ? 32 : layout == LAYOUT_8 ? 16 : 8;
}

/* The weights of the 16 symbols at Q, in order, as u16 lanes. */
GAPS_AVX2_FN __m256i lut_w16(const gaps_lut *l, const int layout, const uint8_t *q) {
  if (layout == LAYOUT_4) { /* element 2i in the low nibble of byte i */
    const __m128i nib = _mm_set1_epi8(15);
    __m128i x = _mm_loadl_epi64((const __m128i *)q);
    __m128i n = _mm_unpacklo_epi8(_mm_and_si128(x, nib),
                                  _mm_and_si128(_mm_srli_epi16(x, 4), nib));
    __m128i wl = _mm_shuffle_epi8(l->nlo, n), wh = _mm_shuffle_epi8(l->nhi, n);
    return _mm256_set_m128i(_mm_unpackhi_epi8(wl, wh), _mm_unpacklo_epi8(wl, wh));
  }
  __m256i v = layout == LAYOUT_16
                  ? _mm256_loadu_si256((const __m256i *)q)
                  : _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q));
  __m256i e = _mm256_and_si256(_mm256_srl_epi16(v, l->shift), l->emask);
  __m256i c = _mm256_min_epu16(_mm256_subs_epu16(l->ref, e), l->low15);
  /* c < 16 in the low byte of each lane; the high byte's lookup (index 0)
   * is masked off, and the high table's low byte shifted out. */
  __m256i lo = _mm256_shuffle_epi8(l->lo, c), hi = _mm256_shuffle_epi8(l->hi, c);
  return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi16(0xFF)),
                         _mm256_slli_epi16(hi, 8));
}

/* Running sums of 16 u16 lanes (weights are at most 3968: no overflow). */
GAPS_AVX2_FN __m256i prefix16(__m256i x) {
  x = _mm256_add_epi16(x, _mm256_slli_si256(x, 2));
  x = _mm256_add_epi16(x, _mm256_slli_si256(x, 4));
  x = _mm256_add_epi16(x, _mm256_slli_si256(x, 8));
  __m256i t = _mm256_shufflehi_epi16(x, 0xFF); /* lane 7 of each half */
  t = _mm256_unpackhi_epi64(t, t);
  t = _mm256_permute2x128_si256(t, t, 0x08); /* low half's, into the high */
  return _mm256_add_epi16(x, t);
}

/* Symbols in the 32 bytes of a unit, the step of the scans below: 16, 32
 * or 64. A unit is 1, 2 or 4 vectors of 16 symbols (lut_w16). */
static inline unsigned lut_unit(const int layout) {
  return layout == LAYOUT_16 ? 16 : layout == LAYOUT_8 ? 32 : 64;
}

/* The weights of the two vectors at Q (16- and 8-bit floats), summed by
 * eight symbols into the u64 lanes: the classes as bytes, looked up in
 * the byte tables and summed with vpsadbw. The lanes hold, by eights,
 * for 16-bit floats the vectors' [a0, b0, a1, b1], for 8-bit ones
 * [a0, a1, b0, b1]. */
GAPS_AVX2_FN __m256i lut_pair_sums(const gaps_lut *l, const int layout,
                                   const uint8_t *q) {
  const __m256i z = _mm256_setzero_si256();
  __m256i v = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)q), l->shift), e;
  if (layout == LAYOUT_16) { /* exponents as bytes: a's eights, b's, by half */
    __m256i b = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(q + 32)), l->shift);
    e = _mm256_packus_epi16(_mm256_and_si256(v, l->emask), _mm256_and_si256(b, l->emask));
  } else { /* the byte below an 8-bit float's exponent field is its own */
    e = _mm256_and_si256(v, _mm256_set1_epi8((char)((1u << l->ebits) - 1)));
  }
  __m256i c = _mm256_min_epu8(_mm256_subs_epu8(_mm256_set1_epi8((char)l->refv), e),
                              _mm256_set1_epi8(15));
  __m256i lo = _mm256_sad_epu8(_mm256_shuffle_epi8(l->lo, c), z);
  __m256i hi = _mm256_sad_epu8(_mm256_shuffle_epi8(l->hi, c), z);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 8));
}

/* The weights of the unit at Q, as four 64-bit partial sums. */
GAPS_AVX2_FN __m256i lut_unit_sum(const gaps_lut *l, const int layout, const uint8_t *q) {
  const __m256i z = _mm256_setzero_si256();
  if (layout == LAYOUT_16) {
    __m256i s = _mm256_madd_epi16(lut_w16(l, layout, q), _mm256_set1_epi16(1));
    return _mm256_add_epi64(_mm256_srli_epi64(s, 32),
                            _mm256_and_si256(s, _mm256_set1_epi64x(0xFFFFFFFF)));
  }
  __m256i v = _mm256_loadu_si256((const __m256i *)q), i0, i1;
  __m256i lo = _mm256_broadcastsi128_si256(l->nlo);
  __m256i hi = _mm256_broadcastsi128_si256(l->nhi);
  if (layout == LAYOUT_8)
    return lut_pair_sums(l, layout, q);
  const __m256i nib = _mm256_set1_epi8(15);
  i0 = _mm256_and_si256(v, nib);
  i1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  __m256i s = _mm256_add_epi64(_mm256_sad_epu8(_mm256_shuffle_epi8(lo, i0), z),
                               _mm256_sad_epu8(_mm256_shuffle_epi8(lo, i1), z));
  __m256i t = _mm256_add_epi64(_mm256_sad_epu8(_mm256_shuffle_epi8(hi, i0), z),
                               _mm256_sad_epu8(_mm256_shuffle_epi8(hi, i1), z));
  return _mm256_add_epi64(s, _mm256_slli_epi64(t, 8));
}

GAPS_AVX2_FN uint64_t lut_hsum64(__m256i s) {
  __m128i x = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return (uint64_t)_mm_cvtsi128_si64(_mm_add_epi64(x, _mm_unpackhi_epi64(x, x)));
}

GAPS_AVX2_FN int lut_unit_same(const uint8_t *a, const uint8_t *b) {
  __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)a),
                               _mm256_loadu_si256((const __m256i *)b));
  return _mm256_testz_si256(x, x);
}

/* Bit i set when symbol i of the 16 at A and B differ. */
GAPS_AVX2_FN uint32_t lut_diff16(const int layout, const uint8_t *a,
                                 const uint8_t *b) {
  if (layout == LAYOUT_16) {
    __m256i c = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)a),
                                   _mm256_loadu_si256((const __m256i *)b));
    /* packs keeps each half's 8 lanes twice; take one copy of each */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi16(c, c), 0x08);
    return ~(uint32_t)_mm256_movemask_epi8(p) & 0xFFFF;
  }
  if (layout == LAYOUT_8)
    return ~(uint32_t)_mm_movemask_epi8(
               _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)a),
                              _mm_loadu_si128((const __m128i *)b))) &
           0xFFFF;
  const __m128i nib = _mm_set1_epi8(15);
  __m128i x = _mm_xor_si128(_mm_loadl_epi64((const __m128i *)a),
                            _mm_loadl_epi64((const __m128i *)b));
  __m128i n = _mm_unpacklo_epi8(_mm_and_si128(x, nib),
                                _mm_and_si128(_mm_srli_epi16(x, 4), nib));
  return ~(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(n, _mm_setzero_si128())) &
         0xFFFF;
}

/* The changed symbols of NU units at OLD and NW: POS gets each one's
 * index from OLD, and with WEIGHTS, GAP the weight from the origin to its
 * start (*ACC is the weight from the origin to OLD, and leaves as that to
 * the end; a change moves the origin to its own end). Returns how many.
 * Units without a change only add their weight, in a vector, summed when
 * the next change needs it. */
GAPS_AVX2_FN unsigned
lut_changes_t(const gaps_lut *l, const int layout, const uint8_t *old,
              const uint8_t *nw, unsigned nu, int weights, int64_t *acc,
              uint16_t *pos, uint64_t *gap) {
  unsigned step = lut_step(layout), per = lut_unit(layout) / 16, n = 0;
  int64_t a = *acc;
  __m256i pend = _mm256_setzero_si256(); /* unsummed weight */
  for (unsigned u = 0; u < nu; u++, old += 32, nw += 32) {
    if (lut_unit_same(old, nw)) {
      if (weights)
        pend = _mm256_add_epi64(pend, lut_unit_sum(l, layout, old));
      continue;
    }
    if (weights) {
      a += (int64_t)lut_hsum64(pend);
      pend = _mm256_setzero_si256();
    }
    for (unsigned v = 0; v < per; v++) {
      const uint8_t *o = old + v * step;
      uint32_t dm = lut_diff16(layout, o, nw + v * step);
      unsigned base = (u * per + v) * 16;
      if (!weights) {
        for (; dm != 0; dm &= dm - 1)
          pos[n++] = (uint16_t)(base + (unsigned)__builtin_ctz(dm));
        continue;
      }
      __m256i x = prefix16(lut_w16(l, layout, o));
      if (dm == 0) {
        a += (uint16_t)_mm256_extract_epi16(x, 15);
        continue;
      }
      uint16_t s[17]; /* s[i]: the weight of the symbols before i */
      s[0] = 0;
      _mm256_storeu_si256((__m256i *)(s + 1), x);
      for (; dm != 0; dm &= dm - 1) {
        unsigned i = (unsigned)__builtin_ctz(dm);
        pos[n] = (uint16_t)(base + i);
        gap[n++] = (uint64_t)(a + s[i]);
        a = -(int64_t)s[i + 1];
      }
      a += s[16];
    }
  }
  if (weights)
    a += (int64_t)lut_hsum64(pend);
  *acc = a;
  return n;
}

/* ---- The decoder's scan, windows of weights ------------------------- */

/* The decoder looks for each change by weight. Walking the weights from
 * one change to the next, a vector at a time, ends every walk on a branch
 * that mispredicts (the walk's length is the gap's). So it sums a window
 * of the block ahead instead, a vector (16 symbols) at a time with no
 * branch per vector: cum[u] is the weight of the window's symbols before
 * vector u. A change is then found with compares: eight entries of cum at
 * a time, then the 16 running sums of its vector. The window is summed
 * before any change in it is written; a written change's vector is read
 * no more, since the sums of the last vector found are kept (pre). */
#define GAPS_WIN_VECS 256 /* 4,096 symbols: 8 KiB of BF16, in L1 */

typedef struct gaps_scan {
  uint64_t ws;       /* the window's first symbol */
  unsigned nv, nf;   /* its vectors; the whole ones (nv - 1 with a tail) */
  unsigned pu;       /* the vector whose sums are in pre, or UINT32_MAX */
  uint16_t pre[17];  /* pre[i]: the weight of the vector's first i symbols */
  uint16_t tail[17]; /* the same for a last vector of under 16 symbols */
  uint32_t cum[GAPS_WIN_VECS + 9]; /* then 8 guards above any weight */
} gaps_scan;

/* The sums of the four vectors at Q, as u32 lanes. */
GAPS_AVX2_FN __m128i lut_sums4(const gaps_lut *l, const int layout,
                               const uint8_t *q) {
  const unsigned step = lut_step(layout);
  if (layout == LAYOUT_4) { /* one unit: its u64 lanes are the four sums */
    __m256i x = _mm256_shuffle_epi32(lut_unit_sum(l, layout, q), 0x08);
    return _mm_unpacklo_epi64(_mm256_castsi256_si128(x),
                              _mm256_extracti128_si256(x, 1));
  }
  /* Two pairs, the second's sums into the high halves of the lanes. */
  __m256i x = _mm256_or_si256(
      lut_pair_sums(l, layout, q),
      _mm256_slli_epi64(lut_pair_sums(l, layout, q + 2 * step), 32));
  if (layout == LAYOUT_16) { /* [a|c, b|d] by halves: a, c, b, d */
    __m128i y = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    return _mm_shuffle_epi32(y, 0xD8);
  }
  x = _mm256_add_epi64(x, _mm256_shuffle_epi32(x, 0x4E)); /* [a|c, a|c, b|d, b|d] */
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

/* cum[1..NF] for the NF whole vectors at Q (cum[0] = 0), four at a time.
 * Returns cum[NF]. */
GAPS_AVX2_INL uint32_t lut_window_t(const gaps_lut *l, const int layout,
                                   const uint8_t *q, unsigned nf, uint32_t *cum) {
  const unsigned step = lut_step(layout);
  uint32_t tot = 0;
  unsigned u = 0;
  cum[0] = 0;
  for (; u + 4 <= nf; u += 4, q += 4 * step) {
    __m128i x = lut_sums4(l, layout, q);
    x = _mm_add_epi32(x, _mm_slli_si128(x, 4));
    x = _mm_add_epi32(x, _mm_slli_si128(x, 8));
    x = _mm_add_epi32(x, _mm_set1_epi32((int)tot));
    _mm_storeu_si128((__m128i *)(cum + u + 1), x);
    tot = (uint32_t)_mm_extract_epi32(x, 3);
  }
  for (; u < nf; u++, q += step) {
    __m256i s = _mm256_madd_epi16(lut_w16(l, layout, q), _mm256_set1_epi16(1));
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(s),
                              _mm256_extracti128_si256(s, 1));
    x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    x = _mm_add_epi32(x, _mm_srli_epi64(x, 32));
    tot += (uint32_t)_mm_cvtsi128_si32(x);
    cum[u + 1] = tot;
  }
  return tot;
}

/* The vector of the window (at Q) and the symbol in it where the running
 * weight passes T (window weight; T < cum[nv]): the symbol whose interval
 * holds T. Returns its index in the window; *AT gets the weight before
 * it and *W its weight, both from the sums, so that the coder need not
 * wait for the symbol's load. The search starts at the last vector
 * found, which T cannot be before. */
GAPS_AVX2_INL unsigned lut_find_t(const gaps_lut *l, const int layout,
                                  const uint8_t *q, gaps_scan *s, uint32_t t,
                                  uint32_t *at, uint32_t *w) {
  const __m256i tv = _mm256_set1_epi32((int)t);
  unsigned u = s->pu == UINT32_MAX ? 0 : s->pu;
  for (;; u += 8) { /* cum[u + 1..u + 8]: the first above T ends vector u */
    __m256i c = _mm256_loadu_si256((const __m256i *)(s->cum + u + 1));
    unsigned gt = (unsigned)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, tv)));
    if (gt != 0) {
      u += (unsigned)__builtin_ctz(gt);
      break;
    }
  }
  if (u != s->pu) {
    s->pu = u;
    if (u == s->nf) {
      memcpy(s->pre, s->tail, sizeof(s->pre));
    } else {
      s->pre[0] = 0;
      _mm256_storeu_si256((__m256i *)(s->pre + 1),
                          prefix16(lut_w16(l, layout, q + u * lut_step(layout))));
    }
  }
  /* r < pre[16]: the lanes of pre[1..16] at most r are a prefix. */
  uint32_t r = t - s->cum[u];
  __m256i x = _mm256_loadu_si256((const __m256i *)(s->pre + 1));
  __m256i le = _mm256_cmpeq_epi16(_mm256_min_epu16(x, _mm256_set1_epi16((short)r)), x);
  unsigned k = (unsigned)__builtin_popcount((uint32_t)_mm256_movemask_epi8(le)) / 2;
  *at = s->cum[u] + s->pre[k];
  *w = (uint32_t)(s->pre[k + 1] - s->pre[k]);
  return 16 * u + k;
}

/* One compiled loop per layout. */
#define LAYOUT_FNS(X) X(16) X(8) X(4)
#define X(L)                                                                  \
  __attribute__((target("avx2"))) __attribute__((noinline)) static unsigned   \
  lut_changes_##L(const gaps_lut *l, const uint8_t *old, const uint8_t *nw,   \
                  unsigned nu, int weights, int64_t *acc, uint16_t *pos,      \
                  uint64_t *gap) {                                            \
    return lut_changes_t(l, LAYOUT_##L, old, nw, nu, weights, acc, pos, gap); \
  }
LAYOUT_FNS(X)
#undef X

static unsigned lut_changes(const gaps_lut *l, const uint8_t *old,
                            const uint8_t *nw, unsigned nu, int weights,
                            int64_t *acc, uint16_t *pos, uint64_t *gap) {
  return l->layout == LAYOUT_16
             ? lut_changes_16(l, old, nw, nu, weights, acc, pos, gap)
         : l->layout == LAYOUT_8
             ? lut_changes_8(l, old, nw, nu, weights, acc, pos, gap)
             : lut_changes_4(l, old, nw, nu, weights, acc, pos, gap);
}

#endif

typedef struct gaps_walk {
  const gaps_model *m;
#ifdef GAPS_AVX2
  gaps_lut lut;
  int avx2;
#endif
} gaps_walk;

#ifdef GAPS_AVX2
/* Whether the vector loops run for format F: a layout, codec_avx2, and
 * RUN not asking for the scalar ones. */
static int vec_ok(const codec_run *run, const sym_fmt *f, unsigned bits) {
  return layout_of(f, bits) != LAYOUT_NONE && codec_avx2() && !run->scalar;
}
#endif

static void walk_init(gaps_walk *w, const codec_run *run, const gaps_model *m,
                      const sym_fmt *f, unsigned bits) {
  w->m = m;
#ifdef GAPS_AVX2
  w->avx2 = vec_ok(run, f, bits);
  if (w->avx2)
    lut_init(&w->lut, m, f, bits);
#else
  (void)run, (void)f, (void)bits;
#endif
}

/* From symbol j, passes every symbol whose interval ends at or before T,
 * the weight from symbol j's start (that is, while the sum of their
 * weights stays at most T), up to END. Returns the first symbol not
 * passed, or END; *A gets the weight passed. The decoder's scalar walk:
 * the reference, and CPUs without AVX2. */
static inline __attribute__((always_inline)) uint64_t
advance(const gaps_model *m, const sym_fmt *f, const unsigned bits,
        const uint8_t *p, uint64_t j, uint64_t end, uint64_t *a, uint64_t t) {
  uint64_t room = t;
  for (; j < end; j++) {
    unsigned x = weight_of(m, f, bits, ld(p, j, bits));
    if (x > room)
      break;
    room -= x;
  }
  *a = t - room;
  return j;
}

#ifdef GAPS_AVX2
/* Sums the window of the block (DATA, ending at END) that starts at
 * symbol WS: its whole vectors with lut_window_t, and a last one of under 16
 * symbols, at the block's end, here. */
static inline __attribute__((always_inline)) void
scan_window(gaps_scan *s, const gaps_walk *w, const sym_fmt *f,
            const unsigned bits, const uint8_t *data, uint64_t ws,
            uint64_t end) {
  uint64_t n = end - ws < 16 * GAPS_WIN_VECS ? end - ws : 16 * GAPS_WIN_VECS;
  unsigned nf = (unsigned)(n / 16), nv = nf, rest = (unsigned)(n % 16);
  uint32_t tot = lut_window_t(&w->lut, layout_of(f, bits),
                              data + span_bytes(ws, bits), nf, s->cum);
  if (rest != 0) {
    s->tail[0] = 0;
    for (unsigned i = 0; i < 16; i++)
      s->tail[i + 1] = (uint16_t)(s->tail[i] +
                                  (i < rest ? weight_of(w->m, f, bits,
                                                        ld(data, ws + 16 * nf + i, bits))
                                            : 0));
    tot += s->tail[16];
    s->cum[++nv] = tot;
  }
  for (unsigned i = 1; i <= 8; i++)
    s->cum[nv + i] = INT32_MAX;
  s->ws = ws;
  s->nv = nv;
  s->nf = nf;
  s->pu = UINT32_MAX;
}
#endif

/* ---- Finding changes (encoder) --------------------------------------- */

/* The first byte in [from, to) where A and B differ, or TO. */
static inline uint64_t first_diff(const uint8_t *a, const uint8_t *b,
                                  uint64_t from, uint64_t to) {
  while (from + 32 <= to) {
    uint64_t x[4], y[4];
    memcpy(x, a + from, 32);
    memcpy(y, b + from, 32);
    uint64_t d = (x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]);
    if (d != 0)
      break;
    from += 32;
  }
  while (from + 8 <= to) {
    uint64_t x, y;
    memcpy(&x, a + from, 8);
    memcpy(&y, b + from, 8);
    if (x != y)
      return from + (unsigned)__builtin_ctzll(x ^ y) / 8;
    from += 8;
  }
  for (; from < to; from++)
    if (a[from] != b[from])
      return from;
  return to;
}

/* The first symbol in [j, end) that differs, or END. */
static inline __attribute__((always_inline)) uint64_t
next_change(const uint8_t *old, const uint8_t *nw, const unsigned bits,
            uint64_t j, uint64_t end) {
  if (bits == 4) {
    if (j & 1) {
      if (j >= end || ((old[j >> 1] ^ nw[j >> 1]) & 0xF0))
        return j < end ? j : end;
      j++;
    }
    uint64_t b = first_diff(old, nw, j >> 1, end >> 1);
    if (b >= end >> 1)
      return end;
    return 2 * b + (((old[b] ^ nw[b]) & 0x0F) == 0);
  }
  unsigned sb = bits / 8;
  return first_diff(old, nw, j * sb, end * sb) / sb;
}

/* ---- Steps ----------------------------------------------------------- */

static inline __attribute__((always_inline)) void
encode_step(rc_enc *e, const gaps_model *m, const sym_fmt *f,
            const unsigned bits, uint64_t ov, uint64_t nv, unsigned c) {
  step_parts s = step_of(f, bits, ov, nv);
  rc_encode_fixed(e, m->sign[c >> 2][(ov >> (bits - 1)) & 1], s.neg);
  rc_encode_fixed(e, m->one[c >> 2], s.mag == 1);
  if (__builtin_expect(s.mag != 1, 0)) {
    uint64_t r = s.mag - 1;
    unsigned k = 64u - (unsigned)__builtin_clzll(r); /* 1..bits-1 */
    /* k - 1 in unary (ones, then a zero unless k - 1 is the most there
     * can be), then the low k - 1 bits of r: all equiprobable. */
    rc_encode_raw(e, (1ull << (k - 1)) - 1, k - 1);
    if (k - 1 < bits - 2)
      rc_encode_raw(e, 0, 1);
    rc_encode_raw(e, r, k - 1);
  }
}

static inline __attribute__((always_inline)) uint64_t
decode_step(rc_dec *r, const gaps_model *m, const sym_fmt *f,
            const unsigned bits, uint64_t ov, unsigned c) {
  uint32_t neg = rc_decode_fixed(r, m->sign[c >> 2][(ov >> (bits - 1)) & 1]);
  uint64_t mag = 1;
  if (__builtin_expect(!rc_decode_fixed(r, m->one[c >> 2]), 0)) {
    unsigned k = 1;
    while (k - 1 < bits - 2 && rc_decode_raw(r, 1))
      k++;
    mag = ((1ull << (k - 1)) | rc_decode_raw(r, k - 1)) + 1;
  }
  return step_apply(f, bits, ov, neg, mag);
}

/* ---- The block's parameters ------------------------------------------ */

typedef struct gaps_counts {
  uint64_t kc[NCLS], nc[NCLS], sampled, n;
  uint64_t neg[4][2][2]; /* [c / 4][old sign][neg] */
  uint64_t one[4][2];    /* [c / 4][|step| = 1] */
} gaps_counts;

/* The code nearest P (a probability). */
static uint8_t pcode_of(double p) {
  long b = lround((p * 32768.0 - 64) / 128);
  return (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
}

/* K of N events, with half an event added each way, as a code. */
static uint8_t pcode_count(uint64_t k, uint64_t n) {
  return pcode_of(((double)k + 0.5) / ((double)n + 1.0));
}

/* The code of weight W (1 to GAPS_WMAX): exact below 32, else the
 * nearest 4-bit mantissa at W's octave (a tie goes up). */
uint8_t gaps_code_of_weight(double w) {
  long v = lround(w);
  v = v < 1 ? 1 : v > (long)GAPS_WMAX ? (long)GAPS_WMAX : v;
  unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)v), m;
  if (e < 4) {
    m = ((unsigned)v << (4 - e)) - 16;
  } else {
    m = (unsigned)((v + (1l << (e - 4) >> 1)) >> (e - 4)) - 16;
  }
  return (uint8_t)((e << 4) + m); /* m = 16, rounded up, is the next octave */
}

/* The parameter bytes after ref (proto/delta.md, "GAPS"): 16 weight
 * codes, then probability codes for the round, sign[4][2] and one[4]. */
#define GAPS_P_ROUND NCLS
#define GAPS_P_SIGN (NCLS + 1)
#define GAPS_P_ONE (NCLS + 9)
#define GAPS_NPARAM (NCLS + 13)
_Static_assert(GAPS_NPARAM == GAPS_PARAM_BYTES, "the parameter bytes");

/* The encoder's choice (any codes in range decode): W[c] is the hazard of
 * class c times K, the weight of one expected change, K = M / ln 5 so
 * that a round holds the next change four times in five. A smaller K
 * loses more to the uniform span inside a round, which stands for a
 * steeper exponential; a larger one gives the likeliest classes weights
 * near M, and a symbol's interval is cut at its round's end, which wastes
 * the rest of the code space there. On the benchmark's trajectories
 * (docs/history/benchmarks.md "Encoder choices") four in five coded
 * 0.8-4.5% smaller than one in two, and with fewer round decisions. When even the likeliest class
 * would get a weight under 1024, K grows (up to 8 M, some 8 round
 * decisions a change) so that weights keep their ratios. The step
 * probabilities are the block's own frequencies. Each is sent as its
 * nearest code, into OUT. */
static void choose_params(const gaps_counts *k, uint8_t out[GAPS_NPARAM]) {
  double lam[NCLS], lmax = 0;
  double scale = k->sampled ? (double)k->n / (double)k->sampled : 0;
  for (int c = 0; c < NCLS; c++) {
    lam[c] = 0;
    if (k->kc[c] == 0)
      continue;
    double n = (double)k->nc[c] * scale;
    if (n < (double)k->kc[c])
      n = (double)k->kc[c];
    double p = ((double)k->kc[c] + 0.5) / (n + 1.0);
    if (p > 0.95)
      p = 0.95;
    lam[c] = -log1p(-p);
    if (lam[c] > lmax)
      lmax = lam[c];
  }
  double K = GAPS_M / 1.6094379124341003; /* M / ln 5 */
  if (lmax > 0 && lmax * K < 1024)
    K = 1024 / lmax < 8.0 * GAPS_M ? 1024 / lmax : 8.0 * GAPS_M;
  for (int c = 0; c < NCLS; c++) {
    out[c] = gaps_code_of_weight(lam[c] * K); /* clamped to 1..GAPS_WMAX */
  }
  out[GAPS_P_ROUND] = pcode_of(-expm1(-(double)GAPS_M / K));
  for (int i = 0; i < 4; i++) {
    for (int sg = 0; sg < 2; sg++)
      out[GAPS_P_SIGN + 2 * i + sg] =
          pcode_count(k->neg[i][sg][1], k->neg[i][sg][0] + k->neg[i][sg][1]);
    out[GAPS_P_ONE + i] = pcode_count(k->one[i][1], k->one[i][0] + k->one[i][1]);
  }
}

/* The model that parameter bytes IN name; weight codes past the last are
 * refused (every probability code is valid). */
static int get_params(gaps_model *m, const uint8_t *in, stitch_diag *d) {
  for (int c = 0; c < NCLS; c++) {
    RETURN_IF(in[c] > GAPS_WCODE_MAX, d, STITCH_EFORMAT,
              "gaps block: weight code %d is 0x%02x, past 0x%02x", c, in[c],
              GAPS_WCODE_MAX);
    m->w[c] = (uint16_t)wcode_value(in[c]);
  }
  m->q_round = pcode_value(in[GAPS_P_ROUND]);
  for (int i = 0; i < 4; i++) {
    m->sign[i][0] = pcode_value(in[GAPS_P_SIGN + 2 * i]);
    m->sign[i][1] = pcode_value(in[GAPS_P_SIGN + 2 * i + 1]);
    m->one[i] = pcode_value(in[GAPS_P_ONE + i]);
  }
  return 0;
}

/* ---- Encoder and decoder --------------------------------------------- */

/* Class counts on a sample: 16 symbols of every GAPS_SAMPLE_EVERY. */
static inline __attribute__((always_inline)) void
sample_classes(const sym_fmt *f, const unsigned bits, const uint8_t *old,
               block_span sp, const gaps_model *m, gaps_counts *k) {
  uint64_t end = sp.start + sp.n;
  for (uint64_t j = sp.start; j < end; j += GAPS_SAMPLE_EVERY) {
    uint64_t e = end - j < 16 ? end : j + 16;
    for (uint64_t i = j; i < e; i++)
      k->nc[m->cls[mi_of(f, bits, ld(old, i, bits))]]++;
    k->sampled += e - j;
  }
  k->n += sp.n;
}

/* One change, at symbol P, S the weight from the origin to its start:
 * counted (the encoder's first pass) or coded. */
static inline __attribute__((always_inline)) void
on_change(const int counting, const sym_fmt *f, const unsigned bits,
          const uint8_t *old, const uint8_t *nw, uint64_t p, uint64_t s,
          const gaps_model *m, gaps_counts *k, rc_enc *e) {
  uint64_t ov = ld(old, p, bits), nv = ld(nw, p, bits);
  unsigned mi = mi_of(f, bits, ov), c = m->cls[mi];
  if (counting) {
    step_parts st = step_of(f, bits, ov, nv);
    k->kc[c]++;
    k->neg[c >> 2][(ov >> (bits - 1)) & 1][st.neg]++;
    k->one[c >> 2][st.mag == 1]++;
    return;
  }
  for (uint64_t r = s >> GAPS_M_LOG2; r > 0; r--)
    rc_encode_fixed(e, m->q_round, 0);
  rc_encode_fixed(e, m->q_round, 1);
  uint32_t lo = (uint32_t)(s & (GAPS_M - 1)), hi = lo + m->wmi[mi];
  rc_encode_span(e, lo, hi < GAPS_M ? hi : GAPS_M, GAPS_M_LOG2);
  encode_step(e, m, f, bits, ov, nv, c);
}

#define GAPS_RUN 1024 /* symbols a vector scan hands over at once */

/* Every change of the block in order, counted or coded. Returns how many,
 * or UINT64_MAX when the coder's output passed its cap. */
static inline __attribute__((always_inline)) uint64_t
walk_changes(const int counting, const sym_fmt *f, const unsigned bits,
             const uint8_t *old, const uint8_t *nw, block_span sp,
             const gaps_walk *w, const gaps_model *m, gaps_counts *k,
             rc_enc *e) {
  uint64_t j = sp.start, end = sp.start + sp.n, n = 0;
  int64_t acc = 0; /* the weight from the origin to symbol j */
  (void)w;
#ifdef GAPS_AVX2
  if (w->avx2) { /* spans start on an even symbol: nibbles on a byte */
    uint16_t pos[GAPS_RUN];
    uint64_t gap[GAPS_RUN];
    unsigned per = lut_unit(w->lut.layout);
    while (end - j >= per) {
      unsigned nu = (end - j) / per < GAPS_RUN / per ? (unsigned)((end - j) / per)
                                                     : GAPS_RUN / per;
      unsigned c = lut_changes(&w->lut, old + span_bytes(j, bits),
                               nw + span_bytes(j, bits), nu, !counting, &acc,
                               pos, gap);
      for (unsigned i = 0; i < c; i++)
        on_change(counting, f, bits, old, nw, j + pos[i],
                  counting ? 0 : gap[i], m, k, e);
      n += c;
      j += (uint64_t)per * nu;
      if (!counting && e->o->overflow)
        return UINT64_MAX;
    }
  }
#endif
  for (uint64_t p = next_change(old, nw, bits, j, end); p < end;
       p = next_change(old, nw, bits, p + 1, end)) {
    uint64_t s = (uint64_t)acc;
    if (!counting)
      for (; j < p; j++)
        s += weight_of(m, f, bits, ld(old, j, bits));
    on_change(counting, f, bits, old, nw, p, s, m, k, e);
    acc = 0;
    j = p + 1;
    n++;
    if (!counting && e->o->overflow)
      return UINT64_MAX;
  }
  return n;
}

/* The first pass, what choose_params needs: the changes' classes and
 * steps, and the classes of a sample of the base. It counts one stretch
 * of GAPS_STRETCH_BYTES in every GAPS_STRETCH_EVERY first; when those
 * hold GAPS_ENOUGH changes they set every parameter about as well as the
 * whole block would (each is sent to a few percent), and the rest is not
 * read. Else it counts the other stretches too, and the counts are the
 * whole block's. (Stretches of 4 KiB made that second sweep, a read with
 * a hole every 32 KiB, 15% slower on NVFP4.) Returns the changes
 * counted. */
static inline __attribute__((always_inline)) uint64_t
count_changes(const sym_fmt *f, const unsigned bits, const uint8_t *old,
              const uint8_t *nw, block_span sp, const gaps_walk *w,
              const gaps_model *m, gaps_counts *k, int count_all) {
  const uint64_t len = (uint64_t)GAPS_STRETCH_BYTES * 8 / bits,
                 every = len * GAPS_STRETCH_EVERY;
  uint64_t end = sp.start + sp.n, n = 0;
  memset(k, 0, sizeof(*k));
  for (int pass = 0; pass < 2; pass++) {
    for (uint64_t s = sp.start; s < end; s += every) {
      /* The first stretch of each GAPS_STRETCH_EVERY, then the others. */
      uint64_t from = pass == 0 ? s : s + len, to = pass == 0 ? s + len : s + every;
      for (uint64_t j = from; j < end && j < to; j += len) {
        block_span st = {j, end - j < len ? end - j : len};
        sample_classes(f, bits, old, st, m, k);
        n += walk_changes(1, f, bits, old, nw, st, w, m, k, NULL);
      }
    }
    if (n >= GAPS_ENOUGH && !count_all)
      break;
  }
  return n;
}

static inline __attribute__((always_inline)) int
encode_impl(const codec_run *run, const sym_fmt *f, const unsigned bits,
            const uint8_t *old, const uint8_t *nw, block_span sp, uint8_t *out,
            size_t cap, size_t *out_len, uint64_t *changed) {
  if (cap < 2 + GAPS_NPARAM)
    return STITCH_ELIMIT;
  gaps_model m;
  m.ref = block_ref(f, bits, old, sp);
  memset(m.w, 0, sizeof(m.w));
  gaps_tables(&m, mi_max_of(f, bits)); /* classes only, for the counts */
  gaps_walk w;
  walk_init(&w, run, &m, f, bits); /* the scan finds changes without weights */
  gaps_counts k;
  if (count_changes(f, bits, old, nw, sp, &w, &m, &k, run->count_all) <
      GAPS_MIN_CHANGES)
    return GAPS_DECLINED;
  size_t hl = ref_put(m.ref, out);
  choose_params(&k, out + hl);
  get_params(&m, out + hl, NULL); /* the model the decoder will see */
  hl += GAPS_NPARAM;
  gaps_tables(&m, mi_max_of(f, bits));
  walk_init(&w, run, &m, f, bits);
  rc_enc e;
  rc_out eo;
  rc_enc_init(&e, &eo, out + hl, cap - hl);
  uint64_t n = walk_changes(0, f, bits, old, nw, sp, &w, &m, &k, &e);
  if (n == UINT64_MAX)
    return STITCH_ELIMIT;
  size_t len = rc_enc_finish(&e);
  if (eo.overflow)
    return STITCH_ELIMIT;
  *out_len = len + hl;
  *changed = n;
  return 0;
}

/* VEC (a constant) selects the windowed scan: set only in decode_vec_*,
 * the copies compiled for AVX2, which the scan inlines into. */
static inline __attribute__((always_inline)) int
decode_impl(const codec_run *run, const sym_fmt *f, const unsigned bits,
            const int vec, uint8_t *data, block_span sp, const uint8_t *in,
            size_t len, uint64_t changed, stitch_diag *d) {
  RETURN_IF(len < 1, d, STITCH_EFORMAT, "gaps block: payload too short");
  gaps_model m;
  size_t hl = ref_get(in, len, &m.ref);
  RETURN_IF(hl == 0, d, STITCH_EFORMAT, "gaps block: bad class reference");
  unsigned mi_max = mi_max_of(f, bits);
  RETURN_IF(m.ref > mi_max, d, STITCH_EFORMAT,
            "gaps block: class reference %u out of range", m.ref);
  RETURN_IF(len < hl + GAPS_NPARAM, d, STITCH_EFORMAT,
            "gaps block: payload too short");
  CHECK_RC(get_params(&m, in + hl, d));
  hl += GAPS_NPARAM;
  gaps_tables(&m, mi_max);
  gaps_walk w;
  walk_init(&w, run, &m, f, bits);
  rc_dec r;
  rc_dec_init(&r, in + hl, len - hl);
  uint64_t end = sp.start + sp.n, j = sp.start;
#ifdef GAPS_AVX2
  gaps_scan sc;
  int64_t o = 0; /* the window weight of the origin (< 0: in one before) */
  if (vec && changed > 0)
    scan_window(&sc, &w, f, bits, data, sp.start, end);
#endif
  for (uint64_t i = 0; i < changed; i++) {
    /* Rounds passed; no more than the rest of the block weighs. */
    uint64_t k = 0;
    while (!rc_decode_fixed(&r, m.q_round))
      RETURN_IF(++k > (((end - j) * GAPS_WMAX) >> GAPS_M_LOG2), d,
                STITCH_EFORMAT, "gaps block: change %" PRIu64 " lies past the block", i);
    uint32_t t = rc_decode_span_value(&r, GAPS_M_LOG2);
    uint64_t a, rk = k << GAPS_M_LOG2;
    uint32_t wt = 0; /* the change's weight: from the sums when they ran */
    RETURN_IF(t >= GAPS_M, d, STITCH_EFORMAT,
              "gaps block: change %" PRIu64 " is not at a symbol", i);
#ifdef GAPS_AVX2
    if (vec) {
      int64_t tg = o + (int64_t)(rk + t);
      while (tg >= (int64_t)sc.cum[sc.nv]) { /* past this window */
        uint64_t next = sc.ws + 16 * GAPS_WIN_VECS;
        RETURN_IF(next >= end, d, STITCH_EFORMAT,
                  "gaps block: change %" PRIu64 " lies past the block", i);
        tg -= sc.cum[sc.nv];
        o -= sc.cum[sc.nv];
        scan_window(&sc, &w, f, bits, data, next, end);
      }
      uint32_t at;
      j = sc.ws + lut_find_t(&w.lut, layout_of(f, bits),
                             data + span_bytes(sc.ws, bits), &sc, (uint32_t)tg,
                             &at, &wt);
      a = (uint64_t)((int64_t)at - o);
    } else
#endif
    {
      j = advance(&m, f, bits, data, j, end, &a, rk + t);
      RETURN_IF(j >= end, d, STITCH_EFORMAT,
                "gaps block: change %" PRIu64 " lies past the block", i);
    }
    /* The symbol must start in round k (else t fell in the end of one
     * that started before it, which no encoder codes). */
    RETURN_IF(a < rk, d, STITCH_EFORMAT,
              "gaps block: change %" PRIu64 " is not at a symbol", i);
    uint64_t ov = ld(data, j, bits);
    unsigned mi = mi_of(f, bits, ov);
    if (!vec)
      wt = m.wmi[mi];
    uint32_t lo = (uint32_t)(a - rk), hi = lo + wt;
    rc_decode_span(&r, lo, hi < GAPS_M ? hi : GAPS_M, GAPS_M_LOG2);
    st(data, j, bits, decode_step(&r, &m, f, bits, ov, m.cls[mi]));
#ifdef GAPS_AVX2
    o += (int64_t)(a + wt); /* the origin moves to the change's end */
#endif
    j++;
  }
  RETURN_IF(r.pos > r.len + 10, d, STITCH_EFORMAT,
            "gaps block: coded data ends early");
  return 0;
}

int gaps_encode_run(const codec_run *run, const sym_fmt *f,
                    const uint8_t *old, const uint8_t *new_, block_span sp,
                    uint8_t *out, size_t cap, size_t *out_len,
                    uint64_t *changed) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return encode_impl(run, &k_, B, old, new_, sp, out, cap, out_len,         \
                       changed);                                              \
  }
  DISPATCH(f, STITCH_EINVAL, encode_impl)
#undef DISPATCH_CASE_
}

#ifdef GAPS_AVX2
/* The decoder of each format with a vector layout, compiled for AVX2 (the
 * others' copies are empty: never called). */
#define X(ID, B, FL, SG, MB, EB)                                              \
  __attribute__((target("avx2"), noinline, flatten)) static int              \
  decode_vec_##ID(const codec_run *run, uint8_t *data, block_span sp,        \
                  const uint8_t *in, size_t len, uint64_t changed,            \
                  stitch_diag *d) {                                           \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return layout_of(&k_, B) != LAYOUT_NONE                                   \
               ? decode_impl(run, &k_, B, 1, data, sp, in, len, changed, d)   \
               : STITCH_EINVAL;                                               \
  }
FMT_LIST(X)
#undef X
#define GAPS_DECODE_VEC(ID, f)                                                \
  if (vec_ok(run, f, f->bits))                                                \
    return decode_vec_##ID(run, data, sp, in, len, changed, d);
#else
#define GAPS_DECODE_VEC(ID, f)
#endif

int gaps_decode_run(const codec_run *run, const sym_fmt *f, uint8_t *data,
                    block_span sp, const uint8_t *in, size_t len,
                    uint64_t changed, stitch_diag *d) {
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    GAPS_DECODE_VEC(ID, (&k_))                                                \
    return decode_impl(run, &k_, B, 0, data, sp, in, len, changed, d);        \
  }
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
#undef DISPATCH_CASE_
}

int gaps_encode(const sym_fmt *f, const uint8_t *old, const uint8_t *new_,
                block_span sp, uint8_t *out, size_t cap, size_t *out_len,
                uint64_t *changed) {
  static const codec_run plain = {0, 0};
  return gaps_encode_run(&plain, f, old, new_, sp, out, cap, out_len, changed);
}

int gaps_decode(const sym_fmt *f, uint8_t *data, block_span sp,
                const uint8_t *in, size_t len, uint64_t changed,
                stitch_diag *d) {
  static const codec_run plain = {0, 0};
  return gaps_decode_run(&plain, f, data, sp, in, len, changed, d);
}
