/* minifloat_impl.h: FP32 <-> BF16, FP8 E4M3FN and FP4 E2M1 element
 * converters, as inline functions that compile both as C11 (the library:
 * codec/minifloat.c wraps them as stitch_f32_to_bf16 and the rest) and as
 * CUDA device code (kernels/, through gpu/gpu_math.h), so the GPU makes the
 * same bytes from one source.
 *
 * Everything is integer work on the IEEE-754 bit pattern, so the result is
 * the same on every host and compiler (no dependence on FPU rounding mode,
 * FMA contraction or flush-to-zero).
 *
 * Rounding is round-to-nearest-even on the exact input value. The narrow
 * formats saturate at their largest finite value (OCP "satfinite"
 * semantics, as PTX's cvt.rn.satfinite does):
 *   E4M3FN: bias 7, 3 mantissa bits, max 448, subnormals k*2^-9, no inf,
 *           NaN is S.1111.111 (we emit 0x7F). Inf saturates to +-448.
 *   E2M1:   bias 1, 1 mantissa bit, values 0,.5,1,1.5,2,3,4,6, sign in bit
 *           3. It has no NaN; NaN becomes +6 (the hardware's choice) and
 *           inf saturates to +-6.
 * Signed zeros keep their sign. Not installed. */
#ifndef STITCH_MINIFLOAT_IMPL_H
#define STITCH_MINIFLOAT_IMPL_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MF_HD static __host__ __device__ __forceinline__
#else
#define MF_HD static inline
#endif

MF_HD uint32_t mf_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

MF_HD float mf_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* v >> s rounded to nearest, ties to even; 1 <= s <= 31. */
MF_HD uint32_t mf_rne_shift(uint32_t v, unsigned s) {
  uint32_t q = v >> s;
  uint32_t rem = v & ((1u << s) - 1);
  uint32_t half = 1u << (s - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

/* Magnitude code of |f| (bits a, sign cleared, not NaN) in a format with
 * MBITS mantissa bits, exponent BIAS and largest finite magnitude code MAXC
 * whose FP32 bit pattern is MAXBITS. The code layout (exponent field above
 * mantissa field) makes "code + 1" the next larger value, so a mantissa that
 * rounds up carries into the exponent by itself. */
MF_HD uint32_t mf_mini(uint32_t a, unsigned mbits, int bias, uint32_t maxc,
                       uint32_t maxbits) {
  if (a >= maxbits) /* includes inf; >= max means saturate or exact max */
    return maxc;
  int e = (int)(a >> 23) - 127; /* unbiased exponent */
  int emin = 1 - bias;          /* smallest normal exponent of the format */
  if (e >= emin) {
    /* Normal in the target: rebias the exponent and drop 23-MBITS bits. The
     * subtraction cannot borrow because e >= emin. A result equal to
     * maxc + 1 is impossible: a < maxbits and rounding to nearest can only
     * reach maxbits' code, which is maxc. */
    uint32_t r = a - ((uint32_t)(127 - bias) << 23);
    return mf_rne_shift(r, 23 - mbits);
  }
  if ((a >> 23) == 0) /* FP32 zero or subnormal: far below half a step */
    return 0;
  /* Subnormal in the target: count units of 2^(emin-mbits). The value is
   * M * 2^(e-23) with M the 24-bit significand, so the count is
   * M >> (23 - e + emin - mbits), rounded. A shift of 25 or more leaves
   * less than half a unit (M < 2^24), i.e. zero. A count that rounds up to
   * 2^mbits is the smallest normal code, which is what we want. */
  uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  unsigned s = (unsigned)(23 - e + emin - (int)mbits);
  if (s >= 25)
    return 0;
  return mf_rne_shift(m, s);
}

MF_HD uint16_t mf_f32_to_bf16(float f) {
  uint32_t u = mf_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)      /* NaN: keep sign and payload top */
    return (uint16_t)((u >> 16) | 0x0040u); /* set the quiet bit */
  /* Adding 0x7FFF plus the kept LSB rounds to nearest even; a carry out of
   * the mantissa bumps the exponent, and past FLT_MAX gives inf, as IEEE
   * rounding does. */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

MF_HD uint8_t mf_f32_to_e4m3(float f) {
  uint32_t u = mf_bits(f);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u)
    return 0x7F;
  uint8_t s = (uint8_t)((u >> 24) & 0x80u);
  /* 448 = 1.75 * 2^8 = 0x43E00000 */
  return (uint8_t)(s | mf_mini(a, 3, 7, 0x7E, 0x43E00000u));
}

MF_HD float mf_e4m3_to_f32(uint8_t v) {
  uint32_t s = (uint32_t)(v & 0x80u) << 24;
  uint32_t e = (v >> 3) & 0xFu, m = v & 0x7u;
  if (e == 0xF && m == 0x7)
    return mf_float(s | 0x7FC00000u);
  if (e == 0) { /* subnormal: m * 2^-9, exact in FP32; keeps -0 */
    float mag = (float)m * 0x1p-9f;
    return s ? -mag : mag;
  }
  return mf_float(s | ((e - 7 + 127) << 23) | (m << 20));
}

MF_HD uint8_t mf_f32_to_e2m1(float f) {
  uint32_t u = mf_bits(f);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u)
    return 0x7;
  uint8_t s = (uint8_t)((u >> 28) & 0x8u);
  /* 6 = 1.5 * 2^2 = 0x40C00000 */
  return (uint8_t)(s | mf_mini(a, 1, 1, 0x7, 0x40C00000u));
}

#endif
