/* churn.c: which nodes leave and join, and when (docs/simulator.md, Churn).
 *
 * The whole plan is drawn before the run from the scenario's rng_seed:
 * leaves and joins are two independent Poisson processes (exponential gaps
 * at leave_per_min / 60 and join_per_min / 60 per second) over the churn
 * window, a leave takes a node uniformly among the non-seed nodes alive at
 * that moment (joiners included), and a joiner's region is drawn in
 * proportion to the regions' sizes in the scenario. Planning ahead costs
 * nothing in fidelity (who is alive depends only on these draws, never on
 * what the protocol did) and gives the drivers what they need up front:
 * every host exists from the start (the flows network's platform cannot
 * grow), and a node's actor knows when it leaves. It also means two builds
 * of the core face exactly the same churn. */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Uniform in (0, 1]. */
static double uniform(uint64_t *rng) {
  return (double)((sim_xorshift(rng) >> 11) + 1) * 0x1p-53;
}

static uint64_t stream(uint64_t seed, uint64_t mul, uint64_t add) {
  uint64_t x = seed * mul + add;
  return x ? x : 1; /* xorshift stays at 0 */
}

/* Event times of a Poisson process of RATE per second over [START, END),
 * into *T (malloc'd). A joiner's region is drawn right after its time from
 * the same stream when REGION is not NULL, so where joiners go does not
 * depend on the leave rate. Returns the count, or -1 past SIM_CHURN_MAX or
 * out of memory. */
static long poisson(const sim_scenario *sc, double rate, double start,
                    double end, uint64_t *rng, double **t, int **region) {
  size_t n = 0, cap = 0;
  unsigned total = 0;
  for (size_t r = 0; r < sc->n_regions; r++)
    total += sc->regions[r].nodes;
  *t = NULL;
  if (region != NULL)
    *region = NULL;
  for (double x = start; rate > 0;) {
    x += -log(uniform(rng)) / rate;
    if (!(x < end))
      break;
    if (n == SIM_CHURN_MAX)
      return -1;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      double *nt = realloc(*t, cap * sizeof(**t));
      if (nt == NULL)
        return -1;
      *t = nt;
      if (region != NULL) {
        int *nr = realloc(*region, cap * sizeof(**region));
        if (nr == NULL)
          return -1;
        *region = nr;
      }
    }
    (*t)[n] = x;
    if (region != NULL) {
      /* In proportion to the regions' sizes; uniform if all are empty. */
      uint64_t k = sim_xorshift(rng) % (total ? total : sc->n_regions);
      size_t r = 0;
      while (total && k >= sc->regions[r].nodes)
        k -= sc->regions[r++].nodes;
      (*region)[n] = (int)(total ? r : k);
    }
    n++;
  }
  return (long)n;
}

int sim_churn_plan(const sim_scenario *sc, double start_s, double end_s,
                   sim_churn *ch, char *err, size_t errlen) {
  memset(ch, 0, sizeof(*ch));
  int rc = -1;
  double *jt = NULL, *lt = NULL;
  int *jr = NULL, *live = NULL;
  uint64_t jrng = stream(sc->rng_seed, 0xd1b54a32d192ed03ull, 11);
  uint64_t lrng = stream(sc->rng_seed, 0x8cb92ba72f3d8dd7ull, 13);
  uint64_t pick = stream(sc->rng_seed, 0xa24baed4963ee407ull, 17);
  if (!(end_s > start_s) || sc->central ||
      (sc->leave_per_min <= 0 && sc->join_per_min <= 0))
    start_s = end_s = 0; /* no churn, no window: the run ends as before */
  ch->start_s = start_s;
  ch->end_s = end_s;
  long nj = poisson(sc, sc->join_per_min / 60, start_s, end_s, &jrng, &jt,
                    &jr);
  long nl = poisson(sc, sc->leave_per_min / 60, start_s, end_s, &lrng, &lt,
                    NULL);
  if (nj < 0 || nl < 0 || (unsigned long)(nj + nl) > SIM_CHURN_MAX) {
    snprintf(err, errlen, "churn: more than %u leaves and joins, or out of "
                          "memory", SIM_CHURN_MAX);
    goto out;
  }
  ch->joins = (unsigned)nj;
  ch->slots = 1 + sc->nodes + ch->joins;
  ch->join_s = calloc(ch->slots, sizeof(*ch->join_s));
  ch->leave_s = calloc(ch->slots, sizeof(*ch->leave_s));
  ch->region = calloc(ch->slots, sizeof(*ch->region));
  live = calloc(ch->slots, sizeof(*live));
  if (ch->join_s == NULL || ch->leave_s == NULL || ch->region == NULL ||
      live == NULL) {
    snprintf(err, errlen, "churn: out of memory");
    goto out;
  }
  unsigned slot = 1, n_live = 0;
  for (size_t r = 0; r < sc->n_regions; r++) {
    if (strcmp(sc->regions[r].name, sc->seed_region) == 0)
      ch->region[0] = (int)r;
    for (unsigned i = 0; i < sc->regions[r].nodes; i++) {
      live[n_live++] = slot;
      ch->region[slot++] = (int)r;
    }
  }
  for (unsigned i = 0; i < ch->slots; i++)
    ch->leave_s[i] = INFINITY;
  /* Both processes in time order; a leave goes first at equal times. */
  for (long j = 0, l = 0; j < nj || l < nl;) {
    if (l < nl && (j == nj || lt[l] <= jt[j])) {
      if (n_live > 0) { /* nobody left to leave: the event is void */
        unsigned k = (unsigned)(sim_xorshift(&pick) % n_live);
        ch->leave_s[live[k]] = lt[l];
        live[k] = live[--n_live];
        ch->leaves++;
      }
      l++;
    } else {
      ch->join_s[slot] = jt[j];
      ch->region[slot] = jr[j];
      live[n_live++] = slot++;
      j++;
    }
  }
  rc = 0;
out:
  free(jt);
  free(jr);
  free(lt);
  free(live);
  if (rc != 0)
    sim_churn_free(ch);
  return rc;
}

void sim_churn_free(sim_churn *ch) {
  free(ch->join_s);
  free(ch->leave_s);
  free(ch->region);
  memset(ch, 0, sizeof(*ch));
}
