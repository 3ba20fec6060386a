/* proofs.h: the chunks a store handle has checked against their names.
 *
 * A chunk on a node's path is checked once: by the store's put, which
 * hashes the bytes it writes (or by the publisher, which named the chunk
 * by hashing those very bytes). The put notes the chunk here, and an
 * apply that maps the chunk back from the same handle adds it to its
 * patch on that proof instead of hashing it again (store_patch_open).
 * The set lives in memory only: after a restart each chunk is hashed once
 * more, since the disk may have changed under a stopped process.
 *
 * Thread-safe: stitchd puts chunks on its loop thread while an apply runs
 * on a worker. Bounded (PROOFS_MAX entries, 32 bytes each): past it a
 * chunk goes unnoted and is hashed again at its apply. */
#ifndef STITCH_VERSION_PROOFS_H
#define STITCH_VERSION_PROOFS_H

#include "stitch/digest.h"

#define PROOFS_MAX (1u << 20)

typedef struct chunk_proofs chunk_proofs;

/* NULL when out of memory: a store without proofs hashes every time. */
chunk_proofs *proofs_new(void);
void proofs_free(chunk_proofs *ps);
/* Each does nothing given NULL. */
void proofs_add(chunk_proofs *ps, const stitch_digest *hash);
void proofs_remove(chunk_proofs *ps, const stitch_digest *hash);
int proofs_has(chunk_proofs *ps, const stitch_digest *hash);

#endif
