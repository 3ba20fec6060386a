/* test_churn.c: churn.c's plan (docs/simulator.md, Churn): deterministic
 * for a seed, leaves only of live non-seed nodes, everything inside the
 * window, rates and joiners' regions as asked. Seeded, so every figure
 * here is exact for the seed; a failure prints it. */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);             \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      failures++;                                                            \
    }                                                                        \
  } while (0)

/* The invariants every plan keeps. */
static void check_plan(const sim_scenario *sc, const sim_churn *ch) {
  unsigned seed = (unsigned)sc->rng_seed;
  CHECK(ch->slots == 1 + sc->nodes + ch->joins, "seed %u: slots %u", seed,
        ch->slots);
  CHECK(!isfinite(ch->leave_s[0]), "seed %u: the seed left", seed);
  unsigned leaves = 0;
  for (unsigned i = 1; i < ch->slots; i++) {
    int joiner = i > sc->nodes;
    CHECK(joiner ? ch->join_s[i] >= ch->start_s && ch->join_s[i] < ch->end_s
                 : ch->join_s[i] == 0,
          "seed %u: node %u joins at %g", seed, i, ch->join_s[i]);
    CHECK(!joiner || i == sc->nodes + 1 || ch->join_s[i] >= ch->join_s[i - 1],
          "seed %u: joiners out of order at %u", seed, i);
    CHECK(ch->region[i] >= 0 && (size_t)ch->region[i] < sc->n_regions &&
              (sc->regions[ch->region[i]].nodes > 0 || sc->nodes == 0),
          "seed %u: node %u in region %d", seed, i, ch->region[i]);
    if (isfinite(ch->leave_s[i])) {
      leaves++;
      CHECK(ch->leave_s[i] > ch->join_s[i] && ch->leave_s[i] >= ch->start_s &&
                ch->leave_s[i] < ch->end_s,
            "seed %u: node %u joins at %g, leaves at %g", seed, i,
            ch->join_s[i], ch->leave_s[i]);
    }
  }
  CHECK(leaves == ch->leaves, "seed %u: %u leave times, %u leaves", seed,
        leaves, ch->leaves);
}

int main(int argc, char **argv) {
  char err[512];
  sim_region r[3] = {{"us", 12, 1000, 1000, 5, 0, 0, 0, 0},
                     {"eu", 8, 500, 1000, 8, 0, 0, 0, 0},
                     {"none", 0, 100, 100, 5, 0, 0, 0, 0}};
  sim_scenario sc;
  memset(&sc, 0, sizeof(sc));
  snprintf(sc.seed_region, sizeof(sc.seed_region), "us");
  sc.regions = r;
  sc.n_regions = 3;
  sc.nodes = 20;
  sc.rng_seed = 1;

  /* Rates and regions over a long window: 600 a minute for 1,000 s is
   * 10,000 expected of each (sd 100); joiners go 12 : 8 : 0. */
  sc.leave_per_min = sc.join_per_min = 600;
  sim_churn a, b;
  if (sim_churn_plan(&sc, 2, 1002, &a, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  check_plan(&sc, &a);
  CHECK(fabs(a.joins - 1e4) < 500 && fabs(a.leaves - 1e4) < 500,
        "%u joins, %u leaves, 10,000 expected", a.joins, a.leaves);
  unsigned in_us = 0;
  for (unsigned i = 1 + sc.nodes; i < a.slots; i++)
    in_us += a.region[i] == 0;
  CHECK(fabs((double)in_us / a.joins - 0.6) < 0.03, "%u of %u joiners in us",
        in_us, a.joins);

  /* The same seed, the same plan; another seed, another. */
  if (sim_churn_plan(&sc, 2, 1002, &b, err, sizeof(err)) == 0) {
    CHECK(a.slots == b.slots && a.leaves == b.leaves &&
              memcmp(a.join_s, b.join_s, a.slots * sizeof(double)) == 0 &&
              memcmp(a.leave_s, b.leave_s, a.slots * sizeof(double)) == 0 &&
              memcmp(a.region, b.region, a.slots * sizeof(int)) == 0,
          "two plans of seed 1 differ");
    sim_churn_free(&b);
  }
  sc.rng_seed = 2;
  if (sim_churn_plan(&sc, 2, 1002, &b, err, sizeof(err)) == 0) {
    check_plan(&sc, &b);
    CHECK(a.slots != b.slots ||
              memcmp(a.join_s, b.join_s, a.slots * sizeof(double)) != 0,
          "seeds 1 and 2 gave the same plan");
    sim_churn_free(&b);
  }
  sim_churn_free(&a);

  /* Only leaves: each takes a live node, so no more than there are. */
  sc.join_per_min = 0;
  for (sc.rng_seed = 1; sc.rng_seed <= 20; sc.rng_seed++) {
    if (sim_churn_plan(&sc, 2, 22, &a, err, sizeof(err)) != 0)
      break;
    check_plan(&sc, &a);
    CHECK(a.joins == 0 && a.leaves == sc.nodes, "seed %u: %u leaves of %u",
          (unsigned)sc.rng_seed, a.leaves, sc.nodes);
    sim_churn_free(&a);
  }

  /* No churn: no window, no events, the initial nodes' slots. */
  sc.leave_per_min = 0;
  if (sim_churn_plan(&sc, 2, 22, &a, err, sizeof(err)) == 0) {
    check_plan(&sc, &a);
    CHECK(a.slots == 21 && a.leaves == 0 && a.end_s == a.start_s,
          "slots %u, leaves %u, window [%g, %g)", a.slots, a.leaves,
          a.start_s, a.end_s);
    CHECK(a.region[0] == 0 && a.region[12] == 0 && a.region[13] == 1,
          "regions %d %d %d", a.region[0], a.region[12], a.region[13]);
    sim_churn_free(&a);
  }

  /* A rate that would make millions of nodes is refused with one line. */
  sc.join_per_min = 1e6;
  CHECK(sim_churn_plan(&sc, 0, 3600, &a, err, sizeof(err)) != 0 &&
            strstr(err, "churn") != NULL,
        "a plan of 60 million joins was accepted");

  /* churn.json: several nodes leave and join while versions go out. */
  char path[512];
  snprintf(path, sizeof(path), "%s/churn.json",
           argc > 1 ? argv[1] : "simulations/scenarios");
  sim_scenario cj;
  if (sim_scenario_load(path, &cj, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s\n", err);
    failures++;
  } else {
    if (sim_churn_plan(&cj, 2, 2 + cj.versions * cj.interval_s, &a, err,
                       sizeof(err)) == 0) {
      check_plan(&cj, &a);
      CHECK(a.leaves >= 3 && a.joins >= 3, "churn.json: %u leaves, %u joins",
            a.leaves, a.joins);
      sim_churn_free(&a);
    }
    sim_scenario_free(&cj);
  }
  if (failures == 0)
    printf("sim_churn_plan: ok\n");
  return failures ? 1 : 0;
}
