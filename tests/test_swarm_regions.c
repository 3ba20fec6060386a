/* test_swarm_regions.c: the swarm core across regions, driven in memory
 * (swarm_fixture.h): each chunk crosses into a region about once (turns,
 * CROSSING, BID, passes and lies about them), who links to whom (room for
 * a region's own dialers, links across on top), and
 * what the seed gives to nodes that reach every region. */
#include "swarm_fixture.h"
#include "swarm/cross.h" /* CORE_CROSS_TRUST_MS */
#include "swarm/fetch.h" /* CORE_PUSH_SMALL_CHUNKS */

/* ---- Crossing into a region ------------------------------------------- */

/* The seed and 2 nodes in "eu", 12 nodes in "us", each of which is told
 * of a node of "eu" and of the "us" node before it: every "us" node can
 * fetch across, and they learn of each chunk at about the same time. Each
 * chunk should still cross into "us" about once (cross.c cross_ok, the
 * CROSSING message), and spread inside. Without the rule every "us" node
 * fetched its own copy across: 12 times the bytes. With DEAF_BIDS every
 * node drops the BIDs that reach it. */
static void build_regions(sn_net *net, const sn_params *q, int deaf_bids) {
  sn_node *seed = build(net, q, 0);
  for (int i = 1; i <= 14; i++)
    sn_add(net, i <= 2 ? "eu" : "us", 0, 1)->deaf_bids = deaf_bids;
  sn_start(net, seed, NULL, 0);
  for (int i = 1; i <= 14; i++) {
    int peers[2] = {i <= 2 ? 0 : 1 + i % 2, i - 1};
    sn_start(net, &net->node[i], peers, i == 1 ? 1 : 2);
  }
  sn_run(net, 50, NULL, NULL);
}

/* What crossed into "us" from "eu" over what it needed (the seed gives
 * "us" some chunks itself), for version 1 of the regions swarm built with
 * test seed SEED_NO and slow links inside regions; BIDS counts the BID
 * frames its "us" nodes got. */
static double regions_across(uint64_t seed_no, int deaf_bids, uint64_t *bids) {
  sn_net net;
  uint64_t saved = test_seed;
  test_seed = seed_no;
  sn_params q = default_params;
  q.bw_local = 500; /* a CROSSING waits behind a chunk at every hop */
  build_regions(&net, &q, deaf_bids);
  test_seed = saved;
  publish(&net, &net.node[0], 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  uint64_t across = 0;
  for (int i = 3; i <= 14; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    across += st.bytes_other_region;
    *bids += net.node[i].rx_frames[WIRE_BID];
  }
  double x = (double)across / (double)needed_bytes(&net, 1);
  sn_free(&net);
  return x;
}

/* That swarm with and without BIDs (cross.c bid: a node that first sees
 * a far copy bids for the turn, and a higher rank waits for a lower
 * one's; without, every node drops the BIDs that reach it). Along the
 * chain of "us", over links of 500 B/ms, a CROSSING waits behind a chunk
 * at every hop. Here the turns' 15 ms, "eu"'s two nodes answering a
 * second asker with a CROSSING (coming_into) and telling their "us"
 * neighbours of each chunk they pass across (pass_to) leave bids little
 * to do: means of four runs, test seeds 1 to 10, 1.005-1.032 times v1
 * without them, 0.988-1.014 with (below 1: the seed gives "us" some
 * chunks itself). On the simulator, where a
 * hop waits behind a 400 KB chunk and a region has 40 nodes or more,
 * they take most of the excess away (docs/swarm.md "Bids"). */
static void scenario_bids(void) {
  double with = 0, without = 0;
  uint64_t bids = 0, dropped = 0;
  printf("bids: crossed into \"us\", times v1, with BIDs / without:");
  for (uint64_t k = 0; k < 4; k++) {
    double a = regions_across(test_seed + k, 0, &bids),
           b = regions_across(test_seed + k, 1, &dropped);
    printf(" %.3f/%.3f", a, b);
    with += a;
    without += b;
  }
  printf("; means %.3f / %.3f; %" PRIu64 " BID frames heard (%" PRIu64
         " dropped)\n", with / 4, without / 4, bids, dropped);
  ASSERT(bids > 0 && dropped > 0);
  ASSERT_DBL_LE(with, without);
}

static void scenario_regions(void) {
  sn_net net;
  build_regions(&net, &default_params, 0);
  sn_node *seed = &net.node[0];
  for (uint64_t v = 1; v <= 2; v++) {
    publish(&net, seed, v);
    run_until_all_at(&net, v);
  }
  check_all_exact(&net, 2);
  uint64_t across = 0, down = 0, crossing = 0;
  for (int i = 3; i <= 14; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    across += st.bytes_other_region;
    down += st.bytes_down;
    crossing += net.node[i].rx_frames[WIRE_CROSSING];
  }
  uint64_t need = needed_bytes(&net, 2);
  printf("regions: 12 nodes of \"us\" at v2 bit-exact; %" PRIu64
         " B crossed into \"us\" = %.2fx the %" PRIu64
         " B needed (one copy each: 12x); %.2fx came from inside; %" PRIu64
         " CROSSING frames\n",
         across, (double)across / (double)need, need,
         (double)(down - across) / (double)need, crossing);
  CHECK_NET(&net, crossing > 0);
  /* At most 1.1 copies: 1.01-1.04 over test seeds 1 to 20. Before a pass
   * across was told to the passer's other neighbours of that region
   * (cross.c pass_to), 1.20-1.22 (test seeds 1 to 4): a "us" node's turn
   * to cross came before the CROSSING of the node passed the chunk
   * reached it through "us". */
  CHECK_NET(&net, across * 10 <= need * 11);
  sn_free(&net);
}

/* Six nodes of the seed's region ("eu"), each linked to the seed and the
 * one before it, and six of "us", each linked to two of "eu" and to the
 * "us" node before it, over slow far links (300 B/ms, 80 ms), so that an
 * "eu" node often has requests of "us" queued when the seed gives it a
 * chunk and passes that chunk later (cross.c cross_pass_more). What "eu" sends
 * into "us" is counted at the senders, second copies included. Passing
 * later whichever chunk the seed gave that the far neighbour still seemed
 * to lack sent 1.49-1.57 times v1 (test seeds 1 to 8; 1.48-1.52 over
 * seeds 1 to 4 once coming_into was in); passing the last one only,
 * 1.08-1.15 times. */
static void scenario_pass_fresh(void) {
  sn_net net;
  sn_params p = default_params;
  p.bw_remote = 300;
  p.lat_remote = 80;
  sn_node *seed = build(&net, &p, 0);
  for (int i = 1; i <= 12; i++)
    sn_add(&net, i <= 6 ? "eu" : "us", 0, 1);
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= 12; i++) {
    int peers[3], n = 0;
    if (i <= 6) {
      peers[n++] = 0;
      if (i > 1)
        peers[n++] = i - 1;
    } else {
      peers[n++] = i - 6;
      peers[n++] = (i - 6) % 6 + 1;
      if (i > 7)
        peers[n++] = i - 1;
    }
    sn_start(&net, &net.node[i], peers, n);
  }
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  uint64_t sent = 0;
  for (int i = 1; i <= 6; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    sent += st.bytes_to_other_region;
  }
  uint64_t need = needed_bytes(&net, 1);
  printf("passing the last chunk: \"eu\" sent %" PRIu64
         " B into \"us\" = %.2fx the %" PRIu64 " B of v1\n",
         sent, (double)sent / (double)need, need);
  CHECK_NET(&net, sent * 10 <= need * 13); /* at most 1.3 copies */
  sn_free(&net);
}

/* One node of the seed's region ("eu") and six of "us", each linked to
 * it and to the "us" node before it, over slow far links (300 B/ms, 80
 * ms): every "us" node sees the "eu" node's HAVEs at once, and several
 * ask it for the same chunk within a few ms. It should send each chunk
 * into "us" about once (cross.c coming_into): a later asker is told the
 * chunk is on its way through another node. Returns what was sent into
 * "us" (by the "eu" node and the seed, second copies included) over the
 * bytes of v1, for the swarm built with test seed SEED. */
static double one_way_in(uint64_t seed_no) {
  sn_net net;
  sn_params p = default_params;
  p.bw_remote = 300;
  p.lat_remote = 80;
  uint64_t saved = test_seed;
  test_seed = seed_no;
  sn_node *seed = build(&net, &p, 0);
  test_seed = saved;
  sn_node *in = sn_add(&net, "eu", 0, 1);
  for (int i = 2; i <= 7; i++)
    sn_add(&net, "us", 0, 1);
  sn_start(&net, seed, NULL, 0);
  int to_seed[1] = {0};
  sn_start(&net, in, to_seed, 1);
  for (int i = 2; i <= 7; i++) {
    int peers[2] = {1, i - 1};
    sn_start(&net, &net.node[i], peers, i == 2 ? 1 : 2);
  }
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  stitch_swarm_stats st, ss;
  sn_stats(in, &st);
  sn_stats(seed, &ss);
  double x = (double)(st.bytes_to_other_region + ss.bytes_to_other_region) /
             (double)needed_bytes(&net, 1);
  sn_free(&net);
  return x;
}

/* Over 61 test seeds one run sent 1.00 to 1.10 times v1 into "us" (mean
 * 1.035, sd 0.018), and 1.07 to 1.14 (mean 1.108, sd 0.014) when the "eu"
 * node sent whatever was asked: so the mean of four runs is checked. */
static void scenario_one_way_in(void) {
  double sum = 0;
  printf("one way in: sent into \"us\", times v1:");
  for (uint64_t k = 0; k < 4; k++) {
    double x = one_way_in(test_seed + k);
    printf(" %.3f", x);
    sum += x;
  }
  printf("; mean %.3f (at most 1.07)\n", sum / 4);
  ASSERT(sum / 4 <= 1.07);
}

/* Builds the liar's swarm (not_me, pass_lie) with the liar behaving as
 * EVIL, publishes version 1, and returns how many ms after publish every
 * "us" node held it, bit-exact; *CROSSINGS counts the CROSSING frames
 * into "us", *LIES those of them the liar's rewriter made. */
static uint64_t past_liar(sn_evil evil, uint64_t *crossings,
                          uint64_t *lies) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *liar = sn_add(&net, "eu", 0, 1);
  sn_add(&net, "eu", 0, 1);
  for (int i = 3; i <= 6; i++)
    sn_add(&net, "us", 0, 1);
  liar->evil = evil;
  sn_start(&net, seed, NULL, 0);
  int to_seed[1] = {0};
  sn_start(&net, liar, to_seed, 1);
  sn_start(&net, &net.node[2], to_seed, 1);
  for (int i = 3; i <= 6; i++) {
    int peers[3] = {1, 2, i - 1};
    sn_start(&net, &net.node[i], peers, i == 3 ? 2 : 3);
  }
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  *crossings = 0;
  for (int i = 3; i <= 6; i++) {
    check_exact(&net, &net.node[i], 1);
    *crossings += net.node[i].rx_frames[WIRE_CROSSING];
  }
  uint64_t took = net.now - publish_ms[1];
  *lies = liar->lies;
  sn_free(&net);
  return took;
}

/* Two nodes of the seed's region ("eu"), one of which answers every
 * request from "us" with a CROSSING naming a node that does not exist
 * (cross.c cross_on_crossing), and four of "us" linked to both and to the
 * "us" node before them. A far CROSSING counts as a REJECT and holds a
 * chunk back at most CORE_COMING_WAIT_MS, once, so "us" takes v1 from the
 * honest one about as soon: 1.2 s after publish against 0.8 s with two
 * honest nodes (test seeds 1 to 3). A liar that held each request for the
 * full CORE_REQUEST_MS would take 15 s or more. */
static void scenario_not_me(void) {
  uint64_t crossings, lies;
  uint64_t took = past_liar(SN_EVIL_NOT_ME, &crossings, &lies);
  printf("not me: \"us\" at v1 bit-exact %" PRIu64 " ms after publish past a "
         "node answering every request with a CROSSING; %" PRIu64
         " CROSSING frames into \"us\"\n",
         took, crossings);
  ASSERT(took <= 3000);
}

/* As not_me, but the liar tells "us" of each chunk it holds with a
 * CROSSING naming the receiver (the notice of a pass, cross.c pass_to)
 * instead of a HAVE, tells it again of an earlier chunk, and never sends
 * either. Each "us" node tells its region the chunk is coming, once per
 * chunk (cross_on_crossing, tell_entering), so the liar can hold each
 * chunk back from turns at most CORE_CROSS_TRUST_MS (3 s); the honest
 * node's passes and the seed bring the chunks in meanwhile. "us" held v1
 * 893 ms after publish (test seed 5707716; not_me's liar 899), with 1,698
 * CROSSING frames between its nodes against 1,190 with no liar. */
static void scenario_pass_lie(void) {
  uint64_t crossings, lies, near, none;
  uint64_t took = past_liar(SN_EVIL_PASS_LIE, &crossings, &lies);
  past_liar(SN_HONEST, &near, &none);
  printf("pass lie: \"us\" at v1 bit-exact %" PRIu64 " ms after publish "
         "past a node announcing a pass of every chunk it holds, twice, and "
         "sending none; %" PRIu64 " CROSSING frames inside \"us\" (%" PRIu64
         " with no liar)\n", took, crossings - lies, near);
  ASSERT(took <= 3000 + 2000);
  ASSERT(crossings - lies <= 2 * near);
}

/* As pass_lie, but each HAVE the liar would send "us" is a CROSSING
 * naming a made-up node of "us": the notice that it passes the chunk into
 * "us" through another node (cross.c pass_to), which never comes. Each
 * "us" node holds its turn for that chunk back for its told_wait (at
 * least CORE_COMING_WAIT_MS, at most CORE_CROSS_TRUST_MS), once, and
 * passes nothing on; the honest node's passes and the seed bring the
 * chunks in meanwhile. */
static void scenario_told_lie(void) {
  uint64_t crossings, lies, near, none;
  uint64_t took = past_liar(SN_EVIL_TOLD_LIE, &crossings, &lies);
  uint64_t honest = past_liar(SN_HONEST, &near, &none);
  printf("told lie: \"us\" at v1 bit-exact %" PRIu64 " ms after publish "
         "(%" PRIu64 " with no liar) past a node announcing a pass of every "
         "chunk it holds through a made-up node; %" PRIu64 " lies, %" PRIu64
         " CROSSING frames inside \"us\" (%" PRIu64 " with no liar)\n",
         took, honest, lies, crossings - lies, near);
  ASSERT(lies > 0);
  ASSERT(took <= honest + CORE_CROSS_TRUST_MS);
  ASSERT(crossings - lies <= 2 * near);
}

/* The notice of a pass is news once per chunk (cross.c cross_on_crossing):
 * a far peer that names us as the receiver of a chunk it never sends
 * holds that chunk back from our region's turns for CORE_CROSS_TRUST_MS,
 * and telling us again later holds it back no more. Two nodes of "us", A
 * dialing the liar of "eu" and B dialing A (and the liar, whom A names);
 * the liar has every chunk of v1 from the seed, announces a pass of each
 * to them, tells each lie again SN_LATE_MS later, and answers requests
 * with REJECTs, so "us" lacks every chunk throughout. The replayed lies
 * make no CROSSING inside "us" (321 before and after, test seed
 * 5707716); without the check on `crossing` in cross_on_crossing, 472
 * after (checked by hand). */
static void scenario_lie_late(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *liar = sn_add(&net, "eu", 0, 1);
  sn_node *a = sn_add(&net, "us", 0, 1), *b = sn_add(&net, "us", 0, 1);
  liar->evil = SN_EVIL_LIE_LATE;
  int to_liar[1] = {liar->idx}, to_a[1] = {a->idx};
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, liar, NULL, 0);
  sn_link(&net, liar, seed);
  sn_start(&net, a, to_liar, 1);
  sn_start(&net, b, to_a, 1);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  sn_run(&net, publish_ms[1] + SN_LATE_MS - 100, NULL, NULL);
  uint64_t lies = liar->lies;
  uint64_t told = a->tx_frames[WIRE_CROSSING] + b->tx_frames[WIRE_CROSSING];
  sn_run(&net, net.now + 2000, NULL, NULL);
  uint64_t after = a->tx_frames[WIRE_CROSSING] + b->tx_frames[WIRE_CROSSING];
  printf("lie late: %" PRIu64 " notices of a pass that never came, then "
         "each again %d ms later; CROSSING frames inside \"us\": %" PRIu64
         " before the second round, %" PRIu64 " after\n",
         lies, SN_LATE_MS, told, after);
  CHECK_NET(&net, lies > 0 && liar->lies == 2 * lies);
  CHECK_NET(&net, told > 0 && after == told);
  CHECK_NET(&net, a->chunks_written == 0 && b->chunks_written == 0);
  sn_free(&net);
}

/* ---- Links ------------------------------------------------------------- */

/* A node X of "us" is dialed by 12 nodes, the last NFAR of them of "eu";
 * then one more of "us" dials it. Checks that X held 12 links before and
 * took the last dialer (13 after), and says so with WHAT. */
static void full_node_takes_dialer(int nfar, const char *what) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *x = sn_add(&net, "us", 0, 1);
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, x, NULL, 0);
  int to_x[1] = {x->idx};
  for (int i = 0; i < 12; i++)
    sn_start(&net, sn_add(&net, i < 12 - nfar ? "us" : "eu", 0, 1), to_x, 1);
  sn_run(&net, net.now + 1000, NULL, NULL);
  stitch_swarm_stats before, after;
  sn_stats(x, &before);
  sn_start(&net, sn_add(&net, "us", 0, 1), to_x, 1);
  sn_run(&net, net.now + 3000, NULL, NULL);
  sn_stats(x, &after);
  printf("%s: a node of \"us\" with %u links, %d of them from \"eu\", took "
         "a dialer of \"us\": %u links after\n",
         what, before.peers, nfar, after.peers);
  CHECK_NET(&net, before.peers == 12);
  CHECK_NET(&net, after.peers == 13);
  sn_free(&net);
}

/* A node of "us" with as many links as it takes (max_peers +
 * CORE_INBOUND_SLACK: 12), 8 from its region and 4 from "eu", still
 * takes a dialer of its own region: links from other regions beyond
 * cross_region (2) do not make it full (core.c on_auth). Without the
 * rule the dialer is pointed elsewhere and the link closed, and the node,
 * with 8 + 2 links that count, does not dial it back. */
static void scenario_full_far(void) {
  full_node_takes_dialer(4, "full of far links");
}

/* A node of "us" with 12 links, all from its region, still takes a
 * thirteenth dialer of its region: each node dials 10 of its region
 * (max_peers + CORE_SAME_EXTRA), so a region's nodes have room for 2 more
 * of them than max_peers + CORE_INBOUND_SLACK (core.c on_auth). With the
 * limit at 12, a region's last dialers found every node full. */
static void scenario_full_same(void) {
  full_node_takes_dialer(0, "room in the region");
}

/* A node links to max_peers + CORE_SAME_EXTRA (10) nodes of its own
 * region and, where other regions exist, cross_region (2) of others on
 * top (core.c maintain): told of 12 nodes of its region and 2 of another,
 * none of which dials it, it holds at least 12 links, 10 of its region
 * and 2 across (13: one of the others dials it back). Dialing only
 * max_peers of its region, it held 11. */
static void scenario_cross_on_top(void) {
  sn_net net;
  build(&net, &default_params, 0);
  sn_node *x = sn_add(&net, "us", 0, 1);
  int told[14];
  for (int i = 0; i < 14; i++) {
    sn_node *o = sn_add(&net, i < 12 ? "us" : "eu", 0, 1);
    sn_start(&net, o, NULL, 0);
    told[i] = o->idx;
  }
  sn_start(&net, x, told, 14);
  sn_run(&net, net.now + 3000, NULL, NULL);
  stitch_swarm_stats st;
  sn_stats(x, &st);
  printf("links across on top: told of 12 nodes of its region and 2 of "
         "another, a node holds %u links\n", st.peers);
  CHECK_NET(&net, st.peers >= 12);
  sn_free(&net);
}

static const char *const reach_names[3] = {"eu", "us", "asia"};

/* Bit r set for each region (reach_names[r]) that node N's open links
 * reach, the seed's not counted. */
static unsigned links_reach(const sn_net *net, int n) {
  unsigned m = 0;
  for (size_t i = 0; i < net->n_conn; i++) {
    const sn_conn *c = &net->conn[i];
    int a = c->d[0].from, b = c->d[0].to;
    if (!c->open || (a != n && b != n))
      continue;
    const sn_node *o = &net->node[a == n ? b : a];
    for (int r = 0; r < 3; r++)
      if (!o->cfg.seed && strcmp(o->region, reach_names[r]) == 0)
        m |= 1u << r;
  }
  return m;
}

/* The seed gives a small version's chunks only to neighbours whose links
 * reach every region (reach.c): each passes its chunk across into both
 * other regions at once, where another's would leave a region to fetch it
 * by a pull, a long round trip later. Every node here keeps one far link
 * of its own (cross_region 1) and few links (max_peers 4), so several of
 * the seed's neighbours reach only one other region; n7 and n8 dial one
 * of each, as many as v2 has chunks. Without the rule the seed gave v2's
 * two chunks to the first two neighbours to ask, n1 and n2, whatever
 * they reached. n3 tells the seed it reaches 16 made-up regions, which
 * change nothing: only two go into the seed's table, and a region that
 * one peer alone names does not count (counted, no node reached every
 * region, and v2 went to n1 and n2 again). */
#define N_REACH 22 /* 8 of "eu", 7 of "us", 7 of "asia" */
static int reach_region(int i) { return i <= 8 ? 0 : i <= 15 ? 1 : 2; }
static void scenario_reach(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0); /* n0, "eu" */
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= N_REACH; i++) {
    sn_node *n = sn_add(&net, reach_names[reach_region(i)], 0, 1);
    n->cfg.cross_region = i == 7 || i == 8 ? 2 : 1;
    n->cfg.max_peers = 4;
  }
  net.node[3].evil = SN_EVIL_REACH;
  /* The far regions first; then "eu", n7 and n8 told of a node of each. */
  for (int i = N_REACH; i >= 1; i--) {
    int told[4] = {0, i == N_REACH ? 0 : i + 1, 2 + i, 9 + i};
    int far = i == 7 || i == 8;
    sn_start(&net, &net.node[i], told, i == N_REACH ? 1 : far ? 4 : 2);
  }
  sn_link(&net, &net.node[3], seed); /* an evil node dials no one */
  sn_run(&net, net.now + 2000, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  uint64_t before[N_REACH + 1];
  unsigned reach[N_REACH + 1], full = 0;
  for (int i = 1; i <= N_REACH; i++) {
    before[i] = net.node[i].rx_seed_chunks;
    reach[i] = links_reach(&net, i) | 1u << reach_region(i);
    full += reach[i] == 7;
  }
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  unsigned given = 0, given_full = 0;
  for (int i = 1; i <= N_REACH; i++)
    if (net.node[i].rx_seed_chunks > before[i]) {
      given++;
      given_full += reach[i] == 7;
    }
  printf("reach: %u of %d nodes reach all three regions; v2's chunks went "
         "from the seed to %u nodes, %u of them reaching all\n",
         full, N_REACH, given, given_full);
  CHECK_NET(&net, full > 0 && given > 0);
  CHECK_NET(&net, given_full == given);
  sn_free(&net);
}

/* A small version's chunk is asked early of the neighbour that first
 * told of its way into the region (a CROSSING), and that neighbour keeps
 * the request until it has the chunk (fetch.c fetch_early_from,
 * fetch_hold): the chunk then goes a hop in a latency and its bytes, with
 * no HAVE and no REQUEST after it arrived. The seed and n1 in "eu"; n2 to
 * n5 in "us", n2 linked across to n1, each other node told of the one
 * before it (peer exchange links them further). Every chunk of the delta
 * v2 (two: small) comes into "us" through n2. Each of n3 to n5 asks for
 * each chunk once, early (without the rule none asked: n2 passed the
 * chunks on to its neighbours), none is rejected and none comes twice,
 * and each holds v2 less than three latencies after n2 (what a HAVE, a
 * REQUEST and the CHUNK would take). */
static uint64_t sum_rx(const sn_net *net, int from, int to, int type) {
  uint64_t n = 0;
  for (int i = from; i <= to; i++)
    n += net->node[i].rx_frames[type];
  return n;
}

static uint64_t sum_twice(sn_net *net) {
  uint64_t n = 0;
  for (int i = 1; i <= 5; i++) {
    stitch_swarm_stats st;
    sn_stats(&net->node[i], &st);
    n += st.chunks_twice;
  }
  return n;
}

static void scenario_early(void) {
  sn_net net;
  sn_params p = default_params;
  p.lat_remote = 80;
  sn_node *seed = build(&net, &p, 0);
  sn_add(&net, "eu", 0, 1);
  for (int i = 2; i <= 5; i++)
    sn_add(&net, "us", 0, 1);
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= 5; i++) {
    int before[1] = {i - 1};
    sn_start(&net, &net.node[i], before, 1);
  }
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  sn_run(&net, net.now + 500, NULL, NULL);
  uint64_t haves = sum_rx(&net, 3, 5, WIRE_HAVE),
           rejects = sum_rx(&net, 1, 5, WIRE_REJECT),
           asked = sum_rx(&net, 2, 4, WIRE_REQUEST), twice = sum_twice(&net);
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  uint64_t n = ver[2].m->objects[0].n_chunks;
  haves = sum_rx(&net, 3, 5, WIRE_HAVE) - haves; /* from each other too */
  rejects = sum_rx(&net, 1, 5, WIRE_REJECT) - rejects;
  asked = sum_rx(&net, 2, 4, WIRE_REQUEST) - asked;
  twice = sum_twice(&net) - twice;
  printf("early: v2 in %" PRIu64 " chunks; n3..n5 got %" PRIu64
         " HAVEs and asked n2..n4 %" PRIu64 " times; %" PRIu64
         " REJECTs, %" PRIu64 " chunks twice; v2 at n2..n5 %" PRIu64
         " %" PRIu64 " %" PRIu64 " %" PRIu64 " ms after the publish\n",
         n, haves, asked, rejects, twice,
         net.node[2].applied_at[2] - publish_ms[2],
         net.node[3].applied_at[2] - publish_ms[2],
         net.node[4].applied_at[2] - publish_ms[2],
         net.node[5].applied_at[2] - publish_ms[2]);
  CHECK_NET(&net, n >= 1 && n <= CORE_PUSH_SMALL_CHUNKS);
  CHECK_NET(&net, asked == 3 * n); /* each chunk asked once, early */
  for (int i = 3; i <= 5; i++)
    CHECK_NET(&net, net.node[i].applied_at[2] - net.node[2].applied_at[2] <
                        3 * default_params.lat_local);
  CHECK_NET(&net, rejects == 0);
  CHECK_NET(&net, twice == 0);
  sn_free(&net);
}

static const sw_scenario scenarios[] = {
    {"regions", scenario_regions},
    {"bids", scenario_bids},
    {"pass_fresh", scenario_pass_fresh},
    {"one_way_in", scenario_one_way_in},
    {"not_me", scenario_not_me},
    {"pass_lie", scenario_pass_lie},
    {"lie_late", scenario_lie_late},
    {"full_far", scenario_full_far},
    {"full_same", scenario_full_same},
    {"cross_on_top", scenario_cross_on_top},
    {"reach", scenario_reach},
    {"early", scenario_early},
    {"told_lie", scenario_told_lie},
};

int main(void) {
  return sw_main("test_swarm_regions", scenarios,
                 sizeof(scenarios) / sizeof(scenarios[0]));
}
