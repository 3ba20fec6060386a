/* driver.h: the state stitch-sim's driver files share (docs/simulator.md).
 *
 * sim.c holds what does not depend on how bytes move: the cores and their
 * io, connections, applying, the controller, reporting. Bytes move by one
 * of two networks, chosen by the scenario's "network" key:
 *
 * - flows.c ("flows"): every message is a SimGrid comm, so SimGrid's
 *   max-min model shares every link among the flows crossing it. Faithful,
 *   but SimGrid re-solves the shared links of all concurrent flows at every
 *   start and end (they form one component), so a run costs about
 *   messages x concurrent flows: a few hundred nodes at most.
 * - queue.c ("queues"): each link is a FIFO queue at message granularity
 *   (a large message in pieces of QUEUE_SLICE, so concurrent chunks
 *   interleave),
 *   kept by the driver, and one SimGrid actor runs every core from one
 *   event heap. A message costs O(links on its route): thousands of nodes.
 *
 * Either way every core is the unmodified stitch_swarm; no protocol logic
 * lives here. */
#ifndef STITCH_SIM_DRIVER_H
#define STITCH_SIM_DRIVER_H

#define _GNU_SOURCE /* ssize_t in SimGrid's headers */
#include "sim.h"

#include "stitch/swarm.h"

#include <simgrid/forward.h>

#include <math.h>

/* A pipe takes another message while fewer bytes than this are in flight
 * on it, as a TCP window of about two chunks; each message carries what
 * the core has pending, up to this much, whole (cutting a chunk to the
 * window's room made its receiver buffer it piece by piece: twice the
 * CPU; on the queues network it leaves the uplink in pieces, QUEUE_SLICE
 * below, but arrives whole). On the queues network a pipe also takes
 * more only while each of its messages over SMALL_BYTES (queue.c) is
 * within its low-water mark
 * (stitch_swarm_lowat: an eighth of it, at least 16 KiB) of leaving the
 * sender's uplink (pipe_.unsent is 0), as stitchd's sockets
 * (TCP_NOTSENT_LOWAT, src/net): a chunk is handed over when the
 * uplink is about to want it, so the core chooses whom to serve then,
 * not a window's worth of chunks earlier. Without it every pipe with
 * requests kept 1 MiB booked on the uplink (about 100 ms at 1 Gbit/s
 * shared by a dozen requesters), and the requesters furthest behind,
 * served first by the core, got the same share as the rest; with a mark
 * of 64 or 128 KiB whatever the chunk, 64 KiB chunks went two at a time
 * (docs/history/simulator.md "Chunks handed over when the uplink wants
 * them"). */
#define PIPE_WINDOW (1u << 20)
/* A message arrives whole, where a TCP stream's bytes come as they
 * cross: so a message is at most what its route's narrowest link moves
 * in MSG_SPAN_S, but at least MSG_MIN (a 64 KiB chunk goes whole) and at
 * most PIPE_WINDOW. Whole messages of up to 1 MiB on a 5 Mbit/s uplink
 * shared by a few requesters brought a 512 KiB chunk frame's header
 * seconds before its bytes, and the receiving core dropped the link for
 * "a frame that comes too slowly" (CORE_FRAME_MIN_RATE, 32 KiB/s, after
 * 5 s): no node of netlab_sym.json in 512 KiB chunks ever held a chunk.
 * A message of MSG_MIN comes within 2 s at that rate. Links of 84 Mbit/s
 * and more are not touched (1 MiB in 0.1 s). */
#define MSG_SPAN_S 0.1
#define MSG_MIN (64u << 10)
/* A node's pos_of entry with this bit: the link cannot take bytes until
 * pipe_flush (sim_net.flushes_on_room). */
#define POS_HELD 0x80000000u
/* Queues: a chunk leaves its sender's uplink in pieces (queue.c
 * slice_of), each booked on the route's links only once the one before
 * has nearly left, so the pipes of one sender that have a chunk each take
 * turns on its uplink, as the TCP sockets of stitchd do: the kernel hands
 * the uplink's queue each socket's segments in TSO bursts, interleaved,
 * so concurrent chunks share the uplink and each is whole only about when
 * all are. A burst is about 1 ms of the socket's pacing rate
 * (QUEUE_TSO_S), at least two segments, at most 64 KiB (QUEUE_SLICE):
 * at 10 Mbit/s two segments, so 16 KiB chunks interleave, where as one
 * 64 KiB burst each they went whole one after the other and the copies
 * a node served of a small version finished in turn, not together (the
 * queues network's deltas came 23-30 % before netlab's, docs/simulator.md
 * "The simulator against netlab"). A message is cut in at most
 * QUEUE_PIECES pieces of less than QUEUE_SLICE, which bounds the
 * events. The receiver still gets the message whole, when its last piece
 * is in. Whole messages went one after the other at the full rate: the
 * first of 7 chunks the seed hands out at once was whole after one
 * chunk's time, where on netlab (real sockets, links shaped by htb) none
 * was until about all 7 had gone, and the simulator's anchors came 31 %
 * early on netlab_sym.json. Flows share links by max-min already. */
#define QUEUE_SLICE (64u << 10)
#define QUEUE_TSO_S 1e-3
#define QUEUE_MSS 1448.0
#define QUEUE_PIECES 8
/* What LEN bytes of a connection take on a link: each TCP segment of at
 * most QUEUE_MSS carries WIRE_HDR bytes of headers (Ethernet, IPv4, TCP
 * with timestamps), as htb and an interface's counters see them
 * (docs/simulator.md "What the links carry"). */
#define WIRE_HDR 66.0
/* Flows: at most this many messages handed over per pipe (its sent[]
 * array), on the links one at a time, in order. The queues network has
 * no such cap, as TCP has none: it held chunks behind HAVEs on far
 * links. */
#define PIPE_MSGS 16
/* At most this: a control frame (HAVE, REQUEST, ...), which passes beside
 * the queues (queue.c) and whose loss costs its own packet only. Below the
 * smallest chunk the publisher makes (16 KiB, or one small block). */
#define FRAME_CTL_MAX 2048
#define CTL_BYTES 64  /* simulated size of DIAL, ACCEPT, CLOSE */
#define SIM_WARMUP_S 2.0 /* nodes join before version 1 */

/* MSG_UNREACH answers a DIAL that no process takes: a node behind a NAT
 * (none of its own dialers), or a killed one whose host is up (the
 * kernel's reset): the dialer's core hears stitch_swarm_dial_failed, as
 * stitchd's does on a refused connect. */
typedef enum msg_kind {
  MSG_DATA, MSG_DIAL, MSG_ACCEPT, MSG_REFUSE, MSG_CLOSE, MSG_PUBLISH,
  MSG_UNREACH
} msg_kind;

/* One message. Bytes that lie in the chunk table (a chunk's payload, which
 * the core hands out uncopied) are referenced, not copied: thousands of
 * nodes with a few chunks in flight each would not fit otherwise. */
typedef struct msg {
  msg_kind kind;
  uint32_t conn; /* or the version, for MSG_PUBLISH */
  size_t len;
  const uint8_t *ref; /* the bytes, when not in data[] */
  double extra;       /* flows: its route's jitter and loss recovery (s),
                         drawn when it is sent (sim_path) */
  uint8_t data[];
} msg;

/* Flows: a message a pipe took, its length and its bytes on the links. */
typedef struct sent_msg {
  msg *m;
  size_t len;
  long bytes;
} sent_msg;

typedef struct pipe_ {
  sg_mailbox_t mb; /* flows: its mailbox; the receiver is fixed */
  sg_comm_t get;   /* flows: the receiver's pending get, or NULL */
  msg *got;
  /* flows: the messages taken, in order; the first on the links (put),
   * the others waiting their turn */
  sent_msg sent[PIPE_MSGS];
  sg_comm_t put;
  int nput;                  /* messages in flight (both networks) */
  size_t inflight;           /* their bytes */
  size_t unsent; /* queues: bytes of messages not yet within their mark */
  double last_arrival; /* keeps the pipe in order (flows: its receiver's) */
  /* queues: a message leaving in pieces (QUEUE_SLICE), the latest
   * arrival of its pieces so far, and a CLOSE that waits for it to be
   * whole (as a FIN after the data) */
  msg *piecing;
  double piece_arrival;
  int close_after;
  /* queues: the pipe's pace (queue.c, pace_*): BW, the rate it has
   * found its path gives it (bytes/s; 0 until its first sample, unpaced
   * then), set at BW_AT; when its next piece may start on the uplink;
   * when its probing started; when its last piece left the uplink; the
   * first piece of the message it sends (its arrival, -1 before it, when
   * it left the uplink, and its bytes). */
  double bw, bw_at, next_ok, cycle0, busy_until, first_arrival, first_left;
  size_t first_len;
  size_t msg_max; /* the longest message it takes (sim.c msg_max) */
} pipe_;

typedef struct conn {
  int node[2];      /* [0] dialed [1] */
  int open[2];      /* that side's core holds the peer */
  int closed;
  int fin[2];       /* flows: CLOSE waits for that side's sends in flight */
  uint32_t peer[2]; /* the id each side's core gave */
  unsigned life;    /* the dialer's life when it dialed (node.life) */
  unsigned flags;   /* the CONNECT's STITCH_SWARM_DIAL_* */
  pipe_ d[2];       /* d[s]: from node[s] to node[1 - s] */
} conn;

struct sim;

/* Churn (churn.c plans it): a joiner waits for its time, a leaver is gone
 * for good; only live nodes run a core and count toward completion. */
typedef enum node_state { NODE_WAITING, NODE_LIVE, NODE_LEFT,
                          NODE_DOWN /* killed (faults), back later */
} node_state;

/* Punch dials a node has waiting at once (the core has at most
 * PUNCH_INFLIGHT), and how long a NAT's mapping of the first one's SYN
 * lets the other side's in: its SYN is retried at 1 and 3 s. */
#define SIM_PUNCH_WAITING 4
#define SIM_PUNCH_MS 5000

typedef struct node {
  struct sim *sim;
  int idx, region;
  node_state state;
  sg_host_t host; /* flows */
  stitch_swarm *sw; /* NULL unless live (and always in central mode) */
  stitch_swarm_stats past; /* its cores' counters over lives that ended
                              (a leave, a kill), added to the live one */
  int nat;                  /* behind a NAT: takes no inbound link */
  unsigned life;            /* its core's starts: a restart is a new one */
  int boot[3], n_boot;      /* the nodes it was first told of (a restart
                               is told of them again, as stitchd's
                               command line) */
  stitch_pubkey pk;         /* its keys, kept for a restart */
  stitch_seckey sk;
  uint64_t known;           /* newest manifest its core held when killed */
  uint64_t nat_refused, nat_out; /* DIALs to it refused; its links out */
  /* Its punch dials waiting for the other side's (sim.c dial): the NAT
   * holds a mapping toward punch_to[k] since punch_at[k] (ms, 0: free). */
  int punch_to[SIM_PUNCH_WAITING];
  uint64_t punch_at[SIM_PUNCH_WAITING];
  double join_s, left_s;    /* when it joined (0: at start), left (or inf) */
  uint64_t key_seed;        /* a joiner's keys and first peers */
  uint64_t rng;
  uint64_t *have, *needed; /* bitsets over the chunk table */
  uint64_t held;
  stitch_digest held_id;
  double *done; /* [version]: seconds, < 0 not yet */
  uint32_t *conns;
  size_t n_conns, cap_conns;
  /* pos_of[ID]: the place in conns of the link of its core's peer ID,
   * plus one (0: none), for IDs below n_pos, with POS_HELD set while
   * its window or mark holds the link (sim.c pipe_put); and the places
   * flush asks, in order (sim.c). */
  uint32_t *pos_of;
  size_t n_pos;
  uint32_t *flush_at;
  size_t cap_flush;
  sg_mailbox_t ctl; /* flows: control messages */
  sg_comm_t ctl_get;
  msg *ctl_msg;
  /* flows: messages whose bytes have come and whose route's latency has
   * not yet passed (flows.c hold), a heap by due time */
  struct late *late;
  size_t n_late, cap_late;
  uint64_t late_seq;
  double wake_at; /* queues: the earliest wake-up queued for it */
  uint64_t stored, needed_n, bad_writes, apply_errors, tick_errors;
  uint64_t wire_up; /* bytes this node put on the wire */
  uint64_t ramp_held; /* of version 1's chunks (STITCH_SIM_RAMP) */
} node;

typedef struct snap {
  uint64_t seed_up, cross;
  uint64_t cross_home; /* of cross, into the seed's region */
  sim_links links;
} snap;

struct qnet;
typedef struct faults faults;
typedef struct sim sim;
typedef struct sim_busy sim_busy;

/* A network model's operations (flows.c: SimGrid comms; queue.c: link
 * queues): sim.c calls the chosen one's, never a model by name. NULL:
 * the model has nothing to do there. */
typedef struct sim_net {
  /* The simulated time, seconds. */
  double (*now)(const sim *s);
  /* Whether pipe P may take more bytes now (within PIPE_WINDOW). */
  int (*pipe_ready)(const pipe_ *p);
  /* A control message (DIAL, ACCEPT, CLOSE, ...) from host FROM to TO. */
  void (*ctl_send)(sim *s, int from, int to, msg_kind kind, uint32_t c);
  /* N's bytes M on connection CI. */
  void (*send)(sim *s, node *n, uint32_t ci, msg *m);
  /* Central mode: the store sends version V to every node. */
  void (*publish_central)(sim *s, unsigned v);
  /* N's core knows CI's peer: take what arrives; N's side closed. */
  void (*listen)(sim *s, node *n, uint32_t ci);
  void (*unlisten)(sim *s, node *n, uint32_t ci);
  /* N's core wants a tick at stitch_swarm_wake. */
  void (*wake)(sim *s, node *n);
  /* 1: a CLOSE waits until the data sent before it was taken (flows);
   * 0: the model orders it after them itself (queues). */
  int close_after_data;
  /* 1: the model calls pipe_flush whenever a pipe's window or mark
   * frees room (queues), so a flush may pass over a held link unread;
   * 0: it may free room unannounced (flows), and every flush asks. */
  int flushes_on_room;
} sim_net;

extern const sim_net sim_net_flows, sim_net_queues;

/* What a route does to a message (faults.c sim_path). */
typedef struct sim_route {
  double depart;  /* when it can leave (a partition holds it) */
  double inflate; /* its bytes on the links: loss's retransmissions */
  double extra;   /* added to its arrival: jitter, loss recovery */
} sim_route;

struct sim {
  sim_scenario sc;
  sim_trajectory tr;
  struct span { const uint8_t *p; size_t len; } *stable; /* chunk
                                  buffers, ascending: msg_new's test */
  size_t n_stable;
  node *node; /* [0] the seed, [1..nodes] */
  int n_node;
  conn **conn;
  size_t n_conn, cap_conn;
  double *published; /* [version] */
  snap *at;          /* [version]: counters when it was published */
  snap end;
  unsigned next_version; /* the controller's next publish */
  int finished;
  double end_s;
  double clock; /* queues: the driver's clock (SimGrid's follows it) */
  struct qnet *q;
  const sim_net *net; /* &sim_net_flows or &sim_net_queues */
  uint64_t refused, messages, events;
  int verbose; /* STITCH_SIM_LOG=1: every core's log lines on stderr */
  int chunk_log; /* STITCH_SIM_LOG=2: and a line a chunk (swarm.h) */
  uint64_t *ramp_v1; /* STITCH_SIM_RAMP=1: version 1's chunks, a bitset
                        over the table (node_ramp); NULL: no ramp lines */
  uint64_t ramp_n;   /* bits set in ramp_v1 */
  double wall0, progress_s, progress_at; /* progress lines on stderr */
  FILE *trace; /* --trace: a CSV row per controller turn */
  double trace_t;
  uint64_t trace_up, trace_seed;
  uint64_t *trace_region; /* five blocks of [region], the total last:
                             bytes down at the last row, bytes down now,
                             live nodes now, bytes up at the last row,
                             bytes up now */
  sim_churn ch; /* node slots, who joins and leaves when */
  unsigned nodes_left, nodes_joined;
  faults *faults;    /* faults.c; NULL without */
  uint64_t path_rng; /* loss draws (faults.c sim_path) */
  unsigned n_nat;
  int nat_punch;     /* STITCH_SIM_NAT_PUNCH=1: NATed pairs may link (the
                        most coordinated hole punching could give) */
  int up_told; /* STITCH_SIM_UP_TOLD=1: each node is told its uplink's
                  rate (swarm.h up_bytes_per_s), as stitchd --up-mbit */
  int wire; /* what the links carry counts TCP/IP's headers, and on the
               queues network control frames and acknowledgements
               (sim_wire_bytes); STITCH_SIM_WIRE=0: the core's bytes
               alone */
  uint64_t nat_accepted, nat_punched, dials_unreach;
  uint64_t punch_opened; /* connections two punch dials made */
  uint64_t loss_recoveries; /* messages that paid a loss's recovery */
  double loss_resent;       /* bytes sent again for loss */
  struct sim_busy *busy;    /* busy.c: each version's upload per region */
};

/* What a message of LEN bytes takes on a link (WIRE_HDR). */
static inline double sim_wire_bytes(const sim *s, double len) {
  return s->wire ? len + ceil(len / QUEUE_MSS) * WIRE_HDR : len;
}

/* sim.c */
void die(const char *what) __attribute__((noreturn));
void *sim_calloc(size_t n, size_t size); /* dies when out of memory */
double now_s(const sim *s);
uint64_t now_ms(const sim *s);
msg *msg_new(const sim *s, msg_kind kind, uint32_t c, const uint8_t *buf,
             size_t len);
const uint8_t *msg_bytes(const msg *m);
/* Which side of C node IDX is (0: it dialed). */
static inline int side_of(const conn *c, int idx) { return c->node[1] == idx; }
#define SIM_NO_PEER UINT32_MAX
void node_add_conn(node *n, uint32_t c, uint32_t peer);
/* Handles a control message (DIAL, ACCEPT, REFUSE, CLOSE, PUBLISH). */
void on_ctl(sim *s, node *n, msg *m);
/* Hands N's core a message that arrived on connection CI. */
void on_data(sim *s, node *n, uint32_t ci, msg *m);
/* After any input: ticks N's core when due, carries out its actions and
 * puts what it has for each peer on the wire. */
void node_step(sim *s, node *n);
/* Puts what N's core has for the peer of connection CI on the wire, up to
 * the pipe's window. */
void pipe_flush(sim *s, node *n, uint32_t ci);
/* The controller: publishes what is due, checks completion. Returns when
 * it next wants to run, or a negative number when the run is over. */
double controller_step(sim *s);
/* Churn, at the times s->ch planned, on the node's own turn (its actor in
 * flows, an event in queues). A joiner starts a core with an empty store
 * and the peers a fresh stitchd is given; the caller then steps it. A
 * leaver closes every connection as an ordinary CLOSE does, and its core
 * stops (freed). */
void node_join(sim *s, node *n);
void node_leave(sim *s, node *n);
/* kill -9 of N (faults.c): its connections reset, its core stops; its
 * store and weights stay, as stitchd's on disk. node_restart starts a
 * core again with the same keys, store and held version, told of the
 * same peers, and steps it. */
void node_kill(sim *s, node *n);
void node_restart(sim *s, node *n);

/* faults.c */
void nat_assign(sim *s);
void faults_init(sim *s); /* dies with one line on a bad plan */
void faults_free(sim *s);
double faults_next(const sim *s); /* the next event's time, or inf */
void faults_due(sim *s, double now);     /* carries out events due */
void faults_observe(sim *s, double now); /* after each controller turn */
int faults_done(const sim *s);       /* every event out, each converged */
int faults_converged(const sim *s);  /* each fault converged */
void *faults_json(const sim *s);     /* the "faults" array */
/* Does a partition hold the route from host A to host B at T? */
int sim_path_cut(const sim *s, int a, int b, double t);
/* What the route from host A to host B does to a message of BYTES sent
 * at NOW (BULK: larger than a control frame). */
void sim_path(sim *s, int a, int b, size_t bytes, int bulk, double now,
              sim_route *out);

/* flows.c: SimGrid comms */
void flows_ctl_send(sim *s, int from, int to, msg_kind kind, uint32_t c);
void flows_listen(sim *s, node *n, uint32_t ci);
void flows_unlisten(sim *s, node *n, uint32_t ci);
void flows_send(sim *s, node *n, uint32_t ci, msg *m);
void flows_publish_central(sim *s, unsigned v);
void flows_start(sim *s, void **hosts);

/* queue.c: link queues */
void queue_init(sim *s); /* dies when out of memory */
void queue_free(sim *s);
void queue_ctl_send(sim *s, int from, int to, msg_kind kind, uint32_t c);
void queue_send(sim *s, node *n, uint32_t ci, msg *m);
/* What host HOST's uplink carried: the core's bytes with TCP/IP headers,
 * control frames and acknowledgements (docs/simulator.md "What the links
 * carry"). */
uint64_t queue_link_bytes(const sim *s, int host);
void queue_publish_central(sim *s, unsigned v);
/* N's core wants a tick at stitch_swarm_wake: queue the wake-up. */
void queue_wake(sim *s, node *n);
void queue_start(sim *s, void *host);

/* ---- busy.c: each version's upload, per region ----------------------- */

/* A node's core's counters, its past lives' added (sim.c). */
void sim_node_stats(const node *n, stitch_swarm_stats *st);
int sim_busy_init(sim *s);
void sim_busy_free(sim *s);
/* Version V was published now / node N came to hold it now. */
void sim_busy_publish(sim *s, unsigned v);
void sim_busy_held(sim *s, const node *n, unsigned v);
/* Adds each version's window_s, up_busy, seed_up_busy and regions to the
 * report's "versions" array (a json_t *). */
void sim_busy_json(const sim *s, void *versions);

/* ---- results.c: what a run prints ------------------------------------ */

/* Prints the run's figures (JSON with AS_JSON, else text) and, with
 * PLOT_DIR, its plots; returns the plots' status. */
int sim_run_report(sim *s, double wall_s, double rss_base, int as_json,
                   const char *plot_dir);
/* stitch-sim SCENARIO --bounds LIST: the references alone; an exit
 * status. */
int sim_print_bounds(const char *path, const char *list);

#endif
