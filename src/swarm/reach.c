/* reach.c: which other regions a node's links reach, told to the seed
 * (REACH, proto/wire.md), so that the seed gives a chunk's first copy to
 * a neighbour that can pass it into every region.
 *
 * A chunk the seed gives out goes across unasked only to the regions its
 * receiver has links into (fetch.c push_across). A region none of them
 * reached waited for a pull across: a far HAVE, a turn, then a long round
 * trip. In 100 nodes in three regions the receiver's two far links were
 * both into one region, and the third region's median node held each
 * one-chunk delta at 0.34 s against 0.15 s (docs/simulator.md "Every
 * region within reach").
 *
 * Regions are named by strings; each core numbers those it meets (its
 * peers' regions and the regions they report) in a table of up to
 * CORE_MAX_REGIONS, so that a reach is a bit mask. */
#include "swarm/core_internal.h"

#include <string.h>

/* REGION's number in our table, added if new; -1 if it is empty or the
 * table is full. */
static int region_number(stitch_swarm *s, const char *region) {
  if (region[0] == '\0')
    return -1;
  for (unsigned i = 0; i < s->n_regions; i++)
    if (strcmp(s->regions[i], region) == 0)
      return (int)i;
  if (s->n_regions == CORE_MAX_REGIONS)
    return -1;
  memcpy(s->regions[s->n_regions], region, STITCH_SWARM_REGION_MAX);
  return (int)s->n_regions++;
}

static uint32_t bit_of(stitch_swarm *s, const char *region) {
  int i = region_number(s, region);
  return i < 0 ? 0 : 1u << i;
}

/* The other regions our ready links reach; the seed's link does not
 * count, as the seed takes nothing passed to it. */
static uint32_t our_reach(stitch_swarm *s) {
  uint32_t m = 0;
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *q = &s->peers[i];
    if (q->state == PEER_READY && !q->is_seed &&
        strcmp(q->region, s->cfg.region) != 0)
      m |= bit_of(s, q->region);
  }
  return m;
}

static void send_reach(stitch_swarm *s, peer *p, uint32_t mask) {
  wire_msg m;
  memset(&m, 0, sizeof(m));
  m.type = WIRE_REACH;
  for (unsigned i = 0; i < s->n_regions && m.n_reach < WIRE_MAX_REACH; i++)
    if (mask >> i & 1)
      memcpy(m.reach[m.n_reach++], s->regions[i], STITCH_SWARM_REGION_MAX);
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

void reach_on_msg(stitch_swarm *s, peer *p, const wire_msg *m) {
  if (!s->cfg.seed)
    return; /* only the seed asks */
  uint32_t mask = 0;
  for (size_t i = 0; i < m->n_reach; i++)
    mask |= bit_of(s, m->reach[i]);
  p->reach = mask;
  p->reach_known = 1;
}

int reach_all(stitch_swarm *s, const peer *p) {
  if (!p->reach_known)
    return 0;
  uint32_t all = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state == PEER_READY)
      all |= bit_of(s, s->peers[i].region) | s->peers[i].reach;
  uint32_t has = p->reach | bit_of(s, p->region);
  return (has & all) == all;
}
