/* stitch/gpu.h: patch, diff, quantize and checksum served tensors where they
 * live (docs/kernels.md, proto/gpu-digest.md).
 *
 * Every operation exists twice and computes the same bytes:
 *  - stitch_gpu_ref_<op>: the plain C reference. Always built, always on the
 *    CPU, HOST pointers. This is what CI tests.
 *  - stitch_gpu_<op>: the dispatching entry point. When libstitch was built
 *    with CUDA (STITCH_CUDA) and stitch_gpu_available() returns 1, it runs
 *    the CUDA kernels and every tensor or list pointer it takes is a DEVICE
 *    pointer (cudaMalloc'd, or from stitch_gpu_malloc). Otherwise it runs
 *    the reference and they are HOST pointers. Results returned by value
 *    through uint64_t* out-parameters (counts, checksums) are always host
 *    memory.
 * A caller that holds its weights on the GPU therefore checks
 * stitch_gpu_available() once and picks where its buffers live.
 *
 * Element widths: a served tensor is patched and diffed as an array of
 * W-bit elements. BF16 is W16, FP8 E4M3 (and NVFP4 block scales) W8, packed
 * NVFP4 values W4 (element 2i is the low nibble of byte i, as in the view),
 * F32 scales W32. Element index p of a W4 tensor is nibble p. */
#ifndef STITCH_GPU_H
#define STITCH_GPU_H

#include "stitch/error.h"
#include "stitch/version.h"

#include <stddef.h>
#include <stdint.h>

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

typedef enum stitch_gpu_width {
  STITCH_GPU_W4 = 4,
  STITCH_GPU_W8 = 8,
  STITCH_GPU_W16 = 16,
  STITCH_GPU_W32 = 32,
} stitch_gpu_width;

/* Bytes per value in a list: 1 for W4 (the low nibble) and W8, 2, 4; 0 for
 * a width that is none of these. */
size_t stitch_gpu_value_bytes(stitch_gpu_width w);

/* 1 when the stitch_gpu_* entry points run on a CUDA device (built with
 * CUDA, and cudaGetDeviceCount succeeds with a count > 0), else 0. Never
 * fails: no driver or no device simply means the CPU path. */
int stitch_gpu_available(void);

/* ---- Decoded sparse deltas ------------------------------------------- */

/* N changes to a tensor of W-bit elements, as arrays of the same kind of
 * memory (host or device). pos is strictly ascending. old_v and new_v hold
 * n values of stitch_gpu_value_bytes(width) bytes each, little-endian; a
 * NULL old_v applies without checking the base. */
typedef struct stitch_gpu_list {
  stitch_gpu_width width;
  uint64_t n;
  uint64_t *pos;
  uint8_t *old_v;
  uint8_t *new_v;
} stitch_gpu_list;

/* Host lists built here own their arrays; free them with this. NULL and a
 * zeroed list are fine. Lists the caller put on the device are the
 * caller's. */
void stitch_gpu_list_free(stitch_gpu_list *l);

/* The changes that turn OLD into NEW_ (NBYTES each, host), at width W, into
 * a fresh host list *out (allocated exactly, after counting). */
int stitch_gpu_list_diff(stitch_gpu_width w, const uint8_t *old,
                         const uint8_t *new_, uint64_t nbytes,
                         stitch_gpu_list *out, stitch_diag *d);

/* The changes that complete patch P makes to manifest tensor TENSOR: each of
 * its changed blocks is decoded into a copy of BASE (the tensor's NBYTES
 * base bytes, host, not modified) with stitch_patch_decode_block, and
 * diffed at width W. Positions count from the start of the tensor. *out is
 * a fresh host list; on error it is empty. */
int stitch_gpu_list_from_patch(const stitch_patch *p, uint64_t tensor,
                               stitch_gpu_width w, const uint8_t *base,
                               uint64_t nbytes, stitch_gpu_list *out,
                               stitch_diag *d);

/* Applies L to DATA (NBYTES, a whole number of elements) in place. Every
 * position must lie inside DATA and follow the previous one (else
 * STITCH_EINVAL), and with old_v every element must hold its old value
 * (else STITCH_EBASE). Everything is checked before anything is written,
 * so on any error DATA is unchanged. The message names the first bad
 * entry. */
int stitch_gpu_apply(const stitch_gpu_list *l, uint8_t *data, uint64_t nbytes,
                     stitch_diag *d);
int stitch_gpu_ref_apply(const stitch_gpu_list *l, uint8_t *data,
                         uint64_t nbytes, stitch_diag *d);

/* Applies N lists at once, LISTS[k] to DATA[k] (NBYTES[k] bytes), all or
 * nothing: each list is checked as stitch_gpu_apply checks one, and on any
 * error every DATA[k] is unchanged. The message names the list and its
 * first bad entry. The DATA[k] holding entries must not overlap (else
 * STITCH_EINVAL, nothing written). On the device this is one launch per
 * pass over every list and two or three synchronisations in all, where N
 * calls of stitch_gpu_apply cost 2N: an engine's commit over hundreds of
 * tensors. LISTS, DATA and NBYTES are host arrays; what they point to is
 * device memory when stitch_gpu_available(), as for stitch_gpu_apply. */
int stitch_gpu_apply_batch(const stitch_gpu_list *lists, uint8_t *const *data,
                           const uint64_t *nbytes, size_t n, stitch_diag *d);
int stitch_gpu_ref_apply_batch(const stitch_gpu_list *lists,
                               uint8_t *const *data, const uint64_t *nbytes,
                               size_t n, stitch_diag *d);

/* ---- Building the served view and finding what changed ---------------- */

/* Positions (ascending element indices at width W) where PREV and CUR
 * (NBYTES each) differ: POS receives *count of them and must have room for
 * every element of the tensor (8 * NBYTES / W). */
int stitch_gpu_diff(stitch_gpu_width w, const uint8_t *prev,
                    const uint8_t *cur, uint64_t nbytes, uint64_t *pos,
                    uint64_t *count, stitch_diag *d);
int stitch_gpu_ref_diff(stitch_gpu_width w, const uint8_t *prev,
                        const uint8_t *cur, uint64_t nbytes, uint64_t *pos,
                        uint64_t *count, stitch_diag *d);

/* Quantizers, byte for byte as stitch_view_build (docs/views.md). MASTER
 * holds N F32 values, little-endian (4-byte aligned on the device). */

/* BF16: OUT gets 2 * N bytes. */
int stitch_gpu_quant_bf16(const uint8_t *master, uint64_t n, uint8_t *out,
                          stitch_diag *d);
int stitch_gpu_ref_quant_bf16(const uint8_t *master, uint64_t n,
                              uint8_t *out, stitch_diag *d);

/* FP8 E4M3 with F32 scales over blocks of BLOCK elements of the flattened
 * tensor (0: one scale). Q gets N bytes, SCALES one F32 per block
 * (ceil(N / BLOCK), or 1). PREV_SCALES (the previous view's scales, same
 * count) may be NULL for fresh scales. A non-finite master value:
 * STITCH_EINVAL. */
int stitch_gpu_quant_fp8(const uint8_t *master, uint64_t n, uint32_t block,
                         const uint8_t *prev_scales, uint8_t *q,
                         uint8_t *scales, stitch_diag *d);
int stitch_gpu_ref_quant_fp8(const uint8_t *master, uint64_t n,
                             uint32_t block, const uint8_t *prev_scales,
                             uint8_t *q, uint8_t *scales, stitch_diag *d);

/* NVFP4 over N elements (a multiple of 16; blocks of 16 never straddle a
 * row when the last dim is a multiple of 16, so the flat layout is the
 * view's). PACKED gets N / 2 bytes, SB N / 16 E4M3 block scales, S2 one F32
 * tensor scale. PREV_SB and PREV_S2 are both the previous view's or both
 * NULL. A non-finite master value: STITCH_EINVAL. */
int stitch_gpu_quant_nvfp4(const uint8_t *master, uint64_t n,
                           const uint8_t *prev_sb, const uint8_t *prev_s2,
                           uint8_t *packed, uint8_t *sb, uint8_t *s2,
                           stitch_diag *d);
int stitch_gpu_ref_quant_nvfp4(const uint8_t *master, uint64_t n,
                               const uint8_t *prev_sb, const uint8_t *prev_s2,
                               uint8_t *packed, uint8_t *sb, uint8_t *s2,
                               stitch_diag *d);

/* ---- The after-apply checksum (proto/gpu-digest.md) ------------------- */

#define STITCH_GPU_LEAF (64u << 10)

/* XXH64 leaf tree over DATA's NBYTES; *out (host) gets the root. Not a
 * security check: chunks are BLAKE2b-verified before apply. */
int stitch_gpu_checksum(const uint8_t *data, uint64_t nbytes, uint64_t *out,
                        stitch_diag *d);
int stitch_gpu_ref_checksum(const uint8_t *data, uint64_t nbytes,
                            uint64_t *out, stitch_diag *d);

/* ---- Device memory, for callers and tests written in C ---------------- */

/* All fail with STITCH_ENOTFOUND when stitch_gpu_available() is 0, and
 * with STITCH_EIO (naming the CUDA error) when CUDA does. malloc of 0
 * bytes gives a valid pointer. Copies and memset complete before they
 * return. */
int stitch_gpu_malloc(void **p, uint64_t nbytes, stitch_diag *d);
void stitch_gpu_free(void *p); /* NULL is a no-op */
int stitch_gpu_upload(void *dev, const void *host, uint64_t nbytes,
                      stitch_diag *d);
int stitch_gpu_download(void *host, const void *dev, uint64_t nbytes,
                        stitch_diag *d);
int stitch_gpu_copy(void *dev_dst, const void *dev_src, uint64_t nbytes,
                    stitch_diag *d);
int stitch_gpu_memset(void *dev, int byte, uint64_t nbytes, stitch_diag *d);
/* The device's name ("NVIDIA H200") into BUF, or STITCH_ENOTFOUND. */
int stitch_gpu_device_name(char *buf, size_t len, stitch_diag *d);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
