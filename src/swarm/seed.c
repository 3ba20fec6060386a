/* seed.c: what the seed offers (seed.h; docs/swarm.md "What the seed
 * does").
 *
 * The seed super-seeds: it announces no bitfield, but offers each peer a
 * few chunks at a time (HAVE), those sent least so far first, so distinct
 * peers get distinct chunks and the swarm spreads them. Once every chunk
 * has gone out once, it offers more only to a peer that has made no
 * progress for a while. It serves what it offered or was asked through
 * fetch.c's serving, like any node, and hears of each chunk sent
 * (seed_on_sent). */
#include "swarm/core_internal.h"

#include <stdlib.h>
#include <string.h>

int seed_obj_init(seed_obj *x, uint64_t n) {
  int bad = (x->sent = calloc(n + 1, 4)) == NULL ||
            (x->offers = calloc(n + 1, 2)) == NULL;
  return bad ? STITCH_ENOMEM : 0;
}

void seed_obj_free(seed_obj *x) {
  free(x->sent);
  free(x->offers);
  memset(x, 0, sizeof(*x));
}

void seed_on_sent(stitch_swarm *s, peer *p, vstate *v, const chunk_id *c) {
  v->seed[c->object].sent[c->chunk]++;
  seed_offer(s, p);
}

void seed_on_upload(stitch_swarm *s, const chunk_id *c) {
  vstate *v = core_find_version(s, c->version);
  if (v != NULL && v->seed[c->object].sent != NULL)
    v->seed[c->object].sent[c->chunk]++;
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
    if (!core_wanted_by_all(s, v, o))
      continue;
    for (size_t i = 0; i < s->n_peers; i++)
      if (s->peers[i].state == PEER_READY && !peer_far(&s->peers[i]))
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
 * region to fetch it by a pull, a long round trip later (reach.c). So
 * does a small one (SEED_SMALL_CHUNKS) with more chunks than that, a
 * share each: given to every peer, each chunk a receiver without links
 * into some region got waited there for a turn to cross (cross_ok),
 * 0.2 s and more (a 14-chunk delta to 250 nodes in three regions: last
 * node 4.0-4.3 times lb_s, 2.2-2.5 with the share; docs/swarm.md). A
 * larger one goes to every peer: giving an anchor's first round to half
 * the peers held every region back 0.1 s (docs/history/simulator.md
 * "Every region within reach"). */
#define SEED_SMALL_CHUNKS 64

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
      round_done &= v->seed[o].sent[c] > 0 || v->seed[o].offers[c] > 0 ||
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
    int small = want->n <= SEED_SMALL_CHUNKS;
    unsigned reaching = round_done || (want->n > s->n_peers && !small)
                            ? 0
                            : wanting(s, want->version, o, 1);
    int few = reaching > 0 && (want->n <= reaching || small);
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
        if (!round_done && (v->seed[o].sent[c] > 0 || v->seed[o].offers[c] > 0))
          continue;
        uint64_t key = ((uint64_t)v->seed[o].sent[c] << 32) | v->seed[o].offers[c];
        if (key < best_key) {
          best_key = key;
          best = c;
        }
      }
      if (best == UINT64_MAX)
        break;
      bits_set(off, best);
      v->seed[o].offers[best]++;
      outstanding++;
      chunk_id id = {want->version, o, best};
      if (!round_done && p->n_serve < CORE_MAX_SERVE) {
        core_serve_add(s, p, &id);
      } else {
        wire_msg m;
        chunk_msg(&m, WIRE_HAVE, &id);
        core_send(s, p, &m);
      }
    }
    if (round_done)
      off->since_ms = s->now_ms; /* one more batch per idle period */
  }
}
