/* The codec's vector loops: where they are compiled, and whether this
 * CPU runs them.
 *
 * sparse.c (the change scan), gaps.c (GAPS) and rans.c (RANSC) each keep
 * an AVX2 copy of their hot loops, compiled with a target attribute so
 * the library still runs on any x86-64, and choose it at run time through
 * codec_avx2(). The vector and scalar loops code the same bytes; tests
 * check that through GAPS's and RANSC's codec_run (delta_internal.h),
 * which asks for the scalar loops on one call. */
#ifndef STITCH_CODEC_CPU_H
#define STITCH_CODEC_CPU_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(STITCH_NO_AVX2) && \
    !defined(STITCH_NO_SIMD)
#define CODEC_X86_SIMD 1
#endif

/* Whether the AVX2 loops can run: compiled in, and a CPU with AVX2 (and
 * POPCNT, which every AVX2 CPU has and RANSC uses).
 * __builtin_cpu_supports reads what the runtime probed once at start-up. */
static inline int codec_avx2(void) {
#ifdef CODEC_X86_SIMD
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
#else
  return 0;
#endif
}

#endif /* STITCH_CODEC_CPU_H */
