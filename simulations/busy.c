/* busy.c: where a version's upload went, per region (docs/simulator.md,
 * "Where the upload goes").
 *
 * The bound is set by the fleet's aggregate upload: a run at twice the
 * bound left half of the uplinks' seconds idle or spent on copies nobody
 * needed. For each version this keeps, per region, what the region's
 * nodes uploaded and took in from other regions from the publish to the
 * moment its last node held the version (the window), and reports the
 * upload against what the uplinks could have carried in it (`up_busy`),
 * with the region's completion times. The window is the version's own,
 * so a busy fraction of 1.0 is what the bound assumes. */
#include "driver.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One block per version of [region + 1] counters, the seed's last. */
typedef struct busy_snap {
  uint64_t up, in; /* bytes up; bytes taken in from other regions */
} busy_snap;

struct sim_busy {
  size_t nr;
  busy_snap *at, *done; /* [version * (nr + 1) + region] */
  double *done_s;       /* [version]: when its last node held it; <0 not */
  unsigned *left;       /* [version]: nodes still without it */
};

static busy_snap *row(busy_snap *b, const sim_busy *u, unsigned v) {
  return b + (size_t)v * (u->nr + 1);
}

static void sum_into(const sim *s, busy_snap *r) {
  size_t nr = s->sc.n_regions;
  memset(r, 0, (nr + 1) * sizeof(*r));
  for (int i = 0; i < s->n_node; i++) {
    stitch_swarm_stats st;
    sim_node_stats(&s->node[i], &st);
    busy_snap *b = i == 0 ? &r[nr] : &r[s->node[i].region];
    b->up += st.bytes_up;
    b->in += st.bytes_other_region;
  }
}

int sim_busy_init(sim *s) {
  sim_busy *u = calloc(1, sizeof(*u));
  size_t nv = s->tr.count + 1, nr = s->sc.n_regions;
  if (u == NULL)
    return -1;
  u->nr = nr;
  u->at = calloc(nv * (nr + 1), sizeof(*u->at));
  u->done = calloc(nv * (nr + 1), sizeof(*u->done));
  u->done_s = malloc(nv * sizeof(*u->done_s));
  u->left = calloc(nv, sizeof(*u->left));
  s->busy = u;
  if (u->at == NULL || u->done == NULL || u->done_s == NULL ||
      u->left == NULL)
    return -1;
  for (size_t v = 0; v < nv; v++)
    u->done_s[v] = -1;
  return 0;
}

void sim_busy_free(sim *s) {
  sim_busy *u = s->busy;
  if (u == NULL)
    return;
  free(u->at);
  free(u->done);
  free(u->done_s);
  free(u->left);
  free(u);
  s->busy = NULL;
}

void sim_busy_publish(sim *s, unsigned v) {
  sim_busy *u = s->busy;
  if (u == NULL || s->sc.central)
    return;
  sum_into(s, row(u->at, u, v));
  unsigned live = 0;
  for (int i = 1; i < s->n_node; i++)
    live += s->node[i].state == NODE_LIVE && s->node[i].done[v] < 0;
  u->left[v] = live;
}

void sim_busy_held(sim *s, const node *n, unsigned v) {
  sim_busy *u = s->busy;
  (void)n;
  if (u == NULL || s->sc.central || v > s->tr.count || u->done_s[v] >= 0 ||
      u->left[v] == 0 || s->published[v] < 0)
    return;
  if (--u->left[v] > 0)
    return;
  u->done_s[v] = s->net->now(s);
  sum_into(s, row(u->done, u, v));
}

/* Adds "up_busy" (the nodes', the seed left out), "seed_up_busy" and
 * "regions" to each of the report's versions (E, in order). */
void sim_busy_json(const sim *s, void *versions) {
  const sim_busy *u = s->busy;
  json_t *vs = versions;
  if (u == NULL || s->sc.central)
    return;
  size_t nr = u->nr;
  double *t = malloc((size_t)s->n_node * sizeof(*t));
  if (t == NULL)
    return;
  for (unsigned v = 1; v <= s->tr.count; v++) {
    json_t *e = json_array_get(vs, v - 1);
    if (e == NULL || u->done_s[v] < 0)
      continue;
    double w = u->done_s[v] - s->published[v];
    const busy_snap *a = row(u->at, u, v), *b = row(u->done, u, v);
    double all_b = 0, all_c = 0;
    json_t *rs = json_array();
    for (size_t r = 0; r < nr; r++) {
      const sim_region *g = &s->sc.regions[r];
      double cap = g->nodes * g->up_mbps * 1e6 / 8 * w;
      double up = (double)(b[r].up - a[r].up);
      all_b += up;
      all_c += cap;
      size_t k = 0;
      for (int i = 1; i < s->n_node; i++)
        if (s->node[i].region == (int)r && s->node[i].done[v] >= 0)
          t[k++] = s->node[i].done[v] - s->published[v];
      sim_sort_times(t, k);
      double p50 = sim_quantile(t, k, 0.5), mx = sim_quantile(t, k, 1.0);
      json_t *o = json_object();
      json_object_set_new(o, "name", json_string(g->name));
      json_object_set_new(o, "p50_s", isfinite(p50) ? json_real(p50)
                                                    : json_null());
      json_object_set_new(o, "max_s", isfinite(mx) ? json_real(mx)
                                                   : json_null());
      json_object_set_new(o, "up_busy", json_real(cap > 0 ? up / cap : 0));
      json_object_set_new(o, "up_bytes", json_integer((json_int_t)up));
      json_object_set_new(o, "cross_in_bytes",
                          json_integer((json_int_t)(b[r].in - a[r].in)));
      json_array_append_new(rs, o);
    }
    double seed_cap = s->sc.seed_up_mbps * 1e6 / 8 * w;
    json_object_set_new(e, "window_s", json_real(w));
    json_object_set_new(e, "up_busy",
                        json_real(all_c > 0 ? all_b / all_c : 0));
    json_object_set_new(
        e, "seed_up_busy",
        json_real(seed_cap > 0 ? (double)(b[nr].up - a[nr].up) / seed_cap
                               : 0));
    json_object_set_new(e, "regions", rs);
  }
  free(t);
}
