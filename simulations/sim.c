/* sim.c: stitch-sim, the SimGrid driver of the swarm's protocol core
 * (docs/simulator.md).
 *
 * Every simulated node (and the seed) runs one unmodified stitch_swarm
 * core. The driver only moves bytes and carries out actions, as
 * src/net/driver.c does on real TCP:
 *
 * - A connection is two one-way pipes, each a byte stream: messages are
 *   taken in the order they were sent. Each message carries what
 *   stitch_swarm_peer_pending gave and costs its size in simulated bytes.
 *   How they move is the network's business: flows.c (SimGrid's max-min
 *   flows) or queue.c (link queues); driver.h compares them.
 * - Dialing is a small DIAL message to the listener, answered by ACCEPT or
 *   REFUSE (one round trip, as TCP's handshake); a close is a CLOSE message.
 * - Time is the simulation's clock in milliseconds; a core is ticked when
 *   stitch_swarm_wake says.
 * - Storage: a node's store is a bitset over the trajectory's chunk table
 *   (trajectory.c). The core does not hash (config.write_verifies):
 *   chunk_write compares a chunk with the table's bytes, which hash to
 *   its name, and refuses it otherwise, before it sets a bit.
 * - APPLY checks that every chunk of the object is held and that the
 *   object's base is what the node holds, then calls stitch_swarm_applied;
 *   tensors are not materialized (docs/simulator.md says why).
 * - Churn (churn.c plans it): a leaving node closes its connections as an
 *   ordinary CLOSE does and its core stops; a DIAL to it then fails as a
 *   connect to a dead stitchd does. A joiner starts a fresh core.
 *
 * Usage: stitch-sim SCENARIO.json [--json] [--plot DIR] [--trace FILE.csv]
 *                   [--steps DIR]
 *        stitch-sim SCENARIO.json --bounds BYTES[,BYTES...]
 * (--bounds prints the bound for versions of those sizes, as JSON, and
 * simulates nothing: tools/netlab's reference keys.)
 */
#include "driver.h"

#include <simgrid/actor.h>
#include <simgrid/engine.h>

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WARMUP_S SIM_WARMUP_S
#define POLL_S 0.05  /* the controller checks completion */
#define LINKS_HIST 256 /* take_snap's link counts, the last bin "or more" */

double now_s(const sim *s) {
  return s->net->now(s);
}

uint64_t now_ms(const sim *s) {
  return (uint64_t)floor(now_s(s) * 1e3 + 1e-6);
}

void die(const char *what) {
  fprintf(stderr, "stitch-sim: %s\n", what);
  exit(1);
}

void *sim_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (p == NULL)
    die("out of memory");
  return p;
}

/* Does [BUF, BUF + LEN) lie in one of the chunk table's buffers, which
 * live until the run ends? Then a message may point at it, uncopied. */
static int stable(const sim *s, const uint8_t *buf, size_t len) {
  size_t lo = 0, hi = s->n_stable;
  while (lo < hi) { /* the first buffer starting after BUF */
    size_t mid = (lo + hi) / 2;
    if (s->stable[mid].p <= buf)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && buf + len <= s->stable[lo - 1].p + s->stable[lo - 1].len;
}

static int span_cmp(const void *a, const void *b) {
  const uint8_t *x = ((const struct span *)a)->p;
  const uint8_t *y = ((const struct span *)b)->p;
  return x < y ? -1 : x > y;
}

/* Indexes the chunk table's buffers, and checks once that each hashes to
 * its name: io_write's comparison stands for the core's hash check. */
static void stable_make(sim *s) {
  const sim_chunks *t = &s->tr.chunks;
  s->stable = sim_calloc(t->n, sizeof(*s->stable));
  for (size_t i = 0; i < t->n; i++) {
    stitch_digest h;
    stitch_hash(t->buf[i], t->len[i], &h);
    if (memcmp(h.b, t->hash[i], 32) != 0)
      die("a chunk of the table does not hash to its name");
    s->stable[i] = (struct span){t->buf[i], t->len[i]};
  }
  s->n_stable = t->n;
  qsort(s->stable, s->n_stable, sizeof(*s->stable), span_cmp);
}

msg *msg_new(const sim *s, msg_kind kind, uint32_t c, const uint8_t *buf,
             size_t len) {
  int ref = len > 0 && stable(s, buf, len);
  msg *m = malloc(sizeof(*m) + (ref ? 0 : len));
  if (m == NULL)
    die("out of memory");
  m->kind = kind;
  m->conn = c;
  m->len = len;
  m->ref = ref ? buf : NULL;
  m->extra = 0;
  if (len && !ref)
    memcpy(m->data, buf, len);
  return m;
}

const uint8_t *msg_bytes(const msg *m) { return m->ref ? m->ref : m->data; }

/* A control message from node FROM to node TO. */
static void ctl_send(sim *s, int from, int to, msg_kind kind, uint32_t c) {
  /* A connection's first packet into a partition is lost, and so are its
   * retries while the cut lasts: the dialer's core times its CONNECT out
   * (its SYN's retransmission, 1 s on, would rarely beat that). */
  if (kind == MSG_DIAL && s->faults != NULL &&
      sim_path_cut(s, from, to, now_s(s))) {
    s->conn[c]->closed = 1;
    return;
  }
  s->net->ctl_send(s, from, to, kind, c);
}

/* ---- Connections ------------------------------------------------------ */

/* The link of N's core's peer PEER is at place I of conns. A later life's
 * core gives ids from 1 again: the newest link has the id. */
static void node_pos_set(node *n, uint32_t peer, size_t i) {
  if (peer >= n->n_pos) {
    size_t k = n->n_pos ? n->n_pos : 64;
    while (k <= peer)
      k *= 2;
    n->pos_of = realloc(n->pos_of, k * sizeof(*n->pos_of));
    if (n->pos_of == NULL)
      die("out of memory");
    memset(n->pos_of + n->n_pos, 0, (k - n->n_pos) * sizeof(*n->pos_of));
    n->n_pos = k;
  }
  n->pos_of[peer] = (uint32_t)i + 1;
}

void node_add_conn(node *n, uint32_t c, uint32_t peer) {
  if (n->n_conns == n->cap_conns) {
    n->cap_conns = n->cap_conns ? n->cap_conns * 2 : 16;
    n->conns = realloc(n->conns, n->cap_conns * sizeof(*n->conns));
    if (n->conns == NULL)
      die("out of memory");
  }
  if (peer != SIM_NO_PEER)
    node_pos_set(n, peer, n->n_conns);
  n->conns[n->n_conns++] = c;
}

/* N's core opened peer PEER on its connection CI. */
static void node_conn_opened(node *n, uint32_t ci, uint32_t peer) {
  for (size_t i = 0; i < n->n_conns; i++)
    if (n->conns[i] == ci)
      node_pos_set(n, peer, i);
}

/* Forgets connections closed on both sides of N's list. */
static void node_prune(sim *s, node *n) {
  size_t k = 0;
  for (size_t i = 0; i < n->n_conns; i++) {
    conn *c = s->conn[n->conns[i]];
    int side = side_of(c, n->idx);
    if (!c->closed || c->open[side] || c->d[side].nput > 0)
      n->conns[k++] = n->conns[i];
  }
  n->n_conns = k;
  memset(n->pos_of, 0, n->n_pos * sizeof(*n->pos_of));
  for (size_t i = 0; i < k; i++) { /* 0: its core never opened the peer */
    const conn *c = s->conn[n->conns[i]];
    if (c->peer[side_of(c, n->idx)] != 0)
      node_pos_set(n, c->peer[side_of(c, n->idx)], i);
  }
}

/* N's side of C is done: its core hears peer_close (unless TELL_CORE is 0,
 * when its core already dropped the peer), the other side hears CLOSE. */
static void conn_close(sim *s, node *n, uint32_t ci, int tell_core) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  if (!c->open[side])
    return;
  c->open[side] = 0;
  if (s->net->unlisten != NULL)
    s->net->unlisten(s, n, ci);
  if (tell_core)
    stitch_swarm_peer_close(n->sw, c->peer[side], now_ms(s));
  if (!c->closed) {
    c->closed = 1;
    /* A CLOSE follows the data already sent, as TCP's FIN does: the
     * queues network orders it after them (queue_ctl_send); the flows
     * network sends it once they are taken (flows.c). */
    if (s->net->close_after_data && c->d[side].nput > 0)
      c->fin[side] = 1;
    else
      ctl_send(s, n->idx, c->node[1 - side], MSG_CLOSE, ci);
  }
}

/* N's core knows the peer of C now: take what arrives on the pipe to N. */
static void pipe_listen(sim *s, node *n, uint32_t ci) {
  if (s->net->listen != NULL)
    s->net->listen(s, n, ci);
}

/* The longest message from node A to node B (driver.h MSG_SPAN_S): what
 * the narrowest of A's uplink, B's downlink and, between regions, the
 * backbone moves in MSG_SPAN_S. Node 0 is the seed (central mode's store
 * sends no messages on pipes). */
static size_t msg_max(const sim *s, int a, int b) {
  const sim_scenario *sc = &s->sc;
  const node *x = &s->node[a], *y = &s->node[b];
  double up = a != 0 ? sc->regions[x->region].up_mbps : sc->seed_up_mbps;
  double down = b != 0 ? sc->regions[y->region].down_mbps : sc->seed_down_mbps;
  double mbps = fmin(up, down);
  if (x->region != y->region)
    mbps = fmin(mbps, sc->inter_mbps);
  double bytes = mbps * 125e3 * MSG_SPAN_S;
  if (bytes >= PIPE_WINDOW)
    return PIPE_WINDOW;
  return bytes <= MSG_MIN ? MSG_MIN : (size_t)bytes;
}

static void dial(sim *s, node *n, const char *addr, unsigned flags) {
  int to = -1;
  if (addr[0] == 'n')
    to = atoi(addr + 1);
  if (to < 0 || to >= s->n_node || to == n->idx) {
    s->refused++;
    return;
  }
  if (flags & STITCH_SWARM_DIAL_PUNCH) {
    /* A hole punch, as netlab's NATs let it through (endpoint-independent
     * mapping, a new connection from outside dropped silently): the first
     * side's SYN is lost at the other's NAT but leaves a mapping at its
     * own; the second side's, sent within SIM_PUNCH_MS, passes that
     * mapping and makes the connection (TCP's simultaneous open). */
    node *t = &s->node[to];
    uint64_t now = now_ms(s);
    int k = -1;
    for (int i = 0; i < SIM_PUNCH_WAITING && k < 0; i++)
      if (t->punch_at[i] != 0 && t->punch_to[i] == n->idx &&
          now - t->punch_at[i] <= SIM_PUNCH_MS)
        k = i;
    if (k < 0) { /* the first: wait for the other side's */
      int old = 0;
      for (int i = 1; i < SIM_PUNCH_WAITING; i++)
        if (n->punch_at[i] < n->punch_at[old])
          old = i;
      n->punch_to[old] = to;
      n->punch_at[old] = now ? now : 1;
      return;
    }
    t->punch_at[k] = 0;
  }
  if (s->n_conn == s->cap_conn) {
    s->cap_conn = s->cap_conn ? s->cap_conn * 2 : 1024;
    s->conn = realloc(s->conn, s->cap_conn * sizeof(*s->conn));
    if (s->conn == NULL)
      die("out of memory");
  }
  uint32_t ci = (uint32_t)s->n_conn++;
  conn *c = sim_calloc(1, sizeof(*c));
  s->conn[ci] = c;
  c->node[0] = n->idx;
  c->node[1] = to;
  c->d[0].msg_max = msg_max(s, n->idx, to);
  c->d[1].msg_max = msg_max(s, to, n->idx);
  c->life = n->life;
  c->flags = flags;
  node_add_conn(n, ci, SIM_NO_PEER);
  ctl_send(s, n->idx, to, MSG_DIAL, ci);
}

/* ---- The io a core gets: a bitset over the chunk table ---------------- */

static int bit(const uint64_t *b, long i) { return (b[i >> 6] >> (i & 63)) & 1; }
static void set_bit(uint64_t *b, long i) { b[i >> 6] |= 1ull << (i & 63); }

static uint64_t io_random(void *user) {
  return sim_xorshift(&((node *)user)->rng);
}

static int io_has(void *user, const stitch_digest *h) {
  node *n = user;
  long i = sim_chunks_find(&n->sim->tr.chunks, h->b);
  return i >= 0 && bit(n->have, i);
}

static int io_read(void *user, const stitch_digest *h, const uint8_t **buf,
                   size_t *len) {
  node *n = user;
  const sim_chunks *t = &n->sim->tr.chunks;
  long i = sim_chunks_find(t, h->b);
  if (i < 0 || !bit(n->have, i))
    return STITCH_ENOTFOUND;
  *buf = t->buf[i];
  *len = t->len[i];
  return 0;
}

static void io_release(void *user, const uint8_t *buf, size_t len) {
  (void)user, (void)buf, (void)len; /* the table keeps every chunk */
}

/* STITCH_SIM_RAMP=1: a line on stderr each time node N comes to hold
 * its first chunk of version 1, or 10, 25, 50, 75, 90 or 100 % of them,
 * in seconds from that version's publish, with its ready links to its
 * own region then (simulations/ramp.py reads them): where a node's
 * downlink waits while a version spreads, and beside how many
 * neighbours. */
static void node_ramp(node *n) {
  const sim *s = n->sim;
  uint64_t k = ++n->ramp_held, all = s->ramp_n;
  static const unsigned pct[] = {10, 25, 50, 75, 90, 100};
  int mark = k == 1;
  for (size_t j = 0; j < sizeof(pct) / sizeof(pct[0]); j++)
    mark |= k == (all * pct[j] + 99) / 100;
  if (!mark)
    return;
  stitch_swarm_stats st;
  stitch_swarm_get_stats(n->sw, &st);
  fprintf(stderr, "ramp %d %s %" PRIu64 " %.5f %u\n", n->idx,
          s->sc.regions[n->region].name, k * 100 / all,
          now_s(s) - s->published[1], st.peers_same_region);
}

/* The core's check (config.write_verifies): the table's bytes hash to
 * the chunk's name (stable_make checked), so equal bytes are what a hash
 * check would accept, at a fraction of its cost. A chunk that came
 * uncopied (a link passes the table's bytes by reference, and the core
 * reads them in place) is the table's own. */
static int io_write(void *user, const stitch_digest *h, const uint8_t *buf,
                    size_t len) {
  node *n = user;
  const sim_chunks *t = &n->sim->tr.chunks;
  long i = sim_chunks_find(t, h->b);
  if (i < 0 || t->len[i] != len ||
      (buf != t->buf[i] && memcmp(t->buf[i], buf, len) != 0)) {
    n->bad_writes++;
    return STITCH_ECHECKSUM;
  }
  if (!bit(n->have, i)) {
    set_bit(n->have, i);
    n->stored++;
    if (n->sim->ramp_v1 != NULL && bit(n->sim->ramp_v1, i))
      node_ramp(n);
  }
  return 0;
}

/* Unix time: a fixed day plus the simulation's clock, so that runs
 * repeat. */
#define SIM_EPOCH_S 1800000000ull
static uint64_t io_unix_time(void *user) {
  node *n = user;
  return SIM_EPOCH_S + now_ms(n->sim) / 1000;
}

static void io_log(void *user, const char *line) {
  node *n = user;
  fprintf(stderr, "[%10.4f] n%d: %s\n", now_s(n->sim), n->idx, line);
}

static int io_manifest(void *user, const uint8_t *buf, size_t len) {
  (void)user, (void)buf, (void)len; /* the trajectory holds every one */
  return 0;
}

/* ---- Applying --------------------------------------------------------- */

/* Every chunk of (V, OBJ) held and the base matching: the node holds V. */
static int apply(sim *s, node *n, uint64_t v, uint32_t obj) {
  const stitch_vref *vr = stitch_swarm_find_version(n->sw, v);
  if (vr == NULL || obj >= vr->m->n_objects)
    return STITCH_ENOTFOUND;
  const stitch_object *ob = &vr->m->objects[obj];
  if (ob->kind != STITCH_OBJ_ANCHOR &&
      (ob->base_version != n->held ||
       memcmp(ob->base_id.b, n->held_id.b, 32) != 0))
    return STITCH_EBASE;
  for (uint64_t k = 0; k < ob->n_chunks; k++) {
    long i = sim_chunks_find(&s->tr.chunks, ob->chunks[k].hash.b);
    if (i < 0 || !bit(n->have, i))
      return STITCH_ENOTFOUND;
  }
  for (uint64_t k = 0; k < ob->n_chunks; k++) {
    long i = sim_chunks_find(&s->tr.chunks, ob->chunks[k].hash.b);
    if (!bit(n->needed, i)) {
      set_bit(n->needed, i);
      n->needed_n++;
    }
  }
  n->held = v;
  n->held_id = vr->id;
  /* A node that jumps over a version (a cumulative delta) holds what it
   * would have had: the skipped versions count as done now. */
  for (uint64_t k = 1; k <= v && k <= s->tr.count; k++)
    if (n->done[k] < 0) {
      n->done[k] = now_s(s);
      sim_busy_held(s, n, (unsigned)k);
    }
  return 0;
}

/* N's core's actions (stitch_swarm_drain). */
static void op_connect(void *user, const char *addr, unsigned flags) {
  node *n = user;
  dial(n->sim, n, addr, flags);
}

static void op_close(void *user, uint32_t peer) {
  node *n = user;
  sim *s = n->sim;
  for (size_t i = 0; i < n->n_conns; i++) {
    conn *c = s->conn[n->conns[i]];
    int side = side_of(c, n->idx);
    if (c->open[side] && c->peer[side] == peer) {
      conn_close(s, n, n->conns[i], 1);
      return;
    }
  }
}

static void op_apply(void *user, uint64_t version, uint32_t object) {
  node *n = user;
  sim *s = n->sim;
  if (apply(s, n, version, object) == 0) {
    stitch_swarm_applied(n->sw, version, &n->held_id, now_ms(s));
  } else {
    n->apply_errors++;
    stitch_swarm_apply_failed(n->sw, version, object, now_ms(s));
  }
}

/* Carries out every action N's core asks for. */
static void actions(node *n) {
  const stitch_swarm_host ops = {n, op_connect, op_close, op_apply};
  if (stitch_swarm_drain(n->sw, &ops, NULL) != 0)
    die("a core asked for STITCH_SWARM_DRAIN_MAX actions in a row");
}

/* Puts what N's core has for its side of connection CI on the wire, up
 * to the window. */
static void pipe_put(sim *s, node *n, uint32_t ci) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  pipe_ *p = &c->d[side];
  while (c->open[side]) {
    if (p->inflight >= PIPE_WINDOW || !s->net->pipe_ready(p)) {
      uint32_t id = c->peer[side];
      if (s->net->flushes_on_room && id < n->n_pos && n->pos_of[id] != 0)
        n->pos_of[id] |= POS_HELD; /* until pipe_flush */
      break;
    }
    const uint8_t *buf;
    size_t len;
    stitch_swarm_peer_pending(n->sw, c->peer[side], &buf, &len);
    if (len == 0)
      break;
    len = len < p->msg_max ? len : p->msg_max;
    msg *m = msg_new(s, MSG_DATA, ci, buf, len);
    n->wire_up += len;
    s->messages++;
    stitch_swarm_peer_sent(n->sw, c->peer[side], len);
    s->net->send(s, n, ci, m);
  }
}

void pipe_flush(sim *s, node *n, uint32_t ci) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  if (!c->open[side] || n->sw == NULL)
    return;
  if (c->peer[side] < n->n_pos) /* the window or the mark has room */
    n->pos_of[c->peer[side]] &= ~POS_HELD;
  size_t k; /* a peer its core does not list has nothing */
  const uint32_t *ids = stitch_swarm_sendable(n->sw, &k);
  for (size_t j = 0; j < k; j++)
    if (ids[j] == c->peer[side]) {
      pipe_put(s, n, ci);
      return;
    }
}

/* The places in N's conns after AFTER (-1: all) of the peers its core
 * lists as sendable, in order, into flush_at; returns how many. */
static size_t sendable_places(node *n, long after) {
  size_t k, m = 0;
  const uint32_t *ids = stitch_swarm_sendable(n->sw, &k);
  if (k > n->cap_flush) {
    n->cap_flush = k * 2;
    n->flush_at = realloc(n->flush_at, n->cap_flush * sizeof(*n->flush_at));
    if (n->flush_at == NULL)
      die("out of memory");
  }
  for (size_t j = 0; j < k; j++) {
    uint32_t i = ids[j] < n->n_pos ? n->pos_of[ids[j]] : 0;
    if (i == 0 || (i & POS_HELD) || (long)--i <= after)
      continue; /* no link, or one that cannot take bytes yet */
    size_t at = m++; /* insertion: a few places */
    for (; at > 0 && n->flush_at[at - 1] > i; at--)
      n->flush_at[at] = n->flush_at[at - 1];
    n->flush_at[at] = i;
  }
  return m;
}

/* Puts what N's core has for each peer on the wire, up to the window, in
 * the order of N's connections. Only those whose peers the core lists as
 * sendable are asked; the others would give nothing. A flush can list a
 * later peer (a chunk sent to one is passed to another): the places are
 * read again then, as asking every peer would have found it. */
static void flush(sim *s, node *n) {
  uint64_t gen = stitch_swarm_sendable_gen(n->sw);
  size_t k = sendable_places(n, -1), j = 0;
  while (j < k) {
    uint32_t i = n->flush_at[j++];
    pipe_put(s, n, n->conns[i]);
    if (stitch_swarm_sendable_gen(n->sw) != gen) {
      gen = stitch_swarm_sendable_gen(n->sw);
      k = sendable_places(n, i);
      j = 0;
    }
  }
}

/* ---- Input ------------------------------------------------------------ */

void on_ctl(sim *s, node *n, msg *m) {
  uint64_t t = now_ms(s);
  if (n->state == NODE_DOWN && m->kind == MSG_PUBLISH) {
    /* The trainer publishes into the store of a seed that is down: its
     * core hears of it when it starts again (node_restart). */
    const sim_version *v = &s->tr.v[m->conn];
    for (size_t k = 0; k < v->n_all; k++)
      set_bit(n->have, v->all[k]);
    return;
  }
  if (n->state == NODE_DOWN && m->kind == MSG_DIAL) {
    /* Killed, its host up: the kernel resets the connect (faults). */
    s->dials_unreach++;
    ctl_send(s, n->idx, s->conn[m->conn]->node[0], MSG_UNREACH, m->conn);
    return;
  }
  if (n->state != NODE_LIVE) {
    /* Nobody listens: the connect fails. A node that left (churn) is
     * taken to be gone with its host, so the connect gets no answer and
     * the dialer's core times its CONNECT out; here the dialer's side is
     * just marked closed. Anything else for a node that is not live is
     * dropped, as by a closed socket. */
    if (m->kind == MSG_DIAL || m->kind == MSG_UNREACH)
      s->conn[m->conn]->closed = 1;
    return;
  }
  if (m->kind == MSG_PUBLISH) { /* the trainer's store has it now */
    const sim_version *v = &s->tr.v[m->conn];
    for (size_t k = 0; k < v->n_all; k++)
      set_bit(n->have, v->all[k]);
    stitch_diag d = {{0}};
    if (stitch_swarm_add_manifest(n->sw, v->manifest, v->manifest_len, t,
                                  &d) != 0)
      die(d.msg);
    return;
  }
  conn *c = s->conn[m->conn];
  int side = side_of(c, n->idx);
  if ((m->kind == MSG_ACCEPT || m->kind == MSG_REFUSE ||
       m->kind == MSG_UNREACH) && c->life != n->life) {
    c->closed = 1; /* the answer to a dial of a life killed since */
    return;
  }
  if (m->kind == MSG_UNREACH) { /* our DIAL: refused or reset */
    char addr[24];
    c->closed = 1;
    snprintf(addr, sizeof(addr), "n%d%s", c->node[1],
             c->flags & STITCH_SWARM_DIAL_PUNCH ? ".nat" : "");
    stitch_swarm_dial_failed(n->sw, addr, t);
    return;
  }
  int punched = (c->flags & STITCH_SWARM_DIAL_PUNCH) != 0;
  if (m->kind == MSG_DIAL && n->nat && !punched &&
      !(s->nat_punch && s->node[c->node[0]].nat)) {
    /* Behind a NAT nothing comes in. netlab's NAT drops the SYN; the
     * driver refuses at once (the core backs off as for a refused
     * connect). No core knows a NATed node's address (it advertises
     * none), so no dial should come here: counted to show it. */
    n->nat_refused++;
    ctl_send(s, n->idx, c->node[0], MSG_UNREACH, m->conn);
    return;
  }
  if (m->kind == MSG_DIAL) {
    /* Inbound addresses are ephemeral, as TCP's are; a NATed node's
     * from its fixed port are the same for everyone, and a punch's is
     * the address this node dialed too. */
    char eph[40];
    if (punched || (s->node[c->node[0]].nat &&
                    (c->flags & STITCH_SWARM_DIAL_FIXED)))
      snprintf(eph, sizeof(eph), "n%d.nat", c->node[0]);
    else
      snprintf(eph, sizeof(eph), "n%d.%u", c->node[0], m->conn);
    if (c->closed || stitch_swarm_peer_open(n->sw, t, punched, eph,
                                            &c->peer[side]) != 0) {
      ctl_send(s, n->idx, c->node[0], MSG_REFUSE, m->conn);
      return;
    }
    c->open[side] = 1;
    if (punched) {
      s->punch_opened++;
    } else if (n->nat) { /* only with STITCH_SIM_NAT_PUNCH, from a NATed
                            node */
      s->nat_accepted++;
      s->nat_punched += s->nat_punch;
    }
    node_add_conn(n, m->conn, c->peer[side]);
    pipe_listen(s, n, m->conn);
    ctl_send(s, n->idx, c->node[0], MSG_ACCEPT, m->conn);
  } else if (m->kind == MSG_ACCEPT || m->kind == MSG_REFUSE) {
    char addr[24];
    snprintf(addr, sizeof(addr), "n%d%s", c->node[1],
             punched ? ".nat" : "");
    if (stitch_swarm_peer_open(n->sw, t, 1, addr, &c->peer[side]) != 0) {
      if (m->kind == MSG_ACCEPT && !c->closed) {
        c->closed = 1;
        ctl_send(s, n->idx, c->node[1], MSG_CLOSE, m->conn);
      }
      return;
    }
    c->open[side] = 1;
    if (m->kind == MSG_REFUSE || c->closed) { /* it hears nothing back */
      c->closed = 1;
      conn_close(s, n, m->conn, 1);
      return;
    }
    n->nat_out += n->nat;
    node_conn_opened(n, m->conn, c->peer[side]);
    pipe_listen(s, n, m->conn);
  } else if (m->kind == MSG_CLOSE) {
    c->closed = 1;
    conn_close(s, n, m->conn, 1);
  }
}

void on_data(sim *s, node *n, uint32_t ci, msg *m) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  if (!c->open[side])
    return;
  if (stitch_swarm_peer_recv(n->sw, c->peer[side], msg_bytes(m), m->len,
                             now_ms(s)) != 0)
    conn_close(s, n, ci, 1); /* the core dropped it: close, then tell it */
}

void node_step(sim *s, node *n) {
  if (n->state != NODE_LIVE || n->sw == NULL)
    return;
  s->events++;
  if (stitch_swarm_wake(n->sw) <= now_ms(s) &&
      stitch_swarm_tick(n->sw, now_ms(s)) != 0)
    n->tick_errors++;
  actions(n);
  flush(s, n);
  if (n->n_conns > 64)
    node_prune(s, n);
  if (s->net->wake != NULL)
    s->net->wake(s, n);
}

/* ---- The controller: publishes, watches, stops ------------------------ */

/* A node's core's counters; a node that left keeps its last ones, a
 * joiner still waiting has none. */
void sim_node_stats(const node *n, stitch_swarm_stats *st) {
  if (n->sw != NULL)
    stitch_swarm_get_stats(n->sw, st);
  else
    memset(st, 0, sizeof(*st));
  const stitch_swarm_stats *p = &n->past; /* lives that ended */
  st->bytes_up += p->bytes_up;
  st->bytes_down += p->bytes_down;
  st->bytes_from_seed += p->bytes_from_seed;
  st->bytes_same_region += p->bytes_same_region;
  st->bytes_other_region += p->bytes_other_region;
  st->bytes_to_same_region += p->bytes_to_same_region;
  st->bytes_to_other_region += p->bytes_to_other_region;
  st->verify_failures += p->verify_failures;
  st->chunks_twice += p->chunks_twice;
  st->manifests_forwarded += p->manifests_forwarded;
  st->bans += p->bans;
  st->punch_asked += p->punch_asked;
  st->punch_dialed += p->punch_dialed;
  st->punch_linked += p->punch_linked;
  st->punch_relayed += p->punch_relayed;
  st->punch_ignored += p->punch_ignored;
}

/* Ends the life of N's core: its counters join the past ones. */
static void core_end(node *n) {
  stitch_swarm_stats st;
  sim_node_stats(n, &st);
  n->past = st;
  n->known = st.latest_version;
  stitch_swarm_free(n->sw);
  n->sw = NULL;
}

static void take_snap(sim *s, snap *sn) {
  memset(sn, 0, sizeof(*sn));
  if (s->sc.central)
    return;
  stitch_swarm_stats st;
  sim_node_stats(&s->node[0], &st);
  sn->seed_up = st.bytes_up;
  unsigned hist[LINKS_HIST] = {0}, live = 0;
  for (int i = 0; i < s->n_node; i++) {
    sim_node_stats(&s->node[i], &st);
    sn->cross += st.bytes_other_region;
    if (i > 0 && strcmp(s->sc.regions[s->node[i].region].name,
                        s->sc.seed_region) == 0)
      sn->cross_home += st.bytes_other_region;
    if (i > 0 && s->node[i].state == NODE_LIVE) {
      hist[st.peers_same_region < LINKS_HIST ? st.peers_same_region
                                             : LINKS_HIST - 1]++;
      live++;
    }
  }
  /* The smallest count, and the median (the lower one of an even n). */
  unsigned below = 0;
  for (unsigned k = 0; k < LINKS_HIST && 2 * below < live; k++) {
    if (below == 0 && hist[k] > 0)
      sn->links.min = k;
    below += hist[k];
    if (2 * below >= live)
      sn->links.p50 = k;
  }
}

/* Every live node holds the last version; a node that left never blocks
 * completion, a joiner counts from when it joined. */
static int all_done(const sim *s) {
  for (int i = 1; i < s->n_node; i++)
    if (s->node[i].state == NODE_LIVE && s->node[i].done[s->tr.count] < 0)
      return 0;
  return 1;
}

/* How many live nodes hold version V (0: none yet); *LIVE counts them
 * all, *STORED the chunks they stored. */
static unsigned holding(const sim *s, unsigned v, unsigned *live,
                        uint64_t *stored) {
  unsigned hold = 0;
  *live = 0;
  *stored = 0;
  for (int i = 1; i < s->n_node; i++)
    if (s->node[i].state == NODE_LIVE) {
      (*live)++;
      *stored += s->node[i].stored;
      hold += v > 0 && s->node[i].done[v] >= 0;
    }
  return hold;
}

/* --trace: one row per controller turn (every 50 ms, and at each
 * publish), the rates since the last row: the nodes' mean chunk download
 * and upload in Mbit/s, the seed's upload, how many live nodes hold the
 * newest version published, then each region's nodes' mean download,
 * then each region's uplinks' busy fraction (their upload over what they
 * could carry in the row's time). */
static void trace_row(sim *s, double t) {
  size_t nr = s->sc.n_regions;
  uint64_t up = 0, seed = 0, *down = s->trace_region + nr + 1,
           *live = down + nr + 1, *up_was = live + nr + 1,
           *up_r = up_was + nr + 1, stored;
  unsigned v = s->next_version - 1, all;
  unsigned done = holding(s, v, &all, &stored);
  memset(down, 0, 2 * (nr + 1) * sizeof(*down));
  memset(up_r, 0, (nr + 1) * sizeof(*up_r));
  stitch_swarm_stats st;
  for (int i = 0; i < s->n_node; i++) {
    node *n = &s->node[i];
    sim_node_stats(n, &st);
    if (i == 0) {
      seed = st.bytes_up;
      continue;
    }
    down[n->region] += st.bytes_down;
    down[nr] += st.bytes_down;
    up_r[n->region] += st.bytes_up;
    up += st.bytes_up;
    if (n->state == NODE_LIVE) {
      live[n->region]++;
      live[nr]++;
    }
  }
  double dt = t - s->trace_t;
  if (dt > 0 && v > 0) {
    double per = live[nr] > 0 ? (double)live[nr] : 1, mbit = 8 / 1e6 / dt;
    fprintf(s->trace, "%.3f,%.1f,%.1f,%.1f,%u", t - s->published[1],
            (double)(down[nr] - s->trace_region[nr]) * mbit / per,
            (double)(up - s->trace_up) * mbit / per,
            (double)(seed - s->trace_seed) * mbit, done);
    for (size_t r = 0; r < nr; r++)
      fprintf(s->trace, ",%.1f",
              (double)(down[r] - s->trace_region[r]) * mbit /
                  (live[r] > 0 ? (double)live[r] : 1));
    for (size_t r = 0; r < nr; r++) /* the uplinks' busy fraction */
      fprintf(s->trace, ",%.3f",
              (double)(up_r[r] - up_was[r]) * 8 / 1e6 / dt /
                  (live[r] > 0 ? (double)live[r] * s->sc.regions[r].up_mbps
                               : 1));
    fputc('\n', s->trace);
  }
  s->trace_t = t;
  s->trace_up = up;
  s->trace_seed = seed;
  memcpy(s->trace_region, down, (nr + 1) * sizeof(down[0]));
  memcpy(up_was, up_r, (nr + 1) * sizeof(up_r[0]));
}

static void publish(sim *s, unsigned v) {
  if (!s->sc.central)
    ctl_send(s, 0, 0, MSG_PUBLISH, v);
  else
    s->net->publish_central(s, v);
}

/* A line on stderr every progress_s of wall time (STITCH_SIM_PROGRESS_S,
 * 30 s unless set; a short run prints none): a run of 10,000 nodes takes
 * an hour. It gives the chunks stored so far against what the versions
 * published need, counted as if every live node took every version's
 * plan whole. */
static void progress(sim *s, double t) {
  double w = sim_wall();
  if (w < s->progress_at)
    return;
  s->progress_at = w + s->progress_s;
  unsigned v = s->next_version - 1, live;
  uint64_t stored, need = 0;
  unsigned hold = holding(s, v, &live, &stored);
  for (unsigned k = 1; k <= v; k++)
    need += s->tr.v[k].chunks * live;
  fprintf(stderr,
          "stitch-sim: %.2f s simulated, %u of %u live nodes hold version "
          "%u of %u (chunks stored: %.1f %% of those published), %.0f s "
          "wall\n",
          t, hold, live, v, s->tr.count,
          need > 0 ? 100.0 * (double)stored / (double)need : 0.0,
          w - s->wall0);
}

/* When version V (from 1) is published: the first at WARMUP_S, the second
 * first_interval_s after it, each next interval_s after the one before. */
static double publish_due(const sim *s, unsigned v) {
  if (v <= 1)
    return WARMUP_S;
  return WARMUP_S + s->sc.first_interval_s + (v - 2) * s->sc.interval_s;
}

double controller_step(sim *s) {
  if (s->next_version == 0)
    s->next_version = 1;
  unsigned next = s->next_version;
  double t = now_s(s), due = publish_due(s, next);
  while (next <= s->tr.count && t >= due) {
    take_snap(s, &s->at[next]);
    s->published[next] = t;
    sim_busy_publish(s, next);
    publish(s, next++);
    due = publish_due(s, next);
  }
  s->next_version = next;
  faults_due(s, t);     /* kills, restarts (partitions act by their times) */
  faults_observe(s, t); /* and what they cost, as netlab measures it */
  if (s->trace != NULL)
    trace_row(s, t);
  progress(s, t);
  /* With churn the run lasts at least the churn window (docs/simulator.md,
   * Churn): the same joins and leaves happen however fast the swarm is.
   * With faults, until each has ended and the swarm converged after it. */
  int over = next > s->tr.count && t >= s->ch.end_s && all_done(s) &&
             faults_done(s);
  if (over || t >= s->sc.time_limit_s) {
    take_snap(s, &s->end);
    s->end_s = t;
    s->finished = over;
    return -1;
  }
  double wake = fmin(t + POLL_S, s->sc.time_limit_s);
  if (next <= s->tr.count)
    wake = fmin(wake, due);
  return fmin(wake, fmax(faults_next(s), t));
}

/* ---- Setting up ------------------------------------------------------- */

static void keypair(uint64_t *rng, stitch_pubkey *pk, stitch_seckey *sk) {
  uint8_t seed[crypto_sign_SEEDBYTES];
  for (size_t i = 0; i < sizeof(seed); i += 8) {
    uint64_t x = sim_xorshift(rng);
    memcpy(seed + i, &x, 8);
  }
  crypto_sign_seed_keypair(pk->b, sk->b, seed);
}

/* A node starts knowing the seed and a few random nodes: two of its
 * region, one of another. Peer exchange does the rest. The candidates are
 * CAND[0..n_cand), or nodes 1..n_cand when CAND is NULL (the start). */
static void bootstrap(sim *s, node *n, uint64_t *rng, const int *cand,
                      int n_cand) {
  stitch_swarm_add_peer_addr(n->sw, "n0", s->sc.seed_region);
  /* Never a node behind a NAT, which nobody can dial (netlab tells no
   * node of one); with NATed nodes, more tries to find the others. */
  int tries_max = s->n_nat > 0 ? 256 : 16;
  n->n_boot = 0;
  for (int k = 0; k < 3 && n_cand > 1; k++) {
    for (int tries = 0; tries < tries_max; tries++) {
      uint64_t x = sim_xorshift(rng) % (uint64_t)n_cand;
      int o = cand != NULL ? cand[x] : 1 + (int)x;
      if (o == n->idx || ((s->node[o].region == n->region) != (k < 2)) ||
          s->node[o].nat)
        continue;
      char addr[16];
      snprintf(addr, sizeof(addr), "n%d", o);
      stitch_swarm_add_peer_addr(n->sw, addr,
                                 s->sc.regions[s->node[o].region].name);
      n->boot[n->n_boot++] = o;
      break;
    }
  }
}

/* N's core, with an empty store; KEYS gives a node's keys. */
static void node_core(sim *s, node *n, uint64_t *keys) {
  size_t words = (s->tr.chunks.n + 63) / 64;
  if (n->have == NULL) { /* a restart keeps its store */
    n->have = sim_calloc(words, sizeof(*n->have));
    n->needed = sim_calloc(words, sizeof(*n->needed));
  }
  stitch_swarm_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  memcpy(cfg.swarm.b, s->tr.swarm_pk, 32);
  if (n->idx == 0) { /* the seed's node key is the swarm key */
    memcpy(cfg.node_pk.b, s->tr.swarm_pk, 32);
    memcpy(cfg.node_sk.b, s->tr.swarm_sk, 64);
  } else {
    if (keys != NULL) { /* a first start; a restart keeps its keys */
      keypair(keys, &n->pk, &n->sk);
    }
    cfg.node_pk = n->pk;
    cfg.node_sk = n->sk;
    /* A closed swarm, as stitchd's: each node shows the trainer's ticket
     * for its key. */
    stitch_ticket t;
    memset(&t, 0, sizeof(t));
    memcpy(t.swarm.b, s->tr.swarm_pk, 32);
    t.node = cfg.node_pk;
    t.role = STITCH_ROLE_NODE;
    t.issued_s = SIM_EPOCH_S;
    stitch_seckey sk;
    memcpy(sk.b, s->tr.swarm_sk, 64);
    stitch_diag td = {{0}};
    if (stitch_ticket_sign(&t, &sk, cfg.ticket, &td) != 0)
      die(td.msg);
    cfg.ticket_len = STITCH_TICKET_BYTES;
  }
  /* Behind a NAT a node advertises no address, as stitchd listening on
   * the wildcard address (docs/stitchd.md): dial-out only. With
   * STITCH_SIM_NAT_PUNCH it does, so that NATed nodes learn of each
   * other, and the driver lets only NATed dialers in. */
  if (!n->nat || s->nat_punch)
    snprintf(cfg.listen, sizeof(cfg.listen), "n%d", n->idx);
  snprintf(cfg.region, sizeof(cfg.region), "%s",
           s->sc.regions[n->region].name);
  cfg.seed = n->idx == 0;
  cfg.log_chunks = s->chunk_log;
  if (s->up_told && n->idx != 0) /* stitchd --up-mbit on every node */
    cfg.up_bytes_per_s = (uint64_t)(s->sc.regions[n->region].up_mbps * 125e3);
  if (n->held > 0) { /* the weights file recovered to what it held */
    cfg.held_version = n->held;
    cfg.held_id = n->held_id;
  }
  cfg.max_peers = s->sc.max_peers;
  cfg.cross_region = s->sc.cross_region;
  cfg.pipeline = s->sc.pipeline;
  /* io_write compares every chunk with the table's bytes, which hash to
   * its name: the core's check without BLAKE2b's cost. */
  cfg.write_verifies = 1;
  /* Links are not sealed: the handshake runs as on TCP, but a record
   * layer would cost the simulation CPU time it does not model (2 x 17
   * bytes per 16 KiB are 0.2 % of the bytes it moves). */
  cfg.cipher_none = 1;
  stitch_swarm_io io = {n,          io_random, io_has,      io_read,
                        io_release, io_write,  io_manifest, NULL,
                        io_unix_time, NULL};
  if (s->verbose)
    io.log = io_log;
  stitch_diag d = {{0}};
  if (stitch_swarm_new(&cfg, &io, &n->sw, &d) != 0)
    die(d.msg);
}

/* Every slot churn.c planned: the seed, the initial nodes (live, with a
 * core), the joiners (waiting, keys drawn at their join). */
static void nodes_make(sim *s, void **hosts) {
  s->n_node = (int)s->ch.slots;
  s->node = sim_calloc((size_t)s->n_node, sizeof(*s->node));
  if (!s->sc.central)
    nat_assign(s); /* before any core: bootstrap skips NATed nodes */
  uint64_t rng = s->sc.rng_seed * 0x2545f4914f6cdd1dull + 3;
  for (int i = 0; i < s->n_node; i++) {
    node *n = &s->node[i];
    n->sim = s;
    n->idx = i;
    n->host = hosts != NULL ? hosts[i] : NULL;
    n->region = s->ch.region[i];
    n->rng = sim_xorshift(&rng) | 1;
    n->done = sim_calloc(s->tr.count + 1, sizeof(*n->done));
    for (unsigned v = 0; v <= s->tr.count; v++)
      n->done[v] = -1;
    n->wake_at = INFINITY;
    n->join_s = s->ch.join_s[i];
    n->left_s = INFINITY;
    if (i > (int)s->sc.nodes) { /* a joiner */
      n->state = NODE_WAITING;
      n->key_seed = sim_xorshift(&rng);
      continue;
    }
    n->state = NODE_LIVE;
    if (s->sc.central)
      continue;
    node_core(s, n, &rng);
    if (i > 0)
      bootstrap(s, n, &rng, NULL, (int)s->sc.nodes);
  }
}

void node_join(sim *s, node *n) {
  if (n->state != NODE_WAITING)
    return;
  uint64_t keys = n->key_seed;
  node_core(s, n, &keys);
  n->state = NODE_LIVE;
  n->join_s = now_s(s);
  s->nodes_joined++;
  /* The bootstrap initial nodes get, among the nodes alive now. Alive by
   * the plan's times, not by who has run yet: actors due at the same
   * moment may run in any order. */
  double t = s->ch.join_s[n->idx];
  int *cand = sim_calloc((size_t)s->n_node, sizeof(*cand)), k = 0;
  for (int i = 1; i < s->n_node; i++)
    if (i != n->idx && s->ch.join_s[i] <= t && s->ch.leave_s[i] > t)
      cand[k++] = i;
  bootstrap(s, n, &keys, cand, k);
  free(cand);
}

/* Closes every connection of N, whose process ends: its core is told
 * nothing (it stops), the other sides hear CLOSE; a DIAL it had out is
 * closed too. */
static void drop_conns(sim *s, node *n) {
  for (size_t i = 0; i < n->n_conns; i++) {
    uint32_t ci = n->conns[i];
    conn *c = s->conn[ci];
    int side = side_of(c, n->idx);
    if (c->open[side]) {
      conn_close(s, n, ci, 0); /* its core stops: nothing to tell it */
      if (c->fin[side]) { /* a node that leaves does not wait for that */
        c->fin[side] = 0;
        ctl_send(s, n->idx, c->node[1 - side], MSG_CLOSE, ci);
      }
    } else if (!c->closed) { /* its DIAL is out: the other side may be up */
      c->closed = 1;
      ctl_send(s, n->idx, c->node[1 - side], MSG_CLOSE, ci);
    }
  }
}

void node_leave(sim *s, node *n) {
  if (n->state != NODE_LIVE || n->idx == 0)
    return;
  drop_conns(s, n);
  core_end(n);
  free(n->have);
  free(n->needed);
  n->have = n->needed = NULL;
  n->state = NODE_LEFT;
  n->left_s = now_s(s);
  s->nodes_left++;
}

void node_kill(sim *s, node *n) {
  if (n->state != NODE_LIVE)
    return;
  /* kill -9: the kernel closes the sockets, so peers see the reset at
   * once; what the core held in memory (requests, partial chunks, peers)
   * is gone, the store and the weights are not. */
  drop_conns(s, n);
  core_end(n);
  n->state = NODE_DOWN;
}

void node_restart(sim *s, node *n) {
  if (n->state != NODE_DOWN)
    return;
  n->life++;
  node_core(s, n, NULL);
  n->state = NODE_LIVE;
  /* As stitchd's start: the store's manifests first, then the peers of
   * its command line. The seed's store has every version published (some
   * while it was down); a node's, those its core held. */
  uint64_t last = s->next_version > 0 ? s->next_version - 1 : 0;
  if (n->idx > 0 && n->known < last)
    last = n->known;
  for (uint64_t v = 1; v <= last; v++) {
    stitch_diag d = {{0}};
    const sim_version *sv = &s->tr.v[v];
    int rc = stitch_swarm_add_manifest(n->sw, sv->manifest, sv->manifest_len,
                                       now_ms(s), &d);
    if (rc < 0 && rc != STITCH_EROLLBACK)
      die(d.msg[0] ? d.msg : "a restarted core refused a manifest");
  }
  if (n->idx > 0) {
    stitch_swarm_add_peer_addr(n->sw, "n0", s->sc.seed_region);
    for (int k = 0; k < n->n_boot; k++) {
      char addr[16];
      int o = n->boot[k];
      snprintf(addr, sizeof(addr), "n%d", o);
      stitch_swarm_add_peer_addr(n->sw, addr,
                                 s->sc.regions[s->node[o].region].name);
    }
  }
  node_step(s, n);
}

static void sim_free(sim *s) {
  for (int i = 0; s->node != NULL && i < s->n_node; i++) {
    node *n = &s->node[i];
    stitch_swarm_free(n->sw);
    free(n->have);
    free(n->needed);
    free(n->done);
    free(n->conns);
    free(n->pos_of);
    free(n->flush_at);
  }
  free(s->node);
  for (size_t i = 0; i < s->n_conn; i++) {
    for (int side = 0; side < 2 && s->net == &sim_net_flows; side++)
      for (int k = 1; k < s->conn[i]->d[side].nput; k++) /* never put */
        free(s->conn[i]->d[side].sent[k].m);
    free(s->conn[i]);
  }
  free(s->conn);
  free(s->published);
  free(s->at);
  free(s->stable);
  free(s->ramp_v1);
  sim_busy_free(s);
  queue_free(s);
  faults_free(s);
  sim_churn_free(&s->ch);
  sim_trajectory_free(&s->tr);
  sim_scenario_free(&s->sc);
}

/* Runs this program again with glibc's malloc giving its heap
 * transparent huge pages (glibc 2.35+; the kernel's default is to give
 * them only where asked, "madvise"): a 10,000-node run holds some 10 GB
 * in millions of small allocations, and with 4 KiB pages its time went
 * to the TLB's misses. STITCH_SIM_THP=0 keeps the small pages; only
 * speed and memory (the pages' rounding) differ. On a failure to exec it
 * goes on as it is. */
static void huge_pages(char **argv) {
  const char *t = getenv("GLIBC_TUNABLES"), *off = getenv("STITCH_SIM_THP");
  if ((off != NULL && strcmp(off, "0") == 0) ||
      (t != NULL && strstr(t, "glibc.malloc.hugetlb") != NULL))
    return;
  char v[1024];
  int n = snprintf(v, sizeof(v), "%s%sglibc.malloc.hugetlb=1", t ? t : "",
                   t != NULL && *t ? ":" : "");
  if (n < 0 || (size_t)n >= sizeof(v) ||
      setenv("GLIBC_TUNABLES", v, 1) != 0)
    return;
  execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
  huge_pages(argv);
  const char *path = NULL, *plot_dir = NULL, *trace = NULL, *bounds = NULL;
  const char *steps = NULL;
  char trace_part[4096];
  int as_json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      as_json = 1;
    else if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc)
      plot_dir = argv[++i];
    else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc)
      trace = argv[++i];
    else if (strcmp(argv[i], "--bounds") == 0 && i + 1 < argc)
      bounds = argv[++i];
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = argv[++i];
    else if (argv[i][0] != '-' && path == NULL)
      path = argv[i];
    else
      path = NULL, i = argc;
  }
  if (path == NULL ||
      (bounds != NULL &&
       (plot_dir != NULL || trace != NULL || steps != NULL))) {
    fprintf(stderr, "usage: stitch-sim SCENARIO.json [--json] [--plot DIR] "
                    "[--trace FILE.csv] [--steps DIR]\n"
                    "       stitch-sim SCENARIO.json --bounds "
                    "BYTES[,BYTES...]\n");
    return 2;
  }
  if (bounds != NULL)
    return sim_print_bounds(path, bounds);
  if (sodium_init() < 0)
    die("libsodium failed to start");
  /* Every chunk a core receives passes through a chunk-sized frame buffer
   * that is freed after it (wire_reader_trim): served from the heap, not
   * mapped and unmapped each time (page faults were a sixth of a run). */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  double t0 = sim_wall();
  sim s;
  memset(&s, 0, sizeof(s));
  const char *lg = getenv("STITCH_SIM_LOG");
  s.verbose = lg != NULL && (*lg == '1' || *lg == '2');
  s.chunk_log = lg != NULL && *lg == '2'; /* and every chunk (swarm.h) */
  const char *rp = getenv("STITCH_SIM_RAMP");
  const char *ps = getenv("STITCH_SIM_PROGRESS_S");
  s.progress_s = ps != NULL && *ps ? atof(ps) : 30;
  s.wall0 = t0;
  s.progress_at = t0 + s.progress_s;
  char err[512];
  if (sim_scenario_load(path, &s.sc, err, sizeof(err)) != 0)
    die(err);
  if (s.sc.unsimulated[0])
    die(s.sc.unsimulated);
  if (s.sc.network_note[0])
    fprintf(stderr, "stitch-sim: %s\n", s.sc.network_note);
  s.net = s.sc.queues ? &sim_net_queues : &sim_net_flows;
  const char *pn = getenv("STITCH_SIM_NAT_PUNCH");
  s.nat_punch = pn != NULL && *pn == '1';
  const char *ut = getenv("STITCH_SIM_UP_TOLD");
  s.up_told = ut != NULL && *ut == '1';
  const char *wr = getenv("STITCH_SIM_WIRE");
  s.wire = wr == NULL || strcmp(wr, "0") != 0;
  s.path_rng = s.sc.rng_seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  if (s.path_rng == 0)
    s.path_rng = 1;
  if (sim_trajectory_make(&s.sc, steps, &s.tr, err, sizeof(err)) != 0)
    die(err);
  if (rp != NULL && *rp == '1' && !s.sc.central) {
    s.ramp_v1 = sim_calloc((s.tr.chunks.n + 63) / 64, sizeof(uint64_t));
    for (size_t k = 0; k < s.tr.v[1].n_all; k++)
      if (!bit(s.ramp_v1, s.tr.v[1].all[k])) {
        set_bit(s.ramp_v1, s.tr.v[1].all[k]);
        s.ramp_n++;
      }
  }
  if (trace != NULL) {
    if (s.sc.central) {
      fprintf(stderr, "stitch-sim: --trace: a central scenario has no swarm "
                      "to trace\n");
      return 2;
    }
    /* Written beside, renamed once whole: a run that dies leaves no
     * FILE.csv that looks complete. */
    if (snprintf(trace_part, sizeof(trace_part), "%s.part", trace) >=
        (int)sizeof(trace_part)) {
      fprintf(stderr, "stitch-sim: --trace: path too long\n");
      return 1;
    }
    if ((s.trace = fopen(trace_part, "w")) == NULL) {
      fprintf(stderr, "stitch-sim: cannot write %s: %s\n", trace,
              strerror(errno));
      return 1;
    }
    s.trace_region =
        sim_calloc(5 * (s.sc.n_regions + 1), sizeof(*s.trace_region));
    fprintf(s.trace, "t_s,down_mbps,up_mbps,seed_mbps,nodes_done");
    for (size_t r = 0; r < s.sc.n_regions; r++)
      fprintf(s.trace, ",down_mbps_%s", s.sc.regions[r].name);
    for (size_t r = 0; r < s.sc.n_regions; r++)
      fprintf(s.trace, ",up_busy_%s", s.sc.regions[r].name);
    fputc('\n', s.trace);
  }
  s.published = sim_calloc(s.tr.count + 2, sizeof(*s.published));
  s.at = sim_calloc(s.tr.count + 2, sizeof(*s.at));
  for (unsigned v = 0; v <= s.tr.count + 1; v++)
    s.published[v] = -1;
  if (sim_busy_init(&s) != 0)
    die("out of memory");
  stable_make(&s);
  /* Churn runs from the first publish to one interval after the last (or
   * the time limit): every version is published into a churning swarm,
   * and churn then stops so that the run can end (docs/simulator.md). */
  double churn_end = fmin(publish_due(&s, s.tr.count) + s.sc.interval_s,
                          s.sc.time_limit_s);
  if (sim_churn_plan(&s.sc, WARMUP_S, churn_end, &s.ch, err, sizeof(err)) !=
      0)
    die(err);
  /* Memory per node counts from here: the platform, the cores, the run. */
  double rss_base = sim_rss_mib("VmRSS:");
  /* CM02 without correction factors: a message costs the route's latency
   * once, then its bytes at its max-min fair share (docs/simulator.md).
   * Only the flows network uses it. */
  char *sg_argv[] = {argv[0],
                     "--cfg=network/model:CM02",
                     "--cfg=network/crosstraffic:0",
                     "--cfg=contexts/stack-size:" "256",
                     "--log=root.thres:critical",
                     NULL};
  int sg_argc = 5;
  simgrid_init(&sg_argc, sg_argv);
  void **hosts = sim_calloc(s.ch.slots + 1, sizeof(*hosts));
  if (s.sc.queues) { /* one host for the one actor: the links are ours */
    if (sim_platform_one(hosts, err, sizeof(err)) != 0)
      die(err);
    queue_init(&s);
    nodes_make(&s, NULL);
    faults_init(&s);
    queue_start(&s, hosts[0]);
  } else {
    if (sim_platform_build(&s.sc, &s.ch, hosts, err, sizeof(err)) != 0)
      die(err);
    nodes_make(&s, hosts);
    flows_start(&s, hosts);
  }
  simgrid_run();
  int rc = sim_run_report(&s, sim_wall() - t0, rss_base, as_json, plot_dir);
  if (s.verbose)
    fprintf(stderr, "stitch-sim: %" PRIu64 " messages, %" PRIu64
                    " wake-ups, %zu connections\n",
            s.messages, s.events, s.n_conn);
  if (!s.finished)
    fprintf(stderr, "stitch-sim: not every node held every version by "
                    "%.1f s\n", s.sc.time_limit_s);
  free(hosts);
  free(s.trace_region);
  if (s.trace != NULL) {
    if ((ferror(s.trace) | fclose(s.trace)) != 0 ||
        rename(trace_part, trace) != 0) {
      fprintf(stderr, "stitch-sim: writing %s failed\n", trace);
      unlink(trace_part);
      rc = 1;
    }
  }
  sim_free(&s);
  return rc != 0 || !s.finished ? 1 : 0;
}
