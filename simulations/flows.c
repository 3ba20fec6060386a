/* flows.c: the "flows" network: every message is a SimGrid comm, shared
 * max-min fairly with every other flow on its route (driver.h compares the
 * two networks; docs/simulator.md has the model's settings).
 *
 * Each node and the seed is one SimGrid actor. A pipe is a mailbox whose
 * receiver is fixed (sg_mailbox_set_receiver), so a message's transfer
 * starts when it is put and messages are taken in the order they were
 * put. A pipe is a TCP stream: of the messages its core handed over (up
 * to PIPE_MSGS), one is on the links at a time, and the next is put when
 * it is in. With all of them on the links at once, side by side, the
 * first of a round came whole only with the last: the seed's first
 * chunks of a delta reached their nodes about when all of them did, and
 * on netlab's home links the median node was 25 % late (docs/simulator.md
 * "The simulator against netlab"). An actor waits for the first of: a
 * message on one of its pipes or its control mailbox, the end of one of
 * its sends, or its core's wake-up.
 *
 * SimGrid 3.32 keeps every comm an actor started in that actor's activity
 * list until the actor waits on it (sg_comm_test on a finished comm leaves
 * it there, and the list is scanned at every completion), so the sends in
 * flight are always part of the wait, never tested.
 *
 * The links have no latency (platform.cpp): SimGrid's max-min weighs each
 * flow by its route's latency, so a flow across regions got a tenth of a
 * shared uplink beside flows inside one, as TCP Reno would, where the
 * hosts' BBR and fair queueing give each connection its share whatever
 * its round trip. Here a message's bytes move at their max-min share,
 * unweighted, and the receiver holds what came until the route's latency
 * has passed (hold, deliver), in order of arrival: the same latency and
 * bytes as before, shared the way netlab's hosts share them.
 *
 * Loss and jitter are the queues network's (faults.c sim_path), drawn
 * when a data message is sent: the bytes lost are sent again on the
 * links, and the delay of their recovery is added to the hold, in the
 * pipe's order. DIAL, ACCEPT and CLOSE (the control mailbox) pay neither. */
#include "driver.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/mailbox.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STACK_KIB 256 /* per actor; touched pages only count */

void flows_ctl_send(sim *s, int from, int to, msg_kind kind, uint32_t c) {
  (void)from; /* the comm starts on the calling actor's host */
  sg_comm_t cm =
      sg_mailbox_put_init(s->node[to].ctl, msg_new(s, kind, c, NULL, 0),
                          (long)sim_wire_bytes(s, CTL_BYTES));
  sg_comm_detach(cm, free);
}

void flows_listen(sim *s, node *n, uint32_t ci) {
  conn *c = s->conn[ci];
  pipe_ *p = &c->d[1 - side_of(c, n->idx)];
  if (p->mb == NULL) {
    char name[32];
    snprintf(name, sizeof(name), "c%u.%d", ci, 1 - side_of(c, n->idx));
    p->mb = sg_mailbox_by_name(name);
  }
  sg_mailbox_set_receiver(sg_mailbox_get_name(p->mb));
  p->get = sg_mailbox_get_async(p->mb, (void **)&p->got);
}

/* Nothing more is taken from the pipe to N: a get left pending would stay
 * in N's activity list. */
void flows_unlisten(sim *s, node *n, uint32_t ci) {
  conn *c = s->conn[ci];
  pipe_ *p = &c->d[1 - side_of(c, n->idx)];
  if (p->get != NULL) {
    sim_comm_cancel(p->get);
    p->get = NULL;
  }
}

void flows_send(sim *s, node *n, uint32_t ci, msg *m) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx);
  pipe_ *p = &c->d[side];
  if (p->mb == NULL) {
    char name[32];
    snprintf(name, sizeof(name), "c%u.%d", ci, side);
    p->mb = sg_mailbox_by_name(name);
  }
  /* Jitter and loss (faults.c): the retransmitted bytes go on the links,
   * the recovery's delay is held at the receiver (on_comm). */
  sim_route rt;
  sim_path(s, n->idx, c->node[1 - side], m->len,
           m->len > FRAME_CTL_MAX || m->ref != NULL, now_s(s), &rt);
  m->extra = rt.extra;
  long bytes = (long)(sim_wire_bytes(s, (double)m->len) * rt.inflate);
  p->sent[p->nput++] = (sent_msg){m, m->len, bytes};
  p->inflight += m->len;
  if (p->nput == 1) /* else behind the one on the links (on_comm) */
    p->put = sg_mailbox_put_async(p->mb, m, bytes);
}

void flows_publish_central(sim *s, unsigned v) {
  for (int i = 1; i < s->n_node; i++) {
    double bytes = sim_wire_bytes(s, (double)s->tr.v[v].bytes);
    sg_comm_t cm = sg_mailbox_put_init(
        s->node[i].ctl, msg_new(s, MSG_PUBLISH, v, NULL, 0), (long)bytes);
    sg_comm_detach(cm, free);
  }
}

/* ---- Latency: what came waits out its route's latency ------------------ */

typedef struct late {
  double due;   /* when it is delivered */
  uint64_t seq; /* the order it came in, among those due at once */
  msg *m;
  uint32_t conn; /* a data message's link; UINT32_MAX: a control one */
} late;

/* The one-way latency (s) from node A's host to node B's: platform.cpp's
 * links' latencies, which SimGrid is not given. */
static double one_way(const sim *s, int a, int b) {
  const sim_region *r = s->sc.regions;
  return sim_route_ms(&s->sc, &r[s->node[a].region], &r[s->node[b].region]) /
         1e3;
}

static int late_before(const late *a, const late *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

/* N holds M (on link CI, or a control message) until DUE. */
static void hold(node *n, msg *m, uint32_t ci, double due) {
  if (n->n_late == n->cap_late) {
    n->cap_late = n->cap_late ? n->cap_late * 2 : 16;
    n->late = realloc(n->late, n->cap_late * sizeof(*n->late));
    if (n->late == NULL)
      die("out of memory");
  }
  late h = {due, n->late_seq++, m, ci};
  size_t i = n->n_late++;
  for (; i > 0 && late_before(&h, &n->late[(i - 1) / 2]); i = (i - 1) / 2)
    n->late[i] = n->late[(i - 1) / 2];
  n->late[i] = h;
}

static late unhold(node *n) {
  late top = n->late[0], last = n->late[--n->n_late];
  size_t i = 0;
  for (;;) {
    size_t k = 2 * i + 1;
    if (k >= n->n_late)
      break;
    if (k + 1 < n->n_late && late_before(&n->late[k + 1], &n->late[k]))
      k++;
    if (!late_before(&n->late[k], &last))
      break;
    n->late[i] = n->late[k];
    i = k;
  }
  if (n->n_late > 0)
    n->late[i] = last;
  return top;
}

/* Hands N's core what is due, one message at a time, each followed by
 * the core's step, as when each came by itself. */
static void deliver(sim *s, node *n) {
  while (n->n_late > 0 && n->late[0].due <= now_s(s)) {
    late h = unhold(n);
    if (h.conn == UINT32_MAX)
      on_ctl(s, n, h.m);
    else
      on_data(s, n, h.conn, h.m);
    free(h.m);
    node_step(s, n);
  }
}

/* ---- A node's actor --------------------------------------------------- */

typedef struct waiter {
  void **comm;
  uint32_t *conn;
  int *what; /* -1 control, 0 get, 1 the pipe's send */
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

/* Everything N waits for: its control mailbox, its open pipes, its sends. */
static void wait_list(sim *s, node *n, waiter *w) {
  w->n = 0;
  wait_add(w, n->ctl_get, 0, -1);
  for (size_t i = 0; i < n->n_conns; i++) {
    conn *c = s->conn[n->conns[i]];
    int side = side_of(c, n->idx);
    if (c->open[side] && c->d[1 - side].get != NULL)
      wait_add(w, c->d[1 - side].get, n->conns[i], 0);
    if (c->d[side].put != NULL)
      wait_add(w, c->d[side].put, n->conns[i], 1);
  }
}

/* What ended at position POS of W (FAILED: a pipe closed under it). */
static void on_comm(sim *s, node *n, const waiter *w, long pos, int failed) {
  int what = w->what[pos];
  if (failed && what == 0) { /* a get: nothing more comes on that pipe */
    conn *c = s->conn[w->conn[pos]];
    c->d[1 - side_of(c, n->idx)].get = NULL;
    return;
  }
  if (failed && what < 0)
    die("a control message failed");
  if (what < 0) {
    msg *m = n->ctl_msg;
    n->ctl_get = sg_mailbox_get_async(n->ctl, (void **)&n->ctl_msg);
    double due = now_s(s); /* a publish: from the seed's own store */
    if (m->kind != MSG_PUBLISH) {
      const conn *c = s->conn[m->conn];
      due += one_way(s, c->node[1 - side_of(c, n->idx)], n->idx);
      if (m->kind == MSG_CLOSE) /* after the data, as a FIN */
        due = fmax(due, c->d[1 - side_of(c, n->idx)].last_arrival);
    }
    hold(n, m, UINT32_MAX, due);
    return;
  }
  conn *c = s->conn[w->conn[pos]];
  int side = side_of(c, n->idx);
  if (what == 0) {
    pipe_ *p = &c->d[1 - side];
    msg *m = p->got;
    p->get = sg_mailbox_get_async(p->mb, (void **)&p->got);
    /* In order: a message behind one that lost a packet waits for it. */
    double due = now_s(s) + one_way(s, c->node[1 - side], n->idx) + m->extra;
    p->last_arrival = due = fmax(due, p->last_arrival);
    hold(n, m, w->conn[pos], due);
  } else { /* a send ended: the window has room again */
    pipe_ *p = &c->d[side];
    p->inflight -= p->sent[0].len;
    memmove(&p->sent[0], &p->sent[1],
            (size_t)(p->nput - 1) * sizeof(p->sent[0]));
    p->nput--;
    p->put = NULL;
    if (p->nput > 0) /* the next one's turn */
      p->put = sg_mailbox_put_async(p->mb, p->sent[0].m, p->sent[0].bytes);
    if (p->nput == 0 && c->fin[side]) { /* conn_close waited for this */
      c->fin[side] = 0;
      flows_ctl_send(s, n->idx, c->node[1 - side], MSG_CLOSE, w->conn[pos]);
    }
  }
}

static void node_main(int argc, char **argv) {
  (void)argc, (void)argv;
  node *n = sg_actor_self_get_data();
  sim *s = n->sim;
  waiter w = {0};
  sg_actor_daemonize(sg_actor_self());
  sg_mailbox_set_receiver(sg_mailbox_get_name(n->ctl));
  n->ctl_get = sg_mailbox_get_async(n->ctl, (void **)&n->ctl_msg);
  if (n->state == NODE_WAITING) { /* a joiner (churn.c): nobody knows it yet */
    sg_actor_sleep_until(s->ch.join_s[n->idx]);
    node_join(s, n);
  }
  node_step(s, n);
  double leave = s->ch.leave_s[n->idx];
  for (;;) {
    /* A node that left keeps its actor, without a core: its sends in
     * flight end, and a DIAL to it fails (on_ctl). */
    wait_list(s, n, &w);
    uint64_t wake = n->sw != NULL ? stitch_swarm_wake(n->sw) : UINT64_MAX;
    double due = wake == UINT64_MAX ? INFINITY : (double)wake / 1e3;
    if (n->state == NODE_LIVE)
      due = fmin(due, leave);
    if (n->n_late > 0)
      due = fmin(due, n->late[0].due);
    double timeout = isfinite(due) ? fmax(due - now_s(s) + 1e-7, 0) : -1.0;
    int failed;
    long pos = sim_wait_any_for(w.comm, w.n, timeout, &failed);
    if (pos < -1)
      die("a communication failed");
    if (pos >= 0)
      on_comm(s, n, &w, pos, failed);
    deliver(s, n);
    if (n->state == NODE_LIVE && now_s(s) >= leave)
      node_leave(s, n);
    node_step(s, n);
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
      n->done[m->conn] = now_s(n->sim) + one_way(n->sim, 0, n->idx);
    free(m);
  }
}

static void controller_main(int argc, char **argv) {
  (void)argc, (void)argv;
  sim *s = sg_actor_self_get_data();
  for (double wake; (wake = controller_step(s)) >= 0;)
    sg_actor_sleep_until(wake);
}

void flows_start(sim *s, void **hosts) {
  for (int i = s->sc.central ? 1 : 0; i < s->n_node; i++) {
    char name[16];
    snprintf(name, sizeof(name), "ctl%d", i);
    s->node[i].ctl = sg_mailbox_by_name(name);
    snprintf(name, sizeof(name), "n%d", i);
    sg_actor_t a = sg_actor_init(name, s->node[i].host);
    sg_actor_set_data(a, &s->node[i]);
    sg_actor_set_stacksize(a, STACK_KIB << 10);
    char *argv[] = {name, NULL};
    sg_actor_start(a, s->sc.central ? central_main : node_main, 1, argv);
  }
  sg_actor_t ctl = sg_actor_init("controller",
                                 hosts[s->sc.central ? s->ch.slots : 0]);
  sg_actor_set_data(ctl, s);
  char *cargv[] = {"controller", NULL};
  sg_actor_start(ctl, controller_main, 1, cargv);
}

static double flows_now(const sim *s) {
  (void)s;
  return simgrid_get_clock();
}

/* At most PIPE_MSGS comms in flight on a pipe. */
static int flows_pipe_ready(const pipe_ *p) { return p->nput < PIPE_MSGS; }

const sim_net sim_net_flows = {
    .now = flows_now,
    .pipe_ready = flows_pipe_ready,
    .ctl_send = flows_ctl_send,
    .send = flows_send,
    .publish_central = flows_publish_central,
    .listen = flows_listen,
    .unlisten = flows_unlisten,
    .close_after_data = 1,
};
