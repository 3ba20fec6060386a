/* fetch.c: what a node fetches and from whom, what it serves, and what the
 * seed offers (docs/swarm.md).
 *
 * A node plans the cheapest path from the version its weights hold to the
 * newest it knows (stitch_plan_path) and wants every chunk of the plan's
 * objects, the first step's first. Each ready peer gets up to `pipeline`
 * requests: random chunks for the first few (so new nodes soon have
 * something to trade), then rarest first among its neighbours; once every
 * wanted chunk is asked for, the last ones are asked of a second peer too
 * (endgame) and the loser is cancelled. A chunk is fetched from another
 * region only when no neighbour of ours holds it, and at first only by a
 * few designated nodes of the region (cross_ok), so that it crosses into
 * each region about once and spreads inside. Every chunk is hash-checked
 * (or, with config.write_verifies, checked by chunk_write) before
 * it is stored or announced; one that does not verify gets its sender
 * banned. When the first step's object is whole, the agent is asked to
 * apply it.
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
  bits *b = NULL;
  for (size_t i = 0; i < p->n_told; i++)
    if (p->told[i].version == version && p->told[i].object == object)
      b = &p->told[i];
  return b;
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
  if (latest <= s->held_version)
    return;
  if (stitch_plan_path(s->refs, s->n_v, s->held_version, &s->held_id, latest,
                       &s->plan, &d) != 0) {
    core_log(s, "no plan to version %" PRIu64 " yet: %s", latest, d.msg);
    memset(&s->plan, 0, sizeof(s->plan));
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

void fetch_on_have_bit(stitch_swarm *s, peer *p, uint64_t version,
                       uint32_t object, uint64_t chunk) {
  (void)p;
  vstate *v = core_find_version(s, version);
  if (v != NULL && v->avail[object] != NULL && v->avail[object][chunk] < 0xffff)
    v->avail[object][chunk]++;
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
  memset(&m, 0, sizeof(m));
  m.type = t;
  m.version = c->version;
  m.object = c->object;
  m.chunk = c->chunk;
  core_send(s, p, &m);
}

static int requested_from(const peer *p, const chunk_id *c) {
  for (unsigned i = 0; i < p->n_req; i++)
    if (p->req[i].c.version == c->version && p->req[i].c.object == c->object &&
        p->req[i].c.chunk == c->chunk)
      return 1;
  return 0;
}

/* Does a ready neighbour in our own region hold chunk C of (V, O)? */
static int held_nearby(stitch_swarm *s, uint64_t version, uint32_t o,
                       uint64_t c) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q->state != PEER_READY || q->is_seed ||
        strcmp(q->region, s->cfg.region) != 0)
      continue;
    const bits *h = peer_bits(q, version, o, 0, 0);
    if (h != NULL && bits_get(h, c))
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

/* Are we the chunk's lowest rank among our same-region neighbours, and
 * either they are at least half of the region's nodes we know, or
 * CORE_CROSS_LOCAL_MS passed since the version arrived and still none of
 * them holds it? Then we fetch it too: the rank threshold alone leaves a
 * chunk without a fetcher a third of the time where we know the region's
 * size well (about (1 - 1/N)^N), and the doubling would take seconds to
 * cover for it. So does a node with no neighbour in its region. */
static int nearby_lowest(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c,
                         double mine) {
  size_t near = 1;
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *q = &s->peers[i];
    if (q->state != PEER_READY || q->is_seed ||
        strcmp(q->region, s->cfg.region) != 0)
      continue;
    if (cross_rank(v, o, c, &q->node) < mine)
      return 0;
    near++;
  }
  /* No neighbour of our region at all: nobody nearby to wait for. */
  return near == 1 || 2 * near >= s->region_known + 1 ||
         s->now_ms >= v->added_ms + CORE_CROSS_LOCAL_MS;
}

/* May chunk C cross into our region through us now? Each chunk should
 * enter a region about once and spread inside it, but a region's nodes
 * decide at the same moment, before any of them holds it. So a node that
 * no nearby neighbour can serve fetches across only when it is among the
 * chunk's designated fetchers: rank below K over the region's size as far
 * as we know it (or nearby_lowest), K being CORE_CROSS_FETCHERS when the
 * version arrived and doubling every CORE_CROSS_DOUBLE_MS (in case those
 * few have no far peer holding it, or are slow). A node that sees a nearby
 * copy fetches that instead.
 *
 * K grows slowly on purpose: the region links are shared, and crossings
 * that congest them slow every crossing, which lets K grow further. At
 * 10,000 nodes (simulations/scenarios/nodes10000.json) one more fetcher
 * every 100 ms let 2,117 F of the anchor cross; doubling every second,
 * 410 F; every two seconds, 203 F. Known addresses undercount a large
 * region early on (peer exchange has told a node of tens of nodes when
 * the first version comes), which makes more fetchers than K says, so K
 * starts at one. docs/simulator.md has the figures. */
static int cross_ok(stitch_swarm *s, vstate *v, uint32_t o, uint64_t c) {
  if (held_nearby(s, v->ref.m->version, o, c))
    return 0;
  double k = CORE_CROSS_FETCHERS *
             exp2((double)(s->now_ms - v->added_ms) / CORE_CROSS_DOUBLE_MS);
  double mine = cross_rank(v, o, c, &s->cfg.node_pk);
  return mine * (double)(s->region_known + 1) < k ||
         nearby_lowest(s, v, o, c, mine);
}

/* The best chunk of (v, o) to ask P for: one it has and we lack, not yet
 * asked for (or, in the endgame, asked for once elsewhere); random early
 * on, then the rarest. */
static int pick(stitch_swarm *s, peer *p, vstate *v, uint32_t o,
                int endgame, uint64_t *out) {
  const bits *have = peer_bits(p, v->ref.m->version, o, 0, 0);
  const bits *held = &v->held[o];
  if (have == NULL || have->count == 0 || held->count == held->n)
    return 0;
  uint64_t n = held->n, best = UINT64_MAX, start = core_random(s) % n;
  unsigned best_avail = 0xffffffffu;
  int random_phase = s->fetched < CORE_RANDOM_FIRST;
  int far = !p->is_seed && strcmp(p->region, s->cfg.region) != 0;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t c = (start + k) % n;
    if (bits_get(held, c) || !bits_get(have, c))
      continue;
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
    if (fl > 0 && requested_from(p, &id))
      continue;
    if (random_phase && fl == 0) {
      best = c;
      break;
    }
    unsigned a = v->avail[o][c] + 256u * fl; /* fresh chunks first */
    if (a < best_avail) {
      best_avail = a;
      best = c;
    }
  }
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
    for (uint64_t c = 0; c < v->held[o].n; c++)
      if (!bits_get(&v->held[o], c) && v->inflight[o][c] == 0)
        return 0;
  }
  return 1;
}

void fetch_schedule(stitch_swarm *s) {
  maybe_apply(s);
  if (s->cfg.seed || s->plan.n == 0)
    return;
  int endgame = all_requested(s);
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *p = &s->peers[i];
    while (p->state == PEER_READY && p->n_req < s->cfg.pipeline) {
      int found = 0;
      for (size_t k = 0; k < s->plan.n && !found; k++) {
        vstate *v = core_find_version(s, s->plan.step[k].version);
        uint32_t o = s->plan.step[k].object;
        uint64_t c;
        if (v != NULL && pick(s, p, v, o, endgame, &c)) {
          chunk_id id = {v->ref.m->version, o, c};
          /* The CHUNK body: the msgpack array around the bytes is small. */
          uint64_t allow = ref_of(v, o, c)->size + 64;
          p->chunk_allow = allow > p->chunk_allow ? allow : p->chunk_allow;
          p->req[p->n_req++] = (request){id, s->now_ms};
          v->inflight[o][c]++;
          send_simple(s, p, WIRE_REQUEST, &id);
          found = 1;
        }
      }
      if (!found)
        break;
    }
  }
}

static void drop_request(stitch_swarm *s, peer *p, unsigned i) {
  vstate *v = core_find_version(s, p->req[i].c.version);
  if (v != NULL && v->inflight[p->req[i].c.object][p->req[i].c.chunk] > 0)
    v->inflight[p->req[i].c.object][p->req[i].c.chunk]--;
  p->req[i] = p->req[--p->n_req];
}

static int find_request(const peer *p, const chunk_id *c) {
  for (unsigned i = 0; i < p->n_req; i++)
    if (p->req[i].c.version == c->version && p->req[i].c.object == c->object &&
        p->req[i].c.chunk == c->chunk)
      return (int)i;
  return -1;
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

int fetch_on_chunk(stitch_swarm *s, peer *p, const wire_msg *m) {
  chunk_id c = {m->version, m->object, m->chunk};
  int i = find_request(p, &c);
  if (i >= 0)
    drop_request(s, p, (unsigned)i);
  vstate *v = core_find_version(s, m->version);
  if (v == NULL)
    return 0; /* a version we forgot since we asked */
  if (m->object >= v->ref.m->n_objects ||
      m->chunk >= v->ref.m->objects[m->object].n_chunks)
    return -1; /* no such chunk: not a mistake an honest peer makes */
  if (bits_get(&v->held[m->object], m->chunk))
    return 0; /* the endgame's second copy, or a reply to a cancel */
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
  s->fetched++;
  s->st.bytes_down += m->data_len;
  if (p->is_seed)
    s->st.bytes_from_seed += m->data_len;
  else if (strcmp(p->region, s->cfg.region) == 0)
    s->st.bytes_same_region += m->data_len;
  else
    s->st.bytes_other_region += m->data_len;
  if (in_plan(s, m->version, m->object))
    s->st.fetch_done++;
  /* Cancel the endgame's other copies, tell everyone we have it. */
  for (size_t k = 0; k < s->n_peers; k++) {
    peer *q = &s->peers[k];
    if (q->state != PEER_READY)
      continue;
    int j = find_request(q, &c);
    if (j >= 0) {
      drop_request(s, q, (unsigned)j);
      send_simple(s, q, WIRE_CANCEL, &c);
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

void fetch_serve_next(stitch_swarm *s, peer *p) {
  while (p->n_serve > 0) {
    chunk_id c = p->serve[0];
    memmove(&p->serve[0], &p->serve[1], (p->n_serve - 1) * sizeof(c));
    p->n_serve--;
    vstate *v = core_find_version(s, c.version);
    if (v == NULL || !bits_get(&v->held[c.object], c.chunk))
      continue;
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
    if (strcmp(p->region, s->cfg.region) == 0)
      s->st.bytes_to_same_region += len;
    else
      s->st.bytes_to_other_region += len;
    if (s->cfg.seed) {
      v->sent[c.object][c.chunk]++;
      seed_offer(s, p);
    }
    return; /* one chunk at a time: the driver drains it first */
  }
}

/* ---- Timers ----------------------------------------------------------- */

void fetch_tick(stitch_swarm *s) {
  for (size_t i = 0; i < s->n_peers; i++) {
    peer *p = &s->peers[i];
    if (p->state != PEER_READY)
      continue;
    for (unsigned k = 0; k < p->n_req;) {
      if (s->now_ms - p->req[k].sent_ms < CORE_REQUEST_MS) {
        k++;
        continue;
      }
      drop_request(s, p, k);
      if (++p->timeouts >= 3) {
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

/* Peers that want (version, object) and lack some of it. */
static unsigned interested(const stitch_swarm *s, uint64_t version,
                           uint32_t object) {
  unsigned n = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    for (size_t k = 0; q->state == PEER_READY && k < q->n_have; k++)
      n += q->have[k].version == version && q->have[k].object == object &&
           q->have[k].count < q->have[k].n;
  }
  return n;
}

/* Offers P chunks it lacks of every object it wants: in the first round a
 * fair share of the object (so every interested peer gets distinct chunks
 * to pass on), at most 2 x pipeline at a time. */
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
    uint64_t depth = 2 * (uint64_t)s->cfg.pipeline;
    if (!round_done) {
      unsigned peers = interested(s, want->version, o);
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
      send_simple(s, p, WIRE_HAVE, &id);
    }
    if (round_done)
      off->since_ms = s->now_ms; /* one more batch per idle period */
  }
}
