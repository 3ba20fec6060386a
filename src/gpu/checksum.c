/* checksum.c: the C reference of the after-apply checksum
 * (proto/gpu-digest.md; kernels/checksum.cu computes the same bytes).
 *
 * XXH64 from libxxhash over 64 KiB leaves, then XXH64 over the leaf hashes
 * and the length. It catches a botched apply (a wrong kernel, a torn copy,
 * the wrong buffer) at memory speed on either side; it is not a defence
 * against anyone, which is the BLAKE2b chunk names' and the signed
 * manifest's job. */
#include "gpu/gpu_internal.h"

#include "common/diag.h"

#include <stdlib.h>
#include <xxhash.h>

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

int stitch_gpu_ref_checksum(const uint8_t *data, uint64_t nbytes,
                            uint64_t *out, stitch_diag *d) {
  uint64_t leaves = nbytes / STITCH_GPU_LEAF + (nbytes % STITCH_GPU_LEAF != 0);
  /* 8 bytes per 64 KiB leaf: 1/8192 of the tensor. */
  RETURN_IF(leaves >= SIZE_MAX / 8, d, STITCH_ELIMIT,
            "checksum: tensor of %llu bytes is too large",
            (unsigned long long)nbytes);
  uint8_t *buf = malloc((size_t)(leaves + 1) * 8);
  RETURN_IF(buf == NULL, d, STITCH_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < leaves; i++) {
    uint64_t off = i * STITCH_GPU_LEAF;
    uint64_t len = nbytes - off < STITCH_GPU_LEAF ? nbytes - off
                                                  : STITCH_GPU_LEAF;
    put_u64(buf + 8 * i, XXH64(data + off, (size_t)len, 0));
  }
  put_u64(buf + 8 * leaves, nbytes);
  *out = XXH64(buf, (size_t)(leaves + 1) * 8, 0);
  free(buf);
  return 0;
}
