/* sparse_scan.h: the per-symbol work of the sparse coder, many symbols at a
 * time (SSE2, the x86-64 baseline). Included by sparse.c only.
 *
 * Every group's context needs the class of each of its base symbols,
 * c = min(15, max(0, ref - e)), and the bucket of its weight sum of 2^c,
 * changed or not: that scan was the coder's per-symbol floor (1.7 ns a
 * symbol to apply, against 0.5 ns for memcpy). Here a chunk of groups is
 * scanned with 16 lanes at a time, and the coding loop reads back one
 * bucket per group and, only in changed groups, the classes.
 *
 * 2^c without a per-lane shift (SSE2 has none): (c + 127) << 23 is the bit
 * pattern of the float 2^c. Sums of at most 16 * 2^15 < 2^24 are exact in
 * float in any order, and the bucket of a sum E (2 floor(log2 E) plus the
 * bit below the leading one) is then read from its bits: (bits >> 22) -
 * 254. So the vector path computes exactly what the scalar one does.
 *
 * Without SSE2 (another architecture) sparse.c's scalar loops run; they are
 * the reference and produce the same classes and buckets. */
#ifndef STITCH_CODEC_SPARSE_SCAN_H
#define STITCH_CODEC_SPARSE_SCAN_H

#include <stdint.h>

#if defined(__SSE2__) && !defined(STITCH_NO_SIMD)
#include <emmintrin.h>
#define SCAN_SSE2 1
#define SCAN_INLINE static inline __attribute__((always_inline))

/* Sum of 2^c over 16 classes held in two vectors of 8 u16 lanes (c <= 15),
 * as 4 float partial sums. */
SCAN_INLINE __m128 scan_pow2_sum(__m128i c0, __m128i c1) {
  const __m128i bias = _mm_set1_epi16(127 << 7), z = _mm_setzero_si128();
  __m128i f0 = _mm_add_epi16(_mm_slli_epi16(c0, 7), bias);
  __m128i f1 = _mm_add_epi16(_mm_slli_epi16(c1, 7), bias);
  __m128 s = _mm_add_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(z, f0)),
                        _mm_castsi128_ps(_mm_unpackhi_epi16(z, f0)));
  __m128 t = _mm_add_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(z, f1)),
                        _mm_castsi128_ps(_mm_unpackhi_epi16(z, f1)));
  return _mm_add_ps(s, t);
}

/* Four groups' partial sums -> their four buckets, stored as bytes. */
SCAN_INLINE void scan_buckets4(__m128 a, __m128 b, __m128 c, __m128 d,
                               uint8_t *bkt, unsigned n) {
  __m128 s0 = _mm_add_ps(_mm_unpacklo_ps(a, b), _mm_unpackhi_ps(a, b));
  __m128 s1 = _mm_add_ps(_mm_unpacklo_ps(c, d), _mm_unpackhi_ps(c, d));
  __m128 s = _mm_add_ps(_mm_movelh_ps(s0, s1), _mm_movehl_ps(s1, s0));
  __m128i k = _mm_sub_epi32(_mm_srli_epi32(_mm_castps_si128(s), 22),
                            _mm_set1_epi32(254));
  k = _mm_packs_epi32(k, k);
  k = _mm_packus_epi16(k, k);
  uint32_t v = (uint32_t)_mm_cvtsi128_si32(k);
  if (n == 4) {
    __builtin_memcpy(bkt, &v, 4);
  } else {
    for (unsigned i = 0; i < n; i++)
      bkt[i] = (uint8_t)(v >> (8 * i));
  }
}

/* Classes of 16 symbols from their exponents in two u16 vectors. */
SCAN_INLINE void scan_classes16(__m128i e0, __m128i e1, __m128i vref,
                                __m128i *c0, __m128i *c1) {
  const __m128i c15 = _mm_set1_epi16(15);
  *c0 = _mm_min_epi16(_mm_subs_epu16(vref, e0), c15);
  *c1 = _mm_min_epi16(_mm_subs_epu16(vref, e1), c15);
}

/* One group of 16 symbols starting at byte Q, for a float layout of BITS
 * (4, 8, 16 or 32) with the exponent at bit MB, EMASK wide: stores the 16
 * classes at CLS and returns the weight partial sums. */
SCAN_INLINE __m128 scan_group(const uint8_t *q, const unsigned bits,
                              const unsigned mb, const unsigned emask,
                              __m128i vref, uint8_t *cls) {
  const __m128i z = _mm_setzero_si128(), em = _mm_set1_epi16((short)emask);
  __m128i e0, e1;
  if (bits == 16) {
    e0 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)q), (int)mb), em);
    e1 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), (int)mb), em);
  } else if (bits == 32) {
    const __m128i em32 = _mm_set1_epi32((int)emask);
    __m128i a = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)q), (int)mb), em32);
    __m128i b = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 16)), (int)mb), em32);
    __m128i c = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 32)), (int)mb), em32);
    __m128i d = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 48)), (int)mb), em32);
    e0 = _mm_packs_epi32(a, b); /* exponents <= 255: no saturation */
    e1 = _mm_packs_epi32(c, d);
  } else if (bits == 8) {
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    e0 = _mm_and_si128(_mm_srli_epi16(_mm_unpacklo_epi8(x, z), (int)mb), em);
    e1 = _mm_and_si128(_mm_srli_epi16(_mm_unpackhi_epi8(x, z), (int)mb), em);
  } else { /* two nibbles a byte, element 2i in the low one */
    __m128i x = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)q), z);
    __m128i lo = _mm_and_si128(_mm_srli_epi16(x, (int)mb), em);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(x, (int)(mb + 4)), em);
    /* bytes lo0 hi0 lo1 hi1 ...: the symbols in order */
    __m128i y = _mm_or_si128(lo, _mm_slli_epi16(hi, 8));
    e0 = _mm_unpacklo_epi8(y, z);
    e1 = _mm_unpackhi_epi8(y, z);
  }
  __m128i c0, c1;
  scan_classes16(e0, e1, vref, &c0, &c1);
  _mm_storeu_si128((__m128i *)cls, _mm_packus_epi16(c0, c1));
  return scan_pow2_sum(c0, c1);
}

/* NG full groups from byte Q: classes into CLS[16 NG], buckets into
 * BKT[NG]. */
SCAN_INLINE void scan_float_groups(const uint8_t *q, const unsigned bits,
                                   const unsigned mb, const unsigned emask,
                                   unsigned ref, unsigned ng, uint8_t *cls,
                                   uint8_t *bkt) {
  const unsigned gbytes = 16 * bits / 8;
  const __m128i vref = _mm_set1_epi16((short)ref);
  unsigned g = 0;
  for (; g + 4 <= ng; g += 4) {
    __m128 a = scan_group(q + (g + 0) * gbytes, bits, mb, emask, vref, cls + 16 * (g + 0));
    __m128 b = scan_group(q + (g + 1) * gbytes, bits, mb, emask, vref, cls + 16 * (g + 1));
    __m128 c = scan_group(q + (g + 2) * gbytes, bits, mb, emask, vref, cls + 16 * (g + 2));
    __m128 d = scan_group(q + (g + 3) * gbytes, bits, mb, emask, vref, cls + 16 * (g + 3));
    scan_buckets4(a, b, c, d, bkt + g, 4);
  }
  if (g < ng) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                   _mm_setzero_ps()};
    for (unsigned i = 0; g + i < ng; i++)
      s[i] = scan_group(q + (g + i) * gbytes, bits, mb, emask, vref,
                        cls + 16 * (g + i));
    scan_buckets4(s[0], s[1], s[2], s[3], bkt + g, ng - g);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(STITCH_NO_AVX2)
/* The same scan, 16 lanes to a register, for CPUs with AVX2: compiled for
 * AVX2 here only and chosen at run time (scan_have_avx2), so the library
 * still runs on any x86-64. It stores the same classes and buckets. */
#include <immintrin.h>
#define SCAN_AVX2 1

static inline int scan_have_avx2(void) {
  return __builtin_cpu_supports("avx2");
}

__attribute__((target("avx2"))) static inline __m128
scan_group_avx2(const uint8_t *q, const unsigned bits, __m256i sh, __m256i em,
                __m256i vref, uint8_t *cls) {
  const __m256i c15 = _mm256_set1_epi16(15), bias = _mm256_set1_epi16(127 << 7);
  const __m256i z = _mm256_setzero_si256();
  __m256i e;
  if (bits == 16) {
    e = _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)q),
                                          _mm256_castsi256_si128(sh)), em);
  } else if (bits == 32) {
    __m128i s = _mm256_castsi256_si128(sh);
    __m256i a = _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)q), s);
    __m256i b = _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(q + 32)), s);
    /* exponents <= 255; packs works per 128-bit lane: restore the order */
    e = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
    e = _mm256_and_si256(e, em);
  } else if (bits == 8) {
    e = _mm256_and_si256(
        _mm256_srl_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q)),
                         _mm256_castsi256_si128(sh)), em);
  } else {
    const __m128i z1 = _mm_setzero_si128();
    const __m128i em1 = _mm256_castsi256_si128(em);
    const __m128i s = _mm256_castsi256_si128(sh);
    __m128i x = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)q), z1);
    __m128i lo = _mm_and_si128(_mm_srl_epi16(x, s), em1);
    __m128i hi = _mm_and_si128(_mm_srl_epi16(_mm_srli_epi16(x, 4), s), em1);
    e = _mm256_cvtepu8_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 8)));
  }
  __m256i c = _mm256_min_epi16(_mm256_subs_epu16(vref, e), c15);
  __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi16(c, c), 0x08);
  _mm_storeu_si128((__m128i *)cls, _mm256_castsi256_si128(pk));
  __m256i f = _mm256_add_epi16(_mm256_slli_epi16(c, 7), bias);
  __m256 w = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, f)),
                           _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, f)));
  return _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}

__attribute__((target("avx2"))) __attribute__((noinline)) static void
scan_float_groups_avx2(const uint8_t *q, const unsigned bits, unsigned mb,
                       unsigned emask, unsigned ref, unsigned ng, uint8_t *cls,
                       uint8_t *bkt) {
  const unsigned gbytes = 16 * bits / 8;
  const __m256i vref = _mm256_set1_epi16((short)ref);
  const __m256i em = _mm256_set1_epi16((short)emask);
  const __m256i sh = _mm256_castsi128_si256(_mm_cvtsi32_si128((int)mb));
  unsigned g = 0;
  for (; g + 4 <= ng; g += 4) {
    __m128 a = scan_group_avx2(q + (g + 0) * gbytes, bits, sh, em, vref, cls + 16 * (g + 0));
    __m128 b = scan_group_avx2(q + (g + 1) * gbytes, bits, sh, em, vref, cls + 16 * (g + 1));
    __m128 c = scan_group_avx2(q + (g + 2) * gbytes, bits, sh, em, vref, cls + 16 * (g + 2));
    __m128 d = scan_group_avx2(q + (g + 3) * gbytes, bits, sh, em, vref, cls + 16 * (g + 3));
    scan_buckets4(a, b, c, d, bkt + g, 4);
  }
  if (g < ng) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                   _mm_setzero_ps()};
    for (unsigned i = 0; g + i < ng; i++)
      s[i] = scan_group_avx2(q + (g + i) * gbytes, bits, sh, em, vref,
                             cls + 16 * (g + i));
    scan_buckets4(s[0], s[1], s[2], s[3], bkt + g, ng - g);
  }
}
#endif

/* The position tree's weights of a full group from its 16 classes, as
 * floats (exact: integers below 2^24), heap-ordered: W[16 + j] = 2^c_j,
 * W[k] = W[2k] + W[2k + 1] down to W[1]. */
SCAN_INLINE void scan_tree_weights(const uint8_t *cls, float *W) {
  const __m128i bias = _mm_set1_epi16(127 << 7), z = _mm_setzero_si128();
  __m128i c = _mm_loadu_si128((const __m128i *)cls);
  __m128i f0 = _mm_add_epi16(_mm_slli_epi16(_mm_unpacklo_epi8(c, z), 7), bias);
  __m128i f1 = _mm_add_epi16(_mm_slli_epi16(_mm_unpackhi_epi8(c, z), 7), bias);
  __m128 l0 = _mm_castsi128_ps(_mm_unpacklo_epi16(z, f0));
  __m128 l1 = _mm_castsi128_ps(_mm_unpackhi_epi16(z, f0));
  __m128 l2 = _mm_castsi128_ps(_mm_unpacklo_epi16(z, f1));
  __m128 l3 = _mm_castsi128_ps(_mm_unpackhi_epi16(z, f1));
  _mm_storeu_ps(W + 16, l0);
  _mm_storeu_ps(W + 20, l1);
  _mm_storeu_ps(W + 24, l2);
  _mm_storeu_ps(W + 28, l3);
#define PAIRS_(a, b)                                                          \
  _mm_add_ps(_mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),                  \
             _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)))
  __m128 a0 = PAIRS_(l0, l1), a1 = PAIRS_(l2, l3); /* W8..11, W12..15 */
  _mm_storeu_ps(W + 8, a0);
  _mm_storeu_ps(W + 12, a1);
  __m128 b = PAIRS_(a0, a1); /* W4..7 */
  _mm_storeu_ps(W + 4, b);
  __m128 h = PAIRS_(b, b); /* W2, W3, W2, W3 */
#undef PAIRS_
  _mm_storel_pi((__m64 *)(W + 2), h);
  W[1] = W[2] + W[3];
}

/* Bit g set when group g of NG (GBYTES bytes each, a multiple of 8) differs
 * between A and B. */
SCAN_INLINE uint64_t scan_groups_differ(const uint8_t *a, const uint8_t *b,
                                        const unsigned gbytes, unsigned ng) {
  uint64_t m = 0;
  for (unsigned g = 0; g < ng; g++) {
    const uint8_t *x = a + (uint64_t)g * gbytes, *y = b + (uint64_t)g * gbytes;
    int eq;
    if (gbytes == 8) {
      eq = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadl_epi64((const __m128i *)x),
                                            _mm_loadl_epi64((const __m128i *)y))) == 0xFFFF;
    } else {
      __m128i acc = _mm_setzero_si128();
      for (unsigned i = 0; i < gbytes; i += 16)
        acc = _mm_or_si128(acc, _mm_xor_si128(_mm_loadu_si128((const __m128i *)(x + i)),
                                              _mm_loadu_si128((const __m128i *)(y + i))));
      eq = _mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) == 0xFFFF;
    }
    m |= (uint64_t)!eq << g;
  }
  return m;
}

/* Bit j set when symbol j of a group of 16 differs (BITS 4, 8, 16, 32). */
SCAN_INLINE unsigned scan_symbols_differ(const uint8_t *a, const uint8_t *b,
                                         const unsigned bits) {
  const __m128i z = _mm_setzero_si128();
  __m128i eq;
  if (bits == 16) {
    __m128i e0 = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)a), _mm_loadu_si128((const __m128i *)b));
    __m128i e1 = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(a + 16)), _mm_loadu_si128((const __m128i *)(b + 16)));
    eq = _mm_packs_epi16(e0, e1);
  } else if (bits == 32) {
    __m128i e[4];
    for (int i = 0; i < 4; i++)
      e[i] = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + 16 * i)),
                             _mm_loadu_si128((const __m128i *)(b + 16 * i)));
    eq = _mm_packs_epi16(_mm_packs_epi32(e[0], e[1]), _mm_packs_epi32(e[2], e[3]));
  } else if (bits == 8) {
    eq = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)a), _mm_loadu_si128((const __m128i *)b));
  } else {
    __m128i x = _mm_unpacklo_epi8(_mm_xor_si128(_mm_loadl_epi64((const __m128i *)a),
                                                _mm_loadl_epi64((const __m128i *)b)), z);
    /* bytes: low nibble's difference, high nibble's, in symbol order */
    __m128i y = _mm_or_si128(_mm_and_si128(x, _mm_set1_epi16(0x0F)),
                             _mm_and_si128(_mm_slli_epi16(x, 4), _mm_set1_epi16(0x0F00)));
    eq = _mm_cmpeq_epi8(y, z);
  }
  return (unsigned)_mm_movemask_epi8(eq) ^ 0xFFFFu;
}
#endif

#endif
