/* test_plan.c: the catch-up planner on hand-built version graphs. */
#include "stitch.h"
#include "stitch/store.h"

#include "test.h"

#define MAXV 16

/* A graph of versions 1..n; each has up to 3 objects. */
typedef struct graph {
  stitch_manifest m[MAXV];
  stitch_object o[MAXV][3];
  stitch_vref v[MAXV];
  size_t n;
} graph;

static void id_of(uint64_t version, stitch_digest *id) {
  memset(id, 0, sizeof(*id));
  id->b[0] = (uint8_t)version;
  id->b[1] = 0xa5;
}

static void add_version(graph *g) {
  size_t i = g->n++;
  uint64_t v = i + 1;
  memset(&g->m[i], 0, sizeof(g->m[i]));
  g->m[i].version = v;
  g->m[i].parent_version = v - 1;
  g->m[i].objects = g->o[i];
  g->v[i].m = &g->m[i];
  id_of(v, &g->v[i].id);
}

static void add_obj(graph *g, uint64_t v, stitch_obj_kind kind, uint64_t base,
                    uint64_t bytes) {
  stitch_manifest *m = &g->m[v - 1];
  stitch_object *o = &g->o[v - 1][m->n_objects++];
  memset(o, 0, sizeof(*o));
  o->kind = kind;
  o->bytes = bytes;
  if (kind != STITCH_OBJ_ANCHOR) {
    o->base_version = base;
    id_of(base, &o->base_id);
  }
}

/* v1 anchor (1000), then deltas of 10 each; v5 also an anchor (1000) and
 * v4 a cumulative from v1 (25). */
static void chain(graph *g) {
  memset(g, 0, sizeof(*g));
  for (int i = 0; i < 8; i++)
    add_version(g);
  add_obj(g, 1, STITCH_OBJ_ANCHOR, 0, 1000);
  for (uint64_t v = 2; v <= 8; v++)
    add_obj(g, v, STITCH_OBJ_DELTA, v - 1, 10);
  add_obj(g, 5, STITCH_OBJ_ANCHOR, 0, 1000);
  add_obj(g, 4, STITCH_OBJ_CUMULATIVE, 1, 25);
}

static void test_paths(void) {
  graph g;
  chain(&g);
  stitch_plan p;
  stitch_diag d = {{0}};
  stitch_digest id;
  /* From nothing to 4: the anchor at 1 plus the cumulative (1025) beats
   * the anchor and three deltas (1030); to 8, the anchor at 5 wins. */
  ASSERT_OK(stitch_plan_path(g.v, g.n, 0, NULL, 4, &p, &d), d);
  ASSERT_UEQ(p.bytes, 1000 + 25);
  ASSERT_UEQ(p.n, 2);
  ASSERT_UEQ(p.step[0].version, 1);
  ASSERT_UEQ(p.step[1].version, 4);
  ASSERT_UEQ(g.o[3][p.step[1].object].kind, STITCH_OBJ_CUMULATIVE);
  ASSERT_OK(stitch_plan_path(g.v, g.n, 0, NULL, 8, &p, &d), d);
  ASSERT_UEQ(p.bytes, 1000 + 3 * 10);
  ASSERT_UEQ(p.step[0].version, 5);
  /* From 1: the cumulative (25) beats three deltas (30). */
  id_of(1, &id);
  ASSERT_OK(stitch_plan_path(g.v, g.n, 1, &id, 4, &p, &d), d);
  ASSERT_UEQ(p.bytes, 25);
  ASSERT_UEQ(p.n, 1);
  /* From 2: the chain of deltas. */
  id_of(2, &id);
  ASSERT_OK(stitch_plan_path(g.v, g.n, 2, &id, 8, &p, &d), d);
  ASSERT_UEQ(p.bytes, 60);
  ASSERT_UEQ(p.n, 6);
  for (size_t k = 0; k < p.n; k++)
    ASSERT_UEQ(p.step[k].version, 3 + k);
  /* At the target already: an empty plan. */
  id_of(8, &id);
  ASSERT_OK(stitch_plan_path(g.v, g.n, 8, &id, 8, &p, &d), d);
  ASSERT_UEQ(p.n, 0);
  /* When deltas are dear, the newest anchor wins. */
  for (uint64_t v = 2; v <= 8; v++)
    g.o[v - 1][0].bytes = 400;
  id_of(2, &id);
  ASSERT_OK(stitch_plan_path(g.v, g.n, 2, &id, 6, &p, &d), d);
  ASSERT_UEQ(p.bytes, 1000 + 400);
  ASSERT_UEQ(p.step[0].version, 5);
  ASSERT_UEQ(g.o[4][p.step[0].object].kind, STITCH_OBJ_ANCHOR);
}

static void test_refusals(void) {
  graph g;
  chain(&g);
  stitch_plan p;
  stitch_diag d = {{0}};
  stitch_digest id;
  /* Rollback: the target is older than what the node holds. */
  id_of(6, &id);
  ASSERT_EQ(stitch_plan_path(g.v, g.n, 6, &id, 3, &p, &d), STITCH_EROLLBACK);
  ASSERT(strstr(d.msg, "roll") != NULL);
  /* Fork: the node's version 3 is not the graph's version 3. */
  id_of(3, &id);
  id.b[5] ^= 1;
  ASSERT_EQ(stitch_plan_path(g.v, g.n, 3, &id, 8, &p, &d), STITCH_EROLLBACK);
  ASSERT(strstr(d.msg, "fork") != NULL);
  /* Gap: without version 3 and the anchor at 5, 2 cannot reach 6. */
  graph h;
  memset(&h, 0, sizeof(h));
  for (int i = 0; i < 6; i++)
    add_version(&h);
  add_obj(&h, 1, STITCH_OBJ_ANCHOR, 0, 1000);
  for (uint64_t v = 2; v <= 6; v++)
    add_obj(&h, v, STITCH_OBJ_DELTA, v - 1, 10);
  stitch_vref v[5] = {h.v[0], h.v[1], h.v[3], h.v[4], h.v[5]};
  id_of(2, &id);
  ASSERT_EQ(stitch_plan_path(v, 5, 2, &id, 6, &p, &d), STITCH_EGAP);
  ASSERT(strstr(d.msg, "version 3") != NULL);
  /* From nothing, the anchor reaches what lies before the gap. */
  ASSERT_OK(stitch_plan_path(v, 5, 0, NULL, 2, &p, &d), d);
  ASSERT_UEQ(p.bytes, 1010);
  ASSERT_EQ(stitch_plan_path(v, 5, 0, NULL, 6, &p, &d), STITCH_EGAP);
  ASSERT_EQ(stitch_plan_path(v, 5, 0, NULL, 3, &p, &d), STITCH_ENOTFOUND);
  /* A delta whose base id is not the held version's is no edge. */
  h.o[3][0].base_id.b[7] ^= 1; /* version 4's delta names another 3 */
  ASSERT_OK(stitch_plan_path(h.v, h.n, 0, NULL, 3, &p, &d), d);
  ASSERT_EQ(stitch_plan_path(h.v, h.n, 0, NULL, 4, &p, &d), STITCH_EGAP);
}

int main(void) {
  test_paths();
  test_refusals();
  printf("test_plan: ok\n");
  return 0;
}
