/* gpu_math.h: the element and block arithmetic the CUDA kernels run, as
 * inline functions that compile both as C11 (src/gpu) and as CUDA device
 * code (kernels/). Not installed.
 *
 * The converters are codec/minifloat_impl.h's, the very functions the
 * library runs. The scale policy is codec/view_fp8.c and view_nvfp4.c,
 * restated per block because a kernel cannot call into the library. Restating is a risk of
 * drift, so src/gpu/quant.c also runs this header's code on the CPU
 * (gpu_emul_quant_*) and tests/test_gpu_ref.c checks it against the codec
 * on every machine, GPU or not. Every float operation is one IEEE-rounded
 * operation (__fdiv_rn, __fmul_rn on the device), so FMA contraction and
 * fast-math cannot change a byte. */
#ifndef STITCH_GPU_MATH_H
#define STITCH_GPU_MATH_H

#include "codec/minifloat_impl.h" /* the converters: mf_*, one source */
#include "codec/view_impl.h"      /* the policy constants, one design */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define GM_HD static __host__ __device__ __forceinline__
#else
#define GM_HD static inline
#endif

GM_HD float gm_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

GM_HD float gm_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/* ---- FP8 scales (codec/view_fp8.c) ------------------------------------- */

GM_HD float gm_positive_scale(float s) { return s > 0.0f ? s : FLT_TRUE_MIN; }

GM_HD int gm_fp8_keeps(float amax, float sp) {
  double a = amax, s = sp;
  return a <= VIEW_FP8_FIT * s && a * VIEW_FP8_SHRINK >= VIEW_E4M3_MAX * s &&
         s < (double)INFINITY;
}

/* The scale of a block of largest magnitude AMAX; SP is the previous view's
 * scale when HAVE_PREV. */
GM_HD float gm_fp8_scale(float amax, int have_prev, float sp) {
  if (!have_prev)
    return amax > 0.0f
               ? gm_positive_scale(gm_div(amax, (float)VIEW_E4M3_MAX))
               : 0.0f;
  if (gm_fp8_keeps(amax, sp))
    return sp;
  if (amax > 0.0f)
    return gm_positive_scale(
        gm_div(gm_mul(amax, VIEW_FP8_HEADROOM), (float)VIEW_E4M3_MAX));
  return 0.0f;
}

GM_HD uint8_t gm_fp8_elem(float x, float s) {
  return mf_f32_to_e4m3(s > 0.0f ? gm_div(x, s) : x);
}

/* ---- NVFP4 block scales (codec/view_nvfp4.c) --------------------------- */

/* The tensor scale and how it moved, decided once per tensor on the host
 * (gpu_nvfp4_s2 in src/gpu/quant.c). */
typedef struct gm_s2 {
  float s, sp; /* new and previous tensor scale */
  int have_prev;
  int shifted, shift; /* s == sp * 2^shift exactly */
} gm_s2;

GM_HD uint8_t gm_e4m3_ceil(float v) {
  uint8_t c = mf_f32_to_e4m3(v);
  if (c < 0x7E && mf_e4m3_to_f32(c) < v)
    c++;
  return c;
}

GM_HD int gm_sb_keeps(float amax, float sbv, float s) {
  double a = amax, u = (double)sbv * (double)s;
  return a <= VIEW_FP4_FIT * u && a >= VIEW_FP4_SHRINK * u &&
         u < (double)INFINITY;
}

/* The E4M3 scale code of a block of largest magnitude AMAX whose previous
 * code was PC (ignored without a previous view). */
GM_HD uint8_t gm_nvfp4_code(float amax, uint8_t pc, const gm_s2 *t) {
  if (t->have_prev) {
    float pv = mf_e4m3_to_f32(pc);
    if (t->s == t->sp && gm_sb_keeps(amax, pv, t->s))
      return pc;
    if (t->shifted && pv > 0.0f) {
      float v = ldexpf(pv, -t->shift);
      uint8_t nc = mf_f32_to_e4m3(v);
      if (v <= (float)VIEW_E4M3_MAX && mf_e4m3_to_f32(nc) == v &&
          gm_sb_keeps(amax, v, t->s))
        return nc;
    }
  }
  if (t->s > 0.0f && amax > 0.0f)
    return gm_e4m3_ceil(gm_div(amax, gm_mul(t->s, (float)VIEW_E2M1_MAX)));
  return 0;
}

/* One E2M1 value under effective scale U (U == 0 keeps signed zeros). */
GM_HD uint8_t gm_fp4_elem(float x, float u) {
  return mf_f32_to_e2m1(u > 0.0f ? gm_div(x, u) : gm_mul(x, 0.0f));
}

/* ---- Elements of a W-bit tensor, little-endian, any alignment ---------- */

GM_HD uint32_t gm_ld(const uint8_t *p, uint64_t i, unsigned w) {
#ifdef __CUDA_ARCH__
  /* On the device, an aligned array (cudaMalloc's, torch's) is read one
   * element per load rather than a byte per load. */
  if (w >= 16 && ((uintptr_t)p & (w / 8 - 1)) == 0)
    return w == 16 ? ((const uint16_t *)p)[i] : ((const uint32_t *)p)[i];
#endif
  switch (w) {
  case 4: return (uint32_t)(p[i >> 1] >> ((i & 1) * 4)) & 15u;
  case 8: return p[i];
  case 16: return (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
  default:
    return (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
           (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
  }
}

/* Value I of a list's value array (W4 values sit in whole bytes). */
GM_HD uint32_t gm_ldv(const uint8_t *v, uint64_t i, unsigned w) {
  return w == 4 ? (uint32_t)(v[i] & 15u) : gm_ld(v, i, w);
}

GM_HD void gm_stv(uint8_t *v, uint64_t i, unsigned w, uint32_t x) {
#ifdef __CUDA_ARCH__
  if (w >= 16 && ((uintptr_t)v & (w / 8 - 1)) == 0) { /* as gm_ld */
    if (w == 16)
      ((uint16_t *)v)[i] = (uint16_t)x;
    else
      ((uint32_t *)v)[i] = x;
    return;
  }
#endif
  unsigned nb = w == 4 ? 1 : w / 8;
  for (unsigned k = 0; k < nb; k++)
    v[nb * i + k] = (uint8_t)(x >> (8 * k));
}

/* Stores element I of a tensor of W >= 8 bits. W4 stores are done by
 * whole bytes by the callers, which know both nibbles. */
GM_HD void gm_st(uint8_t *p, uint64_t i, unsigned w, uint32_t x) {
  gm_stv(p, i, w, x);
}

/* ---- Apply, one list entry (kernels/apply.cu) -------------------------- */

/* The check pass for entry I of a list of positions POS and old values
 * OLDV (may be NULL) against DATA of NE elements: 0, 1 for a position
 * outside or not ascending, 2 for an element not holding its old value. */
GM_HD int gm_apply_check(const uint64_t *pos, const uint8_t *oldv, uint64_t i,
                         const uint8_t *data, uint64_t ne, unsigned w) {
  uint64_t p = pos[i];
  if (p >= ne || (i > 0 && pos[i - 1] >= p))
    return 1;
  if (oldv != NULL && gm_ld(data, p, w) != gm_ldv(oldv, i, w))
    return 2;
  return 0;
}

/* The fused pass for W >= 8, once every position is known to be inside
 * and ascending (so no two entries share an element): entry I checks its
 * old value (OLDV may be NULL) and, when it holds, writes its new one.
 * Returns 1 when it wrote. Entries touch disjoint elements, so any order
 * gives the same bytes; a failed run is undone by writing back the old
 * values of exactly the entries that wrote (gm_apply_undo). */
GM_HD int gm_apply_fused(const uint64_t *pos, const uint8_t *oldv,
                         const uint8_t *newv, uint64_t i, uint8_t *data,
                         unsigned w) {
  uint64_t p = pos[i];
  if (oldv != NULL && gm_ld(data, p, w) != gm_ldv(oldv, i, w))
    return 0;
  gm_st(data, p, w, gm_ldv(newv, i, w));
  return 1;
}

/* Undoes entry I of a fused pass when bit I of WROTE (32 entries a word)
 * says it wrote. */
GM_HD void gm_apply_undo(const uint64_t *pos, const uint8_t *oldv,
                         const uint32_t *wrote, uint64_t i, uint8_t *data,
                         unsigned w) {
  if (wrote[i >> 5] >> (i & 31) & 1u)
    gm_st(data, pos[i], w, gm_ldv(oldv, i, w));
}

/* The write pass for entry I of N, safe to run for all entries at once in
 * any order: for W4 the even nibble's entry writes the whole byte, with
 * its odd partner's value when the partner is listed, and the partner
 * then does nothing, so each byte has one writer. */
GM_HD void gm_apply_write(const uint64_t *pos, const uint8_t *newv,
                          uint64_t n, uint64_t i, uint8_t *data, unsigned w) {
  uint64_t p = pos[i];
  uint32_t v = gm_ldv(newv, i, w);
  if (w != 4) {
    gm_st(data, p, w, v);
    return;
  }
  uint8_t *byte = data + (p >> 1);
  if (p & 1) {
    if (i > 0 && pos[i - 1] == p - 1)
      return; /* the even partner writes this byte */
    *byte = (uint8_t)((*byte & 0x0Fu) | v << 4);
  } else {
    uint32_t nb = (*byte & 0xF0u) | v;
    if (i + 1 < n && pos[i + 1] == p + 1)
      nb = (nb & 0x0Fu) | gm_ldv(newv, i + 1, w) << 4;
    *byte = (uint8_t)nb;
  }
}

/* ---- Apply, a batch of lists (kernels/apply.cu) ----------------------- */

/* One list of a batch as the device holds it. START is where its entries
 * begin in the batch's index space, a multiple of 32 so that no warp
 * spans two lists; MASK is where its words begin in the undo mask.
 * CHECKED: it has old values and W >= 8, so the fused pass writes it
 * (and may undo it); every other list is written after that pass. */
typedef struct gm_seg {
  const uint64_t *pos;
  const uint8_t *oldv, *newv;
  uint8_t *data;
  uint64_t n, ne, start, mask;
  uint32_t w, checked;
} gm_seg;

/* The list of the NS in S (S[0].start == 0, starts ascending) that index
 * G of the batch falls in: the last whose start is at most G. */
GM_HD uint32_t gm_seg_find(const gm_seg *s, uint32_t ns, uint64_t g) {
  uint32_t lo = 0, hi = ns;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s[mid].start <= g)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* ---- XXH64 pieces (kernels/checksum.cu, proto/gpu-digest.md) ---------- */

#define GM_P1 0x9E3779B185EBCA87ull
#define GM_P2 0xC2B2AE3D27D4EB4Full
#define GM_P3 0x165667B19E3779F9ull
#define GM_P4 0x85EBCA77C2B2AE63ull
#define GM_P5 0x27D4EB2F165667C5ull

GM_HD uint64_t gm_rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

GM_HD uint64_t gm_ld64(const uint8_t *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--)
    v = v << 8 | p[k];
  return v;
}

/* Accumulator LANE (0..3) before the first stripe, seed 0. */
GM_HD uint64_t gm_xxh64_init(unsigned lane) {
  return lane == 0   ? GM_P1 + GM_P2
         : lane == 1 ? GM_P2
         : lane == 2 ? 0
                     : 0 - GM_P1;
}

/* One stripe word into an accumulator. */
GM_HD uint64_t gm_xxh64_round(uint64_t acc, uint64_t in) {
  acc += in * GM_P2;
  return gm_rotl64(acc, 31) * GM_P1;
}

/* The hash of LEN bytes from the four accumulators ACC (used only when
 * LEN >= 32) and the TAIL, the last LEN % 32 bytes. */
GM_HD uint64_t gm_xxh64_finish(const uint64_t acc[4], const uint8_t *tail,
                               uint64_t len) {
  uint64_t h;
  if (len >= 32) {
    h = gm_rotl64(acc[0], 1) + gm_rotl64(acc[1], 7) + gm_rotl64(acc[2], 12) +
        gm_rotl64(acc[3], 18);
    for (int k = 0; k < 4; k++)
      h = (h ^ gm_xxh64_round(0, acc[k])) * GM_P1 + GM_P4;
  } else {
    h = GM_P5;
  }
  h += len;
  uint64_t rest = len & 31;
  for (; rest >= 8; rest -= 8, tail += 8)
    h = gm_rotl64(h ^ gm_xxh64_round(0, gm_ld64(tail)), 27) * GM_P1 + GM_P4;
  if (rest >= 4) {
    uint64_t w = (uint64_t)tail[0] | (uint64_t)tail[1] << 8 |
                 (uint64_t)tail[2] << 16 | (uint64_t)tail[3] << 24;
    h = gm_rotl64(h ^ (w * GM_P1), 23) * GM_P2 + GM_P3;
    tail += 4;
    rest -= 4;
  }
  for (; rest > 0; rest--, tail++)
    h = gm_rotl64(h ^ (*tail * GM_P5), 11) * GM_P1;
  h ^= h >> 33;
  h *= GM_P2;
  h ^= h >> 29;
  h *= GM_P3;
  h ^= h >> 32;
  return h;
}

#endif
