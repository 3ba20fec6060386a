/* store_patch.h: one object's chunks, mapped from a store and added to a
 * patch (each checked against the manifest), for the appliers that read a
 * store: stitch_store_apply (a weights file) and stitch_prepared_new (an
 * engine's memory); and the proofs that let a chunk the store has checked
 * skip a second hash (proofs.h). */
#ifndef STITCH_VERSION_STORE_PATCH_H
#define STITCH_VERSION_STORE_PATCH_H

#include "stitch/store.h"

typedef struct store_patch {
  stitch_patch *p;
  const uint8_t **bufs; /* the mapped chunks, which the patch points into */
  size_t *lens;
  size_t n;
} store_patch;

/* Maps every chunk of object OBJ of VR from S and adds it to a new patch.
 * A chunk that does not verify fails it (STITCH_ECHECKSUM, STITCH_EFORMAT
 * or STITCH_ETRUNCATED, naming the version and chunk) and is left in the
 * store. On error *sp is cleared. PROGRESS may be NULL. */
int store_patch_open(const stitch_store *s, const stitch_vref *vr, uint32_t obj,
                     void (*progress)(void *, const char *, uint64_t, uint64_t),
                     void *progress_arg, store_patch *sp, stitch_diag *d);
/* Frees the patch and releases the chunks; a cleared one is fine. */
void store_patch_close(store_patch *sp);

/* stitch_store_put_chunk for a caller that named the chunk by hashing
 * these very bytes itself (the publisher): the same put, one hash fewer. */
int store_put_named_chunk(stitch_store *s, const stitch_digest *hash,
                          const uint8_t *buf, size_t len, stitch_diag *d);
/* Whether S has checked the chunk HASH names against its bytes since it
 * was opened (a put), and not dropped it since. */
int store_chunk_proven(const stitch_store *s, const stitch_digest *hash);
/* stitch_patch_add for a chunk whose store proved it: every check but the
 * hash (its size, its blocks, its place). */
int patch_add_proven(stitch_patch *p, size_t index, const uint8_t *buf,
                     size_t len, stitch_diag *d);

#endif
