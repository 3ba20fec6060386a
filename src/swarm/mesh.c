/* mesh.c: the neighbours a node keeps (docs/swarm.md): the addresses it
 * learns (its command line, PEERS frames), which of them it dials and
 * when, how it backs off a dial that fails, and the PEERS it sends. The
 * links themselves, once open, are core.c's. */
#include "swarm/core_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

addr_entry *core_find_addr(stitch_swarm *s, const char *a) {
  for (size_t i = 0; i < s->n_addrs; i++)
    if (strcmp(s->addrs[i].addr, a) == 0)
      return &s->addrs[i];
  return NULL;
}

/* Ends the streak when a link we dialed since the last dial that came
 * to nothing has lasted (dials work again), or when anyone has dialed us
 * (a hole punched, say). */
static void dials_lasting(stitch_swarm *s) {
  for (size_t i = 0; i < s->n_peers && s->dial_streak > 0; i++) {
    const peer *p = &s->peers[i];
    if (p->state == PEER_READY &&
        (!p->outbound || (p->opened_ms > s->dial_failed_ms &&
                          s->now_ms - p->opened_ms >= CORE_SHORT_LINK_MS)))
      s->dial_streak = 0;
  }
}

/* A dial to E failed, or its link closed too soon: try it again later
 * and later (2 s, doubling, at most 64 s). A node that advertises no
 * address (behind a NAT: nobody can dial it), past CORE_DIAL_STREAK such
 * dials in a row, waits before its next dial to anyone (maintain), longer
 * each time. Not a node others can dial: others' dials bring it links,
 * and at a fleet's start, when every node meets full ones, backing off
 * held some to a few links (upload1000.json without NAT, rng_seed 3: the
 * anchor's last node at 3.46 s instead of 2.85). */
void core_addr_failed(stitch_swarm *s, addr_entry *e, uint64_t now_ms) {
  e->failures++;
  e->next_try_ms = now_ms + (1000ull << (e->failures < 6 ? e->failures : 6));
  if (s->cfg.listen[0])
    return;
  s->dial_failed_ms = now_ms;
  dials_lasting(s);
  if (++s->dial_streak < CORE_DIAL_STREAK)
    return;
  unsigned k = s->dial_streak - CORE_DIAL_STREAK;
  uint64_t quiet = (uint64_t)CORE_DIAL_QUIET_MS << (k < 8 ? k : 8);
  s->dial_quiet_ms =
      now_ms + (quiet < CORE_DIAL_QUIET_MAX_MS ? quiet : CORE_DIAL_QUIET_MAX_MS);
}

/* STITCH_ENOMEM when the address could not be kept (peer exchange will
 * tell it again; the agent's own addresses must not vanish unreported). */
int core_learn_addr(stitch_swarm *s, const char *a, const char *region) {
  if (a[0] == 0 || strcmp(a, s->cfg.listen) == 0 || core_banned_addr(s, a))
    return 0;
  addr_entry *e = core_find_addr(s, a);
  if (e != NULL) {
    if (region[0])
      snprintf(e->region, sizeof(e->region), "%s", region);
    return 0;
  }
  if (s->n_addrs == CORE_MAX_ADDRS)
    return 0;
  if (s->n_addrs % 64 == 0) {
    addr_entry *na = realloc(s->addrs, (s->n_addrs + 64) * sizeof(*na));
    if (na == NULL)
      return STITCH_ENOMEM;
    s->addrs = na;
  }
  e = &s->addrs[s->n_addrs++];
  memset(e, 0, sizeof(*e));
  snprintf(e->addr, sizeof(e->addr), "%s", a);
  snprintf(e->region, sizeof(e->region), "%s", region);
  return 0;
}

int stitch_swarm_add_peer_addr(stitch_swarm *s, const char *addr,
                               const char *region) {
  region = region ? region : "";
  if (addr == NULL || strlen(addr) >= STITCH_SWARM_ADDR_MAX || !addr[0] ||
      strlen(region) >= STITCH_SWARM_REGION_MAX ||
      wire_control_byte(addr, strlen(addr)) != NULL ||
      wire_control_byte(region, strlen(region)) != NULL)
    return STITCH_EINVAL;
  return core_learn_addr(s, addr, region);
}

/* Is some peer (any state) already linked to ADDR? */
static int linked_to(const stitch_swarm *s, const char *a) {
  for (size_t i = 0; i < s->n_peers; i++) {
    const peer *p = &s->peers[i];
    if (p->state != PEER_FREE && p->state != PEER_CLOSING &&
        (strcmp(p->addr, a) == 0 || strcmp(p->listen, a) == 0))
      return 1;
  }
  return 0;
}

/* Is REGION, an address's, known and not ours? */
static int far_region(const stitch_swarm *s, const char *region) {
  return region[0] && strcmp(region, s->cfg.region) != 0;
}

/* Opens links until max_peers + CORE_SAME_EXTRA of our region, plus
 * cfg.cross_region links to other regions when there are any (those
 * first). Links to other regions beyond those cfg.cross_region do not
 * count: nodes of far regions dial into the region that holds the chunks
 * first, and counting their links left such a node with two or three
 * neighbours of its own region, whose uplink then sat idle while its
 * region spread a version. */
void core_maintain(stitch_swarm *s) {
  size_t have = core_count_peers(s, 0), pending = 0, pending_same = 0, same, cross;
  size_t out = 0;
  for (size_t i = 0; i < s->n_peers; i++)
    out += s->peers[i].outbound && s->peers[i].state == PEER_READY;
  reach_tell(s, NULL); /* what our links reach, if that changed */
  reach_regions(s);
  s->region_known = 0; /* fetch.c's estimate of our region's size */
  s->far_known = 0;
  for (size_t i = 0; i < s->n_addrs; i++) {
    addr_entry *e = &s->addrs[i];
    s->region_known += strcmp(e->region, s->cfg.region) == 0;
    s->far_known += far_region(s, e->region);
    if (e->connecting && s->now_ms - e->connect_ms >= CORE_CONNECT_MS) {
      e->connecting = 0; /* never answered: count as a failure */
      core_addr_failed(s, e, s->now_ms);
    }
    pending += e->connecting;
    pending_same += e->connecting && !far_region(s, e->region);
  }
  core_count_ready(s, &same, &cross);
  if (s->cfg.seed)
    return; /* the seed waits for nodes to dial it */
  punch_maintain(s);
  if (cross > s->cfg.cross_region)
    have -= cross - s->cfg.cross_region;
  /* Counting the far links toward max_peers left a node with six of its
   * region, and those with fewest neighbours of their region finished
   * last (docs/history/simulator.md "Links across on top"). */
  size_t target = s->cfg.max_peers + (s->far_known ? s->cfg.cross_region : 0);
  /* And CORE_SAME_EXTRA more of its own region, only those: a node that
   * few of its region dialed, its slots taken by far nodes dialing in,
   * held 6 or 7 of its region, fetched from those alone (far links carry
   * only what the region lacks) and finished last
   * (docs/history/simulator.md "Ten of its own region"). */
  size_t same_min = s->cfg.max_peers + CORE_SAME_EXTRA;
  dials_lasting(s);
  int backing_off = s->dial_streak >= CORE_DIAL_STREAK;
  if (backing_off) {
    uint64_t low = s->dial_failed_ms + CORE_DIAL_QUIET_LOW_MS;
    int few = out < CORE_OUTBOUND_MIN || same < CORE_OUTBOUND_MIN;
    if (s->now_ms < s->dial_quiet_ms && (!few || s->now_ms < low))
      return;
  }
  while (have + pending < target || same + pending_same < same_min ||
         out + pending < CORE_OUTBOUND_MIN) {
    /* Links wanted only for CORE_OUTBOUND_MIN go to our region, as the
     * CORE_SAME_EXTRA ones do. */
    int only_same = have + pending >= target;
    int want_cross = !only_same && cross < s->cfg.cross_region;
    addr_entry *best = NULL;
    for (int pass = 0; pass < (only_same ? 1 : 2) && best == NULL; pass++) {
      size_t start = s->n_addrs ? (size_t)(core_random(s) % s->n_addrs) : 0;
      for (size_t k = 0; k < s->n_addrs; k++) {
        addr_entry *e = &s->addrs[(start + k) % s->n_addrs];
        if (e->connecting || e->next_try_ms > s->now_ms ||
            linked_to(s, e->addr) || core_banned_addr(s, e->addr) ||
            grey_addr(&s->grey, e->addr, s->now_ms))
          continue;
        int other = far_region(s, e->region);
        /* Pass 0 takes what the mix wants; pass 1 anything. */
        if (pass == 0 && other != want_cross && e->region[0])
          continue;
        best = e;
        break;
      }
    }
    if (best == NULL)
      return;
    best->connecting = 1;
    best->connect_ms = s->now_ms;
    /* Behind a NAT, every dial from one port: the address a relay sees
     * is then the one a punch needs (punch.h). */
    stitch_swarm_action a = {
        .kind = STITCH_SWARM_CONNECT,
        .flags = s->cfg.listen[0] ? 0 : STITCH_SWARM_DIAL_FIXED};
    snprintf(a.addr, sizeof(a.addr), "%s", best->addr);
    core_push_action(s, &a);
    pending++;
    if (far_region(s, best->region))
      cross++;
    else
      pending_same++;
    if (backing_off)
      return; /* one dial a pause */
  }
}

void core_send_peers(stitch_swarm *s, peer *p) {
  wire_msg m;
  wire_msg_clear(&m);
  m.type = WIRE_PEERS;
  size_t start = s->n_addrs ? (size_t)(core_random(s) % s->n_addrs) : 0;
  for (size_t k = 0; k < s->n_addrs && m.n_peers < 16; k++) {
    const addr_entry *e = &s->addrs[(start + k) % s->n_addrs];
    if (e->failures > 2 || strcmp(e->addr, p->listen) == 0)
      continue;
    snprintf(m.peer_addr[m.n_peers], STITCH_SWARM_ADDR_MAX, "%s", e->addr);
    snprintf(m.peer_region[m.n_peers], STITCH_SWARM_REGION_MAX, "%s",
             e->region);
    m.n_peers++;
  }
  if (s->cfg.listen[0] && m.n_peers < 16) {
    snprintf(m.peer_addr[m.n_peers], STITCH_SWARM_ADDR_MAX, "%s",
             s->cfg.listen);
    snprintf(m.peer_region[m.n_peers], STITCH_SWARM_REGION_MAX, "%s",
             s->cfg.region);
    m.n_peers++;
  }
  p->last_pex_ms = s->now_ms;
  if (m.n_peers > 0)
    core_send(s, p, &m);
}

void core_on_peers(stitch_swarm *s, const wire_msg *m) {
  for (size_t i = 0; i < m->n_peers; i++)
    core_learn_addr(s, m->peer_addr[i], m->peer_region[i]);
}
