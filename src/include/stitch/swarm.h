/* stitch/swarm.h: the swarm's protocol core, sans I/O (docs/swarm.md,
 * proto/wire.md).
 *
 * One stitch_swarm is one node (or the seed). It never touches sockets,
 * files, clocks or randomness: a driver (libuv in stitchd, SimGrid in
 * stitch-sim, an in-memory network in the tests) feeds it the bytes each
 * peer sent with the current time, takes the bytes it wants to send, calls
 * stitch_swarm_tick when stitch_swarm_wake says, and carries out the
 * actions it asks for (connect to an address, close a peer, apply a
 * version). Chunk and manifest storage and randomness come in through
 * stitch_swarm_io. Given the same inputs, times and random numbers, a core
 * does the same thing: the simulator relies on it.
 *
 * The model is nghttp2's session: bytes in, bytes out, callbacks for what
 * the application owns. */
#ifndef STITCH_SWARM_H
#define STITCH_SWARM_H

#include "stitch/admit.h"
#include "stitch/store.h"
#include "stitch/version.h"

#include "stitch/export.h"

#ifdef __cplusplus
extern "C" {
#endif
STITCH_API_BEGIN

#define STITCH_SWARM_ADDR_MAX 128   /* "host:port", NUL included */
#define STITCH_SWARM_REGION_MAX 32

/* What the core needs from its host. Every function gets `user`. */
typedef struct stitch_swarm_io {
  void *user;
  /* Uniform 64-bit random numbers (tests and the simulator seed them). */
  uint64_t (*random)(void *user);
  /* Chunk storage. read gives a pointer the core reads until it calls
   * release (a mapping, or memory the host keeps; release may be NULL when
   * there is nothing to give back). write gets a chunk whose hash the core
   * has checked (unless config.write_verifies); it must be durable or at
   * least readable when it returns 0. */
  int (*chunk_has)(void *user, const stitch_digest *hash);
  int (*chunk_read)(void *user, const stitch_digest *hash,
                    const uint8_t **buf, size_t *len);
  void (*chunk_release)(void *user, const uint8_t *buf, size_t len);
  int (*chunk_write)(void *user, const stitch_digest *hash,
                     const uint8_t *buf, size_t len);
  /* A manifest the core verified and will act on. */
  int (*manifest_write)(void *user, const uint8_t *buf, size_t len);
  /* One line per event that matters; may be NULL. */
  void (*log)(void *user, const char *line);
  /* The time of day, Unix seconds, for tickets' expiry: the one clock the
   * core reads through its host (the simulator and tests give virtual
   * time). */
  uint64_t (*unix_time)(void *user);
  /* A newer signed policy (stitch/admit.h) the core verified and acts on:
   * the host keeps it for its next start. May be NULL. */
  int (*policy_write)(void *user, const uint8_t *buf, size_t len);
} stitch_swarm_io;

typedef struct stitch_swarm_config {
  stitch_pubkey swarm;          /* the trainer's key: the root of trust */
  stitch_pubkey node_pk;        /* this node's identity */
  stitch_seckey node_sk;
  char listen[STITCH_SWARM_ADDR_MAX]; /* advertised to peers; "" if none */
  char region[STITCH_SWARM_REGION_MAX];
  int seed;                     /* the trainer's seed: super-seeds, never
                                   fetches */
  unsigned max_peers;           /* 0: 8 */
  unsigned cross_region;        /* links kept to other regions; 0: 2 */
  unsigned pipeline;            /* requests in flight per peer; 0: 4
                                   (twice to our region while behind) */
  /* What the weights hold when the core starts (0: nothing). */
  uint64_t held_version;
  stitch_digest held_id;
  /* 1: chunk_write checks a chunk's bytes against its name itself and
   * returns STITCH_ECHECKSUM when they differ, which the core then treats
   * as a chunk that does not verify (its sender is banned) instead of
   * hashing it first. stitchd sets it, since stitch_store_put_chunk
   * hashes what it writes: the one hash on a node's path (the apply then
   * trusts the store's proof). The simulator sets it too: its chunk table
   * holds bytes known to hash to every name, and comparing is the same
   * check at a fraction of BLAKE2b's cost. 0: the core hashes first. */
  int write_verifies;
  /* This node's ticket (stitch/admit.h), shown in every handshake. None
   * (ticket_len 0) for the seed, whose node key is the swarm key, or in an
   * open swarm. */
  uint8_t ticket[STITCH_TICKET_BYTES];
  size_t ticket_len;
  /* 1: after the handshake, frames cross the link unsealed. For the
   * simulator alone, which models links, not the CPU that encryption
   * costs; a peer expecting records drops such a link at its first byte.
   * stitchd never sets it. */
  int cipher_none;
  /* This node's uplink in bytes per second, where it is known (stitchd
   * --up-mbit): the node serves as many requesters at once as fill it
   * (docs/swarm.md "Serving as many as fill the uplink"). 0: unknown;
   * the node estimates it from what it moves, probing with more at once
   * where that looks full. */
  uint64_t up_bytes_per_s;
  /* 1: a log line for every chunk handed to a link and every chunk taken
   * ("chunk: ..."), to follow a version hop by hop (tools/hops): stitchd
   * --log-chunks, stitch-sim STITCH_SIM_LOG=2. */
  int log_chunks;
} stitch_swarm_config;

typedef struct stitch_swarm stitch_swarm;

/* IO is copied. Manifests already held (a restart) are given with
 * stitch_swarm_add_manifest before the first peer. */
int stitch_swarm_new(const stitch_swarm_config *cfg,
                     const stitch_swarm_io *io, stitch_swarm **out,
                     stitch_diag *d);
void stitch_swarm_free(stitch_swarm *s);

/* ---- Peers: the driver's side ----------------------------------------- */

/* A transport to a peer is up (OUTBOUND: we dialed ADDR). Returns its id.
 * STITCH_ELIMIT when the core holds as many peer slots as it ever will
 * (its links' limits plus those the driver has yet to close): close the
 * transport; no peer_close follows. */
int stitch_swarm_peer_open(stitch_swarm *s, uint64_t now_ms, int outbound,
                           const char *addr, uint32_t *peer);
/* Bytes the peer sent. A nonzero return means the core dropped the peer
 * (a protocol violation, a bad chunk, a limit): close the transport, then
 * call stitch_swarm_peer_close for it, which frees the slot. */
int stitch_swarm_peer_recv(stitch_swarm *s, uint32_t peer, const uint8_t *buf,
                           size_t len, uint64_t now_ms);
/* Bytes waiting to go to the peer (*len 0: none). They stay valid until
 * stitch_swarm_peer_sent or the next call into the core for this peer.
 * Ask when the link can take more, not sooner: the core chooses then
 * what the peer gets next (a chunk, and whom to serve first), and takes
 * a call made with everything it gave already sent to mean that those
 * bytes are on their way out (stitchd keeps little unsent in each
 * socket, TCP_NOTSENT_LOWAT; docs/swarm.md "One core, several
 * drivers"). */
void stitch_swarm_peer_pending(stitch_swarm *s, uint32_t peer,
                               const uint8_t **buf, size_t *len);
void stitch_swarm_peer_sent(stitch_swarm *s, uint32_t peer, size_t n);
/* The peers that may have something for stitch_swarm_peer_pending:
 * bytes, or a chunk to choose when asked. Asking any other peer gives
 * nothing and changes nothing, so a driver that flushes after every
 * call into the core may ask these alone. *N ids, in no particular
 * order, valid until the next call into the core. */
const uint32_t *stitch_swarm_sendable(stitch_swarm *s, size_t *n);
/* Grows each time a peer joins that list. Asking one peer for its bytes
 * can give another some (a chunk sent to one is passed to another): a
 * driver that flushes its peers in its own order reads the list again
 * when this moved. */
uint64_t stitch_swarm_sendable_gen(const stitch_swarm *s);
/* How many bytes of a write of LEN a driver lets wait unsent before it
 * asks for more (stitchd: TCP_NOTSENT_LOWAT): an eighth of them, at
 * least STITCH_SWARM_LOWAT_MIN (so more than LEN for a small write), so
 * that the next chunk is chosen about as long before the link wants it
 * whatever the chunk size (64 KiB of a 512 KiB chunk, 0.5 ms at 1
 * Gbit/s; 16 KiB of a 64 KiB one, 1.3 ms at 100 Mbit/s). A write of at
 * most STITCH_SWARM_LOWAT_MIN (control frames) leaves the mark as it is.
 * docs/swarm.md "One core, several drivers". */
#define STITCH_SWARM_LOWAT_MIN (16u << 10)
size_t stitch_swarm_lowat(size_t len);
/* The transport is gone (either side closed it). */
void stitch_swarm_peer_close(stitch_swarm *s, uint32_t peer, uint64_t now_ms);
/* A CONNECT to ADDR failed before any transport existed (refused,
 * unreachable, no such name): the core tries that address again later,
 * backing off, instead of waiting out its connect timeout. Unknown
 * addresses and addresses not being dialed are ignored. */
void stitch_swarm_dial_failed(stitch_swarm *s, const char *addr,
                              uint64_t now_ms);

/* Timers: keepalives, request timeouts, neighbour refresh, re-planning.
 * stitch_swarm_wake gives the time (ms) the core next wants a tick. */
int stitch_swarm_tick(stitch_swarm *s, uint64_t now_ms);
uint64_t stitch_swarm_wake(const stitch_swarm *s);

/* What the core asks the driver or the agent to do. */
typedef enum stitch_swarm_action_kind {
  STITCH_SWARM_NONE = 0,
  STITCH_SWARM_CONNECT, /* dial addr, then stitch_swarm_peer_open(outbound) */
  STITCH_SWARM_CLOSE,   /* close peer's transport, then peer_close */
  STITCH_SWARM_APPLY    /* every chunk of (version, object) is held: apply
                           it, then call stitch_swarm_applied */
} stitch_swarm_action_kind;

/* A CONNECT's flags. */
/* Dial from the node's one fixed local port: a node that advertises no
 * address (behind a NAT) makes every connection from the same port, so
 * that a NAT which maps a port the same for every destination (endpoint-
 * independent mapping, as Linux's masquerade keeps the port) shows every
 * peer the same address: the one a relay passes on for a punch. */
#define STITCH_SWARM_DIAL_FIXED 1u
/* A hole punch (docs/swarm.md "Hole punching"): the peer at addr dials
 * us at about the same time, and the two SYNs make one connection (TCP's
 * simultaneous open); it has no listener. A driver dials it as any other
 * (with DIAL_FIXED) and reports it outbound. Its addr is one a relay saw
 * on its transport: a driver on a real network dials it only as a
 * numeric address and never looks a name up (it reports the dial failed;
 * docs/security.md "Hole punching"). */
#define STITCH_SWARM_DIAL_PUNCH 2u

typedef struct stitch_swarm_action {
  stitch_swarm_action_kind kind;
  uint32_t peer;
  char addr[STITCH_SWARM_ADDR_MAX];
  uint64_t version;
  uint32_t object; /* APPLY */
  uint32_t flags;  /* CONNECT: STITCH_SWARM_DIAL_* */
} stitch_swarm_action;

/* Takes the next action (kind NONE when there is none). */
void stitch_swarm_next_action(stitch_swarm *s, stitch_swarm_action *a);

/* What a host does for each kind of action, for stitch_swarm_drain. Every
 * operation gets `user` and may call back into the core: a close tells
 * it stitch_swarm_peer_close, an apply that ends at once answers
 * stitch_swarm_applied from inside. How the host carries an action out
 * (a socket, a simulated pipe, a thread pool) is its own; what it must
 * tell the core afterwards is said at each kind above. A NULL operation
 * drops its kind: the core times such a CONNECT out, and waits for such
 * an APPLY until it is answered. */
typedef struct stitch_swarm_host {
  void *user;
  void (*connect)(void *user, const char *addr, unsigned flags);
  void (*close)(void *user, uint32_t peer);
  void (*apply)(void *user, uint64_t version, uint32_t object);
} stitch_swarm_host;

/* Actions one stitch_swarm_drain takes at most. The core queues at most a
 * few hundred, but each operation may queue more: a drain that goes on
 * this long is a core and a host answering each other in a loop, a bug of
 * ours, not a peer's doing. */
#define STITCH_SWARM_DRAIN_MAX 100000u

/* Takes every action the core has queued, and those queued meanwhile by
 * the operations' calls into it, and hands each to HOST, in order (the
 * loop every driver runs after it called into the core). *TAKEN (may be
 * NULL) counts them. STITCH_ELIMIT after STITCH_SWARM_DRAIN_MAX actions:
 * the rest stay queued. A drain may run inside an operation of another
 * (a close that the host follows with a drain of its own). HOST is not
 * kept. */
int stitch_swarm_drain(stitch_swarm *s, const stitch_swarm_host *host,
                       size_t *taken);

/* ---- The agent's side ------------------------------------------------- */

/* A peer address to try (from the command line or a config file);
 * STITCH_EINVAL for an empty or over-long one, or one holding a control
 * byte (a str on the wire holds none); STITCH_ENOMEM when it could not be
 * kept. */
int stitch_swarm_add_peer_addr(stitch_swarm *s, const char *addr,
                               const char *region);
/* A signed manifest from outside the swarm: the seed's newly published
 * version, or one already in the node's store at start. Verified here;
 * gossiped to every neighbour when new. */
int stitch_swarm_add_manifest(stitch_swarm *s, const uint8_t *buf, size_t len,
                              uint64_t now_ms, stitch_diag *d);
/* A signed policy (stitch/admit.h): the store's at start, or a newer one
 * the trainer signed (`stitch revoke`). Verified here; kept, acted on
 * (links to revoked nodes dropped) and gossiped when its serial is above
 * the one held; an older or equal one is ignored (0). */
int stitch_swarm_set_policy(stitch_swarm *s, const uint8_t *buf, size_t len,
                            uint64_t now_ms, stitch_diag *d);
/* The agent applied (version, id): the weights hold it now. */
int stitch_swarm_applied(stitch_swarm *s, uint64_t version,
                         const stitch_digest *id, uint64_t now_ms);
/* The agent failed to apply: the core fetches that object again from
 * other peers (its chunks are dropped from the held set). */
int stitch_swarm_apply_failed(stitch_swarm *s, uint64_t version,
                              uint32_t object, uint64_t now_ms);

/* The manifests the core holds, ascending (for planning and applying).
 * Valid until the next call that can give the core a manifest
 * (stitch_swarm_add_manifest, stitch_swarm_peer_recv). */
size_t stitch_swarm_versions(const stitch_swarm *s, const stitch_vref **v);
/* The one of VERSION among them, or NULL (as stitch_store_find): what an
 * APPLY names. */
const stitch_vref *stitch_swarm_find_version(const stitch_swarm *s,
                                             uint64_t version);

typedef struct stitch_swarm_stats {
  uint64_t held_version;    /* applied */
  uint64_t latest_version;  /* newest verified manifest */
  uint64_t fetching_version;
  uint64_t fetch_done, fetch_total; /* chunks of the plan in flight */
  uint32_t peers;
  uint32_t peers_same_region;          /* of peers, those of our region */
  uint64_t bytes_up, bytes_down;       /* chunk payloads */
  uint64_t bytes_from_seed, bytes_same_region, bytes_other_region;
  uint64_t bytes_to_same_region, bytes_to_other_region;
  uint64_t verify_failures;  /* chunks or manifests that did not verify */
  uint64_t chunks_twice;     /* chunks that came again once held: waste */
  uint64_t bans;
  uint64_t manifests_forwarded;
  uint64_t refused;       /* handshakes refused: no ticket, a bad one,
                             revoked, another swarm */
  uint64_t policy_serial; /* of the policy held (0: none) */
  /* Peers dropped because their score fell below the threshold (lies,
   * stalls, unasked chunks, floods; docs/security.md "Hostile members"),
   * and handshakes refused because the key was greylisted. */
  uint64_t greylisted;
  uint64_t grey_refused;
  uint64_t unasked_chunks; /* CHUNKs not asked for that were no use */
  /* Hole punching (docs/swarm.md "Hole punching"): asks we sent a relay,
   * punch dials we made (as the asker or the one asked), punched links
   * that became ready, PUNCHes we relayed, and PUNCHes we ignored (from
   * or for a node we cannot relay for, not asked). */
  uint64_t punch_asked, punch_dialed, punch_linked;
  uint64_t punch_relayed, punch_ignored;
  /* PUNCHes past a peer's rate (each charged to its score), punch
   * addresses refused by their scope (a loopback, link-local or multicast
   * one; a private one from a relay at a public address; docs/security.md
   * "Hole punching"), and punch dials that ended with no link (no answer
   * in time, the dial failed, the link closed or proved another key). */
  uint64_t punch_dropped, punch_refused, punch_failed;
  /* Serving slots: requesters of our region served at once (one far
   * behind the others takes two): 4, or more while a node finds its
   * uplink not full (config.up_bytes_per_s, told or estimated). */
  uint32_t serve_slots;
  /* The uplink's rate in bytes per second that serving fills: as told,
   * else as estimated from what the node moved (0: not yet). */
  uint64_t up_bytes_per_s;
} stitch_swarm_stats;

void stitch_swarm_get_stats(const stitch_swarm *s, stitch_swarm_stats *st);

STITCH_API_END
#ifdef __cplusplus
}
#endif
#endif
