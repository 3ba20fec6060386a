/* fetch.h: requesting and serving (fetch.c; docs/swarm.md): the plan
 * from the version our weights hold to the newest, which chunk to ask of
 * which peer (random first, then rarest, the endgame), the requests out
 * and their timeouts, and the order in which we serve the requests queued
 * with us (the furthest behind first). It asks cross.c whether a far peer
 * may be asked for a chunk, and tells cross.c and seed.c what came and
 * went. Its state is still the session's, in core_internal.h's structs:
 * our requests to a peer and its to us (peer.req, peer.serve), the plan,
 * vstate's avail, inflight and asked_at, and the schedule (sched,
 * fetch_wake_ms). */
#ifndef STITCH_SWARM_FETCH_H
#define STITCH_SWARM_FETCH_H

#include "stitch/swarm.h"
#include "swarm/wire.h"

#include <stdint.h>

#define CORE_REQUEST_MS 15000   /* a request not answered */
#define CORE_RANDOM_FIRST 4     /* chunks fetched at random before rarest-first */
/* The endgame (fetch.c late): a chunk is asked of another peer once its
 * latest request has waited CORE_LATE_FACTOR times the usual wait for a
 * chunk, and at least CORE_LATE_MIN_MS; of CORE_ENDGAME_ASKS peers at
 * most. With two, a chunk whose second request went to a peer that
 * stalls too waited for CORE_REQUEST_MS (test_hostile's eclipse, whose
 * liars advertise every chunk: 15 times slower at some seeds). */
#define CORE_LATE_FACTOR 2.0
#define CORE_LATE_MIN_MS 50
#define CORE_ENDGAME_ASKS 3
#define CORE_BEHIND_MARGIN 0.02 /* behind our neighbours by this: twice the
                                   pipeline (fetch.c request_depth); behind
                                   another requester by this: two serving
                                   slots (fetch.c serve_turn) */
#define CORE_SERVE_SLOTS 4      /* same-region requesters served at once */
/* ...or more while a node finds its uplink not full (fetch.c
 * fill_window): what it moves is measured over windows of
 * CORE_FILL_WINDOW_MS, or of CORE_FILL_CHUNKS chunks at the rate if
 * longer; below CORE_FILL_LOW of the rate while a requester waited,
 * slots are added; from CORE_FILL_HIGH of it, one is given back. A node
 * not told the rate takes the best it has moved (fill_estimate) and,
 * where that looks full, probes: CORE_FILL_PROBE more slots for a
 * window, kept if they moved CORE_FILL_GAIN times as much, else given
 * back and not tried again for 1, 2, 4 ... CORE_FILL_BACKOFF_MAX
 * windows; where CORE_FILL_SHORT windows in a row moved less than
 * CORE_FILL_LOW of it with CORE_SERVE_SLOTS_MAX slots and a requester
 * waiting, the uplink is slower than it was: their average becomes the
 * estimate, and the slots start again from CORE_SERVE_SLOTS. */
#define CORE_SERVE_SLOTS_MAX 16
#define CORE_FILL_WINDOW_MS 200
#define CORE_FILL_CHUNKS 8
#define CORE_FILL_LOW 0.8
#define CORE_FILL_HIGH 0.95
#define CORE_FILL_PROBE 0.5 /* of the slots, at least one */
#define CORE_FILL_GAIN 1.1
#define CORE_FILL_BACKOFF_MAX 16
#define CORE_FILL_SHORT 5
#define CORE_SERVE_WAIT_MS 200  /* ...but none waits longer for a chunk */
/* A requester keeps its serving slot while its chunk goes out (fetch.c
 * serve_turn), for at most this long: one that stops reading keeps none.
 * On a slow uplink a chunk can take longer (512 KiB at a quarter of 10
 * Mbit/s takes 1.7 s); its slot then lapses early, as before the rule. */
#define CORE_SENDING_MAX_MS 200
/* An object of at most this many chunks is small (fetch.c push_near):
 * up to 256 KiB in the publisher's smallest chunks (8 KiB, publish.c
 * auto_chunk). */
#define CORE_PUSH_SMALL_CHUNKS 32
/* A chunk of a small object is asked early of the neighbour that first
 * told us it comes into our region (fetch.c fetch_early_from). While
 * that request is younger than CORE_EARLY_PATIENCE_MS the chunk is asked
 * of no other neighbour; it is withdrawn after CORE_EARLY_MS unanswered. */
#define CORE_EARLY_PATIENCE_MS 60
#define CORE_EARLY_MS 1000

struct peer;
struct vstate;
struct chunk_id;

void fetch_replan(stitch_swarm *s);
/* Asks the ready peers for what we lack (fetch.c schedule): every one of
 * them, or, after a frame that may let us ask for more (sched_due), those
 * that had something at the last run or may have since. */
void fetch_schedule(stitch_swarm *s);
void fetch_schedule_due(stitch_swarm *s);
int fetch_on_chunk(stitch_swarm *s, struct peer *p, const wire_msg *m);
void fetch_on_reject(stitch_swarm *s, struct peer *p,
                     const struct chunk_id *c);
void fetch_peer_gone(stitch_swarm *s, struct peer *p);
void fetch_tick(stitch_swarm *s);
void fetch_serve_next(stitch_swarm *s, struct peer *p);
/* The uplink's rate in bytes/s that serving fills: told, or estimated
 * (fill_estimate); 0: not known yet. */
double fetch_up_rate(const stitch_swarm *s);
/* P asked us for chunk C, which we lack: 1 when the request is kept, to
 * be answered once we hold C (an early request, fetch.c), 0 when it is
 * to be rejected. */
int fetch_hold(stitch_swarm *s, struct peer *p, const struct chunk_id *c);
/* P, a neighbour of our region, first told us that chunk C of V comes
 * into our region (CROSSING): it is nearer the chunk's way in than our
 * other neighbours, and is asked for C early. */
void fetch_early_from(stitch_swarm *s, struct peer *p, struct vstate *v,
                      const struct chunk_id *c);
/* Where C is among P's requests to us (fetch_queued), or among our
 * requests to P (fetch_asked), or -1. */
int fetch_queued(const struct peer *p, const struct chunk_id *c);
int fetch_asked(const struct peer *p, const struct chunk_id *c);
/* Is (VERSION, OBJECT) in our plan: do we fetch it? */
int fetch_in_plan(const stitch_swarm *s, uint64_t version, uint32_t object);
/* Chunk C of V, queued for Q unasked, counts as Q's from now: Q gets no
 * HAVE of it, and no second pass. */
void fetch_pushed(stitch_swarm *s, struct peer *q, struct vstate *v,
                  const struct chunk_id *c);
uint64_t fetch_chunk_allow(const stitch_swarm *s, const struct peer *p);
void fetch_on_have_bit(stitch_swarm *s, struct peer *p, uint64_t version,
                       uint32_t object, uint64_t chunk);
void fetch_announce_interest(stitch_swarm *s, struct peer *p);

#endif
