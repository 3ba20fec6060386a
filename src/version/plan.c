/* plan.c: the catch-up planner (docs/versions.md).
 *
 * Versions form a DAG: each object of version v is an edge from its base
 * (the parent for a delta, an older version for a cumulative delta,
 * nothing for an anchor) to v, weighted by the object's bytes. Edges only
 * go up, so one pass in version order finds the cheapest path from the
 * node's version to the target: fewest bytes, then fewest steps. */
#include "stitch/store.h"

#include "common/diag.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

typedef struct node {
  uint64_t bytes;
  size_t steps;
  size_t prev;  /* index into v; NONE: from the start */
  uint32_t obj; /* the object taken into this version */
  int reached;
} node;

static size_t find(const stitch_vref *v, size_t n, uint64_t version,
                   const stitch_digest *id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].m->version < version)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < n && v[lo].m->version == version &&
      (id == NULL || memcmp(v[lo].id.b, id->b, 32) == 0))
    return lo;
  return NONE;
}

static int better(uint64_t b, size_t s, const node *cur) {
  return !cur->reached || b < cur->bytes || (b == cur->bytes && s < cur->steps);
}

/* Names what is missing on the way to v[t], for the error message. */
static int explain_gap(const stitch_vref *v, size_t n, const node *nd,
                       uint64_t from, size_t t, stitch_diag *d) {
  const stitch_manifest *m = v[t].m;
  for (uint64_t o = 0; o < m->n_objects; o++) {
    const stitch_object *ob = &m->objects[o];
    size_t j = find(v, n, ob->base_version, &ob->base_id);
    if (j != NONE && nd[j].reached)
      continue;
    if (j == NONE && ob->base_version > from)
      return stitch_diag_set(d, STITCH_EGAP,
                             "no path to version %" PRIu64 ": it needs "
                             "version %" PRIu64 ", which is not held",
                             m->version, ob->base_version);
    if (j != NONE && ob->base_version > from)
      return explain_gap(v, n, nd, from, j, d);
  }
  return stitch_diag_set(d, STITCH_EGAP,
                         "no path from version %" PRIu64 " to %" PRIu64
                         ": no anchor and no delta from a version held",
                         from, m->version);
}

int stitch_plan_path(const stitch_vref *v, size_t n, uint64_t from,
                     const stitch_digest *from_id, uint64_t to,
                     stitch_plan *out, stitch_diag *d) {
  memset(out, 0, sizeof(*out));
  RETURN_IF(to < from, d, STITCH_EROLLBACK,
            "version %" PRIu64 " is older than the %" PRIu64
            " already held: refusing to roll back",
            to, from);
  if (from > 0 && find(v, n, from, NULL) != NONE &&
      find(v, n, from, from_id) == NONE)
    return stitch_diag_set(d, STITCH_EROLLBACK,
                           "version %" PRIu64 " is held here under another "
                           "id than the store's: a fork",
                           from);
  if (to == from)
    return 0;
  size_t t = find(v, n, to, NULL);
  RETURN_IF(t == NONE, d, STITCH_ENOTFOUND, "version %" PRIu64 " is not held",
            to);
  node *nd = calloc(n, sizeof(*nd));
  RETURN_IF(nd == NULL, d, STITCH_ENOMEM, "out of memory");
  for (size_t i = 0; i <= t; i++) {
    const stitch_manifest *m = v[i].m;
    if (m->version <= from)
      continue;
    for (uint32_t o = 0; o < m->n_objects; o++) {
      const stitch_object *ob = &m->objects[o];
      uint64_t b = ob->bytes;
      size_t s = 1, prev = NONE;
      if (ob->kind != STITCH_OBJ_ANCHOR) {
        if (from > 0 && ob->base_version == from &&
            memcmp(ob->base_id.b, from_id->b, 32) == 0) {
          /* from the node's own version */
        } else {
          size_t j = find(v, n, ob->base_version, &ob->base_id);
          if (j == NONE || !nd[j].reached || v[j].m->version <= from)
            continue;
          b += nd[j].bytes;
          s += nd[j].steps;
          prev = j;
        }
      }
      if (better(b, s, &nd[i]))
        nd[i] = (node){b, s, prev, o, 1};
    }
  }
  int rc = 0;
  if (!nd[t].reached)
    rc = explain_gap(v, n, nd, from, t, d);
  else if (nd[t].steps > STITCH_PLAN_MAX)
    rc = stitch_diag_set(d, STITCH_ELIMIT,
                         "the cheapest path to version %" PRIu64
                         " takes %zu steps (at most %d)",
                         to, nd[t].steps, STITCH_PLAN_MAX);
  if (rc == 0) {
    out->n = nd[t].steps;
    out->bytes = nd[t].bytes;
    size_t k = out->n;
    for (size_t i = t; k > 0; i = nd[i].prev) {
      k--;
      out->step[k].version = v[i].m->version;
      out->step[k].object = nd[i].obj;
      out->step[k].bytes = v[i].m->objects[nd[i].obj].bytes;
      if (nd[i].prev == NONE)
        break;
    }
  }
  free(nd);
  return rc;
}
