/* host.c: what every host of the core does alike, on the public API only
 * (stitch/swarm.h).
 *
 * Three hosts drive a core (docs/architecture.md): the libuv driver
 * (src/net/driver.c, for stitchd), the simulator (simulations/sim.c) and
 * the tests' in-memory network (tests/swarm_net.h). Each carries out
 * CONNECT, CLOSE and APPLY its own way, but the loop that takes the
 * actions and hands each to the right operation, and the look-up of the
 * manifest an APPLY names, were written in each; they live here once.
 * What the hosts keep apart is what differs: their transports, and the
 * store behind their stitch_swarm_io (a directory on disk, a bitset over
 * one chunk table shared by thousands of simulated nodes, a map per test
 * node), so there is no shared io here. */
#include "stitch/swarm.h"

#include <stddef.h>

int stitch_swarm_drain(stitch_swarm *s, const stitch_swarm_host *host,
                       size_t *taken) {
  size_t n = 0;
  int rc = 0;
  for (;;) {
    if (n == STITCH_SWARM_DRAIN_MAX) {
      rc = STITCH_ELIMIT;
      break;
    }
    stitch_swarm_action a;
    stitch_swarm_next_action(s, &a);
    if (a.kind == STITCH_SWARM_NONE)
      break;
    n++;
    switch (a.kind) {
    case STITCH_SWARM_CONNECT:
      if (host->connect != NULL)
        host->connect(host->user, a.addr, a.flags);
      break;
    case STITCH_SWARM_CLOSE:
      if (host->close != NULL)
        host->close(host->user, a.peer);
      break;
    case STITCH_SWARM_APPLY:
      if (host->apply != NULL)
        host->apply(host->user, a.version, a.object);
      break;
    case STITCH_SWARM_NONE:
      break;
    }
  }
  if (taken != NULL)
    *taken = n;
  return rc;
}

const stitch_vref *stitch_swarm_find_version(const stitch_swarm *s,
                                             uint64_t version) {
  const stitch_vref *v;
  size_t n = stitch_swarm_versions(s, &v), lo = 0, hi = n;
  while (lo < hi) { /* ascending by version: the first not below it */
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid].m->version < version)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && v[lo].m->version == version ? &v[lo] : NULL;
}
