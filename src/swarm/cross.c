/* cross.c: crossing regions (cross.h says what it owns; docs/swarm.md
 * "Crossing regions" has the rule, docs/simulator.md the figures).
 *
 * A chunk is fetched from another region only when no neighbour of ours
 * holds it, and at first only by a few designated nodes of the region
 * (cross_ok), so that it crosses into each region about once and spreads
 * inside. The nodes of a region take turns in an order each computes for
 * itself (cross_rank), bid for a turn (BID), and tell the region when a
 * chunk comes in through them (CROSSING). A chunk the seed gave us goes on
 * across at once, unasked, to a far neighbour that wants it (push_across),
 * and a far peer asking for a chunk already on its way into its region is
 * told so instead of sent it (cross_answer). */
#include "swarm/core_internal.h"

#include <stdlib.h>
#include <string.h>

int cross_obj_init(cross_obj *x, uint64_t n) {
  int bad = (x->far_at = calloc(n + 1, 4)) == NULL ||
            (x->crossing = calloc(n + 1, 4)) == NULL ||
            (x->bid = calloc(n + 1, 4)) == NULL ||
            (x->bid_at = calloc(n + 1, 4)) == NULL ||
            (x->bids_sent = calloc(n + 1, 1)) == NULL ||
            (x->coming = calloc(n + 1, 4)) == NULL ||
            (x->told = calloc(n + 1, 4)) == NULL;
  x->last_seeded = 0;
  return bad ? STITCH_ENOMEM : 0;
}

void cross_obj_free(cross_obj *x) {
  free(x->far_at);
  free(x->crossing);
  free(x->bid);
  free(x->bid_at);
  free(x->bids_sent);
  free(x->coming);
  free(x->told);
  memset(x, 0, sizeof(*x));
}

/* Does a ready neighbour in our own region hold chunk C of (V, O)? */
static int held_nearby(stitch_swarm *s, uint64_t version, uint32_t o,
                       uint64_t c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    chunk_id id = {version, o, c};
    if (peer_near(q) && peer_holds(q, &id))
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
  memcpy(&h, chunk_ref(v, o, c)->hash.b, 8);
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
  if (s->xr.n >= CORE_CROSS_SAMPLES && s->xr.sum > 0 &&
      (double)s->xr.n / s->xr.sum > n)
    n = (double)s->xr.n / s->xr.sum;
  return n;
}

static void count_crosser(stitch_swarm *s, double rank) {
  if (s->xr.n == 1024) { /* forget slowly: regions grow and shrink */
    s->xr.n /= 2;
    s->xr.sum /= 2;
  }
  s->xr.n++;
  s->xr.sum += rank;
}

/* Lowers *WAKE to T: the fetcher's schedule runs again by then. */
static void wake_at(uint64_t *wake, uint64_t t) {
  if (t < *wake)
    *wake = t;
}

/* Is it under WAIT ms since the time stamped SINCE (0: never)? Then the
 * schedule runs again when the wait ends. */
static int still_waiting(const stitch_swarm *s, const vstate *v,
                         uint32_t since, uint64_t wait, uint64_t *wake) {
  if (since == 0 || vstate_at(v, since) + wait <= s->now_ms)
    return 0;
  wake_at(wake, vstate_at(v, since) + wait);
  return 1;
}

/* Has a CROSSING for chunk C been heard (or sent) lately? */
static int crossing_heard(const stitch_swarm *s, const vstate *v, uint32_t o,
                          uint64_t c) {
  uint32_t h = v->cross[o].crossing[c];
  return h != 0 && vstate_at(v, h) + CORE_CROSS_TRUST_MS > s->now_ms;
}

/* How long a far peer's notice of a pass into our region holds our turn
 * back: as long as CORE_TOLD_WAITS of our usual waits for a chunk, so
 * that a passed copy on a slow link has time to arrive (netlab's home
 * links, 5 Mbit/s up: 1.16-1.22 F crossed with it, 1.73-1.85 F with a
 * fixed 500 ms); at least CORE_COMING_WAIT_MS, and no more than
 * CORE_CROSS_TRUST_MS, which CROSSINGs get. A node whose neighbours are
 * silent, or whose region the chunk was passed to a silent member of,
 * crosses after that: a fixed CORE_CROSS_TRUST_MS made test_hostile's
 * eclipse 12 times and its silent members 1.7 times slower. */
static uint64_t told_wait(const stitch_swarm *s) {
  double w = CORE_TOLD_WAITS * s->wait_ms;
  return w < CORE_COMING_WAIT_MS ? CORE_COMING_WAIT_MS
         : w > CORE_CROSS_TRUST_MS ? CORE_CROSS_TRUST_MS : (uint64_t)w;
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
  if (v->cross[o].bid_at[c] != 0 && v->cross[o].bid[c] <= r)
    return;
  v->cross[o].bid[c] = r;
  v->cross[o].bid_at[c] = vstate_stamp(s, v);
  if (v->cross[o].bids_sent[c] >= CORE_CROSS_BIDS_MAX)
    return;
  v->cross[o].bids_sent[c]++;
  chunk_id id = {v->ref.m->version, o, c};
  wire_msg m;
  chunk_msg(&m, WIRE_BID, &id);
  m.node = *key;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q != except && peer_near(q))
      core_send(s, q, &m);
  }
}

/* A far peer holds chunk C: our turn's clock starts (far_at), and unless
 * we do not want the chunk, have it, or it is coming, or nearby, we bid
 * for the turn. */
void cross_saw_far(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c) {
  if (v->cross[o].far_at[c] != 0)
    return;
  v->cross[o].far_at[c] = vstate_stamp(s, v);
  if (fetch_in_plan(s, v->ref.m->version, o) && !bits_get(&v->held[o], c) &&
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
int cross_ok(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c,
             int none_near, uint64_t *wake) {
  if (!none_near && held_nearby(s, v->ref.m->version, o, c))
    return 0;
  if (still_waiting(s, v, v->cross[o].crossing[c], CORE_CROSS_TRUST_MS,
                    wake) ||
      still_waiting(s, v, v->cross[o].coming[c], CORE_COMING_WAIT_MS, wake) ||
      still_waiting(s, v, v->cross[o].told[c], told_wait(s), wake))
    return 0;
  cross_saw_far(s, v, o, c);
  double rank = cross_rank(v, o, c, &s->cfg.node_pk);
  uint64_t next = turn_ms(s, v, rank, vstate_at(v, v->cross[o].far_at[c]));
  if (v->cross[o].bid_at[c] != 0 && v->cross[o].bid[c] < rank_bits(rank)) {
    /* Bids, true or not, hold us back CORE_CROSS_TRUST_MS at most. */
    uint64_t theirs = turn_ms(s, v, bits_rank(v->cross[o].bid[c]),
                              vstate_at(v, v->cross[o].bid_at[c])) +
                      CORE_CROSS_BID_SLACK_MS,
             cap = vstate_at(v, v->cross[o].far_at[c]) + CORE_CROSS_TRUST_MS;
    theirs = theirs < cap ? theirs : cap;
    next = next > theirs ? next : theirs;
  }
  if (next <= s->now_ms)
    return 1;
  wake_at(wake, next);
  return 0;
}

static const stitch_pubkey no_key; /* all zeros */

/* Tells our region's neighbours but EXCEPT that chunk C comes into our
 * region: through node WHO by its turn (cross_ok), or, with WHO all
 * zeros, otherwise (tell_entering), which says nothing of the region's
 * size. */
static void tell_crossing(stitch_swarm *s, vstate *v, const chunk_id *c,
                          const stitch_pubkey *who, const peer *except) {
  v->cross[c->object].crossing[c->chunk] = vstate_stamp(s, v);
  if (memcmp(who->b, no_key.b, sizeof(no_key.b)) != 0)
    count_crosser(s, cross_rank(v, c->object, c->chunk, who));
  wire_msg m;
  chunk_msg(&m, WIRE_CROSSING, c);
  m.node = *who;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q != except && peer_near(q))
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
  if (cross_far_known(s))
    tell_crossing(s, v, c, &no_key, NULL);
}

int cross_far_known(const stitch_swarm *s) {
  int far = s->far_known > 0;
  for (size_t i = 0; i < s->n_peers && !far; i++)
    far = s->peers[i].state == PEER_READY && peer_far(&s->peers[i]);
  return far;
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
 * a far peer, one of three things. Naming us, unasked: it is passing us
 * the chunk (pass_to), and we tell our region at once, not a chunk's time
 * on its link later, as if the chunk had come (tell_entering); only while
 * we have heard of no crossing of that chunk, so that a far peer can hold
 * a chunk back from our region once, for CORE_CROSS_TRUST_MS. Naming
 * another node, unasked: it is passing the chunk into our region through
 * that node (pass_to's notice to the rest of the region, below). Else an
 * answer to our request: it will not send us the chunk, which is on its
 * way into our region through another node (coming_into). That counts as
 * a REJECT (we ask that peer for the chunk no more), and we wait for a
 * nearby copy as after a CROSSING, without telling the region (telling it
 * made the last node later: those it reached waited for a copy that came
 * slowly). A far peer may say so only of a chunk we asked it for, and the
 * wait starts at the first time only, so one that says it of everything
 * holds back each chunk from us once, for CORE_COMING_WAIT_MS. */
void cross_on_crossing(stitch_swarm *s, peer *p, const wire_msg *m) {
  p->answered_ms = s->now_ms;
  vstate *v = lacking(s, m);
  if (v == NULL || p->is_seed)
    return; /* not news for our region, or not ours to judge */
  chunk_id c = {m->version, m->object, m->chunk};
  if (peer_far(p)) {
    /* coming_into never names the asker: naming us, it is a pass. */
    if (memcmp(m->node.b, s->cfg.node_pk.b, sizeof(m->node.b)) == 0) {
      if (v->cross[c.object].crossing[c.chunk] == 0)
        tell_entering(s, v, &c);
      return;
    }
    if (fetch_asked(p, &c) < 0) {
      /* Unasked, naming another node: P passes the chunk into our region
       * through that node (pass_to). We wait for a nearby copy
       * (told_wait, from the first notice only, so a far peer that says
       * it of everything holds each chunk back from us once), and ask
       * that node early, if it is our neighbour. We do not pass it on:
       * that node tells the region, and its CROSSING, passed on hop by
       * hop, is what each node asks early of its neighbour nearer the way
       * in by, and what holds the region's turns back for longer. */
      if (v->cross[c.object].told[c.chunk] == 0)
        v->cross[c.object].told[c.chunk] = vstate_stamp(s, v);
      peer *q = core_ready_key(s, &m->node);
      if (q != NULL && peer_near(q))
        fetch_early_from(s, q, v, &c);
      return;
    }
    fetch_on_reject(s, p, &c);
    if (v->cross[c.object].coming[c.chunk] == 0)
      v->cross[c.object].coming[c.chunk] = vstate_stamp(s, v);
    return;
  }
  if (!crossing_heard(s, v, c.object, c.chunk)) { /* else passed on already */
    tell_crossing(s, v, &c, &m->node, p);
    fetch_early_from(s, p, v, &c);
  }
}

/* A BID from P: the node it names would take a turn at the chunk. From a
 * neighbour of our region only; passed on while it is the lowest rank we
 * know of (bid). */
void cross_on_bid(stitch_swarm *s, peer *p, const wire_msg *m) {
  vstate *v = lacking(s, m);
  if (v == NULL || !peer_near(p) || crossing_heard(s, v, m->object, m->chunk))
    return;
  bid(s, v, m->object, m->chunk, &m->node, p);
}

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

/* May chunk C go to the far peer Q unasked? Only to one that wants the
 * object: it said so (a BITFIELD), or it has not said yet and every node
 * up to date does (a far peer's BITFIELD comes a long round trip after
 * the manifest, when the chunk could be there already). Only to one that
 * has nothing queued with us: a link across carries little at once (its
 * window over the long round trip), and a backlog of passed chunks held
 * its own requests back for 2 s in the simulator. Not if a neighbour of
 * Q's region holds it, or has it coming from us (queued, or sent lately:
 * coming_into would not send it then). */
static int may_pass(stitch_swarm *s, peer *q, vstate *v, const chunk_id *c) {
  return q->state == PEER_READY && peer_far(q) && q->n_serve == 0 &&
         (peer_bits(q, c->version, c->object, 0, 0) != NULL ||
          core_wanted_by_all(s, v, c->object)) &&
         !region_has(s, q->region, c) && coming_into(s, q, c) == NULL;
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
  core_sendable(s, q);
  wire_msg x; /* goes ahead of the chunk (cross_on_crossing) */
  chunk_msg(&x, WIRE_CROSSING, c);
  x.node = q->node;
  core_send(s, q, &x);
  /* The same CROSSING to our other neighbours of Q's region, ahead of
   * the HAVE they get from us for C: each learns that C comes into its
   * region through Q from the peer it would otherwise fetch it from, with
   * no relay through Q and no race between Q's CROSSING and its own turn
   * to cross (cross_ok). */
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *r = &s->peers[i];
    if (r != q && r->state == PEER_READY && !r->is_seed && peer_far(r) &&
        strcmp(r->region, q->region) == 0 && !peer_holds(r, c))
      core_send(s, r, &x);
  }
  fetch_pushed(s, q, v, c);
}

/* A chunk the seed gave us goes on at once, unasked, to a neighbour in
 * each other region that wants it (may_pass). The seed gives each chunk
 * out once, so this is the chunk's way into each region our links reach,
 * sooner than a far node's turn (cross_ok) and its request's round trip.
 * A far neighbour busy when it came may still be passed it once it has
 * drained or said it wants the object, until the seed gives us the next
 * (cross_pass_more). docs/swarm.md, "Crossing regions". */
static void push_across(stitch_swarm *s, vstate *v, const chunk_id *c) {
  v->cross[c->object].last_seeded = c->chunk + 1;
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
void cross_pass_more(stitch_swarm *s, peer *q, vstate *v, uint32_t o) {
  if (q->state != PEER_READY || !peer_far(q) || q->n_serve != 0 ||
      v->cross[o].last_seeded == 0)
    return;
  chunk_id c = {v->ref.m->version, o, v->cross[o].last_seeded - 1};
  if (may_pass(s, q, v, &c))
    pass_to(s, q, v, &c);
}


void cross_on_interest(stitch_swarm *s, peer *p, uint64_t version,
                       uint32_t object) {
  vstate *v = core_find_version(s, version);
  if (v != NULL && !s->cfg.seed)
    cross_pass_more(s, p, v, object);
}

void cross_on_request(stitch_swarm *s, const peer *p, vstate *v,
                      const chunk_id *c) {
  if (peer_far(p))
    tell_crossing(s, v, c, &s->cfg.node_pk, NULL);
  else if (p->is_seed)
    tell_entering(s, v, c);
}

void cross_on_chunk(stitch_swarm *s, const peer *p, vstate *v,
                    const chunk_id *c, int asked) {
  if (p->is_seed && !s->cfg.seed) {
    if (!asked) /* the seed's first round comes unasked (seed_offer) */
      tell_entering(s, v, c);
    push_across(s, v, c);
  } else if (!asked && peer_far(p)) {
    tell_entering(s, v, c);
  }
}

/* Into a far region, a chunk goes about once: a second asker there is
 * told it is coming through another node, and waits for it. */
int cross_answer(stitch_swarm *s, peer *p, const chunk_id *c) {
  peer *q;
  if (s->cfg.seed || !peer_far(p) || (q = coming_into(s, p, c)) == NULL)
    return 0;
  wire_msg x;
  chunk_msg(&x, WIRE_CROSSING, c);
  x.node = q->node;
  core_send(s, p, &x);
  return 1;
}

/* Our request across for C, sent at SENT_MS, came back unserved (a
 * REJECT, or coming_into's CROSSING naming another node). The CROSSING
 * we told our region when we sent it (cross_on_request) is stamped
 * SENT_MS: for our region it still says that C comes in, but it must not
 * hold us back from crossing again for CORE_CROSS_TRUST_MS; a coming
 * copy holds us back CORE_COMING_WAIT_MS (cross_on_crossing), a reject
 * not at all. The copy coming_into named goes to a node we may have no
 * link to: test_hostile's silent, whose node held every slot but one
 * neighbour of its region, waited the 3 s for its last chunk at 4 of
 * 80 seeds (3.7-4.0 times slower than without the attacker). */
void cross_declined(stitch_swarm *s, const peer *p, vstate *v,
                    const chunk_id *c, uint64_t sent_ms) {
  uint32_t *x = &v->cross[c->object].crossing[c->chunk];
  if (!s->cfg.seed && peer_far(p) && *x != 0 && vstate_at(v, *x) == sent_ms)
    *x = 0;
}

void cross_forget(vstate *v, uint32_t o, uint64_t c) {
  v->cross[o].crossing[c] = v->cross[o].bid_at[c] = 0;
}
