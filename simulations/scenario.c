/* scenario.c: stitch-sim's scenario files and the lower bound.
 *
 * Unknown keys are ignored (scenarios may carry notes); a required key that
 * is missing, or any key of the wrong type or out of range, is an error
 * that names the key. */
#include "sim.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd {
  const char *file;
  char *err;
  size_t errlen;
  int failed;
} rd;

static int rd_fail(rd *r, const char *key, const char *fmt, ...) {
  if (r->failed++)
    return -1;
  char why[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  snprintf(r->err, r->errlen, "%s: %s: %s", r->file, key, why);
  return -1;
}

/* The member KEY of OBJ; NULL when absent (an error if REQUIRED). */
static json_t *rd_get(rd *r, json_t *obj, const char *path, const char *key,
                      int required) {
  json_t *v = json_object_get(obj, key);
  if (v == NULL && required) {
    char full[96];
    snprintf(full, sizeof(full), "%s%s", path, key);
    rd_fail(r, full, "missing");
  }
  return v;
}

static json_t *rd_obj(rd *r, json_t *obj, const char *path, const char *key,
                      int required) {
  json_t *v = rd_get(r, obj, path, key, required);
  if (v != NULL && !json_is_object(v)) {
    char full[96];
    snprintf(full, sizeof(full), "%s%s", path, key);
    rd_fail(r, full, "expected an object");
    return NULL;
  }
  return v;
}

/* A number in [lo, hi]; DEF when absent and not required. */
static double rd_num(rd *r, json_t *obj, const char *path, const char *key,
                     int required, double def, double lo, double hi) {
  if (obj == NULL)
    return def;
  json_t *v = rd_get(r, obj, path, key, required);
  char full[96];
  snprintf(full, sizeof(full), "%s%s", path, key);
  if (v == NULL)
    return def;
  if (!json_is_number(v)) {
    rd_fail(r, full, "expected a number");
    return def;
  }
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi)) {
    rd_fail(r, full, "%g is outside [%g, %g]", x, lo, hi);
    return def;
  }
  return x;
}

static void rd_str(rd *r, json_t *obj, const char *path, const char *key,
                   int required, char *out, size_t cap, const char *def) {
  snprintf(out, cap, "%s", def);
  if (obj == NULL)
    return;
  json_t *v = rd_get(r, obj, path, key, required);
  char full[96];
  snprintf(full, sizeof(full), "%s%s", path, key);
  if (v == NULL)
    return;
  if (!json_is_string(v) || json_string_length(v) == 0 ||
      json_string_length(v) >= cap) {
    rd_fail(r, full, "expected a string of 1 to %zu characters", cap - 1);
    return;
  }
  for (const unsigned char *c = (const unsigned char *)json_string_value(v);
       *c; c++)
    if (*c < 0x20 || *c == 0x7f) { /* a region name goes on the wire */
      rd_fail(r, full, "holds the control byte 0x%02x", (unsigned)*c);
      return;
    }
  snprintf(out, cap, "%s", json_string_value(v));
}

static void read_regions(rd *r, json_t *root, sim_scenario *sc) {
  json_t *a = rd_get(r, root, "", "regions", 1);
  if (a == NULL)
    return;
  if (!json_is_array(a) || json_array_size(a) == 0 ||
      json_array_size(a) > 64) {
    rd_fail(r, "regions", "expected an array of 1 to 64 regions");
    return;
  }
  sc->n_regions = json_array_size(a);
  sc->regions = calloc(sc->n_regions, sizeof(*sc->regions));
  if (sc->regions == NULL) {
    rd_fail(r, "regions", "out of memory");
    return;
  }
  for (size_t i = 0; i < sc->n_regions; i++) {
    json_t *o = json_array_get(a, i);
    char path[32];
    snprintf(path, sizeof(path), "regions[%zu].", i);
    if (!json_is_object(o)) {
      path[strlen(path) - 1] = 0;
      rd_fail(r, path, "expected an object");
      return;
    }
    sim_region *g = &sc->regions[i];
    rd_str(r, o, path, "name", 1, g->name, sizeof(g->name), "");
    g->nodes = (unsigned)rd_num(r, o, path, "nodes", 1, 0, 0, 100000);
    g->up_mbps = rd_num(r, o, path, "up_mbps", 1, 0, 1e-3, 1e7);
    g->down_mbps = rd_num(r, o, path, "down_mbps", 1, 0, 1e-3, 1e7);
    g->latency_ms = rd_num(r, o, path, "latency_ms", 1, 0, 0, 1e5);
    g->jitter_ms = rd_num(r, o, path, "jitter_ms", 0, 0, 0, 1e5);
    g->loss_pct = rd_num(r, o, path, "loss_pct", 0, 0, 0, 99);
    if (!r->failed && g->jitter_ms > g->latency_ms) {
      char full[96];
      snprintf(full, sizeof(full), "%sjitter_ms", path);
      rd_fail(r, full, "%g is more than latency_ms %g (the jitter is a bound "
                       "around the latency)", g->jitter_ms, g->latency_ms);
    }
    /* NAT: how many of the region's nodes, rounded as netlab's Python
     * round() does (half to even; nearbyint's default mode). */
    g->nat = rd_num(r, o, path, "nat", 0, 0, 0, 1);
    g->nat_nodes = (unsigned)nearbyint(g->nat * g->nodes);
    for (size_t j = 0; j < i && !r->failed; j++)
      if (strcmp(sc->regions[j].name, g->name) == 0)
        rd_fail(r, path, "region \"%s\" named twice", g->name);
    sc->nodes += g->nodes;
  }
  if (!r->failed && (sc->nodes == 0 || sc->nodes > 100000))
    rd_fail(r, "regions", "%u nodes in all; expected 1 to 100000",
            sc->nodes);
}

static int unsigned_cmp(const void *a, const void *b) {
  unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
  return x < y ? -1 : x > y;
}

static int region_index(const sim_scenario *sc, const char *name) {
  for (size_t i = 0; i < sc->n_regions; i++)
    if (strcmp(sc->regions[i].name, name) == 0)
      return (int)i;
  return -1;
}

/* "faults": tools/netlab's schema and checks (tools/netlab_faults.py),
 * so a file one driver takes the other takes too. A kill's "fraction" is
 * turned into nodes at run time (faults.c draws them as netlab does). */
static void read_faults(rd *r, json_t *root, sim_scenario *sc) {
  json_t *a = json_object_get(root, "faults");
  if (a == NULL || r->failed)
    return;
  if (!json_is_array(a)) {
    rd_fail(r, "faults", "expected an array");
    return;
  }
  if (json_array_size(a) > SIM_FAULTS_MAX) {
    rd_fail(r, "faults", "%zu faults; at most %d", json_array_size(a),
            SIM_FAULTS_MAX);
    return;
  }
  if (sc->central && json_array_size(a) > 0) {
    rd_fail(r, "faults", "simulated in p2p mode only, not with \"mode\": "
                         "\"central\"");
    return;
  }
  double limit = sc->time_limit_s;
  for (size_t i = 0; i < json_array_size(a) && !r->failed; i++) {
    json_t *o = json_array_get(a, i);
    char path[32], key[48];
    snprintf(path, sizeof(path), "faults[%zu].", i);
    sim_fault *f = &sc->faults[sc->n_faults++];
    if (!json_is_object(o)) {
      snprintf(key, sizeof(key), "faults[%zu]", i);
      rd_fail(r, key, "expected an object");
      return;
    }
    char kind[24];
    snprintf(key, sizeof(key), "%skind", path);
    json_t *k = json_object_get(o, "kind");
    snprintf(kind, sizeof(kind), "%s",
             json_is_string(k) ? json_string_value(k) : "");
    if (strcmp(kind, "partition") == 0)
      f->kind = SIM_FAULT_PARTITION;
    else if (strcmp(kind, "kill") == 0)
      f->kind = SIM_FAULT_KILL;
    else if (strcmp(kind, "seed_restart") == 0)
      f->kind = SIM_FAULT_SEED_RESTART;
    else {
      rd_fail(r, key, "'%s' is not a fault (partition, kill, seed_restart)",
              kind);
      return;
    }
    f->at_s = rd_num(r, o, path, "at_s", 1, 0, 0, limit);
    if (f->kind == SIM_FAULT_PARTITION) {
      char ra[SIM_NAME_MAX], rb[SIM_NAME_MAX];
      rd_str(r, o, path, "a", 1, ra, sizeof(ra), "");
      rd_str(r, o, path, "b", 1, rb, sizeof(rb), "");
      f->a = region_index(sc, ra);
      f->b = region_index(sc, rb);
      if (!r->failed && (f->a < 0 || f->b < 0)) {
        snprintf(key, sizeof(key), "%s%s", path, f->a < 0 ? "a" : "b");
        rd_fail(r, key, "expected the name of a region");
      } else if (!r->failed && f->a == f->b) {
        snprintf(key, sizeof(key), "%sb", path);
        rd_fail(r, key, "the same region as a");
      }
      f->end_s = f->at_s + rd_num(r, o, path, "for_s", 1, 0, 0.001, limit);
    } else if (f->kind == SIM_FAULT_KILL) {
      json_t *ns = json_object_get(o, "nodes");
      int has_frac = json_object_get(o, "fraction") != NULL;
      if ((ns != NULL) == has_frac) {
        snprintf(key, sizeof(key), "faults[%zu]", i);
        rd_fail(r, key, "give nodes or fraction, one of them");
        return;
      }
      if (has_frac) {
        f->fraction = rd_num(r, o, path, "fraction", 1, 0, 0.001, 1);
      } else {
        size_t n = json_is_array(ns) ? json_array_size(ns) : 0;
        f->nodes = calloc(n ? n : 1, sizeof(*f->nodes));
        int ok = n > 0 && f->nodes != NULL;
        for (size_t j = 0; ok && j < n; j++) {
          json_t *x = json_array_get(ns, j);
          json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
          ok = v >= 0 && v < (json_int_t)sc->nodes;
          f->nodes[j] = ok ? (unsigned)v : 0;
        }
        if (ok) { /* ascending, as netlab's sorted(); distinct */
          qsort(f->nodes, n, sizeof(*f->nodes), unsigned_cmp);
          for (size_t j = 1; ok && j < n; j++)
            ok = f->nodes[j] != f->nodes[j - 1];
          f->n_nodes = (unsigned)n;
        }
        if (!ok) {
          snprintf(key, sizeof(key), "%snodes", path);
          rd_fail(r, key, "expected distinct node numbers from 0 to %u",
                  sc->nodes - 1);
          return;
        }
      }
      f->end_s = rd_num(r, o, path, "restart_at_s", 1, 0, f->at_s, limit);
    } else {
      f->end_s = rd_num(r, o, path, "restart_at_s", 0, f->at_s, f->at_s,
                        limit);
    }
  }
  /* Seed restarts must not overlap in time (kills of one node are checked
   * once their nodes are drawn, faults.c). */
  for (unsigned i = 0; i < sc->n_faults && !r->failed; i++)
    for (unsigned j = 0; j < i; j++) {
      const sim_fault *x = &sc->faults[i], *y = &sc->faults[j];
      if (x->kind == SIM_FAULT_SEED_RESTART && y->kind == x->kind &&
          x->at_s <= y->end_s && y->at_s <= x->end_s) {
        char key[32];
        snprintf(key, sizeof(key), "faults[%u]", i);
        rd_fail(r, key, "overlaps faults[%u] on the same process", j);
        break;
      }
    }
}


/* "network" left out (or "auto"): the flows network, SimGrid's max-min
 * sharing, where it runs the whole file in reasonable time; else the
 * queues network, said on stderr (sim.c) with the reason, so that a user
 * never needs to know which network a fleet's size or the file's keys
 * call for (docs/simulator.md, "Two networks"). */
static void pick_network(sim_scenario *sc, const char *path) {
  char why[96];
  if (sc->nodes > SIM_FLOWS_MAX_NODES)
    snprintf(why, sizeof(why),
             "%u nodes: the flows network takes over %u too long", sc->nodes,
             SIM_FLOWS_MAX_NODES);
  else if (sc->n_faults > 0)
    snprintf(why, sizeof(why), "faults are simulated there only");
  else
    return;
  sc->queues = 1;
  snprintf(sc->network_note, sizeof(sc->network_note),
           "%s: the queues network (%s); \"network\": \"flows\" or "
           "\"queues\" chooses",
           path, why);
}

int sim_scenario_load(const char *path, sim_scenario *sc, char *err,
                      size_t errlen) {
  memset(sc, 0, sizeof(*sc));
  rd r = {path, err, errlen, 0};
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (root == NULL) {
    snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
    return -1;
  }
  if (!json_is_object(root)) {
    rd_fail(&r, "(top level)", "expected an object");
    json_decref(root);
    return -1;
  }
  json_t *seed = rd_obj(&r, root, "", "seed", 1);
  rd_str(&r, seed, "seed.", "region", 1, sc->seed_region,
         sizeof(sc->seed_region), "");
  sc->seed_up_mbps = rd_num(&r, seed, "seed.", "up_mbps", 1, 0, 1e-3, 1e7);
  sc->seed_down_mbps = rd_num(&r, seed, "seed.", "down_mbps", 0,
                              sc->seed_up_mbps, 1e-3, 1e7);
  read_regions(&r, root, sc);
  json_t *ir = rd_obj(&r, root, "", "inter_region", 1);
  sc->inter_mbps = rd_num(&r, ir, "inter_region.", "mbps", 1, 0, 1e-3, 1e9);
  sc->inter_latency_ms =
      rd_num(&r, ir, "inter_region.", "latency_ms", 1, 0, 0, 1e5);
  sc->inter_jitter_ms =
      rd_num(&r, ir, "inter_region.", "jitter_ms", 0, 0, 0, 1e5);
  sc->inter_loss_pct = rd_num(&r, ir, "inter_region.", "loss_pct", 0, 0, 0, 99);
  if (!r.failed && sc->inter_jitter_ms > sc->inter_latency_ms)
    rd_fail(&r, "inter_region.jitter_ms", "%g is more than latency_ms %g (the "
            "jitter is a bound around the latency)", sc->inter_jitter_ms,
            sc->inter_latency_ms);
  json_t *v = rd_obj(&r, root, "", "versions", 1);
  sc->versions = (unsigned)rd_num(&r, v, "versions.", "count", 1, 0, 1, 256);
  sc->version_bytes =
      (uint64_t)rd_num(&r, v, "versions.", "bytes", 1, 0, 4096, 64e9);
  sc->interval_s = rd_num(&r, v, "versions.", "interval_s", 1, 0, 0, 1e6);
  sc->first_interval_s = rd_num(&r, v, "versions.", "first_interval_s", 0,
                                sc->interval_s, 0, 1e6);
  sc->change = rd_num(&r, v, "versions.", "change", 0, 0.01, 0, 1);
  sc->chunk_bytes =
      (uint64_t)rd_num(&r, v, "versions.", "chunk_bytes", 0, 0, 0, 32 << 20);
  /* At least a row of 1,024 BF16 weights a tensor (trajectory.c). */
  sc->tensors = (unsigned)rd_num(&r, v, "versions.", "tensors", 0, 0, 1,
                                 (double)(sc->version_bytes / 2048));
  json_t *ch = rd_obj(&r, root, "", "churn", 1);
  sc->leave_per_min = rd_num(&r, ch, "churn.", "leave_per_min", 1, 0, 0, 1e6);
  sc->join_per_min = rd_num(&r, ch, "churn.", "join_per_min", 1, 0, 0, 1e6);
  char mode[16];
  rd_str(&r, root, "", "mode", 1, mode, sizeof(mode), "p2p");
  if (!r.failed && strcmp(mode, "p2p") != 0 && strcmp(mode, "central") != 0)
    rd_fail(&r, "mode", "expected \"p2p\" or \"central\", not \"%s\"", mode);
  sc->central = strcmp(mode, "central") == 0;
  json_t *ce = rd_obj(&r, root, "", "central", sc->central);
  sc->central_mbps = rd_num(&r, ce, "central.", "mbps", sc->central, 0,
                            1e-3, 1e9);
  /* Central mode has no swarm to leave or join: a node there is one
   * download per version, and a joiner's first download (the whole
   * checkpoint, racing the next versions' deltas) is not modelled. */
  if (!r.failed && sc->central &&
      (sc->leave_per_min > 0 || sc->join_per_min > 0))
    rd_fail(&r, "churn", "simulated in p2p mode only, not with \"mode\": "
                         "\"central\"");
  char net[16];
  rd_str(&r, root, "", "network", 0, net, sizeof(net), "auto");
  if (!r.failed && strcmp(net, "flows") != 0 && strcmp(net, "queues") != 0 &&
      strcmp(net, "auto") != 0)
    rd_fail(&r, "network",
            "expected \"flows\", \"queues\" or \"auto\", not \"%s\"", net);
  sc->queues = strcmp(net, "queues") == 0;
  sc->time_limit_s = rd_num(&r, root, "", "time_limit_s", 1, 0, 1e-3, 1e7);
  sc->rng_seed = (uint64_t)rd_num(&r, root, "", "rng_seed", 0, 1, 0, 1e15);
  json_t *sw = rd_obj(&r, root, "", "swarm", 0);
  sc->max_peers = (unsigned)rd_num(&r, sw, "swarm.", "max_peers", 0, 0, 0, 256);
  sc->cross_region =
      (unsigned)rd_num(&r, sw, "swarm.", "cross_region", 0, 0, 0, 256);
  sc->pipeline = (unsigned)rd_num(&r, sw, "swarm.", "pipeline", 0, 0, 0, 64);
  read_faults(&r, root, sc);
  if (!r.failed && strcmp(net, "auto") == 0)
    pick_network(sc, path);
  /* The flows network has no way to hold a route's packets (a partition)
   * or stop a node's actor and start it again: faults run on the queues
   * network, and a file asking for them on flows is refused at run time
   * (sim.c), so that figures without the faults never pass for figures
   * with them. The bound, a lower one, still holds (--bounds). */
  if (!r.failed && sc->n_faults > 0 && !sc->queues)
    snprintf(sc->unsimulated, sizeof(sc->unsimulated),
             "%s: faults: simulated on the queues network only; add "
             "\"network\": \"queues\" (docs/simulator.md, Faults)", path);
  if (!r.failed) {
    int found = 0;
    for (size_t i = 0; i < sc->n_regions; i++)
      found |= strcmp(sc->regions[i].name, sc->seed_region) == 0;
    if (!found)
      rd_fail(&r, "seed.region", "no region is named \"%s\"",
              sc->seed_region);
  }
  json_decref(root);
  if (r.failed) {
    sim_scenario_free(sc);
    return -1;
  }
  return 0;
}

void sim_scenario_free(sim_scenario *sc) {
  for (unsigned i = 0; i < sc->n_faults; i++)
    free(sc->faults[i].nodes);
  sc->n_faults = 0;
  free(sc->regions);
  sc->regions = NULL;
  sc->n_regions = 0;
}

static double bps(double mbps) { return mbps * 1e6 / 8; }

/* Kumar-Ross: the seed must send F once (F/u_s), the slowest downlink must
 * take F (F/d_min), and N copies of F must be uploaded by someone
 * (N F / (u_s + sum u_i)). The region links add two more: F must cross
 * into every region without the seed through one link (F / C), and a
 * region's N_r copies can only come from its own nodes (and the seed if it
 * is there) plus what the link lets in: N_r F / (U_r [+ u_s] + C), the
 * link's term present only when there is another region to bring data. */
double sim_bound(const sim_scenario *sc, uint64_t f) {
  double F = (double)f, us = bps(sc->seed_up_mbps), sum_u = 0, dmin = INFINITY;
  double c = bps(sc->inter_mbps), t = F / us;
  for (size_t i = 0; i < sc->n_regions; i++) {
    const sim_region *g = &sc->regions[i];
    if (g->nodes == 0)
      continue;
    sum_u += g->nodes * bps(g->up_mbps);
    dmin = fmin(dmin, bps(g->down_mbps));
  }
  if (isfinite(dmin))
    t = fmax(t, F / dmin);
  t = fmax(t, sc->nodes * F / (us + sum_u));
  for (size_t i = 0; i < sc->n_regions && sc->n_regions > 1; i++) {
    const sim_region *g = &sc->regions[i];
    if (g->nodes == 0)
      continue;
    int has_seed = strcmp(g->name, sc->seed_region) == 0;
    double up = g->nodes * bps(g->up_mbps) + (has_seed ? us : 0);
    if (!has_seed)
      t = fmax(t, F / c);
    t = fmax(t, g->nodes * F / (up + c));
  }
  return t;
}

double sim_node_bound(const sim_scenario *sc, uint64_t f) {
  double dmax = 0;
  for (size_t i = 0; i < sc->n_regions; i++)
    if (sc->regions[i].nodes > 0)
      dmax = fmax(dmax, bps(sc->regions[i].down_mbps));
  double t = (double)f / bps(sc->seed_up_mbps);
  return dmax > 0 ? fmax(t, (double)f / dmax) : t;
}

/* The seed's region: one of SC's (sim_scenario_load checks), or NULL. */
static const sim_region *seed_region_of(const sim_scenario *sc) {
  for (size_t i = 0; i < sc->n_regions; i++)
    if (strcmp(sc->regions[i].name, sc->seed_region) == 0)
      return &sc->regions[i];
  return NULL;
}

double sim_route_ms(const sim_scenario *sc, const sim_region *a,
                    const sim_region *b) {
  return a == b ? a->latency_ms / 2 + b->latency_ms / 2
                : a->latency_ms / 2 + sc->inter_latency_ms + b->latency_ms / 2;
}

double sim_latency(const sim_scenario *sc) {
  const sim_region *s = seed_region_of(sc);
  double far = 0;
  for (size_t i = 0; i < sc->n_regions && s != NULL; i++)
    if (sc->regions[i].nodes > 0)
      far = fmax(far, sim_route_ms(sc, s, &sc->regions[i]));
  return far / 1e3;
}

/* ---- The budget reference (sim.h) ------------------------------------ */

/* Copies of a version that region G may take from outside its nodes: one
 * across (with two regions or more that have nodes), and the seed's
 * budget in the seed's region. */
static double outside_copies(const sim_scenario *sc, const sim_region *g) {
  size_t with_nodes = 0;
  for (size_t i = 0; i < sc->n_regions; i++)
    with_nodes += sc->regions[i].nodes > 0;
  return (with_nodes > 1 ? SIM_CROSS_BUDGET : 0) +
         (g == seed_region_of(sc) ? SIM_SEED_BUDGET : 0);
}

double sim_budget_bound(const sim_scenario *sc, uint64_t f) {
  double F = (double)f, sum_u = 0;
  double t = sim_bound(sc, f);
  for (size_t i = 0; i < sc->n_regions; i++)
    sum_u += sc->regions[i].nodes * bps(sc->regions[i].up_mbps);
  if (sum_u > 0)
    t = fmax(t, (sc->nodes * F - SIM_SEED_BUDGET * F) / sum_u);
  for (size_t i = 0; i < sc->n_regions; i++) {
    const sim_region *g = &sc->regions[i];
    double up = g->nodes * bps(g->up_mbps);
    double need = g->nodes * F - outside_copies(sc, g) * F;
    if (g->nodes > 0 && need > 0)
      t = fmax(t, up > 0 ? need / up : INFINITY);
  }
  return t;
}

static int by_relay_desc(const void *a, const void *b) {
  const double *x = a, *y = b; /* {relay, direct} pairs */
  return (x[0] < y[0]) - (x[0] > y[0]);
}

double sim_budget_latency(const sim_scenario *sc) {
  const sim_region *s = seed_region_of(sc);
  double(*e)[2] = calloc(sc->n_regions, sizeof(*e));
  if (s == NULL || e == NULL) { /* no seed region, or out of memory: L */
    free(e);
    return sim_latency(sc);
  }
  size_t n = 0;
  for (size_t i = 0; i < sc->n_regions; i++) {
    const sim_region *r = &sc->regions[i];
    if (r->nodes == 0)
      continue;
    /* Through a node of another region: the seed's route to it, then its
     * route to R. */
    double relay = INFINITY;
    for (size_t k = 0; k < sc->n_regions; k++)
      if (k != i && sc->regions[k].nodes > 0)
        relay = fmin(relay, sim_route_ms(sc, s, &sc->regions[k]) +
                                sim_route_ms(sc, &sc->regions[k], r));
    /* Each chunk comes into R once (and from the seed at most its budget,
     * in the seed's region): with more nodes than that feeds, the others
     * take it from a node of R. */
    double inside =
        r->nodes > outside_copies(sc, r) ? sim_route_ms(sc, r, r) : 0;
    e[n][0] = relay + inside;
    e[n][1] = sim_route_ms(sc, s, r) + inside;
    n++;
  }
  /* The seed's budget feeds floor(SIM_SEED_BUDGET) regions whole, best
   * those that would wait longest through another; every other region
   * takes some chunk through a relay. */
  qsort(e, n, sizeof(*e), by_relay_desc);
  double t = 0;
  for (size_t k = 0; k < n; k++)
    t = fmax(t, k < (size_t)SIM_SEED_BUDGET ? e[k][1] : e[k][0]);
  free(e);
  return fmax(t, sim_latency(sc) * 1e3) / 1e3;
}
