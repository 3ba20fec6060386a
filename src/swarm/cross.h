/* cross.h: crossing regions: how a chunk gets into another region about
 * once, then spreads inside it (docs/swarm.md "Crossing regions").
 *
 * The module owns what it knows of each chunk's way across (cross_obj,
 * one per object of a version): when a far peer first held it, the last
 * CROSSING and the lowest BID heard for it, when a far peer said it is
 * coming another way, and the chunk the seed gave us last. It owns the
 * swarm's estimate of our region's size from the crossers' ranks
 * (cross_ranks), the CROSSING and BID messages, and the passes of a
 * chunk across unasked (push_across, pass_to). fetch.c asks it whether
 * a far peer may be asked for a chunk now (cross_ok) and tells it what
 * came and went; core.c hands it CROSSING and BID frames. It reads the
 * session's peers and versions and sends through core_send; it never
 * requests or serves a chunk itself. */
#ifndef STITCH_SWARM_CROSS_H
#define STITCH_SWARM_CROSS_H

#include "stitch/swarm.h"
#include "swarm/wire.h"

#include <stdint.h>

/* Turns (cross_ok): a node fetches a chunk across no sooner than its rank
 * times the region's size times CORE_CROSS_STEP_MS after the version came
 * (at most CORE_CROSS_WAIT_MS), nor CORE_CROSS_HEAR_MS plus its rank
 * times CORE_CROSS_SPREAD_MS after it first saw a far copy, and not at
 * all while a CROSSING for it, heard under CORE_CROSS_TRUST_MS ago, says
 * another node brings it. A node that heard a lower rank's BID waits for
 * that node's turn as it would reckon it, plus CORE_CROSS_BID_SLACK_MS
 * for its CROSSING to come. */
#define CORE_CROSS_STEP_MS 20
#define CORE_CROSS_WAIT_MS 1000
#define CORE_CROSS_HEAR_MS 15
#define CORE_CROSS_SPREAD_MS 200
#define CORE_CROSS_BID_SLACK_MS 200
/* A node sends (or passes on) at most this many BIDs per chunk: each
 * lower rank heard goes on, about ln(bidders) of them, but a neighbour
 * that names ever lower ranks must not flood the region for long. */
#define CORE_CROSS_BIDS_MAX 8
#define CORE_CROSS_TRUST_MS 3000
#define CORE_CROSS_SAMPLES 8    /* crossers' ranks before they size a region */
/* A far peer asking for a chunk we sent within CORE_SENT_RECENT_MS to
 * another node of its region is told it is coming that way (cross.c
 * coming_into; peer.sent keeps the last chunks sent). */
#define CORE_SENT_RECENT_MS 200
/* Told so, a node fetches that chunk across from no one for this long,
 * once per chunk: the copy is about a far round trip away, and a far peer
 * that says so of everything must not hold a region back for long. */
#define CORE_COMING_WAIT_MS 500
/* A far peer's notice that it passes a chunk into our region through
 * another node holds our turn back this many of our usual waits for a
 * chunk (stitch_swarm.wait_ms), at least CORE_COMING_WAIT_MS and at most
 * CORE_CROSS_TRUST_MS (cross.c told_wait). */
#define CORE_TOLD_WAITS 4

struct peer;
struct vstate;
struct chunk_id;

/* One object's chunks, as crossing sees them. Times are stamps
 * (vstate_stamp: ms after the version came, plus one; 0: not yet). */
typedef struct cross_obj {
  uint32_t *far_at;    /* a peer of another region first held it */
  uint32_t *crossing;  /* we last heard (or sent) a CROSSING for it */
  /* The lowest rank (rank_bits) a BID for it named, and when we heard
   * (or sent) it: that node's turn comes first. And how many BIDs we
   * sent for it (at most CORE_CROSS_BIDS_MAX). */
  uint32_t *bid;
  uint32_t *bid_at;
  uint8_t *bids_sent;
  /* A far peer first answered our request for it that it is coming into
   * our region another way (coming_into). */
  uint32_t *coming;
  /* A far peer first told us, unasked, that it passes it into our region
   * through another node (pass_to): we wait for that copy (told_wait). */
  uint32_t *told;
  /* The chunk the seed gave us last, plus one (0: none): what a far
   * neighbour that was busy when it came may still be passed. */
  uint64_t last_seeded;
} cross_obj;

/* The ranks of the crossers heard of (CROSSING): they size our region. */
typedef struct cross_ranks {
  double sum;
  unsigned n;
} cross_ranks;

/* X for an object of N chunks; 0 or STITCH_ENOMEM. cross_obj_free frees
 * what was made, also after a failed init, and is a no-op on a zeroed X. */
int cross_obj_init(cross_obj *x, uint64_t n);
void cross_obj_free(cross_obj *x);

/* May chunk C of (V, O) be asked of a far peer now (its turn, no CROSSING
 * or BID says another node brings it, no neighbour holds it)? When not
 * yet, lowers *WAKE to when it may be. NONE_NEAR: the caller knows that
 * no neighbour of our region holds C (fetch.c pick masks their bitsets),
 * and they are not looked through again. */
int cross_ok(stitch_swarm *s, struct vstate *v, uint32_t o, uint64_t c,
             int none_near, uint64_t *wake);
/* A far peer holds chunk C of (V, O) (a HAVE or its BITFIELD). */
void cross_saw_far(stitch_swarm *s, struct vstate *v, uint32_t o, uint64_t c);
/* We sent P our first request for chunk C of V: a far P or the seed
 * brings it into our region through us, and our region is told. */
void cross_on_request(stitch_swarm *s, const struct peer *p, struct vstate *v,
                      const struct chunk_id *c);
/* Chunk C of V came from P and is stored; ASKED: we had asked P for it.
 * From the seed it goes across at once (push_across). */
void cross_on_chunk(stitch_swarm *s, const struct peer *p, struct vstate *v,
                    const struct chunk_id *c, int asked);
/* P, a far peer, may take the chunk of (V, O) the seed gave us last: it
 * said it wants the object, or its queue with us drained. */
void cross_pass_more(stitch_swarm *s, struct peer *p, struct vstate *v,
                     uint32_t o);
/* Serving P chunk C: if P is a far peer (and we are not the seed) and C
 * is on its way into P's region through another node, P is told so (a
 * CROSSING naming that node) instead, and 1 is returned; else 0, and P is
 * to be sent C. */
int cross_answer(stitch_swarm *s, struct peer *p, const struct chunk_id *c);
/* Do we know of another region (an address or a ready peer in one)?
 * Only then is a chunk's way into our region announced (CROSSING). */
int cross_far_known(const stitch_swarm *s);
/* Our request to P for chunk C of V, sent at SENT_MS, came back
 * unserved: if P is far, the CROSSING we announced when we sent it holds
 * us back no more. */
void cross_declined(stitch_swarm *s, const struct peer *p, struct vstate *v,
                    const struct chunk_id *c, uint64_t sent_ms);
/* What a peer said it holds of chunk C of (V, O) is believed no more:
 * a CROSSING or BID heard for C no longer holds us back. */
void cross_forget(struct vstate *v, uint32_t o, uint64_t c);

/* Frames (core.c). P said it wants (VERSION, OBJECT) (a BITFIELD with no
 * bits set): a far P may be passed the chunk the seed gave us last. */
void cross_on_interest(stitch_swarm *s, struct peer *p, uint64_t version,
                       uint32_t object);
void cross_on_crossing(stitch_swarm *s, struct peer *p, const wire_msg *m);
void cross_on_bid(stitch_swarm *s, struct peer *p, const wire_msg *m);

#endif
