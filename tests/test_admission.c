/* test_admission.c: who gets into a closed swarm, in memory (swarm_net.h,
 * docs/security.md). Honest nodes hold tickets the trainer signed;
 * intruders are unmodified cores with credentials of their own making.
 * Each scenario checks that the intruders learn nothing (no manifest, no
 * chunk) while the honest nodes converge bit for bit, and each fails if
 * the check it covers is removed from the core. */
#include "swarm_fixture.h"

#include "swarm/wire.h"

/* The ways an intruder's credentials go wrong. */
enum {
  NO_TICKET,     /* none, in a closed swarm */
  FORGED,        /* signed by a key of its own */
  OTHERS_TICKET, /* node 2's ticket with its own key */
  STOLEN_NAME,   /* node 2's key and ticket, without node 2's secret */
  EXPIRED,       /* its own, expired an hour ago */
  OTHER_SWARM,   /* its own, from another swarm's trainer */
  SEED_NAME,     /* the seed's key (the swarm key), without its secret */
  N_INTRUDERS
};
static const char *const intruder_names[N_INTRUDERS] = {
    "no ticket", "forged ticket", "another node's ticket",
    "another node's key and ticket", "expired ticket",
    "another swarm's ticket", "the seed's key"};

static void other_keys(uint64_t salt, stitch_pubkey *pk, stitch_seckey *sk) {
  uint64_t r = test_seed ^ salt;
  sn_keypair(&r, pk, sk);
}

static void make_intruder(sn_net *net, sn_node *x, int kind) {
  stitch_swarm_config *c = &x->cfg;
  stitch_pubkey opk;
  stitch_seckey osk;
  other_keys(0x1000 + (uint64_t)kind, &opk, &osk);
  stitch_diag d = {{0}};
  stitch_ticket t = {net->swarm, c->node_pk, STITCH_ROLE_NODE, SN_EPOCH_S, 0};
  switch (kind) {
  case NO_TICKET:
    c->ticket_len = 0;
    break;
  case FORGED: /* names the right swarm, but another key signed it */
    ASSERT_OK(stitch_ticket_sign(&(stitch_ticket){opk, c->node_pk,
                                                  STITCH_ROLE_NODE, 0, 0},
                                 &osk, c->ticket, &d),
              d);
    memcpy(c->ticket + 16, net->swarm.b, 32);
    break;
  case OTHERS_TICKET:
    memcpy(c->ticket, net->node[2].cfg.ticket, STITCH_TICKET_BYTES);
    break;
  case STOLEN_NAME:
    c->node_pk = net->node[2].cfg.node_pk; /* its secret stays its own */
    memcpy(c->ticket, net->node[2].cfg.ticket, STITCH_TICKET_BYTES);
    break;
  case EXPIRED:
    t.issued_s = SN_EPOCH_S - 7200;
    t.expires_s = SN_EPOCH_S - 3600;
    ASSERT_OK(stitch_ticket_sign(&t, &net->swarm_sk, c->ticket, &d), d);
    break;
  case OTHER_SWARM:
    t.swarm = opk;
    ASSERT_OK(stitch_ticket_sign(&t, &osk, c->ticket, &d), d);
    break;
  case SEED_NAME:
    c->node_pk = net->swarm;
    c->ticket_len = 0;
    break;
  }
}

/* The intruder learnt nothing: no manifest, no chunk, no version. */
static void check_nothing(sn_net *net, sn_node *x, const char *what) {
  stitch_swarm_stats st;
  sn_stats(x, &st);
  printf("intruder (%s): latest %" PRIu64 ", bytes down %" PRIu64
         ", manifests received %" PRIu64 "\n",
         what, st.latest_version, st.bytes_down, x->rx_frames[WIRE_MANIFEST]);
  CHECK_NET(net, st.latest_version == 0);
  CHECK_NET(net, st.bytes_down == 0);
  CHECK_NET(net, x->rx_frames[WIRE_MANIFEST] == 0);
  CHECK_NET(net, x->rx_frames[WIRE_PEERS] == 0);
  CHECK_NET(net, x->rx_frames[WIRE_BITFIELD] == 0);
  CHECK_NET(net, x->w_version == 0);
}

/* The trainer's policy, serial 1, given to the seed as stitchd's does. */
static void give_policy(sn_net *net, sn_node *seed, int open,
                        const stitch_pubkey *revoked) {
  stitch_policy pol = {swarm_pk, 1, open, revoked != NULL ? 1 : 0,
                       (stitch_pubkey *)revoked};
  uint8_t *pb;
  size_t pl;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_policy_sign(&pol, &swarm_sk, &pb, &pl, &d), d);
  ASSERT_OK(stitch_swarm_set_policy(seed->sw, pb, pl, net->now, &d), d);
  /* The same serial again changes nothing. */
  ASSERT_OK(stitch_swarm_set_policy(seed->sw, pb, pl, net->now, &d), d);
  free(pb);
  sn_actions(net, seed);
}

/* Starts the seed and nodes 1..N, and runs until versions 1..V are held
 * everywhere. */
static void start_at(sn_net *net, sn_node *seed, int n, uint64_t v) {
  sn_start(net, seed, NULL, 0);
  for (int i = 1; i <= n; i++)
    start_node(net, &net->node[i]);
  sn_run(net, 50, NULL, NULL);
  for (uint64_t k = 1; k <= v; k++) {
    publish(net, seed, k);
    run_until_all_at(net, k);
  }
}

/* Four honest nodes and one intruder of each kind, each linked to the
 * seed and to node 1. The honest nodes converge on two versions; every
 * intruder is refused at the handshake and holds nothing; nobody is
 * banned for what a stranger claimed (the seed's key, node 2's key). */
static void scenario_intruders(void) {
  sn_net net;
  sn_params p = default_params;
  sn_node *seed = build(&net, &p, 4);
  sn_node *x[N_INTRUDERS];
  for (int k = 0; k < N_INTRUDERS; k++) {
    x[k] = sn_add(&net, "eu", 0, 0);
    x[k]->evil = SN_EVIL_INTRUDER;
    make_intruder(&net, x[k], k);
  }
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= 4; i++)
    start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  for (int k = 0; k < N_INTRUDERS; k++) {
    sn_start(&net, x[k], NULL, 0);
    sn_link(&net, x[k], seed);
    sn_link(&net, x[k], &net.node[1]);
  }
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  for (int k = 0; k < N_INTRUDERS; k++)
    check_nothing(&net, x[k], intruder_names[k]);
  stitch_swarm_stats ss, s1;
  sn_stats(seed, &ss);
  sn_stats(&net.node[1], &s1);
  printf("refused: seed %" PRIu64 ", node 1 %" PRIu64 "; bans %" PRIu64
         " and %" PRIu64 "\n",
         ss.refused, s1.refused, ss.bans, s1.bans);
  CHECK_NET(&net, ss.refused >= N_INTRUDERS && s1.refused >= N_INTRUDERS);
  CHECK_NET(&net, ss.bans == 0 && s1.bans == 0);
  sn_free(&net);
}

/* An open swarm (the trainer's policy says so) takes a node without a
 * ticket; a forged ticket is still refused. */
static void scenario_open(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 2);
  sn_node *free_rider = sn_add(&net, "eu", 0, 1);
  free_rider->cfg.ticket_len = 0;
  sn_node *forger = sn_add(&net, "eu", 0, 0);
  forger->evil = SN_EVIL_INTRUDER;
  make_intruder(&net, forger, FORGED);
  sn_start(&net, seed, NULL, 0);
  give_policy(&net, seed, 1, NULL);
  for (int i = 1; i <= 3; i++)
    start_node(&net, &net.node[i]);
  sn_start(&net, forger, NULL, 0);
  sn_link(&net, forger, seed);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  check_nothing(&net, forger, "forged ticket, open swarm");
  stitch_swarm_stats st;
  sn_stats(free_rider, &st);
  CHECK_NET(&net, st.policy_serial == 1);
  sn_free(&net);
}

/* The trainer revokes node 3 after version 1: every member drops its
 * links to it within a maintain beat and refuses it after; it gets no
 * version 2 while the others do. */
static void scenario_revoke(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 5);
  start_at(&net, seed, 5, 1);
  sn_node *bad = &net.node[3];
  give_policy(&net, seed, 0, &bad->cfg.node_pk);
  bad->evil = SN_EVIL_INTRUDER; /* out of all_at; its dials are ignored */
  sn_run(&net, net.now + 3000, NULL, NULL);
  stitch_swarm_stats st;
  sn_stats(bad, &st);
  printf("revoked: node 3 has %u links 3 s after the policy\n", st.peers);
  CHECK_NET(&net, st.peers == 0);
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  CHECK_NET(&net, bad->w_version == 1);
  for (int i = 1; i <= 5; i++) {
    sn_stats(&net.node[i], &st);
    CHECK_NET(&net, i == 3 || st.policy_serial == 1);
  }
  sn_free(&net);
}

/* A trainer restarted from an old checkpoint signs a second version 2: a
 * node that holds the first refuses the fork (add_manifest; the same check
 * drops a peer that gossips it). */
static void scenario_fork(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 2);
  start_at(&net, seed, 2, 2);
  stitch_manifest *m;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_manifest_open(ver[2].man, ver[2].man_len, &swarm_pk, &m,
                                 NULL, &d),
            d);
  m->time_unix += 1; /* another version 2 */
  uint8_t *fb;
  size_t fl;
  ASSERT_OK(stitch_manifest_sign(m, &swarm_sk, &fb, &fl, NULL, &d), d);
  stitch_manifest_free(m);
  ASSERT_ERR(stitch_swarm_add_manifest(net.node[1].sw, fb, fl, net.now, &d),
             STITCH_EROLLBACK, d, "fork");
  free(fb);
  check_all_exact(&net, 2);
  sn_free(&net);
}

/* Links sealed as stitchd's (channel.h): the swarm converges through the
 * records, bit for bit. */
static void scenario_sealed(void) {
  sn_net net;
  sn_params p = default_params;
  p.sealed = 1;
  sn_node *seed = build(&net, &p, 6);
  start_at(&net, seed, 6, 3);
  check_all_exact(&net, 3);
  sn_free(&net);
}

/* Before its AUTH a peer may send its HELLO and AUTH and nothing else: a
 * 64 MiB MANIFEST header there drops it at once, with nothing buffered. */
static void scenario_early(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 2);
  sn_node *evil = sn_add(&net, "eu", 0, 0);
  evil->evil = SN_EVIL_EARLY;
  evil->dribble = 16;
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= 2; i++)
    start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  sn_start(&net, evil, NULL, 0);
  sn_node *victim = &net.node[1];
  sn_link(&net, evil, victim);
  size_t link = net.n_conn - 1;
  net.track_heap = 1;
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  const sn_conn *c = &net.conn[link];
  printf("early: link %s after %" PRIu64 " B; the victim kept at most %" PRId64
         " B for it\n",
         c->closed_by == victim->idx ? "dropped by the victim" : "open",
         c->d[0].delivered, c->d[0].heap_peak);
  CHECK_NET(&net, c->closed_by == victim->idx);
  CHECK_NET(&net, c->d[0].heap_peak < (256 << 10));
  check_all_exact(&net, 1);
  sn_free(&net);
}

/* After its handshake, a member starts a 64 MiB MANIFEST frame (nobody
 * asks for those; their size is the limit's) and dribbles it at 1 KB/s:
 * the victim drops it once the frame falls behind 32 KiB/s after its 5 s
 * grace (CORE_FRAME_MIN_RATE), with what came buffered and no more. */
static void scenario_crawl(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 2);
  sn_node *evil = sn_add(&net, "eu", 0, 0);
  evil->evil = SN_EVIL_HUGE;
  evil->huge_type = WIRE_MANIFEST;
  evil->huge_len = STITCH_MANIFEST_MAX;
  evil->dribble = 16;
  evil->up_bw = 1; /* bytes per ms */
  start_at(&net, seed, 2, 0); /* no version yet: no manifest it owes an
                                answer (score.c's silence) */
  sn_start(&net, evil, NULL, 0);
  sn_node *victim = &net.node[1];
  sn_link(&net, evil, victim);
  size_t link = net.n_conn - 1;
  net.track_heap = 1;
  uint64_t t0 = net.now;
  sn_run(&net, net.now + 20000, NULL, NULL);
  const sn_conn *c = &net.conn[link];
  printf("crawl: a 64 MiB MANIFEST at 1 KB/s %s after %" PRIu64
         " ms and %" PRIu64 " B; the victim kept at most %" PRId64 " B\n",
         c->closed_by == victim->idx ? "dropped by the victim" : "open",
         (c->open ? net.now : c->closed_ms) - t0, c->d[0].delivered,
         c->d[0].heap_peak);
  CHECK_NET(&net, c->closed_by == victim->idx);
  CHECK_NET(&net, c->closed_ms - t0 < 8000);
  CHECK_NET(&net, c->d[0].heap_peak <= (int64_t)(2 * c->d[0].delivered + 65536));
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  sn_free(&net);
}

static const sw_scenario scenarios[] = {
    {"crawl", scenario_crawl},
    {"intruders", scenario_intruders}, {"open", scenario_open},
    {"revoke", scenario_revoke},       {"fork", scenario_fork},
    {"sealed", scenario_sealed},       {"early", scenario_early},
};

int main(void) {
  return sw_main("test_admission", scenarios,
                 sizeof(scenarios) / sizeof(scenarios[0]));
}
