/* cu_common.cuh: what every kernel file shares: the CUDA error checks and
 * launch geometry. Every CUDA call's return code is checked; a failure is
 * STITCH_EIO with the call and CUDA's name for the error, after the
 * wrapper has released what it allocated. All work runs on the legacy
 * default stream and every wrapper synchronizes before it returns, so the
 * results are in place when the C caller sees 0. */
#ifndef STITCH_KERNELS_CU_COMMON_CUH
#define STITCH_KERNELS_CU_COMMON_CUH

#include <cuda_runtime.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Library headers without their own extern "C" (the C headers they pull
 * in are already included above, so this block declares only ours). */
extern "C" {
#include "codec/view_impl.h"
#include "common/diag.h"
}
#include "gpu/gpu_internal.h"

static inline int cu_fail(cudaError_t e, const char *what, stitch_diag *d) {
  return stitch_diag_set(d, STITCH_EIO, "cuda: %.120s: %s (%.120s)", what,
                         cudaGetErrorName(e), cudaGetErrorString(e));
}

/* In a wrapper with `int rc` and an `out:` label that frees. */
#define CU_GO(call)                                                           \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      rc = cu_fail(e_, #call, d);                                             \
      goto out;                                                               \
    }                                                                         \
  } while (0)

#define CU_RET(call)                                                          \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess)                                                    \
      return cu_fail(e_, #call, d);                                           \
  } while (0)

/* In a wrapper's out: path: frees P (stream-ordered; NULL is fine) and
 * returns RC, or the free's failure when RC was 0. */
static inline int cu_free_out(void *p, int rc, stitch_diag *d) {
  if (p != NULL) {
    cudaError_t e = cudaFreeAsync(p, 0);
    if (rc == 0 && e != cudaSuccess)
      rc = cu_fail(e, "cudaFreeAsync", d);
  }
  return rc;
}

#define CU_THREADS 256

/* Blocks for a grid-stride loop over N items: enough to fill any current
 * GPU several times over, never more than the grid limit. */
static inline unsigned cu_blocks(uint64_t n) {
  uint64_t b = (n + CU_THREADS - 1) / CU_THREADS;
  if (b > (1u << 16))
    b = 1u << 16;
  return b ? (unsigned)b : 1u;
}

#define CU_FOR(i, n)                                                          \
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (uint64_t)gridDim.x * blockDim.x)

#endif
