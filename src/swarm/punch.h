/* punch.h: hole punching through a common neighbour, beside the session
 * (core.c calls it; docs/swarm.md "Hole punching", proto/wire.md
 * "PUNCH"). libp2p's DCUtR, over our links:
 *
 *  - A node that advertises no address (behind a NAT) and holds fewer
 *    than PUNCH_WANT links to such nodes asks a neighbour R, the relay, to
 *    link it with one of R's own neighbours that advertise none (ASK).
 *  - R picks one, B, and tells it "A, seen at A's address, asks" (ASKED):
 *    the address R's link from A comes from, never one A claims.
 *  - B takes it (ACCEPT to R) and dials that address at once; R tells A
 *    "B, seen at B's address, took it" (ACCEPTED) and A dials B. Both
 *    dial from their one fixed port (STITCH_SWARM_DIAL_FIXED), so each
 *    NAT holds a mapping toward the other, and the two SYNs make one
 *    connection (TCP's simultaneous open). A is the link's dialer in the
 *    handshake, B its acceptor.
 *
 * What a peer can make us do is bounded: a node acts on at most
 * PUNCH_RELAY_PER_S PUNCHes a second from each peer, besides answers to
 * what it sent that peer, and relays only between two of its own ready
 * neighbours that advertise no address; a node takes at most one ask per
 * PUNCH_TAKE_MS from each relay and has at most PUNCH_INFLIGHT punches
 * (asked or taken) under way, each ended by its link, its dial's failure
 * or PUNCH_WAIT_MS; a node whose punch failed waits before it punches
 * with that node (or asks that relay) again. The PUNCHes counted past
 * PUNCH_RELAY_PER_S are charged to the sender's score
 * (SCORE_PUNCH_FLOOD). An honest node never gets there. What is counted
 * is what the sender started, an ASK or an ASKED, and an honest node
 * starts at most PUNCH_SEND_PER_S in any 1000 ms with each peer, half
 * the count: a window of 1000 ms at the receiver holds what was sent in
 * 1000 ms plus the link's variation in delay, so under a second of
 * variation it holds at most two senders' seconds. (Issue 35: before,
 * a relay with many askers sent one node ASKED for as many of them as
 * chance sent its way, and the answers crossed too: of 32 starts of 29
 * askers at once, 6-8 charged an honest peer 1-3 points; test_swarm
 * punch_fanin.) An address a relay names is dialed only if its scope
 * allows, judged against the relay's own address (scope.h). */
#ifndef STITCH_SWARM_PUNCH_H
#define STITCH_SWARM_PUNCH_H

#include "stitch/swarm.h"

#include <stdint.h>

#define PUNCH_INFLIGHT 2      /* punches under way at once, ours and taken */
#define PUNCH_WAIT_MS 10000   /* a punch not linked by then failed */
#define PUNCH_ASK_MS 1000     /* a node asks a relay at most this often */
#define PUNCH_RELAY_PER_S 4   /* PUNCHes a node takes from a peer a second */
/* Asks (ASK, ASKED) a node sends one peer in any 1000 ms: a relay offers
 * a node to at most this many askers a second (others get another node,
 * or DECLINED), and a node asks a relay only while under it. */
#define PUNCH_SEND_PER_S 2
#define PUNCH_TAKE_MS 2000    /* asks a node takes from one relay at most */
/* Links to nodes that advertise no address a NATed node punches for; it
 * takes asks up to PUNCH_TAKE_EXTRA more (so that others' asks find
 * room). */
#define PUNCH_WANT 4
#define PUNCH_TAKE_EXTRA 2
#define PUNCH_BACKOFF_MS 4000 /* after a failure, doubling */
#define PUNCH_BACKOFF_MAX_MS 120000
#define PUNCH_KEYS 64         /* nodes and relays backed off, a ring */
#define PUNCH_PAIRS 64        /* asks a relay forwarded, a ring */
/* A relay offers a node to the same asker (either way) at most once in
 * this long: asked again, it offers another. */
#define PUNCH_PAIR_MS 60000

typedef struct punch_try {
  int on;
  int asker;               /* 1: we asked (the link's dialer); 0: we took */
  uint32_t relay;          /* the relay's peer id */
  stitch_pubkey relay_key;
  stitch_pubkey target;    /* zero until the relay named it */
  char addr[STITCH_SWARM_ADDR_MAX]; /* dialed; "" before */
  int opened;              /* the driver reported the connection */
  uint32_t peer;           /* its peer id, once opened */
  uint64_t since_ms;
} punch_try;

typedef struct punch_key {
  stitch_pubkey k;
  unsigned fails;
  uint64_t next_ms;
} punch_key;

typedef struct punch_pair {
  stitch_pubkey asker, target;
  uint64_t ms; /* 0: free */
  int answered;
} punch_pair;

typedef struct punch_state {
  punch_try t[PUNCH_INFLIGHT];
  punch_key back[PUNCH_KEYS];
  unsigned back_next;
  punch_pair pairs[PUNCH_PAIRS]; /* relay: asks forwarded, not answered */
  unsigned pair_next;
  uint64_t ask_ms; /* when we may ask next */
} punch_state;

struct peer;
struct wire_msg;

/* Ends punches that ran out of time; asks a relay when we want links
 * (maintain, every CORE_MAINTAIN_MS). */
void punch_maintain(stitch_swarm *s);
/* A PUNCH from P, a ready member. */
void punch_on_msg(stitch_swarm *s, struct peer *p, const struct wire_msg *m);
/* The driver opened an outbound connection to ADDR as peer ID: 1 when it
 * is one of our punches, *ACCEPTOR then set when we are the link's
 * acceptor in the handshake (we took the ask). */
int punch_opened(stitch_swarm *s, const char *addr, uint32_t id,
                 int *acceptor);
/* P's handshake is done: 1 when P came from a punch and is not the node
 * the relay named (drop it). Ends the punch that linked P. */
int punch_ready(stitch_swarm *s, struct peer *p);
void punch_dial_failed(stitch_swarm *s, const char *addr);
/* P is gone: punches through it that have not dialed, and its punched
 * link not yet ready, end. */
void punch_peer_gone(stitch_swarm *s, const struct peer *p);

#endif
