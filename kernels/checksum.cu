/* checksum.cu: the XXH64 leaf tree of proto/gpu-digest.md (C reference:
 * stitch_gpu_ref_checksum in src/gpu/checksum.c, which uses libxxhash).
 *
 * XXH64 is sequential along its input but keeps four independent
 * accumulators, lane j taking bytes 8j..8j+7 of every 32-byte stripe. One
 * CUDA block hashes one 64 KiB leaf: its threads stage the leaf through
 * shared memory in coalesced 8 KiB tiles, and four threads, one per
 * accumulator, consume each tile from there in registers. Thread 0 then
 * merges, hashes the tail (< 32 bytes) and finishes. The root kernel is the
 * same code in one block over the leaf hashes and the length. The XXH64
 * arithmetic is gpu_math.h's, which the tests run on the CPU against
 * libxxhash. XXH64 is a public, non-cryptographic hash. */
#include "cu_common.cuh"

#define TILE 8192u

/* XXH64(P[0..LEN), seed 0), computed by the whole block; the result is
 * valid in thread 0. */
__device__ uint64_t block_xxh64(const uint8_t *p, uint64_t len) {
  __shared__ uint64_t tile[TILE / 8];
  __shared__ uint64_t acc[4];
  unsigned t = threadIdx.x;
  uint64_t v = gm_xxh64_init(t & 3);
  uint64_t body = len & ~(uint64_t)31;
  int aligned = ((uintptr_t)p & 7) == 0;
  for (uint64_t off = 0; off < body; off += TILE) {
    unsigned words = (unsigned)((body - off < TILE ? body - off : TILE) / 8);
    for (unsigned k = t; k < words; k += blockDim.x)
      tile[k] = aligned ? ((const uint64_t *)(p + off))[k]
                        : gm_ld64(p + off + 8 * (uint64_t)k);
    __syncthreads();
    if (t < 4)
      for (unsigned s = 0; s < words / 4; s++)
        v = gm_xxh64_round(v, tile[4 * s + t]);
    __syncthreads();
  }
  if (t < 4)
    acc[t] = v;
  __syncthreads();
  return t == 0 ? gm_xxh64_finish(acc, p + body, len) : 0;
}

/* Leaf i of DATA into OUT[i]; block 0 also stores the length after the
 * last leaf hash, which is the root's input. */
__global__ void k_leaves(const uint8_t *data, uint64_t nbytes, uint64_t *out,
                         uint64_t leaves) {
  uint64_t i = blockIdx.x;
  uint64_t off = i * STITCH_GPU_LEAF;
  uint64_t len = nbytes - off < STITCH_GPU_LEAF ? nbytes - off
                                                : STITCH_GPU_LEAF;
  uint64_t h = block_xxh64(data + off, len);
  if (threadIdx.x == 0)
    out[i] = h; /* little-endian device: the spec's byte order */
  if (i == 0 && threadIdx.x == 0)
    out[leaves] = nbytes;
}

__global__ void k_root(const uint64_t *in, uint64_t words, uint64_t *out) {
  uint64_t h = block_xxh64((const uint8_t *)in, 8 * words);
  if (threadIdx.x == 0)
    *out = h;
}

extern "C" int gpu_cu_checksum(const uint8_t *data, uint64_t nbytes,
                               uint64_t *out, stitch_diag *d) {
  uint64_t leaves = nbytes / STITCH_GPU_LEAF + (nbytes % STITCH_GPU_LEAF != 0);
  RETURN_IF(leaves >= (1ull << 31), d, STITCH_ELIMIT,
            "checksum: tensor of %llu bytes is too large",
            (unsigned long long)nbytes);
  uint64_t *buf = NULL, root = 0;
  int rc = 0;
  CU_GO(cudaMallocAsync((void **)&buf, (leaves + 2) * 8, 0));
  if (leaves > 0) {
    k_leaves<<<(unsigned)leaves, CU_THREADS>>>(data, nbytes, buf, leaves);
    CU_GO(cudaGetLastError());
  } else {
    CU_GO(cudaMemsetAsync(buf, 0, 8, 0)); /* u64(0): the length alone */
  }
  k_root<<<1, CU_THREADS>>>(buf, leaves + 1, buf + leaves + 1);
  CU_GO(cudaGetLastError());
  CU_GO(cudaMemcpyAsync(&root, buf + leaves + 1, 8, cudaMemcpyDeviceToHost,
                        0));
  CU_GO(cudaStreamSynchronize(0));
  *out = root;
out:
  if (buf != NULL)
    (void)cudaFreeAsync(buf, 0);
  return rc;
}
