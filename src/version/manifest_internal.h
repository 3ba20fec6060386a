/* manifest_internal.h: shared by manifest.c (checks, signing, free) and
 * manifest_parse.c (stitch_manifest_open). proto/manifest.md is the
 * format. */
#ifndef STITCH_VERSION_MANIFEST_INTERNAL_H
#define STITCH_VERSION_MANIFEST_INTERNAL_H

#include "stitch/version.h"

#include <stdint.h>

/* The signature covers this, its terminating 0 byte, then the body. */
#define MANIFEST_SIGN_DOMAIN "stitch-manifest-v1"
#define MANIFEST_SIGN_DOMAIN_LEN sizeof(MANIFEST_SIGN_DOMAIN) /* with the 0 */
/* Containers in a body nest at most this deep: body map > "objects" >
 * object > "chunks" > chunk. */
#define MANIFEST_BODY_DEPTH 5
#define MANIFEST_N_KEYS 9

/* The body's keys, in the order they are written. */
extern const char *const manifest_keys[MANIFEST_N_KEYS];

/* Sets *nbytes to numel(shape) x the dtype's size; -1 when the dtype is
 * unknown or the product passes 2^64 - 1. */
int manifest_nbytes(stitch_dtype dtype, int ndim, const uint64_t *shape,
                    uint64_t *nbytes);

/* Every rule of proto/manifest.md that concerns the fields rather than
 * their encoding, for the signer (BAD = STITCH_EINVAL: the caller's
 * struct is wrong) and the reader (BAD = STITCH_EFORMAT). Counts above
 * the limits give STITCH_ELIMIT either way. obj_bytes, if not NULL,
 * receives each object's sum of chunk sizes ([n_objects]). Reads only the
 * fields of M that are on the wire, and each tensor's nbytes, which must
 * equal dtype size x numel. */
int manifest_validate(const stitch_manifest *m, int bad, uint64_t *obj_bytes,
                      stitch_diag *d);

#endif
