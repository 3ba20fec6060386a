/* apply.cu: apply a decoded sparse delta in place (C reference:
 * stitch_gpu_ref_apply in src/gpu/list.c).
 *
 * One thread per list entry. For elements of 8 bits or more:
 *  1. the position pass reads only the list: every position inside the
 *     tensor and above the one before it (the lowest failing entry by
 *     atomicMin). On failure nothing is written.
 *  2. the fused pass: each entry checks its element's old value and, when
 *     it holds, writes the new one, setting its bit in a mask (one warp
 *     ballot per 32 entries). The element's sector is read once and
 *     written while it is still in cache, where a check pass and a write
 *     pass would each fetch it from memory.
 *  3. only when some entry failed its check: the undo pass writes back
 *     the old values of exactly the entries whose bit is set. Positions
 *     are unique after pass 1, so the tensor is as it was.
 * Packed NVFP4 (W4) keeps a check pass and a write pass: an entry's check
 * would race with its partner's write of the shared byte.
 *
 * Packed NVFP4 (W4): two entries may share a byte. The entry for the even
 * nibble writes the whole byte, taking the odd nibble from the next entry
 * when it is its partner; an odd entry whose partner is in the list does
 * nothing. Every byte thus has exactly one writer, with plain stores and
 * no read-modify-write races. */
#include "cu_common.cuh"

/* The per-entry bodies are gpu_math.h's, which the tests also run on the
 * CPU in shuffled order. */
__global__ void k_apply_check(const uint64_t *pos, const uint8_t *oldv,
                              uint64_t n, const uint8_t *data, uint64_t ne,
                              unsigned w, unsigned long long *bad) {
  CU_FOR(i, n) {
    int r = gm_apply_check(pos, oldv, i, data, ne, w);
    if (r != 0)
      atomicMin(&bad[r - 1], (unsigned long long)i);
  }
}

__global__ void k_apply_fused(const uint64_t *pos, const uint8_t *oldv,
                              const uint8_t *newv, uint64_t n, uint8_t *data,
                              unsigned w, uint32_t *wrote,
                              unsigned long long *bad) {
  /* A grid-stride loop that the 32 lanes of a warp run together (the
   * test is on the warp's first entry, a multiple of 32 since blockDim is
   * one of warps), so the full-warp ballot is well defined at the tail. */
  unsigned lane = threadIdx.x & 31;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
       i - lane < n; i += (uint64_t)gridDim.x * blockDim.x) {
    int ok = 1;
    if (i < n) {
      ok = gm_apply_fused(pos, oldv, newv, i, data, w);
      if (!ok)
        atomicMin(&bad[1], (unsigned long long)i);
    }
    uint32_t m = __ballot_sync(0xFFFFFFFFu, ok && i < n);
    if (wrote != NULL && lane == 0)
      wrote[i >> 5] = m;
  }
}

__global__ void k_apply_undo(const uint64_t *pos, const uint8_t *oldv,
                             uint64_t n, const uint32_t *wrote, uint8_t *data,
                             unsigned w) {
  CU_FOR(i, n) { gm_apply_undo(pos, oldv, wrote, i, data, w); }
}

__global__ void k_apply_write(const uint64_t *pos, const uint8_t *newv,
                              uint64_t n, uint8_t *data, unsigned w) {
  CU_FOR(i, n) { gm_apply_write(pos, newv, n, i, data, w); }
}

/* Reads the two failure words back (after every launch before it). */
static int read_bad(const unsigned long long *bad, unsigned long long *host,
                    stitch_diag *d) {
  CU_RET(cudaMemcpyAsync(host, bad, 2 * sizeof(*host), cudaMemcpyDeviceToHost,
                         0));
  CU_RET(cudaStreamSynchronize(0));
  return 0;
}

extern "C" int gpu_cu_apply(const stitch_gpu_list *l, uint8_t *data,
                            uint64_t nbytes, stitch_diag *d) {
  uint64_t ne;
  RETURN_IF(l == NULL || (l->n != 0 && (l->pos == NULL || l->new_v == NULL)),
            d, STITCH_EINVAL, "apply: missing list");
  CHECK_RC(gpu_elements(l->width, nbytes, &ne, d));
  if (l->n == 0)
    return 0;
  unsigned w = (unsigned)l->width;
  unsigned long long *bad = NULL, host_bad[2];
  uint32_t *wrote = NULL;
  int rc = 0;
  CU_GO(cudaMallocAsync((void **)&bad, sizeof(host_bad), 0));
  CU_GO(cudaMemsetAsync(bad, 0xFF, sizeof(host_bad), 0));
  if (w == 4) { /* check everything, then write */
    k_apply_check<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->n,
                                                   data, ne, w, bad);
    CU_GO(cudaGetLastError());
    if ((rc = read_bad(bad, host_bad, d)) != 0 ||
        (rc = gpu_apply_error(l, host_bad[0], host_bad[1], d)) != 0)
      goto out;
    k_apply_write<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->new_v, l->n,
                                                   data, w);
    CU_GO(cudaGetLastError());
    CU_GO(cudaStreamSynchronize(0));
    goto out;
  }
  k_apply_check<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, NULL, l->n, NULL, ne,
                                                 w, bad);
  CU_GO(cudaGetLastError());
  if ((rc = read_bad(bad, host_bad, d)) != 0 ||
      (rc = gpu_apply_error(l, host_bad[0], UINT64_MAX, d)) != 0)
    goto out;
  if (l->old_v != NULL)
    CU_GO(cudaMallocAsync((void **)&wrote, (l->n + 31) / 32 * 4, 0));
  k_apply_fused<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->new_v,
                                                 l->n, data, w, wrote, bad);
  CU_GO(cudaGetLastError());
  if ((rc = read_bad(bad, host_bad, d)) != 0)
    goto out;
  if (host_bad[1] != UINT64_MAX) {
    k_apply_undo<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->n,
                                                  wrote, data, w);
    CU_GO(cudaGetLastError());
    CU_GO(cudaStreamSynchronize(0));
    rc = gpu_apply_error(l, UINT64_MAX, host_bad[1], d);
  }
out:
  if (wrote != NULL) {
    cudaError_t e = cudaFreeAsync(wrote, 0);
    if (rc == 0 && e != cudaSuccess)
      rc = cu_fail(e, "cudaFreeAsync", d);
  }
  if (bad != NULL) {
    cudaError_t e = cudaFreeAsync(bad, 0);
    if (rc == 0 && e != cudaSuccess)
      rc = cu_fail(e, "cudaFreeAsync", d);
  }
  return rc;
}
