/* test_swarm.c: the swarm core driven in memory, in virtual time, through
 * scripted exchanges (swarm_net.h): fan-out from a seed, corrupted chunks,
 * floods of bad frames, forged manifests, late joiners, nodes leaving
 * mid-transfer, determinism. Real versions come from stitch_publish;
 * every node's weights are checked bit for bit against the trainer's. */
#include "swarm_fixture.h"

#include "swarm/core_internal.h"
#include "swarm/punch.h"
#include "swarm/scope.h"

/* ---- Scenarios -------------------------------------------------------- */

/* 1 seed + 8 nodes, 3 versions published 300 ms apart. Returns the run's
 * fingerprint. */
static void scenario_fanout(int quiet, stitch_digest *fp) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 8);
  for (int i = 0; i < net.n_nodes; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  for (uint64_t v = 1; v <= 3; v++) {
    publish(&net, seed, v);
    sn_run(&net, net.now + 300, NULL, NULL);
  }
  run_until_all_at(&net, 3);
  check_all_exact(&net, 3);
  stitch_swarm_stats ss;
  sn_stats(seed, &ss);
  uint64_t need = needed_bytes(&net, 3), down = 0;
  for (int i = 1; i < net.n_nodes; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    down += st.bytes_down;
  }
  if (!quiet)
    printf("fan-out: 8 nodes at v3 bit-exact at t=%" PRIu64
           " ms (v1 done %" PRIu64 " ms after publish); seed up %" PRIu64
           " B = %.2fx the %" PRIu64 " B needed (a central store: 8x); "
           "nodes down %" PRIu64 " B = %.2fx\n",
           net.now, last_apply_ms(&net, 1) - publish_ms[1], ss.bytes_up,
           (double)ss.bytes_up / (double)need, need, down,
           (double)down / (double)need);
  uint64_t fr[WIRE_TYPE_COUNT_] = {0};
  for (int i = 0; i < net.n_nodes; i++)
    for (int t = 0; t < WIRE_TYPE_COUNT_; t++)
      fr[t] += net.node[i].rx_frames[t];
  if (!quiet)
    printf("fan-out frames: %" PRIu64 " MANIFEST, %" PRIu64 " BITFIELD, %"
           PRIu64 " HAVE, %" PRIu64 " REQUEST, %" PRIu64 " CHUNK, %" PRIu64
           " CANCEL, %" PRIu64 " REJECT, %" PRIu64 " PEERS; %zu links "
           "opened, %" PRIu64 " dials to a node already being dialed\n",
           fr[WIRE_MANIFEST], fr[WIRE_BITFIELD], fr[WIRE_HAVE],
           fr[WIRE_REQUEST], fr[WIRE_CHUNK], fr[WIRE_CANCEL], fr[WIRE_REJECT],
           fr[WIRE_PEERS], net.n_conn, net.dup_dials);
  CHECK_NET(&net, need > 0);
  CHECK_NET(&net, ss.bytes_up * 2 <= need * 3);
  CHECK_NET(&net, quiet || net.dup_dials == 0); /* not what determinism is about */
  fingerprint(&net, fp);
  sn_free(&net);
}

/* An evil node flips a byte in every CHUNK it sends. It holds every chunk
 * from the start, so honest nodes do ask it. With HOST_CHECKS the honest
 * cores run with config.write_verifies: their stores check each chunk
 * (sn_io_write hashes it) instead of the core, and the outcome must be the
 * same: nothing bad stored, the evil node banned and dropped. */
static void corrupt_run(int host_checks) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 6);
  for (int i = 1; i <= 6; i++)
    net.node[i].cfg.write_verifies = host_checks;
  sn_node *evil = sn_add(&net, "eu", 0, 1);
  evil->evil = SN_EVIL_FLIP;
  evil->up_bw = 8000;
  for (size_t i = 0; i < trainer_chunks.cap; i++)
    if (trainer_chunks.slot[i].p != NULL)
      sn_store_put(&evil->store, &trainer_chunks.slot[i].h,
                   trainer_chunks.slot[i].p, trainer_chunks.slot[i].len);
  sn_start(&net, seed, NULL, 0);
  int to_seed = 0;
  sn_start(&net, evil, &to_seed, 1);
  for (int i = 1; i <= 6; i++) {
    start_node(&net, &net.node[i]);
    sn_link(&net, evil, &net.node[i]);
  }
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  sn_run(&net, net.now + 200, NULL, NULL);
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  uint64_t fails = 0, bans = 0, dropped = 0, rejects = 0;
  for (int i = 1; i <= 6; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    fails += st.verify_failures;
    bans += st.bans;
    rejects += net.node[i].write_rejects;
  }
  for (size_t k = 0; k < net.n_conn; k++)
    for (int s = 0; s < 2; s++)
      dropped += net.conn[k].d[s].from == evil->idx &&
                 net.conn[k].closed_by == net.conn[k].d[s].to;
  printf("corrupt chunks (%s checks): 6 honest nodes at v2 bit-exact; %" PRIu64
         " verify failures, %" PRIu64 " bans, %" PRIu64
         " links to the evil node dropped by honest nodes\n",
         host_checks ? "store" : "core", fails, bans, dropped);
  CHECK_NET(&net, fails >= 1);
  CHECK_NET(&net, rejects == (host_checks ? fails : 0));
  CHECK_NET(&net, bans >= 1);
  CHECK_NET(&net, dropped >= 1);
  sn_free(&net);
}

static void scenario_corrupt(void) { corrupt_run(0); }
static void scenario_corrupt_store(void) { corrupt_run(1); }

/* The evil link is closed and every honest node holds version 2. */
static int flood_done(sn_net *net, void *arg) {
  uint64_t v = 2;
  return !net->conn[*(const size_t *)arg].open && all_at(net, &v);
}

/* Evil nodes that, right after their handshake, send a 30 MiB CHUNK header
 * and dribble, thousands of malformed frames, or a frame of an unknown
 * type, each to its own victim, while the swarm moves to a new version. */
static void scenario_flood(void) {
  static const sn_evil kinds[3] = {SN_EVIL_UNKNOWN, SN_EVIL_GARBAGE,
                                   SN_EVIL_HUGE};
  static const char *names[3] = {"unknown type", "5000 malformed frames",
                                 "30 MiB header + dribble"};
  for (int k = 0; k < 3; k++) {
    sn_net net;
    sn_node *seed = build(&net, &default_params, 3);
    sn_node *evil = sn_add(&net, "eu", 0, 0);
    evil->evil = kinds[k];
    evil->dribble = 16;
    for (int i = 0; i <= 3; i++)
      i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
    sn_run(&net, 50, NULL, NULL);
    publish(&net, seed, 1);
    run_until_all_at(&net, 1);
    sn_node *victim = &net.node[1];
    sn_start(&net, evil, NULL, 0);
    sn_link(&net, evil, victim);
    size_t link = net.n_conn - 1;
    net.track_heap = 1;
    publish(&net, seed, 2);
    int ok = sn_run(&net, net.now + 60000, flood_done, &link);
    const sn_conn *c = &net.conn[link];
    const sn_pipe *p = &c->d[0];
    stitch_swarm_stats vs;
    sn_stats(victim, &vs);
    const char *how = c->closed_by == victim->idx ? "dropped by the victim"
                      : c->open ? "still open" : "closed by the attacker";
    printf("flood (%s): link %s after %" PRIu64 " B in %" PRIu64
           " ms (%s); the victim's core kept at most %" PRId64
           " B for it (mallinfo2; 0 under ASan); victim at v%" PRIu64
           ", bans %" PRIu64 "\n",
           names[k], how, p->delivered,
           (c->open ? net.now : c->closed_ms) - c->opened_ms,
           c->open ? "-" : stitch_errname(c->close_rc), p->heap_peak,
           victim->w_version, vs.bans);
    CHECK_NET(&net, c->closed_by == victim->idx);
    CHECK_NET(&net, ok);
    /* Never more than what arrived (doubling buffers), never near the
     * 30 MiB the header claimed. */
    CHECK_NET(&net, p->heap_peak <= (int64_t)(2 * p->delivered + 65536));
    CHECK_NET(&net, p->heap_peak < (4 << 20));
    if (kinds[k] != SN_EVIL_HUGE) /* refused at the first bad frame */
      CHECK_NET(&net, p->delivered < 16384);
    check_all_exact(&net, 2);
    sn_free(&net);
  }
}

/* Version 99 built from version 3's manifest: signed by another key (its
 * own swarm field, or the real one with the other key's signature), or
 * signed by the trainer with one byte flipped. */
static void forge(int kind, const stitch_pubkey *epk, const stitch_seckey *esk,
                  uint8_t **out, size_t *len) {
  stitch_manifest *m;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_manifest_open(ver[3].man, ver[3].man_len, &swarm_pk, &m,
                                 NULL, &d),
            d);
  m->version = 99;
  if (kind == 0)
    m->swarm = *epk;
  ASSERT_OK(stitch_manifest_sign(m, kind == 0 ? esk : &swarm_sk, out, len,
                                 NULL, &d),
            d);
  stitch_manifest_free(m);
  uint8_t *b = *out;
  /* [format, body (bin), signature (bin 64)]: fixarray, fixint, bin. */
  ASSERT(b[0] == 0x93 && b[1] == 0x01);
  size_t hl = b[2] == 0xc4 ? 2 : b[2] == 0xc5 ? 3 : 5, body_len = 0;
  for (size_t i = 3; i < 2 + hl; i++)
    body_len = body_len << 8 | b[i];
  const uint8_t *body = b + 2 + hl;
  ASSERT_UEQ(2 + hl + body_len + 2 + 64, *len);
  if (kind == 1) {
    size_t in_len = 19 + body_len;
    uint8_t *in = malloc(in_len);
    ASSERT(in != NULL);
    memcpy(in, "stitch-manifest-v1", 19); /* with its NUL */
    memcpy(in + 19, body, body_len);
    crypto_sign_detached(b + *len - 64, NULL, in, in_len, esk->b);
    free(in);
  } else if (kind == 2) {
    b[2 + hl + body_len / 2] ^= 0x20;
  }
}

static int victims_done(sn_net *net, void *arg) {
  (void)arg;
  for (size_t k = 0; k < net->n_conn; k++)
    if (net->conn[k].open && (net->node[net->conn[k].d[0].from].evil ||
                              net->node[net->conn[k].d[1].from].evil))
      return 0;
  uint64_t v = 2;
  return all_at(net, &v);
}

/* Three evil nodes each hand one victim a forged version 99. */
static void scenario_forged(void) {
  static const char *what[3] = {"signed by another swarm's key",
                                "other key's signature", "one byte flipped"};
  sn_net net;
  sn_node *seed = build(&net, &default_params, 5);
  for (int i = 0; i <= 5; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  uint8_t *forged[3];
  size_t flen[3];
  sn_node *evil[3];
  for (int k = 0; k < 3; k++) {
    evil[k] = sn_add(&net, "eu", 0, 0);
    forge(k, &evil[k]->cfg.node_pk, &evil[k]->cfg.node_sk, &forged[k],
          &flen[k]);
    stitch_hash(forged[k], flen[k], &net.watch[k]);
    evil[k]->evil = SN_EVIL_MANIFEST;
    evil[k]->evil_buf = forged[k];
    evil[k]->evil_len = flen[k];
  }
  net.n_watch = 3;
  for (int k = 0; k < 3; k++) {
    sn_start(&net, evil[k], NULL, 0);
    sn_link(&net, evil[k], &net.node[1 + k]);
  }
  publish(&net, seed, 2);
  int ok = sn_run(&net, net.now + 60000, victims_done, NULL);
  CHECK_NET(&net, ok);
  check_all_exact(&net, 2);
  for (int k = 0; k < 3; k++) {
    sn_node *victim = &net.node[1 + k];
    stitch_swarm_stats vs;
    sn_stats(victim, &vs);
    uint64_t elsewhere = 0;
    for (int i = 0; i < net.n_nodes; i++)
      if (i != victim->idx && net.node[i].evil == SN_HONEST)
        elsewhere += net.node[i].watch_rx[k];
    int dropped = 0;
    for (size_t c = 0; c < net.n_conn; c++)
      dropped |= net.conn[c].d[0].from == evil[k]->idx &&
                 net.conn[c].closed_by == victim->idx;
    printf("forged manifest (%s): victim received it %" PRIu64
           " time(s), other nodes %" PRIu64 "; victim latest v%" PRIu64
           ", verify failures %" PRIu64 ", bans %" PRIu64
           ", sender dropped: %s\n",
           what[k], victim->watch_rx[k], elsewhere, vs.latest_version,
           vs.verify_failures, vs.bans, dropped ? "yes" : "no");
    CHECK_NET(&net, victim->watch_rx[k] == 1);
    CHECK_NET(&net, elsewhere == 0);
    CHECK_NET(&net, vs.latest_version == 2);
    CHECK_NET(&net, vs.verify_failures >= 1);
    CHECK_NET(&net, dropped || vs.bans >= 1);
  }
  for (int k = 0; k < 3; k++)
    free(forged[k]);
  sn_free(&net);
}

/* Four nodes join after five versions and must catch up from an anchor. */
static void scenario_late(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 8);
  for (int i = 0; i <= 4; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  for (uint64_t v = 1; v <= 5; v++) {
    publish(&net, seed, v);
    sn_run(&net, net.now + 300, NULL, NULL);
  }
  run_until_all_at(&net, 5);
  uint64_t t_join = net.now;
  for (int i = 5; i <= 8; i++)
    start_node(&net, &net.node[i]);
  run_until_all_at(&net, 5);
  uint64_t t_caught = net.now;
  publish(&net, seed, 6);
  run_until_all_at(&net, 6);
  check_all_exact(&net, 6);
  printf("late joiners: 4 nodes joined at t=%" PRIu64
         " ms, at v5 bit-exact %" PRIu64 " ms later, then v6; applied: "
         "%s (%s), %s, %s, %s; early node: %s\n",
         t_join, t_caught - t_join, net.node[5].path, "a anchor, d delta, "
         "c cumulative", net.node[6].path, net.node[7].path, net.node[8].path,
         net.node[1].path);
  sn_free(&net);
}

/* Half of version 1's chunks have reached the nodes' stores. */
static int half_done(sn_net *net, void *arg) {
  (void)arg;
  uint64_t held = 0;
  for (int i = 1; i < net->n_nodes; i++)
    held += net->node[i].store.bytes;
  return held * 2 >= ver[1].m->objects[0].bytes * (uint64_t)(net->n_nodes - 1);
}

static void scenario_leave(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 8);
  for (int i = 0; i <= 8; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  CHECK_NET(&net, sn_run(&net, net.now + DEADLINE_MS, half_done, NULL));
  uint64_t t_kill = net.now;
  char killed[64] = "";
  /* The biggest uploaders among the unfinished, the others if need be. */
  for (int k = 0; k < 3; k++) {
    sn_node *best = NULL;
    uint64_t most = 0;
    for (int i = 1; i <= 8; i++) {
      stitch_swarm_stats st;
      sn_stats(&net.node[i], &st);
      uint64_t worth = st.bytes_up + (net.node[i].w_version ? 0 : 1ull << 40);
      if (net.node[i].alive && (best == NULL || worth > most)) {
        best = &net.node[i];
        most = worth;
      }
    }
    CHECK_NET(&net, best != NULL);
    sn_kill(&net, best);
    snprintf(killed + strlen(killed), sizeof(killed) - strlen(killed), " %s",
             best->name);
  }
  run_until_all_at(&net, 1);
  uint64_t t1 = net.now;
  publish(&net, seed, 2);
  run_until_all_at(&net, 2);
  check_all_exact(&net, 2);
  printf("leaving: killed%s at t=%" PRIu64 " ms (half of v1 fetched); the "
         "other 5 at v1 %" PRIu64 " ms later, then v2\n",
         killed, t_kill, t1 - t_kill);
  sn_free(&net);
}

/* Stores every chunk of version V at N and marks its weights as V: a node
 * up to date before it starts. */
static void hold_version(sn_node *n, uint64_t v) {
  stitch_manifest *m;
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_manifest_open(ver[v].man, ver[v].man_len, &swarm_pk, &m,
                                 &n->cfg.held_id, &d),
            d);
  stitch_manifest_free(m);
  n->cfg.held_version = n->w_version = v;
  store_version(n, v);
}

/* The seed with version 1, two nodes of "us" that hold it (HOLD, started
 * with a link to the seed and run 300 ms), and a joiner of "us" added but
 * not started (JOINER). */
static void two_holders(sn_net *net, const sn_params *q, sn_node *hold[2],
                        sn_node **joiner) {
  sn_node *seed = build(net, q, 0);
  hold[0] = sn_add(net, "us", 0, 1);
  hold[1] = sn_add(net, "us", 0, 1);
  *joiner = sn_add(net, "us", 0, 1);
  sn_start(net, seed, NULL, 0);
  publish(net, seed, 1);
  int to_seed[1] = {seed->idx};
  for (int i = 0; i < 2; i++) {
    hold_version(hold[i], 1);
    sn_start(net, hold[i], to_seed, 1);
  }
  sn_run(net, net->now + 300, NULL, NULL);
}

static int both_asked(sn_net *net, void *arg) {
  (void)net;
  sn_node *const *h = arg;
  return h[0]->rx_frames[WIRE_REQUEST] > 0 && h[1]->rx_frames[WIRE_REQUEST] > 0;
}

/* A node behind the neighbours of its region asks each of them for twice
 * the pipeline at once (fetch.c request_depth): two neighbours hold all
 * of version 1, the joiner nothing. Their uplinks are slow, so no chunk
 * comes back (and no request is refilled) for seconds: each holds what
 * the joiner asks of it at once, 2 x pipeline; without the rule,
 * pipeline. */
static void scenario_depth(void) {
  sn_params q = default_params;
  q.pipeline = 4;
  sn_net net;
  sn_node *hold[2], *joiner;
  two_holders(&net, &q, hold, &joiner);
  for (int i = 0; i < 2; i++)
    hold[i]->up_bw = 20; /* bytes per ms: a chunk takes about 0.7 s */
  int to_holders[2] = {hold[0]->idx, hold[1]->idx};
  sn_start(&net, joiner, to_holders, 2);
  int ok = sn_run(&net, net.now + 10000, both_asked, hold);
  sn_run(&net, net.now + 50, NULL, NULL);
  uint64_t n0 = hold[0]->rx_frames[WIRE_REQUEST],
           n1 = hold[1]->rx_frames[WIRE_REQUEST];
  printf("depth: a joiner behind both neighbours of its region asked them "
         "for %" PRIu64 " and %" PRIu64 " chunks at once (pipeline %u: "
         "twice that each while behind); chunks in %" PRIu64 "\n",
         n0, n1, q.pipeline, joiner->rx_frames[WIRE_CHUNK]);
  CHECK_NET(&net, ok);
  CHECK_NET(&net, joiner->rx_frames[WIRE_CHUNK] == 0);
  CHECK_NET(&net, n0 == 2 * q.pipeline && n1 == 2 * q.pipeline);
  sn_free(&net);
}

/* The seed and 6 nodes, all in "eu": no other region is known, so a node
 * that asks the seed for a chunk does not tell its region so (fetch.c
 * tell_entering): not one CROSSING frame. In two regions it does. */
static void scenario_one_region(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  for (int i = 1; i <= 6; i++)
    sn_add(&net, "eu", 0, 1);
  for (int i = 0; i < net.n_nodes; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  uint64_t crossing = 0;
  for (int i = 1; i < net.n_nodes; i++)
    crossing += net.node[i].rx_frames[WIRE_CROSSING];
  printf("one region: 6 nodes at v1 bit-exact, %" PRIu64 " CROSSING frames\n",
         crossing);
  CHECK_NET(&net, crossing == 0);
  sn_free(&net);
}

static int node_at1(sn_net *net, void *arg) {
  (void)net;
  return ((const sn_node *)arg)->w_version == 1;
}

/* A joiner takes version 1 from two neighbours of its region that hold
 * it; returns the CHUNK frames it got, up to 2 s after it held the
 * version, and sets *TOOK to the ms it took. With STALL, the second
 * neighbour's uplink is so slow that nothing it is asked for comes. */
static uint64_t endgame_run(int stall, uint64_t *took) {
  sn_net net;
  sn_node *hold[2], *joiner;
  two_holders(&net, &default_params, hold, &joiner);
  if (stall)
    hold[1]->up_bw = 1; /* bytes per ms: a chunk would take a minute */
  int to_holders[2] = {hold[0]->idx, hold[1]->idx};
  uint64_t t0 = net.now;
  sn_start(&net, joiner, to_holders, 2);
  int ok = sn_run(&net, net.now + DEADLINE_MS, node_at1, joiner);
  CHECK_NET(&net, ok);
  *took = net.now - t0;
  sn_run(&net, net.now + 2000, NULL, NULL);
  check_exact(&net, joiner, 1);
  uint64_t frames = joiner->rx_frames[WIRE_CHUNK];
  sn_free(&net);
  return frames;
}

/* The endgame asks a second peer for a chunk only once the first request
 * is late (fetch.c late). Two neighbours that serve at the same pace:
 * each chunk comes once (asking a second peer as soon as every chunk was
 * asked for brought second copies of the last ones). One that stalls:
 * its requests go to the other once late, and the joiner is done long
 * before they would time out (CORE_REQUEST_MS, 15 s). */
static void scenario_endgame(void) {
  uint64_t chunks = 0, even_ms, stall_ms;
  for (uint64_t o = 0; o < ver[1].m->n_objects; o++)
    chunks += ver[1].m->objects[o].n_chunks;
  uint64_t even = endgame_run(0, &even_ms), stalled = endgame_run(1, &stall_ms);
  printf("endgame: version 1 has %" PRIu64 " chunks; from two even "
         "neighbours %" PRIu64 " CHUNK frames in %" PRIu64 " ms; with one "
         "stalled, %" PRIu64 " in %" PRIu64 " ms\n",
         chunks, even, even_ms, stalled, stall_ms);
  ASSERT(even == chunks);
  ASSERT(stalled >= chunks && stalled <= chunks + 1);
  ASSERT(stall_ms < 5000);
}

static int node_at3(sn_net *net, void *arg) {
  (void)net;
  return ((const sn_node *)arg)->w_version == 3;
}

/* A joiner of the seed's region takes versions 1 to 3 from the seed. Its
 * other neighbour, in another region, is up to date: weights at version 3
 * and its chunks stored. The joiner passes chunks from the seed across
 * only to a far neighbour that wants them (cross.c may_pass), so the old
 * anchor and delta it takes never reach that node. Passing whatever came
 * from the seed sent it version 1's chunks, which it has no manifest for:
 * it dropped and banned the joiner. */
static void scenario_pass_wanted(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *up = sn_add(&net, "us", 0, 1);
  sn_node *joiner = sn_add(&net, "eu", 0, 1);
  sn_start(&net, seed, NULL, 0);
  for (uint64_t v = 1; v <= 3; v++)
    publish(&net, seed, v);
  hold_version(up, 3);
  int to_seed[1] = {seed->idx}, to_both[2] = {seed->idx, up->idx};
  sn_start(&net, up, to_seed, 1);
  sn_run(&net, net.now + 300, NULL, NULL);
  sn_start(&net, joiner, to_both, 2);
  int ok = sn_run(&net, net.now + DEADLINE_MS, node_at3, joiner);
  stitch_swarm_stats st;
  sn_stats(up, &st);
  printf("passing across: the joiner at v%" PRIu64 " by t=%" PRIu64
         " ms (%s); the node up to date in the other region got %" PRIu64
         " CHUNK frames, sent %" PRIu64 " B, has %u peers, banned %" PRIu64
         "\n",
         joiner->w_version, net.now, joiner->path,
         up->rx_frames[WIRE_CHUNK], st.bytes_up, st.peers, st.bans);
  CHECK_NET(&net, ok);
  CHECK_NET(&net, up->rx_frames[WIRE_CHUNK] == 0); /* it asked for none */
  /* An old version's chunk it has no manifest for is a frame over any
   * chunk it could take: it would drop and ban the joiner. */
  CHECK_NET(&net, st.bans == 0 && st.peers == 2);
  check_exact(&net, joiner, 3);
  sn_free(&net);
}

/* Bytes FROM has put on its links to TO so far. */
static uint64_t sent_to(const sn_net *net, const sn_node *from,
                        const sn_node *to) {
  uint64_t n = 0;
  for (size_t k = 0; k < net->n_conn; k++)
    for (int s = 0; s < 2; s++)
      if (net->conn[k].d[s].from == from->idx &&
          net->conn[k].d[s].to == to->idx)
        n += net->conn[k].d[s].sent;
  return n;
}

/* The seed, a holder H of version 1 in "eu" that it links to and then
 * leaves (killed after 300 ms), and N requesters of "eu" added, not
 * started (LISTEN 0: undialable). H is told UP_TOLD (bytes per second;
 * 0: not told). Returns H; REQ gets the requesters. */
static sn_node *lone_holder(sn_net *net, const sn_params *q, sn_node **req,
                            int n, int listen, uint64_t up_told) {
  sn_node *seed = build(net, q, 0), *hold = sn_add(net, "eu", 0, 1);
  for (int i = 0; i < n; i++)
    req[i] = sn_add(net, "eu", 0, listen);
  hold->cfg.up_bytes_per_s = up_told;
  sn_start(net, seed, NULL, 0);
  publish(net, seed, 1);
  int to_seed[1] = {seed->idx};
  hold_version(hold, 1);
  sn_start(net, hold, to_seed, 1);
  sn_run(net, net->now + 300, NULL, NULL);
  sn_kill(net, seed);
  return hold;
}

/* An uploader serves the CORE_SERVE_SLOTS requesters furthest behind
 * first (fetch.c serve_turn), counting those whose chunk is still on its
 * way out: with a pipeline of one, a requester's queue with us is empty
 * while its chunk goes, and counting only queued requests let every
 * requester through (docs/history/simulator.md "Chunks handed over when the
 * uplink wants them"). One holder H of version 1 (the seed is gone once
 * H has it), 7 requesters that start together and an eighth (E) that
 * starts 150 ms later: E is furthest behind, so H must serve it at once;
 * and it is more than CORE_BEHIND_MARGIN behind the others, so it counts
 * as two of their CORE_SERVE_SLOTS and fewer of them share H's uplink
 * with it. Its share must be well above theirs. */
static void behind_run(uint64_t *late, uint64_t *early) {
  sn_params q = default_params;
  q.pipeline = 1;  /* two requests while behind (request_depth) */
  q.lat_local = 1; /* so that E's second request keeps its link busy */
  sn_net net;
  sn_node *req[8];
  sn_node *hold = lone_holder(&net, &q, req, 8, 1, 0);
  int to_hold[1] = {hold->idx};
  for (int i = 0; i < 7; i++)
    sn_start(&net, req[i], to_hold, 1);
  sn_run(&net, net.now + 150, NULL, NULL);
  uint64_t before[8];
  sn_start(&net, req[7], to_hold, 1);
  for (int i = 0; i < 8; i++)
    before[i] = sent_to(&net, hold, req[i]);
  sn_run(&net, net.now + 200, NULL, NULL);
  *late += sent_to(&net, hold, req[7]) - before[7];
  for (int i = 0; i < 7; i++)
    *early += sent_to(&net, hold, req[i]) - before[i];
  CHECK_NET(&net, 1);
  sn_free(&net);
}

/* Four runs of the test's seed, pooled: one run's ratio spreads too
 * wide to tell the rule from its absence (1.66 to 1.96 times the others'
 * mean over STITCH_TEST_SEED 1 to 100, 0.99 to 1.67 when a requester far
 * behind took one slot like any other). */
static void scenario_behind_first(void) {
  uint64_t late = 0, early = 0, seed = test_seed;
  for (uint64_t k = 0; k < 4; k++) {
    test_seed = seed * 4 + k;
    behind_run(&late, &early);
  }
  test_seed = seed;
  printf("behind_first: in 200 ms (4 runs) the holder sent the requester "
         "furthest behind %" PRIu64 " bytes, the 7 others %.0f each\n",
         late, (double)early / 7);
  /* Pooled: 1.79 to 1.94 times the others' mean (STITCH_TEST_SEED 1 to
   * 60); 1.34 to 1.65 when a requester far behind took one slot. */
  ASSERT(100 * late * 7 >= 172 * early);
}

/* A lone holder of version 1 (told its uplink's rate UP_TOLD, 0: not)
 * and 16 requesters of its region that start together, undialable: they
 * fetch from it, and from each other only once punched through it. */
static sn_node *serving_16(sn_net *net, const sn_params *q, sn_node **req,
                           uint64_t up_told) {
  sn_node *hold = lone_holder(net, q, req, 16, 0, up_told);
  int to_hold[1] = {hold->idx};
  for (int i = 0; i < 16; i++)
    sn_start(net, req[i], to_hold, 1);
  return hold;
}

/* A holder whose links each go at a 1/LINK_DIV of its uplink (10: as a
 * paced connection does once it has shared the uplink, docs/swarm.md
 * "Serving as many as fill the uplink"), and 16 requesters of its
 * region: it serves as many at once as fill its uplink (fetch.c
 * fill_window), told the uplink's rate (config.up_bytes_per_s; UP_TOLD)
 * or probing for it (fill_estimate). The bytes it moves in a second,
 * after a second's start, the slots it then has, and in how many of
 * that second's 20 steps of 50 ms it had CORE_SERVE_SLOTS. */
static uint64_t fill_moved(unsigned link_div, int up_told, uint32_t *slots,
                           unsigned *at_least) {
  sn_params q = default_params;
  q.bw_local = q.up_bw / link_div;
  q.max_peers = 24;
  sn_net net;
  sn_node *req[16];
  sn_node *hold =
      serving_16(&net, &q, req, up_told ? (uint64_t)q.up_bw * 1000 : 0);
  sn_run(&net, net.now + 1000, NULL, NULL);
  uint64_t before = 0, after = 0;
  for (int i = 0; i < 16; i++)
    before += sent_to(&net, hold, req[i]);
  stitch_swarm_stats st;
  *at_least = 0;
  for (int k = 0; k < 20; k++) {
    sn_run(&net, net.now + 50, NULL, NULL);
    stitch_swarm_get_stats(hold->sw, &st);
    *at_least += st.serve_slots == CORE_SERVE_SLOTS;
  }
  for (int i = 0; i < 16; i++)
    after += sent_to(&net, hold, req[i]);
  *slots = st.serve_slots;
  CHECK_NET(&net, 1);
  sn_free(&net);
  return after - before;
}

/* Links at a tenth of the uplink. Told, the holder moves 0.80 to 0.95 of
 * its uplink (STITCH_TEST_SEED 1 to 200): a window that moves 80 to 95 %
 * changes nothing, so where the slots settle sets it. Not told, it
 * probes its way there: 0.69 to 0.98 with 9 to 16 slots; 0.39 to 0.69,
 * with 4, when a node not told kept 4. */
static void scenario_fill(void) {
  uint32_t slots_told, slots_untold;
  unsigned four;
  uint64_t told = fill_moved(10, 1, &slots_told, &four);
  uint64_t untold = fill_moved(10, 0, &slots_untold, &four);
  uint64_t full = (uint64_t)default_params.up_bw * 1000;
  printf("fill: in a second the holder moved %.2f of its uplink with %u "
         "slots told it, %.2f with %u not\n",
         (double)told / (double)full, slots_told,
         (double)untold / (double)full, slots_untold);
  ASSERT(slots_told > CORE_SERVE_SLOTS);
  ASSERT(slots_untold > CORE_SERVE_SLOTS);
  ASSERT(told * 10 >= full * 7);
  ASSERT(untold * 10 >= full * 6);
}

/* Links at the uplink's rate: four fill it, and a holder not told the
 * rate must find no room by probing (fill_estimate): its probes fail,
 * come ever more seldom, and leave it at 4 most of the time: in 14 to 16
 * of the 20 steps, moving 0.97 to 0.99 of its uplink (STITCH_TEST_SEED 1
 * to 200). A probe kept would hold 6 from then on. */
static void scenario_fill_full(void) {
  uint32_t slots;
  unsigned four;
  uint64_t moved = fill_moved(1, 0, &slots, &four);
  uint64_t full = (uint64_t)default_params.up_bw * 1000;
  printf("fill_full: in a second the holder moved %.2f of its uplink, "
         "with %u slots in %u of 20 steps\n",
         (double)moved / (double)full, CORE_SERVE_SLOTS, four);
  ASSERT(four >= 12);
  ASSERT(moved * 10 >= full * 9);
}

/* An uplink that becomes slower: links at the uplink's rate, a holder
 * not told it, and after a second the uplink halves (a household now
 * sharing a home link). Each window then moves half the estimate, so
 * the holder adds slots up to CORE_SERVE_SLOTS_MAX, each requester at a
 * sliver of the uplink; after CORE_FILL_SHORT such windows the estimate
 * comes down to what the uplink moves (fetch.c fill_lower) and the slots
 * start again from 4. Three seconds after the drop (STITCH_TEST_SEED 1
 * to 200): the estimate at 0.47 to 0.54 of the old rate, 4.4 to 9.6
 * slots over the last second's 20 steps (median 4.7; probes add some).
 * Without the rule: the estimate at 0.93 to 1.07 and 16 slots in every
 * step (seeds 1 to 20). */
static void scenario_fill_drop(void) {
  sn_params q = default_params;
  q.up_bw /= 4; /* 500 KB/s: the requesters want 4 s of it */
  q.bw_local = q.up_bw;
  q.max_peers = 24;
  sn_net net;
  sn_node *req[16];
  sn_node *hold = serving_16(&net, &q, req, 0);
  sn_run(&net, net.now + 1000, NULL, NULL);
  stitch_swarm_stats st;
  stitch_swarm_get_stats(hold->sw, &st);
  uint64_t full = (uint64_t)q.up_bw * 1000; /* bytes/s */
  double before = (double)st.up_bytes_per_s / (double)full;
  hold->up_bw = q.up_bw / 2;
  sn_run(&net, net.now + 2000, NULL, NULL);
  unsigned slots = 0;
  for (int k = 0; k < 20; k++) {
    sn_run(&net, net.now + 50, NULL, NULL);
    stitch_swarm_get_stats(hold->sw, &st);
    slots += st.serve_slots;
  }
  double after = (double)st.up_bytes_per_s / (double)full;
  printf("fill_drop: estimate %.2f of the old uplink before it halved, "
         "%.2f after; %.1f slots on average over the last 20 steps\n",
         before, after, slots / 20.0);
  CHECK_NET(&net, 1);
  sn_free(&net);
  ASSERT(before >= 0.9);
  ASSERT(after >= 0.4 && after <= 0.6);
  ASSERT(slots <= 20 * 12);
}

/* The unsent bytes a driver lets a write leave before it asks the core
 * for more (stitch_swarm_lowat): an eighth of the write, never under 16
 * KiB, so that a 64 KiB chunk is not taken while the one before it still
 * waits whole (docs/swarm.md "One core, several drivers"). */
static void scenario_lowat(void) {
  ASSERT_UEQ(stitch_swarm_lowat(512u << 10), 64u << 10);
  ASSERT_UEQ(stitch_swarm_lowat(1u << 20), 128u << 10);
  ASSERT_UEQ(stitch_swarm_lowat(64u << 10), STITCH_SWARM_LOWAT_MIN);
  ASSERT_UEQ(stitch_swarm_lowat(1), STITCH_SWARM_LOWAT_MIN);
  ASSERT(stitch_swarm_lowat(64u << 10) < 64u << 10);
}

/* The seed's first round goes unasked: at a new version every neighbour
 * gets its share with the manifest, a BITFIELD, HAVE and REQUEST sooner
 * (seed.c seed_on_manifest, seed_offer). Two nodes of the seed's region:
 * every chunk of v1 leaves the seed in that round, so it hears no REQUEST
 * for any, and the first chunk is at a node one link's latency and its
 * bytes after the publish. */
static int first_chunk(sn_net *net, void *arg) {
  (void)arg;
  return net->node[1].rx_frames[WIRE_CHUNK] + net->node[3].rx_frames[WIRE_CHUNK] >
         0;
}

static void scenario_seed_push(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 3);
  /* n2 ("us") is never started: the seed's region only, n1 and n3. */
  sn_start(&net, seed, NULL, 0);
  int told1[1] = {0}, told3[2] = {0, 1};
  sn_start(&net, &net.node[1], told1, 1);
  sn_start(&net, &net.node[3], told3, 2);
  sn_run(&net, net.now + 2000, NULL, NULL);
  uint64_t asked = seed->rx_frames[WIRE_REQUEST];
  publish(&net, seed, 1);
  CHECK_NET(&net, sn_run(&net, net.now + DEADLINE_MS, first_chunk, NULL));
  uint64_t first = net.now - publish_ms[1];
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  /* The manifest's bytes and the chunk's at the seed's upload, shared by
   * the two links. */
  uint64_t bytes_ms = 2 * (ver[1].man_len + ver[1].m->objects[0].chunks[0].size) /
                      default_params.up_bw;
  printf("seed_push: v1's first chunk at a node %" PRIu64
         " ms after the publish (links of %u ms, the manifest and chunk %" PRIu64
         " ms); the seed was asked for %" PRIu64 " chunks\n",
         first, default_params.lat_local, bytes_ms,
         seed->rx_frames[WIRE_REQUEST] - asked);
  CHECK_NET(&net, seed->rx_frames[WIRE_REQUEST] == asked);
  /* Asked for, it came 4 latencies later: BITFIELD, HAVE, REQUEST, and
   * the seed was asked for every chunk (45 ms, 258 requests). */
  CHECK_NET(&net, first <= 2 * default_params.lat_local + bytes_ms);
  sn_free(&net);
}

/* A chunk of the newest version goes on unasked to a neighbour of the
 * region that holds none yet (fetch.c push_near), saving it the HAVE and
 * the REQUEST. A line of five nodes of the seed's region, each told only
 * of the one before it (n1 of the seed): the seed's first round all goes
 * to n1, over a slow uplink, so that each node's BITFIELD (it wants v1
 * and holds none) is there before its neighbour's first chunk. Each of
 * n2 to n5 gets its first chunk before any REQUEST of its has arrived
 * anywhere; without push_near each asked first. */
static void scenario_push_near(void) {
  sn_net net;
  sn_params p = default_params;
  p.seed = test_seed;
  sn_init(&net, &p, &swarm_pk, &swarm_sk);
  sn_node *seed = sn_add(&net, "eu", 1, 1);
  seed->cfg.node_pk = swarm_pk;
  seed->cfg.node_sk = swarm_sk;
  seed->up_bw = 50; /* bytes per ms: a chunk in 60 ms */
  sn_start(&net, seed, NULL, 0);
  for (int i = 1; i <= 5; i++) {
    int before[1] = {i - 1};
    sn_start(&net, sn_add(&net, "eu", 0, 1), before, 1);
  }
  sn_run(&net, net.now + 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  int unasked = 0;
  for (int i = 2; i <= 5; i++)
    unasked += net.node[i].first_chunk_unasked == 1;
  printf("push_near: %d of n2..n5 got their first chunk unasked (n2..n5: "
         "%d %d %d %d)\n",
         unasked, net.node[2].first_chunk_unasked,
         net.node[3].first_chunk_unasked, net.node[4].first_chunk_unasked,
         net.node[5].first_chunk_unasked);
  CHECK_NET(&net, unasked == 4);
  sn_free(&net);
}

static void scenario_fanout_once(void) {
  stitch_digest fp;
  scenario_fanout(0, &fp);
}

static void scenario_determinism(void) {
  stitch_digest a, b;
  scenario_fanout(1, &a);
  scenario_fanout(1, &b);
  printf("determinism: the fan-out run twice with seed %" PRIu64
         " gives %s fingerprints\n",
         test_seed, memcmp(a.b, b.b, 32) == 0 ? "identical" : "DIFFERENT");
  ASSERT_MEM_EQ(a.b, b.b, 32);
}

/* Runs one scenario in a child process, so that a failure (which exits)
 * does not hide the others. STITCH_SWARM_ONLY=name runs just that one. */
/* Not run by default (STITCH_SWARM_ONLY=sweep): the fan-out of the anchor
 * to 16 nodes for several pipelining depths and neighbour counts, for
 * docs/swarm.md. Each run must still end bit-exact. */
static void scenario_sweep(void) {
  static const unsigned pipes[] = {1, 2, 4, 8}, peers[] = {4, 8, 12};
  printf("sweep: 16 nodes, v1 (anchor, 65 chunks); columns: pipeline, "
         "max_peers, v1 done (ms after publish), seed up / needed, "
         "nodes down / needed\n");
  for (size_t a = 0; a < sizeof(pipes) / sizeof(pipes[0]); a++)
    for (size_t b = 0; b < sizeof(peers) / sizeof(peers[0]); b++) {
      sn_params q = default_params;
      q.pipeline = pipes[a];
      q.max_peers = peers[b];
      sn_net net;
      sn_node *seed = build(&net, &q, 16);
      for (int i = 0; i < net.n_nodes; i++)
        i == 0 ? sn_start(&net, seed, NULL, 0)
               : start_node(&net, &net.node[i]);
      sn_run(&net, 50, NULL, NULL);
      publish(&net, seed, 1);
      run_until_all_at(&net, 1);
      check_all_exact(&net, 1);
      stitch_swarm_stats ss;
      sn_stats(seed, &ss);
      uint64_t need = needed_bytes(&net, 1), down = 0;
      for (int i = 1; i < net.n_nodes; i++) {
        stitch_swarm_stats st;
        sn_stats(&net.node[i], &st);
        down += st.bytes_down;
      }
      printf("sweep: %u %2u %6" PRIu64 " %.2f %.2f\n", pipes[a], peers[b],
             last_apply_ms(&net, 1) - publish_ms[1],
             (double)ss.bytes_up / (double)need,
             (double)down / (double)need);
      sn_free(&net);
    }
}

/* A dial the driver reports failed (refused: nothing listens there) is
 * tried again after the backoff, 2 s then 4 s, not after the 5 s connect
 * timeout the core waits out when it hears nothing. The test plays the
 * driver: it answers each CONNECT to "nowhere" with
 * stitch_swarm_dial_failed and records when the CONNECTs come. */
static void scenario_dial_failed(void) {
  sn_net net;
  build(&net, &default_params, 1);
  sn_node *n = &net.node[1];
  sn_start(&net, n, NULL, 0);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_swarm_add_peer_addr(n->sw, "nowhere", "eu"), d);
  /* No control byte in an address or a region: they go to peers (whose
   * decoders refuse them) and into log lines. */
  ASSERT_EQ(stitch_swarm_add_peer_addr(n->sw, "a:1\nforged", "eu"),
            STITCH_EINVAL);
  ASSERT_EQ(stitch_swarm_add_peer_addr(n->sw, "a:1", "e\x1bu"), STITCH_EINVAL);
  stitch_swarm_config bad = n->cfg;
  snprintf(bad.region, sizeof(bad.region), "us\r");
  stitch_swarm *none = NULL;
  stitch_swarm_io io = sn_io(n);
  ASSERT_EQ(stitch_swarm_new(&bad, &io, &none, &d), STITCH_EINVAL);
  ASSERT(none == NULL && strstr(d.msg, "control byte") != NULL);
  stitch_swarm_dial_failed(n->sw, "nowhere", 0);   /* not being dialed */
  stitch_swarm_dial_failed(n->sw, "elsewhere", 0); /* unknown */
  stitch_swarm_dial_failed(n->sw, NULL, 0);
  uint64_t at[4];
  size_t k = 0;
  for (uint64_t t = 0; t <= 20000 && k < 4; t += 50) {
    stitch_swarm_tick(n->sw, t);
    stitch_swarm_action a;
    for (stitch_swarm_next_action(n->sw, &a); a.kind != STITCH_SWARM_NONE;
         stitch_swarm_next_action(n->sw, &a)) {
      if (a.kind == STITCH_SWARM_CONNECT && strcmp(a.addr, "nowhere") == 0) {
        at[k++] = t;
        stitch_swarm_dial_failed(n->sw, a.addr, t);
      }
    }
  }
  printf("dial_failed: CONNECTs at");
  for (size_t i = 0; i < k; i++)
    printf(" %" PRIu64, at[i]);
  printf(" ms\n");
  ASSERT_EQ(k, 4);
  /* Each retry waits its backoff (2, 4, 8 s), give or take one
   * neighbour-upkeep beat (1 s), and well under timeout + backoff. */
  for (size_t i = 1; i < 4; i++) {
    uint64_t wait = 1000ull << i, gap = at[i] - at[i - 1];
    ASSERT(gap >= wait && gap <= wait + 1100);
  }
  ASSERT(at[1] - at[0] < 5000);
  sn_free(&net);
}

/* A node with no address of its own (behind a NAT) whose every dial
 * comes to nothing (among full nodes; here, 100 addresses that refuse)
 * backs off its dialing as a whole after CORE_DIAL_STREAK (8) in a row:
 * the per-address backoff alone (2 s doubling to 64 s) would dial these
 * 100 about 500 times in 60 s, as a node with an address still does.
 * While it holds no link it still dials every 2 s or so. */
static void scenario_dial_storm(void) {
  sn_net net;
  build(&net, &default_params, 0);
  sn_node *n = sn_add(&net, "eu", 0, 0); /* no address: dial-out only */
  sn_start(&net, n, NULL, 0);
  stitch_diag d = {{0}};
  for (int i = 0; i < 100; i++) {
    char a[32];
    snprintf(a, sizeof(a), "nowhere%d", i);
    ASSERT_OK(stitch_swarm_add_peer_addr(n->sw, a, "eu"), d);
  }
  size_t dials = 0;
  uint64_t last = 0, gap_max = 0;
  for (uint64_t t = 0; t <= 60000; t += 50) {
    stitch_swarm_tick(n->sw, t);
    stitch_swarm_action a;
    for (stitch_swarm_next_action(n->sw, &a); a.kind != STITCH_SWARM_NONE;
         stitch_swarm_next_action(n->sw, &a)) {
      if (a.kind != STITCH_SWARM_CONNECT)
        continue;
      dials++;
      if (dials > 8 && t - last > gap_max)
        gap_max = t - last;
      last = t;
      stitch_swarm_dial_failed(n->sw, a.addr, t);
    }
  }
  printf("dial_storm: %zu dials in 60 s, longest pause %" PRIu64 " ms\n",
         dials, gap_max);
  ASSERT(dials >= 30 && dials <= 60);
  ASSERT(gap_max <= 2600); /* 2 s, and one neighbour-upkeep beat */
  sn_free(&net);
}

/* Is there a link from node A to node B (A dialed) open now? */
static int linked_from(const sn_net *net, int a, int b) {
  for (size_t i = 0; i < net->n_conn; i++)
    if (net->conn[i].open && net->conn[i].d[0].from == a &&
        net->conn[i].d[0].to == b)
      return 1;
  return 0;
}

/* Nodes that cannot be dialed (behind a NAT: no address) still link to a
 * full node: it takes CORE_DIALOUT_ROOM of them beyond its limits, then
 * drops its newest link from a node that can be dialed for a further one,
 * at most once per CORE_EVICT_MS. Here a node T with max_peers 2 is at
 * its limit with links from ten dialable nodes of its region (10: 2 + 4
 * inbound slack + 4 room); five undialable nodes that know only T dial
 * it. Pointed elsewhere, they link to the dialable nodes T names, so not
 * all need T in the end; without the drops none would get in, T being
 * full. */
static void scenario_dialout_room(void) {
  sn_net net;
  sn_params p = default_params;
  p.max_peers = 2;
  build(&net, &p, 0);
  sn_node *t = sn_add(&net, "eu", 0, 1);
  int dialable[10], hidden[5];
  for (int i = 0; i < 10; i++)
    dialable[i] = sn_add(&net, "eu", 0, 1)->idx;
  for (int i = 0; i < 5; i++)
    hidden[i] = sn_add(&net, "eu", 0, 0)->idx;
  sn_start(&net, t, NULL, 0);
  for (int i = 0; i < 10; i++)
    sn_start(&net, &net.node[dialable[i]], &t->idx, 1);
  sn_run(&net, 5000, NULL, NULL);
  stitch_swarm_stats st;
  stitch_swarm_get_stats(t->sw, &st);
  unsigned before = st.peers;
  for (int i = 0; i < 5; i++)
    sn_start(&net, &net.node[hidden[i]], &t->idx, 1);
  sn_run(&net, 30000, NULL, NULL);
  int in = 0;
  for (int i = 0; i < 5; i++)
    in += linked_from(&net, hidden[i], t->idx);
  stitch_swarm_get_stats(t->sw, &st);
  printf("dialout_room: T held %u links from dialable nodes, then %d of 5 "
         "undialable nodes linked to it (%u links in all)\n",
         before, in, st.peers);
  ASSERT(before >= 8);
  ASSERT(in >= 3);
  sn_free(&net);
}

/* Hole punching (docs/swarm.md "Hole punching"): two nodes behind NATs
 * (no listen address; swarm_net.h lets nothing dial in except the other
 * side of a punch), each told of the seed and of R alone, link through R:
 * A asks R, R passes the ask to B with A's address as R sees it, both
 * dial, and the two dials make one connection. Without the punch they
 * could never link. Then a version reaches all four bit for bit. */
static void scenario_punch(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *r = sn_add(&net, "eu", 0, 1);
  sn_node *a = sn_add(&net, "eu", 0, 0);
  sn_node *b = sn_add(&net, "eu", 0, 0);
  int known[2] = {seed->idx, r->idx};
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, r, known, 1);
  sn_start(&net, a, known, 2);
  sn_start(&net, b, known, 2);
  sn_run(&net, 20000, NULL, NULL);
  int ab = linked_from(&net, a->idx, b->idx) || linked_from(&net, b->idx, a->idx);
  stitch_swarm_stats sa, sb, sr;
  sn_stats(a, &sa);
  sn_stats(b, &sb);
  sn_stats(r, &sr);
  printf("punch: A and B (both behind NATs) linked through R: %s; asks %"
         PRIu64 " + %" PRIu64 ", punch dials %" PRIu64 " + %" PRIu64
         ", linked %" PRIu64 " + %" PRIu64 ", R relayed %" PRIu64
         "; %" PRIu64 " connections from two punch dials\n",
         ab ? "yes" : "no", sa.punch_asked, sb.punch_asked, sa.punch_dialed,
         sb.punch_dialed, sa.punch_linked, sb.punch_linked, sr.punch_relayed,
         net.punches_opened);
  CHECK_NET(&net, ab);
  CHECK_NET(&net, net.punches_opened == 1);
  CHECK_NET(&net, sa.punch_linked + sb.punch_linked == 2);
  /* Every punch dialed ended linked or failed, or is under way. */
  CHECK_NET(&net, sa.punch_dialed <= sa.punch_linked + sa.punch_failed + 2 &&
                      sb.punch_dialed <= sb.punch_linked + sb.punch_failed + 2);
  CHECK_NET(&net, sa.punch_refused + sb.punch_refused == 0);
  CHECK_NET(&net, sr.punch_relayed >= 2);
  CHECK_NET(&net, sa.peers == 3 && sb.peers == 3);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  check_all_exact(&net, 1);
  /* Linked, each still under PUNCH_WANT links to NATed nodes: they ask
   * on, but R has nobody else to offer and they back off; nothing more
   * is dialed. */
  uint64_t dialed = sa.punch_dialed + sb.punch_dialed;
  sn_run(&net, net.now + 60000, NULL, NULL);
  sn_stats(a, &sa);
  sn_stats(b, &sb);
  CHECK_NET(&net, sa.punch_dialed + sb.punch_dialed == dialed);
  CHECK_NET(&net, sa.punch_asked + sb.punch_asked < 40);
  sn_free(&net);
}

/* Fan-in at a relay (issue 35): one relay R and FANIN_N nodes behind
 * NATs that know only the seed and R, started at once, all wanting links
 * to each other. Each asks R at its own pace, so R passes many asks on in
 * the same second, and chance decides how many go to one node: before
 * the send cap (punch.h PUNCH_SEND_PER_S), R sent one node ASKED for four
 * askers and then that node's own answer, or the node answered four and
 * then asked, a fifth PUNCH in a second, charged to an honest peer (in
 * some storm of the first 2 s, in 6 of 24 seeds). So FANIN_STORMS storms,
 * each from a seed of its own, 3 s each (the last to 60 s, to see the
 * NATed nodes link): no honest node may drop a PUNCH (SCORE_PUNCH_FLOOD)
 * or greylist anyone, and every NATed node holds PUNCH_WANT punched links
 * at the end. */
#define FANIN_N 29 /* with the seed and R, SN_MAX_NODES less one */
#define FANIN_STORMS 32

typedef struct fanin_run {
  uint64_t dropped, grey, relayed, linked, failed;
  int charging; /* nodes that dropped a PUNCH */
  int pairs, least; /* NATed pairs linked; fewest at one NATed node */
} fanin_run;

static void fanin_storm(uint64_t seed, uint64_t run_ms, fanin_run *out) {
  sn_params p = default_params;
  p.seed = seed;
  p.max_peers = FANIN_N + 4; /* R and the seed hold every NATed node */
  sn_net net;
  sn_init(&net, &p, &swarm_pk, &swarm_sk);
  sn_node *sd = sn_add(&net, "eu", 1, 1);
  sd->cfg.node_pk = swarm_pk;
  sd->cfg.node_sk = swarm_sk;
  sn_node *r = sn_add(&net, "eu", 0, 1);
  sn_node *nat[FANIN_N];
  for (int i = 0; i < FANIN_N; i++)
    nat[i] = sn_add(&net, "eu", 0, 0);
  int known[2] = {sd->idx, r->idx};
  sn_start(&net, sd, NULL, 0);
  sn_start(&net, r, known, 1);
  for (int i = 0; i < FANIN_N; i++)
    sn_start(&net, nat[i], known, 2);
  sn_run(&net, run_ms, NULL, NULL);
  memset(out, 0, sizeof(*out));
  out->least = FANIN_N;
  for (int i = 0; i < net.n_nodes; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    out->dropped += st.punch_dropped;
    out->charging += st.punch_dropped > 0;
    out->grey += st.greylisted;
    out->relayed += st.punch_relayed;
    out->linked += st.punch_linked;
    out->failed += st.punch_failed;
  }
  for (int i = 0; i < FANIN_N; i++) {
    int n = 0;
    for (int j = 0; j < FANIN_N; j++)
      n += j != i && (linked_from(&net, nat[i]->idx, nat[j]->idx) ||
                      linked_from(&net, nat[j]->idx, nat[i]->idx));
    out->pairs += n;
    out->least = n < out->least ? n : out->least;
  }
  out->pairs /= 2;
  if (out->dropped != 0 || out->grey != 0)
    sn_dump_all(&net);
  sn_free(&net);
}

static void scenario_punch_fanin(void) {
  uint64_t dropped = 0, grey = 0;
  int charged_storms = 0;
  fanin_run f;
  for (int k = 0; k < FANIN_STORMS; k++) {
    fanin_storm(test_seed + (uint64_t)k, k + 1 < FANIN_STORMS ? 3000 : 60000,
                &f);
    dropped += f.dropped;
    grey += f.grey;
    charged_storms += f.dropped > 0;
    if (f.dropped > 0)
      printf("punch_fanin: storm %d (seed %" PRIu64 "): %" PRIu64
             " PUNCHes dropped and charged at %d honest nodes\n",
             k, test_seed + (uint64_t)k, f.dropped, f.charging);
  }
  printf("punch_fanin: %d storms of %d NATed nodes behind one relay: "
         "PUNCHes past %d a second from one peer dropped and charged %"
         PRIu64 " (in %d storms), greylisted %" PRIu64 "; the last, 60 s: "
         "%d NATed pairs linked (each node at least %d), punches linked %"
         PRIu64 ", failed %" PRIu64 ", PUNCHes relayed %" PRIu64 "\n",
         FANIN_STORMS, FANIN_N, PUNCH_RELAY_PER_S, dropped, charged_storms,
         grey, f.pairs, f.least, f.linked, f.failed, f.relayed);
  ASSERT_EQ(dropped, 0);
  ASSERT_EQ(grey, 0);
  ASSERT(f.least >= PUNCH_WANT);
}

/* The scopes of punch addresses (src/swarm/scope.c; docs/security.md
 * "Hole punching"), and which a node dials through a relay at a public,
 * a private and a named address. */
static void scenario_scope(void) {
  static const struct {
    const char *addr;
    addr_scope sc;
  } cases[] = {
      {"127.0.0.1:22", SCOPE_LOCAL},      {"127.255.0.9:1", SCOPE_LOCAL},
      {"0.0.0.0:80", SCOPE_LOCAL},        {"0.1.2.3:80", SCOPE_LOCAL},
      {"169.254.169.254:80", SCOPE_LOCAL}, {"224.0.0.251:5353", SCOPE_LOCAL},
      {"239.1.1.1:80", SCOPE_LOCAL},      {"255.255.255.255:80", SCOPE_LOCAL},
      {"240.0.0.1:80", SCOPE_LOCAL},      {"[::1]:22", SCOPE_LOCAL},
      {"[::]:22", SCOPE_LOCAL},           {"[::7f00:1]:22", SCOPE_LOCAL},
      {"[fe80::1]:22", SCOPE_LOCAL},      {"[fe80::1%eth0]:22", SCOPE_LOCAL},
      {"[2001:db8::1%2]:22", SCOPE_LOCAL}, {"[ff02::1]:22", SCOPE_LOCAL},
      {"[::ffff:127.0.0.1]:22", SCOPE_LOCAL},
      {"[::ffff:169.254.1.1]:22", SCOPE_LOCAL},
      {"localhost:22", SCOPE_LOCAL},      {"LocalHost.:22", SCOPE_LOCAL},
      {"db.localhost:5432", SCOPE_LOCAL}, {"::1:22", SCOPE_LOCAL},
      {":22", SCOPE_LOCAL},               {"[]:22", SCOPE_LOCAL},
      {"[::1:22", SCOPE_LOCAL},           {"[zz::1]:22", SCOPE_LOCAL},
      {"10.0.0.1:80", SCOPE_PRIVATE},     {"10.255.255.255:80", SCOPE_PRIVATE},
      {"172.16.0.1:80", SCOPE_PRIVATE},   {"172.31.255.1:80", SCOPE_PRIVATE},
      {"192.168.1.1:80", SCOPE_PRIVATE},  {"100.64.0.1:80", SCOPE_PRIVATE},
      {"100.127.255.254:80", SCOPE_PRIVATE}, {"[fd00::1]:80", SCOPE_PRIVATE},
      {"[fc00::1]:80", SCOPE_PRIVATE},    {"[fec0::1]:80", SCOPE_PRIVATE},
      {"[::ffff:10.1.2.3]:80", SCOPE_PRIVATE},
      {"172.15.0.1:80", SCOPE_PUBLIC},    {"172.32.0.1:80", SCOPE_PUBLIC},
      {"100.63.0.1:80", SCOPE_PUBLIC},    {"100.128.0.1:80", SCOPE_PUBLIC},
      {"192.169.0.1:80", SCOPE_PUBLIC},   {"203.0.113.7:7000", SCOPE_PUBLIC},
      {"8.8.8.8:53", SCOPE_PUBLIC},       {"[2001:db8::1]:7000", SCOPE_PUBLIC},
      {"[::ffff:8.8.8.8]:53", SCOPE_PUBLIC}, {"[fbff::1]:80", SCOPE_PUBLIC},
      {"n3.nat", SCOPE_NAME},             {"node.example:7000", SCOPE_NAME},
      {"127.1:22", SCOPE_NAME},           {"0x7f.0.0.1:22", SCOPE_NAME},
      {"2130706433:22", SCOPE_NAME},      {"notlocalhost:22", SCOPE_NAME},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    addr_scope sc = scope_of(cases[i].addr);
    if (sc != cases[i].sc)
      printf("scope_of(\"%s\"): %s, want %s\n", cases[i].addr,
             scope_name(sc), scope_name(cases[i].sc));
    ASSERT_EQ(sc, cases[i].sc);
  }
  /* Through a relay at a public address: public targets only. */
  const char *pub = "203.0.113.7:7000", *priv = "10.77.0.2:7000";
  ASSERT(scope_punch_ok("198.51.100.9:40000", pub));
  ASSERT(!scope_punch_ok("127.0.0.1:22", pub));
  ASSERT(!scope_punch_ok("192.168.1.1:80", pub));
  ASSERT(!scope_punch_ok("100.64.0.1:80", pub));
  ASSERT(!scope_punch_ok("[fd00::1]:80", pub));
  ASSERT(!scope_punch_ok("router.lan:80", pub));
  /* Through one at a private address (netlab's 10.77/16): private ones
   * too, never a local one. */
  ASSERT(scope_punch_ok("10.79.3.2:40000", priv));
  ASSERT(scope_punch_ok("198.51.100.9:40000", priv));
  ASSERT(!scope_punch_ok("127.0.0.1:22", priv));
  ASSERT(!scope_punch_ok("[fe80::1]:22", priv));
  ASSERT(!scope_punch_ok("router.lan:80", priv));
  /* A relay at a loopback address vouches for nothing private. */
  ASSERT(!scope_punch_ok("10.0.0.1:80", "127.0.0.1:7000"));
  /* Hosts that name their nodes (this harness, stitch-sim). */
  ASSERT(scope_punch_ok("n3.nat", "n2"));
  ASSERT(!scope_punch_ok("localhost:22", "n2"));
  ASSERT(!scope_punch_ok("10.0.0.1:80", "n2"));
  printf("scope: %zu addresses judged; a private target only through a "
         "relay at a private address\n",
         sizeof(cases) / sizeof(cases[0]));
}

/* stitch_swarm_drain (src/swarm/host.c) hands each action to its
 * operation, and takes and drops one whose operation is NULL;
 * stitch_swarm_find_version finds what stitch_swarm_versions holds and
 * nothing else. */
typedef struct drain_seen {
  unsigned connect, close, apply, flags;
  char addr[STITCH_SWARM_ADDR_MAX];
} drain_seen;

static void seen_connect(void *user, const char *addr, unsigned flags) {
  drain_seen *d = user;
  d->flags = flags;
  d->connect++;
  snprintf(d->addr, sizeof(d->addr), "%s", addr);
}
static void seen_close(void *user, uint32_t id) {
  ((drain_seen *)user)->close++;
}
static void seen_apply(void *user, uint64_t version, uint32_t object) {
  ((drain_seen *)user)->apply++;
}

static void scenario_drain(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 1);
  sn_start(&net, seed, NULL, 0);
  for (uint64_t v = 1; v <= 2; v++)
    publish(&net, seed, v);
  const stitch_vref *refs;
  ASSERT_EQ(stitch_swarm_versions(seed->sw, &refs), 2);
  ASSERT(stitch_swarm_find_version(seed->sw, 1) == &refs[0]);
  ASSERT(stitch_swarm_find_version(seed->sw, 2) == &refs[1]);
  ASSERT(stitch_swarm_find_version(seed->sw, 0) == NULL);
  ASSERT(stitch_swarm_find_version(seed->sw, 3) == NULL);
  sn_node *n = &net.node[1];
  n->cfg.listen[0] = 0; /* behind a NAT: it dials from its fixed port */
  sn_start(&net, n, NULL, 0);
  ASSERT(stitch_swarm_find_version(n->sw, 1) == NULL);
  stitch_diag d = {{0}};
  ASSERT_OK(stitch_swarm_add_peer_addr(n->sw, "nowhere", "eu"), d);
  drain_seen seen = {0};
  const stitch_swarm_host ops = {&seen, seen_connect, seen_close, seen_apply};
  size_t taken = 9;
  uint64_t t = 0;
  for (; t <= 2000 && seen.connect == 0; t += 50) {
    stitch_swarm_tick(n->sw, t);
    ASSERT_EQ(stitch_swarm_drain(n->sw, &ops, &taken), 0);
  }
  ASSERT_EQ(seen.connect, 1);
  ASSERT_EQ(taken, 1);
  ASSERT_EQ(seen.close + seen.apply, 0);
  ASSERT(strcmp(seen.addr, "nowhere") == 0);
  ASSERT_EQ(seen.flags, STITCH_SWARM_DIAL_FIXED); /* the action's .flags */
  ASSERT_EQ(stitch_swarm_drain(n->sw, &ops, &taken), 0);
  ASSERT_EQ(taken, 0);
  /* Refused: dialed again after its backoff, to a host that drops it. */
  stitch_swarm_dial_failed(n->sw, "nowhere", t);
  const stitch_swarm_host none = {NULL, NULL, NULL, NULL};
  size_t dropped = 0;
  for (; t <= 20000 && dropped == 0; t += 50) {
    stitch_swarm_tick(n->sw, t);
    ASSERT_EQ(stitch_swarm_drain(n->sw, &none, &dropped), 0);
  }
  ASSERT_EQ(dropped, 1);
  stitch_swarm_action a;
  stitch_swarm_next_action(n->sw, &a);
  ASSERT_EQ(a.kind, STITCH_SWARM_NONE);
  printf("drain: one CONNECT taken, one dropped by a host without "
         "operations\n");
  sn_free(&net);
}

/* A link's send buffer grows to a manifest's size as the manifests go
 * out, and is given back once drained (core.c out_reset): a node holds
 * one per link, and at 10,000 simulated nodes the kept buffers were a
 * third of the memory. */
static int out_step(sn_net *net, void *arg) {
  size_t *max_cap = arg;
  for (int i = 0; i < net->n_nodes; i++)
    for (size_t k = 0; net->node[i].alive && k < net->node[i].sw->n_peers; k++)
      if (net->node[i].sw->peers[k].out.cap > *max_cap)
        *max_cap = net->node[i].sw->peers[k].out.cap;
  return 0;
}

static void scenario_out_kept(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 8);
  for (int i = 0; i < net.n_nodes; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  size_t grew = 0;
  for (uint64_t v = 1; v <= 3; v++) {
    publish(&net, seed, v);
    sn_run(&net, net.now + 300, out_step, &grew);
  }
  run_until_all_at(&net, 3);
  sn_run(&net, net.now + 1000, NULL, NULL);
  check_all_exact(&net, 3);
  size_t kept = 0, links = 0;
  for (int i = 0; i < net.n_nodes; i++)
    for (size_t k = 0; k < net.node[i].sw->n_peers; k++) {
      const peer *p = &net.node[i].sw->peers[k];
      if (p->state != PEER_READY)
        continue;
      links++;
      ASSERT_EQ(p->out_off, p->out.len); /* drained */
      kept = p->out.cap > kept ? p->out.cap : kept;
    }
  printf("out buffers: grew to %zu B while the manifests went out; "
         "%zu ready links drained keep at most %zu B (limit %d)\n",
         grew, links, kept, CORE_OUT_KEEP);
  ASSERT(grew > CORE_OUT_KEEP); /* the case is exercised */
  ASSERT(links > 0);
  ASSERT(kept <= CORE_OUT_KEEP);
  sn_free(&net);
}

static const sw_scenario scenarios[] = {
    {"fanout", scenario_fanout_once},
    {"out_kept", scenario_out_kept},
    {"dial_storm", scenario_dial_storm},
    {"dialout_room", scenario_dialout_room},
    {"punch", scenario_punch},
    {"punch_fanin", scenario_punch_fanin},
    {"scope", scenario_scope},
    {"corrupt", scenario_corrupt},
    {"corrupt_store", scenario_corrupt_store},
    {"flood", scenario_flood},
    {"forged", scenario_forged},
    {"late", scenario_late},
    {"leave", scenario_leave},
    {"pass_wanted", scenario_pass_wanted},
    {"depth", scenario_depth},
    {"one_region", scenario_one_region},
    {"endgame", scenario_endgame},
    {"seed_push", scenario_seed_push},
    {"push_near", scenario_push_near},
    {"behind_first", scenario_behind_first},
    {"fill", scenario_fill},
    {"fill_full", scenario_fill_full},
    {"fill_drop", scenario_fill_drop},
    {"lowat", scenario_lowat},
    {"determinism", scenario_determinism},
    {"dial_failed", scenario_dial_failed},
    {"drain", scenario_drain},
    {"sweep", scenario_sweep},
};

int main(void) {
  return sw_main("test_swarm", scenarios,
                 sizeof(scenarios) / sizeof(scenarios[0]));
}
