/* view_fp8.c: the FP8 E4M3 view of one tensor, with delta-stable scales.
 *
 * Blocks run over the flattened tensor (the last one may be short), so the
 * layout does not depend on the shape and one block size serves every
 * tensor. Each block has an F32 scale; element i is e4m3(x_i / scale) and
 * dequantizes as e4m3 * scale. The division is one IEEE float division, so
 * a GPU kernel using __fdiv_rn reproduces the bytes. */
#include "codec/view_impl.h"

#include <float.h>
#include <math.h>

uint64_t stitch_view_fp8_nblocks(uint64_t numel, uint32_t block) {
  if (block == 0 || numel == 0)
    return 1;
  return numel / block + (numel % block != 0);
}

int stitch_view_amax(const stitch_tensor *t, uint64_t lo, uint64_t hi,
                     float *amax, stitch_diag *d) {
  float m = 0.0f;
  for (uint64_t i = lo; i < hi; i++) {
    float a = fabsf(view_ld_f32(t->data, i));
    if (!(a <= FLT_MAX)) /* inf or NaN */
      return stitch_diag_set(d, STITCH_EINVAL,
                             "tensor '%.200s': element %llu is %s; a "
                             "quantized view needs finite values",
                             t->name, (unsigned long long)i,
                             isnan(a) ? "NaN" : "infinite");
    m = a > m ? a : m;
  }
  *amax = m;
  return 0;
}

/* A scale for AMAX > 0 that is never zero, so x / scale stays finite (an
 * amax below 448 * 2^-150 would otherwise underflow). */
static float positive_scale(float s) { return s > 0.0f ? s : FLT_TRUE_MIN; }

/* The previous scale SP still serves a block of largest magnitude AMAX when
 * AMAX fits under it (see VIEW_FP8_FIT) and SP is not more than
 * VIEW_FP8_SHRINK times too large. Products of a float and a small integer
 * are exact in double, so the test is exact. A NaN, infinite or negative SP
 * fails it, so a damaged previous scale is simply replaced. */
static int fp8_keeps(float amax, float sp) {
  double a = amax, s = sp;
  return a <= VIEW_FP8_FIT * s && a * VIEW_FP8_SHRINK >= VIEW_E4M3_MAX * s &&
         s < INFINITY;
}

int stitch_view_fp8_tensor(const stitch_tensor *t, uint32_t block,
                           const uint8_t *prev_scales, uint8_t *q,
                           uint8_t *scales, view_counts *c, stitch_diag *d) {
  uint64_t n = t->numel;
  uint64_t bs = block == 0 ? n : block;
  uint64_t nb = stitch_view_fp8_nblocks(n, block);
  c->blocks += nb;
  for (uint64_t b = 0; b < nb; b++) {
    uint64_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
    float amax = 0.0f;
    CHECK_RC(stitch_view_amax(t, lo, hi, &amax, d));
    float s;
    if (prev_scales == NULL) {
      s = amax > 0.0f ? positive_scale(amax / (float)VIEW_E4M3_MAX) : 0.0f;
      c->changed++;
    } else {
      float sp = view_ld_f32(prev_scales, b);
      if (fp8_keeps(amax, sp))
        s = sp;
      else if (amax > 0.0f)
        s = positive_scale(amax * VIEW_FP8_HEADROOM / (float)VIEW_E4M3_MAX);
      else
        s = 0.0f;
      uint32_t ub, pb;
      memcpy(&ub, &s, 4);
      memcpy(&pb, &sp, 4);
      c->changed += ub != pb;
    }
    view_st_f32(scales, b, s);
    if (s > 0.0f) {
      for (uint64_t i = lo; i < hi; i++)
        q[i] = stitch_f32_to_e4m3(view_ld_f32(t->data, i) / s);
    } else { /* all elements are +-0 */
      for (uint64_t i = lo; i < hi; i++)
        q[i] = stitch_f32_to_e4m3(view_ld_f32(t->data, i));
    }
  }
  return 0;
}
