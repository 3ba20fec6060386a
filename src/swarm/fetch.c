/* fetch.c: what a node fetches and from whom, and what it serves
 * (docs/swarm.md). Crossing regions is cross.c's, what the seed offers
 * seed.c's.
 *
 * A node plans the cheapest path from the version its weights hold to the
 * newest it knows (stitch_plan_path) and wants every chunk of the plan's
 * objects, the first step's first. Each ready peer gets up to `pipeline`
 * requests (twice that while we are behind our region, request_depth):
 * random chunks for the first few (so new nodes soon have
 * something to trade), then rarest first among its neighbours; once every
 * wanted chunk is asked for, the last ones are asked of a second peer too
 * (endgame) and the loser is cancelled. A chunk is fetched from another
 * region only when no neighbour of ours holds it, and only when cross.c
 * says so (cross_ok), so that it crosses into each region about once and
 * spreads inside. Every chunk is hash-checked (or, with
 * config.write_verifies, checked by chunk_write) before it is stored or
 * announced; one that does not verify gets its sender
 * banned. When the first step's object is whole, the agent is asked to
 * apply it. A node serves the CORE_SERVE_SLOTS requesters furthest behind
 * first (serve_turn), so that a region's nodes finish together. A small
 * object's chunk is asked early, before the neighbour holds it, of the
 * neighbour whose CROSSING came first (fetch_early_from), which keeps the
 * request until it has the chunk (fetch_hold).
 */
#include "swarm/core_internal.h"

#include "common/diag.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int fetch_in_plan(const stitch_swarm *s, uint64_t version, uint32_t object) {
  for (size_t k = 0; k < s->plan.n; k++)
    if (s->plan.step[k].version == version &&
        s->plan.step[k].object == object)
      return 1;
  return 0;
}

/* The schedule runs again by T (a wait that ends then). */
static void wake_at(stitch_swarm *s, uint64_t t) {
  if (t < s->fetch_wake_ms)
    s->fetch_wake_ms = t;
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
  stitch_swarm_action a = {.kind = STITCH_SWARM_APPLY,
                           .version = st->version,
                           .object = st->object};
  core_push_action(s, &a);
}

void fetch_replan(stitch_swarm *s) {
  memset(&s->plan, 0, sizeof(s->plan));
  s->pick_gen++;
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
      if (h->count == 0 && !fetch_in_plan(s, h->version, o))
        continue;
      wire_msg m;
      wire_msg_clear(&m);
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

/* A neighbour of our region has chunk C of (V, O) now: a request for it
 * still out to another region, or to the seed, is cancelled, and the
 * chunk asked of the neighbour instead. Such a request went out before
 * the chunk was nearby (its turn came before a copy passed across reached
 * us, cross.c push_across; the seed is asked for what no neighbour has),
 * and a far peer's queue is slow to answer, the seed's upload the
 * scarcest (docs/swarm.md "Slow uplinks"). */
static void cancel_far(stitch_swarm *s, uint64_t version, uint32_t object,
                       uint64_t chunk) {
  chunk_id c = {version, object, chunk};
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    int k;
    if (q->state == PEER_READY && (peer_far(q) || q->is_seed) &&
        (k = fetch_asked(q, &c)) >= 0) {
      drop_request(s, q, (unsigned)k);
      send_simple(s, q, WIRE_CANCEL, &c);
    }
  }
}

void fetch_on_have_bit(stitch_swarm *s, peer *p, uint64_t version,
                       uint32_t object, uint64_t chunk) {
  vstate *v = core_find_version(s, version);
  if (v == NULL || v->avail[object] == NULL)
    return;
  if (v->avail[object][chunk] < 0xffff)
    v->avail[object][chunk]++;
  p->dry_gen = 0; /* it may have something for us now */
  if (peer_far(p))
    cross_saw_far(s, v, object, chunk);
  if (!p->is_seed && !peer_far(p))
    cancel_far(s, version, object, chunk);
  if (!bits_get(&v->held[object], chunk) &&
      (v->inflight[object][chunk] == 0 || s->endgame) &&
      fetch_in_plan(s, version, object))
    s->sched_due = 1; /* a chunk we may ask P for */
}

/* Request R is withdrawn (answered, cancelled, or its peer gone): its
 * chunk is in flight once less, and another peer may be asked for it. */
static void unask(stitch_swarm *s, const request *r) {
  vstate *v = core_find_version(s, r->c.version);
  if (!r->early && v != NULL && v->inflight[r->c.object][r->c.chunk] > 0) {
    v->inflight[r->c.object][r->c.chunk]--;
    s->pick_gen++;
  }
}

void fetch_peer_gone(stitch_swarm *s, peer *p) {
  for (unsigned i = 0; i < p->n_req; i++)
    unask(s, &p->req[i]);
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
  chunk_msg(&m, t, c);
  core_send(s, p, &m);
}

/* Where C is among our requests to P, or -1. */
int fetch_asked(const peer *p, const chunk_id *c) {
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

/* May chunk C of (V, O), asked for already, be asked of another peer
 * (the endgame)? Only once the latest request is late: it has waited
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
  uint64_t due = vstate_at(v, v->asked_at[o][c]) + after;
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
 * seed): a chunk one of them holds never crosses (cross.c cross_ok).
 * *ALL is 1 when every such neighbour's bitset is among them, so that a
 * chunk none of them holds is held by no neighbour of our region. */
static size_t near_bits(stitch_swarm *s, const vstate *v, uint32_t o,
                        const bits *near[NEAR_MAX], int *all) {
  size_t n = 0;
  *all = 1;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    const bits *h;
    if (!peer_near(q) || (h = peer_bits(q, v->ref.m->version, o, 0, 0)) == NULL)
      continue;
    if (h->n == v->held[o].n && n < NEAR_MAX)
      near[n++] = h;
    else
      *all = 0;
  }
  return n;
}

/* Is an early request of ours for C out, and younger than
 * CORE_EARLY_PATIENCE_MS? Then C is not asked of another neighbour: the
 * one asked early is nearer its way in, and a second request raced the
 * early one's answer (a copy twice for every other chunk). The schedule
 * runs again when the patience ends. */
static int early_out(stitch_swarm *s, const chunk_id *c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    int k;
    if (q->state == PEER_READY && (k = fetch_asked(q, c)) >= 0 &&
        q->req[k].early && s->now_ms < q->req[k].sent_ms + CORE_EARLY_PATIENCE_MS) {
      wake_at(s, q->req[k].sent_ms + CORE_EARLY_PATIENCE_MS);
      return 1;
    }
  }
  return 0;
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
  int far = peer_far(p);
  int small = n <= CORE_PUSH_SMALL_CHUNKS;
  const bits *near[NEAR_MAX];
  int all_near = 0;
  size_t n_near = far ? near_bits(s, v, o, near, &all_near) : 0;
  /* From a random start round to it: [start, n), then [0, start). */
  for (int pass = 0; pass < 2; pass++) {
    uint64_t from = pass == 0 ? start : 0, to = pass == 0 ? n : start;
    for (uint64_t j = from / 64, w = 0; j * 64 < to; j++)
      for (w = wanted_from(have, held, near, n_near, j, from, to); w != 0;
           w &= w - 1) {
        uint64_t c = j * 64 + (uint64_t)__builtin_ctzll(w);
        unsigned fl = v->inflight[o][c];
        if (fl > (endgame ? CORE_ENDGAME_ASKS - 1u : 0u))
          continue;
        /* The seed is the last resort: its upload is the scarce one. */
        if (p->is_seed && v->avail[o][c] > 1)
          continue;
        /* A chunk crosses regions only when nobody nearby has it, and only
         * through a few nodes of the region at first. */
        if (far && !cross_ok(s, v, o, c, all_near, &s->fetch_wake_ms))
          continue;
        chunk_id id = {v->ref.m->version, o, c};
        if (fetch_asked(p, &id) >= 0)
          continue; /* asked already, or asked early (fetch_early_from) */
        if (small && early_out(s, &id))
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

/* Our early request for C (fetch_early_from) is withdrawn (CANCEL): a
 * neighbour that holds C has been asked for it. */
static void withdraw_early(stitch_swarm *s, const chunk_id *c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    int k;
    if (q->state == PEER_READY && (k = fetch_asked(q, c)) >= 0 &&
        q->req[k].early) {
      drop_request(s, q, (unsigned)k);
      send_simple(s, q, WIRE_CANCEL, c);
    }
  }
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
    uint64_t allow = chunk_ref(v, o, c)->size + 64;
    p->chunk_allow = allow > p->chunk_allow ? allow : p->chunk_allow;
    p->req[p->n_req++] = (request){id, s->now_ms, 0, 0};
    v->inflight[o][c]++;
    v->asked_at[o][c] = vstate_stamp(s, v); /* the latest ask: late */
    send_simple(s, p, WIRE_REQUEST, &id);
    if (v->inflight[o][c] == 1) {
      cross_on_request(s, p, v, &id);
      withdraw_early(s, &id);
    }
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
 * crossing regions is rationed (cross.c cross_ok). A request queued
 * behind twice the pipeline of 512 KiB chunks at an uplink of 100 Mbit/s
 * shared by 4 waits about 1.3 s, well inside CORE_REQUEST_MS.
 * docs/simulator.md has the figures. */
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
    if (q->state != PEER_READY || q->is_seed || peer_far(q) ||
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

void fetch_early_from(stitch_swarm *s, peer *p, vstate *v,
                      const chunk_id *c) {
  uint32_t o = c->object;
  if (s->cfg.seed || !peer_near(p) || v != &s->v[s->n_v - 1] ||
      v->held[o].n > CORE_PUSH_SMALL_CHUNKS || !core_wanted_by_all(s, v, o) ||
      !fetch_in_plan(s, c->version, o) || bits_get(&v->held[o], c->chunk) ||
      v->inflight[o][c->chunk] > 0 || p->early_refused == c->version ||
      p->n_req >= CORE_MAX_PIPELINE || peer_holds(p, c))
    return; /* one that says it holds C is asked as usual, and judged */
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state == PEER_READY && fetch_asked(&s->peers[i], c) >= 0)
      return; /* asked early already */
  p->req[p->n_req++] = (request){*c, s->now_ms, 0, 1};
  send_simple(s, p, WIRE_REQUEST, c);
}

/* The order in which schedule asks its peers: the fewest requests in
 * flight first. In the endgame, where a late chunk is asked again, a
 * peer whose score is below 0 (late, outrun, stalled: score.h) comes
 * after the others with as many: a liar that claims every chunk and
 * serves none was otherwise asked as often as an honest holder, and
 * three liars asked in turn held a chunk for the 15 s of a timeout
 * (ctest test_hostile eclipse). */
static int ask_before(const peer *a, const peer *b, int endgame) {
  if (a->n_req != b->n_req)
    return a->n_req < b->n_req;
  /* The score decays towards 0 but keeps its sign: the value stored at
   * its last event says. */
  return endgame && a->sc.v >= 0 && b->sc.v < 0;
}

/* Fills the peers' request pipelines one request at a time, always to the
 * peer with the fewest in flight (ties from a random start): filling them
 * in a fixed order gave the first peers of every node the rarest chunks
 * and most requests, and left the uplinks of the others idle. The ready
 * peers go into s->sched first, in that order, and leave it when they
 * have nothing more for us: walking every peer slot for each request was
 * an eighth of the simulator's time at 10,000 nodes. With FULL, every
 * ready peer is asked; otherwise (after a frame, fetch_schedule_due) not
 * those that had nothing at the last run, if nothing that could change
 * that has happened since (peer.dry_gen): asking them again after every
 * HAVE was a fifth of the simulator's time. Their timed waits (cross_ok,
 * late) stay in fetch_wake_ms, and the tick's run asks them all. */
static void schedule(stitch_swarm *s, int full) {
  s->sched_due = 0;
  maybe_apply(s);
  if (s->cfg.seed || s->plan.n == 0)
    return;
  int endgame = all_requested(s);
  if (full || endgame != s->endgame) {
    s->pick_gen++;
    s->fetch_wake_ms = UINT64_MAX;
  }
  s->endgame = endgame;
  size_t start = s->n_peers ? (size_t)(core_random(s) % s->n_peers) : 0;
  unsigned depth = request_depth(s);
  size_t n = 0;
  for (size_t k = 0, i = start; k < s->n_peers; k++, i++) {
    peer *p = &s->peers[i < s->n_peers ? i : i - s->n_peers];
    if (p->state == PEER_READY && p->dry_gen != s->pick_gen)
      s->sched[n++] = (struct sched_slot){
          p, p->is_seed || peer_far(p) ? s->cfg.pipeline : depth};
  }
  for (;;) {
    size_t best = n;
    for (size_t k = 0; k < n; k++)
      if (s->sched[k].p->n_req < s->sched[k].lim &&
          (best == n ||
           ask_before(s->sched[k].p, s->sched[best].p, endgame)))
        best = k;
    if (best == n)
      return;
    if (!request_one(s, s->sched[best].p, endgame)) {
      s->sched[best].p->dry_gen = s->pick_gen; /* a failed pick changes
                                                  nothing it counts */
      memmove(&s->sched[best], &s->sched[best + 1],
              (n - best - 1) * sizeof(s->sched[0]));
      n--;
    }
  }
}

void fetch_schedule(stitch_swarm *s) { schedule(s, 1); }

void fetch_schedule_due(stitch_swarm *s) { schedule(s, 0); }

static void drop_request(stitch_swarm *s, peer *p, unsigned i) {
  unask(s, &p->req[i]);
  p->req[i] = p->req[--p->n_req];
}

void fetch_on_reject(stitch_swarm *s, peer *p, const chunk_id *c) {
  int i = fetch_asked(p, c);
  if (i >= 0)
    p->served_ms = s->now_ms;
  if (i >= 0 && p->req[i].early)
    p->early_refused = c->version; /* it keeps no early requests */
  if (i >= 0) {
    vstate *v = core_find_version(s, c->version);
    if (v != NULL && !p->req[i].early)
      cross_declined(s, p, v, c, p->req[i].sent_ms);
    drop_request(s, p, (unsigned)i);
  }
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

/* The largest CHUNK body P may send us: what we asked it for, or any
 * chunk of a version we know, which a peer may pass us unasked
 * (cross.c push_across, push_near). */
uint64_t fetch_chunk_allow(const stitch_swarm *s, const peer *p) {
  uint64_t pushed = s->cfg.seed ? 0 : s->chunk_max + 64;
  return p->chunk_allow > pushed ? p->chunk_allow : pushed;
}

/* Chunk C, passed to Q unasked (cross.c pass_to, push_near): Q gets no
 * HAVE of it, and no second pass. */
void fetch_pushed(stitch_swarm *s, peer *q, vstate *v, const chunk_id *c) {
  bits *h = peer_bits(q, c->version, c->object, 1,
                      v->ref.m->objects[c->object].n_chunks);
  if (h != NULL && !bits_get(h, c->chunk)) {
    bits_set(h, c->chunk);
    fetch_on_have_bit(s, q, c->version, c->object, c->chunk);
  }
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
  /* A small object's chunk that came to us from another region: we are
   * its way into our region, and each neighbour of our region would ask
   * us for it a round trip later (HAVE, REQUEST), then share our uplink
   * with a dozen others. It goes to each of them at once, said or not
   * yet (the chunk often comes before their BITFIELD): the version is
   * new to the region, so none holds the chunk but through us, and no
   * copy is sent that the pulls would not have sent. upload1000.json,
   * seeds 1-3: the deltas' last node 0.231-0.278 s instead of
   * 0.244-0.299, the far regions' median 17-20 ms sooner, chunks that
   * came twice as before. */
  if (peer_far(from) &&
      v->ref.m->objects[c->object].n_chunks <= CORE_PUSH_SMALL_CHUNKS &&
      core_wanted_by_all(s, v, c->object)) {
    for (size_t i = 0; i < s->n_peers; i++) {
      peer *q = &s->peers[i];
      if (!peer_near(q) || peer_holds(q, c) || fetch_queued(q, c) >= 0 ||
          q->n_serve == CORE_MAX_SERVE)
        continue;
      core_serve_add(s, q, c);
      fetch_pushed(s, q, v, c);
    }
    return;
  }
  /* A small object's chunk is asked early of the neighbour nearest its
   * way in (fetch_early_from), wherever CROSSINGs tell of that way (we
   * know of another region): passed to an empty neighbour besides, it
   * came twice (upload1000.json at 250 nodes, seeds 1-3: chunks that
   * came twice 2,495-2,691 in the run with it, 577-719 without; the last
   * node as soon). */
  if (v->ref.m->objects[c->object].n_chunks <= CORE_PUSH_SMALL_CHUNKS &&
      core_wanted_by_all(s, v, c->object) && cross_far_known(s))
    return;
  peer *pick = NULL;
  unsigned n = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q == from || !peer_near(q) || q->n_serve > 0 || sending(s, q))
      continue;
    const bits *h = peer_bits(q, c->version, c->object, 0, 0);
    if (h == NULL || h->count > 0)
      continue;
    if (core_random(s) % ++n == 0) /* one of them, uniformly */
      pick = q;
  }
  if (pick == NULL)
    return;
  core_serve_add(s, pick, c); /* it had none queued */
  fetch_pushed(s, pick, v, c);
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
  int i = fetch_asked(p, &c);
  p->served_ms = s->now_ms; /* asked or not: it works through its queue
                               to us, where what it pushes goes first */
  int early = i >= 0 && p->req[i].early;
  /* An early request waited for P to get the chunk: it outruns nobody,
   * and its wait says nothing of how long a chunk takes. */
  uint64_t asked_ms = i < 0 ? UINT64_MAX : early ? 0 : p->req[i].sent_ms;
  if (i >= 0) { /* the usual wait: an average over the last 8 or so */
    double took = (double)(s->now_ms - p->req[i].sent_ms);
    if (!early)
      s->wait_ms =
          s->wait_ms > 0 ? s->wait_ms + (took - s->wait_ms) / 8 : took;
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
  const stitch_chunk_ref *r = chunk_ref(v, m->object, m->chunk);
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
  if (s->cfg.log_chunks && i >= 0 && !early)
    core_log(s, "chunk: took v%" PRIu64 " o%u c%" PRIu64 " of %zu B from %s: "
             "asked %" PRIu64 " ms before", m->version, m->object, m->chunk,
             m->data_len, core_peer_name(p), s->now_ms - asked_ms);
  else if (s->cfg.log_chunks)
    core_log(s,
             "chunk: took v%" PRIu64 " o%u c%" PRIu64 " of %zu B from %s: %s",
             m->version, m->object, m->chunk, m->data_len, core_peer_name(p),
             i < 0 ? "unasked" : "asked early");
  core_score(s, p, SCORE_USEFUL);
  s->fetched++;
  s->st.bytes_down += m->data_len;
  if (p->is_seed)
    s->st.bytes_from_seed += m->data_len;
  else if (p->same_region)
    s->st.bytes_same_region += m->data_len;
  else
    s->st.bytes_other_region += m->data_len;
  if (fetch_in_plan(s, m->version, m->object))
    s->st.fetch_done++;
  cross_on_chunk(s, p, v, &c, i >= 0);
  push_near(s, p, v, &c);
  /* Cancel the endgame's other copies, tell everyone we have it (but
   * those we pass it to). */
  for (size_t k = 0; k < s->n_peers; k++) {
    peer *q = &s->peers[k];
    if (q->state != PEER_READY || fetch_queued(q, &c) >= 0)
      continue;
    int j = fetch_asked(q, &c);
    if (j >= 0) {
      int beaten = !q->req[j].early && outrun(q, &q->req[j], asked_ms);
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

static int waiting(stitch_swarm *s, const chunk_id *c);

/* Has P a request queued with us that we can answer now (not an early
 * one still waiting for its chunk, fetch_hold)? */
static int servable(stitch_swarm *s, const peer *p) {
  for (unsigned j = 0; j < p->n_serve; j++)
    if (!waiting(s, &p->serve[j]))
      return 1;
  return 0;
}

/* The uplink's rate in bytes/s: as told (config.up_bytes_per_s), else
 * what fill_estimate takes it to be; 0: not known yet. */
double fetch_up_rate(const stitch_swarm *s) {
  return s->cfg.up_bytes_per_s ? (double)s->cfg.up_bytes_per_s : s->up.est;
}

/* A window of the uplink's fill: CORE_FILL_WINDOW_MS, or the time the
 * rate takes to move CORE_FILL_CHUNKS of the largest chunk, if longer: a
 * window that holds two or three chunks reads a full uplink as half idle
 * or full by where their ends fall. */
static uint64_t fill_window_ms(const stitch_swarm *s) {
  double rate = fetch_up_rate(s);
  if (rate <= 0)
    return CORE_FILL_WINDOW_MS;
  double ms = CORE_FILL_CHUNKS * (double)s->chunk_max * 1000.0 / rate;
  return ms > CORE_FILL_WINDOW_MS ? (uint64_t)ms : CORE_FILL_WINDOW_MS;
}

/* An uplink that became slower (a home link that the household now
 * shares) would look idle forever to an estimate that only rises, and
 * the node would serve the most requesters it may, each at a sliver of
 * the uplink. So where CORE_FILL_SHORT windows in a row moved less than
 * CORE_FILL_LOW of the estimate with a requester waiting and
 * CORE_SERVE_SLOTS_MAX slots (more would not have filled it), what they
 * moved on average becomes the estimate (the best of them, or of two in
 * a row, reads bursts into the driver's buffers as rate, and an
 * estimate a twentieth too high never gives a slot back), and the slots
 * start again from CORE_SERVE_SLOTS: fill_window adds what the new rate
 * needs within two windows. Returns 1 when it lowered the estimate. */
static int fill_lower(stitch_swarm *s, double rate) {
  if (!s->up.waited || s->up.slots < CORE_SERVE_SLOTS_MAX ||
      rate >= CORE_FILL_LOW * s->up.est) {
    s->up.short_n = 0;
    s->up.short_sum = 0;
    return 0;
  }
  s->up.short_sum += rate;
  if (++s->up.short_n < CORE_FILL_SHORT)
    return 0;
  s->up.est = s->up.short_sum / CORE_FILL_SHORT;
  s->up.slots = CORE_SERVE_SLOTS;
  s->up.last_rate = 0;
  s->up.short_n = 0;
  s->up.short_sum = 0;
  return 1;
}

/* A node not told its uplink's rate learns it from a window that moved
 * RATE (bytes/s). It takes the best of what two windows in a row both
 * moved (one alone may be a burst into the driver's buffers). That is
 * the uplink's rate only if the connections filled it, and paced
 * connections leave it idle (fill_window), so where the estimate looks
 * met while requesters wait, it probes: half as many slots again for a
 * window. If they moved CORE_FILL_GAIN times as much, the uplink had
 * room: the slots stay, and the estimate rises with the next window
 * (the probe's window alone may be a burst into new connections'
 * buffers; taken alone, it let a fleet on full uplinks add slots it did
 * not need); if not, the slots are given back and no probe is made
 * for 1, 2, 4 ... CORE_FILL_BACKOFF_MAX windows. The best only rises;
 * fill_lower brings it down. Returns 1 when the window is spent on the
 * probe or on a lowered estimate (no other rule applies to it). */
static int fill_estimate(stitch_swarm *s, double rate) {
  unsigned n = s->up.slots;
  if (s->up.probe_from != 0) {
    int room = rate >= CORE_FILL_GAIN * s->up.probe_rate;
    if (room) {
      s->up.probe_backoff = 0;
    } else {
      unsigned b = 2 * s->up.probe_backoff;
      s->up.slots = s->up.probe_from;
      s->up.probe_backoff = b == 0 ? 1 : b;
      if (s->up.probe_backoff > CORE_FILL_BACKOFF_MAX)
        s->up.probe_backoff = CORE_FILL_BACKOFF_MAX;
      s->up.probe_wait = s->up.probe_backoff;
    }
    s->up.probe_from = 0;
    /* Room: the estimate rises with the next window. None: the next
     * window is the first at these slots. */
    s->up.last_rate = room ? rate : 0;
    return 1;
  }
  double both = rate < s->up.last_rate ? rate : s->up.last_rate;
  if (both > s->up.est)
    s->up.est = both;
  s->up.last_rate = rate;
  if (fill_lower(s, rate))
    return 1;
  if (s->up.est <= 0 || !s->up.waited || rate < CORE_FILL_LOW * s->up.est ||
      n >= CORE_SERVE_SLOTS_MAX)
    return 0;
  if (s->up.probe_wait > 0) {
    s->up.probe_wait--;
    return 0;
  }
  unsigned more = (unsigned)(CORE_FILL_PROBE * n);
  s->up.probe_from = n;
  s->up.probe_rate = rate;
  n += more > 0 ? more : 1;
  s->up.slots = n < CORE_SERVE_SLOTS_MAX ? n : CORE_SERVE_SLOTS_MAX;
  return 1;
}

/* Closes the uplink's window once it is fill_window_ms old, and
 * sets from what it moved how many requesters are served at once. A
 * driver paces each connection at the rate it last found (TCP's BBR
 * does), so a fixed number of them fills an uplink only when they found
 * it whole: after sharing it, each goes at its share, and the uplink
 * stands idle (docs/swarm.md "Serving as many as fill the uplink"). So
 * a node watches its uplink against its rate (fetch_up_rate: told, or
 * estimated and probed, fill_estimate): a window in which a requester
 * waited for a slot while the uplink moved less than CORE_FILL_LOW of
 * its rate gets as many slots as would have filled it at that window's
 * rate per slot, at most twice as many and CORE_SERVE_SLOTS_MAX; a
 * window that moved CORE_FILL_HIGH of it gives one back, down to
 * CORE_SERVE_SLOTS. A window with nothing handed over, or that ran long
 * (none for a while), counts for nothing: the slots a node found it
 * needed stay for the next version, whose chunks go out on the same
 * connections at the paces they last found. */
static void fill_window(stitch_swarm *s) {
  uint64_t dt = s->now_ms - s->up.start_ms;
  if (dt < CORE_FILL_WINDOW_MS) /* the shortest window: most calls */
    return;
  uint64_t w = fill_window_ms(s);
  if (dt < w)
    return;
  if (s->up.bytes > 0 && dt < 2 * w) {
    double moved = (double)s->up.bytes;
    int probed = s->cfg.up_bytes_per_s == 0 &&
                 fill_estimate(s, moved * 1000.0 / (double)dt);
    double full = fetch_up_rate(s) * (double)dt / 1000.0;
    unsigned n = s->up.slots;
    if (probed || full <= 0) {
      /* the window went to the probe, or no rate is known yet */
    } else if (s->up.waited && moved < CORE_FILL_LOW * full) {
      double want = ceil((double)n * full / moved);
      n = want > 2.0 * n ? 2 * n : (unsigned)want;
      s->up.slots = n < CORE_SERVE_SLOTS_MAX ? n : CORE_SERVE_SLOTS_MAX;
    } else if (moved >= CORE_FILL_HIGH * full && n > CORE_SERVE_SLOTS) {
      s->up.slots = n - 1;
    }
  } else {
    s->up.last_rate = 0;
  }
  s->up.start_ms = s->now_ms;
  s->up.bytes = 0;
  s->up.waited = 0;
}

/* May P's queued requests be served now? Of the requesters of our region
 * with requests queued or a chunk on its way out (a requester's queue
 * with us is mostly empty while its chunk goes), only those furthest
 * behind are served at once, as many as the node has slots
 * (CORE_SERVE_SLOTS, or more while a node told its uplink's rate finds
 * it not full: fill_window); the others' requests
 * wait in their queues, at most CORE_SERVE_WAIT_MS for each chunk. A
 * driver shares an uplink evenly among the links that have data on it,
 * so without this the nodes with fewest neighbours finished last
 * (docs/swarm.md "Serving the furthest behind first"). A requester more
 * than CORE_BEHIND_MARGIN further behind than P counts as two: of 4
 * slots one is a quarter of an uplink, and a node its region left with
 * three neighbours got at most three quarters of its downlink. Far peers'
 * requests are served at once, beside the slots: a crossing feeds a
 * region. The seed super-seeds instead. */
static int serve_turn(stitch_swarm *s, peer *p) {
  if (s->cfg.seed || peer_far(p) ||
      s->now_ms - p->serve_wait_ms >= CORE_SERVE_WAIT_MS)
    return 1;
  fill_window(s);
  double mine = behind(p);
  unsigned ahead = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q == p || q->state != PEER_READY || peer_far(q) ||
        (!sending(s, q) && !servable(s, q)))
      continue;
    double theirs = behind(q);
    if (theirs < mine || (theirs == mine && q->id < p->id)) {
      ahead += theirs < mine - CORE_BEHIND_MARGIN ? 2 : 1;
      if (ahead >= s->up.slots) {
        s->up.waited |= servable(s, p); /* it could go now: it waits */
        return 0;
      }
    }
  }
  return 1;
}

/* Did we send P chunk C among the last CORE_SENT_KEPT? */
static int sent_lately(const peer *p, const chunk_id *c) {
  for (unsigned k = 0; k < CORE_SENT_KEPT && k < p->sent_next; k++)
    if (same_chunk(&p->sent[k], c))
      return 1;
  return 0;
}

/* Is C, queued for a peer, an early request still waiting for us to get
 * the chunk (fetch_hold)? */
static int waiting(stitch_swarm *s, const chunk_id *c) {
  vstate *v = core_find_version(s, c->version);
  return v != NULL && !bits_get(&v->held[c->object], c->chunk);
}

int fetch_hold(stitch_swarm *s, peer *p, const chunk_id *c) {
  vstate *v = core_find_version(s, c->version);
  if (s->cfg.seed || !peer_near(p) || v == NULL || v != &s->v[s->n_v - 1] ||
      c->object >= v->ref.m->n_objects ||
      v->ref.m->objects[c->object].n_chunks > CORE_PUSH_SMALL_CHUNKS ||
      c->chunk >= v->ref.m->objects[c->object].n_chunks ||
      !fetch_in_plan(s, c->version, c->object))
    return 0;
  if (fetch_queued(p, c) >= 0)
    return 1; /* asked twice */
  if (p->n_serve == CORE_MAX_SERVE)
    return 0;
  core_serve_add(s, p, c);
  return 1;
}

void fetch_serve_next(stitch_swarm *s, peer *p) {
  while (p->n_serve > 0 && serve_turn(s, p)) {
    /* The first request we can answer; early ones wait for their chunk. */
    unsigned j = 0;
    while (j < p->n_serve && waiting(s, &p->serve[j]))
      j++;
    if (j == p->n_serve)
      return;
    chunk_id c = p->serve[j];
    memmove(&p->serve[j], &p->serve[j + 1], (p->n_serve - j - 1) * sizeof(c));
    p->n_serve--;
    vstate *v = core_find_version(s, c.version);
    if (v == NULL || !bits_get(&v->held[c.object], c.chunk))
      continue;
    if (!s->cfg.seed &&
        v->ref.m->objects[c.object].n_chunks <= CORE_PUSH_SMALL_CHUNKS &&
        sent_lately(p, &c))
      continue; /* asked early while we passed it: it has it */
    if (s->cfg.seed && peer_holds(p, &c))
      continue; /* pushed (seed_offer), and P got it elsewhere since */
    if (cross_answer(s, p, &c))
      continue; /* on its way into P's region another way: P was told */
    const stitch_chunk_ref *r = chunk_ref(v, c.object, c.chunk);
    const uint8_t *buf;
    size_t len;
    if (s->io.chunk_read(s->io.user, &r->hash, &buf, &len) != 0) {
      send_simple(s, p, WIRE_REJECT, &c);
      continue;
    }
    wire_msg m;
    wire_msg_clear(&m);
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
    if (s->cfg.log_chunks)
      core_log(s, "chunk: sent v%" PRIu64 " o%u c%" PRIu64 " of %zu B to %s",
               c.version, c.object, c.chunk, len, core_peer_name(p));
    s->st.bytes_up += len;
    fill_window(s);
    s->up.bytes += len;
    p->sending = 1;
    p->serve_wait_ms = s->now_ms;
    p->sent[p->sent_next % CORE_SENT_KEPT] = c;
    p->sent_ms[p->sent_next++ % CORE_SENT_KEPT] = s->now_ms;
    if (p->same_region)
      s->st.bytes_to_same_region += len;
    else
      s->st.bytes_to_other_region += len;
    if (s->cfg.seed) {
      seed_on_sent(s, p, v, &c);
    } else {
      cross_pass_more(s, p, v, c.object);
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
        cross_forget(v, o, c);
    }
    memset(b->b, 0, b->n / 8 + 1);
    b->count = 0;
  }
}

/* When P could start on our request R: P serves a requester one chunk
 * at a time, in the order asked (what it passes us unasked first), so a
 * request behind others of ours waits for their answers too. Timed from
 * its sending, a request queued behind a few 512 KiB chunks on a 5 or 10
 * Mbit/s uplink went late and timed out, and honest neighbours were
 * greylisted (docs/swarm.md "Slow uplinks"). */
static uint64_t asked_from(const peer *p, const request *r) {
  return r->sent_ms > p->served_ms ? r->sent_ms : p->served_ms;
}

/* Charges P for our requests that went late (once each) and for a stall:
 * requests out and no answer for SCORE_STALL_MS, nor a frame's bytes
 * coming (score.h says why those bounds). 1 when P was dropped. */
static int fetch_judge(stitch_swarm *s, peer *p) {
  double w = SCORE_LATE_FACTOR * s->wait_ms;
  uint64_t late_ms = w > SCORE_LATE_MIN_MS ? (uint64_t)w : SCORE_LATE_MIN_MS;
  uint64_t oldest = UINT64_MAX;
  for (unsigned k = 0; k < p->n_req; k++) {
    request *r = &p->req[k];
    if (r->early)
      continue; /* it waits for P to get the chunk: never late */
    oldest = r->sent_ms < oldest ? r->sent_ms : oldest;
    if (!r->late && s->now_ms - asked_from(p, r) >= late_ms) {
      r->late = 1;
      if (core_score(s, p, SCORE_LATE))
        return 1;
      forget_holdings(s, p);
    }
  }
  if (oldest == UINT64_MAX)
    return 0;
  uint64_t since = p->answered_ms > oldest ? p->answered_ms : oldest;
  if (p->frame_on && p->last_recv_ms > since)
    since = p->last_recv_ms; /* a chunk is coming (at CORE_FRAME_MIN_RATE) */
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
      if (p->req[k].early) { /* withdrawn unscored once it waited long */
        if (s->now_ms - p->req[k].sent_ms < CORE_EARLY_MS) {
          k++;
          continue;
        }
        chunk_id c = p->req[k].c;
        drop_request(s, p, k);
        send_simple(s, p, WIRE_CANCEL, &c);
        continue;
      }
      if (s->now_ms - asked_from(p, &p->req[k]) < CORE_REQUEST_MS) {
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
