/* apply.cu: apply a decoded sparse delta in place (C reference:
 * stitch_gpu_ref_apply in src/gpu/list.c).
 *
 * One thread per list entry, two passes. The first only reads: it checks
 * that positions are inside the tensor and ascending, and that each element
 * holds its old value, recording the lowest failing entry of each kind with
 * atomicMin. The host reads those two words and launches the write pass
 * only when both are clean, so a wrong base leaves the tensor untouched.
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

__global__ void k_apply_write(const uint64_t *pos, const uint8_t *newv,
                              uint64_t n, uint8_t *data, unsigned w) {
  CU_FOR(i, n) { gm_apply_write(pos, newv, n, i, data, w); }
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
  int rc = 0;
  CU_GO(cudaMallocAsync((void **)&bad, sizeof(host_bad), 0));
  CU_GO(cudaMemsetAsync(bad, 0xFF, sizeof(host_bad), 0));
  k_apply_check<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->n, data,
                                                 ne, w, bad);
  CU_GO(cudaGetLastError());
  CU_GO(cudaMemcpyAsync(host_bad, bad, sizeof(host_bad),
                        cudaMemcpyDeviceToHost, 0));
  CU_GO(cudaStreamSynchronize(0));
  rc = gpu_apply_error(l, host_bad[0], host_bad[1], d);
  if (rc != 0)
    goto out;
  k_apply_write<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->new_v, l->n, data,
                                                 w);
  CU_GO(cudaGetLastError());
  CU_GO(cudaStreamSynchronize(0));
out:
  if (bad != NULL) {
    cudaError_t e = cudaFreeAsync(bad, 0);
    if (rc == 0 && e != cudaSuccess)
      rc = cu_fail(e, "cudaFreeAsync", d);
  }
  return rc;
}
