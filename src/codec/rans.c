/* rans.c: the RANS coding (proto/delta.md "RANS"), for the fastest mode,
 * and RANSC, RANS within classes, for dense blocks by default.
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
 * RANS depends on nothing of the base's symbols: no weights, no contexts.
 * So the encoder only compares the two blocks word by word, and the
 * decoder touches only the symbols that change. It decodes a batch of
 * gaps ahead of their steps and prefetches the symbols they name: no
 * decision waits on a symbol's load. The price is the context gain: RANS
 * codes at about the memoryless bound, where GAPS codes 20-30 % below it
 * (docs/codec.md, "The fastest mode").
 *
 * RANSC (proto/delta.md "RANSC") takes that gain back the rANS way: the
 * block's symbols fall into 2 to 4 classes by their base magnitude (runs
 * of octaves; a small weight changes more often), and each class is coded
 * as RANS over its own members, gaps counting members of the class. The
 * decoder classifies a window of 4096 symbols at a time (AVX2 where the
 * CPU has it), then turns each class's ranks into positions and applies
 * their steps; its streams run two rANS states in turn, and its tables
 * have 10-bit probabilities, so that more of its work overlaps and its
 * tables stay in L1.
 *
 * rANS encodes backwards: the first pass stores each change's two symbols
 * (in the caller's scratch) and writes the raw bits; the second codes the
 * symbols from the last to the first, both streams in one loop so that
 * the states' chains overlap. */
#include "codec/cpu.h"
#include "codec/delta_internal.h"
#include "codec/symbol.h"
#include "common/diag.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#define SCALE_BITS 12  /* RANS's probabilities */
#define SCALE_BITS_C 10 /* RANSC's: its 2 to 8 tables then stay in L1 */
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
static inline __attribute__((always_inline)) int
bitr_get(bitr *r, unsigned n, uint64_t *v) {
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
 * sum to 2^SB, every symbol that occurs keeping at least 1. */
static void normalize(const uint32_t *c, unsigned n, uint64_t total,
                      uint32_t *f, unsigned sb) {
  const uint32_t scale = 1u << sb;
  uint32_t sum = 0;
  for (unsigned s = 0; s < n; s++) {
    f[s] = c[s] == 0 ? 0 : (uint32_t)(((uint64_t)c[s] * scale) / total);
    if (c[s] != 0 && f[s] == 0)
      f[s] = 1;
    sum += f[s];
  }
  /* Rounding down leaves at most N short, the floor of 1 at most N over:
   * settle the difference on the largest frequencies. */
  while (sum != scale) {
    unsigned big = 0;
    for (unsigned s = 1; s < n; s++)
      if (f[s] > f[big])
        big = s;
    if (sum < scale) {
      f[big] += scale - sum;
      sum = scale;
    } else {
      f[big]--; /* the largest is above 1 while the sum passes the scale */
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

static void esym_init(esym *e, uint32_t start, uint32_t f, unsigned sb) {
  e->x_max = ((STATE_LOW >> sb) << 8) * f;
  e->cmpl = (uint16_t)((1u << sb) - f);
  if (f < 2) { /* q = x - 1 from a reciprocal of just under 1 */
    e->rcp = ~0u;
    e->shift = 0;
    e->bias = start + (1u << sb) - 1;
    return;
  }
  unsigned sh = 0;
  while (f > (1u << sh))
    sh++;
  e->rcp = (uint32_t)(((1ull << (sh + 31)) + f - 1) / f);
  e->shift = (uint16_t)(sh - 1);
  e->bias = start;
}

static void esyms_of(const uint32_t *f, unsigned n, esym *e, unsigned sb) {
  uint32_t start = 0;
  for (unsigned s = 0; s < n; s++) {
    esym_init(&e[s], start, f[s] ? f[s] : 1, sb);
    start += f[s];
  }
}

/* Codes symbol E into state X, writing bytes down from *P. A state
 * below 2^31 over x_max >= 2^19 sheds at most two bytes, and does so
 * without a branch: the count is a coin toss at every symbol. Both
 * compares read the state as it came, and both bytes are stored
 * whatever the count, so the chain to the next symbol is short; a byte
 * stored below the new *P is overwritten by the next. (Room for two
 * bytes below *P is the caller's check.) */
static inline void rans_put(uint32_t *x, uint8_t **p, const esym *e) {
  uint32_t v = *x;
  unsigned out = (unsigned)(v >= e->x_max) + (unsigned)((v >> 8) >= e->x_max);
  (*p)[-1] = (uint8_t)v;
  (*p)[-2] = (uint8_t)(v >> 8);
  *p -= out;
  v >>= 8 * out;
  uint32_t q = (uint32_t)(((uint64_t)v * e->rcp) >> 32) >> e->shift;
  *x = v + e->bias + q * e->cmpl;
}

/* The decoder's form: symbol, start and frequency by slot. */
typedef struct dtab {
  int empty;
  unsigned sb; /* the table's scale: 2^sb */
  uint16_t freq[STEP_SYMS], start[STEP_SYMS];
  uint8_t sym[SCALE];
} dtab;

static int table_get(rd *r, unsigned n, dtab *t, unsigned sb) {
  const uint32_t scale = 1u << sb;
  t->sb = sb;
  uint8_t cnt;
  if (rd_u8(r, &cnt) != 0 || cnt > n)
    return -1;
  t->empty = cnt == 0;
  uint32_t start = 0;
  for (unsigned s = 0; s < cnt; s++) {
    uint64_t f;
    if (rd_varint(r, &f) != 0 || f > scale - start)
      return -1;
    t->freq[s] = (uint16_t)f;
    t->start[s] = (uint16_t)start;
    memset(t->sym + start, (int)s, f);
    start += (uint32_t)f;
  }
  return t->empty || start == scale ? 0 : -1;
}

/* Decodes a symbol of table T from state X, reading from *P (before
 * END) as it renormalises. */
static inline int rans_get(uint32_t *x, const uint8_t **p, const uint8_t *end,
                           const dtab *t, unsigned *s) {
  uint32_t slot = *x & ((1u << t->sb) - 1);
  unsigned v = t->sym[slot];
  uint32_t y = t->freq[v] * (*x >> t->sb) + slot - t->start[v];
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

/* ---- Classes (RANSC) -------------------------------------------------- */

/* RANSC sorts a block's symbols into 2 to 4 classes by the magnitude of
 * their base value, each class a run of octaves: a symbol's level is its
 * bits without the sign, and its class the count of the block's limits
 * L[0] > L[1] > ... that the level is below. Class 0 holds the largest
 * magnitudes. Within a window of WIN symbols, word w of limit word row t
 * has bit i set where symbol 64 w + i has a level below L[t]. */
#define WIN 4096
#define WIN_WORDS (WIN / 64)
#define MAX_CLASSES 4

/* The levels below each limit, one symbol at a time: the reference for
 * the vector code, and what every other layout (F64) takes. */
static inline __attribute__((always_inline)) void
class_words_ref(const unsigned bits, const uint8_t *p, uint64_t first,
                unsigned m, unsigned from, const uint64_t *lim, unsigned nl,
                uint64_t lt[][WIN_WORDS]) {
  const uint64_t absm = (1ull << (bits - 1)) - 1;
  for (unsigned w = from; w < (m + 63) / 64; w++) {
    uint64_t acc[MAX_CLASSES - 1] = {0};
    for (unsigned i = 0; i < 64 && 64 * w + i < m; i++) {
      uint64_t v = ld(p, first + 64 * w + i, bits) & absm;
      for (unsigned t = 0; t < nl; t++)
        acc[t] |= (uint64_t)(v < lim[t]) << i;
    }
    for (unsigned t = 0; t < nl; t++)
      lt[t][w] = acc[t];
  }
}

/* The encoder's change words: bit i of word w set where symbol
 * FIRST + 64 w + i of O and Q differ, for the words from FROM of a
 * window of M symbols; the reference, as class_words_ref. */
static inline __attribute__((always_inline)) void
change_words_ref(const unsigned bits, const uint8_t *o, const uint8_t *q,
                 uint64_t first, unsigned m, unsigned from,
                 uint64_t chg[WIN_WORDS]) {
  for (unsigned w = from; w < (m + 63) / 64; w++) {
    uint64_t acc = 0;
    for (unsigned i = 0; i < 64 && 64 * w + i < m; i++) {
      uint64_t j = first + 64 * w + i;
      acc |= (uint64_t)(ld(o, j, bits) != ld(q, j, bits)) << i;
    }
    chg[w] = acc;
  }
}

#ifdef CODEC_X86_SIMD
#include <immintrin.h>
#define RANSC_AVX2 1

/* The same, 64 symbols at a time, for the float layouts of 4 (E2M1
 * nibbles, the even symbol in the low half of a byte), 8, 16 and 32 bits;
 * returns the whole words done. Levels and limits stay below 2^(bits-1),
 * so signed compares serve. */
__attribute__((target("avx2,popcnt"), noinline)) static unsigned
class_words_avx2(unsigned bits, const uint8_t *p, uint64_t first, unsigned m,
                 const uint64_t *lim, unsigned nl, uint64_t lt[][WIN_WORDS]) {
  if (bits == 64)
    return 0;
  const uint8_t *q = p + span_bytes(first, bits);
  unsigned words = m / 64;
  __m256i L[MAX_CLASSES - 1];
  for (unsigned t = 0; t < nl; t++)
    L[t] = bits == 32   ? _mm256_set1_epi32((int)lim[t])
           : bits == 16 ? _mm256_set1_epi16((short)lim[t])
                        : _mm256_set1_epi8((char)lim[t]);
  for (unsigned w = 0; w < words; w++) {
    const uint8_t *s = q + (size_t)w * 8 * bits;
    if (bits == 16) {
      const __m256i am = _mm256_set1_epi16(0x7fff);
      __m256i v[4];
      for (int k = 0; k < 4; k++)
        v[k] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32 * k)), am);
      for (unsigned t = 0; t < nl; t++) {
        uint64_t r = 0;
        for (int h = 0; h < 2; h++) {
          __m256i c = _mm256_packs_epi16(_mm256_cmpgt_epi16(L[t], v[2 * h]),
                                         _mm256_cmpgt_epi16(L[t], v[2 * h + 1]));
          c = _mm256_permute4x64_epi64(c, 0xd8);
          r |= (uint64_t)(uint32_t)_mm256_movemask_epi8(c) << (32 * h);
        }
        lt[t][w] = r;
      }
    } else if (bits == 8 || bits == 4) {
      __m256i y0, y1;
      const __m256i m7 = _mm256_set1_epi8(0x07);
      if (bits == 8) {
        const __m256i am = _mm256_set1_epi8(0x7f);
        y0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)s), am);
        y1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32)), am);
      } else {
        __m256i v = _mm256_loadu_si256((const __m256i *)s);
        __m256i lo = _mm256_and_si256(v, m7);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m7);
        __m256i x0 = _mm256_unpacklo_epi8(lo, hi), x1 = _mm256_unpackhi_epi8(lo, hi);
        y0 = _mm256_permute2x128_si256(x0, x1, 0x20);
        y1 = _mm256_permute2x128_si256(x0, x1, 0x31);
      }
      for (unsigned t = 0; t < nl; t++)
        lt[t][w] = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(L[t], y0)) |
                   (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(L[t], y1)) << 32;
    } else { /* 32 */
      const __m256i am = _mm256_set1_epi32(0x7fffffff);
      __m256i v[8];
      for (int k = 0; k < 8; k++)
        v[k] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(s + 32 * k)), am);
      for (unsigned t = 0; t < nl; t++) {
        uint64_t r = 0;
        for (int k = 0; k < 8; k++)
          r |= (uint64_t)(uint32_t)_mm256_movemask_ps(
                   _mm256_castsi256_ps(_mm256_cmpgt_epi32(L[t], v[k])))
               << (8 * k);
        lt[t][w] = r;
      }
    }
  }
  return words;
}

/* The change words, 64 symbols at a time, for the layouts of 4, 8, 16
 * and 32 bits; returns the whole words done. */
__attribute__((target("avx2,popcnt"), noinline)) static unsigned
change_words_avx2(unsigned bits, const uint8_t *o, const uint8_t *q,
                  uint64_t first, unsigned m, uint64_t chg[WIN_WORDS]) {
  if (bits == 64)
    return 0;
  const uint8_t *a = o + span_bytes(first, bits), *b = q + span_bytes(first, bits);
  unsigned words = m / 64;
  for (unsigned w = 0; w < words; w++) {
    const uint8_t *s = a + (size_t)w * 8 * bits, *t = b + (size_t)w * 8 * bits;
    uint64_t same = 0;
#define LD_(P, K) _mm256_loadu_si256((const __m256i *)((P) + 32 * (K)))
    if (bits == 16) {
      for (int h = 0; h < 2; h++) {
        __m256i c = _mm256_packs_epi16(
            _mm256_cmpeq_epi16(LD_(s, 2 * h), LD_(t, 2 * h)),
            _mm256_cmpeq_epi16(LD_(s, 2 * h + 1), LD_(t, 2 * h + 1)));
        c = _mm256_permute4x64_epi64(c, 0xd8);
        same |= (uint64_t)(uint32_t)_mm256_movemask_epi8(c) << (32 * h);
      }
    } else if (bits == 8) {
      for (int h = 0; h < 2; h++)
        same |= (uint64_t)(uint32_t)_mm256_movemask_epi8(
                    _mm256_cmpeq_epi8(LD_(s, h), LD_(t, h)))
                << (32 * h);
    } else if (bits == 4) { /* each nibble's XOR, in order, then compared */
      const __m256i m15 = _mm256_set1_epi8(0x0f), z = _mm256_setzero_si256();
      __m256i x = _mm256_xor_si256(LD_(s, 0), LD_(t, 0));
      __m256i lo = _mm256_and_si256(x, m15);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m15);
      __m256i x0 = _mm256_unpacklo_epi8(lo, hi), x1 = _mm256_unpackhi_epi8(lo, hi);
      __m256i y0 = _mm256_permute2x128_si256(x0, x1, 0x20);
      __m256i y1 = _mm256_permute2x128_si256(x0, x1, 0x31);
      same = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(y0, z)) |
             (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(y1, z)) << 32;
    } else { /* 32 */
      for (int k = 0; k < 8; k++)
        same |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(
                    _mm256_cmpeq_epi32(LD_(s, k), LD_(t, k))))
                << (8 * k);
    }
#undef LD_
    chg[w] = ~same;
  }
  return words;
}
#endif

/* The class words of the window of M symbols at FIRST: row 0 the
 * window's symbols, rows 1 to NL the limit words, row NL + 1 none; so
 * class c's members are row c and not row c + 1. Vector where the CPU
 * can (SIMD: the caller's flag, set by rans_encode and rans_decode). */
typedef uint64_t class_rows[MAX_CLASSES + 1][WIN_WORDS];

static inline __attribute__((always_inline)) void
class_words(const int simd, const unsigned bits, const uint8_t *p,
            uint64_t first, unsigned m, const uint64_t *lim, unsigned nl,
            class_rows cw) {
  unsigned from = 0, nw = (m + 63) / 64;
#ifdef RANSC_AVX2
  if (simd)
    from = class_words_avx2(bits, p, first, m, lim, nl, cw + 1);
#else
  (void)simd;
#endif
  class_words_ref(bits, p, first, m, from, lim, nl, cw + 1);
  for (unsigned w = 0; w < nw; w++) {
    cw[0][w] = ~0ull;
    cw[nl + 1][w] = 0;
  }
  if (m % 64)
    cw[0][nw - 1] = (1ull << (m % 64)) - 1;
}

static inline __attribute__((always_inline)) void
change_words(const int simd, const unsigned bits, const uint8_t *o,
             const uint8_t *q, uint64_t first, unsigned m,
             uint64_t chg[WIN_WORDS]) {
  unsigned from = 0;
#ifdef RANSC_AVX2
  if (simd)
    from = change_words_avx2(bits, o, q, first, m, chg);
#else
  (void)simd;
#endif
  change_words_ref(bits, o, q, first, m, from, chg);
}

static inline uint64_t members(class_rows cw, unsigned c, unsigned w) {
  return cw[c][w] & ~cw[c + 1][w];
}

/* PRE[w]: class C's members before word w of the window's NW; past the
 * window, more than any rank in it (INT16_MAX, for signed vector
 * compares). Returns the class's members in the window. Always inlined,
 * so that the AVX2 callers' popcnt applies: out of line it was compiled
 * for the baseline CPU and called libgcc's __popcountdi2 for each word. */
static inline __attribute__((always_inline)) unsigned
word_counts(class_rows cw, unsigned c, unsigned nw, uint16_t pre[WIN_WORDS]) {
  unsigned cnt = 0;
  for (unsigned w = 0; w < nw; w++) {
    pre[w] = (uint16_t)cnt;
    cnt += (unsigned)__builtin_popcountll(members(cw, c, w));
  }
  for (unsigned w = nw; w < WIN_WORDS; w++)
    pre[w] = INT16_MAX;
  return cnt;
}

/* SEL8[b][r]: the position of the set bit of byte b with r set bits
 * below it. */
static uint8_t sel8[256][8];
static pthread_once_t sel8_once = PTHREAD_ONCE_INIT;

static void sel8_init(void) {
  for (unsigned b = 0; b < 256; b++)
    for (unsigned i = 0, r = 0; i < 8; i++)
      if (b >> i & 1)
        sel8[b][r++] = (uint8_t)i;
}

/* The position of the set bit of M with R set bits below it (R below
 * M's count), without a branch: the byte's counts summed in the bytes of
 * one word (Vigna's broadword rank), the bytes whose sums do not pass R
 * counted, then the table for the byte. */
static inline unsigned select64(uint64_t m, unsigned r) {
  const uint64_t L8 = 0x0101010101010101ull, H8 = 0x8080808080808080ull;
  uint64_t s = m - ((m >> 1) & 0x5555555555555555ull);
  s = (s & 0x3333333333333333ull) + ((s >> 2) & 0x3333333333333333ull);
  s = ((s + (s >> 4)) & 0x0f0f0f0f0f0f0f0full) * L8; /* byte i: bytes 0..i */
  uint64_t le = (((uint64_t)r * L8) | H8) - s;        /* bit 7: sum <= r */
  unsigned place = (unsigned)((((le & H8) >> 7) * L8) >> 56) * 8;
  unsigned below = (unsigned)((s << 8) >> place) & 0xff;
  return place + sel8[(m >> place) & 0xff][r - below];
}

#ifdef RANSC_AVX2
/* The positions in the window of a class's T ranks RK (in place), the
 * class's members being row IN and not row OUT: a rank's word is the
 * count of PRE's 64 entries that do not pass it, less one, read from four
 * compares at once instead of six dependent steps. */
__attribute__((target("avx2,popcnt"), noinline)) static void
positions_avx2(const uint16_t *pre, uint16_t *rk, unsigned t,
               const uint64_t *in, const uint64_t *out) {
  __m256i p[4];
  for (int k = 0; k < 4; k++)
    p[k] = _mm256_loadu_si256((const __m256i *)(pre + 16 * k));
  for (unsigned u = 0; u < t; u++) {
    __m256i x = _mm256_set1_epi16((short)rk[u]);
    unsigned above = 0; /* entries past the rank, two mask bits each */
    for (int k = 0; k < 4; k++)
      above += (unsigned)__builtin_popcount(
          (unsigned)_mm256_movemask_epi8(_mm256_cmpgt_epi16(p[k], x)));
    unsigned w = WIN_WORDS - 1 - above / 2;
    rk[u] = (uint16_t)(64 * w + select64(in[w] & ~out[w], rk[u] - pre[w]));
  }
}
#endif

/* The encoder's choice of classes: *NL limits (0: classes do not pay).
 * A class's mask costs about n h(k/n) bits (its n symbols, k changes), so
 * the limits split the block's exponents into runs that minimise the sum,
 * counted on CLASS_WINDOWS windows spread over the block (every symbol
 * and change in them), so that the coding pass finds the changes and
 * classes them in one read; each class beyond the first costs its tables
 * and states, about 100 bytes, and the classes must save 3 % of the
 * mask. A block that looks more than a quarter changed is declined. */
#define CLASS_WINDOWS 8 /* windows of WIN symbols counted, at most */
#define CLASS_COST_BITS 800.0
#define CLASS_BINS 16 /* exponents below the largest 15 share a bin */

static double mask_bits(double n, double k) {
  if (k <= 0 || n <= k)
    return 0;
  double p = k / n;
  return -(k * log2(p) + (n - k) * log2(1 - p));
}

static inline __attribute__((always_inline)) unsigned
choose_limits(const sym_fmt *f, const unsigned bits, const uint8_t *o,
              const uint8_t *q, uint64_t nsym, uint64_t *lim) {
  if (!f->is_float)
    return 0;
  const unsigned ne = 1u << f->exp_bits, mb = f->mant_bits;
  const uint64_t absm = (1ull << (bits - 1)) - 1;
  uint32_t hn[MI_MAX] = {0}, hk[MI_MAX] = {0};
  const uint64_t nwin = (nsym + WIN - 1) / WIN;
  const uint64_t step = nwin > CLASS_WINDOWS ? nwin / CLASS_WINDOWS : 1;
  uint64_t counted = 0, changed = 0;
  for (uint64_t w = 0; w < nwin; w += step) {
    uint64_t end = nsym - w * WIN < WIN ? nsym : w * WIN + WIN;
    for (uint64_t j = w * WIN; j < end; j++) {
      uint64_t a = ld(o, j, bits);
      unsigned e = (unsigned)((a & absm) >> mb), c = a != ld(q, j, bits);
      hn[e]++;
      hk[e] += c;
      changed += c;
    }
    counted += end - w * WIN;
  }
  if (changed * 4 > counted)
    return 0;
  const double every = (double)nsym / (double)counted;
  /* Bins from the largest exponent down; BE[i] the smallest in bin i. */
  double bn[CLASS_BINS] = {0}, bk[CLASS_BINS] = {0};
  unsigned be[CLASS_BINS], nb = 0;
  for (unsigned e = ne; e-- > 0;) {
    if (hn[e] == 0 && hk[e] == 0)
      continue;
    if (nb < CLASS_BINS)
      nb++;
    bn[nb - 1] += (double)hn[e] * every;
    bk[nb - 1] += (double)hk[e] * every;
    be[nb - 1] = e;
  }
  if (nb < 2)
    return 0;
  /* best[r][j]: bins [0, j) in r classes; cut[r][j]: where the last
   * class starts. */
  double best[MAX_CLASSES + 1][CLASS_BINS + 1];
  unsigned cut[MAX_CLASSES + 1][CLASS_BINS + 1];
  for (unsigned r = 0; r <= MAX_CLASSES; r++)
    for (unsigned j = 0; j <= nb; j++)
      best[r][j] = r == 0 && j == 0 ? 0 : HUGE_VAL;
  for (unsigned r = 1; r <= MAX_CLASSES; r++)
    for (unsigned j = 1; j <= nb; j++) {
      double n = 0, kk = 0;
      for (unsigned i = j; i-- > 0;) {
        n += bn[i];
        kk += bk[i];
        double c = best[r - 1][i] + mask_bits(n > kk ? n : kk + 1, kk);
        if (c < best[r][j]) {
          best[r][j] = c;
          cut[r][j] = i;
        }
      }
    }
  unsigned rb = 1;
  for (unsigned r = 2; r <= MAX_CLASSES; r++)
    if (best[r][nb] + (r - 1) * CLASS_COST_BITS <
        best[rb][nb] + (rb - 1) * CLASS_COST_BITS)
      rb = r;
  if (rb == 1 || best[rb][nb] > 0.97 * best[1][nb])
    return 0;
  /* Limit t parts class t from class t + 1: the smallest exponent of
   * class t, as a level. */
  unsigned j = nb;
  for (unsigned r = rb; r > 1; r--) {
    j = cut[r][j];
    lim[r - 2] = (uint64_t)be[j - 1] << mb;
  }
  return rb - 1;
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

/* First pass: the indices of the changed symbols among the first NSYM of
 * O -> Q, in order, into POS (room for one a symbol); returns their
 * count. Whether a word of the base equals the result's is a coin toss
 * at 10 % density (four BF16 symbols a word), so within a unit of four
 * words that differ somewhere the words are not tested: each lane's
 * index is stored and the count moves on by whether it changed. Equal
 * units, most of them below 2 %, are skipped at once. */
static inline __attribute__((always_inline)) uint64_t
find_changes(const unsigned bits, const uint8_t *o, const uint8_t *q,
             uint64_t nsym, uint32_t *pos) {
  const unsigned per = 64 / bits; /* symbols a word */
  uint64_t words = nsym / per / 4 * 4, n = 0;
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
  for (uint64_t j = words * per; j < nsym; j++)
    if (ld(o, j, bits) != ld(q, j, bits))
      pos[n++] = (uint32_t)j;
  return n;
}

/* The final state X, below *P. */
static void state_put(uint32_t x, uint8_t **p) {
  *p -= 4;
  for (int k = 0; k < 4; k++)
    (*p)[k] = (uint8_t)(x >> (8 * k));
}

/* Codes K changes as a RANS payload into OUT (CAP bytes): change i at
 * symbol POS[i] of O -> Q, or (POS NULL) at AT[i] among its class's
 * members with the key difference KD[i]. WORK to WORK_END holds
 * two symbols a change and the steps' raw bits from the bottom, the
 * gaps' stream from the top; OUT holds room for the tables and lengths,
 * the gaps' raw bits and the steps' stream from its end. Out of work
 * room the changes are declined (wide steps at a high density); out of
 * OUT, they are no smaller than the block's raw bytes. */
static inline __attribute__((always_inline)) int
code_changes(const sym_fmt *f, const unsigned bits, const uint8_t *o,
             const uint8_t *q, const uint32_t *pos, const uint32_t *at,
             const uint64_t *kd, uint64_t k, const unsigned lanes,
             uint8_t *out, size_t cap, size_t *out_len, uint8_t *work,
             uint8_t *work_end) {
  const size_t head = TABLE_BYTES + 40;
  if (cap < head + 64 || (size_t)(work_end - work) < 2 * k + 64)
    return RANS_DECLINED;
  uint8_t *gs = work, *ss = work + k;
  bitw gbits = {out + head, out + cap, 0, 0, 0};
  bitw sbits = {work + 2 * k, work_end, 0, 0, 0};
  uint32_t gcount[GAP_SYMS] = {0}, scount[STEP_SYMS] = {0};
  uint64_t origin = 0;
  for (uint64_t i = 0; i < k; i++) {
    uint64_t a = pos ? pos[i] : at[i];
    unsigned nr;
    uint64_t raw;
    unsigned g = gap_sym(a - origin, &nr, &raw);
    if (nr != 0)
      bitw_put(&gbits, raw, nr);
    unsigned s = step_sym(pos ? step_of(f, bits, ld(o, a, bits), ld(q, a, bits))
                              : step_of_delta(bits, kd[i]),
                          &nr, &raw);
    if (nr != 0)
      bitw_put_wide(&sbits, raw, nr);
    gs[i] = (uint8_t)g;
    ss[i] = (uint8_t)s;
    gcount[g]++;
    scount[s]++;
    origin = a + 1;
  }
  bitw_put(&gbits, 0, 7); /* the last partial bytes */
  bitw_put(&sbits, 0, 7);
  if (sbits.full)
    return RANS_DECLINED;
  if (gbits.full)
    return STITCH_ELIMIT;
  size_t ngb = (size_t)(gbits.p - (out + head));
  size_t nsb = (size_t)(sbits.p - (work + 2 * k));

  uint32_t gf[GAP_SYMS], sf[STEP_SYMS];
  const unsigned sb = lanes == 2 ? SCALE_BITS_C : SCALE_BITS;
  normalize(gcount, GAP_SYMS, k, gf, sb);
  normalize(scount, STEP_SYMS, k, sf, sb);
  uint8_t tb[TABLE_BYTES];
  size_t nt = table_put(gf, GAP_SYMS, tb);
  nt += table_put(sf, STEP_SYMS, tb + nt);

  /* Second pass, backwards: the steps' stream from the end of OUT, the
   * gaps' from WORK_END, in one loop so that the states' chains overlap.
   * With two LANES, change i takes state i % 2 of each stream, and the
   * decoder's chains overlap too. */
  esym ge[GAP_SYMS], se[STEP_SYMS];
  esyms_of(gf, GAP_SYMS, ge, sb);
  esyms_of(sf, STEP_SYMS, se, sb);
  uint8_t *ps = out + cap, *pg = work_end;
  uint32_t xg[2] = {STATE_LOW, STATE_LOW}, xs[2] = {STATE_LOW, STATE_LOW};
  /* Lane by lane in turn, each lane's state named, not indexed: an
   * indexed state lives on the stack, and its chain waits on a store. */
  uint64_t i = k;
  int odd = lanes == 2 && k % 2 == 1; /* the last change, lane 0's, alone */
  while (i > 0) { /* at most 2 bytes a put, 4 an iteration */
    if (ps - gbits.p < 8)
      return STITCH_ELIMIT;
    if (pg - sbits.p < 8)
      return RANS_DECLINED;
    i -= odd ? 1 : lanes;
    if (!odd) {
      rans_put(&xs[lanes - 1], &ps, &se[ss[i + lanes - 1]]);
      rans_put(&xg[lanes - 1], &pg, &ge[gs[i + lanes - 1]]);
    }
    if (lanes == 2) {
      rans_put(&xs[0], &ps, &se[ss[i]]);
      rans_put(&xg[0], &pg, &ge[gs[i]]);
    }
    odd = 0;
  }
  if (ps - gbits.p < 8 || pg - sbits.p < 8) /* 4 bytes a state */
    return ps - gbits.p < 8 ? STITCH_ELIMIT : RANS_DECLINED;
  for (unsigned l = lanes; l-- > 0;) { /* lane 0's first in the stream */
    state_put(xs[l], &ps);
    state_put(xg[l], &pg);
  }
  size_t nss = (size_t)(out + cap - ps), ngs = (size_t)(work_end - pg);

  /* Tables; the gaps' raw bits and stream; the steps' raw bits and
   * stream, to the end. Each part moves down, in order. */
  if (nt + varint_len(ngb) + ngb + varint_len(ngs) + ngs + varint_len(nsb) +
          nsb + nss > cap)
    return STITCH_ELIMIT;
  memcpy(out, tb, nt);
  size_t n = nt;
  n += varint_put(ngb, out + n);
  memmove(out + n, out + head, ngb);
  n += ngb;
  n += varint_put(ngs, out + n);
  memcpy(out + n, pg, ngs);
  n += ngs;
  n += varint_put(nsb, out + n);
  memcpy(out + n, work + 2 * k, nsb);
  n += nsb;
  memmove(out + n, ps, nss);
  *out_len = n + nss;
  return 0;
}

/* RANSC (proto/delta.md "RANSC"): the changes of O -> Q, NSYM symbols,
 * in NL + 1 classes, *CHANGED their count. One read, a window at a time:
 * the window's change words and class words, and each change's class,
 * rank among its class's members and key difference, in block order at
 * the bottom of SCRATCH (4 bytes a change, then 8 from past room for a
 * quarter of the block); then the changes are sorted by class, stably,
 * into the top of SCRATCH (12 bytes a change), and each class is coded
 * as RANS below them. Declines a block more than a quarter changed. */
static inline __attribute__((always_inline)) int
code_classes(const int simd, const sym_fmt *f, const unsigned bits,
             const uint8_t *o, const uint8_t *q, uint64_t nsym,
             const uint64_t *lim, unsigned nl, uint8_t *out, size_t cap,
             size_t *out_len, uint64_t *changed, uint8_t *scratch,
             size_t scratch_cap) {
  const unsigned nc = nl + 1;
  const uint64_t kmax = nsym / 4;
  uint32_t *rkc = (uint32_t *)(void *)scratch;
  uint64_t *kd = (uint64_t *)(void *)scratch + (kmax + 1) / 2;
  uint64_t seen[MAX_CLASSES] = {0}, kc[MAX_CLASSES] = {0}, k = 0;
  class_rows cw;
  uint64_t chg[WIN_WORDS]; /* a window's change words */
  for (uint64_t w0 = 0; w0 < nsym; w0 += WIN) {
    unsigned m = nsym - w0 < WIN ? (unsigned)(nsym - w0) : WIN;
    unsigned nw = (m + 63) / 64;
    change_words(simd, bits, o, q, w0, m, chg);
    uint64_t nk = 0;
    for (unsigned w = 0; w < nw; w++)
      nk += (uint64_t)__builtin_popcountll(chg[w]);
    if (nk > kmax - k)
      return RANS_DECLINED;
    class_words(simd, bits, o, w0, m, lim, nl, cw);
    uint16_t before[MAX_CLASSES][WIN_WORDS];
    unsigned cnt[MAX_CLASSES];
    for (unsigned c = 0; c < nc; c++)
      cnt[c] = word_counts(cw, c, nw, before[c]);
    for (unsigned w = 0; w < nw; w++)
      for (uint64_t x = chg[w]; x != 0; x &= x - 1, k++) {
        unsigned b = (unsigned)__builtin_ctzll(x), c = 0;
        for (unsigned t = 0; t < nl; t++)
          c += (unsigned)(cw[t + 1][w] >> b) & 1;
        uint64_t below = members(cw, c, w) & ((1ull << b) - 1);
        uint64_t r = seen[c] + before[c][w] + (uint64_t)__builtin_popcountll(below);
        uint64_t j = w0 + 64 * w + b;
        rkc[k] = (uint32_t)(r << 2 | c); /* rank and class */
        kd[k] = key_delta(f, bits, ld(o, j, bits), ld(q, j, bits));
        kc[c]++;
      }
    for (unsigned c = 0; c < nc; c++)
      seen[c] += cnt[c];
  }
  *changed = k;
  if (k == 0)
    return RANS_DECLINED; /* the caller codes SAME before it gets here */
  /* Sorted by class, at the top of SCRATCH: the key differences, then
   * the ranks. */
  uint64_t *skd = (uint64_t *)(void *)scratch + (scratch_cap / 8 - k - (k + 1) / 2);
  uint32_t *srank = (uint32_t *)(void *)(skd + k);
  uint64_t at[MAX_CLASSES], start[MAX_CLASSES];
  for (unsigned c = 0, s = 0; c < nc; s += (unsigned)kc[c], c++)
    at[c] = start[c] = s;
  for (uint64_t i = 0; i < k; i++) {
    unsigned c = rkc[i] & 3;
    skd[at[c]] = kd[i];
    srank[at[c]++] = rkc[i] >> 2;
  }
  /* The class count and limits, then each class's count and payload. */
  size_t n = 0;
  if (cap < 64)
    return STITCH_ELIMIT;
  out[n++] = (uint8_t)nc;
  for (unsigned t = 0; t < nl; t++)
    n += varint_put(lim[t], out + n);
  for (unsigned c = 0; c < nc; c++) {
    if (cap - n < 24)
      return STITCH_ELIMIT;
    n += varint_put(kc[c], out + n);
    if (kc[c] == 0)
      continue;
    size_t len;
    int rc = code_changes(f, bits, o, q, NULL, srank + start[c],
                           skd + start[c], kc[c], 2, out + n + 10,
                           cap - n - 10, &len, scratch, (uint8_t *)skd);
    if (rc != 0)
      return rc;
    size_t vl = varint_len(len);
    memmove(out + n + vl, out + n + 10, len);
    varint_put(len, out + n);
    n += vl + len;
  }
  *out_len = n;
  return 0;
}

/* The changed symbols per mille among 256 cache lines of O -> Q spread
 * over the block (every line of a block under 256): the default mode's
 * quick look at whether a block is dense enough for RANSC. */
static inline __attribute__((always_inline)) unsigned
sampled_per_mille(const unsigned bits, const uint8_t *o, const uint8_t *q,
                  uint64_t nsym) {
  const unsigned per = 64 / bits; /* symbols a word */
  uint64_t words = nsym / per, step = words / 256 / 8 * 8;
  step = step < 8 ? 8 : step;
  uint64_t changed = 0, seen = 0;
  for (uint64_t w = 0; w + 8 <= words; w += step) {
    for (int i = 0; i < 8; i++) {
      uint64_t a, b;
      memcpy(&a, o + 8 * (w + i), 8);
      memcpy(&b, q + 8 * (w + i), 8);
      changed += (uint64_t)__builtin_popcountll(lanes_nonzero(a ^ b, bits));
    }
    seen += 8 * per;
  }
  return seen ? (unsigned)(changed * 1000 / seen) : 1000;
}

static inline __attribute__((always_inline)) int
encode_impl(const int simd, const sym_fmt *f, const unsigned bits,
            const uint8_t *old, const uint8_t *nw, block_span sp, uint8_t *out,
            size_t cap, size_t *out_len, uint64_t *changed, int *coding,
            int classes, uint8_t *scratch, size_t scratch_cap) {
  /* Scratch: RANS, an index a symbol (the first pass stores each lane's
   * at the count, which never passes the lane), then room for two
   * symbols a change, the steps' raw bits and the gaps' stream; RANSC,
   * code_classes. */
  if (scratch_cap < 6 * (size_t)sp.n + 64 || sp.n > UINT32_MAX)
    return RANS_DECLINED;
  const uint8_t *o = old + span_bytes(sp.start, bits);
  const uint8_t *q = nw + span_bytes(sp.start, bits);
  if (!classes) {
    uint32_t *pos = (uint32_t *)(void *)scratch;
    uint64_t k = find_changes(bits, o, q, sp.n, pos);
    *changed = k;
    if (k == 0)
      return RANS_DECLINED; /* the caller codes SAME before it gets here */
    *coding = STITCH_CODING_RANS;
    return code_changes(f, bits, o, q, pos, NULL, NULL, k, 1, out, cap,
                        out_len, scratch + 4 * k, scratch + scratch_cap);
  }
  if (!f->is_float || sampled_per_mille(bits, o, q, sp.n) < RANSC_MIN_PER_MILLE)
    return RANS_DECLINED;
  uint64_t lim[MAX_CLASSES - 1];
  unsigned nl = choose_limits(f, bits, o, q, sp.n, lim);
  if (nl == 0)
    return RANS_DECLINED;
  int rc = code_classes(simd, f, bits, o, q, sp.n, lim, nl, out, cap, out_len,
                        changed, scratch, scratch_cap);
  if (rc == 0)
    *coding = STITCH_CODING_RANSC;
  return rc;
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

/* A RANS payload being decoded: its tables, and its states, streams
 * and raw bits (apart, so that a decoder can keep those in registers:
 * stores to the block's bytes may alias anything in memory). */
typedef struct rtab {
  dtab gt, st;
} rtab;

typedef struct rstate {
  uint32_t xg[2], xs[2]; /* the gaps' and the steps' states, by lane */
  const uint8_t *gp, *gend, *sp, *send;
  bitr gr, sr;
  uint64_t ng, ns; /* gaps and steps decoded (RANSC: which lane is next) */
} rstate;

static int rdec_open(rtab *t, rstate *z, const uint8_t *in, size_t len,
                     uint64_t changed, unsigned lanes, stitch_diag *d) {
  rd r = {in, len, 0};
  const unsigned scale_bits = lanes == 2 ? SCALE_BITS_C : SCALE_BITS;
  RETURN_IF(table_get(&r, GAP_SYMS, &t->gt, scale_bits) != 0 ||
                table_get(&r, STEP_SYMS, &t->st, scale_bits) != 0,
            d, STITCH_EFORMAT, "rans block: bad table");
  RETURN_IF(changed > 0 && (t->gt.empty || t->st.empty), d, STITCH_EFORMAT,
            "rans block: an empty table");
  const uint8_t *gb, *sb;
  size_t ngb, ngs, nsb;
  RETURN_IF(part_get(&r, &gb, &ngb) != 0 || part_get(&r, &z->gp, &ngs) != 0 ||
                part_get(&r, &sb, &nsb) != 0,
            d, STITCH_EFORMAT, "rans block: truncated");
  z->sp = in + r.pos;
  z->gend = z->gp + ngs;
  z->send = in + len;
  z->xg[1] = z->xs[1] = STATE_LOW; /* one lane: the second stays as it ends */
  for (unsigned l = 0; l < lanes; l++)
    RETURN_IF(state_get(&z->gp, z->gend, &z->xg[l]) != 0 ||
                  state_get(&z->sp, z->send, &z->xs[l]) != 0,
              d, STITCH_EFORMAT, "rans block: bad coder state");
  z->ng = z->ns = 0;
  z->gr = (bitr){gb, gb + ngb, 0, 0};
  z->sr = (bitr){sb, sb + nsb, 0, 0};
  return 0;
}

static inline __attribute__((always_inline)) int
rdec_gap(rstate *z, const dtab *gt, const unsigned lane, uint64_t *gap,
         stitch_diag *d) {
  unsigned g;
  uint64_t x;
  RETURN_IF(rans_get(&z->xg[lane], &z->gp, z->gend, gt, &g) != 0, d,
            STITCH_EFORMAT, "rans block: coded data ends early");
  /* Without a branch on whether the gap is direct: a coin toss where a
   * class's changes lie some 30 members apart. */
  unsigned big = g >= GAP_DIRECT, b = big ? g - GAP_DIRECT : 0;
  unsigned n = 6 + b / 4;
  RETURN_IF(bitr_get(&z->gr, big ? n - 3 : 0, &x) != 0, d, STITCH_EFORMAT,
            "rans block: raw bits end early");
  *gap = (big ? (1ull << (n - 1)) | (uint64_t)(b & 3) << (n - 3) : g) | x;
  return 0;
}

/* The next step, applied to symbol J of BASE. */
static inline __attribute__((always_inline)) int
rdec_step(rstate *z, const dtab *stab, const unsigned lane, const sym_fmt *f,
          const unsigned bits, uint8_t *base, uint64_t j, stitch_diag *d) {
  unsigned c;
  uint64_t x, mag = 1;
  RETURN_IF(rans_get(&z->xs[lane], &z->sp, z->send, stab, &c) != 0, d,
            STITCH_EFORMAT, "rans block: coded data ends early");
  if (c >= 2) {
    unsigned k = (c - 2) / 2 + 1;
    RETURN_IF(k > bits - 1, d, STITCH_EFORMAT, "rans block: bad step");
    RETURN_IF(bitr_get_wide(&z->sr, k - 1, &x) != 0, d, STITCH_EFORMAT,
              "rans block: raw bits end early");
    mag = ((1ull << (k - 1)) | x) + 1;
  }
  st(base, j, bits, step_apply(f, bits, ld(base, j, bits), c & 1, mag));
  return 0;
}

static int rdec_close(const rstate *z, stitch_diag *d) {
  RETURN_IF(z->xg[0] != STATE_LOW || z->xs[0] != STATE_LOW ||
                z->xg[1] != STATE_LOW || z->xs[1] != STATE_LOW || z->gp != z->gend ||
                z->sp != z->send || z->gr.p != z->gr.end || z->gr.acc != 0 ||
                z->sr.p != z->sr.end || z->sr.acc != 0,
            d, STITCH_EFORMAT, "rans block: coded data does not end cleanly");
  return 0;
}

#define BATCH 256 /* gaps decoded ahead of their steps */

static inline __attribute__((always_inline)) int
decode_impl(const int simd, const sym_fmt *f, const unsigned bits,
            uint8_t *data, block_span sp, const uint8_t *in, size_t len,
            uint64_t changed, stitch_diag *d) {
  (void)simd;
  rtab tb;
  rstate z;
  CHECK_RC(rdec_open(&tb, &z, in, len, changed, 1, d));
  uint8_t *base = data + span_bytes(sp.start, bits);
  uint64_t o = 0;
  uint32_t pos[BATCH];
  for (uint64_t i = 0; i < changed;) {
    unsigned nb = changed - i < BATCH ? (unsigned)(changed - i) : BATCH;
    /* The batch's gaps, then its steps: nothing waits on a symbol's
     * load, so many are in flight at once. */
    for (unsigned t = 0; t < nb; t++) {
      uint64_t gap = 0;
      CHECK_RC(rdec_gap(&z, &tb.gt, 0, &gap, d));
      RETURN_IF(gap >= sp.n - o, d, STITCH_EFORMAT,
                "rans block: change %" PRIu64 " lies past the block", i + t);
      pos[t] = (uint32_t)(o + gap);
      __builtin_prefetch(base + span_bytes(o + gap, bits), 1);
      o += gap + 1;
    }
    for (unsigned t = 0; t < nb; t++)
      CHECK_RC(rdec_step(&z, &tb.st, 0, f, bits, base, pos[t], d));
    i += nb;
  }
  return rdec_close(&z, d);
}

/* RANSC: the ranks of a class's changes below SN + CNT (its members
 * before the window's end), less SN, into RK from *T; LANE is the next
 * gap's, and the two lanes' chains overlap. *NX is the next change's rank,
 * *LF the changes left. */
static inline __attribute__((always_inline)) int
ranks_of(rstate *z, const dtab *gt, const unsigned lane, uint64_t *lf,
         uint64_t *nx, uint64_t sn, unsigned cnt, uint16_t *rk, unsigned *t,
         stitch_diag *d) {
  uint64_t left = *lf, next = *nx, end = sn + cnt, g0 = 0, g1 = 0;
  unsigned n = *t;
  while (left > 0 && next < end) {
    rk[n++] = (uint16_t)(next - sn);
    if (--left == 0)
      break;
    CHECK_RC(rdec_gap(z, gt, lane, &g0, d));
    next += 1 + g0;
    z->ng++;
    if (next >= end)
      break;
    rk[n++] = (uint16_t)(next - sn);
    if (--left == 0)
      break;
    CHECK_RC(rdec_gap(z, gt, lane ^ 1, &g1, d));
    next += 1 + g1;
    z->ng++;
  }
  *lf = left;
  *nx = next;
  *t = n;
  return 0;
}

/* RANSC: a window at a time, the limit words of its symbols, then each
 * class's changes that fall in it. */
static inline __attribute__((always_inline)) int
decode_classes_impl(const int simd, const sym_fmt *f, const unsigned bits,
                    uint8_t *data, block_span sp, const uint8_t *in,
                    size_t len, uint64_t changed, stitch_diag *d) {
  rd r = {in, len, 0};
  uint8_t nc;
  RETURN_IF(!f->is_float, d, STITCH_EFORMAT,
            "ransc block: classes need a float format");
  RETURN_IF(rd_u8(&r, &nc) != 0 || nc < 2 || nc > MAX_CLASSES, d,
            STITCH_EFORMAT, "ransc block: bad class count");
  const unsigned nl = nc - 1u;
  uint64_t lim[MAX_CLASSES - 1];
  for (unsigned t = 0; t < nl; t++) {
    RETURN_IF(rd_varint(&r, &lim[t]) != 0 || lim[t] == 0 ||
                  lim[t] >= 1ull << (bits - 1) || (t > 0 && lim[t] >= lim[t - 1]),
              d, STITCH_EFORMAT, "ransc block: bad class limits");
  }
  rtab tb[MAX_CLASSES];
  rstate zs[MAX_CLASSES];
  uint64_t left[MAX_CLASSES], counts[MAX_CLASSES], next[MAX_CLASSES];
  uint64_t seen[MAX_CLASSES] = {0};
  uint64_t total = 0;
  for (unsigned c = 0; c < nc; c++) {
    RETURN_IF(rd_varint(&r, &left[c]) != 0 || left[c] > changed - total, d,
              STITCH_EFORMAT, "ransc block: bad class counts");
    total += left[c];
    counts[c] = left[c];
    next[c] = 0;
    if (left[c] == 0)
      continue;
    const uint8_t *p;
    size_t n;
    RETURN_IF(part_get(&r, &p, &n) != 0, d, STITCH_EFORMAT,
              "ransc block: truncated");
    CHECK_RC(rdec_open(&tb[c], &zs[c], p, n, left[c], 2, d));
    CHECK_RC(rdec_gap(&zs[c], &tb[c].gt, 0, &next[c], d));
    zs[c].ng = 1;
  }
  RETURN_IF(total != changed, d, STITCH_EFORMAT,
            "ransc block: class counts sum to %" PRIu64 ", index says %" PRIu64,
            total, changed);
  RETURN_IF(r.pos != len, d, STITCH_EFORMAT, "ransc block: trailing bytes");
  uint8_t *base = data + span_bytes(sp.start, bits);
  class_rows cw;
  uint16_t pre[WIN_WORDS], rk[WIN];
  for (uint64_t w0 = 0; w0 < sp.n && total > 0; w0 += WIN) {
    unsigned m = sp.n - w0 < WIN ? (unsigned)(sp.n - w0) : WIN;
    unsigned nw = (m + 63) / 64;
    class_words(simd, bits, base, w0, m, lim, nl, cw);
    for (unsigned c = 0; c < nc; c++) {
      if (left[c] == 0)
        continue;
      unsigned cnt = word_counts(cw, c, nw, pre);
      /* The ranks of the class's changes in the window, then where each
       * lies: the last word with no more members before it than its rank,
       * by halves without a branch. */
      rstate z = zs[c]; /* in registers, not behind the block's stores */
      uint64_t lf = left[c], nx = next[c], sn = seen[c];
      unsigned t = 0;
      if (z.ng & 1)
        CHECK_RC(ranks_of(&z, &tb[c].gt, 1, &lf, &nx, sn, cnt, rk, &t, d));
      else
        CHECK_RC(ranks_of(&z, &tb[c].gt, 0, &lf, &nx, sn, cnt, rk, &t, d));
#ifdef RANSC_AVX2
      if (simd)
        positions_avx2(pre, rk, t, cw[c], cw[c + 1]);
      else
#endif
        for (unsigned u = 0; u < t; u++) { /* no chain from one to the next */
          unsigned x = rk[u], w = 0;
          for (unsigned h = WIN_WORDS / 2; h > 0; h /= 2)
            w += h & (0u - (unsigned)(pre[w + h] <= x));
          rk[u] = (uint16_t)(64 * w + select64(members(cw, c, w), x - pre[w]));
        }
      /* The steps, lane by lane in turn, two chains at once. */
      unsigned u = 0;
      const dtab *stab = &tb[c].st;
      if (t > 0 && z.ns & 1)
        CHECK_RC(rdec_step(&z, stab, 1, f, bits, base, w0 + rk[u++], d));
      for (; u + 1 < t; u += 2) {
        CHECK_RC(rdec_step(&z, stab, 0, f, bits, base, w0 + rk[u], d));
        CHECK_RC(rdec_step(&z, stab, 1, f, bits, base, w0 + rk[u + 1], d));
      }
      if (u < t)
        CHECK_RC(rdec_step(&z, stab, 0, f, bits, base, w0 + rk[u], d));
      z.ns += t;
      zs[c] = z;
      left[c] = lf;
      next[c] = nx;
      seen[c] = sn + cnt;
      total -= t;
    }
  }
  for (unsigned c = 0; c < nc; c++)
    RETURN_IF(left[c] > 0, d, STITCH_EFORMAT,
              "ransc block: a change of class %u lies past the block", c);
  for (unsigned c = 0; c < nc; c++)
    if (counts[c] > 0)
      CHECK_RC(rdec_close(&zs[c], d));
  return 0;
}

/* ---- Entry points ----------------------------------------------------- */

#ifdef RANSC_AVX2
#define SIMD_FN __attribute__((target("avx2,popcnt"))) static int
#endif

#define ENCODE_PARAMS                                                         \
  const sym_fmt *f, const uint8_t *old, const uint8_t *new_, block_span sp,  \
      uint8_t *out, size_t cap, size_t *out_len, uint64_t *changed,           \
      int *coding, int classes, uint8_t *scratch, size_t scratch_cap
#define DECODE_PARAMS                                                         \
  const sym_fmt *f, int coding, uint8_t *data, block_span sp,                 \
      const uint8_t *in, size_t len, uint64_t changed, stitch_diag *d

/* Each compiled once per symbol format, and again for CPUs with AVX2
 * (simd_ a constant in each). */
#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return encode_impl(simd_, &k_, B, old, new_, sp, out, cap, out_len,       \
                       changed, coding, classes, scratch, scratch_cap);       \
  }
static int encode_plain(ENCODE_PARAMS) {
  const int simd_ = 0;
  DISPATCH(f, STITCH_EINVAL, encode_impl)
}
#ifdef RANSC_AVX2
SIMD_FN encode_simd(ENCODE_PARAMS) {
  const int simd_ = 1;
  DISPATCH(f, STITCH_EINVAL, encode_impl)
}
#endif
#undef DISPATCH_CASE_

#define DISPATCH_CASE_(ID, B, FL, SG, MB, EB)                                \
  case ID: {                                                                  \
    static const sym_fmt k_ = {B, FL, SG, MB, EB};                            \
    return coding == STITCH_CODING_RANSC                                      \
               ? decode_classes_impl(simd_, &k_, B, data, sp, in, len,        \
                                     changed, d)                              \
               : decode_impl(simd_, &k_, B, data, sp, in, len, changed, d);   \
  }
static int decode_plain(DECODE_PARAMS) {
  const int simd_ = 0;
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
}
#ifdef RANSC_AVX2
SIMD_FN decode_simd(DECODE_PARAMS) {
  const int simd_ = 1;
  DISPATCH(f, stitch_diag_set(d, STITCH_EINVAL, "bad symbol format"), decode_impl)
}
#endif
#undef DISPATCH_CASE_

int rans_encode_run(const codec_run *run, ENCODE_PARAMS) {
#ifdef RANSC_AVX2
  if (!run->scalar && codec_avx2())
    return encode_simd(f, old, new_, sp, out, cap, out_len, changed, coding,
                       classes, scratch, scratch_cap);
#else
  (void)run;
#endif
  return encode_plain(f, old, new_, sp, out, cap, out_len, changed, coding,
                      classes, scratch, scratch_cap);
}

int rans_decode_run(const codec_run *run, DECODE_PARAMS) {
  if (coding == STITCH_CODING_RANSC)
    pthread_once(&sel8_once, sel8_init);
#ifdef RANSC_AVX2
  if (!run->scalar && codec_avx2())
    return decode_simd(f, coding, data, sp, in, len, changed, d);
#else
  (void)run;
#endif
  return decode_plain(f, coding, data, sp, in, len, changed, d);
}

int rans_encode(ENCODE_PARAMS) {
  static const codec_run plain = {0, 0};
  return rans_encode_run(&plain, f, old, new_, sp, out, cap, out_len,
                         changed, coding, classes, scratch, scratch_cap);
}

int rans_decode(DECODE_PARAMS) {
  static const codec_run plain = {0, 0};
  return rans_decode_run(&plain, f, coding, data, sp, in, len, changed, d);
}
