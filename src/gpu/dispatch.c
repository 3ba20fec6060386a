/* dispatch.c: the run-time choice between the CUDA kernels and their C
 * references (zstd's HUF_DGEN pattern: both always agree, the fast one is
 * picked when it can run).
 *
 * The GPU path runs only when the library was built with CUDA and
 * cudaGetDeviceCount succeeds with a count > 0. No driver, no device, or a
 * build with STITCH_CUDA=OFF all mean the CPU path, silently: being
 * without a GPU is a normal configuration, not an error. The answer is not
 * cached (no global state); after the first call CUDA answers it in
 * microseconds. */
#include "gpu/gpu_internal.h"

#include "common/diag.h"

#include <stdio.h>

int stitch_gpu_available(void) {
#ifdef STITCH_HAVE_CUDA
  return gpu_cu_device_count() > 0;
#else
  return 0;
#endif
}

#ifdef STITCH_HAVE_CUDA
#define ON_GPU(call)                                                          \
  do {                                                                        \
    if (stitch_gpu_available())                                               \
      return call;                                                            \
  } while (0)
#else
#define ON_GPU(call)                                                          \
  do {                                                                        \
  } while (0)
#endif

int stitch_gpu_apply(const stitch_gpu_list *l, uint8_t *data, uint64_t nbytes,
                     stitch_diag *d) {
  ON_GPU(gpu_cu_apply(l, data, nbytes, d));
  return stitch_gpu_ref_apply(l, data, nbytes, d);
}

int stitch_gpu_apply_batch(const stitch_gpu_list *lists, uint8_t *const *data,
                           const uint64_t *nbytes, size_t n, stitch_diag *d) {
  CHECK_RC(gpu_batch_args(lists, data, nbytes, n, d));
  ON_GPU(gpu_cu_apply_batch(lists, data, nbytes, n, d));
  return stitch_gpu_ref_apply_batch(lists, data, nbytes, n, d);
}

int stitch_gpu_diff(stitch_gpu_width w, const uint8_t *prev,
                    const uint8_t *cur, uint64_t nbytes, uint64_t *pos,
                    uint64_t *count, stitch_diag *d) {
  ON_GPU(gpu_cu_diff(w, prev, cur, nbytes, pos, count, d));
  return stitch_gpu_ref_diff(w, prev, cur, nbytes, pos, count, d);
}

int stitch_gpu_quant_bf16(const uint8_t *master, uint64_t n, uint8_t *out,
                          stitch_diag *d) {
  ON_GPU(gpu_cu_quant_bf16(master, n, out, d));
  return stitch_gpu_ref_quant_bf16(master, n, out, d);
}

int stitch_gpu_quant_fp8(const uint8_t *master, uint64_t n, uint32_t block,
                         const uint8_t *prev_scales, uint8_t *q,
                         uint8_t *scales, stitch_diag *d) {
  ON_GPU(gpu_cu_quant_fp8(master, n, block, prev_scales, q, scales, d));
  return stitch_gpu_ref_quant_fp8(master, n, block, prev_scales, q, scales,
                                  d);
}

int stitch_gpu_quant_nvfp4(const uint8_t *master, uint64_t n,
                           const uint8_t *prev_sb, const uint8_t *prev_s2,
                           uint8_t *packed, uint8_t *sb, uint8_t *s2,
                           stitch_diag *d) {
  RETURN_IF((prev_sb == NULL) != (prev_s2 == NULL), d, STITCH_EINVAL,
            "quantize: nvfp4 needs both previous scale tensors or neither");
  ON_GPU(gpu_cu_quant_nvfp4(master, n, prev_sb, prev_s2, packed, sb, s2, d));
  return stitch_gpu_ref_quant_nvfp4(master, n, prev_sb, prev_s2, packed, sb,
                                    s2, d);
}

int stitch_gpu_checksum(const uint8_t *data, uint64_t nbytes, uint64_t *out,
                        stitch_diag *d) {
  ON_GPU(gpu_cu_checksum(data, nbytes, out, d));
  return stitch_gpu_ref_checksum(data, nbytes, out, d);
}

/* ---- Device memory ------------------------------------------------------ */

#ifdef STITCH_HAVE_CUDA
#define NEED_GPU(d)                                                           \
  RETURN_IF(!stitch_gpu_available(), d, STITCH_ENOTFOUND,                     \
            "gpu: no CUDA device is available")
#else
#define NEED_GPU(d)                                                           \
  return stitch_diag_set(d, STITCH_ENOTFOUND,                                 \
                         "gpu: libstitch was built without CUDA")
#endif

int stitch_gpu_malloc(void **p, uint64_t nbytes, stitch_diag *d) {
  *p = NULL;
  NEED_GPU(d);
#ifdef STITCH_HAVE_CUDA
  return gpu_cu_malloc(p, nbytes, d);
#endif
}

void stitch_gpu_free(void *p) {
#ifdef STITCH_HAVE_CUDA
  if (p != NULL)
    gpu_cu_free(p);
#else
  (void)p;
#endif
}

#ifdef STITCH_HAVE_CUDA
#define COPY(dst, src, n, kind, d)                                            \
  do {                                                                        \
    NEED_GPU(d);                                                              \
    return gpu_cu_memcpy(dst, src, n, kind, d);                               \
  } while (0)
#else
#define COPY(dst, src, n, kind, d) NEED_GPU(d)
#endif

int stitch_gpu_upload(void *dev, const void *host, uint64_t nbytes,
                      stitch_diag *d) {
  COPY(dev, host, nbytes, 0, d);
}

int stitch_gpu_download(void *host, const void *dev, uint64_t nbytes,
                        stitch_diag *d) {
  COPY(host, dev, nbytes, 1, d);
}

int stitch_gpu_copy(void *dev_dst, const void *dev_src, uint64_t nbytes,
                    stitch_diag *d) {
  COPY(dev_dst, dev_src, nbytes, 2, d);
}

int stitch_gpu_memset(void *dev, int byte, uint64_t nbytes, stitch_diag *d) {
  NEED_GPU(d);
#ifdef STITCH_HAVE_CUDA
  return gpu_cu_memset(dev, byte, nbytes, d);
#endif
}

int stitch_gpu_device_name(char *buf, size_t len, stitch_diag *d) {
  if (len > 0)
    buf[0] = 0;
  NEED_GPU(d);
#ifdef STITCH_HAVE_CUDA
  return gpu_cu_device_name(buf, len, d);
#endif
}
