/* sim.h: what stitch-sim's files share (docs/simulator.md).
 *
 * scenario.c reads a scenario file and computes the lower bound; sim.c,
 * flows.c and queue.c are the driver that runs one unmodified stitch_swarm
 * core per node (driver.h is theirs); platform.cpp builds hosts and links
 * (SimGrid 3.32's C API cannot) and wraps the C calls whose reference
 * handling is broken. */
#ifndef STITCH_SIM_H
#define STITCH_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIM_NAME_MAX 32

typedef struct sim_region {
  char name[SIM_NAME_MAX];
  unsigned nodes;
  double up_mbps, down_mbps, latency_ms;
  /* Optional, 0: a route's one-way jitter bound (at most latency_ms) and
   * loss in percent, as tools/netlab emulates them (faults.c models what
   * they cost); the fraction of the nodes behind a NAT and how many that
   * is (round half to even, as netlab's Python rounds). */
  double jitter_ms, loss_pct, nat;
  unsigned nat_nodes;
} sim_region;

/* A timed event of "faults" (docs/simulator.md, docs/netlab.md "Faults"):
 * times in seconds after the first publish. */
typedef enum sim_fault_kind {
  SIM_FAULT_PARTITION, SIM_FAULT_KILL, SIM_FAULT_SEED_RESTART
} sim_fault_kind;

#define SIM_FAULTS_MAX 16 /* as tools/netlab_faults.py */
/* Above this many nodes a file that leaves "network" out runs on the
 * queues network: SimGrid's solver costs about messages x concurrent
 * flows, 20 % of a run at 200 nodes and growing (docs/simulator.md) */
#define SIM_FLOWS_MAX_NODES 250

typedef struct sim_fault {
  sim_fault_kind kind;
  double at_s, end_s;  /* partition: at_s + for_s; else restart_at_s */
  int a, b;            /* partition: region indices */
  double fraction;     /* kill: 0 when nodes[] are listed */
  unsigned *nodes;     /* kill: node numbers from 0 (region order),
                          ascending; malloc'd (sim_scenario_free) */
  unsigned n_nodes;
} sim_fault;

typedef struct sim_scenario {
  /* Required keys (docs/simulator.md). */
  char seed_region[SIM_NAME_MAX];
  double seed_up_mbps;
  sim_region *regions; /* malloc'd; sim_scenario_free */
  size_t n_regions;
  double inter_mbps, inter_latency_ms;
  double inter_jitter_ms, inter_loss_pct; /* optional, 0 */
  unsigned versions;
  uint64_t version_bytes; /* the checkpoint's served bytes */
  double interval_s;
  double first_interval_s; /* versions.first_interval_s: from the first
                             publish to the second; interval_s */
  double leave_per_min, join_per_min;
  int central;            /* mode "central" */
  double central_mbps;
  double time_limit_s;
  /* Optional keys, with their defaults. */
  double seed_down_mbps;  /* seed.down_mbps: seed.up_mbps */
  double change;          /* versions.change: 0.01 of the weights per step */
  uint64_t chunk_bytes;   /* versions.chunk_bytes: 0, the library's */
  unsigned tensors;       /* versions.tensors: 0, as many of at most
                             16 MiB as the bytes need */
  uint64_t rng_seed;      /* "rng_seed": 1 */
  unsigned max_peers, cross_region, pipeline; /* "swarm": 0, the core's */
  int queues;             /* "network": "flows" (0, SimGrid's max-min
                             flows) or "queues" (1, link queues: scale);
                             left out or "auto": stitch-sim's choice */
  /* Empty, or the line stitch-sim says on stderr when it chose the queues
   * network for a file that left the choice to it, and why */
  char network_note[256];
  unsigned nodes;         /* derived: the sum over regions */
  sim_fault faults[SIM_FAULTS_MAX]; /* "faults", in the file's order */
  unsigned n_faults;
  /* Empty, or why stitch-sim cannot simulate the file (faults on the
   * flows network, which has no way to hold a route's packets), as one
   * line naming the key. The loader accepts such a file, so that the
   * bound can be given for it (stitch-sim --bounds); sim.c refuses to run
   * it. */
  char unsimulated[256];
} sim_scenario;

/* Reads PATH into *sc. On failure returns -1 with one line in ERR
 * ("scenario.json: regions[1].up_mbps: expected a number"). */
int sim_scenario_load(const char *path, sim_scenario *sc, char *err,
                      size_t errlen);
void sim_scenario_free(sim_scenario *sc);

/* The lower bound (seconds) for every node to receive F bytes that only
 * the seed holds: Kumar-Ross, tightened by the region links
 * (docs/simulator.md gives the formula). */
double sim_bound(const sim_scenario *sc, uint64_t f);
/* What no single node can beat: max(F/u_s, F/d_max). */
double sim_node_bound(const sim_scenario *sc, uint64_t f);
/* One-way latency (ms) from a host of region A to one of region B (A == B:
 * two hosts of one region): half of each region's latency_ms, and
 * inter_region.latency_ms between regions, as both networks route it. */
double sim_route_ms(const sim_scenario *sc, const sim_region *a,
                    const sim_region *b);

/* The one-way latency (seconds) from the seed to the farthest node: the
 * bound leaves it out, so tiny versions are latency-bound, not
 * bandwidth-bound (docs/simulator.md). */
double sim_latency(const sim_scenario *sc);

/* Issue 36's rules for a swarm: the seed sends each version at most
 * SIM_SEED_BUDGET times, and it crosses into each region about once
 * (SIM_CROSS_BUDGET times). sim_bound and sim_latency assume neither: the
 * seed may send many copies, a region may take all it needs from other
 * regions. The budget reference is what is left to a swarm that keeps
 * both (docs/simulator.md "The budget reference"). */
#define SIM_SEED_BUDGET 1.2
#define SIM_CROSS_BUDGET 1.0
/* sim_bound, and: the nodes upload all but the seed's SIM_SEED_BUDGET F;
 * each region uploads to its own nodes all but the SIM_CROSS_BUDGET F that
 * comes in from other regions (and the seed's budget, in the seed's). */
double sim_budget_bound(const sim_scenario *sc, uint64_t f);
/* sim_latency, and: a region the seed cannot feed whole from its budget
 * takes some chunk through a node of another region (two routes), and a
 * region whose nodes need more than comes from outside it passes each
 * chunk once more inside (one of its own routes). Seconds. */
double sim_budget_latency(const sim_scenario *sc);

/* ---- churn.c: nodes leaving and joining ------------------------------- */

/* Every node that ever runs, planned before the run: slot 0 is the seed,
 * 1..nodes the initial nodes (region order), then the joiners in order of
 * joining. Leaves and joins are two Poisson processes over [start_s,
 * end_s) drawn from the scenario's rng_seed; a leave takes a live non-seed
 * node uniformly, a joiner's region is drawn in proportion to the regions'
 * sizes. Which nodes are alive when depends on nothing but the scenario,
 * so two builds of the core face the same churn. */
typedef struct sim_churn {
  double start_s, end_s; /* the window; empty without churn */
  unsigned slots;        /* 1 + nodes + joins */
  unsigned joins, leaves;
  double *join_s;  /* [slot]: 0 for the seed and the initial nodes */
  double *leave_s; /* [slot]: INFINITY for a node that stays */
  int *region;     /* [slot]: an index into the scenario's regions */
} sim_churn;

/* At most this many leaves plus joins: a scenario asking for more is
 * almost surely a typo, and each joiner is a node's memory. */
#define SIM_CHURN_MAX 1000000u

/* Plans SC's churn over [START_S, END_S). On failure returns -1 with one
 * line in ERR. */
int sim_churn_plan(const sim_scenario *sc, double start_s, double end_s,
                   sim_churn *ch, char *err, size_t errlen);
void sim_churn_free(sim_churn *ch);

/* ---- trajectory.c: the versions, really chunked ----------------------- */

/* Every distinct chunk of every version, once; nodes keep bitsets over it. */
typedef struct sim_chunks {
  uint8_t (*hash)[32];
  uint8_t **buf;
  size_t *len;
  size_t n, cap;
  uint32_t *slot; /* open addressing: index + 1, 0 empty */
  size_t slot_cap;
} sim_chunks;

/* Index of the chunk named HASH, or -1. */
long sim_chunks_find(const sim_chunks *t, const uint8_t hash[32]);

typedef struct sim_version {
  uint64_t version;
  uint8_t *manifest; /* signed bytes, as the seed publishes them */
  size_t manifest_len;
  uint64_t bytes;    /* F: the cheapest plan from the previous version */
  uint64_t chunks;   /* chunks of that plan */
  uint32_t *all;     /* every chunk of every object, as table indices */
  size_t n_all;
} sim_version;

typedef struct sim_trajectory {
  uint8_t swarm_pk[32], swarm_sk[64];
  sim_version *v; /* v[1..count] */
  unsigned count;
  sim_chunks chunks;
  uint64_t view_bytes;
} sim_trajectory;

/* Publishes SC's versions with stitch_publish into a temporary store (an
 * Adam-like trajectory of BF16 tensors, SC->change of the weights moving
 * one step per version; or, with STEPS_DIR, its step_0000.safetensors ..
 * step_{versions - 1}, as stitch-synth writes them) and loads manifests
 * and chunks into memory. */
int sim_trajectory_make(const sim_scenario *sc, const char *steps_dir,
                        sim_trajectory *tr, char *err, size_t errlen);
void sim_trajectory_free(sim_trajectory *tr);

uint64_t sim_xorshift(uint64_t *s);

/* ---- report.c: what a run measured ----------------------------------- */

/* Ready links to a node's own region, over the live nodes other than the
 * seed, at a version's publish. */
typedef struct sim_links {
  unsigned min, p50;
} sim_links;

typedef struct sim_result {
  const char *mode;
  const char *network; /* "flows" or "queues": the one that ran */
  unsigned nodes, versions; /* nodes: at start */
  unsigned slots;           /* every node that ran, [0] the seed (churn.c) */
  const sim_version *v; /* [1..versions] */
  const double *published;          /* [version], seconds */
  const double *done;               /* [node * (versions + 1) + version] */
  const double *join_s, *left_s;    /* [node]: joined (inf: never), left
                                       (inf: stayed) */
  int churn;                        /* the scenario has churn */
  unsigned nodes_left, nodes_joined;
  const uint64_t *egress;           /* [node], bytes on the wire */
  const uint64_t *link_bytes;       /* [node], its uplink's bytes with
                                       headers and acknowledgements;
                                       NULL on the flows network */
  const uint64_t *seed_bytes, *cross_bytes; /* [version] */
  const uint64_t *cross_home_bytes; /* [version]: into the seed's region */
  const double *bound, *node_bound; /* [version] */
  const double *budget_bound;       /* [version]; NULL in central mode */
  const sim_links *links;           /* [version], at its publish */
  double latency_s, budget_latency_s;
  double wall_s, sim_s;
  int finished;
  uint64_t verify_failures, bad_writes, apply_errors, bans;
  uint64_t chunks_needed, chunks_stored, chunks_twice;
  uint64_t manifests_sent; /* copies every core sent, the seed's too */
  double rss_base_mib, rss_peak_mib;
} sim_result;

/* The --json object; PER_NODE adds every node's completion times and
 * egress (for plots). The caller owns the result. */
/* Sorts the times T[0..n) ascending; the Q-quantile (nearest rank) of
 * sorted T, NAN when N is 0 (INFINITY marks "never"). */
void sim_sort_times(double *t, size_t n);
double sim_quantile(const double *t, size_t n, double q);
void *sim_report_json(const sim_result *r, int per_node);
void sim_report_text(const sim_result *r, FILE *f);
/* --bounds: for versions of BYTES[0..n) bytes (version i + 1 has
 * BYTES[i]), what a run of SC would report as bound_s, node_bound_s,
 * lb_s, budget_bound_s and budget_lb_s, and latency_s and
 * budget_latency_s, with nothing simulated: tools/netlab gives its
 * real versions' bytes, so the bound's formula lives here alone. The
 * caller owns the result. */
void *sim_bounds_json(const sim_scenario *sc, const uint64_t *bytes,
                      size_t n);
/* FIELD ("VmRSS:", "VmHWM:") of /proc/self/status, in MiB. */
double sim_rss_mib(const char *field);
/* A monotonic clock, seconds. */
double sim_wall(void);
/* Writes JSON to DIR/sim.json and runs plot.py on it. */
int sim_plot(const char *dir, void *json);

/* ---- platform.cpp ----------------------------------------------------- */

/* Builds the platform: HOSTS[slot] for every slot of CH (the seed, the
 * nodes in region order, the joiners in CH's regions), HOSTS[CH->slots]
 * the central store (central mode). */
int sim_platform_build(const sim_scenario *sc, const sim_churn *ch,
                       void **hosts, char *err, size_t errlen);
/* A platform of one host (HOSTS[0]), for the queues network, whose links
 * the driver keeps itself. */
int sim_platform_one(void **hosts, char *err, size_t errlen);
/* sg_comm_wait_any_for without 3.32's bug: on timeout the C call drops a
 * reference to every comm it was given. This keeps the caller's references
 * to comms that did not finish and drops the one to the comm that ended.
 * Returns its index (*FAILED set when it failed: its other end was
 * cancelled), -1 on timeout, -2 on any other error. */
long sim_wait_any_for(void **comms, size_t n, double timeout, int *failed);
/* Cancels a pending comm and drops the caller's reference (3.32's C API
 * has no cancel): a get on a closed pipe would otherwise stay in its
 * actor's activity list, which SimGrid scans on every completion. */
void sim_comm_cancel(void *comm);

#ifdef __cplusplus
}
#endif
#endif
