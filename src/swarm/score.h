/* score.h: what a peer is worth to us, and the greylist of peers that
 * fell too low (docs/security.md "Hostile members"). In the spirit of
 * gossipsub v1.1's peer scores and libtorrent's smart-ban: a member with a
 * valid ticket (or anyone, in an open swarm) may still lie about what it
 * holds, serve slowly, push what nobody asked for, flood messages or hold
 * slots. Each such event costs it points, useful chunks earn it a few
 * (capped), and the sum decays toward 0 with a half-life, so an old
 * mistake is forgiven and old service buys no licence. Below
 * SCORE_DROP the peer is dropped and greylisted for SCORE_GREY_MS.
 *
 * The module knows nothing of the swarm's state: core.c and fetch.c call
 * score_add at the events, with the core's now_ms (no clock is read). A
 * score is a few words per peer; the greylist is a fixed array. */
#ifndef STITCH_SWARM_SCORE_H
#define STITCH_SWARM_SCORE_H

#include "stitch/swarm.h"

#include <stddef.h>
#include <stdint.h>

/* A score halves every minute: a flood of a second weighs the same for a
 * minute, and an honest peer's few bad moments (a request lost in a
 * reconnect, a duplicate push) are gone a few minutes on. */
#define SCORE_HALF_LIFE_MS 60000
/* Positive credit stops here: a peer that served well for an hour can
 * still be dropped after SCORE_MAX - SCORE_DROP (70) points of harm. */
#define SCORE_MAX 20.0
#define SCORE_DROP (-50.0)
/* Greylisted for this long (by key, and by the address we dialed), then
 * forgiven: unlike a ban (a chunk that does not verify, a malformed
 * frame), a low score may be a bad link rather than malice. */
#define SCORE_GREY_MS (10 * 60 * 1000)
/* Greylist entries; when full, the one that expires first makes room.
 * 256 x 168 bytes: 42 KiB per node. */
#define SCORE_GREY_MAX 256
/* A request not answered in this long, while nothing came from the peer,
 * is a stall (charged once per SCORE_STALL_MS): an honest uplink of 100
 * Mbit/s shared by 4 serves a queue of twice the pipeline of 512 KiB
 * chunks in 1.3 s (fetch.c request_depth). */
#define SCORE_STALL_MS 5000
/* A request is late once it waited SCORE_LATE_FACTOR times the usual
 * wait for a chunk, and at least SCORE_LATE_MIN_MS: four times the
 * endgame's own patience (CORE_LATE_FACTOR), so a peer merely busier
 * than the rest is seldom charged. Its holdings are then believed no
 * more (fetch.c forget_holdings) until its next HAVE. */
#define SCORE_LATE_FACTOR 8.0
#define SCORE_LATE_MIN_MS 1000

typedef enum score_ev {
  SCORE_USEFUL,     /* +1: a chunk we lacked, verified */
  SCORE_REJECT,     /* -4: a REJECT of a chunk it advertised (13 drop a
                       liar with no credit: about 3 pipelines) */
  SCORE_TIMEOUT,    /* -10: a request of ours it never answered (15 s) */
  SCORE_LATE,       /* -2: a request that went late (once per request) */
  SCORE_STALL,      /* -10: requests out, nothing from it for 5 s */
  SCORE_UNASKED,    /* -1: a CHUNK nobody asked for that we held, or of a
                       version we do not know: at 2 MB/s of 4 KiB chunks a
                       pusher is gone in a tenth of a second; an honest
                       push lands twice seldom (fetch.c push_near) */
  SCORE_NO_VERSION, /* -1: a HAVE or BITFIELD of a version newer than any
                       we know, beyond the CORE_PENDING_MAX kept for their
                       manifests, or kept CORE_PENDING_MS and no manifest
                       came (gossip.c): there is no such version */
  SCORE_STALE,      /* -0.05: a HAVE or BITFIELD of an old version we do
                       not keep (an honest peer behind sends a few) */
  SCORE_DUP_MANIFEST, /* -0.2: a manifest we hold already (each neighbour
                       sends each version once, and those since the
                       newest anchor when the link comes up) */
  SCORE_EMPTY,      /* -0.05: a HAVE or repeated BITFIELD that tells
                       nothing new */
  SCORE_SILENT,     /* -100: dropped for silence, holding a slot */
  SCORE_OUTRUN,     /* -4: a chunk we asked it for first came from a peer
                       asked later, and it sent nothing at all since we
                       asked (fetch.c outrun): a liar's requests are
                       cancelled so, never reaching SCORE_LATE */
  SCORE_PUNCH_FLOOD, /* -1: a PUNCH past PUNCH_RELAY_PER_S a second
                       (punch.c): a flooder is gone after some fifty in
                       its first second; an honest peer starts at most
                       PUNCH_SEND_PER_S a second with us and its answers
                       to ours are not counted, so it is never charged */
  SCORE_N_
} score_ev;

typedef struct score {
  double v;        /* as of at_ms */
  uint64_t at_ms;
  uint32_t n[SCORE_N_]; /* events of each kind, for the log */
} score;

void score_init(score *sc, uint64_t now_ms);
/* Adds event EV at NOW_MS; 1 when the score is now below SCORE_DROP. */
int score_add(score *sc, score_ev ev, uint64_t now_ms);
double score_value(const score *sc, uint64_t now_ms);
/* "reject 3, timeout 1": the events seen, into BUF. */
void score_describe(const score *sc, char *buf, size_t len);

typedef struct grey_entry {
  stitch_pubkey key;
  char addr[STITCH_SWARM_ADDR_MAX]; /* "" when it dialed us */
  uint64_t until_ms;
} grey_entry;

typedef struct greylist {
  grey_entry e[SCORE_GREY_MAX];
  size_t n;
} greylist;

/* Greylists KEY and ADDR (may be NULL or "": only a dialed address is
 * known to be the peer's) until NOW_MS + SCORE_GREY_MS. */
void grey_add(greylist *g, const stitch_pubkey *key, const char *addr,
              uint64_t now_ms);
int grey_key(const greylist *g, const stitch_pubkey *key, uint64_t now_ms);
int grey_addr(const greylist *g, const char *addr, uint64_t now_ms);

#endif
