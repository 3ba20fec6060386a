/* sparse_scan.h: the per-symbol work of the sparse coder, many symbols at a
 * time (SSE2, the x86-64 baseline; AVX2 chosen at run time). Included by
 * sparse.c only.
 *
 * Every group's flag is coded under the bucket of its weight sum of 2^c,
 * c = min(15, max(0, ref - e)) the class of each base symbol, changed or
 * not: that scan is the coder's per-symbol floor. Here a chunk of groups is
 * scanned 16 lanes at a time into one bucket byte per group; the classes
 * themselves, and the position tree's contexts, are needed only inside
 * changed groups, which compute their own (scan_group_tree).
 *
 * 2^c without a per-lane shift (SSE2 has none): (c + 127) << 23 is the bit
 * pattern of the float 2^c. Sums of at most 16 * 2^15 < 2^24 are exact in
 * float in any order, and the bucket of a sum E (2 floor(log2 E) plus the
 * bit below the leading one) is then read from its bits: (bits >> 22) -
 * 254. So the vector path computes exactly what the scalar one does.
 *
 * A symbol's magnitude index e is its exponent field for floats (4-, 8-,
 * 16- and 32-bit layouts here) and its bit length for 8-bit integers
 * (of NOT v for a negative signed one). Wider integers and F64 take
 * sparse.c's scalar loops, which are the reference for all of this.
 *
 * Without SSE2 (another architecture) sparse.c's scalar loops run; they
 * produce the same classes and buckets. */
#ifndef STITCH_CODEC_SPARSE_SCAN_H
#define STITCH_CODEC_SPARSE_SCAN_H

#include "codec/cpu.h"

#include <stdint.h>

#if defined(__SSE2__) && !defined(STITCH_NO_SIMD)
#include <emmintrin.h>
#define SCAN_SSE2 1
#define SCAN_INLINE static inline __attribute__((always_inline))

/* The layouts the vector scans handle: floats of 4 (E2M1 nibbles, two a
 * byte, element 2i in the low one), 8, 16 and 32 bits, and 8-bit
 * integers. */
#define SCAN_FITS(is_float, bits) ((is_float) ? (bits) <= 32 : (bits) == 8)

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

/* Bit length of each byte (0..8): a compare ladder, SSE2 having no
 * per-lane table lookup. */
SCAN_INLINE __m128i scan_bitlen8(__m128i v) {
  __m128i bl = _mm_setzero_si128();
  for (int k = 0; k < 8; k++) {
    __m128i t = _mm_set1_epi8((char)(1 << k));
    bl = _mm_sub_epi8(bl, _mm_cmpeq_epi8(_mm_max_epu8(v, t), v));
  }
  return bl;
}

/* The magnitude indices of the 16 symbols of the group at byte Q, as two
 * vectors of 8 u16 lanes. BITS, MB (exponent position), EMASK (its width),
 * IS_INT and IS_SIGNED are constants where this is inlined. */
SCAN_INLINE void scan_exps16(const uint8_t *q, const unsigned bits,
                             const unsigned mb, const unsigned emask,
                             const int is_int, const int is_signed,
                             __m128i *e0, __m128i *e1) {
  const __m128i z = _mm_setzero_si128(), em = _mm_set1_epi16((short)emask);
  if (is_int) { /* bits == 8 */
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    if (is_signed)
      x = _mm_xor_si128(x, _mm_cmpgt_epi8(z, x));
    __m128i bl = scan_bitlen8(x);
    *e0 = _mm_unpacklo_epi8(bl, z);
    *e1 = _mm_unpackhi_epi8(bl, z);
  } else if (bits == 16) {
    *e0 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)q), (int)mb), em);
    *e1 = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), (int)mb), em);
  } else if (bits == 32) {
    const __m128i em32 = _mm_set1_epi32((int)emask);
    __m128i a = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)q), (int)mb), em32);
    __m128i b = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 16)), (int)mb), em32);
    __m128i c = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 32)), (int)mb), em32);
    __m128i d = _mm_and_si128(_mm_srli_epi32(_mm_loadu_si128((const __m128i *)(q + 48)), (int)mb), em32);
    *e0 = _mm_packs_epi32(a, b); /* exponents <= 255: no saturation */
    *e1 = _mm_packs_epi32(c, d);
  } else if (bits == 8) {
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    *e0 = _mm_and_si128(_mm_srli_epi16(_mm_unpacklo_epi8(x, z), (int)mb), em);
    *e1 = _mm_and_si128(_mm_srli_epi16(_mm_unpackhi_epi8(x, z), (int)mb), em);
  } else { /* two nibbles a byte, element 2i in the low one */
    __m128i x = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)q), z);
    __m128i lo = _mm_and_si128(_mm_srli_epi16(x, (int)mb), em);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(x, (int)(mb + 4)), em);
    /* bytes lo0 hi0 lo1 hi1 ...: the symbols in order */
    __m128i y = _mm_or_si128(lo, _mm_slli_epi16(hi, 8));
    *e0 = _mm_unpacklo_epi8(y, z);
    *e1 = _mm_unpackhi_epi8(y, z);
  }
}

/* One group of 16 symbols at byte Q: its weight partial sums, and its
 * classes stored at CLS unless CLS is NULL (a constant where inlined). */
SCAN_INLINE __m128 scan_group(const uint8_t *q, const unsigned bits,
                              const unsigned mb, const unsigned emask,
                              const int is_int, const int is_signed,
                              __m128i vref, uint8_t *cls) {
  __m128i e0, e1;
  scan_exps16(q, bits, mb, emask, is_int, is_signed, &e0, &e1);
  const __m128i c15 = _mm_set1_epi16(15);
  __m128i c0 = _mm_min_epi16(_mm_subs_epu16(vref, e0), c15);
  __m128i c1 = _mm_min_epi16(_mm_subs_epu16(vref, e1), c15);
  if (cls != NULL)
    _mm_storeu_si128((__m128i *)cls, _mm_packus_epi16(c0, c1));
  return scan_pow2_sum(c0, c1);
}

/* The buckets of NG full groups from byte Q into BKT[NG]. */
SCAN_INLINE void scan_buckets(const uint8_t *q, const unsigned bits,
                              const unsigned mb, const unsigned emask,
                              const int is_int, const int is_signed,
                              unsigned ref, unsigned ng, uint8_t *bkt) {
  const unsigned gbytes = 16 * bits / 8;
  const __m128i vref = _mm_set1_epi16((short)ref);
  unsigned g = 0;
  for (; g + 4 <= ng; g += 4) {
    __m128 a = scan_group(q + (g + 0) * gbytes, bits, mb, emask, is_int, is_signed, vref, NULL);
    __m128 b = scan_group(q + (g + 1) * gbytes, bits, mb, emask, is_int, is_signed, vref, NULL);
    __m128 c = scan_group(q + (g + 2) * gbytes, bits, mb, emask, is_int, is_signed, vref, NULL);
    __m128 d = scan_group(q + (g + 3) * gbytes, bits, mb, emask, is_int, is_signed, vref, NULL);
    scan_buckets4(a, b, c, d, bkt + g, 4);
  }
  if (g < ng) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                   _mm_setzero_ps()};
    for (unsigned i = 0; g + i < ng; i++)
      s[i] = scan_group(q + (g + i) * gbytes, bits, mb, emask, is_int,
                        is_signed, vref, NULL);
    scan_buckets4(s[0], s[1], s[2], s[3], bkt + g, ng - g);
  }
}

#ifdef CODEC_X86_SIMD
/* The chunk scans again, 16 lanes to a register, for CPUs with AVX2:
 * compiled for AVX2 here only and chosen at run time (codec_avx2, in
 * codec/cpu.h). They store the same buckets and change masks. */
#include <immintrin.h>
#define SCAN_AVX2 1
#define SCAN_AVX2_FN __attribute__((target("avx2"))) static inline

/* Bit length of each byte: two 16-entry table lookups. */
SCAN_AVX2_FN __m128i scan_bitlen8_avx2(__m128i v) {
  const __m128i lo = _mm_setr_epi8(0, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4);
  const __m128i hi = _mm_setr_epi8(0, 5, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8);
  const __m128i m4 = _mm_set1_epi8(15);
  return _mm_max_epu8(_mm_shuffle_epi8(lo, _mm_and_si128(v, m4)),
                      _mm_shuffle_epi8(hi, _mm_and_si128(_mm_srli_epi16(v, 4), m4)));
}

SCAN_AVX2_FN __m128 scan_group_avx2(const uint8_t *q, const unsigned bits,
                                    const int is_int, const int is_signed,
                                    __m256i sh, __m256i em, __m256i vref) {
  const __m256i c15 = _mm256_set1_epi16(15), bias = _mm256_set1_epi16(127 << 7);
  const __m256i z = _mm256_setzero_si256();
  __m256i e;
  if (is_int) {
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    if (is_signed)
      x = _mm_xor_si128(x, _mm_cmpgt_epi8(_mm_setzero_si128(), x));
    e = _mm256_cvtepu8_epi16(scan_bitlen8_avx2(x));
  } else if (bits == 16) {
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
  __m256i f = _mm256_add_epi16(_mm256_slli_epi16(c, 7), bias);
  __m256 w = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, f)),
                           _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, f)));
  return _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}

/* Nibble groups are 8 bytes, and a nibble's weight 2^c (c <= 3: two
 * exponent bits) is one of 16 byte values: look the weights of 64 nibbles
 * up at once, and let one sum of absolute differences add each group's 16.
 * Sums lie in [16, 128]; the bucket is read from their float bits as
 * above. Eight groups (64 bytes) a round. */
SCAN_AVX2_FN __m256i scan_nibble_sums_avx2(const uint8_t *q, __m256i lut) {
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i x = _mm256_loadu_si256((const __m256i *)q);
  __m256i wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, m4));
  __m256i wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), m4));
  return _mm256_sad_epu8(_mm256_add_epi8(wl, wh), _mm256_setzero_si256());
}

SCAN_AVX2_FN __m128i scan_nibble_round_avx2(const uint8_t *q, __m256i lut) {
  /* 32-bit lanes a0 b0 a1 b1 ..., then a0..a3 b0..b3 */
  __m256i ab = _mm256_or_si256(scan_nibble_sums_avx2(q, lut),
                               _mm256_slli_epi64(scan_nibble_sums_avx2(q + 32, lut), 32));
  __m256i k = _mm256_sub_epi32(
      _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(ab)), 22),
      _mm256_set1_epi32(254));
  k = _mm256_permutevar8x32_epi32(k, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  __m128i k16 = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
  return _mm_packus_epi16(k16, k16);
}

/* NIB_W[v] is the weight of nibble value v. */
__attribute__((target("avx2"))) __attribute__((noinline)) static void
scan_nibble_buckets_avx2(const uint8_t *q, const uint8_t *nib_w, unsigned ng,
                         uint8_t *bkt) {
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nib_w));
  unsigned g = 0;
  for (; g + 8 <= ng; g += 8)
    _mm_storel_epi64((__m128i *)(bkt + g), scan_nibble_round_avx2(q + 8 * g, lut));
  if (g < ng) { /* the chunk's last groups: read no byte past them */
    uint8_t t[64] = {0}, b[16];
    __builtin_memcpy(t, q + 8 * g, 8 * (ng - g));
    _mm_storeu_si128((__m128i *)b, scan_nibble_round_avx2(t, lut));
    __builtin_memcpy(bkt + g, b, ng - g);
  }
}

SCAN_AVX2_FN __attribute__((always_inline)) void
scan_buckets_avx2_body(const uint8_t *q, const unsigned bits, unsigned mb,
                       unsigned emask, const int is_int, const int is_signed,
                       unsigned ref, unsigned ng, uint8_t *bkt) {
  const unsigned gbytes = 16 * bits / 8;
  const __m256i vref = _mm256_set1_epi16((short)ref);
  const __m256i em = _mm256_set1_epi16((short)emask);
  const __m256i sh = _mm256_castsi128_si256(_mm_cvtsi32_si128((int)mb));
  unsigned g = 0;
  for (; g + 4 <= ng; g += 4) {
    __m128 a = scan_group_avx2(q + (g + 0) * gbytes, bits, is_int, is_signed, sh, em, vref);
    __m128 b = scan_group_avx2(q + (g + 1) * gbytes, bits, is_int, is_signed, sh, em, vref);
    __m128 c = scan_group_avx2(q + (g + 2) * gbytes, bits, is_int, is_signed, sh, em, vref);
    __m128 d = scan_group_avx2(q + (g + 3) * gbytes, bits, is_int, is_signed, sh, em, vref);
    scan_buckets4(a, b, c, d, bkt + g, 4);
  }
  if (g < ng) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                   _mm_setzero_ps()};
    for (unsigned i = 0; g + i < ng; i++)
      s[i] = scan_group_avx2(q + (g + i) * gbytes, bits, is_int, is_signed,
                             sh, em, vref);
    scan_buckets4(s[0], s[1], s[2], s[3], bkt + g, ng - g);
  }
}

/* One compiled scan per layout, so that none tests the layout per group. */
#define SCAN_AVX2_LAYOUTS(X)                                                  \
  X(8, 0, 0)  /* F8 */                                                        \
  X(16, 0, 0) /* BF16, F16 */                                                 \
  X(32, 0, 0) /* F32 */                                                       \
  X(8, 1, 0)  /* U8, BOOL */                                                  \
  X(8, 1, 1)  /* I8 */
#define X(B, I, S)                                                            \
  __attribute__((target("avx2"))) __attribute__((noinline)) static void      \
  scan_buckets_avx2_##B##_##I##_##S(const uint8_t *q, unsigned mb,            \
                                    unsigned emask, unsigned ref,             \
                                    unsigned ng, uint8_t *bkt) {              \
    scan_buckets_avx2_body(q, B, mb, emask, I, S, ref, ng, bkt);              \
  }
SCAN_AVX2_LAYOUTS(X)
#undef X

/* The buckets of NG full groups from byte Q (layout as scan_buckets;
 * NIB_W as above, for nibbles). */
static inline __attribute__((always_inline)) void
scan_buckets_avx2(const uint8_t *q, const unsigned bits, unsigned mb,
                  unsigned emask, const int is_int, const int is_signed,
                  unsigned ref, const uint8_t *nib_w, unsigned ng,
                  uint8_t *bkt) {
  if (bits == 4) {
    scan_nibble_buckets_avx2(q, nib_w, ng, bkt);
    return;
  }
#define X(B, I, S)                                                            \
  if (bits == B && is_int == I && is_signed == S) {                           \
    scan_buckets_avx2_##B##_##I##_##S(q, mb, emask, ref, ng, bkt);            \
    return;                                                                   \
  }
  SCAN_AVX2_LAYOUTS(X)
#undef X
}

/* Bit g set when group g of NG (GBYTES bytes each) differs between A and
 * B. Groups of 8 bytes (nibbles) go four to a compare. */
__attribute__((target("avx2"))) __attribute__((noinline)) static uint64_t
scan_groups_differ_avx2(const uint8_t *a, const uint8_t *b,
                        const unsigned gbytes, unsigned ng) {
  uint64_t m = 0;
  unsigned g = 0;
  if (gbytes == 8) {
    for (; g + 4 <= ng; g += 4) {
      __m256i eq = _mm256_cmpeq_epi64(_mm256_loadu_si256((const __m256i *)(a + 8 * g)),
                                      _mm256_loadu_si256((const __m256i *)(b + 8 * g)));
      m |= (uint64_t)(~(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(eq)) & 15u) << g;
    }
    for (; g < ng; g++)
      m |= (uint64_t)(__builtin_memcmp(a + 8 * g, b + 8 * g, 8) != 0) << g;
    return m;
  }
  for (; g < ng; g++) {
    const uint8_t *x = a + (uint64_t)g * gbytes, *y = b + (uint64_t)g * gbytes;
    unsigned ne;
    if (gbytes == 16) {
      ne = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)x),
                                                     _mm_loadu_si128((const __m128i *)y))) ^ 0xFFFFu;
    } else {
      __m256i acc = _mm256_setzero_si256();
      for (unsigned i = 0; i < gbytes; i += 32)
        acc = _mm256_or_si256(acc, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)),
                                                     _mm256_loadu_si256((const __m256i *)(y + i))));
      ne = !_mm256_testz_si256(acc, acc);
    }
    m |= (uint64_t)(ne != 0) << g;
  }
  return m;
}
#endif

/* The contexts of the position tree of a full group, from its classes in
 * two u16 vectors (symbols 0-7, 8-15). With W(k) the weight sum of heap
 * node k's span (node 1 the group, node k's halves 2k and 2k+1, leaves
 * 16..31), for the 15 inner nodes:
 *   LQ[k] = level(k) * 8 + floor(8 W(2k) / W(k)), the left context index
 *           (level 3 for node 1 down to 0 for nodes 8..15);
 *   RB[k] = bucket(W(2k + 1)), the right context index.
 * All 15 quotients come from four vector divisions, off the coder's
 * critical path. The weights are floats (exact: integers below 2^24); the
 * float quotient below 8 errs by at most 2^-22, while a non-integer 8a/n
 * lies at least 1/n >= 2^-19 from an integer, so its floor is exact.
 * Entry 0 is unused. */
SCAN_INLINE void scan_tree_contexts(__m128i c0, __m128i c1, uint8_t *lq,
                                    uint8_t *rb) {
  const __m128i bias = _mm_set1_epi16(127 << 7), z = _mm_setzero_si128();
  const __m128 one = _mm_set1_ps(1.0f), eight = _mm_set1_ps(8.0f);
  __m128i f0 = _mm_add_epi16(_mm_slli_epi16(c0, 7), bias);
  __m128i f1 = _mm_add_epi16(_mm_slli_epi16(c1, 7), bias);
  __m128 l0 = _mm_castsi128_ps(_mm_unpacklo_epi16(z, f0)); /* W16..19 */
  __m128 l1 = _mm_castsi128_ps(_mm_unpackhi_epi16(z, f0)); /* W20..23 */
  __m128 l2 = _mm_castsi128_ps(_mm_unpacklo_epi16(z, f1)); /* W24..27 */
  __m128 l3 = _mm_castsi128_ps(_mm_unpackhi_epi16(z, f1)); /* W28..31 */
#define EVEN_(a, b) _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))
#define ODD_(a, b) _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))
  /* Nodes 8..15: left halves, right halves, sums. */
  __m128 L2 = EVEN_(l0, l1), R2 = ODD_(l0, l1), N2 = _mm_add_ps(L2, R2);
  __m128 L3 = EVEN_(l2, l3), R3 = ODD_(l2, l3), N3 = _mm_add_ps(L3, R3);
  /* Nodes 4..7. */
  __m128 L1 = EVEN_(N2, N3), R1 = ODD_(N2, N3), N1 = _mm_add_ps(L1, R1);
  /* Nodes 0..3 (0 a placeholder of weight 1): h = W2 W3 W2 W3. */
  __m128 t = EVEN_(N1, N1), u = ODD_(N1, N1), h = _mm_add_ps(t, u);
  __m128 w1 = _mm_add_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 a = _mm_unpacklo_ps(one, h);                               /* 1 W2 1 W3 */
  __m128 L0 = _mm_shuffle_ps(a, t, _MM_SHUFFLE(1, 0, 1, 0));       /* 1 W2 W4 W6 */
  __m128 R0 = _mm_shuffle_ps(a, u, _MM_SHUFFLE(1, 0, 3, 2));       /* 1 W3 W5 W7 */
  __m128 N0 = _mm_shuffle_ps(_mm_unpacklo_ps(one, w1), h,
                             _MM_SHUFFLE(1, 0, 1, 0));              /* 1 W1 W2 W3 */
#undef EVEN_
#undef ODD_
#define Q_(L, N) _mm_cvttps_epi32(_mm_div_ps(_mm_mul_ps(L, eight), N))
  __m128i q0 = _mm_add_epi32(Q_(L0, N0), _mm_setr_epi32(0, 24, 16, 16));
  __m128i q1 = _mm_add_epi32(Q_(L1, N1), _mm_set1_epi32(8));
  __m128i q2 = Q_(L2, N2), q3 = Q_(L3, N3);
#undef Q_
  _mm_storeu_si128((__m128i *)lq, _mm_packus_epi16(_mm_packs_epi32(q0, q1),
                                                   _mm_packs_epi32(q2, q3)));
  const __m128i b254 = _mm_set1_epi32(254);
#define B_(R) _mm_sub_epi32(_mm_srli_epi32(_mm_castps_si128(R), 22), b254)
  _mm_storeu_si128((__m128i *)rb, _mm_packus_epi16(_mm_packs_epi32(B_(R0), B_(R1)),
                                                   _mm_packs_epi32(B_(R2), B_(R3))));
#undef B_
}

/* A changed group's classes (into CLS) and tree contexts (as above). */
SCAN_INLINE void scan_group_tree(const uint8_t *q, const unsigned bits,
                                 const unsigned mb, const unsigned emask,
                                 const int is_int, const int is_signed,
                                 unsigned ref, uint8_t *cls, uint8_t *lq,
                                 uint8_t *rb) {
  __m128i e0, e1;
  scan_exps16(q, bits, mb, emask, is_int, is_signed, &e0, &e1);
  const __m128i c15 = _mm_set1_epi16(15), vref = _mm_set1_epi16((short)ref);
  __m128i c0 = _mm_min_epi16(_mm_subs_epu16(vref, e0), c15);
  __m128i c1 = _mm_min_epi16(_mm_subs_epu16(vref, e1), c15);
  _mm_storeu_si128((__m128i *)cls, _mm_packus_epi16(c0, c1));
  scan_tree_contexts(c0, c1, lq, rb);
}

/* Bit g set when group g of NG (GBYTES bytes each, a multiple of 8) differs
 * between A and B. Groups of 8 bytes (nibbles) go two to a compare: equal
 * 32-bit halves, paired up. */
SCAN_INLINE uint64_t scan_groups_differ(const uint8_t *a, const uint8_t *b,
                                        const unsigned gbytes, unsigned ng) {
  uint64_t m = 0;
  unsigned g = 0;
  if (gbytes == 8) {
    for (; g + 2 <= ng; g += 2) {
      __m128i eq = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + 8 * g)),
                                   _mm_loadu_si128((const __m128i *)(b + 8 * g)));
      eq = _mm_and_si128(eq, _mm_shuffle_epi32(eq, _MM_SHUFFLE(2, 3, 0, 1)));
      m |= (uint64_t)(~(unsigned)_mm_movemask_pd(_mm_castsi128_pd(eq)) & 3u) << g;
    }
  }
  for (; g < ng; g++) {
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
