/* minifloat.c: FP32 <-> BF16, FP8 E4M3FN and FP4 E2M1 element converters,
 * the public face of codec/minifloat_impl.h (its comment has the rounding
 * and saturation rules), which the CUDA kernels compile too. */
#include "codec/minifloat_impl.h"
#include "stitch/view.h"

uint16_t stitch_f32_to_bf16(float f) { return mf_f32_to_bf16(f); }

float stitch_bf16_to_f32(uint16_t h) { return mf_float((uint32_t)h << 16); }

uint8_t stitch_f32_to_e4m3(float f) { return mf_f32_to_e4m3(f); }

float stitch_e4m3_to_f32(uint8_t v) { return mf_e4m3_to_f32(v); }

uint8_t stitch_f32_to_e2m1(float f) { return mf_f32_to_e2m1(f); }

float stitch_e2m1_to_f32(uint8_t v) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = mag[v & 0x7u];
  return (v & 0x8u) ? -m : m;
}
