/* queue.c: the "queues" network, for thousands of nodes (driver.h says
 * why SimGrid's flows cannot go there; docs/simulator.md has the model).
 *
 * The same platform as platform.cpp builds: every host has an up and a
 * down link, every region a link out to the backbone and one in. Here each
 * link is a calendar (qlink.h): a message of S bytes takes S / bandwidth
 * of each link on its route, in the first free stretch of that link from
 * when it can start there, and reaches the receiver after the last link's
 * share plus the route's latency. A link passes a message on as soon as
 * it starts (cut-through), so a message takes as long as its slowest
 * link, not the sum. No link ever carries more than its bandwidth, so no
 * completion can beat the bound, which rests on link capacities only.
 *
 * A chunk goes on the links in pieces (send_piece; their size is the
 * kernel's TSO burst at the uplink's rate, slice_of), so that the chunks
 * a sender has out at once take turns on its uplink, as its sockets'
 * segments do; it arrives whole.
 *
 * Messages of at most FRAME_CTL_MAX (control frames: HAVE, REQUEST, ...) do
 * not queue (a piece of a larger message does, however small): they cost
 * their route's latency and their bytes at the slowest link's rate, as a
 * small packet does beside bulk TCP flows that share a link fairly. A
 * chunk never counts as one, however small: when the limit was
 * SMALL_BYTES (16 KiB), versions cut into 16 KiB chunks crossed every
 * link at its full rate at once, and nodes held them in a quarter of the
 * time the links allow. Every message of a pipe still arrives after the
 * one sent before it: a pipe is a byte stream. A larger message's bytes
 * count as unsent (pipe_.unsent) until no more than their low-water mark
 * of them waits to leave the sender's uplink (EV_SENT): a pipe takes more
 * only with none unsent (driver.h, PIPE_WINDOW).
 *
 * One SimGrid actor runs every core from one event heap (arrivals and
 * wake-ups, ordered by time, then by when they were queued, so a run is
 * deterministic). The simulation's clock is the loop's own (queue_now);
 * SimGrid's is moved to it once, at the end (queue_main). */
#include "driver.h"
#include "qlink.h"

#include <simgrid/actor.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* As stitchd, whose writes over it are bulk and set their own mark. */
#define SMALL_BYTES STITCH_SWARM_LOWAT_MIN

typedef enum ev_kind {
  EV_WAKE, EV_CTL, EV_DATA, EV_CENTRAL, EV_JOIN, EV_LEAVE, EV_SENT, EV_PIECE
} ev_kind;

typedef struct event {
  double t;
  int node;
  ev_kind kind;
  msg *m;
  uint32_t conn; /* EV_SENT: of this connection's pipe from the node, */
  size_t len;    /* these bytes are within their mark; EV_PIECE: the
                    pipe's message M has this much on the links */
} event;

/* An event's place in the heap: its time, then, for equal times, the
 * order in which they were queued (the high bits of KEY, so a run is
 * deterministic), and its slot in the pool (the low bits). */
typedef struct ev_key {
  double t;
  uint64_t key;
} ev_key;

#define EV_SLOT_BITS 28
#define EV_SLOT_MASK ((UINT64_C(1) << EV_SLOT_BITS) - 1)
/* Entries before heap[0] in its allocation, so that the children of
 * each node, heap[4i + 1 .. 4i + 4], start a 64-byte line. */
#define EV_HEAP_PAD 3

typedef struct qnet {
  qlink *up, *down; /* [host]: the node slots (churn.c), then the store */
  int *region;      /* [host] */
  qlink *out, *in;  /* [region] */
  double *lat;      /* [region]: one-way latency between two of its hosts */
  double inter_lat;
  int pace;     /* pipes paced (pace_*); STITCH_SIM_PACE=0: not */
  /* The events waiting, by time (ev_push): a 4-ary heap of 16-byte
   * keys, so that a node's four children share a cache line, over a
   * pool of the events themselves. */
  ev_key *heap;
  size_t n, cap;
  uint64_t seq;
  event *pool;
  uint32_t *free_slot; /* of the pool */
  size_t n_free;
} qnet;

static double bytes_per_s(double mbps) { return mbps * 1e6 / 8; }

void queue_init(sim *s) {
  const sim_scenario *sc = &s->sc;
  size_t hosts = s->ch.slots + 1, nr = sc->n_regions;
  qnet *q = calloc(1, sizeof(*q));
  if (q == NULL || (q->up = calloc(hosts, sizeof(*q->up))) == NULL ||
      (q->down = calloc(hosts, sizeof(*q->down))) == NULL ||
      (q->region = calloc(hosts, sizeof(*q->region))) == NULL ||
      (q->out = calloc(nr, sizeof(*q->out))) == NULL ||
      (q->in = calloc(nr, sizeof(*q->in))) == NULL ||
      (q->lat = calloc(nr, sizeof(*q->lat))) == NULL)
    die("out of memory");
  s->q = q;
  const char *pace = getenv("STITCH_SIM_PACE");
  q->pace = pace == NULL || strcmp(pace, "0") != 0;
  q->inter_lat = sc->inter_latency_ms / 1e3;
  for (size_t r = 0; r < nr; r++) {
    const sim_region *g = &sc->regions[r];
    q->out[r].bps = q->in[r].bps = bytes_per_s(sc->inter_mbps);
    q->lat[r] = g->latency_ms / 1e3;
    if (strcmp(g->name, sc->seed_region) == 0) {
      q->region[0] = q->region[hosts - 1] = (int)r;
      q->up[0].bps = bytes_per_s(sc->seed_up_mbps);
      q->down[0].bps = bytes_per_s(sc->seed_down_mbps);
      q->up[hosts - 1].bps = q->down[hosts - 1].bps =
          bytes_per_s(sc->central ? sc->central_mbps : sc->seed_up_mbps);
    }
  }
  for (size_t h = 1; h + 1 < hosts; h++) { /* nodes and joiners */
    const sim_region *g = &sc->regions[s->ch.region[h]];
    q->region[h] = s->ch.region[h];
    q->up[h].bps = bytes_per_s(g->up_mbps);
    q->down[h].bps = bytes_per_s(g->down_mbps);
  }
}

void queue_free(sim *s) {
  qnet *q = s->q;
  if (q == NULL)
    return;
  for (size_t i = 0; i < q->n; i++)
    free(q->pool[q->heap[i].key & EV_SLOT_MASK].m);
  free(q->heap - EV_HEAP_PAD);
  free(q->pool);
  free(q->free_slot);
  for (size_t h = 0; h < s->ch.slots + 1; h++) {
    qlink_free(&q->up[h]);
    qlink_free(&q->down[h]);
  }
  for (size_t r = 0; r < s->sc.n_regions; r++) {
    qlink_free(&q->out[r]);
    qlink_free(&q->in[r]);
  }
  free(q->up);
  free(q->down);
  free(q->region);
  free(q->out);
  free(q->in);
  free(q->lat);
  free(q);
  s->q = NULL;
}

/* ---- The event heap --------------------------------------------------- */

static int ev_before(const ev_key *a, const ev_key *b) {
  return a->t < b->t || (a->t == b->t && a->key < b->key);
}

static void ev_grow(qnet *q) {
  size_t cap = q->cap ? q->cap * 2 : 4096;
  if (cap > EV_SLOT_MASK + 1)
    die("more than 2^28 events waiting at once");
  /* aligned_alloc takes a size that is a multiple of the alignment. */
  size_t bytes = ((cap + EV_HEAP_PAD) * sizeof(ev_key) + 63) & ~(size_t)63;
  ev_key *h = aligned_alloc(64, bytes);
  event *pool = realloc(q->pool, cap * sizeof(*pool));
  uint32_t *fs = realloc(q->free_slot, cap * sizeof(*fs));
  if (h == NULL || pool == NULL || fs == NULL)
    die("out of memory");
  if (q->heap != NULL) {
    memcpy(h + EV_HEAP_PAD, q->heap, q->n * sizeof(*h));
    free(q->heap - EV_HEAP_PAD);
  }
  q->heap = h + EV_HEAP_PAD;
  q->pool = pool;
  q->free_slot = fs;
  for (size_t k = cap; k > q->cap; k--) /* the new slots, lowest first */
    q->free_slot[q->n_free++] = (uint32_t)(k - 1);
  q->cap = cap;
}

static void ev_push_event(qnet *q, event e) {
  if (q->n_free == 0)
    ev_grow(q);
  if (q->seq >> (64 - EV_SLOT_BITS) != 0)
    die("more than 2^36 events");
  uint32_t slot = q->free_slot[--q->n_free];
  q->pool[slot] = e;
  ev_key k = {e.t, q->seq++ << EV_SLOT_BITS | slot};
  size_t i = q->n++;
  while (i > 0 && ev_before(&k, &q->heap[(i - 1) / 4])) {
    q->heap[i] = q->heap[(i - 1) / 4];
    i = (i - 1) / 4;
  }
  q->heap[i] = k;
}

static void ev_push(qnet *q, double t, int to, ev_kind kind, msg *m) {
  ev_push_event(q, (event){t, to, kind, m, 0, 0});
}

static event ev_pop(qnet *q) {
  uint32_t slot = (uint32_t)(q->heap[0].key & EV_SLOT_MASK);
  event top = q->pool[slot];
  q->free_slot[q->n_free++] = slot;
  ev_key last = q->heap[--q->n];
  size_t i = 0;
  for (;;) {
    size_t c = 4 * i + 1, end = c + 4 < q->n ? c + 4 : q->n;
    if (c >= q->n)
      break;
    for (size_t j = c + 1; j < end; j++)
      if (ev_before(&q->heap[j], &q->heap[c]))
        c = j;
    if (!ev_before(&q->heap[c], &last))
      break;
    q->heap[i] = q->heap[c];
    i = c;
  }
  if (q->n > 0) {
    q->heap[i] = last;
    /* The next event's payload is far from its key: fetch it while
     * this one runs. */
    __builtin_prefetch(&q->pool[q->heap[0].key & EV_SLOT_MASK]);
  }
  return top;
}

/* ---- The links -------------------------------------------------------- */

/* One-way latency from host A to host B. */
static double route_latency(const qnet *q, int a, int b) {
  int ra = q->region[a], rb = q->region[b];
  double l = q->lat[ra] / 2 + q->lat[rb] / 2;
  return ra == rb ? l : l + q->inter_lat;
}

static void book(qlink *l, double now, double bytes, double *start,
                 double *end) {
  if (qlink_book(l, now, bytes, start, end) != 0)
    die("out of memory");
}

/* BYTES take their share of each link from host A to host B from T,
 * without waiting for it: a control frame (it goes beside the queues, a
 * small packet of its own connection, which a fair-queued link sends in
 * its turn), or the acknowledgements of a bulk message, one a second
 * full segment, on the receiver's uplink. The bulk booked after them
 * finds less room. */
static void charge(sim *s, int a, int b, double bytes, double t) {
  qnet *q = s->q;
  int ra = q->region[a], rb = q->region[b];
  qlink_charge(&q->up[a], t, bytes);
  if (ra != rb) {
    qlink_charge(&q->out[ra], t, bytes);
    qlink_charge(&q->in[rb], t, bytes);
  }
  qlink_charge(&q->down[b], t, bytes);
}

/* When BYTES sent from host A no sooner than T0 (at least now) reach
 * host B; *UP, if not NULL, gets the stretch in which they leave A's
 * uplink (T0 for a small message). QUEUED: they wait their turn on each
 * link, as a message over FRAME_CTL_MAX, a chunk's bytes and every piece
 * of them do, however small (pieces of 2 KiB or less, on uplinks slow
 * enough for pieces of a few KiB, once passed beside the queues as
 * control frames, their bytes taking no time on the uplink); else they
 * pass beside. */
static double transfer(sim *s, int a, int b, size_t bytes, int queued,
                       double t0, double up[2]) {
  qnet *q = s->q;
  int ra = q->region[a], rb = q->region[b];
  /* Partitions, loss and jitter (faults.c): when it can leave, its bytes
   * with loss's retransmissions, and the delay they add. */
  sim_route rt;
  sim_path(s, a, b, bytes, queued, fmax(t0, s->clock), &rt);
  double now = rt.depart, sz = sim_wire_bytes(s, (double)bytes) * rt.inflate;
  if (up != NULL)
    up[0] = up[1] = now;
  if (!queued) { /* beside the queues, at the slowest rate */
    double bps = fmin(q->up[a].bps, q->down[b].bps);
    if (ra != rb)
      bps = fmin(bps, fmin(q->out[ra].bps, q->in[rb].bps));
    if (s->wire)
      charge(s, a, b, sz, now);
    return now + sz / bps + route_latency(q, a, b) + rt.extra;
  }
  double start = now, end = now;
  book(&q->up[a], now, sz, &start, &end);
  if (up != NULL) {
    up[0] = start;
    up[1] = end;
  }
  if (ra != rb) {
    book(&q->out[ra], now, sz, &start, &end);
    book(&q->in[rb], now, sz, &start, &end);
  }
  book(&q->down[b], now, sz, &start, &end);
  double arrival = end + route_latency(q, a, b) + rt.extra;
  /* Its acknowledgements, one a second full segment, on B's uplink. */
  if (s->wire)
    charge(s, b, a, ceil((double)bytes / (2 * QUEUE_MSS)) * WIRE_HDR,
           arrival);
  return arrival;
}

/* ---- Sending ---------------------------------------------------------- */

uint64_t queue_link_bytes(const sim *s, int host) {
  return (uint64_t)llround(s->q->up[host].carried);
}

void queue_ctl_send(sim *s, int from, int to, msg_kind kind, uint32_t c) {
  double t =
      from == to ? s->clock : transfer(s, from, to, CTL_BYTES, 0, 0, NULL);
  if (kind == MSG_CLOSE) { /* after the data already on its way, as a FIN */
    conn *cn = s->conn[c];
    pipe_ *p = &cn->d[side_of(cn, from)];
    if (p->piecing != NULL) { /* sent when its last piece is */
      p->close_after = 1;
      return;
    }
    t = fmax(t, p->last_arrival);
  } else if (kind == MSG_ACCEPT) {
    /* Before the data the acceptor sends next, as TCP's SYN-ACK: a HELLO
     * smaller than CTL_BYTES would otherwise reach a dialer that has not
     * opened the link, and be lost. */
    conn *cn = s->conn[c];
    pipe_ *p = &cn->d[side_of(cn, from)];
    p->last_arrival = fmax(p->last_arrival, t);
  }
  ev_push(s->q, t, to, EV_CTL, msg_new(s, kind, c, NULL, 0));
}

/* ---- A connection's pace ---------------------------------------------- */

/* BBR (netlab's congestion control) keeps per connection an estimate of the
 * rate its path gives it, the largest delivery rate of its last 10 round
 * trips, and paces what it sends at it, probing upwards by a quarter every 8
 * round trips (its gain cycle). A connection that shared a busy uplink keeps
 * that share as its estimate through a pause, as rounds pass only while data
 * is delivered, and its next message goes out at that pace, not at the
 * link's rate: `ss -tin` on netlab found 1.3-2.5 Mbit/s estimates on 10
 * Mbit/s links after an anchor (docs/simulator.md "A connection's pace").
 * Here a pipe's sample is a message's delivery rate, its bytes after the
 * first piece over the longer of the times from the first piece's arrival
 * to the last's and from the first piece's leaving the uplink to the
 * last's (a message of one piece, a burst at the uplink's rate, gives
 * none); a sample
 * replaces the estimate when it is larger, or when the estimate is older
 * than 10 round trips under load: the route's round trip plus what the
 * sender's queue then holds, netlab's byte FIFO of max(256 KiB, 100 ms) at
 * the uplink's rate (ping through an anchor there: 160 and 416 ms against 10
 * and 93 at rest). The probes and the idle restart run on the route's round
 * trip at rest. STITCH_SIM_PACE=0 sends at the links' rates. */
#define PACE_PROBE 1.25     /* the gain cycle's step... */
#define PACE_CYCLE_RTTS 8.0 /* ...every 8 round trips */
#define PACE_ROUNDS 10.0    /* the estimate's window, in round trips */
#define PACE_FIFO_BYTES 262144.0
#define PACE_FIFO_S 0.1

static double pace_rtt(const qnet *q, int a, int b) {
  return fmax(2 * route_latency(q, a, b), 1e-4);
}

/* A message of pipe P from host A to host B starts now. After a round
 * trip with nothing sent BBR restarts at a gain of 1 and keeps its
 * estimate (no round passed: its age stands still). */
static void pace_start(sim *s, pipe_ *p, int a, int b) {
  if (p->busy_until + pace_rtt(s->q, a, b) < s->clock) {
    p->bw_at += s->clock - p->busy_until;
    p->cycle0 = s->clock;
  }
  p->first_arrival = -1;
}

/* The rate at which pipe P paces a piece it starts at T; 0: unpaced. */
static double pace_rate(const sim *s, const pipe_ *p, int a, int b,
                        double t) {
  if (p->bw <= 0 || !s->q->pace)
    return 0;
  double cycles =
      floor((t - p->cycle0) / (PACE_CYCLE_RTTS * pace_rtt(s->q, a, b)));
  return cycles > 30 ? 0 /* probed past any link */
                     : p->bw * pow(PACE_PROBE, fmax(cycles, 0));
}

/* LEN bytes of pipe P's message of MSG_LEN (LAST: its last piece) left
 * host A's uplink over UP and are all in at host B by ARRIVAL. */
static void pace_sent(sim *s, pipe_ *p, int a, int b, size_t len,
                      const double up[2], double arrival, size_t msg_len,
                      int last) {
  double rate = pace_rate(s, p, a, b, up[0]);
  p->next_ok = rate > 0 ? up[0] + (double)len / rate : 0;
  p->busy_until = up[1];
  if (p->first_arrival < 0) {
    p->first_arrival = arrival;
    p->first_left = up[1];
    p->first_len = len;
  }
  if (!last || arrival <= p->first_arrival)
    return;
  /* Over the longer of the spans the bytes took to leave and to arrive,
   * as Linux's rate sample takes the larger of its send and ack intervals
   * (tcp_rate.c): pieces held on the way and delivered close together
   * made rates the sender never sent at (1 or 2 samples a run on
   * netlab_sym.json, 20 Mbit/s from a 10 Mbit/s uplink). */
  double span = fmax(arrival - p->first_arrival, up[1] - p->first_left);
  double sample = (double)(msg_len - p->first_len) / span;
  double fifo = fmax(PACE_FIFO_BYTES / s->q->up[a].bps, PACE_FIFO_S);
  double window = PACE_ROUNDS * (pace_rtt(s->q, a, b) + fifo);
  if (sample >= p->bw || arrival - p->bw_at > window) {
    p->bw = sample;
    p->bw_at = arrival;
    p->cycle0 = arrival;
  }
}

/* The size of the pieces in which a message of LEN bytes leaves host
 * FROM's uplink: Linux's TSO autosizing, about 1 ms of the rate (here
 * the uplink's; a socket's pacing rate is at most that) and at least two
 * segments, at most QUEUE_SLICE (a GSO burst); and no more than
 * QUEUE_PIECES of them below QUEUE_SLICE's, which keeps the events few
 * where the pieces would be far smaller than the message. */
static size_t slice_of(const qnet *q, int from, size_t len) {
  double b = fmax(q->up[from].bps * QUEUE_TSO_S, 2 * QUEUE_MSS);
  b = fmax(b, ceil((double)len / QUEUE_PIECES));
  return b < QUEUE_SLICE ? (size_t)b : QUEUE_SLICE;
}

/* Puts the next piece of message M on connection CI from host FROM on
 * the links, OFF bytes of it being there already (slice_of): pieces of
 * equal size, the next one booked when this one is within a quarter of a
 * piece (at most SMALL_BYTES) of leaving the uplink, by when the sender's
 * other pipes have booked theirs, so they take turns. After the last
 * piece the message arrives whole, at the latest of its pieces' arrivals;
 * the pipe takes more once it is within its mark of leaving (EV_SENT), as
 * an unpieced message does. */
static void send_piece(sim *s, int from, uint32_t ci, msg *m, size_t off) {
  conn *c = s->conn[ci];
  int side = side_of(c, from), to = c->node[1 - side];
  pipe_ *p = &c->d[side];
  size_t slice = slice_of(s->q, from, m->len);
  size_t pieces = (m->len + slice - 1) / slice;
  size_t size = (m->len + pieces - 1) / pieces;
  size_t len = m->len - off < size ? m->len - off : size;
  double lead = fmin((double)size / 4, SMALL_BYTES);
  double up[2];
  double t = transfer(s, from, to, len, 1, p->next_ok, up);
  p->piece_arrival = off == 0 ? t : fmax(p->piece_arrival, t);
  off += len;
  pace_sent(s, p, from, to, len, up, p->piece_arrival, m->len, off == m->len);
  if (off < m->len) {
    double next = qlink_left(&s->q->up[from], up[0], up[1], lead);
    ev_push_event(s->q, (event){fmax(next, p->next_ok), from, EV_PIECE, m,
                                ci, off});
    return;
  }
  p->piecing = NULL;
  t = fmax(p->piece_arrival, p->last_arrival);
  p->last_arrival = t;
  double mark = (double)stitch_swarm_lowat(m->len);
  ev_push_event(s->q, (event){qlink_left(&s->q->up[from], up[0], up[1], mark),
                              from, EV_SENT, NULL, ci, m->len});
  ev_push(s->q, t, to, EV_DATA, m);
  if (p->close_after) { /* its CLOSE waited for it */
    p->close_after = 0;
    ev_push(s->q, t, to, EV_CTL, msg_new(s, MSG_CLOSE, ci, NULL, 0));
  }
}

void queue_send(sim *s, node *n, uint32_t ci, msg *m) {
  conn *c = s->conn[ci];
  int side = side_of(c, n->idx), to = c->node[1 - side];
  pipe_ *p = &c->d[side];
  p->nput++;
  p->inflight += m->len;
  /* Control frames pass beside; a chunk's bytes (in the chunk table:
   * msg.ref) never do, however few. */
  int paced = m->len > FRAME_CTL_MAX || m->ref != NULL;
  if (paced)
    pace_start(s, p, n->idx, to);
  if (m->len > slice_of(s->q, n->idx, m->len)) {
    p->unsent += m->len;
    p->piecing = m;
    send_piece(s, n->idx, ci, m, 0);
    return;
  }
  double up[2];
  double t =
      transfer(s, n->idx, to, m->len, paced, paced ? p->next_ok : 0, up);
  if (paced)
    pace_sent(s, p, n->idx, to, m->len, up, t, m->len, 1);
  t = fmax(t, p->last_arrival);
  p->last_arrival = t;
  if (m->len > SMALL_BYTES) {
    p->unsent += m->len;
    double mark = (double)stitch_swarm_lowat(m->len);
    ev_push_event(s->q,
                  (event){qlink_left(&s->q->up[n->idx], up[0], up[1], mark),
                          n->idx, EV_SENT, NULL, ci, m->len});
  }
  ev_push(s->q, t, to, EV_DATA, m);
}

void queue_publish_central(sim *s, unsigned v) {
  int store = s->n_node; /* host nodes + 1 */
  for (int i = 1; i < s->n_node; i++)
    ev_push(s->q,
            transfer(s, store, i, s->tr.v[v].bytes,
                     s->tr.v[v].bytes > FRAME_CTL_MAX, 0, NULL),
            i, EV_CENTRAL, msg_new(s, MSG_PUBLISH, v, NULL, 0));
}

void queue_wake(sim *s, node *n) {
  uint64_t w = stitch_swarm_wake(n->sw);
  if (w == UINT64_MAX)
    return;
  double t = fmax((double)w / 1e3, s->clock);
  if (t < n->wake_at) { /* a later one already queued fires early: fine */
    n->wake_at = t;
    ev_push(s->q, t, n->idx, EV_WAKE, NULL);
  }
}

/* ---- The loop --------------------------------------------------------- */

/* A message on connection M->conn reached node N: its sender's window has
 * room again, so the sender puts more on the wire. */
static void on_arrival(sim *s, node *n, msg *m) {
  conn *c = s->conn[m->conn];
  int side = side_of(c, n->idx);
  pipe_ *p = &c->d[1 - side];
  p->nput--;
  p->inflight -= m->len;
  on_data(s, n, m->conn, m);
  node_step(s, n);
  node *from = &s->node[c->node[1 - side]];
  if (c->open[1 - side])
    pipe_flush(s, from, m->conn);
}

static void run_event(sim *s, event *e) {
  node *n = &s->node[e->node];
  switch (e->kind) {
  case EV_WAKE:
    if (e->t != n->wake_at)
      return; /* superseded by an earlier one */
    n->wake_at = INFINITY;
    node_step(s, n);
    return;
  case EV_CTL:
    on_ctl(s, n, e->m);
    node_step(s, n);
    break;
  case EV_DATA:
    on_arrival(s, n, e->m);
    break;
  case EV_CENTRAL:
    if (e->m->conn <= s->tr.count && n->done[e->m->conn] < 0)
      n->done[e->m->conn] = s->clock;
    break;
  case EV_JOIN:
    node_join(s, n);
    node_step(s, n);
    return;
  case EV_LEAVE:
    node_leave(s, n);
    return;
  case EV_PIECE: /* the message's next piece (send_piece) */
    send_piece(s, e->node, e->conn, e->m, e->len);
    return;
  case EV_SENT: { /* within its mark: the node may put more on */
    conn *c = s->conn[e->conn];
    int side = side_of(c, n->idx);
    c->d[side].unsent -= e->len;
    if (c->open[side])
      pipe_flush(s, n, e->conn);
    return;
  }
  }
  free(e->m);
}

static void queue_main(int argc, char **argv) {
  (void)argc, (void)argv;
  sim *s = sg_actor_self_get_data();
  qnet *q = s->q;
  for (int i = s->sc.central ? s->n_node : 0; i < s->n_node; i++)
    node_step(s, &s->node[i]);
  double ctl = 0; /* the controller's next turn */
  for (;;) {
    double t = q->n > 0 ? q->heap[0].t : INFINITY;
    int controller = ctl <= t; /* it goes first at equal times */
    if (controller)
      t = ctl;
    /* Nothing reads SimGrid's clock here: a sleep to every event's time
     * cost 6 % of the instructions (docs/simulator.md "Wall time and
     * memory"). */
    if (t > s->clock)
      s->clock = t;
    if (controller) {
      if ((ctl = controller_step(s)) < 0) {
        sg_actor_sleep_until(s->clock);
        return;
      }
      continue;
    }
    event e = ev_pop(q);
    run_event(s, &e);
  }
}

void queue_start(sim *s, void *host) {
  /* Churn as planned: events among the others, in time order. */
  for (int i = 1; i < s->n_node; i++) {
    if (s->node[i].state == NODE_WAITING)
      ev_push(s->q, s->ch.join_s[i], i, EV_JOIN, NULL);
    if (isfinite(s->ch.leave_s[i]))
      ev_push(s->q, s->ch.leave_s[i], i, EV_LEAVE, NULL);
  }
  sg_actor_t a = sg_actor_init("network", host);
  sg_actor_set_data(a, s);
  char *argv[] = {"network", NULL};
  sg_actor_start(a, queue_main, 1, argv);
}

/* The driver's clock, which SimGrid's follows. */
static double queue_now(const sim *s) { return s->clock; }

/* A pipe takes more once none of its bytes waits to leave (EV_SENT). */
static int queue_pipe_ready(const pipe_ *p) { return p->unsent == 0; }

const sim_net sim_net_queues = {
    .now = queue_now,
    .pipe_ready = queue_pipe_ready,
    .ctl_send = queue_ctl_send,
    .send = queue_send,
    .publish_central = queue_publish_central,
    .wake = queue_wake,
    .close_after_data = 0,
    .flushes_on_room = 1,
};
