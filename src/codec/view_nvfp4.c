/* view_nvfp4.c: the NVFP4 view of one tensor, with delta-stable scales.
 *
 * Two-level scaling as NVIDIA's NVFP4: an F32 tensor scale S and an E4M3
 * scale sb per 16 consecutive elements of a row (K % 16 == 0, so blocks
 * never straddle rows and the flat block index is row-major over
 * [..., K/16]). Element x becomes e2m1(x / u) with u = float(sb * S), both
 * single IEEE float operations, so a GPU kernel reproduces the bytes; it
 * dequantizes as e2m1 * sb * S. Two elements share a byte, element 2i in
 * the low nibble.
 *
 * Fresh scales: S = amax / (448 * 6), sb = amax_block / (6 * S) rounded UP
 * onto the E4M3 grid, so the block's largest value lands in (5.33, 6] and
 * never saturates. With a previous view, scales are kept inside the bands
 * described in view_impl.h. */
#include "codec/view_impl.h"

#include <float.h>
#include <math.h>

/* The smallest E4M3 code whose value is >= V (V >= 0 and finite), or the
 * largest finite code (448) when V exceeds it. */
static uint8_t e4m3_ceil(float v) {
  uint8_t c = stitch_f32_to_e4m3(v); /* nearest, saturating at 0x7E */
  if (c < 0x7E && stitch_e4m3_to_f32(c) < v)
    c++; /* positive codes are ordered like their values */
  return c;
}

/* The smallest S we emit for a nonzero tensor: sb * S stays a normal float
 * even for the smallest block scale 2^-9, so x / (sb * S) is finite. */
#define VIEW_S_MIN 0x1p-117f

static float fresh_s(float amax) {
  if (amax == 0.0f)
    return 0.0f;
  float s = amax / (float)(VIEW_E4M3_MAX * VIEW_E2M1_MAX);
  return s > VIEW_S_MIN ? s : VIEW_S_MIN;
}

/* Whether S = SP still serves a tensor of largest magnitude AMAX. Exact in
 * double (float times small integers); a NaN, infinite or negative SP fails
 * and is replaced. */
static int s_keeps(float amax, float sp) {
  double a = amax, s = sp;
  return a <= VIEW_FP4_FIT * VIEW_E4M3_MAX * s &&
         a * VIEW_S_SHRINK >= VIEW_E2M1_MAX * VIEW_E4M3_MAX * s && s < INFINITY;
}

/* Whether block scale value SBV (decoded, under tensor scale S) still
 * serves a block of largest magnitude AMAX: it fits (VIEW_FP4_FIT) and the
 * block's largest value stays in E2M1's top binade (VIEW_FP4_SHRINK). */
static int sb_keeps(float amax, float sbv, float s) {
  double a = amax, u = (double)sbv * (double)s; /* 4 x 24 bits: exact */
  return a <= VIEW_FP4_FIT * u && a >= VIEW_FP4_SHRINK * u && u < INFINITY;
}

/* The new S when SP no longer serves AMAX > 0: SP times the power of two
 * nearest to the target VIEW_S_HEADROOM * fresh, so block scales can shift
 * by whole binades and keep their effective scale. Falls back to the target
 * itself when SP is unusable or the product leaves the keep band. */
static float next_s(float amax, float sp) {
  float target = fresh_s(amax) * (float)VIEW_S_HEADROOM;
  if (!(sp > 0.0f && sp <= FLT_MAX))
    return target;
  int k = (int)lrint(log2((double)target / (double)sp));
  float s = ldexpf(sp, k);
  if (!(s >= VIEW_S_MIN && s <= FLT_MAX) || !s_keeps(amax, s))
    return target;
  return s;
}

/* The tensor scale S for a tensor of largest magnitude AMAX, given the
 * previous S (SP, when HAVE_PREV): kept while it serves, else moved by a
 * power of two when it can be (*SHIFTED, *SHIFT), else fresh. Shared with
 * the GPU path's reference (src/gpu/quant.c). */
void stitch_view_nvfp4_s2(float amax, int have_prev, float sp, float *out,
                          int *shift_out, int *shifted_out) {
  float s;
  int shift = 0, shifted = 0;
  if (!have_prev)
    s = fresh_s(amax);
  else if (s_keeps(amax, sp))
    s = sp;
  else if (amax == 0.0f)
    s = 0.0f;
  else {
    s = next_s(amax, sp);
    if (sp > 0.0f && s != sp) {
      int es, ep;
      float ms = frexpf(s, &es), mp = frexpf(sp, &ep);
      if (ms == mp) {
        shift = es - ep;
        shifted = 1;
      }
    }
  }
  *out = s;
  *shift_out = shift;
  *shifted_out = shifted;
}

int stitch_view_nvfp4_tensor(const stitch_tensor *t, const uint8_t *prev_sb,
                             const uint8_t *prev_s2, uint8_t *packed,
                             uint8_t *sb, uint8_t *s2, view_counts *c,
                             stitch_diag *d) {
  uint64_t n = t->numel, nb = n / 16;
  float amax_t;
  CHECK_RC(stitch_view_amax(t, 0, n, &amax_t, d));

  int have_prev = prev_sb != NULL && prev_s2 != NULL;
  float sp = have_prev ? view_ld_f32(prev_s2, 0) : 0.0f;
  float s;
  int shift = 0, shifted = 0; /* S = sp * 2^shift, block scales / 2^shift */
  stitch_view_nvfp4_s2(amax_t, have_prev, sp, &s, &shift, &shifted);
  view_st_f32(s2, 0, s);
  c->blocks += nb;

  for (uint64_t b = 0; b < nb; b++) {
    uint64_t lo = b * 16;
    float amax;
    CHECK_RC(stitch_view_amax(t, lo, lo + 16, &amax, d));
    uint8_t code = 0;
    int decided = 0;
    if (have_prev) {
      uint8_t pc = prev_sb[b];
      float pv = stitch_e4m3_to_f32(pc);
      if (s == sp && sb_keeps(amax, pv, s)) {
        code = pc;
        decided = 1;
      } else if (shifted && pv > 0.0f) {
        /* Same effective scale under the shifted S, if sb survives the
         * shift exactly (E4M3 is normal from 2^-6 to 448). */
        float v = ldexpf(pv, -shift);
        uint8_t nc = stitch_f32_to_e4m3(v);
        if (v <= (float)VIEW_E4M3_MAX && stitch_e4m3_to_f32(nc) == v &&
            sb_keeps(amax, v, s)) {
          code = nc;
          decided = 1;
        }
      }
    }
    if (!decided && s > 0.0f && amax > 0.0f)
      code = e4m3_ceil(amax / (s * (float)VIEW_E2M1_MAX));
    sb[b] = code;

    float u = stitch_e4m3_to_f32(code) * s;
    if (have_prev) {
      double was = (double)stitch_e4m3_to_f32(prev_sb[b]) * (double)sp;
      c->changed += (double)stitch_e4m3_to_f32(code) * (double)s != was;
    } else {
      c->changed++;
    }
    for (uint64_t i = lo; i < lo + 16; i += 2) {
      float x0 = view_ld_f32(t->data, i), x1 = view_ld_f32(t->data, i + 1);
      /* u == 0 only for an all-zero block (or a kept, absurdly small S):
       * x * 0 keeps the zero's sign without dividing by zero. */
      uint8_t q0 = stitch_f32_to_e2m1(u > 0.0f ? x0 / u : x0 * 0.0f);
      uint8_t q1 = stitch_f32_to_e2m1(u > 0.0f ? x1 / u : x1 * 0.0f);
      packed[i / 2] = (uint8_t)(q0 | q1 << 4);
    }
  }
  return 0;
}
