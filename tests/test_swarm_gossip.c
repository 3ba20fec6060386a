/* test_swarm_gossip.c: how manifests spread (src/swarm/gossip.c, docs/swarm.md
 * "Gossip"), driven in memory (swarm_fixture.h): a large manifest goes to
 * the neighbours in turn rather than to all at once, announcements that
 * come before their manifest are kept and counted once it comes, and a
 * peer's announcements are bounded and charged when they name nothing. */
#include "swarm_fixture.h"
#include "swarm/core_internal.h"

/* ---- A large manifest, in turn ---------------------------------------- */

/* Copies of the lazy versions' manifests the nodes sent, against what a
 * flood sends: every node's ready links but the one it came in on. */
typedef struct gossip_count {
  uint64_t sent, flood, lazy_nodes, nodes;
} gossip_count;

static void count_gossip(const sn_net *net, gossip_count *g) {
  memset(g, 0, sizeof(*g));
  for (int i = 0; i < net->n_nodes; i++) {
    const sn_node *n = &net->node[i];
    if (!honest_node(n))
      continue;
    const stitch_swarm *s = n->sw;
    size_t ready = 0;
    for (size_t k = 0; k < s->n_peers; k++)
      ready += s->peers[k].state == PEER_READY;
    unsigned lazy = 0;
    for (size_t k = 0; k < s->n_v; k++)
      lazy += s->v[k].lazy;
    g->nodes++;
    g->lazy_nodes += lazy > 0;
    g->flood += s->n_v * (ready - 1);
    g->sent += s->st.manifests_forwarded;
    for (size_t k = 0; k < s->n_peers; k++) /* nothing left waiting */
      ASSERT_UEQ(s->peers[k].n_pend, 0);
  }
}

/* 16 nodes, versions 2 to 4 after an anchor: the deltas' manifests
 * (about 6 KB for 65 tensors, against deltas of a few tens of KB) go in
 * turn. Every node gets every version bit for bit, no peer is dropped,
 * and the nodes send fewer copies than a flood would. */
static void scenario_lazy(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 16);
  for (int i = 0; i < net.n_nodes; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  for (uint64_t v = 1; v <= 4; v++) {
    publish(&net, seed, v);
    run_until_all_at(&net, v);
  }
  sn_run(&net, net.now + 1000, NULL, NULL);
  check_all_exact(&net, 4);
  gossip_count g;
  count_gossip(&net, &g);
  uint64_t bans = 0;
  for (int i = 0; i < net.n_nodes; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    bans += st.bans;
  }
  printf("lazy manifests: %" PRIu64 " of %" PRIu64 " nodes sent some in "
         "turn; the nodes sent %" PRIu64 " copies of the versions' "
         "manifests where a flood sends %" PRIu64
         "; bans %" PRIu64 "\n",
         g.lazy_nodes, g.nodes, g.sent, g.flood, bans);
  CHECK_NET(&net, g.lazy_nodes == g.nodes); /* the case is exercised */
  CHECK_NET(&net, g.sent < g.flood * 3 / 4);
  CHECK_NET(&net, bans == 0);
  sn_free(&net);
}

/* ---- Announcements before their manifest ------------------------------ */

/* The victim's link to the node whose key is K. */
static peer *link_of(sn_node *victim, const stitch_pubkey *k) {
  stitch_swarm *s = victim->sw;
  for (size_t i = 0; i < s->n_peers; i++)
    if (s->peers[i].state == PEER_READY &&
        memcmp(s->peers[i].node.b, k->b, sizeof(k->b)) == 0)
      return &s->peers[i];
  return NULL;
}

static void put_have(dbuf *out, wire_type t, uint64_t version, uint64_t chunk,
                     uint64_t nbits, const uint8_t *field) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  m->type = t;
  m->version = version;
  m->chunk = chunk;
  m->nbits = nbits;
  m->data = field;
  m->data_len = field ? (size_t)(nbits + 7) / 8 : 0;
  ASSERT_EQ(wire_encode(out, m), 0);
  free(m);
}

/* The seed and two nodes, all at v1, and an evil node not yet started
 * (*EVIL). */
static void at_v1(sn_net *net, sn_node **evil) {
  sn_node *seed = build(net, &default_params, 2);
  *evil = sn_add(net, "eu", 0, 0);
  for (int i = 0; i <= 2; i++)
    i == 0 ? sn_start(net, seed, NULL, 0) : start_node(net, &net->node[i]);
  sn_run(net, 50, NULL, NULL);
  publish(net, seed, 1);
  run_until_all_at(net, 1);
}

/* EVIL starts, links to VICTIM, and sends FRAMES once, beside its
 * core's own. */
static void send_once(sn_net *net, sn_node *evil, sn_node *victim,
                      const dbuf *frames) {
  evil->evil = SN_EVIL_REPEAT;
  evil->evil_buf = frames->p;
  evil->evil_len = frames->len;
  evil->evil_every = 1000000; /* longer than any run */
  sn_start(net, evil, NULL, 0);
  sn_link(net, evil, victim);
}

/* A node with v1, an evil neighbour that sends once: a BITFIELD of each
 * of versions 1001 to 1005 (none exists), a HAVE of 1001 after its
 * BITFIELD, and a HAVE of 1006 with none before it. The first four
 * BITFIELDs are kept (CORE_PENDING_MAX), with the chunks they and the
 * HAVE name; the fifth and the lone HAVE are charged at once; the four
 * are charged once, and let go, when CORE_PENDING_MS pass and no
 * manifest came. */
static void scenario_pending(void) {
  sn_net net;
  sn_node *evil;
  at_v1(&net, &evil);
  uint8_t field[2] = {0x08, 0}; /* chunk 3 */
  dbuf frames = {0};
  frames.max = SIZE_MAX / 2;
  for (uint64_t v = 1001; v <= 1005; v++) {
    put_have(&frames, WIRE_BITFIELD, v, 0, 16, field);
    if (v == 1001)
      put_have(&frames, WIRE_HAVE, v, 5, 0, NULL);
  }
  put_have(&frames, WIRE_HAVE, 1006, 0, 0, NULL);
  sn_node *victim = &net.node[1];
  send_once(&net, evil, victim, &frames);
  sn_run(&net, net.now + 200, NULL, NULL);
  peer *p = link_of(victim, &evil->cfg.node_pk);
  CHECK_NET(&net, p != NULL);
  unsigned kept = p->n_pend, charged = p->sc.n[SCORE_NO_VERSION];
  int named = p->pend[0].version == 1001 && p->pend[0].n_idx == 2 &&
              p->pend[0].idx[0] == 3 && p->pend[0].idx[1] == 5;
  sn_run(&net, net.now + CORE_PENDING_MS + 1000, NULL, NULL);
  p = link_of(victim, &evil->cfg.node_pk);
  CHECK_NET(&net, p != NULL); /* -3 is far from a drop */
  printf("announcements of versions that do not exist: %u kept, %u charged "
         "at once, chunks 3 and 5 of v1001 noted: %s; after %d ms %u kept, "
         "%u charged in all\n",
         kept, charged, named ? "yes" : "no", CORE_PENDING_MS, p->n_pend,
         p->sc.n[SCORE_NO_VERSION]);
  CHECK_NET(&net, kept == CORE_PENDING_MAX);
  CHECK_NET(&net, charged == 2);
  CHECK_NET(&net, named);
  CHECK_NET(&net, p->n_pend == 0 && p->pending_ms == 0);
  CHECK_NET(&net, p->sc.n[SCORE_NO_VERSION] == 3);
  dbuf_free(&frames);
  sn_free(&net);
}

/* An evil neighbour announces version 2 before it is published: with
 * the chunk count of v2's delta (FIT), or one more. Once v2's manifest
 * comes, the victim counts the first (the evil node is a holder of chunk
 * 0 as far as it knows) and drops and bans the sender of the second.
 * Everyone ends at v2, bit for bit. */
static void announce_v2(int fit) {
  sn_net net;
  sn_node *evil;
  at_v1(&net, &evil);
  uint64_t n = ver[2].m->objects[0].n_chunks + (fit ? 0 : 1);
  uint8_t *field = calloc((size_t)(n + 7) / 8, 1);
  ASSERT(field != NULL);
  field[0] = 1; /* chunk 0 */
  dbuf frames = {0};
  frames.max = SIZE_MAX / 2;
  put_have(&frames, WIRE_BITFIELD, 2, 0, n, field);
  sn_node *victim = &net.node[1];
  send_once(&net, evil, victim, &frames);
  size_t link = net.n_conn - 1;
  sn_run(&net, net.now + 200, NULL, NULL);
  peer *p = link_of(victim, &evil->cfg.node_pk);
  CHECK_NET(&net, p != NULL && p->n_pend == 1);
  publish(&net, &net.node[0], 2);
  /* Right after the manifest reached the victim: the entry was counted,
   * or the link dropped. */
  int adopted = -1;
  for (uint64_t t = net.now; t < net.now + 2000 && adopted < 0;) {
    sn_run(&net, ++t, NULL, NULL);
    const stitch_vref *vr;
    size_t nv = stitch_swarm_versions(victim->sw, &vr);
    if (nv < 2 || vr[nv - 1].m->version != 2)
      continue;
    p = link_of(victim, &evil->cfg.node_pk);
    const bits *b = p ? peer_bits(p, 2, 0, 0, 0) : NULL;
    adopted = b != NULL && bits_get(b, 0) && p->n_pend == 0;
  }
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  stitch_swarm_stats vs;
  sn_stats(victim, &vs);
  const sn_conn *c = &net.conn[link];
  printf("v2 announced with %s chunk count before its manifest: counted "
         "at the manifest: %s; the link %s; victim bans %" PRIu64 "\n",
         fit ? "its" : "a wrong", adopted == 1 ? "yes" : "no",
         c->closed_by == victim->idx ? "dropped by the victim" : "kept",
         vs.bans);
  if (fit) {
    CHECK_NET(&net, adopted == 1);
    CHECK_NET(&net, c->closed_by != victim->idx);
  } else {
    CHECK_NET(&net, adopted == 0);
    CHECK_NET(&net, c->closed_by == victim->idx && vs.bans >= 1);
  }
  free(field);
  dbuf_free(&frames);
  sn_free(&net);
}

static void scenario_adopt(void) { announce_v2(1); }
static void scenario_adopt_bad(void) { announce_v2(0); }

static const sw_scenario scenarios[] = {
    {"lazy", scenario_lazy},
    {"pending", scenario_pending},
    {"adopt", scenario_adopt},
    {"adopt_bad", scenario_adopt_bad},
};

int main(void) {
  return sw_main("test_swarm_gossip", scenarios,
                 sizeof(scenarios) / sizeof(scenarios[0]));
}
