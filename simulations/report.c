/* report.c: the figures of a run (docs/simulator.md).
 *
 * Per version: completion times from publish (p50, p99, max over nodes;
 * null while some node never completed), the bound, their ratio, what the
 * seed sent and what crossed regions while that version was the newest.
 * Staleness: at each publish after the first, how many published versions
 * each node lacked.
 *
 * With churn (docs/simulator.md, Churn) a version's times are over the
 * nodes alive at its publish and still alive at the end: one that left
 * cannot complete, one that joined later is catching up (its catch-up time
 * is reported apart). Staleness at a publish is over the nodes alive at
 * it and at the publish before. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "sim.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

void sim_sort_times(double *t, size_t n) {
  qsort(t, n, sizeof(*t), cmp_double);
}

double sim_quantile(const double *t, size_t n, double q) {
  if (n == 0)
    return NAN;
  size_t k = (size_t)ceil(q * (double)n);
  k = k ? k - 1 : 0;
  return t[k < n ? k : n - 1];
}

static json_t *num_or_null(double x) {
  return isfinite(x) ? json_real(x) : json_null();
}

static double done_at(const sim_result *r, unsigned i, unsigned v) {
  return r->done[(size_t)i * (r->versions + 1) + v];
}

/* Node I counts for version V: alive at its publish and at the end. */
static int counted(const sim_result *r, unsigned i, unsigned v) {
  return isfinite(r->join_s[i]) && r->join_s[i] <= r->published[v] &&
         !isfinite(r->left_s[i]);
}

/* Completion times of version V over the nodes counted for it, sorted
 * into T (r->slots entries); returns how many. */
static size_t times_of(const sim_result *r, unsigned v, double *t) {
  size_t k = 0;
  for (unsigned i = 1; i < r->slots; i++) {
    if (!counted(r, i, v))
      continue;
    double d = done_at(r, i, v);
    t[k++] = d < 0 ? INFINITY : d - r->published[v];
  }
  sim_sort_times(t, k);
  return k;
}

/* Nodes that ever held version V, those that left since included. */
static unsigned held_by(const sim_result *r, unsigned v) {
  unsigned k = 0;
  for (unsigned i = 1; i < r->slots; i++)
    k += done_at(r, i, v) >= 0;
  return k;
}

/* Seconds from a joiner's join until it first held the newest version
 * published at that moment; INFINITY if it never did, NAN if it left
 * first (or never joined). */
static double catch_up(const sim_result *r, unsigned i) {
  if (!isfinite(r->join_s[i]))
    return NAN;
  for (unsigned v = 1; v <= r->versions; v++) {
    double d = done_at(r, i, v);
    /* published[versions + 1] is never: the last version stays newest. */
    double next = v < r->versions ? r->published[v + 1] : INFINITY;
    if (d >= 0 && !(next <= d))
      return d - r->join_s[i];
  }
  return isfinite(r->left_s[i]) ? NAN : INFINITY;
}

/* p99 over (node, publish) of the versions a node lacked at a publish. */
static double staleness_p99(const sim_result *r) {
  if (r->versions < 2)
    return 0;
  size_t n = (size_t)r->slots * (r->versions - 1), k = 0;
  double *lag = malloc((n ? n : 1) * sizeof(*lag));
  if (lag == NULL)
    return NAN;
  for (unsigned v = 2; v <= r->versions; v++)
    for (unsigned i = 1; i < r->slots; i++) {
      double at = r->published[v];
      /* Over nodes alive since the publish before: a joiner that had not
       * had a whole interval yet is catching up (reported apart). */
      if (!(r->join_s[i] <= r->published[v - 1] && r->left_s[i] > at))
        continue;
      unsigned held = 0;
      for (unsigned u = 1; u < v; u++) {
        double d = done_at(r, i, u);
        if (d >= 0 && d <= at)
          held = u;
      }
      lag[k++] = (double)(v - 1 - held);
    }
  sim_sort_times(lag, k);
  double q = sim_quantile(lag, k, 0.99);
  free(lag);
  return q;
}

/* The latency-aware reference: the bound plus the one-way latency from
 * the seed to the farthest node (docs/simulator.md, "The bound"). */
static double lb_of(double bound_s, double latency_s) {
  return bound_s + latency_s;
}

void *sim_bounds_json(const sim_scenario *sc, const uint64_t *bytes,
                      size_t n) {
  json_t *o = json_object(), *vs = json_array();
  double lat = sim_latency(sc), blat = sim_budget_latency(sc);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_object();
    double b = sim_bound(sc, bytes[i]);
    json_object_set_new(e, "version", json_integer((json_int_t)i + 1));
    json_object_set_new(e, "bytes", json_integer((json_int_t)bytes[i]));
    json_object_set_new(e, "bound_s", json_real(b));
    json_object_set_new(e, "node_bound_s",
                        json_real(sim_node_bound(sc, bytes[i])));
    json_object_set_new(e, "lb_s", json_real(lb_of(b, lat)));
    if (!sc->central) {
      double bb = sim_budget_bound(sc, bytes[i]);
      json_object_set_new(e, "budget_bound_s", json_real(bb));
      json_object_set_new(e, "budget_lb_s", json_real(lb_of(bb, blat)));
    }
    json_array_append_new(vs, e);
  }
  json_object_set_new(o, "nodes", json_integer(sc->nodes));
  json_object_set_new(o, "versions", vs);
  json_object_set_new(o, "latency_s", json_real(lat));
  if (!sc->central)
    json_object_set_new(o, "budget_latency_s", json_real(blat));
  return o;
}

void *sim_report_json(const sim_result *r, int per_node) {
  json_t *o = json_object(), *vs = json_array();
  double *t = malloc(r->slots * sizeof(*t));
  for (unsigned v = 1; t != NULL && v <= r->versions; v++) {
    size_t n = times_of(r, v, t);
    double mx = sim_quantile(t, n, 1.0);
    json_t *e = json_object();
    json_object_set_new(e, "version", json_integer((json_int_t)v));
    json_object_set_new(e, "published_s",
                        json_real(r->published[v] - r->published[1]));
    json_object_set_new(e, "bytes", json_integer((json_int_t)r->v[v].bytes));
    json_object_set_new(e, "chunks",
                        json_integer((json_int_t)r->v[v].chunks));
    /* What gossip spreads before any chunk: each node forwards it to
     * every neighbour but the one it came from (docs/swarm.md "Gossip"). */
    json_object_set_new(e, "manifest_bytes",
                        json_integer((json_int_t)r->v[v].manifest_len));
    json_object_set_new(e, "counted", json_integer((json_int_t)n));
    json_object_set_new(e, "held", json_integer((json_int_t)held_by(r, v)));
    json_object_set_new(e, "min_s", num_or_null(sim_quantile(t, n, 0)));
    json_object_set_new(e, "p50_s", num_or_null(sim_quantile(t, n, .5)));
    json_object_set_new(e, "p99_s", num_or_null(sim_quantile(t, n, .99)));
    json_object_set_new(e, "max_s", num_or_null(mx));
    json_object_set_new(e, "bound_s", json_real(r->bound[v]));
    json_object_set_new(e, "ratio", num_or_null(mx / r->bound[v]));
    json_object_set_new(e, "node_bound_s", json_real(r->node_bound[v]));
    /* The latency-aware reference (docs/simulator.md): what a
     * well-pipelined swarm can approach when bandwidth sets the time and
     * when latency does. */
    double lb = lb_of(r->bound[v], r->latency_s);
    json_object_set_new(e, "lb_s", json_real(lb));
    json_object_set_new(e, "lb_ratio", num_or_null(mx / lb));
    /* What is left of it to a swarm that keeps issue 36's budgets (sim.h
     * SIM_SEED_BUDGET): p2p mode only. */
    if (r->budget_bound != NULL) {
      double bl = lb_of(r->budget_bound[v], r->budget_latency_s);
      json_object_set_new(e, "budget_bound_s",
                          json_real(r->budget_bound[v]));
      json_object_set_new(e, "budget_lb_s", json_real(bl));
      json_object_set_new(e, "budget_lb_ratio", num_or_null(mx / bl));
    }
    json_object_set_new(e, "seed_bytes",
                        json_integer((json_int_t)r->seed_bytes[v]));
    json_object_set_new(e, "cross_region_bytes",
                        json_integer((json_int_t)r->cross_bytes[v]));
    json_object_set_new(e, "cross_into_seed_region_bytes",
                        json_integer((json_int_t)r->cross_home_bytes[v]));
    json_object_set_new(e, "own_region_links_min",
                        json_integer((json_int_t)r->links[v].min));
    json_object_set_new(e, "own_region_links_p50",
                        json_integer((json_int_t)r->links[v].p50));
    json_array_append_new(vs, e);
  }
  json_object_set_new(o, "mode", json_string(r->mode));
  json_object_set_new(o, "network", json_string(r->network));
  json_object_set_new(o, "nodes", json_integer(r->nodes));
  json_object_set_new(o, "versions", vs);
  json_object_set_new(o, "latency_s", json_real(r->latency_s));
  if (r->budget_bound != NULL)
    json_object_set_new(o, "budget_latency_s",
                        json_real(r->budget_latency_s));
  json_object_set_new(o, "completed", json_boolean(r->finished));
  /* Churn: who left and joined, and how long joiners took to catch up:
   * over those that did; those alive at the end that never did are
   * counted apart. */
  unsigned live = 0, live_last = 0, caught = 0, never = 0;
  for (unsigned i = 1; t != NULL && i < r->slots; i++) {
    int alive = isfinite(r->join_s[i]) && !isfinite(r->left_s[i]);
    live += alive;
    live_last += alive && done_at(r, i, r->versions) >= 0;
    double c = i > r->nodes ? catch_up(r, i) : NAN;
    if (isfinite(c))
      t[caught++] = c;
    never += isinf(c) != 0;
  }
  if (t != NULL)
    qsort(t, caught, sizeof(*t), cmp_double);
  json_object_set_new(o, "nodes_left", json_integer(r->nodes_left));
  json_object_set_new(o, "nodes_joined", json_integer(r->nodes_joined));
  json_object_set_new(o, "nodes_live", json_integer(live));
  json_object_set_new(o, "live_holding_last", json_integer(live_last));
  json_object_set_new(o, "catch_up_n", json_integer(caught));
  json_object_set_new(o, "catch_up_never", json_integer(never));
  json_object_set_new(o, "catch_up_p50_s",
                      num_or_null(t != NULL ? sim_quantile(t, caught, .5) : NAN));
  json_object_set_new(o, "catch_up_max_s",
                      num_or_null(t != NULL ? sim_quantile(t, caught, 1.0) : NAN));
  json_object_set_new(o, "staleness_p99_versions",
                      num_or_null(staleness_p99(r)));
  json_object_set_new(o, "verify_failures",
                      json_integer((json_int_t)r->verify_failures));
  json_object_set_new(o, "bad_writes", json_integer((json_int_t)r->bad_writes));
  json_object_set_new(o, "apply_errors",
                      json_integer((json_int_t)r->apply_errors));
  json_object_set_new(o, "bans", json_integer((json_int_t)r->bans));
  json_object_set_new(o, "chunks_needed",
                      json_integer((json_int_t)r->chunks_needed));
  json_object_set_new(o, "chunks_stored",
                      json_integer((json_int_t)r->chunks_stored));
  json_object_set_new(o, "chunks_twice",
                      json_integer((json_int_t)r->chunks_twice));
  json_object_set_new(o, "manifests_sent",
                      json_integer((json_int_t)r->manifests_sent));
  json_object_set_new(o, "sim_s", num_or_null(r->sim_s));
  json_object_set_new(o, "wall_s", num_or_null(r->wall_s));
  json_object_set_new(o, "rss_peak_mib", num_or_null(r->rss_peak_mib));
  json_object_set_new(o, "mem_per_node_kib",
                      num_or_null((r->rss_peak_mib - r->rss_base_mib) *
                                  1024 / (r->nodes + 1)));
  if (per_node) {
    json_t *done = json_array(), *eg = json_array(), *lb = json_array();
    json_t *js = json_array(), *ls = json_array();
    for (unsigned i = 0; i < r->slots; i++) {
      json_t *row = json_array();
      for (unsigned v = 1; v <= r->versions; v++) {
        double d = done_at(r, i, v);
        /* null: never, or not counted for V (the percentiles' nodes) */
        json_array_append_new(row, d < 0 || i == 0 || !counted(r, i, v)
                                       ? json_null()
                                       : json_real(d - r->published[v]));
      }
      json_array_append_new(done, row);
      json_array_append_new(eg, json_integer((json_int_t)r->egress[i]));
      if (r->link_bytes != NULL)
        json_array_append_new(lb,
                              json_integer((json_int_t)r->link_bytes[i]));
      json_array_append_new(js, num_or_null(r->join_s[i]));
      json_array_append_new(ls, num_or_null(r->left_s[i]));
    }
    json_object_set_new(o, "node_done_s", done);
    json_object_set_new(o, "node_egress_bytes", eg);
    if (r->link_bytes != NULL)
      json_object_set_new(o, "node_link_bytes", lb);
    else
      json_decref(lb);
    json_object_set_new(o, "node_join_s", js);
    json_object_set_new(o, "node_left_s", ls);
  }
  free(t);
  return o;
}

/* A number of E, NAN for null (printed "nan": never completed). */
static double num(const json_t *e, const char *key) {
  const json_t *v = json_object_get(e, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

void sim_report_text(const sim_result *r, FILE *f) {
  json_t *o = sim_report_json(r, 0);
  fprintf(f, "%s, %u nodes, %s in %.3f simulated s (%.1f s wall, %.0f KiB "
             "per node)\n",
          r->mode, r->nodes, r->finished ? "complete" : "INCOMPLETE",
          r->sim_s, r->wall_s,
          (r->rss_peak_mib - r->rss_base_mib) * 1024 / (r->nodes + 1));
  if (r->churn)
    fprintf(f, "churn: %u left, %u joined, %lld live at the end; joiners "
               "caught up in p50 %.3f s, max %.3f s (%lld did, %lld live "
               "never did)\n",
            r->nodes_left, r->nodes_joined,
            (long long)json_integer_value(json_object_get(o, "nodes_live")),
            num(o, "catch_up_p50_s"), num(o, "catch_up_max_s"),
            (long long)json_integer_value(json_object_get(o, "catch_up_n")),
            (long long)json_integer_value(
                json_object_get(o, "catch_up_never")));
  fprintf(f, "%8s %12s %7s %7s %9s %9s %9s %9s %7s %9s %8s %8s %12s %12s\n",
          "version", "bytes", "counted", "held", "p50_s", "p99_s", "max_s",
          "bound_s", "ratio", "lb_s", "lb_ratio", "budget", "seed_bytes",
          "cross_bytes");
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(o, "versions"), i, e) {
    char budget[16] = "-"; /* central mode has no budgets */
    if (json_object_get(e, "budget_lb_ratio") != NULL)
      snprintf(budget, sizeof(budget), "%.2f", num(e, "budget_lb_ratio"));
    fprintf(f, "%8lld %12lld %7lld %7lld %9.3f %9.3f %9.3f %9.4f %7.2f %9.4f "
               "%8.2f %8s %12lld %12lld\n",
            (long long)json_integer_value(json_object_get(e, "version")),
            (long long)json_integer_value(json_object_get(e, "bytes")),
            (long long)json_integer_value(json_object_get(e, "counted")),
            (long long)json_integer_value(json_object_get(e, "held")),
            num(e, "p50_s"), num(e, "p99_s"), num(e, "max_s"),
            num(e, "bound_s"), num(e, "ratio"), num(e, "lb_s"),
            num(e, "lb_ratio"), budget,
            (long long)json_integer_value(json_object_get(e, "seed_bytes")),
            (long long)json_integer_value(
                json_object_get(e, "cross_region_bytes")));
  }
  fprintf(f, "verify failures %llu, bad writes %llu, apply errors %llu, "
             "chunks stored %llu of %llu needed (%llu came twice)\n",
          (unsigned long long)r->verify_failures,
          (unsigned long long)r->bad_writes,
          (unsigned long long)r->apply_errors,
          (unsigned long long)r->chunks_stored,
          (unsigned long long)r->chunks_needed,
          (unsigned long long)r->chunks_twice);
  fprintf(f, "staleness p99 %.0f versions; latency seed to farthest node "
             "%.3f s (in lb_s, not in bound_s)",
          num(o, "staleness_p99_versions"), r->latency_s);
  if (r->budget_bound != NULL)
    fprintf(f, ", %.3f s under the budgets (in budget_lb_s; \"budget\" is "
               "max_s over it)",
            r->budget_latency_s);
  fputc('\n', f);
  json_decref(o);
}

/* ---- Process figures, plots ------------------------------------------ */

double sim_rss_mib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kib = 0;
  size_t n = strlen(field);
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, field, n) == 0)
      kib = atof(line + n + 1);
  if (f != NULL)
    fclose(f);
  return kib / 1024;
}

double sim_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int sim_plot(const char *dir, void *json) {
  char path[1024], cmd[2400];
  snprintf(path, sizeof(path), "%s/sim.json", dir);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "stitch-sim: cannot make %s: %s\n", dir, strerror(errno));
    return -1;
  }
  if (json_dump_file(json, path, JSON_COMPACT | JSON_REAL_PRECISION(8)) != 0) {
    fprintf(stderr, "stitch-sim: cannot write %s\n", path);
    return -1;
  }
  snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' '%s'", STITCH_SIM_PLOT, path,
           dir);
  return system(cmd) == 0 ? 0 : -1;
}

