/* test_bound.c: sim_bound against figures worked by hand, and the
 * scenario reader's errors (docs/simulator.md). */
#include "sim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define NEAR(got, want)                                                      \
  do {                                                                       \
    double g_ = (got), w_ = (want);                                          \
    if (fabs(g_ - w_) > 1e-9 * fabs(w_)) {                                   \
      fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", __FILE__, __LINE__, \
              #got, g_, w_);                                                 \
      failures++;                                                            \
    }                                                                        \
  } while (0)

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  sim_region r[2] = {{"us", 4, 80, 160, 5, 0, 0, 0, 0}, {"eu", 2, 8, 160, 5, 0, 0, 0, 0}};
  sim_scenario sc;
  memset(&sc, 0, sizeof(sc));
  snprintf(sc.seed_region, sizeof(sc.seed_region), "us");
  sc.seed_up_mbps = 40;   /* 5 MB/s */
  sc.regions = r;
  sc.n_regions = 1;
  sc.nodes = 4;
  sc.inter_mbps = 8000;   /* 1 GB/s */
  /* One region, F = 10 MB: u_s = 5 MB/s, d_min = 20 MB/s, sum u = 4 x 10
   * MB/s. F/u_s = 2 s; F/d_min = 0.5 s; N F / (u_s + sum u) = 40 / 45 s.
   * The seed's uplink decides: 2 s. */
  NEAR(sim_bound(&sc, 10000000), 2.0);
  /* Seed at 400 Mbit/s (50 MB/s): N F / (u_s + sum u) = 40 / 90 s, above
   * F / d_min = 0.5 s? No: 0.444 < 0.5, so 0.5 s. */
  sc.seed_up_mbps = 400;
  NEAR(sim_bound(&sc, 10000000), 0.5);
  /* Two regions, eu's 2 nodes upload 1 MB/s each, its link lets in 1 MB/s
   * (8 Mbit/s): F / C = 10 s; eu's copies: 2 x 10 MB / (2 + 1) MB/s =
   * 6.667 s; overall 60 MB / (50 + 40 + 2) MB/s. F / C decides: 10 s. */
  sc.n_regions = 2;
  sc.nodes = 6;
  sc.inter_mbps = 8;
  NEAR(sim_bound(&sc, 10000000), 10.0);
  /* A fatter link (80 Mbit/s = 10 MB/s): F / C = 1 s; eu: 20 / 12 =
   * 1.667 s; us (seed there): 40 / (40 + 50 + 10) = 0.4 s. 1.667 s. */
  sc.inter_mbps = 80;
  NEAR(sim_bound(&sc, 10000000), 20.0 / 12.0);

  /* The budget reference (issue 36's rules: the seed sends 1.2 F, each
   * region takes in 1 F), same fleet, F = 10 MB. The nodes' upload is
   * 4 x 10 + 2 x 1 = 42 MB/s: (60 - 12) / 42 = 1.143 s. us, the seed's
   * region, takes 12 + 10 MB from outside its nodes: (40 - 22) / 40 =
   * 0.45 s. eu takes 10 MB in and its two nodes upload the rest at 2 MB/s:
   * (20 - 10) / 2 = 5 s, the reference; sim_bound's 1.667 s let eu take
   * all it needs across. */
  NEAR(sim_budget_bound(&sc, 10000000), 5.0);
  /* Latency, 5 ms in each region, 40 ms between them: the seed reaches an
   * us node in 5 ms, an eu node in 2.5 + 40 + 2.5 = 45 ms (sim_latency).
   * Its budget feeds one region whole, best us (back through eu it would
   * take 45 + 45 ms); eu then takes some chunk through an us node, 5 + 45
   * = 50 ms, and its second node that chunk from the first, 5 ms more:
   * 55 ms. */
  sc.inter_latency_ms = 40;
  NEAR(sim_latency(&sc), 0.045);
  NEAR(sim_budget_latency(&sc), 0.055);
  /* A single eu node takes the chunk itself: no hop inside, 50 ms (and
   * never less than sim_latency's 45). */
  r[1].nodes = 1;
  sc.nodes = 5;
  NEAR(sim_budget_latency(&sc), 0.050);
  r[1].nodes = 2;
  sc.nodes = 6;
  /* One region (4 nodes, the seed at 50 MB/s): (40 - 12) / 40 = 0.7 s,
   * above sim_bound's 0.5; two hops of 5 ms, as the seed's 1.2 copies
   * feed no more than two nodes. */
  sc.n_regions = 1;
  sc.nodes = 4;
  NEAR(sim_bound(&sc, 10000000), 0.5);
  NEAR(sim_budget_bound(&sc, 10000000), 0.7);
  NEAR(sim_budget_latency(&sc), 0.010);

  /* The example scenarios load; broken ones fail with one line. */
  const char *dir = argc > 1 ? argv[1] : "simulations/scenarios";
  const char *good[] = {"small.json",      "nodes1000.json",
                        "nodes10000.json", "central1000.json",
                        "churn.json",      "fair.json",
                        "regions.json",    "anchor1000.json",
                        "volunteer1000.json", "netlab_sym.json",
                        "netlab_asym.json", "netlab_sym_loss.json",
                        "anchor10000.json", "headroom10000.json",
                        "upload1000.json", "upload10000.json",
                        "stream1000.json", "stream_dc1000.json"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/%s", dir, good[i]);
    sim_scenario s2;
    if (sim_scenario_load(path, &s2, err, sizeof(err)) != 0) {
      fprintf(stderr, "%s\n", err);
      failures++;
      continue;
    }
    /* The budgets only take away: the budget reference is never below
     * the plain one, whatever the size. */
    for (uint64_t f = 1000; f <= 1000000000; f *= 100)
      if (!(sim_budget_bound(&s2, f) >= sim_bound(&s2, f)) ||
          !(sim_budget_latency(&s2) >= sim_latency(&s2))) {
        fprintf(stderr, "%s: F = %llu: budget %g s + %g s below %g s + %g s\n",
                good[i], (unsigned long long)f, sim_budget_bound(&s2, f),
                sim_budget_latency(&s2), sim_bound(&s2, f), sim_latency(&s2));
        failures++;
      }
    sim_scenario_free(&s2);
  }
  /* tools/netlab's NAT and fault files load (stitch-sim --bounds gives
   * their bounds). Neither names a network and nothing is marked as not
   * to be simulated: the NAT file's loss runs on the flows network, the
   * default for its size, and the fault file goes to the queues network,
   * which alone simulates faults, saying why. */
  const char *netlab_only[][2] = {{"netlab_nat.json", NULL},
                                  {"netlab_kill.json", "faults"}};
  for (size_t i = 0; i < 2; i++) {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/%s", dir, netlab_only[i][0]);
    sim_scenario s2;
    if (sim_scenario_load(path, &s2, err, sizeof(err)) != 0) {
      fprintf(stderr, "%s\n", err);
      failures++;
      continue;
    }
    const char *why = netlab_only[i][1];
    if (s2.unsimulated[0] != 0 || s2.queues != (why != NULL) ||
        (why != NULL ? strstr(s2.network_note, why) == NULL
                     : s2.network_note[0] != 0)) {
      fprintf(stderr,
              "%s: unsimulated '%s', network %s, note '%s' (expected the "
              "%s network%s%s)\n",
              path, s2.unsimulated, s2.queues ? "queues" : "flows",
              s2.network_note, why ? "queues" : "flows",
              why ? ", for " : "", why ? why : "");
      failures++;
    }
    if (i == 0 && (s2.regions[0].nat_nodes != 3 || s2.regions[1].nat_nodes != 2)) {
      fprintf(stderr, "%s: %u and %u nodes behind NAT, expected 3 and 2\n",
              path, s2.regions[0].nat_nodes, s2.regions[1].nat_nodes);
      failures++;
    }
    if (i == 1 && (s2.n_faults != 2 || s2.faults[0].kind != SIM_FAULT_KILL ||
                   s2.faults[0].fraction != 0.3 || s2.faults[1].end_s != 10)) {
      fprintf(stderr, "%s: faults not read as written\n", path);
      failures++;
    }
    sim_scenario_free(&s2);
  }
  {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/small.json", dir);
    sim_scenario s2;
    if (sim_scenario_load(path, &s2, err, sizeof(err)) == 0) {
      if (s2.unsimulated[0]) {
        fprintf(stderr, "small.json: unsimulated '%s'\n", s2.unsimulated);
        failures++;
      }
      sim_scenario_free(&s2);
    }
  }
  if (failures == 0)
    printf("sim_bound: ok\n");
  return failures ? 1 : 0;
}
