/* reach.c: which other regions a node's links reach, told to the seed
 * (REACH, proto/wire.md), so that the seed gives a chunk's first copy to
 * a neighbour that can pass it into every region.
 *
 * A chunk the seed gives out goes across unasked only to the regions its
 * receiver has links into (cross.c push_across). A region none of them
 * reached waited for a pull across: a far HAVE, a turn, then a long round
 * trip. In 100 nodes in three regions the receiver's two far links were
 * both into one region, and the third region's median node held each
 * one-chunk delta at 0.34 s against 0.15 s (docs/history/simulator.md
 * "Every region within reach").
 *
 * Regions are named by strings; each core numbers those it meets, in a
 * table of up to CORE_MAX_REGIONS, so that a reach is a bit mask. The
 * seed must reach, through a receiver, every region that has nodes: the
 * regions of its peers and of the addresses it knows, and those that at
 * least two peers say they reach (it may not know an address there yet).
 * A peer may add no more than CORE_REACH_NEW names to the table, and a
 * name only it gives counts for nothing: made-up regions can neither fill
 * the table nor become a region no honest node reaches. A peer can still
 * claim to reach every region and so be given every first copy of a
 * small object; if it keeps them, the others get them from the seed once
 * they have made no progress for CORE_SEED_IDLE_MS, as from any
 * neighbour that withholds its share. */
#include "swarm/core_internal.h"

#include <stdio.h>
#include <string.h>

_Static_assert(CORE_MAX_REGIONS <= 32, "reach masks are uint32_t");

/* REGION's number in our table, or -1. ADD: take a new name in, if there
 * is room. */
static int region_number(stitch_swarm *s, const char *region, int add) {
  if (region[0] == '\0')
    return -1;
  for (unsigned i = 0; i < s->n_regions; i++)
    if (strcmp(s->regions[i], region) == 0)
      return (int)i;
  if (!add || s->n_regions == CORE_MAX_REGIONS)
    return -1;
  snprintf(s->regions[s->n_regions], STITCH_SWARM_REGION_MAX, "%s", region);
  return (int)s->n_regions++;
}

static uint32_t bit_of(stitch_swarm *s, const char *region, int add) {
  int i = region_number(s, region, add);
  return i < 0 ? 0 : 1u << i;
}

/* The other regions our ready links reach; the seed's link does not
 * count, as the seed takes nothing passed to it. */
static uint32_t our_reach(stitch_swarm *s) {
  uint32_t m = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    if (q->state == PEER_READY && !q->is_seed && !q->same_region)
      m |= bit_of(s, q->region, 1);
  }
  return m;
}

/* A node reaching more than WIRE_MAX_REACH other regions names the first
 * ones only; the seed then counts it as reaching fewer. */
static void send_reach(stitch_swarm *s, peer *p, uint32_t mask) {
  wire_msg m;
  wire_msg_clear(&m);
  m.type = WIRE_REACH;
  for (unsigned i = 0; i < s->n_regions && m.n_reach < WIRE_MAX_REACH; i++)
    if (mask >> i & 1)
      snprintf(m.reach[m.n_reach++], STITCH_SWARM_REGION_MAX, "%s",
               s->regions[i]);
  core_send(s, p, &m);
}

void reach_tell(stitch_swarm *s, peer *p) {
  if (s->cfg.seed)
    return;
  uint32_t now = our_reach(s);
  if (p != NULL) { /* a seed link just became ready */
    send_reach(s, p, now);
    s->reach_told = now;
    return;
  }
  if (now == s->reach_told)
    return;
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state == PEER_READY && s->peers[i].is_seed)
      send_reach(s, &s->peers[i], now);
  s->reach_told = now;
}

void reach_regions(stitch_swarm *s) {
  if (!s->cfg.seed)
    return;
  uint32_t all = 0, once = 0, twice = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    if (q->state != PEER_READY)
      continue;
    all |= bit_of(s, q->region, 1);
    twice |= once & q->reach;
    once |= q->reach;
  }
  for (size_t i = 0; i < s->n_addrs; i++)
    all |= bit_of(s, s->addrs[i].region, 1);
  s->regions_all = all | twice;
}

void reach_on_msg(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (!s->cfg.seed)
    return; /* only the seed asks */
  uint32_t mask = 0;
  for (size_t i = 0; i < m->n_reach; i++) {
    int r = region_number(s, m->reach[i], 0);
    if (r < 0 && p->regions_added < CORE_REACH_NEW &&
        (r = region_number(s, m->reach[i], 1)) >= 0)
      p->regions_added++;
    if (r >= 0)
      mask |= 1u << r;
  }
  p->reach = mask;
  p->reach_known = 1;
  /* The regions that count are updated by maintain, not here: a peer may
   * send thousands of REACHes a second, and that walks every address. */
}

int reach_all(stitch_swarm *s, const peer *p) {
  if (!p->reach_known)
    return 0;
  uint32_t has = p->reach | bit_of(s, p->region, 0);
  return (has & s->regions_all) == s->regions_all;
}
