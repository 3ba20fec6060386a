/* swarm_net.h: an in-memory network in virtual time that runs many
 * stitch_swarm cores deterministically, for tests (issue 4: "tests drive
 * the core in memory, without sockets, through scripted exchanges").
 * Header-only: one test includes it.
 *
 * - A node is a real core with an in-memory chunk store, a region and an
 *   applier. The applier decodes an APPLY'd object into in-memory tensors
 *   and checks every tensor digest against the manifest before it calls
 *   stitch_swarm_applied, so "applied" means bit-exact.
 * - A connection is two one-way pipes. Every virtual millisecond a node
 *   pushes at most its upload rate, shared round-robin over its pipes, each
 *   capped at the link's rate (local or cross-region); bytes arrive one
 *   link latency later. Upload is the bottleneck, so super-seeding,
 *   pipelining and rarest-first show in the figures.
 * - Nothing reads a clock or the OS's randomness: keys, random numbers and
 *   the order of every event follow from the seed.
 * - An evil node runs a real core (so its handshake is genuine) whose
 *   outgoing frames pass through a rewriter that parses them with wire.h:
 *   it flips a byte of every CHUNK, or right after its AUTH injects an
 *   oversized CHUNK header (then dribbles), malformed frames, a frame of
 *   an unknown type or a forged manifest. It attacks only the links the
 *   test opens (sn_link; its own CONNECTs are ignored) and never closes
 *   one: when its core lets go, the injected bytes keep flowing.
 * - Virtual time starts at 0, as a simulator's does.
 * - A monitor parses what every pipe delivers: frames by type per
 *   receiver, and which nodes received a watched manifest. */
#ifndef STITCH_TEST_SWARM_NET_H
#define STITCH_TEST_SWARM_NET_H

#include "common/diag.h"
#include "stitch/swarm.h"
#include "swarm/wire.h"
#include "test.h"

#include <malloc.h>
#include <sodium.h>
#include <stdarg.h>

#define SN_MAX_NODES 32
#define SN_MAX_VERSIONS 16
#define SN_LOG_LINES 24
#define SN_WATCH 4
#define SN_HUGE_FRAME (30u << 20) /* what SN_EVIL_HUGE's header claims */
#define SN_GARBAGE_FRAMES 5000
#define SN_MAX_LINKS 256 /* open links of one node */

/* ---- In-memory chunk store: open addressing on the digest ------------- */

typedef struct sn_chunk {
  stitch_digest h;
  uint8_t *p; /* NULL: an empty slot */
  size_t len;
} sn_chunk;

typedef struct sn_store {
  sn_chunk *slot;
  size_t cap, n; /* cap a power of two, n < cap / 2 */
  uint64_t bytes;
} sn_store;

static size_t sn_slot_of(const sn_store *s, const stitch_digest *h) {
  uint64_t k;
  memcpy(&k, h->b, 8);
  size_t i = (size_t)k & (s->cap - 1);
  while (s->slot[i].p != NULL && memcmp(s->slot[i].h.b, h->b, 32) != 0)
    i = (i + 1) & (s->cap - 1);
  return i;
}

static const sn_chunk *sn_store_get(const sn_store *s,
                                    const stitch_digest *h) {
  if (s->cap == 0)
    return NULL;
  const sn_chunk *c = &s->slot[sn_slot_of(s, h)];
  return c->p != NULL ? c : NULL;
}

/* Copies BUF in; a chunk already held is left alone. */
static void sn_store_put(sn_store *s, const stitch_digest *h,
                         const uint8_t *buf, size_t len) {
  if (2 * (s->n + 1) >= s->cap) {
    sn_store old = *s;
    s->cap = old.cap ? old.cap * 2 : 256;
    s->slot = calloc(s->cap, sizeof(*s->slot));
    ASSERT(s->slot != NULL);
    for (size_t i = 0; i < old.cap; i++)
      if (old.slot[i].p != NULL)
        s->slot[sn_slot_of(s, &old.slot[i].h)] = old.slot[i];
    free(old.slot);
  }
  sn_chunk *c = &s->slot[sn_slot_of(s, h)];
  if (c->p != NULL)
    return;
  c->h = *h;
  c->p = malloc(len ? len : 1);
  ASSERT(c->p != NULL);
  memcpy(c->p, buf, len);
  c->len = len;
  s->n++;
  s->bytes += len;
}

static void sn_store_free(sn_store *s) {
  for (size_t i = 0; i < s->cap; i++)
    free(s->slot[i].p);
  free(s->slot);
  memset(s, 0, sizeof(*s));
}

/* ---- Nodes, pipes, the network ---------------------------------------- */

typedef enum sn_evil {
  SN_HONEST = 0,
  SN_EVIL_FLIP,     /* flips one byte in every CHUNK it sends */
  SN_EVIL_HUGE,     /* after AUTH: a CHUNK header of 30 MiB, then dribbles */
  SN_EVIL_GARBAGE,  /* after AUTH: thousands of malformed frames */
  SN_EVIL_UNKNOWN,  /* after AUTH: a frame of an unknown type */
  SN_EVIL_MANIFEST, /* after AUTH: the manifest bytes in evil_buf */
  SN_EVIL_REACH,    /* after AUTH: a REACH of 16 made-up regions, and none
                       of its own; otherwise honest */
  SN_EVIL_NOT_ME,   /* answers every request from another region with a
                       CROSSING naming a made-up node, not the chunk */
  SN_EVIL_PASS_LIE, /* to a peer of another region, each HAVE (of chunk
                       c) is a CROSSING naming that peer, a pass that never
                       comes, and the lie is told again of chunk c / 2 */
  SN_EVIL_TOLD_LIE, /* to a peer of another region, each HAVE is a
                       CROSSING naming a made-up node of that region: the
                       notice of a pass to another node that never comes */
  SN_EVIL_LIE_LATE, /* as PASS_LIE, but each lie is told again, word for
                       word, SN_LATE_MS after the first lie to that peer,
                       and no PEERS or BITFIELD frame goes to another
                       region (it tells what it holds by lies only), and
                       a REJECT goes there in place of each CHUNK */
  SN_EVIL_INTRUDER, /* an unmodified core whose credentials are its own
                       making (no ticket, a forged one, another's key):
                       the test sets them */
  SN_EVIL_EARLY,    /* right after its HELLO, before its AUTH: a MANIFEST
                       header of 64 MiB, then dribbles */
  /* Members with valid tickets that misbehave (test_hostile.c): */
  SN_EVIL_LIAR,     /* every BITFIELD it sends says it holds every chunk;
                       it sends no CHUNK and no REJECT (requests go
                       unanswered) */
  SN_EVIL_SLOW,     /* honest frames; the test gives it a slow uplink */
  SN_EVIL_REPEAT,   /* from evil_from on, evil_buf's frames again and
                       again: every evil_every ms, or (0) as fast as the
                       link takes them; otherwise honest */
  SN_EVIL_SILENT,   /* after its AUTH, sends nothing at all */
  SN_EVIL_ECLIPSE   /* as LIAR, and every PEERS it sends names the
                       listening ECLIPSE nodes and no one else */
} sn_evil;

/* Past CORE_CROSS_TRUST_MS (3 s), when a region no longer holds a chunk
 * back for a crossing it heard of. */
#define SN_LATE_MS 3500

struct sn_net;

typedef struct sn_node {
  struct sn_net *net;
  int idx;
  int started; /* has a core */
  int alive;   /* started and not killed */
  char name[16];
  char region[STITCH_SWARM_REGION_MAX];
  stitch_swarm *sw;
  stitch_swarm_config cfg;
  uint64_t rng; /* xorshift64* state */
  sn_store store;
  uint32_t up_bw; /* bytes per virtual ms; 0: the net's default */
  /* The applier's weights: tensor i of version w_version's manifest. */
  uint64_t w_version;
  stitch_digest w_id;
  size_t w_n;
  uint8_t **w_data;
  uint64_t *w_nbytes;
  uint64_t applied_at[SN_MAX_VERSIONS + 1]; /* virtual ms, 0: never */
  char path[96]; /* what it applied: "v1a v2d v5c", a/d/c the kind */
  unsigned applies, apply_errors, tick_errors;
  char apply_err[STITCH_DIAG_MAX + 32];
  uint64_t manifests_written, chunks_written, bad_writes;
  uint64_t write_rejects; /* with cfg.write_verifies: bad chunks we refused */
  /* Evil behaviour of its outgoing pipes. */
  sn_evil evil;
  int deaf_bids; /* every BID that arrives is dropped (a baseline) */
  uint64_t lies; /* CROSSING frames the rewriter made */
  const uint8_t *evil_buf;
  size_t evil_len;
  uint32_t dribble; /* bytes per ms after a HUGE header */
  int huge_type;    /* the HUGE header's type (0: CHUNK) and its length */
  uint32_t huge_len; /* (0: SN_HUGE_FRAME) */
  uint64_t evil_from, evil_every; /* SN_EVIL_REPEAT's pace */
  /* With net->track_heap: what this node's core keeps allocated (glibc's
   * mallinfo2 around each call into it, less what its store took in the
   * io callbacks), and its peak. */
  int64_t heap, heap_peak, heap_io;
  /* What the monitor saw arrive here, and of its frames elsewhere. */
  uint64_t rx_frames[WIRE_TYPE_COUNT_];
  uint64_t tx_frames[WIRE_TYPE_COUNT_];
  /* Its first CHUNK came before any REQUEST of its had arrived anywhere:
   * unasked (1), or maybe asked for (0); -1 before it came. */
  int first_chunk_unasked;
  uint64_t rx_seed_chunks; /* CHUNK frames from the seed */
  uint64_t watch_rx[SN_WATCH];
  /* The last lines the core logged. */
  char log[SN_LOG_LINES][200];
  unsigned log_n;
} sn_node;

typedef struct sn_seg {
  uint64_t at;  /* arrival, virtual ms */
  size_t end;   /* offset in the pipe's queue where it ends */
} sn_seg;

typedef struct sn_pipe {
  int from, to;
  uint32_t from_peer, to_peer; /* the ids each side's core gave */
  uint32_t bw, lat;
  dbuf q; /* bytes on the wire: q.p[head..q.len) */
  size_t head;
  sn_seg *seg;
  size_t nseg, seg_head, seg_cap;
  /* Evil senders: the rewriter's output waiting for the wire. */
  dbuf out;
  size_t out_head;
  wire_reader rw;
  int injected, dribbling;
  uint64_t next_at; /* SN_EVIL_REPEAT: when evil_buf goes again */
  dbuf late; /* SN_EVIL_LIE_LATE: LATE_N lies told again at LATE_AT */
  uint64_t late_at, late_n;
  /* An evil sender's core let go of the link (it asked to close it, or
   * refused what came back): an attacker keeps the transport open, so its
   * injected bytes still flow and what reaches it is dropped. */
  int core_gone;
  /* The monitor, on delivered bytes; for a receiver deaf to BIDs, the
   * frames it lets through. */
  wire_reader mon;
  int mon_dead;
  dbuf heard;
  uint64_t sent, delivered;
  /* With net->track_heap: what the receiver's core kept allocated across
   * its peer_recv calls for this pipe (glibc's mallinfo2). */
  int64_t heap_growth, heap_peak;
} sn_pipe;

typedef struct sn_conn {
  int open;
  int closed_by;      /* node index, -1 while open */
  int close_rc;       /* peer_recv's return when a receiver dropped it */
  uint64_t opened_ms, closed_ms;
  sn_pipe d[2];       /* d[0]: dialer to listener; d[1]: back */
} sn_conn;

typedef struct sn_dial {
  uint64_t at;
  int from, to;
  unsigned flags; /* STITCH_SWARM_DIAL_*; SN_DIAL_PUNCHED: both dialed */
} sn_dial;

/* NAT, as netlab's (docs/netlab.md "NAT"): a node with no listen address
 * is behind one. Dialing from its fixed port (STITCH_SWARM_DIAL_FIXED),
 * it is seen at "<name>.nat" by everyone (endpoint-independent mapping);
 * nothing that dials that address gets in, unless the node dialed the
 * dialer within SN_PUNCH_MS too (a punch: TCP's simultaneous open). */
#define SN_DIAL_PUNCHED 0x100u
#define SN_PUNCH_MS 5000
#define SN_PUNCHES 64
typedef struct sn_punch {
  uint64_t at;
  int from, to;
} sn_punch;

typedef struct sn_params {
  uint64_t seed;
  uint32_t up_bw;                 /* per node, bytes per ms */
  uint32_t bw_local, bw_remote;   /* per link, bytes per ms */
  uint32_t lat_local, lat_remote; /* ms */
  unsigned max_peers, pipeline;   /* 0: the core's defaults */
  /* 1: links are sealed as stitchd's (channel.h). 0, the default: the
   * handshake runs whole (keys, AUTH, tickets) but frames then cross in
   * clear (cfg.cipher_none), as the monitor and the evil rewriter read
   * them in transit. */
  int sealed;
} sn_params;

typedef struct sn_net {
  sn_params p;
  uint64_t now;
  uint64_t rng;
  stitch_pubkey swarm;
  stitch_seckey swarm_sk; /* signs every node's ticket (sn_add) */
  int n_nodes;
  sn_node node[SN_MAX_NODES];
  sn_conn *conn;
  size_t n_conn, conn_cap;
  sn_dial *dial;
  size_t n_dial, dial_cap;
  stitch_digest watch[SN_WATCH]; /* manifest ids the monitor counts */
  int n_watch;
  int verbose; /* STITCH_SWARM_LOG=1: print every core log line */
  int track_heap;
  uint64_t dials_failed;
  uint64_t dup_dials; /* CONNECTs to a node while one to it is in flight */
  uint64_t refused_at_open; /* peer_open refused by the listener's core */
  sn_punch punch[SN_PUNCHES]; /* punch dials waiting for the other side's */
  uint64_t punches_opened;    /* connections two punch dials made */
} sn_net;

static uint64_t sn_xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* A key pair derived from the net's seed, so runs repeat exactly. */
static void sn_keypair(uint64_t *rng, stitch_pubkey *pk, stitch_seckey *sk) {
  uint8_t seed[crypto_sign_SEEDBYTES];
  for (size_t i = 0; i < sizeof(seed); i += 8) {
    uint64_t v = sn_xorshift(rng);
    memcpy(seed + i, &v, 8);
  }
  ASSERT_EQ(crypto_sign_seed_keypair(pk->b, sk->b, seed), 0);
}

/* ---- The io a core gets ----------------------------------------------- */

static uint64_t sn_heap(void) {
  struct mallinfo2 mi = mallinfo2();
  return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

/* Around each call into node N's core, with net->track_heap. */
static uint64_t sn_h0(const sn_node *n);
static void sn_h1(sn_node *n, uint64_t h0);

static uint64_t sn_io_random(void *user) {
  return sn_xorshift(&((sn_node *)user)->rng);
}

static int sn_io_has(void *user, const stitch_digest *h) {
  return sn_store_get(&((sn_node *)user)->store, h) != NULL;
}

static int sn_io_read(void *user, const stitch_digest *h, const uint8_t **buf,
                      size_t *len) {
  const sn_chunk *c = sn_store_get(&((sn_node *)user)->store, h);
  if (c == NULL)
    return STITCH_ENOTFOUND;
  *buf = c->p;
  *len = c->len;
  return 0;
}

static void sn_io_release(void *user, const uint8_t *buf, size_t len) {
  (void)user, (void)buf, (void)len; /* the store keeps every chunk */
}

static int sn_io_write(void *user, const stitch_digest *h, const uint8_t *buf,
                       size_t len) {
  sn_node *n = user;
  stitch_digest got;
  stitch_hash(buf, len, &got);
  if (memcmp(got.b, h->b, 32) != 0) {
    if (n->cfg.write_verifies) /* our check, as the core was told */
      n->write_rejects++;
    else /* the core should have checked: it stored a bad chunk */
      n->bad_writes++;
    return STITCH_ECHECKSUM;
  }
  n->chunks_written++;
  uint64_t h0 = sn_h0(n);
  sn_store_put(&n->store, h, buf, len);
  if (n->net->track_heap) /* the store's, not the core's */
    n->heap_io += (int64_t)(sn_heap() - h0);
  return 0;
}

static int sn_io_manifest(void *user, const uint8_t *buf, size_t len) {
  (void)buf, (void)len;
  ((sn_node *)user)->manifests_written++;
  return 0;
}

/* Unix time at the harness's time 0, and as it goes on. */
#define SN_EPOCH_S 1800000000ull
static uint64_t sn_io_unix_time(void *user) {
  return SN_EPOCH_S + ((sn_node *)user)->net->now / 1000;
}

static void sn_io_log(void *user, const char *line) {
  sn_node *n = user;
  char *slot = n->log[n->log_n++ % SN_LOG_LINES];
  /* The time (at most 20 digits) and up to 170 bytes of the line fit. */
  snprintf(slot, sizeof(n->log[0]), "%6" PRIu64 " %.170s", n->net->now, line);
  if (n->net->verbose)
    fprintf(stderr, "[%s] %s\n", n->name, slot);
}

static uint64_t sn_h0(const sn_node *n) {
  return n->net->track_heap ? sn_heap() : 0;
}

static void sn_h1(sn_node *n, uint64_t h0) {
  if (!n->net->track_heap)
    return;
  n->heap += (int64_t)(sn_heap() - h0) - n->heap_io;
  n->heap_io = 0;
  if (n->heap > n->heap_peak)
    n->heap_peak = n->heap;
}

/* ---- Setting up ------------------------------------------------------- */

static void sn_init(sn_net *net, const sn_params *p,
                    const stitch_pubkey *swarm, const stitch_seckey *sk) {
  memset(net, 0, sizeof(*net));
  net->p = *p;
  net->rng = p->seed * 0x9e3779b97f4a7c15ull + 1;
  net->swarm = *swarm;
  net->swarm_sk = *sk;
  const char *e = getenv("STITCH_SWARM_LOG");
  net->verbose = e != NULL && *e == '1';
}

/* Adds node "n<i>" (not started). A seed super-seeds and never fetches;
 * LISTEN 0 leaves it undialable (evil nodes). */
static sn_node *sn_add(sn_net *net, const char *region, int seed,
                       int listen) {
  ASSERT(net->n_nodes < SN_MAX_NODES);
  sn_node *n = &net->node[net->n_nodes];
  memset(n, 0, sizeof(*n));
  n->net = net;
  n->idx = net->n_nodes++;
  n->first_chunk_unasked = -1;
  snprintf(n->name, sizeof(n->name), "n%d", n->idx);
  snprintf(n->region, sizeof(n->region), "%s", region);
  n->rng = sn_xorshift(&net->rng) | 1;
  stitch_swarm_config *c = &n->cfg;
  c->swarm = net->swarm;
  sn_keypair(&net->rng, &c->node_pk, &c->node_sk);
  /* A member of a closed swarm: the trainer's ticket for its key. */
  stitch_ticket t = {net->swarm, c->node_pk, STITCH_ROLE_NODE, SN_EPOCH_S, 0};
  stitch_diag td = {{0}};
  ASSERT_OK(stitch_ticket_sign(&t, &net->swarm_sk, c->ticket, &td), td);
  c->ticket_len = STITCH_TICKET_BYTES;
  if (listen)
    memcpy(c->listen, n->name, sizeof(n->name));
  snprintf(c->region, sizeof(c->region), "%s", region);
  c->seed = seed;
  c->max_peers = net->p.max_peers;
  c->pipeline = net->p.pipeline;
  return n;
}

static void sn_actions(sn_net *net, sn_node *n);

/* The io callbacks of N's core: the harness's store, log and clock. */
static stitch_swarm_io sn_io(sn_node *n) {
  stitch_swarm_io io = {n,           sn_io_random,  sn_io_has,
                        sn_io_read,  sn_io_release, sn_io_write,
                        sn_io_manifest, sn_io_log, sn_io_unix_time,
                        NULL};
  return io;
}

/* Creates the core now; PEERS[0..npeers) are node indices it is told of. */
static void sn_start(sn_net *net, sn_node *n, const int *peers,
                     size_t npeers) {
  stitch_swarm_io io = sn_io(n);
  n->cfg.cipher_none = !net->p.sealed;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_swarm_new(&n->cfg, &io, &n->sw, &d), d);
  n->started = n->alive = 1;
  for (size_t i = 0; i < npeers; i++) {
    const sn_node *o = &net->node[peers[i]];
    ASSERT_OK(stitch_swarm_add_peer_addr(n->sw, o->name, o->region), d);
  }
  sn_actions(net, n);
}

/* ---- The applier ------------------------------------------------------ */

static void sn_free_tensors(uint8_t **data, size_t n) {
  for (size_t i = 0; data != NULL && i < n; i++)
    free(data[i]);
  free(data);
}

/* Builds and applies (version, object) from the node's chunks onto a copy
 * of its tensors; adopts the copy only when every digest matches. */
static int sn_apply(sn_node *n, uint64_t version, uint32_t object,
                    stitch_diag *d) {
  const stitch_vref *vr = stitch_swarm_find_version(n->sw, version);
  if (vr == NULL)
    return stitch_diag_set(d, STITCH_ENOTFOUND, "no manifest for %" PRIu64,
                           version);
  const stitch_manifest *m = vr->m;
  if (object >= m->n_objects)
    return stitch_diag_set(d, STITCH_EINVAL, "object %u of %" PRIu64,
                           object, version);
  const stitch_object *ob = &m->objects[object];
  if (ob->kind != STITCH_OBJ_ANCHOR &&
      (ob->base_version != n->w_version ||
       memcmp(ob->base_id.b, n->w_id.b, 32) != 0))
    return stitch_diag_set(d, STITCH_EBASE,
                           "v%" PRIu64 " object %u (%s) has base %" PRIu64
                           ", weights hold %" PRIu64,
                           version, object, stitch_obj_kind_name(ob->kind),
                           ob->base_version, n->w_version);
  stitch_patch *p;
  int rc = stitch_patch_new(m, object, &p, d);
  if (rc != 0)
    return rc;
  for (uint64_t c = 0; rc == 0 && c < ob->n_chunks; c++) {
    const sn_chunk *ch = sn_store_get(&n->store, &ob->chunks[c].hash);
    rc = ch == NULL ? stitch_diag_set(d, STITCH_ENOTFOUND,
                                      "chunk %" PRIu64 " not held", c)
                    : stitch_patch_add(p, (size_t)c, ch->p, ch->len, d);
  }
  size_t nt = (size_t)m->n_tensors;
  uint8_t **data = calloc(nt ? nt : 1, sizeof(*data));
  uint64_t *nb = calloc(nt ? nt : 1, sizeof(*nb));
  ASSERT(data != NULL && nb != NULL);
  /* A delta's tensors start from the weights' (matched by name); an
   * anchor's, and NEW tensors, from nothing. */
  const stitch_vref *old = stitch_swarm_find_version(n->sw, n->w_version);
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    nb[i] = m->tensors[i].nbytes;
    data[i] = calloc(nb[i] ? nb[i] : 1, 1);
    ASSERT(data[i] != NULL);
    for (size_t j = 0; ob->kind != STITCH_OBJ_ANCHOR && old != NULL &&
                       j < n->w_n && j < old->m->n_tensors;
         j++)
      if (strcmp(old->m->tensors[j].name, m->tensors[i].name) == 0 &&
          n->w_nbytes[j] == nb[i])
        memcpy(data[i], n->w_data[j], nb[i]);
  }
  if (rc == 0)
    rc = stitch_patch_apply(p, data, nb, 1, d);
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    const stitch_mtensor *t = &m->tensors[i];
    stitch_digest g;
    rc = stitch_tensor_digest(t->dtype, t->ndim, t->shape, data[i], nb[i], &g);
    if (rc == 0 && memcmp(g.b, t->digest.b, 32) != 0)
      rc = stitch_diag_set(d, STITCH_EDIGEST, "v%" PRIu64 " tensor %s",
                           version, t->name);
  }
  stitch_patch_free(p);
  if (rc != 0) {
    sn_free_tensors(data, nt);
    free(nb);
    return rc;
  }
  sn_free_tensors(n->w_data, n->w_n);
  free(n->w_nbytes);
  n->w_data = data;
  n->w_nbytes = nb;
  n->w_n = nt;
  n->w_version = version;
  n->w_id = vr->id;
  return 0;
}

/* ---- Connections ------------------------------------------------------ */

/* Closes C. CLOSER (a node index, or -1 for the network) is recorded;
 * SILENT (or -1) is told nothing: a receiver whose peer_recv refused the
 * stream (its core already dropped the peer) or a killed node. Everyone
 * else hears peer_close. */
static void sn_conn_close(sn_net *net, sn_conn *c, int closer, int rc,
                          int silent) {
  if (!c->open)
    return;
  c->open = 0;
  c->closed_by = closer;
  c->close_rc = rc;
  c->closed_ms = net->now;
  for (int s = 0; s < 2; s++) {
    sn_pipe *p = &c->d[s];
    sn_node *from = &net->node[p->from];
    if (p->from != silent && from->alive && !p->core_gone) {
      uint64_t h0 = sn_h0(from);
      stitch_swarm_peer_close(from->sw, p->from_peer, net->now);
      sn_h1(from, h0);
    }
  }
  for (int s = 0; s < 2; s++) {
    sn_pipe *p = &c->d[s];
    dbuf_free(&p->q);
    dbuf_free(&p->out);
    dbuf_free(&p->late);
    free(p->seg);
    p->seg = NULL;
    p->nseg = p->seg_head = p->seg_cap = 0;
    p->head = p->out_head = 0;
    p->dribbling = 0;
    wire_reader_free(&p->rw);
    wire_reader_free(&p->mon);
    dbuf_free(&p->heard);
  }
  for (int s = 0; s < 2; s++)
    if (c->d[s].from != silent)
      sn_actions(net, &net->node[c->d[s].from]);
}

static sn_conn *sn_conn_of(sn_net *net, int node, uint32_t peer, int *side) {
  for (size_t i = 0; i < net->n_conn; i++) {
    sn_conn *c = &net->conn[i];
    for (int s = 0; s < 2 && c->open; s++)
      if (c->d[s].from == node && c->d[s].from_peer == peer &&
          !c->d[s].core_gone) {
        *side = s;
        return c;
      }
  }
  return NULL;
}

static int sn_same_region(const sn_net *net, int a, int b) {
  return strcmp(net->node[a].region, net->node[b].region) == 0;
}

/* Opens the transport from A (who dialed) to B: B accepts it from
 * ADDR_AT_B, or, with B_OUT, dialed A as well (a punch), and each sees
 * the other at its ADDR_AT. */
static void sn_open_as(sn_net *net, int a, int b, int b_out,
                       const char *addr_at_a, const char *addr_at_b) {
  sn_node *na = &net->node[a], *nb = &net->node[b];
  if (net->n_conn == net->conn_cap) {
    net->conn_cap = net->conn_cap ? net->conn_cap * 2 : 64;
    net->conn = realloc(net->conn, net->conn_cap * sizeof(*net->conn));
    ASSERT(net->conn != NULL);
  }
  sn_conn *c = &net->conn[net->n_conn];
  memset(c, 0, sizeof(*c));
  c->closed_by = -1;
  c->opened_ms = net->now;
  int local = sn_same_region(net, a, b);
  for (int s = 0; s < 2; s++) {
    sn_pipe *p = &c->d[s];
    p->from = s == 0 ? a : b;
    p->to = s == 0 ? b : a;
    p->bw = local ? net->p.bw_local : net->p.bw_remote;
    p->lat = local ? net->p.lat_local : net->p.lat_remote;
    p->q.max = p->out.max = p->heard.max = p->late.max = SIZE_MAX / 2;
    wire_reader_init(&p->rw);
    wire_reader_init(&p->mon);
  }
  uint32_t pa, pb;
  uint64_t h0 = sn_h0(na);
  int rca = stitch_swarm_peer_open(na->sw, net->now, 1, addr_at_a, &pa);
  sn_h1(na, h0);
  if (rca != 0) {
    sn_actions(net, na);
    return;
  }
  h0 = sn_h0(nb);
  int rcb = stitch_swarm_peer_open(nb->sw, net->now, b_out, addr_at_b, &pb);
  sn_h1(nb, h0);
  if (rcb != 0) {
    net->refused_at_open++;
    stitch_swarm_peer_close(na->sw, pa, net->now); /* refused at accept */
    sn_actions(net, na);
    sn_actions(net, nb);
    return;
  }
  c->d[0].from_peer = c->d[1].to_peer = pa;
  c->d[0].to_peer = c->d[1].from_peer = pb;
  c->open = 1;
  net->n_conn++;
  sn_actions(net, na);
  sn_actions(net, nb);
}

static void sn_open(sn_net *net, int a, int b, unsigned flags) {
  const sn_node *na = &net->node[a];
  /* Inbound addresses are ephemeral, as TCP's are; a NATed node's from
   * its fixed port are the same for everyone. */
  char eph[32];
  if (na->cfg.listen[0] == 0 && (flags & STITCH_SWARM_DIAL_FIXED))
    snprintf(eph, sizeof(eph), "%s.nat", na->name);
  else
    snprintf(eph, sizeof(eph), "%s.%zu", na->name, net->n_conn);
  sn_open_as(net, a, b, 0, net->node[b].name, eph);
}

/* A dial that arrives: refused unless B is up and listening; two punch
 * dials make one connection, outbound at both ends. */
static void sn_connect_now(sn_net *net, int a, int b, unsigned flags) {
  if (flags & SN_DIAL_PUNCHED) {
    char at_a[32], at_b[32];
    snprintf(at_a, sizeof(at_a), "%s.nat", net->node[b].name);
    snprintf(at_b, sizeof(at_b), "%s.nat", net->node[a].name);
    if (net->node[a].alive && net->node[b].alive) {
      net->punches_opened++;
      sn_open_as(net, a, b, 1, at_a, at_b);
    }
    return;
  }
  if (!net->node[a].alive)
    return;
  const sn_node *nb = &net->node[b];
  if (!nb->alive || nb->cfg.listen[0] == 0 || a == b) {
    net->dials_failed++; /* the dialer just hears nothing */
    return;
  }
  sn_open(net, a, b, flags);
}

/* A dial takes one link latency. */
static void sn_dial_later(sn_net *net, int a, int b, unsigned flags) {
  if (net->n_dial == net->dial_cap) {
    net->dial_cap = net->dial_cap ? net->dial_cap * 2 : 32;
    net->dial = realloc(net->dial, net->dial_cap * sizeof(*net->dial));
    ASSERT(net->dial != NULL);
  }
  for (size_t i = 0; i < net->n_dial; i++)
    net->dup_dials += net->dial[i].from == a && net->dial[i].to == b;
  uint32_t lat = sn_same_region(net, a, b) ? net->p.lat_local
                                           : net->p.lat_remote;
  net->dial[net->n_dial++] = (sn_dial){net->now + lat, a, b, flags};
}

static int sn_node_by_addr(const sn_net *net, const char *addr) {
  for (int i = 0; i < net->n_nodes; i++)
    if (net->node[i].cfg.listen[0] != 0 &&
        strcmp(net->node[i].cfg.listen, addr) == 0)
      return i;
  return -1;
}

/* The NATed node whose fixed port ADDR ("<name>.nat") is, or -1. */
static int sn_node_by_nat(const sn_net *net, const char *addr) {
  for (int i = 0; i < net->n_nodes; i++) {
    size_t k = strlen(net->node[i].name);
    if (net->node[i].cfg.listen[0] == 0 &&
        strncmp(addr, net->node[i].name, k) == 0 &&
        strcmp(addr + k, ".nat") == 0)
      return i;
  }
  return -1;
}

/* A punch dial from A to B (at B's NAT's mapping): the connection opens
 * if B dialed A within SN_PUNCH_MS, else A's dial waits for B's. */
static void sn_punch_dial(sn_net *net, int a, int b) {
  sn_punch *free_slot = NULL;
  for (int i = 0; i < SN_PUNCHES; i++) {
    sn_punch *p = &net->punch[i];
    if (p->at != 0 && net->now - p->at > SN_PUNCH_MS)
      p->at = 0; /* the NAT's mapping of the first SYN is gone */
    if (p->at != 0 && p->from == b && p->to == a) {
      p->at = 0;
      sn_dial_later(net, a, b, SN_DIAL_PUNCHED);
      return;
    }
    if (p->at == 0 && free_slot == NULL)
      free_slot = p;
  }
  ASSERT(free_slot != NULL);
  *free_slot = (sn_punch){net->now ? net->now : 1, a, b};
}

static void sn_log_line(sn_node *n, const char *fmt, ...) {
  char line[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  char tagged[210];
  snprintf(tagged, sizeof(tagged), "net: %s", line);
  sn_io_log(n, tagged);
}

/* N's core's actions (stitch_swarm_drain). */
static void sn_op_connect(void *user, const char *addr, unsigned flags) {
  sn_node *n = user;
  /* An evil node attacks only the links the test gives it. */
  int to = n->evil == SN_HONEST ? sn_node_by_addr(n->net, addr) : -1;
  int nat = n->evil == SN_HONEST ? sn_node_by_nat(n->net, addr) : -1;
  sn_log_line(n, "CONNECT %s%s%s", addr,
              flags & STITCH_SWARM_DIAL_PUNCH ? " (punch)" : "",
              to >= 0 || nat >= 0 ? "" : " (ignored)");
  if (to >= 0)
    sn_dial_later(n->net, n->idx, to, flags);
  else if (nat >= 0 && (flags & STITCH_SWARM_DIAL_PUNCH) &&
           n->cfg.listen[0] == 0 && (flags & STITCH_SWARM_DIAL_FIXED))
    sn_punch_dial(n->net, n->idx, nat);
  else
    n->net->dials_failed++;
}

static void sn_op_close(void *user, uint32_t peer) {
  sn_node *n = user;
  int side;
  sn_conn *c = sn_conn_of(n->net, n->idx, peer, &side);
  if (c != NULL && n->evil != SN_HONEST) { /* keep the transport */
    c->d[side].core_gone = 1;
    uint64_t h0 = sn_h0(n);
    stitch_swarm_peer_close(n->sw, peer, n->net->now);
    sn_h1(n, h0);
  } else if (c != NULL) { /* it hears peer_close like the other side */
    sn_conn_close(n->net, c, n->idx, 0, -1);
  }
}

static void sn_op_apply(void *user, uint64_t version, uint32_t object) {
  sn_node *n = user;
  uint64_t now = n->net->now;
  stitch_diag d = {{0}};
  int rc = sn_apply(n, version, object, &d);
  if (rc == 0) {
    n->applies++;
    if (version <= SN_MAX_VERSIONS)
      n->applied_at[version] = now;
    const stitch_vref *vr = stitch_swarm_find_version(n->sw, version);
    size_t l = strlen(n->path);
    snprintf(n->path + l, sizeof(n->path) - l, "%sv%" PRIu64 "%c",
             l ? " " : "", version,
             stitch_obj_kind_name(vr->m->objects[object].kind)[0]);
    sn_log_line(n, "applied v%" PRIu64 " object %u", version, object);
    uint64_t h0 = sn_h0(n);
    stitch_swarm_applied(n->sw, version, &n->w_id, now);
    sn_h1(n, h0);
  } else {
    n->apply_errors++;
    snprintf(n->apply_err, sizeof(n->apply_err), "t=%" PRIu64 ": %s", now,
             d.msg);
    sn_log_line(n, "apply failed: %s", d.msg);
    uint64_t h0 = sn_h0(n);
    stitch_swarm_apply_failed(n->sw, version, object, now);
    sn_h1(n, h0);
  }
}

/* Carries out every action N's core asks for. */
static void sn_actions(sn_net *net, sn_node *n) {
  if (!n->alive)
    return;
  const stitch_swarm_host ops = {n, sn_op_connect, sn_op_close, sn_op_apply};
  if (stitch_swarm_drain(n->sw, &ops, NULL) != 0)
    FAIL_("%s at t=%" PRIu64 " asked for %u actions in a row", n->name,
          net->now, STITCH_SWARM_DRAIN_MAX);
}

/* Kills N: every link goes down at once, the core hears nothing more. */
static void sn_kill(sn_net *net, sn_node *n) {
  n->alive = 0;
  for (size_t i = 0; i < net->n_conn; i++) {
    sn_conn *c = &net->conn[i];
    if (c->open && (c->d[0].from == n->idx || c->d[1].from == n->idx))
      sn_conn_close(net, c, n->idx, 0, n->idx);
  }
}

/* Opens a connection from A to B at once, whatever their cores asked. */
static void sn_link(sn_net *net, sn_node *a, sn_node *b) {
  ASSERT(a->alive && b->alive && a != b);
  sn_open(net, a->idx, b->idx, 0);
}

/* ---- The evil rewriter ------------------------------------------------ */

static void sn_frame(dbuf *out, int type, const uint8_t *body, size_t len) {
  uint8_t h[5];
  uint32_t l = (uint32_t)(len + 1);
  for (int i = 0; i < 4; i++)
    h[i] = (uint8_t)(l >> (8 * i));
  h[4] = (uint8_t)type;
  ASSERT_EQ(dbuf_put(out, h, 5), 0);
  ASSERT_EQ(dbuf_put(out, body, len), 0);
}

static void sn_inject(sn_node *n, sn_pipe *p) {
  uint8_t junk[64];
  switch (n->evil) {
  case SN_EVIL_HUGE: {
    uint8_t h[5];
    uint32_t len = n->huge_len ? n->huge_len : SN_HUGE_FRAME;
    for (int i = 0; i < 4; i++)
      h[i] = (uint8_t)(len >> (8 * i));
    h[4] = (uint8_t)(n->huge_type ? n->huge_type : WIRE_CHUNK);
    ASSERT_EQ(dbuf_put(&p->out, h, 5), 0);
    p->dribbling = 1;
    p->mon_dead = 1; /* the monitor need not buffer the dribble */
    break;
  }
  case SN_EVIL_GARBAGE:
    /* 0xc1 is never valid msgpack; the rest is noise. */
    for (int k = 0; k < SN_GARBAGE_FRAMES; k++) {
      size_t len = 1 + sn_xorshift(&n->rng) % 48;
      for (size_t i = 0; i < len; i++)
        junk[i] = (uint8_t)sn_xorshift(&n->rng);
      junk[0] = 0xc1;
      static const int types[] = {WIRE_HAVE, WIRE_REQUEST, WIRE_BITFIELD,
                                  WIRE_PING, WIRE_CANCEL, WIRE_PEERS};
      sn_frame(&p->out, types[k % 6], junk, len);
    }
    break;
  case SN_EVIL_UNKNOWN:
    memset(junk, 0x90, 8);
    sn_frame(&p->out, 0x7e, junk, 8);
    break;
  case SN_EVIL_MANIFEST: {
    wire_msg *m = calloc(1, sizeof(*m));
    ASSERT(m != NULL);
    m->type = WIRE_MANIFEST;
    m->data = n->evil_buf;
    m->data_len = n->evil_len;
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    free(m);
    break;
  }
  case SN_EVIL_REACH: {
    wire_msg *m = calloc(1, sizeof(*m));
    ASSERT(m != NULL);
    m->type = WIRE_REACH;
    m->n_reach = WIRE_MAX_REACH;
    for (int i = 0; i < WIRE_MAX_REACH; i++)
      snprintf(m->reach[i], sizeof(m->reach[i]), "made-up-%d", i);
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    free(m);
    break;
  }
  default:
    break;
  }
}

/* A frame of TYPE its core sent, decoded; the caller frees it. */
static wire_msg *sn_decoded(int type, const uint8_t *body, size_t len) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  ASSERT_EQ(wire_decode(type, body, len, m, NULL), 0);
  return m;
}

/* Passes one whole frame of the evil core through the rewriter. */
static void sn_rewrite(sn_node *n, sn_pipe *p, int type, const uint8_t *body,
                       size_t len) {
  if (n->evil == SN_EVIL_FLIP && type == WIRE_CHUNK) {
    wire_msg *m = sn_decoded(type, body, len);
    size_t at = (size_t)(m->data - body) + m->data_len / 2;
    free(m);
    uint8_t *copy = malloc(len);
    ASSERT(copy != NULL);
    memcpy(copy, body, len);
    copy[at] ^= 0x01;
    sn_frame(&p->out, type, copy, len);
    free(copy);
    return;
  }
  if (n->evil == SN_EVIL_REACH && type == WIRE_REACH)
    return; /* its made-up REACH stands */
  if (n->evil == SN_EVIL_SILENT && p->injected)
    return; /* the handshake done, it holds the slot and says nothing */
  int liar = n->evil == SN_EVIL_LIAR || n->evil == SN_EVIL_ECLIPSE;
  if (liar && (type == WIRE_CHUNK || type == WIRE_REJECT))
    return; /* serves none, and does not say so */
  if (liar && type == WIRE_BITFIELD) { /* "holds" every chunk */
    wire_msg *m = sn_decoded(type, body, len);
    size_t nb = (size_t)((m->nbits + 7) / 8);
    uint8_t *ones = malloc(nb ? nb : 1);
    ASSERT(ones != NULL);
    memset(ones, 0xff, nb);
    if (m->nbits % 8) /* no bit past nbits */
      ones[nb - 1] = (uint8_t)((1u << (m->nbits % 8)) - 1);
    m->data = ones;
    m->data_len = nb;
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    free(ones);
    free(m);
    return;
  }
  if (n->evil == SN_EVIL_ECLIPSE && type == WIRE_PEERS) { /* only its own */
    wire_msg *m = sn_decoded(type, body, len);
    m->n_peers = 0;
    for (int i = 0; i < n->net->n_nodes && m->n_peers < 16; i++) {
      const sn_node *o = &n->net->node[i];
      if (o->evil != SN_EVIL_ECLIPSE || o->cfg.listen[0] == 0)
        continue;
      snprintf(m->peer_addr[m->n_peers], STITCH_SWARM_ADDR_MAX, "%s",
               o->cfg.listen);
      snprintf(m->peer_region[m->n_peers++], STITCH_SWARM_REGION_MAX, "%s",
               o->region);
    }
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    free(m);
    return;
  }
  int far = strcmp(n->region, n->net->node[p->to].region) != 0;
  if (n->evil == SN_EVIL_LIE_LATE && far &&
      (type == WIRE_PEERS || type == WIRE_BITFIELD))
    return;
  if ((n->evil == SN_EVIL_PASS_LIE || n->evil == SN_EVIL_LIE_LATE ||
       n->evil == SN_EVIL_TOLD_LIE) &&
      type == WIRE_HAVE && far) {
    wire_msg *m = sn_decoded(type, body, len);
    m->type = WIRE_CROSSING;
    m->node = n->net->node[p->to].cfg.node_pk;
    if (n->evil == SN_EVIL_TOLD_LIE) /* a made-up node of its region */
      memset(m->node.b, 0x42, sizeof(m->node.b));
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    if (n->evil == SN_EVIL_PASS_LIE) {
      m->chunk /= 2;
      ASSERT_EQ(wire_encode(&p->out, m), 0);
    } else if (n->evil == SN_EVIL_LIE_LATE &&
               (p->late_at == 0 || n->net->now < p->late_at)) {
      ASSERT_EQ(wire_encode(&p->late, m), 0);
      p->late_n++;
      if (p->late_at == 0)
        p->late_at = n->net->now + SN_LATE_MS;
    }
    n->lies += 1 + (n->evil == SN_EVIL_PASS_LIE);
    free(m);
    return;
  }
  if ((n->evil == SN_EVIL_NOT_ME || n->evil == SN_EVIL_LIE_LATE) &&
      type == WIRE_CHUNK && far) {
    wire_msg *m = sn_decoded(type, body, len);
    m->data = NULL;
    m->data_len = 0;
    m->type = WIRE_REJECT;
    if (n->evil == SN_EVIL_NOT_ME) { /* "through another node": made up */
      m->type = WIRE_CROSSING;
      memset(m->node.b, 0x42, sizeof(m->node.b));
    }
    ASSERT_EQ(wire_encode(&p->out, m), 0);
    free(m);
    return;
  }
  sn_frame(&p->out, type, body, len);
  if (n->evil == SN_EVIL_EARLY && type == WIRE_HELLO && !p->injected) {
    uint8_t h[5];
    uint32_t l = STITCH_MANIFEST_MAX;
    for (int i = 0; i < 4; i++)
      h[i] = (uint8_t)(l >> (8 * i));
    h[4] = WIRE_MANIFEST;
    ASSERT_EQ(dbuf_put(&p->out, h, 5), 0);
    p->injected = p->dribbling = p->mon_dead = 1;
    return;
  }
  if (type == WIRE_AUTH && !p->injected) {
    p->injected = 1;
    sn_inject(n, p);
  }
}

/* Moves everything an evil core wants to send through the rewriter. */
static void sn_evil_pull(sn_node *n, sn_pipe *p) {
  const uint8_t *buf = NULL;
  size_t len = 0;
  if (p->late.len > 0 && n->net->now >= p->late_at) {
    ASSERT_EQ(dbuf_put(&p->out, p->late.p, p->late.len), 0);
    n->lies += p->late_n;
    p->late.len = p->late_n = 0;
  }
  if (!p->core_gone)
    stitch_swarm_peer_pending(n->sw, p->from_peer, &buf, &len);
  size_t pos = 0;
  while (!p->dribbling && pos < len) {
    size_t used;
    int type;
    const uint8_t *body;
    size_t blen;
    stitch_diag d = {{0}};
    ASSERT_OK(wire_reader_feed(&p->rw, buf + pos, len - pos, &used, &type,
                               &body, &blen, &d),
              d);
    pos += used;
    if (type > 0)
      sn_rewrite(n, p, type, body, blen);
  }
  if (len > 0)
    stitch_swarm_peer_sent(n->sw, p->from_peer, len);
  /* SN_EVIL_REPEAT: its frames again, paced, or whenever the wire has
   * taken what was queued (line rate). */
  if (n->evil == SN_EVIL_REPEAT && p->injected && n->evil_len > 0 &&
      n->net->now >= n->evil_from &&
      (n->evil_every ? n->net->now >= p->next_at
                     : p->out.len - p->out_head < (64u << 10))) {
    ASSERT_EQ(dbuf_put(&p->out, n->evil_buf, n->evil_len), 0);
    p->next_at = n->net->now + n->evil_every;
  }
  if (p->dribbling && p->out.len - p->out_head < 256) {
    uint8_t junk[256];
    memset(junk, 0xab, sizeof(junk));
    ASSERT_EQ(dbuf_put(&p->out, junk, n->dribble < 256 ? n->dribble : 256),
              0);
  }
}

/* ---- Moving bytes ----------------------------------------------------- */

/* Peer ID's pending bytes from honest node N's core. Every call checks
 * stitch_swarm_sendable's promise: a peer it does not list has nothing
 * (stitch-sim asks the listed ones alone). */
static void sn_pending(sn_node *n, uint32_t id, const uint8_t **buf,
                       size_t *len) {
  size_t k;
  const uint32_t *ids = stitch_swarm_sendable(n->sw, &k);
  int listed = 0;
  for (size_t i = 0; i < k; i++)
    listed |= ids[i] == id;
  uint64_t h0 = sn_h0(n);
  stitch_swarm_peer_pending(n->sw, id, buf, len);
  sn_h1(n, h0);
  ASSERT(listed || *len == 0);
}

static size_t sn_avail(sn_net *net, sn_pipe *p) {
  sn_node *n = &net->node[p->from];
  if (n->evil != SN_HONEST)
    return p->out.len - p->out_head;
  const uint8_t *buf;
  size_t len;
  sn_pending(n, p->from_peer, &buf, &len);
  return len;
}

/* Puts up to MAX bytes of P's sender on the wire; returns how many. */
static size_t sn_push(sn_net *net, sn_pipe *p, size_t max) {
  sn_node *n = &net->node[p->from];
  const uint8_t *buf;
  size_t len;
  if (n->evil != SN_HONEST) {
    buf = p->out.p + p->out_head;
    len = p->out.len - p->out_head;
  } else {
    sn_pending(n, p->from_peer, &buf, &len);
  }
  len = len < max ? len : max;
  if (len == 0)
    return 0;
  ASSERT_EQ(dbuf_put(&p->q, buf, len), 0);
  if (p->nseg == p->seg_cap) {
    p->seg_cap = p->seg_cap ? p->seg_cap * 2 : 64;
    p->seg = realloc(p->seg, p->seg_cap * sizeof(*p->seg));
    ASSERT(p->seg != NULL);
  }
  p->seg[p->nseg++] = (sn_seg){net->now + p->lat, p->q.len};
  p->sent += len;
  if (n->evil != SN_HONEST) {
    p->out_head += len;
    if (p->out_head == p->out.len)
      p->out.len = p->out_head = 0;
  } else {
    uint64_t h0 = sn_h0(n);
    stitch_swarm_peer_sent(n->sw, p->from_peer, len);
    sn_h1(n, h0);
  }
  return len;
}

/* Counts what arrives: frames by type, watched manifests. */
static void sn_monitor(sn_net *net, sn_pipe *p, const uint8_t *buf,
                       size_t len) {
  sn_node *to = &net->node[p->to];
  size_t pos = 0;
  while (!p->mon_dead && pos < len) {
    size_t used;
    int type;
    const uint8_t *body;
    size_t blen;
    if (wire_reader_feed(&p->mon, buf + pos, len - pos, &used, &type, &body,
                         &blen, NULL) != 0) {
      p->mon_dead = 1; /* a stream the receiver must refuse too */
      break;
    }
    pos += used;
    if (type <= 0)
      continue;
    if (to->deaf_bids && type != WIRE_BID)
      sn_frame(&p->heard, type, body, blen);
    to->rx_frames[type]++;
    net->node[p->from].tx_frames[type]++;
    if (type == WIRE_CHUNK && to->first_chunk_unasked < 0)
      to->first_chunk_unasked = to->tx_frames[WIRE_REQUEST] == 0;
    if (type == WIRE_CHUNK && net->node[p->from].cfg.seed)
      to->rx_seed_chunks++;
    if (type != WIRE_MANIFEST || net->n_watch == 0)
      continue;
    wire_msg *m = calloc(1, sizeof(*m));
    ASSERT(m != NULL);
    if (wire_decode(type, body, blen, m, NULL) == 0) {
      stitch_digest id;
      stitch_hash(m->data, m->data_len, &id);
      for (int k = 0; k < net->n_watch; k++)
        if (memcmp(id.b, net->watch[k].b, 32) == 0)
          to->watch_rx[k]++;
    }
    free(m);
  }
}

/* Hands P's receiver every byte due by now. */
static void sn_deliver(sn_net *net, sn_conn *c, int side) {
  sn_pipe *p = &c->d[side];
  size_t end = p->head;
  while (p->seg_head < p->nseg && p->seg[p->seg_head].at <= net->now)
    end = p->seg[p->seg_head++].end;
  if (end == p->head)
    return;
  sn_node *to = &net->node[p->to];
  const uint8_t *buf = p->q.p + p->head;
  size_t len = end - p->head;
  p->head = end;
  p->delivered += len;
  sn_monitor(net, p, buf, len);
  if (to->deaf_bids) { /* the frames the monitor let through */
    buf = p->heard.p;
    len = p->heard.len;
    p->heard.len = 0;
  }
  int rc = 0;
  if (!c->d[1 - side].core_gone) {
    uint64_t h0 = net->track_heap ? sn_heap() : 0;
    int64_t io0 = to->heap_io;
    rc = stitch_swarm_peer_recv(to->sw, p->to_peer, buf, len, net->now);
    if (net->track_heap) {
      p->heap_growth += (int64_t)(sn_heap() - h0) - (to->heap_io - io0);
      sn_h1(to, h0);
      if (p->heap_growth > p->heap_peak)
        p->heap_peak = p->heap_growth;
    }
  }
  if (rc != 0 && to->evil != SN_HONEST) {
    c->d[1 - side].core_gone = 1; /* the attacker's transport stays up */
    sn_actions(net, to);
    return;
  }
  if (rc != 0) {
    sn_log_line(to, "dropped by core: %s from %s after %" PRIu64 " bytes",
                stitch_errname(rc), net->node[p->from].name, p->delivered);
    sn_conn_close(net, c, to->idx, rc, to->idx);
    sn_actions(net, to);
    return;
  }
  if (p->head == p->q.len) {
    p->head = p->q.len = 0;
    p->nseg = p->seg_head = 0;
  }
  sn_actions(net, to);
}

/* One virtual millisecond. */
static void sn_step(sn_net *net) {
  /* Dials that complete now. */
  for (size_t i = 0; i < net->n_dial;) {
    if (net->dial[i].at <= net->now) {
      sn_dial dl = net->dial[i];
      memmove(&net->dial[i], &net->dial[i + 1],
              (net->n_dial - i - 1) * sizeof(*net->dial));
      net->n_dial--;
      sn_connect_now(net, dl.from, dl.to, dl.flags);
    } else {
      i++;
    }
  }
  for (int i = 0; i < net->n_nodes; i++) {
    sn_node *n = &net->node[i];
    if (n->alive && stitch_swarm_wake(n->sw) <= net->now) {
      uint64_t h0 = sn_h0(n);
      if (stitch_swarm_tick(n->sw, net->now) != 0)
        n->tick_errors++;
      sn_h1(n, h0);
      sn_actions(net, n);
    }
  }
  /* Each sender's upload, shared round-robin, each pipe capped at its
   * link's rate. Two passes hand out what the first left unused. */
  for (int i = 0; i < net->n_nodes; i++) {
    sn_node *n = &net->node[i];
    if (!n->alive)
      continue;
    size_t budget = n->up_bw ? n->up_bw : net->p.up_bw;
    size_t used_bw[SN_MAX_LINKS], np = 0;
    sn_pipe *mine[SN_MAX_LINKS];
    for (size_t k = 0; k < net->n_conn; k++)
      for (int s = 0; s < 2; s++)
        if (net->conn[k].open && net->conn[k].d[s].from == i) {
          ASSERT(np < SN_MAX_LINKS);
          if (n->evil != SN_HONEST)
            sn_evil_pull(n, &net->conn[k].d[s]);
          if (net->conn[k].open) {
            used_bw[np] = 0;
            mine[np++] = &net->conn[k].d[s];
          }
        }
    size_t rot = np ? (size_t)(net->now % np) : 0;
    for (int pass = 0; pass < 2 && budget > 0; pass++) {
      size_t want = 0;
      for (size_t k = 0; k < np; k++)
        want += sn_avail(net, mine[k]) > 0 && used_bw[k] < mine[k]->bw;
      size_t share = want ? (budget + want - 1) / want : 0;
      for (size_t j = 0; j < np && budget > 0; j++) {
        size_t k = (j + rot) % np;
        size_t cap = mine[k]->bw - used_bw[k];
        cap = cap < share ? cap : share;
        cap = cap < budget ? cap : budget;
        size_t moved = sn_push(net, mine[k], cap);
        used_bw[k] += moved;
        budget -= moved;
      }
    }
  }
  for (size_t k = 0; k < net->n_conn; k++)
    for (int s = 0; s < 2; s++)
      if (net->conn[k].open)
        sn_deliver(net, &net->conn[k], s);
}

/* Whether anything is on the wire or waiting to go. */
static int sn_busy(sn_net *net) {
  if (net->n_dial > 0)
    return 1;
  for (size_t k = 0; k < net->n_conn; k++)
    for (int s = 0; s < 2 && net->conn[k].open; s++) {
      sn_pipe *p = &net->conn[k].d[s];
      if (p->seg_head < p->nseg || p->dribbling || sn_avail(net, p) > 0)
        return 1;
      sn_node *n = &net->node[p->from];
      if (n->evil == SN_EVIL_REPEAT && p->injected && !p->core_gone)
        return 1; /* it sends again at its pace */
      if (n->evil != SN_HONEST && !p->core_gone) {
        const uint8_t *b;
        size_t l;
        stitch_swarm_peer_pending(n->sw, p->from_peer, &b, &l);
        if (l > 0)
          return 1;
      }
    }
  return 0;
}

/* Runs until virtual time T, or until DONE(net, arg) holds (checked after
 * every step; DONE may be NULL). Idle stretches jump to the next wake-up.
 * Returns whether DONE held. */
static int sn_run(sn_net *net, uint64_t t, int (*done)(sn_net *, void *),
                  void *arg) {
  while (net->now < t) {
    sn_step(net);
    if (done != NULL && done(net, arg))
      return 1;
    uint64_t next = net->now + 1;
    if (!sn_busy(net)) {
      next = t;
      for (int i = 0; i < net->n_nodes; i++)
        if (net->node[i].alive) {
          uint64_t w = stitch_swarm_wake(net->node[i].sw);
          next = w < next ? w : next;
        }
      next = next > net->now + 1 ? next : net->now + 1;
    }
    net->now = next < t ? next : t;
  }
  return done != NULL && done(net, arg);
}

/* ---- Reading results -------------------------------------------------- */

static void sn_stats(const sn_node *n, stitch_swarm_stats *st) {
  memset(st, 0, sizeof(*st));
  if (n->started)
    stitch_swarm_get_stats(n->sw, st);
}

/* Prints a node's state and its last log lines (for a failing check). */
static void sn_dump(const sn_node *n) {
  stitch_swarm_stats st;
  sn_stats(n, &st);
  fprintf(stderr,
          "  %s [%s]%s%s weights v%" PRIu64 ", core held %" PRIu64
          " latest %" PRIu64 " fetching %" PRIu64 " (%" PRIu64 "/%" PRIu64
          "), peers %u, up %" PRIu64 " down %" PRIu64 ", verify_failures %"
          PRIu64 ", bans %" PRIu64 ", apply errors %u%s%s\n",
          n->name, n->region, n->alive ? "" : " (dead)",
          n->evil ? " (evil)" : "", n->w_version, st.held_version,
          st.latest_version, st.fetching_version, st.fetch_done,
          st.fetch_total, st.peers, st.bytes_up, st.bytes_down,
          st.verify_failures, st.bans, n->apply_errors,
          n->apply_errors ? ": " : "", n->apply_errors ? n->apply_err : "");
  for (unsigned k = n->log_n > 10 ? n->log_n - 10 : 0; k < n->log_n; k++)
    fprintf(stderr, "      %s\n", n->log[k % SN_LOG_LINES]);
}

static void sn_dump_all(const sn_net *net) {
  fprintf(stderr, "net at t=%" PRIu64 " ms, %zu connections, %" PRIu64
                  " dials refused, %" PRIu64 " duplicate dials:\n",
          net->now, net->n_conn, net->dials_failed, net->dup_dials);
  for (int i = 0; i < net->n_nodes; i++)
    sn_dump(&net->node[i]);
}

static void sn_free(sn_net *net) {
  for (int i = 0; i < net->n_nodes; i++)
    net->node[i].alive = 0; /* no core hears the closes below */
  for (size_t i = 0; i < net->n_conn; i++)
    if (net->conn[i].open)
      sn_conn_close(net, &net->conn[i], -1, 0, -1);
  for (int i = 0; i < net->n_nodes; i++) {
    sn_node *n = &net->node[i];
    stitch_swarm_free(n->sw);
    sn_store_free(&n->store);
    sn_free_tensors(n->w_data, n->w_n);
    free(n->w_nbytes);
  }
  free(net->conn);
  free(net->dial);
  memset(net, 0, sizeof(*net));
}

#endif
