/* results.c: what a run of stitch-sim prints (docs/simulator.md
 * "Output"). It gathers each node's figures from the driver's state
 * (sim.c) into report.c's sim_result, adds what only the driver knows
 * (NAT, faults, loss), and answers --bounds, which simulates nothing. */
#include "driver.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tools/netlab's keys for its schema additions: "nat" (null without)
 * and "faults" (empty without), and what the run modelled of loss and
 * jitter. */
static void extras_json(const sim *s, json_t *o) {
  json_object_set_new(o, "faults", faults_json(s));
  json_object_set_new(o, "loss_recoveries",
                      json_integer((json_int_t)s->loss_recoveries));
  json_object_set_new(o, "loss_resent_bytes",
                      json_integer((json_int_t)s->loss_resent));
  json_object_set_new(o, "dials_reset",
                      json_integer((json_int_t)s->dials_unreach));
  if (s->n_nat == 0 || s->sc.central) {
    json_object_set_new(o, "nat", json_null());
    return;
  }
  json_t *x = json_object(), *ns = json_array();
  uint64_t mine = 0, all = 0, out = 0, refused = 0;
  double links_nat = 0, links_other = 0;
  unsigned hold = 0, nn = s->sc.nodes;
  for (unsigned i = 1; i <= nn; i++) {
    const node *n = &s->node[i];
    stitch_swarm_stats st;
    sim_node_stats(n, &st);
    all += st.bytes_up;
    refused += n->nat_refused;
    unsigned peers = n->sw != NULL ? st.peers : 0;
    if (n->nat) {
      json_array_append_new(ns, json_integer(i - 1)); /* netlab's number */
      mine += st.bytes_up;
      out += n->nat_out;
      links_nat += peers;
      hold += n->done[s->tr.count] >= 0;
    } else {
      links_other += peers;
    }
  }
  unsigned other = nn - s->n_nat;
  json_object_set_new(x, "nodes", ns);
  json_object_set_new(x, "node_share",
                      json_real(round(1e3 * s->n_nat / nn) / 1e3));
  json_object_set_new(x, "holding_last", json_integer(hold));
  json_object_set_new(x, "bytes_up", json_integer((json_int_t)mine));
  json_object_set_new(x, "nodes_bytes_up", json_integer((json_int_t)all));
  json_object_set_new(x, "upload_share",
                      all ? json_real(round(1e3 * (double)mine / (double)all)
                                      / 1e3)
                          : json_null());
  json_object_set_new(x, "peers_mean",
                      json_real(round(10 * links_nat / s->n_nat) / 10));
  json_object_set_new(x, "others_peers_mean",
                      other ? json_real(round(10 * links_other / other) / 10)
                            : json_null());
  json_object_set_new(x, "connections_out", json_integer((json_int_t)out));
  json_object_set_new(x, "inbound_refused", json_integer((json_int_t)refused));
  json_object_set_new(x, "inbound_accepted",
                      json_integer((json_int_t)s->nat_accepted));
  json_object_set_new(x, "punch", json_boolean(s->nat_punch));
  /* Hole punching as built (docs/swarm.md "Hole punching"), over every
   * node: asks sent to relays, punch dials, punched links made ready (one
   * per end), PUNCHes relayed, and connections two punch dials made. */
  stitch_swarm_stats sum;
  memset(&sum, 0, sizeof(sum));
  for (unsigned i = 0; i <= nn; i++) {
    stitch_swarm_stats st;
    sim_node_stats(&s->node[i], &st);
    sum.punch_asked += st.punch_asked;
    sum.punch_dialed += st.punch_dialed;
    sum.punch_linked += st.punch_linked;
    sum.punch_relayed += st.punch_relayed;
  }
  json_t *pu = json_object();
  json_object_set_new(pu, "asked", json_integer((json_int_t)sum.punch_asked));
  json_object_set_new(pu, "dialed", json_integer((json_int_t)sum.punch_dialed));
  json_object_set_new(pu, "linked", json_integer((json_int_t)sum.punch_linked));
  json_object_set_new(pu, "relayed",
                      json_integer((json_int_t)sum.punch_relayed));
  json_object_set_new(pu, "connections",
                      json_integer((json_int_t)s->punch_opened));
  json_object_set_new(x, "punches", pu);
  json_object_set_new(o, "nat", x);
}

int sim_run_report(sim *s, double wall_s, double rss_base, int as_json,
                  const char *plot_dir) {
  unsigned nv = s->tr.count, nn = s->sc.nodes, slots = s->ch.slots;
  double *done = sim_calloc((size_t)slots * (nv + 1), sizeof(*done));
  double *join_s = sim_calloc(slots, sizeof(*join_s));
  double *left_s = sim_calloc(slots, sizeof(*left_s));
  uint64_t *egress = sim_calloc(slots, sizeof(*egress));
  uint64_t *link_b = sim_calloc(slots, sizeof(*link_b));
  uint64_t *seed_b = sim_calloc(nv + 1, sizeof(*seed_b));
  uint64_t *cross_b = sim_calloc(nv + 1, sizeof(*cross_b));
  uint64_t *home_b = sim_calloc(nv + 1, sizeof(*home_b));
  double *bound = sim_calloc(nv + 1, sizeof(*bound));
  double *node_bound = sim_calloc(nv + 1, sizeof(*node_bound));
  double *budget_bound = sim_calloc(nv + 1, sizeof(*budget_bound));
  sim_links *links = sim_calloc(nv + 1, sizeof(*links));
  sim_result r = {0};
  r.mode = s->sc.central ? "central" : "p2p";
  r.network = s->sc.queues ? "queues" : "flows";
  for (unsigned i = 0; i < slots; i++) {
    node *n = &s->node[i];
    memcpy(&done[(size_t)i * (nv + 1)], n->done, (nv + 1) * sizeof(*done));
    join_s[i] = n->state == NODE_WAITING ? INFINITY : n->join_s;
    left_s[i] = n->left_s;
    egress[i] = n->wire_up;
    link_b[i] = s->sc.queues ? queue_link_bytes(s, (int)i) : 0;
    r.bad_writes += n->bad_writes;
    r.apply_errors += n->apply_errors;
    /* Over nodes alive at the end: one that left mid-fetch stored chunks
     * of an object it never applied. */
    if (i > 0 && n->state == NODE_LIVE) {
      r.chunks_needed += n->needed_n;
      r.chunks_stored += n->stored;
    }
    stitch_swarm_stats st;
    sim_node_stats(n, &st);
    r.verify_failures += st.verify_failures;
    if (i > 0)
      r.chunks_twice += st.chunks_twice;
    r.manifests_sent += st.manifests_forwarded;
    r.bans += st.bans;
  }
  for (unsigned v = 1; v <= nv; v++) {
    const snap *a = &s->at[v], *b = v < nv && s->published[v + 1] >= 0
                                        ? &s->at[v + 1]
                                        : &s->end;
    uint64_t f = s->tr.v[v].bytes;
    unsigned far = 0; /* nodes outside the seed's region */
    for (size_t g = 0; g < s->sc.n_regions; g++)
      if (strcmp(s->sc.regions[g].name, s->sc.seed_region) != 0)
        far += s->sc.regions[g].nodes;
    seed_b[v] = s->sc.central ? (uint64_t)nn * f : b->seed_up - a->seed_up;
    cross_b[v] = s->sc.central ? (uint64_t)far * f : b->cross - a->cross;
    home_b[v] = s->sc.central ? 0 : b->cross_home - a->cross_home;
    bound[v] = sim_bound(&s->sc, f);
    node_bound[v] = sim_node_bound(&s->sc, f);
    budget_bound[v] = sim_budget_bound(&s->sc, f);
    links[v] = a->links;
    if (s->published[v] < 0)
      s->published[v] = INFINITY;
  }
  r.nodes = nn;
  r.slots = slots;
  r.join_s = join_s;
  r.left_s = left_s;
  r.churn = s->ch.end_s > s->ch.start_s;
  r.nodes_left = s->nodes_left;
  r.nodes_joined = s->nodes_joined;
  r.versions = nv;
  r.v = s->tr.v;
  r.published = s->published;
  r.done = done;
  r.egress = egress;
  r.link_bytes = s->sc.queues ? link_b : NULL;
  r.seed_bytes = seed_b;
  r.cross_bytes = cross_b;
  r.cross_home_bytes = home_b;
  r.bound = bound;
  r.node_bound = node_bound;
  /* The budgets are the swarm's rules: a central store sends N F. */
  r.budget_bound = s->sc.central ? NULL : budget_bound;
  r.budget_latency_s = sim_budget_latency(&s->sc);
  r.links = links;
  r.latency_s = sim_latency(&s->sc);
  r.wall_s = wall_s;
  r.sim_s = s->end_s;
  r.finished = s->finished;
  r.rss_base_mib = rss_base;
  r.rss_peak_mib = sim_rss_mib("VmHWM:");
  int rc = 0;
  json_t *o = sim_report_json(&r, 0);
  extras_json(s, o);
  sim_busy_json(s, json_object_get(o, "versions"));
  if (as_json) {
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
    fputc('\n', stdout);
  } else {
    sim_report_text(&r, stdout);
  }
  json_decref(o);
  if (plot_dir != NULL) {
    o = sim_report_json(&r, 1);
    extras_json(s, o);
    rc = sim_plot(plot_dir, o);
    json_decref(o);
  }
  free(done);
  free(join_s);
  free(left_s);
  free(egress);
  free(link_b);
  free(seed_b);
  free(cross_b);
  free(home_b);
  free(bound);
  free(node_bound);
  free(budget_bound);
  free(links);
  return rc;
}

/* At most this many sizes after --bounds: a version count is at most 64
 * in a scenario, netlab's at most 10. */
#define BOUNDS_MAX 1024

/* --bounds LIST: version sizes in bytes, comma-separated, each 1 to 2^53
 * (what a JSON number holds exactly). Returns how many, or 0 on an error
 * (one line on stderr). */
static size_t parse_sizes(const char *list, uint64_t *out) {
  size_t n = 0;
  const char *p = list;
  for (;;) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(p, &end, 10);
    if (end == p || *p == '-' || errno != 0 || x == 0 ||
        x > (1ull << 53) || (*end != ',' && *end != 0) || n == BOUNDS_MAX) {
      fprintf(stderr, "stitch-sim: --bounds: expected 1 to %d sizes in "
                      "bytes, comma-separated, each 1 to 2^53: '%s'\n",
              BOUNDS_MAX, list);
      return 0;
    }
    out[n++] = (uint64_t)x;
    if (*end == 0)
      return n;
    p = end + 1;
  }
}

/* stitch-sim SCENARIO --bounds LIST: the references alone. A file with
 * NAT or faults is accepted here: the bound rests on link capacities,
 * which neither changes, and stays a lower bound with them. */
int sim_print_bounds(const char *path, const char *list) {
  static uint64_t sizes[BOUNDS_MAX];
  size_t n = parse_sizes(list, sizes);
  if (n == 0)
    return 2;
  sim_scenario sc;
  char err[512];
  if (sim_scenario_load(path, &sc, err, sizeof(err)) != 0)
    die(err);
  json_t *o = sim_bounds_json(&sc, sizes, n);
  json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
  fputc('\n', stdout);
  json_decref(o);
  sim_scenario_free(&sc);
  return ferror(stdout) ? 1 : 0;
}
