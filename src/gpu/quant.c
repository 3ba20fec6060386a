/* quant.c: C references of the quantize and diff kernels
 * (kernels/quant.cu, kernels/diff.cu), and the CPU run of the kernels' own
 * per-block code (gpu_math.h).
 *
 * The references call the view builder's per-tensor functions, so they are
 * the view's bytes by construction. The kernels cannot call them; they run
 * gpu_math.h, and gpu_emul_quant_* runs that same code here so that a
 * machine without a GPU still checks it against the codec. */
#include "gpu/gpu_internal.h"

#include "common/diag.h"

#include <math.h>

static stitch_tensor master_tensor(const uint8_t *master, uint64_t n) {
  stitch_tensor t;
  memset(&t, 0, sizeof(t));
  t.name = "(gpu master)";
  t.dtype = STITCH_DT_F32;
  t.ndim = 1;
  t.shape[0] = n;
  t.numel = n;
  t.nbytes = 4 * n;
  t.data = master;
  return t;
}

uint64_t gpu_first_nonfinite(const uint8_t *master, uint64_t n) {
  for (uint64_t i = 0; i < n; i++)
    if ((gm_ld(master, i, 32) & 0x7F800000u) == 0x7F800000u)
      return i;
  return n;
}

int gpu_nonfinite_error(uint64_t i, stitch_diag *d) {
  return stitch_diag_set(d, STITCH_EINVAL,
                         "quantize: element %llu is not finite; a quantized "
                         "view needs finite values",
                         (unsigned long long)i);
}

static int check_n(uint64_t n, stitch_diag *d) {
  RETURN_IF(n > (UINT64_MAX >> 4), d, STITCH_ELIMIT,
            "quantize: %llu elements are too many", (unsigned long long)n);
  return 0;
}

int stitch_gpu_ref_quant_bf16(const uint8_t *master, uint64_t n,
                              uint8_t *out, stitch_diag *d) {
  CHECK_RC(check_n(n, d));
  for (uint64_t i = 0; i < n; i++) {
    uint16_t h = stitch_f32_to_bf16(view_ld_f32(master, i));
    memcpy(out + 2 * i, &h, 2);
  }
  return 0;
}

int stitch_gpu_ref_quant_fp8(const uint8_t *master, uint64_t n,
                             uint32_t block, const uint8_t *prev_scales,
                             uint8_t *q, uint8_t *scales, stitch_diag *d) {
  CHECK_RC(check_n(n, d));
  stitch_tensor t = master_tensor(master, n);
  view_counts c = {0, 0};
  return stitch_view_fp8_tensor(&t, block, prev_scales, q, scales, &c, d);
}

int stitch_gpu_ref_quant_nvfp4(const uint8_t *master, uint64_t n,
                               const uint8_t *prev_sb, const uint8_t *prev_s2,
                               uint8_t *packed, uint8_t *sb, uint8_t *s2,
                               stitch_diag *d) {
  CHECK_RC(check_n(n, d));
  RETURN_IF(n % 16 != 0, d, STITCH_EINVAL,
            "quantize: nvfp4 needs a multiple of 16 elements, not %llu",
            (unsigned long long)n);
  RETURN_IF((prev_sb == NULL) != (prev_s2 == NULL), d, STITCH_EINVAL,
            "quantize: nvfp4 needs both previous scale tensors or neither");
  stitch_tensor t = master_tensor(master, n);
  view_counts c = {0, 0};
  return stitch_view_nvfp4_tensor(&t, prev_sb, prev_s2, packed, sb, s2, &c,
                                  d);
}

int stitch_gpu_ref_diff(stitch_gpu_width w, const uint8_t *prev,
                        const uint8_t *cur, uint64_t nbytes, uint64_t *pos,
                        uint64_t *count, stitch_diag *d) {
  uint64_t n, k = 0;
  CHECK_RC(gpu_elements(w, nbytes, &n, d));
  for (uint64_t i = 0; i < n; i++)
    if (gm_ld(prev, i, (unsigned)w) != gm_ld(cur, i, (unsigned)w))
      pos[k++] = i;
  *count = k;
  return 0;
}

/* ---- The tensor scale of NVFP4: the view builder's own policy -------- */

void gpu_nvfp4_s2(float amax, int have_prev, float sp, gm_s2 *t) {
  memset(t, 0, sizeof(*t));
  t->have_prev = have_prev;
  t->sp = have_prev ? sp : 0.0f;
  stitch_view_nvfp4_s2(amax, have_prev, t->sp, &t->s, &t->shift, &t->shifted);
}

/* ---- gpu_math.h on the CPU ---------------------------------------------- */

static float amax_of(const uint8_t *master, uint64_t lo, uint64_t hi) {
  float m = 0.0f;
  for (uint64_t i = lo; i < hi; i++) {
    float a = fabsf(view_ld_f32(master, i));
    m = a > m ? a : m;
  }
  return m;
}

int gpu_emul_quant_fp8(const uint8_t *master, uint64_t n, uint32_t block,
                       const uint8_t *prev_scales, uint8_t *q,
                       uint8_t *scales, stitch_diag *d) {
  CHECK_RC(check_n(n, d));
  uint64_t bad = gpu_first_nonfinite(master, n);
  if (bad < n)
    return gpu_nonfinite_error(bad, d);
  uint64_t bs = block == 0 ? n : block;
  uint64_t nb = stitch_view_fp8_nblocks(n, block);
  for (uint64_t b = 0; b < nb; b++) {
    uint64_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
    float sp = prev_scales != NULL ? view_ld_f32(prev_scales, b) : 0.0f;
    float s = gm_fp8_scale(amax_of(master, lo, hi), prev_scales != NULL, sp);
    view_st_f32(scales, b, s);
    for (uint64_t i = lo; i < hi; i++)
      q[i] = gm_fp8_elem(view_ld_f32(master, i), s);
  }
  return 0;
}

int gpu_emul_quant_nvfp4(const uint8_t *master, uint64_t n,
                         const uint8_t *prev_sb, const uint8_t *prev_s2,
                         uint8_t *packed, uint8_t *sb, uint8_t *s2,
                         stitch_diag *d) {
  CHECK_RC(check_n(n, d));
  RETURN_IF(n % 16 != 0, d, STITCH_EINVAL,
            "quantize: nvfp4 needs a multiple of 16 elements, not %llu",
            (unsigned long long)n);
  uint64_t bad = gpu_first_nonfinite(master, n);
  if (bad < n)
    return gpu_nonfinite_error(bad, d);
  int have_prev = prev_sb != NULL && prev_s2 != NULL;
  gm_s2 t;
  gpu_nvfp4_s2(amax_of(master, 0, n), have_prev,
               have_prev ? view_ld_f32(prev_s2, 0) : 0.0f, &t);
  view_st_f32(s2, 0, t.s);
  for (uint64_t b = 0; b < n / 16; b++) {
    uint8_t code = gm_nvfp4_code(amax_of(master, 16 * b, 16 * b + 16),
                                 have_prev ? prev_sb[b] : 0, &t);
    sb[b] = code;
    float u = gm_mul(mf_e4m3_to_f32(code), t.s);
    for (uint64_t i = 16 * b; i < 16 * b + 16; i += 2)
      packed[i / 2] =
          (uint8_t)(gm_fp4_elem(view_ld_f32(master, i), u) |
                    gm_fp4_elem(view_ld_f32(master, i + 1), u) << 4);
  }
  return 0;
}
