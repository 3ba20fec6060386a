/* platform.cpp: the simulated platform, built with SimGrid's C++ API
 * because 3.32's C API cannot create hosts or links (docs/simulator.md).
 *
 *   world (star zone): one zone per region, each behind two links of the
 *   inter_region capacity (into the backbone, out of it), each of latency
 *   inter_region.latency_ms / 2; the backbone itself is not a bottleneck.
 *   region (star zone): every host has its own up and down link of the
 *   region's rates, each of latency region.latency_ms / 2.
 *
 * So a route inside a region costs the region's latency and crosses the
 * sender's up link and the receiver's down link; a route across regions
 * adds both region links and inter_region.latency_ms. The seed (and the
 * central store) sit in the seed's region with their own access links.
 *
 * Also here: sim_wait_any_for, since sg_comm_wait_any_for releases a
 * reference to every comm on timeout, which frees comms still in flight. */
#include "sim.h"

#include <simgrid/comm.h>
#include <simgrid/s4u.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace s4u = simgrid::s4u;

static double bytes_per_s(double mbps) { return mbps * 1e6 / 8; }

/* Creates host NAME with its own up and down links in star zone Z. */
static s4u::Host *add_host(s4u::NetZone *z, const std::string &name,
                           double up_mbps, double down_mbps, double lat_s) {
  s4u::Host *h = z->create_host(name, 1e9);
  s4u::Link *up = z->create_link(name + "-up", bytes_per_s(up_mbps));
  s4u::Link *down = z->create_link(name + "-down", bytes_per_s(down_mbps));
  (void)lat_s; /* paid by flows.c, not SimGrid (flows.c says why) */
  up->seal();
  down->seal();
  z->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
               {s4u::LinkInRoute(up)}, false);
  z->add_route(nullptr, h->get_netpoint(), nullptr, nullptr,
               {s4u::LinkInRoute(down)}, false);
  h->seal();
  return h;
}

extern "C" int sim_platform_build(const sim_scenario *sc, const sim_churn *ch,
                                  void **hosts, char *err, size_t errlen) {
  try {
    s4u::NetZone *world = s4u::create_star_zone("world");
    double inter = bytes_per_s(sc->inter_mbps);
    size_t next = 1;
    for (size_t r = 0; r < sc->n_regions; r++) {
      const sim_region &g = sc->regions[r];
      std::string name = g.name;
      s4u::NetZone *z = s4u::create_star_zone(name);
      z->set_parent(world);
      simgrid::kernel::routing::NetPoint *gw = z->create_router(name + "-gw");
      double lat = g.latency_ms / 1e3;
      bool seed_here = name == sc->seed_region;
      if (seed_here) {
        hosts[0] = add_host(z, "seed", sc->seed_up_mbps, sc->seed_down_mbps,
                            lat);
        if (sc->central)
          hosts[ch->slots] =
              add_host(z, "store", sc->central_mbps, sc->central_mbps, lat);
      }
      for (unsigned i = 0; i < g.nodes; i++, next++)
        hosts[next] = add_host(z, "n" + std::to_string(next), g.up_mbps,
                               g.down_mbps, lat);
      /* Joiners (churn.c): every host exists from the start, since a
       * sealed zone takes no more. */
      for (unsigned j = 1 + sc->nodes; j < ch->slots; j++)
        if (ch->region[j] == (int)r)
          hosts[j] = add_host(z, "n" + std::to_string(j), g.up_mbps,
                              g.down_mbps, lat);
      z->seal();
      s4u::Link *out = world->create_link(name + "-out", inter);
      s4u::Link *in = world->create_link(name + "-in", inter);
      out->seal(); /* their latency, too, is paid by flows.c */
      in->seal();
      world->add_route(z->get_netpoint(), nullptr, gw, nullptr,
                       {s4u::LinkInRoute(out)}, false);
      world->add_route(nullptr, z->get_netpoint(), nullptr, gw,
                       {s4u::LinkInRoute(in)}, false);
    }
    world->seal();
  } catch (const std::exception &e) {
    snprintf(err, errlen, "platform: %s", e.what());
    return -1;
  }
  return 0;
}

extern "C" int sim_platform_one(void **hosts, char *err, size_t errlen) {
  try {
    s4u::NetZone *z = s4u::create_star_zone("world");
    hosts[0] = z->create_host("sim", 1e9)->seal();
    z->seal();
  } catch (const std::exception &e) {
    snprintf(err, errlen, "platform: %s", e.what());
    return -1;
  }
  return 0;
}

extern "C" long sim_wait_any_for(void **comms, size_t n, double timeout,
                                 int *failed) {
  std::vector<s4u::CommPtr> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++)
    v.emplace_back(static_cast<s4u::Comm *>(comms[i])); /* adds a ref */
  ssize_t pos = -1;
  *failed = 0;
  try {
    pos = s4u::Comm::wait_any_for(v, timeout);
  } catch (const simgrid::Exception &e) {
    /* A comm whose other end was cancelled (its pipe was closed) fails,
     * and SimGrid marks it: report it as the one that ended. */
    for (size_t i = 0; i < n && pos < 0; i++)
      if (v[i]->get_state() == s4u::Activity::State::FAILED ||
          v[i]->get_state() == s4u::Activity::State::CANCELED)
        pos = (ssize_t)i;
    if (pos < 0) {
      fprintf(stderr, "stitch-sim: wait: %s\n", e.what());
      return -2;
    }
    *failed = 1;
  }
  if (pos >= 0)
    sg_comm_unref(static_cast<s4u::Comm *>(comms[pos])); /* the caller's */
  return (long)pos;
}

extern "C" void sim_comm_cancel(void *comm) {
  auto *c = static_cast<s4u::Comm *>(comm);
  try {
    c->cancel();
  } catch (const std::exception &e) {
    fprintf(stderr, "stitch-sim: cancel: %s\n", e.what());
  }
  sg_comm_unref(c);
}
