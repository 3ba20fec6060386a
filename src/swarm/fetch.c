/* fetch.c: what a node fetches and from whom, what it serves, and what the
 * seed offers (docs/swarm.md).
 *
 * A node plans the cheapest path from the version its weights hold to the
 * newest it knows (stitch_plan_path) and wants every chunk of the plan's
 * objects, the first step's first. Each ready peer gets up to `pipeline`
 * requests (twice that while we are behind our region, request_depth):
 * random chunks for the first few (so new nodes soon have
 * something to trade), then rarest first among its neighbours; once every
 * wanted chunk is asked for, the last ones are asked of a second peer too
 * (endgame) and the loser is cancelled. A chunk is fetched from another
 * region only when no neighbour of ours holds it, and at first only by a
 * few designated nodes of the region (cross_ok), so that it crosses into
 * each region about once and spreads inside. Every chunk is hash-checked
 * (or, with config.write_verifies, checked by chunk_write) before
 * it is stored or announced; one that does not verify gets its sender
 * banned. When the first step's object is whole, the agent is asked to
 * apply it. A node serves the CORE_SERVE_SLOTS requesters furthest behind
 * first (serve_turn), so that a region's nodes finish together.
 *
 * The seed super-seeds: it announces no bitfield, but offers each peer a
 * few chunks at a time (HAVE), those sent least so far first, so distinct
 * peers get distinct chunks and the swarm spreads them. Once every chunk
 * has gone out once, it offers more only to a peer that has made no
 * progress for a while. */
#include "swarm/core_internal.h"

#include "common/diag.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const stitch_chunk_ref *ref_of(vstate *v, uint32_t o, uint64_t c) {
  return &v->ref.m->objects[o].chunks[c];
}

bits *peer_told(peer *p, uint64_t version, uint32_t object) {
  return bits_find(p->told, p->n_told, version, object);
}

static void mark_told(peer *p, uint64_t version, uint32_t object) {
  bits *nb = realloc(p->told, (p->n_told + 1) * sizeof(*nb));
  if (nb == NULL)
    return;
  p->told = nb;
  memset(&nb[p->n_told], 0, sizeof(nb[0]));
  nb[p->n_told].version = version;
  nb[p->n_told].object = object;
  p->n_told++;
}

static int in_plan(const stitch_swarm *s, uint64_t version, uint32_t object) {
  for (size_t k = 0; k < s->plan.n; k++)
    if (s->plan.step[k].version == version &&
        s->plan.step[k].object == object)
      return 1;
  return 0;
}

/* M is a message of type T about chunk C, nothing else set. */
static void ref_msg(wire_msg *m, wire_type t, const chunk_id *c) {
  memset(m, 0, sizeof(*m));
  m->type = t;
  m->version = c->version;
  m->object = c->object;
  m->chunk = c->chunk;
}

/* Times about a version's chunks are kept as ms after the version arrived,
 * plus one, so 0 means "not yet". */
static uint32_t stamp(const stitch_swarm *s, const vstate *v) {
  uint64_t d = s->now_ms - v->added_ms + 1;
  return d < UINT32_MAX ? (uint32_t)d : UINT32_MAX;
}

static uint64_t at_ms(const vstate *v, uint32_t stamp) {
  return v->added_ms + stamp - 1;
}

/* The schedule runs again by T (a wait that ends then). */
static void wake_at(stitch_swarm *s, uint64_t t) {
  if (t < s->fetch_wake_ms)
    s->fetch_wake_ms = t;
}

static int far_peer(const peer *p) { return !p->is_seed && !p->same_region; }

/* A ready neighbour of our region, not the seed. */
static int near_peer(const peer *p) {
  return p->state == PEER_READY && !p->is_seed && p->same_region;
}

/* ---- Planning --------------------------------------------------------- */

static void maybe_apply(stitch_swarm *s) {
  if (s->cfg.seed || s->applying || s->plan.n == 0)
    return;
  const stitch_plan_step *st = &s->plan.step[0];
  vstate *v = core_find_version(s, st->version);
  if (v == NULL || v->held[st->object].count < v->held[st->object].n)
    return;
  s->applying = 1;
  stitch_swarm_action a = {STITCH_SWARM_APPLY, 0, "", st->version, st->object};
  core_push_action(s, &a);
}

void fetch_replan(stitch_swarm *s) {
  memset(&s->plan, 0, sizeof(s->plan));
  if (s->cfg.seed || s->n_v == 0)
    return;
  uint64_t latest = s->v[s->n_v - 1].ref.m->version;
  stitch_diag d = {{0}};
  s->replan = 0;
  if (latest <= s->held_version)
    return;
  int rc = stitch_plan_path(s->refs, s->n_v, s->held_version, &s->held_id,
                            latest, &s->plan, &d);
  if (rc != 0) {
    core_log(s, "no plan to version %" PRIu64 " yet: %s", latest, d.msg);
    memset(&s->plan, 0, sizeof(s->plan));
    s->replan = rc == STITCH_ENOMEM; /* nothing else would ask again */
    return;
  }
  s->st.fetching_version = latest;
  s->st.fetch_total = s->st.fetch_done = 0;
  for (size_t k = 0; k < s->plan.n; k++) {
    vstate *v = core_find_version(s, s->plan.step[k].version);
    const bits *h = &v->held[s->plan.step[k].object];
    s->st.fetch_total += h->n;
    s->st.fetch_done += h->count;
  }
  maybe_apply(s);
}

/* Tells P what we hold, and which objects we want (a BITFIELD with no bits
 * set is interest), once per (version, object). The seed tells nothing
 * here: it offers (seed_offer). */
void fetch_announce_interest(stitch_swarm *s, peer *p) {
  if (s->cfg.seed || p->state != PEER_READY)
    return;
  for (size_t i = 0; i < s->n_v; i++) {
    vstate *v = &s->v[i];
    for (uint32_t o = 0; o < v->ref.m->n_objects; o++) {
      const bits *h = &v->held[o];
      if (h->n == 0 || peer_told(p, h->version, o) != NULL)
        continue;
      if (h->count == 0 && !in_plan(s, h->version, o))
        continue;
      wire_msg m;
      memset(&m, 0, sizeof(m));
      m.type = WIRE_BITFIELD;
      m.version = h->version;
      m.object = o;
      m.nbits = h->n;
      m.data = h->b;
      m.data_len = (size_t)((h->n + 7) / 8);
      if (core_send(s, p, &m) == 0)
        mark_told(p, h->version, o);
    }
  }
}

/* ---- Peers' holdings -------------------------------------------------- */

static void drop_request(stitch_swarm *s, peer *p, unsigned i);
static void send_simple(stitch_swarm *s, peer *p, wire_type t,
                        const chunk_id *c);
static int find_request(const peer *p, const chunk_id *c);

/* A neighbour of our region has chunk C of (V, O) now: a request for it
 * still out to another region is cancelled, and the chunk asked of the
 * neighbour instead. Such a request went out before the chunk was nearby
 * (its turn came before a copy passed across reached us, push_across),
 * and a far peer's queue is slow to answer. */
static void cancel_far(stitch_swarm *s, uint64_t version, uint32_t object,
                       uint64_t chunk) {
  chunk_id c = {version, object, chunk};
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    int k;
    if (q->state == PEER_READY && far_peer(q) &&
        (k = find_request(q, &c)) >= 0) {
      drop_request(s, q, (unsigned)k);
      send_simple(s, q, WIRE_CANCEL, &c);
    }
  }
}

static void saw_far(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c);

void fetch_on_have_bit(stitch_swarm *s, peer *p, uint64_t version,
                       uint32_t object, uint64_t chunk) {
  vstate *v = core_find_version(s, version);
  if (v == NULL || v->avail[object] == NULL)
    return;
  if (v->avail[object][chunk] < 0xffff)
    v->avail[object][chunk]++;
  if (far_peer(p))
    saw_far(s, v, object, chunk);
  if (!p->is_seed && !far_peer(p))
    cancel_far(s, version, object, chunk);
}

void fetch_peer_gone(stitch_swarm *s, peer *p) {
  for (unsigned i = 0; i < p->n_req; i++) {
    vstate *v = core_find_version(s, p->req[i].c.version);
    if (v != NULL && v->inflight[p->req[i].c.object][p->req[i].c.chunk] > 0)
      v->inflight[p->req[i].c.object][p->req[i].c.chunk]--;
  }
  p->n_req = 0;
  if (p->state != PEER_READY)
    return;
  for (size_t i = 0; i < p->n_have; i++) {
    vstate *v = core_find_version(s, p->have[i].version);
    uint32_t o = p->have[i].object;
    if (v == NULL || v->avail[o] == NULL)
      continue;
    for (uint64_t c = 0; c < p->have[i].n; c++)
      if (bits_get(&p->have[i], c) && v->avail[o][c] > 0)
        v->avail[o][c]--;
  }
}

/* ---- Choosing requests ------------------------------------------------ */

static void send_simple(stitch_swarm *s, peer *p, wire_type t,
                        const chunk_id *c) {
  wire_msg m;
  ref_msg(&m, t, c);
  core_send(s, p, &m);
}

static int same_chunk(const chunk_id *a, const chunk_id *b) {
  return a->version == b->version && a->object == b->object &&
         a->chunk == b->chunk;
}

/* Where C is among our requests to P, or -1. */
static int find_request(const peer *p, const chunk_id *c) {
  for (unsigned i = 0; i < p->n_req; i++)
    if (same_chunk(&p->req[i].c, c))
      return (int)i;
  return -1;
}

/* Where C is among P's requests to us, or -1. */
int fetch_queued(const peer *p, const chunk_id *c) {
  for (unsigned i = 0; i < p->n_serve; i++)
    if (same_chunk(&p->serve[i], c))
      return (int)i;
  return -1;
}

/* Does P hold chunk C, as far as it told us? */
static int peer_holds(peer *p, const chunk_id *c) {
  const bits *h = peer_bits(p, c->version, c->object, 0, 0);
  return h != NULL && bits_get(h, c->chunk);
}

/* Does a ready neighbour in our own region hold chunk C of (V, O)? */
static int held_nearby(stitch_swarm *s, uint64_t version, uint32_t o,
                       uint64_t c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    chunk_id id = {version, o, c};
    if (near_peer(q) && peer_holds(q, &id))
      return 1;
  }
  return 0;
}

/* Where chunk C of (V, O) falls for the node with key K, uniform in
 * [0, 1): a mix of the chunk's name and the key, so every node of a region
 * ranks every chunk differently, and any node can compute another's. */
static double cross_rank(vstate *v, uint32_t o, uint64_t c,
                         const stitch_pubkey *key) {
  uint64_t h, k;
  memcpy(&h, ref_of(v, o, c)->hash.b, 8);
  memcpy(&k, key->b, 8);
  uint64_t x = h ^ k; /* splitmix64's finalizer */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (double)(x >> 11) / 9007199254740992.0;
}

/* Our region's size, as far as we can tell: the nodes of it we know of
 * (peer exchange tells a node of a few at first), or, once a few chunks
 * have crossed, what their crossers' ranks say, if more. A crosser is
 * about the lowest rank of the region for its chunk, and the lowest of N
 * uniform ranks is 1/(N + 1) on average. */
static double region_size(const stitch_swarm *s) {
  double n = (double)s->region_known + 1;
  if (s->xr_n >= CORE_CROSS_SAMPLES && s->xr_sum > 0 &&
      (double)s->xr_n / s->xr_sum > n)
    n = (double)s->xr_n / s->xr_sum;
  return n;
}

static void count_crosser(stitch_swarm *s, double rank) {
  if (s->xr_n == 1024) { /* forget slowly: regions grow and shrink */
    s->xr_n /= 2;
    s->xr_sum /= 2;
  }
  s->xr_n++;
  s->xr_sum += rank;
}

/* Is it under WAIT ms since the time stamped SINCE (0: never)? Then the
 * schedule runs again when the wait ends. */
static int still_waiting(stitch_swarm *s, const vstate *v, uint32_t since,
                         uint64_t wait) {
  if (since == 0 || at_ms(v, since) + wait <= s->now_ms)
    return 0;
  wake_at(s, at_ms(v, since) + wait);
  return 1;
}

/* Has a CROSSING for chunk C been heard (or sent) lately? */
static int crossing_heard(const stitch_swarm *s, const vstate *v, uint32_t o,
                          uint64_t c) {
  uint32_t h = v->crossing[o][c];
  return h != 0 && at_ms(v, h) + CORE_CROSS_TRUST_MS > s->now_ms;
}

/* A rank in 32 bits, as vstate.bid keeps the lowest, and back. */
static uint32_t rank_bits(double rank) {
  return (uint32_t)(rank * 4294967295.0);
}

static double bits_rank(uint32_t b) { return b / 4294967295.0; }

/* When a node of our region with rank RANK takes its turn at a chunk it
 * first saw a far copy of at SEEN_MS (cross_ok). */
static uint64_t turn_ms(const stitch_swarm *s, const vstate *v, double rank,
                        uint64_t seen_ms) {
  double wait = rank * region_size(s) * CORE_CROSS_STEP_MS;
  wait = wait < CORE_CROSS_WAIT_MS ? wait : CORE_CROSS_WAIT_MS;
  uint64_t added = v->added_ms + (uint64_t)wait,
           seen = seen_ms + CORE_CROSS_HEAR_MS +
                  (uint64_t)(rank * CORE_CROSS_SPREAD_MS);
  return added > seen ? added : seen;
}

/* Tells our region (but EXCEPT) that node KEY would take a turn at chunk
 * C (BID), if its rank is the lowest we know of for C; a BID that is not
 * stops here, so each goes on through the region only as long as it is
 * the lowest anyone there has heard, and we send CORE_CROSS_BIDS_MAX at
 * most per chunk (past that we still heed lower ranks, cross_ok). */
static void bid(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c,
                const stitch_pubkey *key, const peer *except) {
  uint32_t r = rank_bits(cross_rank(v, o, c, key));
  if (v->bid_at[o][c] != 0 && v->bid[o][c] <= r)
    return;
  v->bid[o][c] = r;
  v->bid_at[o][c] = stamp(s, v);
  if (v->bids_sent[o][c] >= CORE_CROSS_BIDS_MAX)
    return;
  v->bids_sent[o][c]++;
  chunk_id id = {v->ref.m->version, o, c};
  wire_msg m;
  ref_msg(&m, WIRE_BID, &id);
  m.node = *key;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q != except && near_peer(q))
      core_send(s, q, &m);
  }
}

/* A far peer holds chunk C: our turn's clock starts (far_at), and unless
 * we do not want the chunk, have it, or it is coming, or nearby, we bid
 * for the turn. */
static void saw_far(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c) {
  if (v->far_at[o][c] != 0)
    return;
  v->far_at[o][c] = stamp(s, v);
  if (in_plan(s, v->ref.m->version, o) && !bits_get(&v->held[o], c) &&
      v->inflight[o][c] == 0 &&
      !crossing_heard(s, v, o, c) &&
      !held_nearby(s, v->ref.m->version, o, c))
    bid(s, v, o, c, &s->cfg.node_pk, NULL);
}

/* May chunk C cross into our region through us now? Each chunk should
 * enter a region about once and spread inside it, but a region's nodes
 * learn of a version, and that a far peer holds a chunk, at about the
 * same moments. So they take turns, in an order each can compute for
 * itself: every node ranks every chunk (cross_rank), and a node fetches
 * across no sooner than its rank times the region's size times
 * CORE_CROSS_STEP_MS after the version arrived (at most
 * CORE_CROSS_WAIT_MS), nor sooner than CORE_CROSS_HEAR_MS plus its rank
 * times CORE_CROSS_SPREAD_MS after it first saw a far copy (turn_ms). The
 * first keeps the region's nodes a step apart when they all see a far
 * copy at once (a delta); the second spreads the few that see it first
 * (an anchor's chunks reach a far region's nodes one link at a time)
 * without making them wait for the ranks that cannot cross yet. Turns a
 * few ms apart still crossed twice, each before the other's CROSSING came
 * (a hop through the region waits behind a chunk on its link). So a node
 * that first sees a far copy also bids for the turn (BID, passed on
 * through the region while it is the lowest rank heard of), and a node
 * that heard a lower rank's bid waits for that node's turn as it reckons
 * it, plus CORE_CROSS_BID_SLACK_MS. A node that crosses tells its
 * neighbours (CROSSING); they pass it on through the region, and a node
 * that has heard it waits for the chunk to arrive nearby instead, for
 * CORE_CROSS_TRUST_MS (after that the chunk may cross again, should its
 * crosser have left or stalled). So does a node that asks the seed for a
 * chunk, or is passed one unasked across (tell_entering). A node that
 * sees a nearby copy fetches that. docs/swarm.md has the rule,
 * docs/simulator.md the figures. */
static int cross_ok(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c) {
  if (held_nearby(s, v->ref.m->version, o, c))
    return 0;
  if (still_waiting(s, v, v->crossing[o][c], CORE_CROSS_TRUST_MS) ||
      still_waiting(s, v, v->coming[o][c], CORE_COMING_WAIT_MS))
    return 0;
  saw_far(s, v, o, c);
  double rank = cross_rank(v, o, c, &s->cfg.node_pk);
  uint64_t next = turn_ms(s, v, rank, at_ms(v, v->far_at[o][c]));
  if (v->bid_at[o][c] != 0 && v->bid[o][c] < rank_bits(rank)) {
    /* Bids, true or not, hold us back CORE_CROSS_TRUST_MS at most. */
    uint64_t theirs = turn_ms(s, v, bits_rank(v->bid[o][c]),
                              at_ms(v, v->bid_at[o][c])) +
                      CORE_CROSS_BID_SLACK_MS,
             cap = at_ms(v, v->far_at[o][c]) + CORE_CROSS_TRUST_MS;
    theirs = theirs < cap ? theirs : cap;
    next = next > theirs ? next : theirs;
  }
  if (next <= s->now_ms)
    return 1;
  wake_at(s, next);
  return 0;
}

static const stitch_pubkey no_key; /* all zeros */

/* Tells our region's neighbours but EXCEPT that chunk C comes into our
 * region: through node WHO by its turn (cross_ok), or, with WHO all
 * zeros, otherwise (tell_entering), which says nothing of the region's
 * size. */
static void tell_crossing(stitch_swarm *s, vstate *v, const chunk_id *c,
                          const stitch_pubkey *who, const peer *except) {
  v->crossing[c->object][c->chunk] = stamp(s, v);
  if (memcmp(who->b, no_key.b, sizeof(no_key.b)) != 0)
    count_crosser(s, cross_rank(v, c->object, c->chunk, who));
  wire_msg m;
  ref_msg(&m, WIRE_CROSSING, c);
  m.node = *who;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q != except && near_peer(q))
      core_send(s, q, &m);
  }
}

/* Chunk C comes into our region through us, though not by a turn: we ask
 * the seed for it, or a far peer passed it to us unasked (push_across).
 * Our region is told as of a crossing, so that none of its nodes fetches
 * C across meanwhile (where no other region is known, there is nothing
 * to tell). Without it, nodes whose neighbours lacked a passed
 * chunk fetched it across anyway (its holder tells only its neighbours),
 * and so did nodes of the seed's region, from far nodes it was passed to:
 * 0.64 of a 238 MB anchor crossed back into the seed's region at 100
 * nodes in three regions (docs/simulator.md). */
static void tell_entering(stitch_swarm *s, vstate *v, const chunk_id *c) {
  if (crossing_heard(s, v, c->object, c->chunk))
    return; /* told already (a pass's CROSSING came first) */
  int far = s->far_known > 0;
  for (size_t i = 0; i < s->n_peers && !far; i++)
    far = s->peers[i].state == PEER_READY && far_peer(&s->peers[i]);
  if (far)
    tell_crossing(s, v, c, &no_key, NULL);
}

/* Does a version's chunk C, named in a frame, exist, and do we lack it?
 * Else a CROSSING or BID for it is not news for our region. */
static vstate *lacking(stitch_swarm *s, const wire_msg *m) {
  vstate *v = core_find_version(s, m->version);
  if (v == NULL || m->object >= v->ref.m->n_objects ||
      m->chunk >= v->ref.m->objects[m->object].n_chunks ||
      bits_get(&v->held[m->object], m->chunk))
    return NULL;
  return v;
}

/* A CROSSING from P: passed on through our region once per chunk. From
 * a far peer, one of two things. Naming us, unasked: it is passing us the
 * chunk (pass_to), and we tell our region at once, not a chunk's time on
 * its link later, as if the chunk had come (tell_entering); only while we
 * have heard of no crossing of that chunk, so that a far peer can hold a
 * chunk back from our region once, for CORE_CROSS_TRUST_MS. Else an
 * answer to our request: it will not send us the chunk, which is on its
 * way into our region through another node (coming_into). That counts as
 * a REJECT (we ask that peer for the chunk no more), and we wait for a
 * nearby copy as after a CROSSING, without telling the region (telling it
 * made the last node later: those it reached waited for a copy that came
 * slowly). A far peer may say so only of a chunk we asked it for, and the
 * wait starts at the first time only, so one that says it of everything
 * holds back each chunk from us once, for CORE_COMING_WAIT_MS. */
void fetch_on_crossing(stitch_swarm *s, peer *p, const wire_msg *m) {
  p->answered_ms = s->now_ms;
  vstate *v = lacking(s, m);
  if (v == NULL || p->is_seed)
    return; /* not news for our region, or not ours to judge */
  chunk_id c = {m->version, m->object, m->chunk};
  if (far_peer(p)) {
    /* coming_into never names the asker: naming us, it is a pass. */
    if (memcmp(m->node.b, s->cfg.node_pk.b, sizeof(m->node.b)) == 0) {
      if (v->crossing[c.object][c.chunk] == 0)
        tell_entering(s, v, &c);
      return;
    }
    if (find_request(p, &c) < 0)
      return;
    fetch_on_reject(s, p, &c);
    if (v->coming[c.object][c.chunk] == 0)
      v->coming[c.object][c.chunk] = stamp(s, v);
    return;
  }
  if (!crossing_heard(s, v, c.object, c.chunk)) /* else passed on already */
    tell_crossing(s, v, &c, &m->node, p);
}

/* A BID from P: the node it names would take a turn at the chunk. From a
 * neighbour of our region only; passed on while it is the lowest rank we
 * know of (bid). */
void fetch_on_bid(stitch_swarm *s, peer *p, const wire_msg *m) {
  vstate *v = lacking(s, m);
  if (v == NULL || !near_peer(p) || crossing_heard(s, v, m->object, m->chunk))
    return;
  bid(s, v, m->object, m->chunk, &m->node, p);
}

/* May chunk C of (V, O), asked for once already, be asked of a second
 * peer (the endgame)? Only once that request is late: it has waited
 * CORE_LATE_FACTOR times the usual wait for a chunk. Asking at once
 * brought most second copies after the first, when a CANCEL no longer
 * stops them: 3.6 % more bytes into each node's downlink at its end,
 * and senders' uplinks busy with them while others still waited. If not
 * yet, the schedule runs again when it will be late. */
static int late(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c) {
  if (v->asked_at[o][c] == 0)
    return 1;
  double w = CORE_LATE_FACTOR * s->wait_ms;
  uint64_t after = w > CORE_LATE_MIN_MS ? (uint64_t)w : CORE_LATE_MIN_MS;
  uint64_t due = at_ms(v, v->asked_at[o][c]) + after;
  if (s->now_ms >= due)
    return 1;
  wake_at(s, due);
  return 0;
}

#define NEAR_MAX 64 /* neighbours wanted_from looks at, at most */

/* Chunks [64 J, 64 J + 64) of bitset B, chunk 64 J + i at bit i; bytes
 * from NBYTES on read as 0. */
static inline uint64_t word_at(const uint8_t *b, uint64_t j, uint64_t nbytes) {
  if (j * 8 + 8 <= nbytes)
    return le64(b + j * 8);
  uint64_t w = 0;
  for (uint64_t i = 0; j * 8 + i < nbytes; i++)
    w |= (uint64_t)b[j * 8 + i] << (8 * i);
  return w;
}

/* The chunks in [64 J, 64 J + 64) and [FROM, TO) that HAVE has, HELD
 * lacks and none of the N_NEAR bitsets in NEAR has, as a word (chunk
 * 64 J + i at bit i). TO is at most HELD's and each NEAR's size; HAVE
 * may be shorter (it offers nothing beyond). pick runs at every event,
 * for every peer with room, and was a quarter of the simulator's time at
 * 10,000 nodes when it went a byte at a time (docs/history/simulator.md
 * "A faster core"). */
static uint64_t wanted_from(const bits *have, const bits *held,
                            const bits *const *near, size_t n_near,
                            uint64_t j, uint64_t from, uint64_t to) {
  to = to < have->n ? to : have->n;
  if (from >= to || to <= j * 64 || from >= j * 64 + 64)
    return 0;
  /* Whole words where the bitsets have them, whatever TO cuts off. */
  uint64_t nbytes = ((have->n < held->n ? have->n : held->n) + 7) / 8;
  uint64_t w = word_at(have->b, j, nbytes) & ~word_at(held->b, j, nbytes);
  for (size_t i = 0; i < n_near && w != 0; i++)
    w &= ~word_at(near[i]->b, j, nbytes);
  if (from > j * 64)
    w &= ~0ull << (from - j * 64);
  if (to < j * 64 + 64)
    w &= ~(~0ull << (to - j * 64));
  return w;
}

/* The bitsets of (V, O) of the ready neighbours of our region (not the
 * seed): a chunk one of them holds never crosses (cross_ok). */
static size_t near_bits(stitch_swarm *s, const vstate *v, uint32_t o,
                        const bits *near[NEAR_MAX]) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_peers && n < NEAR_MAX; i++) {
    peer *q = &s->peers[i];
    const bits *h;
    if (near_peer(q) &&
        (h = peer_bits(q, v->ref.m->version, o, 0, 0)) != NULL &&
        h->n == v->held[o].n)
      near[n++] = h;
  }
  return n;
}

/* The best chunk of (v, o) to ask P for: one it has and we lack, not yet
 * asked for (or, in the endgame, asked for once elsewhere and late);
 * random early on, then the rarest. */
static int pick(stitch_swarm *s, peer *p, vstate *v, uint32_t o, int endgame,
                uint64_t *out) {
  const bits *have = peer_bits(p, v->ref.m->version, o, 0, 0);
  const bits *held = &v->held[o];
  if (have == NULL || have->count == 0 || held->count == held->n)
    return 0;
  uint64_t n = held->n, best = UINT64_MAX, start = core_random(s) % n;
  unsigned best_avail = 0xffffffffu;
  int random_phase = s->fetched < CORE_RANDOM_FIRST;
  int far = far_peer(p);
  const bits *near[NEAR_MAX];
  size_t n_near = far ? near_bits(s, v, o, near) : 0;
  /* From a random start round to it: [start, n), then [0, start). */
  for (int pass = 0; pass < 2; pass++) {
    uint64_t from = pass == 0 ? start : 0, to = pass == 0 ? n : start;
    for (uint64_t j = from / 64, w = 0; j * 64 < to; j++)
      for (w = wanted_from(have, held, near, n_near, j, from, to); w != 0;
           w &= w - 1) {
        uint64_t c = j * 64 + (uint64_t)__builtin_ctzll(w);
        unsigned fl = v->inflight[o][c];
        if (fl > (endgame ? 1u : 0u))
          continue;
        /* The seed is the last resort: its upload is the scarce one. */
        if (p->is_seed && v->avail[o][c] > 1)
          continue;
        /* A chunk crosses regions only when nobody nearby has it, and only
         * through a few nodes of the region at first. */
        if (far && !cross_ok(s, v, o, c))
          continue;
        chunk_id id = {v->ref.m->version, o, c};
        if (fl > 0 && find_request(p, &id) >= 0)
          continue;
        if (random_phase && fl == 0) {
          best = c;
          goto found;
        }
        unsigned a = v->avail[o][c] + 256u * fl; /* fresh chunks first */
        if (a < best_avail && (fl == 0 || late(s, v, o, c))) {
          best_avail = a;
          best = c;
        }
      }
  }
found:
  if (best == UINT64_MAX)
    return 0;
  *out = best;
  return 1;
}

/* Are all wanted chunks held or asked for? Then the endgame starts. */
static int all_requested(stitch_swarm *s) {
  for (size_t k = 0; k < s->plan.n; k++) {
    vstate *v = core_find_version(s, s->plan.step[k].version);
    uint32_t o = s->plan.step[k].object;
    const bits *h = &v->held[o];
    for (uint64_t c = 0; c < h->n; c++) {
      if (c % 8 == 0 && c + 8 <= h->n && h->b[c / 8] == 0xff) {
        c += 7; /* all held */
        continue;
      }
      if (!bits_get(h, c) && v->inflight[o][c] == 0)
        return 0;
    }
  }
  return 1;
}

/* Asks P for the best chunk it can give us, if any. */
static int request_one(stitch_swarm *s, peer *p, int endgame) {
  for (size_t k = 0; k < s->plan.n; k++) {
    vstate *v = core_find_version(s, s->plan.step[k].version);
    uint32_t o = s->plan.step[k].object;
    uint64_t c;
    if (v == NULL || !pick(s, p, v, o, endgame, &c))
      continue;
    chunk_id id = {v->ref.m->version, o, c};
    /* The CHUNK body: the msgpack array around the bytes is small. */
    uint64_t allow = ref_of(v, o, c)->size + 64;
    p->chunk_allow = allow > p->chunk_allow ? allow : p->chunk_allow;
    p->req[p->n_req++] = (request){id, s->now_ms, 0};
    if (v->inflight[o][c]++ == 0)
      v->asked_at[o][c] = stamp(s, v);
    send_simple(s, p, WIRE_REQUEST, &id);
    if (far_peer(p) && v->inflight[o][c] == 1)
      tell_crossing(s, v, &id, &s->cfg.node_pk, NULL);
    else if (p->is_seed && v->inflight[o][c] == 1)
      tell_entering(s, v, &id);
    return 1;
  }
  return 0;
}

/* How many requests a neighbour of our region may have from us at once:
 * the pipeline, or twice that while we are behind those neighbours by
 * more than CORE_BEHIND_MARGIN of the object we fetch first (as their
 * bitfields and HAVEs tell us). An uploader shares its uplink among the
 * requesters it serves, so a node's rate follows its number of
 * neighbours, and the nodes with fewest finished last; with more
 * requests queued at more uploaders, which serve the furthest behind
 * first (serve_turn), a node that falls behind catches up. The seed and
 * far peers keep the pipeline: their upload is the scarce one, and
 * crossing regions is rationed (cross_ok). A request queued behind twice
 * the pipeline of 512 KiB chunks at an uplink of 100 Mbit/s shared by 4
 * waits about 1.3 s, well inside CORE_REQUEST_MS. docs/simulator.md has
 * the figures. */
static unsigned request_depth(stitch_swarm *s) {
  vstate *v = core_find_version(s, s->plan.step[0].version);
  uint32_t o = s->plan.step[0].object;
  double sum = 0;
  unsigned n = 0;
  if (v == NULL || v->held[o].n == 0)
    return s->cfg.pipeline;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    const bits *h;
    if (q->state != PEER_READY || q->is_seed || far_peer(q) ||
        (h = peer_bits(q, v->ref.m->version, o, 0, 0)) == NULL || h->n == 0)
      continue;
    sum += (double)h->count / (double)h->n;
    n++;
  }
  double mine = (double)v->held[o].count / (double)v->held[o].n;
  unsigned more = 2 * s->cfg.pipeline;
  if (n == 0 || mine >= sum / n - CORE_BEHIND_MARGIN)
    return s->cfg.pipeline;
  return more < CORE_MAX_PIPELINE ? more : CORE_MAX_PIPELINE;
}

/* Fills the peers' request pipelines one request at a time, always to the
 * peer with the fewest in flight (ties from a random start): filling them
 * in a fixed order gave the first peers of every node the rarest chunks
 * and most requests, and left the uplinks of the others idle. The ready
 * peers go into s->sched first, in that order, and leave it when they
 * have nothing more for us: walking every peer slot for each request was
 * an eighth of the simulator's time at 10,000 nodes. */
void fetch_schedule(stitch_swarm *s) {
  maybe_apply(s);
  if (s->cfg.seed || s->plan.n == 0)
    return;
  int endgame = all_requested(s);
  s->fetch_wake_ms = UINT64_MAX;
  size_t start = s->n_peers ? (size_t)(core_random(s) % s->n_peers) : 0;
  unsigned depth = request_depth(s);
  size_t n = 0;
  for (size_t k = 0, i = start; k < s->n_peers; k++, i++) {
    peer *p = &s->peers[i < s->n_peers ? i : i - s->n_peers];
    if (p->state == PEER_READY)
      s->sched[n++] = (struct sched_slot){
          p, p->is_seed || far_peer(p) ? s->cfg.pipeline : depth};
  }
  for (;;) {
    size_t best = n;
    for (size_t k = 0; k < n; k++)
      if (s->sched[k].p->n_req < s->sched[k].lim &&
          (best == n || s->sched[k].p->n_req < s->sched[best].p->n_req))
        best = k;
    if (best == n)
      return;
    if (!request_one(s, s->sched[best].p, endgame)) {
      memmove(&s->sched[best], &s->sched[best + 1],
              (n - best - 1) * sizeof(s->sched[0]));
      n--;
    }
  }
}

static void drop_request(stitch_swarm *s, peer *p, unsigned i) {
  vstate *v = core_find_version(s, p->req[i].c.version);
  if (v != NULL && v->inflight[p->req[i].c.object][p->req[i].c.chunk] > 0)
    v->inflight[p->req[i].c.object][p->req[i].c.chunk]--;
  p->req[i] = p->req[--p->n_req];
}

void fetch_on_reject(stitch_swarm *s, peer *p, const chunk_id *c) {
  int i = find_request(p, c);
  if (i >= 0)
    drop_request(s, p, (unsigned)i);
  /* It does not have it after all: stop asking it. */
  bits *b = peer_bits(p, c->version, c->object, 0, 0);
  if (b != NULL && bits_get(b, c->chunk)) {
    b->b[c->chunk / 8] &= (uint8_t)~(1u << (c->chunk % 8));
    b->count--;
    vstate *v = core_find_version(s, c->version);
    if (v != NULL && v->avail[c->object][c->chunk] > 0)
      v->avail[c->object][c->chunk]--;
  }
}

/* Does a ready peer of REGION hold chunk C, or have it queued with us? */
static int region_has(stitch_swarm *s, const char *region, const chunk_id *c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q->state == PEER_READY && strcmp(q->region, region) == 0 &&
        (peer_holds(q, c) || fetch_queued(q, c) >= 0))
      return 1;
  }
  return 0;
}

/* Does a node that has said nothing yet want object O of V? Of the
 * newest version, every node wants the only object, and every node up to
 * date the delta from the parent; an anchor beside a delta, a delta from
 * an older version, or an older version's objects only nodes catching up
 * do. */
static int wanted_by_all(const stitch_swarm *s, const vstate *v, uint32_t o) {
  const stitch_manifest *m = v->ref.m;
  if (v != &s->v[s->n_v - 1])
    return 0;
  return m->n_objects == 1 ||
         (m->parent_version != 0 &&
          m->objects[o].base_version == m->parent_version);
}

/* May chunk C go to the far peer Q unasked? Only to one that wants the
 * object: it said so (a BITFIELD), or it has not said yet and every node
 * up to date does (a far peer's BITFIELD comes a long round trip after
 * the manifest, when the chunk could be there already). Only to one that
 * has nothing queued with us: a link across carries little at once (its
 * window over the long round trip), and a backlog of passed chunks held
 * its own requests back for 2 s in the simulator. Not if a neighbour of
 * Q's region holds it, or has it coming from us (queued, or sent lately:
 * coming_into would not send it then). */
static peer *coming_into(stitch_swarm *s, const peer *p, const chunk_id *c);
static int may_pass(stitch_swarm *s, peer *q, vstate *v, const chunk_id *c) {
  return q->state == PEER_READY && far_peer(q) && q->n_serve == 0 &&
         (peer_bits(q, c->version, c->object, 0, 0) != NULL ||
          wanted_by_all(s, v, c->object)) &&
         !region_has(s, q->region, c) && coming_into(s, q, c) == NULL;
}

/* Chunk C, passed to Q unasked, counts as Q's from now: Q gets no HAVE
 * of it, and no second pass (pass_to, push_near). */
static void count_as_its(stitch_swarm *s, peer *q, vstate *v,
                         const chunk_id *c) {
  bits *h = peer_bits(q, c->version, c->object, 1,
                      v->ref.m->objects[c->object].n_chunks);
  if (h != NULL && !bits_get(h, c->chunk)) {
    bits_set(h, c->chunk);
    fetch_on_have_bit(s, q, c->version, c->object, c->chunk);
  }
}

/* Queues C ahead of Q's requests, unasked, and counts it as Q's from now:
 * Q's region is not passed it twice, and Q gets no HAVE for it. A
 * CROSSING naming Q goes first, so Q tells its region that C is coming a
 * chunk's time on the link sooner than C's arrival would (three regions
 * of 100 nodes and the 238 MB anchor, seeds 1 to 3, with bids: 2.10 /
 * 2.05 / 2.10 F crossed, against 2.13 / 2.07 / 2.15 without it). */
static void pass_to(stitch_swarm *s, peer *q, vstate *v, const chunk_id *c) {
  memmove(&q->serve[1], &q->serve[0], q->n_serve++ * sizeof(q->serve[0]));
  q->serve[0] = *c;
  wire_msg x; /* goes ahead of the chunk (fetch_on_crossing) */
  ref_msg(&x, WIRE_CROSSING, c);
  x.node = q->node;
  core_send(s, q, &x);
  count_as_its(s, q, v, c);
}

/* A chunk the seed gave us goes on at once, unasked, to a neighbour in
 * each other region that wants it (may_pass). The seed gives each chunk
 * out once, so this is the chunk's way into each region our links reach,
 * sooner than a far node's turn (cross_ok) and its request's round trip.
 * A far neighbour busy when it came may still be passed it once it has
 * drained or said it wants the object, until the seed gives us the next
 * (pass_more). docs/swarm.md, "Crossing regions". */
static void push_across(stitch_swarm *s, vstate *v, const chunk_id *c) {
  v->last_seeded[c->object] = c->chunk + 1;
  for (size_t i = 0; i < s->n_peers; i++)
    if (may_pass(s, &s->peers[i], v, c))
      pass_to(s, &s->peers[i], v, c);
}

/* Passes Q the chunk of (V, O) the seed gave us last, if it may take it.
 * An older one is not passed: by then it has mostly come into Q's region
 * another way (a far node's turn, another node's pass) without our
 * hearing of it yet, and passing it sent a second copy across. Passing
 * every one the seed gave us, oldest first, sent 104 of 472 such passes
 * into a region that held the chunk already and 97 into one that had
 * asked across for it (three regions of 100 nodes, docs/simulator.md
 * "Passing the last chunk only"). */
static void pass_more(stitch_swarm *s, peer *q, vstate *v, uint32_t o) {
  if (q->state != PEER_READY || !far_peer(q) || q->n_serve != 0 ||
      v->last_seeded[o] == 0)
    return;
  chunk_id c = {v->ref.m->version, o, v->last_seeded[o] - 1};
  if (may_pass(s, q, v, &c))
    pass_to(s, q, v, &c);
}

void fetch_on_interest(stitch_swarm *s, peer *p, uint64_t version,
                       uint32_t object) {
  vstate *v = core_find_version(s, version);
  if (v != NULL && !s->cfg.seed)
    pass_more(s, p, v, object);
}

/* The largest CHUNK body P may send us: what we asked it for, or any
 * chunk of a version we know, which a peer may pass us unasked
 * (push_across, push_near). */
uint64_t fetch_chunk_allow(const stitch_swarm *s, const peer *p) {
  uint64_t pushed = s->cfg.seed ? 0 : s->chunk_max + 64;
  return p->chunk_allow > pushed ? p->chunk_allow : pushed;
}

static int sending(const stitch_swarm *s, const peer *p);

/* A chunk of the newest version goes on at once, unasked, to a neighbour
 * of our region that told us it wants the object and holds none of it (a
 * BITFIELD, no HAVE since), and has nothing coming from us. One that has
 * said nothing yet may hold it all (a holder whose BITFIELD is slow to
 * come: ctest test_swarm endgame). It saves that neighbour the HAVE and
 * the REQUEST (two latencies of the ~4 in a relay), and a node has
 * nothing to serve until its first chunk comes. Early in a version such
 * a neighbour is common and a chunk's holders are few, so two holders
 * seldom pass one node the same chunk; later there is none. */
static void push_near(stitch_swarm *s, const peer *from, vstate *v,
                      const chunk_id *c) {
  if (s->cfg.seed || v != &s->v[s->n_v - 1])
    return;
  peer *pick = NULL;
  unsigned n = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q == from || !near_peer(q) || q->n_serve > 0 || sending(s, q))
      continue;
    const bits *h = peer_bits(q, c->version, c->object, 0, 0);
    if (h == NULL || h->count > 0)
      continue;
    if (core_random(s) % ++n == 0) /* one of them, uniformly */
      pick = q;
  }
  if (pick == NULL)
    return;
  pick->serve[pick->n_serve++] = *c;
  pick->serve_wait_ms = s->now_ms;
  count_as_its(s, pick, v, c);
}

static void forget_holdings(stitch_swarm *s, peer *p);

/* Was Q's request R outrun: asked of Q before the request (at ASKED_MS)
 * that brought the chunk from another peer, with nothing from Q since?
 * An honest peer busy with others is outrun now and then, and earns a
 * point for each chunk it does serve; a liar that advertises everything
 * and serves nothing is outrun at every request (docs/security.md
 * "Hostile members"). */
static int outrun(const peer *q, const request *r, uint64_t asked_ms) {
  return !q->is_seed && r->sent_ms < asked_ms && q->answered_ms < r->sent_ms;
}

/* Charges Q for an outrun request; while its score is below 0 (it has
 * not served enough lately to make up for it), what it advertised is
 * believed no more until its next HAVE, as for a late request. 1 when
 * Q was dropped. */
static int charge_outrun(stitch_swarm *s, peer *q) {
  if (core_score(s, q, SCORE_OUTRUN))
    return 1;
  if (score_value(&q->sc, s->now_ms) < 0)
    forget_holdings(s, q);
  return 0;
}

int fetch_on_chunk(stitch_swarm *s, peer *p, const wire_msg *m) {
  chunk_id c = {m->version, m->object, m->chunk};
  int i = find_request(p, &c);
  uint64_t asked_ms = i >= 0 ? p->req[i].sent_ms : UINT64_MAX;
  if (i >= 0) { /* the usual wait: an average over the last 8 or so */
    double took = (double)(s->now_ms - p->req[i].sent_ms);
    s->wait_ms = s->wait_ms > 0 ? s->wait_ms + (took - s->wait_ms) / 8 : took;
    drop_request(s, p, (unsigned)i);
    p->answered_ms = s->now_ms;
  }
  vstate *v = core_find_version(s, m->version);
  if (v == NULL) { /* a version we forgot since we asked, or none */
    if (i < 0) {
      s->st.unasked_chunks++;
      core_score(s, p, SCORE_UNASKED);
    }
    return 0;
  }
  if (m->object >= v->ref.m->n_objects ||
      m->chunk >= v->ref.m->objects[m->object].n_chunks)
    return -1; /* no such chunk: not a mistake an honest peer makes */
  if (bits_get(&v->held[m->object], m->chunk)) {
    s->st.chunks_twice++; /* the endgame's second copy, or a reply to a
                           * cancel, or two pushes of one chunk */
    if (i < 0) { /* nobody asked, and no use: a pusher's flood costs it */
      s->st.unasked_chunks++;
      core_score(s, p, SCORE_UNASKED);
    }
    return 0;
  }
  /* Unasked (a reply after our request timed out, or after a cancel) is
   * fine if it verifies: the hash decides, not the bookkeeping. */
  const stitch_chunk_ref *r = ref_of(v, m->object, m->chunk);
  int bad = m->data_len != r->size;
  if (!bad && !s->cfg.write_verifies) {
    stitch_digest h;
    stitch_hash(m->data, m->data_len, &h);
    bad = memcmp(h.b, r->hash.b, 32) != 0;
  }
  int rc = bad ? 0 : s->io.chunk_write(s->io.user, &r->hash, m->data,
                                       m->data_len);
  if (bad || (rc == STITCH_ECHECKSUM && s->cfg.write_verifies)) {
    s->st.verify_failures++;
    core_log(s, "version %" PRIu64 " object %u chunk %" PRIu64
             ": hash mismatch from peer %u",
             m->version, m->object, m->chunk, p->id);
    return -1;
  }
  if (rc != 0) {
    core_log(s, "could not store a chunk");
    return 0; /* ours, not theirs: ask again later */
  }
  bits_set(&v->held[m->object], m->chunk);
  core_score(s, p, SCORE_USEFUL);
  s->fetched++;
  s->st.bytes_down += m->data_len;
  if (p->is_seed)
    s->st.bytes_from_seed += m->data_len;
  else if (p->same_region)
    s->st.bytes_same_region += m->data_len;
  else
    s->st.bytes_other_region += m->data_len;
  if (in_plan(s, m->version, m->object))
    s->st.fetch_done++;
  if (p->is_seed && !s->cfg.seed) {
    if (i < 0) /* the seed's first round comes unasked (seed_offer) */
      tell_entering(s, v, &c);
    push_across(s, v, &c);
  } else if (i < 0 && far_peer(p)) {
    tell_entering(s, v, &c);
  }
  push_near(s, p, v, &c);
  /* Cancel the endgame's other copies, tell everyone we have it (but
   * those we pass it to). */
  for (size_t k = 0; k < s->n_peers; k++) {
    peer *q = &s->peers[k];
    if (q->state != PEER_READY || fetch_queued(q, &c) >= 0)
      continue;
    int j = find_request(q, &c);
    if (j >= 0) {
      int beaten = outrun(q, &q->req[j], asked_ms);
      drop_request(s, q, (unsigned)j);
      send_simple(s, q, WIRE_CANCEL, &c);
      if (beaten && charge_outrun(s, q))
        continue; /* dropped */
    }
    if (peer_told(q, c.version, c.object) != NULL)
      send_simple(s, q, WIRE_HAVE, &c);
  }
  fetch_announce_interest(s, p);
  for (size_t k = 0; k < s->n_peers; k++)
    fetch_announce_interest(s, &s->peers[k]);
  maybe_apply(s);
  return 0;
}

/* ---- Serving ---------------------------------------------------------- */

/* Is chunk C on its way from us into the region of the far peer P: sent
 * to another node of that region in the last CORE_SENT_RECENT_MS, or
 * queued for one whose link is moving (we began a chunk to it in that
 * time; a requester that stops reading must not hold the chunk back from
 * its region)? Returns that node. Two nodes of a region asked one far
 * peer for the same chunk a median 14 ms apart, sooner than a CROSSING
 * reaches one from the other. Without the queued ones the last node came
 * later (docs/history/simulator.md, "One copy into a region at a time"). */
static peer *coming_into(stitch_swarm *s, const peer *p, const chunk_id *c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q == p || q->state != PEER_READY || q->is_seed ||
        strcmp(q->region, p->region) != 0)
      continue;
    unsigned last = (q->sent_next + CORE_SENT_KEPT - 1) % CORE_SENT_KEPT;
    if (q->sent_next > 0 && s->now_ms - q->sent_ms[last] < CORE_SENT_RECENT_MS &&
        fetch_queued(q, c) >= 0)
      return q;
    for (unsigned k = 0; k < CORE_SENT_KEPT; k++)
      if (q->sent_ms[k] != 0 && same_chunk(&q->sent[k], c) &&
          s->now_ms - q->sent_ms[k] < CORE_SENT_RECENT_MS)
        return q;
  }
  return NULL;
}

/* The last chunk we sent P (P->sent_next > 0). */
static unsigned last_sent(const peer *p) {
  return (p->sent_next - 1) % CORE_SENT_KEPT;
}

/* Is a chunk we handed the driver for P still on its way out? At most
 * CORE_SENDING_MAX_MS after we handed it over. */
static int sending(const stitch_swarm *s, const peer *p) {
  return p->sending && p->sent_next > 0 &&
         s->now_ms - p->sent_ms[last_sent(p)] < CORE_SENDING_MAX_MS;
}

/* How far behind P is on what it asks of us: the fraction it holds of the
 * object of its first queued request (or, with none queued, of the chunk
 * on its way to it), as its bitfield and HAVEs tell us. */
static double behind(peer *p) {
  const chunk_id *c = p->n_serve > 0 ? &p->serve[0] : &p->sent[last_sent(p)];
  const bits *h = peer_bits(p, c->version, c->object, 0, 0);
  return h == NULL || h->n == 0 ? 0 : (double)h->count / (double)h->n;
}

/* May P's queued requests be served now? Only the CORE_SERVE_SLOTS
 * requesters of our region furthest behind are served at once, of those
 * with requests queued or a chunk on its way out (a requester's queue
 * with us is mostly empty while its chunk goes); the others' requests
 * wait in their queues, at most CORE_SERVE_WAIT_MS for each chunk. A
 * driver shares an uplink evenly among the links that have data on it,
 * so without this the nodes with fewest neighbours finished last
 * (docs/swarm.md "Serving the furthest behind first"). A requester more
 * than CORE_BEHIND_MARGIN further behind than P counts as two: one slot
 * is a quarter of an uplink, and a node its region left with three
 * neighbours got at most three quarters of its downlink. Far peers'
 * requests are served at once, beside the slots: a crossing feeds a
 * region. The seed super-seeds instead. */
static int serve_turn(stitch_swarm *s, peer *p) {
  if (s->cfg.seed || far_peer(p) ||
      s->now_ms - p->serve_wait_ms >= CORE_SERVE_WAIT_MS)
    return 1;
  double mine = behind(p);
  unsigned ahead = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q == p || q->state != PEER_READY || far_peer(q) ||
        (q->n_serve == 0 && !sending(s, q)))
      continue;
    double theirs = behind(q);
    if (theirs < mine || (theirs == mine && q->id < p->id)) {
      ahead += theirs < mine - CORE_BEHIND_MARGIN ? 2 : 1;
      if (ahead >= CORE_SERVE_SLOTS)
        return 0;
    }
  }
  return 1;
}

void fetch_serve_next(stitch_swarm *s, peer *p) {
  while (p->n_serve > 0 && serve_turn(s, p)) {
    chunk_id c = p->serve[0];
    memmove(&p->serve[0], &p->serve[1], (p->n_serve - 1) * sizeof(c));
    p->n_serve--;
    vstate *v = core_find_version(s, c.version);
    if (v == NULL || !bits_get(&v->held[c.object], c.chunk))
      continue;
    if (s->cfg.seed && peer_holds(p, &c))
      continue; /* pushed (seed_offer), and P got it elsewhere since */
    /* Into a far region, a chunk goes about once: a second asker there
     * is told it is coming through another node, and waits for it. */
    peer *q;
    if (!s->cfg.seed && far_peer(p) && (q = coming_into(s, p, &c)) != NULL) {
      wire_msg x;
      ref_msg(&x, WIRE_CROSSING, &c);
      x.node = q->node;
      core_send(s, p, &x);
      continue;
    }
    const stitch_chunk_ref *r = ref_of(v, c.object, c.chunk);
    const uint8_t *buf;
    size_t len;
    if (s->io.chunk_read(s->io.user, &r->hash, &buf, &len) != 0) {
      send_simple(s, p, WIRE_REJECT, &c);
      continue;
    }
    wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = WIRE_CHUNK;
    m.version = c.version;
    m.object = c.object;
    m.chunk = c.chunk;
    m.data = buf;
    m.data_len = len;
    if (core_send_chunk(s, p, &m) != 0) { /* released with the peer */
      if (p->pay != buf && s->io.chunk_release != NULL)
        s->io.chunk_release(s->io.user, buf, len);
      return;
    }
    s->st.bytes_up += len;
    p->sending = 1;
    p->serve_wait_ms = s->now_ms;
    p->sent[p->sent_next % CORE_SENT_KEPT] = c;
    p->sent_ms[p->sent_next++ % CORE_SENT_KEPT] = s->now_ms;
    if (p->same_region)
      s->st.bytes_to_same_region += len;
    else
      s->st.bytes_to_other_region += len;
    if (s->cfg.seed) {
      v->sent[c.object][c.chunk]++;
      seed_offer(s, p);
    } else {
      pass_more(s, p, v, c.object);
    }
    return; /* one chunk at a time: the driver drains it first */
  }
}

/* ---- Timers ----------------------------------------------------------- */

/* P let a request go late: what it said it holds is believed no more
 * until it says so again (a HAVE). A liar that claims every chunk
 * otherwise counts as a second holder of each, and the seed, asked only
 * for chunks nobody else holds (pick), is asked for none. Nor is a
 * CROSSING or a BID heard for a chunk it claims while we lack it: a liar
 * that fetches a chunk across honestly, says so and serves it to nobody
 * held its region off that chunk for CORE_CROSS_TRUST_MS (an honest
 * crosser's chunk may cross twice instead). */
static void forget_holdings(stitch_swarm *s, peer *p) {
  for (size_t i = 0; i < p->n_have; i++) {
    bits *b = &p->have[i];
    vstate *v = core_find_version(s, b->version);
    uint32_t o = b->object;
    for (uint64_t c = 0; v != NULL && v->avail[o] != NULL && c < b->n; c++) {
      if (!bits_get(b, c))
        continue;
      if (v->avail[o][c] > 0)
        v->avail[o][c]--;
      if (!bits_get(&v->held[o], c))
        v->crossing[o][c] = v->bid_at[o][c] = 0;
    }
    memset(b->b, 0, b->n / 8 + 1);
    b->count = 0;
  }
}

/* Charges P for our requests that went late (once each) and for a stall:
 * requests out and no answer for SCORE_STALL_MS (score.h says why those
 * bounds). 1 when P was dropped. */
static int fetch_judge(stitch_swarm *s, peer *p) {
  double w = SCORE_LATE_FACTOR * s->wait_ms;
  uint64_t late_ms = w > SCORE_LATE_MIN_MS ? (uint64_t)w : SCORE_LATE_MIN_MS;
  uint64_t oldest = UINT64_MAX;
  for (unsigned k = 0; k < p->n_req; k++) {
    request *r = &p->req[k];
    oldest = r->sent_ms < oldest ? r->sent_ms : oldest;
    if (!r->late && s->now_ms - r->sent_ms >= late_ms) {
      r->late = 1;
      if (core_score(s, p, SCORE_LATE))
        return 1;
      forget_holdings(s, p);
    }
  }
  if (p->n_req == 0)
    return 0;
  uint64_t since = p->answered_ms > oldest ? p->answered_ms : oldest;
  if (s->now_ms - since < SCORE_STALL_MS ||
      s->now_ms - p->stall_ms < SCORE_STALL_MS)
    return 0;
  p->stall_ms = s->now_ms;
  return core_score(s, p, SCORE_STALL);
}

void fetch_tick(stitch_swarm *s) {
  if (s->replan)
    fetch_replan(s);
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *p = &s->peers[i];
    if (p->state != PEER_READY)
      continue;
    if (fetch_judge(s, p))
      continue; /* dropped: its score fell too low */
    for (unsigned k = 0; k < p->n_req;) {
      if (s->now_ms - p->req[k].sent_ms < CORE_REQUEST_MS) {
        k++;
        continue;
      }
      drop_request(s, p, k);
      if (core_score(s, p, SCORE_TIMEOUT))
        break;
      if (++p->timeouts >= 3) { /* it holds our pipeline: greylisted */
        if (!core_score(s, p, SCORE_SILENT))
          core_drop(s, p, 0, "too slow");
        break;
      }
    }
    if (s->cfg.seed && p->state == PEER_READY)
      seed_offer(s, p);
  }
}

/* ---- The seed --------------------------------------------------------- */

void seed_on_upload(stitch_swarm *s, const chunk_id *c) {
  vstate *v = core_find_version(s, c->version);
  if (v != NULL && v->sent[c->object] != NULL)
    v->sent[c->object][c->chunk]++;
}

/* A new version: every neighbour of our region wants its only object (or
 * the delta from the parent), and gets its first round at once, before
 * its BITFIELD says so a round trip later. Not a far neighbour: its
 * interest comes in time, and its share of the first round, pushed that
 * early, went across into its region and straight back into ours (0.41 F
 * into the seed's region in ctest sim_regions). */
void seed_on_manifest(stitch_swarm *s) {
  if (!s->cfg.seed || s->n_v == 0)
    return;
  vstate *v = &s->v[s->n_v - 1];
  for (uint32_t o = 0; o < v->ref.m->n_objects; o++) {
    if (!wanted_by_all(s, v, o))
      continue;
    for (size_t i = 0; i < s->n_peers; i++)
      if (s->peers[i].state == PEER_READY && !far_peer(&s->peers[i]))
        (void)peer_bits(&s->peers[i], v->ref.m->version, o, 1,
                        v->ref.m->objects[o].n_chunks);
  }
  for (size_t i = 0; i < s->n_peers; i++)
    seed_offer(s, &s->peers[i]);
}

/* Ready peers that lack some of (version, object): those that said so,
 * and those that have not said anything about it yet, which at a new
 * version is everyone soon. Counting only those that had asked gave the
 * first peer to ask a share of the whole object. REACHING: only those
 * whose links reach every region (reach_all). */
static unsigned wanting(stitch_swarm *s, uint64_t version, uint32_t object,
                        int reaching) {
  unsigned n = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    if (q->state != PEER_READY || (reaching && !reach_all(s, q)))
      continue;
    int whole = 0;
    for (size_t k = 0; k < q->n_have; k++)
      whole |= q->have[k].version == version && q->have[k].object == object &&
               q->have[k].count == q->have[k].n;
    n += !whole;
  }
  return n;
}

/* Offers P chunks it lacks of every object it wants: in the first round a
 * fair share of the object (so every interested peer gets distinct chunks
 * to pass on), queued for P unasked, a pipeline's worth at a time: a HAVE
 * and a REQUEST would cost a round trip before each peer's first chunk,
 * and every node's start waits on those (one-chunk deltas at 1,000 nodes
 * in three regions came 11 % sooner, docs/history/simulator.md "The
 * seed's first round unasked"). Twice that at a time held the last node
 * back in two runs of three at 300 nodes. Later offers are HAVEs, for P
 * to ask, at most 2 x pipeline at a time. An object of no more chunks
 * than there are peers whose links reach every region goes to
 * those alone, a chunk each: each passes its chunk across into every
 * other region at once (push_across), where another's would leave some
 * region to fetch it by a pull, a long round trip later (reach.c). A
 * larger one goes to every peer: giving an anchor's first round to half
 * the peers held every region back 0.1 s (docs/history/simulator.md
 * "Every region within reach"). */
void seed_offer(stitch_swarm *s, peer *p) {
  if (!s->cfg.seed || p->state != PEER_READY)
    return;
  for (size_t i = 0; i < p->n_have; i++) {
    bits *want = &p->have[i];
    vstate *v = core_find_version(s, want->version);
    uint32_t o = want->object;
    if (v == NULL || want->count == want->n || v->held[o].count == 0)
      continue;
    bits *off = peer_offered(p, want->version, o, want->n);
    if (off == NULL)
      continue;
    unsigned outstanding = 0;
    int round_done = 1; /* every chunk offered or sent to someone */
    for (uint64_t c = 0; c < want->n; c++) {
      outstanding += bits_get(off, c) && !bits_get(want, c);
      round_done &= v->sent[o][c] > 0 || v->offers[o][c] > 0 ||
                    !bits_get(&v->held[o], c);
    }
    /* After the first round, only a peer stuck for a while gets more:
     * stuck on this object, so the clock starts when it first asked. */
    if (!off->timed) {
      off->timed = 1;
      off->since_ms = s->now_ms;
    }
    uint64_t moved = p->progress_ms > off->since_ms ? p->progress_ms
                                                    : off->since_ms;
    if (round_done && s->now_ms - moved < CORE_SEED_IDLE_MS)
      continue;
    unsigned reaching = round_done || want->n > s->n_peers
                            ? 0
                            : wanting(s, want->version, o, 1);
    int few = reaching > 0 && want->n <= reaching;
    if (few && !reach_all(s, p))
      continue;
    /* The first round is queued unasked: as many as P would ask. */
    uint64_t depth = (uint64_t)s->cfg.pipeline * (round_done ? 2 : 1);
    if (!round_done) {
      unsigned peers = few ? reaching : wanting(s, want->version, o, 0);
      uint64_t share = (want->n + peers - 1) / (peers ? peers : 1);
      depth = share < depth ? share : depth;
      depth = depth ? depth : 1;
    }
    while (outstanding < depth) {
      uint64_t best = UINT64_MAX, start = core_random(s) % want->n;
      uint64_t best_key = UINT64_MAX;
      for (uint64_t k = 0; k < want->n; k++) {
        uint64_t c = (start + k) % want->n;
        if (bits_get(want, c) || bits_get(off, c) || !bits_get(&v->held[o], c))
          continue;
        /* First round: distinct chunks to distinct peers. Then the least
         * sent, the least offered. */
        if (!round_done && (v->sent[o][c] > 0 || v->offers[o][c] > 0))
          continue;
        uint64_t key = ((uint64_t)v->sent[o][c] << 32) | v->offers[o][c];
        if (key < best_key) {
          best_key = key;
          best = c;
        }
      }
      if (best == UINT64_MAX)
        break;
      bits_set(off, best);
      v->offers[o][best]++;
      outstanding++;
      chunk_id id = {want->version, o, best};
      if (!round_done && p->n_serve < CORE_MAX_SERVE) {
        if (p->n_serve == 0)
          p->serve_wait_ms = s->now_ms;
        p->serve[p->n_serve++] = id;
      } else {
        send_simple(s, p, WIRE_HAVE, &id);
      }
    }
    if (round_done)
      off->since_ms = s->now_ms; /* one more batch per idle period */
  }
}
