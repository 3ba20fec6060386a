/* core_internal.h: the swarm core's state, shared by core.c (the session:
 * peers, handshake, messages, gossip) and the policies beside it: fetch.c
 * (what to fetch, from whom, and what to serve, fetch.h), cross.c (crossing
 * regions, cross.h), seed.c (what the seed offers, seed.h), reach.c
 * (which regions our links reach) and punch.c (hole punching, punch.h).
 * docs/swarm.md explains the behaviour. */
#ifndef STITCH_SWARM_CORE_INTERNAL_H
#define STITCH_SWARM_CORE_INTERNAL_H

#include "stitch/swarm.h"

#include "common/bytes.h"
#include "swarm/channel.h"
#include "swarm/cross.h"
#include "swarm/fetch.h"
#include "swarm/punch.h"
#include "swarm/score.h"
#include "swarm/seed.h"
#include "swarm/wire.h"

#include <string.h>

#define CORE_MAX_VERSIONS 64    /* newest kept; older ones are forgotten */
#define CORE_MAX_PIPELINE 32
#define CORE_MAX_SERVE 64       /* requests a peer may have queued with us */
/* A requester at its deepest (CORE_MAX_PIPELINE), with a few requests it
 * timed out and a chunk passed to it, is never dropped for queueing too
 * many (core.c on_request). */
_Static_assert(CORE_MAX_PIPELINE + 3 <= CORE_MAX_SERVE,
               "a requester at full depth fits the serve queue");
#define CORE_MAX_ADDRS 1024     /* known addresses */
#define CORE_MAX_REGIONS 32     /* regions numbered for reach masks */
#define CORE_MAX_BANS 1024
#define CORE_MAX_ACTIONS 256
#define CORE_ID_SLOTS 256       /* core_peer's map of ids to slots */
#define CORE_INBOUND_SLACK 4    /* inbound links beyond max_peers */
#define CORE_SAME_EXTRA 2       /* links of our region dialed beyond max_peers */
#define CORE_FULL_MAX 8         /* dialers pointed elsewhere at once */
/* Links from dialers with no address of their own (behind a NAT: they
 * can only dial) taken beyond the limits. Nodes that can be dialed fill
 * each other's slots, and a NATed node, which links only through its own
 * dials, found every one of them full: at 80 % behind NAT, 5 of 200
 * nodes held no link and no version in 60 s (docs/netlab.md "The
 * redialing"). */
#define CORE_DIALOUT_ROOM 4
/* A full node drops a link from a node that can be dialed to take one
 * that cannot at most this often: a hostile dialer claiming no address
 * churns one honest inbound link per CORE_EVICT_MS at most, never one we
 * dialed (core.c core_ready). */
#define CORE_EVICT_MS 2000
/* Links we dialed ourselves, kept however many dial in: a victim whose
 * slots an attacker's nodes fill by dialing it (an eclipse) still picks
 * some neighbours of its own choosing (Bitcoin Core keeps 8 outbound for
 * the same reason), and a liar among those is greylisted by the address
 * we dialed, so the next dial goes elsewhere. */
#define CORE_OUTBOUND_MIN 3
/* Peer slots waiting for the driver to close them (dropped, not yet
 * peer_close'd), beyond the links the limits allow: a slot is held until
 * the driver says the transport is gone. With the limits this caps a
 * node's peer slots however many connect (core.c slots_max). */
#define CORE_CLOSING_MAX 64
#define CORE_PING_MS 10000      /* send a PING after this much silence */
#define CORE_DEAD_MS 30000      /* drop a peer silent this long */
/* A peer that has said nothing at all this long after its handshake is
 * holding a slot: an honest one sends its manifests, its PEERS or its
 * BITFIELD at once (core_ready), a round trip after ours at most. It is
 * charged SCORE_SILENT (greylisted). Only once we sent it something to
 * answer (a manifest), so a node with nothing to say yet is spared. */
#define CORE_QUIET_MS 2000
#define CORE_HANDSHAKE_MS 10000
/* Before its AUTH is verified a peer may send its HELLO and its AUTH and
 * nothing else, none larger than this: the longest valid AUTH is under
 * 500 bytes (proto/wire.md). */
#define CORE_HANDSHAKE_FRAME_MAX 1024
/* A frame being read must have come at CORE_FRAME_MIN_RATE bytes per
 * second since CORE_FRAME_GRACE_MS after its header: a peer dribbling
 * into a large frame pins its buffer, and is dropped instead. An honest
 * link of 1 Mbit/s sends four times that. */
#define CORE_FRAME_GRACE_MS 5000
#define CORE_FRAME_MIN_RATE (32u << 10)
/* Large frames nobody asked for (MANIFEST, BITFIELD, POLICY over
 * WIRE_SMALL_MAX) may claim this much buffer across all peers at once;
 * a header that would pass it drops its peer. CHUNK frames are bounded
 * by what we asked (fetch_chunk_allow). */
#define CORE_UNASKED_MAX (192u << 20)
/* Sealed records handed to the driver at once (channel.h): a chunk goes
 * out in a few writes of this, not one copy of all of it. */
#define CORE_SEAL_BATCH (256u << 10)
#define CORE_OUT_KEEP 4096 /* a drained out buffer larger than this is freed */
#define CORE_REFUSED_LOG 64 /* addresses whose refusal was logged lately */
#define CORE_CONNECT_MS 5000    /* a CONNECT not answered by peer_open */
#define CORE_SHORT_LINK_MS 2000 /* a link closed sooner counts as a failure */
/* Dials in a row that came to nothing (refused, unanswered, or closed
 * within CORE_SHORT_LINK_MS: a full node's PEERS and close) before a
 * node that advertises no address backs off its dialing as a whole: one dial, then a pause that
 * doubles from CORE_DIAL_QUIET_MS to CORE_DIAL_QUIET_MAX_MS (at most
 * CORE_DIAL_QUIET_LOW_MS while it holds fewer than CORE_OUTBOUND_MIN
 * links, or fewer of its own region). The per-address backoff alone let a node behind a NAT, which
 * nobody can dial, redial hundreds of full nodes ~450 times in 42 s
 * (docs/netlab.md "The redialing"). */
#define CORE_DIAL_STREAK 8
#define CORE_DIAL_QUIET_MS 250
#define CORE_DIAL_QUIET_MAX_MS 8000
#define CORE_DIAL_QUIET_LOW_MS 2000
#define CORE_MAINTAIN_MS 500    /* neighbour upkeep */
#define CORE_PEX_MS 20000
#define CORE_REACH_NEW 2        /* regions one peer's REACHes may add */
#define CORE_RATE_PER_S 4000    /* messages a peer may send per second */
#define CORE_RATE_BURST 20000
/* Each peer's last CORE_SENT_KEPT chunks sent are kept (peer.sent): for
 * the serving slots (fetch.c serve_turn) and for a far peer asking for a
 * chunk already on its way into its region (cross.c coming_into). */
#define CORE_SENT_KEPT 4
/* Gossip (gossip.c): a manifest larger than CORE_MANIFEST_EAGER_MAX,
 * whose copies to every neighbour would come to more than a
 * CORE_MANIFEST_SHARE-th of the version's bytes, goes to the neighbours
 * in turn, CORE_MANIFEST_COPIES at a time, skipping those that announce
 * the version meanwhile; a peer's announcements kept for a manifest not
 * yet here, at most, the chunks each keeps, and for how long; versions
 * remembered as known to a peer. */
#define CORE_MANIFEST_EAGER_MAX (2u << 10)
#define CORE_MANIFEST_SHARE 32
#define CORE_MANIFEST_COPIES 2
#define CORE_PENDING_MAX 4
#define CORE_PENDING_BITS 32
#define CORE_PENDING_MS 10000
#define CORE_KNOWN_KEPT 8

/* One chunk of one object, as the wire names it. */
typedef struct chunk_id {
  uint64_t version;
  uint32_t object;
  uint64_t chunk;
} chunk_id;

/* A bitfield over one object's chunks. */
typedef struct bits {
  uint64_t version;
  uint32_t object;
  uint64_t n;     /* chunks */
  uint64_t count; /* bits set */
  uint8_t *b;
  int timed;      /* seed offers: since_ms is set */
  uint64_t since_ms;
} bits;

typedef struct request {
  chunk_id c;
  uint64_t sent_ms;
  int late; /* charged as late (score.h SCORE_LATE) */
  /* Asked before the peer held it (fetch.c ask_early): it answers when it
   * has it. Not in flight, never late, and it expires unscored. */
  int early;
} request;

/* A BITFIELD of a version whose manifest has not come, and the HAVEs
 * after it: the chunks it names, the first CORE_PENDING_BITS of them
 * (gossip.c gossip_pend). */
typedef struct pend_entry {
  uint64_t version, nbits;
  uint32_t object, n_idx;
  uint32_t idx[CORE_PENDING_BITS];
} pend_entry;

typedef enum peer_state {
  PEER_FREE = 0,
  PEER_HELLO, /* waiting for the peer's HELLO */
  PEER_AUTH,  /* waiting for the peer's AUTH */
  PEER_READY,
  PEER_FULL,   /* dialed us while we had no room: it gets our PEERS once
                  the handshake is done, then the link closes */
  PEER_CLOSING /* asked the driver to close; ignore its bytes */
} peer_state;

typedef struct peer {
  /* First, in one cache line, what the passes over a node's peers read
   * for each (fetch.c serve_turn and schedule, the sendable list): they
   * run for nearly every frame, and at 10,000 simulated nodes each line
   * of a peer they touched was a cache miss. Peers are allocated on
   * 64-byte lines (stitch_swarm_peer_open). */
  _Alignas(64) peer_state state;
  uint32_t id;
  int same_region; /* its region (from HELLO) is ours */
  int is_seed; /* its node key is the swarm key, or its ticket's role is
                  seed */
  /* We handed the driver a chunk for it and the driver has not asked for
   * more since: the chunk is on its way out (fetch.c serve_turn). */
  int sending;
  unsigned n_serve;   /* its requests queued with us (serve, below) */
  unsigned n_req;     /* ours out to it (req, below) */
  unsigned sent_next; /* chunks we sent it, all told (sent, below) */
  /* What it holds (or wants, for a BITFIELD with no bits set). */
  bits *have;
  size_t n_have;
  /* It had nothing for us when the schedule last asked, and nothing that
   * could change that has happened since: s->pick_gen was this. */
  uint64_t dry_gen;
  uint64_t serve_wait_ms; /* since when it has waited for its next chunk */
  /* Next, what the driver's asks for bytes read (pending, sent). Its
   * place in s->sendable plus one; 0: not there (core_sendable). */
  size_t listed;
  /* Sealed records (or, before the keys, the clear HELLO) waiting for the
   * driver; the plaintext below is sealed into it as the link wants
   * more. */
  dbuf ct;
  size_t ct_off;
  dbuf out;
  size_t out_off; /* bytes of out the driver has sent */
  /* A CHUNK's payload goes out straight from chunk_read's buffer, not
   * copied into out (a copy per peer would be most of a node's memory):
   * out holds its frame up to the payload, at out[pay_at], and whatever
   * was queued after it follows the payload on the wire. */
  const uint8_t *pay; /* NULL: none; released once sent */
  size_t pay_len, pay_off, pay_at;
  /* The link's keys and records, which the handshake sets up
   * (handshake.c). */
  chan ch;
  int outbound;
  int full; /* inbound when we had no room (PEER_FULL after AUTH) */
  char addr[STITCH_SWARM_ADDR_MAX];   /* transport address */
  char listen[STITCH_SWARM_ADDR_MAX]; /* where it accepts (from HELLO) */
  char region[STITCH_SWARM_REGION_MAX];
  stitch_pubkey node;
  /* The handshake's: its HELLO key, and when its ticket expires (0:
   * never, or no ticket). */
  uint8_t peer_kx[WIRE_KX_BYTES];
  uint64_t expires_s;
  wire_reader rd;
  int frame_on;        /* a frame's header is in, its body coming */
  uint64_t frame_ms;   /* since when */
  size_t frame_claim;  /* its claim on s->unasked */
  uint32_t frames; /* since it became ready (CORE_QUIET_MS); beside the
                      reader, as every frame counts */
  uint64_t opened_ms, last_recv_ms, last_send_ms, last_pex_ms;
  double tokens;
  uint64_t tokens_ms;
  /* Our requests to it. */
  request req[CORE_MAX_PIPELINE];
  unsigned timeouts;
  uint64_t chunk_allow; /* largest CHUNK body it may send: what we asked */
  /* A version of which it rejected an early request of ours: it is
   * asked early for no more of it (fetch.c ask_early). */
  uint64_t early_refused;
  /* Its requests to us, served in order. */
  chunk_id serve[CORE_MAX_SERVE];
  /* The last chunks we sent it, and when (cross.c coming_into). */
  chunk_id sent[CORE_SENT_KEPT];
  uint64_t sent_ms[CORE_SENT_KEPT];
  /* (version, object) pairs we sent it a BITFIELD for. */
  bits *told;
  size_t n_told;
  /* Seed: what we offered it, and when it last made progress. */
  bits *offered;
  size_t n_offered;
  uint64_t progress_ms;
  /* Seed: the other regions its links reach (REACH; reach.c), as bits of
   * our region table. */
  uint32_t reach;
  int reach_known;
  unsigned regions_added; /* names its REACHes added to our table */
  /* What it is worth to us (score.h): when it last answered a request
   * of ours (a CHUNK, a REJECT, a CROSSING), when we last charged it a
   * stall, and when its last PING came; when its last CHUNK, or REJECT
   * of a request of ours, came (fetch.c asked_from). */
  score sc;
  uint64_t answered_ms, stall_ms, ping_ms, served_ms;
  uint64_t ready_ms;
  int owes;        /* we sent it a manifest at ready: it answers */
  /* Gossip (gossip.c): the versions it is known to hold the manifest
   * of, plus one (a ring; 0 is none); whether a manifest of ours is on
   * its way to it, and the byte of its stream at which that copy is
   * out; the bytes of its stream taken (sent, or sealed) and sent; what
   * it announced of versions we do not know yet, and since when (0:
   * nothing). */
  uint64_t known[CORE_KNOWN_KEPT];
  unsigned known_next;
  int mf_on;
  uint64_t mf_mark, taken, wired;
  pend_entry pend[CORE_PENDING_MAX];
  unsigned n_pend;
  uint64_t pending_ms;
  /* Hole punching (punch.c): the link came from a punch; the PUNCHes it
   * sent in the second since punch_win_ms (answers to ours aside); when
   * we last took an ask it relayed; when we sent it our last
   * PUNCH_SEND_PER_S asks, ASK or ASKED (0: none). */
  int punched;
  uint64_t punch_win_ms;
  unsigned punch_n;
  uint64_t punch_took_ms;
  uint64_t punch_sent_ms[PUNCH_SEND_PER_S];
} peer;

typedef struct addr_entry {
  char addr[STITCH_SWARM_ADDR_MAX];
  char region[STITCH_SWARM_REGION_MAX];
  uint64_t next_try_ms;
  unsigned failures;
  int connecting;      /* a CONNECT is out, since connect_ms */
  uint64_t connect_ms;
} addr_entry;

/* A verified version, its manifest, and what we hold of each object. */
typedef struct vstate {
  uint64_t version; /* ref.m's, without reaching into it (core_find_version) */
  stitch_vref ref;  /* ref.m owned */
  uint8_t *raw;    /* the signed manifest, to pass on */
  size_t raw_len;
  bits held[STITCH_MAX_OBJECTS];
  uint16_t *avail[STITCH_MAX_OBJECTS];    /* ready peers that hold each chunk */
  uint8_t *inflight[STITCH_MAX_OBJECTS];  /* our requests out for each */
  seed_obj seed[STITCH_MAX_OBJECTS];      /* the seed's counts (seed.h) */
  cross_obj cross[STITCH_MAX_OBJECTS]; /* crossing regions (cross.h) */
  /* When our first request out for each chunk went (the endgame). */
  uint32_t *asked_at[STITCH_MAX_OBJECTS];
  uint64_t added_ms; /* when we learnt of it */
  /* Its manifest is sent in turn, not to every neighbour at once
   * (gossip.c); every ready neighbour has it or had it from us. */
  int lazy, lazy_done;
} vstate;

struct stitch_swarm {
  stitch_swarm_config cfg;
  stitch_swarm_io io;
  vstate *v; /* ascending */
  size_t n_v;
  stitch_vref *refs; /* the same, as one array for the planner */
  uint64_t held_version;
  stitch_digest held_id;
  int applying; /* an APPLY is out */
  /* The plan from held_version to the newest version. */
  stitch_plan plan;
  int replan; /* planning ran out of memory: try again at the next tick */
  uint64_t fetched; /* chunks received since start: random-first */
  peer *peers;
  size_t n_peers;
  /* fetch_schedule: the ready peers it may still ask, as many slots as
   * peers. */
  struct sched_slot {
    peer *p;
    unsigned lim; /* requests it may have from us at once */
  } *sched;
  /* The frame being handled (on_frame, one at a time): 11 KB, allocated
   * with the first, not for each. */
  wire_msg *rx;
  uint32_t next_peer_id;
  /* Where peer ID was opened: peers[id_slot[ID % CORE_ID_SLOTS]], unless a
   * later peer took that entry (core_peer then looks through them all). */
  uint32_t id_slot[CORE_ID_SLOTS];
  /* The peers that may have something for the driver
   * (stitch_swarm_sendable): their ids, and their slots in peers, room
   * for every peer. Listed by core_sendable, taken off when an ask finds
   * nothing and nothing to do (stitch_swarm_peer_pending). The generation
   * counts the peers listed. */
  uint32_t *sendable_ids, *sendable;
  size_t n_sendable;
  uint64_t sendable_gen;
  addr_entry *addrs;
  size_t n_addrs;
  /* Dials in a row that came to nothing, when the last did, and when
   * the node may dial again once they reach CORE_DIAL_STREAK. */
  unsigned dial_streak;
  uint64_t dial_failed_ms, dial_quiet_ms;
  uint64_t evict_next_ms; /* when a full node may next make room (core_ready) */
  stitch_pubkey bans[CORE_MAX_BANS];
  size_t n_bans;
  char ban_addrs[CORE_MAX_BANS][STITCH_SWARM_ADDR_MAX];
  size_t n_ban_addrs;
  greylist grey; /* peers whose score fell too low (score.h) */
  stitch_swarm_action actions[CORE_MAX_ACTIONS];
  size_t act_head, act_len;
  uint64_t now_ms, next_maintain_ms;
  int phased; /* the maintain beat's phase is set (core.c tick) */
  size_t region_known; /* known addresses in our region (maintain) */
  size_t far_known;    /* known addresses in other regions (maintain) */
  /* A crossing's wait ends (cross.c cross_ok), or a request becomes late
   * (fetch.c late): the schedule runs again then. */
  uint64_t fetch_wake_ms;
  /* Something that may let us ask for more came in since the schedule
   * last ran (fetch_schedule_due): any frame but a PING or a HAVE of a
   * chunk we hold or have asked for (outside the endgame, which the
   * schedule's last run saw). */
  int sched_due, endgame;
  /* Counts the changes that may give a neighbour with nothing for us
   * something (peer.dry_gen): a request withdrawn, a new plan, the
   * endgame, a timed wait's end. A neighbour's own HAVE clears its mark. */
  uint64_t pick_gen;
  double wait_ms; /* how long a chunk asked for takes to come (average) */
  uint64_t chunk_max;     /* largest chunk of the versions we know */
  cross_ranks xr;         /* crossers heard of: our region's size (cross.c) */
  /* Regions met, numbered for reach masks (reach.c); the reach we last
   * told the seed; seed: every region its peers and addresses are in. */
  char regions[CORE_MAX_REGIONS][STITCH_SWARM_REGION_MAX];
  unsigned n_regions;
  uint32_t reach_told, regions_all;
  /* The uplink's fill (fetch.c fill_window): when the window began,
   * the chunk bytes handed to the driver in it, whether a requester
   * waited for a serving slot in it, and how many requesters of our
   * region are served at once. Not told the uplink's rate: the rate it
   * is taken to be (bytes/s; fill_estimate), the last window's rate (0:
   * none just before), and a probe: the slots before it (0: none) and
   * the rate they moved, and the windows to let pass before the next;
   * the windows in a row that found the uplink short of the estimate at
   * the most slots, and the sum of their rates. */
  struct {
    uint64_t start_ms, bytes;
    int waited;
    unsigned slots;
    double est, last_rate, probe_rate;
    unsigned probe_from, probe_wait, probe_backoff;
    unsigned short_n;
    double short_sum;
  } up;
  stitch_swarm_stats st;
  /* The newest signed policy (stitch/admit.h) and its bytes, to pass on. */
  stitch_policy *policy;
  uint8_t *policy_raw;
  size_t policy_len;
  size_t unasked; /* bytes claimed by large unasked frames being read */
  /* Peer addresses (host part) whose refusal was logged, a ring. */
  char refused_log[CORE_REFUSED_LOG][STITCH_SWARM_ADDR_MAX];
  size_t refused_next;
  punch_state pu; /* hole punching (punch.h) */
  /* Versions held whose manifest goes in turn, copies of such
   * manifests on their way out, and where the next pass over the peers
   * starts (gossip.c). */
  unsigned n_lazy, mf_out;
  size_t mf_rr;
};

/* core.c */
peer *core_peer(stitch_swarm *s, uint32_t id);
/* The ready neighbour whose node key is K, or NULL. */
peer *core_ready_key(stitch_swarm *s, const stitch_pubkey *k);
void core_log(stitch_swarm *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* How the log names P: the address it listens at, else the one it came
 * from. */
const char *core_peer_name(const peer *p);
void core_push_action(stitch_swarm *s, const stitch_swarm_action *a);
int core_send(stitch_swarm *s, peer *p, const wire_msg *m);
/* P may have something for the driver now: bytes, or a request queued
 * (serve) or a chunk on its way out (sending), which stitch_swarm_peer_pending
 * acts on. Every change that makes it so calls this. */
void core_sendable(stitch_swarm *s, peer *p);
/* Queues C for P, after its other requests (there is room: the caller
 * checked); a first one starts P's wait for a serving slot. */
void core_serve_add(stitch_swarm *s, peer *p, const chunk_id *c);
/* Sends M, a CHUNK whose data came from chunk_read: its payload is not
 * copied, and chunk_release is called for it once it is sent or P is
 * gone. One at a time per peer. */
int core_send_chunk(stitch_swarm *s, peer *p, const wire_msg *m);
void core_drop(stitch_swarm *s, peer *p, int ban, const char *why);
/* Charges (or credits) ready peer P for EV (score.h); drops and
 * greylists it when its score falls below SCORE_DROP (never the seed,
 * whose key is the root of trust). 1 when P was dropped. */
int core_score(stitch_swarm *s, peer *p, score_ev ev);
int core_banned_key(const stitch_swarm *s, const stitch_pubkey *k);
vstate *core_find_version(stitch_swarm *s, uint64_t v);
uint64_t core_random(stitch_swarm *s);
/* Links not free nor closing (READY_ONLY: ready ones); ready links to
 * our region (*SAME) and to others (*FAR). */
size_t core_count_peers(const stitch_swarm *s, int ready_only);
void core_count_ready(const stitch_swarm *s, size_t *same, size_t *far);
int core_banned_addr(const stitch_swarm *s, const char *a);

/* mesh.c: the neighbours a node keeps */
addr_entry *core_find_addr(stitch_swarm *s, const char *a);
/* A dial to E failed, or its link closed too soon. */
void core_addr_failed(stitch_swarm *s, addr_entry *e, uint64_t now_ms);
/* STITCH_ENOMEM when the address could not be kept. */
int core_learn_addr(stitch_swarm *s, const char *a, const char *region);
/* Dials what the limits want (CORE_MAINTAIN_MS apart). */
void core_maintain(stitch_swarm *s);
void core_send_peers(stitch_swarm *s, peer *p);
void core_on_peers(stitch_swarm *s, const wire_msg *m);

/* bits */
static inline int bits_get(const bits *b, uint64_t i) {
  return i < b->n && (b->b[i / 8] >> (i % 8)) & 1;
}
void bits_set(bits *b, uint64_t i);
/* The entry for (VERSION, OBJECT) among ARR's N, or NULL. Inline: it runs
 * for every peer at every event. */
static inline bits *bits_find(bits *arr, size_t n, uint64_t version,
                              uint32_t object) {
  for (size_t i = 0; i < n; i++)
    if (arr[i].version == version && arr[i].object == object)
      return &arr[i];
  return NULL;
}
bits *peer_bits_add(peer *p, uint64_t version, uint32_t object, uint64_t n);
/* What P holds of (VERSION, OBJECT), or NULL; with CREATE, an empty
 * bitset of N chunks is made for it if there is none (NULL if out of
 * memory). */
static inline bits *peer_bits(peer *p, uint64_t version, uint32_t object,
                              int create, uint64_t n) {
  bits *b = bits_find(p->have, p->n_have, version, object);
  return b != NULL || !create ? b : peer_bits_add(p, version, object, n);
}
bits *peer_offered(peer *p, uint64_t version, uint32_t object, uint64_t n);
bits *peer_told(peer *p, uint64_t version, uint32_t object);

/* Small facts the session and its policies (fetch.c, cross.c, seed.c)
 * share. */
static inline int same_chunk(const chunk_id *a, const chunk_id *b) {
  return a->version == b->version && a->object == b->object &&
         a->chunk == b->chunk;
}
static inline const stitch_chunk_ref *chunk_ref(vstate *v, uint32_t o,
                                                uint64_t c) {
  return &v->ref.m->objects[o].chunks[c];
}
/* M is a message of type T about chunk C, nothing else set. */
static inline void chunk_msg(wire_msg *m, wire_type t, const chunk_id *c) {
  wire_msg_clear(m);
  m->type = t;
  m->version = c->version;
  m->object = c->object;
  m->chunk = c->chunk;
}
/* Times about a version's chunks are kept as ms after the version arrived,
 * plus one, so 0 means "not yet". */
static inline uint32_t vstate_stamp(const stitch_swarm *s, const vstate *v) {
  uint64_t d = s->now_ms - v->added_ms + 1;
  return d < UINT32_MAX ? (uint32_t)d : UINT32_MAX;
}
static inline uint64_t vstate_at(const vstate *v, uint32_t stamp) {
  return v->added_ms + stamp - 1;
}
/* A peer of another region, not the seed. */
static inline int peer_far(const peer *p) {
  return !p->is_seed && !p->same_region;
}
/* A ready neighbour of our region, not the seed. */
static inline int peer_near(const peer *p) {
  return p->state == PEER_READY && !p->is_seed && p->same_region;
}
/* Does P hold chunk C, as far as it told us? */
static inline int peer_holds(peer *p, const chunk_id *c) {
  const bits *h = peer_bits(p, c->version, c->object, 0, 0);
  return h != NULL && bits_get(h, c->chunk);
}

void core_ready(stitch_swarm *s, peer *p);
void core_send_manifests(stitch_swarm *s, peer *p);
/* Does a node that has said nothing yet want object O of V? */
int core_wanted_by_all(const stitch_swarm *s, const vstate *v, uint32_t o);

/* handshake.c */
/* Draws P's ephemeral key and queues its HELLO, in clear. */
void hs_open(stitch_swarm *s, peer *p);
void hs_on_hello(stitch_swarm *s, peer *p, const wire_msg *m);
/* Verifies P's AUTH and admits it (core_ready), or refuses it. */
void hs_on_auth(stitch_swarm *s, peer *p, const wire_msg *m);
/* Takes a signed policy from the agent (FROM NULL) or a peer: 1 when
 * newer and now held, 0 when not newer, negative when it does not
 * verify. */
int hs_policy(stitch_swarm *s, const uint8_t *buf, size_t len, peer *from,
              stitch_diag *d);
void hs_send_policy(stitch_swarm *s, peer *p);
/* Drops links whose ticket expired or whose key is revoked (tick). */
void hs_check_links(stitch_swarm *s);

/* gossip.c: how manifests spread */
void gossip_known(peer *p, uint64_t version);
/* Sends P the manifest of V, which P holds from then on. */
void gossip_send(stitch_swarm *s, peer *p, const vstate *v);
/* Has P the manifest of V, as far as we know? */
int gossip_knows(peer *p, const vstate *v);
/* V is new (from FROM, or NULL: the agent): to every neighbour, or in
 * turn. */
void gossip_new(stitch_swarm *s, vstate *v, peer *from);
/* Sends lazy manifests' next copies, as many as may be out. */
void gossip_pump(stitch_swarm *s);
/* P's link asks for more bytes: a copy of ours sent before is out. */
void gossip_on_asked(stitch_swarm *s, peer *p);
void gossip_peer_gone(stitch_swarm *s, peer *p);
/* Before M goes to P: its version's manifest, if P may lack it. */
void gossip_ensure(stitch_swarm *s, peer *p, const wire_msg *m);
/* A HAVE or BITFIELD (FIELD) of a version we do not know: 1 when kept
 * for its manifest. */
int gossip_pend(stitch_swarm *s, peer *p, const wire_msg *m, int field);
/* V is new: what peers announced of it before counts now. */
void gossip_adopt(stitch_swarm *s, vstate *v);
/* Charges P for announcements whose manifest never came. */
void gossip_tick(stitch_swarm *s, peer *p);

/* reach.c */
/* Tells the seed which other regions our links reach: P, a seed link
 * just ready, at once; with P NULL, every seed link if that changed. */
void reach_tell(stitch_swarm *s, peer *p);
/* Seed: the regions a receiver should reach, those of its peers and known
 * addresses and those two peers reach (maintain, every CORE_MAINTAIN_MS). */
void reach_regions(stitch_swarm *s);
void reach_on_msg(stitch_swarm *s, peer *p, const wire_msg *m);
/* Seed: do P and its links reach every region (reach_regions)? Never
 * before P has said (REACH). */
int reach_all(stitch_swarm *s, const peer *p);

#endif
