/* sim.c: stitch-sim, the SimGrid driver of the swarm's protocol core
 * (docs/simulator.md).
 *
 * Every simulated node (and the seed) is one SimGrid actor running one
 * unmodified stitch_swarm core. The driver only moves bytes and carries
 * out actions, as src/net/driver.c does on real TCP:
 *
 * - A connection is two one-way pipes; each pipe is a SimGrid mailbox whose
 *   receiver is fixed, so a message's transfer starts when it is sent and
 *   messages are taken in the order they were sent (a byte stream). Each
 *   message carries what stitch_swarm_peer_pending gave, and costs its
 *   size in simulated bytes.
 * - Dialing is a small DIAL message to the listener, answered by ACCEPT or
 *   REFUSE (one round trip, as TCP's handshake); a close is a CLOSE message.
 * - Time is SimGrid's clock in milliseconds; an actor waits for the first
 *   message or until stitch_swarm_wake, then ticks the core.
 * - Storage: a node's store is a bitset over the trajectory's chunk table
 *   (trajectory.c). chunk_write gets chunks the core has already hashed
 *   and checks them again against the table's bytes before it sets a bit.
 * - APPLY checks that every chunk of the object is held and that the
 *   object's base is what the node holds, then calls stitch_swarm_applied;
 *   tensors are not materialized (docs/simulator.md says why).
 *
 * Usage: stitch-sim SCENARIO.json [--json] [--plot DIR] */
#define _GNU_SOURCE /* ssize_t in SimGrid's headers */
#include "sim.h"

#include "stitch/swarm.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIPE_WINDOW 2           /* messages in flight per pipe */
#define MSG_MAX (1u << 20)      /* bytes per message */
#define CTL_BYTES 64            /* simulated size of DIAL, ACCEPT, CLOSE */
#define STACK_KIB 256 /* per actor; touched pages only count */
#define WARMUP_S 2.0            /* nodes join before version 1 */
#define POLL_S 0.05             /* the controller checks completion */

typedef enum msg_kind {
  MSG_DATA, MSG_DIAL, MSG_ACCEPT, MSG_REFUSE, MSG_CLOSE, MSG_PUBLISH
} msg_kind;

typedef struct msg {
  msg_kind kind;
  uint32_t conn; /* or the version, for MSG_PUBLISH */
  size_t len;
  uint8_t data[];
} msg;

typedef struct pipe_ {
  sg_mailbox_t mb;
  sg_comm_t get; /* the receiver's pending get, or NULL */
  msg *got;
  sg_comm_t put[PIPE_WINDOW];
  int nput;
} pipe_;

typedef struct conn {
  int node[2];      /* [0] dialed [1] */
  int open[2];      /* that side's core holds the peer */
  int closed;
  uint32_t peer[2]; /* the id each side's core gave */
  pipe_ d[2];       /* d[s]: from node[s] to node[1 - s] */
} conn;

struct sim;

typedef struct node {
  struct sim *sim;
  int idx, region;
  sg_host_t host;
  stitch_swarm *sw;
  uint64_t rng;
  uint64_t *have, *needed; /* bitsets over the chunk table */
  uint64_t held;
  stitch_digest held_id;
  double *done; /* [version]: seconds, < 0 not yet */
  uint32_t *conns;
  size_t n_conns, cap_conns;
  sg_mailbox_t ctl;
  sg_comm_t ctl_get;
  msg *ctl_msg;
  uint64_t stored, needed_n, bad_writes, apply_errors, tick_errors;
  uint64_t wire_up; /* bytes this node put on the wire */
} node;

typedef struct snap {
  uint64_t seed_up, cross;
} snap;

typedef struct sim {
  sim_scenario sc;
  sim_trajectory tr;
  node *node; /* [0] the seed, [1..nodes] */
  int n_node;
  conn **conn;
  size_t n_conn, cap_conn;
  double *published; /* [version] */
  snap *at;          /* [version]: counters when it was published */
  snap end;
  int finished;
  double end_s;
  uint64_t refused, messages, events;
  int verbose; /* STITCH_SIM_LOG=1: every core's log lines on stderr */
} sim;

static double now_s(void) { return simgrid_get_clock(); }
static uint64_t now_ms(void) {
  return (uint64_t)floor(simgrid_get_clock() * 1e3 + 1e-6);
}

static void die(const char *what) {
  fprintf(stderr, "stitch-sim: %s\n", what);
  exit(1);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (p == NULL)
    die("out of memory");
  return p;
}

static msg *msg_new(msg_kind kind, uint32_t c, const uint8_t *buf,
                    size_t len) {
  msg *m = malloc(sizeof(*m) + len);
  if (m == NULL)
    die("out of memory");
  m->kind = kind;
  m->conn = c;
  m->len = len;
  if (len)
    memcpy(m->data, buf, len);
  return m;
}

/* Sends a control message to node TO's control mailbox; nobody waits. */
static void ctl_send(sim *s, int to, msg_kind kind, uint32_t c) {
  sg_comm_t cm = sg_mailbox_put_init(s->node[to].ctl,
                                      msg_new(kind, c, NULL, 0), CTL_BYTES);
  sg_comm_detach(cm, free);
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

/* The core checked the hash; the table's bytes hash to that name, so the
 * same bytes are the same check at a fraction of the cost. */
static int io_write(void *user, const stitch_digest *h, const uint8_t *buf,
                    size_t len) {
  node *n = user;
  const sim_chunks *t = &n->sim->tr.chunks;
  long i = sim_chunks_find(t, h->b);
  if (i < 0 || t->len[i] != len || memcmp(t->buf[i], buf, len) != 0) {
    n->bad_writes++;
    return STITCH_ECHECKSUM;
  }
  if (!bit(n->have, i)) {
    set_bit(n->have, i);
    n->stored++;
  }
  return 0;
}

static void io_log(void *user, const char *line) {
  node *n = user;
  fprintf(stderr, "[%10.4f] n%d: %s\n", now_s(), n->idx, line);
}

static int io_manifest(void *user, const uint8_t *buf, size_t len) {
  (void)user, (void)buf, (void)len; /* the trajectory holds every one */
  return 0;
}

/* ---- Connections ------------------------------------------------------ */

static void node_add_conn(node *n, uint32_t c) {
  if (n->n_conns == n->cap_conns) {
    n->cap_conns = n->cap_conns ? n->cap_conns * 2 : 16;
    n->conns = realloc(n->conns, n->cap_conns * sizeof(*n->conns));
    if (n->conns == NULL)
      die("out of memory");
  }
  n->conns[n->n_conns++] = c;
}

/* Forgets connections closed on both sides of N's list. */
static void node_prune(sim *s, node *n) {
  size_t k = 0;
  for (size_t i = 0; i < n->n_conns; i++) {
    conn *c = s->conn[n->conns[i]];
    int side = c->node[1] == n->idx;
    if (!c->closed || c->open[side] || c->d[side].nput > 0)
      n->conns[k++] = n->conns[i];
  }
  n->n_conns = k;
}

static int side_of(const conn *c, int idx) { return c->node[1] == idx; }

/* N's side of C is done: its core hears peer_close (unless SILENT, when
 * its core already dropped the peer), the other side hears CLOSE. */
static void conn_close(sim *s, node *n, uint32_t ci, int tell_core) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  if (!c->open[side])
    return;
  c->open[side] = 0;
  if (c->d[1 - side].get != NULL) { /* nothing more is taken from it */
    sim_comm_cancel(c->d[1 - side].get);
    c->d[1 - side].get = NULL;
  }
  if (tell_core)
    stitch_swarm_peer_close(n->sw, c->peer[side], now_ms());
  if (!c->closed) {
    c->closed = 1;
    ctl_send(s, c->node[1 - side], MSG_CLOSE, ci);
  }
}

/* N's core knows the peer of C now: take what arrives on the pipe to N. */
static void pipe_listen(sim *s, node *n, uint32_t ci) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  pipe_ *p = &c->d[1 - side];
  sg_mailbox_set_receiver(sg_mailbox_get_name(p->mb));
  p->get = sg_mailbox_get_async(p->mb, (void **)&p->got);
  (void)s;
}

static void dial(sim *s, node *n, const char *addr) {
  int to = -1;
  if (addr[0] == 'n')
    to = atoi(addr + 1);
  if (to < 0 || to >= s->n_node || to == n->idx) {
    s->refused++;
    return;
  }
  if (s->n_conn == s->cap_conn) {
    s->cap_conn = s->cap_conn ? s->cap_conn * 2 : 1024;
    s->conn = realloc(s->conn, s->cap_conn * sizeof(*s->conn));
    if (s->conn == NULL)
      die("out of memory");
  }
  uint32_t ci = (uint32_t)s->n_conn++;
  conn *c = xcalloc(1, sizeof(*c));
  s->conn[ci] = c;
  c->node[0] = n->idx;
  c->node[1] = to;
  for (int k = 0; k < 2; k++) {
    char name[32];
    snprintf(name, sizeof(name), "c%u.%d", ci, k);
    c->d[k].mb = sg_mailbox_by_name(name);
  }
  node_add_conn(n, ci);
  ctl_send(s, to, MSG_DIAL, ci);
}

/* ---- Applying --------------------------------------------------------- */

static const stitch_vref *find_version(const node *n, uint64_t v) {
  const stitch_vref *refs;
  size_t k = stitch_swarm_versions(n->sw, &refs);
  for (size_t i = 0; i < k; i++)
    if (refs[i].m->version == v)
      return &refs[i];
  return NULL;
}

/* Every chunk of (V, OBJ) held and the base matching: the node holds V. */
static int apply(sim *s, node *n, uint64_t v, uint32_t obj) {
  const stitch_vref *vr = find_version(n, v);
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
    if (n->done[k] < 0)
      n->done[k] = now_s();
  return 0;
}

/* Carries out every action N's core asks for. */
static void actions(sim *s, node *n) {
  for (int guard = 0; guard < 100000; guard++) {
    stitch_swarm_action a;
    stitch_swarm_next_action(n->sw, &a);
    if (a.kind == STITCH_SWARM_NONE)
      return;
    if (a.kind == STITCH_SWARM_CONNECT) {
      dial(s, n, a.addr);
    } else if (a.kind == STITCH_SWARM_CLOSE) {
      for (size_t i = 0; i < n->n_conns; i++) {
        conn *c = s->conn[n->conns[i]];
        int side = side_of(c, n->idx);
        if (c->open[side] && c->peer[side] == a.peer) {
          conn_close(s, n, n->conns[i], 1);
          break;
        }
      }
    } else if (a.kind == STITCH_SWARM_APPLY) {
      if (apply(s, n, a.version, a.object) == 0) {
        stitch_swarm_applied(n->sw, a.version, &n->held_id, now_ms());
      } else {
        n->apply_errors++;
        stitch_swarm_apply_failed(n->sw, a.version, a.object, now_ms());
      }
    }
  }
  die("a core asked for 100000 actions in a row");
}

/* Puts what N's core has for each peer on the wire, up to the window. */
static void flush(sim *s, node *n) {
  for (size_t i = 0; i < n->n_conns; i++) {
    conn *c = s->conn[n->conns[i]];
    int side = side_of(c, n->idx);
    pipe_ *p = &c->d[side];
    /* Finished sends are noticed here, not waited for: waking the sender
     * for each would double the simulation's events. */
    for (int k = 0; k < p->nput;)
      if (sg_comm_test(p->put[k]))
        p->put[k] = p->put[--p->nput];
      else
        k++;
    while (c->open[side] && p->nput < PIPE_WINDOW) {
      const uint8_t *buf;
      size_t len;
      stitch_swarm_peer_pending(n->sw, c->peer[side], &buf, &len);
      if (len == 0)
        break;
      len = len < MSG_MAX ? len : MSG_MAX;
      p->put[p->nput++] = sg_mailbox_put_async(
          p->mb, msg_new(MSG_DATA, n->conns[i], buf, len), (long)len);
      n->wire_up += len;
      s->messages++;
      stitch_swarm_peer_sent(n->sw, c->peer[side], len);
    }
  }
}

/* ---- A node's actor --------------------------------------------------- */

static void on_ctl(sim *s, node *n, msg *m) {
  uint64_t t = now_ms();
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
  if (m->kind == MSG_DIAL) {
    char eph[40];
    snprintf(eph, sizeof(eph), "n%d.%u", c->node[0], m->conn);
    if (c->closed || stitch_swarm_peer_open(n->sw, t, 0, eph,
                                            &c->peer[side]) != 0) {
      ctl_send(s, c->node[0], MSG_REFUSE, m->conn);
      return;
    }
    c->open[side] = 1;
    node_add_conn(n, m->conn);
    pipe_listen(s, n, m->conn);
    ctl_send(s, c->node[0], MSG_ACCEPT, m->conn);
  } else if (m->kind == MSG_ACCEPT || m->kind == MSG_REFUSE) {
    char addr[16];
    snprintf(addr, sizeof(addr), "n%d", c->node[1]);
    if (stitch_swarm_peer_open(n->sw, t, 1, addr, &c->peer[side]) != 0) {
      if (m->kind == MSG_ACCEPT && !c->closed) {
        c->closed = 1;
        ctl_send(s, c->node[1], MSG_CLOSE, m->conn);
      }
      return;
    }
    c->open[side] = 1;
    if (m->kind == MSG_REFUSE || c->closed) { /* it hears nothing back */
      c->closed = 1;
      conn_close(s, n, m->conn, 1);
      return;
    }
    pipe_listen(s, n, m->conn);
  } else if (m->kind == MSG_CLOSE) {
    c->closed = 1;
    conn_close(s, n, m->conn, 1);
  }
}

static void on_data(sim *s, node *n, uint32_t ci, msg *m) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  if (!c->open[side])
    return;
  if (stitch_swarm_peer_recv(n->sw, c->peer[side], m->data, m->len,
                             now_ms()) != 0)
    conn_close(s, n, ci, 1); /* the core dropped it: close, then tell it */
}

typedef struct waiter {
  void **comm;
  uint32_t *conn;
  int *what; /* -1 control, 0 get, 1 + k put k */
  size_t n, cap;
} waiter;

static void wait_add(waiter *w, void *cm, uint32_t c, int what) {
  if (w->n == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 64;
    w->comm = realloc(w->comm, w->cap * sizeof(*w->comm));
    w->conn = realloc(w->conn, w->cap * sizeof(*w->conn));
    w->what = realloc(w->what, w->cap * sizeof(*w->what));
    if (w->comm == NULL || w->conn == NULL || w->what == NULL)
      die("out of memory");
  }
  w->comm[w->n] = cm;
  w->conn[w->n] = c;
  w->what[w->n++] = what;
}

static void node_main(int argc, char **argv) {
  (void)argc, (void)argv;
  node *n = sg_actor_self_get_data();
  sim *s = n->sim;
  waiter w = {0};
  sg_actor_daemonize(sg_actor_self());
  sg_mailbox_set_receiver(sg_mailbox_get_name(n->ctl));
  n->ctl_get = sg_mailbox_get_async(n->ctl, (void **)&n->ctl_msg);
  actions(s, n);
  flush(s, n);
  for (;;) {
    w.n = 0;
    wait_add(&w, n->ctl_get, 0, -1);
    for (size_t i = 0; i < n->n_conns; i++) {
      conn *c = s->conn[n->conns[i]];
      int side = side_of(c, n->idx);
      if (c->open[side] && c->d[1 - side].get != NULL)
        wait_add(&w, c->d[1 - side].get, n->conns[i], 0);
      if (c->d[side].nput == PIPE_WINDOW) /* blocked: wake when one ends */
        for (int k = 0; k < c->d[side].nput; k++)
          wait_add(&w, c->d[side].put[k], n->conns[i], 1 + k);
    }
    uint64_t wake = stitch_swarm_wake(n->sw);
    double timeout = wake == UINT64_MAX ? -1.0
                                        : (double)wake / 1e3 - now_s() + 1e-7;
    if (timeout < 0 && wake != UINT64_MAX)
      timeout = 0;
    long pos = sim_wait_any_for(w.comm, w.n, timeout);
    if (pos < -1)
      die("a communication failed");
    s->events++;
    if (pos >= 0) {
      int what = w.what[pos];
      if (what < 0) {
        msg *m = n->ctl_msg;
        n->ctl_get = sg_mailbox_get_async(n->ctl, (void **)&n->ctl_msg);
        on_ctl(s, n, m);
        free(m);
      } else if (what == 0) {
        pipe_ *p = &s->conn[w.conn[pos]]->d[1 - side_of(s->conn[w.conn[pos]],
                                                        n->idx)];
        msg *m = p->got;
        p->get = sg_mailbox_get_async(p->mb, (void **)&p->got);
        on_data(s, n, w.conn[pos], m);
        free(m);
      } else {
        conn *c = s->conn[w.conn[pos]];
        pipe_ *p = &c->d[side_of(c, n->idx)];
        memmove(&p->put[what - 1], &p->put[what],
                (size_t)(p->nput - what) * sizeof(p->put[0]));
        p->nput--;
      }
    }
    if (stitch_swarm_wake(n->sw) <= now_ms() &&
        stitch_swarm_tick(n->sw, now_ms()) != 0)
      n->tick_errors++;
    actions(s, n);
    flush(s, n);
    if (n->n_conns > 64)
      node_prune(s, n);
  }
}

/* ---- Central mode: plain flows from one store ------------------------- */

static void central_main(int argc, char **argv) {
  (void)argc, (void)argv;
  node *n = sg_actor_self_get_data();
  sg_actor_daemonize(sg_actor_self());
  sg_mailbox_set_receiver(sg_mailbox_get_name(n->ctl));
  for (;;) {
    msg *m = sg_mailbox_get(n->ctl);
    if (m->conn <= n->sim->tr.count && n->done[m->conn] < 0)
      n->done[m->conn] = now_s();
    free(m);
  }
}

/* ---- The controller: publishes, watches, stops ------------------------ */

static void take_snap(sim *s, snap *sn) {
  memset(sn, 0, sizeof(*sn));
  if (s->sc.central)
    return;
  stitch_swarm_stats st;
  stitch_swarm_get_stats(s->node[0].sw, &st);
  sn->seed_up = st.bytes_up;
  for (int i = 0; i < s->n_node; i++) {
    stitch_swarm_get_stats(s->node[i].sw, &st);
    sn->cross += st.bytes_other_region;
  }
}

static int all_done(const sim *s) {
  for (int i = 1; i < s->n_node; i++)
    if (s->node[i].done[s->tr.count] < 0)
      return 0;
  return 1;
}

static void publish(sim *s, unsigned v) {
  if (!s->sc.central) {
    ctl_send(s, 0, MSG_PUBLISH, v);
    return;
  }
  for (int i = 1; i < s->n_node; i++) {
    sg_comm_t cm = sg_mailbox_put_init(s->node[i].ctl,
                                        msg_new(MSG_PUBLISH, v, NULL, 0),
                                        (long)s->tr.v[v].bytes);
    sg_comm_detach(cm, free);
  }
}

static void controller_main(int argc, char **argv) {
  (void)argc, (void)argv;
  sim *s = sg_actor_self_get_data();
  unsigned next = 1;
  for (;;) {
    double t = now_s(), due = WARMUP_S + (next - 1) * s->sc.interval_s;
    while (next <= s->tr.count && t >= due) {
      take_snap(s, &s->at[next]);
      s->published[next] = t;
      publish(s, next++);
      due = WARMUP_S + (next - 1) * s->sc.interval_s;
    }
    if ((next > s->tr.count && all_done(s)) || t >= s->sc.time_limit_s)
      break;
    double wake = fmin(t + POLL_S, s->sc.time_limit_s);
    if (next <= s->tr.count)
      wake = fmin(wake, due);
    sg_actor_sleep_until(wake);
  }
  take_snap(s, &s->end);
  s->end_s = now_s();
  s->finished = next > s->tr.count && all_done(s);
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

static int region_of(const sim *s, const char *name) {
  for (size_t r = 0; r < s->sc.n_regions; r++)
    if (strcmp(s->sc.regions[r].name, name) == 0)
      return (int)r;
  return 0;
}

/* A node starts knowing the seed and a few random nodes: two of its
 * region, one of another. Peer exchange does the rest. */
static void bootstrap(sim *s, node *n, uint64_t *rng) {
  stitch_swarm_add_peer_addr(n->sw, "n0", s->sc.seed_region);
  for (int k = 0; k < 3 && s->n_node > 2; k++) {
    for (int tries = 0; tries < 16; tries++) {
      int o = 1 + (int)(sim_xorshift(rng) % (uint64_t)(s->n_node - 1));
      if (o == n->idx || ((s->node[o].region == n->region) != (k < 2)))
        continue;
      char addr[16];
      snprintf(addr, sizeof(addr), "n%d", o);
      stitch_swarm_add_peer_addr(n->sw, addr,
                                 s->sc.regions[s->node[o].region].name);
      break;
    }
  }
}

static void nodes_make(sim *s, void **hosts) {
  s->n_node = (int)s->sc.nodes + 1;
  s->node = xcalloc((size_t)s->n_node, sizeof(*s->node));
  size_t words = (s->tr.chunks.n + 63) / 64;
  uint64_t rng = s->sc.rng_seed * 0x2545f4914f6cdd1dull + 3;
  int r = 0;
  unsigned left = 0;
  for (int i = 0; i < s->n_node; i++) {
    node *n = &s->node[i];
    n->sim = s;
    n->idx = i;
    n->host = hosts[i];
    if (i == 0) {
      n->region = region_of(s, s->sc.seed_region);
    } else {
      while (left == 0)
        left = s->sc.regions[i == 1 ? r : ++r].nodes;
      n->region = r;
      left--;
    }
    n->rng = sim_xorshift(&rng) | 1;
    n->done = xcalloc(s->tr.count + 1, sizeof(*n->done));
    for (unsigned v = 0; v <= s->tr.count; v++)
      n->done[v] = -1;
    char name[16];
    snprintf(name, sizeof(name), "ctl%d", i);
    n->ctl = sg_mailbox_by_name(name);
    if (s->sc.central)
      continue;
    n->have = xcalloc(words, sizeof(*n->have));
    n->needed = xcalloc(words, sizeof(*n->needed));
    stitch_swarm_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memcpy(cfg.swarm.b, s->tr.swarm_pk, 32);
    if (i == 0) { /* the seed's node key is the swarm key */
      memcpy(cfg.node_pk.b, s->tr.swarm_pk, 32);
      memcpy(cfg.node_sk.b, s->tr.swarm_sk, 64);
    } else {
      keypair(&rng, &cfg.node_pk, &cfg.node_sk);
    }
    snprintf(cfg.listen, sizeof(cfg.listen), "n%d", i);
    snprintf(cfg.region, sizeof(cfg.region), "%s",
             s->sc.regions[n->region].name);
    cfg.seed = i == 0;
    cfg.max_peers = s->sc.max_peers;
    cfg.cross_region = s->sc.cross_region;
    cfg.pipeline = s->sc.pipeline;
    stitch_swarm_io io = {n,         io_random,  io_has,      io_read,
                          io_release, io_write, io_manifest, NULL};
    if (s->verbose)
      io.log = io_log;
    stitch_diag d = {{0}};
    if (stitch_swarm_new(&cfg, &io, &n->sw, &d) != 0)
      die(d.msg);
    if (i > 0)
      bootstrap(s, n, &rng);
  }
  for (int i = s->sc.central ? 1 : 0; i < s->n_node; i++) {
    char name[16];
    snprintf(name, sizeof(name), "n%d", i);
    sg_actor_t a = sg_actor_init(name, s->node[i].host);
    sg_actor_set_data(a, &s->node[i]);
    sg_actor_set_stacksize(a, STACK_KIB << 10);
    char *argv[] = {name, NULL};
    sg_actor_start(a, s->sc.central ? central_main : node_main, 1, argv);
  }
}

static void sim_free(sim *s) {
  for (int i = 0; s->node != NULL && i < s->n_node; i++) {
    node *n = &s->node[i];
    stitch_swarm_free(n->sw);
    free(n->have);
    free(n->needed);
    free(n->done);
    free(n->conns);
  }
  free(s->node);
  for (size_t i = 0; i < s->n_conn; i++)
    free(s->conn[i]);
  free(s->conn);
  free(s->published);
  free(s->at);
  sim_trajectory_free(&s->tr);
  sim_scenario_free(&s->sc);
}

/* ---- Running and reporting -------------------------------------------- */

static int report(sim *s, double wall_s, double rss_base, int as_json,
                  const char *plot_dir) {
  unsigned nv = s->tr.count, nn = s->sc.nodes;
  double *done = xcalloc((size_t)(nn + 1) * (nv + 1), sizeof(*done));
  uint64_t *egress = xcalloc(nn + 1, sizeof(*egress));
  uint64_t *seed_b = xcalloc(nv + 1, sizeof(*seed_b));
  uint64_t *cross_b = xcalloc(nv + 1, sizeof(*cross_b));
  double *bound = xcalloc(nv + 1, sizeof(*bound));
  double *node_bound = xcalloc(nv + 1, sizeof(*node_bound));
  sim_result r = {0};
  r.mode = s->sc.central ? "central" : "p2p";
  for (unsigned i = 0; i <= nn; i++) {
    node *n = &s->node[i];
    memcpy(&done[(size_t)i * (nv + 1)], n->done, (nv + 1) * sizeof(*done));
    egress[i] = n->wire_up;
    r.bad_writes += n->bad_writes;
    r.apply_errors += n->apply_errors;
    if (i > 0) {
      r.chunks_needed += n->needed_n;
      r.chunks_stored += n->stored;
    }
    if (n->sw != NULL) {
      stitch_swarm_stats st;
      stitch_swarm_get_stats(n->sw, &st);
      r.verify_failures += st.verify_failures;
      r.bans += st.bans;
    }
  }
  for (unsigned v = 1; v <= nv; v++) {
    const snap *a = &s->at[v], *b = v < nv && s->published[v + 1] >= 0
                                        ? &s->at[v + 1]
                                        : &s->end;
    uint64_t f = s->tr.v[v].bytes;
    unsigned far = 0; /* nodes outside the seed's region */
    for (size_t g = 0; g < s->sc.n_regions; g++)
      if (strcmp(s->sc.regions[g].name, s->sc.seed_region) != 0)
        far += s->sc.regions[g].nodes;
    seed_b[v] = s->sc.central ? (uint64_t)nn * f : b->seed_up - a->seed_up;
    cross_b[v] = s->sc.central ? (uint64_t)far * f : b->cross - a->cross;
    bound[v] = sim_bound(&s->sc, f);
    node_bound[v] = sim_node_bound(&s->sc, f);
    if (s->published[v] < 0)
      s->published[v] = INFINITY;
  }
  r.nodes = nn;
  r.versions = nv;
  r.v = s->tr.v;
  r.published = s->published;
  r.done = done;
  r.egress = egress;
  r.seed_bytes = seed_b;
  r.cross_bytes = cross_b;
  r.bound = bound;
  r.node_bound = node_bound;
  r.latency_s = sim_latency(&s->sc);
  r.wall_s = wall_s;
  r.sim_s = s->end_s;
  r.finished = s->finished;
  r.rss_base_mib = rss_base;
  r.rss_peak_mib = sim_rss_mib("VmHWM:");
  int rc = 0;
  json_t *o = sim_report_json(&r, 0);
  if (as_json) {
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
    fputc('\n', stdout);
  } else {
    sim_report_text(&r, stdout);
  }
  json_decref(o);
  if (plot_dir != NULL) {
    o = sim_report_json(&r, 1);
    rc = sim_plot(plot_dir, o);
    json_decref(o);
  }
  free(done);
  free(egress);
  free(seed_b);
  free(cross_b);
  free(bound);
  free(node_bound);
  return rc;
}

int main(int argc, char **argv) {
  const char *path = NULL, *plot_dir = NULL;
  int as_json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      as_json = 1;
    else if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc)
      plot_dir = argv[++i];
    else if (argv[i][0] != '-' && path == NULL)
      path = argv[i];
    else
      path = NULL, i = argc;
  }
  if (path == NULL) {
    fprintf(stderr, "usage: stitch-sim SCENARIO.json [--json] [--plot DIR]\n");
    return 2;
  }
  if (sodium_init() < 0)
    die("libsodium failed to start");
  double t0 = sim_wall();
  sim s;
  memset(&s, 0, sizeof(s));
  const char *lg = getenv("STITCH_SIM_LOG");
  s.verbose = lg != NULL && *lg == '1';
  char err[512];
  if (sim_scenario_load(path, &s.sc, err, sizeof(err)) != 0)
    die(err);
  if (sim_trajectory_make(&s.sc, &s.tr, err, sizeof(err)) != 0)
    die(err);
  s.published = xcalloc(s.tr.count + 2, sizeof(*s.published));
  s.at = xcalloc(s.tr.count + 2, sizeof(*s.at));
  for (unsigned v = 0; v <= s.tr.count + 1; v++)
    s.published[v] = -1;
  /* CM02 without correction factors: a message costs the route's latency
   * once, then its bytes at its max-min fair share (docs/simulator.md). */
  char *sg_argv[] = {argv[0],
                     "--cfg=network/model:CM02",
                     "--cfg=network/crosstraffic:0",
                     "--cfg=contexts/stack-size:" "256",
                     "--log=root.thres:critical",
                     NULL};
  int sg_argc = 5;
  simgrid_init(&sg_argc, sg_argv);
  void **hosts = xcalloc(s.sc.nodes + 2, sizeof(*hosts));
  if (sim_platform_build(&s.sc, hosts, err, sizeof(err)) != 0)
    die(err);
  nodes_make(&s, hosts);
  sg_actor_t ctl = sg_actor_init("controller",
                                 hosts[s.sc.central ? s.sc.nodes + 1 : 0]);
  sg_actor_set_data(ctl, &s);
  char *cargv[] = {"controller", NULL};
  sg_actor_start(ctl, controller_main, 1, cargv);
  double rss_base = sim_rss_mib("VmRSS:");
  simgrid_run();
  int rc = report(&s, sim_wall() - t0, rss_base, as_json, plot_dir);
  if (s.verbose)
    fprintf(stderr, "stitch-sim: %" PRIu64 " messages, %" PRIu64
                    " wake-ups, %zu connections\n",
            s.messages, s.events, s.n_conn);
  if (!s.finished)
    fprintf(stderr, "stitch-sim: not every node held every version by "
                    "%.1f s\n", s.sc.time_limit_s);
  free(hosts);
  sim_free(&s);
  return rc != 0 || !s.finished ? 1 : 0;
}
