/* stitch/view.h: served views of FP32 master weights (docs/views.md).
 *
 * A view is what the rollout engine serves: BF16 (round to nearest even),
 * FP8 E4M3 with per-tensor or per-block FP32 scales, or NVFP4 (E2M1 values
 * in blocks of 16 with an E4M3 scale per block and an FP32 scale per tensor).
 *
 * Scales are delta-stable: given the previous step's view, a scale is kept as
 * long as the block's values still fit it, so an unchanged block quantizes to
 * the same bytes and only blocks whose scale had to move are re-sent.
 *
 * Layout of quantized tensors in the output safetensors file, for a master
 * tensor NAME:
 *   fp8:   NAME (F8_E4M3, same shape), NAME_scale (F32, [nblocks])
 *   nvfp4: NAME (U8, shape [..., K/2], two values per byte, element 2i in the
 *          low nibble), NAME_scale (F8_E4M3, [..., K/16]),
 *          NAME_scale_2 (F32, [1])
 * Tensors that are not F32, and F32 tensors a format cannot hold (fewer than
 * two dims; for nvfp4 a last dim not a multiple of 16), are written as BF16
 * (from F32) or copied unchanged (other dtypes). */
#ifndef STITCH_VIEW_H
#define STITCH_VIEW_H

#include "stitch/safetensors.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

typedef enum stitch_view_kind {
  STITCH_VIEW_BF16 = 0,
  STITCH_VIEW_FP8 = 1,
  STITCH_VIEW_NVFP4 = 2,
} stitch_view_kind;

/* "bf16", "fp8", "nvfp4" -> 0 and *out, else STITCH_EINVAL. */
int stitch_view_kind_parse(const char *s, stitch_view_kind *out);
const char *stitch_view_kind_name(stitch_view_kind k);

typedef struct stitch_view_opts {
  stitch_view_kind kind;
  /* fp8 only: elements per scale block along the flattened tensor;
   * 0 means one scale for the whole tensor. */
  uint32_t fp8_block;
} stitch_view_opts;

typedef struct stitch_view_stats {
  uint64_t tensors;        /* tensors written */
  uint64_t scale_blocks;   /* scale blocks across all quantized tensors */
  uint64_t scales_changed; /* blocks whose scale differs from --prev */
} stitch_view_stats;

/* Builds the view of MASTERS into OUT_PATH (atomically). PREV, when not NULL,
 * is the previous step's view of the same kind; its scales are reused where
 * they still fit. stats may be NULL. */
int stitch_view_build(const stitch_st *masters, const stitch_st *prev,
                      const stitch_view_opts *opts, const char *out_path,
                      stitch_view_stats *stats, stitch_diag *d);

/* Element converters, exposed for bindings, kernels' references and tests. */
uint16_t stitch_f32_to_bf16(float f); /* round to nearest even, NaN kept */
float stitch_bf16_to_f32(uint16_t h);
uint8_t stitch_f32_to_e4m3(float f);  /* RNE, saturates at +-448 */
float stitch_e4m3_to_f32(uint8_t v);
uint8_t stitch_f32_to_e2m1(float f);  /* RNE, saturates at +-6, 4 bits */
float stitch_e2m1_to_f32(uint8_t v);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
