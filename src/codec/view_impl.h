/* view_impl.h: internals shared by the view builders (view.c drives,
 * view_fp8.c and view_nvfp4.c quantize one tensor each). Not installed.
 *
 * The scale policy constants live here, next to each other, because they
 * are one design (docs/views.md, "Scale policy"): each kind has a band in
 * which an existing scale is kept, and a landing point for a new scale that
 * sits well inside that band, so a scale that just changed does not change
 * again on the next small step. */
#ifndef STITCH_CODEC_VIEW_IMPL_H
#define STITCH_CODEC_VIEW_IMPL_H

#include "stitch/view.h"

#include "common/diag.h"

#include <string.h>

/* safetensors is little-endian and the builders copy element bytes as host
 * floats. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stitch views assume a little-endian host"
#endif

/* Largest finite E4M3 and E2M1 magnitudes. */
#define VIEW_E4M3_MAX 448.0
#define VIEW_E2M1_MAX 6.0

/* A scale "fits" a block while the block's largest magnitude, divided by the
 * scale, rounds to the format's largest code with no more error than the
 * top binade's own half step: up to 464 for E4M3 (448 + 32/2) and up to 7
 * for E2M1 (6 + 2/2). Saturation below those points costs no more than
 * ordinary rounding does, so keeping the scale there is free. */
#define VIEW_FP8_FIT 464.0
#define VIEW_FP4_FIT 7.0

/* FP8: keep a scale while amax/scale >= 448/4, i.e. while the scale is at
 * most 4x larger than a fresh one. E4M3 is a float: an oversized scale
 * leaves the relative error of normal values unchanged and only pushes the
 * block's smallest values two binades further into the subnormals (on
 * Gaussian data the RMS error is identical up to 16x, docs/views.md). So
 * the band is wide, and a new scale lands amax at 448/2, leaving 2.07x
 * growth (to 464) and 2x shrinkage before the next change. */
#define VIEW_FP8_SHRINK 4.0
#define VIEW_FP8_HEADROOM 2.0f

/* NVFP4 block scales: keep while amax/(sb*S) >= 4, i.e. while the block's
 * largest value stays in E2M1's top binade [4, 6]. E2M1 has only three
 * binades, so letting the largest value fall out of the top one would cost
 * a third of the block's resolution. A new block scale is the fresh one
 * (amax/(6*S) rounded up to the E4M3 grid, landing amax in (5.33, 6]):
 * rounding up plus the fit tolerance to 7 already leaves >= 16% growth. */
#define VIEW_FP4_SHRINK 4.0

/* NVFP4 tensor scale S: keep while the largest block can still fit with
 * sb <= 448 (amax <= 7*448*S) and S is at most 16x larger than fresh
 * (amax >= 6*448*S/16). An oversized S only moves block scales down
 * E4M3's range (2^-9..448, almost 18 binades), which costs nothing until a
 * block's scale becomes subnormal, so the band is wide; a change of S
 * touches every block of the tensor. A new S is the previous one times
 * the power of two nearest to 2x the fresh value: then every block scale
 * that survives the shift exactly keeps its effective scale sb*S, so only
 * the scale bytes change, not the packed values (docs/views.md). */
#define VIEW_S_SHRINK 16.0
#define VIEW_S_HEADROOM 2.0

static inline float view_ld_f32(const uint8_t *p, uint64_t i) {
  float f;
  memcpy(&f, p + 4 * i, 4);
  return f;
}

static inline void view_st_f32(uint8_t *p, uint64_t i, float f) {
  memcpy(p + 4 * i, &f, 4);
}

/* Per-tensor scale counters for stitch_view_stats. */
typedef struct view_counts {
  uint64_t blocks;
  uint64_t changed;
} view_counts;

/* Elements per scale block for an FP8 tensor of NUMEL elements (BLOCK 0:
 * one block) and the number of blocks. */
uint64_t stitch_view_fp8_nblocks(uint64_t numel, uint32_t block);

/* Quantizes F32 tensor T to E4M3 into Q (numel bytes) and SCALES (nblocks
 * F32). PREV_SCALES, if not NULL, holds the previous view's nblocks F32
 * scales. Fails with STITCH_EINVAL on a non-finite element. */
int stitch_view_fp8_tensor(const stitch_tensor *t, uint32_t block,
                           const uint8_t *prev_scales, uint8_t *q,
                           uint8_t *scales, view_counts *c, stitch_diag *d);

/* Quantizes F32 tensor T (ndim >= 2, last dim % 16 == 0) to NVFP4: PACKED
 * (numel/2 bytes), SB (numel/16 E4M3 block scales) and S2 (one F32). The
 * PREV_ arguments are the previous view's tensors of the same layout, or
 * both NULL. Fails with STITCH_EINVAL on a non-finite element. */
void stitch_view_nvfp4_s2(float amax, int have_prev, float sp, float *s,
                          int *shift, int *shifted);
int stitch_view_nvfp4_tensor(const stitch_tensor *t, const uint8_t *prev_sb,
                             const uint8_t *prev_s2, uint8_t *packed,
                             uint8_t *sb, uint8_t *s2, view_counts *c,
                             stitch_diag *d);

/* Largest |x| over elements [lo, hi) of F32 tensor T; STITCH_EINVAL naming
 * the first non-finite element, whose scale could not be chosen. */
int stitch_view_amax(const stitch_tensor *t, uint64_t lo, uint64_t hi,
                     float *amax, stitch_diag *d);

#endif
