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

/* Reads the N failure words back (after every launch before it). */
static int read_bad(const unsigned long long *bad, unsigned long long *host,
                    size_t n, stitch_diag *d) {
  CU_RET(cudaMemcpyAsync(host, bad, n * sizeof(*host), cudaMemcpyDeviceToHost,
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
    if ((rc = read_bad(bad, host_bad, 2, d)) != 0 ||
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
  if ((rc = read_bad(bad, host_bad, 2, d)) != 0 ||
      (rc = gpu_apply_error(l, host_bad[0], UINT64_MAX, d)) != 0)
    goto out;
  if (l->old_v != NULL)
    CU_GO(cudaMallocAsync((void **)&wrote, (l->n + 31) / 32 * 4, 0));
  k_apply_fused<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->new_v,
                                                 l->n, data, w, wrote, bad);
  CU_GO(cudaGetLastError());
  if ((rc = read_bad(bad, host_bad, 2, d)) != 0)
    goto out;
  if (host_bad[1] != UINT64_MAX) {
    k_apply_undo<<<cu_blocks(l->n), CU_THREADS>>>(l->pos, l->old_v, l->n,
                                                  wrote, data, w);
    CU_GO(cudaGetLastError());
    CU_GO(cudaStreamSynchronize(0));
    rc = gpu_apply_error(l, UINT64_MAX, host_bad[1], d);
  }
out:
  rc = cu_free_out(wrote, rc, d);
  rc = cu_free_out(bad, rc, d);
  return rc;
}

/* ---- Batches (stitch_gpu_apply_batch) -----------------------------------
 *
 * Every list of the batch lies in one index space, each starting at a
 * multiple of 32 (gm_seg), and each pass is one launch over all of them,
 * a thread finding its list by binary search over the starts (the same
 * list for a whole warp, so the search's loads are shared). The passes
 * are those of one list: positions (and W4 old values), then the fused
 * pass over the lists with old values at W >= 8, undone everywhere when
 * any entry fails, then the plain writes of every other list, which can
 * no longer fail. Failure words are two per list. */

__global__ void k_batch_check(const gm_seg *s, uint32_t ns, uint64_t total,
                              unsigned long long *bad) {
  CU_FOR(g, total) {
    uint32_t k = gm_seg_find(s, ns, g);
    const gm_seg *q = &s[k];
    uint64_t i = g - q->start;
    if (i < q->n) {
      int r = gm_apply_check(q->pos, q->w == 4 ? q->oldv : NULL, i, q->data,
                             q->ne, q->w);
      if (r != 0)
        atomicMin(&bad[2 * (uint64_t)k + r - 1], (unsigned long long)i);
    }
  }
}

/* CHECKED 1: the fused pass over the checked lists, each entry's bit set
 * in the undo mask when it wrote. CHECKED 0: the write pass over the
 * others. A warp's lanes share a list, so the skip and the ballot are
 * warp-uniform (as in k_apply_fused). */
__global__ void k_batch_write(const gm_seg *s, uint32_t ns, uint64_t total,
                              uint32_t checked, uint32_t *wrote,
                              unsigned long long *bad) {
  unsigned lane = threadIdx.x & 31;
  for (uint64_t g = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
       g - lane < total; g += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t k = gm_seg_find(s, ns, g - lane);
    const gm_seg *q = &s[k];
    if (q->checked != checked)
      continue;
    uint64_t i = g - q->start;
    if (!checked) {
      if (i < q->n)
        gm_apply_write(q->pos, q->newv, q->n, i, q->data, q->w);
      continue;
    }
    int ok = 1;
    if (i < q->n &&
        !(ok = gm_apply_fused(q->pos, q->oldv, q->newv, i, q->data, q->w)))
      atomicMin(&bad[2 * (uint64_t)k + 1], (unsigned long long)i);
    uint32_t m = __ballot_sync(0xFFFFFFFFu, ok && i < q->n);
    if (lane == 0)
      wrote[q->mask + (i >> 5)] = m;
  }
}

__global__ void k_batch_undo(const gm_seg *s, uint32_t ns, uint64_t total,
                             const uint32_t *wrote) {
  CU_FOR(g, total) {
    const gm_seg *q = &s[gm_seg_find(s, ns, g)];
    uint64_t i = g - q->start;
    if (q->checked && i < q->n)
      gm_apply_undo(q->pos, q->oldv, wrote + q->mask, i, q->data, q->w);
  }
}

/* The first failure in list order, as the reference reports it. */
static int batch_error(const stitch_gpu_list *lists, const size_t *idx,
                       uint32_t ns, const unsigned long long *hb,
                       stitch_diag *d) {
  for (uint32_t j = 0; j < ns; j++)
    if (hb[2 * j] != UINT64_MAX || hb[2 * j + 1] != UINT64_MAX)
      return gpu_batch_error(lists, idx[j], hb[2 * j], hb[2 * j + 1], d);
  return 0;
}

/* The arguments are gpu_batch_args-checked (dispatch.c). */
extern "C" int gpu_cu_apply_batch(const stitch_gpu_list *lists,
                                  uint8_t *const *data, const uint64_t *nbytes,
                                  size_t n, stitch_diag *d) {
  gm_seg *hs = (gm_seg *)malloc((n ? n : 1) * sizeof(*hs)), *ds = NULL;
  size_t *idx = (size_t *)malloc((n ? n : 1) * sizeof(*idx));
  unsigned long long *bad = NULL, *hb = NULL;
  uint32_t *wrote = NULL, ns = 0, any_checked = 0, any_plain = 0;
  uint64_t total = 0, words = 0;
  int rc = 0;
  if (hs == NULL || idx == NULL) {
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = gpu_batch_segs(lists, data, nbytes, n, hs, idx, &ns, &total,
                           &words, &any_checked, &any_plain, d)) != 0)
    goto out;
  if (ns == 0)
    goto out;
  hb = (unsigned long long *)malloc(2 * (size_t)ns * sizeof(*hb));
  if (hb == NULL) {
    rc = stitch_diag_set(d, STITCH_ENOMEM, "out of memory");
    goto out;
  }
  CU_GO(cudaMallocAsync((void **)&ds, ns * sizeof(*ds), 0));
  CU_GO(cudaMemcpyAsync(ds, hs, ns * sizeof(*ds), cudaMemcpyHostToDevice, 0));
  CU_GO(cudaMallocAsync((void **)&bad, 2 * (size_t)ns * sizeof(*bad), 0));
  CU_GO(cudaMemsetAsync(bad, 0xFF, 2 * (size_t)ns * sizeof(*bad), 0));
  k_batch_check<<<cu_blocks(total), CU_THREADS>>>(ds, ns, total, bad);
  CU_GO(cudaGetLastError());
  if ((rc = read_bad(bad, hb, 2 * (size_t)ns, d)) != 0 ||
      (rc = batch_error(lists, idx, ns, hb, d)) != 0)
    goto out;
  if (any_checked) {
    CU_GO(cudaMallocAsync((void **)&wrote, words * 4, 0));
    k_batch_write<<<cu_blocks(total), CU_THREADS>>>(ds, ns, total, 1, wrote,
                                                    bad);
    CU_GO(cudaGetLastError());
    if ((rc = read_bad(bad, hb, 2 * (size_t)ns, d)) != 0)
      goto out;
    if ((rc = batch_error(lists, idx, ns, hb, d)) != 0) {
      k_batch_undo<<<cu_blocks(total), CU_THREADS>>>(ds, ns, total, wrote);
      CU_GO(cudaGetLastError());
      CU_GO(cudaStreamSynchronize(0));
      goto out;
    }
  }
  if (any_plain) {
    k_batch_write<<<cu_blocks(total), CU_THREADS>>>(ds, ns, total, 0, NULL,
                                                    bad);
    CU_GO(cudaGetLastError());
    CU_GO(cudaStreamSynchronize(0));
  }
out:
  rc = cu_free_out(wrote, rc, d);
  rc = cu_free_out(bad, rc, d);
  rc = cu_free_out(ds, rc, d);
  free(hb);
  free(idx);
  free(hs);
  return rc;
}
