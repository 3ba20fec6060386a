/* diff.cu: the changed positions between two views of a tensor, by stream
 * compaction (C reference: stitch_gpu_ref_diff in src/gpu/quant.c).
 *
 * cub::DeviceSelect::If over the element indices 0..n-1 keeps those where
 * the two views differ; CUB's single-pass scan keeps them in order, so the
 * output is ascending like the reference's. Each element is read once from
 * each view and each selected index written once, which is the least
 * traffic a diff can have. Aligned views are read with whole-element loads;
 * others (a tensor at an odd offset in a safetensors mapping) bytewise. */
#include "cu_common.cuh"

#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

template <typename T> struct differs_typed {
  const T *a, *b;
  __device__ bool operator()(uint64_t i) const { return a[i] != b[i]; }
};

struct differs_nibble {
  const uint8_t *a, *b;
  __device__ bool operator()(uint64_t i) const {
    return ((a[i >> 1] ^ b[i >> 1]) >> ((i & 1) * 4) & 15u) != 0;
  }
};

struct differs_bytes {
  const uint8_t *a, *b;
  unsigned w;
  __device__ bool operator()(uint64_t i) const {
    return gm_ld(a, i, w) != gm_ld(b, i, w);
  }
};

template <typename Op>
static int select_if(Op op, uint64_t n, uint64_t *pos, uint64_t *count,
                     stitch_diag *d) {
  thrust::counting_iterator<uint64_t> idx(0);
  void *tmp = NULL;
  size_t tmp_bytes = 0;
  unsigned long long *dev_count = NULL, host_count = 0;
  int rc = 0;
  CU_GO(cub::DeviceSelect::If(NULL, tmp_bytes, idx, pos, dev_count,
                              (int64_t)n, op, 0));
  CU_GO(cudaMallocAsync(&tmp, tmp_bytes ? tmp_bytes : 1, 0));
  CU_GO(cudaMallocAsync((void **)&dev_count, sizeof(*dev_count), 0));
  CU_GO(cub::DeviceSelect::If(tmp, tmp_bytes, idx, pos, dev_count,
                              (int64_t)n, op, 0));
  CU_GO(cudaMemcpyAsync(&host_count, dev_count, sizeof(host_count),
                        cudaMemcpyDeviceToHost, 0));
  CU_GO(cudaStreamSynchronize(0));
  *count = host_count;
out:
  if (tmp != NULL)
    (void)cudaFreeAsync(tmp, 0);
  if (dev_count != NULL)
    (void)cudaFreeAsync(dev_count, 0);
  return rc;
}

extern "C" int gpu_cu_diff(stitch_gpu_width w, const uint8_t *prev,
                           const uint8_t *cur, uint64_t nbytes, uint64_t *pos,
                           uint64_t *count, stitch_diag *d) {
  uint64_t n;
  CHECK_RC(gpu_elements(w, nbytes, &n, d));
  *count = 0;
  if (n == 0)
    return 0;
  unsigned eb = (unsigned)w / 8;
  int aligned = w != 4 && ((uintptr_t)prev % eb | (uintptr_t)cur % eb) == 0;
  if (w == STITCH_GPU_W4)
    return select_if(differs_nibble{prev, cur}, n, pos, count, d);
  if (!aligned)
    return select_if(differs_bytes{prev, cur, (unsigned)w}, n, pos, count, d);
  switch (w) {
  case STITCH_GPU_W8:
    return select_if(differs_typed<uint8_t>{prev, cur}, n, pos, count, d);
  case STITCH_GPU_W16:
    return select_if(differs_typed<uint16_t>{(const uint16_t *)prev,
                                             (const uint16_t *)cur},
                     n, pos, count, d);
  default:
    return select_if(differs_typed<uint32_t>{(const uint32_t *)prev,
                                             (const uint32_t *)cur},
                     n, pos, count, d);
  }
}
