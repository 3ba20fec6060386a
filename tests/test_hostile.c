/* test_hostile.c: members that misbehave, in memory (swarm_net.h,
 * docs/security.md "Hostile members"). Each attacker holds a valid ticket
 * (or needs none, in an open swarm) and runs a real core whose frames a
 * rewriter bends: a liar, a slow server, a pusher of chunks nobody asked
 * for, a spammer of HAVEs and manifests about versions that do not exist
 * or are stale, an eclipse by 30 % of an open swarm, members that go
 * silent holding slots, and 1,000 hostile links at one node. Each
 * scenario runs the same swarm without the attacker and with it, checks
 * that the honest nodes converge bit for bit within HOSTILE_FACTOR of the
 * time without it (virtual time), and prints the figures. */
#include "swarm_fixture.h"

#include "swarm/core_internal.h"
#include "swarm/wire.h"

/* Honest nodes converge within this factor of the time without the
 * attacker (the figures printed are far below it). */
#define HOSTILE_FACTOR 3.0
#define RELINK_MS 1000 /* an attacker dials again this often */

typedef struct attack {
  const char *name;
  sn_evil kind;
  int n_evil;
  int listen;        /* attackers accept dials (others may dial them) */
  uint32_t up_bw;    /* attackers' uplink, bytes per ms (0: default) */
  int preload;       /* attackers hold every version from the start */
  int open;          /* an open swarm: attackers show no ticket */
  int victim_only;   /* attackers link to node 1 only (else every node) */
  int from_v1;       /* REPEAT starts at v1's publish (else once all hold
                        v1) */
  uint64_t every;    /* REPEAT's pace (0: line rate) */
  void (*frames)(dbuf *out); /* REPEAT's frames */
  unsigned max_peers;
  uint64_t tail_ms;  /* run on after convergence (scores and greylists) */
} attack;

typedef struct outcome {
  uint64_t took_ms; /* v1's and v2's times from publish to the last node */
  uint64_t greylisted, grey_refused, unasked, bans;
  uint64_t evil_links; /* attackers' links honest cores still hold */
  uint64_t honest_links_of_victim;
  uint64_t relinks;
} outcome;

/* ---- Attackers' frames ------------------------------------------------ */

static dbuf frames_buf;

static void put_msg(dbuf *out, const wire_msg *m) {
  ASSERT_EQ(wire_encode(out, m), 0);
}

/* Every chunk of v1 as CHUNK frames; with CORRUPT, each with one byte
 * flipped. */
static void chunk_frames(dbuf *out, int corrupt) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  for (uint32_t o = 0; o < ver[1].m->n_objects; o++)
    for (uint64_t c = 0; c < ver[1].m->objects[o].n_chunks; c++) {
      const sn_chunk *ch =
          sn_store_get(&trainer_chunks, &ver[1].m->objects[o].chunks[c].hash);
      ASSERT(ch != NULL && ch->len > 0);
      uint8_t *bad = NULL;
      if (corrupt) {
        bad = malloc(ch->len);
        ASSERT(bad != NULL);
        memcpy(bad, ch->p, ch->len);
        bad[ch->len / 2] ^= 0x40;
      }
      memset(m, 0, sizeof(*m));
      m->type = WIRE_CHUNK;
      m->version = 1;
      m->object = o;
      m->chunk = c;
      m->data = corrupt ? bad : ch->p;
      m->data_len = ch->len;
      put_msg(out, m);
      free(bad);
    }
  free(m);
}

/* Every chunk of v1: valid, and held by all once v1 is. */
static void push_frames(dbuf *out) { chunk_frames(out, 0); }

/* Every chunk of v1, corrupt: pushed unasked from v1's publish on, before
 * the victims hold the chunks, so each is checked against its hash, not
 * dropped as a copy. */
static void push_bad_frames(dbuf *out) { chunk_frames(out, 1); }

/* A HAVE and a BITFIELD of version 999, which does not exist, a HAVE of
 * version 0, long gone, and v1's manifest again: well-formed, and worth
 * nothing. */
static void spam_frames(dbuf *out) {
  static uint8_t ones[64];
  memset(ones, 0xff, sizeof(ones));
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  m->type = WIRE_HAVE;
  m->version = 999;
  put_msg(out, m);
  m->version = 0;
  put_msg(out, m);
  memset(m, 0, sizeof(*m));
  m->type = WIRE_BITFIELD;
  m->version = 999;
  m->nbits = 8 * sizeof(ones);
  m->data = ones;
  m->data_len = sizeof(ones);
  put_msg(out, m);
  memset(m, 0, sizeof(*m));
  m->type = WIRE_MANIFEST;
  m->data = ver[1].man;
  m->data_len = ver[1].man_len;
  put_msg(out, m);
  free(m);
}

/* ---- Running one swarm ------------------------------------------------ */

typedef struct run_state {
  const attack *a;
  int first_evil, n_evil;
  uint64_t next_relink;
  uint64_t relinks;
  uint64_t v; /* the version all must reach */
} run_state;

static int linked(sn_net *net, int a, int b) {
  for (size_t k = 0; k < net->n_conn; k++) {
    const sn_conn *c = &net->conn[k];
    if (c->open && ((c->d[0].from == a && c->d[0].to == b) ||
                    (c->d[0].from == b && c->d[0].to == a)))
      return 1;
  }
  return 0;
}

/* N's core holds a ready link to the member with key K. */
static int ready_with(const sn_node *n, const stitch_pubkey *k) {
  for (size_t i = 0; i < n->sw->n_peers; i++)
    if (n->sw->peers[i].state == PEER_READY &&
        memcmp(n->sw->peers[i].node.b, k->b, sizeof(k->b)) == 0)
      return 1;
  return 0;
}

/* Attackers dial their targets again, every RELINK_MS, where they have no
 * link: a greylisted one is refused at its AUTH. */
static void relink(sn_net *net, run_state *rs) {
  if (net->now < rs->next_relink)
    return;
  rs->next_relink = net->now + RELINK_MS;
  for (int e = rs->first_evil; e < rs->first_evil + rs->n_evil; e++)
    for (int t = 1; t < rs->first_evil; t++) {
      if (rs->a->victim_only && t != 1)
        continue;
      if (!linked(net, e, t)) {
        sn_link(net, &net->node[e], &net->node[t]);
        rs->relinks++;
      }
    }
}

static int step_done(sn_net *net, void *arg) {
  run_state *rs = arg;
  if (rs->n_evil > 0)
    relink(net, rs);
  return rs->v != 0 && all_at(net, &rs->v);
}

static void run_swarm(const attack *a, int on, int n_honest, outcome *out) {
  memset(out, 0, sizeof(*out));
  sn_net net;
  sn_params p = default_params;
  p.max_peers = a->max_peers;
  sn_node *seed = build(&net, &p, n_honest);
  int first = net.n_nodes, n_evil = on ? a->n_evil : 0;
  frames_buf.len = 0;
  frames_buf.max = SIZE_MAX / 2;
  if (a->frames != NULL)
    a->frames(&frames_buf);
  for (int k = 0; k < n_evil; k++) {
    sn_node *e = sn_add(&net, "eu", 0, a->listen);
    e->evil = a->kind;
    e->up_bw = a->up_bw;
    e->evil_buf = frames_buf.p;
    e->evil_len = frames_buf.len;
    e->evil_every = a->every;
    e->evil_from = UINT64_MAX;
    if (a->open)
      e->cfg.ticket_len = 0;
    if (a->preload)
      for (uint64_t v = 1; v <= 2; v++)
        store_version(e, v);
  }
  sn_start(&net, seed, NULL, 0);
  if (a->open) {
    stitch_policy pol = {swarm_pk, 1, 1, 0, NULL};
    uint8_t *pb;
    size_t pl;
    stitch_diag d = {{0}};
    ASSERT_OK(stitch_policy_sign(&pol, &swarm_sk, &pb, &pl, &d), d);
    ASSERT_OK(stitch_swarm_set_policy(seed->sw, pb, pl, net.now, &d), d);
    free(pb);
  }
  for (int i = 1; i <= n_honest; i++)
    start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  run_state rs = {a, first, n_evil, 0, 0, 0};
  for (int k = 0; k < n_evil; k++)
    sn_start(&net, &net.node[first + k], NULL, 0);
  relink(&net, &rs);
  sn_run(&net, net.now + 50, NULL, NULL);
  for (uint64_t v = 1; v <= 2; v++) {
    if ((v == 1) == (a->from_v1 != 0))
      for (int k = 0; k < n_evil; k++)
        net.node[first + k].evil_from = net.now;
    publish(&net, seed, v);
    rs.v = v;
    CHECK_NET(&net, sn_run(&net, net.now + DEADLINE_MS, step_done, &rs));
    out->took_ms += last_apply_ms(&net, v) - publish_ms[v];
  }
  rs.v = 0;
  sn_run(&net, net.now + a->tail_ms, step_done, &rs);
  check_all_exact(&net, 2);
  for (int i = 1; i <= n_honest; i++) {
    stitch_swarm_stats st;
    sn_stats(&net.node[i], &st);
    out->greylisted += st.greylisted;
    out->grey_refused += st.grey_refused;
    out->unasked += st.unasked_chunks;
    out->bans += st.bans;
  }
  for (size_t k = 0; k < net.n_conn; k++) {
    const sn_conn *c = &net.conn[k];
    /* A dial still in its handshake (refused within a round trip or two)
     * is not a link held. */
    if (!c->open || net.now - c->opened_ms < 1000)
      continue;
    int x = c->d[0].from, y = c->d[0].to;
    int ex = x >= first, ey = y >= first;
    out->evil_links += ex != ey;
    out->honest_links_of_victim +=
        (x == 1 && !ey && y != 0) || (y == 1 && !ex && x != 0);
  }
  out->relinks = rs.relinks;
  sn_free(&net);
}

/* Runs A's swarm without and with the attacker; checks and prints. */
static void compare(const attack *a, int n_honest, outcome *with) {
  outcome base;
  run_swarm(a, 0, n_honest, &base);
  run_swarm(a, 1, n_honest, with);
  double ratio = (double)with->took_ms / (double)(base.took_ms ? base.took_ms : 1);
  printf("%s: %d honest nodes at v2 bit-exact in %" PRIu64
         " ms (v1 + v2 from publish), %" PRIu64
         " ms without the attacker: %.2fx; greylisted %" PRIu64
         ", greylisted keys refused %" PRIu64 " (of %" PRIu64
         " dials), unasked chunks %" PRIu64 ", bans %" PRIu64
         ", attackers' links still held %" PRIu64 "\n",
         a->name, n_honest, with->took_ms, base.took_ms, ratio,
         with->greylisted, with->grey_refused, with->relinks, with->unasked,
         with->bans, with->evil_links);
  ASSERT(base.greylisted == 0); /* honest nodes never greylist each other */
  ASSERT(ratio <= HOSTILE_FACTOR);
}

/* ---- The attacks ------------------------------------------------------ */

/* 1. A liar that advertises every chunk and serves none (no CHUNK, no
 * REJECT: requests go late, stall and time out); and a member that holds
 * every chunk and serves at 1 KB/s. */
static void scenario_liar(void) {
  attack a = {.name = "liar (advertises all, serves none)",
              .kind = SN_EVIL_LIAR, .n_evil = 1, .tail_ms = 20000};
  outcome o;
  /* Within HOSTILE_FACTOR of the time without it (compare); it is not
   * greylisted yet: each node charges it about 14 of the 50 points
   * (docs/security.md "Not defended yet"). */
  compare(&a, 6, &o);
  attack s = {.name = "slow (holds all, serves at 1 KB/s)",
              .kind = SN_EVIL_SLOW, .n_evil = 1, .up_bw = 1, .preload = 1,
              .tail_ms = 20000};
  compare(&s, 6, &o);
}

/* 2. A member that pushes valid chunks nobody asked for (v1's, once every
 * node holds v1) at line rate. */
static void scenario_push(void) {
  attack a = {.name = "pusher (v1's chunks unasked, line rate)",
              .kind = SN_EVIL_REPEAT, .n_evil = 1, .frames = push_frames,
              .tail_ms = 5000};
  outcome o;
  compare(&a, 6, &o);
  ASSERT(o.greylisted >= 6);
  ASSERT(o.unasked < 6 * 100); /* each victim takes about 70, then drops it */
  ASSERT_UEQ(o.evil_links, 0);
}

/* 2b. A pusher whose chunks fail their hashes: what a node pushes
 * unasked (push_near, push_across, the seed's first round) is checked
 * like what it asked for, and its sender banned at the first bad one. */
static void scenario_push_bad(void) {
  attack a = {.name = "pusher of corrupt chunks (v1's, unasked, from its publish)",
              .kind = SN_EVIL_REPEAT, .n_evil = 1, .frames = push_bad_frames,
              .from_v1 = 1, .tail_ms = 5000};
  outcome o;
  compare(&a, 6, &o);
  ASSERT(o.bans >= 6);
  ASSERT_UEQ(o.evil_links, 0);
}

/* 3. HAVE, BITFIELD and MANIFEST frames about a version that does not
 * exist and stale ones, 4 frames a millisecond (under the message rate
 * limit, CORE_RATE_PER_S), from v1's publish on. */
static void scenario_spam(void) {
  attack a = {.name = "spam (HAVE/BITFIELD of v999 and v0, v1's manifest again)",
              .kind = SN_EVIL_REPEAT, .n_evil = 1, .frames = spam_frames,
              .every = 1, .from_v1 = 1, .tail_ms = 5000};
  outcome o;
  compare(&a, 6, &o);
  ASSERT(o.greylisted >= 6);
  ASSERT(o.grey_refused >= 1);
  ASSERT_UEQ(o.evil_links, 0);
}

/* 4. An eclipse: 3 of an open swarm's 10 members (30 %) are the
 * attacker's. They dial the victim (node 1) at once and again, accept
 * dials, advertise every chunk and serve none, and tell of no one but
 * each other. The victim keeps CORE_OUTBOUND_MIN links of its own
 * dialing and converges: each request to a liar is outrun, and the
 * endgame asks a third peer when a second request is late too. Before
 * that, a chunk asked of two liars waited 15 s at some seeds (15 times
 * slower), and the stalls charged then greylisted the liars; now an
 * outrun liar's holdings are forgotten after a few requests, so it is
 * greylisted at most seeds (26 of test seeds 1-30) but not all, and
 * greylisting is printed, not asserted. max_peers 3: few slots to
 * fill. */
static void scenario_eclipse(void) {
  attack a = {.name = "eclipse (30% of an open swarm at one victim)",
              .kind = SN_EVIL_ECLIPSE, .n_evil = 3, .listen = 1, .open = 1,
              .victim_only = 1, .max_peers = 3, .tail_ms = 20000};
  /* Three seeds: the endgame's asks of three liars in turn held a chunk
   * 15 s at some (fetch.c ask_before), so one seed says little. */
  uint64_t first = test_seed;
  for (uint64_t k = 0; k < 3; k++) {
    test_seed = first + k;
    outcome o;
    compare(&a, 7, &o);
    printf("eclipse (seed %" PRIu64 "): the victim holds %" PRIu64
           " links to honest nodes, %" PRIu64 " to the attacker's\n",
           test_seed, o.honest_links_of_victim, o.evil_links);
    ASSERT(o.honest_links_of_victim >= 1);
  }
  test_seed = first;
}

/* 5. Members that complete the handshake and then go silent, holding
 * slots: 6 of them at every honest node, max_peers 3. */
static void scenario_silent(void) {
  attack a = {.name = "silent (6 members holding slots)",
              .kind = SN_EVIL_SILENT, .n_evil = 6, .max_peers = 3,
              .tail_ms = CORE_DEAD_MS + 5000};
  outcome o;
  compare(&a, 6, &o);
  ASSERT(o.greylisted >= 6);
  ASSERT_UEQ(o.evil_links, 0);
}

/* ---- 1,000 hostile links at one node ----------------------------------- */

/* The memory a node's core holds is bounded however many connect: its
 * peer slots are capped (core.c slots_max), and each slot's buffers are.
 * The cap stated: every slot at its struct plus a read buffer of a small
 * frame (WIRE_SMALL_MAX) and as much queued to it, plus 1 MiB for the
 * versions, the plan and the tables at this test's scale. */
static int64_t stated_cap(unsigned max_peers, unsigned cross) {
  size_t slots = 2 * (size_t)max_peers + CORE_INBOUND_SLACK + CORE_FULL_MAX +
                 CORE_SAME_EXTRA + cross + CORE_OUTBOUND_MIN +
                 CORE_CLOSING_MAX;
  return (int64_t)(slots * (sizeof(peer) + 2 * (size_t)WIRE_SMALL_MAX) +
                   (1u << 20));
}

typedef struct thousand_state {
  int first_evil, n_evil, links, opened;
  uint64_t v;
} thousand_state;

static int thousand_step(sn_net *net, void *arg) {
  thousand_state *ts = arg;
  for (int k = 0; k < 4 && ts->opened < ts->links; k++, ts->opened++) {
    sn_node *e = &net->node[ts->first_evil + ts->opened % ts->n_evil];
    sn_link(net, e, &net->node[1]);
  }
  return ts->opened == ts->links && all_at(net, &ts->v);
}

static int64_t hostile_links(int links, stitch_swarm_stats *vs,
                             uint64_t *refused) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 3);
  static const sn_evil kinds[4] = {SN_EVIL_LIAR, SN_EVIL_SILENT,
                                   SN_EVIL_REPEAT, SN_EVIL_REPEAT};
  int first = net.n_nodes, n_evil = 20;
  dbuf spam = {0}, push = {0};
  spam.max = push.max = SIZE_MAX / 2;
  spam_frames(&spam);
  push_frames(&push);
  for (int k = 0; k < n_evil; k++) {
    sn_node *e = sn_add(&net, "eu", 0, 0);
    e->evil = kinds[k % 4];
    e->evil_buf = k % 4 == 2 ? spam.p : push.p;
    e->evil_len = k % 4 == 2 ? spam.len : push.len;
    e->evil_every = k % 4 == 2 ? 1 : 0;
  }
  for (int i = 0; i <= 3; i++)
    i == 0 ? sn_start(&net, seed, NULL, 0) : start_node(&net, &net.node[i]);
  sn_run(&net, 50, NULL, NULL);
  publish(&net, seed, 1);
  run_until_all_at(&net, 1);
  for (int k = 0; k < n_evil; k++)
    sn_start(&net, &net.node[first + k], NULL, 0);
  sn_node *victim = &net.node[1];
  net.track_heap = 1;
  victim->heap = victim->heap_peak = victim->heap_io = 0;
  publish(&net, seed, 2);
  thousand_state ts = {first, n_evil, links, 0, 2};
  CHECK_NET(&net, sn_run(&net, net.now + DEADLINE_MS, thousand_step, &ts));
  sn_run(&net, net.now + 2000, NULL, NULL);
  check_all_exact(&net, 2);
  sn_stats(victim, vs);
  *refused = net.refused_at_open;
  int64_t peak = victim->heap_peak;
  sn_free(&net);
  dbuf_free(&spam);
  dbuf_free(&push);
  return peak;
}

static void scenario_thousand(void) {
  stitch_swarm_stats v100, v1000;
  uint64_t r100, r1000;
  int64_t p100 = hostile_links(100, &v100, &r100);
  int64_t p1000 = hostile_links(1000, &v1000, &r1000);
  int64_t cap = stated_cap(8, 2);
  printf("1,000 hostile links at one node: its core kept at most %" PRId64
         " B (mallinfo2; 0 under ASan), %" PRId64
         " B with 100 links, the stated cap %" PRId64 " B; "
         "%" PRIu64 " refused at open (slots full), %" PRIu64
         " greylisted, %" PRIu64 " greylisted keys refused, %" PRIu64
         " handshakes refused in all; the victim at v2 bit-exact\n",
         p1000, p100, cap, r1000, v1000.greylisted, v1000.grey_refused,
         v1000.refused);
  ASSERT(p1000 < cap);
  ASSERT(v1000.greylisted >= 1);
}

/* ---- Hole punching (docs/security.md "Hole punching") ---------------- */

/* A key no node holds, for PUNCHes naming a member nobody is linked to. */
static stitch_pubkey nobody_key(void) {
  stitch_pubkey k;
  memset(k.b, 0x5c, sizeof(k.b));
  return k;
}

/* What a hostile member floods with: asks to be punched with anyone and
 * with a member the relay has no link to (to a relay), and, as if it
 * were a relay, an ask and an acceptance naming a made-up member at an
 * address of its choosing (to a NATed node). */
static void punch_frames(dbuf *out) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  stitch_pubkey k = nobody_key();
  m->type = WIRE_PUNCH;
  m->punch = WIRE_PUNCH_ASK;
  strcpy(m->addr, "victim:80"); /* a relay ignores what an asker claims */
  put_msg(out, m);
  m->node = k;
  put_msg(out, m);
  m->punch = WIRE_PUNCH_ASKED;
  put_msg(out, m);
  m->punch = WIRE_PUNCH_ACCEPTED;
  put_msg(out, m);
  free(m);
}

/* Undialable honest nodes A and B (behind NATs) and a relay R; a member E
 * (no address either, so R treats it as one that may ask) floods R and A
 * with PUNCHes at 800 a second for 30 s, and a stranger X with no ticket
 * does the same to R and B. R relays at most PUNCH_RELAY_PER_S a second
 * of E's and nothing of X's, never for a member it has no link to; A and
 * B dial at most PUNCH_INFLIGHT addresses at once, and at most one ask a
 * PUNCH_TAKE_MS from each relay; every honest node gets the version bit
 * for bit, and A and B still link to each other. */
static void scenario_punch(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *r = sn_add(&net, "eu", 0, 1);
  sn_node *a = sn_add(&net, "eu", 0, 0);
  sn_node *b = sn_add(&net, "eu", 0, 0);
  frames_buf.len = 0;
  frames_buf.max = SIZE_MAX / 2;
  punch_frames(&frames_buf);
  sn_node *ev[2];
  for (int k = 0; k < 2; k++) {
    ev[k] = sn_add(&net, "eu", 0, 0);
    ev[k]->evil = SN_EVIL_REPEAT;
    ev[k]->evil_buf = frames_buf.p;
    ev[k]->evil_len = frames_buf.len;
    ev[k]->evil_every = 5;
    ev[k]->evil_from = 0;
  }
  ev[1]->cfg.ticket_len = 0; /* a stranger: the swarm is closed */
  int known[2] = {seed->idx, r->idx};
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, r, known, 1);
  sn_start(&net, a, known, 2);
  sn_start(&net, b, known, 2);
  sn_start(&net, ev[0], NULL, 0);
  sn_start(&net, ev[1], NULL, 0);
  sn_link(&net, ev[0], r);
  sn_link(&net, ev[0], a);
  sn_link(&net, ev[1], r);
  sn_link(&net, ev[1], b);
  sn_run(&net, 200, NULL, NULL);
  publish(&net, seed, 1);
  uint64_t t0 = net.now;
  run_until_all_at(&net, 1);
  sn_run(&net, t0 + 30000, NULL, NULL);
  check_all_exact(&net, 1);
  stitch_swarm_stats sr, sa, sb;
  sn_stats(r, &sr);
  sn_stats(a, &sa);
  sn_stats(b, &sb);
  uint64_t secs = (net.now + 999) / 1000;
  int ab = linked(&net, a->idx, b->idx);
  printf("punch flood: in %" PRIu64 " s R relayed %" PRIu64 " PUNCHes and "
         "ignored %" PRIu64 "; A dialed %" PRIu64 " punches (ignored %" PRIu64
         "), B %" PRIu64 " (ignored %" PRIu64 "); A and B linked: %s; "
         "the stranger refused %" PRIu64 " time(s)\n",
         secs, sr.punch_relayed, sr.punch_ignored, sa.punch_dialed,
         sa.punch_ignored, sb.punch_dialed, sb.punch_ignored,
         ab ? "yes" : "no", sr.refused + sb.refused);
  /* E's ASKs: at most PUNCH_RELAY_PER_S a second reach the relay's
   * logic, and those naming nobody R holds are never passed on. Each
   * relayed PUNCH is an ask passed on or an answer passed back: two per
   * punch tried between A and B, one per ask of E's (to A or B). */
  CHECK_NET(&net, sr.punch_relayed <= 2 * PUNCH_RELAY_PER_S * secs);
  CHECK_NET(&net, sr.punch_ignored > 0);
  /* A node dials at most one ask a PUNCH_TAKE_MS from each relay (R,
   * and E posing as one), plus what it asked itself; here every ask's
   * dial goes nowhere, so each holds a slot PUNCH_WAIT_MS. */
  uint64_t bound = 2 * (secs * 1000 / PUNCH_TAKE_MS + PUNCH_INFLIGHT);
  CHECK_NET(&net, sa.punch_dialed <= bound);
  CHECK_NET(&net, sb.punch_dialed <= bound);
  CHECK_NET(&net, sa.punch_ignored > 0);
  /* E's punches for A go nowhere: each ends failed. */
  CHECK_NET(&net, sa.punch_failed >= 1 &&
                      sa.punch_dialed <= sa.punch_linked + sa.punch_failed +
                                             PUNCH_INFLIGHT);
  /* The stranger's frames never got past the handshake. */
  CHECK_NET(&net, sr.refused + sb.refused >= 2);
  /* E's PUNCHes past the rate are charged: R and A drop and greylist
   * it within its first second, and keep no link to it. */
  printf("punch flood: R dropped %" PRIu64 " of E's PUNCHes and greylisted %"
         PRIu64 ", A dropped %" PRIu64 " and greylisted %" PRIu64
         "; E linked to R: %s, to A: %s\n",
         sr.punch_dropped, sr.greylisted, sa.punch_dropped, sa.greylisted,
         ready_with(r, &ev[0]->cfg.node_pk) ? "yes" : "no",
         ready_with(a, &ev[0]->cfg.node_pk) ? "yes" : "no");
  CHECK_NET(&net, sr.punch_dropped > 0 && sa.punch_dropped > 0);
  CHECK_NET(&net, sr.greylisted >= 1 && sa.greylisted >= 1);
  CHECK_NET(&net, grey_key(&r->sw->grey, &ev[0]->cfg.node_pk, net.now));
  CHECK_NET(&net, grey_key(&a->sw->grey, &ev[0]->cfg.node_pk, net.now));
  CHECK_NET(&net, !ready_with(r, &ev[0]->cfg.node_pk));
  CHECK_NET(&net, !ready_with(a, &ev[0]->cfg.node_pk));
  /* Nobody honest was charged for a flood. */
  stitch_swarm_stats sb2;
  sn_stats(b, &sb2);
  CHECK_NET(&net, sb2.greylisted == 0);
  CHECK_NET(&net, ab);
  sn_free(&net);
}

/* What a member floods with when only answers are let through uncounted
 * (punch.c answers_ours): to a relay, A's ask accepted and declined; to
 * a NATed node, as if it were its relay, B accepted (at an address of its
 * choosing) and nobody declined. */
static void punch_answer_frames(dbuf *out, const stitch_pubkey *a,
                                const stitch_pubkey *b) {
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  m->type = WIRE_PUNCH;
  m->node = *a;
  m->punch = WIRE_PUNCH_ACCEPT;
  put_msg(out, m);
  m->punch = WIRE_PUNCH_DECLINE;
  put_msg(out, m);
  m->node = *b;
  m->punch = WIRE_PUNCH_ACCEPTED;
  strcpy(m->addr, "victim:80");
  put_msg(out, m);
  memset(m->node.b, 0, sizeof(m->node.b));
  m->punch = WIRE_PUNCH_DECLINED;
  m->addr[0] = 0;
  put_msg(out, m);
  free(m);
}

/* A node lets through uncounted only the answer to something it started
 * with that peer, once (issue 35: so that a relay's many honest answers
 * are never charged). A member E, behind a NAT, linked to the relay R and
 * to the NATed node A, floods both with answers at 800 a second for 30 s:
 * each answer matches at most one ask or ASKED of theirs, so E is still
 * charged, dropped and greylisted by both, and A and B still link. */
static void scenario_punch_answers(void) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *r = sn_add(&net, "eu", 0, 1);
  sn_node *a = sn_add(&net, "eu", 0, 0);
  sn_node *b = sn_add(&net, "eu", 0, 0);
  sn_node *e = sn_add(&net, "eu", 0, 0);
  frames_buf.len = 0;
  frames_buf.max = SIZE_MAX / 2;
  punch_answer_frames(&frames_buf, &a->cfg.node_pk, &b->cfg.node_pk);
  e->evil = SN_EVIL_REPEAT;
  e->evil_buf = frames_buf.p;
  e->evil_len = frames_buf.len;
  e->evil_every = 5;
  e->evil_from = 0;
  int known[2] = {seed->idx, r->idx};
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, r, known, 1);
  sn_start(&net, a, known, 2);
  sn_start(&net, b, known, 2);
  sn_start(&net, e, NULL, 0);
  sn_link(&net, e, r);
  sn_link(&net, e, a);
  sn_run(&net, 200, NULL, NULL);
  publish(&net, seed, 1);
  uint64_t t0 = net.now;
  run_until_all_at(&net, 1);
  sn_run(&net, t0 + 30000, NULL, NULL);
  check_all_exact(&net, 1);
  stitch_swarm_stats sr, sa, sb;
  sn_stats(r, &sr);
  sn_stats(a, &sa);
  sn_stats(b, &sb);
  int ab = linked(&net, a->idx, b->idx);
  printf("punch answers: R dropped %" PRIu64 " of E's PUNCHes and "
         "greylisted %" PRIu64 ", A dropped %" PRIu64 " and greylisted %"
         PRIu64 "; E linked to R: %s, to A: %s; A and B linked: %s; "
         "B dropped %" PRIu64 "\n",
         sr.punch_dropped, sr.greylisted, sa.punch_dropped, sa.greylisted,
         ready_with(r, &e->cfg.node_pk) ? "yes" : "no",
         ready_with(a, &e->cfg.node_pk) ? "yes" : "no", ab ? "yes" : "no",
         sb.punch_dropped);
  CHECK_NET(&net, sr.punch_dropped > 0 && sa.punch_dropped > 0);
  CHECK_NET(&net, grey_key(&r->sw->grey, &e->cfg.node_pk, net.now));
  CHECK_NET(&net, grey_key(&a->sw->grey, &e->cfg.node_pk, net.now));
  CHECK_NET(&net, !ready_with(r, &e->cfg.node_pk));
  CHECK_NET(&net, !ready_with(a, &e->cfg.node_pk));
  CHECK_NET(&net, sb.punch_dropped == 0 && sb.greylisted == 0);
  CHECK_NET(&net, ab);
  sn_free(&net);
}

/* A member E, as a relay, names two addresses to a NATed victim V that
 * dialed E at RELAY_AT: one on V's own host (loopback) and one on a
 * private network (10.0.0.9), each ask every 2.5 s (under the rate, with
 * E's own asks: nothing is charged), for 15 s. V sees nobody else, so
 * every punch it dials is one of E's. */
static void punch_scope_run(const char *relay_at, const char *seen_at,
                            stitch_swarm_stats *st) {
  sn_net net;
  sn_node *seed = build(&net, &default_params, 0);
  sn_node *v = sn_add(&net, "eu", 0, 0);
  sn_node *e = sn_add(&net, "eu", 0, 0);
  static const char *const targets[] = {"127.0.0.1:22", "10.0.0.9:80"};
  frames_buf.len = 0;
  frames_buf.max = SIZE_MAX / 2;
  wire_msg *m = calloc(1, sizeof(*m));
  ASSERT(m != NULL);
  m->type = WIRE_PUNCH;
  m->punch = WIRE_PUNCH_ASKED;
  for (int i = 0; i < 2; i++) {
    memset(m->node.b, 0x60 + i, sizeof(m->node.b)); /* nobody's */
    snprintf(m->addr, sizeof(m->addr), "%s", targets[i]);
    put_msg(&frames_buf, m);
  }
  free(m);
  e->evil = SN_EVIL_REPEAT;
  e->evil_buf = frames_buf.p;
  e->evil_len = frames_buf.len;
  e->evil_every = 2500;
  e->evil_from = 0;
  sn_start(&net, seed, NULL, 0);
  sn_start(&net, v, NULL, 0);
  sn_start(&net, e, NULL, 0);
  sn_open_as(&net, v->idx, e->idx, 0, relay_at, seen_at);
  sn_run(&net, 15000, NULL, NULL);
  sn_stats(v, st);
  CHECK_NET(&net, ready_with(v, &e->cfg.node_pk));
  sn_free(&net);
}

/* E at a public address: V dials neither address (no CONNECT at all). E
 * at a private one, as netlab's members are: V dials the private address,
 * as netlab's NATed pairs must, never the loopback one. */
static void scenario_punch_scope(void) {
  stitch_swarm_stats sp, sq;
  punch_scope_run("203.0.113.7:7000", "198.51.100.20:7000", &sp);
  punch_scope_run("10.77.0.12:7000", "10.79.4.2:7000", &sq);
  printf("punch scope: a victim of a relay at a public address dialed %"
         PRIu64 " punches, refused %" PRIu64 " addresses; at a private "
         "one, dialed %" PRIu64 ", refused %" PRIu64 "; dropped %" PRIu64
         ", greylisted %" PRIu64 "\n",
         sp.punch_dialed, sp.punch_refused, sq.punch_dialed, sq.punch_refused,
         sp.punch_dropped + sq.punch_dropped, sp.greylisted + sq.greylisted);
  ASSERT_EQ(sp.punch_dialed, 0);
  ASSERT(sp.punch_refused >= 2 * 5);
  ASSERT(sq.punch_dialed >= 1);
  ASSERT(sq.punch_refused >= 5);
  ASSERT_EQ(sp.punch_dropped + sq.punch_dropped, 0);
  ASSERT_EQ(sp.greylisted + sq.greylisted, 0);
}

static const sw_scenario scenarios[] = {
    {"liar", scenario_liar},             {"push", scenario_push},
    {"push_bad", scenario_push_bad},
    {"spam", scenario_spam},       {"eclipse", scenario_eclipse},
    {"silent", scenario_silent},   {"thousand", scenario_thousand},
    {"punch", scenario_punch},     {"punch_scope", scenario_punch_scope},
    {"punch_answers", scenario_punch_answers},
};

int main(void) {
  int rc = sw_main("test_hostile", scenarios,
                   sizeof(scenarios) / sizeof(scenarios[0]));
  dbuf_free(&frames_buf);
  return rc;
}
