/* stitch/digest.h: tensor and view digests (proto/digest.md).
 *
 * A tensor digest is a BLAKE2b-256 over its dtype, shape and the BLAKE2b-256
 * hashes of its 1 MiB leaves, so CPU threads and GPU blocks can hash leaves in
 * parallel and agree byte for byte. A view digest names a whole set of
 * tensors: it hashes the (name, tensor digest) pairs sorted by name. */
#ifndef STITCH_DIGEST_H
#define STITCH_DIGEST_H

#include "stitch/safetensors.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

#define STITCH_DIGEST_BYTES 32
#define STITCH_DIGEST_LEAF (1u << 20)

typedef struct stitch_digest {
  uint8_t b[STITCH_DIGEST_BYTES];
} stitch_digest;

int stitch_tensor_digest(stitch_dtype dtype, int ndim, const uint64_t *shape,
                         const uint8_t *data, uint64_t nbytes,
                         stitch_digest *out);
/* Digests of n tensors at once, hashing leaves on up to `threads` threads
 * (0: one per online CPU); the bytes do not depend on the thread count. */
int stitch_tensor_digests(size_t n, const stitch_tensor *const *t,
                          unsigned threads, stitch_digest *out);
/* Changes to one tensor, as a sorted sparse list: element POS[k] (counted
 * in elements of WIDTH bytes) takes the WIDTH bytes at VAL + k * WIDTH. */
typedef struct stitch_sparse {
  uint64_t n;          /* changes; 0: none (POS and VAL unused) */
  uint32_t width;      /* 1, 2, 4 or 8, dividing the tensor's nbytes */
  const uint64_t *pos; /* N strictly ascending element positions */
  const uint8_t *val;  /* N * WIDTH bytes */
} stitch_sparse;

/* The digest T would have with SP laid over its bytes (stitch_tensor_digest
 * of a patched copy), computed without writing or copying T: a 1 MiB leaf
 * that a change falls in is patched in a leaf-sized buffer, any other is
 * hashed where it is. T->data is only read. A width that is not 1, 2, 4 or
 * 8 or does not divide T->nbytes, positions that do not ascend strictly or
 * that run past the tensor: STITCH_EINVAL, naming the tensor and change. */
int stitch_tensor_digest_patched(const stitch_tensor *t,
                                 const stitch_sparse *sp, stitch_digest *out,
                                 stitch_diag *d);
/* N tensors at once, SP[i] over T[i], leaves on up to THREADS threads (0:
 * one per online CPU), each with one leaf-sized buffer. */
int stitch_tensor_digests_patched(size_t n, const stitch_tensor *const *t,
                                  const stitch_sparse *sp, unsigned threads,
                                  stitch_digest *out, stitch_diag *d);
/* Combines per-tensor digests; names need not be sorted. */
int stitch_view_digest_from(size_t n, const char *const *names,
                            const stitch_digest *tensor_digests,
                            stitch_digest *out);
/* Digest of every tensor in st, on all CPUs. If per_tensor is not NULL it receives
 * stitch_st_count(st) digests in file order. */
int stitch_view_digest(const stitch_st *st, stitch_digest *out,
                       stitch_digest *per_tensor);
/* 64 hex digits and a NUL. */
void stitch_digest_hex(const stitch_digest *dg, char out[65]);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
