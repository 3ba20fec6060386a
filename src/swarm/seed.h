/* seed.h: what the seed does (docs/swarm.md "What the seed does"): it
 * super-seeds, announcing no bitfield but offering each peer a few chunks
 * at a time, those sent least so far first, so that distinct peers get
 * distinct chunks and the swarm spreads them.
 *
 * The module owns the seed's count of each chunk's uploads and offers
 * (seed_obj, one per object of a version) and the pace of its offers
 * (CORE_SEED_IDLE_MS). A peer's own offers (peer.offered, peer_offered)
 * and its progress_ms stay with the peer, which core.c keeps. Every call
 * is a no-op on a node that is not the seed. */
#ifndef STITCH_SWARM_SEED_H
#define STITCH_SWARM_SEED_H

#include "stitch/swarm.h"

#include <stdint.h>

#define CORE_SEED_IDLE_MS 2000  /* the seed re-offers to a peer idle this long */

struct peer;
struct vstate;
struct chunk_id;

/* One object's chunks, as the seed counts them. */
typedef struct seed_obj {
  uint32_t *sent;   /* uploads of each chunk */
  uint16_t *offers; /* peers offered each chunk */
} seed_obj;

/* X for an object of N chunks; 0 or STITCH_ENOMEM. seed_obj_free frees
 * what was made, also after a failed init, and is a no-op on a zeroed X. */
int seed_obj_init(seed_obj *x, uint64_t n);
void seed_obj_free(seed_obj *x);

/* Offers P chunks it lacks of every object it wants (seed.c says how
 * many, and which): at P's BITFIELD or HAVE, when it is ready, at a tick,
 * and after each chunk sent to it. */
void seed_offer(stitch_swarm *s, struct peer *p);
/* A new version is held: its first round goes out at once. */
void seed_on_manifest(stitch_swarm *s);
/* Chunk C of V went out to P (fetch.c fetch_serve_next): counted, and P
 * offered more. */
void seed_on_sent(stitch_swarm *s, struct peer *p, struct vstate *v,
                  const struct chunk_id *c);
/* Counts an upload of chunk C. Nothing calls it at present (uploads are
 * counted by seed_on_sent); it is kept as it was in fetch.c. */
void seed_on_upload(stitch_swarm *s, const struct chunk_id *c);

#endif
