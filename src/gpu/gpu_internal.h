/* gpu_internal.h: what src/gpu/ (C) and kernels/ (CUDA) share. Not
 * installed. The gpu_cu_* functions exist only when the library is built
 * with CUDA (STITCH_HAVE_CUDA); they take device pointers and check every
 * CUDA return code, turning a failure into STITCH_EIO with its name. */
#ifndef STITCH_GPU_INTERNAL_H
#define STITCH_GPU_INTERNAL_H

#include "stitch/gpu.h"

#include "gpu/gpu_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of W bits in NBYTES (EINVAL when W is unknown or NBYTES is not
 * a whole number of them). */
int gpu_elements(stitch_gpu_width w, uint64_t nbytes, uint64_t *n,
                 stitch_diag *d);

/* The apply error for the first entry with a bad position (BAD_POS) or a
 * base mismatch (BAD_BASE); UINT64_MAX for none. 0 when both are none. */
int gpu_apply_error(const stitch_gpu_list *l, uint64_t bad_pos,
                    uint64_t bad_base, stitch_diag *d);

/* stitch_gpu_apply_batch's arguments, checked before either path runs:
 * every list as stitch_gpu_apply checks one, and no two tensors that
 * receive entries overlapping. */
int gpu_batch_args(const stitch_gpu_list *lists, uint8_t *const *data,
                   const uint64_t *nbytes, size_t n, stitch_diag *d);

/* gpu_apply_error for list K of a batch, the message naming the list. */
int gpu_batch_error(const stitch_gpu_list *lists, size_t k, uint64_t bad_pos,
                    uint64_t bad_base, stitch_diag *d);

/* The device's table for a batch: SEGS[0 .. *ns) (room for N) for the
 * lists with entries, IDX[j] the list of SEGS[j], *total the index space
 * (the last list's end), *words the undo mask's, and whether any list is
 * CHECKED (gm_seg) or not. Arguments gpu_batch_args-checked. */
int gpu_batch_segs(const stitch_gpu_list *lists, uint8_t *const *data,
                   const uint64_t *nbytes, size_t n, gm_seg *segs,
                   size_t *idx, uint32_t *ns, uint64_t *total,
                   uint64_t *words, uint32_t *any_checked,
                   uint32_t *any_plain, stitch_diag *d);

/* The NVFP4 tensor scale for a tensor of largest magnitude AMAX, given the
 * previous one when HAVE_PREV (codec/view_nvfp4.c's rules). */
void gpu_nvfp4_s2(float amax, int have_prev, float sp, gm_s2 *out);

/* gpu_math.h's per-block code run on the CPU, as the kernels run it: the
 * test checks these against the codec. Same contracts as the ref_ twins. */
int gpu_emul_quant_fp8(const uint8_t *master, uint64_t n, uint32_t block,
                       const uint8_t *prev_scales, uint8_t *q,
                       uint8_t *scales, stitch_diag *d);
int gpu_emul_quant_nvfp4(const uint8_t *master, uint64_t n,
                         const uint8_t *prev_sb, const uint8_t *prev_s2,
                         uint8_t *packed, uint8_t *sb, uint8_t *s2,
                         stitch_diag *d);

/* Index of the first non-finite of N F32 values, or N. */
uint64_t gpu_first_nonfinite(const uint8_t *master, uint64_t n);
int gpu_nonfinite_error(uint64_t i, stitch_diag *d);

#ifdef STITCH_HAVE_CUDA
int gpu_cu_device_count(void); /* 0 on any error */
int gpu_cu_malloc(void **p, uint64_t nbytes, stitch_diag *d);
void gpu_cu_free(void *p);
int gpu_cu_memcpy(void *dst, const void *src, uint64_t nbytes, int kind,
                  stitch_diag *d); /* kind: 0 up, 1 down, 2 device */
int gpu_cu_memset(void *dev, int byte, uint64_t nbytes, stitch_diag *d);
int gpu_cu_device_name(char *buf, size_t len, stitch_diag *d);

int gpu_cu_apply(const stitch_gpu_list *l, uint8_t *data, uint64_t nbytes,
                 stitch_diag *d);
int gpu_cu_apply_batch(const stitch_gpu_list *lists, uint8_t *const *data,
                       const uint64_t *nbytes, size_t n, stitch_diag *d);
int gpu_cu_diff(stitch_gpu_width w, const uint8_t *prev, const uint8_t *cur,
                uint64_t nbytes, uint64_t *pos, uint64_t *count,
                stitch_diag *d);
int gpu_cu_quant_bf16(const uint8_t *master, uint64_t n, uint8_t *out,
                      stitch_diag *d);
int gpu_cu_quant_fp8(const uint8_t *master, uint64_t n, uint32_t block,
                     const uint8_t *prev_scales, uint8_t *q, uint8_t *scales,
                     stitch_diag *d);
int gpu_cu_quant_nvfp4(const uint8_t *master, uint64_t n,
                       const uint8_t *prev_sb, const uint8_t *prev_s2,
                       uint8_t *packed, uint8_t *sb, uint8_t *s2,
                       stitch_diag *d);
int gpu_cu_checksum(const uint8_t *data, uint64_t nbytes, uint64_t *out,
                    stitch_diag *d);
#endif

#ifdef __cplusplus
}
#endif
#endif
